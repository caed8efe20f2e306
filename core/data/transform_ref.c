/* transform_ref.c: the reference transforms: each step naive and alone, a
 * new buffer per step, written to read as MXNet's definitions. The fused
 * path (transform_fused.c) must give these bytes, and the tests compare the
 * two; it also calls these for the steps it does not fuse. */
#include "data.h"

/* ---- colour (MXNet src/operator/image/image_random-inl.h) ---------------- */

static const float GRAY[3] = {0.299f, 0.587f, 0.114f};

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

/* One colour adjustment of an HWC image into a new image (reference). For
 * lighting, a[0..2] are the PCA alphas; for hue a[0] is the shift in turns. */
luon_status lu_color_ref(img *cur, int what, const float *a, const char *who) {
  int c = cur->c;
  if ((what == COL_SATURATION || what == COL_HUE) && c == 1) return LUON_OK; /* gray stays gray */
  img o = {0};
  LU_TRY(lu_img_new(&o, cur->h, cur->w, c, cur->dt, 0, cur->fdt, who));
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

/* ---- reference: one step at a time --------------------------------------- */

luon_status lu_flip_ref(img *cur, bool lr) {
  img o = {0};
  LU_TRY(lu_img_new(&o, cur->h, cur->w, cur->c, cur->dt, 0, cur->fdt, lr ? "RandomFlipLeftRight" : "RandomFlipTopBottom"));
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

luon_status lu_crop_ref(img *cur, const luon_transform_step *s, rng *r) {
  if (s->kind == LUON_TF_RANDOM_CROP && s->pad > 0) {
    img o = {0};
    int p = s->pad;
    LU_TRY(lu_img_new(&o, cur->h + 2 * p, cur->w + 2 * p, cur->c, cur->dt, 0, cur->fdt, "RandomCrop"));
    size_t es = cur->dt == LUON_DTYPE_U8 ? 1 : 4;
    memset(o.data, 0, (size_t)o.h * o.rs * es);
    for (int y = 0; y < cur->h; y++)
      memcpy((char *)o.data + ((int64_t)(y + p) * o.rs + (int64_t)p * o.c) * es,
             (char *)cur->data + (int64_t)y * cur->rs * es, (size_t)cur->w * cur->c * es);
    img_replace(cur, o);
  }
  int rect[4];
  lu_crop_rect(s, cur->w, cur->h, r, rect);
  img v = img_view(cur, rect[0], rect[1], rect[2], rect[3]);
  if (rect[2] != s->width || rect[3] != s->height) {
    img o = {0};
    LU_TRY(lu_resize_img(&v, s->width, s->height, s->interp, &o, lu_tf_name(s->kind)));
    img_replace(cur, o);
  } else {
    img_replace(cur, v);
  }
  return LUON_OK;
}

luon_status lu_to_tensor_ref(img *cur) {
  img o = {0};
  LU_TRY(lu_img_new(&o, cur->h, cur->w, cur->c, LUON_DTYPE_F32, 1, LUON_DTYPE_F32, "ToTensor"));
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

luon_status lu_normalize_ref(img *cur, const luon_transform_step *s) {
  img o = {0};
  LU_TRY(lu_img_new(&o, cur->h, cur->w, cur->c, LUON_DTYPE_F32, 1, cur->fdt == LUON_DTYPE_U8 ? LUON_DTYPE_F32 : cur->fdt, "Normalize"));
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

luon_status lu_cast_ref(img *cur, const luon_transform_step *s) {
  int dt = s->dtype == LUON_DTYPE_U8 ? LUON_DTYPE_U8 : LUON_DTYPE_F32;
  if (dt == cur->dt) {
    cur->fdt = s->dtype;
    return LUON_OK;
  }
  img o = {0};
  LU_TRY(lu_img_new(&o, cur->h, cur->w, cur->c, dt, cur->chw, s->dtype, "Cast"));
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
luon_status lu_color_step_ref(img *cur, const luon_transform_step *s, rng *r) {
  float a[4];
  switch (s->kind) {
  case LUON_TF_BRIGHTNESS: a[0] = lu_draw_alpha(s, r, s->brightness); return lu_color_ref(cur, COL_BRIGHTNESS, a, "RandomBrightness");
  case LUON_TF_CONTRAST: a[0] = lu_draw_alpha(s, r, s->contrast); return lu_color_ref(cur, COL_CONTRAST, a, "RandomContrast");
  case LUON_TF_SATURATION: a[0] = lu_draw_alpha(s, r, s->saturation); return lu_color_ref(cur, COL_SATURATION, a, "RandomSaturation");
  case LUON_TF_HUE: a[0] = lu_draw_alpha(s, r, s->hue); return lu_color_ref(cur, COL_HUE, a, "RandomHue");
  case LUON_TF_LIGHTING:
    for (int k = 0; k < 3; k++) a[k] = s->use_fixed ? s->fixed[k] : rng_normal(r) * s->alpha;
    return lu_color_ref(cur, COL_LIGHTING, a, "RandomLighting");
  default: { /* jitter */
    int order[4];
    float al[4];
    const float amt[4] = {s->brightness, s->contrast, s->saturation, s->hue};
    lu_draw_jitter(s, r, order, al);
    for (int k = 0; k < 4; k++) {
      int j = order[k];
      if (!(amt[j] > 0.0f)) continue;
      LU_TRY(lu_color_ref(cur, j, &al[j], "RandomColorJitter"));
    }
    return LUON_OK;
  }
  }
}

luon_status lu_step_ref(img *cur, const luon_transform_step *s, rng *r) {
  switch (s->kind) {
  case LUON_TF_CAST: return lu_cast_ref(cur, s);
  case LUON_TF_TO_TENSOR: return lu_to_tensor_ref(cur);
  case LUON_TF_NORMALIZE: return lu_normalize_ref(cur, s);
  case LUON_TF_RESIZE: {
    int ow, oh;
    img o = {0};
    lu_resize_dims(s, cur->w, cur->h, &ow, &oh);
    LU_TRY(lu_resize_img(cur, ow, oh, s->interp, &o, "Resize"));
    img_replace(cur, o);
    return LUON_OK;
  }
  case LUON_TF_CENTER_CROP:
  case LUON_TF_RANDOM_CROP:
  case LUON_TF_RANDOM_RESIZED_CROP: return lu_crop_ref(cur, s, r);
  case LUON_TF_FLIP_LR:
  case LUON_TF_FLIP_TB:
    if (!lu_draw_flip(s, r)) return LUON_OK;
    return lu_flip_ref(cur, s->kind == LUON_TF_FLIP_LR);
  default: return lu_color_step_ref(cur, s, r);
  }
}

luon_status lu_run_ref(const luon_transform_step *steps, int32_t n, img *cur, uint64_t seed,
                           uint64_t sample) {
  for (int32_t k = 0; k < n; k++) {
    rng r;
    rng_init(&r, seed, sample, k);
    LU_TRY(lu_step_ref(cur, &steps[k], &r));
  }
  return LUON_OK;
}
