/* paths.c: where luon's Lua files and native libraries are (paths.h): the one
 * place that knows the install layout (prefix/bin, prefix/lib,
 * prefix/share/luon/lua) and the build tree's. */
#include "paths.h"
#include <lua.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void lu_lua_dirs(const char *dir, char *paths, size_t n, char *cpaths, size_t cn) {
  char installed[4200];
  snprintf(installed, sizeof installed, "%s/../share/luon/lua", dir);
  if (access(installed, F_OK) == 0) {
    snprintf(paths, n, "%s/?.lua;%s/?/init.lua", installed, installed);
    snprintf(cpaths, cn, "%s/../lib/?.so", dir);
  } else {
    snprintf(paths, n, "%s/?.lua;%s/?/init.lua;%s/?.lua;%s/?/init.lua", LUON_BUILD_LUA,
             LUON_BUILD_LUA, LUON_SOURCE_LUA, LUON_SOURCE_LUA);
    snprintf(cpaths, cn, "%s/?.so", LUON_BUILD_LIB);
  }
}

/* ours first, then whatever was there (LUA_PATH, the host's own) */
void lu_add_lua_dirs(lua_State *L, const char *paths, const char *cpaths) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s;%s", paths, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "cpath");
  lua_pushfstring(L, "%s;%s", cpaths, lua_tostring(L, -1));
  lua_setfield(L, -3, "cpath");
  lua_pop(L, 2);
}

int lu_in_luon_lua(lua_State *L, lua_Debug *ar) {
  if (!lua_getinfo(L, "S", ar)) return 0;
  /* A C function (an FFI call, a cdata's __index, a constructor) belongs to
   * the Lua code that called it: a call hook there from luon's own code may
   * fall between an op handing back a new tensor and the array that will
   * own it being made, and an error there would lose the tensor. */
  lua_Debug up;
  for (int level = 1; ar->what && strcmp(ar->what, "C") == 0; level++) {
    if (!lua_getstack(L, level, &up) || !lua_getinfo(L, "S", &up)) return 0;
    ar = &up;
  }
  if (!ar->source) return 0;
  lua_getfield(L, LUA_REGISTRYINDEX, "luon_lua_dir");
  size_t n = 0;
  const char *dir = lua_tolstring(L, -1, &n);
  int in = dir && n > 0 && strncmp(ar->source, dir, n) == 0;
  lua_pop(L, 1);
  return in;
}
