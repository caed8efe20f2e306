/* scan.c: cumsum and cumprod, running sums and products along one axis of an
 * N-d array of any strides, and their backward rules. Not here: reductions
 * (reduce.c).   y[.., j, ..] = x[.., 0, ..] (+ or *) ... x[.., j, ..] along AXIS. */
#include "steps.h"
#include <stdlib.h>

/* ---- shape ---------------------------------------------------------------- */

static int64_t axis_attr(const lu_call *c) { return c->attrs->ni > LU_SCAN_AXIS ? c->attrs->i[LU_SCAN_AXIS] : 0; }
static bool reverse_attr(const luon_attrs *a) { return a->ni > LU_SCAN_REVERSE && a->i[LU_SCAN_REVERSE] != 0; }

/* x (..., n, ...) -> y of x's shape; dtype attrs.dtype, else x's (bool: float32) */
static luon_status scan_shape(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const char *name = luon_op_name(c->op);
  int ax;
  LU_TRY(lu_axis(name, axis_attr(c), x->ndim, &ax));
  int32_t odt = c->attrs->dtype ? c->attrs->dtype : x->dtype == LUON_DTYPE_BOOL ? LUON_DTYPE_F32 : x->dtype;
  if (odt == LUON_DTYPE_BOOL)
    return lu_error(LUON_EDTYPE, "%s: the result cannot be bool; give an integer or float dtype", name);
  c->nout = 1;
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_dtype[0] = odt;
  c->scratch_i[0] = ax;
  return LUON_OK;
}

luon_status lu_shape_cumsum(lu_call *c) { return scan_shape(c); }
luon_status lu_shape_cumprod(lu_call *c) { return scan_shape(c); }

/* ---- CPU kernel: one lane (a line along the axis) at a time ---------------- */

/* Element p of dtype dt as a double / as an integer (floats truncated toward
 * zero, as a conversion; the dtypes a CPU kernel sees). */
static double ld_f(const char *p, int32_t dt) {
  switch (dt) {
  case LUON_DTYPE_F32: return *(const float *)p;
  case LUON_DTYPE_F64: return *(const double *)p;
  case LUON_DTYPE_I32: return *(const int32_t *)p;
  case LUON_DTYPE_I64: return (double)*(const int64_t *)p;
  default: return *(const uint8_t *)p;
  }
}
static int64_t ld_i(const char *p, int32_t dt) {
  int64_t v;
  switch (dt) {
  case LUON_DTYPE_I32: return *(const int32_t *)p;
  case LUON_DTYPE_I64: return *(const int64_t *)p;
  case LUON_DTYPE_U8: case LUON_DTYPE_BOOL: return *(const uint8_t *)p;
  default: lu_convert(&v, LUON_DTYPE_I64, p, dt, 1); return v;
  }
}

typedef struct scan {
  bool prod, rev, fl;   /* fl: the result is a float (double arithmetic) */
  int32_t xdt, ydt;
  int64_t xes, yes;     /* element sizes */
  int nl;               /* lane axes: every axis but the scanned one */
  int64_t lshape[LU_MAXD], lxs[LU_MAXD], lys[LU_MAXD]; /* their sizes, byte strides of x, y */
  int64_t n, xs, ys;    /* along the axis: length, byte strides */
  const char *x;
  char *y;
} scan;

static void lanes_range(void *ctx, int64_t b, int64_t e) {
  const scan *s = ctx;
  for (int64_t q = b; q < e && !lu_interrupted(); q++) {
    int64_t xo = 0, yo = 0, r = q;
    for (int d = s->nl - 1; d >= 0; d--) {
      int64_t i = r % s->lshape[d];
      r /= s->lshape[d];
      xo += i * s->lxs[d];
      yo += i * s->lys[d];
    }
    int64_t j0 = s->rev ? s->n - 1 : 0, step = s->rev ? -1 : 1;
    const char *xp = s->x + xo + j0 * s->xs;
    char *yp = s->y + yo + j0 * s->ys;
    int64_t dx = step * s->xs, dy = step * s->ys;
    if (s->fl) {
      double v = s->prod ? 1 : 0;
      for (int64_t j = 0; j < s->n; j++, xp += dx, yp += dy) {
        double t = ld_f(xp, s->xdt);
        v = s->prod ? v * t : v + t;
        lu_convert(yp, s->ydt, &v, LUON_DTYPE_F64, 1);
      }
    } else { /* wrapping int64 */
      uint64_t v = s->prod ? 1 : 0;
      for (int64_t j = 0; j < s->n; j++, xp += dx, yp += dy) {
        uint64_t t = (uint64_t)ld_i(xp, s->xdt);
        v = s->prod ? v * t : v + t;
        int64_t w = (int64_t)v;
        lu_convert(yp, s->ydt, &w, LUON_DTYPE_I64, 1);
      }
    }
  }
}

