/* index.c: ops that gather or join whole slices of their inputs (take,
 * concatenate, stack). Any strides in and out; concatenate and stack promote
 * dtypes and copy each input into its slab of the result with the copy op. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>

#define TAKE_FLAT (-999)

/* Element offset of row-major element j of (ndim, shape, strides). */
static int64_t unravel(int ndim, const int64_t *shape, const int64_t *strides, int64_t j) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0 && j; d--) {
    off += (j % shape[d]) * strides[d];
    j /= shape[d];
  }
  return off;
}

/* Offsets of every row-major position of axes [d0, d1) of (shape, strides). */
static int64_t *offsets(const int64_t *shape, const int64_t *strides, int d0, int d1, int64_t *n) {
  *n = lu_numel(d1 - d0, shape + d0);
  int64_t *o = malloc(sizeof(int64_t) * (size_t)(*n > 0 ? *n : 1));
  if (o)
    for (int64_t j = 0; j < *n; j++) o[j] = unravel(d1 - d0, shape + d0, strides + d0, j);
  return o;
}

/* ---- take --------------------------------------------------------------- */

/* a (d0..dn-1), indices (m0..mk-1), axis -> (d0..d[axis-1], m0..mk-1, d[axis+1]..dn-1);
 * axis -999: a flattened, result (m0..mk-1). scratch_i[0] = axis (-1: flattened). */
luon_status lu_shape_take(lu_call *c) {
  const luon_tensor *x = c->in[0], *idx = c->in[1];
  int64_t axis = c->attrs->i[LU_TAKE_AXIS], mode = c->attrs->i[LU_TAKE_MODE];
  if (mode < 0 || mode > 2)
    return lu_error(LUON_EINVAL, "take: mode %lld is not 0 (clip), 1 (wrap) or 2 (raise)", (long long)mode);
  int ax = -1, n = 0;
  int64_t len = x->size;
  if (axis != TAKE_FLAT) {
    LU_TRY(lu_axis("take", axis, x->ndim, &ax));
    len = x->shape[ax];
  }
  int nd = ax < 0 ? idx->ndim : x->ndim - 1 + idx->ndim;
  if (nd > LU_MAXD)
    return lu_error(LUON_ESHAPE, "take: the result would have %d dimensions, at most %d are supported "
                    "(a %s, indices %s)", nd, LU_MAXD, lu_shape_str(x->ndim, x->shape),
                    lu_shape_str(idx->ndim, idx->shape));
  if (len == 0 && idx->size > 0)
    return lu_error(LUON_ESHAPE, "take: cannot do a non-empty take from an empty axis (a %s, axis %lld)",
                    lu_shape_str(x->ndim, x->shape), (long long)axis);
  for (int d = 0; d < ax; d++) c->out_shape[0][n++] = x->shape[d];
  for (int d = 0; d < idx->ndim; d++) c->out_shape[0][n++] = idx->shape[d];
  for (int d = ax + 1; ax >= 0 && d < x->ndim; d++) c->out_shape[0][n++] = x->shape[d];
  c->out_ndim[0] = nd;
  c->out_dtype[0] = x->dtype;
  c->scratch_i[0] = ax;
  return LUON_OK;
}

typedef struct take_ctx {
  const char *src;
  char *dst;
  size_t esize;
  int64_t nidx, ninner;
  const int64_t *src_outer, *src_idx, *src_inner; /* element offsets into a */
  const int64_t *dst_outer, *dst_idx, *dst_inner; /* element offsets into the result */
} take_ctx;

