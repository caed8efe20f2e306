/* pipeline.c: the data loader's worker threads. Each sample is read and
 * decoded (image.c) or taken from an in-memory uint8 array, run through the
 * transform steps (transform.c) straight into its slot of a contiguous batch
 * tensor (in pinned memory when asked and a GPU is present, so its copy to
 * the GPU is asynchronous), and batches come back in order. No Lua runs
 * here; the sampler and everything else stays in Lua. Also the directory
 * listing ImageFolderDataset uses. */
#include "data.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define MSG 1024

/* ---- one sample ------------------------------------------------------- */


uint64_t luon_loader_epoch_seed(uint64_t seed, int64_t epoch) {
  return lu_mix64(seed ^ lu_mix64((uint64_t)epoch + 0x9E3779B97F4A7C15ull));
}

/* Width and height from a JPEG's frame header (SOFn), without decoding. */
static bool jpeg_dims(const uint8_t *p, size_t n, int *w, int *h) {
  if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return false;
  size_t i = 2;
  while (i + 4 <= n) {
    if (p[i] != 0xFF) return false;
    uint8_t m = p[i + 1];
    if (m == 0xFF) {
      i++;
      continue;
    }
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) {
      i += 2;
      continue;
    }
    if (m == 0xD9 || m == 0xDA) return false;
    size_t len = ((size_t)p[i + 2] << 8) | p[i + 3];
    if (len < 2) return false;
    if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
      if (i + 9 > n) return false;
      *h = (p[i + 5] << 8) | p[i + 6];
      *w = (p[i + 7] << 8) | p[i + 8];
      return *w > 0 && *h > 0;
    }
    i += 2 + len;
  }
  return false;
}

/* A pipeline that starts with a Resize may decode a JPEG at a reduced DCT
 * scale (1/2, 1/4, 1/8) that still covers the resize's output. The Resize
 * then gets its output size from the full image's header, fixed, so shapes
 * are exactly those of a full decode. *first is the step to use as step 0. */
static void decode_hint(const luon_transform_step *steps, int32_t n, const uint8_t *p, size_t len,
                        int *min_w, int *min_h, luon_transform_step *first) {
  *min_w = *min_h = 0;
  if (n < 1 || steps[0].kind != LUON_TF_RESIZE) return;
  *first = steps[0];
  int w, h;
  if (!jpeg_dims(p, len, &w, &h)) return;
  if (first->keep_ratio) {
    int64_t size = first->width;
    int ow, oh;
    if (h > w) ow = (int)size, oh = (int)((int64_t)h * size / w);
    else oh = (int)size, ow = (int)((int64_t)w * size / h);
    if (ow < 1 || oh < 1) return;
    first->keep_ratio = 0, first->width = ow, first->height = oh;
  }
  *min_w = first->width, *min_h = first->height;
}

/* A decoded (or borrowed) sample and the steps to run on it. */
typedef struct sample {
  luon_tensor *img;              /* decoded image (+1), or NULL for raw pixels */
  const uint8_t *px;             /* raw pixels (in-memory source) */
  int h, w, c;
  const luon_transform_step *steps;
  int32_t nsteps;
  luon_transform_step buf[16];   /* the steps with a fixed first Resize */
  luon_transform_step *heap;
} sample;

static void sample_free(sample *s) {
  luon_tensor_release(s->img);
  free(s->heap);
  s->img = NULL, s->heap = NULL;
}

/* Read and decode path for the steps. */
static luon_status sample_decode(const char *path, int32_t flag, const luon_transform_step *steps,
                                 int32_t n, sample *s) {
  memset(s, 0, sizeof *s);
  s->steps = steps, s->nsteps = n;
  uint8_t *bytes = NULL;
  size_t len = 0;
  LU_TRY(lu_read_file(NULL, path, 0, &bytes, &len));
  int min_w, min_h;
  luon_transform_step first;
  decode_hint(steps, n, bytes, len, &min_w, &min_h, &first);
  luon_status st = luon_image_decode(bytes, len, flag, min_w, min_h, path, &s->img);
  free(bytes);
  LU_TRY(st);
  if (min_w > 0) { /* a Resize with a size fixed from the header */
    luon_transform_step *copy = s->buf;
    if (n > (int32_t)(sizeof s->buf / sizeof s->buf[0]) && !(copy = s->heap = malloc(sizeof *copy * n))) {
      sample_free(s);
      return lu_error(LUON_ENOMEM, "out of memory for %d transform steps", n);
    }
    memcpy(copy, steps, sizeof *copy * n);
    copy[0] = first;
    s->steps = copy;
  }
  s->h = (int)s->img->shape[0], s->w = (int)s->img->shape[1], s->c = (int)s->img->shape[2];
  return LUON_OK;
}

