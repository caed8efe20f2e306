-- luon.gluon.nn.conv_layers: Conv2D and the pooling layers (MaxPool2D,
-- AvgPool2D, GlobalMaxPool2D, GlobalAvgPool2D), NCHW.
local core = require("luon.core")
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
local maybe_act = require("luon.gluon.nn.activations").maybe_act

local nn = {}

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
