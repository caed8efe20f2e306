-- luon.gluon.nn: Gluon's layers (Dense, Conv2D, pooling, BatchNorm,
-- Dropout, Flatten, Activation, LeakyReLU) and the containers, with MXNet's
-- arguments, defaults and reprs. Each layer's forward is a few npx calls;
-- unknown input sizes are inferred at the first call (deferred init).
-- Arguments: positional in MXNet's order, then one keyword table:
-- nn.Dense(10, {activation = "relu"}), or all keywords: nn.Dense{units = 10}.
local core = require("luon.core")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")

local nn = {
  Block = block.Block, HybridBlock = block.HybridBlock,
  Sequential = block.Sequential, HybridSequential = block.HybridSequential,
}
local HybridBlock = block.HybridBlock
local Parameter = param.new
local tuple = param.tuple

-- The options of a layer from (positional..., keywords): `names` in MXNet's
-- positional order; unknown keywords are an error naming them, and MXNet
-- 1.x's Block keywords (prefix, params) say what luon does instead.
local v1_keywords = {
  params = "MXNet 1.x's params= shared parameters; luon shares them with "
           .. "block:share_parameters(other:collect_params())",
  prefix = "MXNet 1.x's prefix= named parameters; luon names them by their place in the network",
}
local function opts(layer, names, ...)
  local kw = core.kw(...)
  for k, why in pairs(v1_keywords) do
    if kw[k] ~= nil then core.error(("%s: no argument '%s' (%s)"):format(layer, k, why)) end
  end
  return core.args(layer, names, names, ...)
end

local function positive_int(v, layer, what)
  if not core.is_int(v) or v < 1 then
    core.error(("%s: %s must be a positive integer, got %s"):format(layer, what, tostring(v)))
  end
  return v
end

-- An optional size known in advance (in_units, in_channels): 0 when not
-- given (inferred at the first call), else an integer >= 0.
local function known_size(v, layer, what)
  return v == nil and 0 or core.int_arg(v, layer, what, 0)
end

-- Python's repr of a number or boolean.
local function pyrepr(v)
  if type(v) == "boolean" then return v and "True" or "False" end
  if type(v) == "number" then return ("%.14g"):format(v) end
  if v == nil then return "None" end
  return tostring(v)
end

