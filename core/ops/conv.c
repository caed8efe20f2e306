/* conv.c: 2-d convolution (cross-correlation, no flip) in NCHW with stride,
 * zero padding, dilation and groups, and its input and weight gradients.
 * Not here: pooling (pool.c), the fused convolution and max pooling
 * (conv_maxpool.c, which shares this file's per-sample kernels through
 * conv_internal.h), 3-d convolution (conv3d.c). 1-d convolution is conv2d
 * with H = 1, and the transposed convolution is conv2d_grad_input (npx).
 *   y[n,o,i,j] = b[o] + sum_{c,p,q} w[o,c,p,q] x[n, g*Cg+c, i*sh-ph+p*dh, j*sw-pw+q*dw]
 *   (g = o / Og; Cg = C/groups input and Og = O/groups output channels per group)
 * conv2d's LU_CONV2D_RELU = 1 fuses a relu: y = max(that, 0), written once; its
 * backward masks dy by y > 0 (Conv2D(activation='relu') uses it). */
#include "conv_internal.h"
#include "conv_dnnl.h"
#include <stdlib.h>

/* Short copy loops stay loops: gcc would make each row a memcpy call. */
#define NODIST __attribute__((optimize("no-tree-loop-distribute-patterns")))

/* ---- shapes ------------------------------------------------------------------ */

/* conv2d's slots up to its groups, in the registry's order; left out: 1, 0, 1, 1 */
static const int64_t conv_defaults[LU_CONV2D_GROUPS + 1] = {
  [LU_CONV2D_STRIDE_H] = 1, [LU_CONV2D_STRIDE_W] = 1, [LU_CONV2D_PAD_H] = 0, [LU_CONV2D_PAD_W] = 0,
  [LU_CONV2D_DILATE_H] = 1, [LU_CONV2D_DILATE_W] = 1, [LU_CONV2D_GROUPS] = 1};

/* Stride, pad, dilation and groups from conv2d's slots (defaults 1, 0, 1, 1). */
static luon_status read_attrs(const char *op, const luon_attrs *a, geom *g) {
  int64_t v[LU_CONV2D_GROUPS + 1];
  for (int k = 0; k <= LU_CONV2D_GROUPS; k++) v[k] = k < a->ni ? a->i[k] : conv_defaults[k];
  g->sh = v[LU_CONV2D_STRIDE_H], g->sw = v[LU_CONV2D_STRIDE_W], g->ph = v[LU_CONV2D_PAD_H];
  g->pw = v[LU_CONV2D_PAD_W], g->dh = v[LU_CONV2D_DILATE_H], g->dw = v[LU_CONV2D_DILATE_W];
  g->G = v[LU_CONV2D_GROUPS];
  g->relu = false; /* the forward's reader sets it; the gradients have none */
  if (g->sh < 1 || g->sw < 1)
    return lu_error(LUON_EINVAL, "%s: strides must be at least 1, got (%lld,%lld)", op,
                    (long long)g->sh, (long long)g->sw);
  if (g->ph < 0 || g->pw < 0)
    return lu_error(LUON_EINVAL, "%s: padding must be at least 0, got (%lld,%lld)", op,
                    (long long)g->ph, (long long)g->pw);
  if (g->dh < 1 || g->dw < 1)
    return lu_error(LUON_EINVAL, "%s: dilation must be at least 1, got (%lld,%lld)", op,
                    (long long)g->dh, (long long)g->dw);
  if (g->G < 1) return lu_error(LUON_EINVAL, "%s: groups must be at least 1, got %lld", op, (long long)g->G);
  return LUON_OK;
}

/* Output sizes from N,C,H,W,O,KH,KW and the attributes; checks the groups. */
static luon_status finish_geom(const char *op, geom *g) {
  if (g->C % g->G || g->O % g->G)
    return lu_error(LUON_ESHAPE, "%s: %lld groups must divide both the %lld input and the %lld "
                    "output channels", op, (long long)g->G, (long long)g->C, (long long)g->O);
  int64_t nh = g->H + 2 * g->ph - g->dh * (g->KH - 1) - 1;
  int64_t nw = g->W + 2 * g->pw - g->dw * (g->KW - 1) - 1;
  if (g->KH < 1 || g->KW < 1 || nh < 0 || nw < 0)
    return lu_error(LUON_ESHAPE, "%s: kernel (%lld,%lld) with dilation (%lld,%lld) does not fit the "
                    "input (%lld,%lld) padded by (%lld,%lld): the output would be empty", op,
                    (long long)g->KH, (long long)g->KW, (long long)g->dh, (long long)g->dw,
                    (long long)g->H, (long long)g->W, (long long)g->ph, (long long)g->pw);
  g->OH = nh / g->sh + 1;
  g->OW = nw / g->sw + 1;
  g->Cg = g->C / g->G;
  g->Og = g->O / g->G;
  g->K = g->Cg * g->KH * g->KW;
  g->P = g->OH * g->OW;
  return LUON_OK;
}

static luon_status check_float(const char *op, const luon_tensor *a, const char *an,
                               const luon_tensor *b, const char *bn) {
  if (!lu_dtype_is_float(a->dtype))
    return lu_error(LUON_EDTYPE, "%s: %s is %s; convolution takes float32 or float64", op, an,
                    luon_dtype_name(a->dtype));
  if (b->dtype != a->dtype)
    return lu_error(LUON_EDTYPE, "%s: %s is %s but %s is %s; cast one with astype", op, an,
                    luon_dtype_name(a->dtype), bn, luon_dtype_name(b->dtype));
  return LUON_OK;
}

static luon_status check_4d(const char *op, const luon_tensor *t, const char *what, const char *layout) {
  if (t->ndim != 4)
    return lu_error(LUON_ESHAPE, "%s: %s must be 4-d %s, got shape %s", op, what, layout,
                    lu_shape_str(t->ndim, t->shape));
  return LUON_OK;
}

/* The forward's geometry from x, w[, b]. */
luon_status lu_conv_geom(const lu_call *c, geom *g) {
  const char *op = lu_ops[c->op].name;
  if (c->nin != 2 && c->nin != 3)
    return lu_error(LUON_EINVAL, "%s: takes x, weight and an optional bias, got %d inputs", op, c->nin);
  const luon_tensor *x = c->in[0], *w = c->in[1];
  LU_TRY(check_4d(op, x, "the input", "(N,C,H,W)"));
  LU_TRY(check_4d(op, w, "the weight", "(O,C/groups,KH,KW)"));
  LU_TRY(check_float(op, x, "the input", w, "the weight"));
  LU_TRY(read_attrs(op, c->attrs, g));
  int64_t act = c->attrs->ni > LU_CONV2D_RELU ? c->attrs->i[LU_CONV2D_RELU] : 0;
  if (act != 0 && act != 1)
    return lu_error(LUON_EINVAL, "%s: the fused activation must be 0 (none) or 1 (relu), got %lld", op,
                    (long long)act);
  g->relu = act == 1;
  g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2], g->W = x->shape[3];
  g->O = w->shape[0], g->KH = w->shape[2], g->KW = w->shape[3];
  if (w->shape[1] * g->G != g->C) {
    if (g->G == 1)
      return lu_error(LUON_ESHAPE, "%s: input has %lld channels but weight expects %lld (input %s, weight %s)",
                      op, (long long)g->C, (long long)w->shape[1], lu_shape_str(4, x->shape),
                      lu_shape_str(4, w->shape));
    return lu_error(LUON_ESHAPE, "%s: input has %lld channels but weight expects %lld (%lld per group, "
                    "%lld groups) (input %s, weight %s)", op, (long long)g->C, (long long)(w->shape[1] * g->G),
                    (long long)w->shape[1], (long long)g->G, lu_shape_str(4, x->shape),
                    lu_shape_str(4, w->shape));
  }
  if (c->nin == 3) {
    const luon_tensor *b = c->in[2];
    LU_TRY(check_float(op, x, "the input", b, "the bias"));
    if (b->ndim != 1 || b->shape[0] != g->O)
      return lu_error(LUON_ESHAPE, "%s: bias must have shape (%lld,) for %lld output channels, got %s",
                      op, (long long)g->O, (long long)g->O, lu_shape_str(b->ndim, b->shape));
  }
  return finish_geom(op, g);
}

