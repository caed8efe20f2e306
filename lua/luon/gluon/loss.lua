-- luon.gluon.loss: Gluon's losses, written with registry ops so autograd
-- differentiates them. A loss object is called as loss(pred, label,
-- sample_weight) and returns one value per sample, shape (batch,): the mean
-- over every axis but batch_axis. Not here: reductions over the batch
-- (Trainer.step divides by the batch size).
local core = require("luon.core")
local np = require("luon.np")
local npx = require("luon.npx")

local op = core.op_ids
local is_array = core.is_array
local class, parse_args = core.class, core.args

local loss = {}

---------------------------------------------------------------------------
-- Building blocks

local function log_softmax(x, axis) return npx.log_softmax(x, {axis = axis}) end
local function softmax(x, axis) return npx.softmax(x, {axis = axis}) end

-- x[..., index, ...] along axis; out-of-range indices are clipped (MXNet's
-- pick mode 'clip'); keepdims keeps the axis as size 1.
local function pick(x, index, axis, keepdims)
  return npx.pick(x, index, {axis = axis, keepdims = keepdims})
end

local function relu(x) return core.call1(op.relu, x) end
local function softrelu(x) return core.call1(op.softrelu, x) end

local shape_text = core.shape_text

local same_shape = core.same_shape

-- label reshaped to pred's shape (Gluon's _reshape_like); the sizes must agree.
local function reshape_like(label, pred, name)
  local ls, ps = label.shape, pred.shape
  if same_shape(ls, ps) then return label end
  if label.size ~= pred.size then
    core.error(("%s: label of shape %s cannot be reshaped to the prediction's shape %s")
               :format(name, shape_text(ls), shape_text(ps)))
  end
  return np.reshape(label, ps)
end

-- loss * sample_weight (broadcast), then * weight (a number).
local function apply_weighting(l, weight, sample_weight)
  if sample_weight ~= nil then l = np.multiply(l, sample_weight) end
  if weight ~= nil then l = np.multiply(l, weight) end
  return l
end

