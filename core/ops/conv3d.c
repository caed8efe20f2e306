/* conv3d.c: 3-d convolution (cross-correlation, no flip) in NCDHW with
 * stride, zero padding, dilation and groups, and its input and weight
 * gradients: vol2col + the GEMM (conv_internal.h), per sample and group.
 * Not here: 2-d (conv.c); its CUDA kernels are conv.cu's (cuDNN's N-d path).
 *   y[n,o,e,i,j] = b[o] + sum_{c,r,p,q} w[o,c,r,p,q] x[n, g*Cg+c, e*sd-pd+r*dd, i*sh-ph+p*dh, j*sw-pw+q*dw]
 *   (g = o / Og; Cg = C/groups input and Og = O/groups output channels per group) */
#include "conv_internal.h"
#include <stdlib.h>

/* The geometry of one 3-d convolution; axes (d, h, w) in arrays of 3. */
typedef struct geom3 {
  int64_t N, C, O;
  int64_t n[3], k[3], o[3];  /* input, kernel and output sizes */
  int64_t s[3], p[3], dl[3]; /* stride, pad, dilation */
  int64_t G, Cg, Og, K, P;   /* per group: K = Cg*KD*KH*KW rows of vol2col, P = OD*OH*OW */
  int64_t V;                 /* D*H*W */
} geom3;

/* ---- shapes ------------------------------------------------------------------ */

static const int64_t defaults[LU_CONV3D_GROUPS + 1] = {
  [LU_CONV3D_STRIDE_D] = 1, [LU_CONV3D_STRIDE_H] = 1, [LU_CONV3D_STRIDE_W] = 1,
  [LU_CONV3D_DILATE_D] = 1, [LU_CONV3D_DILATE_H] = 1, [LU_CONV3D_DILATE_W] = 1, [LU_CONV3D_GROUPS] = 1};

#define T3(a) (long long)(a)[0], (long long)(a)[1], (long long)(a)[2]

/* Stride, pad, dilation and groups from conv3d's slots (defaults 1, 0, 1, 1). */
static luon_status read_attrs(const char *op, const luon_attrs *a, geom3 *g) {
  int64_t v[LU_CONV3D_GROUPS + 1];
  for (int k = 0; k <= LU_CONV3D_GROUPS; k++) v[k] = k < a->ni ? a->i[k] : defaults[k];
  for (int d = 0; d < 3; d++) {
    g->s[d] = v[LU_CONV3D_STRIDE_D + d];
    g->p[d] = v[LU_CONV3D_PAD_D + d];
    g->dl[d] = v[LU_CONV3D_DILATE_D + d];
  }
  g->G = v[LU_CONV3D_GROUPS];
  for (int d = 0; d < 3; d++) {
    if (g->s[d] < 1) return lu_error(LUON_EINVAL, "%s: strides must be at least 1, got (%lld,%lld,%lld)", op, T3(g->s));
    if (g->p[d] < 0) return lu_error(LUON_EINVAL, "%s: padding must be at least 0, got (%lld,%lld,%lld)", op, T3(g->p));
    if (g->dl[d] < 1)
      return lu_error(LUON_EINVAL, "%s: dilation must be at least 1, got (%lld,%lld,%lld)", op, T3(g->dl));
  }
  if (g->G < 1) return lu_error(LUON_EINVAL, "%s: groups must be at least 1, got %lld", op, (long long)g->G);
  return LUON_OK;
}

/* Output sizes from the input, kernel and attributes; checks the groups. */
static luon_status finish_geom(const char *op, geom3 *g) {
  if (g->C % g->G || g->O % g->G)
    return lu_error(LUON_ESHAPE, "%s: %lld groups must divide both the %lld input and the %lld "
                    "output channels", op, (long long)g->G, (long long)g->C, (long long)g->O);
  int64_t span[3];
  for (int d = 0; d < 3; d++) span[d] = g->n[d] + 2 * g->p[d] - g->dl[d] * (g->k[d] - 1) - 1;
  for (int d = 0; d < 3; d++)
    if (g->k[d] < 1 || span[d] < 0)
      return lu_error(LUON_ESHAPE, "%s: kernel (%lld,%lld,%lld) with dilation (%lld,%lld,%lld) does not fit "
                      "the input (%lld,%lld,%lld) padded by (%lld,%lld,%lld): the output would be empty", op,
                      T3(g->k), T3(g->dl), T3(g->n), T3(g->p));
  for (int d = 0; d < 3; d++) g->o[d] = span[d] / g->s[d] + 1;
  g->Cg = g->C / g->G, g->Og = g->O / g->G;
  g->K = g->Cg * g->k[0] * g->k[1] * g->k[2];
  g->P = g->o[0] * g->o[1] * g->o[2];
  g->V = g->n[0] * g->n[1] * g->n[2];
  return LUON_OK;
}

