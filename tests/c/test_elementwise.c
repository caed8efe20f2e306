/* test_elementwise.c: the elementwise ops and copy through the public API,
 * against naive double-precision references: broadcasting, strided and offset
 * views, size 0, dtype promotion, conversions, errors, and threaded runs. */
#include "luon.h"
#include "testutil.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CPU LUON_CPU, 0

/* ---- helpers ---------------------------------------------------------------- */

static luon_tensor_info info(const luon_tensor *t) {
  luon_tensor_info i;
  luon_tensor_info_get(t, &i);
  return i;
}

/* A tensor of dtype dt holding vals (given as doubles). */
static luon_tensor *make(int32_t dt, int nd, const int64_t *shape, const double *vals) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  luon_tensor *f = NULL, *t = NULL;
  CHECK_OK(luon_tensor_from_host(vals, LUON_DTYPE_F64, nd, shape, CPU, &f));
  CHECK_OK(luon_tensor_empty(dt, nd, shape, CPU, &t));
  if (f && t) CHECK_OK(luon_tensor_copy(t, f));
  luon_tensor_release(f);
  (void)n;
  return t;
}

/* A tensor with value v(k) at flat position k. */
static luon_tensor *make_fn(int32_t dt, int nd, const int64_t *shape, double (*v)(int64_t)) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  double *buf = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t k = 0; k < n; k++) buf[k] = v(k);
  luon_tensor *t = make(dt, nd, shape, buf);
  free(buf);
  return t;
}

/* Call op by name; returns the status, the result in *out. */
static luon_status call(const char *name, int nin, luon_tensor **in, const luon_attrs *a,
                        luon_tensor **out) {
  int32_t op = luon_op_find(name);
  CHECK(op >= 0, "no op %s", name);
  int32_t nout = 1;
  *out = NULL;
  return luon_op_call(op, nin, in, a, &nout, out);
}

static luon_tensor *call2(const char *name, luon_tensor *a, luon_tensor *b) {
  luon_tensor *in[2] = {a, b}, *out;
  luon_status s = call(name, 2, in, NULL, &out);
  CHECK(s == LUON_OK, "%s: %s", name, luon_last_error());
  return s == LUON_OK ? out : NULL;
}

static luon_tensor *call1(const char *name, luon_tensor *a, const luon_attrs *at) {
  luon_tensor *out;
  luon_status s = call(name, 1, &a, at, &out);
  CHECK(s == LUON_OK, "%s: %s", name, luon_last_error());
  return s == LUON_OK ? out : NULL;
}

/* All elements as doubles (row-major, malloc'd). */
static double *values(const luon_tensor *t) {
  int64_t n = info(t).size;
  double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
  CHECK_OK(luon_tensor_to_host(t, d, LUON_DTYPE_F64, sizeof(double) * (size_t)n));
  return d;
}

/* Flat index into t (row-major of its own shape) of output position k of
 * the broadcast shape (nd, shape). */
static int64_t bcast_index(const luon_tensor_info *t, int nd, const int64_t *shape, int64_t k) {
  int64_t idx = 0, mul = 1;
  for (int i = nd - 1; i >= 0; i--) {
    int64_t c = k % shape[i];
    k /= shape[i];
    int j = i - (nd - t->ndim);
    if (j < 0) continue;
    if (t->shape[j] != 1) idx += c * mul;
    mul *= t->shape[j];
  }
  return idx;
}

static bool close_to(double got, double want, double tol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= tol * (1 + fabs(want));
}

static void check_shape(const luon_tensor *t, int nd, const int64_t *shape, const char *what) {
  luon_tensor_info i = info(t);
  bool ok = i.ndim == nd;
  for (int k = 0; ok && k < nd; k++) ok = i.shape[k] == shape[k];
  CHECK(ok, "%s: ndim %d (want %d), shape[0] %lld", what, i.ndim, nd, (long long)i.shape[0]);
}

static void check_values(const luon_tensor *t, const double *want, int64_t n, double tol,
                         const char *what) {
  double *got = values(t);
  int bad = 0;
  for (int64_t k = 0; k < n && bad < 5; k++)
    if (!close_to(got[k], want[k], tol)) {
      bad++;
      CHECK(0, "%s: element %lld is %.9g, expected %.9g", what, (long long)k, got[k], want[k]);
    }
  free(got);
}

/* ---- binary ops against a reference over broadcast layouts ------------------ */

typedef double (*ref2)(double, double);
static double r_add(double a, double b) { return a + b; }
static double r_sub(double a, double b) { return a - b; }
static double r_mul(double a, double b) { return a * b; }
static double r_div(double a, double b) { return a / b; }
static double r_max(double a, double b) { return isnan(a) || a > b ? a : b; }
static double r_min(double a, double b) { return isnan(a) || a < b ? a : b; }
static double r_eq(double a, double b) { return a == b; }
static double r_ne(double a, double b) { return a != b; }
static double r_gt(double a, double b) { return a > b; }
static double r_ge(double a, double b) { return a >= b; }
static double r_lt(double a, double b) { return a < b; }
static double r_le(double a, double b) { return a <= b; }

static const struct { const char *name; ref2 f; } binops[] = {
    {"add", r_add},     {"subtract", r_sub}, {"multiply", r_mul},  {"divide", r_div},
    {"maximum", r_max}, {"minimum", r_min},  {"equal", r_eq},      {"not_equal", r_ne},
    {"greater", r_gt},  {"greater_equal", r_ge}, {"less", r_lt},   {"less_equal", r_le},
};

