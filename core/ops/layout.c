/* layout.c: ops that make a new array of x's elements moved or masked: pad
 * (and pad_grad, its backward along one axis), diag, tril and triu,
 * one_hot, sequence_mask. The views and compositions of the same family
 * (flip, roll, tile, repeat, meshgrid, npx.reshape) are Lua, in np.lua and
 * npx.lua. Kernels move bytes where they can, so that any dtype works. */
#include "steps.h"
#include <math.h>
#include <stdlib.h>

/* x's elements in row-major order: x's own memory when it is contiguous
 * (*tmp NULL), else a dense copy in scratch (*tmp: free it with
 * lu_scratch_free). NULL with a message when out of memory. */
static const char *dense_of(const luon_tensor *x, const char *op, void **tmp) {
  *tmp = NULL;
  if (lu_is_contiguous(x) || x->size == 0) return lu_data(x);
  *tmp = lu_scratch_alloc((size_t)x->size * (size_t)luon_dtype_size(x->dtype));
  if (!*tmp) {
    lu_error(LUON_ENOMEM, "%s: out of host memory for a dense copy of the input (shape %s)", op,
             lu_shape_str(x->ndim, x->shape));
    return NULL;
  }
  lu_pack(x, *tmp);
  return *tmp;
}

/* v as one element of dtype dt, in `bytes` (8 of them). */
static void value_bytes(double v, int32_t dt, char bytes[8]) {
  memset(bytes, 0, 8);
  lu_convert(bytes, dt, &v, LUON_DTYPE_F64, 1);
}

/* ---- pad ----------------------------------------------------------------- */

/* x (d0..dn-1) -> (d0 + b0 + a0, ..., dn-1 + bn-1 + an-1): position p of
 * axis d shows x at lu_pad_src(p, d_d, b_d, mode) on every axis, or VALUE
 * (constant mode) where any axis is outside. */
