/* data.h: what the files of core/data/ share. The data subsystem (image
 * decoding, the vision transforms, the data loader's threads, IDX files) is
 * built on the core and includes its internal.h; the core includes nothing
 * of core/data/. Not installed. */
#ifndef LUON_DATA_H
#define LUON_DATA_H

#include "internal.h"
#include <math.h>
#include <stdlib.h>

/* ---- the transforms' images ------------------------------------------------
 * The transforms are cut in four files: transform.c (the steps' rules, the
 * random draws, validation, the entry points), resample.c (resizing),
 * transform_ref.c (the reference, one step at a time) and transform_fused.c
 * (the fast path, which must give the reference's bytes). */

/* (h, w, c) pixels; HWC rows `rs` elements apart (a crop is a view), or CHW
 * contiguous after ToTensor. dt is U8 or F32; fdt the dtype to hand back. */
typedef struct img {
  int h, w, c;
  int dt, fdt;
  int chw;
  int64_t rs;
  void *data;
  void *owned; /* malloc block to free with the image, or NULL */
} img;

/* A new (h, w, c) image of its own block; who names the step in errors. */
luon_status lu_img_new(img *m, int h, int w, int c, int dt, int chw, int fdt, const char *who);

static inline void img_free(img *m) {
  free(m->owned);
  m->owned = NULL;
}

/* Replace *cur by nxt (freeing cur's buffer unless nxt is a view of it). */
static inline void img_replace(img *cur, img nxt) {
  if (nxt.owned == NULL && cur->owned != NULL) {
    nxt.owned = cur->owned; /* a view keeps its parent's block alive */
  } else if (cur->owned != nxt.owned) {
    free(cur->owned);
  }
  *cur = nxt;
}

static inline img img_view(const img *m, int x0, int y0, int w, int h) {
  img v = *m;
  v.owned = NULL;
  v.w = w;
  v.h = h;
  size_t es = m->dt == LUON_DTYPE_U8 ? 1 : 4;
  v.data = (char *)m->data + ((int64_t)y0 * m->rs + (int64_t)x0 * m->c) * es;
  return v;
}

static inline uint8_t sat_u8(float v) { /* MXNet saturate_cast: clamp, truncate */
  if (!(v > 0.0f)) return 0;
  if (v >= 255.0f) return 255;
  return (uint8_t)v;
}

/* A step kind's Gluon name ("RandomCrop"), for messages. */
const char *lu_tf_name(int32_t kind);

/* ---- randomness: philox keyed by (seed, step), counter by sample --------- */

typedef struct rng {
  uint64_t key, ctr;
  uint32_t buf[4];
  int pos;
} rng;

/* 64 blocks of 4 words per (sample, step): enough for every step's draws. */
static inline void rng_init(rng *r, uint64_t seed, uint64_t sample, int step) {
  r->key = lu_splitmix64(seed ^ lu_splitmix64(0x5eed0000ull + (uint64_t)step));
  r->ctr = sample << 6;
  r->pos = 4;
}

static inline uint32_t rng_u32(rng *r) {
  if (r->pos == 4) {
    lu_philox(r->key, r->ctr++, r->buf);
    r->pos = 0;
  }
  return r->buf[r->pos++];
}

