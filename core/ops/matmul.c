/* matmul.c: NumPy matmul. (..., M, K) @ (..., K, N) -> (..., M, N) with batch
 * broadcasting; a 1-d first input is (1, K), a 1-d second input (K, 1), and
 * the added axis is dropped from the result. Floats go to BLAS (float32 with
 * few rows or a short inner dimension to the skinny kernels below), integers
 * to a plain loop. linear is Dense's x @ w^T + b (relu) on the same kernels.
 * Not here: dot/tensordot/einsum (composites in lua/). */
#include "steps.h"
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>

/* The problem as the shapes state it. */
typedef struct mm {
  int nb;                     /* batch axes of the result */
  int64_t bshape[LU_MAXD];
  int64_t M, K, N;
  bool a1, b1;                /* 1-d inputs */
} mm;

static luon_status dims(const luon_tensor *a, const luon_tensor *b, mm *p) {
  if (a->ndim == 0 || b->ndim == 0)
    return lu_error(LUON_ESHAPE, "matmul: input %d is a 0-d array (shape %s and %s); use multiply "
                    "to scale by a scalar", a->ndim == 0 ? 1 : 2, lu_shape_str(a->ndim, a->shape),
                    lu_shape_str(b->ndim, b->shape));
  p->a1 = a->ndim == 1;
  p->b1 = b->ndim == 1;
  p->M = p->a1 ? 1 : a->shape[a->ndim - 2];
  p->K = a->shape[a->ndim - 1];
  int64_t K2 = p->b1 ? b->shape[0] : b->shape[b->ndim - 2];
  p->N = p->b1 ? 1 : b->shape[b->ndim - 1];
  if (p->K != K2)
    return lu_error(LUON_ESHAPE, "matmul: input 1 has shape %s but input 2 has shape %s: the inner "
                    "dimensions %lld and %lld differ", lu_shape_str(a->ndim, a->shape),
                    lu_shape_str(b->ndim, b->shape), (long long)p->K, (long long)K2);
  int na = p->a1 ? 0 : a->ndim - 2, nb = p->b1 ? 0 : b->ndim - 2;
  if (lu_broadcast_shapes("matmul", na, a->shape, nb, b->shape, &p->nb, p->bshape) != LUON_OK)
    return lu_error(LUON_ESHAPE, "matmul: the batch dimensions %s and %s of inputs of shape %s and "
                    "%s cannot be broadcast together", lu_shape_str(na, a->shape),
                    lu_shape_str(nb, b->shape), lu_shape_str(a->ndim, a->shape),
                    lu_shape_str(b->ndim, b->shape));
  return LUON_OK;
}

/* Integer results are int32 or int64 (bool and the 8- and 16-bit
 * integers count in int64). */
static int32_t result_dtype(int32_t a, int32_t b) {
  int32_t t = lu_dtype_promote(a, b);
  return t == LUON_DTYPE_BOOL || t == LUON_DTYPE_U8 || t == LUON_DTYPE_I8 || t == LUON_DTYPE_I16 ||
                 t == LUON_DTYPE_U16 ? LUON_DTYPE_I64 : t;
}

luon_status lu_shape_matmul(lu_call *c) {
  mm p;
  LU_TRY(dims(c->in[0], c->in[1], &p));
  int n = 0;
  for (int i = 0; i < p.nb; i++) c->out_shape[0][n++] = p.bshape[i];
  if (!p.a1) c->out_shape[0][n++] = p.M;
  if (!p.b1) c->out_shape[0][n++] = p.N;
  c->nout = 1;
  c->out_ndim[0] = n;
  c->out_dtype[0] = result_dtype(c->in[0]->dtype, c->in[1]->dtype);
  return LUON_OK;
}

/* ---- kernels ------------------------------------------------------------- */

/* (M,K) @ (K,N) -> (M,N), strides in elements, C with row stride ldc.
 * The naive reference for the BLAS path (accumulates in double). */
static void sgemm_ref(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak,
                      const float *B, int64_t sbk, int64_t sbn, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M && !lu_interrupted(); i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)A[i * sam + k * sak] * B[k * sbk + j * sbn];
      C[i * ldc + j] = (float)s;
    }
}

