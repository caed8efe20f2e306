-- luon.gluon.nn.util: what the layers share: their argument reader (MXNet's
-- positional order, then one keyword table), size checks, Python reprs, the
-- layout check and the device of an input.
local core = require("luon.core")

local util = {}


-- The options of a layer from (positional..., keywords): `names` in MXNet's
-- positional order; unknown keywords are an error naming them, and MXNet
-- 1.x's Block keywords (prefix, params) say what luon does instead.
local v1_keywords = {
  params = "MXNet 1.x's params= shared parameters; luon shares them with "
           .. "block:share_parameters(other:collect_params())",
  prefix = "MXNet 1.x's prefix= named parameters; luon names them by their place in the network",
}
function util.opts(layer, names, ...)
  local kw = core.kw(...)
  for k, why in pairs(v1_keywords) do
    if kw[k] ~= nil then core.error(("%s: no argument '%s' (%s)"):format(layer, k, why)) end
  end
  return core.args(layer, names, names, ...)
end

function util.positive_int(v, layer, what)
  if not core.is_int(v) or v < 1 then
    core.error(("%s: %s must be a positive integer, got %s"):format(layer, what, tostring(v)))
  end
  return v
end

-- An optional size known in advance (in_units, in_channels): 0 when not
-- given (inferred at the first call), else an integer >= 0.
function util.known_size(v, layer, what)
  return v == nil and 0 or core.int_arg(v, layer, what, 0)
end

-- Python's repr of a number or boolean.
function util.pyrepr(v)
  if type(v) == "boolean" then return v and "True" or "False" end
  if type(v) == "number" then return ("%.14g"):format(v) end
  if v == nil then return "None" end
  return tostring(v)
end

-- The device of array x (core's cached Device of its (type, id)).
local info_of = core.info_of
function util.device_of(x)
  local info = info_of(x)
  return core.device_from_ids(info.dev_type, info.dev_id)
end

-- The layout a layer was given: `want` ('NCHW' when nil; 'NCW' and
-- 'NCDHW' for 1-d and 3-d layers), the only one supported.
function util.layout_of(layout, layer, want)
  want = want or "NCHW"
  layout = layout or want
  if layout ~= want then
    core.error(("%s: layout must be '%s' (the only one supported), got %s"):format(layer, want, tostring(layout)))
  end
  return layout
end

return util
