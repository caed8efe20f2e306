/* conv_internal.h: what conv.c (the convolution and its gradients),
 * conv_maxpool.c (the fused convolution, relu and max pooling) and conv3d.c
 * (the 3-d convolution) share: the geometry, the dense operands, the GEMM,
 * the per-sample job, and the per-sample kernels conv.c defines. Local to
 * core/ops. */
#ifndef LUON_CONV_INTERNAL_H
#define LUON_CONV_INTERNAL_H

#include "internal.h"
#include <cblas.h>
#include <limits.h>

/* The geometry of one convolution, as the shapes and attributes state it. */
typedef struct geom {
  int64_t N, C, H, W;       /* input (N,C,H,W) */
  int64_t O, KH, KW;        /* weight (O,C/G,KH,KW) */
  int64_t OH, OW;           /* output (N,O,OH,OW) */
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg, Og, K, P;     /* per group: K = Cg*KH*KW rows of im2col, P = OH*OW */
  bool relu;                /* forward only: the fused relu */
} geom;

/* The forward's geometry from x, w[, b] (c->in, c->nin) and attrs i[0..7]. */
luon_status lu_conv_geom(const lu_call *c, geom *g);

/* Output 0 as one 4-d array (a,b,d,e) of dtype dt. */
static inline void set_out(lu_call *c, int32_t dt, int64_t a, int64_t b, int64_t d, int64_t e) {
  c->nout = 1;
  c->out_dtype[0] = dt;
  c->out_ndim[0] = 4;
  c->out_shape[0][0] = a, c->out_shape[0][1] = b, c->out_shape[0][2] = d, c->out_shape[0][3] = e;
}

/* The operands of one kernel call, dense: the tensors' own memory when
 * contiguous, else packed copies (inputs) or a buffer written back (output). */
typedef struct dense {
  const char *in[4];
  char *out;
  char *tmp[5];
} dense;
luon_status lu_conv_dense_get(const char *op, lu_call *c, dense *d);
/* Write a packed output back and free the packs. */
void lu_conv_dense_done(lu_call *c, dense *d);

