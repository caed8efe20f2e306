/* linalg.c: svd, the singular value decomposition of a stack of matrices by
 * one-sided Jacobi rotations (Hestenes) in double, for np.linalg.norm's
 * matrix orders 2, -2 and 'nuc'. Not here: matmul (matmul.c), norms (np.lua).
 *   x (..., m, n), m >= n -> U (..., m, n), S (..., n), V (..., n, n), x = U diag(S) V^T */
#include "internal.h"
#include <math.h>

/* x (..., m, n) -> U (..., m, n), S (..., n), V (..., n, n) */
luon_status lu_shape_svd(lu_call *c) {
  const luon_tensor *x = c->in[0];
  if (x->dtype != LUON_DTYPE_F32 && x->dtype != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "svd: x is %s; only float32 and float64 are supported",
                    luon_dtype_name(x->dtype));
  int nd = x->ndim;
  if (nd < 2)
    return lu_error(LUON_ESHAPE, "svd: x must have at least 2 dimensions, got shape %s",
                    lu_shape_str(nd, x->shape));
  int64_t m = x->shape[nd - 2], n = x->shape[nd - 1];
  if (m < n)
    return lu_error(LUON_ESHAPE, "svd: x %s has fewer rows (%lld) than columns (%lld); decompose its transpose",
                    lu_shape_str(nd, x->shape), (long long)m, (long long)n);
  c->nout = 3;
  for (int k = 0; k < 3; k++) {
    memcpy(c->out_shape[k], x->shape, sizeof(int64_t) * (size_t)nd);
    c->out_dtype[k] = x->dtype;
  }
  c->out_ndim[0] = nd;
  c->out_ndim[1] = nd - 1;
  c->out_shape[1][nd - 2] = n;
  c->out_ndim[2] = nd;
  c->out_shape[2][nd - 2] = n;
  return LUON_OK;
}

typedef struct svd_job {
  const luon_tensor *x;
  luon_tensor *const *out;
  int64_t m, n;
  double *work;         /* per thread: u (m n), v (n n), s (n) */
  int64_t per;
} svd_job;

/* Byte offset of matrix b's element (0, 0) in x, from its leading axes. */
static int64_t batch_offset(const luon_tensor *x, int64_t b) {
  int64_t off = 0;
  for (int d = x->ndim - 3; d >= 0; d--) {
    off += (b % x->shape[d]) * x->strides[d];
    b /= x->shape[d];
  }
  return off * (int64_t)luon_dtype_size(x->dtype);
}

static void svd_range(void *ctx, int64_t b0, int64_t b1) {
  const svd_job *j = ctx;
  const luon_tensor *x = j->x;
  int64_t m = j->m, n = j->n, nd = x->ndim, es = luon_dtype_size(x->dtype);
  int64_t rs = x->strides[nd - 2] * es, cs = x->strides[nd - 1] * es;
  double *u = j->work + b0 * j->per, *v = u + m * n, *s = v + n * n;
  for (int64_t b = b0; b < b1 && !lu_interrupted(); b++) {
    const char *p = (const char *)lu_data(x) + batch_offset(x, b);
    for (int64_t r = 0; r < m; r++)
      for (int64_t k = 0; k < n; k++)
        lu_convert(&u[r * n + k], LUON_DTYPE_F64, p + r * rs + k * cs, x->dtype, 1);
    lu_svd_jacobi(u, v, s, m, n);
    lu_convert((char *)lu_data(j->out[0]) + b * m * n * es, x->dtype, u, LUON_DTYPE_F64, m * n);
    lu_convert((char *)lu_data(j->out[1]) + b * n * es, x->dtype, s, LUON_DTYPE_F64, n);
    lu_convert((char *)lu_data(j->out[2]) + b * n * n * es, x->dtype, v, LUON_DTYPE_F64, n * n);
  }
}

luon_status lu_cpu_svd(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int nd = x->ndim;
  svd_job j = {x, c->out, x->shape[nd - 2], x->shape[nd - 1], NULL, 0};
  int64_t nb = lu_numel(nd - 2, x->shape);
  if (nb == 0 || j.n == 0) return LUON_OK;
  j.per = j.m * j.n + j.n * j.n + j.n;
  /* each matrix its own workspace, so that any thread may take any of them */
  j.work = lu_scratch_alloc(sizeof(double) * (size_t)(nb * j.per));
  if (!j.work) return lu_error(LUON_ENOMEM, "svd: out of host memory for the workspace of %lld matrices",
                               (long long)nb);
  lu_parallel_for(nb, 1, svd_range, &j);
  lu_scratch_free(j.work);
  return LUON_OK;
}