/* rows r = (outer o, index j) over [begin, end), ninner elements each */
static void take_rows(void *p, int64_t begin, int64_t end) {
  const take_ctx *t = p;
  size_t es = t->esize;
  for (int64_t r = begin; r < end; r++) {
    int64_t o = r / t->nidx, j = r % t->nidx;
    const char *s = t->src + (t->src_outer[o] + t->src_idx[j]) * (int64_t)es;
    char *d = t->dst + (t->dst_outer[o] + t->dst_idx[j]) * (int64_t)es;
    for (int64_t k = 0; k < t->ninner; k++)
      memcpy(d + t->dst_inner[k] * (int64_t)es, s + t->src_inner[k] * (int64_t)es, es);
  }
}

/* The indices as int64 in row-major order (floats truncate), resolved by
 * mode against len; error naming the first bad one in raise mode. */
static luon_status read_indices(const luon_tensor *idx, int64_t mode, int64_t len, int ax,
                                int64_t *out) {
  int32_t dt = idx->dtype;
  size_t es = (size_t)luon_dtype_size(dt);
  const char *base = lu_data(idx);
  for (int64_t j = 0; j < idx->size; j++) {
    int64_t off = unravel(idx->ndim, idx->shape, idx->strides, j);
    lu_convert(&out[j], LUON_DTYPE_I64, base + off * (int64_t)es, dt, 1);
    int64_t v = out[j];
    if (mode == 0) {
      v = v < 0 ? 0 : v >= len ? len - 1 : v;
    } else if (mode == 1) {
      v %= len;
      if (v < 0) v += len;
    } else {
      double d = 0; /* a float index as given (NaN, inf, 1e30), not as converted */
      if (lu_dtype_is_float(dt)) lu_convert(&d, LUON_DTYPE_F64, base + off * (int64_t)es, dt, 1);
      if (v < -len || v >= len || d != d) {
        char shown[40];
        if (d != d) snprintf(shown, sizeof shown, "NaN");
        else if (lu_dtype_is_float(dt)) snprintf(shown, sizeof shown, "%g", d);
        else snprintf(shown, sizeof shown, "%lld", (long long)v);
        if (ax < 0) return lu_error(LUON_EINVAL, "take: index %s is out of bounds for size %lld", shown, (long long)len);
        return lu_error(LUON_EINVAL, "take: index %s is out of bounds for axis %d with size %lld", shown, ax,
                        (long long)len);
      }
      if (v < 0) v += len;
    }
    out[j] = v;
  }
  return LUON_OK;
}

luon_status lu_cpu_take(lu_call *c) {
  const luon_tensor *x = c->in[0], *idx = c->in[1];
  luon_tensor *y = c->out[0];
  if (y->size == 0) return LUON_OK;
  int ax = (int)c->scratch_i[0], k = idx->ndim, a0 = ax < 0 ? 0 : ax;
  int64_t len = ax < 0 ? x->size : x->shape[ax];
  int64_t n_outer = 1, n_inner = 1, unused, zero = 0;
  int64_t *ii = malloc(sizeof(int64_t) * (size_t)idx->size);
  int64_t *dx = offsets(y->shape, y->strides, a0, a0 + k, &unused);
  int64_t *so = NULL, *si = NULL, *do_ = NULL, *di = NULL;
  if (ax >= 0) { /* outer and inner axes of a and of the result */
    so = offsets(x->shape, x->strides, 0, ax, &n_outer);
    si = offsets(x->shape, x->strides, ax + 1, x->ndim, &n_inner);
    do_ = offsets(y->shape, y->strides, 0, ax, &unused);
    di = offsets(y->shape, y->strides, ax + k, y->ndim, &unused);
  }
  luon_status s = LUON_OK;
  if (!ii || !dx || (ax >= 0 && (!so || !si || !do_ || !di)))
    s = lu_error(LUON_ENOMEM, "take: out of host memory for the offsets of %lld indices",
                 (long long)idx->size);
  if (s == LUON_OK) s = read_indices(idx, c->attrs->i[LU_TAKE_MODE], len, ax, ii);
  if (s == LUON_OK) {
    for (int64_t j = 0; j < idx->size; j++) /* index -> element offset into a */
      ii[j] = ax < 0 ? unravel(x->ndim, x->shape, x->strides, ii[j]) : ii[j] * x->strides[ax];
    take_ctx t = {lu_data(x), lu_data(y), (size_t)luon_dtype_size(x->dtype), idx->size, n_inner,
                  so ? so : &zero, ii, si ? si : &zero, do_ ? do_ : &zero, dx, di ? di : &zero};
    lu_parallel_for(n_outer * idx->size, (1 << 15) / n_inner + 1, take_rows, &t);
  }
  free(ii);
  free(dx);
  free(so);
  free(si);
  free(do_);
  free(di);
  return s;
}

