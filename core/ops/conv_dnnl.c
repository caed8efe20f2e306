/* conv_dnnl.c: float32 2-d convolutions (ungrouped) through oneDNN, the
 * library MXNet's and PyTorch's CPU convolutions run on: its JIT-compiled
 * direct kernels reach 60-80% of this CPU's peak where im2col and a GEMM
 * reach 40% (resnet18's convolutions at batch 1: 20 ms through conv.c's
 * kernels, 13 through these). The forward, and the two gradients where
 * conv.c's dispatch (dnnl_plane, dnnl_gin, dnnl_gw) measured them faster
 * than its own; conv.c keeps Winograd for the 3x3 stride-1 layers of a
 * batch on larger planes, and a fused relu (oneDNN's gives 0 for NaN).
 *
 * oneDNN (Debian's libdnnl2) is loaded with dlopen at the first
 * convolution, as OpenBLAS is (blas.c); without it, or where it refuses a
 * geometry, conv.c's kernels run, and LUON_CONV_DNNL=0 turns it off. It
 * runs single-threaded, as OpenBLAS does (its OpenMP threads would fight
 * luon's pool for the cores): a call is cut into parts, each one oneDNN
 * call on one of luon's threads, over the samples when there are as many
 * as threads, else over the output channels in multiples of 16; a part
 * does at most about STOP_FLOPS, so luon_interrupt is seen between parts.
 * The input gradient's parts are the samples, the weight gradient's groups
 * of 16 output channels (each sums over every sample: no partial sums to
 * add after), so a part can do more than STOP_FLOPS there: a first layer's
 * gradient at batch 16 sees an interrupt 15-35 ms late.
 *
 * Each part's operands are views of the caller's dense NCHW / OIHW arrays
 * (strides where a part is a slice of channels). oneDNN chooses its own
 * blocked layouts; reorders to and from them run in the parts (a thread
 * reorders an input once for all its parts that share it), except where
 * every part reads the same input (parts over the output channels: the
 * forward at batch 1, the weight gradient), which is reordered once, in a
 * band of rows a thread, before the parts run (share_make). The forward's
 * weights seen before are kept reordered (kept_*: per storage, offset and
 * layout, the storage's version when reordered; LUON_CONV_DNNL_WEIGHTS_MB of
 * them, 512 by default, 0 none), and reordered again only after a write
 * (lu_touch's versions; the storages of luon_tensor_wrap are never kept): a
 * batch-1 resnet18 then skips 45 MB of reorders per call. They are cpu(0)'s
 * scratch blocks, counted in its memory stats; empty_cache on the CPU drops
 * those not in use (lu_conv_weights_drop). Per geometry and part the
 * primitives are made once and kept (a plan; PLANS of them, the least
 * recently used and unused one replaced); a geometry oneDNN refuses is kept
 * as refused. Scratch (the blocked copies, oneDNN's scratchpad) comes from
 * the caching allocator. Sums run in oneDNN's order: results equal conv.c's
 * to float rounding. */
#include "conv_internal.h"
#include "conv_dnnl.h"

int64_t lu_dnnl_runs, lu_dnnl_gin_runs, lu_dnnl_gw_runs, lu_dnnl_shared_runs;

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#define STOP_FLOPS (1.0 * (1 << 28)) /* a part's work, at most (~1-2 ms on one core) */
#define PLANS 128

/* the functions used, loaded by name */
#define DNNL_FNS(X)                                                                                          \
  X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_memory_desc_init_by_strides)                           \
  X(dnnl_memory_desc_init_by_tag) X(dnnl_memory_desc_equal) X(dnnl_memory_desc_get_size)                    \
  X(dnnl_dilated_convolution_forward_desc_init) X(dnnl_primitive_attr_create)                               \
  X(dnnl_primitive_attr_destroy) X(dnnl_primitive_attr_set_scratchpad_mode)                                 \
  X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy)                                              \
  X(dnnl_primitive_desc_query_md) X(dnnl_reorder_primitive_desc_create) X(dnnl_primitive_create)            \
  X(dnnl_primitive_destroy) X(dnnl_primitive_execute) X(dnnl_memory_create) X(dnnl_memory_destroy)          \
  X(dnnl_stream_wait) X(dnnl_dilated_convolution_backward_data_desc_init)                                    \
  X(dnnl_dilated_convolution_backward_weights_desc_init) X(dnnl_memory_desc_init_submemory)
#define DECL(f) static __typeof__(f) *p_##f;
DNNL_FNS(DECL)
#undef DECL
static void (*p_omp_set_num_threads)(int);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded;
static dnnl_engine_t engine;

