/* norm.cu: batch normalisation over a channel axis and its backward on the
 * GPU: each channel split over several blocks (partial sums in scratch,
 * summed in a fixed order by every block of the channel), statistics in
 * double with core/ops/norm.c's two passes (mean, then squares about it),
 * running statistics updated in place when training. A plain kernel rather than cuDNN, so that any axis,
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
  bool relu;             /* forward: y = max(., 0) (batch_norm's RELU) */
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

/* Channel c = blockIdx.x's elements in gridDim.y slices, block (c, s) taking
 * i = s*B + t, step S*B (B threads, S slices). */
#define CHAN_LOOP(i)                                                                  \
  for (int64_t i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; i < p.m;           \
       i += (int64_t)gridDim.y * blockDim.x)

/* The sum over channel c's slices of partial k (part[(k*C + c)*S + s]), in
 * slice order: every block of the channel gets the same number. */
__device__ __forceinline__ double chan_sum(const double *part, int64_t C, int64_t c, int k) {
  int64_t S = gridDim.y;
  double v = 0;
  for (int64_t s = 0; s < S; s++) v += part[(k * C + c) * S + s];
  return v;
}

/* Slice partial sums into part (k = 0, 1): pass 0, the forward's first, x;
 * pass 1, its second, (x - mean)^2 (into k 1; mean from pass 0's sums);
 * pass 2, the backward's, dy and dy * (x - mean) (mean from v[1]). */
template <class T> __global__ void k_bn_part(bnp p, double *part, int pass) {
  int64_t c = blockIdx.x, C = gridDim.x, S = gridDim.y;
  const T *x = (const T *)p.s.p[0] + c * p.ast[0];
  const T *dy = pass == 2 ? (const T *)p.s.p[1] + c * p.ast[1] : NULL;
  double mean = pass == 1 ? chan_sum(part, C, c, 0) / (double)p.m : pass == 2 ? vget<T>(p, 1, c) : 0;
  double a = 0, b = 0;
  CHAN_LOOP(i) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, i, o);
    double v = (double)x[o[0]];
    if (pass == 0) a += v;
    else if (pass == 1) b += (v - mean) * (v - mean);
    else {
      double d = (double)dy[o[1]];
      a += d;
      b += d * (v - mean);
    }
  }
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    if (pass != 1) part[c * S + blockIdx.y] = a;
    if (pass != 0) part[(C + c) * S + blockIdx.y] = b;
  }
}

/* v: 0 gamma, 1 beta, 2 running_mean, 3 running_var, 4 mean out, 5 invstd out;
 * part: k_bn_part's passes 0 and 1 (batch statistics, m > 0 only) */
