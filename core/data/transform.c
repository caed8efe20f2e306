/* transform.c: Gluon's vision transforms as a C pipeline over one image
 * (HWC uint8/float32 in; CHW float32 after ToTensor) and OpenCV-convention
 * resizing. Not an op: no tape, no devices; the data loader calls it per sample.
 *
 * Each step has a naive reference (`..._ref`, one step at a time, a buffer
 * per step). The fast path (`fused`) gives the same bytes: a Resize followed
 * by a crop resamples only the kept region; flips, brightness/contrast (as a
 * per-channel uint8 lookup table), ToTensor and Normalize become one write. */
#include "data.h"
#include <math.h>
#include <stdlib.h>

/* ---- images ------------------------------------------------------------ */

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

static void img_free(img *m) {
  free(m->owned);
  m->owned = NULL;
}

static luon_status img_new(img *m, int h, int w, int c, int dt, int chw, int fdt, const char *who) {
  size_t bytes = (size_t)h * w * c * (dt == LUON_DTYPE_U8 ? 1 : 4);
  void *p = malloc(bytes ? bytes : 1);
  if (!p) return lu_error(LUON_ENOMEM, "%s: out of memory for a %dx%dx%d image", who, h, w, c);
  *m = (img){h, w, c, dt, fdt, chw, chw ? (int64_t)w : (int64_t)w * c, p, p};
  return LUON_OK;
}

/* Replace *cur by nxt (freeing cur's buffer unless nxt is a view of it). */
static void img_replace(img *cur, img nxt) {
  if (nxt.owned == NULL && cur->owned != NULL) {
    nxt.owned = cur->owned; /* a view keeps its parent's block alive */
  } else if (cur->owned != nxt.owned) {
    free(cur->owned);
  }
  *cur = nxt;
}

