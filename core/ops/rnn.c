/* rnn.c: MXNet's fused recurrent layers (npx.rnn): RNN (relu, tanh), LSTM
 * and GRU, stacked and bidirectional, forward and backward through time,
 * float32 and float64. Per layer and direction: the input projection of all
 * steps in one GEMM, then per step one GEMM for the recurrent part and one
 * pass over the gates. Not here: dropout between layers (the layers call
 * the op a layer at a time for it), projections, sequence lengths, clipping.
 *   rnn:  h' = act(Wi x + bi + Wh h + bh)
 *   lstm: i, f, g, o = sig, sig, tanh, sig of (Wi x + bi + Wh h + bh)
 *         c' = f c + i g;  h' = o tanh(c')
 *   gru:  r, z = sig(Wi_rz x + bi_rz + Wh_rz h + bh_rz)
 *         n = tanh(Wi_n x + bi_n + r (Wh_n h + bh_n));  h' = (1 - z) n + z h
 * params is MXNet's flat vector: for each layer l, direction d (left, then
 * right): i2h_weight (G*H, in_l), h2h_weight (G*H, H); then for each l, d:
 * i2h_bias (G*H,), h2h_bias (G*H,). G = 1, 4, 3 gates; in_0 = I, else D*H.
 * The reverse direction reads the sequence from its end. */
#include "internal.h"
#include <cblas.h>
#include <math.h>

enum { M_RELU, M_TANH, M_LSTM, M_GRU };
static const char *const mode_names[4] = {"rnn_relu", "rnn_tanh", "lstm", "gru"};

/* The sizes of one call. R: the reserve's columns per step and direction:
 * the gates after their activations (RNN: h itself), then LSTM's c or GRU's
 * Wh_n h + bh_n. The reserve holds, for each (l, d), (T, N, R), then each
 * layer's output (T, N, D*H). */
typedef struct geo {
  int mode, L, D, G;
  int64_t T, N, In, H, R;
  int32_t dt;
  size_t es;
} geo;

static int64_t in_of(const geo *g, int l) { return l ? g->D * g->H : g->In; }

static int64_t weights_count(const geo *g) {
  int64_t n = 0;
  for (int l = 0; l < g->L; l++) n += g->D * g->G * g->H * (in_of(g, l) + g->H);
  return n;
}
static int64_t params_count(const geo *g) { return weights_count(g) + 2 * g->L * g->D * g->G * g->H; }
/* Offsets in elements: (l, d)'s i2h_weight (its h2h_weight follows) and i2h_bias (h2h_bias follows). */
static int64_t w_off(const geo *g, int l, int d) {
  int64_t n = 0;
  for (int k = 0; k < l; k++) n += g->D * g->G * g->H * (in_of(g, k) + g->H);
  return n + d * g->G * g->H * (in_of(g, l) + g->H);
}
static int64_t b_off(const geo *g, int l, int d) { return weights_count(g) + (int64_t)(l * g->D + d) * 2 * g->G * g->H; }
static int64_t gates_off(const geo *g, int l, int d) { return (int64_t)(l * g->D + d) * g->T * g->N * g->R; }
static int64_t outs_off(const geo *g, int l) {
  return (int64_t)g->L * g->D * g->T * g->N * g->R + l * g->T * g->N * g->D * g->H;
}
static int64_t reserve_count(const geo *g) { return outs_off(g, g->L); }

static void geo_of(const luon_attrs *a, const luon_tensor *x, const luon_tensor *h0, geo *g) {
  g->mode = (int)a->i[LU_RNN_MODE];
  g->L = (int)a->i[LU_RNN_LAYERS];
  g->D = a->i[LU_RNN_BIDIR] ? 2 : 1;
  g->G = g->mode == M_LSTM ? 4 : g->mode == M_GRU ? 3 : 1;
  g->T = x->shape[0], g->N = x->shape[1], g->In = x->shape[2];
  g->H = h0->shape[2];
  g->R = g->G * g->H + (g->mode >= M_LSTM ? g->H : 0);
  g->dt = x->dtype;
  g->es = luon_dtype_size(x->dtype);
}

static bool same_shape(const luon_tensor *t, int nd, const int64_t *s) {
  return t->ndim == nd && memcmp(t->shape, s, sizeof(int64_t) * (size_t)nd) == 0;
}

