/* test_transform.c: the image transforms of core/data/ (transform*.c,
 * resample.c): hand-computed values on tiny images for every step, OpenCV's
 * bilinear fixed point, the MXNet size rules, the fused path against the
 * step-by-step reference, reproducibility of the random steps, error
 * messages. */
#include "internal.h"
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define U8 LUON_DTYPE_U8
#define F32 LUON_DTYPE_F32

static luon_tensor *mk_u8(int h, int w, int c, const uint8_t *v) {
  luon_tensor *t = NULL;
  int64_t shape[3] = {h, w, c};
  CHECK_OK(luon_tensor_from_host(v, U8, 3, shape, LUON_CPU, 0, &t));
  return t;
}

static luon_tensor *mk_f32(int nd, const int64_t *shape, const float *v) {
  luon_tensor *t = NULL;
  CHECK_OK(luon_tensor_from_host(v, F32, nd, shape, LUON_CPU, 0, &t));
  return t;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
  rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
  return (uint32_t)(rs >> 16);
}

/* A random-ish photo-like uint8 image: gradients plus noise. */
static luon_tensor *photo(int h, int w, int c) {
  uint8_t *v = malloc((size_t)h * w * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int ch = 0; ch < c; ch++) {
        int val = (x * 255 / w + y * 128 / h + ch * 60) % 256 + (int)(rnd() % 21) - 10;
        v[((size_t)y * w + x) * c + ch] = (uint8_t)(val < 0 ? 0 : val > 255 ? 255 : val);
      }
  luon_tensor *t = mk_u8(h, w, c, v);
  free(v);
  return t;
}

static luon_tensor *apply(const luon_transform_step *s, int n, const luon_tensor *img, uint64_t seed,
                          uint64_t idx) {
  luon_tensor *out = NULL;
  CHECK_OK(luon_transform_apply(s, n, img, seed, idx, &out));
  return out;
}

static bool shape_is(const luon_tensor *t, int64_t a, int64_t b, int64_t c) {
  return t && t->ndim == 3 && t->shape[0] == a && t->shape[1] == b && t->shape[2] == c;
}

static bool same_bytes(const luon_tensor *a, const luon_tensor *b) {
  if (!a || !b || a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int k = 0; k < a->ndim; k++)
    if (a->shape[k] != b->shape[k]) return false;
  return memcmp(lu_data(a), lu_data(b), (size_t)a->size * luon_dtype_size(a->dtype)) == 0;
}

static void check_u8(const luon_tensor *t, const uint8_t *want, int n, const char *what) {
  CHECK(t && t->dtype == U8 && t->size == n, "%s: dtype/size", what);
  if (!t || t->size != n) return;
  const uint8_t *p = lu_data(t);
  for (int i = 0; i < n; i++) CHECK(p[i] == want[i], "%s: [%d] = %d, want %d", what, i, p[i], want[i]);
}

static void check_f32(const luon_tensor *t, const float *want, int n, float tol, const char *what) {
  CHECK(t && t->dtype == F32 && t->size == n, "%s: dtype/size", what);
  if (!t || t->size != n) return;
  const float *p = lu_data(t);
  for (int i = 0; i < n; i++)
    CHECK(fabsf(p[i] - want[i]) <= tol, "%s: [%d] = %.7g, want %.7g", what, i, p[i], want[i]);
}

static luon_transform_step step(int kind) {
  luon_transform_step s;
  memset(&s, 0, sizeof s);
  s.kind = kind;
  s.interp = 1;
  return s;
}

/* ---- sizes ------------------------------------------------------------------ */

static void test_resize_sizes(void) {
  luon_transform_step s = step(LUON_TF_RESIZE);
  s.width = s.height = 150, s.keep_ratio = 1;
  int64_t in[3] = {300, 200, 3}, out[3];
  int32_t dt;
  CHECK_OK(luon_transform_out_shape(&s, 1, 3, in, U8, out, &dt));
  CHECK(out[0] == 225 && out[1] == 150 && out[2] == 3 && dt == U8, "(300,200),150 -> (%lld,%lld)",
        (long long)out[0], (long long)out[1]);
  s.width = s.height = 224;
  int64_t in2[3] = {480, 640, 3};
  CHECK_OK(luon_transform_out_shape(&s, 1, 3, in2, U8, out, &dt));
  CHECK(out[0] == 224 && out[1] == 298, "(480,640),224 -> (%lld,%lld)", (long long)out[0], (long long)out[1]);
  /* (W, H) = (200, 100) without keep_ratio */
  s.keep_ratio = 0, s.width = 200, s.height = 100;
  CHECK_OK(luon_transform_out_shape(&s, 1, 3, in, U8, out, &dt));
  CHECK(out[0] == 100 && out[1] == 200, "(200,100) -> (%lld,%lld)", (long long)out[0], (long long)out[1]);
  /* actually resizing gives the same shape */
  luon_tensor *img = photo(300, 200, 3);
  s.keep_ratio = 1, s.width = s.height = 150;
  luon_tensor *r = apply(&s, 1, img, 1, 0);
  CHECK(shape_is(r, 225, 150, 3), "resize shape");
  luon_tensor_release(r);
  luon_tensor_release(img);
}

