/* device.cu: the entry point of libluon_cuda.so and its device vtable:
 * counting GPUs, streams, memory (device and pinned host), copies, events,
 * synchronisation and the backend's error message. No kernels here (those
 * are cuda/ops/<op>.cu); nothing prints. */
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
  case cudaErrorContained:
  case cudaErrorMpsClientTerminated:
    return true;
  default:
    return false;
  }
}

static int lost; /* a sticky fault was seen: the context is gone for good */

luon_status lu_cuda_fail(cudaError_t e, const char *what) {
  const char *text = cudaGetErrorString(e), *name = cudaGetErrorName(e);
  if (is_sticky(e)) {
    __atomic_store_n(&lost, 1, __ATOMIC_RELAXED);
    return lu_cuda_seterr(LUON_EDEVICE_LOST,
                          "%s: %s (%s); the GPU context is lost, restart the process", what,
                          text, name);
  }
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

/* Bit p: card p has been made current here, so its primary context exists.
 * A thread that never chose a card reads card 0, and since CUDA 12
 * cudaSetDevice creates the context it names: restoring that 0 would give
 * every process of a job on gpu(local_rank) a context on card 0. */
static unsigned live_cards;

luon_status lu_cuda_enter(int32_t id, lu_cuda_guard *g, const char *what) {
  g->prev = -1;
  g->changed = 0;
  int32_t n = lu_cuda_count();
  if (id < 0 || id >= n)
    return lu_cuda_seterr(LUON_EDEVICE, "%s: gpu(%d) does not exist (%d GPU%s)", what, id, n,
                          n == 1 ? "" : "s");
  if (__atomic_load_n(&lost, __ATOMIC_RELAXED))
    return lu_cuda_seterr(LUON_EDEVICE_LOST, "%s: an earlier CUDA fault lost the GPU context; "
                          "restart the process", what);
  int want = phys_of[id];
  LU_CUDA_TRY(cudaGetDevice(&g->prev));
  if (g->prev != want) {
    LU_CUDA_TRY(cudaSetDevice(want));
    g->changed = 1;
  }
  if (want < 32) __atomic_or_fetch(&live_cards, 1u << want, __ATOMIC_RELAXED);
  return LUON_OK;
}

void lu_cuda_leave(lu_cuda_guard *g) {
  /* Restoring can only fail if the context is already lost; the call that
   * lost it has reported that. */
  bool live = g->prev != 0 || (__atomic_load_n(&live_cards, __ATOMIC_RELAXED) & 1u);
  if (g->changed && live && cudaSetDevice(g->prev) != cudaSuccess) cudaGetLastError();
  g->changed = 0;
}

/* ---- streams -------------------------------------------------------------- */

static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t compute_s[LU_MAX_GPU_DEVICES], copy_s[LU_MAX_GPU_DEVICES];

/* Non-blocking streams: they never wait for the legacy default stream, so
 * virtual GPUs on one card and real cards run their work concurrently. */
static luon_status get_stream(int32_t id, bool copy, cudaStream_t *out) {
  cudaStream_t *tab = copy ? copy_s : compute_s;
  pthread_mutex_lock(&stream_lock);
  cudaError_t e = cudaSuccess;
  if (!tab[id]) e = cudaStreamCreateWithFlags(&tab[id], cudaStreamNonBlocking);
  *out = tab[id];
  pthread_mutex_unlock(&stream_lock);
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, "cudaStreamCreateWithFlags");
}

luon_status lu_cuda_stream(int32_t id, cudaStream_t *s) { return get_stream(id, false, s); }

bool lu_cuda_flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

bool lu_cuda_sync_each_op(void) {
  static int flag = -1; /* read once; threads racing here read the same value */
  int f = __atomic_load_n(&flag, __ATOMIC_RELAXED);
  if (f < 0) {
    f = lu_cuda_flag("LUON_CUDA_SYNC");
    __atomic_store_n(&flag, f, __ATOMIC_RELAXED);
  }
  return f == 1;
}

/* LUON_CUDA_SYNC=1's wait after work queued on s, except while s is
 * captured into a CUDA graph (nothing runs then; a wait would end the
 * capture): graph_launch waits instead. */
bool lu_cuda_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) cudaGetLastError();
  return cs != cudaStreamCaptureStatusNone;
}

bool lu_cuda_sync_after(cudaStream_t s) { return lu_cuda_sync_each_op() && !lu_cuda_capturing(s); }

