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
binary_cases("arctan2")
binary_cases("hypot")
binary_cases("fmod", 0.5, 2)
binary_cases("mod", 0.5, 2)
binary_cases("copysign")
table.insert(cases.mod, {"negative operands", inputs = function() return {rand({2, 3}, -2, -0.5), rand({3}, 0.5, 2)} end,
  f = np.mod})
table.insert(cases.fmod, {"negative operands", inputs = function() return {rand({2, 3}, -2, -0.5), rand({3}, 0.5, 2)} end,
  f = np.fmod})
local function values2(name, label, x, y, want)
  table.insert(cases[name], {label, check = {}, f = np[name], want = want,
    inputs = function() return {A(x), A(y)} end})
end
local inf2, nan2 = 1 / 0, 0 / 0
values2("arctan2", "signed zeros and infinities", {0, -0.0, 0, -0.0, 1, -1, inf2, nan2},
  {0, 0, -0.0, -0.0, -inf2, -inf2, inf2, 1}, {0, -0.0, math.pi, -math.pi, math.pi, -math.pi, math.pi / 4, nan2})
values2("hypot", "inf beats NaN", {inf2, nan2, 3, -3}, {nan2, -inf2, 4, 4}, {inf2, inf2, 5, 5})
values2("fmod", "sign of x; by 0 NaN", {5, -5, 5, -5, inf2, 1}, {3, 3, -3, -3, 3, 0}, {2, -2, 2, -2, nan2, nan2})
values2("mod", "sign of y; by 0 zero (MXNet's)", {5, -5, 5, -5, inf2, 1, -1}, {3, 3, -3, -3, 3, 0, inf2},
  {2, 1, -1, -2, nan2, 0, inf2})
values2("copysign", "MXNet's: -0 counts as positive", {3, -3, 0, -0.0, nan2}, {-1, 1, -0.0, 2, 1}, {-3, 3, 0, -0.0, nan2})
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
-- np's elementwise math, on the domains where each is smooth
unary_cases("sin", np.sin)
unary_cases("cos", np.cos)
unary_cases("tan", np.tan, -1.2, 1.2)
unary_cases("arcsin", np.arcsin, -0.9, 0.9)
unary_cases("arccos", np.arccos, -0.9, 0.9)
unary_cases("arctan", np.arctan)
unary_cases("sinh", np.sinh)
unary_cases("cosh", np.cosh)
unary_cases("arcsinh", np.arcsinh)
unary_cases("arccosh", np.arccosh, 1.2, 3)
unary_cases("arctanh", np.arctanh, -0.9, 0.9)
unary_cases("log10", np.log10, 0.5, 3)
unary_cases("log1p", np.log1p, -0.5, 2)
unary_cases("expm1", np.expm1)
unary_cases("cbrt", np.cbrt, 0.5, 3)
unary_cases("deg2rad", np.deg2rad)
unary_cases("rad2deg", np.rad2deg)
unary_cases("reciprocal", np.reciprocal, 0.5, 2)
-- the rounding ops: zero gradient (finite differences away from the steps)
unary_cases("floor", np.floor)
unary_cases("ceil", np.ceil)
unary_cases("trunc", np.trunc)
unary_cases("rint", np.rint)
unary_cases("round", np.round)
table.insert(cases.round, {"2 decimals", inputs = function() return {randn({2, 3})} end,
  f = function(x) return np.round(x, 2) end})
local inf, nan = 1 / 0, 0 / 0
local halves = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, -0.0, 3, inf, -inf, nan}
local function values_case(name, label, xs, f, want)
  table.insert(cases[name], {label, check = {}, f = f, want = want,
    inputs = function() local r = {} for k, v in ipairs(xs) do r[k] = A(v) end return r end})
end
values_case("floor", "halves, -0, inf, NaN", {halves}, np.floor, {0, 1, 2, -1, -2, -3, 0, -0.0, 3, inf, -inf, nan})
values_case("ceil", "halves, -0, inf, NaN", {halves}, np.ceil, {1, 2, 3, -0.0, -1, -2, 1, -0.0, 3, inf, -inf, nan})
values_case("trunc", "halves, -0, inf, NaN", {halves}, np.trunc, {0, 1, 2, -0.0, -1, -2, 0, -0.0, 3, inf, -inf, nan})
values_case("round", "halves to even", {halves}, np.round, {0, 2, 2, -0.0, -2, -2, 0, -0.0, 3, inf, -inf, nan})
values_case("round", "decimals -1: tens, halves to even", {{0.25, 0.35, -0.25, 15, 25, -15, 1234}},
  function(x) return np.round(x, -1) end, {0, 0, -0.0, 20, 20, -20, 1230})
-- MXNet's rint: ties go down, to the floor (NumPy's goes to even)
values_case("rint", "MXNet's: halves toward -inf", {halves}, np.rint, {0, 1, 2, -1, -2, -3, 0, -0.0, 3, inf, -inf, nan})
values_case("reciprocal", "0, -0, inf", {{0, -0.0, inf, -inf, 4, nan}}, np.reciprocal, {inf, -inf, 0, -0.0, 0.25, nan})
values_case("arcsin", "outside [-1, 1]: NaN", {{1, -1, 0, 2, -2, nan}}, np.arcsin,
  {math.pi / 2, -math.pi / 2, 0, nan, nan, nan})
