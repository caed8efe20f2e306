/* random.c: random tensors from the device's Philox stream. Each call
 * reserves one counter per element and element j draws the four words of
 * (key, start + j), so values depend on the seed alone, not on threads or
 * backend: a GPU kernel that does the same gives the same numbers. */
#include "internal.h"
#include <math.h>
#include <stdlib.h>

/* The shape i[from..ni) of a random op, and its dtype (dflt when 0). */
static luon_status shape_from_attrs(lu_call *c, const char *op, int from, int32_t dflt) {
  const luon_attrs *a = c->attrs;
  const int64_t *shape = a->i + from;
  int nd = a->ni > from ? a->ni - from : 0; /* no slots past `from`: no shape (a C caller's short attrs) */
  if (nd > LU_MAXD)
    return lu_error(LUON_ESHAPE, "%s: %d dimensions, at most %d are supported", op, nd, LU_MAXD);
  for (int d = 0; d < nd; d++) {
    if (shape[d] < 0)
      return lu_error(LUON_ESHAPE, "%s: negative dimension %lld in shape %s", op, (long long)shape[d],
                      lu_shape_str(nd, shape));
    c->out_shape[0][d] = shape[d];
  }
  c->out_ndim[0] = nd;
  c->out_dtype[0] = a->dtype ? a->dtype : dflt;
  return LUON_OK;
}

static luon_status need_float(const lu_call *c, const char *op) {
  if (!lu_dtype_is_float(c->out_dtype[0]))
    return lu_error(LUON_EDTYPE, "%s: dtype %s is not supported, use float32 or float64", op,
                    luon_dtype_name(c->out_dtype[0]));
  return LUON_OK;
}

/* A 64-bit word scaled to [0, range): the high half of x * range. */
static uint64_t below(uint32_t hi, uint32_t lo, uint64_t range) {
  uint64_t x = (uint64_t)hi << 32 | lo;
  return (uint64_t)(((unsigned __int128)x * range) >> 64);
}

/* Writes n values of the result's dtype for elements j0.. into dst. */
typedef void (*gen_fn)(const lu_call *c, uint64_t key, uint64_t ctr, int64_t n, void *dst);

typedef struct gen_ctx {
  const lu_call *c;
  gen_fn gen;
  uint64_t key, start;
} gen_ctx;

/* Elements [begin, end) of c->out[0], which may be a strided out= view. */
static void gen_range(void *p, int64_t begin, int64_t end) {
  const gen_ctx *g = p;
  luon_tensor *y = g->c->out[0];
  int64_t es = luon_dtype_size(y->dtype);
  char *base = lu_data(y);
  if (lu_is_contiguous(y)) {
    g->gen(g->c, g->key, g->start + (uint64_t)begin, end - begin, base + begin * es);
    return;
  }
  char buf[256 * 8];
  for (int64_t j0 = begin; j0 < end; j0 += 256) {
    int64_t n = end - j0 < 256 ? end - j0 : 256;
    g->gen(g->c, g->key, g->start + (uint64_t)j0, n, buf);
    lu_put_range(y, j0, n, buf);
  }
}

static luon_status generate(lu_call *c, gen_fn gen) {
  gen_ctx g = {c, gen, 0, 0};
  int64_t n = c->out[0]->size;
  g.start = lu_rng_reserve(c->dev, (uint64_t)n, &g.key);
  lu_parallel_for(n, 1 << 14, gen_range, &g);
  return LUON_OK;
}

/* ---- uniform ------------------------------------------------------------ */

/* () -> the shape, uniform on [LOW, HIGH); float32 (w0) or float64 (w0, w1). */
luon_status lu_shape_random_uniform(lu_call *c) {
  LU_TRY(shape_from_attrs(c, "random_uniform", LU_RANDOM_SHAPE, LUON_DTYPE_F32));
  return need_float(c, "random_uniform");
}

