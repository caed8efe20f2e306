/* image.c: JPEG (TurboJPEG) and PNG (libpng's simplified API) decoding to
 * HWC uint8 tensors, encoding back, and file read/write. Both libraries
 * report errors by return value here; no setjmp/longjmp of ours.
 * Not here: resizing (resample.c) and the other transforms (transform.c). */
#include "data.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Limits checked on the header, before anything is allocated. */
#define MAX_DIM 65535
#define MAX_BYTES ((int64_t)1 << 30)

void luon_free(void *p) { free(p); }


/* A tensor's bytes as a contiguous host HWC buffer: borrowed when the tensor
 * already is one (*owned NULL), else copied into *owned (free it). */
static luon_status image_pixels(const char *fn, const luon_tensor *t, int *h, int *w, int *c,
                                const uint8_t **px, void **owned) {
  *owned = NULL;
  if (!t) return lu_error(LUON_EINVAL, "%s: NULL tensor", fn);
  if (t->dtype != LUON_DTYPE_U8)
    return lu_error(LUON_EDTYPE,
                    "%s: images are uint8 (H,W,C) arrays, got %s; convert with astype('uint8') "
                    "after scaling to 0..255", fn, luon_dtype_name(t->dtype));
  if (t->ndim != 3 || (t->shape[2] != 1 && t->shape[2] != 3))
    return lu_error(LUON_ESHAPE, "%s: images are (H,W,C) arrays with C = 1 or 3, got shape %s", fn,
                    lu_shape_str(t->ndim, t->shape));
  if (t->shape[0] < 1 || t->shape[1] < 1 || t->shape[0] > MAX_DIM || t->shape[1] > MAX_DIM)
    return lu_error(LUON_ESHAPE, "%s: image height and width must be 1..%d, got shape %s", fn,
                    MAX_DIM, lu_shape_str(t->ndim, t->shape));
  *h = (int)t->shape[0], *w = (int)t->shape[1], *c = (int)t->shape[2];
  if (t->dev.type == LUON_CPU && lu_is_contiguous(t)) {
    LU_TRY(luon_tensor_wait(t));
    *px = lu_data(t);
    return LUON_OK;
  }
  size_t bytes = (size_t)t->size;
  if (!(*owned = malloc(bytes)))
    return lu_error(LUON_ENOMEM, "%s: out of host memory (%zu bytes for the pixels)", fn, bytes);
  luon_status s = luon_tensor_to_host(t, *owned, LUON_DTYPE_U8, bytes);
  if (s != LUON_OK) {
    free(*owned);
    *owned = NULL;
    return s;
  }
  *px = *owned;
  return LUON_OK;
}

#ifdef LUON_IMAGE
#include <png.h>
#include <pthread.h>
#include <turbojpeg.h>

static luon_status check_dims(const char *name, const char *kind, int64_t w, int64_t h, int c) {
  if (w < 1 || h < 1 || w > MAX_DIM || h > MAX_DIM || w * h * c > MAX_BYTES)
    return lu_error(LUON_EFORMAT,
                    "%s: %s of %lldx%lld pixels (width x height) is too large to decode "
                    "(at most %d per side and 2^30 bytes)",
                    name, kind, (long long)w, (long long)h, MAX_DIM);
  return LUON_OK;
}

/* Gray from RGB with libpng's fixed-point 0.299/0.587/0.114 (what OpenCV's
 * imread gets from libpng for IMREAD_GRAYSCALE). */
static inline uint8_t gray_of(unsigned r, unsigned g, unsigned b) {
  return (uint8_t)((9798 * r + 19235 * g + 3735 * b + 16384) >> 15);
}

static luon_status new_image(int h, int w, int c, luon_tensor **out) {
  int64_t shape[3] = {h, w, c};
  return lu_tensor_new(LUON_DTYPE_U8, 3, shape, (lu_device){LUON_CPU, 0}, out);
}

/* ---- JPEG ---------------------------------------------------------------- */

/* One TurboJPEG handle per thread (creating one costs about as much as
 * decoding a thumbnail), destroyed when the thread exits. */
