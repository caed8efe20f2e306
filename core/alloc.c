/* alloc.c: the caching allocator, one pool per device and one per pinned
 * host pool. Blocks are rounded to size classes (4 per power of two) and
 * kept on free lists when released, so steady-state training steps reuse
 * memory instead of faulting fresh pages. Pinned blocks carry the events of
 * the asynchronous copies that read them and are reused only once those
 * have completed. */
#include "internal.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define NCLASS 256
#define HUGE_ALIGN (2u << 20)

typedef struct pool {
  pthread_mutex_t lock;
  lu_block *free[NCLASS];
  luon_memory_stats stats;
  int64_t limit;   /* bytes held (in use + cached + reserved) at most: 0 none, -1 LUON_MEMORY_LIMIT's */
  int64_t reserved; /* by allocations between the limit check and their accounting */
} pool;

static pool cpu_pools[LU_MAX_CPU_DEVICES];
static pool gpu_pools[LU_MAX_GPU_DEVICES];
static pool pinned_pools[LU_MAX_GPU_DEVICES];
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;
static luon_counters counters;

luon_counters *luon_counters_get(void) { return &counters; }

/* LUON_MEMORY_LIMIT, read once: every pool's limit until one is set. */
static int64_t env_limit;
static char env_limit_bad[160]; /* the error where its value is not a size */

static void read_env_limit(void) {
  const char *v = getenv("LUON_MEMORY_LIMIT");
  if (!v || !*v) return;
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  double unit = 1;
  switch (*end) {
    case 'k': case 'K': unit = 1024.0, end++; break;
    case 'm': case 'M': unit = 1024.0 * 1024, end++; break;
    case 'g': case 'G': unit = 1024.0 * 1024 * 1024, end++; break;
    case 't': case 'T': unit = 1024.0 * 1024 * 1024 * 1024, end++; break;
    default: break;
  }
  if (end == v || *end || errno || !(x >= 0) || x * unit >= 9.2e18)
    snprintf(env_limit_bad, sizeof env_limit_bad,
             "LUON_MEMORY_LIMIT='%.60s' is not a number of bytes >= 0 (optionally with K, M, G or T)", v);
  else
    env_limit = (int64_t)(x * unit);
}

static void pools_init(void) {
  for (int i = 0; i < LU_MAX_CPU_DEVICES; i++) pthread_mutex_init(&cpu_pools[i].lock, NULL);
  for (int i = 0; i < LU_MAX_GPU_DEVICES; i++) pthread_mutex_init(&gpu_pools[i].lock, NULL);
  for (int i = 0; i < LU_MAX_GPU_DEVICES; i++) pthread_mutex_init(&pinned_pools[i].lock, NULL);
  for (int i = 0; i < LU_MAX_CPU_DEVICES; i++) cpu_pools[i].limit = -1;
  for (int i = 0; i < LU_MAX_GPU_DEVICES; i++) gpu_pools[i].limit = pinned_pools[i].limit = -1;
  read_env_limit();
}

static pool *pool_of(lu_device d) {
  pthread_once(&pools_once, pools_init);
  if (d.type == LUON_CPU && d.id >= 0 && d.id < LU_MAX_CPU_DEVICES) return &cpu_pools[d.id];
  if (d.type == LUON_GPU && d.id >= 0 && d.id < LU_MAX_GPU_DEVICES) return &gpu_pools[d.id];
  if (d.type == LUON_CPU_PINNED && d.id >= 0 && d.id < LU_MAX_GPU_DEVICES) return &pinned_pools[d.id];
  return NULL;
}

/* A pinned block: per GPU, the event of the last copy from it queued on
 * that GPU's stream (NULL: none pending). Events are touched under the
 * pool's lock. */
