-- luon.mxparams: MXNet's binary NDArray list, the format of MXNet 1.x's
-- save_parameters, mx.nd.save, ParameterDict.save, export and the model
-- zoo's .params files, read in Lua through io: nothing in the file is
-- trusted, every length and count is checked against the bytes left
-- before anything is allocated, so a corrupt or cut file is an error
-- naming the file and the byte offset, never a crash.
--
-- The layout (little-endian; mxnet src/c_api/c_api.cc MXNDArraySave and
-- src/ndarray/ndarray.cc NDArray::Save):
--   u64 0x112 (kMXAPINDArrayListMagic), u64 reserved,
--   u64 n, then n arrays, u64 m (0 or n), then m names (u64 length, bytes).
-- An array: u32 magic (V2 0xF993FAC9, V3 0xF993FACA; V1 0xF993FAC8 and the
-- older magic-less arrays, whose first u32 is ndim, are read too),
-- [V2/V3: i32 storage type, 0 = dense], the shape (i32 ndim then i64 dims;
-- u32 dims for the magic-less), none (V2: ndim 0, V3: ndim -1) ends the
-- array; then i32 device type, i32 device id, i32 type flag, the data.
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local M = {}
M.LIST_MAGIC = 0x112
local V1, V2, V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA

-- mshadow's type flags -> (dtype name, bytes per element)
local type_flags = {
  [0] = {"float32", 4}, [1] = {"float64", 8}, [2] = {"float16", 2}, [3] = {"uint8", 1},
  [4] = {"int32", 4}, [5] = {"int8", 1}, [6] = {"int64", 8}, [7] = {"bool", 1}, [8] = {"int16", 2},
  [9] = {"uint16", 2}, [10] = {"uint32", 4}, [11] = {"uint64", 8}, [12] = {"bfloat16", 2},
}
local stypes = {[1] = "row_sparse", [2] = "csr"}

local u32, i32, i64 = ffi.new("uint32_t[1]"), ffi.new("int32_t[1]"), ffi.new("int64_t[1]")
local u64 = ffi.new("uint64_t[1]")

-- A reader over an open file of `size` bytes: every read names what it reads.
local Reader = {}
Reader.__index = Reader

function Reader:fail(fmt, ...)
  if self.f then self.f:close(); self.f = nil end
  core.error(("%s: %s: %s"):format(self.caller, self.path, fmt:format(...)))
end

-- Exactly n bytes at the current position, or an error naming `what`.
function Reader:bytes(n, what)
  if n > self.size - self.pos then
    self:fail("the file ends at byte %d, %d bytes short of %s (at byte %d)", self.size,
              n - (self.size - self.pos), what, self.pos)
  end
  if n == 0 then return "" end
  local s = self.f:read(n)
  if s == nil or #s ~= n then
    self:fail("reading %s at byte %d: the file ended early (was it changed while open?)", what, self.pos)
  end
  self.pos = self.pos + n
  return s
end

function Reader:u32(what) ffi.copy(u32, self:bytes(4, what), 4); return tonumber(u32[0]) end
function Reader:i32(what) ffi.copy(i32, self:bytes(4, what), 4); return tonumber(i32[0]) end
function Reader:i64(what) ffi.copy(i64, self:bytes(8, what), 8); return i64[0] end
-- a u64 count or length: more than the bytes left can't be right
function Reader:count(what, per)
  local at = self.pos
  ffi.copy(u64, self:bytes(8, what), 8)
  local left = self.size - self.pos
  if u64[0] > left / (per or 1) then
    self:fail("%s at byte %d is %s, more than the %d bytes left allow", what, at,
              tostring(u64[0]):gsub("ULL$", ""), left)
  end
  return tonumber(u64[0])
end

local dim_buf = ffi.new("int64_t[8]")

