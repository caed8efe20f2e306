/* transform.c: Gluon's vision transforms as a C pipeline over one image
 * (HWC uint8/float32 in; CHW float32 after ToTensor). Not an op: no tape, no
 * devices; the data loader calls it per sample.
 *
 * Each step has a naive reference (transform_ref.c: one step at a time, a
 * buffer per step). The fast path (transform_fused.c) gives the same bytes:
 * a Resize followed by a crop resamples only the kept region; flips,
 * brightness/contrast (as a per-channel uint8 lookup table), ToTensor and
 * Normalize become one write. Resizing is resample.c. Here: what both
 * paths share (the images, the random draws, MXNet's geometry rules), the
 * validation of a pipeline and its output shape, and the entry points. */
#include "data.h"

/* ---- images ------------------------------------------------------------ */

luon_status lu_img_new(img *m, int h, int w, int c, int dt, int chw, int fdt, const char *who) {
  size_t bytes = (size_t)h * w * c * (dt == LUON_DTYPE_U8 ? 1 : 4);
  void *p = malloc(bytes ? bytes : 1);
  if (!p) return lu_error(LUON_ENOMEM, "%s: out of memory for a %dx%dx%d image", who, h, w, c);
  *m = (img){h, w, c, dt, fdt, chw, chw ? (int64_t)w : (int64_t)w * c, p, p};
  return LUON_OK;
}

const char *lu_tf_name(int32_t k) {
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

/* ---- randomness: the draws of the random steps ---------------------------- */

bool lu_draw_flip(const luon_transform_step *s, rng *r) {
  if (s->use_fixed) return s->fixed[0] != 0.0f;
  if (s->p <= 0.0f) return false;
  if (s->p >= 1.0f) return true;
  return rng_unit(r) < s->p;
}

float lu_draw_alpha(const luon_transform_step *s, rng *r, float amount) {
  if (s->use_fixed) return s->fixed[0];
  float lo = 1.0f - amount;
  return rng_uniform(r, lo > 0.0f ? lo : 0.0f, 1.0f + amount);
}

/* Jitter: a shuffled order of the four adjustments (0 brightness, 1 contrast,
 * 2 saturation, 3 hue) and each enabled one's alpha, drawn in that order. */
void lu_draw_jitter(const luon_transform_step *s, rng *r, int order[4], float alpha[4]) {
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

/* ---- geometry rules (MXNet) ---------------------------------------------- */

/* Resize's output (w, h): keep_ratio makes the short side `width`. */
void lu_resize_dims(const luon_transform_step *s, int w, int h, int *ow, int *oh) {
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
void lu_crop_rect(const luon_transform_step *s, int w, int h, rng *r, int rect[4]) {
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
                    "(%d,%d,%d); put %s before ToTensor", lu_tf_name(s->kind), d->c, d->h, d->w,
                    lu_tf_name(s->kind));
  return LUON_OK;
}

static luon_status need_color(const luon_transform_step *s, const dims *d) {
  LU_TRY(need_hwc(s, d));
  if (d->c != 1 && d->c != 3)
    return lu_error(LUON_ESHAPE, "%s: expects 1 or 3 channels, got an image of shape (%d,%d,%d)",
                    lu_tf_name(s->kind), d->h, d->w, d->c);
  if (s->kind == LUON_TF_LIGHTING && d->c != 3)
    return lu_error(LUON_ESHAPE, "RandomLighting: expects 3 channels, got an image of shape (%d,%d,%d)",
                    d->h, d->w, d->c);
  return LUON_OK;
}

static luon_status need_size(const luon_transform_step *s) {
  if (s->width <= 0 || (!(s->kind == LUON_TF_RESIZE && s->keep_ratio) && s->height <= 0))
    return lu_error(LUON_EINVAL, "%s: size must be greater than 0, got (%d, %d)", lu_tf_name(s->kind),
                    s->width, s->height);
  if (s->interp < 0 || s->interp > 3)
    return lu_error(LUON_EINVAL, "%s: interpolation %d is not supported (0 nearest, 1 bilinear, "
                    "2 bicubic, 3 area)", lu_tf_name(s->kind), s->interp);
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
    lu_resize_dims(s, d->w, d->h, &ow, &oh);
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
      return lu_error(LUON_EINVAL, "%s: amounts must be >= 0, got %g", lu_tf_name(s->kind),
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
  LU_TRY(lu_img_new(&o, m->h, m->w, m->c, dt, chw, t->dtype, who));
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
    st = lu_run_ref(steps, n, &cur, seed, sample);
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
    st = lu_run_fused(steps, n, in, seed, sample, target);
  }
  if (st == LUON_OK && tmp) lu_convert(dst, d->fdt, tmp, work_dt, numel);
  free(tmp);
  return st;
}

static luon_status apply(const luon_transform_step *steps, int32_t n, const luon_tensor *t, uint64_t seed,
                         uint64_t sample, bool reference, luon_tensor **out, void *dst, int64_t dst_bytes) {
  const char *who = n > 0 && steps ? lu_tf_name(steps[0].kind) : "transform";
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
