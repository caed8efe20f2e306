/* robot_host.c: an example C host shaped like a robot's control loop. It
 * starts a luon runtime, loads a policy network written in Lua
 * (examples/policy.lua) with its trained parameters, then once per tick
 * writes an observation into a host buffer, calls policy.act on it (no
 * copy in), gets the action back in another host buffer, moves a toy
 * 4-joint arm, and steps the garbage collector before the next tick.
 *
 * With --model PREFIX it also runs the policy exported by policy.lua
 * (PREFIX-symbol.json, PREFIX-0000.safetensors) through luon_model_run:
 * host buffers in and out, no Lua at all.
 *
 * usage: robot_host [options] POLICY.lua PARAMS.safetensors
 *   --ticks N         ticks after warm-up (default 10000)
 *   --warmup N        ticks before measuring (default 2000)
 *   --gc-budget-us N  GC work between ticks, microseconds (default 200)
 *   --check           exit 1 unless the actions equal a plain-C forward pass of
 *                     the same parameters and no tick after warm-up allocates fresh
 *                     native memory (deterministic when the budget lets every step
 *                     finish a cycle; a timed budget that sometimes does not can need
 *                     a few more cached blocks when a cycle runs long)
 *   --model PREFIX    also run the exported graph through luon_model_run (checked
 *                     and benchmarked as the Lua policy is)
 *   --bench           also run the plain-C forward pass and luon with automatic GC,
 *                     and print them side by side (scripts/bench robot) */
#include <luon_embed.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { OBS = 16, ACT = 4, HID = 64, JOINTS = 4 };

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* involuntary context switches of this thread so far: a tick during which
 * it changed was preempted by the OS, whatever luon did */
static long preemptions(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nivcsw;
}

static int failed(luon_rt *rt, const char *what) {
  fprintf(stderr, "robot_host: %s: %s\n", what, luon_rt_last_error(rt));
  return 1;
}

/* ---- the toy robot: 4 joints driven toward targets that jump now and then */

typedef struct arm {
  float pos[JOINTS], vel[JOINTS], target[JOINTS], prev[JOINTS];
  uint32_t rng;
} arm;

static float uniform(arm *a) { /* xorshift32, in [-1, 1) */
  a->rng ^= a->rng << 13;
  a->rng ^= a->rng >> 17;
  a->rng ^= a->rng << 5;
  return (float)(a->rng >> 8) / (float)(1 << 23) - 1.0f;
}

static void observe(const arm *a, float *obs) {
  for (int j = 0; j < JOINTS; j++) {
    obs[4 * j + 0] = a->target[j] - a->pos[j];
    obs[4 * j + 1] = a->vel[j];
    obs[4 * j + 2] = a->target[j];
    obs[4 * j + 3] = a->prev[j];
  }
}

static void advance(arm *a, const float *act, long tick) {
  const float dt = 0.01f;
  for (int j = 0; j < JOINTS; j++) {
    a->vel[j] += dt * (8.0f * act[j] - 0.5f * a->vel[j]);
    a->pos[j] += dt * a->vel[j];
    a->prev[j] = act[j];
  }
  if (tick % 300 == 0)
    for (int j = 0; j < JOINTS; j++) a->target[j] = 0.8f * uniform(a);
}

/* ---- the same network in plain C, from the same file (the check and the peer) */

typedef struct mlp {
  float w1[HID * OBS], b1[HID], w2[HID * HID], b2[HID], w3[ACT * HID], b3[ACT];
} mlp;

static int read_param(luon_safetensors *h, const char *name, float *dst, size_t n) {
  for (int32_t i = 0; i < luon_safetensors_count(h); i++) {
    if (strcmp(luon_safetensors_name(h, i), name) != 0) continue;
    luon_tensor *t;
    if (luon_safetensors_get(h, i, LUON_CPU, 0, &t) != LUON_OK) return 1;
    luon_status s = luon_tensor_to_host(t, dst, LUON_DTYPE_F32, n * sizeof(float));
    luon_tensor_release(t);
    return s != LUON_OK;
  }
  luon_set_error("no such tensor in the parameter file");
  return 1;
}

static int load_mlp(const char *path, mlp *m) {
  luon_safetensors *h;
  if (luon_safetensors_open(path, &h) != LUON_OK) return 1;
  int bad = read_param(h, "0.weight", m->w1, HID * OBS) || read_param(h, "0.bias", m->b1, HID) ||
            read_param(h, "1.weight", m->w2, HID * HID) || read_param(h, "1.bias", m->b2, HID) ||
            read_param(h, "2.weight", m->w3, ACT * HID) || read_param(h, "2.bias", m->b3, ACT);
  luon_safetensors_close(h);
  return bad;
}

