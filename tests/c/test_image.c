/* test_image.c: image decode/encode through the public API: every fixture
 * of tests/data (made by tests/data/make_fixtures.lua, whose pixel formulas
 * are repeated here) against known pixels, DCT-scaled sizes, round trips,
 * and each bad file failing with its name and reason. */
#include "luon.h"
#include "testutil.h"
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char data_dir[4096];

static const char *fixture(const char *name) {
  static char path[4][4200];
  static int next;
  char *p = path[next++ & 3];
  snprintf(p, sizeof path[0], "%s/%s", data_dir, name);
  return p;
}

/* ---- the fixture formulas (ORDER make_fixtures.lua) ---------------------- */

enum { PW = 7, PH = 5, JW = 48, JH = 32 };
static void rgb(int x, int y, int v[3]) {
  v[0] = (x * 37 + y * 11) % 256, v[1] = (x * 5 + y * 53 + 100) % 256;
  v[2] = (x * x * 3 + y * 7 + 200) % 256;
}
static int gray(int x, int y) { return (x * 31 + y * 47 + 9) % 256; }
static const int palette[6][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255},
                                  {255, 255, 0}, {0, 0, 0}, {255, 255, 255}};
static int pal_index(int x, int y) { return (x + 2 * y) % 6; }
static void jrgb(int x, int y, int v[3]) { v[0] = 40 + x * 3, v[1] = 60 + y * 4, v[2] = 200 - x * 2 - y; }
static int jgray(int x, int y) { return 30 + x * 2 + y * 3; }
static int gray_of(const int v[3]) { return (9798 * v[0] + 19235 * v[1] + 3735 * v[2] + 16384) >> 15; }

/* Expected pixel (x, y) of a fixture kind, as RGB. */
typedef void (*pixel_fn)(int x, int y, int v[3]);
static void px_gray(int x, int y, int v[3]) { v[0] = v[1] = v[2] = gray(x, y); }
static void px_pal(int x, int y, int v[3]) { memcpy(v, palette[pal_index(x, y)], sizeof(int) * 3); }
static void px_jgray(int x, int y, int v[3]) { v[0] = v[1] = v[2] = jgray(x, y); }

/* ---- helpers ---------------------------------------------------------------- */

static luon_tensor *read_ok(const char *name, int flag, int min_w, int min_h) {
  luon_tensor *t = NULL;
  luon_status s = luon_image_read(fixture(name), flag, min_w, min_h, &t);
  CHECK(s == LUON_OK, "%s flag %d: status %d: %s", name, flag, s, luon_last_error());
  return t;
}

static void check_shape(const char *what, const luon_tensor *t, int h, int w, int c) {
  CHECK(t != NULL, "%s: no tensor", what);
  if (!t) return;
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  CHECK(in.dtype == LUON_DTYPE_U8 && in.ndim == 3 && in.shape[0] == h && in.shape[1] == w &&
        in.shape[2] == c && in.dev_type == LUON_CPU && in.dev_id == 0 && in.contiguous,
        "%s: got dtype %d shape (%lld,%lld,%lld), expected uint8 (%d,%d,%d) on cpu(0)", what,
        in.dtype, (long long)in.shape[0], (long long)in.shape[1], (long long)in.shape[2], h, w, c);
}

/* Compare t (h, w, c) to fn within tol (c == 1: against gray_of / the
 * gray value); returns the largest difference. */
static int compare(const char *what, const luon_tensor *t, int h, int w, int c, pixel_fn fn,
                   int is_gray_source, int tol) {
  check_shape(what, t, h, w, c);
  if (!t) return 999;
  luon_tensor_info in;
  luon_tensor_info_get(t, &in);
  const uint8_t *p = in.data;
  int worst = 0, wx = 0, wy = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int v[3];
      fn(x, y, v);
      for (int k = 0; k < c; k++) {
        int want = c == 3 ? v[k] : is_gray_source ? v[0] : gray_of(v);
        int d = abs((int)p[(y * w + x) * c + k] - want);
        if (d > worst) worst = d, wx = x, wy = y;
      }
    }
  CHECK(worst <= tol, "%s: pixel (%d,%d) off by %d (tolerance %d)", what, wx, wy, worst, tol);
  return worst;
}

