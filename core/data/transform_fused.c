/* transform_fused.c: the transforms' fast path. Same bytes as the
 * reference (transform_ref.c), with less memory traffic: see below. */
#include "data.h"

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
  LU_TRY(lu_img_new(&o, f->rh, f->rw, f->cur.c, f->cur.dt, 0, f->cur.fdt, "Resize"));
  luon_status st = lu_resample(&f->cur, f->W, f->H, f->interp, f->x0, f->y0, f->rw, f->rh, o.data);
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
  LU_TRY(lu_img_new(&o, m->h, m->w, m->c, m->dt, 0, m->fdt, "RandomColorJitter"));
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
  if (f->flip_lr) LU_TRY(lu_flip_ref(&f->cur, true));
  if (f->flip_tb) LU_TRY(lu_flip_ref(&f->cur, false));
  f->flip_lr = f->flip_tb = false;
  return LUON_OK;
}

static luon_status flush_all(fstate *f) {
  LU_TRY(flush_rs(f));
  LU_TRY(flush_flips(f));
  if (f->tensor) LU_TRY(lu_to_tensor_ref(&f->cur));
  if (f->norm) {
    luon_transform_step s = {.kind = LUON_TF_NORMALIZE, .nmean = 3, .nstd = 3};
    memcpy(s.mean, f->mean, sizeof f->mean);
    memcpy(s.std, f->std, sizeof f->std);
    LU_TRY(lu_normalize_ref(&f->cur, &s));
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
    return lu_color_step_ref(&f->cur, s, r);
  }
  if (s->kind == LUON_TF_BRIGHTNESS) return lut_color(f, COL_BRIGHTNESS, lu_draw_alpha(s, r, s->brightness));
  if (s->kind == LUON_TF_CONTRAST) return lut_color(f, COL_CONTRAST, lu_draw_alpha(s, r, s->contrast));
  int order[4];
  float al[4];
  const float amt[4] = {s->brightness, s->contrast, s->saturation, s->hue};
  lu_draw_jitter(s, r, order, al);
  for (int k = 0; k < 4; k++) {
    int j = order[k];
    if (!(amt[j] > 0.0f)) continue;
    if (j == COL_BRIGHTNESS || j == COL_CONTRAST) {
      LU_TRY(lut_color(f, j, al[j]));
    } else {
      LU_TRY(flush_rs(f));
      LU_TRY(flush_lut(f));
      LU_TRY(lu_color_ref(&f->cur, j, &al[j], "RandomColorJitter"));
    }
  }
  return LUON_OK;
}

/* A crop step on the pending state: narrows a pending resize when the crop
 * needs no resize of its own. */
static luon_status fused_crop(fstate *f, const luon_transform_step *s, rng *r) {
  if (s->kind == LUON_TF_RANDOM_CROP && s->pad > 0) {
    LU_TRY(flush_rs(f));
    return lu_crop_ref(&f->cur, s, r);
  }
  int rect[4];
  lu_crop_rect(s, f_w(f), f_h(f), r, rect);
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
      lu_resize_dims(s, f->cur.w, f->cur.h, &ow, &oh);
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
      if (lu_draw_flip(s, &r)) {
        if (s->kind == LUON_TF_FLIP_LR) f->flip_lr = !f->flip_lr;
        else f->flip_tb = !f->flip_tb;
      }
      break;
    case LUON_TF_TO_TENSOR:
      if (f->cur.dt != LUON_DTYPE_U8) {
        LU_TRY(flush_all(f));
        LU_TRY(lu_to_tensor_ref(&f->cur));
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
        LU_TRY(lu_normalize_ref(&f->cur, s));
      }
      break;
    case LUON_TF_CAST:
      LU_TRY(flush_all(f));
      LU_TRY(lu_cast_ref(&f->cur, s));
      break;
    default:
      if (f->tensor) { /* a colour step after ToTensor (a float CHW image) */
        LU_TRY(flush_all(f));
        LU_TRY(lu_step_ref(&f->cur, s, &r));
      } else {
        LU_TRY(fused_color(f, s, &r));
      }
      break;
    }
  }
  return LUON_OK;
}

/* ---- entry -------------------------------------------------------------- */

luon_status lu_run_fused(const luon_transform_step *steps, int32_t n, img in, uint64_t seed, uint64_t sample,
                         void *dst) {
  fstate f;
  memset(&f, 0, sizeof f);
  f.cur = in;
  luon_status st = run_fused(steps, n, &f, seed, sample);
  if (st == LUON_OK) st = fused_write(&f, dst);
  img_free(&f.cur);
  return st;
}
