/* optim.c: MXNet's fused optimizer updates (sgd, sgd with momentum, adam),
 * one pass over the weight and its states, in place, float32 and float64,
 * any strides. Not here: learning-rate schedules, Adam's bias correction
 * (folded into lr by the caller), multi-precision copies.
 * Weight decay enters as in MXNet 1.9.1's kernels (clip when >= 0):
 *   sgd, sgd_mom: g' = clip(rescale_grad * g, clip_gradient) + wd * w
 *   adam:         g' = clip(rescale_grad * g + wd * w, clip_gradient) */
#include "internal.h"
#include <math.h>

#define PAR_GRAIN 16384

enum { O_SGD, O_MOM, O_ADAM };

/* f[0] lr, f[1] wd, f[2] rescale_grad, f[3] clip_gradient, f[4..6] per rule */
typedef struct upd {
  int kind;
  int32_t dt;
  double lr, wd, rescale, clip, p4, p5, p6;
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

static void upd_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  const upd *u = ctx;
  if (u->dt == LUON_DTYPE_F32) upd_row_f32(u, n, p, st);
  else upd_row_f64(u, n, p, st);
}

static luon_status upd_run(lu_call *c, int kind) {
  const luon_attrs *a = c->attrs;
  luon_tensor *w = c->in[0];
  /* p4..p6: the update's own slots after sgd_update's (momentum; beta1, beta2, epsilon) */
  _Static_assert((int)LU_SGD_MOMENTUM == (int)LU_NF_sgd_update && (int)LU_ADAM_BETA1 == (int)LU_NF_sgd_update &&
                 (int)LU_ADAM_EPSILON == (int)LU_NF_sgd_update + 2, "the updates' own slots follow sgd_update's");
  const double *own = a->f + LU_NF_sgd_update;
  upd u = {kind, w->dtype, a->f[LU_OPT_LR], a->f[LU_OPT_WD], a->f[LU_OPT_RESCALE], a->f[LU_OPT_CLIP],
           own[0], own[1], own[2]};
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