static img img_view(const img *m, int x0, int y0, int w, int h) {
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

static const char *kind_name(int32_t k) {
  switch (k) {
  case LUON_TF_CAST: return "Cast";
  case LUON_TF_TO_TENSOR: return "ToTensor";
  case LUON_TF_NORMALIZE: return "Normalize";
  case LUON_TF_RESIZE: return "Resize";
  case LUON_TF_CENTER_CROP: return "CenterCrop";
  case LUON_TF_RANDOM_CROP: return "RandomCrop";
  case LUON_TF_RANDOM_RESIZED_CROP: return "RandomResizedCrop";
  case LUON_TF_FLIP_LR: return "RandomFlipLeftRight";
  case LUON_TF_FLIP_TB: return "RandomFlipTopBottom";
  case LUON_TF_BRIGHTNESS: return "RandomBrightness";
  case LUON_TF_CONTRAST: return "RandomContrast";
  case LUON_TF_SATURATION: return "RandomSaturation";
  case LUON_TF_HUE: return "RandomHue";
  case LUON_TF_COLOR_JITTER: return "RandomColorJitter";
  case LUON_TF_LIGHTING: return "RandomLighting";
  default: return "transform";
  }
}

/* ---- randomness: philox keyed by (seed, step), counter by sample --------- */

typedef struct rng {
  uint64_t key, ctr;
  uint32_t buf[4];
  int pos;
} rng;


/* 64 blocks of 4 words per (sample, step): enough for every step's draws. */
static void rng_init(rng *r, uint64_t seed, uint64_t sample, int step) {
  r->key = lu_splitmix64(seed ^ lu_splitmix64(0x5eed0000ull + (uint64_t)step));
  r->ctr = sample << 6;
  r->pos = 4;
}

static uint32_t rng_u32(rng *r) {
  if (r->pos == 4) {
    lu_philox(r->key, r->ctr++, r->buf);
    r->pos = 0;
  }
  return r->buf[r->pos++];
}

static float rng_unit(rng *r) { return lu_u32_to_unit(rng_u32(r)); } /* [0, 1) */
static float rng_uniform(rng *r, float a, float b) { return a + (b - a) * rng_unit(r); }
static float rng_normal(rng *r) { /* Box-Muller */
  double u1 = ((double)rng_u32(r) + 1.0) / 4294967297.0, u2 = (double)rng_u32(r) / 4294967296.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
static int rng_int(rng *r, int lo, int hi) { /* inclusive, as Python's random.randint */
  int v = lo + (int)(rng_unit(r) * (float)(hi - lo + 1));
  return v > hi ? hi : v;
}

/* The draws of each random step, shared by the reference and the fused path
 * so both see the same augmentation. `fixed` replaces them in tests. */
static bool draw_flip(const luon_transform_step *s, rng *r) {
  if (s->use_fixed) return s->fixed[0] != 0.0f;
  if (s->p <= 0.0f) return false;
  if (s->p >= 1.0f) return true;
  return rng_unit(r) < s->p;
}

static float draw_alpha(const luon_transform_step *s, rng *r, float amount) {
  if (s->use_fixed) return s->fixed[0];
  float lo = 1.0f - amount;
  return rng_uniform(r, lo > 0.0f ? lo : 0.0f, 1.0f + amount);
}

/* Jitter: a shuffled order of the four adjustments (0 brightness, 1 contrast,
 * 2 saturation, 3 hue) and each enabled one's alpha, drawn in that order. */
static void draw_jitter(const luon_transform_step *s, rng *r, int order[4], float alpha[4]) {
  const float amt[4] = {s->brightness, s->contrast, s->saturation, s->hue};
  for (int k = 0; k < 4; k++) order[k] = k;
  if (s->use_fixed) {
    for (int k = 0; k < 4; k++) alpha[k] = s->fixed[k];
    return;
  }
  for (int k = 3; k > 0; k--) {
    int j = rng_int(r, 0, k);
    int t = order[k];
    order[k] = order[j];
    order[j] = t;
  }
  for (int k = 0; k < 4; k++) {
    int a = order[k];
    if (amt[a] > 0.0f) alpha[a] = (a == 3 ? 0.0f : 1.0f) + rng_uniform(r, -amt[a], amt[a]);
    else alpha[a] = a == 3 ? 0.0f : 1.0f;
  }
}

/* ---- resampling (OpenCV cv::resize conventions) --------------------------
 * Separable: per output column/row a few source taps and weights. Bilinear
 * and bicubic on uint8 use OpenCV's 11-bit fixed-point weights, an int
 * horizontal pass and a rounded >>22 vertical pass (OpenCV's scalar form; its
 * SSE path rounds in two steps and can differ by 1 on rare pixels). Area on
 * uint8 accumulates in float and rounds half up. */

enum { RS_NEAREST = 0, RS_LINEAR = 1, RS_CUBIC = 2, RS_AREA = 3, RS_LINEAR_AREA = 4 };
#define COEF_BITS 11
#define COEF_SCALE (1 << COEF_BITS)

typedef struct tab {
  int n, ks;
  int *ofs;      /* n*ks source indices (clamped) */
  float *wf;     /* n*ks weights */
  int16_t *wi;   /* n*ks fixed-point weights (uint8 linear/cubic) */
} tab;

static void tab_free(tab *t) {
  free(t->ofs);
  free(t->wf);
  free(t->wi);
}

static void cubic_coefs(float x, float c[4]) {
  const float A = -0.75f;
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = 1.f - c[0] - c[1] - c[2];
}

/* Taps for outputs d0 .. d0+n-1 of a resize from ssize to dsize. */
static luon_status tab_build(tab *t, int ssize, int dsize, int d0, int n, int mode) {
  double scale = (double)ssize / dsize, inv = (double)dsize / ssize;
  int ks = mode == RS_NEAREST ? 1 : mode == RS_CUBIC ? 4 : mode == RS_AREA ? (int)ceil(scale) + 1 : 2;
  t->n = n;
  t->ks = ks;
  t->ofs = malloc(sizeof(int) * (size_t)n * ks + 1);
  t->wf = malloc(sizeof(float) * (size_t)n * ks + 1);
  t->wi = malloc(sizeof(int16_t) * (size_t)n * ks + 1);
  if (!t->ofs || !t->wf || !t->wi) {
    tab_free(t);
    return lu_error(LUON_ENOMEM, "resize: out of memory for the tap tables");
  }
  for (int i = 0; i < n; i++) {
    int d = d0 + i, *o = t->ofs + (size_t)i * ks;
    float *w = t->wf + (size_t)i * ks;
    if (mode == RS_NEAREST) {
      int sx = (int)floor(d * scale);
      o[0] = sx < ssize - 1 ? sx : ssize - 1;
      w[0] = 1.0f;
    } else if (mode == RS_AREA) {
      double fs1 = d * scale, fs2 = fs1 + scale;
      double cell = scale < ssize - fs1 ? scale : ssize - fs1;
      int s1 = (int)ceil(fs1), s2 = (int)floor(fs2), k = 0;
      if (s2 > ssize - 1) s2 = ssize - 1;
      if (s1 > s2) s1 = s2;
      if (s1 - fs1 > 1e-3) { o[k] = s1 - 1; w[k++] = (float)((s1 - fs1) / cell); }
      for (int s = s1; s < s2; s++) { o[k] = s; w[k++] = (float)(1.0 / cell); }
      if (fs2 - s2 > 1e-3) {
        double a = fs2 - s2 < 1.0 ? fs2 - s2 : 1.0;
        if (a > cell) a = cell;
        o[k] = s2;
        w[k++] = (float)(a / cell);
      }
      for (int last = k ? o[k - 1] : s1; k < ks; k++) { o[k] = last; w[k] = 0.0f; }
    } else {
      float fx;
      int sx;
      if (mode == RS_LINEAR_AREA) {
        sx = (int)floor(d * scale);
        fx = (float)((d + 1) - (sx + 1) * inv);
        fx = fx <= 0 ? 0.f : fx - floorf(fx);
      } else {
        fx = (float)((d + 0.5) * scale - 0.5);
        sx = (int)floorf(fx);
        fx -= sx;
      }
      if (mode == RS_CUBIC) {
        cubic_coefs(fx, w);
        for (int k = 0; k < 4; k++) {
          int s = sx - 1 + k;
          o[k] = s < 0 ? 0 : s > ssize - 1 ? ssize - 1 : s;
        }
      } else {
        if (sx < 0) fx = 0, sx = 0;
        if (sx >= ssize - 1) fx = 0, sx = ssize - 1;
        o[0] = sx;
        o[1] = sx + 1 < ssize ? sx + 1 : ssize - 1;
        w[0] = 1.f - fx;
        w[1] = fx;
      }
    }
    for (int k = 0; k < ks; k++) t->wi[(size_t)i * ks + k] = (int16_t)lrintf(w[k] * COEF_SCALE);
  }
  return LUON_OK;
}

/* Region (ox0, oy0, rw, rh) of the resize of `s` to (W, H), written HWC
 * contiguous into dst (s->dt). Equals resizing all of s, then cropping. */
static luon_status resample(const img *s, int W, int H, int interp, int ox0, int oy0, int rw, int rh,
                            void *dst) {
  int mode = interp;
  if (interp == 3) mode = (s->w >= W && s->h >= H) ? RS_AREA : RS_LINEAR_AREA;
  bool fix = s->dt == LUON_DTYPE_U8 && (mode == RS_LINEAR || mode == RS_CUBIC || mode == RS_LINEAR_AREA);
  int c = s->c;
  tab tx = {0}, ty = {0};
  luon_status st = tab_build(&tx, s->w, W, ox0, rw, mode);
  if (st) return st;
  if ((st = tab_build(&ty, s->h, H, oy0, rh, mode))) {
    tab_free(&tx);
    return st;
  }
  int ks = ty.ks, nbuf = ks + 1, rowlen = rw * c;
  /* ring of horizontally resampled source rows, keyed by row index */
  void *ring = malloc((size_t)nbuf * rowlen * 4 + 4);
  int *ringid = malloc(sizeof(int) * nbuf);
  int *xo = malloc(sizeof(int) * (size_t)rw * tx.ks + 1);
  if (!ring || !ringid || !xo) {
    free(ring), free(ringid), free(xo), tab_free(&tx), tab_free(&ty);
    return lu_error(LUON_ENOMEM, "resize: out of memory for row buffers");
  }
  for (int k = 0; k < nbuf; k++) ringid[k] = -1;
  for (int k = 0; k < rw * tx.ks; k++) xo[k] = tx.ofs[k] * c;
  int kx = tx.ks;
  if (fix && ks == 2 && kx == 2) {
    /* uint8 bilinear: the sums are exact integers, so blending rows first
     * (contiguous, vectorised) gives OpenCV's horizontal-first bytes. */
    int lo = xo[0], hi = xo[0];
    for (int k = 0; k < rw * 2; k++) lo = xo[k] < lo ? xo[k] : lo, hi = xo[k] > hi ? xo[k] : hi;
    int span = hi - lo + c;
    int32_t *t = (int32_t *)ring; /* nbuf*rowlen >= span is not guaranteed: */
    int32_t *big = span > nbuf * rowlen ? malloc(sizeof(int32_t) * span) : NULL;
    if (span > nbuf * rowlen) {
      if (!big) {
        free(ring), free(ringid), free(xo), tab_free(&tx), tab_free(&ty);
        return lu_error(LUON_ENOMEM, "resize: out of memory for row buffers");
      }
      t = big;
    }
    for (int y = 0; y < rh; y++) {
      const uint8_t *r0 = (const uint8_t *)s->data + (int64_t)ty.ofs[2 * y] * s->rs + lo;
      const uint8_t *r1 = (const uint8_t *)s->data + (int64_t)ty.ofs[2 * y + 1] * s->rs + lo;
      int32_t b0 = ty.wi[2 * y], b1 = ty.wi[2 * y + 1];
      for (int i = 0; i < span; i++) t[i] = r0[i] * b0 + r1[i] * b1;
      uint8_t *d = (uint8_t *)dst + (size_t)y * rowlen;
      if (c == 3) {
        for (int x = 0; x < rw; x++) {
          const int32_t *a = t + xo[2 * x] - lo, *b = t + xo[2 * x + 1] - lo;
          int32_t w0 = tx.wi[2 * x], w1 = tx.wi[2 * x + 1];
          int v0 = (a[0] * w0 + b[0] * w1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
          int v1 = (a[1] * w0 + b[1] * w1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
          int v2 = (a[2] * w0 + b[2] * w1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
          /* weights are >= 0 for bilinear: only the top can overflow */
          d[3 * x] = (uint8_t)(v0 > 255 ? 255 : v0);
          d[3 * x + 1] = (uint8_t)(v1 > 255 ? 255 : v1);
          d[3 * x + 2] = (uint8_t)(v2 > 255 ? 255 : v2);
        }
        continue;
      }
      for (int x = 0; x < rw; x++) {
        const int32_t *a = t + xo[2 * x] - lo, *b = t + xo[2 * x + 1] - lo;
        int32_t w0 = tx.wi[2 * x], w1 = tx.wi[2 * x + 1];
        for (int ch = 0; ch < c; ch++) {
          int v = (a[ch] * w0 + b[ch] * w1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
          d[x * c + ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
      }
    }
    free(big), free(ring), free(ringid), free(xo), tab_free(&tx), tab_free(&ty);
    return LUON_OK;
  }
  for (int y = 0; y < rh; y++) {
    const int *yo = ty.ofs + (size_t)y * ks;
    for (int k = 0; k < ks; k++) {
      int r = yo[k], slot = r % nbuf;
      if (ringid[slot] == r) continue;
      ringid[slot] = r;
      if (s->dt == LUON_DTYPE_U8) {
        const uint8_t *sr = (const uint8_t *)s->data + (int64_t)r * s->rs;
        if (fix) {
          int32_t *hr = (int32_t *)ring + (size_t)slot * rowlen;
          if (kx == 2 && c == 3) {
            for (int x = 0; x < rw; x++) {
              const uint8_t *a = sr + xo[2 * x], *b = sr + xo[2 * x + 1];
              int w0 = tx.wi[2 * x], w1 = tx.wi[2 * x + 1];
              hr[3 * x] = a[0] * w0 + b[0] * w1;
              hr[3 * x + 1] = a[1] * w0 + b[1] * w1;
              hr[3 * x + 2] = a[2] * w0 + b[2] * w1;
            }
          } else {
            for (int x = 0; x < rw; x++)
              for (int ch = 0; ch < c; ch++) {
                int32_t acc = 0;
                for (int k2 = 0; k2 < kx; k2++) acc += sr[xo[x * kx + k2] + ch] * tx.wi[x * kx + k2];
                hr[x * c + ch] = acc;
              }
          }
        } else {
          float *hr = (float *)ring + (size_t)slot * rowlen;
          for (int x = 0; x < rw; x++)
            for (int ch = 0; ch < c; ch++) {
              float acc = 0;
              for (int k2 = 0; k2 < kx; k2++) acc += sr[xo[x * kx + k2] + ch] * tx.wf[x * kx + k2];
              hr[x * c + ch] = acc;
            }
        }
      } else {
        const float *sr = (const float *)s->data + (int64_t)r * s->rs;
        float *hr = (float *)ring + (size_t)slot * rowlen;
        for (int x = 0; x < rw; x++)
          for (int ch = 0; ch < c; ch++) {
            float acc = 0;
            for (int k2 = 0; k2 < kx; k2++) acc += sr[xo[x * kx + k2] + ch] * tx.wf[x * kx + k2];
            hr[x * c + ch] = acc;
          }
      }
    }
    if (s->dt == LUON_DTYPE_U8) {
      uint8_t *d = (uint8_t *)dst + (size_t)y * rowlen;
      if (fix) {
        const int16_t *wy = ty.wi + (size_t)y * ks;
        if (ks == 2) {
          const int32_t *r0 = (int32_t *)ring + (size_t)(yo[0] % nbuf) * rowlen;
          const int32_t *r1 = (int32_t *)ring + (size_t)(yo[1] % nbuf) * rowlen;
          int b0 = wy[0], b1 = wy[1];
          for (int i = 0; i < rowlen; i++) {
            int v = (r0[i] * b0 + r1[i] * b1 + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
            d[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
          }
        } else {
          for (int i = 0; i < rowlen; i++) {
            int64_t acc = 0;
            for (int k = 0; k < ks; k++)
              acc += (int64_t)((int32_t *)ring)[(size_t)(yo[k] % nbuf) * rowlen + i] * wy[k];
            int64_t v = (acc + (1 << (2 * COEF_BITS - 1))) >> (2 * COEF_BITS);
            d[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
          }
        }
      } else {
        const float *wy = ty.wf + (size_t)y * ks;
        for (int i = 0; i < rowlen; i++) {
          float acc = 0;
          for (int k = 0; k < ks; k++) acc += ((float *)ring)[(size_t)(yo[k] % nbuf) * rowlen + i] * wy[k];
          float v = floorf(acc + 0.5f);
          d[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
      }
    } else {
      float *d = (float *)dst + (size_t)y * rowlen;
      const float *wy = ty.wf + (size_t)y * ks;
      for (int i = 0; i < rowlen; i++) {
        float acc = 0;
        for (int k = 0; k < ks; k++) acc += ((float *)ring)[(size_t)(yo[k] % nbuf) * rowlen + i] * wy[k];
        d[i] = acc;
      }
    }
  }
  free(ring), free(ringid), free(xo), tab_free(&tx), tab_free(&ty);
  return LUON_OK;
}

/* A new image: all of s resized to (W, H). */
static luon_status resize_img(const img *s, int W, int H, int interp, img *out, const char *who) {
  LU_TRY(img_new(out, H, W, s->c, s->dt, 0, s->fdt, who));
  luon_status st = resample(s, W, H, interp, 0, 0, W, H, out->data);
  if (st) img_free(out);
  return st;
}

/* ---- geometry rules (MXNet) ---------------------------------------------- */

/* Resize's output (w, h): keep_ratio makes the short side `width`. */
static void resize_dims(const luon_transform_step *s, int w, int h, int *ow, int *oh) {
  if (s->keep_ratio) {
    int64_t size = s->width;
    if (h > w) *ow = (int)size, *oh = (int)((int64_t)h * size / w);
    else *oh = (int)size, *ow = (int)((int64_t)w * size / h);
  } else {
    *ow = s->width, *oh = s->height;
  }
}

/* mx.image.scale_down: the target (tw, th) shrunk to fit (w, h), same aspect. */
static void scale_down(int w, int h, int tw, int th, int *cw, int *ch) {
  double fw = tw, fh = th;
  if (h < fh) fw = fw * h / fh, fh = h;
  if (w < fw) fh = fh * w / fw, fw = w;
  *cw = (int)fw;
  *ch = (int)fh;
  if (*cw < 1) *cw = 1;
  if (*ch < 1) *ch = 1;
}

/* Crop rectangle of a crop step on a (w, h) image: x0, y0, cw, ch. The
 * caller resizes the crop to the step's size when they differ. */
static void crop_rect(const luon_transform_step *s, int w, int h, rng *r, int rect[4]) {
  int cw, ch;
  if (s->kind == LUON_TF_RANDOM_RESIZED_CROP) {
    if (s->use_fixed) {
      rect[0] = (int)s->fixed[0], rect[1] = (int)s->fixed[1];
      rect[2] = (int)s->fixed[2], rect[3] = (int)s->fixed[3];
      return;
    }
    double area = (double)w * h, lr0 = log(s->ratio[0]), lr1 = log(s->ratio[1]);
    for (int attempt = 0; attempt < 10; attempt++) {
      double target = rng_uniform(r, s->scale[0], s->scale[1]) * area;
      double ratio = exp(lr0 + (lr1 - lr0) * rng_unit(r));
      int nw = (int)lrint(sqrt(target * ratio)), nh = (int)lrint(sqrt(target / ratio));
      if (nw >= 1 && nh >= 1 && nw <= w && nh <= h) {
        rect[0] = rng_int(r, 0, w - nw);
        rect[1] = rng_int(r, 0, h - nh);
        rect[2] = nw, rect[3] = nh;
        return;
      }
    }
    /* fall back to center_crop */
  }
  scale_down(w, h, s->width, s->height, &cw, &ch);
  rect[2] = cw, rect[3] = ch;
  if (s->kind == LUON_TF_RANDOM_CROP) {
    if (s->use_fixed) {
      int x0 = (int)s->fixed[0], y0 = (int)s->fixed[1];
      rect[0] = x0 < 0 ? 0 : x0 > w - cw ? w - cw : x0;
      rect[1] = y0 < 0 ? 0 : y0 > h - ch ? h - ch : y0;
    } else {
      rect[0] = rng_int(r, 0, w - cw);
      rect[1] = rng_int(r, 0, h - ch);
    }
  } else {
    rect[0] = (int)((w - cw) / 2.0);
    rect[1] = (int)((h - ch) / 2.0);
  }
}

/* ---- colour (MXNet src/operator/image/image_random-inl.h) ---------------- */

static const float GRAY[3] = {0.299f, 0.587f, 0.114f};

/* Mean gray of an HWC image, from exact per-channel sums (MXNet sums the
 * per-pixel gray in float; the exact sums make the result order-free). */
static float gray_mean_of_sums(const double *sum, int c, int64_t npix) {
  if (c == 1) return (float)(sum[0] / (double)npix);
  return (float)((0.299 * sum[0] + 0.587 * sum[1] + 0.114 * sum[2]) / (double)npix);
}

static float gray_mean(const img *m) {
  double sum[3] = {0, 0, 0};
  int cc = m->c < 3 ? m->c : 3;
  for (int y = 0; y < m->h; y++) {
    if (m->dt == LUON_DTYPE_U8) {
      const uint8_t *p = (const uint8_t *)m->data + (int64_t)y * m->rs;
      int64_t rsum[3] = {0, 0, 0};
      for (int x = 0; x < m->w; x++)
        for (int ch = 0; ch < cc; ch++) rsum[ch] += p[x * m->c + ch];
      for (int ch = 0; ch < cc; ch++) sum[ch] += (double)rsum[ch];
    } else {
      const float *p = (const float *)m->data + (int64_t)y * m->rs;
      for (int x = 0; x < m->w; x++)
        for (int ch = 0; ch < cc; ch++) sum[ch] += p[x * m->c + ch];
    }
  }
  return gray_mean_of_sums(sum, m->c, (int64_t)m->h * m->w);
}

static inline float px_brightness(float v, float alpha) { return v * alpha; }
static inline float px_contrast(float v, float alpha, float beta) { return v * alpha + beta; }
static inline float px_saturation(float v, float gray, float alpha) { return gray * (1 - alpha) + v * alpha; }
static inline float px_to_tensor(float v) { return v / 255.0f; }
static inline float px_normalize(float v, float m, float s) { return (v - m) / s; }

static void rgb_to_hls(float r, float g, float b, float *H, float *L, float *S) {
  b /= 255.f, g /= 255.f, r /= 255.f;
  float h = 0.f, s = 0.f, vmax = fmaxf(fmaxf(r, g), b), vmin = fminf(fminf(r, g), b);
  float diff = vmax - vmin, l = (vmax + vmin) * 0.5f;
  if (diff > 1.1920929e-07f) {
    s = l < 0.5f ? diff / (vmax + vmin) : diff / (2.0f - vmax - vmin);
    diff = 60.f / diff;
    if (vmax == r) h = (g - b) * diff;
    else if (vmax == g) h = (b - r) * diff + 120.f;
    else h = (r - g) * diff + 240.f;
    if (h < 0.f) h += 360.f;
  }
  *H = h, *L = l, *S = s;
}

static void hls_to_rgb(float h, float l, float s, float *R, float *G, float *B) {
  static const int sector_data[6][3] = {{1, 3, 0}, {1, 0, 2}, {3, 0, 1}, {0, 2, 1}, {0, 1, 3}, {2, 1, 0}};
  float b = l, g = l, r = l;
  if (s != 0) {
    float p2 = l <= 0.5f ? l * (1 + s) : l + s - l * s, p1 = 2 * l - p2;
    h *= 1.f / 60.f;
    while (h < 0) h += 6;
    while (h >= 6) h -= 6;
    int sector = (int)h;
    if (sector > 5) sector = 5;
    h -= sector;
    float tab4[4] = {p2, p1, p1 + (p2 - p1) * (1 - h), p1 + (p2 - p1) * h};
    b = tab4[sector_data[sector][0]];
    g = tab4[sector_data[sector][1]];
    r = tab4[sector_data[sector][2]];
  }
  *B = b * 255.f, *G = g * 255.f, *R = r * 255.f;
}

/* AlexNet PCA lighting (MXNet AdjustLightingImpl). */
static const float EIG[3][3] = {{55.46f * -0.5675f, 4.794f * 0.7192f, 1.148f * 0.4009f},
                                {55.46f * -0.5808f, 4.794f * -0.0045f, 1.148f * -0.8140f},
                                {55.46f * -0.5836f, 4.794f * -0.6948f, 1.148f * 0.4203f}};

enum { COL_BRIGHTNESS = 0, COL_CONTRAST = 1, COL_SATURATION = 2, COL_HUE = 3, COL_LIGHTING = 4 };

/* One colour adjustment of an HWC image into a new image (reference). For
 * lighting, a[0..2] are the PCA alphas; for hue a[0] is the shift in turns. */
static luon_status color_ref(img *cur, int what, const float *a, const char *who) {
  int c = cur->c;
  if ((what == COL_SATURATION || what == COL_HUE) && c == 1) return LUON_OK; /* gray stays gray */
  img o = {0};
  LU_TRY(img_new(&o, cur->h, cur->w, c, cur->dt, 0, cur->fdt, who));
  float alpha = a[0], beta = 0, pca[3] = {0, 0, 0};
  if (what == COL_CONTRAST) beta = (1 - alpha) * gray_mean(cur);
  if (what == COL_LIGHTING)
    for (int k = 0; k < 3; k++) pca[k] = EIG[k][0] * a[0] + EIG[k][1] * a[1] + EIG[k][2] * a[2];
  bool u8 = cur->dt == LUON_DTYPE_U8;
  for (int y = 0; y < cur->h; y++)
    for (int x = 0; x < cur->w; x++) {
      int64_t si = (int64_t)y * cur->rs + (int64_t)x * c, di = ((int64_t)y * cur->w + x) * c;
      float v[4] = {0, 0, 0, 0}, r[4] = {0, 0, 0, 0};
      for (int ch = 0; ch < c; ch++)
        v[ch] = u8 ? (float)((uint8_t *)cur->data)[si + ch] : ((float *)cur->data)[si + ch];
      switch (what) {
      case COL_BRIGHTNESS:
        for (int ch = 0; ch < c; ch++) r[ch] = px_brightness(v[ch], alpha);
        break;
      case COL_CONTRAST:
        for (int ch = 0; ch < c; ch++) r[ch] = px_contrast(v[ch], alpha, beta);
        break;
      case COL_SATURATION: {
        float gray = v[0] * GRAY[0] + v[1] * GRAY[1] + v[2] * GRAY[2];
        for (int ch = 0; ch < c; ch++) r[ch] = px_saturation(v[ch], gray, alpha);
        break;
      }
      case COL_HUE: {
        float hh, ll, ss;
        rgb_to_hls(v[0], v[1], v[2], &hh, &ll, &ss);
        hh += alpha * 360.f;
        hls_to_rgb(hh, ll, ss, &r[0], &r[1], &r[2]);
        for (int ch = 3; ch < c; ch++) r[ch] = v[ch];
        break;
      }
      default: /* lighting */
        for (int ch = 0; ch < c; ch++) r[ch] = v[ch] + (ch < 3 ? pca[ch] : 0.0f);
        break;
      }
      for (int ch = 0; ch < c; ch++) {
        if (u8) ((uint8_t *)o.data)[di + ch] = sat_u8(r[ch]);
        else ((float *)o.data)[di + ch] = r[ch];
      }
    }
  img_replace(cur, o);
  return LUON_OK;
}

/* ---- validation and output shape ---------------------------------------- */

typedef struct dims {
  int h, w, c, chw, dt, fdt;
} dims;

static bool is_random(int32_t k) {
  return k == LUON_TF_RANDOM_CROP || k == LUON_TF_RANDOM_RESIZED_CROP || k == LUON_TF_FLIP_LR ||
         k == LUON_TF_FLIP_TB || k == LUON_TF_BRIGHTNESS || k == LUON_TF_CONTRAST ||
         k == LUON_TF_SATURATION || k == LUON_TF_HUE || k == LUON_TF_COLOR_JITTER || k == LUON_TF_LIGHTING;
}

static luon_status need_hwc(const luon_transform_step *s, const dims *d) {
  if (d->chw)
    return lu_error(LUON_ESHAPE, "%s: expects an (H,W,C) image, got the (C,H,W) tensor of ToTensor "
                    "(%d,%d,%d); put %s before ToTensor", kind_name(s->kind), d->c, d->h, d->w,
                    kind_name(s->kind));
  return LUON_OK;
}

static luon_status need_color(const luon_transform_step *s, const dims *d) {
  LU_TRY(need_hwc(s, d));
  if (d->c != 1 && d->c != 3)
    return lu_error(LUON_ESHAPE, "%s: expects 1 or 3 channels, got an image of shape (%d,%d,%d)",
                    kind_name(s->kind), d->h, d->w, d->c);
  if (s->kind == LUON_TF_LIGHTING && d->c != 3)
    return lu_error(LUON_ESHAPE, "RandomLighting: expects 3 channels, got an image of shape (%d,%d,%d)",
                    d->h, d->w, d->c);
  return LUON_OK;
}

static luon_status need_size(const luon_transform_step *s) {
  if (s->width <= 0 || (!(s->kind == LUON_TF_RESIZE && s->keep_ratio) && s->height <= 0))
    return lu_error(LUON_EINVAL, "%s: size must be greater than 0, got (%d, %d)", kind_name(s->kind),
                    s->width, s->height);
  if (s->interp < 0 || s->interp > 3)
    return lu_error(LUON_EINVAL, "%s: interpolation %d is not supported (0 nearest, 1 bilinear, "
                    "2 bicubic, 3 area)", kind_name(s->kind), s->interp);
  return LUON_OK;
}

/* Check step s against the image before it and advance d to the image after. */
static luon_status step_dims(const luon_transform_step *s, dims *d) {
  switch (s->kind) {
  case LUON_TF_CAST:
    if (!lu_dtype_valid(s->dtype))
      return lu_error(LUON_EINVAL, "Cast: unknown dtype %d", s->dtype);
    d->dt = s->dtype == LUON_DTYPE_U8 ? LUON_DTYPE_U8 : LUON_DTYPE_F32;
    d->fdt = s->dtype;
    return LUON_OK;
  case LUON_TF_TO_TENSOR:
    if (d->chw)
      return lu_error(LUON_ESHAPE, "ToTensor: input must have shape (height, width, channels), but got "
                      "the (C,H,W) tensor (%d,%d,%d) of an earlier ToTensor", d->c, d->h, d->w);
    d->chw = 1;
    d->dt = d->fdt = LUON_DTYPE_F32;
    return LUON_OK;
  case LUON_TF_NORMALIZE:
    if (!d->chw)
      return lu_error(LUON_ESHAPE, "Normalize: expects a (C,H,W) tensor; put it after ToTensor");
    if (d->c != 1 && d->c != 3)
      return lu_error(LUON_ESHAPE, "Normalize: expects 1 or 3 channels, got a tensor of shape (%d,%d,%d)",
                      d->c, d->h, d->w);
    if (s->nmean != 1 && s->nmean != d->c)
      return lu_error(LUON_EINVAL, "Normalize: %d mean values for a tensor with %d channels (shape "
                      "(%d,%d,%d)); give 1 or %d", s->nmean, d->c, d->c, d->h, d->w, d->c);
    if (s->nstd != 1 && s->nstd != d->c)
      return lu_error(LUON_EINVAL, "Normalize: %d std values for a tensor with %d channels (shape "
                      "(%d,%d,%d)); give 1 or %d", s->nstd, d->c, d->c, d->h, d->w, d->c);
    d->dt = LUON_DTYPE_F32;
    if (d->fdt == LUON_DTYPE_U8) d->fdt = LUON_DTYPE_F32;
    return LUON_OK;
  case LUON_TF_RESIZE: {
    LU_TRY(need_hwc(s, d));
    LU_TRY(need_size(s));
    int ow, oh;
    resize_dims(s, d->w, d->h, &ow, &oh);
    if (ow <= 0 || oh <= 0)
      return lu_error(LUON_EINVAL, "Resize: keep_ratio size %d gives an empty image for (%d,%d,%d)",
                      s->width, d->h, d->w, d->c);
    d->w = ow, d->h = oh;
    return LUON_OK;
  }
  case LUON_TF_CENTER_CROP:
  case LUON_TF_RANDOM_CROP:
  case LUON_TF_RANDOM_RESIZED_CROP:
    LU_TRY(need_hwc(s, d));
    LU_TRY(need_size(s));
    if (s->kind == LUON_TF_RANDOM_CROP && s->pad < 0)
      return lu_error(LUON_EINVAL, "RandomCrop: pad must be >= 0, got %d", s->pad);
    if (s->kind == LUON_TF_RANDOM_RESIZED_CROP &&
        !(s->scale[0] > 0 && s->scale[0] <= s->scale[1] && s->ratio[0] > 0 && s->ratio[0] <= s->ratio[1]))
      return lu_error(LUON_EINVAL, "RandomResizedCrop: need 0 < scale[1] <= scale[2] and 0 < ratio[1] <= "
                      "ratio[2], got scale (%g, %g), ratio (%g, %g)", s->scale[0], s->scale[1],
                      s->ratio[0], s->ratio[1]);
    d->w = s->width, d->h = s->height;
    return LUON_OK;
  case LUON_TF_FLIP_LR:
  case LUON_TF_FLIP_TB:
    return need_hwc(s, d);
  case LUON_TF_BRIGHTNESS:
  case LUON_TF_CONTRAST:
  case LUON_TF_SATURATION:
  case LUON_TF_HUE:
  case LUON_TF_COLOR_JITTER:
  case LUON_TF_LIGHTING: {
    LU_TRY(need_color(s, d));
    float v = s->kind == LUON_TF_BRIGHTNESS ? s->brightness : s->kind == LUON_TF_CONTRAST ? s->contrast
            : s->kind == LUON_TF_SATURATION ? s->saturation : s->kind == LUON_TF_HUE ? s->hue
            : s->kind == LUON_TF_LIGHTING ? s->alpha : 0.0f;
    if (v < 0 || s->brightness < 0 || s->contrast < 0 || s->saturation < 0 || s->hue < 0)
      return lu_error(LUON_EINVAL, "%s: amounts must be >= 0, got %g", kind_name(s->kind),
                      v < 0 ? v : fminf(fminf(s->brightness, s->contrast), fminf(s->saturation, s->hue)));
    return LUON_OK;
  }
  default:
    return lu_error(LUON_EINVAL, "transform: unknown step kind %d", s->kind);
  }
}

static luon_status plan(const luon_transform_step *steps, int32_t n, dims *d) {
  if (n < 0 || (n > 0 && !steps)) return lu_error(LUON_EINVAL, "transform: %d steps", n);
  if (d->h <= 0 || d->w <= 0 || d->c <= 0 || d->c > 4)
    return lu_error(LUON_ESHAPE, "transform: expects a non-empty image with 1 to 4 channels, got (%d,%d,%d)",
                    d->chw ? d->c : d->h, d->chw ? d->h : d->w, d->chw ? d->w : d->c);
  for (int32_t k = 0; k < n; k++) LU_TRY(step_dims(&steps[k], d));
  return LUON_OK;
}

/* ---- reference: one step at a time --------------------------------------- */

static luon_status flip_ref(img *cur, bool lr) {
  img o = {0};
  LU_TRY(img_new(&o, cur->h, cur->w, cur->c, cur->dt, 0, cur->fdt, lr ? "RandomFlipLeftRight" : "RandomFlipTopBottom"));
  size_t es = cur->dt == LUON_DTYPE_U8 ? 1 : 4, px = es * cur->c;
  for (int y = 0; y < cur->h; y++) {
    const char *sr = (const char *)cur->data + (int64_t)(lr ? y : cur->h - 1 - y) * cur->rs * es;
    char *dr = (char *)o.data + (int64_t)y * o.rs * es;
    if (lr) for (int x = 0; x < cur->w; x++) memcpy(dr + x * px, sr + (size_t)(cur->w - 1 - x) * px, px);
    else memcpy(dr, sr, cur->w * px);
  }
  img_replace(cur, o);
  return LUON_OK;
}

static luon_status crop_ref(img *cur, const luon_transform_step *s, rng *r) {
  if (s->kind == LUON_TF_RANDOM_CROP && s->pad > 0) {
    img o = {0};
    int p = s->pad;
    LU_TRY(img_new(&o, cur->h + 2 * p, cur->w + 2 * p, cur->c, cur->dt, 0, cur->fdt, "RandomCrop"));
    size_t es = cur->dt == LUON_DTYPE_U8 ? 1 : 4;
    memset(o.data, 0, (size_t)o.h * o.rs * es);
    for (int y = 0; y < cur->h; y++)
      memcpy((char *)o.data + ((int64_t)(y + p) * o.rs + (int64_t)p * o.c) * es,
             (char *)cur->data + (int64_t)y * cur->rs * es, (size_t)cur->w * cur->c * es);
    img_replace(cur, o);
  }
  int rect[4];
  crop_rect(s, cur->w, cur->h, r, rect);
  img v = img_view(cur, rect[0], rect[1], rect[2], rect[3]);
  if (rect[2] != s->width || rect[3] != s->height) {
    img o = {0};
    LU_TRY(resize_img(&v, s->width, s->height, s->interp, &o, kind_name(s->kind)));
    img_replace(cur, o);
  } else {
    img_replace(cur, v);
  }
  return LUON_OK;
}

static luon_status to_tensor_ref(img *cur) {
  img o = {0};
  LU_TRY(img_new(&o, cur->h, cur->w, cur->c, LUON_DTYPE_F32, 1, LUON_DTYPE_F32, "ToTensor"));
  float *d = o.data;
  int64_t plane = (int64_t)cur->h * cur->w;
  for (int y = 0; y < cur->h; y++)
    for (int x = 0; x < cur->w; x++)
      for (int ch = 0; ch < cur->c; ch++) {
        int64_t si = (int64_t)y * cur->rs + (int64_t)x * cur->c + ch;
        float v = cur->dt == LUON_DTYPE_U8 ? (float)((uint8_t *)cur->data)[si] : ((float *)cur->data)[si];
        d[ch * plane + (int64_t)y * cur->w + x] = px_to_tensor(v);
      }
  o.rs = o.w; /* CHW rows */
  img_replace(cur, o);
  return LUON_OK;
}

static luon_status normalize_ref(img *cur, const luon_transform_step *s) {
  img o = {0};
  LU_TRY(img_new(&o, cur->h, cur->w, cur->c, LUON_DTYPE_F32, 1, cur->fdt == LUON_DTYPE_U8 ? LUON_DTYPE_F32 : cur->fdt, "Normalize"));
  int64_t plane = (int64_t)cur->h * cur->w;
  for (int ch = 0; ch < cur->c; ch++) {
    float m = s->mean[s->nmean == 1 ? 0 : ch], sd = s->std[s->nstd == 1 ? 0 : ch];
    for (int64_t i = 0; i < plane; i++) {
      float v = cur->dt == LUON_DTYPE_U8 ? (float)((uint8_t *)cur->data)[ch * plane + i]
                                         : ((float *)cur->data)[ch * plane + i];
      ((float *)o.data)[ch * plane + i] = px_normalize(v, m, sd);
    }
  }
  o.rs = o.w;
  img_replace(cur, o);
  return LUON_OK;
}

static luon_status cast_ref(img *cur, const luon_transform_step *s) {
  int dt = s->dtype == LUON_DTYPE_U8 ? LUON_DTYPE_U8 : LUON_DTYPE_F32;
  if (dt == cur->dt) {
    cur->fdt = s->dtype;
    return LUON_OK;
  }
  img o = {0};
  LU_TRY(img_new(&o, cur->h, cur->w, cur->c, dt, cur->chw, s->dtype, "Cast"));
  int64_t rowlen = cur->chw ? (int64_t)cur->h * cur->w * cur->c : (int64_t)cur->w * cur->c;
  int nrows = cur->chw ? 1 : cur->h;
  size_t es = cur->dt == LUON_DTYPE_U8 ? 1 : 4;
  for (int y = 0; y < nrows; y++)
    lu_convert((char *)o.data + (int64_t)y * rowlen * (dt == LUON_DTYPE_U8 ? 1 : 4), dt,
               (char *)cur->data + (int64_t)y * cur->rs * es, cur->dt, rowlen);
  if (cur->chw) o.rs = o.w;
  img_replace(cur, o);
  return LUON_OK;
}

/* Apply the color step s (single or jitter) with its drawn alphas. */
static luon_status color_step_ref(img *cur, const luon_transform_step *s, rng *r) {
  float a[4];
  switch (s->kind) {
  case LUON_TF_BRIGHTNESS: a[0] = draw_alpha(s, r, s->brightness); return color_ref(cur, COL_BRIGHTNESS, a, "RandomBrightness");
  case LUON_TF_CONTRAST: a[0] = draw_alpha(s, r, s->contrast); return color_ref(cur, COL_CONTRAST, a, "RandomContrast");
  case LUON_TF_SATURATION: a[0] = draw_alpha(s, r, s->saturation); return color_ref(cur, COL_SATURATION, a, "RandomSaturation");
  case LUON_TF_HUE: a[0] = draw_alpha(s, r, s->hue); return color_ref(cur, COL_HUE, a, "RandomHue");
  case LUON_TF_LIGHTING:
    for (int k = 0; k < 3; k++) a[k] = s->use_fixed ? s->fixed[k] : rng_normal(r) * s->alpha;
    return color_ref(cur, COL_LIGHTING, a, "RandomLighting");
  default: { /* jitter */
    int order[4];
    float al[4];
    const float amt[4] = {s->brightness, s->contrast, s->saturation, s->hue};
    draw_jitter(s, r, order, al);
    for (int k = 0; k < 4; k++) {
      int j = order[k];
      if (!(amt[j] > 0.0f)) continue;
      LU_TRY(color_ref(cur, j, &al[j], "RandomColorJitter"));
    }
    return LUON_OK;
  }
  }
}

static luon_status step_ref(img *cur, const luon_transform_step *s, rng *r) {
  switch (s->kind) {
  case LUON_TF_CAST: return cast_ref(cur, s);
  case LUON_TF_TO_TENSOR: return to_tensor_ref(cur);
  case LUON_TF_NORMALIZE: return normalize_ref(cur, s);
  case LUON_TF_RESIZE: {
    int ow, oh;
    img o = {0};
    resize_dims(s, cur->w, cur->h, &ow, &oh);
    LU_TRY(resize_img(cur, ow, oh, s->interp, &o, "Resize"));
    img_replace(cur, o);
    return LUON_OK;
  }
  case LUON_TF_CENTER_CROP:
  case LUON_TF_RANDOM_CROP:
  case LUON_TF_RANDOM_RESIZED_CROP: return crop_ref(cur, s, r);
  case LUON_TF_FLIP_LR:
  case LUON_TF_FLIP_TB:
    if (!draw_flip(s, r)) return LUON_OK;
    return flip_ref(cur, s->kind == LUON_TF_FLIP_LR);
  default: return color_step_ref(cur, s, r);
  }
}

static luon_status run_ref(const luon_transform_step *steps, int32_t n, img *cur, uint64_t seed,
                           uint64_t sample) {
  for (int32_t k = 0; k < n; k++) {
    rng r;
    rng_init(&r, seed, sample, k);
    LU_TRY(step_ref(cur, &steps[k], &r));
  }
  return LUON_OK;
}

/* ---- fused ----------------------------------------------------------------
 * The image is kept as  Normalize?(ToTensor?(Flip(LUT(Resample(src)))))  with
 * each part pending: `rs` a resize of src of which only a region is needed,
 * `lut` per-channel uint8 tables (brightness, contrast), flips, and the final
 * float write. A step that cannot join the pending state flushes it (in
 * reference order) and runs as in the reference. */

typedef struct fstate {
  img cur;             /* materialised image (or the source of the pending resize) */
  bool rs;             /* pending resample of cur to (W,H), region (x0,y0,rw,rh) */
  int W, H, interp, x0, y0, rw, rh;
  bool lut;            /* pending uint8 tables */
  uint8_t tab[3][256];
  bool flip_lr, flip_tb;
  bool tensor, norm;   /* pending ToTensor, Normalize */
  float mean[3], std[3];
} fstate;

static luon_status flush_rs(fstate *f) {
  if (!f->rs) return LUON_OK;
  img o = {0};
  LU_TRY(img_new(&o, f->rh, f->rw, f->cur.c, f->cur.dt, 0, f->cur.fdt, "Resize"));
  luon_status st = resample(&f->cur, f->W, f->H, f->interp, f->x0, f->y0, f->rw, f->rh, o.data);
  if (st) {
    img_free(&o);
    return st;
  }
  img_replace(&f->cur, o);
  f->rs = false;
  return LUON_OK;
}

static luon_status flush_lut(fstate *f) {
  if (!f->lut) return LUON_OK;
  LU_TRY(flush_rs(f));
  img *m = &f->cur;
  img o = {0};
  LU_TRY(img_new(&o, m->h, m->w, m->c, m->dt, 0, m->fdt, "RandomColorJitter"));
  for (int y = 0; y < m->h; y++) {
    const uint8_t *s = (const uint8_t *)m->data + (int64_t)y * m->rs;
    uint8_t *d = (uint8_t *)o.data + (int64_t)y * o.rs;
    for (int x = 0; x < m->w; x++)
      for (int ch = 0; ch < m->c; ch++) d[x * m->c + ch] = f->tab[ch][s[x * m->c + ch]];
  }
  img_replace(m, o);
  f->lut = false;
  return LUON_OK;
}

static luon_status flush_flips(fstate *f) {
  LU_TRY(flush_lut(f));
  if (f->flip_lr || f->flip_tb) LU_TRY(flush_rs(f));
  if (f->flip_lr) LU_TRY(flip_ref(&f->cur, true));
  if (f->flip_tb) LU_TRY(flip_ref(&f->cur, false));
  f->flip_lr = f->flip_tb = false;
  return LUON_OK;
}

static luon_status flush_all(fstate *f) {
  LU_TRY(flush_rs(f));
  LU_TRY(flush_flips(f));
  if (f->tensor) LU_TRY(to_tensor_ref(&f->cur));
  if (f->norm) {
    luon_transform_step s = {.kind = LUON_TF_NORMALIZE, .nmean = 3, .nstd = 3};
    memcpy(s.mean, f->mean, sizeof f->mean);
    memcpy(s.std, f->std, sizeof f->std);
    LU_TRY(normalize_ref(&f->cur, &s));
  }
  f->tensor = f->norm = false;
  return LUON_OK;
}

/* Width/height of the image the pending state stands for. */
static int f_w(const fstate *f) { return f->rs ? f->rw : f->cur.w; }
static int f_h(const fstate *f) { return f->rs ? f->rh : f->cur.h; }

static void lut_start(fstate *f) {
  if (f->lut) return;
  for (int ch = 0; ch < 3; ch++)
    for (int v = 0; v < 256; v++) f->tab[ch][v] = (uint8_t)v;
  f->lut = true;
}

/* Brightness or contrast folded into the tables (uint8 HWC only). */
static luon_status lut_color(fstate *f, int what, float alpha) {
  LU_TRY(flush_rs(f));
  lut_start(f);
  int c = f->cur.c;
  float beta = 0;
  if (what == COL_CONTRAST) {
    /* the mean gray of LUT(cur): exact sums from per-channel histograms */
    int64_t hist[3][256];
    memset(hist, 0, sizeof hist);
    for (int y = 0; y < f->cur.h; y++) {
      const uint8_t *p = (const uint8_t *)f->cur.data + (int64_t)y * f->cur.rs;
      if (c == 3)
        for (int x = 0; x < f->cur.w; x++) hist[0][p[3 * x]]++, hist[1][p[3 * x + 1]]++, hist[2][p[3 * x + 2]]++;
      else
        for (int x = 0; x < f->cur.w; x++) hist[0][p[x]]++;
    }
    double sum[3] = {0, 0, 0};
    for (int ch = 0; ch < c; ch++) {
      int64_t sacc = 0;
      for (int v = 0; v < 256; v++) sacc += hist[ch][v] * f->tab[ch][v];
      sum[ch] = (double)sacc;
    }
    beta = (1 - alpha) * gray_mean_of_sums(sum, c, (int64_t)f->cur.h * f->cur.w);
  }
  for (int ch = 0; ch < c; ch++)
    for (int v = 0; v < 256; v++) {
      float x = (float)f->tab[ch][v];
      f->tab[ch][v] = sat_u8(what == COL_CONTRAST ? px_contrast(x, alpha, beta) : px_brightness(x, alpha));
    }
  return LUON_OK;
}

/* A colour step on the pending state: LUT when possible, else materialise
 * (flips stay pending: colour is per pixel) and run the reference. */
static luon_status fused_color(fstate *f, const luon_transform_step *s, rng *r) {
  bool u8 = f->cur.dt == LUON_DTYPE_U8;
  if (!u8 || s->kind == LUON_TF_LIGHTING || s->kind == LUON_TF_SATURATION || s->kind == LUON_TF_HUE) {
    LU_TRY(flush_rs(f));
    LU_TRY(flush_lut(f));
    return color_step_ref(&f->cur, s, r);
  }
  if (s->kind == LUON_TF_BRIGHTNESS) return lut_color(f, COL_BRIGHTNESS, draw_alpha(s, r, s->brightness));
  if (s->kind == LUON_TF_CONTRAST) return lut_color(f, COL_CONTRAST, draw_alpha(s, r, s->contrast));
  int order[4];
  float al[4];
  const float amt[4] = {s->brightness, s->contrast, s->saturation, s->hue};
  draw_jitter(s, r, order, al);
  for (int k = 0; k < 4; k++) {
    int j = order[k];
    if (!(amt[j] > 0.0f)) continue;
    if (j == COL_BRIGHTNESS || j == COL_CONTRAST) {
      LU_TRY(lut_color(f, j, al[j]));
    } else {
      LU_TRY(flush_rs(f));
      LU_TRY(flush_lut(f));
      LU_TRY(color_ref(&f->cur, j, &al[j], "RandomColorJitter"));
    }
  }
  return LUON_OK;
}

/* A crop step on the pending state: narrows a pending resize when the crop
 * needs no resize of its own. */
static luon_status fused_crop(fstate *f, const luon_transform_step *s, rng *r) {
  if (s->kind == LUON_TF_RANDOM_CROP && s->pad > 0) {
    LU_TRY(flush_rs(f));
    return crop_ref(&f->cur, s, r);
  }
  int rect[4];
  crop_rect(s, f_w(f), f_h(f), r, rect);
  bool sized = rect[2] == s->width && rect[3] == s->height;
  if (f->rs && sized) {
    f->x0 += rect[0], f->y0 += rect[1], f->rw = rect[2], f->rh = rect[3];
    return LUON_OK;
  }
  LU_TRY(flush_rs(f));
  img v = img_view(&f->cur, rect[0], rect[1], rect[2], rect[3]);
  img_replace(&f->cur, v);
  if (!sized) {
    f->rs = true;
    f->W = s->width, f->H = s->height, f->interp = s->interp;
    f->x0 = f->y0 = 0, f->rw = s->width, f->rh = s->height;
  }
  return LUON_OK;
}

/* The final write of the pending state into dst (dt F32 when tensor). */
static luon_status fused_write(fstate *f, void *dst) {
  LU_TRY(flush_rs(f));
  img *m = &f->cur;
  int h = m->h, w = m->w, c = m->c;
  if (f->tensor && m->dt == LUON_DTYPE_U8 && !m->chw && c <= 3) {
    float flut[3][256];
    for (int ch = 0; ch < c; ch++)
      for (int v = 0; v < 256; v++) {
        float x = px_to_tensor((float)(f->lut ? f->tab[ch][v] : v));
        flut[ch][v] = f->norm ? px_normalize(x, f->mean[ch], f->std[ch]) : x;
      }
    int64_t plane = (int64_t)h * w;
    float *d = dst;
    for (int y = 0; y < h; y++) {
      const uint8_t *sr = (const uint8_t *)m->data + (int64_t)(f->flip_tb ? h - 1 - y : y) * m->rs;
      float *d0 = d + (int64_t)y * w;
      if (c == 3) {
        float *d1 = d0 + plane, *d2 = d1 + plane;
        if (f->flip_lr) {
          for (int x = 0; x < w; x++) {
            const uint8_t *p = sr + 3 * (w - 1 - x);
            d0[x] = flut[0][p[0]], d1[x] = flut[1][p[1]], d2[x] = flut[2][p[2]];
          }
        } else {
          for (int x = 0; x < w; x++) {
            const uint8_t *p = sr + 3 * x;
            d0[x] = flut[0][p[0]], d1[x] = flut[1][p[1]], d2[x] = flut[2][p[2]];
          }
        }
      } else {
        for (int x = 0; x < w; x++) {
          const uint8_t *p = sr + c * (f->flip_lr ? w - 1 - x : x);
          for (int ch = 0; ch < c; ch++) d0[ch * plane + x] = flut[ch][p[ch]];
        }
      }
    }
    return LUON_OK;
  }
  LU_TRY(flush_all(f));
  /* copy the materialised image out, contiguous */
  size_t es = m->dt == LUON_DTYPE_U8 ? 1 : 4;
  if (m->chw) memcpy(dst, m->data, (size_t)h * w * c * es);
  else
    for (int y = 0; y < h; y++)
      memcpy((char *)dst + (size_t)y * w * c * es, (char *)m->data + (int64_t)y * m->rs * es, (size_t)w * c * es);
  return LUON_OK;
}

static luon_status run_fused(const luon_transform_step *steps, int32_t n, fstate *f, uint64_t seed,
                             uint64_t sample) {
  for (int32_t k = 0; k < n; k++) {
    const luon_transform_step *s = &steps[k];
    rng r;
    rng_init(&r, seed, sample, k);
    switch (s->kind) {
    case LUON_TF_RESIZE: {
      LU_TRY(flush_flips(f));
      LU_TRY(flush_rs(f));
      int ow, oh;
      resize_dims(s, f->cur.w, f->cur.h, &ow, &oh);
      f->rs = true;
      f->W = ow, f->H = oh, f->interp = s->interp;
      f->x0 = f->y0 = 0, f->rw = ow, f->rh = oh;
      break;
    }
    case LUON_TF_CENTER_CROP:
    case LUON_TF_RANDOM_CROP:
    case LUON_TF_RANDOM_RESIZED_CROP:
      LU_TRY(flush_flips(f));
      LU_TRY(fused_crop(f, s, &r));
      break;
    case LUON_TF_FLIP_LR:
    case LUON_TF_FLIP_TB:
      if (draw_flip(s, &r)) {
        if (s->kind == LUON_TF_FLIP_LR) f->flip_lr = !f->flip_lr;
        else f->flip_tb = !f->flip_tb;
      }
      break;
    case LUON_TF_TO_TENSOR:
      if (f->cur.dt != LUON_DTYPE_U8) {
        LU_TRY(flush_all(f));
        LU_TRY(to_tensor_ref(&f->cur));
      } else {
        f->tensor = true;
      }
      break;
    case LUON_TF_NORMALIZE:
      if (f->tensor && !f->norm && f->cur.c <= 3) {
        for (int ch = 0; ch < f->cur.c; ch++) {
          f->mean[ch] = s->mean[s->nmean == 1 ? 0 : ch];
          f->std[ch] = s->std[s->nstd == 1 ? 0 : ch];
        }
        f->norm = true;
      } else {
        LU_TRY(flush_all(f));
        LU_TRY(normalize_ref(&f->cur, s));
      }
      break;
    case LUON_TF_CAST:
      LU_TRY(flush_all(f));
      LU_TRY(cast_ref(&f->cur, s));
      break;
    default:
      if (f->tensor) { /* a colour step after ToTensor (a float CHW image) */
        LU_TRY(flush_all(f));
        LU_TRY(step_ref(&f->cur, s, &r));
      } else {
        LU_TRY(fused_color(f, s, &r));
      }
      break;
    }
  }
  return LUON_OK;
}

/* ---- entry points -------------------------------------------------------- */

/* The input as an image (borrowed when uint8/float32 and pixel-contiguous,
 * else a float32 copy). A pipeline that starts with Normalize reads (C,H,W). */
static luon_status input_img(const luon_tensor *t, int64_t n_index, bool chw, img *m, const char *who) {
  if (!t) return lu_error(LUON_EINVAL, "%s: image is NULL", who);
  if (t->dev.type != LUON_CPU)
    return lu_error(LUON_EDEVICE, "%s: the image is on %s; transforms run on the CPU", who, lu_device_str(t->dev));
  int nd = t->ndim, base = nd == 4 ? 1 : 0;
  if (nd != 3 && nd != 4)
    return lu_error(LUON_ESHAPE, "%s: input image must have shape (height, width, channels), or "
                    "(N, height, width, channels) but got %s", who, lu_shape_str(nd, t->shape));
  int64_t a = t->shape[base], b = t->shape[base + 1], cc = t->shape[base + 2];
  int64_t ch = chw ? a : cc, wd = chw ? cc : b; /* (C,H,W) or (H,W,C) */
  if (ch > 4)
    return lu_error(LUON_ESHAPE, "%s: image shape %s has %lld channels; transforms take 1 to 4 (%s)", who,
                    lu_shape_str(nd, t->shape), (long long)ch, chw ? "channels first" : "channels last");
  if ((chw ? b : a) > INT32_MAX || wd > INT32_MAX)
    return lu_error(LUON_ESHAPE, "%s: image shape %s is too large", who, lu_shape_str(nd, t->shape));
  memset(m, 0, sizeof *m);
  m->chw = chw;
  if (chw) m->c = (int)a, m->h = (int)b, m->w = (int)cc;
  else m->h = (int)a, m->w = (int)b, m->c = (int)cc;
  m->fdt = t->dtype;
  const int64_t *st = t->strides + base;
  int64_t off = nd == 4 ? n_index * t->strides[0] : 0;
  bool direct = (t->dtype == LUON_DTYPE_U8 || t->dtype == LUON_DTYPE_F32) && st[2] == 1 &&
                st[1] == cc && (chw ? st[0] == b * cc : true);
  if (direct) {
    m->dt = t->dtype;
    m->rs = chw ? m->w : st[0];
    m->data = (char *)lu_data(t) + off * luon_dtype_size(t->dtype);
    return LUON_OK;
  }
  img o = {0};
  int dt = t->dtype == LUON_DTYPE_U8 ? LUON_DTYPE_U8 : LUON_DTYPE_F32;
  LU_TRY(img_new(&o, m->h, m->w, m->c, dt, chw, t->dtype, who));
  if (chw) o.rs = o.w;
  size_t es = luon_dtype_size(t->dtype);
  const char *base_p = (const char *)lu_data(t) + off * es;
  for (int64_t i = 0; i < a; i++)
    for (int64_t j = 0; j < b; j++)
      for (int64_t k = 0; k < cc; k++) {
        const char *p = base_p + (i * st[0] + j * st[1] + k * st[2]) * (int64_t)es;
        lu_convert((char *)o.data + ((i * b + j) * cc + k) * (dt == LUON_DTYPE_U8 ? 1 : 4), dt, p, t->dtype, 1);
      }
  *m = o;
  return LUON_OK;
}

static dims dims_of(const img *m) { return (dims){m->h, m->w, m->c, m->chw, m->dt, m->fdt}; }

static void shape_of(const dims *d, int64_t *shape) {
  if (d->chw) shape[0] = d->c, shape[1] = d->h, shape[2] = d->w;
  else shape[0] = d->h, shape[1] = d->w, shape[2] = d->c;
}

/* One image through the pipeline into dst (contiguous, d->fdt). */
static luon_status run_one(const luon_transform_step *steps, int32_t n, img in, const dims *d,
                           uint64_t seed, uint64_t sample, bool reference, void *dst) {
  luon_status st;
  int64_t numel = (int64_t)d->h * d->w * d->c;
  void *tmp = NULL, *target = dst;
  int work_dt = d->dt;
  if (work_dt != d->fdt) {
    tmp = malloc((size_t)numel * 4 + 1);
    if (!tmp) return lu_error(LUON_ENOMEM, "transform: out of memory");
    target = tmp;
  }
  if (reference) {
    img cur = in;
    st = run_ref(steps, n, &cur, seed, sample);
    if (st == LUON_OK) {
      size_t es = cur.dt == LUON_DTYPE_U8 ? 1 : 4;
      if (cur.chw) memcpy(target, cur.data, (size_t)numel * es);
      else
        for (int y = 0; y < cur.h; y++)
          memcpy((char *)target + (size_t)y * cur.w * cur.c * es, (char *)cur.data + (int64_t)y * cur.rs * es,
                 (size_t)cur.w * cur.c * es);
    }
    img_free(&cur);
  } else {
    fstate f;
    memset(&f, 0, sizeof f);
    f.cur = in;
    st = run_fused(steps, n, &f, seed, sample);
    if (st == LUON_OK) st = fused_write(&f, target);
    img_free(&f.cur);
  }
  if (st == LUON_OK && tmp) lu_convert(dst, d->fdt, tmp, work_dt, numel);
  free(tmp);
  return st;
}

static luon_status apply(const luon_transform_step *steps, int32_t n, const luon_tensor *t, uint64_t seed,
                         uint64_t sample, bool reference, luon_tensor **out, void *dst, int64_t dst_bytes) {
  const char *who = n > 0 && steps ? kind_name(steps[0].kind) : "transform";
  bool chw = n > 0 && steps && steps[0].kind == LUON_TF_NORMALIZE;
  img in;
  LU_TRY(input_img(t, 0, chw, &in, who));
  dims d = dims_of(&in);
  luon_status st = plan(steps, n, &d);
  if (st) {
    img_free(&in);
    return st;
  }
  int64_t batch = t->ndim == 4 ? t->shape[0] : 1;
  int64_t numel = (int64_t)d.h * d.w * d.c, bytes = numel * luon_dtype_size(d.fdt);
  luon_tensor *res = NULL;
  if (out) {
    int64_t shape[4];
    shape[0] = batch;
    shape_of(&d, shape + (t->ndim == 4));
    st = lu_tensor_new(d.fdt, t->ndim, shape, (lu_device){LUON_CPU, 0}, &res);
    if (st) {
      img_free(&in);
      return st;
    }
    dst = lu_data(res);
  } else if (dst_bytes != bytes * batch) {
    img_free(&in);
    return lu_error(LUON_EINVAL, "transform_apply_into: the result takes %lld bytes, the buffer has %lld",
                    (long long)(bytes * batch), (long long)dst_bytes);
  }
  for (int64_t i = 0; i < batch && st == LUON_OK; i++) {
    if (i > 0) st = input_img(t, i, chw, &in, who);
    if (st == LUON_OK)
      st = run_one(steps, n, in, &d, seed, sample + (uint64_t)i, reference, (char *)dst + i * bytes);
  }
  if (st) {
    luon_tensor_release(res);
    return st;
  }
  if (out) *out = res;
  return LUON_OK;
}

luon_status luon_transform_apply(const luon_transform_step *steps, int32_t nsteps, const luon_tensor *img_,
                                 uint64_t seed, uint64_t sample_index, luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "transform_apply: out is NULL");
  *out = NULL;
  return apply(steps, nsteps, img_, seed, sample_index, false, out, NULL, 0);
}

luon_status luon_transform_apply_reference(const luon_transform_step *steps, int32_t nsteps,
                                           const luon_tensor *img_, uint64_t seed, uint64_t sample_index,
                                           luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "transform_apply_reference: out is NULL");
  *out = NULL;
  return apply(steps, nsteps, img_, seed, sample_index, true, out, NULL, 0);
}

luon_status luon_transform_apply_into(const luon_transform_step *steps, int32_t nsteps, const luon_tensor *img_,
                                      uint64_t seed, uint64_t sample_index, void *dst, int64_t dst_bytes) {
  if (!dst) return lu_error(LUON_EINVAL, "transform_apply_into: dst is NULL");
  return apply(steps, nsteps, img_, seed, sample_index, false, NULL, dst, dst_bytes);
}

luon_status luon_transform_apply_raw(const luon_transform_step *steps, int32_t nsteps, const void *pixels,
                                     int32_t dtype, int32_t h, int32_t w, int32_t c, int64_t row_stride,
                                     uint64_t seed, uint64_t sample_index, void *dst, int64_t dst_bytes) {
  if (!pixels || !dst) return lu_error(LUON_EINVAL, "transform_apply_raw: pixels or dst is NULL");
  if (dtype != LUON_DTYPE_U8 && dtype != LUON_DTYPE_F32)
    return lu_error(LUON_EDTYPE, "transform_apply_raw: pixels must be uint8 or float32, got %s",
                    luon_dtype_name(dtype) ? luon_dtype_name(dtype) : "an unknown dtype");
  if (row_stride == 0) row_stride = (int64_t)w * c;
  if (row_stride < (int64_t)w * c)
    return lu_error(LUON_EINVAL, "transform_apply_raw: row_stride %lld is less than width*channels %lld",
                    (long long)row_stride, (long long)w * c);
  img in = {h, w, c, dtype, dtype, 0, row_stride, (void *)pixels, NULL};
  dims d = dims_of(&in);
  LU_TRY(plan(steps, nsteps, &d));
  int64_t bytes = (int64_t)d.h * d.w * d.c * luon_dtype_size(d.fdt);
  if (dst_bytes != bytes)
    return lu_error(LUON_EINVAL, "transform_apply_raw: the result takes %lld bytes, the buffer has %lld",
                    (long long)bytes, (long long)dst_bytes);
  return run_one(steps, nsteps, in, &d, seed, sample_index, false, dst);
}

luon_status luon_transform_out_shape(const luon_transform_step *steps, int32_t nsteps, int32_t ndim,
                                     const int64_t *in_shape, int32_t in_dtype, int64_t *out_shape,
                                     int32_t *out_dtype) {
  if (!in_shape || !out_shape)
    return lu_error(LUON_EINVAL, "transform_out_shape: %s is NULL", in_shape ? "out_shape" : "in_shape");
  if (ndim != 3)
    return lu_error(LUON_ESHAPE, "transform_out_shape: expects a 3-d (H,W,C) image shape");
  bool chw = nsteps > 0 && steps && steps[0].kind == LUON_TF_NORMALIZE;
  dims d = {(int)in_shape[chw ? 1 : 0], (int)in_shape[chw ? 2 : 1], (int)in_shape[chw ? 0 : 2], chw,
            in_dtype == LUON_DTYPE_U8 ? LUON_DTYPE_U8 : LUON_DTYPE_F32, in_dtype};
  LU_TRY(plan(steps, nsteps, &d));
  shape_of(&d, out_shape);
  if (out_dtype) *out_dtype = d.fdt;
  return LUON_OK;
}

int32_t luon_transform_is_random(const luon_transform_step *steps, int32_t nsteps) {
  if (!steps && nsteps > 0) {
    lu_error(LUON_EINVAL, "transform_is_random: steps is NULL but nsteps is %d", nsteps);
    return 0;
  }
  for (int32_t k = 0; k < nsteps; k++)
    if (is_random(steps[k].kind)) return 1;
  return 0;
}

luon_status luon_transform_next_seed(uint64_t *out) {
  if (!out) return lu_error(LUON_EINVAL, "transform_next_seed: out is NULL");
  uint64_t key, ctr = lu_rng_reserve((lu_device){LUON_CPU, 0}, 1, &key);
  *out = lu_splitmix64(key ^ lu_splitmix64(ctr));
  return LUON_OK;
}

luon_status luon_image_resize(const luon_tensor *src, int32_t w, int32_t h, int32_t interp, luon_tensor **out) {
  if (!out) return lu_error(LUON_EINVAL, "image_resize: out is NULL");
  *out = NULL;
  if (!src) return lu_error(LUON_EINVAL, "image_resize: src is NULL");
  if (src->ndim != 3)
    return lu_error(LUON_ESHAPE, "image_resize: expects an (H,W,C) image, got %s",
                    lu_shape_str(src->ndim, src->shape));
  luon_transform_step s = {.kind = LUON_TF_RESIZE, .width = w, .height = h, .interp = interp};
  return apply(&s, 1, src, 0, 0, false, out, NULL, 0);
}
