/* ctc.c: the connectionist temporal classification loss (npx.ctc_loss,
 * MXNet's CTCLoss, Graves et al. 2006), float32 and float64, computed in
 * double: the forward gives the loss and its gradient together (as MXNet's
 * warp-ctc does), the backward scales the saved gradient. Not here: the
 * best path or beam decoding.
 *   p = softmax(data[t, n, :]) per step; z the labels with a blank between
 *   and around them (S = 2 L + 1); alpha, beta the log-space forward and
 *   backward variables over (t, s), both including log p[t, z_s];
 *   loss[n] = -log sum_paths prod_t p = -logsumexp(alpha[T-1, S-1], alpha[T-1, S-2])
 *   grad[t, n, c] = p[t, c] - sum_{s: z_s = c} exp(alpha + beta - log p[t, c] + loss)
 * A sample whose labels cannot fit its steps (L + repeated neighbours > T)
 * gets loss 0 and gradient 0, as MXNet (warp-ctc skips it). */
#include "internal.h"
#include "steps.h"
#include <math.h>

/* data (T, N, C) float, label (N, L) (any dtype but bool, rounded), then
 * data_lengths (N,) (whole numbers) when USE_DATA_LENGTHS, label_lengths (N,) when
 * USE_LABEL_LENGTHS -> loss (N,), grad (T, N, C) */
luon_status lu_shape_ctc_loss(lu_call *c) {
  const luon_attrs *a = c->attrs;
  int64_t ud = a->i[LU_CTC_USE_DATA_LENGTHS], ul = a->i[LU_CTC_USE_LABEL_LENGTHS], bl = a->i[LU_CTC_BLANK_LAST];
  if ((ud != 0 && ud != 1) || (ul != 0 && ul != 1) || (bl != 0 && bl != 1))
    return lu_error(LUON_EINVAL, "ctc_loss: use_data_lengths (%lld), use_label_lengths (%lld) and blank_last "
                    "(%lld) must be 0 or 1", (long long)ud, (long long)ul, (long long)bl);
  int want = 2 + (int)ud + (int)ul;
  if (c->nin != want)
    return lu_error(LUON_EINVAL, "ctc_loss: takes %d inputs (data, label%s%s), got %d", want,
                    ud ? ", data_lengths" : "", ul ? ", label_lengths" : "", c->nin);
  const luon_tensor *x = c->in[0], *lab = c->in[1];
  if (x->dtype != LUON_DTYPE_F32 && x->dtype != LUON_DTYPE_F64)
    return lu_error(LUON_EDTYPE, "ctc_loss: data is %s; only float32 and float64 are supported",
                    luon_dtype_name(x->dtype));
  if (x->ndim != 3 || x->shape[2] < 1)
    return lu_error(LUON_ESHAPE, "ctc_loss: data must be (sequence_length, batch_size, alphabet_size) with "
                    "alphabet_size >= 1, got shape %s", lu_shape_str(x->ndim, x->shape));
  int64_t T = x->shape[0], N = x->shape[1];
  for (int k = 1; k < c->nin; k++)
    if (c->in[k]->dtype == LUON_DTYPE_BOOL)
      return lu_error(LUON_EDTYPE, "ctc_loss: %s is bool; labels and lengths are numbers",
                      k == 1 ? "label" : k == 2 && ud ? "data_lengths" : "label_lengths");
  if (lab->ndim != 2 || lab->shape[0] != N)
    return lu_error(LUON_ESHAPE, "ctc_loss: label has shape %s; expected (batch_size, label_sequence_length) "
                    "with batch_size %lld of data %s", lu_shape_str(lab->ndim, lab->shape), (long long)N,
                    lu_shape_str(3, x->shape));
  if (lab->shape[1] > T)
    return lu_error(LUON_ESHAPE, "ctc_loss: label has %lld columns but data has %lld steps; the labels "
                    "cannot outnumber the steps (label %s, data %s)", (long long)lab->shape[1], (long long)T,
                    lu_shape_str(2, lab->shape), lu_shape_str(3, x->shape));
  for (int k = 2; k < c->nin; k++) {
    const luon_tensor *len = c->in[k];
    if (len->ndim != 1 || len->shape[0] != N)
      return lu_error(LUON_ESHAPE, "ctc_loss: %s has shape %s; expected (%lld,), one per sample of data %s",
                      k == 2 && ud ? "data_lengths" : "label_lengths", lu_shape_str(len->ndim, len->shape),
                      (long long)N, lu_shape_str(3, x->shape));
  }
  int64_t gs[3] = {T, N, x->shape[2]};
  c->out_ndim[0] = 1, c->out_shape[0][0] = N, c->out_dtype[0] = x->dtype;
  c->out_ndim[1] = 3, memcpy(c->out_shape[1], gs, sizeof gs), c->out_dtype[1] = x->dtype;
  return LUON_OK;
}

/* ---- the CPU kernel ------------------------------------------------------- */

