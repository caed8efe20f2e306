/* fuzz_graph.c: libFuzzer target for the exported-graph reader
 * (core/graph_file.c; scripts/fuzz builds and runs it, seeded by
 * tests/data/*.graph). Each input is written as a graph file and loaded
 * with a fixed parameter file holding the seed's constants ("0.weight",
 * "0.bias", "1.weight", "1.bias"). What loads must save, load again and
 * save to the same text; a small one (inputs of at most 4096 elements,
 * integer attributes within +-257, as fuzz_ops bounds sizes for libFuzzer's
 * malloc limit) is also run on zeros, where errors are fine. Crashes,
 * leaks, undefined behaviour and a failed round trip are not. */
#include "fuzz_util.h"
#include "graph.h"
#include <stdlib.h>
#include <unistd.h>

static char in_path[64], params[64], sym2[64], params2[64], sym3[64], params3[64];

static void make_params(void) {
  static const char *names[4] = {"0.weight", "0.bias", "1.weight", "1.bias"};
  int64_t shapes[4][2] = {{4, 3}, {4, 0}, {2, 4}, {2, 0}};
  luon_tensor *t[4];
  float v[16];
  for (int k = 0; k < 16; k++) v[k] = 0.125f * (float)(k - 7);
  for (int k = 0; k < 4; k++)
    if (luon_tensor_from_host(v, LUON_DTYPE_F32, shapes[k][1] ? 2 : 1, shapes[k], LUON_CPU, 0, &t[k]) != LUON_OK)
      __builtin_trap();
  if (luon_safetensors_save(params, 4, names, t) != LUON_OK) __builtin_trap();
  for (int k = 0; k < 4; k++) luon_tensor_release(t[k]);
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) __builtin_trap();
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *t = calloc((size_t)n + 1, 1);
  if (!t || fread(t, 1, (size_t)n, f) != (size_t)n) __builtin_trap();
  fclose(f);
  return t;
}

static int small(const luon_graph *g) {
  for (int32_t i = 0; i < g->nin; i++) {
    int64_t n = 1;
    for (int d = 0; d < g->in_sig[i].ndim; d++) {
      if (g->in_sig[i].shape[d] > 4096) return 0;
      n *= g->in_sig[i].shape[d];
    }
    if (n > 4096) return 0;
  }
  for (int32_t j = 0; j < g->nnodes; j++)
    for (int k = 0; k < g->nodes[j].attrs.ni; k++)
      if (g->nodes[j].attrs.i[k] > 257 || g->nodes[j].attrs.i[k] < -257) return 0;
  return 1;
}

static void run_on_zeros(luon_graph *g) {
  luon_tensor *in[LUON_MAX_OP_INPUTS * 4] = {NULL}, **out = calloc((size_t)g->nout + 1, sizeof *out);
  int32_t n = g->nin < (int32_t)(sizeof in / sizeof *in) ? g->nin : 0;
  int ok = n == g->nin;
  for (int32_t i = 0; i < n && ok; i++) {
    const sig *w = &g->in_sig[i];
    ok = luon_tensor_empty(w->dtype, w->ndim, w->shape, LUON_CPU, 0, &in[i]) == LUON_OK;
    if (ok) {
      luon_tensor_info info;
      luon_tensor_info_get(in[i], &info);
      memset(info.data, 0, (size_t)info.size * (size_t)luon_dtype_size(info.dtype));
    }
  }
  if (ok && luon_graph_run(g, n, in, g->nout, out) == LUON_OK)
    for (int32_t k = 0; k < g->nout; k++) luon_tensor_release(out[k]);
  for (int32_t i = 0; i < n; i++) luon_tensor_release(in[i]);
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_path[0]) {
    int pid = (int)getpid();
    snprintf(in_path, sizeof in_path, "/tmp/luon-fuzz-graph-%d.json", pid);
    snprintf(params, sizeof params, "/tmp/luon-fuzz-graph-%d.safetensors", pid);
    snprintf(sym2, sizeof sym2, "/tmp/luon-fuzz-graph-%d-2.json", pid);
    snprintf(params2, sizeof params2, "/tmp/luon-fuzz-graph-%d-2.safetensors", pid);
    snprintf(sym3, sizeof sym3, "/tmp/luon-fuzz-graph-%d-3.json", pid);
    snprintf(params3, sizeof params3, "/tmp/luon-fuzz-graph-%d-3.safetensors", pid);
    make_params();
  }
  write_file(in_path, data, size);
  luon_graph *g = NULL, *h = NULL;
  if (luon_graph_load(in_path, params, LUON_CPU, 0, &g) != LUON_OK) return 0;
  if (luon_graph_save(g, sym2, params2, NULL, NULL, NULL) != LUON_OK) __builtin_trap();
  if (luon_graph_load(sym2, params2, LUON_CPU, 0, &h) != LUON_OK) __builtin_trap();
  if (luon_graph_save(h, sym3, params3, NULL, NULL, NULL) != LUON_OK) __builtin_trap();
  char *a = slurp(sym2), *b = slurp(sym3);
  if (strcmp(a, b) != 0) __builtin_trap();
  free(a);
  free(b);
  if (small(g)) run_on_zeros(g);
  luon_graph_free(h);
  luon_graph_free(g);
  return 0;
}
