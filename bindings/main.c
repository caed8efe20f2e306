/* main.c: the `luon` executable: LuaJIT with luon on its paths. Runs a
 * script with arguments, a string (-e), prints the paths for plain luajit
 * (--env), or starts the REPL when given no script. */
#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Lua directories: beside the executable when installed (../share/luon/lua),
 * else the build and source trees it was built from. */
static void lua_dirs(char *paths, size_t n, char *cpaths, size_t cn) {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[len > 0 ? len : 0] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  char installed[4200];
  snprintf(installed, sizeof installed, "%s/../share/luon/lua", exe);
  if (access(installed, F_OK) == 0) {
    snprintf(paths, n, "%s/?.lua;%s/?/init.lua", installed, installed);
    snprintf(cpaths, cn, "%s/../lib/?.so", exe);
  } else {
    snprintf(paths, n, "%s/?.lua;%s/?/init.lua;%s/?.lua;%s/?/init.lua", LUON_BUILD_LUA,
             LUON_BUILD_LUA, LUON_SOURCE_LUA, LUON_SOURCE_LUA);
    snprintf(cpaths, cn, "%s/?.so", LUON_BUILD_LIB);
  }
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = "(error object is not a string)";
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int report(lua_State *L, int status) {
  if (status != 0) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "luon: %s\n", msg ? msg : "(error object is not a string)");
    lua_pop(L, 1);
  }
  return status;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  int status = lua_pcall(L, narg, nres, base);
  lua_remove(L, base);
  return status;
}

static void usage(void) {
  fprintf(stderr,
          "usage: luon [options] [script [args...]]\n"
          "  -e code   run a string\n"
          "  -i        open the REPL after the script\n"
          "  --env     print LUA_PATH and LUA_CPATH lines for plain luajit\n"
          "  -h        this help\n"
          "With no script, luon starts the REPL.\n");
}

int main(int argc, char **argv) {
  char paths[20000], cpaths[5000];
  lua_dirs(paths, sizeof paths, cpaths, sizeof cpaths);
  int i = 1, interactive = 0, ran = 0;
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "luon: cannot create a Lua state (out of memory)\n");
    return 1;
  }
  luaL_openlibs(L);
  /* our directories first, then whatever LUA_PATH gave */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s;%s", paths, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "cpath");
  lua_pushfstring(L, "%s;%s", cpaths, lua_tostring(L, -1));
  lua_setfield(L, -3, "cpath");
  lua_pop(L, 2);

  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--env") == 0) {
      printf("export LUA_PATH='%s;;'\nexport LUA_CPATH='%s;;'\n", paths, cpaths);
      lua_close(L);
      return 0;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage();
      lua_close(L);
      return 0;
    } else if (strcmp(a, "-i") == 0) {
      interactive = 1;
    } else if (strcmp(a, "-e") == 0) {
      if (i + 1 >= argc) {
        usage();
        lua_close(L);
        return 1;
      }
      ran = 1;
      int st = luaL_loadbuffer(L, argv[i + 1], strlen(argv[i + 1]), "=(command line)");
      if (st == 0) st = docall(L, 0, 0);
      if (report(L, st)) {
        lua_close(L);
        return 1;
      }
      i++;
    } else if (strcmp(a, "--") == 0) {
      i++;
      break;
    } else if (a[0] == '-' && a[1] != 0) {
      fprintf(stderr, "luon: unknown option %s\n", a);
      usage();
      lua_close(L);
      return 1;
    } else {
      break;
    }
  }

  int status = 0;
  if (i < argc) { /* a script: arg[0] is its name, arg[1..] its arguments */
    ran = 1;
    lua_createtable(L, argc - i - 1, i + 1);
    for (int k = 0; k < argc; k++) {
      lua_pushstring(L, argv[k]);
      lua_rawseti(L, -2, k - i);
    }
    lua_setglobal(L, "arg");
    status = luaL_loadfile(L, argv[i]);
    if (status == 0) {
      for (int k = i + 1; k < argc; k++) lua_pushstring(L, argv[k]);
      status = docall(L, argc - i - 1, 0);
    }
    report(L, status);
  }
  if (status == 0 && (interactive || !ran)) {
    lua_getglobal(L, "require");
    lua_pushstring(L, "luon.repl");
    status = docall(L, 1, 1);
    if (status == 0) {
      lua_getfield(L, -1, "run");
      lua_remove(L, -2);
      status = docall(L, 0, 0);
    }
    report(L, status);
  }
  lua_close(L);
  return status ? 1 : 0;
}
