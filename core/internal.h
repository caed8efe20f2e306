/* internal.h: structures and helpers shared by the files of core/ (and the
 * CUDA backend). Not installed; hosts use luon.h only. The subsystems built
 * on the core, core/data/ and core/dist/, include it; it includes nothing of
 * theirs (what the files of core/data/ share is in data/data.h). */
#ifndef LUON_INTERNAL_H
#define LUON_INTERNAL_H

#include "luon.h"
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define LU_MAXD 8
#define LU_MAX_CPU_DEVICES 64
#define LU_MAX_GPU_DEVICES 16

/* ---- errors ------------------------------------------------------------ */

/* Set the thread-local message and return `status`. */
luon_status lu_error(luon_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Propagate a failed status. */
#define LU_TRY(expr)                                                          \
  do {                                                                        \
    luon_status lu_try_s_ = (expr);                                           \
    if (lu_try_s_ != LUON_OK) return lu_try_s_;                               \
  } while (0)
/* luon_interrupt's flag, for long kernels to look at between blocks of work
 * (one relaxed load: free on the hot path). A kernel that sees it may stop
 * early leaving its output part written; luon_op_call then fails the op
 * with LUON_EINTERRUPTED and releases the output (only for ops that make
 * new outputs: in-place kernels must never look). */
extern int lu_interrupt_flag;
extern __thread int32_t *lu_thread_flag; /* luon_interrupt_scope's; pool threads take their caller's */
static inline bool lu_interrupted(void) {
  if (__atomic_load_n(&lu_interrupt_flag, __ATOMIC_RELAXED)) return true;
  int32_t *f = lu_thread_flag;
  return f && __atomic_load_n(f, __ATOMIC_RELAXED);
}
/* How many times luon_interrupt was called: another thread may clear the
 * flag (luon_interrupt_clear) after a kernel stopped and before its caller
 * looks, so whoever judges a kernel's output takes the count before it and
 * asks lu_stopped_since after: raised now, or raised (and maybe cleared)
 * meanwhile. It errs towards "stopped", never towards a partial result. */
extern unsigned lu_interrupt_count;
static inline unsigned lu_stop_mark(void) { return __atomic_load_n(&lu_interrupt_count, __ATOMIC_ACQUIRE); }
static inline bool lu_stopped_since(unsigned mark) {
  return lu_interrupted() || __atomic_load_n(&lu_interrupt_count, __ATOMIC_ACQUIRE) != mark;
}
/* Kernels that stop look at the flag at least this often (elements; about
 * a millisecond of the slowest elementwise work on one core). */
#define LU_STOP_ELEMS ((int64_t)1 << 18)

/* Text for a shape "(2,3)", valid until the 4th next call on this thread. */
const char *lu_shape_str(int ndim, const int64_t *shape);

/* ---- devices ----------------------------------------------------------- */

typedef struct lu_device {
  int32_t type;
  int32_t id;
} lu_device;

static inline bool lu_device_eq(lu_device a, lu_device b) {
  return a.type == b.type && a.id == b.id;
}
/* "cpu(1)"; valid until the 4th next call on this thread. */
const char *lu_device_str(lu_device d);
luon_status lu_device_check(lu_device d);

/* ---- memory ------------------------------------------------------------ */

/* A block from a device's caching allocator. */
typedef struct lu_block {
  void *ptr;
  size_t bytes;           /* the size class actually held */
  size_t asked;           /* the bytes its current user asked for */
  struct lu_block *next;  /* free-list link while cached */
  lu_device dev;
} lu_block;

luon_status lu_alloc(lu_device dev, size_t bytes, lu_block **out);
void lu_free(lu_block *b);
/* While set (a CUDA graph's capture on this thread, graph.c), lu_free
 * puts GPU blocks on this list (linked by next) instead of the cache: the
 * graph's launches write them again, so no other work may have them; a
 * later allocation of the same capture takes one of its size first (the
 * graph's own pool), and the cache is never given back to the driver. They
 * stay counted in use until the list goes to lu_free. */
extern __thread lu_block **lu_alloc_keep; /* __thread: nvcc reads this header as C++ */
/* Host scratch for kernels from cpu(0)'s cache (64-byte aligned; NULL with
 * a message when out of memory). Use it, not malloc, for large temporaries:
 * glibc mmaps big blocks afresh each time, and every page then faults. */
void *lu_scratch_alloc(size_t bytes);
void lu_scratch_free(void *p);
/* Give back the convolution weights oneDNN keeps reordered (conv_dnnl.c)
 * that no call is reading: luon_memory_empty_cache on a CPU. */
void lu_conv_weights_drop(void);

/* Pinned host pools (alloc.c), one per pin id (MXNet's cpu_pinned(id)):
 * page-locked host memory that host-to-gpu copies read asynchronously. A
 * pinned block's dev is {LUON_CPU_PINNED, pin id}; its tensors are on
 * cpu(0). Without a GPU backend (lu_cuda.host_alloc NULL) there is no
 * pinned memory: lu_alloc_pinned is lu_alloc on cpu(0). */
static inline bool lu_block_pinned(const lu_block *b) {
  return b && b->dev.type == LUON_CPU_PINNED;
}
bool lu_pinned_available(void);
/* A block that is not handed out again while a copy reading it is queued:
 * only one whose recorded events have all completed (queried, no wait). */
luon_status lu_alloc_pinned(int32_t pin_id, size_t bytes, lu_block **out);
/* b (pinned) is the source of a copy just queued on gpu(id)'s stream:
 * record an event there and keep b from reuse until it completes. A newer
 * event on the same gpu replaces the older (one stream, in order). No-op
 * for other blocks. On failure the caller must wait for gpu(id) instead. */
luon_status lu_pinned_record(lu_block *b, int32_t gpu_id);

/* ---- tensors ----------------------------------------------------------- */

typedef struct lu_storage {
  int32_t refcount;       /* atomic */
  lu_device dev;
  lu_block *block;        /* from the caching allocator; NULL when inline or external */
  void *ptr;              /* base address */
  size_t bytes;
  void *owner;            /* the allocation holding this struct (freed with it) */
  uint64_t version;       /* new at every write through luon (lu_touch), unique in the process;
                             0: memory the caller owns (luon_tensor_wrap), never trusted unchanged */
} lu_storage;

/* The storage versions: lu_version_next() is a number never handed out
 * before; lu_touch(t) says t's memory was written, so that what was derived
 * from its values (conv_dnnl.c's reordered weights) is made again. Every
 * write through luon touches: the dispatcher after an op's kernel (its
 * outputs, in place or new), luon_tensor_copy, the collectives, a replay's
 * elementwise chains, lu_tensor_take_data; a host that writes through
 * luon_tensor_info's data calls luon_tensor_touch. */
uint64_t lu_version_next(void);

struct lu_node;           /* autograd (autograd.c) */

struct luon_tensor {
  int32_t refcount;       /* atomic */
  int32_t dtype;
  int32_t ndim;
  lu_device dev;
  int64_t shape[LU_MAXD];
  int64_t strides[LU_MAXD]; /* elements */
  int64_t offset;           /* elements */
  int64_t size;
  lu_storage *storage;
  struct lu_node *node;     /* the autograd node that produced it, if recorded */
  struct luon_tensor *grad; /* gradient buffer, if attached */
  int32_t grad_req;
  int32_t out_index;        /* which output of node it is */
  int64_t grad_gen;         /* the backward pass that last wrote grad */
  int32_t grad_fresh;       /* a backward wrote grad since the flag was cleared */
};

/* Element address of a tensor's first element. */
static inline void *lu_data(const luon_tensor *t) {
  return (char *)t->storage->ptr + t->offset * (int64_t)luon_dtype_size(t->dtype);
}
static inline void lu_touch(luon_tensor *t) {
  if (t && t->storage && __atomic_load_n(&t->storage->version, __ATOMIC_RELAXED))
    __atomic_store_n(&t->storage->version, lu_version_next(), __ATOMIC_RELEASE);
}
bool lu_is_contiguous(const luon_tensor *t);
/* A 2-d tensor seen transposed: a struct copy sharing t's storage (no
 * reference taken, no autograd links), for one kernel call inside an op
 * (linear's x @ w^T through matmul's kernel, CPU and CUDA). */
static inline luon_tensor lu_transposed2(const luon_tensor *t) {
  luon_tensor r = *t;
  r.shape[0] = t->shape[1], r.shape[1] = t->shape[0];
  r.strides[0] = t->strides[1], r.strides[1] = t->strides[0];
  r.node = NULL, r.grad = NULL;
  return r;
}

void lu_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
int64_t lu_numel(int ndim, const int64_t *shape);
/* New contiguous tensor (+1). */
luon_status lu_tensor_new(int32_t dtype, int ndim, const int64_t *shape, lu_device dev,
                          luon_tensor **out);
/* New contiguous cpu(0) tensor (+1) in pinned pool pin_id when there is
 * pinned memory, else exactly lu_tensor_new on cpu(0). */
luon_status lu_tensor_new_pinned(int32_t dtype, int ndim, const int64_t *shape, int32_t pin_id,
                                 luon_tensor **out);
/* dst's data becomes src's, src's dst's old (a copy without copying), when
 * nothing else can see either: src and both storages held once, both dense
 * blocks of one pool with the same shape and dtype. False: nothing done. */
bool lu_tensor_take_data(luon_tensor *dst, luon_tensor *src);
/* New view sharing t's storage (+1). */
luon_status lu_tensor_view(luon_tensor *t, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset, luon_tensor **out);

/* ---- dtypes ------------------------------------------------------------ */

bool lu_dtype_valid(int32_t dt);
bool lu_dtype_is_float(int32_t dt);   /* f32, f64: the float dtypes kernels compute in */
/* f16, bf16: stored in 16 bits, computed in float32 by the ops that take
 * them (dispatch.c); CPU kernels never see them. */
bool lu_dtype_is_storage_only(int32_t dt);
/* Any float dtype, 16-bit ones included: those gradients flow through. */
bool lu_dtype_has_grad(int32_t dt);
/* The range of an integer dtype, bool's 0 to 1; false for the floats.
 * Inline, as lu_dtype_promote: the CUDA backend's host side uses them. */
static inline bool lu_dtype_int_range(int32_t dt, int64_t *mn, int64_t *mx) {
  switch (dt) {
  case LUON_DTYPE_BOOL: *mn = 0, *mx = 1; return true;
  case LUON_DTYPE_U8: *mn = 0, *mx = UINT8_MAX; return true;
  case LUON_DTYPE_I8: *mn = INT8_MIN, *mx = INT8_MAX; return true;
  case LUON_DTYPE_I16: *mn = INT16_MIN, *mx = INT16_MAX; return true;
  case LUON_DTYPE_U16: *mn = 0, *mx = UINT16_MAX; return true;
  case LUON_DTYPE_I32: *mn = INT32_MIN, *mx = INT32_MAX; return true;
  case LUON_DTYPE_I64: *mn = INT64_MIN, *mx = INT64_MAX; return true;
  default: return false;
  }
}
/* Result dtype of a binary op on a and b. A float beside an integer or
 * bool wins (MXNet's rule: int32 + float32 is float32, where NumPy widens
 * to float64); two 16-bit floats give float32. Two integers as NumPy: the
 * wider of one signedness; of a signed and an unsigned, the signed when
 * wider, else the signed of twice the unsigned's width (int8 + uint8 =
 * int16, int16 + uint16 = int32, int32 + uint16 = int32); bool gives way. */
static inline int32_t lu_dtype_promote(int32_t a, int32_t b) {
  if (a == b) return a;
  bool sa = a == LUON_DTYPE_F16 || a == LUON_DTYPE_BF16, sb = b == LUON_DTYPE_F16 || b == LUON_DTYPE_BF16;
  bool fa = sa || a == LUON_DTYPE_F32 || a == LUON_DTYPE_F64, fb = sb || b == LUON_DTYPE_F32 || b == LUON_DTYPE_F64;
  if (fa != fb) return fa ? a : b;
  if (sa && sb) return LUON_DTYPE_F32;
  if (fa) return a == LUON_DTYPE_F64 || b == LUON_DTYPE_F64 ? LUON_DTYPE_F64 : LUON_DTYPE_F32;
  if (a == LUON_DTYPE_BOOL) return b;
  if (b == LUON_DTYPE_BOOL) return a;
  int64_t mna, mxa, mnb, mxb;
  if (!lu_dtype_int_range(a, &mna, &mxa) || !lu_dtype_int_range(b, &mnb, &mxb)) return 0;
  if ((mna < 0) == (mnb < 0)) return mxa > mxb ? a : b;
  int64_t smx = mna < 0 ? mxa : mxb, umx = mna < 0 ? mxb : mxa; /* the signed one's max, the unsigned's */
  if (smx > umx) return mna < 0 ? a : b;
  return umx == UINT8_MAX ? LUON_DTYPE_I16 : umx == UINT16_MAX ? LUON_DTYPE_I32 : LUON_DTYPE_I64;
}
/* Element i of an integer (or bool) buffer as int64, and v stored into
 * one, wrapping as C casts do. */
static inline int64_t lu_load_int(const void *p, int32_t dt, int64_t i) {
  switch (dt) {
  case LUON_DTYPE_I32: return ((const int32_t *)p)[i];
  case LUON_DTYPE_I64: return ((const int64_t *)p)[i];
  case LUON_DTYPE_I8: return ((const int8_t *)p)[i];
  case LUON_DTYPE_I16: return ((const int16_t *)p)[i];
  case LUON_DTYPE_U16: return ((const uint16_t *)p)[i];
  default: return ((const uint8_t *)p)[i];
  }
}
static inline void lu_store_int(void *p, int32_t dt, int64_t i, int64_t v) {
  switch (dt) {
  case LUON_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case LUON_DTYPE_I64: ((int64_t *)p)[i] = v; break;
  case LUON_DTYPE_I8: ((int8_t *)p)[i] = (int8_t)v; break;
  case LUON_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)v; break;
  case LUON_DTYPE_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  default: ((uint8_t *)p)[i] = (uint8_t)v; break;
  }
}
/* clip's bound v (NaN: none) as an integer within [mn, mx], for the CPU
 * kernel and the CUDA backend's host side (builtins: no math.h here). */
