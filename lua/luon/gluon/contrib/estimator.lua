-- luon.gluon.contrib.estimator: MXNet 1.9.1's Estimator, the fit loop of
-- gluon.contrib.estimator, with its BatchProcessor and event handlers
-- (event_handler.lua). Each batch is split over the estimator's devices
-- with gluon.utils.split_and_load; the handlers do the rest (the update,
-- the metrics, validation, logs, checkpoints, early stopping, CSV logs).
--   local est = estimator.Estimator{net = net, loss = loss, trainer = trainer, devices = devices}
--   est:fit(train_loader, {val_data = val_loader, epochs = 3, event_handlers = {...}})
local core = require("luon.core")
local npx = require("luon.npx")
local autograd = require("luon.autograd")
local metric = require("luon.gluon.metric")
local loss_mod = require("luon.gluon.loss")
local utils = require("luon.gluon.utils")
local block = require("luon.gluon.block")
local Trainer = require("luon.gluon.trainer").Trainer
local object = require("luon.gluon.data.object")
local handlers = require("luon.gluon.contrib.event_handler")

local M = {}
for k, v in pairs(handlers) do
  if type(k) == "string" and k:match("^%u") then M[k] = v end
end
M.event_handler = handlers

---------------------------------------------------------------------------
-- BatchProcessor: one batch forward (and backward, in fit) on every device.

local BatchProcessor = core.class("BatchProcessor")
M.BatchProcessor = BatchProcessor

function BatchProcessor:__init() end

-- The batch's data and label, each split over the estimator's devices
-- (uneven parts allowed: the last batch of a loader may be short).
function BatchProcessor:_get_data_and_label(batch, devices, batch_axis)
  if type(batch) ~= "table" or batch[1] == nil or batch[2] == nil then
    core.error(("BatchProcessor: a batch must be {data, label}, got %s"):format(core.show_value(batch)))
  end
  local opts = {batch_axis = batch_axis or 0, even_split = false}
  return utils.split_and_load(batch[1], devices, opts), utils.split_and_load(batch[2], devices, opts)
end

-- evaluate_batch(estimator, batch, batch_axis) -> data, label, pred, loss (lists)
function BatchProcessor:evaluate_batch(est, batch, batch_axis)
  local data, label = self:_get_data_and_label(batch, est.context, batch_axis)
  local pred, loss = {}, {}
  for k, x in ipairs(data) do
    pred[k] = est.val_net(x)
    loss[k] = est.val_loss(pred[k], label[k])
  end
  return data, label, pred, loss
end