static luon_status check_float(const char *op, const luon_tensor *a, const char *an, const luon_tensor *b,
                               const char *bn) {
  if (a->dtype != LUON_DTYPE_F32 && a->dtype != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "%s: %s is %s; 3-d convolution takes float32 or float64", op, an,
                    luon_dtype_name(a->dtype));
  if (b->dtype != a->dtype)
    return lu_error(LUON_EDTYPE, "%s: %s is %s but %s is %s; cast one with astype", op, an,
                    luon_dtype_name(a->dtype), bn, luon_dtype_name(b->dtype));
  return LUON_OK;
}

static luon_status check_5d(const char *op, const luon_tensor *t, const char *what, const char *layout) {
  if (t->ndim != 5)
    return lu_error(LUON_ESHAPE, "%s: %s must be 5-d %s, got shape %s", op, what, layout,
                    lu_shape_str(t->ndim, t->shape));
  return LUON_OK;
}

/* dy must be (N,O,OD,OH,OW) for the geometry. */
static luon_status check_dy(const char *op, const luon_tensor *dy, const geom3 *g) {
  int64_t want[5] = {g->N, g->O, g->o[0], g->o[1], g->o[2]};
  if (memcmp(dy->shape, want, sizeof want) != 0)
    return lu_error(LUON_ESHAPE, "%s: the output gradient has shape %s but the convolution gives %s", op,
                    lu_shape_str(5, dy->shape), lu_shape_str(5, want));
  return LUON_OK;
}

/* x, w[, b] -> the forward's geometry */
static luon_status fwd_geom(const lu_call *c, geom3 *g) {
  const char *op = "conv3d";
  if (c->nin != 2 && c->nin != 3)
    return lu_error(LUON_EINVAL, "%s: takes x, weight and an optional bias, got %d inputs", op, c->nin);
  const luon_tensor *x = c->in[0], *w = c->in[1];
  LU_TRY(check_5d(op, x, "the input", "(N,C,D,H,W)"));
  LU_TRY(check_5d(op, w, "the weight", "(O,C/groups,KD,KH,KW)"));
  LU_TRY(check_float(op, x, "the input", w, "the weight"));
  LU_TRY(read_attrs(op, c->attrs, g));
  g->N = x->shape[0], g->C = x->shape[1], g->O = w->shape[0];
  for (int d = 0; d < 3; d++) g->n[d] = x->shape[2 + d], g->k[d] = w->shape[2 + d];
  if (w->shape[1] * g->G != g->C)
    return lu_error(LUON_ESHAPE, "%s: input has %lld channels but weight expects %lld (%lld per group, "
                    "%lld groups) (input %s, weight %s)", op, (long long)g->C, (long long)(w->shape[1] * g->G),
                    (long long)w->shape[1], (long long)g->G, lu_shape_str(5, x->shape), lu_shape_str(5, w->shape));
  if (c->nin == 3) {
    const luon_tensor *b = c->in[2];
    LU_TRY(check_float(op, x, "the input", b, "the bias"));
    if (b->ndim != 1 || b->shape[0] != g->O)
      return lu_error(LUON_ESHAPE, "%s: bias must have shape (%lld,) for %lld output channels, got %s", op,
                      (long long)g->O, (long long)g->O, lu_shape_str(b->ndim, b->shape));
  }
  return finish_geom(op, g);
}

static luon_status need_extra(const char *op, const luon_attrs *a, const char *what) {
  if (a->ni < LU_NI_conv3d_grad_input)
    return lu_error(LUON_EINVAL, "%s: needs conv3d's %d attributes plus %s, got %d attributes", op,
                    LU_NI_conv3d, what, a->ni);
  return LUON_OK;
}

