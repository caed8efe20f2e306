/* graph_file.c: graphs as files, and the C host's way to run them.
 *
 * luon_graph_save writes a captured graph as two files: the graph, a JSON
 * file a person can read (inputs, outputs and constants with their names,
 * dtypes and shapes; each node's op by its registry name, the slots it
 * reads and makes, its attributes), and its constants (the parameters) as
 * safetensors. luon_graph_load reads them back onto any device, checking
 * everything a hostile file could get wrong before a node runs (every slot
 * made once and read only after it is made, op names, input and output
 * counts, attribute sizes, the constants' dtypes and shapes); the ops check
 * their attributes as for any caller. luon_model_* wraps a loaded graph for
 * a C host with no Lua: host buffers in, host buffers out.
 *
 * The format ("luon-graph", version 1 or 2):
 *   {"format": "luon-graph", "version": 1, "device": "cpu(0)",
 *    "slots": N,
 *    "inputs":  [{"name", "dtype", "shape"}],       slots 0 .. #inputs-1
 *    "consts":  [{"slot", "name", "dtype", "shape"[, "grad": false]}], in the
 *               params file by name ("grad": false: a running statistic)
 *    "nodes":   [{"op", "inputs": [slot..], "outputs": [slot..],
 *                 "dtype", "i": [int..], "f": [number..]}],
 *    "outputs": [{"slot", "dtype", "shape"}]}
 * "i" and "f" are luon_attrs' lists (the registry names their slots); an
 * integer beyond 2^53 is written as a decimal string, a float that is not
 * finite as "inf", "-inf" or "nan"; "device" is where the graph was
 * captured, and a node that makes arrays on a device (creation, random,
 * copyto) makes them where the graph is loaded. Version 2 is written only
 * for a graph with a batch_norm whose RELU slot is set (BatchNorm + relu
 * fused): a reader of version 1 ignores ints past the ones it knows, and
 * would run it without the relu, so it must refuse the file instead. */
#include "graph.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_FILE (64u << 20) /* a larger graph file is not one */
#define MAX_SLOTS (1 << 20)
#define MAX_IO 1024          /* inputs or outputs of a graph */
#define EXACT (1ll << 53)    /* integers a JSON number holds exactly */

static const char *op_name(int32_t op) { return op == OP_DETACH ? "detach" : luon_op_name(op); }

/* The device a node makes its arrays on, for those that choose one. */
static bool places(const gnode *n) {
  static int32_t copyto = -2;
  if (copyto == -2) copyto = luon_op_find("copyto");
  return n->op != OP_DETACH && (n->nin == 0 || n->op == copyto);
}

static lu_device attrs_dev(const luon_attrs *a) {
  return (lu_device){a->dev_type ? a->dev_type : LUON_CPU, a->dev_id};
}

/* ---- saving ----------------------------------------------------------------- */

static cJSON *int_item(int64_t v) {
  if (v >= -EXACT && v <= EXACT) return cJSON_CreateNumber((double)v);
  char b[32];
  snprintf(b, sizeof b, "%lld", (long long)v);
  return cJSON_CreateString(b);
}

