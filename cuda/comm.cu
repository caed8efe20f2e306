/* comm.cu: gradient summation across replicas on distinct physical GPUs
 * with NCCL (one communicator per set of cards, kept for the process). The
 * core's luon_allreduce calls it when every replica is on a GPU; replicas
 * sharing a card (virtual GPUs) go through the core's copies and adds. */
#include "internal_cuda.h"
#include <nccl.h>
#include <pthread.h>

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
  return s;
}
