/* test_io.c: core/safetensors.c, core/file.c and core/data/idx.c through
 * the public API. Safetensors round trips of every dtype (scalars, empty
 * and non-contiguous tensors, odd names), the file layout, atomic
 * replacement, every corruption case (LUON_EFORMAT with a message),
 * truncation at every length and random byte flips; IDX files plain and
 * gzip-compressed, and their error paths. */
#include "luon.h"
#include "testutil.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static const char *tmp_path(const char *name) {
  static char p[4][512];
  static int k;
  char *s = p[k++ & 3];
  snprintf(s, 512, "%s/%s", dir, name);
  return s;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL, "cannot create %s", path);
  if (!f) return;
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

/* The whole file in a malloc'd buffer; *n its size. */
static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  *n = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 11);
}

static luon_tensor *make(int32_t dtype, int ndim, const int64_t *shape, int32_t dev_id) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  size_t bytes = (size_t)n * (size_t)luon_dtype_size(dtype);
  unsigned char *b = malloc(bytes + 1);
  for (size_t k = 0; k < bytes; k++) b[k] = (unsigned char)rnd();
  if (dtype == LUON_DTYPE_BOOL)
    for (size_t k = 0; k < bytes; k++) b[k] &= 1;
  if (dtype == LUON_DTYPE_F32) /* keep NaN payloads out of the comparison's way */
    for (int64_t k = 0; k < n; k++) ((float *)b)[k] = (float)(rnd() % 1000) / 8.0f - 60.0f;
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(b, dtype, ndim, shape, LUON_CPU, dev_id, &t));
  free(b);
  return t;
}

/* Host bytes of t, row-major, in its own dtype. */
static unsigned char *host_bytes(const luon_tensor *t, size_t *n) {
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  *n = (size_t)in.size * (size_t)luon_dtype_size(in.dtype);
  unsigned char *b = malloc(*n + 1);
  CHECK_OK(luon_tensor_to_host(t, b, in.dtype, *n));
  return b;
}

static bool same_tensor(const luon_tensor *a, const luon_tensor *b) {
  luon_tensor_info x, y;
  luon_tensor_info_get(a, &x);
  luon_tensor_info_get(b, &y);
  if (x.dtype != y.dtype || x.ndim != y.ndim) return false;
  for (int d = 0; d < x.ndim; d++)
    if (x.shape[d] != y.shape[d]) return false;
  size_t na, nb;
  unsigned char *ba = host_bytes(a, &na), *bb = host_bytes(b, &nb);
  bool same = na == nb && memcmp(ba, bb, na) == 0;
  free(ba);
  free(bb);
  return same;
}

/* ---- round trips ---------------------------------------------------------- */

