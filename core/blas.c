/* blas.c: OpenBLAS, loaded with dlopen on first use so that luon can pick
 * its kernel first: OpenBLAS 0.3.21 does not know recent CPUs (Zen 5 is
 * taken for a Pentium 4, "Prescott", at a fifth of the speed), so unless
 * OPENBLAS_CORETYPE is set we name the best kernel family the CPU runs.
 * (Only row-major calls are made; the fallback loop assumes it.) */
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
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof *names && !h; i++)
    if (names[i] && *names[i]) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (set_core) unsetenv("OPENBLAS_CORETYPE"); /* leave the host's environment as it was */
  if (!h) {
    snprintf(load_error, sizeof load_error, "cannot load OpenBLAS (libopenblas.so.0): %s", dlerror());
    return;
  }
  sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
  dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
  corename = (corename_fn)dlsym(h, "openblas_get_corename");
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

void lu_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
  pthread_once(&once, load);
  if (sgemm) {
    sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  NAIVE_GEMM(float)
}

void lu_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
              int lda, const double *b, int ldb, double beta, double *c, int ldc) {
  pthread_once(&once, load);
  if (dgemm) {
    dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  NAIVE_GEMM(double)
}
