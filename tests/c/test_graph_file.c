/* test_graph_file.c: graphs as files through the public API, no Lua. A
 * captured graph (elementwise ops, a creation op, float attributes that are
 * not finite, two outputs) is saved, loaded and run to the same bits as the
 * captured one, also through luon_model_run on host buffers; a loaded graph
 * saves to the same text again; damaged files are errors naming the fault
 * and the file, and leave nothing behind. */
#include "luon.h"
#include "testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static luon_tensor *from(const float *v, int ndim, const int64_t *shape) {
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(v, LUON_DTYPE_F32, ndim, shape, LUON_CPU, 0, &t));
  return t;
}

static luon_tensor *call(const char *op, int nin, luon_tensor *a, luon_tensor *b, const luon_attrs *attrs) {
  luon_tensor *in[2] = {a, b}, *out = NULL;
  int32_t nout = 1;
  CHECK_OK(luon_op_call(luon_op_find(op), nin, in, attrs, &nout, &out));
  return out;
}

/* y = clip(relu(x * w + b) + full(0.25), -inf, 2.5) and its column sums */
static void forward(luon_tensor *x, luon_tensor *w, luon_tensor *b, luon_tensor **y, luon_tensor **s) {
  luon_attrs full = {0}, clip = {0}, sum = {0};
  full.ni = 2;
  full.i[test_slot("FULL_SHAPE")] = 2;
  full.i[test_slot("FULL_SHAPE") + 1] = 4;
  full.f[test_slot("FULL_VALUE")] = 0.25;
  clip.f[test_slot("CLIP_MIN")] = -INFINITY;
  clip.f[test_slot("CLIP_MAX")] = 2.5;
  sum.ni = test_slot("REDUCE_AXES") + 1;
  sum.i[test_slot("REDUCE_AXES")] = 0;
  luon_tensor *m = call("multiply", 2, x, w, NULL), *a = call("add", 2, m, b, NULL);
  luon_tensor *r = call("relu", 1, a, NULL, NULL), *q = call("full", 0, NULL, NULL, &full);
  luon_tensor *p = call("add", 2, r, q, NULL);
  *y = call("clip", 1, p, NULL, &clip);
  *s = call("sum", 1, *y, NULL, &sum);
  luon_tensor *tmp[5] = {m, a, r, q, p};
  for (int k = 0; k < 5; k++) luon_tensor_release(tmp[k]);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = calloc((size_t)n + 1, 1);
  if (fread(t, 1, (size_t)n, f) != (size_t)n) n = 0;
  fclose(f);
  return t;
}

static void spit(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
}

/* text with the first `from` replaced by `to` */
static char *replace(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  CHECK(at != NULL, "'%s' not in the graph file", from);
  if (!at) return strdup(text);
  size_t n = strlen(text) - strlen(from) + strlen(to);
  char *r = calloc(n + 1, 1);
  memcpy(r, text, (size_t)(at - text));
  strcat(r, to);
  strcat(r, at + strlen(from));
  return r;
}

static char dir[64], sym[96], params[96], sym2[96], params2[96], bad_sym[96];

/* The damaged graph fails to load with LUON_EFORMAT and a message naming
 * `what` and the file. */
