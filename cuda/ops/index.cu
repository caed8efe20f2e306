/* index.cu: take and take_grad (gather and scatter-add along an axis or
 * over the flattened array), concatenate and stack (strided converting
 * copies into slabs of the result) on the GPU, as core/ops/index.c. take's
 * raise mode checks the indices after the gather, which waits for the
 * stream and names the first bad index; clip and wrap never wait. */
#include "kernels.cuh"

typedef struct tplan {
  int ax, k, nda;                     /* axis (-1 flattened), index dims, dims of a */
  int64_t n;                          /* elements of the gathered side (y or dy) */
  int64_t yshape[LU_MAXD], yst[LU_MAXD]; /* the gathered side: shape, strides */
  int64_t ashape[LU_MAXD], ast[LU_MAXD]; /* a (or da) */
  int64_t ishape[LU_MAXD], ist[LU_MAXD]; /* indices */
  const void *idx;
  int32_t idt;
  int64_t len;
  int mode;
  unsigned long long *bad;            /* raise mode: [0] the first element (of the gathered
                                         side) whose index is out of range, [1] that index */
} tplan;

/* Offsets into a and into the gathered side for element o of the latter;
 * false (offsets of index 0) when the index is out of range in raise mode,
 * its value then in *raw. */
__device__ __forceinline__ bool take_offsets(const tplan &p, int64_t o, int64_t *ao, int64_t *yo,
                                             int64_t *raw = NULL) {
  int ndy = p.ax < 0 ? p.k : p.nda - 1 + p.k;
  int64_t q = o, io = 0, a = 0, y = 0, coord[LU_MAXD];
  for (int d = ndy - 1; d >= 0; d--) {
    coord[d] = q % p.yshape[d];
    q /= p.yshape[d];
    y += coord[d] * p.yst[d];
  }
  int a0 = p.ax < 0 ? 0 : p.ax;
  for (int d = 0; d < p.k; d++) io += coord[a0 + d] * p.ist[d];
  int64_t v = lu_ld<int64_t>(p.idx, p.idt, io), L = p.len;
  if (raw) *raw = v;
  bool ok = true;
  if (p.mode == 0) {
    v = v < 0 ? 0 : v >= L ? L - 1 : v;
  } else if (p.mode == 1) {
    v %= L;
    if (v < 0) v += L;
  } else {
    if (v < -L || v >= L) ok = false, v = 0;
    if (v < 0) v += L;
  }
  if (p.ax < 0) { /* flattened: unravel v over a's shape */
    for (int d = p.nda - 1; d >= 0; d--) {
      a += (v % p.ashape[d]) * p.ast[d];
      v /= p.ashape[d];
    }
  } else {
    for (int d = 0; d < p.ax; d++) a += coord[d] * p.ast[d];
    a += v * p.ast[p.ax];
    for (int d = p.ax + 1; d < p.nda; d++) a += coord[d - 1 + p.k] * p.ast[d];
  }
  *ao = a;
  *yo = y;
  return ok;
}

template <class T> __global__ void k_take(tplan p, const T *a, T *y) {
  LU_GRID_LOOP(o, p.n) {
    int64_t ao, yo;
    if (!take_offsets(p, o, &ao, &yo) && p.bad) atomicMin(p.bad, (unsigned long long)o);
    y[yo] = a[ao];
  }
}

template <class T> __global__ void k_take_grad(tplan p, const T *dy, T *da) {
  LU_GRID_LOOP(o, p.n) {
    int64_t ao, yo;
    if (!take_offsets(p, o, &ao, &yo) && p.bad) atomicMin(p.bad, (unsigned long long)o);
    atomicAdd(&da[ao], dy[yo]);
  }
}

/* raise mode, one thread: the index value of the first bad element into bad[1].
 * The smallest bad element has the first bad index in the indices' row-major
 * order (the CPU's read_indices reports that one). */
__global__ void k_bad_index(tplan p) {
  unsigned long long o = p.bad[0];
  if (o == ~0ull) return;
  int64_t ao, yo, raw = 0;
  take_offsets(p, (int64_t)o, &ao, &yo, &raw);
  p.bad[1] = (unsigned long long)raw;
}

/* a the full array, g the gathered side (y or dy), ax from scratch_i[0] */
static void plan(lu_call *c, const luon_tensor *a, const luon_tensor *g, const luon_tensor *idx,
                 tplan *p) {
  memset(p, 0, sizeof *p);
  p->ax = (int)c->scratch_i[0];
  p->k = idx->ndim;
  p->nda = a->ndim;
  p->n = g->size;
  for (int d = 0; d < g->ndim; d++) p->yshape[d] = g->shape[d], p->yst[d] = g->strides[d];
  for (int d = 0; d < a->ndim; d++) p->ashape[d] = a->shape[d], p->ast[d] = a->strides[d];
  for (int d = 0; d < idx->ndim; d++) p->ishape[d] = idx->shape[d], p->ist[d] = idx->strides[d];
  p->idx = lu_data(idx);
  p->idt = idx->dtype;
  p->len = p->ax < 0 ? a->size : a->shape[p->ax];
  p->mode = (int)c->attrs->i[LU_TAKE_MODE];
}

