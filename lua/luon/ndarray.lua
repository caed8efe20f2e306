-- luon.ndarray: the ndarray type. An ndarray is a `luon_array` cdata (a
-- struct holding the C tensor pointer, released through core's GC
-- registry); this module gives it properties (.shape, .dtype,
-- .device, .size, .ndim), methods, operators and NumPy-like printing.
local core = require("luon.core")
local np = require("luon.np")
local indexing = require("luon.indexing")
local ffi, C = core.ffi, core.C
local is_array = core.is_array

local methods = {}
local props = {}

---------------------------------------------------------------------------
-- Properties

local info_of = core.info_of

function props.shape(x)
  local info = info_of(x)
  local s = {}
  for k = 0, info.ndim - 1 do s[k + 1] = tonumber(info.shape[k]) end
  return s
end
function props.ndim(x) return info_of(x).ndim end
function props.size(x) return tonumber(info_of(x).size) end
function props.dtype(x) return core.dtype_names[info_of(x).dtype] end
function props.device(x)
  local info = info_of(x)
  return core.device_from_ids(info.dev_type, info.dev_id)
end
props.ctx = props.device
props.context = props.device
function props.T(x) return np.transpose(x) end
function props.strides(x)
  local info = info_of(x)
  local s = {}
  for k = 0, info.ndim - 1 do s[k + 1] = tonumber(info.strides[k]) end
  return s
end

---------------------------------------------------------------------------
-- Methods from np: x:sum(...) is np.sum(x, ...)

