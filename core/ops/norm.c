/* norm.c: batch normalisation over a channel axis, layer normalisation over
 * an axis and group normalisation over channel groups (instance norm is
 * group norm with one channel per group), with their fused backward;
 * float32 and float64, any strides; statistics accumulate in double.
 *   y = gamma * (x - mean) * invstd + beta,  invstd = 1 / sqrt(var + eps) */
#include "internal.h"
#include <math.h>

#define CH_GRAIN 32768 /* elements per thread before channels are split across threads */

static luon_status need_float(const char *op, const luon_tensor *t, const char *what) {
  if (t->dtype != LUON_DTYPE_F32 && t->dtype != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "%s: %s is %s; only float32 and float64 are supported", op, what,
                    luon_dtype_name(t->dtype));
  return LUON_OK;
}

/* x (.., C, ..) and per-channel vectors (C,) of x's dtype. */
static luon_status check_bn(const char *op, const luon_tensor *x, int64_t axis_attr,
                            luon_tensor *const *vec, const char *const *names, int nvec, int *axis) {
  LU_TRY(need_float(op, x, "x"));
  LU_TRY(lu_axis(op, axis_attr, x->ndim, axis));
  int64_t C = x->shape[*axis];
  for (int k = 0; k < nvec; k++) {
    const luon_tensor *v = vec[k];
    if (v->ndim != 1 || v->shape[0] != C)
      return lu_error(LUON_ESHAPE, "%s: %s has shape %s but x %s has %lld channels on axis %d; "
                      "expected (%lld,)", op, names[k], lu_shape_str(v->ndim, v->shape),
                      lu_shape_str(x->ndim, x->shape), (long long)C, *axis, (long long)C);
    if (v->dtype != x->dtype)
      return lu_error(LUON_EDTYPE, "%s: %s is %s but x is %s; they must match", op, names[k],
                      luon_dtype_name(v->dtype), luon_dtype_name(x->dtype));
  }
  return LUON_OK;
}

/* Element c of a (C,) vector, read or written as double. */
static double vget(const luon_tensor *t, int64_t c) {
  const char *p = (const char *)lu_data(t) + c * t->strides[0] * luon_dtype_size(t->dtype);
  return t->dtype == LUON_DTYPE_F32 ? (double)*(const float *)p : *(const double *)p;
}

static void vset(luon_tensor *t, int64_t c, double v) {
  char *p = (char *)lu_data(t) + c * t->strides[0] * luon_dtype_size(t->dtype);
  if (t->dtype == LUON_DTYPE_F32) *(float *)p = (float)v;
  else *(double *)p = v;
}

/* ---- batch norm's predict-mode affine, shared with conv2d_maxpool -------- */

luon_status lu_bn_check_stats(const char *op, int64_t C, int32_t dt, luon_tensor *const *stats, double eps) {
  static const char *const names[4] = {"gamma", "beta", "running_mean", "running_var"};
  for (int k = 0; k < 4; k++) {
    const luon_tensor *v = stats[k];
    if (v->ndim != 1 || v->shape[0] != C)
      return lu_error(LUON_ESHAPE, "%s: %s has shape %s; expected (%lld,), one value per channel", op, names[k],
                      lu_shape_str(v->ndim, v->shape), (long long)C);
    if (v->dtype != dt)
      return lu_error(LUON_EDTYPE, "%s: %s is %s but the values it normalises are %s; they must match", op,
                      names[k], luon_dtype_name(v->dtype), luon_dtype_name(dt));
  }
  if (!(eps >= 0)) return lu_error(LUON_EINVAL, "%s: eps = %g must be >= 0", op, eps);
  return LUON_OK;
}

/* channel c's y = a * x + d from the statistics given: a = gamma * invstd,
 * d = beta - a * mean, in double, as batch_norm's pass forms them */
static void bn_coef(double gamma, double beta, double mean, double var, double eps, double *a, double *d) {
  *a = gamma * (1 / sqrt(var + eps));
  *d = beta - *a * mean;
}

void lu_bn_predict_coef(luon_tensor *const *stats, int64_t c, double eps, double *a, double *d) {
  bn_coef(vget(stats[0], c), vget(stats[1], c), vget(stats[2], c), vget(stats[3], c), eps, a, d);
}

/* y = a * u + d over n contiguous elements in T's arithmetic, out of place
 * (batch_norm's contiguous pass) and in place (lu_bn_apply), rounded twice
 * (never contracted to an FMA): gcc contracts the vector body but not every
 * scalar remainder, so the bits of an element would hang on where a span
 * starts and ends, and conv2d_maxpool's spans are not batch_norm's */
#define NO_FMA __attribute__((optimize("fp-contract=off")))
#define AFFINE_SPAN(T)                                                                          \
  TC NO_FMA static void affine_span_##T(T *restrict y, const T *restrict u, int64_t n, T a, T d) { \
    for (int64_t i = 0; i < n; i++) y[i] = a * u[i] + d;                                        \
  }                                                                                             \
  TC NO_FMA static void affine_inplace_##T(T *restrict y, int64_t n, T a, T d, bool relu) {     \
    if (relu)                                                                                   \
      for (int64_t i = 0; i < n; i++) {                                                         \
        T r = a * y[i] + d;                                                                     \
        y[i] = r < 0 ? (T)0 : r;                                                                \
      }                                                                                         \
    else                                                                                        \
      for (int64_t i = 0; i < n; i++) y[i] = a * y[i] + d;                                      \
  }
