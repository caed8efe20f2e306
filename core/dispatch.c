/* dispatch.c: the op registry table and the one dispatcher every op goes
 * through: argument and device checks, shape inference, output allocation,
 * the backend's kernel. Kernels never allocate and never validate. */
#include "internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const lu_op_desc lu_ops[LU_OP_COUNT] = {
#define LUON_OP(name, nin, nout, kind, grad, backends, flags)                                       \
  {#name, nin, nout, LU_##kind, LU_BACKENDS_##backends, flags, lu_shape_##name, lu_cpu_##name,       \
   LU_GRAD_FN_##grad(name)},
#include "luon_ops.def"
#undef LUON_OP
};

/* float16 and bfloat16 are stored in 16 bits and computed in float32. The
 * LU_HALF ops take them; the others refuse them, except copy (astype), views
 * and creation, which move or fill bytes. For LU_HALF ops the shape function
 * sees each 16-bit input as the compute dtype (the inputs' promotion, float32
 * when that is 16-bit), so their checks and rules are float32's; an output
 * in the compute dtype is stored in the 16-bit type when the promotion is
 * one and attrs.dtype asks for nothing else. The CPU kernels then run on
 * float32 copies (run_cpu_half); the CUDA kernels of these ops read and
 * write the 16-bit types themselves, accumulating in float32. */
static inline bool takes_half(int32_t op) { return lu_ops[op].flags & LU_HALF; }

luon_status lu_run(int32_t op, const luon_attrs *attrs, luon_tensor **out, int nin, ...) {
  luon_tensor *in[LUON_MAX_OP_INPUTS];
  va_list ap;
  va_start(ap, nin);
  for (int i = 0; i < nin && i < LUON_MAX_OP_INPUTS; i++) in[i] = va_arg(ap, luon_tensor *);
  va_end(ap);
  int32_t nout = 1;
  *out = NULL;
  return luon_op_call(op, nin, in, attrs, &nout, out);
}

/* read once (a getenv per call was 4% of a small network's replay);
 * lu_set_ref_kernels switches it (the C tests compare both paths) */
static int ref_kernels = -1;
bool lu_ref_kernels(void) {
  int r = __atomic_load_n(&ref_kernels, __ATOMIC_RELAXED);
  if (r < 0) {
    const char *e = getenv("LUON_REF_KERNELS");
    r = e && e[0] == '1';
    __atomic_store_n(&ref_kernels, r, __ATOMIC_RELAXED);
  }
  return r;
}
void lu_set_ref_kernels(int on) { __atomic_store_n(&ref_kernels, on != 0, __ATOMIC_RELAXED); }

int32_t luon_op_count(void) { return LU_OP_COUNT; }

int32_t luon_op_find(const char *name) {
  if (!name) {
    lu_error(LUON_EINVAL, "op_find: name is NULL");
    return -1;
  }
  for (int i = 0; i < LU_OP_COUNT; i++)
    if (strcmp(lu_ops[i].name, name) == 0) return i;
  lu_error(LUON_EINVAL, "no op named '%s'", name);
  return -1;
}

const char *luon_op_name(int32_t op) { return op >= 0 && op < LU_OP_COUNT ? lu_ops[op].name : NULL; }
int32_t luon_op_num_inputs(int32_t op) { return op >= 0 && op < LU_OP_COUNT ? lu_ops[op].nin : 0; }
int32_t luon_op_num_outputs(int32_t op) { return op >= 0 && op < LU_OP_COUNT ? lu_ops[op].nout : 0; }
int32_t luon_op_has_grad(int32_t op) { return op >= 0 && op < LU_OP_COUNT && lu_ops[op].grad; }

luon_status luon_op_info_get(int32_t op, luon_op_info *out) {
  if (op < 0 || op >= LU_OP_COUNT) return lu_error(LUON_EINVAL, "op_info: op id %d does not exist", op);
  if (!out) return lu_error(LUON_EINVAL, "op_info: out is NULL (op %s)", lu_ops[op].name);
  const lu_op_desc *d = &lu_ops[op];
  int32_t f = d->flags;
  *out = (luon_op_info){d->name, d->nin, d->nout, d->kind, d->grad != NULL, d->backends,
                        !!(f & LU_HALF), !!(f & LU_FUSED), !!(f & LU_RANDOM), !!(f & LU_NP_MAP),
                        !!(f & LU_NP_REDUCE), !!(f & LU_METHOD)};
  return LUON_OK;
}

