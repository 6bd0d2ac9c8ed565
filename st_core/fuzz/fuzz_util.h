// Helpers shared by the fuzz targets in st_core/fuzz/ (docs/security.md,
// "Fuzzing"). A broken invariant prints what broke and aborts, so libFuzzer
// (or the replay driver of the regular build) reports the input as a crash.
#ifndef ST_CORE_FUZZ_FUZZ_UTIL_H_
#define ST_CORE_FUZZ_FUZZ_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#define ST_FUZZ_CHECK(cond, ...)                                                               \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                       \
      std::fprintf(stderr, "\n");                                                              \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace st {
namespace fuzz {

// True if the bytes of `inner` lie inside those of `outer` (a decoded view
// must point into the payload it came from).
inline bool Within(std::string_view inner, std::string_view outer) {
  if (inner.empty()) return true;
  const char* b = outer.data();
  const char* e = outer.data() + outer.size();
  return inner.data() >= b && inner.data() + inner.size() <= e;
}

}  // namespace fuzz
}  // namespace st

#endif  // ST_CORE_FUZZ_FUZZ_UTIL_H_