static void load(void) {
  /* one thread per call (see above): with OMP_NUM_THREADS unset its
   * OpenMP starts no threads of its own; the host's environment is left
   * as it was */
  bool set_env = getenv("OMP_NUM_THREADS") == NULL;
  if (set_env) setenv("OMP_NUM_THREADS", "1", 0);
  sigset_t old;
  lu_signals_block(&old);
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (set_env) unsetenv("OMP_NUM_THREADS");
  if (!h) return;
  bool all = true;
#define LOAD(f) all = all && (p_##f = (__typeof__(f) *)dlsym(h, #f)) != NULL;
  DNNL_FNS(LOAD)
#undef LOAD
  p_omp_set_num_threads = (void (*)(int))dlsym(h, "omp_set_num_threads");
  loaded = all && p_dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success;
}

/* A thread's stream, and its OpenMP set to one thread (a host's
 * OMP_NUM_THREADS applies to every thread until each sets its own). */
static __thread dnnl_stream_t stream;
static dnnl_stream_t thread_stream(void) {
  if (!stream) {
    if (p_omp_set_num_threads) p_omp_set_num_threads(1);
    if (p_dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) stream = NULL;
  }
  return stream;
}

/* ---- plans ------------------------------------------------------------------ */

/* What a call computes: the forward or one of its gradients. Each has two
 * inputs and an output (k = 0, 1, 2), each one of the convolution's three
 * arrays (its role): the input x, the weights w, the output y; or their
 * gradients, which have the same shapes. */
enum { FWD, BWD_DATA, BWD_WEIGHTS };
enum { R_SRC, R_WEI, R_DST };
static const int ROLE[3][3] = {{R_SRC, R_WEI, R_DST}, {R_DST, R_WEI, R_SRC}, {R_SRC, R_DST, R_WEI}};
static const int ARGS[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                               {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC},
                               {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS}};
static const char *const OP[3] = {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"};

/* a part: samples [n0, n0 + nb), output channels [o0, o0 + ob) */
typedef struct part {
  int64_t n0, nb, o0, ob;
} part;

/* One part's call: the whole geometry, the part's size, bias, direction. */
enum { KEYN = 18 };
typedef struct plan {
  int64_t key[KEYN];
  uint64_t used;             /* 0: a free slot; else the last use's tick */
  int32_t busy;              /* calls running it (never replaced then) */
  bool refused;              /* oneDNN refused the geometry: conv.c's kernels run */
  dnnl_primitive_t conv;
  dnnl_primitive_t re[3];    /* the inputs into the primitive's layouts, the output back out; NULL: the same layout */
  dnnl_memory_desc_t user[3], prim[3], bias; /* by k (inputs, output) */
  size_t scratchpad;
  struct share *share;       /* input 0's reorder in bands (share_make); NULL: not made yet */
  bool share_refused;        /* share_make failed: the parts reorder their own */
} plan;

/* Input 0's reorder in n bands of rows, one a thread (band k: rows
 * [H k / n, H (k + 1) / n)), for the calls whose parts all read it. */
typedef struct share {
  int n;
  struct band {
    bool rows;               /* false: an empty band (fewer rows than threads) */
    dnnl_primitive_t re;
    dnnl_memory_desc_t user, prim;
  } band[];
} share;

static void share_free(share *sh) {
  for (int k = 0; sh && k < sh->n; k++)
    if (sh->band[k].re) p_dnnl_primitive_destroy(sh->band[k].re);
  free(sh);
}

static plan plans[PLANS];
static uint64_t tick;
static pthread_mutex_t plans_lock = PTHREAD_MUTEX_INITIALIZER;

static void plan_free(plan *p) {
  if (p->conv) p_dnnl_primitive_destroy(p->conv);
  for (int k = 0; k < 3; k++)
    if (p->re[k]) p_dnnl_primitive_destroy(p->re[k]);
  share_free(p->share);
  memset(p, 0, sizeof *p);
}

/* an (a, b, c, d) view of an array whose axis 1 has B entries (a slice of
 * channels when b < B) */
static void plain(dnnl_memory_desc_t *md, int64_t a, int64_t b, int64_t c, int64_t d, int64_t B) {
  dnnl_dims_t dims = {a, b, c, d}, st = {B * c * d, c * d, d, 1};
  p_dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, st);
}

/* reorder from md a to md b, or NULL where they are the same layout */
static bool make_reorder(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b, dnnl_primitive_t *out) {
  *out = NULL;
  if (p_dnnl_memory_desc_equal(a, b)) return true;
  dnnl_primitive_desc_t pd;
  if (p_dnnl_reorder_primitive_desc_create(&pd, a, engine, b, engine, NULL) != dnnl_success) return false;
  bool ok = p_dnnl_primitive_create(out, pd) == dnnl_success;
  p_dnnl_primitive_desc_destroy(pd);
  return ok;
}

