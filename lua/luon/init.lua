-- luon: a deep-learning runtime for Lua. local mx = require("luon") gives
-- MXNet's namespaces (mx.np, mx.npx, mx.autograd, mx.gluon, mx.init, ...)
-- and clock(); an unknown name is an error naming the close ones.
local core = require("luon.core")
local np = require("luon.np")
require("luon.ndarray")
local npx = require("luon.npx")
local autograd = require("luon.autograd")

local ffi = core.ffi
ffi.cdef [[
typedef struct luon_timespec { long tv_sec; long tv_nsec; } luon_timespec;
int clock_gettime(int clk_id, luon_timespec *tp);
]]
local ts = ffi.new("luon_timespec")

local luon = {np = np, npx = npx, autograd = autograd, version = "0.1.0"}
luon.init = require("luon.initializer")
luon.gluon = require("luon.gluon")
luon.optimizer = require("luon.gluon.optimizer")    -- mx.optimizer
luon.lr_scheduler = luon.optimizer.lr_scheduler     -- mx.lr_scheduler

-- Seconds from a monotonic clock, as a float (for timing loops).
function luon.clock()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

luon.image = require("luon.image")
luon.dist = require("luon.dist")                    -- processes over MPI (docs/distributed.md)
luon.amp = require("luon.amp")                      -- mixed precision (MXNet's mx.contrib.amp)
luon.profiler = require("luon.profiler")            -- per-op time (MXNet's mx.profiler)
luon.onnx = require("luon.onnx")                    -- ONNX export (MXNet's mx.onnx)
luon.contrib = core.strict_module({amp = luon.amp, onnx = luon.onnx}, "mx.contrib")

-- MXNet's top-level spellings: mx.cpu(), mx.gpu(1), mx.context.num_gpus(),
-- mx.random.seed(42), mx.metric.
luon.cpu, luon.gpu = npx.cpu, npx.gpu
luon.current_context = npx.current_device
luon.context = core.strict_module({cpu = npx.cpu, gpu = npx.gpu, num_gpus = npx.num_gpus,
                                   current_context = npx.current_device, Context = core.Device,
                                   gpu_memory_info = npx.gpu_memory_info}, "mx.context")

-- MXNet's legacy APIs (mx.nd, mx.sym, mx.random's NDArray samplers): an
-- access is an error saying what luon has instead.
local function use_instead(what, new)
  return function() core.error(("%s; use %s"):format(what, new)) end
end
local legacy_random = {}
for _, name in ipairs({"uniform", "normal", "randn", "randint", "shuffle", "exponential", "gamma",
                       "poisson", "multinomial", "negative_binomial", "generalized_negative_binomial"}) do
  local new = rawget(np.random, name) and "mx.np.random." .. name or "the samplers of mx.np.random"
  legacy_random[name] = use_instead("mx.random." .. name .. " makes MXNet's legacy NDArrays", new)
end
luon.random = core.strict_module({seed = np.random.seed}, "mx.random", legacy_random)

local no_nd = use_instead("mx.nd is MXNet's legacy NDArray API, which luon does not have",
                          "mx.np (NumPy arrays) and mx.npx")
local no_sym = use_instead("luon has no symbolic API (mx.sym)",
                           "Gluon blocks (hybridize() traces them into a graph that runs from C)")
return core.strict_module(luon, "luon", {
  metric = function() return luon.gluon.metric end,  -- MXNet 1.x's mx.metric is gluon.metric
  plot = function() return require("luon.plot") end,  -- training curves (cairo, loaded when drawing)
  progress = function() return require("luon.progress") end,
  cli = function() return require("luon.cli") end,  -- command-line options of luon's programs
  nd = no_nd, ndarray = no_nd, sym = no_sym, symbol = no_sym,
})
