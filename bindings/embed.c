/* embed.c: the embedding API of luon_embed.h (a runtime in a C host's
 * process, own or attached Lua state, calls on host buffers, GC stepping)
 * and luaopen_luon. Its Lua half, lua/luon/embed.lua, turns tensors into
 * ndarrays and checks results; this file never touches an ndarray itself. */
#include "luon_embed.h"
#include "jitstop.h"
#include "paths.h"
#include <dlfcn.h>
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRY(expr)                          \
  do {                                     \
    luon_status try_s_ = (expr);           \
    if (try_s_ != LUON_OK) return try_s_;  \
  } while (0)

/* An input wrapper kept between calls: the ndarray (a registry ref) over
 * the buffer it was made for. */
typedef struct cached_input {
  void *data;
  int32_t dtype, ndim;
  int64_t shape[8];
  int ref;
} cached_input;

struct luon_rt {
  lua_State *L;
  int owned;                       /* L came from luon_rt_new and closes with rt */
  int jitstop;                     /* lu_jitstop_start(L) started (jitstop.c) */
  int traceback, lookup, call, wrap, set_gc_mode, gc_step; /* registry refs */
  cached_input in[LUON_RT_MAX_ARGS];
  luon_tensor *outs[LUON_RT_MAX_ARGS]; /* results (+1), filled by embed.call */
  char msg[4096];
  /* stopping a call (luon_rt_interrupt; any thread or a signal handler) */
  int running;                     /* atomic: a call is under way */
  int32_t stop;                    /* atomic: why it was stopped (enum stop_reason); the
                                      call's luon_interrupt_scope flag: its ops stop too */
  int32_t *outer_scope;            /* the scope flag before the call, put back after it */
  lua_Hook host_hook;              /* the state's hook before the call, put back after it */
  int host_mask, host_count;
  /* the time limit (luon_rt_set_timeout): a watchdog thread, started with the first limit */
  int64_t timeout_ns;
  int has_watchdog, quit;
  pthread_t watchdog;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  int64_t deadline;                /* of the call under way (ns, CLOCK_MONOTONIC), or 0 */
  int64_t wakes_at;                /* when the sleeping watchdog wakes, 0: at the next call */
};

enum stop_reason { STOP_NONE = 0, STOP_INTERRUPT = 1, STOP_TIMEOUT = 2 };

static luon_status fail(luon_rt *rt, luon_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rt->msg, sizeof rt->msg, fmt, ap);
  va_end(ap);
  luon_set_error(rt->msg);
  return s;
}

/* Argument 1 as a message, as tostring shows it: a string or number as it
 * is, a value with __tostring through it, anything else as "nil", "true",
 * "table: 0x...". Run in protected mode: __tostring may raise. */
static int to_message(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) {
    lua_pushstring(L, lua_tostring(L, 1));
  } else if (luaL_callmeta(L, 1, "__tostring")) {
    if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
  } else if (lua_isnil(L, 1)) {
    lua_pushliteral(L, "nil");
  } else if (lua_isboolean(L, 1)) {
    lua_pushstring(L, lua_toboolean(L, 1) ? "true" : "false");
  } else {
    lua_pushfstring(L, "%s: %p", luaL_typename(L, 1), lua_topointer(L, 1));
  }
  return 1;
}

/* Replace the value at the top of the stack by its message (to_message),
 * or by a line naming its type when even that fails. */
static void message_at_top(lua_State *L) {
  if (lua_type(L, -1) == LUA_TSTRING) return;
  lua_pushcfunction(L, to_message);
  lua_pushvalue(L, -2);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    lua_pop(L, 1);
    lua_pushfstring(L, "(error object is a %s value whose __tostring failed)", luaL_typename(L, -1));
  }
  lua_remove(L, -2);
}

/* The error on top of the stack, popped, as status s. */
static luon_status fail_lua(luon_rt *rt, luon_status s, const char *what) {
  message_at_top(rt->L);
  fail(rt, s, "%s: %s", what, lua_tostring(rt->L, -1));
  lua_pop(rt->L, 1);
  return s;
}

