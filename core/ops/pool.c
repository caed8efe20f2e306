/* pool.c: 2-d max and average pooling in NCHW (kernel, stride, zero padding,
 * ceil_mode, global) and their gradients, and the same in 3-d (NCDHW, a
 * direct kernel at the end). Not here: adaptive or LP pooling; 1-d pooling is
 * the 2-d op with H = 1 (npx.pooling).
 *   y[n,c,i,j] = max or mean of x[n,c, i*sh-ph+p, j*sw-pw+q] over p < KH, q < KW
 *   (max ignores the padding; mean counts it when count_include_pad, MXNet's default) */
#include "internal.h"
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>


typedef struct pgeom {
  int64_t N, C, H, W;
  int64_t KH, KW, sh, sw, ph, pw;
  int64_t OH, OW;
  bool incl_pad;
} pgeom;

/* ---- shapes ------------------------------------------------------------------ */

/* Output size along one axis. MXNet's 'valid' (floor) and 'full' (ceil)
 * conventions; with ceil the last window must start inside the input or its
 * left padding (as PyTorch), so that no window is all padding. */
static int64_t out_size(int64_t n, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t span = n + 2 * p - k;
  if (!ceil_mode) return span / s + 1;
  int64_t o = (span + s - 1) / s + 1;
  if ((o - 1) * s >= n + p) o--;
  return o;
}

luon_status lu_pool_win_make(const char *op, const int64_t a[7], int64_t N, int64_t C, int64_t H,
                             int64_t W, lu_pool_win *w) {
  int64_t shape[4] = {N, C, H, W};
  w->H = H, w->W = W, w->KH = a[LU_POOL_KERNEL_H], w->KW = a[LU_POOL_KERNEL_W];
  w->sh = a[LU_POOL_STRIDE_H], w->sw = a[LU_POOL_STRIDE_W], w->ph = a[LU_POOL_PAD_H], w->pw = a[LU_POOL_PAD_W];
  if (w->KH < 1 || w->KW < 1)
    return lu_error(LUON_EINVAL, "%s: kernel must be at least 1, got (%lld,%lld)", op, (long long)w->KH,
                    (long long)w->KW);
  if (w->sh < 1 || w->sw < 1)
    return lu_error(LUON_EINVAL, "%s: strides must be at least 1, got (%lld,%lld)", op, (long long)w->sh,
                    (long long)w->sw);
  if (w->ph < 0 || w->pw < 0)
    return lu_error(LUON_EINVAL, "%s: padding must be at least 0, got (%lld,%lld)", op, (long long)w->ph,
                    (long long)w->pw);
  if (w->ph >= w->KH || w->pw >= w->KW)
    return lu_error(LUON_EINVAL, "%s: padding (%lld,%lld) must be smaller than the kernel (%lld,%lld)", op,
                    (long long)w->ph, (long long)w->pw, (long long)w->KH, (long long)w->KW);
  if (H + 2 * w->ph < w->KH || W + 2 * w->pw < w->KW)
    return lu_error(LUON_ESHAPE, "%s: kernel (%lld,%lld) is larger than the input %s padded by (%lld,%lld)",
                    op, (long long)w->KH, (long long)w->KW, lu_shape_str(4, shape), (long long)w->ph,
                    (long long)w->pw);
  w->OH = out_size(H, w->KH, w->sh, w->ph, a[LU_POOL_CEIL] != 0);
  w->OW = out_size(W, w->KW, w->sw, w->pw, a[LU_POOL_CEIL] != 0);
  return LUON_OK;
}

static luon_status pool_geom(const lu_call *c, const luon_tensor *x, pgeom *g) {
  const char *op = lu_ops[c->op].name;
  *g = (pgeom){0};
  const luon_attrs *a = c->attrs;
  if (x->ndim != 4)
    return lu_error(LUON_ESHAPE, "%s: the input must be 4-d (N,C,H,W), got shape %s", op,
                    lu_shape_str(x->ndim, x->shape));
  if (!lu_dtype_is_float(x->dtype))
    return lu_error(LUON_EDTYPE, "%s: the input is %s; pooling takes float32 or float64", op,
                    luon_dtype_name(x->dtype));
  g->N = x->shape[0], g->C = x->shape[1], g->H = x->shape[2], g->W = x->shape[3];
  bool global = a->ni > LU_POOL_GLOBAL && a->i[LU_POOL_GLOBAL] != 0;
  g->incl_pad = a->ni <= LU_POOL_COUNT_PAD || a->i[LU_POOL_COUNT_PAD] != 0;
  if (global) {
    if (g->H < 1 || g->W < 1)
      return lu_error(LUON_ESHAPE, "%s: kernel (%lld,%lld) is larger than the input %s padded by (0,0)", op,
                      (long long)g->H, (long long)g->W, lu_shape_str(4, x->shape));
    g->KH = g->H, g->KW = g->W, g->sh = g->sw = 1, g->ph = g->pw = 0, g->OH = g->OW = 1;
    return LUON_OK;
  }
  if (a->ni <= LU_POOL_KERNEL_W)
    return lu_error(LUON_EINVAL, "%s: needs the kernel size in i[0..1] (or global pooling), got %d "
                    "attributes", op, a->ni);
  /* left out (each pair as one): stride = kernel, pad 0, no ceil_mode */
  bool stride = a->ni > LU_POOL_STRIDE_W, pad = a->ni > LU_POOL_PAD_W;
  int64_t v[LU_POOL_CEIL + 1];
  v[LU_POOL_KERNEL_H] = a->i[LU_POOL_KERNEL_H], v[LU_POOL_KERNEL_W] = a->i[LU_POOL_KERNEL_W];
  v[LU_POOL_STRIDE_H] = a->i[stride ? LU_POOL_STRIDE_H : LU_POOL_KERNEL_H];
  v[LU_POOL_STRIDE_W] = a->i[stride ? LU_POOL_STRIDE_W : LU_POOL_KERNEL_W];
  v[LU_POOL_PAD_H] = pad ? a->i[LU_POOL_PAD_H] : 0, v[LU_POOL_PAD_W] = pad ? a->i[LU_POOL_PAD_W] : 0;
  v[LU_POOL_CEIL] = a->ni > LU_POOL_CEIL ? a->i[LU_POOL_CEIL] : 0;
  lu_pool_win w;
  LU_TRY(lu_pool_win_make(op, v, g->N, g->C, g->H, g->W, &w));
  g->KH = w.KH, g->KW = w.KW, g->sh = w.sh, g->sw = w.sw, g->ph = w.ph, g->pw = w.pw;
  g->OH = w.OH, g->OW = w.OW;
  return LUON_OK;
}

static luon_status pool_shape(lu_call *c) {
  pgeom g;
  LU_TRY(pool_geom(c, c->in[0], &g));
  c->nout = 1;
  c->out_dtype[0] = c->in[0]->dtype;
  c->out_ndim[0] = 4;
  int64_t s[4] = {g.N, g.C, g.OH, g.OW};
  memcpy(c->out_shape[0], s, sizeof s);
  return LUON_OK;
}

