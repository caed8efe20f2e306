/* device.cu: the entry point of libluon_cuda.so and its device vtable:
 * counting GPUs, memory, copies, synchronisation and the backend's error
 * message. No kernels here (those are cuda/ops/<op>.cu); nothing prints. */
#include "internal_cuda.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- errors ------------------------------------------------------------ */

static thread_local char err_msg[512];

luon_status lu_cuda_seterr(luon_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  return s;
}

const char *lu_cuda_geterr(void) { return err_msg; }

/* Faults that poison the CUDA context: every later call fails the same way. */
static bool is_sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorContextIsDestroyed:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case cudaErrorTensorMemoryLeak:
  case cudaErrorECCUncorrectable:
  case cudaErrorNvlinkUncorrectable:
  case cudaErrorExternalDevice:
    return true;
  default:
    return false;
  }
}

luon_status lu_cuda_fail(cudaError_t e, const char *what) {
  const char *text = cudaGetErrorString(e), *name = cudaGetErrorName(e);
  if (is_sticky(e))
    return lu_cuda_seterr(LUON_EDEVICE_LOST,
                          "%s: %s (%s); the GPU context is lost, restart the process", what,
                          text, name);
  cudaGetLastError(); /* clear it, so the next call does not see it */
  return lu_cuda_seterr(e == cudaErrorMemoryAllocation ? LUON_ENOMEM : LUON_EDEVICE,
                        "%s: %s (%s)", what, text, name);
}

/* ---- logical devices ---------------------------------------------------- */

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int32_t n_logical;
static int phys_of[LU_MAX_GPU_DEVICES];
static char count_msg[512]; /* why there is no GPU, for every thread */

static void count_devices(void) {
  int n = 0, rt = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = CUDART_VERSION;
    cudaGetLastError();
    bool no_card = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
    snprintf(count_msg, sizeof count_msg, "cudaGetDeviceCount: %s (%s); %s %d.%d%s",
             cudaGetErrorString(e), cudaGetErrorName(e),
             no_card ? "GPUs need a visible NVIDIA card and a driver for CUDA" : "CUDA runtime",
             rt / 1000, rt % 1000 / 10, no_card ? " or newer" : "");
    return;
  }
  if (n <= 0) {
    snprintf(count_msg, sizeof count_msg, "cudaGetDeviceCount found no CUDA device");
    return;
  }
  const char *v = getenv("LUON_VIRTUAL_GPUS");
  char *end = NULL;
  long nv = v && *v ? strtol(v, &end, 10) : 0;
  if (end && *end) nv = 0; /* not a number: ignore it */
  if (nv > 0) {
    n_logical = nv > LU_MAX_GPU_DEVICES ? LU_MAX_GPU_DEVICES : (int32_t)nv;
    for (int i = 0; i < n_logical; i++) phys_of[i] = 0;
  } else {
    n_logical = n > LU_MAX_GPU_DEVICES ? LU_MAX_GPU_DEVICES : n;
    for (int i = 0; i < n_logical; i++) phys_of[i] = i;
  }
}

int32_t lu_cuda_count(void) {
  pthread_once(&count_once, count_devices);
  return n_logical;
}

int lu_cuda_phys(int32_t id) { return phys_of[id]; }

luon_status lu_cuda_enter(int32_t id, lu_cuda_guard *g, const char *what) {
  g->prev = -1;
  g->changed = 0;
  int32_t n = lu_cuda_count();
  if (id < 0 || id >= n)
    return lu_cuda_seterr(LUON_EDEVICE, "%s: gpu(%d) does not exist (%d GPU%s)", what, id, n,
                          n == 1 ? "" : "s");
  int want = phys_of[id];
  LU_CUDA_TRY(cudaGetDevice(&g->prev));
  if (g->prev != want) {
    LU_CUDA_TRY(cudaSetDevice(want));
    g->changed = 1;
  }
  return LUON_OK;
}

void lu_cuda_leave(lu_cuda_guard *g) {
  /* Restoring can only fail if the context is already lost; the call that
   * lost it has reported that. */
  if (g->changed && cudaSetDevice(g->prev) != cudaSuccess) cudaGetLastError();
  g->changed = 0;
}

/* ---- the vtable --------------------------------------------------------- */

static int32_t device_count(void) {
  int32_t n = lu_cuda_count();
  if (n == 0) lu_cuda_seterr(LUON_EDEVICE, "%s", count_msg);
  return n;
}

