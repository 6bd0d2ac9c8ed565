// Read-only access to a file's SQLite infofile (docs/infofile.md): which
// copies the tracker has committed to this peer. GET_LOCAL reveals only
// those (uncommitted copies are never revealed).
#ifndef ST_CORE_INFOFILE_H_
#define ST_CORE_INFOFILE_H_

#include <atomic>
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
// peer_id, now or (options.generation != 0) as they were at that generation
// (docs/infofile.md, "Snapshots"):
//   SELECT c.name, c.copy_rank FROM copies c JOIN peers p USING(peer_idx)
//     JOIN records r ON r.name = c.name
//    WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?2
//   UNION ALL
//   SELECT h.name, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx)
//     JOIN records r ON r.name = h.name
//    WHERE p.peer_id = ?1 AND h.since <= ?2 AND h.until > ?2
// NotFound if the file is missing; Corruption if it is not an infofile of
// this file; IOError for any other SQLite failure.
Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           std::vector<CommittedCopy>* out);

// How infofiles are read: a busy timeout, a flag that, once set, makes a
// wait for a lock give up at once (peer shutdown), and the generation of the
// snapshot to read (GET_LOCAL reads its collective's generation).
struct InfofileReadOptions {
  int busy_timeout_ms = 5000;
  const std::atomic<bool>* cancel = nullptr;
  uint64_t generation = 0;  // 0: the latest state; else the snapshot at it
};

// ReadCommittedCopies with those options.
Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           const InfofileReadOptions& options, std::vector<CommittedCopy>* out);

// Tells whether the file at `path` is an infofile, and of which file:
//   OK              it is one: meta.format = 'storetorrent-infofile'; *file_id
//                   is meta.file_id
//   InvalidArgument it is not one: no SQLite header, no meta table, another
//                   format, or no usable file_id
//   anything else   cannot tell (locked beyond the busy timeout, corrupt,
//                   unreadable): the caller must not assume it is not one
Status ProbeInfofile(const std::string& path, const InfofileReadOptions& options,
                     uint64_t* file_id);

}  // namespace st

#endif  // ST_CORE_INFOFILE_H_