static void gen_uniform(const lu_call *c, uint64_t key, uint64_t ctr, int64_t n, void *dst) {
  double lo = c->attrs->f[LU_RANDOM_LOW], hi = c->attrs->f[LU_RANDOM_HIGH], w = hi - lo;
  uint32_t r[4];
  if (c->out[0]->dtype == LUON_DTYPE_F32) {
    float *y = dst, top = nextafterf((float)hi, -INFINITY);
    for (int64_t j = 0; j < n; j++) {
      lu_philox(key, ctr + (uint64_t)j, r);
      float v = (float)(lo + w * lu_u32_to_unit(r[0]));
      y[j] = hi > lo && v > top ? top : v; /* rounding must not reach high */
    }
  } else {
    double *y = dst, top = nextafter(hi, -INFINITY);
    for (int64_t j = 0; j < n; j++) {
      lu_philox(key, ctr + (uint64_t)j, r);
      double v = lo + w * lu_u64_to_unit(r[0], r[1]);
      y[j] = hi > lo && v > top ? top : v;
    }
  }
}

luon_status lu_cpu_random_uniform(lu_call *c) { return generate(c, gen_uniform); }

/* ---- normal ------------------------------------------------------------- */

/* () -> the shape, normal with mean LOC and std SCALE: Box-Muller, the cosine
 * branch, u1 from (w0, w1) and u2 from (w2, w3). */
luon_status lu_shape_random_normal(lu_call *c) {
  LU_TRY(shape_from_attrs(c, "random_normal", LU_NORMAL_SHAPE, LUON_DTYPE_F32));
  if (!(c->attrs->f[LU_NORMAL_SCALE] >= 0))
    return lu_error(LUON_EINVAL, "random_normal: scale %g must be non-negative",
                    c->attrs->f[LU_NORMAL_SCALE]);
  return need_float(c, "random_normal");
}

static void gen_normal(const lu_call *c, uint64_t key, uint64_t ctr, int64_t n, void *dst) {
  double loc = c->attrs->f[LU_NORMAL_LOC], scale = c->attrs->f[LU_NORMAL_SCALE];
  bool f32 = c->out[0]->dtype == LUON_DTYPE_F32;
  uint32_t r[4];
  for (int64_t j = 0; j < n; j++) {
    lu_philox(key, ctr + (uint64_t)j, r);
    double u1 = 1.0 - lu_u64_to_unit(r[0], r[1]); /* (0, 1]: log is finite */
    double u2 = lu_u64_to_unit(r[2], r[3]);
    double z = loc + scale * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    if (f32) ((float *)dst)[j] = (float)z;
    else ((double *)dst)[j] = z;
  }
}

luon_status lu_cpu_random_normal(lu_call *c) { return generate(c, gen_normal); }

/* ---- randint ------------------------------------------------------------ */

/* () -> the shape, integers uniform on [LOW, HIGH); int64 by default, any
 * integer dtype whose range holds [LOW, HIGH). The
 * range is kept in scratch_i[0] (low) and scratch_i[1] (high - low). */
luon_status lu_shape_random_randint(lu_call *c) {
  LU_TRY(shape_from_attrs(c, "random_randint", LU_RANDOM_SHAPE, LUON_DTYPE_I64));
  double lo = c->attrs->f[LU_RANDOM_LOW], hi = c->attrs->f[LU_RANDOM_HIGH];
  int32_t dt = c->out_dtype[0];
  int64_t min, max;
  if (dt == LUON_DTYPE_BOOL || !lu_dtype_int_range(dt, &min, &max))
    return lu_error(LUON_EDTYPE, "random_randint: dtype %s is not supported, use an integer dtype (int8, "
                    "int16, int32, int64, uint8, uint16)", luon_dtype_name(dt));
  if (!(lo >= -9.2e18 && lo <= 9.2e18 && hi >= -9.2e18 && hi <= 9.2e18))
    return lu_error(LUON_EINVAL, "random_randint: low %g and high %g must be finite 64-bit integers", lo, hi);
  int64_t l = (int64_t)lo, h = (int64_t)hi;
  if (h <= l)
    return lu_error(LUON_EINVAL, "random_randint: high %lld must be greater than low %lld", (long long)h,
                    (long long)l);
  if (max < INT64_MAX) max += 1; /* high is exclusive */
  if (l < min || h > max)
    return lu_error(LUON_EINVAL, "random_randint: [low, high) = [%lld, %lld) is out of range for %s",
                    (long long)l, (long long)h, luon_dtype_name(dt));
  c->scratch_i[0] = l;
  c->scratch_i[1] = (int64_t)((uint64_t)h - (uint64_t)l);
  return LUON_OK;
}