typedef struct pinned_block {
  lu_block b; /* first: a pinned lu_block * is a pinned_block * */
  void *ev[LU_MAX_GPU_DEVICES];
} pinned_block;

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
  if (d.type == LUON_CPU_PINNED) {
    void *p = NULL;
    luon_status s = lu_cuda.host_alloc ? lu_cuda.host_alloc(bytes, &p) : LUON_ENOMEM;
    if (s != LUON_OK) {
      *st = lu_cuda_check(s);
      return NULL;
    }
    return p;
  }
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
  } else if (d.type == LUON_CPU_PINNED) {
    if (lu_cuda.host_free) lu_cuda.host_free(p);
  } else {
    free(p);
  }
}

/* Whether no queued copy still reads pinned block b: forgets the events
 * that have completed (pool lock held). Never waits. */
static bool pinned_idle(lu_block *b) {
  pinned_block *pb = (pinned_block *)b;
  bool idle = true;
  for (int g = 0; g < LU_MAX_GPU_DEVICES; g++) {
    if (!pb->ev[g]) continue;
    /* pending: LUON_EUNSUPPORTED; an error means the copy will never run */
    if (lu_cuda.event_query && lu_cuda.event_query(pb->ev[g]) == LUON_EUNSUPPORTED) {
      idle = false;
      continue;
    }
    if (lu_cuda.event_free) lu_cuda.event_free(pb->ev[g]);
    pb->ev[g] = NULL;
  }
  return idle;
}

/* Wait for the copies reading pinned block b (pool lock held): only where
 * its memory is about to be freed, never on the allocation path. */
static void pinned_wait(lu_block *b) {
  pinned_block *pb = (pinned_block *)b;
  for (int g = 0; g < LU_MAX_GPU_DEVICES; g++) {
    if (!pb->ev[g]) continue;
    if (lu_cuda.event_sync) lu_cuda.event_sync(pb->ev[g]);
    if (lu_cuda.event_free) lu_cuda.event_free(pb->ev[g]);
    pb->ev[g] = NULL;
  }
}

static void drain(pool *pl, lu_device d) {
  for (int c = 0; c < NCLASS; c++) {
    lu_block *b = pl->free[c];
    pl->free[c] = NULL;
    while (b) {
      lu_block *next = b->next;
      pl->stats.cached -= (int64_t)b->bytes;
      if (d.type == LUON_CPU_PINNED) pinned_wait(b);
      raw_free(d, b->ptr);
      free(b);
      b = next;
    }
  }
}

#define BUMP(field, v) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)

/* gc: the block counts toward the Lua collector's pace (bytes_since_gc),
 * as any block a tensor may hold; a kernel's scratch, which the kernel
 * frees before it returns, does not (a batch-1 inference's megabytes of
 * im2col and pooling scratch forced a full collection every call or two) */
static void account(pool *pl, const lu_block *b, bool gc) {
  pl->stats.allocs++;
  pl->stats.in_use += (int64_t)b->bytes;
  if (pl->stats.in_use > pl->stats.peak) pl->stats.peak = pl->stats.in_use;
  pl->stats.requested += (int64_t)b->asked;
  if (pl->stats.requested > pl->stats.peak_requested) pl->stats.peak_requested = pl->stats.requested;
  if (gc) BUMP(counters.bytes_since_gc, (int64_t)b->bytes);
  __atomic_add_fetch(&counters.bytes_in_use, (int64_t)b->bytes, __ATOMIC_RELAXED);
}

/* The first cached block of class c that may be handed out (lock held):
 * the head, or for a pinned pool the first whose copies are done. */
static lu_block *take_cached(pool *pl, lu_device d, int c) {
  lu_block **link = &pl->free[c];
  if (d.type == LUON_CPU_PINNED)
    while (*link && !pinned_idle(*link)) link = &(*link)->next;
  lu_block *b = *link;
  if (b) *link = b->next;
  return b;
}

static const char *pool_name(lu_device d) {
  return d.type == LUON_CPU_PINNED ? "pinned host memory" : lu_device_str(d);
}