/* The primitives of a plan; false when oneDNN refuses them. */
static bool plan_make(plan *p, const geom *g, const part *q, bool bias, int dir) {
  dnnl_memory_desc_t role[3], any[3]; /* by role */
  plain(&role[R_SRC], q->nb, g->C, g->H, g->W, g->C);
  plain(&role[R_WEI], q->ob, g->C, g->KH, g->KW, g->C);
  plain(&role[R_DST], q->nb, q->ob, g->OH, g->OW, g->O);
  for (int r = 0; r < 3; r++)
    p_dnnl_memory_desc_init_by_tag(&any[r], 4, role[r].dims, dnnl_f32, dnnl_format_tag_any);
  for (int k = 0; k < 3; k++) p->user[k] = role[ROLE[dir][k]];
  dnnl_dims_t bdims = {q->ob};
  p_dnnl_memory_desc_init_by_tag(&p->bias, 1, bdims, dnnl_f32, dnnl_x);
  /* right padding: what makes the output size luon's (negative where
   * luon's floor leaves input rows unread) */
  dnnl_dims_t st = {g->sh, g->sw}, dil = {g->dh - 1, g->dw - 1}, pl = {g->ph, g->pw},
              pr = {(g->OH - 1) * g->sh + (g->KH - 1) * g->dh + 1 - g->H - g->ph,
                    (g->OW - 1) * g->sw + (g->KW - 1) * g->dw + 1 - g->W - g->pw};
  /* a gradient's primitive is made with the forward's as its hint */
  dnnl_convolution_desc_t fd, bd;
  if (p_dnnl_dilated_convolution_forward_desc_init(&fd, dir == FWD ? dnnl_forward_inference : dnnl_forward_training,
                                                  dnnl_convolution_direct, &any[R_SRC], &any[R_WEI],
                                                  bias ? &p->bias : NULL, &any[R_DST], st, dil, pl,
                                                  pr) != dnnl_success)
    return false;
  if (dir == BWD_DATA && p_dnnl_dilated_convolution_backward_data_desc_init(
                             &bd, dnnl_convolution_direct, &any[R_SRC], &any[R_WEI], &any[R_DST], st, dil, pl,
                             pr) != dnnl_success)
    return false;
  if (dir == BWD_WEIGHTS && p_dnnl_dilated_convolution_backward_weights_desc_init(
                                &bd, dnnl_convolution_direct, &any[R_SRC], &any[R_WEI], NULL, &any[R_DST], st, dil,
                                pl, pr) != dnnl_success)
    return false;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL, hint = NULL;
  bool ok = p_dnnl_primitive_attr_create(&attr) == dnnl_success &&
            p_dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
  if (ok && dir != FWD) ok = p_dnnl_primitive_desc_create(&hint, &fd, NULL, engine, NULL) == dnnl_success;
  if (ok) ok = p_dnnl_primitive_desc_create(&pd, dir == FWD ? &fd : &bd, attr, engine, hint) == dnnl_success;
  if (ok) {
    for (int k = 0; k < 3; k++) {
      const dnnl_memory_desc_t *m = p_dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, ARGS[dir][k]);
      ok = ok && m != NULL;
      if (m) p->prim[k] = *m;
    }
    const dnnl_memory_desc_t *sp = p_dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    p->scratchpad = sp ? p_dnnl_memory_desc_get_size(sp) : 0;
    ok = ok && p_dnnl_primitive_create(&p->conv, pd) == dnnl_success &&
         make_reorder(&p->user[0], &p->prim[0], &p->re[0]) && make_reorder(&p->user[1], &p->prim[1], &p->re[1]) &&
         make_reorder(&p->prim[2], &p->user[2], &p->re[2]);
  }
  if (pd) p_dnnl_primitive_desc_destroy(pd);
  if (hint) p_dnnl_primitive_desc_destroy(hint);
  if (attr) p_dnnl_primitive_attr_destroy(attr);
  return ok;
}

/* The plan of a part, made when new, marked busy (lock held); NULL when
 * refused, or when every slot is busy. */
static plan *plan_get(const geom *g, const part *q, bool bias, int dir) {
  int64_t key[KEYN] = {g->C, g->H, g->W, g->O, g->KH, g->KW, g->sh, g->sw, g->ph, g->pw,
                       g->dh, g->dw, bias, q->nb, q->ob, dir, 0, 0};
  plan *oldest = NULL;
  for (int i = 0; i < PLANS; i++) {
    plan *p = &plans[i];
    if (p->used && memcmp(p->key, key, sizeof key) == 0) {
      p->used = ++tick;
      if (p->refused) return NULL;
      p->busy++;
      return p;
    }
    if (!p->busy && (!oldest || p->used < oldest->used)) oldest = p;
  }
  if (!oldest) return NULL;
  plan_free(oldest);
  memcpy(oldest->key, key, sizeof key);
  oldest->used = ++tick;
  if (!plan_make(oldest, g, q, bias, dir)) {
    plan_free(oldest);
    memcpy(oldest->key, key, sizeof key);
    oldest->used = tick;
    oldest->refused = true;
    return NULL;
  }
  oldest->busy++;
  return oldest;
}

