/* conv_maxpool.c: conv2d_maxpool, a convolution (as conv2d, with its fused
 * relu) followed by max pooling, in one pass on the CPU, and its gradient
 * conv2d_maxpool_grad, which gives dx, dw and db at once from dy and the
 * saved window indices. The convolution's geometry and per-sample kernels
 * are conv.c's (conv_internal.h); the pooling's windows are pool.c's.
 *
 * Each thread takes whole samples: the sample's convolution goes to a buffer
 * of the thread's that stays in cache, is pooled from there with the window
 * index of each maximum, and is never written to memory; the backward
 * scatters dy through those indices into the same kind of buffer and runs
 * the convolution's per-sample gradients on it. The relu's mask, the bias
 * gradient and max_pool2d_grad's search all fold into the scatter.
 *
 * Beside that general path (conv.c's per-sample kernels, then pool or
 * scatter), three shape-specific ones, each named for what it takes:
 *   channels_last_   the forward for 16, 32 or 64k output channels and at
 *                    most 256 taps, with no im2col and no GEMM;
 *   sparse_          the backward for 8 or more channels per group, only
 *                    through the conv outputs that won a window;
 *   few_channels_    the weight gradient of a first layer (at most 4
 *                    input channels, no dx). */
#include "conv_internal.h"
#include <stdlib.h>

/* The convolution's geometry from x, w[, b] and the pool's from its slots,
 * which are max_pool2d's first ones in the same order (lu_pool_win_make). */
_Static_assert(LU_CMP_CEIL - LU_CMP_KERNEL_H == LU_POOL_CEIL - LU_POOL_KERNEL_H && LU_POOL_KERNEL_H == 0,
               "conv2d_maxpool's pool slots follow max_pool2d's order");
static luon_status convpool_geom(const lu_call *c, luon_tensor *const *xwb, int nin, geom *g, lu_pool_win *pw) {
  const char *op = lu_ops[c->op].name;
  lu_call cc = *c;
  cc.in = xwb, cc.nin = nin;
  LU_TRY(lu_conv_geom(&cc, g));
  if (c->attrs->ni <= LU_CMP_CEIL)
    return lu_error(LUON_EINVAL, "%s: needs conv2d's %d attributes and the pool's %d, got %d", op,
                    LU_NI_conv2d, LU_CMP_CEIL + 1 - LU_NI_conv2d, c->attrs->ni);
  LU_TRY(lu_pool_win_make(op, c->attrs->i + LU_CMP_KERNEL_H, g->N, g->O, g->OH, g->OW, pw));
  if (pw->KH * pw->KW > 254)
    return lu_error(LUON_EUNSUPPORTED, "%s: pool windows of at most 254 taps, got (%lld,%lld)", op,
                    (long long)pw->KH, (long long)pw->KW);
  return LUON_OK;
}

/* The INFER and BN slots (0 when absent: graphs written before them) and
 * the convolution's inputs, x, w[, b], ahead of the batch norm's four.
 * INFER is a hint: while autograd records (an inference graph replayed
 * under autograd.record) the indices are kept all the same. */
static bool cmp_infer(const luon_attrs *a) { return a->ni > LU_CMP_INFER && a->i[LU_CMP_INFER]; }
static bool cmp_bn(const luon_attrs *a) { return a->ni > LU_CMP_BN && a->i[LU_CMP_BN]; }
static int conv_nin(const lu_call *c) { return c->nin - (cmp_bn(c->attrs) ? 4 : 0); }

luon_status lu_shape_conv2d_maxpool(lu_call *c) {
  const char *op = "conv2d_maxpool";
  bool infer = cmp_infer(c->attrs), bn = cmp_bn(c->attrs);
  if (bn && c->nin != 6 && c->nin != 7)
    return lu_error(LUON_EINVAL, "%s: with its batch norm (BN 1) it takes x, w[, b], gamma, beta, running_mean "
                    "and running_var, got %d inputs", op, c->nin);
  geom g;
  lu_pool_win pw;
  LU_TRY(convpool_geom(c, c->in, conv_nin(c), &g, &pw));
  if (bn) {
    if (!infer)
      return lu_error(LUON_EINVAL, "%s: BN 1 needs INFER 1: the batch norm in predict mode has no gradient here", op);
    LU_TRY(lu_bn_check_stats(op, g.O, c->in[0]->dtype, c->in + conv_nin(c), c->attrs->f[LU_CMP_BN_EPS]));
  }
  if (bn && luon_autograd_is_recording())
    return lu_error(LUON_EINVAL, "%s: the batch norm (BN 1) has no gradient here, and autograd records; "
                    "call conv2d_maxpool and batch_norm apart", op);
  set_out(c, c->in[0]->dtype, g.N, g.O, pw.OH, pw.OW);
  c->nout = 2;
  c->out_dtype[1] = LUON_DTYPE_U8;
  if (infer && !luon_autograd_is_recording()) { /* idx (0,): the kernel keeps none */
    c->out_ndim[1] = 1;
    c->out_shape[1][0] = 0;
  } else {
    c->out_ndim[1] = 4;
    memcpy(c->out_shape[1], c->out_shape[0], sizeof(int64_t) * 4);
  }
  return LUON_OK;
}

luon_status lu_shape_conv2d_maxpool_grad(lu_call *c) {
  const char *op = "conv2d_maxpool_grad";
  geom g;
  lu_pool_win pw;
  LU_TRY(convpool_geom(c, c->in + 2, 2, &g, &pw));
  if (c->attrs->ni < LU_NI_conv2d_maxpool_grad)
    return lu_error(LUON_EINVAL, "%s: needs conv2d_maxpool's %d attributes plus which gradients, got %d", op,
                    LU_NI_conv2d_maxpool, c->attrs->ni);
  const luon_tensor *dy = c->in[0], *idx = c->in[1];
  int64_t want[4] = {g.N, g.O, pw.OH, pw.OW};
  if (dy->ndim != 4 || memcmp(dy->shape, want, sizeof want) != 0 || idx->ndim != 4 ||
      memcmp(idx->shape, want, sizeof want) != 0)
    return lu_error(LUON_ESHAPE, "%s: the output gradient %s and the indices %s must both be %s", op,
                    lu_shape_str(dy->ndim, dy->shape), lu_shape_str(idx->ndim, idx->shape),
                    lu_shape_str(4, want));
  if (dy->dtype != c->in[2]->dtype || idx->dtype != LUON_DTYPE_U8)
    return lu_error(LUON_EDTYPE, "%s: the output gradient is %s and the indices %s; want %s and uint8", op,
                    luon_dtype_name(dy->dtype), luon_dtype_name(idx->dtype), luon_dtype_name(c->in[2]->dtype));
  int32_t dt = dy->dtype;
  c->nout = 3;
  for (int k = 0; k < 3; k++) c->out_dtype[k] = dt;
  c->out_ndim[0] = c->attrs->i[LU_CMP_GRAD_DX] ? 4 : 1;
  int64_t dx[4] = {g.N, g.C, g.H, g.W}, dw[4] = {g.O, g.Cg, g.KH, g.KW};
  if (c->attrs->i[LU_CMP_GRAD_DX]) memcpy(c->out_shape[0], dx, sizeof dx);
  else c->out_shape[0][0] = 0;
  c->out_ndim[1] = 4;
  memcpy(c->out_shape[1], dw, sizeof dw);
  c->out_ndim[2] = 1;
  c->out_shape[2][0] = c->attrs->i[LU_CMP_GRAD_DB] ? g.O : 0;
  return LUON_OK;
}

typedef struct convpool_job {
  job j;                        /* the convolution: a = x, b = w, bias */
  const lu_pool_win *pw;
  bool direct;                  /* forward through lu_conv_direct_row */
  char *y;                      /* forward: pooled (N,O,PH,PW) */
  uint8_t *idx;                 /* forward: written (NULL: INFER, none); backward: read */
  const double *bn;             /* forward: the batch norm's a, d per channel (BN), else NULL */
  int64_t idx_at;               /* forward, INFER, general path: elements before a chunk's plane of indices */
  const char *dy;               /* backward: (N,O,PH,PW) */
  char *dx, *dw, *db;           /* backward: dx may be NULL */
  char *scratch;
  int64_t per_chunk;            /* elements of scratch per chunk */
  int64_t front;                /* backward: elements before each chunk's dw and db sums */
  char *wt;                     /* backward, sparse: w as (O,KH,KW,Cg); NULL: dense */
  int64_t ring_at;              /* backward, sparse: elements before each chunk's sparse_ring */
  float *wr;                    /* forward, channels-last (channels_last_ok): w as (K,O); NULL: not */
  bool few_channels;            /* backward: few_channels_dw_sample (few_channels_ok) */
  int64_t row_blocks, ch_parts; /* forward, channels-last: bands of pooled rows and parts of the output
                                   channels per sample (chunks per sample: their product) */
  int64_t ch_block;             /* forward, channels-last, the parts: channels_last_block */
} convpool_job;

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: float32 in
 * 16 x 16 tiles transposed in registers (four butterfly stages of two-input
 * shuffles, each swapping the off-diagonal blocks of every 2s x 2s block),
 * the edges element by element. by_dst: the tiles of 16 rows of dst one
 * after another (few streams of stores, when dst is the larger stride);
 * else those of 16 rows of src. */
