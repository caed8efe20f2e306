/* fuzz_npy.c: libFuzzer target for the .npy reader (scripts/fuzz builds and
 * runs it). Each input is written to a file and loaded; what loads must
 * also save, and the saved file load again as the same dtype, shape and
 * bytes. Errors are fine; crashes, leaks and a failed round trip are not. */
#include "fuzz_util.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char in_path[64], out_path[64];

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