static pthread_key_t tj_key[2];
static pthread_once_t tj_once = PTHREAD_ONCE_INIT;
static void tj_destroy(void *h) { tjDestroy(h); }
static void tj_keys(void) {
  pthread_key_create(&tj_key[0], tj_destroy);
  pthread_key_create(&tj_key[1], tj_destroy);
}

static tjhandle tj_handle(int compress) {
  pthread_once(&tj_once, tj_keys);
  tjhandle h = pthread_getspecific(tj_key[compress]);
  if (!h && (h = compress ? tjInitCompress() : tjInitDecompress()))
    pthread_setspecific(tj_key[compress], h);
  return h;
}

/* "name: what (WxH)" for a message, valid until the next call. */
static const char *context(const char *name, const char *what, int w, int h) {
  static _Thread_local char buf[1280];
  if (w > 0) snprintf(buf, sizeof buf, "%s: %s (%dx%d)", name, what, w, h);
  else snprintf(buf, sizeof buf, "%s: %s", name, what);
  return buf;
}

/* Set the error from the handle's message, then drop the handle: after a
 * failed header read TurboJPEG 2.1 does not reset its state ("two SOI
 * markers" on the next image). */
static luon_status tj_fail(int compress, luon_status s, const char *context) {
  tjhandle tj = pthread_getspecific(tj_key[compress]);
  lu_error(s, "%s: %s", context, tjGetErrorStr2(tj));
  tjDestroy(tj);
  pthread_setspecific(tj_key[compress], NULL);
  return s;
}

/* The smallest DCT scaling factor among 1/8, 1/4, 1/2 whose output is
 * still at least min_w x min_h (a bound <= 0 is no bound); 1/1 when none.
 * The other factors (3/8, 5/8, 3/4, 7/8) are skipped: libjpeg-turbo 2.1
 * has no SIMD for them and they decode 25-40% slower than 1/1. */
static tjscalingfactor pick_scale(int w, int h, int min_w, int min_h) {
  static const tjscalingfactor sf[3] = {{1, 8}, {1, 4}, {1, 2}};
  if (min_w <= 0 && min_h <= 0) return (tjscalingfactor){1, 1};
  for (int i = 0; i < 3; i++)
    if ((min_w <= 0 || TJSCALED(w, sf[i]) >= min_w) && (min_h <= 0 || TJSCALED(h, sf[i]) >= min_h))
      return sf[i];
  return (tjscalingfactor){1, 1};
}

/* Adobe (inverted) CMYK to RGB as OpenCV's imread does: R = K - (255-C)*K/256. */
static void cmyk_to_out(const uint8_t *src, uint8_t *dst, int64_t n, int c) {
  for (int64_t i = 0; i < n; i++, src += 4) {
    unsigned k = src[3];
    unsigned r = k - (((255u - src[0]) * k) >> 8);
    unsigned g = k - (((255u - src[1]) * k) >> 8);
    unsigned b = k - (((255u - src[2]) * k) >> 8);
    if (c == 3) {
      dst[3 * i] = (uint8_t)r, dst[3 * i + 1] = (uint8_t)g, dst[3 * i + 2] = (uint8_t)b;
    } else {
      dst[i] = gray_of(r, g, b);
    }
  }
}

