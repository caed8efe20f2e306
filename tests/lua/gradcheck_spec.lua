-- gradcheck_spec: every differentiable registry op against central finite
-- differences in float64 on the CPU. For fixed random R per output, the
-- backward of L = sum(out * R) (head gradients R) must match
-- (L(x + eps e_j) - L(x - eps e_j)) / 2 eps for every element j of every
-- checked input. Cases cover broadcasting and non-contiguous operands; a
-- case with `want` also checks the forward's values (special values, as
-- NumPy gives them). Which ops have a backward rule is the registry's fact
-- (GRAD in core/luon_ops.def): the suite fails when one of them has no
-- entry in `cases`, or an op without one has.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon
local core = require("luon.core")
local ffi, C = core.ffi, core.C
local autograd = luon.autograd

local EPS = 1e-6

---------------------------------------------------------------------------
-- Inputs

local seed = 0
-- Standard normal float64 of shape s (each call its own seed).
local function randn(s)
  seed = seed + 1
  np.random.seed(seed)
  return np.random.normal(0, 1, s, {dtype = "float64"})
end
-- Uniform in [lo, hi), float64.
local function rand(s, lo, hi)
  seed = seed + 1
  np.random.seed(seed)
  return np.random.uniform(lo, hi, s, {dtype = "float64"})
end
local function A(t) return np.array(t, {dtype = "float64"}) end
local function I(t) return np.array(t, {dtype = "int64"}) end

-- A registry op called by name: raw("max_pool2d", {x}, pool({2, 2}), nil, nout),
-- raw("leaky_relu", {x}, nil, {LEAKY_SLOPE = slope}). ints and floats are
-- tables of named slots (core/luon_ops.def: ni then covers the highest one
-- given; the others are 0).
local S = core.slot
local function raw(name, inputs, ints, floats, nout)
  local a = core.attrs()
  for slot, v in pairs(ints or {}) do
    a.i[S[slot]] = v
    a.ni = math.max(a.ni, S[slot] + 1)
  end
  for slot, v in pairs(floats or {}) do a.f[S[slot]] = v end
  return core.call(core.op_ids[name], inputs, a, nil, nout)
end
-- conv2d's slots: stride, pad, dilation {h, w}, groups, relu (nil: left out)
local function conv(s, p, d, groups, relu)
  return {CONV2D_STRIDE_H = s[1], CONV2D_STRIDE_W = s[2], CONV2D_PAD_H = p[1], CONV2D_PAD_W = p[2],
          CONV2D_DILATE_H = d[1], CONV2D_DILATE_W = d[2], CONV2D_GROUPS = groups, CONV2D_RELU = relu}
end
-- pooling's slots: kernel, stride, pad {h, w}, ceil_mode, global, count_include_pad (nil: left out)
local function pool(k, s, p, ceil, global, count_pad)
  return {POOL_KERNEL_H = k[1], POOL_KERNEL_W = k[2], POOL_STRIDE_H = s and s[1], POOL_STRIDE_W = s and s[2],
          POOL_PAD_H = p and p[1], POOL_PAD_W = p and p[2], POOL_CEIL = ceil, POOL_GLOBAL = global,
          POOL_COUNT_PAD = count_pad}
end
-- conv2d_maxpool's: conv2d's, then the pool's kernel, stride, pad {h, w}, ceil_mode
local function conv_pool(c, k, s, p, ceil)
  c.CMP_KERNEL_H, c.CMP_KERNEL_W, c.CMP_STRIDE_H, c.CMP_STRIDE_W = k[1], k[2], s[1], s[2]
  c.CMP_PAD_H, c.CMP_PAD_W, c.CMP_CEIL = p[1], p[2], ceil
  return c
end