static void dgemm_ref(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak,
                      const double *B, int64_t sbk, int64_t sbn, double *C, int64_t ldc) {
  for (int64_t i = 0; i < M && !lu_interrupted(); i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += A[i * sam + k * sak] * B[k * sbk + j * sbn];
      C[i * ldc + j] = s;
    }
}

/* Integer (M,K) @ (K,N) rows [b, e): A any strides, B rows of unit stride.
 * Unsigned arithmetic: overflow wraps as in NumPy instead of being UB. */
typedef struct ijob {
  const char *A, *B;
  char *C;
  int64_t N, K, sam, sak, sbk;
  int32_t dt;
} ijob;

static void int_rows(void *ctx, int64_t b, int64_t e) {
  const ijob *j = ctx;
  for (int64_t i = b; i < e && !lu_interrupted(); i++) {
    if (j->dt == LUON_DTYPE_I32) {
      const int32_t *A = (const int32_t *)j->A, *B = (const int32_t *)j->B;
      uint32_t *restrict c = (uint32_t *)j->C + i * j->N;
      for (int64_t n = 0; n < j->N; n++) c[n] = 0;
      for (int64_t k = 0; k < j->K; k++) {
        uint32_t av = (uint32_t)A[i * j->sam + k * j->sak];
        const int32_t *restrict br = B + k * j->sbk;
        for (int64_t n = 0; n < j->N; n++) c[n] += av * (uint32_t)br[n];
      }
    } else {
      const int64_t *A = (const int64_t *)j->A, *B = (const int64_t *)j->B;
      uint64_t *restrict c = (uint64_t *)j->C + i * j->N;
      for (int64_t n = 0; n < j->N; n++) c[n] = 0;
      for (int64_t k = 0; k < j->K; k++) {
        uint64_t av = (uint64_t)A[i * j->sam + k * j->sak];
        const int64_t *restrict br = B + k * j->sbk;
        for (int64_t n = 0; n < j->N; n++) c[n] += av * (uint64_t)br[n];
      }
    }
  }
}

/* How BLAS reads a (rows, cols) matrix with element strides (sr, sc):
 * NOTRANS or TRANS with *ld, or COPY when it cannot (strides 0 or < 0,
 * neither axis dense). Strides of size-1 axes do not matter. */
enum { NOTRANS, TRANS, COPY };
static int layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int64_t *ld) {
  int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
  if (rows <= 1) sr = c1;
  if (cols <= 1) sc = 1;
  if (sc == 1 && sr >= c1) { *ld = sr; return NOTRANS; }
  if (sr == 1 && sc >= r1) { *ld = sc; return TRANS; }
  if (rows <= 1 && sc >= 1) { *ld = sc; return TRANS; }
  return COPY;
}

/* Copy a (rows, cols) matrix of dtype sdt with element strides (sr, sc)
 * into dense row-major dst of dtype ddt. */
static void pack(char *dst, int32_t ddt, const char *src, int32_t sdt, int64_t rows, int64_t cols,
                 int64_t sr, int64_t sc) {
  int64_t ds = luon_dtype_size(ddt), ss = luon_dtype_size(sdt);
  for (int64_t r = 0; r < rows; r++) {
    if (sc == 1) {
      lu_convert(dst + r * cols * ds, ddt, src + r * sr * ss, sdt, cols);
    } else {
      for (int64_t k = 0; k < cols; k++)
        lu_convert(dst + (r * cols + k) * ds, ddt, src + (r * sr + k * sc) * ss, sdt, 1);
    }
  }
}

/* One operand of one product, ready for a kernel. */
typedef struct operand {
  const char *p;
  int64_t sr, sc;     /* element strides */
  int how;            /* NOTRANS/TRANS with ld, for BLAS */
  int64_t ld;
} operand;

/* Whether the kernel reads (rows, cols) of dtype sdt at strides (sr, sc)
 * where it lies: the dtype is the compute dtype and BLAS (floats) or a unit
 * column stride (ints, need_rows) can take the strides. */
static bool in_place(int32_t sdt, int32_t cdt, int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                     bool need_rows) {
  int64_t ld;
  int how = layout(rows, cols, sr, sc, &ld);
  return sdt == cdt && (lu_dtype_is_float(cdt) ? how != COPY : !need_rows || sc == 1 || cols <= 1);
}

