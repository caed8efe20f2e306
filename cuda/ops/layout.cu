/* layout.cu: pad, pad_grad, diag, tril and triu, one_hot and
 * sequence_mask on the GPU, as core/ops/layout.c: one thread per output
 * element, moving bytes (any dtype, 16-bit ones included) where the CPU
 * does; pad_grad gathers (no atomics) where the CPU scatters. */
#include "kernels.cuh"

/* An output element by its byte size: the element types the copies use. */
#define LU_DISPATCH_BYTES(ES, T, STMT)                                              \
  switch (ES) {                                                                     \
  case 1: { typedef uint8_t T; STMT; } break;                                       \
  case 2: { typedef uint16_t T; STMT; } break;                                      \
  case 4: { typedef uint32_t T; STMT; } break;                                      \
  default: { typedef uint64_t T; STMT; } break;                                     \
  }

/* Shapes and strides of up to LU_MAXD axes, passed by value. */
typedef struct lplan {
  int nd;
  int64_t n;                                /* output elements */
  int64_t ys[LU_MAXD];                      /* the output's shape (dense) */
  int64_t xs[LU_MAXD], xst[LU_MAXD];        /* the input's shape and strides */
  int64_t w[2 * LU_MAXD];                   /* pad: (before, after) per axis */
  int64_t k, a, b, c;                       /* op's integers */
  int mode;
  double v;                                 /* the constant */
  int32_t dt;                               /* the output's dtype */
} lplan;

static void plan_of(lplan *p, const luon_tensor *x, const luon_tensor *y) {
  memset(p, 0, sizeof *p);
  p->nd = y->ndim;
  p->n = y->size;
  for (int d = 0; d < y->ndim; d++) p->ys[d] = y->shape[d];
  for (int d = 0; d < x->ndim; d++) p->xs[d] = x->shape[d], p->xst[d] = x->strides[d];
  p->dt = y->dtype;
}

/* ---- pad ------------------------------------------------------------------- */

template <class T> __global__ void k_pad(lplan p, const T *x, T *y) {
  LU_GRID_LOOP(j, p.n) {
    int64_t q = j, off = 0;
    bool outside = false;
    for (int d = p.nd - 1; d >= 0; d--) {
      int64_t s = lu_pad_src(q % p.ys[d], p.xs[d], p.w[2 * d], p.mode);
      q /= p.ys[d];
      if (s < 0) outside = true;
      else off += s * p.xst[d];
    }
    if (outside) lu_st(y, p.dt, j, p.v);
    else y[j] = x[off];
  }
}

luon_status lu_cuda_pad(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  lplan p;
  plan_of(&p, x, y);
  for (int d = 0; d < 2 * x->ndim; d++) p.w[d] = c->attrs->i[LU_PAD_WIDTHS + d];
  p.mode = (int)c->attrs->i[LU_PAD_MODE];
  p.v = c->attrs->f[LU_PAD_VALUE];
  if (p.dt == LUON_DTYPE_F16 || p.dt == LUON_DTYPE_BF16) p.v = (double)(float)p.v; /* as the CPU, through float32 */
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (p.n > 0)
    LU_DISPATCH_BYTES(luon_dtype_size(y->dtype), T,
                      (k_pad<T><<<lu_blocks(p.n), LU_THREADS, 0, k.s>>>(p, (const T *)lu_data(x), (T *)lu_data(y))))
  return lu_cuda_end(&k, LUON_OK);
}

/* ---- pad_grad: dx (outer, n, inner) from dy (outer, N, inner) along axis a -- */

__global__ void k_pad_grad(lplan p, const void *dy, int32_t ddt, void *dx) {
  LU_GRID_LOOP(j, p.n) {
    int64_t q = j, base = 0, i = 0;
    for (int d = p.nd - 1; d >= 0; d--) {
      int64_t cd = q % p.ys[d];
      q /= p.ys[d];
      if (d == p.a) i = cd;
      else base += cd * p.xst[d];
    }
    int64_t N = p.xs[p.a], n = p.ys[p.a], st = p.xst[p.a];
    double s = lu_ld<double>(dy, ddt, base + (i + p.b) * st);
    for (int64_t q2 = 0; q2 < N; q2++) {
      if (q2 == p.b) q2 += n; /* the middle is the term above */
      if (q2 >= N) break;
      if (lu_pad_src(q2, n, p.b, p.mode) == i) s += lu_ld<double>(dy, ddt, base + q2 * st);
    }
    lu_st(dx, p.dt, j, s);
  }
}

luon_status lu_cuda_pad_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0];
  luon_tensor *dx = c->out[0];
  lplan p;
  plan_of(&p, dy, dx);
  p.a = c->scratch_i[0];
  p.b = c->attrs->i[LU_PADG_BEFORE];
  p.mode = (int)c->attrs->i[LU_PADG_MODE];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (p.n > 0) k_pad_grad<<<lu_blocks(p.n), LU_THREADS, 0, k.s>>>(p, lu_data(dy), dy->dtype, lu_data(dx));
  return lu_cuda_end(&k, LUON_OK);
}

/* ---- diag ------------------------------------------------------------------ */

/* build (a = 1): y (rows, cols) dense, x 1-d; else y (len,) from x 2-d.
 * k, b, c: the diagonal's first row and column (r0 in k, c0 in b) */
template <class T> __global__ void k_diag(lplan p, const T *x, T *y) {
  LU_GRID_LOOP(j, p.n) {
    if (p.a) {
      int64_t r = j / p.ys[1], cl = j % p.ys[1], i = r - p.k;
      bool on = i >= 0 && cl - p.b == i && i < p.xs[0];
      y[j] = on ? x[i * p.xst[0]] : (T)0;
    } else {
      y[j] = x[(j + p.k) * p.xst[0] + (j + p.b) * p.xst[1]];
    }
  }
}