/* The attributes, x (T, N, I), params (P,), h0 and c0 (L*D, N, H), all one
 * float dtype: every user-facing error of both ops. nin: the inputs without
 * the LSTM's, lstm_more: how many more the LSTM takes. */
static luon_status check_rnn(const char *op, const lu_call *c, int nin, int lstm_more, geo *g) {
  const luon_attrs *a = c->attrs;
  int64_t mode = a->i[LU_RNN_MODE], L = a->i[LU_RNN_LAYERS], bidir = a->i[LU_RNN_BIDIR];
  int64_t H = a->i[LU_RNN_HIDDEN];
  if (mode < M_RELU || mode > M_GRU)
    return lu_error(LUON_EINVAL, "%s: mode %lld is not one of 0 rnn_relu, 1 rnn_tanh, 2 lstm, 3 gru", op,
                    (long long)mode);
  if (L < 1 || L > 1024) return lu_error(LUON_EINVAL, "%s: num_layers = %lld must be in 1..1024", op, (long long)L);
  if (bidir != 0 && bidir != 1) return lu_error(LUON_EINVAL, "%s: bidirectional = %lld must be 0 or 1", op, (long long)bidir);
  if (H < 1) return lu_error(LUON_EINVAL, "%s: state_size = %lld must be >= 1", op, (long long)H);
  int want = nin + (mode == M_LSTM ? lstm_more : 0);
  if (c->nin != want)
    return lu_error(LUON_EINVAL, "%s: %s takes %d inputs, got %d", op, mode_names[mode], want, c->nin);
  const luon_tensor *x = c->in[0], *p = c->in[1], *h0 = c->in[2];
  for (int k = 0; k < c->nin; k++) {
    const luon_tensor *t = c->in[k];
    if (t->dtype != LUON_DTYPE_F32 && t->dtype != LUON_DTYPE_F64)
      return lu_error(LUON_EDTYPE, "%s: input %d is %s; only float32 and float64 are supported", op, k + 1,
                      luon_dtype_name(t->dtype));
    if (t->dtype != x->dtype)
      return lu_error(LUON_EDTYPE, "%s: input %d is %s but x is %s; they must match", op, k + 1,
                      luon_dtype_name(t->dtype), luon_dtype_name(x->dtype));
  }
  if (x->ndim != 3 || x->shape[2] < 1)
    return lu_error(LUON_ESHAPE, "%s: x must be (seq_len, batch, input_size) with input_size >= 1, got shape %s",
                    op, lu_shape_str(x->ndim, x->shape));
  int64_t D = bidir ? 2 : 1, hs[3] = {L * D, x->shape[1], H};
  if (!same_shape(h0, 3, hs))
    return lu_error(LUON_ESHAPE, "%s: the state has shape %s; expected %s (layers * directions, batch, "
                    "state_size) for x %s", op, lu_shape_str(h0->ndim, h0->shape), lu_shape_str(3, hs),
                    lu_shape_str(3, x->shape));
  if (mode == M_LSTM && !same_shape(c->in[3], 3, hs))
    return lu_error(LUON_ESHAPE, "%s: the cell state has shape %s; expected %s", op,
                    lu_shape_str(c->in[3]->ndim, c->in[3]->shape), lu_shape_str(3, hs));
  geo_of(a, x, h0, g);
  int64_t P = params_count(g);
  if (p->ndim != 1 || p->shape[0] != P)
    return lu_error(LUON_ESHAPE, "%s: params has shape %s; %s with %lld layer%s, input_size %lld, state_size "
                    "%lld%s needs (%lld,)", op, lu_shape_str(p->ndim, p->shape), mode_names[mode],
                    (long long)L, L == 1 ? "" : "s", (long long)g->In, (long long)H,
                    bidir ? ", bidirectional" : "", (long long)P);
  return LUON_OK;
}

static void set_out(lu_call *c, int k, int nd, const int64_t *s) {
  c->out_ndim[k] = nd;
  memcpy(c->out_shape[k], s, sizeof(int64_t) * (size_t)nd);
  c->out_dtype[k] = c->in[0]->dtype;
}

/* x (T, N, I), params (P,), h0 (L*D, N, H)[, c0] ->
 * y (T, N, D*H), hy (L*D, N, H), cy (L*D, N, H) (LSTM; else (0,)), reserve (S,) */