/* x, dy -> dx of x's shape; dy must have the pooled shape and x's dtype. */
static luon_status pool_grad_shape(lu_call *c) {
  const char *op = lu_ops[c->op].name;
  const luon_tensor *x = c->in[0], *dy = c->in[1];
  pgeom g;
  LU_TRY(pool_geom(c, x, &g));
  int64_t want[4] = {g.N, g.C, g.OH, g.OW};
  if (dy->ndim != 4 || memcmp(dy->shape, want, sizeof want) != 0)
    return lu_error(LUON_ESHAPE, "%s: the output gradient has shape %s but pooling the input %s gives %s",
                    op, lu_shape_str(dy->ndim, dy->shape), lu_shape_str(4, x->shape),
                    lu_shape_str(4, want));
  if (dy->dtype != x->dtype)
    return lu_error(LUON_EDTYPE, "%s: the input is %s but the output gradient is %s; cast one with astype",
                    op, luon_dtype_name(x->dtype), luon_dtype_name(dy->dtype));
  c->nout = 1;
  c->out_dtype[0] = x->dtype;
  c->out_ndim[0] = 4;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * 4);
  return LUON_OK;
}

luon_status lu_shape_max_pool2d(lu_call *c) { return pool_shape(c); }
luon_status lu_shape_avg_pool2d(lu_call *c) { return pool_shape(c); }
luon_status lu_shape_max_pool2d_grad(lu_call *c) { return pool_grad_shape(c); }
luon_status lu_shape_avg_pool2d_grad(lu_call *c) { return pool_grad_shape(c); }

/* ---- windows ------------------------------------------------------------------ */

/* Rows [*h0, *h1) of the input under output row i (clipped to the input), and
 * the average's divisor for it: the window clipped to the padded input when
 * padding counts, else to the input. */
static void window(int64_t i, int64_t s, int64_t p, int64_t k, int64_t n, bool incl, int64_t *h0,
                   int64_t *h1, int64_t *count) {
  int64_t a = i * s - p, b = a + k;
  int64_t pb = b < n + p ? b : n + p;
  *h0 = a > 0 ? a : 0;
  *h1 = b < n ? b : n;
  *count = incl ? pb - a : *h1 - *h0;
}

/* Output columns j in [*lo, *hi) read input column j*s + off inside [0, W). */
static void span(int64_t off, int64_t s, int64_t W, int64_t OW, int64_t *lo, int64_t *hi) {
  int64_t a = off < 0 ? (-off + s - 1) / s : 0;
  int64_t b = W - off > 0 ? (W - off + s - 1) / s : 0;
  if (b > OW) b = OW;
  if (a > b) a = b;
  *lo = a, *hi = b;
}

/* ---- NaN in max pooling ---------------------------------------------------------- */

/* Max pooling skips NaN, as MXNet's does (LU_POOL_TAKES, internal.h); the
 * first maximum wins a tie. So the value and its position do not depend on
 * the order of the search. The fast kernels compare with > alone (vmaxps), which
 * gives the same unless a search starts from NaN (a window's first value, or
 * a column's in the separable kernels: a NaN that comes later loses every
 * compare); they look for NaN there and hand those rows to win_max, the rule
 * itself. pool.cu and conv_maxpool.c keep the same rule. */

/* 1 where x is NaN, from its bits (a test gcc vectorises, where x != x in
 * a loop with others is compared lane by lane) */
static inline uint32_t nan_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x7fffffffu) > 0x7f800000u;
}
static inline uint32_t nan_f64(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}
/* any NaN among p[0..n) (a plain function: clang links no target-clone set
 * called from another file, conv_maxpool.c here) */
bool lu_any_nan_f32(const float *p, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad |= nan_f32(p[i]);
  return bad != 0;
}

/* The window [h0,h1) x [w0,w1) of plane x (row length W) by LU_POOL_TAKES, in
 * row-major order: its value, and *at its offset in the plane. */
#define GEN_WIN_MAX(T, S)                                                                          \
  static T win_max_##S(const T *x, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1,      \
                       int64_t *at) {                                                              \
    T best = x[h0 * W + w0];                                                                       \
    *at = h0 * W + w0;                                                                             \
    for (int64_t h = h0; h < h1; h++)                                                              \
      for (int64_t w = w0; w < w1; w++)                                                            \
        if (LU_POOL_TAKES(x[h * W + w], best)) best = x[h * W + w], *at = h * W + w;               \
    return best;                                                                                   \
  }
GEN_WIN_MAX(float, f32)
GEN_WIN_MAX(double, f64)

/* ---- naive reference kernels --------------------------------------------------- */

static double ld(const char *p, int32_t dt, int64_t i) {
  return dt == LUON_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static void st(char *p, int32_t dt, int64_t i, double v) {
  if (dt == LUON_DTYPE_F32) ((float *)p)[i] = (float)v;
  else ((double *)p)[i] = v;
}

/* x (N,C,H,W) -> y (N,C,OH,OW); with dy given, dx instead (which starts at 0):
 * max routes dy to the first maximum of the window, avg spreads dy / count. */
static void pool_ref(const pgeom *g, int32_t dt, bool is_max, const char *x, char *y, const char *dy,
                     char *dx) {
  if (dx)
    for (int64_t k = 0; k < g->N * g->C * g->H * g->W; k++) st(dx, dt, k, 0);
  for (int64_t pl = 0; pl < g->N * g->C; pl++)
    for (int64_t i = 0; i < g->OH; i++)
      for (int64_t j = 0; j < g->OW; j++) {
        int64_t h0, h1, w0, w1, ch, cw;
        window(i, g->sh, g->ph, g->KH, g->H, g->incl_pad, &h0, &h1, &ch);
        window(j, g->sw, g->pw, g->KW, g->W, g->incl_pad, &w0, &w1, &cw);
        double best = -INFINITY, sum = 0;
        int64_t arg = -1, cnt = ch * cw;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            int64_t k = (pl * g->H + h) * g->W + w;
            double v = ld(x, dt, k);
            if (arg < 0 || LU_POOL_TAKES(v, best)) best = v, arg = k;
            sum += v;
          }
        int64_t o = (pl * g->OH + i) * g->OW + j;
        if (!dx) {
          st(y, dt, o, is_max ? best : cnt > 0 ? sum / (double)cnt : 0);
        } else if (is_max) {
          if (arg >= 0) st(dx, dt, arg, ld(dx, dt, arg) + ld(dy, dt, o));
        } else if (cnt > 0) {
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
              int64_t k = (pl * g->H + h) * g->W + w;
              st(dx, dt, k, ld(dx, dt, k) + ld(dy, dt, o) / (double)cnt);
            }
        }
      }
}

/* ---- fast kernels ------------------------------------------------------------- */

/* Planes (n,c) split across threads. Each output row is built tap by tap:
 * for each (p,q) of the window, in row-major order, one pass over the row's
 * columns j (vectorisable; strided by sw). Max keeps the first maximum (strict
 * >), and its input column for the backward; avg adds, then divides. */
typedef struct pjob {
  const pgeom *g;
  bool is_max;
  int64_t chunks;
  const char *x, *dy;
  char *y;               /* forward output or dx */
  char *scratch;         /* per chunk: positions, values, a padded row, its maxima */
  int64_t per_chunk;     /* bytes of scratch per chunk */
} pjob;

