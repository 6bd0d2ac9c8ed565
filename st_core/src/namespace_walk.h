// The walk of a namespace root that the scrubber's inventory (scrub_plan.h)
// and the infofile mirror (meta_mirror.h) share: both look at every regular
// file under the root, and tell apart a walk that saw everything from one
// that did not (only a complete walk may take a file id for deleted).
//
//   - recursively from the root, depth first; entries named ".st-*" (the
//     tracker's files being created) are skipped;
//   - symbolic links are followed, and each directory is visited once (by
//     device and inode), so a link loop ends;
//   - every regular file is handed to the visitor with its stat; other
//     entries (sockets, devices, dangling links) are passed over.
//
// A directory below the root that cannot be listed, or an entry that cannot
// be stat'ed, makes the walk incomplete (logged as "<log_tag>: ..."), unless
// it vanished meanwhile (NotFound). The root itself must be readable.
#ifndef ST_CORE_NAMESPACE_WALK_H_
#define ST_CORE_NAMESPACE_WALK_H_

#include <atomic>
#include <functional>
#include <string>

#include "env.h"
#include "status.h"

namespace st {

struct NamespaceWalkOptions {
  std::string root;                           // the namespace root
  const char* log_tag = "walk";               // "scrub", "mirror": log lines start with it
  const char* cancelled = "walk cancelled";   // the Unavailable message when cancelled
  const std::atomic<bool>* cancel = nullptr;  // checked before each directory and entry
};

// Called for each regular file; a status other than OK stops the walk and
// is returned. It may set *complete (WalkNamespace's) to false itself.
using NamespaceVisitor = std::function<Status(const std::string& path, const FileInfo& st)>;

// Walks o.root. *complete is set to true first, then false as above.
// Unavailable if the root cannot be stat'ed or listed or is not a directory
// (nothing is visited then), or if *o.cancel becomes true.
Status WalkNamespace(Env* env, const NamespaceWalkOptions& o, const NamespaceVisitor& visit,
                     bool* complete);

}  // namespace st

#endif  // ST_CORE_NAMESPACE_WALK_H_