luon_status lu_shape_rnn(lu_call *c) {
  geo g;
  LU_TRY(check_rnn("rnn", c, 3, 1, &g));
  int64_t ys[3] = {g.T, g.N, g.D * g.H}, zero = 0, S = reserve_count(&g);
  set_out(c, 0, 3, ys);
  set_out(c, 1, 3, c->in[2]->shape);
  if (g.mode == M_LSTM) set_out(c, 2, 3, c->in[2]->shape);
  else set_out(c, 2, 1, &zero);
  set_out(c, 3, 1, &S);
  return LUON_OK;
}

/* ---- kernels' pieces ------------------------------------------------------ */

/* C (m, n; ldc) = op(A) op(B) + beta C in dtype dt; ta/tb: A/B transposed. */
static void mm(int32_t dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
               const void *B, int64_t ldb, double beta, void *Cm, int64_t ldc) {
  if (m == 0 || n == 0) return;
  int TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (dt == LUON_DTYPE_F32)
    lu_sgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0f, A, (int)lda, B, (int)ldb, (float)beta, Cm,
             (int)ldc);
  else
    lu_dgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0, A, (int)lda, B, (int)ldb, beta, Cm, (int)ldc);
}

/* Each of `rows` rows (ld) of C gets the n values of b. */
static void fill_rows(int32_t dt, void *Cm, int64_t rows, int64_t n, int64_t ld, const void *b) {
  size_t es = luon_dtype_size(dt);
  for (int64_t r = 0; r < rows; r++) memcpy((char *)Cm + (size_t)(r * ld) * es, b, (size_t)n * es);
}

/* out (n,) = sum over the rows (m, ld) of A. */
static void col_sums(int32_t dt, const void *A, int64_t m, int64_t n, int64_t ld, void *out) {
  for (int64_t j = 0; j < n; j++) {
    double s = 0;
    if (dt == LUON_DTYPE_F32)
      for (int64_t r = 0; r < m; r++) s += ((const float *)A)[r * ld + j];
    else
      for (int64_t r = 0; r < m; r++) s += ((const double *)A)[r * ld + j];
    if (dt == LUON_DTYPE_F32) ((float *)out)[j] = (float)s;
    else ((double *)out)[j] = s;
  }
}

/* rows (m, n) with leading dimensions: dst (ldd) = src (lds). */
static void copy_rows(size_t es, void *dst, int64_t ldd, const void *src, int64_t lds, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; r++)
    memcpy((char *)dst + (size_t)(r * ldd) * es, (const char *)src + (size_t)(r * lds) * es, (size_t)n * es);
}

/* A dense view of t: its data when contiguous, else a packed scratch copy
 * in *tmp (freed by the caller; NULL with a message when out of memory). */
static const void *dense(const luon_tensor *t, void **tmp) {
  *tmp = NULL;
  if (lu_is_contiguous(t)) return lu_data(t);
  *tmp = lu_scratch_alloc((size_t)t->size * luon_dtype_size(t->dtype) + 1);
  if (*tmp) lu_pack(t, *tmp);
  return *tmp;
}

/* One step's gates for the N rows of a batch, one row at a time. */
typedef struct step {
  const geo *g;
  char *a;            /* (N, R; lda = R): the input projections in, the activated gates out */
  const char *gh;     /* (N, G*H): Wh h + bh */
  const char *hp;     /* (N, H; hld): h before the step */
  const char *cp;     /* (N, H; cld): c before the step (LSTM) */
  char *h;            /* (N, H; hold): h after the step */
  int64_t hld, cld, hold;
  /* backward */
  const char *dy;     /* (N, H; dyld): the gradient of h after the step from above */
  char *dh, *dc;      /* (N, H): the gradients carried from the later step, updated */
  char *dg, *dgh;     /* (N, G*H): gradients of the i2h and h2h projections */
  int64_t dyld;
} step;

static inline double sigm(double v) { return 1 / (1 + exp(-v)); }
static inline float sigmf(float v) { return 1 / (1 + expf(-v)); }