#define GEN_POOL(T, S)                                                                        \
  /* v[0..W) = max over rows [h0,h1) of the plane, contiguous; true where a column starts     \
   * from NaN (the row then goes to win_max) */                                                 \
  static TC bool vmax_##S(const T *restrict xp, int64_t W, int64_t h0, int64_t h1,             \
                          T *restrict v) {                                                      \
    uint32_t nan = 0;                                                                           \
    for (int64_t w = 0; w < W; w++) v[w] = xp[h0 * W + w], nan |= nan_##S(v[w]);               \
    if (nan) return true;                                                                       \
    for (int64_t h = h0 + 1; h < h1; h++) {                                                     \
      const T *restrict r = xp + h * W;                                                         \
      for (int64_t w = 0; w < W; w++) v[w] = r[w] > v[w] ? r[w] : v[w];                         \
    }                                                                                           \
    return false;                                                                               \
  }                                                                                             \
  /* m[t] = max of v[t..t+k) for t < n */                                                       \
  static TC void hmax_##S(const T *restrict v, int64_t n, int64_t k, T *restrict m) {          \
    memcpy(m, v, sizeof(T) * (size_t)n);                                                        \
    for (int64_t q = 1; q < k; q++)                                                             \
      for (int64_t t = 0; t < n; t++) m[t] = v[t + q] > m[t] ? v[t + q] : m[t];                 \
  }                                                                                             \
  /* v[w] = max over rows [h0,h1), r[w] = the first row holding it; true where a column       \
   * starts from NaN (as vmax) */                                                               \
  static TC bool vargmax_##S(const T *restrict xp, int64_t W, int64_t h0, int64_t h1,          \
                             T *restrict v, int32_t *restrict r) {                              \
    uint32_t nan = 0;                                                                           \
    for (int64_t w = 0; w < W; w++) v[w] = xp[h0 * W + w], nan |= nan_##S(v[w]);               \
    if (nan) return true;                                                                       \
    for (int64_t w = 0; w < W; w++) r[w] = (int32_t)h0;                                         \
    for (int64_t h = h0 + 1; h < h1; h++) {                                                     \
      const T *restrict x = xp + h * W;                                                         \
      for (int64_t w = 0; w < W; w++) {                                                         \
        int gt = x[w] > v[w];                                                                   \
        v[w] = gt ? x[w] : v[w];                                                                \
        r[w] = gt ? (int32_t)h : r[w];                                                          \
      }                                                                                         \
    }                                                                                           \
    return false;                                                                               \
  }                                                                                             \
  /* over v[t..t+k): the maximum with the smallest (row, column), for t < n */                 \
  static TC void hargmax_##S(const T *restrict v, const int32_t *restrict r, int64_t n,         \
                             int64_t k, T *restrict m, int32_t *restrict mr,                     \
                             int32_t *restrict mc) {                                            \
    for (int64_t t = 0; t < n; t++) m[t] = v[t], mr[t] = r[t], mc[t] = (int32_t)t;              \
    for (int64_t q = 1; q < k; q++)                                                             \
      for (int64_t t = 0; t < n; t++) {                                                         \
        T c = v[t + q];                                                                         \
        int32_t cr = r[t + q];                                                                  \
        int better = (c > m[t]) | ((c == m[t]) & (cr < mr[t]));                                 \
        m[t] = better ? c : m[t];                                                               \
        mr[t] = better ? cr : mr[t];                                                            \
        mc[t] = better ? (int32_t)(t + q) : mc[t];                                              \
      }                                                                                         \
  }                                                                                             \
  static TC void pool_sum_row_##S(const pgeom *g, const T *restrict xp, int64_t h0, int64_t h1, \
                                  T *restrict m) {                                              \
    for (int64_t j = 0; j < g->OW; j++) m[j] = 0;                                               \
    for (int64_t h = h0; h < h1; h++)                                                           \
      for (int64_t q = 0; q < g->KW; q++) {                                                     \
        int64_t off = q - g->pw, lo, hi;                                                        \
        span(off, g->sw, g->W, g->OW, &lo, &hi);                                                \
        const T *restrict r = xp + h * g->W + off;                                              \
        for (int64_t j = lo; j < hi; j++) m[j] += r[j * g->sw];                                 \
      }                                                                                         \
  }                                                                                             \
  static TC void avg_back_row_##S(const pgeom *g, T *restrict dxp, int64_t h0, int64_t h1,       \
                                  const T *restrict d) {                                        \
    for (int64_t h = h0; h < h1; h++)                                                           \
      for (int64_t q = 0; q < g->KW; q++) {                                                     \
        int64_t off = q - g->pw, lo, hi;                                                        \
        span(off, g->sw, g->W, g->OW, &lo, &hi);                                                \
        T *r = dxp + h * g->W + off;                                                            \
        for (int64_t j = lo; j < hi; j++) r[j * g->sw] += d[j];                                 \
      }                                                                                         \
  }                                                                                             \
  /* planes [chunk's share): forward (dy NULL) or backward into y = dx */                      \
  static void planes_##S(void *ctx, int64_t c0, int64_t c1) {                                   \
    const pjob *jb = ctx;                                                                       \
    const pgeom *g = jb->g;                                                                     \
    int64_t np = g->N * g->C, HW = g->H * g->W, OP = g->OH * g->OW;                             \
    int64_t WP = (g->OW - 1) * g->sw + g->KW; /* padded row the windows cover */               \
    for (int64_t ch = c0; ch < c1; ch++) {                                                      \
      /* six rows of L 8-byte slots: m, v, hm (values), vr, hr, hc (positions) */             \
      int64_t L = WP + g->W + g->pw;                                                            \
      T *m = (T *)(jb->scratch + ch * jb->per_chunk), *v = m + L, *hm = v + L;                  \
      int32_t *vr = (int32_t *)(jb->scratch + ch * jb->per_chunk + 24 * L), *hr = vr + L;       \
      int32_t *hc = hr + L;                                                                     \
      for (int64_t pl = np * ch / jb->chunks; pl < np * (ch + 1) / jb->chunks && !lu_interrupted(); pl++) { \
        const T *xp = (const T *)jb->x + pl * HW;                                               \
        T *dxp = (T *)jb->y + pl * HW;                                                          \
        if (jb->dy) memset(dxp, 0, sizeof(T) * (size_t)HW);                                     \
        for (int64_t i = 0; i < g->OH; i++) {                                                   \
          int64_t h0, h1, ch_, w0, w1, cw;                                                      \
          window(i, g->sh, g->ph, g->KH, g->H, g->incl_pad, &h0, &h1, &ch_);                    \
          T *yr = (T *)jb->y + pl * OP + i * g->OW;                                             \
          const T *dyr = jb->dy ? (const T *)jb->dy + pl * OP + i * g->OW : NULL;               \
          if (jb->is_max && dyr) {                                                              \
            /* the forward's two passes, keeping where each maximum came from */                \
            for (int64_t w = 0; w < g->pw; w++) v[w] = -INFINITY, vr[w] = INT32_MAX;            \
            for (int64_t w = g->pw + g->W; w < L; w++) v[w] = -INFINITY, vr[w] = INT32_MAX;     \
            if (vargmax_##S(xp, g->W, h0, h1, v + g->pw, vr + g->pw)) { /* NaN: the rule */      \
              for (int64_t j = 0; j < g->OW; j++) {                                             \
                int64_t at;                                                                     \
                window(j, g->sw, g->pw, g->KW, g->W, false, &w0, &w1, &cw);                     \
                win_max_##S(xp, g->W, h0, h1, w0, w1, &at);                                     \
                dxp[at] += dyr[j];                                                              \
              }                                                                                 \
              continue;                                                                         \
            }                                                                                   \
            int64_t n = (g->OW - 1) * g->sw + 1;                                                \
            hargmax_##S(v, vr, n, g->KW, hm, hr, hc);                                           \
            for (int64_t j = 0; j < g->OW; j++) {                                               \
              int64_t t = j * g->sw;                                                            \
              dxp[(int64_t)hr[t] * g->W + hc[t] - g->pw] += dyr[j];                             \
            }                                                                                   \
            continue;                                                                           \
          }                                                                                     \
          if (jb->is_max) {                                                                     \
            /* separable: rows first, then columns of the padded row */                        \
            for (int64_t w = 0; w < g->pw; w++) v[w] = -INFINITY;                               \
            for (int64_t w = g->pw + g->W; w < L; w++) v[w] = -INFINITY;                        \
            if (vmax_##S(xp, g->W, h0, h1, v + g->pw)) { /* a column starts from NaN: the rule */ \
              for (int64_t j = 0; j < g->OW; j++) {                                             \
                int64_t at;                                                                     \
                window(j, g->sw, g->pw, g->KW, g->W, false, &w0, &w1, &cw);                     \
                yr[j] = win_max_##S(xp, g->W, h0, h1, w0, w1, &at);                             \
              }                                                                                 \
              continue;                                                                         \
            }                                                                                   \
            int64_t n = (g->OW - 1) * g->sw + 1;                                                \
            hmax_##S(v, n, g->KW, hm);                                                          \
            for (int64_t j = 0; j < g->OW; j++) yr[j] = hm[j * g->sw];                          \
            continue;                                                                           \
          }                                                                                     \
          if (!dyr) pool_sum_row_##S(g, xp, h0, h1, m);                                         \
          for (int64_t j = 0; j < g->OW; j++) {                                                 \
            window(j, g->sw, g->pw, g->KW, g->W, g->incl_pad, &w0, &w1, &cw);                   \
            int64_t cnt = ch_ * cw;                                                             \
            if (!dyr) yr[j] = cnt > 0 ? m[j] / (T)cnt : 0;                                      \
            else m[j] = cnt > 0 ? dyr[j] / (T)cnt : 0;                                          \
          }                                                                                     \
          if (dyr) avg_back_row_##S(g, dxp, h0, h1, m);                                         \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }

GEN_POOL(float, f32)
GEN_POOL(double, f64)

/* Max-pool backward for float32, column stride 2, KW <= 4, no padding (as
 * LeafNetwork's MaxPool2D(4, 2)), AVX-512: 16 output columns at a time, the
 * window's columns 2j+q gathered from two loads by even/odd permutes; the
 * first maximum in row-major order (as the reference), then dy added at it
 * in the plane's dx, which stays in cache. */
static bool s2_ok(const pgeom *g) {
  return lu_cpu_avx512() && g->sw == 2 && g->KW <= 4 && g->pw == 0 && g->ph == 0;
}

/* the q-th window column, q < 4, for outputs j0..j0+15 of row xr (valid columns < W) */
__attribute__((target("avx512f"))) static inline __m512 s2_col(const float *xr, int64_t j0, int64_t W,
                                                               int q) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  int64_t c0 = 2 * j0 + (q & 2); /* first column of the two loads */
  int64_t n0 = W - c0, n1 = W - c0 - 16;
  __mmask16 m0 = n0 >= 16 ? 0xFFFF : n0 > 0 ? (__mmask16)((1u << n0) - 1) : 0;
  __mmask16 m1 = n1 >= 16 ? 0xFFFF : n1 > 0 ? (__mmask16)((1u << n1) - 1) : 0;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 a = _mm512_mask_loadu_ps(ninf, m0, xr + c0), b = _mm512_mask_loadu_ps(ninf, m1, xr + c0 + 16);
  return _mm512_permutex2var_ps(a, (q & 1) ? odd : even, b);
}

__attribute__((target("avx512f"))) static void s2_back_plane(const pgeom *g, const float *xp,
                                                             const float *dyp, float *dxp) {
  int64_t W = g->W;
  for (int64_t i = 0; i < g->OH; i++) {
    int64_t h0, h1, cnt;
    window(i, g->sh, 0, g->KH, g->H, false, &h0, &h1, &cnt);
    const float *dyr = dyp + i * g->OW;
    for (int64_t j0 = 0; j0 < g->OW; j0 += 16) {
      __m512 best = s2_col(xp + h0 * W, j0, W, 0);
      __m512i arg = _mm512_setzero_si512(); /* (h - h0) * W + q */
      for (int64_t h = h0; h < h1; h++)
        for (int q = h == h0 ? 1 : 0; q < g->KW; q++) {
          __m512 v = s2_col(xp + h * W, j0, W, q);
          __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
          best = _mm512_mask_mov_ps(best, gt, v);
          arg = _mm512_mask_mov_epi32(arg, gt, _mm512_set1_epi32((int)((h - h0) * W + q)));
        }
      int32_t at[16];
      _mm512_storeu_si512(at, arg);
      int64_t n = g->OW - j0 < 16 ? g->OW - j0 : 16;
      float *base = dxp + h0 * W + 2 * j0;
      __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q); /* a window starting from NaN */
      for (int64_t l = 0; l < n; l++) {
        if (nan >> l & 1) {
          int64_t c = 2 * (j0 + l), w1 = c + g->KW < W ? c + g->KW : W, k;
          win_max_f32(xp, W, h0, h1, c, w1, &k);
          at[l] = (int32_t)(k - h0 * W - c);
        }
        base[2 * l + at[l]] += dyr[j0 + l];
      }
    }
  }
}

static void s2_back_planes(void *ctx, int64_t c0, int64_t c1) {
  const pjob *jb = ctx;
  const pgeom *g = jb->g;
  int64_t np = g->N * g->C, HW = g->H * g->W, OP = g->OH * g->OW;
  for (int64_t pl = np * c0 / jb->chunks; pl < np * c1 / jb->chunks; pl++) {
    float *dxp = (float *)jb->y + pl * HW;
    memset(dxp, 0, sizeof(float) * (size_t)HW);
    s2_back_plane(g, (const float *)jb->x + pl * HW, (const float *)jb->dy + pl * OP, dxp);
  }
}

/* ---- max pooling with window indices, for conv2d_maxpool ------------------------ */

/* Separable, as the backward's search in planes_*: per output row, each
 * column's first maximum over the window's rows, then each window's maximum
 * with the smallest (row, column) over the padded row: the first maximum in
 * row-major order. float32 on AVX-512 keeps 16 columns in registers (gcc's
 * vectorisation of vargmax/hargmax goes through masked stores and reloads).
 * Scratch: lu_maxpool_argmax_scratch(w) bytes. */
#define AW 16

static int64_t argmax_row_len(const lu_pool_win *g) {
  return (g->OW - 1) * g->sw + g->KW + g->W + g->pw + 2 * AW;
}

size_t lu_maxpool_argmax_scratch(const lu_pool_win *g) { return (size_t)(40 * argmax_row_len(g) + 64); }

/* v[w], r[w] = each column's first maximum over rows [h0, h1) and its row;
 * true where a column starts from NaN (as vmax_f32) */
__attribute__((target("avx512f"))) static bool vargmax16(const float *xp, int64_t W, int64_t h0,
                                                          int64_t h1, float *v, int32_t *r) {
  for (int64_t w = 0; w < W; w += AW) {
    __mmask16 in = W - w >= AW ? 0xFFFF : (__mmask16)((1u << (W - w)) - 1);
    __m512 best = _mm512_maskz_loadu_ps(in, xp + h0 * W + w);
    if (_mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q)) return true; /* a column starts from NaN */
    __m512i row = _mm512_set1_epi32((int)h0);
    for (int64_t h = h0 + 1; h < h1; h++) {
      __m512 c = _mm512_maskz_loadu_ps(in, xp + h * W + w);
      __mmask16 gt = _mm512_cmp_ps_mask(c, best, _CMP_GT_OQ);
      best = _mm512_mask_blend_ps(gt, best, c);
      row = _mm512_mask_blend_epi32(gt, row, _mm512_set1_epi32((int)h));
    }
    _mm512_mask_storeu_ps(v + w, in, best);
    _mm512_mask_storeu_epi32(r + w, in, row);
  }
  return false;
}

