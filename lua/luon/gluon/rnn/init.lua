-- luon.gluon.rnn: MXNet Gluon's recurrent layers and cells with MXNet
-- 1.9.1's arguments, defaults and parameter names. The layers (RNN, LSTM,
-- GRU: rnn_layer.lua) run the fused rnn op; the cells (rnn_cell.lua) run
-- a step per call and unroll over a sequence. This module gathers them.
local core = require("luon.core")

local rnn = {}
for _, file in ipairs({"rnn_layer", "rnn_cell"}) do
  for name, v in pairs(require("luon.gluon.rnn." .. file)) do
    if name:match("^%u") then
      assert(rnn[name] == nil, name)
      rnn[name] = v
    end
  end
end

return core.strict_module(rnn, "gluon.rnn")