/* Check every binary op on (a, b) against the reference; result dtype `want_dt`
 * for arithmetic (bool for comparisons, float for divide of integers). */
static void check_binops(luon_tensor *a, luon_tensor *b, const char *what) {
  luon_tensor_info ia = info(a), ib = info(b);
  int nd = ia.ndim > ib.ndim ? ia.ndim : ib.ndim;
  int64_t shape[8], n = 1;
  for (int i = 0; i < nd; i++) {
    int ja = i - (nd - ia.ndim), jb = i - (nd - ib.ndim);
    int64_t sa = ja < 0 ? 1 : ia.shape[ja], sb = jb < 0 ? 1 : ib.shape[jb];
    shape[i] = sa == 1 ? sb : sa;
    n *= shape[i];
  }
  double *va = values(a), *vb = values(b), *want = malloc(sizeof(double) * (size_t)(n ? n : 1));
  bool fl = ia.dtype == LUON_DTYPE_F32 || ia.dtype == LUON_DTYPE_F64 ||
            ib.dtype == LUON_DTYPE_F32 || ib.dtype == LUON_DTYPE_F64;
  bool single = fl && ia.dtype != LUON_DTYPE_F64 && ib.dtype != LUON_DTYPE_F64;
  for (size_t o = 0; o < sizeof binops / sizeof binops[0]; o++) {
    char label[128];
    snprintf(label, sizeof label, "%s %s", what, binops[o].name);
    luon_tensor *r = call2(binops[o].name, a, b);
    if (!r) continue;
    check_shape(r, nd, shape, label);
    bool cmp = o >= 6;
    int32_t dt = info(r).dtype;
    if (cmp) CHECK(dt == LUON_DTYPE_BOOL, "%s: dtype %s", label, luon_dtype_name(dt));
    if (!cmp && !fl && o == 3) CHECK(dt == LUON_DTYPE_F32, "%s: dtype %s", label, luon_dtype_name(dt));
    for (int64_t k = 0; k < n; k++) {
      double x = va[bcast_index(&ia, nd, shape, k)], y = vb[bcast_index(&ib, nd, shape, k)];
      if (single) { x = (float)x; y = (float)y; }
      want[k] = binops[o].f(x, y);
      if (!cmp && (single || o == 3) && (dt == LUON_DTYPE_F32)) want[k] = (float)want[k];
      if (!cmp && dt == LUON_DTYPE_U8) want[k] = (double)(((int64_t)want[k] % 256 + 256) % 256);
    }
    check_values(r, want, n, single || dt == LUON_DTYPE_F32 ? 1e-6 : 1e-12, label);
    luon_tensor_release(r);
  }
  free(va);
  free(vb);
  free(want);
}

static double v_mixed(int64_t k) { return (double)((k * 7) % 11) - 5 + (k % 3 == 0 ? 0.5 : 0); }
static double v_int(int64_t k) { return (double)((k * 5) % 9) - 4; }
static double v_pos(int64_t k) { return (double)((k * 3) % 7) + 1; }
static double v_lin(int64_t k) { return (double)k; }
static double v_big(int64_t k) { return sin((double)k * 0.001) * 3 + (double)(k % 17) * 0.25; }

static void test_broadcast_layouts(void) {
  int64_t s31[2] = {3, 1}, s14[2] = {1, 4}, s34[2] = {3, 4}, s1[1] = {1};
  /* (3,1) + (1,4), checked by hand for add */
  double a31[3] = {1, 2, 3}, b14[4] = {10, 20, 30, 40};
  luon_tensor *a = make(LUON_DTYPE_F32, 2, s31, a31), *b = make(LUON_DTYPE_F32, 2, s14, b14);
  luon_tensor *r = call2("add", a, b);
  if (r) {
    double want[12];
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) want[i * 4 + j] = a31[i] + b14[j];
    check_shape(r, 2, s34, "(3,1)+(1,4)");
    check_values(r, want, 12, 0, "(3,1)+(1,4)");
    CHECK(info(r).dtype == LUON_DTYPE_F32, "dtype %d", info(r).dtype);
  }
  luon_tensor_release(r);
  check_binops(a, b, "f32 (3,1),(1,4)");
  luon_tensor_release(a);
  luon_tensor_release(b);

  /* every dtype pair on dense, scalar and broadcast layouts */
  const int32_t dts[] = {LUON_DTYPE_F32, LUON_DTYPE_F64, LUON_DTYPE_I32, LUON_DTYPE_I64,
                         LUON_DTYPE_U8};
  for (int p = 0; p < 5; p++)
    for (int q = 0; q < 5; q++) {
      double (*va)(int64_t) = dts[p] == LUON_DTYPE_U8 ? v_pos : dts[p] <= 2 ? v_mixed : v_int;
      double (*vb)(int64_t) = dts[q] == LUON_DTYPE_U8 ? v_pos : dts[q] <= 2 ? v_pos : v_int;
      char what[64];
      snprintf(what, sizeof what, "%s,%s", luon_dtype_name(dts[p]), luon_dtype_name(dts[q]));
      luon_tensor *x = make_fn(dts[p], 2, s34, va), *y = make_fn(dts[q], 2, s34, vb);
      luon_tensor *s = make_fn(dts[q], 1, s1, vb), *c = make_fn(dts[q], 2, s14, vb);
      check_binops(x, y, what);
      check_binops(x, s, what);
      check_binops(s, x, what);
      check_binops(x, c, what);
      luon_tensor_release(x);
      luon_tensor_release(y);
      luon_tensor_release(s);
      luon_tensor_release(c);
    }

  /* 3-d with size-1 axes: (2,1,5) and (3,1) -> (2,3,5), and a 0-d operand */
  int64_t s215[3] = {2, 1, 5};
  luon_tensor *x = make_fn(LUON_DTYPE_F64, 3, s215, v_mixed), *y = make_fn(LUON_DTYPE_F64, 2, s31, v_pos);
  luon_tensor *z = make_fn(LUON_DTYPE_F64, 0, NULL, v_pos);
  check_binops(x, y, "(2,1,5),(3,1)");
  check_binops(z, y, "(),(3,1)");
  check_binops(z, z, "(),()");
  luon_tensor_release(x);
  luon_tensor_release(y);
  luon_tensor_release(z);
}