/* dy must be (N,O,OH,OW) for the geometry. */
static luon_status check_dy(const char *op, const luon_tensor *dy, const geom *g) {
  int64_t want[4] = {g->N, g->O, g->OH, g->OW};
  if (memcmp(dy->shape, want, sizeof want) != 0)
    return lu_error(LUON_ESHAPE, "%s: the output gradient has shape %s but the convolution gives %s", op,
                    lu_shape_str(4, dy->shape), lu_shape_str(4, want));
  return LUON_OK;
}

static luon_status need_extra(const char *op, const luon_attrs *a, const char *what) {
  if (a->ni < LU_NI_conv2d_grad_input)
    return lu_error(LUON_EINVAL, "%s: needs conv2d's %d attributes plus %s, got %d attributes",
                    op, LU_NI_conv2d, what, a->ni);
  return LUON_OK;
}

/* dy (N,O,OH,OW), w (O,C/G,KH,KW), the input's H,W -> dx (N,C,H,W) */
static luon_status gin_geom(const lu_call *c, geom *g) {
  const char *op = "conv2d_grad_input";
  const luon_tensor *dy = c->in[0], *w = c->in[1];
  LU_TRY(check_4d(op, dy, "the output gradient", "(N,O,OH,OW)"));
  LU_TRY(check_4d(op, w, "the weight", "(O,C/groups,KH,KW)"));
  LU_TRY(check_float(op, dy, "the output gradient", w, "the weight"));
  LU_TRY(read_attrs(op, c->attrs, g));
  LU_TRY(need_extra(op, c->attrs, "the input's H, W"));
  g->N = dy->shape[0], g->C = w->shape[1] * g->G, g->H = c->attrs->i[LU_CONV2D_GRAD_INPUT_H];
  g->W = c->attrs->i[LU_CONV2D_GRAD_INPUT_W];
  g->O = w->shape[0], g->KH = w->shape[2], g->KW = w->shape[3];
  if (g->H < 1 || g->W < 1)
    return lu_error(LUON_EINVAL, "%s: input size (%lld,%lld) must be positive", op, (long long)g->H,
                    (long long)g->W);
  LU_TRY(finish_geom(op, g));
  return check_dy(op, dy, g);
}

/* x (N,C,H,W), dy (N,O,OH,OW), the kernel's KH,KW -> dw (O,C/G,KH,KW) */
static luon_status gw_geom(const lu_call *c, geom *g) {
  const char *op = "conv2d_grad_weight";
  const luon_tensor *x = c->in[0], *dy = c->in[1];
  LU_TRY(check_4d(op, x, "the input", "(N,C,H,W)"));
  LU_TRY(check_4d(op, dy, "the output gradient", "(N,O,OH,OW)"));
  LU_TRY(check_float(op, x, "the input", dy, "the output gradient"));
  LU_TRY(read_attrs(op, c->attrs, g));
  LU_TRY(need_extra(op, c->attrs, "the kernel's KH, KW"));
  g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2], g->W = x->shape[3];
  g->O = dy->shape[1], g->KH = c->attrs->i[LU_CONV2D_GRAD_WEIGHT_KH];
  g->KW = c->attrs->i[LU_CONV2D_GRAD_WEIGHT_KW];
  LU_TRY(finish_geom(op, g));
  return check_dy(op, dy, g);
}

luon_status lu_shape_conv2d(lu_call *c) {
  geom g;
  LU_TRY(lu_conv_geom(c, &g));
  set_out(c, c->in[0]->dtype, g.N, g.O, g.OH, g.OW);
  return LUON_OK;
}

luon_status lu_shape_conv2d_grad_input(lu_call *c) {
  geom g;
  LU_TRY(gin_geom(c, &g));
  set_out(c, c->in[0]->dtype, g.N, g.C, g.H, g.W);
  return LUON_OK;
}

luon_status lu_shape_conv2d_grad_weight(lu_call *c) {
  geom g;
  LU_TRY(gw_geom(c, &g));
  set_out(c, c->in[0]->dtype, g.O, g.Cg, g.KH, g.KW);
  return LUON_OK;
}

/* ---- dense operands ------------------------------------------------------------ */

static void dense_free(dense *d) {
  for (int k = 0; k < 5; k++) lu_scratch_free(d->tmp[k]);
}

luon_status lu_conv_dense_get(const char *op, lu_call *c, dense *d) {
  memset(d, 0, sizeof *d);
  for (int k = 0; k <= c->nin && k < 5; k++) {
    luon_tensor *t = k < c->nin ? c->in[k] : c->out[0];
    if (lu_is_contiguous(t)) {
      if (k < c->nin) d->in[k] = lu_data(t);
      else d->out = lu_data(t);
      continue;
    }
    d->tmp[k] = lu_scratch_alloc((size_t)(t->size * luon_dtype_size(t->dtype)) + 1);
    if (!d->tmp[k]) {
      dense_free(d);
      return lu_error(LUON_ENOMEM, "%s: out of host memory packing an operand of shape %s", op,
                      lu_shape_str(t->ndim, t->shape));
    }
    if (k < c->nin) {
      lu_pack(t, d->tmp[k]);
      d->in[k] = d->tmp[k];
    } else {
      d->out = d->tmp[k];
    }
  }
  return LUON_OK;
}

/* Write a packed output back and free the packs. */
void lu_conv_dense_done(lu_call *c, dense *d) {
  if (d->tmp[c->nin]) lu_unpack(c->out[0], d->tmp[c->nin]);
  dense_free(d);
}

/* ---- naive reference kernels (any float dtype, double accumulation) ------------- */

/* Input position of output (i,j) and tap (p,q), or false in the padding. */
static bool tap(const geom *g, int64_t i, int64_t j, int64_t p, int64_t q, int64_t *ih, int64_t *iw) {
  *ih = i * g->sh - g->ph + p * g->dh;
  *iw = j * g->sw - g->pw + q * g->dw;
  return *ih >= 0 && *ih < g->H && *iw >= 0 && *iw < g->W;
}

/* x (N,C,H,W), w (O,Cg,KH,KW), b (O,) or NULL -> y (N,O,OH,OW) */
static void conv_ref(const geom *g, int32_t dt, const char *x, const char *w, const char *b, char *y) {
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t o = 0; o < g->O; o++)
      for (int64_t i = 0; i < g->OH; i++)
        for (int64_t j = 0; j < g->OW; j++) {
          double s = b ? ld(b, dt, o) : 0;
          int64_t c0 = o / g->Og * g->Cg;
          for (int64_t c = 0; c < g->Cg; c++)
            for (int64_t p = 0; p < g->KH; p++)
              for (int64_t q = 0; q < g->KW; q++) {
                int64_t ih, iw;
                if (tap(g, i, j, p, q, &ih, &iw))
                  s += ld(w, dt, ((o * g->Cg + c) * g->KH + p) * g->KW + q) *
                       ld(x, dt, (((n * g->C) + c0 + c) * g->H + ih) * g->W + iw);
              }
          st(y, dt, ((n * g->O + o) * g->OH + i) * g->OW + j, g->relu && s < 0 ? 0 : s);
        }
}

