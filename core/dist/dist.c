/* dist.c: collectives across processes (luon.dist) over an existing engine:
 * Open MPI, loaded with dlopen at luon_dist_init so that libluon neither
 * links MPI at build time nor needs it at run time. A process not started
 * by a launcher (no OMPI_COMM_WORLD_SIZE / PMIX_RANK / PMI_SIZE in its
 * environment) is rank 0 of 1 and never loads MPI.
 *
 * Open MPI's handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are macros
 * for the addresses of global objects (ompi_mpi_comm_world, ...), so they
 * are found with dlsym like the functions; this file therefore speaks Open
 * MPI's ABI only (Debian's libmpi.so.40), not MPICH's.
 *
 * Arrays on the CPU that are contiguous and of a dtype MPI knows are reduced
 * in place; any other CPU array (a strided view, float16/bfloat16) is
 * staged through a contiguous host copy (float32 for the 16-bit floats).
 *
 * GPU arrays go through NCCL (the CUDA backend's nccl_* entries), set up on
 * the first collective of a GPU array: every rank tells the others, in one
 * MPI allreduce, its card's UUID and whether it can use NCCL; if all can and
 * no two ranks share a card (NCCL refuses that), rank 0 makes the unique id,
 * MPI broadcasts it, and every rank makes its communicator on that array's
 * GPU, kept for the process (dist.finalize destroys it). Otherwise, agreed
 * by all ranks, GPU arrays are staged through host memory and MPI, and
 * luon_dist_backend says why. A GPU array on another GPU of the process, or
 * strided, goes through a contiguous copy on the communicator's GPU. CPU
 * arrays never touch NCCL.
 *
 * Bounded waits: with LUON_DIST_TIMEOUT=S (seconds, default 300; 0 = wait
 * forever) every collective first waits for all ranks to arrive with a
 * non-blocking barrier, polled; past the deadline the call returns LUON_EIO
 * naming the collective, this rank and the limit, and the communicator is
 * marked unusable (an MPI request cannot be cancelled). Then the blocking
 * collective runs. The process then ends with an error, and mpirun,
 * which aborts the job when any rank exits non-zero, stops the others.
 * A rank that dies is reported by mpirun itself (its rank, PID, host and
 * exit status), usually long before the timeout. Nothing here aborts.
 * NCCL's communicator is non-blocking: its setup and each collective are
 * polled (ncclCommGetAsyncError, and an event for the collective's end)
 * under the same deadline, and past it the communicator is aborted
 * (ncclCommAbort) and every later collective fails at once. */
#include "internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- the slice of Open MPI's ABI we use ---------------------------------- */

typedef void *mpi_handle; /* MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, ... */
enum { MPI_OK = 0, MPI_THREAD_FUNNELED_ = 1, MPI_COMM_TYPE_SHARED_ = 0, MPI_ERRSTR = 256 };
#define MPI_IN_PLACE_ ((void *)1)

static struct {
  int (*Initialized)(int *);
  int (*Finalized)(int *);
  int (*Init_thread)(int *, char ***, int, int *);
  int (*Finalize)(void);
  int (*Comm_rank)(mpi_handle, int *);
  int (*Comm_size)(mpi_handle, int *);
  int (*Comm_dup)(mpi_handle, mpi_handle *);
  int (*Comm_split_type)(mpi_handle, int, int, mpi_handle, mpi_handle *);
  int (*Comm_free)(mpi_handle *);
  int (*Comm_set_errhandler)(mpi_handle, mpi_handle);
  int (*Barrier)(mpi_handle);
  int (*Ibarrier)(mpi_handle, mpi_handle *);
  int (*Allreduce)(const void *, void *, int, mpi_handle, mpi_handle, mpi_handle);
  int (*Bcast)(void *, int, mpi_handle, int, mpi_handle);
  int (*Test)(mpi_handle *, int *, void *);
  int (*Error_string)(int, char *, int *);
  int (*Get_library_version)(char *, int *);
  /* predefined objects (their addresses are the handles) */
  mpi_handle comm_world, info_null, errors_return;
  mpi_handle t_float, t_double, t_int32, t_int64, t_uint8;
  mpi_handle op_sum, op_max, op_min;
} M;