static void test_strided(void) {
  /* a transposed view (4,3) of a (3,4) base, an offset view, and a stride-2 view */
  int64_t s34[2] = {3, 4}, s43[2] = {4, 3}, st_t[2] = {1, 4};
  const int32_t dts[] = {LUON_DTYPE_F32, LUON_DTYPE_I32, LUON_DTYPE_F64};
  for (int p = 0; p < 3; p++) {
    luon_tensor *base = make_fn(dts[p], 2, s34, v_mixed), *t = NULL;
    CHECK_OK(luon_tensor_view(base, 2, s43, st_t, 0, &t));
    CHECK(!info(t).contiguous, "transposed view is contiguous");
    luon_tensor *d = make_fn(LUON_DTYPE_F32, 2, s43, v_pos);
    check_binops(t, d, "transposed,dense");
    check_binops(d, t, "dense,transposed");
    check_binops(t, t, "transposed,transposed");
    /* out= a transposed view of another storage: written in place, strided */
    luon_tensor *obase = NULL, *ov = NULL, *in2[2] = {t, d}, *outs[1];
    CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 2, s34, CPU, &obase));
    CHECK_OK(luon_tensor_view(obase, 2, s43, st_t, 0, &ov));
    int32_t nout = 1;
    outs[0] = ov;
    if (dts[p] == LUON_DTYPE_F32) {
      CHECK_OK(luon_op_call(luon_op_find("multiply"), 2, in2, NULL, &nout, outs));
      CHECK(outs[0] == ov, "out= returns the view");
      luon_tensor *ref = call2("multiply", t, d);
      double *want = ref ? values(ref) : NULL;
      if (want) check_values(ov, want, 12, 0, "strided out=");
      free(want);
      luon_tensor_release(ref);
      luon_tensor_release(outs[0]);
    }
    luon_tensor_release(ov);
    luon_tensor_release(obase);
    /* row 1 of base, elements 1..3: shape (3,), offset 5 */
    int64_t s3[1] = {3}, st1[1] = {1}, st2[1] = {2}, s2[1] = {2};
    luon_tensor *o = NULL, *e = NULL;
    CHECK_OK(luon_tensor_view(base, 1, s3, st1, 5, &o));
    check_binops(t, o, "transposed,offset");
    CHECK_OK(luon_tensor_view(base, 1, s2, st2, 1, &e));
    luon_tensor *col = NULL; /* (4,1) column of base^T: stride 1 (elements 0..3 of row 0) */
    int64_t s41[2] = {4, 1}, st41[2] = {1, 1};
    CHECK_OK(luon_tensor_view(base, 2, s41, st41, 0, &col));
    check_binops(col, e, "column,stride-2");
    /* unary and copy on the transposed view */
    luon_tensor *n = call1(dts[p] == LUON_DTYPE_I32 ? "negative" : "exp", t, NULL);
    if (n) {
      double *v = values(t), want[12];
      for (int k = 0; k < 12; k++)
        want[k] = dts[p] == LUON_DTYPE_I32 ? -v[k] : exp(dts[p] == LUON_DTYPE_F32 ? (float)v[k] : v[k]);
      check_values(n, want, 12, 1e-6, "unary on transposed");
      free(v);
    }
    luon_tensor_release(n);
    luon_tensor_release(col);
    luon_tensor_release(e);
    luon_tensor_release(o);
    luon_tensor_release(d);
    luon_tensor_release(t);
    luon_tensor_release(base);
  }
  /* a stride-0 broadcast view as an input */
  int64_t s4[1] = {4}, s34b[2] = {3, 4}, st0[2] = {0, 1};
  luon_tensor *row = make_fn(LUON_DTYPE_F32, 1, s4, v_lin), *bv = NULL;
  CHECK_OK(luon_tensor_view(row, 2, s34b, st0, 0, &bv));
  luon_tensor *d = make_fn(LUON_DTYPE_F64, 2, s34b, v_mixed);
  check_binops(bv, d, "stride-0 view,dense f64");
  luon_tensor_release(d);
  luon_tensor_release(bv);
  luon_tensor_release(row);
}

