-- luon.npx: MXNet's numpy extensions: devices, the default device, GPU
-- memory information, memory statistics, and the neural-network activations.
local core = require("luon.core")
local np = require("luon.np")
local ffi, C = core.ffi, core.C

local npx = {}
npx.Device = core.Device

function npx.cpu(id) return core.device("cpu", id or 0, 2) end
-- gpu(i) names a device; using it when it does not exist is an error
-- that says how many GPUs there are.
function npx.gpu(id) return core.device("gpu", id or 0, 2) end

function npx.num_gpus() return C.luon_gpu_count() end

-- free, total = npx.gpu_memory_info(i): bytes on gpu(i).
function npx.gpu_memory_info(id)
  id = id or 0
  local fr, total = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")
  core.check(C.luon_gpu_memory_info(id, fr, total), 2)
  return tonumber(fr[0]), tonumber(total[0])
end

function npx.current_device() return core.default_device end

-- Run fn with dev as the default device, restoring the previous one after
-- (also on error); returns what fn returns.
function npx.with_device(dev, fn, ...)
  dev = core.resolve_device(dev, "with_device", 2)
  if type(fn) ~= "function" then error("with_device: the second argument must be a function", 2) end
  local saved = core.default_device
  core.default_device = dev
  local function finish(ok, ...)
    core.default_device = saved
    if not ok then error((...), 0) end
    return ...
  end
  return finish(pcall(fn, ...))
end

-- Allocator statistics of a device: in_use, cached, peak, allocs, cache_hits.
function npx.memory_stats(dev)
  dev = core.resolve_device(dev, "memory_stats", 2)
  local s = ffi.new("luon_memory_stats")
  core.check(C.luon_memory_stats_get(dev.type_id, dev.device_id, s), 2)
  return {in_use = tonumber(s.in_use), cached = tonumber(s.cached), peak = tonumber(s.peak),
          allocs = tonumber(s.allocs), cache_hits = tonumber(s.cache_hits)}
end

function npx.empty_cache(dev)
  dev = core.resolve_device(dev, "empty_cache", 2)
  collectgarbage("collect")
  core.check(C.luon_memory_empty_cache(dev.type_id, dev.device_id), 2)
end

function npx.waitall()
  for i = 0, C.luon_gpu_count() - 1 do core.check(C.luon_device_sync(2, i), 2) end
end

function npx.set_num_threads(n) C.luon_set_num_threads(n) end
function npx.num_threads() return C.luon_get_num_threads() end

local function unary(name)
  local id = core.op_ids[name]
  npx[name] = function(x)
    if not core.is_array(x) then error(("%s: expected an ndarray, got %s"):format(name, type(x)), 2) end
    return core.call1(id, x)
  end
end
unary("relu")
unary("sigmoid")

npx.seed = np.random.seed

return npx
