-- zoo_helpers: what model_zoo_spec and params_format_spec share: the
-- goldens of tests/data/gen_zoo_golden.py (MXNet 1.9.1) and its formula
-- weights and input, computed the same way here.
local H = require("helpers")
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local Z = {}
Z.data = H.root .. "tests/data/"

local function lines(path)
  local f = assert(io.open(path, "r"))
  local out = {}
  for l in f:lines() do out[#out + 1] = l end
  f:close()
  return out
end

local function numbers(s)
  local out = {}
  for v in s:gmatch("%S+") do out[#out + 1] = tonumber(v) end
  return out
end

-- zoo_params.txt: list of {name =, side =, params = {{name, shape}, ...}}
function Z.structures()
  local models, cur = {}, nil
  for _, l in ipairs(lines(Z.data .. "zoo_params.txt")) do
    local name, side = l:match("^model (%S+) (%d+) %d+$")
    if name then
      cur = {name = name, side = tonumber(side), params = {}}
      models[#models + 1] = cur
    else
      local pname, shape = l:match("^(%S+) (%S+)$")
      local s = {}
      for d in shape:gmatch("%d+") do s[#s + 1] = tonumber(d) end
      cur.params[#cur.params + 1] = {pname, s}
    end
  end
  return models
end

-- zoo_outputs.txt: name -> {side =, rows = {{10 numbers}, {10 numbers}}}
function Z.outputs()
  local out, cur = {}, nil
  for _, l in ipairs(lines(Z.data .. "zoo_outputs.txt")) do
    local name, side = l:match("^model (%S+) (%d+)$")
    if name then
      cur = {side = tonumber(side), rows = {}}
      out[name] = cur
    else
      cur.rows[#cur.rows + 1] = numbers(l)
    end
  end
  return out
end

function Z.numbers(file) return numbers(lines(Z.data .. file)[1]) end

-- A float32 array of `shape` from f(i) over the flat index i (0-based).
function Z.array_of(shape, f)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local buf = ffi.new("float[?]", math.max(n, 1))
  for i = 0, n - 1 do buf[i] = f(i) end
  local sh = ffi.new("int64_t[8]")
  for k, d in ipairs(shape) do sh[k - 1] = d end
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(buf, core.FLOAT32, #shape, sh, C.LUON_CPU, 0, out))
  return core.wrap(out[0])
end

-- The input (2, 3, side, side): x[i] = sin(1.3 i).
function Z.input(side)
  return Z.array_of({2, 3, side, side}, function(i) return math.sin(1.3 * i) end)
end

-- Every parameter of net (shapes known) set to the formula: sorted by
-- name, the k-th (0-based) gets, with s = sin(0.37 i + k): weights of 2 or
-- more dims 1.7 s / sqrt(fan_in), gamma and running_var 1 + 0.25 s, the
-- others 0.05 s.
function Z.set_formula(net)
  local params = net:collect_params()
  local names = params:keys()
  table.sort(names)
  for k, name in ipairs(names) do
    local p = params[name]
    local k0 = k - 1
    local f
    local shape = p.shape
    if name:match("gamma$") or name:match("running_var$") then
      f = function(i) return 1 + 0.25 * math.sin(0.37 * i + k0) end
    elseif name:match("weight$") and #shape >= 2 then
      local fan_in = 1
      for d = 2, #shape do fan_in = fan_in * shape[d] end
      local c = 1.7 / math.sqrt(fan_in)
      f = function(i) return c * math.sin(0.37 * i + k0) end
    else
      f = function(i) return 0.05 * math.sin(0.37 * i + k0) end
    end
    p:set_data(Z.array_of(p.shape, f))
  end
end

-- actual (a (2, 10) array) against rows, within tol times the largest |value|.
function Z.assert_rows(actual, rows, tol, what)
  local a = actual:totable()
  local scale = 0
  for _, r in ipairs(rows) do for _, v in ipairs(r) do scale = math.max(scale, math.abs(v)) end end
  local limit = tol * math.max(scale, 1e-3)
  for i, r in ipairs(rows) do
    for j, v in ipairs(r) do
      local got = a[i] and a[i][j]
      if type(got) ~= "number" or math.abs(got - v) > limit then
        error(("%s: output [%d][%d] is %s, MXNet gives %.9g (tolerance %.3g)"):format(what, i - 1, j - 1,
              tostring(got), v, limit), 2)
      end
    end
  end
end

return Z