static inline int64_t lu_clip_int_bound(double v, bool lower, int64_t mn, int64_t mx) {
  if (__builtin_isnan(v)) return lower ? mn : mx;
  v = lower ? __builtin_ceil(v) : __builtin_floor(v);
  if (v <= (double)mn) return mn;
  if (v >= (double)mx) return mx;
  return (int64_t)v;
}
/* Convert n elements between dtypes; both contiguous host buffers. */
void lu_convert(void *dst, int32_t dst_dt, const void *src, int32_t src_dt, int64_t n);
float lu_half_to_float(uint16_t h);
uint16_t lu_float_to_half(float f);
float lu_bf16_to_float(uint16_t h);
uint16_t lu_float_to_bf16(float f);

/* ---- the op registry and dispatcher ------------------------------------ */

enum lu_op_id {
#define LUON_OP(name, nin, nout, kind, grad, backends, flags) LU_OP_##name,
#include "luon_ops.def"
#undef LUON_OP
  LU_OP_COUNT
};

enum lu_op_kind { LU_NEW = 0, LU_VIEW = 1, LU_INPLACE = 2 };
/* The registry's flags column (luon_ops.def says what each means). */
enum lu_op_flag {
  LU_HALF = 1 << 0, LU_FUSED = 1 << 1, LU_RANDOM = 1 << 2,
  LU_NP_MAP = 1 << 3, LU_NP_REDUCE = 1 << 4, LU_METHOD = 1 << 5,
};
/* Where an op runs: its backends column as LUON_BACKEND_* bits. */
#define LU_BACKENDS_ALL (LUON_BACKEND_CPU | LUON_BACKEND_CUDA)
#define LU_BACKENDS_CPU LUON_BACKEND_CPU
#define LU_BACKENDS_ANY (LUON_BACKEND_CPU | LUON_BACKEND_CUDA)

