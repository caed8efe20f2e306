/* norm.c: batch normalisation over a channel axis and its backward, float32
 * and float64, any strides; statistics accumulate in double, one channel
 * per thread. Not here: layer/group/instance norm.
 *   y = gamma * (x - mean) * invstd + beta,  invstd = 1 / sqrt(var + eps) */
#include "internal.h"
#include <math.h>

#define CH_GRAIN 65536 /* elements per thread before channels are split across threads */

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

/* ---- per-channel row kernels (for lu_foreach_row over one channel) --------- */

/* Accumulator of one channel's pass; op 0 and op 1 as the pass defines. */
typedef struct acc {
  int32_t dt;
  double mean;      /* subtracted before summing squares / products */
  double s0, s1;    /* the sums */
  double a, b, d;   /* affine coefficients of the writing passes */
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

/* op 0 out, op 1 u, op 2 v (or none): out = a * u + b * v + d */
#define AFFINE_ROW(T)                                                          \
  do {                                                                         \
    const T ca = (T)a->a, cb = (T)a->b, cd = (T)a->d;                          \
    if (nops == 2 && st[0] == sizeof(T) && st[1] == sizeof(T)) {               \
      T *restrict o = (T *)p[0];                                               \
      const T *restrict u = (const T *)p[1];                                   \
      for (int64_t i = 0; i < n; i++) o[i] = ca * u[i] + cd;                   \
    } else if (nops == 3 && st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T)) { \
      T *restrict o = (T *)p[0];                                               \
      const T *restrict u = (const T *)p[1], *restrict v = (const T *)p[2];    \
      for (int64_t i = 0; i < n; i++) o[i] = ca * u[i] + cb * v[i] + cd;       \
    } else {                                                                   \
      for (int64_t i = 0; i < n; i++) {                                        \
        T r = ca * *(const T *)(p[1] + i * st[1]) + cd;                        \
        if (nops == 3) r += cb * *(const T *)(p[2] + i * st[2]);               \
        *(T *)(p[0] + i * st[0]) = r;                                          \
      }                                                                        \
    }                                                                          \
  } while (0)

TC static void affine_row(acc *a, int nops, int64_t n, char *const *p, const int64_t *st) {
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
  double eps, mom;
} bn_fwd;

static void bn_fwd_range(void *ctx, int64_t c0, int64_t c1) {
  bn_fwd *f = ctx;
  luon_tensor *const *in = f->c->in;
  static const int X[1] = {0}, YX[2] = {1, 0};
  for (int64_t c = c0; c < c1; c++) {
    acc a = {in[0]->dtype, 0, 0, 0, 0, 0, 0};
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
    /* y = scale * x + (beta - scale * mean) */
    a.a = vget(in[1], c) * invstd;
    a.d = vget(in[2], c) - a.a * mean;
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
    acc a = {in[0]->dtype, vget(in[3], c), 0, 0, 0, 0, 0};
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
  luon_tensor *in[5] = {g->in[0], g->dout[0], g->in[1], g->out[1], g->out[2]};
  luon_tensor *out[3] = {NULL, NULL, NULL};
  int32_t nout = 3;
  LU_TRY(luon_op_call(LU_OP_batch_norm_grad, 5, in, &a, &nout, out));
  for (int k = 0; k < 3; k++) {
    if (g->need[k]) g->din[k] = out[k];
    else luon_tensor_release(out[k]);
  }
  return LUON_OK;
}
