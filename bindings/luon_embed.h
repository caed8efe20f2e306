/* luon_embed.h: luon inside a C host (a game, a robot's control loop): a
 * runtime with its own LuaJIT state or attached to the host's, running Lua
 * files and strings, calling a Lua function on the host's buffers without
 * copying them, and stepping the garbage collector between ticks. Installed
 * beside luon.h; build with `pkg-config --cflags --libs luon`.
 *
 * Every function returns a luon_status (LUON_OK = 0) and leaves a message
 * for luon_rt_last_error(); nothing here aborts, exits or prints, and the
 * runtime stays usable after any error. A runtime belongs to one thread at a
 * time (luon_rt_interrupt excepted). Lua errors come back as LUON_ESCRIPT
 * with the error and a traceback; a stopped call as LUON_EINTERRUPTED.
 *
 *   luon_rt *rt;
 *   if (luon_rt_new(&rt) || luon_rt_dofile(rt, "policy.lua")) fail(luon_rt_last_error(rt));
 *   luon_rt_set_gc_mode(rt, LUON_RT_GC_MANUAL);
 *   float obs[16], act[4];
 *   luon_buffer in = {obs, LUON_DTYPE_F32, 1, {16}}, out = {act, LUON_DTYPE_F32, 1, {4}};
 *   for (;;) {                                   // one tick
 *     read_sensors(obs);
 *     if (luon_rt_call(rt, "policy.act", 1, &in, 1, &out)) fail(luon_rt_last_error(rt));
 *     drive_motors(act);
 *     luon_rt_gc_step(rt, 200, NULL);            // collect between ticks, <= ~200 us
 *   }
 *   luon_rt_free(rt);
 */
#ifndef LUON_EMBED_H
#define LUON_EMBED_H

#include "luon.h"

