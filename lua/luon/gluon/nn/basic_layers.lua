-- luon.gluon.nn.basic_layers: Dense, BatchNorm, SyncBatchNorm, LayerNorm,
-- GroupNorm, InstanceNorm, Dropout, Flatten, Embedding, Identity, Lambda,
-- HybridLambda, Concatenate, HybridConcatenate.
local core = require("luon.core")
local C = core.C
local np = require("luon.np")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local util = require("luon.gluon.nn.util")
local autograd = require("luon.autograd")
local replicas = require("luon.gluon.replicas")

local Block, HybridBlock = block.Block, block.HybridBlock
local Sequential, HybridSequential = block.Sequential, block.HybridSequential
local Parameter = param.new
local tuple = param.tuple
local opts, positive_int, known_size, pyrepr = util.opts, util.positive_int, util.known_size, util.pyrepr
local device_of = util.device_of
local activations = require("luon.gluon.nn.activations")
local maybe_act = activations.maybe_act

local nn = {}

-- in_channels as MXNet's reprs print it: 0 while deferred
local function channels_text(p)
  local c = p.shape[1]
  return c and c > 0 and tostring(c) or "0"
end

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
  self._kw_relu = {flatten = self._flatten, act_type = "relu"}
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
  bias = bias and bias:data(dev)
  local act = self.act
  if act and act._act_type == "relu" and #act._fhooks == 0 and #act._prehooks == 0 then
    -- fused: one pass over the output (the act child runs itself when hooked, as for summary)
    return npx.fully_connected(x, self.weight:data(dev), bias, self._kw_relu)
  end
  local y = npx.fully_connected(x, self.weight:data(dev), bias, self._kw)
  if act then return act(y) end
  return y
end

function Dense:__tostring()
  local s = self.weight.shape
  return ("%s(%s -> %d, %s)"):format(self._class.__name, s[2] > 0 and s[2] or "None", s[1],
                                     self.act and tostring(self.act) or "linear")
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
  self._fused_kw = {} -- _fuse_next's: _kw's with the relu, refilled each call
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

-- In a Sequential, BatchNorm followed by Activation('relu') runs as one
-- batch_norm op with its relu (one pass over the output instead of two;
-- the backward masks dy by the output as relu's does). Not when a hook
-- could see the output between them, when either forward is not the
-- layer's own (SyncBatchNorm, a subclass, a replaced method), while amp
-- casts relu (its dtype would change), or before the first call (deferred
-- shapes). The options are _kw's as they are now (MXNet users set
-- use_global_stats there to freeze a layer).
local relu_op = core.op_ids.relu
function BatchNorm:_fuse_next(nxt, _, x, ...)
  if self.forward ~= BatchNorm.forward or nxt.forward ~= activations.Activation.forward or
     nxt._act_type ~= "relu" or select("#", ...) > 0 or not core.is_array(x) or not self._ready or
     #self._fhooks + #self._prehooks + #nxt._fhooks + #nxt._prehooks > 0 or core.amp_casts(relu_op) then
    return nil
  end
  local kw = self._fused_kw
  for k in pairs(kw) do kw[k] = nil end
  for k, v in pairs(self._kw) do kw[k] = v end
  kw.act_type = "relu"
  local dev = device_of(x)
  return npx.batch_norm(x, self.gamma:data(dev), self.beta:data(dev), self.running_mean:data(dev),
                        self.running_var:data(dev), kw), 2
end

-- The batch norm of a Conv2D [+ MaxPool2D] + BatchNorm run as one op
-- (Conv2D:_fuse_next): the bn of npx.convolution_maxpool or
-- npx.convolution_bn, or nil where this layer's forward would not be
-- batch_norm in predict mode over the channels: a hook, a forward not
-- BatchNorm's own (SyncBatchNorm), autograd recording or training without
-- use_global_stats, another axis, amp, or before the first call. The
-- options are _kw's as they are now, as forward reads them.
local bn_op = core.op_ids.batch_norm
function BatchNorm:_fused_predict(dev)
  local o = self._kw
  local axis = o.axis == nil and 1 or o.axis
  if self.forward ~= BatchNorm.forward or not self._ready or #self._fhooks + #self._prehooks > 0 or
     C.luon_autograd_is_recording() ~= 0 or (C.luon_autograd_is_training() ~= 0 and not o.use_global_stats) or
     (axis ~= 1 and axis ~= -3) or core.amp_casts(bn_op) then
    return nil
  end
  local kw = self._bn_fused or {}
  self._bn_fused = kw
  kw.gamma, kw.beta = self.gamma:data(dev), self.beta:data(dev)
  kw.running_mean, kw.running_var = self.running_mean:data(dev), self.running_var:data(dev)
  kw.eps, kw.fix_gamma = o.eps, o.fix_gamma
  return kw