static struct {
  int ready;          /* luon_dist_init succeeded */
  int mpi;            /* MPI is loaded and initialised (else single process) */
  int we_initialised; /* we called MPI_Init_thread (so we finalise) */
  int finalized;
  int broken;         /* a collective timed out: the communicator is unusable */
  char broken_msg[700];
  int32_t rank, size, local_rank;
  mpi_handle comm;
  double timeout;     /* seconds, 0 = none */
  char backend[500];
  /* GPU arrays: 0 undecided, GPU_NCCL, or GPU_HOST (staged through MPI) */
  int gpu_path;
  void *nccl;         /* the backend's communicator, on gpu(nccl_dev) */
  int32_t nccl_dev;
} G;
enum { GPU_NCCL = 1, GPU_HOST = 2 };

static const char *mpi_msg(int code) {
  static _Thread_local char buf[MPI_ERRSTR + 32];
  int len = 0;
  if (M.Error_string && M.Error_string(code, buf, &len) == MPI_OK && len > 0) {
    buf[len < MPI_ERRSTR ? len : MPI_ERRSTR - 1] = 0;
    return buf;
  }
  snprintf(buf, sizeof buf, "MPI error %d", code);
  return buf;
}

static const char *launcher_var(const char **value) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"};
  for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
    const char *v = getenv(vars[k]);
    if (v && *v) {
      *value = v;
      return vars[k];
    }
  }
  return NULL;
}

static luon_status load_mpi(const char *var, const char *val) {
  const char *lib = getenv("LUON_MPI_LIB");
  if (!lib || !*lib) lib = "libmpi.so.40";
  /* RTLD_GLOBAL: Open MPI's components (dlopened by libmpi) need its symbols */
  void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  if (!h)
    return lu_error(LUON_EUNSUPPORTED,
                    "dist.init: started by a launcher (%s=%s) but %s could not be loaded (%s); "
                    "install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) "
                    "or set LUON_MPI_LIB to its libmpi",
                    var, val, lib, dlerror());
#define SYM(field, name)                                                                   \
  do {                                                                                     \
    *(void **)&M.field = dlsym(h, name);                                                   \
    if (!M.field)                                                                          \
      return lu_error(LUON_EUNSUPPORTED,                                                   \
                      "dist.init: %s has no symbol %s: luon speaks Open MPI's ABI "        \
                      "(libmpi.so.40), not this MPI's",                                    \
                      lib, name);                                                          \
  } while (0)
  SYM(Initialized, "MPI_Initialized");
  SYM(Finalized, "MPI_Finalized");
  SYM(Init_thread, "MPI_Init_thread");
  SYM(Finalize, "MPI_Finalize");
  SYM(Comm_rank, "MPI_Comm_rank");
  SYM(Comm_size, "MPI_Comm_size");
  SYM(Comm_dup, "MPI_Comm_dup");
  SYM(Comm_split_type, "MPI_Comm_split_type");
  SYM(Comm_free, "MPI_Comm_free");
  SYM(Comm_set_errhandler, "MPI_Comm_set_errhandler");
  SYM(Barrier, "MPI_Barrier");
  SYM(Ibarrier, "MPI_Ibarrier");
  SYM(Allreduce, "MPI_Allreduce");
  SYM(Bcast, "MPI_Bcast");
  SYM(Test, "MPI_Test");
  SYM(Error_string, "MPI_Error_string");
  SYM(Get_library_version, "MPI_Get_library_version");
  SYM(comm_world, "ompi_mpi_comm_world");
  SYM(info_null, "ompi_mpi_info_null");
  SYM(errors_return, "ompi_mpi_errors_return");
  SYM(t_float, "ompi_mpi_float");
  SYM(t_double, "ompi_mpi_double");
  SYM(t_int32, "ompi_mpi_int32_t");
  SYM(t_int64, "ompi_mpi_int64_t");
  SYM(t_uint8, "ompi_mpi_uint8_t");
  SYM(op_sum, "ompi_mpi_op_sum");
  SYM(op_max, "ompi_mpi_op_max");
  SYM(op_min, "ompi_mpi_op_min");
#undef SYM
  return LUON_OK;
}

