-- luon.gluon.loss: Gluon's losses, written with registry ops so autograd
-- differentiates them. A loss object is called as loss(pred, label,
-- sample_weight) and returns one value per sample, shape (batch,): the mean
-- over every axis but batch_axis (as MXNet: KLDivLoss and TripletLoss sum,
-- CosineEmbeddingLoss gives (batch, 1), PoissonNLLLoss one 0-d mean). Not
-- here: reductions over the batch (Trainer.step divides by the batch size).
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

-- label reshaped to pred's shape (Gluon's _reshape_like); the sizes must
-- agree. what, like: the two arguments' names for the error ("label",
-- "the prediction's" unless given).
local function reshape_like(label, pred, name, what, like)
  local ls, ps = label.shape, pred.shape
  if same_shape(ls, ps) then return label end
  if label.size ~= pred.size then
    core.error(("%s: %s of shape %s cannot be reshaped to %s shape %s")
               :format(name, what or "label", shape_text(ls), like or "the prediction's", shape_text(ps)))
  end
  return np.reshape(label, ps)
end

-- loss * sample_weight (broadcast), then * weight (a number); name: the
-- loss's class, for the error when sample_weight does not broadcast.
local function apply_weighting(l, weight, sample_weight, name)
  if sample_weight ~= nil then
    if not core.broadcastable(l.shape, sample_weight.shape) then
      core.error(("%s: sample_weight of shape %s does not broadcast to the loss's shape %s")
                 :format(name, shape_text(sample_weight.shape), shape_text(l.shape)))
    end
    l = np.multiply(l, sample_weight)
  end
  if weight ~= nil then l = np.multiply(l, weight) end
  return l
end

-- The mean (or with reduce = np.sum, the sum) over every axis but
-- batch_axis: shape (batch,).
local function batch_mean(l, batch_axis, name, reduce)
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
  return (reduce or np.mean)(l, axes)
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

-- Loss(weight, batch_axis): batch_axis 0 when nil (a subclass without its
-- own __init takes these two).
function Loss:__init(weight, batch_axis)
  local name = getmetatable(self).__name
  if batch_axis == nil then batch_axis = 0 end
  if weight ~= nil and type(weight) ~= "number" then
    core.error(("%s: weight must be a number, got %s"):format(name, type(weight)))
  end
  if type(batch_axis) ~= "number" or batch_axis % 1 ~= 0 or batch_axis >= 2^31 or batch_axis <= -2^31 then
    core.error(("%s: batch_axis must be an integer, got %s"):format(name, tostring(batch_axis)))
  end
  self._weight, self._batch_axis = weight, batch_axis
end

function Loss:__call(...) return self:forward(...) end

-- The F of a hybrid_forward(F, ...): F.np and F.npx. MXNet 1.x's legacy
-- names (F.mean, F.pick) differ from np's in places, so they are errors.
local F = setmetatable({np = np, npx = npx}, {__index = function(_, k)
  core.error(("F.%s: luon's F holds F.np and F.npx only; write F.np.%s or F.npx.%s")
             :format(tostring(k), tostring(k), tostring(k)))
end})

-- A subclass (Loss:extend) writes forward(pred, label, ...) or, as MXNet
-- 1.x's, hybrid_forward(F, pred, label, ...).
function Loss:forward(...)
  return self:hybrid_forward(F, ...)
end
Loss._required = {{"forward", "hybrid_forward",
  text = "forward(pred, label, ...) or hybrid_forward(F, pred, label, ...)"}}

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
  l = apply_weighting(l, self._weight, sample_weight, self.__name)
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
  l = apply_weighting(l, self._weight / 2, sample_weight, self.__name)
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
  l = apply_weighting(l, self._weight, sample_weight, self.__name)
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
  if pos_weight ~= nil and not (is_array(pos_weight) and core.broadcastable(pred.shape, pos_weight.shape)) then
    core.error(("%s: pos_weight must be an ndarray that broadcasts to the prediction's shape %s, got %s")
               :format(name, shape_text(pred.shape), is_array(pos_weight) and "shape " .. shape_text(pos_weight.shape)
                       or core.show_value(pos_weight)))
  end
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
  l = apply_weighting(l, self._weight, sample_weight, self.__name)
  return batch_mean(l, self._batch_axis, name)
