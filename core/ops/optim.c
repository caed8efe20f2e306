/* optim.c: MXNet's fused optimizer updates (sgd, sgd with momentum, adam,
 * nag, rmsprop plain and centered, adagrad, adadelta, adamw; and, in part 2
 * below, adamax, nadam, lamb, signsgd, signum, ftrl), one pass over the
 * weight and its states, in place, float32 and float64, any strides.
 * Not here: learning-rate schedules, Adam's bias correction (folded into lr
 * by the caller), multi-precision copies.
 * Weight decay enters as in MXNet 1.9.1's kernels (clip when >= 0):
 *   sgd, sgd_mom, nag:          g' = clip(rescale_grad * g, clip_gradient) + wd * w
 *   adam, rmsprop:              g' = clip(rescale_grad * g + wd * w, clip_gradient)
 *   adagrad, adadelta, adamw:   g' = clip(rescale_grad * g, clip_gradient); wd * w
 *                               joins the step, not the gradient
 *   (adagrad and adadelta are MXNet's Python steps, the others its kernels) */
#include "internal.h"
#include <math.h>

#define PAR_GRAIN 16384

enum { O_SGD, O_MOM, O_ADAM, O_NAG, O_RMSPROP, O_RMSPROPALEX, O_ADAGRAD, O_ADADELTA, O_ADAMW };

/* f[0] lr, f[1] wd, f[2] rescale_grad, f[3] clip_gradient, f[4..7] per rule */
typedef struct upd {
  int kind;
  int32_t dt;
  double lr, wd, rescale, clip, p4, p5, p6, p7;
} upd;

/* w (..), then inputs 1..n-1 of w's shape and dtype (all float). */
static luon_status upd_shape_n(lu_call *c, const char *op, const char *const *names, int n) {
  const luon_tensor *w = c->in[0];
  for (int k = 0; k < n; k++) {
    const luon_tensor *t = c->in[k];
    if (t->dtype != LUON_DTYPE_F32 && t->dtype != LUON_DTYPE_F64)
      return lu_error(LUON_EDTYPE, "%s: %s is %s; only float32 and float64 are supported", op,
                      names[k], luon_dtype_name(t->dtype));
    if (t->dtype != w->dtype)
      return lu_error(LUON_EDTYPE, "%s: %s is %s but weight is %s; they must match", op, names[k],
                      luon_dtype_name(t->dtype), luon_dtype_name(w->dtype));
    if (t->ndim != w->ndim || memcmp(t->shape, w->shape, sizeof(int64_t) * (size_t)w->ndim) != 0)
      return lu_error(LUON_ESHAPE, "%s: %s has shape %s but weight has shape %s; they must match",
                      op, names[k], lu_shape_str(t->ndim, t->shape), lu_shape_str(w->ndim, w->shape));
  }
  c->out_ndim[0] = w->ndim;
  memcpy(c->out_shape[0], w->shape, sizeof(int64_t) * (size_t)w->ndim);
  c->out_dtype[0] = w->dtype;
  return LUON_OK;
}
static luon_status upd_shape(lu_call *c, const char *op, const char *const *names) {
  return upd_shape_n(c, op, names, c->nin);
}

static inline float clipf_(float v, float c, bool on) {
  return on ? (v > c ? c : v < -c ? -c : v) : v;
}
static inline double clipd_(double v, double c, bool on) {
  return on ? (v > c ? c : v < -c ? -c : v) : v;
}

/* One row; op 0 w, 1 g, 2 mom or m, 3 v. Dense rows take the vectorisable
 * loops; the strided one reads through byte strides. */
