/* fp32_peak: this machine's float32 FMA peak in GFLOP/s on N threads
 * (default: the online CPUs), from independent FMA chains held in
 * registers: the ceiling against which scripts/bench reports a kernel's
 * share. Prints "fp32 peak <GFLOP/s> GFLOP/s on <N> threads (<isa>)". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define ITERS 50000000L
#define CHAINS 12 /* > FMA latency x ports: every FMA unit busy */

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));

/* CHAINS accumulators in registers: the loop is fully unrolled so none lives in memory */
#define FMA_LOOP(V, TGT, NAME)                                                      \
  __attribute__((target(TGT))) static float NAME(void) {                             \
    V a[CHAINS], b = (V){0} + 1.0000001f, c = (V){0} + 1e-7f;                        \
    _Pragma("GCC unroll 12") for (int i = 0; i < CHAINS; i++) a[i] = (V){0} + (float)i; \
    for (long k = 0; k < ITERS; k++)                                                 \
      _Pragma("GCC unroll 12") for (int i = 0; i < CHAINS; i++) a[i] = a[i] * b + c; \
    float s = 0;                                                                     \
    _Pragma("GCC unroll 12") for (int i = 0; i < CHAINS; i++) s += a[i][0];          \
    return s;                                                                        \
  }
FMA_LOOP(v16, "avx512f,fma", fma512)
FMA_LOOP(v8, "avx2,fma", fma256)

static int wide;
static void *run(void *out) {
  *(volatile float *)out = wide == 16 ? fma512() : fma256(); /* kept: the loop is not dead */
  return NULL;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1 || n > 1024) {
    fprintf(stderr, "fp32_peak: threads must be 1 to 1024, not %s\n", argv[1]);
    return 2;
  }
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) wide = 16;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) wide = 8;
  else {
    printf("fp32 peak unknown (no AVX2/FMA)\n");
    return 0;
  }
  pthread_t *t = calloc((size_t)n, sizeof *t);
  float *r = calloc((size_t)n, sizeof *r);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, run, &r[i]);
  for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
  double flops = (double)n * ITERS * CHAINS * wide * 2;
  printf("fp32 peak %.0f GFLOP/s on %ld threads (%s)\n", flops / s / 1e9, n, wide == 16 ? "AVX-512" : "AVX2");
  free(t);
  free(r);
  return 0;
}