/* dy (N,O,OH,OW), w -> dx (N,C,H,W): dx[n,c,ih,iw] = sum of w * dy over the taps reaching it */
static void gin_ref(const geom *g, int32_t dt, const char *dy, const char *w, char *dx) {
  int64_t nx = g->N * g->C * g->H * g->W;
  double *acc = calloc((size_t)nx + 1, sizeof(double));
  if (!acc) return;
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t o = 0; o < g->O; o++)
      for (int64_t i = 0; i < g->OH; i++)
        for (int64_t j = 0; j < g->OW; j++) {
          double d = ld(dy, dt, ((n * g->O + o) * g->OH + i) * g->OW + j);
          int64_t c0 = o / g->Og * g->Cg;
          for (int64_t c = 0; c < g->Cg; c++)
            for (int64_t p = 0; p < g->KH; p++)
              for (int64_t q = 0; q < g->KW; q++) {
                int64_t ih, iw;
                if (tap(g, i, j, p, q, &ih, &iw))
                  acc[((n * g->C + c0 + c) * g->H + ih) * g->W + iw] +=
                      d * ld(w, dt, ((o * g->Cg + c) * g->KH + p) * g->KW + q);
              }
        }
  for (int64_t k = 0; k < nx; k++) st(dx, dt, k, acc[k]);
  free(acc);
}

/* x, dy -> dw (O,Cg,KH,KW): dw[o,c,p,q] = sum over n,i,j of dy * x at the tap */
static void gw_ref(const geom *g, int32_t dt, const char *x, const char *dy, char *dw) {
  for (int64_t o = 0; o < g->O; o++)
    for (int64_t c = 0; c < g->Cg; c++)
      for (int64_t p = 0; p < g->KH; p++)
        for (int64_t q = 0; q < g->KW; q++) {
          double s = 0;
          int64_t c0 = o / g->Og * g->Cg;
          for (int64_t n = 0; n < g->N; n++)
            for (int64_t i = 0; i < g->OH; i++)
              for (int64_t j = 0; j < g->OW; j++) {
                int64_t ih, iw;
                if (tap(g, i, j, p, q, &ih, &iw))
                  s += ld(dy, dt, ((n * g->O + o) * g->OH + i) * g->OW + j) *
                       ld(x, dt, ((n * g->C + c0 + c) * g->H + ih) * g->W + iw);
              }
          st(dw, dt, ((o * g->Cg + c) * g->KH + p) * g->KW + q, s);
        }
}

/* ---- im2col and col2im ---------------------------------------------------------- */

/* Output columns j in [*lo, *hi) read input column j*s + off inside [0, W). */
static void span(int64_t off, int64_t s, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
  int64_t a = off < 0 ? (-off + s - 1) / s : 0;
  int64_t b = W - off > 0 ? (W - off + s - 1) / s : 0;
  if (b > OW) b = OW;
  if (a > b) a = b;
  *lo = a, *hi = b;
}

/* Channels [c0, c1) of x (Cg,H,W) of one sample and group -> their rows of
 * col (K,P) (rows ld apart: several samples' columns side by side), row
 * (c,p,q), column (i,j). col2im adds those rows of col back into dx
 * (Cg,H,W), which the caller zeroed. Both stop between channels
 * after luon_interrupt (a sample's columns can be ~100 MB). */
#define GEN_COLS(T, S)                                                                   \
  static TC NODIST void im2col_##S(const geom *g, const T *restrict x, T *restrict col, \
                                   int64_t ld, int64_t c0, int64_t c1) {                 \
    for (int64_t c = c0; c < c1 && !lu_interrupted(); c++)                               \
      for (int64_t p = 0; p < g->KH; p++)                                                \
        for (int64_t q = 0; q < g->KW; q++) {                                            \
          T *restrict r = col + ((c * g->KH + p) * g->KW + q) * ld;                      \
          int64_t off = q * g->dw - g->pw, lo, hi;                                       \
          span(off, g->sw, g->W, g->OW, &lo, &hi);                                       \
          for (int64_t i = 0; i < g->OH; i++, r += g->OW) {                              \
            int64_t ih = i * g->sh - g->ph + p * g->dh;                                  \
            if (ih < 0 || ih >= g->H) {                                                  \
              memset(r, 0, sizeof(T) * (size_t)g->OW);                                   \
              continue;                                                                  \
            }                                                                            \
            const T *xr = x + (c * g->H + ih) * g->W + off;                              \
            for (int64_t j = 0; j < lo; j++) r[j] = 0;                                   \
            if (g->sw == 1) for (int64_t j = lo; j < hi; j++) r[j] = xr[j];                  \
            else for (int64_t j = lo; j < hi; j++) r[j] = xr[j * g->sw];                 \
            for (int64_t j = hi; j < g->OW; j++) r[j] = 0;                               \
          }                                                                              \
        }                                                                                \
  }                                                                                      \
  static TC void col2im_##S(const geom *g, const T *restrict col, T *restrict dx, int64_t ld, \
                            int64_t c0, int64_t c1) {                                    \
    for (int64_t c = c0; c < c1 && !lu_interrupted(); c++)                               \
      for (int64_t p = 0; p < g->KH; p++)                                                \
        for (int64_t q = 0; q < g->KW; q++) {                                            \
          const T *restrict r = col + ((c * g->KH + p) * g->KW + q) * ld;                \
          int64_t off = q * g->dw - g->pw, lo, hi;                                       \
          span(off, g->sw, g->W, g->OW, &lo, &hi);                                       \
          for (int64_t i = 0; i < g->OH; i++, r += g->OW) {                              \
            int64_t ih = i * g->sh - g->ph + p * g->dh;                                  \
            if (ih < 0 || ih >= g->H) continue;                                          \
            T *xr = dx + (c * g->H + ih) * g->W + off;                                   \
            if (g->sw == 1)                                                              \
              for (int64_t j = lo; j < hi; j++) xr[j] += r[j];                           \
            else                                                                         \
              for (int64_t j = lo; j < hi; j++) xr[j * g->sw] += r[j];                   \
          }                                                                              \
        }                                                                                \
  }

GEN_COLS(float, f32)
GEN_COLS(double, f64)

/* One call's operands, for the channel ranges over luon's threads. */
typedef struct cols_job {
  const geom *g;
  int32_t dt;
  const char *src;
  char *dst;
  int64_t ld;
} cols_job;

static void im2col_range(void *ctx, int64_t c0, int64_t c1) {
  const cols_job *j = ctx;
  if (j->dt == LUON_DTYPE_F32) im2col_f32(j->g, (const float *)j->src, (float *)j->dst, j->ld, c0, c1);
  else im2col_f64(j->g, (const double *)j->src, (double *)j->dst, j->ld, c0, c1);
}
static void col2im_range(void *ctx, int64_t c0, int64_t c1) {
  const cols_job *j = ctx;
  if (j->dt == LUON_DTYPE_F32) col2im_f32(j->g, (const float *)j->src, (float *)j->dst, j->ld, c0, c1);
  else col2im_f64(j->g, (const double *)j->src, (double *)j->dst, j->ld, c0, c1);
}

/* The channels split over luon's threads: a call made on one chunk of
 * samples (fewer samples than threads) would otherwise fill its columns on
 * one core while the GEMM after it runs on all; inside a parallel kernel
 * (one chunk per thread) lu_parallel_for runs inline. */
static void im2col_ld(int32_t dt, const geom *g, const char *x, char *col, int64_t ld) {
  cols_job j = {g, dt, x, col, ld};
  lu_parallel_for(g->Cg, 1, im2col_range, &j);
}
static void col2im_ld(int32_t dt, const geom *g, const char *col, char *dx, int64_t ld) {
  cols_job j = {g, dt, col, dx, ld};
  lu_parallel_for(g->Cg, 1, col2im_range, &j);
}
static void im2col(int32_t dt, const geom *g, const char *x, char *col) { im2col_ld(dt, g, x, col, g->P); }
static void col2im(int32_t dt, const geom *g, const char *col, char *dx) { col2im_ld(dt, g, col, dx, g->P); }

/* ---- forward ------------------------------------------------------------------- */

/* y[0..n) = max(y, 0), NaN kept (as the relu op) */
static TC void relu_inplace(int32_t dt, int64_t n, char *y) {
  if (dt == LUON_DTYPE_F32) {
    float *v = (float *)y;
    for (int64_t k = 0; k < n; k++) v[k] = v[k] < 0 ? 0.0f : v[k];
  } else {
    double *v = (double *)y;
    for (int64_t k = 0; k < n; k++) v[k] = v[k] < 0 ? 0.0 : v[k];
  }
}