static void test_size0(void) {
  int64_t s03[2] = {0, 3}, s13[2] = {1, 3}, s01[2] = {0, 1};
  luon_tensor *a = make(LUON_DTYPE_F32, 2, s03, NULL), *b = make_fn(LUON_DTYPE_F32, 2, s13, v_lin);
  luon_tensor *r = call2("add", a, b);
  if (r) check_shape(r, 2, s03, "(0,3)+(1,3)");
  luon_tensor_release(r);
  r = call1("exp", a, NULL);
  if (r) check_shape(r, 2, s03, "exp (0,3)");
  luon_tensor_release(r);
  luon_tensor *e = make(LUON_DTYPE_I32, 2, s01, NULL);
  luon_tensor *in[3] = {e, a, b};
  CHECK(call("where", 3, in, NULL, &r) == LUON_OK, "where size 0: %s", luon_last_error());
  if (r) check_shape(r, 2, s03, "where size 0");
  luon_tensor_release(r);
  luon_tensor_release(e);
  luon_tensor_release(a);
  luon_tensor_release(b);
}

static void test_promotion(void) {
  int64_t s2[1] = {2};
  double one[2] = {1, 0};
  struct { int32_t a, b, want; } cases[] = {
      {LUON_DTYPE_I32, LUON_DTYPE_F32, LUON_DTYPE_F32}, {LUON_DTYPE_I32, LUON_DTYPE_I64, LUON_DTYPE_I64},
      {LUON_DTYPE_U8, LUON_DTYPE_I32, LUON_DTYPE_I32},  {LUON_DTYPE_F32, LUON_DTYPE_F64, LUON_DTYPE_F64},
      {LUON_DTYPE_BOOL, LUON_DTYPE_BOOL, LUON_DTYPE_BOOL}, {LUON_DTYPE_BOOL, LUON_DTYPE_I32, LUON_DTYPE_I32},
      {LUON_DTYPE_I64, LUON_DTYPE_F32, LUON_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    luon_tensor *a = make(cases[i].a, 1, s2, one), *b = make(cases[i].b, 1, s2, one);
    luon_tensor *r = call2("add", a, b);
    if (r) CHECK(info(r).dtype == cases[i].want, "add %s %s gives %s", luon_dtype_name(cases[i].a),
                 luon_dtype_name(cases[i].b), luon_dtype_name(info(r).dtype));
    luon_tensor_release(r);
    luon_tensor_release(a);
    luon_tensor_release(b);
  }
  /* bool: add is or, multiply is and, subtract is refused */
  double ta[4] = {0, 0, 1, 1}, tb[4] = {0, 1, 0, 1}, or_[4] = {0, 1, 1, 1}, and_[4] = {0, 0, 0, 1};
  int64_t s4[1] = {4};
  luon_tensor *a = make(LUON_DTYPE_BOOL, 1, s4, ta), *b = make(LUON_DTYPE_BOOL, 1, s4, tb);
  luon_tensor *r = call2("add", a, b);
  if (r) check_values(r, or_, 4, 0, "bool add");
  luon_tensor_release(r);
  r = call2("multiply", a, b);
  if (r) check_values(r, and_, 4, 0, "bool multiply");
  luon_tensor_release(r);
  luon_tensor *in[2] = {a, b};
  CHECK(call("subtract", 2, in, NULL, &r) == LUON_EDTYPE, "bool subtract: %s", luon_last_error());
  CHECK(call("negative", 1, in, NULL, &r) == LUON_EDTYPE, "bool negative");
  CHECK(strstr(luon_last_error(), "negative") && strstr(luon_last_error(), "bool"), "message: %s",
        luon_last_error());
  luon_tensor_release(a);
  luon_tensor_release(b);

  /* int / int -> float32; unary math of ints -> float32; power of ints stays int */
  double x[4] = {7, -7, 1, 0}, y[4] = {2, 2, 0, 0};
  luon_tensor *xi = make(LUON_DTYPE_I32, 1, s4, x), *yi = make(LUON_DTYPE_I64, 1, s4, y);
  r = call2("divide", xi, yi);
  if (r) {
    CHECK(info(r).dtype == LUON_DTYPE_F32, "int divide dtype %s", luon_dtype_name(info(r).dtype));
    double want[4] = {3.5, -3.5, INFINITY, NAN};
    check_values(r, want, 4, 0, "int divide");
  }
  luon_tensor_release(r);
  const char *fl[] = {"exp", "log", "sqrt", "tanh", "sigmoid"};
  for (int i = 0; i < 5; i++) {
    r = call1(fl[i], xi, NULL);
    if (r) CHECK(info(r).dtype == LUON_DTYPE_F32, "%s of int32 gives %s", fl[i], luon_dtype_name(info(r).dtype));
    luon_tensor_release(r);
  }
  double pb[4] = {3, -2, 5, 0}, pe[4] = {3, 3, 0, 2}, pw[4] = {27, -8, 1, 0};
  luon_tensor *p1 = make(LUON_DTYPE_I32, 1, s4, pb), *p2 = make(LUON_DTYPE_I32, 1, s4, pe);
  r = call2("power", p1, p2);
  if (r) {
    CHECK(info(r).dtype == LUON_DTYPE_I32, "int power dtype %s", luon_dtype_name(info(r).dtype));
    check_values(r, pw, 4, 0, "int power");
  }
  luon_tensor_release(r);
  luon_tensor *f1 = make(LUON_DTYPE_F32, 1, s4, pb);
  r = call2("power", f1, p2);
  if (r) check_values(r, pw, 4, 1e-6, "float power");
  luon_tensor_release(r);
  luon_tensor_release(f1);
  luon_tensor_release(p1);
  luon_tensor_release(p2);
  luon_tensor_release(xi);
  luon_tensor_release(yi);

  /* maximum/minimum propagate NaN from either side; comparisons with NaN */
  double na[4] = {NAN, 1, 2, NAN}, nb[4] = {1, NAN, 1, NAN};
  luon_tensor *fa = make(LUON_DTYPE_F32, 1, s4, na), *fb = make(LUON_DTYPE_F32, 1, s4, nb);
  double mx[4] = {NAN, NAN, 2, NAN}, mn[4] = {NAN, NAN, 1, NAN}, eq[4] = {0, 0, 0, 0}, ne[4] = {1, 1, 1, 1};
  r = call2("maximum", fa, fb);
  if (r) check_values(r, mx, 4, 0, "maximum NaN");
  luon_tensor_release(r);
  r = call2("minimum", fa, fb);
  if (r) check_values(r, mn, 4, 0, "minimum NaN");
  luon_tensor_release(r);
  r = call2("equal", fa, fb);
  if (r) check_values(r, eq, 4, 0, "equal NaN");
  luon_tensor_release(r);
  r = call2("not_equal", fa, fb);
  if (r) check_values(r, ne, 4, 0, "not_equal NaN");
  luon_tensor_release(r);
  luon_tensor_release(fa);
  luon_tensor_release(fb);
}

typedef double (*ref1)(double);
static double u_neg(double x) { return -x; }
static double u_abs(double x) { return fabs(x); }
static double u_sign(double x) { return x > 0 ? 1 : x < 0 ? -1 : x; }
static double u_sq(double x) { return x * x; }
static double u_sig(double x) { return 1 / (1 + exp(-x)); }
static double u_relu(double x) { return x < 0 ? 0 : x; }

static void test_unary(void) {
  static const struct { const char *name; ref1 f; } ops[] = {
      {"negative", u_neg}, {"abs", u_abs}, {"sign", u_sign}, {"exp", exp},   {"log", log},
      {"sqrt", sqrt},      {"square", u_sq}, {"tanh", tanh}, {"sigmoid", u_sig}, {"relu", u_relu},
  };
  double v[9] = {-3, -0.5, 0, 0.25, 1, 2.5, 100, -100, NAN};
  int64_t s9[1] = {9};
  const int32_t dts[] = {LUON_DTYPE_F32, LUON_DTYPE_F64, LUON_DTYPE_I32, LUON_DTYPE_I64};
  for (int p = 0; p < 4; p++) {
    bool fl = p < 2;
    luon_tensor *x = make(dts[p], 1, s9, v);
    double *xv = values(x);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
      luon_tensor *r = call1(ops[o].name, x, NULL);
      if (!r) continue;
      double want[9];
      for (int k = 0; k < 9; k++) {
        double w = ops[o].f(xv[k]);
        if (!fl && (o < 3 || o == 6 || o == 9)) w = (double)(int64_t)w; /* stays integer */
        if (info(r).dtype == LUON_DTYPE_F32) w = (float)w;
        want[k] = w;
      }
      if (!fl && (o >= 3 && o != 6 && o != 9))
        CHECK(info(r).dtype == LUON_DTYPE_F32, "%s of %s: %s", ops[o].name, luon_dtype_name(dts[p]),
              luon_dtype_name(info(r).dtype));
      char label[64];
      snprintf(label, sizeof label, "%s %s", ops[o].name, luon_dtype_name(dts[p]));
      check_values(r, want, 9, 2e-6, label);
      luon_tensor_release(r);
    }
    free(xv);
    luon_tensor_release(x);
  }
  /* sigmoid saturates without NaN */
  double big[2] = {-1000, 1000}, sb[2] = {0, 1};
  int64_t s2[1] = {2};
  luon_tensor *x = make(LUON_DTYPE_F32, 1, s2, big), *r = call1("sigmoid", x, NULL);
  if (r) check_values(r, sb, 2, 0, "sigmoid extremes");
  luon_tensor_release(r);
  luon_tensor_release(x);
}