/* At exit: a process ending normally (status 0) finalizes MPI, which
 * waits for every rank; one ending with an error does not, so it leaves at
 * once and mpirun, seeing a non-zero status, stops the job and names it. */
static luon_status finalize(bool at_exit);
static void at_process_exit(int status, void *arg) {
  if (status == 0 && G.ready && G.mpi && G.we_initialised && !G.finalized && !G.broken)
    finalize(true);
}

#define MPI_TRY(call, what)                                                                \
  do {                                                                                     \
    int rc_ = (call);                                                                      \
    if (rc_ != MPI_OK) return lu_error(LUON_EIO, "dist.init: %s failed: %s", what, mpi_msg(rc_)); \
  } while (0)

luon_status luon_dist_init(int32_t *rank, int32_t *size, int32_t *local_rank) {
  if (G.finalized) return lu_error(LUON_EINVAL, "dist.init: called after dist.finalize (MPI cannot restart)");
  if (!G.ready) {
    const char *t = getenv("LUON_DIST_TIMEOUT");
    G.timeout = 300;
    if (t && *t) {
      char *end;
      double v = strtod(t, &end);
      if (*end || v < 0) return lu_error(LUON_EINVAL, "dist.init: LUON_DIST_TIMEOUT=%s is not a number of seconds >= 0", t);
      G.timeout = v;
    }
    const char *val = NULL, *var = launcher_var(&val);
    if (!var) {
      G.rank = 0, G.size = 1, G.local_rank = 0, G.mpi = 0;
      snprintf(G.backend, sizeof G.backend, "single process (not started by mpirun)");
    } else {
      LU_TRY(load_mpi(var, val));
      int inited = 0, provided = 0;
      MPI_TRY(M.Initialized(&inited), "MPI_Initialized");
      if (!inited) {
        MPI_TRY(M.Init_thread(NULL, NULL, MPI_THREAD_FUNNELED_, &provided), "MPI_Init_thread");
        G.we_initialised = 1;
        on_exit(at_process_exit, NULL);
      }
      M.Comm_set_errhandler(M.comm_world, M.errors_return);
      MPI_TRY(M.Comm_dup(M.comm_world, &G.comm), "MPI_Comm_dup");
      MPI_TRY(M.Comm_set_errhandler(G.comm, M.errors_return), "MPI_Comm_set_errhandler");
      int r = 0, s = 1, lr = 0;
      MPI_TRY(M.Comm_rank(G.comm, &r), "MPI_Comm_rank");
      MPI_TRY(M.Comm_size(G.comm, &s), "MPI_Comm_size");
      mpi_handle node = NULL;
      MPI_TRY(M.Comm_split_type(G.comm, MPI_COMM_TYPE_SHARED_, r, M.info_null, &node),
              "MPI_Comm_split_type");
      MPI_TRY(M.Comm_rank(node, &lr), "MPI_Comm_rank (node)");
      M.Comm_free(&node);
      G.rank = r, G.size = s, G.local_rank = lr, G.mpi = 1;
      char ver[300] = "";
      int len = 0;
      if (M.Get_library_version(ver, &len) == MPI_OK) {
        ver[len < 299 ? len : 299] = 0;
        char *nl = strchr(ver, ',');
        if (nl) *nl = 0;
      }
      snprintf(G.backend, sizeof G.backend, "%s", ver[0] ? ver : "MPI");
    }
    G.ready = 1;
  }
  if (rank) *rank = G.rank;
  if (size) *size = G.size;
  if (local_rank) *local_rank = G.local_rank;
  return LUON_OK;
}

const char *luon_dist_backend(void) { return G.ready ? G.backend : "not initialised"; }

/* At process exit the CUDA runtime may already be torn down (its own exit
 * handlers ran first): the NCCL communicator is then left to the exit. */
