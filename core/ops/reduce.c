/* reduce.c: sum, mean, prod, max, min, argmax, argmin over a set of axes of
 * an N-d array of any strides. Not here: cumulative ops (scan.c), norms
 * (np.linalg.norm, written with ops in np.lua), sorting.
 *   out[kept...] = reduce over reduced axes of x[...]; keepdims leaves 1s. */
#include "steps.h"
#include <math.h>
#include <stdlib.h>

static const char *const op_names[LU_R_COUNT] = {"sum", "mean", "prod", "max", "min", "argmax", "argmin"};

static bool is_arg(int rop) { return rop == LU_R_ARGMAX || rop == LU_R_ARGMIN; }

/* ---- shape ---------------------------------------------------------------- */

/* scratch_i[0]: bitmask of reduced axes of the input. */
static luon_status reduce_shape(lu_call *c) {
  const luon_tensor *x = c->in[0];
  const luon_attrs *a = c->attrs;
  int rop = lu_reduce_op_of(c->op);
  const char *name = op_names[rop];
  int nd = x->ndim;
  bool keep = a->ni > LU_REDUCE_KEEPDIMS && a->i[LU_REDUCE_KEEPDIMS] != 0;
  int naxes = a->ni > LU_REDUCE_AXES ? a->ni - LU_REDUCE_AXES : 0;
  const int64_t *axes = a->i + LU_REDUCE_AXES;
  int64_t mask = 0;
  if (is_arg(rop)) {
    if (naxes > 1)
      return lu_error(LUON_EINVAL, "%s: takes one axis or none (flattened), got %d axes", name, naxes);
    if (naxes == 1) {
      int ax;
      LU_TRY(lu_axis(name, axes[0], nd, &ax));
      mask = (int64_t)1 << ax;
    } else {
      mask = ((int64_t)1 << nd) - 1;
    }
  } else if (naxes == 0) {
    mask = ((int64_t)1 << nd) - 1;
  } else {
    for (int k = 0; k < naxes; k++) {
      int ax;
      LU_TRY(lu_axis(name, axes[k], nd, &ax));
      if (mask & ((int64_t)1 << ax))
        return lu_error(LUON_EINVAL, "%s: axis %d appears twice in axes %s (array of shape %s)",
                        name, ax, lu_shape_str(naxes, axes), lu_shape_str(nd, x->shape));
      mask |= (int64_t)1 << ax;
    }
  }
  /* dtype of the result */
  int32_t dt = x->dtype, odt;
  switch (rop) {
  case LU_R_SUM:
  case LU_R_PROD:
    odt = a->dtype ? a->dtype : lu_dtype_is_float(dt) ? dt : LUON_DTYPE_I64;
    break;
  case LU_R_MEAN:
    odt = a->dtype ? a->dtype : dt == LUON_DTYPE_F64 ? dt : LUON_DTYPE_F32;
    break;
  case LU_R_MAX:
  case LU_R_MIN:
    if (a->dtype && a->dtype != dt)
      return lu_error(LUON_EDTYPE, "%s: the result has the input's dtype %s, not %s; cast with astype",
                      name, luon_dtype_name(dt), luon_dtype_name(a->dtype));
    odt = dt;
    break;
  default:
    if (a->dtype && a->dtype != LUON_DTYPE_I64)
      return lu_error(LUON_EDTYPE, "%s: the result is int64, not %s", name,
                      luon_dtype_name(a->dtype));
    odt = LUON_DTYPE_I64;
  }
  /* reductions without an identity need at least one element per result */
  if (rop == LU_R_MAX || rop == LU_R_MIN || is_arg(rop))
    for (int i = 0; i < nd; i++)
      if ((mask >> i & 1) && x->shape[i] == 0) {
        if (is_arg(rop))
          return lu_error(LUON_ESHAPE, "%s: attempt to get %s of an empty sequence (input shape %s)",
                          name, name, lu_shape_str(nd, x->shape));
        if (mask == ((int64_t)1 << nd) - 1) /* over the whole array: no axis to name */
          return lu_error(LUON_ESHAPE,
                          "%s: zero-size array to reduction operation %s which has no identity "
                          "(input shape %s)", name, name, lu_shape_str(nd, x->shape));
        return lu_error(LUON_ESHAPE,
                        "%s: zero-size array to reduction operation %s which has no identity "
                        "(input shape %s, axis %d)", name, name, lu_shape_str(nd, x->shape), i);
      }
  int on = 0;
  for (int i = 0; i < nd; i++) {
    if (mask >> i & 1) {
      if (keep) c->out_shape[0][on++] = 1;
    } else {
      c->out_shape[0][on++] = x->shape[i];
    }
  }
  c->nout = 1;
  c->out_ndim[0] = on;
  c->out_dtype[0] = odt;
  c->scratch_i[0] = mask;
  return LUON_OK;
}