/* np's elementwise math against libm in float64; integers give float32 for
 * the math, keep their dtype for the rounding ops; bool is refused there. */
static double u_d2r(double x) { return x * (M_PI / 180); }
static double u_r2d(double x) { return x * (180 / M_PI); }
static double u_rcp(double x) { return 1 / x; }

static void test_math(void) {
  static const struct { const char *name; ref1 f; bool keeps_int; } ops[] = {
      {"sin", sin, false},     {"cos", cos, false},       {"tan", tan, false},
      {"arcsin", asin, false}, {"arccos", acos, false},   {"arctan", atan, false},
      {"sinh", sinh, false},   {"cosh", cosh, false},     {"arcsinh", asinh, false},
      {"arccosh", acosh, false}, {"arctanh", atanh, false}, {"log10", log10, false},
      {"log1p", log1p, false}, {"expm1", expm1, false},   {"cbrt", cbrt, false},
      {"deg2rad", u_d2r, false}, {"rad2deg", u_r2d, false}, {"reciprocal", u_rcp, true},
      {"floor", floor, true},  {"ceil", ceil, true},      {"trunc", trunc, true},
  };
  double v[8] = {-2.5, -0.5, 0, 0.3, 0.5, 1.5, 4, NAN}, iv[4] = {-3, 0, 2, 7};
  int64_t s8[1] = {8}, s4[1] = {4};
  luon_tensor *x = make(LUON_DTYPE_F64, 1, s8, v), *xi = make(LUON_DTYPE_I32, 1, s4, iv);
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    double want[8];
    for (int k = 0; k < 8; k++) want[k] = ops[o].f(v[k]);
    luon_tensor *r = call1(ops[o].name, x, NULL);
    if (r) check_values(r, want, 8, 1e-15, ops[o].name);
    luon_tensor_release(r);
    r = call1(ops[o].name, xi, NULL);
    if (r) {
      int32_t dt = info(r).dtype, wdt = ops[o].keeps_int ? LUON_DTYPE_I32 : LUON_DTYPE_F32;
      CHECK(dt == wdt, "%s of int32 gives %s", ops[o].name, luon_dtype_name(dt));
      if (!ops[o].keeps_int) {
        for (int k = 0; k < 4; k++) want[k] = (float)ops[o].f(iv[k]);
        check_values(r, want, 4, 1e-6, ops[o].name);
      }
    }
    luon_tensor_release(r);
  }
  /* bool: the rounding ops refuse it, naming the op and the dtype */
  double bv[2] = {1, 0};
  int64_t s2[1] = {2};
  luon_tensor *b = make(LUON_DTYPE_BOOL, 1, s2, bv), *r = NULL;
  CHECK(call("floor", 1, &b, NULL, &r) == LUON_EDTYPE, "floor of bool");
  CHECK(strstr(luon_last_error(), "floor") && strstr(luon_last_error(), "bool"), "message: %s",
        luon_last_error());
  luon_tensor *fl = make(LUON_DTYPE_F32, 1, s2, bv), *in2[2] = {fl, fl};
  CHECK(call("bitwise_and", 2, in2, NULL, &r) == LUON_EDTYPE, "bitwise_and of float32");
  CHECK(strstr(luon_last_error(), "bitwise_and") && strstr(luon_last_error(), "float32"), "message: %s",
        luon_last_error());
  luon_tensor_release(fl);
  luon_tensor_release(b);
  luon_tensor_release(x);
  luon_tensor_release(xi);
}