end

function BatchNorm:__tostring()
  return ("%s(axis=%s, eps=%s, momentum=%s, fix_gamma=%s, use_global_stats=%s, in_channels=%s)")
         :format(self._class.__name, pyrepr(self._axis), pyrepr(self._eps), pyrepr(self._momentum),
                 pyrepr(not self._scale), pyrepr(self._use_global_stats),
                 self.gamma.shape[1] > 0 and self.gamma.shape[1] or "None")
end

---------------------------------------------------------------------------
-- SyncBatchNorm{in_channels=0, num_devices, momentum=0.9, epsilon=1e-5,
-- center, scale, use_global_stats, the four initializers}: MXNet 1.x's
-- gluon.contrib.nn.SyncBatchNorm (also nn.SyncBatchNorm), BatchNorm over
-- axis 1 whose training statistics are those of the whole batch across the
-- replicas, with gradients through them. The replicas' forwards must run
-- together (gluon.utils.parallel_forward, whose coroutines meet here): the
-- last replica to arrive forms the global mean and variance from each
-- device's sums, copied with the recorded copyto, and hands each replica its
-- output. On one device, in predict mode or with use_global_stats it is
-- BatchNorm.

local SyncBatchNorm = BatchNorm:extend("SyncBatchNorm")
nn.SyncBatchNorm = SyncBatchNorm
function SyncBatchNorm:__init(...)
  local o = opts("SyncBatchNorm", {"in_channels", "num_devices", "momentum", "epsilon", "center", "scale",
                                   "use_global_stats", "beta_initializer", "gamma_initializer",
                                   "running_mean_initializer", "running_variance_initializer"}, ...)
  self._ndev = o.num_devices ~= nil and core.int_arg(o.num_devices, "SyncBatchNorm", "num_devices", 1) or nil
  BatchNorm.__init(self, {axis = 1, momentum = o.momentum, epsilon = o.epsilon, center = o.center,
                          scale = o.scale, use_global_stats = o.use_global_stats,
                          beta_initializer = o.beta_initializer, gamma_initializer = o.gamma_initializer,
                          running_mean_initializer = o.running_mean_initializer,
                          running_variance_initializer = o.running_variance_initializer,
                          in_channels = o.in_channels})
end