luon_status lu_shape_sum(lu_call *c) { return reduce_shape(c); }
luon_status lu_shape_mean(lu_call *c) { return reduce_shape(c); }
luon_status lu_shape_prod(lu_call *c) { return reduce_shape(c); }
luon_status lu_shape_max(lu_call *c) { return reduce_shape(c); }
luon_status lu_shape_min(lu_call *c) { return reduce_shape(c); }
luon_status lu_shape_argmax(lu_call *c) { return reduce_shape(c); }
luon_status lu_shape_argmin(lu_call *c) { return reduce_shape(c); }

/* ---- accumulators ----------------------------------------------------------- */

/* A running result: float inputs accumulate in d (double), integer inputs in
 * i (int64, sums and products wrap), arg ops also keep the index. */
typedef struct acc {
  double d;
  int64_t i;
  int64_t idx;
} acc;

/* Column accumulators: the same, one per output column (structure of arrays). */
typedef struct cols {
  double *d;
  int64_t *i;
  int64_t *idx;
} cols;

/* Fold n elements at p (byte stride s, flat indices k0, k0+1, ...) into a. */
typedef void (*fold_fn)(acc *a, const char *p, int64_t n, int64_t s, int64_t k0);
/* Fold a contiguous row of n elements at p, all with index k, into columns. */
typedef void (*col_fn)(cols *c, const char *p, int64_t n, int64_t k);

/* Element steps: v is the running value, ix its index, x the element. */
#define STEP_SUM_F(v, ix, x, k) v += (x)
#define STEP_SUM_I(v, ix, x, k) v = (int64_t)((uint64_t)(v) + (uint64_t)(int64_t)(x))
#define STEP_PROD_F(v, ix, x, k) v *= (x)
#define STEP_PROD_I(v, ix, x, k) v = (int64_t)((uint64_t)(v) * (uint64_t)(int64_t)(x))
/* NaN propagates: once v is NaN no comparison replaces it */
#define STEP_MAX_F(v, ix, x, k) if ((x) > (v) || (x) != (x)) v = (x)
#define STEP_MIN_F(v, ix, x, k) if ((x) < (v) || (x) != (x)) v = (x)
#define STEP_MAX_I(v, ix, x, k) if ((x) > (v)) v = (x)
#define STEP_MIN_I(v, ix, x, k) if ((x) < (v)) v = (x)
/* ties keep the first index; the first NaN wins and stays */
#define STEP_ARGMAX_F(v, ix, x, k) if ((x) > (v) || ((x) != (x) && (v) == (v))) { v = (x); ix = (k); }
#define STEP_ARGMIN_F(v, ix, x, k) if ((x) < (v) || ((x) != (x) && (v) == (v))) { v = (x); ix = (k); }
#define STEP_ARGMAX_I(v, ix, x, k) if ((x) > (v)) { v = (x); ix = (k); }
#define STEP_ARGMIN_I(v, ix, x, k) if ((x) < (v)) { v = (x); ix = (k); }

#define FIELD_F d
#define FIELD_I i
#define VTYPE_F double
#define VTYPE_I int64_t

