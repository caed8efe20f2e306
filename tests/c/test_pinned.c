/* test_pinned.c: the pinned host pools of core/alloc.c, without a GPU,
 * through a fake backend (host_alloc and events in lu_cuda): a block that a
 * queued copy reads is not handed out again until its event completes
 * (queried, never waited for), events on two GPUs, a newer event replacing
 * the older, a failed record, stats per pool, empty_cache waiting for the
 * pending copies, tensors and the data loader's batches and labels there.
 * Before the fake is installed (no backend): plain cpu(0) memory, the same
 * batches, nothing pinned. */
#include "internal.h"
#include "testutil.h"
#include <stdlib.h>
#include <string.h>

/* ---- the fake backend ----------------------------------------------------- */

typedef struct fake_ev {
  int gpu, done, freed;
} fake_ev;

static fake_ev events[256];
static int nevents, host_allocs, host_frees, syncs, frees_of_pending, fail_record;

static luon_status fake_host_alloc(size_t bytes, void **p) {
  __atomic_add_fetch(&host_allocs, 1, __ATOMIC_RELAXED);
  return posix_memalign(p, 64, bytes) == 0 ? LUON_OK : LUON_ENOMEM;
}
static void fake_host_free(void *p) {
  __atomic_add_fetch(&host_frees, 1, __ATOMIC_RELAXED);
  free(p);
}
static luon_status fake_record(int32_t id, void **ev) {
  if (fail_record) return LUON_EDEVICE;
  if (nevents == 256) return LUON_ENOMEM;
  fake_ev *e = &events[nevents++];
  e->gpu = id;
  *ev = e;
  return LUON_OK;
}
static luon_status fake_query(void *ev) {
  fake_ev *e = ev;
  CHECK(!e->freed, "query of a freed event");
  return e->done ? LUON_OK : LUON_EUNSUPPORTED;
}
static luon_status fake_sync(void *ev) {
  syncs++;
  ((fake_ev *)ev)->done = 1;
  return LUON_OK;
}
static void fake_free(void *ev) {
  fake_ev *e = ev;
  CHECK(!e->freed, "event freed twice");
  if (!e->done) frees_of_pending++;
  e->freed = 1;
}
static const char *fake_error(void) { return "fake backend: record failed"; }

static void install_fake(void) {
  lu_cuda.host_alloc = fake_host_alloc;
  lu_cuda.host_free = fake_host_free;
  lu_cuda.event_record = fake_record;
  lu_cuda.event_query = fake_query;
  lu_cuda.event_sync = fake_sync;
  lu_cuda.event_free = fake_free;
  lu_cuda.last_error = fake_error;
}

static fake_ev *last_event(void) { return &events[nevents - 1]; }

static luon_memory_stats stats(int32_t pin) {
  luon_memory_stats s;
  memset(&s, 0, sizeof s);
  CHECK_OK(luon_memory_stats_get(LUON_CPU_PINNED, pin, &s));
  return s;
}

/* ---- the loader over an in-memory source ------------------------------------ */

#define NS 10
static luon_tensor *imgs;
static int64_t src_labels[NS];

static void make_source(void) {
  int64_t shape[4] = {NS, 6, 5, 3};
  uint8_t px[NS * 6 * 5 * 3];
  for (int i = 0; i < (int)sizeof px; i++) px[i] = (uint8_t)(i * 29 + 7);
  CHECK_OK(luon_tensor_from_host(px, LUON_DTYPE_U8, 4, shape, LUON_CPU, 0, &imgs));
  for (int i = 0; i < NS; i++) src_labels[i] = 100 + i;
}

/* Two epochs of 3 batches (4, 4, 2) into out[] (floats) and ys[]; with
 * fence, each batch is "copied to gpu(0)" (an event recorded on its
 * blocks) and that copy completes only when the next batch has come. */