static cJSON *float_item(double v) {
  if (isfinite(v)) return cJSON_CreateNumber(v);
  return cJSON_CreateString(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static cJSON *shape_item(int32_t ndim, const int64_t *shape) {
  cJSON *a = cJSON_CreateArray();
  for (int32_t d = 0; a && d < ndim; d++) cJSON_AddItemToArray(a, int_item(shape[d]));
  return a;
}

/* {"name"?, "slot"?, "dtype", "shape"} */
static cJSON *array_item(const char *name, int32_t slot, int32_t dtype, int32_t ndim, const int64_t *shape) {
  cJSON *o = cJSON_CreateObject();
  if (slot >= 0) cJSON_AddNumberToObject(o, "slot", slot);
  if (name) cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "dtype", luon_dtype_name(dtype));
  cJSON_AddItemToObject(o, "shape", shape_item(ndim, shape));
  return o;
}

static cJSON *node_item(const gnode *n) {
  cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateArray(), *out = cJSON_CreateArray();
  cJSON_AddStringToObject(o, "op", op_name(n->op));
  for (int i = 0; i < n->nin; i++) cJSON_AddItemToArray(in, cJSON_CreateNumber(n->in[i]));
  for (int k = 0; k < n->nout; k++) cJSON_AddItemToArray(out, cJSON_CreateNumber(n->out[k]));
  cJSON_AddItemToObject(o, "inputs", in);
  cJSON_AddItemToObject(o, "outputs", out);
  if (n->attrs.dtype) cJSON_AddStringToObject(o, "dtype", luon_dtype_name(n->attrs.dtype));
  cJSON *ia = cJSON_CreateArray(), *fa = cJSON_CreateArray();
  for (int k = 0; k < n->attrs.ni; k++) cJSON_AddItemToArray(ia, int_item(n->attrs.i[k]));
  int nf = 8;
  while (nf > 0 && n->attrs.f[nf - 1] == 0 && !signbit(n->attrs.f[nf - 1])) nf--;
  for (int k = 0; k < nf; k++) cJSON_AddItemToArray(fa, float_item(n->attrs.f[k]));
  cJSON_AddItemToObject(o, "i", ia);
  cJSON_AddItemToObject(o, "f", fa);
  return o;
}

/* The one device of the graph's inputs, constants and placing nodes. */
typedef struct placed {
  bool have;
  lu_device dev;
  const char *what;
  int32_t which;
} placed;

/* false when d differs from the device seen first */
static bool same_place(placed *p, lu_device d, const char *what, int32_t which) {
  if (p->have) return lu_device_eq(d, p->dev);
  *p = (placed){true, d, what, which};
  return true;
}

static luon_status graph_device(const luon_graph *g, lu_device *dev) {
  placed p = {false, {LUON_CPU, 0}, "", 0};
  const char *what = NULL;
  int32_t which = 0;
  lu_device d = {LUON_CPU, 0};
  for (int32_t i = 0; i < g->nin && !what; i++)
    if (!same_place(&p, d = g->in_sig[i].dev, "input", i + 1)) what = "input", which = i + 1;
  for (int32_t s = 0, k = 0; s < g->nslots && !what; s++)
    if (g->kind[s] == SLOT_CONST && (k++, !same_place(&p, d = g->consts[s]->dev, "constant", k)))
      what = "constant", which = k;
  for (int32_t j = 0; j < g->nnodes && !what; j++)
    if (places(&g->nodes[j]) && !same_place(&p, d = attrs_dev(&g->nodes[j].attrs), "node", j + 1))
      what = "node", which = j + 1;
  *dev = p.dev;
  if (!what) return LUON_OK;
  char first[32];
  snprintf(first, sizeof first, "%s", lu_device_str(p.dev));
  return lu_error(LUON_EDEVICE, "graph_save: the graph uses two devices: its %s %d is on %s, its %s %d on %s; an "
                  "exported graph runs on one device, chosen when it is loaded", p.what, p.which, first, what,
                  which, lu_device_str(d));
}

static luon_status write_text(const char *path, const char *text) {
  lu_wfile f;
  LU_TRY(lu_wfile_open(&f, "graph_save", path));
  luon_status s = lu_wfile_write(&f, text, strlen(text));
  if (s == LUON_OK) s = lu_wfile_write(&f, "\n", 1);
  if (s != LUON_OK) {
    lu_wfile_abort(&f);
    return s;
  }
  return lu_wfile_commit(&f);
}

/* 2 where a node needs a reader that knows batch_norm's RELU slot, else 1 */
static int format_version(const luon_graph *g) {
  for (int32_t k = 0; k < g->nnodes; k++) {
    const gnode *n = &g->nodes[k];
    if (n->op == LU_OP_batch_norm && n->attrs.ni > LU_BN_RELU && n->attrs.i[LU_BN_RELU] != 0) return 2;
  }
  return 1;
}

luon_status luon_graph_save(const luon_graph *g, const char *symbol_path, const char *params_path,
                            const char *const *input_names, const char *const *const_names,
                            const uint8_t *const_nograd) {
  if (!g) return lu_error(LUON_EINVAL, "graph_save: graph is NULL");
  if (!symbol_path || !symbol_path[0] || !params_path || !params_path[0])
    return lu_error(LUON_EINVAL, "graph_save: a graph file and a parameter file must be named");
  if (g->busy) return lu_error(LUON_EINVAL, "graph_save: the graph is running");
  lu_device dev;
  LU_TRY(graph_device(g, &dev));
  int32_t nconst = luon_graph_num_consts(g);
  const char **names = calloc((size_t)nconst + 1, sizeof *names);
  luon_tensor **vals = calloc((size_t)nconst + 1, sizeof *vals);
  char *autonames = calloc((size_t)nconst + 1, 24);
  cJSON *root = cJSON_CreateObject();
  luon_status s = names && vals && autonames && root ? LUON_OK
                : lu_error(LUON_ENOMEM, "graph_save: out of host memory");
  for (int32_t k = 0; k < nconst && s == LUON_OK; k++) {
    vals[k] = luon_graph_const(g, k);
    names[k] = const_names && const_names[k] ? const_names[k] : g->const_names ? g->const_names[k] : NULL;
    if (!names[k]) {
      snprintf(autonames + 24 * k, 24, "_const%d", (int)k);
      names[k] = autonames + 24 * k;
    }
  }
  if (s == LUON_OK) {
    cJSON_AddStringToObject(root, "format", "luon-graph");
    cJSON_AddNumberToObject(root, "version", format_version(g));
    cJSON_AddStringToObject(root, "device", lu_device_str(dev));
    cJSON_AddNumberToObject(root, "slots", g->nslots);
    cJSON *ins = cJSON_AddArrayToObject(root, "inputs");
    for (int32_t i = 0; i < g->nin; i++) {
      char dflt[24];
      snprintf(dflt, sizeof dflt, g->nin == 1 ? "data" : "data%d", (int)i);
      const char *name = input_names && input_names[i] ? input_names[i]
                       : g->in_names ? g->in_names[i] : dflt;
      const sig *w = &g->in_sig[i];
      cJSON_AddItemToArray(ins, array_item(name, -1, w->dtype, w->ndim, w->shape));
    }
    cJSON *cs = cJSON_AddArrayToObject(root, "consts");
    for (int32_t sl = 0, k = 0; sl < g->nslots; sl++) {
      if (g->kind[sl] != SLOT_CONST) continue;
      const luon_tensor *t = g->consts[sl];
      cJSON *c = array_item(names[k], sl, t->dtype, t->ndim, t->shape);
      bool nograd = const_nograd ? const_nograd[k] != 0 : g->const_nograd && k < g->nconst_names && g->const_nograd[k];
      if (nograd) cJSON_AddFalseToObject(c, "grad");
      cJSON_AddItemToArray(cs, c);
      k++;
    }
    cJSON *ns = cJSON_AddArrayToObject(root, "nodes");
    for (int32_t j = 0; j < g->nnodes; j++) cJSON_AddItemToArray(ns, node_item(&g->nodes[j]));
    cJSON *os = cJSON_AddArrayToObject(root, "outputs");
    for (int32_t k = 0; k < g->nout; k++) {
      const sig *w = &g->out_sig[k];
      cJSON_AddItemToArray(os, array_item(NULL, g->outputs[k], w->dtype, w->ndim, w->shape));
    }
  }
  char *text = s == LUON_OK ? cJSON_Print(root) : NULL;
  if (s == LUON_OK && !text) s = lu_error(LUON_ENOMEM, "graph_save: out of host memory");
  if (s == LUON_OK) s = luon_safetensors_save(params_path, nconst, names, vals);
  if (s == LUON_OK) s = write_text(symbol_path, text);
  cJSON_free(text);
  cJSON_Delete(root);
  free(names);
  free(vals);
  free(autonames);
  return s;
}

/* ---- loading ---------------------------------------------------------------- */

typedef struct reader {
  const char *path;
  luon_status err;
} reader;

static bool bad(reader *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool bad(reader *R, const char *fmt, ...) {
  if (R->err != LUON_OK) return false;
  char detail[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  R->err = lu_error(LUON_EFORMAT, "graph_load: %s: %s", R->path, detail);
  return false;
}

static const char *kind_of(const cJSON *v) {
  return !v ? "nothing" : cJSON_IsString(v) ? "a string" : cJSON_IsNumber(v) ? "a number"
       : cJSON_IsArray(v) ? "a list" : cJSON_IsObject(v) ? "an object" : cJSON_IsBool(v) ? "a boolean" : "null";
}

/* o's field key (exact case; cJSON's lookup ignores it), or NULL. */
static const cJSON *field(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool get_int(reader *R, const cJSON *v, int64_t lo, int64_t hi, const char *what, int64_t *out) {
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (!(d == floor(d)) || d < -(double)EXACT || d > (double)EXACT)
      return bad(R, "%s is %.17g: expected an integer", what, d);
    *out = (int64_t)d;
  } else if (cJSON_IsString(v)) {
    char *end;
    errno = 0;
    long long x = strtoll(v->valuestring, &end, 10);
    if (errno || end == v->valuestring || *end)
      return bad(R, "%s is \"%.40s\": expected an integer", what, v->valuestring);
    *out = x;
  } else {
    return bad(R, "%s is %s: expected an integer", what, kind_of(v));
  }
  if (*out < lo || *out > hi) return bad(R, "%s is %lld: expected %lld to %lld", what, (long long)*out,
                                         (long long)lo, (long long)hi);
  return true;
}

static bool get_float(reader *R, const cJSON *v, const char *what, double *out) {
  if (cJSON_IsNumber(v)) *out = v->valuedouble;
  else if (cJSON_IsString(v) && !strcmp(v->valuestring, "inf")) *out = INFINITY;
  else if (cJSON_IsString(v) && !strcmp(v->valuestring, "-inf")) *out = -INFINITY;
  else if (cJSON_IsString(v) && !strcmp(v->valuestring, "nan")) *out = NAN;
  else return bad(R, "%s is %s: expected a number, \"inf\", \"-inf\" or \"nan\"", what, kind_of(v));
  return true;
}

static bool get_list(reader *R, const cJSON *o, const char *key, int max, const char *what, const cJSON **out) {
  const cJSON *v = field(o, key);
  if (!cJSON_IsArray(v)) return bad(R, "%s has %s for \"%s\": expected a list", what, kind_of(v), key);
  if (cJSON_GetArraySize(v) > max)
    return bad(R, "%s has %d entries in \"%s\": at most %d", what, cJSON_GetArraySize(v), key, max);
  *out = v;
  return true;
}

static bool get_dtype(reader *R, const cJSON *v, const char *what, int32_t *out) {
  if (cJSON_IsString(v))
    for (int32_t d = 1; d < LUON_DTYPE_COUNT; d++)
      if (!strcmp(v->valuestring, luon_dtype_name(d))) {
        *out = d;
        return true;
      }
  return bad(R, "%s has %s%.40s%s for its dtype: expected a dtype name such as \"float32\"", what,
             cJSON_IsString(v) ? "\"" : kind_of(v), cJSON_IsString(v) ? v->valuestring : "",
             cJSON_IsString(v) ? "\"" : "");
}

/* {"dtype", "shape"} of an input, constant or output into w */
static bool get_sig(reader *R, const cJSON *o, const char *what, sig *w) {
  const cJSON *sh = NULL;
  if (!get_dtype(R, field(o, "dtype"), what, &w->dtype)) return false;
  if (!get_list(R, o, "shape", LU_MAXD, what, &sh)) return false;
  w->ndim = cJSON_GetArraySize(sh);
  int d = 0;
  int64_t bytes = luon_dtype_size(w->dtype);
  for (const cJSON *e = sh->child; e; e = e->next, d++) {
    char m[200];
    snprintf(m, sizeof m, "%s's dimension %d", what, d + 1);
    if (!get_int(R, e, 0, INT64_MAX, m, &w->shape[d])) return false;
    if (w->shape[d] > 0 && bytes > (INT64_C(1) << 62) / w->shape[d])
      return bad(R, "%s's shape %s is larger than any array", what, lu_shape_str(d + 1, w->shape));
    bytes *= w->shape[d];
  }
  return true;
}

static bool get_name(reader *R, const cJSON *o, const char *what, char **out) {
  const cJSON *v = field(o, "name");
  if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) > 1024)
    return bad(R, "%s has %s for its name: expected a string of 1 to 1024 bytes", what, kind_of(v));
  if (!(*out = strdup(v->valuestring))) R->err = lu_error(LUON_ENOMEM, "graph_load: out of host memory");
  return *out != NULL;
}

/* Slot number v of what, which must be made here (def) or made before (use). */
static bool get_slot(reader *R, const cJSON *v, luon_graph *g, bool def, const char *what, int32_t *out) {
  int64_t s = 0;
  if (!get_int(R, v, 0, g->nslots - 1, what, &s)) return false;
  if (def && g->kind[s] >= 0) return bad(R, "%s: slot %lld is made twice", what, (long long)s);
  if (!def && g->kind[s] < 0) return bad(R, "%s: slot %lld is read before any node makes it", what, (long long)s);
  *out = (int32_t)s;
  return true;
}

static bool read_node(reader *R, const cJSON *o, luon_graph *g, int32_t j, lu_device to) {
  char what[64];
  snprintf(what, sizeof what, "node %d", (int)j + 1);
  gnode *n = &g->nodes[j];
  memset(n, 0, sizeof *n);
  if (!cJSON_IsObject(o)) return bad(R, "%s is %s: expected an object", what, kind_of(o));
  const cJSON *op = field(o, "op"), *ins, *outs, *ia, *fa;
  if (!cJSON_IsString(op)) return bad(R, "%s has %s for its op: expected an op's name", what, kind_of(op));
  if (!strcmp(op->valuestring, "detach")) {
    n->op = OP_DETACH;
  } else if ((n->op = luon_op_find(op->valuestring)) < 0) {
    return bad(R, "%s: no op is named \"%.60s\" (a graph of another luon version?)", what, op->valuestring);
  }
  const char *name = op_name(n->op);
  snprintf(what, sizeof what, "node %d (%s)", (int)j + 1, name);
  if (!get_list(R, o, "inputs", LUON_MAX_OP_INPUTS, what, &ins) ||
      !get_list(R, o, "outputs", LUON_MAX_OP_INPUTS, what, &outs) || !get_list(R, o, "i", 32, what, &ia) ||
      !get_list(R, o, "f", 8, what, &fa))
    return false;
  n->nin = cJSON_GetArraySize(ins);
  n->nout = cJSON_GetArraySize(outs);
  int32_t want_in = n->op == OP_DETACH ? 1 : luon_op_num_inputs(n->op);
  int32_t want_out = n->op == OP_DETACH ? 1 : luon_op_num_outputs(n->op);
  if (want_in >= 0 && n->nin != want_in) return bad(R, "%s reads %d slots: the op takes %d", what, n->nin, want_in);
  if (n->nout < 1 || (want_out >= 0 && n->nout != want_out))
    return bad(R, "%s makes %d slots: the op makes %d", what, n->nout, want_out >= 0 ? want_out : 1);
  if (n->op != OP_DETACH) {
    luon_op_info info;
    if (luon_op_info_get(n->op, &info) != LUON_OK || info.kind == 2)
      return bad(R, "%s updates its inputs in place, which a graph never holds", what);
  }
  int k = 0;
  for (const cJSON *e = ins->child; e; e = e->next, k++)
    if (!get_slot(R, e, g, false, what, &n->in[k])) return false;
  k = 0;
  for (const cJSON *e = outs->child; e; e = e->next, k++) {
    if (!get_slot(R, e, g, true, what, &n->out[k])) return false;
    g->kind[n->out[k]] = SLOT_NODE;
  }
  const cJSON *dt = field(o, "dtype");
  if (dt && !get_dtype(R, dt, what, &n->attrs.dtype)) return false;
  n->attrs.ni = cJSON_GetArraySize(ia);
  k = 0;
  for (const cJSON *e = ia->child; e; e = e->next, k++)
    if (!get_int(R, e, INT64_MIN, INT64_MAX, what, &n->attrs.i[k])) return false;
  k = 0;
  for (const cJSON *e = fa->child; e; e = e->next, k++)
    if (!get_float(R, e, what, &n->attrs.f[k])) return false;
  if (places(n)) {
    /* captured by luon_graph_save from one device: the graph's */
    n->attrs.dev_type = to.type;
    n->attrs.dev_id = to.id;
  }
  return true;
}

static luon_status read_file(const char *path, char **text) {
  uint8_t *b;
  size_t n;
  LU_TRY(lu_read_file("graph_load", path, MAX_FILE, &b, &n));
  if (strlen((char *)b) != n) {
    free(b);
    return lu_error(LUON_EFORMAT, "graph_load: %s: a NUL byte in the text: not a graph file", path);
  }
  *text = (char *)b;
  return LUON_OK;
}

/* The constants' values from the params file, onto `to`. */
static bool read_consts(reader *R, const cJSON *cs, luon_graph *g, const char *params_path, lu_device to) {
  int32_t n = cJSON_GetArraySize(cs);
  if (n == 0) return true;
  if (!params_path) return bad(R, "the graph has %d constants but no parameter file was given", n);
  luon_safetensors *h = NULL;
  luon_status st = luon_safetensors_open(params_path, &h);
  if (st != LUON_OK) {
    R->err = st;
    return false;
  }
  int32_t cnt = luon_safetensors_count(h);
  bool ok = true, *used = calloc((size_t)cnt + 1, sizeof(bool));
  if (!used) {
    luon_safetensors_close(h);
    R->err = lu_error(LUON_ENOMEM, "graph_load: out of host memory");
    return false;
  }
  int32_t k = 0, last = -1;
  for (const cJSON *o = cs->child; o && ok; o = o->next, k++) {
    char what[64];
    snprintf(what, sizeof what, "constant %d", (int)k + 1);
    sig w;
    int32_t slot = 0;
    if (!cJSON_IsObject(o)) ok = bad(R, "%s is %s: expected an object", what, kind_of(o));
    ok = ok && get_name(R, o, what, &g->const_names[k]) && get_sig(R, o, what, &w) &&
         get_slot(R, field(o, "slot"), g, true, what, &slot);
    if (!ok) break;
    const cJSON *gr = field(o, "grad");
    if (gr && !cJSON_IsBool(gr)) {
      ok = bad(R, "%s has %s for \"grad\": expected true or false", what, kind_of(gr));
      break;
    }
    g->const_nograd[k] = gr && cJSON_IsFalse(gr);
    if (slot < last) { /* the k-th constant is the k-th in slot order (luon_graph_const) */
      ok = bad(R, "%s is slot %d, after a constant in slot %d: constants are listed in slot order", what,
               (int)slot, (int)last);
      break;
    }
    last = slot;
    int32_t i = 0;
    while (i < cnt && strcmp(luon_safetensors_name(h, i), g->const_names[k])) i++;
    if (i == cnt) {
      ok = bad(R, "%s '%.200s' is not in %s", what, g->const_names[k], params_path);
      break;
    }
    if (used[i]) {
      ok = bad(R, "%s is named '%.200s' as an earlier one", what, g->const_names[k]);
      break;
    }
    used[i] = true;
    int32_t dt, nd;
    int64_t shape[8];
    luon_safetensors_shape(h, i, &dt, &nd, shape);
    if (dt != w.dtype || nd != w.ndim || memcmp(shape, w.shape, sizeof(int64_t) * (size_t)nd)) {
      ok = bad(R, "%s '%.200s' is %s %s in the graph but %s %s in %s", what, g->const_names[k],
               luon_dtype_name(w.dtype), lu_shape_str(w.ndim, w.shape), luon_dtype_name(dt),
               lu_shape_str(nd, shape), params_path);
      break;
    }
    st = luon_safetensors_get(h, i, to.type, to.id, &g->consts[slot]);
    if (st != LUON_OK) {
      R->err = st;
      ok = false;
      break;
    }
    g->kind[slot] = SLOT_CONST;
  }
  luon_safetensors_close(h);
  free(used);
  return ok;
}

static bool read_graph(reader *R, const cJSON *root, luon_graph *g, const char *params_path, lu_device to) {
  if (!cJSON_IsObject(root)) return bad(R, "the file holds %s: expected a graph object", kind_of(root));
  const cJSON *fmt = field(root, "format"), *ver = field(root, "version"), *dev = field(root, "device");
  if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "luon-graph"))
    return bad(R, "\"format\" is not \"luon-graph\": not a graph written by luon's export");
  int64_t v, nslots;
  if (!get_int(R, ver, 1, INT32_MAX, "\"version\"", &v)) return false;
  if (v != 1 && v != 2)
    return bad(R, "graph format version %lld: this luon reads versions 1 and 2", (long long)v);
  if (!cJSON_IsString(dev)) return bad(R, "\"device\" is %s: expected a device's name", kind_of(dev));
  if (!get_int(R, field(root, "slots"), 0, MAX_SLOTS, "\"slots\"", &nslots)) return false;
  const cJSON *ins, *cs, *ns, *os;
  if (!get_list(R, root, "inputs", MAX_IO, "the graph", &ins) ||
      !get_list(R, root, "consts", MAX_SLOTS, "the graph", &cs) ||
      !get_list(R, root, "nodes", MAX_SLOTS, "the graph", &ns) ||
      !get_list(R, root, "outputs", MAX_IO, "the graph", &os))
    return false;
  g->nslots = (int32_t)nslots;
  g->nin = cJSON_GetArraySize(ins);
  g->nout = cJSON_GetArraySize(os);
  g->nnodes = cJSON_GetArraySize(ns);
  int32_t nconst = cJSON_GetArraySize(cs);
  size_t n1 = (size_t)nslots + 1;
  g->kind = malloc(n1);
  g->consts = calloc(n1, sizeof *g->consts);
  g->in_sig = calloc((size_t)g->nin + 1, sizeof *g->in_sig);
  g->out_sig = calloc((size_t)g->nout + 1, sizeof *g->out_sig);
  g->outputs = calloc((size_t)g->nout + 1, sizeof *g->outputs);
  g->nodes = calloc((size_t)g->nnodes + 1, sizeof *g->nodes);
  g->in_names = calloc((size_t)g->nin + 1, sizeof *g->in_names);
  g->const_names = calloc((size_t)nconst + 1, sizeof *g->const_names);
  g->const_nograd = calloc((size_t)nconst + 1, 1);
  g->nconst_names = nconst;
  if (!g->kind || !g->consts || !g->in_sig || !g->out_sig || !g->outputs || !g->nodes || !g->in_names ||
      !g->const_names || !g->const_nograd) {
    R->err = lu_error(LUON_ENOMEM, "graph_load: out of host memory");
    return false;
  }
  memset(g->kind, -1, n1);
  if (g->nin > g->nslots) return bad(R, "%d inputs but %d slots", g->nin, g->nslots);
  int32_t k = 0;
  for (const cJSON *o = ins->child; o; o = o->next, k++) {
    char what[32];
    snprintf(what, sizeof what, "input %d", (int)k + 1);
    if (!cJSON_IsObject(o)) return bad(R, "%s is %s: expected an object", what, kind_of(o));
    if (!get_name(R, o, what, &g->in_names[k]) || !get_sig(R, o, what, &g->in_sig[k])) return false;
    g->in_sig[k].dev = to;
    g->kind[k] = SLOT_INPUT;
  }
  if (!read_consts(R, cs, g, params_path, to)) return false;
  k = 0;
  for (const cJSON *o = ns->child; o; o = o->next, k++)
    if (!read_node(R, o, g, k, to)) return false;
  k = 0;
  for (const cJSON *o = os->child; o; o = o->next, k++) {
    char what[32];
    snprintf(what, sizeof what, "output %d", (int)k + 1);
    if (!cJSON_IsObject(o)) return bad(R, "%s is %s: expected an object", what, kind_of(o));
    if (!get_slot(R, field(o, "slot"), g, false, what, &g->outputs[k]) || !get_sig(R, o, what, &g->out_sig[k]))
      return false;
    g->out_sig[k].dev = to;
  }
  for (int32_t s = 0; s < g->nslots; s++)
    if (g->kind[s] < 0) return bad(R, "slot %d is never made (\"slots\" is %d)", (int)s, g->nslots);
  return true;
}

