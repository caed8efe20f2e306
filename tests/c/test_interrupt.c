/* test_interrupt: stopping work that runs too long. luon_interrupt() and
 * its flag in the core (every op refuses to start while it is raised; a long
 * matmul or conv2d stops within milliseconds and hands out no result), and
 * luon_rt_interrupt / luon_rt_set_timeout on an embedded runtime (a Lua busy
 * loop, interpreted and JIT-compiled, a JIT-compiled loop calling ops, a
 * long C op; from another thread and from a signal handler), the runtime
 * usable after each. Times are
 * printed, and asserted only against generous bounds (a loaded 2-core VM). */
#include "luon_embed.h"
#include "testutil.h"
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define STOP_BOUND_S 2.0 /* "stops within": generous, the target is ~50 ms */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- a thread that interrupts after a delay, noting when -------------------- */

typedef struct interrupter {
  pthread_t th;
  int delay_ms;
  luon_rt *rt;          /* luon_rt_interrupt(rt), or luon_interrupt() when NULL */
  double at;            /* when it interrupted */
} interrupter;

static void *interrupt_later(void *arg) {
  interrupter *it = arg;
  sleep_ms(it->delay_ms);
  it->at = now_s();
  if (it->rt) luon_rt_interrupt(it->rt);
  else luon_interrupt();
  return NULL;
}

static void start_interrupter(interrupter *it, luon_rt *rt, int delay_ms) {
  memset(it, 0, sizeof *it);
  it->rt = rt;
  it->delay_ms = delay_ms;
  pthread_create(&it->th, NULL, interrupt_later, it);
}

/* ---- the core flag ------------------------------------------------------------ */

static luon_tensor *filled(int64_t r, int64_t c, float v) {
  luon_tensor *t = NULL;
  int64_t shape[2] = {r, c};
  size_t n = (size_t)(r * c);
  float *h = malloc(n * sizeof *h);
  for (size_t k = 0; k < n; k++) h[k] = v;
  CHECK_OK(luon_tensor_from_host(h, LUON_DTYPE_F32, 2, shape, LUON_CPU, 0, &t));
  free(h);
  return t;
}

static luon_status call2(const char *op, luon_tensor *a, luon_tensor *b, const luon_attrs *at, luon_tensor **out) {
  luon_tensor *in[3] = {a, b, NULL};
  int32_t nout = 1;
  *out = NULL;
  return luon_op_call(luon_op_find(op), b ? 2 : 1, in, at, &nout, out);
}

static void test_flag(void) {
  luon_tensor *a = filled(2, 2, 1), *y = NULL;
  CHECK(!luon_interrupted(), "the flag starts lowered");
  luon_interrupt();
  CHECK(luon_interrupted() == 1, "raised");
  CHECK(call2("add", a, a, NULL, &y) == LUON_EINTERRUPTED && !y, "an op does not start while it is raised");
  CHECK(strcmp(luon_last_error(), "add: interrupted") == 0, "%s", luon_last_error());
  CHECK(call2("add", a, a, NULL, &y) == LUON_EINTERRUPTED, "it stays raised until cleared");
  luon_interrupt_clear();
  CHECK(!luon_interrupted(), "cleared");
  CHECK_OK(call2("add", a, a, NULL, &y));
  float v[4];
  CHECK_OK(luon_tensor_to_host(y, v, LUON_DTYPE_F32, sizeof v));
  CHECK(v[0] == 2 && v[3] == 2, "the next op runs: %g", v[0]);
  luon_tensor_release(y);
  luon_tensor_release(a);
}

/* A matmul of n x n stopped `delay_ms` in: the status, no result, the time
 * from the interrupt to the return; then the next matmul is right. */