#define UPD_ROW(T, sfx, CLIP, SQRT)                                            \
  TC static void upd_row_##sfx(const upd *u, int64_t n, char *const *p, const int64_t *st) { \
    const T lr = (T)u->lr, wd = (T)u->wd, rs = (T)u->rescale, cl = (T)u->clip; \
    const T p4 = (T)u->p4, p5 = (T)u->p5, p6 = (T)u->p6;                       \
    const bool doclip = u->clip >= 0;                                          \
    int nops = u->kind == O_SGD ? 2 : u->kind == O_MOM ? 3 : 4;                \
    bool dense = true;                                                         \
    for (int k = 0; k < nops; k++) dense = dense && st[k] == sizeof(T);        \
    if (dense) {                                                               \
      T *restrict w = (T *)p[0];                                               \
      const T *restrict g = (const T *)p[1];                                   \
      T *restrict s1 = (T *)(nops > 2 ? p[2] : NULL);                          \
      T *restrict s2 = (T *)(nops > 3 ? p[3] : NULL);                          \
      switch (u->kind) {                                                       \
      case O_SGD:                                                              \
        for (int64_t i = 0; i < n; i++) w[i] -= lr * (CLIP(rs * g[i], cl, doclip) + wd * w[i]); \
        break;                                                                 \
      case O_MOM:                                                              \
        for (int64_t i = 0; i < n; i++) {                                      \
          T mom = p4 * s1[i] - lr * (CLIP(rs * g[i], cl, doclip) + wd * w[i]); \
          s1[i] = mom;                                                         \
          w[i] += mom;                                                         \
        }                                                                      \
        break;                                                                 \
      default:                                                                 \
        for (int64_t i = 0; i < n; i++) {                                      \
          T gg = CLIP(rs * g[i] + wd * w[i], cl, doclip);                      \
          T m = p4 * s1[i] + ((T)1 - p4) * gg;                                 \
          T v = p5 * s2[i] + ((T)1 - p5) * gg * gg;                            \
          s1[i] = m;                                                           \
          s2[i] = v;                                                           \
          w[i] -= lr * m / (SQRT(v) + p6);                                     \
        }                                                                      \
        break;                                                                 \
      }                                                                        \
      return;                                                                  \
    }                                                                          \
    for (int64_t i = 0; i < n; i++) {                                          \
      T *w = (T *)(p[0] + i * st[0]);                                          \
      T rg = rs * *(const T *)(p[1] + i * st[1]);                              \
      T gg = u->kind == O_ADAM ? CLIP(rg + wd * *w, cl, doclip) : CLIP(rg, cl, doclip) + wd * *w; \
      if (u->kind == O_SGD) {                                                  \
        *w -= lr * gg;                                                         \
      } else if (u->kind == O_MOM) {                                           \
        T *s1 = (T *)(p[2] + i * st[2]);                                       \
        *s1 = p4 * *s1 - lr * gg;                                              \
        *w += *s1;                                                             \
      } else {                                                                 \
        T *s1 = (T *)(p[2] + i * st[2]), *s2 = (T *)(p[3] + i * st[3]);        \
        *s1 = p4 * *s1 + ((T)1 - p4) * gg;                                     \
        *s2 = p5 * *s2 + ((T)1 - p5) * gg * gg;                                \
        *w -= lr * *s1 / (SQRT(*s2) + p6);                                     \
      }                                                                        \
    }                                                                          \
  }
UPD_ROW(float, f32, clipf_, sqrtf)
UPD_ROW(double, f64, clipd_, sqrt)

/* NAG, RMSProp (plain and centered), AdaGrad, AdaDelta, AdamW: one element
 * at a time through byte strides, MXNet's expressions in MXNet's order.
 * op 0 w, 1 g, 2.. the states in the registry's order; p4.. the rule's slots. */