static luon_status decode_jpeg(const uint8_t *p, size_t n, int c, int min_w, int min_h,
                               const char *name, luon_tensor **out) {
  tjhandle tj = tj_handle(0);
  if (!tj) return lu_error(LUON_ENOMEM, "%s: cannot create a TurboJPEG decompressor", name);
  /* zeroed: a stream with no frame header (SOI then EOI) "succeeds" without
   * setting them */
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(tj, p, (unsigned long)n, &w, &h, &subsamp, &cs) != 0)
    return tj_fail(0, LUON_EFORMAT, context(name, "corrupt or unsupported JPEG", 0, 0));
  if (w <= 0 || h <= 0)
    return lu_error(LUON_EFORMAT, "%s: JPEG without a frame header (no image size)",
                    context(name, "corrupt or unsupported JPEG", 0, 0));
  LU_TRY(check_dims(name, "JPEG", w, h, cs == TJCS_CMYK || cs == TJCS_YCCK ? 4 : c));
  tjscalingfactor sf = pick_scale(w, h, min_w, min_h);
  int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
  luon_tensor *t;
  LU_TRY(new_image(sh, sw, c, &t));
  /* A warning (truncated or corrupt entropy data) fails the decode: OpenCV
   * would return a partly gray image instead. */
  int flags = TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS;
  int rc;
  uint8_t *cmyk = NULL;
  if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
    cmyk = malloc((size_t)sw * sh * 4);
    if (!cmyk) {
      luon_tensor_release(t);
      return lu_error(LUON_ENOMEM, "%s: out of host memory for a %dx%d CMYK JPEG", name, sw, sh);
    }
    rc = tjDecompress2(tj, p, (unsigned long)n, cmyk, sw, 0, sh, TJPF_CMYK, flags);
    if (rc == 0) cmyk_to_out(cmyk, lu_data(t), (int64_t)sw * sh, c);
    free(cmyk);
  } else {
    rc = tjDecompress2(tj, p, (unsigned long)n, lu_data(t), sw, 0, sh,
                       c == 3 ? TJPF_RGB : TJPF_GRAY, flags);
  }
  if (rc != 0) {
    luon_tensor_release(t);
    return tj_fail(0, LUON_EFORMAT, context(name, "corrupt JPEG", w, h));
  }
  *out = t;
  return LUON_OK;
}

static luon_status encode_jpeg(const char *fn, const uint8_t *px, int h, int w, int c,
                               int quality, void **buf, size_t *len) {
  if (quality <= 0) quality = 95;
  if (quality > 100)
    return lu_error(LUON_EINVAL, "%s: quality must be 1..100 (0: default 95), got %d", fn, quality);
  tjhandle tj = tj_handle(1);
  if (!tj) return lu_error(LUON_ENOMEM, "%s: cannot create a TurboJPEG compressor", fn);
  int samp = c == 1 ? TJSAMP_GRAY : TJSAMP_420;
  unsigned long cap = tjBufSize(w, h, samp), size = cap;
  unsigned char *mem = cap != (unsigned long)-1 ? malloc(cap) : NULL;
  if (!mem) return lu_error(LUON_ENOMEM, "%s: out of host memory (%lu bytes)", fn, cap);
  if (tjCompress2(tj, px, w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &mem, &size, samp, quality,
                  TJFLAG_NOREALLOC) != 0) {
    free(mem);
    return tj_fail(1, LUON_EINTERNAL, context(fn, "TurboJPEG failed", w, h));
  }
  *buf = mem;
  *len = size;
  return LUON_OK;
}

/* ---- PNG ----------------------------------------------------------------- */

/* libpng reads RGB(A) or gray(+alpha), 8 bits, 16-bit samples taken as sRGB
 * (as OpenCV does, no gamma). Alpha is dropped, not composited, like
 * OpenCV's imread; gray from color uses gray_of. */
