/* test_matmul.c: matmul through the public API: hand-computed products,
 * NumPy's 1-d promotion and batch broadcasting, transposed and strided
 * views, dtypes, error paths, and BLAS against the naive kernel
 * (LUON_REF_KERNELS=1). */
#include "luon.h"
#include "testutil.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})

static luon_tensor *make(int32_t dt, int ndim, const int64_t *shape, const double *v) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  char *buf = malloc((size_t)(n * 8 + 8));
  for (int64_t j = 0; j < n; j++) {
    double x = v ? v[j] : 0; /* NULL: zeros */
    switch (dt) {
    case LUON_DTYPE_F32: ((float *)buf)[j] = (float)x; break;
    case LUON_DTYPE_F64: ((double *)buf)[j] = x; break;
    case LUON_DTYPE_I32: ((int32_t *)buf)[j] = (int32_t)x; break;
    case LUON_DTYPE_I64: ((int64_t *)buf)[j] = (int64_t)x; break;
    case LUON_DTYPE_U8: ((uint8_t *)buf)[j] = (uint8_t)x; break;
    case LUON_DTYPE_BOOL: ((uint8_t *)buf)[j] = x != 0; break;
    }
  }
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(buf, dt, ndim, shape, LUON_CPU, 0, &t));
  free(buf);
  return t;
}

static luon_tensor *mm(luon_tensor *a, luon_tensor *b, luon_status *st) {
  luon_tensor *in[2] = {a, b}, *out[1] = {NULL};
  int32_t nout = 1;
  luon_status s = luon_op_call(luon_op_find("matmul"), 2, in, NULL, &nout, out);
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
  for (int64_t j = 0; j < in.size; j++)
    CHECK(fabs(got[j] - want[j]) <= tol * (1 + fabs(want[j])), "%s: [%lld] = %.9g, want %.9g", what,
          (long long)j, got[j], want[j]);
  free(got);
  luon_tensor_release(y);
}

