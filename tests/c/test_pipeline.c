/* test_pipeline.c: the data loader of core/data/pipeline.c on a tiny folder of
 * JPEGs and PNGs written here: batches in order with their labels, the
 * same bytes for 0, 1 and 4 workers and as luon_loader_load_image, last
 * short batch, a corrupt file (error naming it, or skipped and counted),
 * an in-memory source, abandoning an epoch and freeing mid-epoch,
 * DCT-scaled decoding keeping MXNet's shapes, directory listing. */
#include "internal.h"
#include "testutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NIMG 11

static char dir[] = "/tmp/luon_test_pipeline_XXXXXX";
static char *paths[NIMG + 1];
static int64_t labels[NIMG + 1];

static luon_tensor *photo(int h, int w, int seed) {
  uint8_t *v = malloc((size_t)h * w * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++)
        v[((size_t)y * w + x) * 3 + c] = (uint8_t)((x * 7 + y * 3 + c * 50 + seed * 31) % 256);
  luon_tensor *t = NULL;
  int64_t shape[3] = {h, w, 3};
  CHECK_OK(luon_tensor_from_host(v, LUON_DTYPE_U8, 3, shape, LUON_CPU, 0, &t));
  free(v);
  return t;
}

static void make_files(void) {
  for (int i = 0; i < NIMG; i++) {
    char p[256];
    snprintf(p, sizeof p, "%s/img%02d.%s", dir, i, i % 3 == 2 ? "png" : "jpg");
    luon_tensor *t = photo(40 + i, 60 - i, i);
    CHECK_OK(luon_image_write(p, t, 90));
    luon_tensor_release(t);
    paths[i] = strdup(p);
    labels[i] = i % 4;
  }
}

static const luon_transform_step *pipeline(int *n) {
  static luon_transform_step s[5];
  memset(s, 0, sizeof s);
  s[0] = (luon_transform_step){.kind = LUON_TF_RESIZE, .width = 36, .keep_ratio = 1, .interp = 1};
  s[1] = (luon_transform_step){.kind = LUON_TF_CENTER_CROP, .width = 24, .height = 20, .interp = 1};
  s[2] = (luon_transform_step){.kind = LUON_TF_FLIP_LR, .p = 0.5f};
  s[3] = (luon_transform_step){.kind = LUON_TF_COLOR_JITTER, .contrast = 0.3f, .brightness = 0.2f};
  s[4] = (luon_transform_step){.kind = LUON_TF_TO_TENSOR};
  *n = 5;
  return s;
}

/* All batches of one epoch concatenated; *nb batches, sizes in sizes[]. */
static float *run_epoch(luon_loader *l, const int64_t *order, const int64_t *bounds, int64_t nbatch,
                        int64_t epoch, int64_t *sizes, int64_t *labs) {
  CHECK_OK(luon_loader_start(l, order, bounds, nbatch, epoch));
  float *all = malloc(sizeof(float) * 3 * 20 * 24 * NIMG);
  int64_t off = 0, nl = 0;
  for (int64_t b = 0;; b++) {
    luon_tensor *d = NULL, *y = NULL;
    luon_status st = luon_loader_next(l, &d, &y);
    CHECK(st == LUON_OK, "next: %s", luon_last_error());
    if (!d) {
      CHECK(b == nbatch, "epoch ended after %lld batches, expected %lld", (long long)b, (long long)nbatch);
      break;
    }
    CHECK(d->ndim == 4 && d->shape[1] == 3 && d->shape[2] == 20 && d->shape[3] == 24, "batch shape %s",
          lu_shape_str(d->ndim, d->shape));
    CHECK(y->dtype == LUON_DTYPE_I64 && y->shape[0] == d->shape[0], "labels");
    sizes[b] = d->shape[0];
    memcpy(all + off, lu_data(d), sizeof(float) * (size_t)d->size);
    off += d->size;
    for (int64_t k = 0; k < y->shape[0]; k++) labs[nl++] = ((int64_t *)lu_data(y))[k];
    luon_tensor_release(d);
    luon_tensor_release(y);
  }
  return all;
}

