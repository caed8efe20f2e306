/* alloc.c: the caching allocator, one pool per device. Blocks are rounded to
 * size classes (4 per power of two) and kept on free lists when released, so
 * steady-state training steps reuse memory instead of faulting fresh pages. */
#include "internal.h"
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define NCLASS 256
#define HUGE_ALIGN (2u << 20)

typedef struct pool {
  pthread_mutex_t lock;
  lu_block *free[NCLASS];
  luon_memory_stats stats;
} pool;

static pool cpu_pools[LU_MAX_CPU_DEVICES];
static pool gpu_pools[LU_MAX_GPU_DEVICES];
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;
static luon_counters counters;

luon_counters *luon_counters_get(void) { return &counters; }

static void pools_init(void) {
  for (int i = 0; i < LU_MAX_CPU_DEVICES; i++) pthread_mutex_init(&cpu_pools[i].lock, NULL);
  for (int i = 0; i < LU_MAX_GPU_DEVICES; i++) pthread_mutex_init(&gpu_pools[i].lock, NULL);
}

static pool *pool_of(lu_device d) {
  pthread_once(&pools_once, pools_init);
  if (d.type == LUON_CPU && d.id >= 0 && d.id < LU_MAX_CPU_DEVICES) return &cpu_pools[d.id];
  if (d.type == LUON_GPU && d.id >= 0 && d.id < LU_MAX_GPU_DEVICES) return &gpu_pools[d.id];
  return NULL;
}

/* Size class: 64-byte granules below 256 bytes, then 4 classes per power of two. */
static int size_class(size_t bytes, size_t *rounded) {
  if (bytes <= 256) {
    size_t r = bytes <= 64 ? 64 : (bytes + 63) & ~(size_t)63;
    *rounded = r;
    return (int)(r / 64) - 1; /* 0..3 */
  }
  int lg = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^lg < bytes <= 2^(lg+1) */
  size_t quarter = (size_t)1 << (lg - 1);
  size_t base = (size_t)1 << lg;
  size_t steps = (bytes - base + quarter - 1) / quarter; /* 1..4 */
  *rounded = base + steps * quarter;
  return 4 + (lg - 8) * 4 + (int)steps - 1;
}