#define UPD_MORE_ROW(T, sfx, CLIP, SQRT)                                       \
  static void more_row_##sfx(const upd *u, int64_t n, char *const *p, const int64_t *st) { \
    const T lr = (T)u->lr, wd = (T)u->wd, rs = (T)u->rescale, cl = (T)u->clip; \
    const T p4 = (T)u->p4, p5 = (T)u->p5, p6 = (T)u->p6, p7 = (T)u->p7;        \
    const T rest4 = (T)(1 - u->p4); /* AdaDelta's 1 - rho: a Python float */  \
    const bool doclip = u->clip >= 0;                                          \
    for (int64_t i = 0; i < n; i++) {                                          \
      T *w = (T *)(p[0] + i * st[0]);                                          \
      const T g = *(const T *)(p[1] + i * st[1]);                              \
      T *s1 = (T *)(p[2] + i * st[2]);                                         \
      switch (u->kind) {                                                       \
      case O_NAG: { /* mom0 = momentum * mom; w += -mom0 + (1 + momentum)(mom0 - lr g') */ \
        T cg = CLIP(rs * g, cl, doclip);                                       \
        T m = p4 * *s1;                                                        \
        *w = *w - m + (p4 + (T)1) * (m - lr * (cg + wd * *w));                 \
        *s1 = m - lr * (cg + wd * *w); /* the new w: MXNet's kernel, out = w */ \
        break;                                                                 \
      }                                                                        \
      case O_RMSPROP: { /* n = (1-g1) g'^2 + g1 n; w = clipw(w - lr g'/sqrt(n + eps)) */ \
        T gg = CLIP(rs * g + wd * *w, cl, doclip);                             \
        *s1 = ((T)1 - p4) * (gg * gg) + p4 * *s1;                              \
        *w = CLIP(*w - lr * (gg / SQRT(*s1 + p5)), p6, u->p6 >= 0);            \
        break;                                                                 \
      }                                                                        \
      case O_RMSPROPALEX: { /* Graves: n, g_avg, delta = g2 delta - lr g'/sqrt(n - g_avg^2 + eps) */ \
        T *s2 = (T *)(p[3] + i * st[3]), *s3 = (T *)(p[4] + i * st[4]);       \
        T gg = CLIP(rs * g + wd * *w, cl, doclip);                             \
        *s1 = ((T)1 - p4) * gg * gg + p4 * *s1;                                \
        *s2 = ((T)1 - p4) * gg + p4 * *s2;                                     \
        *s3 = p5 * *s3 - (lr * gg / SQRT(*s1 - *s2 * *s2 + p6));               \
        *w = CLIP(*w + *s3, p7, u->p7 >= 0);                                   \
        break;                                                                 \
      }                                                                        \
      case O_ADAGRAD: { /* h += g'^2; w += (g'/sqrt(h + eps) + w wd) * -lr */  \
        T gg = CLIP(rs * g, cl, doclip);                                       \
        *s1 += gg * gg;                                                        \
        *w += (gg / SQRT(*s1 + p4) + *w * wd) * -lr;                           \
        break;                                                                 \
      }                                                                        \
      case O_ADADELTA: { /* d = sqrt(acc_d + eps)/sqrt(acc_g + eps) g'; w -= d + wd w */ \
        T *s2 = (T *)(p[3] + i * st[3]);                                       \
        T gg = CLIP(g * rs, cl, doclip);                                       \
        *s1 = *s1 * p4 + rest4 * gg * gg;                                      \
        T d = SQRT(*s2 + p5) / SQRT(*s1 + p5) * gg;                            \
        *s2 = *s2 * p4 + rest4 * d * d;                                        \
        *w -= d + wd * *w;                                                     \
        break;                                                                 \
      }                                                                        \
      default: { /* adamw: w -= eta (lr m/(sqrt(v) + eps) + wd w) */           \
        T *s2 = (T *)(p[3] + i * st[3]);                                       \
        T gg = CLIP(rs * g, cl, doclip);                                       \
        *s1 = p4 * *s1 + ((T)1 - p4) * gg;                                     \
        *s2 = p5 * *s2 + ((T)1 - p5) * (gg * gg);                              \
        *w = *w - p7 * (lr * *s1 / (SQRT(*s2) + p6) + wd * *w);                \
        break;                                                                 \
      }                                                                        \
      }                                                                        \
    }                                                                          \
  }
UPD_MORE_ROW(float, f32, clipf_, sqrtf)
UPD_MORE_ROW(double, f64, clipd_, sqrt)

static void upd_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  const upd *u = ctx;
  bool more = u->kind > O_ADAM;
  if (u->dt == LUON_DTYPE_F32) (more ? more_row_f32 : upd_row_f32)(u, n, p, st);
  else (more ? more_row_f64 : upd_row_f64)(u, n, p, st);
}