/* Named attribute slots: for each LUON_SLOTS line an enum of its int slots
 * and one of its float slots, counting on from its base op's, with the
 * counts LU_NI_<op> and LU_NF_<op>: attrs->i[LU_CONV2D_RELU]. */
enum { LU_NI_none = 0, LU_NF_none = 0 };
#define I(n) LU_##n,
#define F(n) LU_##n,
#define LUON_SLOTS(op, base, ints, floats)                                     \
  enum { LU_I0_##op = LU_NI_##base - 1, ints LU_NI_##op };                     \
  enum { LU_F0_##op = LU_NF_##base - 1, floats LU_NF_##op };
#include "luon_ops.def"
#undef LUON_SLOTS
#undef I
#undef F

/* The reductions (core/ops/reduce.c, cuda/ops/reduce.cu) by one number. */
enum lu_reduce_op { LU_R_SUM, LU_R_MEAN, LU_R_PROD, LU_R_MAX, LU_R_MIN, LU_R_ARGMAX, LU_R_ARGMIN, LU_R_COUNT };
static inline int lu_reduce_op_of(int32_t op) {
  switch (op) {
  case LU_OP_sum: return LU_R_SUM;
  case LU_OP_mean: return LU_R_MEAN;
  case LU_OP_prod: return LU_R_PROD;
  case LU_OP_max: return LU_R_MAX;
  case LU_OP_min: return LU_R_MIN;
  case LU_OP_argmax: return LU_R_ARGMAX;
  default: return LU_R_ARGMIN;
  }
}

/* One call of an op: the dispatcher fills inputs and attrs, the shape
 * function fills the output metadata, the dispatcher allocates outputs
 * (kind NEW), then the kernel runs. Kernels never allocate tensors. */
typedef struct lu_call {
  int32_t op;
  int32_t nin, nout;
  luon_tensor *const *in;
  const luon_attrs *attrs;
  lu_device dev;               /* where the op runs */
  /* set by lu_shape_<op> for each output (kind NEW) */
  int32_t out_dtype[LUON_MAX_OP_INPUTS];
  int32_t out_ndim[LUON_MAX_OP_INPUTS];
  int64_t out_shape[LUON_MAX_OP_INPUTS][LU_MAXD];
  luon_tensor *out[LUON_MAX_OP_INPUTS]; /* kind NEW: always contiguous (a strided
                                            out= goes through a temporary) */
  void *scratch;               /* op-private, set by the shape function */
  int64_t scratch_i[8];
} lu_call;

/* The backward of one recorded call, written with other ops: from the
 * forward's inputs, outputs and attrs and the gradients of its outputs
 * (dout[k], NULL when output k got none), set din[i] (+1) for every input
 * with need[i]; leave din[i] NULL for an input that has no gradient. */
typedef struct lu_grad_call {
  int32_t op;
  const luon_attrs *attrs;
  int32_t nin, nout;
  luon_tensor *const *in;
  luon_tensor *const *out;
  luon_tensor *const *dout;
  const bool *need;
  luon_tensor **din;
} lu_grad_call;
typedef luon_status (*lu_grad_fn)(lu_grad_call *g);

/* Run op with inputs given inline, one new output (+1) in *out:
 * lu_run(LU_OP_multiply, NULL, &dx, 2, dy, y). For backward formulas. */
luon_status lu_run(int32_t op, const luon_attrs *attrs, luon_tensor **out, int nin, ...);

typedef luon_status (*lu_shape_fn)(lu_call *c);
typedef luon_status (*lu_kernel_fn)(lu_call *c);

typedef struct lu_op_desc {
  const char *name;
  int32_t nin, nout, kind;
  int32_t backends;            /* LUON_BACKEND_* bits: where it has a kernel */
  int32_t flags;               /* enum lu_op_flag */
  lu_shape_fn shape;
  lu_kernel_fn cpu;
  lu_grad_fn grad;             /* NULL: the op has no gradient (NOGRAD) */
} lu_op_desc;

extern const lu_op_desc lu_ops[LU_OP_COUNT];
/* c's CPU kernel as a CPU device runs it (16-bit data in float32), for a
 * backend whose device memory is host memory (tests/c/fake_cuda.c). */
luon_status lu_run_cpu(lu_call *c);

/* Weak, so that the registry links while an op is being written; the test
 * suite fails if any registered op lacks its shape function or CPU kernel.
 * The backward rule of a GRAD op is not weak: the link fails without it. */
#define LU_GRAD_DECL_GRAD(name) luon_status lu_grad_##name(lu_grad_call *g);
#define LU_GRAD_DECL_NOGRAD(name)
#define LU_GRAD_FN_GRAD(name) lu_grad_##name
#define LU_GRAD_FN_NOGRAD(name) NULL
#define LUON_OP(name, nin, nout, kind, grad, backends, flags)                  \
  __attribute__((weak)) luon_status lu_shape_##name(lu_call *c);              \
  __attribute__((weak)) luon_status lu_cpu_##name(lu_call *c);                \
  LU_GRAD_DECL_##grad(name)
#include "luon_ops.def"
#undef LUON_OP

/* Broadcast two shapes NumPy-style into out (ndim in *ond). */
luon_status lu_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb,
                                const int64_t *sb, int *ond, int64_t *oshape);
/* Strides of t seen as broadcast to (ndim, shape): 0 on broadcast axes. */
void lu_broadcast_strides(const luon_tensor *t, int ndim, const int64_t *shape,
                          int64_t *strides);
/* Normalise a possibly negative axis; error names op and values. */
luon_status lu_axis(const char *op, int64_t axis, int ndim, int *out);

/* ---- CPU kernels --------------------------------------------------------- */

#ifndef __CUDACC__
/* Hot loops get an AVX-512 and an AVX2 clone, picked at load time. */
#define TC __attribute__((target_clones("avx512f", "avx2", "default")))
/* 16 float32 or int32 lanes: one AVX-512 register, two AVX2 ones */
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
/* the sum of v's lanes as a tree (4 dependent adds, not 16). Always
 * inlined: called out of line from a target clone, a vector argument would
 * go by another ABI than the default-target callee expects (-O0) */
static inline __attribute__((always_inline)) float lu_hsum16(v16 v) {
  /* lane l plus lane l + w for w = 8, 4, 2, 1, in registers (through a
   * float array, gcc kept a loop storing and reloading the stack) */
  typedef float v8f __attribute__((vector_size(32)));
  typedef float v4f __attribute__((vector_size(16)));
  typedef float v2f __attribute__((vector_size(8)));
  v8f s8 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
           __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  v4f s4 = __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
  v2f s2 = __builtin_shufflevector(s4, s4, 0, 1) + __builtin_shufflevector(s4, s4, 2, 3);
  return s2[0] + s2[1];
}
#endif

/* ---- max-pool windows (pool.c), shared with the fused conv2d_maxpool ---- */

/* One pooling window geometry over an (H, W) plane. */
typedef struct lu_pool_win {
  int64_t H, W, KH, KW, sh, sw, ph, pw, OH, OW;
} lu_pool_win;
/* From a[0..6] = kernel h,w, stride h,w, pad h,w, ceil_mode; checks them
 * (errors name op and the input shape). */
luon_status lu_pool_win_make(const char *op, const int64_t a[LU_POOL_CEIL + 1], int64_t N, int64_t C, int64_t H,
                             int64_t W, lu_pool_win *w);
/* y (OH,OW) = bias + max of each window of the plane x (H,W), relu'd when
 * `relu` (0 at most 0, NaN kept, as relu), NaN skipped by pool.c's rule
 * (TAKES); idx = where the first maximum
 * sits, row-major in the unclipped KH x KW window, or 255 under the relu
 * where the value is not above 0 (no gradient, NaN included). float32 or
 * float64 (dt). scratch: lu_maxpool_argmax_scratch(w) bytes, 8-byte aligned. */
size_t lu_maxpool_argmax_scratch(const lu_pool_win *w);
/* Max pooling's rule (pool.c, conv_maxpool.c, pool.cu): a
 * later value c takes the best b's place when greater, or when b is NaN and
 * c is not. NaN is skipped, as MXNet skips it; a window of NaN alone gives
 * NaN at its first position. */
#define LU_POOL_TAKES(c, b) ((c) > (b) || ((b) != (b) && (c) == (c)))
/* any NaN among p[0..n) (max pooling's kernels look where a search starts) */
bool lu_any_nan_f32(const float *p, int64_t n);
void lu_maxpool_argmax_plane(const lu_pool_win *w, int32_t dt, const char *x, double bias, char *y,
                             uint8_t *idx, bool relu, char *scratch);

/* Batch norm in predict mode (norm.c), for the epilogues of conv2d_maxpool
 * and conv2d_bn: stats = gamma, beta, running_mean, running_var, each (C,)
 * of dtype dt; channel c's y = a * x + d with a and d formed as batch_norm
 * forms them, applied in place to n contiguous elements (relu'd when relu)
 * as batch_norm's pass applies them (the same bits). */
luon_status lu_bn_check_stats(const char *op, int64_t C, int32_t dt, luon_tensor *const *stats, double eps);
void lu_bn_predict_coef(luon_tensor *const *stats, int64_t c, double eps, double *a, double *d);
void lu_bn_apply(int32_t dt, void *y, int64_t n, double a, double d, bool relu);

/* ---- BLAS (blas.c): OpenBLAS loaded on first use ------------------------- */

/* LUON_OK once OpenBLAS is loaded (lu_sgemm/lu_dgemm load it themselves
 * and fall back to a plain loop when it cannot be loaded). */
luon_status lu_blas_ready(void);
/* cblas_sgemm / cblas_dgemm (CblasRowMajor etc. from <cblas.h>). */
void lu_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);
void lu_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
              int lda, const double *b, int ldb, double beta, double *c, int ldc);