static int traceback(lua_State *L) {
  lua_settop(L, 1);
  message_at_top(L);
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

/* lua_pcall with the traceback handler under the function and its nargs. */
static int pcall(luon_rt *rt, int nargs, int nres) {
  lua_State *L = rt->L;
  int base = lua_gettop(L) - nargs;
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->traceback);
  lua_insert(L, base);
  int st = lua_pcall(L, nargs, nres, base);
  lua_remove(L, base);
  return st;
}

/* ---- stopping a call ---------------------------------------------------------
 * luon_rt_interrupt does what a SIGINT handler may: it raises flags and sets
 * a Lua hook. The hook raises "interrupted" at the next Lua instruction, call
 * or return (in JIT-compiled code, once the trace exits: see jitstop.c),
 * and rt->stop, the call's own interrupt flag (luon_interrupt_scope), stops
 * a long C op and fails every op after it, on this runtime only: another
 * runtime's call on another thread goes on. The call's end puts the host's
 * own hook back and clears the flags (luon_interrupt's too), so the next
 * call starts afresh. */

static char rt_key; /* registry[&rt_key]: the runtime, for the hook */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void stop_hook(lua_State *L, lua_Debug *ar) {
  lua_pushlightuserdata(L, &rt_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  luon_rt *rt = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!rt || !__atomic_load_n(&rt->running, __ATOMIC_ACQUIRE) || !__atomic_load_n(&rt->stop, __ATOMIC_ACQUIRE)) {
    lua_sethook(L, NULL, 0, 0); /* a late interrupt, after its call ended */
    return;
  }
  /* and again at every Lua instruction until the call ends, in case Lua code
   * catches the error and goes on (the traceback handler is C: it runs none) */
  lua_sethook(L, stop_hook, LUA_MASKCOUNT, 1);
  if (lu_in_luon_lua(L, ar)) return; /* raise it once back in the user's code */
  luaL_error(L, "interrupted");
}

static void request_stop(luon_rt *rt, int why) {
  if (!__atomic_load_n(&rt->running, __ATOMIC_ACQUIRE)) return; /* no call to stop */
  int32_t none = STOP_NONE;
  __atomic_compare_exchange_n(&rt->stop, &none, why, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  lua_sethook(rt->L, stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

void luon_rt_interrupt(luon_rt *rt) {
  if (rt) request_stop(rt, STOP_INTERRUPT);
}

static void *watchdog(void *arg) {
  luon_rt *rt = arg;
  pthread_mutex_lock(&rt->lock);
  while (!rt->quit) {
    int64_t now = now_ns();
    if (rt->deadline && now >= rt->deadline) {
      rt->deadline = 0;
      request_stop(rt, STOP_TIMEOUT);
      continue;
    }
    rt->wakes_at = rt->deadline;
    if (!rt->deadline) {
      pthread_cond_wait(&rt->cv, &rt->lock);
    } else {
      struct timespec ts = {(time_t)(rt->deadline / 1000000000), (long)(rt->deadline % 1000000000)};
      pthread_cond_timedwait(&rt->cv, &rt->lock, &ts);
    }
  }
  pthread_mutex_unlock(&rt->lock);
  return NULL;
}

luon_status luon_rt_set_timeout(luon_rt *rt, int64_t timeout_us) {
  if (!rt) return luon_set_error("luon_rt_set_timeout: NULL runtime"), LUON_EINVAL;
  if (timeout_us < 0 || timeout_us > INT64_MAX / 1000)
    return fail(rt, LUON_EINVAL, "luon_rt_set_timeout: timeout %lld us (0: none, else positive)",
                (long long)timeout_us);
  if (timeout_us > 0 && !rt->has_watchdog) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&rt->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&rt->lock, NULL);
    sigset_t all, old; /* the watchdog takes no signals meant for the host */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int e = pthread_create(&rt->watchdog, NULL, watchdog, rt);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
      pthread_cond_destroy(&rt->cv);
      pthread_mutex_destroy(&rt->lock);
      return fail(rt, LUON_ENOMEM, "luon_rt_set_timeout: cannot start the watchdog thread (%s)", strerror(e));
    }
    rt->has_watchdog = 1;
  }
  rt->timeout_ns = timeout_us * 1000;
  /* a time limit must hold in JIT-compiled code too (jitstop.c) */
  if (timeout_us > 0 && !rt->jitstop) rt->jitstop = lu_jitstop_start(rt->L, 1);
  return LUON_OK;
}