/* Every LUON_SLOTS line's slots, in the registry's order. */
static const struct { const char *name; int32_t is_float, index; } slots[] = {
#define I(n) {#n, 0, LU_##n},
#define F(n) {#n, 1, LU_##n},
#define LUON_SLOTS(op, base, ints, floats) ints floats
#include "luon_ops.def"
#undef LUON_SLOTS
#undef I
#undef F
};

const char *luon_attr_slot(int32_t k, int32_t *is_float, int32_t *index) {
  if (k < 0 || k >= (int32_t)(sizeof slots / sizeof slots[0])) return NULL;
  if (is_float) *is_float = slots[k].is_float;
  if (index) *index = slots[k].index;
  return slots[k].name;
}

static bool shares_storage(const luon_tensor *a, int nin, luon_tensor *const *in) {
  for (int i = 0; i < nin; i++)
    if (in[i]->storage == a->storage) return true;
  return false;
}

static luon_status run_kernel(const lu_op_desc *d, lu_call *c) {
  if (c->dev.type == LUON_CPU) return lu_run_cpu(c);
  lu_kernel_fn k = lu_cuda.kernels[c->op];
  if (!k)
    return lu_error(LUON_EUNSUPPORTED, "%s: no CUDA kernel for this op%s (arrays on %s); "
                    "copy the inputs to the CPU with copyto(npx.cpu())", d->name,
                    d->flags & LU_FUSED ? " (a CPU fusion: its parts run on GPUs)" : " yet",
                    lu_device_str(c->dev));
  return lu_cuda_check(k(c));
}

/* An LU_HALF op on the CPU: its kernel gets the 16-bit inputs as copies in
 * the compute dtype ct and writes float32 in place of 16-bit outputs, which
 * are then converted into them. */
static luon_status run_cpu_half(const lu_op_desc *d, lu_call *c, int32_t ct) {
  luon_tensor *in[LUON_MAX_OP_INPUTS] = {NULL};
  lu_call k = *c;
  k.in = in;
  luon_status s = LUON_OK;
  for (int i = 0; i < c->nin && s == LUON_OK; i++) {
    const luon_tensor *t = c->in[i];
    if (!lu_dtype_is_storage_only(t->dtype)) {
      in[i] = luon_tensor_retain(c->in[i]);
      continue;
    }
    s = lu_tensor_new(ct, t->ndim, t->shape, c->dev, &in[i]);
    if (s == LUON_OK) s = luon_tensor_copy(in[i], t);
  }
  for (int j = 0; j < c->nout; j++) {
    k.out[j] = NULL;
    if (s != LUON_OK || !lu_dtype_is_storage_only(c->out[j]->dtype)) continue;
    k.out_dtype[j] = LUON_DTYPE_F32;
    s = lu_tensor_new(LUON_DTYPE_F32, c->out[j]->ndim, c->out[j]->shape, c->dev, &k.out[j]);
  }
  for (int j = 0; j < c->nout; j++)
    if (!k.out[j]) k.out[j] = c->out[j];
  if (s == LUON_OK) s = d->cpu(&k);
  c->scratch = k.scratch;
  for (int j = 0; j < c->nout; j++) {
    if (k.out[j] == c->out[j]) continue;
    if (s == LUON_OK) s = luon_tensor_copy(c->out[j], k.out[j]);
    luon_tensor_release(k.out[j]);
  }
  for (int i = 0; i < c->nin; i++) luon_tensor_release(in[i]);
  return s;
}

/* c's CPU kernel: directly, or for an LU_HALF op with 16-bit data through
 * run_cpu_half in the compute dtype (the inputs' promotion, float32 when
 * that is 16-bit; float32 too when only attrs.dtype asks for a 16-bit
 * result). The one way CPU kernels run: luon_op_call's, and the stand-in
 * backend's, whose "device" memory is host memory (tests/c/fake_cuda.c). */