/* Column stride 2: each window's first maximum over the padded row v (and
 * rows r), 16 outputs at a time, the window's columns 2j+q gathered from two
 * loads by even/odd permutes; y (+ bias, relu'd) and the window index
 * ((row - a) * KW + q, or 255 under relu where y is not above 0) of one
 * output row. */
__attribute__((target("avx512f"))) static void s2_row_out(const lu_pool_win *g, const float *v,
                                                           const int32_t *r, int64_t a, float bias,
                                                           bool relu, float *y, uint8_t *idx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int64_t j0 = 0; j0 < g->OW; j0 += AW) {
    __m512 best = _mm512_setzero_ps();
    __m512i br = _mm512_setzero_si512(), bq = _mm512_setzero_si512();
    for (int64_t q = 0; q < g->KW; q++) {
      int64_t c0 = 2 * j0 + (q & ~(int64_t)1);
      __m512i sel = (q & 1) ? odd : even;
      __m512 c = _mm512_permutex2var_ps(_mm512_loadu_ps(v + c0), sel, _mm512_loadu_ps(v + c0 + AW));
      __m512i cr = _mm512_permutex2var_epi32(_mm512_loadu_si512(r + c0), sel,
                                             _mm512_loadu_si512(r + c0 + AW));
      __mmask16 better = q == 0 ? (__mmask16)0xFFFF
                                : (__mmask16)(_mm512_cmp_ps_mask(c, best, _CMP_GT_OQ) |
                                              (_mm512_cmp_ps_mask(c, best, _CMP_EQ_OQ) &
                                               _mm512_cmplt_epi32_mask(cr, br)));
      best = _mm512_mask_blend_ps(better, best, c);
      br = _mm512_mask_blend_epi32(better, br, cr);
      bq = _mm512_mask_blend_epi32(better, bq, _mm512_set1_epi32((int)q));
    }
    __m512i k = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_sub_epi32(br, _mm512_set1_epi32((int)a)),
                                                    _mm512_set1_epi32((int)g->KW)), bq);
    best = _mm512_add_ps(best, _mm512_set1_ps(bias));
    if (relu) { /* not above 0: no gradient (255); 0 at most 0, NaN kept (as relu) */
      __mmask16 off = _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_NGT_UQ);
      k = _mm512_mask_blend_epi32(off, k, _mm512_set1_epi32(255));
      best = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_LE_OQ), best,
                                  _mm512_setzero_ps());
    }
    int64_t n = g->OW - j0 < AW ? g->OW - j0 : AW;
    __mmask16 m = (__mmask16)((1u << n) - 1);
    _mm512_mask_storeu_ps(y + j0, m, best);
    _mm512_mask_cvtepi32_storeu_epi8(idx + j0, m, k);
  }
}