/* ---- kernel calls and scratch -------------------------------------------------- */

const lu_cuda_host *lu_cuda_host_api;

static const char *const op_names[LU_OP_COUNT] = {
#define LUON_OP(name, nin, nout, kind, grad, backends, flags) #name,
#include "luon_ops.def"
#undef LUON_OP
};

luon_status lu_cuda_begin(const lu_call *c, lu_cuda_ctx *k) {
  k->id = c->dev.id;
  k->op = c->op >= 0 && c->op < LU_OP_COUNT ? op_names[c->op] : "op";
  k->s = 0;
  /* drop an error left by a call whose status was ignored (an event
   * destroy, a library's probe), so that end reports this op's own */
  cudaError_t e = cudaGetLastError();
  if (is_sticky(e)) return lu_cuda_fail(e, k->op);
  luon_status s = lu_cuda_enter(c->dev.id, &k->g, k->op);
  if (s != LUON_OK) return s;
  s = lu_cuda_stream(c->dev.id, &k->s);
  if (s != LUON_OK) lu_cuda_leave(&k->g);
  return s;
}

luon_status lu_cuda_end(lu_cuda_ctx *k, luon_status s) {
  char what[128];
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    snprintf(what, sizeof what, "%s on gpu(%d): kernel launch", k->op, k->id);
    s = lu_cuda_fail(e, what);
  } else if (lu_cuda_sync_after(k->s) && (e = cudaStreamSynchronize(k->s)) != cudaSuccess) {
    snprintf(what, sizeof what, "%s on gpu(%d) (LUON_CUDA_SYNC=1: the fault is in this op)", k->op,
             k->id);
    s = lu_cuda_fail(e, what);
  }
  lu_cuda_leave(&k->g);
  return s;
}

luon_status lu_cuda_scratch(int32_t id, size_t bytes, lu_block **b) {
  *b = NULL;
  luon_status s = lu_cuda_host_api->alloc(lu_device{LUON_GPU, id}, bytes ? bytes : 1, b);
  if (s != LUON_OK) return lu_cuda_seterr(s, "%s", lu_cuda_host_api->last_error());
  return LUON_OK;
}

void lu_cuda_scratch_free(lu_block *b) {
  if (b) lu_cuda_host_api->free(b);
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

/* The core's caching allocator (core/alloc.c) keeps freed blocks per
 * logical device and hands them out again without a synchronisation: safe
 * because all of gpu(id)'s work runs in order on its compute stream. On
 * failure it drains its cache (cudaFree) and retries once before reporting
 * LUON_ENOMEM with the bytes asked and free. */
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

/* A cached block goes back as soon as its last kernels are queued, and
 * cudaFree only "may" synchronise: wait for gpu(id)'s compute stream (copies
 * touching its blocks are fenced into it) so a block still read by a kernel
 * is never released under it (the cache drains rarely). */
static void dev_free(int32_t id, void *ptr) {
  if (!ptr) return;
  lu_cuda_guard g;
  if (lu_cuda_enter(id, &g, "gpu free") != LUON_OK) return;
  pthread_mutex_lock(&stream_lock);
  cudaStream_t st = compute_s[id];
  pthread_mutex_unlock(&stream_lock);
  cudaError_t e = st ? cudaStreamSynchronize(st) : cudaSuccess;
  if (e == cudaSuccess) e = cudaFree(ptr); /* else keep it: the work may still read it */
  lu_cuda_leave(&g);
  /* At process exit the runtime may be unloading before the caches drain. */
  if (e == cudaErrorCudartUnloading) cudaGetLastError();
  else if (e != cudaSuccess) lu_cuda_fail(e, "cudaFree");
}

/* Pinned memory is portable (every card reads it) but made and freed in
 * one card's context: one the process already uses (gpu(0) before any), so
 * a process that works on another card makes no context on card 0. */
static int32_t pin_gpu(void) {
  int32_t n = lu_cuda_count();
  unsigned live = __atomic_load_n(&live_cards, __ATOMIC_RELAXED);
  for (int32_t i = 0; i < n; i++)
    if (phys_of[i] < 32 && (live >> phys_of[i] & 1u)) return i;
  return 0;
}

static luon_status host_alloc(size_t bytes, void **ptr) {
  *ptr = NULL;
  if (lu_cuda_count() == 0) return lu_cuda_seterr(LUON_EDEVICE, "pinned alloc: no GPU");
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(pin_gpu(), &g, "pinned alloc");
  if (s != LUON_OK) return s;
  cudaError_t e = cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocPortable);
  lu_cuda_leave(&g);
  if (e != cudaSuccess) {
    *ptr = NULL;
    char what[96];
    snprintf(what, sizeof what, "cudaHostAlloc of %zu pinned bytes", bytes);
    return lu_cuda_fail(e, what);
  }
  return LUON_OK;
}

