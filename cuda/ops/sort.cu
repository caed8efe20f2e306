/* sort.cu: sort, sort_grad and searchsorted on the GPU, as core/ops/sort.c.
 * sort: a stable bottom-up merge sort of every lane at once, one thread
 * per element per pass placing itself by a binary search in the partner
 * run (log2 L passes over scratch positions), then the first k gathered.
 * Values compare as double (floats, 16-bit ones included, read and written
 * as they are: LU_HALF) or int64. Shapes and dtypes come from the shape
 * functions in core/ops/sort.c. */
#include "kernels.cuh"

/* The lanes along the axis of up to 3 tensors: their other axes and
 * strides, and the strides along the axis. */
typedef struct lanes3 {
  int nd;
  int64_t shape[LU_MAXD];
  int64_t st[3][LU_MAXD];
  int64_t ast[3];
  int64_t nl, L, k;
} lanes3;

static void lanes_init(lanes3 *p, int ax, const luon_tensor *const *t, int nt, int64_t L, int64_t k) {
  memset(p, 0, sizeof *p);
  const luon_tensor *f = t[0];
  p->nl = 1;
  for (int d = 0; d < f->ndim; d++) {
    if (d == ax) continue;
    p->shape[p->nd] = f->shape[d];
    for (int j = 0; j < nt; j++) p->st[j][p->nd] = t[j]->strides[d];
    p->nl *= f->shape[d];
    p->nd++;
  }
  for (int j = 0; j < nt; j++) p->ast[j] = t[j]->strides[ax];
  p->L = L;
  p->k = k;
}

__device__ __forceinline__ void lane_offs(const lanes3 &p, int64_t r, int64_t *o) {
  o[0] = o[1] = o[2] = 0;
  for (int d = p.nd - 1; d >= 0; d--) {
    int64_t q = r % p.shape[d];
    r /= p.shape[d];
    for (int j = 0; j < 3; j++) o[j] += q * p.st[j][d];
  }
}

static bool is_float(int32_t dt) {
  return dt == LUON_DTYPE_F32 || dt == LUON_DTYPE_F64 || dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16;
}

/* a sorts strictly before b ascending (NaN after everything) */
template <class T> __device__ __forceinline__ bool less_(T a, T b) {
  if (lu_is_int<T>::v) return a < b;
  return a < b || (b != b && a == a);
}

/* x's value at position q of the lane starting at element o, as C */
template <class C> __device__ __forceinline__ C val(const void *x, int32_t dt, int64_t o, int64_t q, int64_t st) {
  return lu_ld<C>(x, dt, o + q * st);
}

/* One pass of a bottom-up merge sort of every lane at once: the positions
 * in `in` (lane r's at r*L) are sorted runs of `width`; each element finds
 * its place in the merge of its run with the partner run by a binary search
 * there (a left element goes after the partner's elements that sort
 * strictly before it, a right one after those that do not sort after it:
 * ties keep their order) and is written to `out`. desc: the order reversed. */
template <class C>
__global__ void k_merge_pass(lanes3 p, const void *x, int32_t dt, bool desc, int64_t width, const int64_t *in,
                             int64_t *out) {
  LU_GRID_LOOP(e, p.nl * p.L) {
    int64_t r = e / p.L, q = e % p.L, o[3];
    lane_offs(p, r, o);
    const int64_t *lane = in + r * p.L;
    bool first = width == 1; /* runs of 1: the identity order, `in` unread */
    int64_t pos = first ? q : lane[q];
    C me = val<C>(x, dt, o[0], pos, p.ast[0]);
    int64_t base = q / (2 * width) * (2 * width), mid = base + width < p.L ? base + width : p.L;
    int64_t end = base + 2 * width < p.L ? base + 2 * width : p.L;
    bool left = q < mid;
    int64_t lo = left ? mid : base, hi = left ? end : mid;
    while (lo < hi) { /* the first partner element that goes after me */
      int64_t m = lo + (hi - lo) / 2, pm = first ? m : lane[m];
      C u = val<C>(x, dt, o[0], pm, p.ast[0]);
      bool u_first = left ? (desc ? less_<C>(me, u) : less_<C>(u, me))    /* strictly before */
                          : !(desc ? less_<C>(u, me) : less_<C>(me, u));  /* not after */
      if (u_first) lo = m + 1;
      else hi = m;
    }
    out[r * p.L + base + (q - (left ? base : mid)) + (lo - (left ? mid : base))] = pos;
  }
}

/* op 1 values, 2 indices: the first k of each lane's order, moved as raw
 * elements E */
template <class E> __global__ void k_sort_out(lanes3 p, const E *x, const int64_t *order, E *y, int64_t *ix) {
  LU_GRID_LOOP(e, p.nl * p.k) {
    int64_t r = e / p.k, i = e % p.k, o[3];
    lane_offs(p, r, o);
    int64_t pos = p.L == 1 ? 0 : order[r * p.L + i];
    y[o[1] + i * p.ast[1]] = x[o[0] + pos * p.ast[0]];
    ix[o[2] + i * p.ast[2]] = pos;
  }
}