#ifdef __cplusplus
extern "C" {
#endif

struct lua_State;

/* A runtime: a Lua state with luon loaded. Opaque. */
typedef struct luon_rt luon_rt;

/* A host buffer: row-major elements of dtype at data, on the host (cpu).
 * luon reads and writes it in place and never frees it. */
typedef struct luon_buffer {
  void *data;
  int32_t dtype;          /* luon_dtype, e.g. LUON_DTYPE_F32 */
  int32_t ndim;           /* 0..8 */
  int64_t shape[8];       /* LUON_MAX_DIMS */
} luon_buffer;

typedef enum luon_rt_limits {
  LUON_RT_MAX_ARGS = 8    /* inputs and outputs of one luon_rt_call */
} luon_rt_limits;

typedef enum luon_rt_gc_mode {
  /* luon forces a full collection inside whichever op allocates past its
   * native-memory budget (lua/luon/core.lua, gc_pressure): fine for
   * scripts, but a control tick may pay for it (milliseconds). */
  LUON_RT_GC_AUTO = 0,
  /* No collection ever runs inside a call: LuaJIT's collector is stopped and
   * luon only counts native bytes. The host must call luon_rt_gc_step
   * between ticks, or memory grows without bound. */
  LUON_RT_GC_MANUAL = 1
} luon_rt_gc_mode;

/* A new runtime with its own Lua state (standard libraries open, luon's
 * Lua directories first on package.path: found beside this library when
 * installed, else in the build tree) and require("luon") done. *out is +1:
 * release it with luon_rt_free. On failure *out is NULL and the message is
 * in luon_last_error() (also luon_rt_last_error(NULL)). LUON_ENOMEM, or
 * LUON_ESCRIPT when luon's Lua files cannot be loaded. */
luon_status luon_rt_new(luon_rt **out);
/* The same over a host's existing LuaJIT state L (its standard libraries
 * open): prepends luon's directories to package.path/cpath and requires
 * luon there. The host keeps L; luon_rt_free leaves it open. */
luon_status luon_rt_attach(struct lua_State *L, luon_rt **out);
/* Release a runtime (NULL is fine). An own state is closed, releasing every
 * array; an attached one is left to its host. */
void luon_rt_free(luon_rt *rt);
/* The Lua state (own or attached), for hosts that use the Lua C API too. */
struct lua_State *luon_rt_state(luon_rt *rt);

/* Run a chunk of Lua (LUON_ESCRIPT on a syntax or run-time error). */
luon_status luon_rt_dostring(luon_rt *rt, const char *code);
/* Run a Lua file (LUON_EIO when it cannot be read, LUON_ESCRIPT on errors). */
luon_status luon_rt_dofile(luon_rt *rt, const char *path);

/* Call the Lua function named fn ("act", "policy.act": a global or a field
 * path from one) with nin ndarrays over the host buffers in[] and copy its
 * first nout results, which must be ndarrays of exactly out[k]'s shape and
 * dtype (on any device), into out[k].data. Inputs are not copied: each
 * array is a cpu(0) view of in[k].data, so what Lua writes into it lands
 * in the host's buffer, and the buffer must stay valid while Lua keeps the
 * array (keep a copy, x:copy(), rather than the array itself). Wrappers
 * are cached per argument position and reused while data, dtype and shape
 * stay the same, so a control loop creates none after its first tick.
 * LUON_EINVAL (bad arguments, fn not a function or naming a field a
 * luon module lacks), LUON_ESCRIPT (a Lua
 * error, or results that are not nout ndarrays), LUON_ESHAPE and
 * LUON_EDTYPE (a result that does not fit its buffer: nothing is written
 * to that buffer). */
luon_status luon_rt_call(luon_rt *rt, const char *fn, int32_t nin, const luon_buffer *in,
                         int32_t nout, const luon_buffer *out);

/* Stopping a runaway call. luon_rt_interrupt(rt) stops the luon_rt_call,
 * luon_rt_dostring or luon_rt_dofile under way on rt, which returns
 * LUON_EINTERRUPTED ("luon_rt_call(policy.act): interrupted by
 * luon_rt_interrupt: ..." with the Lua traceback); with no call under way
 * it does nothing. Call it from any thread or from a signal handler: it is
 * async-signal-safe (it sets the call's own interrupt flag, see
 * luon_interrupt_scope, and a Lua hook). Lua code stops at its next
 * instruction, call or return; a long C op (matmul, conv2d, elementwise,
 * reductions) within a few milliseconds, releasing its result; the outputs
 * of the call are not written. Calls on other runtimes (other threads) go
 * on. The next call runs normally.
 *
 * luon_rt_set_timeout(rt, us) gives every later call on rt that time limit
 * (0: none, the default): a watchdog thread (started with the first limit,
 * ended by luon_rt_free) interrupts a call still running after `us`
 * microseconds, its message saying that the limit passed. Arming it costs
 * a mutex per call.
 *
 * LuaJIT runs no hooks inside JIT-compiled code, so a compiled loop that
 * calls no luon op (`while true do end`) stops only when the runtime runs
 * LuaJIT's profiler in line mode: a SIGPROF timer, every 10 ms of CPU time,
 * makes compiled code return to the interpreter, which runs the hook (it
 * costs no measurable time; such loops then stop within ~10-30 ms). The
 * signal may land on any thread of the process, so the host's poll,
 * nanosleep and the like can return EINTR: a runtime runs it only when
 * asked, by its first luon_rt_set_timeout with a limit or by
 * LUON_JIT_STOP=1 in the environment (LUON_JIT_STOP=0: never). LuaJIT has
 * one profiler per process: only the first runtime that asks gets it, and
 * none does when SIGPROF is already handled (a host profiler). Without it,
 * compiled loops stop at their next luon op, and jit.off(fn, true) makes
 * other code always stoppable. A script that starts jit.profile itself
 * takes the profiler over. */
void luon_rt_interrupt(luon_rt *rt);
luon_status luon_rt_set_timeout(luon_rt *rt, int64_t timeout_us);

/* Choose who runs the garbage collector (luon_rt_gc_mode). Lua hosts do the
 * same with require("luon.core").set_gc_mode("manual"). */
luon_status luon_rt_set_gc_mode(luon_rt *rt, int32_t mode);
/* Do incremental collection work for about budget_us microseconds (at
 * least one small step), stopping early when a cycle finishes; a finished
 * cycle releases the arrays it found dead, returning their blocks to the
 * caching allocator. *cycle_done (may be NULL) says whether one finished.
 * Only the atomic phase of LuaJIT's collector cannot be split: it costs
 * about the live Lua heap's gray objects, well under a millisecond for a
 * policy network. */
luon_status luon_rt_gc_step(luon_rt *rt, int32_t budget_us, int32_t *cycle_done);

/* The message of the runtime's last failed call ("" if none); with rt
 * NULL, luon_last_error(). Valid until the next call on rt. */
const char *luon_rt_last_error(const luon_rt *rt);

/* The Lua module entry point: require("luon") from any LuaJIT state finds
 * luon.so (installed in prefix/lib, built in build/lib) on package.cpath;
 * it puts luon's directories on package.path/cpath and returns the luon
 * module, as if luon's Lua files had been on the path all along. */
int luaopen_luon(struct lua_State *L);

#ifdef __cplusplus
}
#endif

#endif