/* Pool pl's limit (lock held): its own, or LUON_MEMORY_LIMIT's. */
static luon_status limit_of(const pool *pl, int64_t *limit) {
  *limit = pl->limit >= 0 ? pl->limit : env_limit;
  if (pl->limit < 0 && env_limit_bad[0]) return lu_error(LUON_EINVAL, "%s", env_limit_bad);
  return LUON_OK;
}

/* A CUDA graph's capture on this thread (lu_alloc_keep): GPU blocks freed
 * go to its list, and the cache is never given back to the driver then
 * (cudaFree waits for the device, which ends the capture). */
static bool capturing(lu_device d) { return lu_alloc_keep && d.type == LUON_GPU; }

/* A block of class size `rounded` on d freed earlier in this capture
 * (stream order makes its reuse by a later node safe), or NULL. It stays
 * counted in use, as when it was kept, with its first user's request. */
static lu_block *take_kept(lu_device d, size_t rounded) {
  for (lu_block **l = lu_alloc_keep; *l; l = &(*l)->next)
    if ((*l)->dev.id == d.id && (*l)->bytes == rounded) {
      lu_block *b = *l;
      *l = b->next;
      b->next = NULL;
      return b;
    }
  return NULL;
}

/* Reserve `rounded` new bytes under pl's limit, giving the cache back to
 * the system first where that makes them fit (lock held). */
static luon_status reserve(pool *pl, lu_device d, size_t bytes, size_t rounded) {
  int64_t limit;
  LU_TRY(limit_of(pl, &limit));
  int64_t want = (int64_t)rounded;
  if (limit > 0 && pl->stats.in_use + pl->stats.cached + pl->reserved + want > limit && !capturing(d))
    drain(pl, d);
  if (limit > 0 && pl->stats.in_use + pl->reserved + want > limit)
    return lu_error(LUON_ENOMEM,
                    "out of memory on %s: asked for %zu bytes with %lld in use, past the limit of %lld "
                    "bytes (%s)", pool_name(d), bytes, (long long)(pl->stats.in_use + pl->reserved),
                    (long long)limit, pl->limit >= 0 ? "set by npx.set_memory_limit" : "LUON_MEMORY_LIMIT");
  pl->reserved += want;
  return LUON_OK;
}

static luon_status alloc_block(lu_device d, size_t bytes, bool gc, lu_block **out) {
  pool *pl = pool_of(d);
  if (!pl) return lu_error(LUON_EDEVICE, "alloc: no such device %s", lu_device_str(d));
  size_t rounded;
  int c = size_class(bytes ? bytes : 1, &rounded);
  if (c < 0 || c >= NCLASS)
    return lu_error(LUON_ENOMEM, "alloc: %zu bytes is more than any device holds", bytes);
  if (capturing(d) && (*out = take_kept(d, rounded)) != NULL) return LUON_OK;
  pthread_mutex_lock(&pl->lock);
  lu_block *b = take_cached(pl, d, c);
  if (b) {
    pl->stats.cached -= (int64_t)b->bytes;
    pl->stats.cache_hits++;
    b->asked = bytes;
    account(pl, b, gc);
  }
  luon_status lim = b ? LUON_OK : reserve(pl, d, bytes, rounded);
  pthread_mutex_unlock(&pl->lock);
  if (lim != LUON_OK) return lim;
  if (!b) {
    b = d.type == LUON_CPU_PINNED ? calloc(1, sizeof(pinned_block)) : malloc(sizeof *b);
    luon_status st = LUON_ENOMEM;
    void *p = b ? raw_alloc(d, rounded, &st) : NULL;
    if (b && !p && st == LUON_ENOMEM && !capturing(d)) {
      /* give the cache back to the system and retry once; for a GPU every
       * GPU's cache, since virtual GPUs (LUON_VIRTUAL_GPUS) share one card */
      for (int i = 0; i < (d.type == LUON_GPU ? LU_MAX_GPU_DEVICES : 1); i++) {
        lu_device di = d.type == LUON_GPU ? (lu_device){LUON_GPU, i} : d;
        pool *q = pool_of(di);
        pthread_mutex_lock(&q->lock);
        drain(q, di);
        pthread_mutex_unlock(&q->lock);
      }
      p = raw_alloc(d, rounded, &st);
    }
    if (!p) {
      free(b);
      pthread_mutex_lock(&pl->lock);
      pl->reserved -= (int64_t)rounded;
      pthread_mutex_unlock(&pl->lock);
      if (st != LUON_ENOMEM) return st;
      int64_t fr = -1, total = -1;
      if (d.type == LUON_GPU && lu_cuda.memory_info) lu_cuda.memory_info(d.id, &fr, &total);
      if (d.type != LUON_GPU) fr = host_available();
      return lu_error(LUON_ENOMEM, "out of memory on %s: asked for %zu bytes, %lld bytes free", pool_name(d),
                      bytes, (long long)fr);
    }
    b->ptr = p;
    b->bytes = rounded;
    b->asked = bytes;
    b->dev = d;
    pthread_mutex_lock(&pl->lock);
    pl->reserved -= (int64_t)rounded;
    account(pl, b, gc);
    pthread_mutex_unlock(&pl->lock);
  }
  b->next = NULL;
  *out = b;
  return LUON_OK;
}