luon_status lu_cuda_sort(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0], *ix = c->out[1];
  int64_t a = c->attrs->i[LU_SORT_AXIS];
  int ax = (int)(a < 0 ? a + x->ndim : a);
  const luon_tensor *ts[3] = {x, y, ix};
  lanes3 p;
  lanes_init(&p, ax, ts, 3, x->shape[ax], y->shape[ax]);
  bool desc = c->attrs->i[LU_SORT_DESCENDING] != 0;
  int32_t dt = x->dtype, es = luon_dtype_size(dt);
  bool fl = is_float(dt);
  if (y->size == 0) return LUON_OK;
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  int64_t n = p.nl * p.L;
  lu_block *blk = NULL;
  luon_status s = LUON_OK;
  int64_t *order = NULL;
  if (p.L > 1) { /* ping-pong order buffers, ceil(log2 L) passes */
    s = lu_cuda_scratch(k.id, (size_t)(2 * n) * sizeof(int64_t), &blk);
    if (s == LUON_OK) {
      int64_t *buf[2] = {(int64_t *)blk->ptr, (int64_t *)blk->ptr + n};
      int cur = 0;
      for (int64_t w = 1; w < p.L; w *= 2) {
        if (fl)
          k_merge_pass<double><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, lu_data(x), dt, desc, w, buf[cur], buf[1 - cur]);
        else
          k_merge_pass<int64_t><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, lu_data(x), dt, desc, w, buf[cur], buf[1 - cur]);
        cur = 1 - cur;
      }
      order = buf[cur];
    }
  }
  if (s == LUON_OK) {
    int64_t m = p.nl * p.k;
#define LAUNCH(E)                                                                                 \
  k_sort_out<E><<<lu_blocks(m), LU_THREADS, 0, k.s>>>(p, (const E *)lu_data(x), order, (E *)lu_data(y), \
                                                      (int64_t *)lu_data(ix))
    if (es == 8) LAUNCH(uint64_t);
    else if (es == 4) LAUNCH(uint32_t);
    else if (es == 2) LAUNCH(uint16_t);
    else LAUNCH(uint8_t);
#undef LAUNCH
  }
  lu_cuda_scratch_free(blk);
  return lu_cuda_end(&k, s);
}

/* op 0 dy, 1 indices, 2 dx (zeroed): dx[lane, ix[i]] = dy[lane, i] */
template <class E> __global__ void k_sort_grad(lanes3 p, const E *dy, const int64_t *ix, E *dx) {
  LU_GRID_LOOP(e, p.nl * p.k) {
    int64_t r = e / p.k, i = e % p.k, o[3];
    lane_offs(p, r, o);
    int64_t q = ix[o[1] + i * p.ast[1]];
    if (q >= 0 && q < p.L) dx[o[2] + q * p.ast[2]] = dy[o[0] + i * p.ast[0]];
  }
}

luon_status lu_cuda_sort_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0], *ix = c->in[1];
  luon_tensor *dx = c->out[0];
  int64_t a = c->attrs->i[LU_SORT_AXIS];
  int ax = (int)(a < 0 ? a + dx->ndim : a);
  const luon_tensor *ts[3] = {dy, ix, dx};
  lanes3 p;
  lanes_init(&p, ax, ts, 3, dx->shape[ax], dy->shape[ax]);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  int32_t es = luon_dtype_size(dx->dtype);
  luon_status s = lu_cuda_zero(lu_data(dx), (size_t)dx->size * es, k.s);
  int64_t n = p.nl * p.k;
  if (s == LUON_OK && n > 0) {
    const int64_t *ip = (const int64_t *)lu_data(ix);
    if (es == 8)
      k_sort_grad<uint64_t><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, (const uint64_t *)lu_data(dy), ip,
                                                                  (uint64_t *)lu_data(dx));
    else if (es == 4)
      k_sort_grad<uint32_t><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, (const uint32_t *)lu_data(dy), ip,
                                                                  (uint32_t *)lu_data(dx));
    else if (es == 2)
      k_sort_grad<uint16_t><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, (const uint16_t *)lu_data(dy), ip,
                                                                  (uint16_t *)lu_data(dx));
    else
      k_sort_grad<uint8_t><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, (const uint8_t *)lu_data(dy), ip,
                                                                 (uint8_t *)lu_data(dx));
  }
  return lu_cuda_end(&k, s);
}

/* op 0 out (int64), op 1 v; a (n,) at element stride as, compared in C */
template <class C>
__global__ void k_searchsorted(lu_space s, const void *a, int32_t adt, int64_t n, int64_t as, bool right) {
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    C v = lu_ld<C>(s.p[1], s.dt[1], o[1]);
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      int64_t m = lo + (hi - lo) / 2;
      C x = lu_ld<C>(a, adt, m * as);
      bool go_right = right ? !less_<C>(v, x) : less_<C>(x, v);
      if (go_right) lo = m + 1;
      else hi = m;
    }
    ((int64_t *)s.p[0])[o[0]] = lo;
  }
}

luon_status lu_cuda_searchsorted(lu_call *c) {
  const luon_tensor *a = c->in[0], *v = c->in[1];
  luon_tensor *y = c->out[0];
  lu_space sp;
  lu_space_init(&sp, y->ndim, y->shape);
  lu_space_add(&sp, y);
  lu_space_add(&sp, v);
  lu_space_done(&sp);
  bool right = c->attrs->i[LU_SEARCHSORTED_RIGHT] != 0;
  bool fl = is_float(a->dtype) || is_float(v->dtype);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (y->size > 0) {
    if (fl)
      k_searchsorted<double><<<lu_blocks(sp.n), LU_THREADS, 0, k.s>>>(sp, lu_data(a), a->dtype, a->shape[0],
                                                                      a->strides[0], right);
    else
      k_searchsorted<int64_t><<<lu_blocks(sp.n), LU_THREADS, 0, k.s>>>(sp, lu_data(a), a->dtype, a->shape[0],
                                                                       a->strides[0], right);
  }
  return lu_cuda_end(&k, LUON_OK);
}
