/* file.c: files the core reads and writes. Replacing a file (a temporary
 * file of its own, fsync, rename: never a half file; lu_wfile), used by the
 * safetensors writer and imwrite, and opening a regular file for reading
 * (lu_open_regular), used by every reader of files, and reading one whole
 * (lu_read_file). */
#include "internal.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *errstr(int e, char *buf, size_t n) { return strerror_r(e, buf, n); }

/* "<fn>: <path>: <detail>" with status s. */
static luon_status ffail(luon_status s, const char *fn, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static luon_status ffail(luon_status s, const char *fn, const char *path, const char *fmt, ...) {
  char detail[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return lu_error(s, "%s: %s: %s", fn, path, detail);
}

/* ---- replacing a file: a new temporary file renamed into place ------------ */

/* SIGXFSZ, whose default action ends the process when a write passes the
 * file-size limit (ulimit -f), is ignored while a file is being written, so
 * that write fails with EFBIG instead: only where its action is the default
 * (a host's own handler stays), and the default comes back when the last
 * writer is done. */
static pthread_mutex_t xfsz_lock = PTHREAD_MUTEX_INITIALIZER;
static int xfsz_writers;
static bool xfsz_ignored; /* by us, in place of SIG_DFL */

static bool handler_is(const struct sigaction *sa, void (*h)(int)) {
  return !(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == h;
}

static void xfsz_hold(void) {
  pthread_mutex_lock(&xfsz_lock);
  struct sigaction old;
  if (xfsz_writers++ == 0 && sigaction(SIGXFSZ, NULL, &old) == 0 && handler_is(&old, SIG_DFL)) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    xfsz_ignored = sigaction(SIGXFSZ, &ign, NULL) == 0;
  }
  pthread_mutex_unlock(&xfsz_lock);
}

static void xfsz_release(void) {
  pthread_mutex_lock(&xfsz_lock);
  struct sigaction cur;
  if (--xfsz_writers == 0 && xfsz_ignored) {
    /* unless the host has set an action of its own meanwhile */
    if (sigaction(SIGXFSZ, NULL, &cur) == 0 && handler_is(&cur, SIG_IGN)) {
      cur.sa_handler = SIG_DFL;
      sigaction(SIGXFSZ, &cur, NULL);
    }
    xfsz_ignored = false;
  }
  pthread_mutex_unlock(&xfsz_lock);
}

/* Whether name is "<base>.tmp.<pid>" or "<base>.tmp.<pid>.<n>", a temporary
 * file of a save of base; its writer's pid in *pid. */
static bool temp_of(const char *name, const char *base, long *pid) {
  size_t k = strlen(base);
  if (strncmp(name, base, k) != 0 || strncmp(name + k, ".tmp.", 5) != 0) return false;
  const char *p = name + k + 5;
  char *end;
  if (*p < '0' || *p > '9') return false;
  *pid = strtol(p, &end, 10);
  if (*end == '.') {
    if (end[1] < '0' || end[1] > '9') return false;
    strtol(end + 1, &end, 10);
  }
  return *end == 0 && *pid > 0;
}

/* Remove the temporary files that saves of dst killed on the way left in
 * its directory, where the writer is proven dead: its pid names no process
 * (another process's pid, never this one's) and no one holds the file's
 * lock (writers hold one: this guards against a pid of another pid
 * namespace). Only regular files of our own user. Best effort: nothing is
 * reported. */
static void remove_stale_temps(const char *dst) {
  const char *slash = strrchr(dst, '/');
  const char *base = slash ? slash + 1 : dst;
  char *dir = slash ? strndup(dst, slash == dst ? 1 : (size_t)(slash - dst)) : strdup(".");
  if (!dir) return;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (dfd >= 0) close(dfd);
    free(dir);
    return;
  }
  struct dirent *e;
  long pid;
  while ((e = readdir(d)) != NULL) {
    if (!temp_of(e->d_name, base, &pid) || pid == (long)getpid() || pid > INT32_MAX) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat a, b;
    if (fd < 0) {
      /* unreadable (a mode such as 200 kept from the old file): ours by its
       * owner, without the lock's evidence; a link, gone, ...: left */
      if (errno != EACCES || fstatat(dfd, e->d_name, &a, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(a.st_mode) ||
          a.st_uid != geteuid())
        continue;
    } else if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode) || a.st_uid != geteuid() ||
               flock(fd, LOCK_EX | LOCK_NB) != 0 ||
               fstatat(dfd, e->d_name, &b, AT_SYMLINK_NOFOLLOW) != 0 || a.st_ino != b.st_ino ||
               a.st_dev != b.st_dev) {
      close(fd);
      continue;
    }
    unlinkat(dfd, e->d_name, 0);
    if (fd >= 0) close(fd);
  }
  closedir(d);
  free(dir);
}