/* Before a call into Lua: nothing pending, the time limit armed. */
static void call_begin(luon_rt *rt) {
  lua_State *L = rt->L;
  luon_interrupt_clear();
  __atomic_store_n(&rt->stop, STOP_NONE, __ATOMIC_RELEASE);
  rt->host_hook = lua_gethook(L);
  rt->host_mask = lua_gethookmask(L);
  rt->host_count = lua_gethookcount(L);
  if (rt->host_hook == stop_hook) { /* left by a late luon_rt_interrupt */
    lua_sethook(L, NULL, 0, 0);
    rt->host_hook = NULL, rt->host_mask = rt->host_count = 0;
  }
  rt->outer_scope = luon_interrupt_scope(&rt->stop);
  __atomic_store_n(&rt->running, 1, __ATOMIC_RELEASE);
  if (rt->timeout_ns && rt->has_watchdog) {
    pthread_mutex_lock(&rt->lock);
    rt->deadline = now_ns() + rt->timeout_ns;
    if (!rt->wakes_at || rt->wakes_at > rt->deadline) pthread_cond_signal(&rt->cv);
    pthread_mutex_unlock(&rt->lock);
  }
}

/* After it: the limit disarmed, the host's hook back, the flags cleared; a
 * call that failed after a stop was asked for is LUON_EINTERRUPTED. */
static luon_status call_end(luon_rt *rt, luon_status s, const char *fn) {
  if (rt->has_watchdog) {
    pthread_mutex_lock(&rt->lock);
    rt->deadline = 0;
    pthread_mutex_unlock(&rt->lock);
  }
  __atomic_store_n(&rt->running, 0, __ATOMIC_RELEASE);
  int why = __atomic_exchange_n(&rt->stop, STOP_NONE, __ATOMIC_ACQ_REL);
  luon_interrupt_scope(rt->outer_scope);
  if (lua_gethook(rt->L) == stop_hook) lua_sethook(rt->L, rt->host_hook, rt->host_mask, rt->host_count);
  if (s != LUON_OK && s != LUON_EINTERRUPTED && (why || luon_interrupted())) {
    char was[sizeof rt->msg];
    memcpy(was, rt->msg, sizeof was);
    if (why == STOP_TIMEOUT)
      s = fail(rt, LUON_EINTERRUPTED, "%s: interrupted: its time limit of %lld us passed (luon_rt_set_timeout): %s",
               fn, (long long)(rt->timeout_ns / 1000), was);
    else
      s = fail(rt, LUON_EINTERRUPTED, "%s: interrupted by %s: %s", fn,
               why ? "luon_rt_interrupt" : "luon_interrupt", was);
  }
  luon_interrupt_clear();
  return s;
}

/* The directory of the library holding this code (libluon_embed.so, luon.so). */
static void own_dir(char *dir, size_t n) {
  Dl_info info;
  dir[0] = 0;
  if (dladdr((void *)own_dir, &info) && info.dli_fname) snprintf(dir, n, "%s", info.dli_fname);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, n, ".");
}

static void add_paths(lua_State *L) {
  char dir[4096], paths[20000], cpaths[5000];
  own_dir(dir, sizeof dir);
  lu_lua_dirs(dir, paths, sizeof paths, cpaths, sizeof cpaths);
  lu_add_lua_dirs(L, paths, cpaths);
}

static int lookup(lua_State *L);

static int ref_field(lua_State *L, const char *name) {
  lua_getfield(L, -1, name);
  return luaL_ref(L, LUA_REGISTRYINDEX);
}