static void test_values(void) {
  luon_tensor *a = make(LUON_DTYPE_F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_tensor *b = make(LUON_DTYPE_F32, 2, SH(3, 2), V(7, 8, 9, 10, 11, 12));
  luon_tensor *v = make(LUON_DTYPE_F32, 1, SH(3), V(1, 2, 3));
  luon_tensor *w = make(LUON_DTYPE_F32, 1, SH(3), V(4, 5, 6));
  expect("2d", mm(a, b, NULL), LUON_DTYPE_F32, 2, SH(2, 2), V(58, 64, 139, 154), 0);
  expect("1d x 2d", mm(v, b, NULL), LUON_DTYPE_F32, 1, SH(2), V(58, 64), 0);
  expect("2d x 1d", mm(a, v, NULL), LUON_DTYPE_F32, 1, SH(2), V(14, 32), 0);
  expect("1d x 1d", mm(v, w, NULL), LUON_DTYPE_F32, 0, NULL, V(32), 0);
  /* transposed views: a^T is (3,2) with strides (1,3), b^T (2,3) with strides (1,2) */
  luon_tensor *at = NULL, *bt = NULL;
  CHECK_OK(luon_tensor_view(a, 2, SH(3, 2), SH(1, 3), 0, &at));
  CHECK_OK(luon_tensor_view(b, 2, SH(2, 3), SH(1, 2), 0, &bt));
  /* a^T @ a^T^T = a^T @ a: (3,2)@(2,3) */
  expect("at @ a", mm(at, a, NULL), LUON_DTYPE_F32, 2, SH(3, 3), V(17, 22, 27, 22, 29, 36, 27, 36, 45), 0);
  /* b^T @ a^T: (2,3)@(3,2) = (a b)^T */
  expect("bt @ at", mm(bt, at, NULL), LUON_DTYPE_F32, 2, SH(2, 2), V(58, 139, 64, 154), 0);
  expect("bt @ v", mm(bt, v, NULL), LUON_DTYPE_F32, 1, SH(2), V(58, 64), 0);
  /* a strided column view: column 1 of a as a (2,) vector, row 0 of b^T */
  luon_tensor *col = NULL;
  CHECK_OK(luon_tensor_view(a, 2, SH(2, 2), SH(3, 2), 0, &col)); /* [[1,3],[4,6]] */
  expect("strided @ 2d", mm(col, col, NULL), LUON_DTYPE_F32, 2, SH(2, 2), V(13, 21, 28, 48), 0);
  luon_tensor_release(col);
  luon_tensor_release(at);
  luon_tensor_release(bt);

  /* float64, int32, int64, mixed, bool */
  luon_tensor *ad = make(LUON_DTYPE_F64, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_tensor *bd = make(LUON_DTYPE_F64, 2, SH(3, 2), V(7, 8, 9, 10, 11, 12));
  expect("f64", mm(ad, bd, NULL), LUON_DTYPE_F64, 2, SH(2, 2), V(58, 64, 139, 154), 0);
  luon_tensor *ai = make(LUON_DTYPE_I32, 2, SH(2, 3), V(1, -2, 3, 4, 5, 6));
  luon_tensor *bi = make(LUON_DTYPE_I32, 2, SH(3, 2), V(7, 8, 9, 10, 11, 12));
  expect("i32", mm(ai, bi, NULL), LUON_DTYPE_I32, 2, SH(2, 2), V(22, 24, 139, 154), 0);
  luon_tensor *bl = make(LUON_DTYPE_I64, 2, SH(3, 2), V(7, 8, 9, 10, 11, 12));
  expect("i32 @ i64", mm(ai, bl, NULL), LUON_DTYPE_I64, 2, SH(2, 2), V(22, 24, 139, 154), 0);
  expect("i32 @ f64", mm(ai, bd, NULL), LUON_DTYPE_F64, 2, SH(2, 2), V(22, 24, 139, 154), 0);
  expect("f32 @ i32", mm(a, bi, NULL), LUON_DTYPE_F32, 2, SH(2, 2), V(58, 64, 139, 154), 0);
  luon_tensor *ait = NULL;
  CHECK_OK(luon_tensor_view(ai, 2, SH(3, 2), SH(1, 3), 0, &ait));
  expect("i32 transposed", mm(ait, ai, NULL), LUON_DTYPE_I32, 2, SH(3, 3),
         V(17, 18, 27, 18, 29, 24, 27, 24, 45), 0);
  expect("i32 2d x transposed", mm(ai, ait, NULL), LUON_DTYPE_I32, 2, SH(2, 2), V(14, 12, 12, 77), 0);
  luon_tensor_release(ait);
  luon_tensor *ba = make(LUON_DTYPE_BOOL, 1, SH(3), V(1, 0, 1));
  expect("bool 1d x 1d", mm(ba, ba, NULL), LUON_DTYPE_I64, 0, NULL, V(2), 0);
  /* int32 wraps like NumPy */
  luon_tensor *big = make(LUON_DTYPE_I32, 1, SH(2), V(65536, 65536));
  expect("i32 wraps", mm(big, big, NULL), LUON_DTYPE_I32, 0, NULL, V(0), 0);
  luon_tensor_release(big);

  /* K = 0 gives zeros; M = 0 gives an empty result */
  luon_tensor *k0a = make(LUON_DTYPE_F32, 2, SH(2, 0), NULL), *k0b = make(LUON_DTYPE_F32, 2, SH(0, 3), NULL);
  expect("K=0", mm(k0a, k0b, NULL), LUON_DTYPE_F32, 2, SH(2, 3), V(0, 0, 0, 0, 0, 0), 0);
  luon_tensor *k0i = make(LUON_DTYPE_I64, 2, SH(0, 3), NULL);
  expect("K=0 int", mm(k0a, k0i, NULL), LUON_DTYPE_F32, 2, SH(2, 3), V(0, 0, 0, 0, 0, 0), 0);
  expect("M=0", mm(k0b, b, NULL), LUON_DTYPE_F32, 2, SH(0, 2), NULL, 0);
  luon_tensor_release(k0a);
  luon_tensor_release(k0b);
  luon_tensor_release(k0i);

  luon_tensor *objs[] = {a, b, v, w, ad, bd, ai, bi, bl, ba};
  for (size_t k = 0; k < sizeof objs / sizeof objs[0]; k++) luon_tensor_release(objs[k]);
}

/* C = A @ B over broadcast batches by the definition, in double. */
static void naive_batched(const double *A, const int64_t *sa, int na, const double *B,
                          const int64_t *sb, int nb, double *C, const int64_t *sc, int nc) {
  int64_t M = sc[nc - 2], N = sc[nc - 1], K = sa[na - 1], nbatch = 1;
  for (int d = 0; d < nc - 2; d++) nbatch *= sc[d];
  for (int64_t t = 0; t < nbatch; t++) {
    /* batch index -> offsets in A and B (broadcast) */
    int64_t rem = t, ao = 0, bo = 0, astep = M * K, bstep = K * N;
    for (int d = nc - 3; d >= 0; d--) {
      int64_t i = rem % sc[d];
      rem /= sc[d];
      int da = d - (nc - na), db = d - (nc - nb);
      if (da >= 0) { ao += (sa[da] == 1 ? 0 : i) * astep; astep *= sa[da]; }
      if (db >= 0) { bo += (sb[db] == 1 ? 0 : i) * bstep; bstep *= sb[db]; }
    }
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += A[ao + i * K + k] * B[bo + k * N + j];
        C[t * M * N + i * N + j] = s;
      }
  }
}

static double *randv(int64_t n) {
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t j = 0; j < n; j++) v[j] = (double)(rand() % 19 - 9) / 4;
  return v;
}

