/* nn.c: the small neural-network ops and their backward rules: dropout,
 * softmax / log_softmax over an axis, pick (the gather of the cross-entropy
 * loss), softrelu / leaky_relu / elu / selu / gelu and the (x or y, dy)
 * gradients of activations.
 * Float32 and float64, any strides. Not here: relu/sigmoid/tanh themselves
 * (elementwise.c), batch_norm (norm.c), optimizer updates (optim.c). */
#include "steps.h"
#include <math.h>

#define PAR_GRAIN 16384 /* elements per thread before threads are used */
#define LANES 64        /* softmax rows handled side by side (axis not innermost) */

#define EXP(x) _Generic((x), float: expf, default: exp)(x)
#define LOG1P(x) _Generic((x), float: log1pf, default: log1p)(x)
#define ERF(x) _Generic((x), float: erff, default: erf)(x)

/* selu's constants (MXNet's, from Klambauer et al.) */
#define SELU_LAMBDA 1.0507009873554804934193349852946
#define SELU_ALPHA 1.6732632423543772848170429916717
#define SQRT1_2 0.70710678118654752440084436210485    /* 1 / sqrt(2) */
#define RSQRT_2PI 0.39894228040143267793994605993438  /* 1 / sqrt(2 pi) */

/* ---- shared checks ---------------------------------------------------------- */

static luon_status need_float(const char *op, const luon_tensor *t, const char *what) {
  if (t->dtype != LUON_DTYPE_F32 && t->dtype != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "%s: %s is %s %s; only float32 and float64 are supported", op,
                    what, luon_dtype_name(t->dtype), lu_shape_str(t->ndim, t->shape));
  return LUON_OK;
}