/* The plan's bands for nt threads (lock held), made at its first call that
 * shares: sub-memories of input 0's user and primitive layouts. NULL where
 * not: refused, or made for another thread count (the parts then reorder
 * their own copies). */
static const share *share_make(plan *p, int nt) {
  if (p->share) return p->share->n == nt ? p->share : NULL;
  if (p->share_refused) return NULL;
  share *sh = calloc(1, sizeof *sh + (size_t)nt * sizeof sh->band[0]);
  bool ok = sh != NULL;
  int64_t H = p->user[0].dims[2];
  for (int k = 0; k < nt && ok; k++) {
    struct band *b = &sh->band[k];
    int64_t h0 = H * k / nt, h1 = H * (k + 1) / nt;
    sh->n = k + 1; /* share_free destroys what was made */
    if (!(b->rows = h1 > h0)) continue;
    dnnl_dims_t dims = {p->user[0].dims[0], p->user[0].dims[1], h1 - h0, p->user[0].dims[3]}, at = {0, 0, h0, 0};
    ok = p_dnnl_memory_desc_init_submemory(&b->user, &p->user[0], dims, at) == dnnl_success &&
         p_dnnl_memory_desc_init_submemory(&b->prim, &p->prim[0], dims, at) == dnnl_success &&
         make_reorder(&b->user, &b->prim, &b->re) && b->re != NULL; /* NULL: the same layout, where re[0] said not */
  }
  if (!ok) {
    share_free(sh);
    p->share_refused = true;
    return NULL;
  }
  return p->share = sh;
}

/* ---- weights kept reordered ---------------------------------------------------- */

/* A part's weights in the primitive's layout, made from the user layout of
 * storage st at element off when st's version was `version`. */
typedef struct kept {
  const lu_storage *st;      /* NULL: a free slot */
  int64_t off;
  dnnl_memory_desc_t user, prim;
  uint64_t version;          /* 0: not made (yet, or the reorder failed) */
  char *buf;                 /* NULL: seen once only; the second call makes it */
  size_t bytes;
  uint64_t used;
  int32_t busy;              /* calls reading it or making it */
} kept;
enum { KEPT = 1024 }; /* a batch-1 call keeps one per part: resnet18 at 32 threads needs ~300 */
static kept keeps[KEPT];
static size_t kept_bytes, kept_cap = (size_t)-1;
static uint64_t kept_tick;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static void kept_drop(kept *e) {
  lu_scratch_free(e->buf);
  kept_bytes -= e->bytes;
  memset(e, 0, sizeof *e);
}

/* Room for `bytes` more under the cap, dropping the least recently used
 * idle buffers (lock held); false when there is none. */
static bool kept_room(size_t bytes, const kept *keep) {
  while (kept_bytes + bytes > kept_cap) {
    kept *old = NULL;
    for (int i = 0; i < KEPT; i++)
      if (keeps[i].buf && !keeps[i].busy && &keeps[i] != keep && (!old || keeps[i].used < old->used)) old = &keeps[i];
    if (!old) return false;
    kept_drop(old);
  }
  return true;
}

/* The kept weights of a part (lock held), busy for the caller, with *make
 * when the caller must reorder into its buffer first; NULL: reorder them as
 * before (first seen, no room, or another call is making them). */
static kept *kept_take(const lu_storage *st, uint64_t version, int64_t off, const plan *p, bool *make) {
  *make = false;
  if (kept_cap == (size_t)-1) {
    const char *env = getenv("LUON_CONV_DNNL_WEIGHTS_MB");
    double mb = env ? strtod(env, NULL) : 512;
    kept_cap = mb > 0 && mb < 1e12 ? (size_t)(mb * 1048576) : 0; /* 0, negative, junk: none kept */
  }
  if (kept_cap == 0) return NULL;
  kept *e = NULL, *free_slot = NULL, *old = NULL;
  for (int i = 0; i < KEPT && !e; i++) {
    kept *k = &keeps[i];
    if (!k->st) {
      if (!free_slot) free_slot = k;
    } else if (k->st == st && k->off == off && p_dnnl_memory_desc_equal(&k->user, &p->user[1]) &&
               p_dnnl_memory_desc_equal(&k->prim, &p->prim[1])) {
      e = k;
    } else if (!k->busy && (!old || k->used < old->used)) {
      old = k;
    }
  }
  if (!e) { /* first seen: remembered, no buffer */
    kept *slot = free_slot ? free_slot : old;
    if (!slot) return NULL;
    if (slot->st) kept_drop(slot);
    slot->st = st, slot->off = off, slot->user = p->user[1], slot->prim = p->prim[1];
    slot->used = ++kept_tick;
    return NULL;
  }
  e->used = ++kept_tick;
  if (e->buf && __atomic_load_n(&e->version, __ATOMIC_ACQUIRE) == version) {
    e->busy++;
    return e;
  }
  if (e->busy) return NULL; /* another call is making or reading an older version */
  size_t bytes = p_dnnl_memory_desc_get_size(&p->prim[1]);
  if (!e->buf) {
    if (!kept_room(bytes, e)) return NULL;
    if (!(e->buf = lu_scratch_alloc(bytes))) return NULL; /* cpu(0)'s, counted in its memory stats */
    e->bytes = bytes;
    kept_bytes += bytes;
  }
  e->version = 0;
  e->busy++;
  *make = true;
  return e;
}

