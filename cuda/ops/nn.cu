/* nn.cu: softmax / log_softmax and their gradients along an axis, pick and
 * pick_grad (the cross-entropy gather), and dropout with core/ops/nn.c's
 * Philox scheme (element j keeps when word j%4 of (key, start + j/4) is at
 * least p), on the GPU. Softmax takes a warp per row (a block per row
 * beyond 1024 columns); pick and dropout a thread per element. The
 * activations live in elementwise.cu's generic family. */
#include "kernels.cuh"
#include <math.h>

enum { S_SOFTMAX, S_LOG_SOFTMAX, S_SOFTMAX_GRAD, S_LOG_SOFTMAX_GRAD };

typedef struct lanes {
  lu_space s;           /* the lanes: x's shape with the axis set to 1 */
  int64_t len;          /* along the axis */
  int64_t ast[3];       /* element strides along the axis of operands 0..2 */
} lanes;

template <class T> __device__ __forceinline__ T ex(T x) {
  if constexpr (sizeof(T) == 4) return expf(x);
  else return exp(x);
}

/* The max (NaN-free partials: NaN never wins a comparison) or the sum of v
 * over the TPR threads of a row: warp shuffles, then, for a block per row,
 * across its warps through sh (one slot per warp). Every thread of the row
 * gets the result. */
template <int TPR> __device__ __forceinline__ double row_reduce(double v, bool max, double *sh) {
  for (int o = 16; o > 0; o >>= 1) {
    double u = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? (u > v ? u : v) : v + u;
  }
  if (TPR == 32) return v;
  __syncthreads(); /* sh's earlier readers are done */
  if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  v = sh[0];
  for (int w = 1; w < TPR / 32; w++) v = max ? (sh[w] > v ? sh[w] : v) : v + sh[w];
  return v;
}

/* Rows of length l.len along the axis, TPR threads each: a warp per row
 * (TPR 32, LU_THREADS / 32 rows per block) or a block per row (TPR
 * LU_THREADS). Thread t takes columns t, t + TPR, ...; the max and the sum
 * (in double, as the CPU) are reduced across the row.
 * op 0 out, 1 x (or y), 2 dy */
template <class T, int TPR> __global__ void k_softmax(lanes l, int kind) {
  __shared__ double sh[LU_THREADS / 32];
  const int rows = LU_THREADS / TPR;
  const int t = (int)threadIdx.x % TPR;
  for (int64_t base = (int64_t)blockIdx.x * rows; base < l.s.n; base += (int64_t)gridDim.x * rows) {
    int64_t i = base + threadIdx.x / TPR;
    if (i >= l.s.n) continue; /* a whole warp (TPR 32 only: a block's row always exists) */
    int64_t o[LU_MAX_OPS];
    lu_offsets(l.s, i, o);
    T *y = (T *)l.s.p[0] + o[0];
    const T *x = (const T *)l.s.p[1] + o[1];
    const T *d = kind >= S_SOFTMAX_GRAD ? (const T *)l.s.p[2] + o[2] : NULL;
    int64_t L = l.len, sy = l.ast[0], sx = l.ast[1], sd = l.ast[2];
    double acc = 0;
    if (kind == S_SOFTMAX || kind == S_LOG_SOFTMAX) {
      double m = -INFINITY;
      for (int64_t j = t; j < L; j += TPR) m = (double)x[j * sx] > m ? (double)x[j * sx] : m;
      T mx = (T)row_reduce<TPR>(m, true, sh);
      for (int64_t j = t; j < L; j += TPR) {
        T e = ex<T>(x[j * sx] - mx);
        acc += e;
        if (kind == S_SOFTMAX) y[j * sy] = e;
      }
      acc = row_reduce<TPR>(acc, false, sh);
      if (kind == S_SOFTMAX) {
        acc = 1 / acc;
        for (int64_t j = t; j < L; j += TPR) y[j * sy] *= (T)acc;
      } else {
        acc = (double)mx + log(acc);
        for (int64_t j = t; j < L; j += TPR) y[j * sy] = (T)((double)x[j * sx] - acc);
      }
    } else if (kind == S_SOFTMAX_GRAD) { /* y * (dy - sum(dy * y)) */
      for (int64_t j = t; j < L; j += TPR) acc += (double)x[j * sx] * d[j * sd];
      acc = row_reduce<TPR>(acc, false, sh);
      for (int64_t j = t; j < L; j += TPR) y[j * sy] = x[j * sx] * (d[j * sd] - (T)acc);
    } else { /* dy - exp(y) * sum(dy) */
      for (int64_t j = t; j < L; j += TPR) acc += d[j * sd];
      acc = row_reduce<TPR>(acc, false, sh);
      for (int64_t j = t; j < L; j += TPR) y[j * sy] = d[j * sd] - ex<T>(x[j * sx]) * (T)acc;
    }
  }
}

