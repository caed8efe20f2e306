/* test_capi_null.c: the public API given NULL where it needs a pointer
 * returns an error naming the function instead of crashing, and copying
 * into a broadcast view (stride 0) is refused before anything is written.
 * Only luon.h: this is what a C host sees. */
#include "luon.h"
#include "testutil.h"
#include <string.h>

/* expr fails with `want` and a message that contains `fn` (and `arg`). */
#define CHECK_NULL(expr, want, fn, arg)                                          \
  do {                                                                        \
    luon_set_error("");                                                       \
    int check_null_s_ = (int)(expr);                                          \
    CHECK(check_null_s_ == (want), "status %d, expected %d: %s", check_null_s_, \
          (int)(want), luon_last_error());                                    \
    CHECK(strstr(luon_last_error(), fn) && strstr(luon_last_error(), arg),    \
          "message '%s' does not name %s and %s", luon_last_error(), fn, arg); \
  } while (0)

static void null_pointers(void) {
  int64_t sh[2] = {2, 3};
  float buf[6] = {0};
  luon_tensor *t = NULL, *out = NULL;
  int32_t nout = 1;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 2, sh, LUON_CPU, 0, &t));
  luon_tensor *two[2] = {t, t};
  int32_t add = luon_op_find("add");
  CHECK(add >= 0, "no op add");

  CHECK_NULL(luon_tensor_info_get(t, NULL), LUON_EINVAL, "tensor_info", "info");
  CHECK_NULL(luon_tensor_empty(LUON_DTYPE_F32, 2, NULL, LUON_CPU, 0, &out), LUON_EINVAL, "empty", "shape");
  CHECK(out == NULL, "empty left a tensor in out on failure");
  CHECK_NULL(luon_tensor_empty(LUON_DTYPE_F32, 2, sh, LUON_CPU, 0, NULL), LUON_EINVAL, "empty", "out");
  CHECK_NULL(luon_tensor_from_host(NULL, LUON_DTYPE_F32, 2, sh, LUON_CPU, 0, &out), LUON_EINVAL,
             "from_host", "src");
  CHECK_NULL(luon_tensor_from_host(buf, LUON_DTYPE_F32, 2, NULL, LUON_CPU, 0, &out), LUON_EINVAL,
             "from_host", "shape");
  CHECK_NULL(luon_tensor_from_host(buf, LUON_DTYPE_F32, 2, sh, LUON_CPU, 0, NULL), LUON_EINVAL,
             "from_host", "out");
  CHECK_NULL(luon_tensor_to_host(t, NULL, LUON_DTYPE_F32, sizeof buf), LUON_EINVAL, "to_host", "dst");
  CHECK_NULL(luon_tensor_view(t, 2, NULL, NULL, 0, &out), LUON_EINVAL, "view", "shape");
  int64_t st[2] = {3, 1};
  CHECK_NULL(luon_tensor_view(t, 2, sh, NULL, 0, &out), LUON_EINVAL, "view", "strides");
  CHECK_NULL(luon_tensor_view(t, 2, sh, st, 0, NULL), LUON_EINVAL, "view", "out");
  CHECK_NULL(luon_tensor_wrap(buf, LUON_DTYPE_F32, 2, sh, NULL, LUON_CPU, 0, NULL), LUON_EINVAL, "wrap", "out");
  CHECK_NULL(luon_memory_stats_get(LUON_CPU, 0, NULL), LUON_EINVAL, "memory_stats", "out");
  CHECK_NULL(luon_op_find(NULL), -1, "op_find", "name");
  CHECK_NULL(luon_op_info_get(add, NULL), LUON_EINVAL, "op_info", "out");
  CHECK_NULL(luon_op_call(add, 2, NULL, NULL, &nout, &out), LUON_EINVAL, "op_call", "in");
  CHECK_NULL(luon_op_call(add, 2, two, NULL, NULL, &out), LUON_EINVAL, "op_call", "nout");
  CHECK_NULL(luon_op_call(add, 2, two, NULL, &nout, NULL), LUON_EINVAL, "op_call", "out");
  CHECK_NULL(luon_tensor_grad(t, NULL), LUON_EINVAL, "grad", "out");
  CHECK_NULL(luon_tensor_detach(t, NULL), LUON_EINVAL, "detach", "out");
  CHECK_NULL(luon_autograd_backward(1, NULL, NULL, 0), LUON_EINVAL, "backward", "heads");
  CHECK_NULL(luon_allreduce(1, NULL, 0), LUON_EINVAL, "allreduce", "replicas");
  CHECK_NULL(luon_transform_is_random(NULL, 3), 0, "transform_is_random", "steps");
  int64_t o3[3];
  CHECK_NULL(luon_transform_out_shape(NULL, 0, 3, NULL, LUON_DTYPE_U8, o3, NULL), LUON_EINVAL,
             "transform_out_shape", "in_shape");
  CHECK_NULL(luon_abi_sizeof(NULL), -1, "abi_sizeof", "struct_name");
  CHECK_NULL(luon_abi_sizeof("no_such_struct"), -1, "abi_sizeof", "no_such_struct");

  /* what NULL is allowed for still works: no shape at 0 dimensions, no
   * data for no elements, no memory-info pointers */
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 0, NULL, LUON_CPU, 0, &out));
  luon_tensor_release(out);
  int64_t none[1] = {0};
  CHECK_OK(luon_tensor_from_host(NULL, LUON_DTYPE_F32, 1, none, LUON_CPU, 0, &out));
  luon_tensor_release(out);
  CHECK(luon_transform_is_random(NULL, 0) == 0, "no steps are not random");
  CHECK(luon_abi_sizeof("luon_tensor_info") == (int64_t)sizeof(luon_tensor_info), "abi_sizeof");
  if (luon_gpu_count() > 0) CHECK_OK(luon_gpu_memory_info(0, NULL, NULL));

  /* after all that the runtime is usable */
  out = NULL;
  nout = 1;
  CHECK_OK(luon_op_call(add, 2, two, NULL, &nout, &out));
  luon_tensor_release(out);
  luon_tensor_release(t);
}

