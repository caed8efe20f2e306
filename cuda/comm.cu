/* comm.cu: NCCL. (1) Gradient summation across replicas on distinct
 * physical GPUs of this process (one communicator per set of cards, kept for
 * the process); the core's luon_allreduce calls it when every replica is on
 * a GPU; replicas sharing a card (virtual GPUs) go through the core's copies
 * and adds. (2) luon.dist's communicator across processes: non-blocking,
 * every wait polled against a deadline, aborted when it passes (the
 * bootstrap over MPI and the caching are core/dist/dist.c's).
 * NCCL is not linked: it is loaded (dlopen) on the first collective, so a
 * machine without it still gets its GPUs; without it, (1) declines and the
 * core sums through copies, and (2) says NCCL could not be loaded. */
#include "internal_cuda.h"
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

/* ---- NCCL, loaded on first use -------------------------------------------- */

/* The NCCL functions used here: (return type, name, parameters). */
#define NCCL_FUNCS(X)                                                                             \
  X(ncclResult_t, ncclGetVersion, (int *))                                                        \
  X(const char *, ncclGetErrorString, (ncclResult_t))                                             \
  X(const char *, ncclGetLastError, (ncclComm_t))                                                 \
  X(ncclResult_t, ncclCommInitAll, (ncclComm_t *, int, const int *))                             \
  X(ncclResult_t, ncclGroupStart, (void))                                                         \
  X(ncclResult_t, ncclGroupEnd, (void))                                                           \
  X(ncclResult_t, ncclAllReduce,                                                                  \
    (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))        \
  X(ncclResult_t, ncclBroadcast,                                                                  \
    (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                \
  X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId *))                                              \
  X(ncclResult_t, ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *)) \
  X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *))                            \
  X(ncclResult_t, ncclCommAbort, (ncclComm_t))                                                    \
  X(ncclResult_t, ncclCommFinalize, (ncclComm_t))                                                 \
  X(ncclResult_t, ncclCommDestroy, (ncclComm_t))

#define NCCL_PTR(ret, name, params) ret(*name) params;
static struct {
  NCCL_FUNCS(NCCL_PTR)
} nccl;
#undef NCCL_PTR

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static char nccl_why[256];           /* why NCCL could not be loaded ("" when it was) */
static int32_t nccl_version_code;   /* ncclGetVersion's, once loaded */