void lu_conv_weights_drop(void) {
  pthread_mutex_lock(&kept_lock);
  for (int i = 0; i < KEPT; i++)
    if (keeps[i].buf && !keeps[i].busy) kept_drop(&keeps[i]);
  pthread_mutex_unlock(&kept_lock);
}

static void kept_give(kept *const *e, int64_t n) {
  pthread_mutex_lock(&kept_lock);
  for (int64_t k = 0; k < n; k++)
    if (e[k]) e[k]->busy--;
  pthread_mutex_unlock(&kept_lock);
}

/* ---- running ------------------------------------------------------------------- */

enum { MAX_PARTS = 64 };
typedef struct run_job {
  const geom *g;
  int dir;
  int64_t nparts, nthreads;
  part parts[MAX_PARTS];
  plan *plan[MAX_PARTS];
  kept *kept[MAX_PARTS];     /* the forward's weights reordered (version set), or NULL */
  float *ptr[3];             /* by role: x, w, y or their gradients (the output's written, the others read) */
  const float *b;
  const double *bn;          /* the batch norm after, per channel a, d (NULL: none) */
  bool bn_relu;
  luon_status status;        /* the first failure */
  /* the kept weights to make first: part make[i]'s into its kept buffer */
  int64_t nmake, make[MAX_PARTS];
  uint64_t version;
  char *shared;              /* input 0 in the primitive's layout, made in bands first (share_bands); NULL: each part's */
  const share *share;        /* the bands */
} run_job;

/* A thread's blocked copies, kept over its parts: a part whose input is the
 * one copied last (the weights of every part over the samples, the input
 * of every part over the channels) reads the copy again. */
typedef struct held {
  char *raw[4];              /* x's copy, w's, y's, the scratchpad */
  size_t bytes[4];
  const void *from[2];
  const plan *by[2];
} held;

/* p rounded up to 64 bytes (allocated 64 bytes over); NULL stays NULL */
static char *align64(char *p) { return p ? (char *)(((uintptr_t)p + 63) / 64 * 64) : NULL; }

static char *held_buf(held *h, int k, size_t bytes) {
  if (h->bytes[k] < bytes) {
    lu_scratch_free(h->raw[k]);
    h->raw[k] = lu_scratch_alloc(bytes + 64);
    h->bytes[k] = h->raw[k] ? bytes : 0;
    if (k < 2) h->from[k] = NULL;
  }
  return align64(h->raw[k]);
}

static bool mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md, const void *p) {
  return p_dnnl_memory_create(m, md, engine, (void *)p) == dnnl_success;
}

static bool reorder(dnnl_stream_t s, dnnl_primitive_t re, dnnl_memory_t from, dnnl_memory_t to) {
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  return p_dnnl_primitive_execute(re, s, 2, a) == dnnl_success;
}

