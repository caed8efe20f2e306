/* linalg.cu: svd on the GPU as core/ops/linalg.c computes it (one-sided
 * Jacobi in double, the same rotations in the same order): one thread per
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
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) v[i * n + j] = i == j;
    for (int sweep = 0; sweep < 64; sweep++) {
      bool rotated = false;
      for (int64_t q0 = 0; q0 < n - 1; q0++)
        for (int64_t q = q0 + 1; q < n; q++) {
          int64_t pc = q0;
          double a = 0, bb = 0, g = 0;
          for (int64_t i = 0; i < m; i++) {
            double up = u[i * n + pc], uq = u[i * n + q];
            a += up * up;
            bb += uq * uq;
            g += up * uq;
          }
          if (g == 0 || fabs(g) <= 1e-15 * sqrt(a * bb)) continue;
          rotated = true;
          double zeta = (bb - a) / (2 * g);
          double t = (zeta >= 0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1 + zeta * zeta));
          double c = 1 / sqrt(1 + t * t), sn = c * t;
          for (int64_t i = 0; i < m; i++) {
            double up = u[i * n + pc], uq = u[i * n + q];
            u[i * n + pc] = c * up - sn * uq;
            u[i * n + q] = sn * up + c * uq;
          }
          for (int64_t i = 0; i < n; i++) {
            double vp = v[i * n + pc], vq = v[i * n + q];
            v[i * n + pc] = c * vp - sn * vq;
            v[i * n + q] = sn * vp + c * vq;
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
    for (int64_t j = 0; j < n; j++) {
      int64_t best = j;
      for (int64_t k = j + 1; k < n; k++)
        if (s[k] > s[best]) best = k;
      if (best == j) continue;
      double t = s[j]; s[j] = s[best]; s[best] = t;
      for (int64_t i = 0; i < m; i++) { t = u[i * n + j]; u[i * n + j] = u[i * n + best]; u[i * n + best] = t; }
      for (int64_t i = 0; i < n; i++) { t = v[i * n + j]; v[i * n + j] = v[i * n + best]; v[i * n + best] = t; }
    }
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
