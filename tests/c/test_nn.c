/* test_nn.c: batch_norm, dropout, the softmax family, pick, softrelu /
 * leaky_relu and the activation gradients, the fused optimizer updates:
 * hand-computed values, naive references on odd and strided shapes,
 * float64 finite-difference checks of every lu_grad_* here, error paths. */
#include "internal.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define F32 LUON_DTYPE_F32
#define F64 LUON_DTYPE_F64
#define SH(...) (int64_t[]){__VA_ARGS__}
#define V(...) (double[]){__VA_ARGS__}

/* ---- helpers -------------------------------------------------------------------- */

static luon_tensor *mk(int32_t dt, int nd, const int64_t *shape, const double *v) {
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_empty(dt, nd, shape, LUON_CPU, 0, &t));
  int64_t n = lu_numel(nd, shape);
  for (int64_t j = 0; j < n; j++) {
    switch (dt) {
    case F32: ((float *)lu_data(t))[j] = (float)v[j]; break;
    case F64: ((double *)lu_data(t))[j] = v[j]; break;
    case LUON_DTYPE_I32: ((int32_t *)lu_data(t))[j] = (int32_t)v[j]; break;
    case LUON_DTYPE_I64: ((int64_t *)lu_data(t))[j] = (int64_t)v[j]; break;
    default: break;
    }
  }
  return t;
}

static uint64_t rng_state = 88172645463325252ull;
static double urand(void) { /* xorshift64, [0, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / 9007199254740992.0;
}

static luon_tensor *rnd(int32_t dt, int nd, const int64_t *shape, double lo, double hi) {
  int64_t n = lu_numel(nd, shape);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t j = 0; j < n; j++) v[j] = lo + (hi - lo) * urand();
  luon_tensor *t = mk(dt, nd, shape, v);
  free(v);
  return t;
}

/* Element j (row-major) of a CPU float tensor, through its strides. */
static double at(const luon_tensor *t, int64_t j) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (j % t->shape[d]) * t->strides[d];
    j /= t->shape[d];
  }
  const char *p = lu_data(t);
  switch (t->dtype) {
  case F32: return ((const float *)p)[off];
  case F64: return ((const double *)p)[off];
  case LUON_DTYPE_I64: return (double)((const int64_t *)p)[off];
  default: return (double)((const int32_t *)p)[off];
  }
}

static void setat(luon_tensor *t, int64_t j, double v) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (j % t->shape[d]) * t->strides[d];
    j /= t->shape[d];
  }
  if (t->dtype == F32) ((float *)lu_data(t))[off] = (float)v;
  else ((double *)lu_data(t))[off] = v;
}

static bool close_to(double a, double b, double tol) {
  return fabs(a - b) <= tol * (1 + fabs(b)) || (isnan(a) && isnan(b));
}

/* Every element of t against want[] (n of them). */
#define CHECK_VALS(t, tol, ...)                                                \
  do {                                                                         \
    const double want_[] = {__VA_ARGS__};                                      \
    int64_t n_ = (int64_t)(sizeof want_ / sizeof want_[0]);                    \
    CHECK((t) && (t)->size == n_, "size %lld, want %lld", (t) ? (long long)(t)->size : -1LL, \
          (long long)n_);                                                      \
    for (int64_t j_ = 0; (t) && j_ < n_ && j_ < (t)->size; j_++)               \
      CHECK(close_to(at(t, j_), want_[j_], tol), "element %lld: %.10g, want %.10g", \
            (long long)j_, at(t, j_), want_[j_]);                              \
  } while (0)

static void same(const char *what, const luon_tensor *a, const luon_tensor *b, double tol) {
  CHECK(a && b && a->size == b->size, "%s: sizes differ", what);
  if (!a || !b || a->size != b->size) return;
  for (int64_t j = 0; j < a->size; j++)
    if (!close_to(at(a, j), at(b, j), tol)) {
      CHECK(0, "%s: element %lld: %.12g vs %.12g", what, (long long)j, at(a, j), at(b, j));
      return;
    }
}

/* The ops' slots in registry order (core/luon_ops.def), as the cases below
 * list them: attrs() fills ints and floats from slot 0. */
_Static_assert(LU_LEAKY_SLOPE == 0 && LU_SOFTMAX_AXIS == 0 && LU_DROPOUT_P == 0, "one slot each");
_Static_assert(LU_PICK_AXIS == 0 && LU_PICK_KEEPDIMS == 1 && LU_PICK_MODE == 2 && LU_NI_pick == 3,
               "pick: axis, keepdims, mode; pick_grad: then dx's shape");
_Static_assert(LU_BN_AXIS == 0 && LU_BN_TRAINING == 1 && LU_BN_GLOBAL_STATS == 2 && LU_BN_EPS == 0 &&
                   LU_BN_MOMENTUM == 1 && LU_BN_GRAD_AXIS == 0 && LU_BN_GRAD_BATCH_STATS == 1,
               "batch_norm: axis, training, global stats; eps, momentum; its grad: axis, batch stats");
_Static_assert(LU_OPT_LR == 0 && LU_OPT_WD == 1 && LU_OPT_RESCALE == 2 && LU_OPT_CLIP == 3 &&
                   LU_SGD_MOMENTUM == 4 && LU_ADAM_BETA1 == 4 && LU_ADAM_BETA2 == 5 && LU_ADAM_EPSILON == 6,
               "the updates: lr, wd, rescale, clip, then their own");
static luon_attrs attrs(int ni, const int64_t *i, int nf, const double *f) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = ni;
  for (int k = 0; k < ni; k++) a.i[k] = i[k];
  for (int k = 0; k < nf; k++) a.f[k] = f[k];
  return a;
}

/* Run an op with a known number of outputs; NULLs on failure. */
static luon_status call(int op, int nin, luon_tensor **in, const luon_attrs *a, int nout,
                        luon_tensor **out) {
  for (int k = 0; k < nout; k++) out[k] = NULL;
  int32_t n = nout;
  return luon_op_call(op, nin, in, a, &n, out);
}

