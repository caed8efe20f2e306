-- luon.gluon.metric: Gluon's evaluation metrics (Accuracy, TopKAccuracy,
-- Loss, CrossEntropy, Perplexity, MAE, MSE, RMSE, F1, MCC,
-- PearsonCorrelation, NegativeLogLikelihood, BinaryAccuracy, CustomMetric, CompositeEvalMetric,
-- Torch, Caffe). update() sums on
-- the devices where the labels live and, but for F1, MCC and
-- PearsonCorrelation, does not wait for them; get() reads those sums once
-- and returns (name, value), NaN before any update, as MXNet.
local core = require("luon.core")
local np = require("luon.np")
local npx = require("luon.npx")

local is_array = core.is_array
local class, parse_args = core.class, core.args

local metric = {}

local shape_text = core.shape_text

local same_shape = core.same_shape

-- update's arguments: (labels, preds) or {labels =, preds =}, as MXNet's
-- keywords; labels and preds as given (an array or a list).
local update_names = {"labels", "preds"}
local function update_args(name, ...)
  if type(name) ~= "string" then
    core.error(("metric.update_args(name, labels, preds): name must be the metric's name (a string), got %s")
               :format(core.show_value(name)))
  end
  local a = core.args(name .. ".update", update_names, update_names, ...)
  return a.labels, a.preds
end
metric.update_args = update_args

