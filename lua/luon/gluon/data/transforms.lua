-- luon.gluon.data.transforms: Gluon's vision transforms (gluon.data.vision.
-- transforms). Each transform is a callable object holding one C step
-- (core/data/transform*.c); Compose of built-in transforms hands the whole list to
-- C as one pipeline (fused there), and falls back to calling its items in
-- order when the list holds Lua functions or other callables.
--
--   local T = gluon.data.vision.transforms
--   local t = T.Compose{T.Resize{size = 224, keep_ratio = true}, T.CenterCrop(128),
--                       T.RandomFlipLeftRight(), T.ToTensor(), T.Normalize(mean, std)}
--   local y = t(img)                  -- img: (H,W,C) uint8 ndarray
--   local steps, n = t:c_steps()      -- for the data loader: luon_transform_step[n]
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local T = {}

-- The step kinds (luon_transform_kind, read from the cdef: K.RESIZE is
-- LUON_TF_RESIZE).
local K = {}
for _, name in ipairs({"CAST", "TO_TENSOR", "NORMALIZE", "RESIZE", "CENTER_CROP", "RANDOM_CROP",
                       "RANDOM_RESIZED_CROP", "FLIP_LR", "FLIP_TB", "BRIGHTNESS", "CONTRAST",
                       "SATURATION", "HUE", "COLOR_JITTER", "LIGHTING"}) do
  K[name] = C["LUON_TF_" .. name]
end
T.kinds = K

local step_t = ffi.typeof("luon_transform_step[?]")
local outp = ffi.new("luon_tensor*[1]")
local seedp = ffi.new("uint64_t[1]")

---------------------------------------------------------------------------
-- The base of every transform: callable, forward(x, ...) -> x', ...

local Transform = {}
Transform.__index = Transform
T.Transform = Transform

local function is_transform(t)
  local mt = getmetatable(t)
  while mt do
    if mt == Transform then return true end
    local parent = getmetatable(mt)
    mt = parent and parent.__index
    if type(mt) ~= "table" then return false end
  end
  return false
end

-- Fill a C step array from Lua step tables.
local function to_c(steps)
  local n = #steps
  local arr = step_t(math.max(n, 1))
  for k = 1, n do
    local s, c = steps[k], arr[k - 1]
    for field, v in pairs(s) do
      if type(v) == "table" then
        for j = 1, #v do c[field][j - 1] = v[j] end
      elseif type(v) == "boolean" then
        c[field] = v and 1 or 0
      else
        c[field] = v
      end
    end
  end
  return arr, n
end

local function is_random(steps)
  local arr, n = to_c(steps)
  return C.luon_transform_is_random(arr, n) ~= 0
end

-- Run a C pipeline on x (an ndarray): a new ndarray on x's device.
local function run(arr, n, random, x, name, seed, index, reference)
  if not core.is_array(x) then
    core.error(("%s: expects an ndarray image, got %s"):format(name, type(x)))
  end
  local info = core.info_of(x)
  local dev
  if info.dev_type ~= C.LUON_CPU then
    dev = core.device_from_ids(info.dev_type, info.dev_id)
    x = x:copyto(core.device("cpu", 0))
  end
  if seed == nil then
    if random then
      C.luon_transform_next_seed(seedp)
      seed = seedp[0]
    else
      seed = 0
    end
  end
  local f = reference and C.luon_transform_apply_reference or C.luon_transform_apply
  local st = f(arr, n, x.t, seed, index or 0, outp)
  if st ~= 0 then core.raise() end
  local y = core.wrap(outp[0])
  core.gc_pressure()
  if dev then y = y:copyto(dev) end
  return y
end

-- The C steps of this transform: (luon_transform_step array, n), or nil
-- when it holds something only Lua can run.
function Transform:c_steps()
  if not self._steps then return nil end
  if not self._arr then self._arr, self._n = to_c(self._steps) end
  return self._arr, self._n
end

function Transform:forward(x, ...)
  local arr, n = self:c_steps()
  return run(arr, n, self._random, x, self._name), ...
end

-- Tests and loaders: apply with an explicit seed and sample index (same
-- (seed, index), same augmentation); reference=true skips the fusion.
function Transform:_apply(x, seed, index, reference)
  local arr, n = self:c_steps()
  if not arr then core.error(self._name .. ": _apply needs a pipeline of built-in transforms") end
  return run(arr, n, self._random, x, self._name, seed, index, reference)
end

-- A transform of one C step; repr is how it prints.
local function make(name, step, repr)
  local t = setmetatable({_name = name, _steps = {step}, _repr = repr}, Transform)
  t._random = is_random(t._steps)
  return t