luon_status lu_shape_pad(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int n = x->ndim;
  int64_t mode = a->i[LU_PAD_MODE];
  if (mode < 0 || mode >= LU_PAD_MODES)
    return lu_error(LUON_EINVAL, "pad: mode %lld is not 0 (constant), 1 (edge), 2 (reflect) or 3 (symmetric)",
                    (long long)mode);
  if (a->ni != LU_PAD_WIDTHS + 2 * n)
    return lu_error(LUON_EINVAL, "pad: %d widths given for an array of %d dimensions (shape %s); "
                    "expected (before, after) for each axis", a->ni - LU_PAD_WIDTHS, n, lu_shape_str(n, x->shape));
  for (int d = 0; d < n; d++) {
    int64_t b = a->i[LU_PAD_WIDTHS + 2 * d], e = a->i[LU_PAD_WIDTHS + 2 * d + 1];
    if (b < 0 || e < 0 || b > ((int64_t)1 << 40) || e > ((int64_t)1 << 40))
      return lu_error(LUON_EINVAL, "pad: widths (%lld, %lld) of axis %d must be >= 0 (and below 2^40)",
                      (long long)b, (long long)e, d);
    if (mode != LU_PAD_CONSTANT && x->shape[d] == 0 && b + e > 0)
      return lu_error(LUON_ESHAPE, "pad: cannot extend the empty axis %d (shape %s) in %s mode; "
                      "only constant mode pads an empty axis", d, lu_shape_str(n, x->shape),
                      mode == LU_PAD_EDGE ? "edge" : mode == LU_PAD_REFLECT ? "reflect" : "symmetric");
    c->out_shape[0][d] = x->shape[d] + b + e;
  }
  c->out_ndim[0] = n;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

typedef struct pad_ctx {
  const char *x;    /* dense */
  char *y;
  int nd;
  size_t es;
  const int64_t *xs, *ys, *w; /* shapes, widths (before, after per axis) */
  int mode;
  char value[8];
} pad_ctx;

/* output rows [begin, end) (all axes but the last) */
static void pad_rows(void *p, int64_t begin, int64_t end) {
  const pad_ctx *t = p;
  int nd = t->nd, last = nd - 1;
  size_t es = t->es;
  int64_t n = t->xs[last], N = t->ys[last], b = t->w[2 * last];
  for (int64_t r = begin; r < end; r++) {
    char *y = t->y + (size_t)(r * N) * es;
    int64_t q = r, src = 0, scale = n;
    bool outside = false;
    for (int d = last - 1; d >= 0; d--) { /* the source row of x, or none */
      int64_t s = lu_pad_src(q % t->ys[d], t->xs[d], t->w[2 * d], t->mode);
      q /= t->ys[d];
      if (s < 0) outside = true;
      src += s * scale;
      scale *= t->xs[d];
    }
    const char *x = t->x + (size_t)src * es;
    for (int64_t j = 0; j < N; j++) {
      int64_t s = outside ? -1 : lu_pad_src(j, n, b, t->mode);
      memcpy(y + (size_t)j * es, s < 0 ? t->value : x + (size_t)s * es, es);
    }
  }
}

luon_status lu_cpu_pad(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  if (y->size == 0) return LUON_OK;
  size_t es = (size_t)luon_dtype_size(y->dtype);
  if (x->ndim == 0) {
    memcpy(lu_data(y), lu_data(x), es);
    return LUON_OK;
  }
  void *tmp;
  const char *xd = dense_of(x, "pad", &tmp);
  if (!xd) return LUON_ENOMEM;
  pad_ctx t = {xd, lu_data(y), x->ndim, es, x->shape, y->shape, c->attrs->i + LU_PAD_WIDTHS,
               (int)c->attrs->i[LU_PAD_MODE], {0}};
  value_bytes(c->attrs->f[LU_PAD_VALUE], y->dtype, t.value);
  int64_t N = y->shape[y->ndim - 1];
  lu_parallel_for(y->size / N, (1 << 15) / N + 1, pad_rows, &t);
  lu_scratch_free(tmp);
  return LUON_OK;
}

/* ---- pad_grad ------------------------------------------------------------- */

/* dy (.., N, ..) -> dx (.., N - BEFORE - AFTER, ..) along AXIS: dx[.., i, ..]
 * is the sum of dy over the positions p with lu_pad_src(p) = i. */
luon_status lu_shape_pad_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0];
  const luon_attrs *a = c->attrs;
  int ax;
  int64_t mode = a->i[LU_PADG_MODE], b = a->i[LU_PADG_BEFORE], e = a->i[LU_PADG_AFTER];
  if (a->ni != LU_NI_pad_grad)
    return lu_error(LUON_EINVAL, "pad_grad: expected %d integer attributes (mode, axis, before, after), got %d",
                    LU_NI_pad_grad, a->ni);
  if (mode < 0 || mode >= LU_PAD_MODES)
    return lu_error(LUON_EINVAL, "pad_grad: mode %lld is not 0 to 3", (long long)mode);
  if (!lu_dtype_is_float(dy->dtype))
    return lu_error(LUON_EDTYPE, "pad_grad: dy is %s; only float dtypes are supported", luon_dtype_name(dy->dtype));
  if (dy->ndim == 0) return lu_error(LUON_ESHAPE, "pad_grad: dy is 0-dimensional");
  LU_TRY(lu_axis("pad_grad", a->i[LU_PADG_AXIS], dy->ndim, &ax));
  int64_t N = dy->shape[ax];
  if (b < 0 || e < 0 || b + e > N || (mode != LU_PAD_CONSTANT && b + e == N && N > 0))
    return lu_error(LUON_ESHAPE, "pad_grad: widths (%lld, %lld) do not fit axis %d of dy (shape %s)",
                    (long long)b, (long long)e, ax, lu_shape_str(dy->ndim, dy->shape));
  memcpy(c->out_shape[0], dy->shape, sizeof(int64_t) * (size_t)dy->ndim);
  c->out_shape[0][ax] = N - b - e;
  c->out_ndim[0] = dy->ndim;
  c->out_dtype[0] = dy->dtype;
  c->scratch_i[0] = ax;
  return LUON_OK;
}

typedef struct padg_ctx {
  const char *dy; /* dense */
  char *dx;
  int64_t N, n, inner, b;
  int mode;
  int32_t dt;
} padg_ctx;