/* ---- files (file.c) ------------------------------------------------------- */

/* open(path) for reading, without waiting on a FIFO: the fd of a regular
 * file and its size, or -1 with errno set (0: not a regular file). */
int lu_open_regular(const char *path, uint64_t *size);
/* The whole file at path in a malloc'd buffer of len bytes and a NUL after
 * them (free it); more than max bytes (0: any) is LUON_EFORMAT. Errors name
 * the path, after "fn: " when fn is not NULL. */
luon_status lu_read_file(const char *fn, const char *path, uint64_t max, uint8_t **buf, size_t *len);

/* ---- replacing a file (file.c) -------------------------------------------- */

/* A file written whole, then renamed over path: readers see the old file or
 * the new one, never a half file. lu_wfile_open makes the temporary file
 * "<target>.tmp.<pid>.<n>" beside path's target (path itself, or where a
 * symbolic link at path points: the link stays; a directory or device at
 * path is refused), created exclusively (never through a link planted at
 * that name), with the mode and, where allowed, owner and group of the file
 * it replaces; it first removes the temporary files of killed saves of the
 * same target whose writer is proven dead. lu_wfile_write appends;
 * lu_wfile_commit flushes the file to disk, renames it into place and syncs
 * the directory; lu_wfile_abort removes it. Commit and abort always end f.
 * Errors read "<fn>: <path>: ...". While files are open SIGXFSZ is ignored
 * (where its action is the default), so passing a file-size limit is an
 * error, not the end of the process. */