static void test_long_matmul(int64_t n) {
  luon_tensor *a = filled(n, n, 1), *y = NULL;
  interrupter it;
  double t0 = now_s();
  start_interrupter(&it, NULL, 100);
  luon_status s = call2("matmul", a, a, NULL, &y);
  double t1 = now_s();
  pthread_join(it.th, NULL);
  CHECK(s == LUON_EINTERRUPTED && !y, "matmul (%lld)^2 status %d", (long long)n, (int)s);
  CHECK(strcmp(luon_last_error(), "matmul: interrupted") == 0, "%s", luon_last_error());
  CHECK(t1 - it.at < STOP_BOUND_S, "matmul stopped %.3f s after the interrupt", t1 - it.at);
  fprintf(stderr, "test_interrupt: matmul (%lld,%lld)^2 stopped %.1f ms after luon_interrupt (%.0f ms in)\n",
          (long long)n, (long long)n, 1e3 * (t1 - it.at), 1e3 * (it.at - t0));
  luon_tensor_release(y);
  luon_interrupt_clear();
  luon_tensor *b = filled(1024, n, 0.5f), *c = filled(n, 256, 2), *z = NULL;
  CHECK_OK(call2("matmul", b, c, NULL, &z));
  float *v = malloc(sizeof(float) * 1024 * 256);
  if (z) CHECK_OK(luon_tensor_to_host(z, v, LUON_DTYPE_F32, sizeof(float) * 1024 * 256));
  CHECK(z && v[0] == (float)n && v[1024 * 256 - 1] == (float)n, "the next matmul is right: %g (want %lld)",
        z ? v[0] : -1.0, (long long)n);
  free(v);
  luon_tensor_release(z);
  luon_tensor_release(b);
  luon_tensor_release(c);
  luon_tensor_release(a);
}

/* A product large enough to be tiled (blas.c: tiles of C, the inner
 * dimension in chunks) against a double-precision sum, with B plain and
 * seen transposed. */
static void test_tiled_product(void) {
  const int64_t M = 600, K = 3000, N = 1300; /* 4.7 GFLOP: above blas.c's TILE_ABOVE */
  int64_t as[2] = {M, K}, bs[2] = {K, N}, bts[2] = {N, K};
  float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N));
  float *bt = malloc(sizeof(float) * (size_t)(K * N)), *y = malloc(sizeof(float) * (size_t)(M * N));
  unsigned r = 12345;
  for (int64_t k = 0; k < M * K; k++) a[k] = (float)((r = r * 1103515245u + 12345u) >> 16 & 1023) / 512 - 1;
  for (int64_t k = 0; k < K * N; k++) b[k] = (float)((r = r * 1103515245u + 12345u) >> 16 & 1023) / 512 - 1;
  for (int64_t p = 0; p < K; p++)
    for (int64_t j = 0; j < N; j++) bt[j * K + p] = b[p * N + j];
  luon_tensor *ta = NULL, *tb = NULL, *tbt = NULL, *view = NULL;
  CHECK_OK(luon_tensor_from_host(a, LUON_DTYPE_F32, 2, as, LUON_CPU, 0, &ta));
  CHECK_OK(luon_tensor_from_host(b, LUON_DTYPE_F32, 2, bs, LUON_CPU, 0, &tb));
  CHECK_OK(luon_tensor_from_host(bt, LUON_DTYPE_F32, 2, bts, LUON_CPU, 0, &tbt));
  int64_t vstr[2] = {1, K};
  CHECK_OK(luon_tensor_view(tbt, 2, bs, vstr, 0, &view));
  luon_tensor *rhs[2] = {tb, view};
  for (int v = 0; v < 2; v++) {
    luon_tensor *t = NULL;
    CHECK_OK(call2("matmul", ta, rhs[v], NULL, &t));
    if (!t) continue;
    CHECK_OK(luon_tensor_to_host(t, y, LUON_DTYPE_F32, sizeof(float) * (size_t)(M * N)));
    double worst = 0;
    for (int64_t i = 0; i < M; i += 7)
      for (int64_t j = 0; j < N; j += 5) {
        double ref = 0;
        for (int64_t p = 0; p < K; p++) ref += (double)a[i * K + p] * b[p * N + j];
        double e = (y[i * N + j] - ref) / (1 + (ref < 0 ? -ref : ref));
        if ((e < 0 ? -e : e) > worst) worst = e < 0 ? -e : e;
      }
    CHECK(worst < 1e-4, "tiled product (B %s): relative error %g", v ? "transposed" : "plain", worst);
    luon_tensor_release(t);
  }
  luon_tensor_release(view);
  luon_tensor_release(ta);
  luon_tensor_release(tb);
  luon_tensor_release(tbt);
  free(a), free(b), free(bt), free(y);
}

/* A big conv2d, (16,128,128,128) * (128,128,3,3): stopped the same way. */
static luon_tensor *zeros4(int64_t a, int64_t b, int64_t c, int64_t d) {
  int64_t shape[4] = {a, b, c, d};
  float *h = calloc((size_t)(a * b * c * d), sizeof *h);
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(h, LUON_DTYPE_F32, 4, shape, LUON_CPU, 0, &t));
  free(h);
  return t;
}

