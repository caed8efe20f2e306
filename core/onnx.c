/* onnx.c: a captured graph as an ONNX model (luon_graph_save_onnx), for
 * hosts that run ONNX Runtime or TensorRT. The protobuf encoding is
 * protobuf-c's, generated at build time from the onnx.proto that Debian's
 * libonnx-dev ships; built without them, saving says what to install.
 *
 * One file: ONNX opset 13, IR version 7; the parameters are initializers
 * (raw little-endian data) under the names the caller gives, the inputs
 * and outputs have the shapes and dtypes the graph was captured with (a
 * graph is traced per signature, so the batch size is fixed). Each luon op
 * becomes the ONNX ops that compute the same values: the fused ones are
 * taken apart again (conv2d_maxpool: Conv, Relu, MaxPool[,
 * BatchNormalization]; conv2d_bn: Conv, BatchNormalization[, Relu];
 * linear: Gemm with transB[, Relu]). An op with no mapping, a batch norm
 * in training mode, a dtype ONNX's op does not take (integer division), or
 * an output ONNX has no place for (a pooling's window indices read later)
 * is refused by name, and nothing is written: no model that computes
 * something else. The file is replaced whole (lu_wfile). */
#include "graph.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#if LUON_ONNX
#include "onnx.pb-c.h"

enum { OPSET = 13, IR_VERSION = 7 };

/* Every allocation of one save, freed together. */
typedef struct arena {
  void **blocks;
  size_t n, cap;
} arena;

typedef struct ox {
  arena ar;
  const luon_graph *g;
  const char *const *const_names;
  const char **name;     /* per slot: its value's name */
  int32_t *dtype;        /* per slot: its dtype, 0 unknown */
  Onnx__NodeProto **nodes;
  size_t nnodes, node_cap;
  Onnx__TensorProto **inits;
  size_t ninits, init_cap;
  int32_t at;            /* the node being translated (messages) */
  int tmp;               /* temporaries made */
  const char **names;    /* every value name given out (open addressing), so none is given twice */
  size_t names_cap, names_n;
  luon_status err;
} ox;

static void *ar_alloc(ox *x, size_t bytes) {
  if (x->err != LUON_OK) return NULL;
  arena *a = &x->ar;
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 256;
    void **b = realloc(a->blocks, cap * sizeof *b);
    if (!b) goto oom;
    a->blocks = b, a->cap = cap;
  }
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) goto oom;
  a->blocks[a->n++] = p;
  return p;
oom:
  x->err = lu_error(LUON_ENOMEM, "onnx export: out of host memory");
  return NULL;
}