#define SHUF(b, s, k) ((((k) >> (b)) & 1) ? 16 + ((k) ^ (s)) : (k))
#define SHUF_HI(b, s, k) ((((k) >> (b)) & 1) ? 16 + (k) : ((k) ^ (s)))
#define SHUF16(M, b, s)                                                                                \
  M(b, s, 0), M(b, s, 1), M(b, s, 2), M(b, s, 3), M(b, s, 4), M(b, s, 5), M(b, s, 6), M(b, s, 7),      \
      M(b, s, 8), M(b, s, 9), M(b, s, 10), M(b, s, 11), M(b, s, 12), M(b, s, 13), M(b, s, 14), M(b, s, 15)
#define BUTTERFLY(b, s)                                                                                \
  for (int i = 0; i < 16; i++)                                                                         \
    if (!(i & s)) {                                                                                    \
      v16 a = t[i], c = t[i | s];                                                                      \
      t[i] = __builtin_shufflevector(a, c, SHUF16(SHUF, b, s));                                        \
      t[i | s] = __builtin_shufflevector(a, c, SHUF16(SHUF_HI, b, s));                                 \
    }
#define GEN_TRANSPOSE(NAME, DT, STORE, CAST)                                                            \
  static TC void NAME(const float *src, int64_t rows, int64_t cols, int64_t lds, DT *dst, int64_t ldd, \
                      bool by_dst) {                                                                   \
    int64_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;                                                \
    for (int64_t a = 0; a < (by_dst ? c16 : r16); a += 16)                                             \
      for (int64_t b = 0; b < (by_dst ? r16 : c16); b += 16) {                                         \
        int64_t r0 = by_dst ? b : a, c0 = by_dst ? a : b;                                              \
        v16 t[16];                                                                                     \
        for (int i = 0; i < 16; i++) memcpy(&t[i], src + (r0 + i) * lds + c0, sizeof t[i]);            \
        BUTTERFLY(0, 1) BUTTERFLY(1, 2) BUTTERFLY(2, 4) BUTTERFLY(3, 8)                                \
        for (int i = 0; i < 16; i++) STORE(dst + (c0 + i) * ldd + r0, t[i]);                           \
      }                                                                                                \
    for (int64_t r = 0; r < rows; r++)                                                                 \
      for (int64_t c = r < r16 ? c16 : 0; c < cols; c++) dst[c * ldd + r] = CAST(src + r * lds + c);  \
  }
#define STORE_F32(d, v) memcpy((d), &(v), sizeof(v16))
#define CAST_F32(p) (*(p))
#define STORE_U8(d, v)                                                                                 \
  do {                                                                                                 \
    /* the mask lets gcc 12 narrow with vpmovdb; without it, byte by byte */                           \
    vu8 b_ = __builtin_convertvector((vi16)(v) & 255, vu8);                                            \
    memcpy((d), &b_, sizeof b_);                                                                       \
  } while (0)
#define CAST_U8(p) ((uint8_t)*(const int32_t *)(const void *)(p))
typedef uint8_t vu8 __attribute__((vector_size(16)));
/* dst = src transposed */
GEN_TRANSPOSE(transpose_f32, float, STORE_F32, CAST_F32)
/* dst = src transposed, src int32 values (as floats' bits) narrowed to uint8 */
GEN_TRANSPOSE(transpose_i32_u8, uint8_t, STORE_U8, CAST_U8)
#undef STORE_F32
#undef CAST_F32
#undef STORE_U8
#undef CAST_U8
#undef GEN_TRANSPOSE
#undef BUTTERFLY
#undef SHUF16
#undef SHUF_HI
#undef SHUF

static void transpose_f64(const double *src, int64_t rows, int64_t cols, int64_t lds, double *dst,
                          int64_t ldd, bool by_dst) {
  for (int64_t c = 0; c < cols; c++)
    for (int64_t r = 0; r < rows; r++) dst[c * ldd + r] = src[r * lds + c];
}

/* Channels-last forward for 16, 32 or a multiple of 64 output channels and
 * at most 256 taps (K = Cg*KH*KW): conv-output rows are made as needed into
 * a ring of pool KH rows of (OW, O), each position's channels summed over
 * the K taps in registers, 16*OB channels and P positions at a time (the
 * input value broadcast from its NCHW row, the tap's weights loaded once
 * for the P). Each pooled row is then taken from the ring with the channels
 * in registers (the first maximum in row-major order, as
 * lu_maxpool_argmax_plane), bias and relu applied after the max, kept
 * channels-last for the whole sample and then transposed into the NCHW
 * planes. No im2col and no GEMM packing. Conv padding and groups, pool
 * padding and windows that run past the conv output take the general path,
 * and so do CPUs without AVX-512 (its 16 x P accumulators spill on AVX2).
 * Scratch per chunk: channels_last_scratch() floats. */
static bool channels_last_ok(const geom *g, const lu_pool_win *pl, int32_t dt) {
  return dt == LUON_DTYPE_F32 && g->G == 1 && (g->O == 16 || g->O == 32 || g->O % 64 == 0) && g->K <= 256 &&
         g->ph == 0 && g->pw == 0 && pl->ph == 0 && pl->pw == 0 && pl->KH <= 256 &&
         (pl->OH - 1) * pl->sh + pl->KH <= g->OH && (pl->OW - 1) * pl->sw + pl->KW <= g->OW;
}

/* the ring, then the sample's pooled values and indices (int32), (PH*PW,O)
 * each */
static int64_t channels_last_scratch(const geom *g, const lu_pool_win *pl) {
  return pl->KH * g->OW * g->O + 2 * pl->OH * pl->OW * g->O;
}

