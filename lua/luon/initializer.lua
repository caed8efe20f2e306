-- luon.initializer (luon.init, MXNet's mx.init): objects that fill a
-- parameter's array in place. Random draws come from np.random on the array's
-- device (Parameter initializes on cpu(0), then copies), seeded by
-- np.random.seed. Not here: which initializer a parameter gets (Parameter's
-- precedence: explicit > the layer's > the block-level default).
local core = require("luon.core")
local np = require("luon.np")

local init = {}

local Initializer = core.class("Initializer")
init.Initializer = Initializer
-- the base (MXNet's Initializer()): made, it fills nothing
function Initializer.__init() end
Initializer._required = {{"_init_weight", text = "_init_weight(name, arr)"}}
function Initializer:_init_weight()
  core.error(("%s: the base class fills no array; use init.Zero, One, Constant, Uniform, Normal, Xavier " ..
              "or MSRAPrelu, or give a class of your own an _init_weight(name, arr)"):format(tostring(self)))
end

-- init.<name>(...) makes one (core.class: ctor is its __init).
local function class(name, ctor)
  local cls = core.class(name, Initializer)
  cls.__init = ctor
  init[name] = cls
  return cls
end

-- Keyword-or-positional (core.args): Uniform(0.1) and Uniform{scale = 0.1}
-- both work, and an unknown keyword is an error naming the known ones.
local uniform_names, normal_names, constant_names = {"scale"}, {"sigma"}, {"value"}
local xavier_names, msra_names = {"rnd_type", "factor_type", "magnitude"}, {"factor_type", "slope"}

-- A spread (scale, sigma, magnitude): a finite number >= 0.
local function spread(v, cls, key)
  if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
    core.error(("%s: %s must be a finite number >= 0, got %s"):format(cls, key, core.show_value(v)))
  end
  return v
end

function Initializer.__tostring(self)
  local parts = {}
  for _, k in ipairs(self._repr or {}) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(self[k])) end
  return ("%s(%s)"):format(self.__name, table.concat(parts, ", "))
end

-- init(arr) or init(name, arr): fill arr in place (the name is for errors).
function Initializer.__call(self, name, arr)
  if arr == nil then name, arr = "array", name end
  if not core.is_array(arr) then
    core.error(("%s: expected an ndarray to initialize, got %s"):format(tostring(self), type(arr)))
  end
  self:_init_weight(name, arr)
  return arr
end

local function fill(arr, v)
  np.full(arr.shape, v, {dtype = arr.dtype, device = arr.device}):copyto(arr)
end

-- 16-bit floats are drawn in float32 and rounded (random ops make no 16-bit values)
local function draw(arr, fn, a, b)
  local dt = (arr.dtype == "float16" or arr.dtype == "bfloat16") and "float32" or arr.dtype
  fn(a, b, arr.shape, {dtype = dt, device = arr.device}):copyto(arr)
end

local Zero = class("Zero", function() end)
function Zero:_init_weight(_, arr) fill(arr, 0) end

local One = class("One", function() end)
function One:_init_weight(_, arr) fill(arr, 1) end

local Constant = class("Constant", function(self, ...)
  local value = core.args("Constant", constant_names, constant_names, ...).value
  if type(value) ~= "number" then
    core.error(("Constant: value must be a number, got %s"):format(tostring(value)))
  end
  self.value, self._repr = value, {"value"}
end)
function Constant:_init_weight(_, arr) fill(arr, self.value) end

-- U[-scale, scale]
local Uniform = class("Uniform", function(self, ...)
  local scale = core.args("Uniform", uniform_names, uniform_names, ...).scale
  self.scale, self._repr = spread(scale == nil and 0.07 or scale, "Uniform", "scale"), {"scale"}
end)
function Uniform:_init_weight(_, arr) draw(arr, np.random.uniform, -self.scale, self.scale) end

-- N(0, sigma)
local Normal = class("Normal", function(self, ...)
  local sigma = core.args("Normal", normal_names, normal_names, ...).sigma
  self.sigma, self._repr = spread(sigma == nil and 0.01 or sigma, "Normal", "sigma"), {"sigma"}
end)
function Normal:_init_weight(_, arr) draw(arr, np.random.normal, 0, self.sigma) end

-- fan_in = shape[1]*prod(shape[2:]), fan_out = shape[0]*prod(shape[2:])
local function fans(self, name, arr)
  local shape = arr.shape
  if #shape < 2 then
    core.error(("%s: cannot initialize '%s' of shape (%s): it needs at least 2 dimensions")
               :format(self.__name, name, table.concat(shape, ", ")))
  end
  local hw = 1
  for k = 3, #shape do hw = hw * shape[k] end
  local fan_in, fan_out = shape[2] * hw, shape[1] * hw
  local ft = self.factor_type
  if ft == "avg" then return (fan_in + fan_out) / 2 end
  if ft == "in" then return fan_in end
  return fan_out
end

local function factor_type(ft, who)
  if ft ~= "avg" and ft ~= "in" and ft ~= "out" then
    core.error(("%s: factor_type must be 'avg', 'in' or 'out', got %s"):format(who, tostring(ft)))
  end
  return ft
end

-- scale = sqrt(magnitude / factor); uniform U[-scale, scale] or gaussian N(0, scale)
local Xavier = class("Xavier", function(self, ...)
  local a = core.args("Xavier", xavier_names, xavier_names, ...)
  self.rnd_type = a.rnd_type or "uniform"
  self.factor_type = factor_type(a.factor_type or "avg", "Xavier")
  self.magnitude = spread(a.magnitude or 3, "Xavier", "magnitude")
  if self.rnd_type ~= "uniform" and self.rnd_type ~= "gaussian" then
    core.error(("Xavier: rnd_type must be 'uniform' or 'gaussian', got %s"):format(tostring(self.rnd_type)))
  end
  self._repr = {"rnd_type", "factor_type", "magnitude"}
end)
function Xavier:_init_weight(name, arr)
  local scale = math.sqrt(self.magnitude / fans(self, name, arr))
  if self.rnd_type == "uniform" then
    draw(arr, np.random.uniform, -scale, scale)
  else
    draw(arr, np.random.normal, 0, scale)
  end
end

-- Xavier(gaussian, factor_type, 2 / (1 + slope^2))
local MSRAPrelu = class("MSRAPrelu", function(self, ...)
  local a = core.args("MSRAPrelu", msra_names, msra_names, ...)
  self.factor_type = factor_type(a.factor_type or "avg", "MSRAPrelu")
  self.slope = core.num_arg(a.slope or 0.25, "MSRAPrelu", "slope")
  self.rnd_type, self.magnitude = "gaussian", 2 / (1 + self.slope ^ 2)
  self._repr = {"factor_type", "slope"}
end)
MSRAPrelu._init_weight = Xavier._init_weight

-- Names accepted where MXNet accepts a string initializer.
local by_name = {zeros = init.Zero, zero = init.Zero, ones = init.One, one = init.One,
                 uniform = init.Uniform, normal = init.Normal, xavier = init.Xavier,
                 msraprelu = init.MSRAPrelu}

function init.is_initializer(v)
  return type(v) == "table" and rawget(v, "__name") == nil and getmetatable(v) ~= Initializer
         and core.derives(v, Initializer)
end

-- register(cls) under its class name (as MXNet's init.register),
-- register(cls, name) or register(name, cls); cls derives from Initializer.
-- Then initialize{init = 'name'} and create('name') make one.
function init.register(a, b)
  return core.register(by_name, Initializer, "init.register", a, b)
end

-- An Initializer from an Initializer, a name ('zeros', 'ones', 'xavier', ...)
-- or nil (nil stays nil).
function init.create(v, who)
  if v == nil or init.is_initializer(v) then return v end
  if type(v) == "string" then
    local ctor = by_name[v:lower()]
    if ctor then return ctor() end
  end
  local names = {}
  for k in pairs(by_name) do names[#names + 1] = "'" .. k .. "'" end
  table.sort(names)
  core.error(("%s: unknown initializer %s (expected a luon.init object such as init.Xavier(), " ..
              "or one of %s)")
             :format(who or "initializer", tostring(v), table.concat(names, ", ")))
end

return core.strict_module(init, "init")
