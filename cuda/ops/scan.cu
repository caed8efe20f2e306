/* scan.cu: cumsum and cumprod along one axis on the GPU, as core/ops/scan.c
 * computes them (floats in double, integers in wrapping int64, the result's
 * dtype choosing). One thread per lane walks it in order: correctness over
 * speed. */
#include "kernels.cuh"

typedef struct scanp {
  lu_space s;         /* the lanes: x's shape with the axis set to 1; op 0 y, op 1 x */
  int64_t n;          /* along the axis */
  int64_t ys, xs;     /* element strides along the axis */
  bool prod, rev;
} scanp;

template <class A> __global__ void k_scan(scanp p) {
  LU_GRID_LOOP(i, p.s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(p.s, i, o);
    A v = p.prod ? (A)1 : (A)0;
    for (int64_t j = 0; j < p.n; j++) {
      int64_t k = p.rev ? p.n - 1 - j : j;
      A t = lu_ld<A>(p.s.p[1], p.s.dt[1], o[1] + k * p.xs);
      if (lu_is_int<A>::v)
        v = p.prod ? (A)((uint64_t)(int64_t)v * (uint64_t)(int64_t)t) : (A)((uint64_t)(int64_t)v + (uint64_t)(int64_t)t);
      else
        v = p.prod ? v * t : v + t;
      lu_st<A>(p.s.p[0], p.s.dt[0], o[0] + k * p.ys, v);
    }
  }
}

/* scratch_i[0]: the axis, normalised (lu_shape_<op> in scan.c) */
static luon_status scan_run(lu_call *c, bool prod) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  int ax = (int)c->scratch_i[0];
  scanp p;
  memset(&p, 0, sizeof p);
  int64_t shape[LU_MAXD];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  p.n = shape[ax];
  shape[ax] = 1;
  lu_space_init(&p.s, x->ndim, shape);
  lu_space_add(&p.s, y);
  lu_space_add(&p.s, x);
  lu_space_done(&p.s);
  p.ys = y->strides[ax];
  p.xs = x->strides[ax];
  p.prod = prod;
  p.rev = c->attrs->ni > LU_SCAN_REVERSE && c->attrs->i[LU_SCAN_REVERSE] != 0;
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (y->size > 0) {
    bool fl = y->dtype == LUON_DTYPE_F32 || y->dtype == LUON_DTYPE_F64 || y->dtype == LUON_DTYPE_F16 ||
              y->dtype == LUON_DTYPE_BF16;
    if (fl) k_scan<double><<<lu_blocks(p.s.n), LU_THREADS, 0, k.s>>>(p);
    else k_scan<int64_t><<<lu_blocks(p.s.n), LU_THREADS, 0, k.s>>>(p);
  }
  return lu_cuda_end(&k, LUON_OK);
}

luon_status lu_cuda_cumsum(lu_call *c) { return scan_run(c, false); }
luon_status lu_cuda_cumprod(lu_call *c) { return scan_run(c, true); }