#define STEP_FWD(T, SIG, TANH)                                                 \
  do {                                                                         \
    const geo *g = s->g;                                                       \
    int64_t H = g->H;                                                          \
    for (int64_t n = n0; n < n1; n++) {                                        \
      T *a = (T *)s->a + n * g->R;                                             \
      const T *gh = (const T *)s->gh + n * g->G * H;                           \
      const T *hp = (const T *)s->hp + n * s->hld;                             \
      T *h = (T *)s->h + n * s->hold;                                          \
      if (g->mode == M_LSTM) {                                                 \
        const T *cp = (const T *)s->cp + n * s->cld;                           \
        for (int64_t j = 0; j < H; j++) {                                      \
          T i = SIG(a[j] + gh[j]), f = SIG(a[H + j] + gh[H + j]);              \
          T gg = TANH(a[2 * H + j] + gh[2 * H + j]), o = SIG(a[3 * H + j] + gh[3 * H + j]); \
          T cc = f * cp[j] + i * gg;                                           \
          a[j] = i, a[H + j] = f, a[2 * H + j] = gg, a[3 * H + j] = o, a[4 * H + j] = cc; \
          h[j] = o * TANH(cc);                                                 \
        }                                                                      \
      } else if (g->mode == M_GRU) {                                           \
        for (int64_t j = 0; j < H; j++) {                                      \
          T r = SIG(a[j] + gh[j]), z = SIG(a[H + j] + gh[H + j]);              \
          T hn = gh[2 * H + j], nn = TANH(a[2 * H + j] + r * hn);              \
          a[j] = r, a[H + j] = z, a[2 * H + j] = nn, a[3 * H + j] = hn;        \
          h[j] = ((T)1 - z) * nn + z * hp[j];                                  \
        }                                                                      \
      } else {                                                                 \
        for (int64_t j = 0; j < H; j++) {                                      \
          T v = a[j] + gh[j];                                                  \
          v = g->mode == M_TANH ? TANH(v) : v > 0 ? v : (T)0;                  \
          a[j] = v, h[j] = v;                                                  \
        }                                                                      \
      }                                                                        \
    }                                                                          \
  } while (0)

/* Backward of one step: dht = dy + dh; the gates' gradients before their
 * activations into dg (i2h) and dgh (h2h; differs from dg for GRU's n),
 * dc = the gradient of c before the step, dh = the part of the gradient of
 * h before the step that does not pass through Wh (GRU: dht z; else 0). */
#define STEP_BWD(T, TANH)                                                      \
  do {                                                                         \
    const geo *g = s->g;                                                       \
    int64_t H = g->H, GH = g->G * g->H;                                        \
    for (int64_t n = n0; n < n1; n++) {                                        \
      const T *a = (const T *)s->a + n * g->R;                                 \
      const T *dy = (const T *)s->dy + n * s->dyld;                            \
      T *dh = (T *)s->dh + n * H, *dg = (T *)s->dg + n * GH;                   \
      if (g->mode == M_LSTM) {                                                 \
        const T *cp = (const T *)s->cp + n * s->cld;                           \
        T *dc = (T *)s->dc + n * H;                                            \
        for (int64_t j = 0; j < H; j++) {                                      \
          T i = a[j], f = a[H + j], gg = a[2 * H + j], o = a[3 * H + j];       \
          T tc = TANH(a[4 * H + j]), dht = dy[j] + dh[j];                      \
          T dct = dc[j] + dht * o * ((T)1 - tc * tc);                          \
          dg[j] = dct * gg * i * ((T)1 - i);                                   \
          dg[H + j] = dct * cp[j] * f * ((T)1 - f);                            \
          dg[2 * H + j] = dct * i * ((T)1 - gg * gg);                          \
          dg[3 * H + j] = dht * tc * o * ((T)1 - o);                           \
          dc[j] = dct * f;                                                     \
          dh[j] = 0;                                                           \
        }                                                                      \
      } else if (g->mode == M_GRU) {                                           \
        const T *hp = (const T *)s->hp + n * s->hld;                           \
        T *dgh = (T *)s->dgh + n * GH;                                         \
        for (int64_t j = 0; j < H; j++) {                                      \
          T r = a[j], z = a[H + j], nn = a[2 * H + j], hn = a[3 * H + j];      \
          T dht = dy[j] + dh[j];                                               \
          T dpn = dht * ((T)1 - z) * ((T)1 - nn * nn);                         \
          T dpz = dht * (hp[j] - nn) * z * ((T)1 - z);                         \
          T dpr = dpn * hn * r * ((T)1 - r);                                   \
          dg[j] = dpr, dg[H + j] = dpz, dg[2 * H + j] = dpn;                   \
          dgh[j] = dpr, dgh[H + j] = dpz, dgh[2 * H + j] = dpn * r;            \
          dh[j] = dht * z;                                                     \
        }                                                                      \
      } else {                                                                 \
        for (int64_t j = 0; j < H; j++) {                                      \
          T v = a[j], dht = dy[j] + dh[j];                                     \
          dg[j] = g->mode == M_TANH ? dht * ((T)1 - v * v) : v > 0 ? dht : (T)0; \
          dh[j] = 0;                                                           \
        }                                                                      \
      }                                                                        \
    }                                                                          \
  } while (0)