static void test_round_trip(void) {
  enum { N = LUON_DTYPE_COUNT - 1 + 4 }; /* every dtype, then four odd cases */
  luon_tensor *t[N];
  const char *names[N];
  char namebuf[N][64];
  int k = 0;
  for (int32_t dt = 1; dt < LUON_DTYPE_COUNT; dt++) {
    int64_t shape[3] = {2, 3, 5};
    t[k] = make(dt, 3, shape, 0);
    snprintf(namebuf[k], sizeof namebuf[k], "layer%d.%s", k, luon_dtype_name(dt));
    names[k] = namebuf[k];
    k++;
  }
  /* a scalar, an empty tensor, a transposed view on cpu(1), odd names */
  t[k] = make(LUON_DTYPE_F64, 0, NULL, 0);
  names[k++] = "scalar \"quoted\" \\ back\\slash\n";
  int64_t es[2] = {0, 4};
  t[k] = make(LUON_DTYPE_I64, 2, es, 0);
  names[k++] = "empty.\xc3\xa9t\xc3\xa9";
  int64_t bs[2] = {3, 4};
  luon_tensor *base = make(LUON_DTYPE_F32, 2, bs, 1);
  int64_t ts[2] = {4, 3}, tst[2] = {1, 4};
  CHECK_OK(luon_tensor_view(base, 2, ts, tst, 0, &t[k]));
  names[k++] = "transposed";
  int64_t ss[1] = {2}, sst[1] = {5};
  luon_tensor *big = make(LUON_DTYPE_U8, 1, (int64_t[]){11}, 0);
  CHECK_OK(luon_tensor_view(big, 1, ss, sst, 1, &t[k]));
  names[k++] = "strided";
  CHECK(k == N, "k %d", k);

  const char *path = tmp_path("all.safetensors");
  CHECK_OK(luon_safetensors_save(path, N, names, t));

  /* the layout: length, header starting with '{', data 8-aligned */
  size_t n;
  unsigned char *bytes = read_bytes(path, &n);
  CHECK(bytes && n > 8, "file of %zu bytes", n);
  uint64_t hlen = 0;
  for (int b = 0; b < 8; b++) hlen |= (uint64_t)bytes[b] << (8 * b);
  CHECK((8 + hlen) % 8 == 0, "data starts at %llu", (unsigned long long)(8 + hlen));
  CHECK(bytes[8] == '{', "header starts with %c", bytes[8]);
  CHECK(strstr((char *)bytes + 8, "\"__metadata__\":{\"format\":\"luon\"}") != NULL, "metadata");
  CHECK(strstr((char *)bytes + 8, "\"dtype\":\"BF16\",\"shape\":[2,3,5]") != NULL, "bf16 entry");
  free(bytes);

  for (int32_t dev = 0; dev < 2; dev++) {
    luon_safetensors *h = NULL;
    CHECK_OK(luon_safetensors_open(path, &h));
    CHECK(luon_safetensors_count(h) == N, "count %d", luon_safetensors_count(h));
    for (int i = 0; i < N && h; i++) {
      const char *nm = luon_safetensors_name(h, i);
      CHECK(nm && strcmp(nm, names[i]) == 0, "name %d: '%s' vs '%s'", i, nm ? nm : "(null)", names[i]);
      int32_t dt, nd;
      int64_t sh[8];
      CHECK_OK(luon_safetensors_shape(h, i, &dt, &nd, sh));
      luon_tensor *r = NULL;
      CHECK_OK(luon_safetensors_get(h, i, LUON_CPU, dev, &r));
      if (!r) continue;
      luon_tensor_info in;
      luon_tensor_info_get(r, &in);
      CHECK(in.dev_type == LUON_CPU && in.dev_id == dev, "device %d", in.dev_id);
      CHECK(in.dtype == dt && in.ndim == nd, "shape query of %d", i);
      CHECK(same_tensor(r, t[i]), "tensor %d (%s) differs after the round trip", i, names[i]);
      luon_tensor_release(r);
    }
    luon_tensor *r = NULL;
    CHECK(luon_safetensors_get(h, N, LUON_CPU, 0, &r) == LUON_EINVAL, "index out of range");
    CHECK(strstr(luon_last_error(), "out of range") != NULL, "%s", luon_last_error());
    CHECK(luon_safetensors_name(h, -1) == NULL, "name -1");
    luon_safetensors_close(h);
  }
  luon_safetensors_close(NULL);

  /* zero tensors */
  CHECK_OK(luon_safetensors_save(tmp_path("none.safetensors"), 0, NULL, NULL));
  luon_safetensors *h = NULL;
  CHECK_OK(luon_safetensors_open(tmp_path("none.safetensors"), &h));
  CHECK(luon_safetensors_count(h) == 0, "empty file count");
  luon_safetensors_close(h);

  for (int i = 0; i < N; i++) luon_tensor_release(t[i]);
  luon_tensor_release(base);
  luon_tensor_release(big);
}

/* ---- saving: argument errors and atomic replacement ----------------------- */

static bool dir_has_tmp(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "ls %s | grep -q '\\.tmp\\.'", dir);
  return system(cmd) == 0;
}