static bool shape_eq(const luon_tensor *a, const luon_tensor *b) {
  return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* Two float inputs (a, dy) of one shape and dtype; output like them. */
static luon_status pair_shape(lu_call *c, const char *op, const char *an) {
  const luon_tensor *a = c->in[0], *dy = c->in[1];
  LU_TRY(need_float(op, a, an));
  if (!shape_eq(a, dy))
    return lu_error(LUON_ESHAPE, "%s: %s has shape %s but dy has shape %s; they must match", op, an,
                    lu_shape_str(a->ndim, a->shape), lu_shape_str(dy->ndim, dy->shape));
  if (a->dtype != dy->dtype)
    return lu_error(LUON_EDTYPE, "%s: %s is %s but dy is %s; they must match", op, an,
                    luon_dtype_name(a->dtype), luon_dtype_name(dy->dtype));
  c->out_ndim[0] = a->ndim;
  memcpy(c->out_shape[0], a->shape, sizeof(int64_t) * (size_t)a->ndim);
  c->out_dtype[0] = a->dtype;
  return LUON_OK;
}

/* One float input; output k like it. */
static luon_status like_input(lu_call *c, const char *op, int k) {
  const luon_tensor *x = c->in[0];
  LU_TRY(need_float(op, x, "x"));
  c->out_ndim[k] = x->ndim;
  memcpy(c->out_shape[k], x->shape, sizeof(int64_t) * (size_t)x->ndim);
  c->out_dtype[k] = x->dtype;
  return LUON_OK;
}

/* Byte strides of t in an ndim-d index space: its own, or with a 0 stride
 * inserted at `axis` when t lacks that axis (t->ndim == ndim - 1). */
static void strides_at(const luon_tensor *t, int ndim, int axis, int64_t *st) {
  int64_t es = luon_dtype_size(t->dtype);
  for (int d = 0, s = 0; d < ndim; d++) {
    if (t->ndim == ndim - 1 && d == axis) st[d] = 0;
    else st[d] = t->strides[s++] * es;
  }
}

/* ---- activations and their gradients ----------------------------------------- */

/* y = f(x) or dx = g(a, dy) over one row of n elements; strides in bytes,
 * op 0 the output, then the inputs. Dense rows take the vectorisable loop. */
enum { A_SOFTRELU, A_LEAKY, A_ELU, A_SELU, A_GELU, G_RELU, G_SIGMOID, G_TANH, G_SOFTRELU, G_LEAKY,
       G_ELU, G_SELU, G_GELU };

typedef struct act {
  int kind;
  int32_t dt;
  double slope;
} act;

#define E_SOFTRELU(T, v, d) ((v) > 0 ? (v) + LOG1P(EXP(-(v))) : LOG1P(EXP(v)))
#define E_LEAKY(T, v, d) ((v) > 0 ? (v) : s * (v))
#define E_G_RELU(T, v, d) ((v) > 0 ? (d) : (T)0)
#define E_G_SIGMOID(T, v, d) ((d) * (v) * ((T)1 - (v)))
#define E_G_TANH(T, v, d) ((d) * ((T)1 - (v) * (v)))
#define E_G_SOFTRELU(T, v, d) ((d) / ((T)1 + EXP(-(v))))
#define E_G_LEAKY(T, v, d) ((v) > 0 ? (d) : s * (d))
#define E_ELU(T, v, d) ((v) > 0 ? (v) : s * (EXP(v) - (T)1))
#define E_G_ELU(T, v, d) ((v) > 0 ? (d) : s * EXP(v) * (d))
#define E_SELU(T, v, d) ((T)SELU_LAMBDA * ((v) > 0 ? (v) : (T)SELU_ALPHA * (EXP(v) - (T)1)))
#define E_G_SELU(T, v, d) ((T)SELU_LAMBDA * ((v) > 0 ? (d) : (T)SELU_ALPHA * EXP(v) * (d)))
#define E_GELU(T, v, d) ((T)0.5 * (v) * ((T)1 + ERF((v) * (T)SQRT1_2)))
#define E_G_GELU(T, v, d)                                                      \
  ((d) * ((T)0.5 * ((T)1 + ERF((v) * (T)SQRT1_2)) + (v) * (T)RSQRT_2PI * EXP((T)-0.5 * (v) * (v))))

#define ACT_LOOP(T, E, nin)                                                    \
  do {                                                                         \
    const T s = (T)slope;                                                      \
    (void)s;                                                                   \
    if (st[0] == sizeof(T) && st[1] == sizeof(T) && (nin == 1 || st[2] == sizeof(T))) { \
      T *restrict o = (T *)p[0];                                               \
      const T *restrict a = (const T *)p[1];                                   \
      const T *restrict b = (const T *)(nin == 1 ? p[1] : p[2]);               \
      (void)b;                                                                 \
      for (int64_t i = 0; i < n; i++) o[i] = E(T, a[i], b[i]);                 \
    } else {                                                                   \
      for (int64_t i = 0; i < n; i++) {                                        \
        T v = *(const T *)(p[1] + i * st[1]);                                  \
        T d = *(const T *)(p[nin] + i * st[nin]);                              \
        (void)d;                                                               \
        *(T *)(p[0] + i * st[0]) = E(T, v, d);                                 \
      }                                                                        \
    }                                                                          \
  } while (0)

#define ACT_ROW(T, sfx)                                                        \
  TC static void act_row_##sfx(int kind, double slope, int64_t n, char *const *p, \
                               const int64_t *st) {                            \
    switch (kind) {                                                            \
    case A_SOFTRELU: ACT_LOOP(T, E_SOFTRELU, 1); break;                        \
    case A_LEAKY: ACT_LOOP(T, E_LEAKY, 1); break;                              \
    case A_ELU: ACT_LOOP(T, E_ELU, 1); break;                                  \
    case A_SELU: ACT_LOOP(T, E_SELU, 1); break;                                \
    case A_GELU: ACT_LOOP(T, E_GELU, 1); break;                                \
    case G_ELU: ACT_LOOP(T, E_G_ELU, 2); break;                                \
    case G_SELU: ACT_LOOP(T, E_G_SELU, 2); break;                              \
    case G_GELU: ACT_LOOP(T, E_G_GELU, 2); break;                              \
    case G_RELU: ACT_LOOP(T, E_G_RELU, 2); break;                              \
    case G_SIGMOID: ACT_LOOP(T, E_G_SIGMOID, 2); break;                        \
    case G_TANH: ACT_LOOP(T, E_G_TANH, 2); break;                              \
    case G_SOFTRELU: ACT_LOOP(T, E_G_SOFTRELU, 2); break;                      \
    default: ACT_LOOP(T, E_G_LEAKY, 2); break;                                 \
    }                                                                          \
  }
ACT_ROW(float, f32)
ACT_ROW(double, f64)

static void act_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  const act *a = ctx;
  if (a->dt == LUON_DTYPE_F32) act_row_f32(a->kind, a->slope, n, p, st);
  else act_row_f64(a->kind, a->slope, n, p, st);
}

/* out (..x) = f(in[0]) or g(in[0], in[1]), all of out's shape */
static luon_status act_run(lu_call *c, int kind) {
  luon_tensor *o = c->out[0];
  int nops = c->nin + 1;
  char *base[3] = {lu_data(o), lu_data(c->in[0]), c->nin > 1 ? lu_data(c->in[1]) : NULL};
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];
  lu_byte_strides(o, o->ndim, o->shape, st[0]);
  for (int k = 0; k < c->nin; k++) lu_byte_strides(c->in[k], o->ndim, o->shape, st[k + 1]);
  act a = {kind, o->dtype, c->attrs->f[LU_LEAKY_SLOPE]}; /* the slope: leaky_relu's and elu's */
  lu_foreach_row(o->ndim, o->shape, nops, base, (const int64_t(*)[LU_MAXD])st, PAR_GRAIN, true, act_row,
                 &a);
  return LUON_OK;
}

/* softrelu: (..x) -> log(1 + exp(x)), computed as max(x,0) + log1p(exp(-|x|)) */
luon_status lu_shape_softrelu(lu_call *c) { return like_input(c, "softrelu", 0); }
luon_status lu_cpu_softrelu(lu_call *c) { return act_run(c, A_SOFTRELU); }

