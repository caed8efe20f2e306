/* io.c: files. Replacing a file (a temporary file of its own, fsync,
 * rename: never a half file; lu_wfile), safetensors save and load (the
 * whole header validated before any tensor is made; data read with pread,
 * no mmap), and IDX (MNIST) files through zlib,
 * which is loaded with dlopen on first use so that libluon needs no -lz. */
#include "internal.h"
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u * 1024u * 1024u) /* a larger header is not a safetensors file */
#define MAX_DEPTH 64                       /* nesting of skipped __metadata__ values */

/* ORDER luon_dtype: safetensors' names of luon's dtypes. */
static const char *const st_dtype[LUON_DTYPE_COUNT] = {NULL, "F32", "F64", "F16", "BF16",
                                                       "I32", "I64", "U8", "BOOL"};

static const char *errstr(int e, char *buf, size_t n) { return strerror_r(e, buf, n); }

/* "<fn>: <path>: <detail>" with status s. */
static luon_status vfail(luon_status s, const char *fn, const char *path, const char *fmt, va_list ap) {
  char detail[800];
  vsnprintf(detail, sizeof detail, fmt, ap);
  return lu_error(s, "%s: %s: %s", fn, path, detail);
}

static luon_status ffail(luon_status s, const char *fn, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static luon_status ffail(luon_status s, const char *fn, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s = vfail(s, fn, path, fmt, ap);
  va_end(ap);
  return s;
}

/* "safetensors: <path>: <detail>" with status s. */
static luon_status fail(luon_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static luon_status fail(luon_status s, const char *path, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s = vfail(s, "safetensors", path, fmt, ap);
  va_end(ap);
  return s;
}

static bool little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
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

/* ---- writing ------------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_int(sbuf *b, long long v) {
  char t[32];
  int k = snprintf(t, sizeof t, "%lld", v);
  sb_put(b, t, (size_t)k);
}

/* s as a JSON string: quotes, backslashes and control characters escaped;
 * other bytes (UTF-8) as they are. */
static void sb_json_string(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') {
      char e[2] = {'\\', (char)*c};
      sb_put(b, e, 2);
    } else if (*c < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", *c);
      sb_put(b, e, 6);
    } else {
      sb_put(b, (const char *)c, 1);
    }
  }
  sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The JSON header, padded with spaces so that the data starts 8-aligned. */
static luon_status build_header(const char *path, int32_t n, const char *const *names,
                                const luon_tensor_info *info, sbuf *h) {
  sb_str(h, "{\"__metadata__\":{\"format\":\"luon\"}");
  uint64_t off = 0;
  for (int32_t i = 0; i < n; i++) {
    uint64_t bytes = (uint64_t)info[i].size * (uint64_t)luon_dtype_size(info[i].dtype);
    sb_str(h, ",");
    sb_json_string(h, names[i]);
    sb_str(h, ":{\"dtype\":\"");
    sb_str(h, st_dtype[info[i].dtype]);
    sb_str(h, "\",\"shape\":[");
    for (int d = 0; d < info[i].ndim; d++) {
      if (d) sb_str(h, ",");
      sb_int(h, (long long)info[i].shape[d]);
    }
    sb_str(h, "],\"data_offsets\":[");
    sb_int(h, (long long)off);
    sb_str(h, ",");
    sb_int(h, (long long)(off + bytes));
    sb_str(h, "]}");
    off += bytes;
  }
  sb_str(h, "}");
  while (!h->oom && (8 + h->n) % 8 != 0) sb_str(h, " ");
  if (h->oom) return fail(LUON_ENOMEM, path, "out of host memory for the header");
  if (h->n > MAX_HEADER)
    return fail(LUON_EINVAL, path, "the header would take %zu bytes, more than the 100 MB readers accept",
                h->n);
  return LUON_OK;
}

/* Check the arguments and read every tensor's info. */
static luon_status check_save_args(const char *path, int32_t n, const char *const *names,
                                   luon_tensor *const *tensors, luon_tensor_info *info) {
  for (int32_t i = 0; i < n; i++) {
    if (!names[i] || !names[i][0])
      return fail(LUON_EINVAL, path, "tensor %d has no name", (int)i);
    if (strcmp(names[i], "__metadata__") == 0)
      return fail(LUON_EINVAL, path, "'__metadata__' is reserved and cannot name a tensor");
    if (!tensors[i]) return fail(LUON_EINVAL, path, "tensor '%.200s' is NULL", names[i]);
    LU_TRY(luon_tensor_info_get(tensors[i], &info[i]));
    if (info[i].dtype <= 0 || info[i].dtype >= LUON_DTYPE_COUNT)
      return fail(LUON_EDTYPE, path, "tensor '%.200s' has unknown dtype %d", names[i], (int)info[i].dtype);
  }
  const char **sorted = malloc(sizeof *sorted * (size_t)(n ? n : 1));
  if (!sorted) return fail(LUON_ENOMEM, path, "out of host memory");
  if (n > 0) memcpy(sorted, names, sizeof *sorted * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_str_ptr);
  luon_status s = LUON_OK;
  for (int32_t i = 1; i < n && s == LUON_OK; i++)
    if (strcmp(sorted[i - 1], sorted[i]) == 0)
      s = fail(LUON_EINVAL, path, "two tensors are named '%.200s'", sorted[i]);
  free(sorted);
  return s;
}

/* Write header and data to the new file f. */
static luon_status write_file(lu_wfile *f, const char *path, int32_t n, luon_tensor *const *tensors,
                              const luon_tensor_info *info, const sbuf *h) {
  unsigned char len[8];
  for (int k = 0; k < 8; k++) len[k] = (unsigned char)((uint64_t)h->n >> (8 * k));
  LU_TRY(lu_wfile_write(f, len, 8));
  LU_TRY(lu_wfile_write(f, h->p, h->n));
  size_t cap = 0;
  void *buf = NULL;
  luon_status s = LUON_OK;
  for (int32_t i = 0; i < n && s == LUON_OK; i++) {
    size_t bytes = (size_t)info[i].size * (size_t)luon_dtype_size(info[i].dtype);
    if (bytes == 0) continue;
    if (bytes > cap) {
      free(buf);
      buf = malloc(bytes);
      cap = buf ? bytes : 0;
      if (!buf) {
        s = fail(LUON_ENOMEM, path, "out of host memory for %zu bytes of tensor %d", bytes, (int)i);
        break;
      }
    }
    s = luon_tensor_to_host(tensors[i], buf, info[i].dtype, bytes);
    if (s == LUON_OK) s = lu_wfile_write(f, buf, bytes);
  }
  free(buf);
  return s;
}

luon_status luon_safetensors_save(const char *path, int32_t n, const char *const *names,
                                  luon_tensor *const *tensors) {
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "safetensors: save: no file name given");
  if (n < 0 || (n > 0 && (!names || !tensors)))
    return fail(LUON_EINVAL, path, "save: %d tensors with %s names and %s tensors", (int)n,
                names ? "some" : "no", tensors ? "some" : "no");
  if (!little_endian())
    return fail(LUON_EUNSUPPORTED, path, "writing safetensors on a big-endian host is not supported");
  luon_tensor_info *info = malloc(sizeof *info * (size_t)(n ? n : 1));
  if (!info) return fail(LUON_ENOMEM, path, "out of host memory");
  sbuf h = {0};
  luon_status s = check_save_args(path, n, names, tensors, info);
  if (s == LUON_OK) s = build_header(path, n, names, info, &h);
  lu_wfile f;
  if (s == LUON_OK) s = lu_wfile_open(&f, "safetensors", path);
  if (s == LUON_OK) {
    s = write_file(&f, path, n, tensors, info, &h);
    if (s == LUON_OK) s = lu_wfile_commit(&f);
    else lu_wfile_abort(&f);
  }
  free(h.p);
  free(info);
  return s;
}

