/* tensor.c: tensors as reference-counted views of reference-counted
 * storages; creation, views, host transfer and copies between devices. */
#include "internal.h"
#include <stdlib.h>


int64_t lu_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

void lu_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i] > 1 ? shape[i] : 1;
  }
}

bool lu_is_contiguous(const luon_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

static luon_status check_shape(const char *fn, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > LU_MAXD)
    return lu_error(LUON_ESHAPE, "%s: %d dimensions, at most %d are supported", fn, ndim, LU_MAXD);
  /* zeros count as 1: the strides of an empty tensor are products of its
   * other dimensions (lu_contiguous_strides), and must not overflow either */
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return lu_error(LUON_ESHAPE, "%s: negative dimension %lld in shape %s", fn,
                      (long long)shape[i], lu_shape_str(ndim, shape));
    int64_t d = shape[i] > 1 ? shape[i] : 1;
    if (n > INT64_MAX / 16 / d)
      return lu_error(LUON_ESHAPE, "%s: shape %s is too large", fn, lu_shape_str(ndim, shape));
    n *= d;
  }
  return LUON_OK;
}

/* A new tensor comes in one allocation with its storage header, and, when
 * its data is tiny and on the CPU, with the data too: a 1-element op then
 * costs one malloc and one free. The allocation is freed when the last of
 * the tensor and the storage's views lets go (see luon_tensor_release). */
#define INLINE_BYTES 64
typedef struct tensor_alloc {
  luon_tensor t;
  lu_storage st;
  _Alignas(64) unsigned char data[];
} tensor_alloc;

/* The counters are heuristics for the Lua GC: relaxed, unlocked updates
 * (a lost update between threads is harmless) keep them off the op path. */
#define BUMP(field, v) __atomic_store_n(&(field), __atomic_load_n(&(field), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)

static void count_tensor(int64_t bytes) {
  luon_counters *c = luon_counters_get();
  __atomic_add_fetch(&c->tensors_live, 1, __ATOMIC_RELAXED); /* exact: tests count on it */
  BUMP(c->bytes_since_gc, bytes);
}

static void init_tensor(luon_tensor *t) {
  memset(t, 0, offsetof(luon_tensor, shape));
  t->refcount = 1;
  t->node = NULL;
  t->grad = NULL;
  t->grad_req = 0;
  t->out_index = 0;
  t->grad_gen = 0;
  t->grad_fresh = 0;
  t->offset = 0;
}

/* pin_id >= 0: the data from that pinned pool (never inline: a copy of
 * pageable memory to a GPU is not asynchronous). */
static luon_status tensor_new(int32_t dtype, int ndim, const int64_t *shape, lu_device dev,
                              int32_t pin_id, luon_tensor **out) {
  LU_TRY(check_shape("empty", ndim, shape));
  if (!lu_dtype_valid(dtype)) return lu_error(LUON_EDTYPE, "empty: unknown dtype %d", dtype);
  int64_t n = lu_numel(ndim, shape);
  size_t bytes = (size_t)n * (size_t)luon_dtype_size(dtype);
  bool tiny = dev.type == LUON_CPU && bytes <= INLINE_BYTES && pin_id < 0;
  size_t size = sizeof(tensor_alloc) + (tiny ? INLINE_BYTES : 0);
  tensor_alloc *a = malloc(size);
  if (!a) return lu_error(LUON_ENOMEM, "empty: out of host memory for a tensor header");
  lu_storage *st = &a->st;
  st->block = NULL;
  if (tiny) {
    st->ptr = a->data;
  } else {
    luon_status s = pin_id >= 0 ? lu_alloc_pinned(pin_id, bytes, &st->block)
                                : lu_alloc(dev, bytes, &st->block);
    if (s != LUON_OK) {
      free(a);
      return s;
    }
    st->ptr = st->block->ptr;
  }
  st->refcount = 1;
  st->dev = dev;
  st->bytes = bytes;
  st->owner = a;
  st->version = lu_version_next();
  luon_tensor *t = &a->t;
  init_tensor(t);
  t->dtype = dtype;
  t->ndim = ndim;
  t->dev = dev;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  lu_contiguous_strides(ndim, shape, t->strides);
  t->size = n;
  t->storage = st;
  count_tensor((int64_t)size);
  *out = t;
  return LUON_OK;
}

