-- reentrancy_spec: finalizers run at any allocation. One that runs luon ops
-- in the middle of another op must not change that op's result or corrupt
-- the heap (the ASan pass runs this file too), and one that raises an error
-- must not take the process down.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local ffi = require("ffi")
local np = H.np

describe("finalizers that run ops", function()
  it("do not hand their arrays to the op they interrupted", function()
    for _ = 1, 10 do ffi.gc(ffi.new("int[1]"), function() local z = np.full({7}, 42); return z end) end
    for _ = 1, 20000 do
      local y = np.ones({1000}) * 2
      assert(y.shape[1] == 1000, tostring(y))
    end
  end)

  it("do not change the attributes, shapes or inputs of ops with attributes", function()
    for _ = 1, 100 do
      for _ = 1, 20 do
        ffi.gc(ffi.new("int[1]"), function()
          local z = np.sum(np.full({3, 5}, 1), {axis = 1})
          assert(z.shape[1] == 3)
        end)
      end
      for _ = 1, 50 do
        local x = np.arange(24):reshape({2, 3, 4})
        local s = np.sum(x, {axis = 2})
        assert(s.shape[1] == 2 and s.shape[2] == 3, tostring(s))
        assert(s:slice(1, 2):item() == 20 + 21 + 22 + 23)
        local parts = np.split(x, 2, 2)
        assert(#parts == 2 and parts[2].shape[3] == 2)
      end
    end
  end)

  it("keep the array registry in step when they run at any point of an op", function()
    local a, b = np.ones({3}), np.full({3}, 2)
    local kept = {}
    for _ = 1, 100000 do
      local u = newproxy(true)
      getmetatable(u).__gc = function() local c = a + b; kept[#kept % 50 + 1] = np.sum(np.exp(c)) end
      local c = a + b
      local s = np.split(np.arange(6), 2)
      assert(#s == 2 and c:sum():item() == 9)
    end
  end)

  it("run as newproxy and metatype finalizers too", function()
    local ran = 0
    local T = ffi.metatype(ffi.typeof("struct { int n; }"),
                           {__gc = function() ran = ran + 1; local z = np.ones({3}) * 3; return z end})
    for _ = 1, 2000 do
      local u = newproxy(true)
      getmetatable(u).__gc = function() local z = np.zeros({5}) + 1; return z end
      local t = T()
      local y = np.arange(6):reshape({2, 3}) + 1
      assert(y.shape[1] == 2 and y.shape[2] == 3)
      assert(t ~= nil and u ~= nil)
    end
    collectgarbage("collect")
    assert.is_true(ran > 0)
  end)
end)

describe("finalizers that raise errors", function()
  it("are reported, not thrown from wherever the collector ran", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
      local luon = require("luon")
      local ffi = require("ffi")
      for i = 1, 200000 do
        ffi.gc(ffi.new("int[1]"), function() error("boom " .. i) end)
        pcall(function() local t = {} for k = 1, 10 do t[k] = {k} end end)
      end
      local u = newproxy(true)
      getmetatable(u).__gc = function() error({"a table"}) end
      u = nil
      collectgarbage("collect")
      print(luon.np.ones({2}):sum():item())
    ]])
    f:close()
    local p = io.popen(("env -u LD_PRELOAD %s %s 2>&1; echo \"exit=$?\""):format(H.quote(H.luon_exe()), H.quote(script)))
    local out = p:read("*a")
    p:close()
    os.remove(script)
    assert.truthy(out:find("exit=0", 1, true), out)
    assert.truthy(out:find("\n2\n", 1, true) or out:find("^2\n"), out)
    assert.truthy(out:find("error in a finalizer (ignored): ", 1, true), out)
    assert.truthy(out:find("boom", 1, true), out)
    local lines = select(2, out:gsub("\n", "\n"))
    assert.is_true(lines < 20, out) -- the first few are shown, not 200000
  end)
end)