TC static void step_fwd_f32(step *s, int64_t n0, int64_t n1) { STEP_FWD(float, sigmf, tanhf); }
TC static void step_fwd_f64(step *s, int64_t n0, int64_t n1) { STEP_FWD(double, sigm, tanh); }
TC static void step_bwd_f32(step *s, int64_t n0, int64_t n1) { STEP_BWD(float, tanhf); }
TC static void step_bwd_f64(step *s, int64_t n0, int64_t n1) { STEP_BWD(double, tanh); }

static void step_fwd_range(void *ctx, int64_t n0, int64_t n1) {
  step *s = ctx;
  if (s->g->dt == LUON_DTYPE_F32) step_fwd_f32(s, n0, n1);
  else step_fwd_f64(s, n0, n1);
}
static void step_bwd_range(void *ctx, int64_t n0, int64_t n1) {
  step *s = ctx;
  if (s->g->dt == LUON_DTYPE_F32) step_bwd_f32(s, n0, n1);
  else step_bwd_f64(s, n0, n1);
}

/* Rows of a step per thread: about 16K gate elements. */
static int64_t step_grain(const geo *g) {
  int64_t per = g->G * g->H;
  return per >= 16384 ? 1 : 16384 / per;
}

/* ---- forward ---------------------------------------------------------------- */

/* One layer, one direction: xin (T*N, in) dense -> its half of the layer's
 * output yl (T, N, D*H), the gates in the reserve, the last h and c into
 * hy and cy (N, H; cy NULL unless LSTM). false when stopped. */
static bool layer_fwd(const geo *g, int l, int d, const char *xin, const char *P, const char *h0,
                      const char *c0, char *res, char *gh, char *hy, char *cy) {
  size_t es = g->es;
  int64_t in = in_of(g, l), GH = g->G * g->H, DH = g->D * g->H, N = g->N, H = g->H;
  const char *Wi = P + (size_t)w_off(g, l, d) * es, *Wh = Wi + (size_t)(GH * in) * es;
  const char *bi = P + (size_t)b_off(g, l, d) * es, *bh = bi + (size_t)GH * es;
  char *gates = res + (size_t)gates_off(g, l, d) * es, *yl = res + (size_t)outs_off(g, l) * es;
  /* all steps' input projections at once: gates[:, :, :GH] = xin Wi^T + bi */
  fill_rows(g->dt, gates, g->T * N, GH, g->R, bi);
  mm(g->dt, false, true, g->T * N, GH, in, xin, in, Wi, in, 1, gates, g->R);
  step s = {g, NULL, gh, h0, c0, NULL, H, H, DH, NULL, NULL, NULL, NULL, NULL, 0};
  for (int64_t k = 0; k < g->T; k++) {
    if (lu_interrupted()) return false;
    int64_t t = d ? g->T - 1 - k : k;
    fill_rows(g->dt, gh, N, GH, GH, bh);
    mm(g->dt, false, true, N, GH, H, s.hp, s.hld, Wh, H, 1, gh, GH);
    s.a = gates + (size_t)(t * N * g->R) * es;
    s.h = yl + (size_t)(t * N * DH + d * H) * es;
    lu_parallel_for(N, step_grain(g), step_fwd_range, &s);
    s.hp = s.h, s.hld = DH;
    s.cp = s.a + (size_t)GH * es, s.cld = g->R;
  }
  copy_rows(es, hy, H, s.hp, s.hld, N, H);
  if (cy) copy_rows(es, cy, H, s.cp, s.cld, N, H);
  return true;
}

