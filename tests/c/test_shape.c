/* test_shape.c: the view ops (reshape, transpose, expand_dims, squeeze,
 * slice, broadcast_to, split) and the gathering ops (take, concatenate,
 * stack) through the public API, against hand-computed values. */
#include "internal.h" /* the backward rules, called directly */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testops.h"

/* A new cpu(0) tensor of dtype from doubles. */
static luon_tensor *make(int32_t dtype, int ndim, const int64_t *shape, const double *v) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_empty(dtype, ndim, shape, LUON_CPU, 0, &t));
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  for (int64_t j = 0; j < n; j++) {
    switch (dtype) {
    case LUON_DTYPE_F32: ((float *)in.data)[j] = (float)v[j]; break;
    case LUON_DTYPE_F64: ((double *)in.data)[j] = v[j]; break;
    case LUON_DTYPE_I32: ((int32_t *)in.data)[j] = (int32_t)v[j]; break;
    case LUON_DTYPE_I64: ((int64_t *)in.data)[j] = (int64_t)v[j]; break;
    }
  }
  return t;
}

/* 0, 1, ..., n-1 as float64 with the given shape. */
static luon_tensor *iota(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t j = 0; j < n; j++) v[j] = (double)j;
  luon_tensor *t = make(LUON_DTYPE_F64, ndim, shape, v);
  free(v);
  return t;
}

/* Element j (row-major) of any CPU tensor, read through its strides. */
static double at(const luon_tensor *t, int64_t j) {
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  int64_t off = 0;
  for (int d = in.ndim - 1; d >= 0; d--) {
    off += (j % in.shape[d]) * in.strides[d];
    j /= in.shape[d];
  }
  switch (in.dtype) {
  case LUON_DTYPE_F32: return ((float *)in.data)[off];
  case LUON_DTYPE_F64: return ((double *)in.data)[off];
  case LUON_DTYPE_I32: return ((int32_t *)in.data)[off];
  case LUON_DTYPE_I64: return (double)((int64_t *)in.data)[off];
  case LUON_DTYPE_U8: case LUON_DTYPE_BOOL: return ((uint8_t *)in.data)[off];
  }
  return -12345;
}

/* t has shape (ndim, shape) and values v. */
static void expect(const char *what, const luon_tensor *t, int ndim, const int64_t *shape,
                   const double *v) {
  luon_tensor_info in;
  if (!t) {
    CHECK(0, "%s: no tensor", what);
    return;
  }
  luon_tensor_info_get(t, &in);
  int same = in.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = in.shape[d] == shape[d];
  CHECK(same, "%s: shape (ndim %d, first %lld)", what, in.ndim, (long long)in.shape[0]);
  if (!same) return;
  for (int64_t j = 0; j < in.size; j++)
    if (at(t, j) != v[j]) {
      CHECK(0, "%s: element %lld is %g, expected %g", what, (long long)j, at(t, j), v[j]);
      return;
    }
}

/* Attributes that are one list from slot 0: the shapes and axes of
 * reshape, transpose, broadcast_to, and the slots of these ops, whose
 * lists start at 0 too. */
_Static_assert(LU_EXPAND_DIMS_AXIS == 0 && LU_SQUEEZE_AXES == 0 && LU_SLICE_BEGIN == 0 && LU_SPLIT_AXIS == 0,
               "ints() fills slots from 0");
static luon_attrs ints(int n, const int64_t *v) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = n;
  for (int k = 0; k < n; k++) a.i[k] = v[k];
  return a;
}

static void *data_of(const luon_tensor *t) {
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  return in.data;
}

/* Whether the copy op (core/ops/elementwise.c) is in this build. */
static int have_copy(void) {
  int64_t sh[1] = {2};
  luon_tensor *x = iota(1, sh);
  luon_status s;
  luon_tensor *y = op1("copy", 1, &x, NULL, &s);
  luon_tensor_release(x);
  luon_tensor_release(y);
  return s == LUON_OK;
}