static luon_tensor *run1(int op, int nin, luon_tensor **in, const luon_attrs *a) {
  luon_tensor *o = NULL;
  CHECK_OK(call(op, nin, in, a, 1, &o));
  return o;
}

static void rel(int n, luon_tensor **t) {
  for (int k = 0; k < n; k++) luon_tensor_release(t[k]);
}

/* ---- finite differences ------------------------------------------------------------ */

/* sum(out0 * w) of one forward; reseed first when the op draws. */
static double loss(int op, int nin, luon_tensor **in, const luon_attrs *a, int nout,
                   const luon_tensor *w, bool reseed) {
  luon_tensor *out[4];
  if (reseed) luon_random_seed(1234);
  if (call(op, nin, in, a, nout, out) != LUON_OK) {
    CHECK(0, "forward of %s failed: %s", luon_op_name(op), luon_last_error());
    return NAN;
  }
  double s = 0;
  for (int64_t j = 0; j < out[0]->size; j++) s += at(out[0], j) * at(w, j);
  rel(nout, out);
  return s;
}

/* The backward lu_grad_<op> against central differences of sum(out0 * w),
 * for the float64 inputs marked in check[]. */
static void gradcheck(int op, int nin, luon_tensor **in, const luon_attrs *a, int nout,
                      const bool *check, bool reseed) {
  const char *name = luon_op_name(op);
  luon_tensor *out[4] = {NULL, NULL, NULL, NULL};
  if (reseed) luon_random_seed(1234);
  CHECK_OK(call(op, nin, in, a, nout, out));
  if (!out[0]) return;
  luon_tensor *w = rnd(F64, out[0]->ndim, out[0]->shape, -1, 1);
  luon_tensor *dout[4] = {w, NULL, NULL, NULL};
  luon_tensor *din[LUON_MAX_OP_INPUTS] = {NULL};
  lu_grad_call g = {op, a, nin, nout, in, out, dout, check, din};
  CHECK(lu_ops[op].grad != NULL, "%s has no backward", name);
  if (lu_ops[op].grad) CHECK_OK(lu_ops[op].grad(&g));
  const double h = 1e-6;
  for (int i = 0; i < nin; i++) {
    if (!check[i]) {
      CHECK(din[i] == NULL, "%s: input %d got a gradient it should not", name, i);
      continue;
    }
    CHECK(din[i] != NULL, "%s: no gradient for input %d", name, i);
    if (!din[i]) continue;
    CHECK(din[i]->size == in[i]->size, "%s: gradient %d has %lld elements, want %lld", name, i,
          (long long)din[i]->size, (long long)in[i]->size);
    int bad = 0;
    for (int64_t j = 0; j < in[i]->size && bad < 3; j++) {
      double x0 = at(in[i], j);
      setat(in[i], j, x0 + h);
      double lp = loss(op, nin, in, a, nout, w, reseed);
      setat(in[i], j, x0 - h);
      double lm = loss(op, nin, in, a, nout, w, reseed);
      setat(in[i], j, x0);
      double num = (lp - lm) / (2 * h), ana = at(din[i], j);
      if (!(fabs(num - ana) <= 1e-6 * (1 + fabs(num)))) {
        bad++;
        CHECK(0, "%s: d/d input %d element %lld: analytic %.10g, numeric %.10g", name, i,
              (long long)j, ana, num);
      }
    }
  }
  rel(nout, out);
  rel(nin, din);
  luon_tensor_release(w);
}

/* ---- activations ------------------------------------------------------------------- */