static luon_status run_part(const run_job *j, const part *q, const plan *p, held *h) {
  const geom *g = j->g;
  const char *op = OP[j->dir];
  dnnl_stream_t s = thread_stream();
  if (!s) return lu_error(LUON_EINTERNAL, "%s (oneDNN): cannot make a stream", op);
  int64_t at[3] = {q->n0 * g->C * g->H * g->W, q->o0 * g->C * g->KH * g->KW, (q->n0 * g->O + q->o0) * g->OH * g->OW};
  const void *ptr[3];
  for (int k = 0; k < 3; k++) ptr[k] = j->ptr[ROLE[j->dir][k]] + at[ROLE[j->dir][k]];
  const void *bias = j->b ? j->b + q->o0 : NULL;
  const kept *w = j->kept[q - j->parts];
  if (w && __atomic_load_n(&w->version, __ATOMIC_ACQUIRE) != j->version) w = NULL; /* its reorder failed: this part reorders as before */
  /* the inputs already in the primitive's layout: the shared input, the kept weights */
  const void *ready[3] = {j->shared, w ? w->buf : NULL, NULL};
  char *buf[4] = {NULL, NULL, NULL, NULL};
  for (int k = 0; k < 4; k++) {
    size_t bytes = k < 3 ? (p->re[k] && !ready[k] ? p_dnnl_memory_desc_get_size(&p->prim[k]) : 0) : p->scratchpad;
    if (bytes && !(buf[k] = held_buf(h, k, bytes)))
      return lu_error(LUON_ENOMEM, "%s (oneDNN): out of host memory for %zu bytes of scratch", op, bytes);
  }
  dnnl_memory_t um[3] = {NULL}, pm[3] = {NULL}, sp = NULL, bm = NULL;
  bool ok = true;
  for (int k = 0; k < 3 && ok; k++)
    ok = mem(&um[k], &p->user[k], ptr[k]) &&
         mem(&pm[k], &p->prim[k], ready[k] ? ready[k] : p->re[k] ? buf[k] : ptr[k]);
  dnnl_memory_desc_t spmd;
  dnnl_dims_t spd = {(dnnl_dim_t)p->scratchpad};
  if (ok && buf[3])
    ok = p_dnnl_memory_desc_init_by_tag(&spmd, 1, spd, dnnl_u8, dnnl_x) == dnnl_success && mem(&sp, &spmd, buf[3]);
  if (ok && bias) ok = mem(&bm, &p->bias, bias);
  for (int k = 0; k < 2 && ok; k++)
    if (p->re[k] && !ready[k] && !(h->from[k] == ptr[k] && h->by[k] == p)) {
      ok = reorder(s, p->re[k], um[k], pm[k]);
      h->from[k] = ok ? ptr[k] : NULL, h->by[k] = p;
    }
  if (ok) {
    dnnl_exec_arg_t a[5] = {{ARGS[j->dir][0], pm[0]}, {ARGS[j->dir][1], pm[1]}, {ARGS[j->dir][2], pm[2]}};
    int na = 3;
    if (sp) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sp};
    if (bm) a[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bm};
    ok = p_dnnl_primitive_execute(p->conv, s, na, a) == dnnl_success;
  }
  if (ok && p->re[2]) ok = reorder(s, p->re[2], pm[2], um[2]);
  if (ok) ok = p_dnnl_stream_wait(s) == dnnl_success;
  int64_t P = g->OH * g->OW;
  for (int64_t n = q->n0; ok && j->bn && n < q->n0 + q->nb; n++)
    for (int64_t o = q->o0; o < q->o0 + q->ob; o++)
      lu_bn_apply(LUON_DTYPE_F32, j->ptr[R_DST] + (n * g->O + o) * P, P, j->bn[2 * o], j->bn[2 * o + 1], j->bn_relu);
  for (int k = 0; k < 3; k++) {
    if (um[k]) p_dnnl_memory_destroy(um[k]);
    if (pm[k]) p_dnnl_memory_destroy(pm[k]);
  }
  if (sp) p_dnnl_memory_destroy(sp);
  if (bm) p_dnnl_memory_destroy(bm);
  return ok ? LUON_OK : lu_error(LUON_EINTERNAL, "%s (oneDNN): a primitive failed to run", op);
}

/* Kept weights [i0, i1) of j->make: the part's weights reordered into
 * their buffer, the version set where that worked. */
static void make_kept(void *ctx, int64_t i0, int64_t i1) {
  run_job *j = ctx;
  dnnl_stream_t s = thread_stream();
  for (int64_t i = i0; i < i1 && s; i++) {
    int64_t k = j->make[i];
    const plan *p = j->plan[k];
    kept *e = j->kept[k];
    dnnl_memory_t um = NULL, pm = NULL;
    bool ok = mem(&um, &p->user[1], j->ptr[R_WEI] + j->parts[k].o0 * j->g->C * j->g->KH * j->g->KW) &&
              mem(&pm, &p->prim[1], e->buf) && reorder(s, p->re[1], um, pm) && p_dnnl_stream_wait(s) == dnnl_success;
    if (um) p_dnnl_memory_destroy(um);
    if (pm) p_dnnl_memory_destroy(pm);
    if (ok) __atomic_store_n(&e->version, j->version, __ATOMIC_RELEASE); /* read by other calls' takes */
  }
}

/* Bands [k0, k1) of input 0 into j->shared (share_make's), the status set
 * where one fails. */