end

---------------------------------------------------------------------------
-- A number option (nil: its default); NaN and non-numbers are errors.
local function number_opt(a, key, default, name)
  local v = a[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v then
    core.error(("%s: %s must be a number, got %s"):format(name, key, core.show_value(v)))
  end
  return v
end

local function check_sample_weight(name, sample_weight)
  if sample_weight ~= nil and not is_array(sample_weight) then
    core.error(("%s: sample_weight must be an ndarray or nil, got %s"):format(name, type(sample_weight)))
  end
end

-- The losses of the form f(pred, label) averaged over the non-batch axes,
-- label reshaped like pred: HuberLoss, HingeLoss, SquaredHingeLoss,
-- LogisticLoss: the class name, its positional argument names, its
-- options with their defaults (numbers checked), and f(self, pred, label);
-- a class may add _check(self) for its options' ranges.
local function elementwise_loss(name, names, defaults, f)
  local cls = class(name, Loss)
  loss[name] = cls
  local known = {}
  for _, k in ipairs(names) do known[k] = true end
  function cls:__init(...)
    local a = parse_args(name, names, known, ...)
    Loss.__init(self, a.weight, a.batch_axis or 0)
    for k, d in pairs(defaults) do
      if type(d) == "number" then self["_" .. k] = number_opt(a, k, d, name) else self["_" .. k] = a[k] or d end
    end
    if self._check then self:_check() end
  end
  function cls:forward(pred, label, sample_weight)
    check_inputs(name, pred, label)
    check_sample_weight(name, sample_weight)
    label = reshape_like(label, pred, name)
    local l = apply_weighting(f(self, pred, label), self._weight, sample_weight, self.__name)
    return batch_mean(l, self._batch_axis, name)
  end
  return cls
end

---------------------------------------------------------------------------
-- HuberLoss{rho = 1, weight, batch_axis = 0}:
--   |d| - rho/2 where |d| > rho, else d^2 / (2 rho); d = label - pred

elementwise_loss("HuberLoss", {"rho", "weight", "batch_axis"}, {rho = 1}, function(self, pred, label)
  local d = np.abs(np.subtract(label, pred))
  return np.where(np.greater(d, self._rho), np.subtract(d, 0.5 * self._rho),
                  np.multiply(np.square(d), 0.5 / self._rho))
end)
function loss.HuberLoss:_check()
  if self._rho <= 0 then
    core.error(("HuberLoss: rho must be > 0, got %s"):format(core.show_value(self._rho)))
  end
end

-- HingeLoss{margin = 1, weight, batch_axis = 0}: max(0, margin - pred * label)
elementwise_loss("HingeLoss", {"margin", "weight", "batch_axis"}, {margin = 1}, function(self, pred, label)
  return relu(np.subtract(self._margin, np.multiply(pred, label)))
end)

-- SquaredHingeLoss{margin = 1, weight, batch_axis = 0}: max(0, margin - pred * label)^2
elementwise_loss("SquaredHingeLoss", {"margin", "weight", "batch_axis"}, {margin = 1}, function(self, pred, label)
  return np.square(relu(np.subtract(self._margin, np.multiply(pred, label))))
end)

-- LogisticLoss{weight, batch_axis = 0, label_format = 'signed'}: the
-- sigmoid cross-entropy of logits, labels in {-1, 1} ('signed', mapped to
-- {0, 1}) or {0, 1} ('binary'):
--   max(x, 0) - x z + log(1 + exp(-|x|))
elementwise_loss("LogisticLoss", {"weight", "batch_axis", "label_format"}, {label_format = "signed"},
                 function(self, pred, label)
  if self._label_format == "signed" then label = np.divide(np.add(label, 1), 2) end
  return np.add(np.subtract(relu(pred), np.multiply(pred, label)), softrelu(np.negative(np.abs(pred))))
end)
function loss.LogisticLoss:_check()
  local f = self._label_format
  if f ~= "signed" and f ~= "binary" then
    core.error(("LogisticLoss: label_format must be 'signed' or 'binary', got %s"):format(core.show_value(f)))
  end
end

---------------------------------------------------------------------------
-- KLDivLoss{from_logits = true, axis = -1, weight, batch_axis = 0}:
--   label * (log(label + 1e-12) - pred), pred log-probabilities (log_softmax
--   over axis of pred unless from_logits), summed (as MXNet 1.9.1 does, not
--   averaged) over the non-batch axes

local KLDivLoss = class("KLDivLoss", Loss)
loss.KLDivLoss = KLDivLoss

function KLDivLoss:__init(...)
  local a = parse_args("KLDivLoss", {"from_logits", "axis", "weight", "batch_axis"},
                       {from_logits = true, axis = true, weight = true, batch_axis = true}, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
  self._from_logits = flag(a, "from_logits", true, "KLDivLoss")
  self._axis = core.int_arg(a.axis or -1, "KLDivLoss", "axis")
end

function KLDivLoss:forward(pred, label, sample_weight)
  local name = "KLDivLoss"
  check_inputs(name, pred, label)
  check_sample_weight(name, sample_weight)
  for _, a in ipairs({{"pred", pred}, {"label", label}}) do
    local dt = a[2].dtype
    if dt ~= "float32" and dt ~= "float64" then
      core.error(("%s: %s is %s %s; it takes float32 or float64"):format(name, a[1], dt, shape_text(a[2].shape)))
    end
  end
  if not same_shape(pred.shape, label.shape) then
    core.error(("%s: label of shape %s does not match the prediction's shape %s")
               :format(name, shape_text(label.shape), shape_text(pred.shape)))
  end
  if not self._from_logits then pred = log_softmax(pred, self._axis) end
  local l = np.multiply(label, np.subtract(np.log(np.add(label, 1e-12)), pred))
  l = apply_weighting(l, self._weight, sample_weight, self.__name)
  return batch_mean(l, self._batch_axis, name, np.sum)
end

---------------------------------------------------------------------------
-- CosineEmbeddingLoss{weight, batch_axis = 0, margin = 0}, called as
-- loss(input1, input2, label, sample_weight) with label (N,) of 1 or -1:
--   1 - cos(x1, x2) where label is 1, max(0, cos(x1, x2) - margin) where -1,
--   cos over the last axis with the norms' product clipped below at 1e-12.
--   Returns shape (N, 1), as MXNet does.

local CosineEmbeddingLoss = class("CosineEmbeddingLoss", Loss)
loss.CosineEmbeddingLoss = CosineEmbeddingLoss

function CosineEmbeddingLoss:__init(...)
  local name = "CosineEmbeddingLoss"
  local a = parse_args(name, {"weight", "batch_axis", "margin"},
                       {weight = true, batch_axis = true, margin = true}, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
  self._margin = number_opt(a, "margin", 0, name)
end

function CosineEmbeddingLoss:forward(input1, input2, label, sample_weight)
  local name = "CosineEmbeddingLoss"
  check_inputs(name, input1, input2)
  if not is_array(label) then core.error(("%s: label must be an ndarray, got %s"):format(name, type(label))) end
  check_sample_weight(name, sample_weight)
  input1 = reshape_like(input1, input2, name, "input1", "input2's")
  if input2.ndim == 0 or label.size * input2.shape[input2.ndim] ~= input2.size then
    core.error(("%s: label of shape %s does not give one value per row of the inputs %s (expected %d labels)")
               :format(name, shape_text(label.shape), shape_text(input2.shape),
                       input2.ndim == 0 and 1 or input2.size / input2.shape[input2.ndim]))
  end
  label = np.reshape(label, {-1, 1})
  local n1 = np.reshape(np.linalg.norm(input1, nil, -1), {-1, 1})
  local n2 = np.reshape(np.linalg.norm(input2, nil, -1), {-1, 1})
  local dot = np.reshape(np.sum(np.multiply(input1, input2), -1), {-1, 1})
  local cos = np.divide(dot, np.maximum(np.multiply(n1, n2), 1e-12))
  local pos = np.multiply(np.subtract(1, cos), np.equal(label, 1))
  local neg = relu(np.multiply(np.equal(label, -1), np.subtract(cos, self._margin)))
  return apply_weighting(np.add(pos, neg), self._weight, sample_weight, self.__name)
end

---------------------------------------------------------------------------
-- TripletLoss{margin = 1, weight, batch_axis = 0}, called as
-- loss(pred, positive, negative):
--   max(0, sum(|positive - pred|^2 - |negative - pred|^2) + margin), the sum
--   over the non-batch axes; no sample_weight (as MXNet).

local TripletLoss = class("TripletLoss", Loss)
loss.TripletLoss = TripletLoss

function TripletLoss:__init(...)
  local a = parse_args("TripletLoss", {"margin", "weight", "batch_axis"},
                       {margin = true, weight = true, batch_axis = true}, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
  self._margin = number_opt(a, "margin", 1, "TripletLoss")
end

function TripletLoss:forward(pred, positive, negative)
  local name = "TripletLoss"
  check_inputs(name, pred, positive)
  if not is_array(negative) then core.error(("%s: negative must be an ndarray, got %s"):format(name, type(negative))) end
  positive = reshape_like(positive, pred, name, "positive", "pred's")
  negative = reshape_like(negative, pred, name, "negative", "pred's")
  local d = np.subtract(np.square(np.subtract(positive, pred)), np.square(np.subtract(negative, pred)))
  local l = relu(np.add(batch_mean(d, self._batch_axis, name, np.sum), self._margin))
  return apply_weighting(l, self._weight, nil, self.__name)
end

---------------------------------------------------------------------------
-- PoissonNLLLoss{weight, from_logits = true, batch_axis = 0, compute_full = false}:
--   from_logits: exp(pred) - target * pred; else pred - target * log(pred + 1e-8);
--   compute_full adds Stirling's target log(target) - target + log(2 pi target)/2
--   where target > 1. Returns the mean over every element, a 0-d array (as
--   MXNet: not one value per sample).

local PoissonNLLLoss = class("PoissonNLLLoss", Loss)
loss.PoissonNLLLoss = PoissonNLLLoss

function PoissonNLLLoss:__init(...)
  local name = "PoissonNLLLoss"
  local a = parse_args(name, {"weight", "from_logits", "batch_axis", "compute_full"},
                       {weight = true, from_logits = true, batch_axis = true, compute_full = true}, ...)
  Loss.__init(self, a.weight, a.batch_axis or 0)
  self._from_logits = flag(a, "from_logits", true, name)
  self._compute_full = flag(a, "compute_full", false, name)
end

function PoissonNLLLoss:forward(pred, target, sample_weight, epsilon)
  local name = "PoissonNLLLoss"
  check_inputs(name, pred, target)
  check_sample_weight(name, sample_weight)
  epsilon = epsilon == nil and 1e-8 or epsilon
  if type(epsilon) ~= "number" or epsilon ~= epsilon then
    core.error(("%s: epsilon must be a number, got %s"):format(name, core.show_value(epsilon)))
  end
  target = reshape_like(target, pred, name)
  local l
  if self._from_logits then
    l = np.subtract(np.exp(pred), np.multiply(target, pred))
  else
    l = np.subtract(pred, np.multiply(target, np.log(np.add(pred, epsilon))))
  end
  if self._compute_full then
    -- target log(target) is NaN at 0: the mask must select, not multiply
    local big = np.greater(target, 1)
    local t = np.where(big, target, 2) -- any value > 1 where the mask is off
    local stirling = np.add(np.subtract(np.multiply(t, np.log(t)), t), np.multiply(np.log(np.multiply(t, 2 * math.pi)), 0.5))
    l = np.add(l, np.where(big, stirling, 0))
  end
  l = apply_weighting(l, self._weight, sample_weight, self.__name)
  return np.mean(l)
end

---------------------------------------------------------------------------
-- CTCLoss{layout = 'NTC', label_layout = 'NT', weight}, called as
-- loss(pred, label, pred_lengths, label_lengths, sample_weight):
--   npx.ctc_loss over pred (N, T, C) or (T, N, C) (activations: softmax
--   inside) and label (N, L) or (L, N), blank_label 'last' (as MXNet's
--   Gluon: the blank is class C-1, labels 0..C-2 padded with -1); the
--   lengths are used when given. batch_axis is label_layout's N (MXNet
--   derives it too; passing it is an error there as here).

local CTCLoss = class("CTCLoss", Loss)
loss.CTCLoss = CTCLoss

function CTCLoss:__init(...)
  local name = "CTCLoss"
  local a = parse_args(name, {"layout", "label_layout", "weight"},
                       {layout = true, label_layout = true, weight = true, batch_axis = true}, ...)
  if a.batch_axis ~= nil then
    core.error(("%s: batch_axis is label_layout's position of N (MXNet: got multiple values for batch_axis); "
                .. "give label_layout = 'NT' or 'TN', got batch_axis %s"):format(name, core.show_value(a.batch_axis)))
  end
  local layout, label_layout = a.layout or "NTC", a.label_layout or "NT"
  if layout ~= "NTC" and layout ~= "TNC" then
    core.error(("%s: layout must be 'NTC' or 'TNC', got %s"):format(name, core.show_value(layout)))
  end
  if label_layout ~= "NT" and label_layout ~= "TN" then
    core.error(("%s: label_layout must be 'NT' or 'TN', got %s"):format(name, core.show_value(label_layout)))
  end
  Loss.__init(self, a.weight, label_layout == "NT" and 0 or 1)
  self._layout, self._label_layout = layout, label_layout
end

function CTCLoss:forward(pred, label, pred_lengths, label_lengths, sample_weight)
  local name = "CTCLoss"
  check_inputs(name, pred, label)
  check_sample_weight(name, sample_weight)
  for what, v in pairs({pred_lengths = pred_lengths, label_lengths = label_lengths}) do
    if not is_array(v) then
      core.error(("%s: %s must be an ndarray or nil, got %s"):format(name, what, core.show_value(v)))
    end
  end
  if pred.ndim ~= 3 then
    core.error(("%s: pred must have 3 axes (layout %s), got shape %s"):format(name, self._layout, shape_text(pred.shape)))
  end
  if label.ndim ~= 2 then
    core.error(("%s: label must have 2 axes (label_layout %s), got shape %s")
               :format(name, self._label_layout, shape_text(label.shape)))
  end
  if self._layout == "NTC" then pred = np.swapaxes(pred, 0, 1) end
  if self._batch_axis == 1 then label = np.swapaxes(label, 0, 1) end
  local l = npx.ctc_loss(pred, label, pred_lengths, label_lengths, {use_data_lengths = pred_lengths ~= nil,
                         use_label_lengths = label_lengths ~= nil, blank_label = "last"})
  return apply_weighting(l, self._weight, sample_weight, self.__name)
end

function CTCLoss:__tostring()
  return ("CTCLoss(layout=%s, label_layout=%s, w=%s)"):format(self._layout, self._label_layout,
                                                              self._weight == nil and "None" or tostring(self._weight))
end

return core.strict_module(loss, "gluon.loss")