static char *ar_fmt(ox *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *ar_fmt(ox *x, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n >= 0 ? ar_alloc(x, (size_t)n + 1) : NULL;
  if (s) {
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
  }
  return s;
}

static void ar_free(arena *a) {
  for (size_t k = 0; k < a->n; k++) free(a->blocks[k]);
  free(a->blocks);
}

/* ---- names: one value, one name ------------------------------------------------ */

static uint64_t name_hash(const char *s) {
  uint64_t h = 14695981039346656037ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* the slot of s in the set: where it is, or the empty one it would take */
static const char **name_slot(ox *x, const char *s) {
  size_t m = x->names_cap - 1, i = (size_t)name_hash(s) & m;
  while (x->names[i] && strcmp(x->names[i], s) != 0) i = (i + 1) & m;
  return &x->names[i];
}

static bool name_taken(ox *x, const char *s) { return x->names_cap && *name_slot(x, s) != NULL; }

static bool name_add(ox *x, const char *s) {
  if (2 * (x->names_n + 1) > x->names_cap) { /* keep it at most half full */
    size_t cap = x->names_cap ? 2 * x->names_cap : 1024;
    const char **old = x->names, **v = ar_alloc(x, cap * sizeof *v);
    if (!v) return false;
    size_t oc = x->names_cap;
    x->names = v, x->names_cap = cap;
    for (size_t k = 0; k < oc; k++)
      if (old[k]) *name_slot(x, old[k]) = old[k];
  }
  *name_slot(x, s) = s;
  x->names_n++;
  return true;
}

/* base if no value has it yet, else base_1, base_2, ...: generated names
 * never meet a parameter's (an initializer named as another value would
 * shadow it: ONNX reads an initializer named as an input as that input's
 * default) */
static const char *uniq(ox *x, const char *base) {
  if (!base) return NULL;
  const char *s = base;
  for (int k = 1; name_taken(x, s); k++)
    if (!(s = ar_fmt(x, "%s_%d", base, k))) return NULL;
  return name_add(x, s) ? s : NULL;
}

/* append p to the list *v of *n entries with room for *cap */
static bool push(ox *x, void ***v, size_t *n, size_t *cap, void *p) {
  if (!p) return false;
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    void **b = ar_alloc(x, c * sizeof *b);
    if (!b) return false;
    if (*n) memcpy(b, *v, *n * sizeof *b);
    *v = b, *cap = c;
  }
  (*v)[(*n)++] = p;
  return true;
}

static bool refuse(ox *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool refuse(ox *x, const char *fmt, ...) {
  if (x->err != LUON_OK) return false;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  x->err = lu_error(LUON_EUNSUPPORTED, "onnx export: node %d (%s): %s", (int)x->at + 1,
                    luon_op_name(x->g->nodes[x->at].op), msg);
  return false;
}

/* ---- building blocks ------------------------------------------------------- */

static int32_t onnx_type(int32_t dt) {
  switch (dt) {
  case LUON_DTYPE_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  case LUON_DTYPE_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  case LUON_DTYPE_F16: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16;
  case LUON_DTYPE_BF16: return ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16;
  case LUON_DTYPE_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
  case LUON_DTYPE_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  case LUON_DTYPE_U8: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT8;
  case LUON_DTYPE_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  case LUON_DTYPE_I8: return ONNX__TENSOR_PROTO__DATA_TYPE__INT8;
  case LUON_DTYPE_I16: return ONNX__TENSOR_PROTO__DATA_TYPE__INT16;
  case LUON_DTYPE_U16: return ONNX__TENSOR_PROTO__DATA_TYPE__UINT16;
  default: return 0;
  }
}

static bool is_float(int32_t dt) {
  return dt == LUON_DTYPE_F32 || dt == LUON_DTYPE_F64 || dt == LUON_DTYPE_F16 || dt == LUON_DTYPE_BF16;
}

/* an initializer named `name` holding n bytes of data */
static Onnx__TensorProto *tensor(ox *x, const char *name, int32_t dt, int32_t ndim, const int64_t *shape,
                                 const void *data, size_t bytes) {
  Onnx__TensorProto *t = ar_alloc(x, sizeof *t);
  int64_t *dims = ar_alloc(x, sizeof(int64_t) * (size_t)(ndim + 1));
  void *raw = ar_alloc(x, bytes);
  if (!t || !dims || !raw) return NULL;
  onnx__tensor_proto__init(t);
  if (ndim) memcpy(dims, shape, sizeof(int64_t) * (size_t)ndim);
  memcpy(raw, data, bytes);
  t->n_dims = (size_t)ndim, t->dims = dims;
  t->has_data_type = true, t->data_type = onnx_type(dt);
  t->name = (char *)name;
  t->has_raw_data = true, t->raw_data.len = bytes, t->raw_data.data = raw;
  return t;
}

static bool add_init(ox *x, Onnx__TensorProto *t) {
  return push(x, (void ***)&x->inits, &x->ninits, &x->init_cap, t);
}

/* a fresh name for a value between the ONNX nodes of one luon node */
static const char *temp(ox *x) { return uniq(x, ar_fmt(x, "_t%d", x->tmp++)); }

/* the node op_type(in...) -> out; NULL inputs are left empty (an absent
 * optional input) */
static Onnx__NodeProto *node(ox *x, const char *op, int nin, const char *const *in, const char *out) {
  Onnx__NodeProto *n = ar_alloc(x, sizeof *n);
  char **ins = ar_alloc(x, sizeof(char *) * (size_t)(nin + 1)), **outs = ar_alloc(x, sizeof(char *));
  if (!n || !ins || !outs || !out) return NULL;
  onnx__node_proto__init(n);
  for (int k = 0; k < nin; k++) ins[k] = (char *)(in[k] ? in[k] : "");
  outs[0] = (char *)out;
  n->n_input = (size_t)nin, n->input = ins;
  n->n_output = 1, n->output = outs;
  n->op_type = (char *)op;
  n->name = ar_fmt(x, "%s_%zu", op, x->nnodes);
  return push(x, (void ***)&x->nodes, &x->nnodes, &x->node_cap, n) ? n : NULL;
}

static Onnx__AttributeProto *attr(ox *x, Onnx__NodeProto *n, const char *name,
                                  Onnx__AttributeProto__AttributeType type) {
  if (!n) return NULL;
  Onnx__AttributeProto *a = ar_alloc(x, sizeof *a);
  Onnx__AttributeProto **v = ar_alloc(x, sizeof *v * (n->n_attribute + 1));
  if (!a || !v) return NULL;
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = true, a->type = type;
  if (n->n_attribute) memcpy(v, n->attribute, sizeof *v * n->n_attribute);
  v[n->n_attribute++] = a;
  n->attribute = v;
  return a;
}

static void attr_i(ox *x, Onnx__NodeProto *n, const char *name, int64_t i) {
  Onnx__AttributeProto *a = attr(x, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) a->has_i = true, a->i = i;
}

static void attr_f(ox *x, Onnx__NodeProto *n, const char *name, double f) {
  Onnx__AttributeProto *a = attr(x, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (a) a->has_f = true, a->f = (float)f;
}

static void attr_ints(ox *x, Onnx__NodeProto *n, const char *name, int count, const int64_t *v) {
  Onnx__AttributeProto *a = attr(x, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *c = a ? ar_alloc(x, sizeof(int64_t) * (size_t)count) : NULL;
  if (!c) return;
  memcpy(c, v, sizeof(int64_t) * (size_t)count);
  a->n_ints = (size_t)count, a->ints = c;
}

/* ---- the ops ----------------------------------------------------------------- */

static int64_t ia(const gnode *n, int slot, int64_t dflt) { return n->attrs.ni > slot ? n->attrs.i[slot] : dflt; }

static const char *in_name(ox *x, const gnode *n, int k) { return x->name[n->in[k]]; }
static int32_t in_dtype(ox *x, const gnode *n, int k) { return x->dtype[n->in[k]]; }

/* the shape of input k of n where the graph knows it (a graph input or a
 * constant): its ndim, else -1 */
static int in_shape(ox *x, const gnode *n, int k, const int64_t **shape) {
  int32_t s = n->in[k];
  if (s < x->g->nin) {
    *shape = x->g->in_sig[s].shape;
    return x->g->in_sig[s].ndim;
  }
  if (x->g->kind[s] == SLOT_CONST) {
    *shape = x->g->consts[s]->shape;
    return x->g->consts[s]->ndim;
  }
  return -1;
}

/* an int64 initializer of the n values v (a 1-d list, or a scalar when n < 0) */
static const char *ints(ox *x, const char *base, int n, const int64_t *v) {
  const char *name = uniq(x, ar_fmt(x, "_%s%d", base, x->tmp++));
  int64_t len = n;
  return name && add_init(x, tensor(x, name, LUON_DTYPE_I64, n < 0 ? 0 : 1, &len, v,
                                    sizeof(int64_t) * (size_t)(n < 0 ? 1 : n))) ? name : NULL;
}

/* op(in...) -> a fresh temporary (NULL when it could not be made) */
static const char *step(ox *x, const char *op, int nin, const char *const *in) {
  const char *t = temp(x);
  return t && node(x, op, nin, in, t) ? t : NULL;
}
#define STEP(op, ...) step(x, op, sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *), (const char *[]){__VA_ARGS__})

/* output k of node n, made by this node: its name, dtype dt */
static const char *out_name(ox *x, const gnode *n, int k, int32_t dt) {
  x->dtype[n->out[k]] = dt;
  return x->name[n->out[k]];
}

/* false (refused) where output k of n is read by a later node or is an
 * output of the graph: ONNX's op has no such output */
static bool unread(ox *x, const gnode *n, int k, const char *what) {
  int32_t s = n->out[k];
  if (x->g->last_use[s] >= 0 || x->g->is_output[s])
    return refuse(x, "its %s (output %d) is read later, and ONNX's ops have no such output", what, k + 1);
  return true;
}

/* Conv of x, w[, b] (conv2d's slots) into out; its relu is the caller's */
static bool conv(ox *x, const gnode *n, int nconv, const char *out) {
  const char *in[3] = {in_name(x, n, 0), in_name(x, n, 1), nconv > 2 ? in_name(x, n, 2) : NULL};
  Onnx__NodeProto *c = node(x, "Conv", nconv, in, out);
  int64_t st[2] = {ia(n, LU_CONV2D_STRIDE_H, 1), ia(n, LU_CONV2D_STRIDE_W, 1)};
  int64_t ph = ia(n, LU_CONV2D_PAD_H, 0), pw = ia(n, LU_CONV2D_PAD_W, 0), pads[4] = {ph, pw, ph, pw};
  int64_t dil[2] = {ia(n, LU_CONV2D_DILATE_H, 1), ia(n, LU_CONV2D_DILATE_W, 1)};
  attr_ints(x, c, "strides", 2, st);
  attr_ints(x, c, "pads", 4, pads);
  attr_ints(x, c, "dilations", 2, dil);
  attr_i(x, c, "group", ia(n, LU_CONV2D_GROUPS, 1));
  return c != NULL;
}

/* BatchNormalization of v (axis 1) with the four inputs from k0, into out */
static bool bn(ox *x, const gnode *n, const char *v, int k0, double eps, const char *out) {
  const char *in[5] = {v, in_name(x, n, k0), in_name(x, n, k0 + 1), in_name(x, n, k0 + 2), in_name(x, n, k0 + 3)};
  Onnx__NodeProto *b = node(x, "BatchNormalization", 5, in, out);
  attr_f(x, b, "epsilon", eps);
  return b != NULL;
}

static bool unary(ox *x, const char *op, const char *v, const char *out) {
  const char *in[1] = {v};
  return node(x, op, 1, in, out) != NULL;
}

/* max_pool2d/avg_pool2d's slots (or conv2d_maxpool's, from `at`) */
static bool pool(ox *x, const gnode *n, const char *op, int at, bool avg, const char *v, const char *out) {
  int64_t k[2] = {ia(n, at + LU_POOL_KERNEL_H, 1), ia(n, at + LU_POOL_KERNEL_W, 1)};
  int64_t st[2] = {ia(n, at + LU_POOL_STRIDE_H, k[0]), ia(n, at + LU_POOL_STRIDE_W, k[1])};
  int64_t ph = ia(n, at + LU_POOL_PAD_H, 0), pw = ia(n, at + LU_POOL_PAD_W, 0), pads[4] = {ph, pw, ph, pw};
  bool ceil = ia(n, at + LU_POOL_CEIL, 0) != 0;
  /* ceil_mode: luon drops a last window that would start in the padding
   * (PyTorch's rule), which ONNX's output size does not say; without
   * padding and with windows as wide as the stride none starts there */
  if (ceil && (avg || ph || pw || k[0] < st[0] || k[1] < st[1]))
    return refuse(x, "ceil_mode with %s: ONNX's rule for the last window differs from luon's there",
                  avg ? "average pooling" : "padding or a stride wider than the window");
  const char *in[1] = {v};
  Onnx__NodeProto *p = node(x, op, 1, in, out);
  attr_ints(x, p, "kernel_shape", 2, k);
  attr_ints(x, p, "strides", 2, st);
  attr_ints(x, p, "pads", 4, pads);
  attr_i(x, p, "ceil_mode", ceil);
  if (avg) attr_i(x, p, "count_include_pad", ia(n, LU_POOL_COUNT_PAD, 1));
  return p != NULL;
}

static bool need_float(ox *x, const gnode *n, int k) {
  int32_t dt = in_dtype(x, n, k);
  if (is_float(dt)) return true;
  return refuse(x, "input %d is %s; the ONNX op takes floating-point values only", k + 1,
                dt ? luon_dtype_name(dt) : "of a dtype not known here");
}

/* the dtypes opset 13's Add, Sub, Mul, Div, Pow, MatMul and Neg take
 * (Max, Min and Abs: every numeric one but bool) */
static bool arith_type(int32_t dt) { return is_float(dt) || dt == LUON_DTYPE_I32 || dt == LUON_DTYPE_I64; }

/* the dtype both inputs of a binary op share; ok_dt: the ONNX op takes it */
static int32_t same_dtype(ox *x, const gnode *n, bool (*ok_dt)(int32_t)) {
  int32_t a = in_dtype(x, n, 0), b = n->nin > 1 ? in_dtype(x, n, 1) : a;
  if (!a || a != b) {
    refuse(x, "its inputs are %s and %s; ONNX's elementwise ops take one dtype (cast one first: astype)",
           a ? luon_dtype_name(a) : "unknown", b ? luon_dtype_name(b) : "unknown");
    return 0;
  }
  if (!ok_dt(a)) {
    refuse(x, "%s inputs, which the ONNX op (opset 13) does not take (cast first: astype)", luon_dtype_name(a));
    return 0;
  }
  return a;
}
static bool numeric_type(int32_t dt) { return dt != LUON_DTYPE_BOOL && onnx_type(dt) != 0; }

/* a 0-d initializer of dtype dt (float32 or float64) holding v */
static const char *scalar(ox *x, int32_t dt, double v) {
  const char *name = uniq(x, ar_fmt(x, "_c%d", x->tmp++));
  float f = (float)v;
  const void *p = dt == LUON_DTYPE_F64 ? (const void *)&v : (const void *)&f;
  return name && add_init(x, tensor(x, name, dt, 0, NULL, p, (size_t)luon_dtype_size(dt))) ? name : NULL;
}

static bool translate(ox *x, const gnode *n) {
  int32_t dt0 = n->nin > 0 ? in_dtype(x, n, 0) : 0;
  /* a result dtype asked of the op (np.sum(x, {dtype = ...})): only copy
   * (Cast) and full take one here */
  if (n->attrs.dtype && n->attrs.dtype != dt0 && n->op != LU_OP_copy && n->op != LU_OP_full)
    return refuse(x, "its result is asked as %s of %s inputs (cast first: astype)", luon_dtype_name(n->attrs.dtype),
                  dt0 ? luon_dtype_name(dt0) : "unknown");
  switch (n->op) {
  case OP_DETACH: return unary(x, "Identity", in_name(x, n, 0), out_name(x, n, 0, dt0));
  case LU_OP_conv2d: {
    const char *out = out_name(x, n, 0, dt0);
    bool relu = ia(n, LU_CONV2D_RELU, 0) != 0;
    const char *c = relu ? temp(x) : out;
    return need_float(x, n, 0) && conv(x, n, n->nin, c) && (!relu || unary(x, "Relu", c, out));
  }
  case LU_OP_conv2d_bn: {
    const char *out = out_name(x, n, 0, dt0), *c = temp(x);
    bool relu = ia(n, LU_CBN_RELU, 0) != 0;
    const char *b = relu ? temp(x) : out;
    return need_float(x, n, 0) && conv(x, n, n->nin - 4, c) && bn(x, n, c, n->nin - 4, n->attrs.f[LU_CBN_EPS], b) &&
           (!relu || unary(x, "Relu", b, out));
  }
  case LU_OP_conv2d_maxpool: {
    bool with_bn = ia(n, LU_CMP_BN, 0) != 0, relu = ia(n, LU_CONV2D_RELU, 0) != 0;
    int nconv = n->nin - (with_bn ? 4 : 0);
    if (!need_float(x, n, 0) || !unread(x, n, 1, "window indices")) return false;
    const char *out = out_name(x, n, 0, dt0), *c = temp(x), *r = relu ? temp(x) : c;
    const char *p = with_bn ? temp(x) : out;
    return conv(x, n, nconv, c) && (!relu || unary(x, "Relu", c, r)) &&
           pool(x, n, "MaxPool", LU_CMP_KERNEL_H, false, r, p) &&
           (!with_bn || bn(x, n, p, nconv, n->attrs.f[LU_CMP_BN_EPS], out));
  }
  case LU_OP_batch_norm: {
    int64_t axis = ia(n, LU_BN_AXIS, 1);
    if (axis != 1)
      return refuse(x, "axis %lld: ONNX's BatchNormalization normalises axis 1 (for a 2-d input, give axis = 1)",
                    (long long)axis);
    if (ia(n, LU_BN_TRAINING, 0) && !ia(n, LU_BN_GLOBAL_STATS, 0))
      return refuse(x, "a batch norm in training mode (batch statistics): export a graph run for inference, "
                       "outside autograd.record()");
    if (!need_float(x, n, 0) || !unread(x, n, 1, "mean") || !unread(x, n, 2, "invstd")) return false;
    const char *out = out_name(x, n, 0, dt0);
    bool relu = ia(n, LU_BN_RELU, 0) != 0;
    const char *b = relu ? temp(x) : out;
    return bn(x, n, in_name(x, n, 0), 1, n->attrs.f[LU_BN_EPS], b) && (!relu || unary(x, "Relu", b, out));
  }
  case LU_OP_linear: {
    if (!need_float(x, n, 0)) return false;
    const char *out = out_name(x, n, 0, dt0);
    bool relu = ia(n, LU_LINEAR_RELU, 0) != 0;
    const char *gm = relu ? temp(x) : out;
    const char *in[3] = {in_name(x, n, 0), in_name(x, n, 1), n->nin > 2 ? in_name(x, n, 2) : NULL};
    Onnx__NodeProto *g = node(x, "Gemm", n->nin, in, gm);
    attr_i(x, g, "transB", 1);
    return g && (!relu || unary(x, "Relu", gm, out));
  }
  case LU_OP_matmul: {
    int32_t dt = same_dtype(x, n, arith_type);
    const char *in[2] = {in_name(x, n, 0), in_name(x, n, 1)};
    return dt && node(x, "MatMul", 2, in, out_name(x, n, 0, dt));
  }
  case LU_OP_max_pool2d:
  case LU_OP_avg_pool2d: {
    bool avg = n->op == LU_OP_avg_pool2d;
    if (!need_float(x, n, 0)) return false;
    const char *out = out_name(x, n, 0, dt0);
    if (ia(n, LU_POOL_GLOBAL, 0)) return unary(x, avg ? "GlobalAveragePool" : "GlobalMaxPool", in_name(x, n, 0), out);
    return pool(x, n, avg ? "AveragePool" : "MaxPool", 0, avg, in_name(x, n, 0), out);
  }
  case LU_OP_reshape: {
    int64_t shape[LU_MAXD];
    int nd = n->attrs.ni;
    if (nd > LU_MAXD) return refuse(x, "a shape of %d axes", nd);
    for (int d = 0; d < nd; d++) {
      shape[d] = n->attrs.i[d];
      if (shape[d] == 0) return refuse(x, "a shape with a 0-sized axis (ONNX's Reshape reads 0 as 'keep')");
    }
    const char *sname = uniq(x, ar_fmt(x, "_shape%d", x->tmp++));
    int64_t len = nd;
    const char *in[2] = {in_name(x, n, 0), sname};
    return add_init(x, tensor(x, sname, LUON_DTYPE_I64, 1, &len, shape, sizeof(int64_t) * (size_t)nd)) &&
           node(x, "Reshape", 2, in, out_name(x, n, 0, dt0));
  }
  case LU_OP_transpose: {
    Onnx__NodeProto *t = node(x, "Transpose", 1, (const char *[]){in_name(x, n, 0)}, out_name(x, n, 0, dt0));
    if (n->attrs.ni > 0) { /* a permutation names every axis: ni is the rank; none: reversed, ONNX's default */
      int64_t perm[LU_MAXD];
      if (n->attrs.ni > LU_MAXD) return refuse(x, "a permutation of %d axes", n->attrs.ni);
      for (int d = 0; d < n->attrs.ni; d++) perm[d] = n->attrs.i[d] < 0 ? n->attrs.i[d] + n->attrs.ni : n->attrs.i[d];
      attr_ints(x, t, "perm", n->attrs.ni, perm);
    }
    return t != NULL;
  }
  case LU_OP_concatenate: {
    const char *in[LUON_MAX_OP_INPUTS];
    for (int k = 0; k < n->nin; k++) {
      in[k] = in_name(x, n, k);
      if (in_dtype(x, n, k) != dt0 || !dt0) return refuse(x, "inputs of different or unknown dtypes");
    }
    Onnx__NodeProto *c = node(x, "Concat", n->nin, in, out_name(x, n, 0, dt0));
    attr_i(x, c, "axis", ia(n, LU_CONCAT_AXIS, 0));
    return c != NULL;
  }
  case LU_OP_add:
  case LU_OP_subtract:
  case LU_OP_multiply:
  case LU_OP_divide:
  case LU_OP_maximum:
  case LU_OP_minimum:
  case LU_OP_power: {
    static const struct { int32_t op; const char *onnx; } ops[] = {
        {LU_OP_add, "Add"}, {LU_OP_subtract, "Sub"}, {LU_OP_multiply, "Mul"}, {LU_OP_divide, "Div"},
        {LU_OP_maximum, "Max"}, {LU_OP_minimum, "Min"}, {LU_OP_power, "Pow"}};
    bool minmax = n->op == LU_OP_maximum || n->op == LU_OP_minimum;
    int32_t dt = same_dtype(x, n, minmax ? numeric_type : n->op == LU_OP_power ? is_float : arith_type);
    if (!dt) return false;
    if (n->op == LU_OP_divide && !is_float(dt))
      return refuse(x, "integer inputs: luon divides them into float32, ONNX's Div rounds (cast first: astype)");
    const char *op = NULL;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
      if (ops[k].op == n->op) op = ops[k].onnx;
    const char *in[2] = {in_name(x, n, 0), in_name(x, n, 1)};
    return node(x, op, 2, in, out_name(x, n, 0, dt)) != NULL;
  }
  case LU_OP_relu:
  case LU_OP_sigmoid:
  case LU_OP_tanh:
  case LU_OP_exp:
  case LU_OP_softrelu: {
    const char *op = n->op == LU_OP_relu ? "Relu" : n->op == LU_OP_sigmoid ? "Sigmoid" : n->op == LU_OP_tanh ? "Tanh"
                   : n->op == LU_OP_exp ? "Exp" : "Softplus";
    return need_float(x, n, 0) && unary(x, op, in_name(x, n, 0), out_name(x, n, 0, dt0));
  }
  case LU_OP_sqrt:
  case LU_OP_log:
    return need_float(x, n, 0) && unary(x, n->op == LU_OP_sqrt ? "Sqrt" : "Log", in_name(x, n, 0), out_name(x, n, 0, dt0));
  case LU_OP_negative:
  case LU_OP_abs: {
    bool neg = n->op == LU_OP_negative;
    /* Neg: the signed ones; luon's negative of an unsigned integer wraps */
    if (!same_dtype(x, n, neg ? arith_type : numeric_type)) return false;
    return unary(x, neg ? "Neg" : "Abs", in_name(x, n, 0), out_name(x, n, 0, dt0));
  }
  case LU_OP_square: {
    if (!same_dtype(x, n, arith_type)) return false;
    const char *in[2] = {in_name(x, n, 0), in_name(x, n, 0)};
    return node(x, "Mul", 2, in, out_name(x, n, 0, dt0)) != NULL;
  }
  case LU_OP_clip: { /* a bound of NaN: none (an empty input) */
    if (dt0 != LUON_DTYPE_F32 && dt0 != LUON_DTYPE_F64)
      return refuse(x, "a clip of %s (exported for float32 and float64)", dt0 ? luon_dtype_name(dt0) : "an unknown dtype");
    double lo = n->attrs.f[LU_CLIP_MIN], hi = n->attrs.f[LU_CLIP_MAX];
    const char *in[3] = {in_name(x, n, 0), isnan(lo) ? NULL : scalar(x, dt0, lo), isnan(hi) ? NULL : scalar(x, dt0, hi)};
    return x->err == LUON_OK && node(x, "Clip", 3, in, out_name(x, n, 0, dt0)) != NULL;
  }
  case LU_OP_sum:
  case LU_OP_mean:
  case LU_OP_max:
  case LU_OP_min: {
    /* sum and mean of integers promote in luon (int64, float32): floats only */
    bool avg = n->op == LU_OP_mean, add = n->op == LU_OP_sum;
    if (!same_dtype(x, n, avg || add ? is_float : arith_type)) return false;
    int nax = n->attrs.ni - LU_REDUCE_AXES;
    const int64_t *axes = n->attrs.i + LU_REDUCE_AXES;
    const char *op = add ? "ReduceSum" : avg ? "ReduceMean" : n->op == LU_OP_max ? "ReduceMax" : "ReduceMin";
    const char *in[2] = {in_name(x, n, 0), NULL};
    if (add && nax > 0 && !(in[1] = ints(x, "axes", nax, axes))) return false; /* opset 13: ReduceSum's axes an input */
    Onnx__NodeProto *r = node(x, op, add && nax > 0 ? 2 : 1, in, out_name(x, n, 0, dt0));
    attr_i(x, r, "keepdims", ia(n, LU_REDUCE_KEEPDIMS, 0));
    if (!add && nax > 0) attr_ints(x, r, "axes", nax, axes); /* none: every axis, in both */
    return r != NULL;
  }
  case LU_OP_expand_dims:
  case LU_OP_squeeze: {
    bool sq = n->op == LU_OP_squeeze;
    int nax = sq ? n->attrs.ni - LU_SQUEEZE_AXES : 1;
    const int64_t *axes = n->attrs.i + (sq ? LU_SQUEEZE_AXES : LU_EXPAND_DIMS_AXIS);
    const char *in[2] = {in_name(x, n, 0), nax > 0 ? ints(x, "axes", nax, axes) : NULL};
    if (nax > 0 && !in[1]) return false;
    return node(x, sq ? "Squeeze" : "Unsqueeze", nax > 0 ? 2 : 1, in, out_name(x, n, 0, dt0)) != NULL;
  }
  case LU_OP_take: { /* Embedding: rows of a constant by index */
    int64_t axis = ia(n, LU_TAKE_AXIS, 0), mode = ia(n, LU_TAKE_MODE, 0);
    const int64_t *shape;
    int nd = in_shape(x, n, 0, &shape);
    if (axis == -999) return refuse(x, "a take from the flattened array (give an axis)");
    if (nd < 0) return refuse(x, "a take from an array whose shape is not known here (not an input or constant)");
    if (axis < -nd || axis >= nd) return refuse(x, "axis %lld of a %d-d array", (long long)axis, nd);
    int64_t len = shape[axis < 0 ? axis + nd : axis];
    int32_t it = in_dtype(x, n, 1);
    if (!onnx_type(it) || it == LUON_DTYPE_BOOL) return refuse(x, "indices of dtype %s", it ? luon_dtype_name(it) : "unknown");
    const char *idx = in_name(x, n, 1);
    int64_t lo = 0, hi = len - 1;
    if (mode == 0 && is_float(it) && (it == LUON_DTYPE_F32 || it == LUON_DTYPE_F64)) {
      /* clipped as floats first: luon's conversion saturates where ONNX's Cast of 1e30 is undefined */
      idx = STEP("Clip", idx, scalar(x, it, 0), scalar(x, it, (double)hi));
    } else if (is_float(it) && mode != 2) {
      return refuse(x, "%s indices in mode %s", luon_dtype_name(it), mode == 1 ? "wrap" : "clip");
    }
    if (idx && it != LUON_DTYPE_I64) { /* luon reads any index dtype as int64 (floats toward zero, as ONNX's Cast) */
      Onnx__NodeProto *c = node(x, "Cast", 1, (const char *[]){idx}, temp(x));
      attr_i(x, c, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
      idx = c ? c->output[0] : NULL;
    }
    /* mode clip (0): into [0, len); wrap (1): modulo len; raise (2): ONNX's Gather fails on what luon refuses */
    if (idx && mode == 0) idx = STEP("Clip", idx, ints(x, "lo", -1, &lo), ints(x, "hi", -1, &hi));
    if (idx && mode == 1) idx = STEP("Mod", idx, ints(x, "len", -1, &len));
    Onnx__NodeProto *g = idx ? node(x, "Gather", 2, (const char *[]){in_name(x, n, 0), idx}, out_name(x, n, 0, dt0)) : NULL;
    attr_i(x, g, "axis", axis);
    return g != NULL;
  }
  case LU_OP_gelu: { /* the erf form: 0.5 x (1 + erf(x / sqrt(2))) */
    if (dt0 != LUON_DTYPE_F32 && dt0 != LUON_DTYPE_F64) return need_float(x, n, 0) && refuse(x, "a gelu of %s", luon_dtype_name(dt0));
    const char *v = in_name(x, n, 0);
    const char *e = STEP("Erf", STEP("Div", v, scalar(x, dt0, 1.4142135623730951)));
    const char *h = STEP("Mul", STEP("Add", e, scalar(x, dt0, 1)), scalar(x, dt0, 0.5));
    return h && node(x, "Mul", 2, (const char *[]){v, h}, out_name(x, n, 0, dt0)) != NULL;
  }
  case LU_OP_selu: {
    if (!need_float(x, n, 0)) return false;
    Onnx__NodeProto *a = node(x, "Selu", 1, (const char *[]){in_name(x, n, 0)}, out_name(x, n, 0, dt0));
    attr_f(x, a, "alpha", 1.6732632423543772848170429916717);
    attr_f(x, a, "gamma", 1.0507009873554804934193349852946);
    return a != NULL;
  }
  case LU_OP_layer_norm: { /* (x - mean) / sqrt(var + eps) * gamma + beta over the last axis */
    int64_t axis = ia(n, LU_LN_AXIS, -1);
    const int64_t *shape;
    int nd = in_shape(x, n, 0, &shape);
    if (axis != -1 && !(nd > 0 && axis == nd - 1))
      return refuse(x, "axis %lld: exported over the last axis only (axis = -1)", (long long)axis);
    if (dt0 != LUON_DTYPE_F32 && dt0 != LUON_DTYPE_F64) return need_float(x, n, 0) && refuse(x, "a layer norm of %s", luon_dtype_name(dt0));
    if (!unread(x, n, 1, "mean") || !unread(x, n, 2, "invstd")) return false;
    int64_t last = -1;
    Onnx__NodeProto *m1 = node(x, "ReduceMean", 1, (const char *[]){in_name(x, n, 0)}, temp(x));
    attr_ints(x, m1, "axes", 1, &last);
    const char *d = m1 ? STEP("Sub", in_name(x, n, 0), m1->output[0]) : NULL;
    Onnx__NodeProto *m2 = d ? node(x, "ReduceMean", 1, (const char *[]){STEP("Mul", d, d)}, temp(x)) : NULL;
    attr_ints(x, m2, "axes", 1, &last);
    const char *sd = m2 ? STEP("Sqrt", STEP("Add", m2->output[0], scalar(x, dt0, n->attrs.f[LU_LN_EPS]))) : NULL;
    const char *y = sd ? STEP("Mul", STEP("Div", d, sd), in_name(x, n, 1)) : NULL;
    return y && node(x, "Add", 2, (const char *[]){y, in_name(x, n, 2)}, out_name(x, n, 0, dt0)) != NULL;
  }
  case LU_OP_leaky_relu:
  case LU_OP_elu: {
    if (!need_float(x, n, 0)) return false;
    Onnx__NodeProto *a = node(x, n->op == LU_OP_elu ? "Elu" : "LeakyRelu", 1, (const char *[]){in_name(x, n, 0)},
                              out_name(x, n, 0, dt0));
    attr_f(x, a, "alpha", n->attrs.f[LU_LEAKY_SLOPE]);
    return a != NULL;
  }
  case LU_OP_softmax:
  case LU_OP_log_softmax: {
    if (!need_float(x, n, 0)) return false;
    Onnx__NodeProto *s = node(x, n->op == LU_OP_softmax ? "Softmax" : "LogSoftmax", 1,
                              (const char *[]){in_name(x, n, 0)}, out_name(x, n, 0, dt0));
    attr_i(x, s, "axis", ia(n, LU_SOFTMAX_AXIS, -1));
    return s != NULL;
  }
  case LU_OP_copy: {
    int32_t to = n->attrs.dtype ? n->attrs.dtype : dt0;
    if (!onnx_type(to)) return refuse(x, "a copy to %s", luon_dtype_name(to));
    if (to == dt0) return unary(x, "Identity", in_name(x, n, 0), out_name(x, n, 0, to));
    Onnx__NodeProto *c = node(x, "Cast", 1, (const char *[]){in_name(x, n, 0)}, out_name(x, n, 0, to));
    attr_i(x, c, "to", onnx_type(to));
    return c != NULL;
  }
  case LU_OP_full: {
    int nd = n->attrs.ni - LU_FULL_SHAPE;
    int32_t dt = n->attrs.dtype ? n->attrs.dtype : LUON_DTYPE_F32;
    if (nd < 0 || nd > LU_MAXD || !onnx_type(dt)) return refuse(x, "a constant of dtype %s", luon_dtype_name(dt));
    int64_t count = 1;
    for (int d = 0; d < nd; d++) count *= n->attrs.i[LU_FULL_SHAPE + d];
    if (count > (1 << 20)) return refuse(x, "a constant of %lld elements made in the graph", (long long)count);
    luon_attrs a = n->attrs; /* made on the CPU, read back as the initializer */
    a.dev_type = LUON_CPU, a.dev_id = 0;
    luon_tensor *t = NULL;
    luon_status s = lu_run(LU_OP_full, &a, &t, 0);
    size_t bytes = (size_t)count * (size_t)luon_dtype_size(dt);
    void *buf = s == LUON_OK ? malloc(bytes ? bytes : 1) : NULL;
    if (buf) s = luon_tensor_to_host(t, buf, dt, bytes);
    const char *out = out_name(x, n, 0, dt);
    bool ok = buf && s == LUON_OK && add_init(x, tensor(x, out, dt, nd, n->attrs.i + LU_FULL_SHAPE, buf, bytes));
    free(buf);
    luon_tensor_release(t);
    if (!ok && x->err == LUON_OK) x->err = s != LUON_OK ? s : lu_error(LUON_ENOMEM, "onnx export: out of host memory");
    return ok;
  }
  default:
    return refuse(x, "no ONNX mapping in luon (it maps conv2d, conv2d_bn, conv2d_maxpool, batch_norm in predict "
                     "mode, linear, matmul, max/avg_pool2d, reshape, transpose, concatenate, add, subtract, "
                     "multiply, divide, maximum, minimum, power, negative, abs, square, sqrt, log, clip, relu, "
                     "sigmoid, tanh, exp, softrelu, leaky_relu, elu, selu, gelu, softmax, log_softmax, "
                     "layer_norm, take (Embedding), sum, mean, max, min, expand_dims, squeeze, copy/astype, "
                     "full)");
  }
}

/* ---- the model ------------------------------------------------------------------ */

static Onnx__ValueInfoProto *value_info(ox *x, const char *name, const sig *w) {
  Onnx__ValueInfoProto *v = ar_alloc(x, sizeof *v);
  Onnx__TypeProto *tp = ar_alloc(x, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = ar_alloc(x, sizeof *tt);
  Onnx__TensorShapeProto *sh = ar_alloc(x, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dims = ar_alloc(x, sizeof *dims * (size_t)(w->ndim + 1));
  if (!v || !tp || !tt || !sh || !dims) return NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int d = 0; d < w->ndim; d++) {
    if (!(dims[d] = ar_alloc(x, sizeof **dims))) return NULL;
    onnx__tensor_shape_proto__dimension__init(dims[d]);
    dims[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    dims[d]->dim_value = w->shape[d];
  }
  sh->n_dim = (size_t)w->ndim, sh->dim = dims;
  tt->has_elem_type = true, tt->elem_type = onnx_type(w->dtype);
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  v->name = (char *)name, v->type = tp;
  return v;
}

/* slot names and dtypes of the inputs and constants; the constants as
 * initializers. The parameters keep their names (two with one name are
 * refused); an input or a value made here takes the next free name. */
static const char *const_name(ox *x, int32_t k) {
  const luon_graph *g = x->g;
  return x->const_names && x->const_names[k] ? x->const_names[k]
       : g->const_names && k < g->nconst_names ? g->const_names[k] : NULL;
}

static bool name_slots(ox *x, const char *const *input_names) {
  const luon_graph *g = x->g;
  for (int pass = 0; pass < 2; pass++) /* the named constants, then the others */
    for (int32_t s = 0, k = 0; s < g->nslots && x->err == LUON_OK; s++) {
      if (g->kind[s] != SLOT_CONST) continue;
      const char *nm = const_name(x, k++);
      if (pass == 0 && nm && name_taken(x, nm)) {
        x->err = lu_error(LUON_EINVAL, "onnx export: two constants are named '%.200s'", nm);
        return false;
      }
      if (pass == 0 && nm) x->name[s] = uniq(x, ar_fmt(x, "%s", nm));
      if (pass == 1 && !nm) x->name[s] = uniq(x, ar_fmt(x, "_const%d", (int)k - 1));
    }
  for (int32_t s = 0, k = 0; s < g->nslots && x->err == LUON_OK; s++) {
    if (g->kind[s] != SLOT_CONST) continue;
    const luon_tensor *t = g->consts[s];
    k++;
    x->dtype[s] = t->dtype;
    if (!onnx_type(t->dtype)) {
      x->err = lu_error(LUON_EUNSUPPORTED, "onnx export: constant %d is %s, which ONNX has no type for", (int)k,
                        luon_dtype_name(t->dtype));
      return false;
    }
    size_t bytes = (size_t)t->size * (size_t)luon_dtype_size(t->dtype);
    void *buf = malloc(bytes ? bytes : 1);
    luon_status st = buf ? luon_tensor_to_host((luon_tensor *)t, buf, t->dtype, bytes)
                         : lu_error(LUON_ENOMEM, "onnx export: out of host memory for %zu bytes", bytes);
    if (st == LUON_OK && !add_init(x, tensor(x, x->name[s], t->dtype, t->ndim, t->shape, buf, bytes)) &&
        x->err == LUON_OK)
      st = lu_error(LUON_ENOMEM, "onnx export: out of host memory");
    free(buf);
    if (st != LUON_OK) {
      if (x->err == LUON_OK) x->err = st;
      return false;
    }
  }
  for (int32_t s = 0; s < g->nin && x->err == LUON_OK; s++) {
    const char *nm = input_names && input_names[s] ? input_names[s] : g->in_names ? g->in_names[s] : NULL;
    x->name[s] = uniq(x, nm ? ar_fmt(x, "%s", nm) : g->nin == 1 ? ar_fmt(x, "data") : ar_fmt(x, "data%d", (int)s));
    x->dtype[s] = g->in_sig[s].dtype;
  }
  for (int32_t s = g->nin; s < g->nslots && x->err == LUON_OK; s++)
    if (g->kind[s] != SLOT_CONST) x->name[s] = uniq(x, ar_fmt(x, "_v%d", (int)s));
  return x->err == LUON_OK;
}

static luon_status write_model(ox *x, const char *path) {
  const luon_graph *g = x->g;
  Onnx__GraphProto *gp = ar_alloc(x, sizeof *gp);
  Onnx__ModelProto *m = ar_alloc(x, sizeof *m);
  Onnx__OperatorSetIdProto *op = ar_alloc(x, sizeof *op), **ops = ar_alloc(x, sizeof *ops);
  Onnx__ValueInfoProto **ins = ar_alloc(x, sizeof *ins * (size_t)(g->nin + 1));
  Onnx__ValueInfoProto **outs = ar_alloc(x, sizeof *outs * (size_t)(g->nout + 1));
  if (!gp || !m || !op || !ops || !ins || !outs) return x->err;
  onnx__graph_proto__init(gp);
  onnx__model_proto__init(m);
  onnx__operator_set_id_proto__init(op);
  for (int32_t i = 0; i < g->nin; i++)
    if (!(ins[i] = value_info(x, x->name[i], &g->in_sig[i]))) return x->err;
  /* each output its own named value: an Identity where the slot is an
   * input, a constant, or a value output twice */
  for (int32_t k = 0; k < g->nout; k++) {
    const char *name = uniq(x, ar_fmt(x, g->nout == 1 ? "output" : "output%d", (int)k));
    if (!unary(x, "Identity", x->name[g->outputs[k]], name) || !(outs[k] = value_info(x, name, &g->out_sig[k])))
      return x->err;
  }
  gp->name = "luon";
  gp->n_node = x->nnodes, gp->node = x->nodes;
  gp->n_initializer = x->ninits, gp->initializer = x->inits;
  gp->n_input = (size_t)g->nin, gp->input = ins;
  gp->n_output = (size_t)g->nout, gp->output = outs;
  op->domain = "";
  op->has_version = true, op->version = OPSET;
  ops[0] = op;
  m->has_ir_version = true, m->ir_version = IR_VERSION;
  m->n_opset_import = 1, m->opset_import = ops;
  m->producer_name = "luon";
    m->graph = gp;
  size_t bytes = onnx__model_proto__get_packed_size(m);
  uint8_t *buf = malloc(bytes ? bytes : 1);
  if (!buf) return lu_error(LUON_ENOMEM, "onnx export: out of host memory for %zu bytes", bytes);
  onnx__model_proto__pack(m, buf);
  luon_status s = lu_wfile_put("onnx export", path, buf, bytes);
  free(buf);
  return s;
}

luon_status luon_graph_save_onnx(const luon_graph *g, const char *path, const char *const *input_names,
                                 const char *const *const_names) {
  if (!g) return lu_error(LUON_EINVAL, "onnx export: graph is NULL");
  if (!path || !path[0]) return lu_error(LUON_EINVAL, "onnx export: a file must be named");
  if (g->busy) return lu_error(LUON_EINVAL, "onnx export: the graph is running");
  ox x;
  memset(&x, 0, sizeof x);
  x.g = g, x.const_names = const_names, x.err = LUON_OK;
  x.name = ar_alloc(&x, sizeof(char *) * (size_t)(g->nslots + 1));
  x.dtype = ar_alloc(&x, sizeof(int32_t) * (size_t)(g->nslots + 1));
  if (x.err == LUON_OK && name_slots(&x, input_names))
    for (x.at = 0; x.at < g->nnodes && x.err == LUON_OK; x.at++)
      if (!translate(&x, &g->nodes[x.at]) && x.err == LUON_OK)
        x.err = lu_error(LUON_ENOMEM, "onnx export: out of host memory");
  luon_status s = x.err == LUON_OK ? write_model(&x, path) : x.err;
  if (s == LUON_OK && x.err != LUON_OK) s = x.err;
  ar_free(&x.ar);
  return s;
}

#else /* built without protobuf-c or onnx.proto */
luon_status luon_graph_save_onnx(const luon_graph *g, const char *path, const char *const *input_names,
                                 const char *const *const_names) {
  (void)g, (void)path, (void)input_names, (void)const_names;
  return lu_error(LUON_EUNSUPPORTED, "onnx export: this luon was built without it (install Debian's "
                  "libprotobuf-c-dev, protobuf-c-compiler and libonnx-dev, then rebuild)");
}
#endif