luon_status lu_tensor_new(int32_t dtype, int ndim, const int64_t *shape, lu_device dev,
                          luon_tensor **out) {
  return tensor_new(dtype, ndim, shape, dev, -1, out);
}

luon_status lu_tensor_new_pinned(int32_t dtype, int ndim, const int64_t *shape, int32_t pin_id,
                                 luon_tensor **out) {
  if (!lu_pinned_available()) pin_id = -1; /* exactly a cpu(0) tensor */
  return tensor_new(dtype, ndim, shape, (lu_device){LUON_CPU, 0}, pin_id, out);
}

luon_status luon_tensor_empty_pinned(int32_t dtype, int32_t ndim, const int64_t *shape,
                                     int32_t pin_id, luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "empty_pinned: out is NULL");
  *out = NULL;
  if (pin_id < 0 || pin_id >= LU_MAX_GPU_DEVICES)
    return lu_error(LUON_EINVAL, "empty_pinned: pin_id %d is outside 0..%d", pin_id,
                    LU_MAX_GPU_DEVICES - 1);
  if (ndim > 0 && !shape) return lu_error(LUON_EINVAL, "empty_pinned: NULL shape for %d dimensions", ndim);
  return lu_tensor_new_pinned(dtype, ndim, shape, pin_id, out);
}

int32_t luon_tensor_is_pinned(const luon_tensor *t) {
  return t && t->storage && lu_block_pinned(t->storage->block);
}

/* The lowest and highest element offsets, from element 0, that a layout of
 * at least one element reaches (negative strides reach below 0). */
static void elem_extent(int ndim, const int64_t *shape, const int64_t *strides, int64_t *lo,
                        int64_t *hi) {
  *lo = *hi = 0;
  for (int i = 0; i < ndim; i++) {
    int64_t span = (shape[i] - 1) * strides[i];
    if (span < 0) *lo += span; else *hi += span;
  }
}

luon_status lu_tensor_view(luon_tensor *src, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset, luon_tensor **out) {
  LU_TRY(check_shape("view", ndim, shape));
  int64_t n = lu_numel(ndim, shape);
  if (n > 0) { /* the view must stay inside the storage */
    int64_t lo, hi;
    elem_extent(ndim, shape, strides, &lo, &hi);
    lo += offset;
    hi += offset;
    int64_t cap = (int64_t)(src->storage->bytes / (size_t)luon_dtype_size(src->dtype));
    if (lo < 0 || hi >= cap)
      return lu_error(LUON_ESHAPE, "view: shape %s with offset %lld reaches outside the storage of %lld elements",
                      lu_shape_str(ndim, shape), (long long)offset, (long long)cap);
  }
  luon_tensor *t = malloc(sizeof *t);
  if (!t) return lu_error(LUON_ENOMEM, "view: out of host memory for a tensor header");
  init_tensor(t);
  count_tensor((int64_t)sizeof *t);
  t->dtype = src->dtype;
  t->ndim = ndim;
  t->dev = src->dev;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->strides[i] = strides[i];
  }
  t->offset = offset;
  t->size = n;
  t->storage = src->storage;
  __atomic_add_fetch(&src->storage->refcount, 1, __ATOMIC_RELAXED);
  *out = t;
  return LUON_OK;
}

luon_tensor *luon_tensor_retain(luon_tensor *t) {
  if (t) __atomic_add_fetch(&t->refcount, 1, __ATOMIC_RELAXED);
  return t;
}

bool lu_tensor_take_data(luon_tensor *dst, luon_tensor *src) {
  lu_storage *a = dst->storage, *b = src->storage;
  if (src->refcount != 1 || a->refcount != 1 || b->refcount != 1 || !a->block || !b->block ||
      a->bytes != b->bytes || dst->dtype != src->dtype || dst->offset || src->offset ||
      !lu_device_eq(a->block->dev, b->block->dev) || !lu_is_contiguous(dst) || !lu_is_contiguous(src) ||
      dst->ndim != src->ndim || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)dst->ndim))
    return false;
  lu_block *blk = a->block;
  void *ptr = a->ptr;
  a->block = b->block, a->ptr = b->ptr;
  b->block = blk, b->ptr = ptr;
  lu_touch(dst);
  lu_touch(src);
  return true;
}