static void test_reshape(int copy) {
  int64_t s6[1] = {6}, s23[2] = {2, 3};
  luon_tensor *x = iota(1, s6);
  int64_t want[2] = {2, -1};
  luon_attrs a = ints(2, want);
  luon_tensor *y = ok1("reshape", 1, &x, &a);
  double v[6] = {0, 1, 2, 3, 4, 5};
  expect("reshape (2,-1)", y, 2, s23, v);
  CHECK(y && data_of(y) == data_of(x), "reshape of a contiguous array is a view");
  ((double *)data_of(x))[4] = 40;
  CHECK(y && at(y, 4) == 40, "write through the base is seen in the reshaped view");

  int64_t bad[2] = {4, -1};
  a = ints(2, bad);
  fails("reshape", 1, &x, &a, LUON_ESHAPE, "reshape: cannot reshape array of size 6 into shape (4,-1)");
  int64_t two[2] = {-1, -1};
  a = ints(2, two);
  fails("reshape", 1, &x, &a, LUON_ESHAPE, "one unknown dimension");
  int64_t s7[1] = {7};
  a = ints(1, s7);
  fails("reshape", 1, &x, &a, LUON_ESHAPE, "size 6 into shape (7,)");
  int64_t s61[3] = {1, 6, 1};
  a = ints(3, s61);
  luon_tensor *z = ok1("reshape", 1, &x, &a); /* the valid call after the errors */
  CHECK(z && data_of(z) == data_of(x), "reshape to (1,6,1) is a view");
  luon_tensor_release(z);
  luon_tensor_release(y);
  luon_tensor_release(x);

  /* (2,3,4) transposed by (2,0,1) is (4,2,3) with strides (1,12,4): its
   * last two axes merge, so (4,6) is a view with strides (1,4) */
  int64_t s234[3] = {2, 3, 4}, perm[3] = {2, 0, 1};
  x = iota(3, s234);
  a = ints(3, perm);
  luon_tensor *t = ok1("transpose", 1, &x, &a);
  int64_t s46[2] = {4, 6};
  a = ints(2, s46);
  y = ok1("reshape", 1, &t, &a);
  luon_tensor_info in;
  if (y) {
    luon_tensor_info_get(y, &in);
    CHECK(in.strides[0] == 1 && in.strides[1] == 4 && data_of(y) == data_of(x),
          "(4,6) view of the transpose has strides (1,4), got (%lld,%lld)", (long long)in.strides[0],
          (long long)in.strides[1]);
    double w[24];
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 6; j++) w[i * 6 + j] = 4 * j + i;
    expect("reshape of transpose", y, 2, s46, w);
  }
  luon_tensor_release(y);
  /* (4,2,3) -> (24,) cannot be a view: a contiguous copy */
  int64_t flat[1] = {-1};
  a = ints(1, flat);
  if (copy) {
    y = ok1("reshape", 1, &t, &a);
    double w[24];
    for (int j = 0; j < 24; j++) w[j] = 4 * (j % 6) + j / 6;
    int64_t s24[1] = {24};
    expect("reshape (-1) of transpose copies", y, 1, s24, w);
    CHECK(y && data_of(y) != data_of(x), "non-viewable reshape copies");
    luon_tensor_release(y);
  }
  luon_tensor_release(t);
  luon_tensor_release(x);
}

static void test_transpose(void) {
  int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
  luon_tensor *x = iota(2, s23);
  luon_tensor *y = ok1("transpose", 1, &x, NULL);
  double v[6] = {0, 3, 1, 4, 2, 5};
  expect("transpose (2,3)", y, 2, s32, v);
  CHECK(y && data_of(y) == data_of(x), "transpose is a view");
  luon_tensor_release(y);
  luon_tensor_release(x);

  int64_t s234[3] = {2, 3, 4}, p[3] = {1, -3, 2}, s324[3] = {3, 2, 4};
  x = iota(3, s234);
  luon_attrs a = ints(3, p);
  y = ok1("transpose", 1, &x, &a);
  double w[24];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 4; k++) w[(i * 2 + j) * 4 + k] = j * 12 + i * 4 + k;
  expect("transpose (1,0,2)", y, 3, s324, w);
  luon_tensor_release(y);
  int64_t rep[3] = {0, 0, 1}, two[2] = {1, 0};
  a = ints(3, rep);
  fails("transpose", 1, &x, &a, LUON_ESHAPE, "transpose: repeated axis");
  a = ints(2, two);
  fails("transpose", 1, &x, &a, LUON_ESHAPE, "transpose: axes (1,0) don't match array of dimension 3");
  int64_t oob[3] = {0, 1, 3};
  a = ints(3, oob);
  fails("transpose", 1, &x, &a, LUON_ESHAPE, "axis 3 is out of bounds");
  luon_tensor_release(x);
}

