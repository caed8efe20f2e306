/* linalg.cu: svd on the GPU as core/ops/linalg.c computes it (one-sided
 * Jacobi in double, lu_svd_jacobi of core/internal.h): one thread per
 * matrix, in a double workspace. Correctness over speed: it serves
 * np.linalg.norm's matrix orders on small matrices. */
#include "kernels.cuh"

typedef struct svdp {
  lu_space s;          /* the batch: x's leading axes; op 0 x (its matrix at each) */
  int64_t m, n, rs, cs; /* rows, columns, x's element strides along them */
  int32_t dt;
  void *u, *sv, *v;    /* the outputs, dense */
  double *work;        /* per matrix: u (m n), v (n n), s (n) */
} svdp;

__global__ void k_svd(svdp p) {
  LU_GRID_LOOP(b, p.s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, b, o);
    int64_t m = p.m, n = p.n;
    double *u = p.work + b * (m * n + n * n + n), *v = u + m * n, *s = v + n * n;
    for (int64_t r = 0; r < m; r++)
      for (int64_t k = 0; k < n; k++) u[r * n + k] = lu_ld<double>(p.s.p[0], p.dt, o[0] + r * p.rs + k * p.cs);
    lu_svd_jacobi(u, v, s, m, n);
    for (int64_t i = 0; i < m * n; i++) lu_st<double>(p.u, p.dt, b * m * n + i, u[i]);
    for (int64_t i = 0; i < n; i++) lu_st<double>(p.sv, p.dt, b * n + i, s[i]);
    for (int64_t i = 0; i < n * n; i++) lu_st<double>(p.v, p.dt, b * n * n + i, v[i]);
  }
}

luon_status lu_cuda_svd(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int nd = x->ndim;
  svdp p;
  memset(&p, 0, sizeof p);
  p.m = x->shape[nd - 2];
  p.n = x->shape[nd - 1];
  p.rs = x->strides[nd - 2];
  p.cs = x->strides[nd - 1];
  p.dt = x->dtype;
  p.u = lu_data(c->out[0]);
  p.sv = lu_data(c->out[1]);
  p.v = lu_data(c->out[2]);
  int64_t shape[LU_MAXD];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)nd);
  shape[nd - 2] = shape[nd - 1] = 1;
  lu_space_init(&p.s, nd, shape);
  lu_space_add(&p.s, x);
  lu_space_done(&p.s);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (p.s.n > 0 && p.n > 0) {
    lu_block *w = NULL;
    s = lu_cuda_scratch(k.id, sizeof(double) * (size_t)(p.s.n * (p.m * p.n + p.n * p.n + p.n)), &w);
    if (s == LUON_OK) {
      p.work = (double *)w->ptr;
      k_svd<<<lu_blocks(p.s.n), LU_THREADS, 0, k.s>>>(p);
      lu_cuda_scratch_free(w);
    }
  }
  return lu_cuda_end(&k, s);
}