typedef struct lu_wfile {
  int fd;
  char *dst, *tmp;
  const char *fn, *path;
} lu_wfile;
luon_status lu_wfile_open(lu_wfile *f, const char *fn, const char *path);
luon_status lu_wfile_write(lu_wfile *f, const void *p, size_t n);
luon_status lu_wfile_commit(lu_wfile *f);
/* n bytes at p as the whole of the file at path (open, write, commit; the
 * temporary removed on failure) */
luon_status lu_wfile_put(const char *fn, const char *path, const void *p, size_t n);
void lu_wfile_abort(lu_wfile *f);

/* ---- strided iteration (core/iter.c) -------------------------------------- */

/* Walk an N-d index space `shape` over up to LU_ITER_MAX_OPS operands, each
 * with its own base pointer and strides in BYTES (0 on broadcast axes).
 * Adjacent axes that are contiguous for every operand are merged, then fn is
 * called once per innermost row with n elements, the row's operand pointers
 * and the operands' innermost byte strides. Rows are split across threads
 * when the total is at least `grain` elements per thread (0: never). When
 * `stoppable`, the walk ends early once luon_interrupt was called (the
 * dispatcher then reports the op interrupted): only for kernels whose
 * partial work is thrown away, never for those that update their inputs. */
#define LU_ITER_MAX_OPS 5 /* rmspropalex_update: weight, grad and three states */
typedef void (*lu_row_fn)(void *ctx, int64_t n, char *const *ptrs, const int64_t *strides);
void lu_foreach_row(int ndim, const int64_t *shape, int nops, char *const *base,
                    const int64_t (*strides)[LU_MAXD], int64_t grain, bool stoppable, lu_row_fn fn,
                    void *ctx);