/* Point o at (rows, cols) at src, packing into buf unless in_place. */
static void prepare(operand *o, const char *src, int32_t sdt, int32_t cdt, int64_t rows,
                    int64_t cols, int64_t sr, int64_t sc, bool need_rows, char *buf) {
  o->how = layout(rows, cols, sr, sc, &o->ld);
  if (in_place(sdt, cdt, rows, cols, sr, sc, need_rows)) {
    o->p = src;
    o->sr = sr;
    o->sc = cols <= 1 ? 1 : sc;
    return;
  }
  pack(buf, cdt, src, sdt, rows, cols, sr, sc);
  o->p = buf;
  o->sr = cols;
  o->sc = 1;
  o->how = NOTRANS;
  o->ld = cols > 1 ? cols : 1;
}

/* float32 products with few rows (a small batch through a Dense layer) or a
 * short inner dimension (its weight gradient), where OpenBLAS packs the
 * large operand first and so reads it three times: these read it once,
 * straight from where it lies, and split its other axis across threads.
 *  dot:   M <= 8, A's rows and B's columns contiguous (x @ W^T):
 *         C[m,n] = A[m,:] . B[:,n], n split;
 *  axpy:  M <= 8, B's rows contiguous (dy @ W): C[m,:] = sum_k A[m,k] B[k,:],
 *         32 columns at a time in registers, column blocks split;
 *  outer: K <= 8, B's rows contiguous (dy^T @ x): each row of C at once
 *         from the K rows of B, rows split. */
#define SKINNY_M 8
#define SKINNY_DOT_MIN (1 << 16)
#define SKINNY_K 8

typedef struct sjob {
  const float *A, *B;
  float *C;
  int64_t M, N, K, sam, sak, sbk, sbn; /* element strides; C is (M,N) dense */
} sjob;

/* the inner dimension in chunks of SKINNY_KC, so that A's rows of a chunk
 * stay in L1 while every column of B in [b, e) passes. NC columns at once:
 * with one or two rows of A, one column gives too few independent sums to
 * keep the FMA units busy (a sum waits for the previous FMA's result), so
 * 8 or 4 columns go together; with more rows, the rows give enough. */
#define SKINNY_KC 1024
static inline __attribute__((always_inline)) void dot_cols(const sjob *j, int64_t n, int64_t k0, int64_t k1,
                                                           const int MM, const int NC) {
  int64_t k16 = k0 + (k1 - k0) / 16 * 16;
  /* fixed sizes, not [MM][NC] (a variable-length array, kept on the stack):
   * with MM and NC constant after inlining the sums stay in registers */
  v16 acc[8][8];
  const float *bp[8];
#pragma GCC unroll 8
  for (int c = 0; c < NC; c++) bp[c] = j->B + (n + c) * j->sbn;
#pragma GCC unroll 8
  for (int m = 0; m < MM; m++)
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) acc[m][c] = (v16){0};
  for (int64_t k = k0; k < k16; k += 16) {
    v16 bv[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) memcpy(&bv[c], bp[c] + k, sizeof bv[c]);
#pragma GCC unroll 8
    for (int m = 0; m < MM; m++) {
      v16 av;
      memcpy(&av, j->A + m * j->sam + k, sizeof av);
#pragma GCC unroll 8
      for (int c = 0; c < NC; c++) acc[m][c] += av * bv[c];
    }
  }
  for (int m = 0; m < MM; m++)
    for (int c = 0; c < NC; c++) {
      const float *bn = j->B + (n + c) * j->sbn;
      float s = lu_hsum16(acc[m][c]);
      for (int64_t k = k16; k < k1; k++) s += j->A[m * j->sam + k] * bn[k];
      float *out = j->C + m * j->N + n + c;
      *out = k0 ? *out + s : s;
    }
}

static inline __attribute__((always_inline)) void dot_body(const sjob *j, int64_t b, int64_t e, const int MM) {
  const int NC = MM == 1 ? 8 : MM == 2 ? 4 : 1;
  for (int64_t k0 = 0; k0 < j->K; k0 += SKINNY_KC) {
    int64_t k1 = k0 + SKINNY_KC < j->K ? k0 + SKINNY_KC : j->K, n = b;
    for (; n + NC <= e && !lu_interrupted(); n += NC) dot_cols(j, n, k0, k1, MM, NC);
    for (; n < e; n++) dot_cols(j, n, k0, k1, MM, 1);
  }
}