static luon_status memory_info(int32_t id, int64_t *free_b, int64_t *total_b) {
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(id, &g, "gpu_memory_info");
  if (s != LUON_OK) return s;
  size_t fr = 0, total = 0;
  cudaError_t e = cudaMemGetInfo(&fr, &total);
  lu_cuda_leave(&g);
  if (e != cudaSuccess) return lu_cuda_fail(e, "gpu_memory_info: cudaMemGetInfo");
  if (free_b) *free_b = (int64_t)fr;
  if (total_b) *total_b = (int64_t)total;
  return LUON_OK;
}

static luon_status dev_malloc(int32_t id, size_t bytes, void **ptr) {
  *ptr = NULL;
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(id, &g, "gpu alloc");
  if (s != LUON_OK) return s;
  cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
  lu_cuda_leave(&g);
  if (e != cudaSuccess) {
    *ptr = NULL;
    char what[96];
    snprintf(what, sizeof what, "cudaMalloc of %zu bytes on gpu(%d)", bytes, id);
    return lu_cuda_fail(e, what);
  }
  return LUON_OK;
}

static void dev_free(int32_t id, void *ptr) {
  if (!ptr) return;
  lu_cuda_guard g;
  if (lu_cuda_enter(id, &g, "gpu free") != LUON_OK) return;
  cudaError_t e = cudaFree(ptr);
  lu_cuda_leave(&g);
  /* At process exit the runtime may be unloading before the caches drain. */
  if (e == cudaErrorCudartUnloading) cudaGetLastError();
  else if (e != cudaSuccess) lu_cuda_fail(e, "cudaFree");
}

/* Copies are ordered on the legacy default stream, like the kernels; a copy
 * to the host returns once the data is there. */
static luon_status dev_memcpy(void *dst, lu_device ddev, const void *src, lu_device sdev,
                              size_t bytes) {
  if (bytes == 0) return LUON_OK;
  bool dh = ddev.type == LUON_CPU, sh = sdev.type == LUON_CPU;
  if (dh && sh) {
    memcpy(dst, src, bytes);
    return LUON_OK;
  }
  int32_t n = lu_cuda_count();
  for (int k = 0; k < 2; k++) {
    lu_device d = k ? sdev : ddev;
    if (d.type != LUON_CPU && (d.type != LUON_GPU || d.id < 0 || d.id >= n))
      return lu_cuda_seterr(LUON_EDEVICE, "gpu copy: %s device %s(%d) does not exist (%d GPU%s)",
                            k ? "source" : "destination", d.type == LUON_GPU ? "gpu" : "device?",
                            d.id, n, n == 1 ? "" : "s");
  }
  lu_cuda_guard g; /* run on the GPU end (the destination when both are) */
  luon_status s = lu_cuda_enter(dh ? sdev.id : ddev.id, &g, "gpu copy");
  if (s != LUON_OK) return s;
  cudaError_t e;
  const char *what;
  if (sh) {
    e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    what = "copy host to gpu: cudaMemcpy";
  } else if (dh) {
    e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    what = "copy gpu to host: cudaMemcpy";
  } else if (phys_of[ddev.id] == phys_of[sdev.id]) {
    e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
    what = "copy gpu to gpu: cudaMemcpy";
  } else {
    e = cudaMemcpyPeer(dst, phys_of[ddev.id], src, phys_of[sdev.id], bytes);
    what = "copy between gpus: cudaMemcpyPeer";
  }
  lu_cuda_leave(&g);
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, what);
}

static luon_status dev_sync(int32_t id) {
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(id, &g, "gpu sync");
  if (s != LUON_OK) return s;
  cudaError_t e = cudaDeviceSynchronize();
  lu_cuda_leave(&g);
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, "gpu sync: cudaDeviceSynchronize");
}

/* The backend touches no CUDA API here: counting waits for device_count. */
extern "C" __attribute__((visibility("default"))) luon_status
luon_cuda_init(lu_cuda_backend *b) {
  if (!b) return lu_cuda_seterr(LUON_EINVAL, "luon_cuda_init: NULL vtable");
  b->abi = LU_CUDA_ABI;
  b->device_count = device_count;
  b->memory_info = memory_info;
  b->malloc = dev_malloc;
  b->free = dev_free;
  b->memcpy = dev_memcpy;
  b->sync = dev_sync;
  b->last_error = lu_cuda_geterr;
  for (int i = 0; i < LU_OP_COUNT; i++) b->kernels[i] = NULL;
  return LUON_OK;
}