static void test_activations(void) {
  for (int dt = F32; dt <= F64; dt++) {
    double tol = dt == F32 ? 1e-6 : 1e-12;
    luon_tensor *x = mk(dt, 1, SH(5), V(-100, -1, 0, 1, 100));
    luon_tensor *o = run1(LU_OP_softrelu, 1, &x, NULL);
    CHECK_VALS(o, tol, 3.720075976020836e-44, 0.31326168751822286, 0.6931471805599453,
               1.3132616875182228, 100);
    CHECK(o && o->dtype == dt, "softrelu keeps the dtype");
    luon_tensor_release(o);
    luon_attrs a = attrs(0, NULL, 1, V(0.1));
    o = run1(LU_OP_leaky_relu, 1, &x, &a);
    CHECK_VALS(o, tol, -10, -0.1, 0, 1, 100);
    luon_tensor_release(o);

    luon_tensor *dy = mk(dt, 1, SH(5), V(2, 2, 2, 2, 2));
    luon_tensor *xi[2] = {x, dy};
    o = run1(LU_OP_relu_grad, 2, xi, NULL);
    CHECK_VALS(o, tol, 0, 0, 0, 2, 2);
    luon_tensor_release(o);
    o = run1(LU_OP_softrelu_grad, 2, xi, NULL);
    CHECK_VALS(o, tol, 2 * 3.720075976020836e-44, 2 * 0.2689414213699951, 1, 2 * 0.7310585786300049, 2);
    luon_tensor_release(o);
    o = run1(LU_OP_leaky_relu_grad, 2, xi, &a);
    CHECK_VALS(o, tol, 0.2, 0.2, 0.2, 2, 2);
    luon_tensor_release(o);

    luon_tensor *y = mk(dt, 1, SH(3), V(0.5, 0.25, -0.5));
    luon_tensor *d3 = mk(dt, 1, SH(3), V(2, 4, 1));
    luon_tensor *yi[2] = {y, d3};
    o = run1(LU_OP_sigmoid_grad, 2, yi, NULL);
    CHECK_VALS(o, tol, 0.5, 0.75, -0.75);
    luon_tensor_release(o);
    o = run1(LU_OP_tanh_grad, 2, yi, NULL);
    CHECK_VALS(o, tol, 1.5, 3.75, 0.75);
    luon_tensor_release(o);
    rel(2, (luon_tensor *[]){y, d3});
    rel(2, xi);
  }

  /* strided input (a transposed view) and a strided out= */
  luon_tensor *x = rnd(F64, 2, SH(37, 53), -3, 3), *xt = NULL, *ot = NULL, *o2 = NULL;
  CHECK_OK(luon_tensor_view(x, 2, SH(53, 37), SH(1, 53), 0, &xt));
  luon_tensor *o = run1(LU_OP_softrelu, 1, &xt, NULL);
  for (int64_t r = 0; r < 53 && o; r++)
    for (int64_t s = 0; s < 37; s++) {
      double v = at(x, s * 53 + r), want = log1p(exp(v));
      if (!close_to(at(o, r * 37 + s), want, 1e-12)) {
        CHECK(0, "softrelu strided (%lld,%lld): %g want %g", (long long)r, (long long)s,
              at(o, r * 37 + s), want);
        r = 53;
        break;
      }
    }
  CHECK_OK(luon_tensor_empty(F64, 2, SH(37, 53), LUON_CPU, 0, &o2));
  CHECK_OK(luon_tensor_view(o2, 2, SH(53, 37), SH(1, 53), 0, &ot));
  int32_t one = 1;
  luon_tensor *outs[1] = {ot};
  CHECK_OK(luon_op_call(LU_OP_softrelu, 1, &xt, NULL, &one, outs));
  CHECK(outs[0] == ot, "out= is returned");
  luon_tensor_release(outs[0]); /* the +1 the call returned */
  same("softrelu into a strided out=", ot, o, 1e-15);
  rel(5, (luon_tensor *[]){x, xt, o, ot, o2});

  /* gradients (points away from leaky_relu's kink at 0) */
  luon_tensor *xg = rnd(F64, 2, SH(3, 4), -3, 3);
  luon_attrs none = attrs(0, NULL, 0, NULL), slope = attrs(0, NULL, 1, V(0.2));
  gradcheck(LU_OP_softrelu, 1, &xg, &none, 1, (bool[]){true}, false);
  gradcheck(LU_OP_leaky_relu, 1, &xg, &slope, 1, (bool[]){true}, false);
  luon_tensor_release(xg);

  /* large: the threaded, vectorised path against the formula */
  luon_tensor *big = rnd(F32, 1, SH(100003), -5, 5), *dy = rnd(F32, 1, SH(100003), -1, 1);
  luon_tensor *bi[2] = {big, dy};
  luon_attrs a = attrs(0, NULL, 1, V(0.25));
  o = run1(LU_OP_leaky_relu_grad, 2, bi, &a);
  int bad = 0;
  for (int64_t j = 0; o && j < big->size && bad < 3; j++) {
    double want = at(big, j) > 0 ? at(dy, j) : 0.25f * (float)at(dy, j);
    if (!close_to(at(o, j), want, 1e-7)) {
      bad++;
      CHECK(0, "leaky_relu_grad big %lld", (long long)j);
    }
  }
  rel(3, (luon_tensor *[]){big, dy, o});
}

/* ---- softmax family ------------------------------------------------------------- */

/* Naive softmax / log_softmax of x (any shape, f64 reads) along axis into want[]. */
static void ref_softmax(const luon_tensor *x, int axis, bool logp, double *want) {
  int64_t L = x->shape[axis], inner = 1;
  for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
  int64_t outer = x->size / (L * inner);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < L; j++) mx = fmax(mx, at(x, (o * L + j) * inner + i));
      for (int64_t j = 0; j < L; j++) s += exp(at(x, (o * L + j) * inner + i) - mx);
      for (int64_t j = 0; j < L; j++) {
        double v = at(x, (o * L + j) * inner + i) - mx;
        want[(o * L + j) * inner + i] = logp ? v - log(s) : exp(v) / s;
      }
    }
}

