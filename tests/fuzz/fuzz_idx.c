/* fuzz_idx.c: libFuzzer target for the IDX reader (MNIST's format, plain
 * or gzip; scripts/fuzz builds and runs it). Each input is written to a
 * file and read, as given and gzip-compressed, so that mutations reach the
 * header checks behind the decompressor as well. What reads must hold as
 * many elements as its header's dimensions say. Errors are fine; crashes
 * and leaks are not. */
#include "luon.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zlib.h>

static char path[64], gzpath[64];

static void read_one(const char *p, const uint8_t *data, size_t size) {
  luon_tensor *t = NULL;
  if (luon_idx_read(p, LUON_CPU, 0, &t) != LUON_OK) return;
  luon_tensor_info info;
  luon_tensor_info_get(t, &info);
  /* the header: 00 00 type ndim, then ndim big-endian uint32 dimensions */
  if (size < 4 || info.ndim != data[3]) __builtin_trap();
  int64_t n = 1;
  for (int d = 0; d < info.ndim; d++) {
    const uint8_t *q = data + 4 + 4 * d;
    int64_t dim = (int64_t)q[0] << 24 | q[1] << 16 | q[2] << 8 | q[3];
    if (info.shape[d] != dim) __builtin_trap();
    n *= dim;
  }
  if (info.size != n) __builtin_trap();
  luon_tensor_release(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!path[0]) {
    snprintf(path, sizeof path, "/tmp/luon-fuzz-idx-%d", (int)getpid());
    snprintf(gzpath, sizeof gzpath, "/tmp/luon-fuzz-idx-%d.gz", (int)getpid());
  }
  FILE *f = fopen(path, "wb");
  if (!f) __builtin_trap();
  if (size && fwrite(data, 1, size, f) != size) __builtin_trap();
  if (fclose(f) != 0) __builtin_trap();
  read_one(path, data, size);
  gzFile g = gzopen(gzpath, "wb1");
  if (!g) __builtin_trap();
  if (size && gzwrite(g, data, (unsigned)size) != (int)size) __builtin_trap();
  if (gzclose(g) != Z_OK) __builtin_trap();
  read_one(gzpath, data, size);
  return 0;
}