/* y = f(W x + b), W (out, in) */
static void dense(const float *w, const float *b, const float *x, float *y, int in, int out, int relu) {
  for (int o = 0; o < out; o++) {
    float s = b[o];
    for (int i = 0; i < in; i++) s += w[o * in + i] * x[i];
    y[o] = relu ? (s > 0 ? s : 0) : tanhf(s);
  }
}

static void mlp_act(const mlp *m, const float *obs, float *act) {
  float h1[HID], h2[HID];
  dense(m->w1, m->b1, obs, h1, OBS, HID, 1);
  dense(m->w2, m->b2, h1, h2, HID, HID, 1);
  dense(m->w3, m->b3, h2, act, HID, ACT, 0);
}

/* ---- measuring */

typedef struct stats {
  int64_t *tick_ns, *gc_ns;
  long n;
  long preempted;            /* ticks (call and GC step) during which the OS preempted us */
  int64_t max_quiet_ns;      /* slowest tick among the others */
  int64_t max_quiet_gc_ns;   /* slowest GC step among the others */
  long cycles;               /* GC cycles finished while measuring */
  int64_t fresh;             /* fresh native blocks allocated while measuring */
  int64_t live_min, live_max; /* luon tensors alive, over the measured ticks */
  double max_err_c;          /* largest |luon - plain C| over actions */
  double mean_err_teacher;   /* mean |action - PD teacher| */
} stats;

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static double pct_us(int64_t *v, long n, double p) {
  qsort(v, (size_t)n, sizeof *v, cmp64);
  long i = (long)(p * (double)(n - 1) + 0.5);
  return (double)v[i] / 1e3;
}

static int64_t fresh_blocks(void) {
  luon_memory_stats s;
  luon_memory_stats_get(LUON_CPU, 0, &s);
  return s.allocs - s.cache_hits;
}

enum mode { PLAIN_C, LUON_AUTO_GC, LUON_MANUAL_GC, LUON_MODEL };

/* warmup + n ticks of the loop; the policy is luon's (rt, or model with
 * mode LUON_MODEL) or plain C (m) */
static int run(luon_rt *rt, luon_model *model, const mlp *m, enum mode mode, long warmup, long n, int budget_us,
               stats *st) {
  arm a = {.rng = 12345};
  float obs[OBS], act[ACT], ref[ACT];
  luon_buffer in = {obs, LUON_DTYPE_F32, 1, {OBS}};
  luon_buffer out = {act, LUON_DTYPE_F32, 1, {ACT}};
  if (mode == LUON_MODEL) rt = NULL;
  if (rt && luon_rt_set_gc_mode(rt, mode == LUON_MANUAL_GC ? LUON_RT_GC_MANUAL : LUON_RT_GC_AUTO))
    return failed(rt, "set_gc_mode");
  const void *ins[1] = {obs};
  void *outs[1] = {act};
  memset(st, 0, sizeof *st);
  st->tick_ns = calloc((size_t)n, sizeof(int64_t));
  st->gc_ns = calloc((size_t)n, sizeof(int64_t));
  st->n = n;
  luon_counters *counters = luon_counters_get();
  int64_t fresh0 = 0;
  double teacher_err = 0;
  for (long tick = -warmup; tick < n; tick++) {
    if (tick == 0) {
      fresh0 = fresh_blocks();
      st->live_min = st->live_max = counters->tensors_live;
    }
    observe(&a, obs);
    long cs0 = preemptions();
    int64_t t0 = now_ns();
    if (mode == LUON_MODEL) {
      if (luon_model_run(model, ins, outs) != LUON_OK) return failed(NULL, "luon_model_run");
    } else if (rt) {
      if (luon_rt_call(rt, "policy.act", 1, &in, 1, &out) != LUON_OK) return failed(rt, "policy.act");
    } else {
      mlp_act(m, obs, act);
    }
    int64_t t1 = now_ns();
    int32_t done = 0;
    if (rt && mode == LUON_MANUAL_GC && luon_rt_gc_step(rt, budget_us, &done) != LUON_OK)
      return failed(rt, "gc_step");
    int64_t t2 = now_ns();
    long cs1 = preemptions();
    if (tick >= 0) {
      st->tick_ns[tick] = t1 - t0;
      st->gc_ns[tick] = t2 - t1;
      if (cs1 != cs0) {
        st->preempted++;
      } else {
        if (t1 - t0 > st->max_quiet_ns) st->max_quiet_ns = t1 - t0;
        if (t2 - t1 > st->max_quiet_gc_ns) st->max_quiet_gc_ns = t2 - t1;
      }
      st->cycles += done;
      int64_t live = counters->tensors_live;
      if (live < st->live_min) st->live_min = live;
      if (live > st->live_max) st->live_max = live;
      if (m) {
        mlp_act(m, obs, ref);
        for (int j = 0; j < ACT; j++) {
          double e = fabs((double)act[j] - ref[j]);
          if (e > st->max_err_c) st->max_err_c = e;
          teacher_err += fabs(act[j] - tanh(2.0 * obs[4 * j] - 0.5 * obs[4 * j + 1]));
        }
      }
    }
    advance(&a, act, tick);
  }
  st->fresh = fresh_blocks() - fresh0;
  st->mean_err_teacher = teacher_err / ((double)n * ACT);
  return 0;
}