static luon_status decode_png(const uint8_t *p, size_t n, int c, const char *name,
                              luon_tensor **out) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, p, n)) {
    luon_status s = lu_error(LUON_EFORMAT, "%s: corrupt PNG: %s", name, im.message);
    png_image_free(&im);
    return s;
  }
  int w = (int)im.width, h = (int)im.height;
  int alpha = (im.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  int color = (im.format & PNG_FORMAT_FLAG_COLOR) != 0;
  int sc = (color || c == 3 ? 3 : 1) + alpha; /* components libpng gives us */
  luon_status s = check_dims(name, "PNG", im.width, im.height, sc);
  if (s != LUON_OK) {
    png_image_free(&im);
    return s;
  }
  im.format = sc == 4 ? PNG_FORMAT_RGBA : sc == 3 ? PNG_FORMAT_RGB
            : sc == 2 ? PNG_FORMAT_GA : PNG_FORMAT_GRAY;
  im.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
  luon_tensor *t;
  s = new_image(h, w, c, &t);
  if (s != LUON_OK) {
    png_image_free(&im);
    return s;
  }
  uint8_t *dst = lu_data(t), *src = dst;
  if (sc != c && !(src = malloc((size_t)w * h * sc))) {
    png_image_free(&im);
    luon_tensor_release(t);
    return lu_error(LUON_ENOMEM, "%s: out of host memory for a %dx%d PNG", name, w, h);
  }
  if (!png_image_finish_read(&im, NULL, src, 0, NULL)) {
    s = lu_error(LUON_EFORMAT, "%s: corrupt PNG (%dx%d): %s", name, w, h, im.message);
    png_image_free(&im);
    if (src != dst) free(src);
    luon_tensor_release(t);
    return s;
  }
  png_image_free(&im);
  if (src != dst) {
    int64_t np = (int64_t)w * h;
    for (int64_t i = 0; i < np; i++) {
      const uint8_t *q = src + i * sc;
      if (c == 1) dst[i] = sc >= 3 ? gray_of(q[0], q[1], q[2]) : q[0];
      else dst[3 * i] = q[0], dst[3 * i + 1] = q[1], dst[3 * i + 2] = q[2];
    }
    free(src);
  }
  *out = t;
  return LUON_OK;
}

static luon_status encode_png(const char *fn, const uint8_t *px, int h, int w, int c,
                              void **buf, size_t *len) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w;
  im.height = (png_uint_32)h;
  im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t cap = PNG_IMAGE_PNG_SIZE_MAX(im), size = cap;
  void *mem = malloc(cap);
  if (!mem) return lu_error(LUON_ENOMEM, "%s: out of host memory (%zu bytes)", fn, (size_t)cap);
  if (!png_image_write_to_memory(&im, mem, &size, 0, px, 0, NULL)) {
    luon_status s = lu_error(LUON_EINTERNAL, "%s: libpng failed: %s", fn, im.message);
    png_image_free(&im);
    free(mem);
    return s;
  }
  *buf = mem;
  *len = size;
  return LUON_OK;
}

#define HAVE_CODECS 1
#else
/* Built without the image libraries (CMake did not define LUON_IMAGE). */
#define HAVE_CODECS 0
static luon_status no_codecs(const char *fn) {
  return lu_error(LUON_EUNSUPPORTED, "%s: this build of luon has no image support "
                  "(configure with libturbojpeg and libpng)", fn);
}
static luon_status decode_jpeg(const uint8_t *p, size_t n, int c, int min_w, int min_h,
                               const char *name, luon_tensor **out) {
  return no_codecs(name);
}
static luon_status decode_png(const uint8_t *p, size_t n, int c, const char *name,
                              luon_tensor **out) {
  return no_codecs(name);
}
static luon_status encode_jpeg(const char *fn, const uint8_t *px, int h, int w, int c,
                               int quality, void **buf, size_t *len) {
  return no_codecs(fn);
}
static luon_status encode_png(const char *fn, const uint8_t *px, int h, int w, int c,
                              void **buf, size_t *len) {
  return no_codecs(fn);
}
#endif

/* ---- the public functions ------------------------------------------------ */

