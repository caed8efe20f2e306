-- leafnet.lua: the tutorial's LeafNetwork, the one definition of it:
-- examples/tutorial.lua, scripts/leaf_train.lua, the benchmarks and the
-- specs load it with dofile(), which returns the class. Three convolution
-- blocks (conv 2x2 + relu, max-pool 4 stride 2, BatchNorm), then dense
-- layers of 100 and 10 units (relu, dropout 0.2) and 2 outputs.
local nn = require("luon").gluon.nn

local function conv_block(filters, kernel_size, stride, batch_norm)
  kernel_size, stride = kernel_size or 2, stride or 2
  if batch_norm == nil then batch_norm = true end
  local block = nn.HybridSequential()
  block:add(nn.Conv2D{channels = filters, kernel_size = kernel_size, activation = "relu"},
            nn.MaxPool2D{pool_size = 4, strides = stride})
  if batch_norm then block:add(nn.BatchNorm()) end
  return block
end

local function dense_block(neurons, activation, dropout)
  activation, dropout = activation or "relu", dropout == nil and 0.2 or dropout
  local block = nn.HybridSequential()
  block:add(nn.Dense(neurons, {activation = activation}))
  if dropout and dropout > 0 then block:add(nn.Dropout(dropout)) end
  return block
end

local LeafNetwork = nn.HybridBlock:extend("LeafNetwork")
-- one assignment a child: children register in assignment order, and
-- LuaJIT carries out a multiple assignment right to left
function LeafNetwork:__init()
  self.conv1 = conv_block(32)
  self.conv2 = conv_block(64)
  self.conv3 = conv_block(128)
  self.flatten = nn.Flatten()
  self.dense1 = dense_block(100)
  self.dense2 = dense_block(10)
  self.dense3 = nn.Dense(2)
end
function LeafNetwork:forward(batch)
  batch = self.conv1(batch)
  batch = self.conv2(batch)
  batch = self.conv3(batch)
  batch = self.flatten(batch)
  batch = self.dense1(batch)
  batch = self.dense2(batch)
  return self.dense3(batch)
end

return LeafNetwork
