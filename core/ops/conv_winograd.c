/* conv_winograd.c: float32 3x3 convolutions with stride 1, dilation 1 and
 * one group by Winograd's minimal filtering F(4x4, 3x3) (Lavin and Gray,
 * "Fast Algorithms for Convolutional Neural Networks", 2015): each 4x4 tile
 * of output is A^T [(G g G^T) . (B^T d B)] A from the 6x6 tile d of input
 * it reads, so the products are 36 GEMMs (O,C) x (C,tiles) with 36/144 =
 * 1/4 of the direct method's multiplications. The input gradient is the
 * same convolution of dy with the weights turned 180 degrees and transposed
 * (padding 2 - pad). Work goes in blocks of tile rows (an L2's worth of
 * transformed input and products per thread); the GEMMs are OpenBLAS's.
 * The weight gradient is the adjoint of the same transforms: dU[xi] =
 * dM[xi] (Co,tiles) @ V[xi]^T summed over the tiles, dw = G^T dU G.
 * Rounding: the transforms' constants (up to 8 and 1/24) make float32
 * results differ from the exact ones by up to ~5e-5 of their magnitude,
 * against ~5e-6 for the direct sums (as cuDNN's and oneDNN's Winograd
 * algorithms do); float64 never takes this path. Each output mixes its
 * whole 6x6 input tile: an inf in the input makes NaN of the 4x4 outputs
 * beside it (the direct sums give inf there), and inputs near 1e37
 * overflow. */
#include "conv_internal.h"
#include <stdlib.h>

#define WT 4  /* output tile edge */
#define WA 6  /* input tile edge: WT + 3 - 1 */
#define WX 36 /* WA * WA transformed elements per tile */

/* One Winograd convolution: x (N,Ci,H,W) (*) w -> y (N,Co,OH,OW), OH = H +
 * 2 ph - 2; `flip`: w is (Ci,Co,3,3) read turned and transposed (the input
 * gradient's), else (Co,Ci,3,3). */
typedef struct wino {
  int64_t N, Ci, H, W, Co, OH, OW, ph, pw;
  int64_t th, tw;       /* tiles per column and row of a plane */
  int64_t rows;         /* tile rows per block */
  int64_t blocks, chunks;
  const float *x, *bias;
  float *y, *u, *scratch;
  int64_t per_chunk;    /* scratch floats per chunk */
  bool relu;
  const float *dy;      /* the weight gradient's: dy (N,Co,OH,OW) in, dw (Co,Ci,3,3) out */
  float *dw;
} wino;

/* LUON_CONV_WINOGRAD, read per call as LUON_CONV_ALGO is: 0 never, 1
 * wherever the geometry allows (test_conv compares it with the reference
 * kernels), else where worth() says */
static int mode(void) {
  const char *e = getenv("LUON_CONV_WINOGRAD");
  return e && e[0] == '0' ? 0 : e && e[0] == '1' ? 1 : 2;
}

/* ---- transforms ----------------------------------------------------------------- */

/* U[xi][o][c] = (G g G^T)[xi] for the kernels g of output channels [o0, o1) */
typedef struct wjob {
  const wino *p;
  const float *w;
  bool flip;
} wjob;

