-- embed_spec: luon in a Lua host. Plain `luajit` with the paths of
-- `<build>/luon --env` runs a script exactly as `<build>/luon` does; with only
-- package.cpath it finds luon.so (luaopen_luon); and the host's control of
-- the garbage collector (core.set_gc_mode, core.gc_step). The C host is
-- tests/c/test_embed.c and examples/robot_host.c (ctest).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np = H.np
local core = require("luon.core")


-- The build of the luon executable under test (H.luon_exe's folder).
local build = (H.luon_exe():gsub("/luon$", ""))

local quote, run = H.quote, H.sh

-- a script using the parts of luon a game or robot would: arrays, a gluon
-- network, autograd, parameters saved and loaded
local script = [[
local luon = require("luon")
local np, nn, autograd = luon.np, luon.gluon.nn, luon.autograd
np.random.seed(1)
local net = nn.HybridSequential()
net:add(nn.Dense(8, {activation = "relu", in_units = 4}), nn.Dense(2, {in_units = 8}))
net:initialize()
local x = np.arange(8):reshape({2, 4}) / 8
local y = net(x)
local w = np.array({1, 2, 3}); w:attach_grad()
local l = autograd.record(function() return (w * w):sum() end)
l:backward()
local path = os.tmpname()
net:save_parameters(path)
local net2 = nn.HybridSequential()
net2:add(nn.Dense(8, {activation = "relu", in_units = 4}), nn.Dense(2, {in_units = 8}))
net2:load_parameters(path)
os.remove(path)
print(y.shape[1], y.shape[2], ("%.6f"):format(y:sum():item()), tostring(w.grad))
print(("%.6f"):format(net2(x):sum():item()), package.loaded["luon.ffi"] ~= nil)
]]

describe("a Lua host", function()
  local file
  setup(function()
    file = os.tmpname()
    local f = assert(io.open(file, "w"))
    f:write(script)
    f:close()
  end)
  teardown(function() os.remove(file) end)

  it("plain luajit with the paths of luon --env runs a script as luon does", function()
    local expected, st = run(quote(build .. "/luon") .. " " .. quote(file))
    assert.equal(0, st, expected)
    assert.truthy(expected:match("^2\t2\t%-?%d+%.%d+\t%[2%. 4%. 6%.%]"), expected)
    local env = run(quote(build .. "/luon") .. " --env")
    assert.truthy(env:match("export LUA_PATH="), env)
    local out, st2 = run("env -u LUON_LIB sh -c " .. quote(env .. "\nexec luajit " .. quote(file)))
    assert.equal(0, st2, out)
    assert.equal(expected, out)
  end)

  it("plain luajit finds luon through package.cpath alone (luon.so, luaopen_luon)", function()
    local code = "package.path = '' " ..
                 "package.cpath = " .. ("%q"):format(build .. "/lib/?.so") .. " " ..
                 "local luon = require('luon') " ..
                 "assert(package.loaded.luon == luon) " ..
                 "print(luon.np.arange(5):sum():item(), package.searchpath('luon.core', package.path) ~= nil)"
    local out, st = run("env -u LUON_LIB -u LUA_PATH -u LUA_CPATH luajit -e " .. quote(code))
    assert.equal(0, st, out)
    assert.equal("10\ttrue\n", out)
  end)
end)

describe("the host's control of the garbage collector", function()
  after_each(function() core.set_gc_mode("auto") end)

  it("manual mode: no op collects; gc_step collects in bounded steps and releases arrays", function()
    local C = core.C
    local counters = C.luon_counters_get()
    core.set_gc_mode("manual")
    assert.equal("manual", core.gc_mode)
    local live0 = tonumber(counters.tensors_live)
    local x = np.ones({1000})
    for _ = 1, 2000 do local _ = x + x end   -- 8 MB of temporaries, over any automatic budget
    assert.is_true(tonumber(counters.tensors_live) >= live0 + 2000, "temporaries wait for the host")
    local steps, done = 0, false
    repeat
      done = core.gc_step(0)
      steps = steps + 1
    until done or steps > 1e6
    -- a cycle may have started before; the next one surely sees them dead
    if tonumber(counters.tensors_live) > live0 + 10 then
      repeat steps = steps + 1 until core.gc_step(0) or steps > 2e6
    end
    assert.is_true(steps > 1, "in several small steps")
    assert.is_true(tonumber(counters.tensors_live) <= live0 + 10,
                   ("released: %d live, %d before"):format(tonumber(counters.tensors_live), live0))
    assert.equal(0, tonumber(counters.bytes_since_gc))
  end)

  it("auto mode collects by itself again; a bad mode is an error naming it", function()
    core.set_gc_mode("manual")
    core.set_gc_mode("auto")
    assert.equal(core.gc_min, core.gc_threshold)
    local counters = core.C.luon_counters_get()
    local live0 = tonumber(counters.tensors_live)
    local x = np.ones({1000})
    -- ops alone collect; the budget grows with what earlier specs left in
    -- use, so loop until a collection shows (the bytes counter restarts)
    local collected, last = false, tonumber(counters.bytes_since_gc)
    for _ = 1, 1e6 do
      local _ = x + x
      local now = tonumber(counters.bytes_since_gc)
      if now < last then collected = true break end
      last = now
    end
    assert.is_true(collected, "an op collected")
    assert.is_true(tonumber(counters.tensors_live) < live0 + 10)
    H.assert_error(function() core.set_gc_mode("sometimes") end, "set_gc_mode: mode must be 'auto' or 'manual', got sometimes")
  end)
end)
