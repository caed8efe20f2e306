-- luon.gluon.nn.conv_layers: the convolutions (Conv1D/2D/3D and their
-- transposes) and the pooling layers (max, average and global, 1-d to 3-d),
-- channels first (NCW, NCHW, NCDHW).
local core = require("luon.core")
local C = core.C
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local util = require("luon.gluon.nn.util")

local HybridBlock = block.HybridBlock
local Parameter = param.new
local tuple = param.tuple
local opts, positive_int, known_size, pyrepr = util.opts, util.positive_int, util.known_size, util.pyrepr
local device_of, layout_of = util.device_of, util.layout_of
local info_of = core.info_of
local activations = require("luon.gluon.nn.activations")
local maybe_act = activations.maybe_act

local nn = {}

-- Convolutions: Conv1D (NCW), Conv2D (NCHW), Conv3D (NCDHW) and the
-- transposed ones, Conv1DTranspose, Conv2DTranspose, Conv3DTranspose:
-- {channels, kernel_size, strides=1, padding=0, [output_padding=0,]
-- dilation=1, groups=1, layout, activation, use_bias=true,
-- weight_initializer, bias_initializer='zeros', in_channels=0} in MXNet's
-- order; sizes an int or a list of one per spatial axis. weight (channels,
-- in_channels/groups, k...); transposed (in_channels, channels/groups, k...),
-- as MXNet's Deconvolution. in_channels, when given, makes the weight's
-- shape known at once (MXNet 2.0 still defers it).
local conv_layouts = {"NCW", "NCHW", "NCDHW"}
local conv_shapes = {"(N, C, W)", "(N, C, H, W)", "(N, C, D, H, W)"}

local function all_equal(t, v)
  for k = 1, #t do if t[k] ~= v then return false end end
  return true
end

