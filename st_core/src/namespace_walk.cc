#include "namespace_walk.h"

#include <set>
#include <utility>
#include <vector>

#include "log.h"

namespace st {

Status WalkNamespace(Env* env, const NamespaceWalkOptions& o, const NamespaceVisitor& visit,
                     bool* complete) {
  auto cancelled = [&o] {
    return o.cancel != nullptr && o.cancel->load(std::memory_order_relaxed);
  };
  *complete = true;
  FileInfo root_st;
  Status s = env->GetFileInfo(o.root, &root_st);
  if (!s.ok()) return Status::Unavailable("namespace root: " + s.message());
  if (!root_st.is_dir) {
    return Status::Unavailable("namespace root " + o.root + " is not a directory");
  }
  std::set<std::pair<uint64_t, uint64_t>> visited{{root_st.dev, root_st.ino}};
  std::vector<std::string> todo{o.root};
  std::vector<std::string> names;
  bool root = true;
  while (!todo.empty()) {
    if (cancelled()) return Status::Unavailable(o.cancelled);
    std::string dir = std::move(todo.back());
    todo.pop_back();
    s = env->GetChildren(dir, &names);
    if (!s.ok()) {
      if (root) return Status::Unavailable("namespace root: " + s.message());
      if (!s.IsNotFound()) {
        ST_LOG_WARN("%s: cannot read namespace directory: %s", o.log_tag, s.ToString().c_str());
        *complete = false;
      }
      continue;
    }
    root = false;
    for (const std::string& name : names) {
      if (name.compare(0, 4, ".st-") == 0) continue;
      if (cancelled()) return Status::Unavailable(o.cancelled);
      std::string path = dir + "/" + name;
      FileInfo st;
      s = env->GetFileInfo(path, &st);
      if (!s.ok()) {
        if (!s.IsNotFound()) {  // NotFound: removed meanwhile, or a dangling link
          ST_LOG_WARN("%s: cannot stat: %s", o.log_tag, s.ToString().c_str());
          *complete = false;
        }
        continue;
      }
      if (st.is_dir) {
        if (visited.emplace(st.dev, st.ino).second) todo.push_back(std::move(path));
        continue;
      }
      if (!st.is_regular) continue;
      s = visit(path, st);
      if (!s.ok()) return s;
    }
  }
  return Status::OK();
}

}  // namespace st