static inline float rng_unit(rng *r) { return lu_u32_to_unit(rng_u32(r)); } /* [0, 1) */
static inline float rng_uniform(rng *r, float a, float b) { return a + (b - a) * rng_unit(r); }
static inline float rng_normal(rng *r) { /* Box-Muller */
  double u1 = ((double)rng_u32(r) + 1.0) / 4294967297.0, u2 = (double)rng_u32(r) / 4294967296.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static inline int rng_int(rng *r, int lo, int hi) { /* inclusive, as Python's random.randint */
  int v = lo + (int)(rng_unit(r) * (float)(hi - lo + 1));
  return v > hi ? hi : v;
}

/* The draws of each random step, shared by the reference and the fused path
 * so both see the same augmentation. `fixed` replaces them in tests. */
bool lu_draw_flip(const luon_transform_step *s, rng *r);
float lu_draw_alpha(const luon_transform_step *s, rng *r, float amount);
/* Jitter: a shuffled order of the four adjustments (0 brightness, 1 contrast,
 * 2 saturation, 3 hue) and each enabled one's alpha, drawn in that order. */
void lu_draw_jitter(const luon_transform_step *s, rng *r, int order[4], float alpha[4]);

/* ---- geometry rules of MXNet (transform.c) -------------------------------- */

/* Resize's output (w, h): keep_ratio makes the short side `width`. */
void lu_resize_dims(const luon_transform_step *s, int w, int h, int *ow, int *oh);
/* Crop rectangle of a crop step on a (w, h) image: x0, y0, cw, ch. The
 * caller resizes the crop to the step's size when they differ. */
void lu_crop_rect(const luon_transform_step *s, int w, int h, rng *r, int rect[4]);

/* ---- resampling, OpenCV's cv::resize conventions (resample.c) ------------- */

/* Region (ox0, oy0, rw, rh) of the resize of `s` to (W, H), written HWC
 * contiguous into dst (s->dt). Equals resizing all of s, then cropping.
 * interp: 0 nearest, 1 bilinear, 2 bicubic, 3 area. */
luon_status lu_resample(const img *s, int W, int H, int interp, int ox0, int oy0, int rw, int rh, void *dst);
/* A new image: all of s resized to (W, H). */
luon_status lu_resize_img(const img *s, int W, int H, int interp, img *out, const char *who);

/* ---- colour, per pixel (MXNet src/operator/image/image_random-inl.h) ------ */

enum { COL_BRIGHTNESS = 0, COL_CONTRAST = 1, COL_SATURATION = 2, COL_HUE = 3, COL_LIGHTING = 4 };

/* Mean gray of an HWC image, from exact per-channel sums (MXNet sums the
 * per-pixel gray in float; the exact sums make the result order-free). */
static inline float gray_mean_of_sums(const double *sum, int c, int64_t npix) {
  if (c == 1) return (float)(sum[0] / (double)npix);
  return (float)((0.299 * sum[0] + 0.587 * sum[1] + 0.114 * sum[2]) / (double)npix);
}

static inline float px_brightness(float v, float alpha) { return v * alpha; }
static inline float px_contrast(float v, float alpha, float beta) { return v * alpha + beta; }
static inline float px_saturation(float v, float gray, float alpha) { return gray * (1 - alpha) + v * alpha; }
static inline float px_to_tensor(float v) { return v / 255.0f; }
static inline float px_normalize(float v, float m, float s) { return (v - m) / s; }

/* ---- the reference, one step at a time (transform_ref.c) ------------------
 * Each replaces *cur by its result; the fused path calls them for the steps
 * it does not fuse. */

luon_status lu_flip_ref(img *cur, bool lr);
luon_status lu_crop_ref(img *cur, const luon_transform_step *s, rng *r);
luon_status lu_to_tensor_ref(img *cur);
luon_status lu_normalize_ref(img *cur, const luon_transform_step *s);
luon_status lu_cast_ref(img *cur, const luon_transform_step *s);
/* One colour adjustment (a COL_ value) of an HWC image. For lighting,
 * a[0..2] are the PCA alphas; for hue a[0] is the shift in turns. */
luon_status lu_color_ref(img *cur, int what, const float *a, const char *who);
/* The colour step s (single or jitter) with its drawn alphas. */
luon_status lu_color_step_ref(img *cur, const luon_transform_step *s, rng *r);
luon_status lu_step_ref(img *cur, const luon_transform_step *s, rng *r);
/* The steps in order on *cur, each with its rng keyed by (seed, step). */
luon_status lu_run_ref(const luon_transform_step *steps, int32_t n, img *cur, uint64_t seed, uint64_t sample);

/* ---- the fused path (transform_fused.c) ----------------------------------- */

/* The steps on `in` (consumed: its block is freed), the result written
 * contiguous into dst (in the working dtype: U8, or F32). Same bytes as
 * lu_run_ref. */
luon_status lu_run_fused(const luon_transform_step *steps, int32_t n, img in, uint64_t seed, uint64_t sample,
                         void *dst);

#endif