/* Rows [0, R) of y (ld apart), n elements each: row r = v[r] (the bias a
 * GEMM then adds to with beta 1) */
static void fill_rows(int32_t dt, int64_t R, int64_t n, int64_t ld, const char *v, char *y) {
  for (int64_t r = 0; r < R; r++) {
    if (dt == LUON_DTYPE_F32)
      for (int64_t k = 0; k < n; k++) ((float *)y)[r * ld + k] = ((const float *)v)[r];
    else
      for (int64_t k = 0; k < n; k++) ((double *)y)[r * ld + k] = ((const double *)v)[r];
  }
}

/* yn (O,P) = W_g (Og,K) @ col(xn_g) (K,P) + b for each group g of sample xn
 * (C,H,W), relu'd when fused, while the sample is in cache; `raw`: without
 * the bias and the relu (conv2d_maxpool applies them after pooling) */
void lu_conv_fwd_sample(const job *j, const char *xn, char *col, char *yn, bool raw) {
  const geom *g = j->g;
  int64_t es = j->es;
  for (int64_t gi = 0; gi < g->G; gi++) {
    const char *xg = xn + gi * g->Cg * g->H * g->W * es;
    char *yg = yn + gi * g->Og * g->P * es;
    const char *cm = xg;
    if (!pointwise(g)) {
      im2col(j->dt, g, xg, col);
      cm = col;
    }
    double beta = 0;
    if (j->bias && !raw) {
      beta = 1;
      fill_rows(j->dt, g->Og, g->P, g->P, j->bias + gi * g->Og * es, yg);
    }
    gemm(j->dt, false, false, g->Og, g->P, g->K, j->b + gi * g->Og * g->K * es, g->K, cm, g->P, beta,
         yg, g->P);
    if (g->relu && !raw) relu_inplace(j->dt, g->Og * g->P, yg);
  }
}

/* ---- samples side by side ------------------------------------------------------ */

/* Small planes put several samples' columns side by side, so that a GEMM
 * has about GROUP_COLS columns: resnet's 7x7 stage ran a 512x49x4608
 * product per sample, whose packed weights served 49 columns. One group,
 * of the whole chunk's samples when fewer, per GEMM; one sample where the
 * plane is large, the kernel 1x1 (x is its own column matrix) or grouped. */
#define GROUP_COLS 512
static int64_t group_size(const geom *g, int64_t samples) {
  if (g->G != 1 || pointwise(g) || 2 * g->P > GROUP_COLS || samples < 2) return 1;
  int64_t gs = (GROUP_COLS + g->P - 1) / g->P;
  return gs < samples ? gs : samples;
}

/* dyg (O, m P): samples [n, n+m) of dy (N,O,P) side by side */
static void gather_dy(const job *j, const char *dy, int64_t n, int64_t m, char *dyg) {
  const geom *g = j->g;
  size_t row = (size_t)(g->P * j->es);
  for (int64_t s = 0; s < m; s++)
    for (int64_t o = 0; o < g->O; o++)
      memcpy(dyg + (o * m + s) * g->P * j->es, dy + ((n + s) * g->O + o) * g->P * j->es, row);
}

/* y of samples [n, n+m): one GEMM over their columns into `out` (O, m P),
 * the bias filled in first, then each sample's rows copied out and relu'd */
static void fwd_group(const job *j, int64_t n, int64_t m, char *colg, char *out) {
  const geom *g = j->g;
  int64_t es = j->es, w = m * g->P;
  for (int64_t s = 0; s < m; s++)
    im2col_ld(j->dt, g, j->a + (n + s) * g->C * g->H * g->W * es, colg + s * g->P * es, w);
  if (j->bias) fill_rows(j->dt, g->O, w, w, j->bias, out);
  gemm(j->dt, false, false, g->O, w, g->K, j->b, g->K, colg, w, j->bias ? 1 : 0, out, w);
  for (int64_t s = 0; s < m; s++)
    for (int64_t o = 0; o < g->O; o++) {
      char *yr = j->y + ((n + s) * g->O + o) * g->P * es;
      memcpy(yr, out + (o * w + s * g->P) * es, (size_t)(g->P * es));
      if (g->relu) relu_inplace(j->dt, g->P, yr);
    }
}

static void fwd_chunks(void *ctx, int64_t c0, int64_t c1) {
  const job *j = ctx;
  const geom *g = j->g;
  for (int64_t ch = c0; ch < c1; ch++) {
    int64_t n0, n1;
    sample_range(j, ch, &n0, &n1);
    if (j->gs > 1) {
      char *colg = j->col + ch * j->colsz * j->es, *out = colg + g->K * g->P * j->gs * j->es;
      for (int64_t n = n0; n < n1 && !lu_interrupted(); n += j->gs)
        fwd_group(j, n, n1 - n < j->gs ? n1 - n : j->gs, colg, out);
      continue;
    }
    for (int64_t n = n0; n < n1 && !lu_interrupted(); n++)
      lu_conv_fwd_sample(j, j->a + n * g->C * g->H * g->W * j->es, j->col + ch * j->colsz * j->es,
                 j->y + n * g->O * g->P * j->es, false);
  }
}

/* Direct float32 kernel for few taps per output (K = Cg*KH*KW small, as in a
 * first layer on RGB): each output row is built in registers from the few
 * input rows it reads, so the output is written once and nothing is packed.
 * Rows (n, i) split across threads; all O channels of a row together. */
#define DBLK 16

/* s[b] = bias + sum over taps of wt * row, for NB blocks of DBLK columns from j */
#define DIRECT_BLOCKS(NB)                                                                   \
  do {                                                                                      \
    v16 s[NB];                                                                              \
    for (int b_ = 0; b_ < NB; b_++) s[b_] = (v16){0} + bv;                                  \
    for (int64_t t = 0; t < nt; t++) {                                                      \
      for (int b_ = 0; b_ < NB; b_++) {                                                     \
        v16 xv;                                                                             \
        memcpy(&xv, rows[t] + j + b_ * DBLK, sizeof xv);                                    \
        s[b_] += wt[t] * xv;                                                                \
      }                                                                                     \
    }                                                                                       \
    if (relu)                                                                               \
      for (int b_ = 0; b_ < NB; b_++) s[b_] = (v16)((vi16)s[b_] & ~(s[b_] < 0));           \
    memcpy(yr + j, s, sizeof s);                                                            \
  } while (0)

/* The taps of output row i inside the input, for one group's channels xg
 * (Cg,H,W) of a sample: each one's input row (shifted by the column offset),
 * valid output columns [lo, hi) and weight index within (Cg,KH,KW); [*a, *e)
 * the interior, where every tap is inside. Returns the count (<= 64). */
static int64_t row_taps(const geom *g, const float *xg, int64_t i, const float **rows, int64_t *lo,
                        int64_t *hi, int64_t *wi, int64_t *a, int64_t *e) {
  int64_t nt = 0;
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t p = 0; p < g->KH; p++) {
      int64_t ih = i * g->sh - g->ph + p * g->dh;
      if (ih < 0 || ih >= g->H) continue;
      for (int64_t q = 0; q < g->KW; q++) {
        int64_t off = q * g->dw - g->pw;
        rows[nt] = xg + (c * g->H + ih) * g->W + off;
        span(off, 1, g->W, g->OW, &lo[nt], &hi[nt]);
        wi[nt++] = (c * g->KH + p) * g->KW + q;
      }
    }
  *a = 0, *e = g->OW;
  for (int64_t t = 0; t < nt; t++) {
    if (lo[t] > *a) *a = lo[t];
    if (hi[t] < *e) *e = hi[t];
  }
  if (*a > *e) *a = *e;
  return nt;
}