luon_status lu_alloc(lu_device d, size_t bytes, lu_block **out) { return alloc_block(d, bytes, true, out); }

bool lu_pinned_available(void) {
  luon_gpu_count(); /* loads the backend once */
  return lu_cuda.host_alloc != NULL;
}

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* At exit the pinned caches go back (the copies still reading them are
 * waited for). Registered after the CUDA runtime started, so it runs
 * before the runtime's own teardown. Blocks still held by live tensors
 * stay with the process. */
static void pinned_at_exit(void) {
  for (int i = 0; i < LU_MAX_GPU_DEVICES; i++) {
    pool *pl = &pinned_pools[i];
    pthread_mutex_lock(&pl->lock);
    drain(pl, (lu_device){LUON_CPU_PINNED, i});
    pthread_mutex_unlock(&pl->lock);
  }
}

static void register_exit(void) { atexit(pinned_at_exit); }

luon_status lu_alloc_pinned(int32_t pin_id, size_t bytes, lu_block **out) {
  if (!lu_pinned_available()) return lu_alloc((lu_device){LUON_CPU, 0}, bytes, out);
  if (pin_id < 0 || pin_id >= LU_MAX_GPU_DEVICES)
    return lu_error(LUON_EINVAL, "pinned alloc: pin id %d is outside 0..%d", pin_id,
                    LU_MAX_GPU_DEVICES - 1);
  pthread_once(&exit_once, register_exit);
  return lu_alloc((lu_device){LUON_CPU_PINNED, pin_id}, bytes, out);
}