static void run_loader(int nworkers, int32_t pin, int fence, float *out, int64_t *ys, int *pinned) {
  luon_transform_step s[2] = {{.kind = LUON_TF_FLIP_LR, .p = 0.5f}, {.kind = LUON_TF_TO_TENSOR}};
  int64_t order[NS] = {3, 1, 4, 0, 5, 9, 2, 6, 8, 7}, bounds[4] = {0, 4, 8, 10};
  luon_loader *l = NULL;
  CHECK_OK(luon_loader_new(NS, NULL, imgs, src_labels, 1, s, 2, nworkers, 2, 0, 11, &l));
  if (!l) return;
  if (pin >= 0) CHECK_OK(luon_loader_set_pin_memory(l, pin));
  size_t off = 0, ny = 0;
  *pinned = 1;
  fake_ev *prev[2] = {NULL, NULL};
  for (int epoch = 0; epoch < 2; epoch++) {
    CHECK_OK(luon_loader_start(l, order, bounds, 3, epoch));
    for (;;) {
      luon_tensor *d = NULL, *y = NULL;
      CHECK_OK(luon_loader_next(l, &d, &y));
      if (!d) break;
      *pinned &= luon_tensor_is_pinned(d) && luon_tensor_is_pinned(y);
      memcpy(out + off, lu_data(d), sizeof(float) * (size_t)d->size);
      off += (size_t)d->size;
      memcpy(ys + ny, lu_data(y), sizeof(int64_t) * (size_t)y->size);
      ny += (size_t)y->size;
      if (prev[0]) prev[0]->done = prev[1]->done = 1; /* the last batch's copies are done */
      if (fence && lu_block_pinned(d->storage->block)) {
        CHECK_OK(lu_pinned_record(d->storage->block, 0));
        prev[0] = last_event();
        CHECK_OK(lu_pinned_record(y->storage->block, 0));
        prev[1] = last_event();
      }
      luon_tensor_release(d);
      luon_tensor_release(y);
    }
  }
  if (prev[0]) prev[0]->done = prev[1]->done = 1;
  CHECK(off == 2 * NS * 6 * 5 * 3 && ny == 2 * NS, "%zu floats, %zu labels", off, ny);
  luon_loader_free(l);
}

#define NOUT (2 * NS * 6 * 5 * 3)
static float ref[NOUT];
static int64_t ref_y[2 * NS];

/* ---- without a backend: plain memory ---------------------------------------- */

static void test_no_backend(void) {
  CHECK(!lu_pinned_available(), "pinned memory without a backend");
  lu_block *b = NULL;
  CHECK_OK(lu_alloc_pinned(0, 1000, &b));
  if (b) {
    CHECK(b->dev.type == LUON_CPU && b->dev.id == 0 && !lu_block_pinned(b), "a cpu(0) block");
    CHECK_OK(lu_pinned_record(b, 0)); /* a no-op */
    lu_free(b);
  }
  luon_tensor *t = NULL;
  int64_t shape[2] = {3, 4};
  CHECK_OK(luon_tensor_empty_pinned(LUON_DTYPE_F32, 2, shape, 0, &t));
  luon_tensor_info info;
  CHECK(t && luon_tensor_info_get(t, &info) == LUON_OK && info.dev_type == LUON_CPU && info.dev_id == 0,
        "a cpu(0) tensor");
  CHECK(!luon_tensor_is_pinned(t), "not pinned");
  luon_tensor_release(t);
  CHECK(luon_tensor_empty_pinned(LUON_DTYPE_F32, 2, shape, 16, &t) == LUON_EINVAL && !t, "pin id 16");

  /* the reference batches, then the same with pin_memory on */
  int pinned;
  run_loader(0, -1, 0, ref, ref_y, &pinned);
  static float out[NOUT];
  static int64_t ys[2 * NS];
  for (int nw = 0; nw <= 2; nw += 2) {
    memset(out, 0, sizeof out);
    run_loader(nw, 0, 1, out, ys, &pinned);
    CHECK(!memcmp(out, ref, sizeof out) && !memcmp(ys, ref_y, sizeof ys),
          "pin_memory changed the batches (%d workers)", nw);
    CHECK(!pinned, "pinned without a backend");
  }
  luon_memory_stats s = stats(0);
  CHECK(s.allocs == 0 && s.in_use == 0 && s.cached == 0, "pool 0 used without a backend");
  CHECK(host_allocs == 0 && nevents == 0, "the fake was called before it was installed");
}

/* ---- the pool with the fake backend ----------------------------------------- */