-- The mean over every axis but batch_axis: shape (batch,).
local function batch_mean(l, batch_axis, name)
  local shape = l.shape
  local nd = #shape
  local ax = batch_axis < 0 and batch_axis + nd or batch_axis
  if ax < 0 or ax >= nd then
    core.error(("%s: batch_axis %d is out of bounds for a loss of shape %s")
               :format(name, batch_axis, shape_text(shape)))
  end
  if nd == 1 then return l end
  local axes, rest = {}, 1
  for d = 0, nd - 1 do
    if d ~= ax then
      axes[#axes + 1] = d
      rest = rest * shape[d + 1]
    end
  end
  if rest == 1 then return np.reshape(l, {shape[ax + 1]}) end
  return np.mean(l, axes)
end

local function check_inputs(name, pred, label)
  if not is_array(pred) then core.error(("%s: pred must be an ndarray, got %s"):format(name, type(pred))) end
  if not is_array(label) then core.error(("%s: label must be an ndarray, got %s"):format(name, type(label))) end
end

---------------------------------------------------------------------------
-- A boolean option (nil: its default); 1 or 'no' are errors, not guesses.
local function flag(a, key, default, name)
  local v = a[key]
  if v == nil then return default end
  if type(v) ~= "boolean" then
    core.error(("%s: %s must be true or false, got %s"):format(name, key, core.show_value(v)))
  end
  return v
end

-- Loss base: weight (a number or nil) and batch_axis.

local Loss = class("Loss")
loss.Loss = Loss

function Loss:__init(weight, batch_axis)
  local name = getmetatable(self).__name
  if weight ~= nil and type(weight) ~= "number" then
    core.error(("%s: weight must be a number, got %s"):format(name, type(weight)))
  end
  if type(batch_axis) ~= "number" or batch_axis % 1 ~= 0 or batch_axis >= 2^31 or batch_axis <= -2^31 then
    core.error(("%s: batch_axis must be an integer, got %s"):format(name, tostring(batch_axis)))
  end
  self._weight, self._batch_axis = weight, batch_axis
end

function Loss:__call(...) return self:forward(...) end

-- Gluon's losses are HybridBlocks; here they are plain callables, so
-- hybridize() has nothing to compile and only keeps scripts working.
function Loss:hybridize() end

function Loss:__tostring()
  return ("%s(batch_axis=%d, w=%s)"):format(getmetatable(self).__name, self._batch_axis,
                                            self._weight == nil and "None" or tostring(self._weight))
end

---------------------------------------------------------------------------
-- SoftmaxCrossEntropyLoss{axis = -1, sparse_label = true, from_logits = false,
-- weight, batch_axis = 0}:
--   sparse: -pick(log_softmax(pred, axis), label, axis); dense: -sum(log_softmax(pred) * label, axis)

local SoftmaxCrossEntropyLoss = class("SoftmaxCrossEntropyLoss", Loss)
loss.SoftmaxCrossEntropyLoss = SoftmaxCrossEntropyLoss
loss.SoftmaxCELoss = SoftmaxCrossEntropyLoss

local sce_names = {"axis", "sparse_label", "from_logits", "weight", "batch_axis"}
local sce_known = {axis = true, sparse_label = true, from_logits = true, weight = true, batch_axis = true}

function SoftmaxCrossEntropyLoss:__init(...)
  local a = parse_args("SoftmaxCrossEntropyLoss", sce_names, sce_known, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
  self._axis = core.int_arg(a.axis or -1, "SoftmaxCrossEntropyLoss", "axis")
  self._sparse_label = flag(a, "sparse_label", true, "SoftmaxCrossEntropyLoss")
  self._from_logits = flag(a, "from_logits", false, "SoftmaxCrossEntropyLoss")
end

function SoftmaxCrossEntropyLoss:forward(pred, label, sample_weight)
  local name = "SoftmaxCrossEntropyLoss"
  check_inputs(name, pred, label)
  if not self._from_logits then pred = log_softmax(pred, self._axis) end
  local l
  if self._sparse_label then
    l = np.negative(pick(pred, label, self._axis, true))
  else
    label = reshape_like(label, pred, name)
    l = np.negative(np.sum(np.multiply(pred, label), self._axis, {keepdims = true}))
  end
  l = apply_weighting(l, self._weight, sample_weight)
  return batch_mean(l, self._batch_axis, name)
end

---------------------------------------------------------------------------
-- L2Loss{weight = 1, batch_axis = 0}: weight/2 * (pred - label)^2

local L2Loss = class("L2Loss", Loss)
loss.L2Loss = L2Loss
local wb_names = {"weight", "batch_axis"}
local wb_known = {weight = true, batch_axis = true}

function L2Loss:__init(...)
  local a = parse_args("L2Loss", wb_names, wb_known, ...)
  Loss.__init(self, a.weight or 1.0, a.batch_axis or 0)
end

function L2Loss:forward(pred, label, sample_weight)
  check_inputs("L2Loss", pred, label)
  label = reshape_like(label, pred, "L2Loss")
  local l = np.square(np.subtract(label, pred))
  l = apply_weighting(l, self._weight / 2, sample_weight)
  return batch_mean(l, self._batch_axis, "L2Loss")
end

---------------------------------------------------------------------------
-- L1Loss{weight, batch_axis = 0}: |pred - label|

local L1Loss = class("L1Loss", Loss)
loss.L1Loss = L1Loss

function L1Loss:__init(...)
  local a = parse_args("L1Loss", wb_names, wb_known, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
end

function L1Loss:forward(pred, label, sample_weight)
  check_inputs("L1Loss", pred, label)
  label = reshape_like(label, pred, "L1Loss")
  local l = np.abs(np.subtract(label, pred))
  l = apply_weighting(l, self._weight, sample_weight)
  return batch_mean(l, self._batch_axis, "L1Loss")
end

---------------------------------------------------------------------------
-- SigmoidBinaryCrossEntropyLoss{from_sigmoid = false, weight, batch_axis = 0}
-- logits (stable): max(x, 0) - x*z + log(1 + exp(-|x|))
--   with pos_weight: x - x*z + (1 + (pos_weight - 1) z) (log(1 + exp(-|x|)) + max(-x, 0))
-- probabilities: -(log(p + eps) z + log(1 - p + eps) (1 - z)), eps = 1e-12
--   with pos_weight: the first term times pos_weight

local SigmoidBinaryCrossEntropyLoss = class("SigmoidBinaryCrossEntropyLoss", Loss)
loss.SigmoidBinaryCrossEntropyLoss = SigmoidBinaryCrossEntropyLoss
loss.SigmoidBCELoss = SigmoidBinaryCrossEntropyLoss

function SigmoidBinaryCrossEntropyLoss:__init(...)
  local a = parse_args("SigmoidBinaryCrossEntropyLoss", {"from_sigmoid", "weight", "batch_axis"},
                       {from_sigmoid = true, weight = true, batch_axis = true}, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
  self._from_sigmoid = flag(a, "from_sigmoid", false, "SigmoidBinaryCrossEntropyLoss")
end

function SigmoidBinaryCrossEntropyLoss:forward(pred, label, sample_weight, pos_weight)
  local name = "SigmoidBinaryCrossEntropyLoss"
  check_inputs(name, pred, label)
  label = reshape_like(label, pred, name)
  local l
  if not self._from_sigmoid then
    local soft = softrelu(np.negative(np.abs(pred)))
    if pos_weight == nil then
      l = np.add(np.subtract(relu(pred), np.multiply(pred, label)), soft)
    else
      local log_weight = np.add(np.multiply(np.subtract(pos_weight, 1), label), 1)
      l = np.add(np.subtract(pred, np.multiply(pred, label)),
                 np.multiply(log_weight, np.add(soft, relu(np.negative(pred)))))
    end
  else
    local eps = 1e-12
    local pos = np.multiply(np.log(np.add(pred, eps)), label)
    if pos_weight ~= nil then pos = np.multiply(pos, pos_weight) end
    local neg = np.multiply(np.log(np.add(np.subtract(1, pred), eps)), np.subtract(1, label))
    l = np.negative(np.add(pos, neg))
  end
  l = apply_weighting(l, self._weight, sample_weight)
  return batch_mean(l, self._batch_axis, name)
end

return core.strict_module(loss, "gluon.loss")