/* ---- resampling values -------------------------------------------------------- */

static void test_bilinear(void) {
  /* 2x2 -> 4x4, OpenCV: x taps (0|2048,0) (0|1536,512) (0|512,1536) (1|2048,0),
   * horizontal ints, vertical (sum + 2^21) >> 22 (see the hand computation in
   * the comments of resample.c). */
  const uint8_t src[4] = {0, 100, 200, 255};
  const uint8_t want[16] = {0, 25, 75, 100, 50, 72, 117, 139, 150, 167, 200, 216, 200, 214, 241, 255};
  luon_tensor *img = mk_u8(2, 2, 1, src), *out = NULL;
  CHECK_OK(luon_image_resize(img, 4, 4, 1, &out));
  check_u8(out, want, 16, "bilinear u8 2x2->4x4");
  luon_tensor_release(out);
  /* float32: the exact bilinear values */
  const float fsrc[4] = {0, 100, 200, 255};
  const float fwant[16] = {0, 25, 75, 100, 50, 72.1875f, 116.5625f, 138.75f,
                           150, 166.5625f, 199.6875f, 216.25f, 200, 213.75f, 241.25f, 255};
  luon_tensor *fimg = mk_f32(3, (int64_t[]){2, 2, 1}, fsrc);
  CHECK_OK(luon_image_resize(fimg, 4, 4, 1, &out));
  check_f32(out, fwant, 16, 1e-4f, "bilinear f32 2x2->4x4");
  luon_tensor_release(out);
  /* nearest: floor(d * src/dst) */
  const uint8_t nwant[16] = {0, 0, 100, 100, 0, 0, 100, 100, 200, 200, 255, 255, 200, 200, 255, 255};
  CHECK_OK(luon_image_resize(img, 4, 4, 0, &out));
  check_u8(out, nwant, 16, "nearest 2x2->4x4");
  luon_tensor_release(out);
  /* area downscale 4x1 -> 2x1: block means, halves rounded up */
  const uint8_t asrc[4] = {10, 20, 30, 41};
  luon_tensor *aimg = mk_u8(1, 4, 1, asrc);
  CHECK_OK(luon_image_resize(aimg, 2, 1, 3, &out));
  check_u8(out, (const uint8_t[]){15, 36}, 2, "area 4->2");
  luon_tensor_release(out);
  /* bicubic and bilinear keep a constant image constant; bilinear 2x down = mean of 2x2 */
  uint8_t cst[5 * 7 * 3];
  memset(cst, 77, sizeof cst);
  luon_tensor *cimg = mk_u8(5, 7, 3, cst);
  for (int interp = 0; interp < 4; interp++) {
    CHECK_OK(luon_image_resize(cimg, 11, 3, interp, &out));
    bool ok = out && out->size == 11 * 3 * 3;
    for (int64_t i = 0; ok && i < out->size; i++) ok = ((uint8_t *)lu_data(out))[i] == 77;
    CHECK(ok, "interp %d keeps a constant image constant", interp);
    luon_tensor_release(out);
  }
  const uint8_t dsrc[16] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150};
  luon_tensor *dimg = mk_u8(4, 4, 1, dsrc);
  CHECK_OK(luon_image_resize(dimg, 2, 2, 1, &out));
  check_u8(out, (const uint8_t[]){25, 45, 105, 125}, 4, "bilinear 4x4 -> 2x2");
  luon_tensor_release(out);
  /* errors */
  CHECK(luon_image_resize(img, 0, 4, 1, &out) == LUON_EINVAL && strstr(luon_last_error(), "Resize"),
        "size 0: %s", luon_last_error());
  CHECK(luon_image_resize(img, 4, 4, 7, &out) == LUON_EINVAL && strstr(luon_last_error(), "interpolation 7"),
        "interp 7: %s", luon_last_error());
  luon_tensor_release(img), luon_tensor_release(fimg), luon_tensor_release(aimg);
  luon_tensor_release(cimg), luon_tensor_release(dimg);
}

