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
  CommittedCopy() = default;
  CommittedCopy(std::string n, uint8_t rank, std::string stored = "")
      : name(std::move(n)), copy_rank(rank), stored_as(std::move(stored)) {}

  std::string name;  // the record's name (what GET_LOCAL reveals)
  uint8_t copy_rank = 0;
  std::string stored_as;  // the name its copies are stored under (a replaced record's
                          // version, docs/infofile.md "Versions"); empty: `name`

  const std::string& key() const { return stored_as.empty() ? name : stored_as; }
};

// Opens `path` read-only ("file:<path>?mode=ro", busy timeout 5000 ms),
// checks that meta.file_id is file_id and returns the copies committed to
// peer_id, now or (options.generation != 0) as they were at that generation
// (docs/infofile.md, "Snapshots"):
//   SELECT c.name, r.stored_as, c.copy_rank FROM copies c JOIN peers p USING(peer_idx)
//     JOIN records r ON r.name = c.name
//    WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?2
//   UNION ALL
//   SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx)
//     JOIN records r ON r.name = h.name
//    WHERE p.peer_id = ?1 AND h.since <= ?2 AND h.until > ?2
// plus, with options.superseded_since > 0, the copies of replaced versions
// superseded at or after that unix time (the scrubber keeps them for readers
// still at an older generation). Infofiles made before versions existed
// (no stored_as columns) are read with stored_as empty.
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
  double superseded_since = 0;  // > 0: also replaced versions superseded since (unix s)
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