-- One array at the current position: {dtype =, shape =, array =} or
-- false for a "none" array (MXNet's empty NDArray()).
function Reader:array(k, dev)
  local what = ("array %d"):format(k)
  local at = self.pos
  local magic = self:u32(what .. "'s magic number")
  local stype = 0
  local ndim, legacy = nil, false
  if magic == V2 or magic == V3 then
    stype = self:i32(what .. "'s storage type")
    if stype ~= 0 then
      self:fail("%s (at byte %d) has %s storage; luon reads dense arrays only (in MXNet, save "
                .. "x.tostype('default'))", what, at, stypes[stype] or ("unknown storage type " .. stype))
    end
    ndim = self:i32(what .. "'s number of dimensions")
  elseif magic == V1 then
    ndim = self:i32(what .. "'s number of dimensions")
  else -- magic-less: the magic was ndim, the dims are u32
    ndim, legacy = magic, true
  end
  if (magic == V2 and ndim == 0) or (magic == V3 and ndim == -1) then return false end
  if ndim < 0 or ndim > 8 then
    if legacy then
      self:fail("%s at byte %d starts with 0x%08X, which is no MXNet NDArray magic number "
                .. "(not an MXNet .params file, or a corrupt one)", what, at, magic)
    end
    self:fail("%s (at byte %d) has %d dimensions; luon's arrays have 0 to 8", what, at, ndim)
  end
  local shape, n = {}, 1
  for d = 1, ndim do
    local v
    if legacy then v = self:u32(what .. "'s shape") else
      local x = self:i64(what .. "'s shape")
      if x < 0 or x > 2 ^ 48 then
        self:fail("%s (at byte %d) has dimension %d of size %s", what, at, d - 1, tostring(x):gsub("LL$", ""))
      end
      v = tonumber(x)
    end
    shape[d] = v
    n = n * v
  end
  self:bytes(8, what .. "'s device") -- i32 type, i32 id: where it was saved, not where it goes
  local flag = self:i32(what .. "'s dtype flag")
  local t = type_flags[flag]
  if not t then self:fail("%s (at byte %d) has dtype flag %d, which MXNet does not define", what, at, flag) end
  local dt = core.dtype_ids[t[1]]
  if not dt then
    self:fail("%s (at byte %d) is %s, a dtype luon does not have (in MXNet, save x.astype('float32'))",
              what, at, t[1])
  end
  if n * t[2] > self.size - self.pos then
    self:fail("%s (at byte %d): shape (%s) of %s needs %.0f bytes but only %d are left", what, at,
              table.concat(shape, ", "), t[1], n * t[2], self.size - self.pos)
  end
  local data = self:bytes(n * t[2], what .. "'s data")
  if dt == core.BOOL then data = data:gsub("[^%z]", "\1") end
  for d = 1, ndim do dim_buf[d - 1] = shape[d] end
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(data, dt, ndim, dim_buf, C.LUON_CPU, 0, out))
  local arr = core.wrap(out[0])
  if dev and not (dev.type_id == C.LUON_CPU and dev.device_id == 0) then arr = arr:copyto(dev) end
  return {dtype = t[1], shape = shape, array = arr}
end

