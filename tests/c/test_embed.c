/* test_embed: luon_tensor_wrap (tensors over caller memory) and the
 * embedding API of bindings/luon_embed.h: own and attached states, strings
 * and files, calls on host buffers without copies, every error path
 * returning a status and a message with the runtime still usable, GC
 * stepping, and luaopen_luon through package.cpath. */
#include "luon_embed.h"
#include "testutil.h"
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

static void test_wrap(void) {
  float host[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  luon_tensor *t = NULL, *v = NULL;
  CHECK_OK(luon_tensor_wrap(host, LUON_DTYPE_F32, 2, shape, NULL, LUON_CPU, 0, &t));
  luon_tensor_info info;
  CHECK_OK(luon_tensor_info_get(t, &info));
  CHECK(info.data == host && info.contiguous && info.size == 6 && info.strides[0] == 3, "wrap info");

  /* an op reads host memory; writing into the tensor writes the host's */
  int32_t op = luon_op_find("sum"), nout = 1;
  luon_tensor *sum = NULL;
  CHECK_OK(luon_op_call(op, 1, &t, NULL, &nout, &sum));
  float s = 0;
  CHECK_OK(luon_tensor_to_host(sum, &s, LUON_DTYPE_F32, sizeof s));
  CHECK(s == 21, "sum %g", s);
  luon_tensor_release(sum);
  float ones[6] = {1, 1, 1, 1, 1, 1};
  luon_tensor *src;
  CHECK_OK(luon_tensor_from_host(ones, LUON_DTYPE_F32, 2, shape, LUON_CPU, 0, &src));
  CHECK_OK(luon_tensor_copy(t, src));
  luon_tensor_release(src);
  CHECK(host[0] == 1 && host[5] == 1, "copy into a wrapped tensor reaches host memory");

  /* a view outlives the tensor; neither frees host memory (ASan would say) */
  int64_t vshape[1] = {3}, vstride[1] = {1};
  CHECK_OK(luon_tensor_view(t, 1, vshape, vstride, 3, &v));
  luon_tensor_release(t);
  CHECK_OK(luon_tensor_info_get(v, &info));
  CHECK(info.data == host + 3, "view of wrapped memory");
  luon_tensor_release(v);

  /* strides, negative ones included: a reversed column of a 3x2 matrix */
  double m[6] = {0, 10, 1, 11, 2, 12};
  int64_t cshape[1] = {3}, cstride[1] = {-2};
  CHECK_OK(luon_tensor_wrap(m + 4, LUON_DTYPE_F64, 1, cshape, cstride, LUON_CPU, 0, &t));
  double got[3];
  CHECK_OK(luon_tensor_to_host(t, got, LUON_DTYPE_F64, sizeof got));
  CHECK(got[0] == 2 && got[1] == 1 && got[2] == 0, "reversed strided wrap: %g %g %g", got[0], got[1], got[2]);
  luon_tensor_release(t);

  /* errors: statuses and messages, nothing allocated */
  CHECK(luon_tensor_wrap(NULL, LUON_DTYPE_F32, 2, shape, NULL, LUON_CPU, 0, &t) == LUON_EINVAL, "NULL data");
  CHECK(strstr(luon_last_error(), "wrap: NULL data") != NULL, "%s", luon_last_error());
  CHECK(luon_tensor_wrap(host, 99, 2, shape, NULL, LUON_CPU, 0, &t) == LUON_EDTYPE, "bad dtype");
  int64_t neg[1] = {-1};
  CHECK(luon_tensor_wrap(host, LUON_DTYPE_F32, 1, neg, NULL, LUON_CPU, 0, &t) == LUON_ESHAPE, "bad shape");
  CHECK(luon_tensor_wrap(host, LUON_DTYPE_F32, 1, NULL, NULL, LUON_CPU, 0, &t) == LUON_EINVAL, "NULL shape");
  CHECK(luon_tensor_wrap(host, LUON_DTYPE_F32, 0, NULL, NULL, LUON_CPU, 0, &t) == LUON_OK, "a scalar");
  luon_tensor_release(t);
  CHECK(luon_tensor_wrap(NULL, LUON_DTYPE_F32, 1, (int64_t[]){0}, NULL, LUON_CPU, 0, &t) == LUON_OK,
        "empty with NULL data");
  luon_tensor_release(t);
}

static void test_runtime(void) {
  luon_rt *rt = NULL;
  CHECK_OK(luon_rt_new(&rt));
  if (!rt) return;
  CHECK_OK(luon_rt_dostring(rt, "np = require('luon').np\n"
                                "function scale(x, k) (x * k):copyto(x); return x * k, (x * k):sum() end\n"
                                "ctl = {act = function(x) return x:astype('float64') end}\n"
                                "function nothing() end\n"
                                "function boom(x) return x + np.ones({7}) end\n"
                                "function strings() return 'a' end"));

  /* two inputs in, two results out; input 0 is the host's memory (scaled in place) */
  float x[4] = {1, 2, 3, 4}, k = 2, y[4] = {0}, s = 0;
  luon_buffer in[2] = {{x, LUON_DTYPE_F32, 1, {4}}, {&k, LUON_DTYPE_F32, 0, {0}}};
  luon_buffer out[2] = {{y, LUON_DTYPE_F32, 1, {4}}, {&s, LUON_DTYPE_F32, 0, {0}}};
  CHECK_OK(luon_rt_call(rt, "scale", 2, in, 2, out));
  CHECK(x[0] == 2 && x[3] == 8, "zero-copy input written by Lua: %g %g", x[0], x[3]);
  CHECK(y[0] == 4 && y[3] == 16 && s == 40, "results %g %g %g", y[0], y[3], s);
  /* the host changes its buffer: the next call sees the new values (same wrapper) */
  x[0] = 1; x[1] = 1; x[2] = 1; x[3] = 1;
  CHECK_OK(luon_rt_call(rt, "scale", 2, in, 2, out));
  CHECK(s == 16 && x[0] == 2, "second call reads the host's new values: %g", s);

  /* a dotted name, float64 result */
  double d[4];
  luon_buffer dout = {d, LUON_DTYPE_F64, 1, {4}};
  CHECK_OK(luon_rt_call(rt, "ctl.act", 1, in, 1, &dout));
  CHECK(d[0] == 2, "ctl.act %g", d[0]);

  /* errors: each a status and a message; the runtime keeps working */
  struct { const char *fn; int nout; const luon_buffer *out; luon_status want; const char *msg; } cases[] = {
      {"missing", 1, out, LUON_EINVAL, "missing is not a function (it is nil)"},
      {"np.nothing.deeper", 1, out, LUON_EINVAL, "np has no field 'nothing'"},
      {"nothing", 1, out, LUON_ESCRIPT, "returned 0 values, the host expects 1 ndarray"},
      {"strings", 1, out, LUON_ESCRIPT, "result 1 is a string"},
      {"boom", 1, out, LUON_ESCRIPT, "boom"},
      {"ctl.act", 1, out, LUON_EDTYPE, "result 0 is float64 but its buffer is float32"},
      {"scale", 1, &out[1], LUON_ESHAPE, "result 0 has shape (4,) but its buffer has shape ()"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    luon_status st = luon_rt_call(rt, cases[c].fn, 2, in, cases[c].nout, cases[c].out);
    CHECK(st == cases[c].want, "%s: status %d, want %d (%s)", cases[c].fn, (int)st, (int)cases[c].want,
          luon_rt_last_error(rt));
    CHECK(strstr(luon_rt_last_error(rt), cases[c].msg) != NULL, "%s: message '%s'", cases[c].fn,
          luon_rt_last_error(rt));
    CHECK(strcmp(luon_last_error(), luon_rt_last_error(rt)) == 0, "thread-local message too");
  }
  luon_buffer bad = {NULL, LUON_DTYPE_F32, 1, {4}};
  CHECK(luon_rt_call(rt, "scale", 1, &bad, 0, NULL) == LUON_EINVAL, "NULL data");
  bad = (luon_buffer){x, 42, 1, {4}};
  CHECK(luon_rt_call(rt, "scale", 1, &bad, 0, NULL) == LUON_EDTYPE, "bad dtype");
  bad = (luon_buffer){x, LUON_DTYPE_F32, 9, {4}};
  CHECK(luon_rt_call(rt, "scale", 1, &bad, 0, NULL) == LUON_EINVAL, "ndim 9");
  CHECK(luon_rt_call(rt, "scale", 9, in, 0, NULL) == LUON_EINVAL, "9 inputs");
  CHECK(luon_rt_dostring(rt, "this is not Lua") == LUON_ESCRIPT, "syntax error");
  CHECK(luon_rt_dostring(rt, "error('from a string')") == LUON_ESCRIPT, "run-time error");
  CHECK(strstr(luon_rt_last_error(rt), "from a string") && strstr(luon_rt_last_error(rt), "traceback"),
        "message with traceback: %s", luon_rt_last_error(rt));
  /* an error value that is not a string: tostring's text (honouring
   * __tostring), with the traceback */
  struct { const char *code, *msg; } objs[] = {
      {"error(setmetatable({}, {__tostring = function() return 'custom failure' end}))", "custom failure"},
      {"error(nil)", "luon_rt_dostring: nil\n"},
      {"error({})", "luon_rt_dostring: table: 0x"},
      {"error(true)", "luon_rt_dostring: true\n"},
      {"error(setmetatable({}, {__tostring = function() error('no') end}))", "table value whose __tostring failed"},
  };
  for (size_t c = 0; c < sizeof objs / sizeof objs[0]; c++) {
    CHECK(luon_rt_dostring(rt, objs[c].code) == LUON_ESCRIPT, "%s", objs[c].code);
    CHECK(strstr(luon_rt_last_error(rt), objs[c].msg) && strstr(luon_rt_last_error(rt), "traceback"),
          "%s: message with traceback: %s", objs[c].code, luon_rt_last_error(rt));
  }
  CHECK_OK(luon_rt_dostring(rt, "function raises_table() error(setmetatable({}, {__tostring = "
                                "function() return 'policy failed' end})) end"));
  CHECK(luon_rt_call(rt, "raises_table", 0, NULL, 0, NULL) == LUON_ESCRIPT, "call raising a table");
  CHECK(strstr(luon_rt_last_error(rt), "raises_table: policy failed") && strstr(luon_rt_last_error(rt), "traceback"),
        "call: message with traceback: %s", luon_rt_last_error(rt));
  CHECK(luon_rt_dofile(rt, "/nonexistent/policy.lua") == LUON_EIO, "missing file");
  CHECK(strstr(luon_rt_last_error(rt), "/nonexistent/policy.lua") != NULL, "%s", luon_rt_last_error(rt));
  CHECK(luon_rt_set_gc_mode(rt, 7) == LUON_EINVAL, "bad gc mode");
  CHECK(luon_rt_gc_step(rt, -1, NULL) == LUON_EINVAL, "negative budget");
  x[0] = x[1] = x[2] = x[3] = 1;
  CHECK_OK(luon_rt_call(rt, "scale", 2, in, 2, out));
  CHECK(s == 16, "usable after errors: %g", s);

  /* a file */
  char path[] = "/tmp/luon_test_embed_XXXXXX";
  int fd = mkstemp(path);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  CHECK(f != NULL, "temp file");
  if (f) {
    fputs("function from_file(x) return x * 3 end\n", f);
    fclose(f);
    CHECK_OK(luon_rt_dofile(rt, path));
    CHECK_OK(luon_rt_call(rt, "from_file", 1, in, 1, out));
    CHECK(y[0] == 6, "from_file %g", y[0]);
    remove(path);
  }

  /* manual GC: no collection inside calls; steps between them free the dead arrays */
  CHECK_OK(luon_rt_set_gc_mode(rt, LUON_RT_GC_MANUAL));
  CHECK_OK(luon_rt_dostring(rt, "assert(require('luon.core').gc_mode == 'manual')"));
  int64_t live0 = luon_counters_get()->tensors_live;
  for (int i = 0; i < 200; i++) CHECK_OK(luon_rt_call(rt, "scale", 2, in, 2, out));
  CHECK(luon_counters_get()->tensors_live > live0 + 200, "dead arrays wait for the host's step");
  /* the first cycle to end may have begun before those calls: arrays made
   * during its sweep are left to the next one, so step through two */
  int32_t done = 0, cycles = 0;
  for (int i = 0; i < 200000 && cycles < 2; i++) {
    CHECK_OK(luon_rt_gc_step(rt, 50, &done));
    cycles += done;
  }
  CHECK(cycles == 2, "two cycles finish");
  CHECK(luon_counters_get()->tensors_live <= live0 + 4, "released after the cycle: %lld vs %lld",
        (long long)luon_counters_get()->tensors_live, (long long)live0);
  CHECK_OK(luon_rt_set_gc_mode(rt, LUON_RT_GC_AUTO));
  luon_rt_free(rt);
  luon_rt_free(NULL);
  CHECK(luon_rt_call(NULL, "f", 0, NULL, 0, NULL) == LUON_EINVAL, "NULL runtime");
  CHECK(strstr(luon_rt_last_error(NULL), "NULL runtime") != NULL, "%s", luon_rt_last_error(NULL));
}

/* a host that has its own state: attach, and require through luon.so */
static void test_host_state(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_pushinteger(L, 42);
  lua_setglobal(L, "host_value");
  luon_rt *rt = NULL;
  CHECK_OK(luon_rt_attach(L, &rt));
  if (rt) {
    CHECK(luon_rt_state(rt) == L, "same state");
    float x[3] = {1, 2, 3}, y = 0;
    luon_buffer in = {x, LUON_DTYPE_F32, 1, {3}}, out = {&y, LUON_DTYPE_F32, 0, {0}};
    CHECK_OK(luon_rt_dostring(rt, "function total(x) return x:sum() * host_value end"));
    CHECK_OK(luon_rt_call(rt, "total", 1, &in, 1, &out));
    CHECK(y == 252, "attached call %g", y);
    luon_rt_free(rt);
  }
  /* the host's state is still the host's */
  CHECK(luaL_dostring(L, "assert(host_value == 42 and require('luon').np)") == 0, "%s", lua_tostring(L, -1));
  lua_close(L);

  CHECK(luon_rt_attach(NULL, &rt) == LUON_EINVAL && rt == NULL, "NULL state");
  L = luaL_newstate(); /* no standard libraries */
  CHECK(luon_rt_attach(L, &rt) == LUON_EINVAL && rt == NULL, "no package library");
  CHECK(strstr(luon_last_error(), "luaL_openlibs") != NULL, "%s", luon_last_error());
  lua_close(L);

  /* only package.cpath knows luon: require finds luon.so, luaopen_luon the rest */
  L = luaL_newstate();
  luaL_openlibs(L);
  int st = luaL_dostring(L, "package.path = ''\n"
                            "package.cpath = '" LUON_BUILD_LIB "/?.so'\n"
                            "local luon = require('luon')\n"
                            "assert(package.loaded.luon == luon)\n"
                            "assert(luon.np.arange(4):sum():item() == 6)\n"
                            "assert(package.path:find('/lua/?/init.lua', 1, true), package.path)");
  CHECK(st == 0, "require through luon.so: %s", lua_tostring(L, -1));
  lua_close(L);
}

int main(void) {
  test_wrap();
  test_runtime();
  test_host_state();
  return TEST_RESULT;
}