/* X(b) for each vector b of the OB */
#define EACH_VEC1(X) X(0)
#define EACH_VEC2(X) X(0) X(1)
#define EACH_VEC4(X) X(0) X(1) X(2) X(3)
#define POOL_FIRST(b)                                                                                  \
  v16 v##b, best##b;                                                                                   \
  vi16 arg##b = {0};                                                                                   \
  memcpy(&best##b, r + 16 * b, sizeof(v16));
#define POOL_STEP(b)                                                                                   \
  {                                                                                                    \
    memcpy(&v##b, r + 16 * b, sizeof(v16));                                                            \
    vi16 gt = v##b > best##b; /* > alone: a window starting from NaN is mended after (nan_mend) */    \
    best##b = (v16)(((vi16)v##b & gt) | ((vi16)best##b & ~gt));                                        \
    if (idx_on) arg##b = (kv & gt) | (arg##b & ~gt);                                                   \
  }
#define POOL_OUT(b)                                                                                    \
  {                                                                                                    \
    v16 m = best##b + bv[b];                                                                           \
    if (g->relu) { /* not above 0: no gradient (255); 0 at most 0, NaN kept (as relu) */              \
      vi16 on = m > 0, le = m <= 0; /* selects on one compare each: gcc 12 vectorises those */        \
      m = (v16)(((vi16)m & ~le) | ((vi16){0} & le));                                                   \
      if (idx_on) arg##b = (arg##b & on) | (((vi16){0} + 255) & ~on);                                  \
    }                                                                                                  \
    memcpy(prow + (i * PW + j) * O + ob + 16 * b, &m, sizeof m);                                       \
    if (idx_on) memcpy(pidx + (i * PW + j) * O + ob + 16 * b, &arg##b, sizeof arg##b);                 \
    nan += m - m;                                                                                      \
  }

/* Max pooling skips NaN (LU_POOL_TAKES). The kernels here compare with >
 * alone, which differs only where a window's first value is NaN: that
 * leaves NaN in the pooled row (any_nan16 finds it). nan_mend recomputes
 * the NaN outputs of pooled row i, channels [o0, o1), by the rule: value
 * (bias and relu after, as POOL_OUT) and window index (idx: NULL, none),
 * the first where a NaN bias made the window all NaN, as apart. */
static void nan_mend(const geom *g, const lu_pool_win *pl, const float *const *rows, const float *bias,
                     int64_t i, int64_t o0, int64_t o1, float *prow, int32_t *idx) {
  const int64_t O = g->O, PW = pl->OW;
  for (int64_t j = 0; j < PW; j++)
    for (int64_t c = o0; c < o1; c++) {
      float *y = prow + (i * PW + j) * O + c;
      if (*y == *y) continue;
      float best = rows[0][j * pl->sw * O + c];
      int32_t k = 0;
      for (int64_t p = 0; p < pl->KH; p++)
        for (int64_t q = 0; q < pl->KW; q++) {
          float v = rows[p][(j * pl->sw + q) * O + c];
          if (LU_POOL_TAKES(v, best)) best = v, k = (int32_t)(p * pl->KW + q);
        }
      float m = best + (bias ? bias[c] : 0.0f);
      if (m != m) k = 0; /* a NaN bias: conv2d then max_pool2d saw a window of NaN alone */
      bool off = g->relu && !(m > 0);
      *y = g->relu && m <= 0 ? 0.0f : m;
      if (idx) idx[(i * PW + j) * O + c] = off ? 255 : k;
    }
}

/* any NaN among v's lanes */
static inline __attribute__((always_inline)) bool any_nan16(v16 v) {
  float lanes[16];
  memcpy(lanes, &v, sizeof lanes);
  return lu_any_nan_f32(lanes, 16);
}

#define GEN_CHANNELS_LAST(OB, P)                                                                       \
  /* conv-output row hh into row (OW,O), channels [ob, ob + 16 OB); wr (K,O). Out of line (a clone     \
   * is called, never inlined): inlined into the pooling, gcc spilled an accumulator */                \
  static TC void channels_last_row_##OB(const geom *g, const float *xn, const float *wr, int64_t hh,   \
                                        int64_t ob, float *row) {                                      \
    const int64_t W = g->W, K = g->K, sw = g->sw, O = g->O;                                            \
    const float *tap[256]; /* each tap's input row, shifted by its column offset */                    \
    for (int64_t c = 0, t = 0; c < g->Cg; c++)                                                         \
      for (int64_t p = 0; p < g->KH; p++)                                                              \
        for (int64_t q = 0; q < g->KW; q++, t++)                                                       \
          tap[t] = xn + (c * g->H + hh * g->sh + p * g->dh) * W + q * g->dw;                           \
    wr += ob, row += ob;                                                                               \
    for (int64_t ww = 0; ww < g->OW; ww += P) {                                                        \
      /* the last P positions of a row may be fewer: the missing ones repeat the last and are not      \
       * stored (one accumulator chain per position and channel vector would wait on each FMA) */      \
      int64_t n = g->OW - ww < P ? g->OW - ww : P, off[P];                                             \
      _Pragma("GCC unroll 16") for (int k = 0; k < P; k++) off[k] = (ww + (k < n ? k : n - 1)) * sw;   \
      v16 s[P * OB];                                                                                   \
      _Pragma("GCC unroll 16") for (int k = 0; k < P * OB; k++) s[k] = (v16){0};                       \
      for (int64_t t = 0; t < K; t++) {                                                                \
        const float *xr = tap[t], *wt = wr + t * O;                                                    \
        _Pragma("GCC unroll 4") for (int b = 0; b < OB; b++) {                                         \
          v16 wv;                                                                                      \
          memcpy(&wv, wt + 16 * b, sizeof wv);                                                         \
          _Pragma("GCC unroll 16") for (int k = 0; k < P; k++) s[k * OB + b] += xr[off[k]] * wv;       \
        }                                                                                              \
      }                                                                                                \
      for (int64_t k = 0; k < n; k++)                                                                  \
        _Pragma("GCC unroll 4") for (int b = 0; b < OB; b++)                                           \
          memcpy(row + (ww + k) * O + 16 * b, &s[k * OB + b], 64);                                     \
    }                                                                                                  \
  }                                                                                                    \
                                                                                                       \
  /* the pooling; idx_on false (a constant in each caller): no indices, `in` unread */                  \
  static inline __attribute__((always_inline)) void channels_last_pool_##OB(                           \
      const geom *g, const lu_pool_win *pl, const float *xn, const float *wr, const float *bias,       \
      float *yn, uint8_t *in, float *scratch, int64_t i0, int64_t i1, int64_t o0, int64_t o1,          \
      const bool idx_on) {                                                                             \
    const int64_t O = g->O, RB = pl->KH, PW = pl->OW, PP = pl->OH * PW;                                \
    float *ring = scratch, *prow = ring + RB * g->OW * O;                                              \
    int32_t *pidx = (int32_t *)(prow + PP * O);                                                        \
    const float *rows[256];                                                                            \
    int64_t next = 0; /* the next conv-output row to make */                                           \
    for (int64_t i = i0; i < i1; i++) {                                                                \
      v16 nan = {0}; /* NaN where POOL_OUT wrote NaN (or inf) */                                       \
      int64_t h0 = i * pl->sh;                                                                         \
      if (next < h0) next = h0;                                                                        \
      for (; next < h0 + pl->KH; next++)                                                               \
        for (int64_t ob = o0; ob < o1; ob += 16 * OB)                                                  \
          channels_last_row_##OB(g, xn, wr, next, ob, ring + next % RB * g->OW * O);                   \
      for (int64_t p = 0; p < pl->KH; p++) rows[p] = ring + (h0 + p) % RB * g->OW * O;                 \
      for (int64_t ob = o0; ob < o1; ob += 16 * OB) {                                                  \
        v16 bv[OB];                                                                                    \
        for (int b = 0; b < OB; b++) {                                                                 \
          bv[b] = (v16){0};                                                                            \
          if (bias) memcpy(&bv[b], bias + ob + 16 * b, sizeof bv[b]);                                  \
        }                                                                                              \
        for (int64_t j = 0; j < PW; j++) {                                                             \
          int64_t c0 = j * pl->sw * O + ob;                                                            \
          const float *r = rows[0] + c0;                                                               \
          EACH_VEC##OB(POOL_FIRST)                                                                     \
          for (int64_t p = 0, k = 0; p < pl->KH; p++)                                                  \
            for (int64_t q = 0; q < pl->KW; q++, k++) {                                                \
              vi16 kv = (vi16){0} + (int32_t)k;                                                        \
              r = rows[p] + c0 + q * O;                                                                \
              EACH_VEC##OB(POOL_STEP)                                                                  \
            }                                                                                          \
          EACH_VEC##OB(POOL_OUT)                                                                       \
        }                                                                                              \
      }                                                                                                \
      if (any_nan16(nan)) /* a window that starts from NaN (or an inf: x - x) */                       \
        nan_mend(g, pl, rows, bias, i, o0, o1, prow, idx_on ? pidx : NULL);                            \
    }                                                                                                  \
    int64_t r0 = i0 * PW, nr = (i1 - i0) * PW;                                                         \
    transpose_f32(prow + r0 * O + o0, nr, o1 - o0, O, yn + o0 * PP + r0, PP, true);                    \
    if (idx_on)                                                                                        \
      transpose_i32_u8((const float *)(pidx + r0 * O + o0), nr, o1 - o0, O, in + o0 * PP + r0, PP,    \
                       true);                                                                          \
  }                                                                                                    \
  static TC void channels_last_fwd_##OB(const geom *g, const lu_pool_win *pl, const float *xn,         \
                                        const float *wr, const float *bias, float *yn, uint8_t *in,    \
                                        float *scratch, int64_t i0, int64_t i1, int64_t o0,            \
                                        int64_t o1) {                                                  \
    if (in) channels_last_pool_##OB(g, pl, xn, wr, bias, yn, in, scratch, i0, i1, o0, o1, true);       \
    else channels_last_pool_##OB(g, pl, xn, wr, bias, yn, in, scratch, i0, i1, o0, o1, false);         \
  }
GEN_CHANNELS_LAST(1, 8)
GEN_CHANNELS_LAST(2, 8)
GEN_CHANNELS_LAST(4, 4)

/* The output channels each kernel call makes (16, 32 or 64: the kernels of
 * OB 1, 2, 4), for a sample split into `parts` parts of its channels: 64
 * where O allows, else 32 where that divides evenly and 64 does not (64
 * channels in two parts: the 32-channel kernel, nearly as fast), else 0:
 * the channels do not split. */
static int64_t channels_last_block(const geom *g, int64_t parts) {
  int64_t b = g->O == 16 ? 16 : g->O == 32 ? 32 : 64;
  if ((g->O / b) % parts == 0) return b;
  return b == 64 && (g->O / 32) % parts == 0 ? 32 : 0;
}

/* x[n] -> pooled rows [i0, i1) of y[n] (O,PH,PW) and idx[n] (in NULL: no
 * indices), channels part q of `parts` (whole blocks of `block`); wr (K,O);
 * bn: the batch norm's a, d per channel, applied to the part (NULL: none) */
static void channels_last_fwd_sample(const geom *g, const lu_pool_win *pl, const float *xn, const float *wr,
                                     const float *bias, const double *bn, float *yn, uint8_t *in,
                                     float *scratch, int64_t i0, int64_t i1, int64_t block, int64_t q,
                                     int64_t parts) {
  int64_t nb = g->O / block, o0 = nb * q / parts * block, o1 = nb * (q + 1) / parts * block;
  if (block == 16) channels_last_fwd_1(g, pl, xn, wr, bias, yn, in, scratch, i0, i1, o0, o1);
  else if (block == 32) channels_last_fwd_2(g, pl, xn, wr, bias, yn, in, scratch, i0, i1, o0, o1);
  else channels_last_fwd_4(g, pl, xn, wr, bias, yn, in, scratch, i0, i1, o0, o1);
  int64_t PW = pl->OW, PP = pl->OH * PW;
  for (int64_t o = o0; o < o1 && bn; o++)
    lu_bn_apply(LUON_DTYPE_F32, yn + o * PP + i0 * PW, (i1 - i0) * PW, bn[2 * o], bn[2 * o + 1], false);
}