values_case("arccosh", "below 1: NaN", {{1, 0.5, inf}}, np.arccosh, {0, nan, inf})
values_case("arctanh", "+-1: +-inf, beyond NaN", {{1, -1, 0, 2}}, np.arctanh, {inf, -inf, 0, nan})
values_case("log10", "0, negatives, powers of ten", {{0, -1, 1000, 0.01, inf}}, np.log10, {-inf, nan, 3, -2, inf})
values_case("log1p", "-1, below -1", {{-1, -2, 0, inf}}, np.log1p, {-inf, nan, 0, inf})
values_case("expm1", "+-inf", {{-inf, inf, 0}}, np.expm1, {-1, inf, 0})
values_case("cbrt", "negatives, inf", {{-8, 27, -inf, -0.0}}, np.cbrt, {-2, 3, -inf, -0.0})
values_case("tan", "0, -0", {{0, -0.0}}, np.tan, {0, -0.0})
values_case("sinh", "+-inf", {{inf, -inf}}, np.sinh, {inf, -inf})
values_case("cosh", "+-inf", {{inf, -inf}}, np.cosh, {inf, inf})
unary_cases("square", np.square)
unary_cases("tanh", np.tanh)
unary_cases("sigmoid", npx.sigmoid)
unary_cases("relu", npx.relu)
unary_cases("softrelu", function(x) return raw("softrelu", {x}) end)
unary_cases("leaky_relu", function(x) return raw("leaky_relu", {x}, nil, {LEAKY_SLOPE = 0.1}) end)
unary_cases("elu", function(x) return raw("elu", {x}, nil, {LEAKY_SLOPE = 0.7}) end)
unary_cases("selu", function(x) return raw("selu", {x}) end)
unary_cases("gelu", function(x) return raw("gelu", {x}) end)
-- the activations' gradient ops, (x or y, dy): differentiable for second
-- derivatives (autograd.grad with create_graph)
local function act_grad_case(name, first, floats)
  cases[name] = {{"(" .. (first == randn and "x" or "y") .. ", dy)",
    inputs = function() return {first == randn and randn({3, 4}) or rand({3, 4}, first[1], first[2]), randn({3, 4})} end,
    f = function(a, dy) return raw(name, {a, dy}, nil, floats) end}}
end
act_grad_case("relu_grad", randn)
act_grad_case("leaky_relu_grad", randn, {LEAKY_SLOPE = 0.1})
act_grad_case("softrelu_grad", randn)
act_grad_case("sigmoid_grad", {0.05, 0.95})
act_grad_case("tanh_grad", {-0.95, 0.95})
table.insert(cases.gelu, {"MXNet's values (erf form)", check = {},
  inputs = function() return {A({-2, -0.5, 0, 0.5, 2})} end, f = function(x) return raw("gelu", {x}) end,
  want = {-0.04550026389635842, -0.15426876936299344, 0, 0.34573123063700656, 1.9544997361036416}})
