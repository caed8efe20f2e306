/* test_cuda_loader.c: the optional CUDA backend. Without a GPU (forced in a
 * child with CUDA_VISIBLE_DEVICES="", and in this process when there is
 * none) gpu(i) do not exist, every GPU call says why, and CPUs still work.
 * With a GPU: memory info, a host<->gpu round trip, LUON_VIRTUAL_GPUS. */
#include "luon.h"
#include "testutil.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Whether libluon_cuda.so lies beside the libluon.so this test runs with. */
static int backend_built(void) {
  Dl_info info;
  char path[1024];
  struct stat st;
  const char *off = getenv("LUON_NO_CUDA"); /* then it is not even loaded */
  if (off && *off && strcmp(off, "0") != 0) return 0;
  const char *lib = getenv("LUON_CUDA_LIB");
  if (lib && *lib) return stat(lib, &st) == 0;
  if (!dladdr((void *)luon_gpu_count, &info) || !info.dli_fname) return 0;
  snprintf(path, sizeof path, "%s", info.dli_fname);
  char *slash = strrchr(path, '/');
  if (!slash) return 0;
  snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libluon_cuda.so");
  return stat(path, &st) == 0;
}

static void cpu_still_works(void) {
  luon_tensor *t = NULL;
  int64_t shape[2] = {3, 5};
  luon_status s = luon_tensor_empty(LUON_DTYPE_F32, 2, shape, LUON_CPU, 1, &t);
  CHECK(s == LUON_OK && t, "tensor_empty on cpu(1): %d %s", s, luon_last_error());
  luon_tensor_info info;
  if (t) {
    CHECK(luon_tensor_info_get(t, &info) == LUON_OK && info.dev_type == LUON_CPU &&
              info.dev_id == 1 && info.size == 15,
          "info of the cpu(1) tensor");
    luon_tensor_release(t);
  }
  CHECK(luon_device_check(LUON_CPU, 0) == LUON_OK, "cpu(0): %s", luon_last_error());
  CHECK(luon_device_sync(LUON_CPU, 1) == LUON_OK, "sync cpu(1): %s", luon_last_error());
}

static void no_gpu(int built) {
  CHECK(luon_gpu_count() == 0, "gpu_count %d", luon_gpu_count());
  const char *why = luon_cuda_status();
  CHECK(why && *why, "cuda_status is empty");
  printf("no GPU: %s\n", why);
  if (built) /* the backend loaded and explained itself, rather than failing to load */
    CHECK(strstr(why, "found no GPU") && strstr(why, "cuda"),
          "the backend should load and name the CUDA failure: \"%s\"", why);

  int64_t fr = -7, total = -7;
  luon_status s = luon_gpu_memory_info(0, &fr, &total);
  CHECK(s == LUON_EUNSUPPORTED, "gpu_memory_info(0) returned %d", s);
  CHECK(*luon_last_error() != 0, "gpu_memory_info(0) left no message");

  s = luon_device_check(LUON_GPU, 0);
  CHECK(s == LUON_EDEVICE, "device_check(gpu, 0) returned %d", s);
  CHECK(strstr(luon_last_error(), "gpu(0)"), "message does not name gpu(0): \"%s\"",
        luon_last_error());

  luon_tensor *t = NULL;
  int64_t shape[1] = {4};
  s = luon_tensor_empty(LUON_DTYPE_F32, 1, shape, LUON_GPU, 0, &t);
  CHECK(s == LUON_EDEVICE && !t, "tensor_empty on gpu(0) returned %d", s);
  CHECK(luon_device_sync(LUON_GPU, 0) == LUON_EDEVICE, "device_sync(gpu, 0)");
  cpu_still_works();
}