/* Output row i of every channel of sample n into yn (O,OH,OW). */
static TC void direct_row(const job *jb, int64_t n, int64_t i, float *yn) {
  const geom *g = jb->g;
  const float *x = (const float *)jb->a, *w = (const float *)jb->b, *b = (const float *)jb->bias;
  bool relu = g->relu;
  for (int64_t gi = 0; gi < g->G; gi++) {
    const float *rows[64];
    float wt[64];
    int64_t lo[64], hi[64], wi[64], a, e;
    int64_t nt = row_taps(g, x + (n * g->C + gi * g->Cg) * g->H * g->W, i, rows, lo, hi, wi, &a, &e);
    for (int64_t o = gi * g->Og; o < (gi + 1) * g->Og; o++) {
      float *yr = yn + (o * g->OH + i) * g->OW;
      float bv = b ? b[o] : 0.0f;
      for (int64_t t = 0; t < nt; t++) wt[t] = w[o * g->K + wi[t]];
      /* four independent blocks at a time hide the FMA latency; the last
       * group or block is moved back to end at e, overlapping the one before */
      int64_t j = a;
      if (e - a >= 4 * DBLK)
        for (; j < e; j += 4 * DBLK) {
          if (j + 4 * DBLK > e) j = e - 4 * DBLK;
          DIRECT_BLOCKS(4);
        }
      else if (e - a >= DBLK)
        for (; j < e; j += DBLK) {
          if (j + DBLK > e) j = e - DBLK;
          DIRECT_BLOCKS(1);
        }
      /* the edges (and a narrow interior), element by element */
      for (int64_t jj = 0; jj < g->OW; jj++) {
        if (jj >= a && jj < j) {
          jj = j - 1;
          continue;
        }
        float sum = bv;
        for (int64_t t = 0; t < nt; t++)
          if (jj >= lo[t] && jj < hi[t]) sum += wt[t] * rows[t][jj];
        yr[jj] = relu && sum < 0 ? 0.0f : sum;
      }
    }
  }
}

static void direct_rows(void *ctx, int64_t r0, int64_t r1) {
  const job *jb = ctx;
  const geom *g = jb->g;
  for (int64_t r = r0; r < r1 && !lu_interrupted(); r++)
    direct_row(jb, r / g->OH, r % g->OH, (float *)jb->y + r / g->OH * g->O * g->P);
}

void lu_conv_direct_row(const job *jb, int64_t n, int64_t i, float *yn) { direct_row(jb, n, i, yn); }

/* One chunk of samples per thread; with fewer samples than threads, one
 * chunk whose products lu_sgemm splits over the threads instead.
 * LUON_CONV_CHUNKS overrides (for benchmarks). */
static int64_t pick_chunks(const geom *g) {
  const char *e = getenv("LUON_CONV_CHUNKS");
  int64_t nt = lu_num_threads(), ch = e ? atoll(e) : nt;
  if (!e && g->N < nt) ch = 1;
  if (ch < 1) ch = 1;
  if (ch > g->N) ch = g->N > 0 ? g->N : 1;
  return ch;
}

/* Allocate the im2col buffers (and accumulators) of a job. */
static luon_status job_alloc(const char *op, job *j, bool acc) {
  const geom *g = j->g;
  /* no im2col for 1x1 kernels, nor for weight gradients (acc) the direct kernel makes */
  bool direct_gw = acc && direct_ok(g, j->dt);
  j->gs = direct_gw ? 1 : group_size(g, (g->N + j->chunks - 1) / j->chunks);
  j->colsz = pointwise(g) || direct_gw ? 0 : g->K * g->P;
  if (j->gs > 1) j->colsz = (g->K + g->O) * g->P * j->gs; /* the columns and (O, gs P) beside them */
  size_t n = (size_t)(j->chunks * j->colsz) + (acc ? (size_t)(j->chunks * g->O * g->K) : 0);
  j->col = lu_scratch_alloc(n * (size_t)j->es + 1);
  if (!j->col)
    return lu_error(LUON_ENOMEM, "%s: out of host memory for %lld im2col buffer(s) of (%lld,%lld)", op,
                    (long long)j->chunks, (long long)g->K, (long long)g->P);
  j->acc = acc ? j->col + j->chunks * j->colsz * j->es : NULL;
  return LUON_OK;
}

/* The samples in pick_chunks chunks over the threads, each chunk with its
 * buffers from job_alloc (the caller frees j->col). */
static luon_status job_run(const char *op, job *j, bool acc, lu_range_fn fn) {
  j->chunks = pick_chunks(j->g);
  LU_TRY(job_alloc(op, j, acc));
  lu_parallel_for(j->chunks, 1, fn, j);
  return LUON_OK;
}

typedef struct bn_epi {
  int32_t dt;
  int64_t O, P;
  const double *ad; /* a, d per channel */
  bool relu;
  char *y;
} bn_epi;

static void bn_planes(void *ctx, int64_t p0, int64_t p1) {
  const bn_epi *e = ctx;
  int64_t es = luon_dtype_size(e->dt);
  for (int64_t p = p0; p < p1; p++)
    lu_bn_apply(e->dt, e->y + p * e->P * es, e->P, e->ad[2 * (p % e->O)], e->ad[2 * (p % e->O) + 1], e->relu);
}

/* Where oneDNN's direct kernels (conv_dnnl.c) beat conv.c's own, from
 * resnet18's layers at batch 32 on 2 threads (ms, luon's own -> oneDNN):
 * - planes of 14x14 and less, where Winograd's 4x4 tiles waste and its
 *   transforms weigh most: 3x3 512@7x7 forward 47 -> 36, weight gradient
 *   63 -> 38; 256@14x14 weight gradient 52 -> 40;
 * - the input gradient of strided layers: 3x3 stride 2 64->128 at 56x56
 *   30 -> 21; but not of a first layer (3 input channels: 80 -> 240), nor
 *   split over fewer samples than threads (its parts are the samples);
 * - the weight gradient of a first layer (7x7 over 3 channels: 93 -> 55),
 *   and of small planes, stride 2 only from 8x8 down (at 28x28 and 14x14
 *   conv.c's was 10-25% faster); only with 16 output channels per thread
 *   at least (its parts are groups of 16 output channels, where conv.c's
 *   kernel splits over the samples and keeps every thread busy);
 * - not 1x1 kernels, where the GEMM over the rows is as fast.
 * Geometries not measured (5x5, dilated, stride 1 on large planes) stay
 * with conv.c's kernels. */
static bool dnnl_plane(const geom *g) {
  return g->OH * g->OW <= 196 && !lu_wino_forced() && lu_dnnl_conv_ok(g, LUON_DTYPE_F32);
}
static bool dnnl_gin(const geom *g) {
  return g->KH * g->KW > 1 && g->C >= 16 && g->N >= lu_num_threads() &&
         (g->sh > 1 || g->sw > 1 || g->OH * g->OW <= 196);
}
static bool dnnl_gw(const geom *g) {
  return g->KH * g->KW > 1 && g->O >= 16 * lu_num_threads() &&
         (g->C < 8 || (g->OH * g->OW <= 196 && (g->sh == 1 || g->OH * g->OW <= 64)));
}

/* conv2d, then (bn: a, d per channel) batch norm in predict mode and a relu
 * (conv2d_bn): oneDNN's parts normalise their own output while in cache,
 * the other paths in a pass after */