/* Element i of a float32 or float64 array, as double; and stored. */
static inline double ld(const char *p, int32_t dt, int64_t i) {
  return dt == LUON_DTYPE_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static inline void st(char *p, int32_t dt, int64_t i, double v) {
  if (dt == LUON_DTYPE_F32) ((float *)p)[i] = (float)v;
  else ((double *)p)[i] = v;
}

/* C (M,N) = A (M,K) [transposed: stored (K,M)] @ B (K,N) [or stored (N,K)] + beta C, row-major. */
static inline void gemm(int32_t dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const char *A,
                 int64_t lda, const char *B, int64_t ldb, double beta, char *C, int64_t ldc) {
  enum CBLAS_TRANSPOSE a = ta ? CblasTrans : CblasNoTrans, b = tb ? CblasTrans : CblasNoTrans;
  if (dt == LUON_DTYPE_F32)
    lu_sgemm(CblasRowMajor, a, b, (int)M, (int)N, (int)K, 1.0f, (const float *)A, (int)lda,
                (const float *)B, (int)ldb, (float)beta, (float *)C, (int)ldc);
  else
    lu_dgemm(CblasRowMajor, a, b, (int)M, (int)N, (int)K, 1.0, (const double *)A, (int)lda,
                (const double *)B, (int)ldb, beta, (double *)C, (int)ldc);
}

/* A 1x1 kernel with stride 1 and no padding reads x itself as the column matrix. */
static inline bool pointwise(const geom *g) {
  return g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* OpenBLAS loaded (blas.c), and the per-sample matrices within its int sizes. */
static inline luon_status check_blas(const char *op, const geom *g) {
  LU_TRY(lu_blas_ready());
  int64_t m = g->K * (g->P > g->O ? g->P : g->O);
  if (g->K > INT_MAX || g->P > INT_MAX || g->O > INT_MAX || m > INT_MAX)
    return lu_error(LUON_EUNSUPPORTED, "%s: a per-sample matrix of (%lld,%lld) exceeds what BLAS takes",
                    op, (long long)g->K, (long long)g->P);
  return LUON_OK;
}

/* The samples are split into `chunks` ranges; each has its own im2col buffer
 * (and, for the weight gradient, its own accumulator). Several chunks run on
 * luon's threads, their products single-threaded; one chunk runs on the
 * caller and lu_sgemm splits each product over the threads. */
typedef struct job {
  const geom *g;
  int32_t dt;
  int64_t es, chunks;
  const char *a, *b, *bias;   /* the two inputs (and the bias) */
  char *y;
  char *col;                  /* chunks * colsz elements */
  char *acc;                  /* weight gradient: chunks * O*K elements */
  int64_t colsz;              /* K*P, or 0 for 1x1 kernels, which need no im2col (job_alloc) */
  int64_t gs;                 /* samples per GEMM (small planes side by side; job_alloc), 0 or 1: one */
} job;

static inline void sample_range(const job *j, int64_t ch, int64_t *n0, int64_t *n1) {
  *n0 = j->g->N * ch / j->chunks;
  *n1 = j->g->N * (ch + 1) / j->chunks;
}

/* The direct float32 kernel takes few taps per output (lu_conv_direct_row). */
static inline bool direct_ok(const geom *g, int32_t dt) {
  return dt == LUON_DTYPE_F32 && g->sw == 1 && g->K <= 32 && g->KH * g->KW * g->Cg <= 64;
}

/* ---- Winograd F(4x4, 3x3) for float32 3x3 stride-1 kernels (conv_winograd.c) ---- */
/* LUON_CONV_WINOGRAD=1: Winograd wherever the geometry allows (no other
 * kernel is preferred to it) */
bool lu_wino_forced(void);
/* Whether the forward, the input gradient, and the weight gradient of g take it */
bool lu_wino_fwd_ok(const geom *g, int32_t dt);
bool lu_wino_gin_ok(const geom *g, int32_t dt);
/* y = conv2d(x, w) + bias (NULL: none), relu'd when g->relu; dx = conv2d_grad_input(dy, w) */
luon_status lu_wino_fwd(const char *op, const geom *g, const float *x, const float *w, const float *bias,
                        float *y);
luon_status lu_wino_gin(const char *op, const geom *g, const float *w, const float *dy, float *dx);
/* dw = conv2d_grad_weight(x, dy) (the adjoint of the forward's transforms) */
bool lu_wino_gw_ok(const geom *g, int32_t dt);
luon_status lu_wino_gw(const char *op, const geom *g, const float *x, const float *dy, float *dw);

/* ---- per-sample kernels (conv.c) ------------------------------------------------ */

/* yn (O,P) = W_g (Og,K) @ col(xn_g) (K,P) + b for each group g of sample xn
 * (C,H,W), relu'd when fused; `raw`: without the bias and the relu */
void lu_conv_fwd_sample(const job *j, const char *xn, char *col, char *yn, bool raw);
/* Output row i of every channel of sample n into yn (O,OH,OW) (direct_ok).
 * A plain function over conv.c's target clones: a clone set called from
 * another file links with gcc but not with clang (the fuzz build). */
void lu_conv_direct_row(const job *jb, int64_t n, int64_t i, float *yn);
/* dxn_g (Cg,H,W) = col2im(W_g^T (K,Og) @ dyn_g (Og,P)) for one sample */
void lu_conv_gin_sample(const geom *g, int32_t dt, const char *w, const char *dyn, char *col, char *dxn);
/* acc_g (Og,K) = beta acc_g + dyn_g (Og,P) @ col(xn_g)^T (P,K) for one sample */
void lu_conv_gw_sample(const geom *g, int32_t dt, const char *xn, const char *dyn, char *col, double beta,
                       char *acc);

#endif