static void share_bands(void *ctx, int64_t k0, int64_t k1) {
  run_job *j = ctx;
  dnnl_stream_t s = thread_stream();
  for (int64_t k = k0; k < k1; k++) {
    const struct band *b = &j->share->band[k];
    if (!b->rows) continue;
    dnnl_memory_t um = NULL, pm = NULL;
    bool ok = s && mem(&um, &b->user, j->ptr[ROLE[j->dir][0]]) && mem(&pm, &b->prim, j->shared) &&
              reorder(s, b->re, um, pm) && p_dnnl_stream_wait(s) == dnnl_success;
    if (um) p_dnnl_memory_destroy(um);
    if (pm) p_dnnl_memory_destroy(pm);
    if (!ok) {
      luon_status st = lu_error(LUON_EINTERNAL, "%s (oneDNN): a reorder of the input failed", OP[j->dir]), was = LUON_OK;
      __atomic_compare_exchange_n(&j->status, &was, st, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
  }
}

/* Thread t's share of the parts, in order. */
static void run_threads(void *ctx, int64_t t0, int64_t t1) {
  run_job *j = ctx;
  for (int64_t t = t0; t < t1; t++) {
    held h;
    memset(&h, 0, sizeof h);
    for (int64_t k = j->nparts * t / j->nthreads; k < j->nparts * (t + 1) / j->nthreads; k++) {
      if (lu_interrupted()) break; /* the op reports it */
      luon_status s = run_part(j, &j->parts[k], j->plan[k], &h);
      if (s != LUON_OK) {
        luon_status ok = LUON_OK;
        __atomic_compare_exchange_n(&j->status, &ok, s, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        break;
      }
    }
    for (int k = 0; k < 4; k++) lu_scratch_free(h.raw[k]);
  }
}

/* [0, n) cut into k parts, in multiples of m where n allows: part i starts at *lo, has *len */
static void cut(int64_t n, int64_t k, int64_t m, int64_t i, int64_t *lo, int64_t *len) {
  int64_t unit = n % m == 0 ? m : 1, units = n / unit;
  int64_t a = units * i / k, b = units * (i + 1) / k;
  *lo = a * unit, *len = (b - a) * unit;
}

/* The parts of a call: the forward's over the samples when there are at
 * least as many as threads, else over the output channels (16 at least per
 * part); the input gradient's over the samples; the weight gradient's over
 * the output channels (each part sums over every sample, so no partial
 * sums are added after); and more parts where one would do more than
 * STOP_FLOPS. */
static void make_parts(run_job *j) {
  const geom *g = j->g;
  int64_t nt = lu_num_threads();
  double flops = 2.0 * (double)g->N * (double)g->O * (double)(g->OH * g->OW) * (double)(g->C * g->KH * g->KW);
  double want_f = flops / STOP_FLOPS + 1;
  int64_t want = want_f > MAX_PARTS ? MAX_PARTS : (int64_t)want_f;
  if (want < nt) want = nt;
  bool by_samples = j->dir == BWD_DATA || (j->dir == FWD && g->N >= nt);
  int64_t n = by_samples ? g->N : (g->O % 16 == 0 ? g->O / 16 : g->O);
  if (want > n) want = n;
  if (want < 1) want = 1;
  j->nparts = want;
  j->nthreads = want < nt ? want : nt;
  for (int64_t i = 0; i < want; i++) {
    part *q = &j->parts[i];
    q->n0 = 0, q->nb = g->N, q->o0 = 0, q->ob = g->O;
    if (by_samples) cut(g->N, want, 1, i, &q->n0, &q->nb);
    else cut(g->O, want, 16, i, &q->o0, &q->ob);
  }
}

bool lu_dnnl_conv_ok(const geom *g, int32_t dt) {
  const char *off = getenv("LUON_CONV_DNNL");
  /* not with the fused relu: oneDNN's relu gives 0 for NaN, luon's keeps it */
  if (dt != LUON_DTYPE_F32 || g->G != 1 || g->relu || lu_ref_kernels() || (off && strcmp(off, "0") == 0))
    return false;
  pthread_once(&once, load);
  return loaded;
}

/* One call in direction dir over the arrays ptr (by role); b, wst, bn,
 * bn_relu: the forward's (NULL, false for the gradients). */
static luon_status run_call(const geom *g, int32_t dt, int dir, float *const ptr[3], const float *b,
                            const lu_storage *wst, const double *bn, bool bn_relu, bool *done) {
  *done = false;
  if (!lu_dnnl_conv_ok(g, dt)) return LUON_OK;
  run_job j;
  memset(&j, 0, sizeof j);
  j.g = g, j.dir = dir, j.b = b, j.bn = bn, j.bn_relu = bn_relu, j.status = LUON_OK;
  const float *w = ptr[R_WEI];
  for (int r = 0; r < 3; r++) j.ptr[r] = ptr[r];
  make_parts(&j);
  if (!thread_stream()) return LUON_OK; /* OpenMP at one thread before a primitive is made */
  /* every part's plan first: a refused one leaves the whole call to conv.c */
  pthread_mutex_lock(&plans_lock);
  bool all = true;
  int64_t got = 0;
  for (; got < j.nparts && all; got++) all = (j.plan[got] = plan_get(g, &j.parts[got], b != NULL, dir)) != NULL;
  pthread_mutex_unlock(&plans_lock);
  /* each part's weights kept reordered where they can be: one entry for the
   * parts over the samples (the same weights), one per part over channels */
  uint64_t version = wst && dir == FWD ? __atomic_load_n(&wst->version, __ATOMIC_ACQUIRE) : 0;
  if (all && version) {
    j.version = version;
    pthread_mutex_lock(&kept_lock);
    for (int64_t k = 0; k < j.nparts; k++) {
      if (!j.plan[k]->re[1]) continue;
      int64_t off = (int64_t)((const char *)(w + j.parts[k].o0 * g->C * g->KH * g->KW) - (const char *)wst->ptr) /
                    (int64_t)sizeof(float);
      int64_t same = -1;
      for (int64_t m = 0; m < k && same < 0; m++)
        if (j.kept[m] && j.parts[m].o0 == j.parts[k].o0 && j.plan[m] == j.plan[k]) same = m;
      bool make = false;
      if (same >= 0) j.kept[same]->busy++, j.kept[k] = j.kept[same];
      else if ((j.kept[k] = kept_take(wst, version, off, j.plan[k], &make)) && make) j.make[j.nmake++] = k;
    }
    pthread_mutex_unlock(&kept_lock);
    if (j.nmake) lu_parallel_for(j.nmake, 1, make_kept, &j);
  }
  /* parts over the output channels read the same input 0 (the forward's
   * x, or the weight gradient's): reordered once, in a band of rows a
   * thread, rather than whole by every thread */
  char *shared_raw = NULL;
  int nt = lu_num_threads();
  bool shares = all && dir != BWD_DATA && j.nparts > 1 && j.parts[0].nb == g->N && j.plan[0]->re[0];
  for (int64_t k = 1; k < j.nparts && shares; k++)
    shares = j.plan[k]->re[0] && p_dnnl_memory_desc_equal(&j.plan[k]->prim[0], &j.plan[0]->prim[0]);
  if (shares) {
    pthread_mutex_lock(&plans_lock);
    shares = (j.share = share_make(j.plan[0], nt)) != NULL;
    pthread_mutex_unlock(&plans_lock);
  }
  if (shares && (shared_raw = lu_scratch_alloc(p_dnnl_memory_desc_get_size(&j.plan[0]->prim[0]) + 64))) {
    j.shared = align64(shared_raw);
    lu_parallel_for(nt, 1, share_bands, &j);
    __atomic_add_fetch(&lu_dnnl_shared_runs, 1, __ATOMIC_RELAXED);
  }
  if (all && j.status == LUON_OK) lu_parallel_for(j.nthreads, 1, run_threads, &j);
  lu_scratch_free(shared_raw);
  kept_give(j.kept, j.nparts);
  pthread_mutex_lock(&plans_lock);
  for (int64_t k = 0; k < got; k++)
    if (j.plan[k]) j.plan[k]->busy--;
  pthread_mutex_unlock(&plans_lock);
  if (!all) return LUON_OK;
  if (j.status != LUON_OK) return j.status;
  *done = true; /* interrupted, parts left unwritten: the dispatcher fails the op */
  __atomic_add_fetch(dir == FWD ? &lu_dnnl_runs : dir == BWD_DATA ? &lu_dnnl_gin_runs : &lu_dnnl_gw_runs, 1,
                    __ATOMIC_RELAXED);
  return LUON_OK;
}

luon_status lu_dnnl_conv2d(const geom *g, int32_t dt, const float *x, const float *w, const float *b, float *y,
                           const lu_storage *wst, const double *bn, bool bn_relu, bool *done) {
  float *const ptr[3] = {(float *)x, (float *)w, y};
  return run_call(g, dt, FWD, ptr, b, wst, bn, bn_relu, done);
}

luon_status lu_dnnl_conv2d_grad_input(const geom *g, int32_t dt, const float *dy, const float *w, float *dx,
                                      bool *done) {
  float *const ptr[3] = {dx, (float *)w, (float *)dy};
  return run_call(g, dt, BWD_DATA, ptr, NULL, NULL, NULL, false, done);
}

luon_status lu_dnnl_conv2d_grad_weight(const geom *g, int32_t dt, const float *x, const float *dy, float *dw,
                                       bool *done) {
  float *const ptr[3] = {(float *)x, dw, (float *)dy};
  return run_call(g, dt, BWD_WEIGHTS, ptr, NULL, NULL, NULL, false, done);
}

#else /* built without oneDNN's header: conv.c's kernels */
void lu_conv_weights_drop(void) {}
bool lu_dnnl_conv_ok(const geom *g, int32_t dt) {
  (void)g, (void)dt;
  return false;
}
luon_status lu_dnnl_conv2d(const geom *g, int32_t dt, const float *x, const float *w, const float *b, float *y,
                           const lu_storage *wst, const double *bn, bool bn_relu, bool *done) {
  (void)g, (void)dt, (void)x, (void)w, (void)b, (void)y, (void)wst, (void)bn, (void)bn_relu;
  *done = false;
  return LUON_OK;
}
luon_status lu_dnnl_conv2d_grad_input(const geom *g, int32_t dt, const float *dy, const float *w, float *dx,
                                      bool *done) {
  (void)g, (void)dt, (void)dy, (void)w, (void)dx;
  *done = false;
  return LUON_OK;
}
luon_status lu_dnnl_conv2d_grad_weight(const geom *g, int32_t dt, const float *x, const float *dy, float *dw,
                                       bool *done) {
  (void)g, (void)dt, (void)x, (void)dy, (void)dw;
  *done = false;
  return LUON_OK;
}
#endif
