/* test_reduce.c: sum, mean, prod, max, min, argmax, argmin through the
 * public API against hand-computed values, error paths, and the fast paths
 * against the general one (LUON_REF_KERNELS=1) on larger random arrays. */
#include "luon.h"
#include "testutil.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A new cpu(0) tensor of dtype from doubles. */
static luon_tensor *make(int32_t dt, int ndim, const int64_t *shape, const double *v) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  char *buf = malloc((size_t)(n * 8 + 8));
  for (int64_t j = 0; j < n; j++) {
    switch (dt) {
    case LUON_DTYPE_F32: ((float *)buf)[j] = (float)v[j]; break;
    case LUON_DTYPE_F64: ((double *)buf)[j] = v[j]; break;
    case LUON_DTYPE_I32: ((int32_t *)buf)[j] = (int32_t)v[j]; break;
    case LUON_DTYPE_I64: ((int64_t *)buf)[j] = (int64_t)v[j]; break;
    case LUON_DTYPE_U8: ((uint8_t *)buf)[j] = (uint8_t)v[j]; break;
    case LUON_DTYPE_BOOL: ((uint8_t *)buf)[j] = v[j] != 0; break;
    }
  }
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(buf, dt, ndim, shape, LUON_CPU, 0, &t));
  free(buf);
  return t;
}


static luon_attrs attrs(int keep, int naxes, const int64_t *axes) {
  int keepdims = test_slot("REDUCE_KEEPDIMS"), from = test_slot("REDUCE_AXES");
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = naxes < 0 ? 0 : from + naxes; /* naxes < 0: no attributes at all */
  a.i[keepdims] = keep;
  for (int k = 0; k < naxes; k++) a.i[from + k] = axes[k];
  return a;
}

/* Run op on x; NULL (and the status in *st) on failure. */
static luon_tensor *run(const char *op, luon_tensor *x, const luon_attrs *a, luon_status *st) {
  int32_t id = luon_op_find(op), nout = 1;
  luon_tensor *out[1] = {NULL};
  luon_status s = luon_op_call(id, 1, &x, a, &nout, out);
  if (st) *st = s;
  return s == LUON_OK ? out[0] : NULL;
}

/* Check shape, dtype and values of y (released). */
static void expect(const char *what, luon_tensor *y, int32_t dt, int ndim, const int64_t *shape,
                   const double *want, double tol) {
  CHECK(y != NULL, "%s: failed: %s", what, luon_last_error());
  if (!y) return;
  luon_tensor_info in;
  luon_tensor_info_get(y, &in);
  CHECK(in.dtype == dt, "%s: dtype %d, want %d", what, in.dtype, dt);
  CHECK(in.ndim == ndim, "%s: ndim %d, want %d", what, in.ndim, ndim);
  for (int d = 0; d < ndim && d < in.ndim; d++)
    CHECK(in.shape[d] == shape[d], "%s: shape[%d] %lld, want %lld", what, d, (long long)in.shape[d],
          (long long)shape[d]);
  double *got = malloc(sizeof(double) * (size_t)(in.size + 1));
  CHECK_OK(luon_tensor_to_host(y, got, LUON_DTYPE_F64, sizeof(double) * (size_t)(in.size + 1)));
  for (int64_t j = 0; j < in.size; j++) {
    bool ok = isnan(want[j]) ? isnan(got[j]) : got[j] == want[j] || fabs(got[j] - want[j]) <= tol * (1 + fabs(want[j]));
    CHECK(ok, "%s: [%lld] = %.9g, want %.9g", what, (long long)j, got[j], want[j]);
  }
  free(got);
  luon_tensor_release(y);
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})

