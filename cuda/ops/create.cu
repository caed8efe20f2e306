/* create.cu: full, arange, linspace and eye on the GPU: element j's value
 * computed in double as core/ops/create.c does, stored as the result's
 * dtype with the CPU's conversion rules. */
#include "kernels.cuh"

enum { F_FULL, F_ARANGE, F_LINSPACE, F_EYE };

typedef struct fillp {
  int kind;
  double a, b, step;      /* full: a; arange: a + j step; linspace: a, b, step */
  int64_t num, m, k;      /* linspace: num, endpoint in k; eye: M, k */
} fillp;

__global__ void k_fill(lu_space s, fillp f) {
  LU_GRID_LOOP(j, s.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, j, o);
    double v;
    switch (f.kind) {
    case F_FULL: v = f.a; break;
    /* no fused multiply-add: the CPU rounds the product, then the sum */
    case F_ARANGE: v = __dadd_rn(f.a, __dmul_rn((double)j, f.step)); break;
    case F_LINSPACE: {
      int64_t div = f.k ? f.num - 1 : f.num;
      if (div <= 0) v = f.a;
      else if (f.k && j == f.num - 1) v = f.b;
      else v = __dadd_rn(f.a, __dmul_rn((double)j, (f.b - f.a) / (double)div));
      break;
    }
    default: v = j % f.m - j / f.m == f.k ? 1.0 : 0.0; break;
    }
    lu_st(s.p[0], s.dt[0], o[0], v);
  }
}

static luon_status fill(lu_call *c, fillp f) {
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_tensor *y = c->out[0];
  if (y->size > 0) {
    lu_space s;
    lu_space_init(&s, y->ndim, y->shape);
    lu_space_add(&s, y);
    lu_space_done(&s); /* merging keeps row-major order: j stays the element's index */
    k_fill<<<lu_blocks(s.n), LU_THREADS, 0, k.s>>>(s, f);
  }
  return lu_cuda_end(&k, LUON_OK);
}

luon_status lu_cuda_full(lu_call *c) {
  fillp f = {F_FULL, c->attrs->f[LU_FULL_VALUE], 0, 0, 0, 0, 0};
  return fill(c, f);
}

luon_status lu_cuda_arange(lu_call *c) {
  fillp f = {F_ARANGE, c->attrs->f[LU_ARANGE_START], 0, c->attrs->f[LU_ARANGE_STEP], 0, 0, 0};
  return fill(c, f);
}

luon_status lu_cuda_linspace(lu_call *c) {
  const luon_attrs *a = c->attrs;
  int64_t endpoint = a->ni > LU_LINSPACE_ENDPOINT ? a->i[LU_LINSPACE_ENDPOINT] != 0 : 1;
  fillp f = {F_LINSPACE, a->f[LU_LINSPACE_START], a->f[LU_LINSPACE_STOP], 0, c->out[0]->shape[0], 0, endpoint};
  return fill(c, f);
}

luon_status lu_cuda_eye(lu_call *c) {
  fillp f = {F_EYE, 0, 0, 0, 0, c->out[0]->shape[1], c->attrs->i[LU_EYE_K]};
  if (f.m == 0) return LUON_OK; /* (N, 0): nothing to write */
  return fill(c, f);
}
