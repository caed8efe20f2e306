/* internal_cuda.h: what the files of cuda/ share: the backend's own
 * thread-local error message, the mapping of a CUDA error to a luon status,
 * and switching to a logical GPU's physical card. Not seen by core/. */
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
 * (<name>)". Sticky faults become LUON_EDEVICE_LOST ("restart the process");
 * the runtime's last error is cleared for the others so the device stays
 * usable. */
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
 * it. enter fails with LUON_EDEVICE for an id that does not exist. */
typedef struct lu_cuda_guard {
  int prev;
  int changed;
} lu_cuda_guard;
luon_status lu_cuda_enter(int32_t id, lu_cuda_guard *g, const char *what);
void lu_cuda_leave(lu_cuda_guard *g);

#endif