---------------------------------------------------------------------------
-- The cases: op name -> list of {label, inputs = function() -> list of
-- float64 arrays, f = function(inputs...) -> an array or a list of them,
-- check = indices of the inputs to check (default all), tol, want = the
-- values of f's (first) output, row-major, NaN for NaN}. Inputs are
-- contiguous (their elements are perturbed in place); f makes the
-- non-contiguous views itself.

local T = function(x) return x:transpose() end
local cases = {}

local function binary_cases(name, lo, hi)
  local mk = lo and function(s) return rand(s, lo, hi) end or randn
  local f = np[name]
  cases[name] = {
    {"same shape", inputs = function() return {mk({2, 3}), mk({2, 3})} end, f = f},
    {"broadcast (2,3) with (3)", inputs = function() return {mk({2, 3}), mk({3})} end, f = f},
    {"broadcast (2,1,3) with (4,1)", inputs = function() return {mk({2, 1, 3}), mk({4, 1})} end, f = f},
    {"0-d with (2,2)", inputs = function() return {mk({}), mk({2, 2})} end, f = f},
    {"transposed operands", inputs = function() return {mk({3, 2}), mk({2, 3})} end,
     f = function(x, y) return f(T(x), y:slice(true, {nil, nil, -1})) end},
  }
end
binary_cases("add")
binary_cases("subtract")
binary_cases("multiply")
binary_cases("divide", 0.5, 2)
binary_cases("maximum")
binary_cases("minimum")
cases.power = {
  {"positive base", inputs = function() return {rand({2, 3}, 0.5, 2), randn({2, 3})} end, f = np.power},
  {"broadcast exponent", inputs = function() return {rand({2, 3}, 0.5, 2), randn({3})} end, f = np.power},
  {"transposed base", inputs = function() return {rand({3, 2}, 0.5, 2), randn({2, 1})} end,
   f = function(x, y) return np.power(T(x), y) end},
}

local function unary_cases(name, f, lo, hi)
  local mk = lo and function(s) return rand(s, lo, hi) end or randn
  cases[name] = {
    {"(2,3)", inputs = function() return {mk({2, 3})} end, f = f},
    {"0-d", inputs = function() return {mk({})} end, f = f},
    {"transposed, stepped", inputs = function() return {mk({4, 3})} end,
     f = function(x) return f(T(x):slice(true, {nil, nil, 2})) end},
  }
end
unary_cases("negative", np.negative)
unary_cases("abs", np.abs)
unary_cases("sign", np.sign)
unary_cases("exp", np.exp)
unary_cases("log", np.log, 0.5, 3)
unary_cases("log2", np.log2, 0.5, 3)
table.insert(cases.log2, {"NumPy's values: log2(0) = -inf, of a negative NaN", check = {},
  inputs = function() return {A({8, 0.5, 1, 0, -0.0, -1, 1 / 0, -1 / 0, 0 / 0})} end, f = np.log2,
  want = {3, -1, 0, -1 / 0, -1 / 0, 0 / 0, 1 / 0, 0 / 0, 0 / 0}})
unary_cases("sqrt", np.sqrt, 0.5, 3)
unary_cases("square", np.square)
unary_cases("tanh", np.tanh)
unary_cases("sigmoid", npx.sigmoid)
unary_cases("relu", npx.relu)
unary_cases("softrelu", function(x) return raw("softrelu", {x}) end)
unary_cases("leaky_relu", function(x) return raw("leaky_relu", {x}, nil, {LEAKY_SLOPE = 0.1}) end)
cases.clip = {
  {"both bounds", inputs = function() return {randn({3, 4})} end, f = function(x) return np.clip(x, -0.5, 0.7) end},
  {"lower bound only", inputs = function() return {randn({3, 4})} end, f = function(x) return np.clip(x, 0.1) end},
  {"upper bound only, transposed", inputs = function() return {randn({3, 4})} end,
   f = function(x) return np.clip(T(x), nil, 0.2) end},
}
cases.where = {
  {"same shape", inputs = function() return {randn({2, 3}), randn({2, 3})} end,
   f = function(x, y) return np.where(A({{1, 0, 1}, {0, 0, 1}}):greater(0), x, y) end},
  {"broadcast condition and y", inputs = function() return {randn({2, 3}), randn({3})} end,
   f = function(x, y) return np.where(A({1, 0, 1}):greater(0), x, y) end},
  {"broadcast x, transposed y", inputs = function() return {randn({2, 1}), randn({3, 2})} end,
   f = function(x, y) return np.where(A({{1, 0, 1}, {0, 1, 1}}):greater(0), x, T(y)) end},
}
cases.copy = {
  {"copy", inputs = function() return {randn({2, 3})} end, f = function(x) return x:copy() end},
  {"astype float64 of a transpose", inputs = function() return {randn({2, 3})} end,
   f = function(x) return T(x):astype("float64") end},
}

local function reduce_cases(name, mk)
  mk = mk or randn
  local f = np[name]
  cases[name] = {
    {"all axes", inputs = function() return {mk({2, 3, 4})} end, f = function(x) return f(x) end},
    {"axis 1", inputs = function() return {mk({2, 3, 4})} end, f = function(x) return f(x, 1) end},
    {"axes {0, 2}, keepdims", inputs = function() return {mk({2, 3, 4})} end,
     f = function(x) return f(x, {0, 2}, {keepdims = true}) end},
    {"axis -1 of a transpose", inputs = function() return {mk({4, 3})} end, f = function(x) return f(T(x), -1) end},
  }
end
reduce_cases("sum")
reduce_cases("mean")
reduce_cases("max")
reduce_cases("min")
reduce_cases("prod", function(s) return rand(s, 0.5, 1.5) end)
table.insert(cases.prod, {"rows with no, one and two zeros",
  inputs = function() return {A({{1.5, 2, 0.5}, {0, 2, 3}, {0, 1.5, 0}})} end,
  f = function(x) return np.prod(x, 1) end})

cases.matmul = {
  {"(2,3) @ (3,4)", inputs = function() return {randn({2, 3}), randn({3, 4})} end, f = np.matmul},
  {"(3) @ (3,4)", inputs = function() return {randn({3}), randn({3, 4})} end, f = np.matmul},
  {"(2,3) @ (3)", inputs = function() return {randn({2, 3}), randn({3})} end, f = np.matmul},
  {"(3) @ (3)", inputs = function() return {randn({3}), randn({3})} end, f = np.matmul},
  {"(2,2,3) @ (3,4)", inputs = function() return {randn({2, 2, 3}), randn({3, 4})} end, f = np.matmul},
  {"(2,1,2,3) @ (3,3,2) batch broadcast", inputs = function() return {randn({2, 1, 2, 3}), randn({3, 3, 2})} end,
   f = np.matmul},
  {"(3) @ (2,3,2)", inputs = function() return {randn({3}), randn({2, 3, 2})} end, f = np.matmul},
  {"(2,2,3) @ (3)", inputs = function() return {randn({2, 2, 3}), randn({3})} end, f = np.matmul},
  {"transposed operands", inputs = function() return {randn({3, 2}), randn({4, 3})} end,
   f = function(a, b) return np.matmul(T(a), T(b)) end},
}

cases.reshape = {
  {"(2,3) -> (3,2)", inputs = function() return {randn({2, 3})} end, f = function(x) return x:reshape({3, 2}) end},
  {"transpose reshaped (copies)", inputs = function() return {randn({2, 3})} end,
   f = function(x) return T(x):reshape({-1}) end},
}
cases.transpose = {
  {"reversed", inputs = function() return {randn({2, 3, 4})} end, f = function(x) return x:transpose() end},
  {"permutation", inputs = function() return {randn({2, 3, 4})} end, f = function(x) return x:transpose({1, 2, 0}) end},
}
cases.expand_dims = {
  {"axis 1", inputs = function() return {randn({2, 3})} end, f = function(x) return np.expand_dims(x, 1) end},
}
cases.squeeze = {
  {"all size-1 axes", inputs = function() return {randn({2, 1, 3, 1})} end, f = function(x) return np.squeeze(x) end},
}
cases.slice = {
  {"steps and a negative step", inputs = function() return {randn({4, 5})} end,
   f = function(x) return x:slice({1, 4, 2}, {nil, nil, -2}) end},
}
cases.broadcast_to = {
  {"(3,1) -> (2,3,4)", inputs = function() return {randn({3, 1})} end,
   f = function(x) return np.broadcast_to(x, {2, 3, 4}) end},
}
cases.split = {
  {"three pieces along axis 1", inputs = function() return {randn({2, 6})} end,
   f = function(x) return np.split(x, 3, 1) end},
  {"uneven boundaries of a transpose", inputs = function() return {randn({3, 5})} end,
   f = function(x) return np.split(T(x), {1, 4}, 0) end},
}
cases.take = {
  {"axis 0, repeated indices", inputs = function() return {randn({4, 3})} end,
   f = function(x) return np.take(x, I({2, 0, 2, 3}), 0) end},
  {"axis 1, 2-d indices", inputs = function() return {randn({2, 4})} end,
   f = function(x) return np.take(x, I({{0, 3}, {3, 1}}), 1) end},
  {"flattened, clip mode out of range", inputs = function() return {randn({2, 3})} end,
   f = function(x) return np.take(x, I({-1, 7, 4, 4})) end},
  {"wrap mode of a transpose", inputs = function() return {randn({3, 4})} end,
   f = function(x) return np.take(T(x), I({-1, 5, 2}), 1, {mode = "wrap"}) end},
}
cases.concatenate = {
  {"axis 1 with a transpose", inputs = function() return {randn({2, 3}), randn({1, 2})} end,
   f = function(a, b) return np.concatenate({a, T(b)}, 1) end},
}
cases.stack = {
  {"axis 1", inputs = function() return {randn({2, 3}), randn({2, 3})} end,
   f = function(a, b) return np.stack({a, b}, 1) end},
}

-- Neural-network ops through the registry (attrs as in core/luon_ops.def).
cases.conv2d = {
  {"stride 1 pad 1 with bias", inputs = function() return {randn({2, 3, 5, 5}), randn({4, 3, 3, 3}), randn({4})} end,
   f = function(x, w, b) return raw("conv2d", {x, w, b}, conv({1, 1}, {1, 1}, {1, 1}, 1)) end},
  {"stride 2, dilation 2, groups 2, no bias", inputs = function() return {randn({1, 4, 7, 6}), randn({2, 2, 2, 2})} end,
   f = function(x, w) return raw("conv2d", {x, w}, conv({2, 1}, {0, 1}, {2, 2}, 2)) end},
}
cases.conv2d_maxpool = {
  {"relu, bias, pool 2x2 stride 2", inputs = function() return {randn({2, 3, 6, 7}), randn({4, 3, 2, 2}), randn({4})} end,
   f = function(x, w, b)
     return raw("conv2d_maxpool", {x, w, b}, conv_pool(conv({1, 1}, {0, 0}, {1, 1}, 1, 1), {2, 2}, {2, 2}, {0, 0}, 0), nil, 2)[1]
   end},
  {"8 channels a group (the sparse backward), stride 2 dilation 2; pool 2x2 stride 1",
   inputs = function() return {randn({2, 16, 7, 7}), randn({4, 8, 2, 2}), randn({4})} end,
   f = function(x, w, b)
     return raw("conv2d_maxpool", {x, w, b}, conv_pool(conv({2, 2}, {1, 1}, {2, 2}, 2, 1), {2, 2}, {1, 1}, {0, 0}, 0), nil, 2)[1]
   end},
  {"pad 1, groups 2, no relu; pool 3x3 stride 1 pad 1, ceil mode",
   inputs = function() return {randn({1, 4, 5, 4}), randn({2, 2, 3, 3})} end,
   f = function(x, w)
     return raw("conv2d_maxpool", {x, w}, conv_pool(conv({1, 1}, {1, 1}, {1, 1}, 2, 0), {3, 3}, {2, 2}, {1, 1}, 1), nil, 2)[1]
   end},
}
cases.max_pool2d = {
  {"2x2 stride 2", inputs = function() return {randn({2, 2, 4, 4})} end,
   f = function(x) return raw("max_pool2d", {x}, pool({2, 2}, {2, 2})) end},
  {"3x3 stride 1 pad 1, ceil mode", inputs = function() return {randn({1, 2, 5, 4})} end,
   f = function(x) return raw("max_pool2d", {x}, pool({3, 3}, {2, 2}, {1, 1}, 1)) end},
}
cases.avg_pool2d = {
  {"2x2 stride 2", inputs = function() return {randn({2, 2, 4, 4})} end,
   f = function(x) return raw("avg_pool2d", {x}, pool({2, 2}, {2, 2})) end},
  {"3x3 stride 2 pad 1, padding not counted", inputs = function() return {randn({1, 2, 5, 5})} end,
   f = function(x) return raw("avg_pool2d", {x}, pool({3, 3}, {2, 2}, {1, 1}, 0, 0, 0)) end},
  {"global", inputs = function() return {randn({2, 3, 3, 4})} end,
   f = function(x) return raw("avg_pool2d", {x}, pool({1, 1}, {1, 1}, {0, 0}, 0, 1)) end},
}
-- batch_norm: x, gamma, beta, running mean and var -> y (mean and invstd unchecked)
local function bn(training, global)
  return function(x, gamma, beta)
    local rm, rv = np.zeros({3}, {dtype = "float64"}), np.ones({3}, {dtype = "float64"})
    return raw("batch_norm", {x, gamma, beta, rm, rv},
               {BN_AXIS = 1, BN_TRAINING = training, BN_GLOBAL_STATS = global},
               {BN_EPS = 1e-5, BN_MOMENTUM = 0.9}, 3)[1]
  end
end
cases.batch_norm = {
  {"training (batch statistics)", inputs = function() return {randn({4, 3, 2}), rand({3}, 0.5, 1.5), randn({3})} end,
   f = bn(1, 0)},
  {"inference (running statistics)", inputs = function() return {randn({4, 3, 2}), rand({3}, 0.5, 1.5), randn({3})} end,
   f = bn(0, 0)},
  {"use_global_stats while training", inputs = function() return {randn({2, 3}), rand({3}, 0.5, 1.5), randn({3})} end,
   f = bn(1, 1)},
}
-- dropout draws its mask from the generator: reseed so every call draws the same
cases.dropout = {
  {"p = 0.3", inputs = function() return {randn({4, 5})} end,
   f = function(x) np.random.seed(77); return raw("dropout", {x}, nil, {DROPOUT_P = 0.3}, 2)[1] end},
}
cases.softmax = {
  {"last axis", inputs = function() return {randn({3, 4})} end, f = function(x) return raw("softmax", {x}, {SOFTMAX_AXIS = -1}) end},
  {"axis 0 of a transpose", inputs = function() return {randn({3, 4})} end,
   f = function(x) return raw("softmax", {T(x)}, {SOFTMAX_AXIS = 0}) end},
}
cases.log_softmax = {
  {"last axis", inputs = function() return {randn({3, 4})} end, f = function(x) return raw("log_softmax", {x}, {SOFTMAX_AXIS = -1}) end},
  {"axis 1 of (2,3,2)", inputs = function() return {randn({2, 3, 2})} end,
   f = function(x) return raw("log_softmax", {x}, {SOFTMAX_AXIS = 1}) end},
}
cases.pick = {
  {"last axis", inputs = function() return {randn({3, 4})} end,
   f = function(x) return raw("pick", {x, I({3, 0, 3})}, {PICK_AXIS = -1, PICK_KEEPDIMS = 0, PICK_MODE = 0}) end},
  {"axis 0, keepdims, wrap", inputs = function() return {randn({3, 4})} end,
   f = function(x) return raw("pick", {x, I({0, 5, -1, 2})}, {PICK_AXIS = 0, PICK_KEEPDIMS = 1, PICK_MODE = 1}) end},
}

---------------------------------------------------------------------------
-- The check
-- rnn: x (T, N, I), MXNet's flat params, h0[, c0] (L*D, N, H) -> y, hy[, cy]
-- (the reserve unchecked); modes 0 rnn_relu 1 rnn_tanh 2 lstm 3 gru
local function rnn_case(label, mode, L, bidir, T, N, I, H)
  local D, G = bidir and 2 or 1, ({1, 1, 4, 3})[mode + 1]
  local P = 0
  for l = 0, L - 1 do P = P + D * G * H * ((l == 0 and I or D * H) + H + 2) end
  return {label, inputs = function()
    local xs = {randn({T, N, I}), rand({P}, -0.8, 0.8), randn({L * D, N, H})}
    if mode == 2 then xs[4] = randn({L * D, N, H}) end
    return xs
  end, f = function(...)
    local o = raw("rnn", {...}, {RNN_MODE = mode, RNN_LAYERS = L, RNN_BIDIR = bidir and 1 or 0, RNN_HIDDEN = H}, nil, 4)
    if mode == 2 then return {o[1], o[2], o[3]} end
    return {o[1], o[2]}
  end}
end
cases.rnn = {
  rnn_case("relu, 2 layers", 0, 2, false, 3, 2, 3, 2),
  rnn_case("tanh, bidirectional", 1, 1, true, 3, 2, 3, 2),
  rnn_case("lstm, 2 layers, bidirectional", 2, 2, true, 3, 2, 3, 2),
  rnn_case("gru, 2 layers, bidirectional", 3, 2, true, 3, 2, 2, 3),
  rnn_case("lstm, one step, batch 1", 2, 1, false, 1, 1, 2, 3),
}


local function as_list(v) if core.is_array(v) then return {v} end return v end

-- Values of a float64 array (any layout) as a double buffer, row-major.
local function host(t)
  local n = t.size
  local buf = ffi.new("double[?]", math.max(n, 1))
  core.check(C.luon_tensor_to_host(t.t, buf, core.FLOAT64, ffi.sizeof(buf)))
  return buf, n
end

local function loss(outs, Rs)
  local s = 0
  for k, o in ipairs(outs) do
    local ov, n = host(o)
    local rv = host(Rs[k])
    for j = 0, n - 1 do s = s + ov[j] * rv[j] end
  end
  return s
end

-- f's first output against case.want: equal, both NaN, or within 1e-15
local function check_values(name, case, out)
  local v, n = host(out)
  assert(n == #case.want, ("%s (%s): %d values, want %d"):format(name, case[1], n, #case.want))
  for j = 0, n - 1 do
    local got, w = v[j], case.want[j + 1]
    if not (got == w or (got ~= got and w ~= w) or math.abs(got - w) <= 1e-15 * math.abs(w)) then
      error(("%s (%s): element %d is %.17g, want %.17g"):format(name, case[1], j, got, w), 0)
    end
  end
end

local function run_case(name, case)
  local xs = case.inputs()
  local check = case.check
  if not check then
    check = {}
    for k = 1, #xs do check[k] = k end
  end
  for _, k in ipairs(check) do
    assert(xs[k].dtype == "float64" and core.info_of(xs[k]).contiguous == 1, "inputs must be contiguous float64")
    xs[k]:attach_grad()
  end
  local outs = autograd.record(function() return as_list(case.f(unpack(xs))) end)
  if case.want then check_values(name, case, outs[1]) end
  if #check == 0 then return end -- a case of values only
  local Rs = {}
  for k, o in ipairs(outs) do Rs[k] = randn(o.shape) end
  autograd.backward(outs, Rs)
  local tol = case.tol or 1e-6
  for _, k in ipairs(check) do
    local x = xs[k]
    local g = x.grad
    assert(g, ("%s (%s): input %d has no gradient"):format(name, case[1], k))
    local gv = host(g)
    local p = ffi.cast("double*", core.info_of(x).data)
    for j = 0, x.size - 1 do
      local v = p[j]
      p[j] = v + EPS
      local lp = loss(as_list(case.f(unpack(xs))), Rs)
      p[j] = v - EPS
      local lm = loss(as_list(case.f(unpack(xs))), Rs)
      p[j] = v
      local num, ana = (lp - lm) / (2 * EPS), gv[j]
      if not (math.abs(num - ana) <= tol * math.max(1, math.abs(num), math.abs(ana))) then
        error(("%s (%s): d/d input %d element %d: backward %.10g, finite differences %.10g")
              :format(name, case[1], k, j, ana, num), 0)
      end
    end
  end
end

describe("gradient check", function()
  it("covers every op the registry says has a gradient, and only those", function()
    local problems = {}
    for id = 0, C.luon_op_count() - 1 do
      local name = ffi.string(C.luon_op_name(id))
      local has = core.op_info[name].grad
      assert.equal(C.luon_op_has_grad(id) == 1, has, name)
      if has and not cases[name] then
        problems[#problems + 1] = name .. " has a backward rule (GRAD in core/luon_ops.def) but no gradient-check case"
      elseif not has and cases[name] then
        problems[#problems + 1] = name .. " has gradient-check cases but no backward rule (NOGRAD)"
      end
    end
    for name in pairs(cases) do
      if not core.op_ids[name] then problems[#problems + 1] = "case for unknown op " .. name end
    end
    assert(#problems == 0, table.concat(problems, "\n"))
  end)

  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    for _, case in ipairs(cases[name]) do
      it(name .. ": " .. case[1], function() run_case(name, case) end)
    end
  end
end)