/* dy (N,O,OD,OH,OW), w (O,C/G,KD,KH,KW), the input's D,H,W -> dx (N,C,D,H,W) */
static luon_status gin_geom(const lu_call *c, geom3 *g) {
  const char *op = "conv3d_grad_input";
  const luon_tensor *dy = c->in[0], *w = c->in[1];
  LU_TRY(check_5d(op, dy, "the output gradient", "(N,O,OD,OH,OW)"));
  LU_TRY(check_5d(op, w, "the weight", "(O,C/groups,KD,KH,KW)"));
  LU_TRY(check_float(op, dy, "the output gradient", w, "the weight"));
  LU_TRY(read_attrs(op, c->attrs, g));
  LU_TRY(need_extra(op, c->attrs, "the input's D, H, W"));
  g->N = dy->shape[0], g->C = w->shape[1] * g->G, g->O = w->shape[0];
  for (int d = 0; d < 3; d++) g->n[d] = c->attrs->i[LU_CONV3D_GRAD_INPUT_D + d], g->k[d] = w->shape[2 + d];
  if (g->n[0] < 1 || g->n[1] < 1 || g->n[2] < 1)
    return lu_error(LUON_EINVAL, "%s: input size (%lld,%lld,%lld) must be positive", op, T3(g->n));
  LU_TRY(finish_geom(op, g));
  return check_dy(op, dy, g);
}

/* x (N,C,D,H,W), dy (N,O,OD,OH,OW), the kernel's KD,KH,KW -> dw (O,C/G,KD,KH,KW) */
static luon_status gw_geom(const lu_call *c, geom3 *g) {
  const char *op = "conv3d_grad_weight";
  const luon_tensor *x = c->in[0], *dy = c->in[1];
  LU_TRY(check_5d(op, x, "the input", "(N,C,D,H,W)"));
  LU_TRY(check_5d(op, dy, "the output gradient", "(N,O,OD,OH,OW)"));
  LU_TRY(check_float(op, x, "the input", dy, "the output gradient"));
  LU_TRY(read_attrs(op, c->attrs, g));
  LU_TRY(need_extra(op, c->attrs, "the kernel's KD, KH, KW"));
  g->N = x->shape[0], g->C = x->shape[1], g->O = dy->shape[1];
  for (int d = 0; d < 3; d++) g->n[d] = x->shape[2 + d], g->k[d] = c->attrs->i[LU_CONV3D_GRAD_WEIGHT_KD + d];
  LU_TRY(finish_geom(op, g));
  return check_dy(op, dy, g);
}

static void set_out5(lu_call *c, int32_t dt, int64_t a, int64_t b, const int64_t s[3]) {
  c->nout = 1;
  c->out_dtype[0] = dt;
  c->out_ndim[0] = 5;
  int64_t v[5] = {a, b, s[0], s[1], s[2]};
  memcpy(c->out_shape[0], v, sizeof v);
}

luon_status lu_shape_conv3d(lu_call *c) {
  geom3 g;
  LU_TRY(fwd_geom(c, &g));
  set_out5(c, c->in[0]->dtype, g.N, g.O, g.o);
  return LUON_OK;
}

luon_status lu_shape_conv3d_grad_input(lu_call *c) {
  geom3 g;
  LU_TRY(gin_geom(c, &g));
  set_out5(c, c->in[0]->dtype, g.N, g.C, g.n);
  return LUON_OK;
}

luon_status lu_shape_conv3d_grad_weight(lu_call *c) {
  geom3 g;
  LU_TRY(gw_geom(c, &g));
  set_out5(c, c->in[0]->dtype, g.O, g.Cg, g.k);
  return LUON_OK;
}

/* ---- naive reference kernels (LUON_REF_KERNELS=1) -------------------------------- */

/* Input offset within a (D,H,W) volume of output position `op` (flat over
 * (OD,OH,OW)) and tap `t` (flat over (KD,KH,KW)), or -1 in the padding. */
static int64_t tap(const geom3 *g, int64_t op, int64_t t) {
  int64_t o[3] = {op / (g->o[1] * g->o[2]), op / g->o[2] % g->o[1], op % g->o[2]};
  int64_t k[3] = {t / (g->k[1] * g->k[2]), t / g->k[2] % g->k[1], t % g->k[2]};
  int64_t off = 0;
  for (int d = 0; d < 3; d++) {
    int64_t i = o[d] * g->s[d] - g->p[d] + k[d] * g->dl[d];
    if (i < 0 || i >= g->n[d]) return -1;
    off = off * g->n[d] + i;
  }
  return off;
}

