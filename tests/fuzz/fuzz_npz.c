/* fuzz_npz.c: libFuzzer target for the .npz reader (scripts/fuzz builds and
 * runs it). Each input is written to a file and opened; every entry is
 * read. When all load, they are saved as a new .npz under their names and
 * read again: same names, dtypes, shapes and bytes. Errors are fine;
 * crashes, leaks and a failed round trip are not. */
#include "fuzz_util.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAXT 32

static char in_path[64], out_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!in_path[0]) {
    snprintf(in_path, sizeof in_path, "/tmp/luon-fuzz-npz-%d.in", (int)getpid());
    snprintf(out_path, sizeof out_path, "/tmp/luon-fuzz-npz-%d.npz", (int)getpid());
  }
  write_file(in_path, data, size);
  luon_npz *h = NULL;
  if (luon_npz_open(in_path, &h) != LUON_OK) return 0;
  int32_t n = luon_npz_count(h);
  luon_tensor *t[MAXT] = {0};
  const char *names[MAXT];
  int ok = n <= MAXT;
  for (int32_t i = 0; i < n; i++) {
    if (!luon_npz_name(h, i)) __builtin_trap();
    luon_tensor *x = NULL;
    if (luon_npz_get(h, i, LUON_CPU, 0, &x) != LUON_OK) {
      ok = 0;
      continue;
    }
    if (i < MAXT) {
      t[i] = x;
      names[i] = luon_npz_name(h, i);
    } else {
      luon_tensor_release(x);
    }
  }
  /* names may repeat in a hostile archive (the writer refuses that) */
  for (int32_t i = 0; ok && i < n; i++)
    for (int32_t j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0 || !names[i][0]) ok = 0;
  if (ok && luon_npz_save(out_path, n, names, t, 0) == LUON_OK) {
    luon_npz *g = NULL;
    if (luon_npz_open(out_path, &g) != LUON_OK) __builtin_trap();
    if (luon_npz_count(g) != n) __builtin_trap();
    for (int32_t i = 0; i < n; i++) {
      if (strcmp(luon_npz_name(g, i), names[i]) != 0) __builtin_trap();
      luon_tensor *y = NULL;
      if (luon_npz_get(g, i, LUON_CPU, 0, &y) != LUON_OK) __builtin_trap();
      if (!same(t[i], y)) __builtin_trap();
      luon_tensor_release(y);
    }
    luon_npz_close(g);
  }
  for (int32_t i = 0; i < n && i < MAXT; i++) luon_tensor_release(t[i]);
  luon_npz_close(h);
  return 0;
}
