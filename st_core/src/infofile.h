// Read-only access to a file's SQLite infofile (docs/infofile.md): which
// copies the tracker has committed to this peer. GET_LOCAL reveals only
// those (uncommitted copies are never revealed).
#ifndef ST_CORE_INFOFILE_H_
#define ST_CORE_INFOFILE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "status.h"

namespace st {

struct CommittedCopy {
  std::string name;
  uint8_t copy_rank = 0;
};

// Opens `path` read-only ("file:<path>?mode=ro", busy timeout 5000 ms),
// checks that meta.file_id is file_id and returns the copies committed to
// peer_id:
//   SELECT c.name, c.copy_rank FROM copies c JOIN peers p USING(peer_idx)
//    WHERE p.peer_id = ?
// NotFound if the file is missing; Corruption if it is not an infofile of
// this file; IOError for any other SQLite failure.
Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           std::vector<CommittedCopy>* out);

}  // namespace st

#endif  // ST_CORE_INFOFILE_H_
