/* fuzz_jpeg.c: libFuzzer target for JPEG decoding (scripts/fuzz builds and
 * runs it). Each input is decoded in RGB and gray, at full size and with a
 * DCT-scaling bound; what decodes is encoded again and decoded back. Any
 * error status is fine; a crash, leak or sanitizer report is not. */
#include "luon.h"
#include <stdint.h>
#include <stddef.h>

static void round_trip(luon_tensor *t) {
  void *buf = NULL;
  size_t len = 0;
  if (luon_image_encode_jpeg(t, 75, &buf, &len) == LUON_OK) {
    luon_tensor *u = NULL;
    if (luon_image_decode(buf, len, 1, 0, 0, "re-encoded", &u) != LUON_OK) __builtin_trap();
    luon_tensor_release(u);
  }
  luon_free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int32_t bounds[][2] = {{0, 0}, {24, 16}, {1, 0}};
  for (int flag = 0; flag <= 1; flag++)
    for (int b = 0; b < 3; b++) {
      luon_tensor *t = NULL;
      if (luon_image_decode(data, size, flag, bounds[b][0], bounds[b][1], "fuzz", &t) == LUON_OK) {
        luon_tensor_info in;
        luon_tensor_info_get(t, &in);
        if (in.size <= (1 << 16)) round_trip(t);
        luon_tensor_release(t);
      }
    }
  return 0;
}