static uint64_t versions;
uint64_t lu_version_next(void) { return __atomic_add_fetch(&versions, 1, __ATOMIC_RELAXED); }

luon_status luon_tensor_touch(luon_tensor *t) {
  if (!t) return lu_error(LUON_EINVAL, "tensor_touch: NULL tensor");
  lu_touch(t);
  return LUON_OK;
}

void luon_tensor_release(luon_tensor *t) {
  if (!t || __atomic_sub_fetch(&t->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  lu_storage *st = t->storage;
  /* a tensor whose allocation also holds its storage lives on, unreachable,
   * until the last view of the storage is gone */
  bool owns_memory = !(st && st->owner == (void *)t);
  if (t->node) lu_autograd_release_node(t->node);
  luon_tensor_release(t->grad);
  __atomic_sub_fetch(&luon_counters_get()->tensors_live, 1, __ATOMIC_RELAXED);
  if (st && __atomic_sub_fetch(&st->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
    lu_free(st->block);
    free(st->owner);
  }
  if (owns_memory) free(t);
}

luon_status luon_tensor_info_get(const luon_tensor *t, luon_tensor_info *info) {
  if (!t) return lu_error(LUON_EINVAL, "tensor_info: NULL tensor");
  if (!info) return lu_error(LUON_EINVAL, "tensor_info: info is NULL");
  info->dtype = t->dtype;
  info->ndim = t->ndim;
  info->dev_type = t->dev.type;
  info->dev_id = t->dev.id;
  info->size = t->size;
  info->offset = t->offset;
  for (int i = 0; i < LU_MAXD; i++) {
    info->shape[i] = i < t->ndim ? t->shape[i] : 0;
    info->strides[i] = i < t->ndim ? t->strides[i] : 0;
  }
  info->data = lu_data(t);
  info->contiguous = lu_is_contiguous(t);
  info->requires_grad = t->grad != NULL;
  info->recorded = t->node != NULL;
  return LUON_OK;
}

luon_status luon_tensor_empty(int32_t dtype, int32_t ndim, const int64_t *shape, int32_t dev_type,
                              int32_t dev_id, luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "empty: out is NULL");
  *out = NULL;
  lu_device d = {dev_type, dev_id};
  LU_TRY(lu_device_check(d));
  if (ndim > 0 && !shape) return lu_error(LUON_EINVAL, "empty: NULL shape for %d dimensions", ndim);
  return lu_tensor_new(dtype, ndim, shape, d, out);
}

luon_status luon_tensor_wrap(void *ptr, int32_t dtype, int32_t ndim, const int64_t *shape,
                             const int64_t *strides, int32_t dev_type, int32_t dev_id,
                             luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "wrap: out is NULL");
  *out = NULL;
  lu_device d = {dev_type, dev_id};
  LU_TRY(lu_device_check(d));
  if (ndim > 0 && !shape) return lu_error(LUON_EINVAL, "wrap: NULL shape for %d dimensions", ndim);
  LU_TRY(check_shape("wrap", ndim, shape));
  if (!lu_dtype_valid(dtype)) return lu_error(LUON_EDTYPE, "wrap: unknown dtype %d", dtype);
  int64_t n = lu_numel(ndim, shape), lo = 0, hi = 0, st_[LU_MAXD];
  if (!strides) lu_contiguous_strides(ndim, shape, st_);
  const int64_t *s = strides ? strides : st_;
  if (n > 0) elem_extent(ndim, shape, s, &lo, &hi);
  if (!ptr && n > 0) return lu_error(LUON_EINVAL, "wrap: NULL data for shape %s", lu_shape_str(ndim, shape));
  /* header and storage in one allocation, as lu_tensor_new; block stays
   * NULL so the last release frees only the header, never ptr */
  tensor_alloc *a = malloc(sizeof(tensor_alloc));
  if (!a) return lu_error(LUON_ENOMEM, "wrap: out of host memory for a tensor header");
  int64_t esize = luon_dtype_size(dtype);
  lu_storage *st = &a->st;
  st->block = NULL;
  st->ptr = (char *)ptr + lo * esize; /* the lowest element a negative stride reaches */
  st->refcount = 1;
  st->dev = d;
  st->bytes = n > 0 ? (size_t)(hi - lo + 1) * (size_t)esize : 0;
  st->owner = a;
  st->version = 0; /* the caller's memory: it may change under luon at any time */
  luon_tensor *t = &a->t;
  init_tensor(t);
  t->dtype = dtype;
  t->ndim = ndim;
  t->dev = d;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->strides[i] = s[i];
  }
  t->offset = -lo;
  t->size = n;
  t->storage = st;
  count_tensor((int64_t)sizeof(tensor_alloc));
  *out = t;
  return LUON_OK;
}

