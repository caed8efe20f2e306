-- luon.np: MXNet's numpy-compatible array API. Thin: every function turns
-- its Lua arguments into registry-op attributes and calls the C core.
-- Positional arguments first (NumPy order), then one table of keywords.
local core = require("luon.core")
local ffi, C = core.ffi, core.C
local call, call1, call2, attrs, kw_of = core.call, core.call1, core.call2, core.attrs, core.kw
local op = core.op_ids
local is_array = core.is_array
-- The registry's attribute slots (core/luon_ops.def), read once here
local S = core.slot
local FULL_SHAPE, FULL_VALUE = S.FULL_SHAPE, S.FULL_VALUE
local ARANGE_START, ARANGE_STOP, ARANGE_STEP = S.ARANGE_START, S.ARANGE_STOP, S.ARANGE_STEP
local LINSPACE_NUM, LINSPACE_ENDPOINT = S.LINSPACE_NUM, S.LINSPACE_ENDPOINT
local LINSPACE_START, LINSPACE_STOP = S.LINSPACE_START, S.LINSPACE_STOP
local EYE_N, EYE_M, EYE_K = S.EYE_N, S.EYE_M, S.EYE_K
local RANDOM_SHAPE, RANDOM_LOW, RANDOM_HIGH = S.RANDOM_SHAPE, S.RANDOM_LOW, S.RANDOM_HIGH
local CLIP_MIN, CLIP_MAX = S.CLIP_MIN, S.CLIP_MAX
local REDUCE_KEEPDIMS, REDUCE_AXES = S.REDUCE_KEEPDIMS, S.REDUCE_AXES
local SCAN_AXIS = S.SCAN_AXIS
local EXPAND_DIMS_AXIS, SQUEEZE_AXES = S.EXPAND_DIMS_AXIS, S.SQUEEZE_AXES
local SPLIT_AXIS, SPLIT_BOUNDS = S.SPLIT_AXIS, S.SPLIT_BOUNDS
local TAKE_AXIS, TAKE_MODE = S.TAKE_AXIS, S.TAKE_MODE
local join_axis = {concatenate = S.CONCAT_AXIS, stack = S.STACK_AXIS}

local np = {}
np.random = {}
-- NumPy's np.save, savez, savez_compressed, load: npx's (serialize.lua)
for name, f in pairs(require("luon.serialize").npx) do np[name] = f end

-- dtype constants: np.float32 == "float32"
for _, name in ipairs({"float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "int16", "uint8",
                       "uint16", "bool"}) do
  np[name] = name
end
np.bool_ = "bool"

local check_array = core.array_arg

-- The options of the creation functions: dtype, device, ctx and those of
-- the list `extra` (a misspelt {devcie = gpu} must not quietly mean the
-- default); of the others, exactly those the function reads: np.sum(x,
-- {axes = 0}) must not quietly sum everything. core.options checks them.
local options = core.options
local base_kw = {"dtype", "device", "ctx"}
-- (the lists are made once: a table literal per call would allocate on
-- every reduction of a training step)
local reduce_keys, arg_reduce_keys = {"axis", "keepdims", "dtype"}, {"axis", "keepdims"}
local axis_keys, take_keys = {"axis"}, {"axis", "mode"}

local function device_attrs(a, kw, fname, extra)
  kw = options(kw, fname, base_kw, extra)
  local dev = core.resolve_device(core.device_of(kw, fname), fname)
  a.dev_type, a.dev_id = dev.type_id, dev.device_id
  a.dtype = core.dtype_id(kw.dtype, fname) or 0
  return a
end

---------------------------------------------------------------------------
-- Creation

