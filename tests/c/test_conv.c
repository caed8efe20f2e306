/* test_conv.c: conv2d and conv3d and their gradients, max/avg pooling and theirs. Fast
 * kernels against the naive references (LUON_REF_KERNELS=1), gradients
 * against central differences in float64, pooling by hand, error paths. */
#include "internal.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 12345;
static double urand(void) { /* [-1, 1) */
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

static luon_tensor *from(int32_t dt, int nd, const int64_t *shape, const double *v) {
  int64_t n = lu_numel(nd, shape);
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_empty(dt, nd, shape, LUON_CPU, 0, &t));
  if (!t) return NULL;
  for (int64_t k = 0; k < n; k++) {
    if (dt == LUON_DTYPE_F32) ((float *)lu_data(t))[k] = (float)v[k];
    else ((double *)lu_data(t))[k] = v[k];
  }
  return t;
}

static luon_tensor *rnd(int32_t dt, int nd, const int64_t *shape) {
  int64_t n = lu_numel(nd, shape);
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  for (int64_t k = 0; k < n; k++) v[k] = urand();
  luon_tensor *t = from(dt, nd, shape, v);
  free(v);
  return t;
}

/* Contents as doubles (malloc'd). */
static double *vals(const luon_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->size + 1));
  CHECK_OK(luon_tensor_to_host(t, v, LUON_DTYPE_F64, sizeof(double) * (size_t)t->size));
  return v;
}

static luon_tensor *call(int32_t op, const luon_attrs *a, int nin, luon_tensor **in) {
  luon_tensor *out = NULL;
  int32_t nout = 1;
  luon_status s = luon_op_call(op, nin, in, a, &nout, &out);
  CHECK(s == LUON_OK, "%s: %s", luon_op_name(op), luon_last_error());
  return out;
}

/* The op with the fast kernels and with the references; the largest
 * difference relative to max(1, |ref|). */
static double fast_vs_ref(int32_t op, const luon_attrs *a, int nin, luon_tensor **in) {
  luon_tensor *f = call(op, a, nin, in);
  lu_set_ref_kernels(1);
  luon_tensor *r = call(op, a, nin, in);
  lu_set_ref_kernels(0);
  if (!f || !r) return INFINITY;
  double *fv = vals(f), *rv = vals(r), worst = 0;
  for (int64_t k = 0; k < f->size; k++) {
    double d = fabs(fv[k] - rv[k]) / fmax(1.0, fabs(rv[k]));
    if (!(d <= worst)) worst = d;
  }
  free(fv), free(rv);
  luon_tensor_release(f), luon_tensor_release(r);
  return worst;
}

static luon_attrs conv_attrs(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                             int64_t groups) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  int64_t v[7] = {sh, sw, ph, pw, dh, dw, groups};
  memcpy(a.i, v, sizeof v);
  a.ni = 7;
  return a;
}

/* ---- conv2d against the reference ------------------------------------------- */

typedef struct cfg {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G;
  int bias;
  int32_t dt;
} cfg;

/* Both gradients of conv2d(in) (attributes a) against the references, for a
 * random dy: the input's within tol, the weight's (longer sums) 10 tol. */
static void grads_vs_ref(const char *what, const cfg *c, const luon_attrs *a, luon_tensor **in, double tol) {
  luon_tensor *y = call(LU_OP_conv2d, a, c->bias ? 3 : 2, in);
  if (!y) return;
  luon_tensor *dy = rnd(c->dt, 4, y->shape);
  luon_attrs ga = *a;
  ga.ni = LU_NI_conv2d_grad_input;
  ga.i[LU_CONV2D_GRAD_INPUT_H] = c->H, ga.i[LU_CONV2D_GRAD_INPUT_W] = c->W;
  luon_tensor *gi[2] = {dy, in[1]};
  double e = fast_vs_ref(LU_OP_conv2d_grad_input, &ga, 2, gi);
  CHECK(e < tol, "%s: conv2d_grad_input differs from the reference by %g", what, e);
  ga.i[LU_CONV2D_GRAD_WEIGHT_KH] = c->KH, ga.i[LU_CONV2D_GRAD_WEIGHT_KW] = c->KW;
  luon_tensor *gw[2] = {in[0], dy};
  e = fast_vs_ref(LU_OP_conv2d_grad_weight, &ga, 2, gw);
  CHECK(e < tol * 10, "%s: conv2d_grad_weight differs from the reference by %g", what, e);
  luon_tensor_release(y), luon_tensor_release(dy);
}

/* The forward and the gradients through oneDNN (conv_dnnl.c) where it is
 * built and installed, and through conv.c's own kernels with
 * LUON_CONV_DNNL=0. */
static void conv_ref_cases(void);
static void test_conv_ref(void) {
  int threads = lu_num_threads();
  luon_set_num_threads(2); /* dnnl_gin and dnnl_gw's rules take the new cases at 2 threads */
  int64_t runs = lu_dnnl_runs, gin = lu_dnnl_gin_runs, gw = lu_dnnl_gw_runs, shared = lu_dnnl_shared_runs;
  conv_ref_cases();
#if __has_include(<oneapi/dnnl/dnnl.h>)
  CHECK(lu_dnnl_runs > runs, "oneDNN ran no convolution (libdnnl.so.2 not found?)");
  CHECK(lu_dnnl_gin_runs > gin, "oneDNN ran no input gradient");
  CHECK(lu_dnnl_gw_runs > gw, "oneDNN ran no weight gradient");
  /* batch 1's forward and the weight gradients: parts over the channels */
  CHECK(lu_dnnl_shared_runs > shared, "oneDNN's parts never shared a reordered input");
#endif
  setenv("LUON_CONV_DNNL", "0", 1);
  runs = lu_dnnl_runs, gin = lu_dnnl_gin_runs, gw = lu_dnnl_gw_runs;
  conv_ref_cases();
  CHECK(lu_dnnl_runs == runs && lu_dnnl_gin_runs == gin && lu_dnnl_gw_runs == gw,
        "LUON_CONV_DNNL=0, yet oneDNN ran %lld convolutions",
        (long long)(lu_dnnl_runs - runs + lu_dnnl_gin_runs - gin + lu_dnnl_gw_runs - gw));
  unsetenv("LUON_CONV_DNNL");
  luon_set_num_threads(threads);
}

