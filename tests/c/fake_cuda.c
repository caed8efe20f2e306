/* fake_cuda.c: a stand-in for libluon_cuda.so on machines without a GPU
 * (LUON_CUDA_LIB=<build>/tests/libluon_fake_cuda.so), for the busted suite
 * with gpu(0) as the device under test (scripts/test), luon.dist's GPU path
 * and the allocator's out-of-memory retry (test_cuda_loader). Its "GPUs"
 * (LUON_FAKE_GPUS, default 2) keep their memory in host memory, its pinned
 * memory is plain host memory, and it runs the CPU kernels; its NCCL
 * entries run the collectives over Open MPI's MPI_COMM_WORLD (loaded by
 * luon.dist), polled against the deadline like comm.cu, and append every
 * call to $LUON_FAKE_LOG.<rank>, so a test can check which calls reached
 * "NCCL". Its CUDA graphs defer what a capture sees (the kernels' calls
 * with their arrays, copies between its GPUs) and run it again at each
 * launch, at the addresses captured; a host wait or a copy to or from the
 * host while capturing fails the capture, as CUDA's does. Not a CUDA
 * emulator: no streams, no asynchrony. LUON_FAKE_GPU_UUID=text gives every card of every process
 * the same UUID (ranks sharing one GPU); LUON_FAKE_GPU_BYTES=N gives the
 * one card all its GPUs share N bytes (the allocator's retry after OOM). */
#include "internal.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char msg[1024];

static luon_status fail(luon_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return s;
}

static const char *last_error(void) { return msg; }