static void gen_randint(const lu_call *c, uint64_t key, uint64_t ctr, int64_t n, void *dst) {
  uint64_t lo = (uint64_t)c->scratch_i[0], range = (uint64_t)c->scratch_i[1];
  int32_t dt = c->out[0]->dtype;
  uint32_t r[4];
  for (int64_t j = 0; j < n; j++) {
    lu_philox(key, ctr + (uint64_t)j, r);
    uint64_t v = lo + below(r[0], r[1], range); /* wraps to the signed value */
    lu_store_int(dst, dt, j, (int64_t)v);
  }
}

luon_status lu_cpu_random_randint(lu_call *c) { return generate(c, gen_randint); }

/* ---- permute ------------------------------------------------------------ */

/* x (n, ...) -> the rows of x in a random order: a Fisher-Yates shuffle of
 * 0..n-1 (step i draws from counter start + i), then take along axis 0. */
luon_status lu_shape_random_permute(lu_call *c) {
  const luon_tensor *x = c->in[0];
  if (x->ndim == 0) return lu_error(LUON_ESHAPE, "random_permute: cannot permute a 0-dimensional array");
  memcpy(c->out_shape[0], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_ndim[0] = x->ndim;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

luon_status lu_cpu_random_permute(lu_call *c) {
  luon_tensor *x = c->in[0], *perm;
  int64_t n = x->shape[0];
  LU_TRY(lu_tensor_new(LUON_DTYPE_I64, 1, &n, c->dev, &perm));
  int64_t *p = lu_data(perm);
  uint64_t key, start = lu_rng_reserve(c->dev, (uint64_t)n, &key);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    uint32_t r[4];
    lu_philox(key, start + (uint64_t)i, r);
    int64_t j = (int64_t)below(r[0], r[1], (uint64_t)i + 1), t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  luon_tensor *in[2] = {x, perm}, *out[1] = {c->out[0]};
  luon_attrs a = {0};
  a.i[LU_TAKE_AXIS] = 0, a.i[LU_TAKE_MODE] = 0; /* axis 0, mode clip: every index is valid */
  a.ni = LU_NI_take;
  int32_t nout = 1;
  luon_status s = luon_op_call(LU_OP_take, 2, in, &a, &nout, out);
  luon_tensor_release(perm);
  if (s == LUON_OK) luon_tensor_release(out[0]); /* the same tensor as c->out[0], retained by the call */
  return s;
}

/* ---- gamma -------------------------------------------------------------- */

/* Attempt t of element j draws the words of (key, j) when t = 0, else of
 * (key ^ mix(t), j): a rejection sampler gets as many fresh words as it
 * needs, each from a counter no other element uses. */
static void draw(uint64_t key, uint64_t ctr, uint64_t t, uint32_t r[4]) {
  lu_philox(t ? key ^ lu_mix64(t) : key, ctr, r);
}

/* Gamma(alpha, 1) by Marsaglia and Tsang (2000): d = a - 1/3, c = 1/sqrt(9d),
 * x normal (Box-Muller on w0, w1), v = (1 + cx)^3, accepted when
 * log(u) < x^2/2 + d - dv + d log v (u from w2, w3). alpha < 1 draws
 * Gamma(alpha + 1) and multiplies by u^(1/alpha), u from the last attempt's
 * tag (~0). */
static double gamma1(double alpha, uint64_t key, uint64_t ctr) {
  double a = alpha < 1 ? alpha + 1 : alpha, d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d), g;
  uint32_t r[4];
  for (uint64_t t = 0;; t++) {
    draw(key, ctr, t, r);
    double u1 = 1.0 - lu_u32_to_unit(r[0]), u2 = lu_u32_to_unit(r[1]); /* u1 in (0, 1] */
    double x = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2), v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = 1.0 - lu_u64_to_unit(r[2], r[3]);
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) {
      g = d * v;
      break;
    }
  }
  if (alpha < 1) {
    draw(key, ctr, ~(uint64_t)0, r);
    g *= pow(1.0 - lu_u64_to_unit(r[0], r[1]), 1.0 / alpha);
  }
  return g;
}