static void test_values(void) {
  /* x = [[1,2,3],[4,5,6]] */
  luon_tensor *x = make(LUON_DTYPE_F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_attrs a;
  a = attrs(0, -1, NULL);
  expect("sum all", run("sum", x, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(21), 0);
  expect("sum NULL attrs", run("sum", x, NULL, NULL), LUON_DTYPE_F32, 0, NULL, V(21), 0);
  a = attrs(0, 1, SH(0));
  expect("sum axis 0", run("sum", x, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(5, 7, 9), 0);
  a = attrs(0, 1, SH(1));
  expect("sum axis 1", run("sum", x, &a, NULL), LUON_DTYPE_F32, 1, SH(2), V(6, 15), 0);
  a = attrs(0, 2, SH(0, 1));
  expect("sum axes (0,1)", run("sum", x, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(21), 0);
  a = attrs(1, 1, SH(1));
  expect("sum keepdims", run("sum", x, &a, NULL), LUON_DTYPE_F32, 2, SH(2, 1), V(6, 15), 0);
  a = attrs(1, 0, NULL);
  expect("sum all keepdims", run("sum", x, &a, NULL), LUON_DTYPE_F32, 2, SH(1, 1), V(21), 0);
  a = attrs(0, 1, SH(-1));
  expect("sum axis -1", run("sum", x, &a, NULL), LUON_DTYPE_F32, 1, SH(2), V(6, 15), 0);
  a = attrs(0, 1, SH(-2));
  expect("mean axis -2", run("mean", x, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(2.5, 3.5, 4.5), 0);
  a = attrs(0, 0, NULL);
  expect("mean all", run("mean", x, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(3.5), 0);
  a = attrs(0, 1, SH(1));
  expect("max axis 1", run("max", x, &a, NULL), LUON_DTYPE_F32, 1, SH(2), V(3, 6), 0);
  a = attrs(0, 1, SH(0));
  expect("min axis 0", run("min", x, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(1, 2, 3), 0);
  a = attrs(0, 0, NULL);
  expect("prod all", run("prod", x, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(720), 0);
  a = attrs(0, 1, SH(0));
  expect("prod axis 0", run("prod", x, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(4, 10, 18), 0);
  a = attrs(0, 0, NULL);
  expect("argmax flat", run("argmax", x, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(5), 0);
  expect("argmin flat", run("argmin", x, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(0), 0);
  a = attrs(0, 1, SH(0));
  expect("argmax axis 0", run("argmax", x, &a, NULL), LUON_DTYPE_I64, 1, SH(3), V(1, 1, 1), 0);
  a = attrs(1, 1, SH(-1));
  expect("argmin axis -1 keepdims", run("argmin", x, &a, NULL), LUON_DTYPE_I64, 2, SH(2, 1), V(0, 0), 0);
  a = attrs(1, 0, NULL);
  expect("argmax flat keepdims", run("argmax", x, &a, NULL), LUON_DTYPE_I64, 2, SH(1, 1), V(5), 0);

  /* non-contiguous: the transpose (3,2) = [[1,4],[2,5],[3,6]] */
  luon_tensor *xt = NULL;
  CHECK_OK(luon_tensor_view(x, 2, SH(3, 2), SH(1, 3), 0, &xt));
  a = attrs(0, 1, SH(0));
  expect("T sum axis 0", run("sum", xt, &a, NULL), LUON_DTYPE_F32, 1, SH(2), V(6, 15), 0);
  a = attrs(0, 1, SH(1));
  expect("T sum axis 1", run("sum", xt, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(5, 7, 9), 0);
  expect("T argmax axis 1", run("argmax", xt, &a, NULL), LUON_DTYPE_I64, 1, SH(3), V(1, 1, 1), 0);
  a = attrs(0, 0, NULL);
  expect("T argmax flat", run("argmax", xt, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(5), 0);
  expect("T argmin flat", run("argmin", xt, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(0), 0);
  luon_tensor_release(xt);
  /* stride 0: row [1,2,3] seen 4 times; a strided column [2,5] */
  luon_tensor *xb = NULL, *xc = NULL;
  CHECK_OK(luon_tensor_view(x, 2, SH(4, 3), SH(0, 1), 0, &xb));
  a = attrs(0, 1, SH(0));
  expect("bcast sum axis 0", run("sum", xb, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(4, 8, 12), 0);
  a = attrs(0, 0, NULL);
  expect("bcast sum all", run("sum", xb, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(24), 0);
  expect("bcast argmax flat", run("argmax", xb, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(2), 0);
  CHECK_OK(luon_tensor_view(x, 1, SH(2), SH(3), 1, &xc));
  expect("column max", run("max", xc, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(5), 0);
  luon_tensor_release(xb);
  luon_tensor_release(xc);
  luon_tensor_release(x);

  /* 3-d, middle axis: (2,3,2) = 0..11 */
  luon_tensor *x3 = make(LUON_DTYPE_F64, 3, SH(2, 3, 2), V(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
  a = attrs(0, 1, SH(1));
  expect("3d sum axis 1", run("sum", x3, &a, NULL), LUON_DTYPE_F64, 2, SH(2, 2), V(6, 9, 24, 27), 0);
  expect("3d argmax axis 1", run("argmax", x3, &a, NULL), LUON_DTYPE_I64, 2, SH(2, 2), V(2, 2, 2, 2), 0);
  a = attrs(1, 2, SH(0, 2));
  expect("3d sum axes (0,2) keepdims", run("sum", x3, &a, NULL), LUON_DTYPE_F64, 3, SH(1, 3, 1),
         V(14, 22, 30), 0);
  a = attrs(0, 2, SH(2, 0));
  expect("3d max axes (2,0)", run("max", x3, &a, NULL), LUON_DTYPE_F64, 1, SH(3), V(7, 9, 11), 0);
  luon_tensor_release(x3);

  /* ties and NaN (like NumPy) */
  luon_tensor *t = make(LUON_DTYPE_F32, 1, SH(4), V(3, 1, 3, 2));
  a = attrs(0, 0, NULL);
  expect("argmax tie", run("argmax", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(0), 0);
  luon_tensor_release(t);
  t = make(LUON_DTYPE_F64, 1, SH(4), V(1, NAN, 3, NAN));
  expect("max NaN", run("max", t, &a, NULL), LUON_DTYPE_F64, 0, NULL, V(NAN), 0);
  expect("min NaN", run("min", t, &a, NULL), LUON_DTYPE_F64, 0, NULL, V(NAN), 0);
  expect("sum NaN", run("sum", t, &a, NULL), LUON_DTYPE_F64, 0, NULL, V(NAN), 0);
  expect("argmax NaN", run("argmax", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(1), 0);
  expect("argmin NaN", run("argmin", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(1), 0);
  luon_tensor_release(t);
  t = make(LUON_DTYPE_F32, 1, SH(3), V(-INFINITY, -INFINITY, -INFINITY));
  expect("argmax all -inf", run("argmax", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(0), 0);
  expect("max all -inf", run("max", t, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(-INFINITY), 0);
  luon_tensor_release(t);

  /* dtypes: integer sums are int64, integer means float32, max keeps dtype */
  t = make(LUON_DTYPE_I32, 2, SH(2, 2), V(-7, 2, 2000000000, 2000000000));
  a = attrs(0, 1, SH(1));
  expect("i32 sum", run("sum", t, &a, NULL), LUON_DTYPE_I64, 1, SH(2), V(-5, 4000000000.0), 0);
  expect("i32 mean", run("mean", t, &a, NULL), LUON_DTYPE_F32, 1, SH(2), V(-2.5, 2e9), 1e-7);
  expect("i32 max", run("max", t, &a, NULL), LUON_DTYPE_I32, 1, SH(2), V(2, 2000000000), 0);
  expect("i32 prod", run("prod", t, &a, NULL), LUON_DTYPE_I64, 1, SH(2), V(-14, 4e18), 0);
  expect("i32 argmin", run("argmin", t, &a, NULL), LUON_DTYPE_I64, 1, SH(2), V(0, 0), 0);
  luon_tensor_release(t);
  t = make(LUON_DTYPE_BOOL, 1, SH(5), V(1, 0, 1, 1, 0));
  a = attrs(0, 0, NULL);
  expect("bool sum", run("sum", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(3), 0);
  expect("bool max", run("max", t, &a, NULL), LUON_DTYPE_BOOL, 0, NULL, V(1), 0);
  expect("bool min", run("min", t, &a, NULL), LUON_DTYPE_BOOL, 0, NULL, V(0), 0);
  expect("bool argmin", run("argmin", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(1), 0);
  luon_tensor_release(t);
  t = make(LUON_DTYPE_U8, 1, SH(3), V(200, 100, 250));
  expect("u8 sum", run("sum", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(550), 0);
  expect("u8 max", run("max", t, &a, NULL), LUON_DTYPE_U8, 0, NULL, V(250), 0);
  luon_tensor_release(t);
  t = make(LUON_DTYPE_I64, 1, SH(2), V(4611686018427387904.0, 3));
  int64_t big = 0;
  luon_tensor *y = run("sum", t, &a, NULL);
  CHECK(y != NULL, "i64 sum: %s", luon_last_error());
  if (y) {
    CHECK_OK(luon_tensor_to_host(y, &big, LUON_DTYPE_I64, 8));
    CHECK(big == 4611686018427387907LL, "i64 sum exact: %lld", (long long)big);
    luon_tensor_release(y);
  }
  luon_tensor_release(t);
  /* mean with a dtype */
  t = make(LUON_DTYPE_I32, 1, SH(4), V(1, 2, 3, 5));
  a = attrs(0, 0, NULL);
  a.dtype = LUON_DTYPE_F64;
  expect("mean dtype f64", run("mean", t, &a, NULL), LUON_DTYPE_F64, 0, NULL, V(2.75), 0);
  luon_tensor_release(t);

  /* 0-d input */
  t = make(LUON_DTYPE_F32, 0, NULL, V(4));
  a = attrs(0, 0, NULL);
  expect("0-d sum", run("sum", t, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(4), 0);
  expect("0-d argmax", run("argmax", t, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(0), 0);
  luon_tensor_release(t);
}

static void test_empty(void) {
  luon_tensor *e = make(LUON_DTYPE_F32, 2, SH(0, 3), NULL);
  luon_attrs a = attrs(0, 1, SH(0));
  luon_status st;
  expect("empty sum axis 0", run("sum", e, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(0, 0, 0), 0);
  expect("empty prod axis 0", run("prod", e, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(1, 1, 1), 0);
  expect("empty mean axis 0", run("mean", e, &a, NULL), LUON_DTYPE_F32, 1, SH(3), V(NAN, NAN, NAN), 0);
  luon_tensor *y = run("max", e, &a, &st);
  CHECK(!y && st == LUON_ESHAPE, "empty max: status %d", st);
  CHECK(strstr(luon_last_error(), "zero-size array to reduction operation max which has no identity"),
        "message: %s", luon_last_error());
  CHECK(strstr(luon_last_error(), "axis 0"), "names the axis asked for: %s", luon_last_error());
  luon_attrs all = attrs(0, -1, NULL); /* over the whole array: no axis to name */
  y = run("max", e, &all, &st);
  CHECK(!y && st == LUON_ESHAPE && !strstr(luon_last_error(), "axis"), "whole-array empty max: %s",
        luon_last_error());
  y = run("argmin", e, &a, &st);
  CHECK(!y && st == LUON_ESHAPE, "empty argmin: status %d", st);
  CHECK(strstr(luon_last_error(), "argmin"), "message: %s", luon_last_error());
  a = attrs(0, 1, SH(1)); /* reduces the size-3 axis: a (0,) result, fine */
  expect("empty max axis 1", run("max", e, &a, NULL), LUON_DTYPE_F32, 1, SH(0), NULL, 0);
  expect("empty argmax axis 1", run("argmax", e, &a, NULL), LUON_DTYPE_I64, 1, SH(0), NULL, 0);
  a = attrs(0, 0, NULL);
  expect("empty sum all", run("sum", e, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(0), 0);
  luon_tensor_release(e);
  e = make(LUON_DTYPE_I32, 1, SH(0), NULL);
  expect("empty i32 sum", run("sum", e, &a, NULL), LUON_DTYPE_I64, 0, NULL, V(0), 0);
  expect("empty i32 mean", run("mean", e, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(NAN), 0);
  luon_tensor_release(e);
}

static void test_errors(void) {
  luon_tensor *x = make(LUON_DTYPE_F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_status st;
  luon_attrs a = attrs(0, 2, SH(1, -1));
  CHECK(!run("sum", x, &a, &st) && st == LUON_EINVAL, "duplicate axes: status %d", st);
  CHECK(strstr(luon_last_error(), "sum:") && strstr(luon_last_error(), "twice"), "message: %s",
        luon_last_error());
  a = attrs(0, 1, SH(2));
  CHECK(!run("mean", x, &a, &st) && st == LUON_ESHAPE, "axis 2: status %d", st);
  CHECK(strstr(luon_last_error(), "mean: axis 2 is out of bounds for an array of dimension 2"),
        "message: %s", luon_last_error());
  a = attrs(0, 1, SH(-3));
  CHECK(!run("argmax", x, &a, &st) && st == LUON_ESHAPE, "axis -3: status %d", st);
  CHECK(strstr(luon_last_error(), "argmax:"), "message: %s", luon_last_error());
  a = attrs(0, 2, SH(0, 1));
  CHECK(!run("argmax", x, &a, &st) && st == LUON_EINVAL, "argmax 2 axes: status %d", st);
  a = attrs(0, 1, SH(0));
  a.dtype = LUON_DTYPE_F64;
  CHECK(!run("max", x, &a, &st) && st == LUON_EDTYPE, "max dtype: status %d", st);
  a = attrs(0, 1, SH(1));
  expect("valid after errors", run("sum", x, &a, NULL), LUON_DTYPE_F32, 1, SH(2), V(6, 15), 0);
  luon_tensor_release(x);
}

/* float32 sums are exact on a million ones (and odd sizes). */
static void test_precision(void) {
  int64_t n = 1000003;
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t j = 0; j < n; j++) v[j] = 1.0f;
  luon_tensor *x = NULL;
  CHECK_OK(luon_tensor_from_host(v, LUON_DTYPE_F32, 1, &n, LUON_CPU, 0, &x));
  luon_attrs a = attrs(0, 0, NULL);
  expect("1e6 ones", run("sum", x, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(1000003), 0);
  expect("1e6 ones mean", run("mean", x, &a, NULL), LUON_DTYPE_F32, 0, NULL, V(1), 0);
  luon_tensor *x2 = NULL;
  CHECK_OK(luon_tensor_view(x, 2, SH(1000, 1000), SH(1000, 1), 0, &x2));
  a = attrs(0, 1, SH(0));
  luon_tensor *y = run("sum", x2, &a, NULL);
  float col[1000];
  if (y) {
    CHECK_OK(luon_tensor_to_host(y, col, LUON_DTYPE_F32, sizeof col));
    CHECK(col[0] == 1000 && col[999] == 1000, "column sums %g %g", col[0], col[999]);
    luon_tensor_release(y);
  }
  luon_tensor_release(x2);
  luon_tensor_release(x);
  free(v);
}

/* A result with LUON_REF_KERNELS=1 (the general path alone) as doubles. */
static double *ref_values(const char *op, luon_tensor *x, const luon_attrs *a, int64_t *n) {
  lu_set_ref_kernels(1);
  luon_tensor *y = run(op, x, a, NULL);
  lu_set_ref_kernels(0);
  CHECK(y != NULL, "ref %s: %s", op, luon_last_error());
  if (!y) return NULL;
  luon_tensor_info in;
  luon_tensor_info_get(y, &in);
  double *v = malloc(sizeof(double) * (size_t)(in.size + 1));
  CHECK_OK(luon_tensor_to_host(y, v, LUON_DTYPE_F64, sizeof(double) * (size_t)(in.size + 1)));
  *n = in.size;
  luon_tensor_release(y);
  return v;
}

/* Fast paths (columns, rows, chunks, threads) against the general path. */
static void test_fast_vs_ref(void) {
  const char *ops[] = {"sum", "mean", "prod", "max", "min", "argmax", "argmin"};
  int32_t dts[] = {LUON_DTYPE_F32, LUON_DTYPE_F64, LUON_DTYPE_I32, LUON_DTYPE_I64};
  int64_t shape[3] = {37, 300, 61}, n = 37 * 300 * 61;
  double *v = malloc(sizeof(double) * (size_t)n);
  srand(7);
  for (int di = 0; di < 4; di++) {
    for (int64_t j = 0; j < n; j++)
      v[j] = di < 2 ? (double)rand() / RAND_MAX * 2 - 1 + 1e-3 : (double)(rand() % 7 - 3);
    if (di < 2) v[12345] = 5, v[54321] = 5; /* a tie for arg ops */
    luon_tensor *x = make(dts[di], 3, shape, v), *xt = NULL;
    /* and a permuted view: (61, 37, 300) */
    CHECK_OK(luon_tensor_view(x, 3, SH(61, 37, 300), SH(1, 300 * 61, 61), 0, &xt));
    luon_tensor *ins[2] = {x, xt};
    int64_t axsets[][3] = {{-1}, {0}, {1}, {2}, {0, 2}, {0, 1}, {1, 2}};
    int naxs[] = {0, 1, 1, 1, 2, 2, 2};
    for (int w = 0; w < 2; w++)
      for (int o = 0; o < 7; o++)
        for (int s = 0; s < 7; s++) {
          bool arg = o >= 5;
          if (arg && naxs[s] > 1) continue;
          if (!strcmp(ops[o], "prod") && di < 2) continue; /* overflows to inf/0 anyway */
          luon_attrs a = attrs(s % 2, naxs[s], axsets[s]);
          int64_t nr = 0;
          double *want = ref_values(ops[o], ins[w], &a, &nr);
          luon_tensor *y = run(ops[o], ins[w], &a, NULL);
          CHECK(y != NULL, "%s: %s", ops[o], luon_last_error());
          if (!y || !want) { free(want); luon_tensor_release(y); continue; }
          double *got = malloc(sizeof(double) * (size_t)(nr + 1));
          CHECK_OK(luon_tensor_to_host(y, got, LUON_DTYPE_F64, sizeof(double) * (size_t)(nr + 1)));
          double tol = di == 0 ? 1e-5 : 1e-12;
          int bad = 0;
          for (int64_t j = 0; j < nr && bad < 3; j++)
            if (!(fabs(got[j] - want[j]) <= tol * (1 + fabs(want[j])))) {
              bad++;
              CHECK(0, "%s dtype %d view %d axes set %d: [%lld] %.9g vs ref %.9g", ops[o], dts[di],
                    w, s, (long long)j, got[j], want[j]);
            }
          free(got);
          free(want);
          luon_tensor_release(y);
        }
    luon_tensor_release(xt);
    luon_tensor_release(x);
  }
  free(v);
}

/* A non-contiguous out= of the result's dtype is written through its strides. */
static void test_out_strided(void) {
  luon_tensor *x = make(LUON_DTYPE_F32, 3, SH(2, 2, 3), V(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  luon_tensor *base = make(LUON_DTYPE_F32, 2, SH(2, 2), V(0, 0, 0, 0)), *ot = NULL;
  CHECK_OK(luon_tensor_view(base, 2, SH(2, 2), SH(1, 2), 0, &ot));
  luon_attrs a = attrs(0, 1, SH(2));
  luon_tensor *out[1] = {ot};
  int32_t nout = 1;
  CHECK_OK(luon_op_call(luon_op_find("sum"), 1, &x, &a, &nout, out));
  float got[4];
  CHECK_OK(luon_tensor_to_host(base, got, LUON_DTYPE_F32, sizeof got));
  /* sums [[6,15],[24,33]] stored transposed in base */
  CHECK(got[0] == 6 && got[1] == 24 && got[2] == 15 && got[3] == 33, "out= strided: %g %g %g %g",
        got[0], got[1], got[2], got[3]);
  luon_tensor_release(out[0]);
  luon_tensor_release(ot);
  luon_tensor_release(base);
  luon_tensor_release(x);
}

int main(void) {
  test_values();
  test_empty();
  test_errors();
  test_precision();
  test_fast_vs_ref();
  test_out_strided();
  luon_set_num_threads(1);
  test_fast_vs_ref();
  return TEST_RESULT;
}