static void test_softmax(void) {
  for (int dt = F32; dt <= F64; dt++) {
    double tol = dt == F32 ? 1e-6 : 1e-12;
    luon_tensor *x = mk(dt, 2, SH(2, 3), V(0, 1, 2, 1000, 1000, 1000));
    luon_tensor *o = run1(LU_OP_softmax, 1, &x, NULL); /* default axis -1 */
    CHECK_VALS(o, tol, 0.09003057317038046, 0.24472847105479764, 0.6652409557748219, 1. / 3,
               1. / 3, 1. / 3);
    luon_tensor_release(o);
    o = run1(LU_OP_log_softmax, 1, &x, NULL);
    CHECK_VALS(o, tol, -2.4076059644443806, -1.4076059644443806, -0.4076059644443806,
               -log(3.0), -log(3.0), -log(3.0));
    /* SoftmaxCrossEntropyLoss reference: pred [[0,2],[1,4]], label [0,1] */
    luon_tensor_release(o);
    rel(1, &x);
    luon_tensor *p = mk(dt, 2, SH(2, 2), V(0, 2, 1, 4)), *lab = mk(dt, 1, SH(2), V(0, 1));
    luon_attrs ax1 = attrs(1, SH(1), 0, NULL);
    luon_tensor *ls = run1(LU_OP_log_softmax, 1, &p, &ax1);
    luon_tensor *pi[2] = {ls, lab};
    luon_attrs pa = attrs(3, SH(-1, 0, 0), 0, NULL);
    o = run1(LU_OP_pick, 2, pi, &pa);
    CHECK_VALS(o, tol, -2.1269280110429722, -0.04858735157374217); /* MXNet: 2.12692809, 0.04858733 */
    rel(4, (luon_tensor *[]){p, lab, ls, o});

    /* grads on hand values: y = [0.2, 0.3, 0.5], dy = [1, 0, 2]: sum(dy*y) = 1.2 */
    luon_tensor *y = mk(dt, 1, SH(3), V(0.2, 0.3, 0.5)), *dy = mk(dt, 1, SH(3), V(1, 0, 2));
    luon_tensor *yi[2] = {y, dy};
    o = run1(LU_OP_softmax_grad, 2, yi, NULL);
    CHECK_VALS(o, tol, 0.2 * -0.2, 0.3 * -1.2, 0.5 * 0.8);
    luon_tensor_release(o);
    o = run1(LU_OP_log_softmax_grad, 2, yi, NULL);
    CHECK_VALS(o, tol, 1 - exp(0.2) * 3, 0 - exp(0.3) * 3, 2 - exp(0.5) * 3);
    rel(3, (luon_tensor *[]){y, dy, o});
  }

  /* every axis of an odd 3-d shape, lanes wider than one chunk, and strided */
  const int64_t shapes[3][3] = {{3, 5, 7}, {2, 5, 100}, {130, 3, 2}};
  for (int s = 0; s < 3; s++)
    for (int ax = -3; ax < 3; ax++)
      for (int logp = 0; logp < 2; logp++) {
        luon_tensor *x = rnd(F64, 3, shapes[s], -4, 4);
        double *want = malloc(sizeof(double) * (size_t)x->size);
        ref_softmax(x, ax < 0 ? ax + 3 : ax, logp, want);
        luon_attrs a = attrs(1, SH(ax), 0, NULL);
        luon_tensor *o = run1(logp ? LU_OP_log_softmax : LU_OP_softmax, 1, &x, &a);
        luon_tensor *w = mk(F64, 3, shapes[s], want);
        same(logp ? "log_softmax vs reference" : "softmax vs reference", o, w, 1e-12);
        rel(3, (luon_tensor *[]){x, o, w});
        free(want);
      }
  luon_tensor *x = rnd(F64, 2, SH(6, 9), -3, 3), *xt = NULL;
  CHECK_OK(luon_tensor_view(x, 2, SH(9, 6), SH(1, 9), 0, &xt));
  for (int ax = 0; ax < 2; ax++) {
    luon_attrs a = attrs(1, SH(ax), 0, NULL);
    luon_attrs cp = attrs(0, NULL, 0, NULL);
    luon_tensor *xc = run1(LU_OP_copy, 1, &xt, &cp);
    luon_tensor *o1 = run1(LU_OP_softmax, 1, &xt, &a), *o2 = run1(LU_OP_softmax, 1, &xc, &a);
    same("softmax of a transposed view", o1, o2, 1e-14);
    rel(3, (luon_tensor *[]){xc, o1, o2});
  }
  rel(2, (luon_tensor *[]){x, xt});

  /* gradients */
  for (int ax = -1; ax < 3; ax++) {
    luon_tensor *xx = rnd(F64, 3, SH(2, 3, 4), -2, 2);
    luon_attrs a = attrs(1, SH(ax), 0, NULL);
    gradcheck(LU_OP_softmax, 1, &xx, &a, 1, (bool[]){true}, false);
    gradcheck(LU_OP_log_softmax, 1, &xx, &a, 1, (bool[]){true}, false);
    luon_tensor_release(xx);
  }
}

/* ---- pick ------------------------------------------------------------------------ */

