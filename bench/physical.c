/* The machine's physical limits for StoreTorrent's workloads (bench/physical.py;
 * issue "Writes at the disk's speed, scans at the machine's").
 *
 *   physical write DIR COUNT SIZE COPIES PROCS SYNC
 *       PROCS processes together create COUNT records of SIZE bytes, each
 *       COPIES times (one folder per copy, as on COPIES peers), laid out as a
 *       peer lays them out: DIR/copyC/files/<file>/<bucket>/<name>, written
 *       with O_TMPFILE and linked into place (linkat), else written to a
 *       temporary name and renamed. SYNC 0: no sync (the peers' default);
 *       1: syncfs once at the end (the peers' --sync group fsync).
 *   physical seq PATH BYTES SYNC
 *       one sequential write of BYTES in 1 MiB writes; SYNC 1: fdatasync at the end.
 *   physical read LIST PROCS
 *       PROCS processes together open, read and close the files named in LIST
 *       (one path per line), as a scan of GET_LOCAL's revealed paths does.
 *   physical churn DIR COUNT SIZE
 *       a cluster's churn: creates COUNT files of SIZE bytes in 256
 *       directories under DIR, then deletes them all (and the directories);
 *       prints the seconds of each half. On ext4 without a journal the
 *       deleted inodes are skipped by inode allocation for 60 s (360 s while
 *       their inode table block is dirty), which slows every file creation
 *       in their block groups meanwhile (docs/benchmarks.md, "Churn").
 *
 * Prints the elapsed seconds (wall clock, from before the fork to after the
 * last child) and, for read, the bytes read. Exit status 1 on any error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char* what, const char* path) {
  fprintf(stderr, "physical: %s %s: %s\n", what, path, strerror(errno));
  exit(1);
}

static void mkdirs(const char* path) {
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char* p = buf + 1; *p; ++p) {
    if (*p == '/') {
      *p = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("mkdir", buf);
      *p = '/';
    }
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) die("mkdir", buf);
}

static uint32_t fnv(const char* s) {
  uint32_t h = 2166136261u;
  for (; *s; ++s) h = (h ^ (uint8_t)*s) * 16777619u;
  return h;
}

static void write_one(const char* dir, const char* name, const char* data, size_t size,
                      int* use_tmpfile) {
  char dst[4096];
  snprintf(dst, sizeof(dst), "%s/%s", dir, name);
  int fd = -1;
  if (*use_tmpfile) {
    fd = open(dir, O_TMPFILE | O_WRONLY, 0644);
    if (fd < 0) *use_tmpfile = 0;
  }
  if (fd >= 0) {
    if (write(fd, data, size) != (ssize_t)size) die("write", dst);
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, dst, AT_SYMLINK_FOLLOW) != 0) die("linkat", dst);
    close(fd);
    return;
  }
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
  fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd < 0) die("open", tmp);
  if (write(fd, data, size) != (ssize_t)size) die("write", tmp);
  close(fd);
  if (rename(tmp, dst) != 0) die("rename", dst);
}

/* The TOPDIR flag (chattr +T) on dir where the filesystem has one, as the
 * peer sets it on its files/ (docs/peer.md, "Where records' inodes go");
 * best effort, as there. */
static void spread_subdirs(const char* dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && !(flags & FS_TOPDIR_FL)) {
    flags |= FS_TOPDIR_FL;
    (void)ioctl(fd, FS_IOC_SETFLAGS, &flags);
  }
  close(fd);
}

static int cmd_write(const char* root, long count, long size, int copies, int procs, int sync) {
  char* data = malloc(size > 0 ? size : 1);
  for (long i = 0; i < size; ++i) data[i] = (char)(i * 131 + 7);
  /* the buckets exist before the clock starts, as on a peer that has stored a file's first records */
  for (int c = 0; c < copies; ++c) {
    char files[4096];
    snprintf(files, sizeof(files), "%s/copy%d/files", root, c);
    mkdirs(files);
    spread_subdirs(files); /* as the peer sets files/'s TOPDIR flag at start */
    for (int b = 0; b < 256; ++b) {
      char d[4096];
      snprintf(d, sizeof(d), "%s/copy%d/files/00000000000000b1/%02x", root, c, b);
      mkdirs(d);
    }
  }
  double t0 = now();
  for (int p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid < 0) die("fork", root);
    if (pid == 0) {
      int use_tmpfile = 1;
      for (long i = p; i < count; i += procs) {
        char name[64];
        snprintf(name, sizeof(name), "r%08ld", i);
        uint32_t bucket = fnv(name) & 0xff;
        for (int c = 0; c < copies; ++c) {
          char d[4096], fname[128];
          snprintf(d, sizeof(d), "%s/copy%d/files/00000000000000b1/%02x", root, c, bucket);
          snprintf(fname, sizeof(fname), "%s.%d.%08x", name, c, (unsigned)i);
          write_one(d, fname, data, (size_t)size, &use_tmpfile);
        }
      }
      _exit(0);
    }
  }
  int failed = 0;
  for (int p = 0; p < procs; ++p) {
    int st;
    wait(&st);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
  }
  if (sync) {
    int fd = open(root, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || syncfs(fd) != 0) die("syncfs", root);
    close(fd);
  }
  printf("%.6f\n", now() - t0);
  return failed;
}

