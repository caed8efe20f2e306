-- luon.gluon.nn: Gluon's layers and the containers, with MXNet's
-- arguments, defaults and reprs. Each layer's forward is a few npx calls;
-- unknown input sizes are inferred at the first call (deferred init).
-- Arguments: positional in MXNet's order, then one keyword table:
-- nn.Dense(10, {activation = "relu"}), or all keywords: nn.Dense{units = 10}.
-- The layers live in files cut as MXNet cuts them (activations,
-- basic_layers, conv_layers); this module gathers them.
local core = require("luon.core")
local block = require("luon.gluon.block")

local nn = {
  Block = block.Block, HybridBlock = block.HybridBlock,
  Sequential = block.Sequential, HybridSequential = block.HybridSequential,
}
for _, file in ipairs({"activations", "basic_layers", "conv_layers"}) do
  for name, v in pairs(require("luon.gluon.nn." .. file)) do
    if name:match("^%u") then
      assert(nn[name] == nil, name)
      nn[name] = v
    end
  end
end

return core.strict_module(nn, "gluon.nn")