/* ---- crops -------------------------------------------------------------------- */

static void test_crops(void) {
  uint8_t v[20];
  for (int i = 0; i < 20; i++) v[i] = (uint8_t)i;
  luon_tensor *img = mk_u8(4, 5, 1, v); /* H 4, W 5 */
  luon_transform_step s = step(LUON_TF_CENTER_CROP);
  s.width = 3, s.height = 2; /* x0 = (5-3)/2 = 1, y0 = (4-2)/2 = 1 */
  luon_tensor *o = apply(&s, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){6, 7, 8, 11, 12, 13}, 6, "CenterCrop (3,2) of 5x4");
  luon_tensor_release(o);
  /* smaller than the crop: (4,4) on W 5, H 4 -> crop 4x4 at x0 0 (int(0.5)) */
  s.width = s.height = 4;
  o = apply(&s, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 18}, 16, "CenterCrop 4x4");
  luon_tensor_release(o);
  /* legacy small-image rule: W 5, H 4, target (6, 8): scale_down -> w 3 (6*4/8), h 4;
   * x0 = int(1.0) = 1; the 3x4 crop resized (nearest) to 6x8 */
  s.width = 6, s.height = 8, s.interp = 0;
  o = apply(&s, 1, img, 0, 0);
  CHECK(shape_is(o, 8, 6, 1), "small-image CenterCrop shape");
  if (o) {
    const uint8_t *p = lu_data(o);
    bool ok = true;
    for (int y = 0; y < 8; y++)
      for (int x = 0; x < 6; x++) ok = ok && p[y * 6 + x] == v[(y / 2) * 5 + 1 + x / 2];
    CHECK(ok, "small-image CenterCrop values");
  }
  luon_tensor_release(o);
  /* RandomCrop with fixed offset, pad 1: zeros around */
  luon_transform_step rc = step(LUON_TF_RANDOM_CROP);
  rc.width = 3, rc.height = 2, rc.pad = 1, rc.use_fixed = 1;
  o = apply(&rc, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){0, 0, 0, 0, 0, 1}, 6, "RandomCrop pad 1 at (0,0)");
  luon_tensor_release(o);
  rc.fixed[0] = 4, rc.fixed[1] = 3;
  o = apply(&rc, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){13, 14, 0, 18, 19, 0}, 6, "RandomCrop pad 1 at (4,3)");
  luon_tensor_release(o);
  /* RandomCrop offsets cover every position over many samples */
  rc.use_fixed = 0, rc.pad = 0;
  int seen[3][3] = {{0}};
  for (int i = 0; i < 300; i++) {
    o = apply(&rc, 1, img, 5, (uint64_t)i);
    if (o) {
      int first = ((uint8_t *)lu_data(o))[0];
      seen[first / 5][first % 5]++;
    }
    luon_tensor_release(o);
  }
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 3; x++) CHECK(seen[y][x] > 10, "RandomCrop offset (%d,%d) seen %d times", x, y, seen[y][x]);
  /* RandomResizedCrop: a fixed crop, and the fallback to center_crop */
  luon_transform_step rr = step(LUON_TF_RANDOM_RESIZED_CROP);
  rr.width = rr.height = 2, rr.use_fixed = 1;
  rr.scale[0] = 0.08f, rr.scale[1] = 1, rr.ratio[0] = 0.75f, rr.ratio[1] = 4.0f / 3;
  rr.fixed[0] = 1, rr.fixed[1] = 2, rr.fixed[2] = 2, rr.fixed[3] = 2;
  o = apply(&rr, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){11, 12, 16, 17}, 4, "RandomResizedCrop fixed (1,2,2,2)");
  luon_tensor_release(o);
  rr.use_fixed = 0, rr.scale[0] = 2, rr.scale[1] = 3; /* never fits: center crop */
  luon_tensor *o2;
  o = apply(&rr, 1, img, 0, 0);
  s.width = s.height = 2, s.interp = 1;
  o2 = apply(&s, 1, img, 0, 0);
  CHECK(same_bytes(o, o2), "RandomResizedCrop falls back to CenterCrop");
  luon_tensor_release(o), luon_tensor_release(o2);
  /* a real RandomResizedCrop has the asked size */
  rr.scale[0] = 0.08f, rr.scale[1] = 1;
  rr.width = 7, rr.height = 5;
  luon_tensor *big = photo(40, 60, 3);
  o = apply(&rr, 1, big, 3, 9);
  CHECK(shape_is(o, 5, 7, 3), "RandomResizedCrop shape");
  luon_tensor_release(o), luon_tensor_release(big);
  luon_tensor_release(img);
}