static void host_free(void *ptr) {
  if (!ptr) return;
  /* in a context the process uses; if none can be entered (a lost device),
   * freed as it is rather than kept */
  lu_cuda_guard g;
  bool entered = lu_cuda_enter(pin_gpu(), &g, "pinned free") == LUON_OK;
  cudaError_t e = cudaFreeHost(ptr);
  if (entered) lu_cuda_leave(&g);
  if (e == cudaErrorCudartUnloading) cudaGetLastError();
  else if (e != cudaSuccess) lu_cuda_fail(e, "cudaFreeHost");
}

/* A new event recorded on stream s of gpu(id)'s card (current). */
static luon_status record_on(cudaStream_t s, cudaEvent_t *ev) {
  LU_CUDA_TRY(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(*ev, s);
  if (e != cudaSuccess) {
    cudaEventDestroy(*ev);
    *ev = NULL;
    return lu_cuda_fail(e, "cudaEventRecord");
  }
  return LUON_OK;
}

static luon_status event_record(int32_t id, void **out) {
  *out = NULL;
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(id, &g, "event record");
  if (s != LUON_OK) return s;
  cudaStream_t st;
  cudaEvent_t ev = NULL;
  s = lu_cuda_stream(id, &st);
  if (s == LUON_OK) s = record_on(st, &ev);
  lu_cuda_leave(&g);
  *out = (void *)ev;
  return s;
}

static luon_status event_sync(void *ev) {
  if (!ev) return LUON_OK;
  LU_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)ev));
  return LUON_OK;
}

static luon_status event_query(void *ev) {
  if (!ev) return LUON_OK;
  cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return LUON_EUNSUPPORTED;
  }
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, "cudaEventQuery");
}

static void event_free(void *ev) {
  if (ev && cudaEventDestroy((cudaEvent_t)ev) != cudaSuccess) cudaGetLastError();
}

static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
static signed char peer_state[LU_MAX_GPU_DEVICES][LU_MAX_GPU_DEVICES]; /* 0 unknown, 1 on, -1 off */

/* Let card `from` (current) read card `to` directly when the hardware can;
 * cudaMemcpyPeerAsync stages through the host otherwise. */
static void enable_peer(int from, int to) {
  pthread_mutex_lock(&peer_lock);
  if (peer_state[from][to] == 0) {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can) {
      cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
      can = e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
    }
    cudaGetLastError();
    peer_state[from][to] = can ? 1 : -1;
  }
  pthread_mutex_unlock(&peer_lock);
}

/* gpu(sid) -> gpu(did): on did's copy stream, after the work queued on both
 * compute streams (the source's producer, the destination's earlier
 * readers of a reused block); both compute streams then wait for the copy,
 * so neither block is reused before it is done. No host wait. */
