// The shared test vectors of tests/vectors/ (checked by the Python side too).
#ifndef ST_CORE_TESTS_VECTORS_H_
#define ST_CORE_TESTS_VECTORS_H_

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace st {
namespace test {

// tests/vectors/<name> parsed; a test failure if it cannot be read.
inline nlohmann::json LoadVectors(const std::string& name) {
  std::string path = "tests/vectors/" + name;
  std::string text = ReadSourceFile(path);
  EXPECT_FALSE(text.empty()) << "cannot read " << path;
  return nlohmann::json::parse(text);
}

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_VECTORS_H_