/* y (dx NULL, dw NULL), or dx, or dw from x, w, dy: the sums as written above */
static void conv3_ref(const geom3 *g, int32_t dt, const char *x, const char *w, const char *b, const char *dy,
                      char *y, char *dx, char *dw) {
  int64_t KT = g->k[0] * g->k[1] * g->k[2];
  int64_t nx = g->N * g->C * g->V, nw = g->O * g->K;
  double *acc = dx || dw ? calloc((size_t)(dx ? nx : nw) + 1, sizeof(double)) : NULL;
  if ((dx || dw) && !acc) return;
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t o = 0; o < g->O; o++)
      for (int64_t q = 0; q < g->P; q++) {
        int64_t yi = (n * g->O + o) * g->P + q, c0 = o / g->Og * g->Cg;
        double s = b ? ld(b, dt, o) : 0, d = dy ? ld(dy, dt, yi) : 0;
        for (int64_t c = 0; c < g->Cg; c++)
          for (int64_t t = 0; t < KT; t++) {
            int64_t off = tap(g, q, t);
            if (off < 0) continue;
            int64_t xi = (n * g->C + c0 + c) * g->V + off, wi = (o * g->Cg + c) * KT + t;
            if (dx) acc[xi] += d * ld(w, dt, wi);
            else if (dw) acc[wi] += d * ld(x, dt, xi);
            else s += ld(w, dt, wi) * ld(x, dt, xi);
          }
        if (!dx && !dw) st(y, dt, yi, s);
      }
  for (int64_t k = 0; acc && k < (dx ? nx : nw); k++) st(dx ? dx : dw, dt, k, acc[k]);
  free(acc);
}

/* ---- vol2col and col2vol -------------------------------------------------------- */

/* x (Cg,D,H,W) of one sample and group -> col (K,P), row (c,r,p,q), column
 * (e,i,j). col2vol adds col back into dx (Cg,D,H,W), which the caller zeroed.
 * Both stop between channels after luon_interrupt. */
#define GEN_VOL(T, S)                                                                          \
  static void vol2col_##S(const geom3 *g, const T *x, T *col) {                                \
    int64_t KT = g->k[0] * g->k[1] * g->k[2];                                                  \
    for (int64_t c = 0; c < g->Cg && !lu_interrupted(); c++)                                   \
      for (int64_t t = 0; t < KT; t++) {                                                       \
        T *r = col + (c * KT + t) * g->P;                                                      \
        const T *xc = x + c * g->V;                                                            \
        for (int64_t q = 0; q < g->P; q++) {                                                   \
          int64_t off = tap(g, q, t);                                                          \
          r[q] = off < 0 ? (T)0 : xc[off];                                                     \
        }                                                                                      \
      }                                                                                        \
  }                                                                                            \
  static void col2vol_##S(const geom3 *g, const T *col, T *dx) {                               \
    int64_t KT = g->k[0] * g->k[1] * g->k[2];                                                  \
    for (int64_t c = 0; c < g->Cg && !lu_interrupted(); c++)                                   \
      for (int64_t t = 0; t < KT; t++) {                                                       \
        const T *r = col + (c * KT + t) * g->P;                                                \
        T *xc = dx + c * g->V;                                                                 \
        for (int64_t q = 0; q < g->P; q++) {                                                   \
          int64_t off = tap(g, q, t);                                                          \
          if (off >= 0) xc[off] += r[q];                                                       \
        }                                                                                      \
      }                                                                                        \
  }
GEN_VOL(float, f32)
GEN_VOL(double, f64)

static void vol2col(int32_t dt, const geom3 *g, const char *x, char *col) {
  if (dt == LUON_DTYPE_F32) vol2col_f32(g, (const float *)x, (float *)col);
  else vol2col_f64(g, (const double *)x, (double *)col);
}
static void col2vol(int32_t dt, const geom3 *g, const char *col, char *dx) {
  if (dt == LUON_DTYPE_F32) col2vol_f32(g, (const float *)col, (float *)dx);
  else col2vol_f64(g, (const double *)col, (double *)dx);
}