static void test_save_errors(void) {
  int64_t sh[1] = {3};
  luon_tensor *a = make(LUON_DTYPE_F32, 1, sh, 0);
  luon_tensor *ts[2] = {a, a};
  const char *path = tmp_path("keep.safetensors");
  write_bytes(path, "old contents", 12);

  const char *dup[2] = {"w", "w"};
  CHECK(luon_safetensors_save(path, 2, dup, ts) == LUON_EINVAL, "duplicate names");
  CHECK(strstr(luon_last_error(), "two tensors are named 'w'") != NULL, "%s", luon_last_error());
  const char *empty[1] = {""};
  CHECK(luon_safetensors_save(path, 1, empty, ts) == LUON_EINVAL, "empty name");
  const char *meta[1] = {"__metadata__"};
  CHECK(luon_safetensors_save(path, 1, meta, ts) == LUON_EINVAL, "reserved name");
  luon_tensor *nul[1] = {NULL};
  const char *one[1] = {"x"};
  CHECK(luon_safetensors_save(path, 1, one, nul) == LUON_EINVAL, "NULL tensor");
  CHECK(luon_safetensors_save(NULL, 1, one, ts) == LUON_EINVAL, "NULL path");
  CHECK(luon_safetensors_save(path, -1, one, ts) == LUON_EINVAL, "negative count");

  /* a missing directory: EIO naming the path, nothing created */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", dir);
  CHECK(luon_safetensors_save(missing, 1, one, ts) == LUON_EIO, "missing dir");
  CHECK(strstr(luon_last_error(), missing) != NULL, "message names the path: %s", luon_last_error());

  /* a directory or a device in the way: refused, left as it is, no temp file */
  const char *d = tmp_path("adir");
  mkdir(d, 0755);
  CHECK(luon_safetensors_save(d, 1, one, ts) == LUON_EIO, "save onto a directory");
  CHECK(strstr(luon_last_error(), "is a directory") != NULL, "%s", luon_last_error());
  CHECK(!dir_has_tmp(), "a temporary file was left behind");
  struct stat sb;
  CHECK(luon_safetensors_save("/dev/null", 1, one, ts) == LUON_EIO, "save onto /dev/null");
  CHECK(strstr(luon_last_error(), "is a device") != NULL, "%s", luon_last_error());
  CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode), "/dev/null is no longer a device");

  /* a FIFO is refused at once by the readers, not waited on for a writer */
  char fifo[600]; /* not tmp_path: its ring of 4 names still holds path */
  snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", dir);
  if (mkfifo(fifo, 0600) == 0) {
    luon_safetensors *fh = NULL;
    luon_tensor *ft = NULL;
    CHECK(luon_safetensors_open(fifo, &fh) == LUON_EIO && strstr(luon_last_error(), "not a regular file"),
          "FIFO: %s", luon_last_error());
    CHECK(luon_idx_read(fifo, LUON_CPU, 0, &ft) == LUON_EIO, "FIFO idx: %s", luon_last_error());
    unlink(fifo);
  }

  /* through a symbolic link: the target is written, the link stays */
  const char *target = tmp_path("target.safetensors"), *link = tmp_path("link.safetensors");
  write_bytes(target, "old", 3);
  CHECK(symlink(target, link) == 0, "symlink");
  CHECK_OK(luon_safetensors_save(link, 1, one, ts));
  CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced");
  luon_safetensors *lh = NULL;
  CHECK_OK(luon_safetensors_open(target, &lh));
  if (lh) luon_safetensors_close(lh);
  CHECK(!dir_has_tmp(), "a temporary file was left behind");
  unlink(link);
  unlink(target);

  /* the old file is untouched by the failures, then replaced by a success */
  size_t n;
  unsigned char *b = read_bytes(path, &n);
  CHECK(n == 12 && memcmp(b, "old contents", 12) == 0, "old file changed");
  free(b);
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  luon_safetensors *h = NULL;
  CHECK_OK(luon_safetensors_open(path, &h));
  CHECK(luon_safetensors_count(h) == 1, "replaced file");
  luon_safetensors_close(h);
  CHECK(!dir_has_tmp(), "a temporary file was left behind");
  luon_tensor_release(a);
}

/* ---- saving: the temporary file ------------------------------------------- */

static bool exists(const char *p) {
  struct stat sb;
  return lstat(p, &sb) == 0;
}

/* A pid that named a process a moment ago and names none now. */
static pid_t dead_pid(void) {
  pid_t c = fork();
  if (c == 0) _exit(0);
  waitpid(c, NULL, 0);
  return c;
}

/* Links planted at the temporary file's names redirect nothing: the old
 * name (PATH.tmp.<pid>) and the first 50 of the new ones. */
static void test_save_planted_links(luon_tensor *const *ts, const char *const *one) {
  const char *path = tmp_path("planted.safetensors"), *victim = tmp_path("victim");
  write_bytes(victim, "precious", 8);
  char name[700];
  for (int k = -1; k < 50; k++) {
    if (k < 0) snprintf(name, sizeof name, "%s.tmp.%ld", path, (long)getpid());
    else snprintf(name, sizeof name, "%s.tmp.%ld.%d", path, (long)getpid(), k);
    CHECK(symlink(victim, name) == 0, "symlink %s", name);
  }
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  size_t n;
  unsigned char *b = read_bytes(victim, &n);
  CHECK(n == 8 && b && memcmp(b, "precious", 8) == 0, "the save wrote through a planted link");
  free(b);
  struct stat sb;
  CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "the file is not a regular file");
  luon_safetensors *h = NULL;
  CHECK_OK(luon_safetensors_open(path, &h));
  if (h) luon_safetensors_close(h);
  for (int k = -1; k < 50; k++) {
    if (k < 0) snprintf(name, sizeof name, "%s.tmp.%ld", path, (long)getpid());
    else snprintf(name, sizeof name, "%s.tmp.%ld.%d", path, (long)getpid(), k);
    CHECK(lstat(name, &sb) == 0 && S_ISLNK(sb.st_mode), "planted link %s removed or replaced", name);
    unlink(name);
  }
  unlink(victim);
  unlink(path);
}

/* The temporary files of killed saves go at the next save of the path,
 * those of live writers stay. */
