-- luon.embed: the Lua half of the C embedding API (bindings/embed.c,
-- luon_embed.h): host tensors into ndarrays, results back as tensor
-- pointers. Not for scripts; loading it loads all of luon.
require("luon")
local core = require("luon.core")
local ffi, C = core.ffi, core.C
local is_array = core.is_array

local M = {set_gc_mode = core.set_gc_mode, gc_step = core.gc_step}

local tensor_p = ffi.typeof("luon_tensor*")
local tensor_pp = ffi.typeof("luon_tensor**")

-- An ndarray over a +1 tensor given as a light userdata.
function M.wrap(p)
  return core.wrap(ffi.cast(tensor_p, p))
end

-- ffi.cast of a light userdata is not compiled (it aborted every call's trace)
local last_outs, last_o

local function finish(outs, nout, ...)
  local n = select("#", ...)
  if n < nout then
    error(("returned %d value%s, the host expects %d ndarray%s"):format(
      n, n == 1 and "" or "s", nout, nout == 1 and "" or "s"), 0)
  end
  for k = 1, nout do
    local v = select(k, ...)
    if not is_array(v) then
      error(("result %d is a %s, the host expects an ndarray"):format(k, type(v)), 0)
    end
  end
  if outs ~= last_outs then -- the runtime's array, the same every call: cast once
    last_outs, last_o = outs, ffi.cast(tensor_pp, outs)
  end
  for k = 1, nout do last_o[k - 1] = C.luon_tensor_retain((select(k, ...)).t) end
end

-- f(...), then the first nout results (+1 each) into the C array outs.
function M.call(outs, nout, f, ...)
  finish(outs, nout, f(...))
end

return M