static void nccl_load_once(void) {
  const char *names[] = {"libnccl.so.2", "libnccl.so"};
  void *h = NULL;
  for (size_t k = 0; k < sizeof names / sizeof names[0] && !h; k++) h = dlopen(names[k], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(nccl_why, sizeof nccl_why, "NCCL could not be loaded (%s); install NCCL (libnccl.so.2) or put "
             "its folder on LD_LIBRARY_PATH", e ? e : "libnccl.so.2 not found");
    return;
  }
#define NCCL_SYM(ret, name, params)                                                          \
  if (!(*(void **)&nccl.name = dlsym(h, #name))) {                                          \
    snprintf(nccl_why, sizeof nccl_why, "NCCL was loaded but has no %s (NCCL 2.18 or newer is needed)", #name); \
    return;                                                                                  \
  }
  NCCL_FUNCS(NCCL_SYM)
#undef NCCL_SYM
  int v = 0;
  if (nccl.ncclGetVersion(&v) == ncclSuccess) nccl_version_code = v;
}

/* LUON_OK when NCCL is loaded, else `code` with the reason, for `what`. */
static luon_status nccl_load(luon_status code, const char *what) {
  pthread_once(&nccl_once, nccl_load_once);
  if (!nccl_why[0]) return LUON_OK;
  return lu_cuda_seterr(code, "%s: %s", what, nccl_why);
}

/* From here on, ncclX(...) calls through the loaded pointer. */
#define ncclGetVersion nccl.ncclGetVersion
#define ncclGetErrorString nccl.ncclGetErrorString
#define ncclGetLastError nccl.ncclGetLastError
#define ncclCommInitAll nccl.ncclCommInitAll
#define ncclGroupStart nccl.ncclGroupStart
#define ncclGroupEnd nccl.ncclGroupEnd
#define ncclAllReduce nccl.ncclAllReduce
#define ncclBroadcast nccl.ncclBroadcast
#define ncclGetUniqueId nccl.ncclGetUniqueId
#define ncclCommInitRankConfig nccl.ncclCommInitRankConfig
#define ncclCommGetAsyncError nccl.ncclCommGetAsyncError
#define ncclCommAbort nccl.ncclCommAbort
#define ncclCommFinalize nccl.ncclCommFinalize
#define ncclCommDestroy nccl.ncclCommDestroy

#define MAX_GROUPS 8

typedef struct group {
  int n;
  int32_t ids[LU_MAX_GPU_DEVICES];
  ncclComm_t comm[LU_MAX_GPU_DEVICES];
} group;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static group groups[MAX_GROUPS];
static int ngroups;

static luon_status nccl_fail(ncclResult_t r, const char *what) {
  return lu_cuda_seterr(LUON_EDEVICE, "allreduce: %s: %s (NCCL %d)", what, ncclGetErrorString(r),
                        (int)r);
}

/* The communicators for logical GPUs ids[0..n) (same order), made once. */
static luon_status get_group(int32_t n, const int32_t *ids, group **out) {
  pthread_mutex_lock(&lock);
  for (int g = 0; g < ngroups; g++)
    if (groups[g].n == n && memcmp(groups[g].ids, ids, sizeof(int32_t) * (size_t)n) == 0) {
      *out = &groups[g];
      pthread_mutex_unlock(&lock);
      return LUON_OK;
    }
  if (ngroups == MAX_GROUPS) {
    pthread_mutex_unlock(&lock);
    return lu_cuda_seterr(LUON_EUNSUPPORTED, "allreduce: more than %d distinct GPU sets", MAX_GROUPS);
  }
  group *g = &groups[ngroups];
  int dev[LU_MAX_GPU_DEVICES];
  for (int k = 0; k < n; k++) {
    dev[k] = lu_cuda_phys(ids[k]);
    g->ids[k] = ids[k];
  }
  ncclResult_t r = ncclCommInitAll(g->comm, n, dev);
  luon_status s = LUON_OK;
  if (r != ncclSuccess) {
    s = nccl_fail(r, "ncclCommInitAll");
  } else {
    g->n = n;
    ngroups++;
    *out = g;
  }
  pthread_mutex_unlock(&lock);
  return s;
}

luon_status lu_cuda_allreduce(int32_t n, void *const *ptrs, const int32_t *ids, int32_t dtype,
                              int64_t count, int32_t op) {
  int32_t nd = lu_cuda_count();
  if (n < 2 || n > LU_MAX_GPU_DEVICES)
    return lu_cuda_seterr(LUON_EUNSUPPORTED, "allreduce: NCCL takes 2 to %d replicas", LU_MAX_GPU_DEVICES);
  for (int k = 0; k < n; k++) {
    if (ids[k] < 0 || ids[k] >= nd)
      return lu_cuda_seterr(LUON_EDEVICE, "allreduce: gpu(%d) does not exist", ids[k]);
    for (int m = 0; m < k; m++)
      if (lu_cuda_phys(ids[k]) == lu_cuda_phys(ids[m]))
        return lu_cuda_seterr(LUON_EUNSUPPORTED, "allreduce: gpu(%d) and gpu(%d) share a card",
                              ids[m], ids[k]);
  }
  ncclDataType_t t;
  if (dtype == LUON_DTYPE_F32) t = ncclFloat32;
  else if (dtype == LUON_DTYPE_F64) t = ncclFloat64;
  else return lu_cuda_seterr(LUON_EUNSUPPORTED, "allreduce: NCCL path takes float32 or float64");
  LU_TRY(nccl_load(LUON_EUNSUPPORTED, "allreduce")); /* declined: the core sums through copies */
  group *g = NULL;
  LU_TRY(get_group(n, ids, &g));
  cudaStream_t st[LU_MAX_GPU_DEVICES];
  for (int k = 0; k < n; k++) {
    lu_cuda_guard gd;
    LU_TRY(lu_cuda_enter(ids[k], &gd, "allreduce"));
    luon_status s = lu_cuda_stream(ids[k], &st[k]);
    lu_cuda_leave(&gd);
    LU_TRY(s);
  }
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_fail(r, "ncclGroupStart");
  luon_status s = LUON_OK;
  for (int k = 0; k < n && s == LUON_OK; k++) {
    r = ncclAllReduce(ptrs[k], ptrs[k], (size_t)count, t, op == 1 ? ncclAvg : ncclSum, g->comm[k], st[k]);
    if (r != ncclSuccess) s = nccl_fail(r, "ncclAllReduce");
  }
  r = ncclGroupEnd();
  if (s == LUON_OK && r != ncclSuccess) s = nccl_fail(r, "ncclGroupEnd");
  for (int k = 0; k < n && s == LUON_OK && lu_cuda_sync_each_op(); k++) {
    cudaError_t e = cudaStreamSynchronize(st[k]);
    if (e != cudaSuccess) s = lu_cuda_fail(e, "allreduce (LUON_CUDA_SYNC=1)");
  }
  return s;
}

/* ---- (2) across processes ------------------------------------------------ */

typedef struct dcomm {
  ncclComm_t c;
  int32_t dev;        /* the logical GPU it was made on */
  cudaEvent_t done;   /* recorded after each collective, when waiting for it */
  int aborted;        /* ncclCommAbort ran: only the free is left */
} dcomm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Sleep between polls: a few microseconds at first, up to 200 us. */
static void backoff(long *ns) {
  struct timespec ts = {0, *ns};
  nanosleep(&ts, NULL);
  if (*ns < 200000) *ns *= 2;
}

static void abort_comm(dcomm *d) {
  if (!d->aborted) ncclCommAbort(d->c);
  d->aborted = 1;
}

/* An NCCL failure on d: abort it (NCCL's rule after an asynchronous error)
 * and say what NCCL said, its last error text included. */
static luon_status dist_fail(dcomm *d, ncclResult_t r, const char *what) {
  const char *last = d && d->c ? ncclGetLastError(d->c) : ncclGetLastError(NULL);
  luon_status s = lu_cuda_seterr(LUON_EDEVICE, "%s: %s (NCCL %d)%s%s", what, ncclGetErrorString(r),
                                 (int)r, last && *last ? ": " : "", last && *last ? last : "");
  if (d && d->c) abort_comm(d);
  return s;
}

static luon_status dist_timeout(dcomm *d, const char *what, double secs) {
  abort_comm(d);
  return lu_cuda_seterr(LUON_EIO, "%s timed out after %.0f s (NCCL communicator aborted)", what, secs);
}

/* Wait until d has no call in progress (a non-blocking communicator
 * returns ncclInProgress from init, collectives and finalize). */
static luon_status settle(dcomm *d, const char *what, double t0, double timeout_s) {
  long ns = 1000;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(d->c, &st);
    if (r != ncclSuccess) return dist_fail(d, r, what);
    if (st == ncclSuccess) return LUON_OK;
    if (st != ncclInProgress) return dist_fail(d, st, what);
    double el = now_s() - t0;
    if (timeout_s > 0 && el > timeout_s) return dist_timeout(d, what, el);
    backoff(&ns);
  }
}

static luon_status device_uuid(int32_t id, uint8_t uuid[16]) {
  if (id < 0 || id >= lu_cuda_count())
    return lu_cuda_seterr(LUON_EDEVICE, "device uuid: gpu(%d) does not exist", id);
  cudaDeviceProp p;
  LU_CUDA_TRY(cudaGetDeviceProperties(&p, lu_cuda_phys(id)));
  memcpy(uuid, p.uuid.bytes, 16);
  return LUON_OK;
}

static luon_status nccl_unique_id(uint8_t id[LU_NCCL_ID_BYTES]) {
  static_assert(sizeof(ncclUniqueId) == LU_NCCL_ID_BYTES, "NCCL_UNIQUE_ID_BYTES changed");
  LU_TRY(nccl_load(LUON_EDEVICE, "ncclGetUniqueId"));
  ncclUniqueId u;
  ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) return dist_fail(NULL, r, "ncclGetUniqueId");
  memcpy(id, u.internal, LU_NCCL_ID_BYTES);
  return LUON_OK;
}

static luon_status nccl_comm_init(const uint8_t id[LU_NCCL_ID_BYTES], int32_t nranks, int32_t rank,
                                  int32_t dev, double timeout_s, void **out) {
  *out = NULL;
  LU_TRY(nccl_load(LUON_EDEVICE, "ncclCommInitRankConfig"));
  dcomm *d = (dcomm *)calloc(1, sizeof(dcomm));
  if (!d) return lu_cuda_seterr(LUON_ENOMEM, "ncclCommInitRankConfig: out of host memory");
  d->dev = dev;
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(dev, &g, "ncclCommInitRankConfig");
  if (s != LUON_OK) {
    free(d);
    return s;
  }
  ncclUniqueId u;
  memcpy(u.internal, id, LU_NCCL_ID_BYTES);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0; /* every wait below is ours, with a deadline */
  double t0 = now_s();
  ncclResult_t r = ncclCommInitRankConfig(&d->c, nranks, u, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) s = dist_fail(d, r, "ncclCommInitRankConfig");
  if (s == LUON_OK) s = settle(d, "ncclCommInitRankConfig", t0, timeout_s);
  cudaError_t e = s == LUON_OK ? cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming)
                               : cudaSuccess;
  if (e != cudaSuccess) {
    s = lu_cuda_fail(e, "ncclCommInitRankConfig: cudaEventCreate");
    abort_comm(d);
  }
  lu_cuda_leave(&g);
  if (s != LUON_OK) {
    free(d);
    return s;
  }
  *out = d;
  return LUON_OK;
}