for _, name in ipairs({"sum", "mean", "max", "min", "prod", "argmax", "argmin", "reshape",
                       "transpose", "swapaxes", "expand_dims", "squeeze", "broadcast_to",
                       "split", "take", "clip", "abs", "exp", "log", "sqrt", "square", "tanh",
                       "sign", "negative", "matmul", "dot", "ravel",
                       "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                       "add", "subtract", "multiply", "divide", "power", "maximum", "minimum"}) do
  methods[name] = np[name]
end
methods.flatten = np.ravel

function methods.astype(x, dtype, kw)
  local dt = core.dtype_id(dtype, "astype", 2)
  if dt == nil then error("astype: a dtype is required", 2) end
  if kw and kw.copy == false and info_of(x).dtype == dt then return x end
  local a = core.attrs()
  a.dtype = dt
  return core.call(core.op_ids.copy, {x}, a, 2)
end

function methods.copy(x)
  return core.call(core.op_ids.copy, {x}, nil, 2)
end

-- copyto(device): a new array there. copyto(array): copy into it, return it.
function methods.copyto(x, other)
  info_of(x) -- x is an array
  if is_array(other) then
    if other.t == x.t then return other end
    core.check(C.luon_tensor_copy(other.t, x.t), 2)
    return other
  end
  if core.is_device(other) then
    local dev = core.resolve_device(other, "copyto", 2)
    local info = info_of(x)
    local sh = ffi.new("int64_t[8]")
    for k = 0, info.ndim - 1 do sh[k] = info.shape[k] end
    local out = ffi.new("luon_tensor*[1]")
    core.check(C.luon_tensor_empty(info.dtype, info.ndim, sh, dev.type_id, dev.device_id, out), 2)
    local r = core.wrap(out[0])
    core.check(C.luon_tensor_copy(r.t, x.t), 2)
    return r
  end
  error(("copyto: expected a Device or an ndarray, got %s"):format(type(other)), 2)
end

function methods.to_device(x, dev)
  if dev == nil then core.error("as_in_context: expected a device such as npx.gpu(0), got nil") end
  dev = core.resolve_device(dev, "to_device", 2)
  if x.device == dev then return x end
  return methods.copyto(x, dev)
end
methods.as_in_context = methods.to_device
methods.as_in_ctx = methods.to_device

-- A host copy (on cpu(0)), as MXNet's asnumpy.
function methods.asnumpy(x)
  return methods.copyto(x, core.device("cpu", 0))
end

function methods.wait_to_read(x)
  info_of(x) -- x is an array
  core.check(C.luon_tensor_wait(x.t), 2)
  return x
end

-- Values into a flat Lua array of numbers (float64 view of any dtype).
local function host_values(x)
  local info = info_of(x)
  local n = tonumber(info.size)
  local is_bool = info.dtype == core.BOOL
  local is_int = info.dtype == core.INT64
  local buf, dt
  if is_int then
    buf, dt = ffi.new("int64_t[?]", n > 0 and n or 1), core.INT64
  else
    buf, dt = ffi.new("double[?]", n > 0 and n or 1), core.FLOAT64
  end
  core.check(C.luon_tensor_to_host(x.t, buf, dt, ffi.sizeof(buf)), 3)
  return buf, n, is_bool, is_int
end

function methods.item(x)
  local n = tonumber(info_of(x).size)
  if n ~= 1 then
    error(("item: only size-1 arrays can be converted to a Lua number (this one has shape %s)")
          :format("(" .. table.concat(x.shape, ",") .. (x.ndim == 1 and ",)" or ")")), 2)
  end
  local buf, _, is_bool = host_values(x)
  if is_bool then return buf[0] ~= 0 end
  return tonumber(buf[0])
end

function methods.totable(x)
  info_of(x) -- x is an array
  local shape = x.shape
  local buf, _, is_bool = host_values(x)
  local pos = 0
  local function build(d)
    if d > #shape then
      local v = buf[pos]
      pos = pos + 1
      if is_bool then return v ~= 0 end
      return tonumber(v)
    end
    local t = {}
    for k = 1, shape[d] do t[k] = build(d + 1) end
    return t
  end
  return build(1)
end
methods.tolist = methods.totable

-- x:set(v): fill x, an array or a view, with v (broadcast) in place.
methods.set = indexing.fill

-- Row i (0-based, negative from the end) of axis 0: a view.
function methods.at(x, i)
  return methods.slice(x, i)
end

local OMIT = -9223372036854775807LL - 1

-- A start, stop or step of index k: an integer; past +-2^62 it clamps, as
-- NumPy's do at the axis, rather than reach the FFI's conversion (1e30
-- became OMIT).
local function slice_bound(v, k, what)
  if type(v) ~= "number" or v % 1 ~= 0 then
    core.error(("slice: %s of index %d must be an integer, got %s"):format(what, k, core.show_value(v)))
  end
  return math.max(math.min(v, 2^62), -2^62)
end

-- slice(spec1, spec2, ...): one spec per axis from axis 0. A number picks
-- one index (the axis goes away); a list {start, stop, step} is a Python
-- slice (nil parts are omitted: {nil, nil, -1} reverses); true or {} keeps
-- the whole axis.
function methods.slice(x, ...)
  info_of(x) -- x is an array
  local specs = {...}
  local nspec = select("#", ...)
  local shape = x.shape
  if nspec > #shape then
    error(("slice: %d indices for an array of dimension %d"):format(nspec, #shape), 2)
  end
  local a = core.attrs()
  local drop = {}
  for k = 1, nspec do
    local s = specs[k]
    local b, e, st
    if type(s) == "number" then
      if s % 1 ~= 0 then error(("slice: index %s is not an integer"):format(s), 2) end
      local n = shape[k]
      local i = s < 0 and s + n or s
      if i < 0 or i >= n then
        error(("slice: index %s is out of bounds for axis %d with size %d")
              :format(core.is_int(s) and ("%d"):format(s) or ("%.17g"):format(s), k - 1, n), 2)
      end
      b, e, st = i, i + 1, 1
      drop[#drop + 1] = k - 1
    elseif s == true or s == nil then
      b, e, st = OMIT, OMIT, 1
    elseif type(s) == "table" then
      b = s[1] == nil and OMIT or slice_bound(s[1], k, "the start")
      e = s[2] == nil and OMIT or slice_bound(s[2], k, "the stop")
      st = s[3] == nil and 1 or slice_bound(s[3], k, "the step")
    else
      error(("slice: index %d must be a number, a {start, stop, step} list or true, got %s")
            :format(k, type(s)), 2)
    end
    a.i[3 * (k - 1)], a.i[3 * (k - 1) + 1], a.i[3 * (k - 1) + 2] = b, e, st
  end
  a.ni = 3 * nspec
  local r = core.call(core.op_ids.slice, {x}, a, 2)
  if #drop > 0 then
    local a2 = core.attrs()
    core.set_ints(a2, drop, 0, "slice", 2)
    r = core.call(core.op_ids.squeeze, {r}, a2, 2)
  end
  return r
end

---------------------------------------------------------------------------
-- Printing, NumPy style: "[[1. 2.]\n [3. 4.]]", then " @gpu(0)" for every
-- device but cpu(0). Large arrays are summarised with "...".

local function fmt_float(v)
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" end
  if v == -math.huge then return "-inf" end
  return nil
end

local function formatter(buf, n, is_bool, is_int)
  if is_bool then return function(v) return v ~= 0 and "True" or "False" end end
  if is_int then return function(v) return tostring(v):gsub("LL$", "") end end
  local integral, maxabs, minabs = true, 0, math.huge
  for k = 0, n - 1 do
    local v = buf[k]
    if v == v and v ~= math.huge and v ~= -math.huge then
      if v % 1 ~= 0 then integral = false end
      local av = math.abs(v)
      if av > maxabs then maxabs = av end
      if av ~= 0 and av < minabs then minabs = av end
    end
  end
  local sci = maxabs >= 1e8 or (minabs < 1e-4 and not integral)
  if sci then
    return function(v)
      return fmt_float(v) or ("%.4e"):format(v)
    end
  end
  if integral then
    return function(v) return fmt_float(v) or ("%d."):format(v) end
  end
  return function(v)
    local s = fmt_float(v)
    if s then return s end
    s = ("%.4f"):format(v):gsub("0+$", "")
    return s
  end
end

local function is_dtype_int(info)
  local d = info.dtype
  return d == core.INT32 or d == core.INT64 or d == core.UINT8
end

-- Past 1000 elements (NumPy's threshold) only the first and last 3 entries
-- of each longer axis are shown: those are taken on the device first
-- (longest axis first, so no step grows), and only they come to the host.
local function edges(x, shape)
  local axes = {}
  for d = 1, #shape do if shape[d] > 6 then axes[#axes + 1] = d end end
  table.sort(axes, function(a, b) return shape[a] > shape[b] end)
  for _, d in ipairs(axes) do
    local len = shape[d]
    x = np.take(x, {0, 1, 2, len - 3, len - 2, len - 1}, d - 1)
  end
  return x
end

local function format_values(x)
  local info = info_of(x)
  local shape = x.shape
  local summarise = tonumber(info.size) > 1000
  local shown = x
  if summarise then -- not recorded: printing is no part of a graph
    local was = C.luon_autograd_set_recording(0)
    local ok, r = pcall(edges, x, shape)
    C.luon_autograd_set_recording(was)
    if not ok then error(r, 0) end
    shown = r
  end
  local rshape = shown.shape -- shape, with every axis longer than 6 cut to 6 when summarised
  local buf, n, is_bool = host_values(shown)
  local f = formatter(buf, n, is_bool, is_dtype_int(info))
  local strs, width = {}, 0
  for k = 0, n - 1 do
    local s = f(buf[k])
    strs[k] = s
    if #s > width then width = #s end
  end
  if #shape == 0 then return strs[0] or "" end
  local strides = {}
  local acc = 1
  for d = #rshape, 1, -1 do strides[d] = acc; acc = acc * rshape[d] end
  local function render(d, base, indent)
    local parts = {}
    local len = rshape[d]
    local function item(k)
      if d == #shape then
        local s = strs[base + k]
        return (" "):rep(width - #s) .. s
      end
      return render(d + 1, base + k * strides[d], indent .. " ")
    end
    local sep = d == #shape and " " or ("\n"):rep(#shape - d) .. indent .. " "
    if summarise and shape[d] > 6 then
      for k = 0, 2 do parts[#parts + 1] = item(k) end
      parts[#parts + 1] = "..."
      for k = 3, 5 do parts[#parts + 1] = item(k) end
    else
      for k = 0, len - 1 do parts[#parts + 1] = item(k) end
    end
    return "[" .. table.concat(parts, sep) .. "]"
  end
  return render(1, 0, "")
end

local function tostring_array(x)
  local s = format_values(x)
  local info = info_of(x)
  if info.ndim > 0 and not (info.dev_type == 1 and info.dev_id == 0) then
    s = s .. " @" .. tostring(core.device_from_ids(info.dev_type, info.dev_id))
  end
  return s
end

---------------------------------------------------------------------------
-- The metatype

local add, sub, mul, div, pow = np.add, np.subtract, np.multiply, np.divide, np.power
local neg_id = core.op_ids.negative
local call1 = core.call1

-- The metatype also reaches pointers to the struct (a cast by the user);
-- those have no tensor to read, so metamethods that read one refuse them.
local function not_pointer(x)
  if not is_array(x) then
    core.error(("ndarray: expected an ndarray, got a %s"):format(core.show_value(x)))
  end
  return x
end

local mt = {
  __index = function(x, k)
    local m = methods[k]
    if m then return m end
    local p = props[k]
    if p then return p(not_pointer(x)) end
    if type(k) == "number" then return methods.slice(x, k) end -- x[i]: row i, 0-based
    if type(k) ~= "string" then return indexing.get(x, k) end -- x[{...}], x[idx], x[mask]
    return nil
  end,
  __add = add,
  __sub = sub,
  __mul = mul,
  __div = div,
  __pow = pow,
  __unm = function(x) return call1(neg_id, not_pointer(x)) end,
  __len = function(x)
    local info = info_of(not_pointer(x))
    if info.ndim == 0 then error("len() of a 0-d array", 2) end
    return tonumber(info.shape[0])
  end,
  __tostring = function(x) return tostring_array(not_pointer(x)) end,
  __concat = function(a, b) return tostring(a) .. tostring(b) end,
  -- Lua turns what < and <= return into one boolean, so they cannot be
  -- NumPy's elementwise comparisons; %, and assignment to x[i] or x.name,
  -- have no ndarray meaning here: each says what to use instead
  __lt = function() error("ndarray: Lua's < and > give one boolean, not an array: use np.less(x, y) or np.greater(x, y) (and :item() for one value)", 2) end,
  __le = function() error("ndarray: Lua's <= and >= give one boolean, not an array: use np.less_equal(x, y) or np.greater_equal(x, y) (and :item() for one value)", 2) end,
  __mod = function() error("ndarray: % is not defined for arrays (luon has no elementwise remainder)", 2) end,
  __newindex = function(x, k, v)
    if type(k) ~= "string" then return indexing.set(x, k, v) end -- x[i], x[{...}], x[idx], x[mask] = v
    error(("ndarray: cannot set field %s: arrays are FFI objects with fixed fields (keep extra data in a table)")
          :format(core.show_value(k)), 2)
  end,
}
ffi.metatype("struct luon_array", mt)

return {methods = methods, props = props}