static void conv_ref_cases(void) {
  setenv("LUON_CONV_WINOGRAD", "0", 1); /* the direct and im2col kernels (test_conv_winograd: the other) */
  static const cfg cs[] = {
      {2, 3, 9, 11, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, LUON_DTYPE_F32},   /* plain */
      {2, 3, 9, 11, 4, 3, 3, 2, 2, 0, 0, 1, 1, 1, 0, LUON_DTYPE_F32},   /* stride 2 */
      {2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, LUON_DTYPE_F32},   /* pad 1 (direct, edges) */
      {2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 2, 2, 2, 1, 0, LUON_DTYPE_F32},   /* dilation 2 */
      {2, 4, 8, 7, 6, 2, 3, 1, 2, 1, 0, 1, 1, 2, 1, LUON_DTYPE_F32},    /* groups 2 */
      {3, 8, 7, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, LUON_DTYPE_F32},   /* K = 72: im2col */
      {2, 6, 5, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, LUON_DTYPE_F32},    /* pointwise */
      {2, 3, 40, 37, 8, 2, 2, 1, 1, 0, 0, 1, 1, 1, 1, LUON_DTYPE_F32},  /* first layer, direct */
      {2, 4, 9, 8, 6, 3, 2, 2, 1, 1, 1, 1, 2, 2, 1, LUON_DTYPE_F64},    /* float64, all at once */
      {1, 2, 3, 3, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1, 0, LUON_DTYPE_F64},    /* 1x1 output */
      {1, 5, 12, 10, 40, 3, 3, 2, 2, 1, 0, 1, 1, 1, 1, LUON_DTYPE_F32}, /* batch 1: output channels in parts */
      {1, 3, 7, 6, 20, 2, 2, 3, 2, 0, 1, 2, 1, 1, 0, LUON_DTYPE_F32},   /* input rows the stride leaves unread */
      {1, 16, 1, 20, 32, 1, 3, 1, 1, 0, 1, 1, 1, 1, 1, LUON_DTYPE_F32}, /* one input row, shared in bands: one empty */
      /* the gradients through oneDNN (conv.c's dnnl_gin, dnnl_gw, at 2 threads): */
      {4, 16, 10, 9, 20, 3, 3, 2, 2, 1, 0, 1, 1, 1, 1, LUON_DTYPE_F32}, /* dx: stride 2, 20 output channels */
      {2, 32, 7, 7, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, LUON_DTYPE_F32},  /* both: a small plane, 48 channels in parts */
      {3, 16, 11, 10, 16, 3, 3, 1, 1, 2, 1, 2, 2, 1, 1, LUON_DTYPE_F32}, /* dx: dilation 2 */
      {2, 16, 9, 9, 32, 2, 2, 3, 3, 0, 0, 1, 1, 1, 0, LUON_DTYPE_F32},  /* both: the last input row left unread */
      {2, 3, 12, 11, 32, 3, 3, 2, 2, 1, 2, 1, 1, 1, 1, LUON_DTYPE_F32}, /* dw: a first layer */
  };
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    const cfg *c = &cs[k];
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C / c->G, c->KH, c->KW}, bs[1] = {c->O};
    luon_tensor *in[3] = {rnd(c->dt, 4, xs), rnd(c->dt, 4, ws), c->bias ? rnd(c->dt, 1, bs) : NULL};
    luon_attrs a = conv_attrs(c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->G);
    double tol = c->dt == LUON_DTYPE_F32 ? 1e-5 : 1e-12;
    for (int chunks = 0; chunks < 3; chunks++) {
      /* the heuristic, one chunk (OpenBLAS threads), two (luon threads) */
      if (chunks) {
        char s[4] = {(char)('0' + chunks), 0};
        setenv("LUON_CONV_CHUNKS", s, 1);
      }
      double e = fast_vs_ref(LU_OP_conv2d, &a, c->bias ? 3 : 2, in);
      CHECK(e < tol, "config %zu chunks %d: conv2d differs from the reference by %g", k, chunks, e);
      setenv("LUON_CONV_ALGO", "gemm", 1);
      e = fast_vs_ref(LU_OP_conv2d, &a, c->bias ? 3 : 2, in);
      unsetenv("LUON_CONV_ALGO");
      CHECK(e < tol, "config %zu chunks %d: conv2d (im2col) differs from the reference by %g", k, chunks, e);
      luon_attrs ra = a; /* the fused relu, both algorithms */
      ra.i[LU_CONV2D_RELU] = 1, ra.ni = LU_NI_conv2d;
      e = fast_vs_ref(LU_OP_conv2d, &ra, c->bias ? 3 : 2, in);
      CHECK(e < tol, "config %zu chunks %d: conv2d+relu differs from the reference by %g", k, chunks, e);
      setenv("LUON_CONV_ALGO", "gemm", 1);
      e = fast_vs_ref(LU_OP_conv2d, &ra, c->bias ? 3 : 2, in);
      unsetenv("LUON_CONV_ALGO");
      CHECK(e < tol, "config %zu chunks %d: conv2d+relu (im2col) differs from the reference by %g", k, chunks, e);
      char what[64];
      snprintf(what, sizeof what, "config %zu chunks %d", k, chunks);
      grads_vs_ref(what, c, &a, in, tol);
    }
    unsetenv("LUON_CONV_CHUNKS");
    for (int i = 0; i < 3; i++) luon_tensor_release(in[i]);
  }
  unsetenv("LUON_CONV_WINOGRAD");
}

/* Winograd F(4x4, 3x3) (float32 3x3 stride 1, LUON_CONV_WINOGRAD=1 forcing
 * it where the size heuristic would not) against the references: the
 * forward with and without bias and relu, both gradients, for paddings
 * 0..2, planes that are not whole tiles, one channel, and a batch whose
 * tile rows split into several blocks per thread. */
/* Weights kept reordered for oneDNN (conv_dnnl.c) follow every write
 * through luon: each way of writing w changes the next output to what a
 * fresh copy of w gives (the same primitive, so the same bits). A raw write
 * without luon_tensor_touch is not seen (the contract luon.h states, and
 * the proof the kept copy is what ran); the touch makes it seen. Batch 1
 * (parts of the output channels) and batch 4 (parts of the samples). */
