/* cudnn_handle.cu: one cuDNN handle per GPU, shared by the convolutions and
 * the recurrent layers, and cuDNN's failures as luon errors. */
#include "cudnn_handle.h"
#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cudnnHandle_t handles[LU_MAX_GPU_DEVICES];

luon_status lu_cudnn_fail(cudnnStatus_t r, const char *op, const char *what) {
  luon_status s = r == CUDNN_STATUS_ALLOC_FAILED ? LUON_ENOMEM
                  : r == CUDNN_STATUS_NOT_SUPPORTED ? LUON_EUNSUPPORTED : LUON_EDEVICE;
  return lu_cuda_seterr(s, "%s: %s: %s (cuDNN %d)", op, what, cudnnGetErrorString(r), (int)r);
}

luon_status lu_cudnn_handle(int32_t id, cudaStream_t st, const char *op, cudnnHandle_t *out) {
  pthread_mutex_lock(&lock);
  cudnnStatus_t r = CUDNN_STATUS_SUCCESS;
  if (!handles[id]) {
    r = cudnnCreate(&handles[id]);
    if (r != CUDNN_STATUS_SUCCESS) handles[id] = NULL;
  }
  *out = handles[id];
  pthread_mutex_unlock(&lock);
  if (r != CUDNN_STATUS_SUCCESS) return lu_cudnn_fail(r, op, "cudnnCreate");
  r = cudnnSetStream(*out, st);
  return r == CUDNN_STATUS_SUCCESS ? LUON_OK : lu_cudnn_fail(r, op, "cudnnSetStream");
}