/* ---- flips, colour -------------------------------------------------------------- */

static const uint8_t IMG23[18] = {/* 2x3 RGB */ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};

static void test_flips(void) {
  luon_tensor *img = mk_u8(2, 3, 3, IMG23);
  luon_transform_step s = step(LUON_TF_FLIP_LR);
  s.p = 1;
  luon_tensor *o = apply(&s, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){7, 8, 9, 4, 5, 6, 1, 2, 3, 16, 17, 18, 13, 14, 15, 10, 11, 12}, 18, "flip lr p=1");
  luon_tensor_release(o);
  s.p = 0;
  o = apply(&s, 1, img, 0, 0);
  check_u8(o, IMG23, 18, "flip lr p=0");
  luon_tensor_release(o);
  s = step(LUON_TF_FLIP_TB);
  s.p = 1;
  o = apply(&s, 1, img, 0, 0);
  check_u8(o, (const uint8_t[]){10, 11, 12, 13, 14, 15, 16, 17, 18, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 18, "flip tb p=1");
  luon_tensor_release(o);
  /* Bernoulli(p) over many samples, reproducible per (seed, index) */
  s = step(LUON_TF_FLIP_LR);
  s.p = 0.5f;
  int flips = 0, changed = 0;
  for (int i = 0; i < 2000; i++) {
    o = apply(&s, 1, img, 42, (uint64_t)i);
    luon_tensor *again = apply(&s, 1, img, 42, (uint64_t)i);
    CHECK(same_bytes(o, again), "same (seed, index) -> same flip");
    bool f = o && ((uint8_t *)lu_data(o))[0] == 7;
    flips += f;
    if (i > 0) {
      luon_tensor *prev = apply(&s, 1, img, 42, (uint64_t)i - 1);
      changed += !same_bytes(o, prev);
      luon_tensor_release(prev);
    }
    luon_tensor_release(o), luon_tensor_release(again);
  }
  CHECK(flips > 900 && flips < 1100, "p=0.5: %d flips of 2000", flips);
  CHECK(changed > 800 && changed < 1200, "consecutive indices differ %d times of 1999", changed);
  s.p = 0.2f;
  flips = 0;
  for (int i = 0; i < 2000; i++) {
    o = apply(&s, 1, img, 7, (uint64_t)i);
    flips += o && ((uint8_t *)lu_data(o))[0] == 7;
    luon_tensor_release(o);
  }
  CHECK(flips > 330 && flips < 470, "p=0.2: %d flips of 2000", flips);
  luon_tensor_release(img);
}

static luon_tensor *color(int kind, const luon_tensor *img, float a0, float a1, float a2) {
  luon_transform_step s = step(kind);
  s.use_fixed = 1;
  s.fixed[0] = a0, s.fixed[1] = a1, s.fixed[2] = a2;
  s.brightness = s.contrast = s.saturation = s.hue = s.alpha = 0.1f;
  return apply(&s, 1, img, 0, 0);
}