#define GEN(OP, CLS, name, T)                                                                   \
  static void fold_##OP##_##name(acc *a, const char *p, int64_t n, int64_t s, int64_t k0) {     \
    VTYPE_##CLS v = a->FIELD_##CLS;                                                             \
    int64_t ix = a->idx;                                                                        \
    if (s == (int64_t)sizeof(T)) {                                                              \
      const T *q = (const T *)p;                                                                \
      for (int64_t j = 0; j < n; j++) {                                                         \
        T x = q[j];                                                                             \
        STEP_##OP##_##CLS(v, ix, x, k0 + j);                                                    \
      }                                                                                         \
    } else {                                                                                    \
      for (int64_t j = 0; j < n; j++) {                                                         \
        T x = *(const T *)(p + j * s);                                                          \
        STEP_##OP##_##CLS(v, ix, x, k0 + j);                                                    \
      }                                                                                         \
    }                                                                                           \
    a->FIELD_##CLS = v;                                                                         \
    a->idx = ix;                                                                                \
  }                                                                                             \
  static void col_##OP##_##name(cols *c, const char *p, int64_t n, int64_t k) {                 \
    const T *q = (const T *)p;                                                                  \
    VTYPE_##CLS *restrict vs = c->FIELD_##CLS;                                                  \
    int64_t *restrict is = c->idx;                                                              \
    (void)is;                                                                                   \
    for (int64_t j = 0; j < n; j++) {                                                           \
      T x = q[j];                                                                               \
      STEP_##OP##_##CLS(vs[j], is[j], x, k);                                                    \
    }                                                                                           \
  }

#define GEN_OPS(CLS, name, T)                                                                   \
  GEN(SUM, CLS, name, T)                                                                        \
  GEN(PROD, CLS, name, T)                                                                       \
  GEN(MAX, CLS, name, T)                                                                        \
  GEN(MIN, CLS, name, T)                                                                        \
  GEN(ARGMAX, CLS, name, T)                                                                     \
  GEN(ARGMIN, CLS, name, T)

GEN_OPS(F, f32, float)
GEN_OPS(F, f64, double)
GEN_OPS(I, i32, int32_t)
GEN_OPS(I, i64, int64_t)
GEN_OPS(I, u8, uint8_t)
GEN_OPS(I, i8, int8_t)
GEN_OPS(I, i16, int16_t)
GEN_OPS(I, u16, uint16_t)

/* (n) contiguous float32 -> their sum. Blocks of 512 are summed in 32 float
 * lanes (16 elements per lane), block results in double: 1e6 ones is exact. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static double sum_f32_contig(const float *restrict p, int64_t n) {
  double dl[32] = {0};
  int64_t i = 0;
  for (; i + 512 <= n; i += 512) {
    float fl[32] = {0};
    for (int b = 0; b < 512; b += 32)
      for (int k = 0; k < 32; k++) fl[k] += p[i + b + k];
    for (int k = 0; k < 32; k++) dl[k] += fl[k];
  }
  double s = 0;
  for (; i < n; i++) s += p[i];
  for (int k = 0; k < 32; k++) s += dl[k];
  return s;
}

/* (n) contiguous float64 -> their sum, in 16 lanes. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static double sum_f64_contig(const double *restrict p, int64_t n) {
  double l[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; k++) l[k] += p[i + k];
  double s = 0;
  for (; i < n; i++) s += p[i];
  for (int k = 0; k < 16; k++) s += l[k];
  return s;
}

static void fold_fast_sum_f32(acc *a, const char *p, int64_t n, int64_t s, int64_t k0) {
  if (s == 4) a->d += sum_f32_contig((const float *)p, n);
  else fold_SUM_f32(a, p, n, s, k0);
}

static void fold_fast_sum_f64(acc *a, const char *p, int64_t n, int64_t s, int64_t k0) {
  if (s == 8) a->d += sum_f64_contig((const double *)p, n);
  else fold_SUM_f64(a, p, n, s, k0);
}

/* ORDER luon_dtype: -, f32, f64, f16, bf16, i32, i64, u8, bool (bool reads
 * as 0/1 bytes), i8, i16, u16 */
#define ROW(OP) {NULL, fold_##OP##_f32, fold_##OP##_f64, NULL, NULL, fold_##OP##_i32, \
                 fold_##OP##_i64, fold_##OP##_u8, fold_##OP##_u8, fold_##OP##_i8,   \
                 fold_##OP##_i16, fold_##OP##_u16}