static bool nccl_type(int32_t dtype, ncclDataType_t *t) {
  switch (dtype) {
  case LUON_DTYPE_F32: *t = ncclFloat32; return true;
  case LUON_DTYPE_F64: *t = ncclFloat64; return true;
  case LUON_DTYPE_F16: *t = ncclFloat16; return true;
  case LUON_DTYPE_BF16: *t = ncclBfloat16; return true;
  case LUON_DTYPE_I32: *t = ncclInt32; return true;
  case LUON_DTYPE_I64: *t = ncclInt64; return true;
  case LUON_DTYPE_I8: *t = ncclInt8; return true;
  case LUON_DTYPE_U8:
  case LUON_DTYPE_BOOL: *t = ncclUint8; return true;
  default: return false;
  }
}

/* One collective on d: queue it (root < 0: allreduce with op, else a
 * broadcast), settle the queueing, and with a deadline wait for it on the
 * GPU, polling NCCL's asynchronous error beside the event. */
static luon_status collective(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t op,
                              int32_t root, double timeout_s) {
  dcomm *d = (dcomm *)comm;
  const char *what = root < 0 ? "ncclAllReduce" : "ncclBroadcast";
  if (!d || d->aborted)
    return lu_cuda_seterr(LUON_EINVAL, "%s: the NCCL communicator was aborted", what);
  ncclDataType_t t;
  if (!nccl_type(dtype, &t))
    return lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: NCCL has no dtype %d", what, dtype);
  static const ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclMax, ncclMin}; /* ORDER luon_dist_op */
  if (root < 0 && (op < 0 || op > 3))
    return lu_cuda_seterr(LUON_EUNSUPPORTED, "%s: unknown op %d", what, op);
  lu_cuda_guard g;
  LU_TRY(lu_cuda_enter(d->dev, &g, what));
  cudaStream_t st;
  luon_status s = lu_cuda_stream(d->dev, &st);
  double t0 = now_s();
  if (s == LUON_OK) {
    ncclResult_t r = root < 0 ? ncclAllReduce(ptr, ptr, (size_t)count, t, ops[op], d->c, st)
                              : ncclBroadcast(ptr, ptr, (size_t)count, t, root, d->c, st);
    if (r != ncclSuccess && r != ncclInProgress) s = dist_fail(d, r, what);
    if (s == LUON_OK) s = settle(d, what, t0, timeout_s);
  }
  if (s == LUON_OK && timeout_s > 0) {
    cudaError_t e = cudaEventRecord(d->done, st);
    if (e != cudaSuccess) s = lu_cuda_fail(e, "dist: cudaEventRecord");
    long ns = 1000;
    while (s == LUON_OK) {
      e = cudaEventQuery(d->done);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        s = lu_cuda_fail(e, what);
        break;
      }
      cudaGetLastError(); /* not ready is kept as the last error: leave none for the next op */
      ncclResult_t as = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(d->c, &as);
      if (r != ncclSuccess || (as != ncclSuccess && as != ncclInProgress)) {
        s = dist_fail(d, r != ncclSuccess ? r : as, what);
        break;
      }
      double el = now_s() - t0;
      if (el > timeout_s) {
        s = dist_timeout(d, what, el);
        break;
      }
      backoff(&ns);
    }
  }
  lu_cuda_leave(&g);
  return s;
}

