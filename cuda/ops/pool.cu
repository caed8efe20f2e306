/* pool.cu: 2-d and 3-d max and average pooling and their gradients on the GPU with
 * core/ops/pool.c's exact rules (ceil_mode's last-window rule, padding
 * counted per window when count_include_pad, the first maximum taking the
 * gradient). Direct kernels, not cuDNN: cuDNN has no ceil_mode and clips
 * average windows differently. Input and results dense (N,C,H,W) or
 * (N,C,D,H,W); one kernel, a 2-d pooling being a 3-d one of depth 1. */
#include "kernels.cuh"

typedef struct pgeom {
  int64_t N, C, n[3], k[3], s[3], p[3], o[3]; /* input and output sizes, kernel, stride, pad (d, h, w) */
  bool incl_pad;
} pgeom;

/* 2-d: the attrs as lu_shape_<op> validated them (pool.c's pool_geom), as a
 * 3-d pooling of depth 1 */
static void geom2(const lu_call *c, const luon_tensor *x, const luon_tensor *y, pgeom *g) {
  const luon_attrs *a = c->attrs;
  g->N = x->shape[0], g->C = x->shape[1];
  bool global = a->ni > LU_POOL_GLOBAL && a->i[LU_POOL_GLOBAL] != 0;
  bool stride = a->ni > LU_POOL_STRIDE_W, pad = a->ni > LU_POOL_PAD_W;
  g->incl_pad = a->ni <= LU_POOL_COUNT_PAD || a->i[LU_POOL_COUNT_PAD] != 0;
  g->n[0] = g->k[0] = g->s[0] = g->o[0] = 1, g->p[0] = 0;
  for (int d = 1; d < 3; d++) {
    g->n[d] = x->shape[1 + d], g->o[d] = y->shape[1 + d];
    if (global) {
      g->k[d] = g->n[d], g->s[d] = 1, g->p[d] = 0;
    } else {
      g->k[d] = a->i[LU_POOL_KERNEL_H + d - 1];
      g->s[d] = a->i[(stride ? LU_POOL_STRIDE_H : LU_POOL_KERNEL_H) + d - 1];
      g->p[d] = pad ? a->i[LU_POOL_PAD_H + d - 1] : 0;
    }
  }
}

/* 3-d: the attrs as lu_shape_<op> validated them (pool.c's pool3_geom) */
static void geom3(const lu_call *c, const luon_tensor *x, const luon_tensor *y, pgeom *g) {
  const luon_attrs *a = c->attrs;
  g->N = x->shape[0], g->C = x->shape[1];
  bool global = a->ni > LU_POOL3D_GLOBAL && a->i[LU_POOL3D_GLOBAL] != 0;
  bool stride = a->ni > LU_POOL3D_STRIDE_W, pad = a->ni > LU_POOL3D_PAD_W;
  g->incl_pad = a->ni <= LU_POOL3D_COUNT_PAD || a->i[LU_POOL3D_COUNT_PAD] != 0;
  for (int d = 0; d < 3; d++) {
    g->n[d] = x->shape[2 + d], g->o[d] = y->shape[2 + d];
    if (global) {
      g->k[d] = g->n[d], g->s[d] = 1, g->p[d] = 0;
    } else {
      g->k[d] = a->i[LU_POOL3D_KERNEL_D + d];
      g->s[d] = a->i[(stride ? LU_POOL3D_STRIDE_D : LU_POOL3D_KERNEL_D) + d];
      g->p[d] = pad ? a->i[LU_POOL3D_PAD_D + d] : 0;
    }
  }
}

__device__ __forceinline__ void window(int64_t i, int64_t s, int64_t p, int64_t k, int64_t n, bool incl,
                                       int64_t *h0, int64_t *h1, int64_t *count) {
  int64_t a = i * s - p, b = a + k;
  int64_t pb = b < n + p ? b : n + p;
  *h0 = a > 0 ? a : 0;
  *h1 = b < n ? b : n;
  *count = incl ? pb - a : *h1 - *h0;
}