/* Shape (3) and dtype of the sample's result. */
static luon_status sample_shape(const sample *s, int64_t *shape, int32_t *dtype) {
  int64_t in[3] = {s->h, s->w, s->c};
  return luon_transform_out_shape(s->steps, s->nsteps, 3, in, LUON_DTYPE_U8, shape, dtype);
}

static luon_status sample_run(const sample *s, uint64_t seed, uint64_t index, void *dst, int64_t bytes) {
  if (s->img) return luon_transform_apply_into(s->steps, s->nsteps, s->img, seed, index, dst, bytes);
  return luon_transform_apply_raw(s->steps, s->nsteps, s->px, LUON_DTYPE_U8, s->h, s->w, s->c, 0, seed,
                                  index, dst, bytes);
}

luon_status luon_loader_load_image(const char *path, int32_t flag, const luon_transform_step *steps,
                                   int32_t nsteps, uint64_t seed, uint64_t sample_index, luon_tensor **out) {
  if (!out || !path) return lu_error(LUON_EINVAL, "loader_load_image: NULL path or out");
  *out = NULL;
  if (nsteps < 0 || (nsteps > 0 && !steps))
    return lu_error(LUON_EINVAL, "loader_load_image: bad steps (%d)", nsteps);
  sample s;
  LU_TRY(sample_decode(path, flag, steps, nsteps, &s));
  int64_t shape[3];
  int32_t dt;
  luon_tensor *t = NULL;
  luon_status st = sample_shape(&s, shape, &dt);
  if (st == LUON_OK) st = lu_tensor_new(dt, 3, shape, (lu_device){LUON_CPU, 0}, &t);
  if (st == LUON_OK) st = sample_run(&s, seed, sample_index, lu_data(t), t->size * luon_dtype_size(dt));
  sample_free(&s);
  if (st != LUON_OK) {
    luon_tensor_release(t);
    return st;
  }
  *out = t;
  return LUON_OK;
}

/* ---- the loader --------------------------------------------------------- */

/* One batch in flight. */
typedef struct slot {
  int64_t batch;                 /* which batch, -1 when free */
  int64_t remaining;             /* samples not yet done */
  luon_tensor *data;             /* (B, ...) allocated by the first finished sample */
  int64_t sample_bytes;
  uint8_t *ok;                   /* per sample: 1 written, 0 skipped */
  int64_t err_pos;               /* lowest failing position (-1: none) */
  luon_status err;
  char msg[MSG];
} slot;

struct luon_loader {
  /* the source: files or an (N,H,W,C) uint8 array */
  int64_t n;
  char **paths;
  luon_tensor *images;
  int64_t *labels;
  int32_t flag;
  luon_transform_step *steps;
  int32_t nsteps;
  int32_t on_error;
  uint64_t seed;
  int32_t pin;                   /* pinned pool of the batches, -1: plain cpu(0) memory */
  int32_t label_dtype;           /* of the label batches: I64 (default) or I32 */
  /* threads */
  int nworkers, started;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  bool stop;
  int active;                    /* workers inside a sample */
  /* the epoch */
  int64_t *order, norder;
  int64_t *bounds, nbatch, max_batch;
  uint64_t eseed;
  int64_t next_pos, claim_batch, consumed;
  bool failed;
  int nslots;
  slot *slots;
  /* skipped samples (on_error = skip), over the loader's life */
  int64_t skipped;
  char skip_msg[MSG];
};

static void slot_clear(slot *s) {
  luon_tensor_release(s->data);
  s->data = NULL;
  s->batch = -1;
  s->remaining = 0;
  s->err_pos = -1;
  s->err = LUON_OK;
  s->msg[0] = 0;
}

