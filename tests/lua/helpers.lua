-- helpers: what the Lua specs share: the devices to run on, approximate
-- comparison of nested tables, shape and error assertions, resident memory.
-- A spec loads it with
--   package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
--   local H = require("helpers")
local luassert = require("luassert")

-- busted insulates each spec file: it drops the modules a file loaded, so
-- the next file would load luon a second time, redefine the cdef and get a
-- second Device metatable while arrays keep the first. Keep one luon per
-- process in the registry, which busted leaves alone.
local reg = debug.getregistry()
if reg.luon_test_modules then
  for k, v in pairs(reg.luon_test_modules) do package.loaded[k] = v end
end
local luon = require("luon")
reg.luon_test_modules = reg.luon_test_modules or {}
local function is_luon(k) return k == "luon" or (type(k) == "string" and k:match("^luon%.") ~= nil) end
for k, v in pairs(package.loaded) do
  if is_luon(k) then reg.luon_test_modules[k] = v end
end
-- and the ones loaded later, on first use (gluon.loss, contrib.estimator...),
-- which luon's tables keep: the next file must get the same ones
reg.luon_raw_require = reg.luon_raw_require or require
local raw_require = reg.luon_raw_require
function require(name) -- luacheck: ignore
  local m = raw_require(name)
  if is_luon(name) then reg.luon_test_modules[name] = package.loaded[name] end
  return m
end
local np, npx = luon.np, luon.npx

local H = {luon = luon, np = np, npx = npx}

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
H.root = here .. "../../" -- the checkout

function H.exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

-- The luon executable under test: the one beside the lua/ folder on
-- package.path (scripts/test puts `<build>/luon --env` there), else
-- LUON_EXE, else build/luon.
function H.luon_exe()
  if os.getenv("LUON_EXE") then return os.getenv("LUON_EXE") end
  for dir in package.path:gmatch("([^;]*)/lua/%?%.lua") do
    if H.exists(dir .. "/luon") and not H.exists(dir .. "/luon/init.lua") then return dir .. "/luon" end
  end
  return H.root .. "build/luon"
end

