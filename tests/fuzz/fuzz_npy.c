/* fuzz_npy.c: libFuzzer target for the .npy reader (scripts/fuzz builds and
 * runs it). Each input is written to a file and loaded; what loads must
 * also save, and the saved file load again as the same dtype, shape and
 * bytes. Errors are fine; crashes, leaks and a failed round trip are not. */
#include "luon.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char in_path[64], out_path[64];

static void write_file(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f) __builtin_trap();
  if (size && fwrite(data, 1, size, f) != size) __builtin_trap();
  if (fclose(f) != 0) __builtin_trap();
}

static int same(luon_tensor *a, luon_tensor *b) {
  luon_tensor_info x, y;
  luon_tensor_info_get(a, &x);
  luon_tensor_info_get(b, &y);
  if (x.dtype != y.dtype || x.ndim != y.ndim || x.size != y.size) return 0;
  for (int d = 0; d < x.ndim; d++)
    if (x.shape[d] != y.shape[d]) return 0;
  size_t bytes = (size_t)x.size * (size_t)luon_dtype_size(x.dtype);
  return !bytes || memcmp(x.data, y.data, bytes) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_path[0]) {
    snprintf(in_path, sizeof in_path, "/tmp/luon-fuzz-npy-%d.in", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/luon-fuzz-npy-%d.npy", (int)getpid());
  }
  write_file(in_path, data, size);
  luon_tensor *t = NULL;
  if (luon_npy_load(in_path, LUON_CPU, 0, &t) != LUON_OK) return 0;
  if (luon_npy_save(out_path, t) != LUON_OK) __builtin_trap();
  luon_tensor *u = NULL;
  if (luon_npy_load(out_path, LUON_CPU, 0, &u) != LUON_OK) __builtin_trap();
  if (!same(t, u)) __builtin_trap();
  luon_tensor_release(u);
  luon_tensor_release(t);
  return 0;
}
