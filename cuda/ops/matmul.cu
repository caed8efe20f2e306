/* matmul.cu: NumPy matmul on the GPU. Floats through cuBLAS strided
 * batched GEMM (row-major as C^T = B^T A^T; TF32 off unless
 * LUON_CUDA_TF32=1; float16 and bfloat16 through cublasGemmStridedBatchedEx
 * with float32 accumulation; a 16-bit x integer product in float32, then
 * rounded, as on the CPU), operands read in place when each matrix is
 * row-major or column-major (a transposed view: CUBLAS_OP_T, so
 * fully_connected's x @ W^T and its backward copy nothing) with one batch
 * stride, else made dense (and batch-broadcast) in scratch; integers through
 * a plain wrapping kernel as core/ops/matmul.c. Shapes and dtypes come from
 * lu_shape_matmul. */
#include "kernels.cuh"
#include <cublas_v2.h>
#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cublasHandle_t handles[LU_MAX_GPU_DEVICES];

static luon_status blas_fail(cublasStatus_t r, const char *what) {
  return lu_cuda_seterr(r == CUBLAS_STATUS_ALLOC_FAILED ? LUON_ENOMEM : LUON_EDEVICE,
                        "matmul: %s: %s (cuBLAS %d)", what, cublasGetStatusString(r), (int)r);
}

/* gpu(id)'s handle on stream s (the card current). */
static luon_status handle(int32_t id, cudaStream_t s, cublasHandle_t *out) {
  pthread_mutex_lock(&lock);
  cublasStatus_t r = CUBLAS_STATUS_SUCCESS;
  if (!handles[id]) {
    r = cublasCreate(&handles[id]);
    if (r == CUBLAS_STATUS_SUCCESS)
      r = cublasSetMathMode(handles[id], lu_cuda_flag("LUON_CUDA_TF32") ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                        : CUBLAS_DEFAULT_MATH);
    if (r != CUBLAS_STATUS_SUCCESS) handles[id] = NULL;
  }
  *out = handles[id];
  pthread_mutex_unlock(&lock);
  if (r != CUBLAS_STATUS_SUCCESS) return blas_fail(r, "cublasCreate");
  r = cublasSetStream(*out, s);
  return r == CUBLAS_STATUS_SUCCESS ? LUON_OK : blas_fail(r, "cublasSetStream");
}

/* The problem: batch shape (nb, bshape), and each operand's element strides
 * broadcast to (bshape..., rows, cols). */
typedef struct mmp {
  int nb;
  int64_t bshape[LU_MAXD], nbatch, M, K, N;
  int64_t ast[LU_MAXD + 2], bst[LU_MAXD + 2]; /* batch strides, then the 2 matrix strides */
} mmp;

static void operand_strides(const luon_tensor *t, bool one_d, bool is_b, const mmp *p, int64_t *st) {
  int mat = one_d ? 1 : 2, tb = t->ndim - mat;
  for (int d = 0; d < p->nb; d++) {
    int j = d - (p->nb - tb);
    st[d] = (j < 0 || t->shape[j] == 1) ? 0 : t->strides[j];
  }
  if (one_d) { /* a (K) as (1,K); b (K) as (K,1) */
    st[p->nb] = is_b ? t->strides[0] : 0;
    st[p->nb + 1] = is_b ? 0 : t->strides[0];
  } else {
    st[p->nb] = t->shape[t->ndim - 2] == 1 ? 0 : t->strides[t->ndim - 2];
    st[p->nb + 1] = t->shape[t->ndim - 1] == 1 ? 0 : t->strides[t->ndim - 1];
  }
}

/* out (bshape..., M, N) dense = a @ b, integer, wrapping */
__global__ void k_imatmul(mmp p, const void *a, int32_t adt, const void *b, int32_t bdt, void *y,
                          int32_t ydt) {
  LU_GRID_LOOP(o, p.nbatch * p.M * p.N) {
    int64_t j = o % p.N, i = (o / p.N) % p.M, q = o / (p.N * p.M), oa = 0, ob = 0;
    for (int d = p.nb - 1; d >= 0; d--) {
      int64_t r = q % p.bshape[d];
      q /= p.bshape[d];
      oa += r * p.ast[d];
      ob += r * p.bst[d];
    }
    oa += i * p.ast[p.nb];
    ob += j * p.bst[p.nb + 1];
    uint64_t s = 0;
    for (int64_t k = 0; k < p.K; k++)
      s += (uint64_t)lu_ld<int64_t>(a, adt, oa + k * p.ast[p.nb + 1]) *
           (uint64_t)lu_ld<int64_t>(b, bdt, ob + k * p.bst[p.nb]);
    lu_st<int64_t>(y, ydt, o, (int64_t)s);
  }
}

/* An operand as cuBLAS reads it: its matrices (rows, cols) at ptr, the
 * next one bstride elements on (0: one matrix for every batch), each
 * row-major with leading dimension ld, or column-major (trans) with ld. */
