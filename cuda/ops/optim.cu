/* optim.cu: MXNet's fused optimizer updates on the GPU, in place on the
 * weight and its states, any strides, the exact rules of core/ops/optim.c
 * (clip when >= 0):
 *   sgd, sgd_mom: g' = clip(rescale_grad * g, clip_gradient) + wd * w
 *   adam:         g' = clip(rescale_grad * g + wd * w, clip_gradient) */
#include "kernels.cuh"

enum { O_SGD, O_MOM, O_ADAM };

typedef struct upd {
  int kind;
  double lr, wd, rescale, clip, p4, p5, p6;
} upd;

/* op 0 w, 1 g, 2 mom or m, 3 v */
template <class T> __global__ void k_update(lu_space s, upd u) {
  const T lr = (T)u.lr, wd = (T)u.wd, rs = (T)u.rescale, cl = (T)u.clip;
  const T p4 = (T)u.p4, p5 = (T)u.p5, p6 = (T)u.p6;
  const bool doclip = u.clip >= 0;
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    T *w = (T *)s.p[0] + o[0];
    T g = rs * ((const T *)s.p[1])[o[1]];
    if (u.kind == O_ADAM) g += wd * *w;
    if (doclip) g = g > cl ? cl : g < -cl ? -cl : g;
    T gg = u.kind == O_ADAM ? g : g + wd * *w;
    if (u.kind == O_SGD) {
      *w -= lr * gg;
    } else if (u.kind == O_MOM) {
      T *m = (T *)s.p[2] + o[2];
      *m = p4 * *m - lr * gg;
      *w += *m;
    } else {
      T *m = (T *)s.p[2] + o[2], *v = (T *)s.p[3] + o[3];
      *m = p4 * *m + ((T)1 - p4) * gg;
      *v = p5 * *v + ((T)1 - p5) * gg * gg;
      T sq;
      if constexpr (sizeof(T) == 4) sq = sqrtf(*v);
      else sq = sqrt(*v);
      *w -= lr * *m / (sq + p6);
    }
  }
}

static luon_status run(lu_call *c, int kind) {
  const luon_attrs *a = c->attrs;
  luon_tensor *w = c->in[0];
  const double *own = a->f + LU_NF_sgd_update; /* momentum; beta1, beta2, epsilon (optim.c) */
  upd u = {kind, a->f[LU_OPT_LR], a->f[LU_OPT_WD], a->f[LU_OPT_RESCALE], a->f[LU_OPT_CLIP], own[0], own[1], own[2]};
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (w->size > 0) {
    lu_space sp;
    lu_space_init(&sp, w->ndim, w->shape);
    for (int j = 0; j < c->nin; j++) lu_space_add(&sp, c->in[j]);
    lu_space_done(&sp);
    LU_DISPATCH_FLOAT(w->dtype, T, (k_update<T><<<lu_blocks(sp.n), LU_THREADS, 0, k.s>>>(sp, u)),
                      s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  }
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_sgd_update(lu_call *c) { return run(c, O_SGD); }
luon_status lu_cuda_sgd_mom_update(lu_call *c) { return run(c, O_MOM); }
luon_status lu_cuda_adam_update(lu_call *c) { return run(c, O_ADAM); }
