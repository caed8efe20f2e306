-- luon.gluon.data.batchify: the default Stack batchify: ndarrays are stacked
-- on a new axis 0; numbers become an array (int64 when all are integers,
-- float64 otherwise, as MXNet); booleans become bool; lists are batched
-- field by field.
local core = require("luon.core")
local object = require("luon.gluon.data.object")
local ffi, C = core.ffi, core.C
local is_array = core.is_array
local new, argerror, is_tuple, fields = object.new, object.argerror, object.is_tuple, object.fields

local batchify = {}

---------------------------------------------------------------------------
-- Batchify


-- A new array (batch, shape...) holding the stacked samples (ndarrays of
-- one shape): one view and one copy per sample, no op dispatch.
local view_out = ffi.new("luon_tensor*[1]")
local function stack_arrays(samples)
  local first = samples[1]
  local info = core.info_of(first)
  local ndim, dtype, dt, di = info.ndim, info.dtype, info.dev_type, info.dev_id
  if ndim + 1 > 8 then argerror("batchify: samples of %d dimensions cannot be stacked (at most 7)", ndim) end
  local shape = ffi.new("int64_t[8]")
  local row = 1
  shape[0] = #samples
  for d = 0, ndim - 1 do
    shape[d + 1] = info.shape[d]
    row = row * tonumber(info.shape[d])
  end
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_empty(dtype, ndim + 1, shape, dt, di, out))
  local batch = core.wrap(out[0])
  local strides = ffi.new("int64_t[8]")
  local s = 1
  for d = ndim - 1, 0, -1 do
    strides[d] = s
    s = s * math.max(tonumber(shape[d + 1]), 1)
  end
  for k = 1, #samples do
    local x = samples[k]
    if not is_array(x) then
      argerror("batchify: sample %d is a %s but sample 1 is an ndarray", k, type(x))
    end
    local xi = core.info_of(x)
    local same = xi.ndim == ndim
    for d = 0, ndim - 1 do same = same and xi.shape[d] == shape[d + 1] end
    if not same then
      argerror("batchify: sample %d has shape %s but sample 1 has %s (Stack needs one shape; pad first)",
               k, core.shape_text(x.shape), core.shape_text(first.shape))
    end
    core.check(C.luon_tensor_view(batch.t, ndim, shape + 1, strides, (k - 1) * row, view_out))
    local v = view_out[0]
    local st = C.luon_tensor_copy(v, x.t)
    C.luon_tensor_release(v)
    core.check(st)
  end
  return batch
end

-- Numbers (or booleans) into an int64 / float64 / bool array (integers
-- into dtype when given: the int32 labels of MNIST).
function batchify.stack_numbers(samples, dtype)
  local n = #samples
  local kind = type(samples[1])
  local integral = true
  for k = 1, n do
    local v = samples[k]
    if type(v) ~= kind then
      argerror("batchify: sample %d is a %s but sample 1 is a %s", k, type(v), kind)
    end
    if kind == "number" and v % 1 ~= 0 then integral = false end
  end
  local dt = kind == "boolean" and core.BOOL or (integral and (dtype or core.INT64) or core.FLOAT64)
  local buf = ffi.new(core.ctypes[dt] .. "[?]", n > 0 and n or 1)
  for k = 1, n do
    local v = samples[k]
    if kind == "boolean" then v = v and 1 or 0 end
    buf[k - 1] = v
  end
  local sh = ffi.new("int64_t[1]", n)
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(buf, dt, 1, sh, 1, 0, out))
  return core.wrap(out[0])
end

-- MXNet's batchify.Stack: see the banner.
function batchify.stack(samples)
  local first = samples[1]
  if is_array(first) then return stack_arrays(samples) end
  local t = type(first)
  if t == "number" or t == "boolean" then return batchify.stack_numbers(samples) end
  if is_tuple(first) then
    local nf = #first
    local out = {}
    for f = 1, nf do
      local col = {}
      for k = 1, #samples do
        local s = samples[k]
        if not is_tuple(s) or #s ~= nf then
          argerror("batchify: sample %d does not have the %d fields of sample 1", k, nf)
        end
        col[k] = s[f]
      end
      out[f] = batchify.stack(col)
    end
    return out
  end
  argerror("batchify: cannot stack samples of type %s", t)
end
batchify.Stack = function() return batchify.stack end

return batchify
