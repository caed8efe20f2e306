-- luon.gluon.nn.activations: Activation(activation), LeakyReLU(alpha),
-- PReLU, ELU, SELU, GELU, Swish, SiLU, and the optional activation child
-- of Dense and Conv2D.
local core = require("luon.core")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local initializer = require("luon.initializer")
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

-- PReLU{alpha_initializer=Constant(0.25), in_channels=1}: x > 0 ? x :
-- alpha * x with a learned alpha (in_channels,): one slope, or one per
-- channel of axis 1.
local PReLU = HybridBlock:extend("PReLU")
nn.PReLU = PReLU
function PReLU:__init(...)
  local o = opts("PReLU", {"alpha_initializer", "in_channels"}, ...)
  local c = o.in_channels == nil and 1 or core.int_arg(o.in_channels, "PReLU", "in_channels", 1)
  self.alpha = param.new("alpha", {shape = {c}, init = o.alpha_initializer or initializer.Constant(0.25)})
end
function PReLU:forward(x) return npx.leaky_relu(x, self.alpha:data(util.device_of(x)), {act_type = "prelu"}) end

-- ELU{alpha=1.0}: x > 0 ? x : alpha * (exp(x) - 1)
local ELU = HybridBlock:extend("ELU")
nn.ELU = ELU
function ELU:__init(...)
  local o = opts("ELU", {"alpha"}, ...)
  self._kw = {act_type = "elu", slope = o.alpha == nil and 1.0 or core.num_arg(o.alpha, "ELU", "alpha")}
end
function ELU:forward(x) return npx.leaky_relu(x, self._kw) end

-- SELU: lambda * (x > 0 ? x : alpha * (exp(x) - 1)), MXNet's constants;
-- GELU: x * Phi(x) in its exact erf form (MXNet 1.9.1 has no tanh
-- approximation).
local function fixed_leaky(name, act)
  local cls = HybridBlock:extend(name)
  nn[name] = cls
  local kw = {act_type = act}
  function cls:__init(...) opts(name, {}, ...) end
  function cls:forward(x) return npx.leaky_relu(x, kw) end
end
fixed_leaky("SELU", "selu")
fixed_leaky("GELU", "gelu")

-- Swish{beta=1.0}: x * sigmoid(beta * x); SiLU (MXNet 2's): x * sigmoid(x)
local Swish = HybridBlock:extend("Swish")
nn.Swish = Swish
function Swish:__init(...)
  local o = opts("Swish", {"beta"}, ...)
  self._beta = o.beta == nil and 1.0 or core.num_arg(o.beta, "Swish", "beta")
end
function Swish:forward(x) return x * npx.sigmoid(self._beta * x) end

local SiLU = HybridBlock:extend("SiLU")
nn.SiLU = SiLU
function SiLU:__init(...) opts("SiLU", {}, ...) end
function SiLU:forward(x) return x * npx.sigmoid(x) end

-- The optional activation child of Dense and Conv2D (registered as 'act';
-- assigned nil when there is none, so that self.act reads nil as in MXNet).
function nn.maybe_act(self, activation)
  self.act = activation ~= nil and Activation(activation) or nil
end

---------------------------------------------------------------------------
-- Dense(units, {activation, use_bias=true, flatten=true, dtype='float32',

return nn