#define COL(OP) {NULL, col_##OP##_f32, col_##OP##_f64, NULL, NULL, col_##OP##_i32, \
                 col_##OP##_i64, col_##OP##_u8, col_##OP##_u8, col_##OP##_i8,       \
                 col_##OP##_i16, col_##OP##_u16}
/* ORDER LU_R_SUM.. */
static const fold_fn folds[LU_R_COUNT][LUON_DTYPE_COUNT] = {
    ROW(SUM), ROW(SUM), ROW(PROD), ROW(MAX), ROW(MIN), ROW(ARGMAX), ROW(ARGMIN)};
static const col_fn col_folds[LU_R_COUNT][LUON_DTYPE_COUNT] = {
    COL(SUM), COL(SUM), COL(PROD), COL(MAX), COL(MIN), COL(ARGMAX), COL(ARGMIN)};

static acc acc_init(int rop) {
  acc a = {0, 0, 0};
  if (rop == LU_R_PROD) a.d = 1, a.i = 1;
  if (rop == LU_R_MAX || rop == LU_R_ARGMAX) a.d = -INFINITY, a.i = INT64_MIN;
  if (rop == LU_R_MIN || rop == LU_R_ARGMIN) a.d = INFINITY, a.i = INT64_MAX;
  return a;
}

/* Fold partial b (of later elements) into a. */
static void acc_merge(int rop, bool fl, acc *a, const acc *b) {
  double v = a->d, x = b->d;
  int64_t vi = a->i, xi = b->i, ix = a->idx;
  switch (rop) {
  case LU_R_SUM:
  case LU_R_MEAN:
    if (fl) { STEP_SUM_F(v, ix, x, 0); } else { STEP_SUM_I(vi, ix, xi, 0); }
    break;
  case LU_R_PROD:
    if (fl) { STEP_PROD_F(v, ix, x, 0); } else { STEP_PROD_I(vi, ix, xi, 0); }
    break;
  case LU_R_MAX:
    if (fl) { STEP_MAX_F(v, ix, x, 0); } else { STEP_MAX_I(vi, ix, xi, 0); }
    break;
  case LU_R_MIN:
    if (fl) { STEP_MIN_F(v, ix, x, 0); } else { STEP_MIN_I(vi, ix, xi, 0); }
    break;
  case LU_R_ARGMAX:
    if (fl) { STEP_ARGMAX_F(v, ix, x, b->idx); } else { STEP_ARGMAX_I(vi, ix, xi, b->idx); }
    break;
  default:
    if (fl) { STEP_ARGMIN_F(v, ix, x, b->idx); } else { STEP_ARGMIN_I(vi, ix, xi, b->idx); }
  }
  a->d = v;
  a->i = vi;
  a->idx = ix;
}

static void store_f(void *p, int32_t dt, double v) { lu_convert(p, dt, &v, LUON_DTYPE_F64, 1); }
static void store_i(void *p, int32_t dt, int64_t v) { lu_convert(p, dt, &v, LUON_DTYPE_I64, 1); }

/* Write the final value of a (over count elements) to p of dtype dt. */
static void acc_finish(int rop, bool fl, const acc *a, int64_t count, char *p, int32_t dt) {
  if (is_arg(rop)) {
    store_i(p, dt, a->idx);
  } else if (rop == LU_R_MEAN) {
    double s = fl ? a->d : (double)a->i;
    store_f(p, dt, count ? s / (double)count : NAN);
  } else if (fl) {
    store_f(p, dt, a->d);
  } else {
    store_i(p, dt, a->i);
  }
}

/* ---- the plan: kept and reduced axes, merged ------------------------------ */

