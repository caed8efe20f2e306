-- luon.gluon.nn.basic_layers: Dense, BatchNorm, Dropout, Flatten.
local core = require("luon.core")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local util = require("luon.gluon.nn.util")

local HybridBlock = block.HybridBlock
local Parameter = param.new
local tuple = param.tuple
local opts, positive_int, known_size, pyrepr = util.opts, util.positive_int, util.known_size, util.pyrepr
local device_of = util.device_of
local maybe_act = require("luon.gluon.nn.activations").maybe_act

local nn = {}

-- weight_initializer, bias_initializer='zeros', in_units=0})
-- weight (units, in_units), bias (units,); y = x . weight^T + bias.

local Dense = HybridBlock:extend("Dense")
nn.Dense = Dense
function Dense:__init(...)
  local o = opts("Dense", {"units", "activation", "use_bias", "flatten", "dtype", "weight_initializer",
                           "bias_initializer", "in_units"}, ...)
  local units = positive_int(o.units, "Dense", "units")
  local in_units = known_size(o.in_units, "Dense", "in_units")
  self._units, self._flatten = units, o.flatten ~= false
  self._kw = {flatten = self._flatten}
  self.weight = Parameter("weight", {shape = {units, in_units > 0 and in_units or -1}, dtype = o.dtype,
                                     init = o.weight_initializer, allow_deferred_init = true})
  if o.use_bias ~= false then
    self.bias = Parameter("bias", {shape = {units}, dtype = o.dtype, init = o.bias_initializer or "zeros",
                                   allow_deferred_init = true})
  else
    self.bias = nil -- reads nil, as MXNet's None
  end
  maybe_act(self, o.activation)
end

function Dense:infer_shape(x)
  local s = x.shape
  local in_units = 1
  if self._flatten then
    for k = 2, #s do in_units = in_units * s[k] end
  else
    in_units = s[#s]
  end
  self.weight.shape = {self._units, in_units}
end

function Dense:forward(x)
  local dev = device_of(x)
  local bias = self.bias
  local y = npx.fully_connected(x, self.weight:data(dev), bias and bias:data(dev), self._kw)
  local act = self.act
  if act then return act(y) end
  return y
end

function Dense:__tostring()
  local s = self.weight.shape
  return ("%s(%s -> %d, %s)"):format(self._class.__name, s[2], s[1], self.act and tostring(self.act) or "linear")
end

---------------------------------------------------------------------------
-- running_mean_initializer='zeros', running_variance_initializer='ones',
-- in_channels=0}. In training mode (autograd.is_training()) the batch
-- statistics normalise and the running statistics (parameters with grad_req
-- 'null') are updated in place during the forward, biased variance; each
-- device updates its own replicas.

local BatchNorm = HybridBlock:extend("BatchNorm")
nn.BatchNorm = BatchNorm
function BatchNorm:__init(...)
  local o = opts("BatchNorm", {"axis", "momentum", "epsilon", "center", "scale", "use_global_stats",
                               "beta_initializer", "gamma_initializer", "running_mean_initializer",
                               "running_variance_initializer", "in_channels", "dtype"}, ...)
  self._axis = core.int_arg(o.axis or 1, "BatchNorm", "axis")
  self._momentum = core.num_arg(o.momentum == nil and 0.9 or o.momentum, "BatchNorm", "momentum")
  self._eps = core.num_arg(o.epsilon == nil and 1e-5 or o.epsilon, "BatchNorm", "epsilon")
  self._scale, self._center = o.scale ~= false, o.center ~= false
  self._use_global_stats = o.use_global_stats == true
  self._kw = {eps = self._eps, momentum = self._momentum, fix_gamma = not self._scale,
              use_global_stats = self._use_global_stats, axis = self._axis}
  local c = known_size(o.in_channels, "BatchNorm", "in_channels")
  c = c > 0 and c or -1
  local function p(name, init, req, differentiable)
    return Parameter(name, {shape = {c}, dtype = o.dtype, init = init, grad_req = req,
                            allow_deferred_init = true, differentiable = differentiable})
  end
  self.gamma = p("gamma", o.gamma_initializer or "ones", self._scale and "write" or "null", true)
  self.beta = p("beta", o.beta_initializer or "zeros", self._center and "write" or "null", true)
  self.running_mean = p("running_mean", o.running_mean_initializer or "zeros", "null", false)
  self.running_var = p("running_var", o.running_variance_initializer or "ones", "null", false)
end

function BatchNorm:infer_shape(x)
  local s = x.shape
  local ax = self._axis < 0 and self._axis + #s or self._axis
  if ax < 0 or ax >= #s then
    core.error(("BatchNorm: axis %d is out of range for an input of shape %s"):format(self._axis, tuple(s)))
  end
  for _, n in ipairs({"gamma", "beta", "running_mean", "running_var"}) do self[n].shape = {s[ax + 1]} end
end

function BatchNorm:forward(x)
  local dev = device_of(x)
  return npx.batch_norm(x, self.gamma:data(dev), self.beta:data(dev), self.running_mean:data(dev),
                        self.running_var:data(dev), self._kw)
end

function BatchNorm:__tostring()
  return ("%s(axis=%s, eps=%s, momentum=%s, fix_gamma=%s, use_global_stats=%s, in_channels=%s)")
         :format(self._class.__name, pyrepr(self._axis), pyrepr(self._eps), pyrepr(self._momentum),
                 pyrepr(not self._scale), pyrepr(self._use_global_stats), self.gamma.shape[1])
end

---------------------------------------------------------------------------
-- Dropout(rate): only while autograd.is_training(); identity otherwise.

local Dropout = HybridBlock:extend("Dropout")
nn.Dropout = Dropout
function Dropout:__init(...)
  local o = opts("Dropout", {"rate", "axes"}, ...)
  if type(o.rate) ~= "number" or not (o.rate >= 0 and o.rate <= 1) then -- (NaN too)
    core.error(("Dropout: rate must be a number in [0, 1], got %s"):format(tostring(o.rate)))
  end
  if o.axes ~= nil and #o.axes > 0 then
    core.error("Dropout: a mask shared along axes is not supported (axes must be empty)")
  end
  self._rate = o.rate
  self._kw = {p = o.rate}
end
function Dropout:forward(x)
  if self._rate > 0 then return npx.dropout(x, self._kw) end
  return x:copy()
end
function Dropout:__tostring() return ("Dropout(p = %s, axes=())"):format(pyrepr(self._rate)) end

---------------------------------------------------------------------------
-- Flatten: (N, ...) -> (N, prod(...)); (N,) -> (N, 1).

local Flatten = HybridBlock:extend("Flatten")
nn.Flatten = Flatten
function Flatten:forward(x) return npx.batch_flatten(x) end
function Flatten:__tostring() return "Flatten" end

return nn
