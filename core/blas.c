/* blas.c: OpenBLAS, loaded with dlopen on first use so that luon can pick
 * its kernel first: OpenBLAS 0.3.21 does not know recent CPUs (Zen 5 is
 * taken for a Pentium 4, "Prescott", at a fifth of the speed), so unless
 * OPENBLAS_CORETYPE is set we name the best kernel family the CPU runs.
 * (Only row-major calls are made; the fallback loop assumes it.)
 * OpenBLAS runs single-threaded: its threads spin in sched_yield between
 * calls and fought luon's own pool (parallel.c) for the two cores, so a
 * large product is instead split into row or column blocks over luon's
 * pool, and a product made inside a parallel kernel runs inline. */
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

static void load(void) {
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
  for (int i = 0; i < m; i++)                                                      \
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
 * wide), each a single-threaded BLAS call on one of luon's threads. */
typedef struct split {
  bool dbl, by_rows;
  int ta, tb, m, n, k, lda, ldb, ldc, blk;
  double alpha, beta;
  const void *a, *b;
  void *c;
} split;

static void split_range(void *ctx, int64_t t0, int64_t t1) {
  const split *s = ctx;
  size_t es = s->dbl ? sizeof(double) : sizeof(float);
  int total = s->by_rows ? s->m : s->n;
  int i0 = (int)t0 * s->blk, i1 = (int)t1 * s->blk;
  if (i1 > total) i1 = total;
  if (i0 >= i1) return;
  const char *a = s->a, *b = s->b;
  char *c = s->c;
  int m = s->m, n = s->n;
  if (s->by_rows) { /* rows i0..i1 of op(A) and C */
    a += (size_t)i0 * (s->ta == CblasTrans ? 1 : (size_t)s->lda) * es;
    c += (size_t)i0 * (size_t)s->ldc * es;
    m = i1 - i0;
  } else {          /* columns i0..i1 of op(B) and C */
    b += (size_t)i0 * (s->tb == CblasTrans ? (size_t)s->ldb : 1) * es;
    c += (size_t)i0 * es;
    n = i1 - i0;
  }
  if (s->dbl)
    dgemm(CblasRowMajor, s->ta, s->tb, m, n, s->k, s->alpha, (const double *)a, s->lda,
          (const double *)b, s->ldb, s->beta, (double *)c, s->ldc);
  else
    sgemm(CblasRowMajor, s->ta, s->tb, m, n, s->k, (float)s->alpha, (const float *)a, s->lda,
          (const float *)b, s->ldb, (float)s->beta, (float *)c, s->ldc);
}

/* Run on the pool when the product is worth waking it (about 2 MFLOP and up). */
static bool run_split(split *s) {
  int nt = lu_num_threads();
  if (nt < 2 || (double)s->m * s->n * s->k < (double)(1 << 20)) return false;
  s->by_rows = s->m >= s->n;
  int total = s->by_rows ? s->m : s->n;
  int blk = (total + nt - 1) / nt;
  blk = (blk + 15) / 16 * 16; /* whole register tiles */
  if (blk >= total) return false;
  s->blk = blk;
  lu_parallel_for((total + blk - 1) / blk, 1, split_range, s);
  return true;
}

void lu_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
  pthread_once(&once, load);
  if (sgemm) {
    split s = {false, false, ta, tb, m, n, k, lda, ldb, ldc, 0, alpha, beta, a, b, c};
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
    split s = {true, false, ta, tb, m, n, k, lda, ldb, ldc, 0, alpha, beta, a, b, c};
    if (order == CblasRowMajor && run_split(&s)) return;
    dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  NAIVE_GEMM(double)
}
