/* norm.cu: batch normalisation over a channel axis and its backward on the
 * GPU: one block per channel, statistics in double with core/ops/norm.c's
 * two passes (mean, then squares about it), running statistics updated in
 * place when training. A plain kernel rather than cuDNN, so that any axis,
 * any strides and float64 give the CPU's numbers. */
#include "kernels.cuh"

/* the elements of channel ch: shape with the axis set to 1, per-operand strides */
typedef struct bnp {
  lu_space s;            /* ops: forward 0 x, 1 y; backward 0 x, 1 dy, 2 dx */
  int64_t ast[3];        /* strides along the channel axis */
  int64_t m;             /* elements per channel */
  void *v[8];            /* per-channel vectors */
  int64_t vst[8];
  bool batch;
  double eps, mom;
} bnp;

template <class T> __device__ __forceinline__ double vget(const bnp &p, int k, int64_t c) {
  return (double)((const T *)p.v[k])[c * p.vst[k]];
}
template <class T> __device__ __forceinline__ void vset(const bnp &p, int k, int64_t c, double v) {
  ((T *)p.v[k])[c * p.vst[k]] = (T)v;
}

/* Block sum of two doubles over the block (all threads get the result). */
__device__ void block_sum2(double &a, double &b) {
  __shared__ double sa[LU_THREADS], sb[LU_THREADS];
  sa[threadIdx.x] = a;
  sb[threadIdx.x] = b;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if ((int)threadIdx.x < h) {
      sa[threadIdx.x] += sa[threadIdx.x + h];
      sb[threadIdx.x] += sb[threadIdx.x + h];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();
}

/* v: 0 gamma, 1 beta, 2 running_mean, 3 running_var, 4 mean out, 5 invstd out */
template <class T> __global__ void k_bn_fwd(bnp p) {
  int64_t c = blockIdx.x;
  const T *x = (const T *)p.s.p[0] + c * p.ast[0];
  T *y = (T *)p.s.p[1] + c * p.ast[1];
  double mean, var;
  if (p.batch) {
    if (p.m > 0) {
      double s0 = 0, dummy = 0;
      for (int64_t i = threadIdx.x; i < p.m; i += blockDim.x) {
        int64_t o[LU_MAX_OPS];
        lu_offsets(p.s, i, o);
        s0 += (double)x[o[0]];
      }
      block_sum2(s0, dummy);
      mean = s0 / (double)p.m;
      double s1 = 0;
      for (int64_t i = threadIdx.x; i < p.m; i += blockDim.x) {
        int64_t o[LU_MAX_OPS];
        lu_offsets(p.s, i, o);
        double d = (double)x[o[0]] - mean;
        s1 += d * d;
      }
      block_sum2(s1, dummy);
      var = s1 / (double)p.m;
      if (threadIdx.x == 0) {
        vset<T>(p, 2, c, p.mom * vget<T>(p, 2, c) + (1 - p.mom) * mean);
        vset<T>(p, 3, c, p.mom * vget<T>(p, 3, c) + (1 - p.mom) * var);
      }
    } else {
      mean = 0;
      var = 0;
    }
  } else {
    mean = vget<T>(p, 2, c);
    var = vget<T>(p, 3, c);
  }
  double invstd = 1 / sqrt(var + p.eps);
  if (threadIdx.x == 0) {
    vset<T>(p, 4, c, mean);
    vset<T>(p, 5, c, invstd);
  }
  double a = vget<T>(p, 0, c) * invstd, d = vget<T>(p, 1, c) - a * mean;
  const T ca = (T)a, cd = (T)d;
  for (int64_t i = threadIdx.x; i < p.m; i += blockDim.x) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, i, o);
    y[o[1]] = ca * x[o[0]] + cd;
  }
}