static void test_batched(void) {
  struct { int na; int64_t sa[4]; int nb; int64_t sb[4]; int nc; int64_t sc[4]; } cases[] = {
      {4, {2, 1, 2, 3}, 3, {3, 3, 2}, 4, {2, 3, 2, 2}},
      {3, {4, 5, 3}, 2, {3, 6}, 3, {4, 5, 6}},   /* a stack times one matrix */
      {2, {5, 3}, 3, {4, 3, 6}, 3, {4, 5, 6}},
      {3, {1, 2, 3}, 3, {5, 3, 2}, 3, {5, 2, 2}},
  };
  int32_t dts[] = {LUON_DTYPE_F32, LUON_DTYPE_F64, LUON_DTYPE_I32};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    for (int di = 0; di < 3; di++) {
      int64_t nA = 1, nB = 1, nC = 1;
      for (int d = 0; d < cases[k].na; d++) nA *= cases[k].sa[d];
      for (int d = 0; d < cases[k].nb; d++) nB *= cases[k].sb[d];
      for (int d = 0; d < cases[k].nc; d++) nC *= cases[k].sc[d];
      double *A = randv(nA), *B = randv(nB), *C = malloc(sizeof(double) * (size_t)nC);
      if (di == 2) for (int64_t j = 0; j < nA; j++) A[j] = floor(A[j] * 4);
      if (di == 2) for (int64_t j = 0; j < nB; j++) B[j] = floor(B[j] * 4);
      naive_batched(A, cases[k].sa, cases[k].na, B, cases[k].sb, cases[k].nb, C, cases[k].sc,
                    cases[k].nc);
      luon_tensor *a = make(dts[di], cases[k].na, cases[k].sa, A);
      luon_tensor *b = make(dts[di], cases[k].nb, cases[k].sb, B);
      char what[64];
      snprintf(what, sizeof what, "batched case %zu dtype %d", k, dts[di]);
      expect(what, mm(a, b, NULL), dts[di], cases[k].nc, cases[k].sc, C, 1e-6);
      luon_tensor_release(a);
      luon_tensor_release(b);
      free(A);
      free(B);
      free(C);
    }
}

/* BLAS (with views passed as CblasTrans or packed) against the naive kernel. */
static void test_blas_vs_ref(void) {
  int64_t M = 67, K = 45, N = 83;
  double *A = randv(M * K * 2), *B = randv(K * N * 2);
  for (int di = 0; di < 2; di++) {
    int32_t dt = di ? LUON_DTYPE_F64 : LUON_DTYPE_F32;
    luon_tensor *a = make(dt, 2, SH(M, 2 * K), A), *b = make(dt, 2, SH(2 * K, N), B);
    luon_tensor *bb = make(dt, 3, SH(2, K, N), B);
    luon_tensor *av[3], *bv[3];
    CHECK_OK(luon_tensor_view(a, 2, SH(M, K), SH(2 * K, 1), 0, &av[0]));      /* lda > K */
    CHECK_OK(luon_tensor_view(a, 2, SH(M, K), SH(2 * K, 2), 1, &av[1]));      /* packed */
    CHECK_OK(luon_tensor_view(b, 2, SH(M, K), SH(1, N), 0, &av[2]));          /* transposed */
    CHECK_OK(luon_tensor_view(b, 2, SH(K, N), SH(N, 1), N, &bv[0]));
    CHECK_OK(luon_tensor_view(a, 2, SH(K, N / 2), SH(1, 2 * K), 0, &bv[1]));  /* transposed */
    CHECK_OK(luon_tensor_view(b, 2, SH(K, N), SH(2 * N, 1), 0, &bv[2]));      /* ldb > N */
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) {
        luon_tensor *x = av[i], *y = j < 3 ? bv[j] : bb;
        luon_tensor_info yi;
        luon_tensor_info_get(y, &yi);
        if (yi.shape[yi.ndim - 2] != K) continue;
        lu_set_ref_kernels(1);
        luon_tensor *r = mm(x, y, NULL);
        lu_set_ref_kernels(0);
        luon_tensor *f = mm(x, y, NULL);
        CHECK(r && f, "blas vs ref %d %d: %s", i, j, luon_last_error());
        if (r && f) {
          luon_tensor_info ri;
          luon_tensor_info_get(r, &ri);
          double *rv = malloc(sizeof(double) * (size_t)ri.size), *fv = malloc(sizeof(double) * (size_t)ri.size);
          CHECK_OK(luon_tensor_to_host(r, rv, LUON_DTYPE_F64, sizeof(double) * (size_t)ri.size));
          CHECK_OK(luon_tensor_to_host(f, fv, LUON_DTYPE_F64, sizeof(double) * (size_t)ri.size));
          int bad = 0;
          for (int64_t e = 0; e < ri.size && bad < 3; e++)
            if (fabs(rv[e] - fv[e]) > (di ? 1e-12 : 1e-4) * (1 + fabs(rv[e]))) {
              bad++;
              CHECK(0, "dtype %d operands %d %d: [%lld] blas %.9g ref %.9g", dt, i, j, (long long)e, fv[e], rv[e]);
            }
          free(rv);
          free(fv);
        }
        luon_tensor_release(r);
        luon_tensor_release(f);
      }
    for (int i = 0; i < 3; i++) luon_tensor_release(av[i]), luon_tensor_release(bv[i]);
    luon_tensor_release(a);
    luon_tensor_release(b);
    luon_tensor_release(bb);
  }
  free(A);
  free(B);
}

