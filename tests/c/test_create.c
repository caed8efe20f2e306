/* test_create.c: the creation ops (full, arange, linspace, eye) and the
 * random ops (uniform, normal, randint, permute) through the public API:
 * hand-computed values, seeded reproducibility, moments, error paths. */
#include "luon.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testops.h"

static luon_attrs attrs(int32_t dtype, int ni, const int64_t *i, int nf, const double *f) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.ni = ni;
  for (int k = 0; k < ni; k++) a.i[k] = i[k];
  for (int k = 0; k < nf; k++) a.f[k] = f[k];
  return a;
}

/* Element j (row-major) of a CPU tensor through its strides. */
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

static void expect(const char *what, const luon_tensor *t, int32_t dtype, int ndim, const int64_t *shape,
                   const double *v, double tol) {
  if (!t) {
    CHECK(0, "%s: no tensor", what);
    return;
  }
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  CHECK(in.dtype == dtype, "%s: dtype %d, expected %d", what, in.dtype, dtype);
  int same = in.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = in.shape[d] == shape[d];
  CHECK(same, "%s: shape (ndim %d, first %lld)", what, in.ndim, (long long)in.shape[0]);
  if (!same) return;
  for (int64_t j = 0; j < in.size; j++)
    if (fabs(at(t, j) - v[j]) > tol) {
      CHECK(0, "%s: element %lld is %.9g, expected %.9g", what, (long long)j, at(t, j), v[j]);
      return;
    }
}

static void test_full(void) {
  int64_t s23[2] = {2, 3};
  double f = 7.5, v[6] = {7.5, 7.5, 7.5, 7.5, 7.5, 7.5};
  luon_attrs a = attrs(0, 2, s23, 1, &f);
  luon_tensor *y = ok1("full", 0, NULL, &a);
  expect("full float32", y, LUON_DTYPE_F32, 2, s23, v, 0);
  luon_tensor_release(y);
  f = -3.9;
  a = attrs(LUON_DTYPE_I32, 2, s23, 1, &f);
  y = ok1("full", 0, NULL, &a);
  double w[6] = {-3, -3, -3, -3, -3, -3};
  expect("full int32 truncates", y, LUON_DTYPE_I32, 2, s23, w, 0);
  luon_tensor_release(y);
  a = attrs(LUON_DTYPE_F64, 0, NULL, 1, &f);
  y = ok1("full", 0, NULL, &a);
  expect("full scalar", y, LUON_DTYPE_F64, 0, NULL, &f, 0);
  luon_tensor_release(y);
  int64_t neg[2] = {2, -1};
  a = attrs(0, 2, neg, 1, &f);
  fails("full", 0, NULL, &a, LUON_ESHAPE, "full: negative dimension -1 in shape (2,-1)");

  /* into a strided out= (every other column of a (2,6)) */
  int64_t s26[2] = {2, 6};
  double zero = 0, one = 1;
  a = attrs(0, 2, s26, 1, &zero);
  luon_tensor *base = ok1("full", 0, NULL, &a);
  if (base) {
    luon_tensor *view = NULL;
    int64_t st[2] = {6, 2};
    CHECK(luon_tensor_view(base, 2, s23, st, 0, &view) == LUON_OK, "%s", luon_last_error());
    a = attrs(0, 2, s23, 1, &one);
    luon_tensor *out[1] = {view};
    int32_t nout = 1;
    CHECK(luon_op_call(luon_op_find("full"), 0, NULL, &a, &nout, out) == LUON_OK, "%s", luon_last_error());
    double b[12] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
    expect("full into a strided out=", base, LUON_DTYPE_F32, 2, s26, b, 0);
    luon_tensor_release(out[0]);
    luon_tensor_release(view);
    luon_tensor_release(base);
  }
}

