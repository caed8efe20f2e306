/* internal_cuda.h: what the files of cuda/ share: the backend's own
 * thread-local error message, the mapping of a CUDA error to a luon status,
 * switching to a logical GPU's card and stream, kernel scratch from the
 * core's caching allocator, and the op registry's lu_cuda_<op> symbols.
 * Not seen by core/. */
#ifndef LUON_INTERNAL_CUDA_H
#define LUON_INTERNAL_CUDA_H

#include <cuda_runtime.h>

extern "C" {
#include "internal.h"
}

/* libluon_cuda.so does not link libluon.so, so lu_error is out of reach: the
 * backend keeps its own message, which the core reads with last_error(). */
luon_status lu_cuda_seterr(luon_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *lu_cuda_geterr(void);

/* Map a failed CUDA call to a status and set the message "<what>: <text>
 * (<name>)". Sticky faults become LUON_EDEVICE_LOST ("restart the process")
 * and every later call fails fast; the runtime's last error is cleared for
 * the others so the device stays usable. */
luon_status lu_cuda_fail(cudaError_t e, const char *what);

/* Check a CUDA call; on failure return its status from the enclosing
 * function (which must return luon_status). */
#define LU_CUDA_TRY(call)                                                     \
  do {                                                                        \
    cudaError_t lu_cuda_e_ = (call);                                          \
    if (lu_cuda_e_ != cudaSuccess) return lu_cuda_fail(lu_cuda_e_, #call);    \
  } while (0)

/* Logical GPUs: their number, and the physical card behind gpu(id)
 * (LUON_VIRTUAL_GPUS=N maps N logical GPUs onto card 0). */
int32_t lu_cuda_count(void);
int lu_cuda_phys(int32_t id);

/* Make gpu(id)'s card current, remembering the previous one; leave restores
 * it (unless it is the card 0 a thread starts on and card 0 has no context
 * yet: restoring would create one). enter fails with LUON_EDEVICE for an id
 * that does not exist and with LUON_EDEVICE_LOST once a sticky fault has
 * been seen. */
typedef struct lu_cuda_guard {
  int prev;
  int changed;
} lu_cuda_guard;
luon_status lu_cuda_enter(int32_t id, lu_cuda_guard *g, const char *what);
void lu_cuda_leave(lu_cuda_guard *g);

/* gpu(id)'s compute stream (created on first use; the card must be
 * current). Every kernel for gpu(id) goes on it: see lu_cuda_backend. */
luon_status lu_cuda_stream(int32_t id, cudaStream_t *s);

/* What the core lends (random counters, the caching allocator). */
extern const lu_cuda_host *lu_cuda_host_api;

/* One kernel call: enter the device of c, fetch its stream. end checks the
 * launches (cudaGetLastError), synchronises under LUON_CUDA_SYNC=1 so an
 * asynchronous fault names this op, and restores the previous card; it
 * returns s unless the check fails. */
typedef struct lu_cuda_ctx {
  lu_cuda_guard g;
  cudaStream_t s;
  int32_t id;
  const char *op;
} lu_cuda_ctx;
luon_status lu_cuda_begin(const lu_call *c, lu_cuda_ctx *k);
luon_status lu_cuda_end(lu_cuda_ctx *k, luon_status s);
/* y (N,O,P...) of dtype dt (float32/64) in place on stream st: + b[o] (dense,
 * dt; NULL: none), then max(., 0) with NaN kept when relu (cuda/ops/conv.cu) */
void lu_cuda_bias_relu(void *y, int32_t dt, const void *b, const luon_tensor *yt, bool relu, cudaStream_t st);

/* Device scratch of `bytes` on gpu(id) from the core's cache. Free it right
 * after the kernels that use it are queued: reuse is stream ordered. */
luon_status lu_cuda_scratch(int32_t id, size_t bytes, lu_block **b);
void lu_cuda_scratch_free(lu_block *b);

/* Whether an environment flag is set to something other than "0". */
bool lu_cuda_flag(const char *name);
/* LUON_CUDA_SYNC=1: synchronise after every op and copy. */
bool lu_cuda_sync_each_op(void);
/* Whether s is being captured into a CUDA graph (nothing runs; a wait for
 * it, a cudaFree or a timed algorithm search would end the capture) */
bool lu_cuda_capturing(cudaStream_t s);
/* lu_cuda_sync_each_op(), and s not being captured into a CUDA graph */
bool lu_cuda_sync_after(cudaStream_t s);

/* The CUDA kernels, one per op whose registry line says ALL, found by name:
 * the link (-z defs) fails without one. CPU-only ops and views (ANY) have
 * none: NULL in the table, and the dispatcher says so or runs the view. */
#define LU_CUDA_DECL_ALL(name) luon_status lu_cuda_##name(lu_call *c);
#define LU_CUDA_DECL_CPU(name)
#define LU_CUDA_DECL_ANY(name)
#define LU_CUDA_FN_ALL(name) lu_cuda_##name
#define LU_CUDA_FN_CPU(name) NULL
#define LU_CUDA_FN_ANY(name) NULL
#define LUON_OP(name, nin, nout, kind, grad, backends, flags) LU_CUDA_DECL_##backends(name)
#include "luon_ops.def"
#undef LUON_OP

/* The strided, converting tensor copy (ops/elementwise.cu) for the vtable. */
luon_status lu_cuda_copy_to(luon_tensor *dst, const luon_tensor *src);
/* NCCL all-reduce (comm.cu) for the vtable. */
luon_status lu_cuda_allreduce(int32_t n, void *const *ptrs, const int32_t *ids, int32_t dtype,
                              int64_t count, int32_t op);
/* The cross-process NCCL entries (comm.cu): nccl_version, device_uuid,
 * nccl_unique_id, nccl_comm_init, nccl_allreduce, nccl_broadcast, nccl_destroy. */
void lu_cuda_nccl_fill(lu_cuda_backend *b);

#endif
