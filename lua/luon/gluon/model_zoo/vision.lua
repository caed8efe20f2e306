-- luon.gluon.model_zoo.vision: MXNet 1.9.1's vision model zoo
-- (mxnet/gluon/model_zoo/vision/*.py), block for block, so that every
-- parameter has MXNet's structural name and shape ('features.0.weight')
-- and MXNet's .params files load into these networks: ResNet v1 and v2,
-- VGG, MobileNet v1 and v2, AlexNet, SqueezeNet, DenseNet, Inception v3.
-- Constructors take one keyword table: vision.resnet18_v1{classes = 10},
-- vision.get_model("mobilenet1.0", {pretrained = true, root = "models/"}).
-- pretrained = true reads a local file (nothing is downloaded): see
-- pretrained_file below.
local core = require("luon.core")
local np = require("luon.np")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local nn = require("luon.gluon.nn")

local vision = {}
local HybridBlock, HybridSequential = block.HybridBlock, block.HybridSequential

---------------------------------------------------------------------------
-- Small blocks the architectures need: MXNet's contrib.nn.HybridConcurrent
-- and Identity (gluon.contrib.nn's), mobilenet's RELU6.

local contrib_nn = require("luon.gluon.contrib.nn")
local HybridConcurrent, Identity = contrib_nn.HybridConcurrent, contrib_nn.Identity
vision.HybridConcurrent, vision.Identity = HybridConcurrent, Identity

-- min(max(x, 0), 6)
local RELU6 = HybridBlock:extend("RELU6")
vision.RELU6 = RELU6
function RELU6:forward(x) return np.clip(x, 0, 6) end
function RELU6:__tostring() return "RELU6" end

local function seq(...) return HybridSequential():add(...) end

local function relu(x) return npx.activation(x, {act_type = "relu"}) end

---------------------------------------------------------------------------
-- ResNet (resnet.py)

local function conv3x3(channels, stride, in_channels)
  return nn.Conv2D(channels, {kernel_size = 3, strides = stride, padding = 1, use_bias = false,
                              in_channels = in_channels})
end

local function block_opts(name, ...)
  local o = core.args(name, {"channels", "stride", "downsample", "in_channels"},
                      {"channels", "stride", "downsample", "in_channels"}, ...)
  core.int_arg(o.channels, name, "channels", 1)
  core.int_arg(o.stride, name, "stride", 1)
  return o.channels, o.stride, o.downsample == true, o.in_channels or 0
end

local BasicBlockV1 = HybridBlock:extend("BasicBlockV1")
vision.BasicBlockV1 = BasicBlockV1
function BasicBlockV1:__init(...)
  local channels, stride, downsample, in_channels = block_opts("BasicBlockV1", ...)
  self.body = seq(conv3x3(channels, stride, in_channels), nn.BatchNorm(), nn.Activation("relu"),
                  conv3x3(channels, 1, channels), nn.BatchNorm())
  if downsample then
    self.downsample = seq(nn.Conv2D(channels, {kernel_size = 1, strides = stride, use_bias = false,
                                               in_channels = in_channels}), nn.BatchNorm())
  else
    self.downsample = nil
  end
end
function BasicBlockV1:forward(x)
  local residual = self.downsample and self.downsample(x) or x
  return relu(self.body(x) + residual)
end

local BottleneckV1 = HybridBlock:extend("BottleneckV1")
vision.BottleneckV1 = BottleneckV1
function BottleneckV1:__init(...)
  local channels, stride, downsample, in_channels = block_opts("BottleneckV1", ...)
  local c4 = math.floor(channels / 4)
  self.body = seq(nn.Conv2D(c4, {kernel_size = 1, strides = stride}), nn.BatchNorm(), nn.Activation("relu"),
                  conv3x3(c4, 1, c4), nn.BatchNorm(), nn.Activation("relu"),
                  nn.Conv2D(channels, {kernel_size = 1, strides = 1}), nn.BatchNorm())
  if downsample then
    self.downsample = seq(nn.Conv2D(channels, {kernel_size = 1, strides = stride, use_bias = false,
                                               in_channels = in_channels}), nn.BatchNorm())
  else
    self.downsample = nil
  end
end
BottleneckV1.forward = BasicBlockV1.forward

local BasicBlockV2 = HybridBlock:extend("BasicBlockV2")
vision.BasicBlockV2 = BasicBlockV2
function BasicBlockV2:__init(...)
  local channels, stride, downsample, in_channels = block_opts("BasicBlockV2", ...)
  self.bn1 = nn.BatchNorm()
  self.conv1 = conv3x3(channels, stride, in_channels)
  self.bn2 = nn.BatchNorm()
  self.conv2 = conv3x3(channels, 1, channels)
  if downsample then
    self.downsample = nn.Conv2D(channels, {kernel_size = 1, strides = stride, use_bias = false,
                                           in_channels = in_channels})
  else
    self.downsample = nil
  end
end
function BasicBlockV2:forward(x)
  local residual = x
  x = relu(self.bn1(x))
  if self.downsample then residual = self.downsample(x) end
  x = relu(self.bn2(self.conv1(x)))
  return self.conv2(x) + residual
end

local BottleneckV2 = HybridBlock:extend("BottleneckV2")
vision.BottleneckV2 = BottleneckV2
function BottleneckV2:__init(...)
  local channels, stride, downsample, in_channels = block_opts("BottleneckV2", ...)
  local c4 = math.floor(channels / 4)
  self.bn1 = nn.BatchNorm()
  self.conv1 = nn.Conv2D(c4, {kernel_size = 1, strides = 1, use_bias = false})
  self.bn2 = nn.BatchNorm()
  self.conv2 = conv3x3(c4, stride, c4)
  self.bn3 = nn.BatchNorm()
  self.conv3 = nn.Conv2D(channels, {kernel_size = 1, strides = 1, use_bias = false})
  if downsample then
    self.downsample = nn.Conv2D(channels, {kernel_size = 1, strides = stride, use_bias = false,
                                           in_channels = in_channels})
  else
    self.downsample = nil
  end
end
function BottleneckV2:forward(x)
  local residual = x
  x = relu(self.bn1(x))
  if self.downsample then residual = self.downsample(x) end
  x = relu(self.bn2(self.conv1(x)))
  x = relu(self.bn3(self.conv2(x)))
  return self.conv3(x) + residual
end

local function list_arg(v, fname, what)
  if type(v) ~= "table" or #v == 0 then
    core.error(("%s: %s must be a non-empty list of positive integers, got %s"):format(fname, what, core.show_value(v)))
  end
  for k = 1, #v do core.int_arg(v[k], fname, what .. "[" .. k .. "]", 1) end
  return v
end

local function classes_of(o, fname)
  return core.int_arg(o.classes == nil and 1000 or o.classes, fname, "classes", 1)
end

local resnet_names = {"block", "layers", "channels", "classes", "thumbnail"}
local function resnet_opts(name, ...)
  local o = core.args(name, resnet_names, resnet_names, ...)
  if not (type(o.block) == "table" and block.isinstance(o.block, HybridBlock)) then
    core.error(("%s: block must be a residual block class (vision.BasicBlockV1, ...), got %s")
               :format(name, core.show_value(o.block)))
  end
  list_arg(o.layers, name, "layers")
  list_arg(o.channels, name, "channels")
  if #o.layers ~= #o.channels - 1 then
    core.error(("%s: channels must have one entry more than layers, got %d layers and %d channels")
               :format(name, #o.layers, #o.channels))
  end
  return o, classes_of(o, name)
end

local function make_layer(blk, layers, channels, stride, in_channels)
  local layer = HybridSequential()
  layer:add(blk(channels, stride, channels ~= in_channels, {in_channels = in_channels}))
  for _ = 2, layers do layer:add(blk(channels, 1, false, {in_channels = channels})) end
  return layer
end

local ResNetV1 = HybridBlock:extend("ResNetV1")
vision.ResNetV1 = ResNetV1
function ResNetV1:__init(...)
  local o, classes = resnet_opts("ResNetV1", ...)
  local layers, channels = o.layers, o.channels
  self.features = HybridSequential()
  if o.thumbnail then
    self.features:add(conv3x3(channels[1], 1, 0))
  else
    self.features:add(nn.Conv2D(channels[1], 7, 2, 3, {use_bias = false}), nn.BatchNorm(),
                      nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
  end
  for i, n in ipairs(layers) do
    self.features:add(make_layer(o.block, n, channels[i + 1], i == 1 and 1 or 2, channels[i]))
  end
  self.features:add(nn.GlobalAvgPool2D())
  self.output = nn.Dense(classes, {in_units = channels[#channels]})
end
function ResNetV1:forward(x) return self.output(self.features(x)) end

local ResNetV2 = HybridBlock:extend("ResNetV2")
vision.ResNetV2 = ResNetV2
function ResNetV2:__init(...)
  local o, classes = resnet_opts("ResNetV2", ...)
  local layers, channels = o.layers, o.channels
  self.features = HybridSequential()
  self.features:add(nn.BatchNorm{scale = false, center = false})
  if o.thumbnail then
    self.features:add(conv3x3(channels[1], 1, 0))
  else
    self.features:add(nn.Conv2D(channels[1], 7, 2, 3, {use_bias = false}), nn.BatchNorm(),
                      nn.Activation("relu"), nn.MaxPool2D(3, 2, 1))
  end
  local in_channels = channels[1]
  for i, n in ipairs(layers) do
    self.features:add(make_layer(o.block, n, channels[i + 1], i == 1 and 1 or 2, in_channels))
    in_channels = channels[i + 1]
  end
  self.features:add(nn.BatchNorm(), nn.Activation("relu"), nn.GlobalAvgPool2D(), nn.Flatten())
  self.output = nn.Dense(classes, {in_units = in_channels})
end
ResNetV2.forward = ResNetV1.forward

local resnet_spec = {
  [18] = {"basic", {2, 2, 2, 2}, {64, 64, 128, 256, 512}},
  [34] = {"basic", {3, 4, 6, 3}, {64, 64, 128, 256, 512}},
  [50] = {"bottle", {3, 4, 6, 3}, {64, 256, 512, 1024, 2048}},
  [101] = {"bottle", {3, 4, 23, 3}, {64, 256, 512, 1024, 2048}},
  [152] = {"bottle", {3, 8, 36, 3}, {64, 256, 512, 1024, 2048}},
}
local resnet_blocks = {{basic = BasicBlockV1, bottle = BottleneckV1}, {basic = BasicBlockV2, bottle = BottleneckV2}}

---------------------------------------------------------------------------
-- VGG (vgg.py)

local VGG = HybridBlock:extend("VGG")
vision.VGG = VGG
local vgg_names = {"layers", "filters", "classes", "batch_norm"}
function VGG:__init(...)
  local o = core.args("VGG", vgg_names, vgg_names, ...)
  list_arg(o.layers, "VGG", "layers")
  list_arg(o.filters, "VGG", "filters")
  if #o.layers ~= #o.filters then
    core.error(("VGG: layers and filters must have the same length, got %d and %d"):format(#o.layers, #o.filters))
  end
  local classes = classes_of(o, "VGG")
  local f = HybridSequential()
  local xavier = require("luon.initializer").Xavier{rnd_type = "gaussian", factor_type = "out", magnitude = 2}
  for i, num in ipairs(o.layers) do
    for _ = 1, num do
      f:add(nn.Conv2D(o.filters[i], {kernel_size = 3, padding = 1, weight_initializer = xavier,
                                     bias_initializer = "zeros"}))
      if o.batch_norm then f:add(nn.BatchNorm()) end
      f:add(nn.Activation("relu"))
    end
    f:add(nn.MaxPool2D{strides = 2})
  end
  self.features = f
  f:add(nn.Dense(4096, {activation = "relu", weight_initializer = "normal", bias_initializer = "zeros"}),
        nn.Dropout{rate = 0.5},
        nn.Dense(4096, {activation = "relu", weight_initializer = "normal", bias_initializer = "zeros"}),
        nn.Dropout{rate = 0.5})
  self.output = nn.Dense(classes, {weight_initializer = "normal", bias_initializer = "zeros"})
end
VGG.forward = ResNetV1.forward

local vgg_spec = {
  [11] = {{1, 1, 2, 2, 2}, {64, 128, 256, 512, 512}},
  [13] = {{2, 2, 2, 2, 2}, {64, 128, 256, 512, 512}},
  [16] = {{2, 2, 3, 3, 3}, {64, 128, 256, 512, 512}},
  [19] = {{2, 2, 4, 4, 4}, {64, 128, 256, 512, 512}},
}

---------------------------------------------------------------------------
-- MobileNet v1 and v2 (mobilenet.py)

local function add_conv(out, channels, kernel, stride, pad, num_group, active, relu6)
  out:add(nn.Conv2D(channels, kernel or 1, stride or 1, pad or 0, {groups = num_group or 1, use_bias = false}))
  out:add(nn.BatchNorm{scale = true})
  if active ~= false then out:add(relu6 and RELU6() or nn.Activation("relu")) end
end

local function add_conv_dw(out, dw_channels, channels, stride, relu6)
  add_conv(out, dw_channels, 3, stride, 1, dw_channels, true, relu6)
  add_conv(out, channels, 1, 1, 0, 1, true, relu6)
end

-- Python's int() of a positive float
local function int(x) return math.floor(x) end

local function scaled(list, m)
  local out = {}
  for k, v in ipairs(list) do out[k] = int(v * m) end
  return out
end

local function rep(v, n, into)
  into = into or {}
  for _ = 1, n do into[#into + 1] = v end
  return into
end

local function multiplier_of(o, fname)
  local m = o.multiplier == nil and 1.0 or o.multiplier
  if type(m) ~= "number" or not (m > 0) then
    core.error(("%s: multiplier must be a number > 0, got %s"):format(fname, core.show_value(m)))
  end
  return m
end

local LinearBottleneck = HybridBlock:extend("LinearBottleneck")
vision.LinearBottleneck = LinearBottleneck
local lb_names = {"in_channels", "channels", "t", "stride"}
function LinearBottleneck:__init(...)
  local o = core.args("LinearBottleneck", lb_names, lb_names, ...)
  for _, n in ipairs(lb_names) do core.int_arg(o[n], "LinearBottleneck", n, 1) end
  self._use_shortcut = o.stride == 1 and o.in_channels == o.channels
  self.out = HybridSequential()
  local c = o.in_channels * o.t
  add_conv(self.out, c, 1, 1, 0, 1, true, true)
  add_conv(self.out, c, 3, o.stride, 1, c, true, true)
  add_conv(self.out, o.channels, 1, 1, 0, 1, false, true)
end
function LinearBottleneck:forward(x)
  local out = self.out(x)
  if self._use_shortcut then out = out + x end
  return out
end

local MobileNet = HybridBlock:extend("MobileNet")
vision.MobileNet = MobileNet
local mobilenet_names = {"multiplier", "classes"}
function MobileNet:__init(...)
  local o = core.args("MobileNet", mobilenet_names, mobilenet_names, ...)
  local m, classes = multiplier_of(o, "MobileNet"), classes_of(o, "MobileNet")
  self.features = HybridSequential()
  add_conv(self.features, int(32 * m), 3, 2, 1)
  local dw = scaled(rep(512, 6, {32, 64, 128, 128, 256, 256}), m)
  dw[#dw + 1] = int(1024 * m)
  local ch = scaled(rep(1024, 2, rep(512, 6, {64, 128, 128, 256, 256})), m)
  local strides = {1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1}
  for k = 1, #dw do add_conv_dw(self.features, dw[k], ch[k], strides[k]) end
  self.features:add(nn.GlobalAvgPool2D(), nn.Flatten())
  self.output = nn.Dense(classes)
end
MobileNet.forward = ResNetV1.forward

local MobileNetV2 = HybridBlock:extend("MobileNetV2")
vision.MobileNetV2 = MobileNetV2
function MobileNetV2:__init(...)
  local o = core.args("MobileNetV2", mobilenet_names, mobilenet_names, ...)
  local m, classes = multiplier_of(o, "MobileNetV2"), classes_of(o, "MobileNetV2")
  self.features = HybridSequential()
  add_conv(self.features, int(32 * m), 3, 2, 1, 1, true, true)
  local in_c = scaled({32, 16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160}, m)
  local chs = scaled({16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320}, m)
  local strides = {1, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1}
  for k = 1, #in_c do
    self.features:add(LinearBottleneck{in_channels = in_c[k], channels = chs[k], t = k == 1 and 1 or 6,
                                       stride = strides[k]})
  end
  add_conv(self.features, m > 1.0 and int(1280 * m) or 1280, 1, 1, 0, 1, true, true)
  self.features:add(nn.GlobalAvgPool2D())
  self.output = seq(nn.Conv2D(classes, 1, {use_bias = false}), nn.Flatten())
end
MobileNetV2.forward = ResNetV1.forward

---------------------------------------------------------------------------
-- AlexNet (alexnet.py)

local AlexNet = HybridBlock:extend("AlexNet")
vision.AlexNet = AlexNet
function AlexNet:__init(...)
  local o = core.args("AlexNet", {"classes"}, {"classes"}, ...)
  local classes = classes_of(o, "AlexNet")
  self.features = seq(
    nn.Conv2D(64, {kernel_size = 11, strides = 4, padding = 2, activation = "relu"}),
    nn.MaxPool2D{pool_size = 3, strides = 2},
    nn.Conv2D(192, {kernel_size = 5, padding = 2, activation = "relu"}),
    nn.MaxPool2D{pool_size = 3, strides = 2},
    nn.Conv2D(384, {kernel_size = 3, padding = 1, activation = "relu"}),
    nn.Conv2D(256, {kernel_size = 3, padding = 1, activation = "relu"}),
    nn.Conv2D(256, {kernel_size = 3, padding = 1, activation = "relu"}),
    nn.MaxPool2D{pool_size = 3, strides = 2},
    nn.Flatten(),
    nn.Dense(4096, {activation = "relu"}), nn.Dropout(0.5),
    nn.Dense(4096, {activation = "relu"}), nn.Dropout(0.5))
  self.output = nn.Dense(classes)
end
AlexNet.forward = ResNetV1.forward

---------------------------------------------------------------------------
-- SqueezeNet (squeezenet.py)

local function fire_conv(channels, kernel_size, padding)
  return seq(nn.Conv2D(channels, kernel_size, {padding = padding or 0}), nn.Activation("relu"))
end

local function fire(squeeze, e1, e3)
  local paths = HybridConcurrent{axis = 1}
  paths:add(fire_conv(e1, 1), fire_conv(e3, 3, 1))
  return seq(fire_conv(squeeze, 1), paths)
end

local SqueezeNet = HybridBlock:extend("SqueezeNet")
vision.SqueezeNet = SqueezeNet
function SqueezeNet:__init(...)
  local o = core.args("SqueezeNet", {"version", "classes"}, {"version", "classes"}, ...)
  local classes = classes_of(o, "SqueezeNet")
  local function pool() return nn.MaxPool2D{pool_size = 3, strides = 2, ceil_mode = true} end
  local f = HybridSequential()
  if o.version == "1.0" then
    f:add(nn.Conv2D(96, {kernel_size = 7, strides = 2}), nn.Activation("relu"), pool(),
          fire(16, 64, 64), fire(16, 64, 64), fire(32, 128, 128), pool(),
          fire(32, 128, 128), fire(48, 192, 192), fire(48, 192, 192), fire(64, 256, 256), pool(),
          fire(64, 256, 256))
  elseif o.version == "1.1" then
    f:add(nn.Conv2D(64, {kernel_size = 3, strides = 2}), nn.Activation("relu"), pool(),
          fire(16, 64, 64), fire(16, 64, 64), pool(),
          fire(32, 128, 128), fire(32, 128, 128), pool(),
          fire(48, 192, 192), fire(48, 192, 192), fire(64, 256, 256), fire(64, 256, 256))
  else
    core.error(("SqueezeNet: version must be '1.0' or '1.1', got %s"):format(core.show_value(o.version)))
  end
  f:add(nn.Dropout(0.5))
  self.features = f
  self.output = seq(nn.Conv2D(classes, {kernel_size = 1}), nn.Activation("relu"), nn.AvgPool2D(13), nn.Flatten())
end
SqueezeNet.forward = ResNetV1.forward

---------------------------------------------------------------------------
-- DenseNet (densenet.py)

local function dense_layer(growth_rate, bn_size, dropout)
  local new = seq(nn.BatchNorm(), nn.Activation("relu"),
                  nn.Conv2D(bn_size * growth_rate, {kernel_size = 1, use_bias = false}),
                  nn.BatchNorm(), nn.Activation("relu"),
                  nn.Conv2D(growth_rate, {kernel_size = 3, padding = 1, use_bias = false}))
  if dropout and dropout > 0 then new:add(nn.Dropout(dropout)) end
  local out = HybridConcurrent{axis = 1}
  out:add(Identity(), new)
  return out
end

local function transition(n)
  return seq(nn.BatchNorm(), nn.Activation("relu"), nn.Conv2D(n, {kernel_size = 1, use_bias = false}),
             nn.AvgPool2D{pool_size = 2, strides = 2})
end

local DenseNet = HybridBlock:extend("DenseNet")
vision.DenseNet = DenseNet
local densenet_names = {"num_init_features", "growth_rate", "block_config", "bn_size", "dropout", "classes"}
function DenseNet:__init(...)
  local o = core.args("DenseNet", densenet_names, densenet_names, ...)
  core.int_arg(o.num_init_features, "DenseNet", "num_init_features", 1)
  core.int_arg(o.growth_rate, "DenseNet", "growth_rate", 1)
  list_arg(o.block_config, "DenseNet", "block_config")
  local bn_size = core.int_arg(o.bn_size or 4, "DenseNet", "bn_size", 1)
  local dropout = core.num_arg(o.dropout or 0, "DenseNet", "dropout")
  local classes = classes_of(o, "DenseNet")
  local f = seq(nn.Conv2D(o.num_init_features, {kernel_size = 7, strides = 2, padding = 3, use_bias = false}),
                nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D{pool_size = 3, strides = 2, padding = 1})
  local nf = o.num_init_features
  for i, num_layers in ipairs(o.block_config) do
    local stage = HybridSequential()
    for _ = 1, num_layers do stage:add(dense_layer(o.growth_rate, bn_size, dropout)) end
    f:add(stage)
    nf = nf + num_layers * o.growth_rate
    if i ~= #o.block_config then
      f:add(transition(math.floor(nf / 2)))
      nf = math.floor(nf / 2)
    end
  end
  f:add(nn.BatchNorm(), nn.Activation("relu"), nn.AvgPool2D{pool_size = 7}, nn.Flatten())
  self.features = f
  self.output = nn.Dense(classes)
end
DenseNet.forward = ResNetV1.forward

local densenet_spec = {
  [121] = {64, 32, {6, 12, 24, 16}},
  [161] = {96, 48, {6, 12, 36, 24}},
  [169] = {64, 32, {6, 12, 32, 32}},
  [201] = {64, 32, {6, 12, 48, 32}},
}

---------------------------------------------------------------------------
-- Inception v3 (inception.py)

-- o: {channels, kernel_size, strides, padding}
local function basic_conv(o)
  return seq(nn.Conv2D(o[1], {kernel_size = o[2], strides = o[3], padding = o[4], use_bias = false}),
             nn.BatchNorm{epsilon = 0.001}, nn.Activation("relu"))
end

local function branch(use_pool, ...)
  local out = HybridSequential()
  if use_pool == "avg" then
    out:add(nn.AvgPool2D{pool_size = 3, strides = 1, padding = 1})
  elseif use_pool == "max" then
    out:add(nn.MaxPool2D{pool_size = 3, strides = 2})
  end
  for k = 1, select("#", ...) do out:add(basic_conv((select(k, ...)))) end
  return out
end

local function concurrent(...)
  local out = HybridConcurrent{axis = 1}
  return out:add(...)
end

local function make_A(pool_features)
  return concurrent(branch(nil, {64, 1}),
                    branch(nil, {48, 1}, {64, 5, nil, 2}),
                    branch(nil, {64, 1}, {96, 3, nil, 1}, {96, 3, nil, 1}),
                    branch("avg", {pool_features, 1}))
end

local function make_B()
  return concurrent(branch(nil, {384, 3, 2}),
                    branch(nil, {64, 1}, {96, 3, nil, 1}, {96, 3, 2}),
                    branch("max"))
end

local function make_C(c7)
  return concurrent(branch(nil, {192, 1}),
                    branch(nil, {c7, 1}, {c7, {1, 7}, nil, {0, 3}}, {192, {7, 1}, nil, {3, 0}}),
                    branch(nil, {c7, 1}, {c7, {7, 1}, nil, {3, 0}}, {c7, {1, 7}, nil, {0, 3}},
                           {c7, {7, 1}, nil, {3, 0}}, {192, {1, 7}, nil, {0, 3}}),
                    branch("avg", {192, 1}))
end

local function make_D()
  return concurrent(branch(nil, {192, 1}, {320, 3, 2}),
                    branch(nil, {192, 1}, {192, {1, 7}, nil, {0, 3}}, {192, {7, 1}, nil, {3, 0}}, {192, 3, 2}),
                    branch("max"))
end

local function make_E()
  local split3 = concurrent(branch(nil, {384, {1, 3}, nil, {0, 1}}), branch(nil, {384, {3, 1}, nil, {1, 0}}))
  local split3dbl = concurrent(branch(nil, {384, {1, 3}, nil, {0, 1}}), branch(nil, {384, {3, 1}, nil, {1, 0}}))
  return concurrent(branch(nil, {320, 1}),
                    seq(branch(nil, {384, 1}), split3),
                    seq(branch(nil, {448, 1}, {384, 3, nil, 1}), split3dbl),
                    branch("avg", {192, 1}))
end

local Inception3 = HybridBlock:extend("Inception3")
vision.Inception3 = Inception3
function Inception3:__init(...)
  local o = core.args("Inception3", {"classes"}, {"classes"}, ...)
  local classes = classes_of(o, "Inception3")
  self.features = seq(basic_conv{32, 3, 2}, basic_conv{32, 3}, basic_conv{64, 3, nil, 1},
                      nn.MaxPool2D{pool_size = 3, strides = 2}, basic_conv{80, 1}, basic_conv{192, 3},
                      nn.MaxPool2D{pool_size = 3, strides = 2},
                      make_A(32), make_A(64), make_A(64), make_B(),
                      make_C(128), make_C(160), make_C(160), make_C(192), make_D(), make_E(), make_E(),
                      nn.AvgPool2D{pool_size = 8}, nn.Dropout(0.5))
  self.output = nn.Dense(classes)
end
Inception3.forward = ResNetV1.forward

---------------------------------------------------------------------------
-- Constructors: the model's own keywords plus pretrained, root, ctx/device.

-- The file of a pretrained model `name` (MXNet's model-store name, e.g.
-- 'resnet18_v1', 'mobilenet1.0'): in the directory root (the keyword), else
-- $LUON_MODEL_ZOO, else MXNet's cache ($MXNET_HOME/models, default
-- ~/.mxnet/models), the first of <name>.params, <name>.safetensors and
-- MXNet's cached <name>-<hash>.params that exists. Nothing is downloaded.
local sha1 = {
  alexnet = "44335d1f", densenet121 = "f27dbf2d", densenet161 = "b6c8a957", densenet169 = "2603f878",
  densenet201 = "1cdbc116", inceptionv3 = "ed47ec45", ["mobilenet0.25"] = "9f83e440",
  ["mobilenet0.5"] = "8e9d539c", ["mobilenet0.75"] = "529b2c7f", ["mobilenet1.0"] = "6b8c5106",
  ["mobilenetv2_1.0"] = "36da4ff1", ["mobilenetv2_0.75"] = "e2be7b72", ["mobilenetv2_0.5"] = "aabd26cd",
  ["mobilenetv2_0.25"] = "ae8f9392", resnet18_v1 = "a0666292", resnet34_v1 = "48216ba9",
  resnet50_v1 = "0aee57f9", resnet101_v1 = "d988c13d", resnet152_v1 = "671c637a", resnet18_v2 = "a81db45f",
  resnet34_v2 = "9d6b80bb", resnet50_v2 = "ecdde353", resnet101_v2 = "18e93e4f", resnet152_v2 = "f2695542",
  ["squeezenet1.0"] = "264ba497", ["squeezenet1.1"] = "33ba0f93", vgg11 = "dd221b16", vgg11_bn = "ee79a809",
  vgg13 = "6bc5de58", vgg13_bn = "7d97a06c", vgg16 = "e660d456", vgg16_bn = "7f01cf05", vgg19 = "ad2f660d",
  vgg19_bn = "f360b758",
}

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

function vision.pretrained_file(name, root)
  if type(name) ~= "string" or name == "" then
    core.error(("pretrained_file: name must be a model name such as 'resnet18_v1', got %s"):format(core.show_value(name)))
  end
  local dirs, from
  if root ~= nil then
    core.path_arg(root, "model_zoo", "root")
    dirs, from = {root}, "root"
  elseif (os.getenv("LUON_MODEL_ZOO") or "") ~= "" then
    dirs, from = {os.getenv("LUON_MODEL_ZOO")}, "LUON_MODEL_ZOO"
  else
    local home = os.getenv("MXNET_HOME")
    if (home or "") == "" then home = (os.getenv("HOME") or "~") .. "/.mxnet" end
    dirs, from = {home .. "/models"}, "MXNet's cache"
  end
  local tried = {}
  for _, d in ipairs(dirs) do
    d = d:gsub("/+$", "")
    local cands = {d .. "/" .. name .. ".params", d .. "/" .. name .. ".safetensors"}
    if sha1[name] then cands[#cands + 1] = ("%s/%s-%s.params"):format(d, name, sha1[name]) end
    for _, c in ipairs(cands) do
      if exists(c) then return c end
      tried[#tried + 1] = c
    end
  end
  core.error(("%s: pretrained weights not found (looked in %s: %s); luon downloads nothing: put MXNet's "
              .. "%s.params (or a safetensors file) in a directory and name it with {root = dir} or the "
              .. "environment variable LUON_MODEL_ZOO"):format(name, from, table.concat(tried, ", "), name))
end

local zoo_keys = {"pretrained", "root", "ctx", "device"}

-- Build cls with the model keywords of kw (plus fixed ones), then load
-- the pretrained file when asked.
local function build(fname, store_name, model_keys, kw, fixed, make)
  if kw ~= nil and (type(kw) ~= "table" or core.is_array(kw) or getmetatable(kw) ~= nil) then
    core.error(("%s: expected one table of keywords such as {classes = 10}, got %s"):format(fname, core.show_value(kw)))
  end
  kw = kw or {}
  core.check_keys(kw, fname, model_keys, zoo_keys, "argument")
  local margs = {}
  for _, k in ipairs(model_keys) do margs[k] = kw[k] end
  for k, v in pairs(fixed or {}) do margs[k] = v end
  local net = make(margs)
  if kw.pretrained then
    local name = type(store_name) == "function" and store_name(margs) or store_name
    local path = vision.pretrained_file(name, kw.root)
    local dev = core.device_of(kw, fname)
    net:load_parameters(path, {device = dev})
  end
  return net
end

function vision.get_resnet(version, num_layers, kw)
  if version ~= 1 and version ~= 2 then
    core.error(("get_resnet: version must be 1 or 2, got %s"):format(core.show_value(version)))
  end
  local spec = resnet_spec[num_layers]
  if not spec then
    core.error(("get_resnet: num_layers must be 18, 34, 50, 101 or 152, got %s"):format(core.show_value(num_layers)))
  end
  local cls = version == 1 and ResNetV1 or ResNetV2
  local name = ("resnet%d_v%d"):format(num_layers, version)
  return build(name, name, {"classes", "thumbnail"}, kw,
               {block = resnet_blocks[version][spec[1]], layers = spec[2], channels = spec[3]}, cls)
end

function vision.get_vgg(num_layers, kw)
  local spec = vgg_spec[num_layers]
  if not spec then
    core.error(("get_vgg: num_layers must be 11, 13, 16 or 19, got %s"):format(core.show_value(num_layers)))
  end
  return build("vgg" .. num_layers, function(o) return ("vgg%d%s"):format(num_layers, o.batch_norm and "_bn" or "") end,
               {"classes", "batch_norm"}, kw, {layers = spec[1], filters = spec[2]}, VGG)
end

-- MXNet's suffix of a multiplier: '{:.2f}', '1.00' and '0.50' shortened.
local function mult_suffix(m)
  local s = ("%.2f"):format(m)
  if s == "1.00" or s == "0.50" then s = s:sub(1, -2) end
  return s
end

local function check_multiplier(m, fname)
  if type(m) ~= "number" or not (m > 0) then
    core.error(("%s: multiplier must be a number > 0, got %s"):format(fname, core.show_value(m)))
  end
end

function vision.get_mobilenet(multiplier, kw)
  check_multiplier(multiplier, "get_mobilenet")
  return build("get_mobilenet", "mobilenet" .. mult_suffix(multiplier), {"classes"}, kw,
               {multiplier = multiplier}, MobileNet)
end

function vision.get_mobilenet_v2(multiplier, kw)
  check_multiplier(multiplier, "get_mobilenet_v2")
  return build("get_mobilenet_v2", "mobilenetv2_" .. mult_suffix(multiplier), {"classes"}, kw,
               {multiplier = multiplier}, MobileNetV2)
end

function vision.get_squeezenet(version, kw)
  if version ~= "1.0" and version ~= "1.1" then
    core.error(("get_squeezenet: version must be '1.0' or '1.1', got %s"):format(core.show_value(version)))
  end
  return build("squeezenet" .. version, "squeezenet" .. version, {"classes"}, kw, {version = version}, SqueezeNet)
end

function vision.get_densenet(num_layers, kw)
  local spec = densenet_spec[num_layers]
  if not spec then
    core.error(("get_densenet: num_layers must be 121, 161, 169 or 201, got %s"):format(core.show_value(num_layers)))
  end
  return build("densenet" .. num_layers, "densenet" .. num_layers, {"classes", "bn_size", "dropout"}, kw,
               {num_init_features = spec[1], growth_rate = spec[2], block_config = spec[3]}, DenseNet)
end

function vision.alexnet(kw) return build("alexnet", "alexnet", {"classes"}, kw, nil, AlexNet) end
function vision.inception_v3(kw) return build("inception_v3", "inceptionv3", {"classes"}, kw, nil, Inception3) end

-- The named constructors and get_model's names (MXNet's).
local models = {}
for _, v in ipairs({1, 2}) do
  for _, n in ipairs({18, 34, 50, 101, 152}) do
    local name = ("resnet%d_v%d"):format(n, v)
    vision[name] = function(kw) return vision.get_resnet(v, n, kw) end
    models[name] = vision[name]
  end
end
for _, n in ipairs({11, 13, 16, 19}) do
  vision["vgg" .. n] = function(kw) return vision.get_vgg(n, kw) end
  vision["vgg" .. n .. "_bn"] = function(kw)
    if type(kw) ~= "table" then return vision.get_vgg(n, kw == nil and {batch_norm = true} or kw) end
    if kw.batch_norm ~= nil then
      core.error(("vgg%d_bn: batch_norm is set by the name (use vgg%d for none)"):format(n, n))
    end
    local k2 = {}
    for key, val in pairs(kw) do k2[key] = val end
    k2.batch_norm = true
    return vision.get_vgg(n, k2)
  end
  models["vgg" .. n], models["vgg" .. n .. "_bn"] = vision["vgg" .. n], vision["vgg" .. n .. "_bn"]
end
for _, m in ipairs({{"1_0", 1.0, "1.0"}, {"0_75", 0.75, "0.75"}, {"0_5", 0.5, "0.5"}, {"0_25", 0.25, "0.25"}}) do
  vision["mobilenet" .. m[1]] = function(kw) return vision.get_mobilenet(m[2], kw) end
  vision["mobilenet_v2_" .. m[1]] = function(kw) return vision.get_mobilenet_v2(m[2], kw) end
  models["mobilenet" .. m[3]] = vision["mobilenet" .. m[1]]
  models["mobilenetv2_" .. m[3]] = vision["mobilenet_v2_" .. m[1]]
end
for _, n in ipairs({121, 161, 169, 201}) do
  vision["densenet" .. n] = function(kw) return vision.get_densenet(n, kw) end
  models["densenet" .. n] = vision["densenet" .. n]
end
vision.squeezenet1_0 = function(kw) return vision.get_squeezenet("1.0", kw) end
vision.squeezenet1_1 = function(kw) return vision.get_squeezenet("1.1", kw) end
models["squeezenet1.0"], models["squeezenet1.1"] = vision.squeezenet1_0, vision.squeezenet1_1
models.alexnet, models.inceptionv3 = vision.alexnet, vision.inception_v3

-- get_model(name, kw): MXNet's names ('resnet18_v1', 'mobilenet1.0',
-- 'mobilenetv2_0.25', 'squeezenet1.1', 'inceptionv3', ...), any case.
function vision.get_model(name, kw)
  if type(name) ~= "string" then
    core.error(("get_model: name must be a string, got %s"):format(core.show_value(name)))
  end
  local make = models[name:lower()]
  if not make then
    local names = {}
    for n in pairs(models) do names[#names + 1] = n end
    table.sort(names)
    core.error(("get_model: model %s is not supported; the models are: %s%s")
               :format(core.show_value(name), table.concat(names, ", "), core.did_you_mean(name:lower(), names)))
  end
  return make(kw)
end

-- The names get_model knows, sorted.
function vision.model_names()
  local names = {}
  for n in pairs(models) do names[#names + 1] = n end
  table.sort(names)
  return names
end

return core.strict_module(vision, "gluon.model_zoo.vision")