static void test_pick(void) {
  luon_tensor *x = mk(F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  const int32_t idts[4] = {F32, F64, LUON_DTYPE_I32, LUON_DTYPE_I64};
  for (int k = 0; k < 4; k++) {
    luon_tensor *idx = mk(idts[k], 1, SH(2), V(5, -1)), *in[2] = {x, idx};
    luon_attrs clip = attrs(3, SH(1, 0, 0), 0, NULL), wrap = attrs(3, SH(-1, 0, 1), 0, NULL);
    luon_tensor *o = run1(LU_OP_pick, 2, in, &clip);
    CHECK_VALS(o, 0, 3, 4);
    CHECK(o && o->ndim == 1 && o->dtype == F32, "pick drops the axis");
    luon_tensor_release(o);
    o = run1(LU_OP_pick, 2, in, &wrap);
    CHECK_VALS(o, 0, 3, 6);
    luon_tensor_release(o);
    luon_tensor_release(idx);
  }
  /* float indices truncate; keepdims; axis 0 */
  luon_tensor *idx = mk(F32, 1, SH(3), V(1.9, 0.2, 1.5)), *in[2] = {x, idx};
  luon_attrs a0 = attrs(3, SH(0, 1, 0), 0, NULL);
  luon_tensor *o = run1(LU_OP_pick, 2, in, &a0);
  CHECK_VALS(o, 0, 4, 2, 6);
  CHECK(o && o->ndim == 2 && o->shape[0] == 1 && o->shape[1] == 3, "keepdims shape");
  luon_tensor_release(o);
  luon_tensor_release(idx);
  /* an index in the keepdims shape is accepted too */
  idx = mk(F64, 2, SH(2, 1), V(2, 0));
  in[1] = idx;
  luon_attrs a1 = attrs(3, SH(1, 0, 0), 0, NULL);
  o = run1(LU_OP_pick, 2, in, &a1);
  CHECK_VALS(o, 0, 3, 4);
  luon_tensor_release(o);

  /* pick_grad: dy [1, 2], index [2, 0] into (2,3) */
  luon_tensor *dy = mk(F64, 1, SH(2), V(1, 2)), *gi[2] = {dy, idx};
  luon_attrs ga = attrs(5, SH(1, 0, 0, 2, 3), 0, NULL);
  o = run1(LU_OP_pick_grad, 2, gi, &ga);
  CHECK_VALS(o, 0, 0, 0, 1, 2, 0, 0);
  rel(4, (luon_tensor *[]){o, dy, idx, x});

  /* gradient along each axis, clip and wrap, index with out-of-range values */
  for (int ax = 0; ax < 3; ax++)
    for (int mode = 0; mode < 2; mode++) {
      int64_t shp[3] = {3, 4, 5}, ish[2];
      for (int d = 0, s = 0; d < 3; d++)
        if (d != ax) ish[s++] = shp[d];
      luon_tensor *xx = rnd(F64, 3, shp, -1, 1), *ii = rnd(F64, 2, ish, -3, 8);
      luon_tensor *pin[2] = {xx, ii};
      luon_attrs a = attrs(3, SH(ax, mode, mode), 0, NULL);
      gradcheck(LU_OP_pick, 2, pin, &a, 1, (bool[]){true, false}, false);
      rel(2, pin);
    }
}

/* ---- dropout ------------------------------------------------------------------- */

static void test_dropout(void) {
  luon_tensor *x = rnd(F32, 2, SH(100, 1001), 1, 2), *o1[2], *o2[2], *o3[2];
  luon_attrs a = attrs(0, NULL, 1, V(0.3));
  luon_random_seed(7);
  CHECK_OK(call(LU_OP_dropout, 1, &x, &a, 2, o1));
  int64_t kept = 0;
  int bad = 0;
  for (int64_t j = 0; o1[1] && j < x->size && bad < 3; j++) {
    double m = at(o1[1], j), y = at(o1[0], j);
    if (m != 0) kept++;
    if (!(m == 0 || close_to(m, 1 / 0.7, 1e-6)) || !close_to(y, at(x, j) * m, 1e-6)) {
      bad++;
      CHECK(0, "dropout element %lld: mask %g y %g x %g", (long long)j, m, y, at(x, j));
    }
  }
  double frac = (double)kept / (double)x->size;
  CHECK(fabs(frac - 0.7) < 0.01, "kept fraction %g, want 0.7", frac);
  /* the same seed gives the same mask on one thread as on many */
  int nt = luon_get_num_threads();
  luon_set_num_threads(1);
  luon_random_seed(7);
  CHECK_OK(call(LU_OP_dropout, 1, &x, &a, 2, o2));
  luon_set_num_threads(nt > 1 ? nt : 4);
  luon_random_seed(7);
  CHECK_OK(call(LU_OP_dropout, 1, &x, &a, 2, o3));
  luon_set_num_threads(nt);
  same("dropout mask, 1 thread", o1[1], o2[1], 0);
  same("dropout mask, many threads", o1[1], o3[1], 0);
  /* the next call draws new numbers */
  rel(2, o2);
  CHECK_OK(call(LU_OP_dropout, 1, &x, &a, 2, o2));
  bool differ = false;
  for (int64_t j = 0; o2[1] && j < x->size && !differ; j++) differ = at(o1[1], j) != at(o2[1], j);
  CHECK(differ, "two draws gave the same mask");
  rel(2, o1);
  rel(2, o2);
  rel(2, o3);

  /* a strided input gives the mask of its row-major order */
  luon_tensor *xt = NULL, *xc;
  CHECK_OK(luon_tensor_view(x, 2, SH(1001, 100), SH(1, 1001), 0, &xt));
  xc = run1(LU_OP_copy, 1, &xt, NULL);
  luon_random_seed(9);
  CHECK_OK(call(LU_OP_dropout, 1, &xt, &a, 2, o1));
  luon_random_seed(9);
  CHECK_OK(call(LU_OP_dropout, 1, &xc, &a, 2, o2));
  same("dropout of a strided view: y", o1[0], o2[0], 0);
  same("dropout of a strided view: mask", o1[1], o2[1], 0);
  rel(2, o1);
  rel(2, o2);
  rel(3, (luon_tensor *[]){xt, xc, x});

  /* p = 0: all kept; p = 1: all dropped */
  x = mk(F64, 1, SH(4), V(1, -2, 3, 4));
  a.f[LU_DROPOUT_P] = 0;
  CHECK_OK(call(LU_OP_dropout, 1, &x, &a, 2, o1));
  CHECK_VALS(o1[0], 0, 1, -2, 3, 4);
  CHECK_VALS(o1[1], 0, 1, 1, 1, 1);
  rel(2, o1);
  a.f[LU_DROPOUT_P] = 1;
  CHECK_OK(call(LU_OP_dropout, 1, &x, &a, 2, o1));
  CHECK_VALS(o1[0], 0, 0, 0, 0, 0);
  rel(2, o1);
  luon_tensor_release(x);

  x = rnd(F64, 2, SH(3, 7), -1, 1);
  a.f[LU_DROPOUT_P] = 0.5;
  gradcheck(LU_OP_dropout, 1, &x, &a, 2, (bool[]){true}, true);
  luon_tensor_release(x);
}

/* ---- batch_norm ---------------------------------------------------------------- */

/* Naive training-mode batch norm of (N, C, S) along axis 1 into y (f64). */
static void ref_bn(const luon_tensor *x, const double *gamma, const double *beta, double eps,
                   double *y, double *mean, double *var) {
  int64_t N = x->shape[0], C = x->shape[1], S = x->size / (N * C);
  for (int64_t c = 0; c < C; c++) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) s += at(x, (n * C + c) * S + k);
    double m = s / (double)(N * S);
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) q += pow(at(x, (n * C + c) * S + k) - m, 2);
    double v = q / (double)(N * S);
    mean[c] = m;
    var[c] = v;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) {
        int64_t j = (n * C + c) * S + k;
        y[j] = gamma[c] * (at(x, j) - m) / sqrt(v + eps) + beta[c];
      }
  }
}