/* Called with mu held: make slot for batch b ready for its samples. */
static slot *slot_open(luon_loader *l, int64_t b) {
  slot *s = &l->slots[b % l->nslots];
  if (s->batch != b) {
    slot_clear(s);
    s->batch = b;
    s->remaining = l->bounds[b + 1] - l->bounds[b];
    memset(s->ok, 0, (size_t)l->max_batch);
  }
  return s;
}

/* Record a failure of position pos (mu held): keep the lowest position's. */
static void slot_fail(luon_loader *l, slot *s, int64_t pos, luon_status st, const char *msg) {
  if (l->on_error == 1 && st != LUON_ESHAPE && st != LUON_ENOMEM) {
    l->skipped++;
    if (!l->skip_msg[0]) snprintf(l->skip_msg, MSG, "%s", msg);
    return;
  }
  if (s->err_pos < 0 || pos < s->err_pos) {
    s->err_pos = pos;
    s->err = st;
    snprintf(s->msg, MSG, "%s", msg);
  }
}

/* Load sample at epoch position pos of batch b into its slot. Takes and
 * releases mu around the slot's bookkeeping; called without mu held. */
static void process(luon_loader *l, int64_t pos, int64_t b, slot *s) {
  int64_t idx = l->order[pos], j = pos - l->bounds[b];
  char msg[MSG];
  sample smp;
  luon_status st;
  if (l->paths) {
    st = sample_decode(l->paths[idx], l->flag, l->steps, l->nsteps, &smp);
  } else {
    memset(&smp, 0, sizeof smp);
    smp.steps = l->steps, smp.nsteps = l->nsteps;
    smp.h = (int)l->images->shape[1], smp.w = (int)l->images->shape[2], smp.c = (int)l->images->shape[3];
    smp.px = (const uint8_t *)lu_data(l->images) + idx * (int64_t)smp.h * smp.w * smp.c;
    st = LUON_OK;
  }
  int64_t shape[4];
  int32_t dt = 0;
  if (st == LUON_OK) st = sample_shape(&smp, shape + 1, &dt);
  if (st != LUON_OK) {
    /* decoding errors name the file themselves; shape errors do not */
    if (l->paths && smp.img) snprintf(msg, MSG, "DataLoader: sample %lld ('%s'): %s", (long long)idx,
                                      l->paths[idx], luon_last_error());
    else snprintf(msg, MSG, "DataLoader: sample %lld: %s", (long long)idx, luon_last_error());
    sample_free(&smp);
    pthread_mutex_lock(&l->mu);
    slot_fail(l, s, pos, st, msg);
    s->remaining--;
    pthread_mutex_unlock(&l->mu);
    return;
  }
  int64_t bytes = shape[1] * shape[2] * shape[3] * luon_dtype_size(dt);
  pthread_mutex_lock(&l->mu);
  if (!s->data) {
    shape[0] = l->bounds[b + 1] - l->bounds[b];
    st = l->pin >= 0 ? lu_tensor_new_pinned(dt, 4, shape, l->pin, &s->data)
                     : lu_tensor_new(dt, 4, shape, (lu_device){LUON_CPU, 0}, &s->data);
    if (st != LUON_OK) snprintf(msg, MSG, "DataLoader: batch %lld: %s", (long long)b, luon_last_error());
    else s->sample_bytes = bytes;
  } else if (s->data->dtype != dt || s->data->shape[1] != shape[1] || s->data->shape[2] != shape[2] ||
             s->data->shape[3] != shape[3]) {
    char a[64], c[64];
    snprintf(a, sizeof a, "%s", lu_shape_str(3, shape + 1));
    snprintf(c, sizeof c, "%s", lu_shape_str(3, s->data->shape + 1));
    st = LUON_ESHAPE;
    snprintf(msg, MSG, "DataLoader: sample %lld%s%s%s gives a %s of shape %s but other samples of its batch "
             "give %s of %s; batching needs one shape (add a Resize or a crop to the transform)",
             (long long)idx, l->paths ? " ('" : "", l->paths ? l->paths[idx] : "", l->paths ? "')" : "",
             luon_dtype_name(dt), a, luon_dtype_name(s->data->dtype), c);
  }
  char *dst = s->data && st == LUON_OK ? (char *)lu_data(s->data) + j * bytes : NULL;
  if (st != LUON_OK) {
    slot_fail(l, s, pos, st, msg);
    s->remaining--;
    pthread_mutex_unlock(&l->mu);
    sample_free(&smp);
    return;
  }
  pthread_mutex_unlock(&l->mu);
  st = sample_run(&smp, l->eseed, (uint64_t)idx, dst, bytes);
  if (st != LUON_OK)
    snprintf(msg, MSG, "DataLoader: sample %lld%s%s%s: %s", (long long)idx, l->paths ? " ('" : "",
             l->paths ? l->paths[idx] : "", l->paths ? "')" : "", luon_last_error());
  sample_free(&smp);
  pthread_mutex_lock(&l->mu);
  if (st != LUON_OK) slot_fail(l, s, pos, st, msg);
  else s->ok[j] = 1;
  s->remaining--;
  pthread_mutex_unlock(&l->mu);
}

