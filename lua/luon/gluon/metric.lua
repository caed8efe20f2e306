-- luon.gluon.metric: Gluon's evaluation metrics (Accuracy, TopKAccuracy,
-- Loss, CrossEntropy). update() sums on the devices where the labels live
-- and does not wait for them; get() reads those sums once and returns
-- (name, value), NaN before any update, as MXNet.
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
  local bad = 0
  for _, b in pairs(self._bad) do bad = bad + b:item() end
  if bad > 0 then
    local range = self._classes and ("[0, %d)"):format(self._classes) or "[0, classes)"
    core.error(("CrossEntropy.get: %d label%s given to update() since the last reset() %s outside %s, the classes of the predictions (the metric's value would be wrong; reset() clears it)")
               :format(bad, bad == 1 and "" or "s", bad == 1 and "was" or "were", range))
  end
  return EvalMetric.get(self)
end

function CrossEntropy:update(...)
  local labels, preds = check_label_shapes("CrossEntropy", ...)
  for k = 1, #labels do
    local label, pred = labels[k], preds[k]
    local pshape = pred.shape
    local nd = #pshape
    local ax = self.axis < 0 and self.axis + nd or self.axis
    if nd == 0 or ax < 0 or ax >= nd or label.size * pshape[ax + 1] ~= pred.size then
      core.error(("CrossEntropy.update: shape mismatch: labels %s vs. predictions %s (axis %d)")
                 :format(shape_text(label.shape), shape_text(pshape), self.axis))
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
-- create("acc") and friends, by name or alias.

local registry = {
  accuracy = Accuracy, acc = Accuracy,
  top_k_accuracy = TopKAccuracy, top_k_acc = TopKAccuracy, topkaccuracy = TopKAccuracy,
  loss = LossMetric,
  ce = CrossEntropy, crossentropy = CrossEntropy, ["cross-entropy"] = CrossEntropy,
}

function metric.create(m, ...)
  if type(m) == "table" and getmetatable(m) ~= nil then return m end
  if type(m) ~= "string" then core.error(("metric.create: expected a metric name, got %s"):format(type(m))) end
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
