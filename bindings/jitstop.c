/* jitstop.c: making JIT-compiled Lua code stoppable. LuaJIT runs no hooks
 * inside compiled traces, so the hook that an interrupt sets (Ctrl-C,
 * luon_rt_interrupt, a time limit) would never fire in a compiled loop that
 * calls no op (`while true do end`). LuaJIT's profiler, in line mode ("l"),
 * compiles a check of its profile hook into every trace (at each new source
 * line), and its timer (SIGPROF, every 10 ms of the process's CPU time)
 * raises that hook: the trace exits to the interpreter, which then runs the
 * pending hooks, the interrupt's among them. So the profiler runs while a
 * state is ours, its callback doing nothing. The checks cost no measurable
 * time (a test and a branch per line); the signal is taken with SA_RESTART,
 * but it lands on any thread of the process, so a host's poll or nanosleep
 * may return EINTR: the `luon` executable runs it, an embedding host asks
 * for it (luon_rt_set_timeout, or LUON_JIT_STOP=1).
 * LuaJIT has one profiler per process: it runs for the first state only,
 * and not when SIGPROF is already handled (by the host's profiler,
 * jit.profile, gperftools); other states' compiled loops stop only at ops.
 * A script that starts jit.profile itself takes it over, and a host that
 * installs its own SIGPROF handler afterwards keeps it: luon then leaves
 * LuaJIT's profiler alone (stopping it would put back SIGPROF's default,
 * which ends the process). */
#include "jitstop.h"
#include <lua.h>
#include <luajit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static void on_sample(void *data, lua_State *L, int samples, int vmstate) {
  (void)data, (void)L, (void)samples, (void)vmstate;
}

static int sigprof_free(void) {
  struct sigaction sa;
  return sigaction(SIGPROF, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) && sa.sa_handler == SIG_DFL;
}

static struct sigaction luajit_action; /* SIGPROF's action once the profiler started */

int lu_jitstop_start(lua_State *L, int wanted) {
  const char *env = getenv("LUON_JIT_STOP");
  if (env && *env) wanted = strcmp(env, "0") != 0;
  if (!wanted || !sigprof_free()) return 0;
  luaJIT_profile_start(L, "l", on_sample, NULL);
  if (sigprof_free()) return 0; /* it did not start */
  sigaction(SIGPROF, NULL, &luajit_action);
  return 1;
}

void lu_jitstop_end(lua_State *L, int started) {
  if (!started) return;
  struct sigaction now;
  if (sigaction(SIGPROF, NULL, &now) != 0 || now.sa_handler != luajit_action.sa_handler) return; /* not its */
  luaJIT_profile_stop(L); /* does nothing if jit.profile restarted it for another state */
}