static void test_expand_squeeze(void) {
  int64_t s23[2] = {2, 3}, s231[3] = {2, 3, 1}, s123[3] = {1, 2, 3};
  double v[6] = {0, 1, 2, 3, 4, 5};
  luon_tensor *x = iota(2, s23);
  int64_t ax = -1;
  luon_attrs a = ints(1, &ax);
  luon_tensor *y = ok1("expand_dims", 1, &x, &a);
  expect("expand_dims -1", y, 3, s231, v);
  luon_tensor_release(y);
  ax = 0;
  a = ints(1, &ax);
  y = ok1("expand_dims", 1, &x, &a);
  expect("expand_dims 0", y, 3, s123, v);
  CHECK(y && data_of(y) == data_of(x), "expand_dims is a view");
  luon_tensor_release(y);
  ax = 3;
  a = ints(1, &ax);
  fails("expand_dims", 1, &x, &a, LUON_ESHAPE, "expand_dims: axis 3 is out of bounds for an array of dimension 3");
  luon_tensor_release(x);

  int64_t s1213[4] = {1, 2, 1, 3};
  x = iota(4, s1213);
  y = ok1("squeeze", 1, &x, NULL);
  expect("squeeze all", y, 2, s23, v);
  luon_tensor_release(y);
  ax = -2;
  a = ints(1, &ax);
  y = ok1("squeeze", 1, &x, &a);
  int64_t s123b[3] = {1, 2, 3};
  expect("squeeze -2", y, 3, s123b, v);
  luon_tensor_release(y);
  ax = 1;
  a = ints(1, &ax);
  fails("squeeze", 1, &x, &a, LUON_ESHAPE, "squeeze: cannot select axis 1, it has size 2, not 1 (shape (1,2,1,3))");
  luon_tensor_release(x);
}

static void test_slice(void) {
  int64_t s10[1] = {10};
  luon_tensor *x = iota(1, s10);
  const int64_t O = INT64_MIN;
  int64_t rev[3] = {O, O, -1};
  luon_attrs a = ints(3, rev);
  luon_tensor *y = ok1("slice", 1, &x, &a);
  double v[10] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  expect("[::-1]", y, 1, s10, v);
  luon_tensor_info in;
  if (y) {
    luon_tensor_info_get(y, &in);
    CHECK(in.strides[0] == -1 && in.offset == 9, "[::-1] has stride -1 and offset 9");
  }
  ((double *)data_of(x))[9] = 90;
  CHECK(y && at(y, 0) == 90, "write through the base is seen in the reversed view");
  ((double *)data_of(x))[9] = 9;
  luon_tensor_release(y);

  int64_t t1[3] = {7, 2, -2}, n3[1] = {3};
  a = ints(3, t1);
  y = ok1("slice", 1, &x, &a);
  double v1[3] = {7, 5, 3};
  expect("[7:2:-2]", y, 1, n3, v1);
  luon_tensor_release(y);
  int64_t t2[3] = {-3, O, 1};
  a = ints(3, t2);
  y = ok1("slice", 1, &x, &a);
  double v2[3] = {7, 8, 9};
  expect("[-3:]", y, 1, n3, v2);
  luon_tensor_release(y);
  int64_t t3[3] = {100, O, 1}, n0[1] = {0};
  a = ints(3, t3);
  y = ok1("slice", 1, &x, &a);
  expect("[100:]", y, 1, n0, v);
  luon_tensor_release(y);
  int64_t t4[3] = {-100, 3, 1};
  a = ints(3, t4);
  y = ok1("slice", 1, &x, &a);
  double v4[3] = {0, 1, 2};
  expect("[-100:3]", y, 1, n3, v4);
  luon_tensor_release(y);
  int64_t t5[3] = {O, -100, -1};
  a = ints(3, t5);
  y = ok1("slice", 1, &x, &a);
  expect("[:-100:-1]", y, 1, s10, v);
  luon_tensor_release(y);
  int64_t zero[3] = {0, 5, 0};
  a = ints(3, zero);
  fails("slice", 1, &x, &a, LUON_EINVAL, "slice: step cannot be zero (axis 0)");
  luon_tensor_release(x);

  /* (3,4)[1:, ::-1] -> (2,4) */
  int64_t s34[2] = {3, 4}, s24[2] = {2, 4};
  x = iota(2, s34);
  int64_t t6[6] = {1, O, 1, O, O, -1};
  a = ints(6, t6);
  y = ok1("slice", 1, &x, &a);
  double v6[8] = {7, 6, 5, 4, 11, 10, 9, 8};
  expect("[1:, ::-1]", y, 2, s24, v6);
  luon_tensor_release(y);
  /* only axis 0 given: (3,4)[::2] -> (2,4) */
  int64_t t7[3] = {O, O, 2};
  a = ints(3, t7);
  y = ok1("slice", 1, &x, &a);
  double v7[8] = {0, 1, 2, 3, 8, 9, 10, 11};
  expect("[::2]", y, 2, s24, v7);
  luon_tensor_release(y);
  int64_t t8[9] = {0, 1, 1, 0, 1, 1, 0, 1, 1};
  a = ints(9, t8);
  fails("slice", 1, &x, &a, LUON_ESHAPE, "slice: 3 axes sliced but the array has 2 dimensions");
  luon_tensor_release(x);
}