static void convpool_fwd_chunks(void *ctx, int64_t c0, int64_t c1) {
  const convpool_job *m = ctx;
  const job *j = &m->j;
  const geom *g = j->g;
  int64_t es = j->es, PP = m->pw->OH * m->pw->OW;
  for (int64_t ch = c0; ch < c1; ch++) {
    char *buf = m->scratch + ch * m->per_chunk * es, *col = buf + g->O * g->P * es;
    char *pool = col + j->colsz * es;
    if (m->row_blocks * m->ch_parts > 1) { /* fewer samples than threads: a part of one sample */
      int64_t per = m->row_blocks * m->ch_parts, n = ch / per, b = ch % per / m->ch_parts, q = ch % m->ch_parts;
      int64_t OH = m->pw->OH;
      channels_last_fwd_sample(g, m->pw, (const float *)j->a + n * g->C * g->H * g->W, m->wr,
                               (const float *)j->bias, m->bn, (float *)m->y + n * g->O * PP,
                               m->idx ? m->idx + n * g->O * PP : NULL, (float *)buf, OH * b / m->row_blocks,
                               OH * (b + 1) / m->row_blocks, m->ch_block, q, m->ch_parts);
      continue;
    }
    int64_t n0, n1;
    sample_range(j, ch, &n0, &n1);
    for (int64_t n = n0; n < n1 && !lu_interrupted(); n++) {
      if (m->wr) {
        channels_last_fwd_sample(g, m->pw, (const float *)j->a + n * g->C * g->H * g->W, m->wr,
                                 (const float *)j->bias, m->bn, (float *)m->y + n * g->O * PP,
                                 m->idx ? m->idx + n * g->O * PP : NULL, (float *)buf, 0, m->pw->OH,
                                 channels_last_block(g, 1), 0, 1);
        continue;
      }
      if (m->direct)
        for (int64_t i = 0; i < g->OH; i++) lu_conv_direct_row(j, n, i, (float *)buf);
      else
        lu_conv_fwd_sample(j, j->a + n * g->C * g->H * g->W * es, col, buf, true);
      /* max(conv + b) = max(conv) + b, and relu commutes with max: both after pooling
       * (the direct kernel has added them already) */
      for (int64_t o = 0; o < g->O; o++) {
        char *yp = m->y + (n * g->O + o) * PP * es;
        lu_maxpool_argmax_plane(m->pw, j->dt, buf + o * g->P * es, m->direct || !j->bias ? 0 : ld(j->bias, j->dt, o),
                                yp, m->idx ? m->idx + (n * g->O + o) * PP : (uint8_t *)buf + m->idx_at * es,
                                g->relu, pool);
        if (m->bn) lu_bn_apply(j->dt, yp, PP, m->bn[2 * o], m->bn[2 * o + 1], false);
      }
    }
  }
}

/* dyc (O,OH,OW) += dy (O,PH,PW) at each window's maximum; db += dy there.
 * off[k]: window index k's offset in the plane from the window's corner. */
#define GEN_SCATTER(T, S)                                                                       \
  static void scatter_##S(const geom *g, const lu_pool_win *pw, const int64_t *off, const T *dy,  \
                          const uint8_t *idx, T *dyc, T *db) {                                   \
    for (int64_t o = 0; o < g->O; o++) {                                                        \
      T *plane = dyc + o * g->P, sum = 0;                                                       \
      for (int64_t i = 0; i < pw->OH; i++) {                                                    \
        T *row = plane + (i * pw->sh - pw->ph) * g->OW - pw->pw;                                \
        for (int64_t jj = 0; jj < pw->OW; jj++, dy++, idx++) {                                  \
          if (*idx == 255) continue;                                                            \
          row[jj * pw->sw + off[*idx]] += *dy;                                                  \
          sum += *dy;                                                                           \
        }                                                                                       \
      }                                                                                         \
      db[o] += sum;                                                                             \
    }                                                                                           \
  }
GEN_SCATTER(float, f32)
GEN_SCATTER(double, f64)

/* The weight gradient of a few-channel layer (a network's first: C <= 4,
 * one group, no dx wanted), sparse: for each channel o, the winning conv
 * outputs are listed (v and where their patch starts), then each adds v
 * times its patch, KH rows of KW pixels x 4 channel lanes, to KH register
 * sums. xt is x[n] channels-last with the channels padded to 4, zero-padded
 * by the conv's padding, with 4 more pixels per row so that a row's 16
 * lanes never read past the end; the lanes past KW x 4 sum whatever follows
 * and are dropped. The padding and the fourth lane stay zero from one
 * sample to the next (the chunk zeroes xt once). The dense way would scatter into an (O, OH, OW) dy and
 * dot all of it, three quarters zeros after a stride-2 pool. */
static bool few_channels_ok(const geom *g, int32_t dt, bool dx) {
  return dt == LUON_DTYPE_F32 && !dx && g->G == 1 && g->C <= 4 && g->dw == 1 && g->KW <= 4 && g->KH <= 4;
}
static int64_t few_channels_row(const geom *g) { return (g->W + 2 * g->pw + 4) * 4; }
static int64_t few_channels_xt(const geom *g) { return (g->H + 2 * g->ph) * few_channels_row(g); }
#define FLOAT_LINES(e) (((e) + 15) / 16 * 16) /* floats, to whole 64-byte lines */

static inline __attribute__((always_inline)) void few_channels_taps(int64_t n, const float *v,
                                                                    const int64_t *off, const float *xt,
                                                                    int64_t rstep, v16 *out, const int KH) {
  v16 s[2][4];
  _Pragma("GCC unroll 4") for (int p = 0; p < KH; p++) s[0][p] = s[1][p] = (v16){0};
  int64_t k = 0;
  for (; k + 1 < n; k += 2) { /* two chains */
    const float *a = xt + off[k], *b = xt + off[k + 1];
    _Pragma("GCC unroll 4") for (int p = 0; p < KH; p++) {
      v16 xa, xb;
      memcpy(&xa, a + p * rstep, sizeof xa);
      memcpy(&xb, b + p * rstep, sizeof xb);
      s[0][p] += v[k] * xa;
      s[1][p] += v[k + 1] * xb;
    }
  }
  if (k < n)
    _Pragma("GCC unroll 4") for (int p = 0; p < KH; p++) {
      v16 xa;
      memcpy(&xa, xt + off[k] + p * rstep, sizeof xa);
      s[0][p] += v[k] * xa;
    }
  _Pragma("GCC unroll 4") for (int p = 0; p < KH; p++) out[p] = s[0][p] + s[1][p];
}

/* A pooled row's winners listed without a branch per window (a dead one,
 * index 255, is written and then overwritten): v, the offset of its taps,
 * at0 + jj * step + off[wi], and where given its ring place, rat[wi] +
 * jj * rstep. Returns how many. */
static inline __attribute__((always_inline)) int64_t list_winners(
    int64_t PW, const float *dr, const uint8_t *ir, int64_t at0, int64_t step, const int64_t *off,
    const int64_t *rat, int64_t rstep, float *restrict vs, int64_t *restrict offs, int64_t *restrict ats) {
  int64_t n = 0;
  for (int64_t jj = 0; jj < PW; jj++) {
    int64_t wi = ir[jj];
    vs[n] = dr[jj], offs[n] = at0 + jj * step + off[wi];
    if (ats) ats[n] = rat[wi] + jj * rstep;
    n += wi != 255;
  }
  return n;
}

/* The sum of v[0..n) 16 lanes at a time (one float sum would wait on each
 * add); v has room for 16 more, which it zeroes. */
static inline __attribute__((always_inline)) float list_sum(float *v, int64_t n) {
  v16 s = {0};
  memset(v + n, 0, sizeof s);
  for (int64_t k = 0; k < n; k += 16) {
    v16 t;
    memcpy(&t, v + k, sizeof t);
    s += t;
  }
  return lu_hsum16(s);
}

/* Fetch a channel's next pooled row of dy and of the window indices while
 * the other channels' rows are summed: one stream per channel and per
 * tensor is more than the hardware prefetchers follow. */
static inline void next_row_prefetch(const float *dr, const uint8_t *ir, int64_t n) {
  for (int64_t k = 0; k < n; k += 16) __builtin_prefetch(dr + k);
  for (int64_t k = 0; k < n; k += 64) __builtin_prefetch(ir + k);
}