static void test_batch_norm(void) {
  for (int dt = F32; dt <= F64; dt++) {
    double tol = dt == F32 ? 1e-6 : 1e-12;
    luon_tensor *x = mk(dt, 2, SH(2, 2), V(1, 10, 3, 30));
    luon_tensor *g = mk(dt, 1, SH(2), V(1, 2)), *b = mk(dt, 1, SH(2), V(0, 1));
    luon_tensor *rm = mk(dt, 1, SH(2), V(0, 0)), *rv = mk(dt, 1, SH(2), V(1, 1));
    luon_tensor *in[5] = {x, g, b, rm, rv}, *out[3];
    luon_attrs tr = attrs(3, SH(1, 1, 0), 2, V(0, 0.9));
    CHECK_OK(call(LU_OP_batch_norm, 5, in, &tr, 3, out));
    CHECK_VALS(out[0], tol, -1, -1, 1, 3);
    CHECK_VALS(out[1], tol, 2, 20);
    CHECK_VALS(out[2], tol, 1, 0.1);
    CHECK_VALS(rm, tol, 0.2, 2);
    CHECK_VALS(rv, tol, 1.0, 10.9);
    rel(3, out);
    /* inference: the running statistics, untouched */
    luon_tensor *rm2 = mk(dt, 1, SH(2), V(1, 2)), *rv2 = mk(dt, 1, SH(2), V(4, 16));
    in[3] = rm2;
    in[4] = rv2;
    luon_attrs inf = attrs(3, SH(1, 0, 0), 2, V(0, 0.9));
    CHECK_OK(call(LU_OP_batch_norm, 5, in, &inf, 3, out));
    CHECK_VALS(out[0], tol, 0, 5, 1, 15);
    CHECK_VALS(out[1], tol, 1, 2);
    CHECK_VALS(out[2], tol, 0.5, 0.25);
    CHECK_VALS(rm2, 0, 1, 2);
    CHECK_VALS(rv2, 0, 4, 16);
    rel(3, out);
    /* use_global_stats while training: the same as inference */
    luon_attrs gs = attrs(3, SH(1, 1, 1), 2, V(0, 0.9));
    CHECK_OK(call(LU_OP_batch_norm, 5, in, &gs, 3, out));
    CHECK_VALS(out[0], tol, 0, 5, 1, 15);
    CHECK_VALS(rm2, 0, 1, 2);
    rel(3, out);
    /* backward by hand, inference: dx = dy * gamma * invstd */
    luon_tensor *dy = mk(dt, 2, SH(2, 2), V(1, 2, 3, 4)), *mean = mk(dt, 1, SH(2), V(1, 2));
    luon_tensor *inv = mk(dt, 1, SH(2), V(0.5, 0.25));
    luon_tensor *gin[5] = {x, dy, g, mean, inv};
    luon_attrs ga = attrs(2, SH(1, 0), 0, NULL);
    CHECK_OK(call(LU_OP_batch_norm_grad, 5, gin, &ga, 3, out));
    CHECK_VALS(out[0], tol, 0.5, 1, 1.5, 2);
    /* dgamma = sum(dy * (x - mean) * invstd), dbeta = sum(dy) */
    CHECK_VALS(out[1], tol, (1 * 0 + 3 * 2) * 0.5, (2 * 8 + 4 * 28) * 0.25);
    CHECK_VALS(out[2], tol, 4, 6);
    rel(3, out);
    rel(10, (luon_tensor *[]){x, g, b, rm, rv, rm2, rv2, dy, mean, inv});
  }

  /* (N,C,H,W) against the naive reference, float32 and float64, with many
   * channels (threads) and through a strided view of x */
  for (int dt = F32; dt <= F64; dt++) {
    const int64_t shp[4] = {3, 70, 5, 9};
    luon_tensor *x = rnd(dt, 4, shp, -2, 5);
    double gv[70], bv[70], zero[70], ones[70], *y = malloc(sizeof(double) * (size_t)x->size);
    double mean[70], var[70];
    for (int c = 0; c < 70; c++) gv[c] = urand() + 0.5, bv[c] = urand() - 0.5, zero[c] = 0, ones[c] = 1;
    luon_tensor *g = mk(dt, 1, SH(70), gv), *b = mk(dt, 1, SH(70), bv);
    luon_tensor *rm = mk(dt, 1, SH(70), zero), *rv = mk(dt, 1, SH(70), ones);
    ref_bn(x, gv, bv, 1e-5, y, mean, var);
    luon_tensor *want = mk(F64, 4, shp, y);
    luon_tensor *in[5] = {x, g, b, rm, rv}, *out[3];
    luon_attrs tr = attrs(3, SH(1, 1, 0), 2, V(1e-5, 0.9));
    CHECK_OK(call(LU_OP_batch_norm, 5, in, &tr, 3, out));
    double tol = dt == F32 ? 2e-5 : 1e-11;
    same("batch_norm vs reference", out[0], want, tol);
    for (int c = 0; c < 70; c++) {
      CHECK(close_to(at(out[1], c), mean[c], tol), "mean %d", c);
      CHECK(close_to(at(out[2], c), 1 / sqrt(var[c] + 1e-5), tol), "invstd %d", c);
      CHECK(close_to(at(rm, c), 0.1 * mean[c], tol), "running_mean %d", c);
      CHECK(close_to(at(rv, c), 0.9 + 0.1 * var[c], tol), "running_var %d", c);
    }
    rel(3, out);
    /* x as a (N,H,W,C) buffer seen through a permuted view, axis 1 */
    luon_tensor *base = NULL, *xv = NULL;
    CHECK_OK(luon_tensor_empty(dt, 4, SH(3, 5, 9, 70), LUON_CPU, 0, &base));
    CHECK_OK(luon_tensor_view(base, 4, shp, SH(5 * 9 * 70, 1, 9 * 70, 70), 0, &xv));
    CHECK_OK(luon_tensor_copy(xv, x));
    in[0] = xv;
    CHECK_OK(call(LU_OP_batch_norm, 5, in, &tr, 3, out));
    same("batch_norm of a strided view", out[0], want, tol);
    rel(3, out);
    /* channels last: axis -1 of the NHWC buffer itself */
    in[0] = base;
    luon_attrs tl = attrs(3, SH(-1, 1, 0), 2, V(1e-5, 0.9));
    CHECK_OK(call(LU_OP_batch_norm, 5, in, &tl, 3, out));
    luon_tensor *yv = NULL;
    if (out[0]) CHECK_OK(luon_tensor_view(out[0], 4, shp, SH(5 * 9 * 70, 1, 9 * 70, 70), 0, &yv));
    same("batch_norm along the last axis", yv, want, tol);
    rel(4, (luon_tensor *[]){out[0], out[1], out[2], yv});
    rel(9, (luon_tensor *[]){x, g, b, rm, rv, want, base, xv, NULL});
    free(y);
  }

  /* gradients: training (batch statistics) and inference, axis 1 and -1 */
  for (int mode = 0; mode < 3; mode++) {
    int64_t axis = mode == 2 ? -1 : 1;
    luon_tensor *x = rnd(F64, 3, SH(4, 3, 5), -1, 2), *g = rnd(F64, 1, SH(axis == 1 ? 3 : 5), 0.5, 1.5);
    int64_t C = g->shape[0];
    luon_tensor *b = rnd(F64, 1, SH(C), -1, 1), *rm = rnd(F64, 1, SH(C), -0.5, 0.5);
    luon_tensor *rv = rnd(F64, 1, SH(C), 0.5, 1.5);
    luon_tensor *in[5] = {x, g, b, rm, rv};
    luon_attrs a = attrs(3, SH(axis, mode != 1, 0), 2, V(1e-3, 0.9));
    gradcheck(LU_OP_batch_norm, 5, in, &a, 3, (bool[]){true, true, true, false, false}, false);
    rel(5, in);
  }
}