end

-- A copy whose random draws are fixed (see luon_transform_step.use_fixed):
-- t:_fixed(1.5) is RandomBrightness with alpha 1.5.
function Transform:_fixed(...)
  if not self._steps or #self._steps ~= 1 then core.error(self._name .. ": _fixed needs a single step") end
  local s = {}
  for k, v in pairs(self._steps[1]) do s[k] = v end
  s.use_fixed, s.fixed = 1, {...}
  return make(self._name, s, self._repr)
end

function Transform.__call(self, x, ...) return self:forward(x, ...) end
function Transform.__tostring(self) return self._repr or self._name end


---------------------------------------------------------------------------
-- Argument helpers

local function number_arg(name, what, v, default, min)
  if v == nil then v = default end
  if type(v) ~= "number" or v ~= v then
    core.error(("%s: %s must be a number, got %s"):format(name, what, tostring(v)))
  end
  if min and v < min then core.error(("%s: %s must be >= %s, got %s"):format(name, what, min, v)) end
  return v
end

local function interp_arg(name, v)
  v = number_arg(name, "interpolation", v, 1)
  if v % 1 ~= 0 or v < 0 or v > 3 then
    core.error(("%s: interpolation %s is not supported (0 nearest, 1 bilinear, 2 bicubic, 3 area)"):format(name, tostring(v)))
  end
  return v
end