static void print_ticks(const char *name, stats *st) {
  printf("  %-26s p50 %6.2f us  p99 %7.2f us  max %8.2f us  (max %7.2f us over the %ld ticks not preempted)\n",
         name, pct_us(st->tick_ns, st->n, 0.5), pct_us(st->tick_ns, st->n, 0.99), pct_us(st->tick_ns, st->n, 1.0),
         (double)st->max_quiet_ns / 1e3, st->n - st->preempted);
}

static void free_stats(stats *st) {
  free(st->tick_ns);
  free(st->gc_ns);
}

int main(int argc, char **argv) {
  long ticks = 10000, warmup = 2000;
  int budget_us = 200, check = 0, bench = 0;
  const char *files[2] = {NULL, NULL}, *model_prefix = NULL;
  int nfiles = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--ticks") == 0 && i + 1 < argc) ticks = atol(argv[++i]);
    else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmup = atol(argv[++i]);
    else if (strcmp(argv[i], "--gc-budget-us") == 0 && i + 1 < argc) budget_us = atoi(argv[++i]);
    else if (strcmp(argv[i], "--check") == 0) check = 1;
    else if (strcmp(argv[i], "--bench") == 0) bench = 1;
    else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) model_prefix = argv[++i];
    else if (argv[i][0] != '-' && nfiles < 2) files[nfiles++] = argv[i];
    else {
      fprintf(stderr, "usage: robot_host [--ticks N] [--warmup N] [--gc-budget-us N] [--check] [--bench] [--model PREFIX] "
                      "POLICY.lua PARAMS.safetensors\n");
      return 2;
    }
  }
  if (nfiles != 2 || ticks < 1 || warmup < 0) {
    fprintf(stderr, "robot_host: give POLICY.lua and PARAMS.safetensors (and ticks >= 1)\n");
    return 2;
  }

  /* the runtime, the policy and its parameters */
  luon_rt *rt;
  if (luon_rt_new(&rt) != LUON_OK) return failed(NULL, "luon_rt_new");
  if (luon_rt_dofile(rt, files[0]) != LUON_OK) return failed(rt, "loading the policy");
  char code[8192];
  snprintf(code, sizeof code, "policy.load([==[%s]==])", files[1]);
  if (luon_rt_dostring(rt, code) != LUON_OK) return failed(rt, "loading the parameters");
  static mlp m;
  if (load_mlp(files[1], &m)) {
    fprintf(stderr, "robot_host: reading %s in C: %s\n", files[1], luon_last_error());
    return 1;
  }

  /* the exported graph of the same policy, for a host with no Lua */
  luon_model *model = NULL;
  stats by_model = {0};
  if (model_prefix) {
    char sym[4096], params[4096];
    snprintf(sym, sizeof sym, "%s-symbol.json", model_prefix);
    snprintf(params, sizeof params, "%s-0000.safetensors", model_prefix);
    int32_t dt, nd;
    int64_t shape[8];
    if (luon_model_load(sym, params, LUON_CPU, 0, &model) != LUON_OK) return failed(NULL, "luon_model_load");
    luon_graph *g = luon_model_graph(model);
    if (luon_graph_num_inputs(g) != 1 || luon_graph_num_outputs(g) != 1 ||
        luon_graph_io(g, 0, 0, &dt, &nd, shape) != LUON_OK || dt != LUON_DTYPE_F32 || nd != 2 ||
        shape[0] * shape[1] != OBS || luon_graph_io(g, 1, 0, &dt, &nd, shape) != LUON_OK ||
        dt != LUON_DTYPE_F32 || nd != 2 || shape[0] * shape[1] != ACT) {
      fprintf(stderr, "robot_host: %s is not a policy of %d observations and %d actions\n", sym, OBS, ACT);
      return 1;
    }
    if (run(NULL, model, &m, LUON_MODEL, warmup, ticks, 0, &by_model)) return 1;
  }

  int bad = 0;
  stats manual;
  if (run(rt, NULL, &m, LUON_MANUAL_GC, warmup, ticks, budget_us, &manual)) return 1;
  if (bench) {
    stats plain, automatic;
    if (run(NULL, NULL, &m, PLAIN_C, warmup, ticks, 0, &plain) ||
        run(rt, NULL, &m, LUON_AUTO_GC, warmup, ticks, 0, &automatic))
      return 1;
    printf("robot policy MLP 16-64-64-4, one observation per tick, %ld ticks after %ld warm-up:\n",
           ticks, warmup);
    print_ticks("plain C forward (peer)", &plain);
    print_ticks("luon, GC automatic", &automatic);
    double p50c = pct_us(plain.tick_ns, plain.n, 0.5);
    print_ticks("luon, GC stepped by host", &manual);
    printf("  luon/plain C at p50: %.1fx\n", pct_us(manual.tick_ns, manual.n, 0.5) / p50c);
    if (model) {
      print_ticks("luon_model_run (no Lua)", &by_model);
      printf("  luon_model_run/plain C at p50: %.1fx\n", pct_us(by_model.tick_ns, by_model.n, 0.5) / p50c);
    }
    free_stats(&plain);
    free_stats(&automatic);
  } else {
    print_ticks("luon, GC stepped by host", &manual);
  }
  printf("  GC step between ticks (budget %d us): p50 %.2f us, p99 %.2f us, max %.2f us (%.2f us not preempted), "
         "%ld cycles finished\n", budget_us, pct_us(manual.gc_ns, manual.n, 0.5), pct_us(manual.gc_ns, manual.n, 0.99),
         pct_us(manual.gc_ns, manual.n, 1.0), (double)manual.max_quiet_gc_ns / 1e3, manual.cycles);
  printf("  fresh native blocks after warm-up: %lld; live tensors %lld..%lld\n", (long long)manual.fresh,
         (long long)manual.live_min, (long long)manual.live_max);
  printf("  actions: max |luon - plain C| %.2e, mean |action - PD teacher| %.3f\n", manual.max_err_c,
         manual.mean_err_teacher);

  if (model)
    printf("  luon_model_run: max |model - plain C| %.2e, fresh native blocks after warm-up %lld\n",
           by_model.max_err_c, (long long)by_model.fresh);

  if (check) {
    if (model && by_model.max_err_c > 1e-4) bad = fprintf(stderr, "CHECK: luon_model_run differs from plain C\n");
    if (model && by_model.fresh != 0) bad = fprintf(stderr, "CHECK: luon_model_run allocated fresh blocks\n");
    /* the same as plain C; no allocation of fresh memory once warm; errors come back and
     * leave the runtime usable */
    if (manual.max_err_c > 1e-4) bad = fprintf(stderr, "CHECK: actions differ from plain C\n");
    if (manual.mean_err_teacher > 0.15) bad = fprintf(stderr, "CHECK: the policy did not learn the teacher\n");
    if (manual.fresh != 0) bad = fprintf(stderr, "CHECK: fresh blocks allocated after warm-up\n");
    if (manual.cycles == 0) bad = fprintf(stderr, "CHECK: no GC cycle finished\n");
    float obs[OBS] = {0}, act[ACT + 1];
    luon_buffer in = {obs, LUON_DTYPE_F32, 1, {OBS}}, wrong = {act, LUON_DTYPE_F32, 1, {ACT + 1}};
    if (luon_rt_call(rt, "policy.act", 1, &in, 1, &wrong) != LUON_ESHAPE || !strstr(luon_rt_last_error(rt), "(4,)"))
      bad = fprintf(stderr, "CHECK: a wrong output shape is not LUON_ESHAPE: %s\n", luon_rt_last_error(rt));
    wrong.shape[0] = ACT;
    if (luon_rt_call(rt, "policy.act", 1, &in, 1, &wrong) != LUON_OK) bad = failed(rt, "CHECK: after an error");
    printf("robot_host: check %s\n", bad ? "FAILED" : "ok");
  }
  free_stats(&manual);
  free_stats(&by_model);
  luon_model_free(model);
  luon_rt_free(rt);
  return bad ? 1 : 0;
}