static luon_status upd_run(lu_call *c, int kind) {
  const luon_attrs *a = c->attrs;
  luon_tensor *w = c->in[0];
  /* p4..p7: the update's own slots after sgd_update's (core/luon_ops.def) */
  _Static_assert((int)LU_SGD_MOMENTUM == (int)LU_NF_sgd_update && (int)LU_ADAM_BETA1 == (int)LU_NF_sgd_update &&
                 (int)LU_ADAM_EPSILON == (int)LU_NF_sgd_update + 2 && (int)LU_NAG_MOMENTUM == (int)LU_NF_sgd_update &&
                 (int)LU_RMSPROP_CLIP_WEIGHTS == (int)LU_NF_sgd_update + 2 &&
                 (int)LU_RMSPROPALEX_CLIP_WEIGHTS == (int)LU_NF_sgd_update + 3 &&
                 (int)LU_ADAGRAD_EPSILON == (int)LU_NF_sgd_update && (int)LU_ADADELTA_EPSILON == (int)LU_NF_sgd_update + 1 &&
                 (int)LU_ADAMW_ETA == (int)LU_NF_sgd_update + 3 && LU_NF_sgd_update + 4 <= LUON_MAX_ATTR_FLOATS,
                 "the updates' own slots follow sgd_update's");
  const double *own = a->f + LU_NF_sgd_update;
  upd u = {kind, w->dtype, a->f[LU_OPT_LR], a->f[LU_OPT_WD], a->f[LU_OPT_RESCALE], a->f[LU_OPT_CLIP],
           own[0], own[1], own[2], own[3]};
  if (kind == O_ADAMW && !(isfinite(u.rescale) && u.rescale != 0))
    return LUON_OK; /* MXNet's adamw_update skips the step (a loss scaler's overflow) */
  char *base[LU_ITER_MAX_OPS];
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];
  for (int k = 0; k < c->nin; k++) {
    base[k] = lu_data(c->in[k]);
    lu_byte_strides(c->in[k], w->ndim, w->shape, st[k]);
  }
  lu_foreach_row(w->ndim, w->shape, c->nin, base, (const int64_t(*)[LU_MAXD])st, PAR_GRAIN,
                 false /* in place: never stops half-way */, upd_row, &u);
  return LUON_OK;
}

/* sgd_update: w = w - lr * g' */
luon_status lu_shape_sgd_update(lu_call *c) {
  static const char *const names[2] = {"weight", "grad"};
  return upd_shape(c, "sgd_update", names);
}
luon_status lu_cpu_sgd_update(lu_call *c) { return upd_run(c, O_SGD); }

/* sgd_mom_update: mom = momentum * mom - lr * g'; w = w + mom (f[4] momentum) */
luon_status lu_shape_sgd_mom_update(lu_call *c) {
  static const char *const names[3] = {"weight", "grad", "mom"};
  return upd_shape(c, "sgd_mom_update", names);
}
luon_status lu_cpu_sgd_mom_update(lu_call *c) { return upd_run(c, O_MOM); }

/* adam_update: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * w = w - lr * m / (sqrt(v) + eps)  (f[4] b1, f[5] b2, f[6] eps) */
luon_status lu_shape_adam_update(lu_call *c) {
  static const char *const names[4] = {"weight", "grad", "mean", "var"};
  return upd_shape(c, "adam_update", names);
}
luon_status lu_cpu_adam_update(lu_call *c) { return upd_run(c, O_ADAM); }

/* nag_mom_update: mom0 = momentum * mom; w = w - mom0 + (1 + momentum) * (mom0 - lr * g');
 * mom = mom0 - lr * g'' where g'' takes wd * the NEW w: MXNet's kernel reads the
 * weight after writing its output, which MXNet's NAG makes the weight itself
 * (f[4] momentum; momentum 0 is sgd_update, as MXNet's NAG) */
luon_status lu_shape_nag_mom_update(lu_call *c) {
  static const char *const names[3] = {"weight", "grad", "mom"};
  return upd_shape(c, "nag_mom_update", names);
}
luon_status lu_cpu_nag_mom_update(lu_call *c) { return upd_run(c, O_NAG); }

/* rmsprop_update (Tieleman & Hinton): n = (1-g1) g'^2 + g1 n;
 * w = clip(w - lr * g' / sqrt(n + eps), clip_weights)  (f[4] gamma1, f[5] eps, f[6] clip_weights) */
luon_status lu_shape_rmsprop_update(lu_call *c) {
  static const char *const names[3] = {"weight", "grad", "n"};
  return upd_shape(c, "rmsprop_update", names);
}
luon_status lu_cpu_rmsprop_update(lu_call *c) { return upd_run(c, O_RMSPROP); }

/* rmspropalex_update (Graves 2013, centered): n = (1-g1) g'^2 + g1 n; g = (1-g1) g' + g1 g;
 * delta = g2 delta - lr g' / sqrt(n - g^2 + eps); w = clip(w + delta, clip_weights)
 * (f[4] gamma1, f[5] gamma2, f[6] eps, f[7] clip_weights) */