static void test_errors(void) {
  luon_tensor *a = make(LUON_DTYPE_F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_tensor *b = make(LUON_DTYPE_F32, 2, SH(4, 5), NULL);
  luon_tensor *s = make(LUON_DTYPE_F32, 0, NULL, V(2));
  luon_status st;
  CHECK(!mm(a, b, &st) && st == LUON_ESHAPE, "mismatch: status %d", st);
  CHECK(!strcmp(luon_last_error(), "matmul: input 1 has shape (2,3) but input 2 has shape (4,5): "
                                   "the inner dimensions 3 and 4 differ"), "message: %s", luon_last_error());
  CHECK(!mm(s, a, &st) && st == LUON_ESHAPE, "0-d: status %d", st);
  CHECK(strstr(luon_last_error(), "multiply"), "message: %s", luon_last_error());
  luon_tensor *x = make(LUON_DTYPE_F32, 3, SH(2, 2, 3), NULL), *y = make(LUON_DTYPE_F32, 3, SH(3, 3, 2), NULL);
  CHECK(!mm(x, y, &st) && st == LUON_ESHAPE, "batch: status %d", st);
  CHECK(strstr(luon_last_error(), "batch"), "message: %s", luon_last_error());
  luon_tensor *v4 = make(LUON_DTYPE_F32, 1, SH(4), V(1, 1, 1, 1));
  CHECK(!mm(a, v4, &st) && st == LUON_ESHAPE, "2d x 1d mismatch: status %d", st);
  CHECK(strstr(luon_last_error(), "(2,3)") && strstr(luon_last_error(), "(4,)"), "message: %s",
        luon_last_error());
  luon_tensor *at = NULL;
  CHECK_OK(luon_tensor_view(a, 2, SH(3, 2), SH(1, 3), 0, &at));
  expect("valid after errors", mm(a, at, NULL), LUON_DTYPE_F32, 2, SH(2, 2), V(14, 32, 32, 77), 0);
  luon_tensor *objs[] = {a, b, s, x, y, v4, at};
  for (size_t k = 0; k < sizeof objs / sizeof objs[0]; k++) luon_tensor_release(objs[k]);
}

/* out= with strides of its own */
static void test_out_strided(void) {
  luon_tensor *a = make(LUON_DTYPE_F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_tensor *b = make(LUON_DTYPE_F32, 2, SH(3, 2), V(7, 8, 9, 10, 11, 12));
  luon_tensor *base = make(LUON_DTYPE_F32, 2, SH(2, 2), V(0, 0, 0, 0)), *ot = NULL;
  CHECK_OK(luon_tensor_view(base, 2, SH(2, 2), SH(1, 2), 0, &ot));
  luon_tensor *in[2] = {a, b}, *out[1] = {ot};
  int32_t nout = 1;
  CHECK_OK(luon_op_call(luon_op_find("matmul"), 2, in, NULL, &nout, out));
  float got[4];
  CHECK_OK(luon_tensor_to_host(base, got, LUON_DTYPE_F32, sizeof got));
  CHECK(got[0] == 58 && got[1] == 139 && got[2] == 64 && got[3] == 154, "out= strided: %g %g %g %g",
        got[0], got[1], got[2], got[3]);
  luon_tensor_release(out[0]);
  luon_tensor *objs[] = {a, b, base, ot};
  for (size_t k = 0; k < sizeof objs / sizeof objs[0]; k++) luon_tensor_release(objs[k]);
}

int main(void) {
  srand(3);
  test_values();
  test_batched();
  test_blas_vs_ref();
  test_errors();
  test_out_strided();
  return TEST_RESULT;
}