typedef struct plan {
  int rop;
  bool fl;                   /* float accumulation */
  int32_t dt, odt;
  int64_t esize, osize;      /* bytes per input / output element */
  const char *base;          /* input element 0 */
  char *out;                 /* contiguous output */
  int nk, nr;
  int64_t kshape[LU_MAXD], kstr[LU_MAXD]; /* kept axes, input byte strides */
  int64_t rshape[LU_MAXD], rstr[LU_MAXD]; /* reduced axes */
  int64_t nout, R;
  fold_fn fold;
  col_fn col;
  acc *partial;              /* chunked rows: one per (output, chunk) */
  int64_t nchunk, chunk;
  int64_t cb, nblk;          /* column path: block width, blocks per row */
} plan;

/* Drop size-1 axes and merge neighbours that step evenly, keeping order. */
static int merge_axes(int n, int64_t *shape, int64_t *str) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (shape[i] == 1) continue;
    if (m > 0 && str[m - 1] == str[i] * shape[i]) {
      shape[m - 1] *= shape[i];
      str[m - 1] = str[i];
    } else {
      shape[m] = shape[i];
      str[m] = str[i];
      m++;
    }
  }
  return m;
}

static int64_t iabs64(int64_t v) { return v < 0 ? -v : v; }

static void make_plan(plan *pl, const luon_tensor *x, int64_t mask) {
  int nd = x->ndim;
  pl->nk = pl->nr = 0;
  for (int i = 0; i < nd; i++) {
    int64_t s = x->strides[i] * pl->esize;
    if (mask >> i & 1) {
      pl->rshape[pl->nr] = x->shape[i];
      pl->rstr[pl->nr++] = s;
    } else {
      pl->kshape[pl->nk] = x->shape[i];
      pl->kstr[pl->nk++] = s;
    }
  }
  /* the order of reduced axes matters only for the index of arg ops: else
   * walk them with the smallest stride innermost */
  if (!is_arg(pl->rop))
    for (int i = 1; i < pl->nr; i++)
      for (int j = i; j > 0 && iabs64(pl->rstr[j - 1]) < iabs64(pl->rstr[j]); j--) {
        int64_t t = pl->rstr[j]; pl->rstr[j] = pl->rstr[j - 1]; pl->rstr[j - 1] = t;
        t = pl->rshape[j]; pl->rshape[j] = pl->rshape[j - 1]; pl->rshape[j - 1] = t;
      }
  pl->nout = lu_numel(pl->nk, pl->kshape);
  pl->R = lu_numel(pl->nr, pl->rshape);
  pl->nk = merge_axes(pl->nk, pl->kshape, pl->kstr);
  pl->nr = merge_axes(pl->nr, pl->rshape, pl->rstr);
  if (pl->nr == 0) { /* a single element per output */
    pl->rshape[0] = 1;
    pl->rstr[0] = pl->esize;
    pl->nr = 1;
  }
}

/* Byte offset of input element for output o, from the kept axes. */
static int64_t kept_offset(const plan *pl, int64_t o) {
  int64_t off = 0;
  for (int i = pl->nk - 1; i >= 0; i--) {
    off += (o % pl->kshape[i]) * pl->kstr[i];
    o /= pl->kshape[i];
  }
  return off;
}

/* Fold every element of the reduced space starting at p into a: rows along
 * the innermost reduced axis, rows walked in C order (flat index = row * n).
 * Every kernel here stops early after luon_interrupt (a partial result the
 * dispatcher throws away). */
static void fold_all(const plan *pl, acc *a, const char *p) {
  int last = pl->nr - 1;
  int64_t n = pl->rshape[last], nrows = pl->R / (n ? n : 1);
  int64_t idx[LU_MAXD] = {0};
  int64_t off = 0;
  for (int64_t r = 0; r < nrows && !lu_interrupted(); r++) {
    pl->fold(a, p + off, n, pl->rstr[last], r * n);
    for (int d = last - 1; d >= 0; d--) {
      off += pl->rstr[d];
      if (++idx[d] < pl->rshape[d]) break;
      off -= pl->rstr[d] * pl->rshape[d];
      idx[d] = 0;
    }
  }
}

/* Outputs [b, e): one output's whole reduced space at a time. */
static void rows_range(void *ctx, int64_t b, int64_t e) {
  const plan *pl = ctx;
  for (int64_t o = b; o < e && !lu_interrupted(); o++) {
    acc a = acc_init(pl->rop);
    fold_all(pl, &a, pl->base + kept_offset(pl, o));
    acc_finish(pl->rop, pl->fl, &a, pl->R, pl->out + o * pl->osize, pl->odt);
  }
}

