-- luon.serialize: named arrays to and from safetensors files (core/safetensors.c),
-- the format of save_parameters/load_parameters, readable by PyTorch and
-- numpy; load also reads MXNet's .params files (luon.mxparams). Writes are
-- atomic (temp file + rename); loads validate the whole header first.
-- Errors name the file: "<caller>: <path>: <what is wrong>". Also NumPy's
-- .npy and .npz files (core/npy.c): npx.save, npx.savez, npx.load.
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local serialize = {}

local function raise(caller)
  local msg = ffi.string(C.luon_last_error()):gsub("^safetensors: ", caller .. ": ", 1)
  msg = msg:gsub("^npy: ", caller .. ": ", 1):gsub("^npz: ", caller .. ": ", 1)
  core.error(msg)
end

-- st = get(), retried once after a full collection when out of memory.
local function retry_oom(get)
  local st = get()
  if st == C.LUON_ENOMEM then
    collectgarbage("collect"); collectgarbage("collect")
    core.sweep()
    st = get()
  end
  return st
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
    local st = retry_oom(function() return C.luon_safetensors_get(h, i, dev.type_id, dev.device_id, out) end)
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

---------------------------------------------------------------------------
-- NumPy's files.

-- save_npy(path, x, caller): one array as .npy.
function serialize.save_npy(path, x, caller)
  check_path(path, caller)
  if not core.is_array(x) then
    core.error(("%s: %s: expected an ndarray, got %s"):format(caller, path, core.show_value(x)))
  end
  if C.luon_npy_save(path, x.t) ~= 0 then raise(caller) end
end

-- save_npz(path, names, arrays, compress, caller): named arrays as .npz.
function serialize.save_npz(path, names, arrays, compress, caller)
  check_path(path, caller)
  local n = #names
  local cnames = ffi.new("const char*[?]", n + 1)
  local ctensors = ffi.new("luon_tensor*[?]", n + 1)
  for k = 1, n do
    if not core.is_array(arrays[k]) then
      core.error(("%s: %s: '%s' is %s, expected an ndarray"):format(caller, path, names[k], core.show_value(arrays[k])))
    end
    cnames[k - 1], ctensors[k - 1] = names[k], arrays[k].t
  end
  if C.luon_npz_save(path, n, cnames, ctensors, compress and 1 or 0) ~= 0 then raise(caller) end
end

-- load_any(path, dev, caller): by the file's first bytes, a .npy (the
-- array), a .npz (a table name -> array) or MXNet's .params (a list of
-- arrays, or a table name -> array when they are named, as MXNet's
-- npx.load).
function serialize.load_any(path, dev, caller)
  check_path(path, caller)
  local f, err = io.open(path, "rb")
  if not f then core.error(("%s: cannot open %s"):format(caller, tostring(err))) end -- err names the path
  local head = f:read(8) or ""
  f:close()
  local out = ffi.new("luon_tensor*[1]")
  if head:sub(1, 6) == "\x93NUMPY" then
    if retry_oom(function() return C.luon_npy_load(path, dev.type_id, dev.device_id, out) end) ~= 0 then
      raise(caller)
    end
    return core.wrap(out[0])
  elseif head:sub(1, 4) == "PK\3\4" or head:sub(1, 4) == "PK\5\6" then
    local hp = ffi.new("luon_npz*[1]")
    if C.luon_npz_open(path, hp) ~= 0 then raise(caller) end
    local h, res = hp[0], {}
    for i = 0, C.luon_npz_count(h) - 1 do
      if retry_oom(function() return C.luon_npz_get(h, i, dev.type_id, dev.device_id, out) end) ~= 0 then
        local msg = ffi.string(C.luon_last_error())
        C.luon_npz_close(h)
        C.luon_set_error(msg)
        raise(caller)
      end
      res[ffi.string(C.luon_npz_name(h, i))] = core.wrap(out[0])
    end
    C.luon_npz_close(h)
    return res
  end
  local mxparams = require("luon.mxparams")
  if mxparams.is_mxnet(path) then
    local entries, named = mxparams.load(path, {device = dev, caller = caller}), {}
    for _, e in ipairs(entries) do
      if e.name == nil then named = nil break end
      named[e.name] = e.array
    end
    if named then return named end
    local list = {}
    for k, e in ipairs(entries) do list[k] = e.array end
    return list
  end
  core.error(("%s: %s: not a .npy, .npz or MXNet .params file"):format(caller, path))
end

-- npx's file functions, as MXNet 2.0's (npx.lua and np.lua take them):
-- save(file, arr) one array as .npy; savez(file, a, b, ..., {name = c})
-- positional arrays as arr_0, arr_1, ..., then the named ones (sorted by
-- name); savez_compressed likewise, deflated; load(file, {device}) the
-- array of a .npy, a table name -> array of a .npz, and MXNet 1.x's binary
-- .params (what MXNet 1.9's npx.save wrote): a list, or a table by name.
serialize.npx = {}
function serialize.npx.save(file, arr)
  if type(arr) == "table" and not core.is_array(arr) then
    core.error("npx.save: a .npy file holds one array; save a list or table of arrays with npx.savez(file, ...)")
  end
  serialize.save_npy(file, arr, "npx.save")
end

local function savez(fname, compress, file, ...)
  local names, arrays, n = {}, {}, select("#", ...)
  for k = 1, n do
    local v = select(k, ...)
    if k == n and type(v) == "table" and not core.is_array(v) then
      local keys = {}
      for name in pairs(v) do
        if type(name) ~= "string" then
          core.error(("%s: the last argument, a table, names arrays by string keys (got the key %s); pass " ..
                      "unnamed arrays as arguments: %s(file, a, b)"):format(fname, core.show_value(name), fname))
        end
        keys[#keys + 1] = name
      end
      table.sort(keys)
      for _, name in ipairs(keys) do
        if name:match("^arr_%d+$") and tonumber(name:sub(5)) < #arrays then
          core.error(("%s: cannot use un-named variables and keyword %s"):format(fname, name)) -- NumPy's error
        end
        names[#names + 1], arrays[#arrays + 1] = name, v[name]
      end
    else
      names[#names + 1], arrays[#arrays + 1] = "arr_" .. (k - 1), v
    end
  end
  serialize.save_npz(file, names, arrays, compress, fname)
end
function serialize.npx.savez(file, ...) savez("npx.savez", false, file, ...) end
function serialize.npx.savez_compressed(file, ...) savez("npx.savez_compressed", true, file, ...) end

function serialize.npx.load(file, kw)
  kw = core.options(kw, "npx.load", {"device", "ctx"})
  local dev = core.device_of(kw, "npx.load")
  dev = dev == nil and core.device("cpu", 0) or core.resolve_device(dev, "npx.load")
  return serialize.load_any(file, dev, "npx.load")
end

return serialize