/* ---- take_grad -------------------------------------------------------------- */

/* dy (the shape take gave), indices -> da (a's shape, after take's slots and its ndim): zeros
 * with each slice of dy added at the position its index picked, mapped by
 * take's mode; repeated indices add up. dy float32 or float64. */
luon_status lu_shape_take_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0], *idx = c->in[1];
  const luon_attrs *a = c->attrs;
  int nd = a->ni > LU_TAKE_GRAD_NDIM ? (int)a->i[LU_TAKE_GRAD_NDIM] : -1;
  if (nd < 0 || nd > LU_MAXD || a->ni != LU_NI_take_grad + nd)
    return lu_error(LUON_EINVAL, "take_grad: attrs must hold axis, mode, ndim and the shape of a "
                    "(0 to %d dims), got %d ints", LU_MAXD, a->ni);
  const int64_t *as = a->i + LU_NI_take_grad;
  for (int d = 0; d < nd; d++)
    if (as[d] < 0)
      return lu_error(LUON_ESHAPE, "take_grad: negative dimension in shape %s",
                      lu_shape_str(nd, as));
  if (dy->dtype != LUON_DTYPE_F32 && dy->dtype != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "take_grad: dy is %s; only float32 and float64 are supported",
                    luon_dtype_name(dy->dtype));
  if (a->i[LU_TAKE_MODE] < 0 || a->i[LU_TAKE_MODE] > 2)
    return lu_error(LUON_EINVAL, "take_grad: mode %lld is not 0 (clip), 1 (wrap) or 2 (raise)",
                    (long long)a->i[LU_TAKE_MODE]);
  int ax = -1, n = 0;
  if (a->i[LU_TAKE_AXIS] != TAKE_FLAT) LU_TRY(lu_axis("take_grad", a->i[LU_TAKE_AXIS], nd, &ax));
  if ((ax < 0 ? lu_numel(nd, as) : as[ax]) == 0 && idx->size > 0)
    return lu_error(LUON_ESHAPE, "take_grad: indices %s into an empty axis (a %s)",
                    lu_shape_str(idx->ndim, idx->shape), lu_shape_str(nd, as));
  int64_t want[LU_MAXD];
  for (int d = 0; d < ax; d++) want[n++] = as[d];
  for (int d = 0; d < idx->ndim && n < LU_MAXD; d++) want[n++] = idx->shape[d];
  for (int d = ax + 1; ax >= 0 && d < nd && n < LU_MAXD; d++) want[n++] = as[d];
  if (n != dy->ndim || memcmp(want, dy->shape, sizeof(int64_t) * (size_t)n) != 0)
    return lu_error(LUON_ESHAPE,
                    "take_grad: dy has shape %s but take of a %s with indices %s gives %s",
                    lu_shape_str(dy->ndim, dy->shape), lu_shape_str(nd, as),
                    lu_shape_str(idx->ndim, idx->shape), lu_shape_str(n, want));
  c->out_ndim[0] = nd;
  memcpy(c->out_shape[0], as, sizeof(int64_t) * (size_t)nd);
  c->out_dtype[0] = dy->dtype;
  c->scratch_i[0] = ax;
  return LUON_OK;
}

/* Outer rows [begin, end): each adds all of its dy slices into its own
 * part of da, so threads never write the same element. */
