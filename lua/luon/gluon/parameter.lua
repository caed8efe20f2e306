-- luon.gluon.parameter: Parameter (one array per device, each with its
-- gradient) and the ordered ParameterDict that collect_params returns, with
-- MXNet Gluon 2.0 semantics: deferred initialization, initializer
-- precedence, replicas initialized once on cpu(0) and copied. Not here:
-- blocks, file formats, optimizers.
local core = require("luon.core")
local np = require("luon.np")
local autograd = require("luon.autograd")
local initializer = require("luon.initializer")

local M = {}
-- Bumped whenever a parameter's arrays are replaced (not updated in place):
-- hybridized graphs, which hold parameters' arrays, look at it to rebind.
M.generation = 0

-- Warnings go through core.warn (tests replace it to capture them).

local Parameter = {}
M.Parameter = Parameter
local methods = {}
Parameter.methods = methods
local getters, setters = {}, {}

local function is_parameter(v) return type(v) == "table" and getmetatable(v) == Parameter end
M.is_parameter = is_parameter

local cpu0 = core.device("cpu", 0)

local function tuple(shape)
  if shape == nil then return "None" end
  local parts = {}
  for k = 1, #shape do parts[k] = tostring(shape[k]) end
  return "(" .. table.concat(parts, ", ") .. (#shape == 1 and ",)" or ")")
end
M.tuple = tuple

local function dev_list(devs)
  local parts = {}
  for k = 1, #devs do parts[k] = tostring(devs[k]) end
  return "[" .. table.concat(parts, ", ") .. "]"
end
M.dev_list = dev_list

local function known(shape)
  if shape == nil then return false end
  for k = 1, #shape do if shape[k] <= 0 then return false end end
  return true
end

-- A shape argument: nil, an integer, or a list; 0 and -1 mean unknown.
local function shape_of(s, who)
  if s == nil then return nil end
  if type(s) == "number" then s = {s} end
  if type(s) ~= "table" then
    core.error(("%s: shape must be a list of integers such as {10, 5}, got %s"):format(who, tostring(s)))
  end
  local out = {}
  for k = 1, #s do
    local v = s[k]
    if type(v) ~= "number" or v % 1 ~= 0 or v < -1 then
      core.error(("%s: shape entries must be integers >= -1 (-1 or 0: unknown), got %s"):format(who, tostring(v)))
    end
    out[k] = v == 0 and -1 or v
  end
  return out
end

-- A device argument: nil (current), a Device, or a list -> list of Devices.
local function devices_of(dev, who)
  if dev == nil then return {core.default_device} end
  if core.is_device(dev) or type(dev) == "string" then return {core.resolve_device(dev, who)} end
  if type(dev) ~= "table" or #dev == 0 then
    core.error(("%s: device must be a Device or a non-empty list of Devices, got %s"):format(who, tostring(dev)))
  end
  local out, seen = {}, {}
  for k = 1, #dev do
    local d = core.resolve_device(dev[k], who)
    if seen[d] then core.error(("%s: device %s appears twice in the device list"):format(who, tostring(d))) end
    seen[d] = true
    out[k] = d
  end
  return out
end
M.devices_of = devices_of

local grad_reqs = {write = true, add = true, null = true}

-- Parameter(name, {shape=, dtype=, init=, grad_req=, allow_deferred_init=,
-- differentiable=, lr_mult=, wd_mult=}), or positional in MXNet's order
-- (name, grad_req, shape, dtype, lr_mult, wd_mult, init, ...), or
-- Parameter{name =, ...}. stype and grad_stype: 'default' only.
local new_names = {"name", "grad_req", "shape", "dtype", "lr_mult", "wd_mult", "init",
                   "allow_deferred_init", "differentiable", "stype", "grad_stype"}
function M.new(...)
  local kw = core.args("Parameter", new_names, new_names, ...)
  for _, key in ipairs({"stype", "grad_stype"}) do
    if kw[key] ~= nil and kw[key] ~= "default" then
      core.error(("Parameter: %s %s is not supported (dense arrays only: 'default')")
                 :format(key, core.show_value(kw[key])))
    end
  end
  local name = kw.name or "weight"
  if type(name) ~= "string" then core.error("Parameter: name must be a string, got " .. type(name)) end
  local p = {
    name = name,
    _shape = shape_of(kw.shape, "Parameter '" .. name .. "'"),
    _dtype = kw.dtype and core.dtype_names[core.dtype_id(kw.dtype, "Parameter")] or "float32",
    init = initializer.create(kw.init, "Parameter '" .. name .. "'"),
    allow_deferred_init = kw.allow_deferred_init or false,
    _differentiable = kw.differentiable ~= false,
    _lr_mult = 1,
    _wd_mult = 1,
    _grad_req = "write",
    _data = nil,      -- list of replicas, in device order
    _devices = nil,   -- list of Devices
    _by_dev = nil,    -- Device -> replica
    _deferred = nil,  -- {init=, devices=, default_init=, data=}
  }
  setmetatable(p, Parameter)
  local req = kw.grad_req or "write"
  if not grad_reqs[req] then
    core.error(("Parameter '%s': grad_req must be 'write', 'add' or 'null', got %s"):format(name, tostring(req)))
  end
  p._grad_req = p._differentiable and req or "null"
  if kw.lr_mult ~= nil then p.lr_mult = kw.lr_mult end
  if kw.wd_mult ~= nil then p.wd_mult = kw.wd_mult end
  return p
end

function Parameter.__index(p, k)
  local m = methods[k]
  if m then return m end
  local g = getters[k]
  if g then return g(p) end
  -- "_..." names are luon's own probes; init is nil when none was given
  if type(k) == "string" and k:byte(1) ~= 95 and k ~= "init" then
    local names = {}
    for _, t in ipairs({p, methods, getters}) do
      for n in pairs(t) do if type(n) == "string" and n:byte(1) ~= 95 then names[#names + 1] = n end end
    end
    core.no_field("Parameter", k, names)
  end
  return nil
end

function Parameter.__newindex(p, k, v)
  local s = setters[k]
  if s then return s(p, v) end
  rawset(p, k, v)
end

function Parameter.__tostring(p)
  return ("Parameter (shape=%s, dtype=%s)"):format(tuple(p.shape), p._dtype)
end

function getters.shape(p)
  if p._shape == nil then return nil end
  local s = {}
  for k = 1, #p._shape do s[k] = p._shape[k] end
  return s
end
function getters.dtype(p) return p._dtype end
function getters.lr_mult(p) return p._lr_mult end
function getters.wd_mult(p) return p._wd_mult end
function getters.grad_req(p) return p._grad_req end
function getters.differentiable(p) return p._differentiable end

-- shape: same rank, and every stored dim unknown or equal.
function setters.shape(p, new)
  new = shape_of(new, "Parameter '" .. p.name .. "'")
  local old = p._shape
  if old == nil then p._shape = new; return end
  local ok = new ~= nil and #new == #old
  if ok then
    for k = 1, #old do
      if old[k] ~= -1 and new[k] ~= -1 and old[k] ~= new[k] then ok = false end
    end
  end
  if not ok then
    core.error(("Expected shape %s is incompatible with given shape %s for Parameter '%s'")
               :format(tuple(new), tuple(old), p.name))
  end
  for k = 1, #old do if old[k] == -1 then old[k] = new[k] end end
end

function setters.dtype(p, v) methods.cast(p, v) end
-- the optimizer's learning-rate and weight-decay multipliers of p: numbers
for _, field in ipairs({"lr_mult", "wd_mult"}) do
  setters[field] = function(p, v)
    if type(v) ~= "number" then
      core.error(("Parameter '%s': %s must be a number, got %s"):format(p.name, field, core.show_value(v)))
    end
    rawset(p, "_" .. field, v)
  end
end

function setters.grad_req(p, req)
  if not grad_reqs[req] then
    core.error(("Parameter '%s': grad_req must be 'write', 'add' or 'null', got %s"):format(p.name, tostring(req)))
  end
  if not p._differentiable then req = "null" end
  if p._grad_req == req then return end
  p._grad_req = req
  if p._data then
    -- 'null' drops the gradient buffers; from 'null' new zero buffers
    for k = 1, #p._data do p._data[k]:attach_grad(req) end
  end
end

function methods.setattr(p, name, value) p[name] = value end

---------------------------------------------------------------------------
-- Initialization

local function pause(fn) return autograd.pause(fn) end

-- Replicas of `value` (an array, any device) on every device, each with a
-- gradient buffer as grad_req says.
local function place(p, value, devices)
  pause(function()
    local src = value
    if src.dtype ~= p._dtype then src = src:astype(p._dtype) end
    local data, by_dev = {}, {}
    for k, d in ipairs(devices) do
      local r = src:copyto(d)   -- always a fresh array: replicas never alias
      r:attach_grad(p._grad_req)
      data[k], by_dev[d] = r, r
    end
    p._data, p._by_dev, p._devices = data, by_dev, devices
    M.generation = M.generation + 1
  end)
  p._deferred = nil
end

function methods._finish_deferred_init(p)
  local d = p._deferred
  if not d then return end
  if not known(p._shape) then
    core.error(("Parameter '%s' has not been initialized yet because initialization was deferred, " ..
                "and its shape %s is still unknown: the block that owns it must infer it in its first forward")
               :format(p.name, tuple(p.shape)))
  end
  local value = d.data
  if value == nil then
    pause(function()
      value = np.zeros(p._shape, {dtype = p._dtype, device = cpu0})
      local ini = d.init
      ini(p.name, value)
    end)
  end
  -- luon.dist sets this for the parameters of a kvstore='dist' Trainer: the
  -- value every process materialises is rank 0's (a broadcast)
  if M.on_materialize then M.on_materialize(p, value) end
  place(p, value, d.devices)
end

-- initialize(init, device, default_init, force_reinit), positional then
-- one table of the same keywords (ctx: device's MXNet 1.x name).
local init_names = {"init", "device", "default_init", "force_reinit"}
local init_known = {"init", "device", "default_init", "force_reinit", "ctx"}
function methods.initialize(p, ...)
  local a = core.args("initialize", init_names, init_known, ...)
  local ini, device, default_init, force_reinit = a.init, core.device_of(a, "initialize"), a.default_init, a.force_reinit
  if p._data and not force_reinit then
    core.warn(("Parameter '%s' is already initialized, ignoring. Set force_reinit=True to re-initialize.")
           :format(p.name))
    return
  end
  local devices = devices_of(device, "Parameter '" .. p.name .. "': initialize")
  local chosen = initializer.create(ini, "initialize") or p.init
                 or initializer.create(default_init, "initialize") or initializer.Uniform()
  p._data, p._by_dev, p._devices = nil, nil, nil
  M.generation = M.generation + 1
  p._deferred = {init = chosen, devices = devices}
  if not known(p._shape) then
    if p.allow_deferred_init then return end
    p._deferred = nil
    core.error(("Cannot initialize Parameter '%s' because it has invalid shape: %s.")
               :format(p.name, tuple(p.shape)))
  end
  methods._finish_deferred_init(p)
end

---------------------------------------------------------------------------
-- Access

local function check_initialized(p)
  if p._data then return end
  if p._deferred then
    core.error(("Parameter '%s' has not been initialized yet because initialization was deferred. " ..
                "Actual initialization happens during the first forward pass. Please pass one batch of " ..
                "data through the network before accessing Parameters. You can also avoid deferred " ..
                "initialization by specifying in_units, num_features, etc., for network layers.")
               :format(p.name))
  end
  core.error(("Parameter '%s' has not been initialized. Note that you should initialize parameters " ..
              "and create Trainer with Block.collect_params() instead of Block.params because the " ..
              "later does not include Parameters of nested child Blocks"):format(p.name))
end

local function replica(p, dev)
  check_initialized(p)
  if dev == nil then
    if #p._data == 1 then return p._data[1] end
    dev = core.default_device
  end
  local r = p._by_dev[dev]
  if r then return r end
  if not core.is_device(dev) then dev = core.resolve_device(dev, "Parameter '" .. p.name .. "'") end
  r = p._by_dev[dev]
  if r then return r end
  core.error(("Parameter '%s' was not initialized on device %s. It was only initialized on %s.")
             :format(p.name, tostring(dev), dev_list(p._devices)))
end

-- The replica on dev (nil: the only one, else the current device).
function methods.data(p, dev)
  local r = p._data and dev and p._by_dev[dev]
  if r then return r end
  return replica(p, dev)
end

function methods.list_data(p)
  check_initialized(p)
  local out = {}
  for k = 1, #p._data do out[k] = p._data[k] end
  return out
end

local function check_grad(p)
  check_initialized(p)
  if p._grad_req == "null" then
    core.error(("Cannot get gradient array for Parameter '%s' because grad_req='null'"):format(p.name))
  end
end

function methods.grad(p, dev)
  check_grad(p)
  return replica(p, dev).grad
end

function methods.list_grad(p)
  check_grad(p)
  local out = {}
  for k = 1, #p._data do out[k] = p._data[k].grad end
  return out
end

function methods.list_device(p)
  if p._data then return {unpack(p._devices)} end
  if p._deferred then return {unpack(p._deferred.devices)} end
  core.error(("Parameter '%s' has not been initialized"):format(p.name))
end
methods.list_ctx = methods.list_device

function methods.zero_grad(p)
  if not p._data or p._grad_req == "null" then return end
  pause(function()
    for k = 1, #p._data do
      local g = p._data[k].grad
      if g then np.zeros(g.shape, {dtype = g.dtype, device = g.device}):copyto(g) end
    end
  end)
end

local function check_value_shape(p, arr, what)
  local s, a = p._shape, arr.shape
  local ok = s == nil or #s == #a
  if ok and s then
    for k = 1, #s do if s[k] ~= -1 and s[k] ~= a[k] then ok = false end end
  end
  if not ok then
    core.error(("Parameter '%s': %s has shape %s but the parameter's shape is %s")
               :format(p.name, what, tuple(a), tuple(p.shape)))
  end
end

-- Assign a value to every replica (deferred: used at materialization).
function methods.set_data(p, arr)
  if not core.is_array(arr) then arr = np.array(arr, {dtype = p._dtype}) end
  check_value_shape(p, arr, "set_data's value")
  p._shape = arr.shape
  if p._data == nil then
    if p._deferred then p._deferred.data = arr; return end
    check_initialized(p)
  end
  pause(function()
    for k = 1, #p._data do
      local r = p._data[k]
      local v = arr
      if v.dtype ~= r.dtype then v = v:astype(r.dtype) end
      v:copyto(r)
    end
  end)
end

-- The mean of all replicas, on cpu(0).
function methods._reduce(p)
  check_initialized(p)
  return pause(function()
    local acc = p._data[1]:copyto(cpu0)
    if #p._data == 1 then return acc end
    for k = 2, #p._data do acc = acc + p._data[k]:copyto(cpu0) end
    return acc / #p._data
  end)
end

local reset_names, reset_known = {"device"}, {"device", "ctx"}
function methods.reset_device(p, ...)
  local a = core.args("reset_device", reset_names, reset_known, ...)
  local devices = devices_of(core.device_of(a, "reset_device"), "Parameter '" .. p.name .. "': reset_device")
  if p._data then
    place(p, methods._reduce(p), devices)
  elseif p._deferred then
    p._deferred.devices = devices
  else
    core.error(("Cannot reset device for Parameter '%s' because it has not been initialized."):format(p.name))
  end
end
methods.reset_ctx = methods.reset_device

function methods.cast(p, dtype)
  local name = core.dtype_names[core.dtype_id(dtype, "Parameter '" .. p.name .. "': cast")]
  p._dtype = name
  if p._deferred and p._deferred.data then p._deferred.data = p._deferred.data:astype(name) end
  if not p._data then return end
  pause(function()
    for k, r in ipairs(p._data) do
      local c = r:astype(name)
      c:attach_grad(p._grad_req)
      p._data[k], p._by_dev[p._devices[k]] = c, c
    end
    M.generation = M.generation + 1
  end)
end

-- Load a saved value (already checked by the caller): fill unknown dims,
-- materialize on `devices` (nil: where the parameter is or was going to be,
-- else the current device), and drop any pending initializer.
function methods._load_init(p, arr, devices)
  p._shape = arr.shape
  local target = devices or (p._data and p._devices) or (p._deferred and p._deferred.devices)
                 or {core.default_device}
  if p._data and #target == #p._devices then
    local same = true
    for k = 1, #target do if target[k] ~= p._devices[k] then same = false end end
    if same then
      methods.set_data(p, arr)
      p._deferred = nil
      return
    end
  end
  place(p, arr, target)
end

---------------------------------------------------------------------------
-- ParameterDict: structural name -> Parameter, so `pairs` yields them; the
-- methods and the registration order live in the metatable.

local dict_methods = {}
M.dict_methods = dict_methods

function M.dict(names, params)
  local d = {}
  for k = 1, #names do d[names[k]] = params[k] end
  return setmetatable(d, {__index = dict_methods, order = names, __tostring = dict_methods.tostring})
end

local function order(d) return getmetatable(d).order end

function dict_methods.keys(d)
  local out = {}
  for k, n in ipairs(order(d)) do out[k] = n end
  return out
end

function dict_methods.values(d)
  local out = {}
  for k, n in ipairs(order(d)) do out[k] = d[n] end
  return out
end

-- for name, p in d:items() do ... end (registration order)
function dict_methods.items(d)
  local names, k = order(d), 0
  return function()
    k = k + 1
    local n = names[k]
    if n then return n, d[n] end
  end
end

function dict_methods.len(d) return #order(d) end

-- The distinct Parameters (a shared one once), in order.
local function unique(d)
  local out, seen = {}, {}
  for _, n in ipairs(order(d)) do
    local p = d[n]
    if not seen[p] then seen[p] = true; out[#out + 1] = p end
  end
  return out
end
dict_methods.unique = unique

-- initialize(init, device, verbose, force_reinit), positional then one
-- table of the same keywords (ctx: device's MXNet 1.x name); verbose is
-- accepted and prints nothing.
local dict_init_names = {"init", "device", "verbose", "force_reinit"}
local dict_init_known = {"init", "device", "verbose", "force_reinit", "ctx"}
function dict_methods.initialize(d, ...)
  local a = core.args("initialize", dict_init_names, dict_init_known, ...)
  local ini, force_reinit = a.init, a.force_reinit
  ini = initializer.create(ini, "initialize") or initializer.Uniform()
  local devices = devices_of(core.device_of(a, "initialize"), "initialize")
  for _, p in ipairs(unique(d)) do
    methods.initialize(p, nil, devices, ini, force_reinit)
  end
end

function dict_methods.zero_grad(d)
  for _, p in ipairs(unique(d)) do methods.zero_grad(p) end
end

function dict_methods.reset_device(d, ...)
  local a = core.args("reset_device", reset_names, reset_known, ...)
  local devices = devices_of(core.device_of(a, "reset_device"), "reset_device")
  for _, p in ipairs(unique(d)) do methods.reset_device(p, devices) end
end
dict_methods.reset_ctx = dict_methods.reset_device

function dict_methods.setattr(d, name, value)
  for _, p in ipairs(unique(d)) do p[name] = value end
end

function dict_methods.tostring(d)
  local lines = {}
  for _, n in ipairs(order(d)) do lines[#lines + 1] = "  " .. n .. ": " .. tostring(d[n]) end
  return "{\n" .. table.concat(lines, "\n") .. "\n}"
end

setmetatable(Parameter, {__call = function(_, ...) return M.new(...) end})
M.Parameter = Parameter
return M
