-- luon.gluon: MXNet Gluon's namespace. nn, Parameter and the Block classes
-- load with it; rnn, loss, metric, data, utils, Trainer and optimizer load on
-- first use (each is its own module under luon.gluon), and so does
-- model_zoo (model_zoo.vision: MXNet's image classifiers) and contrib
-- (contrib.nn: MXNet 1.x's names for Concurrent, Identity, SyncBatchNorm).
local core = require("luon.core")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")

local gluon = {
  nn = require("luon.gluon.nn"),
  Parameter = param.Parameter,
  Block = block.Block,
  HybridBlock = block.HybridBlock,
  ParameterDict = param.dict,
}

-- Loaded on first use; an unknown name is an error naming the close ones.
local function module(name) return function() return require(name) end end
return core.strict_module(gluon, "gluon", {
  rnn = module("luon.gluon.rnn"),
  loss = module("luon.gluon.loss"),
  metric = module("luon.gluon.metric"),
  data = module("luon.gluon.data"),
  utils = module("luon.gluon.utils"),
  optimizer = module("luon.gluon.optimizer"),
  model_zoo = module("luon.gluon.model_zoo"),
  contrib = module("luon.gluon.contrib"),
  Trainer = function() return require("luon.gluon.trainer").Trainer end,
  SymbolBlock = function() return require("luon.gluon.symbol_block") end,
})
