-- tests/gpu/parity.lua: the CPU/GPU parity check. Every case of
-- tests/lua/gradcheck_spec.lua (every differentiable op, on broadcast,
-- 0-d and non-contiguous float64 operands) runs forward and backward on
-- cpu(0) and on gpu(0) (each with its device as the default one) and the
-- values must agree; then the ops without a gradient (comparisons, arg ops,
-- creation, random by their statistics, dropout, optimizer updates) and
-- special values, index dtypes and modes, take's raise error and
-- batch_norm's running statistics are compared directly; then float16 and
-- bfloat16 matmul, fully_connected and convolution, forward and backward, within
-- the 16-bit tolerance. Prints one line per case and
-- "parity: N passed, N failed, N skipped"; exits 1 on a failure.
--   luajit tests/gpu/parity.lua      (LUA_PATH as `luon --env` prints; needs a GPU)
local root = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./") .. "../../"
package.path = root .. "tests/lua/?.lua;" .. package.path
local luon = require("luon")
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local core = require("luon.core")
local ffi, C = core.ffi, core.C

-- PARITY_DRY=1 compares cpu(0) with cpu(1): checks this script without a GPU
local dry = os.getenv("PARITY_DRY") == "1"
if not dry and npx.num_gpus() == 0 then
  io.stderr:write("parity: no GPU (" .. tostring(ffi.string(C.luon_cuda_status())) .. ")\n")
  os.exit(2)
end
local cpu, gpu = npx.cpu(0), dry and npx.cpu(1) or npx.gpu(0)
local RTOL, ATOL = tonumber(os.getenv("PARITY_RTOL") or "1e-7"), 1e-9

local passed, failed, skipped = 0, 0, 0
local function say(s) io.write(s, "\n") io.flush() end

local function host(t)
  local n = t.size
  local buf = ffi.new("double[?]", math.max(n, 1))
  core.check(C.luon_tensor_to_host(t.t, buf, core.FLOAT64, ffi.sizeof(buf)))
  return buf, n
end
local function as_list(v) if core.is_array(v) then return {v} end return v end

-- nil when a and b agree (within rtol, atol: RTOL, ATOL unless given), else
-- the first difference
local function differ(a, b, what, rtol, atol)
  rtol, atol = rtol or RTOL, atol or ATOL
  if a.ndim ~= b.ndim then return what .. ": ndim differs" end
  for d = 1, a.ndim do
    if a.shape[d] ~= b.shape[d] then return what .. ": shapes differ" end
  end
  local av, n = host(a)
  local bv = host(b)
  for j = 0, n - 1 do
    local x, y = av[j], bv[j]
    if not (x == y or (x ~= x and y ~= y) or math.abs(x - y) <= atol + rtol * math.max(math.abs(x), math.abs(y))) then
      return ("%s element %d: cpu %.17g gpu %.17g"):format(what, j, x, y)
    end
  end
end

local function report(label, err)
  if err == nil then
    passed = passed + 1
    say("PASS " .. label)
  elseif err == false then
    skipped = skipped + 1
  else
    failed = failed + 1
    say("FAIL " .. label .. ": " .. tostring(err))
  end
end

---------------------------------------------------------------------------
-- The gradcheck cases, taken from the spec's `it` closures (upvalues `name`
-- and `case`): the spec runs under a busted API whose `it` only collects,
-- so the two files share one case table.

