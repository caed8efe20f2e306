-- luon: a deep-learning runtime for Lua. require("luon") gives np, npx,
-- autograd and clock(); gluon joins them with the training issue.
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

return luon
