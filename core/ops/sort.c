/* sort.c: sorting and searching. sort: x (.., L, ..) -> the first K values
 * along an axis (.., K, ..) in order, and their int64 positions (a stable
 * merge sort per lane: ties keep their order; NaN sorts last, first when
 * descending, as NumPy); sort_grad puts dy back at those positions;
 * searchsorted: a (N,) sorted, v (..) -> int64 (..) insertion points.
 * float16 and bfloat16 come as float32 copies (LU_HALF, dispatch.c).
 * np.sort, np.argsort, npx.topk and np.unique are built on sort in lua/. */
#include "steps.h"
#include <math.h>
#include <stdlib.h>

#define PAR_GRAIN 16384 /* elements per thread before threads are used */

/* The lanes of t along axis ax: element offset of lane r (the row-major
 * index over t's other axes). */
static int64_t lane_offset(const luon_tensor *t, int ax, int64_t r) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (d == ax) continue;
    off += (r % t->shape[d]) * t->strides[d];
    r /= t->shape[d];
  }
  return off;
}

/* ---- sort ------------------------------------------------------------------ */

/* sort's axis and count of kept values K (K <= 0: all), checked against x. */
static luon_status sort_dims(const char *op, const luon_attrs *a, int ndim, const int64_t *shape,
                             int *ax, int64_t *k) {
  if (ndim == 0)
    return lu_error(LUON_EINVAL, "%s: cannot sort a 0-d array along an axis; reshape it to (1,) or "
                    "sort the flattened array (axis None)", op);
  LU_TRY(lu_axis(op, a->i[LU_SORT_AXIS], ndim, ax));
  int64_t L = shape[*ax], kk = a->ni > LU_SORT_K ? a->i[LU_SORT_K] : 0;
  if (kk > L)
    return lu_error(LUON_EINVAL, "%s: k must be at most the length %lld of axis %d, got k = %lld "
                    "(array shape %s)", op, (long long)L, *ax, (long long)kk, lu_shape_str(ndim, shape));
  *k = kk <= 0 ? L : kk;
  return LUON_OK;
}

luon_status lu_shape_sort(lu_call *c) {
  const luon_tensor *x = c->in[0];
  int ax;
  int64_t k;
  LU_TRY(sort_dims("sort", c->attrs, x->ndim, x->shape, &ax, &k));
  for (int o = 0; o < 2; o++) {
    c->out_ndim[o] = x->ndim;
    memcpy(c->out_shape[o], x->shape, sizeof(int64_t) * (size_t)x->ndim);
    c->out_shape[o][ax] = k;
  }
  c->out_dtype[0] = x->dtype;
  c->out_dtype[1] = LUON_DTYPE_I64;
  return LUON_OK;
}

/* before(a, b): a sorts strictly before b ascending (NaN after everything). */
#define LESS_INT(a, b) ((a) < (b))
#define LESS_FLT(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))

/* A stable merge sort of positions idx[0..L) by the values v at stride s,
 * tmp of L; descending takes b before a when a sorts before b. Then the
 * first k values and positions go out at strides ys, is. */
#define SORT_LANE(T, LESS)                                                                        \
  static void sort_lane_##T(const T *v, int64_t s, int64_t L, bool desc, int64_t *idx, int64_t *tmp, \
                            T *y, int64_t ys, int64_t *ix, int64_t is, int64_t k) {                 \
    for (int64_t i = 0; i < L; i++) idx[i] = i;                                                   \
    for (int64_t w = 1; w < L; w *= 2) {                                                          \
      for (int64_t lo = 0; lo < L; lo += 2 * w) {                                                 \
        int64_t mid = lo + w < L ? lo + w : L, hi = lo + 2 * w < L ? lo + 2 * w : L;              \
        int64_t i = lo, j = mid, o = lo;                                                          \
        while (i < mid && j < hi) {                                                               \
          T a = v[idx[i] * s], b = v[idx[j] * s];                                                 \
          bool right = desc ? LESS(a, b) : LESS(b, a); /* strictly before: ties stay */           \
          tmp[o++] = right ? idx[j++] : idx[i++];                                                 \
        }                                                                                         \
        while (i < mid) tmp[o++] = idx[i++];                                                      \
        while (j < hi) tmp[o++] = idx[j++];                                                       \
      }                                                                                           \
      int64_t *t = idx;                                                                           \
      idx = tmp;                                                                                  \
      tmp = t;                                                                                    \
    }                                                                                             \
    for (int64_t i = 0; i < k; i++) {                                                             \
      y[i * ys] = v[idx[i] * s];                                                                  \
      ix[i * is] = idx[i];                                                                        \
    }                                                                                             \
  }
