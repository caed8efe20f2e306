/* reduce.cu: sum, mean, prod, max, min, argmax, argmin over any set of axes
 * on the GPU. One generic kernel: block (o, g) reduces chunk g of result
 * element o, the kept axes locating it, the reduced axes walked by the
 * block's threads (floats accumulate in double, integers in wrapping int64,
 * as core/ops/reduce.c), then a tree merge that keeps the first index on
 * ties and lets NaN win. With few results (a whole-array sum) the reduced
 * elements are cut into chunks so that the card's SMs all take part, and a
 * second kernel merges each result's partials in chunk order. Float sums
 * and means over runs of memory (a bias gradient's (N, H*W), a whole array)
 * take a kernel without the per-element index arithmetic (k_sum_rows). */
#include "kernels.cuh"

typedef struct rplan {
  int rop;
  int nk, nr;
  int64_t kshape[LU_MAXD], kst[LU_MAXD];   /* kept axes of x */
  int64_t rshape[LU_MAXD], rst[LU_MAXD];   /* reduced axes of x, in order */
  int64_t nout, nred;
  int64_t chunk, nchunk; /* reduced elements per block; blocks per result */
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
  case LU_R_SUM:
  case LU_R_MEAN:
    if (lu_is_int<A>::v) a = (A)((uint64_t)(int64_t)a + (uint64_t)(int64_t)b);
    else a = a + b;
    break;
  case LU_R_PROD:
    if (lu_is_int<A>::v) a = (A)((uint64_t)(int64_t)a * (uint64_t)(int64_t)b);
    else a = a * b;
    break;
  case LU_R_MAX:
    if (!nan_(a) && (b > a || nan_(b))) a = b;
    break;
  case LU_R_MIN:
    if (!nan_(a) && (b < a || nan_(b))) a = b;
    break;
  default: {
    bool better = rop == LU_R_ARGMAX ? b > a : b < a;
    bool an = nan_(a), bn = nan_(b);
    bool take = an ? (bn && bi < ai) : (bn || better || (b == a && bi < ai));
    if (take) a = b, ai = bi;
  }
  }
}

/* Result o from (a, ai): ai < 0 when no element was reduced. */
template <class A> __device__ void finish(const rplan &p, int64_t o, A a, int64_t ai) {
  if (p.rop == LU_R_ARGMAX || p.rop == LU_R_ARGMIN) {
    lu_st<int64_t>(p.y, p.ydt, o, ai < 0 ? 0 : ai);
  } else if (p.rop == LU_R_MEAN) {
    double s = ai < 0 ? 0.0 : (double)a;
    lu_st<double>(p.y, p.ydt, o, p.nred ? s / (double)p.nred : (double)NAN);
  } else {
    if (ai < 0) a = p.rop == LU_R_PROD ? (A)1 : (A)0; /* empty: the identity */
    lu_st<A>(p.y, p.ydt, o, a);
  }
}

/* pv, pi: nout x nchunk partials when nchunk > 1, else unused */
template <class A> __global__ void k_reduce(rplan p, A *pv, int64_t *pi) {
  __shared__ A sv[LU_THREADS];
  __shared__ int64_t si[LU_THREADS];
  int64_t g = blockIdx.y, r0 = g * p.chunk, r1 = r0 + p.chunk < p.nred ? r0 + p.chunk : p.nred;
  for (int64_t o = blockIdx.x; o < p.nout; o += gridDim.x) {
    int64_t base = 0, q = o;
    for (int d = p.nk - 1; d >= 0; d--) {
      int64_t r = q % p.kshape[d];
      q /= p.kshape[d];
      base += r * p.kst[d];
    }
    A v = 0;
    int64_t vi = -1;
    for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x) {
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
      if (p.nchunk > 1) {
        pv[o * p.nchunk + g] = sv[0];
        pi[o * p.nchunk + g] = si[0];
      } else {
        finish<A>(p, o, sv[0], si[0]);
      }
    }
    __syncthreads();
  }
}