luon_status luon_graph_load(const char *symbol_path, const char *params_path, int32_t dev_type, int32_t dev_id,
                            luon_graph **out) {
  if (!out) return lu_error(LUON_EINVAL, "graph_load: out is NULL");
  *out = NULL;
  if (!symbol_path || !symbol_path[0]) return lu_error(LUON_EINVAL, "graph_load: no graph file was named");
  lu_device to = {dev_type, dev_id};
  LU_TRY(lu_device_check(to));
  char *text = NULL;
  LU_TRY(read_file(symbol_path, &text));
  /* the length with the NUL: cJSON checks for it after the value (nothing else may follow) */
  cJSON *root = cJSON_ParseWithLengthOpts(text, strlen(text) + 1, NULL, 1);
  reader R = {symbol_path, LUON_OK};
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    bad(&R, "not JSON (near byte %lld)", at ? (long long)(at - text) : -1ll);
  }
  luon_graph *g = calloc(1, sizeof *g);
  if (!g && R.err == LUON_OK) R.err = lu_error(LUON_ENOMEM, "graph_load: out of host memory");
  if (R.err == LUON_OK) read_graph(&R, root, g, params_path, to);
  cJSON_Delete(root);
  free(text);
  if (R.err == LUON_OK) R.err = lu_graph_finish(g);
  if (R.err != LUON_OK) {
    if (g && !g->consts) g->nslots = 0; /* no slots were made */
    luon_graph_free(g);
    return R.err;
  }
  *out = g;
  return LUON_OK;
}