luon_status lu_cpu_rnn(lu_call *c) {
  geo g;
  geo_of(c->attrs, c->in[0], c->in[2], &g);
  size_t es = g.es;
  int64_t GH = g.G * g.H, NH = g.N * g.H;
  void *t[4] = {NULL, NULL, NULL, NULL};
  const char *x = dense(c->in[0], &t[0]), *P = dense(c->in[1], &t[1]), *h0 = dense(c->in[2], &t[2]);
  const char *c0 = g.mode == M_LSTM ? dense(c->in[3], &t[3]) : NULL;
  char *gh = lu_scratch_alloc((size_t)(g.N * GH) * es + 1);
  char *res = lu_data(c->out[3]), *hy = lu_data(c->out[1]), *cy = g.mode == M_LSTM ? lu_data(c->out[2]) : NULL;
  luon_status s = LUON_OK;
  if (!x || !P || !h0 || (g.mode == M_LSTM && !c0) || !gh) {
    s = lu_error(LUON_ENOMEM, "rnn: out of host memory for scratch");
    goto done;
  }
  for (int l = 0; l < g.L; l++) {
    const char *xin = l ? res + (size_t)outs_off(&g, l - 1) * es : x;
    for (int d = 0; d < g.D; d++) {
      int64_t k = (int64_t)(l * g.D + d) * NH;
      if (!layer_fwd(&g, l, d, xin, P, h0 + (size_t)k * es, c0 ? c0 + (size_t)k * es : NULL, res, gh,
                     hy + (size_t)k * es, cy ? cy + (size_t)k * es : NULL))
        goto done; /* stopped: the dispatcher reports it */
    }
  }
  memcpy(lu_data(c->out[0]), res + (size_t)outs_off(&g, g.L - 1) * es, (size_t)c->out[0]->size * es);
done:
  for (int k = 0; k < 4; k++) lu_scratch_free(t[k]);
  lu_scratch_free(gh);
  return s;
}

/* ---- backward --------------------------------------------------------------- */

/* x, params, h0[, c0], reserve, dy, dhy[, dcy] -> dx, dparams, dh0[, dc0]:
 * rnn's slots; the reserve is the forward's. */
luon_status lu_shape_rnn_grad(lu_call *c) {
  geo g;
  bool lstm = c->attrs->i[LU_RNN_MODE] == M_LSTM;
  LU_TRY(check_rnn("rnn_grad", c, 6, 2, &g));
  /* the inputs after the forward's: check_rnn saw the first ones */
  const luon_tensor *res = c->in[3 + lstm], *dy = c->in[4 + lstm], *dhy = c->in[5 + lstm];
  int64_t S = reserve_count(&g), ys[3] = {g.T, g.N, g.D * g.H};
  if (!same_shape(res, 1, &S))
    return lu_error(LUON_ESHAPE, "rnn_grad: reserve has shape %s; the forward made (%lld,)",
                    lu_shape_str(res->ndim, res->shape), (long long)S);
  if (!same_shape(dy, 3, ys))
    return lu_error(LUON_ESHAPE, "rnn_grad: dy has shape %s; expected %s", lu_shape_str(dy->ndim, dy->shape),
                    lu_shape_str(3, ys));
  if (!same_shape(dhy, 3, c->in[2]->shape) || (lstm && !same_shape(c->in[7], 3, c->in[2]->shape)))
    return lu_error(LUON_ESHAPE, "rnn_grad: the states' gradients must have the states' shape %s",
                    lu_shape_str(3, c->in[2]->shape));
  c->nout = 3 + lstm;
  for (int k = 0; k < c->nout; k++) set_out(c, k, c->in[k]->ndim, c->in[k]->shape);
  return LUON_OK;
}

/* The buffers of the backward, dense, of the call's dtype. */
typedef struct bwd {
  const geo *g;
  const char *x, *P, *h0, *c0, *res, *dy, *dhy, *dcy;
  char *dx, *dP, *dh0, *dc0;
  char *dY[2];        /* (T, N, D*H): a layer's output gradient, the one below's */
  char *dG, *dGh;     /* (T, N, G*H) */
  char *Hp;           /* (T, N, H): h before each step */
  char *dh, *dc;      /* (N, H) */
} bwd;

/* One layer, one direction: from dYl (T, N, D*H), its part of the layer's
 * input gradient dXin (T*N, in; added to when `add`), its parameters'
 * gradients, and dh0, dc0 of (l, d). false when stopped. */