static void test_workers_agree(void) {
  int ns;
  const luon_transform_step *s = pipeline(&ns);
  int64_t order[NIMG] = {3, 7, 0, 10, 1, 5, 9, 2, 8, 4, 6};
  int64_t bounds[4] = {0, 4, 8, 11};
  float *ref = NULL;
  int64_t sizes[3], labs[NIMG];
  for (int nw = 0; nw <= 4; nw += (nw == 0 ? 1 : 3)) {
    luon_loader *l = NULL;
    CHECK_OK(luon_loader_new(NIMG, (const char *const *)paths, NULL, labels, 1, s, ns, nw, 0, 0, 42, &l));
    float *got = run_epoch(l, order, bounds, 3, 1, sizes, labs);
    CHECK(sizes[0] == 4 && sizes[1] == 4 && sizes[2] == 3, "sizes %lld %lld %lld", (long long)sizes[0],
          (long long)sizes[1], (long long)sizes[2]);
    for (int i = 0; i < NIMG; i++) CHECK(labs[i] == labels[order[i]], "label %d", i);
    if (!ref) {
      ref = got;
      /* each sample equals the one-sample function with the epoch's seed */
      uint64_t es = luon_loader_epoch_seed(42, 1);
      for (int i = 0; i < NIMG; i++) {
        luon_tensor *one = NULL;
        CHECK_OK(luon_loader_load_image(paths[order[i]], 1, s, ns, es, (uint64_t)order[i], &one));
        if (one) CHECK(!memcmp(lu_data(one), ref + (size_t)i * one->size, sizeof(float) * one->size),
                       "sample %d differs from load_image", i);
        luon_tensor_release(one);
      }
    } else {
      CHECK(!memcmp(got, ref, sizeof(float) * 3 * 20 * 24 * NIMG), "%d workers differ from 0", nw);
      free(got);
    }
    /* another epoch draws other augmentations */
    float *e2 = run_epoch(l, order, bounds, 3, 2, sizes, labs);
    CHECK(memcmp(e2, ref, sizeof(float) * 3 * 20 * 24 * NIMG) != 0, "epoch 2 repeats epoch 1");
    free(e2);
    luon_loader_free(l);
  }
  free(ref);
}

static void test_errors(void) {
  int ns;
  const luon_transform_step *s = pipeline(&ns);
  char bad[300];
  snprintf(bad, sizeof bad, "%s/broken.jpg", dir);
  FILE *f = fopen(bad, "wb");
  fputs("\xff\xd8\xff\xe0 this is not really a jpeg", f);
  fclose(f);
  paths[NIMG] = bad;
  labels[NIMG] = 9;
  int64_t order[6] = {0, 1, NIMG, 2, 3, 4};
  int64_t bounds[3] = {0, 3, 6};
  for (int nw = 0; nw <= 2; nw += 2) {
    luon_loader *l = NULL;
    CHECK_OK(luon_loader_new(NIMG + 1, (const char *const *)paths, NULL, labels, 1, s, ns, nw, 0, 0, 1, &l));
    CHECK_OK(luon_loader_start(l, order, bounds, 2, 0));
    luon_tensor *d = NULL, *y = NULL;
    luon_status st = luon_loader_next(l, &d, &y);
    CHECK(st == LUON_EFORMAT && strstr(luon_last_error(), "broken.jpg") && strstr(luon_last_error(), "DataLoader"),
          "status %d: %s", (int)st, luon_last_error());
    CHECK(!d && !y, "no batch on error");
    CHECK_OK(luon_loader_next(l, &d, &y));
    CHECK(!d, "the epoch ends after an error");
    luon_loader_free(l);
    /* skip: the batch is one shorter, labels match */
    CHECK_OK(luon_loader_new(NIMG + 1, (const char *const *)paths, NULL, labels, 1, s, ns, nw, 0, 1, 1, &l));
    CHECK_OK(luon_loader_start(l, order, bounds, 2, 0));
    CHECK_OK(luon_loader_next(l, &d, &y));
    CHECK(d && d->shape[0] == 2 && y->shape[0] == 2, "skipped batch has 2 samples");
    if (y) CHECK(((int64_t *)lu_data(y))[0] == labels[0] && ((int64_t *)lu_data(y))[1] == labels[1], "labels");
    luon_tensor_release(d), luon_tensor_release(y);
    char msg[512];
    CHECK(luon_loader_skipped(l, msg, sizeof msg) == 1 && strstr(msg, "broken.jpg"), "skipped: %s", msg);
    CHECK_OK(luon_loader_next(l, &d, &y));
    CHECK(d && d->shape[0] == 3, "second batch whole");
    luon_tensor_release(d), luon_tensor_release(y);
    luon_loader_free(l);
  }
  /* a missing file, no transform: mixed sizes cannot be batched */
  luon_loader *l = NULL;
  CHECK_OK(luon_loader_new(NIMG, (const char *const *)paths, NULL, labels, 1, NULL, 0, 2, 0, 0, 1, &l));
  int64_t o2[2] = {0, 1}, b2[2] = {0, 2};
  CHECK_OK(luon_loader_start(l, o2, b2, 1, 0));
  luon_tensor *d = NULL, *y = NULL;
  luon_status st = luon_loader_next(l, &d, &y);
  CHECK(st == LUON_ESHAPE && strstr(luon_last_error(), "one shape"), "status %d: %s", (int)st, luon_last_error());
  int64_t o3[1] = {99}, b3[2] = {0, 1};
  st = luon_loader_start(l, o3, b3, 1, 0);
  CHECK(st == LUON_EINVAL && strstr(luon_last_error(), "index 99"), "%s", luon_last_error());
  luon_loader_free(l);
  unlink(bad);
  paths[NIMG] = NULL;
}