/* over v[t..t+k): the maximum with the smallest (row, column), for t < n
 * (v and r readable to n + k + AW) */
__attribute__((target("avx512f"))) static void hargmax16(const float *v, const int32_t *r, int64_t n,
                                                          int64_t k, float *m, int32_t *mr, int32_t *mc) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t t = 0; t < n; t += AW) {
    __m512 best = _mm512_loadu_ps(v + t);
    __m512i br = _mm512_loadu_si512(r + t), bc = _mm512_add_epi32(lane, _mm512_set1_epi32((int)t));
    for (int64_t q = 1; q < k; q++) {
      __m512 c = _mm512_loadu_ps(v + t + q);
      __m512i cr = _mm512_loadu_si512(r + t + q);
      __mmask16 better = _mm512_cmp_ps_mask(c, best, _CMP_GT_OQ) |
                         (_mm512_cmp_ps_mask(c, best, _CMP_EQ_OQ) & _mm512_cmplt_epi32_mask(cr, br));
      best = _mm512_mask_blend_ps(better, best, c);
      br = _mm512_mask_blend_epi32(better, br, cr);
      bc = _mm512_mask_blend_epi32(better, bc, _mm512_add_epi32(lane, _mm512_set1_epi32((int)(t + q))));
    }
    _mm512_storeu_ps(m + t, best);
    _mm512_storeu_si512(mr + t, br);
    _mm512_storeu_si512(mc + t, bc);
  }
}

/* the same without AVX-512 */
static bool vargmax_any(const float *xp, int64_t W, int64_t h0, int64_t h1, float *v, int32_t *r) {
  if (lu_cpu_avx512()) return vargmax16(xp, W, h0, h1, v, r);
  return vargmax_f32(xp, W, h0, h1, v, r);
}
static void hargmax_any(const float *v, const int32_t *r, int64_t n, int64_t k, float *m, int32_t *mr,
                        int32_t *mc) {
  if (lu_cpu_avx512()) hargmax16(v, r, n, k, m, mr, mc);
  else hargmax_f32(v, r, n, k, m, mr, mc);
}

static bool s2_rows_ok(const lu_pool_win *g) { return g->sw == 2 && lu_cpu_avx512(); }
static bool no_s2(const lu_pool_win *g) { return false; }