/* leaky_relu: (..x) -> x > 0 ? x : slope * x, slope f[0] */
luon_status lu_shape_leaky_relu(lu_call *c) { return like_input(c, "leaky_relu", 0); }
luon_status lu_cpu_leaky_relu(lu_call *c) { return act_run(c, A_LEAKY); }

/* elu: (..x) -> x > 0 ? x : slope * (exp(x) - 1), leaky_relu's slot */
luon_status lu_shape_elu(lu_call *c) { return like_input(c, "elu", 0); }
luon_status lu_cpu_elu(lu_call *c) { return act_run(c, A_ELU); }
/* selu: (..x) -> lambda * (x > 0 ? x : alpha * (exp(x) - 1)), MXNet's constants */
luon_status lu_shape_selu(lu_call *c) { return like_input(c, "selu", 0); }
luon_status lu_cpu_selu(lu_call *c) { return act_run(c, A_SELU); }
/* gelu: (..x) -> x * Phi(x) = x / 2 * (1 + erf(x / sqrt 2)), the exact (erf) form */
luon_status lu_shape_gelu(lu_call *c) { return like_input(c, "gelu", 0); }
luon_status lu_cpu_gelu(lu_call *c) { return act_run(c, A_GELU); }

/* (x, dy) -> dy * (x > 0) */
luon_status lu_shape_relu_grad(lu_call *c) { return pair_shape(c, "relu_grad", "x"); }
luon_status lu_cpu_relu_grad(lu_call *c) { return act_run(c, G_RELU); }
/* (y, dy) -> dy * y * (1 - y) */
luon_status lu_shape_sigmoid_grad(lu_call *c) { return pair_shape(c, "sigmoid_grad", "y"); }
luon_status lu_cpu_sigmoid_grad(lu_call *c) { return act_run(c, G_SIGMOID); }
/* (y, dy) -> dy * (1 - y^2) */
luon_status lu_shape_tanh_grad(lu_call *c) { return pair_shape(c, "tanh_grad", "y"); }
luon_status lu_cpu_tanh_grad(lu_call *c) { return act_run(c, G_TANH); }
/* (x, dy) -> dy * sigmoid(x) */
luon_status lu_shape_softrelu_grad(lu_call *c) { return pair_shape(c, "softrelu_grad", "x"); }
luon_status lu_cpu_softrelu_grad(lu_call *c) { return act_run(c, G_SOFTRELU); }
/* (x, dy) -> x > 0 ? dy : slope * dy */
luon_status lu_shape_leaky_relu_grad(lu_call *c) { return pair_shape(c, "leaky_relu_grad", "x"); }
luon_status lu_cpu_leaky_relu_grad(lu_call *c) { return act_run(c, G_LEAKY); }

/* (x, dy) -> x > 0 ? dy : slope * exp(x) * dy */
luon_status lu_shape_elu_grad(lu_call *c) { return pair_shape(c, "elu_grad", "x"); }
luon_status lu_cpu_elu_grad(lu_call *c) { return act_run(c, G_ELU); }
/* (x, dy) -> lambda * (x > 0 ? dy : alpha * exp(x) * dy) */
luon_status lu_shape_selu_grad(lu_call *c) { return pair_shape(c, "selu_grad", "x"); }
luon_status lu_cpu_selu_grad(lu_call *c) { return act_run(c, G_SELU); }
/* (x, dy) -> dy * (Phi(x) + x * phi(x)) */
luon_status lu_shape_gelu_grad(lu_call *c) { return pair_shape(c, "gelu_grad", "x"); }
luon_status lu_cpu_gelu_grad(lu_call *c) { return act_run(c, G_GELU); }

/* The activations' gradient ops are differentiable too, for second
 * derivatives (autograd.grad with create_graph): each is linear in dy, so
 * d(dy) = the same op on the incoming gradient h; the other input's term:
 * relu_grad, leaky_relu_grad (x, dy): piecewise constant in x, zeros;
 * sigmoid_grad (y, dy) = dy y (1 - y): d(y) = h dy (1 - 2y);
 * tanh_grad (y, dy) = dy (1 - y^2): d(y) = -2 h dy y;
 * softrelu_grad (x, dy) = dy sigmoid(x): d(x) = h dy s (1 - s), s = sigmoid(x). */