luon_status lu_run_cpu(lu_call *c) {
  const lu_op_desc *d = &lu_ops[c->op];
  int32_t ct = 0;
  if (takes_half(c->op)) {
    bool half = false;
    int32_t p = c->nin > 0 ? c->in[0]->dtype : LUON_DTYPE_F32;
    for (int i = 0; i < c->nin; i++) {
      half |= lu_dtype_is_storage_only(c->in[i]->dtype);
      if (i > 0) p = lu_dtype_promote(p, c->in[i]->dtype);
    }
    if (half) ct = lu_dtype_is_storage_only(p) ? LUON_DTYPE_F32 : p;
    for (int k = 0; k < c->nout && !ct; k++)
      if (lu_dtype_is_storage_only(c->out[k]->dtype)) ct = LUON_DTYPE_F32;
  }
  return ct ? run_cpu_half(d, c, ct) : d->cpu(c);
}

/* ---- luon_op_call, in its phases ---------------------------------------- */

/* 1. The arguments: counts and NULLs, the attributes, 16-bit inputs (*half:
 * one goes to an LU_HALF op; other ops refuse them), one device for all
 * inputs (c->dev), the result dtype, and that the op has its functions. */
static luon_status check_args(const lu_op_desc *d, lu_call *c, const int32_t *nout_p, luon_tensor **out,
                              bool *half) {
  int32_t nin = c->nin;
  luon_tensor *const *in = c->in;
  if ((d->nin >= 0 && nin != d->nin) || nin < 0 || nin > LUON_MAX_OP_INPUTS || (d->nin < 0 && nin < 1))
    return lu_error(LUON_EINVAL, "%s: takes %s%d input%s, got %d", d->name, d->nin < 0 ? "1 to " : "",
                    d->nin < 0 ? LUON_MAX_OP_INPUTS : d->nin, d->nin == 1 ? "" : "s", nin);
  if (nin > 0 && !in) return lu_error(LUON_EINVAL, "op_call: in is NULL but nin is %d (op %s)", nin, d->name);
  if (!nout_p) return lu_error(LUON_EINVAL, "op_call: nout is NULL (op %s)", d->name);
  if (!out) return lu_error(LUON_EINVAL, "op_call: out is NULL (op %s)", d->name);
  if (c->attrs->ni < 0 || c->attrs->ni > LUON_MAX_ATTR_INTS)
    return lu_error(LUON_EINVAL, "%s: %d integer attributes (at most %d)", d->name, c->attrs->ni,
                    LUON_MAX_ATTR_INTS);
  for (int i = 0; i < nin; i++) {
    if (!in[i]) return lu_error(LUON_EINVAL, "%s: input %d is NULL", d->name, i + 1);
    if (!lu_dtype_is_storage_only(in[i]->dtype) || c->op == LU_OP_copy || d->kind == LU_VIEW) continue;
    if (!takes_half(c->op))
      return lu_error(LUON_EDTYPE, "%s: does not take %s (input %d); convert with astype('float32') "
                      "first", d->name, luon_dtype_name(in[i]->dtype), i + 1);
    *half = true;
  }
  if (nin > 0) {
    c->dev = in[0]->dev;
    for (int i = 1; i < nin; i++)
      if (!lu_device_eq(in[i]->dev, c->dev))
        return lu_error(LUON_EDEVICE,
                        "%s: input 1 is on %s but input %d is on %s; ops run where their inputs "
                        "live, so copy one with copyto() or as_in_context() first",
                        d->name, lu_device_str(c->dev), i + 1, lu_device_str(in[i]->dev));
  } else {
    c->dev = (lu_device){c->attrs->dev_type ? c->attrs->dev_type : LUON_CPU, c->attrs->dev_id};
    LU_TRY(lu_device_check(c->dev));
  }
  if (c->attrs->dtype && !lu_dtype_valid(c->attrs->dtype))
    return lu_error(LUON_EDTYPE, "%s: unknown dtype %d", d->name, c->attrs->dtype);
  if (!d->shape || !d->cpu)
    return lu_error(LUON_EINTERNAL, "%s: this build has no kernel for the op", d->name);
  return LUON_OK;
}

/* 2. The outputs' shapes and dtypes from lu_shape_<op>. With 16-bit inputs
 * (half) it sees them in the compute dtype (lu_run_cpu's), and a result in
 * that dtype is stored in the 16-bit one; at most cap outputs. */
