/* jitstop.h: making JIT-compiled Lua code stoppable by an interrupt hook,
 * for the `luon` executable (bindings/main.c) and the embedding library
 * (bindings/embed.c). Internal to bindings/; not installed. */
#ifndef LUON_JITSTOP_H
#define LUON_JITSTOP_H

struct lua_State;

/* Start it for L; returns whether it started. LUON_JIT_STOP=1 or 0 in the
 * environment overrides `wanted`; it is one per process, and is not started
 * when something else handles SIGPROF. */
int lu_jitstop_start(struct lua_State *L, int wanted);
/* Stop it if lu_jitstop_start(L) started it and SIGPROF is still its: before
 * lua_close(L). */
void lu_jitstop_end(struct lua_State *L, int started);

#endif
