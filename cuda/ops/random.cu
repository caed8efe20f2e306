/* random.cu: random tensors from the device's Philox stream, element j
 * drawing the words of (key, start + j) exactly as core/ops/random.c, so
 * one seed gives the same numbers on CPU and GPU (normal within the last
 * bits of the device's log/cos). The counters come from the core. */
#include "kernels.cuh"
#include <math.h>

enum { R_UNIFORM, R_NORMAL, R_RANDINT, R_GAMMA };

typedef struct rnd {
  int kind;
  uint64_t key, start;
  double a, b, top;       /* uniform: low, high, the largest value below high; gamma: alpha, scale */
  uint64_t lo, range;     /* randint */
} rnd;

__device__ __forceinline__ float unit32(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }
__device__ __forceinline__ double unit64(uint32_t hi, uint32_t lo) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

/* core/ops/random.c's gamma1: Marsaglia-Tsang, attempt t from (key ^ mix(t), j) */
__device__ void draw(uint64_t key, uint64_t ctr, uint64_t t, uint32_t r[4]) {
  lu_philox(t ? key ^ lu_mix64(t) : key, ctr, r);
}
__device__ double gamma1(double alpha, uint64_t key, uint64_t ctr) {
  double a = alpha < 1 ? alpha + 1 : alpha, d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d), g;
  uint32_t r[4];
  for (uint64_t t = 0;; t++) {
    draw(key, ctr, t, r);
    double u1 = 1.0 - (double)unit32(r[0]), u2 = (double)unit32(r[1]);
    double x = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2), v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = 1.0 - unit64(r[2], r[3]);
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) {
      g = d * v;
      break;
    }
  }
  if (alpha < 1) {
    draw(key, ctr, ~(uint64_t)0, r);
    g *= pow(1.0 - unit64(r[0], r[1]), 1.0 / alpha);
  }
  return g;
}

__global__ void k_random(lu_space s, rnd r) {
  LU_GRID_LOOP(j, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, j, o);
    uint32_t w[4];
    lu_philox(r.key, r.start + (uint64_t)j, w);
    int32_t dt = s.dt[0];
    if (r.kind == R_UNIFORM) {
      if (dt == LUON_DTYPE_F32) {
        /* __dadd_rn/__dmul_rn: no fused multiply-add, as the CPU computes it */
        float v = (float)__dadd_rn(r.a, __dmul_rn(r.b - r.a, (double)unit32(w[0]))), top = (float)r.top;
        ((float *)s.p[0])[o[0]] = r.b > r.a && v > top ? top : v;
      } else {
        double v = __dadd_rn(r.a, __dmul_rn(r.b - r.a, unit64(w[0], w[1])));
        ((double *)s.p[0])[o[0]] = r.b > r.a && v > r.top ? r.top : v;
      }
    } else if (r.kind == R_NORMAL) {
      double u1 = 1.0 - unit64(w[0], w[1]), u2 = unit64(w[2], w[3]);
      double z = r.a + r.b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
      if (dt == LUON_DTYPE_F32) ((float *)s.p[0])[o[0]] = (float)z;
      else ((double *)s.p[0])[o[0]] = z;
    } else if (r.kind == R_GAMMA) {
      double g = r.b * gamma1(r.a, r.key, r.start + (uint64_t)j);
      if (dt == LUON_DTYPE_F32) ((float *)s.p[0])[o[0]] = (float)g;
      else ((double *)s.p[0])[o[0]] = g;
    } else {
      uint64_t x = (uint64_t)w[0] << 32 | w[1];
      uint64_t v = r.lo + __umul64hi(x, r.range);
      lu_st(s.p[0], dt, o[0], (int64_t)v); /* any integer dtype, wrapping as the CPU's lu_store_int */
    }
  }
}