-- labels and preds as two equal-length lists (a bare ndarray is a list of
-- one); update's arguments in either form (update_args).
local function check_label_shapes(name, ...)
  local labels, preds = update_args(name, ...)
  local lone, pone = is_array(labels), is_array(preds)
  if lone then labels = {labels} end
  if pone then preds = {preds} end
  if type(labels) ~= "table" or type(preds) ~= "table" then
    core.error(("%s.update: labels and preds must be ndarrays or lists of ndarrays, got %s and %s")
               :format(name, type(labels), type(preds)))
  end
  if #labels ~= #preds then
    core.error(("%s.update: %d labels but %d predictions; give one label array per prediction array")
               :format(name, #labels, #preds))
  end
  for k = 1, #labels do
    if not is_array(labels[k]) then core.error(("%s.update: labels[%d] is not an ndarray"):format(name, k)) end
    if not is_array(preds[k]) then core.error(("%s.update: preds[%d] is not an ndarray"):format(name, k)) end
  end
  return labels, preds
end
metric.check_label_shapes = check_label_shapes

local function as_int(x)
  local dt = x.dtype
  if dt == "int32" or dt == "int64" then return x end
  return x:astype("int32")
end

---------------------------------------------------------------------------
-- EvalMetric: sum_metric / num_inst. Device sums wait in _pending (one
-- running 0-d array per device, in first-seen order) until get(), and so
-- do counts known only on the device (_pending_less: samples to take off).

local EvalMetric = class("EvalMetric")
metric.EvalMetric = EvalMetric

function EvalMetric:__init(name)
  self.name = name
  self:reset()
end

function EvalMetric:reset()
  self.num_inst = 0
  self.sum_metric = 0.0
  self._pending, self._pending_devs, self._pending_less = {}, {}, {}
end

-- Add a 0-d device array to the sum and n to the count, less the 0-d device
-- count `less` when given (no host sync either way).
function EvalMetric:_accumulate(value, n, less)
  local dev = value.device
  local cur = self._pending[dev]
  if cur == nil then
    self._pending_devs[#self._pending_devs + 1] = dev
    self._pending[dev] = value
  else
    self._pending[dev] = cur + value
  end
  self.num_inst = self.num_inst + n
  if less ~= nil then
    local l = self._pending_less[dev]
    self._pending_less[dev] = l == nil and less or l + less
  end
end

-- Read the device sums into sum_metric and num_inst (one item() per device
-- and sum).
function EvalMetric:_flush()
  for _, dev in ipairs(self._pending_devs) do
    self.sum_metric = self.sum_metric + self._pending[dev]:item()
    local less = self._pending_less[dev]
    if less ~= nil then self.num_inst = self.num_inst - less:item() end
  end
  self._pending, self._pending_devs, self._pending_less = {}, {}, {}
end

function EvalMetric:get()
  self:_flush()
  if self.num_inst == 0 then return self.name, 0 / 0 end
  return self.name, self.sum_metric / self.num_inst
end

function EvalMetric:get_name_value()
  local name, value = self:get()
  return {{name, value}}
end

function EvalMetric:update()
  core.error(("%s: this metric class defines no update(labels, preds)"):format(getmetatable(self).__name))
end
EvalMetric._required = {{"update", text = "update(labels, preds)"}}

function EvalMetric:__tostring()
  local name, value = self:get()
  return ("EvalMetric: {'%s': %s}"):format(name, tostring(value))
end

---------------------------------------------------------------------------
-- Accuracy{axis = 1}: predictions with more dims than the label are
-- argmax'ed over axis; both cast to int and flattened; count the matches.

local Accuracy = class("Accuracy", EvalMetric)
metric.Accuracy = Accuracy

function Accuracy:__init(...)
  local a = parse_args("Accuracy", {"axis", "name"}, {axis = true, name = true,
                       output_names = true, label_names = true}, ...)
  self.axis = a.axis or 1
  EvalMetric.__init(self, a.name or "accuracy")
end

function Accuracy:update(...)
  local labels, preds = check_label_shapes("Accuracy", ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    pred = pred:to_device(label.device)
    if not same_shape(pred.shape, label.shape) then pred = np.argmax(pred, self.axis) end
    pred, label = np.reshape(as_int(pred), {-1}), np.reshape(as_int(label), {-1})
    local n = label.size
    if pred.size ~= n then
      core.error(("Accuracy.update: shape of labels %s does not match shape of predictions %s")
                 :format(shape_text(labels[k].shape), shape_text(preds[k].shape)))
    end
    self:_accumulate(np.sum(np.equal(pred, label)), n)
  end
end

---------------------------------------------------------------------------
-- TopKAccuracy{top_k}: a sample is right when its label is among the top_k
-- scores, counted on the device as "fewer than top_k classes score
-- strictly higher than the label's class" (ties count as right; MXNet's
-- argpartition breaks them arbitrarily).

local TopKAccuracy = class("TopKAccuracy", EvalMetric)
metric.TopKAccuracy = TopKAccuracy

function TopKAccuracy:__init(...)
  local a = parse_args("TopKAccuracy", {"top_k", "name"}, {top_k = true, name = true,
                       output_names = true, label_names = true}, ...)
  local k = a.top_k or 1
  if type(k) ~= "number" or k % 1 ~= 0 or k <= 1 then
    core.error(("TopKAccuracy: top_k must be an integer > 1 (use Accuracy for top_k = 1), got %s")
               :format(tostring(k)))
  end
  self.top_k = k
  EvalMetric.__init(self, (a.name or "top_k_accuracy") .. "_" .. k)
end

function TopKAccuracy:update(...)
  local labels, preds = check_label_shapes("TopKAccuracy", ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    pred = pred:to_device(label.device)
    local nd = pred.ndim
    if nd > 2 then
      core.error(("TopKAccuracy.update: predictions should have at most 2 dims, got shape %s")
                 :format(shape_text(pred.shape)))
    end
    label = np.reshape(as_int(label), {-1})
    local n = pred.shape[1]
    if label.size ~= n then
      core.error(("TopKAccuracy.update: shape of labels %s does not match shape of predictions %s")
                 :format(shape_text(labels[k].shape), shape_text(preds[k].shape)))
    end
    local correct
    if nd == 1 then
      correct = np.sum(np.equal(as_int(pred), label))
    else
      local score = npx.pick(pred, label, {axis = 1, keepdims = true}) -- (N,1)
      local above = np.sum(np.greater(pred, score), 1)             -- (N,)
      -- a label outside [0, classes) is never among the top k (pick clips
      -- it to a class, which could be)
      local valid = np.multiply(np.greater_equal(label, 0), np.less(label, pred.shape[2]))
      correct = np.sum(np.multiply(np.less(above, self.top_k), valid))
    end
    self:_accumulate(correct, n)
  end
end

---------------------------------------------------------------------------
-- Loss: the mean of the loss values given as preds (labels are ignored).

local LossMetric = class("Loss", EvalMetric)
metric.Loss = LossMetric

function LossMetric:__init(...)
  local a = parse_args("Loss", {"name"}, {name = true, output_names = true, label_names = true}, ...)
  EvalMetric.__init(self, a.name or "loss")
end

function LossMetric:update(...)
  local _, preds = update_args("Loss", ...)
  if is_array(preds) then preds = {preds} end
  if type(preds) ~= "table" then
    core.error(("Loss.update: preds must be an ndarray or a list of ndarrays, got %s"):format(type(preds)))
  end
  for k, pred in ipairs(preds) do
    if not is_array(pred) then core.error(("Loss.update: preds[%d] is not an ndarray"):format(k)) end
    self:_accumulate(np.sum(pred, {dtype = "float64"}), pred.size)
  end
end

-- Torch and Caffe: Loss under the names MXNet 1.9.1 gives its dummy metrics.
for _, cname in ipairs({"Torch", "Caffe"}) do
  local cls = class(cname, LossMetric)
  metric[cname] = cls
  function cls:__init(...)
    local a = parse_args(cname, {"name"}, {name = true, output_names = true, label_names = true}, ...)
    EvalMetric.__init(self, a.name or cname:lower())
  end
end

---------------------------------------------------------------------------
-- BinaryAccuracy{name = 'binary_accuracy', threshold = 0.5} (MXNet 2's;
-- 1.9.1 has none): a prediction is class 1 where it is > threshold; both
-- flattened; count the matches with the labels.

local BinaryAccuracy = class("BinaryAccuracy", EvalMetric)
metric.BinaryAccuracy = BinaryAccuracy

function BinaryAccuracy:__init(...)
  local a = parse_args("BinaryAccuracy", {"name", "output_names", "label_names", "threshold"},
                       {name = true, output_names = true, label_names = true, threshold = true}, ...)
  local t = a.threshold == nil and 0.5 or a.threshold
  if type(t) ~= "number" or t ~= t then
    core.error(("BinaryAccuracy: threshold must be a number, got %s"):format(core.show_value(t)))
  end
  self.threshold = t
  EvalMetric.__init(self, a.name or "binary_accuracy")
end

function BinaryAccuracy:update(...)
  local labels, preds = check_label_shapes("BinaryAccuracy", ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    local n = label.size
    if pred.size ~= n then
      core.error(("BinaryAccuracy.update: shape of labels %s does not match shape of predictions %s")
                 :format(shape_text(label.shape), shape_text(pred.shape)))
    end
    local yhat = np.greater(np.reshape(pred:to_device(label.device), {-1}), self.threshold)
    self:_accumulate(np.sum(np.equal(as_int(yhat), as_int(np.reshape(label, {-1})))), n)
  end
end

---------------------------------------------------------------------------
-- CrossEntropy{eps = 1e-12, ignore_label, axis = -1, from_logits = false}:
-- the mean of -log(max(eps, p[label])) over the samples. A label outside
-- [0, classes) that is not ignore_label is an error, as in MXNet, but it is
-- counted on the device and raised by get() (update() does not wait), and
-- by every get() until reset().

local CrossEntropy = class("CrossEntropy", EvalMetric)
metric.CrossEntropy = CrossEntropy

function CrossEntropy:__init(...)
  local a = parse_args("CrossEntropy", {"eps", "ignore_label", "axis", "from_logits", "name"},
                       {eps = true, ignore_label = true, axis = true, from_logits = true, name = true,
                        output_names = true, label_names = true}, ...)
  self.eps = a.eps or 1e-12
  self.ignore_label = a.ignore_label
  self.axis = a.axis or -1
  self.from_logits = a.from_logits == true
  EvalMetric.__init(self, a.name or "cross-entropy")
end

function CrossEntropy:reset()
  EvalMetric.reset(self)
  self._bad, self._classes = {}, nil -- per device: labels outside [0, classes)
end

function CrossEntropy:get()
  local cname = getmetatable(self).__name
  local bad = 0
  for _, b in pairs(self._bad) do bad = bad + b:item() end
  if bad > 0 then
    local range = self._classes and ("[0, %d)"):format(self._classes) or "[0, classes)"
    core.error(("%s.get: %d label%s given to update() since the last reset() %s outside %s, the classes of the predictions (the metric's value would be wrong; reset() clears it)")
               :format(cname, bad, bad == 1 and "" or "s", bad == 1 and "was" or "were", range))
  end
  return EvalMetric.get(self)
end

function CrossEntropy:update(...)
  local cname = getmetatable(self).__name
  local labels, preds = check_label_shapes(cname, ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    local pshape = pred.shape
    local nd = #pshape
    local ax = self.axis < 0 and self.axis + nd or self.axis
    if nd == 0 or ax < 0 or ax >= nd or label.size * pshape[ax + 1] ~= pred.size then
      core.error(("%s.update: shape mismatch: labels %s vs. predictions %s (axis %d)")
                 :format(cname, shape_text(label.shape), shape_text(pshape), self.axis))
    end
    local pdt = pred.dtype
    if pdt ~= "float32" and pdt ~= "float64" then
      core.error(("%s.update: predictions are %s %s; probabilities are float32 or float64")
                 :format(cname, pdt, shape_text(pshape)))
    end
    pred = pred:to_device(label.device)
    if self.from_logits then pred = npx.softmax(pred, {axis = ax}) end
    -- the label's shape is pred's without the axis
    local lshape = {}
    for d = 1, nd do if d ~= ax + 1 then lshape[#lshape + 1] = pshape[d] end end
    label = np.reshape(as_int(label), lshape)
    local p = npx.pick(pred, label, {axis = ax, keepdims = false})
    local classes = pshape[ax + 1]
    local bad = np.sum(np.less(label, 0), {dtype = "float64"}) +
                np.sum(np.greater_equal(label, classes), {dtype = "float64"})
    local ignored
    if self.ignore_label ~= nil then
      local ignore = np.equal(label, self.ignore_label):astype(p.dtype)
      ignored = np.sum(ignore, {dtype = "float64"})
      p = p * (1 - ignore) + ignore
      if self.ignore_label < 0 or self.ignore_label >= classes then bad = bad - ignored end
    end
    local dev = bad.device
    self._bad[dev] = self._bad[dev] == nil and bad or self._bad[dev] + bad
    -- one count to name in get()'s message, or false once they differ
    if self._classes == nil or self._classes == classes then self._classes = classes else self._classes = false end
    local nll = np.negative(np.sum(np.log(np.maximum(p, self.eps)), {dtype = "float64"}))
    self:_accumulate(nll, p.size, ignored)
  end
end

---------------------------------------------------------------------------
-- NegativeLogLikelihood{eps = 1e-12, name = 'nll-loss'}: the mean of
-- -log(p[label] + eps) over the rows of (N, classes) predictions. A label
-- outside [0, classes) is an error in update() (one sync per call).

local NegativeLogLikelihood = class("NegativeLogLikelihood", EvalMetric)
metric.NegativeLogLikelihood = NegativeLogLikelihood

function NegativeLogLikelihood:__init(...)
  local a = parse_args("NegativeLogLikelihood", {"eps", "name"},
                       {eps = true, name = true, output_names = true, label_names = true}, ...)
  local eps = a.eps == nil and 1e-12 or a.eps
  if type(eps) ~= "number" or eps ~= eps then
    core.error(("NegativeLogLikelihood: eps must be a number, got %s"):format(core.show_value(eps)))
  end
  self.eps = eps
  EvalMetric.__init(self, a.name or "nll-loss")
end

function NegativeLogLikelihood:update(...)
  local cname = "NegativeLogLikelihood"
  local labels, preds = check_label_shapes(cname, ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    if pred.ndim ~= 2 or label.size ~= pred.shape[1] then
      core.error(("%s.update: predictions must be (N, classes) and labels N values, got labels %s and predictions %s")
                 :format(cname, shape_text(label.shape), shape_text(pred.shape)))
    end
    pred = pred:to_device(label.device)
    local y = np.reshape(as_int(label), {-1})
    local classes = pred.shape[2]
    local bad = np.sum(np.logical_or(np.less(y, 0), np.greater_equal(y, classes))):item()
    if bad > 0 then
      core.error(("%s.update: %d label%s outside [0, %d), the classes of the predictions %s")
                 :format(cname, bad, bad == 1 and " is" or "s are", classes, shape_text(pred.shape)))
    end
    local p = npx.pick(pred, y, {axis = 1, keepdims = false}):astype("float64")
    self:_accumulate(np.negative(np.sum(np.log(np.add(p, self.eps)))), label.size)
  end
end

---------------------------------------------------------------------------
-- Perplexity{ignore_label, axis = -1}: exp of CrossEntropy's mean with eps
-- 1e-10 (MXNet's). ignore_label nil counts every label (MXNet's None).

local Perplexity = class("Perplexity", CrossEntropy)
metric.Perplexity = Perplexity

function Perplexity:__init(...)
  local a = parse_args("Perplexity", {"ignore_label", "axis", "name"},
                       {ignore_label = true, axis = true, name = true, output_names = true, label_names = true}, ...)
  if a.ignore_label ~= nil and (type(a.ignore_label) ~= "number" or a.ignore_label % 1 ~= 0) then
    core.error(("Perplexity: ignore_label must be an integer or nil, got %s"):format(core.show_value(a.ignore_label)))
  end
  self.eps, self.ignore_label, self.from_logits = 1e-10, a.ignore_label, false
  self.axis = core.int_arg(a.axis or -1, "Perplexity", "axis")
  EvalMetric.__init(self, a.name or "perplexity")
end

function Perplexity:get()
  local name, v = CrossEntropy.get(self)
  return name, math.exp(v)
end

---------------------------------------------------------------------------
-- MAE, MSE, RMSE: per (label, pred) pair, the mean of |label - pred|,
-- (label - pred)^2, or its square root, in float64; the metric is the mean
-- of those per-pair values (as MXNet: each pair counts once, whatever its
-- size). A 1-d label or prediction is taken as (n, 1).

local function regression_metric(cname, default_name, per_pair)
  local cls = class(cname, EvalMetric)
  metric[cname] = cls
  function cls:__init(...)
    local a = parse_args(cname, {"name"}, {name = true, output_names = true, label_names = true}, ...)
    EvalMetric.__init(self, a.name or default_name)
  end
  function cls:update(...)
    local labels, preds = check_label_shapes(cname, ...)
    for k = 1, #labels do
      local label, pred = labels[k], preds[k]
      local ls, ps = label.shape, pred.shape
      if #ls == 1 then ls = {ls[1], 1} end
      if #ps == 1 then ps = {ps[1], 1} end
      if not same_shape(ls, ps) then
        core.error(("%s.update: shape of labels %s does not match shape of predictions %s")
                   :format(cname, shape_text(label.shape), shape_text(pred.shape)))
      end
      local d = np.subtract(np.reshape(label, ls):astype("float64"),
                            np.reshape(pred:to_device(label.device), ls):astype("float64"))
      self:_accumulate(per_pair(d), 1)
    end
  end
  return cls
end

regression_metric("MAE", "mae", function(d) return np.mean(np.abs(d)) end)
regression_metric("MSE", "mse", function(d) return np.mean(np.square(d)) end)
regression_metric("RMSE", "rmse", function(d) return np.sqrt(np.mean(np.square(d))) end)

---------------------------------------------------------------------------
-- F1 and MCC{name, average = 'macro'}: binary classification; preds (N, C)
-- scores, the predicted class their argmax over axis 1 (positive: class 1);
-- labels (N,) of 0 and 1. 'macro' averages the score of each update()
-- call, 'micro' scores every sample seen since reset().

local function average_arg(cname, v)
  if v == nil then return "macro" end
  if v ~= "macro" and v ~= "micro" then
    core.error(("%s: average must be 'macro' or 'micro' (MXNet 1.9.1's; not 'binary'), got %s")
               :format(cname, core.show_value(v)))
  end
  return v
end

-- true/false positives/negatives of one update's pairs, read to the host
local function binary_stats(cname, labels, preds)
  local st = {tp = 0, fp = 0, fn = 0, tn = 0}
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    if pred.ndim ~= 2 or label.size ~= pred.shape[1] then
      core.error(("%s.update: predictions must be (N, classes) scores and labels N values, got labels %s and predictions %s")
                 :format(cname, shape_text(label.shape), shape_text(pred.shape)))
    end
    pred = pred:to_device(label.device)
    local yhat = np.equal(np.argmax(pred, 1), 1)
    -- the labels as given (a float 1.9 or -0.5 is no class: as_int would truncate it)
    local bad = np.sum(np.logical_and(np.not_equal(label, 0), np.not_equal(label, 1))):item()
    local y = np.reshape(as_int(label), {-1})
    if bad > 0 then
      core.error(("%s.update: %d label%s not 0 or 1 (this metric is for binary classification; labels %s)")
                 :format(cname, bad, bad == 1 and " is" or "s are", shape_text(label.shape)))
    end
    local yt = np.equal(y, 1)
    local tp = np.sum(np.logical_and(yhat, yt)):item()
    local fp = np.sum(np.logical_and(yhat, np.logical_not(yt))):item()
    local fn = np.sum(np.logical_and(np.logical_not(yhat), yt)):item()
    st.tp, st.fp, st.fn = st.tp + tp, st.fp + fp, st.fn + fn
    st.tn = st.tn + label.size - tp - fp - fn
  end
  return st
end

local function fscore(st)
  local prec = st.tp + st.fp > 0 and st.tp / (st.tp + st.fp) or 0
  local rec = st.tp + st.fn > 0 and st.tp / (st.tp + st.fn) or 0
  if prec + rec > 0 then return 2 * prec * rec / (prec + rec) end
  return 0
end

-- (tp tn - fp fn) / sqrt of the product of the nonzero margins
local function mcc(st)
  if st.tp + st.fp + st.fn + st.tn == 0 then return 0 end
  local denom = 1
  for _, t in ipairs({st.tp + st.fp, st.tp + st.fn, st.tn + st.fp, st.tn + st.fn}) do
    if t ~= 0 then denom = denom * t end
  end
  return (st.tp * st.tn - st.fp * st.fn) / math.sqrt(denom)
end

local function binary_metric(cname, default_name, score)
  local cls = class(cname, EvalMetric)
  metric[cname] = cls
  function cls:__init(...)
    local a = parse_args(cname, {"name", "output_names", "label_names", "average"},
                         {name = true, output_names = true, label_names = true, average = true}, ...)
    self.average = average_arg(cname, a.average)
    EvalMetric.__init(self, a.name or default_name)
  end
  function cls:reset()
    EvalMetric.reset(self)
    self._stats = {tp = 0, fp = 0, fn = 0, tn = 0}
  end
  function cls:update(...)
    local st = binary_stats(cname, check_label_shapes(cname, ...))
    if self.average == "macro" then
      self.sum_metric = self.sum_metric + score(st)
      self.num_inst = self.num_inst + 1
    else
      local all = self._stats
      for k, v in pairs(st) do all[k] = all[k] + v end
      local n = all.tp + all.fp + all.fn + all.tn
      self.sum_metric, self.num_inst = score(all) * n, n
    end
  end
  return cls
end

binary_metric("F1", "f1", fscore)
binary_metric("MCC", "mcc", mcc)

---------------------------------------------------------------------------
-- PearsonCorrelation{name = 'pearsonr', average = 'macro'}: the correlation
-- of each (label, pred) pair, flattened, averaged over pairs ('macro'), or
-- of every value since reset() ('micro'); float64.

local PearsonCorrelation = class("PearsonCorrelation", EvalMetric)
metric.PearsonCorrelation = PearsonCorrelation

function PearsonCorrelation:__init(...)
  local a = parse_args("PearsonCorrelation", {"name", "output_names", "label_names", "average"},
                       {name = true, output_names = true, label_names = true, average = true}, ...)
  self.average = average_arg("PearsonCorrelation", a.average)
  EvalMetric.__init(self, a.name or "pearsonr")
end

function PearsonCorrelation:reset()
  EvalMetric.reset(self)
  self._sums = {n = 0, x = 0, y = 0, xx = 0, yy = 0, xy = 0}
end

local function correlation(m)
  return (m.n * m.xy - m.x * m.y) / math.sqrt((m.n * m.xx - m.x * m.x) * (m.n * m.yy - m.y * m.y))
end

function PearsonCorrelation:update(...)
  local labels, preds = check_label_shapes("PearsonCorrelation", ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    if not same_shape(label.shape, pred.shape) then
      core.error(("PearsonCorrelation.update: shape of labels %s does not match shape of predictions %s")
                 :format(shape_text(label.shape), shape_text(pred.shape)))
    end
    local y = np.reshape(label, {-1}):astype("float64")
    local x = np.reshape(pred:to_device(label.device), {-1}):astype("float64")
    -- centred on this pair's means, for accuracy: sums of dx, dy, dx^2, ...
    local mx_, my_ = np.mean(x):item(), np.mean(y):item()
    local dx, dy = x - mx_, y - my_
    local n = x.size
    local m = {n = n, x = 0, y = 0, xx = np.sum(dx * dx):item(), yy = np.sum(dy * dy):item(),
               xy = np.sum(dx * dy):item()}
    if self.average == "macro" then
      self.sum_metric = self.sum_metric + correlation(m)
      self.num_inst = self.num_inst + 1
    else
      -- pooled co-moments (Chan et al.), from this pair's centred ones
      local s = self._sums
      local N = s.n + n
      if s.n == 0 then
        s.n, s.x, s.y, s.xx, s.yy, s.xy = n, mx_, my_, m.xx, m.yy, m.xy
      else
        local ddx, ddy = mx_ - s.x, my_ - s.y
        local f = s.n * n / N
        s.xx = s.xx + m.xx + ddx * ddx * f
        s.yy = s.yy + m.yy + ddy * ddy * f
        s.xy = s.xy + m.xy + ddx * ddy * f
        s.x, s.y, s.n = s.x + ddx * n / N, s.y + ddy * n / N, N
      end
      self.num_inst = self.num_inst + 1
    end
  end
end

function PearsonCorrelation:get()
  if self.average == "macro" or self.num_inst == 0 then return EvalMetric.get(self) end
  local s = self._sums
  return self.name, s.xy / math.sqrt(s.xx * s.yy)
end

---------------------------------------------------------------------------
-- CustomMetric{feval, name = 'custom', allow_extra_outputs = false}:
-- feval(label, pred) of each pair returns a number (one instance) or
-- (sum, count).

local CustomMetric = class("CustomMetric", EvalMetric)
metric.CustomMetric = CustomMetric

function CustomMetric:__init(...)
  local a = parse_args("CustomMetric", {"feval", "name", "allow_extra_outputs"},
                       {feval = true, name = true, allow_extra_outputs = true, output_names = true, label_names = true}, ...)
  if type(a.feval) ~= "function" then
    core.error(("CustomMetric: feval must be a function(label, pred), got %s"):format(core.show_value(a.feval)))
  end
  self._feval, self._allow_extra = a.feval, a.allow_extra_outputs == true
  EvalMetric.__init(self, a.name or "custom")
end

function CustomMetric:update(...)
  local labels, preds = update_args("CustomMetric", ...)
  if is_array(labels) then labels = {labels} end
  if is_array(preds) then preds = {preds} end
  if not self._allow_extra then labels, preds = check_label_shapes("CustomMetric", labels, preds) end
  for k = 1, math.min(#labels, #preds) do
    local v, n = self._feval(labels[k], preds[k])
    if type(v) ~= "number" or (n ~= nil and type(n) ~= "number") then
      core.error(("CustomMetric '%s': feval must return a number or (sum, count), got %s, %s")
                 :format(self.name, core.show_value(v), core.show_value(n)))
    end
    self.sum_metric = self.sum_metric + v
    self.num_inst = self.num_inst + (n or 1)
  end
end

---------------------------------------------------------------------------
-- CompositeEvalMetric{metrics, name = 'composite'}: several metrics updated
-- together; get() returns the list of names and the list of values.

local CompositeEvalMetric = class("CompositeEvalMetric", EvalMetric)
metric.CompositeEvalMetric = CompositeEvalMetric

function CompositeEvalMetric:__init(...)
  local a = parse_args("CompositeEvalMetric", {"metrics", "name"},
                       {metrics = true, name = true, output_names = true, label_names = true}, ...)
  if a.metrics ~= nil and type(a.metrics) ~= "table" then
    core.error(("CompositeEvalMetric: metrics must be a list of metrics or names, got %s"):format(type(a.metrics)))
  end
  self.metrics = {}
  for _, m in ipairs(a.metrics or {}) do self.metrics[#self.metrics + 1] = metric.create(m) end
  EvalMetric.__init(self, a.name or "composite")
end

function CompositeEvalMetric:add(m) self.metrics[#self.metrics + 1] = metric.create(m) end

-- index from 0, as MXNet
function CompositeEvalMetric:get_metric(index)
  local m = type(index) == "number" and self.metrics[index + 1]
  if not m then
    core.error(("CompositeEvalMetric.get_metric: index %s is out of range [0, %d)")
               :format(core.show_value(index), #self.metrics))
  end
  return m
end

function CompositeEvalMetric:update(...)
  for _, m in ipairs(self.metrics) do m:update(...) end
end

function CompositeEvalMetric:reset()
  EvalMetric.reset(self)
  for _, m in ipairs(self.metrics or {}) do m:reset() end
end

function CompositeEvalMetric:get()
  local names, values = {}, {}
  for _, m in ipairs(self.metrics) do
    local name, value = m:get()
    if type(name) == "table" then
      for k = 1, #name do names[#names + 1], values[#values + 1] = name[k], value[k] end
    else
      names[#names + 1], values[#values + 1] = name, value
    end
  end
  return names, values
end

function CompositeEvalMetric:get_name_value()
  local names, values = self:get()
  local out = {}
  for k = 1, #names do out[k] = {names[k], values[k]} end
  return out
end

function CompositeEvalMetric:__tostring()
  local parts = {}
  for _, nv in ipairs(self:get_name_value()) do parts[#parts + 1] = ("'%s': %s"):format(nv[1], tostring(nv[2])) end
  return "EvalMetric: {" .. table.concat(parts, ", ") .. "}"
end

---------------------------------------------------------------------------
-- create("acc") and friends, by name or alias.

local registry = {
  accuracy = Accuracy, acc = Accuracy,
  top_k_accuracy = TopKAccuracy, top_k_acc = TopKAccuracy, topkaccuracy = TopKAccuracy,
  loss = LossMetric,
  ce = CrossEntropy, crossentropy = CrossEntropy, ["cross-entropy"] = CrossEntropy,
  mae = metric.MAE, mse = metric.MSE, rmse = metric.RMSE,
  f1 = metric.F1, mcc = metric.MCC, perplexity = Perplexity,
  pearsoncorrelation = PearsonCorrelation, pearsonr = PearsonCorrelation,
  composite = CompositeEvalMetric, compositeevalmetric = CompositeEvalMetric,
  negativeloglikelihood = NegativeLogLikelihood, nll_loss = NegativeLogLikelihood,
  custommetric = CustomMetric, torch = metric.Torch, caffe = metric.Caffe,
  binaryaccuracy = BinaryAccuracy, binary_accuracy = BinaryAccuracy,
}

-- register(cls) under its class name (as MXNet's metric.register),
-- register(cls, name) or register(name, cls); cls derives from EvalMetric.
function metric.register(a, b)
  return core.register(registry, EvalMetric, "metric.register", a, b)
end

-- create(name, ...): the metric of that name or alias (any case), built with
-- the other arguments; create(metric): that metric; create(list): a
-- CompositeEvalMetric of create(each); create(function): a CustomMetric.
function metric.create(m, ...)
  if type(m) == "table" and getmetatable(m) ~= nil then return m end
  if type(m) == "function" then return CustomMetric(m, ...) end
  if type(m) == "table" then
    local c = CompositeEvalMetric()
    for _, each in ipairs(m) do c:add(metric.create(each, ...)) end
    return c
  end
  if type(m) ~= "string" then
    core.error(("metric.create: expected a metric, a name, a list or a function, got %s"):format(type(m)))
  end
  local cls = registry[m:lower()]
  if not cls then
    local names = {}
    for k in pairs(registry) do names[#names + 1] = k end
    table.sort(names)
    core.error(("metric.create: unknown metric '%s' (known: %s)"):format(m, table.concat(names, ", ")))
  end
  return cls(...)
end

return core.strict_module(metric, "gluon.metric")