static void test_color(void) {
  luon_tensor *a = mk_u8(1, 3, 1, (const uint8_t[]){100, 200, 51}), *o;
  o = color(LUON_TF_BRIGHTNESS, a, 1.5f, 0, 0);
  check_u8(o, (const uint8_t[]){150, 255, 76}, 3, "brightness 1.5 (76.5 truncates)");
  luon_tensor_release(o), luon_tensor_release(a);
  /* contrast 0.5 on (255,0,0),(0,0,255): gray mean (0.299+0.114)*255/2 = 52.6575 */
  luon_tensor *rb = mk_u8(1, 2, 3, (const uint8_t[]){255, 0, 0, 0, 0, 255});
  o = color(LUON_TF_CONTRAST, rb, 0.5f, 0, 0);
  check_u8(o, (const uint8_t[]){153, 26, 26, 26, 26, 153}, 6, "contrast 0.5");
  luon_tensor_release(o);
  /* saturation 0: the per-pixel gray (76.245 and 29.07, truncated) */
  o = color(LUON_TF_SATURATION, rb, 0.0f, 0, 0);
  check_u8(o, (const uint8_t[]){76, 76, 76, 29, 29, 29}, 6, "saturation 0");
  luon_tensor_release(o);
  /* saturation 0.5 on (10,20,31): gray 18.264 -> 14.132, 19.132, 24.632: truncated */
  luon_tensor *px = mk_u8(1, 1, 3, (const uint8_t[]){10, 20, 31});
  o = color(LUON_TF_SATURATION, px, 0.5f, 0, 0);
  check_u8(o, (const uint8_t[]){14, 19, 24}, 3, "saturation 0.5 truncates");
  luon_tensor_release(o), luon_tensor_release(px);
  /* hue: a third of a turn sends red to green and blue to red */
  o = color(LUON_TF_HUE, rb, 1.0f / 3, 0, 0);
  check_u8(o, (const uint8_t[]){0, 255, 0, 255, 0, 0}, 6, "hue +120 degrees");
  luon_tensor_release(o);
  o = color(LUON_TF_HUE, rb, 1.0f, 0, 0);
  check_u8(o, (const uint8_t[]){255, 0, 0, 0, 0, 255}, 6, "hue a full turn");
  luon_tensor_release(o), luon_tensor_release(rb);
  /* lighting with alphas (1,0,0): + 55.46 * (-0.5675, -0.5808, -0.5836) */
  luon_tensor *g = mk_f32(3, (int64_t[]){1, 1, 3}, (const float[]){100, 100, 100});
  o = color(LUON_TF_LIGHTING, g, 1, 0, 0);
  check_f32(o, (const float[]){68.52645f, 67.788832f, 67.633544f}, 3, 1e-3f, "lighting f32");
  luon_tensor_release(o), luon_tensor_release(g);
  luon_tensor *gu = mk_u8(1, 1, 3, (const uint8_t[]){100, 100, 100});
  o = color(LUON_TF_LIGHTING, gu, 1, 0, 0);
  check_u8(o, (const uint8_t[]){68, 67, 67}, 3, "lighting u8");
  luon_tensor_release(o), luon_tensor_release(gu);
  /* jitter with fixed alphas applies b, c, s, h in that order */
  luon_tensor *img = photo(6, 5, 3);
  luon_transform_step j = step(LUON_TF_COLOR_JITTER);
  j.brightness = j.contrast = j.saturation = j.hue = 0.3f;
  j.use_fixed = 1;
  j.fixed[0] = 1.2f, j.fixed[1] = 0.8f, j.fixed[2] = 1.1f, j.fixed[3] = 0.05f;
  luon_transform_step seq[4] = {step(LUON_TF_BRIGHTNESS), step(LUON_TF_CONTRAST), step(LUON_TF_SATURATION),
                                step(LUON_TF_HUE)};
  for (int k = 0; k < 4; k++) seq[k].use_fixed = 1, seq[k].fixed[0] = j.fixed[k];
  luon_tensor *oj = apply(&j, 1, img, 0, 0), *os = apply(seq, 4, img, 0, 0);
  CHECK(same_bytes(oj, os), "jitter with fixed alphas == the four steps");
  luon_tensor_release(oj), luon_tensor_release(os);
  /* random jitter: alphas in range; only contrast enabled keeps gray mean ordering */
  luon_transform_step c = step(LUON_TF_COLOR_JITTER);
  c.contrast = 0.05f;
  oj = apply(&c, 1, img, 1, 2);
  CHECK(oj && shape_is(oj, 6, 5, 3), "jitter shape");
  luon_tensor_release(oj), luon_tensor_release(img);
}

/* ---- ToTensor, Normalize, Cast, Compose order ------------------------------------------ */