static void test_broadcast_to(void) {
  int64_t s31[2] = {3, 1}, s234[3] = {2, 3, 4};
  luon_tensor *x = iota(2, s31);
  luon_attrs a = ints(3, s234);
  luon_tensor *y = ok1("broadcast_to", 1, &x, &a);
  double v[24];
  for (int j = 0; j < 24; j++) v[j] = (j / 4) % 3;
  expect("broadcast_to (2,3,4)", y, 3, s234, v);
  if (y) {
    luon_tensor_info in;
    luon_tensor_info_get(y, &in);
    CHECK(in.strides[0] == 0 && in.strides[1] == 1 && in.strides[2] == 0, "broadcast strides (0,1,0)");
  }
  luon_tensor_release(y);
  int64_t s33[2] = {3, 3}, s23[2] = {2, 3};
  luon_tensor_release(x);
  x = iota(2, s23);
  a = ints(2, s33);
  fails("broadcast_to", 1, &x, &a, LUON_ESHAPE, "broadcast_to: cannot broadcast an array of shape (2,3) to shape (3,3)");
  luon_tensor_release(x);
}

static void release_all(luon_tensor **t, int n) {
  for (int k = 0; k < n; k++) {
    luon_tensor_release(t[k]);
    t[k] = NULL; /* a non-NULL out[k] would be taken as out= */
  }
}

static void test_split(void) {
  int64_t s10[1] = {10};
  luon_tensor *x = iota(1, s10);
  int64_t at_[3] = {0, 3, 7};
  luon_attrs a = ints(3, at_);
  luon_tensor *out[8] = {NULL};
  int32_t nout = 8;
  CHECK_OK(luon_op_call(luon_op_find("split"), 1, &x, &a, &nout, out));
  CHECK(nout == 3, "split into 3 pieces, got %d", nout);
  if (nout == 3) {
    int64_t n3[1] = {3}, n4[1] = {4};
    double v0[3] = {0, 1, 2}, v1[4] = {3, 4, 5, 6}, v2[3] = {7, 8, 9};
    expect("split piece 1", out[0], 1, n3, v0);
    expect("split piece 2", out[1], 1, n4, v1);
    expect("split piece 3", out[2], 1, n3, v2);
    ((double *)data_of(x))[8] = 80;
    CHECK(at(out[2], 1) == 80, "split pieces are views");
  }
  release_all(out, nout);
  int64_t beyond[3] = {-1, 3, 20};
  a = ints(3, beyond);
  nout = 8;
  CHECK_OK(luon_op_call(luon_op_find("split"), 1, &x, &a, &nout, out));
  if (nout == 3) {
    luon_tensor_info in;
    luon_tensor_info_get(out[2], &in);
    CHECK(in.shape[0] == 0, "split past the end gives an empty piece");
    luon_tensor_info_get(out[1], &in);
    CHECK(in.shape[0] == 7, "split [3:20] clamps to 7 elements");
  }
  release_all(out, nout);
  luon_tensor_release(x);

  int64_t s26[2] = {2, 6};
  x = iota(2, s26);
  int64_t ax1[3] = {1, 2, 5};
  a = ints(3, ax1);
  nout = 8;
  CHECK_OK(luon_op_call(luon_op_find("split"), 1, &x, &a, &nout, out));
  if (nout == 3) {
    int64_t a0[2] = {2, 2}, a1[2] = {2, 3}, a2[2] = {2, 1};
    double v0[4] = {0, 1, 6, 7}, v1[6] = {2, 3, 4, 8, 9, 10}, v2[2] = {5, 11};
    expect("split axis 1 piece 1", out[0], 2, a0, v0);
    expect("split axis 1 piece 2", out[1], 2, a1, v1);
    expect("split axis 1 piece 3", out[2], 2, a2, v2);
  }
  release_all(out, nout);
  int64_t bad[2] = {2, 1};
  a = ints(2, bad);
  nout = 8;
  CHECK(luon_op_call(luon_op_find("split"), 1, &x, &a, &nout, out) == LUON_ESHAPE &&
            strstr(luon_last_error(), "split: axis 2 is out of bounds"),
        "split on a missing axis: %s", luon_last_error());
  luon_tensor_release(x);
}