AFFINE_SPAN(float)
AFFINE_SPAN(double)

void lu_bn_apply(int32_t dt, void *y, int64_t n, double a, double d, bool relu) {
  if (dt == LUON_DTYPE_F32) affine_inplace_float(y, n, (float)a, (float)d, relu);
  else affine_inplace_double(y, n, a, d, relu);
}

/* ---- per-channel row kernels (for lu_foreach_row over one channel) --------- */

/* Accumulator of one channel's pass; op 0 and op 1 as the pass defines. */
typedef struct acc {
  int32_t dt;
  double mean;      /* subtracted before summing squares / products */
  double s0, s1;    /* the sums */
  double a, b, d;   /* affine coefficients of the writing passes */
  bool relu;        /* the writing pass's results through max(., 0) (NaN kept, as relu) */
} acc;

#define LD(T, p, i, s) ((double)*(const T *)((p) + (i) * (s)))

/* s0 += x - mean; s1 += (x - mean)^2 (mean: a shift). Dense rows keep 8
 * partial sums so that the loop vectorises without reassociating one sum. */
#define SUM_ROW(T)                                                             \
  do {                                                                         \
    double s0 = 0, s1 = 0, m = a->mean;                                        \
    int64_t i = 0;                                                             \
    if (st[0] == sizeof(T)) {                                                  \
      const T *x = (const T *)p[0];                                            \
      double q0[8] = {0}, q1[8] = {0};                                         \
      for (; i + 8 <= n; i += 8)                                               \
        for (int k = 0; k < 8; k++) {                                          \
          double v = x[i + k] - m;                                             \
          q0[k] += v;                                                          \
          q1[k] += v * v;                                                      \
        }                                                                      \
      for (int k = 0; k < 8; k++) s0 += q0[k], s1 += q1[k];                    \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      double v = LD(T, p[0], i, st[0]) - m;                                    \
      s0 += v;                                                                 \
      s1 += v * v;                                                             \
    }                                                                          \
    a->s0 += s0;                                                               \
    a->s1 += s1;                                                               \
  } while (0)

TC static void sum_row_f32(acc *a, int64_t n, char *const *p, const int64_t *st) { SUM_ROW(float); }
TC static void sum_row_f64(acc *a, int64_t n, char *const *p, const int64_t *st) { SUM_ROW(double); }
static void sum_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  acc *a = ctx;
  if (a->dt == LUON_DTYPE_F32) sum_row_f32(a, n, p, st);
  else sum_row_f64(a, n, p, st);
}

/* op 0 x, op 1 dy: s0 += dy; s1 += dy * (x - mean) */
#define DOT_ROW(T)                                                             \
  do {                                                                         \
    double s0 = 0, s1 = 0, m = a->mean;                                        \
    int64_t i = 0;                                                             \
    if (st[0] == sizeof(T) && st[1] == sizeof(T)) {                            \
      const T *x = (const T *)p[0], *dy = (const T *)p[1];                     \
      double q0[8] = {0}, q1[8] = {0};                                         \
      for (; i + 8 <= n; i += 8)                                               \
        for (int k = 0; k < 8; k++) {                                          \
          double d = dy[i + k];                                                \
          q0[k] += d;                                                          \
          q1[k] += d * ((double)x[i + k] - m);                                 \
        }                                                                      \
      for (int k = 0; k < 8; k++) s0 += q0[k], s1 += q1[k];                    \
    }                                                                          \
    for (; i < n; i++) {                                                       \
      double dy = LD(T, p[1], i, st[1]);                                       \
      s0 += dy;                                                                \
      s1 += dy * (LD(T, p[0], i, st[0]) - m);                                  \
    }                                                                          \
    a->s0 += s0;                                                               \
    a->s1 += s1;                                                               \
  } while (0)

TC static void dot_row_f32(acc *a, int64_t n, char *const *p, const int64_t *st) { DOT_ROW(float); }
TC static void dot_row_f64(acc *a, int64_t n, char *const *p, const int64_t *st) { DOT_ROW(double); }
static void dot_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  acc *a = ctx;
  if (a->dt == LUON_DTYPE_F32) dot_row_f32(a, n, p, st);
  else dot_row_f64(a, n, p, st);
}

/* op 0 out, op 1 u, op 2 v (or none): out = a * u + b * v + d, relu'd when
 * a->relu (never with v: batch_norm's pass has none) */
