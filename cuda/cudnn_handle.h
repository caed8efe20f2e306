/* cudnn_handle.h: what the cuDNN users of the backend (ops/conv.cu,
 * ops/rnn.cu) share: one cuDNN handle per GPU and cuDNN's failures as luon
 * errors (cudnn_handle.cu). */
#ifndef LUON_CUDNN_HANDLE_H
#define LUON_CUDNN_HANDLE_H
#include "internal_cuda.h"
#include <cudnn.h>

/* "<op>: <what>: <cuDNN's message> (cuDNN <code>)": LUON_ENOMEM for an
 * allocation failure, LUON_EUNSUPPORTED for NOT_SUPPORTED, else LUON_EDEVICE. */
luon_status lu_cudnn_fail(cudnnStatus_t r, const char *op, const char *what);
/* gpu(id)'s cuDNN handle (made at the first call), set to stream st. */
luon_status lu_cudnn_handle(int32_t id, cudaStream_t st, const char *op, cudnnHandle_t *out);

#endif