-- Whether path's first 8 bytes are the list magic (false for a short,
-- unreadable or other file: the caller's own reader reports those).
function M.is_mxnet(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local s = f:read(8)
  f:close()
  if s == nil or #s ~= 8 then return false end
  ffi.copy(u64, s, 8)
  return u64[0] == M.LIST_MAGIC
end

-- load(path, {device =, caller =}) -> list of {name =, array =} in the
-- file's order (name nil for every array of a list saved without names),
-- arrays on device (default cpu(0)); "none" arrays are skipped.
function M.load(path, opts)
  opts = opts or {}
  local caller = opts.caller or "load"
  core.path_arg(path, caller)
  local dev = opts.device and core.resolve_device(opts.device, caller) or nil
  local f, err = io.open(path, "rb")
  if not f then core.error(("%s: %s: cannot open: %s"):format(caller, path, tostring(err):gsub("^[^:]*: ", ""))) end
  local size = f:seek("end")
  if not size then f:close(); core.error(("%s: %s: cannot read (not a regular file?)"):format(caller, path)) end
  f:seek("set", 0)
  local r = setmetatable({f = f, path = path, caller = caller, size = size, pos = 0}, Reader)
  ffi.copy(u64, r:bytes(8, "the header"), 8)
  if u64[0] ~= M.LIST_MAGIC then
    r:fail("not an MXNet .params file: its first 8 bytes are not the NDArray list magic 0x112")
  end
  r:bytes(8, "the reserved header word")
  local n = r:count("the number of arrays", 4)
  local arrays = {}
  for k = 1, n do arrays[k] = r:array(k - 1, dev) end
  local m = r:count("the number of names", 8)
  if m ~= 0 and m ~= n then r:fail("the file has %d arrays but %d names", n, m) end
  local names, seen = {}, {}
  for k = 1, m do
    local len = r:count(("the length of name %d"):format(k - 1))
    local s = r:bytes(len, ("name %d"):format(k - 1))
    if seen[s] then r:fail("two arrays are named %q", s) end
    seen[s] = true
    names[k] = s
  end
  if r.pos ~= size then r:fail("%d bytes follow the names, where the file should end", size - r.pos) end
  f:close()
  local out = {}
  for k = 1, n do
    if arrays[k] then out[#out + 1] = {name = names[k], array = arrays[k].array} end
  end
  return out
end

-- The list as an error shows it: quoted, at most 12 then how many more.
local function listed(list)
  local q = {}
  for k = 1, math.min(#list, 12) do q[k] = "'" .. list[k] .. "'" end
  if #list > 12 then q[#q + 1] = ("... (%d more)"):format(#list - 12) end
  return "[" .. table.concat(q, ", ") .. "]"
end

local function fits(p, a)
  local s = p._shape
  if s == nil then return true end
  if #s ~= #a then return false end
  for k = 1, #s do
    if s[k] ~= -1 and s[k] ~= a[k] then return false end
  end
  return true
end

-- MXNet 1.9.1's save_parameters writes a fused RNN layer's parameters
-- under its unfused cells' names: _unfused.0.i2h_weight, and when
-- bidirectional _unfused.0.l_cell.i2h_weight; luon's names are the
-- layer's own (l0_i2h_weight, r0_...), as MXNet's attributes.
function M.rnn_name(name)
  local pre, l, d, rest = name:match("^(.-)_unfused%.(%d+)%.([lr])_cell%.(%a+2%a_%a+)$")
  if pre then return pre .. d .. l .. "_" .. rest end
  pre, l, rest = name:match("^(.-)_unfused%.(%d+)%.(%a+2%a_%a+)$")
  if pre then return pre .. "l" .. l .. "_" .. rest end
  return name
end

-- load_parameters' names: when a file names its parameters as MXNet 1.x's
-- collect_params().save and export do ('resnetv10_conv0_weight',
-- 'arg:dense0_bias': a global prefix, no '.'), and none of them is one of
-- the block's structural names, the k-th array is the block's k-th
-- parameter (MXNet 1.x's collect_params has the same order), provided the
-- counts agree and at every position the shapes agree (unknown dims
-- match) and the file's name ends in the parameter's own name ('weight',
-- 'running_mean'). Else an error naming the unmatched names. Any other
-- file: (loaded, file_names) as given.
function M.map_prefixed(path, loaded, file_names, params)
  if #file_names == 0 then return loaded, file_names end
  for _, n in ipairs(file_names) do
    if params[n] ~= nil or n:find(".", 1, true) then return loaded, file_names end
  end
  local names = params:keys()
  local bad_file, bad_block = {}, {}
  for k = 1, math.max(#names, #file_names) do
    local bn, fn = names[k], file_names[k]
    local ok = bn ~= nil and fn ~= nil
    if ok then
      local leaf = bn:match("([^.]+)$")
      ok = (fn == leaf or fn:sub(-#leaf - 1) == "_" .. leaf) and fits(params[bn], loaded[fn].shape)
    end
    if not ok then
      if fn then bad_file[#bad_file + 1] = fn end
      if bn then bad_block[#bad_block + 1] = bn end
    end
  end
  if #bad_file + #bad_block > 0 then
    core.error(("load_parameters: %s names its %d parameters as MXNet 1.x does ('%s', ...), not by their "
                .. "place in the network; luon maps them by order onto the block's %d parameters only when "
                .. "the counts, the shapes and the names' endings agree at every position, and they do not. "
                .. "Unmatched in the file: %s; unmatched in the block: %s")
               :format(path, #file_names, file_names[1], #names, listed(bad_file), listed(bad_block)))
  end
  local out = {}
  for k, bn in ipairs(names) do out[bn] = loaded[file_names[k]] end
  return out, names
end

return M