/* () -> the shape, Gamma(ALPHA, SCALE); float32 or float64. */
luon_status lu_shape_random_gamma(lu_call *c) {
  LU_TRY(shape_from_attrs(c, "random_gamma", LU_GAMMA_SHAPE, LUON_DTYPE_F32));
  double alpha = c->attrs->f[LU_GAMMA_ALPHA], scale = c->attrs->f[LU_GAMMA_SCALE];
  if (!(alpha > 0) || isinf(alpha))
    return lu_error(LUON_EINVAL, "random_gamma: shape %g must be positive and finite", alpha);
  if (!(scale >= 0) || isinf(scale))
    return lu_error(LUON_EINVAL, "random_gamma: scale %g must be non-negative and finite", scale);
  return need_float(c, "random_gamma");
}

static void gen_gamma(const lu_call *c, uint64_t key, uint64_t ctr, int64_t n, void *dst) {
  double alpha = c->attrs->f[LU_GAMMA_ALPHA], scale = c->attrs->f[LU_GAMMA_SCALE];
  bool f32 = c->out[0]->dtype == LUON_DTYPE_F32;
  for (int64_t j = 0; j < n; j++) {
    double g = scale * gamma1(alpha, key, ctr + (uint64_t)j);
    if (f32) ((float *)dst)[j] = (float)g;
    else ((double *)dst)[j] = g;
  }
}

luon_status lu_cpu_random_gamma(lu_call *c) { return generate(c, gen_gamma); }

/* ---- choice and multinomial: draws from a list of probabilities --------- */

/* p: a 1-d float32 or float64 array of k >= 1 probabilities (any stride). */
static luon_status check_probs(const lu_call *c, const char *op, const char *what) {
  const luon_tensor *p = c->in[0];
  if (p->ndim != 1 || p->shape[0] < 1)
    return lu_error(LUON_ESHAPE, "%s: %s must be a 1-d array of at least one probability, got shape %s", op,
                    what, lu_shape_str(p->ndim, p->shape));
  if (!lu_dtype_is_float(p->dtype))
    return lu_error(LUON_EDTYPE, "%s: %s is %s, expected float32 or float64", op, what,
                    luon_dtype_name(p->dtype));
  return LUON_OK;
}

static double prob(const luon_tensor *p, int64_t i) {
  const char *b = lu_data(p);
  int64_t at = i * p->strides[0];
  return p->dtype == LUON_DTYPE_F32 ? ((const float *)(const void *)b)[at] : ((const double *)(const void *)b)[at];
}

/* The category of u in [0, total): the first i with u < p[0] + ... + p[i],
 * else (rounding) the last with p[i] > 0. */
static int64_t category(const luon_tensor *p, int64_t k, double u) {
  double s = 0;
  int64_t last = 0;
  for (int64_t i = 0; i < k; i++) {
    double v = prob(p, i);
    if (!(v > 0)) continue;
    s += v;
    last = i;
    if (u < s) return i;
  }
  return last;
}

/* p (k) -> the shape from i[CHOICE_SHAPE..ni), indices into p, int64 */
luon_status lu_shape_random_choice(lu_call *c) {
  LU_TRY(check_probs(c, "random_choice", "p"));
  LU_TRY(shape_from_attrs(c, "random_choice", LU_CHOICE_SHAPE, LUON_DTYPE_I64));
  if (c->out_dtype[0] != LUON_DTYPE_I64)
    return lu_error(LUON_EDTYPE, "random_choice: dtype %s is not supported, the indices are int64",
                    luon_dtype_name(c->out_dtype[0]));
  return LUON_OK;
}