static luon_status take_run(lu_call *c, bool grad) {
  const luon_tensor *idx = c->in[1];
  luon_tensor *out = c->out[0];
  const luon_tensor *a = grad ? out : c->in[0], *g = grad ? c->in[0] : out;
  tplan p;
  plan(c, a, g, idx, &p);
  int32_t es = luon_dtype_size(out->dtype);
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  lu_block *flag = NULL;
  if (grad) s = lu_cuda_zero(lu_data(out), (size_t)out->size * es, k.s);
  if (s == LUON_OK && p.n > 0 && p.len > 0) {
    if (p.mode == 2 && (s = lu_cuda_scratch(k.id, 2 * sizeof(unsigned long long), &flag)) == LUON_OK) {
      p.bad = (unsigned long long *)flag->ptr;
      cudaError_t e = cudaMemsetAsync(p.bad, 0xff, 2 * sizeof(unsigned long long), k.s); /* none yet */
      if (e != cudaSuccess) s = lu_cuda_fail(e, "take: cudaMemsetAsync");
    }
    if (s == LUON_OK) {
      unsigned nb = lu_blocks(p.n);
      if (grad) {
        LU_DISPATCH_FLOAT(out->dtype, T,
                          (k_take_grad<T><<<nb, LU_THREADS, 0, k.s>>>(p, (const T *)lu_data(g), (T *)lu_data(out))),
                          s = lu_cuda_seterr(LUON_EDTYPE, "take_grad: float32 or float64 only"))
      } else if (es == 1) {
        k_take<uint8_t><<<nb, LU_THREADS, 0, k.s>>>(p, (const uint8_t *)lu_data(a), (uint8_t *)lu_data(out));
      } else if (es == 2) {
        k_take<uint16_t><<<nb, LU_THREADS, 0, k.s>>>(p, (const uint16_t *)lu_data(a), (uint16_t *)lu_data(out));
      } else if (es == 4) {
        k_take<uint32_t><<<nb, LU_THREADS, 0, k.s>>>(p, (const uint32_t *)lu_data(a), (uint32_t *)lu_data(out));
      } else {
        k_take<uint64_t><<<nb, LU_THREADS, 0, k.s>>>(p, (const uint64_t *)lu_data(a), (uint64_t *)lu_data(out));
      }
    }
    if (s == LUON_OK && flag) { /* raise: read the check back (waits for this stream) */
      unsigned long long bad[2] = {~0ull, 0};
      k_bad_index<<<1, 1, 0, k.s>>>(p);
      cudaError_t e = cudaGetLastError();
      if (e == cudaSuccess) e = cudaMemcpyAsync(bad, flag->ptr, sizeof bad, cudaMemcpyDeviceToHost, k.s);
      if (e == cudaSuccess) e = cudaStreamSynchronize(k.s);
      if (e != cudaSuccess) s = lu_cuda_fail(e, "take: reading the index check");
      else if (bad[0] != ~0ull && p.ax < 0)
        s = lu_cuda_seterr(LUON_EINVAL, "%s: index %lld is out of bounds for size %lld", k.op,
                           (long long)bad[1], (long long)p.len);
      else if (bad[0] != ~0ull)
        s = lu_cuda_seterr(LUON_EINVAL, "%s: index %lld is out of bounds for axis %d with size %lld",
                           k.op, (long long)bad[1], p.ax, (long long)p.len);
    }
  }
  lu_cuda_scratch_free(flag);
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_take(lu_call *c) { return take_run(c, false); }
luon_status lu_cuda_take_grad(lu_call *c) { return take_run(c, true); }

/* ---- concatenate and stack ----------------------------------------------------- */

/* Input x copied into the slab of y at element offset `off` with strides st. */
static luon_status into_slab(luon_tensor *y, const luon_tensor *x, int64_t off, const int64_t *st,
                             cudaStream_t s) {
  if (x->size == 0) return LUON_OK;
  lu_space sp;
  lu_space_init(&sp, x->ndim, x->shape);
  lu_space_add_raw(&sp, (char *)lu_data(y) + off * luon_dtype_size(y->dtype), y->dtype, st);
  lu_space_add(&sp, x);
  lu_space_done(&sp);
  return lu_cuda_copy_space(&sp, s);
}

luon_status lu_cuda_concatenate(lu_call *c) {
  luon_tensor *y = c->out[0];
  int ax = (int)c->scratch_i[0];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  int64_t pos = 0;
  for (int j = 0; j < c->nin && s == LUON_OK; j++) {
    s = into_slab(y, c->in[j], pos * y->strides[ax], y->strides, k.s);
    pos += c->in[j]->shape[ax];
  }
  return lu_cuda_end(&k, s);
}

luon_status lu_cuda_stack(lu_call *c) {
  luon_tensor *y = c->out[0];
  int ax = (int)c->scratch_i[0];
  int64_t st[LU_MAXD];
  for (int d = 0, j = 0; d < y->ndim; d++)
    if (d != ax) st[j++] = y->strides[d];
  lu_cuda_ctx k;
  LU_TRY(lu_cuda_begin(c, &k));
  luon_status s = LUON_OK;
  for (int j = 0; j < c->nin && s == LUON_OK; j++) s = into_slab(y, c->in[j], j * y->strides[ax], st, k.s);
  return lu_cuda_end(&k, s);
}