static luon_status finalize(bool at_exit) {
  if (!G.ready || G.finalized) return LUON_OK;
  G.finalized = 1;
  G.ready = 0;
  luon_status ns = LUON_OK;
  if (G.nccl && !at_exit) {
    ns = lu_cuda.nccl_destroy(G.nccl, G.timeout);
    if (ns != LUON_OK) ns = lu_error(ns, "dist.finalize: %s", lu_cuda.last_error());
  }
  G.nccl = NULL;
  if (!G.mpi) return ns;
  int done = 0;
  M.Finalized(&done);
  if (done || !G.we_initialised) return ns;
  if (!G.broken) M.Comm_free(&G.comm);
  int rc = M.Finalize();
  if (rc != MPI_OK) return lu_error(LUON_EIO, "dist.finalize: MPI_Finalize failed: %s", mpi_msg(rc));
  return ns;
}

luon_status luon_dist_finalize(void) { return finalize(false); }

static luon_status ready(const char *fname) {
  if (!G.ready)
    return lu_error(LUON_EINVAL, "dist.%s: call dist.init() first%s", fname,
                    G.finalized ? " (dist.finalize was called)" : "");
  if (G.broken) return lu_error(LUON_EIO, "dist.%s: %s", fname, G.broken_msg);
  return LUON_OK;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait for a started request: spin a while (short collectives), then poll
 * with growing sleeps up to 1 ms, until done or past the deadline. */
static luon_status wait_req(mpi_handle *req, const char *what, double t0) {
  int done = 0;
  long spins = 0;
  long sleep_ns = 1000;
  for (;;) {
    int rc = M.Test(req, &done, NULL);
    if (rc != MPI_OK) return lu_error(LUON_EIO, "dist.%s on rank %d of %d: %s", what, G.rank, G.size, mpi_msg(rc));
    if (done) return LUON_OK;
    if (++spins < 20000) continue;
    double el = now_s() - t0;
    if (G.timeout > 0 && el > G.timeout) {
      G.broken = 1;
      snprintf(G.broken_msg, sizeof G.broken_msg,
               "%s on rank %d of %d timed out after %.0f s (LUON_DIST_TIMEOUT): another rank never "
               "joined it (dead, stuck or running different code); the communicator is now unusable",
               what, G.rank, G.size, el);
      return lu_error(LUON_EIO, "dist.%s", G.broken_msg);
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}

luon_status luon_dist_barrier(void) {
  LU_TRY(ready("barrier"));
  if (!G.mpi || G.size == 1) return LUON_OK;
  int rc;
  if (G.timeout <= 0) {
    rc = M.Barrier(G.comm);
  } else {
    mpi_handle req = NULL;
    double t0 = now_s();
    rc = M.Ibarrier(G.comm, &req);
    if (rc == MPI_OK) return wait_req(&req, "barrier", t0);
  }
  if (rc != MPI_OK) return lu_error(LUON_EIO, "dist.barrier on rank %d of %d: %s", G.rank, G.size, mpi_msg(rc));
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

/* One collective on a contiguous host buffer, in chunks of at most 2^30
 * elements (MPI counts are ints). root < 0: allreduce with op; else bcast. */
static luon_status host_collective(void *data, int64_t n, int32_t dt, mpi_handle op, int root,
                                   const char *what) {
  mpi_handle type = mpi_type(dt);
  int64_t esz = luon_dtype_size(dt);
  const int64_t chunk = (int64_t)1 << 30;
  for (int64_t b = 0; b < n; b += chunk) {
    int cnt = (int)(n - b < chunk ? n - b : chunk);
    char *p = (char *)data + b * esz;
    int rc = MPI_OK;
    if (G.timeout > 0) {
      /* every rank reached this call (a non-blocking barrier, polled with a
       * deadline), then the blocking collective at full speed: Open MPI's
       * non-blocking allreduce (libnbc) is about 1.5x slower on large
       * buffers. A rank dying inside the collective ends the job (mpirun). */
      mpi_handle req = NULL;
      double t0 = now_s();
      rc = M.Ibarrier(G.comm, &req);
      if (rc == MPI_OK) LU_TRY(wait_req(&req, what, t0));
    }
    if (rc == MPI_OK || G.timeout <= 0)
      rc = root < 0 ? M.Allreduce(MPI_IN_PLACE_, p, cnt, type, op, G.comm)
                    : M.Bcast(p, cnt, type, root, G.comm);
    if (rc != MPI_OK)
      return lu_error(LUON_EIO, "dist.%s on rank %d of %d: %s", what, G.rank, G.size, mpi_msg(rc));
  }
  return LUON_OK;
}

static const char *op_names[] = {"sum", "mean", "max", "min"};

/* The array as a contiguous host buffer of an MPI dtype: itself, or a new
 * staging copy on cpu(0) (*stage, +1) to copy back afterwards. */
static luon_status host_view(luon_tensor *t, const char *fname, luon_tensor **stage) {
  *stage = NULL;
  int32_t dt = t->dtype;
  if (lu_dtype_is_storage_only(dt)) dt = LUON_DTYPE_F32;
  if (t->dev.type == LUON_CPU && lu_is_contiguous(t) && dt == t->dtype) return LUON_OK;
  lu_device host = {LUON_CPU, 0};
  LU_TRY(lu_tensor_new(dt, t->ndim, t->shape, host, stage));
  luon_status s = luon_tensor_copy(*stage, t);
  if (s != LUON_OK) {
    luon_tensor_release(*stage);
    *stage = NULL;
    return lu_error(s, "dist.%s: staging %s through host memory: %s", fname,
                    lu_device_str(t->dev), luon_last_error());
  }
  return LUON_OK;
}

static luon_status finish_stage(luon_tensor *t, luon_tensor *stage, luon_status s) {
  lu_touch(t);
  if (stage) {
    if (s == LUON_OK) s = luon_tensor_copy(t, stage);
    luon_tensor_release(stage);
  }
  return s;
}

/* ---- GPU arrays: NCCL ------------------------------------------------------ */

/* The deadline passed: the communicators are unusable from now on. */
static luon_status broken(luon_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static luon_status broken(luon_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(G.broken_msg, sizeof G.broken_msg, fmt, ap);
  va_end(ap);
  G.broken = 1;
  return lu_error(s, "dist.%s", G.broken_msg);
}

/* A failed backend call: its message under ours; LUON_EIO (the deadline)
 * and NCCL failures leave the communicator aborted, hence broken. */
static luon_status nccl_failed(luon_status s, const char *what, const char *step, double t0) {
  const char *msg = lu_cuda.last_error ? lu_cuda.last_error() : "NCCL error";
  if (s == LUON_EIO)
    return broken(LUON_EIO,
                  "%s on rank %d of %d timed out after %.0f s in %s (LUON_DIST_TIMEOUT): another rank "
                  "never joined it or died in it (dead, stuck or running different code); the NCCL "
                  "communicator was aborted and luon.dist is now unusable",
                  what, G.rank, G.size, now_s() - t0, step);
  if (s == LUON_EUNSUPPORTED || s == LUON_EINVAL || s == LUON_ENOMEM)
    return lu_error(s, "dist.%s on rank %d of %d: %s", what, G.rank, G.size, msg);
  return broken(s, "%s on rank %d of %d: %s: %s; the NCCL communicator was aborted and luon.dist "
                "is now unusable", what, G.rank, G.size, step, msg);
}

/* Decide, with every rank, how GPU arrays travel; for NCCL make the
 * communicator on dev. Every rank runs this at its first collective of a
 * GPU array (every rank makes the same calls). */
static luon_status gpu_setup(lu_device dev, const char *what) {
  if (G.gpu_path) return LUON_OK;
  /* each rank's slot: its card's UUID (2 words) and whether it can use NCCL
   * (1), or why not (0 LUON_DIST_NCCL=0, 2 no NCCL in its backend) */
  int64_t n = 3 * (int64_t)G.size;
  luon_tensor *x = NULL;
  lu_device host = {LUON_CPU, 0};
  LU_TRY(lu_tensor_new(LUON_DTYPE_I64, 1, &n, host, &x));
  int64_t *all = lu_data(x), *mine = all + 3 * (int64_t)G.rank;
  memset(all, 0, sizeof(int64_t) * (size_t)n);
  const char *env = getenv("LUON_DIST_NCCL");
  bool off = env && strcmp(env, "0") == 0;
  bool have = lu_cuda.nccl_comm_init && lu_cuda.device_uuid;
  mine[2] = off ? 0 : have ? 1 : 2;
  luon_status s = LUON_OK;
  if (mine[2] == 1) {
    uint8_t uuid[16];
    s = lu_cuda.device_uuid(dev.id, uuid);
    if (s != LUON_OK) s = lu_error(s, "dist.%s: %s", what, lu_cuda.last_error());
    memcpy(mine, uuid, 16);
  }
  char step[160];
  snprintf(step, sizeof step, "%s (choosing how GPU arrays travel)", what);
  if (s == LUON_OK) s = host_collective(all, n, LUON_DTYPE_I64, M.op_sum, -1, step);
  char why[200] = "";
  for (int32_t r = 0; r < G.size && s == LUON_OK && !why[0]; r++) {
    int64_t *q = all + 3 * (int64_t)r;
    if (q[2] == 0) snprintf(why, sizeof why, "LUON_DIST_NCCL=0 on rank %d", r);
    if (q[2] == 2) snprintf(why, sizeof why, "rank %d's CUDA backend has no NCCL", r);
    for (int32_t o = r + 1; o < G.size && !why[0]; o++) {
      int64_t *p = all + 3 * (int64_t)o;
      if (q[2] == 1 && p[2] == 1 && q[0] == p[0] && q[1] == p[1])
        snprintf(why, sizeof why, "ranks %d and %d share one GPU, and NCCL needs a GPU per rank", r, o);
    }
  }
  luon_tensor_release(x);
  LU_TRY(s);
  size_t len = strlen(G.backend);
  if (why[0]) {
    G.gpu_path = GPU_HOST;
    snprintf(G.backend + len, sizeof G.backend - len, "; GPU arrays through host memory (%s)", why);
    return LUON_OK;
  }
  /* rank 0's unique id, with a first byte saying whether it has one */
  uint8_t id[1 + LU_NCCL_ID_BYTES];
  memset(id, 0, sizeof id);
  if (G.rank == 0) {
    s = lu_cuda.nccl_unique_id(id + 1);
    id[0] = s == LUON_OK;
    if (s != LUON_OK) s = lu_error(s, "dist.%s: ncclGetUniqueId: %s", what, lu_cuda.last_error());
  }
  snprintf(step, sizeof step, "%s (broadcasting NCCL's unique id)", what);
  luon_status bs = host_collective(id, sizeof id, LUON_DTYPE_U8, NULL, 0, step);
  LU_TRY(s);
  LU_TRY(bs);
  if (!id[0]) return lu_error(LUON_EDEVICE, "dist.%s: rank 0 could not make NCCL's unique id (its error says why)", what);
  double t0 = now_s();
  s = lu_cuda.nccl_comm_init(id + 1, G.size, G.rank, dev.id, G.timeout, &G.nccl);
  if (s != LUON_OK) {
    G.nccl = NULL;
    snprintf(step, sizeof step, "setting up NCCL (ncclCommInitRankConfig on %s)", lu_device_str(dev));
    return nccl_failed(s, what, step, t0);
  }
  G.gpu_path = GPU_NCCL;
  G.nccl_dev = dev.id;
  int v = lu_cuda.nccl_version();
  snprintf(G.backend + len, sizeof G.backend - len, "; GPU arrays through NCCL %d.%d.%d on %s",
           v / 10000, v / 100 % 100, v % 100, lu_device_str(dev));
  return LUON_OK;
}

/* One collective of a GPU array through the communicator, in place, or
 * through a contiguous copy on the communicator's GPU. root < 0: allreduce. */
static luon_status nccl_collective(luon_tensor *t, int32_t op, int32_t root, const char *what) {
  lu_device cd = {LUON_GPU, G.nccl_dev};
  luon_tensor *w = t;
  if (!lu_is_contiguous(t) || !lu_device_eq(t->dev, cd)) {
    LU_TRY(lu_tensor_new(t->dtype, t->ndim, t->shape, cd, &w));
    luon_status s = luon_tensor_copy(w, t);
    if (s != LUON_OK) {
      luon_tensor_release(w);
      return lu_error(s, "dist.%s: copying %s to the NCCL communicator's %s: %s", what,
                      lu_device_str(t->dev), lu_device_str(cd), luon_last_error());
    }
  }
  double t0 = now_s();
  lu_touch(t);
  luon_status s = root < 0 ? lu_cuda.nccl_allreduce(G.nccl, lu_data(w), w->size, w->dtype, op, G.timeout)
                           : lu_cuda.nccl_broadcast(G.nccl, lu_data(w), w->size, w->dtype, root, G.timeout);
  if (s != LUON_OK) s = nccl_failed(s, what, root < 0 ? "ncclAllReduce" : "ncclBroadcast", t0);
  if (w != t) {
    if (s == LUON_OK) s = luon_tensor_copy(t, w);
    luon_tensor_release(w);
  }
  return s;
}

luon_status luon_dist_allreduce(luon_tensor *t, int32_t op) {
  LU_TRY(ready("allreduce"));
  if (!t) return lu_error(LUON_EINVAL, "dist.allreduce: the array is NULL");
  if (op < LUON_DIST_SUM || op > LUON_DIST_MIN)
    return lu_error(LUON_EINVAL, "dist.allreduce: unknown op %d (0 sum, 1 mean, 2 max, 3 min)", op);
  bool fl = lu_dtype_is_float(t->dtype) || lu_dtype_is_storage_only(t->dtype);
  if (op == LUON_DIST_MEAN && !fl)
    return lu_error(LUON_EDTYPE, "dist.allreduce: 'mean' needs a float array, got %s (use 'sum')",
                    luon_dtype_name(t->dtype));
  if (t->dtype == LUON_DTYPE_BOOL && op <= LUON_DIST_MEAN)
    return lu_error(LUON_EDTYPE, "dist.allreduce: '%s' of a bool array (use 'max' for any, 'min' for all)",
                    op_names[op]);
  if (!G.mpi || G.size == 1 || t->size == 0) return LUON_OK;
  char what[120];
  snprintf(what, sizeof what, "allreduce(%s, %s %s)", op_names[op], luon_dtype_name(t->dtype),
           lu_shape_str(t->ndim, t->shape));
  if (t->dev.type == LUON_GPU) {
    LU_TRY(gpu_setup(t->dev, what));
    if (G.gpu_path == GPU_NCCL) return nccl_collective(t, op, -1, what);
  }
  LU_TRY(luon_tensor_wait(t));
  luon_tensor *stage;
  LU_TRY(host_view(t, "allreduce", &stage));
  luon_tensor *h = stage ? stage : t;
  mpi_handle mop = op == LUON_DIST_MAX ? M.op_max : op == LUON_DIST_MIN ? M.op_min : M.op_sum;
  luon_status s = host_collective(lu_data(h), h->size, h->dtype, mop, -1, what);
  if (s == LUON_OK && op == LUON_DIST_MEAN) {
    if (h->dtype == LUON_DTYPE_F32) {
      float *p = lu_data(h);
      float inv = 1.0f / (float)G.size;
      for (int64_t i = 0; i < h->size; i++) p[i] *= inv;
    } else {
      double *p = lu_data(h);
      for (int64_t i = 0; i < h->size; i++) p[i] /= G.size;
    }
  }
  return finish_stage(t, stage, s);
}

luon_status luon_dist_broadcast(luon_tensor *t, int32_t root) {
  LU_TRY(ready("broadcast"));
  if (!t) return lu_error(LUON_EINVAL, "dist.broadcast: the array is NULL");
  if (root < 0 || root >= G.size)
    return lu_error(LUON_EINVAL, "dist.broadcast: root %d is not a rank (0 to %d)", root, G.size - 1);
  if (!G.mpi || G.size == 1 || t->size == 0) return LUON_OK;
  char what[120];
  snprintf(what, sizeof what, "broadcast(root %d, %s %s)", root, luon_dtype_name(t->dtype),
           lu_shape_str(t->ndim, t->shape));
  if (t->dev.type == LUON_GPU) {
    LU_TRY(gpu_setup(t->dev, what));
    if (G.gpu_path == GPU_NCCL) return nccl_collective(t, 0, root, what);
  }
  LU_TRY(luon_tensor_wait(t));
  luon_tensor *stage;
  LU_TRY(host_view(t, "broadcast", &stage));
  luon_tensor *h = stage ? stage : t;
  luon_status s = host_collective(lu_data(h), h->size, h->dtype, NULL, root, what);
  return finish_stage(t, stage, s);
}