static void test_long_conv(void) {
  luon_tensor *x = zeros4(16, 128, 128, 128), *w = zeros4(128, 128, 3, 3), *y = NULL;
  interrupter it;
  start_interrupter(&it, NULL, 100);
  luon_status s = call2("conv2d", x, w, NULL, &y);
  double t1 = now_s();
  pthread_join(it.th, NULL);
  CHECK(s == LUON_EINTERRUPTED && !y, "conv2d status %d: %s", (int)s, luon_last_error());
  CHECK(strcmp(luon_last_error(), "conv2d: interrupted") == 0, "%s", luon_last_error());
  CHECK(t1 - it.at < STOP_BOUND_S, "conv2d stopped %.3f s after the interrupt", t1 - it.at);
  fprintf(stderr, "test_interrupt: conv2d (16,128,128,128) stopped %.1f ms after luon_interrupt\n",
          1e3 * (t1 - it.at));
  luon_tensor_release(y);
  luon_interrupt_clear();
  luon_tensor_release(x);
  luon_tensor_release(w);
}

/* An op that runs for T seconds whole, interrupted T/5 in, must stop long
 * before it would have finished: within T/2 of the interrupt (the ops below
 * take ~0.3-2 s on a 2-core VM; they stop within milliseconds). Then the
 * same op runs whole again. in[1] may be NULL. */
static void stop_op(const char *op, luon_tensor *a, luon_tensor *b, const luon_attrs *at, const char *what) {
  luon_tensor *y = NULL;
  CHECK_OK(call2(op, a, b, at, &y)); /* the first, with its output's page faults */
  luon_tensor_release(y);
  y = NULL;
  double t0 = now_s();
  CHECK_OK(call2(op, a, b, at, &y));
  double whole = now_s() - t0;
  luon_tensor_release(y);
  y = NULL;
  interrupter it;
  start_interrupter(&it, NULL, (int)(whole * 1000 / 5));
  luon_status s = call2(op, a, b, at, &y);
  double t1 = now_s();
  pthread_join(it.th, NULL);
  CHECK(s == LUON_EINTERRUPTED && !y, "%s: status %d (whole: %.0f ms)", what, (int)s, 1e3 * whole);
  CHECK(t1 - it.at < whole / 2, "%s stopped %.1f ms after the interrupt; it takes %.0f ms whole", what,
        1e3 * (t1 - it.at), 1e3 * whole);
  fprintf(stderr, "test_interrupt: %s (%.0f ms whole) stopped %.1f ms after luon_interrupt\n", what, 1e3 * whole,
          1e3 * (t1 - it.at));
  luon_tensor_release(y);
  luon_interrupt_clear();
  y = NULL;
  CHECK_OK(call2(op, a, b, at, &y));
  luon_tensor_release(y);
}

/* A view of t's first element as `shape`, every stride 0 (no memory). */
static luon_tensor *broadcast(luon_tensor *t, int nd, int64_t d0, int64_t d1) {
  int64_t shape[2] = {d0, d1}, st[2] = {0, 0};
  luon_tensor *v = NULL;
  CHECK_OK(luon_tensor_view(t, nd, shape, st, 0, &v));
  return v;
}

static void test_long_kernels(void) {
  luon_tensor *one = filled(1, 1, 1.5f), *x = NULL;
  luon_attrs f64 = {0};
  f64.dtype = LUON_DTYPE_F64;
  CHECK_OK(call2("copy", one, NULL, &f64, &x));
  /* elementwise: (4000,1) ** (1,4000) in float64, a pow per element, strided rows */
  luon_tensor *col = broadcast(x, 2, 4000, 1), *row = broadcast(x, 2, 1, 4000);
  stop_op("power", col, row, NULL, "power (4000,4000) float64");
  /* elementwise, flat: 16M float64 elements */
  luon_tensor *flat = NULL, *big = broadcast(x, 1, (int64_t)1 << 24, 0);
  CHECK_OK(call2("copy", big, NULL, NULL, &flat));
  stop_op("power", flat, flat, NULL, "power of 16M float64, flat");
  /* reduction: a sum over 5e8 elements of a broadcast view */
  luon_tensor *wide = broadcast(x, 2, 16384, 32768);
  stop_op("sum", wide, NULL, NULL, "sum of (16384,32768)");
  /* the converting copy (astype) of a broadcast view: 48M elements */
  luon_tensor *src = broadcast(one, 2, 6000, 8000);
  stop_op("copy", src, NULL, &f64, "astype of (6000,8000) to float64");
  /* a matmul that ran whole before it was cut into blocks (blas.c) */
  luon_tensor *m = filled(1280, 1280, 0.5f);
  stop_op("matmul", m, m, NULL, "matmul (1280,1280)^2");
  luon_tensor *all[] = {one, x, col, row, flat, big, wide, src, m};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) luon_tensor_release(all[k]);
}