static void test_reuse_after_event(void) {
  CHECK(lu_pinned_available(), "the fake backend provides pinned memory");
  luon_memory_stats s0 = stats(0);
  lu_block *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  CHECK_OK(lu_alloc_pinned(0, 1000, &a));
  CHECK_OK(lu_alloc_pinned(0, 1000, &b));
  if (!a || !b) return;
  CHECK(lu_block_pinned(a) && a->dev.type == LUON_CPU_PINNED && a->dev.id == 0, "a pinned block");
  CHECK(host_allocs == 2, "%d host allocations", host_allocs);
  luon_memory_stats s1 = stats(0);
  CHECK(s1.allocs - s0.allocs == 2 && s1.in_use == (int64_t)(a->bytes + b->bytes) && s1.cache_hits == s0.cache_hits,
        "stats after 2 allocs: allocs %lld in_use %lld", (long long)s1.allocs, (long long)s1.in_use);

  /* a is read by a copy on gpu(0); both go back, a last (the list's head) */
  CHECK_OK(lu_pinned_record(a, 0));
  fake_ev *ea = last_event();
  lu_free(b);
  lu_free(a);
  luon_memory_stats s2 = stats(0);
  CHECK(s2.in_use == 0 && s2.cached == (int64_t)(a->bytes + b->bytes), "all cached");
  CHECK_OK(lu_alloc_pinned(0, 1000, &c));
  CHECK(c == b, "the idle block b is handed out, not a whose copy is pending");
  CHECK_OK(lu_alloc_pinned(0, 1000, &d));
  CHECK(d != a && d != b && host_allocs == 3, "a pending block is never handed out (%d host allocs)",
        host_allocs);
  CHECK(!ea->freed && !ea->done && syncs == 0, "nothing waited for the copy");
  lu_free(c);
  lu_free(d);
  ea->done = 1; /* the copy finished */
  lu_block *got[3] = {NULL, NULL, NULL};
  for (int k = 0; k < 3; k++) CHECK_OK(lu_alloc_pinned(0, 1000, &got[k]));
  CHECK((got[0] == a || got[1] == a || got[2] == a) && host_allocs == 3,
        "a comes back once its copy is done (%d host allocs)", host_allocs);
  CHECK(ea->freed, "the completed event is released");
  luon_memory_stats s3 = stats(0);
  CHECK(s3.cache_hits - s2.cache_hits == 4, "cache hits %lld", (long long)(s3.cache_hits - s2.cache_hits));
  for (int k = 0; k < 3; k++) lu_free(got[k]);
}

static void test_two_gpus_and_replace(void) {
  lu_block *a = NULL, *x = NULL;
  CHECK_OK(lu_alloc_pinned(1, 5000, &a)); /* pool 1: its own stats */
  if (!a) return;
  CHECK(a->dev.id == 1, "pool 1");
  CHECK(stats(1).in_use == (int64_t)a->bytes, "pool 1 in_use");
  CHECK_OK(lu_pinned_record(a, 0));
  fake_ev *e0 = last_event();
  CHECK_OK(lu_pinned_record(a, 1));
  fake_ev *e1 = last_event();
  CHECK_OK(lu_pinned_record(a, 1)); /* a later copy on gpu(1) replaces the first */
  fake_ev *e1b = last_event();
  CHECK(e1->freed && !e1->done && frees_of_pending == 1, "the older event of gpu(1) is released");
  lu_free(a);
  int before = host_allocs;
  e0->done = 1;
  CHECK_OK(lu_alloc_pinned(1, 5000, &x));
  CHECK(x != a && host_allocs == before + 1, "gpu(1)'s copy still reads a");
  lu_free(x);
  e1b->done = 1;
  lu_block *y1 = NULL, *y2 = NULL;
  CHECK_OK(lu_alloc_pinned(1, 5000, &y1));
  CHECK_OK(lu_alloc_pinned(1, 5000, &y2));
  CHECK((y1 == a || y2 == a) && host_allocs == before + 1, "both copies done: a is reused");
  CHECK(e0->freed && e1b->freed, "events released");
  lu_free(y1);
  lu_free(y2);

  /* a failed record says so; the caller then waits for the GPU itself */
  CHECK_OK(lu_alloc_pinned(1, 5000, &a));
  fail_record = 1;
  luon_status st = lu_pinned_record(a, 0);
  fail_record = 0;
  CHECK(st == LUON_EDEVICE && strstr(luon_last_error(), "record failed"), "failed record: %d %s", st,
        luon_last_error());
  lu_free(a);
  CHECK(lu_alloc_pinned(16, 10, &a) == LUON_EINVAL, "pin id 16");
}