typedef struct operand {
  void *ptr;
  int64_t ld, bstride;
  bool trans;
} operand;

/* Whether t (strides st from operand_strides) can be read in place: dtype
 * dt, one stride across the flattened batch, and each matrix row- or
 * column-major with a leading dimension cuBLAS takes (< 2^31). */
static bool direct_operand(const luon_tensor *t, int32_t dt, const int64_t *st, const mmp *p,
                           int64_t rows, int64_t cols, operand *o) {
  if (t->dtype != dt) return false;
  int64_t bstride = 0, expect = 0;
  bool first = true;
  for (int d = p->nb - 1; d >= 0; d--) {
    if (p->bshape[d] == 1) continue;
    if (st[d] < 0 || (!first && st[d] != expect)) return false;
    if (first) bstride = st[d];
    first = false;
    expect = st[d] * p->bshape[d];
  }
  int64_t rs = st[p->nb], cs = st[p->nb + 1];
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) {
    o->trans = false;
    o->ld = rows == 1 ? cols : rs;
  } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {
    o->trans = true;
    o->ld = cols == 1 ? rows : cs;
  } else {
    return false;
  }
  if (o->ld < 1 || o->ld > INT32_MAX) return false;
  o->ptr = lu_data(t);
  o->bstride = bstride;
  return true;
}

/* Operand t as cuBLAS reads it (direct_operand), else as dense (nbatch,
 * rows, cols) of dtype dt: a broadcast copy in scratch (*blk). */
static luon_status dense_operand(const luon_tensor *t, int32_t dt, const int64_t *st, const mmp *p,
                                 int64_t rows, int64_t cols, cudaStream_t s, operand *o,
                                 lu_block **blk) {
  *blk = NULL;
  if (direct_operand(t, dt, st, p, rows, cols, o)) return LUON_OK;
  o->trans = false;
  o->ld = cols;
  int64_t shape[LU_MAXD + 2], dst[LU_MAXD + 2], acc = 1;
  for (int d = 0; d < p->nb; d++) shape[d] = p->bshape[d];
  shape[p->nb] = rows;
  shape[p->nb + 1] = cols;
  int nd = p->nb + 2;
  if (nd > LU_MAXD)
    return lu_cuda_seterr(LUON_EUNSUPPORTED, "matmul: %d batch axes on the GPU (at most %d)", p->nb,
                          LU_MAXD - 2);
  for (int d = nd - 1; d >= 0; d--) {
    dst[d] = acc;
    acc *= shape[d];
  }
  LU_TRY(lu_cuda_scratch(t->dev.id, (size_t)acc * luon_dtype_size(dt), blk));
  o->ptr = (*blk)->ptr;
  o->bstride = rows * cols;
  lu_space sp;
  lu_space_init(&sp, nd, shape);
  lu_space_add_raw(&sp, o->ptr, dt, dst);
  lu_space_add_raw(&sp, lu_data(t), t->dtype, st);
  lu_space_done(&sp);
  return lu_cuda_copy_space(&sp, s);
}