table.insert(cases.selu, {"MXNet's values", check = {},
  inputs = function() return {A({-2, 0, 0.5})} end, f = function(x) return raw("selu", {x}) end,
  want = {-1.520166468595695, 0, 0.5253504936777402}})
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
cases.copyto = {
  {"to cpu(1) and back, of a transpose", inputs = function() return {randn({2, 3})} end,
   f = function(x) return (T(x):as_in_context(npx.cpu(1)) * 2):as_in_context(x.device) end},
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
-- np.pad's 'maximum' and 'minimum' are max / min, broadcast and concatenate
table.insert(cases.max, {"np.pad maximum, the corners from the padded rows",
  inputs = function() return {randn({2, 3})} end, f = function(x) return np.pad(x, {{1, 2}, {2, 1}}, "maximum") end})
table.insert(cases.min, {"np.pad minimum of a transpose, one axis unpadded",
  inputs = function() return {randn({3, 2})} end, f = function(x) return np.pad(T(x), {{0, 0}, {1, 2}}, "minimum") end})
reduce_cases("prod", function(s) return rand(s, 0.5, 1.5) end)
table.insert(cases.prod, {"rows with no, one and two zeros",
  inputs = function() return {A({{1.5, 2, 0.5}, {0, 2, 3}, {0, 1.5, 0}})} end,
  f = function(x) return np.prod(x, 1) end})
cases.cumsum = {
  {"flattened", inputs = function() return {randn({2, 3})} end, f = function(x) return np.cumsum(x) end},
  {"axis 0 of a transpose", inputs = function() return {randn({4, 3})} end, f = function(x) return np.cumsum(T(x), 0) end},
  {"axis -1, float64 of float64", inputs = function() return {randn({2, 3, 4})} end,
   f = function(x) return np.cumsum(x, -1, {dtype = "float64"}) end},
  {"NumPy's values along axis 1", check = {},
   inputs = function() return {A({{1, 2, 3}, {4, 5, 7}})} end, f = function(x) return np.cumsum(x, 1) end,
   want = {1, 3, 6, 4, 9, 16}},
}
cases.cumprod = {
  {"flattened", inputs = function() return {rand({2, 3}, 0.5, 1.5)} end, f = function(x) return np.cumprod(x) end},
  {"axis 1 of a transpose", inputs = function() return {randn({4, 3})} end, f = function(x) return np.cumprod(T(x), 1) end},
  {"lanes with no, one and two zeros", inputs = function() return {A({{1.5, 2, 0.5, 3}, {2, 0, 3, 1.5}, {0, 1.5, 0, 2}})} end,
   f = function(x) return np.cumprod(x, 1) end},
  {"a zero first and last, axis 0", inputs = function() return {A({{0, 2}, {1.5, 3}, {2, 0}})} end,
   f = function(x) return np.cumprod(x, 0) end},
  {"NumPy's values", check = {}, inputs = function() return {A({1, 2, 3, 0, 5})} end, f = function(x) return np.cumprod(x) end,
   want = {1, 2, 6, 0, 0}},
}

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
  -- the products made of matmul (lua/luon/np_linalg.lua)
  {"np.dot (2,3,4) with (2,4,3)", inputs = function() return {randn({2, 3, 4}), randn({2, 4, 3})} end, f = np.dot},
  {"np.tensordot over a pair of axes", inputs = function() return {randn({2, 3, 4}), randn({4, 3, 2})} end,
   f = function(a, b) return np.tensordot(a, b, {{1, 2}, {1, 0}}) end},
  {"np.inner, np.outer, np.vdot", inputs = function() return {randn({2, 3}), randn({4, 3})} end,
   f = function(a, b) return {np.inner(a, b), np.outer(a, b), np.vdot(a, T(b):slice(true, {0, 2}))} end},
  {"npx.batch_dot transposed", inputs = function() return {randn({2, 4, 3}), randn({2, 2, 4})} end,
   f = function(a, b) return npx.batch_dot(a, b, {transpose_a = true, transpose_b = true}) end},
  {"np.einsum with a diagonal, a sum and a batch", inputs = function() return {randn({2, 3, 3}), randn({2, 3, 4})} end,
   f = function(a, b) return np.einsum("bii,bij->bj", a, b) end},
  {"np.einsum with an ellipsis and a broadcast batch", inputs = function() return {randn({2, 1, 2, 3}), randn({3, 3, 2})} end,
   f = function(a, b) return np.einsum("...ij,...jk->...ik", a, b) end},
  {"np.einsum of one operand: a trace per row", inputs = function() return {randn({2, 3, 3})} end,
   f = function(a) return np.einsum("ijj->i", a) end},
  {"np.einsum of three operands with an ellipsis, a diagonal and a label of the first and last",
   inputs = function() return {randn({2, 2, 3}), randn({3, 3, 4}), randn({4, 2})} end,
   f = function(a, b, c) return np.einsum("...ij,jjk,ki->...i", a, b, c) end},
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
   f = function(x) return np.take(x, I({-1, 7, 4, 4}), {mode = "clip"}) end},
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