#define GEN_ARGMAX(T, S, VARG, HARG, S2)                                                            \
  static void argmax_plane_##S(const lu_pool_win *g, const T *xp, T bias, T *y, uint8_t *idx,     \
                               bool relu, char *scratch) {                                      \
    int64_t L = argmax_row_len(g);                                                              \
    T *v = (T *)scratch, *hm = v + L;                                                           \
    int32_t *vr = (int32_t *)(scratch + 16 * L), *hr = vr + L, *hc = hr + L;                    \
    for (int64_t w = 0; w < g->pw; w++) v[w] = -INFINITY, vr[w] = INT32_MAX;                    \
    for (int64_t w = g->pw + g->W; w < L; w++) v[w] = -INFINITY, vr[w] = INT32_MAX;             \
    int64_t n = (g->OW - 1) * g->sw + 1;                                                        \
    for (int64_t i = 0; i < g->OH && bias != bias; i++) /* a NaN bias: windows of NaN alone */  \
      for (int64_t j = 0; j < g->OW; j++) {                                                     \
        int64_t a = i * g->sh - g->ph, b = j * g->sw - g->pw;                                   \
        y[i * g->OW + j] = bias; /* apart: NaN, at each window's first position */              \
        idx[i * g->OW + j] = relu ? 255 : (uint8_t)(((a > 0 ? a : 0) - a) * g->KW + (b > 0 ? b : 0) - b); \
      }                                                                                         \
    for (int64_t i = 0; i < g->OH && bias == bias; i++) {                                       \
      int64_t a = i * g->sh - g->ph, h0 = a > 0 ? a : 0, h1 = a + g->KH < g->H ? a + g->KH : g->H; \
      if (VARG(xp, g->W, h0, h1, v + g->pw, vr + g->pw)) { /* a column starts from NaN: the rule */ \
        for (int64_t j = 0; j < g->OW; j++) {                                                   \
          int64_t b = j * g->sw - g->pw, w0 = b > 0 ? b : 0, w1 = b + g->KW < g->W ? b + g->KW : g->W, at; \
          T m = win_max_##S(xp, g->W, h0, h1, w0, w1, &at) + bias;                              \
          bool off = relu && !(m > 0); /* no gradient; 0 at most 0, NaN kept (as relu) */       \
          y[i * g->OW + j] = relu && m <= 0 ? 0 : m;                                            \
          idx[i * g->OW + j] = off ? 255 : (uint8_t)((at / g->W - a) * g->KW + at % g->W - b);  \
        }                                                                                       \
        continue;                                                                               \
      }                                                                                         \
      if (S2(g)) {                                                                              \
        s2_row_out(g, (const float *)v, vr, a, (float)bias, relu, (float *)y + i * g->OW,        \
                   idx + i * g->OW);                                                            \
        continue;                                                                               \
      }                                                                                         \
      HARG(v, vr, n, g->KW, hm, hr, hc);                                                        \
      for (int64_t j = 0; j < g->OW; j++) {                                                     \
        int64_t t = j * g->sw;                                                                  \
        T m = hm[t] + bias;                                                                     \
        bool off = relu && !(m > 0); /* no gradient; 0 at most 0, NaN kept (as relu) */         \
        y[i * g->OW + j] = relu && m <= 0 ? 0 : m;                                              \
        idx[i * g->OW + j] = off ? 255 : (uint8_t)((hr[t] - a) * g->KW + hc[t] - t);            \
      }                                                                                         \
    }                                                                                           \
  }
GEN_ARGMAX(float, f32, vargmax_any, hargmax_any, s2_rows_ok)
GEN_ARGMAX(double, f64, vargmax_f64, hargmax_f64, no_s2)

void lu_maxpool_argmax_plane(const lu_pool_win *g, int32_t dt, const char *x, double bias, char *y,
                             uint8_t *idx, bool relu, char *scratch) {
  if (dt == LUON_DTYPE_F32)
    argmax_plane_f32(g, (const float *)x, (float)bias, (float *)y, idx, relu, scratch);
  else
    argmax_plane_f64(g, (const double *)x, bias, (double *)y, idx, relu, scratch);
}

/* One kernel for the four ops: packs non-contiguous operands, then runs the
 * fast kernel (or the reference) over dense buffers. */
static luon_status pool_run(lu_call *c, bool is_max, bool grad) {
  const char *op = lu_ops[c->op].name;
  luon_tensor *x = c->in[0], *dyt = grad ? c->in[1] : NULL, *y = c->out[0];
  pgeom g;
  LU_TRY(pool_geom(c, x, &g));
  if (g.H * g.W > INT32_MAX)
    return lu_error(LUON_EUNSUPPORTED, "%s: planes of %lld elements are too large (input %s)", op,
                    (long long)(g.H * g.W), lu_shape_str(4, x->shape));
  if (y->size == 0 || x->size == 0) {
    if (y->size) memset(lu_data(y), 0, (size_t)(y->size * luon_dtype_size(y->dtype)));
    return LUON_OK;
  }
  int32_t dt = x->dtype;
  int64_t es = luon_dtype_size(dt), nt = lu_num_threads(), np = g.N * g.C;
  int64_t chunks = np < nt ? np : nt;
  /* each chunk wants at least ~64k input elements */
  if (chunks > 1 && np * g.H * g.W < chunks * 65536) chunks = 1 + np * g.H * g.W / 65536;
  if (chunks > nt) chunks = nt;
  /* per chunk: six rows of L = (OW-1)*sw + KW + W + pw 8-byte slots (>= OW) */
  int64_t per_chunk = 48 * ((g.OW - 1) * g.sw + g.KW + g.W + g.pw) + 64;
  size_t scratch = (size_t)(chunks * per_chunk);
  char *tx = lu_is_contiguous(x) ? NULL : lu_scratch_alloc((size_t)(x->size * es) + 1);
  char *td = dyt && !lu_is_contiguous(dyt) ? lu_scratch_alloc((size_t)(dyt->size * es) + 1) : NULL;
  char *ty = lu_is_contiguous(y) ? NULL : lu_scratch_alloc((size_t)(y->size * es) + 1);
  char *sc = lu_scratch_alloc(scratch + 1);
  if ((!tx && !lu_is_contiguous(x)) || (dyt && !td && !lu_is_contiguous(dyt)) ||
      (!ty && !lu_is_contiguous(y)) || !sc) {
    lu_scratch_free(tx), lu_scratch_free(td), lu_scratch_free(ty), lu_scratch_free(sc);
    return lu_error(LUON_ENOMEM, "%s: out of host memory for scratch (input %s)", op,
                    lu_shape_str(4, x->shape));
  }
  if (tx) lu_pack(x, tx);
  if (td) lu_pack(dyt, td);
  pjob j = {&g, is_max, chunks, tx ? tx : lu_data(x), dyt ? (td ? td : lu_data(dyt)) : NULL,
            ty ? ty : lu_data(y), sc, per_chunk};
  if (lu_ref_kernels()) {
    pool_ref(&g, dt, is_max, j.x, grad ? NULL : j.y, j.dy, grad ? j.y : NULL);
  } else {
    lu_range_fn fn = dt == LUON_DTYPE_F32 ? planes_f32 : planes_f64;
    if (dt == LUON_DTYPE_F32 && is_max && grad && s2_ok(&g)) fn = s2_back_planes;
    lu_parallel_for(chunks, 1, fn, &j);
  }
  if (ty) lu_unpack(y, ty);
  lu_scratch_free(tx), lu_scratch_free(td), lu_scratch_free(ty), lu_scratch_free(sc);
  return LUON_OK;
}

luon_status lu_cpu_max_pool2d(lu_call *c) { return pool_run(c, true, false); }
luon_status lu_cpu_avg_pool2d(lu_call *c) { return pool_run(c, false, false); }
luon_status lu_cpu_max_pool2d_grad(lu_call *c) { return pool_run(c, true, true); }
luon_status lu_cpu_avg_pool2d_grad(lu_call *c) { return pool_run(c, false, true); }