static luon_status grad_of_act_grad(lu_grad_call *g, int32_t op, int32_t first_term) {
  luon_tensor *a = g->in[0], *dy = g->in[1], *h = g->dout[0];
  if (!h) return LUON_OK;
  lu_steps e = {LUON_OK, 0, {NULL}};
  if (g->need[1]) lu_steps_give(&e, lu_steps_run(&e, op, g->attrs, a, h, NULL), dy, &g->din[1]);
  if (g->need[0] && !first_term) { /* zeros, not none: x is reached (autograd.grad's check) */
    luon_attrs z;
    memset(&z, 0, sizeof z);
    z.dtype = a->dtype;
    z.dev_type = a->dev.type;
    z.dev_id = a->dev.id;
    z.ni = LU_FULL_SHAPE + a->ndim;
    memcpy(z.i + LU_FULL_SHAPE, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    lu_steps_give(&e, lu_steps_run(&e, LU_OP_full, &z, NULL, NULL, NULL), a, &g->din[0]);
  }
  if (g->need[0] && first_term) {
    luon_tensor *hdy = R2(multiply, h, dy), *t = NULL;
    if (first_term == LU_OP_sigmoid_grad) t = R2(multiply, hdy, R2(subtract, K(1, a), R2(multiply, a, K(2, a))));
    else if (first_term == LU_OP_tanh_grad) t = R2(multiply, hdy, R2(multiply, a, K(-2, a)));
    else t = R2(sigmoid_grad, R1(sigmoid, a), hdy);
    lu_steps_give(&e, t, a, &g->din[0]);
  }
  return lu_steps_end(&e);
}
luon_status lu_grad_relu_grad(lu_grad_call *g) { return grad_of_act_grad(g, LU_OP_relu_grad, 0); }
luon_status lu_grad_leaky_relu_grad(lu_grad_call *g) { return grad_of_act_grad(g, LU_OP_leaky_relu_grad, 0); }
luon_status lu_grad_sigmoid_grad(lu_grad_call *g) {
  return grad_of_act_grad(g, LU_OP_sigmoid_grad, LU_OP_sigmoid_grad);
}
luon_status lu_grad_tanh_grad(lu_grad_call *g) { return grad_of_act_grad(g, LU_OP_tanh_grad, LU_OP_tanh_grad); }
luon_status lu_grad_softrelu_grad(lu_grad_call *g) {
  return grad_of_act_grad(g, LU_OP_softrelu_grad, LU_OP_softrelu);
}

/* d softrelu(x) = dy * sigmoid(x) */
luon_status lu_grad_softrelu(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_softrelu_grad, NULL, &g->din[0], 2, g->in[0], g->dout[0]);
}

/* d leaky_relu(x) = dy where x > 0, slope * dy elsewhere (same attrs) */
luon_status lu_grad_leaky_relu(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_leaky_relu_grad, g->attrs, &g->din[0], 2, g->in[0], g->dout[0]);
}

/* d elu(x), d selu(x), d gelu(x): their (x, dy) ops (elu's with its slope) */
luon_status lu_grad_elu(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_elu_grad, g->attrs, &g->din[0], 2, g->in[0], g->dout[0]);
}
luon_status lu_grad_selu(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_selu_grad, NULL, &g->din[0], 2, g->in[0], g->dout[0]);
}
luon_status lu_grad_gelu(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_gelu_grad, NULL, &g->din[0], 2, g->in[0], g->dout[0]);
}

/* ---- dropout ---------------------------------------------------------------- */

/* x (..) -> y = x * mask, mask (..) in {0, 1/(1-p)}, p = P in [0, 1].
 * Element j (row-major) is kept when word j%4 of Philox(key, start + j/4)
 * is at least p * 2^32 (as a unit float): the same on any thread count. */
luon_status lu_shape_dropout(lu_call *c) {
  double p = c->attrs->f[LU_DROPOUT_P];
  if (!(p >= 0 && p <= 1))
    return lu_error(LUON_EINVAL, "dropout: p = %g must be in [0, 1] (input %s)", p,
                    lu_shape_str(c->in[0]->ndim, c->in[0]->shape));
  LU_TRY(like_input(c, "dropout", 0));
  return like_input(c, "dropout", 1);
}

typedef struct drop {
  const luon_tensor *x, *y, *m;
  bool dense;
  float p;
  double scale;
  uint64_t key, start;
} drop;

/* Element offset of row-major index j in t. */
static int64_t offset_of(const luon_tensor *t, int64_t j) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0 && j; d--) {
    off += (j % t->shape[d]) * t->strides[d];
    j /= t->shape[d];
  }
  return off;
}

#define DROP_LOOP(T)                                                           \
  do {                                                                         \
    const T *xp = lu_data(d->x);                                               \
    T *yp = lu_data(d->y), *mp = lu_data(d->m);                                \
    const T sc = (T)d->scale;                                                  \
    for (int64_t j = b; j < e; j++) {                                          \
      if ((uint64_t)j >> 2 != blk) {                                           \
        blk = (uint64_t)j >> 2;                                                \
        lu_philox(d->key, d->start + blk, w);                                  \
      }                                                                        \
      T mk = lu_u32_to_unit(w[j & 3]) >= d->p ? sc : (T)0;                     \
      if (d->dense) {                                                          \
        mp[j] = mk;                                                            \
        yp[j] = xp[j] * mk;                                                    \
      } else {                                                                 \
        mp[offset_of(d->m, j)] = mk;                                           \
        yp[offset_of(d->y, j)] = xp[offset_of(d->x, j)] * mk;                  \
      }                                                                        \
    }                                                                          \
  } while (0)

static void drop_range(void *ctx, int64_t b, int64_t e) {
  const drop *d = ctx;
  uint64_t blk = UINT64_MAX;
  uint32_t w[4] = {0, 0, 0, 0};
  if (d->x->dtype == LUON_DTYPE_F32) DROP_LOOP(float);
  else DROP_LOOP(double);
}