luon_status luon_tensor_view(luon_tensor *t, int32_t ndim, const int64_t *shape,
                             const int64_t *strides, int64_t offset, luon_tensor **out) {
  if (!t) return lu_error(LUON_EINVAL, "view: NULL tensor");
  if (!out) return lu_error(LUON_EINVAL, "view: out is NULL");
  if (lu_capture_top())
    return lu_graph_refuse(LUON_EUNSUPPORTED, "hybridize: forward made a raw view (luon_tensor_view) "
                           "while the graph was captured; use the view ops (reshape, slicing)");
  if (ndim > 0 && !shape) return lu_error(LUON_EINVAL, "view: NULL shape for %d dimensions", ndim);
  if (ndim > 0 && !strides) return lu_error(LUON_EINVAL, "view: NULL strides for %d dimensions", ndim);
  return lu_tensor_view(t, ndim, shape, strides, offset, out);
}

/* Host <-> device transfer of `bytes` between contiguous buffers. */
static luon_status transfer(void *dst, lu_device dd, const void *src, lu_device sd, size_t bytes) {
  if (bytes == 0) return LUON_OK;
  if (dd.type == LUON_CPU && sd.type == LUON_CPU) {
    memcpy(dst, src, bytes);
    return LUON_OK;
  }
  if (!lu_cuda.memcpy) return lu_error(LUON_EDEVICE, "copy: the CUDA backend is not loaded");
  return lu_cuda_check(lu_cuda.memcpy(dst, dd, src, sd, bytes));
}

/* A copy to a GPU from pinned memory is still reading src when transfer
 * returns: its block is reused only after an event on the GPU's stream
 * says the copy is done, or, when no event can be recorded, after a wait. */
static luon_status fence_pinned(const luon_tensor *src, lu_device dd) {
  lu_block *b = src->storage->block;
  if (dd.type != LUON_GPU || !lu_block_pinned(b) || lu_pinned_record(b, dd.id) == LUON_OK)
    return LUON_OK;
  return lu_cuda.sync ? lu_cuda_check(lu_cuda.sync(dd.id)) : LUON_OK;
}

luon_status luon_tensor_from_host(const void *src, int32_t dtype, int32_t ndim,
                                  const int64_t *shape, int32_t dev_type, int32_t dev_id,
                                  luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "from_host: out is NULL");
  *out = NULL;
  if (ndim > 0 && !shape) return lu_error(LUON_EINVAL, "from_host: NULL shape for %d dimensions", ndim);
  luon_tensor *t; /* empty checks the device and the shape */
  LU_TRY(luon_tensor_empty(dtype, ndim, shape, dev_type, dev_id, &t));
  if (!src && t->size > 0) {
    luon_tensor_release(t);
    return lu_error(LUON_EINVAL, "from_host: NULL src for shape %s", lu_shape_str(ndim, shape));
  }
  luon_status s = transfer(lu_data(t), t->dev, src, (lu_device){LUON_CPU, 0},
                           (size_t)t->size * (size_t)luon_dtype_size(dtype));
  if (s != LUON_OK) {
    luon_tensor_release(t);
    return s;
  }
  *out = t;
  return LUON_OK;
}

/* A contiguous tensor with t's values on t's device: t itself (+1) or a copy. */
static luon_status contiguous(luon_tensor *t, luon_tensor **out) {
  if (lu_is_contiguous(t)) {
    *out = luon_tensor_retain(t);
    return LUON_OK;
  }
  int32_t nout = 1;
  *out = NULL;
  return luon_op_call(LU_OP_copy, 1, &t, NULL, &nout, out);
}