#define WCH 256 /* input channels per step of the weight transform */
static TC void weight_range(void *ctx, int64_t o0, int64_t o1) {
  const wjob *j = ctx;
  const wino *p = j->p;
  int64_t Co = p->Co, Ci = p->Ci;
  float g[9][WCH], t[WA][3][WCH];
  for (int64_t o = o0; o < o1; o++)
    for (int64_t c0 = 0; c0 < Ci; c0 += WCH) {
      int64_t n = Ci - c0 < WCH ? Ci - c0 : WCH;
      for (int64_t c = 0; c < n; c++)
        for (int k = 0; k < 9; k++)
          g[k][c] = j->flip ? j->w[((c0 + c) * Co + o) * 9 + 8 - k] : j->w[(o * Ci + c0 + c) * 9 + k];
      for (int b = 0; b < 3; b++) /* t = G g, by columns b of g */
        for (int64_t c = 0; c < n; c++) {
          float g0 = g[b][c], g1 = g[3 + b][c], g2 = g[6 + b][c];
          t[0][b][c] = g0 / 4;
          t[1][b][c] = -(g0 + g1 + g2) / 6;
          t[2][b][c] = -(g0 - g1 + g2) / 6;
          t[3][b][c] = g0 / 24 + g1 / 12 + g2 / 6;
          t[4][b][c] = g0 / 24 - g1 / 12 + g2 / 6;
          t[5][b][c] = g2;
        }
      for (int a = 0; a < WA; a++) { /* U[a*6 + e] = (t G^T)[a][e], each a row of U over c */
        float *u[WA];
        for (int e = 0; e < WA; e++) u[e] = p->u + ((a * WA + e) * Co + o) * Ci + c0;
        for (int64_t c = 0; c < n; c++) {
          float g0 = t[a][0][c], g1 = t[a][1][c], g2 = t[a][2][c];
          u[0][c] = g0 / 4;
          u[1][c] = -(g0 + g1 + g2) / 6;
          u[2][c] = -(g0 - g1 + g2) / 6;
          u[3][c] = g0 / 24 + g1 / 12 + g2 / 6;
          u[4][c] = g0 / 24 - g1 / 12 + g2 / 6;
          u[5][c] = g2;
        }
      }
    }
}

/* B^T applied to six vectors of n lanes: o[i] = sum_j BT[i][j] d[j]. The
 * outputs never overlap the inputs (ivdep: gcc would not vectorise loops
 * through twelve pointers it cannot tell apart). */
static inline __attribute__((always_inline)) void bt6(int64_t n, const float *d0, const float *d1,
                                                      const float *d2, const float *d3, const float *d4,
                                                      const float *d5, float *const o[WA]) {
  float *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3], *o4 = o[4], *o5 = o[5];
#pragma GCC ivdep
  for (int64_t t = 0; t < n; t++) {
    float a0 = d0[t], a1 = d1[t], a2 = d2[t], a3 = d3[t], a4 = d4[t], a5 = d5[t];
    o0[t] = 4 * a0 - 5 * a2 + a4;
    o1[t] = -4 * (a1 + a2) + a3 + a4;
    o2[t] = 4 * (a1 - a2) - a3 + a4;
    o3[t] = -2 * (a1 - a3) - a2 + a4;
    o4[t] = 2 * (a1 - a3) - a2 + a4;
    o5[t] = 4 * a1 - 5 * a3 + a5;
  }
}

/* A^T applied to six vectors of n lanes: o[i] = sum_j AT[i][j] m[j] */
static inline __attribute__((always_inline)) void at6(int64_t n, const float *m0, const float *m1,
                                                      const float *m2, const float *m3, const float *m4,
                                                      const float *m5, float *const o[WT]) {
  float *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3];
#pragma GCC ivdep
  for (int64_t t = 0; t < n; t++) {
    float a1 = m1[t] + m2[t], s1 = m1[t] - m2[t], a3 = m3[t] + m4[t], s3 = m3[t] - m4[t];
    o0[t] = m0[t] + a1 + a3;
    o1[t] = s1 + 2 * s3;
    o2[t] = a1 + 4 * a3;
    o3[t] = s1 + 8 * s3 + m5[t];
  }
}

/* A (the adjoint of A^T) applied to four vectors of n lanes: o[i] = sum_j AT[j][i] d[j] */
static inline __attribute__((always_inline)) void a4(int64_t n, const float *d0, const float *d1,
                                                     const float *d2, const float *d3, float *const o[WA]) {
  float *o0 = o[0], *o1 = o[1], *o2 = o[2], *o3 = o[3], *o4 = o[4], *o5 = o[5];
#pragma GCC ivdep
  for (int64_t t = 0; t < n; t++) {
    float a0 = d0[t], a1 = d1[t], a2 = d2[t], a3 = d3[t], e = a0 + a2, f = a1 + a3, g = a0 + 4 * a2,
          h = 2 * a1 + 8 * a3;
    o0[t] = a0;
    o1[t] = e + f;
    o2[t] = e - f;
    o3[t] = g + h;
    o4[t] = g - h;
    o5[t] = a3;
  }
}

/* A block's tiles: tile (gr, tx) of tile rows [r0, r1) is column
 * (gr - r0) * (tw + 1) + tx of V and M; column tw of each row is padding
 * (computed, never written out), so that every transform runs over the whole
 * block in one loop of T = rows * (tw + 1) lanes. */