luon_status lu_cpu_dropout(lu_call *c) {
  double p = c->attrs->f[LU_DROPOUT_P];
  drop d = {c->in[0], c->out[0], c->out[1], false, (float)p, 0, 0, 0};
  int64_t n = d.x->size;
  if (n == 0) return LUON_OK;
  d.dense = lu_is_contiguous(d.x) && lu_is_contiguous(d.y) && lu_is_contiguous(d.m);
  if (p == 0) { /* nothing dropped: mask 1, y = x, no draws */
    d.scale = 1;
    d.p = -1;
  } else {
    d.scale = p < 1 ? 1 / (1 - p) : 0;
    d.start = lu_rng_reserve(c->dev, ((uint64_t)n + 3) / 4, &d.key);
  }
  /* a thread boundary inside a Philox block just draws that block twice */
  lu_parallel_for(n, PAR_GRAIN, drop_range, &d);
  return LUON_OK;
}

/* d(x * mask) = dy * mask */
luon_status lu_grad_dropout(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_multiply, NULL, &g->din[0], 2, g->dout[0], g->out[1]);
}
/* ---- softmax family ------------------------------------------------------------ */

/* Rows along the axis are walked as lanes: lu_foreach_row runs over x's
 * shape with the axis set to 1, and each of its rows is a run of lanes that
 * the kernel sweeps along the axis together (or one by one when the axis is
 * the dense one). op 0 is the output, then the inputs. */
enum { S_SOFTMAX, S_LOG_SOFTMAX, S_SOFTMAX_GRAD, S_LOG_SOFTMAX_GRAD };

typedef struct smax {
  int kind, nops;
  int32_t dt;
  int64_t len;       /* along the axis */
  int64_t ast[3];    /* axis byte strides of out, in[0], in[1] */
} smax;

/* element (lane i, step j along the axis) of operand k; LS(k) the lane stride */
#define AT(T, k, i, j) (((T *)p[k])[(i) * LS(k) + (j) * as[k]])

/* w lanes starting at p[k], lane stride st[k] (bytes); the _dense twins
 * have lanes next to each other (stride 1) and vectorise across them. */
#define SMAX_LANES(T, sfx)                                                     \
  TC static void smax_lanes_##sfx(const smax *s, int64_t w, char *const *p, const int64_t *st) { \
    T mx[LANES];                                                               \
    double acc[LANES];                                                         \
    int64_t L = s->len, as[3], ls[3];                                          \
    for (int k = 0; k < s->nops; k++) {                                        \
      as[k] = s->ast[k] / (int64_t)sizeof(T);                                  \
      ls[k] = st[k] / (int64_t)sizeof(T);                                      \
    }                                                                          \
    (void)ls;                                                                  \
    for (int64_t i = 0; i < w; i++) acc[i] = 0;                                \
    switch (s->kind) {                                                         \
    case S_SOFTMAX:                                                            \
    case S_LOG_SOFTMAX:                                                        \
      for (int64_t i = 0; i < w; i++) mx[i] = -INFINITY;                       \
      for (int64_t j = 0; j < L; j++)                                          \
        for (int64_t i = 0; i < w; i++)                                        \
          mx[i] = AT(T, 1, i, j) > mx[i] ? AT(T, 1, i, j) : mx[i];             \
      for (int64_t j = 0; j < L; j++)                                          \
        for (int64_t i = 0; i < w; i++) {                                      \
          T e = EXP(AT(T, 1, i, j) - mx[i]);                                   \
          acc[i] += e;                                                         \
          if (s->kind == S_SOFTMAX) AT(T, 0, i, j) = e;                        \
        }                                                                      \
      if (s->kind == S_SOFTMAX) {                                              \
        for (int64_t i = 0; i < w; i++) acc[i] = 1 / acc[i];                   \
        for (int64_t j = 0; j < L; j++)                                        \
          for (int64_t i = 0; i < w; i++) AT(T, 0, i, j) *= (T)acc[i];         \
      } else {                                                                 \
        for (int64_t i = 0; i < w; i++) acc[i] = (double)mx[i] + log(acc[i]);  \
        for (int64_t j = 0; j < L; j++)                                        \
          for (int64_t i = 0; i < w; i++)                                      \
            AT(T, 0, i, j) = (T)((double)AT(T, 1, i, j) - acc[i]);             \
      }                                                                        \
      break;                                                                   \
    case S_SOFTMAX_GRAD: /* y * (dy - sum(dy * y)) */                          \
      for (int64_t j = 0; j < L; j++)                                          \
        for (int64_t i = 0; i < w; i++) acc[i] += (double)AT(T, 1, i, j) * AT(T, 2, i, j); \
      for (int64_t j = 0; j < L; j++)                                          \
        for (int64_t i = 0; i < w; i++)                                        \
          AT(T, 0, i, j) = AT(T, 1, i, j) * (AT(T, 2, i, j) - (T)acc[i]);      \
      break;                                                                   \
    default: /* dy - exp(y) * sum(dy) */                                       \
      for (int64_t j = 0; j < L; j++)                                          \
        for (int64_t i = 0; i < w; i++) acc[i] += AT(T, 2, i, j);              \
      for (int64_t j = 0; j < L; j++)                                          \
        for (int64_t i = 0; i < w; i++)                                        \
          AT(T, 0, i, j) = AT(T, 2, i, j) - EXP(AT(T, 1, i, j)) * (T)acc[i];   \
      break;                                                                   \
    }                                                                          \
  }
