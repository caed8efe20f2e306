-- luon.profiler: MXNet's mx.profiler, as aggregate statistics per op.
--   profiler.set_config{sync = true}    -- optional: wait for each GPU op
--   profiler.set_state("run")
--   ... the steps to measure ...
--   profiler.set_state("stop")
--   print(profiler.dumps())             -- one line per op: calls, total, mean
-- Each op called from outside any op (yours, the autograd backward's, the
-- optimizer's) is counted once, with the ops it calls inside its time. GPU
-- ops return once their kernels are queued, so by default a GPU op's time is
-- its launch's; sync = true waits for the device after each op, so the time
-- is its kernels' (and the run slower). MXNet's trace files (filename,
-- dump()) are not written: luon keeps the aggregate table only.
local core = require("luon.core")
local C = core.C
local ffi = core.ffi

local profiler = {}
local sync, running, paused = false, false, false

local function apply()
  local mode = (running and not paused) and (sync and C.LUON_PROFILE_SYNC or C.LUON_PROFILE_ON) or C.LUON_PROFILE_OFF
  core.check(C.luon_profile_set(mode))
end

-- MXNet's keys that luon's one kind of profile already satisfies (all ops,
-- aggregated); filename and continuous_dump ask for a trace file.
local accepted = {profile_all = true, profile_imperative = true, profile_symbolic = true, profile_api = true,
                  profile_memory = true, aggregate_stats = true}
function profiler.set_config(kw)
  kw = core.options(kw, "profiler.set_config", {"sync", "aggregate_stats", "profile_all", "profile_imperative",
                                                 "profile_symbolic", "profile_api", "profile_memory"},
                    {"filename", "continuous_dump"})
  for k, v in pairs(kw) do
    if k == "filename" or k == "continuous_dump" then
      core.error(("profiler.set_config: %s: luon writes no trace file; it keeps per-op totals, which "
                  .. "profiler.dumps() returns as a table"):format(k))
    end
    if type(v) ~= "boolean" then
      core.error(("profiler.set_config: %s must be true or false, got %s"):format(k, core.show_value(v)))
    end
    if accepted[k] and v == false then
      core.error(("profiler.set_config: %s = false: luon's profiler counts every op, aggregated; "
                  .. "stop it with profiler.set_state('stop')"):format(k))
    end
  end
  if kw.sync ~= nil then sync = kw.sync end
  apply()
end

-- "run" starts counting (adding to the totals so far), "stop" stops.
function profiler.set_state(state)
  if state ~= "run" and state ~= "stop" then
    core.error(("profiler.set_state: state must be 'run' or 'stop', got %s"):format(core.show_value(state)))
  end
  running, paused = state == "run", false
  apply()
end
function profiler.state() return running and "run" or "stop" end
function profiler.pause() paused = true apply() end
function profiler.resume() paused = false apply() end
function profiler.reset() C.luon_profile_reset() end

-- The totals: a list of {name, calls, total (seconds), mean (seconds)},
-- ops that ran at least once, most time first.
function profiler.stats()
  local calls, ns = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")
  local out = {}
  for op = 0, C.luon_op_count() - 1 do
    core.check(C.luon_profile_get(op, calls, ns))
    local n = tonumber(calls[0])
    if n > 0 then
      local t = tonumber(ns[0]) * 1e-9
      out[#out + 1] = {name = ffi.string(C.luon_op_name(op)), calls = n, total = t, mean = t / n}
    end
  end
  table.sort(out, function(a, b) return a.total > b.total or (a.total == b.total and a.name < b.name) end)
  return out
end

-- MXNet's dump() writes the trace file set by set_config's filename
function profiler.dump()
  core.error("profiler.dump: luon writes no trace file; print(profiler.dumps()) gives the per-op table")
end

local sorts = {total = true, avg = true, count = true, name = true}
-- The totals as a table of text (MXNet's dumps(reset, format, sort_by,
-- ascending); format "table" only; sort_by total, avg, count or name).
function profiler.dumps(...)
  local a = core.args("profiler.dumps", {"reset", "format", "sort_by", "ascending"},
                      {"reset", "format", "sort_by", "ascending"}, ...)
  if a.format ~= nil and a.format ~= "table" then
    core.error(("profiler.dumps: format %s: luon gives 'table' only"):format(core.show_value(a.format)))
  end
  local by = a.sort_by or "total"
  if not sorts[by] then
    core.error(("profiler.dumps: sort_by must be 'total', 'avg', 'count' or 'name', got %s"):format(core.show_value(by)))
  end
  local rows = profiler.stats()
  local key = {total = function(r) return r.total end, avg = function(r) return r.mean end,
               count = function(r) return r.calls end, name = function(r) return r.name end}
  local kf = key[by]
  table.sort(rows, function(x, y)
    local u, v = kf(x), kf(y)
    if u == v then return x.name < y.name end
    if a.ascending then return u < v end
    return u > v
  end)
  local sum = 0
  for _, r in ipairs(rows) do sum = sum + r.total end
  local lines = {("%-28s %10s %12s %12s %7s"):format("op", "calls", "total ms", "mean us", "share")}
  for _, r in ipairs(rows) do
    lines[#lines + 1] = ("%-28s %10d %12.3f %12.2f %6.1f%%"):format(r.name, r.calls, r.total * 1e3, r.mean * 1e6,
                                                                   sum > 0 and 100 * r.total / sum or 0)
  end
  lines[#lines + 1] = ("%-28s %10s %12.3f"):format("all ops", "", sum * 1e3)
  if a.reset then profiler.reset() end
  return table.concat(lines, "\n")
end

return core.strict_module(profiler, "profiler")