/* Element (i, j) of a 1-d or 2-d tensor of any dtype as a double. */
static double at(const luon_tensor *t, int64_t i, int64_t j) {
  double v;
  int64_t off = i * t->strides[0] + (t->ndim > 1 ? j * t->strides[1] : 0);
  lu_convert(&v, LUON_DTYPE_F64, (const char *)lu_data(t) + (size_t)off * luon_dtype_size(t->dtype), t->dtype, 1);
  return v;
}

/* One sample's steps and labels, read and checked: everything the CUDA
 * kernel checks too (core/ops/ctc.c and cuda/ops/ctc.cu say the same). */
typedef struct sample {
  int64_t T, L;
  int64_t bad_col; /* the label column out of range, -1: none */
} sample;

static luon_status read_sample(const lu_call *c, int64_t n, sample *sm) {
  const luon_attrs *a = c->attrs;
  bool ud = a->i[LU_CTC_USE_DATA_LENGTHS], ul = a->i[LU_CTC_USE_LABEL_LENGTHS], last = a->i[LU_CTC_BLANK_LAST];
  const luon_tensor *x = c->in[0], *lab = c->in[1];
  int64_t T = x->shape[0], C = x->shape[2], Lmax = lab->shape[1];
  double pad = last ? -1 : 0;
  sm->T = T, sm->L = Lmax;
  if (ud) {
    double v = at(c->in[2], n, 0);
    if (!(v >= 0 && v <= (double)T))
      return lu_error(LUON_EINVAL, "ctc_loss: data_lengths[%lld] = %g is outside 0..%lld (the data's steps)",
                      (long long)n, v, (long long)T);
    if (v != floor(v)) /* MXNet rounds it for the loss but truncates it for the gradient */
      return lu_error(LUON_EINVAL, "ctc_loss: data_lengths[%lld] = %g is not a whole number of steps", (long long)n, v);
    sm->T = (int64_t)v;
  }
  if (ul) {
    const luon_tensor *ll = c->in[2 + ud];
    double v = round(at(ll, n, 0));
    if (!(v >= 0 && v <= (double)Lmax))
      return lu_error(LUON_EINVAL, "ctc_loss: label_lengths[%lld] = %g is outside 0..%lld (the label's columns)",
                      (long long)n, at(ll, n, 0), (long long)Lmax);
    sm->L = (int64_t)v;
  } else {
    for (int64_t j = 0; j < Lmax; j++)
      if (round(at(lab, n, j)) == pad) {
        sm->L = j;
        break;
      }
  }
  double lo = last ? 0 : 1, hi = last ? (double)C - 2 : (double)C - 1;
  for (int64_t j = 0; j < sm->L; j++) {
    double v = round(at(lab, n, j));
    if (!(v >= lo && v <= hi))
      return lu_error(LUON_EINVAL, "ctc_loss: label[%lld, %lld] = %g is not a class: with blank_label '%s' and "
                      "alphabet_size %lld the labels are %g..%g%s", (long long)n, (long long)j, at(lab, n, j),
                      last ? "last" : "first", (long long)C, lo, hi,
                      ul ? "" : last ? " (-1 pads)" : " (0 pads)");
  }
  return LUON_OK;
}