static int64_t tws(const wino *p) { return p->tw + 1; }
static int64_t tiles_per_block(const wino *p) { return p->rows * tws(p); }
/* the transforms' buffers: input phases (6 x 4 x T + 1) and row transforms
 * (36 x T) and one padded row; output partials (24 x T) and rows (16 x T) */
static int64_t rowbuf_floats(const wino *p) { return (24 + WX) * tiles_per_block(p) + 4 * tws(p) + 8; }

/* Chunk ch's scratch, in order: V (36, Ci, T), M (36, Co, T), the row
 * buffers, and for the weight gradient its accumulator dU (36, Co, Ci). */
typedef struct chunk_bufs {
  float *V, *M, *rb, *dU;
} chunk_bufs;
static chunk_bufs bufs_of(const wino *p, int64_t ch) {
  chunk_bufs b;
  int64_t T = tiles_per_block(p);
  b.V = p->scratch + ch * p->per_chunk;
  b.M = b.V + WX * p->Ci * T;
  b.rb = b.M + WX * p->Co * T;
  b.dU = b.rb + rowbuf_floats(p);
  return b;
}

/* One row of n values placed lo elements in and zero-padded to 4 w1 (row),
 * then split by column mod 4: pk[j * T + t] = row[4 t + j], t < w1 (the
 * tiles' columns, phase by phase, for the transforms' lanes) */
static inline __attribute__((always_inline)) void split_row(const float *src, int64_t lo, int64_t n,
                                                            int64_t w1, float *restrict row,
                                                            float *pk, int64_t T) {
  if (lo > 4 * w1) lo = 4 * w1;
  if (n > 4 * w1 - lo) n = 4 * w1 - lo;
  memset(row, 0, sizeof(float) * (size_t)lo);
  memcpy(row + lo, src, sizeof(float) * (size_t)n);
  memset(row + lo + n, 0, sizeof(float) * (size_t)(4 * w1 - lo - n));
  float *restrict q0 = pk, *restrict q1 = pk + T, *restrict q2 = pk + 2 * T, *restrict q3 = pk + 3 * T;
  for (int64_t t = 0; t < w1; t++) {
    q0[t] = row[4 * t];
    q1[t] = row[4 * t + 1];
    q2[t] = row[4 * t + 2];
    q3[t] = row[4 * t + 3];
  }
}

/* V[xi][c][t] for the block's tiles from x */
static TC void input_transform(const wino *p, int64_t r0, int64_t r1, float *V, float *rb) {
  const int64_t w1 = tws(p), T = tiles_per_block(p), n = (r1 - r0) * w1;
  float *ph = rb;                    /* ph[k][j][m] = row k's x[4 tx + j - pw] at m = (gr - r0) w1 + tx */
  float *h = ph + 24 * T + 4;        /* h[k][i][m]: row k's horizontal transform */
  float *restrict row = h + WX * T;  /* one input row, 4 w1 */
  for (int64_t c = 0; c < p->Ci; c++) {
    for (int64_t gr = r0; gr < r1; gr++) {
      int64_t nn = gr / p->th, ty = gr % p->th, m0 = (gr - r0) * w1;
      const float *xp = p->x + (nn * p->Ci + c) * p->H * p->W;
      for (int k = 0; k < WA; k++) {
        int64_t iy = ty * WT - p->ph + k;
        float *pk = ph + k * 4 * T + m0;
        if (iy < 0 || iy >= p->H) {
          for (int j = 0; j < 4; j++) memset(pk + j * T, 0, sizeof(float) * (size_t)w1);
          continue;
        }
        /* the row zero-padded into row[u] = x[u - pw], u < 4 w1, then split by u mod 4 */
        split_row(xp + iy * p->W, p->pw, p->W, w1, row, pk, T);
      }
    }
    for (int k = 0; k < WA; k++) { /* horizontal: d4, d5 are phases 0, 1 one tile on */
      float *pk = ph + k * 4 * T;
      /* the last lane's d4, d5: in a short block, memory no row wrote (a
       * NaN there made the weight gradient's sum over lanes NaN) */
      if (n < T) pk[n] = pk[T + n] = 0.0f;
      float *o[WA];
      for (int i = 0; i < WA; i++) o[i] = h + (k * WA + i) * T;
      bt6(n, pk, pk + T, pk + 2 * T, pk + 3 * T, pk + 1, pk + T + 1, o);
    }
    for (int i = 0; i < WA; i++) { /* vertical: V[(a*6 + i)][c] */
      float *o[WA];
      for (int a = 0; a < WA; a++) o[a] = V + ((a * WA + i) * p->Ci + c) * T;
      bt6(n, h + (0 * WA + i) * T, h + (1 * WA + i) * T, h + (2 * WA + i) * T, h + (3 * WA + i) * T,
          h + (4 * WA + i) * T, h + (5 * WA + i) * T, o);
    }
  }
}