-- The outputs of the replicas' inputs xs (one per device), normalised by the
-- statistics of all of them: sums per channel on each device, in float64,
-- added on the first replica's device; the variance from the sums of
-- squared deviations from the global mean (two passes, as exact as
-- BatchNorm's). Every copy between devices is copyto, so the gradients flow
-- back through the global statistics to every replica.
local function sync_forward(self, xs)
  local x1 = xs[1]
  local s1 = x1.shape
  if #s1 < 2 then
    core.error(("SyncBatchNorm: expected an input with a channel axis 1, got shape %s"):format(tuple(s1)))
  end
  local c, axes, bshape = s1[2], {0}, {1, s1[2]}
  for d = 3, #s1 do
    axes[#axes + 1] = d - 1
    bshape[d] = 1
  end
  local count = 0
  for k, x in ipairs(xs) do
    local s = x.shape
    if #s ~= #s1 or s[2] ~= c or x.dtype ~= x1.dtype then
      core.error(("SyncBatchNorm: replica %d's input has shape %s (%s) but replica 1's has %s (%s)")
                 :format(k, tuple(s), x.dtype, tuple(s1), x1.dtype))
    end
    count = count + x.size / c
  end
  if count == 0 then core.error("SyncBatchNorm: the replicas' batches are all empty") end
  local home = x1.device
  -- sum over the replicas of f(x_k), each a (C,) float64 on its device
  local function global(f)
    local total
    for k, x in ipairs(xs) do
      local part = np.sum(f(k, x), axes, {dtype = "float64"}):as_in_context(home)
      total = total and total + part or part
    end
    return total / count
  end
  local mean = global(function(_, x) return x end)
  local means = {}
  for k, x in ipairs(xs) do means[k] = mean:as_in_context(x.device):astype(x.dtype):reshape(bshape) end
  local var = global(function(k, x) return np.square(x - means[k]) end)
  local ys = {}
  for k, x in ipairs(xs) do
    local dev = x.device
    local inv = (var:as_in_context(dev) + self._eps) ^ -0.5
    local y = (x - means[k]) * inv:astype(x.dtype):reshape(bshape)
    if self._scale then y = y * self.gamma:data(dev):reshape(bshape) end
    ys[k] = y + self.beta:data(dev):reshape(bshape)
  end
  -- the running statistics of each device's replica, as BatchNorm's kernel
  -- updates them (biased variance)
  autograd.pause(function()
    local done, m = {}, self._momentum
    for _, x in ipairs(xs) do
      local dev = x.device
      if not done[dev] then
        done[dev] = true
        for p, stat in pairs({[self.running_mean] = mean, [self.running_var] = var}) do
          local r = p:data(dev)
          local updated = r * m + stat:as_in_context(dev):astype(r.dtype) * (1 - m)
          updated:copyto(r)
        end
      end
    end
  end)
  return ys
end

function SyncBatchNorm:forward(x)
  if self._use_global_stats or not autograd.is_training() then return BatchNorm.forward(self, x) end
  local n = replicas.count()
  if not n then
    local ndev = self._ndev or #self.gamma:list_data()
    if ndev > 1 then
      core.error(("SyncBatchNorm: training across %d devices needs the replicas' forwards to run together: " ..
                  "outs = gluon.utils.parallel_forward(net, data_list) inside autograd.record, then " ..
                  "autograd.backward(losses) once"):format(ndev))
    end
    return BatchNorm.forward(self, x)
  end
  if self._ndev and self._ndev ~= n then
    core.error(("SyncBatchNorm: num_devices is %d but parallel_forward runs %d replicas"):format(self._ndev, n))
  end
  if n == 1 then return BatchNorm.forward(self, x) end
  return replicas.meet(self, x, function(xs) return sync_forward(self, xs) end, "SyncBatchNorm")
end
function SyncBatchNorm:__tostring()
  local c = self.gamma.shape[1]
  return ("SyncBatchNorm(eps=%s, momentum=%s, fix_gamma=%s, use_global_stats=%s, ndev=%d, in_channels=%s)")
         :format(pyrepr(self._eps), pyrepr(self._momentum), pyrepr(not self._scale),
                 pyrepr(self._use_global_stats), self._ndev or math.max(1, npx.num_gpus()),
                 c and c > 0 and tostring(c) or "None")
end

---------------------------------------------------------------------------
-- The normalisations over other axes than the batch: gamma and beta, each
-- with grad_req 'null' when scale / center is false (they then keep their
-- initial ones and zeros). in_channels 0: inferred at the first call.

-- A (c,) gamma and beta (c = -1: deferred).
local function gamma_beta(self, o, c, scale)
  local function p(name, init, req)
    return Parameter(name, {shape = {c}, init = init, grad_req = req, allow_deferred_init = true})
  end
  self.gamma = p("gamma", o.gamma_initializer or "ones", scale and "write" or "null")
  self.beta = p("beta", o.beta_initializer or "zeros", o.center ~= false and "write" or "null")
end

local function eps_arg(o, layer)
  local eps = o.epsilon == nil and 1e-5 or core.num_arg(o.epsilon, layer, "epsilon")
  if not (eps >= 0) then core.error(("%s: epsilon must be >= 0, got %s"):format(layer, tostring(eps))) end
  return eps
end

-- The size of x's axis (a layer's axis argument, negative from the end).
local function axis_size(x, axis, layer)
  local s = x.shape
  local ax = axis < 0 and axis + #s or axis
  if ax < 0 or ax >= #s then
    core.error(("%s: axis %d is out of range for an input of shape %s"):format(layer, axis, tuple(s)))
  end
  return s[ax + 1], ax
end

-- LayerNorm{axis=-1, epsilon=1e-5, center=true, scale=true,
-- beta_initializer='zeros', gamma_initializer='ones', in_channels=0}:
-- each position normalised over `axis`; gamma, beta (in_channels,).
local LayerNorm = HybridBlock:extend("LayerNorm")
nn.LayerNorm = LayerNorm
function LayerNorm:__init(...)
  local o = opts("LayerNorm", {"axis", "epsilon", "center", "scale", "beta_initializer", "gamma_initializer",
                               "in_channels"}, ...)
  self._axis = core.int_arg(o.axis or -1, "LayerNorm", "axis")
  self._eps, self._center, self._scale = eps_arg(o, "LayerNorm"), o.center ~= false, o.scale ~= false
  self._kw = {axis = self._axis, eps = self._eps}
  local c = known_size(o.in_channels, "LayerNorm", "in_channels")
  gamma_beta(self, o, c > 0 and c or -1, self._scale)
end
function LayerNorm:infer_shape(x)
  local c = axis_size(x, self._axis, "LayerNorm")
  self.gamma.shape, self.beta.shape = {c}, {c}
end
function LayerNorm:forward(x)
  local dev = device_of(x)
  return npx.layer_norm(x, self.gamma:data(dev), self.beta:data(dev), self._kw)
end
function LayerNorm:__tostring()
  return ("LayerNorm(eps=%s, axis=%s, center=%s, scale=%s, in_channels=%s)")
         :format(pyrepr(self._eps), pyrepr(self._axis), pyrepr(self._center), pyrepr(self._scale),
                 channels_text(self.gamma))
end

-- GroupNorm{num_groups=1, epsilon=1e-5, center=true, scale=true,
-- beta_initializer='zeros', gamma_initializer='ones'}: x (N, C, ...), each
-- sample's C/num_groups-channel groups normalised; gamma, beta
-- (num_groups,) as MXNet 1.x (one per group, not per channel).
local GroupNorm = HybridBlock:extend("GroupNorm")
nn.GroupNorm = GroupNorm
function GroupNorm:__init(...)
  local o = opts("GroupNorm", {"num_groups", "epsilon", "center", "scale", "beta_initializer",
                               "gamma_initializer"}, ...)
  self._groups = positive_int(o.num_groups == nil and 1 or o.num_groups, "GroupNorm", "num_groups")
  self._eps, self._center, self._scale = eps_arg(o, "GroupNorm"), o.center ~= false, o.scale ~= false
  self._kw = {num_groups = self._groups, eps = self._eps}
  gamma_beta(self, o, self._groups, self._scale)
end
function GroupNorm:forward(x)
  local dev = device_of(x)
  return npx.group_norm(x, self.gamma:data(dev), self.beta:data(dev), self._kw)
end
function GroupNorm:__tostring()
  return ("GroupNorm(eps=%s, num_groups=%d, center=%s, scale=%s)")
         :format(pyrepr(self._eps), self._groups, pyrepr(self._center), pyrepr(self._scale))
end

-- InstanceNorm{axis=1, epsilon=1e-5, center=true, scale=false,
-- beta_initializer='zeros', gamma_initializer='ones', in_channels=0}: x
-- (N, C, spatial...), each (sample, channel) over its spatial axes, the
-- channels on `axis`; gamma, beta (in_channels,).
local InstanceNorm = HybridBlock:extend("InstanceNorm")
nn.InstanceNorm = InstanceNorm
function InstanceNorm:__init(...)
  local o = opts("InstanceNorm", {"axis", "epsilon", "center", "scale", "beta_initializer", "gamma_initializer",
                                  "in_channels"}, ...)
  self._axis = core.int_arg(o.axis == nil and 1 or o.axis, "InstanceNorm", "axis")
  self._eps, self._center, self._scale = eps_arg(o, "InstanceNorm"), o.center ~= false, o.scale == true
  self._kw = {eps = self._eps}
  local c = known_size(o.in_channels, "InstanceNorm", "in_channels")
  gamma_beta(self, o, c > 0 and c or -1, self._scale)
end
function InstanceNorm:infer_shape(x)
  local c = axis_size(x, self._axis, "InstanceNorm")
  self.gamma.shape, self.beta.shape = {c}, {c}
end
function InstanceNorm:forward(x)
  local dev = device_of(x)
  local _, ax = axis_size(x, self._axis, "InstanceNorm")
  if ax == 1 then return npx.instance_norm(x, self.gamma:data(dev), self.beta:data(dev), self._kw) end
  x = np.swapaxes(x, 1, ax)
  return np.swapaxes(npx.instance_norm(x, self.gamma:data(dev), self.beta:data(dev), self._kw), 1, ax)
end
function InstanceNorm:__tostring()
  return ("InstanceNorm(eps=%s, axis=%s, center=%s, scale=%s, in_channels=%s)")
         :format(pyrepr(self._eps), pyrepr(self._axis), pyrepr(self._center), pyrepr(self._scale),
                 channels_text(self.gamma))
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

---------------------------------------------------------------------------
-- Embedding(input_dim, output_dim, {dtype='float32', weight_initializer,
-- sparse_grad=false}): weight (input_dim, output_dim); x's indices (any
-- integer or float dtype, floats truncated, out of range clipped as MXNet
-- on the CPU) -> x.shape + (output_dim,). The weight's gradient is dense.