/* Another thread raising and clearing the flag while ops run (a host's
 * Ctrl-C, a runtime's call clearing it): every op either fails
 * interrupted or gives its whole result, never a partial one with LUON_OK.
 * And luon_tensor_copy, which writes gradients and parameters in place,
 * never stops half-way. */
static volatile int toggling;
static void *toggle(void *arg) {
  (void)arg;
  unsigned r = 7;
  while (toggling) {
    r = r * 1103515245u + 12345u;
    sleep_ms(0);
    struct timespec ts = {0, (long)(r >> 8) % 30000000};
    nanosleep(&ts, NULL);
    luon_interrupt();
    ts.tv_nsec = 100000;
    nanosleep(&ts, NULL);
    luon_interrupt_clear();
  }
  return NULL;
}

static void test_cleared_interrupts(void) {
  int64_t n = (int64_t)1 << 23;
  luon_tensor *src = filled(1, n, 3), *dst = filled(1, n, 0);
  luon_attrs f64 = {0};
  f64.dtype = LUON_DTYPE_F64;
  double *v = malloc(sizeof(double) * (size_t)n);
  float *w = malloc(sizeof(float) * (size_t)n);
  pthread_t th;
  toggling = 1;
  pthread_create(&th, NULL, toggle, NULL);
  int ok = 0, stopped = 0, partial = 0;
  for (int k = 0; k < 40; k++) {
    luon_tensor *y = NULL;
    luon_status s = call2("copy", src, NULL, &f64, &y);
    if (s == LUON_OK) {
      ok++;
      CHECK_OK(luon_tensor_to_host(y, v, LUON_DTYPE_F64, sizeof(double) * (size_t)n));
      for (int64_t i = 0; i < n; i += 4093)
        if (v[i] != 3) { partial++; break; }
    } else {
      CHECK(s == LUON_EINTERRUPTED, "status %d: %s", (int)s, luon_last_error());
      stopped++;
    }
    luon_tensor_release(y);
    CHECK_OK(luon_tensor_copy(dst, src)); /* in place: whole, raised flag or not */
    CHECK_OK(luon_tensor_to_host(dst, w, LUON_DTYPE_F32, sizeof(float) * (size_t)n));
    CHECK(w[0] == 3 && w[n / 2] == 3 && w[n - 1] == 3, "luon_tensor_copy left %g %g %g", w[0], w[n / 2], w[n - 1]);
    float zero = 0;
    luon_tensor *z = NULL;
    int64_t one = 1;
    CHECK_OK(luon_tensor_from_host(&zero, LUON_DTYPE_F32, 1, &one, LUON_CPU, 0, &z));
    luon_tensor_release(z);
  }
  toggling = 0;
  pthread_join(th, NULL);
  luon_interrupt_clear();
  CHECK(partial == 0, "%d of %d copies returned LUON_OK with a partial result", partial, ok);
  fprintf(stderr, "test_interrupt: with interrupts raised and cleared by another thread: %d whole, %d interrupted, "
                  "%d partial\n", ok, stopped, partial);
  free(v);
  free(w);
  luon_tensor_release(src);
  luon_tensor_release(dst);
}

/* ---- an embedded runtime -------------------------------------------------------- */

static luon_rt *signal_rt;
static void on_alarm(int sig) {
  (void)sig;
  luon_rt_interrupt(signal_rt); /* async-signal-safe */
}

/* luon_rt_call(fn) stopped by another thread after delay_ms: the status,
 * a message containing want, the time from the interrupt to the return. */