/* Load luon into rt->L and keep the Lua half's functions. */
static luon_status init(luon_rt *rt) {
  lua_State *L = rt->L;
  lua_getglobal(L, "package");
  int has_package = lua_istable(L, -1);
  lua_pop(L, 1);
  if (!has_package)
    return fail(rt, LUON_EINVAL, "luon_rt_attach: the state has no package library (call luaL_openlibs first)");
  add_paths(L);
  lua_pushlightuserdata(L, &rt_key);
  lua_pushlightuserdata(L, rt);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(L, traceback);
  rt->traceback = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(L, lookup);
  rt->lookup = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getglobal(L, "require");
  lua_pushstring(L, "luon.embed");
  if (pcall(rt, 1, 1) != 0) return fail_lua(rt, LUON_ESCRIPT, "luon: cannot load luon");
  rt->call = ref_field(L, "call");
  rt->wrap = ref_field(L, "wrap");
  rt->set_gc_mode = ref_field(L, "set_gc_mode");
  rt->gc_step = ref_field(L, "gc_step");
  lua_pop(L, 1);
  rt->msg[0] = 0;
  return LUON_OK;
}

static luon_status start(lua_State *L, int owned, luon_rt **out) {
  if (!out) {
    luon_set_error(owned ? "luon_rt_new: out is NULL" : "luon_rt_attach: out is NULL");
    return LUON_EINVAL;
  }
  *out = NULL;
  luon_rt *rt = calloc(1, sizeof *rt);
  if (!rt) {
    if (owned) lua_close(L);
    luon_set_error("luon_rt_new: out of host memory");
    return LUON_ENOMEM;
  }
  rt->L = L;
  rt->owned = owned;
  rt->traceback = rt->lookup = rt->call = rt->wrap = rt->set_gc_mode = rt->gc_step = LUA_NOREF;
  for (int k = 0; k < LUON_RT_MAX_ARGS; k++) rt->in[k].ref = LUA_NOREF;
  luon_status s = init(rt);
  if (s != LUON_OK) {
    luon_rt_free(rt); /* luon_last_error() keeps init's message */
    return s;
  }
  rt->jitstop = lu_jitstop_start(L, 0); /* asked for: LUON_JIT_STOP=1 or a time limit */
  *out = rt;
  return LUON_OK;
}

luon_status luon_rt_new(luon_rt **out) {
  lua_State *L = luaL_newstate();
  if (!L) {
    if (out) *out = NULL;
    luon_set_error("luon_rt_new: cannot create a Lua state (out of memory)");
    return LUON_ENOMEM;
  }
  luaL_openlibs(L);
  return start(L, 1, out);
}

luon_status luon_rt_attach(lua_State *L, luon_rt **out) {
  if (!L) {
    if (out) *out = NULL;
    luon_set_error("luon_rt_attach: NULL Lua state");
    return LUON_EINVAL;
  }
  return start(L, 0, out);
}

void luon_rt_free(luon_rt *rt) {
  if (!rt) return;
  if (rt->has_watchdog) {
    pthread_mutex_lock(&rt->lock);
    rt->quit = 1;
    pthread_cond_signal(&rt->cv);
    pthread_mutex_unlock(&rt->lock);
    pthread_join(rt->watchdog, NULL);
    pthread_cond_destroy(&rt->cv);
    pthread_mutex_destroy(&rt->lock);
  }
  lu_jitstop_end(rt->L, rt->jitstop);
  if (rt->owned) {
    lua_close(rt->L); /* luon.core releases every array it still holds */
  } else {
    int refs[] = {rt->traceback, rt->lookup, rt->call, rt->wrap, rt->set_gc_mode, rt->gc_step};
    for (size_t k = 0; k < sizeof refs / sizeof refs[0]; k++) luaL_unref(rt->L, LUA_REGISTRYINDEX, refs[k]);
    for (int k = 0; k < LUON_RT_MAX_ARGS; k++) luaL_unref(rt->L, LUA_REGISTRYINDEX, rt->in[k].ref);
    lua_pushlightuserdata(rt->L, &rt_key);
    lua_rawget(rt->L, LUA_REGISTRYINDEX);
    int ours = lua_touserdata(rt->L, -1) == rt;
    lua_pop(rt->L, 1);
    if (ours) {
      lua_pushlightuserdata(rt->L, &rt_key);
      lua_pushnil(rt->L);
      lua_rawset(rt->L, LUA_REGISTRYINDEX);
    }
  }
  free(rt);
}

lua_State *luon_rt_state(luon_rt *rt) { return rt ? rt->L : NULL; }

const char *luon_rt_last_error(const luon_rt *rt) { return rt ? rt->msg : luon_last_error(); }