static bool same_as_fresh(luon_tensor *x, luon_tensor *w, const luon_attrs *a) {
  luon_tensor *fresh = NULL;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 4, w->shape, LUON_CPU, 0, &fresh));
  CHECK_OK(luon_tensor_copy(fresh, w));
  luon_tensor *in[2] = {x, w}, *inf[2] = {x, fresh};
  luon_tensor *y = call(LU_OP_conv2d, a, 2, in), *yf = call(LU_OP_conv2d, a, 2, inf);
  bool same = y && yf && memcmp(lu_data(y), lu_data(yf), sizeof(float) * (size_t)y->size) == 0;
  luon_tensor_release(y), luon_tensor_release(yf), luon_tensor_release(fresh);
  return same;
}

static void test_conv_kept_weights(void) {
#if __has_include(<oneapi/dnnl/dnnl.h>)
  setenv("LUON_CONV_WINOGRAD", "0", 1);
  for (int64_t N = 1; N <= 4; N += 3) {
    int64_t xs[4] = {N, 16, 12, 12}, ws[4] = {32, 16, 3, 3};
    luon_tensor *x = rnd(LUON_DTYPE_F32, 4, xs), *w = rnd(LUON_DTYPE_F32, 4, ws);
    luon_attrs a = conv_attrs(1, 1, 1, 1, 1, 1, 1);
    luon_tensor *in[2] = {x, w};
    int64_t runs = lu_dnnl_runs;
    for (int k = 0; k < 3; k++) luon_tensor_release(call(LU_OP_conv2d, &a, 2, in)); /* seen, then kept */
    CHECK(lu_dnnl_runs == runs + 3, "batch %lld: oneDNN did not run", (long long)N);
    CHECK(same_as_fresh(x, w, &a), "batch %lld: kept weights differ before any write", (long long)N);
    /* an op's result written into w (out = w, the kernel writing it), and
     * an op that updates w in place */
    luon_attrs none;
    memset(&none, 0, sizeof none);
    luon_tensor *two = rnd(LUON_DTYPE_F32, 4, ws), *three = rnd(LUON_DTYPE_F32, 4, ws), *ww[2] = {two, three};
    luon_tensor *out = w;
    int32_t nout = 1;
    CHECK_OK(luon_op_call(LU_OP_add, 2, ww, &none, &nout, &out));
    luon_tensor_release(out);
    CHECK(same_as_fresh(x, w, &a), "batch %lld: an op's out= write into w not seen", (long long)N);
    luon_attrs sgd;
    memset(&sgd, 0, sizeof sgd);
    sgd.f[LU_OPT_LR] = 0.5, sgd.f[LU_OPT_RESCALE] = 1, sgd.f[LU_OPT_CLIP] = -1;
    luon_tensor *wg[2] = {w, three};
    nout = 1;
    out = NULL;
    CHECK_OK(luon_op_call(LU_OP_sgd_update, 2, wg, &sgd, &nout, &out));
    luon_tensor_release(out);
    luon_tensor_release(three);
    CHECK(same_as_fresh(x, w, &a), "batch %lld: an update in place of w not seen", (long long)N);
    /* a copy into a view of w (its storage) */
    luon_tensor *row = NULL;
    int64_t rs[4] = {1, 16, 3, 3};
    CHECK_OK(luon_tensor_view(w, 4, rs, w->strides, 5 * 144, &row));
    luon_tensor *src = rnd(LUON_DTYPE_F32, 4, rs);
    CHECK_OK(luon_tensor_copy(row, src));
    CHECK(same_as_fresh(x, w, &a), "batch %lld: a copy into a view of w not seen", (long long)N);
    /* replicas summed in place */
    luon_tensor *r[2] = {w, two};
    CHECK_OK(luon_allreduce(2, r, 0));
    CHECK(same_as_fresh(x, w, &a), "batch %lld: allreduce into w not seen", (long long)N);
    /* a raw write: seen after luon_tensor_touch only */
    luon_tensor_info info;
    CHECK_OK(luon_tensor_info_get(w, &info));
    for (int64_t k = 0; k < w->size; k++) ((float *)info.data)[k] *= -1.5f;
    CHECK(!same_as_fresh(x, w, &a), "batch %lld: a raw write was seen without a touch: nothing kept?",
          (long long)N);
    CHECK_OK(luon_tensor_touch(w));
    CHECK(same_as_fresh(x, w, &a), "batch %lld: luon_tensor_touch not seen", (long long)N);
    luon_tensor_release(row), luon_tensor_release(src), luon_tensor_release(two);
    luon_tensor_release(x), luon_tensor_release(w);
  }
  /* memory the caller owns is never kept: a raw write is seen */
  static float xm[1 * 8 * 6 * 6], wm[16 * 8 * 3 * 3];
  for (size_t k = 0; k < sizeof xm / sizeof xm[0]; k++) xm[k] = (float)urand();
  for (size_t k = 0; k < sizeof wm / sizeof wm[0]; k++) wm[k] = (float)urand();
  int64_t xs[4] = {1, 8, 6, 6}, ws[4] = {16, 8, 3, 3};
  luon_tensor *x = NULL, *w = NULL;
  CHECK_OK(luon_tensor_wrap(xm, LUON_DTYPE_F32, 4, xs, NULL, LUON_CPU, 0, &x));
  CHECK_OK(luon_tensor_wrap(wm, LUON_DTYPE_F32, 4, ws, NULL, LUON_CPU, 0, &w));
  luon_attrs a = conv_attrs(1, 1, 0, 0, 1, 1, 1);
  luon_tensor *in[2] = {x, w};
  for (int k = 0; k < 3; k++) luon_tensor_release(call(LU_OP_conv2d, &a, 2, in));
  for (size_t k = 0; k < sizeof wm / sizeof wm[0]; k++) wm[k] = -wm[k];
  CHECK(same_as_fresh(x, w, &a), "a write into wrapped memory not seen");
  luon_tensor_release(x), luon_tensor_release(w);
  unsetenv("LUON_CONV_WINOGRAD");
#endif
}