/* Copy t's elements, row-major, into a dense buffer (pack) or back (unpack):
 * for kernels that want dense operands of any strided tensor. */
void lu_pack(const luon_tensor *t, void *buf);
void lu_unpack(luon_tensor *t, const void *buf);
/* LUON_REF_KERNELS=1 (read once): kernels take their naive reference
 * path; lu_set_ref_kernels switches it (the C tests, testutil.h). */
bool lu_ref_kernels(void);
/* conv2d forwards, input gradients and weight gradients oneDNN ran
 * (core/ops/conv_dnnl.c), and calls whose parts shared one reordered
 * input, for the tests */
extern int64_t lu_dnnl_runs, lu_dnnl_gin_runs, lu_dnnl_gw_runs, lu_dnnl_shared_runs;
void lu_set_ref_kernels(int on);
/* Byte strides of t broadcast to (ndim, shape), for lu_foreach_row. */
void lu_byte_strides(const luon_tensor *t, int ndim, const int64_t *shape, int64_t *out);

/* ---- the strided, converting copy (core/copy.c) ----------------------------- */

/* dst <- src on the CPU (logical CPU devices share memory): the same shape,
 * any strides on both sides, src converted to dst's dtype; threaded. When
 * stoppable it ends early after luon_interrupt: only for a new output that
 * the dispatcher throws away (the copy op), never for luon_tensor_copy,
 * which writes gradients and parameters in place. */
void lu_copy_cpu(luon_tensor *dst, const luon_tensor *src, bool stoppable);
/* Elementwise chains (core/ops/elementwise.c), which a replayed graph runs
 * in one pass (core/graph.c): link i applies op to its inputs, in[k] NULL
 * being link i-1's result. The same kernels as the ops', so the same values
 * bit for bit. */
enum { LU_CHAIN_MAX = 16 };
typedef struct lu_ew_link {
  int32_t op;
  const luon_attrs *attrs;
  int nin;
  const luon_tensor *in[2];
} lu_ew_link;
/* Whether op may be a link: an elementwise op whose float32 inputs give float32. */
bool lu_ew_chainable(int32_t op);
/* The chain's result (+1) in *out, written into `into` when that has its
 * shape (else new); *out NULL when the operands are not all float32 CPU
 * tensors, each dense of one shape or a single value (the caller then runs
 * the ops one by one). */
luon_status lu_ew_chain_run(int n, const lu_ew_link *links, luon_tensor *into, luon_tensor **out);

/* The row primitives under it and under the elementwise ops' strided
 * operands. lu_gather: n elements of dtype sdt at src, `stride` bytes apart,
 * into dense dst as ddt (n <= LU_ROW_CHUNK when converting a strided row).
 * lu_scatter: n dense elements of es bytes into dst, `stride` bytes apart. */
#define LU_ROW_CHUNK 256
void lu_gather(void *dst, int32_t ddt, const char *src, int32_t sdt, int64_t stride, int64_t n);
void lu_scatter(char *dst, int64_t stride, const char *src, int32_t es, int64_t n);
/* The row-major elements [j0, j0 + n) of y (any strides) from n dense
 * elements of y's dtype at src: for kernels that make values by index. */
void lu_put_range(luon_tensor *y, int64_t j0, int64_t n, const void *src);

/* ---- autograd (autograd.c) ---------------------------------------------- */

/* Put a finished call on the tape when recording and an input needs a
 * gradient; outs are the call's outputs. */
luon_status lu_autograd_record(const lu_call *c, luon_tensor *const *outs);
void lu_autograd_release_node(struct lu_node *n);
#ifndef __cplusplus
extern _Thread_local int32_t lu_recording;
#endif

/* ---- hybridize's graph capture (graph.c) --------------------------------- */

/* The calling thread's capture, NULL when it captures nothing; lu_op_depth
 * counts luon_op_calls in progress on this thread, so that only the calls
 * made from outside an op (depth 0) become nodes and only those public
 * functions that read or write arrays behind the graph's back are refused. */
typedef struct lu_capture lu_capture;
#ifndef __cplusplus
extern _Thread_local lu_capture *lu_capturing;
extern _Thread_local int32_t lu_op_depth;
/* core/profile.c: 0 when the profiler is off, else the start time; stop
 * adds the op's time (after waiting for `on`'s GPU in sync mode) */
int64_t lu_profile_start(void);
void lu_profile_stop(int32_t op, const luon_tensor *on, int64_t t0);
extern _Thread_local int32_t lu_capture_paused;
static inline bool lu_capture_top(void) { return lu_capturing && lu_op_depth == 0 && !lu_capture_paused; }
#endif
/* Fail the capture with `what` (status); returns the status. */
luon_status lu_graph_refuse(luon_status status, const char *what);
/* Before a top-level call: refuse in-place ops and out=. After it: its node. */
luon_status lu_graph_check_call(int32_t op, int32_t nout, luon_tensor *const *out);
luon_status lu_graph_record(int32_t op, int32_t nin, luon_tensor *const *in, const luon_attrs *attrs,
                            int32_t nout, luon_tensor *const *out);
luon_status lu_graph_record_detach(luon_tensor *in, luon_tensor *out);

/* ---- parallel loops ---------------------------------------------------- */

