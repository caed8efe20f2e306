/* blas.c: OpenBLAS, loaded with dlopen on first use so that luon can pick
 * its kernel first: OpenBLAS 0.3.21 does not know recent CPUs (Zen 5 is
 * taken for a Pentium 4, "Prescott", at a fifth of the speed), so unless
 * OPENBLAS_CORETYPE is set we name the best kernel family the CPU runs.
 * (Only row-major calls are made; the fallback loop assumes it.)
 * OpenBLAS runs single-threaded: its threads spin in sched_yield between
 * calls and fought luon's own pool (parallel.c) for the two cores, so a
 * large product is instead split into row or column blocks over luon's
 * pool, and a product made inside a parallel kernel runs inline.
 * luon_interrupt must be seen within a few milliseconds, so no BLAS call
 * does more than about 2 STOP_FLOPS (a product stops between calls): a
 * product of more than STOP_FLOPS is cut into blocks of rows (or columns)
 * of C, which costs nothing measurable, and one whose blocks would still be
 * too big (a long inner dimension, a thin C) or that is larger than
 * TILE_ABOVE, into tiles of at most TILE_FLOPS, which costs 5-10% of the
 * speed (partial sums over K chunks, repacking). */
#include "internal.h"
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
typedef char *(*corename_fn)(void);
typedef void (*setthreads_fn)(int);