luon_status lu_wfile_open(lu_wfile *f, const char *fn, const char *path) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->fn = fn;
  f->path = path;
  char e[128];
  /* where the file goes: through a symbolic link to its target (the link
   * stays), and never in place of something that is not a regular file
   * (a directory, or as root a device such as /dev/null) */
  struct stat sb;
  bool exists = lstat(path, &sb) == 0;
  if (exists && S_ISLNK(sb.st_mode)) {
    if (!(f->dst = realpath(path, NULL)))
      return ffail(LUON_EIO, fn, path, "is a symbolic link whose target cannot be resolved: %s",
                   errstr(errno, e, sizeof e));
    exists = stat(f->dst, &sb) == 0;
  } else if (!(f->dst = strdup(path))) {
    return ffail(LUON_ENOMEM, fn, path, "out of host memory");
  }
  if (exists && !S_ISREG(sb.st_mode)) {
    luon_status s = ffail(LUON_EIO, fn, path, "%s is a %s, not a regular file; it is left as it is", f->dst,
                          S_ISDIR(sb.st_mode) ? "directory"
                          : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "device"
                          : S_ISFIFO(sb.st_mode) ? "pipe" : "special file");
    free(f->dst);
    return s;
  }
  remove_stale_temps(f->dst);
  size_t cap = strlen(f->dst) + 64;
  if (!(f->tmp = malloc(cap))) {
    free(f->dst);
    return ffail(LUON_ENOMEM, fn, path, "out of host memory");
  }
  /* a new file of a name of our own: never one that is there already, nor
   * through a link someone planted at that name. The old file's mode from
   * the start, so that its contents are never readable by more users. */
  static atomic_uint serial;
  mode_t mode = exists ? (sb.st_mode & 0777) : 0666;
  for (int tries = 0; f->fd < 0 && tries < 100; tries++) {
    snprintf(f->tmp, cap, "%s.tmp.%ld.%u", f->dst, (long)getpid(), atomic_fetch_add(&serial, 1));
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (f->fd < 0 && errno != EEXIST) break;
  }
  if (f->fd < 0) {
    luon_status s = ffail(errno == ENAMETOOLONG ? LUON_EINVAL : LUON_EIO, fn, path,
                          "cannot create the temporary file %s: %s", f->tmp, errstr(errno, e, sizeof e));
    free(f->tmp);
    free(f->dst);
    return s;
  }
  (void)flock(f->fd, LOCK_EX | LOCK_NB); /* proof of life for remove_stale_temps; a new file: free */
  if (exists) {
    /* the owner and group where allowed (best effort), then the exact mode
     * (fchown may have cleared set-id bits) */
    struct stat now;
    if (fstat(f->fd, &now) == 0 && (now.st_uid != sb.st_uid || now.st_gid != sb.st_gid))
      (void)!fchown(f->fd, sb.st_uid, sb.st_gid);
    (void)fchmod(f->fd, sb.st_mode & 07777);
  }
  xfsz_hold();
  return LUON_OK;
}

