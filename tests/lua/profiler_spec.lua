-- profiler_spec: luon.profiler (MXNet's mx.profiler as per-op totals) on
-- every device: counts of the ops called from outside any op (the
-- backward's and the optimizer's included, the ops inside an op not again),
-- sync mode, pause/resume, reset, the table's sorting, and bad input.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon, np = H.luon, H.np
local profiler = luon.profiler
local autograd = luon.autograd

local function calls_of(name)
  for _, r in ipairs(profiler.stats()) do
    if r.name == name then return r.calls, r end
  end
  return 0
end

describe("luon.profiler", function()
  after_each(function()
    profiler.set_state("stop")
    profiler.set_config{sync = false}
    profiler.reset()
  end)

  for _, dev in ipairs(H.devices()) do
    for _, sync in ipairs({false, true}) do
      it(("counts each op on %s (sync %s), the backward's too"):format(tostring(dev), tostring(sync)), function()
        profiler.reset()
        profiler.set_config{sync = sync}
        local x = np.ones({8, 8}, {device = dev})
        x:attach_grad()
        profiler.set_state("run")
        assert.equal("run", profiler.state())
        for _ = 1, 5 do
          local y = autograd.record(function() return (x * x):sum() end)
          y:backward()
        end
        profiler.set_state("stop")
        -- 5 forward multiplies, and the backward's (2x * dy) too
        assert.is_true(calls_of("multiply") > 5, "multiply counted " .. calls_of("multiply"))
        local n, r = calls_of("sum")
        assert.equal(5, n)
        assert.is_true(r.total >= 0 and math.abs(r.mean - r.total / 5) < 1e-12)
        -- stopped: nothing more is counted
        local before = calls_of("subtract")
        local _ = x - x
        assert.equal(before, calls_of("subtract"))
        local text = profiler.dumps()
        assert.truthy(text:find("^op%s+calls%s+total ms%s+mean us%s+share"))
        assert.truthy(text:find("\nsum%s+5%s"))
        assert.truthy(text:find("\nall ops"))
      end)
    end
  end

  it("pauses, resumes, resets, and adds to the totals across runs", function()
    local x = np.ones({4})
    profiler.set_state("run")
    local _ = x + x
    profiler.pause()
    _ = x + x
    profiler.resume()
    _ = x + x
    profiler.set_state("stop")
    assert.equal(2, calls_of("add"))
    profiler.set_state("run")
    _ = x + x
    profiler.set_state("stop")
    assert.equal(3, calls_of("add"))
    profiler.dumps{reset = true}
    assert.equal(0, calls_of("add"))
    assert.equal(0, #profiler.stats())
  end)

  it("sorts the table by count, name, avg or total", function()
    local x = np.ones({4})
    profiler.set_state("run")
    for _ = 1, 3 do local _ = x + x end
    local _ = x * x
    profiler.set_state("stop")
    local by_count = profiler.dumps{sort_by = "count"}
    assert.is_true(by_count:find("\nadd") < by_count:find("\nmultiply"))
    local by_name = profiler.dumps(false, "table", "name", true)
    assert.is_true(by_name:find("\nadd") < by_name:find("\nmultiply"))
    by_name = profiler.dumps{sort_by = "name"} -- descending by default, as MXNet
    assert.is_true(by_name:find("\nmultiply") < by_name:find("\nadd"))
    assert.truthy(profiler.dumps{sort_by = "avg"}:find("\nadd"))
  end)

  it("accepts MXNet's set_config keys it honours and refuses the others, naming the way", function()
    profiler.set_config{profile_all = true, aggregate_stats = true, profile_imperative = true}
    H.assert_error(function() profiler.set_config{filename = "trace.json"} end,
                   {"profiler.set_config", "filename", "no trace file", "profiler.dumps()"})
    H.assert_error(function() profiler.set_config{continuous_dump = true} end, {"continuous_dump", "no trace file"})
    H.assert_error(function() profiler.set_config{aggregate_stats = false} end,
                   {"aggregate_stats = false", "set_state('stop')"})
    H.assert_error(function() profiler.set_config{sync = "yes"} end, {"sync must be true or false", "'yes'"})
    H.assert_error(function() profiler.set_config{syncc = true} end, {"unknown", "syncc", "did you mean"})
    H.assert_error(function() profiler.set_config("sync") end, {"profiler.set_config", "table"})
    H.assert_error(function() profiler.set_state("go") end, {"set_state", "'run' or 'stop'", "'go'"})
    H.assert_error(function() profiler.set_state() end, {"set_state", "nil"})
    H.assert_error(function() profiler.dumps{format = "json"} end, {"profiler.dumps", "'json'", "'table' only"})
    H.assert_error(function() profiler.dumps{sort_by = "min"} end, {"sort_by", "'min'"})
    H.assert_error(function() profiler.dumps{resets = true} end, {"profiler.dumps", "resets"})
    H.assert_error(function() profiler.dump() end, {"profiler.dump", "no trace file", "dumps()"})
    H.assert_error(function() return profiler.sett_state end, {"set_state"})
    -- the C entry refuses an unknown mode; the runtime stays usable
    local C = require("luon.core").C
    assert.are_not.equal(0, C.luon_profile_set(7))
    assert.equal(0, C.luon_profile_mode())
    profiler.set_state("run")
    local _ = np.ones({2}) + 1
    profiler.set_state("stop")
    assert.is_true(#profiler.stats() >= 1)
  end)
end)
