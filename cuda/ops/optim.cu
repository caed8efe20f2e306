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

/* ---- optimizers, part 2: Adamax, Nadam, LAMB, Signum, FTRL ------------------
 * The rules of core/ops/optim.c's part 2 (its comment states them); q: the
 * op's own float slots in registry order. LAMB: a first kernel updates the
 * moments and sums its direction's squares (double, one atomic per block),
 * a second applies lr times the trust ratio r1 / ||d||. */

enum { R_ADAMAX, R_NADAM, R_LAMB, R_LAMB_APPLY, R_SIGNSGD, R_SIGNUM, R_FTRL };

typedef struct upd2 {
  int rule;
  double lr, wd, rescale, clip, q[4];
  double d1, d2; /* nadam: 1 - beta2^t (d2); lamb: 1 - beta1^t, 1 - beta2^t (1, 1: no correction) */
} upd2;

template <class T> __device__ __forceinline__ T sq_root(T v) {
  if constexpr (sizeof(T) == 4) return sqrtf(v);
  else return sqrt(v);
}

/* op 0 w, 1 g, 2 and 3 the states; lamb: ss the sum of d^2 (first kernel),
 * r1 and ss read by the second */
template <class T> __global__ void k_update2(lu_space s, upd2 u, double *ss, const T *r1) {
  const T lr0 = (T)u.lr, wd = (T)u.wd, rs = (T)u.rescale, cl = (T)u.clip;
  const T q0 = (T)u.q[0], q1 = (T)u.q[1], q2 = (T)u.q[2], q3 = (T)u.q[3];
  const T d1 = (T)u.d1, d2 = (T)u.d2;
  const bool doclip = u.clip >= 0;
  T lr = lr0;
  if (u.rule == R_LAMB_APPLY) { /* lr times the trust ratio (1 when either norm is 0) */
    double n1 = (double)*r1, n2 = sqrt(*ss);
    if (n1 != 0 && n2 != 0) lr = (T)(u.lr * n1 / n2);
  }
  double part = 0;
  LU_GRID_LOOP(i, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, i, o);
    T *w = (T *)s.p[0] + o[0];
    const T graw = ((const T *)s.p[1])[o[1]];
    T *s1 = s.nops > 2 ? (T *)s.p[2] + o[2] : NULL;
    T *s2 = s.nops > 3 ? (T *)s.p[3] + o[3] : NULL;
    T g = u.rule == R_ADAMAX || u.rule == R_NADAM ? rs * graw + wd * *w : rs * graw;
    if (doclip) g = g > cl ? cl : g < -cl ? -cl : g;
    switch (u.rule) {
    case R_ADAMAX: {
      *s1 = q0 * *s1 + ((T)1 - q0) * g;
      T bu = q1 * *s2, ag = g < 0 ? -g : g;
      *s2 = bu > ag ? bu : ag;
      *w -= lr * *s1 / *s2;
      break;
    }
    case R_NADAM:
      *s1 = q0 * *s1 + ((T)1 - q0) * g;
      *s2 = q1 * *s2 + ((T)1 - q1) * g * g;
      *w -= lr * (g + q3 * *s1) / (sq_root(*s2 / d2) + q2);
      break;
    case R_LAMB:
    case R_LAMB_APPLY: {
      if (u.rule == R_LAMB) {
        *s1 = q0 * *s1 + ((T)1 - q0) * g;
        *s2 = q1 * *s2 + ((T)1 - q1) * g * g;
      }
      T d = (*s1 / d1) / (sq_root(*s2 / d2) + q2) + wd * *w;
      if (u.rule == R_LAMB) part += (double)d * (double)d;
      else *w -= lr * d;
      break;
    }
    case R_SIGNSGD:
      *w = ((T)1 - lr * wd) * *w - lr * (T)((graw > 0) - (graw < 0));
      break;
    case R_SIGNUM:
      *s1 = q0 * *s1 - ((T)1 - q0) * wd * *w - ((T)1 - q0) * g;
      *w = ((T)1 - lr * q1) * *w + lr * (T)((*s1 > 0) - (*s1 < 0));
      break;
    default: { /* R_FTRL: s1 z, s2 n */
      *s1 += g - (sq_root(*s2 + g * g) - sq_root(*s2)) * *w / lr;
      *s2 += g * g;
      const T z = *s1, az = z < 0 ? -z : z;
      *w = az > q0 ? ((T)((z > 0) - (z < 0)) * q0 - z) / ((q1 + sq_root(*s2)) / lr + wd) : (T)0;
      break;
    }
    }
  }
  if (u.rule != R_LAMB) return;
  __shared__ double red[LU_THREADS];
  red[threadIdx.x] = part;
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(ss, red[0]);
}

static luon_status run2(lu_call *c, int rule) {
  const luon_attrs *a = c->attrs;
  luon_tensor *w = c->in[0];
  upd2 u = {rule, a->f[LU_OPT_LR], a->f[LU_OPT_WD], a->f[LU_OPT_RESCALE], a->f[LU_OPT_CLIP], {0}, 1, 1};
  for (int k = 0; k < 4; k++) u.q[k] = a->f[LU_NF_sgd_update + k];
  if (rule == R_NADAM) u.d2 = 1 - pow(u.q[1], (double)a->i[LU_NADAM_T]);
  if (rule == R_LAMB && a->i[LU_LAMB_BIAS_CORRECTION] != 0) {
    u.d1 = 1 - pow(u.q[0], (double)a->i[LU_LAMB_T]);
    u.d2 = 1 - pow(u.q[1], (double)a->i[LU_LAMB_T]);
  }
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  lu_block *sum = NULL;
  if (w->size > 0) {
    lu_space sp;
    lu_space_init(&sp, w->ndim, w->shape);
    for (int j = 0; j < c->nin && j < 4; j++) lu_space_add(&sp, c->in[j]); /* lamb's r1 goes by pointer */
    lu_space_done(&sp);
    unsigned nb = lu_blocks(sp.n);
    double *ss = NULL;
    const void *r1 = rule == R_LAMB ? lu_data(c->in[4]) : NULL;
    if (rule == R_LAMB && (s = lu_cuda_scratch(k.id, sizeof(double), &sum)) == LUON_OK) {
      ss = (double *)sum->ptr;
      s = lu_cuda_zero(ss, sizeof(double), k.s);
    }
    if (s == LUON_OK) {
      LU_DISPATCH_FLOAT(w->dtype, T, (k_update2<T><<<nb, LU_THREADS, 0, k.s>>>(sp, u, ss, (const T *)r1)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
    }
    if (s == LUON_OK && rule == R_LAMB) {
      u.rule = R_LAMB_APPLY;
      LU_DISPATCH_FLOAT(w->dtype, T, (k_update2<T><<<nb, LU_THREADS, 0, k.s>>>(sp, u, ss, (const T *)r1)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
    }
  }
  lu_cuda_scratch_free(sum);
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_adamax_update(lu_call *c) { return run2(c, R_ADAMAX); }
luon_status lu_cuda_nadam_update(lu_call *c) { return run2(c, R_NADAM); }
luon_status lu_cuda_lamb_update(lu_call *c) { return run2(c, R_LAMB); }
luon_status lu_cuda_signsgd_update(lu_call *c) { return run2(c, R_SIGNSGD); }
luon_status lu_cuda_signum_update(lu_call *c) { return run2(c, R_SIGNUM); }
luon_status lu_cuda_ftrl_update(lu_call *c) { return run2(c, R_FTRL); }