static bool layer_bwd(const bwd *b, int l, int d, const char *xin, const char *dYl, char *dXin, bool add) {
  const geo *g = b->g;
  size_t es = g->es;
  int64_t in = in_of(g, l), H = g->H, GH = g->G * H, DH = g->D * H, N = g->N, TN = g->T * N, NH = N * H;
  int64_t k0 = (int64_t)(l * g->D + d) * NH, wo = w_off(g, l, d), bo = b_off(g, l, d);
  const char *Wi = b->P + (size_t)wo * es, *Wh = Wi + (size_t)(GH * in) * es;
  const char *gates = b->res + (size_t)gates_off(g, l, d) * es, *yl = b->res + (size_t)outs_off(g, l) * es;
  char *dGh = g->mode == M_GRU ? b->dGh : b->dG;
  memcpy(b->dh, b->dhy + (size_t)k0 * es, (size_t)NH * es);
  if (g->mode == M_LSTM) memcpy(b->dc, b->dcy + (size_t)k0 * es, (size_t)NH * es);
  step s = {g, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, NULL, b->dh, b->dc, NULL, NULL, DH};
  for (int64_t k = g->T - 1; k >= 0; k--) {
    if (lu_interrupted()) return false;
    int64_t t = d ? g->T - 1 - k : k, tp = d ? t + 1 : t - 1; /* tp: the step before, in reading order */
    s.a = (char *)gates + (size_t)(t * N * g->R) * es;
    if (k > 0) {
      s.hp = yl + (size_t)(tp * N * DH + d * H) * es, s.hld = DH;
      s.cp = gates + (size_t)(tp * N * g->R + GH) * es, s.cld = g->R;
    } else {
      s.hp = b->h0 + (size_t)k0 * es, s.hld = H;
      s.cp = b->c0 ? b->c0 + (size_t)k0 * es : NULL, s.cld = H;
    }
    copy_rows(es, b->Hp + (size_t)(t * NH) * es, H, s.hp, s.hld, N, H);
    s.dy = dYl + (size_t)(t * N * DH + d * H) * es;
    s.dg = b->dG + (size_t)(t * N * GH) * es;
    s.dgh = dGh + (size_t)(t * N * GH) * es;
    lu_parallel_for(N, step_grain(g), step_bwd_range, &s);
    /* dh = (GRU: dht z) + dgh Wh */
    mm(g->dt, false, false, N, H, GH, s.dgh, GH, Wh, H, g->mode == M_GRU ? 1 : 0, b->dh, H);
  }
  memcpy(b->dh0 + (size_t)k0 * es, b->dh, (size_t)NH * es);
  if (g->mode == M_LSTM) memcpy(b->dc0 + (size_t)k0 * es, b->dc, (size_t)NH * es);
  char *dWi = b->dP + (size_t)wo * es, *dWh = dWi + (size_t)(GH * in) * es;
  char *dbi = b->dP + (size_t)bo * es, *dbh = dbi + (size_t)GH * es;
  mm(g->dt, true, false, GH, in, TN, b->dG, GH, xin, in, 0, dWi, in); /* dWi = dG^T xin */
  mm(g->dt, true, false, GH, H, TN, dGh, GH, b->Hp, H, 0, dWh, H);    /* dWh = dGh^T h_prev */
  col_sums(g->dt, b->dG, TN, GH, GH, dbi);
  col_sums(g->dt, dGh, TN, GH, GH, dbh);
  mm(g->dt, false, false, TN, in, GH, b->dG, GH, Wi, in, add ? 1 : 0, dXin, in); /* dxin += dG Wi */
  return true;
}

