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

/* One matrix: u (m, n) holds x on entry and U on exit, v (n, n) gets V, s (n)
 * S; row-major doubles. Rotations until every pair of columns of u is
 * orthogonal to rounding (at most 64 sweeps), then the columns' norms are S,
 * sorted descending with their columns. A zero singular value leaves a zero
 * column in U. */
static void jacobi(double *u, double *v, double *s, int64_t m, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) v[i * n + j] = i == j;
  for (int sweep = 0; sweep < 64; sweep++) {
    bool rotated = false;
    for (int64_t p = 0; p < n - 1; p++)
      for (int64_t q = p + 1; q < n; q++) {
        double a = 0, b = 0, g = 0;
        for (int64_t i = 0; i < m; i++) {
          double up = u[i * n + p], uq = u[i * n + q];
          a += up * up;
          b += uq * uq;
          g += up * uq;
        }
        if (g == 0 || fabs(g) <= 1e-15 * sqrt(a * b)) continue;
        rotated = true;
        double zeta = (b - a) / (2 * g);
        double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
        double cs = 1 / sqrt(1 + t * t), sn = cs * t;
        for (int64_t i = 0; i < m; i++) {
          double up = u[i * n + p], uq = u[i * n + q];
          u[i * n + p] = cs * up - sn * uq;
          u[i * n + q] = sn * up + cs * uq;
        }
        for (int64_t i = 0; i < n; i++) {
          double vp = v[i * n + p], vq = v[i * n + q];
          v[i * n + p] = cs * vp - sn * vq;
          v[i * n + q] = sn * vp + cs * vq;
        }
      }
    if (!rotated) break;
  }
  for (int64_t j = 0; j < n; j++) {
    double r = 0;
    for (int64_t i = 0; i < m; i++) r += u[i * n + j] * u[i * n + j];
    s[j] = sqrt(r);
    for (int64_t i = 0; i < m; i++) u[i * n + j] = s[j] > 0 ? u[i * n + j] / s[j] : 0;
  }
  for (int64_t j = 0; j < n; j++) { /* selection sort, descending */
    int64_t best = j;
    for (int64_t k = j + 1; k < n; k++)
      if (s[k] > s[best]) best = k;
    if (best == j) continue;
    double t = s[j]; s[j] = s[best]; s[best] = t;
    for (int64_t i = 0; i < m; i++) { t = u[i * n + j]; u[i * n + j] = u[i * n + best]; u[i * n + best] = t; }
    for (int64_t i = 0; i < n; i++) { t = v[i * n + j]; v[i * n + j] = v[i * n + best]; v[i * n + best] = t; }
  }
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
    jacobi(u, v, s, m, n);
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