/* B's rows SKINNY_KB at a time over all the columns of [b, e), with C's
 * sums kept in memory between them: few streams for the prefetcher */
#define SKINNY_KB 8
static inline __attribute__((always_inline)) void axpy_body(const sjob *j, int64_t b, int64_t e, const int MM) {
  int64_t n1 = e * 32 < j->N ? e * 32 : j->N;
  for (int64_t k0 = 0; k0 < j->K; k0 += SKINNY_KB) {
    int64_t k1 = k0 + SKINNY_KB < j->K ? k0 + SKINNY_KB : j->K;
    for (int64_t n0 = b * 32; n0 < n1 && !lu_interrupted(); n0 += 32) {
      if (n0 + 32 > j->N) { /* the last columns, one at a time */
        for (int64_t n = n0; n < j->N; n++)
          for (int m = 0; m < MM; m++) {
            float s = k0 ? j->C[m * j->N + n] : 0;
            for (int64_t k = k0; k < k1; k++) s += j->A[m * j->sam + k * j->sak] * j->B[k * j->sbk + n];
            j->C[m * j->N + n] = s;
          }
        continue;
      }
      v16 acc[MM][2];
      for (int m = 0; m < MM; m++) {
        if (k0) memcpy(acc[m], j->C + m * j->N + n0, sizeof acc[m]);
        else acc[m][0] = acc[m][1] = (v16){0};
      }
      for (int64_t k = k0; k < k1; k++) {
        v16 b0, b1;
        memcpy(&b0, j->B + k * j->sbk + n0, sizeof b0);
        memcpy(&b1, j->B + k * j->sbk + n0 + 16, sizeof b1);
        for (int m = 0; m < MM; m++) {
          float a = j->A[m * j->sam + k * j->sak];
          acc[m][0] += a * b0;
          acc[m][1] += a * b1;
        }
      }
      for (int m = 0; m < MM; m++) memcpy(j->C + m * j->N + n0, acc[m], sizeof acc[m]);
    }
  }
}

#define SKINNY_CASES(F)                                                                          \
  switch (j->M) {                                                                                \
  case 1: F(j, b, e, 1); break;                                                                  \
  case 2: F(j, b, e, 2); break;                                                                  \
  case 3: F(j, b, e, 3); break;                                                                  \
  case 4: F(j, b, e, 4); break;                                                                  \
  case 5: F(j, b, e, 5); break;                                                                  \
  case 6: F(j, b, e, 6); break;                                                                  \
  case 7: F(j, b, e, 7); break;                                                                  \
  default: F(j, b, e, 8); break;                                                                 \
  }

static TC void skinny_dot(void *ctx, int64_t b, int64_t e) {
  const sjob *j = ctx;
  SKINNY_CASES(dot_body)
}

static TC void skinny_axpy(void *ctx, int64_t b, int64_t e) {
  const sjob *j = ctx;
  SKINNY_CASES(axpy_body)
}

/* SKINNY_NC columns of B's K rows at a time (in L1) for every row of C in [b, e) */
#define SKINNY_NC 512
static TC void skinny_outer(void *ctx, int64_t b, int64_t e) {
  const sjob *j = ctx;
  for (int64_t c0 = 0; c0 < j->N; c0 += SKINNY_NC) {
    int64_t c1 = c0 + SKINNY_NC < j->N ? c0 + SKINNY_NC : j->N, c16 = c0 + (c1 - c0) / 16 * 16;
    for (int64_t i = b; i < e && !lu_interrupted(); i++) {
      float a[SKINNY_K], *c = j->C + i * j->N;
      for (int64_t k = 0; k < j->K; k++) a[k] = j->A[i * j->sam + k * j->sak];
      for (int64_t n = c0; n < c16; n += 16) {
        v16 s = {0};
        for (int64_t k = 0; k < j->K; k++) {
          v16 bv;
          memcpy(&bv, j->B + k * j->sbk + n, sizeof bv);
          s += a[k] * bv;
        }
        memcpy(c + n, &s, sizeof s);
      }
      for (int64_t n = c16; n < c1; n++) {
        float s = 0;
        for (int64_t k = 0; k < j->K; k++) s += a[k] * j->B[k * j->sbk + n];
        c[n] = s;
      }
    }
  }
}