static void test_arange(void) {
  double f[3] = {0, 5, 1}, v[5] = {0, 1, 2, 3, 4};
  int64_t n5[1] = {5};
  luon_attrs a = attrs(0, 0, NULL, 3, f);
  luon_tensor *y = ok1("arange", 0, NULL, &a);
  expect("arange(5)", y, LUON_DTYPE_F32, 1, n5, v, 0);
  luon_tensor_release(y);
  double g[3] = {1, 2, 0.3}, w[4] = {1, 1.3, 1.6, 1.9};
  int64_t n4[1] = {4};
  a = attrs(LUON_DTYPE_F64, 0, NULL, 3, g);
  y = ok1("arange", 0, NULL, &a);
  expect("arange(1, 2, 0.3)", y, LUON_DTYPE_F64, 1, n4, w, 1e-12);
  luon_tensor_release(y);
  double h[3] = {5, 0, -2}, u[3] = {5, 3, 1};
  int64_t n3[1] = {3};
  a = attrs(LUON_DTYPE_I64, 0, NULL, 3, h);
  y = ok1("arange", 0, NULL, &a);
  expect("arange(5, 0, -2) int64", y, LUON_DTYPE_I64, 1, n3, u, 0);
  luon_tensor_release(y);
  double e[3] = {3, 1, 1};
  int64_t n0[1] = {0};
  a = attrs(0, 0, NULL, 3, e);
  y = ok1("arange", 0, NULL, &a);
  expect("arange(3, 1) is empty", y, LUON_DTYPE_F32, 1, n0, v, 0);
  luon_tensor_release(y);
  double z[3] = {0, 5, 0};
  a = attrs(0, 0, NULL, 3, z);
  fails("arange", 0, NULL, &a, LUON_EINVAL, "arange: step cannot be zero");
  a = attrs(0, 0, NULL, 3, f);
  y = ok1("arange", 0, NULL, &a);
  expect("arange after an error", y, LUON_DTYPE_F32, 1, n5, v, 0);
  luon_tensor_release(y);
}

static void test_linspace(void) {
  double f[2] = {0, 1};
  int64_t i[2] = {5, 1}, n5[1] = {5};
  luon_attrs a = attrs(0, 2, i, 2, f);
  luon_tensor *y = ok1("linspace", 0, NULL, &a);
  double v[5] = {0, 0.25, 0.5, 0.75, 1};
  expect("linspace(0, 1, 5)", y, LUON_DTYPE_F32, 1, n5, v, 0);
  luon_tensor_release(y);
  i[1] = 0;
  a = attrs(LUON_DTYPE_F64, 2, i, 2, f);
  y = ok1("linspace", 0, NULL, &a);
  double w[5] = {0, 0.2, 0.4, 0.6, 0.8};
  expect("linspace endpoint=False", y, LUON_DTYPE_F64, 1, n5, w, 1e-15);
  luon_tensor_release(y);
  int64_t one[2] = {1, 1}, n1[1] = {1};
  double g[2] = {3, 7};
  a = attrs(0, 2, one, 2, g);
  y = ok1("linspace", 0, NULL, &a);
  expect("linspace num=1", y, LUON_DTYPE_F32, 1, n1, g, 0);
  luon_tensor_release(y);
  int64_t neg[2] = {-1, 1};
  a = attrs(0, 2, neg, 2, f);
  fails("linspace", 0, NULL, &a, LUON_EINVAL, "linspace: number of samples, -1, must be non-negative");
}