static void test_save_stale_temps(luon_tensor *const *ts, const char *const *one) {
  const char *path = tmp_path("stale.safetensors");
  pid_t dead = dead_pid();
  char old_style[700], new_style[700], live[700], locked[700], other[700];
  snprintf(old_style, sizeof old_style, "%s.tmp.%ld", path, (long)dead);
  snprintf(new_style, sizeof new_style, "%s.tmp.%ld.3", path, (long)dead);
  snprintf(live, sizeof live, "%s.tmp.%ld.0", path, (long)getppid());
  snprintf(locked, sizeof locked, "%s.tmp.%ld.7", path, (long)dead);
  snprintf(other, sizeof other, "%s.old.%ld", path, (long)dead);
  write_bytes(old_style, "x", 1);
  write_bytes(new_style, "x", 1);
  write_bytes(live, "x", 1);
  write_bytes(other, "x", 1);
  write_bytes(locked, "x", 1);
  /* a writer whose pid we cannot see (another pid namespace) holds its lock */
  int ready[2], stop[2];
  CHECK(pipe(ready) == 0 && pipe(stop) == 0, "pipes");
  pid_t holder = fork();
  if (holder == 0) {
    close(stop[1]);
    int fd = open(locked, O_RDONLY);
    char c = flock(fd, LOCK_EX) == 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    if (read(stop[0], &c, 1) < 0) _exit(1);
    _exit(0);
  }
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y', "the lock holder did not start");
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  CHECK(!exists(old_style), "the stale %s is still there", old_style);
  CHECK(!exists(new_style), "the stale %s is still there", new_style);
  CHECK(exists(live), "the temporary file of a live process was removed");
  CHECK(exists(locked), "a temporary file whose lock is held was removed");
  CHECK(exists(other), "a file of another name was removed");
  close(stop[1]);
  waitpid(holder, NULL, 0);
  close(ready[0]), close(ready[1]), close(stop[0]);
  /* its lock free now: the next save removes it */
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  CHECK(!exists(locked), "the stale %s is still there once its lock is free", locked);
  unlink(live);
  unlink(other);
  unlink(path);
}

/* A replaced file keeps its mode; a new one gets 0666 under the umask. */
static void test_save_mode(luon_tensor *const *ts, const char *const *one) {
  const char *path = tmp_path("mode.safetensors");
  mode_t mask = umask(022);
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  struct stat sb;
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 07777) == 0644, "new file mode %o", sb.st_mode & 07777);
  CHECK(chmod(path, 0600) == 0, "chmod");
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 07777) == 0600, "mode 600 became %o", sb.st_mode & 07777);
  CHECK(chmod(path, 0640) == 0, "chmod");
  CHECK_OK(luon_safetensors_save(path, 1, one, ts));
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 07777) == 0640, "mode 640 became %o", sb.st_mode & 07777);
  /* through a link: the target's mode */
  const char *link = tmp_path("mode-link.safetensors");
  CHECK(symlink(path, link) == 0, "symlink");
  CHECK(chmod(path, 0604) == 0, "chmod");
  CHECK_OK(luon_safetensors_save(link, 1, one, ts));
  CHECK(stat(path, &sb) == 0 && (sb.st_mode & 07777) == 0604, "target mode 604 became %o", sb.st_mode & 07777);
  umask(mask);
  unlink(link);
  unlink(path);
}

static volatile sig_atomic_t got_xfsz;
static void on_xfsz(int sig) { (void)sig, got_xfsz = 1; }

/* Past the file-size limit (ulimit -f) a save fails with an error and the
 * old file intact, where SIGXFSZ used to end the process. In a child, whose
 * limit we lower. */