/* Each result's partials, merged in chunk order: chunk g's indices all come
 * before chunk g+1's, so ties still keep the first index. */
template <class A> __global__ void k_reduce_partials(rplan p, const A *pv, const int64_t *pi) {
  LU_GRID_LOOP(o, p.nout) {
    A a = 0;
    int64_t ai = -1;
    for (int64_t g = 0; g < p.nchunk; g++) merge<A>(p.rop, a, ai, pv[o * p.nchunk + g], pi[o * p.nchunk + g]);
    finish<A>(p, o, a, ai);
  }
}

/* The common case without the generic kernel's index arithmetic: a float
 * sum or mean whose reduced elements are, once adjacent axes are merged,
 * `rows` runs of `inner` >= 32 elements (x's strides rs between runs, is
 * within one; rows = 1 for one axis). Each thread steps through its chunk
 * with no division per element; sums in double; no indices kept. */
typedef struct rows_t {
  int64_t rows, inner, rs, is;
} rows_t;

template <class A> __device__ __forceinline__ A block_sum(A v, A *sv) {
  sv[threadIdx.x] = v;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if ((int)threadIdx.x < h) sv[threadIdx.x] += sv[threadIdx.x + h];
    __syncthreads();
  }
  A r = sv[0];
  __syncthreads();
  return r;
}

__device__ __forceinline__ void finish_sum(const rplan &p, int64_t o, double v) {
  lu_st<double>(p.y, p.ydt, o, p.rop == LU_R_MEAN ? v / (double)p.nred : v);
}

__global__ void k_sum_rows(rplan p, rows_t w, double *pv) {
  __shared__ double sv[LU_THREADS];
  int64_t g = blockIdx.y, r0 = g * p.chunk, r1 = r0 + p.chunk < p.nred ? r0 + p.chunk : p.nred;
  for (int64_t o = blockIdx.x; o < p.nout; o += gridDim.x) {
    int64_t base = 0, q = o;
    for (int d = p.nk - 1; d >= 0; d--) {
      int64_t r = q % p.kshape[d];
      q /= p.kshape[d];
      base += r * p.kst[d];
    }
    double v = 0;
    int64_t r = r0 + threadIdx.x;
    if (r < r1) {
      int64_t j = r / w.inner, i = r - j * w.inner;
      for (; r < r1; r += blockDim.x) {
        v += lu_ld<double>(p.x, p.xdt, base + j * w.rs + i * w.is);
        i += blockDim.x;
        while (i >= w.inner) i -= w.inner, j++;
      }
    }
    v = block_sum<double>(v, sv);
    if (threadIdx.x == 0) {
      if (p.nchunk > 1) pv[o * p.nchunk + g] = v;
      else finish_sum(p, o, v);
    }
  }
}

__global__ void k_sum_partials(rplan p, const double *pv) {
  LU_GRID_LOOP(o, p.nout) {
    double v = 0;
    for (int64_t g = 0; g < p.nchunk; g++) v += pv[o * p.nchunk + g];
    finish_sum(p, o, v);
  }
}

/* p's reduced axes as rows of runs (merging each axis into the next where
 * its stride is the next's extent: one run in memory), when they come to
 * at most two such axes with an inner extent of 32 or more. */
static bool as_rows(const rplan &p, rows_t *w) {
  int64_t sh[LU_MAXD], st[LU_MAXD];
  int n = 0;
  for (int d = 0; d < p.nr; d++) {
    if (p.rshape[d] == 1) continue;
    if (n > 0 && st[n - 1] == p.rshape[d] * p.rst[d]) {
      sh[n - 1] *= p.rshape[d];
      st[n - 1] = p.rst[d];
    } else {
      sh[n] = p.rshape[d], st[n] = p.rst[d], n++;
    }
  }
  if (n == 1) *w = rows_t{1, sh[0], 0, st[0]};
  else if (n == 2) *w = rows_t{sh[0], sh[1], st[0], st[1]};
  else return false;
  return w->inner >= 32;
}