luon_status luon_rt_dostring(luon_rt *rt, const char *code) {
  if (!rt) return luon_set_error("luon_rt_dostring: NULL runtime"), LUON_EINVAL;
  if (!code) return fail(rt, LUON_EINVAL, "luon_rt_dostring: NULL code");
  int top = lua_gettop(rt->L);
  luon_status s = LUON_OK;
  call_begin(rt);
  if (luaL_loadbuffer(rt->L, code, strlen(code), "=(luon_rt_dostring)") != 0 || pcall(rt, 0, 0) != 0)
    s = fail_lua(rt, LUON_ESCRIPT, "luon_rt_dostring");
  lua_settop(rt->L, top);
  return call_end(rt, s, "luon_rt_dostring");
}

luon_status luon_rt_dofile(luon_rt *rt, const char *path) {
  if (!rt) return luon_set_error("luon_rt_dofile: NULL runtime"), LUON_EINVAL;
  if (!path) return fail(rt, LUON_EINVAL, "luon_rt_dofile: NULL path");
  int top = lua_gettop(rt->L);
  luon_status s = LUON_OK;
  call_begin(rt);
  int st = luaL_loadfile(rt->L, path);
  if (st == LUA_ERRSYNTAX || st == LUA_ERRMEM) s = fail_lua(rt, LUON_ESCRIPT, "luon_rt_dofile");
  else if (st != 0) s = fail_lua(rt, LUON_EIO, "luon_rt_dofile"); /* LUA_ERRFILE */
  else if (pcall(rt, 0, 0) != 0) s = fail_lua(rt, LUON_ESCRIPT, "luon_rt_dofile");
  lua_settop(rt->L, top);
  return call_end(rt, s, "luon_rt_dofile");
}

/* Push the value at the dotted path fn ("policy.act") from the globals. */
static void push_path(lua_State *L, const char *fn) {
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  while (*fn && !lua_isnil(L, -1)) {
    const char *dot = strchr(fn, '.');
    size_t len = dot ? (size_t)(dot - fn) : strlen(fn);
    if (lua_istable(L, -1) || lua_isuserdata(L, -1)) {
      lua_pushlstring(L, fn, len);
      lua_gettable(L, -2); /* may run an __index metamethod: only from pcall'd code */
    } else {
      lua_pushnil(L);
    }
    lua_remove(L, -2);
    fn += len + (dot ? 1 : 0);
  }
}

static int lookup(lua_State *L) {
  push_path(L, lua_tostring(L, 1));
  return 1;
}

static luon_status check_buffer(luon_rt *rt, const char *fn, const char *what, int k,
                                const luon_buffer *b) {
  if (b->ndim < 0 || b->ndim > LUON_MAX_DIMS)
    return fail(rt, LUON_EINVAL, "luon_rt_call(%s): %s %d has ndim %d (0..8)", fn, what, k, (int)b->ndim);
  if (luon_dtype_size(b->dtype) == 0)
    return fail(rt, LUON_EDTYPE, "luon_rt_call(%s): %s %d has unknown dtype %d", fn, what, k, (int)b->dtype);
  int64_t n = 1;
  for (int i = 0; i < b->ndim; i++) {
    if (b->shape[i] < 0)
      return fail(rt, LUON_EINVAL, "luon_rt_call(%s): %s %d has negative dimension %lld", fn, what, k,
                  (long long)b->shape[i]);
    n *= b->shape[i];
  }
  if (!b->data && n > 0) return fail(rt, LUON_EINVAL, "luon_rt_call(%s): %s %d has NULL data", fn, what, k);
  return LUON_OK;
}