static void refused(const char *text, const char *from, const char *to, const char *what) {
  char *t = replace(text, from, to);
  spit(bad_sym, t);
  luon_graph *g = (luon_graph *)1;
  luon_status s = luon_graph_load(bad_sym, params, LUON_CPU, 0, &g);
  CHECK(s == LUON_EFORMAT && g == NULL, "'%s' -> '%s': status %d: %s", from, to, (int)s, luon_last_error());
  CHECK(strstr(luon_last_error(), what) && strstr(luon_last_error(), bad_sym), "'%s' -> '%s': message %s", from,
        to, luon_last_error());
  free(t);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/luon-test-graph-file-%d", (int)getpid());
  CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
  snprintf(sym, sizeof sym, "%s/g-symbol.json", dir);
  snprintf(params, sizeof params, "%s/g-0000.safetensors", dir);
  snprintf(sym2, sizeof sym2, "%s/h-symbol.json", dir);
  snprintf(params2, sizeof params2, "%s/h-0000.safetensors", dir);
  snprintf(bad_sym, sizeof bad_sym, "%s/bad-symbol.json", dir);

  int64_t sh[2] = {2, 4}, sh1[1] = {4};
  float xv[8] = {1, -2, 3, -4, 0.5f, 6, -7, 8}, wv[4] = {2, 2, -1, -1}, bv[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  luon_tensor *x = from(xv, 2, sh), *w = from(wv, 1, sh1), *b = from(bv, 1, sh1), *y, *s;
  CHECK_OK(luon_graph_capture_begin(1, &x));
  forward(x, w, b, &y, &s);
  luon_tensor *outs[2] = {y, s};
  luon_graph *g = NULL;
  CHECK_OK(luon_graph_capture_end(2, outs, &g));

  const char *cnames[2] = {"layer.weight", NULL};
  const uint8_t nograd[2] = {0, 1}; /* the second: a running statistic, say */
  CHECK_OK(luon_graph_save(g, sym, params, NULL, cnames, nograd));
  char *text = slurp(sym);
  CHECK(text && strstr(text, "\"layer.weight\"") && strstr(text, "\"_const1\"") && strstr(text, "\"-inf\"") &&
        strstr(text, "\"op\":\t\"clip\"") && strstr(text, "\"name\":\t\"data\""), "graph file:\n%s", text);

  /* loaded, it computes the same bits; its names are the saved ones */
  luon_graph *l = NULL;
  CHECK_OK(luon_graph_load(sym, params, LUON_CPU, 0, &l));
  CHECK(luon_graph_num_inputs(l) == 1 && luon_graph_num_outputs(l) == 2, "inputs and outputs");
  CHECK(!strcmp(luon_graph_input_name(l, 0), "data") && !strcmp(luon_graph_const_name(l, 0), "layer.weight") &&
        luon_graph_const_name(l, 2) == NULL && luon_graph_input_name(g, 0) == NULL, "names");
  CHECK(luon_graph_const_nograd(l, 0) == 0 && luon_graph_const_nograd(l, 1) == 1 && strstr(text, "\"grad\":\tfalse"),
        "the no-gradient mark");
  int32_t dt, nd;
  int64_t shape[8];
  CHECK_OK(luon_graph_io(l, 1, 1, &dt, &nd, shape));
  CHECK(dt == LUON_DTYPE_F32 && nd == 1 && shape[0] == 4, "output 2 is float32 (4,)");
  CHECK(luon_graph_io(l, 1, 2, &dt, &nd, shape) == LUON_EINVAL, "no output 3");
  CHECK_OK(luon_graph_set_static_alloc(l, 1));
  for (int rep = 0; rep < 3; rep++) {
    float nv[8] = {(float)rep, 1, 2, -3, 4, -5, 6, 0.25f}, got[8], want[8], gs[4], ws[4];
    luon_tensor *x2 = from(nv, 2, sh), *r[2] = {NULL, NULL}, *e[2] = {NULL, NULL};
    CHECK_OK(luon_graph_run(l, 1, &x2, 2, r));
    CHECK_OK(luon_graph_run(g, 1, &x2, 2, e));
    CHECK_OK(luon_tensor_to_host(r[0], got, LUON_DTYPE_F32, sizeof got));
    CHECK_OK(luon_tensor_to_host(e[0], want, LUON_DTYPE_F32, sizeof want));
    CHECK_OK(luon_tensor_to_host(r[1], gs, LUON_DTYPE_F32, sizeof gs));
    CHECK_OK(luon_tensor_to_host(e[1], ws, LUON_DTYPE_F32, sizeof ws));
    CHECK(!memcmp(got, want, sizeof got) && !memcmp(gs, ws, sizeof gs) && want[1] == 2.5f, "run %d", rep);

    /* the model API: host buffers in and out, the same bits */
    luon_model *m = NULL;
    CHECK_OK(luon_model_load(sym, params, LUON_CPU, 0, &m));
    float mo[8] = {0}, ms[4] = {0};
    const void *ins[1] = {nv};
    void *mouts[2] = {mo, ms};
    CHECK_OK(luon_model_run(m, ins, mouts));
    CHECK(!memcmp(mo, want, sizeof mo) && !memcmp(ms, ws, sizeof ms), "model run %d", rep);
    CHECK(luon_model_run(m, NULL, mouts) == LUON_EINVAL, "NULL inputs");
    void *half[2] = {mo, NULL};
    CHECK(luon_model_run(m, ins, half) == LUON_EINVAL && strstr(luon_last_error(), "output 2"), "NULL output 2: %s",
          luon_last_error());
    CHECK_OK(luon_model_run(m, ins, mouts)); /* usable after errors */
    luon_model_free(m);
    for (int k = 0; k < 2; k++) {
      luon_tensor_release(r[k]);
      luon_tensor_release(e[k]);
    }
    luon_tensor_release(x2);
  }
  /* a loaded graph keeps its signature */
  luon_tensor *w4 = NULL;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 1, sh1, LUON_CPU, 0, &w4));
  luon_tensor *r2[2] = {NULL, NULL};
  CHECK(luon_graph_run(l, 1, &w4, 2, r2) == LUON_ESHAPE, "shape (4,) into a (2,4) graph: %s", luon_last_error());
  CHECK(luon_graph_matches(l, 1, &x) == 1 && luon_graph_matches(l, 1, &w4) == 0 && luon_graph_matches(l, 2, &x) == 0 &&
        luon_graph_matches(NULL, 1, &x) == 0, "luon_graph_matches");

  /* saved again, the same text (names kept) */
  CHECK_OK(luon_graph_save(l, sym2, params2, NULL, NULL, NULL));
  char *text2 = slurp(sym2);
  CHECK(text2 && !strcmp(text, text2), "a loaded graph saved again differs:\n%s", text2);

  /* an output declared with another shape: loads, and its run says so */
  {
    const char *last = NULL, *at = text;
    while ((at = strstr(at, "\"shape\":\t[4]")) != NULL) last = at++;
    CHECK(last != NULL, "no (4,) output in the file");
    if (last) {
      char *t = strdup(text);
      memcpy(t + (last - text), "\"shape\":\t[5]", strlen("\"shape\":\t[5]"));
      spit(bad_sym, t);
      luon_graph *o = NULL;
      CHECK_OK(luon_graph_load(bad_sym, params, LUON_CPU, 0, &o));
      luon_tensor *ro[2] = {NULL, NULL};
      CHECK(luon_graph_run(o, 1, &x, 2, ro) == LUON_EFORMAT && ro[0] == NULL &&
            strstr(luon_last_error(), "output 2 is float32 (4,), but the graph declares float32 (5,)"),
            "declared output: %s", luon_last_error());
      luon_graph_free(o);
      free(t);
    }
  }

  /* damaged files */
  refused(text, "\"luon-graph\"", "\"other\"", "not a graph written by luon's export");
  refused(text, "\"version\":\t1", "\"version\":\t3", "version 3");
  refused(text, "\"op\":\t\"clip\"", "\"op\":\t\"no_such_op\"", "no op is named \"no_such_op\"");
  refused(text, "\"op\":\t\"relu\"", "\"op\":\t\"add\"", "reads 1 slots: the op takes 2");
  refused(text, "\"inputs\":\t[0, 1]", "\"inputs\":\t[0, 9]", "read before any node makes it");
  refused(text, "\"inputs\":\t[0, 1]", "\"inputs\":\t[0, 99]", "expected 0 to");
  refused(text, "\"inputs\":\t[0, 1]", "\"inputs\":\t[0, 1.5]", "expected an integer");
  refused(text, "\"slots\":\t", "\"slots\":\t1", "slot");
  refused(text, "\"layer.weight\"", "\"missing.weight\"", "'missing.weight' is not in");
  refused(text, "\"shape\":\t[4]", "\"shape\":\t[5]", "is float32 (5,) in the graph but float32 (4,)");
  refused(text, "\"dtype\":\t\"float32\"", "\"dtype\":\t\"float99\"", "expected a dtype name");
  refused(text, "\"f\":\t[]", "\"f\":\t[\"huge\"]", "expected a number, \"inf\"");
  refused(text, "{", "[", "not JSON");
  spit(bad_sym, "7\n");
  luon_graph *n7 = NULL;
  CHECK(luon_graph_load(bad_sym, params, LUON_CPU, 0, &n7) == LUON_EFORMAT &&
        strstr(luon_last_error(), "holds a number: expected a graph object"), "7: %s", luon_last_error());
  refused(text, "{", "7 ", "not JSON");
  refused(text, "\"format\"", "7, \"format\"", "not JSON");
  luon_graph *none = (luon_graph *)1;
  CHECK(luon_graph_load("/nonexistent/g.json", params, LUON_CPU, 0, &none) == LUON_EIO && none == NULL, "no file");
  CHECK(luon_graph_load(sym, NULL, LUON_CPU, 0, &none) == LUON_EFORMAT &&
        strstr(luon_last_error(), "no parameter file"), "no params: %s", luon_last_error());
  CHECK(luon_graph_load(sym, params, LUON_GPU, 7, &none) != LUON_OK, "no gpu(7)");
  CHECK(luon_graph_save(NULL, sym, params, NULL, NULL, NULL) == LUON_EINVAL, "NULL graph");
  CHECK(luon_graph_save(g, "", params, NULL, NULL, NULL) == LUON_EINVAL, "no file name");
  luon_model *nm = (luon_model *)1;
  CHECK(luon_model_load(bad_sym, params, LUON_CPU, 0, &nm) == LUON_EFORMAT && nm == NULL, "model from a bad file");
  CHECK(luon_model_run(NULL, NULL, NULL) == LUON_EINVAL, "NULL model");
  luon_model_free(NULL);

  /* a graph on two devices is refused (cpu(0) input, cpu(1) constant) */
  luon_tensor *w1 = NULL;
  CHECK_OK(luon_tensor_from_host(wv, LUON_DTYPE_F32, 1, sh1, LUON_CPU, 1, &w1));
  luon_tensor *x1 = NULL;
  CHECK_OK(luon_tensor_from_host(wv, LUON_DTYPE_F32, 1, sh1, LUON_CPU, 0, &x1));
  CHECK_OK(luon_graph_capture_begin(1, &x1));
  luon_attrs to0 = {0};
  to0.dev_type = LUON_CPU;
  luon_tensor *w1on0 = call("copyto", 1, w1, NULL, &to0), *sum2 = call("add", 2, x1, w1on0, NULL);
  luon_graph *g2 = NULL;
  CHECK_OK(luon_graph_capture_end(1, &sum2, &g2));
  CHECK(luon_graph_save(g2, sym2, params2, NULL, NULL, NULL) == LUON_EDEVICE && strstr(luon_last_error(), "cpu(1)"),
        "two devices: %s", luon_last_error());

  luon_graph_free(g2);
  luon_tensor *rel[] = {x, w, b, y, s, w4, w1, x1, w1on0, sum2};
  for (size_t k = 0; k < sizeof rel / sizeof *rel; k++) luon_tensor_release(rel[k]);
  luon_graph_free(g);
  luon_graph_free(l);
  free(text);
  free(text2);
  const char *files[] = {sym, params, sym2, params2, bad_sym};
  for (size_t k = 0; k < 5; k++) unlink(files[k]);
  rmdir(dir);
  return TEST_RESULT;
}