static luon_status copy_between(void *dst, int32_t did, const void *src, int32_t sid,
                                size_t bytes) {
  lu_cuda_guard g;
  cudaStream_t scomp, dcomp, dcopy;
  cudaEvent_t es = NULL, ed = NULL, ec = NULL;
  luon_status s = lu_cuda_enter(sid, &g, "gpu copy");
  if (s != LUON_OK) return s;
  s = lu_cuda_stream(sid, &scomp);
  if (s == LUON_OK) s = record_on(scomp, &es);
  lu_cuda_leave(&g);
  if (s != LUON_OK) return s;
  s = lu_cuda_enter(did, &g, "gpu copy");
  if (s != LUON_OK) {
    cudaEventDestroy(es);
    return s;
  }
  int ps = phys_of[sid], pd = phys_of[did];
  if (ps != pd) enable_peer(pd, ps);
  cudaError_t e = cudaSuccess;
  const char *what = "copy between gpus";
  s = lu_cuda_stream(did, &dcomp);
  if (s == LUON_OK) s = get_stream(did, true, &dcopy);
  if (s == LUON_OK) s = record_on(dcomp, &ed);
  if (s == LUON_OK) {
    if ((e = cudaStreamWaitEvent(dcopy, es, 0)) != cudaSuccess ||
        (e = cudaStreamWaitEvent(dcopy, ed, 0)) != cudaSuccess)
      what = "copy between gpus: cudaStreamWaitEvent";
    else if (ps == pd)
      e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dcopy);
    else
      e = cudaMemcpyPeerAsync(dst, pd, src, ps, bytes, dcopy);
    if (e == cudaSuccess) {
      s = record_on(dcopy, &ec);
      if (s == LUON_OK && ((e = cudaStreamWaitEvent(dcomp, ec, 0)) != cudaSuccess ||
                           (e = cudaStreamWaitEvent(scomp, ec, 0)) != cudaSuccess))
        what = "copy between gpus: cudaStreamWaitEvent";
    }
    if (e == cudaSuccess && s == LUON_OK && lu_cuda_sync_each_op() &&
        (e = cudaStreamSynchronize(dcopy)) != cudaSuccess)
      what = "copy between gpus (LUON_CUDA_SYNC=1)";
    if (e != cudaSuccess) s = lu_cuda_fail(e, what);
  }
  /* destroying an event with work pending is fine: it is released after */
  if (es) cudaEventDestroy(es);
  if (ed) cudaEventDestroy(ed);
  if (ec) cudaEventDestroy(ec);
  lu_cuda_leave(&g);
  return s;
}

/* Host to device: queued on the destination's compute stream, after the
 * kernels already there. A pageable source is staged by CUDA before the
 * call returns (and CUDA may wait for that stream first); a pinned source
 * (host_alloc) is read asynchronously, so its owner records an event
 * before reusing it (the core's pinned pools: lu_pinned_record, called by
 * luon_tensor_copy). Device to host waits for the source's stream only. */
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
  if (!dh && !sh && ddev.id != sdev.id) return copy_between(dst, ddev.id, src, sdev.id, bytes);
  int32_t id = dh ? sdev.id : ddev.id;
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(id, &g, "gpu copy");
  if (s != LUON_OK) return s;
  cudaStream_t st;
  s = lu_cuda_stream(id, &st);
  if (s != LUON_OK) {
    lu_cuda_leave(&g);
    return s;
  }
  cudaError_t e;
  const char *what;
  if (sh) {
    e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st);
    what = "copy host to gpu: cudaMemcpyAsync";
  } else if (dh) {
    e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st);
    what = "copy gpu to host: cudaMemcpyAsync";
    if (e == cudaSuccess) {
      e = cudaStreamSynchronize(st);
      what = "copy gpu to host: waiting for the gpu's stream (an earlier op may have faulted)";
    }
  } else {
    e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st);
    what = "copy gpu to gpu: cudaMemcpyAsync";
  }
  if (e == cudaSuccess && lu_cuda_sync_after(st)) {
    e = cudaStreamSynchronize(st);
    what = "gpu copy (LUON_CUDA_SYNC=1)";
  }
  lu_cuda_leave(&g);
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, what);
}

/* Waits for gpu(id)'s stream only: other logical GPUs keep running. */
static luon_status dev_sync(int32_t id) {
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(id, &g, "gpu sync");
  if (s != LUON_OK) return s;
  cudaStream_t st;
  s = lu_cuda_stream(id, &st);
  cudaError_t e = s == LUON_OK ? cudaStreamSynchronize(st) : cudaSuccess;
  lu_cuda_leave(&g);
  if (s != LUON_OK) return s;
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, "gpu sync: cudaStreamSynchronize");
}

/* ---- CUDA graphs (core/graph.c's replays) ------------------------------------ */

/* gpu(id)'s card and compute stream for a graph call; leave with lu_cuda_leave. */
static luon_status graph_stream(int32_t id, lu_cuda_guard *g, cudaStream_t *st) {
  luon_status s = lu_cuda_enter(id, g, "cuda graph");
  if (s != LUON_OK) return s;
  s = lu_cuda_stream(id, st);
  if (s != LUON_OK) lu_cuda_leave(g);
  return s;
}

