-- luon.gluon.contrib.event_handler: the Estimator's event handlers, MXNet
-- 1.9.1's (StoppingHandler, MetricHandler, ValidationHandler,
-- LoggingHandler, CheckpointHandler, EarlyStoppingHandler,
-- GradientUpdateHandler) and luon's own (LRSchedulerHandler, CSVLogHandler).
-- A handler is any table with some of the six hooks (train_begin,
-- epoch_begin, batch_begin, batch_end, epoch_end, train_end), called as
-- handler:hook(estimator, {batch =, pred =, label =, loss =}) (batch hooks)
-- or handler:hook(estimator); a true return of batch_end/epoch_end stops.
local core = require("luon.core")
local metric = require("luon.gluon.metric")
local utils = require("luon.gluon.utils")
local progress = require("luon.progress")
local plot = require("luon.plot")

local class = core.class
local M = {}

local function clock() return require("luon").clock() end

M.hooks = {"train_begin", "epoch_begin", "batch_begin", "batch_end", "epoch_end", "train_end"}
local is_hook = {}
for _, h in ipairs(M.hooks) do is_hook[h] = true end

-- The base classes of MXNet's names, each with its hook doing nothing:
-- class("MyHandler", event_handler.EpochEnd) and define epoch_end.
local bases = {TrainBegin = "train_begin", TrainEnd = "train_end", EpochBegin = "epoch_begin",
               EpochEnd = "epoch_end", BatchBegin = "batch_begin", BatchEnd = "batch_end"}
M.EventHandler = class("EventHandler")
function M.EventHandler:__init() end
for cname, hook in pairs(bases) do
  local c = class(cname, M.EventHandler)
  c[hook] = function() return false end
  M[cname] = c
end