static luon_status conv2d_run(lu_call *c, const double *bn, bool bn_relu) {
  geom g;
  LU_TRY(lu_conv_geom(c, &g));
  if (c->out[0]->size == 0) return LUON_OK;
  LU_TRY(check_blas("conv2d", &g));
  dense d;
  LU_TRY(lu_conv_dense_get("conv2d", c, &d));
  int32_t dt = c->in[0]->dtype;
  const char *bias = c->nin == 3 ? d.in[2] : NULL;
  job j = {&g, dt, luon_dtype_size(dt), 1, d.in[0], d.in[1], bias, d.out, NULL, NULL, 0, 0};
  luon_status s = LUON_OK;
  const char *algo = getenv("LUON_CONV_ALGO");
  bool done = false;
  /* oneDNN's direct kernels, except where Winograd's tiles pay off: a batch
   * with a sample per thread, on planes larger than 14x14 (measured:
   * resnet18's 3x3 stride-1 layers at batch 32 run 20-30% faster through
   * Winograd at 56x56 and 28x28; at batch 1 slower; see dnnl_plane) */
  bool wino = lu_wino_fwd_ok(&g, dt) && g.N >= lu_num_threads() && !dnnl_plane(&g);
  if (lu_ref_kernels() || g.K == 0) {
    conv_ref(&g, dt, d.in[0], d.in[1], bias, d.out);
  } else if (!wino && ((s = lu_dnnl_conv2d(&g, dt, (const float *)d.in[0], (const float *)d.in[1],
                                           (const float *)bias, (float *)d.out,
                                           d.tmp[1] ? NULL : c->in[1]->storage, bn, bn_relu, &done)) != LUON_OK ||
                       done)) {
    bn = NULL; /* applied by the parts */
  } else if (direct_ok(&g, dt) && !(algo && algo[0] == 'g')) {
    lu_parallel_for(g.N * g.OH, 4, direct_rows, &j);
  } else if (lu_wino_fwd_ok(&g, dt)) {
    s = lu_wino_fwd("conv2d", &g, (const float *)d.in[0], (const float *)d.in[1], (const float *)bias,
                    (float *)d.out);
  } else {
    s = job_run("conv2d", &j, false, fwd_chunks);
    lu_scratch_free(j.col);
  }
  if (s == LUON_OK && bn) {
    bn_epi e = {dt, g.O, g.OH * g.OW, bn, bn_relu, d.out};
    lu_parallel_for(g.N * g.O, (1 << 15) / (e.P > 0 ? e.P : 1) + 1, bn_planes, &e);
  }
  lu_conv_dense_done(c, &d);
  return s;
}

luon_status lu_cpu_conv2d(lu_call *c) { return conv2d_run(c, NULL, false); }

/* conv2d_bn: x, w[, b] and the batch norm's four (O,) */
static int cbn_conv_nin(const lu_call *c) { return c->nin - 4; }

luon_status lu_shape_conv2d_bn(lu_call *c) {
  const char *op = "conv2d_bn";
  if (c->nin != 6 && c->nin != 7)
    return lu_error(LUON_EINVAL, "%s: takes x, w[, b], gamma, beta, running_mean and running_var, got %d inputs",
                    op, c->nin);
  if (c->attrs->ni < LU_NI_conv2d_bn)
    return lu_error(LUON_EINVAL, "%s: needs conv2d's %d attributes and RELU, got %d", op, LU_NI_conv2d,
                    c->attrs->ni);
  if (c->attrs->i[LU_CONV2D_RELU])
    return lu_error(LUON_EINVAL, "%s: the convolution's own relu (RELU 1 of conv2d's slots) would come "
                    "before the batch norm; the op's RELU slot puts it after", op);
  lu_call cc = *c;
  cc.nin = cbn_conv_nin(c);
  geom g;
  LU_TRY(lu_conv_geom(&cc, &g));
  int32_t dt = c->in[0]->dtype;
  if (dt != LUON_DTYPE_F32 && dt != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "%s: x is %s; only float32 and float64 are supported", op, luon_dtype_name(dt));
  LU_TRY(lu_bn_check_stats(op, g.O, dt, c->in + cc.nin, c->attrs->f[LU_CBN_EPS]));
  if (luon_autograd_is_recording())
    return lu_error(LUON_EINVAL, "%s: the batch norm in predict mode has no gradient here, and autograd "
                    "records; call conv2d and batch_norm apart", op);
  set_out(c, dt, g.N, g.O, g.OH, g.OW);
  return LUON_OK;
}

luon_status lu_cpu_conv2d_bn(lu_call *c) {
  lu_call cc = *c;
  cc.nin = cbn_conv_nin(c);
  int64_t O = c->in[1]->shape[0];
  double *bn = lu_scratch_alloc(sizeof(double) * 2 * (size_t)(O > 0 ? O : 1));
  if (!bn)
    return lu_error(LUON_ENOMEM, "conv2d_bn: out of host memory for the batch norm's %lld channels", (long long)O);
  for (int64_t o = 0; o < O; o++)
    lu_bn_predict_coef(c->in + cc.nin, o, c->attrs->f[LU_CBN_EPS], bn + 2 * o, bn + 2 * o + 1);
  luon_status s = conv2d_run(&cc, bn, c->attrs->i[LU_CBN_RELU] != 0);
  lu_scratch_free(bn);
  return s;
}

/* ---- input gradient ----------------------------------------------------------- */

/* dxn_g (Cg,H,W) = col2im(W_g^T (K,Og) @ dyn_g (Og,P)) for one sample */
void lu_conv_gin_sample(const geom *g, int32_t dt, const char *w, const char *dyn, char *col, char *dxn) {
  int64_t es = luon_dtype_size(dt);
  for (int64_t gi = 0; gi < g->G; gi++) {
    const char *dyg = dyn + gi * g->Og * g->P * es;
    char *dxg = dxn + gi * g->Cg * g->H * g->W * es;
    const char *wg = w + gi * g->Og * g->K * es;
    if (pointwise(g)) {
      gemm(dt, true, false, g->K, g->P, g->Og, wg, g->K, dyg, g->P, 0, dxg, g->P);
      continue;
    }
    gemm(dt, true, false, g->K, g->P, g->Og, wg, g->K, dyg, g->P, 0, col, g->P);
    memset(dxg, 0, (size_t)(g->Cg * g->H * g->W * es));
    col2im(dt, g, col, dxg);
  }
}

/* dx of samples [n, n+m) from their dy side by side: one GEMM, then col2im */
static void gin_group(const job *j, int64_t n, int64_t m, char *colg, char *dyg) {
  const geom *g = j->g;
  int64_t es = j->es, w = m * g->P;
  gather_dy(j, j->a, n, m, dyg);
  gemm(j->dt, true, false, g->K, w, g->O, j->b, g->K, dyg, w, 0, colg, w);
  for (int64_t s = 0; s < m; s++) {
    char *dx = j->y + (n + s) * g->C * g->H * g->W * es;
    memset(dx, 0, (size_t)(g->C * g->H * g->W * es));
    col2im_ld(j->dt, g, colg + s * g->P * es, dx, w);
  }
}

static void gin_chunks(void *ctx, int64_t c0, int64_t c1) {
  const job *j = ctx;
  const geom *g = j->g;
  for (int64_t ch = c0; ch < c1; ch++) {
    int64_t n0, n1;
    sample_range(j, ch, &n0, &n1);
    if (j->gs > 1) {
      char *colg = j->col + ch * j->colsz * j->es, *dyg = colg + g->K * g->P * j->gs * j->es;
      for (int64_t n = n0; n < n1 && !lu_interrupted(); n += j->gs)
        gin_group(j, n, n1 - n < j->gs ? n1 - n : j->gs, colg, dyg);
      continue;
    }
    for (int64_t n = n0; n < n1 && !lu_interrupted(); n++)
      lu_conv_gin_sample(g, j->dt, j->b, j->a + n * g->O * g->P * j->es, j->col + ch * j->colsz * j->es,
                 j->y + n * g->C * g->H * g->W * j->es);
  }
}

luon_status lu_cpu_conv2d_grad_input(lu_call *c) {
  geom g;
  LU_TRY(gin_geom(c, &g));
  if (c->out[0]->size == 0) return LUON_OK;
  LU_TRY(check_blas("conv2d_grad_input", &g));
  dense d;
  LU_TRY(lu_conv_dense_get("conv2d_grad_input", c, &d));
  int32_t dt = c->in[0]->dtype;
  job j = {&g, dt, luon_dtype_size(dt), 1, d.in[0], d.in[1], NULL, d.out, NULL, NULL, 0, 0};
  luon_status s = LUON_OK;
  bool done = false, dnnl = dnnl_gin(&g);
  if (lu_ref_kernels()) {
    gin_ref(&g, dt, d.in[0], d.in[1], d.out);
  } else if (lu_wino_gin_ok(&g, dt) && !(dnnl && dnnl_plane(&g))) {
    s = lu_wino_gin("conv2d_grad_input", &g, (const float *)d.in[1], (const float *)d.in[0], (float *)d.out);
  } else if (dnnl && ((s = lu_dnnl_conv2d_grad_input(&g, dt, (const float *)d.in[0], (const float *)d.in[1],
                                                      (float *)d.out, &done)) != LUON_OK || done)) {
  } else {
    s = job_run("conv2d_grad_input", &j, false, gin_chunks);
    lu_scratch_free(j.col);
  }
  lu_conv_dense_done(c, &d);
  return s;
}

