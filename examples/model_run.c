/* model_run.c: run an exported network from C with no Lua (luon_model_*).
 * A Lua program exports a hybridized block once
 *
 *     net:hybridize(); net(x); net:export("leafnet")
 *       -> leafnet-symbol.json (the graph) and leafnet-0000.safetensors
 *
 * and a C host (a game, a robot controller) links libluon alone and runs
 * the files: load once, then each call reads its inputs from host buffers
 * and writes its outputs into host buffers.
 *
 * usage: model_run [--repeat N] [--device cpu|gpu(K)] SYMBOL PARAMS IN.npy... OUT.npy...
 *   one .npy per input of the graph, then one per output (written); with
 *   --repeat N the run is repeated N times and the mean time per run printed. */
#include <luon.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failed(const char *what) {
  fprintf(stderr, "model_run: %s: %s\n", what, luon_last_error());
  return 1;
}

/* bytes of a dtype and shape */
static size_t nbytes(int32_t dtype, int32_t ndim, const int64_t *shape) {
  size_t n = (size_t)luon_dtype_size(dtype);
  for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
  return n;
}

int main(int argc, char **argv) {
  long repeat = 0;
  int32_t dev_type = LUON_CPU, dev_id = 0;
  int a = 1;
  for (; a < argc && argv[a][0] == '-'; a++) {
    if (!strcmp(argv[a], "--repeat") && a + 1 < argc) repeat = atol(argv[++a]);
    else if (!strcmp(argv[a], "--device") && a + 1 < argc && !strcmp(argv[a + 1], "cpu")) a++;
    else if (!strcmp(argv[a], "--device") && a + 1 < argc && sscanf(argv[a + 1], "gpu(%d)", &dev_id) == 1)
      dev_type = LUON_GPU, a++;
    else break;
  }
  if (argc - a < 2 || repeat < 0) {
    fprintf(stderr, "usage: model_run [--repeat N] [--device cpu|gpu(K)] SYMBOL PARAMS IN.npy... OUT.npy...\n");
    return 2;
  }
  luon_model *m;
  if (luon_model_load(argv[a], argv[a + 1], dev_type, dev_id, &m) != LUON_OK) return failed("loading the model");
  luon_graph *g = luon_model_graph(m);
  int32_t nin = luon_graph_num_inputs(g), nout = luon_graph_num_outputs(g);
  char **files = argv + a + 2;
  if (argc - a - 2 != nin + nout) {
    fprintf(stderr, "model_run: %s takes %d inputs and makes %d outputs: give %d .npy files, not %d\n", argv[a],
            nin, nout, nin + nout, argc - a - 2);
    luon_model_free(m);
    return 2;
  }
  void **in = calloc((size_t)nin + 1, sizeof *in), **out = calloc((size_t)nout + 1, sizeof *out);
  int bad = 0;
  for (int32_t k = 0; k < nin && !bad; k++) {
    int32_t dt, nd;
    int64_t shape[8];
    luon_tensor *t;
    luon_graph_io(g, 0, k, &dt, &nd, shape);
    size_t n = nbytes(dt, nd, shape);
    if (luon_npy_load(files[k], LUON_CPU, 0, &t) != LUON_OK) {
      bad = failed(files[k]);
      break;
    }
    luon_tensor_info ti;
    luon_tensor_info_get(t, &ti);
    if (ti.ndim != nd || memcmp(ti.shape, shape, sizeof(int64_t) * (size_t)nd) != 0) {
      fprintf(stderr, "model_run: %s has %d axes of shape (", files[k], (int)ti.ndim);
      for (int d = 0; d < ti.ndim; d++) fprintf(stderr, d ? ",%lld" : "%lld", (long long)ti.shape[d]);
      fprintf(stderr, ") but input %d of the model takes (", (int)k + 1);
      for (int d = 0; d < nd; d++) fprintf(stderr, d ? ",%lld" : "%lld", (long long)shape[d]);
      fprintf(stderr, ")\n");
      luon_tensor_release(t);
      bad = 1;
      break;
    }
    in[k] = malloc(n + 1);
    if (luon_tensor_to_host(t, in[k], dt, n) != LUON_OK) /* the dtype converted, the size checked */
      bad = failed(files[k]);
    luon_tensor_release(t);
  }
  for (int32_t k = 0; k < nout && !bad; k++) {
    int32_t dt, nd;
    int64_t shape[8];
    luon_graph_io(g, 1, k, &dt, &nd, shape);
    out[k] = malloc(nbytes(dt, nd, shape) + 1);
  }
  if (!bad && luon_model_run(m, (const void *const *)in, out) != LUON_OK) bad = failed("run");
  if (!bad && repeat > 0) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long r = 0; r < repeat && !bad; r++)
      if (luon_model_run(m, (const void *const *)in, out) != LUON_OK) bad = failed("run");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / (double)repeat;
    printf("model_run: %.2f us per run (mean of %ld)\n", us, repeat);
  }
  for (int32_t k = 0; k < nout && !bad; k++) {
    int32_t dt, nd;
    int64_t shape[8];
    luon_tensor *t;
    luon_graph_io(g, 1, k, &dt, &nd, shape);
    if (luon_tensor_from_host(out[k], dt, nd, shape, LUON_CPU, 0, &t) != LUON_OK) {
      bad = failed("output");
      break;
    }
    if (luon_npy_save(files[nin + k], t) != LUON_OK) bad = failed(files[nin + k]);
    luon_tensor_release(t);
  }
  for (int32_t k = 0; k < nin; k++) free(in[k]);
  for (int32_t k = 0; k < nout; k++) free(out[k]);
  free(in);
  free(out);
  luon_model_free(m);
  return bad;
}