/* y of the block's tiles from M[xi][o][t], with the bias and the relu */
static TC void output_transform(const wino *p, int64_t r0, int64_t r1, const float *M, float *rb) {
  const int64_t w1 = tws(p), T = tiles_per_block(p), n = (r1 - r0) * w1, xs = p->Co * T;
  float *u = rb;          /* u[b][i][m]: 4 x 6 partials */
  float *yb = u + 24 * T; /* yb[b][e][m] */
  float *restrict row = yb + 16 * T; /* one output row, 4 tw */
  for (int64_t o = 0; o < p->Co; o++) {
    float bv = p->bias ? p->bias[o] : 0.0f;
    const float *m = M + o * T;
    for (int i = 0; i < WA; i++) {
      float *ob[WT];
      for (int b = 0; b < WT; b++) ob[b] = u + (b * WA + i) * T;
      at6(n, m + (0 * WA + i) * xs, m + (1 * WA + i) * xs, m + (2 * WA + i) * xs, m + (3 * WA + i) * xs,
          m + (4 * WA + i) * xs, m + (5 * WA + i) * xs, ob);
    }
    for (int b = 0; b < WT; b++) {
      float *ob[WT];
      for (int e = 0; e < WT; e++) ob[e] = yb + (b * WT + e) * T;
      const float *ub = u + b * WA * T;
      at6(n, ub, ub + T, ub + 2 * T, ub + 3 * T, ub + 4 * T, ub + 5 * T, ob);
    }
    for (int64_t gr = r0; gr < r1; gr++) {
      int64_t nn = gr / p->th, ty = gr % p->th, m0 = (gr - r0) * w1;
      for (int b = 0; b < WT && ty * WT + b < p->OH; b++) {
        float *restrict yr = p->y + ((nn * p->Co + o) * p->OH + ty * WT + b) * p->OW;
        const float *restrict v0 = yb + b * WT * T + m0, *restrict v1 = v0 + T, *restrict v2 = v1 + T,
                    *restrict v3 = v2 + T;
        for (int64_t t = 0; t < p->tw; t++) { /* interleaved: column 4 t + e from row e */
          row[4 * t] = v0[t];
          row[4 * t + 1] = v1[t];
          row[4 * t + 2] = v2[t];
          row[4 * t + 3] = v3[t];
        }
        if (p->relu)
          for (int64_t q = 0; q < p->OW; q++) yr[q] = row[q] + bv < 0 ? 0.0f : row[q] + bv;
        else
          for (int64_t q = 0; q < p->OW; q++) yr[q] = row[q] + bv;
      }
    }
  }
}

/* Chunk ch: its blocks of tile rows, each transformed, multiplied and written. */
static void chunk_run(void *ctx, int64_t c0, int64_t c1) {
  const wino *p = ctx;
  const int64_t T = tiles_per_block(p);
  for (int64_t ch = c0; ch < c1; ch++) {
    chunk_bufs cb = bufs_of(p, ch);
    float *V = cb.V, *M = cb.M, *rb = cb.rb;
    int64_t b0 = p->blocks * ch / p->chunks, b1 = p->blocks * (ch + 1) / p->chunks;
    int64_t R = p->N * p->th;
    for (int64_t blk = b0; blk < b1 && !lu_interrupted(); blk++) {
      int64_t r0 = blk * p->rows, r1 = r0 + p->rows < R ? r0 + p->rows : R, Tb = (r1 - r0) * tws(p);
      input_transform(p, r0, r1, V, rb);
      for (int xi = 0; xi < WX; xi++)
        lu_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)p->Co, (int)Tb, (int)p->Ci, 1.0f,
                 p->u + (int64_t)xi * p->Co * p->Ci, (int)p->Ci, V + (int64_t)xi * p->Ci * T, (int)T, 0.0f,
                 M + (int64_t)xi * p->Co * T, (int)T);
      output_transform(p, r0, r1, M, rb);
    }
  }
}