static luon_status nccl_allreduce(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t op,
                                  double timeout_s) {
  return collective(comm, ptr, count, dtype, op, -1, timeout_s);
}

static luon_status nccl_broadcast(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t root,
                                  double timeout_s) {
  if (root < 0) return lu_cuda_seterr(LUON_EINVAL, "ncclBroadcast: root %d", root);
  return collective(comm, ptr, count, dtype, 0, root, timeout_s);
}

static luon_status nccl_destroy(void *comm, double timeout_s) {
  dcomm *d = (dcomm *)comm;
  if (!d) return LUON_OK;
  lu_cuda_guard g;
  luon_status s = lu_cuda_enter(d->dev, &g, "ncclCommDestroy");
  if (s == LUON_OK && !d->aborted) {
    double t0 = now_s();
    ncclResult_t r = ncclCommFinalize(d->c);
    if (r != ncclSuccess && r != ncclInProgress) s = dist_fail(d, r, "ncclCommFinalize");
    if (s == LUON_OK) s = settle(d, "ncclCommFinalize", t0, timeout_s);
    if (s == LUON_OK) {
      r = ncclCommDestroy(d->c);
      d->aborted = 1; /* destroyed, even half: never abort it after */
      if (r != ncclSuccess) s = dist_fail(d, r, "ncclCommDestroy");
    }
  }
  if (!d->aborted) abort_comm(d); /* the device could not be entered */
  if (d->done) cudaEventDestroy(d->done);
  lu_cuda_leave(&g);
  free(d);
  return s;
}

static int32_t nccl_version(void) { return nccl_version_code; }

void lu_cuda_nccl_fill(lu_cuda_backend *b) {
  b->nccl_version = nccl_version;
  b->device_uuid = device_uuid;
  b->nccl_unique_id = nccl_unique_id;
  b->nccl_comm_init = nccl_comm_init;
  b->nccl_allreduce = nccl_allreduce;
  b->nccl_broadcast = nccl_broadcast;
  b->nccl_destroy = nccl_destroy;
}