static void test_take(void) {
  int64_t s34[2] = {3, 4};
  luon_tensor *x = iota(2, s34);
  int64_t n2[1] = {2};
  double i20[2] = {2, 0};
  luon_tensor *idx = make(LUON_DTYPE_I64, 1, n2, i20);
  luon_tensor *in[2] = {x, idx};
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = LU_NI_take; /* axis 0, mode clip */
  luon_tensor *y = ok1("take", 2, in, &a);
  int64_t s24[2] = {2, 4};
  double v[8] = {8, 9, 10, 11, 0, 1, 2, 3};
  expect("take rows", y, 2, s24, v);
  luon_tensor_release(y);
  luon_tensor_release(idx);

  /* axis 1 with (2,2) indices -> (3,2,2) */
  int64_t s22[2] = {2, 2}, s322[3] = {3, 2, 2};
  double i22[4] = {0, 3, 1, 1};
  idx = make(LUON_DTYPE_I32, 2, s22, i22);
  in[1] = idx;
  a.i[LU_TAKE_AXIS] = 1;
  y = ok1("take", 2, in, &a);
  double v2[12] = {0, 3, 1, 1, 4, 7, 5, 5, 8, 11, 9, 9};
  expect("take axis 1", y, 3, s322, v2);
  luon_tensor_release(y);
  luon_tensor_release(idx);

  /* flattened, float indices truncate */
  double ifl[2] = {5.7, 11};
  idx = make(LUON_DTYPE_F32, 1, n2, ifl);
  in[1] = idx;
  a.i[LU_TAKE_AXIS] = -999;
  y = ok1("take", 2, in, &a);
  double v3[2] = {5, 11};
  expect("take flattened", y, 1, n2, v3);
  luon_tensor_release(y);
  luon_tensor_release(idx);

  /* modes along axis 0 (size 3) with indices -1 and 4 */
  double im[2] = {-1, 4};
  idx = make(LUON_DTYPE_I64, 1, n2, im);
  in[1] = idx;
  a.i[LU_TAKE_AXIS] = 0;
  a.i[LU_TAKE_MODE] = 0;
  y = ok1("take", 2, in, &a);
  double clip[8] = {0, 1, 2, 3, 8, 9, 10, 11};
  expect("take clip", y, 2, s24, clip);
  luon_tensor_release(y);
  a.i[LU_TAKE_MODE] = 1;
  y = ok1("take", 2, in, &a);
  double wrap[8] = {8, 9, 10, 11, 4, 5, 6, 7};
  expect("take wrap", y, 2, s24, wrap);
  luon_tensor_release(y);
  a.i[LU_TAKE_MODE] = 2;
  fails("take", 2, in, &a, LUON_EINVAL, "take: index 4 is out of bounds for axis 0 with size 3");
  luon_tensor_release(idx);
  double iok[2] = {-1, 1};
  idx = make(LUON_DTYPE_I64, 1, n2, iok);
  in[1] = idx;
  y = ok1("take", 2, in, &a);
  double raise[8] = {8, 9, 10, 11, 4, 5, 6, 7};
  expect("take raise with a negative index", y, 2, s24, raise);
  luon_tensor_release(y);
  a.i[LU_TAKE_AXIS] = 2;
  fails("take", 2, in, &a, LUON_ESHAPE, "take: axis 2 is out of bounds");
  luon_tensor_release(idx);

  /* from a transposed (4,3) view along axis 1 */
  luon_tensor *t = ok1("transpose", 1, &x, NULL);
  double i1[1] = {2};
  int64_t n1[1] = {1}, s41[2] = {4, 1};
  idx = make(LUON_DTYPE_I64, 1, n1, i1);
  in[0] = t;
  in[1] = idx;
  a.i[LU_TAKE_AXIS] = 1;
  a.i[LU_TAKE_MODE] = 0;
  y = ok1("take", 2, in, &a);
  double v4[4] = {8, 9, 10, 11};
  expect("take from a transposed view", y, 2, s41, v4);
  luon_tensor_release(y);
  luon_tensor_release(idx);
  luon_tensor_release(t);
  luon_tensor_release(x);
}