-- The public function names of handler h: its own and its class chain's.
local function function_names(h)
  local names, seen, visited = {}, {}, {}
  local t = h
  while type(t) == "table" and not visited[t] do
    visited[t] = true
    for k, v in pairs(t) do
      if type(k) == "string" and k:byte(1) ~= 95 and type(v) == "function" and not seen[k] then
        seen[k] = true
        names[#names + 1] = k
      end
    end
    local mt = getmetatable(t)
    if mt == nil then break end
    t = type(mt.__index) == "table" and mt.__index or mt
  end
  return names
end

-- A handler or a list of them, as a new list; each checked: a table with
-- at least one hook, no misspelt hook (a name close to one, or, in a plain
-- table, any other function), a number priority.
function M.check_handlers(handlers, fname)
  if handlers == nil then return {} end
  if type(handlers) ~= "table" then
    core.error(("%s: event_handlers must be a handler or a list of handlers, got %s")
               :format(fname, core.show_value(handlers)))
  end
  local list = {}
  if handlers[1] == nil and next(handlers) ~= nil then list[1] = handlers
  else for k = 1, #handlers do list[k] = handlers[k] end end
  for k, h in ipairs(list) do
    if type(h) ~= "table" then
      core.error(("%s: event_handlers[%d] must be a handler (a table with methods such as epoch_end), got %s")
                 :format(fname, k, core.show_value(h)))
    end
    local names, found = function_names(h), false
    local plain = getmetatable(h) == nil
    for _, n in ipairs(names) do
      if is_hook[n] then
        found = true
      elseif plain or #core.suggest(n, M.hooks) > 0 then
        core.error(("%s: event_handlers[%d] has a method %s, which is no event (events: %s)%s")
                   :format(fname, k, core.show_value(n), table.concat(M.hooks, ", "), core.did_you_mean(n, M.hooks)))
      end
    end
    if not found then
      core.error(("%s: event_handlers[%d] has none of the event methods %s"):format(fname, k, table.concat(M.hooks, ", ")))
    end
    if h.priority ~= nil and type(h.priority) ~= "number" then
      core.error(("%s: event_handlers[%d].priority must be a number, got %s")
                 :format(fname, k, core.show_value(h.priority)))
    end
  end
  return list
end

-- metrics: a metric, a CompositeEvalMetric (its metrics, flattened) or a
-- list of metrics; a list.
function M.check_metrics(metrics, fname)
  if metrics == nil then return {} end
  if core.instance_of(metrics, metric.CompositeEvalMetric) then
    local out = {}
    for _, m in ipairs(metrics.metrics) do
      for _, each in ipairs(M.check_metrics(m, fname)) do out[#out + 1] = each end
    end
    return out
  end
  if core.instance_of(metrics, metric.EvalMetric) then return {metrics} end
  if type(metrics) ~= "table" or getmetatable(metrics) ~= nil then
    core.error(("%s: metrics must be a metric or a list of metrics (gluon.metric), got %s")
               :format(fname, core.show_value(metrics)))
  end
  local out = {}
  for k, m in ipairs(metrics) do
    if not core.instance_of(m, metric.EvalMetric) then
      core.error(("%s: metrics[%d] must be a metric (gluon.metric.EvalMetric), got %s")
                 :format(fname, k, core.show_value(m)))
    end
    out[k] = m
  end
  return out
end

local function opt_int(v, fname, what, lo)
  if v == nil or v == false then return nil end
  return core.int_arg(v, fname, what, lo)
end

local function metrics_text(metrics)
  local parts = {}
  for _, m in ipairs(metrics) do
    local name, value = m:get()
    parts[#parts + 1] = ("%s: %.4f"):format(name, value)
  end
  return table.concat(parts, ", ")
end

-- 'min' or 'max' for a monitor; 'auto': max for accuracy, F1, MCC and
-- Pearson's r (higher is better), else min (what MXNet 1.9.1's auto mode
-- means to do).
local function monitor_mode(mode, monitor, fname)
  mode = mode or "auto"
  if mode ~= "auto" and mode ~= "min" and mode ~= "max" then
    core.error(("%s: mode must be 'auto', 'min' or 'max', got %s"):format(fname, core.show_value(mode)))
  end
  if mode ~= "auto" or monitor == nil then return mode end
  local name = tostring((monitor:get())):lower()
  for _, higher in ipairs({"acc", "f1", "mcc", "pearson"}) do
    if name:find(higher, 1, true) then return "max" end
  end
  return "min"
end

local function better(mode, a, b) if mode == "max" then return a > b end return a < b end

local function monitor_arg(monitor, fname, required)
  if monitor == nil and not required then return nil end
  if not core.instance_of(monitor, metric.EvalMetric) then
    core.error(("%s: monitor must be one of the metrics of estimator.train_metrics or estimator.val_metrics, got %s")
               :format(fname, core.show_value(monitor)))
  end
  if core.instance_of(monitor, metric.CompositeEvalMetric) then
    core.error(("%s: monitor must be a single metric, not a CompositeEvalMetric"):format(fname))
  end
  return monitor
end

---------------------------------------------------------------------------
-- StoppingHandler(max_epoch, max_batch): stops fit after max_epoch epochs
-- or max_batch batches (the Estimator adds one).

local StoppingHandler = class("StoppingHandler", M.EventHandler)
M.StoppingHandler = StoppingHandler

function StoppingHandler:__init(...)
  local a = core.args("StoppingHandler", {"max_epoch", "max_batch"}, {"max_epoch", "max_batch"}, ...)
  self.max_epoch = opt_int(a.max_epoch, "StoppingHandler", "max_epoch", 1)
  self.max_batch = opt_int(a.max_batch, "StoppingHandler", "max_batch", 1)
  self.current_batch, self.current_epoch, self.stop_training = 0, 0, false
end

function StoppingHandler:train_begin(est)
  self.max_epoch, self.max_batch = est.max_epoch, est.max_batch
  self.current_batch, self.current_epoch, self.stop_training = 0, 0, false
end

function StoppingHandler:batch_end()
  self.current_batch = self.current_batch + 1
  if self.current_batch == self.max_batch then self.stop_training = true end
  return self.stop_training
end

function StoppingHandler:epoch_end()
  self.current_epoch = self.current_epoch + 1
  if self.current_epoch == self.max_epoch then self.stop_training = true end
  return self.stop_training
end

---------------------------------------------------------------------------
-- MetricHandler(metrics, {priority = -1000}): resets the metrics at each
-- epoch's start and updates them after each batch (a Loss metric with the
-- losses).

local MetricHandler = class("MetricHandler", M.EventHandler)
M.MetricHandler = MetricHandler

function MetricHandler:__init(...)
  local a = core.args("MetricHandler", {"metrics", "priority"}, {"metrics", "priority"}, ...)
  self.metrics = M.check_metrics(a.metrics, "MetricHandler")
  self.priority = a.priority == nil and -1000 or core.num_arg(a.priority, "MetricHandler", "priority")
end

function MetricHandler:epoch_begin()
  for _, m in ipairs(self.metrics) do m:reset() end
end

function MetricHandler:batch_end(_, kw)
  for _, m in ipairs(self.metrics) do
    if core.instance_of(m, metric.Loss) then m:update(kw.label, kw.loss) else m:update(kw.label, kw.pred) end
  end
end

---------------------------------------------------------------------------
-- ValidationHandler(val_data, eval_fn, {epoch_period = 1, batch_period,
-- priority = -1000, event_handlers}): eval_fn(val_data, {batch_axis =,
-- event_handlers =}) every epoch_period epochs and every batch_period
-- batches.

local ValidationHandler = class("ValidationHandler", M.EventHandler)
M.ValidationHandler = ValidationHandler

function ValidationHandler:__init(...)
  local fname = "ValidationHandler"
  local a = core.args(fname, {"val_data", "eval_fn", "epoch_period", "batch_period", "priority", "event_handlers"},
                      {"val_data", "eval_fn", "epoch_period", "batch_period", "priority", "event_handlers"}, ...)
  if a.val_data == nil then core.error("ValidationHandler: val_data (a DataLoader) is required") end
  if type(a.eval_fn) ~= "function" and not (type(a.eval_fn) == "table" and getmetatable(a.eval_fn)
                                           and getmetatable(a.eval_fn).__call) then
    core.error(("ValidationHandler: eval_fn must be a function such as estimator.evaluate, got %s")
               :format(core.show_value(a.eval_fn)))
  end
  self.val_data, self.eval_fn = a.val_data, a.eval_fn
  self.epoch_period = opt_int(a.epoch_period == nil and 1 or a.epoch_period, fname, "epoch_period", 1)
  self.batch_period = opt_int(a.batch_period, fname, "batch_period", 1)
  self.priority = a.priority == nil and -1000 or core.num_arg(a.priority, fname, "priority")
  self.event_handlers = a.event_handlers
  self.current_batch, self.current_epoch = 0, 0
end

function ValidationHandler:train_begin()
  self.current_batch, self.current_epoch = 0, 0
end

function ValidationHandler:batch_end(est)
  self.current_batch = self.current_batch + 1
  if self.batch_period and self.current_batch % self.batch_period == 0 then
    self.eval_fn(self.val_data, {batch_axis = est.batch_axis, event_handlers = self.event_handlers})
  end
end

function ValidationHandler:epoch_end(est)
  self.current_epoch = self.current_epoch + 1
  if self.epoch_period and self.current_epoch % self.epoch_period == 0 then
    self.eval_fn(self.val_data, {batch_axis = est.batch_axis, event_handlers = self.event_handlers})
  end
end

---------------------------------------------------------------------------
-- LoggingHandler{log_interval = 'epoch', metrics, priority = math.huge}:
-- MXNet's log lines through estimator.logger; on a terminal, a progress bar
-- with an ETA during training epochs.

local LoggingHandler = class("LoggingHandler", M.EventHandler)
M.LoggingHandler = LoggingHandler

function LoggingHandler:__init(...)
  local fname = "LoggingHandler"
  local a = core.args(fname, {"log_interval", "metrics", "priority"}, {"log_interval", "metrics", "priority"}, ...)
  local li = a.log_interval == nil and "epoch" or a.log_interval
  if li ~= "epoch" and not (core.is_int(li) and li >= 1) then
    core.error(("LoggingHandler: log_interval must be 'epoch' or a positive integer, got %s"):format(core.show_value(li)))
  end
  self.log_interval = li
  self.metrics = M.check_metrics(a.metrics, fname)
  self.priority = a.priority == nil and math.huge or core.num_arg(a.priority, fname, "priority")
  self.batch_index, self.current_epoch, self.processed_samples, self.log_interval_time = 0, 0, 0, 0
end

local function is_training(metrics)
  for _, m in ipairs(metrics) do
    if tostring(m.name):find("training", 1, true) then return true end
  end
  return false
end

function LoggingHandler:_log(est, msg)
  if self._bar then self._bar:clear() end
  est.logger:info(msg)
end

function LoggingHandler:train_begin(est)
  self.train_start = clock()
  local opt = est.trainer.optimizer
  self:_log(est, ("Training begin: using optimizer %s with current learning rate %.4f ")
                 :format(tostring(getmetatable(opt)), est.trainer.learning_rate))
  if est.max_epoch then self:_log(est, ("Train for %d epochs."):format(est.max_epoch))
  else self:_log(est, ("Train for %d batches."):format(est.max_batch)) end
  self.current_epoch, self.batch_index, self.processed_samples, self.log_interval_time = 0, 0, 0, 0
end

function LoggingHandler:train_end(est)
  local msg = ("Train finished using total %ds with %d epochs. "):format(math.floor(clock() - self.train_start),
                                                                       self.current_epoch)
  self:_log(est, (msg .. metrics_text(self.metrics)):gsub("[, ]+$", ""))
end

function LoggingHandler:batch_begin()
  if self.log_interval ~= "epoch" then self.batch_start = clock() end
end

function LoggingHandler:batch_end(est, kw)
  if self.log_interval ~= "epoch" then
    local batch_time = clock() - self.batch_start
    self.processed_samples = self.processed_samples + kw.batch[1].shape[1]
    self.log_interval_time = self.log_interval_time + batch_time
    if self.batch_index % self.log_interval == 0 then
      local msg = ("[Epoch %d][Batch %d][Samples %d] time/interval: %.3fs "):format(
                   self.current_epoch, self.batch_index, self.processed_samples, self.log_interval_time)
      self.log_interval_time = 0
      self:_log(est, (msg .. metrics_text(self.metrics)):gsub("[, ]+$", ""))
    end
  end
  self.batch_index = self.batch_index + 1
  if self._bar then self._bar:update(self.batch_index, metrics_text(self.metrics)) end
end

function LoggingHandler:epoch_begin(est)
  self.epoch_start = clock()
  if is_training(self.metrics) then
    self:_log(est, ("[Epoch %d] Begin, current learning rate: %.4f"):format(self.current_epoch,
                                                                          est.trainer.learning_rate))
    if progress.isatty() then
      self._bar = progress.Bar{total = est.batches_per_epoch or 0, label = ("[Epoch %d]"):format(self.current_epoch)}
    end
  else
    self:_log(est, "Validation Begin")
  end
end

function LoggingHandler:epoch_end(est)
  local msg = ("[Epoch %d] Finished in %.3fs, "):format(self.current_epoch, clock() - self.epoch_start)
  self:_log(est, (msg .. metrics_text(self.metrics)):gsub("[, ]+$", ""))
  self._bar = nil
  self.current_epoch = self.current_epoch + 1
  self.batch_index = 0
end

---------------------------------------------------------------------------
-- CheckpointHandler(model_dir, {model_prefix = 'model', monitor, verbose = 0,
-- save_best = false, mode = 'auto', epoch_period = 1, batch_period,
-- max_checkpoints = 5, resume_from_checkpoint = false}): saves
-- <prefix>-epoch<E>batch<B>.params and .states (Trainer:save_states: the
-- optimizer's states, so that a resumed run continues as if it never
-- stopped), keeps the newest max_checkpoints, and <prefix>-best.params and
-- .states when the monitor improves (save_best).

local CheckpointHandler = class("CheckpointHandler", M.EventHandler)
M.CheckpointHandler = CheckpointHandler

local checkpoint_names = {"model_dir", "model_prefix", "monitor", "verbose", "save_best", "mode", "epoch_period",
                          "batch_period", "max_checkpoints", "resume_from_checkpoint"}

function CheckpointHandler:__init(...)
  local fname = "CheckpointHandler"
  local a = core.args(fname, checkpoint_names, checkpoint_names, ...)
  self.model_dir = core.make_dirs(a.model_dir, fname)
  self.model_prefix = a.model_prefix == nil and "model" or a.model_prefix
  core.path_arg(self.model_prefix, fname, "model_prefix")
  if self.model_prefix:find("/", 1, true) then
    core.error(("CheckpointHandler: model_prefix must be a file name prefix without '/', got %q"):format(self.model_prefix))
  end
  self.verbose = core.int_arg(a.verbose or 0, fname, "verbose", 0)
  self.save_best = a.save_best or false
  if type(self.save_best) ~= "boolean" then
    core.error(("CheckpointHandler: save_best must be a boolean, got %s"):format(core.show_value(self.save_best)))
  end
  self.monitor = monitor_arg(a.monitor, fname, self.save_best)
  self.mode = monitor_mode(a.mode, self.monitor, fname)
  self.epoch_period = opt_int(a.epoch_period == nil and 1 or a.epoch_period, fname, "epoch_period", 1)
  self.batch_period = opt_int(a.batch_period, fname, "batch_period", 1)
  self.max_checkpoints = core.int_arg(a.max_checkpoints == nil and 5 or a.max_checkpoints, fname, "max_checkpoints", 0)
  self.resume_from_checkpoint = a.resume_from_checkpoint or false
  if type(self.resume_from_checkpoint) ~= "boolean" then
    core.error(("CheckpointHandler: resume_from_checkpoint must be a boolean, got %s")
               :format(core.show_value(self.resume_from_checkpoint)))
  end
  self.current_batch, self.current_epoch, self.trained_epoch, self.trained_batch = 0, 0, -1, -1
  self.saved_checkpoints = {}
end

function CheckpointHandler:train_begin(est)
  self.current_epoch, self.current_batch = 0, 0
  if self.save_best then self.best = self.mode == "max" and -math.huge or math.huge end
  if self.resume_from_checkpoint then
    local by_epoch = est.max_epoch ~= nil
    if (by_epoch and (not self.epoch_period or self.batch_period)) or
       (not by_epoch and (not self.batch_period or self.epoch_period)) then
      core.error("CheckpointHandler: to resume from a checkpoint, save by the kind of period you train by: " ..
                 "training by epochs, give epoch_period and no batch_period (batch_period and " ..
                 "epoch_period = false when training by batches)")
    end
    self:_resume(est)
  end
end

function CheckpointHandler:batch_end(est)
  if self.batch_period and (self.current_batch + 1) % self.batch_period == 0 then self:_save_checkpoint(est) end
  self.current_batch = self.current_batch + 1
end

function CheckpointHandler:epoch_end(est)
  if self.epoch_period and (self.current_epoch + 1) % self.epoch_period == 0 then self:_save_checkpoint(est) end
  self.current_epoch = self.current_epoch + 1
end

function CheckpointHandler:_save_checkpoint(est)
  local epoch, batch = self.current_epoch, self.current_batch
  if self.resume_from_checkpoint and self.trained_epoch >= 0 then
    epoch = self.current_epoch + self.trained_epoch + 1
    batch = self.current_batch + self.trained_batch + (est.max_epoch and 0 or 1)
  end
  local prefix = ("%s-epoch%dbatch%d"):format(self.model_prefix, epoch, batch)
  self:_save(est, prefix)
  self.saved_checkpoints[#self.saved_checkpoints + 1] = prefix
  while #self.saved_checkpoints > self.max_checkpoints do
    local old = table.remove(self.saved_checkpoints, 1)
    os.remove(self.model_dir .. "/" .. old .. ".params")
    os.remove(self.model_dir .. "/" .. old .. ".states")
  end
  if self.verbose > 0 then
    est.logger:info(("[Epoch %d] CheckpointHandler: trained total %d batches, saving model at %s with prefix: %s")
                    :format(self.current_epoch, self.current_batch + 1, self.model_dir, prefix))
  end
  if self.save_best then
    local name, value = self.monitor:get()
    if value ~= value then
      core.warn(("CheckpointHandler: skipping save best because %s is not updated; pass one of the metrics of " ..
                 "estimator.train_metrics and estimator.val_metrics as monitor"):format(tostring(name)))
    elseif better(self.mode, value, self.best) then
      if self.verbose > 0 then
        est.logger:info(("[Epoch %d] CheckpointHandler: %s improved from %0.5f to %0.5f, updating best model at %s " ..
                         "with prefix: %s-best"):format(self.current_epoch, name, self.best, value, self.model_dir,
                                                        self.model_prefix))
      end
      self:_save(est, self.model_prefix .. "-best")
      self.best = value
    elseif self.verbose > 0 then
      est.logger:info(("[Epoch %d] CheckpointHandler: %s did not improve from %0.5f, skipping updating best model")
                      :format(self.current_epoch, name, self.best))
    end
  end
end

-- The parameters and the trainer's states.
function CheckpointHandler:_save(est, prefix)
  local base = self.model_dir .. "/" .. prefix
  est.net:save_parameters(base .. ".params")
  est.trainer:save_states(base .. ".states")
end

-- The checkpoints in model_dir, oldest first: {epoch =, batch =, prefix =}.
function CheckpointHandler:_found()
  local found = {}
  local pattern = "^" .. self.model_prefix:gsub("%p", "%%%0") .. "%-epoch(%d+)batch(%d+)%.params$"
  for _, e in ipairs(core.list_dir(self.model_dir, "CheckpointHandler")) do
    local ep, b = e.name:match(pattern)
    if ep then
      found[#found + 1] = {epoch = tonumber(ep), batch = tonumber(b), prefix = e.name:sub(1, -8)}
    end
  end
  table.sort(found, function(x, y) return x.epoch < y.epoch or (x.epoch == y.epoch and x.batch < y.batch) end)
  return found
end

function CheckpointHandler:_resume(est)
  local found = self:_found()
  if #found == 0 then
    est.logger:info(("CheckpointHandler: No checkpoint found, training from scratch for %d %s")
                    :format(est.max_batch or est.max_epoch, est.max_batch and "batches" or "epochs"))
    return
  end
  local last = found[#found]
  self.trained_epoch, self.trained_batch = last.epoch, last.batch
  local msg = ("CheckpointHandler: Checkpoint resumed from epoch %d batch %d, continue to train for ")
              :format(last.epoch, last.batch)
  if est.max_epoch then
    if last.epoch >= est.max_epoch - 1 then
      core.error(("CheckpointHandler: found a checkpoint with the maximum number of epochs (%d) reached; " ..
                  "train for more epochs, or give resume_from_checkpoint = false to train from scratch")
                 :format(est.max_epoch))
    end
    est.max_epoch = est.max_epoch - last.epoch - 1
    msg = msg .. ("%d epochs"):format(est.max_epoch)
  else
    if last.batch >= est.max_batch - 1 then
      core.error(("CheckpointHandler: found a checkpoint with the maximum number of batches (%d) reached; " ..
                  "train for more batches, or give resume_from_checkpoint = false to train from scratch")
                 :format(est.max_batch))
    end
    est.max_batch = est.max_batch - last.batch - 1
    msg = msg .. ("%d batches"):format(est.max_batch)
  end
  for _, f in ipairs(found) do self.saved_checkpoints[#self.saved_checkpoints + 1] = f.prefix end
  local base = self.model_dir .. "/" .. last.prefix
  est.net:load_parameters(base .. ".params", {device = est.context})
  local states = io.open(base .. ".states", "rb")
  if states then -- (a checkpoint of parameters alone resumes with fresh optimizer states)
    states:close()
    est.trainer:load_states(base .. ".states")
  end
  est.logger:warning(msg)
end

---------------------------------------------------------------------------
-- EarlyStoppingHandler(monitor, {min_delta = 0, patience = 0, mode =
-- 'auto', baseline}): stops when the monitor has not improved by min_delta
-- for patience epochs.

local EarlyStoppingHandler = class("EarlyStoppingHandler", M.EventHandler)
M.EarlyStoppingHandler = EarlyStoppingHandler

function EarlyStoppingHandler:__init(...)
  local fname = "EarlyStoppingHandler"
  local names = {"monitor", "min_delta", "patience", "mode", "baseline"}
  local a = core.args(fname, names, names, ...)
  self.monitor = monitor_arg(a.monitor, fname, true)
  self.baseline = a.baseline ~= nil and core.num_arg(a.baseline, fname, "baseline") or nil
  self.patience = core.int_arg(a.patience or 0, fname, "patience", 0)
  local delta = core.num_arg(a.min_delta or 0, fname, "min_delta")
  if delta ~= delta then core.error("EarlyStoppingHandler: min_delta must be a number, got nan") end
  self.mode = monitor_mode(a.mode, self.monitor, fname)
  self.min_delta = self.mode == "max" and delta or -delta
  self.wait, self.stopped_epoch, self.current_epoch, self.stop_training = 0, 0, 0, false
end

function EarlyStoppingHandler:train_begin()
  self.wait, self.stopped_epoch, self.current_epoch, self.stop_training = 0, 0, 0, false
  if self.baseline ~= nil then self.best = self.baseline
  else self.best = self.mode == "max" and -math.huge or math.huge end
end

function EarlyStoppingHandler:epoch_end()
  local name, value = self.monitor:get()
  if value ~= value then
    core.warn(("EarlyStoppingHandler: %s is not updated; pass one of the metrics of estimator.train_metrics " ..
               "and estimator.val_metrics as monitor"):format(tostring(name)))
  elseif better(self.mode, value - self.min_delta, self.best) then
    self.best, self.wait = value, 0
  else
    self.wait = self.wait + 1
    if self.wait >= self.patience then
      self.stopped_epoch, self.stop_training = self.current_epoch, true
    end
  end
  self.current_epoch = self.current_epoch + 1
  return self.stop_training
end

function EarlyStoppingHandler:train_end(est)
  if self.stopped_epoch > 0 then
    est.logger:info(("[Epoch %d] EarlyStoppingHandler: early stopping due to %s not improving")
                    :format(self.stopped_epoch, tostring((self.monitor:get()))))
  end
end

---------------------------------------------------------------------------
-- GradientUpdateHandler{priority = -2000, clip_global_norm}: the
-- trainer's step with the batch's size (the sum of the losses' first
-- dimensions). clip_global_norm (luon's): first rescale the gradients so
-- that the mean gradient the optimizer applies has a global L2 norm of at
-- most that (gluon.utils.clip_global_norm on each device's gradients).

local GradientUpdateHandler = class("GradientUpdateHandler", M.EventHandler)
M.GradientUpdateHandler = GradientUpdateHandler

function GradientUpdateHandler:__init(...)
  local a = core.args("GradientUpdateHandler", {"priority"}, {"priority", "clip_global_norm"}, ...)
  self.priority = a.priority == nil and -2000 or core.num_arg(a.priority, "GradientUpdateHandler", "priority")
  if a.clip_global_norm ~= nil and not (type(a.clip_global_norm) == "number" and a.clip_global_norm > 0) then
    core.error(("GradientUpdateHandler: clip_global_norm must be a positive number, got %s")
               :format(core.show_value(a.clip_global_norm)))
  end
  self.clip_global_norm = a.clip_global_norm
end

function GradientUpdateHandler:batch_end(est, kw)
  local loss = kw.loss
  if core.is_array(loss) then loss = {loss} end
  local batch_size = 0
  for _, l in ipairs(loss) do batch_size = batch_size + (l.shape[1] or 1) end
  local trainer = est.trainer
  if not self.clip_global_norm then
    trainer:step(batch_size)
    return
  end
  trainer:allreduce_grads()
  local per_device = {}
  for _, p in ipairs(est.net:collect_params():values()) do
    if p.grad_req ~= "null" then
      for k, g in ipairs(p:list_grad()) do
        per_device[k] = per_device[k] or {}
        table.insert(per_device[k], g)
      end
    end
  end
  for _, grads in ipairs(per_device) do utils.clip_global_norm(grads, self.clip_global_norm * batch_size) end
  trainer:update(batch_size)
end

---------------------------------------------------------------------------
-- LRSchedulerHandler(schedule, {period = 'epoch', priority = -3000})
-- (luon's; MXNet 1.9.1 has none): before each epoch (or batch) sets the
-- trainer's learning rate to schedule(n), n the epochs (batches) done
-- since fit began, for a function; an lr_scheduler object counts from 1,
-- as a Trainer calls it (its first update is number 1).

local LRSchedulerHandler = class("LRSchedulerHandler", M.EventHandler)
M.LRSchedulerHandler = LRSchedulerHandler

function LRSchedulerHandler:__init(...)
  local a = core.args("LRSchedulerHandler", {"schedule", "period", "priority"}, {"schedule", "period", "priority"}, ...)
  local s = a.schedule
  if type(s) ~= "function" and not (type(s) == "table" and getmetatable(s) and getmetatable(s).__call) then
    core.error(("LRSchedulerHandler: schedule must be a function of the epoch (or batch) count or an " ..
                "lr_scheduler such as lr_scheduler.FactorScheduler, got %s"):format(core.show_value(s)))
  end
  local period = a.period or "epoch"
  if period ~= "epoch" and period ~= "batch" then
    core.error(("LRSchedulerHandler: period must be 'epoch' or 'batch', got %s"):format(core.show_value(period)))
  end
  self.schedule, self.period = s, period
  self.priority = a.priority == nil and -3000 or core.num_arg(a.priority, "LRSchedulerHandler", "priority")
  self.count = 0
end

function LRSchedulerHandler:train_begin() self.count = 0 end

function LRSchedulerHandler:_apply(est)
  local lr = self.schedule(type(self.schedule) == "function" and self.count or self.count + 1)
  if type(lr) ~= "number" or not (lr >= 0) or lr == math.huge then
    core.error(("LRSchedulerHandler: the schedule gave %s at %s %d (expected a learning rate >= 0)")
               :format(core.show_value(lr), self.period, self.count))
  end
  est.trainer:set_learning_rate(lr)
  self.count = self.count + 1
end

function LRSchedulerHandler:epoch_begin(est)
  if self.period == "epoch" and est.training then self:_apply(est) end
end

function LRSchedulerHandler:batch_begin(est)
  if self.period == "batch" and est.training then self:_apply(est) end
end

---------------------------------------------------------------------------
-- CSVLogHandler(path, {batch_period, metrics, plot, priority = 500})
-- (luon's): writes the metrics to a CSV file (plot.read_csv's format), a
-- row at each epoch's end and one every batch_period batches; plot (a
-- .png path): redraws the curves (plot.curves) after each epoch.

local CSVLogHandler = class("CSVLogHandler", M.EventHandler)
M.CSVLogHandler = CSVLogHandler

function CSVLogHandler:__init(...)
  local fname = "CSVLogHandler"
  local names = {"path", "batch_period", "metrics", "plot", "priority"}
  local a = core.args(fname, names, names, ...)
  self.path = core.path_arg(a.path, fname, "path")
  self.batch_period = opt_int(a.batch_period, fname, "batch_period", 1)
  self.metrics = a.metrics ~= nil and M.check_metrics(a.metrics, fname) or nil
  if a.plot ~= nil then
    core.path_arg(a.plot, fname, "plot")
    if not a.plot:lower():match("%.png$") then
      core.error(("CSVLogHandler: plot must be a .png path, got %q"):format(a.plot))
    end
  end
  self.plot = a.plot
  self.priority = a.priority == nil and 500 or core.num_arg(a.priority, fname, "priority")
end

function CSVLogHandler:train_begin(est)
  local metrics = self.metrics
  if not metrics then
    metrics = {}
    for _, m in ipairs(est.train_metrics) do metrics[#metrics + 1] = m end
    for _, m in ipairs(est.val_metrics) do metrics[#metrics + 1] = m end
  end
  local names = {}
  for k, m in ipairs(metrics) do names[k] = tostring(m.name) end
  self._columns = metrics
  self._log = plot.CSVLog(self.path, names)
  self.epochs, self.batches, self.in_epoch = 0, 0, 0
end

-- A row: on 'batch' rows the training metrics only (the validation ones
-- still hold the last epoch's).
function CSVLogHandler:_row(est, kind)
  local epoch = self.epochs
  if kind == "batch" then
    local per = est.batches_per_epoch
    epoch = epoch + (per and per > 0 and math.min(self.in_epoch / per, 1) or 0)
  end
  local values = {}
  for k, m in ipairs(self._columns) do
    if kind == "epoch" or not tostring(m.name):find("validation", 1, true) then
      local _, v = m:get()
      values[k] = v
    end
  end
  self._log:write(epoch, self.batches, kind, values)
end

function CSVLogHandler:epoch_begin(est)
  if est.training then self.in_epoch = 0 end
end

function CSVLogHandler:batch_end(est)
  if not est.training then return end
  self.batches, self.in_epoch = self.batches + 1, self.in_epoch + 1
  if self.batch_period and self.batches % self.batch_period == 0 then self:_row(est, "batch") end
end

function CSVLogHandler:epoch_end(est)
  if not est.training then return end
  self.epochs = self.epochs + 1
  self:_row(est, "epoch")
  if self.plot then plot.curves(self.path, self.plot) end
end

return M
