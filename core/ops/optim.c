/* optim.c: MXNet's fused optimizer updates (sgd, sgd with momentum, adam,
 * nag, rmsprop plain and centered, adagrad, adadelta, adamw), one pass over
 * the weight and its states, in place, float32 and float64, any strides.
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

/* w (..), then inputs 1..nin-1 of w's shape and dtype (all float). */
static luon_status upd_shape(lu_call *c, const char *op, const char *const *names) {
  const luon_tensor *w = c->in[0];
  for (int k = 0; k < c->nin; k++) {
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