static void test_concat_stack(void) {
  int64_t s21[2] = {2, 1}, s22[2] = {2, 2}, s23[2] = {2, 3}, s26[2] = {2, 6};
  double a1[2] = {1, 2}, a2[4] = {3, 4, 5, 6}, a3[6] = {7, 8, 9, 10, 11, 12};
  luon_tensor *in[3] = {make(LUON_DTYPE_F32, 2, s21, a1), make(LUON_DTYPE_F64, 2, s22, a2),
                        make(LUON_DTYPE_I32, 2, s23, a3)};
  int64_t ax = 1;
  luon_attrs a = ints(1, &ax);
  luon_tensor *y = ok1("concatenate", 3, in, &a);
  double v[12] = {1, 3, 4, 7, 8, 9, 2, 5, 6, 10, 11, 12};
  expect("concatenate axis 1", y, 2, s26, v);
  luon_tensor_info info;
  if (y) {
    luon_tensor_info_get(y, &info);
    CHECK(info.dtype == LUON_DTYPE_F64, "concatenate promotes to float64, got %d", info.dtype);
  }
  luon_tensor_release(y);
  ax = 0;
  a = ints(1, &ax);
  fails("concatenate", 3, in, &a, LUON_ESHAPE, "concatenate: input 2 has shape (2,2) but input 1 has shape (2,1)");
  ax = -1;
  a = ints(1, &ax);
  y = ok1("concatenate", 3, in, &a);
  expect("concatenate axis -1 after an error", y, 2, s26, v);
  luon_tensor_release(y);
  for (int k = 0; k < 3; k++) luon_tensor_release(in[k]);

  /* stack two (2,3) along axis 1 -> (2,2,3); the second a transposed view */
  int64_t s32[2] = {3, 2}, s223[3] = {2, 2, 3};
  double b[6] = {0, 1, 2, 3, 4, 5}, bt[6] = {10, 13, 11, 14, 12, 15};
  luon_tensor *p = make(LUON_DTYPE_F32, 2, s23, b), *q0 = make(LUON_DTYPE_F32, 2, s32, bt);
  luon_tensor *q = ok1("transpose", 1, &q0, NULL);
  luon_tensor *pq[2] = {p, q};
  ax = 1;
  a = ints(1, &ax);
  y = ok1("stack", 2, pq, &a);
  double w[12] = {0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15};
  expect("stack axis 1", y, 3, s223, w);
  luon_tensor_release(y);
  luon_tensor *pp[2] = {p, q0};
  fails("stack", 2, pp, &a, LUON_ESHAPE, "stack: all input arrays must have the same shape");
  luon_tensor_release(p);
  luon_tensor_release(q);
  luon_tensor_release(q0);
}

/* Run op `name`'s backward rule on (in, out, dout); din[0..nin) (+1). */
static void backward(const char *name, int nin, luon_tensor **in, const luon_attrs *a, int nout,
                     luon_tensor **out, luon_tensor **dout, luon_tensor **din) {
  int32_t op = luon_op_find(name);
  bool need[8] = {true, true, true, true, true, true, true, true};
  static const luon_attrs none;
  lu_grad_call g = {op, a ? a : &none, nin, nout, in, out, dout, need, din};
  CHECK(lu_ops[op].grad && lu_ops[op].grad(&g) == LUON_OK, "%s backward: %s", name, luon_last_error());
}

