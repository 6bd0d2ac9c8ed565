// Read-only access to a file's SQLite infofile (docs/infofile.md): which
// copies the tracker has committed to this peer. GET_LOCAL reveals only
// those (uncommitted copies are never revealed).
#ifndef ST_CORE_INFOFILE_H_
#define ST_CORE_INFOFILE_H_

#include <atomic>
#include <cstdint>
#include <optional>
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
// (docs/infofile.md, "Snapshots").
//
// An infofile with history (a record_history table, format 4's; decided by
// the table, not meta.format_version) is read as of G = options.as_of (else
// the generation) with copies as held at N = options.generation
// (docs/snapshots.md): current versions committed at or before G from their
// holders at N (copies, and copy_history rows of the current version held at
// N), and versions no longer current that were current at G from their
// holders at N too when the file has retained_copies (those rows, and
// copy_history rows of the version held at N: moved away while it was
// current, or tagged retained_until = its until when moved after), else from
// the holders they had at min(N, until - 1) (copy_history). A file with
// retained_copies but no copy_history.retained_until is Corruption. Every
// bound is a generation, so every peer reading it at any later time gets the
// same set (GET_LOCAL stays exactly once). The queries are in infofile.cc.
// With G = N this is the snapshot at N of a file without history, plus the
// records deleted after N.
//
// An infofile without history is read at N as it always was:
//   SELECT c.name, r.stored_as, c.copy_rank FROM copies c JOIN peers p USING(peer_idx)
//     JOIN records r ON r.name = c.name
//    WHERE p.peer_id = ?1 AND r.commit_seq <= ?2 AND c.since <= ?2
//   UNION ALL
//   SELECT h.name, h.stored_as, h.copy_rank FROM copy_history h JOIN peers p USING(peer_idx)
//     JOIN records r ON r.name = h.name
//    WHERE p.peer_id = ?1 AND h.since <= ?2 AND h.until > ?2
// and an as_of other than the generation is refused (InvalidArgument: it
// keeps no history). Infofiles made before versions existed (no stored_as
// columns) are read with stored_as empty.
//
// For the scrubber, also: with options.superseded_since > 0, the copies of
// replaced versions (and copies moved away) superseded at or after that unix
// time; with options.snapshot_retained, the copies kept of versions no
// longer current: every retained_copies row of the peer, or in a file
// without that table those a snapshot refers to (as held when they stopped
// being current). Those may repeat a copy already listed.
// NotFound if the file is missing; Corruption if it is not an infofile of
// this file or of a newer format; IOError for any other SQLite failure.
Status ReadCommittedCopies(const std::string& path, uint64_t file_id, const std::string& peer_id,
                           std::vector<CommittedCopy>* out);

// How infofiles are read: a busy timeout, a flag that, once set, makes a
// wait for a lock give up at once (peer shutdown), and the generations to
// read (GET_LOCAL reads its collective's generation and as_of).
struct InfofileReadOptions {
  int busy_timeout_ms = 5000;
  const std::atomic<bool>* cancel = nullptr;
  uint64_t generation = 0;  // N. 0: the latest state; else the snapshot at it
  std::optional<uint64_t> as_of;  // G, the generation whose records are read; unset: N
  double superseded_since = 0;  // > 0: also replaced versions superseded since (unix s)
  bool snapshot_retained = false;  // also past versions' copies kept (retained_copies, or
                                   // without it those a snapshot refers to)
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