/* one thread per output (n,c,d,i,j); with dy, the gradient is added into dx */
template <class T> __global__ void k_pool(pgeom g, bool is_max, const T *x, T *y, const T *dy, T *dx) {
  LU_GRID_LOOP(o, g.N * g.C * g.o[0] * g.o[1] * g.o[2]) {
    int64_t j = o % g.o[2], i = (o / g.o[2]) % g.o[1], e = (o / (g.o[2] * g.o[1])) % g.o[0];
    int64_t pl = o / (g.o[2] * g.o[1] * g.o[0]);
    int64_t d0, d1, cd, h0, h1, ch, w0, w1, cw;
    window(e, g.s[0], g.p[0], g.k[0], g.n[0], g.incl_pad, &d0, &d1, &cd);
    window(i, g.s[1], g.p[1], g.k[1], g.n[1], g.incl_pad, &h0, &h1, &ch);
    window(j, g.s[2], g.p[2], g.k[2], g.n[2], g.incl_pad, &w0, &w1, &cw);
    double best = -INFINITY, sum = 0;
    int64_t arg = -1, cnt = cd * ch * cw;
    for (int64_t d = d0; d < d1; d++)
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
          int64_t k = ((pl * g.n[0] + d) * g.n[1] + h) * g.n[2] + w;
          double v = (double)x[k];
          if (arg < 0 || LU_POOL_TAKES(v, best)) best = v, arg = k;
          sum += v;
        }
    if (!dx) {
      y[o] = (T)(is_max ? best : cnt > 0 ? sum / (double)cnt : 0);
    } else if (is_max) {
      if (arg >= 0) atomicAdd(&dx[arg], dy[o]);
    } else if (cnt > 0) {
      T dv = (T)((double)dy[o] / (double)cnt);
      for (int64_t d = d0; d < d1; d++)
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) atomicAdd(&dx[((pl * g.n[0] + d) * g.n[1] + h) * g.n[2] + w], dv);
    }
  }
}

static luon_status pool(lu_call *c, bool is_max, bool grad, bool three) {
  const luon_tensor *x = c->in[0];
  luon_tensor *out = c->out[0];
  pgeom g;
  (three ? geom3 : geom2)(c, x, grad ? c->in[1] : out, &g);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  void *xp = NULL, *dyp = NULL;
  lu_block *xb = NULL, *dyb = NULL;
  luon_status s = lu_cuda_dense(x, x->dtype, k.s, &xp, &xb);
  if (s == LUON_OK && grad) s = lu_cuda_dense(c->in[1], x->dtype, k.s, &dyp, &dyb);
  if (s == LUON_OK && grad) s = lu_cuda_zero(lu_data(out), (size_t)out->size * luon_dtype_size(out->dtype), k.s);
  int64_t n = g.N * g.C * g.o[0] * g.o[1] * g.o[2];
  /* an empty input pools to zeros, as pool.c's */
  if (s == LUON_OK && n > 0 && x->size == 0 && !grad)
    s = lu_cuda_zero(lu_data(out), (size_t)out->size * luon_dtype_size(out->dtype), k.s);
  if (s == LUON_OK && n > 0 && x->size > 0) {
    if (x->dtype == LUON_DTYPE_F32)
      k_pool<float><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(g, is_max, (const float *)xp,
          grad ? NULL : (float *)lu_data(out), (const float *)dyp, grad ? (float *)lu_data(out) : NULL);
    else
      k_pool<double><<<lu_blocks(n), LU_THREADS, 0, k.s>>>(g, is_max, (const double *)xp,
          grad ? NULL : (double *)lu_data(out), (const double *)dyp, grad ? (double *)lu_data(out) : NULL);
  }
  lu_cuda_scratch_free(xb);
  lu_cuda_scratch_free(dyb);
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_max_pool2d(lu_call *c) { return pool(c, true, false, false); }
luon_status lu_cuda_avg_pool2d(lu_call *c) { return pool(c, false, false, false); }
luon_status lu_cuda_max_pool2d_grad(lu_call *c) { return pool(c, true, true, false); }
luon_status lu_cuda_avg_pool2d_grad(lu_call *c) { return pool(c, false, true, false); }
luon_status lu_cuda_max_pool3d(lu_call *c) { return pool(c, true, false, true); }
luon_status lu_cuda_avg_pool3d(lu_call *c) { return pool(c, false, false, true); }
luon_status lu_cuda_max_pool3d_grad(lu_call *c) { return pool(c, true, true, true); }
luon_status lu_cuda_avg_pool3d_grad(lu_call *c) { return pool(c, false, true, true); }