/* C = A @ B by one of the kernels above when the shapes suit one (and, but
 * for dot, the product is big enough to matter); false: use BLAS */
static bool skinny(int64_t M, int64_t N, int64_t K, const operand *A, const operand *B, float *C) {
  sjob j = {(const float *)A->p, (const float *)B->p, C, M, N, K, A->sr, A->sc, B->sr, B->sc};
  /* x @ W^T for a few rows at any size (a small network's layer at batch 1:
   * OpenBLAS would pack all of W first, every call), threaded over columns
   * only when each thread gets SKINNY_DOT_MIN multiply-adds */
  if (M <= SKINNY_M && A->sc == 1 && B->sr == 1 && K >= 16) {
    int64_t grain = SKINNY_DOT_MIN / (M * K);
    lu_parallel_for(N, grain < 8 ? 8 : grain, skinny_dot, &j);
    return true;
  }
  if (M * N * K < (1 << 18)) return false;
  if (M <= SKINNY_M && B->sc == 1 && N >= 256) {
    lu_parallel_for((N + 31) / 32, 8, skinny_axpy, &j);
    return true;
  }
  if (K <= SKINNY_K && B->sc == 1 && N >= 64) {
    lu_parallel_for(M, 1, skinny_outer, &j);
    return true;
  }
  return false;
}

luon_status lu_cpu_matmul(lu_call *c) {
  const luon_tensor *a = c->in[0], *b = c->in[1];
  luon_tensor *y = c->out[0];
  mm p;
  LU_TRY(dims(a, b, &p));
  int32_t cdt = y->dtype;
  int64_t M = p.M, K = p.K, N = p.N, cs = luon_dtype_size(cdt);
  int64_t as = luon_dtype_size(a->dtype), bs = luon_dtype_size(b->dtype);
  bool fl = lu_dtype_is_float(cdt);
  if (fl && !lu_ref_kernels() && (M > INT_MAX || N > INT_MAX || K > INT_MAX))
    return lu_error(LUON_EUNSUPPORTED, "matmul: dimensions (%lld,%lld,%lld) exceed what BLAS takes",
                    (long long)M, (long long)K, (long long)N);
  /* (M,K) and (K,N) strides, and the batch strides of each input */
  int64_t sam = p.a1 ? 0 : a->strides[a->ndim - 2], sak = a->strides[a->ndim - 1];
  int64_t sbk = p.b1 ? b->strides[0] : b->strides[b->ndim - 2], sbn = p.b1 ? 1 : b->strides[b->ndim - 1];
  int64_t abs_[LU_MAXD], bbs[LU_MAXD];
  int na = p.a1 ? 0 : a->ndim - 2, nbb = p.b1 ? 0 : b->ndim - 2;
  for (int i = 0; i < p.nb; i++) {
    int ja = i - (p.nb - na), jb = i - (p.nb - nbb);
    abs_[i] = ja < 0 || a->shape[ja] == 1 ? 0 : a->strides[ja];
    bbs[i] = jb < 0 || b->shape[jb] == 1 ? 0 : b->strides[jb];
  }
  int64_t nbatch = lu_numel(p.nb, p.bshape);
  if (y->size == 0) return LUON_OK;

  char *out = lu_data(y); /* contiguous: the dispatcher's outputs always are */
  /* scratch only for an operand that is packed (a Dense layer's x @ W^T
   * reads both where they lie, and allocates nothing but its output) */
  bool pack_a = !in_place(a->dtype, cdt, M, K, sam, sak, false), pack_b = !in_place(b->dtype, cdt, K, N, sbk, sbn, true);
  char *pa = pack_a ? lu_scratch_alloc((size_t)(M * K * cs) + 1) : NULL;
  char *pb = pack_b && (pa || !pack_a) ? lu_scratch_alloc((size_t)(K * N * cs) + 1) : NULL;
  if ((pack_a && !pa) || (pack_b && !pb)) {
    lu_scratch_free(pa);
    return lu_error(LUON_ENOMEM, "matmul: out of host memory for scratch of (%lld,%lld) and (%lld,%lld)",
                    (long long)M, (long long)K, (long long)K, (long long)N);
  }
  if (K == 0) {
    memset(out, 0, (size_t)(y->size * cs));
    nbatch = 0;
  }
  /* a stack of matrices times one matrix: one product of (batch*M, K) */
  bool b_shared = true;
  int64_t expect = sam * M;
  for (int i = p.nb - 1; i >= 0; i--) {
    if (bbs[i] != 0) b_shared = false;
    if (p.bshape[i] == 1) continue;
    if (abs_[i] != expect) b_shared = false;
    expect *= p.bshape[i];
  }
  if (b_shared && nbatch > 1 && a->dtype == cdt && sak == 1 && sam >= K && !p.a1) {
    M *= nbatch;
    nbatch = 1;
  }

  const char *a0 = lu_data(a), *b0 = lu_data(b);
  int64_t idx[LU_MAXD] = {0}, aoff = 0, boff = 0;
  for (int64_t t = 0; t < nbatch && !lu_interrupted(); t++) { /* luon_op_call reports a stop */
    operand A, B;
    prepare(&A, a0 + aoff * as, a->dtype, cdt, M, K, sam, sak, false, pa);
    prepare(&B, b0 + boff * bs, b->dtype, cdt, K, N, sbk, sbn, true, pb);
    char *C = out + t * M * N * cs;
    if (fl && lu_ref_kernels()) {
      if (cdt == LUON_DTYPE_F32)
        sgemm_ref(M, N, K, (const float *)A.p, A.sr, A.sc, (const float *)B.p, B.sr, B.sc, (float *)C, N);
      else
        dgemm_ref(M, N, K, (const double *)A.p, A.sr, A.sc, (const double *)B.p, B.sr, B.sc, (double *)C, N);
    } else if (fl) {
      enum CBLAS_TRANSPOSE ta = A.how == TRANS ? CblasTrans : CblasNoTrans;
      enum CBLAS_TRANSPOSE tb = B.how == TRANS ? CblasTrans : CblasNoTrans;
      if (cdt == LUON_DTYPE_F32) {
        if (!skinny(M, N, K, &A, &B, (float *)C))
          lu_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0f, (const float *)A.p, (int)A.ld,
                   (const float *)B.p, (int)B.ld, 0.0f, (float *)C, (int)(N > 1 ? N : 1));
      } else
        lu_dgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0, (const double *)A.p,
                    (int)A.ld, (const double *)B.p, (int)B.ld, 0.0, (double *)C, (int)(N > 1 ? N : 1));
    } else {
      ijob j = {A.p, B.p, C, N, K, A.sr, A.sc, B.sr, cdt};
      int64_t grain = 65536 / (K * N > 0 ? K * N : 1);
      lu_parallel_for(M, grain < 1 ? 1 : grain, int_rows, &j);
    }
    for (int d = p.nb - 1; d >= 0; d--) {
      aoff += abs_[d];
      boff += bbs[d];
      if (++idx[d] < p.bshape[d]) break;
      aoff -= abs_[d] * p.bshape[d];
      boff -= bbs[d] * p.bshape[d];
      idx[d] = 0;
    }
  }
  lu_scratch_free(pa);
  lu_scratch_free(pb);
  return LUON_OK;
}

