-- luon.gluon.nn.activations: Activation(activation), LeakyReLU(alpha), and
-- the optional activation child of Dense and Conv2D.
local core = require("luon.core")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local util = require("luon.gluon.nn.util")

local HybridBlock = block.HybridBlock
local opts, pyrepr = util.opts, util.pyrepr

local nn = {}

---------------------------------------------------------------------------
-- Activation(activation), LeakyReLU(alpha)

local acts = {relu = true, sigmoid = true, tanh = true, softrelu = true, softsign = true}

local Activation = HybridBlock:extend("Activation")
nn.Activation = Activation
function Activation:__init(...)
  local o = opts("Activation", {"activation"}, ...)
  if not acts[o.activation] then
    core.error(("Activation: activation must be 'relu', 'sigmoid', 'tanh', 'softrelu' or 'softsign', got %s")
               :format(tostring(o.activation)))
  end
  self._act_type = o.activation
  self._kw = {act_type = o.activation}
end
function Activation:forward(x) return npx.activation(x, self._kw) end
function Activation:__tostring() return ("Activation(%s)"):format(self._act_type) end

local LeakyReLU = HybridBlock:extend("LeakyReLU")
nn.LeakyReLU = LeakyReLU
function LeakyReLU:__init(...)
  local o = opts("LeakyReLU", {"alpha"}, ...)
  if type(o.alpha) ~= "number" or o.alpha < 0 then
    core.error(("LeakyReLU: the slope alpha must be a number >= 0, got %s"):format(tostring(o.alpha)))
  end
  self._alpha = o.alpha
  self._kw = {act_type = "leaky", slope = o.alpha}
end
function LeakyReLU:forward(x) return npx.leaky_relu(x, self._kw) end
function LeakyReLU:__tostring() return ("LeakyReLU(%s)"):format(pyrepr(self._alpha)) end

-- The optional activation child of Dense and Conv2D (registered as 'act';
-- assigned nil when there is none, so that self.act reads nil as in MXNet).
function nn.maybe_act(self, activation)
  self.act = activation ~= nil and Activation(activation) or nil
end

---------------------------------------------------------------------------
-- Dense(units, {activation, use_bias=true, flatten=true, dtype='float32',

return nn