/* ---- the three kernels: per sample and group, one GEMM each ------------------------ */

enum { FWD, GIN, GW };

/* OpenBLAS loaded and the per-sample matrices within its int sizes. */
static luon_status check_blas3(const char *op, const geom3 *g) {
  LU_TRY(lu_blas_ready());
  int64_t m = g->K * (g->P > g->O ? g->P : g->O);
  if (g->K > INT_MAX || g->P > INT_MAX || g->O > INT_MAX || m > INT_MAX)
    return lu_error(LUON_EUNSUPPORTED, "%s: a per-sample matrix of (%lld,%lld) exceeds what BLAS takes", op,
                    (long long)g->K, (long long)g->P);
  return LUON_OK;
}

/* Samples one after another (lu_sgemm splits each product over the threads):
 *   FWD  yn_g (Og,P) = W_g (Og,K) @ col(xn_g) (K,P) + b
 *   GIN  dxn_g = col2vol(W_g^T (K,Og) @ dyn_g (Og,P))
 *   GW   dw_g (Og,K) += dyn_g (Og,P) @ col(xn_g)^T (P,K) */
static luon_status run(lu_call *c, int kind, const char *op, const geom3 *g) {
  if (c->out[0]->size == 0) return LUON_OK;
  int32_t dt = c->in[0]->dtype;
  int64_t es = luon_dtype_size(dt);
  dense d;
  LU_TRY(lu_conv_dense_get(op, c, &d));
  const char *bias = kind == FWD && c->nin == 3 ? d.in[2] : NULL;
  if (lu_ref_kernels() || g->K == 0) {
    if (kind == FWD) conv3_ref(g, dt, d.in[0], d.in[1], bias, NULL, d.out, NULL, NULL);
    else if (kind == GIN) conv3_ref(g, dt, NULL, d.in[1], NULL, d.in[0], NULL, d.out, NULL);
    else conv3_ref(g, dt, d.in[0], NULL, NULL, d.in[1], NULL, NULL, d.out);
    lu_conv_dense_done(c, &d);
    return LUON_OK;
  }
  luon_status s = check_blas3(op, g);
  char *col = s == LUON_OK ? lu_scratch_alloc((size_t)(g->K * g->P * es) + 1) : NULL;
  if (s == LUON_OK && !col)
    s = lu_error(LUON_ENOMEM, "%s: out of host memory for a vol2col buffer of (%lld,%lld)", op, (long long)g->K,
                 (long long)g->P);
  if (s != LUON_OK) {
    lu_conv_dense_done(c, &d);
    return s;
  }
  if (kind == GW) memset(d.out, 0, (size_t)(g->O * g->K * es));
  for (int64_t n = 0; n < g->N && !lu_interrupted(); n++)
    for (int64_t gi = 0; gi < g->G; gi++) {
      int64_t xo = (n * g->C + gi * g->Cg) * g->V * es, yo = (n * g->O + gi * g->Og) * g->P * es;
      int64_t wo = gi * g->Og * g->K * es;
      if (kind == FWD) {
        char *yg = d.out + yo;
        vol2col(dt, g, d.in[0] + xo, col);
        for (int64_t o = 0; o < g->Og; o++)
          for (int64_t q = 0; q < g->P; q++) st(yg, dt, o * g->P + q, bias ? ld(bias, dt, gi * g->Og + o) : 0);
        gemm(dt, false, false, g->Og, g->P, g->K, d.in[1] + wo, g->K, col, g->P, 1, yg, g->P);
      } else if (kind == GIN) {
        char *dxg = d.out + xo;
        gemm(dt, true, false, g->K, g->P, g->Og, d.in[1] + wo, g->K, d.in[0] + yo, g->P, 0, col, g->P);
        memset(dxg, 0, (size_t)(g->Cg * g->V * es));
        col2vol(dt, g, col, dxg);
      } else {
        vol2col(dt, g, d.in[0] + xo, col);
        gemm(dt, false, true, g->Og, g->K, g->P, d.in[1] + yo, g->P, col, g->P, 1, d.out + wo, g->K);
      }
    }
  lu_scratch_free(col);
  lu_conv_dense_done(c, &d);
  return LUON_OK;
}