local Embedding = HybridBlock:extend("Embedding")
nn.Embedding = Embedding
function Embedding:__init(...)
  local o = opts("Embedding", {"input_dim", "output_dim", "dtype", "weight_initializer", "sparse_grad"}, ...)
  local n, d = positive_int(o.input_dim, "Embedding", "input_dim"), positive_int(o.output_dim, "Embedding", "output_dim")
  if o.sparse_grad then
    core.error("Embedding: sparse_grad = true (a row_sparse gradient) is not available; luon's gradient is dense")
  end
  self._dtype = o.dtype or "float32"
  self._kw = {input_dim = n, output_dim = d}
  self.weight = Parameter("weight", {shape = {n, d}, dtype = self._dtype, init = o.weight_initializer})
end
function Embedding:forward(x) return npx.embedding(x, self.weight:data(device_of(x)), self._kw) end
function Embedding:__tostring()
  return ("Embedding(%d -> %d, %s)"):format(self._kw.input_dim, self._kw.output_dim, self._dtype)
end

---------------------------------------------------------------------------
-- Identity: its input. Lambda(function) and HybridLambda(function): a Lua
-- function as a block, or a string naming an np or npx function
-- (Lambda('tanh')). Concatenate{axis=-1} and HybridConcatenate{axis=-1}:
-- containers whose children each get the input, their outputs
-- concatenated along axis (MXNet 2's names for contrib.nn's Concurrent and
-- HybridConcurrent, which luon also has in gluon.contrib.nn).