/* ---- backward rule ----------------------------------------------------------- */

/* t with its last two axes swapped: a view. */
static luon_tensor *swapped(lu_steps *e, luon_tensor *t) {
  if (!t) return NULL;
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = t->ndim;
  for (int d = 0; d < t->ndim; d++) a.i[d] = d;
  a.i[t->ndim - 2] = t->ndim - 1;
  a.i[t->ndim - 1] = t->ndim - 2;
  return lu_steps_run(e, LU_OP_transpose, &a, t, NULL, NULL);
}

/* The gradient of a matrix operand as computed, (batch.., R, C), summed
 * over the batch axes the operand was broadcast along to its full shape
 * (fn, fs), then seen with its own shape (a 1-d operand drops its 1). */
static void give(lu_steps *e, luon_tensor *d, int fn, const int64_t *fs, const luon_tensor *x,
                 luon_tensor **din) {
  if (e->s != LUON_OK) return;
  luon_tensor *s;
  e->s = lu_reduce_sum_to(d, fn, fs, x->dtype, &s);
  if (e->s != LUON_OK) return;
  lu_steps_give(e, lu_steps_reshape(e, s, x->ndim, x->shape), x, din);
  luon_tensor_release(s);
}

/* C = A @ B with A (.., M, K), B (.., K, N), C (batch.., M, N):
 *   dA = dC @ B^T  (batch.., M, K), summed over A's broadcast batch axes
 *   dB = A^T @ dC  (batch.., K, N), summed over B's; as (dC^T @ A)^T when B
 *        is a transposed matrix
 * A 1-d A is (1, K) and a 1-d B (K, 1) throughout, and dC gets back the
 * axes the forward dropped. Integer operands get no gradient. */
