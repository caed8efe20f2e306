/* rng.c: counter-based random numbers (Philox-4x32-10). One counter per
 * device, one global key (the seed), so a seeded run is reproducible and a
 * kernel can draw element i from (key, start + i) on any thread or backend. */
#include "internal.h"
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t seed_key;
static bool seeded;
static uint64_t cpu_counter[LU_MAX_CPU_DEVICES];
static uint64_t gpu_counter[LU_MAX_GPU_DEVICES];


luon_status luon_random_seed(int64_t seed) {
  pthread_mutex_lock(&lock);
  seed_key = lu_splitmix64((uint64_t)seed);
  seeded = true;
  memset(cpu_counter, 0, sizeof cpu_counter);
  memset(gpu_counter, 0, sizeof gpu_counter);
  pthread_mutex_unlock(&lock);
  return LUON_OK;
}

uint64_t lu_rng_reserve(lu_device dev, uint64_t n, uint64_t *key) {
  pthread_mutex_lock(&lock);
  if (!seeded) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed_key = lu_splitmix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40));
    seeded = true;
  }
  uint64_t *ctr = dev.type == LUON_GPU ? &gpu_counter[dev.id % LU_MAX_GPU_DEVICES]
                                       : &cpu_counter[dev.id % LU_MAX_CPU_DEVICES];
  uint64_t start = *ctr;
  *ctr += n;
  /* each device draws from its own stream of the same key */
  *key = seed_key ^ lu_splitmix64((uint64_t)dev.type << 32 | (uint32_t)dev.id);
  pthread_mutex_unlock(&lock);
  return start;
}