static luon_status generate(lu_call *c, rnd r) {
  luon_tensor *y = c->out[0];
  r.start = lu_cuda_host_api->rng_reserve(c->dev, (uint64_t)y->size, &r.key);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (y->size > 0) {
    lu_space s;
    lu_space_init(&s, y->ndim, y->shape);
    lu_space_add(&s, y);
    lu_space_done(&s);
    k_random<<<lu_blocks(s.n), LU_THREADS, 0, k.s>>>(s, r);
  }
  return lu_cuda_end(&k, LUON_OK);
}

luon_status lu_cuda_random_uniform(lu_call *c) {
  rnd r = {R_UNIFORM, 0, 0, c->attrs->f[LU_RANDOM_LOW], c->attrs->f[LU_RANDOM_HIGH], 0, 0, 0};
  r.top = c->out[0]->dtype == LUON_DTYPE_F32 ? (double)nextafterf((float)r.b, -INFINITY)
                                             : nextafter(r.b, -INFINITY);
  return generate(c, r);
}

luon_status lu_cuda_random_normal(lu_call *c) {
  rnd r = {R_NORMAL, 0, 0, c->attrs->f[LU_NORMAL_LOC], c->attrs->f[LU_NORMAL_SCALE], 0, 0, 0};
  return generate(c, r);
}

/* the range was checked and kept by lu_shape_random_randint */
luon_status lu_cuda_random_randint(lu_call *c) {
  rnd r = {R_RANDINT, 0, 0, 0, 0, 0, (uint64_t)c->scratch_i[0], (uint64_t)c->scratch_i[1]};
  return generate(c, r);
}

/* the shape and the parameters were checked by lu_shape_random_gamma */
luon_status lu_cuda_random_gamma(lu_call *c) {
  rnd r = {R_GAMMA, 0, 0, c->attrs->f[LU_GAMMA_ALPHA], c->attrs->f[LU_GAMMA_SCALE], 0, 0, 0};
  return generate(c, r);
}

/* core/ops/random.c's category: the first i with u < p[0] + ... + p[i]
 * (p[i] <= 0 or NaN skipped), else the last with p[i] > 0 */
__device__ int64_t category(const double *p, int64_t k, double u) {
  double s = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < k; i++) {
    double v = p[i];
    if (!(v > 0)) continue;
    s += v;
    last = i;
    if (u < s) return i;
  }
  return last;
}

/* y (n) int64, dense: element j from counter start + j, u = unit64 * sum(p) */
__global__ void k_choice(int64_t *y, int64_t n, const double *p, int64_t k, uint64_t key, uint64_t start) {
  LU_GRID_LOOP(j, n) {
    double total = 0;
    for (int64_t i = 0; i < k; i++) total += p[i] > 0 ? p[i] : 0;
    uint32_t w[4];
    lu_philox(key, start + (uint64_t)j, w);
    y[j] = category(p, k, unit64(w[0], w[1]) * total);
  }
}

/* y (rows, k) int64, dense: one thread per row, its N draws from counters
 * start + row N + t, the last category taking what the others leave */
__global__ void k_multinomial(int64_t *y, int64_t rows, const double *p, int64_t k, int64_t N, uint64_t key,
                              uint64_t start) {
  LU_GRID_LOOP(row, rows) {
    int64_t *cnt = y + row * k;
    for (int64_t j = 0; j < k; j++) cnt[j] = 0;
    for (int64_t t = 0; t < N; t++) {
      uint32_t w[4];
      lu_philox(key, start + (uint64_t)(row * N + t), w);
      double u = unit64(w[0], w[1]), s = 0;
      int64_t j = 0;
      for (; j < k - 1; j++) {
        s += p[j];
        if (u < s) break;
      }
      cnt[j]++;
    }
  }
}

/* The probabilities as dense float64 on the device, then kern(p) queued;
 * the counters are reserved before, as the CPU does. */