/* ps (O, KH, 16 lanes) takes the per-row sums; vs (pool OW + 16) and offs
 * (pool OW) a pooled row's nonzeros. Pooled row by pooled row, so that the
 * input rows under it stay in cache over the channels. */
static TC void few_channels_dw_sample(const geom *g, const lu_pool_win *pl, const int64_t *kr,
                                      const int64_t *kc, const float *xn, const float *dyn, const uint8_t *idx,
                                      float *restrict xt, float *restrict ps, float *restrict vs,
                                      int64_t *restrict offs, float *acc, float *db) {
  const int64_t R = few_channels_row(g), HW = g->H * g->W, H = g->H, W = g->W, C = g->C, O = g->O, KH = g->KH;
  const int64_t PH = pl->OH, PW = pl->OW, rstep = g->dh * R, PP = PH * PW;
  const int64_t rowstep = pl->sh * g->sh * R, colstep = pl->sw * g->sw * 4;
  memset(ps, 0, sizeof(float) * (size_t)(O * KH * 16));
  for (int64_t h = 0; h < H; h++) {
    float *row = xt + (h + g->ph) * R + g->pw * 4;
    for (int64_t c = 0; c < C; c++) {
      const float *src = xn + c * HW + h * W;
      for (int64_t w = 0; w < W; w++) row[w * 4 + c] = src[w];
    }
  }
  int64_t toff[256];
  for (int64_t k = 0; k < 256; k++) toff[k] = 0; /* 255: a dead window, not listed */
  for (int64_t k = 0; k < pl->KH * pl->KW; k++)
    toff[k] = (kr[k] - pl->ph) * g->sh * R + (kc[k] - pl->pw) * g->sw * 4;
  for (int64_t i = 0; i < PH; i++) {
    for (int64_t o = 0; o < O; o++) {
      const float *dr = dyn + o * PP + i * PW;
      const uint8_t *ir = idx + o * PP + i * PW;
      if (i + 1 < PH) next_row_prefetch(dr + PW, ir + PW, PW);
      int64_t n = list_winners(PW, dr, ir, i * rowstep, colstep, toff, NULL, 0, vs, offs, NULL);

      v16 s[4];
      switch (KH) {
      case 1: few_channels_taps(n, vs, offs, xt, rstep, s, 1); break;
      case 2: few_channels_taps(n, vs, offs, xt, rstep, s, 2); break;
      case 3: few_channels_taps(n, vs, offs, xt, rstep, s, 3); break;
      default: few_channels_taps(n, vs, offs, xt, rstep, s, 4); break;
      }
      for (int64_t p = 0; p < KH; p++) {
        v16 a;
        memcpy(&a, ps + (o * KH + p) * 16, sizeof a);
        a += s[p];
        memcpy(ps + (o * KH + p) * 16, &a, sizeof a);
      }
      db[o] += list_sum(vs, n);
    }
  }
  for (int64_t o = 0; o < O; o++) /* acc (O, Cg, KH, KW) */
    for (int64_t p = 0; p < KH; p++)
      for (int64_t q = 0; q < g->KW; q++)
        for (int64_t c = 0; c < C; c++) acc[o * g->K + (c * KH + p) * g->KW + q] += ps[(o * KH + p) * 16 + q * 4 + c];
}

/* The backward through the window indices, sparse: only conv outputs that won
 * a window have a gradient (at most one per pooled output), and each adds v
 * times its taps' input channels to dw and v times the weight's channels to
 * dx. The channels are contiguous in channels-last copies of x[n] and dx[n]
 * and in wt (O,KH,KW,Cg), and the dw sums go to acc (O,KH,KW,Cg): no dense
 * dy, no im2col, no GEMM over the zeros. For Cg >= SPARSE_MIN_CG. */
#define SPARSE_MIN_CG 8

/* float32, 2x2 kernels with Cg = 16 * CG16 channels, in two passes, so that
 * both keep their sums in registers and store each once:
 *  - dw: pooled row by pooled row, so the input rows under it stay in cache;
 *    for each channel o, the row's nonzeros are listed (v and where their
 *    taps start), then summed into 4 taps x Cg registers and added to acc.
 *    Each nonzero's v also goes to dyc, a ring of the conv output's rows
 *    (O x pool KH rows x OW), with its (position, o) bit set in `bits`;
 *  - dx: each conv-output row that no later pooled row reaches: per
 *    position, v times the weight's 4 taps x Cg summed in registers over
 *    the position's set channels, then added to dxt's 4 taps once. Per
 *    nonzero, dxt would take a load, add and store of 4 * CG16 vectors.
 *    The ring starts zeroed (once per chunk) and each sample leaves it so.
 * Nonzeros with a tap outside the input take scalar loops. */
typedef struct sparse_ring {
  float *dyc;     /* (O, pool KH, OW) */
  uint64_t *bits; /* (pool KH, OW, ceil(O/64)) */
  int64_t rows;   /* pool KH */
  float *v;       /* (pool OW + 16): a pooled row's nonzeros */
  int64_t *off;   /* (pool OW): where their taps start in xt */
  int64_t *at;    /* (pool OW): where they go in dyc */
} sparse_ring;

static int64_t ring_bytes(const geom *g, const lu_pool_win *pl) {
  return pl->KH * g->OW * (g->O * (int64_t)sizeof(float) + (g->O + 63) / 64 * (int64_t)sizeof(uint64_t)) +
         pl->OW * (int64_t)(2 * sizeof(int64_t) + sizeof(float)) + 16 * (int64_t)sizeof(float);
}

static bool sparse_reg_ok(const geom *g) { return g->KH * g->KW == 4 && g->Cg % 16 == 0 && g->Cg <= 64; }

static inline void axpy_f32(int64_t n, float v, const float *restrict x, float *restrict y) {
  for (int64_t c = 0; c < n; c++) y[c] += v * x[c];
}

/* dx of conv-output row hh from the ring (see above) */
static inline __attribute__((always_inline)) void ring_row_dx(const geom *g, int64_t hh, const float *wt,
                                                              const sparse_ring *r, int64_t slot, float *dxt,
                                                              const int CG16) {
  const int64_t C = g->C, Cg = g->Cg, O = g->O, MW = (O + 63) / 64, RB = r->rows;
  int64_t ih = hh * g->sh - g->ph;
  for (int64_t ww = 0; ww < g->OW; ww++) {
    float *d = r->dyc + slot * g->OW + ww; /* channel o at d[o * RB * OW] */
    uint64_t *bw = r->bits + (slot * g->OW + ww) * MW;
    int64_t iw = ww * g->sw - g->pw;
    bool inside = ih >= 0 && iw >= 0 && ih + g->dh < g->H && iw + g->dw < g->W;
    for (int64_t gi = 0; gi < g->G; gi++) {
      int64_t o0 = gi * g->Og, o1 = o0 + g->Og;
      v16 a[4 * CG16];
      _Pragma("GCC unroll 16") for (int u = 0; u < 4 * CG16; u++) a[u] = (v16){0};
      bool any = false;
      for (int64_t w = o0 >> 6; w <= (o1 - 1) >> 6; w++) {
        uint64_t m = bw[w];
        if (o0 > w * 64) m &= ~(uint64_t)0 << (o0 - w * 64);
        if (o1 < w * 64 + 64) m &= ((uint64_t)1 << (o1 - w * 64)) - 1;
        any |= m != 0;
        while (m) {
          int64_t o = w * 64 + __builtin_ctzll(m);
          m &= m - 1;
          float v = d[o * RB * g->OW];
          d[o * RB * g->OW] = 0;
          const float *wo = wt + o * g->K;
          _Pragma("GCC unroll 16") for (int u = 0; u < 4 * CG16; u++) {
            v16 wv;
            memcpy(&wv, wo + 16 * u, sizeof wv);
            a[u] += v * wv;
          }
        }
      }
      if (!any) continue;
      for (int t = 0; t < 4; t++) {
        int64_t y = ih + (t >> 1) * g->dh, x = iw + (t & 1) * g->dw;
        float *dp = dxt + gi * Cg + (y * g->W + x) * C;
        if (inside) {
          _Pragma("GCC unroll 4") for (int u = 0; u < CG16; u++) {
            v16 dv;
            memcpy(&dv, dp + 16 * u, sizeof dv);
            dv += a[t * CG16 + u];
            memcpy(dp + 16 * u, &dv, sizeof dv);
          }
        } else if (y >= 0 && y < g->H && x >= 0 && x < g->W) {
          float s[16 * CG16];
          memcpy(s, a + t * CG16, sizeof s);
          for (int64_t c = 0; c < Cg; c++) dp[c] += s[c];
        }
      }
    }
    for (int64_t w = 0; w < MW; w++) bw[w] = 0;
  }
}

/* ao (4 taps x Cg) += the sum over k < n of v[k] times x's 4 taps at
 * xg + off[k] (tap t at t1, t2, t3 from the first): in registers */