static void test_conv_winograd(void) {
  static const cfg cs[] = {
      {2, 16, 9, 11, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, LUON_DTYPE_F32},
      {3, 3, 13, 7, 5, 3, 3, 1, 1, 0, 0, 1, 1, 1, 0, LUON_DTYPE_F32},
      {2, 2, 10, 10, 4, 3, 3, 1, 1, 2, 2, 1, 1, 1, 1, LUON_DTYPE_F32},
      {1, 1, 3, 3, 1, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, LUON_DTYPE_F32},
      {1, 5, 1, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, LUON_DTYPE_F32},
      {1, 8, 17, 30, 3, 3, 3, 1, 1, 2, 1, 1, 1, 1, 1, LUON_DTYPE_F32},
      {9, 12, 20, 12, 10, 3, 3, 1, 1, 1, 0, 1, 1, 1, 1, LUON_DTYPE_F32},
  };
  setenv("LUON_CONV_WINOGRAD", "1", 1);
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    const cfg *c = &cs[k];
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C, 3, 3}, bs[1] = {c->O};
    luon_tensor *in[3] = {rnd(c->dt, 4, xs), rnd(c->dt, 4, ws), c->bias ? rnd(c->dt, 1, bs) : NULL};
    luon_attrs a = conv_attrs(1, 1, c->ph, c->pw, 1, 1, 1);
    const double tol = 1e-4; /* F(4x4, 3x3) rounds ~10x more than the direct sums */
    setenv("LUON_CONV_ALGO", "gemm", 1); /* not the direct kernel for few taps */
    double e = fast_vs_ref(LU_OP_conv2d, &a, c->bias ? 3 : 2, in);
    CHECK(e < tol, "winograd config %zu: conv2d differs from the reference by %g", k, e);
    luon_attrs ra = a;
    ra.i[LU_CONV2D_RELU] = 1, ra.ni = LU_NI_conv2d;
    e = fast_vs_ref(LU_OP_conv2d, &ra, c->bias ? 3 : 2, in);
    CHECK(e < tol, "winograd config %zu: conv2d+relu differs from the reference by %g", k, e);
    unsetenv("LUON_CONV_ALGO");
    char what[64];
    snprintf(what, sizeof what, "winograd config %zu", k);
    grads_vs_ref(what, c, &a, in, tol);
    for (int i = 0; i < 3; i++) luon_tensor_release(in[i]);
  }
  unsetenv("LUON_CONV_WINOGRAD");
}

/* A non-contiguous input (a transposed view) gives the same result. */
static void test_conv_strided(void) {
  int64_t xs[4] = {2, 3, 7, 6}, ws[4] = {4, 3, 2, 2};
  luon_tensor *x = rnd(LUON_DTYPE_F32, 4, xs), *w = rnd(LUON_DTYPE_F32, 4, ws), *xt = NULL, *xtc = NULL;
  /* a (2,3,6,7) tensor whose transposed view is (2,3,7,6) */
  int64_t ts[4] = {2, 3, 6, 7};
  luon_tensor *base = rnd(LUON_DTYPE_F32, 4, ts);
  int64_t vs[4] = {2, 3, 7, 6}, st_[4] = {126, 42, 1, 7};
  CHECK_OK(luon_tensor_view(base, 4, vs, st_, 0, &xt));
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 4, vs, LUON_CPU, 0, &xtc));
  CHECK_OK(luon_tensor_copy(xtc, xt));
  luon_attrs a = conv_attrs(1, 1, 1, 0, 1, 1, 1);
  luon_tensor *in1[2] = {xt, w}, *in2[2] = {xtc, w};
  luon_tensor *y1 = call(LU_OP_conv2d, &a, 2, in1), *y2 = call(LU_OP_conv2d, &a, 2, in2);
  double *v1 = vals(y1), *v2 = vals(y2), worst = 0;
  for (int64_t k = 0; k < y1->size; k++) worst = fmax(worst, fabs(v1[k] - v2[k]));
  CHECK(worst == 0, "strided input differs by %g", worst);
  free(v1), free(v2);
  luon_tensor_release(y1), luon_tensor_release(y2), luon_tensor_release(xt), luon_tensor_release(xtc);
  luon_tensor_release(base), luon_tensor_release(x), luon_tensor_release(w);
}

/* ---- gradients by central differences (float64) --------------------------------- */

/* L = sum(op(inputs) * r); the analytic gradient of input `which` against
 * (L(t + eps) - L(t - eps)) / 2 eps, element by element. */
static double loss(int32_t op, const luon_attrs *a, int nin, luon_tensor **in, const double *r) {
  luon_tensor *y = call(op, a, nin, in);
  if (!y) return NAN;
  double *v = vals(y), s = 0;
  for (int64_t k = 0; k < y->size; k++) s += v[k] * r[k];
  free(v);
  luon_tensor_release(y);
  return s;
}

static void fd_check(const char *what, int32_t op, const luon_attrs *a, int nin, luon_tensor **in,
                     const double *r, int which, const luon_tensor *grad) {
  luon_tensor *t = in[which];
  double *p = lu_data(t), *gv = vals(grad), worst = 0;
  const double eps = 1e-6;
  for (int64_t k = 0; k < t->size; k++) {
    double keep = p[k];
    p[k] = keep + eps;
    double lp = loss(op, a, nin, in, r);
    p[k] = keep - eps;
    double lm = loss(op, a, nin, in, r);
    p[k] = keep;
    double num = (lp - lm) / (2 * eps);
    double rel = fabs(num - gv[k]) / fmax(1.0, fabs(num));
    if (!(rel <= worst)) worst = rel;
  }
  CHECK(worst < 1e-5, "%s: analytic and numeric gradients differ by %g (relative)", what, worst);
  free(gv);
}