static sgemm_fn sgemm;
static dgemm_fn dgemm;
static corename_fn corename;
static char load_error[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *best_core(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return NULL; /* let OpenBLAS detect */
}

#define TILE_FLOPS (1.0 * (1 << 29)) /* see run_tiles */
#define TILE_ABOVE (4.0 * (1 << 30))
#define STOP_FLOPS (1.0 * (1 << 28))  /* ~5-15 ms on one core */
static double tile_flops = TILE_FLOPS;

static void load(void) {
  const char *tiles = getenv("LUON_GEMM_TILE_FLOPS");
  if (tiles && *tiles) tile_flops = atof(tiles);
  const char *env = getenv("LUON_BLAS_LIB");
  const char *names[] = {env, "libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  bool set_core = getenv("OPENBLAS_CORETYPE") == NULL && best_core() != NULL;
  if (set_core) setenv("OPENBLAS_CORETYPE", best_core(), 0);
  /* it runs one thread (see above): with OPENBLAS_NUM_THREADS unset, it
   * starts none of its own; with it set, they block signals, as ours do */
  bool set_threads_env = getenv("OPENBLAS_NUM_THREADS") == NULL;
  if (set_threads_env) setenv("OPENBLAS_NUM_THREADS", "1", 0);
  sigset_t old_mask;
  lu_signals_block(&old_mask);
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
    if (names[i] && *names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  /* leave the host's environment as it was */
  if (set_core) unsetenv("OPENBLAS_CORETYPE");
  if (set_threads_env) unsetenv("OPENBLAS_NUM_THREADS");
  if (!h) {
    snprintf(load_error, sizeof load_error, "cannot load OpenBLAS (libopenblas.so.0): %s", dlerror());
    return;
  }
  sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
  dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
  corename = (corename_fn)dlsym(h, "openblas_get_corename");
  setthreads_fn set_threads = (setthreads_fn)dlsym(h, "openblas_set_num_threads");
  if (set_threads) set_threads(1);
  if (!sgemm || !dgemm) snprintf(load_error, sizeof load_error, "the BLAS library has no cblas_sgemm");
}

luon_status lu_blas_ready(void) {
  pthread_once(&once, load);
  if (!sgemm || !dgemm) return lu_error(LUON_EUNSUPPORTED, "%s", load_error);
  return LUON_OK;
}

const char *luon_blas_info(void) {
  if (lu_blas_ready() != LUON_OK) return load_error;
  return corename ? corename() : "BLAS";
}

/* Without a BLAS (it failed to load), a plain loop keeps results right. */
#define NAIVE_GEMM(T)                                                              \
  for (int i = 0; i < m && !lu_interrupted(); i++)                                 \
    for (int j = 0; j < n; j++) {                                                  \
      double acc = 0;                                                              \
      for (int p = 0; p < k; p++) {                                                \
        T av = ta == CblasTrans ? a[(int64_t)p * lda + i] : a[(int64_t)i * lda + p]; \
        T bv = tb == CblasTrans ? b[(int64_t)j * ldb + p] : b[(int64_t)p * ldb + j]; \
        acc += (double)av * bv;                                                    \
      }                                                                            \
      T *cij = &c[(int64_t)i * ldc + j];                                           \
      *cij = (T)(alpha * acc + (beta == 0 ? 0 : beta * *cij));                     \
    }

/* One product split into blocks of rows of C (or of columns, when C is
 * wide), each a single-threaded BLAS call on one of luon's threads; or,
 * when it is large, into tiles (below). */
typedef struct split {
  bool dbl, by_rows;
  int ta, tb, m, n, k, lda, ldb, ldc, blk;
  double alpha, beta;
  const void *a, *b;
  void *c;
  int bm, bn, bk, tn;          /* tiles: bm x bn of C, the inner dimension bk at a time */
} split;

/* C[i0.., j0..] (m x n) = alpha op(A)[i0.., p0..] (m x kk) op(B)[p0.., j0..] (kk x n) + beta C */
static void gemm_at(const split *s, int i0, int j0, int p0, int m, int n, int kk, double beta) {
  size_t es = s->dbl ? sizeof(double) : sizeof(float);
  const char *a = (const char *)s->a + es * (s->ta == CblasTrans ? (size_t)p0 * (size_t)s->lda + (size_t)i0
                                                                 : (size_t)i0 * (size_t)s->lda + (size_t)p0);
  const char *b = (const char *)s->b + es * (s->tb == CblasTrans ? (size_t)j0 * (size_t)s->ldb + (size_t)p0
                                                                 : (size_t)p0 * (size_t)s->ldb + (size_t)j0);
  char *c = (char *)s->c + es * ((size_t)i0 * (size_t)s->ldc + (size_t)j0);
  if (s->dbl)
    dgemm(CblasRowMajor, s->ta, s->tb, m, n, kk, s->alpha, (const double *)a, s->lda, (const double *)b,
          s->ldb, beta, (double *)c, s->ldc);
  else
    sgemm(CblasRowMajor, s->ta, s->tb, m, n, kk, (float)s->alpha, (const float *)a, s->lda,
          (const float *)b, s->ldb, (float)beta, (float *)c, s->ldc);
}

/* Blocks t0..t1 of blk rows (or columns); stops between two blocks once
 * luon_interrupt was called. */
static void split_range(void *ctx, int64_t t0, int64_t t1) {
  const split *s = ctx;
  int total = s->by_rows ? s->m : s->n;
  for (int64_t t = t0; t < t1 && !lu_interrupted(); t++) {
    int i0 = (int)t * s->blk, i1 = i0 + s->blk > total ? total : i0 + s->blk;
    if (s->by_rows) /* rows i0..i1 of op(A) and C */
      gemm_at(s, i0, 0, 0, i1 - i0, s->n, s->k, s->beta);
    else            /* columns i0..i1 of op(B) and C */
      gemm_at(s, 0, i0, 0, s->m, i1 - i0, s->k, s->beta);
  }
}

/* Tiles t0..t1 (row-major over C), each over the inner dimension in bk
 * chunks; stops between two calls once luon_interrupt was called. */
static void tile_range(void *ctx, int64_t t0, int64_t t1) {
  const split *s = ctx;
  for (int64_t t = t0; t < t1; t++) {
    int i0 = (int)(t / s->tn) * s->bm, j0 = (int)(t % s->tn) * s->bn;
    int m = s->m - i0 < s->bm ? s->m - i0 : s->bm, n = s->n - j0 < s->bn ? s->n - j0 : s->bn;
    for (int p0 = 0; p0 < s->k; p0 += s->bk) {
      if (lu_interrupted()) return;
      gemm_at(s, i0, j0, p0, m, n, s->k - p0 < s->bk ? s->k - p0 : s->bk, p0 ? 1.0 : s->beta);
    }
  }
}

/* At most this many flops per BLAS call in a tiled product (~5-20 ms on
 * one core), and at most TILE_K of the inner dimension: the chunks depend
 * on k alone, so a product sums in the same order whatever m and n are.
 * LUON_GEMM_TILE_FLOPS overrides (for benchmarks; 0: no tiles). */
#define TILE_K 1024

static int round16(int64_t v) { return (int)((v + 15) / 16 * 16); }

/* A product above TILE_FLOPS, as tiles over the pool. Tiles are as square
 * as m and n allow (each call repacks its parts of A and B: big tiles keep
 * that to a few percent) and at least one per thread. */
static void run_tiles(split *s) {
  int nt = lu_num_threads();
  int chunks = (s->k + TILE_K - 1) / TILE_K;
  s->bk = (s->k + chunks - 1) / chunks;
  int64_t area = (int64_t)(tile_flops / (2.0 * s->bk));
  int64_t edge = 16;
  while ((edge + 16) * (edge + 16) <= area) edge += 16;
  s->bm = s->m < edge ? s->m : (int)edge;
  int64_t bn = area / (s->bm > 0 ? s->bm : 1);
  s->bn = s->n < bn ? s->n : round16(bn > 16 ? bn - 15 : 16);
  if (s->bn == s->n && s->bm < s->m) { /* C is narrow: taller tiles */
    int64_t bm = area / (s->n > 0 ? s->n : 1);
    s->bm = s->m < bm ? s->m : round16(bm > 16 ? bm - 15 : 16);
  }
  int tm = (s->m + s->bm - 1) / s->bm;
  s->tn = (s->n + s->bn - 1) / s->bn;
  while ((int64_t)tm * s->tn < nt && (s->bm > 16 || s->bn > 16)) { /* a tile per thread at least */
    if (s->bm >= s->bn) s->bm = round16((s->bm + 1) / 2), tm = (s->m + s->bm - 1) / s->bm;
    else s->bn = round16((s->bn + 1) / 2), s->tn = (s->n + s->bn - 1) / s->bn;
  }
  lu_parallel_for((int64_t)tm * s->tn, 1, tile_range, s);
}

/* Run on the pool when the product is worth waking it (about 2 MFLOP and
 * up), in blocks when it is long (see the top), as tiles when it is large. */
static bool run_split(split *s) {
  int nt = lu_num_threads();
  double flops = 2.0 * s->m * s->n * s->k;
  if (tile_flops > 0 && flops > (tile_flops > TILE_ABOVE ? tile_flops : TILE_ABOVE)) {
    run_tiles(s);
    return true;
  }
  bool stop = flops > STOP_FLOPS; /* long enough to need stopping points */
  if (!stop && (nt < 2 || flops < (double)(1 << 21))) return false;
  s->by_rows = s->m >= s->n;
  int total = s->by_rows ? s->m : s->n;
  int blk = (total + nt - 1) / nt;
  if (stop) { /* at most STOP_FLOPS a block, and at least 64 rows: B (A) is repacked per block */
    double per = 2.0 * (s->by_rows ? s->n : s->m) * s->k;
    double most = STOP_FLOPS / per;
    if (most < 64) most = 64;
    if (blk > most) blk = (int)most;
  }
  blk = (blk + 15) / 16 * 16; /* whole register tiles */
  if (stop && tile_flops > 0 &&
      (blk >= total || 2.0 * blk * (s->by_rows ? s->n : s->m) * s->k > 2 * STOP_FLOPS)) {
    run_tiles(s); /* one block would be the whole product, or the inner dimension is long */
    return true;
  }
  if (blk >= total) return false;
  s->blk = blk;
  lu_parallel_for((total + blk - 1) / blk, 1, split_range, s);
  return true;
}

void lu_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
  pthread_once(&once, load);
  if (sgemm) {
    split s = {false, false, ta, tb, m, n, k, lda, ldb, ldc, 0, alpha, beta, a, b, c, 0, 0, 0, 0};
    if (order == CblasRowMajor && run_split(&s)) return;
    sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  NAIVE_GEMM(float)
}

void lu_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
              int lda, const double *b, int ldb, double beta, double *c, int ldc) {
  pthread_once(&once, load);
  if (dgemm) {
    split s = {true, false, ta, tb, m, n, k, lda, ldb, ldc, 0, alpha, beta, a, b, c, 0, 0, 0, 0};
    if (order == CblasRowMajor && run_split(&s)) return;
    dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  NAIVE_GEMM(double)
}
