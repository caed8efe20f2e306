-- interrupt_spec: Ctrl-C (SIGINT) on `luon script.lua`: a busy Lua loop, a
-- loop of ops and a long matmul stop with the error and a traceback naming
-- the script's line on stderr and exit status 130; a JIT-compiled loop that
-- runs no hooks (LuaJIT's profiler makes it leave its trace: jitstop.c)
-- stops the same way.
-- tests/repl/sigint_drive.py sends the signal and times the stop (printed;
-- only generous bounds are asserted: a loaded 2-core VM). The REPL's Ctrl-C
-- is tested by repl_spec; luon_interrupt and luon_rt_interrupt by
-- tests/c/test_interrupt.c.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local driver = here .. "../repl/sigint_drive.py"
local luon = H.luon_exe()
local python = H.exists("/usr/bin/python3") and "/usr/bin/python3" or nil
local quote = H.quote

-- run `luon` on the script text, interrupt it after "ready": status, ms, stderr
local function interrupt(script, env)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(script)
  f:close()
  local p = io.popen("env -u LD_PRELOAD " .. (env or "") .. " " .. quote(python) .. " " .. quote(driver) .. " " .. quote(luon) ..
                     " " .. quote(path) .. " 2>&1")
  local out = p:read("*a")
  p:close()
  os.remove(path)
  local rc, ms = out:match("^rc=(%d+) ms=(%d+)")
  io.stderr:write(("interrupt_spec: stopped %s ms after SIGINT (%s)\n"):format(
    ms or "?", script:match("%-%- (.-)\n") or "?"))
  return tonumber(rc), tonumber(ms), out, path
end

describe("Ctrl-C on luon script.lua", function()
  before_each(function()
    if not python then pending("python3 is missing") end
  end)

  it("stops a busy Lua loop with a traceback and exit status 130", function()
    if not python then return end
    local rc, ms, out = interrupt([[
-- an interpreted busy loop
local function spin() local k = 0 while true do k = k + 1 end end
jit.off(spin)
print("ready") io.stdout:flush()
spin()
]])
    assert.equal(130, rc, out)
    assert.matches("luon: .-: interrupted\nstack traceback:", out)
    assert.matches(":2: in function 'spin'", out, 1, true)
    assert.is_true(ms < 2000, out)
  end)

  it("stops a JIT-compiled loop of ops at its next op", function()
    if not python then return end
    local rc, ms, out = interrupt([[
-- a compiled loop of ops
local np = require("luon").np
local x = np.zeros({4})
print("ready") io.stdout:flush()
while true do x = x + 1 end
]])
    assert.equal(130, rc, out)
    assert.matches("interrupted\nstack traceback:", out, 1, true)
    assert.matches(":5: in main chunk", out, 1, true)
    assert.is_true(ms < 2000, out)
  end)

  it("stops a long matmul within a fraction of its time", function()
    if not python then return end
    local rc, ms, out = interrupt([[
-- a 4096^2 matmul
local np = require("luon").np
local a = np.ones({4096, 4096})
print("ready") io.stdout:flush()
local c = np.matmul(a, a)
c:wait_to_read()
print("finished")
]])
    assert.equal(130, rc, out)
    assert.matches("interrupted\nstack traceback:", out, 1, true)
    assert.matches(":5: in main chunk", out, 1, true)
    assert.is_nil(out:find("finished", 1, true))
    assert.is_true(ms < 2000, out)
  end)

  it("stops a JIT-compiled loop without ops, with a traceback", function()
    if not python then return end
    local rc, ms, out = interrupt([[
-- a JIT-compiled loop, no ops
assert(jit.status())
print("ready") io.stdout:flush()
local k = 0
while true do k = k + 1 end
]])
    assert.equal(130, rc, out)
    assert.matches("interrupted\nstack traceback:", out, 1, true)
    assert.matches(":5: in main chunk", out, 1, true)
    assert.is_true(ms < 2000, out)
  end)

  it("without LuaJIT's profiler (LUON_JIT_STOP=0), ends such a loop after the grace period, saying why", function()
    if not python then return end
    local rc, ms, out = interrupt([[
-- a JIT-compiled loop, no ops, no profiler
print("ready") io.stdout:flush()
local k = 0
while true do k = k + 1 end
]], "LUON_JIT_STOP=0")
    assert.equal(130, rc, out)
    assert.matches("JIT-compiled Lua code with LuaJIT's profiler off", out, 1, true)
    assert.is_true(ms < 5000, out)
  end)

  it("leaves a script that ignores SIGINT (started in the background by sh) alone", function()
    if not python then return end
    local p = io.popen("sh -c " .. quote("(trap '' INT; exec " .. quote(luon) ..
      " -e 'local t = os.time() + 2 while os.time() < t do end print(\"done\")') & pid=$!; " ..
      "sleep 0.3; kill -INT $pid; wait $pid; echo rc=$?") .. " 2>&1")
    local out = p:read("*a")
    p:close()
    assert.matches("done\nrc=0", out, 1, true)
  end)
end)