/* Called with mu held: the next position a worker may take, or -1. */
static int64_t claim(luon_loader *l, int64_t *batch) {
  if (l->next_pos >= l->norder) return -1;
  while (l->bounds[l->claim_batch + 1] <= l->next_pos) l->claim_batch++;
  if (l->claim_batch >= l->consumed + l->nslots) return -1;
  *batch = l->claim_batch;
  return l->next_pos++;
}

static void *worker(void *arg) {
  luon_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    int64_t b = 0, pos;
    while (!l->stop && (pos = claim(l, &b)) < 0) pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->stop) break;
    slot *s = slot_open(l, b);
    l->active++;
    pthread_mutex_unlock(&l->mu);
    process(l, pos, b, s);
    pthread_mutex_lock(&l->mu);
    l->active--;
    pthread_cond_broadcast(&l->done_cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* Stop the current epoch's work and wait for the workers to leave their
 * samples (mu held). */
static void quiesce(luon_loader *l) {
  l->next_pos = l->norder;
  while (l->active > 0) pthread_cond_wait(&l->done_cv, &l->mu);
  for (int i = 0; i < l->nslots; i++) slot_clear(&l->slots[i]);
}

void luon_loader_free(luon_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = true;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->started; i++) pthread_join(l->threads[i], NULL);
  for (int i = 0; i < l->nslots; i++) {
    slot_clear(&l->slots[i]);
    free(l->slots[i].ok);
  }
  free(l->slots);
  free(l->threads);
  if (l->paths)
    for (int64_t i = 0; i < l->n; i++) free(l->paths[i]);
  free(l->paths);
  luon_tensor_release(l->images);
  free(l->labels);
  free(l->steps);
  free(l->order);
  free(l->bounds);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->done_cv);
  free(l);
}