luon_status lu_shape_rmspropalex_update(lu_call *c) {
  static const char *const names[5] = {"weight", "grad", "n", "g", "delta"};
  return upd_shape(c, "rmspropalex_update", names);
}
luon_status lu_cpu_rmspropalex_update(lu_call *c) { return upd_run(c, O_RMSPROPALEX); }

/* adagrad_update: history += g'^2; w += (g' / sqrt(history + eps) + w * wd) * -lr  (f[4] eps) */
luon_status lu_shape_adagrad_update(lu_call *c) {
  static const char *const names[3] = {"weight", "grad", "history"};
  return upd_shape(c, "adagrad_update", names);
}
luon_status lu_cpu_adagrad_update(lu_call *c) { return upd_run(c, O_ADAGRAD); }

/* adadelta_update: acc_g = rho acc_g + (1-rho) g'^2; d = sqrt(acc_delta + eps) / sqrt(acc_g + eps) g';
 * acc_delta = rho acc_delta + (1-rho) d^2; w -= d + wd * w  (no lr; f[4] rho, f[5] eps) */
luon_status lu_shape_adadelta_update(lu_call *c) {
  static const char *const names[4] = {"weight", "grad", "acc_g", "acc_delta"};
  return upd_shape(c, "adadelta_update", names);
}
luon_status lu_cpu_adadelta_update(lu_call *c) { return upd_run(c, O_ADADELTA); }

/* adamw_update: m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 * w -= eta * (lr * m / (sqrt(v) + eps) + wd * w)  (f[4] b1, f[5] b2, f[6] eps, f[7] eta) */
luon_status lu_shape_adamw_update(lu_call *c) {
  static const char *const names[4] = {"weight", "grad", "mean", "var"};
  return upd_shape(c, "adamw_update", names);
}
luon_status lu_cpu_adamw_update(lu_call *c) { return upd_run(c, O_ADAMW); }

/* ---- optimizers, part 2: Adamax, Nadam, LAMB, Signum, FTRL ------------------
 * MXNet 1.9.1's rules, in the weight's dtype (clip when >= 0):
 *   adamax, nadam: g' = clip(rescale_grad * g + wd * w, clip_gradient)
 *   lamb, ftrl:    g' = clip(rescale_grad * g, clip_gradient) (lamb adds wd * w
 *                  to its direction, ftrl's denominator takes wd)
 *   signum:        mom = momentum mom - (1 - momentum) (wd w + g')
 *   signsgd:       sign(g) alone (MXNet's kernel ignores clip and rescale) */

enum { R_ADAMAX, R_NADAM, R_LAMB, R_LAMB_APPLY, R_SIGNSGD, R_SIGNUM, R_FTRL };

/* q: the op's own float slots in registry order (core/luon_ops.def) */
typedef struct upd2 {
  int rule, nops;
  int32_t dt;
  double lr, wd, rescale, clip, q[4];
  double d1, d2;     /* the bias corrections 1 - beta1^t, 1 - beta2^t (nadam: d2; lamb: both, or 1 and 1) */
  double ss;         /* lamb's first pass: the sum of its direction's squares */
} upd2;

