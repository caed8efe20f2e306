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
local EXPAND_DIMS_AXIS, SQUEEZE_AXES = S.EXPAND_DIMS_AXIS, S.SQUEEZE_AXES
local SPLIT_AXIS, SPLIT_BOUNDS = S.SPLIT_AXIS, S.SPLIT_BOUNDS
local TAKE_AXIS, TAKE_MODE = S.TAKE_AXIS, S.TAKE_MODE
local join_axis = {concatenate = S.CONCAT_AXIS, stack = S.STACK_AXIS}

local np = {}
np.random = {}

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

function np.zeros(shape, kw) return full(shape, 0, kw or {}, "zeros") end
function np.ones(shape, kw) return full(shape, 1, kw or {}, "ones") end
function np.full(shape, value, kw)
  if type(value) == "boolean" then value = value and 1 or 0 end
  if type(value) ~= "number" then
    core.error(("full: fill value must be a number, got %s"):format(type(value)))
  end
  return full(shape, value, kw or {}, "full")
end
function np.empty(shape, kw)
  kw = options(kw, "empty", base_kw)
  shape = core.shape_arg(shape, "empty")
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

-- arange(stop) | arange(start, stop) | arange(start, stop, step), then kw.
function np.arange(...)
  local kw, n = kw_of(...)
  local a1, a2, a3 = ...
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
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) ~= "number" then
    core.error(("%s: operands must be ndarrays or numbers, got %s"):format(fname, type(v)))
  end
  local info = core.info_of(x)
  local dt = with_scalar(info.dtype, v)
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

local function binary(name)
  local id = op[name]
  local f = function(a, b)
    if is_array(a) then
      if is_array(b) then return call2(id, a, b) end
      return call2(id, a, scalar_for(b, a, name))
    elseif is_array(b) then
      return call2(id, scalar_for(a, b, name), b)
    end
    -- two plain numbers: a 0-d result on the default device
    return call2(id, operand(a, name, 1), operand(b, name, 2))
  end
  np[name] = f
  return f
end

local function unary(name)
  local id = op[name]
  np[name] = function(x)
    if not is_array(x) then x = operand(x, name, 1) end
    return call1(id, x)
  end
end
-- the registry's elementwise np functions (LU_NP_MAP): two inputs binary, one unary
for _, name in ipairs(core.ops_with("np_map")) do
  if core.op_info[name].nin == 2 then binary(name) else unary(name) end
end
np.true_divide = np.divide
np.absolute = np.abs

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
  local mode = modes[kw.mode or "clip"]
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

function np.matmul(a, b)
  check_array(a, "matmul", 1)
  check_array(b, "matmul", 2)
  return call(op.matmul, {a, b})
end

-- dot: NumPy's dot for 0-d (multiply), 1-d and 2-d operands (matmul), and
-- N-d with 1-d or 2-d (sum over the last axis of a and the second-to-last of b).
function np.dot(a, b)
  check_array(a, "dot", 1)
  check_array(b, "dot", 2)
  local na, nb = a.ndim, b.ndim
  if na == 0 or nb == 0 then return np.multiply(a, b) end
  if nb <= 2 then return call(op.matmul, {a, b}) end
  -- b N-d: move b's second-to-last axis to the front and flatten the rest
  local bs = b.shape
  local perm = {nb - 2}
  for k = 0, nb - 1 do if k ~= nb - 2 then perm[#perm + 1] = k end end
  local b2 = np.reshape(np.transpose(b, perm), {bs[nb - 1], -1})
  local r = call(op.matmul, {a, b2})
  local shape = {}
  local as = a.shape
  for k = 1, na - 1 do shape[#shape + 1] = as[k] end
  for k = 1, nb do if k ~= nb - 1 then shape[#shape + 1] = bs[k] end end
  return np.reshape(r, shape)
end

core.strict_module(np.random, "np.random")
return core.strict_module(np, "np")