/* Run fn(ctx, begin, end) over [0, n) split across the CPU threads when n
 * is at least `grain` per thread; else on the caller. */
typedef void (*lu_range_fn)(void *ctx, int64_t begin, int64_t end);
void lu_parallel_for(int64_t n, int64_t grain, lu_range_fn fn, void *ctx);
int lu_num_threads(void);
/* Whether this CPU runs AVX-512F: the kernels blocked for its 32 vector
 * registers (pool.c's stride-2 max, conv_maxpool.c's channels-last forward)
 * spill on AVX2's 16 and lose to the general path there. */
bool lu_cpu_avx512(void);

/* Blocks every signal in the calling thread, saving its mask in *old for
 * pthread_sigmask(SIG_SETMASK, old, NULL). The threads the core starts (the
 * pool's, the DataLoader's, any of OpenBLAS's) are started in between and
 * inherit the full mask: a process-directed signal such as the REPL's
 * Ctrl-C or a host's SIGTERM then goes to one of the host's own threads,
 * where its handler expects to run. (The CUDA driver's, NCCL's and Open
 * MPI's threads start inside those libraries, out of our reach.) */
void lu_signals_block(sigset_t *old);

/* ---- random ------------------------------------------------------------ */

/* Host and device functions (the CUDA backend includes this header). */
#ifdef __CUDACC__
#define LU_HOST_DEVICE __host__ __device__
#else
#define LU_HOST_DEVICE
#endif
/* The splitmix64 finaliser: a well-mixed 64-bit hash of z (seeds, keys). */
static inline LU_HOST_DEVICE uint64_t lu_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
/* splitmix64's step: the golden-ratio increment, then the finaliser. */
static inline uint64_t lu_splitmix64(uint64_t z) { return lu_mix64(z + 0x9e3779b97f4a7c15ull); }

/* Philox-4x32-10 keyed by the global seed; each call reserves `n` counter
 * values from the device's stream and returns the first. */
uint64_t lu_rng_reserve(lu_device dev, uint64_t n, uint64_t *key);
/* Four 32-bit random words for (key, counter): Philox-4x32-10, one
 * function for the CPU and the GPU kernels, so that one seed gives the same
 * numbers on every device. */
static inline LU_HOST_DEVICE void lu_philox(uint64_t key, uint64_t counter, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}
static inline float lu_u32_to_unit(uint32_t x) { /* [0, 1) */
  return (float)(x >> 8) * (1.0f / 16777216.0f);
}
static inline double lu_u64_to_unit(uint32_t hi, uint32_t lo) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- pad's index map (core/ops/layout.c, cuda/ops/layout.cu) ------------- */

/* pad's modes (luon_ops.def), NumPy's names */
enum { LU_PAD_CONSTANT, LU_PAD_EDGE, LU_PAD_REFLECT, LU_PAD_SYMMETRIC, LU_PAD_MODES };
/* Which element of an axis of length n (n >= 1 unless mode is constant)
 * position p of the padded axis shows, `before` added in front: an index
 * in [0, n), or -1 for the constant. reflect mirrors about the end
 * elements (period 2(n-1)), symmetric about the ends (period 2n), as
 * NumPy's pad, also for widths longer than the axis. */
static inline LU_HOST_DEVICE int64_t lu_pad_src(int64_t p, int64_t n, int64_t before, int mode) {
  int64_t i = p - before;
  if (i >= 0 && i < n) return i;
  if (mode == LU_PAD_CONSTANT) return -1;
  if (mode == LU_PAD_EDGE || n == 1) return i < 0 ? 0 : n - 1;
  int64_t period = mode == LU_PAD_REFLECT ? 2 * (n - 1) : 2 * n;
  i %= period;
  if (i < 0) i += period;
  if (i < n) return i;
  return mode == LU_PAD_REFLECT ? period - i : period - 1 - i;
}

/* ---- svd's rotations (core/ops/linalg.c, cuda/ops/linalg.cu) ------------- */

/* One matrix: u (m, n) holds x on entry and U on exit, v (n, n) gets V, s (n)
 * S; row-major doubles. Rotations until every pair of columns of u is
 * orthogonal to rounding (at most 64 sweeps), then the columns' norms are S,
 * sorted descending with their columns. A zero singular value leaves a zero
 * column in U. One function for the CPU and the GPU kernel, so that both
 * give the same bits. */
