/* device.c: the device registry. cpu(i) are logical devices over host
 * memory; gpu(i) come from the CUDA backend, libluon_cuda.so, which is
 * loaded with dlopen on first use and is optional: without it (or without a
 * driver) there are no GPUs and nothing else changes. */
#include "internal.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

lu_cuda_backend lu_cuda;
static int gpu_count;
static char cuda_status[512] = "not loaded yet";
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

/* Directory of libluon.so itself, to find libluon_cuda.so beside it. */
static void self_dir(char *buf, size_t n) {
  Dl_info info;
  buf[0] = 0;
  if (dladdr((void *)self_dir, &info) && info.dli_fname) {
    snprintf(buf, n, "%s", info.dli_fname);
    char *slash = strrchr(buf, '/');
    if (slash) slash[1] = 0; else buf[0] = 0;
  }
}

static void cuda_load(void) {
  const char *env = getenv("LUON_CUDA_LIB");
  char path[1024];
  if (env && *env) {
    snprintf(path, sizeof path, "%s", env);
  } else {
    self_dir(path, sizeof path);
    strncat(path, "libluon_cuda.so", sizeof path - strlen(path) - 1);
  }
  const char *off = getenv("LUON_NO_CUDA");
  if (off && *off && strcmp(off, "0") != 0) {
    snprintf(cuda_status, sizeof cuda_status, "disabled by LUON_NO_CUDA");
    return;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(cuda_status, sizeof cuda_status, "CUDA backend not loaded: %s", dlerror());
    return;
  }
  lu_cuda_init_fn init = (lu_cuda_init_fn)dlsym(h, "luon_cuda_init");
  static const lu_cuda_host host = {lu_rng_reserve, lu_alloc, lu_free, luon_last_error};
  /* The vtable, with room to spare: a backend of an older or newer layout
   * (a stale libluon_cuda.so beside a rebuilt libluon.so) may write more
   * than our struct holds before we can read its abi and refuse it. */
  static union {
    lu_cuda_backend b;
    char room[sizeof(lu_cuda_backend) + 64 * 1024];
  } slot;
  lu_cuda_backend *bp = &slot.b;
  memset(&slot, 0, sizeof slot);
  bp->abi = LU_CUDA_ABI; /* what we speak; a backend of ABI 3 or later refuses another */
  bp->host = &host;
  if (!init) {
    snprintf(cuda_status, sizeof cuda_status, "%s has no luon_cuda_init", path);
  } else if (init(bp) != LUON_OK && bp->abi == LU_CUDA_ABI) {
    snprintf(cuda_status, sizeof cuda_status, "CUDA backend unavailable: %s",
             bp->last_error ? bp->last_error() : luon_last_error());
  } else if (bp->abi != LU_CUDA_ABI) {
    snprintf(cuda_status, sizeof cuda_status,
             "CUDA backend unavailable: %s speaks backend ABI %d but this libluon.so speaks %d "
             "(the two are from different builds; rebuild them together)",
             path, bp->abi, LU_CUDA_ABI);
  } else if (!bp->device_count) {
    snprintf(cuda_status, sizeof cuda_status, "CUDA backend unavailable: %s has no device_count",
             path);
  } else {
    int n = bp->device_count();
    if (n <= 0) {
      snprintf(cuda_status, sizeof cuda_status, "CUDA backend loaded but found no GPU: %s",
               bp->last_error ? bp->last_error() : "no device");
    } else {
      lu_cuda = *bp;
      gpu_count = n > LU_MAX_GPU_DEVICES ? LU_MAX_GPU_DEVICES : n;
      cuda_status[0] = 0;
      return;
    }
  }
  /* keep the library mapped: unloading CUDA runtimes at start is fragile */
}

luon_status lu_cuda_check(luon_status s) {
  if (s != LUON_OK) lu_error(s, "%s", lu_cuda.last_error ? lu_cuda.last_error() : "CUDA error");
  return s;
}

static void ensure_cuda(void) { pthread_once(&cuda_once, cuda_load); }

int32_t luon_gpu_count(void) {
  ensure_cuda();
  return gpu_count;
}

const char *luon_cuda_status(void) {
  ensure_cuda();
  return cuda_status;
}

luon_status luon_gpu_memory_info(int32_t id, int64_t *free_b, int64_t *total_b) {
  ensure_cuda();
  if (gpu_count == 0)
    return lu_error(LUON_EUNSUPPORTED,
                    "gpu_memory_info: no GPU is available (%s)", cuda_status);
  LU_TRY(lu_device_check((lu_device){LUON_GPU, id}));
  int64_t fr = 0, total = 0; /* either out pointer may be NULL; backends need not check */
  LU_TRY(lu_cuda_check(lu_cuda.memory_info(id, &fr, &total)));
  if (free_b) *free_b = fr;
  if (total_b) *total_b = total;
  return LUON_OK;
}

const char *lu_device_str(lu_device d) {
  static _Thread_local char ring[4][32];
  static _Thread_local int next;
  char *s = ring[next++ & 3];
  snprintf(s, 32, "%s(%d)", d.type == LUON_CPU ? "cpu" : d.type == LUON_GPU ? "gpu" : "device?",
           d.id);
  return s;
}

const char *luon_device_name(int32_t type, int32_t id) {
  return lu_device_str((lu_device){type, id});
}

luon_status lu_device_check(lu_device d) {
  if (d.type == LUON_CPU) {
    if (d.id < 0 || d.id >= LU_MAX_CPU_DEVICES)
      return lu_error(LUON_EDEVICE, "cpu(%d) does not exist: logical CPU devices are cpu(0) to cpu(%d)",
                      d.id, LU_MAX_CPU_DEVICES - 1);
    return LUON_OK;
  }
  if (d.type == LUON_GPU) {
    int n = luon_gpu_count();
    if (d.id < 0 || d.id >= n) {
      if (n == 0)
        return lu_error(LUON_EDEVICE, "gpu(%d) does not exist: this process has no GPU (%s)", d.id,
                        cuda_status);
      return lu_error(LUON_EDEVICE, "gpu(%d) does not exist: this process has %d GPU%s, gpu(0) to gpu(%d)",
                      d.id, n, n == 1 ? "" : "s", n - 1);
    }
    return LUON_OK;
  }
  return lu_error(LUON_EDEVICE, "unknown device type %d (expected cpu or gpu)", d.type);
}

luon_status luon_device_check(int32_t type, int32_t id) {
  return lu_device_check((lu_device){type, id});
}

luon_status luon_device_sync(int32_t type, int32_t id) {
  lu_device d = {type, id};
  LU_TRY(lu_device_check(d));
  if (type == LUON_GPU && lu_cuda.sync) return lu_cuda_check(lu_cuda.sync(id));
  return LUON_OK;
}