static luon_status infer_shapes(const lu_op_desc *d, lu_call *c, bool half, int cap) {
  if (half) {
    luon_tensor *const *in = c->in;
    int32_t nin = c->nin;
    int32_t p = in[0]->dtype;
    for (int i = 1; i < nin; i++) p = lu_dtype_promote(p, in[i]->dtype);
    int32_t half_dt = lu_dtype_is_storage_only(p) ? p : 0;   /* the 16-bit result dtype */
    int32_t half_ct = half_dt ? LUON_DTYPE_F32 : p;          /* the compute dtype */
    luon_tensor seen[LUON_MAX_OP_INPUTS];
    luon_tensor *seen_p[LUON_MAX_OP_INPUTS];
    for (int i = 0; i < nin; i++) {
      seen[i] = *in[i]; /* a copy of the header only, for the shape function */
      if (lu_dtype_is_storage_only(seen[i].dtype)) seen[i].dtype = half_ct;
      seen_p[i] = &seen[i];
    }
    c->in = seen_p;
    luon_status s = d->shape(c);
    c->in = in;
    LU_TRY(s);
    for (int k = 0; k < c->nout && k < LUON_MAX_OP_INPUTS && half_dt && !c->attrs->dtype; k++)
      if (c->out_dtype[k] == half_ct) c->out_dtype[k] = half_dt;
  } else {
    LU_TRY(d->shape(c));
  }
  if (c->nout < 0 || c->nout > cap || c->nout > LUON_MAX_OP_INPUTS)
    return lu_error(LUON_EINVAL, "%s: makes %d outputs but room was given for %d", d->name, c->nout, cap);
  return LUON_OK;
}

/* 3a. Kind NEW's outputs: out[k] itself when it can take the result (shape
 * and device must match; same dtype, contiguous, not sharing an input's
 * storage: wrote_into[k]), else a new tensor. */
static luon_status new_outputs(const lu_op_desc *d, lu_call *c, luon_tensor **out, bool *wrote_into) {
  for (int k = 0; k < c->nout; k++) c->out[k] = NULL;
  for (int k = 0; k < c->nout; k++) {
    luon_tensor *o = out[k];
    if (o) {
      if (o->ndim != c->out_ndim[k] ||
          memcmp(o->shape, c->out_shape[k], sizeof(int64_t) * (size_t)o->ndim) != 0)
        return lu_error(LUON_ESHAPE, "%s: the result has shape %s but out= has shape %s", d->name,
                        lu_shape_str(c->out_ndim[k], c->out_shape[k]), lu_shape_str(o->ndim, o->shape));
      if (!lu_device_eq(o->dev, c->dev))
        return lu_error(LUON_EDEVICE, "%s: the result is on %s but out= is on %s", d->name,
                        lu_device_str(c->dev), lu_device_str(o->dev));
      if (o->dtype == c->out_dtype[k] && lu_is_contiguous(o) && !shares_storage(o, c->nin, c->in)) {
        c->out[k] = luon_tensor_retain(o);
        wrote_into[k] = true;
        continue;
      }
    }
    luon_status s = lu_tensor_new(c->out_dtype[k], c->out_ndim[k], c->out_shape[k], c->dev, &c->out[k]);
    if (s == LUON_ESHAPE) { /* name the op, not the allocation */
      char why[512];
      const char *m = luon_last_error();
      if (strncmp(m, "empty: ", 7) == 0) m += 7;
      strncpy(why, m, sizeof why - 1);
      why[sizeof why - 1] = 0;
      s = lu_error(s, "%s: its result: %s", d->name, why);
    }
    LU_TRY(s);
  }
  return LUON_OK;
}

/* 3. The outputs and the kernel, by kind: NEW (outputs made here), INPLACE
 * (the outputs are the inputs; out[k] may only name input k), VIEW (the CPU
 * function makes views, on any device). */
