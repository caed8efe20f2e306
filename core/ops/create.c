/* create.c: ops that make a tensor from attributes alone (full, arange,
 * linspace, eye), NumPy semantics; float32 unless attrs.dtype says otherwise.
 * Values are computed in double and converted to the result's dtype. */
#include "internal.h"
#include <math.h>

/* Result dtype: attrs.dtype, float32 when 0. */
static int32_t dtype_or_f32(const lu_call *c) { return c->attrs->dtype ? c->attrs->dtype : LUON_DTYPE_F32; }

/* The value of row-major element j of the result. */
typedef double (*value_fn)(const lu_call *c, int64_t j);

typedef struct fill_ctx {
  const lu_call *c;
  value_fn value;
} fill_ctx;

/* Elements [begin, end) of c->out[0], in chunks converted from double;
 * the result may be a strided out= view. */
static void fill_range(void *p, int64_t begin, int64_t end) {
  const fill_ctx *f = p;
  luon_tensor *y = f->c->out[0];
  int32_t dt = y->dtype;
  int64_t es = luon_dtype_size(dt);
  bool dense = lu_is_contiguous(y);
  char *base = lu_data(y);
  double v[256];
  char buf[256 * 8];
  for (int64_t j0 = begin; j0 < end; j0 += 256) {
    int64_t n = end - j0 < 256 ? end - j0 : 256;
    for (int64_t j = 0; j < n; j++) v[j] = f->value(f->c, j0 + j);
    if (dense) {
      lu_convert(base + j0 * es, dt, v, LUON_DTYPE_F64, n);
      continue;
    }
    lu_convert(buf, dt, v, LUON_DTYPE_F64, n);
    lu_put_range(y, j0, n, buf);
  }
}

static luon_status fill(lu_call *c, value_fn value) {
  fill_ctx f = {c, value};
  lu_parallel_for(c->out[0]->size, 1 << 16, fill_range, &f);
  return LUON_OK;
}

/* ---- full --------------------------------------------------------------- */

/* () -> shape i[FULL_SHAPE..ni) filled with VALUE. */
luon_status lu_shape_full(lu_call *c) {
  const luon_attrs *a = c->attrs;
  const int64_t *shape = a->i + LU_FULL_SHAPE;
  int nd = a->ni - LU_FULL_SHAPE;
  if (nd > LU_MAXD)
    return lu_error(LUON_ESHAPE, "full: %d dimensions, at most %d are supported", nd, LU_MAXD);
  for (int d = 0; d < nd; d++) {
    if (shape[d] < 0)
      return lu_error(LUON_ESHAPE, "full: negative dimension %lld in shape %s", (long long)shape[d],
                      lu_shape_str(nd, shape));
    c->out_shape[0][d] = shape[d];
  }
  c->out_ndim[0] = nd;
  c->out_dtype[0] = dtype_or_f32(c);
  return LUON_OK;
}

typedef struct full_ctx {
  char *dst;
  const char *value;
  int64_t es;
} full_ctx;

static void full_range(void *p, int64_t begin, int64_t end) {
  const full_ctx *f = p;
  for (int64_t j = begin; j < end; j++) memcpy(f->dst + j * f->es, f->value, (size_t)f->es);
}

static double full_value(const lu_call *c, int64_t j) { return c->attrs->f[LU_FULL_VALUE]; }

luon_status lu_cpu_full(lu_call *c) {
  luon_tensor *y = c->out[0];
  if (!lu_is_contiguous(y)) return fill(c, full_value);
  char value[8];
  lu_convert(value, y->dtype, &c->attrs->f[LU_FULL_VALUE], LUON_DTYPE_F64, 1);
  full_ctx f = {lu_data(y), value, luon_dtype_size(y->dtype)};
  lu_parallel_for(y->size, 1 << 16, full_range, &f);
  return LUON_OK;
}

/* ---- arange ------------------------------------------------------------- */

/* () -> (ceil((stop - start) / step),): start, start + step, ... */
luon_status lu_shape_arange(lu_call *c) {
  const double *f = c->attrs->f;
  double start = f[LU_ARANGE_START], stop = f[LU_ARANGE_STOP], step = f[LU_ARANGE_STEP];
  if (step == 0) return lu_error(LUON_EINVAL, "arange: step cannot be zero (start %g, stop %g)", start, stop);
  double n = ceil((stop - start) / step);
  if (!isfinite(n))
    return lu_error(LUON_EINVAL, "arange: start %g, stop %g, step %g do not give a finite length", start,
                    stop, step);
  if (n > 9.0e15)
    return lu_error(LUON_ESHAPE, "arange: start %g, stop %g, step %g give %g elements, too many", start,
                    stop, step, n);
  c->out_shape[0][0] = n > 0 ? (int64_t)n : 0;
  c->out_ndim[0] = 1;
  c->out_dtype[0] = dtype_or_f32(c);
  return LUON_OK;
}

static double arange_value(const lu_call *c, int64_t j) {
  return c->attrs->f[LU_ARANGE_START] + (double)j * c->attrs->f[LU_ARANGE_STEP];
}

luon_status lu_cpu_arange(lu_call *c) { return fill(c, arange_value); }

/* ---- linspace ----------------------------------------------------------- */

/* () -> (num,): num evenly spaced from start to stop (stop included when
 * endpoint). NUM (default 50), ENDPOINT (default 1). */
luon_status lu_shape_linspace(lu_call *c) {
  const luon_attrs *a = c->attrs;
  int64_t num = a->ni > LU_LINSPACE_NUM ? a->i[LU_LINSPACE_NUM] : 50;
  if (num < 0) return lu_error(LUON_EINVAL, "linspace: number of samples, %lld, must be non-negative", (long long)num);
  c->out_shape[0][0] = num;
  c->out_ndim[0] = 1;
  c->out_dtype[0] = dtype_or_f32(c);
  return LUON_OK;
}

static double linspace_value(const lu_call *c, int64_t j) {
  const luon_attrs *a = c->attrs;
  int64_t num = c->out[0]->shape[0];
  bool endpoint = a->ni > LU_LINSPACE_ENDPOINT ? a->i[LU_LINSPACE_ENDPOINT] != 0 : true;
  double start = a->f[LU_LINSPACE_START], stop = a->f[LU_LINSPACE_STOP];
  int64_t div = endpoint ? num - 1 : num;
  if (div <= 0) return start;
  if (endpoint && j == num - 1) return stop;
  return start + (double)j * ((stop - start) / (double)div);
}

luon_status lu_cpu_linspace(lu_call *c) { return fill(c, linspace_value); }

/* ---- eye ---------------------------------------------------------------- */

/* () -> (N, M): ones on diagonal K (K > 0 above the main one). M <= 0: M = N. */
luon_status lu_shape_eye(lu_call *c) {
  const luon_attrs *a = c->attrs;
  int64_t n = a->i[LU_EYE_N], m = a->i[LU_EYE_M] > 0 ? a->i[LU_EYE_M] : n;
  if (n < 0) return lu_error(LUON_EINVAL, "eye: N = %lld must be non-negative", (long long)n);
  c->out_shape[0][0] = n;
  c->out_shape[0][1] = m;
  c->out_ndim[0] = 2;
  c->out_dtype[0] = dtype_or_f32(c);
  return LUON_OK;
}

static double eye_value(const lu_call *c, int64_t j) {
  int64_t m = c->out[0]->shape[1];
  return j % m - j / m == c->attrs->i[LU_EYE_K] ? 1.0 : 0.0;
}

luon_status lu_cpu_eye(lu_call *c) { return fill(c, eye_value); }
