-- argfuzz_spec: every public function of np, np.random, npx, autograd, the
-- gluon constructors (nn, loss, metric, data, transforms, init, Trainer)
-- and utils, and every ndarray method, called with every kind of wrong value in each of its
-- first three argument positions (and as self, for methods). Each call must
-- return or raise a Lua error with a message; none may crash the process
-- (the scripts/test ASan pass runs this file too), and a valid op must work
-- after each. Prints the counts: calls, returns, clean errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local ffi = require("ffi")
local luon = require("luon")
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local arr = require("luon.ndarray")

-- Functions whose call has effects beyond the call (they are restored or
-- left out): the thread count and the recording/training flags are put back
-- after each call; these are not called at all.
local skip = {
  ["npx.with_device"] = true, -- runs its function argument: covered by device_spec
  -- write the file their first argument names (a bad value "abc" is a fine
  -- file name): their bad input is npy_spec's
  ["npx.save"] = true, ["npx.savez"] = true, ["npx.savez_compressed"] = true,
  ["np.save"] = true, ["np.savez"] = true, ["np.savez_compressed"] = true,
}

local function bad_values()
  local null_ptr = ffi.cast("struct luon_array *", 0)
  local struct_ptr = ffi.cast("struct luon_array *", ffi.new("luon_array[1]")) -- .t is NULL
  return {
    {"nil", nil}, {"true", true}, {"false", false},
    {"string", "abc"}, {"empty string", ""},
    {"empty table", {}}, {"list", {1, 2}}, {"nested junk", {{}, {"x"}}}, {"keyword table", {zzz = 1}},
    {"function", function() end}, {"coroutine", coroutine.create(function() end)},
    {"NaN", 0 / 0}, {"inf", math.huge}, {"-inf", -math.huge},
    {"2^62", 2 ^ 62}, {"-2^62", -(2 ^ 62)}, {"2^63", 2 ^ 63}, {"1e300", 1e300},
    {"-1", -1}, {"0.5", 0.5},
    {"int64 cdata", ffi.new("int64_t", 5)}, {"int[1] cdata", ffi.new("int[1]")},
    {"NULL luon_array*", null_ptr}, {"luon_array* to an empty struct", struct_ptr},
    {"bool array", np.array({true, false})},
  }
end

local function callable(v)
  if type(v) == "function" then return true end
  local mt = type(v) == "table" and getmetatable(v)
  return mt and type(rawget(mt, "__call")) == "function" or false
end

-- every function (or callable class) of a module table, by qualified name
local function functions_of(prefix, t, out)
  local names = {}
  for k, v in pairs(t) do
    if type(k) == "string" and callable(v) and k:sub(1, 1) ~= "_" then names[#names + 1] = k end
  end
  table.sort(names)
  for _, k in ipairs(names) do
    local q = prefix .. "." .. k
    if not skip[q] then out[#out + 1] = {q, t[k]} end
  end
end

describe("argument fuzz", function()
  it("every entry point gives a result or a clean error for every wrong value", function()
    local targets = {}
    functions_of("np", np, targets)
    functions_of("np.random", np.random, targets)
    functions_of("np.linalg", np.linalg, targets)
    functions_of("npx", npx, targets)
    functions_of("autograd", autograd, targets)
    local gluon = luon.gluon
    functions_of("gluon.nn", gluon.nn, targets)
    functions_of("gluon.loss", gluon.loss, targets)
    functions_of("gluon.metric", gluon.metric, targets)
    functions_of("gluon.utils", gluon.utils, targets)
    functions_of("gluon.data", gluon.data, targets)
    functions_of("gluon.data.vision.transforms", gluon.data.vision.transforms, targets)
    functions_of("init", luon.init, targets)
    targets[#targets + 1] = {"gluon.Trainer", gluon.Trainer}
    local methods = {}
    functions_of("ndarray", arr.methods, methods)

    local threads = npx.num_threads()
    local bad = bad_values()
    local calls, returned, errors = 0, 0, 0
    local unclear, internal = {}, {}

    local function restore()
      autograd.set_recording(false)
      autograd.set_training(false)
      if npx.num_threads() ~= threads then npx.set_num_threads(threads) end
    end

    local trace = os.getenv("LUON_ARGFUZZ_TRACE") -- names each call first, to find a crash
    local function try(name, f, args, n)
      calls = calls + 1
      if trace then io.stderr:write(name, "\n") end
      local ok, err = pcall(f, unpack(args, 1, n))
      restore()
      if ok then
        returned = returned + 1
      else
        errors = errors + 1
        if type(err) ~= "string" then
          unclear[#unclear + 1] = ("%s: error value of type %s"):format(name, type(err))
        elseif err:find("attempt to ", 1, true) or err:find("bad argument", 1, true) then
          internal[#internal + 1] = name .. ": " .. err -- Lua's own message, not luon's
        end
      end
    end

    for _, t in ipairs(targets) do
      local name, f = t[1], t[2]
      for pos = 1, 3 do
        for _, b in ipairs(bad) do
          for _, fill in ipairs({false, true}) do
            local x = np.ones({2, 3})
            local args = {}
            for k = 1, 3 do args[k] = fill and x or nil end
            args[pos] = b[2]
            try(("%s(arg %d = %s)"):format(name, pos, b[1]), f, args, 3)
          end
        end
      end
    end

    for _, t in ipairs(methods) do
      local name, f = t[1], t[2]
      for pos = 0, 2 do
        for _, b in ipairs(bad) do
          local x = np.ones({2, 3})
          local args = {x, nil, nil}
          args[pos + 1] = b[2]
          try(("%s(%s = %s)"):format(name, pos == 0 and "self" or "arg " .. pos, b[1]), f, args, 3)
        end
      end
    end

    -- the runtime is still usable
    H.assert_close(np.ones({2}) + np.ones({2}), {2, 2})
    io.stderr:write(("argfuzz: %d calls, %d returned, %d errors (%d Lua's own), %d unclear\n")
                    :format(calls, returned, errors, #internal, #unclear))
    if os.getenv("LUON_ARGFUZZ_TRACE") then io.stderr:write(table.concat(internal, "\n"), "\n") end
    assert.are.same({}, unclear)
    assert.are.same({}, internal)
    assert.is_true(calls > 10000)
  end)

  it("a NULL or empty luon_array pointer is refused as any other wrong value", function()
    local null_ptr = ffi.cast("struct luon_array *", 0)
    H.assert_error(function() return np.abs(null_ptr) end, {"abs", "cdata<struct luon_array *>"})
    H.assert_error(function() return np.add(np.ones({2}), null_ptr) end, {"add"})
    H.assert_error(function() return null_ptr.shape end, {"expected an ndarray", "luon_array *"})
    H.assert_error(function() return -null_ptr end, {"expected an ndarray"})
    H.assert_error(function() return #null_ptr end, {"expected an ndarray"})
    H.assert_error(function() return tostring(null_ptr) end, {"expected an ndarray"})
    H.assert_error(function() return null_ptr:sum() end, {"sum"})
    H.assert_close(np.ones({2}) * 2, {2, 2})
  end)
end)