static inline __attribute__((always_inline)) void dw_taps(int64_t n, const float *v, const int64_t *off,
                                                          const float *xg, int64_t t1, int64_t t2, int64_t t3,
                                                          float *ao, const int CG16) {
  v16 s[4 * CG16];
  _Pragma("GCC unroll 16") for (int u = 0; u < 4 * CG16; u++) s[u] = (v16){0};
  for (int64_t k = 0; k < n; k++) {
    const float *p = xg + off[k], *q1 = p + t1, *q2 = p + t2, *q3 = p + t3;
    float vk = v[k];
    _Pragma("GCC unroll 4") for (int u = 0; u < CG16; u++) {
      v16 a, b, c, d;
      memcpy(&a, p + 16 * u, sizeof a);
      memcpy(&b, q1 + 16 * u, sizeof b);
      memcpy(&c, q2 + 16 * u, sizeof c);
      memcpy(&d, q3 + 16 * u, sizeof d);
      s[u] += vk * a;
      s[CG16 + u] += vk * b;
      s[2 * CG16 + u] += vk * c;
      s[3 * CG16 + u] += vk * d;
    }
  }
  _Pragma("GCC unroll 16") for (int u = 0; u < 4 * CG16; u++) {
    v16 a;
    memcpy(&a, ao + 16 * u, sizeof a);
    a += s[u];
    memcpy(ao + 16 * u, &a, sizeof a);
  }
}

/* Out of line (a target clone is called, never inlined), one per CG16:
 * inlined into sparse_reg_body, their loops reloaded spilled tap offsets
 * from the stack on every nonzero. */
static TC void dw_taps_out(int64_t n, const float *v, const int64_t *off, const float *xg, int64_t t1,
                           int64_t t2, int64_t t3, float *ao, int CG16) {
  switch (CG16) {
  case 1: dw_taps(n, v, off, xg, t1, t2, t3, ao, 1); break;
  case 2: dw_taps(n, v, off, xg, t1, t2, t3, ao, 2); break;
  case 3: dw_taps(n, v, off, xg, t1, t2, t3, ao, 3); break;
  default: dw_taps(n, v, off, xg, t1, t2, t3, ao, 4); break;
  }
}
static TC void ring_row_dx_out(const geom *g, int64_t hh, const float *wt, const sparse_ring *r,
                               int64_t slot, float *dxt, int CG16) {
  switch (CG16) {
  case 1: ring_row_dx(g, hh, wt, r, slot, dxt, 1); break;
  case 2: ring_row_dx(g, hh, wt, r, slot, dxt, 2); break;
  case 3: ring_row_dx(g, hh, wt, r, slot, dxt, 3); break;
  default: ring_row_dx(g, hh, wt, r, slot, dxt, 4); break;
  }
}

static inline __attribute__((always_inline)) void sparse_reg_body(
    const geom *g, const lu_pool_win *pl, const int64_t *kr, const int64_t *kc, const float *xt, const float *wt,
    const float *dyn, const uint8_t *idx, float *dxt, float *acc, float *db, const sparse_ring *r, const int CG16) {
  const int64_t C = g->C, Cg = g->Cg, O = g->O, Og = g->Og, K = g->K, H = g->H, W = g->W, OH = g->OH;
  const int64_t OW = g->OW, sh = g->sh, sw = g->sw, ph = g->ph, pw = g->pw, dh = g->dh, dw = g->dw;
  const int64_t PH = pl->OH, PW = pl->OW, psh = pl->sh, psw = pl->sw, pph = pl->ph, ppw = pl->pw;
  const int64_t MW = (O + 63) / 64, RB = pl->KH, t1 = dw * C, t2 = dh * W * C, t3 = t1 + t2;
  float *restrict dyc = r->dyc, *restrict vs = r->v;
  uint64_t *restrict bits = r->bits;
  int64_t *restrict offs = r->off;
  int64_t *restrict ats = r->at;
  int64_t rs[256]; /* ring slot of each window row of the pooled row */
  int64_t done = 0; /* conv-output rows below it have gone to dxt */
  /* no conv padding: every winner's taps are inside x, and a window index
   * wi gives its taps' offset from the pooled position's, tof[wi], and its
   * place in the ring, rk[wi] (255, a dead window: not listed) */
  const bool inside = ph == 0 && pw == 0;
  const int64_t colstep = psw * sw * C;
  int64_t tof[256], rk[256];
  for (int k = 0; k < 256; k++) tof[k] = rk[k] = 0;
  for (int64_t k = 0; k < pl->KH * pl->KW; k++) tof[k] = (kr[k] * sh * W + (kc[k] - ppw) * sw) * C;
  for (int64_t i = 0; i < PH; i++) {
    int64_t h0 = i * psh - pph, rowbase = h0 * sh * W * C;
    for (int64_t k = 0; k < RB; k++) rs[k] = (h0 + k >= 0 ? (h0 + k) % RB : 0) * OW;
    for (int64_t k = 0; k < pl->KH * pl->KW; k++) rk[k] = rs[kr[k]] + kc[k] - ppw;
    for (int64_t o = 0; o < O; o++) {
      int64_t at0 = (o * PH + i) * PW, ob = o >> 6, n = 0;
      const float *xg = xt + o / Og * Cg, *dr = dyn + at0;
      const uint8_t *ir = idx + at0;
      float *ao = acc + o * K, *dyo = dyc + o * RB * OW, sum = 0;
      uint64_t bit = (uint64_t)1 << (o & 63);
      if (inside) { /* no branch per window */
        n = list_winners(PW, dr, ir, rowbase, colstep, tof, rk, psw, vs, offs, ats);
        sum = list_sum(vs, n);
        if (dxt)
          for (int64_t k = 0; k < n; k++) {
            dyo[ats[k]] += vs[k];
            bits[ats[k] * MW + ob] |= bit;
          }
        dw_taps_out(n, vs, offs, xg, t1, t2, t3, ao, CG16);
        db[o] += sum;
        continue;
      }
      for (int64_t jj = 0; jj < PW; jj++) {
        int64_t wi = ir[jj];
        if (wi == 255) continue;
        float v = dr[jj];
        int64_t hh = h0 + kr[wi], ww = jj * psw - ppw + kc[wi];
        int64_t ih = hh * sh - ph, iw = ww * sw - pw;
        sum += v;
        if (dxt) {
          int64_t at = rs[kr[wi]] + ww;
          dyo[at] += v;
          bits[at * MW + ob] |= bit;
        }
        if (ih >= 0 && iw >= 0 && ih + dh < H && iw + dw < W) {
          vs[n] = v, offs[n++] = (ih * W + iw) * C;
          continue;
        }
        for (int t = 0; t < 4; t++) {
          int64_t y = ih + (t >> 1) * dh, x = iw + (t & 1) * dw;
          if (y >= 0 && y < H && x >= 0 && x < W) axpy_f32(Cg, v, xg + (y * W + x) * C, ao + t * Cg);
        }
      }
      dw_taps_out(n, vs, offs, xg, t1, t2, t3, ao, CG16);
      db[o] += sum;
    }
    if (!dxt) continue;
    int64_t lim = i + 1 < PH ? (i + 1) * psh - pph : OH;
    for (; done < lim && done < OH; done++) ring_row_dx_out(g, done, wt, r, done % RB, dxt, CG16);
  }
}

/* false when the geometry is not one sparse_reg_body takes */
static TC bool sparse_reg_f32(const geom *g, const lu_pool_win *pl, const int64_t *kr, const int64_t *kc,
                              const float *xt, const float *wt, const float *dyn, const uint8_t *idx,
                              float *dxt, float *acc, float *db, const sparse_ring *r) {
  if (!sparse_reg_ok(g)) return false;
  switch (g->Cg / 16) {
  case 1: sparse_reg_body(g, pl, kr, kc, xt, wt, dyn, idx, dxt, acc, db, r, 1); break;
  case 2: sparse_reg_body(g, pl, kr, kc, xt, wt, dyn, idx, dxt, acc, db, r, 2); break;
  case 3: sparse_reg_body(g, pl, kr, kc, xt, wt, dyn, idx, dxt, acc, db, r, 3); break;
  default: sparse_reg_body(g, pl, kr, kc, xt, wt, dyn, idx, dxt, acc, db, r, 4); break;
  }
  return true;
}