/* one draw per element: u = the 53-bit uniform of (w0, w1) times sum(p) */
static void gen_choice(const lu_call *c, uint64_t key, uint64_t ctr, int64_t n, void *dst) {
  const luon_tensor *p = c->in[0];
  int64_t k = p->shape[0];
  double total = 0;
  for (int64_t i = 0; i < k; i++) total += prob(p, i) > 0 ? prob(p, i) : 0;
  uint32_t r[4];
  for (int64_t j = 0; j < n; j++) {
    lu_philox(key, ctr + (uint64_t)j, r);
    ((int64_t *)dst)[j] = category(p, k, lu_u64_to_unit(r[0], r[1]) * total);
  }
}

luon_status lu_cpu_random_choice(lu_call *c) { return generate(c, gen_choice); }

/* pvals (k) -> (shape..., k) counts, int64 */
luon_status lu_shape_random_multinomial(lu_call *c) {
  LU_TRY(check_probs(c, "random_multinomial", "pvals"));
  int64_t N = c->attrs->i[LU_MULTINOMIAL_N];
  if (N < 0) return lu_error(LUON_EINVAL, "random_multinomial: n = %lld must be non-negative", (long long)N);
  LU_TRY(shape_from_attrs(c, "random_multinomial", LU_MULTINOMIAL_SHAPE, LUON_DTYPE_I64));
  if (c->out_ndim[0] == LU_MAXD)
    return lu_error(LUON_ESHAPE, "random_multinomial: size has %d dimensions, at most %d are supported",
                    LU_MAXD, LU_MAXD - 1);
  if (c->out_dtype[0] != LUON_DTYPE_I64)
    return lu_error(LUON_EDTYPE, "random_multinomial: dtype %s is not supported, the counts are int64",
                    luon_dtype_name(c->out_dtype[0]));
  int64_t rows = 1;
  for (int d = 0; d < c->out_ndim[0]; d++) rows *= c->out_shape[0][d];
  if (N > 0 && rows > ((int64_t)1 << 62) / N)
    return lu_error(LUON_EINVAL, "random_multinomial: %lld rows of n = %lld draws are too many", (long long)rows,
                    (long long)N);
  c->out_shape[0][c->out_ndim[0]++] = c->in[0]->shape[0];
  return LUON_OK;
}

/* Row r's draw t is u from (w0, w1) of counter start + r N + t, on [0, 1):
 * category j for the first j < k-1 with u < pvals[0] + ... + pvals[j],
 * else the last (NumPy's rule: the last takes the remaining probability). */
typedef struct mn_ctx {
  const lu_call *c;
  uint64_t key, start;
} mn_ctx;

static void mn_rows(void *p, int64_t begin, int64_t end) {
  const mn_ctx *m = p;
  const luon_tensor *pv = m->c->in[0];
  int64_t k = pv->shape[0], N = m->c->attrs->i[LU_MULTINOMIAL_N];
  int64_t *y = lu_data(m->c->out[0]); /* the dispatcher's outputs are dense */
  for (int64_t row = begin; row < end; row++) {
    int64_t *cnt = y + row * k;
    memset(cnt, 0, sizeof(int64_t) * (size_t)k);
    for (int64_t t = 0; t < N; t++) {
      uint32_t r[4];
      lu_philox(m->key, m->start + (uint64_t)(row * N + t), r);
      double u = lu_u64_to_unit(r[0], r[1]), s = 0;
      int64_t j = 0;
      for (; j < k - 1; j++) {
        s += prob(pv, j);
        if (u < s) break;
      }
      cnt[j]++;
    }
  }
}

luon_status lu_cpu_random_multinomial(lu_call *c) {
  int64_t k = c->in[0]->shape[0], rows = c->out[0]->size / k, N = c->attrs->i[LU_MULTINOMIAL_N];
  mn_ctx m = {c, 0, 0};
  m.start = lu_rng_reserve(c->dev, (uint64_t)rows * (uint64_t)N, &m.key);
  lu_parallel_for(rows, N > 0 ? (1 << 14) / N + 1 : 1 << 14, mn_rows, &m);
  return LUON_OK;
}