static void test_abandon(void) {
  int ns;
  const luon_transform_step *s = pipeline(&ns);
  int64_t order[NIMG * 4], bounds[NIMG * 4 + 1];
  for (int i = 0; i < NIMG * 4; i++) order[i] = i % NIMG, bounds[i] = i;
  bounds[NIMG * 4] = NIMG * 4;
  for (int rep = 0; rep < 20; rep++) {
    luon_loader *l = NULL;
    CHECK_OK(luon_loader_new(NIMG, (const char *const *)paths, NULL, labels, 1, s, ns, 3, 2, 0, 7, &l));
    CHECK_OK(luon_loader_start(l, order, bounds, NIMG * 4, 0));
    luon_tensor *d = NULL, *y = NULL;
    if (rep % 2) {
      CHECK_OK(luon_loader_next(l, &d, &y));
      luon_tensor_release(d), luon_tensor_release(y);
      CHECK_OK(luon_loader_start(l, order, bounds, 3, 1)); /* restart mid-epoch */
      CHECK_OK(luon_loader_next(l, &d, &y));
      luon_tensor_release(d), luon_tensor_release(y);
    }
    luon_loader_free(l); /* workers busy or waiting */
  }
}

static void test_memory_source(void) {
  int64_t shape[4] = {6, 8, 10, 1};
  uint8_t px[6 * 8 * 10];
  for (int i = 0; i < 6 * 80; i++) px[i] = (uint8_t)(i * 13);
  luon_tensor *imgs = NULL;
  CHECK_OK(luon_tensor_from_host(px, LUON_DTYPE_U8, 4, shape, LUON_CPU, 0, &imgs));
  int64_t lab[6] = {5, 4, 3, 2, 1, 0};
  luon_transform_step s[2] = {{.kind = LUON_TF_FLIP_LR, .p = 0.5f}, {.kind = LUON_TF_TO_TENSOR}};
  int64_t order[6] = {5, 0, 1, 2, 3, 4}, bounds[3] = {0, 4, 6};
  float *ref = NULL;
  for (int nw = 0; nw <= 2; nw += 2) {
    luon_loader *l = NULL;
    CHECK_OK(luon_loader_new(6, NULL, imgs, lab, 1, s, 2, nw, 1, 0, 3, &l));
    CHECK_OK(luon_loader_start(l, order, bounds, 2, 0));
    luon_tensor *d = NULL, *y = NULL;
    CHECK_OK(luon_loader_next(l, &d, &y));
    CHECK(d && d->shape[0] == 4 && d->shape[1] == 1 && d->shape[2] == 8 && d->shape[3] == 10, "shape");
    CHECK(y && ((int64_t *)lu_data(y))[0] == 0, "label of sample 5");
    /* sample 5 through the transform alone */
    luon_tensor *v = NULL, *one = NULL;
    int64_t vs[3] = {8, 10, 1}, vst[3] = {10, 1, 1};
    CHECK_OK(luon_tensor_view(imgs, 3, vs, vst, 5 * 80, &v));
    CHECK_OK(luon_transform_apply(s, 2, v, luon_loader_epoch_seed(3, 0), 5, &one));
    if (d && one) CHECK(!memcmp(lu_data(d), lu_data(one), 80 * sizeof(float)), "sample 5 differs");
    if (!ref && d) {
      ref = malloc(4 * 80 * sizeof(float));
      memcpy(ref, lu_data(d), 4 * 80 * sizeof(float));
    } else if (d) {
      CHECK(!memcmp(ref, lu_data(d), 4 * 80 * sizeof(float)), "workers differ");
    }
    luon_tensor_release(v), luon_tensor_release(one), luon_tensor_release(d), luon_tensor_release(y);
    /* int32 labels (MNIST's, as MXNet's) from the next batch on */
    CHECK(luon_loader_set_label_dtype(l, LUON_DTYPE_F32) == LUON_EINVAL, "float labels refused");
    CHECK_OK(luon_loader_set_label_dtype(l, LUON_DTYPE_I32));
    d = y = NULL;
    CHECK_OK(luon_loader_next(l, &d, &y));
    CHECK(y && y->dtype == LUON_DTYPE_I32 && y->shape[0] == 2, "int32 labels (2,)");
    if (y) CHECK(((int32_t *)lu_data(y))[0] == 2 && ((int32_t *)lu_data(y))[1] == 1, "labels of samples 3, 4");
    luon_tensor_release(d), luon_tensor_release(y);
    luon_loader_free(l);
  }
  free(ref);
  luon_tensor_release(imgs);
}