luon_status lu_wfile_write(lu_wfile *f, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(f->fd, c, n > (1u << 30) ? (1u << 30) : n);
    if (w < 0) {
      if (errno == EINTR) continue;
      char e[128];
      int err = errno;
      return ffail(LUON_EIO, f->fn, f->path, "cannot write %s: %s%s", f->tmp, errstr(err, e, sizeof e),
                   err == EFBIG ? " (past the file-size limit, ulimit -f, or the file system's)" : "");
    }
    c += w;
    n -= (size_t)w;
  }
  return LUON_OK;
}

/* Make a finished rename durable: fsync the directory (best effort). */
static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  int fd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  free(dir);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

static void wfile_done(lu_wfile *f) {
  xfsz_release();
  free(f->tmp);
  free(f->dst);
  f->tmp = f->dst = NULL;
}

luon_status lu_wfile_commit(lu_wfile *f) {
  char e[128];
  luon_status s = LUON_OK;
  if (fsync(f->fd) != 0)
    s = ffail(LUON_EIO, f->fn, f->path, "cannot flush %s to disk: %s", f->tmp, errstr(errno, e, sizeof e));
  if (close(f->fd) != 0 && s == LUON_OK)
    s = ffail(LUON_EIO, f->fn, f->path, "cannot close %s: %s", f->tmp, errstr(errno, e, sizeof e));
  f->fd = -1;
  if (s == LUON_OK && rename(f->tmp, f->dst) != 0)
    s = ffail(LUON_EIO, f->fn, f->path, "cannot rename %s into place: %s", f->tmp, errstr(errno, e, sizeof e));
  if (s != LUON_OK) unlink(f->tmp);
  else sync_dir(f->dst);
  wfile_done(f);
  return s;
}

void lu_wfile_abort(lu_wfile *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  unlink(f->tmp);
  wfile_done(f);
}

luon_status lu_wfile_put(const char *fn, const char *path, const void *p, size_t n) {
  lu_wfile f;
  LU_TRY(lu_wfile_open(&f, fn, path));
  luon_status s = lu_wfile_write(&f, p, n);
  if (s != LUON_OK) {
    lu_wfile_abort(&f);
    return s;
  }
  return lu_wfile_commit(&f);
}

/* ---- opening a file for reading ------------------------------------------- */

int lu_open_regular(const char *path, uint64_t *size) {
  /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  int en = fstat(fd, &st) != 0 ? errno : S_ISREG(st.st_mode) ? -1 : 0;
  if (en >= 0) { /* errno 0: not a regular file */
    close(fd);
    errno = en;
    return -1;
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *size = (uint64_t)st.st_size;
  return fd;
}

/* ---- reading a whole file -------------------------------------------------- */

/* "fn: " before a message, or nothing when fn is NULL. */
#define P(fn) (fn) ? (fn) : "", (fn) ? ": " : ""

luon_status lu_read_file(const char *fn, const char *path, uint64_t max, uint8_t **buf, size_t *len) {
  uint64_t size = 0;
  int fd = lu_open_regular(path, &size);
  if (fd < 0 && errno)
    return lu_error(LUON_EIO, "%s%scannot open '%s': %s", P(fn), path, strerror(errno));
  if (fd < 0) return lu_error(LUON_EIO, "%s%s'%s' is not a regular file", P(fn), path);
  if (max && size > max) {
    close(fd);
    return lu_error(LUON_EFORMAT, "%s%s'%s' has %llu bytes, more than the %llu this reader takes", P(fn), path,
                    (unsigned long long)size, (unsigned long long)max);
  }
  size_t n = (size_t)size, got = 0;
  uint8_t *b = malloc(n + 1);
  if (!b) {
    close(fd);
    return lu_error(LUON_ENOMEM, "%s%sout of host memory reading '%s' (%zu bytes)", P(fn), path, n);
  }
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      luon_status s = lu_error(LUON_EIO, "%s%scannot read '%s': %s", P(fn), path,
                               r < 0 ? strerror(errno) : "file shrank while reading");
      free(b);
      close(fd);
      return s;
    }
    got += (size_t)r;
  }
  close(fd);
  b[n] = 0;
  *buf = b;
  *len = n;
  return LUON_OK;
}
#undef P