/* One row; op 0 w, 1 g, 2 and 3 the states. */
#define UPD2_ROW(T, sfx, SQRT, FABS)                                                          \
  static void upd2_row_##sfx(upd2 *u, int64_t n, char *const *p, const int64_t *st) {         \
    const T lr = (T)u->lr, wd = (T)u->wd, rs = (T)u->rescale, cl = (T)u->clip;                \
    const T q0 = (T)u->q[0], q1 = (T)u->q[1], q2 = (T)u->q[2], q3 = (T)u->q[3];               \
    const T d1 = (T)u->d1, d2 = (T)u->d2;                                                     \
    const bool doclip = u->clip >= 0;                                                         \
    for (int64_t i = 0; i < n; i++) {                                                         \
      T *w = (T *)(p[0] + i * st[0]);                                                         \
      const T graw = *(const T *)(p[1] + i * st[1]);                                          \
      T *s1 = u->nops > 2 ? (T *)(p[2] + i * st[2]) : NULL;                                   \
      T *s2 = u->nops > 3 ? (T *)(p[3] + i * st[3]) : NULL;                                   \
      T g = u->rule == R_ADAMAX || u->rule == R_NADAM ? rs * graw + wd * *w : rs * graw;      \
      if (doclip) g = g > cl ? cl : g < -cl ? -cl : g;                                        \
      switch (u->rule) {                                                                      \
      case R_ADAMAX: { /* q: beta1, beta2 */                                                  \
        *s1 = q0 * *s1 + ((T)1 - q0) * g;                                                     \
        T bu = q1 * *s2, ag = FABS(g);                                                        \
        *s2 = bu > ag ? bu : ag;                                                              \
        *w -= lr * *s1 / *s2;                                                                 \
        break;                                                                                \
      }                                                                                       \
      case R_NADAM: /* q: beta1, beta2, epsilon, m ratio */                                   \
        *s1 = q0 * *s1 + ((T)1 - q0) * g;                                                     \
        *s2 = q1 * *s2 + ((T)1 - q1) * g * g;                                                 \
        *w -= lr * (g + q3 * *s1) / (SQRT(*s2 / d2) + q2);                                    \
        break;                                                                                \
      case R_LAMB:                                                                            \
      case R_LAMB_APPLY: { /* q: beta1, beta2, epsilon */                                     \
        if (u->rule == R_LAMB) {                                                              \
          *s1 = q0 * *s1 + ((T)1 - q0) * g;                                                   \
          *s2 = q1 * *s2 + ((T)1 - q1) * g * g;                                               \
        }                                                                                     \
        T d = (*s1 / d1) / (SQRT(*s2 / d2) + q2) + wd * *w;                                   \
        if (u->rule == R_LAMB) u->ss += (double)d * (double)d;                                \
        else *w -= lr * d; /* lr: lr times the trust ratio */                                 \
        break;                                                                                \
      }                                                                                       \
      case R_SIGNSGD:                                                                         \
        *w = ((T)1 - lr * wd) * *w - lr * (T)((graw > 0) - (graw < 0));                       \
        break;                                                                                \
      case R_SIGNUM: /* q: momentum, wd_lh */                                                 \
        *s1 = q0 * *s1 - ((T)1 - q0) * wd * *w - ((T)1 - q0) * g;                             \
        *w = ((T)1 - lr * q1) * *w + lr * (T)((*s1 > 0) - (*s1 < 0));                         \
        break;                                                                                \
      default: { /* R_FTRL, q: lamda1, beta; s1 z, s2 n */                                    \
        *s1 += g - (SQRT(*s2 + g * g) - SQRT(*s2)) * *w / lr;                                 \
        *s2 += g * g;                                                                         \
        const T z = *s1;                                                                      \
        *w = FABS(z) > q0 ? ((T)((z > 0) - (z < 0)) * q0 - z) / ((q1 + SQRT(*s2)) / lr + wd) : (T)0; \
        break;                                                                                \
      }                                                                                       \
      }                                                                                       \
    }                                                                                         \
  }
UPD2_ROW(float, f32, sqrtf, fabsf)
UPD2_ROW(double, f64, sqrt, fabs)

static void upd2_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  upd2 *u = ctx;
  if (u->dt == LUON_DTYPE_F32) upd2_row_f32(u, n, p, st);
  else upd2_row_f64(u, n, p, st);
}