/* v: 0 gamma, 1 mean, 2 invstd, 3 dgamma out, 4 dbeta out */
template <class T> __global__ void k_bn_bwd(bnp p) {
  int64_t c = blockIdx.x;
  const T *x = (const T *)p.s.p[0] + c * p.ast[0];
  const T *dy = (const T *)p.s.p[1] + c * p.ast[1];
  T *dx = (T *)p.s.p[2] + c * p.ast[2];
  double mean = vget<T>(p, 1, c), gamma = vget<T>(p, 0, c), invstd = vget<T>(p, 2, c);
  double s0 = 0, s1 = 0;
  for (int64_t i = threadIdx.x; i < p.m; i += blockDim.x) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, i, o);
    double d = (double)dy[o[1]];
    s0 += d;
    s1 += d * ((double)x[o[0]] - mean);
  }
  block_sum2(s0, s1);
  double dbeta = s0, dgamma = s1 * invstd, m = (double)p.m;
  if (threadIdx.x == 0) {
    vset<T>(p, 3, c, dgamma);
    vset<T>(p, 4, c, dbeta);
  }
  double a = gamma * invstd, b = 0, d = 0;
  if (p.batch && m > 0) {
    b = -a * invstd * dgamma / m;
    d = -a * dbeta / m - b * mean;
  }
  const T ca = (T)a, cb = (T)b, cd = (T)d;
  for (int64_t i = threadIdx.x; i < p.m; i += blockDim.x) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, i, o);
    dx[o[2]] = ca * dy[o[1]] + cb * x[o[0]] + cd;
  }
}

static void chan_init(bnp *p, int axis, luon_tensor *const *t, int nt) {
  const luon_tensor *x = t[0];
  int64_t shape[LU_MAXD];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  shape[axis] = 1;
  lu_space_init(&p->s, x->ndim, shape);
  for (int k = 0; k < nt; k++) {
    lu_space_add(&p->s, t[k]);
    p->ast[k] = t[k]->strides[axis];
  }
  lu_space_done(&p->s);
  p->m = x->shape[axis] ? x->size / x->shape[axis] : 0;
}

static luon_status launch(lu_call *c, bnp *p, bool fwd, int64_t C) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (C > 0) {
    if (C > INT32_MAX) s = lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: too many channels", k.op);
    else if (fwd)
      LU_DISPATCH_FLOAT(c->in[0]->dtype, T, (k_bn_fwd<T><<<(unsigned)C, LU_THREADS, 0, k.s>>>(*p)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
    else
      LU_DISPATCH_FLOAT(c->in[0]->dtype, T, (k_bn_bwd<T><<<(unsigned)C, LU_THREADS, 0, k.s>>>(*p)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  }
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_batch_norm(lu_call *c) {
  bnp p;
  memset(&p, 0, sizeof p);
  int64_t axis = c->attrs->i[LU_BN_AXIS];
  int ax = (int)(axis < 0 ? axis + c->in[0]->ndim : axis);
  luon_tensor *t[2] = {c->in[0], c->out[0]};
  chan_init(&p, ax, t, 2);
  luon_tensor *v[6] = {c->in[1], c->in[2], c->in[3], c->in[4], c->out[1], c->out[2]};
  for (int k = 0; k < 6; k++) {
    p.v[k] = lu_data(v[k]);
    p.vst[k] = v[k]->strides[0];
  }
  p.batch = c->attrs->i[LU_BN_TRAINING] && !c->attrs->i[LU_BN_GLOBAL_STATS];
  p.eps = c->attrs->f[LU_BN_EPS];
  p.mom = c->attrs->f[LU_BN_MOMENTUM];
  return launch(c, &p, true, c->in[0]->shape[ax]);
}

luon_status lu_cuda_batch_norm_grad(lu_call *c) {
  bnp p;
  memset(&p, 0, sizeof p);
  int64_t axis = c->attrs->i[LU_BN_GRAD_AXIS];
  int ax = (int)(axis < 0 ? axis + c->in[0]->ndim : axis);
  luon_tensor *t[3] = {c->in[0], c->in[1], c->out[0]};
  chan_init(&p, ax, t, 3);
  luon_tensor *v[5] = {c->in[2], c->in[3], c->in[4], c->out[1], c->out[2]};
  for (int k = 0; k < 5; k++) {
    p.v[k] = lu_data(v[k]);
    p.vst[k] = v[k]->strides[0];
  }
  p.batch = c->attrs->i[LU_BN_GRAD_BATCH_STATS] != 0;
  return launch(c, &p, false, c->in[0]->shape[ax]);
}
