-- The tutorial's LeafNetwork (spec/tutorial.lua, section 7) for the
-- benchmarks and tests/lua/gluon_block_spec.lua: dofile() returns the class.
-- scripts/leaf_train.lua keeps its own copy on purpose: it is the tutorial
-- written out as a program.
local nn = require("luon").gluon.nn

local function conv_block(filters)
  local block = nn.HybridSequential()
  block:add(nn.Conv2D{channels = filters, kernel_size = 2, activation = "relu"},
            nn.MaxPool2D{pool_size = 4, strides = 2}, nn.BatchNorm())
  return block
end

local function dense_block(neurons)
  local block = nn.HybridSequential()
  block:add(nn.Dense(neurons, {activation = "relu"}), nn.Dropout(0.2))
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
function LeafNetwork:forward(x)
  x = self.conv3(self.conv2(self.conv1(x)))
  return self.dense3(self.dense2(self.dense1(self.flatten(x))))
end

return LeafNetwork