/* ---- backward rules ------------------------------------------------------------ */

/* y = max_pool2d(x): dx = max_pool2d_grad(x, dy), dy routed to each window's
 * first maximum (recomputed from x). */
luon_status lu_grad_max_pool2d(lu_grad_call *g) {
  if (!g->dout[0] || !g->need[0]) return LUON_OK;
  return lu_run(LU_OP_max_pool2d_grad, g->attrs, &g->din[0], 2, g->in[0], g->dout[0]);
}

/* y = avg_pool2d(x): dx = avg_pool2d_grad(x, dy), dy / count spread over each window. */
luon_status lu_grad_avg_pool2d(lu_grad_call *g) {
  if (!g->dout[0] || !g->need[0]) return LUON_OK;
  return lu_run(LU_OP_avg_pool2d_grad, g->attrs, &g->din[0], 2, g->in[0], g->dout[0]);
}

/* ---- 3-d pooling ---------------------------------------------------------------- */

/* x (N,C,D,H,W) -> y (N,C,OD,OH,OW): the 2-d rules (out_size, window) on each
 * of the three axes. One direct kernel, planes (n,c) split across threads:
 * each output's window read in (d,h,w) row-major order, the first maximum
 * (strict >) taking the gradient, as pool_ref. */
typedef struct pgeom3 {
  int64_t N, C, D, H, W;
  int64_t k[3], s[3], p[3], n[3], o[3]; /* kernel, stride, pad, input and output sizes (d, h, w) */
  bool incl_pad;
} pgeom3;

static luon_status pool3_geom(const lu_call *c, const luon_tensor *x, pgeom3 *g) {
  const char *op = lu_ops[c->op].name;
  const luon_attrs *a = c->attrs;
  *g = (pgeom3){0};
  if (x->ndim != 5)
    return lu_error(LUON_ESHAPE, "%s: the input must be 5-d (N,C,D,H,W), got shape %s", op,
                    lu_shape_str(x->ndim, x->shape));
  if (!lu_dtype_is_float(x->dtype))
    return lu_error(LUON_EDTYPE, "%s: the input is %s; pooling takes float32 or float64", op,
                    luon_dtype_name(x->dtype));
  g->N = x->shape[0], g->C = x->shape[1], g->D = x->shape[2], g->H = x->shape[3], g->W = x->shape[4];
  for (int d = 0; d < 3; d++) g->n[d] = x->shape[2 + d];
  bool global = a->ni > LU_POOL3D_GLOBAL && a->i[LU_POOL3D_GLOBAL] != 0;
  g->incl_pad = a->ni <= LU_POOL3D_COUNT_PAD || a->i[LU_POOL3D_COUNT_PAD] != 0;
  if (global) {
    if (g->D < 1 || g->H < 1 || g->W < 1)
      return lu_error(LUON_ESHAPE, "%s: global pooling of an empty input %s", op, lu_shape_str(5, x->shape));
    for (int d = 0; d < 3; d++) g->k[d] = g->n[d], g->s[d] = 1, g->p[d] = 0, g->o[d] = 1;
    return LUON_OK;
  }
  if (a->ni <= LU_POOL3D_KERNEL_W)
    return lu_error(LUON_EINVAL, "%s: needs the kernel size in i[0..2] (or global pooling), got %d "
                    "attributes", op, a->ni);
  /* left out (each triple as one): stride = kernel, pad 0, no ceil_mode */
  bool stride = a->ni > LU_POOL3D_STRIDE_W, pad = a->ni > LU_POOL3D_PAD_W;
  bool ceil = a->ni > LU_POOL3D_CEIL && a->i[LU_POOL3D_CEIL] != 0;
  for (int d = 0; d < 3; d++) {
    g->k[d] = a->i[LU_POOL3D_KERNEL_D + d];
    g->s[d] = a->i[(stride ? LU_POOL3D_STRIDE_D : LU_POOL3D_KERNEL_D) + d];
    g->p[d] = pad ? a->i[LU_POOL3D_PAD_D + d] : 0;
  }
  const int64_t *k = g->k, *s = g->s, *p = g->p;
  if (k[0] < 1 || k[1] < 1 || k[2] < 1)
    return lu_error(LUON_EINVAL, "%s: kernel must be at least 1, got (%lld,%lld,%lld)", op, (long long)k[0],
                    (long long)k[1], (long long)k[2]);
  if (s[0] < 1 || s[1] < 1 || s[2] < 1)
    return lu_error(LUON_EINVAL, "%s: strides must be at least 1, got (%lld,%lld,%lld)", op, (long long)s[0],
                    (long long)s[1], (long long)s[2]);
  if (p[0] < 0 || p[1] < 0 || p[2] < 0)
    return lu_error(LUON_EINVAL, "%s: padding must be at least 0, got (%lld,%lld,%lld)", op, (long long)p[0],
                    (long long)p[1], (long long)p[2]);
  if (p[0] >= k[0] || p[1] >= k[1] || p[2] >= k[2])
    return lu_error(LUON_EINVAL, "%s: padding (%lld,%lld,%lld) must be smaller than the kernel (%lld,%lld,%lld)",
                    op, (long long)p[0], (long long)p[1], (long long)p[2], (long long)k[0], (long long)k[1],
                    (long long)k[2]);
  for (int d = 0; d < 3; d++)
    if (g->n[d] + 2 * p[d] < k[d])
      return lu_error(LUON_ESHAPE, "%s: kernel (%lld,%lld,%lld) is larger than the input %s padded by "
                      "(%lld,%lld,%lld)", op, (long long)k[0], (long long)k[1], (long long)k[2],
                      lu_shape_str(5, x->shape), (long long)p[0], (long long)p[1], (long long)p[2]);
  for (int d = 0; d < 3; d++) g->o[d] = out_size(g->n[d], k[d], s[d], p[d], ceil);
  return LUON_OK;
}

static void set_out5(lu_call *c, int32_t dt, const int64_t s[5]) {
  c->nout = 1;
  c->out_dtype[0] = dt;
  c->out_ndim[0] = 5;
  memcpy(c->out_shape[0], s, sizeof(int64_t) * 5);
}

static luon_status pool3_shape(lu_call *c) {
  pgeom3 g;
  LU_TRY(pool3_geom(c, c->in[0], &g));
  int64_t s[5] = {g.N, g.C, g.o[0], g.o[1], g.o[2]};
  set_out5(c, c->in[0]->dtype, s);
  return LUON_OK;
}

static luon_status pool3_grad_shape(lu_call *c) {
  const char *op = lu_ops[c->op].name;
  const luon_tensor *x = c->in[0], *dy = c->in[1];
  pgeom3 g;
  LU_TRY(pool3_geom(c, x, &g));
  int64_t want[5] = {g.N, g.C, g.o[0], g.o[1], g.o[2]};
  if (dy->ndim != 5 || memcmp(dy->shape, want, sizeof want) != 0)
    return lu_error(LUON_ESHAPE, "%s: the output gradient has shape %s but pooling the input %s gives %s",
                    op, lu_shape_str(dy->ndim, dy->shape), lu_shape_str(5, x->shape), lu_shape_str(5, want));
  if (dy->dtype != x->dtype)
    return lu_error(LUON_EDTYPE, "%s: the input is %s but the output gradient is %s; cast one with astype",
                    op, luon_dtype_name(x->dtype), luon_dtype_name(dy->dtype));
  set_out5(c, x->dtype, x->shape);
  return LUON_OK;
}

