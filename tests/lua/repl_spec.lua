-- repl_spec: the REPL of `luon`. Its Lua pieces directly (compile, show,
-- complete, help), the executable with piped input, and the real REPL
-- driven through a pseudo-terminal by tests/repl/pty_drive.py (python3's
-- stdlib pty): printing, continuation, completion, errors, Ctrl-C, :help,
-- history across sessions, and -i script.lua.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np = H.np
local repl = require("luon.repl")

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local driver = here .. "../repl/pty_drive.py"

local luon = H.luon_exe()

local quote, exists = H.quote, H.exists

local run = H.sh

local python
for _, p in ipairs({"/usr/bin/python3"}) do if exists(p) then python = p end end
if not python then
  local out = run("command -v python3")
  if out:match("^/%S+") then python = out:match("^(/%S+)") end
end

describe("repl pieces", function()
  -- the REPL's globals, as repl.run() sets them
  setup(function() rawset(_G, "np", np) end)
  teardown(function() rawset(_G, "np", nil) end)

  it("compiles expressions, statements and incomplete chunks", function()
    assert.equal(2, repl.compile("1+1")())
    local a, b = repl.compile("1, 'x'")()
    assert.same({1, "x"}, {a, b})
    assert.is_function(repl.compile("y_repl_spec = 3"))
    local fn, more = repl.compile("function f()")
    assert.is_nil(fn)
    assert.is_true(more)
    fn, more = repl.compile("x = = 1")
    assert.is_nil(fn)
    assert.matches("unexpected symbol", more)
    -- an error raised by the expression keeps its position (no tail call)
    local ok, err = pcall(repl.compile('error("boom")'))
    assert.is_false(ok)
    assert.equal("stdin:1: boom", err)
  end)

  it("shows arrays with an info line, tables inline", function()
    local x = np.ones({2, 2})
    assert.equal("[[1. 1.]\n [1. 1.]]\n<ndarray (2,2) float32 @cpu(0)>", repl.show(x))
    assert.equal("<ndarray (3,) int32 @cpu(0)>", repl.describe(np.zeros({3}, {dtype = "int32"})))
    assert.equal("<ndarray () float32 @cpu(0)>", repl.describe(np.array(1)))
    assert.equal("{1, 2, a = \"s\", b = {c = true}}", repl.show({1, 2, a = "s", b = {c = true}}))
    assert.equal("cpu(0)", repl.show(H.npx.cpu(0)))
    local block = setmetatable({}, {__tostring = function() return "Seq(\n  (0): Dense\n)" end})
    assert.equal("Seq(\n  (0): Dense\n)", repl.show(block)) -- whole, as blocks print
    assert.equal("<module luon.np>", repl.show({np}):match("<module luon.np>"))
  end)

  it("completes globals, fields and methods", function()
    local c = repl.complete("np.ra") -- np.rad2deg, np.radians, np.random, np.ravel, sorted
    assert.same({"np.rad2deg", "np.radians", "np.random", "np.ravel"}, c)
    rawset(_G, "x_repl_spec", np.ones({2}))
    local m = repl.complete("x_repl_spec:as")
    for _, want in ipairs({"x_repl_spec:astype", "x_repl_spec:asnumpy", "x_repl_spec:as_in_context"}) do
      assert.truthy(table.concat(m, " "):find(want, 1, true), want)
    end
    assert.same({}, repl.complete("x_repl_spec:sha")) -- a property, not a method
    assert.same({"x_repl_spec.shape"}, repl.complete("x_repl_spec.sha"))
    rawset(_G, "x_repl_spec", nil)
    assert.truthy(table.concat(repl.complete("pri"), " "):find("print", 1, true))
    assert.same({"np.random.seed"}, repl.complete("np.random.se"))
    -- an object with a function __index names its fields with __dir
    local obj = setmetatable({}, {__index = function(_, k)
      if k == "forward" then return print elseif k == "weight" then return 1 end
    end, __dir = function() return {"forward", "weight"} end})
    rawset(_G, "obj_repl_spec", obj)
    assert.same({"obj_repl_spec.forward", "obj_repl_spec.weight"}, repl.complete("obj_repl_spec."))
    assert.same({"obj_repl_spec:forward"}, repl.complete("obj_repl_spec:"))
    rawset(_G, "obj_repl_spec", nil)
    assert.same({}, repl.complete("nosuch.thing"))
    assert.same({}, repl.complete("1.5"))
  end)

  it("has help for modules, functions, arrays and unknown objects", function()
    assert.matches("REPL commands", repl.help_text())
    assert.matches("^np%.zeros%(shape", repl.help_text(np.zeros))
    assert.matches("^np%.zeros%(shape", repl.help_text("np.zeros"))
    assert.matches("properties:.*methods", repl.help_text(np.ones({2})))
    assert.matches("^table\nfields: a\nfunctions: f$", repl.help_text({a = 1, f = print}))
  end)
end)