luon_status lu_grad_matmul(lu_grad_call *g) {
  luon_tensor *a = g->in[0], *b = g->in[1], *dc = g->dout[0];
  bool wa = g->need[0] && lu_dtype_has_grad(a->dtype);
  bool wb = g->need[1] && lu_dtype_has_grad(b->dtype);
  if (!dc || !(wa || wb)) return LUON_OK;
  mm p;
  LU_TRY(dims(a, b, &p));
  int64_t as[LU_MAXD], bs[LU_MAXD], cs[LU_MAXD]; /* full shapes: A (.., M, K), B (.., K, N), C */
  int an = p.a1 ? 2 : a->ndim, bn = p.b1 ? 2 : b->ndim, cn = p.nb + 2;
  memcpy(as, a->shape, sizeof(int64_t) * (size_t)a->ndim);
  memcpy(bs, b->shape, sizeof(int64_t) * (size_t)b->ndim);
  if (p.a1) as[0] = 1, as[1] = p.K;
  if (p.b1) bs[0] = p.K, bs[1] = 1;
  memcpy(cs, p.bshape, sizeof(int64_t) * (size_t)p.nb);
  cs[p.nb] = p.M;
  cs[p.nb + 1] = p.N;
  lu_steps e = {LUON_OK, 0, {NULL}};
  luon_tensor *dcf = lu_steps_reshape(&e, dc, cn, cs);
  if (wa) {
    luon_tensor *bt = swapped(&e, lu_steps_reshape(&e, b, bn, bs));
    give(&e, lu_steps_run(&e, LU_OP_matmul, NULL, dcf, bt, NULL), an, as, a, &g->din[0]);
  }
  int64_t bld;
  if (wb && p.nb == 0 && a->ndim == 2 && b->ndim == 2 &&
      layout(b->shape[0], b->shape[1], b->strides[0], b->strides[1], &bld) == TRANS) {
    /* B is a matrix seen transposed (Dense's x @ W^T): dB^T = dC^T @ A comes
     * out in W's own layout, so W's gradient is dense, not a strided view */
    luon_tensor *dbt = lu_steps_run(&e, LU_OP_matmul, NULL, swapped(&e, dcf), a, NULL);
    lu_steps_give(&e, swapped(&e, dbt), b, &g->din[1]);
  } else if (wb) {
    luon_tensor *at = swapped(&e, lu_steps_reshape(&e, a, an, as));
    give(&e, lu_steps_run(&e, LU_OP_matmul, NULL, at, dcf, NULL), bn, bs, b, &g->din[1]);
  }
  return lu_steps_end(&e);
}

/* ---- linear: x @ w^T (+ b) (relu) ------------------------------------------------ */

luon_status lu_shape_linear(lu_call *c) {
  if (c->nin != 2 && c->nin != 3)
    return lu_error(LUON_EINVAL, "linear: takes x, w and an optional bias b, got %d inputs", c->nin);
  const luon_tensor *x = c->in[0], *w = c->in[1], *b = c->nin == 3 ? c->in[2] : NULL;
  int32_t dt = x->dtype;
  if (dt != LUON_DTYPE_F32 && dt != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "linear: x is %s; it takes float32 or float64 (npx.fully_connected "
                    "takes the others)", luon_dtype_name(dt));
  for (int i = 1; i < c->nin; i++)
    if (c->in[i]->dtype != dt)
      return lu_error(LUON_EDTYPE, "linear: x is %s but input %d is %s: all must have one dtype",
                      luon_dtype_name(dt), i + 1, luon_dtype_name(c->in[i]->dtype));
  if (x->ndim != 2 || w->ndim != 2 || x->shape[1] != w->shape[1] || (b && (b->ndim != 1 || b->shape[0] != w->shape[0])))
    return lu_error(LUON_ESHAPE, "linear: x %s, w %s%s%s: expected x (M,K), w (N,K) and b (N,)",
                    lu_shape_str(x->ndim, x->shape), lu_shape_str(w->ndim, w->shape), b ? ", b " : "",
                    b ? lu_shape_str(b->ndim, b->shape) : "");
  if (c->attrs->ni > LU_LINEAR_RELU && c->attrs->i[LU_LINEAR_RELU] != 0 && c->attrs->i[LU_LINEAR_RELU] != 1)
    return lu_error(LUON_EINVAL, "linear: RELU is %lld; expected 0 or 1", (long long)c->attrs->i[LU_LINEAR_RELU]);
  c->nout = 1;
  c->out_ndim[0] = 2;
  c->out_shape[0][0] = x->shape[0];
  c->out_shape[0][1] = w->shape[0];
  c->out_dtype[0] = dt;
  return LUON_OK;
}

