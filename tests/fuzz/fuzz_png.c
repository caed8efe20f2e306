/* fuzz_png.c: libFuzzer target for PNG decoding (scripts/fuzz builds and
 * runs it). Random mutations nearly always break a chunk's CRC, which only
 * tests the CRC check, so each input is decoded as given and again with
 * every chunk's CRC recomputed. What decodes must survive an exact
 * encode/decode round trip. Errors are fine; crashes and leaks are not. */
#include "luon.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void round_trip(luon_tensor *t, int flag) {
  void *buf = NULL;
  size_t len = 0;
  if (luon_image_encode_png(t, &buf, &len) != LUON_OK) __builtin_trap();
  luon_tensor *u = NULL;
  if (luon_image_decode(buf, len, flag, 0, 0, "re-encoded", &u) != LUON_OK) __builtin_trap();
  luon_tensor_info a, b;
  luon_tensor_info_get(t, &a);
  luon_tensor_info_get(u, &b);
  if (a.size != b.size || memcmp(a.data, b.data, (size_t)a.size) != 0) __builtin_trap();
  luon_tensor_release(u);
  luon_free(buf);
}

static void decode_all(const uint8_t *data, size_t size) {
  for (int flag = 0; flag <= 1; flag++) {
    luon_tensor *t = NULL;
    if (luon_image_decode(data, size, flag, 0, 0, "fuzz", &t) == LUON_OK) {
      luon_tensor_info in;
      luon_tensor_info_get(t, &in);
      if (in.size <= (1 << 16)) round_trip(t, flag);
      luon_tensor_release(t);
    }
  }
}

/* Rewrite the CRC of every whole chunk after the 8-byte signature. */
static void fix_crcs(uint8_t *p, size_t n) {
  size_t i = 8;
  while (i + 12 <= n) {
    uint32_t len = (uint32_t)p[i] << 24 | (uint32_t)p[i + 1] << 16 | (uint32_t)p[i + 2] << 8 | p[i + 3];
    if (len > n - i - 12) break;
    uint32_t crc = (uint32_t)crc32(0, p + i + 4, len + 4);
    uint8_t *c = p + i + 8 + len;
    c[0] = (uint8_t)(crc >> 24), c[1] = (uint8_t)(crc >> 16), c[2] = (uint8_t)(crc >> 8), c[3] = (uint8_t)crc;
    i += 12 + (size_t)len;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  decode_all(data, size);
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  fix_crcs(copy, size);
  if (memcmp(copy, data, size) != 0) decode_all(copy, size);
  free(copy);
  return 0;
}