#define LS(k) ls[k]
SMAX_LANES(float, f32)
SMAX_LANES(double, f64)
#undef LS
#define LS(k) 1
SMAX_LANES(float, f32_dense)
SMAX_LANES(double, f64_dense)
#undef LS
#undef AT

static void smax_row(void *ctx, int64_t n, char *const *ptr, const int64_t *st) {
  const smax *s = ctx;
  int64_t es = luon_dtype_size(s->dt);
  /* dense along the axis: one lane at a time reads memory in order */
  int64_t chunk = s->ast[1] == es ? 1 : LANES;
  bool dense = chunk > 1;
  for (int k = 0; k < s->nops; k++) dense = dense && st[k] == es;
  char *p[3] = {NULL, NULL, NULL};
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    int64_t w = n - i0 < chunk ? n - i0 : chunk;
    for (int k = 0; k < s->nops; k++) p[k] = ptr[k] + i0 * st[k];
    if (s->dt == LUON_DTYPE_F32) (dense ? smax_lanes_f32_dense : smax_lanes_f32)(s, w, p, st);
    else (dense ? smax_lanes_f64_dense : smax_lanes_f64)(s, w, p, st);
  }
}

/* softmax's (and its kin's) axis: AXIS, -1 when left out */
static int64_t smax_axis(const lu_call *c) {
  return c->attrs->ni > LU_SOFTMAX_AXIS ? c->attrs->i[LU_SOFTMAX_AXIS] : -1;
}

static luon_status smax_run(lu_call *c, int kind) {
  luon_tensor *o = c->out[0];
  int ax;
  LU_TRY(lu_axis(luon_op_name(c->op), smax_axis(c), o->ndim, &ax));
  smax s = {kind, c->nin + 1, o->dtype, o->shape[ax], {0, 0, 0}};
  if (o->size == 0) return LUON_OK;
  int64_t shape[LU_MAXD], st[LU_ITER_MAX_OPS][LU_MAXD];
  char *base[3] = {lu_data(o), NULL, NULL};
  memcpy(shape, o->shape, sizeof(int64_t) * (size_t)o->ndim);
  shape[ax] = 1;
  lu_byte_strides(o, o->ndim, o->shape, st[0]);
  for (int k = 0; k < c->nin; k++) {
    base[k + 1] = lu_data(c->in[k]);
    lu_byte_strides(c->in[k], o->ndim, o->shape, st[k + 1]);
  }
  for (int k = 0; k <= c->nin; k++) s.ast[k] = st[k][ax];
  int64_t grain = PAR_GRAIN / (s.len > 0 ? s.len : 1);
  lu_foreach_row(o->ndim, shape, c->nin + 1, base, (const int64_t(*)[LU_MAXD])st,
                 grain > 0 ? grain : 1, true, smax_row, &s);
  return LUON_OK;
}

/* (..x) -> (..x) over AXIS (default -1) */
static luon_status smax_shape(lu_call *c, const char *op) {
  int ax;
  LU_TRY(need_float(op, c->in[0], "x"));
  LU_TRY(lu_axis(op, smax_axis(c), c->in[0]->ndim, &ax));
  return like_input(c, op, 0);
}

/* (y, dy) -> dx over AXIS */
static luon_status smax_grad_shape(lu_call *c, const char *op) {
  int ax;
  LU_TRY(pair_shape(c, op, "y"));
  return lu_axis(op, smax_axis(c), c->in[0]->ndim, &ax);
}

/* softmax: y = exp(x - max) / sum(exp(x - max)) along the axis */
luon_status lu_shape_softmax(lu_call *c) { return smax_shape(c, "softmax"); }
luon_status lu_cpu_softmax(lu_call *c) { return smax_run(c, S_SOFTMAX); }
/* log_softmax: y = x - max - log(sum(exp(x - max))) */
luon_status lu_shape_log_softmax(lu_call *c) { return smax_shape(c, "log_softmax"); }
luon_status lu_cpu_log_softmax(lu_call *c) { return smax_run(c, S_LOG_SOFTMAX); }
/* (y, dy) -> y * (dy - sum(dy * y)) */
luon_status lu_shape_softmax_grad(lu_call *c) { return smax_grad_shape(c, "softmax_grad"); }
luon_status lu_cpu_softmax_grad(lu_call *c) { return smax_run(c, S_SOFTMAX_GRAD); }
/* (y, dy) -> dy - exp(y) * sum(dy) */
luon_status lu_shape_log_softmax_grad(lu_call *c) { return smax_grad_shape(c, "log_softmax_grad"); }
luon_status lu_cpu_log_softmax_grad(lu_call *c) { return smax_run(c, S_LOG_SOFTMAX_GRAD); }