static void shape_str(char *s, size_t n, int32_t ndim, const int64_t *shape) {
  size_t len = (size_t)snprintf(s, n, "(");
  for (int i = 0; i < ndim && len < n; i++)
    len += (size_t)snprintf(s + len, n - len, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (len < n) snprintf(s + len, n - len, ndim == 1 ? ",)" : ")");
}

/* Push the ndarray over in: the cached one when it still fits, else a new
 * wrapper (kept for the next call). Leaves an error message on failure. */
static luon_status push_input(luon_rt *rt, const char *fn, int k, const luon_buffer *b) {
  lua_State *L = rt->L;
  cached_input *c = &rt->in[k];
  if (c->ref != LUA_NOREF && c->data == b->data && c->dtype == b->dtype && c->ndim == b->ndim &&
      memcmp(c->shape, b->shape, sizeof(int64_t) * (size_t)b->ndim) == 0) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->ref);
    return LUON_OK;
  }
  luon_tensor *t;
  luon_status s = luon_tensor_wrap(b->data, b->dtype, b->ndim, b->shape, NULL, LUON_CPU, 0, &t);
  if (s != LUON_OK) return fail(rt, s, "luon_rt_call(%s): input %d: %s", fn, k, luon_last_error());
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->wrap);
  lua_pushlightuserdata(L, t); /* embed.wrap takes over the reference */
  if (pcall(rt, 1, 1) != 0) {
    luon_tensor_release(t);
    return fail_lua(rt, LUON_ESCRIPT, "luon_rt_call: wrapping an input");
  }
  luaL_unref(L, LUA_REGISTRYINDEX, c->ref);
  lua_pushvalue(L, -1);
  c->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  c->data = b->data;
  c->dtype = b->dtype;
  c->ndim = b->ndim;
  memcpy(c->shape, b->shape, sizeof c->shape);
  return LUON_OK;
}

/* Result k into out: same shape and dtype, else nothing is written. */
static luon_status copy_out(luon_rt *rt, const char *fn, int k, luon_tensor *t, const luon_buffer *b) {
  luon_tensor_info info;
  luon_status s = luon_tensor_info_get(t, &info);
  if (s != LUON_OK) return fail(rt, s, "luon_rt_call(%s): result %d: %s", fn, k, luon_last_error());
  int same = info.ndim == b->ndim;
  for (int i = 0; same && i < b->ndim; i++) same = info.shape[i] == b->shape[i];
  if (!same) {
    char got[200], want[200];
    shape_str(got, sizeof got, info.ndim, info.shape);
    shape_str(want, sizeof want, b->ndim, b->shape);
    return fail(rt, LUON_ESHAPE, "luon_rt_call(%s): result %d has shape %s but its buffer has shape %s",
                fn, k, got, want);
  }
  if (info.dtype != b->dtype)
    return fail(rt, LUON_EDTYPE, "luon_rt_call(%s): result %d is %s but its buffer is %s (convert with astype)",
                fn, k, luon_dtype_name(info.dtype), luon_dtype_name(b->dtype));
  size_t bytes = (size_t)info.size * (size_t)luon_dtype_size(b->dtype);
  s = luon_tensor_to_host(t, b->data, b->dtype, bytes);
  if (s != LUON_OK) return fail(rt, s, "luon_rt_call(%s): result %d: %s", fn, k, luon_last_error());
  return LUON_OK;
}

luon_status luon_rt_call(luon_rt *rt, const char *fn, int32_t nin, const luon_buffer *in,
                         int32_t nout, const luon_buffer *out) {
  if (!rt) return luon_set_error("luon_rt_call: NULL runtime"), LUON_EINVAL;
  if (!fn) return fail(rt, LUON_EINVAL, "luon_rt_call: NULL function name");
  if (nin < 0 || nin > LUON_RT_MAX_ARGS || nout < 0 || nout > LUON_RT_MAX_ARGS)
    return fail(rt, LUON_EINVAL, "luon_rt_call(%s): %d inputs and %d outputs, at most %d each", fn,
                (int)nin, (int)nout, LUON_RT_MAX_ARGS);
  if ((nin > 0 && !in) || (nout > 0 && !out))
    return fail(rt, LUON_EINVAL, "luon_rt_call(%s): NULL buffer list", fn);
  for (int k = 0; k < nin; k++) TRY(check_buffer(rt, fn, "input", k, &in[k]));
  for (int k = 0; k < nout; k++) TRY(check_buffer(rt, fn, "output", k, &out[k]));

  lua_State *L = rt->L;
  int top = lua_gettop(L);
  luon_status s = LUON_OK;
  call_begin(rt);
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->call);
  lua_pushlightuserdata(L, rt->outs);
  lua_pushinteger(L, nout);
  /* the function, looked up each call (Lua may redefine it), in protected
   * mode since a metatable on the way may raise: luon's modules do for a
   * name they lack, which is EINVAL as for a name that is no function */
  lua_rawgeti(L, LUA_REGISTRYINDEX, rt->lookup);
  lua_pushstring(L, fn);
  if (lua_pcall(L, 1, 1, 0) != 0) {
    s = fail_lua(rt, LUON_EINVAL, "luon_rt_call: looking up the function");
    goto done;
  }
  int callable = lua_isfunction(L, -1);
  if (!callable && luaL_getmetafield(L, -1, "__call")) {
    lua_pop(L, 1);
    callable = 1;
  }
  if (!callable) {
    s = fail(rt, LUON_EINVAL, "luon_rt_call: %s is not a function (it is %s)", fn, luaL_typename(L, -1));
    goto done;
  }
  for (int k = 0; k < nin; k++)
    if ((s = push_input(rt, fn, k, &in[k])) != LUON_OK) goto done;
  memset(rt->outs, 0, sizeof rt->outs);
  if (pcall(rt, 3 + nin, 0) != 0) {
    s = fail_lua(rt, LUON_ESCRIPT, fn);
    goto done;
  }
  for (int k = 0; k < nout; k++) {
    luon_status sk = copy_out(rt, fn, k, rt->outs[k], &out[k]);
    if (s == LUON_OK) s = sk;
  }
  for (int k = 0; k < nout; k++) {
    luon_tensor_release(rt->outs[k]);
    rt->outs[k] = NULL;
  }