luon_status lu_shape_max_pool3d(lu_call *c) { return pool3_shape(c); }
luon_status lu_shape_avg_pool3d(lu_call *c) { return pool3_shape(c); }
luon_status lu_shape_max_pool3d_grad(lu_call *c) { return pool3_grad_shape(c); }
luon_status lu_shape_avg_pool3d_grad(lu_call *c) { return pool3_grad_shape(c); }

typedef struct pjob3 {
  const pgeom3 *g;
  bool is_max;
  const char *x, *dy; /* dy: the backward */
  char *y;            /* the forward's output or dx */
} pjob3;

/* planes [p0, p1): the forward (dy NULL) or dx (zeroed here) */
#define GEN_POOL3(T, S)                                                                          \
  static void planes3_##S(void *ctx, int64_t p0, int64_t p1) {                                   \
    const pjob3 *jb = ctx;                                                                       \
    const pgeom3 *g = jb->g;                                                                     \
    int64_t DHW = g->D * g->H * g->W, OP = g->o[0] * g->o[1] * g->o[2];                          \
    for (int64_t pl = p0; pl < p1 && !lu_interrupted(); pl++) {                                  \
      const T *xp = (const T *)jb->x + pl * DHW;                                                 \
      const T *dyp = jb->dy ? (const T *)jb->dy + pl * OP : NULL;                                \
      T *yp = (T *)jb->y + (jb->dy ? pl * DHW : pl * OP);                                        \
      if (dyp) memset(yp, 0, sizeof(T) * (size_t)DHW);                                           \
      for (int64_t od = 0; od < g->o[0]; od++)                                                   \
        for (int64_t oh = 0; oh < g->o[1]; oh++)                                                 \
          for (int64_t ow = 0; ow < g->o[2]; ow++) {                                             \
            int64_t d0, d1, cd, h0, h1, chh, w0, w1, cw;                                         \
            window(od, g->s[0], g->p[0], g->k[0], g->D, g->incl_pad, &d0, &d1, &cd);             \
            window(oh, g->s[1], g->p[1], g->k[1], g->H, g->incl_pad, &h0, &h1, &chh);            \
            window(ow, g->s[2], g->p[2], g->k[2], g->W, g->incl_pad, &w0, &w1, &cw);             \
            int64_t o = (od * g->o[1] + oh) * g->o[2] + ow, cnt = cd * chh * cw, arg = -1;       \
            T best = 0, sum = 0;                                                                 \
            for (int64_t d = d0; d < d1; d++)                                                    \
              for (int64_t h = h0; h < h1; h++)                                                  \
                for (int64_t w = w0; w < w1; w++) {                                              \
                  int64_t k = (d * g->H + h) * g->W + w;                                         \
                  T v = xp[k];                                                                   \
                  if (arg < 0 || LU_POOL_TAKES(v, best)) best = v, arg = k;                              \
                  sum += v;                                                                      \
                }                                                                                \
            if (!dyp) {                                                                          \
              yp[o] = jb->is_max ? (arg >= 0 ? best : (T)-INFINITY) : cnt > 0 ? sum / (T)cnt : 0; \
            } else if (jb->is_max) {                                                             \
              if (arg >= 0) yp[arg] += dyp[o];                                                   \
            } else if (cnt > 0) {                                                                \
              T dv = dyp[o] / (T)cnt;                                                            \
              for (int64_t d = d0; d < d1; d++)                                                  \
                for (int64_t h = h0; h < h1; h++)                                                \
                  for (int64_t w = w0; w < w1; w++) yp[(d * g->H + h) * g->W + w] += dv;         \
            }                                                                                    \
          }                                                                                      \
    }                                                                                            \
  }
GEN_POOL3(float, f32)
GEN_POOL3(double, f64)

static luon_status pool3_run(lu_call *c, bool is_max, bool grad) {
  const char *op = lu_ops[c->op].name;
  luon_tensor *x = c->in[0], *dyt = grad ? c->in[1] : NULL, *y = c->out[0];
  pgeom3 g;
  LU_TRY(pool3_geom(c, x, &g));
  if (y->size == 0 || x->size == 0) {
    if (y->size) memset(lu_data(y), 0, (size_t)(y->size * luon_dtype_size(y->dtype)));
    return LUON_OK;
  }
  int64_t es = luon_dtype_size(x->dtype);
  char *tx = lu_is_contiguous(x) ? NULL : lu_scratch_alloc((size_t)(x->size * es) + 1);
  char *td = dyt && !lu_is_contiguous(dyt) ? lu_scratch_alloc((size_t)(dyt->size * es) + 1) : NULL;
  char *ty = lu_is_contiguous(y) ? NULL : lu_scratch_alloc((size_t)(y->size * es) + 1);
  if ((!tx && !lu_is_contiguous(x)) || (dyt && !td && !lu_is_contiguous(dyt)) || (!ty && !lu_is_contiguous(y))) {
    lu_scratch_free(tx), lu_scratch_free(td), lu_scratch_free(ty);
    return lu_error(LUON_ENOMEM, "%s: out of host memory packing the operands (input %s)", op,
                    lu_shape_str(5, x->shape));
  }
  if (tx) lu_pack(x, tx);
  if (td) lu_pack(dyt, td);
  pjob3 j = {&g, is_max, tx ? tx : lu_data(x), dyt ? (td ? td : lu_data(dyt)) : NULL, ty ? ty : lu_data(y)};
  lu_parallel_for(g.N * g.C, 1, x->dtype == LUON_DTYPE_F32 ? planes3_f32 : planes3_f64, &j);
  if (ty) lu_unpack(y, ty);
  lu_scratch_free(tx), lu_scratch_free(td), lu_scratch_free(ty);
  return LUON_OK;
}

luon_status lu_cpu_max_pool3d(lu_call *c) { return pool3_run(c, true, false); }
luon_status lu_cpu_avg_pool3d(lu_call *c) { return pool3_run(c, false, false); }
luon_status lu_cpu_max_pool3d_grad(lu_call *c) { return pool3_run(c, true, true); }
luon_status lu_cpu_avg_pool3d_grad(lu_call *c) { return pool3_run(c, false, true); }

/* y = max_pool3d(x): dx = max_pool3d_grad(x, dy), dy routed to each window's first maximum. */
luon_status lu_grad_max_pool3d(lu_grad_call *g) {
  if (!g->dout[0] || !g->need[0]) return LUON_OK;
  return lu_run(LU_OP_max_pool3d_grad, g->attrs, &g->din[0], 2, g->in[0], g->dout[0]);
}

/* y = avg_pool3d(x): dx = avg_pool3d_grad(x, dy), dy / count spread over each window. */
luon_status lu_grad_avg_pool3d(lu_grad_call *g) {
  if (!g->dout[0] || !g->need[0]) return LUON_OK;
  return lu_run(LU_OP_avg_pool3d_grad, g->attrs, &g->din[0], 2, g->in[0], g->dout[0]);
}