luon_status lu_cpu_rnn_grad(lu_call *c) {
  geo g;
  geo_of(c->attrs, c->in[0], c->in[2], &g);
  bool lstm = g.mode == M_LSTM;
  size_t es = g.es;
  int64_t TN = g.T * g.N, GH = g.G * g.H, DH = g.D * g.H;
  void *t[8] = {NULL};
  bwd b;
  memset(&b, 0, sizeof b);
  b.g = &g;
  b.x = dense(c->in[0], &t[0]), b.P = dense(c->in[1], &t[1]), b.h0 = dense(c->in[2], &t[2]);
  b.c0 = lstm ? dense(c->in[3], &t[3]) : NULL;
  b.res = dense(c->in[3 + lstm], &t[4]), b.dy = dense(c->in[4 + lstm], &t[5]);
  b.dhy = dense(c->in[5 + lstm], &t[6]), b.dcy = lstm ? dense(c->in[7], &t[7]) : NULL;
  b.dx = lu_data(c->out[0]), b.dP = lu_data(c->out[1]), b.dh0 = lu_data(c->out[2]);
  b.dc0 = lstm ? lu_data(c->out[3]) : NULL;
  size_t nbuf = (size_t)(2 * TN * DH + 2 * TN * GH + TN * g.H + 2 * g.N * g.H);
  char *buf = lu_scratch_alloc(nbuf * es + 1);
  luon_status s = LUON_OK;
  bool ok = b.x && b.P && b.h0 && b.res && b.dy && b.dhy && (!lstm || (b.c0 && b.dcy)) && buf;
  if (!ok) {
    s = lu_error(LUON_ENOMEM, "rnn_grad: out of host memory for scratch");
    goto done;
  }
  b.dY[0] = buf, b.dY[1] = b.dY[0] + (size_t)(TN * DH) * es;
  b.dG = b.dY[1] + (size_t)(TN * DH) * es, b.dGh = b.dG + (size_t)(TN * GH) * es;
  b.Hp = b.dGh + (size_t)(TN * GH) * es, b.dh = b.Hp + (size_t)(TN * g.H) * es;
  b.dc = b.dh + (size_t)(g.N * g.H) * es;
  if (TN == 0) memset(b.dP, 0, (size_t)c->out[1]->size * es); /* no steps: no products to write them */
  const char *dYl = b.dy;
  for (int l = g.L - 1; l >= 0; l--) {
    const char *xin = l ? b.res + (size_t)outs_off(&g, l - 1) * es : b.x;
    char *dXin = l ? b.dY[l & 1] : b.dx;
    for (int d = 0; d < g.D; d++)
      if (!layer_bwd(&b, l, d, xin, dYl, dXin, d > 0)) goto done; /* stopped */
    dYl = dXin;
  }
done:
  for (int k = 0; k < 8; k++) lu_scratch_free(t[k]);
  lu_scratch_free(buf);
  return s;
}

/* All zeros of t's shape, dtype and device (+1): a state output that got
 * no gradient. */
static luon_status zeros_like(const luon_tensor *t, luon_tensor **out) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  for (int k = 0; k < t->ndim; k++) a.i[LU_FULL_SHAPE + k] = t->shape[k];
  a.ni = LU_FULL_SHAPE + t->ndim;
  a.dtype = t->dtype, a.dev_type = t->dev.type, a.dev_id = t->dev.id;
  return lu_run(LU_OP_full, &a, out, 0);
}

/* dx, dparams, dh0[, dc0] from rnn_grad on the forward's reserve; outputs
 * without a gradient (y, hy, cy) count as zeros, the reserve gets none. */
luon_status lu_grad_rnn(lu_grad_call *g) {
  bool lstm = g->attrs->i[LU_RNN_MODE] == M_LSTM;
  int nd = lstm ? 3 : 2;
  bool any = false;
  for (int k = 0; k < nd; k++) any = any || g->dout[k];
  if (!any) return LUON_OK;
  luon_tensor *z[3] = {NULL, NULL, NULL}, *in[8];
  luon_status s = LUON_OK;
  for (int k = 0; k < nd && s == LUON_OK; k++)
    if (!g->dout[k]) s = zeros_like(g->out[k], &z[k]);
  int n = 0;
  for (int k = 0; k < g->nin; k++) in[n++] = g->in[k];
  in[n++] = g->out[3];
  for (int k = 0; k < nd; k++) in[n++] = g->dout[k] ? g->dout[k] : z[k];
  luon_tensor *out[4] = {NULL, NULL, NULL, NULL};
  int32_t nout = 4;
  if (s == LUON_OK) s = luon_op_call(LU_OP_rnn_grad, n, in, g->attrs, &nout, out);
  for (int k = 0; k < 3; k++) luon_tensor_release(z[k]);
  LU_TRY(s);
  for (int k = 0; k < nout; k++) {
    if (g->need[k]) g->din[k] = out[k];
    else luon_tensor_release(out[k]);
  }
  return LUON_OK;
}