/* ---- optimizers ------------------------------------------------------------------ */

static void test_optim(void) {
  for (int dt = F32; dt <= F64; dt++) {
    double tol = dt == F32 ? 1e-6 : 1e-12;
    /* lr 0.1, wd 0.01, rescale 0.5, clip 1: g' = clip(0.5 g, 1) + 0.01 w */
    luon_tensor *w = mk(dt, 1, SH(2), V(1, -2)), *g = mk(dt, 1, SH(2), V(0.5, 4));
    luon_attrs a = attrs(0, NULL, 5, V(0.1, 0.01, 0.5, 1, 0));
    luon_tensor *in[4] = {w, g, NULL, NULL}, *out[1];
    CHECK_OK(call(LU_OP_sgd_update, 2, in, &a, 1, out));
    CHECK(out[0] == w, "sgd_update returns the weight");
    luon_tensor_release(out[0]);
    CHECK_VALS(w, tol, 0.974, -2.098);
    out[0] = w; /* out= the weight itself is allowed */
    int32_t one = 1;
    CHECK_OK(luon_op_call(LU_OP_sgd_update, 2, in, &a, &one, out));
    luon_tensor_release(out[0]);
    CHECK_VALS(w, tol, 0.948026, -2.195902);
    luon_tensor_release(w);

    w = mk(dt, 1, SH(2), V(1, -2));
    luon_tensor *mom = mk(dt, 1, SH(2), V(0, 0));
    in[0] = w;
    in[2] = mom;
    a.f[LU_SGD_MOMENTUM] = 0.9;
    for (int s = 0; s < 2; s++) {
      CHECK_OK(call(LU_OP_sgd_mom_update, 3, in, &a, 1, out));
      luon_tensor_release(out[0]);
    }
    CHECK_VALS(w, tol, 0.924626, -2.284102);
    CHECK_VALS(mom, tol, -0.049374, -0.186102);
    rel(2, (luon_tensor *[]){w, mom});

    w = mk(dt, 1, SH(2), V(1, -2));
    luon_tensor *m = mk(dt, 1, SH(2), V(0, 0)), *v = mk(dt, 1, SH(2), V(0, 0));
    in[0] = w;
    in[2] = m;
    in[3] = v;
    /* adam clips after adding wd (MXNet's adam_update): g' = clip(0.5 g + 0.01 w, 1),
     * so the second element is clipped to 1 (clip first would give 0.98) */
    luon_attrs aa = attrs(0, NULL, 7, V(0.01, 0.01, 0.5, 1, 0.9, 0.999, 1e-8));
    CHECK_OK(call(LU_OP_adam_update, 4, in, &aa, 1, out));
    luon_tensor_release(out[0]);
    CHECK_VALS(w, tol, 0.96837726185980788, -2.0316227666016871);
    CHECK_VALS(v, tol, 6.76e-05, 0.001);
    CHECK_OK(call(LU_OP_adam_update, 4, in, &aa, 1, out));
    luon_tensor_release(out[0]);
    CHECK_VALS(w, tol, 0.92588273747620897, -2.0741186739769821);
    CHECK_VALS(m, tol, 0.049368377261859817, 0.19);
    CHECK_VALS(v, tol, 0.00013496806176142777, 0.001999);
    rel(4, (luon_tensor *[]){w, g, m, v});
  }
  /* no clipping (clip < 0), long and strided: against the formula */
  for (int strided = 0; strided < 2; strided++) {
    luon_tensor *w0 = rnd(F32, 2, SH(301, 117), -1, 1), *g0 = rnd(F32, 2, SH(301, 117), -50, 50);
    luon_tensor *w = w0, *g = g0;
    if (strided) {
      CHECK_OK(luon_tensor_view(w0, 2, SH(117, 301), SH(1, 117), 0, &w));
      CHECK_OK(luon_tensor_view(g0, 2, SH(117, 301), SH(1, 117), 0, &g));
    }
    double *before = malloc(sizeof(double) * (size_t)w->size);
    for (int64_t j = 0; j < w->size; j++) before[j] = at(w, j);
    luon_attrs a = attrs(0, NULL, 4, V(0.1, 0.001, 0.25, -1));
    luon_tensor *in[2] = {w, g}, *out[1];
    CHECK_OK(call(LU_OP_sgd_update, 2, in, &a, 1, out));
    luon_tensor_release(out[0]);
    int bad = 0;
    for (int64_t j = 0; j < w->size && bad < 3; j++) {
      float gw = 0.25f * (float)at(g, j) + 0.001f * (float)before[j];
      double want = (float)before[j] - 0.1f * gw;
      if (!close_to(at(w, j), want, 1e-6)) {
        bad++;
        CHECK(0, "sgd %lld: %g want %g", (long long)j, at(w, j), want);
      }
    }
    /* adam, clipping after adding wd (first step from zero states: m = .1 g', v = .001 g'^2) */
    for (int64_t j = 0; j < w->size; j++) before[j] = at(w, j);
    luon_tensor *m = rnd(F32, 2, w->shape, 0, 0), *v = rnd(F32, 2, w->shape, 0, 0);
    luon_attrs aa = attrs(0, NULL, 7, V(0.1, 0.5, 0.25, 1, 0.9, 0.999, 1e-8));
    luon_tensor *ain[4] = {w, g, m, v};
    CHECK_OK(call(LU_OP_adam_update, 4, ain, &aa, 1, out));
    luon_tensor_release(out[0]);
    for (int64_t j = 0; j < w->size && bad < 6; j++) {
      float gg = 0.25f * (float)at(g, j) + 0.5f * (float)before[j];
      gg = gg > 1 ? 1 : gg < -1 ? -1 : gg;
      float mj = (1 - 0.9f) * gg, vj = (1 - 0.999f) * gg * gg; /* as the kernel rounds */
      double want = (float)before[j] - 0.1f * mj / (sqrtf(vj) + 1e-8f);
      if (!close_to(at(w, j), want, 1e-6)) {
        bad++;
        CHECK(0, "adam %lld: %g want %g", (long long)j, at(w, j), want);
      }
    }
    rel(2, (luon_tensor *[]){m, v});
    free(before);
    if (strided) rel(2, (luon_tensor *[]){w, g});
    rel(2, (luon_tensor *[]){w0, g0});
  }
}