/* Enough blocks for every SM of a large card several times over (an H200
 * has 132), each with at least 16 elements per thread. */
enum { WANT_BLOCKS = 1024, MIN_CHUNK = 16 * LU_THREADS, MAX_CHUNKS = 1024 };

template <class A> static luon_status launch(rplan &p, int32_t id, cudaStream_t s) {
  p.nchunk = 1;
  if (p.nout < WANT_BLOCKS && p.nred > 2 * MIN_CHUNK) {
    int64_t by_blocks = (WANT_BLOCKS + p.nout - 1) / p.nout, by_size = p.nred / MIN_CHUNK;
    p.nchunk = by_blocks < by_size ? by_blocks : by_size;
    if (p.nchunk > MAX_CHUNKS) p.nchunk = MAX_CHUNKS;
  }
  p.chunk = (p.nred + p.nchunk - 1) / p.nchunk;
  unsigned gx = (unsigned)(p.nout < 65536 ? p.nout : 65536);
  rows_t w;
  if (!lu_is_int<A>::v && (p.rop == LU_R_SUM || p.rop == LU_R_MEAN) && p.nred > 0 && as_rows(p, &w)) {
    if (p.nchunk == 1) {
      k_sum_rows<<<dim3(gx, 1), LU_THREADS, 0, s>>>(p, w, (double *)NULL);
      return LUON_OK;
    }
    lu_block *b = NULL;
    LU_TRY(lu_cuda_scratch(id, (size_t)(p.nout * p.nchunk) * sizeof(double), &b));
    k_sum_rows<<<dim3(gx, (unsigned)p.nchunk), LU_THREADS, 0, s>>>(p, w, (double *)b->ptr);
    k_sum_partials<<<lu_blocks(p.nout), LU_THREADS, 0, s>>>(p, (const double *)b->ptr);
    lu_cuda_scratch_free(b);
    return LUON_OK;
  }
  if (p.nchunk == 1) {
    k_reduce<A><<<dim3(gx, 1), LU_THREADS, 0, s>>>(p, (A *)NULL, (int64_t *)NULL);
    return LUON_OK;
  }
  lu_block *b = NULL;
  size_t n = (size_t)(p.nout * p.nchunk);
  LU_TRY(lu_cuda_scratch(id, n * (sizeof(A) + sizeof(int64_t)), &b));
  A *pv = (A *)b->ptr;
  int64_t *pi = (int64_t *)(pv + n); /* A is 8 bytes: pi stays aligned */
  k_reduce<A><<<dim3(gx, (unsigned)p.nchunk), LU_THREADS, 0, s>>>(p, pv, pi);
  k_reduce_partials<A><<<lu_blocks(p.nout), LU_THREADS, 0, s>>>(p, pv, pi);
  lu_cuda_scratch_free(b);
  return LUON_OK;
}

/* scratch_i[0] holds the reduced axes' bitmask (lu_shape_<op> in reduce.c);
 * the result is dense with the kept axes in order. */
static luon_status reduce(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  rplan p;
  memset(&p, 0, sizeof p);
  p.rop = lu_reduce_op_of(c->op);
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
  luon_status s = LUON_OK;
  if (p.nout > 0) {
    bool fl = x->dtype == LUON_DTYPE_F32 || x->dtype == LUON_DTYPE_F64 || x->dtype == LUON_DTYPE_F16 ||
              x->dtype == LUON_DTYPE_BF16;
    s = fl ? launch<double>(p, k.id, k.s) : launch<int64_t>(p, k.id, k.s);
  }
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_sum(lu_call *c) { return reduce(c); }
luon_status lu_cuda_mean(lu_call *c) { return reduce(c); }
luon_status lu_cuda_prod(lu_call *c) { return reduce(c); }
luon_status lu_cuda_max(lu_call *c) { return reduce(c); }
luon_status lu_cuda_min(lu_call *c) { return reduce(c); }
luon_status lu_cuda_argmax(lu_call *c) { return reduce(c); }
luon_status lu_cuda_argmin(lu_call *c) { return reduce(c); }