#define SCATTER_ADD(T)                                                         \
  for (int64_t o = begin; o < end; o++)                                        \
    for (int64_t j = 0; j < t->nidx; j++) {                                    \
      const T *s = (const T *)t->src + t->src_outer[o] + t->src_idx[j];        \
      T *d = (T *)t->dst + t->dst_outer[o] + t->dst_idx[j];                    \
      for (int64_t k = 0; k < t->ninner; k++) d[t->dst_inner[k]] += s[t->src_inner[k]]; \
    }

static void scatter_add_rows(void *p, int64_t begin, int64_t end) {
  const take_ctx *t = p;
  if (t->esize == sizeof(float)) { SCATTER_ADD(float) }
  else { SCATTER_ADD(double) }
}

luon_status lu_cpu_take_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0], *idx = c->in[1];
  luon_tensor *da = c->out[0];
  if (da->size > 0) memset(lu_data(da), 0, (size_t)(da->size * luon_dtype_size(da->dtype)));
  if (dy->size == 0) return LUON_OK;
  int ax = (int)c->scratch_i[0], k = idx->ndim, a0 = ax < 0 ? 0 : ax, nd = da->ndim;
  int64_t len = ax < 0 ? da->size : da->shape[ax];
  int64_t n_outer = 1, n_inner = 1, unused, zero = 0, ast[LU_MAXD];
  lu_contiguous_strides(nd, da->shape, ast); /* da is dense */
  int64_t *ii = malloc(sizeof(int64_t) * (size_t)idx->size);
  int64_t *sx = offsets(dy->shape, dy->strides, a0, a0 + k, &unused);
  int64_t *so = NULL, *si = NULL, *do_ = NULL, *di = NULL;
  if (ax >= 0) { /* outer and inner axes of dy and of da */
    so = offsets(dy->shape, dy->strides, 0, ax, &n_outer);
    si = offsets(dy->shape, dy->strides, ax + k, dy->ndim, &n_inner);
    do_ = offsets(da->shape, ast, 0, ax, &unused);
    di = offsets(da->shape, ast, ax + 1, nd, &unused);
  }
  luon_status s = LUON_OK;
  if (!ii || !sx || (ax >= 0 && (!so || !si || !do_ || !di)))
    s = lu_error(LUON_ENOMEM, "take_grad: out of host memory for the offsets of %lld indices",
                 (long long)idx->size);
  if (s == LUON_OK) s = read_indices(idx, c->attrs->i[LU_TAKE_MODE], len, ax, ii);
  if (s == LUON_OK) {
    for (int64_t j = 0; j < idx->size; j++) /* index -> element offset into da */
      ii[j] = ax < 0 ? ii[j] : ii[j] * ast[ax];
    take_ctx t = {lu_data(dy), lu_data(da), (size_t)luon_dtype_size(dy->dtype), idx->size, n_inner,
                  so ? so : &zero, sx, si ? si : &zero, do_ ? do_ : &zero, ii, di ? di : &zero};
    lu_parallel_for(n_outer, (1 << 15) / (n_inner * idx->size) + 1, scatter_add_rows, &t);
  }
  free(ii);
  free(sx);
  free(so);
  free(si);
  free(do_);
  free(di);
  return s;
}

/* ---- concatenate and stack ---------------------------------------------- */

/* The common dtype of all inputs. */
static int32_t promote_all(const lu_call *c) {
  int32_t dt = c->in[0]->dtype;
  for (int k = 1; k < c->nin; k++) dt = lu_dtype_promote(dt, c->in[k]->dtype);
  return dt;
}