/* ---- reading: the header parser ------------------------------------------- */

typedef struct st_entry {
  char *name;
  int32_t dtype;
  int32_t ndim;
  int64_t shape[LU_MAXD];
  uint64_t begin, end;
} st_entry;

struct luon_safetensors {
  int fd;
  char *path;
  uint64_t data_start; /* 8 + header length */
  uint64_t data_size;
  int32_t n;
  st_entry *e;
};

/* A strict parser for the JSON subset of safetensors headers. Every
 * function returns false after setting the error (the first one wins). */
typedef struct parser {
  const char *begin, *p, *end;
  const char *path;
  luon_status err;
} parser;

static bool perr(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool perr(parser *P, const char *fmt, ...) {
  if (P->err != LUON_OK) return false;
  char detail[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  P->err = fail(LUON_EFORMAT, P->path, "malformed header at byte %ld: %s", (long)(P->p - P->begin) + 8,
                detail);
  return false;
}

/* A general error about the header's contents (not its syntax). */
static bool pbad(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool pbad(parser *P, const char *fmt, ...) {
  if (P->err != LUON_OK) return false;
  char detail[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  P->err = fail(LUON_EFORMAT, P->path, "%s", detail);
  return false;
}

static void skip_ws(parser *P) {
  while (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\n' || *P->p == '\r')) P->p++;
}

static bool expect(parser *P, char c, const char *what) {
  skip_ws(P);
  if (P->p >= P->end) return perr(P, "the header ends where %s was expected", what);
  unsigned char f = (unsigned char)*P->p;
  if (f != (unsigned char)c) {
    if (f < 0x20 || f > 0x7e) return perr(P, "expected %s, found the byte 0x%02x", what, f);
    return perr(P, "expected %s, found '%c'", what, f);
  }
  P->p++;
  return true;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool hex4(parser *P, uint32_t *v) {
  if (P->end - P->p < 4) return perr(P, "a \\u escape needs four hex digits");
  uint32_t x = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(P->p[k]);
    if (h < 0) return perr(P, "a \\u escape needs four hex digits");
    x = x * 16 + (uint32_t)h;
  }
  P->p += 4;
  *v = x;
  return true;
}

/* A JSON string (P->p at the opening quote) into a new NUL-terminated
 * buffer in *out (NULL: validate and skip). NUL characters are refused. */
static bool parse_string(parser *P, char **out) {
  skip_ws(P);
  if (P->p >= P->end || *P->p != '"') return perr(P, "expected a string");
  P->p++;
  const char *q = P->p;
  while (q < P->end && *q != '"') q += (*q == '\\' && q + 1 < P->end) ? 2 : 1;
  if (q >= P->end) return perr(P, "a string is not terminated");
  char *s = NULL;
  if (out) {
    s = malloc((size_t)(q - P->p) + 1);
    if (!s) {
      P->err = fail(LUON_ENOMEM, P->path, "out of host memory reading the header");
      return false;
    }
  }
  size_t n = 0;
  while (*P->p != '"') {
    unsigned char c = (unsigned char)*P->p;
    if (c < 0x20) {
      free(s);
      return perr(P, "a control character (0x%02x) inside a string", c);
    }
    if (c != '\\') {
      if (s) s[n] = (char)c;
      n++;
      P->p++;
      continue;
    }
    P->p++;
    char e = *P->p++;
    char lit = 0;
    switch (e) {
      case '"': lit = '"'; break;
      case '\\': lit = '\\'; break;
      case '/': lit = '/'; break;
      case 'b': lit = '\b'; break;
      case 'f': lit = '\f'; break;
      case 'n': lit = '\n'; break;
      case 'r': lit = '\r'; break;
      case 't': lit = '\t'; break;
      case 'u': break;
      default:
        P->p--;
        free(s);
        return perr(P, "unknown escape '\\%c' in a string", e);
    }
    if (e != 'u') {
      if (s) s[n] = lit;
      n++;
      continue;
    }
    uint32_t cp;
    if (!hex4(P, &cp)) {
      free(s);
      return false;
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      free(s);
      return perr(P, "a lone low surrogate \\u%04x in a string", cp);
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t lo;
      if (P->end - P->p < 2 || P->p[0] != '\\' || P->p[1] != 'u') {
        free(s);
        return perr(P, "a high surrogate \\u%04x without its low half", cp);
      }
      P->p += 2;
      if (!hex4(P, &lo)) {
        free(s);
        return false;
      }
      if (lo < 0xDC00 || lo > 0xDFFF) {
        free(s);
        return perr(P, "a high surrogate \\u%04x followed by \\u%04x", cp, lo);
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) {
      free(s);
      return perr(P, "a NUL character (\\u0000) in a string");
    }
    /* UTF-8: at most 4 bytes, never more than the 6 of the escape */
    unsigned char u[4];
    int k;
    if (cp < 0x80) {
      u[0] = (unsigned char)cp;
      k = 1;
    } else if (cp < 0x800) {
      u[0] = (unsigned char)(0xC0 | (cp >> 6));
      u[1] = (unsigned char)(0x80 | (cp & 0x3F));
      k = 2;
    } else if (cp < 0x10000) {
      u[0] = (unsigned char)(0xE0 | (cp >> 12));
      u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
      u[2] = (unsigned char)(0x80 | (cp & 0x3F));
      k = 3;
    } else {
      u[0] = (unsigned char)(0xF0 | (cp >> 18));
      u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
      u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
      u[3] = (unsigned char)(0x80 | (cp & 0x3F));
      k = 4;
    }
    if (s) memcpy(s + n, u, (size_t)k);
    n += (size_t)k;
  }
  P->p++; /* the closing quote */
  if (s) {
    s[n] = 0;
    *out = s;
  }
  return true;
}

/* An integer: -?(0|[1-9][0-9]*), with no fraction or exponent. */
static bool parse_int(parser *P, int64_t *v) {
  skip_ws(P);
  bool neg = false;
  if (P->p < P->end && *P->p == '-') {
    neg = true;
    P->p++;
  }
  if (P->p >= P->end || *P->p < '0' || *P->p > '9') return perr(P, "expected an integer");
  if (*P->p == '0' && P->p + 1 < P->end && P->p[1] >= '0' && P->p[1] <= '9')
    return perr(P, "an integer with a leading zero");
  uint64_t x = 0;
  while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
    unsigned d = (unsigned)(*P->p - '0');
    if (x > ((uint64_t)INT64_MAX - d) / 10) return perr(P, "an integer too large for 64 bits");
    x = x * 10 + d;
    P->p++;
  }
  if (P->p < P->end && (*P->p == '.' || *P->p == 'e' || *P->p == 'E'))
    return perr(P, "expected an integer, found a fraction or exponent");
  *v = neg ? -(int64_t)x : (int64_t)x;
  return true;
}

/* A list of integers "[a, b, ...]" into v (at most max); *count its length. */
static bool parse_int_list(parser *P, int64_t *v, int max, int *count, const char *name,
                           const char *field) {
  if (!expect(P, '[', "'['")) return false;
  *count = 0;
  skip_ws(P);
  if (P->p < P->end && *P->p == ']') {
    P->p++;
    return true;
  }
  for (;;) {
    int64_t x = 0;
    if (!parse_int(P, &x)) return false;
    if (*count >= max)
      return pbad(P, "tensor '%.200s' has more than %d entries in its %s", name, max, field);
    v[(*count)++] = x;
    skip_ws(P);
    if (P->p >= P->end) return perr(P, "the header ends inside a list");
    if (*P->p == ']') {
      P->p++;
      return true;
    }
    if (*P->p != ',') return perr(P, "expected ',' or ']' in a list, found '%c'", *P->p);
    P->p++;
  }
}

/* Skip any JSON value (for __metadata__). */
static bool skip_value(parser *P, int depth) {
  if (depth > MAX_DEPTH) return perr(P, "values nested more than %d deep", MAX_DEPTH);
  skip_ws(P);
  if (P->p >= P->end) return perr(P, "the header ends where a value was expected");
  char c = *P->p;
  if (c == '"') return parse_string(P, NULL);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    P->p++;
    skip_ws(P);
    if (P->p < P->end && *P->p == close) {
      P->p++;
      return true;
    }
    for (;;) {
      if (c == '{') {
        if (!parse_string(P, NULL) || !expect(P, ':', "':'")) return false;
      }
      if (!skip_value(P, depth + 1)) return false;
      skip_ws(P);
      if (P->p >= P->end) return perr(P, "the header ends inside a %s", c == '{' ? "object" : "list");
      if (*P->p == close) {
        P->p++;
        return true;
      }
      if (*P->p != ',') return perr(P, "expected ',' or '%c', found '%c'", close, *P->p);
      P->p++;
    }
  }
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(words[k]);
    if ((size_t)(P->end - P->p) >= n && memcmp(P->p, words[k], n) == 0) {
      P->p += n;
      return true;
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) { /* a number, fraction and exponent allowed */
    if (c == '-') P->p++;
    if (P->p >= P->end || *P->p < '0' || *P->p > '9') return perr(P, "a malformed number");
    while (P->p < P->end && *P->p >= '0' && *P->p <= '9') P->p++;
    if (P->p < P->end && *P->p == '.') {
      P->p++;
      if (P->p >= P->end || *P->p < '0' || *P->p > '9') return perr(P, "a malformed number");
      while (P->p < P->end && *P->p >= '0' && *P->p <= '9') P->p++;
    }
    if (P->p < P->end && (*P->p == 'e' || *P->p == 'E')) {
      P->p++;
      if (P->p < P->end && (*P->p == '+' || *P->p == '-')) P->p++;
      if (P->p >= P->end || *P->p < '0' || *P->p > '9') return perr(P, "a malformed number");
      while (P->p < P->end && *P->p >= '0' && *P->p <= '9') P->p++;
    }
    return true;
  }
  return perr(P, "unexpected character '%c'", c);
}

/* One tensor's entry {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static bool parse_entry(parser *P, st_entry *e) {
  if (!expect(P, '{', "'{' opening the entry of a tensor")) return false;
  int seen = 0; /* bits: 1 dtype, 2 shape, 4 data_offsets */
  skip_ws(P);
  if (P->p < P->end && *P->p == '}') return pbad(P, "tensor '%.200s' has an empty entry", e->name);
  for (;;) {
    char *key = NULL;
    if (!parse_string(P, &key)) return false;
    int bit = strcmp(key, "dtype") == 0 ? 1 : strcmp(key, "shape") == 0 ? 2
            : strcmp(key, "data_offsets") == 0 ? 4 : 0;
    if (!bit) {
      pbad(P, "tensor '%.200s' has an unknown field '%.100s'", e->name, key);
      free(key);
      return false;
    }
    if (seen & bit) {
      pbad(P, "tensor '%.200s' has field '%s' twice", e->name, key);
      free(key);
      return false;
    }
    free(key);
    seen |= bit;
    if (!expect(P, ':', "':'")) return false;
    if (bit == 1) {
      char *dt = NULL;
      if (!parse_string(P, &dt)) return false;
      for (int k = 1; k < LUON_DTYPE_COUNT; k++)
        if (strcmp(dt, st_dtype[k]) == 0) e->dtype = k;
      if (!e->dtype) {
        pbad(P, "tensor '%.200s' has dtype '%.40s', which luon does not read "
                "(F32, F64, F16, BF16, I32, I64, U8, BOOL)", e->name, dt);
        free(dt);
        return false;
      }
      free(dt);
    } else if (bit == 2) {
      int nd;
      if (!parse_int_list(P, e->shape, LU_MAXD, &nd, e->name, "shape")) return false;
      e->ndim = nd;
      for (int d = 0; d < nd; d++)
        if (e->shape[d] < 0)
          return pbad(P, "tensor '%.200s' has a negative dimension (%lld) in its shape", e->name,
                      (long long)e->shape[d]);
    } else {
      int64_t o[2];
      int no;
      if (!parse_int_list(P, o, 2, &no, e->name, "data_offsets")) return false;
      if (no != 2)
        return pbad(P, "tensor '%.200s' has %d data_offsets, expected 2 (begin, end)", e->name, no);
      if (o[0] < 0 || o[1] < 0)
        return pbad(P, "tensor '%.200s' has negative data_offsets [%lld, %lld]", e->name,
                    (long long)o[0], (long long)o[1]);
      if (o[0] > o[1])
        return pbad(P, "tensor '%.200s' has data_offsets [%lld, %lld] that end before they begin",
                    e->name, (long long)o[0], (long long)o[1]);
      e->begin = (uint64_t)o[0];
      e->end = (uint64_t)o[1];
    }
    skip_ws(P);
    if (P->p >= P->end) return perr(P, "the header ends inside the entry of tensor '%.200s'", e->name);
    if (*P->p == '}') {
      P->p++;
      break;
    }
    if (*P->p != ',') return perr(P, "expected ',' or '}', found '%c'", *P->p);
    P->p++;
  }
  if (seen != 7)
    return pbad(P, "tensor '%.200s' lacks its %s", e->name,
                !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");
  return true;
}

static void free_entries(st_entry *e, int32_t n) {
  for (int32_t i = 0; i < n; i++) free(e[i].name);
  free(e);
}

/* The whole header: fills *entries / *count (freed by the caller also on failure). */
static bool parse_header(parser *P, st_entry **entries, int32_t *count) {
  int32_t cap = 0;
  bool meta = false;
  if (!expect(P, '{', "'{' opening the header")) return false;
  skip_ws(P);
  if (P->p < P->end && *P->p == '}') {
    P->p++;
  } else {
    for (;;) {
      char *key = NULL;
      if (!parse_string(P, &key)) return false;
      if (!expect(P, ':', "':'")) {
        free(key);
        return false;
      }
      if (strcmp(key, "__metadata__") == 0) {
        free(key);
        if (meta) return pbad(P, "'__metadata__' appears twice");
        meta = true;
        skip_ws(P);
        if (P->p >= P->end || *P->p != '{') return perr(P, "'__metadata__' must be an object");
        if (!skip_value(P, 0)) return false;
      } else {
        if (*count == cap) {
          int32_t ncap = cap ? 2 * cap : 16;
          st_entry *ne = realloc(*entries, sizeof *ne * (size_t)ncap);
          if (!ne || ncap > (1 << 28)) {
            free(key);
            if (ne) *entries = ne;
            P->err = fail(LUON_ENOMEM, P->path, "out of host memory for the tensor list");
            return false;
          }
          *entries = ne;
          cap = ncap;
        }
        st_entry *e = &(*entries)[(*count)++];
        memset(e, 0, sizeof *e);
        e->name = key;
        if (!parse_entry(P, e)) return false;
      }
      skip_ws(P);
      if (P->p >= P->end) return perr(P, "the header ends before its closing '}'");
      if (*P->p == '}') {
        P->p++;
        break;
      }
      if (*P->p != ',') return perr(P, "expected ',' or '}', found '%c'", *P->p);
      P->p++;
    }
  }
  skip_ws(P);
  if (P->p != P->end) return perr(P, "unexpected text after the header's closing '}'");
  return true;
}

static int cmp_entry_name(const void *a, const void *b) {
  return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_entry_offset(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Sizes, bounds, duplicates, overlaps and holes of the parsed entries. */
static luon_status check_entries(const char *path, st_entry *e, int32_t n, uint64_t data_size) {
  for (int32_t i = 0; i < n; i++) {
    /* span: the size with zero dimensions taken as 1, which bounds the
     * strides of an empty tensor too */
    uint64_t need = (uint64_t)luon_dtype_size(e[i].dtype), span = need;
    bool overflow = false;
    for (int d = 0; d < e[i].ndim; d++) {
      uint64_t dim = (uint64_t)e[i].shape[d];
      overflow |= __builtin_mul_overflow(need, dim, &need);
      overflow |= __builtin_mul_overflow(span, dim > 1 ? dim : 1, &span);
    }
    if (overflow || span > (uint64_t)INT64_MAX / 16)
      return fail(LUON_EFORMAT, path, "tensor '%.200s' has shape %s, too large", e[i].name,
                  lu_shape_str(e[i].ndim, e[i].shape));
    if (need != e[i].end - e[i].begin)
      return fail(LUON_EFORMAT, path,
                  "tensor '%.200s' needs %llu bytes (%s, shape %s) but its data_offsets span %llu",
                  e[i].name, (unsigned long long)need, st_dtype[e[i].dtype],
                  lu_shape_str(e[i].ndim, e[i].shape), (unsigned long long)(e[i].end - e[i].begin));
    if (e[i].end > data_size)
      return fail(LUON_EFORMAT, path,
                  "tensor '%.200s' has data_offsets [%llu, %llu] past the end of the data (%llu bytes)",
                  e[i].name, (unsigned long long)e[i].begin, (unsigned long long)e[i].end,
                  (unsigned long long)data_size);
  }
  st_entry **by = malloc(sizeof *by * (size_t)(n ? n : 1));
  if (!by) return fail(LUON_ENOMEM, path, "out of host memory");
  for (int32_t i = 0; i < n; i++) by[i] = &e[i];
  luon_status s = LUON_OK;
  qsort(by, (size_t)n, sizeof *by, cmp_entry_name);
  for (int32_t i = 1; i < n && s == LUON_OK; i++)
    if (strcmp(by[i - 1]->name, by[i]->name) == 0)
      s = fail(LUON_EFORMAT, path, "two tensors are named '%.200s'", by[i]->name);
  if (s == LUON_OK) qsort(by, (size_t)n, sizeof *by, cmp_entry_offset);
  uint64_t covered = 0;
  for (int32_t i = 0; i < n && s == LUON_OK; i++) {
    if (i > 0 && by[i]->begin < by[i - 1]->end)
      s = fail(LUON_EFORMAT, path, "tensors '%.200s' and '%.200s' overlap (bytes [%llu, %llu) and [%llu, %llu))",
               by[i - 1]->name, by[i]->name, (unsigned long long)by[i - 1]->begin,
               (unsigned long long)by[i - 1]->end, (unsigned long long)by[i]->begin,
               (unsigned long long)by[i]->end);
    else if (by[i]->begin > covered)
      s = fail(LUON_EFORMAT, path, "bytes [%llu, %llu) of the data belong to no tensor",
               (unsigned long long)covered, (unsigned long long)by[i]->begin);
    else if (by[i]->end > covered)
      covered = by[i]->end;
  }
  if (s == LUON_OK && covered != data_size)
    s = fail(LUON_EFORMAT, path, "the data section has %llu bytes but the tensors cover %llu",
             (unsigned long long)data_size, (unsigned long long)covered);
  free(by);
  return s;
}

/* Read exactly n bytes at offset off. */
static luon_status read_at(int fd, void *dst, uint64_t n, uint64_t off, const char *path) {
  char *p = dst;
  while (n > 0) {
    ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
    if (r < 0) {
      if (errno == EINTR) continue;
      char e[128];
      return fail(LUON_EIO, path, "cannot read: %s", errstr(errno, e, sizeof e));
    }
    if (r == 0)
      return fail(LUON_EFORMAT, path, "the file ends %llu bytes early (was it changed while open?)",
                  (unsigned long long)n);
    p += r;
    n -= (uint64_t)r;
    off += (uint64_t)r;
  }
  return LUON_OK;
}

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

/* Open path for reading: fd and size, or EIO naming the reason. */
static luon_status open_regular(const char *path, int *fd_out, uint64_t *size, luon_status (*err)(
    luon_status, const char *, const char *, ...)) {
  char e[128];
  *fd_out = -1;
  *size = 0;
  int fd = lu_open_regular(path, size);
  if (fd < 0 && errno) return err(LUON_EIO, path, "cannot open: %s", errstr(errno, e, sizeof e));
  if (fd < 0) return err(LUON_EIO, path, "not a regular file");
  *fd_out = fd;
  return LUON_OK;
}

luon_status luon_safetensors_open(const char *path, luon_safetensors **out) {
  if (!out) return lu_error(LUON_EINVAL, "safetensors: open: NULL output pointer");
  *out = NULL;
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "safetensors: open: no file name given");
  if (!little_endian())
    return fail(LUON_EUNSUPPORTED, path, "reading safetensors on a big-endian host is not supported");
  int fd;
  uint64_t size;
  LU_TRY(open_regular(path, &fd, &size, fail));
  luon_status s = LUON_OK;
  unsigned char len8[8];
  uint64_t hlen = 0;
  char *header = NULL;
  st_entry *entries = NULL;
  int32_t n = 0;
  if (size < 8) s = fail(LUON_EFORMAT, path, "the file has %llu bytes, fewer than the 8 of a "
                         "safetensors header length", (unsigned long long)size);
  if (s == LUON_OK) s = read_at(fd, len8, 8, 0, path);
  if (s == LUON_OK) {
    for (int k = 0; k < 8; k++) hlen |= (uint64_t)len8[k] << (8 * k);
    if (hlen == 0x112) /* kMXAPINDArrayListMagic: MXNet's NDArray list */
      s = fail(LUON_EFORMAT, path, "this is an MXNet .params file (MXNet's own binary format), not "
               "safetensors, and luon does not read it; in MXNet, write the arrays with "
               "safetensors.numpy.save_file({k: v.data().asnumpy() for k, v in "
               "net.collect_params().items()}, path) and load that");
    else if (hlen > MAX_HEADER)
      s = fail(LUON_EFORMAT, path, "header length %llu is absurd (more than 100 MB): "
               "not a safetensors file?", (unsigned long long)hlen);
    else if (hlen > size - 8)
      s = fail(LUON_EFORMAT, path, "header length %llu runs past the end of the file (%llu bytes)",
               (unsigned long long)hlen, (unsigned long long)size);
  }
  if (s == LUON_OK) {
    header = malloc(hlen + 1);
    if (!header) s = fail(LUON_ENOMEM, path, "out of host memory for a %llu-byte header",
                          (unsigned long long)hlen);
  }
  if (s == LUON_OK) s = read_at(fd, header, hlen, 8, path);
  if (s == LUON_OK) {
    parser P = {header, header, header + hlen, path, LUON_OK};
    if (!parse_header(&P, &entries, &n)) s = P.err;
  }
  if (s == LUON_OK) s = check_entries(path, entries, n, size - 8 - hlen);
  luon_safetensors *h = NULL;
  if (s == LUON_OK) {
    h = calloc(1, sizeof *h);
    char *p = malloc(strlen(path) + 1);
    if (!h || !p) {
      free(h);
      free(p);
      h = NULL;
      s = fail(LUON_ENOMEM, path, "out of host memory");
    } else {
      strcpy(p, path);
      *h = (luon_safetensors){fd, p, 8 + hlen, size - 8 - hlen, n, entries};
    }
  }
  free(header);
  if (s != LUON_OK) {
    free_entries(entries, n);
    close(fd);
    return s;
  }
  *out = h;
  return LUON_OK;
}

int32_t luon_safetensors_count(const luon_safetensors *h) { return h ? h->n : 0; }

static bool valid_index(const luon_safetensors *h, int32_t i) {
  if (!h) {
    lu_error(LUON_EINVAL, "safetensors: NULL file handle");
    return false;
  }
  if (i < 0 || i >= h->n) {
    fail(LUON_EINVAL, h->path, "tensor index %d out of range (the file has %d tensors)", (int)i, (int)h->n);
    return false;
  }
  return true;
}

const char *luon_safetensors_name(const luon_safetensors *h, int32_t i) {
  return valid_index(h, i) ? h->e[i].name : NULL;
}

luon_status luon_safetensors_shape(const luon_safetensors *h, int32_t i, int32_t *dtype,
                                   int32_t *ndim, int64_t *shape) {
  if (!valid_index(h, i)) return LUON_EINVAL;
  const st_entry *e = &h->e[i];
  if (dtype) *dtype = e->dtype;
  if (ndim) *ndim = e->ndim;
  if (shape)
    for (int d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
  return LUON_OK;
}

static void normalise_bool(unsigned char *p, uint64_t n) {
  for (uint64_t k = 0; k < n; k++) p[k] = p[k] != 0;
}

luon_status luon_safetensors_get(luon_safetensors *h, int32_t i, int32_t dev_type, int32_t dev_id,
                                 luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "safetensors: get: NULL output pointer");
  *out = NULL;
  if (!valid_index(h, i)) return LUON_EINVAL;
  const st_entry *e = &h->e[i];
  uint64_t bytes = e->end - e->begin;
  luon_tensor *t = NULL;
  luon_status s;
  if (dev_type == LUON_CPU) {
    LU_TRY(luon_tensor_empty(e->dtype, e->ndim, e->shape, dev_type, dev_id, &t));
    s = read_at(h->fd, lu_data(t), bytes, h->data_start + e->begin, h->path);
    if (s == LUON_OK && e->dtype == LUON_DTYPE_BOOL) normalise_bool(lu_data(t), bytes);
  } else {
    LU_TRY(luon_device_check(dev_type, dev_id));
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) return fail(LUON_ENOMEM, h->path, "out of host memory for %llu bytes of tensor '%.200s'",
                          (unsigned long long)bytes, e->name);
    s = read_at(h->fd, buf, bytes, h->data_start + e->begin, h->path);
    if (s == LUON_OK && e->dtype == LUON_DTYPE_BOOL) normalise_bool(buf, bytes);
    if (s == LUON_OK) s = luon_tensor_from_host(buf, e->dtype, e->ndim, e->shape, dev_type, dev_id, &t);
    free(buf);
  }
  if (s != LUON_OK) {
    luon_tensor_release(t);
    return s;
  }
  *out = t;
  return LUON_OK;
}

void luon_safetensors_close(luon_safetensors *h) {
  if (!h) return;
  close(h->fd);
  free_entries(h->e, h->n);
  free(h->path);
  free(h);
}

/* ---- IDX files (MNIST), gzip-compressed or plain --------------------------- */

/* The few zlib calls we make, from libz.so.1 loaded once. */
typedef void *gzfile;
static struct {
  gzfile (*dopen)(int fd, const char *mode);
  int (*read)(gzfile f, void *buf, unsigned len);
  int (*close)(gzfile f);
  const char *(*error)(gzfile f, int *errnum);
  int (*buffer)(gzfile f, unsigned size);
  char why[256];
} zlib;
static pthread_once_t zlib_once = PTHREAD_ONCE_INIT;

static void zlib_load(void) {
  void *h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libz.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(zlib.why, sizeof zlib.why, "cannot load zlib (libz.so.1): %s", e ? e : "not found");
    return;
  }
  zlib.dopen = (gzfile(*)(int, const char *))dlsym(h, "gzdopen");
  zlib.read = (int (*)(gzfile, void *, unsigned))dlsym(h, "gzread");
  zlib.close = (int (*)(gzfile))dlsym(h, "gzclose");
  zlib.error = (const char *(*)(gzfile, int *))dlsym(h, "gzerror");
  zlib.buffer = (int (*)(gzfile, unsigned))dlsym(h, "gzbuffer");
  if (!zlib.dopen || !zlib.read || !zlib.close || !zlib.error) {
    zlib.dopen = NULL;
    snprintf(zlib.why, sizeof zlib.why, "the zlib library lacks gzdopen/gzread");
  }
}

static luon_status idx_fail(luon_status s, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static luon_status idx_fail(luon_status s, const char *path, const char *fmt, ...) {
  char detail[800];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return lu_error(s, "idx: %s: %s", path, detail);
}

/* Read up to n bytes; the count read, or -1 with the error set. */
static int64_t gz_read_all(gzfile f, void *dst, uint64_t n, const char *path) {
  char *p = dst;
  uint64_t got = 0;
  while (got < n) {
    uint64_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
    int r = zlib.read(f, p + got, (unsigned)want);
    if (r < 0) {
      int en = 0;
      const char *m = zlib.error(f, &en);
      idx_fail(LUON_EFORMAT, path, "corrupt gzip data: %s", m ? m : "unknown error");
      return -1;
    }
    if (r == 0) break;
    got += (uint64_t)r;
  }
  return (int64_t)got;
}

static void byteswap(void *data, int64_t n, int size) {
  unsigned char *p = data;
  for (int64_t k = 0; k < n; k++, p += size)
    for (int a = 0, b = size - 1; a < b; a++, b--) {
      unsigned char t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

luon_status luon_idx_read(const char *path, int32_t dev_type, int32_t dev_id, luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "idx: NULL output pointer");
  *out = NULL;
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "idx: no file name given");
  LU_TRY(luon_device_check(dev_type, dev_id));
  pthread_once(&zlib_once, zlib_load);
  if (!zlib.dopen) return idx_fail(LUON_EUNSUPPORTED, path, "%s", zlib.why);
  int fd;
  uint64_t fsize;
  LU_TRY(open_regular(path, &fd, &fsize, idx_fail));
  gzfile f = zlib.dopen(fd, "rb");
  if (!f) {
    close(fd);
    return idx_fail(LUON_ENOMEM, path, "zlib could not open the file (out of memory?)");
  }
  if (zlib.buffer) zlib.buffer(f, 1u << 17);
  luon_status s = LUON_OK;
  luon_tensor *t = NULL, *host = NULL;
  unsigned char magic[4];
  int64_t got = gz_read_all(f, magic, 4, path);
  int32_t dtype = 0, esize = 0;
  int ndim = 0;
  int64_t shape[LU_MAXD];
  if (got < 0) s = LUON_EFORMAT;
  else if (got < 4) s = idx_fail(LUON_EFORMAT, path, "the file has %lld bytes, too short for an IDX header",
                                 (long long)got);
  if (s == LUON_OK) {
    if (magic[0] != 0 || magic[1] != 0)
      s = idx_fail(LUON_EFORMAT, path, "not an IDX file: magic bytes %02x %02x %02x %02x, expected 00 00 "
                   "<type> <dims>", magic[0], magic[1], magic[2], magic[3]);
    else if (magic[2] == 0x08) dtype = LUON_DTYPE_U8, esize = 1;
    else if (magic[2] == 0x0C) dtype = LUON_DTYPE_I32, esize = 4;
    else if (magic[2] == 0x0D) dtype = LUON_DTYPE_F32, esize = 4;
    else if (magic[2] == 0x0E) dtype = LUON_DTYPE_F64, esize = 8;
    else
      s = idx_fail(LUON_EFORMAT, path, "IDX element type 0x%02x is not supported (0x08 uint8, 0x0C int32, "
                   "0x0D float32, 0x0E float64)", magic[2]);
  }
  if (s == LUON_OK) {
    ndim = magic[3];
    if (ndim < 1 || ndim > LU_MAXD)
      s = idx_fail(LUON_EFORMAT, path, "IDX header gives %d dimensions (1 to %d are supported)", ndim, LU_MAXD);
  }
  if (s == LUON_OK) {
    unsigned char dims[4 * LU_MAXD];
    got = gz_read_all(f, dims, 4 * (uint64_t)ndim, path);
    if (got < 0) s = LUON_EFORMAT;
    else if (got < 4 * ndim) s = idx_fail(LUON_EFORMAT, path, "the file ends inside the IDX header");
    uint64_t bytes = (uint64_t)esize;
    for (int d = 0; d < ndim && s == LUON_OK; d++) {
      shape[d] = (int64_t)((uint32_t)dims[4 * d] << 24 | (uint32_t)dims[4 * d + 1] << 16 |
                           (uint32_t)dims[4 * d + 2] << 8 | dims[4 * d + 3]);
      if (__builtin_mul_overflow(bytes, (uint64_t)shape[d], &bytes)) bytes = UINT64_MAX;
    }
    /* deflate expands at most ~1032:1: a larger claim is a corrupt header */
    if (s == LUON_OK && bytes / 1100 > fsize)
      s = idx_fail(LUON_EFORMAT, path, "IDX header announces shape %s (%llu bytes), more than a %llu-byte "
                   "file can hold", lu_shape_str(ndim, shape), (unsigned long long)bytes,
                   (unsigned long long)fsize);
    /* read straight into the result on a CPU device, through cpu(0) for a GPU */
    lu_device hd = dev_type == LUON_CPU ? (lu_device){dev_type, dev_id} : (lu_device){LUON_CPU, 0};
    if (s == LUON_OK && (s = lu_tensor_new(dtype, ndim, shape, hd, &host)) != LUON_OK)
      s = idx_fail(s == LUON_ESHAPE ? LUON_EFORMAT : s, path, "%s", luon_last_error());
    if (s == LUON_OK) {
      got = gz_read_all(f, lu_data(host), bytes, path);
      unsigned char extra;
      if (got < 0) s = LUON_EFORMAT;
      else if ((uint64_t)got < bytes)
        s = idx_fail(LUON_EFORMAT, path, "the file ends after %lld of the %llu data bytes its header "
                     "announces (shape %s)", (long long)got, (unsigned long long)bytes,
                     lu_shape_str(ndim, shape));
      else if ((got = gz_read_all(f, &extra, 1, path)) != 0)
        s = got < 0 ? LUON_EFORMAT
                    : idx_fail(LUON_EFORMAT, path, "the file has data after the %llu bytes its header "
                               "announces (shape %s)", (unsigned long long)bytes, lu_shape_str(ndim, shape));
    }
  }
  zlib.close(f); /* closes fd */
  if (s == LUON_OK && esize > 1 && little_endian()) byteswap(lu_data(host), host->size, esize);
  if (s == LUON_OK && dev_type != LUON_CPU) {
    s = luon_tensor_from_host(lu_data(host), dtype, ndim, shape, dev_type, dev_id, &t);
  } else if (s == LUON_OK) {
    t = host;
    host = NULL;
  }
  luon_tensor_release(host);
  if (s != LUON_OK) {
    luon_tensor_release(t);
    return s;
  }
  *out = t;
  return LUON_OK;
}