/* ---- errors -------------------------------------------------------------------- */

static void expect(luon_status got, luon_status want, const char *needle) {
  CHECK(got == want, "status %d, want %d (%s)", (int)got, (int)want, luon_last_error());
  CHECK(strstr(luon_last_error(), needle) != NULL, "message '%s' lacks '%s'", luon_last_error(), needle);
}

static void test_errors(void) {
  luon_tensor *xi = mk(LUON_DTYPE_I32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_tensor *x = mk(F32, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6)), *xd = mk(F64, 2, SH(2, 3), V(1, 2, 3, 4, 5, 6));
  luon_tensor *o[3];
  expect(call(LU_OP_softmax, 1, &xi, NULL, 1, o), LUON_EDTYPE, "softmax: x is int32");
  luon_attrs a5 = attrs(1, SH(5), 0, NULL);
  expect(call(LU_OP_log_softmax, 1, &x, &a5, 1, o), LUON_ESHAPE, "log_softmax: axis 5");
  luon_tensor *p2[2] = {x, xd};
  expect(call(LU_OP_relu_grad, 2, p2, NULL, 1, o), LUON_EDTYPE, "relu_grad: x is float32 but dy is float64");
  luon_tensor *y3 = mk(F32, 1, SH(3), V(1, 2, 3)), *p3[2] = {x, y3};
  expect(call(LU_OP_softmax_grad, 2, p3, NULL, 1, o), LUON_ESHAPE, "softmax_grad: y has shape (2,3) but dy has shape (3,)");
  luon_attrs d = attrs(0, NULL, 1, V(1.5));
  expect(call(LU_OP_dropout, 1, &x, &d, 2, o), LUON_EINVAL, "dropout: p = 1.5");
  luon_attrs pa = attrs(3, SH(1, 0, 0), 0, NULL);
  expect(call(LU_OP_pick, 2, p3, &pa, 1, o), LUON_ESHAPE, "pick: index has shape (3,) but x has shape (2,3)");
  luon_attrs pm = attrs(3, SH(1, 0, 7), 0, NULL);
  luon_tensor *i2 = mk(F32, 1, SH(2), V(0, 1)), *pi[2] = {x, i2};
  expect(call(LU_OP_pick, 2, pi, &pm, 1, o), LUON_EINVAL, "pick: mode 7");
  luon_attrs pg = attrs(3, SH(1, 0, 0), 0, NULL);
  expect(call(LU_OP_pick_grad, 2, (luon_tensor *[]){i2, i2}, &pg, 1, o), LUON_EINVAL, "pick_grad: attrs");
  /* batch_norm: gamma of the wrong length, dtype mixes */
  luon_tensor *c2 = mk(F32, 1, SH(2), V(1, 1)), *c3 = mk(F32, 1, SH(3), V(1, 1, 1));
  luon_tensor *bn[5] = {x, c2, c3, c3, c3};
  luon_attrs ba = attrs(3, SH(1, 1, 0), 2, V(1e-5, 0.9));
  expect(call(LU_OP_batch_norm, 5, bn, &ba, 3, o), LUON_ESHAPE, "batch_norm: gamma has shape (2,) but x (2,3) has 3 channels");
  luon_tensor *bi[5] = {xi, c3, c3, c3, c3};
  expect(call(LU_OP_batch_norm, 5, bi, &ba, 3, o), LUON_EDTYPE, "batch_norm: x is int32");
  luon_tensor *bg[5] = {x, xd, c3, c3, c3};
  expect(call(LU_OP_batch_norm_grad, 5, bg, &ba, 3, o), LUON_EDTYPE, "batch_norm_grad: dy is float64");
  /* optimizers */
  luon_tensor *s[2] = {x, y3};
  luon_attrs sa = attrs(0, NULL, 4, V(0.1, 0, 1, -1));
  expect(call(LU_OP_sgd_update, 2, s, &sa, 1, o), LUON_ESHAPE, "sgd_update: grad has shape (3,) but weight has shape (2,3)");
  luon_tensor *ad[4] = {x, x, xd, x};
  expect(call(LU_OP_adam_update, 4, ad, &sa, 1, o), LUON_EDTYPE, "adam_update: mean is float64 but weight is float32");
  luon_tensor *si[2] = {xi, xi};
  expect(call(LU_OP_sgd_update, 2, si, &sa, 1, o), LUON_EDTYPE, "sgd_update: weight is int32");
  /* after a failure the next valid call works */
  CHECK_OK(call(LU_OP_softmax, 1, &x, NULL, 1, o));
  luon_tensor_release(o[0]);
  rel(8, (luon_tensor *[]){xi, x, xd, y3, i2, c2, c3, NULL});
}

int main(void) {
  test_activations();
  test_softmax();
  test_pick();
  test_dropout();
  test_batch_norm();
  test_optim();
  test_errors();
  /* every lu_grad_* of this file is found by the registry */
  const int ops[] = {LU_OP_batch_norm, LU_OP_dropout, LU_OP_softmax, LU_OP_log_softmax,
                     LU_OP_pick, LU_OP_softrelu, LU_OP_leaky_relu};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
    CHECK(lu_ops[ops[k]].grad != NULL, "%s has no backward", luon_op_name(ops[k]));
  return TEST_RESULT;
}