/* relu: 1 checks conv2d with the fused relu (LU_CONV2D_RELU = 1) */
static void conv_fd(int relu) {
  int64_t xs[4] = {2, 4, 6, 5}, ws[4] = {6, 2, 3, 2}, bs[1] = {6};
  luon_tensor *in[3] = {rnd(LUON_DTYPE_F64, 4, xs), rnd(LUON_DTYPE_F64, 4, ws), rnd(LUON_DTYPE_F64, 1, bs)};
  luon_attrs a = conv_attrs(2, 1, 1, 1, 1, 2, 2);
  if (relu) a.i[LU_CONV2D_RELU] = 1, a.ni = LU_NI_conv2d;
  luon_tensor *y = call(LU_OP_conv2d, &a, 3, in);
  luon_tensor *dy = rnd(LUON_DTYPE_F64, 4, y->shape);
  double *r = vals(dy);
  luon_tensor *outs[1] = {y}, *douts[1] = {dy}, *din[3] = {NULL, NULL, NULL};
  bool need[3] = {true, true, true};
  lu_grad_call g = {LU_OP_conv2d, &a, 3, 1, in, outs, douts, need, din};
  CHECK_OK(lu_grad_conv2d(&g));
  const char *names[3] = {"conv2d dx", "conv2d dw", "conv2d db"};
  if (relu) {
    double *yv = vals(y);
    int64_t zeros = 0;
    for (int64_t k = 0; k < y->size; k++) zeros += yv[k] == 0;
    CHECK(zeros > 0 && zeros < y->size, "conv2d+relu: %lld of %lld outputs are 0", (long long)zeros,
          (long long)y->size);
    free(yv);
    names[0] = "conv2d+relu dx", names[1] = "conv2d+relu dw", names[2] = "conv2d+relu db";
  }
  for (int i = 0; i < 3; i++) {
    CHECK(din[i] != NULL, "%s missing", names[i]);
    if (!din[i]) continue;
    CHECK(din[i]->ndim == in[i]->ndim && memcmp(din[i]->shape, in[i]->shape, 8 * (size_t)in[i]->ndim) == 0,
          "%s has shape %s", names[i], lu_shape_str(din[i]->ndim, din[i]->shape));
    fd_check(names[i], LU_OP_conv2d, &a, 3, in, r, i, din[i]);
    luon_tensor_release(din[i]);
  }
  /* only the weight asked for: the others stay NULL */
  bool need_w[3] = {false, true, false};
  luon_tensor *din2[3] = {NULL, NULL, NULL};
  lu_grad_call g2 = {LU_OP_conv2d, &a, 3, 1, in, outs, douts, need_w, din2};
  CHECK_OK(lu_grad_conv2d(&g2));
  CHECK(din2[0] == NULL && din2[1] != NULL && din2[2] == NULL, "need[] not respected");
  luon_tensor_release(din2[1]);
  free(r);
  luon_tensor_release(y), luon_tensor_release(dy);
  for (int i = 0; i < 3; i++) luon_tensor_release(in[i]);
}

static void test_conv_fd(void) {
  conv_fd(0);
  conv_fd(1);
}

/* ---- pooling ----------------------------------------------------------------- */

static luon_attrs pool_attrs(int64_t k, int64_t s, int64_t p, int ceil_mode, int global, int incl) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  int64_t v[9] = {k, k, s, s, p, p, ceil_mode, global, incl};
  memcpy(a.i, v, sizeof v);
  a.ni = 9;
  return a;
}

static void expect(const char *what, luon_tensor *t, const double *want, int64_t n) {
  CHECK(t && t->size == n, "%s: %lld elements, want %lld", what, t ? (long long)t->size : -1LL, (long long)n);
  if (!t || t->size != n) return;
  double *v = vals(t);
  for (int64_t k = 0; k < n; k++)
    CHECK(fabs(v[k] - want[k]) < 1e-6, "%s[%lld] = %g, want %g", what, (long long)k, v[k], want[k]);
  free(v);
}