local Identity = HybridBlock:extend("Identity")
nn.Identity = Identity
function Identity:forward(x) return x end

-- The function a Lambda wraps, and its name for the repr.
local function lambda_fn(layer, fn)
  if type(fn) == "function" then return fn, "<lambda>" end
  if type(fn) ~= "string" then
    core.error(("%s: expected a function or the name of an np or npx function, got %s")
               :format(layer, core.show_value(fn)))
  end
  local f = rawget(np, fn) or rawget(npx, fn)
  if type(f) ~= "function" then
    local names = {}
    for _, m in ipairs({np, npx}) do
      for k, v in pairs(m) do if type(v) == "function" then names[#names + 1] = k end end
    end
    core.error(("%s: no np or npx function named %s%s"):format(layer, core.show_value(fn), core.did_you_mean(fn, names)))
  end
  return f, fn
end

local Lambda = Block:extend("Lambda")
nn.Lambda = Lambda
function Lambda:__init(...)
  local o = opts("Lambda", {"function"}, ...)
  self._fn, self._fn_name = lambda_fn("Lambda", o["function"])
end
function Lambda:forward(...) return self._fn(...) end
function Lambda:__tostring() return ("%s(%s)"):format(self._class.__name, self._fn_name) end

local HybridLambda = HybridBlock:extend("HybridLambda")
nn.HybridLambda = HybridLambda
function HybridLambda:__init(...)
  local o = opts("HybridLambda", {"function"}, ...)
  self._fn, self._fn_name = lambda_fn("HybridLambda", o["function"])
end
HybridLambda.__tostring = Lambda.__tostring
function HybridLambda:forward(...) return self._fn(...) end

local function concat_init(self, layer, ...)
  local o = opts(layer, {"axis"}, ...)
  self._axis = core.int_arg(o.axis == nil and -1 or o.axis, layer, "axis")
end
local function concat_forward(self, x)
  local outs = {}
  for k, n in ipairs(self._child_order) do outs[k] = self._children[n](x) end
  if #outs == 0 then core.error(("%s: it has no children to concatenate"):format(self._class.__name)) end
  return np.concatenate(outs, self._axis)
end

local Concatenate = Sequential:extend("Concatenate")
nn.Concatenate = Concatenate
function Concatenate:__init(...) concat_init(self, "Concatenate", ...) end
Concatenate.forward = concat_forward

local HybridConcatenate = HybridSequential:extend("HybridConcatenate")
nn.HybridConcatenate = HybridConcatenate
function HybridConcatenate:__init(...) concat_init(self, "HybridConcatenate", ...) end
HybridConcatenate.forward = concat_forward

return nn