static void stop_call(luon_rt *rt, const char *fn, int nin, const luon_buffer *in, int nout,
                      const luon_buffer *out, const char *want, const char *what) {
  interrupter it;
  start_interrupter(&it, rt, 50);
  luon_status s = luon_rt_call(rt, fn, nin, in, nout, out);
  double t1 = now_s();
  pthread_join(it.th, NULL);
  CHECK(s == LUON_EINTERRUPTED, "%s: status %d: %s", what, (int)s, luon_rt_last_error(rt));
  CHECK(strstr(luon_rt_last_error(rt), want) != NULL, "%s: %s", what, luon_rt_last_error(rt));
  CHECK(t1 - it.at < STOP_BOUND_S, "%s stopped %.3f s after luon_rt_interrupt", what, t1 - it.at);
  fprintf(stderr, "test_interrupt: %s stopped %.2f ms after luon_rt_interrupt\n", what, 1e3 * (t1 - it.at));
}

static void test_runtime(void) {
  luon_rt *rt = NULL;
  CHECK_OK(luon_rt_new(&rt));
  if (!rt) return;
  CHECK_OK(luon_rt_dostring(rt, "np = require('luon').np\n"
                                "function spin() local k = 0 while true do k = k + 1 end end\n"
                                "jit.off(spin)\n"
                                "function spin_jit() local k = 0 while true do k = k + 1 end end\n"
                                "function spin_ops(x) while true do x = x + 1 end end\n"
                                "function catch() while true do pcall(spin) end end\n"
                                "jit.off(catch)\n"
                                "function mm(a) return np.dot(a, a) end\n"
                                "function double(x) return x * 2 end"));
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  luon_buffer in = {x, LUON_DTYPE_F32, 1, {4}}, out = {y, LUON_DTYPE_F32, 1, {4}};

  luon_rt_interrupt(NULL); /* nothing to do */
  luon_rt_interrupt(rt);   /* no call under way: nothing happens */
  CHECK_OK(luon_rt_call(rt, "double", 1, &in, 1, &out));
  CHECK(y[3] == 8, "an interrupt between calls is not kept: %g", y[3]);

  stop_call(rt, "spin", 0, NULL, 0, NULL, "interrupted by luon_rt_interrupt", "a Lua busy loop");
  CHECK(strstr(luon_rt_last_error(rt), "stack traceback") != NULL, "with a traceback: %s", luon_rt_last_error(rt));
  y[3] = 0;
  CHECK_OK(luon_rt_call(rt, "double", 1, &in, 1, &out));
  CHECK(y[3] == 8, "the next call runs: %g", y[3]);

  stop_call(rt, "catch", 0, NULL, 0, NULL, "interrupted", "a loop that catches the error");
  /* compiled code runs no hooks: LuaJIT's profiler makes it leave its trace (jitstop.c) */
  CHECK_OK(luon_rt_dostring(rt, "assert(jit.status(), 'the JIT is on')"));
  stop_call(rt, "spin_jit", 0, NULL, 0, NULL, "interrupted", "a JIT-compiled busy loop");
  y[3] = 0;
  CHECK_OK(luon_rt_call(rt, "double", 1, &in, 1, &out));
  CHECK(y[3] == 8, "the next call runs: %g", y[3]);
  stop_call(rt, "spin_ops", 1, &in, 0, NULL, "interrupted", "a JIT-compiled loop of ops");

  /* a long C op: (2048,2048) @ (2048,2048); the output buffer is not written */
  int64_t n = 2048;
  float *big = malloc(sizeof(float) * (size_t)(n * n)), *res = malloc(sizeof(float) * (size_t)(n * n));
  for (int64_t k = 0; k < n * n; k++) big[k] = 1, res[k] = -7;
  luon_buffer bin = {big, LUON_DTYPE_F32, 2, {n, n}}, bout = {res, LUON_DTYPE_F32, 2, {n, n}};
  stop_call(rt, "mm", 1, &bin, 1, &bout, "interrupted", "a (2048,2048) matmul in a call");
  CHECK(res[0] == -7 && res[n * n - 1] == -7, "the output buffer is untouched: %g", res[0]);

  /* the time limit: a runaway call fails, a quick one (its limit re-armed) runs */
  CHECK(luon_rt_set_timeout(rt, -1) == LUON_EINVAL, "negative timeout");
  CHECK_OK(luon_rt_set_timeout(rt, 100000));
  double t0 = now_s();
  luon_status s = luon_rt_call(rt, "spin", 0, NULL, 0, NULL);
  double t1 = now_s();
  CHECK(s == LUON_EINTERRUPTED, "timeout: status %d: %s", (int)s, luon_rt_last_error(rt));
  CHECK(strstr(luon_rt_last_error(rt), "time limit of 100000 us") != NULL, "%s", luon_rt_last_error(rt));
  CHECK(t1 - t0 < 0.1 + STOP_BOUND_S, "a 100 ms limit stopped the call after %.3f s", t1 - t0);
  fprintf(stderr, "test_interrupt: a 100 ms time limit stopped a busy loop after %.1f ms\n", 1e3 * (t1 - t0));
  t0 = now_s();
  s = luon_rt_call(rt, "spin_jit", 0, NULL, 0, NULL);
  t1 = now_s();
  CHECK(s == LUON_EINTERRUPTED && t1 - t0 < 0.1 + STOP_BOUND_S, "a 100 ms limit on a compiled loop: %d after %.3f s",
        (int)s, t1 - t0);
  fprintf(stderr, "test_interrupt: a 100 ms time limit stopped a JIT-compiled loop after %.1f ms\n", 1e3 * (t1 - t0));
  for (int k = 0; k < 20; k++) {
    y[3] = 0;
    CHECK_OK(luon_rt_call(rt, "double", 1, &in, 1, &out));
    CHECK(y[3] == 8, "a quick call under the limit: %g", y[3]);
  }
  t0 = now_s();
  s = luon_rt_dostring(rt, "local x = np.ones({4}) while true do x = x + 1 end");
  t1 = now_s();
  CHECK(s == LUON_EINTERRUPTED && t1 - t0 < 0.1 + STOP_BOUND_S, "dostring under the limit: %d after %.3f s: %s",
        (int)s, t1 - t0, luon_rt_last_error(rt));
  sleep_ms(150); /* the watchdog has no call to stop now */
  CHECK_OK(luon_rt_set_timeout(rt, 0));
  CHECK_OK(luon_rt_call(rt, "double", 1, &in, 1, &out));

  /* from a signal handler */
  signal_rt = rt;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval tv = {{0, 0}, {0, 50000}};
  t0 = now_s();
  setitimer(ITIMER_REAL, &tv, NULL);
  s = luon_rt_call(rt, "spin", 0, NULL, 0, NULL);
  t1 = now_s();
  CHECK(s == LUON_EINTERRUPTED && t1 - t0 < 0.05 + STOP_BOUND_S, "from SIGALRM: %d after %.3f s", (int)s, t1 - t0);
  signal(SIGALRM, SIG_DFL);
  y[3] = 0;
  CHECK_OK(luon_rt_call(rt, "double", 1, &in, 1, &out));
  CHECK(y[3] == 8, "after the signal: %g", y[3]);

  free(big);
  free(res);
  luon_rt_free(rt);
}