#define PAD_SCATTER(T)                                                           \
  for (int64_t o = begin; o < end; o++) {                                        \
    const T *s = (const T *)t->dy + o * t->N * t->inner;                         \
    T *d = (T *)t->dx + o * t->n * t->inner;                                     \
    for (int64_t p = 0; p < t->N; p++) {                                         \
      int64_t i = lu_pad_src(p, t->n, t->b, t->mode);                            \
      if (i < 0) continue;                                                       \
      for (int64_t k = 0; k < t->inner; k++) d[i * t->inner + k] += s[p * t->inner + k]; \
    }                                                                            \
  }

/* outer blocks [begin, end): each adds into its own part of dx */
static void padg_rows(void *p, int64_t begin, int64_t end) {
  const padg_ctx *t = p;
  if (t->dt == LUON_DTYPE_F32) { PAD_SCATTER(float) }
  else { PAD_SCATTER(double) }
}

luon_status lu_cpu_pad_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0];
  luon_tensor *dx = c->out[0];
  if (dx->size == 0) return LUON_OK;
  memset(lu_data(dx), 0, (size_t)dx->size * (size_t)luon_dtype_size(dx->dtype));
  int ax = (int)c->scratch_i[0];
  void *tmp;
  const char *dd = dense_of(dy, "pad_grad", &tmp);
  if (!dd) return LUON_ENOMEM;
  padg_ctx t = {dd, lu_data(dx), dy->shape[ax], dx->shape[ax], lu_numel(dy->ndim - ax - 1, dy->shape + ax + 1),
                c->attrs->i[LU_PADG_BEFORE], (int)c->attrs->i[LU_PADG_MODE], dx->dtype};
  int64_t outer = lu_numel(ax, dy->shape);
  lu_parallel_for(outer, (1 << 15) / (t.N * t.inner) + 1, padg_rows, &t);
  lu_scratch_free(tmp);
  return LUON_OK;
}

/* pad: constant mode: dx = the middle of dy (a view); other modes: dy
 * summed back to where each padded element was read from, one axis at a
 * time (pad_grad), the padded axes in turn */
luon_status lu_grad_pad(lu_grad_call *g) {
  const luon_attrs *pa = g->attrs;
  const luon_tensor *x = g->in[0];
  int n = x->ndim;
  if (pa->i[LU_PAD_MODE] == LU_PAD_CONSTANT) {
    luon_attrs a;
    memset(&a, 0, sizeof a);
    for (int d = 0; d < n; d++) {
      int64_t *t = a.i + LU_NI_slice * d;
      t[LU_SLICE_BEGIN] = pa->i[LU_PAD_WIDTHS + 2 * d];
      t[LU_SLICE_END] = pa->i[LU_PAD_WIDTHS + 2 * d] + x->shape[d];
      t[LU_SLICE_STEP] = 1;
    }
    a.ni = LU_NI_slice * n;
    return lu_run(LU_OP_slice, &a, &g->din[0], 1, g->dout[0]);
  }
  luon_tensor *cur = luon_tensor_retain(g->dout[0]);
  for (int d = 0; d < n; d++) {
    int64_t b = pa->i[LU_PAD_WIDTHS + 2 * d], e = pa->i[LU_PAD_WIDTHS + 2 * d + 1];
    if (b == 0 && e == 0) continue;
    luon_attrs a;
    memset(&a, 0, sizeof a);
    a.i[LU_PADG_MODE] = pa->i[LU_PAD_MODE];
    a.i[LU_PADG_AXIS] = d;
    a.i[LU_PADG_BEFORE] = b;
    a.i[LU_PADG_AFTER] = e;
    a.ni = LU_NI_pad_grad;
    luon_tensor *next;
    luon_status s = lu_run(LU_OP_pad_grad, &a, &next, 1, cur);
    luon_tensor_release(cur);
    LU_TRY(s);
    cur = next;
  }
  g->din[0] = cur;
  return LUON_OK;
}

/* ---- diag ------------------------------------------------------------------ */

/* The diagonal K of a (rows, cols) matrix: its length, and its first
 * element's row and column. */
static int64_t diag_len(int64_t rows, int64_t cols, int64_t k, int64_t *r0, int64_t *c0) {
  *r0 = k < 0 ? -k : 0;
  *c0 = k > 0 ? k : 0;
  int64_t r = rows - *r0, cl = cols - *c0;
  int64_t len = r < cl ? r : cl;
  return len > 0 ? len : 0;
}

