-- luon.gluon: MXNet Gluon's namespace. nn, Parameter and the Block classes
-- load with it; loss, metric, data, utils, Trainer and optimizer load on
-- first use (each is its own module under luon.gluon).
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")

local gluon = {
  nn = require("luon.gluon.nn"),
  Parameter = param.Parameter,
  Block = block.Block,
  HybridBlock = block.HybridBlock,
  ParameterDict = param.dict,
}

-- name -> module, and the field of that module to take (nil: the module).
local lazy = {
  loss = {"luon.gluon.loss"},
  metric = {"luon.gluon.metric"},
  data = {"luon.gluon.data"},
  utils = {"luon.gluon.utils"},
  optimizer = {"luon.gluon.optimizer"},
  Trainer = {"luon.gluon.trainer", "Trainer"},
}

return setmetatable(gluon, {__index = function(t, k)
  local spec = lazy[k]
  if not spec then return nil end
  local mod = require(spec[1])
  local v = mod
  if spec[2] and type(mod) == "table" and getmetatable(mod) == nil and mod[spec[2]] ~= nil then
    v = mod[spec[2]]
  end
  rawset(t, k, v)
  return v
end})