static void test_clip(void) {
  int lo = test_slot("CLIP_MIN"), hi = test_slot("CLIP_MAX");
  double v[6] = {-5, -1, 0, 0.5, 3, NAN};
  int64_t s6[1] = {6};
  luon_attrs at;
  memset(&at, 0, sizeof at);
  luon_tensor *x = make(LUON_DTYPE_F32, 1, s6, v);
  at.f[lo] = -1; at.f[hi] = 2;
  luon_tensor *r = call1("clip", x, &at);
  double w1[6] = {-1, -1, 0, 0.5, 2, NAN};
  if (r) check_values(r, w1, 6, 0, "clip [-1,2]");
  luon_tensor_release(r);
  at.f[lo] = NAN; at.f[hi] = 0;
  r = call1("clip", x, &at);
  double w2[6] = {-5, -1, 0, 0, 0, NAN};
  if (r) check_values(r, w2, 6, 0, "clip [,0]");
  luon_tensor_release(r);
  luon_tensor_release(x);
  /* integers keep their dtype; fractional bounds round inward */
  double iv[5] = {-5, -1, 0, 1, 3};
  int64_t s5[1] = {5};
  luon_tensor *xi = make(LUON_DTYPE_I32, 1, s5, iv);
  at.f[lo] = -0.5; at.f[hi] = NAN;
  r = call1("clip", xi, &at);
  double w3[5] = {0, 0, 0, 1, 3};
  if (r) {
    CHECK(info(r).dtype == LUON_DTYPE_I32, "clip int dtype %s", luon_dtype_name(info(r).dtype));
    check_values(r, w3, 5, 0, "clip int [-0.5,)");
  }
  luon_tensor_release(r);
  luon_tensor_release(xi);
}

static void test_where(void) {
  /* cond (3,1) float, x (1,4) int32, y () float64 -> (3,4) float64 */
  int64_t s31[2] = {3, 1}, s14[2] = {1, 4}, s34[2] = {3, 4};
  double c[3] = {0, 2.5, NAN}, xv[4] = {1, 2, 3, 4}, yv[1] = {-1};
  luon_tensor *ct = make(LUON_DTYPE_F32, 2, s31, c), *xt = make(LUON_DTYPE_I32, 2, s14, xv);
  luon_tensor *yt = make(LUON_DTYPE_F64, 0, NULL, yv);
  luon_tensor *in[3] = {ct, xt, yt}, *r;
  CHECK(call("where", 3, in, NULL, &r) == LUON_OK, "where: %s", luon_last_error());
  if (r) {
    check_shape(r, 2, s34, "where");
    CHECK(info(r).dtype == LUON_DTYPE_F64, "where dtype %s", luon_dtype_name(info(r).dtype));
    double want[12];
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++) want[i * 4 + j] = c[i] != 0 ? xv[j] : -1; /* NaN is true */
    check_values(r, want, 12, 0, "where");
    luon_tensor_release(r);
  }
  /* dense bool cond, same dtypes: the flat kernel */
  double b[12];
  for (int k = 0; k < 12; k++) b[k] = k % 3 == 0;
  luon_tensor *bc = make(LUON_DTYPE_BOOL, 2, s34, b), *x2 = make_fn(LUON_DTYPE_F32, 2, s34, v_lin);
  luon_tensor *y2 = make_fn(LUON_DTYPE_F32, 2, s34, v_mixed);
  luon_tensor *in2[3] = {bc, x2, y2};
  CHECK(call("where", 3, in2, NULL, &r) == LUON_OK, "where dense: %s", luon_last_error());
  if (r) {
    double want[12];
    for (int k = 0; k < 12; k++) want[k] = b[k] ? v_lin(k) : v_mixed(k);
    check_values(r, want, 12, 0, "where dense");
    luon_tensor_release(r);
  }
  /* a shape error names all three shapes */
  int64_t s5[1] = {5};
  luon_tensor *bad = make_fn(LUON_DTYPE_F32, 1, s5, v_lin);
  luon_tensor *in3[3] = {ct, xt, bad};
  CHECK(call("where", 3, in3, NULL, &r) == LUON_ESHAPE, "where bad shapes");
  CHECK(strstr(luon_last_error(), "where") && strstr(luon_last_error(), "(5,)"), "message: %s",
        luon_last_error());
  luon_tensor_release(bad);
  luon_tensor_release(bc);
  luon_tensor_release(x2);
  luon_tensor_release(y2);
  luon_tensor_release(ct);
  luon_tensor_release(xt);
  luon_tensor_release(yt);
}

