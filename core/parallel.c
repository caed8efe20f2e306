/* parallel.c: a small persistent thread pool for CPU kernels. The caller
 * takes the first chunk itself. Between jobs a worker first polls for the
 * next one for up to SPIN_NS (a training step's ops follow each other by
 * tens of microseconds, and a wake-up through the scheduler costs as much),
 * then sleeps on a condition variable, leaving the cores to OpenBLAS and
 * the data loader; the caller polls for the workers' end the same way. */
#include "internal.h"
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake, done_cv;
  int nthreads;          /* including the caller */
  int started;
  /* the current job */
  lu_range_fn fn;
  void *ctx;
  int32_t *stop;         /* the caller's luon_interrupt_scope flag */
  int64_t n, chunk;
  int64_t generation;
  int64_t pending;       /* workers still running the job */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0,
          NULL, NULL, NULL, 0, 0, 0, 0};
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */

#define SPIN_NS 100000

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* polls *v (read without the lock) for up to SPIN_NS until it differs from
 * `from`; the caller then confirms under the lock */
static void spin_while(const int64_t *v, int64_t from) {
  int64_t end = 0;
  for (int k = 0; __atomic_load_n(v, __ATOMIC_ACQUIRE) == from; k++) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((k & 63) == 0) {
      int64_t t = now_ns();
      if (!end) end = t + SPIN_NS;
      else if (t > end) return;
    }
  }
}

static void *worker(void *arg) {
  int idx = (int)(intptr_t)arg;
  int64_t seen = 0;
  for (;;) {
    spin_while(&pool.generation, seen);
    pthread_mutex_lock(&pool.lock);
    while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.lock);
    seen = pool.generation;
    lu_range_fn fn = pool.fn;
    void *ctx = pool.ctx;
    lu_thread_flag = pool.stop; /* the kernel stops when its caller's call is interrupted */
    int64_t b = pool.chunk * idx, e = b + pool.chunk;
    if (e > pool.n) e = pool.n;
    pthread_mutex_unlock(&pool.lock);
    if (b < e) fn(ctx, b, e);
    pthread_mutex_lock(&pool.lock);
    if (__atomic_sub_fetch(&pool.pending, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&pool.done_cv);
    pthread_mutex_unlock(&pool.lock);
  }
  return NULL;
}

static int default_threads(void) {
  const char *env = getenv("LUON_NUM_THREADS");
  int n = env ? atoi(env) : 0;
  if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > MAX_THREADS ? MAX_THREADS : n;
}

void lu_signals_block(sigset_t *old) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, old);
}

/* Workers block every signal (see lu_signals_block). */
static void start_workers(void) {
  /* called with pool.lock held */
  if (pool.nthreads == 0) pool.nthreads = default_threads();
  sigset_t old;
  lu_signals_block(&old);
  while (pool.started < pool.nthreads - 1) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, worker, (void *)(intptr_t)(pool.started + 1)) != 0) {
      pthread_attr_destroy(&at);
      pool.nthreads = pool.started + 1; /* run with what we have */
      break;
    }
    pthread_attr_destroy(&at);
    pool.started++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void luon_set_num_threads(int32_t n) {
  pthread_mutex_lock(&call_lock);
  pthread_mutex_lock(&pool.lock);
  if (n < 1) n = 1;
  if (n > MAX_THREADS) n = MAX_THREADS;
  if (n - 1 > pool.started) {
    pool.nthreads = n;
    start_workers();
  } else {
    pool.nthreads = n; /* extra workers stay asleep */
  }
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&call_lock);
}

int32_t luon_get_num_threads(void) {
  pthread_mutex_lock(&pool.lock);
  if (pool.nthreads == 0) pool.nthreads = default_threads();
  int n = pool.nthreads;
  pthread_mutex_unlock(&pool.lock);
  return n;
}

int lu_num_threads(void) { return luon_get_num_threads(); }

bool lu_cpu_avx512(void) {
  static int avx512 = -1;
  if (avx512 < 0) {
    __builtin_cpu_init();
    avx512 = __builtin_cpu_supports("avx512f");
  }
  return avx512;
}

void lu_parallel_for(int64_t n, int64_t grain, lu_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int nt = lu_num_threads();
  int64_t want = n / grain;
  if (want < 2 || nt < 2 || pthread_mutex_trylock(&call_lock) != 0) {
    /* small work, one thread, or a nested/concurrent call: run inline */
    fn(ctx, 0, n);
    return;
  }
  if (want > nt) want = nt;
  pthread_mutex_lock(&pool.lock);
  start_workers();
  if (want > pool.started + 1) want = pool.started + 1;
  int64_t chunk = (n + want - 1) / want;
  pool.fn = fn;
  pool.ctx = ctx;
  pool.stop = lu_thread_flag;
  pool.n = n;
  pool.chunk = chunk;
  /* wake exactly the workers with a chunk; others see an empty range */
  __atomic_store_n(&pool.pending, pool.started, __ATOMIC_RELAXED);
  __atomic_store_n(&pool.generation, pool.generation + 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  fn(ctx, 0, chunk < n ? chunk : n);
  for (int64_t left; (left = __atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE)) > 0;) {
    spin_while(&pool.pending, left);
    if (__atomic_load_n(&pool.pending, __ATOMIC_ACQUIRE) == left) break; /* still running: sleep */
  }
  pthread_mutex_lock(&pool.lock);
  while (pool.pending > 0) pthread_cond_wait(&pool.done_cv, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  pthread_mutex_unlock(&call_lock);
}