#define GEN_SPARSE(T, S, REG)                                                                    \
  static TC void sparse_sample_##S(const geom *g, const lu_pool_win *pl, const int64_t *kr,       \
                                   const int64_t *kc, const T *xn, const T *wt, const T *dyn,    \
                                   const uint8_t *idx, T *xt, T *dxt, T *a4, T *acc, T *db,      \
                                   const sparse_ring *r, T *dxn) {                               \
    int64_t HW = g->H * g->W, C = g->C, Cg = g->Cg;                                              \
    transpose_##S(xn, C, HW, HW, xt, C, false);                                                          \
    if (dxn) memset(dxt, 0, sizeof(T) * (size_t)(HW * C));                                       \
    if (!REG(g, pl, kr, kc, xt, wt, dyn, idx, dxn ? dxt : NULL, acc, db, r))                      \
    for (int64_t o = 0; o < g->O; o++) {                                                         \
      int64_t gi = o / g->Og;                                                                    \
      const T *xg = xt + gi * Cg, *wo = wt + o * g->K;                                           \
      T sum = 0;                                                                                 \
      int64_t nz = 0;                                                                            \
      memset(a4, 0, sizeof(T) * (size_t)(4 * g->K));                                             \
      for (int64_t i = 0; i < pl->OH; i++)                                                       \
        for (int64_t jj = 0; jj < pl->OW; jj++, dyn++, idx++) {                                  \
          if (*idx == 255) continue;                                                             \
          T v = *dyn;                                                                            \
          int64_t hh = i * pl->sh - pl->ph + kr[*idx], ww = jj * pl->sw - pl->pw + kc[*idx];     \
          T *ao = a4 + (nz++ & 3) * g->K; /* four sums in turn: no chain through memory */       \
          sum += v;                                                                              \
          for (int64_t p = 0; p < g->KH; p++) {                                                  \
            int64_t ih = hh * g->sh - g->ph + p * g->dh;                                         \
            if (ih < 0 || ih >= g->H) continue;                                                  \
            for (int64_t q = 0; q < g->KW; q++) {                                                \
              int64_t iw = ww * g->sw - g->pw + q * g->dw;                                       \
              if (iw < 0 || iw >= g->W) continue;                                                \
              int64_t at = (ih * g->W + iw) * C, t = (p * g->KW + q) * Cg;                       \
              axpy_##S(Cg, v, xg + at, ao + t);                                                  \
              if (dxn) axpy_##S(Cg, v, wo + t, dxt + gi * Cg + at);                              \
            }                                                                                    \
          }                                                                                      \
        }                                                                                        \
      for (int64_t k = 0; k < g->K; k++)                                                         \
        acc[o * g->K + k] += (a4[k] + a4[g->K + k]) + (a4[2 * g->K + k] + a4[3 * g->K + k]);     \
      db[o] += sum;                                                                              \
    }                                                                                            \
    if (dxn) transpose_##S(dxt, HW, C, C, dxn, HW, false);                                              \
  }
GEN_SPARSE(float, f32, sparse_reg_f32)
static inline void axpy_f64(int64_t n, double v, const double *restrict x, double *restrict y) {
  for (int64_t c = 0; c < n; c++) y[c] += v * x[c];
}
static bool no_reg(const geom *g, const lu_pool_win *pl, const int64_t *kr, const int64_t *kc, const double *xt,
                   const double *wt, const double *dyn, const uint8_t *idx, double *dxt, double *acc, double *db,
                   const sparse_ring *r) {
  return false;
}
GEN_SPARSE(double, f64, no_reg)

/* per chunk: dyc (O,P) and col (colsz), or (sparse) xt and dxt (H*W*C
 * each) and four dw sums (4K); then dw (O,K) and db (O) partial sums */
static void convpool_bwd_chunks(void *ctx, int64_t c0, int64_t c1) {
  const convpool_job *m = ctx;
  const job *j = &m->j;
  const geom *g = j->g;
  int64_t es = j->es, PP = m->pw->OH * m->pw->OW, off[254], kr[254], kc[254];
  for (int64_t k = 0; k < m->pw->KH * m->pw->KW; k++) {
    kr[k] = k / m->pw->KW, kc[k] = k % m->pw->KW;
    off[k] = kr[k] * g->OW + kc[k];
  }
  for (int64_t ch = c0; ch < c1; ch++) {
    char *front = m->scratch + ch * m->per_chunk * es;
    char *acc = front + m->front * es, *db = acc + g->O * g->K * es;
    memset(acc, 0, (size_t)((g->O * g->K + g->O) * es));
    /* the sparse ring, zeroed once: each sample leaves it zeroed */
    sparse_ring r;
    int64_t MW = (g->O + 63) / 64;
    r.bits = (uint64_t *)(front + m->ring_at * es);
    r.dyc = (float *)(r.bits + m->pw->KH * g->OW * MW);
    r.rows = m->pw->KH;
    r.off = (int64_t *)(r.dyc + m->pw->KH * g->OW * g->O);
    r.at = r.off + m->pw->OW;
    r.v = (float *)(r.at + m->pw->OW);
    if (m->wt) {
      memset(r.bits, 0, sizeof(uint64_t) * (size_t)(m->pw->KH * g->OW * MW));
      memset(r.dyc, 0, sizeof(float) * (size_t)(m->pw->KH * g->OW * g->O));
    }
    /* few_channels_dw_sample's xt, zeroed once: each sample writes the same places */
    if (m->few_channels) memset(front, 0, sizeof(float) * (size_t)few_channels_xt(g));
    int64_t n0, n1;
    sample_range(j, ch, &n0, &n1);
    for (int64_t n = n0; n < n1 && !lu_interrupted(); n++) {
      const char *dyn = m->dy + n * g->O * PP * es;
      const uint8_t *in = m->idx + n * g->O * PP;
      const char *xn = j->a + n * g->C * g->H * g->W * es;
      char *dxn = m->dx ? m->dx + n * g->C * g->H * g->W * es : NULL;
      char *dyc = front, *col = dyc + g->O * g->P * es;
      if (m->few_channels) {
        float *xt = (float *)front, *ps = xt + FLOAT_LINES(few_channels_xt(g)), *vs = ps + g->O * g->KH * 16;
        few_channels_dw_sample(g, m->pw, kr, kc, (const float *)xn, (const float *)dyn, in, xt, ps, vs,
                      (int64_t *)(vs + FLOAT_LINES(m->pw->OW + 16)), (float *)acc, (float *)db);
        continue;
      }
      if (m->wt) {
        char *xt = front, *dxt = xt + g->H * g->W * g->C * es, *a4 = dxt + g->H * g->W * g->C * es;
        if (j->dt == LUON_DTYPE_F32)
          sparse_sample_f32(g, m->pw, kr, kc, (const float *)xn, (const float *)m->wt, (const float *)dyn, in,
                            (float *)xt, (float *)dxt, (float *)a4, (float *)acc, (float *)db, &r, (float *)dxn);
        else
          sparse_sample_f64(g, m->pw, kr, kc, (const double *)xn, (const double *)m->wt, (const double *)dyn,
                            in, (double *)xt, (double *)dxt, (double *)a4, (double *)acc, (double *)db, &r,
                            (double *)dxn);
        continue;
      }
      memset(dyc, 0, (size_t)(g->O * g->P * es));
      if (j->dt == LUON_DTYPE_F32) scatter_f32(g, m->pw, off, (const float *)dyn, in, (float *)dyc, (float *)db);
      else scatter_f64(g, m->pw, off, (const double *)dyn, in, (double *)dyc, (double *)db);
      lu_conv_gw_sample(g, j->dt, xn, dyc, col, 1, acc);
      if (dxn) lu_conv_gin_sample(g, j->dt, j->b, dyc, col, dxn);
    }
  }
}

static luon_status convpool_alloc(const char *op, convpool_job *m, int64_t per_chunk) {
  m->per_chunk = per_chunk;
  m->scratch = lu_scratch_alloc((size_t)(m->j.chunks * per_chunk * m->j.es) + 1);
  if (!m->scratch)
    return lu_error(LUON_ENOMEM, "%s: out of host memory for %lld per-sample buffers of %lld elements", op,
                    (long long)m->j.chunks, (long long)per_chunk);
  return LUON_OK;
}

