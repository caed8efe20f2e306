-- luon.ndarray: the ndarray type. An ndarray is a `luon_array` cdata (a
-- struct holding the C tensor pointer, released through core's GC
-- registry); this module gives it properties (.shape, .dtype,
-- .device, .size, .ndim), methods, operators and NumPy-like printing.
local core = require("luon.core")
local np = require("luon.np")
local indexing = require("luon.indexing")
local ffi, C = core.ffi, core.C
local is_array = core.is_array
local show = require("luon.ndarray_print")
np.set_printoptions, np.get_printoptions = show.set_printoptions, show.get_printoptions

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

for _, name in ipairs(core.ops_with("method")) do -- the registry's LU_METHOD ops
  methods[name] = np[name] or error("luon_ops.def: " .. name .. " is LU_METHOD but np." .. name .. " does not exist")
end
for _, name in ipairs({"swapaxes", "dot", "ravel", "argsort", "var", "std", "cumsum", "any", "all", "tile", "flip",
                      "repeat", "repeat_interleave"}) do -- Lua-level functions
  methods[name] = np[name]
end
methods.flatten = np.ravel

function methods.astype(x, dtype, kw)
  local dt = core.dtype_id(dtype, "astype")
  if dt == nil then core.error("astype: a dtype is required") end
  if kw and kw.copy == false and info_of(x).dtype == dt then return x end
  local a = core.attrs()
  a.dtype = dt
  return core.call(core.op_ids.copy, {x}, a)
end

function methods.copy(x)
  return core.call(core.op_ids.copy, {x})
end

-- copyto(device): a new array there (differentiable while recording, as
-- MXNet's). copyto(array): copy into it, return it.
function methods.copyto(x, other)
  info_of(x) -- x is an array
  if is_array(other) then
    if other.t == x.t then return other end
    core.check(C.luon_tensor_copy(other.t, x.t))
    return other
  end
  if core.is_device(other) then
    local dev = core.resolve_device(other, "copyto")
    local a = core.attrs()
    a.dev_type, a.dev_id = dev.type_id, dev.device_id
    return core.call(core.op_ids.copyto, {x}, a) -- recorded, as MXNet's _copyto
  end
  core.error(("copyto: expected a Device or an ndarray, got %s"):format(type(other)))
end

function methods.to_device(x, dev)
  if dev == nil then core.error("as_in_context: expected a device such as npx.gpu(0), got nil") end
  dev = core.resolve_device(dev, "to_device")
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
  core.check(C.luon_tensor_wait(x.t))
  return x
end

local host_values = core.host_values

function methods.item(x)
  local n = tonumber(info_of(x).size)
  if n ~= 1 then
    core.error(("item: only size-1 arrays can be converted to a Lua number (this one has shape %s)")
               :format(core.shape_text(x.shape)))
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
-- slice's slots (core/luon_ops.def): a triple per axis, SLICE_W slots wide
local SLICE_BEGIN, SLICE_END, SLICE_STEP = core.slot.SLICE_BEGIN, core.slot.SLICE_END, core.slot.SLICE_STEP
local SLICE_W, SQUEEZE_AXES = SLICE_STEP + 1, core.slot.SQUEEZE_AXES

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
    core.error(("slice: %d indices for an array of dimension %d"):format(nspec, #shape))
  end
  local a = core.attrs()
  local drop = {}
  for k = 1, nspec do
    local s = specs[k]
    local b, e, st
    if type(s) == "number" then
      if s % 1 ~= 0 then core.error(("slice: index %s is not an integer"):format(s)) end
      local n = shape[k]
      local i = s < 0 and s + n or s
      if i < 0 or i >= n then
        core.error(("slice: index %s is out of bounds for axis %d with size %d")
              :format(core.is_int(s) and ("%d"):format(s) or ("%.17g"):format(s), k - 1, n))
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
      core.error(("slice: index %d must be a number, a {start, stop, step} list or true, got %s")
            :format(k, type(s)))
    end
    local t = SLICE_W * (k - 1)
    a.i[t + SLICE_BEGIN], a.i[t + SLICE_END], a.i[t + SLICE_STEP] = b, e, st
  end
  a.ni = SLICE_W * nspec
  local r = core.call(core.op_ids.slice, {x}, a)
  if #drop > 0 then
    local a2 = core.attrs()
    core.set_ints(a2, drop, SQUEEZE_AXES, "slice")
    r = core.call(core.op_ids.squeeze, {r}, a2)
  end
  return r
end

---------------------------------------------------------------------------
-- The metatype

local add, sub, mul, div, pow, mod = np.add, np.subtract, np.multiply, np.divide, np.power, np.mod
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

-- x.shap, x:sumn(): an error naming the close names.
local function unknown_field(k)
  local names = {}
  for n in pairs(methods) do names[#names + 1] = n end
  for n in pairs(props) do names[#names + 1] = n end
  core.no_field("ndarray", k, names)
end

-- LuaJIT calls __eq for every == with an array (x == x and x == nil too)
-- and makes one boolean of what it returns, so == cannot be NumPy's
-- elementwise equal: beside an array or a number it is an error naming
-- what to use; beside nil, a string, a table... it is false.
local function numeric(v)
  local t = type(v)
  return t == "number" or t == "boolean" or (t == "cdata" and is_array(v))
end
local function eq(a, b)
  if numeric(a) and numeric(b) then
    core.error("ndarray: Lua's == gives one boolean, not an array: use x:equal(y) or np.equal(x, y) " ..
               "for elementwise equality, rawequal(x, y) for the same array, and :item() for one value")
  end
  return false
end

local mt = {
  __index = function(x, k)
    local m = methods[k]
    if m then return m end
    local p = props[k]
    if p then return p(not_pointer(x)) end
    if type(k) == "number" then return methods.slice(x, k) end -- x[i]: row i, 0-based
    if type(k) ~= "string" then return indexing.get(x, k) end -- x[{...}], x[idx], x[mask]
    unknown_field(k)
    return nil
  end,
  __add = add,
  __sub = sub,
  __mul = mul,
  __div = div,
  __pow = pow,
  __mod = mod, -- Lua's % is NumPy's mod: the remainder takes the divisor's sign
  __unm = function(x) return call1(neg_id, not_pointer(x)) end,
  __len = function(x)
    local info = info_of(not_pointer(x))
    if info.ndim == 0 then core.error("len() of a 0-d array") end
    return tonumber(info.shape[0])
  end,
  __tostring = function(x) return show.tostring(not_pointer(x)) end,
  __concat = function(a, b) return tostring(a) .. tostring(b) end,
  __eq = eq,
  -- Lua turns what < and <= return into one boolean, so they cannot be
  -- NumPy's elementwise comparisons, and assignment to x.name has no
  -- ndarray meaning here: each says what to use instead
  __lt = function() core.error("ndarray: Lua's < and > give one boolean, not an array: use np.less(x, y) or np.greater(x, y) (and :item() for one value)") end,
  __le = function() core.error("ndarray: Lua's <= and >= give one boolean, not an array: use np.less_equal(x, y) or np.greater_equal(x, y) (and :item() for one value)") end,
  __newindex = function(x, k, v)
    if type(k) ~= "string" then return indexing.set(x, k, v) end -- x[i], x[{...}], x[idx], x[mask] = v
    core.error(("ndarray: cannot set field %s: arrays are FFI objects with fixed fields (keep extra data in a table)")
          :format(core.show_value(k)))
  end,
}
ffi.metatype("struct luon_array", mt)

return {methods = methods, props = props}