/* x1..xn, same shape except along axis -> joined along axis. */
luon_status lu_shape_concatenate(lu_call *c) {
  const luon_tensor *x0 = c->in[0];
  int n = x0->ndim, ax;
  if (n == 0) return lu_error(LUON_ESHAPE, "concatenate: zero-dimensional arrays cannot be concatenated");
  LU_TRY(lu_axis("concatenate", c->attrs->i[LU_CONCAT_AXIS], n, &ax));
  int64_t total = 0;
  for (int k = 0; k < c->nin; k++) {
    const luon_tensor *x = c->in[k];
    if (x->ndim != n)
      return lu_error(LUON_ESHAPE, "concatenate: all the input arrays must have the same number of dimensions, "
                      "but input 1 has shape %s and input %d has shape %s",
                      lu_shape_str(n, x0->shape), k + 1, lu_shape_str(x->ndim, x->shape));
    for (int d = 0; d < n; d++)
      if (d != ax && x->shape[d] != x0->shape[d])
        return lu_error(LUON_ESHAPE, "concatenate: input %d has shape %s but input 1 has shape %s; "
                        "they must match except along axis %d", k + 1, lu_shape_str(n, x->shape),
                        lu_shape_str(n, x0->shape), ax);
    total += x->shape[ax];
  }
  memcpy(c->out_shape[0], x0->shape, sizeof(int64_t) * (size_t)n);
  c->out_shape[0][ax] = total;
  c->out_ndim[0] = n;
  c->out_dtype[0] = promote_all(c);
  c->scratch_i[0] = ax;
  return LUON_OK;
}

luon_status lu_cpu_concatenate(lu_call *c) {
  luon_tensor *y = c->out[0];
  int ax = (int)c->scratch_i[0];
  int64_t pos = 0;
  for (int k = 0; k < c->nin; k++) {
    const luon_tensor *x = c->in[k];
    if (x->size > 0) {
      luon_tensor *slab;
      LU_TRY(lu_tensor_view(y, y->ndim, x->shape, y->strides, y->offset + pos * y->strides[ax], &slab));
      luon_status s = luon_tensor_copy(slab, x);
      luon_tensor_release(slab);
      LU_TRY(s);
    }
    pos += x->shape[ax];
  }
  return LUON_OK;
}

/* x1..xn, all (d0..dm-1) -> a new axis of size n at axis in [-m-1, m]. */
luon_status lu_shape_stack(lu_call *c) {
  const luon_tensor *x0 = c->in[0];
  int n = x0->ndim, ax;
  for (int k = 1; k < c->nin; k++) {
    const luon_tensor *x = c->in[k];
    if (x->ndim != n || memcmp(x->shape, x0->shape, sizeof(int64_t) * (size_t)n) != 0)
      return lu_error(LUON_ESHAPE, "stack: all input arrays must have the same shape, but input 1 has "
                      "shape %s and input %d has shape %s", lu_shape_str(n, x0->shape), k + 1,
                      lu_shape_str(x->ndim, x->shape));
  }
  if (n + 1 > LU_MAXD)
    return lu_error(LUON_ESHAPE, "stack: the result would have %d dimensions, at most %d are supported",
                    n + 1, LU_MAXD);
  LU_TRY(lu_axis("stack", c->attrs->i[LU_STACK_AXIS], n + 1, &ax));
  for (int d = 0, j = 0; d <= n; d++) c->out_shape[0][d] = d == ax ? c->nin : x0->shape[j++];
  c->out_ndim[0] = n + 1;
  c->out_dtype[0] = promote_all(c);
  c->scratch_i[0] = ax;
  return LUON_OK;
}

luon_status lu_cpu_stack(lu_call *c) {
  luon_tensor *y = c->out[0];
  int ax = (int)c->scratch_i[0];
  int64_t st[LU_MAXD];
  for (int d = 0, j = 0; d < y->ndim; d++)
    if (d != ax) st[j++] = y->strides[d];
  for (int k = 0; k < c->nin; k++) {
    const luon_tensor *x = c->in[k];
    if (x->size == 0) continue;
    luon_tensor *slab;
    LU_TRY(lu_tensor_view(y, x->ndim, x->shape, st, y->offset + k * y->strides[ax], &slab));
    luon_status s = luon_tensor_copy(slab, x);
    luon_tensor_release(slab);
    LU_TRY(s);
  }
  return LUON_OK;
}