static void logf_(const char *fmt, ...) {
  const char *base = getenv("LUON_FAKE_LOG");
  if (!base || !*base) return;
  const char *r = getenv("OMPI_COMM_WORLD_RANK");
  char path[1024];
  snprintf(path, sizeof path, "%s.%s", base, r ? r : "0");
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static int32_t ngpus(void) {
  const char *e = getenv("LUON_FAKE_GPUS");
  int n = e && *e ? atoi(e) : 2;
  return n < 0 ? 0 : n > LU_MAX_GPU_DEVICES ? LU_MAX_GPU_DEVICES : n;
}

static int32_t device_count(void) {
  if (ngpus() == 0) fail(LUON_EDEVICE, "fake backend: LUON_FAKE_GPUS=0");
  return ngpus();
}


/* All the fake GPUs share one card, as LUON_VIRTUAL_GPUS do: with
 * LUON_FAKE_GPU_BYTES=N it holds N bytes in all, and an allocation past
 * that fails with LUON_ENOMEM. Each block keeps its size in a 64-byte
 * header. */
static int64_t card_used;

static luon_status dev_malloc(int32_t id, size_t bytes, void **p) {
  const char *cap = getenv("LUON_FAKE_GPU_BYTES");
  int64_t used = __atomic_add_fetch(&card_used, (int64_t)bytes, __ATOMIC_RELAXED);
  if (cap && *cap && used > atoll(cap)) {
    __atomic_sub_fetch(&card_used, (int64_t)bytes, __ATOMIC_RELAXED);
    *p = NULL;
    return fail(LUON_ENOMEM, "fake backend: the card is full (%lld of %s bytes) for %zu more",
                (long long)(used - (int64_t)bytes), cap, bytes);
  }
  char *b = aligned_alloc(64, (bytes + 63) / 64 * 64 + 128);
  if (!b) {
    __atomic_sub_fetch(&card_used, (int64_t)bytes, __ATOMIC_RELAXED);
    *p = NULL;
    return fail(LUON_ENOMEM, "fake backend: out of host memory for %zu bytes", bytes);
  }
  *(size_t *)b = bytes;
  *p = b + 64;
  return LUON_OK;
}

static luon_status memory_info(int32_t id, int64_t *fr, int64_t *total) {
  const char *cap = getenv("LUON_FAKE_GPU_BYTES");
  *total = cap && *cap ? atoll(cap) : (int64_t)1 << 33;
  *fr = *total - __atomic_load_n(&card_used, __ATOMIC_RELAXED);
  return LUON_OK;
}

static void dev_free(int32_t id, void *p) {
  if (!p) return;
  char *b = (char *)p - 64;
  __atomic_sub_fetch(&card_used, (int64_t)*(size_t *)b, __ATOMIC_RELAXED);
  free(b);
}

/* "Pinned" host memory: plain host memory (copies from it are synchronous
 * here, so every event has completed). */
static luon_status host_alloc(size_t bytes, void **p) {
  *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  return *p ? LUON_OK : fail(LUON_ENOMEM, "fake backend: out of host memory for %zu pinned bytes", bytes);
}

static void host_free(void *p) { free(p); }

/* Where a real GPU would make the host wait: [0] device syncs, [1] event
 * syncs, [2] copies from a GPU to the host. tests/lua/gpu_waits_spec.lua
 * reads them (luon_fake_waits) to check that a training step waits only
 * where it is asked to. */
static int64_t waits[3];

__attribute__((visibility("default"))) void luon_fake_waits(int64_t out[3]) {
  for (int k = 0; k < 3; k++) out[k] = __atomic_load_n(&waits[k], __ATOMIC_RELAXED);
}

/* ---- CUDA graphs: what a capture saw, run again at each launch ------------ */

typedef struct fstep {
  bool copy;                              /* else a kernel's call */
  lu_call c;
  luon_tensor *t[2 * LUON_MAX_OP_INPUTS]; /* held: in[0..nin), out[0..nout) (a copy: dst, src) */
  luon_attrs attrs;
  void *dst;                              /* a copy's raw bytes (memcpy between GPUs) */
  const void *src;
  size_t bytes;
} fstep;

typedef struct fgraph {
  int32_t n, cap;
  fstep *v;
} fgraph;

static _Thread_local fgraph *capturing;
static _Thread_local const char *capture_broken; /* what a capture could not take */

static fstep *step_new(void) {
  fgraph *g = capturing;
  if (g->n == g->cap) {
    int32_t cap = g->cap ? 2 * g->cap : 16;
    fstep *v = realloc(g->v, sizeof *v * (size_t)cap);
    if (!v) return NULL;
    g->v = v;
    g->cap = cap;
  }
  fstep *st = &g->v[g->n++];
  memset(st, 0, sizeof *st);
  return st;
}

/* While capturing, something CUDA would refuse: the capture fails at its end. */
static luon_status refuse(const char *what) {
  if (!capture_broken) capture_broken = what;
  return fail(LUON_EDEVICE, "fake backend: %s while a CUDA graph is captured "
              "(operation not permitted when stream is capturing)", what);
}

static luon_status graph_begin(int32_t id) {
  if (capturing) return fail(LUON_EINVAL, "fake backend: a capture is already under way");
  capturing = calloc(1, sizeof *capturing);
  capture_broken = NULL;
  return capturing ? LUON_OK : fail(LUON_ENOMEM, "fake backend: out of host memory");
}

static void graph_free(void *exec) {
  fgraph *g = exec;
  if (!g) return;
  for (int32_t j = 0; j < g->n; j++)
    for (int k = 0; k < 2 * LUON_MAX_OP_INPUTS; k++) luon_tensor_release(g->v[j].t[k]);
  free(g->v);
  free(g);
}

static luon_status graph_end(int32_t id, void **exec) {
  fgraph *g = capturing;
  capturing = NULL;
  *exec = NULL;
  if (!g) return fail(LUON_EINVAL, "fake backend: no capture under way");
  if (capture_broken) {
    graph_free(g);
    return fail(LUON_EUNSUPPORTED, "fake backend: the capture failed: %s", capture_broken);
  }
  *exec = g;
  return LUON_OK;
}

static luon_status graph_launch(int32_t id, void *exec) {
  fgraph *g = exec;
  for (int32_t j = 0; j < g->n; j++) {
    fstep *st = &g->v[j];
    if (st->copy && st->dst) {
      memcpy(st->dst, st->src, st->bytes);
    } else if (st->copy) {
      lu_copy_cpu(st->t[0], st->t[1], false);
    } else {
      lu_call c = st->c;
      c.in = st->t;
      c.attrs = &st->attrs;
      for (int k = 0; k < c.nout; k++) c.out[k] = st->t[LUON_MAX_OP_INPUTS + k];
      luon_status s = lu_run_cpu(&c);
      if (s != LUON_OK) return fail(s, "fake graph launch: %s", luon_last_error());
    }
  }
  return LUON_OK;
}

static luon_status dev_memcpy(void *dst, lu_device dd, const void *src, lu_device sd, size_t bytes) {
  if (capturing && (dd.type != LUON_GPU || sd.type != LUON_GPU)) return refuse("a copy to or from the host");
  if (capturing) {
    fstep *st = step_new();
    if (!st) return refuse("out of host memory");
    st->copy = true, st->dst = dst, st->src = src, st->bytes = bytes;
    return LUON_OK;
  }
  if (dd.type != LUON_GPU && sd.type == LUON_GPU) __atomic_add_fetch(&waits[2], 1, __ATOMIC_RELAXED);
  memcpy(dst, src, bytes);
  return LUON_OK;
}

static luon_status dev_sync(int32_t id) {
  if (capturing) return refuse("a wait for the device");
  __atomic_add_fetch(&waits[0], 1, __ATOMIC_RELAXED);
  return LUON_OK;
}
static int event_token;
static luon_status event_record(int32_t id, void **ev) {
  *ev = &event_token;
  return LUON_OK;
}
static luon_status event_sync(void *ev) {
  if (capturing) return refuse("a wait for an event");
  __atomic_add_fetch(&waits[1], 1, __ATOMIC_RELAXED);
  return LUON_OK;
}
static luon_status ok_ev(void *ev) { return LUON_OK; }
static void free_ev(void *ev) {}

/* Every op: the CPU kernel, on host memory (16-bit data computed in
 * float32 as on the CPU). */
static luon_status kernel(lu_call *c) {
  if (capturing) { /* deferred to the launches, with its arrays held */
    if (c->scratch) return refuse("an op with host-side scratch");
    fstep *st = step_new();
    if (!st) return refuse("out of host memory");
    st->c = *c;
    st->attrs = *c->attrs;
    for (int i = 0; i < c->nin; i++) st->t[i] = luon_tensor_retain((luon_tensor *)c->in[i]);
    for (int k = 0; k < c->nout; k++) st->t[LUON_MAX_OP_INPUTS + k] = luon_tensor_retain(c->out[k]);
    return LUON_OK;
  }
  luon_status s = lu_run_cpu(c);
  if (s != LUON_OK) fail(s, "%s", luon_last_error());
  return s;
}

/* Its GPUs' memory is host memory: the CPU's strided copy. */
static luon_status dev_copy(luon_tensor *dst, const luon_tensor *src) {
  if (capturing) {
    fstep *st = step_new();
    if (!st) return refuse("out of host memory");
    st->copy = true;
    st->t[0] = luon_tensor_retain(dst);
    st->t[1] = luon_tensor_retain((luon_tensor *)src);
    return LUON_OK;
  }
  lu_copy_cpu(dst, src, false);
  return LUON_OK;
}

/* ---- NCCL over MPI ----------------------------------------------------- */

typedef void *mpi_handle;
static struct {
  int (*Comm_rank)(mpi_handle, int *);
  int (*Iallreduce)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle, mpi_handle *);
  int (*Ibcast)(void *, int, mpi_handle, int, mpi_handle, mpi_handle *);
  int (*Test)(mpi_handle *, int *, void *);
  mpi_handle world, t_float, t_double, t_int32, t_int64, t_uint8, op_sum, op_max, op_min;
} M;

