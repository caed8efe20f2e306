-- luon.indexing: NumPy indexing of ndarrays, x[key] and x[key] = v, built
-- from registry ops (slice, squeeze, take, take_grad, where) and copies into
-- views. Not the number key x[i] (ndarray's slice) nor field names.
local core = require("luon.core")
local slot = core.slot -- the ops' attribute slots by name (core/luon_ops.def)
local np = require("luon.np")
local ffi, C = core.ffi, core.C
local is_array, show = core.is_array, core.show_value

local M = {}

local GET, SET = "x[key]", "x[key] = v"
local OMIT = -9223372036854775807LL - 1
-- slice's slots: a triple per axis, SLICE_W slots wide
local SLICE_BEGIN, SLICE_END, SLICE_STEP = slot.SLICE_BEGIN, slot.SLICE_END, slot.SLICE_STEP
local SLICE_W = SLICE_STEP + 1
local FULL = {}  -- the entry of a whole axis (true, nil, {}, or an axis of '...')

local shape_text = core.shape_text

local function array_text(a)
  return ("an ndarray of dtype %s and shape %s"):format(a.dtype, shape_text(a.shape))
end

local HALF, BF16 = core.dtype_ids.float16, core.dtype_ids.bfloat16
local int_dtypes = {[core.INT32] = true, [core.INT64] = true, [core.UINT8] = true, [core.INT8] = true,
                    [core.INT16] = true, [core.UINT16] = true}

---------------------------------------------------------------------------
-- Parsing a key into one entry per axis

-- A {start, stop, step} slice spec, checked: nil parts omitted.
local function slice_entry(s, pos, fname)
  local n = 0
  for k in pairs(s) do
    if type(k) ~= "number" or k % 1 ~= 0 or k < 1 or k > 3 then
      core.error(("%s: entry %d of the index is a table with key %s; a slice is {start, stop, step}")
                 :format(fname, pos, show(k)))
    end
    n = n + 1
  end
  local parts = {}
  for k = 1, 3 do
    local v = s[k]
    if v ~= nil and not core.is_int(v) then
      core.error(("%s: the %s of slice entry %d must be an integer or nil, got %s")
                 :format(fname, ({"start", "stop", "step"})[k], pos, show(v)))
    end
    parts[k] = v
  end
  if parts[3] == 0 then core.error(("%s: slice entry %d has step 0"):format(fname, pos)) end
  return {kind = "slice", parts[1], parts[2], parts[3]}
end

-- A key is a number (row i), an integer ndarray (a gather along axis 0), a
-- bool ndarray (a mask over the leading axes) or a Lua table read as
-- NumPy's tuple: one entry per axis, each a number, a {start, stop, step}
-- slice ({}, true or nil: the whole axis), '...' or an index or mask array.
-- (A Lua list cannot be told from a tuple, so x[{0, 2}] is x[0, 2].)

-- The entries of a table key: a list of {kind = "int"|"slice"|"full"|"array"|
-- "mask"|"ellipsis", ...}, with the number of axes each one uses.
local function entries_of(key, fname)
  local n = 0
  for k in pairs(key) do
    if type(k) ~= "number" or k % 1 ~= 0 or k < 1 then
      core.error(("%s: an index table is a list of per-axis entries, but it has the key %s")
                 :format(fname, show(k)))
    end
    if k > n then n = k end
  end
  if n > 16 then -- 8 axes at most, and a few '...' (nil entries count up to n)
    core.error(("%s: an index of %d entries, for an array of at most 8 dimensions"):format(fname, n))
  end
  local list = {}
  for pos = 1, n do
    local e = key[pos]
    local te = type(e)
    if te == "nil" or (te == "boolean" and e) then -- (== on an array is an error)
      list[pos] = FULL
    elseif te == "number" then
      if not core.is_int(e) then
        core.error(("%s: entry %d of the index must be an integer, got %s"):format(fname, pos, show(e)))
      end
      list[pos] = {kind = "int", e}
    elseif te == "string" and e == "..." then
      list[pos] = {kind = "ellipsis"}
    elseif is_array(e) then
      local dt = core.info_of(e).dtype
      if dt == core.BOOL then
        if e.ndim == 0 then
          core.error(("%s: entry %d is a 0-d bool array; a mask needs at least one dimension")
                     :format(fname, pos))
        end
        list[pos] = {kind = "mask", e}
      elseif int_dtypes[dt] then
        list[pos] = {kind = "array", e}
      else
        -- a float index array (np.array({0, 2}) is float32, as in MXNet): its
        -- values must be whole numbers (MXNet would truncate 2.5 to 2)
        local ints = e:astype("int64")
        if np.not_equal(ints, e):sum():item() ~= 0 then
          core.error(("%s: entry %d is %s with values that are not whole numbers; index arrays hold "
                      .. "integers (convert with :astype('int64') to truncate)"):format(fname, pos, array_text(e)))
        end
        list[pos] = {kind = "array", ints}
      end
    elseif te == "table" and getmetatable(e) == nil then
      list[pos] = slice_entry(e, pos, fname)
    else
      core.error(("%s: entry %d of the index must be a number, a {start, stop, step} list, true, '...' "
                  .. "or an integer or bool ndarray, got %s"):format(fname, pos, show(e)))
    end
  end
  return list
end

-- The entries for key on an array of dimension ndim, '...' expanded and
-- missing trailing axes full; each entry gets .axis, its first axis of x.
local function parse(key, ndim, fname)
  local list
  if is_array(key) then
    list = entries_of({key}, fname)
  elseif type(key) == "table" and getmetatable(key) == nil then
    list = entries_of(key, fname)
  elseif type(key) == "number" then
    list = entries_of({key}, fname)
  else
    core.error(("%s: an index must be a number, a table of per-axis entries or an integer or bool "
                .. "ndarray, got %s"):format(fname, show(key)))
  end
  local used, ell = 0, nil
  for pos, e in ipairs(list) do
    if e.kind == "ellipsis" then
      if ell then core.error(("%s: an index can only have a single '...'"):format(fname)) end
      ell = pos
    else
      used = used + (e.kind == "mask" and e[1].ndim or 1)
    end
  end
  if used > ndim then
    core.error(("%s: too many indices for an array of dimension %d (the index uses %d axes)")
               :format(fname, ndim, used))
  end
  local out, axis = {}, 0
  for pos, e in ipairs(list) do
    if pos == ell then
      for _ = 1, ndim - used do out[#out + 1] = {kind = "full", axis = axis, pos = pos}; axis = axis + 1 end
    else
      local c = e == FULL and {kind = "full"} or {kind = e.kind, e[1], e[2], e[3]}
      c.axis, c.pos = axis, pos
      out[#out + 1] = c
      axis = axis + (e.kind == "mask" and e[1].ndim or 1)
    end
  end
  while axis < ndim do out[#out + 1] = {kind = "full", axis = axis}; axis = axis + 1 end
  return out
end

---------------------------------------------------------------------------
-- Reading

-- The basic part of the entries on x: ints and slices applied as one view
-- (ints' axes dropped); advanced entries keep their axes. Returns the view
-- and, for each entry, its first axis in the view (nil for ints).
local function basic(x, list, fname)
  local shape = x.shape
  local a = core.attrs()
  local drop, at, kept = {}, {}, 0
  local k = 0
  for _, e in ipairs(list) do
    local naxes = e.kind == "mask" and e[1].ndim or 1
    for j = 0, naxes - 1 do
      local b, s, st = OMIT, OMIT, 1
      local ax = e.axis + j
      if e.kind == "int" then
        local n = shape[ax + 1]
        local i = e[1] < 0 and e[1] + n or e[1]
        if i < 0 or i >= n then
          core.error(("%s: index %d is out of bounds for axis %d with size %d"):format(fname, e[1], ax, n))
        end
        b, s = i, i + 1
        drop[#drop + 1] = ax
      elseif e.kind == "slice" then
        b = e[1] == nil and OMIT or math.max(math.min(e[1], 2^62), -2^62)
        s = e[2] == nil and OMIT or math.max(math.min(e[2], 2^62), -2^62)
        st = e[3] or 1
      end
      a.i[k + SLICE_BEGIN], a.i[k + SLICE_END], a.i[k + SLICE_STEP] = b, s, st
      k = k + SLICE_W
    end
    if e.kind ~= "int" then at[e] = kept; kept = kept + naxes end
  end
  a.ni = k
  local r = core.call(core.op_ids.slice, {x}, a)
  if #drop > 0 then
    local a2 = core.attrs()
    core.set_ints(a2, drop, slot.SQUEEZE_AXES, fname)
    r = core.call(core.op_ids.squeeze, {r}, a2)
  end
  return r, at
end

-- The positions of the true elements of a bool array, row-major, as an
-- int64 array on the same device (the host reads the mask, as NumPy's
-- nonzero: the result's length depends on the values).
local function nonzero_flat(mask)
  local n = mask.size
  local buf = ffi.new("uint8_t[?]", n > 0 and n or 1)
  core.check(C.luon_tensor_to_host(mask.t, buf, core.BOOL, n))
  local pos = ffi.new("int64_t[?]", n > 0 and n or 1)
  local m = 0
  for j = 0, n - 1 do
    if buf[j] ~= 0 then pos[m] = j; m = m + 1 end
  end
  local sh = ffi.new("int64_t[1]", m)
  local dev = mask.device
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(pos, core.INT64, 1, sh, dev.type_id, dev.device_id, out))
  return core.wrap(out[0])
end

-- take(y, idx, axis, mode raise), its out-of-bounds error naming x's axis.
local function gather(y, idx, axis, x_axis, fname)
  local half = core.info_of(y).dtype
  half = (half == HALF or half == BF16) and core.dtype_names[half]
  if half then y = y:astype("float32") end -- take has no 16-bit float kernels; exact
  local a = core.attrs()
  a.i[slot.TAKE_AXIS], a.i[slot.TAKE_MODE], a.ni = axis, 2, slot.TAKE_MODE + 1 -- mode raise
  local ok, r = pcall(core.call, core.op_ids.take, {y, idx}, a)
  if ok and half then r = r:astype(half) end
  if ok and r.size == 0 and idx.size > 0 then -- take checks no index when nothing is copied
    local n, k = y.shape[axis + 1], idx.size
    local buf = ffi.new("int64_t[?]", k)
    core.check(C.luon_tensor_to_host(idx.t, buf, core.INT64, 8 * k))
    for j = 0, k - 1 do
      local i = tonumber(buf[j])
      if i < -n or i >= n then
        core.error(("%s: index %d is out of bounds for axis %d with size %d"):format(fname, i, x_axis, n))
      end
    end
  end
  if ok then return r end
  local i, n = tostring(r):match("index (%-?%d+) is out of bounds for axis %d+ with size (%d+)")
  if i then
    core.error(("%s: index %s is out of bounds for axis %d with size %s"):format(fname, i, x_axis, n))
  end
  core.error(fname .. ": " .. tostring(r):gsub("^take: ", ""))
end

function M.get(x, key, fname)
  fname = fname or GET
  local ndim = x.ndim
  local list = parse(key, ndim, fname)
  local adv, nadv = nil, 0
  for _, e in ipairs(list) do
    if e.kind == "array" or e.kind == "mask" then adv, nadv = e, nadv + 1 end
  end
  if nadv > 1 then
    core.error(("%s: %d index arrays in one index; luon takes one per index (NumPy would pair them up): "
                .. "index one axis at a time, or gather with np.take"):format(fname, nadv))
  end
  local y, at = basic(x, list, fname)
  if not adv then return y end
  local idx, p = adv[1], at[adv]
  if adv.kind == "mask" then
    local ms, ys, k = idx.shape, y.shape, idx.ndim
    local same = true
    for j = 1, k do if ms[j] ~= ys[p + j] then same = false end end
    if not same then
      local want = {}
      for j = 1, k do want[j] = ys[p + j] end
      core.error(("%s: the boolean index has shape %s but the array's axes %d..%d have shape %s (array shape %s)")
                 :format(fname, shape_text(ms), adv.axis, adv.axis + k - 1, shape_text(want), shape_text(x.shape)))
    end
    if k > 1 then -- the mask's axes into one
      local s = {}
      for j = 1, p do s[j] = ys[j] end
      s[p + 1] = idx.size
      for j = p + k + 1, #ys do s[#s + 1] = ys[j] end
      local a = core.attrs()
      core.set_ints(a, s, 0, fname)
      y = core.call(core.op_ids.reshape, {y}, a)
    end
    idx = nonzero_flat(idx)
  end
  if idx.device ~= x.device then idx = idx:copyto(x.device) end
  local r = gather(y, idx, p, adv.axis, fname)
  -- NumPy: ints are advanced indices too; when they and the array are not
  -- side by side, the array's axes go first
  local first, last
  for _, e in ipairs(list) do
    if e.kind == "int" or e.kind == "array" or e.kind == "mask" then
      first, last = first or e.pos, e.pos
    end
  end
  local apart = false
  for _, e in ipairs(list) do
    if e.pos and e.pos > first and e.pos < last and e.kind ~= "int" and e ~= adv then apart = true end
  end
  if apart and p > 0 then
    local nd, k = r.ndim, idx.ndim
    local perm = {}
    for j = p, p + k - 1 do perm[#perm + 1] = j end
    for j = 0, nd - 1 do if j < p or j >= p + k then perm[#perm + 1] = j end end
    local a = core.attrs()
    core.set_ints(a, perm, 0, fname)
    r = core.call(core.op_ids.transpose, {r}, a)
  end
  return r
end

---------------------------------------------------------------------------
-- Writing

-- v as an array of x's dtype on x's device that broadcasts to shape (its
-- leading size-1 axes beyond shape's dimension dropped, as NumPy).
local function value_for(x, v, shape, fname)
  local info = core.info_of(x)
  local dt = core.dtype_names[info.dtype]
  local dev = core.device_from_ids(info.dev_type, info.dev_id)
  if type(v) == "boolean" then v = v and 1 or 0 end
  if type(v) == "number" then
    return np.full({}, v, {dtype = dt, device = dev})
  elseif type(v) == "table" and getmetatable(v) == nil then
    v = np.array(v, {dtype = dt, device = dev})
  elseif not is_array(v) then
    core.error(("%s: the value must be a number, a boolean, an ndarray or a nested table of numbers, got %s")
               :format(fname, show(v)))
  end
  local vs = v.shape
  local nv, n = #vs, #shape
  local ok = true
  for j = 1, nv do
    local d = vs[nv - j + 1]
    local t = shape[n - j + 1]
    if t == nil then ok = ok and d == 1 elseif d ~= 1 and d ~= t then ok = false end
  end
  if not ok then
    core.error(("%s: could not broadcast a value of shape %s into the selection's shape %s")
               :format(fname, shape_text(vs), shape_text(shape)))
  end
  if nv > n then
    local s = {}
    for j = nv - n + 1, nv do s[#s + 1] = vs[j] end
    v = v:reshape(s)
  end
  if v.device ~= dev then v = v:copyto(dev) end
  return v
end

-- x's row-major positions that key selects, last write first: the host
-- reads them (k of them) and keeps one entry per position, the last one.
local function unique_last(sel)
  local k = sel.size
  local buf = ffi.new("int64_t[?]", k > 0 and k or 1)
  core.check(C.luon_tensor_to_host(sel.t, buf, core.INT64, 8 * k))
  local last, order, m = {}, {}, 0
  for j = 0, k - 1 do
    local p = tonumber(buf[j])
    if last[p] == nil then m = m + 1; order[m] = p end
    last[p] = j
  end
  local pos = ffi.new("int64_t[?]", m > 0 and m or 1)
  local src = ffi.new("double[?]", m > 0 and m or 1)
  for i = 1, m do
    pos[i - 1] = order[i]
    src[i - 1] = last[order[i]] + 1
  end
  return pos, src, m
end

local function host_array(buf, dt, n, dev)
  local sh = ffi.new("int64_t[1]", n)
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(buf, dt, 1, sh, dev.type_id, dev.device_id, out))
  return core.wrap(out[0])
end

-- The new values of all of x for an advanced key: gathered from the
-- flattened value where the key wrote (its last write), x elsewhere.
local function scattered(x, key, v, fname)
  local dev, size = x.device, x.size
  local where = np.arange(size, {dtype = "int64", device = dev}):reshape(x.shape)
  local sel = M.get(where, key, fname)
  local vb = value_for(x, v, sel.shape, fname)
  if sel.size == 0 then return nil end
  local flat, xflat = np.broadcast_to(vb, sel.shape):reshape({-1}), x:reshape({-1})
  local dt = core.info_of(x).dtype
  if dt == HALF or dt == BF16 then -- as gather; the copy into x converts back, exactly
    flat, xflat = flat:astype("float32"), xflat:astype("float32")
  end
  local pos, src, m = unique_last(sel)
  local P = host_array(pos, core.INT64, m, dev)
  local S = host_array(src, core.FLOAT64, m, dev)
  local a = core.attrs()
  a.i[slot.TAKE_AXIS], a.i[slot.TAKE_MODE], a.i[slot.TAKE_GRAD_NDIM] = 0, 2, 1 -- axis 0, mode raise, 1-d
  a.i[slot.TAKE_GRAD_NDIM + 1], a.ni = size, slot.TAKE_GRAD_NDIM + 2 -- its shape: (size,)
  local from = core.call(core.op_ids.take_grad, {S, P}, a) -- j + 1 where written, 0 elsewhere
  local hit = np.greater(from, 0)
  local j = np.subtract(from, 1):astype("int64")
  local vals = np.take(flat, j, 0, {mode = "clip"})
  return np.where(hit, vals, xflat):reshape(x.shape)
end

-- Whether the entries of key are all basic (numbers, slices, '...').
local function is_basic(x, key, fname)
  for _, e in ipairs(parse(key, x.ndim, fname)) do
    if e.kind == "array" or e.kind == "mask" then return false end
  end
  return true
end

local function run_paused(f, ...)
  local was = C.luon_autograd_set_recording(0)
  local ok, r = pcall(f, ...)
  C.luon_autograd_set_recording(was)
  if not ok then core.error(tostring(r)) end -- (raised past pcall's frame: no position yet)
  return r
end

-- x[key] = v. A basic key writes v into the view x[key]; an advanced one
-- computes all of x anew and copies it in. Either way the last step is
-- copyto's, which refuses arrays in a recorded graph.
function M.set(x, key, v, fname)
  fname = fname or SET
  if is_array(v) and C.luon_autograd_is_recording() ~= 0 then
    local info = core.info_of(v)
    if info.requires_grad ~= 0 or info.recorded ~= 0 then -- MXNet refuses it too
      core.error(("%s: the value is part of a computational graph, and writes into arrays are not "
                  .. "recorded (its gradient would be lost): build the result with np.where or "
                  .. "np.concatenate instead, or write outside autograd.record()"):format(fname))
    end
  end
  if is_basic(x, key, fname) then
    local view = M.get(x, key, fname)
    local vb = run_paused(value_for, x, v, view.shape, fname)
    if not core.same_shape(vb.shape, view.shape) then
      vb = run_paused(np.broadcast_to, vb, view.shape)
    end
    core.check(C.luon_tensor_copy(view.t, vb.t))
    return
  end
  local new = run_paused(scattered, x, key, v, fname)
  if new then core.check(C.luon_tensor_copy(x.t, new.t)) end
end

-- x:set(v): fill x (an array or a view) with v, broadcast.
function M.fill(x, v)
  if not is_array(x) then core.error(("set: expected an ndarray, got %s"):format(core.show_value(x))) end
  M.set(x, {}, v, "set")
  return x
end

return M