luon_status lu_cuda_matmul(lu_call *c) {
  const luon_tensor *a = c->in[0], *b = c->in[1];
  luon_tensor *y = c->out[0];
  mmp p;
  memset(&p, 0, sizeof p);
  bool a1 = a->ndim == 1, b1 = b->ndim == 1;
  p.M = a1 ? 1 : a->shape[a->ndim - 2];
  p.K = a->shape[a->ndim - 1];
  p.N = b1 ? 1 : b->shape[b->ndim - 1];
  p.nb = y->ndim - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  p.nbatch = 1;
  for (int d = 0; d < p.nb; d++) {
    p.bshape[d] = y->shape[d];
    p.nbatch *= y->shape[d];
  }
  operand_strides(a, a1, false, &p, p.ast);
  operand_strides(b, b1, true, &p, p.bst);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  int32_t dt = y->dtype;
  if (y->size == 0) return lu_cuda_end(&k, s);
  bool half = dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16;
  if (dt != LUON_DTYPE_F32 && dt != LUON_DTYPE_F64 && !half) {
    k_imatmul<<<lu_blocks(y->size), LU_THREADS, 0, k.s>>>(p, lu_data(a), a->dtype, lu_data(b),
                                                          b->dtype, lu_data(y), dt);
    return lu_cuda_end(&k, s);
  }
  if (p.K == 0) return lu_cuda_end(&k, lu_cuda_zero(lu_data(y), (size_t)y->size * luon_dtype_size(dt), k.s));
  if (p.M > INT32_MAX || p.N > INT32_MAX || p.K > INT32_MAX || p.nbatch > INT32_MAX)
    return lu_cuda_end(&k, lu_cuda_seterr(LUON_EUNSUPPORTED, "matmul: dimensions beyond 2^31 on the GPU"));
  /* a 16-bit result of a 16-bit and an integer operand is computed as the
   * CPU does (lu_run_cpu): in float32, then rounded once; converting the
   * integer to 16 bits first would lose every value past 2^11 (or 2^8) */
  if (half && (a->dtype != dt || b->dtype != dt)) {
    half = false;
    dt = LUON_DTYPE_F32;
  }
  void *py = lu_data(y);
  operand oa, ob;
  lu_block *ba = NULL, *bb = NULL, *by = NULL;
  s = dense_operand(a, dt, p.ast, &p, p.M, p.K, k.s, &oa, &ba);
  if (s == LUON_OK) s = dense_operand(b, dt, p.bst, &p, p.K, p.N, k.s, &ob, &bb);
  if (s == LUON_OK && dt != y->dtype) {
    s = lu_cuda_scratch(k.id, (size_t)y->size * luon_dtype_size(dt), &by);
    if (s == LUON_OK) py = by->ptr;
  }
  cublasHandle_t h = NULL;
  if (s == LUON_OK) s = handle(k.id, k.s, &h);
  if (s == LUON_OK) {
    /* row-major y = a @ b is column-major y^T = b^T a^T: a row-major operand
     * is its own transpose read column-major (OP_N), a column-major one
     * needs OP_T */
    int M = (int)p.M, N = (int)p.N, K = (int)p.K, nb = (int)p.nbatch;
    int lda = (int)oa.ld, ldb = (int)ob.ld;
    cublasOperation_t ta = oa.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = ob.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t r;
    if (half) { /* 16-bit operands and result, float32 accumulation and scalars */
      const float one = 1, zero = 0;
      cudaDataType_t t = dt == LUON_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
      r = cublasGemmStridedBatchedEx(h, tb, ta, N, M, K, &one, ob.ptr, t, ldb, ob.bstride, oa.ptr, t, lda,
                                     oa.bstride, &zero, py, t, N, (int64_t)M * N, nb,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    } else if (dt == LUON_DTYPE_F32) {
      const float one = 1, zero = 0;
      r = cublasSgemmStridedBatched(h, tb, ta, N, M, K, &one, (const float *)ob.ptr, ldb, ob.bstride,
                                    (const float *)oa.ptr, lda, oa.bstride, &zero, (float *)py, N,
                                    (int64_t)M * N, nb);
    } else {
      const double one = 1, zero = 0;
      r = cublasDgemmStridedBatched(h, tb, ta, N, M, K, &one, (const double *)ob.ptr, ldb, ob.bstride,
                                    (const double *)oa.ptr, lda, oa.bstride, &zero, (double *)py,
                                    N, (int64_t)M * N, nb);
    }
    if (r != CUBLAS_STATUS_SUCCESS)
      s = blas_fail(r, half ? "cublasGemmStridedBatchedEx" : "cublas?gemmStridedBatched");
  }
  if (s == LUON_OK && by) { /* the float32 result, rounded into y */
    lu_space sp;
    lu_space_init(&sp, y->ndim, y->shape);
    lu_space_add_raw(&sp, lu_data(y), y->dtype, y->strides);
    lu_space_add_raw(&sp, by->ptr, dt, y->strides);
    lu_space_done(&sp);
    s = lu_cuda_copy_space(&sp, k.s);
  }
  lu_cuda_scratch_free(ba);
  lu_cuda_scratch_free(bb);
  lu_cuda_scratch_free(by);
  return lu_cuda_end(&k, s);
}

/* linear (core/ops/matmul.c): x @ w^T through the matmul above (w read
 * transposed where it lies), then the bias and relu in one pass. */
luon_status lu_cuda_linear(lu_call *c) {
  luon_tensor wt = lu_transposed2(c->in[1]); /* w seen as (K,N) */
  luon_tensor *in[2] = {c->in[0], &wt};
  lu_call m = *c;
  m.nin = 2;
  m.in = in;
  LU_TRY(lu_cuda_matmul(&m));
  luon_tensor *y = c->out[0];
  bool relu = c->attrs->ni > LU_LINEAR_RELU && c->attrs->i[LU_LINEAR_RELU] == 1;
  const luon_tensor *b = c->nin == 3 ? c->in[2] : NULL;
  if ((!b && !relu) || y->size == 0) return LUON_OK;
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  lu_block *bb = NULL;
  const void *bp = b ? lu_data(b) : NULL;
  if (b && !lu_cuda_contiguous(b)) { /* a strided bias, made dense */
    s = lu_cuda_scratch(k.id, (size_t)b->size * luon_dtype_size(b->dtype), &bb);
    if (s == LUON_OK) {
      int64_t one = 1;
      lu_space sp;
      lu_space_init(&sp, b->ndim, b->shape);
      lu_space_add_raw(&sp, bb->ptr, b->dtype, &one);
      lu_space_add_raw(&sp, lu_data(b), b->dtype, b->strides);
      lu_space_done(&sp);
      s = lu_cuda_copy_space(&sp, k.s);
      bp = bb->ptr;
    }
  }
  if (s == LUON_OK) lu_cuda_bias_relu(lu_data(y), y->dtype, bp, y, relu, k.s);
  lu_cuda_scratch_free(bb);
  return lu_cuda_end(&k, s);
}