/* ---- weight gradient ----------------------------------------------------------- */

/* The direct kernel's weight gradient for one sample (direct_ok geometries):
 * acc (O,K) += dy rows (O,OH,OW) dotted with the taps' input rows, 16
 * columns at a time; the K sums of a channel stay in registers over all rows
 * when every tap is inside (the common case), else go to acc row by row. */
#define DW_ALL(NT)                                                                          \
  do {                                                                                      \
    v16 s[NT];                                                                              \
    for (int t = 0; t < NT; t++) s[t] = (v16){0};                                           \
    for (int64_t i = 0; i < g->OH; i++) {                                                   \
      const float *dr = dyn + (o * g->OH + i) * g->OW;                                      \
      if (i >= ia && i < ib && nt0 == NT && e0 - a0 >= DBLK) { /* row ia's taps, moved down */ \
        for (int t = 0; t < NT; t++) rows[t] = rows0[t] + (i - ia) * g->sh * g->W;          \
        a = a0, e = e0;                                                                     \
      } else { /* a row with taps in the padding, or a narrow one */                        \
        int64_t nt = row_taps(g, xg, i, rows, lo, hi, wi, &a, &e);                          \
        dw_row_any(g, nt, rows, lo, hi, wi, dr, ao);                                        \
        continue;                                                                           \
      }                                                                                     \
      /* the last block moved back to end at e, its counted lanes masked off */            \
      for (int64_t j = a; j < e; j += DBLK) {                                               \
        int64_t jb = j + DBLK <= e ? j : e - DBLK;                                          \
        v16 d;                                                                              \
        memcpy(&d, dr + jb, sizeof d);                                                      \
        if (jb != j) d = (v16)((vi16)d & (lane >= (int32_t)(j - jb)));                     \
        for (int t = 0; t < NT; t++) {                                                      \
          v16 xv;                                                                           \
          memcpy(&xv, rows[t] + jb, sizeof xv);                                             \
          s[t] += d * xv;                                                                   \
        }                                                                                   \
      }                                                                                     \
      dw_edges(g, NT, rows, lo0, hi0, wi0, dr, a, e, ao);                                   \
    }                                                                                       \
    for (int t = 0; t < NT; t++) {                                                          \
      float h = 0;                                                                          \
      for (int l = 0; l < DBLK; l++) h += s[t][l];                                          \
      ao[t] += h;                                                                           \
    }                                                                                       \
  } while (0)

/* columns outside [a, e) of one row, element by element */
static void dw_edges(const geom *g, int64_t nt, const float *const *rows, const int64_t *lo,
                     const int64_t *hi, const int64_t *wi, const float *dr, int64_t a, int64_t e, float *ao) {
  for (int64_t jj = 0; jj < g->OW; jj++) {
    if (jj == a) jj = e;
    if (jj >= g->OW) break;
    for (int64_t t = 0; t < nt; t++)
      if (jj >= lo[t] && jj < hi[t]) ao[wi[t]] += dr[jj] * rows[t][jj];
  }
}

/* one row with any taps, element by element per tap */
static TC void dw_row_any(const geom *g, int64_t nt, const float *const *rows, const int64_t *lo,
                          const int64_t *hi, const int64_t *wi, const float *dr, float *ao) {
  for (int64_t t = 0; t < nt; t++) {
    float h = 0;
    for (int64_t jj = lo[t]; jj < hi[t]; jj++) h += dr[jj] * rows[t][jj];
    ao[wi[t]] += h;
  }
}

static TC void direct_gw_sample(const geom *g, const float *xn, const float *dyn, float *acc) {
  vi16 lane;
  for (int l = 0; l < DBLK; l++) lane[l] = l;
  /* rows [ia, ib) have every tap's input row inside: their taps are row ia's moved down */
  int64_t ia = (g->ph + g->sh - 1) / g->sh, ib = g->OH;
  while (ib > ia && (ib - 1) * g->sh - g->ph + (g->KH - 1) * g->dh >= g->H) ib--;
  for (int64_t gi = 0; gi < g->G; gi++) {
    const float *xg = xn + gi * g->Cg * g->H * g->W, *rows[64], *rows0[64];
    int64_t lo[64], hi[64], wi[64], lo0[64], hi0[64], wi0[64], a, e, a0 = 0, e0 = 0, nt0 = -1;
    if (ia < ib) nt0 = row_taps(g, xg, ia, rows0, lo0, hi0, wi0, &a0, &e0);
    for (int64_t o = gi * g->Og; o < (gi + 1) * g->Og; o++) {
      float *ao = acc + o * g->K;
      switch (g->K) {
      case 4: DW_ALL(4); break;
      case 8: DW_ALL(8); break;
      case 9: DW_ALL(9); break;
      case 12: DW_ALL(12); break;
      case 16: DW_ALL(16); break;
      case 27: DW_ALL(27); break;
      default:
        for (int64_t i = 0; i < g->OH; i++) {
          int64_t nt = row_taps(g, xg, i, rows, lo, hi, wi, &a, &e);
          dw_row_any(g, nt, rows, lo, hi, wi, dyn + (o * g->OH + i) * g->OW, ao);
        }
      }
    }
  }
}

/* acc_g (Og,K) = beta acc_g + dyn_g (Og,P) @ col(xn_g)^T (P,K) for one sample */
void lu_conv_gw_sample(const geom *g, int32_t dt, const char *xn, const char *dyn, char *col, double beta,
                      char *acc) {
  int64_t es = luon_dtype_size(dt);
  if (direct_ok(g, dt)) {
    if (beta == 0) memset(acc, 0, (size_t)(g->O * g->K * es));
    direct_gw_sample(g, (const float *)xn, (const float *)dyn, (float *)acc);
    return;
  }
  for (int64_t gi = 0; gi < g->G; gi++) {
    const char *xg = xn + gi * g->Cg * g->H * g->W * es;
    const char *cm = xg;
    if (!pointwise(g)) {
      im2col(dt, g, xg, col);
      cm = col;
    }
    gemm(dt, false, true, g->Og, g->K, g->P, dyn + gi * g->Og * g->P * es, g->P, cm, g->P, beta,
         acc + gi * g->Og * g->K * es, g->K);
  }
}

/* acc[chunk] (O,K) = the sum over the chunk's samples */
static void gw_chunks(void *ctx, int64_t c0, int64_t c1) {
  const job *j = ctx;
  const geom *g = j->g;
  int64_t es = j->es;
  for (int64_t ch = c0; ch < c1; ch++) {
    char *acc = j->acc + ch * g->O * g->K * es;
    int64_t n0, n1;
    sample_range(j, ch, &n0, &n1);
    if (n0 == n1) memset(acc, 0, (size_t)(g->O * g->K * es));
    if (j->gs > 1) { /* acc = sum over groups of dyg (O, w) @ colg^T (w, K) */
      char *colg = j->col + ch * j->colsz * es, *dyg = colg + g->K * g->P * j->gs * es;
      for (int64_t n = n0; n < n1 && !lu_interrupted(); n += j->gs) {
        int64_t m = n1 - n < j->gs ? n1 - n : j->gs, w = m * g->P;
        gather_dy(j, j->b, n, m, dyg);
        for (int64_t s = 0; s < m; s++)
          im2col_ld(j->dt, g, j->a + (n + s) * g->C * g->H * g->W * es, colg + s * g->P * es, w);
        gemm(j->dt, false, true, g->O, g->K, w, dyg, w, colg, w, n == n0 ? 0 : 1, acc, g->K);
      }
      continue;
    }
    for (int64_t n = n0; n < n1 && !lu_interrupted(); n++)
      lu_conv_gw_sample(g, j->dt, j->a + n * g->C * g->H * g->W * es, j->b + n * g->O * g->P * es,
                j->col + ch * j->colsz * es, n == n0 ? 0 : 1, acc);
  }
}