-- s quoted for the shell
-- A file's bytes (nil when it cannot be read), and writing them.
function H.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function H.write_file(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

function H.quote(s) return "'" .. s:gsub("'", [['\'']]) .. "'" end

-- The devices every tensor spec runs on: cpu(0), cpu(1), and gpu(0) when
-- there is one. LUON_TEST_DEVICE=gpu runs on gpu(0) only, =cpu on the CPUs only.
function H.devices()
  local want = os.getenv("LUON_TEST_DEVICE")
  local ngpu = npx.num_gpus()
  if want == "gpu" then
    if ngpu == 0 then error("LUON_TEST_DEVICE=gpu but npx.num_gpus() is 0", 2) end
    return {npx.gpu(0)}
  end
  local devs = {npx.cpu(0), npx.cpu(1)}
  if want ~= "cpu" and ngpu > 0 then devs[#devs + 1] = npx.gpu(0) end
  return devs
end

-- The GPUs are the stand-in backend's (tests/c/fake_cuda.c, chosen with
-- LUON_CUDA_LIB; scripts/test's stand-in stage): their memory is host memory.
H.stand_in_gpus = (os.getenv("LUON_CUDA_LIB") or ""):find("fake_cuda", 1, true) ~= nil

-- path made absolute against the working directory (for commands run
-- from another directory)
function H.absolute(path)
  if path:sub(1, 1) == "/" then return path end
  return (os.getenv("PWD") or ".") .. "/" .. path
end

-- A shell command's output (stdout and stderr) and exit status.
function H.sh(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"exit=$?\"")
  local out = p:read("*a")
  p:close()
  local status = tonumber(out:match("exit=(%d+)%s*$"))
  return (out:gsub("exit=%d+%s*$", "")), status
end

local function show(v)
  if type(v) ~= "table" then return tostring(v) end
  local parts = {}
  for k = 1, #v do parts[k] = show(v[k]) end
  return "{" .. table.concat(parts, ", ") .. "}"
end
H.show = show

-- nil when actual matches expected within tol (absolute + relative), else a
-- message naming the first differing position. NaN matches NaN; booleans
-- and strings match exactly.
local function mismatch(actual, expected, tol, path)
  if type(expected) == "table" then
    if type(actual) ~= "table" then
      return ("%s: expected a list, got %s"):format(path, show(actual))
    end
    if #actual ~= #expected then
      return ("%s: expected %d elements, got %d (%s)"):format(path, #expected, #actual, show(actual))
    end
    for k = 1, #expected do
      local m = mismatch(actual[k], expected[k], tol, path .. "[" .. k .. "]")
      if m then return m end
    end
    return nil
  end
  if type(expected) == "number" then
    if type(actual) ~= "number" then
      return ("%s: expected %s, got %s %s"):format(path, expected, type(actual), tostring(actual))
    end
    if expected ~= expected then
      if actual ~= actual then return nil end
    elseif expected == math.huge or expected == -math.huge then
      if actual == expected then return nil end
    elseif math.abs(actual - expected) <= tol * (1 + math.abs(expected)) then
      return nil
    end
    return ("%s: expected %.9g, got %.9g (tol %g)"):format(path, expected, actual, tol)
  end
  if actual ~= expected then
    return ("%s: expected %s, got %s"):format(path, tostring(expected), tostring(actual))
  end
  return nil
end

local function values(x)
  if type(x) == "cdata" and luon.np and require("luon.core").is_array(x) then return x:totable() end
  return x
end
H.values = values

function H.close(actual, expected, tol)
  return mismatch(values(actual), expected, tol or 1e-5, "value") == nil
end

-- actual: an ndarray, a nested table or a number.
function H.assert_close(actual, expected, tol)
  local m = mismatch(values(actual), expected, tol or 1e-5, "value")
  if m then luassert(false, m .. "\n  expected " .. show(expected) .. "\n  actual   " .. show(values(actual))) end
end

-- Exact equality of nested tables (integers, booleans).
function H.assert_equal(actual, expected)
  local m = mismatch(values(actual), expected, 0, "value")
  if m then luassert(false, m .. "\n  expected " .. show(expected) .. "\n  actual   " .. show(values(actual))) end
end

local function shape_of(x)
  if type(x) == "cdata" then return x.shape end
  return x
end

function H.shape_eq(a, b)
  a, b = shape_of(a), shape_of(b)
  if #a ~= #b then return false end
  for k = 1, #a do if a[k] ~= b[k] then return false end end
  return true
end

function H.assert_shape(x, shape)
  if not H.shape_eq(x, shape) then
    luassert(false, ("shape: expected %s, got %s"):format(show(shape), show(shape_of(x))))
  end
end

-- One call for the common check: H.check(x, expected, {shape=, dtype=, device=, tol=}).
function H.check(x, expected, opts)
  opts = opts or {}
  if opts.shape then H.assert_shape(x, opts.shape) end
  if opts.dtype and x.dtype ~= opts.dtype then
    luassert(false, ("dtype: expected %s, got %s"):format(opts.dtype, x.dtype))
  end
  if opts.device and x.device ~= opts.device then
    luassert(false, ("device: expected %s, got %s"):format(tostring(opts.device), tostring(x.device)))
  end
  if expected ~= nil then H.assert_close(x, expected, opts.tol) end
end

-- The message of the error fn(...) raises; fails when it raises none.
function H.error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then luassert(false, "expected an error, but the call succeeded") end
  return tostring(err)
end

-- fn must raise an error whose message contains every string in `parts`
-- (plain find, no patterns). Returns the message.
function H.assert_error(fn, parts)
  local msg = H.error_of(fn)
  if type(parts) == "string" then parts = {parts} end
  for _, p in ipairs(parts or {}) do
    if not string.find(msg, p, 1, true) then
      luassert(false, ("error message lacks %q:\n  %s"):format(p, msg))
    end
  end
  return msg
end

-- Resident set size of this process, in kB (Linux /proc).
function H.rss_kb()
  local f = io.open("/proc/self/status", "r")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return tonumber(s:match("VmRSS:%s*(%d+)"))
end

-- A full collection, after which released arrays have given their memory
-- back (a deferred release runs when the next array is made).
function H.collect()
  -- a finalizer (a data loader's) can drop the last reference to arrays,
  -- which the next cycle then finds: a few rounds of collect + sweep
  local core = require("luon.core")
  for _ = 1, 4 do
    collectgarbage("collect")
    core.sweep()
  end
end

-- A row-major list 0..n-1 reshaped (pure Lua, for expected values).
function H.iota(shape, start)
  local k = (start or 0) - 1
  local function build(d)
    if d > #shape then k = k + 1; return k end
    local t = {}
    for i = 1, shape[d] do t[i] = build(d + 1) end
    return t
  end
  return build(1)
end

-- Apply f to every leaf of nested tables (or table pairs).
function H.map(f, a, b)
  if type(a) ~= "table" then return f(a, b) end
  local t = {}
  for k = 1, #a do t[k] = H.map(f, a[k], type(b) == "table" and b[k] or b) end
  return t
end

return H