static int64_t host_available(void) {
  long pages = sysconf(_SC_AVPHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages > 0 && psize > 0 ? (int64_t)pages * psize : -1;
}

/* NULL on failure; *st says why (LUON_ENOMEM, or a device fault). */
static void *raw_alloc(lu_device d, size_t bytes, luon_status *st) {
  *st = LUON_ENOMEM;
  if (d.type == LUON_GPU) {
    void *p = NULL;
    if (!lu_cuda.malloc) return NULL;
    luon_status s = lu_cuda.malloc(d.id, bytes, &p);
    if (s != LUON_OK) {
      *st = lu_cuda_check(s);
      return NULL;
    }
    return p;
  }
  size_t align = bytes >= HUGE_ALIGN ? HUGE_ALIGN : 64;
  void *p = NULL;
  if (posix_memalign(&p, align, bytes) != 0) return NULL;
  if (align == HUGE_ALIGN) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

static void raw_free(lu_device d, void *p) {
  if (d.type == LUON_GPU) {
    if (lu_cuda.free) lu_cuda.free(d.id, p);
  } else {
    free(p);
  }
}

static void drain(pool *pl, lu_device d) {
  for (int c = 0; c < NCLASS; c++) {
    lu_block *b = pl->free[c];
    pl->free[c] = NULL;
    while (b) {
      lu_block *next = b->next;
      pl->stats.cached -= (int64_t)b->bytes;
      raw_free(d, b->ptr);
      free(b);
      b = next;
    }
  }
}

#define BUMP(field, v) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)

static void account(pool *pl, const lu_block *b) {
  pl->stats.allocs++;
  pl->stats.in_use += (int64_t)b->bytes;
  if (pl->stats.in_use > pl->stats.peak) pl->stats.peak = pl->stats.in_use;
  BUMP(counters.bytes_since_gc, (int64_t)b->bytes);
  __atomic_add_fetch(&counters.bytes_in_use, (int64_t)b->bytes, __ATOMIC_RELAXED);
}

luon_status lu_alloc(lu_device d, size_t bytes, lu_block **out) {
  pool *pl = pool_of(d);
  if (!pl) return lu_error(LUON_EDEVICE, "alloc: no such device %s", lu_device_str(d));
  size_t rounded;
  int c = size_class(bytes ? bytes : 1, &rounded);
  if (c < 0 || c >= NCLASS)
    return lu_error(LUON_ENOMEM, "alloc: %zu bytes is more than any device holds", bytes);
  pthread_mutex_lock(&pl->lock);
  lu_block *b = pl->free[c];
  if (b) {
    pl->free[c] = b->next;
    pl->stats.cached -= (int64_t)b->bytes;
    pl->stats.cache_hits++;
    account(pl, b);
  }
  pthread_mutex_unlock(&pl->lock);
  if (!b) {
    b = malloc(sizeof *b);
    luon_status st = LUON_ENOMEM;
    void *p = b ? raw_alloc(d, rounded, &st) : NULL;
    if (b && !p && st == LUON_ENOMEM) { /* give the cache back to the system and retry once */
      pthread_mutex_lock(&pl->lock);
      drain(pl, d);
      pthread_mutex_unlock(&pl->lock);
      p = raw_alloc(d, rounded, &st);
    }
    if (!p) {
      free(b);
      if (st != LUON_ENOMEM) return st;
      int64_t fr = -1, total = -1;
      if (d.type == LUON_GPU && lu_cuda.memory_info) lu_cuda.memory_info(d.id, &fr, &total);
      if (d.type == LUON_CPU) fr = host_available();
      return lu_error(LUON_ENOMEM, "out of memory on %s: asked for %zu bytes, %lld bytes free",
                      lu_device_str(d), bytes, (long long)fr);
    }
    b->ptr = p;
    b->bytes = rounded;
    b->dev = d;
    pthread_mutex_lock(&pl->lock);
    account(pl, b);
    pthread_mutex_unlock(&pl->lock);
  }
  b->next = NULL;
  *out = b;
  return LUON_OK;
}

void lu_free(lu_block *b) {
  if (!b) return;
  pool *pl = pool_of(b->dev);
  size_t rounded;
  int c = size_class(b->bytes, &rounded);
  pthread_mutex_lock(&pl->lock);
  pl->stats.in_use -= (int64_t)b->bytes;
  pl->stats.cached += (int64_t)b->bytes;
  __atomic_sub_fetch(&counters.bytes_in_use, (int64_t)b->bytes, __ATOMIC_RELAXED);
  b->next = pl->free[c];
  pl->free[c] = b;
  pthread_mutex_unlock(&pl->lock);
}

luon_status luon_memory_stats_get(int32_t type, int32_t id, luon_memory_stats *out) {
  lu_device d = {type, id};
  LU_TRY(lu_device_check(d));
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  *out = pl->stats;
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

luon_status luon_memory_empty_cache(int32_t type, int32_t id) {
  lu_device d = {type, id};
  LU_TRY(lu_device_check(d));
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  drain(pl, d);
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

luon_status luon_memory_reset_peak(int32_t type, int32_t id) {
  lu_device d = {type, id};
  LU_TRY(lu_device_check(d));
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  pl->stats.peak = pl->stats.in_use;
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

/* Kernel scratch through the cache: a block's address sits in the 64 bytes
 * before the pointer handed out, so a large temporary (im2col columns, a
 * packed operand) is reused across calls instead of being mmapped and
 * page-faulted by malloc every time. */
void *lu_scratch_alloc(size_t bytes) {
  lu_block *b;
  if (lu_alloc((lu_device){LUON_CPU, 0}, bytes + 64, &b) != LUON_OK) return NULL;
  *(lu_block **)b->ptr = b;
  return (char *)b->ptr + 64;
}

void lu_scratch_free(void *p) {
  if (p) lu_free(*(lu_block **)((char *)p - 64));
}