static luon_status load_mpi(void) {
  if (M.Test) return LUON_OK;
  void **slots[] = {(void **)&M.Comm_rank, (void **)&M.Iallreduce, (void **)&M.Ibcast,
                    (void **)&M.Test, &M.world, &M.t_float, &M.t_double, &M.t_int32,
                    &M.t_int64, &M.t_uint8, &M.op_sum, &M.op_max, &M.op_min};
  const char *names[] = {"MPI_Comm_rank", "MPI_Iallreduce", "MPI_Ibcast", "MPI_Test",
                         "ompi_mpi_comm_world", "ompi_mpi_float", "ompi_mpi_double",
                         "ompi_mpi_int32_t", "ompi_mpi_int64_t", "ompi_mpi_uint8_t",
                         "ompi_mpi_op_sum", "ompi_mpi_op_max", "ompi_mpi_op_min"};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    *slots[k] = dlsym(RTLD_DEFAULT, names[k]);
    if (!*slots[k]) {
      M.Test = NULL;
      return fail(LUON_EUNSUPPORTED, "fake NCCL: %s not loaded (luon.dist loads Open MPI)", names[k]);
    }
  }
  return LUON_OK;
}

typedef struct fcomm {
  int32_t nranks, rank, dev, aborted;
} fcomm;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void hex8(const uint8_t *id, char out[17]) {
  for (int k = 0; k < 8; k++) snprintf(out + 2 * k, 3, "%02x", id[k]);
}

