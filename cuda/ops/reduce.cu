/* reduce.cu: sum, mean, prod, max, min, argmax, argmin over any set of axes
 * on the GPU. One generic kernel: one block per result element, the kept
 * axes locating it, the reduced axes walked by the block's threads (floats
 * accumulate in double, integers in wrapping int64, as core/ops/reduce.c),
 * then a tree merge that keeps the first index on ties and lets NaN win.
 * Correctness over speed. */
#include "kernels.cuh"

enum { R_SUM, R_MEAN, R_PROD, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN };

typedef struct rplan {
  int rop;
  int nk, nr;
  int64_t kshape[LU_MAXD], kst[LU_MAXD];   /* kept axes of x */
  int64_t rshape[LU_MAXD], rst[LU_MAXD];   /* reduced axes of x, in order */
  int64_t nout, nred;
  const void *x;
  int32_t xdt;
  void *y;
  int32_t ydt;
} rplan;

template <class A> __device__ __forceinline__ bool nan_(A v) { return v != v; }

/* Fold (b, bi), of later or other elements, into (a, ai); ai < 0: empty. */
template <class A> __device__ __forceinline__ void merge(int rop, A &a, int64_t &ai, A b, int64_t bi) {
  if (bi < 0) return;
  if (ai < 0) {
    a = b;
    ai = bi;
    return;
  }
  switch (rop) {
  case R_SUM:
  case R_MEAN:
    if (lu_is_int<A>::v) a = (A)((uint64_t)(int64_t)a + (uint64_t)(int64_t)b);
    else a = a + b;
    break;
  case R_PROD:
    if (lu_is_int<A>::v) a = (A)((uint64_t)(int64_t)a * (uint64_t)(int64_t)b);
    else a = a * b;
    break;
  case R_MAX:
    if (!nan_(a) && (b > a || nan_(b))) a = b;
    break;
  case R_MIN:
    if (!nan_(a) && (b < a || nan_(b))) a = b;
    break;
  default: {
    bool better = rop == R_ARGMAX ? b > a : b < a;
    bool an = nan_(a), bn = nan_(b);
    bool take = an ? (bn && bi < ai) : (bn || better || (b == a && bi < ai));
    if (take) a = b, ai = bi;
  }
  }
}

template <class A> __global__ void k_reduce(rplan p) {
  __shared__ A sv[LU_THREADS];
  __shared__ int64_t si[LU_THREADS];
  for (int64_t o = blockIdx.x; o < p.nout; o += gridDim.x) {
    int64_t base = 0, q = o;
    for (int d = p.nk - 1; d >= 0; d--) {
      int64_t r = q % p.kshape[d];
      q /= p.kshape[d];
      base += r * p.kst[d];
    }
    A v = 0;
    int64_t vi = -1;
    for (int64_t r = threadIdx.x; r < p.nred; r += blockDim.x) {
      int64_t off = base, q2 = r;
      for (int d = p.nr - 1; d >= 0; d--) {
        int64_t m = q2 % p.rshape[d];
        q2 /= p.rshape[d];
        off += m * p.rst[d];
      }
      merge<A>(p.rop, v, vi, lu_ld<A>(p.x, p.xdt, off), r);
    }
    sv[threadIdx.x] = v;
    si[threadIdx.x] = vi;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
      if ((int)threadIdx.x < h) {
        A a = sv[threadIdx.x];
        int64_t ai = si[threadIdx.x];
        merge<A>(p.rop, a, ai, sv[threadIdx.x + h], si[threadIdx.x + h]);
        sv[threadIdx.x] = a;
        si[threadIdx.x] = ai;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      A a = sv[0];
      int64_t ai = si[0];
      if (p.rop == R_ARGMAX || p.rop == R_ARGMIN) {
        lu_st<int64_t>(p.y, p.ydt, o, ai < 0 ? 0 : ai);
      } else if (p.rop == R_MEAN) {
        double s = ai < 0 ? 0.0 : (double)a;
        lu_st<double>(p.y, p.ydt, o, p.nred ? s / (double)p.nred : (double)NAN);
      } else {
        if (ai < 0) a = p.rop == R_PROD ? (A)1 : (A)0; /* empty: the identity */
        lu_st<A>(p.y, p.ydt, o, a);
      }
    }
    __syncthreads();
  }
}

static int rop_of(int32_t op) {
  switch (op) {
  case LU_OP_sum: return R_SUM;
  case LU_OP_mean: return R_MEAN;
  case LU_OP_prod: return R_PROD;
  case LU_OP_max: return R_MAX;
  case LU_OP_min: return R_MIN;
  case LU_OP_argmax: return R_ARGMAX;
  default: return R_ARGMIN;
  }
}

/* scratch_i[0] holds the reduced axes' bitmask (lu_shape_<op> in reduce.c);
 * the result is dense with the kept axes in order. */
static luon_status reduce(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  rplan p;
  memset(&p, 0, sizeof p);
  p.rop = rop_of(c->op);
  int64_t mask = c->scratch_i[0];
  p.nred = 1;
  for (int d = 0; d < x->ndim; d++) {
    if (mask >> d & 1) {
      p.rshape[p.nr] = x->shape[d];
      p.rst[p.nr++] = x->strides[d];
      p.nred *= x->shape[d];
    } else {
      p.kshape[p.nk] = x->shape[d];
      p.kst[p.nk++] = x->strides[d];
    }
  }
  p.nout = y->size;
  p.x = lu_data(x);
  p.xdt = x->dtype;
  p.y = lu_data(y);
  p.ydt = y->dtype;
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (p.nout > 0) {
    unsigned g = (unsigned)(p.nout < 65536 ? p.nout : 65536);
    bool fl = x->dtype == LUON_DTYPE_F32 || x->dtype == LUON_DTYPE_F64 || x->dtype == LUON_DTYPE_F16 ||
              x->dtype == LUON_DTYPE_BF16;
    if (fl) k_reduce<double><<<g, LU_THREADS, 0, k.s>>>(p);
    else k_reduce<int64_t><<<g, LU_THREADS, 0, k.s>>>(p);
  }
  return lu_cuda_end(&k, LUON_OK);
}

luon_status lu_cuda_sum(lu_call *c) { return reduce(c); }
luon_status lu_cuda_mean(lu_call *c) { return reduce(c); }
luon_status lu_cuda_prod(lu_call *c) { return reduce(c); }
luon_status lu_cuda_max(lu_call *c) { return reduce(c); }
luon_status lu_cuda_min(lu_call *c) { return reduce(c); }
luon_status lu_cuda_argmax(lu_call *c) { return reduce(c); }
luon_status lu_cuda_argmin(lu_call *c) { return reduce(c); }