/* A warp per row up to 1024 columns, a block per row beyond. */
template <class T> static void softmax_launch(const lanes &l, int kind, cudaStream_t st) {
  int64_t n = l.s.n;
  if (l.len <= 1024) {
    int64_t b = (n + LU_THREADS / 32 - 1) / (LU_THREADS / 32);
    k_softmax<T, 32><<<(unsigned)(b > 65536 ? 65536 : b), LU_THREADS, 0, st>>>(l, kind);
  } else {
    k_softmax<T, LU_THREADS><<<(unsigned)(n > 65536 ? 65536 : n), LU_THREADS, 0, st>>>(l, kind);
  }
}

static int axis_of(const lu_call *c, int nd) {
  int64_t a = c->attrs->ni > LU_SOFTMAX_AXIS ? c->attrs->i[LU_SOFTMAX_AXIS] : -1;
  return (int)(a < 0 ? a + nd : a);
}

/* Strides of t over the ndim-d lane space (a 0 at `axis` when t lacks it). */
static void strides_at(const luon_tensor *t, int ndim, int axis, int64_t *st) {
  for (int d = 0, s = 0; d < ndim; d++) {
    if (t->ndim == ndim - 1 && d == axis) st[d] = 0;
    else st[d] = t->strides[s++];
  }
}