static luon_status device_uuid(int32_t id, uint8_t uuid[16]) {
  memset(uuid, 0, 16);
  const char *same = getenv("LUON_FAKE_GPU_UUID");
  if (same && *same) {
    snprintf((char *)uuid, 16, "%s", same);
  } else {
    int64_t pid = getpid();
    memcpy(uuid, &pid, 8);
    memcpy(uuid + 8, &id, 4);
  }
  logf_("uuid gpu(%d)", id);
  return LUON_OK;
}

static int32_t nccl_version(void) { return 22809; }

static luon_status unique_id(uint8_t id[LU_NCCL_ID_BYTES]) {
  uint64_t z = lu_mix64((uint64_t)getpid() * 1000003u ^ (uint64_t)(now_s() * 1e9));
  for (int k = 0; k < LU_NCCL_ID_BYTES; k++) {
    if (k % 8 == 0) z = lu_splitmix64(z);
    id[k] = (uint8_t)(z >> (8 * (k % 8)));
  }
  char h[17];
  hex8(id, h);
  logf_("unique_id %s", h);
  return LUON_OK;
}

static luon_status comm_init(const uint8_t id[LU_NCCL_ID_BYTES], int32_t nranks, int32_t rank,
                             int32_t dev, double timeout_s, void **out) {
  LU_TRY(load_mpi());
  char h[17];
  hex8(id, h);
  logf_("init nranks=%d rank=%d dev=%d id=%s", nranks, rank, dev, h);
  if (dev < 0 || dev >= ngpus()) return fail(LUON_EDEVICE, "fake NCCL: gpu(%d) does not exist", dev);
  fcomm *c = calloc(1, sizeof *c);
  if (!c) return fail(LUON_ENOMEM, "fake NCCL: out of memory");
  c->nranks = nranks, c->rank = rank, c->dev = dev;
  *out = c;
  return LUON_OK;
}

/* Poll an MPI request against the deadline, as comm.cu polls NCCL. */
static luon_status wait(fcomm *c, mpi_handle *req, const char *what, double timeout_s) {
  double t0 = now_s();
  int done = 0;
  while (!done) {
    if (M.Test(req, &done, NULL) != 0) {
      c->aborted = 1;
      return fail(LUON_EDEVICE, "%s: MPI_Test failed", what);
    }
    if (!done && timeout_s > 0 && now_s() - t0 > timeout_s) {
      c->aborted = 1;
      logf_("abort");
      return fail(LUON_EIO, "%s timed out after %.0f s (NCCL communicator aborted)", what, now_s() - t0);
    }
    if (!done) usleep(200);
  }
  return LUON_OK;
}

static mpi_handle mpi_type(int32_t dt) {
  switch (dt) {
  case LUON_DTYPE_F32: return M.t_float;
  case LUON_DTYPE_F64: return M.t_double;
  case LUON_DTYPE_I32: return M.t_int32;
  case LUON_DTYPE_I64: return M.t_int64;
  case LUON_DTYPE_U8:
  case LUON_DTYPE_BOOL: return M.t_uint8;
  default: return NULL;
  }
}