luon_status luon_loader_new(int64_t n, const char *const *paths, const luon_tensor *images,
                            const int64_t *labels, int32_t flag, const luon_transform_step *steps,
                            int32_t nsteps, int32_t num_workers, int32_t prefetch, int32_t on_error,
                            uint64_t seed, luon_loader **out) {
  if (!out) return lu_error(LUON_EINVAL, "loader_new: out is NULL");
  *out = NULL;
  if (n < 0 || (n > 0 && !labels)) return lu_error(LUON_EINVAL, "loader_new: %lld samples need labels", (long long)n);
  if (!paths == !images)
    return lu_error(LUON_EINVAL, "loader_new: give either file paths or an images array, not %s",
                    paths ? "both" : "neither");
  if (images) {
    if (images->dtype != LUON_DTYPE_U8 || images->ndim != 4 || images->dev.type != LUON_CPU ||
        !lu_is_contiguous(images) || images->shape[0] != n || images->shape[3] < 1 || images->shape[3] > 4)
      return lu_error(LUON_EINVAL, "loader_new: images must be a contiguous uint8 (N,H,W,C) array on the "
                      "CPU with N = %lld and C = 1..4, got %s %s", (long long)n,
                      luon_dtype_name(images->dtype), lu_shape_str(images->ndim, images->shape));
  }
  if (flag != 0 && flag != 1) return lu_error(LUON_EINVAL, "loader_new: flag must be 1 (RGB) or 0 (gray), got %d", flag);
  if (nsteps < 0 || (nsteps > 0 && !steps)) return lu_error(LUON_EINVAL, "loader_new: bad steps (%d)", nsteps);
  if (num_workers < 0 || num_workers > 256)
    return lu_error(LUON_EINVAL, "DataLoader: num_workers must be 0..256, got %d", num_workers);
  if (on_error != 0 && on_error != 1)
    return lu_error(LUON_EINVAL, "loader_new: on_error must be 0 (raise) or 1 (skip), got %d", on_error);
  if (prefetch <= 0) prefetch = num_workers > 0 ? 2 * num_workers : 1;
  if (prefetch > 1024) prefetch = 1024;
  if (images) {
    int64_t in[3] = {images->shape[1], images->shape[2], images->shape[3]}, o[3];
    int32_t dt;
    LU_TRY(luon_transform_out_shape(steps, nsteps, 3, in, LUON_DTYPE_U8, o, &dt));
  }
  luon_loader *l = calloc(1, sizeof *l);
  if (!l) return lu_error(LUON_ENOMEM, "loader_new: out of memory");
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->done_cv, NULL);
  l->n = n, l->flag = flag, l->nsteps = nsteps, l->on_error = on_error, l->seed = seed, l->pin = -1;
  l->label_dtype = LUON_DTYPE_I64;
  l->nworkers = num_workers;
  l->nslots = prefetch;
  l->labels = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  l->steps = malloc(sizeof *steps * (size_t)(nsteps ? nsteps : 1));
  l->slots = calloc((size_t)prefetch, sizeof *l->slots);
  l->threads = calloc((size_t)(num_workers ? num_workers : 1), sizeof *l->threads);
  bool ok = l->labels && l->steps && l->slots && l->threads;
  if (ok && paths) {
    ok = (l->paths = calloc((size_t)(n ? n : 1), sizeof *l->paths)) != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
      if (!paths[i]) {
        luon_loader_free(l);
        return lu_error(LUON_EINVAL, "loader_new: path %lld is NULL", (long long)i);
      }
      ok = (l->paths[i] = strdup(paths[i])) != NULL;
    }
  }
  if (!ok) {
    luon_loader_free(l);
    return lu_error(LUON_ENOMEM, "loader_new: out of memory for %lld samples", (long long)n);
  }
  if (n) memcpy(l->labels, labels, sizeof(int64_t) * (size_t)n);
  if (nsteps) memcpy(l->steps, steps, sizeof *steps * (size_t)nsteps);
  if (images) l->images = luon_tensor_retain((luon_tensor *)images);
  for (int i = 0; i < prefetch; i++) l->slots[i].batch = -1, l->slots[i].err_pos = -1;
  *out = l;
  return LUON_OK;
}

