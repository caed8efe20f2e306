/* sort.cu: sort, sort_grad and searchsorted on the GPU, as core/ops/sort.c.
 * sort: one thread per element, which counts the elements of its lane that
 * sort before it (ties: those before it in the lane) and so knows its place
 * (O(L) per element: correct and simple, not fast for long lanes). float16
 * and bfloat16 are read and written as they are (LU_HALF). Shapes and
 * dtypes come from the shape functions in core/ops/sort.c. */
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

/* op 0 x, 1 values, 2 indices; element e = lane e / L, position e % L.
 * Values are compared as C (double for floats, 16-bit ones included; int64
 * for integers) and moved as raw elements E of their size. */
template <class C, class E> __global__ void k_sort(lanes3 p, const E *x, int32_t dt, E *y, int64_t *ix, bool desc) {
  LU_GRID_LOOP(e, p.nl * p.L) {
    int64_t r = e / p.L, i = e % p.L, o[3];
    lane_offs(p, r, o);
    const E *v = x + o[0];
    C me = lu_ld<C>(v, dt, i * p.ast[0]);
    int64_t rank = 0;
    for (int64_t j = 0; j < p.L; j++) {
      C u = lu_ld<C>(v, dt, j * p.ast[0]);
      bool before = desc ? less_<C>(me, u) : less_<C>(u, me);
      bool tie = !less_<C>(me, u) && !less_<C>(u, me);
      rank += before || (tie && j < i);
    }
    if (rank < p.k) {
      y[o[1] + rank * p.ast[1]] = v[i * p.ast[0]];
      ix[o[2] + rank * p.ast[2]] = i;
    }
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
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  int64_t n = p.nl * p.L;
  if (y->size > 0) {
#define LAUNCH(C, E)                                                                              \
  k_sort<C, E><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(p, (const E *)lu_data(x), dt, (E *)lu_data(y), \
                                                     (int64_t *)lu_data(ix), desc)
    if (fl && es == 8) LAUNCH(double, uint64_t);
    else if (fl && es == 4) LAUNCH(double, uint32_t);
    else if (fl) LAUNCH(double, uint16_t);
    else if (es == 8) LAUNCH(int64_t, uint64_t);
    else if (es == 4) LAUNCH(int64_t, uint32_t);
    else LAUNCH(int64_t, uint8_t); /* uint8, bool */
#undef LAUNCH
  }
  return lu_cuda_end(&k, LUON_OK);
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