/* A broadcast view (stride 0 along an axis of length 4) of a 1-element
 * base: copying into it is refused and the base keeps its value. */
static void copy_into_broadcast(int32_t dev_type) {
  float one = 7, four[4] = {0, 1, 2, 3}, back = 0;
  int64_t sh1[1] = {1}, sh4[1] = {4}, st0[1] = {0};
  luon_tensor *base = NULL, *src = NULL, *view = NULL;
  CHECK_OK(luon_tensor_from_host(&one, LUON_DTYPE_F32, 1, sh1, dev_type, 0, &base));
  CHECK_OK(luon_tensor_from_host(four, LUON_DTYPE_F32, 1, sh4, LUON_CPU, 0, &src));
  CHECK_OK(luon_tensor_view(base, 1, sh4, st0, 0, &view));
  luon_status s = luon_tensor_copy(view, src);
  CHECK(s == LUON_EINVAL && strstr(luon_last_error(), "broadcast view") &&
            strstr(luon_last_error(), "axis 0"),
        "copy into a broadcast view on %s: status %d: %s", luon_device_name(dev_type, 0), (int)s,
        luon_last_error());
  CHECK(luon_tensor_copy(view, view) == LUON_EINVAL, "copy of a broadcast view onto itself");
  CHECK_OK(luon_tensor_to_host(base, &back, LUON_DTYPE_F32, sizeof back));
  CHECK(back == 7, "the base was overwritten: %g", back);
  /* reading from it is fine, and so is writing into a stride-0 axis of length 1 */
  float got[4] = {0};
  luon_tensor *dst = NULL, *one_view = NULL;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 1, sh4, dev_type, 0, &dst));
  CHECK_OK(luon_tensor_copy(dst, view));
  CHECK_OK(luon_tensor_to_host(dst, got, LUON_DTYPE_F32, sizeof got));
  CHECK(got[0] == 7 && got[3] == 7, "broadcast read %g %g", got[0], got[3]);
  CHECK_OK(luon_tensor_view(base, 1, sh1, st0, 0, &one_view));
  luon_tensor *src1 = NULL;
  float nine = 9;
  CHECK_OK(luon_tensor_from_host(&nine, LUON_DTYPE_F32, 1, sh1, LUON_CPU, 0, &src1));
  CHECK_OK(luon_tensor_copy(one_view, src1));
  CHECK_OK(luon_tensor_to_host(base, &back, LUON_DTYPE_F32, sizeof back));
  CHECK(back == 9, "a length-1 stride-0 view got %g", back);
  luon_tensor *rel[] = {base, src, view, dst, one_view, src1};
  for (size_t k = 0; k < sizeof rel / sizeof rel[0]; k++) luon_tensor_release(rel[k]);
}

int main(void) {
  null_pointers();
  copy_into_broadcast(LUON_CPU);
  if (luon_gpu_count() > 0) copy_into_broadcast(LUON_GPU);
  return TEST_RESULT;
}