static inline double lse(double a, double b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

typedef struct job {
  const lu_call *c;
  const sample *sm;
  int failed; /* out of memory in a chunk */
} job;

/* Sample n: loss[n] and grad[:, n, :] (zeros past its steps). w: scratch of
 * T*C + 2*T*S + C + S doubles. */
static void one_sample(const lu_call *c, int64_t n, const sample *sm, double *w) {
  const luon_tensor *x = c->in[0], *lab = c->in[1];
  luon_tensor *lo = c->out[0], *go = c->out[1];
  bool last = c->attrs->i[LU_CTC_BLANK_LAST];
  int32_t dt = x->dtype;
  int64_t T = sm->T, L = sm->L, C = x->shape[2], N = x->shape[1], S = 2 * L + 1;
  int64_t blank = last ? C - 1 : 0;
  double *lp = w, *al = lp + T * C, *be = al + T * S;
  double *row = be + T * S;               /* (C,): one step's gradient */
  int64_t *z = (int64_t *)(row + C);      /* (S,): the labels with blanks */
  const char *xd = lu_data(x);
  double *gd = NULL;
  float *gf = NULL;
  if (dt == LUON_DTYPE_F64) gd = lu_data(go);
  else gf = lu_data(go);
  /* zeros past the sample's steps (all of them when it is skipped) */
  for (int64_t t = 0; t < x->shape[0]; t++)
    for (int64_t k = 0; k < C; k++) {
      int64_t o = (t * N + n) * C + k;
      if (gd) gd[o] = 0;
      else gf[o] = 0;
    }
  for (int64_t s = 0; s < S; s++) z[s] = s % 2 ? (int64_t)round(at(lab, n, s / 2)) : blank;
  int64_t rep = 0;
  for (int64_t j = 1; j < L; j++) rep += z[2 * j + 1] == z[2 * j - 1];
  double loss = 0;
  if (L + rep > T) goto store; /* cannot fit: skipped, as MXNet */
  for (int64_t t = 0; t < T; t++) { /* log_softmax of step t */
    double *r = lp + t * C, m = -INFINITY, sum = 0;
    for (int64_t k = 0; k < C; k++) {
      int64_t off = t * x->strides[0] + n * x->strides[1] + k * x->strides[2];
      r[k] = dt == LUON_DTYPE_F64 ? ((const double *)xd)[off] : ((const float *)xd)[off];
      if (r[k] > m) m = r[k];
    }
    for (int64_t k = 0; k < C; k++) sum += exp(r[k] - m);
    double ls = m + log(sum);
    for (int64_t k = 0; k < C; k++) r[k] -= ls;
  }
  if (T == 0) goto store; /* no steps, no labels: probability 1 */
  for (int64_t s = 0; s < S; s++) al[s] = s < 2 ? lp[z[s]] : -INFINITY;
  for (int64_t t = 1; t < T; t++)
    for (int64_t s = 0; s < S; s++) {
      const double *p = al + (t - 1) * S;
      double v = p[s];
      if (s >= 1) v = lse(v, p[s - 1]);
      if (s >= 2 && z[s] != blank && z[s] != z[s - 2]) v = lse(v, p[s - 2]);
      al[t * S + s] = v + lp[t * C + z[s]];
    }
  for (int64_t s = 0; s < S; s++) be[(T - 1) * S + s] = s >= S - 2 ? lp[(T - 1) * C + z[s]] : -INFINITY;
  for (int64_t t = T - 2; t >= 0; t--)
    for (int64_t s = 0; s < S; s++) {
      const double *q = be + (t + 1) * S;
      double v = q[s];
      if (s + 1 < S) v = lse(v, q[s + 1]);
      if (s + 2 < S && z[s] != blank && z[s] != z[s + 2]) v = lse(v, q[s + 2]);
      be[t * S + s] = v + lp[t * C + z[s]];
    }
  double ll = S > 1 ? lse(al[(T - 1) * S + S - 1], al[(T - 1) * S + S - 2]) : al[(T - 1) * S];
  loss = -ll;
  /* grad = softmax - the posterior of each class (its positions' occupancies summed) */
  for (int64_t t = 0; t < T; t++) {
    const double *r = lp + t * C;
    for (int64_t k = 0; k < C; k++) row[k] = exp(r[k]);
    for (int64_t s = 0; s < S; s++) {
      double a = al[t * S + s] + be[t * S + s];
      if (a != -INFINITY) row[z[s]] -= exp(a - r[z[s]] - ll);
    }
    for (int64_t k = 0; k < C; k++) {
      int64_t o = (t * N + n) * C + k;
      if (gd) gd[o] = row[k];
      else gf[o] = (float)row[k];
    }
  }
store:
  if (dt == LUON_DTYPE_F64) ((double *)lu_data(lo))[n] = loss;
  else ((float *)lu_data(lo))[n] = (float)loss;
}

static void samples_range(void *ctx, int64_t n0, int64_t n1) {
  job *j = ctx;
  const luon_tensor *x = j->c->in[0], *lab = j->c->in[1];
  int64_t T = x->shape[0], C = x->shape[2], S = 2 * lab->shape[1] + 1;
  double *w = lu_scratch_alloc(sizeof(double) * (size_t)(T * C + 2 * T * S + C + S) + 1);
  if (!w) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t n = n0; n < n1 && !lu_interrupted(); n++) one_sample(j->c, n, &j->sm[n], w);
  lu_scratch_free(w);
}

luon_status lu_cpu_ctc_loss(lu_call *c) {
  int64_t N = c->in[0]->shape[1];
  sample *sm = lu_scratch_alloc(sizeof(sample) * (size_t)N + 1);
  if (!sm) return lu_error(LUON_ENOMEM, "ctc_loss: out of host memory for scratch");
  luon_status s = LUON_OK;
  for (int64_t n = 0; n < N && s == LUON_OK; n++) s = read_sample(c, n, &sm[n]);
  if (s == LUON_OK) {
    job j = {c, sm, 0};
    int64_t per = c->in[0]->shape[0] * (c->in[0]->shape[2] + 2 * c->in[1]->shape[1] + 1);
    lu_parallel_for(N, per >= 65536 ? 1 : 65536 / (per + 1) + 1, samples_range, &j);
    if (j.failed) s = lu_error(LUON_ENOMEM, "ctc_loss: out of host memory for scratch");
  }
  lu_scratch_free(sm);
  return s;
}

/* d data = grad * dloss[None, :, None]; the labels and lengths get none,
 * nor does the grad output (it is the gradient). */
luon_status lu_grad_ctc_loss(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0]) return LUON_OK;
  lu_steps e = {LUON_OK, 0, {NULL}};
  int64_t s3[3] = {1, g->out[0]->shape[0], 1};
  luon_tensor *d = lu_steps_reshape(&e, g->dout[0], 3, s3);
  luon_tensor *r = R2(multiply, g->out[1], d);
  lu_steps_give(&e, r, g->in[0], &g->din[0]);
  return lu_steps_end(&e);
}