describe("luon with piped input", function()
  it("evaluates lines, continues chunks and survives errors", function()
    if not exists(luon) then pending("no luon executable at " .. luon) return end
    local input = "1+1\\nfunction f()\\nreturn 3\\nend\\nf()\\nerror('boom')\\n2+2\\nx = np.ones({2})\\nx\\n"
    local out, status = run("printf " .. quote(input) .. " | " .. quote(luon))
    assert.equal(0, status)
    assert.matches("> 2\n", out)
    assert.matches(">> >> > 3\n", out)
    assert.matches("stdin:1: boom\n> 4\n", out)
    assert.matches("%[1%. 1%.%]\n<ndarray %(2,%) float32 @cpu%(0%)>\n", out)
  end)

  it("says why a chunk left unfinished at the end of input never ran", function()
    if not exists(luon) then pending("no luon executable at " .. luon) return end
    local out = run("printf 'print(1+\\n' | " .. quote(luon))
    assert.matches("stdin:1: unexpected symbol near '<eof>'", out, 1, true)
  end)

  it("-i runs the script, then the REPL sees its globals", function()
    if not exists(luon) then pending("no luon executable at " .. luon) return end
    local script = os.tmpname()
    local f = io.open(script, "w")
    f:write("answer_g = 42\n")
    f:close()
    local out = run("echo 'answer_g + 1' | " .. quote(luon) .. " -i " .. quote(script))
    os.remove(script)
    assert.matches("> 43\n", out)
  end)

  it("'-' runs the script on standard input with its arguments; -e needs code", function()
    if not exists(luon) then pending("no luon executable at " .. luon) return end
    local out, status = run("echo 'print(arg[0], ...)' | " .. quote(luon) .. " - a b")
    assert.equal(0, status)
    assert.equal("-\ta\tb\n", out)
    out, status = run(quote(luon) .. " -e")
    assert.equal(1, status)
    assert.matches("luon: -e needs a string of Lua code", out, 1, true)
  end)
end)

describe("the REPL in a terminal", function()
  local scenarios = {
    print = "prints 1+1, arrays with their info line, devices and tables",
    continue = "continues incomplete chunks (function f() / return 3 / end)",
    error = "shows errors with a short traceback and keeps going",
    complete = "completes np.ra<TAB>, x:as<TAB>, x.sh<TAB> and globals",
    interrupt = "Ctrl-C interrupts loops and clears the line",
    drawing = "Ctrl-C that lands while libedit draws clears the line",
    help = ":help, help(obj), :time, :quit",
    history = "keeps history across sessions in ~/.luon_history",
    script = "-i script.lua exposes the script's globals",
  }
  local names = {}
  for name in pairs(scenarios) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    it(scenarios[name], function()
      if not python then pending("python3 is missing") return end
      if not exists(luon) then pending("no luon executable at " .. luon) return end
      -- python3 runs without the sanitizer preload of scripts/test; an
      -- instrumented luon carries its own runtime
      local out = run("env -u LD_PRELOAD " .. quote(python) .. " " .. quote(driver) .. " " ..
                      quote(luon) .. " " .. name)
      if out:match("^SKIP") then pending(out) return end
      assert(out:match("^PASS"), out)
    end)
  end
end)