static luon_status run_op(const lu_op_desc *d, lu_call *c, luon_tensor **out, bool *wrote_into) {
  luon_status s = LUON_OK;
  if (d->kind == LU_NEW) {
    s = new_outputs(d, c, out, wrote_into);
    unsigned mark = lu_stop_mark();
    if (s == LUON_OK) s = run_kernel(d, c);
    /* a long kernel that saw the flag stopped early: its output is not whole */
    if (s == LUON_OK && lu_stopped_since(mark)) s = lu_error(LUON_EINTERRUPTED, "%s: interrupted", d->name);
  } else if (d->kind == LU_INPLACE) {
    for (int k = 0; k < c->nout; k++) c->out[k] = NULL;
    for (int k = 0; k < c->nout; k++) {
      if (out[k] && out[k] != c->in[k])
        return lu_error(LUON_EINVAL, "%s: updates its inputs in place; out= must be input %d", d->name, k + 1);
      c->out[k] = luon_tensor_retain(c->in[k]);
      wrote_into[k] = true;
    }
    s = run_kernel(d, c);
  } else {
    for (int k = 0; k < c->nout; k++) c->out[k] = NULL;
    return d->cpu(c); /* views are device independent */
  }
  /* written (in part, on an error): the outputs; every input of an update in
   * place (the optimizers' states); batch_norm's running statistics */
  for (int k = 0; k < c->nout; k++) lu_touch(c->out[k]);
  for (int k = 0; d->kind == LU_INPLACE && k < c->nin; k++) lu_touch(c->in[k]);
  if (c->op == LU_OP_batch_norm && c->nin == 5) lu_touch(c->in[3]), lu_touch(c->in[4]);
  return s;
}

/* 4. Results that had to go through a temporary land in out= now; the call
 * goes on the tape while recording; the outputs are handed out (or
 * released on an error). */
static luon_status finish(const lu_op_desc *d, lu_call *c, luon_tensor **out, const bool *wrote_into,
                          luon_status s, int32_t *nout_p) {
  for (int k = 0; k < c->nout && s == LUON_OK; k++) {
    if (out[k] && !wrote_into[k]) {
      s = luon_tensor_copy(out[k], c->out[k]);
      luon_tensor_release(c->out[k]);
      c->out[k] = luon_tensor_retain(out[k]);
    }
  }
  if (s == LUON_OK && lu_recording && d->kind != LU_INPLACE) s = lu_autograd_record(c, c->out);
  if (s != LUON_OK) {
    for (int k = 0; k < c->nout; k++) luon_tensor_release(c->out[k]);
    return s;
  }
  for (int k = 0; k < c->nout; k++) out[k] = c->out[k];
  *nout_p = c->nout;
  return LUON_OK;
}

static luon_status op_call(int32_t op, int32_t nin, luon_tensor *const *in, const luon_attrs *attrs,
                           int32_t *nout_p, luon_tensor **out) {
  if (op < 0 || op >= LU_OP_COUNT) return lu_error(LUON_EINVAL, "op id %d does not exist", op);
  static const luon_attrs no_attrs;
  const lu_op_desc *d = &lu_ops[op];
  lu_call c;
  c.op = op;
  c.nin = nin;
  c.in = in;
  c.attrs = attrs ? attrs : &no_attrs;
  c.nout = d->nout;
  c.scratch = NULL;
  bool half = false; /* a 16-bit input to an LU_HALF op */
  LU_TRY(check_args(d, &c, nout_p, out, &half));
  if (lu_interrupted()) return lu_error(LUON_EINTERRUPTED, "%s: interrupted", d->name);
  LU_TRY(infer_shapes(d, &c, half, *nout_p));
  bool wrote_into[LUON_MAX_OP_INPUTS] = {false};
  luon_status s = run_op(d, &c, out, wrote_into);
  free(c.scratch);
  return finish(d, &c, out, wrote_into, s, nout_p);
}

/* The public entry: op_call, counted in lu_op_depth; while this thread
 * captures a graph (hybridize), a call from outside any op is a node. */
luon_status luon_op_call(int32_t op, int32_t nin, luon_tensor *const *in, const luon_attrs *attrs,
                         int32_t *nout_p, luon_tensor **out) {
  bool capture = lu_capture_top();
  if (capture && op >= 0 && op < LU_OP_COUNT) LU_TRY(lu_graph_check_call(op, nout_p ? *nout_p : 0, out));
  int64_t t0 = lu_op_depth == 0 ? lu_profile_start() : 0;
  lu_op_depth++;
  luon_status s = op_call(op, nin, in, attrs, nout_p, out);
  lu_op_depth--;
  if (t0) lu_profile_stop(op, s == LUON_OK && *nout_p > 0 ? out[0] : nin > 0 ? in[0] : NULL, t0);
  if (s == LUON_OK && capture) {
    s = lu_graph_record(op, nin, in, attrs, *nout_p, out);
    if (s != LUON_OK)
      for (int k = 0; k < *nout_p; k++) {
        luon_tensor_release(out[k]);
        out[k] = NULL;
      }
  }
  return s;
}