static int cmd_seq(const char* path, long long bytes, int sync) {
  size_t chunk = 1 << 20;
  char* data = malloc(chunk);
  for (size_t i = 0; i < chunk; ++i) data[i] = (char)(i * 131 + 7);
  double t0 = now();
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) die("open", path);
  for (long long done = 0; done < bytes;) {
    size_t n = bytes - done < (long long)chunk ? (size_t)(bytes - done) : chunk;
    if (write(fd, data, n) != (ssize_t)n) die("write", path);
    done += n;
  }
  if (sync && fdatasync(fd) != 0) die("fdatasync", path);
  close(fd);
  printf("%.6f\n", now() - t0);
  return 0;
}

static int cmd_read(const char* list, int procs) {
  FILE* fh = fopen(list, "r");
  if (!fh) die("open", list);
  size_t cap = 1024, n = 0;
  char** paths = malloc(cap * sizeof(char*));
  char line[4096];
  while (fgets(line, sizeof(line), fh)) {
    line[strcspn(line, "\n")] = 0;
    if (!*line) continue;
    if (n == cap) paths = realloc(paths, (cap *= 2) * sizeof(char*));
    paths[n++] = strdup(line);
  }
  fclose(fh);
  int pipes[64][2];
  if (procs > 64) procs = 64;
  double t0 = now();
  for (int p = 0; p < procs; ++p) {
    if (pipe(pipes[p]) != 0) die("pipe", list);
    pid_t pid = fork();
    if (pid < 0) die("fork", list);
    if (pid == 0) {
      static char buf[1 << 20];
      long long total = 0;
      for (size_t i = p; i < n; i += procs) {
        int fd = open(paths[i], O_RDONLY);
        if (fd < 0) die("open", paths[i]);
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0) total += r;
        if (r < 0) die("read", paths[i]);
        close(fd);
      }
      if (write(pipes[p][1], &total, sizeof(total)) != sizeof(total)) _exit(1);
      _exit(0);
    }
    close(pipes[p][1]);
  }
  long long bytes = 0;
  int failed = 0;
  for (int p = 0; p < procs; ++p) {
    long long t = 0;
    if (read(pipes[p][0], &t, sizeof(t)) != sizeof(t)) failed = 1;
    bytes += t;
    close(pipes[p][0]);
  }
  for (int p = 0; p < procs; ++p) {
    int st;
    wait(&st);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
  }
  printf("%.6f %lld\n", now() - t0, bytes);
  return failed;
}

static int cmd_churn(const char* root, long count, long size) {
  char* data = calloc(1, size > 0 ? (size_t)size : 1);
  char p[4096];
  mkdirs(root);
  for (int b = 0; b < 256; ++b) {
    snprintf(p, sizeof(p), "%s/%02x", root, b);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) die("mkdir", p);
  }
  double t0 = now();
  for (long i = 0; i < count; ++i) {
    snprintf(p, sizeof(p), "%s/%02lx/c%09ld", root, i & 0xff, i);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) die("open", p);
    if (size > 0 && write(fd, data, (size_t)size) != (ssize_t)size) die("write", p);
    close(fd);
  }
  double t1 = now();
  for (long i = 0; i < count; ++i) {
    snprintf(p, sizeof(p), "%s/%02lx/c%09ld", root, i & 0xff, i);
    if (unlink(p) != 0) die("unlink", p);
  }
  for (int b = 0; b < 256; ++b) {
    snprintf(p, sizeof(p), "%s/%02x", root, b);
    if (rmdir(p) != 0) die("rmdir", p);
  }
  printf("%.6f %.6f\n", t1 - t0, now() - t1);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 8 && strcmp(argv[1], "write") == 0)
    return cmd_write(argv[2], atol(argv[3]), atol(argv[4]), atoi(argv[5]), atoi(argv[6]),
                     atoi(argv[7]));
  if (argc == 5 && strcmp(argv[1], "seq") == 0)
    return cmd_seq(argv[2], atoll(argv[3]), atoi(argv[4]));
  if (argc == 4 && strcmp(argv[1], "read") == 0) return cmd_read(argv[2], atoi(argv[3]));
  if (argc == 5 && strcmp(argv[1], "churn") == 0)
    return cmd_churn(argv[2], atol(argv[3]), atol(argv[4]));
  fprintf(stderr,
          "usage: physical write DIR COUNT SIZE COPIES PROCS SYNC | seq PATH BYTES SYNC | "
          "read LIST PROCS | churn DIR COUNT SIZE\n");
  return 2;
}