/* Decode for function fn ("imdecode", "imread"); messages start "fn: name: ". */
static luon_status decode(const char *fn, const void *bytes, size_t n, int32_t flag, int32_t min_w,
                          int32_t min_h, const char *name, luon_tensor **out) {
  char who[1024];
  snprintf(who, sizeof who, "%s: %s", fn, name && *name ? name : "image data");
  name = who;
  if (!out) return lu_error(LUON_EINVAL, "%s: NULL out", name);
  *out = NULL;
  if (flag != 0 && flag != 1)
    return lu_error(LUON_EINVAL, "%s: flag must be 1 (RGB) or 0 (gray), got %d", name, flag);
  if (!HAVE_CODECS) return decode_jpeg(NULL, 0, 0, 0, 0, name, out);
  const uint8_t *p = bytes;
  if (!p || n == 0) return lu_error(LUON_EFORMAT, "%s: empty image (0 bytes)", name);
  int c = flag ? 3 : 1;
  if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
    return decode_jpeg(p, n, c, min_w, min_h, name, out);
  if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8)) return decode_png(p, n, c, name, out);
  const char *kind = n >= 4 && (!memcmp(p, "GIF8", 4)) ? "a GIF image"
                   : n >= 2 && !memcmp(p, "BM", 2) ? "a BMP image"
                   : n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4) ? "a WebP image"
                   : n >= 4 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4)) ? "a TIFF image"
                   : "not an image";
  char head[3 * 8 + 1] = "";
  for (size_t i = 0, k = 0; i < n && i < 8; i++)
    k += (size_t)snprintf(head + k, sizeof head - k, i ? " %02x" : "%02x", p[i]);
  return lu_error(LUON_EFORMAT, "%s: %s, only JPEG and PNG are supported (%zu bytes, starting %s)",
                  name, kind, n, head);
}

luon_status luon_image_decode(const void *bytes, size_t n, int32_t flag, int32_t min_w,
                              int32_t min_h, const char *name, luon_tensor **out) {
  return decode("imdecode", bytes, n, flag, min_w, min_h, name, out);
}


luon_status luon_image_read(const char *path, int32_t flag, int32_t min_w, int32_t min_h,
                            luon_tensor **out) {
  if (!out || !path) return lu_error(LUON_EINVAL, "imread: NULL path or out");
  *out = NULL;
  uint8_t *buf = NULL;
  size_t n = 0;
  LU_TRY(lu_read_file("imread", path, 0, &buf, &n));
  luon_status s = decode("imread", buf, n, flag, min_w, min_h, path, out);
  free(buf);
  return s;
}

luon_status luon_image_encode_jpeg(const luon_tensor *t, int32_t quality, void **buf, size_t *len) {
  if (!buf || !len) return lu_error(LUON_EINVAL, "encode_jpeg: NULL buf or len");
  *buf = NULL, *len = 0;
  int h = 0, w = 0, c = 0;
  const uint8_t *px = NULL;
  void *owned;
  LU_TRY(image_pixels("encode_jpeg", t, &h, &w, &c, &px, &owned));
  luon_status s = encode_jpeg("encode_jpeg", px, h, w, c, quality, buf, len);
  free(owned);
  return s;
}

luon_status luon_image_encode_png(const luon_tensor *t, void **buf, size_t *len) {
  if (!buf || !len) return lu_error(LUON_EINVAL, "encode_png: NULL buf or len");
  *buf = NULL, *len = 0;
  int h = 0, w = 0, c = 0;
  const uint8_t *px = NULL;
  void *owned;
  LU_TRY(image_pixels("encode_png", t, &h, &w, &c, &px, &owned));
  luon_status s = encode_png("encode_png", px, h, w, c, buf, len);
  free(owned);
  return s;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

luon_status luon_image_write(const char *path, const luon_tensor *t, int32_t quality) {
  if (!path) return lu_error(LUON_EINVAL, "imwrite: NULL path");
  int jpeg = ends_with(path, ".jpg") || ends_with(path, ".jpeg");
  if (!jpeg && !ends_with(path, ".png"))
    return lu_error(LUON_EINVAL, "imwrite: '%s': the extension must be .jpg, .jpeg or .png", path);
  int h = 0, w = 0, c = 0;
  const uint8_t *px = NULL;
  void *owned, *buf = NULL;
  size_t len = 0;
  LU_TRY(image_pixels("imwrite", t, &h, &w, &c, &px, &owned));
  luon_status s = jpeg ? encode_jpeg("imwrite", px, h, w, c, quality, &buf, &len)
                       : encode_png("imwrite", px, h, w, c, &buf, &len);
  free(owned);
  if (s == LUON_OK) s = lu_wfile_put("imwrite", path, buf, len);
  free(buf);
  return s;
}
