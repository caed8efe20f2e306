-- luon.gluon.utils: splitting a batch across devices (split_data,
-- split_and_load), running the replicas' forwards together
-- (parallel_forward) and clip_global_norm, with MXNet's semantics: one device
-- never splits; several split along the batch axis with divmod sizes.
local core = require("luon.core")
local np = require("luon.np")

local utils = {}

local shape_text = core.shape_text

-- split_data(data, num_slice, {batch_axis = 0, even_split = true}) -> list
function utils.split_data(data, num_slice, batch_axis, even_split)
  if type(batch_axis) == "table" then
    batch_axis, even_split = batch_axis.batch_axis, batch_axis.even_split
  end
  batch_axis = core.int_arg(batch_axis or 0, "split_data", "batch_axis")
  if even_split == nil then even_split = true end
  if not core.is_array(data) then core.error("split_data: data must be an ndarray") end
  if type(num_slice) ~= "number" or num_slice < 1 or num_slice % 1 ~= 0 then
    core.error(("split_data: num_slice must be a positive integer, got %s"):format(tostring(num_slice)))
  end
  local shape = data.shape
  local nd = #shape
  local ax = batch_axis < 0 and batch_axis + nd or batch_axis
  if ax < 0 or ax >= nd then
    core.error(("split_data: batch_axis %d is out of bounds for an array of dimension %d"):format(batch_axis, nd))
  end
  local size = shape[ax + 1]
  if even_split and size % num_slice ~= 0 then
    core.error(("split_and_load: a batch of size %d (data shape %s) cannot be split evenly across %d devices " ..
                "along axis %d; use a batch size that is a multiple of the number of devices (%d), " ..
                "or pass {even_split = false} to allow uneven parts")
               :format(size, shape_text(shape), num_slice, batch_axis, num_slice))
  end
  if num_slice == 1 then return {data} end
  local each, extras = math.floor(size / num_slice), size % num_slice
  local bounds, pos = {}, 0
  for k = 1, num_slice - 1 do
    pos = pos + each + (k <= extras and 1 or 0)
    bounds[k] = pos
  end
  return np.split(data, bounds, ax)
end

-- split_and_load(data, devices, {batch_axis = 0, even_split = true}) -> list
-- of parts, part i on devices[i]. Non-array data becomes an array on the
-- first device.
function utils.split_and_load(data, devices, opts)
  opts = opts or {}
  if core.is_device(devices) then devices = {devices} end
  if type(devices) ~= "table" or #devices == 0 then
    core.error("split_and_load: devices must be a non-empty list of devices such as {npx.cpu(0), npx.cpu(1)}")
  end
  for k = 1, #devices do
    if not core.is_device(devices[k]) then
      core.error(("split_and_load: devices[%d] is not a Device (got %s)"):format(k, tostring(devices[k])))
    end
  end
  if not core.is_array(data) then data = np.array(data, {device = devices[1]}) end
  if #devices == 1 then return {data:as_in_context(devices[1])} end
  local parts = utils.split_data(data, #devices, opts.batch_axis or 0, opts.even_split)
  for k = 1, #parts do parts[k] = parts[k]:as_in_context(devices[k]) end
  return parts
end

-- parallel_forward(net, list1, list2, ...) -> results1, results2, ...: net
-- (a Block or a function) called on each replica's arguments, list1[i],
-- list2[i], ..., as the loop `for i, x in ipairs(list1) do outs[i] = net(x) end`
-- does, but with the replicas' forwards run together, so that layers which
-- need the whole batch across the devices (SyncBatchNorm) see it. The k-th
-- result list holds each replica's k-th result. Call it inside
-- autograd.record, then autograd.backward(losses) once for all replicas.
function utils.parallel_forward(net, ...)
  local mt = (type(net) == "table" or type(net) == "userdata") and getmetatable(net)
  if type(net) ~= "function" and not (type(mt) == "table" and rawget(mt, "__call")) then
    core.error(("parallel_forward: net must be a Block or a function, got %s"):format(core.show_value(net)))
  end
  local lists = {...}
  if #lists == 0 or select("#", ...) ~= #lists then
    core.error("parallel_forward: expected one or more lists of arguments, one entry per device (as split_and_load gives)")
  end
  local n
  for k, l in ipairs(lists) do
    if type(l) ~= "table" or #l == 0 or core.is_array(l) then
      core.error(("parallel_forward: argument list %d must be a non-empty list (one entry per device), got %s")
                 :format(k, core.show_value(l)))
    end
    n = n or #l
    if #l ~= n then
      core.error(("parallel_forward: argument list %d has %d entries but list 1 has %d"):format(k, #l, n))
    end
  end
  local args = {}
  for i = 1, n do
    args[i] = {}
    for k = 1, #lists do args[i][k] = lists[k][i] end
  end
  local results = require("luon.gluon.replicas").run(net, args)
  local width = 0
  for i = 1, n do width = math.max(width, results[i].n) end
  local out = {}
  for k = 1, math.max(width, 1) do
    out[k] = {}
    for i = 1, n do out[k][i] = results[i][k] end
  end
  return unpack(out, 1, math.max(width, 1))
end

-- Rescale arrays in place so their joint L2 norm is at most max_norm;
-- returns the norm before scaling (a number).
function utils.clip_global_norm(arrays, max_norm, check_isfinite)
  if check_isfinite == nil then check_isfinite = true end
  if type(arrays) ~= "table" then
    core.error(("clip_global_norm: arrays must be a list of ndarrays, got %s"):format(core.show_value(arrays)))
  end
  for k = 1, #arrays do
    if not core.is_array(arrays[k]) then
      core.error(("clip_global_norm: arrays[%d] is not an ndarray (%s)"):format(k, core.show_value(arrays[k])))
    end
  end
  if type(max_norm) ~= "number" or not (max_norm > 0) then
    core.error(("clip_global_norm: max_norm must be a positive number, got %s"):format(core.show_value(max_norm)))
  end
  -- the squares are summed on each device and read back once per device
  -- (not once per array: each read waits for the device)
  local per_device, order = {}, {}
  for k = 1, #arrays do
    local a = arrays[k]
    local dev = a.device
    local s = np.sum(np.square(a), {dtype = "float64"})
    if per_device[dev] then
      per_device[dev] = per_device[dev] + s
    else
      per_device[dev] = s
      order[#order + 1] = dev
    end
  end
  local total = 0
  for _, dev in ipairs(order) do total = total + per_device[dev]:item() end
  total = math.sqrt(total)
  if check_isfinite and (total ~= total or total == math.huge) then
    io.stderr:write("luon: clip_global_norm: nan or inf is detected; clipping results will be undefined\n")
  end
  local scale = max_norm / (total + 1e-8)
  if scale < 1 then
    for k = 1, #arrays do (arrays[k] * scale):copyto(arrays[k]) end
  end
  return total
end

return core.strict_module(utils, "gluon.utils")