static void fails(const char *name, int flag, luon_status want, const char *part) {
  luon_tensor *t = (luon_tensor *)1;
  const char *path = fixture(name);
  luon_status s = luon_image_read(path, flag, 0, 0, &t);
  const char *msg = luon_last_error();
  CHECK(s == want, "%s: status %d, expected %d (%s)", name, s, want, msg);
  CHECK(t == NULL, "%s: out not cleared on failure", name);
  CHECK(strstr(msg, path) != NULL, "%s: message '%s' does not name the file", name, msg);
  CHECK(strstr(msg, part) != NULL, "%s: message '%s' lacks '%s'", name, msg, part);
}

static luon_tensor *pattern(int h, int w, int c, pixel_fn fn) {
  uint8_t *buf = malloc((size_t)h * w * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int v[3];
      fn(x, y, v);
      for (int k = 0; k < c; k++) buf[(y * w + x) * c + k] = (uint8_t)(c == 3 ? v[k] : v[0]);
    }
  int64_t shape[3] = {h, w, c};
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(buf, LUON_DTYPE_U8, 3, shape, LUON_CPU, 0, &t));
  free(buf);
  return t;
}

/* ---- the tests ----------------------------------------------------------------- */

static void test_png(void) {
  struct { const char *file; pixel_fn fn; int gray_src; } cases[] = {
      {"gray8.png", px_gray, 1},  {"gray16.png", px_gray, 1}, {"ga8.png", px_gray, 1},
      {"rgb8.png", rgb, 0},       {"rgb16.png", rgb, 0},      {"rgba8.png", rgb, 0},
      {"palette8.png", px_pal, 0}, {"palette4.png", px_pal, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int flag = 0; flag <= 1; flag++) {
      char what[64];
      snprintf(what, sizeof what, "%s flag %d", cases[i].file, flag);
      luon_tensor *t = read_ok(cases[i].file, flag, 0, 0);
      compare(what, t, PH, PW, flag ? 3 : 1, cases[i].fn, cases[i].gray_src, 0);
      luon_tensor_release(t);
    }
}

static void test_jpeg(void) {
  luon_tensor *t = read_ok("rgb.jpg", 1, 0, 0);
  compare("rgb.jpg flag 1", t, JH, JW, 3, jrgb, 0, 6);
  luon_tensor_release(t);
  t = read_ok("rgb.jpg", 0, 0, 0);
  compare("rgb.jpg flag 0", t, JH, JW, 1, jrgb, 0, 4);
  luon_tensor_release(t);
  t = read_ok("progressive.jpg", 1, 0, 0);
  compare("progressive.jpg", t, JH, JW, 3, jrgb, 0, 6);
  luon_tensor_release(t);
  t = read_ok("gray.jpg", 0, 0, 0);
  compare("gray.jpg flag 0", t, JH, JW, 1, px_jgray, 1, 3);
  luon_tensor_release(t);
  t = read_ok("gray.jpg", 1, 0, 0);
  compare("gray.jpg flag 1", t, JH, JW, 3, px_jgray, 1, 3);
  luon_tensor_release(t);

  /* CMYK (200,100,50,180) | (20,240,160,250) -> RGB by OpenCV's formula */
  t = read_ok("cmyk.jpg", 1, 0, 0);
  check_shape("cmyk.jpg", t, 8, 16, 3);
  if (t) {
    luon_tensor_info in;
    luon_tensor_info_get(t, &in);
    const uint8_t *p = in.data;
    const int want[2][3] = {{142, 72, 36}, {21, 236, 158}};
    for (int half = 0; half < 2; half++) {
      const uint8_t *q = p + (4 * 16 + 2 + 12 * half) * 3; /* (x 2 or 14, y 4) */
      for (int k = 0; k < 3; k++)
        CHECK(abs(q[k] - want[half][k]) <= 6, "cmyk.jpg half %d channel %d: %d, expected %d", half,
              k, q[k], want[half][k]);
    }
  }
  luon_tensor_release(t);
  t = read_ok("cmyk.jpg", 0, 0, 0);
  check_shape("cmyk.jpg gray", t, 8, 16, 1);
  luon_tensor_release(t);
}

static void test_dct_scaling(void) {
  /* rgb.jpg is 48x32: the smallest of 1/8, 1/4, 1/2 that still covers
   * the bound, else 1/1 (never 3/8, 5/8 ...: slower than 1/1). */
  struct { int min_w, min_h, w, h; } cases[] = {
      {10, 10, 24, 16},  /* 1/2 (3/8 would do) */
      {12, 0, 12, 8},    /* 1/4 */
      {0, 17, 48, 32},   /* 1/1 (5/8 would do) */
      {6, 4, 6, 4},      /* 1/8 */
      {48, 32, 48, 32},  /* 1/1 */
      {100, 100, 48, 32} /* never larger than the image */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    luon_tensor *t = read_ok("rgb.jpg", 1, cases[i].min_w, cases[i].min_h);
    char what[64];
    snprintf(what, sizeof what, "rgb.jpg min (%d,%d)", cases[i].min_w, cases[i].min_h);
    check_shape(what, t, cases[i].h, cases[i].w, 3);
    if (t && cases[i].w == 12) { /* 1/4: each pixel is the mean of a 4x4 block */
      luon_tensor_info in;
      luon_tensor_info_get(t, &in);
      const uint8_t *p = in.data;
      int v[3];
      jrgb(4 * 5 + 2, 4 * 3 + 2, v); /* block (5, 3) centred near (21.5, 13.5) */
      for (int k = 0; k < 3; k++)
        CHECK(abs(p[(3 * 12 + 5) * 3 + k] - v[k]) <= 8, "%s: channel %d is %d, expected ~%d", what,
              k, p[(3 * 12 + 5) * 3 + k], v[k]);
    }
    luon_tensor_release(t);
  }
  /* PNGs ignore the bound. */
  luon_tensor *t = read_ok("rgb8.png", 1, 2, 2);
  check_shape("rgb8.png min (2,2)", t, PH, PW, 3);
  luon_tensor_release(t);
}

static void test_bad_files(void) {
  fails("empty.jpg", 1, LUON_EFORMAT, "empty");
  fails("not_image.txt", 1, LUON_EFORMAT, "only JPEG and PNG");
  fails("truncated.jpg", 1, LUON_EFORMAT, "corrupt JPEG");
  fails("truncated.jpg", 0, LUON_EFORMAT, "Premature end");
  fails("12bit.jpg", 1, LUON_EFORMAT, "precision 12");
  fails("huge.jpg", 1, LUON_EFORMAT, "60000x60000");
  fails("huge_side.png", 1, LUON_EFORMAT, "70000x5");
  fails("huge_area.png", 0, LUON_EFORMAT, "40000x40000");
  fails("bad_crc.png", 1, LUON_EFORMAT, "CRC");
  fails("truncated.png", 1, LUON_EFORMAT, "corrupt PNG");
  fails("no_such_file.png", 1, LUON_EIO, "No such file");
  fails(".", 1, LUON_EIO, "not a regular file");
  fails("rgb8.png", 2, LUON_EINVAL, "flag must be 1 (RGB) or 0 (gray)");

  /* In memory: the name given, other formats named, NULL/0 bytes. */
  luon_tensor *t = NULL;
  const char gif[] = "GIF89a\x01\x00\x01\x00";
  CHECK(luon_image_decode(gif, sizeof gif - 1, 1, 0, 0, "cat.gif", &t) == LUON_EFORMAT, "gif");
  CHECK(strstr(luon_last_error(), "cat.gif: a GIF image") != NULL, "%s", luon_last_error());
  CHECK(luon_image_decode(NULL, 0, 1, 0, 0, NULL, &t) == LUON_EFORMAT, "NULL bytes");
  CHECK(strstr(luon_last_error(), "image data: empty") != NULL, "%s", luon_last_error());
  const unsigned char soi[] = {0xFF, 0xD8, 0xFF};
  CHECK(luon_image_decode(soi, 3, 1, 0, 0, "soi", &t) == LUON_EFORMAT, "bare SOI");
  const unsigned char sig[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  CHECK(luon_image_decode(sig, 8, 0, 0, 0, "sig", &t) == LUON_EFORMAT, "bare PNG signature");
  /* SOI then EOI: TurboJPEG's header read "succeeds" without a size */
  const unsigned char soi_eoi[] = {0xFF, 0xD8, 0xFF, 0xD9};
  CHECK(luon_image_decode(soi_eoi, 4, 1, 0, 0, "soieoi", &t) == LUON_EFORMAT &&
            strstr(luon_last_error(), "no image size"),
        "SOI EOI: %s", luon_last_error());
  CHECK(t == NULL, "out set after failures");

  /* a FIFO is refused at once, not waited on for a writer */
  char fifo[64];
  snprintf(fifo, sizeof fifo, "/tmp/luon_test_image_%d.png", (int)getpid());
  unlink(fifo);
  if (mkfifo(fifo, 0600) == 0) {
    CHECK(luon_image_read(fifo, 1, 0, 0, &t) == LUON_EIO && strstr(luon_last_error(), "not a regular file"),
          "FIFO: %s", luon_last_error());
    unlink(fifo);
  }

  /* still usable afterwards */
  t = read_ok("rgb8.png", 1, 0, 0);
  compare("rgb8.png after errors", t, PH, PW, 3, rgb, 0, 0);
  luon_tensor_release(t);
}

static luon_tensor *decode_buf(void *buf, size_t len, int flag) {
  luon_tensor *t = NULL;
  CHECK_OK(luon_image_decode(buf, len, flag, 0, 0, "round trip", &t));
  return t;
}

static void test_encode(void) {
  /* PNG: exact, RGB and gray. */
  luon_tensor *src = pattern(PH, PW, 3, rgb);
  void *buf = NULL;
  size_t len = 0;
  CHECK_OK(luon_image_encode_png(src, &buf, &len));
  luon_tensor *t = decode_buf(buf, len, 1);
  compare("png round trip", t, PH, PW, 3, rgb, 0, 0);
  luon_tensor_release(t);
  luon_free(buf);

  luon_tensor *g = pattern(PH, PW, 1, px_gray);
  CHECK_OK(luon_image_encode_png(g, &buf, &len));
  t = decode_buf(buf, len, 0);
  compare("gray png round trip", t, PH, PW, 1, px_gray, 1, 0);
  luon_tensor_release(t);
  luon_free(buf);

  /* JPEG: within tolerance on smooth content. */
  luon_tensor *js = pattern(JH, JW, 3, jrgb);
  CHECK_OK(luon_image_encode_jpeg(js, 95, &buf, &len));
  CHECK(len > 100 && ((unsigned char *)buf)[0] == 0xFF, "jpeg of %zu bytes", len);
  t = decode_buf(buf, len, 1);
  compare("jpeg round trip", t, JH, JW, 3, jrgb, 0, 8);
  luon_tensor_release(t);
  luon_free(buf);
  luon_tensor *jg = pattern(JH, JW, 1, px_jgray);
  CHECK_OK(luon_image_encode_jpeg(jg, 0, &buf, &len));
  t = decode_buf(buf, len, 0);
  compare("gray jpeg round trip", t, JH, JW, 1, px_jgray, 1, 3);
  luon_tensor_release(t);
  luon_free(buf);

  /* A non-contiguous view: the pattern with H and W swapped by strides. */
  luon_tensor *v = NULL;
  int64_t vshape[3] = {PW, PH, 3}, vstrides[3] = {3, PW * 3, 1};
  CHECK_OK(luon_tensor_view(src, 3, vshape, vstrides, 0, &v));
  CHECK_OK(luon_image_encode_png(v, &buf, &len));
  t = decode_buf(buf, len, 1);
  check_shape("transposed view", t, PW, PH, 3);
  if (t) {
    luon_tensor_info in;
    luon_tensor_info_get(t, &in);
    const uint8_t *p = in.data;
    int bad = 0;
    for (int y = 0; y < PW; y++)
      for (int x = 0; x < PH; x++) {
        int e[3];
        rgb(y, x, e);
        for (int k = 0; k < 3; k++) bad += p[(y * PH + x) * 3 + k] != e[k];
      }
    CHECK(bad == 0, "transposed view: %d wrong values", bad);
  }
  luon_tensor_release(t);
  luon_tensor_release(v);
  luon_free(buf);

  /* Errors: dtype, shape, quality. */
  int64_t fshape[3] = {2, 2, 3};
  luon_tensor *f = NULL;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_F32, 3, fshape, LUON_CPU, 0, &f));
  CHECK(luon_image_encode_png(f, &buf, &len) == LUON_EDTYPE, "float image");
  CHECK(strstr(luon_last_error(), "float32") != NULL, "%s", luon_last_error());
  CHECK(buf == NULL && len == 0, "buffer set on failure");
  luon_tensor_release(f);
  int64_t cshape[3] = {2, 2, 2};
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_U8, 3, cshape, LUON_CPU, 0, &f));
  CHECK(luon_image_encode_jpeg(f, 90, &buf, &len) == LUON_ESHAPE, "2 channels");
  CHECK(strstr(luon_last_error(), "(2,2,2)") != NULL, "%s", luon_last_error());
  luon_tensor_release(f);
  CHECK(luon_image_encode_jpeg(js, 101, &buf, &len) == LUON_EINVAL, "quality 101");

  /* Files: by extension (any case), atomic (no temporaries left). */
  char dir[] = "/tmp/luon_test_image_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char path[256];
  snprintf(path, sizeof path, "%s/a.PNG", dir);
  CHECK_OK(luon_image_write(path, src, 0));
  CHECK_OK(luon_image_read(path, 1, 0, 0, &t));
  compare("a.PNG", t, PH, PW, 3, rgb, 0, 0);
  luon_tensor_release(t);
  CHECK_OK(luon_image_write(path, g, 0)); /* overwrite */
  CHECK_OK(luon_image_read(path, 0, 0, 0, &t));
  compare("a.PNG overwritten", t, PH, PW, 1, px_gray, 1, 0);
  luon_tensor_release(t);
  snprintf(path, sizeof path, "%s/b.jpeg", dir);
  CHECK_OK(luon_image_write(path, js, 90));
  CHECK_OK(luon_image_read(path, 1, 0, 0, &t));
  compare("b.jpeg", t, JH, JW, 3, jrgb, 0, 10);
  luon_tensor_release(t);
  snprintf(path, sizeof path, "%s/c.Jpg", dir);
  CHECK_OK(luon_image_write(path, jg, 90));
  snprintf(path, sizeof path, "%s/d.bmp", dir);
  CHECK(luon_image_write(path, src, 0) == LUON_EINVAL, "bmp");
  CHECK(strstr(luon_last_error(), "d.bmp") != NULL, "%s", luon_last_error());
  snprintf(path, sizeof path, "%s/missing/e.png", dir);
  CHECK(luon_image_write(path, src, 0) == LUON_EIO, "missing dir");
  CHECK(strstr(luon_last_error(), "missing/e.png") != NULL, "%s", luon_last_error());
  int files = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    files++;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  CHECK(files == 3, "%d files in %s, expected a.PNG, b.jpeg, c.Jpg", files, dir);
  rmdir(dir);

  luon_tensor_release(src);
  luon_tensor_release(g);
  luon_tensor_release(js);
  luon_tensor_release(jg);
}

int main(void) {
  const char *env = getenv("LUON_TEST_DATA");
  if (env) {
    snprintf(data_dir, sizeof data_dir, "%s", env);
  } else { /* tests/c/test_image.c -> tests/data */
    snprintf(data_dir, sizeof data_dir, "%s", __FILE__);
    char *slash = strrchr(data_dir, '/');
    if (slash) snprintf(slash, sizeof data_dir - (size_t)(slash - data_dir), "/../data");
    else snprintf(data_dir, sizeof data_dir, "../data");
  }
  luon_tensor *t = NULL;
  if (luon_image_read(fixture("rgb8.png"), 1, 0, 0, &t) == LUON_EUNSUPPORTED) {
    fprintf(stderr, "test_image: skipped: %s\n", luon_last_error());
    return 0;
  }
  luon_tensor_release(t);
  test_png();
  test_jpeg();
  test_dct_scaling();
  test_bad_files();
  test_encode();
  return TEST_RESULT;
}
