/* keycache.h: a bounded, thread-safe cache of values keyed by plain bytes (a
 * zeroed struct), the least recently used evicted first. Entries are
 * reference-counted: one evicted or replaced while in use lives until its
 * last user lets go. Plain C (conv.cu keeps cuDNN's descriptors and chosen
 * algorithms in it; tests/c/test_keycache.c checks it on the host). */
#ifndef LUON_KEYCACHE_H
#define LUON_KEYCACHE_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KC_BUCKETS 256

typedef struct kc_entry {
  struct kc_entry *prev, *next; /* recency list, most recent first */
  struct kc_entry *chain;       /* the bucket's next */
  uint64_t hash;
  int refs;     /* users, plus one while in the table */
  int listed;   /* in the table */
  void *val;
  unsigned char key[];
} kc_entry;

typedef struct kc_cache {
  pthread_mutex_t lock;
  kc_entry *bucket[KC_BUCKETS];
  kc_entry *head, *tail;
  int n, cap;
  size_t keysize;
  void (*drop)(void *val); /* frees a value once no one holds it */
} kc_cache;

static inline void kc_init(kc_cache *c, size_t keysize, int cap, void (*drop)(void *)) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->lock, NULL);
  c->keysize = keysize, c->cap = cap < 1 ? 1 : cap, c->drop = drop;
}

static inline uint64_t kc_hash(const void *key, size_t n) { /* FNV-1a */
  const unsigned char *p = (const unsigned char *)key;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* Take e out of the table and the recency list (the lock held); drops the
 * table's reference and returns whether that was the last one. */
static inline int kc_unlink(kc_cache *c, kc_entry *e) {
  kc_entry **pp = &c->bucket[e->hash % KC_BUCKETS];
  while (*pp != e) pp = &(*pp)->chain;
  *pp = e->chain;
  if (e->prev) e->prev->next = e->next;
  else c->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else c->tail = e->prev;
  e->listed = 0;
  c->n--;
  return --e->refs == 0;
}

static inline void kc_free(kc_cache *c, kc_entry *e) {
  if (c->drop) c->drop(e->val);
  free(e);
}

static inline void kc_front(kc_cache *c, kc_entry *e) {
  e->prev = NULL, e->next = c->head;
  if (c->head) c->head->prev = e;
  c->head = e;
  if (!c->tail) c->tail = e;
}

/* The entry for key, held (+1; kc_release it), now the most recent; NULL if none. */
static inline kc_entry *kc_get(kc_cache *c, const void *key) {
  uint64_t h = kc_hash(key, c->keysize);
  pthread_mutex_lock(&c->lock);
  kc_entry *e = c->bucket[h % KC_BUCKETS];
  while (e && (e->hash != h || memcmp(e->key, key, c->keysize) != 0)) e = e->chain;
  if (e) {
    e->refs++;
    if (c->head != e) { /* move to the front */
      e->prev->next = e->next;
      if (e->next) e->next->prev = e->prev;
      else c->tail = e->prev;
      kc_front(c, e);
    }
  }
  pthread_mutex_unlock(&c->lock);
  return e;
}

/* Put val under key, replacing any entry for it, and evict the least
 * recently used beyond the bound. Returns the new entry held (+1), or NULL
 * when out of memory (val is then still the caller's). */
static inline kc_entry *kc_put(kc_cache *c, const void *key, void *val) {
  kc_entry *e = (kc_entry *)malloc(sizeof(kc_entry) + c->keysize);
  if (!e) return NULL;
  memcpy(e->key, key, c->keysize);
  e->hash = kc_hash(key, c->keysize);
  e->val = val, e->refs = 2, e->listed = 1;
  kc_entry *dead[2] = {NULL, NULL}; /* freed after the lock: drop may be slow */
  pthread_mutex_lock(&c->lock);
  kc_entry *o = c->bucket[e->hash % KC_BUCKETS];
  while (o && (o->hash != e->hash || memcmp(o->key, key, c->keysize) != 0)) o = o->chain;
  if (o && kc_unlink(c, o)) dead[0] = o;
  e->chain = c->bucket[e->hash % KC_BUCKETS];
  c->bucket[e->hash % KC_BUCKETS] = e;
  kc_front(c, e);
  c->n++;
  if (c->n > c->cap) { /* the tail: never e, which is at the front and cap >= 1 */
    kc_entry *t = c->tail;
    if (kc_unlink(c, t)) dead[1] = t;
  }
  pthread_mutex_unlock(&c->lock);
  for (int i = 0; i < 2; i++)
    if (dead[i]) kc_free(c, dead[i]);
  return e;
}

/* Let go of a held entry; remove also takes it out of the table (a value
 * found wanting: the next kc_get misses). */
static inline void kc_release(kc_cache *c, kc_entry *e, int remove) {
  pthread_mutex_lock(&c->lock);
  int last = remove && e->listed ? kc_unlink(c, e) : 0;
  if (!last) last = --e->refs == 0;
  pthread_mutex_unlock(&c->lock);
  if (last) kc_free(c, e);
}

#endif