template <class T> __global__ void k_bn_fwd(bnp p, const double *part) {
  int64_t c = blockIdx.x, C = gridDim.x;
  const T *x = (const T *)p.s.p[0] + c * p.ast[0];
  T *y = (T *)p.s.p[1] + c * p.ast[1];
  bool lead = blockIdx.y == 0 && threadIdx.x == 0; /* writes the channel's vectors */
  double mean, var;
  if (p.batch) {
    if (p.m > 0) {
      mean = chan_sum(part, C, c, 0) / (double)p.m;
      var = chan_sum(part, C, c, 1) / (double)p.m;
      if (lead) {
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
  if (lead) {
    vset<T>(p, 4, c, mean);
    vset<T>(p, 5, c, invstd);
  }
  double a = vget<T>(p, 0, c) * invstd, d = vget<T>(p, 1, c) - a * mean;
  const T ca = (T)a, cd = (T)d;
  CHAN_LOOP(i) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, i, o);
    T r = ca * x[o[0]] + cd;
    y[o[1]] = p.relu && r < (T)0 ? (T)0 : r; /* NaN kept, as relu */
  }
}

/* v: 0 gamma, 1 mean, 2 invstd, 3 dgamma out, 4 dbeta out; part: k_bn_part's
 * pass 2 (m > 0 only) */
template <class T> __global__ void k_bn_bwd(bnp p, const double *part) {
  int64_t c = blockIdx.x, C = gridDim.x;
  const T *x = (const T *)p.s.p[0] + c * p.ast[0];
  const T *dy = (const T *)p.s.p[1] + c * p.ast[1];
  T *dx = (T *)p.s.p[2] + c * p.ast[2];
  double mean = vget<T>(p, 1, c), gamma = vget<T>(p, 0, c), invstd = vget<T>(p, 2, c);
  double s0 = p.m > 0 ? chan_sum(part, C, c, 0) : 0, s1 = p.m > 0 ? chan_sum(part, C, c, 1) : 0;
  double dbeta = s0, dgamma = s1 * invstd, m = (double)p.m;
  if (blockIdx.y == 0 && threadIdx.x == 0) {
    vset<T>(p, 3, c, dgamma);
    vset<T>(p, 4, c, dbeta);
  }
  double a = gamma * invstd, b = 0, d = 0;
  if (p.batch && m > 0) {
    b = -a * invstd * dgamma / m;
    d = -a * dbeta / m - b * mean;
  }
  const T ca = (T)a, cb = (T)b, cd = (T)d;
  CHAN_LOOP(i) {
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

/* Slices per channel: enough blocks in all (about 512) to fill a large GPU
 * when channels are few, each slice at least 16 elements per thread. */
static int64_t slices(int64_t C, int64_t m) {
  int64_t by_work = (m + LU_THREADS * 16 - 1) / (LU_THREADS * 16), by_fill = (512 + C - 1) / C;
  int64_t S = by_work < by_fill ? by_work : by_fill;
  return S < 1 ? 1 : S > 65535 ? 65535 : S;
}

template <class T> static void bn_kernels(const bnp &p, bool fwd, dim3 g, double *part, cudaStream_t st) {
  if (fwd) {
    if (p.batch && p.m > 0) {
      k_bn_part<T><<<g, LU_THREADS, 0, st>>>(p, part, 0);
      k_bn_part<T><<<g, LU_THREADS, 0, st>>>(p, part, 1);
    }
    k_bn_fwd<T><<<g, LU_THREADS, 0, st>>>(p, part);
  } else {
    if (p.m > 0) k_bn_part<T><<<g, LU_THREADS, 0, st>>>(p, part, 2);
    k_bn_bwd<T><<<g, LU_THREADS, 0, st>>>(p, part);
  }
}

/* Channels over grid x, each split in slices over grid y; the slices'
 * partial sums (two per slice) in scratch. */
static luon_status launch(lu_call *c, bnp *p, bool fwd, int64_t C) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  lu_block *b = NULL;
  if (C > INT32_MAX) s = lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: too many channels", k.op);
  else if (C > 0) {
    int64_t S = slices(C, p->m);
    s = lu_cuda_scratch(k.id, sizeof(double) * 2 * (size_t)C * (size_t)S, &b);
    dim3 g((unsigned)C, (unsigned)S);
    if (s == LUON_OK)
      LU_DISPATCH_FLOAT(c->in[0]->dtype, T, bn_kernels<T>(*p, fwd, g, (double *)b->ptr, k.s),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  }
  lu_cuda_scratch_free(b);
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
  p.relu = c->attrs->ni > LU_BN_RELU && c->attrs->i[LU_BN_RELU] == 1;
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

/* ---- layer_norm and group_norm (core/ops/norm.c's view: group axes and
 * reduction axes; one block per group, then one per gamma index) ---------- */

typedef struct nvp {
  int ng, nr;
  int64_t gshape[LU_MAXD], rshape[LU_MAXD];
  int64_t gst[3][LU_MAXD], rst[3][LU_MAXD]; /* element strides; forward 0 x, 1 y; backward 0 x, 1 dy, 2 dx */
  void *p[3];
  int64_t G, M, K;
  bool per_group;                           /* gamma[group % K], else gamma[r] */
  double eps;
  const void *gamma, *beta;                 /* (K,), strides gs, bs */
  int64_t gs, bs;
  void *mean, *invstd;                      /* (G,) contiguous */
  void *dgamma, *dbeta;                     /* (K,) contiguous (backward) */
} nvp;

__device__ __forceinline__ int64_t n_goff(const nvp &v, int k, int64_t i) {
  int64_t off = 0;
  for (int d = v.ng - 1; d >= 0; d--) {
    off += (i % v.gshape[d]) * v.gst[k][d];
    i /= v.gshape[d];
  }
  return off;
}
__device__ __forceinline__ int64_t n_roff(const nvp &v, int k, int64_t r) {
  int64_t off = 0;
  for (int d = v.nr - 1; d >= 0; d--) {
    off += (r % v.rshape[d]) * v.rst[k][d];
    r /= v.rshape[d];
  }
  return off;
}
__device__ __forceinline__ int64_t n_gamma(const nvp &v, int64_t i, int64_t r) {
  return v.per_group ? i % v.K : r;
}

template <class T> __global__ void k_norm_fwd(nvp v) {
  int64_t i = blockIdx.x;
  const T *x = (const T *)v.p[0] + n_goff(v, 0, i);
  T *y = (T *)v.p[1] + n_goff(v, 1, i);
  const T *gamma = (const T *)v.gamma, *beta = (const T *)v.beta;
  double s = 0, dummy = 0;
  for (int64_t r = threadIdx.x; r < v.M; r += blockDim.x) s += (double)x[n_roff(v, 0, r)];
  block_sum2(s, dummy);
  double mean = v.M > 0 ? s / (double)v.M : 0, q = 0;
  for (int64_t r = threadIdx.x; r < v.M; r += blockDim.x) {
    double d = (double)x[n_roff(v, 0, r)] - mean;
    q += d * d;
  }
  block_sum2(q, dummy);
  double invstd = 1 / sqrt((v.M > 0 ? q / (double)v.M : 0) + v.eps);
  if (threadIdx.x == 0) {
    ((T *)v.mean)[i] = (T)mean;
    ((T *)v.invstd)[i] = (T)invstd;
  }
  for (int64_t r = threadIdx.x; r < v.M; r += blockDim.x) {
    int64_t k = n_gamma(v, i, r);
    double xh = ((double)x[n_roff(v, 0, r)] - mean) * invstd;
    y[n_roff(v, 1, r)] = (T)(xh * (double)gamma[k * v.gs] + (double)beta[k * v.bs]);
  }
}

template <class T> __global__ void k_norm_bwd(nvp v) {
  int64_t i = blockIdx.x;
  const T *x = (const T *)v.p[0] + n_goff(v, 0, i);
  const T *dy = (const T *)v.p[1] + n_goff(v, 1, i);
  T *dx = (T *)v.p[2] + n_goff(v, 2, i);
  const T *gamma = (const T *)v.gamma;
  double mean = (double)((const T *)v.mean)[i], invstd = (double)((const T *)v.invstd)[i];
  double a1 = 0, a2 = 0;
  for (int64_t r = threadIdx.x; r < v.M; r += blockDim.x) {
    double gd = (double)dy[n_roff(v, 1, r)] * (double)gamma[n_gamma(v, i, r) * v.gs];
    a1 += gd;
    a2 += gd * ((double)x[n_roff(v, 0, r)] - mean) * invstd;
  }
  block_sum2(a1, a2);
  a1 /= (double)v.M;
  a2 /= (double)v.M;
  for (int64_t r = threadIdx.x; r < v.M; r += blockDim.x) {
    double gd = (double)dy[n_roff(v, 1, r)] * (double)gamma[n_gamma(v, i, r) * v.gs];
    double xh = ((double)x[n_roff(v, 0, r)] - mean) * invstd;
    dx[n_roff(v, 2, r)] = (T)(invstd * (gd - a1 - xh * a2));
  }
}

/* dgamma[k], dbeta[k]: block k over the (group, element) pairs of gamma index k */
template <class T> __global__ void k_norm_dgamma(nvp v) {
  int64_t k = blockIdx.x;
  const T *x = (const T *)v.p[0], *dy = (const T *)v.p[1];
  int64_t ng = v.per_group ? v.G / v.K : v.G, per = v.per_group ? v.M : 1;
  double sg = 0, sb = 0;
  for (int64_t j = threadIdx.x; j < ng * per; j += blockDim.x) {
    int64_t i = v.per_group ? k + (j / per) * v.K : j, r = v.per_group ? j % per : k;
    double mean = (double)((const T *)v.mean)[i], invstd = (double)((const T *)v.invstd)[i];
    double d = (double)dy[n_goff(v, 1, i) + n_roff(v, 1, r)];
    sb += d;
    sg += d * ((double)x[n_goff(v, 0, i) + n_roff(v, 0, r)] - mean) * invstd;
  }
  block_sum2(sg, sb);
  if (threadIdx.x == 0) {
    ((T *)v.dgamma)[k] = (T)sg;
    ((T *)v.dbeta)[k] = (T)sb;
  }
}

/* the view of x's shape for layer_norm (axis) or group_norm (groups > 0);
 * tensors t[0..nt) of x's shape become operands 0..nt) */
static void nvp_init(nvp *v, luon_tensor *const *t, int nt, int axis, int64_t groups, double eps) {
  const luon_tensor *x = t[0];
  v->eps = eps;
  v->per_group = groups > 0;
  if (groups > 0) {
    v->ng = 2;
    v->gshape[0] = x->shape[0];
    v->gshape[1] = groups;
    v->nr = x->ndim - 1;
    v->rshape[0] = x->shape[1] / groups;
    for (int d = 2; d < x->ndim; d++) v->rshape[d - 1] = x->shape[d];
    v->K = groups;
  } else {
    v->ng = 0;
    for (int d = 0; d < x->ndim; d++)
      if (d != axis) v->gshape[v->ng++] = x->shape[d];
    v->nr = 1;
    v->rshape[0] = x->shape[axis];
    v->K = x->shape[axis];
  }
  for (int k = 0; k < nt; k++) {
    const int64_t *s = t[k]->strides;
    if (groups > 0) {
      v->gst[k][0] = s[0];
      v->gst[k][1] = s[1] * (x->shape[1] / groups);
      v->rst[k][0] = s[1];
      for (int d = 2; d < x->ndim; d++) v->rst[k][d - 1] = s[d];
    } else {
      for (int d = 0, j = 0; d < x->ndim; d++)
        if (d != axis) v->gst[k][j++] = s[d];
      v->rst[k][0] = s[axis];
    }
    v->p[k] = lu_data(t[k]);
  }
  v->G = 1;
  for (int d = 0; d < v->ng; d++) v->G *= v->gshape[d];
  v->M = 1;
  for (int d = 0; d < v->nr; d++) v->M *= v->rshape[d];
}

static void norm_view(lu_call *c, nvp *v, luon_tensor *const *t, int nt, bool group) {
  memset(v, 0, sizeof *v);
  const luon_tensor *x = c->in[0];
  if (group) {
    nvp_init(v, t, nt, 0, c->attrs->i[LU_GN_GROUPS], c->attrs->f[LU_GN_EPS]);
  } else {
    int64_t a = c->attrs->i[LU_LN_AXIS];
    nvp_init(v, t, nt, (int)(a < 0 ? a + x->ndim : a), 0, c->attrs->f[LU_LN_EPS]);
  }
}

static luon_status norm_launch(lu_call *c, nvp *v, bool fwd) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (v->G > INT32_MAX || v->K > INT32_MAX) {
    s = lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: too many groups", k.op);
  } else if (fwd) {
    if (v->G > 0)
      LU_DISPATCH_FLOAT(c->in[0]->dtype, T, (k_norm_fwd<T><<<(unsigned)v->G, LU_THREADS, 0, k.s>>>(*v)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  } else {
    if (v->G > 0 && v->M > 0)
      LU_DISPATCH_FLOAT(c->in[0]->dtype, T, (k_norm_bwd<T><<<(unsigned)v->G, LU_THREADS, 0, k.s>>>(*v)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
    if (s == LUON_OK && v->K > 0)
      LU_DISPATCH_FLOAT(c->in[0]->dtype, T, (k_norm_dgamma<T><<<(unsigned)v->K, LU_THREADS, 0, k.s>>>(*v)),
                        s = lu_cuda_seterr(LUON_EDTYPE, "%s: float32 or float64 only", k.op))
  }
  return lu_cuda_end(&k, s);
}

static luon_status norm_fwd(lu_call *c, bool group) {
  nvp v;
  luon_tensor *t[2] = {c->in[0], c->out[0]};
  norm_view(c, &v, t, 2, group);
  v.gamma = lu_data(c->in[1]);
  v.beta = lu_data(c->in[2]);
  v.gs = c->in[1]->strides[0];
  v.bs = c->in[2]->strides[0];
  v.mean = lu_data(c->out[1]);
  v.invstd = lu_data(c->out[2]);
  return norm_launch(c, &v, true);
}

static luon_status norm_bwd(lu_call *c, bool group) {
  nvp v;
  luon_tensor *t[3] = {c->in[0], c->in[1], c->out[0]};
  norm_view(c, &v, t, 3, group);
  v.gamma = lu_data(c->in[2]);
  v.gs = c->in[2]->strides[0];
  v.mean = lu_data(c->in[3]);
  v.invstd = lu_data(c->in[4]);
  v.dgamma = lu_data(c->out[1]);
  v.dbeta = lu_data(c->out[2]);
  return norm_launch(c, &v, false);
}

luon_status lu_cuda_layer_norm(lu_call *c) { return norm_fwd(c, false); }
luon_status lu_cuda_layer_norm_grad(lu_call *c) { return norm_bwd(c, false); }
luon_status lu_cuda_group_norm(lu_call *c) { return norm_fwd(c, true); }
luon_status lu_cuda_group_norm_grad(lu_call *c) { return norm_bwd(c, true); }
