// The SQL schema of a format-2 infofile (docs/infofile.md; the tracker's is
// st_py/infofile.py), for tests and fuzz targets that write infofiles.
#ifndef ST_CORE_TESTS_INFOFILE_SCHEMA_H_
#define ST_CORE_TESTS_INFOFILE_SCHEMA_H_

namespace st {
namespace test {

constexpr char kInfofileSchemaSql[] =
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
      "CREATE TABLE peers(peer_idx INTEGER PRIMARY KEY, peer_id TEXT NOT NULL UNIQUE,"
      " addr TEXT NOT NULL);"
      "CREATE TABLE records(name TEXT PRIMARY KEY, size INTEGER NOT NULL, crc32c INTEGER NOT NULL,"
      " commit_seq INTEGER NOT NULL, committed_at REAL NOT NULL);"
      "CREATE TABLE copies(name TEXT NOT NULL, copy_rank INTEGER NOT NULL, peer_idx INTEGER NOT NULL,"
      " since INTEGER NOT NULL, PRIMARY KEY(name, copy_rank)) WITHOUT ROWID;"
      "CREATE INDEX copies_by_peer ON copies(peer_idx, name);"
      "CREATE TABLE copy_history(name TEXT NOT NULL, copy_rank INTEGER NOT NULL,"
      " peer_idx INTEGER NOT NULL, since INTEGER NOT NULL, until INTEGER NOT NULL);";

}  // namespace test
}  // namespace st

#endif  // ST_CORE_TESTS_INFOFILE_SCHEMA_H_