static luon_status scan_cpu(lu_call *c, bool prod) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  int ax = (int)c->scratch_i[0];
  scan s;
  s.prod = prod;
  s.rev = reverse_attr(c->attrs);
  s.fl = lu_dtype_is_float(y->dtype);
  s.xdt = x->dtype;
  s.ydt = y->dtype;
  s.xes = luon_dtype_size(x->dtype);
  s.yes = luon_dtype_size(y->dtype);
  s.nl = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (d == ax) continue;
    s.lshape[s.nl] = x->shape[d];
    s.lxs[s.nl] = x->strides[d] * s.xes;
    s.lys[s.nl++] = y->strides[d] * s.yes;
  }
  s.n = x->shape[ax];
  s.xs = x->strides[ax] * s.xes;
  s.ys = y->strides[ax] * s.yes;
  s.x = lu_data(x);
  s.y = lu_data(y);
  if (y->size == 0) return LUON_OK;
  int64_t lanes = y->size / s.n, grain = 32768 / s.n;
  lu_parallel_for(lanes, lu_ref_kernels() ? lanes : grain < 1 ? 1 : grain, lanes_range, &s);
  return LUON_OK;
}

luon_status lu_cpu_cumsum(lu_call *c) { return scan_cpu(c, false); }
luon_status lu_cpu_cumprod(lu_call *c) { return scan_cpu(c, true); }

/* ---- backward rules ------------------------------------------------------ */

/* The forward's axis (normalised) and a scan's attrs along it: reversed
 * (rev) or not, the result in dtype dt. */
static luon_attrs scan_attrs(const lu_grad_call *g, bool rev, int32_t dt) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  int64_t ax = g->attrs->ni > LU_SCAN_AXIS ? g->attrs->i[LU_SCAN_AXIS] : 0;
  a.i[LU_SCAN_AXIS] = ax < 0 ? ax + g->in[0]->ndim : ax;
  a.i[LU_SCAN_REVERSE] = rev != reverse_attr(g->attrs);
  a.ni = LU_SCAN_REVERSE + 1;
  a.dtype = dt;
  return a;
}

/* cumsum: dx_k = sum over i >= k of dy_i, a cumsum of dy the other way */
luon_status lu_grad_cumsum(lu_grad_call *g) {
  luon_tensor *x = g->in[0], *dy = g->dout[0];
  if (!g->need[0] || !dy || !lu_dtype_has_grad(x->dtype)) return LUON_OK;
  lu_steps e = {LUON_OK, 0, {NULL}};
  luon_attrs back = scan_attrs(g, true, dy->dtype);
  lu_steps_give(&e, RA(cumsum, &back, dy), x, &g->din[0]);
  return lu_steps_end(&e);
}

/* cumprod: dx_k = sum over i >= k of dy_i * prod_{j <= i, j != k} x_j.
 * Before the lane's first zero that is revcumsum(dy * y)_k / x_k (y is 0
 * from the zero on, as it should be); at the first zero it is
 * revcumsum(dy * y')_k with y' the cumprod with that zero made 1; after
 * it, 0 (every product holds the first zero). */
luon_status lu_grad_cumprod(lu_grad_call *g) {
  luon_tensor *x = g->in[0], *y = g->out[0], *dy = g->dout[0];
  if (!g->need[0] || !dy || !lu_dtype_has_grad(x->dtype)) return LUON_OK;
  lu_steps e = {LUON_OK, 0, {NULL}};
  luon_attrs fwd = scan_attrs(g, false, y->dtype), back = scan_attrs(g, true, y->dtype);
  luon_tensor *zero = K(0, y), *one = K(1, y);
  luon_tensor *z = R2(equal, x, zero);                          /* x == 0 */
  luon_tensor *seen = RA(cumsum, &fwd, z);                      /* zeros up to here */
  luon_tensor *before = R2(equal, seen, zero);                  /* before the first zero */
  luon_tensor *first = R2(equal, R2(multiply, seen, z), one);   /* the first zero */
  luon_tensor *g1 = R2(divide, RA(cumsum, &back, R2(multiply, dy, y)), R3(where, z, one, x));
  luon_tensor *y1 = RA(cumprod, &fwd, R3(where, first, one, x)); /* y' */
  luon_tensor *g2 = RA(cumsum, &back, R2(multiply, dy, y1));
  luon_tensor *dx = R3(where, before, g1, R3(where, first, g2, zero));
  lu_steps_give(&e, dx, x, &g->din[0]);
  return lu_steps_end(&e);
}