/* ---- backward rules ------------------------------------------------------ */

/* dy[..., b:e, ...] along axis ax (a view, +1 in *out). */
static luon_status slab(luon_tensor *dy, int ax, int64_t b, int64_t e, luon_tensor **out) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  for (int d = 0; d <= ax; d++) {
    int64_t *t = a.i + LU_NI_slice * d;
    t[LU_SLICE_BEGIN] = d == ax ? b : INT64_MIN;
    t[LU_SLICE_END] = d == ax ? e : INT64_MIN;
    t[LU_SLICE_STEP] = 1;
  }
  a.ni = LU_NI_slice * (ax + 1);
  return lu_run(LU_OP_slice, &a, out, 1, dy);
}

/* concatenate: dx_k = the slab of dy that x_k filled */
luon_status lu_grad_concatenate(lu_grad_call *g) {
  int ax;
  LU_TRY(lu_axis("concatenate", g->attrs->i[LU_CONCAT_AXIS], g->in[0]->ndim, &ax));
  int64_t pos = 0;
  for (int k = 0; k < g->nin; k++) {
    int64_t len = g->in[k]->shape[ax];
    if (g->need[k]) LU_TRY(slab(g->dout[0], ax, pos, pos + len, &g->din[k]));
    pos += len;
  }
  return LUON_OK;
}

/* stack: dx_k = dy at index k of the new axis */
luon_status lu_grad_stack(lu_grad_call *g) {
  int ax;
  LU_TRY(lu_axis("stack", g->attrs->i[LU_STACK_AXIS], g->in[0]->ndim + 1, &ax));
  for (int k = 0; k < g->nin; k++) {
    if (!g->need[k]) continue;
    luon_tensor *s;
    LU_TRY(slab(g->dout[0], ax, k, k + 1, &s));
    luon_attrs a;
    memset(&a, 0, sizeof a);
    a.i[LU_SQUEEZE_AXES] = ax;
    a.ni = LU_SQUEEZE_AXES + 1;
    luon_status st = lu_run(LU_OP_squeeze, &a, &g->din[k], 1, s);
    luon_tensor_release(s);
    LU_TRY(st);
  }
  return LUON_OK;
}

/* take: da = take_grad(dy, indices): dy added back at the picked positions
 * (take's attrs plus a's shape); the indices get no gradient */
luon_status lu_grad_take(lu_grad_call *g) {
  const luon_tensor *x = g->in[0];
  if (!g->need[0] || !g->dout[0] || !lu_dtype_is_float(x->dtype)) return LUON_OK;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.i[LU_TAKE_AXIS] = g->attrs->ni > LU_TAKE_AXIS ? g->attrs->i[LU_TAKE_AXIS] : 0;
  a.i[LU_TAKE_MODE] = g->attrs->ni > LU_TAKE_MODE ? g->attrs->i[LU_TAKE_MODE] : 0;
  a.i[LU_TAKE_GRAD_NDIM] = x->ndim;
  memcpy(a.i + LU_NI_take_grad, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  a.ni = LU_NI_take_grad + x->ndim;
  luon_tensor *dy = g->dout[0], *conv = NULL;
  if (dy->dtype != x->dtype) { /* take keeps a's dtype, so dy should have it */
    luon_attrs cv;
    memset(&cv, 0, sizeof cv);
    cv.dtype = x->dtype;
    LU_TRY(lu_run(LU_OP_copy, &cv, &conv, 1, dy));
    dy = conv;
  }
  luon_status s = lu_run(LU_OP_take_grad, &a, &g->din[0], 2, dy, g->in[1]);
  luon_tensor_release(conv);
  return s;
}