/* ---- what a graph takes and makes ------------------------------------------- */

int32_t luon_graph_num_inputs(const luon_graph *g) { return g ? g->nin : 0; }
int32_t luon_graph_num_outputs(const luon_graph *g) { return g ? g->nout : 0; }

luon_status luon_graph_io(const luon_graph *g, int32_t output, int32_t k, int32_t *dtype, int32_t *ndim,
                          int64_t *shape) {
  if (!g) return lu_error(LUON_EINVAL, "graph_io: graph is NULL");
  int32_t n = output ? g->nout : g->nin;
  if (k < 0 || k >= n)
    return lu_error(LUON_EINVAL, "graph_io: the graph has %d %s (0 to %d), asked for %d", n,
                    output ? "outputs" : "inputs", n - 1, k);
  const sig *w = output ? &g->out_sig[k] : &g->in_sig[k];
  if (dtype) *dtype = w->dtype;
  if (ndim) *ndim = w->ndim;
  if (shape) memcpy(shape, w->shape, sizeof(int64_t) * (size_t)w->ndim);
  return LUON_OK;
}

const char *luon_graph_input_name(const luon_graph *g, int32_t k) {
  return g && g->in_names && k >= 0 && k < g->nin ? g->in_names[k] : NULL;
}

const char *luon_graph_const_name(const luon_graph *g, int32_t k) {
  return g && g->const_names && k >= 0 && k < g->nconst_names ? g->const_names[k] : NULL;
}

