/* ctc.cu: the CTC loss (the ctc_loss op) on the GPU, as core/ops/ctc.c: a
 * block per sample, in double, any strides: log_softmax a thread per step,
 * alpha and beta a thread per label position and a step at a time, then
 * the gradient (softmax minus each class's occupancy, scattered with
 * atomicAdd). Our own kernel, not cuDNN's CTC: cuDNN's takes only blank 0,
 * float32, labels of at most 256, and no skipped samples (MXNet's rule for
 * labels that cannot fit). A sample whose lengths or labels are out of
 * range gets a NaN loss and gradient (the CPU raises an error: the GPU
 * would have to wait to report it). */
#include "kernels.cuh"
#include <math.h>

typedef struct ctc_args {
  const void *x, *lab, *dl, *ll;   /* dl, ll NULL when not used */
  int32_t dt, ldt, dldt, lldt;
  int64_t xs0, xs1, xs2, ls0, ls1, dls, lls;
  int64_t T, N, C, Lmax, S;        /* S = 2 Lmax + 1 */
  int last;
  double *w;                       /* per sample: T*C + 2*T*S doubles */
  int32_t *z;                      /* per sample: S */
  void *loss, *grad;
} ctc_args;

__device__ __forceinline__ double lse(double a, double b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

/* data (T, N, C), label (N, L)[, data_lengths, label_lengths] -> loss (N,), grad (T, N, C) */
__global__ void k_ctc(ctc_args a) {
  __shared__ int64_t Tb, Lb;
  __shared__ int state; /* 0 ok, 1 bad input (NaN), 2 cannot fit (0) */
  __shared__ double ll;
  const int64_t C = a.C, S0 = a.S;
  const double pad = a.last ? -1 : 0;
  const int64_t blank = a.last ? C - 1 : 0;
  for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
    double *lp = a.w + n * (a.T * C + 2 * a.T * S0), *al = lp + a.T * C, *be = al + a.T * S0;
    int32_t *z = a.z + n * S0;
    if (threadIdx.x == 0) {
      int st = 0;
      int64_t T = a.T, L = a.Lmax;
      if (a.dl) {
        double v = lu_ld<double>(a.dl, a.dldt, n * a.dls);
        if (v >= 0 && v <= (double)a.T && v == floor(v)) T = (int64_t)v;
        else st = 1;
      }
      if (a.ll) {
        double v = round(lu_ld<double>(a.ll, a.lldt, n * a.lls));
        if (v >= 0 && v <= (double)a.Lmax) L = (int64_t)v;
        else st = 1;
      } else {
        for (int64_t j = 0; j < a.Lmax; j++)
          if (round(lu_ld<double>(a.lab, a.ldt, n * a.ls0 + j * a.ls1)) == pad) {
            L = j;
            break;
          }
      }
      double lo = a.last ? 0 : 1, hi = a.last ? (double)C - 2 : (double)C - 1;
      int64_t rep = 0;
      for (int64_t j = 0; st == 0 && j < L; j++) {
        double v = round(lu_ld<double>(a.lab, a.ldt, n * a.ls0 + j * a.ls1));
        if (!(v >= lo && v <= hi)) st = 1;
        else z[2 * j + 1] = (int32_t)v;
        if (st == 0 && j > 0 && z[2 * j + 1] == z[2 * j - 1]) rep++;
      }
      for (int64_t j = 0; j <= L; j++) z[2 * j] = (int32_t)blank;
      if (st == 0 && L + rep > T) st = 2;
      Tb = T, Lb = L, state = st;
    }
    __syncthreads();
    const int64_t T = Tb, S = 2 * Lb + 1;
    const double fill = state == 1 ? NAN : 0.0;
    for (int64_t i = threadIdx.x; i < a.T * C; i += blockDim.x) /* past the steps, or all when skipped */
      lu_st(a.grad, a.dt, (i / C * a.N + n) * C + i % C, fill);
    if (state != 0 || T == 0) {
      if (threadIdx.x == 0) lu_st(a.loss, a.dt, n, fill);
      __syncthreads();
      continue;
    }
    for (int64_t t = threadIdx.x; t < T; t += blockDim.x) { /* log_softmax of step t */
      double *r = lp + t * C, m = -INFINITY, sum = 0;
      for (int64_t k = 0; k < C; k++) {
        r[k] = lu_ld<double>(a.x, a.dt, t * a.xs0 + n * a.xs1 + k * a.xs2);
        if (r[k] > m) m = r[k];
      }
      for (int64_t k = 0; k < C; k++) sum += exp(r[k] - m);
      double ls = m + log(sum);
      for (int64_t k = 0; k < C; k++) r[k] -= ls;
    }
    __syncthreads();
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x) al[s] = s < 2 ? lp[z[s]] : -INFINITY;
    __syncthreads();
    for (int64_t t = 1; t < T; t++) {
      for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        const double *p = al + (t - 1) * S;
        double v = p[s];
        if (s >= 1) v = lse(v, p[s - 1]);
        if (s >= 2 && z[s] != blank && z[s] != z[s - 2]) v = lse(v, p[s - 2]);
        al[t * S + s] = v + lp[t * C + z[s]];
      }
      __syncthreads();
    }
    for (int64_t s = threadIdx.x; s < S; s += blockDim.x)
      be[(T - 1) * S + s] = s >= S - 2 ? lp[(T - 1) * C + z[s]] : -INFINITY;
    __syncthreads();
    for (int64_t t = T - 2; t >= 0; t--) {
      for (int64_t s = threadIdx.x; s < S; s += blockDim.x) {
        const double *q = be + (t + 1) * S;
        double v = q[s];
        if (s + 1 < S) v = lse(v, q[s + 1]);
        if (s + 2 < S && z[s] != blank && z[s] != z[s + 2]) v = lse(v, q[s + 2]);
        be[t * S + s] = v + lp[t * C + z[s]];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      const double *e = al + (T - 1) * S;
      ll = S > 1 ? lse(e[S - 1], e[S - 2]) : e[0];
      lu_st(a.loss, a.dt, n, -ll);
    }
    __syncthreads();
    /* the occupancies into al (log p still needed), then p into lp, then p minus them */
    for (int64_t i = threadIdx.x; i < T * S; i += blockDim.x) {
      double v = al[i] + be[i];
      al[i] = v == -INFINITY ? 0 : exp(v - lp[i / S * C + z[i % S]] - ll);
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < T * C; i += blockDim.x) lp[i] = exp(lp[i]);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < T * S; i += blockDim.x)
      if (al[i] != 0) atomicAdd(&lp[i / S * C + z[i % S]], -al[i]);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < T * C; i += blockDim.x)
      lu_st(a.grad, a.dt, (i / C * a.N + n) * C + i % C, lp[i]);
    __syncthreads();
  }
}