luon_status luon_tensor_to_host(const luon_tensor *tc, void *dst, int32_t dtype, size_t bytes) {
  luon_tensor *t = (luon_tensor *)tc;
  if (!t) return lu_error(LUON_EINVAL, "to_host: NULL tensor");
  if (lu_capture_top())
    return lu_graph_refuse(LUON_EUNSUPPORTED,
                           "forward read a value of an array during hybridize (item, tonumber, asnumpy, "
                           "printing, a comparison turned into a Lua boolean, a boolean mask); MXNet "
                           "refuses this too: a hybridized forward cannot depend on the values of its "
                           "arrays; compute with array ops (np.where) or call hybridize(false)");
  if (!lu_dtype_valid(dtype)) return lu_error(LUON_EDTYPE, "to_host: unknown dtype %d", dtype);
  size_t need = (size_t)t->size * (size_t)luon_dtype_size(dtype);
  if (bytes < need)
    return lu_error(LUON_EINVAL, "to_host: buffer of %zu bytes, %zu needed", bytes, need);
  if (!dst && need > 0) return lu_error(LUON_EINVAL, "to_host: NULL dst for %zu bytes", need);
  luon_tensor *c;
  LU_TRY(contiguous(t, &c));
  luon_status s = LUON_OK;
  if (c->dev.type == LUON_CPU) {
    lu_convert(dst, dtype, lu_data(c), c->dtype, c->size);
  } else if (dtype == c->dtype) {
    s = transfer(dst, (lu_device){LUON_CPU, 0}, lu_data(c), c->dev, need);
  } else {
    void *tmp = malloc((size_t)c->size * (size_t)luon_dtype_size(c->dtype) + 1);
    if (!tmp) s = lu_error(LUON_ENOMEM, "to_host: out of host memory");
    if (s == LUON_OK)
      s = transfer(tmp, (lu_device){LUON_CPU, 0}, lu_data(c), c->dev,
                   (size_t)c->size * (size_t)luon_dtype_size(c->dtype));
    if (s == LUON_OK) lu_convert(dst, dtype, tmp, c->dtype, c->size);
    free(tmp);
  }
  luon_tensor_release(c);
  return s;
}

/* The bytes of its storage that t can touch: [*lo, *hi); empty when t is. */
static void byte_extent(const luon_tensor *t, int64_t *lo, int64_t *hi) {
  int64_t a, b, es = luon_dtype_size(t->dtype);
  *lo = *hi = 0;
  if (t->size == 0) return;
  elem_extent(t->ndim, t->shape, t->strides, &a, &b);
  *lo = (t->offset + a) * es;
  *hi = (t->offset + b + 1) * es;
}

/* dst and src are different views of the same bytes (x[1:] = x[:-1],
 * x[...] = x.T): an elementwise copy, in parallel or in any order, could
 * read an element it has already written. The same view onto itself is
 * safe: each element is read before it is written. */
static bool overlapping(const luon_tensor *dst, const luon_tensor *src) {
  if (dst->storage != src->storage || dst->size == 0) return false;
  if (dst->dtype == src->dtype && dst->offset == src->offset &&
      memcmp(dst->strides, src->strides, sizeof(int64_t) * (size_t)dst->ndim) == 0)
    return false;
  int64_t dlo, dhi, slo, shi;
  byte_extent(dst, &dlo, &dhi);
  byte_extent(src, &slo, &shi);
  return dlo < shi && slo < dhi;
}

/* The first axis along which t's elements share memory (stride 0 and length
 * > 1, as in a broadcast_to view), or -1. */
static int broadcast_axis(const luon_tensor *t) {
  if (t->size == 0) return -1;
  for (int i = 0; i < t->ndim; i++)
    if (t->strides[i] == 0 && t->shape[i] > 1) return i;
  return -1;
}