static luon_status upd2_run(lu_call *c, int rule) {
  _Static_assert((int)LU_ADAMAX_BETA1 == (int)LU_NF_sgd_update && (int)LU_NADAM_M_RATIO == (int)LU_NF_sgd_update + 3 &&
                 (int)LU_LAMB_EPSILON == (int)LU_NF_sgd_update + 2 && (int)LU_SIGNUM_WD_LH == (int)LU_NF_sgd_update + 1 &&
                 (int)LU_FTRL_BETA == (int)LU_NF_sgd_update + 1 && LU_NF_sgd_update + 4 <= LUON_MAX_ATTR_FLOATS,
                 "the updates' own slots follow sgd_update's");
  const luon_attrs *a = c->attrs;
  luon_tensor *w = c->in[0];
  int nops = c->nin < 4 ? c->nin : 4; /* lamb's r1 is read once, below */
  upd2 u = {rule, nops, w->dtype, a->f[LU_OPT_LR], a->f[LU_OPT_WD], a->f[LU_OPT_RESCALE], a->f[LU_OPT_CLIP],
            {0}, 1, 1, 0};
  for (int k = 0; k < 4; k++) u.q[k] = a->f[LU_NF_sgd_update + k];
  if (rule == R_NADAM) u.d2 = 1 - pow(u.q[1], (double)a->i[LU_NADAM_T]);
  if (rule == R_LAMB && a->i[LU_LAMB_BIAS_CORRECTION] != 0) {
    u.d1 = 1 - pow(u.q[0], (double)a->i[LU_LAMB_T]);
    u.d2 = 1 - pow(u.q[1], (double)a->i[LU_LAMB_T]);
  }
  char *base[LU_ITER_MAX_OPS];
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];
  for (int k = 0; k < nops; k++) {
    base[k] = lu_data(c->in[k]);
    lu_byte_strides(c->in[k], w->ndim, w->shape, st[k]);
  }
  /* lamb's first pass sums over the tensor: one thread, in order */
  lu_foreach_row(w->ndim, w->shape, nops, base, (const int64_t(*)[LU_MAXD])st, rule == R_LAMB ? 0 : PAR_GRAIN,
                 false /* in place: never stops half-way */, upd2_row, &u);
  if (rule == R_LAMB) { /* phase 2: lr times the trust ratio r1 / ||d|| (1 when either is 0) */
    const void *r1p = lu_data(c->in[4]);
    double r1 = w->dtype == LUON_DTYPE_F32 ? *(const float *)r1p : *(const double *)r1p, r2 = sqrt(u.ss);
    if (r1 != 0 && r2 != 0) u.lr = u.lr * r1 / r2;
    u.rule = R_LAMB_APPLY;
    lu_foreach_row(w->ndim, w->shape, nops, base, (const int64_t(*)[LU_MAXD])st, PAR_GRAIN, false, upd2_row, &u);
  }
  return LUON_OK;
}

#define UPD2_OP(name, rule, ...)                                        \
  luon_status lu_shape_##name(lu_call *c) {                             \
    static const char *const names[] = {"weight", "grad", __VA_ARGS__}; \
    return upd_shape(c, #name, names);                                  \
  }                                                                     \
  luon_status lu_cpu_##name(lu_call *c) { return upd2_run(c, rule); }

/* adamax_update: m = b1 m + (1-b1) g'; u = max(b2 u, |g'|); w -= lr m / u */
UPD2_OP(adamax_update, R_ADAMAX, "mean", "var")
/* nadam_update: m, v as adam; w -= lr (g' + M_RATIO m) / (sqrt(v / (1 - b2^T)) + eps) */
UPD2_OP(nadam_update, R_NADAM, "mean", "var")
/* signsgd_update: w = (1 - lr wd) w - lr sign(g) */
UPD2_OP(signsgd_update, R_SIGNSGD, NULL)
/* signum_update: mom as above; w = (1 - lr wd_lh) w + lr sign(mom) */
UPD2_OP(signum_update, R_SIGNUM, "mom")
/* ftrl_update: z += g' - (sqrt(n + g'^2) - sqrt(n)) w / lr; n += g'^2;
 * w = |z| > lamda1 ? (sign(z) lamda1 - z) / ((beta + sqrt(n)) / lr + wd) : 0 */
UPD2_OP(ftrl_update, R_FTRL, "z", "n")

/* lamb_update: m, v as adam but g' without wd; d = (m / (1 - b1^T)) /
 * (sqrt(v / (1 - b2^T)) + eps) + wd w (no 1 - b^T without BIAS_CORRECTION);
 * w -= lr (r1 / ||d||) d, r1 (one value) given */
luon_status lu_shape_lamb_update(lu_call *c) {
  static const char *const names[4] = {"weight", "grad", "mean", "var"};
  const luon_tensor *w = c->in[0], *r1 = c->in[4];
  if (r1->size != 1 || r1->dtype != w->dtype)
    return lu_error(LUON_ESHAPE, "lamb_update: r1 must be one %s value (the weight's norm), got %s %s",
                    luon_dtype_name(w->dtype), luon_dtype_name(r1->dtype), lu_shape_str(r1->ndim, r1->shape));
  return upd_shape_n(c, "lamb_update", names, 4);
}
luon_status lu_cpu_lamb_update(lu_call *c) { return upd2_run(c, R_LAMB); }