/* Two runtimes on two threads: interrupting one leaves the other's call,
 * which runs ops all along, alone (the flag is the call's, not the process's). */
typedef struct other_call {
  luon_rt *rt;
  luon_status s;
  double t0, t1;
} other_call;

static void *run_other(void *arg) {
  other_call *o = arg;
  o->t0 = now_s();
  o->s = luon_rt_call(o->rt, "work", 0, NULL, 0, NULL);
  o->t1 = now_s();
  return NULL;
}

static void test_two_runtimes(void) {
  luon_rt *a = NULL, *b = NULL;
  CHECK_OK(luon_rt_new(&a));
  CHECK_OK(luon_rt_new(&b));
  if (!a || !b) return;
  CHECK_OK(luon_rt_dostring(a, "function spin() local k = 0 while true do k = k + 1 end end"));
  CHECK_OK(luon_rt_dostring(b, "np = require('luon').np\n"
                               "function work() local x, t = np.zeros({64}), os.clock() + 0.4\n"
                               "  while os.clock() < t do x = x + 1 end end"));
  other_call o = {b, LUON_OK, 0, 0};
  pthread_t th;
  pthread_create(&th, NULL, run_other, &o);
  sleep_ms(50);
  stop_call(a, "spin", 0, NULL, 0, NULL, "interrupted", "one of two runtimes");
  pthread_join(th, NULL);
  CHECK(o.s == LUON_OK, "the other runtime's call goes on: status %d: %s", (int)o.s, luon_rt_last_error(b));
  CHECK(o.t1 - o.t0 > 0.3, "the other call ran its whole 0.4 s: %.3f s", o.t1 - o.t0);
  luon_rt_free(a);
  luon_rt_free(b);
}

