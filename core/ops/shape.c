/* shape.c: ops that only change how a tensor's storage is seen (reshape,
 * transpose, expand_dims, squeeze, slice, broadcast_to, split). All are kind
 * VIEW: no data moves, except reshape of a layout that no strides can express. */
#include "steps.h"
#include <stdlib.h>

/* The single output of a view op: c->out_shape[0] (set by the shape
 * function) over the input's storage with the given strides and offset. */
static luon_status view_out(lu_call *c, const int64_t *strides, int64_t offset) {
  return lu_tensor_view(c->in[0], c->out_ndim[0], c->out_shape[0], strides, offset, &c->out[0]);
}

/* ---- reshape ------------------------------------------------------------ */

/* x (any) -> shape i[0..ni), one -1 inferred; sizes must agree. */
luon_status lu_shape_reshape(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  if (a->ni > LU_MAXD)
    return lu_error(LUON_ESHAPE, "reshape: shape %s has %d dimensions, at most %d are supported",
                    lu_shape_str(LU_MAXD, a->i), a->ni, LU_MAXD);
  int infer = -1;
  int64_t known = 1;
  for (int d = 0; d < a->ni; d++) {
    if (a->i[d] == -1) {
      if (infer >= 0)
        return lu_error(LUON_ESHAPE, "reshape: can only specify one unknown dimension, got shape %s",
                        lu_shape_str(a->ni, a->i));
      infer = d;
    } else if (a->i[d] < 0) {
      return lu_error(LUON_ESHAPE, "reshape: negative dimension %lld in shape %s",
                      (long long)a->i[d], lu_shape_str(a->ni, a->i));
    } else {
      if (a->i[d] > 0 && known > INT64_MAX / a->i[d]) known = -1; /* overflow: never matches */
      if (known >= 0) known *= a->i[d];
    }
  }
  int64_t *s = c->out_shape[0];
  for (int d = 0; d < a->ni; d++) s[d] = a->i[d];
  if (infer >= 0) {
    if (known <= 0 || x->size % known != 0)
      return lu_error(LUON_ESHAPE, "reshape: cannot reshape array of size %lld into shape %s",
                      (long long)x->size, lu_shape_str(a->ni, a->i));
    s[infer] = x->size / known;
  } else if (known != x->size) {
    return lu_error(LUON_ESHAPE, "reshape: cannot reshape array of size %lld into shape %s",
                    (long long)x->size, lu_shape_str(a->ni, a->i));
  }
  c->out_ndim[0] = a->ni;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

/* Strides that show x's elements, in row-major order, with shape (nd, ns);
 * false when no strides can (then reshape copies). Splits and merges runs of
 * axes that are contiguous with each other, as NumPy and PyTorch do. */
static bool view_strides(const luon_tensor *x, int nd, const int64_t *ns, int64_t *out) {
  if (x->size == 0 || x->ndim == 0 || lu_is_contiguous(x)) {
    lu_contiguous_strides(nd, ns, out);
    return true;
  }
  const int64_t *os = x->shape, *ost = x->strides;
  int vd = nd - 1;
  int64_t base = ost[x->ndim - 1], tn = 1, vn = 1;
  for (int td = x->ndim - 1; td >= 0; td--) {
    tn *= os[td];
    /* a chunk of old axes ends where the next one out is not contiguous with it */
    if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tn * base)) {
      while (vd >= 0 && (vn < tn || ns[vd] == 1)) {
        out[vd] = vn * base;
        vn *= ns[vd];
        vd--;
      }
      if (vn != tn) return false;
      if (td > 0) {
        base = ost[td - 1];
        tn = 1;
        vn = 1;
      }
    }
  }
  return vd == -1;
}

luon_status lu_cpu_reshape(lu_call *c) {
  int64_t st[LU_MAXD];
  if (view_strides(c->in[0], c->out_ndim[0], c->out_shape[0], st))
    return view_out(c, st, c->in[0]->offset);
  /* not expressible as a view: a contiguous copy, seen with the new shape */
  luon_tensor *x = c->in[0], *dense = NULL;
  int32_t nout = 1;
  LU_TRY(luon_op_call(LU_OP_copy, 1, &x, NULL, &nout, &dense));
  lu_contiguous_strides(c->out_ndim[0], c->out_shape[0], st);
  luon_status s = lu_tensor_view(dense, c->out_ndim[0], c->out_shape[0], st, dense->offset, &c->out[0]);
  luon_tensor_release(dense);
  return s;
}