-- layout (core/ops/layout.c), and the compositions of np/npx under the ops
-- they are made of (their gradients are those ops')
local function padded(width, mode, kw) return function(x) return np.pad(x, width, mode, kw) end end
cases.pad = {
  {"constant, uneven widths", inputs = function() return {randn({2, 3})} end,
   f = padded({{1, 2}, {0, 1}}, "constant", {constant_values = 0.5})},
  {"edge, widths past the axis", inputs = function() return {randn({2, 3})} end, f = padded({{1, 3}, {4, 2}}, "edge")},
  {"reflect, widths past the axis, of a transpose", inputs = function() return {randn({3, 2})} end,
   f = function(x) return np.pad(T(x), {{3, 1}, {2, 5}}, "reflect") end},
  {"symmetric (2,3,2), one axis unpadded", inputs = function() return {randn({2, 3, 2})} end,
   f = padded({{1, 0}, {0, 0}, {3, 2}}, "symmetric")},
  {"reflect on a size-1 axis", inputs = function() return {randn({1, 3})} end, f = padded({{2, 1}, {1, 1}}, "reflect")},
}
cases.diag = {
  {"1-d, k = 1", inputs = function() return {randn({3})} end, f = function(x) return np.diag(x, 1) end},
  {"1-d, k = -2", inputs = function() return {randn({2})} end, f = function(x) return np.diag(x, -2) end},
  {"2-d (3,4), k = 1", inputs = function() return {randn({3, 4})} end, f = function(x) return np.diag(x, 1) end},
  {"2-d transposed, k = -1", inputs = function() return {randn({4, 3})} end, f = function(x) return np.diag(T(x), -1) end},
}
cases.tril = {
  {"(3,4), k = 0", inputs = function() return {randn({3, 4})} end, f = function(x) return np.tril(x) end},
  {"(2,3,3) transposed, k = -1", inputs = function() return {randn({3, 3, 2})} end,
   f = function(x) return np.tril(T(x), -1) end},
  {"1-d, k = 1", inputs = function() return {randn({3})} end, f = function(x) return np.tril(x, 1) end},
}
cases.triu = {
  {"(3,4), k = 1", inputs = function() return {randn({3, 4})} end, f = function(x) return np.triu(x, 1) end},
  {"1-d, k = -1", inputs = function() return {randn({3})} end, f = function(x) return np.triu(x, -1) end},
}
cases.sequence_mask = {
  {"axis 0, value -1", inputs = function() return {randn({4, 2, 3})} end,
   f = function(x) return npx.sequence_mask(x, A({1, 3}), {use_sequence_length = true, value = -1}) end},
  {"axis 1 of a transpose, int64 lengths", inputs = function() return {randn({3, 2})} end,
   f = function(x) return npx.sequence_mask(T(x), I({0, 2}), {use_sequence_length = true, axis = 1}) end},
}
table.insert(cases.broadcast_to, {"np.tile (reshape, broadcast_to, reshape per axis)",
  inputs = function() return {randn({2, 3})} end, f = function(x) return np.tile(x, {2, 1, 3}) end})
table.insert(cases.broadcast_to, {"np.repeat by an integer, axis 1 of a transpose",
  inputs = function() return {randn({3, 2})} end, f = function(x) return np["repeat"](T(x), 2, 1) end})
table.insert(cases.broadcast_to, {"np.meshgrid, xy",
  inputs = function() return {randn({3}), randn({2})} end, f = function(a, b) return {np.meshgrid(a, b)} end})
table.insert(cases.take, {"np.repeat with a count per element (take of repeated indices)",
  inputs = function() return {randn({3, 2})} end, f = function(x) return np.repeat_interleave(x, {2, 0, 1}, 0) end})
table.insert(cases.slice, {"np.flip, axes 0 and 2 (a view)",
  inputs = function() return {randn({2, 3, 2})} end, f = function(x) return np.flip(x, {0, 2}) end})
table.insert(cases.concatenate, {"np.roll along two axes (slices joined)",
  inputs = function() return {randn({3, 4})} end, f = function(x) return np.roll(x, {1, -3}, {0, 1}) end})
table.insert(cases.reshape, {"npx.reshape with -6, -1 and -4",
  inputs = function() return {randn({6, 2, 2})} end, f = function(x) return npx.reshape(x, {-6, 2, -1, -4}) end})

-- Neural-network ops through the registry (attrs as in core/luon_ops.def).
cases.linear = {
  {"x @ w^T + b", inputs = function() return {randn({3, 4}), randn({5, 4}), randn({5})} end,
   f = function(x, w, b) return raw("linear", {x, w, b}) end},
  {"relu(x @ w^T), a transposed x", inputs = function() return {randn({4, 3}), randn({2, 4})} end,
   f = function(x, w) return raw("linear", {np.transpose(x), w}, {LINEAR_RELU = 1}) end},
}
cases.conv2d = {
  {"stride 1 pad 1 with bias", inputs = function() return {randn({2, 3, 5, 5}), randn({4, 3, 3, 3}), randn({4})} end,
   f = function(x, w, b) return raw("conv2d", {x, w, b}, conv({1, 1}, {1, 1}, {1, 1}, 1)) end},
  {"stride 2, dilation 2, groups 2, no bias", inputs = function() return {randn({1, 4, 7, 6}), randn({2, 2, 2, 2})} end,
   f = function(x, w) return raw("conv2d", {x, w}, conv({2, 1}, {0, 1}, {2, 2}, 2)) end},
}
-- the transposed convolution (npx.deconvolution): dy (N,O,OH,OW), w -> dx of the input's H, W
local function with(t, extra)
  for k, v in pairs(extra) do t[k] = v end
  return t
end
cases.conv2d_grad_input = {
  {"stride 2, pad 1, output 6x5", inputs = function() return {randn({2, 3, 3, 3}), randn({3, 2, 3, 3})} end,
   f = function(dy, w)
     return raw("conv2d_grad_input", {dy, w}, with(conv({2, 2}, {1, 1}, {1, 1}, 1), {CONV2D_GRAD_INPUT_H = 6,
                                                                                    CONV2D_GRAD_INPUT_W = 5}))
   end},
  {"groups 2, dilation (1, 2), stride (1, 2), transposed dy", inputs = function() return {randn({1, 4, 5, 3}), randn({4, 1, 2, 2})} end,
   f = function(dy, w)
     return raw("conv2d_grad_input", {np.transpose(dy, {0, 1, 3, 2}), w},
                with(conv({1, 2}, {0, 0}, {1, 2}, 2), {CONV2D_GRAD_INPUT_H = 4, CONV2D_GRAD_INPUT_W = 12}))
   end},
}
-- the weight gradient, x (N,C,H,W), dy (N,O,OH,OW) -> dw of the kernel's KH, KW (second derivatives of conv2d)
cases.conv2d_grad_weight = {
  {"stride 2, pad 1, kernel 3x3", inputs = function() return {randn({2, 3, 6, 5}), randn({2, 4, 3, 3})} end,
   f = function(x, dy)
     return raw("conv2d_grad_weight", {x, dy}, with(conv({2, 2}, {1, 1}, {1, 1}, 1), {CONV2D_GRAD_WEIGHT_KH = 3,
                                                                                     CONV2D_GRAD_WEIGHT_KW = 3}))
   end},
  {"groups 2, dilation (1, 2), stride (1, 2), transposed x", inputs = function() return {randn({1, 4, 12, 4}), randn({1, 4, 3, 5})} end,
   f = function(x, dy)
     return raw("conv2d_grad_weight", {np.transpose(x, {0, 1, 3, 2}), dy},
                with(conv({1, 2}, {0, 0}, {1, 2}, 2), {CONV2D_GRAD_WEIGHT_KH = 2, CONV2D_GRAD_WEIGHT_KW = 2}))
   end},
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
-- conv3d's slots: stride, pad, dilation {d, h, w}, groups (nil: left out), then extra named slots
local function conv3(s, p, d, groups, extra)
  local t = {CONV3D_STRIDE_D = s[1], CONV3D_STRIDE_H = s[2], CONV3D_STRIDE_W = s[3], CONV3D_PAD_D = p[1],
             CONV3D_PAD_H = p[2], CONV3D_PAD_W = p[3], CONV3D_DILATE_D = d[1], CONV3D_DILATE_H = d[2],
             CONV3D_DILATE_W = d[3], CONV3D_GROUPS = groups}
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end
cases.conv3d = {
  {"stride 1 pad 1 with bias", inputs = function() return {randn({2, 2, 3, 4, 3}), randn({3, 2, 2, 3, 2}), randn({3})} end,
   f = function(x, w, b) return raw("conv3d", {x, w, b}, conv3({1, 1, 1}, {1, 1, 0}, {1, 1, 1}, 1)) end},
  {"stride (2,1,2), dilation (1,2,1), groups 2, no bias, transposed x",
   inputs = function() return {randn({1, 4, 5, 4, 5}), randn({2, 2, 2, 2, 2})} end,
   f = function(x, w) return raw("conv3d", {np.transpose(x, {0, 1, 2, 4, 3}), w}, conv3({2, 1, 2}, {0, 1, 1}, {1, 2, 1}, 2)) end},
}
cases.conv3d_grad_input = {
  {"stride 2, pad (1,0,1), output (5,5,5) (the 3-d transposed convolution)",
   inputs = function() return {randn({1, 2, 3, 2, 3}), randn({2, 3, 2, 3, 2})} end,
   f = function(dy, w)
     return raw("conv3d_grad_input", {dy, w}, conv3({2, 2, 2}, {1, 0, 1}, {1, 1, 1}, 1,
                {CONV3D_GRAD_INPUT_D = 5, CONV3D_GRAD_INPUT_H = 5, CONV3D_GRAD_INPUT_W = 5}))
   end},
  {"groups 2, dilation 2", inputs = function() return {randn({2, 4, 2, 2, 3}), randn({4, 1, 2, 1, 2})} end,
   f = function(dy, w)
     return raw("conv3d_grad_input", {dy, w}, conv3({1, 1, 1}, {0, 0, 0}, {2, 2, 2}, 2,
                {CONV3D_GRAD_INPUT_D = 4, CONV3D_GRAD_INPUT_H = 2, CONV3D_GRAD_INPUT_W = 5}))
   end},
}
-- 3-d pooling's slots: kernel, stride, pad {d, h, w}, ceil_mode, global, count_include_pad (nil: left out)
local function pool3(k, s, p, ceil, global, count_pad)
  return {POOL3D_KERNEL_D = k[1], POOL3D_KERNEL_H = k[2], POOL3D_KERNEL_W = k[3], POOL3D_STRIDE_D = s and s[1],
          POOL3D_STRIDE_H = s and s[2], POOL3D_STRIDE_W = s and s[3], POOL3D_PAD_D = p and p[1],
          POOL3D_PAD_H = p and p[2], POOL3D_PAD_W = p and p[3], POOL3D_CEIL = ceil, POOL3D_GLOBAL = global,
          POOL3D_COUNT_PAD = count_pad}
end
cases.max_pool3d = {
  {"2x2x2 stride 2", inputs = function() return {randn({2, 2, 4, 4, 2})} end,
   f = function(x) return raw("max_pool3d", {x}, pool3({2, 2, 2})) end},
  {"(3,2,3) stride (2,1,2) pad (1,0,1), ceil mode, transposed x", inputs = function() return {randn({1, 2, 5, 4, 3})} end,
   f = function(x) return raw("max_pool3d", {np.transpose(x, {0, 1, 2, 4, 3})}, pool3({3, 2, 3}, {2, 1, 2}, {1, 0, 1}, 1)) end},
}
cases.avg_pool3d = {
  {"2x2x2 stride 1", inputs = function() return {randn({1, 2, 3, 3, 4})} end,
   f = function(x) return raw("avg_pool3d", {x}, pool3({2, 2, 2}, {1, 1, 1})) end},
  {"3x3x3 stride 2 pad 1, padding not counted, ceil", inputs = function() return {randn({1, 2, 4, 5, 5})} end,
   f = function(x) return raw("avg_pool3d", {x}, pool3({3, 3, 3}, {2, 2, 2}, {1, 1, 1}, 1, 0, 0)) end},
  {"global", inputs = function() return {randn({2, 3, 2, 3, 2})} end,
   f = function(x) return raw("avg_pool3d", {x}, pool3({1, 1, 1}, {1, 1, 1}, {0, 0, 0}, 0, 1)) end},
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
-- layer_norm / group_norm: x, gamma, beta -> y (mean and invstd unchecked)
local function ln(axis, eps)
  return function(x, gamma, beta) return raw("layer_norm", {x, gamma, beta}, {LN_AXIS = axis}, {LN_EPS = eps}, 3)[1] end
end
local function gn(groups, eps)
  return function(x, gamma, beta)
    return raw("group_norm", {x, gamma, beta}, {GN_GROUPS = groups}, {GN_EPS = eps}, 3)[1]
  end
end
cases.layer_norm = {
  {"last axis", inputs = function() return {randn({3, 5}), rand({5}, 0.5, 1.5), randn({5})} end, f = ln(-1, 1e-5)},
  {"middle axis", inputs = function() return {randn({2, 4, 3}), rand({4}, 0.5, 1.5), randn({4})} end, f = ln(1, 1e-5)},
  {"transposed x, axis 0", inputs = function() return {randn({3, 4}), rand({4}, 0.5, 1.5), randn({4})} end,
   f = function(x, g, b) return ln(0, 1e-3)(T(x), g, b) end},
  {"values: (x - mean) / sqrt(var + eps) * gamma + beta", check = {},
   inputs = function() return {A({{1, 2, 3}, {-1, 0, 5}}), A({1, 2, 0.5}), A({0, 1, -1})} end, f = ln(-1, 0),
   want = {-1.224744871391589, 1, -0.38762756430420553, -0.8890008890013334, -0.016001016001524038,
           -0.3014993014989522}},
}
cases.group_norm = {
  {"2 groups of 2 channels", inputs = function() return {randn({2, 4, 3}), rand({2}, 0.5, 1.5), randn({2})} end,
   f = gn(2, 1e-5)},
  {"one channel per group (instance norm), 4-d",
   inputs = function() return {randn({2, 3, 2, 2}), rand({3}, 0.5, 1.5), randn({3})} end, f = gn(3, 1e-3)},
  {"one group, transposed x", inputs = function() return {randn({3, 4, 2}), rand({1}, 0.5, 1.5), randn({1})} end,
   f = function(x, g, b) return gn(1, 1e-5)(np.transpose(x, {2, 1, 0}), g, b) end},
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
-- sort (np.sort, npx.topk's values): the gradient goes back to where each
-- value came from; distinct values, so no tie moves under the differences
cases.sort = {
  {"last axis", inputs = function() return {randn({3, 5})} end, f = function(x) return np.sort(x) end},
  {"axis 0 of a transposed array, descending", inputs = function() return {randn({4, 3})} end,
   f = function(x) return np.sort(T(x), 0, {descending = true}) end},
  {"flattened", inputs = function() return {randn({2, 3})} end, f = function(x) return np.sort(x, false) end},
  {"topk's two largest values", inputs = function() return {randn({4, 6})} end,
   f = function(x) return npx.topk(x, {k = 2, ret_typ = "value"}) end},
  {"topk's smallest along axis 0", inputs = function() return {randn({5, 3})} end,
   f = function(x) return npx.topk(x, {k = 1, axis = 0, ret_typ = "value", is_ascend = true}) end},
}
cases.pick = {
  {"last axis", inputs = function() return {randn({3, 4})} end,
   f = function(x) return raw("pick", {x, I({3, 0, 3})}, {PICK_AXIS = -1, PICK_KEEPDIMS = 0, PICK_MODE = 0}) end},
  {"axis 0, keepdims, wrap", inputs = function() return {randn({3, 4})} end,
   f = function(x) return raw("pick", {x, I({0, 5, -1, 2})}, {PICK_AXIS = 0, PICK_KEEPDIMS = 1, PICK_MODE = 1}) end},
}

-- np functions written with registry ops (np.lua): their gradients come
-- from their ops' rules, checked the same way, by function name.
local np_cases = {}
local function stat_cases(name)
  local f = np[name]
  np_cases[name] = {
    {"all axes", inputs = function() return {randn({2, 3, 4})} end, f = function(x) return f(x) end},
    {"axis 1, ddof 1", inputs = function() return {randn({2, 3, 4})} end, f = function(x) return f(x, 1, {ddof = 1}) end},
    {"axes {0, 2}, keepdims, of a transpose", inputs = function() return {randn({4, 3, 2})} end,
     f = function(x) return f(x:transpose(), {0, 2}, {keepdims = true}) end},
  }
end
stat_cases("var")
stat_cases("std")
table.insert(np_cases.std, {"a constant row has gradient 0, not NaN",
  inputs = function() return {A({{2, 2, 2}, {1, 2, 4}})} end, f = function(x) return np.std(x, 1) end})
local nan = 0 / 0
np_cases.nansum = {{"NaN left out, axis 1", check = {},
  inputs = function() return {A({{1, nan, 3}, {nan, nan, 2}})} end, f = function(x) return np.nansum(x, 1) end,
  want = {4, 2}}}
np_cases.nanprod = {{"NaN left out, axis 0", check = {},
  inputs = function() return {A({{1.5, nan, 3}, {2, nan, nan}})} end, f = function(x) return np.nanprod(x, 0) end,
  want = {3, 1, 3}}}
np_cases.nanmean = {{"NaN left out, all NaN is NaN", check = {},
  inputs = function() return {A({{1, nan, 3}, {nan, nan, nan}})} end, f = function(x) return np.nanmean(x, 1) end,
  want = {2, nan}}}
for _, name in ipairs({"nansum", "nanprod", "nanmean"}) do
  local f = np[name]
  table.insert(np_cases[name], {"axis 1 of (3,4)", inputs = function() return {rand({3, 4}, 0.5, 1.5)} end,
    f = function(x) return f(x, 1) end})
  table.insert(np_cases[name], {"with NaNs (their gradient 0), all axes", inputs = function()
    return {A({{1.5, nan, 0.75}, {nan, 1.25, 2}})} end, f = function(x) return f(x) end})
end
np_cases.average = {
  {"no weights", inputs = function() return {randn({2, 3})} end, f = function(x) return np.average(x) end},
  {"1-d weights along axis 1", inputs = function() return {randn({2, 3}), rand({3}, 0.5, 2)} end,
   f = function(x, w) return np.average(x, 1, w) end},
  {"weights of a's shape, returned", inputs = function() return {randn({2, 3}), rand({2, 3}, 0.5, 2)} end,
   f = function(x, w) return {np.average(x, 0, w, true)} end},
}
local norm = np.linalg.norm
np_cases["linalg.norm"] = {
  {"flattened 2-norm of (2,3,2)", inputs = function() return {randn({2, 3, 2})} end, f = function(x) return norm(x) end},
  {"2-norm of zeros has gradient 0", inputs = function() return {A({0, 0, 0})} end, f = function(x) return norm(x) end},
  {"ord 1, axis 1", inputs = function() return {randn({2, 3})} end, f = function(x) return norm(x, 1, 1) end},
  {"ord inf and -inf of a vector", inputs = function() return {A({0.5, -3, 2})} end,
   f = function(x) return {norm(x, 1 / 0), norm(x, -1 / 0)} end},
  {"ord 3 and 0.5, keepdims", inputs = function() return {rand({2, 3}, 0.5, 2)} end,
   f = function(x) return {norm(x, 3, -1, true), norm(x, 0.5, 0)} end},
  {"matrix fro, 1, -1, inf, -inf", inputs = function() return {A({{1, -2.5, 3}, {4, 5, -7.5}})} end,
   f = function(x) return {norm(x, "fro"), norm(x, 1), norm(x, -1), norm(x, 1 / 0), norm(x, -1 / 0)} end},
  {"matrices over axes {2, 0} of (3,2,4), keepdims", inputs = function() return {randn({3, 2, 4})} end,
   f = function(x) return {norm(x, 1, {2, 0}, true), norm(x, nil, {2, 0})} end},
  {"matrix 2, -2 and 'nuc' (singular values)", inputs = function() return {randn({3, 2})} end,
   f = function(x) return {norm(x, 2), norm(x, -2), norm(x, "nuc")} end},
  {"2 and 'nuc' of wide matrices over axes {0, 2} of (2,3,4), keepdims", inputs = function() return {randn({2, 3, 4})} end,
   f = function(x) return {norm(x, 2, {0, 2}), norm(x, "nuc", {2, 0}, true), norm(x, -2, {0, 2})} end},
  {"NumPy's values", check = {}, inputs = function() return {A({{1, -2, 3}, {4, 5, -7}})} end,
   f = function(x)
     return np.stack({norm(x), norm(x, 1), norm(x, -1), norm(x, 1 / 0), norm(x, -1 / 0), norm(x[0], 0)})
   end, want = {10.198039027185569, 10, 5, 16, 6, 3}},
}

-- gluon losses built from np/npx ops (gluon/loss.lua): the gradients with
-- respect to the predictions (and labels where they are real-valued)
local gloss = require("luon.gluon.loss")
local signs = function() return A({{1, -1, -1}, {1, 1, -1}}) end
local loss_cases = {
  HuberLoss = {{"rho 1 and 0.5, sample_weight, away from the kink", inputs = function()
    return {A({{0.2, -2.1, 0.7}, {1.6, -0.3, 3}}), A({{0.5, 0.4, -0.6}, {-0.1, 0.1, 0.8}})} end,
    f = function(x, y) return {gloss.HuberLoss()(x, y), gloss.HuberLoss{rho = 0.5}(x, y, A({{2}, {0.5}}))} end}},
  HingeLoss = {{"margin 1 and 2", check = {1}, inputs = function()
    return {A({{0.3, -2.1, 0.7}, {1.6, -0.35, 3.2}}), signs()} end,
    f = function(x, y) return {gloss.HingeLoss()(x, y), gloss.HingeLoss{margin = 2}(x, y)} end}},
  SquaredHingeLoss = {{"margin 1, weight 3", check = {1}, inputs = function()
    return {A({{0.3, -2.1, 0.7}, {1.6, -0.35, 3.2}}), signs()} end,
    f = function(x, y) return gloss.SquaredHingeLoss{weight = 3}(x, y) end}},
  LogisticLoss = {{"signed and binary", check = {1}, inputs = function()
    return {randn({2, 3}), signs()} end,
    f = function(x, y)
      return {gloss.LogisticLoss()(x, y), gloss.LogisticLoss{label_format = "binary"}(x, (y + 1) / 2)}
    end}},
  KLDivLoss = {{"from log-probabilities and from logits", inputs = function()
    return {randn({2, 3}), rand({2, 3}, 0.1, 0.9)} end,
    f = function(x, y)
      return {gloss.KLDivLoss()(x, y), gloss.KLDivLoss{from_logits = false, axis = 0}(x, y)}
    end}},
  CosineEmbeddingLoss = {{"labels 1, -1, -1, margin -0.9 (every -1 pair active)", check = {1, 2}, inputs = function()
    return {randn({3, 4}), randn({3, 4}), A({1, -1, -1})} end,
    f = function(x, y, l) return gloss.CosineEmbeddingLoss{margin = -0.9}(x, y, l) end}},
  TripletLoss = {{"margin 5 (every sample active)", inputs = function()
    return {randn({2, 3}), randn({2, 3}), randn({2, 3})} end,
    f = function(x, pos, neg) return gloss.TripletLoss{margin = 5}(x, pos, neg) end}},
  PoissonNLLLoss = {{"logits, probabilities, compute_full", check = {1}, inputs = function()
    return {rand({2, 3}, 0.2, 1.5), A({{0, 1, 2}, {3, 0, 4}})} end,
    f = function(x, y)
      return {gloss.PoissonNLLLoss()(x, y), gloss.PoissonNLLLoss{from_logits = false}(x, y),
              gloss.PoissonNLLLoss{compute_full = true}(x, y)}
    end}},
  SigmoidBinaryCrossEntropyLoss = {{"pos_weight, logits and probabilities", check = {1}, inputs = function()
    return {rand({2, 3}, 0.1, 0.9), A({{0, 1, 1}, {1, 0, 0}})} end,
    f = function(x, y)
      local pw = A({{0.5, 2, 3}})
      return {gloss.SigmoidBCELoss()(x, y, nil, pw), gloss.SigmoidBCELoss{from_sigmoid = true}(x, y, nil, pw)}
    end}},
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

-- ctc_loss: data (T, N, C), label (N, L)[, data_lengths, label_lengths] ->
-- the loss (N,) (its gradient output unchecked: it is the backward's)
cases.ctc_loss = {
  {"blank first, padded with 0, repeated labels", check = {1},
   inputs = function() return {randn({5, 3, 4}), A({{1, 2, 0}, {3, 3, 0}, {1, 1, 2}})} end,
   f = function(x, l) return npx.ctc_loss(x, l) end},
  {"blank last, lengths (one at the limit), NTC transposed", check = {1},
   inputs = function() return {randn({3, 5, 4}), A({{0, 2, 1}, {1, -1, -1}, {2, 2, 0}}), A({5, 4, 3}), A({3, 1, 2})} end,
   f = function(x, l, dl, ll)
     return npx.ctc_loss(np.swapaxes(x, 0, 1), l, dl, ll, {use_data_lengths = true, use_label_lengths = true,
                                                           blank_label = "last"})
   end},
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

  local np_names = {}
  for name in pairs(np_cases) do np_names[#np_names + 1] = name end
  table.sort(np_names)
  for _, name in ipairs(np_names) do
    for _, case in ipairs(np_cases[name]) do
      it("np." .. name .. ": " .. case[1], function() run_case("np." .. name, case) end)
    end
  end

  local loss_names = {}
  for name in pairs(loss_cases) do loss_names[#loss_names + 1] = name end
  table.sort(loss_names)
  for _, name in ipairs(loss_names) do
    for _, case in ipairs(loss_cases[name]) do
      it("gluon.loss." .. name .. ": " .. case[1], function() run_case("gluon.loss." .. name, case) end)
    end
  end

  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    for _, case in ipairs(cases[name]) do
      it(name .. ": " .. case[1], function() run_case(name, case) end)
    end
  end
end)