static void test_save_file_size_limit(void) {
  const char *path = tmp_path("fsize.safetensors");
  write_bytes(path, "old contents", 12);
  pid_t c = fork();
  if (c == 0) {
    struct rlimit rl = {64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
    int64_t sh[1] = {1 << 20}; /* 4 MB of float32 */
    luon_tensor *big = make(LUON_DTYPE_F32, 1, sh, 0);
    if (!big) _exit(11);
    const char *one[1] = {"w"};
    if (luon_safetensors_save(path, 1, one, &big) != LUON_EIO) _exit(12);
    if (!strstr(luon_last_error(), "File too large")) _exit(13);
    struct sigaction sa;
    if (sigaction(SIGXFSZ, NULL, &sa) != 0 || sa.sa_handler != SIG_DFL) _exit(14); /* restored */
    /* a host's own handler stays and is called; the save still fails */
    signal(SIGXFSZ, on_xfsz);
    if (luon_safetensors_save(path, 1, one, &big) != LUON_EIO || !got_xfsz) _exit(15);
    if (sigaction(SIGXFSZ, NULL, &sa) != 0 || sa.sa_handler != on_xfsz) _exit(16);
    _exit(0);
  }
  int st = 0;
  waitpid(c, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %s %d", WIFSIGNALED(st) ? "killed by signal" : "exit",
        WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  size_t n;
  unsigned char *b = read_bytes(path, &n);
  CHECK(n == 12 && b && memcmp(b, "old contents", 12) == 0, "the old file changed");
  free(b);
  CHECK(!dir_has_tmp(), "a temporary file was left behind");
  unlink(path);
}

static void test_save_safety(void) {
  int64_t sh[1] = {3};
  luon_tensor *a = make(LUON_DTYPE_F32, 1, sh, 0);
  luon_tensor *ts[1] = {a};
  const char *one[1] = {"w"};
  test_save_planted_links(ts, one);
  test_save_stale_temps(ts, one);
  test_save_mode(ts, one);
  test_save_file_size_limit();
  luon_tensor_release(a);
}

/* ---- loading: corrupt files ----------------------------------------------- */

/* A file of header text `json` (length-prefixed, unpadded) and `ndata` data bytes. */
static void write_st(const char *path, const char *json, size_t ndata) {
  size_t hl = strlen(json);
  size_t n = 8 + hl + ndata;
  unsigned char *b = calloc(1, n + 1);
  for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)hl >> (8 * k));
  memcpy(b + 8, json, hl);
  write_bytes(path, b, n);
  free(b);
}

static void expect_format_error(const char *what, const char *path, const char *msg) {
  luon_safetensors *h = (luon_safetensors *)(uintptr_t)1;
  luon_status s = luon_safetensors_open(path, &h);
  CHECK(s == LUON_EFORMAT, "%s: status %d (%s)", what, s, luon_last_error());
  CHECK(h == NULL, "%s: handle not NULL after a failure", what);
  CHECK(strstr(luon_last_error(), msg) != NULL, "%s: message '%s' lacks '%s'", what, luon_last_error(), msg);
  CHECK(strstr(luon_last_error(), path) != NULL, "%s: message '%s' does not name the file", what,
        luon_last_error());
  if (s == LUON_OK) luon_safetensors_close(h);
}

