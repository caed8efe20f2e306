/* test_tensor.c: tensor lifetime and views (a storage outlives the tensor
 * that made it while views hold it), the caching allocator's reuse and
 * statistics, the op registry's completeness, and the dispatcher's errors
 * (each followed by a valid call, to show the runtime stays usable). */
#include "internal.h"
#include "testutil.h"
#include <string.h>

static luon_tensor *ones(int ndim, const int64_t *shape, int dev_id) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dev_type = LUON_CPU;
  a.dev_id = dev_id;
  a.ni = LU_FULL_SHAPE + ndim;
  for (int i = 0; i < ndim; i++) a.i[LU_FULL_SHAPE + i] = shape[i];
  a.f[LU_FULL_VALUE] = 1;
  luon_tensor *t = NULL;
  int32_t n = 1;
  CHECK_OK(luon_op_call(LU_OP_full, 0, NULL, &a, &n, &t));
  return t;
}

static void lifetime_and_views(void) {
  int64_t live0 = luon_counters_get()->tensors_live;
  int64_t shape[2] = {4, 1000}; /* large enough to use the allocator */
  luon_tensor *t = ones(2, shape, 0);
  int64_t vs[1] = {1000}, st[1] = {1};
  luon_tensor *row = NULL;
  CHECK_OK(luon_tensor_view(t, 1, vs, st, 2000, &row)); /* row 2 */
  luon_tensor_release(t); /* the view keeps the storage (and its data) */
  float buf[1000];
  CHECK_OK(luon_tensor_to_host(row, buf, LUON_DTYPE_F32, sizeof buf));
  CHECK(buf[0] == 1 && buf[999] == 1, "row reads %g %g after its base was released", buf[0], buf[999]);
  CHECK(luon_tensor_retain(row) == row, "retain returns its argument");
  luon_tensor_release(row);
  luon_tensor_release(row);
  CHECK(luon_counters_get()->tensors_live == live0, "tensors_live %lld, was %lld",
        (long long)luon_counters_get()->tensors_live, (long long)live0);
  /* a view outside the storage is refused */
  luon_tensor *base = ones(2, shape, 0), *bad = NULL;
  CHECK(luon_tensor_view(base, 1, vs, st, 3500, &bad) == LUON_ESHAPE, "view past the end accepted");
  luon_tensor_release(base);
  /* no elements, but its strides would pass 64 bits (found by fuzz_idx) */
  int64_t empty_huge[4] = {0, (int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31};
  CHECK(luon_tensor_empty(LUON_DTYPE_U8, 4, empty_huge, LUON_CPU, 0, &bad) == LUON_ESHAPE &&
            strstr(luon_last_error(), "too large"),
        "shape (0,2^31,2^31,2^31): %s", luon_last_error());
}

static void allocator(void) {
  CHECK_OK(luon_memory_empty_cache(LUON_CPU, 3));
  luon_memory_stats s0, s1, s2;
  CHECK_OK(luon_memory_stats_get(LUON_CPU, 3, &s0));
  int64_t shape[1] = {1 << 16};
  luon_tensor *t = ones(1, shape, 3);
  CHECK_OK(luon_memory_stats_get(LUON_CPU, 3, &s1));
  CHECK(s1.in_use >= s0.in_use + (1 << 18), "in_use grew by %lld", (long long)(s1.in_use - s0.in_use));
  CHECK(s1.peak >= s1.in_use, "peak %lld below in_use %lld", (long long)s1.peak, (long long)s1.in_use);
  luon_tensor_release(t);
  CHECK_OK(luon_memory_stats_get(LUON_CPU, 3, &s2));
  CHECK(s2.in_use == s0.in_use && s2.cached >= (1 << 18), "after release: in_use %lld cached %lld",
        (long long)s2.in_use, (long long)s2.cached);
  t = ones(1, shape, 3); /* the same size again comes from the cache */
  luon_memory_stats s3;
  CHECK_OK(luon_memory_stats_get(LUON_CPU, 3, &s3));
  CHECK(s3.cache_hits == s2.cache_hits + 1, "no cache hit (%lld -> %lld)", (long long)s2.cache_hits,
        (long long)s3.cache_hits);
  luon_tensor_release(t);
  CHECK_OK(luon_memory_empty_cache(LUON_CPU, 3));
  CHECK_OK(luon_memory_stats_get(LUON_CPU, 3, &s3));
  CHECK(s3.cached == 0, "empty_cache left %lld bytes", (long long)s3.cached);
  CHECK(luon_memory_stats_get(LUON_CPU, -1, &s3) == LUON_EDEVICE, "cpu(-1) has statistics");
}

static void registry(void) {
  for (int op = 0; op < luon_op_count(); op++) {
    CHECK(lu_ops[op].shape && lu_ops[op].cpu, "op %s has no shape function or CPU kernel", lu_ops[op].name);
    CHECK(luon_op_find(lu_ops[op].name) == op, "op %s not found by name", lu_ops[op].name);
  }
  CHECK(luon_op_find("no_such_op") == -1 && strstr(luon_last_error(), "no_such_op"), "%s", luon_last_error());
}

static void dispatcher_errors(void) {
  int64_t s23[2] = {2, 3}, s4[1] = {4};
  luon_tensor *a = ones(2, s23, 0), *b = ones(1, s4, 0), *c1 = ones(2, s23, 1), *out = NULL;
  luon_tensor *in[2] = {a, b};
  int32_t n = 1;
  CHECK(luon_op_call(LU_OP_add, 2, in, NULL, &n, &out) == LUON_ESHAPE, "broadcast mismatch accepted");
  CHECK(strstr(luon_last_error(), "add") && strstr(luon_last_error(), "(2,3)") &&
        strstr(luon_last_error(), "(4,)"), "%s", luon_last_error());
  in[1] = c1;
  n = 1;
  CHECK(luon_op_call(LU_OP_add, 2, in, NULL, &n, &out) == LUON_EDEVICE, "two devices accepted");
  CHECK(strstr(luon_last_error(), "cpu(0)") && strstr(luon_last_error(), "cpu(1)") &&
        strstr(luon_last_error(), "copyto"), "%s", luon_last_error());
  n = 1;
  CHECK(luon_op_call(LU_OP_add, 1, in, NULL, &n, &out) == LUON_EINVAL, "one input for add accepted");
  CHECK(strstr(luon_last_error(), "takes 2 inputs"), "%s", luon_last_error());
  n = 1;
  CHECK(luon_op_call(9999, 0, NULL, NULL, &n, &out) == LUON_EINVAL, "op 9999 accepted");
  in[1] = NULL;
  n = 1;
  CHECK(luon_op_call(LU_OP_add, 2, in, NULL, &n, &out) == LUON_EINVAL, "NULL input accepted");
  /* out= of the wrong shape */
  luon_tensor *wrong = ones(1, s4, 0);
  in[1] = a;
  n = 1;
  out = wrong;
  CHECK(luon_op_call(LU_OP_add, 2, in, NULL, &n, &out) == LUON_ESHAPE, "out= of shape (4,) accepted");
  /* and after all that, a valid call works */
  out = NULL;
  n = 1;
  CHECK_OK(luon_op_call(LU_OP_add, 2, in, NULL, &n, &out));
  float v[6];
  CHECK_OK(luon_tensor_to_host(out, v, LUON_DTYPE_F32, sizeof v));
  CHECK(v[0] == 2 && v[5] == 2, "1 + 1 = %g", v[0]);
  luon_tensor_release(out);
  luon_tensor_release(wrong);
  luon_tensor_release(a);
  luon_tensor_release(b);
  luon_tensor_release(c1);
}

int main(void) {
  lifetime_and_views();
  allocator();
  registry();
  dispatcher_errors();
  return TEST_RESULT;
}
