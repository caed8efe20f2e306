/* comm.c: collectives over the replicas of an array on several devices of
 * this process (data-parallel gradient summation). Logical CPU devices share
 * memory, so their all-reduce is one threaded pass that reads every replica
 * and writes the result into all of them; other devices go through copies
 * and adds on the first replica's device, or NCCL in the CUDA backend between
 * distinct physical GPUs (cuda/comm.cu). */
#include "internal.h"

#define MAX_REPLICAS 64

typedef struct job {
  int n;
  int32_t dtype;
  double scale;              /* 1 for a sum, 1/n for a mean */
  char *p[MAX_REPLICAS];
} job;

/* (n replicas of len elements) -> sum over replicas, written to each */
static void cpu_range(void *ctx, int64_t b, int64_t e) {
  const job *j = ctx;
  if (j->dtype == LUON_DTYPE_F32) {
    for (int64_t i = b; i < e; i++) {
      float s = ((const float *)j->p[0])[i];
      for (int k = 1; k < j->n; k++) s += ((const float *)j->p[k])[i];
      if (j->scale != 1) s = (float)(s * j->scale);
      for (int k = 0; k < j->n; k++) ((float *)j->p[k])[i] = s;
    }
  } else if (j->dtype == LUON_DTYPE_F64) {
    for (int64_t i = b; i < e; i++) {
      double s = ((const double *)j->p[0])[i];
      for (int k = 1; k < j->n; k++) s += ((const double *)j->p[k])[i];
      s *= j->scale;
      for (int k = 0; k < j->n; k++) ((double *)j->p[k])[i] = s;
    }
  }
}

/* Any devices and layouts: acc = r0 (+ copies of the others) on r0's device. */
static luon_status generic(int n, luon_tensor *const *r, int32_t op) {
  luon_tensor *acc = NULL, *tmp = NULL, *sum = NULL;
  luon_status s = lu_tensor_new(r[0]->dtype, r[0]->ndim, r[0]->shape, r[0]->dev, &acc);
  if (s == LUON_OK) s = luon_tensor_copy(acc, r[0]);
  for (int k = 1; k < n && s == LUON_OK; k++) {
    s = lu_tensor_new(r[k]->dtype, r[k]->ndim, r[k]->shape, r[0]->dev, &tmp);
    if (s == LUON_OK) s = luon_tensor_copy(tmp, r[k]);
    if (s == LUON_OK) s = lu_run(LU_OP_add, NULL, &sum, 2, acc, tmp);
    luon_tensor_release(tmp);
    tmp = NULL;
    if (s == LUON_OK) {
      luon_tensor_release(acc);
      acc = sum;
      sum = NULL;
    }
  }
  if (s == LUON_OK && op == LUON_REDUCE_MEAN) {
    luon_attrs a;
    memset(&a, 0, sizeof a);
    a.dtype = acc->dtype;
    a.dev_type = acc->dev.type;
    a.dev_id = acc->dev.id;
    a.f[LU_FULL_VALUE] = 1.0 / n; /* a 0-d full */
    luon_tensor *scale = NULL;
    int32_t one = 1;
    s = luon_op_call(LU_OP_full, 0, NULL, &a, &one, &scale);
    if (s == LUON_OK) s = lu_run(LU_OP_multiply, NULL, &sum, 2, acc, scale);
    luon_tensor_release(scale);
    if (s == LUON_OK) {
      luon_tensor_release(acc);
      acc = sum;
    }
  }
  for (int k = 0; k < n && s == LUON_OK; k++) s = luon_tensor_copy(r[k], acc);
  luon_tensor_release(acc);
  return s;
}

luon_status luon_allreduce(int32_t n, luon_tensor *const *r, int32_t op) {
  if (n < 1 || n > MAX_REPLICAS)
    return lu_error(LUON_EINVAL, "allreduce: %d replicas (expected 1 to %d)", n, MAX_REPLICAS);
  if (op != LUON_REDUCE_SUM && op != LUON_REDUCE_MEAN)
    return lu_error(LUON_EINVAL, "allreduce: unknown reduction %d (0 sum, 1 mean)", op);
  if (!r) return lu_error(LUON_EINVAL, "allreduce: replicas is NULL (n is %d)", n);
  for (int k = 0; k < n; k++) {
    if (!r[k]) return lu_error(LUON_EINVAL, "allreduce: replica %d is NULL", k + 1);
    if (r[k]->dtype != r[0]->dtype || r[k]->ndim != r[0]->ndim ||
        memcmp(r[k]->shape, r[0]->shape, sizeof(int64_t) * (size_t)r[0]->ndim))
      return lu_error(LUON_ESHAPE, "allreduce: replica %d is %s %s but replica 1 is %s %s", k + 1,
                      luon_dtype_name(r[k]->dtype), lu_shape_str(r[k]->ndim, r[k]->shape),
                      luon_dtype_name(r[0]->dtype), lu_shape_str(r[0]->ndim, r[0]->shape));
    for (int m = 0; m < k; m++)
      if (r[m]->storage == r[k]->storage)
        return lu_error(LUON_EINVAL, "allreduce: replicas %d and %d share memory", m + 1, k + 1);
  }
  if (n == 1) return LUON_OK;
  for (int k = 0; k < n; k++) lu_touch(r[k]);
  /* replicas on distinct physical GPUs: NCCL in the backend (it declines
   * replicas sharing a card, which take the copies and adds below) */
  bool gpus = lu_cuda.allreduce && lu_dtype_is_float(r[0]->dtype);
  for (int k = 0; k < n && gpus; k++) gpus = r[k]->dev.type == LUON_GPU && lu_is_contiguous(r[k]);
  if (gpus) {
    void *p[MAX_REPLICAS];
    int32_t ids[MAX_REPLICAS];
    for (int k = 0; k < n; k++) p[k] = lu_data(r[k]), ids[k] = r[k]->dev.id;
    luon_status s = lu_cuda.allreduce(n, p, ids, r[0]->dtype, r[0]->size, op);
    if (s != LUON_EUNSUPPORTED) return lu_cuda_check(s);
  }
  bool fast = lu_dtype_is_float(r[0]->dtype);
  for (int k = 0; k < n && fast; k++) fast = r[k]->dev.type == LUON_CPU && lu_is_contiguous(r[k]);
  if (!fast) return generic(n, r, op);
  job j = {n, r[0]->dtype, op == LUON_REDUCE_MEAN ? 1.0 / n : 1.0, {0}};
  for (int k = 0; k < n; k++) j.p[k] = lu_data(r[k]);
  lu_parallel_for(r[0]->size, 1 << 16, cpu_range, &j);
  return LUON_OK;
}