static void test_grads(void) {
  int64_t s23[2] = {2, 3}, s3[1] = {3};
  luon_tensor *x = iota(2, s23), *dy, *din[3] = {NULL};
  /* slice x[::-1, 1:]: dx has dy reversed back into columns 1..2 */
  const int64_t O = INT64_MIN;
  int64_t t[6] = {O, O, -1, 1, O, 1}, s22[2] = {2, 2};
  luon_attrs a = ints(6, t);
  luon_tensor *y = ok1("slice", 1, &x, &a);
  double g4[4] = {1, 2, 3, 4};
  dy = make(LUON_DTYPE_F64, 2, s22, g4);
  backward("slice", 1, &x, &a, 1, &y, &dy, din);
  double w[6] = {0, 3, 4, 0, 1, 2};
  expect("slice backward", din[0], 2, s23, w);
  release_all(din, 1);
  luon_tensor_release(dy);
  luon_tensor_release(y);

  /* broadcast_to (3,) -> (2,3): dx sums over the new axis */
  luon_tensor *v = iota(1, s3);
  a = ints(2, s23);
  double g6[6] = {1, 2, 3, 10, 20, 30};
  dy = make(LUON_DTYPE_F64, 2, s23, g6);
  backward("broadcast_to", 1, &v, &a, 1, &dy, &dy, din);
  double ws[3] = {11, 22, 33};
  expect("broadcast_to backward", din[0], 1, s3, ws);
  release_all(din, 1);

  /* transpose (1,0): dx = dy transposed back */
  int64_t p[2] = {1, 0}, s32[2] = {3, 2};
  a = ints(2, p);
  luon_tensor *dyt = make(LUON_DTYPE_F64, 2, s32, g6);
  backward("transpose", 1, &x, &a, 1, &dyt, &dyt, din);
  double wt[6] = {1, 3, 20, 2, 10, 30};
  expect("transpose backward", din[0], 2, s23, wt);
  release_all(din, 1);
  luon_tensor_release(dyt);

  /* concatenate (2,1),(2,2) on axis 1 and split back */
  int64_t s21[2] = {2, 1}, ax = 1, sp[2] = {1, 1};
  luon_tensor *c2[2] = {iota(2, s21), iota(2, s22)};
  a = ints(1, &ax);
  backward("concatenate", 2, c2, &a, 1, &dy, &dy, din);
  double w0[2] = {1, 10}, w1[4] = {2, 3, 20, 30};
  expect("concatenate backward 1", din[0], 2, s21, w0);
  expect("concatenate backward 2", din[1], 2, s22, w1);
  release_all(din, 2);
  a = ints(2, sp);
  luon_tensor *pieces[2] = {NULL, NULL}, *dp[2] = {NULL, NULL};
  int32_t nout = 2;
  CHECK_OK(luon_op_call(luon_op_find("split"), 1, &x, &a, &nout, pieces));
  dp[1] = c2[1]; /* piece 1 got no gradient: zeros */
  backward("split", 1, &x, &a, 2, pieces, dp, din);
  double wsp[6] = {0, 0, 1, 0, 2, 3};
  expect("split backward", din[0], 2, s23, wsp);
  release_all(din, 1);
  release_all(pieces, 2);

  /* stack two (3,) on axis 0: dx_k = row k of dy */
  luon_tensor *st[2] = {v, v};
  ax = 0;
  a = ints(1, &ax);
  backward("stack", 2, st, &a, 1, &dy, &dy, din);
  double r0[3] = {1, 2, 3}, r1[3] = {10, 20, 30};
  expect("stack backward 1", din[0], 1, s3, r0);
  expect("stack backward 2", din[1], 1, s3, r1);
  release_all(din, 2);
  luon_tensor_release(c2[0]);
  luon_tensor_release(c2[1]);
  luon_tensor_release(dy);
  luon_tensor_release(v);
  luon_tensor_release(x);
}

int main(void) {
  int copy = have_copy();
  if (!copy) fprintf(stderr, "note: no copy op in this build; skipping the tests that copy\n");
  test_reshape(copy);
  test_transpose();
  test_expand_squeeze();
  test_slice();
  test_broadcast_to();
  test_split();
  test_take();
  if (copy) test_concat_stack();
  if (copy) test_grads();
  if (test_failures) {
    fprintf(stderr, "%d failure(s)\n", test_failures);
    return 1;
  }
  printf("test_shape: ok\n");
  return 0;
}