luon_status lu_cuda_ctc_loss(lu_call *c) {
  const luon_attrs *at = c->attrs;
  const luon_tensor *x = c->in[0], *lab = c->in[1];
  bool ud = at->i[LU_CTC_USE_DATA_LENGTHS], ul = at->i[LU_CTC_USE_LABEL_LENGTHS];
  ctc_args a;
  memset(&a, 0, sizeof a);
  a.x = lu_data(x), a.dt = x->dtype;
  a.xs0 = x->strides[0], a.xs1 = x->strides[1], a.xs2 = x->strides[2];
  a.lab = lu_data(lab), a.ldt = lab->dtype, a.ls0 = lab->strides[0], a.ls1 = lab->strides[1];
  if (ud) a.dl = lu_data(c->in[2]), a.dldt = c->in[2]->dtype, a.dls = c->in[2]->strides[0];
  if (ul) {
    const luon_tensor *l = c->in[2 + ud];
    a.ll = lu_data(l), a.lldt = l->dtype, a.lls = l->strides[0];
  }
  a.T = x->shape[0], a.N = x->shape[1], a.C = x->shape[2], a.Lmax = lab->shape[1], a.S = 2 * a.Lmax + 1;
  a.last = at->i[LU_CTC_BLANK_LAST] != 0;
  a.loss = lu_data(c->out[0]), a.grad = lu_data(c->out[1]);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  lu_block *wb = NULL, *zb = NULL;
  if (a.N > 0) {
    size_t per = (size_t)(a.T * a.C + 2 * a.T * a.S);
    s = lu_cuda_scratch(k.id, sizeof(double) * per * (size_t)a.N + 1, &wb);
    if (s == LUON_OK) s = lu_cuda_scratch(k.id, sizeof(int32_t) * (size_t)(a.S * a.N) + 1, &zb);
    if (s == LUON_OK) {
      a.w = (double *)wb->ptr, a.z = (int32_t *)zb->ptr;
      unsigned blocks = a.N < 65535 ? (unsigned)a.N : 65535;
      k_ctc<<<blocks, LU_THREADS, 0, k.s>>>(a);
    }
  }
  lu_cuda_scratch_free(wb);
  lu_cuda_scratch_free(zb);
  return lu_cuda_end(&k, s);
}