/* An attached state keeps its own hook across a call. */
static int host_hook_calls;
static void host_hook(lua_State *L, lua_Debug *ar) {
  (void)L;
  (void)ar;
  host_hook_calls++;
}

static void test_host_hook(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luon_rt *rt = NULL;
  CHECK_OK(luon_rt_attach(L, &rt));
  if (!rt) {
    lua_close(L);
    return;
  }
  CHECK_OK(luon_rt_dostring(rt, "function spin() while true do end end jit.off(spin)"));
  lua_sethook(L, host_hook, LUA_MASKCOUNT, 1000000);
  stop_call(rt, "spin", 0, NULL, 0, NULL, "interrupted", "a busy loop in an attached state");
  CHECK(lua_gethook(L) == host_hook && lua_gethookcount(L) == 1000000, "the host's hook is back");
  lua_sethook(L, NULL, 0, 0);
  luon_rt_free(rt);
  lua_close(L);
}

/* An interrupt may land anywhere in luon's Lua code, e.g. between an op
 * returning its new tensor and the array that owns it being made; the hook
 * waits for the user's code, C functions that luon's code calls included
 * (the index of the FFI's output buffer is one): no tensor is lost. The
 * loop runs interpreted so that the hook sees every call; the interrupts
 * come at spread-out times. */
typedef struct late_stop {
  pthread_t th;
  luon_rt *rt;
  long delay_us;
  int done; /* the call returned */
} late_stop;

/* Interrupt after delay_us, and again every millisecond until the call
 * has returned: an interrupt that comes before the call has begun stops
 * nothing (there is no call yet), which a loaded machine makes happen. */
static void *stop_after(void *arg) {
  late_stop *ls = arg;
  struct timespec ts = {0, ls->delay_us * 1000L}, ms = {0, 1000000L};
  nanosleep(&ts, NULL);
  while (!__atomic_load_n(&ls->done, __ATOMIC_ACQUIRE)) {
    luon_rt_interrupt(ls->rt);
    nanosleep(&ms, NULL);
  }
  return NULL;
}

static void test_no_lost_arrays(void) {
  luon_rt *rt = NULL;
  CHECK_OK(luon_rt_new(&rt));
  if (!rt) return;
  CHECK_OK(luon_rt_dostring(rt, "np = require('luon').np\n"
                                "function loop() local x = np.ones({4}) while true do x = x * 2 + 1 end end\n"
                                "function settle() collectgarbage() collectgarbage() require('luon.core').sweep() end"));
  CHECK_OK(luon_rt_call(rt, "settle", 0, NULL, 0, NULL));
  int64_t live = luon_counters_get()->tensors_live;
  int stopped = 0;
  for (int k = 0; k < 400; k++) {
    late_stop ls = {0, rt, 200 + 37 * (k % 50), 0};
    pthread_create(&ls.th, NULL, stop_after, &ls);
    stopped += luon_rt_call(rt, "loop", 0, NULL, 0, NULL) == LUON_EINTERRUPTED;
    __atomic_store_n(&ls.done, 1, __ATOMIC_RELEASE);
    pthread_join(ls.th, NULL);
  }
  CHECK(stopped == 400, "%d of 400 loops stopped", stopped);
  CHECK_OK(luon_rt_call(rt, "settle", 0, NULL, 0, NULL));
  int64_t now = luon_counters_get()->tensors_live;
  CHECK(now == live, "400 interrupted loops of ops: %lld arrays live before, %lld after", (long long)live,
        (long long)now);
  fprintf(stderr, "test_interrupt: 400 interrupted loops of ops left %lld arrays behind\n", (long long)(now - live));
  luon_rt_free(rt);
}

int main(void) {
  /* JIT-compiled loops stop only where LuaJIT's profiler runs (jitstop.c):
   * embedded runtimes ask for it (the `luon` executable always runs it) */
  setenv("LUON_JIT_STOP", "1", 1);
  test_flag();
  test_tiled_product();
  test_long_matmul(4096);
  test_long_conv();
  test_long_kernels();
  test_cleared_interrupts();
  test_runtime();
  test_host_hook();
  test_no_lost_arrays();
  test_two_runtimes();
  return TEST_RESULT;
}