static void test_tensor_steps(void) {
  luon_tensor *img = mk_u8(1, 2, 3, (const uint8_t[]){0, 51, 255, 102, 153, 204});
  luon_transform_step t = step(LUON_TF_TO_TENSOR);
  luon_tensor *o = apply(&t, 1, img, 0, 0);
  CHECK(shape_is(o, 3, 1, 2), "ToTensor shape (3,1,2)");
  check_f32(o, (const float[]){0, 102 / 255.0f, 51 / 255.0f, 153 / 255.0f, 1.0f, 204 / 255.0f}, 6, 0,
            "ToTensor /255 exact, CHW");
  if (o) CHECK(((float *)lu_data(o))[4] == 1.0f, "255 -> exactly 1");
  luon_tensor_release(o);
  /* Normalize(mean (0,1,2), std (3,2,1)) on a (3,1,2) tensor */
  luon_transform_step n = step(LUON_TF_NORMALIZE);
  n.nmean = n.nstd = 3;
  n.mean[0] = 0, n.mean[1] = 1, n.mean[2] = 2, n.std[0] = 3, n.std[1] = 2, n.std[2] = 1;
  luon_tensor *chw = mk_f32(3, (int64_t[]){3, 1, 2}, (const float[]){3, 6, 3, 5, 2, 7});
  o = apply(&n, 1, chw, 0, 0);
  check_f32(o, (const float[]){1, 2, 1, 2, 0, 5}, 6, 1e-6f, "Normalize");
  luon_tensor_release(o);
  /* ToTensor then Normalize, broadcast scalar mean/std */
  luon_transform_step tn[2] = {step(LUON_TF_TO_TENSOR), step(LUON_TF_NORMALIZE)};
  tn[1].nmean = tn[1].nstd = 1, tn[1].mean[0] = 0.5f, tn[1].std[0] = 0.5f;
  o = apply(tn, 2, img, 0, 0);
  check_f32(o, (const float[]){-1, 102 / 255.0f * 2 - 1, 51 / 255.0f * 2 - 1, 153 / 255.0f * 2 - 1, 1,
                               204 / 255.0f * 2 - 1}, 6, 1e-6f, "ToTensor+Normalize");
  luon_tensor_release(o);
  /* errors name the transform and the value */
  n.nmean = 2;
  CHECK(luon_transform_apply(&n, 1, chw, 0, 0, &o) == LUON_EINVAL &&
            strstr(luon_last_error(), "Normalize: 2 mean values") && strstr(luon_last_error(), "3 channels"),
        "2 means: %s", luon_last_error());
  CHECK(o == NULL, "nothing returned on error");
  luon_transform_step bad[2] = {step(LUON_TF_TO_TENSOR), step(LUON_TF_FLIP_LR)};
  CHECK(luon_transform_apply(bad, 2, img, 0, 0, &o) == LUON_ESHAPE &&
            strstr(luon_last_error(), "RandomFlipLeftRight"), "flip after ToTensor: %s", luon_last_error());
  luon_transform_step nn = step(LUON_TF_TO_TENSOR);
  luon_tensor *two = mk_f32(2, (int64_t[]){2, 3}, (const float[]){1, 2, 3, 4, 5, 6});
  CHECK(luon_transform_apply(&nn, 1, two, 0, 0, &o) == LUON_ESHAPE && strstr(luon_last_error(), "(2,3)"),
        "2-d input: %s", luon_last_error());
  luon_transform_step r = step(LUON_TF_RESIZE);
  r.width = -150, r.height = -150;
  CHECK(luon_transform_apply(&r, 1, img, 0, 0, &o) == LUON_EINVAL && strstr(luon_last_error(), "Resize") &&
            strstr(luon_last_error(), "-150"), "Resize(-150): %s", luon_last_error());
  /* Cast */
  luon_transform_step cs = step(LUON_TF_CAST);
  cs.dtype = LUON_DTYPE_F64;
  o = apply(&cs, 1, img, 0, 0);
  CHECK(o && o->dtype == LUON_DTYPE_F64 && ((double *)lu_data(o))[5] == 204.0, "Cast float64");
  luon_tensor_release(o);
  /* Compose order: flip then crop != crop then flip */
  luon_tensor *row = mk_u8(1, 3, 1, (const uint8_t[]){1, 2, 3});
  luon_transform_step fc[2] = {step(LUON_TF_FLIP_LR), step(LUON_TF_CENTER_CROP)};
  fc[0].p = 1, fc[1].width = 2, fc[1].height = 1;
  o = apply(fc, 2, row, 0, 0);
  check_u8(o, (const uint8_t[]){3, 2}, 2, "flip then crop");
  luon_tensor_release(o);
  luon_transform_step cf[2] = {fc[1], fc[0]};
  o = apply(cf, 2, row, 0, 0);
  check_u8(o, (const uint8_t[]){2, 1}, 2, "crop then flip");
  luon_tensor_release(o);
  /* 4-d batches: each sample through the pipeline */
  luon_tensor *batch = NULL;
  uint8_t bv[2 * 18];
  memcpy(bv, IMG23, 18), memcpy(bv + 18, IMG23, 18);
  CHECK_OK(luon_tensor_from_host(bv, U8, 4, (int64_t[]){2, 2, 3, 3}, LUON_CPU, 0, &batch));
  o = apply(&t, 1, batch, 0, 0);
  CHECK(o && o->ndim == 4 && o->shape[0] == 2 && o->shape[1] == 3 && o->shape[2] == 2, "ToTensor NHWC -> NCHW");
  if (o) CHECK(((float *)lu_data(o))[18 + 6] == 2 / 255.0f, "second sample channel 1");
  luon_tensor_release(o), luon_tensor_release(batch);
  luon_tensor_release(row), luon_tensor_release(two), luon_tensor_release(chw), luon_tensor_release(img);
}

