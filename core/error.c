/* error.c: the thread-local last-error message behind every failed call,
 * small formatting helpers for messages, and luon_interrupt's flag. */
#include "internal.h"
#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

const char *luon_last_error(void) { return last_error; }

void luon_set_error(const char *msg) {
  snprintf(last_error, sizeof last_error, "%s", msg ? msg : "");
}

luon_status lu_error(luon_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

const char *lu_shape_str(int ndim, const int64_t *shape) {
  static _Thread_local char ring[4][160];
  static _Thread_local int next;
  char *s = ring[next++ & 3];
  size_t n = 0;
  n += snprintf(s + n, 160 - n, "(");
  for (int i = 0; i < ndim && n < 150; i++)
    n += snprintf(s + n, 160 - n, i ? ",%lld" : "%lld", (long long)shape[i]);
  snprintf(s + n, 160 - n, ndim == 1 ? ",)" : ")");
  return s;
}

int lu_interrupt_flag;

/* async-signal-safe: a lock-free atomic store and nothing else */
unsigned lu_interrupt_count;
void luon_interrupt(void) {
  __atomic_add_fetch(&lu_interrupt_count, 1, __ATOMIC_RELEASE); /* lock-free on every target we build */
  __atomic_store_n(&lu_interrupt_flag, 1, __ATOMIC_RELAXED);
}
void luon_interrupt_clear(void) { __atomic_store_n(&lu_interrupt_flag, 0, __ATOMIC_RELAXED); }
int32_t luon_interrupted(void) { return lu_interrupted(); }

__thread int32_t *lu_thread_flag;

int32_t *luon_interrupt_scope(int32_t *flag) {
  int32_t *was = lu_thread_flag;
  lu_thread_flag = flag;
  return was;
}