/* dM[xi][o][t] = (A dy_t A^T)[xi] for the block's tiles of dy: the adjoint
 * of the output transform (the padding lanes and the outputs past OH, OW
 * are zero, so they add nothing to the weight gradient) */
static TC void dy_transform(const wino *p, int64_t r0, int64_t r1, float *Mt, float *rb) {
  const int64_t w1 = tws(p), T = tiles_per_block(p), n = (r1 - r0) * w1, xs = p->Co * T;
  float *ph = rb;                   /* ph[b][e][m] = dy row b, column 4 tx + e */
  float *hm = ph + 16 * T + 4;      /* hm[b][i][m]: row b's horizontal transform */
  float *restrict row = hm + 24 * T; /* one dy row, 4 w1 */
  for (int64_t o = 0; o < p->Co; o++) {
    for (int64_t gr = r0; gr < r1; gr++) {
      int64_t nn = gr / p->th, ty = gr % p->th, m0 = (gr - r0) * w1;
      for (int b = 0; b < WT; b++) {
        int64_t oy = ty * WT + b;
        float *pk = ph + b * 4 * T + m0;
        if (oy >= p->OH) {
          for (int e = 0; e < 4; e++) memset(pk + e * T, 0, sizeof(float) * (size_t)w1);
          continue;
        }
        split_row(p->dy + ((nn * p->Co + o) * p->OH + oy) * p->OW, 0, p->OW, w1, row, pk, T);
      }
    }
    for (int b = 0; b < WT; b++) {
      const float *pk = ph + b * 4 * T;
      float *ob[WA];
      for (int i = 0; i < WA; i++) ob[i] = hm + (b * WA + i) * T;
      a4(n, pk, pk + T, pk + 2 * T, pk + 3 * T, ob);
    }
    for (int i = 0; i < WA; i++) {
      float *ob[WA];
      for (int a = 0; a < WA; a++) ob[a] = Mt + (a * WA + i) * xs + o * T;
      a4(n, hm + (0 * WA + i) * T, hm + (1 * WA + i) * T, hm + (2 * WA + i) * T, hm + (3 * WA + i) * T, ob);
    }
  }
}

/* Chunk ch of the weight gradient: dU_ch[xi] (Co,Ci) = sum over its blocks
 * of dM[xi] (Co,T) @ V[xi]^T (T,Ci) */
static void gw_chunk_run(void *ctx, int64_t c0, int64_t c1) {
  const wino *p = ctx;
  const int64_t T = tiles_per_block(p);
  for (int64_t ch = c0; ch < c1; ch++) {
    chunk_bufs cb = bufs_of(p, ch);
    float *V = cb.V, *M = cb.M, *rb = cb.rb, *dU = cb.dU;
    int64_t b0 = p->blocks * ch / p->chunks, b1 = p->blocks * (ch + 1) / p->chunks;
    int64_t R = p->N * p->th;
    memset(dU, 0, sizeof(float) * (size_t)(WX * p->Co * p->Ci)); /* also when interrupted at once */
    for (int64_t blk = b0; blk < b1 && !lu_interrupted(); blk++) {
      int64_t r0 = blk * p->rows, r1 = r0 + p->rows < R ? r0 + p->rows : R, Tb = (r1 - r0) * tws(p);
      input_transform(p, r0, r1, V, rb);
      dy_transform(p, r0, r1, M, rb);
      for (int xi = 0; xi < WX; xi++)
        lu_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p->Co, (int)p->Ci, (int)Tb, 1.0f,
                 M + (int64_t)xi * p->Co * T, (int)T, V + (int64_t)xi * p->Ci * T, (int)T,
                 1.0f, dU + (int64_t)xi * p->Co * p->Ci, (int)p->Ci);
    }
  }
}

