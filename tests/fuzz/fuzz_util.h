/* fuzz_util.h: what the file-reader fuzz targets share: writing an input to
 * a file, and comparing two tensors' dtype, shape and bytes. */
#ifndef LUON_FUZZ_UTIL_H
#define LUON_FUZZ_UTIL_H
#include "luon.h"
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

#endif