#define AFFINE_ROW(T)                                                          \
  do {                                                                         \
    const T ca = (T)a->a, cb = (T)a->b, cd = (T)a->d;                          \
    if (nops == 2 && st[0] == sizeof(T) && st[1] == sizeof(T)) {               \
      T *restrict o = (T *)p[0];                                               \
      const T *restrict u = (const T *)p[1];                                   \
      if (a->relu)                                                             \
        for (int64_t i = 0; i < n; i++) {                                      \
          T r = ca * u[i] + cd;                                                \
          o[i] = r < 0 ? (T)0 : r;                                             \
        }                                                                      \
      else                                                                     \
        affine_span_##T(o, u, n, ca, cd);                                      \
    } else if (nops == 3 && st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T)) { \
      T *restrict o = (T *)p[0];                                               \
      const T *restrict u = (const T *)p[1], *restrict v = (const T *)p[2];    \
      for (int64_t i = 0; i < n; i++) o[i] = ca * u[i] + cb * v[i] + cd;       \
    } else {                                                                   \
      for (int64_t i = 0; i < n; i++) {                                        \
        T r = ca * *(const T *)(p[1] + i * st[1]) + cd;                        \
        if (nops == 3) r += cb * *(const T *)(p[2] + i * st[2]);               \
        *(T *)(p[0] + i * st[0]) = a->relu && r < 0 ? (T)0 : r;                \
      }                                                                        \
    }                                                                          \
  } while (0)

TC NO_FMA static void affine_row(acc *a, int nops, int64_t n, char *const *p, const int64_t *st) {
  if (a->dt == LUON_DTYPE_F32) AFFINE_ROW(float);
  else AFFINE_ROW(double);
}
static void affine2_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  affine_row(ctx, 2, n, p, st);
}
static void affine3_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  affine_row(ctx, 3, n, p, st);
}

/* One channel's elements of up to three tensors of x's shape: the shape
 * with the channel axis set to 1, and each tensor's byte strides. */
typedef struct chan {
  int nd, axis;
  int64_t shape[LU_MAXD];
  int64_t st[3][LU_MAXD];
  char *base[3];
  int64_t m;               /* elements per channel */
} chan;

static void chan_init(chan *ch, int axis, luon_tensor *const *t, int nt) {
  const luon_tensor *x = t[0];
  ch->nd = x->ndim;
  ch->axis = axis;
  memcpy(ch->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  ch->shape[axis] = 1;
  ch->m = x->shape[axis] ? x->size / x->shape[axis] : 0;
  for (int k = 0; k < nt; k++) {
    lu_byte_strides(t[k], x->ndim, x->shape, ch->st[k]);
    ch->base[k] = lu_data(t[k]);
  }
}

/* Walk channel c of the first nops tensors (no threads: channels are). */
static void chan_walk(const chan *ch, int64_t c, int nops, const int *which, lu_row_fn fn, acc *a) {
  char *b[3];
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];
  for (int k = 0; k < nops; k++) {
    b[k] = ch->base[which[k]] + c * ch->st[which[k]][ch->axis];
    memcpy(st[k], ch->st[which[k]], sizeof(int64_t) * (size_t)ch->nd);
  }
  lu_foreach_row(ch->nd, ch->shape, nops, b, (const int64_t(*)[LU_MAXD])st, 0, false, fn, a);
}

/* ---- forward ------------------------------------------------------------- */

/* x (.., C, ..), gamma, beta, running_mean, running_var (C,) ->
 * y (.., C, ..), mean (C,), invstd (C,) */
luon_status lu_shape_batch_norm(lu_call *c) {
  static const char *const names[4] = {"gamma", "beta", "running_mean", "running_var"};
  const luon_tensor *x = c->in[0];
  int ax;
  LU_TRY(check_bn("batch_norm", x, c->attrs->i[LU_BN_AXIS], c->in + 1, names, 4, &ax));
  if (!(c->attrs->f[LU_BN_EPS] >= 0))
    return lu_error(LUON_EINVAL, "batch_norm: eps = %g must be >= 0", c->attrs->f[LU_BN_EPS]);
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  for (int k = 0; k < 3; k++) c->out_dtype[k] = x->dtype;
  for (int k = 1; k < 3; k++) {
    c->out_ndim[k] = 1;
    c->out_shape[k][0] = x->shape[ax];
  }
  return LUON_OK;
}

typedef struct bn_fwd {
  lu_call *c;
  chan ch;            /* op 0 x, op 1 y */
  bool batch;         /* batch statistics, running ones updated */
  bool relu;          /* the fused relu */
  double eps, mom;
} bn_fwd;