-- Shape of a nested Lua table (checked rectangular) and its leaves in order.
local function flatten(obj, fname)
  local shape = {}
  local t = obj
  while type(t) == "table" do
    if #shape == 8 then -- (also ends a table that contains itself)
      core.error(("%s: the nested table is more than 8 levels deep; at most 8 dimensions are supported")
                 :format(fname))
    end
    shape[#shape + 1] = #t
    t = t[1]
  end
  local flat, n = {}, 0
  local kind = nil
  -- the position being walked, as indices; "[2][1]" is built only for an error
  local at = {}
  local function path(depth)
    local p = {}
    for d = 1, depth - 1 do p[d] = "[" .. at[d] .. "]" end
    return table.concat(p)
  end
  local function walk(v, depth)
    if depth > #shape then
      local tv = type(v)
      if tv == "cdata" and is_array(v) then v, tv = v:item(), "number" end
      if tv ~= "number" and tv ~= "boolean" then
        if depth == 1 then
          core.error(("%s: expected a number, a boolean or a nested table of them, got %s")
                     :format(fname, core.show_value(v)))
        end
        core.error(("%s: element %s is a %s, expected a number or boolean"):format(fname, path(depth), tv))
      end
      kind = kind or tv
      n = n + 1
      flat[n] = v
      return
    end
    if type(v) ~= "table" or #v ~= shape[depth] then
      core.error(("%s: ragged nested table: element %s should be a list of %d"):format(
        fname, path(depth), shape[depth]))
    end
    local keys = 0
    for _ in pairs(v) do keys = keys + 1 end
    if keys ~= #v then -- {a = 1}, or {[1] = 1, [3] = 3}: not a list, whose entries would be lost
      core.error(("%s: element %s is a table with %d keys but not a list of %d (keys other than 1..n, or holes)")
                 :format(fname, depth == 1 and "(the whole)" or path(depth), keys, #v))
    end
    for k = 1, #v do
      at[depth] = k
      walk(v[k], depth + 1)
    end
  end
  walk(obj, 1)
  return shape, flat, n, kind
end

function np.array(obj, kw)
  kw = options(kw, "array", base_kw)
  if is_array(obj) then
    local dt = core.dtype_id(kw.dtype, "array")
    local r = obj:copyto(core.resolve_device(core.device_of(kw, "array") or obj.device, "array"))
    if dt and dt ~= core.dtype_id(r.dtype) then r = r:astype(kw.dtype) end
    return r
  end
  local shape, flat, n, kind = flatten(obj, "array")
  local dt = core.dtype_id(kw.dtype, "array") or (kind == "boolean" and core.BOOL or core.FLOAT32)
  local dev = core.resolve_device(core.device_of(kw, "array"), "array")
  if dt == core.FLOAT16 or dt == core.BFLOAT16 then -- storage types: through float32
    return np.array(obj, {dtype = "float32", device = dev}):astype(kw.dtype)
  end
  local buf = ffi.new(core.ctypes[dt] .. "[?]", n > 0 and n or 1)
  for k = 1, n do
    local v = flat[k]
    if v == true then v = 1 elseif v == false then v = 0 end
    buf[k - 1] = v
  end
  local sh = ffi.new("int64_t[8]")
  for k = 1, #shape do sh[k - 1] = shape[k] end
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(buf, dt, #shape, sh, dev.type_id, dev.device_id, out))
  return core.wrap(out[0])
end
np.asarray = np.array

local function full(shape, value, kw, fname)
  shape = core.shape_arg(shape, fname)
  local a = device_attrs(attrs(), kw, fname)
  core.set_ints(a, shape, FULL_SHAPE, fname)
  a.f[FULL_VALUE] = core.num_arg(value, fname, "the fill value")
  return call(op.full, {}, a)
end

-- The arguments of zeros, ones, empty and full in MXNet's order (shape,
-- [fill_value,] dtype, order, ctx), positional or keywords: np.zeros({2, 3},
-- "int32"), np.zeros{shape = {2, 3}, dtype = "int32"}; np.zeros({}) is 0-d.
local function creation_args(fname, names, ...)
  local o
  if select("#", ...) == 1 and type(...) == "table" and next((...)) == nil then
    o = {shape = {}}
  else
    o = core.args(fname, names, names, ...)
  end
  if o.shape == nil then core.error(("%s: shape is required"):format(fname)) end
  if o.order ~= nil and o.order ~= "C" then
    core.error(("%s: order must be 'C' (luon's arrays are row-major), got %s"):format(fname, core.show_value(o.order)))
  end
  return o, {dtype = o.dtype, device = o.device, ctx = o.ctx}
end
local creation_names = {"shape", "dtype", "order", "ctx", "device"}
local full_names = {"shape", "fill_value", "dtype", "order", "ctx", "device"}

function np.zeros(...)
  local o, kw = creation_args("zeros", creation_names, ...)
  return full(o.shape, 0, kw, "zeros")
end
function np.ones(...)
  local o, kw = creation_args("ones", creation_names, ...)
  return full(o.shape, 1, kw, "ones")
end
function np.full(...)
  local o, kw = creation_args("full", full_names, ...)
  local value = o.fill_value
  if type(value) == "boolean" then value = value and 1 or 0 end
  if type(value) ~= "number" then
    core.error(("full: fill_value must be a number, got %s"):format(core.show_value(value)))
  end
  return full(o.shape, value, kw, "full")
end
function np.empty(...)
  local o, kw = creation_args("empty", creation_names, ...)
  local shape = core.shape_arg(o.shape, "empty")
  local dev = core.resolve_device(core.device_of(kw, "empty"), "empty")
  local dt = core.dtype_id(kw.dtype, "empty") or core.FLOAT32
  local sh = ffi.new("int64_t[8]")
  for k = 1, #shape do sh[k - 1] = shape[k] end
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_empty(dt, #shape, sh, dev.type_id, dev.device_id, out))
  return core.wrap(out[0])
end

local function like(fname, maker)
  return function(x, kw)
    check_array(x, fname, 1)
    kw = options(kw, fname, base_kw)
    return maker(x.shape, {dtype = kw.dtype or x.dtype, device = core.device_of(kw, fname) or x.device})
  end
end
np.zeros_like = like("zeros_like", np.zeros)
np.ones_like = like("ones_like", np.ones)
np.empty_like = like("empty_like", np.empty)
function np.full_like(x, value, kw)
  check_array(x, "full_like", 1)
  kw = options(kw, "full_like", base_kw)
  return np.full(x.shape, value, {dtype = kw.dtype or x.dtype, device = core.device_of(kw, "full_like") or x.device})
end

-- arange(stop) | arange(start, stop) | arange(start, stop, step [, dtype]),
-- then kw.
function np.arange(...)
  local kw, n = kw_of(...)
  local a1, a2, a3, a4 = ...
  if n >= 4 then
    if n > 4 then core.error(("arange: at most 4 positional arguments (start, stop, step, dtype), got %d"):format(n)) end
    if kw.dtype ~= nil then core.error("arange: dtype given twice (positional and keyword)") end
    local k2 = {}
    for k, v in pairs(kw) do k2[k] = v end
    k2.dtype, kw, n = a4, k2, 3
  end
  local start, stop, step
  if n <= 1 then start, stop, step = 0, a1, 1
  else start, stop, step = a1, a2, (n >= 3 and a3) or 1 end
  start, stop, step = kw.start or start, kw.stop or stop, kw.step or step
  if type(start) ~= "number" or type(stop) ~= "number" or type(step) ~= "number" then
    core.error("arange: start, stop and step must be numbers")
  end
  local a = device_attrs(attrs(), kw, "arange", {"start", "stop", "step"})
  a.f[ARANGE_START], a.f[ARANGE_STOP], a.f[ARANGE_STEP] = start, stop, step
  return call(op.arange, {}, a)
end

function np.linspace(start, stop, num, kw)
  if type(num) == "table" then kw, num = num, nil end
  kw = kw or {}
  num = num or kw.num or 50
  local a = device_attrs(attrs(), kw, "linspace", {"num", "endpoint"})
  a.f[LINSPACE_START] = core.num_arg(start, "linspace", "start")
  a.f[LINSPACE_STOP] = core.num_arg(stop, "linspace", "stop")
  a.i[LINSPACE_NUM] = core.int_arg(num, "linspace", "num")
  a.i[LINSPACE_ENDPOINT], a.ni = kw.endpoint == false and 0 or 1, LINSPACE_ENDPOINT + 1
  return call(op.linspace, {}, a)
end

function np.eye(N, M, k, kw)
  if type(M) == "table" then kw, M = M, nil end
  if type(k) == "table" then kw, k = k, nil end
  kw = kw or {}
  local a = device_attrs(attrs(), kw, "eye", {"M", "k"})
  a.i[EYE_N] = core.int_arg(N, "eye", "N")
  a.i[EYE_M] = core.int_arg(M or kw.M or 0, "eye", "M")
  a.i[EYE_K], a.ni = core.int_arg(k or kw.k or 0, "eye", "k"), EYE_K + 1
  return call(op.eye, {}, a)
end
function np.identity(n, kw)
  options(kw, "identity", base_kw) -- not eye's M and k
  return np.eye(n, nil, 0, kw)
end

---------------------------------------------------------------------------
-- Random

function np.random.seed(s)
  if type(s) ~= "number" or s % 1 ~= 0 or s >= 2^63 or s < -2^63 then
    core.error(("random.seed: the seed must be an integer, got %s"):format(core.show_value(s)))
  end
  C.luon_random_seed(s)
end

-- uniform(low, high, size, kw) or uniform{low=, high=, size=, dtype=, device=};
-- p1, p2: {name, default, slot}; the size goes from slot `shape` on
local function random_op(opid, fname, shape, p1, p2)
  local slot1, slot2 = p1[3], p2[3]
  return function(...)
    local kw, n = kw_of(...)
    local a1, a2, a3 = ...
    local lo = (n >= 1 and a1) or kw[p1[1]] or p1[2]
    local hi = (n >= 2 and a2) or kw[p2[1]] or p2[2]
    local size = (n >= 3 and a3) or kw.size or {}
    if type(size) == "number" then size = {size} end
    size = core.shape_arg(size, fname)
    if hi == nil then
      core.error(("%s: %s is required"):format(fname, p2[1]))
    end
    local a = device_attrs(attrs(), kw, fname, {p1[1], p2[1], "size"})
    core.set_ints(a, size, shape, fname)
    a.f[slot1], a.f[slot2] = core.num_arg(lo, fname, p1[1]), core.num_arg(hi, fname, p2[1])
    return call(opid, {}, a)
  end
end
np.random.uniform = random_op(op.random_uniform, "random.uniform", RANDOM_SHAPE,
                              {"low", 0, RANDOM_LOW}, {"high", 1, RANDOM_HIGH})
np.random.normal = random_op(op.random_normal, "random.normal", S.NORMAL_SHAPE,
                             {"loc", 0, S.NORMAL_LOC}, {"scale", 1, S.NORMAL_SCALE})
-- randint(high) | randint(low, high) | randint(low, high, size), then kw
function np.random.randint(...)
  local kw, n = kw_of(...)
  local low, high, size = ...
  if n < 1 then low = kw.low end
  if n < 2 then high = kw.high end
  if n < 3 then size = kw.size end
  if high == nil then low, high = 0, low end
  if type(low) ~= "number" or type(high) ~= "number" then
    core.error("random.randint: low and high must be numbers")
  end
  size = core.shape_arg(size or {}, "random.randint")
  local a = device_attrs(attrs(), kw, "random.randint", {"low", "high", "size"})
  core.set_ints(a, size, RANDOM_SHAPE, "random.randint")
  a.f[RANDOM_LOW], a.f[RANDOM_HIGH] = low, high
  return call(op.random_randint, {}, a)
end
-- Shuffle the rows (axis 0) of x in place.
function np.random.shuffle(x)
  check_array(x, "random.shuffle", 1)
  local y = call(op.random_permute, {x})
  core.check(C.luon_tensor_copy(x.t, y.t))
end

-- The distributions below take numbers for their parameters (luon draws
-- each with one set of them); an array parameter is an error that says how
-- to get the same draw from numbers.
local function param(v, fname, what, spelled)
  if type(v) ~= "number" then
    if is_array(v) then
      core.error(("%s: %s must be a number, got an ndarray; for an array of %s use %s")
                 :format(fname, what, what, spelled))
    end
    core.error(("%s: %s must be a number, got %s"):format(fname, what, core.show_value(v)))
  end
  if v ~= v then core.error(("%s: %s is NaN"):format(fname, what)) end
  return v
end
local rand_keys = {"dtype", "device", "ctx"}

-- randn(d0, d1, ..., kw): standard normal of shape (d0, d1, ...); rand the
-- same, uniform on [0, 1). No dimensions: a 0-d array.
local function dims(fname, ...)
  local kw, n = kw_of(...)
  local shape = {}
  for k = 1, n do shape[k] = core.int_arg(select(k, ...), fname, "dimension " .. k, 0) end
  return shape, options(kw, fname, rand_keys)
end
function np.random.randn(...)
  local shape, kw = dims("random.randn", ...)
  return np.random.normal(0, 1, shape, kw)
end
function np.random.rand(...)
  local shape, kw = dims("random.rand", ...)
  return np.random.uniform(0, 1, shape, kw)
end

-- permutation(x): a shuffled copy of x's rows; permutation(n): 0..n-1
-- (int64) in a random order.
function np.random.permutation(x, kw)
  if is_array(x) then
    options(kw, "random.permutation", {})
    return call(op.random_permute, {x})
  end
  kw = options(kw, "random.permutation", {"device", "ctx"})
  local n = core.int_arg(x, "random.permutation", "x (an ndarray or a count)", 0)
  return call(op.random_permute, {np.arange(n, {dtype = "int64", device = core.device_of(kw, "random.permutation")})})
end

-- gamma(shape, scale=1, size, {dtype, device})
function np.random.gamma(...)
  local fname = "random.gamma"
  local kw = core.args(fname, {"shape", "scale", "size"}, {"shape", "scale", "size", "dtype", "device", "ctx"}, ...)
  local alpha = param(kw.shape, fname, "shape", "np.random.gamma(shape, 1, size) per shape value")
  local scale = param(kw.scale == nil and 1 or kw.scale, fname, "scale", "np.random.gamma(shape, 1, size) * scale")
  local a = device_attrs(attrs(), {dtype = kw.dtype, device = kw.device, ctx = kw.ctx}, fname)
  core.set_ints(a, core.shape_arg(kw.size or {}, fname), S.GAMMA_SHAPE, fname)
  a.f[S.GAMMA_ALPHA], a.f[S.GAMMA_SCALE] = alpha, scale
  return call(op.random_gamma, {}, a)
end

-- exponential(scale=1, size, {device}): -scale log(1 - u), u uniform on
-- [0, 1) in float64; float32.
function np.random.exponential(...)
  local fname = "random.exponential"
  local kw = core.args(fname, {"scale", "size"}, {"scale", "size", "device", "ctx"}, ...)
  local scale = param(kw.scale == nil and 1 or kw.scale, fname, "scale", "np.random.exponential(1, size) * scale")
  if scale < 0 then core.error(("%s: scale %s must be non-negative"):format(fname, scale)) end
  local u = np.random.uniform(0, 1, kw.size or {}, {dtype = "float64", device = core.device_of(kw, fname)})
  return (np.log(1 - u) * -scale):astype("float32")
end

-- logistic(loc=0, scale=1, size, {device}): loc + scale log(u / (1 - u)),
-- u uniform on [2^-53, 1) in float64 (both logs finite); float32.
function np.random.logistic(...)
  local fname = "random.logistic"
  local kw = core.args(fname, {"loc", "scale", "size"}, {"loc", "scale", "size", "device", "ctx"}, ...)
  local loc = param(kw.loc == nil and 0 or kw.loc, fname, "loc", "np.random.logistic(0, scale, size) + loc")
  local scale = param(kw.scale == nil and 1 or kw.scale, fname, "scale", "np.random.logistic(0, 1, size) * scale")
  if scale < 0 then core.error(("%s: scale %s must be non-negative"):format(fname, scale)) end
  local u = np.random.uniform(2^-53, 1, kw.size or {}, {dtype = "float64", device = core.device_of(kw, fname)})
  return (np.log(u / (1 - u)) * scale + loc):astype("float32")
end

-- beta(a, b, size, {dtype, device}): x / (x + y), x ~ Gamma(a), y ~ Gamma(b)
-- drawn in float64.
function np.random.beta(...)
  local fname = "random.beta"
  local kw = core.args(fname, {"a", "b", "size"}, {"a", "b", "size", "dtype", "device", "ctx"}, ...)
  local a = param(kw.a, fname, "a", "np.random.beta(a, b, size) per value")
  local b = param(kw.b, fname, "b", "np.random.beta(a, b, size) per value")
  if not (a > 0 and b > 0) then core.error(("%s: a = %s and b = %s must be positive"):format(fname, a, b)) end
  local g = {dtype = "float64", device = core.device_of(kw, fname)}
  local x = np.random.gamma(a, 1, kw.size or {}, g)
  local y = np.random.gamma(b, 1, kw.size or {}, g)
  return (x / (x + y)):astype(kw.dtype or "float32")
end

-- Probabilities given as a Lua list or an ndarray: their values on the
-- host (checked finite and non-negative) and an ndarray of them on dev.
local function probs(p, fname, what, dev)
  local t, arr
  if is_array(p) then
    if p.ndim ~= 1 then
      core.error(("%s: %s must be 1-dimensional, got shape %s"):format(fname, what, core.shape_text(p.shape)))
    end
    t, arr = p:astype("float64"):totable(), p
  elseif type(p) == "table" then
    t = p
  else
    core.error(("%s: %s must be a list of probabilities or an ndarray, got %s"):format(fname, what, core.show_value(p)))
  end
  if #t == 0 then core.error(("%s: %s is empty"):format(fname, what)) end
  for k = 1, #t do
    local v = t[k]
    if type(v) ~= "number" or not (v >= 0 and v <= 1) then
      core.error(("%s: %s[%d] = %s is not a probability in [0, 1]"):format(fname, what, k - 1, core.show_value(v)))
    end
  end
  if not arr or arr.dtype ~= "float64" or arr.device ~= dev then
    arr = np.array(t, {dtype = "float64", device = dev})
  end
  return t, arr
end

-- multinomial(n, pvals, size, {device}): counts (size..., k), int64, of n
-- draws each; pvals[k-1] takes what the others leave (NumPy's rule), so
-- sum(pvals[:-1]) must be at most 1.
function np.random.multinomial(...)
  local fname = "random.multinomial"
  local kw = core.args(fname, {"n", "pvals", "size"}, {"n", "pvals", "size", "device", "ctx"}, ...)
  local n = core.int_arg(kw.n, fname, "n", 0)
  local dev = core.resolve_device(core.device_of(kw, fname) or (is_array(kw.pvals) and kw.pvals.device) or nil, fname)
  local t, pv = probs(kw.pvals, fname, "pvals", dev)
  local s = 0
  for k = 1, #t - 1 do s = s + t[k] end
  if s > 1 + 1e-12 then core.error(("%s: sum(pvals[:-1]) = %.17g is more than 1"):format(fname, s)) end
  local a = attrs()
  a.i[S.MULTINOMIAL_N] = n
  core.set_ints(a, core.shape_arg(kw.size or {}, fname), S.MULTINOMIAL_SHAPE, fname)
  return call(op.random_multinomial, {pv}, a)
end

-- choice(a, size, replace=true, p, {device}): from 0..a-1 (a an integer) or
-- from the 1-d array a; p the probabilities (summing to 1). Without
-- replacement and without p: the first values of a permutation; with p:
-- one at a time on the host, each drawn from what is left.
function np.random.choice(...)
  local fname = "random.choice"
  local kw = core.args(fname, {"a", "size", "replace", "p"}, {"a", "size", "replace", "p", "device", "ctx"}, ...)
  local a, n = kw.a
  if is_array(a) then
    if a.ndim ~= 1 then core.error(("%s: a must be 1-dimensional, got shape %s"):format(fname, core.shape_text(a.shape))) end
    n = a.shape[1]
    if n == 0 then core.error(("%s: a is empty; it needs at least one value"):format(fname)) end
  else
    n = core.int_arg(a, fname, "a (an ndarray or a positive count)", 1)
  end
  local dev = core.resolve_device(core.device_of(kw, fname) or (is_array(a) and a.device) or
                                  (is_array(kw.p) and kw.p.device) or nil, fname)
  local size = core.shape_arg(kw.size or {}, fname)
  local replace = kw.replace
  if replace == nil then replace = true end
  if type(replace) ~= "boolean" then core.error(("%s: replace must be true or false, got %s"):format(fname, core.show_value(replace))) end
  local t, pv
  if kw.p ~= nil then
    t, pv = probs(kw.p, fname, "p", dev)
    if #t ~= n then core.error(("%s: p has %d probabilities but a has %d values"):format(fname, #t, n)) end
    local sum = 0
    for k = 1, n do sum = sum + t[k] end
    local atol = is_array(kw.p) and kw.p.dtype ~= "float64" and 3.5e-4 or 1.5e-8
    if math.abs(sum - 1) > atol then core.error(("%s: probabilities p sum to %.10g, not 1"):format(fname, sum)) end
  end
  local k = 1
  for d = 1, #size do k = k * size[d] end
  local idx
  if replace and not t then
    idx = np.random.randint(0, n, size, {device = dev})
  elseif replace then
    local at = attrs()
    core.set_ints(at, size, S.CHOICE_SHAPE, fname)
    idx = call(op.random_choice, {pv}, at)
  else
    if k > n then
      core.error(("%s: cannot take a larger sample (%d) than the population (%d) without replacement"):format(fname, k, n))
    end
    if k == 0 then
      idx = np.zeros(size, {dtype = "int64", device = dev})
    elseif not t then
      idx = call(op.random_permute, {np.arange(n, {dtype = "int64", device = dev})}):slice({0, k}):reshape(size)
    else
      local left, nonzero = {}, 0
      for j = 1, n do left[j] = t[j]; if t[j] > 0 then nonzero = nonzero + 1 end end
      if nonzero < k then
        core.error(("%s: p has %d non-zero probabilities, fewer than the %d values asked without replacement")
                   :format(fname, nonzero, k))
      end
      local u = np.random.uniform(0, 1, {k}, {dtype = "float64", device = dev}):totable()
      local out = {}
      for d = 1, k do
        local total = 0
        for j = 1, n do total = total + left[j] end
        local target, s, pick = u[d] * total, 0, nil
        for j = 1, n do
          if left[j] > 0 then
            s, pick = s + left[j], j
            if target < s then break end
          end
        end
        out[d], left[pick] = pick - 1, 0
      end
      idx = np.array(out, {dtype = "int64", device = dev}):reshape(size)
    end
  end
  if is_array(a) then return np.take(a, idx) end
  return idx
end

---------------------------------------------------------------------------
-- Elementwise

-- A 0-d array holding v, of a dtype that suits arithmetic with array x.
-- The dtype of the result of an array of dtype dt with the Lua number v
-- (NumPy's weak scalars): dt, but float32 for a fraction beside integers
-- or bool, and int64 for an integer beside bool.
local function with_scalar(dt, v)
  if core.is_float(dt) then return dt end
  if v % 1 ~= 0 then return core.FLOAT32 end
  return dt == core.BOOL and core.INT64 or dt
end

-- The integers each integer dtype holds: lowest, one past the highest (a
-- double holds 2^63, not 2^63-1), then as text.
local int_range = {[core.UINT8] = {0, 256, "0", "255"},
                   [core.INT8] = {-128, 128, "-128", "127"},
                   [core.INT16] = {-2 ^ 15, 2 ^ 15, "-32768", "32767"},
                   [core.UINT16] = {0, 2 ^ 16, "0", "65535"},
                   [core.INT32] = {-2 ^ 31, 2 ^ 31, "-2^31", "2^31-1"},
                   [core.INT64] = {-2 ^ 63, 2 ^ 63, "-2^63", "2^63-1"}}

local function scalar_for(v, x, fname)
  local info = core.info_of(x)
  local dt
  if type(v) == "boolean" then
    v = v and 1 or 0
    if info.dtype == core.BOOL then dt = core.BOOL end -- beside a bool array it stays bool, as NumPy
  end
  if type(v) ~= "number" then
    core.error(("%s: operands must be ndarrays or numbers, got %s"):format(fname, type(v)))
  end
  dt = dt or with_scalar(info.dtype, v)
  local range = int_range[dt]
  if range and (v < range[1] or v >= range[2]) then
    -- MXNet wraps it (uint8 + 300 is 44 + 1), NumPy 2 raises: so do we
    core.error(("%s: %s does not fit %s (%s to %s), the dtype of the array operand; convert the array first, " ..
                "e.g. x:astype('%s')"):format(fname, core.show_value(v), core.dtype_names[dt], range[3], range[4],
                                             dt == core.INT64 and "float64" or "int64"))
  end
  local a = attrs()
  a.dtype, a.dev_type, a.dev_id = dt, info.dev_type, info.dev_id
  a.f[FULL_VALUE] = v -- 0-d
  return call(op.full, {}, a)
end

-- A non-array operand of fname as an array (numbers, booleans, nested
-- tables of them), or an error naming fname and the argument.
local function operand(v, fname, pos)
  local tv = type(v)
  if tv ~= "number" and tv ~= "boolean" and tv ~= "table" then
    core.error(("%s: argument %d must be an ndarray, a number or a nested table of numbers, got %s")
               :format(fname, pos, core.show_value(v)))
  end
  return np.array(v)
end

-- MXNet's out= keyword of the elementwise functions, as a table after the
-- operands: np.add(a, b, {out = c}) writes the result into c (c's shape is
-- the result's; its dtype converts) and returns c. Anything else there is
-- an error, never ignored.
local out_keys = {"out"}
local function out_of(kw, fname)
  if kw == nil then return nil end
  if type(kw) ~= "table" or is_array(kw) then
    core.error(("%s: expected {out = array} after the operands, got %s"):format(fname, core.show_value(kw)))
  end
  local out = options(kw, fname, out_keys).out
  if out ~= nil and not is_array(out) then
    core.error(("%s: out must be an ndarray, got %s"):format(fname, core.show_value(out)))
  end
  return out
end

local function binary(name)
  local id = op[name]
  local f = function(a, b, kw)
    local out = out_of(kw, name)
    if is_array(a) then
      if not is_array(b) then b = scalar_for(b, a, name) end
    elseif is_array(b) then
      a = scalar_for(a, b, name)
    else -- two plain numbers: a 0-d result on the default device
      a, b = operand(a, name, 1), operand(b, name, 2)
    end
    if out then return call(id, {a, b}, nil, {out}) end
    return call2(id, a, b)
  end
  np[name] = f
  return f
end

local function unary(name)
  local id = op[name]
  np[name] = function(x, kw)
    local out = out_of(kw, name)
    if not is_array(x) then x = operand(x, name, 1) end
    if out then return call(id, {x}, nil, {out}) end
    return call1(id, x)
  end
end
-- the registry's elementwise np functions (LU_NP_MAP): two inputs binary, one unary
for _, name in ipairs(core.ops_with("np_map")) do
  if core.op_info[name].nin == 2 then binary(name) else unary(name) end
end
np.true_divide = np.divide
np.absolute = np.abs
np.fix = np.trunc -- both round toward zero
np.degrees, np.radians = np.rad2deg, np.deg2rad
np.invert = np.bitwise_not
np.remainder = np.mod

-- round(x, decimals) or round(x, {decimals = d}): halves to even; decimals < 0
-- rounds to tens, hundreds...
local round_keys = {"decimals"}
function np.round(x, decimals, kw)
  if type(decimals) == "table" then kw, decimals = decimals, nil end
  kw = options(kw, "round", round_keys)
  if not is_array(x) then x = operand(x, "round", 1) end
  if decimals ~= nil and kw.decimals ~= nil then
    core.error(("round: decimals given twice, as %s and {decimals = %s}"):format(core.show_value(decimals),
                                                                               core.show_value(kw.decimals)))
  end
  if decimals == nil then decimals = kw.decimals or 0 end
  local a = attrs()
  a.i[S.ROUND_DECIMALS], a.ni = core.int_arg(decimals, "round", "decimals"), S.ROUND_DECIMALS + 1
  return call1(op.round, x, a)
end
np.around, np.round_ = np.round, np.round

function np.clip(x, a_min, a_max)
  check_array(x, "clip", 1)
  if a_min == nil and a_max == nil then core.error("clip: a_min and a_max cannot both be nil") end
  local lo = a_min == nil and 0 / 0 or core.num_arg(a_min, "clip", "a_min")
  local hi = a_max == nil and 0 / 0 or core.num_arg(a_max, "clip", "a_max")
  local dt = core.info_of(x).dtype
  if dt == core.BOOL then
    -- as x + bound would (with_scalar): a bool clipped to 0.5 is float32
    -- (not bool, all False), to 2 int64
    local t = with_scalar(with_scalar(dt, a_min or 0), a_max or 0)
    x = x:astype(t)
  end
  local a = attrs() -- after astype, which fills the shared attrs too
  a.f[CLIP_MIN], a.f[CLIP_MAX] = lo, hi
  return call1(op.clip, x, a)
end

function np.where(cond, x, y)
  check_array(cond, "where", 1)
  if not is_array(x) then x = scalar_for(x, is_array(y) and y or cond, "where") end
  if not is_array(y) then y = scalar_for(y, x, "where") end
  return call(op.where, {cond, x, y})
end

---------------------------------------------------------------------------
-- Reductions: f(x, axis, kw) with axis a number, a list, or kw.axis

local function axes_arg(axis, kw, fname)
  axis = axis == nil and kw.axis or axis
  if axis == nil then return {} end
  if type(axis) == "number" then return {axis} end
  if type(axis) == "table" then
    for k in pairs(axis) do -- {0, keepdims = true} would quietly drop keepdims
      if type(k) ~= "number" then
        core.error(("%s: the list of axes has a key %s; options go in a table of their own, "
                    .. "as %s(x, axis, {keepdims = true})"):format(fname, core.show_value(k), fname))
      end
    end
  end
  return axis
end

local function reduction(name)
  local id = op[name]
  np[name] = function(x, axis, kw)
    check_array(x, name, 1)
    if type(axis) == "table" and axis[1] == nil and next(axis) ~= nil then kw, axis = axis, nil end
    kw = options(kw, name, reduce_keys)
    local a = attrs()
    a.i[REDUCE_KEEPDIMS] = kw.keepdims and 1 or 0
    core.set_ints(a, axes_arg(axis, kw, name), REDUCE_AXES, name)
    if kw.dtype then a.dtype = core.dtype_id(kw.dtype, name) end
    return call(id, {x}, a)
  end
end
for _, name in ipairs(core.ops_with("np_reduce")) do reduction(name) end
np.amax, np.amin = np.max, np.min

local function arg_reduction(name)
  local id = op[name]
  np[name] = function(x, axis, kw)
    check_array(x, name, 1)
    if type(axis) == "table" then kw, axis = axis, nil end
    kw = options(kw, name, arg_reduce_keys)
    axis = axis == nil and kw.axis or axis
    local a = attrs()
    a.i[REDUCE_KEEPDIMS] = kw.keepdims and 1 or 0
    a.ni = REDUCE_AXES -- no axis: flattened
    if axis ~= nil then a.i[REDUCE_AXES], a.ni = core.int_arg(axis, name, "axis"), REDUCE_AXES + 1 end
    return call(id, {x}, a)
  end
end
arg_reduction("argmax")
arg_reduction("argmin")

-- The reduced axes of x for fname: axis nil or {} (all), an integer or a list,
-- each in range and given once, as a sorted list of axes >= 0, and how many
-- elements go into each result.
local function reduced_axes(x, axis, fname)
  local nd, shape = x.ndim, x.shape
  local list = axis == nil and {} or type(axis) == "number" and {axis} or axis
  if type(list) ~= "table" then
    core.error(("%s: axis must be an integer or a list of integers, got %s"):format(fname, core.show_value(axis)))
  end
  local seen, out, n = {}, {}, 1
  if #list == 0 then for k = 0, nd - 1 do out[#out + 1] = k end end -- none: all
  for k = 1, #list do
    local ax = list[k]
    if not core.is_int(ax) or ax < -nd or ax >= nd then
      core.error(("%s: axis %s is out of bounds for an array of dimension %d"):format(fname, core.show_value(ax), nd))
    end
    if ax < 0 then ax = ax + nd end
    if seen[ax] then core.error(("%s: axis %d appears twice in the axes"):format(fname, ax)) end
    seen[ax] = true
    out[#out + 1] = ax
  end
  table.sort(out)
  for k = 1, #out do n = n * shape[out[k] + 1] end
  return out, n
end

-- f(x, axis, kw): axis positional or kw.axis, kw read against keys
local function axis_and_kw(x, axis, kw, fname, keys)
  check_array(x, fname, 1)
  if type(axis) == "table" and axis[1] == nil and next(axis) ~= nil then kw, axis = axis, nil end
  kw = options(kw, fname, keys)
  return axes_arg(axis, kw, fname), kw
end

-- A requested result dtype that must be a float one (nil: none).
local function float_dtype(dt, fname)
  if dt == nil then return nil end
  local id = core.dtype_id(dt, fname)
  if not core.is_float(id) then
    core.error(("%s: dtype must be a float dtype (float16, bfloat16, float32, float64), got %s")
               :format(fname, core.show_value(dt)))
  end
  return core.dtype_names[id]
end

-- The float dtype x's statistics are computed and given in: dt, else x's
-- own when it is a float, else float32 (as mean).
local function stat_dtype(x, dt)
  if dt then return dt end
  return core.is_float(core.dtype_id(x.dtype)) and x.dtype or "float32"
end

-- sqrt(s) with gradient 0, not NaN, where s is 0 (a norm or std of zeros);
-- p: the power, 0.5 unless given.
local function safe_root(s, p)
  local z = np.equal(s, 0)
  local r = p and np.power(np.where(z, 1, s), p) or np.sqrt(np.where(z, 1, s))
  return np.where(z, 0, r)
end

local stat_keys = {"axis", "dtype", "ddof", "keepdims"}
-- var and std: sum((x - mean)^2) / (n - ddof), in float (see docs/reference.md)
local function variance(fname, x, axis, kw)
  axis, kw = axis_and_kw(x, axis, kw, fname, stat_keys)
  local axes, n = reduced_axes(x, axis, fname)
  local ddof = core.int_arg(kw.ddof or 0, fname, "ddof")
  local dt = stat_dtype(x, float_dtype(kw.dtype, fname))
  local ct = (dt == "float16" or dt == "bfloat16") and "float32" or dt -- 16-bit: computed in float32
  local xc = x.dtype == ct and x or x:astype(ct)
  local d = np.subtract(xc, np.mean(xc, axes, {keepdims = true}))
  local v = np.divide(np.sum(np.multiply(d, d), axes, {keepdims = kw.keepdims}), math.max(n - ddof, 0))
  return v, dt
end
function np.var(x, axis, kw)
  local v, dt = variance("var", x, axis, kw)
  return v.dtype == dt and v or v:astype(dt)
end
function np.std(x, axis, kw)
  local v, dt = variance("std", x, axis, kw)
  v = safe_root(v)
  return v.dtype == dt and v or v:astype(dt)
end

-- cumsum(x, axis, {dtype}): no axis flattens x first
local scan_keys = {"axis", "dtype"}
local function scan(name)
  local id = op[name]
  np[name] = function(x, axis, kw)
    check_array(x, name, 1)
    if type(axis) == "table" then kw, axis = axis, nil end
    kw = options(kw, name, scan_keys)
    axis = axis == nil and kw.axis or axis
    local a = attrs()
    if axis == nil then
      x, a.i[SCAN_AXIS] = np.reshape(x, {-1}), 0
    else
      a.i[SCAN_AXIS] = core.int_arg(axis, name, "axis")
    end
    a.ni = SCAN_AXIS + 1
    if kw.dtype then a.dtype = core.dtype_id(kw.dtype, name) end
    return call(id, {x}, a)
  end
end
scan("cumsum")
scan("cumprod")

-- nansum, nanprod, nanmean: NaNs count as 0 (sum), 1 (prod) or are left
-- out (mean); x ~= x is NaN
local function nan_reduction(name, fill, reduce)
  np[name] = function(x, axis, kw)
    axis, kw = axis_and_kw(x, axis, kw, name, reduce_keys)
    reduced_axes(x, axis, name)
    local o = {keepdims = kw.keepdims, dtype = kw.dtype}
    if not core.is_float(core.dtype_id(x.dtype)) then return reduce(x, axis, o, nil) end
    local nan = np.not_equal(x, x)
    return reduce(np.where(nan, fill, x), axis, o, nan)
  end
end
nan_reduction("nansum", 0, function(x, axis, o) return np.sum(x, axis, o) end)
nan_reduction("nanprod", 1, function(x, axis, o) return np.prod(x, axis, o) end)
nan_reduction("nanmean", 0, function(x, axis, o, nan)
  local dt = stat_dtype(x, float_dtype(o.dtype, "nanmean"))
  if nan == nil then return np.mean(x, axis, o) end -- integers: no NaN
  local count = np.sum(np.equal(nan, false), axis, {keepdims = o.keepdims, dtype = dt})
  return np.divide(np.sum(x, axis, {keepdims = o.keepdims, dtype = dt}), count)
end)

-- average(a, axis, weights, returned) or keywords: the weighted mean, and
-- with returned the sum of the weights (of the result's shape) as well
local average_names = {"axis", "weights", "returned"}
function np.average(a, ...)
  check_array(a, "average", 1)
  local p = core.args("average", average_names, average_names, ...)
  local axes, n = reduced_axes(a, p.axis, "average")
  local w = p.weights
  if w == nil then
    local avg = np.mean(a, axes)
    if not p.returned then return avg end
    return avg, np.full(avg.shape, n, {dtype = avg.dtype, device = a.device})
  end
  if not is_array(w) then w = operand(w, "average", 3):copyto(a.device) end
  local dt = (a.dtype == "float64" or w.dtype == "float64") and "float64" or "float32"
  a, w = a.dtype == dt and a or a:astype(dt), w.dtype == dt and w or w:astype(dt)
  if not core.same_shape(a.shape, w.shape) then
    if type(p.axis) ~= "number" then
      core.error(("average: axis must be one integer when the shapes of a %s and weights %s differ")
                 :format(core.shape_text(a.shape), core.shape_text(w.shape)))
    end
    if w.ndim ~= 1 or w.shape[1] ~= a.shape[axes[1] + 1] then
      core.error(("average: weights of shape %s do not fit axis %d of a %s; give 1-d weights of length %d")
                 :format(core.shape_text(w.shape), p.axis, core.shape_text(a.shape), a.shape[axes[1] + 1]))
    end
    local ws = {}
    for k = 1, a.ndim do ws[k] = k - 1 == axes[1] and w.shape[1] or 1 end
    w = np.broadcast_to(np.reshape(w, ws), a.shape)
  end
  local scl = np.sum(w, axes)
  local avg = np.divide(np.sum(np.multiply(a, w), axes), scl)
  if p.returned then return avg, scl end
  return avg
end

-- any, all, count_nonzero: over the elements that are not 0 (NaN is not)
local truth_keys = {"axis", "keepdims"}
local function truth(name, finish)
  np[name] = function(x, axis, kw)
    axis, kw = axis_and_kw(x, axis, kw, name, truth_keys)
    reduced_axes(x, axis, name)
    return finish(np.not_equal(x, 0), axis, {keepdims = kw.keepdims})
  end
end
truth("any", function(nz, axis, o) return np.greater(np.sum(nz, axis, o), 0) end)
truth("all", function(nz, axis, o) return np.equal(np.sum(np.equal(nz, false), axis, o), 0) end)
truth("count_nonzero", function(nz, axis, o) o.dtype = "int64"; return np.sum(nz, axis, o) end)

---------------------------------------------------------------------------
-- np.linalg

np.linalg = {}

local norm_names = {"ord", "axis", "keepdims"}
local inf = math.huge

-- x's vector norm of order ord over the axes in list axes (one, or all of
-- a flattened x for the 2-norm)
local function vector_norm(x, ord, axes, n, keep)
  local o = {keepdims = keep}
  if ord == nil or ord == 2 or ord == "fro" then
    return safe_root(np.sum(np.multiply(x, x), axes, o))
  end
  if type(ord) ~= "number" or ord ~= ord then
    core.error(("linalg.norm: invalid norm order %s for vectors (a number, inf, -inf or nil)")
               :format(core.show_value(ord)))
  end
  if (ord == inf or ord == -inf) and n == 0 then
    core.error("linalg.norm: the inf and -inf norms of an empty vector are not defined (zero-size array)")
  end
  if ord == inf then return np.max(np.abs(x), axes, o) end
  if ord == -inf then return np.min(np.abs(x), axes, o) end
  if ord == 0 then return np.sum(np.not_equal(x, 0), axes, {keepdims = keep, dtype = x.dtype}) end
  if ord == 1 then return np.sum(np.abs(x), axes, o) end
  return safe_root(np.sum(np.power(np.abs(x), ord), axes, o), 1 / ord)
end

-- x's matrix norms from its singular values: 2 the largest, -2 the
-- smallest, 'nuc' their sum. The op svd has no gradient: its singular
-- vectors u_i, v_i are taken as constants, and the norm is computed as the
-- sum of u_i^T x v_i over the chosen i, the same value, whose gradient is
-- the sum of u_i v_i^T, the norm's.
local function singular_norm(x, ord, r, c, keep)
  local m, n = x.shape[r + 1], x.shape[c + 1]
  if m == 0 or n == 0 then
    core.error(("linalg.norm: ord %s of an empty matrix is not defined (shape %s)")
               :format(core.show_value(ord), core.shape_text(x.shape)))
  end
  local perm = {}
  for k = 0, x.ndim - 1 do
    if k ~= r and k ~= c then perm[#perm + 1] = k end
  end
  perm[#perm + 1], perm[#perm + 2] = r, c
  local xm = np.transpose(x, perm) -- (..., m, n)
  if m < n then xm = np.swapaxes(xm, -1, -2) end -- svd takes rows >= columns
  local usv = call(op.svd, {xm:detach()}, nil, nil, 3)
  local u, v = usv[1], usv[3] -- (..., m, k), (..., n, k)
  if ord ~= "nuc" then
    local i = ord == 2 and 0 or math.min(m, n) - 1
    u, v = np.take(u, {i}, -1), np.take(v, {i}, -1)
  end
  -- sum over a, b, i of u[a, i] x[a, b] v[b, i]
  local xv = np.sum(np.multiply(np.expand_dims(xm, -1), np.expand_dims(v, -3)), -2) -- (..., m, i)
  local val = np.sum(np.multiply(u, xv), {-2, -1})
  if not keep then return val end
  local shape = {}
  for k = 1, x.ndim do shape[k] = (k - 1 == r or k - 1 == c) and 1 or x.shape[k] end
  return np.reshape(val, shape)
end

-- x's matrix norm over axes r (rows) and c (columns)
local function matrix_norm(x, ord, r, c, keep)
  if ord == nil or ord == "fro" then
    return safe_root(np.sum(np.multiply(x, x), {r, c}, {keepdims = keep}))
  end
  if ord == 2 or ord == -2 or ord == "nuc" then return singular_norm(x, ord, r, c, keep) end
  local inner, outer
  if ord == 1 or ord == -1 then inner, outer = r, c
  elseif ord == inf or ord == -inf then inner, outer = c, r
  else
    core.error(("linalg.norm: invalid norm order %s for matrices (nil, 'fro', 1, -1, inf or -inf)")
               :format(core.show_value(ord)))
  end
  if x.shape[outer + 1] == 0 then
    core.error(("linalg.norm: the %s norm of a matrix with no %s is not defined (shape %s)")
               :format(core.show_value(ord), outer == c and "columns" or "rows", core.shape_text(x.shape)))
  end
  local pick = ord > 0 and np.max or np.min
  local s = np.sum(np.abs(x), inner, {keepdims = true})
  local m = pick(s, outer, {keepdims = true})
  if keep then return m end
  local shape = {}
  for k = 1, x.ndim do if k - 1 ~= r and k - 1 ~= c then shape[#shape + 1] = x.shape[k] end end
  return np.reshape(m, shape)
end

-- norm(x, ord, axis, keepdims) or keywords; integers are taken as float32
function np.linalg.norm(x, ...)
  check_array(x, "linalg.norm", 1)
  local p = core.args("linalg.norm", norm_names, norm_names, ...)
  local ord, axis, keep = p.ord, p.axis, p.keepdims and true or false
  if not core.is_float(core.dtype_id(x.dtype)) then x = x:astype("float32") end
  if axis == nil then
    if ord == nil then
      local axes, n = reduced_axes(x, nil, "linalg.norm")
      return vector_norm(x, nil, axes, n, keep)
    end
    if x.ndim == 1 then axis = 0
    elseif x.ndim == 2 then axis = {0, 1}
    else
      core.error(("linalg.norm: ord %s needs a 1-d or 2-d array or an axis, got shape %s")
                 :format(core.show_value(ord), core.shape_text(x.shape)))
    end
  end
  if type(axis) == "table" and #axis == 1 then axis = axis[1] end
  if type(axis) == "number" then
    if ord == "nuc" then core.error("linalg.norm: ord 'nuc' is for matrices (give two axes)") end
    local axes, n = reduced_axes(x, axis, "linalg.norm")
    return vector_norm(x, ord, axes, n, keep)
  end
  if type(axis) ~= "table" or #axis ~= 2 then
    core.error(("linalg.norm: axis must be an integer or a list of two, got %s")
               :format(type(axis) == "table" and #axis .. " axes" or core.show_value(axis)))
  end
  reduced_axes(x, axis, "linalg.norm") -- in range, not the same twice
  local r, c = axis[1] < 0 and axis[1] + x.ndim or axis[1], axis[2] < 0 and axis[2] + x.ndim or axis[2]
  return matrix_norm(x, ord, r, c, keep)
end
-- svd(a) -> ut, s, v: MXNet's np.linalg.svd. a (..., M, N), float32 or
-- float64, M <= N (MXNet's rule); a = ut diag(s) v with ut (..., M, M)
-- orthogonal, s (..., M) descending, v (..., M, N) with orthonormal rows.
-- The op svd takes rows >= columns: a^T = U diag(S) V^T, so ut = V and
-- v = U^T. Each singular pair's sign is the one-sided Jacobi's, which may be
-- the opposite of LAPACK's (MXNet's). The op has no gradient: a backward
-- through it is an error naming svd.
function np.linalg.svd(a)
  check_array(a, "linalg.svd", 1)
  local s = a.shape
  if #s < 2 then
    core.error(("linalg.svd: expected an array of at least 2 dimensions (..., M, N), got shape %s")
               :format(core.shape_text(s)))
  end
  if a.dtype ~= "float32" and a.dtype ~= "float64" then
    core.error(("linalg.svd: takes float32 or float64 arrays, got %s"):format(a.dtype))
  end
  local m, n = s[#s - 1], s[#s]
  if m > n then
    core.error(("linalg.svd: expected M <= N (rows at most columns, as MXNet), got shape %s; take the svd of "
                .. "np.swapaxes(a, -1, -2) and swap the roles of ut and v"):format(core.shape_text(s)))
  end
  local usv = call(op.svd, {np.swapaxes(a, -1, -2)}, nil, nil, 3)
  return usv[3], usv[2], np.swapaxes(usv[1], -1, -2)
end

core.strict_module(np.linalg, "np.linalg")

---------------------------------------------------------------------------
-- Shape and layout

-- reshape(x, {2, -1}) or reshape(x, 2, -1)
function np.reshape(x, shape, ...)
  check_array(x, "reshape", 1)
  if type(shape) == "number" then shape = {shape, ...} end
  if type(shape) ~= "table" then core.error("reshape: the new shape must be a list of integers") end
  local a = attrs()
  core.set_ints(a, shape, 0, "reshape")
  return call(op.reshape, {x}, a)
end

function np.transpose(x, axes, ...)
  check_array(x, "transpose", 1)
  if type(axes) == "number" then axes = {axes, ...} end
  local a = attrs()
  core.set_ints(a, axes or {}, 0, "transpose")
  return call(op.transpose, {x}, a)
end

function np.swapaxes(x, a1, a2)
  check_array(x, "swapaxes", 1)
  local nd = x.ndim
  local perm = {}
  for k = 1, nd do perm[k] = k - 1 end
  local function norm(ax)
    if type(ax) ~= "number" or ax < -nd or ax >= nd then
      core.error(("swapaxes: axis %s is out of bounds for an array of dimension %d"):format(tostring(ax), nd))
    end
    return ax < 0 and ax + nd or ax
  end
  local i, j = norm(a1), norm(a2)
  perm[i + 1], perm[j + 1] = perm[j + 1], perm[i + 1]
  return np.transpose(x, perm)
end

function np.expand_dims(x, axis)
  check_array(x, "expand_dims", 1)
  local a = attrs()
  a.i[EXPAND_DIMS_AXIS], a.ni = core.int_arg(axis, "expand_dims", "axis"), EXPAND_DIMS_AXIS + 1
  return call(op.expand_dims, {x}, a)
end

function np.squeeze(x, axis, kw)
  check_array(x, "squeeze", 1)
  if type(axis) == "table" and axis[1] == nil then kw, axis = axis, nil end
  kw = options(kw, "squeeze", axis_keys)
  local a = attrs()
  core.set_ints(a, axes_arg(axis, kw, "squeeze"), SQUEEZE_AXES, "squeeze")
  return call(op.squeeze, {x}, a)
end

function np.broadcast_to(x, shape)
  check_array(x, "broadcast_to", 1)
  local a = attrs()
  core.set_ints(a, core.shape_arg(shape, "broadcast_to"), 0, "broadcast_to")
  return call(op.broadcast_to, {x}, a)
end

function np.ravel(x) return np.reshape(x, {-1}) end

-- split(x, sections | {indices}, axis | {axis=}) -> Lua list of views
function np.split(x, sections, axis, kw)
  check_array(x, "split", 1)
  if type(axis) == "table" then kw, axis = axis, nil end
  kw = options(kw, "split", axis_keys)
  axis = core.int_arg(axis or kw.axis or 0, "split", "axis")
  local nd = x.ndim
  local ax = axis < 0 and axis + nd or axis
  if ax < 0 or ax >= nd then
    core.error(("split: axis %d is out of bounds for an array of dimension %d"):format(axis, nd))
  end
  local len = x.shape[ax + 1]
  local bounds = {}
  if type(sections) == "number" then
    core.int_arg(sections, "split", "the number of sections")
    if sections <= 0 or len % sections ~= 0 then
      core.error(("split: array split does not result in an equal division (axis %d of length %d into %d sections)")
            :format(axis, len, sections))
    end
    for k = 1, sections - 1 do bounds[k] = k * (len / sections) end
  elseif type(sections) == "table" then
    bounds = sections
  else
    core.error("split: sections must be a number or a list of indices")
  end
  local a = attrs()
  a.i[SPLIT_AXIS] = axis
  if #bounds + 1 <= 8 then
    core.set_ints(a, bounds, SPLIT_BOUNDS, "split")
    return call(op.split, {x}, a, nil, #bounds + 1)
  end
  -- the dispatcher returns at most 8 outputs: piece k between bounds k-1
  -- and k, cut out on its own (the middle of a three-way split)
  core.set_ints(a, bounds, SPLIT_BOUNDS, "split") -- checks every bound
  local parts = {}
  for k = 1, #bounds + 1 do
    local cut, pick = {}, 1
    if k > 1 then cut[1], pick = bounds[k - 1], 2 end
    if k <= #bounds then cut[#cut + 1] = bounds[k] end
    a = attrs()
    a.i[SPLIT_AXIS] = axis
    core.set_ints(a, cut, SPLIT_BOUNDS, "split")
    parts[k] = call(op.split, {x}, a, nil, #cut + 1)[pick]
  end
  return parts
end
np.array_split = np.split

function np.take(x, indices, axis, kw)
  check_array(x, "take", 1)
  if type(axis) == "table" then kw, axis = axis, nil end
  kw = options(kw, "take", take_keys)
  axis = axis == nil and kw.axis or axis
  if not is_array(indices) then indices = np.array(indices, {dtype = "int64", device = x.device}) end
  local modes = {clip = 0, wrap = 1, raise = 2}
  local mode = modes[kw.mode or "raise"] -- MXNet's and NumPy's default
  if not mode then core.error(("take: mode must be 'clip', 'wrap' or 'raise', got %s"):format(tostring(kw.mode))) end
  local a = attrs()
  a.i[TAKE_AXIS] = axis == nil and -999 or core.int_arg(axis, "take", "axis")
  a.i[TAKE_MODE], a.ni = mode, TAKE_MODE + 1
  return call(op.take, {x, indices}, a)
end

local function join(name)
  local id, AXIS = op[name], join_axis[name]
  np[name] = function(arrays, axis, kw)
    if type(axis) == "table" then kw, axis = axis, nil end
    kw = options(kw, name, axis_keys)
    axis = axis or kw.axis or 0
    if type(arrays) ~= "table" or #arrays == 0 then
      core.error(("%s: expected a non-empty list of arrays"):format(name))
    end
    if #arrays > 8 then -- the dispatcher takes 8 inputs: join in groups
      local groups = {}
      for k = 1, #arrays, 8 do
        local g = {}
        for j = k, math.min(k + 7, #arrays) do g[#g + 1] = arrays[j] end
        groups[#groups + 1] = g
      end
      if name == "stack" then
        local ex = {}
        for k = 1, #arrays do ex[k] = np.expand_dims(arrays[k], axis) end
        return np.concatenate(ex, axis)
      end
      local parts = {}
      for k = 1, #groups do parts[k] = np.concatenate(groups[k], axis) end
      return np.concatenate(parts, axis)
    end
    for k = 1, #arrays do check_array(arrays[k], name, k) end
    local a = attrs()
    a.i[AXIS], a.ni = core.int_arg(axis, name, "axis"), AXIS + 1
    return call(id, arrays, a)
  end
end
join("concatenate")
join("stack")
np.concat = np.concatenate

---------------------------------------------------------------------------
-- Sorting and searching: the registry's sort op (core/ops/sort.c)

local sort_keys, searchsorted_keys = {"axis", "kind", "order", "descending"}, {"side", "sorter"}
local unique_keys = {"return_index", "return_inverse", "return_counts", "axis"}
local sort_kinds = {quicksort = true, mergesort = true, heapsort = true, stable = true}

-- The values and the int64 positions of x sorted along axis (false: the
-- flattened array, NumPy's axis=None), the first k of them (0: all).
local function sorted(x, axis, descending, k, fname)
  if axis == false then x, axis = np.reshape(x, {-1}), 0 end
  local a = attrs()
  a.i[S.SORT_AXIS] = core.int_arg(axis, fname, "axis")
  a.i[S.SORT_DESCENDING] = descending and 1 or 0
  a.i[S.SORT_K], a.ni = k, S.SORT_K + 1
  local r = call(op.sort, {x}, a, nil, 2)
  return r[1], r[2]
end

-- sort(a, axis=-1, {kind, order, descending}) and argsort: axis false is
-- NumPy's None (flattened); every kind is the one stable sort.
local function sort_args(x, axis, kw, fname)
  check_array(x, fname, 1)
  if type(axis) == "table" then kw, axis = axis, nil end
  kw = options(kw, fname, sort_keys)
  if axis == nil then axis = kw.axis end
  if axis == nil then axis = -1 end
  if kw.kind ~= nil and not sort_kinds[kw.kind] then
    core.error(("%s: kind must be 'quicksort', 'mergesort', 'heapsort' or 'stable', got %s")
               :format(fname, core.show_value(kw.kind)))
  end
  if kw.order ~= nil then
    core.error(("%s: order names fields of structured arrays, which luon does not have"):format(fname))
  end
  return axis, kw.descending
end

function np.sort(x, axis, kw)
  local ax, desc = sort_args(x, axis, kw, "sort")
  return (sorted(x, ax, desc, 0, "sort"))
end

function np.argsort(x, axis, kw)
  local ax, desc = sort_args(x, axis, kw, "argsort")
  local _, idx = sorted(x, ax, desc, 0, "argsort")
  return idx
end

-- An int64 array of the Lua list t (0-based values) on device dev.
local function int64_array(t, dev)
  local n = #t
  local buf = ffi.new("int64_t[?]", n > 0 and n or 1)
  for k = 1, n do buf[k - 1] = t[k] end
  local sh = ffi.new("int64_t[1]", n)
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(buf, core.INT64, 1, sh, dev.type_id, dev.device_id, out))
  return core.wrap(out[0])
end

-- Whether host values u and w are one value (NaNs are one, as NumPy's unique).
local function same(u, w) return u == w or (u ~= u and w ~= w) end

-- The runs of equal rows among n rows in the order `order` (1-based list of
-- 0-based row numbers), equal(i, j) comparing rows i and j: the results of
-- np.unique as Lua lists (first row of each run, inverse, counts).
local function runs(order, n, equal)
  local firsts, inverse, counts = {}, {}, {}
  for p = 1, n do
    local r = order[p]
    if p == 1 or not equal(order[p - 1], r) then
      firsts[#firsts + 1], counts[#counts + 1] = r, 0
    end
    inverse[r + 1] = #firsts - 1
    counts[#counts] = counts[#counts] + 1
  end
  return firsts, inverse, counts
end

-- unique(ar, {return_index, return_inverse, return_counts, axis}): the
-- sorted unique values (or slices along axis), then the requested lists
-- as further results, in NumPy's order. The host reads the sorted values:
-- the result's length depends on them.
function np.unique(ar, kw)
  check_array(ar, "unique", 1)
  kw = options(kw, "unique", unique_keys)
  local dev = ar.device
  local order, n, equal, uniq
  if kw.axis == nil or kw.axis == false then -- flattened
    local vals, perm = sorted(ar, false, false, 0, "unique")
    local v = core.host_values(vals)
    local p = core.host_values(perm)
    n, order = vals.size, {}
    local pos = {} -- row number -> its place in the sorted order
    for k = 1, n do order[k] = tonumber(p[k - 1]); pos[order[k]] = k - 1 end
    equal = function(i, j) return same(v[pos[i]], v[pos[j]]) end
    uniq = function(firsts)
      local at = {}
      for k = 1, #firsts do at[k] = pos[firsts[k]] end
      return np.take(vals, int64_array(at, dev))
    end
  else
    local nd = ar.ndim
    local axis = core.int_arg(kw.axis, "unique", "axis")
    if axis < -nd or axis >= nd then
      core.error(("unique: axis %d is out of bounds for an array of dimension %d"):format(axis, nd))
    end
    if axis < 0 then axis = axis + nd end
    n = ar.shape[axis + 1]
    local rows = np.reshape(np.swapaxes(ar, 0, axis), {n, -1})
    local v = core.host_values(rows)
    local w = n > 0 and rows.size / n or 0
    local function cmp(i, j) -- row i before row j, lexicographically (NaN last); ties by position
      for c = 0, w - 1 do
        local a, b = v[i * w + c], v[j * w + c]
        if not same(a, b) then return a < b or (b ~= b) end
      end
      return i < j
    end
    order = {}
    for k = 1, n do order[k] = k - 1 end
    table.sort(order, cmp)
    equal = function(i, j)
      for c = 0, w - 1 do if not same(v[i * w + c], v[j * w + c]) then return false end end
      return true
    end
    uniq = function(firsts) return np.take(ar, int64_array(firsts, dev), axis) end
  end
  local firsts, inverse, counts = runs(order, n, equal)
  local res = {uniq(firsts)}
  if kw.return_index then res[#res + 1] = int64_array(firsts, dev) end
  if kw.return_inverse then res[#res + 1] = int64_array(inverse, dev) end
  if kw.return_counts then res[#res + 1] = int64_array(counts, dev) end
  return unpack(res)
end

-- searchsorted(a, v, {side = 'left', sorter}): a 1-d and sorted (or sorted
-- by the int64 positions sorter); v an array, or a number (then the result
-- is a Lua number, as MXNet returns a scalar).
function np.searchsorted(a, v, kw)
  check_array(a, "searchsorted", 1)
  kw = options(kw, "searchsorted", searchsorted_keys)
  local side = kw.side or "left"
  if side ~= "left" and side ~= "right" then
    core.error(("searchsorted: side must be 'left' or 'right', got %s"):format(core.show_value(side)))
  end
  if kw.sorter ~= nil then
    check_array(kw.sorter, "searchsorted", "sorter")
    local sdt = kw.sorter.dtype
    if sdt ~= "int64" and sdt ~= "int32" and sdt ~= "uint8" then
      core.error(("searchsorted: sorter must be an integer array, got %s"):format(sdt))
    end
    if kw.sorter.ndim ~= 1 or kw.sorter.shape[1] ~= a.size then
      core.error(("searchsorted: sorter must be 1-d with one position per element of a (%d), got shape %s")
                 :format(a.size, core.shape_text(kw.sorter.shape)))
    end
    a = np.take(a, kw.sorter, 0, {mode = "raise"})
  end
  local scalar = type(v) == "number"
  if scalar then v = np.array(v, {device = a.device, dtype = a.dtype})
  else check_array(v, "searchsorted", 2) end
  local at = attrs()
  at.i[S.SEARCHSORTED_RIGHT], at.ni = side == "right" and 1 or 0, S.SEARCHSORTED_RIGHT + 1
  local r = call(op.searchsorted, {a, v}, at)
  if scalar then return r:item() end
  return r
end

-- Layout: pad, diag, tril and triu are registry ops (core/ops/layout.c);
-- flip is a view (slice with step -1), and roll, tile, repeat and meshgrid
-- are compositions of slice, concatenate, reshape, broadcast_to and take,
-- exact, with those ops' gradients, each making one copy per axis it moves.

local OMIT = -9223372036854775807LL - 1 -- slice's "omitted" (INT64_MIN)
local SLICE_BEGIN, SLICE_END, SLICE_STEP = S.SLICE_BEGIN, S.SLICE_END, S.SLICE_STEP
local SLICE_W = SLICE_STEP + 1

-- axis as an index in [0, nd), or an error naming fname
local function axis_in(axis, nd, fname)
  core.int_arg(axis, fname, "axis")
  if axis < -nd or axis >= nd then
    core.error(("%s: axis %d is out of bounds for an array of dimension %d"):format(fname, axis, nd))
  end
  return axis < 0 and axis + nd or axis
end

-- A list of distinct axes (a number or a list), each in [0, nd); nil: all.
local function axes_in(axis, nd, fname)
  if axis == nil then
    local all = {}
    for d = 1, nd do all[d] = d - 1 end
    return all
  end
  if type(axis) ~= "table" then axis = {axis} end
  local out, seen = {}, {}
  for k = 1, #axis do
    local ax = axis_in(axis[k], nd, fname)
    if seen[ax] then core.error(("%s: repeated axis %d in %s"):format(fname, axis[k], core.show_value(axis))) end
    seen[ax] = true
    out[k] = ax
  end
  return out
end

-- x sliced along axes: ranges[ax] = {begin, end, step} (nil entries: the whole axis)
local function cut(x, ranges)
  local a = attrs()
  local last = -1
  for ax in pairs(ranges) do last = math.max(last, ax) end
  for d = 0, last do
    local r = ranges[d]
    local k = d * SLICE_W
    a.i[k + SLICE_BEGIN] = r and r[1] or OMIT
    a.i[k + SLICE_END] = r and r[2] or OMIT
    a.i[k + SLICE_STEP] = r and r[3] or 1
  end
  a.ni = (last + 1) * SLICE_W
  return call(op.slice, {x}, a)
end

-- flip(m, axis=nil | int | list): a view with the axes reversed (NumPy's
-- flip is a view too; MXNet's a copy)
function np.flip(m, axis, kw)
  check_array(m, "flip", 1)
  if type(axis) == "table" and axis[1] == nil and next(axis) ~= nil then kw, axis = axis, nil end
  kw = options(kw, "flip", axis_keys)
  if axis == nil then axis = kw.axis end
  local ranges = {}
  for _, ax in ipairs(axes_in(axis, m.ndim, "flip")) do ranges[ax] = {OMIT, OMIT, -1} end
  return cut(m, ranges)
end
function np.flipud(m)
  check_array(m, "flipud", 1)
  if m.ndim < 1 then core.error("flipud: the array must be at least 1-d, got a 0-d array") end
  return np.flip(m, 0)
end
function np.fliplr(m)
  check_array(m, "fliplr", 1)
  if m.ndim < 2 then
    core.error(("fliplr: the array must be at least 2-d, got shape %s"):format(core.shape_text(m.shape)))
  end
  return np.flip(m, 1)
end

-- roll(a, shift, axis=nil): a with its elements moved by shift along the
-- axes (a list of shifts with a list of axes, one shift for all of them);
-- without axes, along the flattened array, then reshaped back. Each axis:
-- the two pieces joined in their new order (slice + concatenate).
function np.roll(a, shift, axis, kw)
  check_array(a, "roll", 1)
  if type(axis) == "table" and axis[1] == nil and next(axis) ~= nil then kw, axis = axis, nil end
  kw = options(kw, "roll", axis_keys)
  if axis == nil then axis = kw.axis end
  if axis == nil then
    if type(shift) == "table" then
      core.error("roll: shift must be an integer when axis is nil (the array is rolled flattened)")
    end
    core.int_arg(shift, "roll", "shift")
    return np.reshape(np.roll(np.reshape(a, {-1}), shift, 0), a.shape)
  end
  local axes = axes_in(axis, a.ndim, "roll")
  local shifts = type(shift) == "table" and shift or {}
  if type(shift) == "table" then
    if type(axis) ~= "table" or #shift ~= #axes then
      core.error(("roll: shift %s and axis %s must be lists of the same length"):format(
        core.show_value(shift), core.show_value(axis)))
    end
  else
    for k = 1, #axes do shifts[k] = shift end
  end
  local y, moved = a, false
  for k, ax in ipairs(axes) do
    local s, n = core.int_arg(shifts[k], "roll", "shift"), a.shape[ax + 1]
    s = n > 0 and s % n or 0
    if s ~= 0 then
      y = np.concatenate({cut(y, {[ax] = {n - s, n, 1}}), cut(y, {[ax] = {0, n - s, 1}})}, ax)
      moved = true
    end
  end
  return moved and y or a:copy()
end

-- A copy of a list (a shape that the caller goes on changing).
local function copy_list(t)
  local s = {}
  for k = 1, #t do s[k] = t[k] end
  return s
end

-- x with axis ax (length n) made (outer, n, inner) and broadcast to r
-- copies, before (tile) or after (repeat) the axis, then reshaped to
-- shape: one copy.
local function replicate(x, ax, r, before, shape)
  local xs = x.shape
  local outer, inner = 1, 1
  for d = 1, ax do outer = outer * xs[d] end
  for d = ax + 2, #xs do inner = inner * xs[d] end
  local n = xs[ax + 1]
  local from = before and {outer, 1, n, inner} or {outer, n, 1, inner}
  local to = before and {outer, r, n, inner} or {outer, n, r, inner}
  return np.reshape(np.broadcast_to(np.reshape(x, from), to), shape)
end

-- tile(A, reps): A repeated reps[d] times along each axis (reps an integer
-- or a list; the shorter of A's shape and reps padded with ones in front)
function np.tile(...)
  local A, reps = ...
  if not (select("#", ...) == 2 and type(reps) == "table" and next(reps) == nil) then -- tile(A, {}): no reps
    local o = core.args("tile", {"A", "reps"}, {"A", "reps"}, ...)
    A, reps = o.A, o.reps
  end
  check_array(A, "tile", 1)
  if type(reps) == "number" then reps = {reps} end
  if type(reps) ~= "table" then core.error(("tile: reps must be an integer or a list of them, got %s")
                                           :format(core.show_value(reps))) end
  for k = 1, #reps do core.int_arg(reps[k], "tile", "each of reps", 0) end
  local nd = math.max(#reps, A.ndim)
  if nd > 8 then core.error(("tile: the result would have %d dimensions, at most 8 are supported"):format(nd)) end
  local shape, r = {}, {}
  for d = 1, nd do
    shape[d] = d > nd - A.ndim and A.shape[d - (nd - A.ndim)] or 1
    r[d] = d > nd - #reps and reps[d - (nd - #reps)] or 1
  end
  local y = np.reshape(A, shape)
  local moved = false
  for d = 1, nd do
    if r[d] ~= 1 then
      shape[d] = shape[d] * r[d]
      y = replicate(y, d - 1, r[d], true, copy_list(shape))
      moved = true
    end
  end
  return moved and y or y:copy()
end

-- repeat(a, repeats, axis=nil): each element repeats[i] times along axis
-- (an integer, or a list with one count per element: NumPy's; MXNet 1.9.1
-- takes an integer only); without an axis, of the flattened array.
-- np["repeat"] (a Lua keyword), np.repeat_interleave (PyTorch's name).
np["repeat"] = function(a, repeats, axis, kw)
  check_array(a, "repeat", 1)
  if type(axis) == "table" then kw, axis = axis, nil end
  kw = options(kw, "repeat", axis_keys)
  if axis == nil then axis = kw.axis end
  if axis == nil then a, axis = np.reshape(a, {-1}), 0 end
  local ax = axis_in(axis, a.ndim, "repeat")
  local n = a.shape[ax + 1]
  if type(repeats) == "table" and #repeats == 1 then repeats = repeats[1] end
  if type(repeats) == "number" then
    core.int_arg(repeats, "repeat", "repeats", 0)
    local shape = a.shape
    shape[ax + 1] = n * repeats
    return replicate(a, ax, repeats, false, shape)
  end
  if type(repeats) ~= "table" then
    core.error(("repeat: repeats must be an integer or a list of them, got %s"):format(core.show_value(repeats)))
  end
  if #repeats ~= n then
    core.error(("repeat: %d repeats given for axis %d of length %d (shape %s)")
               :format(#repeats, ax, n, core.shape_text(a.shape)))
  end
  local idx = {}
  for i = 1, n do
    for _ = 1, core.int_arg(repeats[i], "repeat", "each of repeats", 0) do idx[#idx + 1] = i - 1 end
  end
  local t = #idx > 0 and np.array(idx, {dtype = "int64", device = a.device})
            or np.zeros({0}, {dtype = "int64", device = a.device})
  return np.take(a, t, ax)
end
np.repeat_interleave = np["repeat"]

-- pad(x, pad_width, mode='constant', {constant_values=0, reflect_type='even'}):
-- pad_width as NumPy's: n, {n}, {before, after}, {{before, after}} (every
-- axis) or one {before, after} per axis. mode as a keyword too.
local pad_modes = {constant = 0, edge = 1, reflect = 2, symmetric = 3}
local pad_keys = {"mode", "constant_values", "reflect_type"}

local function width_pair(v, fname)
  if type(v) == "number" then v = {v, v} end
  if type(v) ~= "table" or (#v ~= 1 and #v ~= 2) then
    core.error(("%s: each pad width must be an integer or a {before, after} pair, got %s")
               :format(fname, core.show_value(v)))
  end
  local b, e = v[1], v[#v]
  return core.int_arg(b, fname, "a pad width", 0), core.int_arg(e, fname, "a pad width", 0)
end

-- pad's widths as a flat list (before, after per axis) for nd axes.
local function pad_widths(pw, nd, fname)
  local pairs_ = {}
  if type(pw) == "number" or (type(pw) == "table" and #pw >= 1 and type(pw[1]) == "number") then
    if type(pw) == "table" and #pw > 2 then
      core.error(("%s: pad_width %s: a flat list holds one width or (before, after); give one "
                  .. "{before, after} per axis as a list of pairs"):format(fname, "{" .. table.concat(core.map_show(pw), ", ") .. "}"))
    end
    local b, e = width_pair(pw, fname)
    for d = 1, nd do pairs_[d] = {b, e} end
  elseif type(pw) == "table" and #pw == 1 then
    local b, e = width_pair(pw[1], fname)
    for d = 1, nd do pairs_[d] = {b, e} end
  elseif type(pw) == "table" and #pw == nd then
    for d = 1, nd do pairs_[d] = {width_pair(pw[d], fname)} end
  else
    core.error(("%s: pad_width must be an integer, {before, after} or one {before, after} per axis "
                .. "(%d axes), got %s"):format(fname, nd, type(pw) == "table" and ("a list of " .. #pw) or core.show_value(pw)))
  end
  local flat = {}
  for d = 1, nd do flat[2 * d - 1], flat[2 * d] = pairs_[d][1], pairs_[d][2] end
  return flat
end

-- The modes 'maximum' and 'minimum' are reductions and concatenations, no
-- kernel of their own: along each axis in turn (NumPy's order), that axis'
-- max (min) over the unpadded span, of x already padded along the earlier
-- axes (which sets the corners). Their gradient goes to the extreme
-- elements (MXNet 1.9.1 has none for these modes).
local pad_stats = {maximum = "max", minimum = "min"}
local function pad_stat(x, widths, mode)
  local padded = false
  for d = 1, x.ndim do
    local b, e = widths[2 * d - 1], widths[2 * d]
    if b > 0 or e > 0 then
      local s = {unpack(x.shape)}
      if s[d] == 0 then
        core.error(("pad: mode '%s' cannot pad axis %d of length 0 (shape %s)"):format(mode, d - 1, core.shape_text(s)))
      end
      local m = np[pad_stats[mode]](x, d - 1, {keepdims = true})
      local parts = {}
      local function side(w)
        s[d] = w
        parts[#parts + 1] = np.broadcast_to(m, s)
      end
      if b > 0 then side(b) end
      parts[#parts + 1] = x
      if e > 0 then side(e) end
      x = np.concatenate(parts, d - 1)
      padded = true
    end
  end
  return padded and x or x:copy()
end

function np.pad(x, pad_width, mode, kw)
  check_array(x, "pad", 1)
  if type(mode) == "table" then kw, mode = mode, nil end
  kw = options(kw, "pad", pad_keys)
  if mode ~= nil and kw.mode ~= nil and mode ~= kw.mode then
    core.error(("pad: mode given twice, %s and %s"):format(core.show_value(mode), core.show_value(kw.mode)))
  end
  mode = mode or kw.mode or "constant"
  local id = pad_modes[mode]
  if not id and not pad_stats[mode] then
    core.error(("pad: mode %s is not supported (luon has 'constant', 'edge', 'reflect', 'symmetric', "
                .. "'maximum', 'minimum')"):format(core.show_value(mode)))
  end
  if kw.constant_values ~= nil and mode ~= "constant" then
    core.error(("pad: constant_values is an option of mode 'constant', not %s"):format(core.show_value(mode)))
  end
  if kw.reflect_type ~= nil and (kw.reflect_type ~= "even" or (mode ~= "reflect" and mode ~= "symmetric")) then
    core.error(("pad: reflect_type can only be 'even' (with mode 'reflect' or 'symmetric'), got %s")
               :format(core.show_value(kw.reflect_type)))
  end
  local widths = pad_widths(pad_width, x.ndim, "pad")
  if pad_stats[mode] then return pad_stat(x, widths, mode) end
  local a = attrs()
  a.i[S.PAD_MODE] = id
  core.set_ints(a, widths, S.PAD_WIDTHS, "pad")
  a.f[S.PAD_VALUE] = core.num_arg(kw.constant_values or 0, "pad", "constant_values")
  return call(op.pad, {x}, a)
end

-- diag(v, k=0): 1-d -> a matrix with v on diagonal k; 2-d -> diagonal k
function np.diag(v, k)
  check_array(v, "diag", 1)
  local a = attrs()
  a.i[S.DIAG_K], a.ni = core.int_arg(k or 0, "diag", "k"), S.DIAG_K + 1
  return call(op.diag, {v}, a)
end

-- tril(m, k=0), triu(m, k=0): the last two axes' lower / upper triangle
for _, name in ipairs({"tril", "triu"}) do
  local id = op[name]
  np[name] = function(m, k)
    check_array(m, name, 1)
    local a = attrs()
    a.i[S.TRI_K], a.ni = core.int_arg(k or 0, name, "k"), S.TRI_K + 1
    return call(id, {m}, a)
  end
end

-- meshgrid(x1, x2, ..., {indexing='xy', sparse=false}): coordinate arrays,
-- one per input (each flattened), as multiple return values. 'xy' swaps
-- the first two axes of the result (Cartesian), 'ij' does not (matrix).
-- Each result is its own array (a copy of a broadcast), as MXNet's.
function np.meshgrid(...)
  local kw, n = core.kw(...)
  kw = options(kw, "meshgrid", {"indexing", "sparse"})
  local indexing = kw.indexing or "xy"
  if indexing ~= "xy" and indexing ~= "ij" then
    core.error(("meshgrid: indexing must be 'xy' or 'ij', got %s"):format(core.show_value(indexing)))
  end
  if n > 8 then core.error(("meshgrid: %d arrays, at most 8 (the result's dimensions)"):format(n)) end
  local xs, full = {}, {}
  for k = 1, n do
    xs[k] = np.reshape(check_array((select(k, ...)), "meshgrid", k), {-1})
    full[k] = xs[k].shape[1]
  end
  local pos = {}
  for k = 1, n do pos[k] = k end
  if indexing == "xy" and n >= 2 then
    pos[1], pos[2] = 2, 1
    full[1], full[2] = full[2], full[1]
  end
  local outs = {}
  for k = 1, n do
    local s = {}
    for d = 1, n do s[d] = 1 end
    s[pos[k]] = xs[k].shape[1]
    local y = np.reshape(xs[k], s)
    outs[k] = kw.sparse and y:copy() or np.broadcast_to(y, full):copy()
  end
  return unpack(outs, 1, n)
end

function np.matmul(a, b)
  check_array(a, "matmul", 1)
  check_array(b, "matmul", 2)
  return call(op.matmul, {a, b})
end

-- dot, vdot, inner, outer, tensordot, einsum: compositions of matmul
require("luon.np_linalg").install(np)

core.strict_module(np.random, "np.random")
return core.strict_module(np, "np")
