/* paths.h: where luon's Lua files and native libraries are, for the `luon`
 * executable (bindings/main.c) and the embedding library (bindings/embed.c).
 * Internal to bindings/; not installed. */
#ifndef LUON_PATHS_H
#define LUON_PATHS_H

#include <stddef.h>

struct lua_State;

/* package.path and package.cpath entries for a binary in directory `dir`:
 * dir/../share/luon/lua and dir/../lib when installed under a prefix, else
 * the build and source trees it was built from. */
void lu_lua_dirs(const char *dir, char *paths, size_t n, char *cpaths, size_t cn);
/* Put them in front of L's package.path and package.cpath. */
void lu_add_lua_dirs(struct lua_State *L, const char *paths, const char *cpaths);

/* Whether the function a hook interrupts (ar, from the hook) is one of
 * luon's own Lua files, whose directory core.lua puts in
 * registry.luon_lua_dir. An interrupt hook waits until it is not: an error
 * raised between an op's return and the wrapping of its result would leak
 * the result (luon's bookkeeping is no place for an error). */
struct lua_Debug;
int lu_in_luon_lua(struct lua_State *L, struct lua_Debug *ar);

#endif