/* Relaxed: the caching allocator may cudaMalloc a block mid-capture. */
static luon_status graph_begin(int32_t id) {
  lu_cuda_guard g;
  cudaStream_t st;
  luon_status s = graph_stream(id, &g, &st);
  if (s != LUON_OK) return s;
  cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed);
  lu_cuda_leave(&g);
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, "cuda graph: cudaStreamBeginCapture");
}

static luon_status graph_end(int32_t id, void **exec) {
  *exec = NULL;
  lu_cuda_guard g;
  cudaStream_t st;
  luon_status s = graph_stream(id, &g, &st);
  if (s != LUON_OK) return s;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t x = NULL;
  cudaError_t e = cudaStreamEndCapture(st, &graph);
  const char *what = "cudaStreamEndCapture";
  if (e == cudaSuccess && !graph) e = cudaErrorStreamCaptureInvalidated;
  if (e == cudaSuccess) {
    e = cudaGraphInstantiateWithFlags(&x, graph, 0);
    what = "cudaGraphInstantiateWithFlags";
  }
  if (graph) cudaGraphDestroy(graph);
  lu_cuda_leave(&g);
  if (e == cudaSuccess) {
    *exec = x;
    return LUON_OK;
  }
  if (is_sticky(e)) return lu_cuda_fail(e, "cuda graph");
  cudaGetLastError(); /* the stream is usable again; nothing stays behind */
  return lu_cuda_seterr(LUON_EUNSUPPORTED, "cuda graph on gpu(%d): %s: %s (%s)", id, what,
                        cudaGetErrorString(e), cudaGetErrorName(e));
}

static luon_status graph_launch(int32_t id, void *exec) {
  lu_cuda_guard g;
  cudaStream_t st;
  luon_status s = graph_stream(id, &g, &st);
  if (s != LUON_OK) return s;
  cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, st);
  const char *what = "cuda graph: cudaGraphLaunch";
  if (e == cudaSuccess && lu_cuda_sync_each_op()) {
    e = cudaStreamSynchronize(st);
    what = "cuda graph (LUON_CUDA_SYNC=1: the fault is in the graph's replay)";
  }
  lu_cuda_leave(&g);
  return e == cudaSuccess ? LUON_OK : lu_cuda_fail(e, what);
}

static void graph_free(void *exec) {
  if (exec && cudaGraphExecDestroy((cudaGraphExec_t)exec) != cudaSuccess) cudaGetLastError();
}

/* The backend touches no CUDA API here: counting waits for device_count. */
extern "C" __attribute__((visibility("default"))) luon_status
luon_cuda_init(lu_cuda_backend *b) {
  if (!b) return lu_cuda_seterr(LUON_EINVAL, "luon_cuda_init: NULL vtable");
  if (!b->host || !b->host->alloc || !b->host->free || !b->host->rng_reserve ||
      !b->host->last_error)
    return lu_cuda_seterr(LUON_EINVAL, "luon_cuda_init: the core lent no host services "
                          "(libluon.so and libluon_cuda.so are from different builds)");
  if (b->abi != 0 && b->abi != LU_CUDA_ABI) { /* fill nothing of a layout we do not know */
    int32_t want = b->abi;
    b->abi = LU_CUDA_ABI;
    return lu_cuda_seterr(LUON_EINVAL, "luon_cuda_init: libluon.so asks for backend ABI %d, this "
                          "libluon_cuda.so is ABI %d (rebuild them together)", want, LU_CUDA_ABI);
  }
  lu_cuda_host_api = b->host;
  b->abi = LU_CUDA_ABI;
  b->device_count = device_count;
  b->memory_info = memory_info;
  b->malloc = dev_malloc;
  b->free = dev_free;
  b->memcpy = dev_memcpy;
  b->copy = lu_cuda_copy_to;
  b->sync = dev_sync;
  b->last_error = lu_cuda_geterr;
  b->host_alloc = host_alloc;
  b->host_free = host_free;
  b->event_record = event_record;
  b->event_sync = event_sync;
  b->event_query = event_query;
  b->event_free = event_free;
  b->allreduce = lu_cuda_allreduce;
  b->graph_begin = graph_begin;
  b->graph_end = graph_end;
  b->graph_launch = graph_launch;
  b->graph_free = graph_free;
  lu_cuda_nccl_fill(b);
#define LUON_OP(name, nin, nout, kind, grad, backends, flags) b->kernels[LU_OP_##name] = LU_CUDA_FN_##backends(name);
#include "luon_ops.def"
#undef LUON_OP
  return LUON_OK;
}