/* 1-d (n) -> (n + |k|, n + |k|) (or (ROWS, COLS), whose diagonal K must
 * be n long) with x on diagonal K, zeros elsewhere; 2-d (r, c) -> its
 * diagonal K. scratch_i: 1 for the 1-d case, rows, cols, r0, c0, len. */
luon_status lu_shape_diag(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int64_t k = a->i[LU_DIAG_K], r0, c0;
  if (k < -((int64_t)1 << 40) || k > ((int64_t)1 << 40))
    return lu_error(LUON_EINVAL, "diag: k = %lld is too large", (long long)k);
  if (x->ndim == 1) {
    int64_t n = x->shape[0], rows = n + (k < 0 ? -k : k), cols = rows;
    if (a->ni > LU_DIAG_COLS) {
      rows = a->i[LU_DIAG_ROWS];
      cols = a->i[LU_DIAG_COLS];
      if (rows < 0 || cols < 0 || diag_len(rows, cols, k, &r0, &c0) != n)
        return lu_error(LUON_ESHAPE, "diag: diagonal %lld of a (%lld,%lld) matrix does not hold %lld elements",
                        (long long)k, (long long)rows, (long long)cols, (long long)n);
    }
    c->out_shape[0][0] = rows;
    c->out_shape[0][1] = cols;
    c->out_ndim[0] = 2;
    c->scratch_i[0] = 1;
    c->scratch_i[5] = diag_len(rows, cols, k, &c->scratch_i[3], &c->scratch_i[4]);
  } else if (x->ndim == 2) {
    c->out_shape[0][0] = diag_len(x->shape[0], x->shape[1], k, &c->scratch_i[3], &c->scratch_i[4]);
    c->scratch_i[5] = c->out_shape[0][0];
    c->out_ndim[0] = 1;
    c->scratch_i[0] = 0;
  } else {
    return lu_error(LUON_ESHAPE, "diag: the input must be 1-d or 2-d, got shape %s", lu_shape_str(x->ndim, x->shape));
  }
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_diag(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  size_t es = (size_t)luon_dtype_size(y->dtype);
  int64_t r0 = c->scratch_i[3], c0 = c->scratch_i[4], len = c->scratch_i[5];
  const char *xd = lu_data(x);
  char *yd = lu_data(y);
  if (c->scratch_i[0]) { /* build: zeros (all-zero bytes in every dtype), then the diagonal */
    memset(yd, 0, (size_t)y->size * es);
    for (int64_t i = 0; i < len; i++)
      memcpy(yd + (size_t)((i + r0) * y->shape[1] + i + c0) * es, xd + (size_t)(i * x->strides[0]) * es, es);
  } else {
    for (int64_t i = 0; i < len; i++)
      memcpy(yd + (size_t)i * es, xd + (size_t)((i + r0) * x->strides[0] + (i + c0) * x->strides[1]) * es, es);
  }
  return LUON_OK;
}

/* diag: 1-d x: dx = the diagonal K of dy; 2-d x: dx = dy put on diagonal K
 * of a matrix of x's shape */
luon_status lu_grad_diag(lu_grad_call *g) {
  const luon_tensor *x = g->in[0];
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.i[LU_DIAG_K] = g->attrs->i[LU_DIAG_K];
  a.ni = LU_DIAG_K + 1;
  if (x->ndim == 2) {
    a.i[LU_DIAG_ROWS] = x->shape[0];
    a.i[LU_DIAG_COLS] = x->shape[1];
    a.ni = LU_NI_diag;
  }
  return lu_run(LU_OP_diag, &a, &g->din[0], 1, g->dout[0]);
}

/* ---- tril, triu ------------------------------------------------------------- */

/* x (..., r, c) -> the same with x[..., i, j] kept where j - i <= K (tril)
 * or j - i >= K (triu), zero elsewhere; x (n) is taken as (n, n) rows of x. */
static luon_status tri_shape(lu_call *c, const char *op) {
  const luon_tensor *x = c->in[0];
  if (x->ndim == 0) return lu_error(LUON_ESHAPE, "%s: the input must have at least 1 dimension, got a 0-d array", op);
  int64_t k = c->attrs->i[LU_TRI_K];
  if (k < -((int64_t)1 << 40) || k > ((int64_t)1 << 40))
    return lu_error(LUON_EINVAL, "%s: k = %lld is too large", op, (long long)k);
  if (x->ndim == 1) {
    c->out_shape[0][0] = c->out_shape[0][1] = x->shape[0];
    c->out_ndim[0] = 2;
  } else {
    memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
    c->out_ndim[0] = x->ndim;
  }
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}
luon_status lu_shape_tril(lu_call *c) { return tri_shape(c, "tril"); }
luon_status lu_shape_triu(lu_call *c) { return tri_shape(c, "triu"); }

static luon_status tri_cpu(lu_call *c, bool lower) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  if (y->size == 0) return LUON_OK;
  size_t es = (size_t)luon_dtype_size(y->dtype);
  int64_t k = c->attrs->i[LU_TRI_K], R = y->shape[y->ndim - 2], Cn = y->shape[y->ndim - 1];
  void *tmp;
  const char *xd = dense_of(x, lower ? "tril" : "triu", &tmp);
  if (!xd) return LUON_ENOMEM;
  char *yd = lu_data(y);
  int64_t rows = y->size / Cn;
  for (int64_t r = 0; r < rows; r++) {
    int64_t i = r % R;
    const char *src = xd + (size_t)(x->ndim == 1 ? 0 : r * Cn) * es;
    char *dst = yd + (size_t)(r * Cn) * es;
    for (int64_t j = 0; j < Cn; j++) {
      bool keep = lower ? j - i <= k : j - i >= k;
      if (keep) memcpy(dst + (size_t)j * es, src + (size_t)j * es, es);
      else memset(dst + (size_t)j * es, 0, es);
    }
  }
  lu_scratch_free(tmp);
  return LUON_OK;
}
luon_status lu_cpu_tril(lu_call *c) { return tri_cpu(c, true); }
luon_status lu_cpu_triu(lu_call *c) { return tri_cpu(c, false); }