/* Work item w = (output, chunk) of a long single reduced axis. */
static void chunks_range(void *ctx, int64_t b, int64_t e) {
  const plan *pl = ctx;
  for (int64_t w = b; w < e && !lu_interrupted(); w++) {
    int64_t o = w / pl->nchunk, ch = w % pl->nchunk;
    int64_t j0 = ch * pl->chunk, n = pl->R - j0 < pl->chunk ? pl->R - j0 : pl->chunk;
    acc a = acc_init(pl->rop);
    a.idx = j0;
    pl->fold(&a, pl->base + kept_offset(pl, o) + j0 * pl->rstr[0], n, pl->rstr[0], j0);
    pl->partial[w] = a;
  }
}

#define COL_BLOCK 512

/* Work item w = (outer kept index, block of columns): the innermost kept
 * axis is contiguous, so whole rows of it are folded into the columns. */
static void cols_range(void *ctx, int64_t b, int64_t e) {
  const plan *pl = ctx;
  double d[COL_BLOCK];
  int64_t iv[COL_BLOCK], ix[COL_BLOCK];
  cols cs = {d, iv, ix};
  int64_t C = pl->kshape[pl->nk - 1];
  for (int64_t w = b; w < e && !lu_interrupted(); w++) {
    int64_t outer = w / pl->nblk, c0 = (w % pl->nblk) * pl->cb;
    int64_t n = C - c0 < pl->cb ? C - c0 : pl->cb;
    int64_t o0 = outer * C + c0;
    acc a0 = acc_init(pl->rop);
    for (int64_t j = 0; j < n; j++) d[j] = a0.d, iv[j] = a0.i, ix[j] = 0;
    const char *p = pl->base + kept_offset(pl, o0);
    int64_t idx[LU_MAXD] = {0};
    int64_t off = 0;
    for (int64_t k = 0; k < pl->R; k++) {
      if ((k & 1023) == 0 && lu_interrupted()) return;
      pl->col(&cs, p + off, n, k);
      for (int dd = pl->nr - 1; dd >= 0; dd--) {
        off += pl->rstr[dd];
        if (++idx[dd] < pl->rshape[dd]) break;
        off -= pl->rstr[dd] * pl->rshape[dd];
        idx[dd] = 0;
      }
    }
    for (int64_t j = 0; j < n; j++) {
      acc a = {d[j], iv[j], ix[j]};
      acc_finish(pl->rop, pl->fl, &a, pl->R, pl->out + (o0 + j) * pl->osize, pl->odt);
    }
  }
}

#define CHUNK 32768
#define GRAIN 32768

