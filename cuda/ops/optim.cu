/* optim.cu: MXNet's fused optimizer updates on the GPU, in place on the
 * weight and its states, any strides, the exact rules of core/ops/optim.c
 * (clip when >= 0):
 *   sgd, sgd_mom, nag:          g' = clip(rescale_grad * g, clip_gradient) + wd * w
 *   adam, rmsprop:              g' = clip(rescale_grad * g + wd * w, clip_gradient)
 *   adagrad, adadelta, adamw:   g' = clip(rescale_grad * g, clip_gradient); wd * w
 *                               joins the step, not the gradient */
#include "kernels.cuh"

enum { O_SGD, O_MOM, O_ADAM, O_NAG, O_RMSPROP, O_RMSPROPALEX, O_ADAGRAD, O_ADADELTA, O_ADAMW };

typedef struct upd {
  int kind;
  double lr, wd, rescale, clip, p4, p5, p6, p7;
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

template <class T> __device__ __forceinline__ T clip_(T v, T c, bool on) {
  return on ? (v > c ? c : v < -c ? -c : v) : v;
}
template <class T> __device__ __forceinline__ T sqrt_(T v) {
  if constexpr (sizeof(T) == 4) return sqrtf(v);
  else return sqrt(v);
}

/* NAG, RMSProp (plain and centered), AdaGrad, AdaDelta, AdamW: optim.c's
 * more_row, element by element. op 0 w, 1 g, 2.. the states */
template <class T> __global__ void k_more(lu_space s, upd u) {
  const T lr = (T)u.lr, wd = (T)u.wd, rs = (T)u.rescale, cl = (T)u.clip;
  const T p4 = (T)u.p4, p5 = (T)u.p5, p6 = (T)u.p6, p7 = (T)u.p7;
  const T rest4 = (T)(1 - u.p4);
  const bool doclip = u.clip >= 0;
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    T *w = (T *)s.p[0] + o[0];
    const T g = ((const T *)s.p[1])[o[1]];
    T *s1 = (T *)s.p[2] + o[2];
    switch (u.kind) {
    case O_NAG: {
      T cg = clip_(rs * g, cl, doclip);
      T m = p4 * *s1;
      *w = *w - m + (p4 + (T)1) * (m - lr * (cg + wd * *w));
      *s1 = m - lr * (cg + wd * *w); /* the new w, as optim.c */
      break;
    }
    case O_RMSPROP: {
      T gg = clip_(rs * g + wd * *w, cl, doclip);
      *s1 = ((T)1 - p4) * (gg * gg) + p4 * *s1;
      *w = clip_(*w - lr * (gg / sqrt_(*s1 + p5)), p6, u.p6 >= 0);
      break;
    }
    case O_RMSPROPALEX: {
      T *s2 = (T *)s.p[3] + o[3], *s3 = (T *)s.p[4] + o[4];
      T gg = clip_(rs * g + wd * *w, cl, doclip);
      *s1 = ((T)1 - p4) * gg * gg + p4 * *s1;
      *s2 = ((T)1 - p4) * gg + p4 * *s2;
      *s3 = p5 * *s3 - (lr * gg / sqrt_(*s1 - *s2 * *s2 + p6));
      *w = clip_(*w + *s3, p7, u.p7 >= 0);
      break;
    }
    case O_ADAGRAD: {
      T gg = clip_(rs * g, cl, doclip);
      *s1 += gg * gg;
      *w += (gg / sqrt_(*s1 + p4) + *w * wd) * -lr;
      break;
    }
    case O_ADADELTA: {
      T *s2 = (T *)s.p[3] + o[3];
      T gg = clip_(g * rs, cl, doclip);
      *s1 = *s1 * p4 + rest4 * gg * gg;
      T d = sqrt_(*s2 + p5) / sqrt_(*s1 + p5) * gg;
      *s2 = *s2 * p4 + rest4 * d * d;
      *w -= d + wd * *w;
      break;
    }
    default: {
      T *s2 = (T *)s.p[3] + o[3];
      T gg = clip_(rs * g, cl, doclip);
      *s1 = p4 * *s1 + ((T)1 - p4) * gg;
      *s2 = p5 * *s2 + ((T)1 - p5) * (gg * gg);
      *w = *w - p7 * (lr * *s1 / (sqrt_(*s2) + p6) + wd * *w);
      break;
    }
    }
  }
}

static luon_status run(lu_call *c, int kind) {
  const luon_attrs *a = c->attrs;
  luon_tensor *w = c->in[0];
  const double *own = a->f + LU_NF_sgd_update; /* the rule's own slots (optim.c) */
  upd u = {kind, a->f[LU_OPT_LR], a->f[LU_OPT_WD], a->f[LU_OPT_RESCALE], a->f[LU_OPT_CLIP],
           own[0], own[1], own[2], own[3]};
  if (kind == O_ADAMW && !(isfinite(u.rescale) && u.rescale != 0))
    return LUON_OK; /* MXNet's adamw_update skips the step */
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (w->size > 0) {
    lu_space sp;
    lu_space_init(&sp, w->ndim, w->shape);
    for (int j = 0; j < c->nin; j++) lu_space_add(&sp, c->in[j]);
    lu_space_done(&sp);
    if (kind > O_ADAM) {
      LU_DISPATCH_FLOAT(w->dtype, T, (k_more<T><<<lu_blocks(sp.n), LU_THREADS, 0, k.s>>>(sp, u)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
    } else {
      LU_DISPATCH_FLOAT(w->dtype, T, (k_update<T><<<lu_blocks(sp.n), LU_THREADS, 0, k.s>>>(sp, u)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
    }
  }
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_sgd_update(lu_call *c) { return run(c, O_SGD); }
luon_status lu_cuda_sgd_mom_update(lu_call *c) { return run(c, O_MOM); }
luon_status lu_cuda_adam_update(lu_call *c) { return run(c, O_ADAM); }
luon_status lu_cuda_nag_mom_update(lu_call *c) { return run(c, O_NAG); }
luon_status lu_cuda_rmsprop_update(lu_call *c) { return run(c, O_RMSPROP); }
luon_status lu_cuda_rmspropalex_update(lu_call *c) { return run(c, O_RMSPROPALEX); }
luon_status lu_cuda_adagrad_update(lu_call *c) { return run(c, O_ADAGRAD); }
luon_status lu_cuda_adadelta_update(lu_call *c) { return run(c, O_ADADELTA); }
luon_status lu_cuda_adamw_update(lu_call *c) { return run(c, O_ADAMW); }