SORT_LANE(float, LESS_FLT)
SORT_LANE(double, LESS_FLT)
SORT_LANE(int32_t, LESS_INT)
SORT_LANE(int64_t, LESS_INT)
SORT_LANE(uint8_t, LESS_INT)

typedef struct sjob {
  const luon_tensor *x, *y, *ix;
  int ax;
  int64_t L, k;
  bool desc;
  int failed; /* scratch ran out */
} sjob;

static void sort_lanes(void *ctx, int64_t b, int64_t e) {
  sjob *j = ctx;
  int64_t *idx = lu_scratch_alloc(sizeof(int64_t) * (size_t)(2 * j->L + 1));
  if (!idx) {
    __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  int64_t *tmp = idx + j->L, s = j->x->strides[j->ax], ys = j->y->strides[j->ax];
  int64_t is = j->ix->strides[j->ax];
  for (int64_t r = b; r < e && !lu_interrupted(); r++) {
    int64_t xo = lane_offset(j->x, j->ax, r), yo = lane_offset(j->y, j->ax, r);
    int64_t io = lane_offset(j->ix, j->ax, r);
    int64_t *ix = (int64_t *)lu_data(j->ix) + io;
#define RUN(T)                                                                                    \
  sort_lane_##T((const T *)lu_data(j->x) + xo, s, j->L, j->desc, idx, tmp, (T *)lu_data(j->y) + yo, \
                ys, ix, is, j->k)
    switch (j->x->dtype) {
    case LUON_DTYPE_F32: RUN(float); break;
    case LUON_DTYPE_F64: RUN(double); break;
    case LUON_DTYPE_I32: RUN(int32_t); break;
    case LUON_DTYPE_I64: RUN(int64_t); break;
    default: RUN(uint8_t); break; /* uint8, bool */
    }
#undef RUN
  }
  lu_scratch_free(idx);
}

luon_status lu_cpu_sort(lu_call *c) {
  const luon_tensor *x = c->in[0];
  sjob j = {x, c->out[0], c->out[1], 0, 0, 0, c->attrs->i[LU_SORT_DESCENDING] != 0, 0};
  LU_TRY(sort_dims("sort", c->attrs, x->ndim, x->shape, &j.ax, &j.k));
  j.L = x->shape[j.ax];
  if (c->out[0]->size == 0) return LUON_OK;
  int64_t lanes = x->size / j.L, grain = PAR_GRAIN / (j.L * 8 + 1);
  lu_parallel_for(lanes, grain < 1 ? 1 : grain, sort_lanes, &j);
  if (j.failed)
    return lu_error(LUON_ENOMEM, "sort: out of host memory for the scratch of a lane of %lld",
                    (long long)j.L);
  return LUON_OK;
}

/* ---- sort_grad --------------------------------------------------------------- */

/* dy (.., K, ..), indices (.., K, ..) -> dx (.., L, ..): zeros, and dy at
 * the positions the indices name along the axis (any dtype: npx.topk's mask
 * puts ones). Indices come from sort: distinct, in [0, L). */