luon_status lu_cpu_conv3d(lu_call *c) {
  geom3 g;
  LU_TRY(fwd_geom(c, &g));
  return run(c, FWD, "conv3d", &g);
}

luon_status lu_cpu_conv3d_grad_input(lu_call *c) {
  geom3 g;
  LU_TRY(gin_geom(c, &g));
  return run(c, GIN, "conv3d_grad_input", &g);
}

luon_status lu_cpu_conv3d_grad_weight(lu_call *c) {
  geom3 g;
  LU_TRY(gw_geom(c, &g));
  return run(c, GW, "conv3d_grad_weight", &g);
}

/* ---- backward rules ------------------------------------------------------------ */

/* conv3d's slots up to its groups, as the forward read them */
static void base_attrs(const luon_attrs *from, luon_attrs *a) {
  memset(a, 0, sizeof *a);
  for (int k = 0; k <= LU_CONV3D_GROUPS; k++) a->i[k] = k < from->ni ? from->i[k] : defaults[k];
  a->ni = LU_CONV3D_GROUPS + 1;
}

/* dw = conv3d_grad_weight(x, dy) with w's kernel sizes */
static luon_status grad_weight(const luon_attrs *from, luon_tensor *x, luon_tensor *dy, const luon_tensor *w,
                               luon_tensor **dw) {
  luon_attrs a;
  base_attrs(from, &a);
  for (int d = 0; d < 3; d++) a.i[LU_CONV3D_GRAD_WEIGHT_KD + d] = w->shape[2 + d];
  a.ni = LU_NI_conv3d_grad_weight;
  return lu_run(LU_OP_conv3d_grad_weight, &a, dw, 2, x, dy);
}

/* y = conv3d(x, w, b):
 *   dx = conv3d_grad_input(dy, w)     the transposed convolution of dy
 *   dw = conv3d_grad_weight(x, dy)    dy correlated with x, summed over the batch
 *   db = sum(dy, axes 0, 2, 3, 4)     each output channel's bias adds to every position */
luon_status lu_grad_conv3d(lu_grad_call *gc) {
  luon_tensor *dy = gc->dout[0], *x = gc->in[0], *w = gc->in[1];
  if (!dy) return LUON_OK;
  if (gc->need[0]) {
    luon_attrs a;
    base_attrs(gc->attrs, &a);
    for (int d = 0; d < 3; d++) a.i[LU_CONV3D_GRAD_INPUT_D + d] = x->shape[2 + d];
    a.ni = LU_NI_conv3d_grad_input;
    LU_TRY(lu_run(LU_OP_conv3d_grad_input, &a, &gc->din[0], 2, dy, w));
  }
  if (gc->need[1]) LU_TRY(grad_weight(gc->attrs, x, dy, w, &gc->din[1]));
  if (gc->nin == 3 && gc->need[2]) {
    luon_attrs s;
    memset(&s, 0, sizeof s);
    s.i[LU_REDUCE_KEEPDIMS] = 0;
    s.i[LU_REDUCE_AXES] = 0, s.i[LU_REDUCE_AXES + 1] = 2, s.i[LU_REDUCE_AXES + 2] = 3, s.i[LU_REDUCE_AXES + 3] = 4;
    s.ni = LU_REDUCE_AXES + 4;
    LU_TRY(lu_run(LU_OP_sum, &s, &gc->din[2], 1, dy));
  }
  return LUON_OK;
}

/* dx = conv3d_grad_input(dy, w), linear in both (the 3-d transposed convolution):
 *   d dy = conv3d(ddx, w)                  the convolution it transposes
 *   d w  = conv3d_grad_weight(ddx, dy)     ddx in the input's place */
luon_status lu_grad_conv3d_grad_input(lu_grad_call *gc) {
  luon_tensor *ddx = gc->dout[0], *dy = gc->in[0], *w = gc->in[1];
  if (!ddx) return LUON_OK;
  if (gc->need[0]) {
    luon_attrs a;
    base_attrs(gc->attrs, &a);
    LU_TRY(lu_run(LU_OP_conv3d, &a, &gc->din[0], 2, ddx, w));
  }
  if (gc->need[1]) LU_TRY(grad_weight(gc->attrs, ddx, dy, w, &gc->din[1]));
  return LUON_OK;
}