static luon_status softmax_run(lu_call *c, int kind) {
  luon_tensor *y = c->out[0];
  int nd = y->ndim, ax = axis_of(c, nd);
  lanes l;
  int64_t shape[LU_MAXD];
  memcpy(shape, y->shape, sizeof(int64_t) * (size_t)nd);
  l.len = shape[ax];
  shape[ax] = 1;
  lu_space_init(&l.s, nd, shape);
  lu_space_add(&l.s, y);
  lu_space_add(&l.s, c->in[0]);
  l.ast[0] = y->strides[ax];
  l.ast[1] = c->in[0]->strides[ax];
  l.ast[2] = 0;
  if (c->nin > 1) {
    lu_space_add(&l.s, c->in[1]);
    l.ast[2] = c->in[1]->strides[ax];
  }
  lu_space_done(&l.s);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (y->size > 0)
    LU_DISPATCH_FLOAT(y->dtype, T, softmax_launch<T>(l, kind, k.s),
                      s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_softmax(lu_call *c) { return softmax_run(c, S_SOFTMAX); }
luon_status lu_cuda_log_softmax(lu_call *c) { return softmax_run(c, S_LOG_SOFTMAX); }
luon_status lu_cuda_softmax_grad(lu_call *c) { return softmax_run(c, S_SOFTMAX_GRAD); }
luon_status lu_cuda_log_softmax_grad(lu_call *c) { return softmax_run(c, S_LOG_SOFTMAX_GRAD); }

/* ---- pick ---------------------------------------------------------------------- */

/* The position an index value picks along an axis of length L (clip or wrap). */
__device__ __forceinline__ int64_t pick_pos(const void *p, int32_t dt, int64_t o, int64_t L, int mode) {
  if (dt == LUON_DTYPE_F32 || dt == LUON_DTYPE_F64) {
    double v = dt == LUON_DTYPE_F32 ? (double)((const float *)p)[o] : ((const double *)p)[o];
    v = trunc(v);
    if (v != v || (mode == 1 && isinf(v))) return 0; /* no position to wrap to (fmod: NaN), as nn.c */
    if (mode == 1) {
      v = fmod(v, (double)L);
      return (int64_t)(v < 0 ? v + (double)L : v) % L;
    }
    return v <= 0 ? 0 : v >= (double)(L - 1) ? L - 1 : (int64_t)v;
  }
  int64_t k = lu_ld<int64_t>(p, dt, o);
  if (mode == 1) return ((k % L) + L) % L;
  return k < 0 ? 0 : k >= L ? L - 1 : k;
}

/* forward: op 0 out, 1 x, 2 index; grad: op 0 dx, 1 dy, 2 index (dx zeroed) */
template <class T> __global__ void k_pick(lanes l, int mode, bool grad) {
  LU_GRID_LOOP(i, l.s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(l.s, i, o);
    int64_t pos = pick_pos(l.s.p[2], l.s.dt[2], o[2], l.len, mode);
    if (grad) ((T *)l.s.p[0])[o[0] + pos * l.ast[0]] = ((const T *)l.s.p[1])[o[1]];
    else ((T *)l.s.p[0])[o[0]] = ((const T *)l.s.p[1])[o[1] + pos * l.ast[1]];
  }
}

static luon_status pick_run(lu_call *c, bool grad) {
  const luon_tensor *full = grad ? c->out[0] : c->in[0], *r = grad ? c->in[0] : c->out[0];
  const luon_tensor *idx = c->in[1];
  int64_t axis = c->attrs->i[LU_PICK_AXIS];
  int nd = full->ndim, ax = (int)(axis < 0 ? axis + nd : axis);
  lanes l;
  int64_t shape[LU_MAXD], st[LU_MAXD];
  memcpy(shape, full->shape, sizeof(int64_t) * (size_t)nd);
  l.len = shape[ax];
  shape[ax] = 1;
  lu_space_init(&l.s, nd, shape);
  const luon_tensor *op0 = grad ? full : r, *op1 = grad ? r : full;
  strides_at(op0, nd, ax, st);
  lu_space_add_raw(&l.s, lu_data(op0), op0->dtype, st);
  strides_at(op1, nd, ax, st);
  lu_space_add_raw(&l.s, lu_data(op1), op1->dtype, st);
  strides_at(idx, nd, ax, st);
  lu_space_add_raw(&l.s, lu_data(idx), idx->dtype, st);
  l.ast[0] = op0->strides[ax];
  l.ast[1] = op1->strides[ax];
  l.ast[2] = 0;
  if (!grad) l.ast[0] = 0;
  else l.ast[1] = 0;
  lu_space_done(&l.s);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (grad) s = lu_cuda_zero(lu_data(full), (size_t)full->size * luon_dtype_size(full->dtype), k.s);
  if (s == LUON_OK && l.s.n > 0 && l.len > 0)
    LU_DISPATCH_FLOAT(full->dtype, T,
                      (k_pick<T><<<lu_blocks(l.s.n), LU_THREADS, 0, k.s>>>(l, (int)c->attrs->i[LU_PICK_MODE], grad)),
                      s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_pick(lu_call *c) { return pick_run(c, false); }
luon_status lu_cuda_pick_grad(lu_call *c) { return pick_run(c, true); }

/* ---- dropout ---------------------------------------------------------------------- */

/* op 0 y, 1 mask, 2 x over x's shape; element j row-major */
template <class T> __global__ void k_dropout(lu_space s, uint64_t key, uint64_t start, float p, double scale) {
  LU_GRID_LOOP(j, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, j, o);
    uint32_t w[4];
    lu_philox(key, start + ((uint64_t)j >> 2), w);
    float u = (float)(w[j & 3] >> 8) * (1.0f / 16777216.0f);
    T mk = u >= p ? (T)scale : (T)0;
    ((T *)s.p[1])[o[1]] = mk;
    ((T *)s.p[0])[o[0]] = ((const T *)s.p[2])[o[2]] * mk;
  }
}

luon_status lu_cuda_dropout(lu_call *c) {
  luon_tensor *x = c->in[0];
  int64_t n = x->size;
  double pr = c->attrs->f[LU_DROPOUT_P], scale;
  float p;
  uint64_t key = 0, start = 0;
  if (pr == 0) { /* nothing dropped: mask 1, y = x, no draws */
    scale = 1;
    p = -1;
  } else {
    scale = pr < 1 ? 1 / (1 - pr) : 0;
    p = (float)pr;
    if (n > 0) start = lu_cuda_host_api->rng_reserve(c->dev, ((uint64_t)n + 3) / 4, &key);
  }
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (n > 0) {
    lu_space sp;
    lu_space_init(&sp, x->ndim, x->shape);
    lu_space_add(&sp, c->out[0]);
    lu_space_add(&sp, c->out[1]);
    lu_space_add(&sp, x);
    lu_space_done(&sp);
    LU_DISPATCH_FLOAT(x->dtype, T,
                      (k_dropout<T><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(sp, key, start, p, scale)),
                      s = lu_cuda_seterr(LUON_EDTYPE, "dropout: float32 or float64 only"))
  }
  return lu_cuda_end(&k, s);
}