done:
  lua_settop(L, top);
  char what[300];
  snprintf(what, sizeof what, "luon_rt_call(%s)", fn);
  return call_end(rt, s, what);
}

luon_status luon_rt_set_gc_mode(luon_rt *rt, int32_t mode) {
  if (!rt) return luon_set_error("luon_rt_set_gc_mode: NULL runtime"), LUON_EINVAL;
  if (mode != LUON_RT_GC_AUTO && mode != LUON_RT_GC_MANUAL)
    return fail(rt, LUON_EINVAL, "luon_rt_set_gc_mode: mode %d (expected LUON_RT_GC_AUTO 0 or LUON_RT_GC_MANUAL 1)",
                (int)mode);
  lua_rawgeti(rt->L, LUA_REGISTRYINDEX, rt->set_gc_mode);
  lua_pushstring(rt->L, mode == LUON_RT_GC_MANUAL ? "manual" : "auto");
  if (pcall(rt, 1, 0) != 0) return fail_lua(rt, LUON_ESCRIPT, "luon_rt_set_gc_mode");
  return LUON_OK;
}

luon_status luon_rt_gc_step(luon_rt *rt, int32_t budget_us, int32_t *cycle_done) {
  if (cycle_done) *cycle_done = 0;
  if (!rt) return luon_set_error("luon_rt_gc_step: NULL runtime"), LUON_EINVAL;
  if (budget_us < 0) return fail(rt, LUON_EINVAL, "luon_rt_gc_step: negative budget %d us", (int)budget_us);
  lua_State *L = rt->L;
  int64_t end = now_ns() + (int64_t)budget_us * 1000;
  int done = 0;
  do { /* core.gc_step: one small step, re-stopped in manual mode, swept after a cycle */
    lua_rawgeti(L, LUA_REGISTRYINDEX, rt->gc_step);
    if (pcall(rt, 0, 1) != 0) return fail_lua(rt, LUON_ESCRIPT, "luon_rt_gc_step");
    done = lua_toboolean(L, -1);
    lua_pop(L, 1);
  } while (!done && now_ns() < end);
  if (cycle_done) *cycle_done = done;
  return LUON_OK;
}

/* require("luon") through luon.so: luon's paths, then its Lua module. */
int luaopen_luon(lua_State *L) {
  add_paths(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchpath");
  lua_pushstring(L, "luon");
  lua_getfield(L, -3, "path");
  lua_call(L, 2, 2);
  const char *file = lua_tostring(L, -2);
  if (!file) return luaL_error(L, "luon.so: luon's Lua files are not where they were installed:%s",
                               lua_tostring(L, -1));
  if (luaL_loadfile(L, file) != 0) return lua_error(L);
  lua_pushstring(L, "luon");
  lua_call(L, 1, 1);
  return 1;
}