luon_status luon_loader_start(luon_loader *l, const int64_t *order, const int64_t *bounds, int64_t nbatch,
                              int64_t epoch) {
  if (!l) return lu_error(LUON_EINVAL, "loader_start: NULL loader");
  if (nbatch < 0 || (nbatch > 0 && (!order || !bounds)))
    return lu_error(LUON_EINVAL, "loader_start: %lld batches need an order and bounds", (long long)nbatch);
  int64_t norder = nbatch ? bounds[nbatch] : 0, maxb = 1;
  for (int64_t b = 0; b < nbatch; b++) {
    if (bounds[b + 1] <= bounds[b] || (b == 0 && bounds[0] != 0))
      return lu_error(LUON_EINVAL, "DataLoader: batch %lld is empty or its bounds are out of order",
                      (long long)b + 1);
    if (bounds[b + 1] - bounds[b] > maxb) maxb = bounds[b + 1] - bounds[b];
  }
  for (int64_t i = 0; i < norder; i++)
    if (order[i] < 0 || order[i] >= l->n)
      return lu_error(LUON_EINVAL, "DataLoader: the sampler gave index %lld for a dataset of length %lld",
                      (long long)order[i], (long long)l->n);
  int64_t *o = malloc(sizeof *o * (size_t)(norder ? norder : 1));
  int64_t *bd = malloc(sizeof *bd * (size_t)(nbatch + 1));
  if (!o || !bd) {
    free(o), free(bd);
    return lu_error(LUON_ENOMEM, "loader_start: out of memory");
  }
  if (norder) memcpy(o, order, sizeof *o * (size_t)norder);
  if (nbatch) memcpy(bd, bounds, sizeof *bd * (size_t)(nbatch + 1));
  else bd[0] = 0;
  pthread_mutex_lock(&l->mu);
  quiesce(l);
  if (maxb > l->max_batch) {
    for (int i = 0; i < l->nslots; i++) {
      uint8_t *p = realloc(l->slots[i].ok, (size_t)maxb);
      if (!p) {
        pthread_mutex_unlock(&l->mu);
        free(o), free(bd);
        return lu_error(LUON_ENOMEM, "loader_start: out of memory");
      }
      l->slots[i].ok = p;
    }
    l->max_batch = maxb;
  }
  free(l->order), free(l->bounds);
  l->order = o, l->bounds = bd, l->norder = norder, l->nbatch = nbatch;
  l->eseed = luon_loader_epoch_seed(l->seed, epoch);
  l->next_pos = l->claim_batch = l->consumed = 0;
  l->failed = false;
  luon_status st = LUON_OK;
  sigset_t old_mask;
  lu_signals_block(&old_mask); /* the workers take the full mask */
  while (l->started < l->nworkers) {
    if (pthread_create(&l->threads[l->started], NULL, worker, l) != 0) {
      if (l->started == 0) st = lu_error(LUON_ENOMEM, "DataLoader: cannot start a worker thread");
      l->nworkers = l->started; /* run with what we have */
      break;
    }
    l->started++;
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  return st;
}

luon_status luon_loader_next(luon_loader *l, luon_tensor **data, luon_tensor **label) {
  if (!l || !data || !label) return lu_error(LUON_EINVAL, "loader_next: NULL argument");
  *data = *label = NULL;
  for (;;) {
    pthread_mutex_lock(&l->mu);
    if (l->failed || l->consumed >= l->nbatch) {
      pthread_mutex_unlock(&l->mu);
      return LUON_OK;
    }
    int64_t b = l->consumed;
    slot *s;
    if (l->nworkers == 0) {
      s = slot_open(l, b);
      pthread_mutex_unlock(&l->mu);
      for (int64_t pos = l->bounds[b]; pos < l->bounds[b + 1]; pos++) process(l, pos, b, s);
      pthread_mutex_lock(&l->mu);
      l->next_pos = l->bounds[b + 1];
    } else {
      s = &l->slots[b % l->nslots];
      while (!(s->batch == b && s->remaining == 0)) pthread_cond_wait(&l->done_cv, &l->mu);
    }
    /* take the batch and free its slot for the workers */
    luon_tensor *t = s->data;
    s->data = NULL;
    luon_status err = s->err;
    char msg[MSG];
    memcpy(msg, s->msg, MSG);
    int64_t size = l->bounds[b + 1] - l->bounds[b], k = 0;
    int64_t *lab = malloc(sizeof *lab * (size_t)size);
    int64_t sample_bytes = s->sample_bytes;
    for (int64_t j = 0; j < size; j++)
      if (s->ok[j]) {
        if (t && k != j)
          memmove((char *)lu_data(t) + k * sample_bytes, (char *)lu_data(t) + j * sample_bytes,
                  (size_t)sample_bytes);
        if (lab) lab[k] = l->labels[l->order[l->bounds[b] + j]];
        k++;
      }
    slot_clear(s);
    l->consumed++;
    if (err != LUON_OK) l->failed = true;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    if (err != LUON_OK) {
      luon_tensor_release(t);
      free(lab);
      return lu_error(err, "%s", msg);
    }
    if (k == 0) { /* every sample skipped */
      luon_tensor_release(t);
      free(lab);
      continue;
    }
    luon_status st = lab ? LUON_OK : lu_error(LUON_ENOMEM, "loader_next: out of memory");
    if (st == LUON_OK && k < size) {
      luon_tensor *v = NULL;
      int64_t shape[4] = {k, t->shape[1], t->shape[2], t->shape[3]}, strides[4];
      lu_contiguous_strides(4, shape, strides);
      st = lu_tensor_view(t, 4, shape, strides, 0, &v);
      luon_tensor_release(t);
      t = v;
    }
    if (st == LUON_OK) {
      pthread_mutex_lock(&l->mu);
      int32_t pin = l->pin;
      int32_t ldt = l->label_dtype;
      pthread_mutex_unlock(&l->mu);
      st = pin >= 0 ? lu_tensor_new_pinned(ldt, 1, &k, pin, label)
                    : luon_tensor_empty(ldt, 1, &k, LUON_CPU, 0, label);
      if (st == LUON_OK) {
        void *out = lu_data(*label);
        if (ldt == LUON_DTYPE_I32)
          for (int64_t j = 0; j < k; j++) ((int32_t *)out)[j] = (int32_t)lab[j];
        else
          memcpy(out, lab, sizeof *lab * (size_t)k);
      }
    }
    free(lab);
    if (st != LUON_OK) {
      luon_tensor_release(t);
      return st;
    }
    *data = t;
    return LUON_OK;
  }
}

luon_status luon_loader_set_pin_memory(luon_loader *l, int32_t pin_id) {
  if (!l) return lu_error(LUON_EINVAL, "loader_set_pin_memory: NULL loader");
  int32_t ngpu = luon_gpu_count();
  if (pin_id < -1 || pin_id >= LU_MAX_GPU_DEVICES || (ngpu > 0 && pin_id >= ngpu))
    return lu_error(LUON_EINVAL, "DataLoader: pin_device_id %d does not name a GPU (%d GPU%s)", pin_id,
                    ngpu, ngpu == 1 ? "" : "s");
  pthread_mutex_lock(&l->mu);
  l->pin = pin_id;
  pthread_mutex_unlock(&l->mu);
  return LUON_OK;
}

luon_status luon_loader_set_label_dtype(luon_loader *l, int32_t dtype) {
  if (!l) return lu_error(LUON_EINVAL, "loader_set_label_dtype: NULL loader");
  if (dtype != LUON_DTYPE_I64 && dtype != LUON_DTYPE_I32)
    return lu_error(LUON_EINVAL, "loader_set_label_dtype: labels are int64 or int32, got dtype %d", (int)dtype);
  pthread_mutex_lock(&l->mu);
  l->label_dtype = dtype;
  pthread_mutex_unlock(&l->mu);
  return LUON_OK;
}

int64_t luon_loader_skipped(luon_loader *l, char *first_msg, int64_t msg_bytes) {
  if (!l) return 0;
  pthread_mutex_t *mu = &l->mu;
  pthread_mutex_lock(mu);
  int64_t n = l->skipped;
  if (first_msg && msg_bytes > 0) snprintf(first_msg, (size_t)msg_bytes, "%s", l->skip_msg);
  pthread_mutex_unlock(mu);
  return n;
}

/* ---- directory listing -------------------------------------------------- */

luon_status luon_dir_list(const char *path, char **buf, int64_t *len) {
  if (!path || !buf || !len) return lu_error(LUON_EINVAL, "dir_list: NULL argument");
  *buf = NULL, *len = 0;
  DIR *d = opendir(path);
  if (!d) return lu_error(LUON_EIO, "cannot list '%s': %s", path, strerror(errno));
  size_t cap = 4096, n = 0;
  char *out = malloc(cap);
  size_t plen = strlen(path);
  char *full = malloc(plen + 2 + 256 + 1);
  if (!out || !full) {
    free(out), free(full);
    closedir(d);
    return lu_error(LUON_ENOMEM, "dir_list: out of memory");
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
    size_t nl = strlen(name);
    snprintf(full, plen + 2 + 256 + 1, "%s/%s", path, name);
    struct stat st;
    char kind = 'o';
    if (stat(full, &st) == 0) kind = S_ISDIR(st.st_mode) ? 'd' : S_ISREG(st.st_mode) ? 'f' : 'o';
    if (n + nl + 2 > cap) {
      while (n + nl + 2 > cap) cap *= 2;
      char *p = realloc(out, cap);
      if (!p) {
        free(out), free(full);
        closedir(d);
        return lu_error(LUON_ENOMEM, "dir_list: out of memory");
      }
      out = p;
    }
    out[n++] = kind;
    memcpy(out + n, name, nl + 1);
    n += nl + 1;
  }
  closedir(d);
  free(full);
  *buf = out;
  *len = (int64_t)n;
  return LUON_OK;
}