static void test_copy(void) {
  /* float16 / bfloat16 round trips of exactly representable values */
  double v[6] = {0, 1, -2.5, 0.125, 65504, -0.0009765625};
  int64_t s6[1] = {6}, s23[2] = {2, 3}, s32[2] = {3, 2}, st[2] = {1, 3};
  luon_tensor *x = make(LUON_DTYPE_F32, 1, s6, v);
  int32_t store[2] = {LUON_DTYPE_F16, LUON_DTYPE_BF16};
  for (int i = 0; i < 2; i++) {
    luon_attrs at;
    memset(&at, 0, sizeof at);
    at.dtype = store[i];
    luon_tensor *h = call1("copy", x, &at);
    if (!h) continue;
    CHECK(info(h).dtype == store[i], "copy to %s", luon_dtype_name(store[i]));
    at.dtype = LUON_DTYPE_F32;
    luon_tensor *back = call1("copy", h, &at);
    double want[6];
    memcpy(want, v, sizeof want);
    if (store[i] == LUON_DTYPE_BF16) want[4] = 65536; /* 65504 rounds in bfloat16 */
    if (back) check_values(back, want, 6, 0, luon_dtype_name(store[i]));
    /* a transposed view of the half tensor, converted */
    luon_tensor *ht = NULL;
    CHECK_OK(luon_tensor_view(h, 2, s32, st, 0, &ht));
    luon_tensor *tb = ht ? call1("copy", ht, &at) : NULL;
    if (tb) {
      double w[6];
      for (int r = 0; r < 3; r++)
        for (int c = 0; c < 2; c++) w[r * 2 + c] = want[c * 3 + r];
      check_values(tb, w, 6, 0, "half transposed copy");
    }
    luon_tensor_release(tb);
    luon_tensor_release(ht);
    luon_tensor_release(back);
    luon_tensor_release(h);
  }
  /* luon_tensor_copy into a non-contiguous float64 destination */
  luon_tensor *src = make_fn(LUON_DTYPE_F32, 2, s32, v_mixed);
  luon_tensor *dbase = NULL, *dview = NULL;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F64, 2, s23, CPU, &dbase));
  CHECK_OK(luon_tensor_view(dbase, 2, s32, st, 0, &dview));
  CHECK_OK(luon_tensor_copy(dview, src));
  double *got = values(dbase), w[6];
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 3; c++) w[r * 3 + c] = (float)v_mixed(c * 2 + r);
  for (int k = 0; k < 6; k++) CHECK(got[k] == w[k], "copy into view: %d: %g vs %g", k, got[k], w[k]);
  free(got);
  /* copy keeps the dtype by default and makes a dense result */
  luon_tensor *cv = call1("copy", dview, NULL);
  if (cv) CHECK(info(cv).contiguous && info(cv).dtype == LUON_DTYPE_F64, "copy of view");
  luon_tensor_release(cv);
  luon_tensor_release(dview);
  luon_tensor_release(dbase);
  luon_tensor_release(src);
  luon_tensor_release(x);
}

static void test_errors(void) {
  int64_t s23[2] = {2, 3}, s4[1] = {4};
  luon_tensor *a = make_fn(LUON_DTYPE_F32, 2, s23, v_lin), *b = make_fn(LUON_DTYPE_F32, 1, s4, v_lin);
  luon_tensor *in[2] = {a, b}, *r = NULL;
  luon_status s = call("add", 2, in, NULL, &r);
  CHECK(s == LUON_ESHAPE, "status %d", s);
  CHECK(r == NULL, "no result on error");
  const char *m = luon_last_error();
  CHECK(strstr(m, "add") && strstr(m, "(2,3)") && strstr(m, "(4,)"), "message: %s", m);
  in[1] = a;
  s = call("add", 2, in, NULL, &r);
  CHECK(s == LUON_OK && r, "valid call after error: %s", luon_last_error());
  if (r) {
    double want[6] = {0, 2, 4, 6, 8, 10};
    check_values(r, want, 6, 0, "after error");
  }
  luon_tensor_release(r);
  /* out= of the wrong shape */
  int32_t nout = 1;
  luon_tensor *out[1] = {b};
  CHECK(luon_op_call(luon_op_find("add"), 2, in, NULL, &nout, out) == LUON_ESHAPE, "out= shape");
  /* out= aliasing an input goes through a temporary: a += a */
  out[0] = a;
  CHECK_OK(luon_op_call(luon_op_find("add"), 2, in, NULL, &nout, out));
  double want[6] = {0, 2, 4, 6, 8, 10};
  check_values(a, want, 6, 0, "in place add");
  luon_tensor_release(out[0]);
  luon_tensor_release(a);
  luon_tensor_release(b);
}