-- size: an integer or {w, h}; returns w, h, is_int.
local function size_arg(name, size)
  if type(size) == "number" then size = {size} elseif type(size) ~= "table" then
    core.error(("%s: size must be an integer or {width, height}, got %s"):format(name, tostring(size)))
  end
  if #size ~= 1 and #size ~= 2 then
    core.error(("%s: input size dimension must be 1 or 2, but got %d"):format(name, #size))
  end
  for k = 1, #size do
    local v = size[k]
    if type(v) ~= "number" or v % 1 ~= 0 then
      core.error(("%s: size entries must be integers, got %s"):format(name, tostring(v)))
    end
    if v <= 0 then core.error(("%s: size should be greater than 0, but got %s"):format(name, tostring(v))) end
  end
  return size[1], size[2] or size[1], #size == 1
end

local function list_arg(name, what, v, default)
  if v == nil then v = default end
  if type(v) == "number" then return {v} end
  if core.is_array(v) then v = v:totable() end
  if type(v) ~= "table" or #v == 0 or #v > 4 then
    core.error(("%s: %s must be a number or a list of 1 to 4 numbers, got %s"):format(name, what,
        type(v) == "table" and ("a list of " .. #v) or core.show_value(v)))
  end
  for k = 1, #v do
    if type(v[k]) ~= "number" then core.error(("%s: %s[%d] is not a number"):format(name, what, k)) end
  end
  return v
end

local function fmt_list(v)
  local p = {}
  for k = 1, #v do p[k] = ("%g"):format(v[k]) end
  return "(" .. table.concat(p, ", ") .. ")"
end

---------------------------------------------------------------------------
-- The transforms

-- A transform's keywords (Gluon's keyword arguments): a table of these keys.
local function keys(kw, name, known) return core.check_keys(kw, name, known, nil, "argument") end

function T.Cast(dtype)
  if type(dtype) == "table" then dtype = keys(dtype, "Cast", {"dtype"}).dtype end
  local id = core.dtype_id(dtype or "float32", "Cast")
  return make("Cast", {kind = K.CAST, dtype = id}, ("Cast(%s)"):format(core.dtype_names[id]))
end

function T.ToTensor()
  return make("ToTensor", {kind = K.TO_TENSOR}, "ToTensor()")
end

function T.Normalize(mean, std)
  if type(mean) == "table" and getmetatable(mean) == nil and (mean.mean ~= nil or mean.std ~= nil) then
    mean, std = keys(mean, "Normalize", {"mean", "std"}).mean, mean.std
  end
  local m = list_arg("Normalize", "mean", mean, 0)
  local s = list_arg("Normalize", "std", std, 1)
  for k = 1, #s do
    if s[k] == 0 then core.error(("Normalize: std[%d] is 0"):format(k)) end
  end
  return make("Normalize", {kind = K.NORMALIZE, mean = m, std = s, nmean = #m, nstd = #s},
              ("Normalize(mean=%s, std=%s)"):format(fmt_list(m), fmt_list(s)))
end

-- Resize(size, {keep_ratio=, interpolation=}), Resize(size, keep_ratio, interpolation)
-- or Resize{size=, keep_ratio=, interpolation=}.
function T.Resize(size, a, b)
  local keep, interp
  if type(size) == "table" and getmetatable(size) == nil and size.size ~= nil then
    keys(size, "Resize", {"size", "keep_ratio", "interpolation"})
    keep, interp, size = size.keep_ratio, size.interpolation, size.size
  elseif type(a) == "table" then
    keys(a, "Resize", {"keep_ratio", "interpolation"})
    keep, interp = a.keep_ratio, a.interpolation
  else
    keep, interp = a, b
  end
  local w, h, is_int = size_arg("Resize", size)
  interp = interp_arg("Resize", interp)
  keep = (keep and is_int) and 1 or 0
  return make("Resize", {kind = K.RESIZE, width = w, height = h, keep_ratio = keep, interp = interp},
              ("Resize(size=(%d, %d), keep_ratio=%s, interpolation=%d)"):format(w, h, keep == 1, interp))
end

local function crop_ctor(name, kind, known)
  return function(size, o)
    local kw = type(size) == "table" and getmetatable(size) == nil and size.size ~= nil and size or nil
    if kw then size, o = kw.size, kw end
    if type(o) == "number" then o = {interpolation = o} end
    o = o or {}
    if type(o) == "table" then keys(o, name, known) end
    local w, h = size_arg(name, size)
    local s = {kind = kind, width = w, height = h, interp = interp_arg(name, o.interpolation)}
    return s, o, ("%s(size=(%d, %d))"):format(name, w, h)
  end
end

local center_args = crop_ctor("CenterCrop", K.CENTER_CROP, {"size", "interpolation"})
function T.CenterCrop(size, interpolation)
  local s, _, repr = center_args(size, interpolation)
  return make("CenterCrop", s, repr)
end

local random_crop_args = crop_ctor("RandomCrop", K.RANDOM_CROP, {"size", "pad", "interpolation"})
function T.RandomCrop(size, o)
  local s, kw, repr = random_crop_args(size, o)
  local pad = kw.pad or 0
  if type(pad) ~= "number" or pad % 1 ~= 0 or pad < 0 then
    core.error(("RandomCrop: pad must be an integer >= 0, got %s"):format(tostring(pad)))
  end
  s.pad = pad
  return make("RandomCrop", s, repr)
end

local rrc_args = crop_ctor("RandomResizedCrop", K.RANDOM_RESIZED_CROP, {"size", "scale", "ratio", "interpolation"})
function T.RandomResizedCrop(size, o)
  local s, kw, repr = rrc_args(size, o)
  local scale = kw.scale or {0.08, 1.0}
  local ratio = kw.ratio or {3 / 4, 4 / 3}
  if type(scale) == "number" then scale = {scale, 1.0} end
  if type(scale) ~= "table" or #scale ~= 2 or type(ratio) ~= "table" or #ratio ~= 2 or
     type(scale[1]) ~= "number" or type(scale[2]) ~= "number" or
     type(ratio[1]) ~= "number" or type(ratio[2]) ~= "number" then
    core.error("RandomResizedCrop: scale and ratio must be pairs of numbers {min, max}")
  end
  if not (scale[1] > 0 and scale[1] <= scale[2]) then
    core.error(("RandomResizedCrop: scale must satisfy 0 < min <= max, got %s"):format(fmt_list(scale)))
  end
  if not (ratio[1] > 0 and ratio[1] <= ratio[2]) then
    core.error(("RandomResizedCrop: ratio must satisfy 0 < min <= max, got %s"):format(fmt_list(ratio)))
  end
  s.scale, s.ratio = {scale[1], scale[2]}, {ratio[1], ratio[2]}
  return make("RandomResizedCrop", s, repr)
end

local function flip_ctor(name, kind)
  return function(p)
    if type(p) == "table" then p = keys(p, name, {"p"}).p end
    p = number_arg(name, "p", p, 0.5)
    return make(name, {kind = kind, p = p}, ("%s(p=%g)"):format(name, p))
  end
end
T.RandomFlipLeftRight = flip_ctor("RandomFlipLeftRight", K.FLIP_LR)
T.RandomFlipTopBottom = flip_ctor("RandomFlipTopBottom", K.FLIP_TB)

local function color_ctor(name, kind, field)
  local known = {field}
  return function(v)
    if type(v) == "table" then v = keys(v, name, known)[field] end
    v = number_arg(name, field, v, nil, 0)
    return make(name, {kind = kind, [field] = v}, ("%s(%s=%g)"):format(name, field, v))
  end
end
T.RandomBrightness = color_ctor("RandomBrightness", K.BRIGHTNESS, "brightness")
T.RandomContrast = color_ctor("RandomContrast", K.CONTRAST, "contrast")
T.RandomSaturation = color_ctor("RandomSaturation", K.SATURATION, "saturation")
T.RandomHue = color_ctor("RandomHue", K.HUE, "hue")
T.RandomLighting = color_ctor("RandomLighting", K.LIGHTING, "alpha")

function T.RandomColorJitter(b, c, s, h)
  if type(b) == "table" then
    keys(b, "RandomColorJitter", {"brightness", "contrast", "saturation", "hue"})
    b, c, s, h = b.brightness, b.contrast, b.saturation, b.hue
  end
  local n = "RandomColorJitter"
  b, c = number_arg(n, "brightness", b, 0, 0), number_arg(n, "contrast", c, 0, 0)
  s, h = number_arg(n, "saturation", s, 0, 0), number_arg(n, "hue", h, 0, 0)
  return make(n, {kind = K.COLOR_JITTER, brightness = b, contrast = c, saturation = s, hue = h},
              ("RandomColorJitter(brightness=%g, contrast=%g, saturation=%g, hue=%g)"):format(b, c, s, h))
end

---------------------------------------------------------------------------
-- Compose

local Compose = setmetatable({}, {__index = Transform})
Compose.__index = Compose
Compose.__call = Transform.__call
Compose.__tostring = function(self)
  local p = {}
  for k, t in ipairs(self._items) do p[k] = "  " .. tostring(t) end
  return "Compose(\n" .. table.concat(p, "\n") .. "\n)"
end

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

-- Compose{t1, t2, ...}: applies the items in order. Runs of built-in
-- transforms become one C pipeline each; other callables run between them.
function T.Compose(list)
  if type(list) ~= "table" then core.error("Compose: expects a list of transforms") end
  local items, groups, cur = {}, {}, nil
  for k = 1, #list do
    local t = list[k]
    if not is_callable(t) then
      core.error(("Compose: item %d is not a transform or function (%s)"):format(k, type(t)))
    end
    items[k] = t
    if is_transform(t) and t._steps then
      if not cur then
        cur = {steps = {}}
        groups[#groups + 1] = cur
      end
      for _, s in ipairs(t._steps) do cur.steps[#cur.steps + 1] = s end
    else
      cur = nil
      groups[#groups + 1] = {fn = t}
    end
  end
  for _, g in ipairs(groups) do
    if g.steps then
      g.arr, g.n = to_c(g.steps)
      g.random = is_random(g.steps)
    end
  end
  local self = setmetatable({_name = "Compose", _items = items, _groups = groups}, Compose)
  if #groups == 1 and groups[1].steps then
    self._steps, self._arr, self._n, self._random = groups[1].steps, groups[1].arr, groups[1].n, groups[1].random
  elseif #groups == 0 then
    self._steps, self._arr, self._n, self._random = {}, step_t(1), 0, false
  end
  return self
end

function Compose:forward(x, ...)
  if self._steps then return run(self._arr, self._n, self._random, x, "Compose"), ... end
  local n = select("#", ...)
  local rest = {...}
  for _, g in ipairs(self._groups) do
    if g.steps then
      x = run(g.arr, g.n, g.random, x, "Compose")
    elseif n == 0 then
      x = g.fn(x)
    else
      -- a transform given extra args returns them too (Gluon's convention)
      local r = {g.fn(x, unpack(rest, 1, n))}
      x = r[1]
      for k = 1, n do if r[k + 1] ~= nil then rest[k] = r[k + 1] end end
    end
  end
  return x, unpack(rest, 1, n)
end

-- The pipeline as C steps when every item is built in; nil otherwise.
function Compose:c_steps()
  if not self._steps then return nil end
  return self._arr, self._n
end

-- Shape and dtype name of the result for an image shape {H, W, C} and
-- dtype name (nil when the pipeline is not all C).
function Transform:out_shape(shape, dtype)
  local arr, n = self:c_steps()
  if not arr then return nil end
  local ins, outs, dt = ffi.new("int64_t[3]", shape), ffi.new("int64_t[3]"), ffi.new("int32_t[1]")
  core.check(C.luon_transform_out_shape(arr, n, 3, ins, core.dtype_id(dtype or "uint8", "out_shape"),
                                        outs, dt))
  return {tonumber(outs[0]), tonumber(outs[1]), tonumber(outs[2])}, core.dtype_names[dt[0]]
end

return core.strict_module(T, "gluon.data.vision.transforms")