local its = {}
local collect_its = {
  describe = function(_, fn) fn() end,
  it = function(label, fn) its[#its + 1] = {label, fn} end,
  pending = function() end, before_each = function() end, after_each = function() end,
  setup = function() end, teardown = function() end, assert = assert,
}
local chunk = assert(loadfile(root .. "tests/lua/gradcheck_spec.lua"))
setfenv(chunk, setmetatable(collect_its, {__index = _G}))
chunk()

local function upvalue(fn, want)
  for i = 1, 64 do
    local k, v = debug.getupvalue(fn, i)
    if not k then return nil end
    if k == want then return v end
  end
end

-- one case forward and backward on both devices
local function run(name, case)
  local res = {}
  local R
  local x0 = case.inputs() -- once: the spec draws new values on every call
  for _, dev in ipairs({cpu, gpu}) do
    local xs = {}
    for k = 1, #x0 do
      xs[k] = x0[k]:as_in_context(dev):copy()
      if xs[k].dtype == "float64" then xs[k]:attach_grad() end
    end
    -- on dev as the default device: the arrays f makes itself (indices,
    -- conditions, running statistics) live beside the inputs
    local outs = npx.with_device(dev, function()
      return autograd.record(function() return as_list(case.f(unpack(xs))) end)
    end)
    if not R then
      R = {}
      for k, o in ipairs(outs) do
        np.random.seed(1000 + k)
        R[k] = np.random.normal(0, 1, o.shape, {dtype = "float64"})
      end
    end
    local Rs = {}
    for k = 1, #outs do Rs[k] = R[k]:as_in_context(dev) end
    autograd.backward(outs, Rs)
    local grads = {}
    for k = 1, #xs do grads[k] = xs[k].grad end
    res[#res + 1] = {outs = outs, grads = grads}
  end
  for k = 1, #res[1].outs do
    local e = differ(res[1].outs[k], res[2].outs[k], "output " .. k)
    if e then return e end
  end
  for k = 1, #res[1].grads do
    local a, b = res[1].grads[k], res[2].grads[k]
    if (a == nil) ~= (b == nil) then return "gradient " .. k .. " on one device only" end
    if a then
      local e = differ(a, b, "gradient of input " .. k)
      if e then return e end
    end
  end
end

-- What the registry says of an op decides how its cases run: one that draws
-- random numbers is checked by its statistics below, one without a CUDA
-- kernel has nothing to compare.
for _, it in ipairs(its) do
  local name, case = upvalue(it[2], "name"), upvalue(it[2], "case")
  local info = name and core.op_info[name]
  if info and info.random then
    say("SKIP " .. name .. ": " .. case[1] .. " (each device draws from its own stream; checked below)")
    skipped = skipped + 1
  elseif info and not info.cuda then
    say("SKIP " .. name .. ": " .. case[1] .. (info.fused and " (a CPU fusion; on a GPU its parts run as their own ops)"
                                                or " (no CUDA kernel)"))
    skipped = skipped + 1
  elseif name and case then
    local ok, err = pcall(run, name, case)
    if not ok and tostring(err):find("ops run where their inputs live", 1, true) then
      say("SKIP " .. name .. ": " .. case[1] .. " (the case makes arrays on the CPU inside f)")
      err = false
    elseif not ok then
      err = "error: " .. tostring(err)
    end
    report(name .. ": " .. case[1], err)
  end
end

---------------------------------------------------------------------------
-- Ops without a gradient, float32 and integer dtypes, odd sizes.

local function both(label, make, rtol, atol)
  local ok, err = pcall(function()
    local a = as_list(make(cpu))
    local b = as_list(make(gpu))
    for k = 1, #a do
      local e = differ(a[k], b[k], "output " .. k, rtol, atol)
      if e then error(e, 0) end
    end
  end)
  report(label, ok and nil or err)
end

local function data(dev, shape, dtype, seed)
  np.random.seed(seed or 7)
  local x = np.random.normal(0, 3, shape, {dtype = "float64"})
  return x:astype(dtype or "float32"):as_in_context(dev)
end

for _, op in ipairs({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                     "add", "multiply", "maximum", "power"}) do
  both(op .. " int32 (7,5) with (5)", function(d)
    return np[op](data(d, {7, 5}, "int32", 1), data(d, {5}, "int32", 2)):astype("float64")
  end)
  -- float32 power goes through the device's powf (up to 4 ulp, CUDA's
  -- math library) against the host's: a few float32 ulps apart, not 1e-7
  both(op .. " float32 transposed (5,7) with (7,1)", function(d)
    return np[op](data(d, {7, 5}, "float32", 3):transpose(), data(d, {5, 1}, "float32", 4)):astype("float64")
  end, op == "power" and 2e-6 or nil)
end
-- np's elementwise math without a gradient, and its integer kernels
for _, op in ipairs({"logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                     "mod", "fmod", "copysign", "gcd", "lcm", "left_shift", "right_shift"}) do
  both(op .. " int32 (7,5) with (5)", function(d)
    return np[op](data(d, {7, 5}, "int32", 1), data(d, {5}, "int32", 2)):astype("float64")
  end)
end
for _, op in ipairs({"isnan", "isinf", "isfinite", "isposinf", "isneginf", "logical_not", "bitwise_not",
                     "floor", "rint", "round", "reciprocal"}) do
  both(op .. " int32 transposed (5,7)", function(d) return np[op](data(d, {7, 5}, "int32", 5):transpose()):astype("float64") end)
end
both("round float32 to -1 and 2 decimals", function(d)
  local x = data(d, {7, 5}, "float32", 6)
  return {np.round(x, -1):astype("float64"), np.round(x, 2):astype("float64")}
end)
for _, op in ipairs({"argmax", "argmin"}) do
  both(op .. " axis 1 of (13,37)", function(d) return np[op](data(d, {13, 37}), 1):astype("float64") end)
  both(op .. " flattened (13,37)", function(d) return np[op](data(d, {13, 37})):astype("float64") end)
end
-- sorting (cuda/ops/sort.cu ranks each element within its lane): ties
-- (integer values), NaN, a transposed axis, int32, topk's mask (sort_grad)
both("sort, argsort and topk with ties and NaN", function(d)
  local h = data(cpu, {13, 9}, "int32", 5):astype("float32")
  np.full({1, 1}, 0 / 0):copyto(h:slice({2, 3}, {4, 5}))
  local x = h:as_in_context(d)
  return {np.sort(x), np.argsort(x):astype("float64"), np.sort(x:transpose(), 0),
          np.argsort(x:transpose(), 0, {descending = true}):astype("float64"),
          np.sort(data(d, {7, 5}, "int32", 6), 1):astype("float64"),
          npx.topk(x, {k = 3, ret_typ = "mask"}), npx.topk(x, {k = 4, is_ascend = true})}
end, 0, 0)
both("sort and topk of float16 and bfloat16 (read and written as they are)", function(d)
  local x, y = data(d, {9, 13}, "float16", 11), data(d, {9, 13}, "bfloat16", 12)
  return {np.sort(x), np.argsort(x, 0):astype("float64"), npx.topk(y, {k = 3, ret_typ = "value"}),
          npx.topk(y, {k = 3, ret_typ = "mask"})}
end, 0, 0)
both("searchsorted left and right", function(d)
  local a = np.sort(data(d, {50}, "int32", 9):astype("float64"))
  local v = data(d, {6, 7}, "int32", 10)
  return {np.searchsorted(a, v):astype("float64"), np.searchsorted(a, v, {side = "right"}):astype("float64")}
end, 0, 0)
-- scans: one thread per lane on the GPU (cuda/ops/scan.cu); integers wrap alike
for _, op in ipairs({"cumsum", "cumprod"}) do
  both(op .. " int32 along axis 0 of (33,5), float32 of a transpose, uint8, float16, empty", function(d)
    return {np[op](data(d, {33, 5}, "int32"), 0):astype("float64"),
            np[op](data(d, {7, 9}, "float32", 5):transpose(), 0):astype("float64"),
            np[op](data(d, {300}, "uint8", 6)):astype("float64"),
            np[op](data(d, {5, 3}, "float16", 7), 1):astype("float64"),
            np[op](data(d, {0, 3}), 1):astype("float64")}
  end)
end
-- svd: the same rotations in the same order on both (cuda/ops/linalg.cu)
both("svd of (3,6,4) float64 and of a transposed float32 (5,5): S and U diag(S) V^T", function(d)
  local out = {}
  for _, x in ipairs({data(d, {3, 6, 4}, "float64", 8), data(d, {5, 5}, "float32", 9):transpose()}) do
    local r = core.call(core.op_ids.svd, {x}, nil, nil, 3)
    out[#out + 1] = r[2]:astype("float64")
    out[#out + 1] = np.matmul(np.multiply(r[1], np.expand_dims(r[2], -2)), np.swapaxes(r[3], -1, -2)):astype("float64")
  end
  return out
end, 1e-5, 1e-5)
for _, op in ipairs({"sum", "max", "min", "prod", "mean"}) do
  both(op .. " int64 over axis 0 of (33,5)", function(d) return np[op](data(d, {33, 5}, "int64"), 0):astype("float64") end)
end
-- long reductions are cut into chunks over many blocks, their partials
-- merged in order (cuda/ops/reduce.cu): few results over many elements, a
-- whole array, ties between chunks (the first index wins), NaN in a late
-- chunk. The GPU sums float32 in double; the host's contiguous float32 sum
-- adds runs of 16 in float32 lanes first (core/ops/reduce.c), a few float32
-- ulps from the exact sum: 1e-6 relative for sum and mean, exact otherwise.
for _, op in ipairs({"sum", "mean", "max", "min", "argmax", "argmin"}) do
  both(op .. " over axis 1 of (3,100003) and of all 300009", function(d)
    local x = data(d, {3, 100003}, "float32", 8)
    return {np[op](x, 1):astype("float64"), np[op](x):astype("float64")}
  end, (op == "sum" or op == "mean") and 1e-6 or 1e-12, 1e-9)
end
both("argmax and argmin with ties in distant chunks keep the first index", function(d)
  local h = np.zeros({2, 200000})
  np.full({1, 1}, 9):copyto(h:slice({0, 1}, {5000, 5001}))
  np.full({1, 1}, 9):copyto(h:slice({0, 1}, {190000, 190001}))
  np.full({1, 1}, -9):copyto(h:slice({1, 2}, {7, 8}))
  np.full({1, 1}, -9):copyto(h:slice({1, 2}, {150000, 150001}))
  local x = h:as_in_context(d)
  return {np.argmax(x, 1):astype("float64"), np.argmin(x, 1):astype("float64"),
          np.argmax(x):astype("float64"), np.argmin(x):astype("float64")}
end, 0, 0)
both("max and sum let a NaN in the last chunk win", function(d)
  local h = np.ones({1, 300000}, {dtype = "float64"})
  np.full({1, 1}, 0 / 0, {dtype = "float64"}):copyto(h:slice({0, 1}, {299999, 300000}))
  local x = h:as_in_context(d)
  local r = {np.max(x, 1), np.sum(x, 1), np.argmax(x, 1):astype("float64")}
  if r[1]:item() == r[1]:item() then error("max is " .. r[1]:item() .. ", not NaN", 0) end
  return r
end, 0, 0)
both("astype float16 round trip", function(d) return data(d, {9, 11}):astype("float16"):astype("float64") end)
both("astype bfloat16 round trip", function(d) return data(d, {9, 11}):astype("bfloat16"):astype("float64") end)
both("arange / linspace / eye / full", function(d)
  return {np.arange(0, 17, 3, {device = d}):astype("float64"),
          np.linspace(-1, 1, 11, {device = d}):astype("float64"),
          np.eye(5, 7, 1, {device = d}):astype("float64"),
          np.full({3, 4}, 2.5, {device = d}):astype("float64")}
end)
-- Random ops: each device has its own Philox stream (core/rng.c keys it by
-- device), so the GPU's draws are checked by their statistics and rules.
local function gpu_only(label, fn)
  local ok, err = pcall(fn)
  report(label, ok and nil or err)
end
local function stats(t)
  local v, n = host(t:astype("float64"))
  local s, s2, lo, hi = 0, 0, math.huge, -math.huge
  for j = 0, n - 1 do
    s, s2 = s + v[j], s2 + v[j] * v[j]
    lo, hi = math.min(lo, v[j]), math.max(hi, v[j])
  end
  local m = s / n
  return m, s2 / n - m * m, lo, hi
end
gpu_only("random_uniform on the device: [-1, 1), mean 0, var 1/3", function()
  np.random.seed(123)
  local m, var, lo, hi = stats(np.random.uniform(-1, 1, {100001}, {device = gpu}))
  assert(lo >= -1 and hi < 1 and math.abs(m) < 0.01 and math.abs(var - 1 / 3) < 0.01,
         ("mean %g var %g range [%g, %g]"):format(m, var, lo, hi))
end)
gpu_only("random_normal on the device: mean 0, var 1", function()
  np.random.seed(124)
  local m, var = stats(np.random.normal(0, 1, {100001}, {device = gpu, dtype = "float64"}))
  assert(math.abs(m) < 0.02 and math.abs(var - 1) < 0.02, ("mean %g var %g"):format(m, var))
end)
gpu_only("random_randint on the device: [0, 100), mean 49.5", function()
  np.random.seed(125)
  local m, _, lo, hi = stats(np.random.randint(0, 100, {100001}, {device = gpu}))
  assert(lo >= 0 and hi <= 99 and math.abs(m - 49.5) < 0.5, ("mean %g range [%g, %g]"):format(m, lo, hi))
end)
gpu_only("random_gamma on the device: shapes 2.5 and 0.5, mean k, var k", function()
  np.random.seed(126)
  for _, k in ipairs({2.5, 0.5}) do
    local m, var, lo = stats(np.random.gamma(k, 1, {100001}, {device = gpu, dtype = "float64"}))
    assert(lo >= 0 and math.abs(m - k) < 0.03 * k and math.abs(var - k) < 0.06 * k,
           ("shape %g: mean %g var %g min %g"):format(k, m, var, lo))
  end
end)
gpu_only("random_choice on the device: shares of p (0.1, 0.2, 0, 0.7)", function()
  np.random.seed(127)
  local v, n = host(np.random.choice(4, {100001}, {p = {0.1, 0.2, 0, 0.7}, device = gpu}):astype("float64"))
  local c = {[0] = 0, 0, 0, 0}
  for j = 0, n - 1 do c[v[j]] = c[v[j]] + 1 end
  assert(c[2] == 0 and math.abs(c[0] / n - 0.1) < 0.005 and math.abs(c[1] / n - 0.2) < 0.005,
         ("counts %d %d %d %d"):format(c[0], c[1], c[2], c[3]))
end)
gpu_only("random_multinomial on the device: rows sum to n, shares of pvals", function()
  np.random.seed(128)
  local v, n = host(np.random.multinomial(9, {0.25, 0.25, 0.5}, {20001}, {device = gpu}):astype("float64"))
  local tot = {[0] = 0, 0, 0}
  for j = 0, n - 1, 3 do
    assert(v[j] + v[j + 1] + v[j + 2] == 9, "a row sums to " .. v[j] + v[j + 1] + v[j + 2])
    for k = 0, 2 do tot[k] = tot[k] + v[j + k] end
  end
  local all = 9 * n / 3
  assert(math.abs(tot[0] / all - 0.25) < 0.005 and math.abs(tot[2] / all - 0.5) < 0.005,
         ("shares %g %g %g"):format(tot[0] / all, tot[1] / all, tot[2] / all))
end)
gpu_only("dropout on the device: y = x * mask, mask in {0, 1/(1-p)}, keep rate 1-p", function()
  np.random.seed(5)
  local x = data(gpu, {101, 103}, "float64")
  local a = core.attrs()
  a.f[core.slot.DROPOUT_P] = 0.3
  local r = core.call(core.op_ids.dropout, {x}, a, nil, 2)
  local y, mask = r[1], r[2]
  local e = differ(y, x * mask, "y vs x * mask")
  if e then error(e, 0) end
  local mv, n = host(mask)
  local kept = 0
  for j = 0, n - 1 do
    assert(mv[j] == 0 or math.abs(mv[j] - 1 / 0.7) < 1e-12, "mask value " .. mv[j])
    if mv[j] ~= 0 then kept = kept + 1 end
  end
  assert(math.abs(kept / n - 0.7) < 0.01, "keep rate " .. kept / n)
end)
-- float32 GEMM: cuBLAS and the host sum the 129 products (each ~9, sums ~100)
-- in different orders, so they agree to float32 rounding, not to 1e-7
both("matmul float32 (65,129)@(129,33) and batched broadcast", function(d)
  return {np.matmul(data(d, {65, 129}, "float32", 1), data(d, {129, 33}, "float32", 2)):astype("float64"),
          np.matmul(data(d, {3, 1, 5, 7}, "float32", 3), data(d, {4, 7, 6}, "float32", 4)):astype("float64")}
end, 1e-5, 2e-3)

-- linear (Dense's fused op): cuBLAS with w read transposed, then the bias
-- and relu pass; a strided bias goes through a dense copy
both("linear float32 with bias and relu, a strided bias, float64 without bias", function(d)
  local x, w = data(d, {9, 20}, "float32", 5), data(d, {17, 20}, "float32", 6)
  local bias = data(d, {17, 2}, "float32", 7)
  return {npx.fully_connected(x, w, data(d, {17}, "float32", 8), {act_type = "relu"}):astype("float64"),
          npx.fully_connected(x, w, bias:slice(true, {0, 1}):reshape({17}), {act_type = "relu"}):astype("float64"),
          npx.fully_connected(data(d, {4, 6}, "float64", 9), data(d, {3, 6}, "float64", 10), {no_bias = true})}
end, 1e-5, 2e-3)

-- Special values through the generic elementwise kernels and the device's
-- dtype conversions (cuda/kernels.cuh): NaN, infinities, signed zeros,
-- values out of the integer and 16-bit ranges, integer wrapping.
local special = {0 / 0, 1 / 0, -1 / 0, 0, -0.0, 1, -1, 0.5, -2.5, 3.7, 1e30, -1e30, 65504, 70000,
                 2147483648, -2147483649, 300, -300}
local function on(d, t, dtype)
  return np.array(t, {dtype = "float64", device = d}):astype(dtype or "float32")
end
both("NaN, infinities and out-of-range values through elementwise ops and astype", function(d)
  local x = on(d, special)
  local rev = {}
  for k = #special, 1, -1 do rev[#rev + 1] = special[k] end
  local y = on(d, rev)
  local r = {np.maximum(x, y), np.minimum(x, y), npx.relu(x), np.sign(x), np.abs(x), np.negative(x),
             np.clip(x, -1, 2), np.clip(x, nil, 0.5), np.divide(x, y), np.where(x, y, 7)}
  for _, op in ipairs({"equal", "not_equal", "greater", "greater_equal", "less", "less_equal"}) do
    r[#r + 1] = np[op](x, y)
  end
  for _, dt in ipairs({"int32", "int64", "uint8", "bool", "float16", "bfloat16", "int8", "int16", "uint16"}) do
    r[#r + 1] = x:astype(dt)
    r[#r + 1] = on(d, special, "float64"):astype(dt)
  end
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 0, 0)
both("int8, int16 and uint16 arithmetic wraps, mixed integers promote as NumPy", function(d)
  local a = np.array({127, -128, -1, 100, 0, 7}, {dtype = "int8", device = d})
  local s = np.array({32767, -32768, 200, -1, 0, 300}, {dtype = "int16", device = d})
  local u = np.array({65535, 0, 300, 1, 255, 40000}, {dtype = "uint16", device = d})
  local b = np.array({200, 255, 0, 1, 128, 9}, {dtype = "uint8", device = d})
  local r = {a + a, a * a, -a, np.abs(a), np.sign(a), np.power(a, 3), a + b, s * s, s - u, u * u, u + u,
             np.maximum(a, s), np.clip(a, -5, 300), np.divide(s, a), np.sum(a), np.max(u), np.argmin(s)}
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 0, 0)
both("int32 and uint8 arithmetic wraps; integer division is float32 division", function(d)
  local v = {2147483647, -2147483648, -1, 0, 7, -7, 46341, 65536}
  local x = np.array(v, {dtype = "int32", device = d})
  local u = np.array({0, 1, 2, 127, 128, 200, 255, 16}, {dtype = "uint8", device = d})
  local three = np.array(3, {dtype = "int32", device = d})
  local r = {np.add(x, x), np.subtract(x, 1), np.multiply(x, x), np.negative(x), np.abs(x),
             np.square(x), np.power(x, 3), np.sign(x), np.divide(x, three),
             np.divide(x, np.zeros({8}, {dtype = "int32", device = d})),
             np.add(u, u), np.multiply(u, u), np.negative(u), np.square(u), np.power(u, 2),
             np.clip(u, 1.5, 200.5)}
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 0, 0)
-- CUDA's float32 exp, log, tanh are within a few ulps of the host's libm
both("float32 exp, log, sqrt, tanh, sigmoid, softrelu, leaky_relu of a transpose", function(d)
  local x = data(d, {9, 11}, "float32", 12):transpose()
  local r = {np.exp(x), np.log(x), np.sqrt(x), np.tanh(x), npx.sigmoid(x),
             npx.activation(x, {act_type = "softrelu"}), npx.leaky_relu(x, {slope = 0.2})}
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 2e-6, 1e-6)

-- take and pick with indices of other dtypes and every mode; take's raise
-- mode fails on both devices, naming the same index
both("take of int32, uint8 and float64 data with float32, int32 and uint8 indices, clip and wrap", function(d)
  local x = data(d, {5, 7}, "float64", 13)
  local fi = on(d, {-8.7, -1.5, 0.9, 4.2, 6.99, 12, 0 / 0})
  local ii = np.array({-9, -1, 0, 3, 6, 7, 40}, {dtype = "int32", device = d})
  local ui = np.array({0, 4, 6, 7, 255}, {dtype = "uint8", device = d})
  local r = {}
  for _, idx in ipairs({fi, ii, ui}) do
    for _, mode in ipairs({"clip", "wrap"}) do
      r[#r + 1] = np.take(x:astype("int32"), idx, 1, {mode = mode})
      r[#r + 1] = np.take(x:transpose():astype("uint8"), idx, 0, {mode = mode})
      r[#r + 1] = np.take(x, idx, {mode = mode})
    end
  end
  r[#r + 1] = np.take(x, np.array({{-7, 6}, {-1, 0}}, {dtype = "int64", device = d}), 1, {mode = "raise"})
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 0, 0)
report("take raise mode: the same error for an out-of-range index on both devices", (function()
  local msgs = {}
  for i, dev in ipairs({cpu, gpu}) do
    local x = data(dev, {3, 4}, "float32", 14)
    local idx = np.array({{1, -4}, {9, 2}, {-5, 0}}, {dtype = "int64", device = dev})
    local ok, err = pcall(np.take, x, idx, 1, {mode = "raise"})
    if ok then return "no error on " .. tostring(dev) end
    local flat = np.array({3, -13, 12}, {dtype = "int32", device = dev})
    local ok2, err2 = pcall(np.take, x, flat, {mode = "raise"})
    if ok2 then return "no error (flattened) on " .. tostring(dev) end
    msgs[i] = tostring(err):match("take:.*") .. " | " .. tostring(err2):match("take:.*")
  end
  if msgs[1] ~= msgs[2] then return ("cpu: %s; gpu: %s"):format(msgs[1], msgs[2]) end
end)())
-- the layout ops (core/ops/layout.c) move bytes: every dtype, 16-bit ones
-- included, exactly; one_hot (no gradient) with float, NaN and int indices
both("pad, diag, tril, triu, sequence_mask of int32, uint8, bool and float16; one_hot", function(d)
  local x = data(d, {5, 7}, "float32", 16)
  local r = {}
  for _, dt in ipairs({"int32", "uint8", "bool", "float16"}) do
    local y = x:astype(dt)
    for _, mode in ipairs({"constant", "edge", "reflect", "symmetric"}) do
      r[#r + 1] = np.pad(y:transpose(), {{2, 9}, {1, 3}}, mode)
    end
    r[#r + 1] = np.pad(y, 1, {constant_values = 3.7})
    r[#r + 1] = np.diag(y, 2)
    r[#r + 1] = np.diag(np.diag(y, -1), -1)
    r[#r + 1] = np.tril(y:transpose(), 1)
    r[#r + 1] = np.triu(y:slice(1), -1)
    r[#r + 1] = npx.sequence_mask(y, on(d, {0, 2, 9, -1, 3}), {use_sequence_length = true, axis = 1, value = -2.5})
  end
  r[#r + 1] = npx.one_hot(on(d, {-8.7, -0.5, 0.9, 4.2, 6.99, 12, 0 / 0}), 7)
  r[#r + 1] = npx.one_hot(np.array({{-1, 0}, {6, 7}}, {dtype = "int32", device = d}), 7,
                          {on_value = 2.5, off_value = -1, dtype = "int64"})
  r[#r + 1] = npx.one_hot(on(d, {1, 3}), 4, {dtype = "float16"})
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 0, 0)
both("pick with float32 and int32 indices, clip and wrap, keepdims, along axis 0 of a transpose", function(d)
  local x = data(d, {4, 6}, "float32", 15)
  local fi = on(d, {-3.5, 0.2, 2.9, 3.1, 9, 0 / 0})
  local ii = np.array({-7, -1, 0, 2, 3, 10}, {dtype = "int32", device = d})
  local r = {}
  for _, idx in ipairs({fi, ii}) do
    for _, mode in ipairs({"clip", "wrap"}) do
      r[#r + 1] = npx.pick(x, idx, {axis = 0, mode = mode})
      r[#r + 1] = npx.pick(x:transpose(), idx, {axis = 1, mode = mode, keepdims = true})
    end
  end
  for k = 1, #r do r[k] = r[k]:astype("float64") end
  return r
end, 0, 0)

-- batch_norm updates its running statistics in place: compare them too.
-- float32 within a few ulps (the device fuses a * x + b into one rounding)
local S = core.slot
local function bn_call(x, g, b, rm, rv, axis, training, global, relu)
  local a = core.attrs()
  a.i[S.BN_AXIS], a.i[S.BN_TRAINING], a.i[S.BN_GLOBAL_STATS], a.ni = axis, training, global, S.BN_RELU + 1
  a.i[S.BN_RELU] = relu and 1 or 0
  a.f[S.BN_EPS], a.f[S.BN_MOMENTUM] = 1e-5, 0.9
  return core.call(core.op_ids.batch_norm, {x, g, b, rm, rv}, a, nil, 3)
end
for _, c in ipairs({{"float32 (4,3,5) axis 1", {4, 3, 5}, "float32", 1, false},
                    {"float64 transposed (5,6,3) axis -1", {3, 6, 5}, "float64", -1, true}}) do
  for _, mode in ipairs({{1, 0, "training"}, {0, 0, "inference"}, {1, 1, "use_global_stats"},
                        {1, 0, "training, fused relu", true}}) do
    both("batch_norm " .. c[1] .. ", " .. mode[3] .. ": y, mean, invstd, running mean and var", function(d)
      local x = data(d, c[2], c[3], 16)
      if c[5] then x = x:transpose() end
      local C = x.shape[c[4] < 0 and #x.shape or c[4] + 1]
      local g = data(d, {C}, c[3], 17)
      local b = data(d, {C}, c[3], 18)
      local rm = data(d, {C}, c[3], 19)
      local rv = np.abs(data(d, {C}, c[3], 20))
      local r = bn_call(x, g, b, rm, rv, c[4], mode[1], mode[2], mode[4])
      r[#r + 1] = rm
      r[#r + 1] = rv
      for k = 1, #r do r[k] = r[k]:astype("float64") end
      return r
    end, c[3] == "float32" and 2e-6 or nil, c[3] == "float32" and 1e-5 or nil)
  end
end

-- the fused optimizer updates, three steps in place on a transposed
-- (non-contiguous) weight, with weight decay, rescaling and clipping;
-- float32 within a few ulps, as batch_norm
local function update(id, inputs, f)
  local a = core.attrs()
  for slot, v in pairs(f) do a.f[S[slot]] = v end
  core.call(id, inputs, a)
end
for _, u in ipairs({{"sgd_update", 2, {OPT_LR = 0.1, OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = 1.0}},
                    {"sgd_mom_update", 3, {OPT_LR = 0.1, OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = -1,
                                           SGD_MOMENTUM = 0.9}},
                    {"adam_update", 4, {OPT_LR = 0.01, OPT_WD = 0.001, OPT_RESCALE = 2.0, OPT_CLIP = 0.8,
                                        ADAM_BETA1 = 0.9, ADAM_BETA2 = 0.999, ADAM_EPSILON = 1e-8}, {4}},
                    {"nag_mom_update", 3, {OPT_LR = 0.1, OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = 1.0,
                                           NAG_MOMENTUM = 0.9}},
                    {"rmsprop_update", 3, {OPT_LR = 0.01, OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = 1.0,
                                           RMSPROP_GAMMA1 = 0.9, RMSPROP_EPSILON = 1e-8, RMSPROP_CLIP_WEIGHTS = 4}, {3}},
                    {"rmspropalex_update", 5, {OPT_LR = 0.01, OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = 0.8,
                                               RMSPROPALEX_GAMMA1 = 0.9, RMSPROPALEX_GAMMA2 = 0.8,
                                               RMSPROPALEX_EPSILON = 1e-8, RMSPROPALEX_CLIP_WEIGHTS = -1}, {3}},
                    {"adagrad_update", 3, {OPT_LR = 0.1, OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = -1,
                                           ADAGRAD_EPSILON = 1e-7}, {3}},
                    {"adadelta_update", 4, {OPT_WD = 0.01, OPT_RESCALE = 0.5, OPT_CLIP = 1.0,
                                            ADADELTA_RHO = 0.9, ADADELTA_EPSILON = 1e-5}, {3, 4}},
                    {"adamw_update", 4, {OPT_LR = 1, OPT_WD = 0.01, OPT_RESCALE = 2.0, OPT_CLIP = 0.8,
                                         ADAMW_BETA1 = 0.9, ADAMW_BETA2 = 0.999, ADAMW_EPSILON = 1e-6,
                                         ADAMW_ETA = 0.01}, {4}}}) do
  for _, dt in ipairs({"float32", "float64"}) do
    both(u[1] .. " " .. dt .. ", three steps on a transposed weight", function(d)
      local w = data(d, {7, 5}, dt, 21):transpose()
      local st = {w}
      for k = 3, u[2] do st[k] = data(d, {5, 7}, dt, 21 + k) end
      for _, k in ipairs(u[4] or {}) do st[k] = np.abs(st[k]) end -- the states that are sums of squares
      if u[1] == "rmspropalex_update" then st[3], st[4] = st[3] + 10, st[4] * 0.1 end -- n > g_avg^2
      for step = 1, 3 do
        st[2] = data(d, {5, 7}, dt, 30 + step)
        update(core.op_ids[u[1]], st, u[3])
      end
      local r = {w}
      for k = 3, u[2] do r[#r + 1] = st[k] end
      for k = 1, #r do r[k] = r[k]:astype("float64") end
      return r
    end, dt == "float32" and 2e-6 or nil, dt == "float32" and 1e-5 or nil)
  end
end

-- optimizers, part 2: the same, three steps on a transposed weight, the
-- states positive (u, v, n); lamb's r1 a 0-d value, its norm a reduction
for _, u in ipairs({{"adamax_update", 4, {ADAMAX_BETA1 = 0.9, ADAMAX_BETA2 = 0.99}},
                    {"nadam_update", 4, {NADAM_BETA1 = 0.9, NADAM_BETA2 = 0.999, NADAM_EPSILON = 1e-8,
                                         NADAM_M_RATIO = 0.7}, {NADAM_T = 3}},
                    {"lamb_update", 4, {LAMB_BETA1 = 0.9, LAMB_BETA2 = 0.999, LAMB_EPSILON = 1e-6},
                     {LAMB_T = 3, LAMB_BIAS_CORRECTION = 1}},
                    {"signsgd_update", 2, {}},
                    {"signum_update", 3, {SIGNUM_MOMENTUM = 0.9, SIGNUM_WD_LH = 0.01}},
                    {"ftrl_update", 4, {FTRL_LAMDA1 = 0.5, FTRL_BETA = 1}}}) do
  for _, dt in ipairs({"float32", "float64"}) do
    both(u[1] .. " " .. dt .. ", three steps on a transposed weight", function(d)
      local w = data(d, {7, 5}, dt, 41):transpose()
      local st = {w}
      for k = 3, u[2] do st[k] = np.abs(data(d, {5, 7}, dt, 41 + k)) end
      for step = 1, 3 do
        st[2] = data(d, {5, 7}, dt, 50 + step)
        local inputs = {unpack(st)}
        if u[1] == "lamb_update" then inputs[5] = np.array(4.5, {dtype = dt, device = d}) end
        local a = core.attrs()
        a.f[S.OPT_LR], a.f[S.OPT_WD], a.f[S.OPT_RESCALE], a.f[S.OPT_CLIP] = 0.01, 0.001, 2.0, 0.8
        for slot, v in pairs(u[3]) do a.f[S[slot]] = v end
        for slot, v in pairs(u[4] or {}) do a.i[S[slot]], a.ni = v, math.max(a.ni, S[slot] + 1) end
        core.call(core.op_ids[u[1]], inputs, a)
      end
      local r = {w}
      for k = 3, u[2] do r[#r + 1] = st[k] end
      for k = 1, #r do r[k] = r[k]:astype("float64") end
      return r
    end, dt == "float32" and 2e-6 or nil, dt == "float32" and 1e-5 or nil)
  end
end

gpu_only("random_permute on the device: the rows of x in some order", function()
  np.random.seed(126)
  local n = 1000
  local x = np.arange(0, n, 1, {dtype = "float64", device = gpu}):reshape({n, 1})
  x = x * np.ones({1, 3}, {dtype = "float64", device = gpu})
  np.random.shuffle(x)
  local v = host(x)
  local seen, moved = {}, 0
  for i = 0, n - 1 do
    local r = v[3 * i]
    assert(v[3 * i + 1] == r and v[3 * i + 2] == r, "row " .. i .. " is not one of x's rows")
    assert(r >= 0 and r < n and r % 1 == 0 and not seen[r], "row value " .. r .. " repeated or unknown")
    seen[r] = true
    if r ~= i then moved = moved + 1 end
  end
  assert(moved > n / 2, moved .. " of " .. n .. " rows moved")
end)

-- float16 / bfloat16: the GPU's 16-bit cuBLAS and cuDNN paths against the
-- CPU's float32 kernels on converted copies. Both accumulate in float32 and
-- round once to 16 bits, so they agree to about one 16-bit ulp (the order of
-- the sums differs): within 1e-2 (float16) and 5e-2 (bfloat16), relative
-- and absolute, whatever PARITY_RTOL says.
for _, kind in ipairs({{dt = "float16", tol = 1e-2}, {dt = "bfloat16", tol = 5e-2}}) do
  local dt = kind.dt
  -- f on 16-bit inputs of shapes, forward and backward (head gradient of
  -- the output's shape): the output and the gradients, as float64
  local function fwd_bwd(d, f, shapes, seed, whole)
    local xs = {}
    for k, s in ipairs(shapes) do
      xs[k] = whole and np.round(data(d, s, "float32", seed + k) / 2):astype(dt) or data(d, s, dt, seed + k)
      xs[k]:attach_grad()
    end
    local y = autograd.record(function() return f(unpack(xs)) end)
    if y.dtype ~= dt then error(("output is %s, not %s"):format(y.dtype, dt), 0) end
    y:backward(whole and np.round(data(d, y.shape, "float32", seed) / 2):astype(dt) or data(d, y.shape, dt, seed))
    local r = {y:astype("float64")}
    for k = 1, #xs do
      if xs[k].grad.dtype ~= dt then error(("gradient %d is %s"):format(k, xs[k].grad.dtype), 0) end
      r[#r + 1] = xs[k].grad:astype("float64")
    end
    return r
  end
  local function check(label, f, shapes, seed, whole)
    both(label, function(d) return fwd_bwd(d, f, shapes, seed, whole) end, kind.tol, kind.tol)
  end
  check("matmul " .. dt .. " (65,129)@(129,33), forward and backward", np.matmul, {{65, 129}, {129, 33}}, 20)
  check("matmul " .. dt .. " batched broadcast (3,1,5,7)@(4,7,6), forward and backward", np.matmul,
        {{3, 1, 5, 7}, {4, 7, 6}}, 30)
  check("fully_connected " .. dt .. " with bias and relu, forward and backward", function(x, w, b)
    return npx.relu(npx.fully_connected(x, w, b, {num_hidden = 17}))
  end, {{9, 4, 5}, {17, 20}, {17}}, 40)
  -- whole numbers (|v| <= 8): every sum is exact in both, so the relu's
  -- mask is the same on both sides (with random data a pre-activation within
  -- one 16-bit ulp of 0 may fall either way and move a gradient by a lot)
  check("conv2d " .. dt .. " with bias and fused relu, forward and backward", function(x, w, b)
    return npx.convolution(x, w, b, {kernel = {3, 3}, num_filter = 8, pad = {1, 1}, act_type = "relu"})
  end, {{3, 5, 13, 11}, {8, 5, 3, 3}, {8}}, 50, true)
  check("conv2d " .. dt .. " strided, dilated, grouped, forward and backward", function(x, w)
    return npx.convolution(x, w, {kernel = {3, 2}, num_filter = 6, stride = {2, 1}, dilate = {1, 2},
                                  num_group = 2, no_bias = true})
  end, {{2, 4, 15, 12}, {6, 2, 3, 2}}, 60)
  both("matmul and conv2d " .. dt .. " accumulate in float32 (4608 ones sum to 4608)", function(d)
    local ones = np.ones({1, 4608}, {dtype = dt, device = d})
    local x = np.ones({1, 512, 3, 3}, {dtype = dt, device = d})
    local r = {np.matmul(ones, ones.T):astype("float64"),
               npx.convolution(x, x, {kernel = {3, 3}, num_filter = 1, no_bias = true}):astype("float64")}
    for k = 1, 2 do
      local v = r[k]:sum():item()
      if v ~= 4608 then error(("%s result %g on %s, not 4608"):format(k == 1 and "matmul" or "conv2d", v,
                                                                       tostring(d)), 0) end
    end
    return r
  end, 0, 0)
end

-- a 16-bit x integer product is computed in float32 and rounded once, as on
-- the CPU: 3 x 2049 is 6147, float16 6148; rounding 2049 to float16 first
-- (2048) would give 6144
both("matmul float16 x int32 computes in float32 (3 x 2049 is 6148 in float16)", function(d)
  local y = np.matmul(np.ones({1, 3}, {dtype = "float16", device = d}),
                      np.full({3, 1}, 2049, {dtype = "int32", device = d}))
  if y.dtype ~= "float16" then error("result is " .. y.dtype, 0) end
  local v = y:astype("float64"):item()
  if v ~= 6148 then error(("result %g on %s, not 6148"):format(v, tostring(d)), 0) end
  return {y:astype("float64")}
end, 0, 0)

-- The backend's fast paths, forward and backward in float64: softmax's warp
-- per row and, beyond 1024 columns, its block per row; batch_norm with few
-- channels over many elements (each channel split over several blocks); a
-- convolution with dilation and groups, run twice (the second call through
-- the cached cuDNN plan, or cuDNN's missing algorithm's direct kernels).
local function fast(label, shapes, f)
  local ok, err = pcall(run, label, {label, inputs = function()
    local xs = {}
    for k, sh in ipairs(shapes) do xs[k] = data(cpu, sh, "float64", 30 + k) end
    return xs
  end, f = f})
  if not ok then err = "error: " .. tostring(err) end
  report(label, err)
end
for _, cols in ipairs({1, 37, 1024, 1025, 3001}) do
  for _, op in ipairs({"softmax", "log_softmax"}) do
    fast(op .. " over " .. cols .. " columns", {{5, cols}}, function(x) return npx[op](x, {axis = -1}) end)
  end
end
fast("softmax over axis 0 of (2000,3), strided rows", {{2000, 3}}, function(x) return npx.softmax(x, {axis = 0}) end)
fast("batch_norm (16,3,40,40) training: channels split over blocks", {{16, 3, 40, 40}, {3}, {3}},
     function(x, g, b)
       local rm, rv = np.zeros({3}, {dtype = "float64"}), np.ones({3}, {dtype = "float64"})
       return bn_call(x, g, b, rm, rv, 1, 1, 0)[1]
     end)
for round = 1, 2 do
  fast("conv2d and conv3d float64, dilation and groups, call " .. round, {{2, 4, 11, 10}, {6, 2, 3, 2}, {1, 4, 6, 7, 5}, {4, 2, 2, 3, 2}},
       function(x, w, x3, w3)
         return {npx.convolution(x, w, nil, {kernel = {3, 2}, num_filter = 6, stride = {2, 1}, dilate = {2, 3},
                                             pad = {1, 0}, num_group = 2, no_bias = true}),
                 npx.convolution(x3, w3, nil, {kernel = {2, 3, 2}, num_filter = 4, stride = {1, 2, 1},
                                               dilate = {2, 1, 2}, pad = {1, 1, 0}, num_group = 2, no_bias = true})}
       end)
end

say(("parity: %d passed, %d failed, %d skipped"):format(passed, failed, skipped))
os.exit(failed == 0 and 0 or 1)