static void bn_fwd_range(void *ctx, int64_t c0, int64_t c1) {
  bn_fwd *f = ctx;
  luon_tensor *const *in = f->c->in;
  static const int X[1] = {0}, YX[2] = {1, 0};
  for (int64_t c = c0; c < c1; c++) {
    acc a = {in[0]->dtype, 0, 0, 0, 0, 0, 0, false};
    double mean, var;
    if (f->batch) {
      if (f->ch.m > 0) {
        /* one pass, about the channel's first element: the sums of x - k
         * and (x - k)^2 give the mean and variance without the cancellation
         * of raw sums of squares when the mean is large against the spread */
        const char *first = f->ch.base[0] + c * f->ch.st[0][f->ch.axis];
        a.mean = in[0]->dtype == LUON_DTYPE_F32 ? (double)*(const float *)first : *(const double *)first;
        chan_walk(&f->ch, c, 1, X, sum_row, &a);
        double d = a.s0 / (double)f->ch.m;
        mean = a.mean + d;
        var = a.s1 / (double)f->ch.m - d * d;
        if (var < 0) var = 0;
        vset(in[3], c, f->mom * vget(in[3], c) + (1 - f->mom) * mean);
        vset(in[4], c, f->mom * vget(in[4], c) + (1 - f->mom) * var);
      } else { /* an empty batch: no statistics, running ones untouched */
        mean = 0;
        var = 0;
      }
    } else {
      mean = vget(in[3], c);
      var = vget(in[4], c);
    }
    double invstd = 1 / sqrt(var + f->eps);
    vset(f->c->out[1], c, mean);
    vset(f->c->out[2], c, invstd);
    /* y = scale * x + (beta - scale * mean), relu'd when fused */
    bn_coef(vget(in[1], c), vget(in[2], c), mean, var, f->eps, &a.a, &a.d);
    a.relu = f->relu;
    chan_walk(&f->ch, c, 2, YX, affine2_row, &a);
  }
}

luon_status lu_cpu_batch_norm(lu_call *c) {
  bn_fwd f;
  int64_t axis = c->attrs->i[LU_BN_AXIS];
  int ax = (int)(axis < 0 ? axis + c->in[0]->ndim : axis);
  luon_tensor *t[2] = {c->in[0], c->out[0]};
  f.c = c;
  chan_init(&f.ch, ax, t, 2);
  f.batch = c->attrs->i[LU_BN_TRAINING] && !c->attrs->i[LU_BN_GLOBAL_STATS];
  f.relu = c->attrs->ni > LU_BN_RELU && c->attrs->i[LU_BN_RELU] == 1;
  f.eps = c->attrs->f[LU_BN_EPS];
  f.mom = c->attrs->f[LU_BN_MOMENTUM];
  int64_t C = c->in[0]->shape[ax], g = CH_GRAIN / (f.ch.m > 0 ? f.ch.m : 1);
  lu_parallel_for(C, g > 0 ? g : 1, bn_fwd_range, &f);
  return LUON_OK;
}

/* ---- backward ------------------------------------------------------------ */

/* x, dy (.., C, ..), gamma, mean, invstd (C,) -> dx (.., C, ..), dgamma, dbeta (C,)
 *   dbeta = sum(dy), dgamma = sum(dy * xhat), xhat = (x - mean) * invstd
 *   training:  dx = gamma * invstd * (dy - dbeta / m - xhat * dgamma / m)
 *   inference: dx = gamma * invstd * dy   (mean, invstd were constants) */