/* ---- transpose ---------------------------------------------------------- */

/* x (d0..dn-1) -> (d[p0]..d[pn-1]); no axes: reversed. */
luon_status lu_shape_transpose(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int n = x->ndim;
  if (a->ni != 0 && a->ni != n)
    return lu_error(LUON_ESHAPE, "transpose: axes %s don't match array of dimension %d (shape %s)",
                    lu_shape_str(a->ni, a->i), n, lu_shape_str(n, x->shape));
  bool seen[LU_MAXD] = {false};
  for (int d = 0; d < n; d++) {
    int ax = n - 1 - d;
    if (a->ni) LU_TRY(lu_axis("transpose", a->i[d], n, &ax));
    if (seen[ax])
      return lu_error(LUON_ESHAPE, "transpose: repeated axis in axes %s", lu_shape_str(a->ni, a->i));
    seen[ax] = true;
    c->scratch_i[d] = ax;
    c->out_shape[0][d] = x->shape[ax];
  }
  c->out_ndim[0] = n;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_transpose(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int64_t st[LU_MAXD];
  for (int d = 0; d < x->ndim; d++) st[d] = x->strides[c->scratch_i[d]];
  return view_out(c, st, x->offset);
}

/* ---- expand_dims -------------------------------------------------------- */

/* x (d0..dn-1) -> a size-1 axis inserted at AXIS in [-n-1, n]. */
luon_status lu_shape_expand_dims(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int n = x->ndim;
  if (n + 1 > LU_MAXD)
    return lu_error(LUON_ESHAPE, "expand_dims: the result would have %d dimensions, at most %d are supported (shape %s)",
                    n + 1, LU_MAXD, lu_shape_str(n, x->shape));
  int ax;
  LU_TRY(lu_axis("expand_dims", c->attrs->i[LU_EXPAND_DIMS_AXIS], n + 1, &ax));
  c->scratch_i[0] = ax;
  for (int d = 0, k = 0; d <= n; d++) c->out_shape[0][d] = d == ax ? 1 : x->shape[k++];
  c->out_ndim[0] = n + 1;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_expand_dims(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int ax = (int)c->scratch_i[0];
  int64_t st[LU_MAXD];
  for (int d = 0, k = 0; d <= x->ndim; d++)
    st[d] = d == ax ? (ax < x->ndim ? x->strides[ax] * x->shape[ax] : 1) : x->strides[k++];
  return view_out(c, st, x->offset);
}

/* ---- squeeze ------------------------------------------------------------ */

/* x -> x without the size-1 axes i[AXES..ni) (none given: every size-1
 * axis). scratch_i[0] is a bit mask of the removed axes. */
luon_status lu_shape_squeeze(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  const int64_t *axes = a->i + LU_SQUEEZE_AXES;
  int n = x->ndim, naxes = a->ni - LU_SQUEEZE_AXES;
  int64_t mask = 0;
  if (naxes <= 0) {
    for (int d = 0; d < n; d++)
      if (x->shape[d] == 1) mask |= (int64_t)1 << d;
  }
  for (int k = 0; k < naxes; k++) {
    int ax;
    LU_TRY(lu_axis("squeeze", axes[k], n, &ax));
    if (mask & ((int64_t)1 << ax))
      return lu_error(LUON_ESHAPE, "squeeze: repeated axis %lld in axes %s", (long long)axes[k],
                      lu_shape_str(naxes, axes));
    if (x->shape[ax] != 1)
      return lu_error(LUON_ESHAPE, "squeeze: cannot select axis %lld, it has size %lld, not 1 (shape %s)",
                      (long long)axes[k], (long long)x->shape[ax], lu_shape_str(n, x->shape));
    mask |= (int64_t)1 << ax;
  }
  int m = 0;
  for (int d = 0; d < n; d++)
    if (!(mask & ((int64_t)1 << d))) c->out_shape[0][m++] = x->shape[d];
  c->scratch_i[0] = mask;
  c->out_ndim[0] = m;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_squeeze(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int64_t st[LU_MAXD];
  int m = 0;
  for (int d = 0; d < x->ndim; d++)
    if (!(c->scratch_i[0] & ((int64_t)1 << d))) st[m++] = x->strides[d];
  return view_out(c, st, x->offset);
}

/* ---- slice -------------------------------------------------------------- */

/* Python's slice.indices(len): clamp begin/end (INT64_MIN: omitted) for
 * `step`; the number of elements taken is returned. */
static int64_t slice_range(int64_t len, int64_t *begin, int64_t end, int64_t step) {
  int64_t b = *begin, e = end;
  if (b == INT64_MIN) {
    b = step > 0 ? 0 : len - 1;
  } else if (b < 0) {
    b += len;
    if (b < 0) b = step > 0 ? 0 : -1;
  } else if (b >= len) {
    b = step > 0 ? len : len - 1;
  }
  if (e == INT64_MIN) {
    e = step > 0 ? len : -1;
  } else if (e < 0) {
    e += len;
    if (e < 0) e = step > 0 ? 0 : -1;
  } else if (e >= len) {
    e = step > 0 ? len : len - 1;
  }
  *begin = b;
  if (step > 0) return b < e ? (e - b - 1) / step + 1 : 0;
  return e < b ? (b - e - 1) / (-step) + 1 : 0;
}

/* x -> x[b0:e0:s0, b1:e1:s1, ...] for the first ni/3 axes (a triple of
 * slots BEGIN, END, STEP each); the rest whole.
 * scratch_i[d] keeps each sliced axis's clamped begin. */
luon_status lu_shape_slice(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int n = x->ndim, k = a->ni / LU_NI_slice;
  if (a->ni % LU_NI_slice != 0)
    return lu_error(LUON_EINVAL, "slice: %d integers given, expected (begin, end, step) triples", a->ni);
  if (k > n)
    return lu_error(LUON_ESHAPE, "slice: %d axes sliced but the array has %d dimensions (shape %s)", k, n,
                    lu_shape_str(n, x->shape));
  for (int d = 0; d < n; d++) {
    c->out_shape[0][d] = x->shape[d];
    if (d >= k) continue;
    const int64_t *t = a->i + LU_NI_slice * d;
    int64_t b = t[LU_SLICE_BEGIN], e = t[LU_SLICE_END], step = t[LU_SLICE_STEP];
    if (step == INT64_MIN) step = 1;
    if (step == 0) return lu_error(LUON_EINVAL, "slice: step cannot be zero (axis %d)", d);
    c->out_shape[0][d] = slice_range(x->shape[d], &b, e, step);
    c->scratch_i[d] = b;
  }
  c->out_ndim[0] = n;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_slice(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int64_t st[LU_MAXD], off = x->offset;
  bool empty = false;
  for (int d = 0; d < x->ndim; d++) {
    st[d] = x->strides[d];
    if (d < a->ni / LU_NI_slice) {
      int64_t step = a->i[LU_NI_slice * d + LU_SLICE_STEP];
      if (step == INT64_MIN) step = 1;
      if (c->out_shape[0][d] > 1) st[d] *= step; /* |step| < len here: no overflow */
      if (c->out_shape[0][d] > 0) off += c->scratch_i[d] * x->strides[d];
    }
    if (c->out_shape[0][d] == 0) empty = true;
  }
  return view_out(c, st, empty ? x->offset : off);
}

/* ---- broadcast_to ------------------------------------------------------- */

/* x -> shape i[0..ni) by NumPy rules: stride 0 along the repeated axes. */
luon_status lu_shape_broadcast_to(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int n = a->ni, lead = n - x->ndim;
  if (n > LU_MAXD)
    return lu_error(LUON_ESHAPE, "broadcast_to: shape %s has %d dimensions, at most %d are supported",
                    lu_shape_str(LU_MAXD, a->i), n, LU_MAXD);
  bool ok = lead >= 0;
  for (int d = 0; d < n && ok; d++) {
    if (a->i[d] < 0)
      return lu_error(LUON_ESHAPE, "broadcast_to: negative dimension %lld in shape %s",
                      (long long)a->i[d], lu_shape_str(n, a->i));
    if (d >= lead && x->shape[d - lead] != 1 && x->shape[d - lead] != a->i[d]) ok = false;
    c->out_shape[0][d] = a->i[d];
  }
  if (!ok)
    return lu_error(LUON_ESHAPE, "broadcast_to: cannot broadcast an array of shape %s to shape %s",
                    lu_shape_str(x->ndim, x->shape), lu_shape_str(n, a->i));
  c->out_ndim[0] = n;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_broadcast_to(lu_call *c) {
  int64_t st[LU_MAXD];
  lu_broadcast_strides(c->in[0], c->out_ndim[0], c->out_shape[0], st);
  return view_out(c, st, c->in[0]->offset);
}

/* ---- split -------------------------------------------------------------- */

/* x -> a piece more than the boundaries b = i[BOUNDS..ni) along AXIS, as
 * numpy.split(x, b, axis): piece k is x[.., b[k-1]:b[k], ..]. */
luon_status lu_shape_split(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int ax, pieces = a->ni > LU_SPLIT_BOUNDS ? a->ni - LU_SPLIT_BOUNDS + 1 : 1;
  if (x->ndim == 0) return lu_error(LUON_ESHAPE, "split: cannot split a 0-dimensional array");
  LU_TRY(lu_axis("split", a->i[LU_SPLIT_AXIS], x->ndim, &ax));
  if (pieces > LUON_MAX_OP_INPUTS)
    return lu_error(LUON_EUNSUPPORTED, "split: %d pieces asked, at most %d are supported", pieces,
                    LUON_MAX_OP_INPUTS);
  c->nout = pieces;
  c->scratch_i[0] = ax;
  return LUON_OK;
}

luon_status lu_cpu_split(lu_call *c) {
  luon_tensor *x = c->in[0];
  const int64_t *bounds = c->attrs->i + LU_SPLIT_BOUNDS;
  int ax = (int)c->scratch_i[0];
  int64_t len = x->shape[ax], shape[LU_MAXD];
  memcpy(shape, x->shape, sizeof shape);
  for (int k = 0; k < c->nout; k++) {
    int64_t b = k == 0 ? 0 : bounds[k - 1], e = k + 1 < c->nout ? bounds[k] : INT64_MAX;
    shape[ax] = slice_range(len, &b, e, 1);
    int64_t off = x->offset + (shape[ax] > 0 ? b * x->strides[ax] : 0);
    LU_TRY(lu_tensor_view(x, x->ndim, shape, x->strides, off, &c->out[k]));
  }
  return LUON_OK;
}

/* ---- backward rules ------------------------------------------------------ */

/* dy seen with x's shape (a view when strides allow). */
static luon_status reshape_like(luon_tensor *dy, const luon_tensor *x, luon_tensor **out) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = x->ndim;
  memcpy(a.i, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return lu_run(LU_OP_reshape, &a, out, 1, dy);
}

/* Zeros of (ndim, shape) with dy's dtype on dy's device. */
static luon_status zeros(const luon_tensor *dy, int ndim, const int64_t *shape, luon_tensor **out) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dtype = dy->dtype;
  a.dev_type = dy->dev.type;
  a.dev_id = dy->dev.id;
  a.ni = LU_FULL_SHAPE + ndim;
  memcpy(a.i + LU_FULL_SHAPE, shape, sizeof(int64_t) * (size_t)ndim);
  return lu_run(LU_OP_full, &a, out, 0);
}

/* reshape, expand_dims, squeeze: dx = dy reshaped back to x's shape */
luon_status lu_grad_reshape(lu_grad_call *g) { return reshape_like(g->dout[0], g->in[0], &g->din[0]); }
luon_status lu_grad_expand_dims(lu_grad_call *g) { return reshape_like(g->dout[0], g->in[0], &g->din[0]); }
luon_status lu_grad_squeeze(lu_grad_call *g) { return reshape_like(g->dout[0], g->in[0], &g->din[0]); }

/* transpose by p: dx = dy transposed by the inverse permutation */
luon_status lu_grad_transpose(lu_grad_call *g) {
  int n = g->in[0]->ndim;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = n;
  for (int d = 0; d < n; d++) {
    int64_t p = g->attrs->ni ? g->attrs->i[d] : n - 1 - d;
    a.i[p < 0 ? p + n : p] = d;
  }
  return lu_run(LU_OP_transpose, &a, &g->din[0], 1, g->dout[0]);
}

/* broadcast_to: dx = dy summed over the new leading axes and the axes where
 * x had size 1, then seen with x's shape */
luon_status lu_grad_broadcast_to(lu_grad_call *g) {
  return lu_reduce_sum_to(g->dout[0], g->in[0]->ndim, g->in[0]->shape, 0, &g->din[0]);
}

/* slice with steps of 1 under create_graph: dx = dy padded with zeros to
 * x's shape (pad, recorded, whose own gradient is this slice again) */
static luon_status grad_slice_padded(lu_grad_call *g) {
  const luon_tensor *x = g->in[0], *dy = g->dout[0];
  const luon_attrs *sa = g->attrs;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.i[LU_PAD_MODE] = LU_PAD_CONSTANT;
  a.ni = LU_PAD_WIDTHS + 2 * x->ndim;
  for (int d = 0; d < x->ndim; d++) {
    int64_t b = 0;
    if (d < sa->ni / LU_NI_slice) {
      const int64_t *t = sa->i + LU_NI_slice * d;
      int64_t step = t[LU_SLICE_STEP] == INT64_MIN ? 1 : t[LU_SLICE_STEP];
      if (step != 1)
        return lu_error(LUON_EGRAD, "backward: 'slice' with a step (%lld on axis %d) is not twice "
                        "differentiable in luon", (long long)step, d);
      b = t[LU_SLICE_BEGIN];
      slice_range(x->shape[d], &b, t[LU_SLICE_END], 1);
    }
    a.i[LU_PAD_WIDTHS + 2 * d] = b;
    a.i[LU_PAD_WIDTHS + 2 * d + 1] = x->shape[d] - b - dy->shape[d];
  }
  return lu_run(LU_OP_pad, &a, &g->din[0], 1, dy);
}

/* slice: dx = zeros of x's shape with dy written into the same slice (the
 * copy is not recorded: under create_graph, with a recorded dy, padded) */
luon_status lu_grad_slice(lu_grad_call *g) {
  const luon_tensor *x = g->in[0];
  if (lu_recording && g->dout[0]->node) return grad_slice_padded(g);
  luon_tensor *dx, *part;
  LU_TRY(zeros(g->dout[0], x->ndim, x->shape, &dx));
  luon_status s = lu_run(LU_OP_slice, g->attrs, &part, 1, dx);
  if (s == LUON_OK) {
    s = luon_tensor_copy(part, g->dout[0]);
    luon_tensor_release(part);
  }
  if (s != LUON_OK) {
    luon_tensor_release(dx);
    return s;
  }
  g->din[0] = dx;
  return LUON_OK;
}

/* split: dx = the pieces' gradients joined along the axis (zeros for a
 * piece that got none) */
luon_status lu_grad_split(lu_grad_call *g) {
  luon_tensor *parts[LUON_MAX_OP_INPUTS] = {NULL};
  luon_tensor *dy0 = NULL;
  for (int k = 0; k < g->nout && !dy0; k++) dy0 = g->dout[k];
  luon_status s = LUON_OK;
  for (int k = 0; k < g->nout && s == LUON_OK; k++)
    s = g->dout[k] ? (parts[k] = luon_tensor_retain(g->dout[k]), LUON_OK)
                   : zeros(dy0, g->out[k]->ndim, g->out[k]->shape, &parts[k]);
  if (s == LUON_OK) {
    luon_attrs a;
    memset(&a, 0, sizeof a);
    a.i[LU_CONCAT_AXIS] = g->attrs->i[LU_SPLIT_AXIS];
    a.ni = LU_NI_concatenate;
    int32_t nout = 1;
    g->din[0] = NULL;
    s = luon_op_call(LU_OP_concatenate, g->nout, parts, &a, &nout, &g->din[0]);
  }
  for (int k = 0; k < g->nout; k++) luon_tensor_release(parts[k]);
  return s;
}