static luon_status collective(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t op,
                              int32_t root, double timeout_s) {
  fcomm *c = comm;
  const char *what = root < 0 ? "ncclAllReduce" : "ncclBroadcast";
  if (!c || c->aborted) return fail(LUON_EINVAL, "%s: the NCCL communicator was aborted", what);
  if (root < 0) logf_("allreduce dtype=%d op=%d count=%lld", dtype, op, (long long)count);
  else logf_("broadcast dtype=%d root=%d count=%lld", dtype, root, (long long)count);
  /* 16-bit floats travel as float32 here (NCCL adds them in 16 bits) */
  bool wide = lu_dtype_is_storage_only(dtype);
  void *buf = ptr;
  int32_t dt = wide ? LUON_DTYPE_F32 : dtype;
  if (wide) {
    buf = malloc((size_t)count * 4 + 4);
    if (!buf) return fail(LUON_ENOMEM, "fake NCCL: out of memory");
    lu_convert(buf, LUON_DTYPE_F32, ptr, dtype, count);
  }
  mpi_handle req = NULL;
  mpi_handle mop = op == LUON_DIST_MAX ? M.op_max : op == LUON_DIST_MIN ? M.op_min : M.op_sum;
  int rc = root < 0 ? M.Iallreduce((void *)1 /* MPI_IN_PLACE */, buf, (int)count, mpi_type(dt), mop,
                                   M.world, &req)
                    : M.Ibcast(buf, (int)count, mpi_type(dt), root, M.world, &req);
  luon_status s = rc == 0 ? wait(c, &req, what, timeout_s) : fail(LUON_EDEVICE, "%s: MPI failed", what);
  if (s == LUON_OK && root < 0 && op == LUON_DIST_MEAN) {
    if (dt == LUON_DTYPE_F32)
      for (int64_t i = 0; i < count; i++) ((float *)buf)[i] /= (float)c->nranks;
    else
      for (int64_t i = 0; i < count; i++) ((double *)buf)[i] /= c->nranks;
  }
  if (wide) {
    if (s == LUON_OK) lu_convert(ptr, dtype, buf, LUON_DTYPE_F32, count);
    free(buf);
  }
  return s;
}

static luon_status allreduce(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t op,
                             double timeout_s) {
  return collective(comm, ptr, count, dtype, op, -1, timeout_s);
}

static luon_status broadcast(void *comm, void *ptr, int64_t count, int32_t dtype, int32_t root,
                             double timeout_s) {
  return collective(comm, ptr, count, dtype, 0, root, timeout_s);
}

static luon_status destroy(void *comm, double timeout_s) {
  fcomm *c = comm;
  logf_(c && c->aborted ? "destroy (aborted)" : "destroy");
  free(c);
  return LUON_OK;
}

__attribute__((visibility("default"))) luon_status luon_cuda_init(lu_cuda_backend *b) {
  const char *abi = getenv("LUON_FAKE_ABI"); /* pretend to be a backend of another build */
  if (abi && *abi) {
    b->abi = atoi(abi);
    return LUON_OK;
  }
  if (b->abi != LU_CUDA_ABI) return fail(LUON_EINVAL, "fake backend: ABI %d asked", b->abi);
  b->device_count = device_count;
  b->memory_info = memory_info;
  b->malloc = dev_malloc;
  b->free = dev_free;
  b->memcpy = dev_memcpy;
  b->copy = dev_copy;
  b->host_alloc = host_alloc;
  b->host_free = host_free;
  b->sync = dev_sync;
  b->last_error = last_error;
  b->event_record = event_record;
  b->event_sync = event_sync;
  b->event_query = ok_ev;
  b->event_free = free_ev;
  b->nccl_version = nccl_version;
  b->device_uuid = device_uuid;
  b->nccl_unique_id = unique_id;
  b->nccl_comm_init = comm_init;
  b->nccl_allreduce = allreduce;
  b->nccl_broadcast = broadcast;
  b->nccl_destroy = destroy;
  b->graph_begin = graph_begin;
  b->graph_end = graph_end;
  b->graph_launch = graph_launch;
  b->graph_free = graph_free;
  for (int op = 0; op < LU_OP_COUNT; op++) /* the real backend's: what the registry says runs on GPUs */
    if (lu_ops[op].cpu && lu_ops[op].kind != LU_VIEW && (lu_ops[op].backends & LUON_BACKEND_CUDA))
      b->kernels[op] = kernel;
  return LUON_OK;
}