luon_status lu_cpu_conv2d_grad_weight(lu_call *c) {
  geom g;
  LU_TRY(gw_geom(c, &g));
  if (c->out[0]->size == 0) return LUON_OK;
  LU_TRY(check_blas("conv2d_grad_weight", &g));
  dense d;
  LU_TRY(lu_conv_dense_get("conv2d_grad_weight", c, &d));
  int32_t dt = c->in[0]->dtype;
  job j = {&g, dt, luon_dtype_size(dt), 1, d.in[0], d.in[1], NULL, d.out, NULL, NULL, 0, 0};
  luon_status s = LUON_OK;
  bool done = false, dnnl = dnnl_gw(&g);
  int64_t nw = g.O * g.K;
  if (lu_ref_kernels()) {
    gw_ref(&g, dt, d.in[0], d.in[1], d.out);
  } else if (lu_wino_gw_ok(&g, dt) && !(dnnl && dnnl_plane(&g))) {
    s = lu_wino_gw("conv2d_grad_weight", &g, (const float *)d.in[0], (const float *)d.in[1], (float *)d.out);
  } else if (dnnl && ((s = lu_dnnl_conv2d_grad_weight(&g, dt, (const float *)d.in[0], (const float *)d.in[1],
                                                       (float *)d.out, &done)) != LUON_OK || done)) {
  } else {
    s = job_run("conv2d_grad_weight", &j, true, gw_chunks);
    if (s == LUON_OK) {
      /* the chunks' partial sums, in chunk order */
      for (int64_t k = 0; k < nw; k++) {
        double v = 0;
        for (int64_t ch = 0; ch < j.chunks; ch++) v += ld(j.acc + ch * nw * j.es, dt, k);
        st(d.out, dt, k, v);
      }
    }
    lu_scratch_free(j.col);
  }
  lu_conv_dense_done(c, &d);
  return s;
}

/* ---- backward rule ------------------------------------------------------------ */

/* y = conv2d(x, w, b):
 *   dx = conv2d_grad_input(dy, w)     the transposed convolution of dy
 *   dw = conv2d_grad_weight(x, dy)    dy correlated with x, summed over the batch
 *   db = sum(dy, axes 0, 2, 3)        each output channel's bias adds to every position
 * (with the fused relu, dy * (y > 0) in place of dy) */
static luon_status conv_grads(lu_grad_call *gc, luon_tensor *dy, luon_tensor *x, luon_tensor *w) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  for (int k = 0; k <= LU_CONV2D_GROUPS; k++) a.i[k] = k < gc->attrs->ni ? gc->attrs->i[k] : conv_defaults[k];
  _Static_assert((int)LU_NI_conv2d_grad_input == (int)LU_NI_conv2d_grad_weight, "one attrs for both gradients");
  a.ni = LU_NI_conv2d_grad_input;
  if (gc->need[0]) {
    a.i[LU_CONV2D_GRAD_INPUT_H] = x->shape[2], a.i[LU_CONV2D_GRAD_INPUT_W] = x->shape[3];
    LU_TRY(lu_run(LU_OP_conv2d_grad_input, &a, &gc->din[0], 2, dy, w));
  }
  if (gc->need[1]) {
    a.i[LU_CONV2D_GRAD_WEIGHT_KH] = w->shape[2], a.i[LU_CONV2D_GRAD_WEIGHT_KW] = w->shape[3];
    LU_TRY(lu_run(LU_OP_conv2d_grad_weight, &a, &gc->din[1], 2, x, dy));
  }
  if (gc->nin == 3 && gc->need[2]) {
    luon_attrs s;
    memset(&s, 0, sizeof s);
    s.i[LU_REDUCE_KEEPDIMS] = 0; /* db: dy summed over N, OH, OW */
    s.i[LU_REDUCE_AXES] = 0, s.i[LU_REDUCE_AXES + 1] = 2, s.i[LU_REDUCE_AXES + 2] = 3;
    s.ni = LU_REDUCE_AXES + 3;
    LU_TRY(lu_run(LU_OP_sum, &s, &gc->din[2], 1, dy));
  }
  return LUON_OK;
}

luon_status lu_grad_conv2d(lu_grad_call *gc) {
  luon_tensor *dy = gc->dout[0], *x = gc->in[0], *w = gc->in[1], *masked = NULL;
  if (!dy) return LUON_OK;
  if (gc->attrs->ni > LU_CONV2D_RELU && gc->attrs->i[LU_CONV2D_RELU] == 1) { /* fused relu: dy * (y > 0) */
    LU_TRY(lu_run(LU_OP_relu_grad, NULL, &masked, 2, gc->out[0], dy));
    dy = masked;
  }
  luon_status s = conv_grads(gc, dy, x, w);
  luon_tensor_release(masked);
  return s;
}

/* dx = conv2d_grad_input(dy, w) is linear in both (it is the transposed
 * convolution, npx.deconvolution's forward):
 *   d dy = conv2d(ddx, w)                  the convolution it transposes
 *   d w  = conv2d_grad_weight(ddx, dy)     ddx in the input's place, dy the output gradient's */
luon_status lu_grad_conv2d_grad_input(lu_grad_call *gc) {
  luon_tensor *ddx = gc->dout[0], *dy = gc->in[0], *w = gc->in[1];
  if (!ddx) return LUON_OK;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  for (int k = 0; k <= LU_CONV2D_GROUPS; k++) a.i[k] = k < gc->attrs->ni ? gc->attrs->i[k] : conv_defaults[k];
  a.ni = LU_CONV2D_GROUPS + 1; /* no fused relu */
  if (gc->need[0]) LU_TRY(lu_run(LU_OP_conv2d, &a, &gc->din[0], 2, ddx, w));
  if (gc->need[1]) {
    a.i[LU_CONV2D_GRAD_WEIGHT_KH] = w->shape[2], a.i[LU_CONV2D_GRAD_WEIGHT_KW] = w->shape[3];
    a.ni = LU_NI_conv2d_grad_weight;
    LU_TRY(lu_run(LU_OP_conv2d_grad_weight, &a, &gc->din[1], 2, ddx, dy));
  }
  return LUON_OK;
}

/* dw = conv2d_grad_weight(x, dy) is linear in both; with ddw its gradient:
 *   d x  = conv2d_grad_input(dy, ddw)      as conv2d(x, ddw)'s input gradient at dy
 *   d dy = conv2d(x, ddw)                  the convolution whose weight gradient it is */
luon_status lu_grad_conv2d_grad_weight(lu_grad_call *gc) {
  luon_tensor *ddw = gc->dout[0], *x = gc->in[0], *dy = gc->in[1];
  if (!ddw) return LUON_OK;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  for (int k = 0; k <= LU_CONV2D_GROUPS; k++) a.i[k] = k < gc->attrs->ni ? gc->attrs->i[k] : conv_defaults[k];
  a.ni = LU_CONV2D_GROUPS + 1; /* no fused relu */
  if (gc->need[1]) LU_TRY(lu_run(LU_OP_conv2d, &a, &gc->din[1], 2, x, ddw));
  if (gc->need[0]) {
    a.i[LU_CONV2D_GRAD_INPUT_H] = x->shape[2], a.i[LU_CONV2D_GRAD_INPUT_W] = x->shape[3];
    a.ni = LU_NI_conv2d_grad_input;
    LU_TRY(lu_run(LU_OP_conv2d_grad_input, &a, &gc->din[0], 2, dy, ddw));
  }
  return LUON_OK;
}
