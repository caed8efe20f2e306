-- luon.serialize: named arrays to and from safetensors files (core/safetensors.c),
-- the format of save_parameters/load_parameters, readable by PyTorch and
-- numpy; load also reads MXNet's .params files (luon.mxparams). Writes are
-- atomic (temp file + rename); loads validate the whole header first.
-- Errors name the file: "<caller>: <path>: <what is wrong>".
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local serialize = {}

local function raise(caller)
  local msg = ffi.string(C.luon_last_error()):gsub("^safetensors: ", caller .. ": ", 1)
  core.error(msg)
end

local function check_path(path, caller) core.path_arg(path, caller) end

-- save(path, names, arrays [, {caller=}]) with two parallel lists, or
-- save(path, entries [, {caller=}]) with a list of {name =, array =} (what
-- load returns). Arrays may live on any device and have any strides.
function serialize.save(path, names, arrays, opts)
  if type(arrays) == "table" and not core.is_array(arrays) and arrays[1] == nil and opts == nil then
    opts, arrays = arrays, nil
  end
  opts = opts or {}
  local caller = opts.caller or "save"
  check_path(path, caller)
  if type(names) ~= "table" then
    core.error(("%s: %s: expected a list of names, got %s"):format(caller, path, type(names)))
  end
  if arrays == nil then -- a list of {name =, array =}
    local entries = names
    names, arrays = {}, {}
    for k = 1, #entries do
      local e = entries[k]
      if type(e) ~= "table" then
        core.error(("%s: %s: entry %d is a %s, expected {name = ..., array = ...}"):format(
          caller, path, k, type(e)))
      end
      names[k], arrays[k] = e.name, e.array
    end
  end
  if type(arrays) ~= "table" or #arrays ~= #names then
    core.error(("%s: %s: %d names but %s arrays"):format(caller, path, #names,
                type(arrays) == "table" and tostring(#arrays) or type(arrays)))
  end
  local n = #names
  local cnames = ffi.new("const char*[?]", n + 1)
  local ctensors = ffi.new("luon_tensor*[?]", n + 1)
  for k = 1, n do
    if type(names[k]) ~= "string" then
      core.error(("%s: %s: name %d is a %s, expected a string"):format(caller, path, k, type(names[k])))
    end
    if not core.is_array(arrays[k]) then
      core.error(("%s: %s: '%s' is a %s, expected an ndarray"):format(caller, path, names[k], type(arrays[k])))
    end
    cnames[k - 1] = names[k] -- the strings stay alive in `names` during the call
    ctensors[k - 1] = arrays[k].t
  end
  if C.luon_safetensors_save(path, n, cnames, ctensors) ~= 0 then raise(caller) end
end

-- load(path [, {device=, caller=}]) -> list of {name =, array =} in the
-- file's order, the arrays on `device` (default cpu(0)). MXNet's .params
-- files (NDArray lists, luon.mxparams) load too; an array of a list saved
-- without names has name nil.
function serialize.load(path, opts)
  opts = opts or {}
  local caller = opts.caller or "load"
  check_path(path, caller)
  local dev = core.device_of(opts, caller)
  dev = dev == nil and core.device("cpu", 0) or core.resolve_device(dev, caller)
  local hp = ffi.new("luon_safetensors*[1]")
  local st = C.luon_safetensors_open(path, hp)
  if st ~= 0 then
    -- a format error means a regular file was opened and read: MXNet's
    -- .params is one (checked here, so that a FIFO never blocks a read)
    local mxparams = require("luon.mxparams")
    if st == C.LUON_EFORMAT and mxparams.is_mxnet(path) then
      return mxparams.load(path, {device = dev, caller = caller})
    end
    raise(caller)
  end
  local h = hp[0]
  local out = ffi.new("luon_tensor*[1]")
  local res = {}
  for i = 0, C.luon_safetensors_count(h) - 1 do
    local st = C.luon_safetensors_get(h, i, dev.type_id, dev.device_id, out)
    if st == C.LUON_ENOMEM then -- let the GC free what it can, once
      collectgarbage("collect"); collectgarbage("collect")
      core.sweep()
      st = C.luon_safetensors_get(h, i, dev.type_id, dev.device_id, out)
    end
    if st ~= 0 then
      local msg = ffi.string(C.luon_last_error())
      C.luon_safetensors_close(h)
      C.luon_set_error(msg)
      raise(caller)
    end
    res[#res + 1] = {name = ffi.string(C.luon_safetensors_name(h, i)), array = core.wrap(out[0])}
  end
  C.luon_safetensors_close(h)
  return res
end

-- The names, dtypes and shapes in a file, without reading its data:
-- list of {name =, dtype = "float32", shape = {..}}.
function serialize.inspect(path, opts)
  local caller = (opts and opts.caller) or "inspect"
  check_path(path, caller)
  local hp = ffi.new("luon_safetensors*[1]")
  if C.luon_safetensors_open(path, hp) ~= 0 then raise(caller) end
  local h = hp[0]
  local dt, nd, sh = ffi.new("int32_t[1]"), ffi.new("int32_t[1]"), ffi.new("int64_t[8]")
  local res = {}
  for i = 0, C.luon_safetensors_count(h) - 1 do
    C.luon_safetensors_shape(h, i, dt, nd, sh)
    local shape = {}
    for d = 0, nd[0] - 1 do shape[d + 1] = tonumber(sh[d]) end
    res[#res + 1] = {name = ffi.string(C.luon_safetensors_name(h, i)),
                     dtype = core.dtype_names[dt[0]], shape = shape}
  end
  C.luon_safetensors_close(h)
  return res
end

return serialize
