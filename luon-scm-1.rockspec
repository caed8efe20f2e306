-- luarocks make (in a checkout) builds luon with CMake and installs it into
-- a LuaJIT rocks tree: the Lua files in its LUADIR and libluon (and
-- libluon_cuda, when the CUDA toolkit is found) in its LIBDIR, so that a
-- host's require("luon") works with the tree's paths. The `luon` executable
-- and the C headers come with `cmake --install` (see the README).
package = "luon"
version = "scm-1"
source = {
  url = "git+file://.",
}
description = {
  summary = "A deep-learning runtime for LuaJIT with MXNet Gluon's API",
  detailed = [[
    A C core (tensors, devices, CPU kernels, autograd, image decoding, a
    threaded data loader) with a CUDA backend, reached through LuaJIT's FFI,
    with MXNet Gluon's np, npx, autograd and gluon.
  ]],
  license = "Apache-2.0",
}
dependencies = {
  "lua == 5.1", -- LuaJIT
}
-- C libraries libluon links (Debian's libcjson-dev, zlib1g-dev and
-- libzip-dev, which scripts/setup installs); CMake finds them, luarocks
-- checks them first.
external_dependencies = {
  CJSON = { header = "cjson/cJSON.h" },
  ZLIB = { header = "zlib.h" },
  LIBZIP = { header = "zip.h" },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    LUON_LUADIR = "$(LUADIR)",
    LUON_LIBDIR = "$(LIBDIR)",
  },
}