luon_status lu_shape_sort_grad(lu_call *c) {
  const luon_tensor *dy = c->in[0], *ix = c->in[1];
  const luon_attrs *a = c->attrs;
  const int64_t *shape = a->i + LU_NI_sort;
  int nd = a->ni - LU_NI_sort, ax;
  int64_t k;
  if (nd < 1 || nd > LU_MAXD)
    return lu_error(LUON_EINVAL, "sort_grad: attrs must hold sort's slots and the shape of x (1 to "
                    "%d dims), got %d ints", LU_MAXD, a->ni);
  for (int d = 0; d < nd; d++)
    if (shape[d] < 0)
      return lu_error(LUON_ESHAPE, "sort_grad: negative dimension in shape %s", lu_shape_str(nd, shape));
  LU_TRY(sort_dims("sort_grad", a, nd, shape, &ax, &k));
  if (ix->dtype != LUON_DTYPE_I64)
    return lu_error(LUON_EDTYPE, "sort_grad: indices are %s, not int64", luon_dtype_name(ix->dtype));
  const luon_tensor *chk[2] = {dy, ix};
  for (int t = 0; t < 2; t++) {
    bool ok = chk[t]->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = chk[t]->shape[d] == (d == ax ? k : shape[d]);
    if (!ok)
      return lu_error(LUON_ESHAPE, "sort_grad: %s has shape %s; for x of shape %s with k = %lld along "
                      "axis %d it must be the sorted shape", t ? "indices" : "dy",
                      lu_shape_str(chk[t]->ndim, chk[t]->shape), lu_shape_str(nd, shape), (long long)k, ax);
  }
  c->out_ndim[0] = nd;
  memcpy(c->out_shape[0], shape, sizeof(int64_t) * (size_t)nd);
  c->out_dtype[0] = dy->dtype;
  return LUON_OK;
}

typedef struct gjob {
  const luon_tensor *dy, *ix, *dx;
  int ax;
  int64_t k, L;
} gjob;

static void scatter_lanes(void *ctx, int64_t b, int64_t e) {
  const gjob *j = ctx;
  int64_t es = luon_dtype_size(j->dx->dtype), ds = j->dy->strides[j->ax], is = j->ix->strides[j->ax];
  int64_t xs = j->dx->strides[j->ax];
  for (int64_t r = b; r < e && !lu_interrupted(); r++) {
    const char *dy = (const char *)lu_data(j->dy) + lane_offset(j->dy, j->ax, r) * es;
    const int64_t *ix = (const int64_t *)lu_data(j->ix) + lane_offset(j->ix, j->ax, r);
    char *dx = (char *)lu_data(j->dx) + lane_offset(j->dx, j->ax, r) * es;
    for (int64_t i = 0; i < j->L; i++) memset(dx + i * xs * es, 0, (size_t)es);
    for (int64_t i = 0; i < j->k; i++) {
      int64_t p = ix[i * is];
      if (p >= 0 && p < j->L) memcpy(dx + p * xs * es, dy + i * ds * es, (size_t)es);
    }
  }
}

luon_status lu_cpu_sort_grad(lu_call *c) {
  const luon_tensor *dx = c->out[0];
  gjob j = {c->in[0], c->in[1], dx, 0, 0, 0};
  LU_TRY(sort_dims("sort_grad", c->attrs, dx->ndim, dx->shape, &j.ax, &j.k));
  j.L = dx->shape[j.ax];
  if (dx->size == 0) return LUON_OK;
  int64_t lanes = dx->size / j.L, grain = PAR_GRAIN / (j.L + 1);
  lu_parallel_for(lanes, grain < 1 ? 1 : grain, scatter_lanes, &j);
  return LUON_OK;
}

/* y = the first k of sort(x): dx = sort_grad(dy, indices) (zero where a
 * value was not kept); the indices have no gradient */
