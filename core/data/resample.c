/* resample.c: resizing an image with OpenCV's cv::resize conventions (pixel
 * centers), for Resize, the crops that resize and luon_image_resize; the
 * fused path resamples only the region a later crop keeps.
 *
 * Separable: per output column/row a few source taps and weights. Bilinear
 * and bicubic on uint8 use OpenCV's 11-bit fixed-point weights, an int
 * horizontal pass and a rounded >>22 vertical pass (OpenCV's scalar form; its
 * SSE path rounds in two steps and can differ by 1 on rare pixels). Area on
 * uint8 accumulates in float and rounds half up. */
#include "data.h"

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
luon_status lu_resample(const img *s, int W, int H, int interp, int ox0, int oy0, int rw, int rh,
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
luon_status lu_resize_img(const img *s, int W, int H, int interp, img *out, const char *who) {
  LU_TRY(lu_img_new(out, H, W, s->c, s->dt, 0, s->fdt, who));
  luon_status st = lu_resample(s, W, H, interp, 0, 0, W, H, out->data);
  if (st) img_free(out);
  return st;
}