static inline LU_HOST_DEVICE void lu_svd_jacobi(double *u, double *v, double *s, int64_t m, int64_t n) {
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

/* ---- the CUDA backend (cuda/, loaded with dlopen) ----------------------- */

/* What the core lends the backend (libluon_cuda.so does not link
 * libluon.so): set by device.c before luon_cuda_init. */
typedef struct lu_cuda_host {
  uint64_t (*rng_reserve)(lu_device dev, uint64_t n, uint64_t *key);
  luon_status (*alloc)(lu_device dev, size_t bytes, lu_block **out); /* kernel scratch */
  void (*free)(lu_block *b);
  const char *(*last_error)(void);  /* the core's message after a failed alloc */
} lu_cuda_host;

#define LU_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES: luon.dist sends it over MPI */

/* The vtable libluon_cuda.so fills in luon_cuda_init. Absent: all NULL.
 * Streams: every kernel and copy for gpu(i) is ordered on gpu(i)'s one
 * compute stream, so a block freed to gpu(i)'s cache is safely reused by
 * later gpu(i) work without a synchronisation; copies on the copy stream
 * are fenced with events both ways. */
typedef struct lu_cuda_backend {
  int32_t abi;                  /* LU_CUDA_ABI */
  const lu_cuda_host *host;     /* set by the core before init */
  int32_t (*device_count)(void);
  luon_status (*memory_info)(int32_t id, int64_t *free_b, int64_t *total_b);
  luon_status (*malloc)(int32_t id, size_t bytes, void **ptr);
  void (*free)(int32_t id, void *ptr);
  luon_status (*memcpy)(void *dst, lu_device ddev, const void *src, lu_device sdev,
                        size_t bytes);
  /* dst <- src on dst's GPU: the same shape, any strides on both sides, src
   * converted to dst's dtype (luon_tensor_copy; the CPU's is lu_copy_cpu) */
  luon_status (*copy)(luon_tensor *dst, const luon_tensor *src);
  luon_status (*sync)(int32_t id);
  const char *(*last_error)(void);
  /* pinned (page-locked) host memory, for the data loader's batches */
  luon_status (*host_alloc)(size_t bytes, void **ptr);
  void (*host_free)(void *ptr);
  /* events on gpu(id)'s compute stream: record after the work queued so
   * far; sync waits for it on the host; query: LUON_OK when done,
   * LUON_EUNSUPPORTED (no message) while pending */
  luon_status (*event_record)(int32_t id, void **ev);
  luon_status (*event_sync)(void *ev);
  luon_status (*event_query)(void *ev);
  void (*event_free)(void *ev);
  /* In-place sum (op 0) or mean (op 1) of n contiguous replicas of count
   * elements on gpu(ids[k]): NCCL when the replicas sit on distinct physical
   * cards; LUON_EUNSUPPORTED otherwise (the caller then copies and adds). */
  luon_status (*allreduce)(int32_t n, void *const *ptrs, const int32_t *ids, int32_t dtype,
                           int64_t count, int32_t op);
  /* luon.dist's NCCL path (comm.cu): one communicator per process, on one
   * GPU, across processes; core/dist/dist.c brings the unique id to every rank
   * over MPI. Communicators are non-blocking (NCCL's blocking = 0): every
   * wait (init, a collective) polls ncclCommGetAsyncError and gives up after
   * timeout_s seconds (0: never), aborting the communicator (ncclCommAbort).
   * A failed or timed-out init or collective leaves the communicator
   * aborted (only nccl_destroy takes it then): LUON_EIO with "timed out" in
   * the message past the deadline, LUON_EDEVICE with NCCL's own words
   * (ncclGetErrorString, ncclGetLastError) otherwise. */
  int32_t (*nccl_version)(void); /* ncclGetVersion's code, e.g. 22809; 0 until NCCL is loaded (the first collective) */
  /* the 16-byte UUID of gpu(id)'s card: ranks sharing a card cannot share
   * a communicator (NCCL refuses duplicate GPUs) */
  luon_status (*device_uuid)(int32_t id, uint8_t uuid[16]);
  luon_status (*nccl_unique_id)(uint8_t id[LU_NCCL_ID_BYTES]);
  /* *comm (an opaque handle) for rank of nranks on gpu(dev), once ready */
  luon_status (*nccl_comm_init)(const uint8_t id[LU_NCCL_ID_BYTES], int32_t nranks, int32_t rank,
                                int32_t dev, double timeout_s, void **comm);
  /* In place on the communicator's GPU's compute stream, count contiguous
   * elements of dtype: an allreduce with op (a luon_dist_op), or a
   * broadcast from rank root. With timeout_s > 0 they return once the
   * collective has finished on the GPU (so that a peer that never joins
   * is noticed); with 0 once it is queued. LUON_EUNSUPPORTED for a dtype
   * or op NCCL lacks, before anything is queued (the comm stays usable). */
  luon_status (*nccl_allreduce)(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t op,
                                double timeout_s);
  luon_status (*nccl_broadcast)(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t root,
                                double timeout_s);
  /* ncclCommFinalize (polled) and ncclCommDestroy, or only the free of an
   * aborted one; comm is invalid afterwards in every case */
  luon_status (*nccl_destroy)(void *comm, double timeout_s);
  /* CUDA graphs, for graph.c's replays. graph_begin starts capturing
   * gpu(id)'s compute stream from this thread (relaxed mode: the caching
   * allocator may still cudaMalloc); nothing queued until graph_end runs.
   * graph_end stops the capture and instantiates it: *exec, or NULL with
   * LUON_EUNSUPPORTED and a message when something in between could not be
   * captured (a host synchronisation, a copy from pageable memory); the
   * stream works again either way and no error is left behind.
   * graph_launch queues exec on gpu(id)'s compute stream; graph_free
   * destroys it (the launches queued before still run). */
  luon_status (*graph_begin)(int32_t id);
  luon_status (*graph_end)(int32_t id, void **exec);
  luon_status (*graph_launch)(int32_t id, void *exec);
  void (*graph_free)(void *exec);
  lu_kernel_fn kernels[LU_OP_COUNT]; /* NULL: the op has no CUDA kernel */
} lu_cuda_backend;
/* The vtable's layout: bump it with any change above, and with any new
 * dtype (a backend that does not know one would read it as another). The
 * core asks for its own in b->abi before luon_cuda_init; a backend of
 * another layout is refused by name (device.c), never half used.
 * 5: int8, int16, uint16; 6: nccl_version is a function (NCCL loaded at the
 * first collective); 7000 + the op count: kernels[] is indexed by the ops'
 * ids, so a backend built for another op list is another layout (an op
 * added or removed; one moved in luon_ops.def needs a bump of the 7000);
 * 8000 + the op count: CUDA graphs (graph_begin ... graph_free). */
#define LU_CUDA_ABI (8000 + LU_OP_COUNT)
/* Entry point of libluon_cuda.so. */
typedef luon_status (*lu_cuda_init_fn)(lu_cuda_backend *b);
extern lu_cuda_backend lu_cuda;   /* zeroed when the backend is absent */
/* A backend status with the backend's message copied into luon_last_error. */
luon_status lu_cuda_check(luon_status s);

#endif