/* tril, triu: dx = the same mask of dy (summed over the rows for a 1-d x) */
static luon_status tri_grad(lu_grad_call *g, int32_t op) {
  luon_tensor *m;
  LU_TRY(lu_run(op, g->attrs, &m, 1, g->dout[0]));
  luon_status s = lu_reduce_sum_to(m, g->in[0]->ndim, g->in[0]->shape, 0, &g->din[0]);
  luon_tensor_release(m);
  return s;
}
luon_status lu_grad_tril(lu_grad_call *g) { return tri_grad(g, LU_OP_tril); }
luon_status lu_grad_triu(lu_grad_call *g) { return tri_grad(g, LU_OP_triu); }

/* ---- one_hot ------------------------------------------------------------------ */

/* Which of depth columns an index value v (read as a double) turns on:
 * v truncated toward zero, or -1 (none) when NaN or outside [0, depth). */
static int64_t hot_column(double v, int64_t depth) {
  if (!(v > -1.0 && v < (double)depth)) return -1;
  return (int64_t)v;
}

/* indices (any shape, any non-16-bit dtype) -> indices' shape + (DEPTH,) */
luon_status lu_shape_one_hot(lu_call *c) {
  const luon_tensor *idx = c->in[0];
  int64_t depth = c->attrs->i[LU_ONE_HOT_DEPTH];
  if (depth < 0 || depth > ((int64_t)1 << 40))
    return lu_error(LUON_EINVAL, "one_hot: depth must be >= 0, got %lld", (long long)depth);
  if (idx->ndim + 1 > LU_MAXD)
    return lu_error(LUON_ESHAPE, "one_hot: the result would have %d dimensions, at most %d are supported",
                    idx->ndim + 1, LU_MAXD);
  memcpy(c->out_shape[0], idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
  c->out_shape[0][idx->ndim] = depth;
  c->out_ndim[0] = idx->ndim + 1;
  c->out_dtype[0] = c->attrs->dtype ? c->attrs->dtype : LUON_DTYPE_F32;
  return LUON_OK;
}

luon_status lu_cpu_one_hot(lu_call *c) {
  const luon_tensor *idx = c->in[0];
  luon_tensor *y = c->out[0];
  if (y->size == 0) return LUON_OK;
  size_t es = (size_t)luon_dtype_size(y->dtype);
  int64_t depth = c->attrs->i[LU_ONE_HOT_DEPTH];
  char on[8], off[8];
  value_bytes(c->attrs->f[LU_ONE_HOT_ON], y->dtype, on);
  value_bytes(c->attrs->f[LU_ONE_HOT_OFF], y->dtype, off);
  void *tmp;
  const char *xd = dense_of(idx, "one_hot", &tmp);
  if (!xd) return LUON_ENOMEM;
  size_t xs = (size_t)luon_dtype_size(idx->dtype);
  char *yd = lu_data(y);
  for (int64_t i = 0; i < idx->size; i++) {
    double v;
    lu_convert(&v, LUON_DTYPE_F64, xd + (size_t)i * xs, idx->dtype, 1);
    int64_t hot = hot_column(v, depth);
    char *row = yd + (size_t)(i * depth) * es;
    for (int64_t j = 0; j < depth; j++) memcpy(row + (size_t)j * es, j == hot ? on : off, es);
  }
  lu_scratch_free(tmp);
  return LUON_OK;
}

/* ---- sequence_mask ----------------------------------------------------------- */

/* data (T, B, ...) (AXIS 0) or (B, T, ...) (AXIS 1), lengths (B,) -> data's
 * shape and dtype */
luon_status lu_shape_sequence_mask(lu_call *c) {
  const luon_tensor *x = c->in[0], *len = c->in[1];
  int64_t axis = c->attrs->i[LU_SEQMASK_AXIS];
  if (axis != 0 && axis != 1)
    return lu_error(LUON_EINVAL, "sequence_mask: axis must be 0 or 1 (the time axis), got %lld", (long long)axis);
  if (x->ndim < 2)
    return lu_error(LUON_ESHAPE, "sequence_mask: data must have at least 2 dimensions, got shape %s",
                    lu_shape_str(x->ndim, x->shape));
  int64_t batch = x->shape[1 - axis];
  if (len->ndim != 1 || len->shape[0] != batch)
    return lu_error(LUON_ESHAPE, "sequence_mask: sequence_length has shape %s but data %s has batch size %lld "
                    "(axis %lld is time); expected shape (%lld,)", lu_shape_str(len->ndim, len->shape),
                    lu_shape_str(x->ndim, x->shape), (long long)batch, (long long)axis, (long long)batch);
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_ndim[0] = x->ndim;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_sequence_mask(lu_call *c) {
  const luon_tensor *x = c->in[0], *len = c->in[1];
  luon_tensor *y = c->out[0];
  if (y->size == 0) return LUON_OK;
  lu_copy_cpu(y, x, false);
  size_t es = (size_t)luon_dtype_size(y->dtype);
  int axis = (int)c->attrs->i[LU_SEQMASK_AXIS];
  int64_t T = y->shape[axis], B = y->shape[1 - axis], inner = y->size / (T * B);
  char value[8];
  value_bytes(c->attrs->f[LU_SEQMASK_VALUE], y->dtype, value);
  const char *ld = lu_data(len);
  size_t ls = (size_t)luon_dtype_size(len->dtype);
  char *yd = lu_data(y);
  for (int64_t b = 0; b < B; b++) {
    int64_t n;
    lu_convert(&n, LUON_DTYPE_I64, ld + (size_t)(b * len->strides[0]) * ls, len->dtype, 1);
    for (int64_t t = n < 0 ? 0 : n; t < T; t++) {
      char *row = yd + (size_t)((axis == 0 ? t * B + b : b * T + t) * inner) * es;
      for (int64_t k = 0; k < inner; k++) memcpy(row + (size_t)k * es, value, es);
    }
  }
  return LUON_OK;
}

/* sequence_mask: dx = dy masked the same way with 0; the lengths get none */
luon_status lu_grad_sequence_mask(lu_grad_call *g) {
  if (!g->need[0]) return LUON_OK;
  luon_attrs a = *g->attrs;
  a.f[LU_SEQMASK_VALUE] = 0;
  return lu_run(LU_OP_sequence_mask, &a, &g->din[0], 2, g->dout[0], g->in[1]);
}