template <class K> static luon_status with_probs(lu_call *c, K kern) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  lu_block *pb = NULL;
  if (c->out[0]->size > 0) {
    void *pd = NULL;
    s = lu_cuda_dense(c->in[0], LUON_DTYPE_F64, k.s, &pd, &pb);
    if (s == LUON_OK) kern((const double *)pd, k.s);
  }
  lu_cuda_scratch_free(pb);
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_random_choice(lu_call *c) {
  luon_tensor *y = c->out[0];
  int64_t n = y->size, kk = c->in[0]->shape[0];
  uint64_t key, start = lu_cuda_host_api->rng_reserve(c->dev, (uint64_t)n, &key);
  return with_probs(c, [&](const double *p, cudaStream_t st) {
    k_choice<<<lu_blocks(n), LU_THREADS, 0, st>>>((int64_t *)lu_data(y), n, p, kk, key, start);
  });
}

luon_status lu_cuda_random_multinomial(lu_call *c) {
  luon_tensor *y = c->out[0];
  int64_t kk = c->in[0]->shape[0], rows = y->size / kk, N = c->attrs->i[LU_MULTINOMIAL_N];
  uint64_t key, start = lu_cuda_host_api->rng_reserve(c->dev, (uint64_t)rows * (uint64_t)N, &key);
  return with_probs(c, [&](const double *p, cudaStream_t st) {
    k_multinomial<<<lu_blocks(rows), LU_THREADS, 0, st>>>((int64_t *)lu_data(y), rows, p, kk, N, key, start);
  });
}

/* y[i, ...] = x[perm[i], ...] over dense bytes: rows of rb bytes */
__global__ void k_rows(const char *x, char *y, const int64_t *perm, int64_t n, int64_t rb) {
  LU_GRID_LOOP(b, n * rb) {
    int64_t i = b / rb, r = b - i * rb;
    y[b] = x[perm[i] * rb + r];
  }
}

/* Fisher-Yates on the host with core/ops/random.c's draws (step i from
 * counter start + i), then the rows gathered on the GPU. */
luon_status lu_cuda_random_permute(lu_call *c) {
  luon_tensor *x = c->in[0], *y = c->out[0];
  int64_t n = x->shape[0];
  uint64_t key, start = lu_cuda_host_api->rng_reserve(c->dev, (uint64_t)n, &key);
  int64_t *p = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!p) return lu_cuda_seterr(LUON_ENOMEM, "random_permute: out of host memory for %lld indices",
                                (long long)n);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    uint32_t r[4];
    lu_philox(key, start + (uint64_t)i, r);
    uint64_t w = (uint64_t)r[0] << 32 | r[1];
    int64_t j = (int64_t)(((unsigned __int128)w * ((uint64_t)i + 1)) >> 64), t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  lu_cuda_ctx k;
  luon_status s = lu_cuda_begin(c, &k);
  if (s != LUON_OK) {
    free(p);
    return s;
  }
  lu_block *pb = NULL, *xb = NULL;
  void *xd = NULL;
  if (y->size > 0) {
    s = lu_cuda_scratch(k.id, sizeof(int64_t) * (size_t)n, &pb);
    if (s == LUON_OK) s = lu_cuda_dense(x, x->dtype, k.s, &xd, &xb);
    if (s == LUON_OK) {
      cudaError_t e = cudaMemcpyAsync(pb->ptr, p, sizeof(int64_t) * (size_t)n,
                                      cudaMemcpyHostToDevice, k.s);
      if (e != cudaSuccess) s = lu_cuda_fail(e, "random_permute: cudaMemcpyAsync");
    }
    if (s == LUON_OK) {
      int64_t rb = (y->size / n) * luon_dtype_size(y->dtype);
      k_rows<<<lu_blocks(n * rb), LU_THREADS, 0, k.s>>>((const char *)xd, (char *)lu_data(y),
                                                       (const int64_t *)pb->ptr, n, rb);
    }
  }
  /* a pageable source is staged before cudaMemcpyAsync returns */
  free(p);
  lu_cuda_scratch_free(pb);
  lu_cuda_scratch_free(xb);
  return lu_cuda_end(&k, s);
}