/* dx = softmax_grad(y, dy), y the forward's output; same axis */
luon_status lu_grad_softmax(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_softmax_grad, g->attrs, &g->din[0], 2, g->out[0], g->dout[0]);
}

luon_status lu_grad_log_softmax(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  return lu_run(LU_OP_log_softmax_grad, g->attrs, &g->din[0], 2, g->out[0], g->dout[0]);
}

/* ---- pick ------------------------------------------------------------------------ */

/* x (..., L, ...) with index (..., ...) -> out (..., ...) or keepdims
 * (..., 1, ...): out = x[..., clip/wrap(trunc(index)), ...] along axis i[0].
 * The index may also come in the keepdims shape. */
enum { PICK_CLIP = 0, PICK_WRAP = 1 };

/* Whether t has x's shape without `axis` (or with it as 1). */
static bool reduced_shape_of(const luon_tensor *t, int ndim, const int64_t *xshape, int axis) {
  if (t->ndim == ndim) {
    for (int d = 0; d < ndim; d++)
      if (t->shape[d] != (d == axis ? 1 : xshape[d])) return false;
    return true;
  }
  if (t->ndim != ndim - 1) return false;
  for (int d = 0, s = 0; d < ndim; d++)
    if (d != axis && t->shape[s++] != xshape[d]) return false;
  return true;
}

static luon_status index_dtype(const char *op, const luon_tensor *idx) {
  switch (idx->dtype) {
  case LUON_DTYPE_F32: case LUON_DTYPE_F64: case LUON_DTYPE_I32: case LUON_DTYPE_I64:
  case LUON_DTYPE_U8: case LUON_DTYPE_I8: case LUON_DTYPE_I16: case LUON_DTYPE_U16:
    return LUON_OK;
  default:
    return lu_error(LUON_EDTYPE, "%s: index is %s; use an integer or float dtype", op,
                    luon_dtype_name(idx->dtype));
  }
}

/* The position along an axis of length L that index value at p picks. */
static int64_t pick_pos(const char *p, int32_t dt, int64_t L, int mode) {
  int64_t k;
  double v;
  switch (dt) {
  case LUON_DTYPE_F32: v = *(const float *)p; break;
  case LUON_DTYPE_F64: v = *(const double *)p; break;
  default: k = lu_load_int(p, dt, 0); goto integer;
  }
  v = trunc(v);
  if (isnan(v) || (mode == PICK_WRAP && isinf(v))) return 0; /* no position to wrap to (fmod: NaN) */
  if (mode == PICK_WRAP) {
    v = fmod(v, (double)L);
    return (int64_t)(v < 0 ? v + (double)L : v) % L;
  }
  return v <= 0 ? 0 : v >= (double)(L - 1) ? L - 1 : (int64_t)v;
integer:
  if (mode == PICK_WRAP) return ((k % L) + L) % L;
  return k < 0 ? 0 : k >= L ? L - 1 : k;
}

typedef struct pick {
  int64_t len, ast;   /* along the axis: length, byte stride of x (or of dx) */
  int32_t es, idt;
  int mode;
  bool grad;          /* pick_grad: scatter dy (op 1) into dx (op 0) */
} pick;

/* forward: op 0 out, 1 x, 2 index; grad: op 0 dx, 1 dy, 2 index */
static void pick_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  const pick *k = ctx;
  for (int64_t i = 0; i < n; i++) {
    int64_t pos = pick_pos(p[2] + i * st[2], k->idt, k->len, k->mode);
    if (k->grad) memcpy(p[0] + i * st[0] + pos * k->ast, p[1] + i * st[1], (size_t)k->es);
    else memcpy(p[0] + i * st[0], p[1] + i * st[1] + pos * k->ast, (size_t)k->es);
  }
}

static void zero_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  int64_t es = *(const int32_t *)ctx;
  if (st[0] == es) {
    memset(p[0], 0, (size_t)(n * es));
    return;
  }
  for (int64_t i = 0; i < n; i++) memset(p[0] + i * st[0], 0, (size_t)es);
}

/* The attrs and the index of pick (r = index) or pick_grad (r = dy, f the
 * float operand) against the full array's shape (ndim, xshape). */
