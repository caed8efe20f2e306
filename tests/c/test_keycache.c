/* test_keycache.c: cuda/keycache.h, the bounded cache conv.cu keeps cuDNN's
 * plans in, on the host: hits and misses by key bytes, eviction of the least
 * recently used at the bound, replacement, removal, and values in use
 * outliving their eviction; then several threads at once. */
#include "../../cuda/keycache.h"
#include "testutil.h"

typedef struct key {
  int32_t kind, dt, shape[5];
} key;

static int dropped;
static pthread_mutex_t drop_lock = PTHREAD_MUTEX_INITIALIZER;
static void drop(void *v) {
  pthread_mutex_lock(&drop_lock);
  dropped++;
  pthread_mutex_unlock(&drop_lock);
  free(v);
}

static key mk(int kind, int s0) {
  key k;
  memset(&k, 0, sizeof k);
  k.kind = kind, k.dt = 1, k.shape[0] = s0;
  return k;
}

static int *val(int v) {
  int *p = malloc(sizeof(int));
  *p = v;
  return p;
}

static void *worker(void *arg) {
  kc_cache *c = (kc_cache *)arg;
  for (int i = 0; i < 2000; i++) {
    key k = mk(i % 3, i % 37);
    kc_entry *e = kc_get(c, &k);
    if (!e) e = kc_put(c, &k, val(i % 37));
    if (e) {
      CHECK(*(int *)e->val == k.shape[0], "value %d under key %d", *(int *)e->val, k.shape[0]);
      kc_release(c, e, i % 11 == 0);
    }
  }
  return NULL;
}

/* Unlink and free every entry of c (none held); returns how many. */
static int drain(kc_cache *c) {
  int n = 0;
  while (c->tail) {
    kc_entry *x = c->tail;
    if (kc_unlink(c, x)) kc_free(c, x);
    n++;
  }
  return n;
}

int main(void) {
  kc_cache c;
  kc_init(&c, sizeof(key), 3, drop);
  key a = mk(0, 1), b = mk(1, 1), d = mk(0, 2), f = mk(0, 3);
  CHECK(kc_get(&c, &a) == NULL, "empty cache hit");
  kc_entry *ea = kc_put(&c, &a, val(10));
  kc_release(&c, ea, 0);
  kc_release(&c, kc_put(&c, &b, val(20)), 0);
  kc_release(&c, kc_put(&c, &d, val(30)), 0);
  kc_entry *e = kc_get(&c, &b);
  CHECK(e && *(int *)e->val == 20, "kind is part of the key");
  kc_release(&c, e, 0);
  e = kc_get(&c, &a); /* recency now a, b, d */
  CHECK(e && *(int *)e->val == 10, "hit a");
  /* hold a while putting f: the bound evicts the least recent, d */
  kc_release(&c, kc_put(&c, &f, val(40)), 0);
  CHECK(c.n == 3, "bounded at 3, holds %d", c.n);
  CHECK(dropped == 1, "one dropped, %d", dropped);
  kc_entry *gone = kc_get(&c, &d);
  CHECK(gone == NULL, "least recently used evicted");
  if (gone) kc_release(&c, gone, 0);
  /* replace a while held: the old value lives until released */
  kc_release(&c, kc_put(&c, &a, val(11)), 0);
  CHECK(dropped == 1 && *(int *)e->val == 10, "held value survives its replacement");
  kc_release(&c, e, 0);
  CHECK(dropped == 2, "replaced value dropped on release, %d", dropped);
  e = kc_get(&c, &a);
  CHECK(e && *(int *)e->val == 11, "the replacement is found");
  kc_release(&c, e, 1); /* remove */
  CHECK(dropped == 3 && c.n == 2, "removed: dropped %d, holds %d", dropped, c.n);
  CHECK(kc_get(&c, &a) == NULL, "removed key misses");
  /* threads: values always match their keys; all dropped once freed */
  kc_cache t;
  kc_init(&t, sizeof(key), 16, drop);
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, worker, &t);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  CHECK(t.n <= 16, "bound kept under threads, %d", t.n);
  int before = dropped, listed = t.n;
  drain(&t);
  CHECK(dropped - before == listed, "every listed value dropped once: %d of %d", dropped - before, listed);
  CHECK(drain(&c) == 2, "the first cache still held b and f"); /* and frees them: no leak under ASan */
  return test_failures ? 1 : 0;
}