typedef struct bjob {
  void *y;
  const void *b;
  int64_t N;
  bool relu, f64;
} bjob;

static void bias_relu_rows(void *ctx, int64_t r0, int64_t r1) {
  const bjob *j = ctx;
  for (int64_t r = r0; r < r1; r++) {
    if (j->f64) {
      double *y = (double *)j->y + r * j->N;
      const double *b = j->b;
      for (int64_t n = 0; n < j->N; n++) {
        double v = b ? y[n] + b[n] : y[n];
        y[n] = j->relu && v < 0 ? 0 : v; /* NaN stays, as relu's */
      }
    } else {
      float *y = (float *)j->y + r * j->N;
      const float *b = j->b;
      for (int64_t n = 0; n < j->N; n++) {
        float v = b ? y[n] + b[n] : y[n];
        y[n] = j->relu && v < 0 ? 0 : v;
      }
    }
  }
}

luon_status lu_cpu_linear(lu_call *c) {
  luon_tensor wt = lu_transposed2(c->in[1]); /* w seen as (K,N) */
  luon_tensor *in[2] = {c->in[0], &wt};
  lu_call m = *c;
  m.nin = 2;
  m.in = in;
  LU_TRY(lu_cpu_matmul(&m));
  luon_tensor *y = c->out[0];
  bool relu = c->attrs->ni > LU_LINEAR_RELU && c->attrs->i[LU_LINEAR_RELU] == 1;
  const luon_tensor *b = c->nin == 3 ? c->in[2] : NULL;
  if ((!b && !relu) || y->size == 0) return LUON_OK;
  /* the bias, dense (a strided one is rare: copied) */
  luon_tensor *bd = NULL;
  if (b && !lu_is_contiguous(b)) LU_TRY(lu_run(LU_OP_copy, NULL, &bd, 1, b));
  bjob j = {lu_data(y), b ? lu_data(bd ? bd : b) : NULL, y->shape[1], relu, y->dtype == LUON_DTYPE_F64};
  int64_t grain = 32768 / (j.N > 0 ? j.N : 1);
  lu_parallel_for(y->shape[0], grain < 1 ? 1 : grain, bias_relu_rows, &j);
  luon_tensor_release(bd);
  return LUON_OK;
}

/* z = relu ? dy * (y > 0) : dy;  dx = z @ w,  dw = z^T @ x,  db = z summed over rows
 * (matmul's and add's rules for x @ w^T + b, so the gradients are theirs) */
luon_status lu_grad_linear(lu_grad_call *g) {
  luon_tensor *dy = g->dout[0], *x = g->in[0], *w = g->in[1];
  if (!dy) return LUON_OK;
  lu_steps e = {LUON_OK, 0, {NULL}};
  bool relu = g->attrs->ni > LU_LINEAR_RELU && g->attrs->i[LU_LINEAR_RELU] == 1;
  luon_tensor *z = relu ? R2(relu_grad, g->out[0], dy) : dy;
  if (g->need[0]) lu_steps_give(&e, R2(matmul, z, w), x, &g->din[0]);
  if (g->need[1]) lu_steps_give(&e, R2(matmul, swapped(&e, z), x), w, &g->din[1]);
  if (g->nin == 3 && g->need[2]) {
    luon_attrs s;
    memset(&s, 0, sizeof s);
    s.i[LU_REDUCE_AXES] = 0;
    s.ni = LU_REDUCE_AXES + 1;
    lu_steps_give(&e, RA(sum, &s, z), g->in[2], &g->din[2]);
  }
  return lu_steps_end(&e);
}