static void test_eye(void) {
  int64_t i[3] = {3, 0, 0}, s33[2] = {3, 3};
  luon_attrs a = attrs(0, 3, i, 0, NULL);
  luon_tensor *y = ok1("eye", 0, NULL, &a);
  double v[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  expect("eye(3)", y, LUON_DTYPE_F32, 2, s33, v, 0);
  luon_tensor_release(y);
  int64_t j[3] = {2, 3, 1}, s23[2] = {2, 3};
  a = attrs(LUON_DTYPE_I64, 3, j, 0, NULL);
  y = ok1("eye", 0, NULL, &a);
  double w[6] = {0, 1, 0, 0, 0, 1};
  expect("eye(2, 3, k=1)", y, LUON_DTYPE_I64, 2, s23, w, 0);
  luon_tensor_release(y);
  int64_t k[3] = {3, 2, -1}, s32[2] = {3, 2};
  a = attrs(0, 3, k, 0, NULL);
  y = ok1("eye", 0, NULL, &a);
  double u[6] = {0, 0, 1, 0, 0, 1};
  expect("eye(3, 2, k=-1)", y, LUON_DTYPE_F32, 2, s32, u, 0);
  luon_tensor_release(y);
  int64_t bad[3] = {-2, 0, 0};
  a = attrs(0, 3, bad, 0, NULL);
  fails("eye", 0, NULL, &a, LUON_EINVAL, "eye: N = -2 must be non-negative");
}

/* n values of a random op as doubles (malloc'd). */
static double *draw(const char *name, int32_t dtype, int64_t n, double f0, double f1) {
  double f[2] = {f0, f1};
  luon_attrs a = attrs(dtype, 1, &n, 2, f);
  luon_tensor *y = ok1(name, 0, NULL, &a);
  double *v = calloc((size_t)n, sizeof(double));
  for (int64_t j = 0; y && j < n; j++) v[j] = at(y, j);
  luon_tensor_release(y);
  return v;
}

static void test_random(void) {
  const int64_t n = 100000;
  luon_random_seed(42);
  double *u1 = draw("random_uniform", 0, n, 2, 5);
  luon_random_seed(42);
  luon_set_num_threads(1);
  double *u2 = draw("random_uniform", 0, n, 2, 5);
  luon_set_num_threads(4);
  double *u3 = draw("random_uniform", 0, n, 2, 5);
  CHECK(memcmp(u1, u2, sizeof(double) * (size_t)n) == 0, "same seed, other thread count: same uniforms");
  CHECK(memcmp(u1, u3, sizeof(double) * (size_t)n) != 0, "the next draw differs");
  double lo = 1e9, hi = -1e9, sum = 0;
  for (int64_t j = 0; j < n; j++) {
    lo = fmin(lo, u1[j]);
    hi = fmax(hi, u1[j]);
    sum += u1[j];
  }
  CHECK(lo >= 2 && hi < 5 && lo < 2.01 && hi > 4.99, "uniform on [2, 5): min %g max %g", lo, hi);
  CHECK(fabs(sum / n - 3.5) < 0.02, "uniform mean %g", sum / n);
  free(u1);
  free(u2);
  free(u3);

  for (int dt = LUON_DTYPE_F32; dt <= LUON_DTYPE_F64; dt++) {
    double *z = draw("random_normal", dt, n, 1, 2), m = 0, s = 0;
    for (int64_t j = 0; j < n; j++) m += z[j];
    m /= n;
    for (int64_t j = 0; j < n; j++) s += (z[j] - m) * (z[j] - m);
    s = sqrt(s / n);
    CHECK(fabs(m - 1) < 0.03 && fabs(s - 2) < 0.03, "normal(1, 2) %s: mean %g std %g",
          luon_dtype_name(dt), m, s);
    free(z);
  }

  luon_random_seed(7);
  double *r = draw("random_randint", 0, 10000, -3, 4);
  int seen[7] = {0}, inrange = 1;
  for (int j = 0; j < 10000; j++) {
    if (r[j] < -3 || r[j] >= 4 || r[j] != floor(r[j])) inrange = 0;
    else seen[(int)r[j] + 3]++;
  }
  CHECK(inrange, "randint in [-3, 4)");
  for (int k = 0; k < 7; k++) CHECK(seen[k] > 1200, "randint value %d drawn %d times of 10000", k - 3, seen[k]);
  luon_random_seed(7);
  double *r2 = draw("random_randint", 0, 10000, -3, 4);
  CHECK(memcmp(r, r2, sizeof(double) * 10000) == 0, "randint reproducible after seeding");
  free(r);
  free(r2);
  int64_t n3 = 3;
  double f[2] = {5, 5};
  luon_attrs a = attrs(0, 1, &n3, 2, f);
  luon_tensor *y = op1("random_randint", 0, NULL, &a, NULL);
  CHECK(y == NULL && strstr(luon_last_error(), "random_randint: high 5 must be greater than low 5"),
        "randint high <= low: %s", luon_last_error());
  luon_tensor_release(y);
  double g[2] = {0, 300};
  a = attrs(LUON_DTYPE_U8, 1, &n3, 2, g);
  fails("random_randint", 0, NULL, &a, LUON_EINVAL, "[0, 300) is out of range for uint8");
  a = attrs(LUON_DTYPE_I32, 1, &n3, 2, g);
  y = ok1("random_randint", 0, NULL, &a);
  luon_tensor_info info;
  if (y) {
    luon_tensor_info_get(y, &info);
    CHECK(info.dtype == LUON_DTYPE_I32, "randint int32");
  }
  luon_tensor_release(y);
  a = attrs(LUON_DTYPE_I32, 1, &n3, 2, g);
  fails("random_uniform", 0, NULL, &a, LUON_EDTYPE, "random_uniform: dtype int32 is not supported");
  g[1] = -1;
  a = attrs(0, 1, &n3, 2, g);
  fails("random_normal", 0, NULL, &a, LUON_EINVAL, "random_normal: scale -1 must be non-negative");
}

static void test_permute(void) {
  /* rows r = (r, 10 + r) of a (50, 2): each output row is an input row, all present */
  int64_t s[2] = {50, 2};
  luon_tensor *x = NULL;
  luon_tensor_empty(LUON_DTYPE_F64, 2, s, LUON_CPU, 0, &x);
  luon_tensor_info in;
  luon_tensor_info_get(x, &in);
  for (int r = 0; r < 50; r++) {
    ((double *)in.data)[2 * r] = r;
    ((double *)in.data)[2 * r + 1] = 100 + r;
  }
  luon_random_seed(3);
  luon_tensor *y = ok1("random_permute", 1, &x, NULL);
  luon_random_seed(3);
  luon_tensor *z = ok1("random_permute", 1, &x, NULL);
  if (y && z) {
    int seen[50] = {0}, rows_ok = 1, same = 1, moved = 0;
    for (int r = 0; r < 50; r++) {
      int v = (int)at(y, 2 * r);
      if (v < 0 || v >= 50 || at(y, 2 * r + 1) != 100 + v) rows_ok = 0;
      else seen[v]++;
      if (at(z, 2 * r) != v) same = 0;
      if (v != r) moved++;
    }
    for (int r = 0; r < 50; r++)
      if (seen[r] != 1) rows_ok = 0;
    CHECK(rows_ok, "random_permute gives each row once, intact");
    CHECK(same, "random_permute reproducible after seeding");
    CHECK(moved > 10, "random_permute moved only %d rows", moved);
  }
  luon_tensor_release(y);
  luon_tensor_release(z);
  luon_tensor_release(x);
  luon_tensor *sc = NULL;
  luon_tensor_empty(LUON_DTYPE_F32, 0, NULL, LUON_CPU, 0, &sc);
  fails("random_permute", 1, &sc, NULL, LUON_ESHAPE, "random_permute: cannot permute a 0-dimensional array");
  luon_tensor_release(sc);
}

int main(void) {
  test_full();
  test_arange();
  test_linspace();
  test_eye();
  test_random();
  test_permute();
  if (test_failures) {
    fprintf(stderr, "%d failure(s)\n", test_failures);
    return 1;
  }
  printf("test_create: ok\n");
  return 0;
}