static luon_status pick_check(const char *op, int ndim, const int64_t *xshape,
                              const luon_tensor *f, const char *fn, const luon_tensor *r,
                              const char *rn, const luon_tensor *idx, const luon_attrs *a, int *axis) {
  LU_TRY(need_float(op, f, fn));
  LU_TRY(index_dtype(op, idx));
  LU_TRY(lu_axis(op, a->i[LU_PICK_AXIS], ndim, axis));
  int64_t mode = a->i[LU_PICK_MODE];
  if (mode != PICK_CLIP && mode != PICK_WRAP)
    return lu_error(LUON_EINVAL, "%s: mode %lld is not 0 (clip) or 1 (wrap)", op, (long long)mode);
  const luon_tensor *chk[2] = {idx, r};
  const char *names[2] = {"index", rn};
  for (int k = 0; k < 2; k++)
    if (!reduced_shape_of(chk[k], ndim, xshape, *axis))
      return lu_error(LUON_ESHAPE, "%s: %s has shape %s but x has shape %s; picking along axis %d "
                      "it must have x's shape without that axis", op, names[k],
                      lu_shape_str(chk[k]->ndim, chk[k]->shape), lu_shape_str(ndim, xshape), *axis);
  if (xshape[*axis] == 0 && idx->size > 0)
    return lu_error(LUON_ESHAPE, "%s: cannot pick along axis %d of length 0 (x %s)", op, *axis,
                    lu_shape_str(ndim, xshape));
  return LUON_OK;
}

luon_status lu_shape_pick(lu_call *c) {
  const luon_tensor *x = c->in[0], *idx = c->in[1];
  int ax;
  LU_TRY(pick_check("pick", x->ndim, x->shape, x, "x", idx, "index", idx, c->attrs, &ax));
  bool keep = c->attrs->i[LU_PICK_KEEPDIMS] != 0;
  int nd = 0;
  for (int d = 0; d < x->ndim; d++) {
    if (d != ax) c->out_shape[0][nd++] = x->shape[d];
    else if (keep) c->out_shape[0][nd++] = 1;
  }
  c->out_ndim[0] = nd;
  c->out_dtype[0] = x->dtype;
  return LUON_OK;
}

static luon_status pick_run(lu_call *c, bool grad) {
  const luon_tensor *full = grad ? c->out[0] : c->in[0], *r = grad ? c->in[0] : c->out[0];
  const luon_tensor *idx = c->in[1];
  int64_t axis = c->attrs->i[LU_PICK_AXIS];
  int nd = full->ndim, ax = (int)(axis < 0 ? axis + nd : axis);
  pick k = {full->shape[ax], full->strides[ax] * luon_dtype_size(full->dtype),
            luon_dtype_size(full->dtype), idx->dtype, (int)c->attrs->i[LU_PICK_MODE], grad};
  int64_t shape[LU_MAXD], st[LU_ITER_MAX_OPS][LU_MAXD];
  memcpy(shape, full->shape, sizeof(int64_t) * (size_t)nd);
  if (grad) { /* dx = 0 first */
    char *b0 = lu_data(c->out[0]);
    lu_byte_strides(c->out[0], nd, full->shape, st[0]);
    lu_foreach_row(nd, shape, 1, &b0, (const int64_t(*)[LU_MAXD])st, PAR_GRAIN, true, zero_row,
                   &k.es);
  }
  shape[ax] = 1;
  char *base[3] = {lu_data(grad ? full : r), lu_data(grad ? r : full), lu_data(idx)};
  strides_at(grad ? full : r, nd, ax, st[0]);
  strides_at(grad ? r : full, nd, ax, st[1]);
  strides_at(idx, nd, ax, st[2]);
  lu_foreach_row(nd, shape, 3, base, (const int64_t(*)[LU_MAXD])st, PAR_GRAIN, true, pick_row, &k);
  return LUON_OK;
}

luon_status lu_cpu_pick(lu_call *c) { return pick_run(c, false); }

/* dy, index -> dx of shape i[LU_NI_pick..ni): zeros with dy at the picked places */
luon_status lu_shape_pick_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0], *idx = c->in[1];
  const luon_attrs *a = c->attrs;
  const int64_t *shape = a->i + LU_NI_pick;
  int nd = a->ni - LU_NI_pick, ax;
  if (nd < 1 || nd > LU_MAXD)
    return lu_error(LUON_EINVAL, "pick_grad: attrs must hold axis, keepdims, mode and the shape "
                    "of x (1 to %d dims), got %d ints", LU_MAXD, a->ni);
  for (int d = 0; d < nd; d++)
    if (shape[d] < 0)
      return lu_error(LUON_ESHAPE, "pick_grad: negative dimension in shape %s", lu_shape_str(nd, shape));
  LU_TRY(pick_check("pick_grad", nd, shape, dy, "dy", dy, "dy", idx, a, &ax));
  c->out_ndim[0] = nd;
  memcpy(c->out_shape[0], shape, sizeof(int64_t) * (size_t)nd);
  c->out_dtype[0] = dy->dtype;
  return LUON_OK;
}

luon_status lu_cpu_pick_grad(lu_call *c) { return pick_run(c, true); }

/* dx = pick_grad(dy, index) with x's shape; the index gets no gradient */
luon_status lu_grad_pick(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  const luon_tensor *x = g->in[0];
  luon_attrs a = *g->attrs;
  if (a.ni < LU_NI_pick) memset(a.i + a.ni, 0, sizeof(int64_t) * (size_t)(LU_NI_pick - a.ni));
  a.ni = LU_NI_pick + x->ndim;
  memcpy(a.i + LU_NI_pick, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return lu_run(LU_OP_pick_grad, &a, &g->din[0], 2, g->dout[0], g->in[1]);
}