static luon_status reduce_cpu(lu_call *c) {
  const luon_tensor *x = c->in[0];
  luon_tensor *y = c->out[0];
  plan pl;
  pl.rop = lu_reduce_op_of(c->op);
  pl.dt = x->dtype;
  pl.odt = y->dtype;
  pl.fl = lu_dtype_is_float(x->dtype);
  pl.esize = luon_dtype_size(x->dtype);
  pl.osize = luon_dtype_size(y->dtype);
  pl.base = lu_data(x);
  pl.fold = folds[pl.rop][pl.dt];
  pl.col = col_folds[pl.rop][pl.dt];
  pl.partial = NULL;
  if (!pl.fold) return lu_error(LUON_EDTYPE, "%s: no kernel for %s", op_names[pl.rop], luon_dtype_name(pl.dt));
  if (pl.rop <= LU_R_MEAN && pl.dt == LUON_DTYPE_F32) pl.fold = fold_fast_sum_f32;
  if (pl.rop <= LU_R_MEAN && pl.dt == LUON_DTYPE_F64) pl.fold = fold_fast_sum_f64;
  make_plan(&pl, x, c->scratch_i[0]);
  if (pl.nout == 0) return LUON_OK;

  pl.out = lu_data(y); /* contiguous: the dispatcher's outputs always are */
  luon_status s = LUON_OK;
  bool ref = lu_ref_kernels();

  if (pl.R == 0) { /* sum 0, prod 1, mean NaN (max/min were refused by the shape check) */
    acc a = acc_init(pl.rop);
    for (int64_t o = 0; o < pl.nout; o++)
      acc_finish(pl.rop, pl.fl, &a, 0, pl.out + o * pl.osize, pl.odt);
  } else if (!ref && pl.nk >= 1 && pl.kstr[pl.nk - 1] == pl.esize &&
             iabs64(pl.rstr[pl.nr - 1]) != pl.esize) {
    /* leading axes: accumulate rows into the columns of the output */
    int64_t C = pl.kshape[pl.nk - 1], nt = lu_num_threads();
    int64_t cb = (C + nt - 1) / nt;
    cb = cb < 64 ? 64 : cb > COL_BLOCK ? COL_BLOCK : cb;
    pl.cb = cb;
    pl.nblk = (C + cb - 1) / cb;
    int64_t items = pl.nout / C * pl.nblk;
    lu_parallel_for(items, pl.nout * pl.R < GRAIN ? items : 1, cols_range, &pl);
  } else if (!ref && pl.nr == 1 && pl.R >= 2 * CHUNK && pl.nout <= 64) {
    /* few long rows: fixed-size chunks (so results do not depend on the
     * number of threads), merged in order */
    pl.chunk = CHUNK;
    pl.nchunk = (pl.R + CHUNK - 1) / CHUNK;
    pl.partial = lu_scratch_alloc(sizeof(acc) * (size_t)(pl.nout * pl.nchunk));
    if (!pl.partial) {
      s = lu_error(LUON_ENOMEM, "%s: out of host memory for partial results", op_names[pl.rop]);
    } else {
      /* chunks skipped after luon_interrupt leave their start value */
      for (int64_t w = 0; w < pl.nout * pl.nchunk; w++) pl.partial[w] = acc_init(pl.rop);
      lu_parallel_for(pl.nout * pl.nchunk, 1, chunks_range, &pl);
      for (int64_t o = 0; o < pl.nout; o++) {
        acc a = pl.partial[o * pl.nchunk];
        for (int64_t ch = 1; ch < pl.nchunk; ch++)
          acc_merge(pl.rop, pl.fl, &a, &pl.partial[o * pl.nchunk + ch]);
        acc_finish(pl.rop, pl.fl, &a, pl.R, pl.out + o * pl.osize, pl.odt);
      }
    }
  } else {
    /* rows (the last axis of contiguous data) and everything else */
    int64_t grain = GRAIN / pl.R;
    lu_parallel_for(pl.nout, ref ? pl.nout : grain < 1 ? 1 : grain, rows_range, &pl);
  }
  lu_scratch_free(pl.partial);
  return s;
}

luon_status lu_cpu_sum(lu_call *c) { return reduce_cpu(c); }
luon_status lu_cpu_mean(lu_call *c) { return reduce_cpu(c); }
luon_status lu_cpu_prod(lu_call *c) { return reduce_cpu(c); }
luon_status lu_cpu_max(lu_call *c) { return reduce_cpu(c); }
luon_status lu_cpu_min(lu_call *c) { return reduce_cpu(c); }
luon_status lu_cpu_argmax(lu_call *c) { return reduce_cpu(c); }
luon_status lu_cpu_argmin(lu_call *c) { return reduce_cpu(c); }

/* ---- backward rules ------------------------------------------------------ */

/* The reduction's axes, from its attrs, for the backward: ks = x's shape
 * with them set to 1 (the keepdims shape), *a = the attrs of a keepdims
 * sum over them; returns how many elements went into each result. */