luon_status lu_shape_batch_norm_grad(lu_call *c) {
  static const char *const names[3] = {"gamma", "mean", "invstd"};
  const luon_tensor *x = c->in[0], *dy = c->in[1];
  int ax;
  LU_TRY(check_bn("batch_norm_grad", x, c->attrs->i[LU_BN_GRAD_AXIS], c->in + 2, names, 3, &ax));
  if (dy->ndim != x->ndim || memcmp(dy->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
    return lu_error(LUON_ESHAPE, "batch_norm_grad: dy has shape %s but x has shape %s",
                    lu_shape_str(dy->ndim, dy->shape), lu_shape_str(x->ndim, x->shape));
  if (dy->dtype != x->dtype)
    return lu_error(LUON_EDTYPE, "batch_norm_grad: dy is %s but x is %s", luon_dtype_name(dy->dtype),
                    luon_dtype_name(x->dtype));
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  for (int k = 0; k < 3; k++) c->out_dtype[k] = x->dtype;
  for (int k = 1; k < 3; k++) {
    c->out_ndim[k] = 1;
    c->out_shape[k][0] = x->shape[ax];
  }
  return LUON_OK;
}

typedef struct bn_bwd {
  lu_call *c;
  chan ch;            /* op 0 x, op 1 dy, op 2 dx */
  bool training;
} bn_bwd;

static void bn_bwd_range(void *ctx, int64_t c0, int64_t c1) {
  bn_bwd *b = ctx;
  luon_tensor *const *in = b->c->in;
  static const int XDY[2] = {0, 1}, DXDYX[3] = {2, 1, 0};
  double m = (double)b->ch.m;
  for (int64_t c = c0; c < c1; c++) {
    acc a = {in[0]->dtype, vget(in[3], c), 0, 0, 0, 0, 0, false};
    double gamma = vget(in[2], c), invstd = vget(in[4], c);
    chan_walk(&b->ch, c, 2, XDY, dot_row, &a);
    double dbeta = a.s0, dgamma = a.s1 * invstd;
    vset(b->c->out[1], c, dgamma);
    vset(b->c->out[2], c, dbeta);
    /* dx = a * dy + b * x + d */
    a.a = gamma * invstd;
    if (b->training && m > 0) {
      a.b = -a.a * invstd * dgamma / m;
      a.d = -a.a * dbeta / m - a.b * a.mean;
    }
    chan_walk(&b->ch, c, 3, DXDYX, affine3_row, &a);
  }
}

luon_status lu_cpu_batch_norm_grad(lu_call *c) {
  bn_bwd b;
  int64_t axis = c->attrs->i[LU_BN_GRAD_AXIS];
  int ax = (int)(axis < 0 ? axis + c->in[0]->ndim : axis);
  luon_tensor *t[3] = {c->in[0], c->in[1], c->out[0]};
  b.c = c;
  chan_init(&b.ch, ax, t, 3);
  b.training = c->attrs->i[LU_BN_GRAD_BATCH_STATS] != 0;
  int64_t C = c->in[0]->shape[ax], g = CH_GRAIN / (b.ch.m > 0 ? b.ch.m : 1);
  lu_parallel_for(C, g > 0 ? g : 1, bn_bwd_range, &b);
  return LUON_OK;
}

/* dx, dgamma, dbeta from batch_norm_grad on the saved mean and invstd; the
 * running statistics get no gradient. Batch statistics were used (and are
 * differentiated through) when training and not use_global_stats. */
luon_status lu_grad_batch_norm(lu_grad_call *g) {
  if (!g->dout[0] || !(g->need[0] || g->need[1] || g->need[2])) return LUON_OK;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = LU_NI_batch_norm_grad;
  a.i[LU_BN_GRAD_AXIS] = g->attrs->i[LU_BN_AXIS];
  a.i[LU_BN_GRAD_BATCH_STATS] = g->attrs->i[LU_BN_TRAINING] && !g->attrs->i[LU_BN_GLOBAL_STATS];
  luon_tensor *dy = g->dout[0], *masked = NULL;
  if (g->attrs->ni > LU_BN_RELU && g->attrs->i[LU_BN_RELU] == 1) { /* fused relu: dy * (y > 0) */
    LU_TRY(lu_run(LU_OP_relu_grad, NULL, &masked, 2, g->out[0], dy));
    dy = masked;
  }
  luon_tensor *in[5] = {g->in[0], dy, g->in[1], g->out[1], g->out[2]};
  luon_tensor *out[3] = {NULL, NULL, NULL};
  int32_t nout = 3;
  luon_status s = luon_op_call(LU_OP_batch_norm_grad, 5, in, &a, &nout, out);
  luon_tensor_release(masked);
  LU_TRY(s);
  for (int k = 0; k < 3; k++) {
    if (g->need[k]) g->din[k] = out[k];
    else luon_tensor_release(out[k]);
  }
  return LUON_OK;
}


/* ---- layer_norm and group_norm --------------------------------------------- */

/* Both normalise groups of x's elements on their own: x's axes are split in
 * group axes and reduction axes (a group's M elements).
 *   layer_norm over axis a: groups are the other axes, the reduction axis a,
 *     gamma and beta (L,) indexed by the position along a;
 *   group_norm with G groups, x (N, C, ...): groups (N, G) (C split in G
 *     runs of C/G channels), the reduction (C/G, ...); gamma and beta (G,)
 *     indexed by the group (MXNet 1.x's GroupNorm).
 * mean and invstd (one per group, row-major over the group axes) are saved
 * for the backward: layer_norm's have x's shape with axis a set to 1,
 * group_norm's are (N, G). Backward, per group, g = gamma of the element:
 *   dx = invstd * (g dy - mean(g dy) - xhat * mean(g dy xhat))
 *   dgamma[k] = sum(dy * xhat), dbeta[k] = sum(dy) over the elements of k. */

typedef struct nview {
  int ng, nr;                        /* group axes, reduction axes */
  int64_t gshape[LU_MAXD], rshape[LU_MAXD];
  int64_t G, M;                      /* groups, elements per group */
  int64_t K;                         /* gamma's length */
  bool per_group;                    /* gamma[group % K] (group_norm), else gamma[r] */
  double eps;
} nview;

/* one tensor of x's shape (x, y, dy, dx) seen through the view */
typedef struct nops {
  char *base;
  int32_t dt;
  int64_t gst[LU_MAXD], rst[LU_MAXD]; /* byte strides */
  int64_t rflat;                      /* one byte stride for the whole reduction, or -1 */
} nops;

static void nops_init(nops *o, const nview *v, const luon_tensor *t, int mode_axis, bool group) {
  int64_t es = luon_dtype_size(t->dtype);
  o->base = lu_data(t);
  o->dt = t->dtype;
  if (group) { /* (N, G) then (C/G, spatial...) */
    int64_t cg = t->shape[1] / v->K;
    o->gst[0] = t->strides[0] * es;
    o->gst[1] = t->strides[1] * es * cg;
    o->rst[0] = t->strides[1] * es;
    for (int d = 2; d < t->ndim; d++) o->rst[d - 1] = t->strides[d] * es;
  } else {
    for (int d = 0, k = 0; d < t->ndim; d++)
      if (d != mode_axis) o->gst[k++] = t->strides[d] * es;
    o->rst[0] = t->strides[mode_axis] * es;
  }
  /* the reduction axes as one run when each steps over the next */
  o->rflat = 0;
  int64_t want = -1;
  for (int d = v->nr - 1; d >= 0; d--) {
    if (v->rshape[d] == 1) continue;
    if (want == -1) o->rflat = o->rst[d];
    else if (o->rst[d] != want) { o->rflat = -1; break; }
    want = o->rst[d] * v->rshape[d];
  }
}

static void nview_init(nview *v, const luon_tensor *x, int axis, int64_t groups, double eps) {
  v->eps = eps;
  if (groups > 0) {
    v->ng = 2;
    v->gshape[0] = x->shape[0];
    v->gshape[1] = groups;
    v->nr = x->ndim - 1;
    v->rshape[0] = x->shape[1] / groups;
    for (int d = 2; d < x->ndim; d++) v->rshape[d - 1] = x->shape[d];
    v->per_group = true;
    v->K = groups;
  } else {
    v->ng = 0;
    for (int d = 0; d < x->ndim; d++)
      if (d != axis) v->gshape[v->ng++] = x->shape[d];
    v->nr = 1;
    v->rshape[0] = x->shape[axis];
    v->per_group = false;
    v->K = x->shape[axis];
  }
  v->G = 1;
  for (int d = 0; d < v->ng; d++) v->G *= v->gshape[d];
  v->M = 1;
  for (int d = 0; d < v->nr; d++) v->M *= v->rshape[d];
}

/* byte offsets of group i and of element r within a group */
static int64_t goff(const nview *v, const nops *o, int64_t i) {
  int64_t off = 0;
  for (int d = v->ng - 1; d >= 0; d--) {
    off += (i % v->gshape[d]) * o->gst[d];
    i /= v->gshape[d];
  }
  return off;
}
static int64_t roff(const nview *v, const nops *o, int64_t r) {
  if (o->rflat >= 0) return r * o->rflat;
  int64_t off = 0;
  for (int d = v->nr - 1; d >= 0; d--) {
    off += (r % v->rshape[d]) * o->rst[d];
    r /= v->rshape[d];
  }
  return off;
}

static double ld(const nops *o, int64_t off) {
  const char *p = o->base + off;
  return o->dt == LUON_DTYPE_F32 ? (double)*(const float *)p : *(const double *)p;
}
static void st(const nops *o, int64_t off, double val) {
  char *p = o->base + off;
  if (o->dt == LUON_DTYPE_F32) *(float *)p = (float)val;
  else *(double *)p = val;
}

/* element i of a contiguous tensor (the per-group statistics), as double */
static double fget(const luon_tensor *t, int64_t i) {
  const char *p = (const char *)lu_data(t);
  return t->dtype == LUON_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static void fset(luon_tensor *t, int64_t i, double v) {
  char *p = (char *)lu_data(t);
  if (t->dtype == LUON_DTYPE_F32) ((float *)p)[i] = (float)v;
  else ((double *)p)[i] = v;
}

static int64_t gamma_at(const nview *v, int64_t i, int64_t r) { return v->per_group ? i % v->K : r; }

typedef struct nrun {
  lu_call *c;
  nview v;
  nops x, y, dy, dx;
} nrun;

static void norm_fwd_range(void *ctx, int64_t i0, int64_t i1) {
  nrun *f = ctx;
  const nview *v = &f->v;
  luon_tensor *const *in = f->c->in;
  for (int64_t i = i0; i < i1; i++) {
    int64_t gx = goff(v, &f->x, i), gy = goff(v, &f->y, i);
    double s = 0, q = 0;
    for (int64_t r = 0; r < v->M; r++) s += ld(&f->x, gx + roff(v, &f->x, r));
    double mean = v->M > 0 ? s / (double)v->M : 0;
    for (int64_t r = 0; r < v->M; r++) {
      double d = ld(&f->x, gx + roff(v, &f->x, r)) - mean;
      q += d * d;
    }
    double invstd = 1 / sqrt((v->M > 0 ? q / (double)v->M : 0) + v->eps);
    fset(f->c->out[1], i, mean);
    fset(f->c->out[2], i, invstd);
    for (int64_t r = 0; r < v->M; r++) {
      int64_t k = gamma_at(v, i, r);
      double xh = (ld(&f->x, gx + roff(v, &f->x, r)) - mean) * invstd;
      st(&f->y, gy + roff(v, &f->y, r), xh * vget(in[1], k) + vget(in[2], k));
    }
  }
}

static void norm_bwd_range(void *ctx, int64_t i0, int64_t i1) {
  nrun *b = ctx;
  const nview *v = &b->v;
  luon_tensor *const *in = b->c->in;
  double m = (double)v->M;
  for (int64_t i = i0; i < i1; i++) {
    int64_t gx = goff(v, &b->x, i), gdy = goff(v, &b->dy, i), gdx = goff(v, &b->dx, i);
    double mean = fget(in[3], i), invstd = fget(in[4], i), a1 = 0, a2 = 0;
    for (int64_t r = 0; r < v->M; r++) {
      double gd = ld(&b->dy, gdy + roff(v, &b->dy, r)) * vget(in[2], gamma_at(v, i, r));
      a1 += gd;
      a2 += gd * (ld(&b->x, gx + roff(v, &b->x, r)) - mean) * invstd;
    }
    a1 /= m;
    a2 /= m;
    for (int64_t r = 0; r < v->M; r++) {
      double gd = ld(&b->dy, gdy + roff(v, &b->dy, r)) * vget(in[2], gamma_at(v, i, r));
      double xh = (ld(&b->x, gx + roff(v, &b->x, r)) - mean) * invstd;
      st(&b->dx, gdx + roff(v, &b->dx, r), invstd * (gd - a1 - xh * a2));
    }
  }
}

/* dgamma[k], dbeta[k]: over the (group, element) pairs of gamma index k */
static void norm_dgamma_range(void *ctx, int64_t k0, int64_t k1) {
  nrun *b = ctx;
  const nview *v = &b->v;
  luon_tensor *const *in = b->c->in;
  for (int64_t k = k0; k < k1; k++) {
    double sg = 0, sb = 0;
    for (int64_t i = v->per_group ? k : 0; i < v->G; i += v->per_group ? v->K : 1) {
      int64_t gx = goff(v, &b->x, i), gdy = goff(v, &b->dy, i);
      double mean = fget(in[3], i), invstd = fget(in[4], i);
      int64_t r0 = v->per_group ? 0 : k, r1 = v->per_group ? v->M : k + 1;
      for (int64_t r = r0; r < r1; r++) {
        double d = ld(&b->dy, gdy + roff(v, &b->dy, r));
        sb += d;
        sg += d * (ld(&b->x, gx + roff(v, &b->x, r)) - mean) * invstd;
      }
    }
    vset(b->c->out[1], k, sg);
    vset(b->c->out[2], k, sb);
  }
}

/* x, then (K,) vectors of x's dtype; the view for the op's attributes */
static luon_status norm_check(lu_call *c, const char *op, bool group, const char *const *names, int nvec,
                              nview *v, int *axis) {
  const luon_tensor *x = c->in[0];
  LU_TRY(need_float(op, x, "x"));
  int64_t groups = 0;
  double eps;
  *axis = 0;
  if (group) {
    groups = c->attrs->i[LU_GN_GROUPS];
    eps = c->attrs->f[LU_GN_EPS];
    if (x->ndim < 2)
      return lu_error(LUON_ESHAPE, "%s: x has shape %s; expected (N, C, ...) with at least 2 axes", op,
                      lu_shape_str(x->ndim, x->shape));
    if (groups < 1 || x->shape[1] % groups != 0)
      return lu_error(LUON_ESHAPE, "%s: num_groups = %lld must be >= 1 and divide the %lld channels of x %s",
                      op, (long long)groups, (long long)x->shape[1], lu_shape_str(x->ndim, x->shape));
  } else {
    eps = c->attrs->f[LU_LN_EPS];
    if (x->ndim < 1)
      return lu_error(LUON_ESHAPE, "%s: x is 0-d; expected at least one axis", op);
    LU_TRY(lu_axis(op, c->attrs->i[LU_LN_AXIS], x->ndim, axis));
  }
  if (!(eps >= 0)) return lu_error(LUON_EINVAL, "%s: eps = %g must be >= 0", op, eps);
  nview_init(v, x, *axis, groups, eps);
  for (int k = 0; k < nvec; k++) {
    const luon_tensor *t = c->in[k + (c->nin == 5 ? 2 : 1)];
    if (t->ndim != 1 || t->shape[0] != v->K)
      return lu_error(LUON_ESHAPE, "%s: %s has shape %s but x %s needs (%lld,)%s", op, names[k],
                      lu_shape_str(t->ndim, t->shape), lu_shape_str(x->ndim, x->shape), (long long)v->K,
                      group ? " (one per group)" : "");
    if (t->dtype != x->dtype)
      return lu_error(LUON_EDTYPE, "%s: %s is %s but x is %s; they must match", op, names[k],
                      luon_dtype_name(t->dtype), luon_dtype_name(x->dtype));
  }
  return LUON_OK;
}

/* outputs: y like x, mean and invstd one per group */
static luon_status norm_fwd_shape(lu_call *c, const char *op, bool group) {
  static const char *const names[2] = {"gamma", "beta"};
  const luon_tensor *x = c->in[0];
  nview v;
  int axis;
  LU_TRY(norm_check(c, op, group, names, 2, &v, &axis));
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  for (int k = 0; k < 3; k++) c->out_dtype[k] = x->dtype;
  for (int k = 1; k < 3; k++) {
    if (group) {
      c->out_ndim[k] = 2;
      c->out_shape[k][0] = x->shape[0];
      c->out_shape[k][1] = v.K;
    } else {
      c->out_ndim[k] = x->ndim;
      memcpy(c->out_shape[k], x->shape, sizeof(int64_t) * (size_t)x->ndim);
      c->out_shape[k][axis] = 1;
    }
  }
  return LUON_OK;
}

/* x, dy, gamma, mean, invstd -> dx, dgamma, dbeta */
static luon_status norm_bwd_shape(lu_call *c, const char *op, bool group) {
  static const char *const names[1] = {"gamma"};
  const luon_tensor *x = c->in[0], *dy = c->in[1];
  nview v;
  int axis;
  LU_TRY(norm_check(c, op, group, names, 1, &v, &axis));
  if (dy->ndim != x->ndim || memcmp(dy->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
    return lu_error(LUON_ESHAPE, "%s: dy has shape %s but x has shape %s", op,
                    lu_shape_str(dy->ndim, dy->shape), lu_shape_str(x->ndim, x->shape));
  for (int k = 1; k < 5; k++)
    if (c->in[k]->dtype != x->dtype)
      return lu_error(LUON_EDTYPE, "%s: input %d is %s but x is %s", op, k,
                      luon_dtype_name(c->in[k]->dtype), luon_dtype_name(x->dtype));
  for (int k = 3; k < 5; k++)
    if (c->in[k]->size != v.G || !lu_is_contiguous(c->in[k]))
      return lu_error(LUON_ESHAPE, "%s: input %d has shape %s; expected %lld contiguous statistics", op, k,
                      lu_shape_str(c->in[k]->ndim, c->in[k]->shape), (long long)v.G);
  c->out_ndim[0] = x->ndim;
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  for (int k = 0; k < 3; k++) c->out_dtype[k] = x->dtype;
  for (int k = 1; k < 3; k++) {
    c->out_ndim[k] = 1;
    c->out_shape[k][0] = v.K;
  }
  return LUON_OK;
}

static void nrun_init(nrun *r, lu_call *c, bool group, bool fwd) {
  const luon_tensor *x = c->in[0];
  int axis = 0;
  int64_t groups = 0;
  double eps = 0;
  if (group) {
    groups = c->attrs->i[LU_GN_GROUPS];
    eps = c->attrs->f[LU_GN_EPS];
  } else {
    int64_t a = c->attrs->i[LU_LN_AXIS];
    axis = (int)(a < 0 ? a + x->ndim : a);
    eps = c->attrs->f[LU_LN_EPS];
  }
  r->c = c;
  nview_init(&r->v, x, axis, groups, eps);
  nops_init(&r->x, &r->v, x, axis, group);
  if (fwd) {
    nops_init(&r->y, &r->v, c->out[0], axis, group);
  } else {
    nops_init(&r->dy, &r->v, c->in[1], axis, group);
    nops_init(&r->dx, &r->v, c->out[0], axis, group);
  }
}

static luon_status norm_fwd(lu_call *c, bool group) {
  nrun r;
  nrun_init(&r, c, group, true);
  int64_t g = CH_GRAIN / (r.v.M > 0 ? r.v.M : 1);
  lu_parallel_for(r.v.G, g > 0 ? g : 1, norm_fwd_range, &r);
  return LUON_OK;
}

static luon_status norm_bwd(lu_call *c, bool group) {
  nrun r;
  nrun_init(&r, c, group, false);
  int64_t g = CH_GRAIN / (r.v.M > 0 ? r.v.M : 1);
  lu_parallel_for(r.v.G, g > 0 ? g : 1, norm_bwd_range, &r);
  g = CH_GRAIN / (r.v.K > 0 && r.v.G * r.v.M / r.v.K > 0 ? r.v.G * r.v.M / r.v.K : 1);
  lu_parallel_for(r.v.K, g > 0 ? g : 1, norm_dgamma_range, &r);
  return LUON_OK;
}

/* the backward: the op's grad op on the saved statistics, then what is needed */
static luon_status norm_grad(lu_grad_call *g, int32_t grad_op) {
  if (!g->dout[0] || !(g->need[0] || g->need[1] || g->need[2])) return LUON_OK;
  luon_tensor *in[5] = {g->in[0], g->dout[0], g->in[1], g->out[1], g->out[2]};
  luon_tensor *out[3] = {NULL, NULL, NULL};
  int32_t nout = 3;
  LU_TRY(luon_op_call(grad_op, 5, in, g->attrs, &nout, out));
  for (int k = 0; k < 3; k++) {
    if (g->need[k]) g->din[k] = out[k];
    else luon_tensor_release(out[k]);
  }
  return LUON_OK;
}

luon_status lu_shape_layer_norm(lu_call *c) { return norm_fwd_shape(c, "layer_norm", false); }
luon_status lu_cpu_layer_norm(lu_call *c) { return norm_fwd(c, false); }
luon_status lu_shape_layer_norm_grad(lu_call *c) { return norm_bwd_shape(c, "layer_norm_grad", false); }
luon_status lu_cpu_layer_norm_grad(lu_call *c) { return norm_bwd(c, false); }
luon_status lu_grad_layer_norm(lu_grad_call *g) { return norm_grad(g, LU_OP_layer_norm_grad); }

luon_status lu_shape_group_norm(lu_call *c) { return norm_fwd_shape(c, "group_norm", true); }
luon_status lu_cpu_group_norm(lu_call *c) { return norm_fwd(c, true); }
luon_status lu_shape_group_norm_grad(lu_call *c) { return norm_bwd_shape(c, "group_norm_grad", true); }
luon_status lu_cpu_group_norm_grad(lu_call *c) { return norm_bwd(c, true); }
luon_status lu_grad_group_norm(lu_grad_call *g) { return norm_grad(g, LU_OP_group_norm_grad); }