luon_status lu_pinned_record(lu_block *b, int32_t gpu_id) {
  if (!lu_block_pinned(b)) return LUON_OK;
  if (gpu_id < 0 || gpu_id >= LU_MAX_GPU_DEVICES || !lu_cuda.event_record)
    return lu_error(LUON_EDEVICE, "pinned copy: cannot record an event on gpu(%d)", gpu_id);
  void *ev = NULL;
  LU_TRY(lu_cuda_check(lu_cuda.event_record(gpu_id, &ev)));
  pool *pl = pool_of(b->dev);
  pinned_block *pb = (pinned_block *)b;
  pthread_mutex_lock(&pl->lock);
  void *old = pb->ev[gpu_id];
  pb->ev[gpu_id] = ev;
  if (old && lu_cuda.event_free) lu_cuda.event_free(old);
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

__thread lu_block **lu_alloc_keep;

void lu_free(lu_block *b) {
  if (!b) return;
  if (lu_alloc_keep && b->dev.type == LUON_GPU) { /* a CUDA graph's: still in use */
    b->next = *lu_alloc_keep;
    *lu_alloc_keep = b;
    return;
  }
  pool *pl = pool_of(b->dev);
  size_t rounded;
  int c = size_class(b->bytes, &rounded);
  pthread_mutex_lock(&pl->lock);
  pl->stats.in_use -= (int64_t)b->bytes;
  pl->stats.requested -= (int64_t)b->asked;
  pl->stats.cached += (int64_t)b->bytes;
  __atomic_sub_fetch(&counters.bytes_in_use, (int64_t)b->bytes, __ATOMIC_RELAXED);
  b->next = pl->free[c];
  pl->free[c] = b;
  pthread_mutex_unlock(&pl->lock);
}

/* A device's pool, or a pinned host pool (which need not have a GPU). */
static luon_status pool_check(const char *fn, lu_device d) {
  if (d.type != LUON_CPU_PINNED) return lu_device_check(d);
  if (d.id < 0 || d.id >= LU_MAX_GPU_DEVICES)
    return lu_error(LUON_EDEVICE, "%s: pinned pool %d does not exist: pinned pools are 0 to %d", fn,
                    d.id, LU_MAX_GPU_DEVICES - 1);
  return LUON_OK;
}

luon_status luon_memory_stats_get(int32_t type, int32_t id, luon_memory_stats *out) {
  if (!out) return lu_error(LUON_EINVAL, "memory_stats: out is NULL");
  lu_device d = {type, id};
  LU_TRY(pool_check("memory_stats", d));
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  *out = pl->stats;
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

luon_status luon_memory_empty_cache(int32_t type, int32_t id) {
  lu_device d = {type, id};
  LU_TRY(pool_check("empty_cache", d));
  if (type == LUON_CPU && id == 0) lu_conv_weights_drop(); /* cpu(0)'s scratch blocks */
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  drain(pl, d);
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

luon_status luon_memory_reset_peak(int32_t type, int32_t id) {
  lu_device d = {type, id};
  LU_TRY(pool_check("reset_peak", d));
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  pl->stats.peak = pl->stats.in_use;
  pl->stats.peak_requested = pl->stats.requested;
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

luon_status luon_memory_limit_set(int32_t type, int32_t id, int64_t bytes) {
  lu_device d = {type, id};
  LU_TRY(pool_check("set_memory_limit", d));
  if (bytes < 0)
    return lu_error(LUON_EINVAL, "set_memory_limit: %s: bytes must be >= 0 (0: no limit), got %lld",
                    pool_name(d), (long long)bytes);
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  pl->limit = bytes;
  pthread_mutex_unlock(&pl->lock);
  return LUON_OK;
}

luon_status luon_memory_limit_get(int32_t type, int32_t id, int64_t *bytes) {
  if (!bytes) return lu_error(LUON_EINVAL, "memory_limit: bytes is NULL");
  lu_device d = {type, id};
  LU_TRY(pool_check("memory_limit", d));
  pool *pl = pool_of(d);
  pthread_mutex_lock(&pl->lock);
  luon_status s = limit_of(pl, bytes);
  pthread_mutex_unlock(&pl->lock);
  return s;
}

/* Kernel scratch through the cache: a block's address sits in the 64 bytes
 * before the pointer handed out, so a large temporary (im2col columns, a
 * packed operand) is reused across calls instead of being mmapped and
 * page-faulted by malloc every time. */
void *lu_scratch_alloc(size_t bytes) {
  lu_block *b;
  if (alloc_block((lu_device){LUON_CPU, 0}, bytes + 64, false, &b) != LUON_OK) return NULL;
  *(lu_block **)b->ptr = b;
  return (char *)b->ptr + 64;
}

void lu_scratch_free(void *p) {
  if (p) lu_free(*(lu_block **)((char *)p - 64));
}