static int64_t keepdims_shape(const lu_grad_call *g, int64_t *ks, luon_attrs *a) {
  const luon_tensor *x = g->in[0];
  const luon_attrs *fa = g->attrs;
  int64_t mask = fa->ni <= LU_REDUCE_AXES ? ((int64_t)1 << x->ndim) - 1 : 0, R = 1;
  for (int k = LU_REDUCE_AXES; k < fa->ni; k++) mask |= (int64_t)1 << (fa->i[k] + (fa->i[k] < 0 ? x->ndim : 0));
  memset(a, 0, sizeof *a);
  a->i[LU_REDUCE_KEEPDIMS] = 1;
  a->ni = LU_REDUCE_AXES;
  for (int d = 0; d < x->ndim; d++) {
    ks[d] = mask >> d & 1 ? 1 : x->shape[d];
    if (mask >> d & 1) {
      R *= x->shape[d];
      a->i[a->ni++] = d;
    }
  }
  return R;
}

/* t broadcast to x's shape: a view. */
static luon_tensor *spread(lu_steps *e, luon_tensor *t, const luon_tensor *x) {
  luon_attrs a;
  memset(&a, 0, sizeof a);
  a.ni = x->ndim;
  memcpy(a.i, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return lu_steps_run(e, LU_OP_broadcast_to, &a, t, NULL, NULL);
}

/* Every rule: x the input, dyk = dy with the keepdims shape. */
#define BEGIN                                                                  \
  luon_tensor *x = g->in[0], *dy = g->dout[0];                                 \
  if (!g->need[0] || !dy || !lu_dtype_has_grad(x->dtype)) return LUON_OK;      \
  lu_steps e = {LUON_OK, 0, {NULL}};                                           \
  int64_t ks[LU_MAXD];                                                         \
  luon_attrs ra;                                                               \
  int64_t R = keepdims_shape(g, ks, &ra);                                      \
  luon_tensor *dyk = lu_steps_reshape(&e, dy, x->ndim, ks);                   \
  (void)R
#define END(dx)                                                                \
  lu_steps_give(&e, dx, x, &g->din[0]);                                        \
  return lu_steps_end(&e)

/* sum: dx = dy broadcast back over the reduced axes */
luon_status lu_grad_sum(lu_grad_call *g) {
  BEGIN;
  END(spread(&e, dyk, x));
}

/* mean over R elements each: dx = dy broadcast back, times 1/R */
luon_status lu_grad_mean(lu_grad_call *g) {
  BEGIN;
  END(R2(multiply, spread(&e, dyk, x), K(R ? 1.0 / (double)R : 0, dy)));
}

/* max, min: the gradient goes to the positions equal to the result, split
 * equally among ties (so that it sums to dy, as for a subgradient); a NaN
 * result equals no position: 0 along its reduced axes (MXNet's too). */
static luon_status grad_extreme(lu_grad_call *g) {
  BEGIN;
  luon_tensor *at = R2(equal, x, lu_steps_reshape(&e, g->out[0], x->ndim, ks)); /* x == result */
  ra.dtype = dy->dtype;
  luon_tensor *ties = RA(sum, &ra, at);                                  /* count per result */
  END(R3(where, at, R2(divide, dyk, ties), K(0, dy)));
}
luon_status lu_grad_max(lu_grad_call *g) { return grad_extreme(g); }
luon_status lu_grad_min(lu_grad_call *g) { return grad_extreme(g); }

/* prod: dx = dy * (the product of the other elements), zeros included.
 * With p the product of a reduction's nonzero elements: no zero in it,
 * p / x; exactly one zero, p at the zero and 0 elsewhere; two or more
 * zeros, 0 everywhere. Overflow of p gives inf, as in the forward. */
luon_status lu_grad_prod(lu_grad_call *g) {
  BEGIN;
  luon_tensor *zero = K(0, x), *one = K(1, x);
  luon_tensor *z = R2(equal, x, zero);          /* x == 0 */
  luon_tensor *xs = R3(where, z, one, x);       /* x with its zeros made 1 */
  luon_tensor *p = RA(prod, &ra, xs);           /* product of the nonzeros */
  ra.dtype = x->dtype;
  luon_tensor *nz = RA(sum, &ra, z);            /* zeros per result */
  luon_tensor *at_zero = R2(multiply, p, R2(equal, nz, one));
  luon_tensor *others = R2(multiply, R2(divide, p, xs), R2(equal, nz, zero));
  END(R2(multiply, dyk, R3(where, z, at_zero, others)));
}