/* ---- fused == reference; into/raw; reproducibility ---------------------------------- */

static luon_transform_step tut[6];

static void tutorial_steps(void) {
  tut[0] = step(LUON_TF_RESIZE), tut[0].width = tut[0].height = 224, tut[0].keep_ratio = 1;
  tut[1] = step(LUON_TF_CENTER_CROP), tut[1].width = tut[1].height = 128;
  tut[2] = step(LUON_TF_FLIP_LR), tut[2].p = 0.5f;
  tut[3] = step(LUON_TF_COLOR_JITTER), tut[3].contrast = 0.05f;
  tut[4] = step(LUON_TF_TO_TENSOR);
  tut[5] = step(LUON_TF_NORMALIZE), tut[5].nmean = tut[5].nstd = 3;
  const float m[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
  memcpy(tut[5].mean, m, sizeof m), memcpy(tut[5].std, sd, sizeof sd);
}

static void compare(const luon_transform_step *s, int n, const luon_tensor *img, uint64_t seed, uint64_t idx,
                    const char *what) {
  luon_tensor *a = NULL, *b = NULL;
  luon_status sa = luon_transform_apply(s, n, img, seed, idx, &a);
  luon_status sb = luon_transform_apply_reference(s, n, img, seed, idx, &b);
  CHECK(sa == sb, "%s: statuses %d vs %d (%s)", what, sa, sb, luon_last_error());
  if (sa == LUON_OK && sb == LUON_OK) {
    bool eq = same_bytes(a, b);
    if (!eq && a && b && a->size == b->size && a->dtype == F32) {
      float md = 0;
      for (int64_t i = 0; i < a->size; i++) md = fmaxf(md, fabsf(((float *)lu_data(a))[i] - ((float *)lu_data(b))[i]));
      CHECK(eq, "%s: fused != reference (seed %llu, index %llu), max diff %g", what, (unsigned long long)seed,
            (unsigned long long)idx, md);
    } else {
      CHECK(eq, "%s: fused != reference (seed %llu, index %llu)", what, (unsigned long long)seed,
            (unsigned long long)idx);
    }
  }
  luon_tensor_release(a), luon_tensor_release(b);
}

static void test_fused(void) {
  tutorial_steps();
  luon_tensor *imgs[5] = {photo(375, 500, 3), photo(500, 375, 3), photo(100, 90, 3), photo(61, 333, 1),
                          photo(130, 129, 3)};
  for (int i = 0; i < 5; i++)
    for (uint64_t idx = 0; idx < 6; idx++) {
      compare(tut, 6, imgs[i], 11, idx, "tutorial train");
      compare(tut, 2, imgs[i], 11, idx, "resize+crop");
      luon_transform_step val[4] = {tut[0], tut[1], tut[4], tut[5]};
      compare(val, 4, imgs[i], 11, idx, "tutorial validation");
    }
  /* everything at once, several orders and interpolations */
  luon_transform_step all[9];
  all[0] = step(LUON_TF_RANDOM_RESIZED_CROP), all[0].width = 64, all[0].height = 48;
  all[0].scale[0] = 0.08f, all[0].scale[1] = 1, all[0].ratio[0] = 0.75f, all[0].ratio[1] = 4.0f / 3;
  all[1] = step(LUON_TF_FLIP_TB), all[1].p = 0.5f;
  all[2] = step(LUON_TF_COLOR_JITTER);
  all[2].brightness = all[2].contrast = all[2].saturation = all[2].hue = 0.4f;
  all[3] = step(LUON_TF_BRIGHTNESS), all[3].brightness = 0.3f;
  all[4] = step(LUON_TF_CONTRAST), all[4].contrast = 0.3f;
  all[5] = step(LUON_TF_FLIP_LR), all[5].p = 0.5f;
  all[6] = step(LUON_TF_LIGHTING), all[6].alpha = 0.1f;
  all[7] = step(LUON_TF_TO_TENSOR);
  all[8] = tut[5];
  for (int interp = 0; interp < 4; interp++) {
    all[0].interp = interp;
    for (uint64_t idx = 0; idx < 8; idx++) {
      compare(all, 9, imgs[(idx + interp) % 5 == 3 ? 0 : (idx + interp) % 5], 3, idx, "all steps");
      compare(all, 6, imgs[idx % 5], 3, idx, "all steps, no tensor");
    }
  }
  luon_transform_step mix[6] = {step(LUON_TF_RANDOM_CROP), step(LUON_TF_RESIZE), step(LUON_TF_CENTER_CROP),
                                step(LUON_TF_CONTRAST), step(LUON_TF_RANDOM_CROP), step(LUON_TF_TO_TENSOR)};
  mix[0].width = 80, mix[0].height = 60, mix[0].pad = 4;
  mix[1].width = mix[1].height = 50, mix[1].keep_ratio = 1, mix[1].interp = 2;
  mix[2].width = 200, mix[2].height = 40; /* larger than the image: small-image rule */
  mix[3].contrast = 0.5f;
  mix[4].width = 30, mix[4].height = 20;
  for (uint64_t idx = 0; idx < 10; idx++) compare(mix, 6, imgs[idx % 5], 9, idx, "crop/resize mix");
  /* float input */
  float *fv = malloc(sizeof(float) * 40 * 30 * 3);
  for (int i = 0; i < 40 * 30 * 3; i++) fv[i] = (float)(rnd() % 256);
  luon_tensor *fimg = mk_f32(3, (int64_t[]){40, 30, 3}, fv);
  free(fv);
  for (uint64_t idx = 0; idx < 5; idx++) {
    compare(all, 9, fimg, 1, idx, "float input");
    compare(tut, 6, fimg, 1, idx, "float input tutorial");
  }
  /* apply_into / apply_raw give the same bytes */
  luon_tensor *ref = apply(tut, 6, imgs[0], 77, 5);
  float *buf = malloc(sizeof(float) * 3 * 128 * 128);
  CHECK_OK(luon_transform_apply_into(tut, 6, imgs[0], 77, 5, buf, (int64_t)sizeof(float) * 3 * 128 * 128));
  CHECK(ref && memcmp(buf, lu_data(ref), sizeof(float) * 3 * 128 * 128) == 0, "apply_into == apply");
  memset(buf, 0, sizeof(float) * 3 * 128 * 128);
  CHECK_OK(luon_transform_apply_raw(tut, 6, lu_data(imgs[0]), U8, 375, 500, 3, 0, 77, 5, buf,
                                    (int64_t)sizeof(float) * 3 * 128 * 128));
  CHECK(ref && memcmp(buf, lu_data(ref), sizeof(float) * 3 * 128 * 128) == 0, "apply_raw == apply");
  CHECK(luon_transform_apply_into(tut, 6, imgs[0], 77, 5, buf, 100) == LUON_EINVAL &&
            strstr(luon_last_error(), "196608"), "wrong dst size: %s", luon_last_error());
  free(buf);
  /* reproducible: same (seed, index) same output; the global seed draws repeat */
  luon_tensor *again = apply(tut, 6, imgs[0], 77, 5);
  CHECK(same_bytes(ref, again), "same (seed, index) -> same output");
  luon_tensor_release(again), luon_tensor_release(ref);
  uint64_t s1, s2, s3;
  luon_random_seed(123);
  luon_transform_next_seed(&s1), luon_transform_next_seed(&s2);
  luon_random_seed(123);
  luon_transform_next_seed(&s3);
  CHECK(s1 == s3 && s1 != s2, "next_seed follows luon_random_seed");
  CHECK(luon_transform_is_random(tut, 6) == 1 && luon_transform_is_random(tut, 2) == 0, "is_random");
  for (int i = 0; i < 5; i++) luon_tensor_release(imgs[i]);
  luon_tensor_release(fimg);
}

int main(void) {
  test_resize_sizes();
  test_bilinear();
  test_crops();
  test_flips();
  test_color();
  test_tensor_steps();
  test_fused();
  return TEST_RESULT;
}