-- fit_batch(estimator, batch, batch_axis) -> data, label, pred, loss (lists),
-- the gradients computed (the update is GradientUpdateHandler's)
function BatchProcessor:fit_batch(est, batch, batch_axis)
  local data, label = self:_get_data_and_label(batch, est.context, batch_axis)
  local pred, loss = autograd.record(function()
    local p, l = {}, {}
    for k, x in ipairs(data) do
      p[k] = est.net(x)
      l[k] = est.loss(p[k], label[k])
    end
    return p, l
  end)
  for _, l in ipairs(loss) do l:backward() end
  return data, label, pred, loss
end

---------------------------------------------------------------------------
-- Estimator

local Estimator = core.class("Estimator")
M.Estimator = Estimator

-- A logger as MXNet's: info and warning lines on stdout. Replace
-- estimator.logger with any table having info(self, msg) and
-- warning(self, msg) to send them elsewhere.
local Logger = core.class("Logger")
M.Logger = Logger
function Logger:__init() end
function Logger:info(msg) print(msg) end
function Logger:warning(msg) print(msg) end

local estimator_names = {"net", "loss", "train_metrics", "val_metrics", "initializer", "trainer", "context",
                         "val_net", "val_loss", "batch_processor"}
local estimator_known = {"net", "loss", "train_metrics", "val_metrics", "initializer", "trainer", "context",
                         "devices", "val_net", "val_loss", "batch_processor"}

local function check_loss(loss, what)
  if not core.instance_of(loss, loss_mod.Loss) then
    core.error(("Estimator: %s must be a gluon.loss.Loss, got %s"):format(what, core.show_value(loss)))
  end
  return loss
end

local function check_devices(devices)
  if devices == nil then
    return {npx.num_gpus() > 0 and npx.gpu(0) or npx.cpu(0)}
  end
  if core.is_device(devices) then devices = {devices} end
  if type(devices) ~= "table" or getmetatable(devices) ~= nil or #devices == 0 then
    core.error(("Estimator: devices (MXNet's context) must be a device or a list of devices such as " ..
                "{npx.cpu(0), npx.cpu(1)}, got %s"):format(core.show_value(devices)))
  end
  local out = {}
  for k, d in ipairs(devices) do
    if not core.is_device(d) then
      core.error(("Estimator: devices[%d] is not a device (got %s)"):format(k, core.show_value(d)))
    end
    if d.device_type == "gpu" and d.device_id >= npx.num_gpus() then
      core.error(("Estimator: %s is not available (%d GPUs)"):format(tostring(d), npx.num_gpus()))
    end
    out[k] = d
  end
  return out
end

-- A copy of metric m, reset (MXNet's deepcopy of the training metrics).
local function copy_metric(m)
  local c = setmetatable({}, getmetatable(m))
  for k, v in pairs(m) do c[k] = type(v) == "table" and getmetatable(v) == nil and {unpack(v)} or v end
  c:reset()
  return c
end

local function is_initialized(net)
  for _, p in ipairs(net:collect_params():values()) do
    if not pcall(p.list_device, p) then return false end
  end
  return true
end

-- Estimator{net =, loss =, train_metrics =, val_metrics =, initializer =,
-- trainer =, devices = (or context =), val_net =, val_loss =,
-- batch_processor =}, or those positionally in MXNet's order.
function Estimator:__init(...)
  local a = core.args("Estimator", estimator_names, estimator_known, ...)
  if a.devices ~= nil and a.context ~= nil and a.devices ~= a.context then
    core.error("Estimator: devices and context both given; context is MXNet's name for devices, give one")
  end
  if not block.is_block(a.net) then
    core.error(("Estimator: net must be a gluon Block, got %s"):format(core.show_value(a.net)))
  end
  self.net = a.net
  self.loss = check_loss(a.loss, "loss")
  self.train_metrics = handlers.check_metrics(a.train_metrics, "Estimator")
  self.val_metrics = handlers.check_metrics(a.val_metrics, "Estimator")
  if #self.train_metrics == 0 then
    if core.instance_of(self.loss, loss_mod.SoftmaxCrossEntropyLoss) then
      self.train_metrics[1] = metric.Accuracy()
    end
    self.train_metrics[#self.train_metrics + 1] = metric.Loss(getmetatable(self.loss).__name:lower())
  end
  for _, m in ipairs(self.train_metrics) do m.name = "training " .. tostring(m.name) end
  if #self.val_metrics == 0 then
    for k, m in ipairs(self.train_metrics) do self.val_metrics[k] = copy_metric(m) end
  end
  for _, m in ipairs(self.val_metrics) do
    local name = tostring(m.name)
    m.name = name:find("training", 1, true) and name:gsub("training", "validation", 1) or "validation " .. name
  end
  self.val_loss = a.val_loss ~= nil and check_loss(a.val_loss, "val_loss") or self.loss
  self.val_net = a.val_net or self.net
  self.logger = Logger()
  self.context = check_devices(a.devices or a.context)
  self.devices = self.context
  if not is_initialized(self.net) then
    self.net:initialize({init = a.initializer, device = self.context})
  elseif a.initializer ~= nil then
    core.warn("Estimator: the network is already initialized; initializer is ignored (use " ..
              "net:initialize{init = ..., force_reinit = true} to reinitialize it)")
  end
  if a.trainer == nil then
    core.warn("Estimator: no trainer given; using SGD with learning rate 0.001")
    self.trainer = Trainer(self.net:collect_params(), "sgd", {learning_rate = 0.001})
  elseif core.instance_of(a.trainer, Trainer) then
    self.trainer = a.trainer
  else
    core.error(("Estimator: trainer must be a gluon.Trainer, got %s"):format(core.show_value(a.trainer)))
  end
  local bp = a.batch_processor
  if bp == nil then
    bp = BatchProcessor()
  elseif type(bp) ~= "table" or type(bp.fit_batch) ~= "function" or type(bp.evaluate_batch) ~= "function" then
    core.error("Estimator: batch_processor must have fit_batch and evaluate_batch methods (see BatchProcessor)")
  end
  self.batch_processor = bp
  self.training = false
end

local function check_loader(data, fname, what)
  local cls = object.class_of(data)
  if not (cls and object.name_of(cls) == "DataLoader") then
    core.error(("%s: %s must be a gluon.data.DataLoader, got %s"):format(fname, what, core.show_value(data)))
  end
  return data
end

-- The handlers sorted by priority (0 when none), equal ones in list order.
local function sort_handlers(list)
  local keyed = {}
  for k, h in ipairs(list) do keyed[k] = {h = h, k = k, p = h.priority or 0} end
  table.sort(keyed, function(x, y) if x.p ~= y.p then return x.p < y.p end return x.k < y.k end)
  for k, e in ipairs(keyed) do list[k] = e.h end
  return list
end

-- The handlers of each hook, in order.
local function categorize(list)
  local by = {}
  for _, hook in ipairs(handlers.hooks) do
    by[hook] = {}
    for _, h in ipairs(list) do
      if type(h[hook]) == "function" then by[hook][#by[hook] + 1] = h end
    end
  end
  return by
end

local function any_instance(list, cls)
  for _, h in ipairs(list) do if core.instance_of(h, cls) then return true end end
  return false
end

-- A handler's metrics and monitor must be the estimator's (known).
local function check_metric_refs(list, known)
  for _, h in ipairs(list) do
    local refs = {}
    if type(h.metrics) == "table" then for _, m in ipairs(h.metrics) do refs[#refs + 1] = m end end
    if h.monitor ~= nil then refs[#refs + 1] = h.monitor end
    for _, m in ipairs(refs) do
      if not known[m] then
        core.error(("Estimator: event handler %s refers to a metric (%s) outside the known training and " ..
                    "validation metrics; use the metrics of estimator.train_metrics and estimator.val_metrics")
                   :format(tostring(getmetatable(h) or "table"), tostring(m.name)))
      end
    end
  end
end

local function with_defaults(list, defaults, known_lists)
  local mixing = #list > 0 and #defaults > 0
  for _, h in ipairs(defaults) do list[#list + 1] = h end
  if mixing then
    local known = {}
    for _, l in ipairs(known_lists) do for _, m in ipairs(l) do known[m] = true end end
    check_metric_refs(list, known)
  end
  return sort_handlers(list)
end


local evaluate_names = {"val_data", "batch_axis", "event_handlers"}

-- evaluate(val_data, {batch_axis = 0, event_handlers}): the validation
-- metrics over val_data (a DataLoader), with a MetricHandler and a
-- LoggingHandler of the val_metrics unless event_handlers has them.
function Estimator:evaluate(...)
  local a = core.args("Estimator.evaluate", evaluate_names, evaluate_names, ...)
  local val_data = check_loader(a.val_data, "Estimator.evaluate", "val_data")
  local batch_axis = core.int_arg(a.batch_axis or 0, "Estimator.evaluate", "batch_axis")
  local list = handlers.check_handlers(a.event_handlers, "Estimator.evaluate")
  for _, m in ipairs(self.val_metrics) do m:reset() end
  local defaults = {}
  if not any_instance(list, handlers.MetricHandler) then
    defaults[#defaults + 1] = handlers.MetricHandler(self.val_metrics)
  end
  if not any_instance(list, handlers.LoggingHandler) then
    defaults[#defaults + 1] = handlers.LoggingHandler{metrics = self.val_metrics}
  end
  local by = categorize(with_defaults(list, defaults, {self.val_metrics}))
  local was_training = self.training
  self.training = false
  for _, h in ipairs(by.epoch_begin) do h:epoch_begin(self) end
  for _, batch in val_data:enumerate() do
    for _, h in ipairs(by.batch_begin) do h:batch_begin(self, {batch = batch}) end
    local _, label, pred, loss = self.batch_processor:evaluate_batch(self, batch, batch_axis)
    local kw = {batch = batch, pred = pred, label = label, loss = loss}
    for _, h in ipairs(by.batch_end) do h:batch_end(self, kw) end
  end
  for _, h in ipairs(by.epoch_end) do h:epoch_end(self) end
  self.training = was_training
end

local fit_names = {"train_data", "val_data", "epochs", "event_handlers", "batches", "batch_axis"}

-- fit(train_data, {val_data, epochs, event_handlers, batches, batch_axis =
-- 0}): trains for epochs epochs or batches batches (exactly one of them).
function Estimator:fit(...)
  local fname = "Estimator.fit"
  local a = core.args(fname, fit_names, fit_names, ...)
  local train_data = check_loader(a.train_data, fname, "train_data")
  if a.val_data ~= nil then check_loader(a.val_data, fname, "val_data") end
  if (a.epochs == nil) == (a.batches == nil) then
    core.error("Estimator.fit: give exactly one of epochs (train by epochs) and batches (train by batches)")
  end
  self.max_epoch = a.epochs ~= nil and core.int_arg(a.epochs, fname, "epochs", 1) or nil
  self.max_batch = a.batches ~= nil and core.int_arg(a.batches, fname, "batches", 1) or nil
  self.batch_axis = core.int_arg(a.batch_axis or 0, fname, "batch_axis")
  self.batches_per_epoch = train_data:len()

  local list = handlers.check_handlers(a.event_handlers, fname)
  local defaults = {handlers.StoppingHandler(self.max_epoch, self.max_batch)}
  if not any_instance(list, handlers.GradientUpdateHandler) then
    defaults[#defaults + 1] = handlers.GradientUpdateHandler()
  end
  if not any_instance(list, handlers.MetricHandler) then
    defaults[#defaults + 1] = handlers.MetricHandler(self.train_metrics)
  end
  if not any_instance(list, handlers.ValidationHandler) and a.val_data ~= nil then
    defaults[#defaults + 1] = handlers.ValidationHandler(a.val_data, function(...) return self:evaluate(...) end)
  end
  if not any_instance(list, handlers.LoggingHandler) then
    defaults[#defaults + 1] = handlers.LoggingHandler{metrics = self.train_metrics}
  end
  local by = categorize(with_defaults(list, defaults, {self.train_metrics, self.val_metrics}))

  self.training = true
  for _, h in ipairs(by.train_begin) do h:train_begin(self) end
  while true do
    for _, h in ipairs(by.epoch_begin) do h:epoch_begin(self) end
    for _, batch in train_data:enumerate() do
      for _, h in ipairs(by.batch_begin) do h:batch_begin(self, {batch = batch}) end
      local _, label, pred, loss = self.batch_processor:fit_batch(self, batch, self.batch_axis)
      -- every handler runs; any true result stops
      local kw, stop = {batch = batch, pred = pred, label = label, loss = loss}, false
      for _, h in ipairs(by.batch_end) do stop = h:batch_end(self, kw) and true or stop end
      if stop then break end
    end
    local stop = false
    for _, h in ipairs(by.epoch_end) do stop = h:epoch_end(self) and true or stop end
    if stop then break end
  end
  for _, h in ipairs(by.train_end) do h:train_end(self) end
  self.training = false
end

return core.strict_module(M, "gluon.contrib.estimator")