int32_t luon_graph_const_nograd(const luon_graph *g, int32_t k) {
  return g && g->const_nograd && k >= 0 && k < g->nconst_names ? g->const_nograd[k] : 0;
}

/* ---- luon_model: a loaded graph for a C host -------------------------------- */

struct luon_model {
  luon_graph *g;
  luon_tensor **in, **out; /* per run: the inputs (wrapped host buffers or copies on the device) */
  size_t *out_bytes;
};

void luon_model_free(luon_model *m) {
  if (!m) return;
  luon_graph_free(m->g);
  free(m->in);
  free(m->out);
  free(m->out_bytes);
  free(m);
}

luon_status luon_model_load(const char *symbol_path, const char *params_path, int32_t dev_type, int32_t dev_id,
                            luon_model **out) {
  if (!out) return lu_error(LUON_EINVAL, "model_load: out is NULL");
  *out = NULL;
  luon_model *m = calloc(1, sizeof *m);
  if (!m) return lu_error(LUON_ENOMEM, "model_load: out of host memory");
  luon_status s = luon_graph_load(symbol_path, params_path, dev_type, dev_id, &m->g);
  if (s == LUON_OK) s = luon_graph_set_static_alloc(m->g, 1);
  if (s == LUON_OK) {
    m->in = calloc((size_t)m->g->nin + 1, sizeof *m->in);
    m->out = calloc((size_t)m->g->nout + 1, sizeof *m->out);
    m->out_bytes = calloc((size_t)m->g->nout + 1, sizeof *m->out_bytes);
    if (!m->in || !m->out || !m->out_bytes) s = lu_error(LUON_ENOMEM, "model_load: out of host memory");
  }
  for (int32_t k = 0; s == LUON_OK && k < m->g->nout; k++) {
    const sig *w = &m->g->out_sig[k];
    size_t n = (size_t)luon_dtype_size(w->dtype);
    for (int d = 0; d < w->ndim; d++) n *= (size_t)w->shape[d];
    m->out_bytes[k] = n;
  }
  if (s != LUON_OK) {
    luon_model_free(m);
    return s;
  }
  *out = m;
  return LUON_OK;
}

