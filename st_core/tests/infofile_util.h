// Writes test infofiles in the format of docs/infofile.md (format_version 2),
// for the tests of GET_LOCAL's commit filter and the scrubber.
#ifndef ST_CORE_TESTS_INFOFILE_UTIL_H_
#define ST_CORE_TESTS_INFOFILE_UTIL_H_

#include <sqlite3.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "infofile_schema.h"

namespace st {
namespace test {

// An infofile at `path` with the given peerlist (peer_id, addr) and copies
// (name, copy_rank, peer_idx), all committed at generation 1, which is also
// meta.generation. `extra_sql` runs in the same transaction (to add history
// rows, later commits, and so on). It is written beside `path` and renamed
// onto it when whole, as the tracker makes infofiles: a peer of the test
// reading the namespace meanwhile (its mirror and scrub passes) never sees a
// half-made one.
inline void WriteInfofile(const std::string& path, uint64_t file_id,
                          const std::vector<std::pair<std::string, std::string>>& peers,
                          const std::vector<std::tuple<std::string, int, int>>& copies,
                          const std::string& format = "storetorrent-infofile",
                          const std::string& extra_sql = "") {
  const std::string tmp = path + ".writing";
  std::remove(tmp.c_str());
  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open(tmp.c_str(), &db));
  // the peer under test walks the namespace and may be reading this file
  // too (its mirror and scrub passes open every file): wait for its lock
  sqlite3_busy_timeout(db, 10000);
  std::string sql = std::string(kInfofileSchemaSql) +
                    "BEGIN;"
                    "INSERT INTO meta VALUES('format','" +
                    format +
                    "'),('format_version',2),"
                    "('file_id'," +
                    std::to_string(file_id) + "),('generation',1);";
  for (size_t i = 0; i < peers.size(); ++i) {
    sql += "INSERT INTO peers VALUES(" + std::to_string(i) + ",'" + peers[i].first + "','" +
           peers[i].second + "');";
  }
  std::set<std::string> names;
  for (const auto& [name, rank, idx] : copies) {
    sql += "INSERT INTO copies VALUES('" + name + "'," + std::to_string(rank) + "," +
           std::to_string(idx) + ",1);";
    if (names.insert(name).second)
      sql += "INSERT INTO records(name, size, crc32c, commit_seq, committed_at) VALUES('" + name +
             "',1,0,1,0);";
  }
  sql += extra_sql;
  sql += "COMMIT;";
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(SQLITE_OK, rc) << msg;
  ASSERT_EQ(0, std::rename(tmp.c_str(), path.c_str())) << "rename " << tmp << " -> " << path;
}

// Runs `sql` on the infofile at `path`, waiting up to 10 s for a reader's
// lock (a peer under test may be reading it: SQLITE_BUSY is not the point).
inline void ExecSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open(path.c_str(), &db));
  sqlite3_busy_timeout(db, 10000);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err != nullptr ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  ASSERT_EQ(SQLITE_OK, rc) << msg;
}

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_INFOFILE_UTIL_H_