luon_status lu_cuda_diag(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  lplan p;
  plan_of(&p, x, y);
  p.a = c->scratch_i[0];
  p.k = c->scratch_i[3];
  p.b = c->scratch_i[4];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (p.n > 0)
    LU_DISPATCH_BYTES(luon_dtype_size(y->dtype), T,
                      (k_diag<T><<<lu_blocks(p.n), LU_THREADS, 0, k.s>>>(p, (const T *)lu_data(x), (T *)lu_data(y))))
  return lu_cuda_end(&k, LUON_OK);
}

/* ---- tril, triu -------------------------------------------------------------- */

/* a: 1 for tril, 0 for triu; x 1-d read as every row */
template <class T> __global__ void k_tri(lplan p, int xnd, const T *x, T *y) {
  LU_GRID_LOOP(j, p.n) {
    int64_t C = p.ys[p.nd - 1], R = p.ys[p.nd - 2];
    int64_t jj = j % C, i = (j / C) % R;
    bool keep = p.a ? jj - i <= p.k : jj - i >= p.k;
    int64_t q = j, off = 0;
    if (xnd == 1) {
      off = jj * p.xst[0];
    } else {
      for (int d = p.nd - 1; d >= 0; d--) {
        off += (q % p.ys[d]) * p.xst[d];
        q /= p.ys[d];
      }
    }
    y[j] = keep ? x[off] : (T)0;
  }
}

static luon_status tri(lu_call *c, int lower) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  lplan p;
  plan_of(&p, x, y);
  p.a = lower;
  p.k = c->attrs->i[LU_TRI_K];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (p.n > 0)
    LU_DISPATCH_BYTES(luon_dtype_size(y->dtype), T,
                      (k_tri<T><<<lu_blocks(p.n), LU_THREADS, 0, k.s>>>(p, x->ndim, (const T *)lu_data(x), (T *)lu_data(y))))
  return lu_cuda_end(&k, LUON_OK);
}
luon_status lu_cuda_tril(lu_call *c) { return tri(c, 1); }
luon_status lu_cuda_triu(lu_call *c) { return tri(c, 0); }

/* ---- one_hot ---------------------------------------------------------------- */

/* y (indices..., depth): element j is ON where column j % depth is the
 * truncated index of indices element j / depth (NaN, outside: none) */
__global__ void k_one_hot(lu_space s, lplan p, double on, double off, void *y) {
  LU_GRID_LOOP(j, p.n) {
    int64_t o[LU_MAX_OPS];
    lu_offsets(s, j / p.k, o);
    double v = lu_ld<double>(s.p[0], s.dt[0], o[0]);
    bool hot = v > -1.0 && v < (double)p.k && (int64_t)v == j % p.k;
    lu_st(y, p.dt, j, hot ? on : off);
  }
}

luon_status lu_cuda_one_hot(lu_call *c) {
  const luon_tensor *idx = c->in[0];
  luon_tensor *y = c->out[0];
  lplan p;
  plan_of(&p, idx, y);
  p.k = c->attrs->i[LU_ONE_HOT_DEPTH];
  double on = c->attrs->f[LU_ONE_HOT_ON], off = c->attrs->f[LU_ONE_HOT_OFF];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  if (p.n > 0) {
    lu_space s;
    lu_space_init(&s, idx->ndim, idx->shape);
    lu_space_add(&s, idx);
    lu_space_done(&s); /* merging keeps row-major order */
    k_one_hot<<<lu_blocks(p.n), LU_THREADS, 0, k.s>>>(s, p, on, off, lu_data(y));
  }
  return lu_cuda_end(&k, LUON_OK);
}

/* ---- sequence_mask ------------------------------------------------------------ */

/* y (dense, data copied in): steps t >= length[b] set to the value; a: the
 * time axis, k: T, b: B, c: the elements after the first two axes */
__global__ void k_seqmask(lplan p, const void *len, int32_t ldt, int64_t lst, void *y) {
  LU_GRID_LOOP(j, p.n) {
    int64_t r = j / p.c, t, b;
    if (p.a == 0) t = r / p.b, b = r % p.b;
    else b = r / p.k, t = r % p.k;
    if (t >= lu_ld<int64_t>(len, ldt, b * lst)) lu_st(y, p.dt, j, p.v);
  }
}

luon_status lu_cuda_sequence_mask(lu_call *c) {
  const luon_tensor *x = c->in[0], *len = c->in[1];
  luon_tensor *y = c->out[0];
  lplan p;
  plan_of(&p, x, y);
  p.a = c->attrs->i[LU_SEQMASK_AXIS];
  p.k = y->shape[p.a];
  p.b = y->shape[1 - p.a];
  p.v = c->attrs->f[LU_SEQMASK_VALUE];
  if (p.dt == LUON_DTYPE_F16 || p.dt == LUON_DTYPE_BF16) p.v = (double)(float)p.v; /* as the CPU, through float32 */
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  if (p.n > 0) {
    p.c = p.n / (p.k * p.b);
    lu_space sp;
    lu_space_init(&sp, y->ndim, y->shape);
    lu_space_add(&sp, y);
    lu_space_add(&sp, x);
    lu_space_done(&sp);
    s = lu_cuda_copy_space(&sp, k.s);
    if (s == LUON_OK)
      k_seqmask<<<lu_blocks(p.n), LU_THREADS, 0, k.s>>>(p, lu_data(len), len->dtype, len->strides[0], lu_data(y));
  }
  return lu_cuda_end(&k, s);
}