luon_status luon_tensor_copy(luon_tensor *dst, const luon_tensor *srcc) {
  luon_tensor *src = (luon_tensor *)srcc;
  if (!dst || !src) return lu_error(LUON_EINVAL, "copyto: NULL tensor");
  lu_touch(dst); /* before any write: every branch below writes dst */
  if (lu_capture_top())
    return lu_graph_refuse(LUON_EUNSUPPORTED,
                           "hybridize: forward copied into an existing array (x:copyto(array), an "
                           "item assignment x[k] = v) while the graph was captured; a hybridized "
                           "forward makes new arrays with ops (copies to a device, astype, np.where, "
                           "concatenate), or call hybridize(false)");
  if (dst->ndim != src->ndim || memcmp(dst->shape, src->shape, sizeof(int64_t) * (size_t)src->ndim))
    return lu_error(LUON_ESHAPE, "copyto: cannot copy an array of shape %s into one of shape %s",
                    lu_shape_str(src->ndim, src->shape), lu_shape_str(dst->ndim, dst->shape));
  /* every element would land in the same memory (the last write wins, on
   * any device): refused, as NumPy's read-only broadcast views */
  int ax = broadcast_axis(dst);
  if (ax >= 0)
    return lu_error(LUON_EINVAL, "copyto: the destination is a broadcast view (stride 0 along axis %d "
                    "of shape %s): its elements share memory; copy into a real array", ax,
                    lu_shape_str(dst->ndim, dst->shape));
  /* MXNet's rule: while recording, an array already in a graph (the result
   * of a recorded op, or an array with a gradient buffer) is not written
   * into, for backward would read the new values */
  if (lu_recording && (dst->node || dst->grad))
    return lu_error(LUON_EGRAD, "copyto: assigning to an array that is already in a computational "
                    "graph would make its gradients wrong: call backward first, or write outside "
                    "autograd.record() (in-place writes such as copyto and np.random.shuffle are "
                    "not recorded)");
  int32_t nout = 1;
  luon_tensor *out[1] = {dst};
  if (overlapping(dst, src)) { /* as NumPy: through a copy of src */
    luon_tensor *tmp = NULL;
    LU_TRY(luon_op_call(LU_OP_copy, 1, &src, NULL, &nout, &tmp));
    luon_status s = luon_tensor_copy(dst, tmp);
    luon_tensor_release(tmp);
    return s;
  }
  if (dst->dev.type == LUON_CPU && src->dev.type == LUON_CPU) {
    /* logical CPU devices share memory: one strided, converting pass */
    lu_copy_cpu(dst, src, false); /* in place: never stops half-way */
    return LUON_OK;
  }
  /* the device's strided copy writes any dst directly (through luon_op_call
   * a non-contiguous dst would come back here through a temporary) */
  if (lu_device_eq(dst->dev, src->dev) && dst->dev.type == LUON_GPU && lu_cuda.copy)
    return lu_cuda_check(lu_cuda.copy(dst, src));
  if (lu_device_eq(dst->dev, src->dev)) return luon_op_call(LU_OP_copy, 1, &src, NULL, &nout, out);
  /* across devices: contiguous on the source, transfer, convert on the target */
  luon_tensor *c, *tmp = NULL;
  LU_TRY(contiguous(src, &c));
  luon_status s;
  size_t bytes = (size_t)c->size * (size_t)luon_dtype_size(c->dtype);
  if (dst->dtype == c->dtype && lu_is_contiguous(dst)) {
    s = transfer(lu_data(dst), dst->dev, lu_data(c), c->dev, bytes);
  } else {
    s = lu_tensor_new(c->dtype, c->ndim, c->shape, dst->dev, &tmp);
    if (s == LUON_OK) s = transfer(lu_data(tmp), tmp->dev, lu_data(c), c->dev, bytes);
  }
  if (s == LUON_OK) s = fence_pinned(c, dst->dev);
  if (s == LUON_OK && tmp) s = luon_op_call(LU_OP_copy, 1, &tmp, NULL, &nout, out);
  luon_tensor_release(tmp);
  luon_tensor_release(c);
  return s;
}

luon_status luon_tensor_wait(const luon_tensor *t) {
  if (!t) return lu_error(LUON_EINVAL, "wait: NULL tensor");
  if (t->dev.type == LUON_GPU && lu_cuda.sync) return lu_cuda_check(lu_cuda.sync(t->dev.id));
  return LUON_OK;
}