static void with_gpu(int n) {
  printf("%d GPU%s\n", n, n == 1 ? "" : "s");
  CHECK(*luon_cuda_status() == 0, "cuda_status \"%s\" with GPUs", luon_cuda_status());
  int64_t fr = -1, total = -1;
  luon_status s = luon_gpu_memory_info(n - 1, &fr, &total);
  CHECK(s == LUON_OK && total > 0 && fr >= 0 && fr <= total, "memory_info: %d %s", s,
        luon_last_error());
  CHECK(luon_device_check(LUON_GPU, n) == LUON_EDEVICE, "gpu(%d) should not exist", n);
  CHECK(strstr(luon_last_error(), "gpu(") != NULL, "message: \"%s\"", luon_last_error());

  float src[7] = {1, -2, 3.5f, 4, 5, 6, 7}, back[7] = {0};
  int64_t shape[1] = {7};
  for (int id = 0; id < n; id++) {
    luon_tensor *t = NULL;
    s = luon_tensor_from_host(src, LUON_DTYPE_F32, 1, shape, LUON_GPU, id, &t);
    CHECK(s == LUON_OK, "from_host to gpu(%d): %s", id, luon_last_error());
    if (!t) continue;
    memset(back, 0, sizeof back);
    s = luon_tensor_to_host(t, back, LUON_DTYPE_F32, sizeof back);
    CHECK(s == LUON_OK && memcmp(src, back, sizeof src) == 0, "round trip on gpu(%d): %s", id,
          luon_last_error());
    CHECK(luon_device_sync(LUON_GPU, id) == LUON_OK, "sync gpu(%d)", id);
    luon_tensor_release(t);
  }
  cpu_still_works();
}

/* Run fn in a child whose environment has name=value, before any CUDA call. */
static void in_child(const char *name, const char *value, int (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    setenv(name, value, 1);
    int rc = fn();
    fflush(NULL);
    _exit(rc);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "child with %s=\"%s\" failed (status %d)", name, value, st);
}

static int child_hidden(void) {
  no_gpu(backend_built());
  return test_failures != 0;
}

static int child_virtual(void) {
  int n = luon_gpu_count();
  CHECK(n == 3, "LUON_VIRTUAL_GPUS=3 gave %d GPUs", n);
  if (n > 0) with_gpu(n);
  return test_failures != 0;
}

#ifdef LUON_FAKE_CUDA
/* Under the stand-in backend (its two GPUs share one card of 48 MiB): a
 * block cached by gpu(1) goes back when gpu(0) runs out, as virtual GPUs
 * need. */
static int child_shared_card(void) {
  setenv("LUON_FAKE_GPU_BYTES", "50331648", 1);
  CHECK(luon_gpu_count() == 2, "stand-in backend: %d GPUs (%s)", luon_gpu_count(), luon_cuda_status());
  if (luon_gpu_count() != 2) return 1;
  int64_t shape[1] = {(int64_t)32 << 20};
  luon_tensor *a = NULL, *b = NULL;
  luon_memory_stats st;
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_U8, 1, shape, LUON_GPU, 1, &a));
  luon_tensor_release(a); /* its 32 MiB stay in gpu(1)'s cache */
  CHECK_OK(luon_memory_stats_get(LUON_GPU, 1, &st));
  CHECK(st.cached >= shape[0], "gpu(1) caches %lld bytes", (long long)st.cached);
  CHECK(luon_tensor_empty(LUON_DTYPE_U8, 1, shape, LUON_GPU, 0, &b) == LUON_OK,
        "gpu(0) could not have the 32 MiB gpu(1) had cached: %s", luon_last_error());
  CHECK_OK(luon_memory_stats_get(LUON_GPU, 1, &st));
  CHECK(st.cached == 0, "gpu(1) still caches %lld bytes", (long long)st.cached);
  luon_tensor_release(b);
  /* more than the card holds: LUON_ENOMEM naming the bytes, and usable after */
  int64_t big[1] = {(int64_t)64 << 20};
  CHECK(luon_tensor_empty(LUON_DTYPE_U8, 1, big, LUON_GPU, 0, &b) == LUON_ENOMEM &&
            strstr(luon_last_error(), "67108864"),
        "64 MiB on a 48 MiB card: %s", luon_last_error());
  CHECK_OK(luon_tensor_empty(LUON_DTYPE_U8, 1, shape, LUON_GPU, 0, &b));
  luon_tensor_release(b);
  return test_failures != 0;
}
#endif

int main(void) {
  int built = backend_built();
  printf("libluon_cuda.so %s\n", built ? "built" : "absent: skipping the loader checks");
  in_child("CUDA_VISIBLE_DEVICES", "", child_hidden);
#ifdef LUON_FAKE_CUDA
  in_child("LUON_CUDA_LIB", LUON_FAKE_CUDA, child_shared_card);
#endif
  int n = luon_gpu_count();
  if (n == 0) {
    no_gpu(built);
  } else {
    with_gpu(n);
    in_child("LUON_VIRTUAL_GPUS", "3", child_virtual);
  }
  printf("%s (%d failure%s)\n", test_failures ? "FAILED" : "ok", test_failures, test_failures == 1 ? "" : "s");
  return test_failures != 0;
}