luon_status lu_cpu_conv2d_maxpool(lu_call *c) {
  geom g;
  lu_pool_win pw;
  lu_call cc = *c; /* the convolution's inputs only (dense packs them) */
  cc.nin = conv_nin(c);
  LU_TRY(convpool_geom(c, c->in, cc.nin, &g, &pw));
  if (c->out[0]->size == 0) return LUON_OK;
  LU_TRY(check_blas("conv2d_maxpool", &g));
  double *bn = NULL;
  if (cmp_bn(c->attrs)) {
    if (!(bn = lu_scratch_alloc(sizeof(double) * 2 * (size_t)g.O)))
      return lu_error(LUON_ENOMEM, "conv2d_maxpool: out of host memory for the batch norm's %lld channels",
                      (long long)g.O);
    for (int64_t o = 0; o < g.O; o++)
      lu_bn_predict_coef(c->in + cc.nin, o, c->attrs->f[LU_CMP_BN_EPS], bn + 2 * o, bn + 2 * o + 1);
  }
  dense d;
  luon_status s = lu_conv_dense_get("conv2d_maxpool", &cc, &d);
  if (s != LUON_OK) {
    lu_scratch_free(bn);
    return s;
  }
  int32_t dt = c->in[0]->dtype;
  int64_t nt = lu_num_threads();
  const char *algo = getenv("LUON_CONV_ALGO");
  convpool_job m = {.j = {&g, dt, luon_dtype_size(dt), g.N < nt ? g.N : nt, d.in[0], d.in[1],
                          cc.nin == 3 ? d.in[2] : NULL, NULL, NULL, NULL, 0},
                    .pw = &pw,
                    .direct = direct_ok(&g, dt) && !(algo && algo[0] == 'g'),
                    .y = lu_data(c->out[0]),
                    .idx = c->out[1]->ndim == 1 ? NULL : lu_data(c->out[1]),
                    .bn = bn};
  /* LUON_CONV_ALGO=c(hannels-last) takes it without AVX-512 too (tests); any other value never */
  bool channels_last = channels_last_ok(&g, &pw, dt) && (algo ? algo[0] == 'c' : lu_cpu_avx512());
  /* Fewer samples than threads: the channels-last path splits each sample
   * into parts of its output channels, whole kernel blocks, where they
   * divide evenly (nothing made twice, the parts equal), else into bands of
   * pooled rows (the conv rows two bands' windows share are made twice);
   * one sample on another path leaves the direct kernel for im2col and a
   * GEMM that lu_sgemm threads (one chunk runs inline, so it may). */
  m.row_blocks = m.ch_parts = 1;
  if (g.N < nt && channels_last) {
    int64_t parts = (nt + g.N - 1) / g.N;
    if ((m.ch_block = channels_last_block(&g, parts)) > 0) {
      m.ch_parts = parts;
    } else {
      m.ch_block = channels_last_block(&g, 1);
      m.row_blocks = parts;
      if (m.row_blocks > pw.OH) m.row_blocks = pw.OH > 0 ? pw.OH : 1;
    }
    m.j.chunks = g.N * m.row_blocks * m.ch_parts;
  } else if (g.N == 1) {
    m.direct = false;
  }
  m.j.colsz = m.direct || pointwise(&g) ? 0 : g.K * g.P;
  int64_t pool = ((int64_t)lu_maxpool_argmax_scratch(&pw) + m.j.es - 1) / m.j.es;
  /* with no indices to keep, the general path writes each plane's to its chunk's scratch, after the pool's */
  m.idx_at = g.O * g.P + m.j.colsz + pool;
  int64_t idx_plane = m.idx ? 0 : (pw.OH * pw.OW + m.j.es - 1) / m.j.es;
  if (channels_last) {
    if (!(m.wr = lu_scratch_alloc(sizeof(float) * (size_t)(g.K * g.O))))
      s = lu_error(LUON_ENOMEM, "conv2d_maxpool: out of host memory for the weight (%lld elements)",
                   (long long)(g.K * g.O));
    else
      transpose_f32((const float *)d.in[1], g.O, g.K, g.K, m.wr, g.O, false);
  }
  if (s == LUON_OK)
    s = convpool_alloc("conv2d_maxpool", &m, m.wr ? channels_last_scratch(&g, &pw) : m.idx_at + idx_plane);
  if (s == LUON_OK) lu_parallel_for(m.j.chunks, 1, convpool_fwd_chunks, &m);
  lu_scratch_free(m.scratch);
  lu_scratch_free(m.wr);
  lu_scratch_free(bn);
  lu_conv_dense_done(&cc, &d);
  return s;
}

luon_status lu_cpu_conv2d_maxpool_grad(lu_call *c) {
  geom g;
  lu_pool_win pw;
  LU_TRY(convpool_geom(c, c->in + 2, 2, &g, &pw));
  if (c->out[1]->size == 0) return LUON_OK;
  LU_TRY(check_blas("conv2d_maxpool_grad", &g));
  dense d;
  LU_TRY(lu_conv_dense_get("conv2d_maxpool_grad", c, &d));
  int32_t dt = c->in[0]->dtype;
  int64_t es = luon_dtype_size(dt), nt = lu_num_threads(), nw = g.O * g.K;
  convpool_job m = {.j = {&g, dt, es, g.N < nt ? g.N : nt, d.in[2], d.in[3], NULL, NULL, NULL, NULL,
                          pointwise(&g) ? 0 : g.K * g.P},
                    .pw = &pw,
                    .idx = (uint8_t *)d.in[1],
                    .dy = d.in[0],
                    .dx = c->attrs->i[LU_CMP_GRAD_DX] ? lu_data(c->out[0]) : NULL,
                    .dw = lu_data(c->out[1]),
                    .db = lu_data(c->out[2])};
  if (m.j.chunks < 1) m.j.chunks = 1;
  int64_t KK = g.KH * g.KW;
  bool sparse = g.Cg >= SPARSE_MIN_CG;
  m.few_channels = !sparse && few_channels_ok(&g, dt, m.dx != NULL);
  if (sparse && !(m.wt = lu_scratch_alloc((size_t)(nw * es)))) {
    lu_conv_dense_done(c, &d);
    return lu_error(LUON_ENOMEM, "conv2d_maxpool_grad: out of host memory for the weight (%lld elements)",
                    (long long)nw);
  }
  /* k = (o, c, pq) of w (O,Cg,KH,KW) is wt's (o, pq, c) in (O,KH,KW,Cg) */
#define WT_INDEX(o, c, pq) (((o) * KK + (pq)) * g.Cg + (c))
  if (sparse)
    for (int64_t o = 0, k = 0; o < g.O; o++)
      for (int64_t ci = 0; ci < g.Cg; ci++)
        for (int64_t pq = 0; pq < KK; pq++, k++)
          memcpy(m.wt + WT_INDEX(o, ci, pq) * es, d.in[3] + k * es, (size_t)es);
  /* sparse: xt, dxt, the four dw sums and the ring; whole 64-byte lines each */
#define LINES(e) (((e) + 63 / es) / (64 / es) * (64 / es))
  m.ring_at = LINES(2 * g.H * g.W * g.C + 4 * g.K);
  m.front = sparse ? m.ring_at + LINES((ring_bytes(&g, &pw) + es - 1) / es)
            : m.few_channels ? FLOAT_LINES(few_channels_xt(&g)) + g.O * g.KH * 16 + FLOAT_LINES(pw.OW + 16) +
                                   FLOAT_LINES(2 * pw.OW)
                             : g.O * g.P + m.j.colsz;
  luon_status s = convpool_alloc("conv2d_maxpool_grad", &m, LINES(m.front + nw + g.O));
#undef LINES
  if (s == LUON_OK) {
    lu_parallel_for(m.j.chunks, 1, convpool_bwd_chunks, &m);
    /* the chunks' partial sums, in chunk order; sparse ones from (O,KH,KW,Cg) */
    for (int64_t o = 0, k = 0; o < g.O; o++)
      for (int64_t ci = 0; ci < g.Cg; ci++)
        for (int64_t pq = 0; pq < KK; pq++, k++) {
          int64_t kt = sparse ? WT_INDEX(o, ci, pq) : k;
          double v = 0;
          for (int64_t ch = 0; ch < m.j.chunks; ch++) v += ld(m.scratch + (ch * m.per_chunk + m.front) * es, dt, kt);
          st(m.dw, dt, k, v);
        }
    for (int64_t o = 0; o < g.O && c->attrs->i[LU_CMP_GRAD_DB]; o++) {
      double v = 0;
      for (int64_t ch = 0; ch < m.j.chunks; ch++) v += ld(m.scratch + (ch * m.per_chunk + m.front) * es, dt, nw + o);
      st(m.db, dt, o, v);
    }
#undef WT_INDEX
  }
  lu_scratch_free(m.scratch);
  lu_scratch_free(m.wt);
  lu_conv_dense_done(c, &d);
  return s;
}

/* y, idx = conv2d_maxpool(x, w[, b]): conv2d_maxpool_grad gives dx, dw and
 * db at once from dy and the saved window indices. */
luon_status lu_grad_conv2d_maxpool(lu_grad_call *gc) {
  if (gc->out[1]->ndim == 1)
    return lu_error(LUON_EINVAL, "conv2d_maxpool: a call that kept no window indices (INFER 1) has no gradient");
  bool has_b = gc->nin == 3;
  if (!gc->dout[0] || !(gc->need[0] || gc->need[1] || (has_b && gc->need[2]))) return LUON_OK;
  luon_attrs a = *gc->attrs;
  a.i[LU_CMP_GRAD_DX] = gc->need[0], a.i[LU_CMP_GRAD_DB] = has_b && gc->need[2];
  a.ni = LU_NI_conv2d_maxpool_grad;
  luon_tensor *in[4] = {gc->dout[0], gc->out[1], gc->in[0], gc->in[1]};
  luon_tensor *out[3] = {NULL, NULL, NULL};
  int32_t nout = 3;
  LU_TRY(luon_op_call(LU_OP_conv2d_maxpool_grad, 4, in, &a, &nout, out));
  for (int k = 0; k < 3; k++) {
    if (k < gc->nin && gc->need[k]) gc->din[k] = out[k];
    else luon_tensor_release(out[k]);
  }
  return LUON_OK;
}