luon_graph *luon_model_graph(luon_model *m) { return m ? m->g : NULL; }

luon_status luon_model_run(luon_model *m, const void *const *inputs, void *const *outputs) {
  if (!m) return lu_error(LUON_EINVAL, "model_run: model is NULL");
  luon_graph *g = m->g;
  if ((g->nin > 0 && !inputs) || (g->nout > 0 && !outputs))
    return lu_error(LUON_EINVAL, "model_run: the model takes %d inputs and makes %d outputs: %s is NULL", g->nin,
                    g->nout, !inputs && g->nin > 0 ? "inputs" : "outputs");
  luon_status s = LUON_OK;
  int32_t made = 0;
  for (; made < g->nin && s == LUON_OK; made++) {
    const sig *w = &g->in_sig[made];
    if (!inputs[made]) {
      s = lu_error(LUON_EINVAL, "model_run: input %d is NULL", made + 1);
      break;
    }
    /* the host buffer itself on the CPU (the graph only reads its inputs) */
    if (w->dev.type == LUON_CPU)
      s = luon_tensor_wrap((void *)inputs[made], w->dtype, w->ndim, w->shape, NULL, LUON_CPU, w->dev.id,
                           &m->in[made]);
    else
      s = luon_tensor_from_host(inputs[made], w->dtype, w->ndim, w->shape, w->dev.type, w->dev.id, &m->in[made]);
    if (s != LUON_OK) break;
  }
  if (s == LUON_OK) s = luon_graph_run(g, g->nin, m->in, g->nout, m->out);
  for (int32_t k = 0; k < g->nout && s == LUON_OK; k++) {
    if (!outputs[k]) s = lu_error(LUON_EINVAL, "model_run: output %d is NULL", k + 1);
    else s = luon_tensor_to_host(m->out[k], outputs[k], g->out_sig[k].dtype, m->out_bytes[k]);
  }
  for (int32_t k = 0; k < g->nout; k++) {
    luon_tensor_release(m->out[k]);
    m->out[k] = NULL;
  }
  for (int32_t i = 0; i < made; i++) {
    luon_tensor_release(m->in[i]);
    m->in[i] = NULL;
  }
  return s;
}