/* dw[o][c] = G^T (sum over chunks of dU[.][o][c]) G for output channels [o0, o1) */
static void gw_out_range(void *ctx, int64_t o0, int64_t o1) {
  const wino *p = ctx;
  const int64_t CC = p->Co * p->Ci;
  const float *dU0 = bufs_of(p, 0).dU; /* the chunks' accumulators lie per_chunk apart */
  for (int64_t o = o0; o < o1; o++)
    for (int64_t c = 0; c < p->Ci; c++) {
      float u[WA][WA], t[WA][3];
      for (int xi = 0; xi < WX; xi++) {
        float v = 0;
        for (int64_t ch = 0; ch < p->chunks; ch++) v += dU0[ch * p->per_chunk + xi * CC + o * p->Ci + c];
        u[xi / WA][xi % WA] = v;
      }
      for (int a = 0; a < WA; a++) { /* t = dU G */
        float u0 = u[a][0], u1 = u[a][1], u2 = u[a][2], u3 = u[a][3], u4 = u[a][4], u5 = u[a][5];
        t[a][0] = u0 / 4 - (u1 + u2) / 6 + (u3 + u4) / 24;
        t[a][1] = (u2 - u1) / 6 + (u3 - u4) / 12;
        t[a][2] = -(u1 + u2) / 6 + (u3 + u4) / 6 + u5;
      }
      float *d = p->dw + (o * p->Ci + c) * 9;
      for (int q = 0; q < 3; q++) { /* dw = G^T t */
        float u0 = t[0][q], u1 = t[1][q], u2 = t[2][q], u3 = t[3][q], u4 = t[4][q], u5 = t[5][q];
        d[0 * 3 + q] = u0 / 4 - (u1 + u2) / 6 + (u3 + u4) / 24;
        d[1 * 3 + q] = (u2 - u1) / 6 + (u3 - u4) / 12;
        d[2 * 3 + q] = -(u1 + u2) / 6 + (u3 + u4) / 6 + u5;
      }
    }
}

/* ---- entry points ---------------------------------------------------------------- */

static luon_status run(const char *op, wino *p, const float *w, bool flip) {
  p->th = (p->OH + WT - 1) / WT, p->tw = (p->OW + WT - 1) / WT;
  int64_t R = p->N * p->th, nt = lu_num_threads();
  /* tile rows per block: about 96 tiles, fewer where V and M would pass
   * ~1.5 MB (an L2); with many channels up to 256, as every block's GEMMs
   * repack all of U (36 Co Ci) and that copy must serve enough tiles */
  int64_t want = 96, cap = (int64_t)(1.5 * 1024 * 1024 / (4.0 * WX * (double)(p->Ci + p->Co)));
  if (want > cap) want = cap;
  if (want < p->Ci * p->Co / 256) want = p->Ci * p->Co / 256;
  if (want > 256) want = 256;
  if (want < 16) want = 16;
  p->rows = (want + p->tw) / (p->tw + 1);
  if (p->rows < 1) p->rows = 1;
  if (p->rows > R) p->rows = R;
  p->blocks = (R + p->rows - 1) / p->rows;
  if (p->blocks < nt && R >= nt) { /* a block for every thread */
    p->rows = (R + nt - 1) / nt;
    p->blocks = (R + p->rows - 1) / p->rows;
  }
  p->chunks = p->blocks < nt ? p->blocks : nt;
  int64_t T = tiles_per_block(p), UU = WX * p->Co * p->Ci;
  bool gw = p->dy != NULL; /* the weight gradient: an accumulator per chunk instead of U */
  p->per_chunk = WX * (p->Ci + p->Co) * T + rowbuf_floats(p) + (gw ? UU : 0) + 16;
  size_t total = (size_t)(gw ? 0 : UU) + (size_t)(p->chunks * p->per_chunk);
  p->u = lu_scratch_alloc(sizeof(float) * total);
  if (!p->u)
    return lu_error(LUON_ENOMEM, "%s: out of host memory for Winograd buffers (%zu floats)", op, total);
  p->scratch = p->u + (gw ? 0 : UU);
  if (gw) {
    lu_parallel_for(p->chunks, 1, gw_chunk_run, p);
    lu_parallel_for(p->Co, 1, gw_out_range, p);
  } else {
    wjob wj = {p, w, flip};
    lu_parallel_for(p->Co, 1, weight_range, &wj);
    lu_parallel_for(p->chunks, 1, chunk_run, p);
  }
  lu_scratch_free(p->u);
  return LUON_OK;
}