static void test_corrupt(void) {
  const char *p = tmp_path("bad.safetensors");
  static const struct {
    const char *what, *json;
    size_t ndata;
    const char *msg;
  } cases[] = {
    {"ok", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F17\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
     "tensor 'w' has dtype 'F17'"},
    {"U32 unsupported", "{\"w\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "U32"},
    {"size mismatch", "{\"conv1.0.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
     "tensor 'conv1.0.weight' needs 12 bytes (F32, shape (3,)) but its data_offsets span 8"},
    {"past the end", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8, "past the end"},
    {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
    {"hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "belong to no tensor"},
    {"trailing data", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16,
     "the data section has 16 bytes but the tensors cover 8"},
    {"duplicate", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "two tensors are named 'w'"},
    {"negative dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
     "negative dimension (-2)"},
    {"reversed offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "end before"},
    {"negative offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,0]}}", 4, "negative data_offsets"},
    {"three offsets", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, "entries in its data_offsets"},
    {"one offset", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "1 data_offsets"},
    {"nine dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
     "more than 8 entries in its shape"},
    {"huge shape", "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,1]}}", 1,
     "too large"},
    {"empty, huge", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
     "too large"},
    {"missing field", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "lacks its data_offsets"},
    {"unknown field", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
     "unknown field 'x'"},
    {"field twice", "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
     "field 'dtype' twice"},
    {"empty entry", "{\"w\":{}}", 0, "empty entry"},
    {"fractional dim", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1, "fraction"},
    {"leading zero", "{\"w\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, "leading zero"},
    {"64-bit overflow", "{\"w\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,1]}}",
     1, "too large for 64 bits"},
    {"string dim", "{\"w\":{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}}", 1, "expected an integer"},
    {"truncated json", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, "malformed header"},
    {"not an object", "[1,2]", 0, "expected '{'"},
    {"empty header", "", 0, "malformed header"},
    {"trailing text", "{} x", 0, "unexpected text after"},
    {"bad escape", "{\"w\\q\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown escape"},
    {"NUL escape", "{\"w\\u0000\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "NUL"},
    {"lone surrogate", "{\"\\udc00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "surrogate"},
    {"half surrogate", "{\"\\ud800x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "surrogate"},
    {"short \\u", "{\"\\u12\":{}}", 0, "four hex digits"},
    {"control char", "{\"a\tb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "control character"},
    {"unterminated", "{\"abc", 0, "not terminated"},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "appears twice"},
    {"metadata list", "{\"__metadata__\":[1]}", 0, "must be an object"},
    {"metadata deep", "{\"__metadata__\":{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                      "[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 0,
     "nested more than"},
    {"metadata bad number", "{\"__metadata__\":{\"a\":1.}}", 0, "malformed number"},
    {"missing colon", "{\"w\" {}}", 0, "at byte 13: not valid JSON at '{}}'"},
    {"missing comma", "{\"w\":{\"dtype\":\"U8\" \"shape\":[1]}}", 0, "at byte 27: not valid JSON at '\"shape\":[1]}}'"},
    /* what a lenient JSON reader (cJSON, whose parse the header goes through) lets pass */
    {"byte-order mark", "\xef\xbb\xbf{}", 0, "unexpected byte 0xef"},
    {"control byte between tokens", "{\x01}", 0, "unexpected byte 0x01"},
    {"bad hex in \\u", "{\"\\u00zz\":{}}", 0, "four hex digits"},
    {"metadata -.5", "{\"__metadata__\":{\"a\":-.5}}", 0, "malformed number"},
    {"metadata 1.e5", "{\"__metadata__\":{\"a\":1.e5}}", 0, "malformed number"},
    {"key case", "{\"w\":{\"DTYPE\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown field 'DTYPE'"},
    {"metadata 65 deep", "{\"__metadata__\":{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 0, "nested more than 64"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    write_st(p, cases[c].json, cases[c].ndata);
    if (!cases[c].msg) {
      luon_safetensors *h = NULL;
      CHECK_OK(luon_safetensors_open(p, &h));
      luon_safetensors_close(h);
    } else {
      expect_format_error(cases[c].what, p, cases[c].msg);
    }
  }
  /* metadata of any JSON shape is skipped; escapes in names are decoded */
  write_st(p, " {\"__metadata__\":{\"a\":[1,-2.5e3,true,false,null,{\"b\":\"c\\\"\"}]},"
              "\"\\u00e9\\ud83d\\ude00\\/\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[0,1]}}  \n", 1);
  luon_safetensors *h = NULL;
  CHECK_OK(luon_safetensors_open(p, &h));
  if (h) {
    CHECK(strcmp(luon_safetensors_name(h, 0), "\xc3\xa9\xf0\x9f\x98\x80/") == 0, "decoded name");
    luon_safetensors_close(h);
  }

  /* numbers are read from the text: a dimension past 2^53 exactly, a
   * metadata number longer than any double's digits; 64 levels of metadata */
  write_st(p, "{\"__metadata__\":{\"n\":12345678901234567890123456789012345678901234567890123456789012345678901"
              ",\"d\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},"
              "\"w\":{\"dtype\":\"U8\",\"shape\":[0,9007199254740993],\"data_offsets\":[0,0]}}", 0);
  h = NULL;
  CHECK_OK(luon_safetensors_open(p, &h));
  if (h) {
    int32_t dt = 0, nd = 0;
    int64_t shape[8] = {0};
    CHECK_OK(luon_safetensors_shape(h, 0, &dt, &nd, shape));
    CHECK(nd == 2 && shape[0] == 0 && shape[1] == 9007199254740993LL, "shape (%lld,%lld)", (long long)shape[0],
          (long long)shape[1]);
    luon_safetensors_close(h);
  }

  /* a header of more values than any model has, which cJSON would take
   * gigabytes to hold at the largest header allowed: refused before */
  size_t nv = (4u << 20) + 1, blen = 2 * nv + 64;
  char *big = malloc(blen);
  size_t k = (size_t)snprintf(big, blen, "{\"__metadata__\":{\"a\":[");
  for (size_t v = 0; v < nv; v++) big[k++] = '0', big[k++] = ',';
  snprintf(big + k - 1, blen - k + 1, "]}}");
  write_st(p, big, 0);
  free(big);
  expect_format_error("too many values", p, "more than 4194304 keys and values");

  /* lengths: short file, absurd header, header past the end */
  write_bytes(p, "\x05\0\0\0", 4);
  expect_format_error("short file", p, "fewer than the 8");
  write_bytes(p, "", 0);
  expect_format_error("empty file", p, "fewer than the 8");
  unsigned char absurd[16] = {0, 0, 0, 0, 0, 0, 0, 0x40, '{', '}'};
  write_bytes(p, absurd, 16);
  expect_format_error("absurd length", p, "absurd");
  unsigned char past[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  write_bytes(p, past, 16);
  expect_format_error("length past the end", p, "runs past the end of the file");

  /* not a file */
  luon_safetensors *h2 = NULL;
  CHECK(luon_safetensors_open(tmp_path("nope"), &h2) == LUON_EIO, "missing file");
  CHECK(strstr(luon_last_error(), "No such file") != NULL, "%s", luon_last_error());
  CHECK(luon_safetensors_open(dir, &h2) == LUON_EIO, "a directory");
}

/* Every strict prefix of a valid file fails cleanly; random byte flips never crash. */
static void test_fuzz(void) {
  const char *good = tmp_path("good.safetensors");
  int64_t s1[2] = {2, 3}, s2[1] = {5};
  luon_tensor *t[3] = {make(LUON_DTYPE_F32, 2, s1, 0), make(LUON_DTYPE_I64, 1, s2, 0),
                       make(LUON_DTYPE_BOOL, 1, s2, 0)};
  const char *names[3] = {"conv1.0.weight", "conv1.0.bias", "mask"};
  CHECK_OK(luon_safetensors_save(good, 3, names, t));
  size_t n;
  unsigned char *b = read_bytes(good, &n);
  const char *p = tmp_path("fuzz.safetensors");
  for (size_t len = 0; len < n; len++) {
    write_bytes(p, b, len);
    luon_safetensors *h = NULL;
    luon_status s = luon_safetensors_open(p, &h);
    CHECK(s == LUON_EFORMAT && h == NULL, "truncated at %zu of %zu: status %d", len, n, s);
    CHECK(strncmp(luon_last_error(), "safetensors: ", 13) == 0, "truncated at %zu: '%s'", len, luon_last_error());
    if (h) luon_safetensors_close(h);
  }
  unsigned char *c = malloc(n);
  int opened = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(c, b, n);
    int flips = 1 + (int)(rnd() % 3);
    for (int f = 0; f < flips; f++) {
      size_t at = iter % 2 ? rnd() % n : rnd() % (n < 160 ? n : 160); /* half in the header */
      c[at] ^= (unsigned char)(1u << (rnd() % 8));
      if (rnd() % 4 == 0) c[at] = (unsigned char)rnd();
    }
    write_bytes(p, c, n);
    luon_safetensors *h = NULL;
    luon_status s = luon_safetensors_open(p, &h);
    CHECK(s == LUON_OK || s == LUON_EFORMAT, "flip %d: status %d (%s)", iter, s, luon_last_error());
    if (s != LUON_OK) {
      CHECK(luon_last_error()[0] != 0, "flip %d: no message", iter);
      continue;
    }
    opened++;
    for (int i = 0; i < luon_safetensors_count(h); i++) {
      luon_tensor *r = NULL;
      CHECK_OK(luon_safetensors_get(h, i, LUON_CPU, 0, &r));
      if (r) {
        luon_tensor_info in;
        luon_tensor_info_get(r, &in);
        if (in.dtype == LUON_DTYPE_BOOL) { /* bool bytes are normalised to 0/1 */
          size_t nb;
          unsigned char *v = host_bytes(r, &nb);
          for (size_t k = 0; k < nb; k++) CHECK(v[k] <= 1, "bool byte %u", v[k]);
          free(v);
        }
      }
      luon_tensor_release(r);
    }
    luon_safetensors_close(h);
  }
  CHECK(opened > 0, "no flipped file opened (flips in the data should)");
  free(c);
  free(b);
  for (int i = 0; i < 3; i++) luon_tensor_release(t[i]);
}

/* ---- IDX files -------------------------------------------------------------- */

static uint32_t crc32_of(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

/* A gzip file holding `data` in one stored (uncompressed) deflate block. */
static void write_gzip(const char *path, const unsigned char *data, size_t n, bool bad_crc) {
  unsigned char *b = malloc(n + 32);
  size_t k = 0;
  const unsigned char hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  memcpy(b, hdr, 10);
  k = 10;
  b[k++] = 1; /* BFINAL, stored */
  b[k++] = (unsigned char)(n & 0xFF);
  b[k++] = (unsigned char)(n >> 8);
  b[k++] = (unsigned char)(~n & 0xFF);
  b[k++] = (unsigned char)((~n >> 8) & 0xFF);
  memcpy(b + k, data, n);
  k += n;
  uint32_t crc = crc32_of(data, n) ^ (bad_crc ? 1u : 0u);
  for (int j = 0; j < 4; j++) b[k++] = (unsigned char)(crc >> (8 * j));
  for (int j = 0; j < 4; j++) b[k++] = (unsigned char)((uint32_t)n >> (8 * j));
  write_bytes(path, b, k);
  free(b);
}

static void expect_idx_error(const char *what, const char *path, luon_status st, const char *msg) {
  luon_tensor *t = NULL;
  luon_status s = luon_idx_read(path, LUON_CPU, 0, &t);
  CHECK(s == st, "%s: status %d (%s)", what, s, luon_last_error());
  CHECK(t == NULL, "%s: tensor after failure", what);
  CHECK(strstr(luon_last_error(), msg) != NULL, "%s: '%s' lacks '%s'", what, luon_last_error(), msg);
  CHECK(strstr(luon_last_error(), path) != NULL, "%s: '%s' does not name the file", what, luon_last_error());
  luon_tensor_release(t);
}

static void test_idx(void) {
  /* 3 images of 2x4 uint8: magic 0x00000803 */
  unsigned char img[48] = {0}; /* 40 bytes of file, room for a trailing byte */
  const unsigned char ih[16] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 4};
  memcpy(img, ih, 16);
  for (int k = 0; k < 24; k++) img[16 + k] = (unsigned char)(k * 10);
  const char *plain = tmp_path("img.idx"), *gz = tmp_path("img.idx.gz");
  write_bytes(plain, img, 40);
  write_gzip(gz, img, 40, false);
  for (int which = 0; which < 2; which++) {
    for (int32_t dev = 0; dev < 2; dev++) {
      luon_tensor *t = NULL;
      CHECK_OK(luon_idx_read(which ? gz : plain, LUON_CPU, dev, &t));
      if (!t) continue;
      luon_tensor_info in;
      luon_tensor_info_get(t, &in);
      CHECK(in.dtype == LUON_DTYPE_U8 && in.ndim == 3 && in.shape[0] == 3 && in.shape[1] == 2 &&
            in.shape[2] == 4 && in.dev_id == dev, "idx shape");
      CHECK(memcmp(in.data, img + 16, 24) == 0, "idx data");
      luon_tensor_release(t);
    }
  }
  /* int32 labels, big-endian in the file */
  const unsigned char lab[16] = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE};
  write_gzip(gz, lab, 16, false);
  luon_tensor *t = NULL;
  CHECK_OK(luon_idx_read(gz, LUON_CPU, 0, &t));
  if (t) {
    luon_tensor_info in;
    luon_tensor_info_get(t, &in);
    CHECK(in.dtype == LUON_DTYPE_I32 && in.ndim == 1 && in.shape[0] == 2, "int32 idx");
    CHECK(((int32_t *)in.data)[0] == 258 && ((int32_t *)in.data)[1] == -2, "int32 values %d %d",
          ((int32_t *)in.data)[0], ((int32_t *)in.data)[1]);
    luon_tensor_release(t);
  }

  const char *bad = tmp_path("bad.idx");
  write_bytes(bad, img, 39);
  expect_idx_error("truncated", bad, LUON_EFORMAT, "ends after 23 of the 24");
  write_bytes(bad, img, 41);
  expect_idx_error("trailing", bad, LUON_EFORMAT, "data after");
  write_bytes(bad, img, 10);
  expect_idx_error("short header", bad, LUON_EFORMAT, "ends inside the IDX header");
  write_bytes(bad, img, 2);
  expect_idx_error("tiny", bad, LUON_EFORMAT, "too short");
  unsigned char m[40];
  memcpy(m, img, 40);
  m[0] = 0x1f + 1;
  write_bytes(bad, m, 40);
  expect_idx_error("magic", bad, LUON_EFORMAT, "not an IDX file");
  memcpy(m, img, 40);
  m[2] = 0x0B;
  write_bytes(bad, m, 40);
  expect_idx_error("int16", bad, LUON_EFORMAT, "0x0b is not supported");
  memcpy(m, img, 40);
  m[3] = 0;
  write_bytes(bad, m, 40);
  expect_idx_error("0 dims", bad, LUON_EFORMAT, "0 dimensions");
  memcpy(m, img, 40);
  m[4] = 0x7F;
  write_bytes(bad, m, 40);
  expect_idx_error("huge claim", bad, LUON_EFORMAT, "more than a 40-byte file can hold");
  /* no elements, but strides past 64 bits: 0 x 2^31 x 2^31 x 2^31 */
  static const unsigned char empty_huge[20] = {0, 0, 8, 4, 0, 0, 0, 0, 0x80, 0, 0, 0,
                                               0x80, 0, 0, 0, 0x80, 0, 0, 0};
  write_bytes(bad, empty_huge, 20);
  expect_idx_error("empty, huge", bad, LUON_EFORMAT, "too large");
  write_gzip(bad, img, 40, true);
  expect_idx_error("bad crc", bad, LUON_EFORMAT, "corrupt gzip data");
  expect_idx_error("missing", tmp_path("nope.gz"), LUON_EIO, "No such file");
  luon_tensor *u = NULL;
  CHECK(luon_idx_read(plain, LUON_CPU, -1, &u) == LUON_EDEVICE, "bad device: %s", luon_last_error());
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/luon_test_io_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "cannot create a temporary directory\n");
    return 1;
  }
  test_round_trip();
  test_save_errors();
  test_save_safety();
  test_corrupt();
  test_fuzz();
  test_idx();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return TEST_RESULT;
}
