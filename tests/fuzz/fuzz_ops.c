/* fuzz_ops.c: libFuzzer target for every op of the registry called through
 * the C API (scripts/fuzz builds and runs it), as an embedding host may
 * call them: an op id, inputs of any dtype with 0-4 small dimensions (some
 * of them transposed views, some the same tensor twice) filled from the
 * input, and attributes that are mostly small but sometimes negative,
 * extreme, NaN or infinite. Errors are fine; crashes, leaks and undefined
 * behaviour are not. Sizes stay bounded (positive ints at most 257, the
 * ints' product at most 2^24) so that an honest large request is not
 * mistaken for a bug by libFuzzer's malloc limit. Seeds: none needed. */
#include "luon.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct src {
  const uint8_t *p;
  size_t n;
} src;

static unsigned next(src *s) {
  if (!s->n) return 0;
  s->n--;
  return *s->p++;
}

static const int64_t special_ints[] = {-1, 0, 1, 2, 3, 17, 64, 257, -2, -9, -257, INT32_MIN,
                                       -(int64_t)1 << 40, INT64_MIN, -INT64_MAX};
static const double special_floats[] = {0, 1, -1, 0.5, 2, 3.5, -7, 1e-3, 1e300, -1e300, NAN,
                                        INFINITY, -INFINITY, 1e-320, 255, 0.2};

static int64_t an_int(src *s) {
  unsigned v = next(s);
  if (v < 208) return (int64_t)(v % 13) - 2; /* -2 .. 10 */
  return special_ints[(v - 208) % (sizeof special_ints / sizeof *special_ints)];
}

static luon_tensor *an_input(src *s) {
  static const int32_t dts[] = {LUON_DTYPE_F32, LUON_DTYPE_F64, LUON_DTYPE_I32, LUON_DTYPE_I64,
                                LUON_DTYPE_U8, LUON_DTYPE_BOOL, LUON_DTYPE_F16, LUON_DTYPE_BF16};
  unsigned h = next(s);
  int32_t dt = dts[h % 8];
  int nd = (int)(h / 8 % 5);
  int64_t shape[4];
  for (int d = 0; d < nd; d++) shape[d] = next(s) % 7;
  luon_tensor *t = NULL;
  if (luon_tensor_empty(dt, nd, shape, LUON_CPU, 0, &t) != LUON_OK) return NULL;
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  size_t bytes = (size_t)in.size * (size_t)luon_dtype_size(dt);
  unsigned char *p = in.data;
  unsigned kind = next(s) % 4;
  for (size_t k = 0; k < bytes; k++) {
    /* raw bytes, or small values (ints and floats alike get small numbers) */
    unsigned v = kind == 0 ? next(s) : (unsigned)(k * 37 + kind) % 5;
    p[k] = kind == 0 || k % luon_dtype_size(dt) == 0 ? (unsigned char)v : 0;
  }
  if (dt == LUON_DTYPE_BOOL)
    for (size_t k = 0; k < bytes; k++) p[k] &= 1;
  if (dt == LUON_DTYPE_F32 && kind != 0)
    for (int64_t k = 0; k < in.size; k++) ((float *)p)[k] = (float)(k % 5) - 1.5f;
  if (dt == LUON_DTYPE_F64 && kind != 0)
    for (int64_t k = 0; k < in.size; k++) ((double *)p)[k] = (double)(k % 7) - 2.25;
  /* a transposed view now and then: the kernels' strided paths */
  if (nd >= 2 && next(s) % 4 == 0) {
    int64_t vs[4], st[4];
    for (int d = 0; d < nd; d++) vs[d] = in.shape[nd - 1 - d], st[d] = in.strides[nd - 1 - d];
    luon_tensor *v = NULL;
    if (luon_tensor_view(t, nd, vs, st, 0, &v) == LUON_OK) {
      luon_tensor_release(t);
      t = v;
    }
  }
  return t;
}

/* A named attribute slot's index (core/luon_ops.def), through the public
 * luon_attr_slot; 0 if there is none. */
static int slot(const char *name) {
  const char *n;
  int32_t index;
  for (int32_t k = 0; (n = luon_attr_slot(k, NULL, &index)) != NULL; k++)
    if (strcmp(n, name) == 0) return index;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  src s = {data, size};
  int32_t op = (int32_t)(next(&s) % (unsigned)luon_op_count());
  int32_t nin = luon_op_num_inputs(op);
  if (nin < 0) nin = 1 + (int32_t)(next(&s) % 4);
  if (next(&s) % 16 == 0) nin = (int32_t)(next(&s) % 4); /* the wrong count now and then */
  luon_tensor *in[LUON_MAX_OP_INPUTS] = {0};
  for (int k = 0; k < nin; k++) {
    if (k > 0 && next(&s) % 8 == 0) in[k] = luon_tensor_retain(in[k - 1]); /* aliasing */
    else in[k] = an_input(&s);
    if (!in[k]) goto out;
  }
  luon_attrs a;
  memset(&a, 0, sizeof a);
  unsigned h = next(&s);
  a.dtype = h % 4 == 0 ? (int32_t)(h / 4 % 11) - 1 : 0; /* sometimes -1 or past the last */
  a.dev_type = LUON_CPU;
  a.dev_id = 0;
  a.ni = (int32_t)(next(&s) % 10);
  double product = 1;
  for (int k = 0; k < a.ni; k++) {
    a.i[k] = an_int(&s);
    double m = a.i[k] > 1 ? (double)a.i[k] : 1;
    if (product * m > (double)(1 << 24)) a.i[k] = 1;
    else product *= m;
  }
  for (int k = 0; k < 8; k++) {
    unsigned v = next(&s);
    a.f[k] = v < 128 ? (double)(v % 9) * 0.25 - 0.5 : special_floats[v % 16];
  }
  /* arange counts its elements from the floats: keep them few */
  if (strcmp(luon_op_name(op), "arange") == 0) {
    double *f = a.f;
    int b = slot("ARANGE_START"), e = slot("ARANGE_STOP"), st = slot("ARANGE_STEP");
    if (isfinite(f[b]) && isfinite(f[e]) && isfinite(f[st]) && f[st] != 0 &&
        fabs((f[e] - f[b]) / f[st]) > (double)(1 << 24))
      f[st] = f[e] - f[b];
  }
  luon_tensor *out[8] = {0};
  int32_t nout = 8;
  if (luon_op_call(op, nin, in, next(&s) % 8 ? &a : NULL, &nout, out) == LUON_OK)
    for (int k = 0; k < nout && k < 8; k++) luon_tensor_release(out[k]);
out:
  for (int k = 0; k < nin; k++) luon_tensor_release(in[k]);
  return 0;
}
