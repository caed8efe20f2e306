/* fuzz_safetensors.c: libFuzzer target for the safetensors reader
 * (scripts/fuzz builds and runs it). Each input is written to a file and
 * opened; every tensor it lists is read. What opens must also save: its
 * tensors written back under their names and read again give the same
 * names, dtypes, shapes and bytes. Errors are fine; crashes, leaks and a
 * file that loads but does not survive the round trip are not. */
#include "fuzz_util.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXT 64

static char in_path[64], out_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_path[0]) {
    snprintf(in_path, sizeof in_path, "/tmp/luon-fuzz-st-%d.in", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/luon-fuzz-st-%d.out", (int)getpid());
  }
  write_file(in_path, data, size);
  luon_safetensors *h = NULL;
  if (luon_safetensors_open(in_path, &h) != LUON_OK) return 0;
  int32_t n = luon_safetensors_count(h);
  luon_tensor *t[MAXT] = {0};
  const char *names[MAXT];
  int ok = n <= MAXT;
  for (int32_t i = 0; i < n; i++) {
    int32_t dtype, ndim;
    int64_t shape[8];
    names[i < MAXT ? i : 0] = luon_safetensors_name(h, i);
    if (!luon_safetensors_name(h, i)) __builtin_trap();
    if (luon_safetensors_shape(h, i, &dtype, &ndim, shape) != LUON_OK) __builtin_trap();
    luon_tensor *x = NULL;
    if (luon_safetensors_get(h, i, LUON_CPU, 0, &x) != LUON_OK) {
      ok = 0;
      continue;
    }
    luon_tensor_info info;
    luon_tensor_info_get(x, &info);
    if (info.dtype != dtype || info.ndim != ndim) __builtin_trap();
    if (i < MAXT) t[i] = x;
    else luon_tensor_release(x);
  }
  if (ok && luon_safetensors_save(out_path, n, names, t) == LUON_OK) {
    luon_safetensors *g = NULL;
    if (luon_safetensors_open(out_path, &g) != LUON_OK) __builtin_trap();
    if (luon_safetensors_count(g) != n) __builtin_trap();
    for (int32_t i = 0; i < n; i++) {
      /* the writer sorts by name; find each tensor again by its name */
      int32_t k = 0;
      while (k < n && strcmp(luon_safetensors_name(g, k), names[i]) != 0) k++;
      if (k == n) __builtin_trap();
      luon_tensor *y = NULL;
      if (luon_safetensors_get(g, k, LUON_CPU, 0, &y) != LUON_OK) __builtin_trap();
      if (!same(t[i], y)) __builtin_trap();
      luon_tensor_release(y);
    }
    luon_safetensors_close(g);
  }
  for (int32_t i = 0; i < n && i < MAXT; i++) luon_tensor_release(t[i]);
  luon_safetensors_close(h);
  return 0;
}