/* Enough tiles for the transformed weights (36 Co Ci, made once per call
 * and repacked by each block's GEMMs) to pay, and those weights at most
 * 64 MB. Measured on resnet's shapes (2 threads, AVX-512), Winograd against
 * the direct method, by tiles (with the padding lane) and Co Ci per tile:
 * 64 ch 56x56 batch 1: 210 tiles, 20: 1.3x faster; 128 ch 28x28 batch 1-2:
 * 56-112 tiles, 292-146: 1.0-1.4x; 256 ch 14x14 batch 1-4-8-32: 20-80-160-640
 * tiles, 3277-819-410-102: 0.5x, 0.87x, 1.2x, 1.2x; 512 ch 7x7 batch 8-16-32:
 * 48-96-192 tiles: 0.6x, 1.0x, 1.33x. */
static int64_t tiles_of(int64_t N, int64_t OH, int64_t OW) {
  return N * ((OH + WT - 1) / WT) * ((OW + WT - 1) / WT + 1); /* with the padding lane */
}
static bool worth(int64_t N, int64_t OH, int64_t OW, int64_t Ci, int64_t Co) {
  int64_t tiles = tiles_of(N, OH, OW);
  int m = mode();
  /* no product to make (BLAS refuses lda 0), or past 64 MB of transformed weights even when forced */
  if (Ci < 1 || Co < 1 || m == 0 || Ci * Co > (64 << 20) / (4 * WX)) return false;
  if (m == 1) return true;
  return Ci >= 8 && Co >= 8 && OH >= 6 && OW >= 6 && (tiles >= 128 || Ci * Co <= 200 * tiles);
}

/* float32, 3x3, stride 1, no dilation, one group */
static bool f43_geom(const geom *g, int32_t dt) {
  return dt == LUON_DTYPE_F32 && g->KH == 3 && g->KW == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
         g->dw == 1 && g->G == 1;
}

bool lu_wino_forced(void) { return mode() == 1; }

bool lu_wino_fwd_ok(const geom *g, int32_t dt) {
  return f43_geom(g, dt) && worth(g->N, g->OH, g->OW, g->C, g->O);
}

bool lu_wino_gin_ok(const geom *g, int32_t dt) {
  return f43_geom(g, dt) && g->ph <= 2 && g->pw <= 2 && worth(g->N, g->H, g->W, g->O, g->C);
}

luon_status lu_wino_fwd(const char *op, const geom *g, const float *x, const float *w, const float *bias,
                        float *y) {
  wino p = {g->N, g->C, g->H, g->W, g->O, g->OH, g->OW, g->ph, g->pw, 0, 0, 0, 0, 0,
            x, bias, y, NULL, NULL, 0, g->relu, NULL, NULL};
  return run(op, &p, w, false);
}

/* The weight gradient's GEMMs are short (the tiles of a block are their
 * inner dimension) and write 36 Co Ci per block: it paid at 64 and 128
 * channels with batch 32 (Co Ci per tile 0.6 and 9: 1.6x and 1.3x faster
 * than the direct one), not at 256 and 512 (102 and 1365: 0.9x). */
bool lu_wino_gw_ok(const geom *g, int32_t dt) {
  return lu_wino_fwd_ok(g, dt) && (mode() == 1 || g->C * g->O <= 32 * tiles_of(g->N, g->OH, g->OW));
}

luon_status lu_wino_gw(const char *op, const geom *g, const float *x, const float *dy, float *dw) {
  wino p = {g->N, g->C, g->H, g->W, g->O, g->OH, g->OW, g->ph, g->pw, 0, 0, 0, 0, 0,
            x, NULL, NULL, NULL, NULL, 0, false, dy, dw};
  return run(op, &p, NULL, false);
}

luon_status lu_wino_gin(const char *op, const geom *g, const float *w, const float *dy, float *dx) {
  wino p = {g->N, g->O, g->OH, g->OW, g->C, g->H, g->W, 2 - g->ph, 2 - g->pw, 0, 0, 0, 0, 0,
            dy, NULL, dx, NULL, NULL, 0, false, NULL, NULL};
  return run(op, &p, w, true);
}
