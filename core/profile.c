/* The op profiler (luon.profiler, MXNet's mx.profiler): while it runs, each
 * op called from outside any op (a user's op, or one the autograd backward
 * or the optimizer calls) adds its count and its wall time to that op's
 * totals. In sync mode a GPU op is followed by a wait for its device, so its
 * time is its kernels' rather than their launch's (slower, for finding the
 * op that costs; the plain mode shows the host's share). Ops an op calls are
 * inside its time, not counted again. */
#include "internal.h"

#include <time.h>

static int32_t mode;                              /* LUON_PROFILE_OFF/ON/SYNC */
static int64_t calls[LU_OP_COUNT], ns[LU_OP_COUNT];

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

luon_status luon_profile_set(int32_t m) {
  if (m < LUON_PROFILE_OFF || m > LUON_PROFILE_SYNC)
    return lu_error(LUON_EINVAL, "profile mode %d is not one of 0 (off), 1 (on), 2 (on, waiting for each op)", m);
  __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
  return LUON_OK;
}

int32_t luon_profile_mode(void) { return __atomic_load_n(&mode, __ATOMIC_RELAXED); }

void luon_profile_reset(void) {
  for (int k = 0; k < LU_OP_COUNT; k++) {
    __atomic_store_n(&calls[k], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ns[k], 0, __ATOMIC_RELAXED);
  }
}

luon_status luon_profile_get(int32_t op, int64_t *ncalls, int64_t *nanoseconds) {
  if (op < 0 || op >= LU_OP_COUNT) return lu_error(LUON_EINVAL, "op id %d does not exist", op);
  *ncalls = __atomic_load_n(&calls[op], __ATOMIC_RELAXED);
  *nanoseconds = __atomic_load_n(&ns[op], __ATOMIC_RELAXED);
  return LUON_OK;
}

int64_t lu_profile_start(void) { return luon_profile_mode() ? now_ns() : 0; }

void lu_profile_stop(int32_t op, const luon_tensor *on, int64_t t0) {
  if (!t0 || op < 0 || op >= LU_OP_COUNT) return;
  /* a failed sync is the op's own fault, reported by the next call that waits */
  if (luon_profile_mode() == LUON_PROFILE_SYNC && on && on->dev.type == LUON_GPU)
    (void)luon_device_sync(LUON_GPU, on->dev.id);
  __atomic_fetch_add(&calls[op], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&ns[op], now_ns() - t0, __ATOMIC_RELAXED);
}
