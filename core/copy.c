/* copy.c: the runtime's strided, converting copy on the CPU: dst (any
 * strides) <- src (the same shape, any strides and dtype), as
 * luon_tensor_copy and the copy/astype op use it; and its primitives: a
 * strided converting row read (lu_gather) and row write (lu_scatter),
 * which the elementwise ops use on strided operands, and the write of a
 * range of elements by row-major index (lu_put_range), which the ops that
 * make values by index (create.c, random.c) use on a strided out=. The
 * CUDA backend's copy is its vtable's `copy`; tensor.c picks the device's. */
#include "internal.h"

/* Threads from 2 * grain elements (as the elementwise ops): waking the pool
 * costs ~10 us, so a plain copy waits for 256K elements, a converting one
 * (slower per element) for 32K. */
#define GRAIN_PLAIN (1 << 17)
#define GRAIN_CONVERT (1 << 14)
#define PAR_BLOCK 1024 /* flat parallel pieces start on multiples of this */

void lu_gather(void *dst, int32_t ddt, const char *src, int32_t sdt, int64_t stride, int64_t n) {
  int64_t es = luon_dtype_size(sdt);
  if (stride == es) {
    lu_convert(dst, ddt, src, sdt, n);
    return;
  }
  _Alignas(16) char tmp[LU_ROW_CHUNK * 8];
  char *d = ddt == sdt ? dst : tmp;
  switch (es) {
  case 1: for (int64_t i = 0; i < n; i++) d[i] = src[i * stride]; break;
  case 2: for (int64_t i = 0; i < n; i++) memcpy(d + 2 * i, src + i * stride, 2); break;
  case 4: for (int64_t i = 0; i < n; i++) memcpy(d + 4 * i, src + i * stride, 4); break;
  default: for (int64_t i = 0; i < n; i++) memcpy(d + 8 * i, src + i * stride, 8); break;
  }
  if (d == tmp) lu_convert(dst, ddt, tmp, sdt, n);
}

void lu_scatter(char *dst, int64_t stride, const char *src, int32_t es, int64_t n) {
  switch (es) {
  case 1: for (int64_t i = 0; i < n; i++) dst[i * stride] = src[i]; break;
  case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + i * stride, src + 2 * i, 2); break;
  case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * stride, src + 4 * i, 4); break;
  default: for (int64_t i = 0; i < n; i++) memcpy(dst + i * stride, src + 8 * i, 8); break;
  }
}

void lu_put_range(luon_tensor *y, int64_t j0, int64_t n, const void *src) {
  int64_t es = luon_dtype_size(y->dtype);
  char *base = lu_data(y);
  for (int64_t j = 0; j < n; j++) {
    int64_t off = 0, r = j0 + j;
    for (int d = y->ndim - 1; d >= 0 && r; d--) {
      off += (r % y->shape[d]) * y->strides[d];
      r /= y->shape[d];
    }
    memcpy(base + off * es, (const char *)src + j * es, (size_t)es);
  }
}

/* One copy: operand 0 the destination, 1 the source. */
typedef struct copy_job {
  int32_t odt, osz, idt, isz;
  int64_t n;
  char *base[2];
  bool stoppable;     /* ends early after luon_interrupt (a new output only) */
} copy_job;

/* One row: converted whole when both sides are dense, else LU_ROW_CHUNK
 * elements at a time, gathered straight into dst or through a buffer
 * scattered into it. */
static void copy_row(void *ctx, int64_t n, char *const *ptr, const int64_t *st) {
  const copy_job *k = ctx;
  if (st[0] == k->osz && st[1] == k->isz) {
    lu_convert(ptr[0], k->odt, ptr[1], k->idt, n);
    return;
  }
  _Alignas(64) char buf[LU_ROW_CHUNK * 8];
  bool odirect = st[0] == k->osz;
  for (int64_t off = 0; off < n; off += LU_ROW_CHUNK) {
    int64_t m = n - off < LU_ROW_CHUNK ? n - off : LU_ROW_CHUNK;
    char *o = odirect ? ptr[0] + off * st[0] : buf;
    lu_gather(o, k->odt, ptr[1] + off * st[1], k->idt, st[1], m);
    if (!odirect) lu_scatter(ptr[0] + off * st[0], st[0], buf, k->osz, m);
  }
}

/* Elements [b, end) * PAR_BLOCK of a copy between dense tensors. */
static void flat_range(void *ctx, int64_t b, int64_t end) {
  const copy_job *k = ctx;
  int64_t lo = b * PAR_BLOCK, hi = end * PAR_BLOCK < k->n ? end * PAR_BLOCK : k->n;
  char *p[2] = {k->base[0] + lo * k->osz, k->base[1] + lo * k->isz};
  int64_t st[2] = {k->osz, k->isz};
  for (int64_t m; lo < hi && !(k->stoppable && lu_interrupted()); lo += m) { /* see LU_STOP_ELEMS */
    m = hi - lo < LU_STOP_ELEMS ? hi - lo : LU_STOP_ELEMS;
    copy_row((void *)k, m, p, st);
    p[0] += m * k->osz, p[1] += m * k->isz;
  }
}

void lu_copy_cpu(luon_tensor *dst, const luon_tensor *src, bool stoppable) {
  int64_t n = dst->size;
  if (n == 0) return;
  copy_job k;
  k.odt = dst->dtype, k.osz = luon_dtype_size(dst->dtype);
  k.idt = src->dtype, k.isz = src->dtype == dst->dtype ? k.osz : luon_dtype_size(src->dtype);
  k.n = n;
  k.stoppable = stoppable;
  k.base[0] = (char *)dst->storage->ptr + dst->offset * k.osz;
  k.base[1] = (char *)src->storage->ptr + src->offset * k.isz;
  int64_t grain = k.odt == k.idt ? GRAIN_PLAIN : GRAIN_CONVERT;
  if (lu_is_contiguous(dst) && lu_is_contiguous(src)) {
    int64_t st[2] = {k.osz, k.isz};
    if (n < 2 * grain) copy_row(&k, n, k.base, st);
    else lu_parallel_for((n + PAR_BLOCK - 1) / PAR_BLOCK, grain / PAR_BLOCK, flat_range, &k);
    return;
  }
  int64_t st[LU_ITER_MAX_OPS][LU_MAXD];
  for (int i = 0; i < dst->ndim; i++) st[0][i] = dst->strides[i] * k.osz;
  lu_byte_strides(src, dst->ndim, dst->shape, st[1]);
  lu_foreach_row(dst->ndim, dst->shape, 2, k.base, (const int64_t(*)[LU_MAXD])st, grain, stoppable, copy_row,
                 &k);
}