/* A 200x100 JPEG decoded for Resize(40, keep_ratio) at 1/2 scale (100x50):
 * the output keeps the full image's 80x40, as MXNet's. */
static void test_dct_scale(void) {
  char p[256];
  snprintf(p, sizeof p, "%s/big.jpg", dir);
  uint8_t *v = malloc(100 * 200 * 3);
  for (int y = 0; y < 100; y++)
    for (int x = 0; x < 200; x++)
      for (int c = 0; c < 3; c++) v[(y * 200 + x) * 3 + c] = (uint8_t)(x / 2 + y + c * 20);
  luon_tensor *t = NULL;
  int64_t shape[3] = {100, 200, 3};
  CHECK_OK(luon_tensor_from_host(v, LUON_DTYPE_U8, 3, shape, LUON_CPU, 0, &t));
  free(v);
  CHECK_OK(luon_image_write(p, t, 95));
  luon_tensor_release(t);
  luon_transform_step s = {.kind = LUON_TF_RESIZE, .width = 40, .keep_ratio = 1, .interp = 1};
  luon_tensor *out = NULL;
  CHECK_OK(luon_loader_load_image(p, 1, &s, 1, 0, 0, &out));
  CHECK(out && out->shape[0] == 40 && out->shape[1] == 80, "shape %s", out ? lu_shape_str(3, out->shape) : "-");
  luon_tensor *full = NULL, *ref = NULL;
  CHECK_OK(luon_image_read(p, 1, 0, 0, &full));
  CHECK_OK(luon_transform_apply(&s, 1, full, 0, 0, &ref));
  if (out && ref) {
    int worst = 0;
    for (int64_t i = 0; i < ref->size; i++) {
      int dlt = abs((int)((uint8_t *)lu_data(out))[i] - (int)((uint8_t *)lu_data(ref))[i]);
      if (dlt > worst) worst = dlt;
    }
    CHECK(worst <= 6, "scaled decode far from the full one: %d", worst);
  }
  luon_tensor_release(out), luon_tensor_release(full), luon_tensor_release(ref);
  unlink(p);
}

static void test_dir_list(void) {
  char sub[300];
  snprintf(sub, sizeof sub, "%s/classdir", dir);
  CHECK(mkdir(sub, 0700) == 0, "mkdir");
  char *buf = NULL;
  int64_t len = 0;
  CHECK_OK(luon_dir_list(dir, &buf, &len));
  int files = 0, dirs = 0;
  for (int64_t i = 0; i < len; i += (int64_t)strlen(buf + i + 1) + 2) {
    if (buf[i] == 'f') files++;
    if (buf[i] == 'd') {
      dirs++;
      CHECK(!strcmp(buf + i + 1, "classdir"), "dir %s", buf + i + 1);
    }
  }
  CHECK(files == NIMG && dirs == 1, "%d files, %d dirs", files, dirs);
  luon_free(buf);
  CHECK(luon_dir_list("/nonexistent/luon", &buf, &len) == LUON_EIO, "missing dir");
  rmdir(sub);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  luon_tensor *probe = photo(4, 4, 0);
  char p[256];
  snprintf(p, sizeof p, "%s/probe.jpg", dir);
  if (luon_image_write(p, probe, 90) != LUON_OK) {
    fprintf(stderr, "test_pipeline: skipped: %s\n", luon_last_error());
    luon_tensor_release(probe);
    rmdir(dir);
    return 0;
  }
  unlink(p);
  luon_tensor_release(probe);
  make_files();
  test_workers_agree();
  test_errors();
  test_abandon();
  test_memory_source();
  test_dct_scale();
  test_dir_list();
  for (int i = 0; i < NIMG; i++) {
    unlink(paths[i]);
    free(paths[i]);
  }
  rmdir(dir);
  return TEST_RESULT;
}