static void test_pool_hand(void) {
  for (int dt = LUON_DTYPE_F32; dt <= LUON_DTYPE_F64; dt++) {
    double xv[16];
    for (int k = 0; k < 16; k++) xv[k] = k;
    int64_t xs[4] = {1, 1, 4, 4};
    luon_tensor *x = from(dt, 4, xs, xv);
    luon_attrs a = pool_attrs(2, 2, 0, 0, 0, 1);
    luon_tensor *y = call(LU_OP_max_pool2d, &a, 1, &x);
    expect("max 2x2", y, (double[]){5, 7, 13, 15}, 4);
    luon_tensor_release(y);
    y = call(LU_OP_avg_pool2d, &a, 1, &x);
    expect("avg 2x2", y, (double[]){2.5, 4.5, 10.5, 12.5}, 4);
    luon_tensor_release(y);
    /* 3x3, stride 2, pad 1: windows at -1 and 1 */
    a = pool_attrs(3, 2, 1, 0, 0, 1);
    y = call(LU_OP_max_pool2d, &a, 1, &x);
    expect("max 3x3 pad 1", y, (double[]){5, 7, 13, 15}, 4);
    luon_tensor_release(y);
    y = call(LU_OP_avg_pool2d, &a, 1, &x);
    expect("avg 3x3 pad 1 counting the padding", y,
           (double[]){(0 + 1 + 4 + 5) / 9.0, (1 + 2 + 3 + 5 + 6 + 7) / 9.0, (4 + 5 + 8 + 9 + 12 + 13) / 9.0,
                      (5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0}, 4);
    luon_tensor_release(y);
    a = pool_attrs(3, 2, 1, 0, 0, 0);
    y = call(LU_OP_avg_pool2d, &a, 1, &x);
    expect("avg 3x3 pad 1 without the padding", y,
           (double[]){(0 + 1 + 4 + 5) / 4.0, (1 + 2 + 3 + 5 + 6 + 7) / 6.0, (4 + 5 + 8 + 9 + 12 + 13) / 6.0,
                      (5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0}, 4);
    luon_tensor_release(y);
    /* ceil mode: 4x4, kernel 3, stride 2 -> 2x2 (the window at 2 runs past the edge) */
    a = pool_attrs(3, 2, 0, 1, 0, 1);
    y = call(LU_OP_max_pool2d, &a, 1, &x);
    expect("max 3x3 stride 2 ceil", y, (double[]){10, 11, 14, 15}, 4);
    luon_tensor_release(y);
    y = call(LU_OP_avg_pool2d, &a, 1, &x);
    expect("avg 3x3 stride 2 ceil", y,
           (double[]){45 / 9.0, (2 + 3 + 6 + 7 + 10 + 11) / 6.0, (8 + 9 + 10 + 12 + 13 + 14) / 6.0,
                      (10 + 11 + 14 + 15) / 4.0}, 4);
    luon_tensor_release(y);
    /* global */
    a = pool_attrs(0, 0, 0, 0, 1, 1);
    y = call(LU_OP_max_pool2d, &a, 1, &x);
    expect("global max", y, (double[]){15}, 1);
    luon_tensor_release(y);
    y = call(LU_OP_avg_pool2d, &a, 1, &x);
    expect("global avg", y, (double[]){7.5}, 1);
    luon_tensor_release(y);
    /* max gradient: each dy to its window's maximum */
    a = pool_attrs(2, 2, 0, 0, 0, 1);
    int64_t ds[4] = {1, 1, 2, 2};
    luon_tensor *dy = from(dt, 4, ds, (double[]){1, 2, 3, 4});
    luon_tensor *gin[2] = {x, dy};
    y = call(LU_OP_max_pool2d_grad, &a, 2, gin);
    expect("max grad 2x2", y, (double[]){0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4}, 16);
    luon_tensor_release(y);
    y = call(LU_OP_avg_pool2d_grad, &a, 2, gin);
    expect("avg grad 2x2", y,
           (double[]){.25, .25, .5, .5, .25, .25, .5, .5, .75, .75, 1, 1, .75, .75, 1, 1}, 16);
    luon_tensor_release(y);
    /* ties: the first maximum in the window wins */
    luon_tensor *ones = from(dt, 4, xs, (double[]){1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
    gin[0] = ones;
    y = call(LU_OP_max_pool2d_grad, &a, 2, gin);
    expect("max grad ties", y, (double[]){1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}, 16);
    luon_tensor_release(y), luon_tensor_release(ones), luon_tensor_release(dy), luon_tensor_release(x);
  }
}

static void test_pool_sizes(void) {
  int64_t xs[4] = {2, 2, 10, 10};
  luon_tensor *x = rnd(LUON_DTYPE_F32, 4, xs);
  luon_attrs a = pool_attrs(3, 3, 0, 0, 0, 1);
  luon_tensor *y = call(LU_OP_max_pool2d, &a, 1, &x);
  CHECK(y && y->shape[2] == 3 && y->shape[3] == 3, "floor: %s", y ? lu_shape_str(4, y->shape) : "-");
  luon_tensor_release(y);
  a.i[LU_POOL_CEIL] = 1;
  y = call(LU_OP_max_pool2d, &a, 1, &x);
  CHECK(y && y->shape[2] == 4 && y->shape[3] == 4, "ceil: %s", y ? lu_shape_str(4, y->shape) : "-");
  luon_tensor_release(y);
  /* ceil whose last window would start in the right padding: dropped */
  int64_t s5[4] = {1, 1, 5, 5};
  luon_tensor *x5 = rnd(LUON_DTYPE_F32, 4, s5);
  a = pool_attrs(2, 2, 1, 1, 0, 1);
  y = call(LU_OP_max_pool2d, &a, 1, &x5);
  CHECK(y && y->shape[2] == 3, "ceil with padding: %s", y ? lu_shape_str(4, y->shape) : "-");
  luon_tensor_release(y), luon_tensor_release(x5), luon_tensor_release(x);
  /* the target network: (N,32,127,127), MaxPool(4, 2) -> 62 */
  int64_t ts[4] = {1, 2, 127, 127};
  luon_tensor *xt = rnd(LUON_DTYPE_F32, 4, ts);
  a = pool_attrs(4, 2, 0, 0, 0, 1);
  y = call(LU_OP_max_pool2d, &a, 1, &xt);
  CHECK(y && y->shape[2] == 62 && y->shape[3] == 62, "target: %s", y ? lu_shape_str(4, y->shape) : "-");
  luon_tensor_release(y), luon_tensor_release(xt);
  /* conv output sizes: 128 -> 127 (k2), and the MXNet formula with everything */
  int64_t cx[4] = {1, 3, 128, 128}, cw[4] = {32, 3, 2, 2};
  luon_tensor *in[2] = {rnd(LUON_DTYPE_F32, 4, cx), rnd(LUON_DTYPE_F32, 4, cw)};
  luon_attrs ca = conv_attrs(1, 1, 0, 0, 1, 1, 1);
  y = call(LU_OP_conv2d, &ca, 2, in);
  CHECK(y && y->shape[1] == 32 && y->shape[2] == 127 && y->shape[3] == 127, "conv: %s",
        y ? lu_shape_str(4, y->shape) : "-");
  luon_tensor_release(y);
  ca = conv_attrs(3, 2, 1, 2, 2, 3, 1); /* H: (128+2-2-1)/3+1 = 43; W: (128+4-3-1)/2+1 = 65 */
  y = call(LU_OP_conv2d, &ca, 2, in);
  CHECK(y && y->shape[2] == 43 && y->shape[3] == 65, "conv strided: %s", y ? lu_shape_str(4, y->shape) : "-");
  luon_tensor_release(y), luon_tensor_release(in[0]), luon_tensor_release(in[1]);
}

static void test_pool_ref(void) {
  static const int64_t cs[][8] = {
      /* N C H W k s p ceil */
      {2, 3, 11, 13, 3, 2, 1, 0}, {2, 3, 11, 13, 3, 2, 1, 1}, {1, 4, 17, 15, 4, 2, 0, 0},
      {1, 2, 9, 9, 2, 1, 0, 1},   {3, 2, 8, 10, 3, 3, 1, 1},  {1, 1, 5, 6, 5, 1, 2, 0},
      /* stride-2 columns, no padding (the AVX-512 max backward): wide rows, tails, ceil */
      {2, 3, 40, 41, 4, 2, 0, 0}, {1, 2, 37, 39, 4, 2, 0, 1}, {1, 2, 9, 70, 2, 2, 0, 0},
      {1, 1, 6, 35, 3, 2, 0, 1},  {1, 1, 4, 4, 4, 2, 0, 0},
  };
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
    for (int dt = LUON_DTYPE_F32; dt <= LUON_DTYPE_F64; dt++)
      for (int incl = 0; incl < 2; incl++) {
        const int64_t *c = cs[k];
        luon_tensor *x = rnd(dt, 4, c);
        luon_attrs a = pool_attrs(c[4], c[5], c[6], (int)c[7], 0, incl);
        double e = fast_vs_ref(LU_OP_max_pool2d, &a, 1, &x);
        CHECK(e == 0, "config %zu: max_pool2d differs from the reference by %g", k, e);
        e = fast_vs_ref(LU_OP_avg_pool2d, &a, 1, &x);
        CHECK(e < 1e-6, "config %zu: avg_pool2d differs from the reference by %g", k, e);
        luon_tensor *y = call(LU_OP_max_pool2d, &a, 1, &x);
        luon_tensor *in[2] = {x, rnd(dt, 4, y->shape)};
        e = fast_vs_ref(LU_OP_max_pool2d_grad, &a, 2, in);
        CHECK(e < 1e-6, "config %zu: max_pool2d_grad differs from the reference by %g", k, e);
        e = fast_vs_ref(LU_OP_avg_pool2d_grad, &a, 2, in);
        CHECK(e < 1e-6, "config %zu: avg_pool2d_grad differs from the reference by %g", k, e);
        luon_tensor_release(y), luon_tensor_release(in[1]), luon_tensor_release(x);
      }
}

/* Ties (as after a relu: many zeros): the first maximum, as the reference. */
static void test_pool_ties(void) {
  int64_t xs[4] = {2, 3, 12, 53};
  int64_t n = lu_numel(4, xs);
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t k = 0; k < n; k++) v[k] = (double)((k * 7 + k / 5) % 3);
  luon_tensor *x = from(LUON_DTYPE_F32, 4, xs, v);
  free(v);
  static const int64_t ps[][2] = {{4, 2}, {3, 2}, {2, 2}};
  for (size_t k = 0; k < 3; k++) {
    luon_attrs a = pool_attrs(ps[k][0], ps[k][1], 0, 0, 0, 1);
    luon_tensor *y = call(LU_OP_max_pool2d, &a, 1, &x);
    luon_tensor *in[2] = {x, rnd(LUON_DTYPE_F32, 4, y->shape)};
    double e = fast_vs_ref(LU_OP_max_pool2d_grad, &a, 2, in);
    CHECK(e < 1e-6, "ties, kernel %lld: max_pool2d_grad differs from the reference by %g", (long long)ps[k][0], e);
    luon_tensor_release(y), luon_tensor_release(in[1]);
  }
  luon_tensor_release(x);
}

static void test_pool_fd(void) {
  int64_t xs[4] = {2, 2, 7, 6};
  int64_t n = lu_numel(4, xs);
  /* distinct values (a shuffled ramp) so that no window has a tie */
  double *v = malloc(sizeof(double) * (size_t)n);
  for (int64_t k = 0; k < n; k++) v[k] = (double)k / (double)n;
  for (int64_t k = n - 1; k > 0; k--) {
    int64_t j = (int64_t)((urand() + 1) / 2 * (double)(k + 1)) % (k + 1);
    double t = v[k];
    v[k] = v[j], v[j] = t;
  }
  luon_tensor *x = from(LUON_DTYPE_F64, 4, xs, v);
  free(v);
  static const int64_t ps[][4] = {{3, 2, 1, 1}, {2, 2, 0, 0}, {3, 1, 1, 0}};
  for (size_t k = 0; k < 3; k++)
    for (int is_max = 0; is_max < 2; is_max++) {
      luon_attrs a = pool_attrs(ps[k][0], ps[k][1], ps[k][2], (int)ps[k][3], 0, (int)(k != 2));
      int32_t op = is_max ? LU_OP_max_pool2d : LU_OP_avg_pool2d;
      luon_tensor *y = call(op, &a, 1, &x);
      luon_tensor *dy = rnd(LUON_DTYPE_F64, 4, y->shape);
      double *r = vals(dy);
      luon_tensor *outs[1] = {y}, *douts[1] = {dy}, *din[1] = {NULL};
      bool need[1] = {true};
      lu_grad_call g = {op, &a, 1, 1, &x, outs, douts, need, din};
      CHECK_OK(is_max ? lu_grad_max_pool2d(&g) : lu_grad_avg_pool2d(&g));
      if (din[0]) fd_check(is_max ? "max_pool2d dx" : "avg_pool2d dx", op, &a, 1, &x, r, 0, din[0]);
      luon_tensor_release(din[0]), luon_tensor_release(y), luon_tensor_release(dy);
      free(r);
    }
  luon_tensor_release(x);
}

/* ---- errors -------------------------------------------------------------------- */

static void expect_error(luon_status want, const char *msg, int32_t op, const luon_attrs *a, int nin,
                         luon_tensor **in) {
  luon_tensor *out = NULL;
  int32_t nout = 1;
  luon_status s = luon_op_call(op, nin, in, a, &nout, &out);
  CHECK(s == want, "%s: status %d, want %d (%s)", luon_op_name(op), (int)s, (int)want, luon_last_error());
  CHECK(strstr(luon_last_error(), msg) != NULL, "message '%s' lacks '%s'", luon_last_error(), msg);
  if (s == LUON_OK) luon_tensor_release(out);
}

static void test_errors(void) {
  int64_t xs[4] = {4, 3, 128, 128}, ws[4] = {32, 4, 2, 2}, ws3[4] = {32, 3, 2, 2};
  luon_tensor *x = rnd(LUON_DTYPE_F32, 4, xs), *w = rnd(LUON_DTYPE_F32, 4, ws), *w3 = rnd(LUON_DTYPE_F32, 4, ws3);
  luon_attrs a = conv_attrs(1, 1, 0, 0, 1, 1, 1);
  luon_tensor *in[3] = {x, w, NULL};
  expect_error(LUON_ESHAPE,
               "conv2d: input has 3 channels but weight expects 4 (input (4,3,128,128), weight (32,4,2,2))",
               LU_OP_conv2d, &a, 2, in);
  in[1] = w3;
  luon_attrs bad = conv_attrs(0, 1, 0, 0, 1, 1, 1);
  expect_error(LUON_EINVAL, "conv2d: strides must be at least 1", LU_OP_conv2d, &bad, 2, in);
  bad = conv_attrs(1, 1, 0, 0, 1, 1, 2);
  expect_error(LUON_ESHAPE, "groups", LU_OP_conv2d, &bad, 2, in);
  bad = conv_attrs(1, 1, 0, 0, 200, 1, 1);
  expect_error(LUON_ESHAPE, "output would be empty", LU_OP_conv2d, &bad, 2, in);
  int64_t bs[1] = {5};
  in[2] = rnd(LUON_DTYPE_F32, 1, bs);
  expect_error(LUON_ESHAPE, "conv2d: bias must have shape (32,)", LU_OP_conv2d, &a, 3, in);
  luon_tensor_release(in[2]);
  luon_tensor *wd = rnd(LUON_DTYPE_F64, 4, ws3);
  in[1] = wd;
  expect_error(LUON_EDTYPE, "float64", LU_OP_conv2d, &a, 2, in);
  in[1] = w3;
  luon_tensor *dyb = rnd(LUON_DTYPE_F32, 4, xs), *gi[2] = {dyb, w3};
  luon_attrs ga = a;
  ga.ni = LU_NI_conv2d_grad_input, ga.i[LU_CONV2D_GRAD_INPUT_H] = 128, ga.i[LU_CONV2D_GRAD_INPUT_W] = 128;
  expect_error(LUON_ESHAPE, "conv2d_grad_input: the output gradient has shape", LU_OP_conv2d_grad_input,
               &ga, 2, gi);
  expect_error(LUON_EINVAL, "conv2d_grad_input: needs", LU_OP_conv2d_grad_input, &a, 2, gi);
  /* then a valid call works */
  expect_error(LUON_OK, "", LU_OP_conv2d, &a, 2, in);
  luon_attrs pa = pool_attrs(200, 1, 0, 0, 0, 1);
  expect_error(LUON_ESHAPE, "max_pool2d: kernel (200,200) is larger than the input (4,3,128,128)",
               LU_OP_max_pool2d, &pa, 1, &x);
  pa = pool_attrs(2, 2, 2, 0, 0, 1);
  expect_error(LUON_EINVAL, "avg_pool2d: padding (2,2) must be smaller than the kernel", LU_OP_avg_pool2d,
               &pa, 1, &x);
  pa = pool_attrs(2, 2, 0, 0, 0, 1);
  luon_tensor *pg[2] = {x, dyb};
  expect_error(LUON_ESHAPE, "max_pool2d_grad: the output gradient has shape (4,3,128,128)",
               LU_OP_max_pool2d_grad, &pa, 2, pg);
  expect_error(LUON_OK, "", LU_OP_max_pool2d, &pa, 1, &x);
  luon_tensor_release(dyb), luon_tensor_release(wd);
  luon_tensor_release(x), luon_tensor_release(w), luon_tensor_release(w3);
}

/* ---- conv3d: vol2col + GEMM against the reference -------------------------------- */

static void test_conv3d_ref(void) {
  /* N, C, D, H, W, O, KD, KH, KW, stride (3), pad (3), dilation (3), groups, bias, dtype */
  static const struct {
    int64_t N, C, D, H, W, O, k[3], s[3], p[3], d[3], G;
    int bias;
    int32_t dt;
  } cs[] = {
      {2, 3, 4, 5, 6, 4, {2, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, 1, 1, LUON_DTYPE_F32},
      {1, 4, 5, 6, 5, 6, {3, 2, 2}, {2, 1, 2}, {1, 0, 1}, {1, 2, 1}, 2, 0, LUON_DTYPE_F32},
      {2, 2, 3, 4, 3, 2, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1, 1, LUON_DTYPE_F64},
      {1, 4, 4, 4, 4, 4, {2, 2, 2}, {1, 2, 1}, {1, 1, 0}, {2, 1, 2}, 4, 1, LUON_DTYPE_F64},
  };
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    int64_t xs[5] = {cs[k].N, cs[k].C, cs[k].D, cs[k].H, cs[k].W};
    int64_t ws[5] = {cs[k].O, cs[k].C / cs[k].G, cs[k].k[0], cs[k].k[1], cs[k].k[2]}, bs[1] = {cs[k].O};
    int32_t dt = cs[k].dt;
    luon_tensor *in[3] = {rnd(dt, 5, xs), rnd(dt, 5, ws), cs[k].bias ? rnd(dt, 1, bs) : NULL};
    luon_attrs a;
    memset(&a, 0, sizeof a);
    for (int d = 0; d < 3; d++)
      a.i[LU_CONV3D_STRIDE_D + d] = cs[k].s[d], a.i[LU_CONV3D_PAD_D + d] = cs[k].p[d],
      a.i[LU_CONV3D_DILATE_D + d] = cs[k].d[d];
    a.i[LU_CONV3D_GROUPS] = cs[k].G, a.ni = LU_NI_conv3d;
    double tol = dt == LUON_DTYPE_F32 ? 1e-5 : 1e-12;
    double e = fast_vs_ref(LU_OP_conv3d, &a, cs[k].bias ? 3 : 2, in);
    CHECK(e < tol, "config %zu: conv3d differs from the reference by %g", k, e);
    luon_tensor *y = call(LU_OP_conv3d, &a, cs[k].bias ? 3 : 2, in);
    luon_tensor *dy = y ? rnd(dt, 5, y->shape) : NULL;
    luon_attrs ga = a;
    ga.ni = LU_NI_conv3d_grad_input;
    for (int d = 0; d < 3; d++) ga.i[LU_CONV3D_GRAD_INPUT_D + d] = xs[2 + d];
    luon_tensor *gi[2] = {dy, in[1]};
    e = fast_vs_ref(LU_OP_conv3d_grad_input, &ga, 2, gi);
    CHECK(e < tol, "config %zu: conv3d_grad_input differs from the reference by %g", k, e);
    ga.ni = LU_NI_conv3d_grad_weight;
    for (int d = 0; d < 3; d++) ga.i[LU_CONV3D_GRAD_WEIGHT_KD + d] = cs[k].k[d];
    luon_tensor *gw[2] = {in[0], dy};
    e = fast_vs_ref(LU_OP_conv3d_grad_weight, &ga, 2, gw);
    CHECK(e < tol * 10, "config %zu: conv3d_grad_weight differs from the reference by %g", k, e);
    luon_tensor_release(y), luon_tensor_release(dy);
    for (int t = 0; t < 3; t++) luon_tensor_release(in[t]);
  }
}

int main(void) {
  test_conv_ref();
  test_conv_kept_weights();
  test_conv_winograd();
  test_conv3d_ref();
  test_conv_strided();
  test_conv_fd();
  test_pool_hand();
  test_pool_sizes();
  test_pool_ref();
  test_pool_ties();
  test_pool_fd();
  test_errors();
  return TEST_RESULT;
}