/* Large inputs take the threaded paths; each row of the result must equal
 * the same op run on that row alone (the small, single-threaded path). */
static void test_large(void) {
  luon_set_num_threads(4);
  int64_t N = 1000, s[2] = {N, N}, sT[2] = {N, N}, stT[2] = {1, N}, sr[1] = {N};
  luon_tensor *a = make_fn(LUON_DTYPE_F32, 2, s, v_big), *b = make_fn(LUON_DTYPE_F32, 1, sr, v_mixed);
  luon_tensor *at = NULL;
  CHECK_OK(luon_tensor_view(a, 2, sT, stT, 0, &at));
  const char *ops[] = {"add", "multiply", "maximum", "less"};
  luon_tensor *lhs[3] = {a, at, a};
  luon_tensor *rhs[3] = {b, b, a};
  for (int o = 0; o < 4; o++)
    for (int c = 0; c < 3; c++) {
      luon_tensor *r = call2(ops[o], lhs[c], rhs[c]);
      if (!r) continue;
      double *big = values(r);
      int bad = 0;
      for (int64_t i = 0; i < N && bad < 3; i += 37) {
        luon_tensor *ri = NULL, *rr = NULL;
        CHECK_OK(luon_tensor_view(lhs[c], 1, sr, (int64_t[1]){info(lhs[c]).strides[1]},
                                  i * info(lhs[c]).strides[0], &ri));
        CHECK_OK(c == 2 ? luon_tensor_view(a, 1, sr, (int64_t[1]){1}, i * N, &rr)
                        : luon_tensor_view(b, 1, sr, (int64_t[1]){1}, 0, &rr));
        luon_tensor *small = call2(ops[o], ri, rr);
        if (small) {
          double *sv = values(small);
          for (int64_t j = 0; j < N; j++)
            if (sv[j] != big[i * N + j]) {
              bad++;
              CHECK(0, "%s case %d: [%lld,%lld] threaded %.9g vs small %.9g", ops[o], c,
                    (long long)i, (long long)j, big[i * N + j], sv[j]);
              break;
            }
          free(sv);
        }
        luon_tensor_release(small);
        luon_tensor_release(ri);
        luon_tensor_release(rr);
      }
      free(big);
      luon_tensor_release(r);
    }
  /* a 1-d 1M row is split into pieces: exp and a converting copy */
  int64_t s1[1] = {N * N};
  luon_tensor *flat = NULL;
  CHECK_OK(luon_tensor_view(a, 1, s1, (int64_t[1]){1}, 0, &flat));
  luon_tensor *e = call1("exp", at, NULL);
  luon_attrs cat;
  memset(&cat, 0, sizeof cat);
  cat.dtype = LUON_DTYPE_F64;
  luon_tensor *d = call1("copy", at, &cat);
  if (e && d) {
    double *ev = values(e), *dv = values(d), *av = values(a);
    int bad = 0;
    for (int64_t i = 0; i < N && bad < 3; i++)
      for (int64_t j = 0; j < N; j++) {
        float x = (float)av[j * N + i];
        if (ev[i * N + j] != (double)expf(x) || dv[i * N + j] != (double)x) {
          bad++;
          CHECK(0, "exp/copy transposed [%lld,%lld]: %.9g %.9g for x %.9g", (long long)i, (long long)j,
                ev[i * N + j], dv[i * N + j], x);
          break;
        }
      }
    free(ev);
    free(dv);
    free(av);
  }
  luon_tensor_release(e);
  luon_tensor_release(d);
  luon_tensor *sq = flat ? call2("multiply", flat, flat) : NULL;
  if (sq) {
    double *v = values(sq), *av = values(a);
    int bad = 0;
    for (int64_t k = 0; k < N * N && bad < 3; k++)
      if (v[k] != (double)((float)av[k] * (float)av[k])) {
        bad++;
        CHECK(0, "1-d multiply [%lld]", (long long)k);
      }
    free(v);
    free(av);
  }
  luon_tensor_release(sq);
  /* one long strided row (every other element): the iterator cuts the row */
  int64_t sh[1] = {N * N / 2};
  luon_tensor *half = NULL;
  CHECK_OK(luon_tensor_view(a, 1, sh, (int64_t[1]){2}, 1, &half));
  luon_tensor *hn = half ? call1("negative", half, NULL) : NULL;
  if (hn) {
    double *v = values(hn), *av = values(a);
    int bad = 0;
    for (int64_t k = 0; k < N * N / 2 && bad < 3; k++)
      if (v[k] != -(double)(float)av[2 * k + 1]) {
        bad++;
        CHECK(0, "strided 1-d negative [%lld]: %g vs %g", (long long)k, v[k], -av[2 * k + 1]);
      }
    free(v);
    free(av);
  }
  luon_tensor_release(hn);
  luon_tensor_release(half);
  luon_tensor_release(flat);
  luon_tensor_release(at);
  luon_tensor_release(a);
  luon_tensor_release(b);
}

int main(void) {
  test_broadcast_layouts();
  test_strided();
  test_size0();
  test_promotion();
  test_unary();
  test_math();
  test_clip();
  test_where();
  test_copy();
  test_errors();
  test_large();
  CHECK(luon_counters_get()->tensors_live == 0, "%lld tensors leaked",
        (long long)luon_counters_get()->tensors_live);
  return TEST_RESULT;
}