-- The device of array x (core's cached Device of its (type, id)).
local info_of = core.info_of
local function device_of(x)
  local info = info_of(x)
  return core.device_from_ids(info.dev_type, info.dev_id)
end

local function layout_of(layout, layer)
  layout = layout or "NCHW"
  if layout ~= "NCHW" then
    core.error(("%s: layout must be 'NCHW' (the only one supported), got %s"):format(layer, tostring(layout)))
  end
  return layout
end

---------------------------------------------------------------------------
-- Activation(activation), LeakyReLU(alpha)

local acts = {relu = true, sigmoid = true, tanh = true, softrelu = true, softsign = true}

local Activation = HybridBlock:extend("Activation")
nn.Activation = Activation
function Activation:__init(...)
  local o = opts("Activation", {"activation"}, ...)
  if not acts[o.activation] then
    core.error(("Activation: activation must be 'relu', 'sigmoid', 'tanh', 'softrelu' or 'softsign', got %s")
               :format(tostring(o.activation)))
  end
  self._act_type = o.activation
  self._kw = {act_type = o.activation}
end
function Activation:forward(x) return npx.activation(x, self._kw) end
function Activation:__tostring() return ("Activation(%s)"):format(self._act_type) end

local LeakyReLU = HybridBlock:extend("LeakyReLU")
nn.LeakyReLU = LeakyReLU
function LeakyReLU:__init(...)
  local o = opts("LeakyReLU", {"alpha"}, ...)
  if type(o.alpha) ~= "number" or o.alpha < 0 then
    core.error(("LeakyReLU: the slope alpha must be a number >= 0, got %s"):format(tostring(o.alpha)))
  end
  self._alpha = o.alpha
  self._kw = {act_type = "leaky", slope = o.alpha}
end
function LeakyReLU:forward(x) return npx.leaky_relu(x, self._kw) end
function LeakyReLU:__tostring() return ("LeakyReLU(%s)"):format(pyrepr(self._alpha)) end

-- The optional activation child of Dense and Conv2D (registered as 'act';
-- assigned nil when there is none, so that self.act reads nil as in MXNet).
local function maybe_act(self, activation)
  self.act = activation ~= nil and Activation(activation) or nil
end

---------------------------------------------------------------------------
-- Dense(units, {activation, use_bias=true, flatten=true, dtype='float32',
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
-- Conv2D{channels, kernel_size, strides=1, padding=0, dilation=1, groups=1,
-- layout='NCHW', activation, use_bias=true, weight_initializer,
-- bias_initializer='zeros', in_channels=0}; sizes an int or {h, w}.
-- weight (channels, in_channels/groups, kh, kw). in_channels, when given,
-- makes the weight's shape known at once (MXNet 2.0 still defers it).

local Conv2D = HybridBlock:extend("Conv2D")
nn.Conv2D = Conv2D
function Conv2D:__init(...)
  local o = opts("Conv2D", {"channels", "kernel_size", "strides", "padding", "dilation", "groups", "layout",
                            "activation", "use_bias", "weight_initializer", "bias_initializer", "in_channels",
                            "dtype"}, ...)
  local channels = positive_int(o.channels, "Conv2D", "channels")
  if o.kernel_size == nil then core.error("Conv2D: kernel_size is required") end
  local kh, kw = core.pair(o.kernel_size, nil, "Conv2D", "kernel_size")
  local sh, sw = core.pair(o.strides, 1, "Conv2D", "strides")
  local ph, pw = core.pair(o.padding, 0, "Conv2D", "padding")
  local dh, dw = core.pair(o.dilation, 1, "Conv2D", "dilation")
  local groups = positive_int(o.groups or 1, "Conv2D", "groups")
  if channels % groups ~= 0 then
    core.error(("Conv2D: channels (%d) must be a multiple of groups (%d)"):format(channels, groups))
  end
  layout_of(o.layout, "Conv2D")
  self._channels, self._groups = channels, groups
  self._kernel, self._stride, self._pad, self._dilate = {kh, kw}, {sh, sw}, {ph, pw}, {dh, dw}
  self._kw = {stride = self._stride, pad = self._pad, dilate = self._dilate, num_group = groups}
  self._kw_relu = {stride = self._stride, pad = self._pad, dilate = self._dilate, num_group = groups,
                   act_type = "relu"}
  local in_channels = known_size(o.in_channels, "Conv2D", "in_channels")
  if in_channels > 0 and in_channels % groups ~= 0 then
    core.error(("Conv2D: in_channels (%d) must be a multiple of groups (%d)"):format(in_channels, groups))
  end
  self.weight = Parameter("weight", {shape = {channels, in_channels > 0 and in_channels / groups or -1, kh, kw},
                                     dtype = o.dtype, init = o.weight_initializer, allow_deferred_init = true})
  if o.use_bias ~= false then
    self.bias = Parameter("bias", {shape = {channels}, dtype = o.dtype, init = o.bias_initializer or "zeros",
                                   allow_deferred_init = true})
  else
    self.bias = nil -- reads nil, as MXNet's None
  end
  maybe_act(self, o.activation)
end

function Conv2D:infer_shape(x)
  local s = x.shape
  if #s ~= 4 then
    core.error(("Conv2D: input must be 4-d (N, C, H, W), got shape %s"):format(tuple(s)))
  end
  if s[2] % self._groups ~= 0 then
    core.error(("Conv2D: input channels (%d) must be a multiple of groups (%d)"):format(s[2], self._groups))
  end
  local w = self.weight.shape
  self.weight.shape = {w[1], s[2] / self._groups, w[3], w[4]}
end

function Conv2D:forward(x)
  local dev = device_of(x)
  local bias = self.bias
  local act = self.act
  if act and act._act_type == "relu" and #act._fhooks == 0 and #act._prehooks == 0 then
    -- fused: one pass over the output (the act child runs itself when hooked, as for summary)
    return npx.convolution(x, self.weight:data(dev), bias and bias:data(dev), self._kw_relu)
  end
  local y = npx.convolution(x, self.weight:data(dev), bias and bias:data(dev), self._kw)
  if act then return act(y) end
  return y
end

-- In a Sequential, Conv2D (no activation or relu) followed by MaxPool2D runs
-- as one op (npx.convolution_maxpool, the registry's fused conv2d_maxpool)
-- where that op runs: the convolution's output is pooled while in cache and
-- never stored, and the backward needs neither it nor a search of the
-- windows. Not when a hook could see the output between them, before the
-- first call (deferred shapes), on devices the op has no kernel for (GPUs),
-- for dtypes it does not take, or for batches smaller than the thread count
-- (the fused op splits over samples).
local FLOAT32, FLOAT64 = core.FLOAT32, core.FLOAT64
local FLOAT16, BFLOAT16 = core.dtype_ids.float16, core.dtype_ids.bfloat16
local fused_op = core.op_info.conv2d_maxpool
function Conv2D:_fuse_next(nxt, x, ...)
  if not nxt._maxpool_kw or select("#", ...) > 0 or not core.is_array(x) or not self._ready or not nxt._ready
     or #self._fhooks + #self._prehooks + #nxt._fhooks + #nxt._prehooks > 0 then
    return nil
  end
  local act = self.act
  if act and (act._act_type ~= "relu" or #act._fhooks + #act._prehooks > 0) then return nil end
  local info = info_of(x)
  if not core.op_runs_on(fused_op.name, info.dev_type) or info.ndim ~= 4 or info.shape[0] < npx.num_threads() or
     not (info.dtype == FLOAT32 or info.dtype == FLOAT64 or (fused_op.half and (info.dtype == FLOAT16 or info.dtype == BFLOAT16))) then
    return nil
  end
  local dev, bias = device_of(x), self.bias
  return npx.convolution_maxpool(x, self.weight:data(dev), bias and bias:data(dev),
                                 act and self._kw_relu or self._kw, nxt._maxpool_kw)
end

function Conv2D:__tostring()
  local s = ("%s(%s -> %d, kernel_size=%s, stride=%s"):format(self._class.__name, self.weight.shape[2],
            self._channels, tuple(self._kernel), tuple(self._stride))
  if self._pad[1] ~= 0 or self._pad[2] ~= 0 then s = s .. ", padding=" .. tuple(self._pad) end
  if self._dilate[1] ~= 1 or self._dilate[2] ~= 1 then s = s .. ", dilation=" .. tuple(self._dilate) end
  if self._groups ~= 1 then s = s .. ", groups=" .. self._groups end
  if not self.bias then s = s .. ", bias=False" end
  if self.act then s = s .. ", " .. tostring(self.act) end
  return s .. ")"
end

---------------------------------------------------------------------------
-- Pooling: MaxPool2D, AvgPool2D, GlobalMaxPool2D, GlobalAvgPool2D.
-- strides default to pool_size; ceil_mode rounds the output size up.

local function pooling(name, pool_type, global)
  local cls = HybridBlock:extend(name)
  nn[name] = cls
  local names = global and {"layout"}
                or {"pool_size", "strides", "padding", "layout", "ceil_mode", "count_include_pad"}
  function cls:__init(...)
    local o = opts(name, names, ...)
    if pool_type == "max" and o.count_include_pad ~= nil then
      core.error(name .. ": unknown argument 'count_include_pad' (only average pooling has it)")
    end
    local kh, kw = core.pair(global and 1 or o.pool_size, 2, name, "pool_size")
    local sh, sw = core.pair(o.strides, {kh, kw}, name, "strides")
    local ph, pw = core.pair(o.padding, 0, name, "padding")
    self._kernel, self._stride, self._pad = {kh, kw}, {sh, sw}, {ph, pw}
    self._ceil_mode = global or o.ceil_mode == true
    self._count_include_pad = o.count_include_pad ~= false
    self._layout = layout_of(o.layout, name)
    self._kw = {kernel = self._kernel, stride = self._stride, pad = self._pad, pool_type = pool_type,
                global_pool = global, pooling_convention = self._ceil_mode and "full" or "valid",
                count_include_pad = self._count_include_pad}
    -- a max pool that a Conv2D before it in a Sequential may fuse with (Conv2D:_fuse_next)
    if pool_type == "max" and not global and kh * kw <= 254 then self._maxpool_kw = self._kw end
  end
  function cls:forward(x) return npx.pooling(x, self._kw) end
  function cls:__tostring()
    return ("%s(size=%s, stride=%s, padding=%s, ceil_mode=%s, global_pool=%s, pool_type=%s, layout=%s)")
           :format(self._class.__name, tuple(self._kernel), tuple(self._stride), tuple(self._pad),
                   pyrepr(self._ceil_mode), pyrepr(global), pool_type, self._layout)
  end
end
pooling("MaxPool2D", "max", false)
pooling("AvgPool2D", "avg", false)
pooling("GlobalMaxPool2D", "max", true)
pooling("GlobalAvgPool2D", "avg", true)

---------------------------------------------------------------------------
-- BatchNorm{axis=1, momentum=0.9, epsilon=1e-5, center=true, scale=true,
-- use_global_stats=false, beta_initializer='zeros', gamma_initializer='ones',
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

return core.strict_module(nn, "gluon.nn")