static void test_empty_cache(void) {
  lu_block *a = NULL;
  CHECK_OK(lu_alloc_pinned(2, 3000, &a));
  if (!a) return;
  CHECK_OK(lu_pinned_record(a, 0));
  fake_ev *e = last_event();
  lu_free(a);
  int frees = host_frees;
  CHECK_OK(luon_memory_empty_cache(LUON_CPU_PINNED, 2));
  CHECK(e->done && e->freed && syncs == 1, "empty_cache waits for the pending copy first");
  CHECK(host_frees == frees + 1 && stats(2).cached == 0, "pool 2 emptied");
  CHECK(luon_memory_stats_get(LUON_CPU_PINNED, 16, &(luon_memory_stats){0}) == LUON_EDEVICE &&
            strstr(luon_last_error(), "pinned pool 16"),
        "pool 16: %s", luon_last_error());
  CHECK_OK(luon_memory_reset_peak(LUON_CPU_PINNED, 2));
}

static void test_tensors_and_loader(void) {
  luon_memory_stats s0 = stats(0);
  luon_tensor *t = NULL;
  int64_t one = 1;
  CHECK_OK(luon_tensor_empty_pinned(LUON_DTYPE_F32, 1, &one, 0, &t)); /* tiny: still pinned */
  CHECK(luon_tensor_is_pinned(t) && t->dev.type == LUON_CPU && t->dev.id == 0, "a pinned cpu(0) tensor");
  luon_tensor *v = NULL;
  int64_t st1 = 1;
  CHECK_OK(luon_tensor_view(t, 1, &one, &st1, 0, &v));
  CHECK(luon_tensor_is_pinned(v), "views share the pinned storage");
  luon_tensor_release(v);
  luon_tensor_release(t);
  CHECK(stats(0).in_use == s0.in_use, "released");

  static float out[NOUT];
  static int64_t ys[2 * NS];
  for (int nw = 0; nw <= 2; nw += 2) {
    int pinned = 0, allocs = host_allocs;
    luon_memory_stats a = stats(0);
    memset(out, 0, sizeof out);
    run_loader(nw, 0, 1, out, ys, &pinned);
    CHECK(pinned, "batches and labels in pinned memory (%d workers)", nw);
    CHECK(!memcmp(out, ref, sizeof out) && !memcmp(ys, ref_y, sizeof ys),
          "pinned batches differ from plain ones (%d workers)", nw);
    luon_memory_stats b = stats(0);
    /* 6 batches + 6 label arrays; at most (prefetch 2 + the one held + the
     * one whose copy is pending) of each are fresh */
    CHECK(b.allocs - a.allocs == 12, "%lld pinned allocations", (long long)(b.allocs - a.allocs));
    CHECK(host_allocs - allocs <= 8 && b.cache_hits - a.cache_hits >= 4,
          "blocks are reused: %d fresh, %lld hits", host_allocs - allocs,
          (long long)(b.cache_hits - a.cache_hits));
    CHECK(b.in_use == s0.in_use, "the freed loader gave its blocks back (%lld in use)", (long long)b.in_use);
  }
  luon_loader *l = NULL;
  CHECK_OK(luon_loader_new(NS, NULL, imgs, src_labels, 1, NULL, 0, 0, 1, 0, 1, &l));
  CHECK(luon_loader_set_pin_memory(l, 16) == LUON_EINVAL, "pin id 16");
  CHECK(luon_loader_set_pin_memory(l, -2) == LUON_EINVAL, "pin id -2");
  CHECK_OK(luon_loader_set_pin_memory(l, -1));
  luon_loader_free(l);
}

int main(void) {
  setenv("LUON_NO_CUDA", "1", 1); /* never the real backend: the fake stands in for it */
  CHECK(luon_gpu_count() == 0, "no GPU");
  make_source();
  test_no_backend();
  install_fake();
  test_reuse_after_event();
  test_two_gpus_and_replace();
  test_empty_cache();
  test_tensors_and_loader();
  luon_tensor_release(imgs);
  return TEST_RESULT;
}