local function convolution(name, n, transposed)
  local cls = HybridBlock:extend(name)
  nn[name] = cls
  local names = {"channels", "kernel_size", "strides", "padding"}
  if transposed then names[#names + 1] = "output_padding" end
  for _, k in ipairs({"dilation", "groups", "layout", "activation", "use_bias", "weight_initializer",
                      "bias_initializer", "in_channels", "dtype"}) do
    names[#names + 1] = k
  end
  function cls:__init(...)
    local o = opts(name, names, ...)
    local channels = positive_int(o.channels, name, "channels")
    if o.kernel_size == nil then core.error(name .. ": kernel_size is required") end
    local kernel = core.sizes(o.kernel_size, n, nil, name, "kernel_size")
    local stride = core.sizes(o.strides, n, 1, name, "strides")
    local pad = core.sizes(o.padding, n, 0, name, "padding")
    local dilate = core.sizes(o.dilation, n, 1, name, "dilation")
    local groups = positive_int(o.groups or 1, name, "groups")
    if channels % groups ~= 0 then
      core.error(("%s: channels (%d) must be a multiple of groups (%d)"):format(name, channels, groups))
    end
    layout_of(o.layout, name, conv_layouts[n])
    local in_channels = known_size(o.in_channels, name, "in_channels")
    if in_channels > 0 and in_channels % groups ~= 0 then
      core.error(("%s: in_channels (%d) must be a multiple of groups (%d)"):format(name, in_channels, groups))
    end
    self._channels, self._groups, self._transposed = channels, groups, transposed
    self._kernel, self._stride, self._pad, self._dilate = kernel, stride, pad, dilate
    self._kw = {stride = stride, pad = pad, dilate = dilate, num_group = groups}
    local wshape
    if transposed then
      local adj = core.sizes(o.output_padding, n, 0, name, "output_padding")
      for d = 1, n do
        if adj[d] >= stride[d] then
          core.error(("%s: output_padding %s must be smaller than strides %s"):format(name, tuple(adj), tuple(stride)))
        end
      end
      self._kw.adj = adj
      wshape = {in_channels > 0 and in_channels or -1, channels / groups}
    else
      self._kw_relu = {stride = stride, pad = pad, dilate = dilate, num_group = groups, act_type = "relu"}
      wshape = {channels, in_channels > 0 and in_channels / groups or -1}
    end
    for d = 1, n do wshape[d + 2] = kernel[d] end
    self.weight = Parameter("weight", {shape = wshape, dtype = o.dtype, init = o.weight_initializer,
                                       allow_deferred_init = true})
    if o.use_bias ~= false then
      self.bias = Parameter("bias", {shape = {channels}, dtype = o.dtype, init = o.bias_initializer or "zeros",
                                     allow_deferred_init = true})
    else
      self.bias = nil -- reads nil, as MXNet's None
    end
    maybe_act(self, o.activation)
  end

  function cls:infer_shape(x)
    local s = x.shape
    if #s ~= n + 2 then
      core.error(("%s: input must be %d-d %s, got shape %s"):format(name, n + 2, conv_shapes[n], tuple(s)))
    end
    if s[2] % self._groups ~= 0 then
      core.error(("%s: input channels (%d) must be a multiple of groups (%d)"):format(name, s[2], self._groups))
    end
    local w = {}
    for k = 1, #self.weight.shape do w[k] = self.weight.shape[k] end
    if transposed then w[1] = s[2] else w[2] = s[2] / self._groups end
    self.weight.shape = w
  end

  function cls:forward(x)
    local dev = device_of(x)
    local bias = self.bias
    bias = bias and bias:data(dev)
    if transposed then
      local y = npx.deconvolution(x, self.weight:data(dev), bias, self._kw)
      if self.act then return self.act(y) end
      return y
    end
    local act = self.act
    if act and act._act_type == "relu" and #act._fhooks == 0 and #act._prehooks == 0 then
      -- fused: one pass over the output (the act child runs itself when hooked, as for summary)
      return npx.convolution(x, self.weight:data(dev), bias, self._kw_relu)
    end
    local y = npx.convolution(x, self.weight:data(dev), bias, self._kw)
    if act then return act(y) end
    return y
  end

  -- MXNet's repr: "{weight.shape[1]} -> {weight.shape[0]}" (for the
  -- transposed layers that reads channels/groups -> in_channels, as MXNet
  -- prints it), and no output_padding (MXNet's repr never shows it).
  function cls:__tostring()
    local w = self.weight.shape
    -- an unknown size (-1 until the first call) is MXNet's None, or 0 where
    -- MXNet's transposed layers print its placeholder
    local function dim(v) return v > 0 and v or (w[1] == v and "0" or "None") end
    local s = ("%s(%s -> %s, kernel_size=%s, stride=%s"):format(self._class.__name, dim(w[2]), dim(w[1]),
              tuple(self._kernel), tuple(self._stride))
    if not all_equal(self._pad, 0) then s = s .. ", padding=" .. tuple(self._pad) end
    if not all_equal(self._dilate, 1) then s = s .. ", dilation=" .. tuple(self._dilate) end
    if self._groups ~= 1 then s = s .. ", groups=" .. self._groups end
    if not self.bias then s = s .. ", bias=False" end
    if self.act then s = s .. ", " .. tostring(self.act) end
    return s .. ")"
  end
  return cls
end
convolution("Conv1D", 1, false)
local Conv2D = convolution("Conv2D", 2, false)
convolution("Conv3D", 3, false)
convolution("Conv1DTranspose", 1, true)
convolution("Conv2DTranspose", 2, true)
convolution("Conv3DTranspose", 3, true)

-- In a Sequential, Conv2D (no activation or relu) followed by MaxPool2D runs
-- as one op (npx.convolution_maxpool, the registry's fused conv2d_maxpool)
-- where that op runs: the convolution's output is pooled while in cache and
-- never stored, and the backward needs neither it nor a search of the
-- windows. Not when a hook could see the output between them, before the
-- first call (deferred shapes), on devices the op has no kernel for (GPUs),
-- for dtypes it does not take, or, while autograd records, for batches
-- smaller than the thread count (the fused backward splits over samples;
-- the forward splits a sample's rows when it has fewer samples than
-- threads).
local FLOAT32, FLOAT64 = core.FLOAT32, core.FLOAT64
local FLOAT16, BFLOAT16 = core.dtype_ids.float16, core.dtype_ids.bfloat16
local fused_op = core.op_info.conv2d_maxpool
-- Likewise, in predict mode outside autograd.record, a Conv2D without an
-- activation followed by a BatchNorm (and an Activation('relu')) runs as
-- one op on the CPU, npx.convolution_bn: oneDNN's parts normalise their
-- output while it is in cache; the same bits as the blocks apart.
local cbn_op, relu_op = core.op_info.conv2d_bn, core.op_ids.relu
local function fuse_bn(self, nxt, after, x)
  if self.act or not nxt._fused_predict or not core.is_array(x) or not self._ready or
     #self._fhooks + #self._prehooks > 0 then
    return nil
  end
  local info = info_of(x)
  if not core.op_runs_on(cbn_op.name, info.dev_type) or info.ndim ~= 4 or
     not (info.dtype == FLOAT32 or info.dtype == FLOAT64) or core.amp_casts(core.op_ids.conv2d) then
    return nil
  end
  local dev = device_of(x)
  local bn = nxt:_fused_predict(dev)
  if not bn then return nil end
  local relu = after and after.forward == activations.Activation.forward and after._act_type == "relu" and
               #after._fhooks + #after._prehooks == 0 and not core.amp_casts(relu_op)
  bn.act_type = relu and "relu" or nil
  local bias = self.bias
  local y = npx.convolution_bn(x, self.weight:data(dev), bias and bias:data(dev), self._kw, bn)
  bn.act_type = nil
  return y, relu and 3 or 2
end

function Conv2D:_fuse_next(nxt, after, x, ...)
  if select("#", ...) == 0 and not nxt._maxpool_kw then return fuse_bn(self, nxt, after, x) end
  if not nxt._maxpool_kw or select("#", ...) > 0 or not core.is_array(x) or not self._ready or not nxt._ready
     or #self._fhooks + #self._prehooks + #nxt._fhooks + #nxt._prehooks > 0 then
    return nil
  end
  local act = self.act
  if act and (act._act_type ~= "relu" or #act._fhooks + #act._prehooks > 0) then return nil end
  local info = info_of(x)
  if not core.op_runs_on(fused_op.name, info.dev_type) or info.ndim ~= 4 or
     (info.shape[0] < npx.num_threads() and C.luon_autograd_is_recording() ~= 0) or
     not (info.dtype == FLOAT32 or info.dtype == FLOAT64 or (fused_op.half and (info.dtype == FLOAT16 or info.dtype == BFLOAT16))) then
    return nil
  end
  local dev, bias = device_of(x), self.bias
  local bn = after and after._fused_predict and (info.dtype == FLOAT32 or info.dtype == FLOAT64) and
             after:_fused_predict(dev)
  return npx.convolution_maxpool(x, self.weight:data(dev), bias and bias:data(dev),
                                 act and self._kw_relu or self._kw, nxt._maxpool_kw, bn or nil), bn and 3 or 2
end


---------------------------------------------------------------------------
-- Pooling in 1, 2 and 3 dimensions: MaxPool1D/2D/3D, AvgPool1D/2D/3D,
-- GlobalMaxPool1D/2D/3D, GlobalAvgPool1D/2D/3D. strides default to
-- pool_size; ceil_mode rounds the output size up. Each class takes its
-- positional arguments in its MXNet order (MaxPool3D and AvgPool2D/3D put
-- ceil_mode before layout).

local function pooling(name, n, pool_type, global, names)
  local cls = HybridBlock:extend(name)
  nn[name] = cls
  function cls:__init(...)
    if pool_type == "max" and core.kw(...).count_include_pad ~= nil then
      core.error(name .. ": unknown argument 'count_include_pad' (only average pooling has it)")
    end
    local o = opts(name, names, ...)
    local kernel = core.sizes(global and 1 or o.pool_size, n, 2, name, "pool_size")
    self._kernel = kernel
    self._stride = core.sizes(o.strides, n, kernel, name, "strides")
    self._pad = core.sizes(o.padding, n, 0, name, "padding")
    self._ceil_mode = global or o.ceil_mode == true
    self._count_include_pad = o.count_include_pad ~= false
    self._layout = layout_of(o.layout, name, conv_layouts[n])
    self._kw = {kernel = kernel, stride = self._stride, pad = self._pad, pool_type = pool_type,
                global_pool = global, pooling_convention = self._ceil_mode and "full" or "valid",
                count_include_pad = self._count_include_pad}
    -- a max pool that a Conv2D before it in a Sequential may fuse with (Conv2D:_fuse_next)
    if n == 2 and pool_type == "max" and not global and kernel[1] * kernel[2] <= 254 then
      self._maxpool_kw = self._kw
    end
  end
  function cls:forward(x) return npx.pooling(x, self._kw) end
  function cls:__tostring()
    return ("%s(size=%s, stride=%s, padding=%s, ceil_mode=%s, global_pool=%s, pool_type=%s, layout=%s)")
           :format(self._class.__name, tuple(self._kernel), tuple(self._stride), tuple(self._pad),
                   pyrepr(self._ceil_mode), pyrepr(global), pool_type, self._layout)
  end
end
local max_1d2d = {"pool_size", "strides", "padding", "layout", "ceil_mode"}
pooling("MaxPool1D", 1, "max", false, max_1d2d)
pooling("MaxPool2D", 2, "max", false, max_1d2d)
pooling("MaxPool3D", 3, "max", false, {"pool_size", "strides", "padding", "ceil_mode", "layout"})
pooling("AvgPool1D", 1, "avg", false, {"pool_size", "strides", "padding", "layout", "ceil_mode", "count_include_pad"})
local avg_2d3d = {"pool_size", "strides", "padding", "ceil_mode", "layout", "count_include_pad"}
pooling("AvgPool2D", 2, "avg", false, avg_2d3d)
pooling("AvgPool3D", 3, "avg", false, avg_2d3d)
for n = 1, 3 do
  pooling("GlobalMaxPool" .. n .. "D", n, "max", true, {"layout"})
  pooling("GlobalAvgPool" .. n .. "D", n, "avg", true, {"layout"})
end

---------------------------------------------------------------------------
-- BatchNorm{axis=1, momentum=0.9, epsilon=1e-5, center=true, scale=true,
-- use_global_stats=false, beta_initializer='zeros', gamma_initializer='ones',
---------------------------------------------------------------------------
-- ReflectionPad2D(padding=0): (N, C, H, W) padded by the reflection of its
-- edges (np.pad's 'reflect' mode). padding: an int (every side) or MXNet
-- 1.x's 8-tuple pad_width (0, 0, 0, 0, top, bottom, left, right). As
-- MXNet's pad operator, each width must be smaller than its axis.

local np = require("luon.np")
local ReflectionPad2D = HybridBlock:extend("ReflectionPad2D")
nn.ReflectionPad2D = ReflectionPad2D
function ReflectionPad2D:__init(...)
  local o = opts("ReflectionPad2D", {"padding"}, ...)
  local p = o.padding == nil and 0 or o.padding
  if type(p) == "number" then
    core.int_arg(p, "ReflectionPad2D", "padding", 0)
    p = {0, 0, 0, 0, p, p, p, p}
  end
  if type(p) ~= "table" or #p ~= 8 then
    core.error(("ReflectionPad2D: padding must be an integer or 8 integers (0, 0, 0, 0, top, bottom, left, right), got %s")
               :format(type(p) == "table" and ("a list of " .. #p) or core.show_value(p)))
  end
  for k = 1, 8 do core.int_arg(p[k], "ReflectionPad2D", "each padding width", 0) end
  if p[1] ~= 0 or p[2] ~= 0 or p[3] ~= 0 or p[4] ~= 0 then
    core.error(("ReflectionPad2D: padding (%s) must be zero on the first two axes (N, C)"):format(table.concat(p, ", ")))
  end
  self._padding = {p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]}
  self._width = {{0, 0}, {0, 0}, {p[5], p[6]}, {p[7], p[8]}}
end
function ReflectionPad2D:forward(x)
  core.array_arg(x, "ReflectionPad2D", "the input")
  local s = x.shape
  if #s ~= 4 then
    core.error(("ReflectionPad2D: the input must be 4-d (N, C, H, W), got shape %s"):format(core.shape_text(s)))
  end
  for d = 3, 4 do
    local w = self._width[d]
    if w[1] >= s[d] or w[2] >= s[d] then
      core.error(("ReflectionPad2D: padding (%d, %d) of axis %d must be smaller than its size %d (input shape %s)")
                 :format(w[1], w[2], d - 1, s[d], core.shape_text(s)))
    end
  end
  return np.pad(x, self._width, "reflect")
end

return nn