luon_status lu_grad_sort(lu_grad_call *g) {
  if (!g->need[0] || !g->dout[0] || !lu_dtype_has_grad(g->in[0]->dtype)) return LUON_OK;
  const luon_tensor *x = g->in[0];
  luon_attrs a = *g->attrs;
  if (a.ni < LU_NI_sort) memset(a.i + a.ni, 0, sizeof(int64_t) * (size_t)(LU_NI_sort - a.ni));
  a.ni = LU_NI_sort + x->ndim;
  memcpy(a.i + LU_NI_sort, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  return lu_run(LU_OP_sort_grad, &a, &g->din[0], 2, g->dout[0], g->out[1]);
}

/* ---- searchsorted -------------------------------------------------------------- */

/* a (N,) sorted ascending, v (..) -> i (..) int64: the first position where
 * v could go keeping a sorted (RIGHT: after the equal ones). a and v are
 * compared as float64 when either is a float, else as int64. */
luon_status lu_shape_searchsorted(lu_call *c) {
  const luon_tensor *a = c->in[0], *v = c->in[1];
  if (a->ndim != 1)
    return lu_error(LUON_ESHAPE, "searchsorted: a must be 1-d (sorted), got shape %s",
                    lu_shape_str(a->ndim, a->shape));
  c->out_ndim[0] = v->ndim;
  memcpy(c->out_shape[0], v->shape, sizeof(int64_t) * (size_t)v->ndim);
  c->out_dtype[0] = LUON_DTYPE_I64;
  return LUON_OK;
}

static double as_f64(const char *p, int32_t dt) {
  switch (dt) {
  case LUON_DTYPE_F32: return *(const float *)p;
  case LUON_DTYPE_F64: return *(const double *)p;
  case LUON_DTYPE_I32: return *(const int32_t *)p;
  case LUON_DTYPE_I64: return (double)*(const int64_t *)p;
  default: return *(const uint8_t *)p;
  }
}

static int64_t as_i64(const char *p, int32_t dt) {
  switch (dt) {
  case LUON_DTYPE_I32: return *(const int32_t *)p;
  case LUON_DTYPE_I64: return *(const int64_t *)p;
  default: return *(const uint8_t *)p;
  }
}

typedef struct qjob {
  const char *a;
  int64_t n, as; /* a's length and byte stride */
  int32_t adt, vdt;
  bool right, fl;
} qjob;

/* op 0 out (int64), op 1 v */
static void search_row(void *ctx, int64_t n, char *const *p, const int64_t *st) {
  const qjob *j = ctx;
  for (int64_t e = 0; e < n; e++) {
    const char *vp = p[1] + e * st[1];
    double vf = j->fl ? as_f64(vp, j->vdt) : 0;
    int64_t vi = j->fl ? 0 : as_i64(vp, j->vdt), lo = 0, hi = j->n;
    while (lo < hi) { /* the first a[m] that v sorts before (right) or not after (left) */
      int64_t m = lo + (hi - lo) / 2;
      const char *ap = j->a + m * j->as;
      bool go_right;
      if (j->fl) {
        double x = as_f64(ap, j->adt);
        go_right = j->right ? !LESS_FLT(vf, x) : LESS_FLT(x, vf);
      } else {
        int64_t x = as_i64(ap, j->adt);
        go_right = j->right ? !(vi < x) : x < vi;
      }
      if (go_right) lo = m + 1;
      else hi = m;
    }
    *(int64_t *)(p[0] + e * st[0]) = lo;
  }
}

luon_status lu_cpu_searchsorted(lu_call *c) {
  const luon_tensor *a = c->in[0], *v = c->in[1];
  luon_tensor *y = c->out[0];
  qjob j = {lu_data(a), a->shape[0], a->strides[0] * luon_dtype_size(a->dtype), a->dtype, v->dtype,
            c->attrs->i[LU_SEARCHSORTED_RIGHT] != 0,
            lu_dtype_is_float(a->dtype) || lu_dtype_is_float(v->dtype)};
  if (y->size == 0) return LUON_OK;
  int64_t shape[LU_MAXD], st[LU_ITER_MAX_OPS][LU_MAXD];
  memcpy(shape, y->shape, sizeof(int64_t) * (size_t)y->ndim);
  lu_byte_strides(y, y->ndim, shape, st[0]);
  lu_byte_strides(v, y->ndim, shape, st[1]);
  char *base[2] = {lu_data(y), lu_data(v)};
  lu_foreach_row(y->ndim, shape, 2, base, (const int64_t(*)[LU_MAXD])st, PAR_GRAIN / 16, true,
                 search_row, &j);
  return LUON_OK;
}
