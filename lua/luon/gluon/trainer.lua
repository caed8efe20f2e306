-- luon.gluon.trainer: gluon.Trainer, which applies an optimizer to a set of
-- Parameters: step(batch_size) = rescale by 1/batch_size, sum the gradients
-- of every replica into every replica (allreduce_grads), then one identical
-- optimizer update per replica (update). With kvstore = 'dist' the sums
-- also run across processes (luon.dist: NCCL for GPU gradients, which stay
-- on the GPU, MPI for CPU ones; see docs/distributed.md).
-- Not here: the update rules (luon.gluon.optimizer), the file of
-- save_states/load_states (luon.gluon.trainer_states).
local core = require("luon.core")
local ffi, C = core.ffi, core.C
local np = require("luon.np")
local optimizer = require("luon.gluon.optimizer")
local amp = require("luon.amp")

local trainer = {}

---------------------------------------------------------------------------
-- Summing replicas. reduce_replicas(grads, op): grads is a list of arrays of
-- one shape, one per device; afterwards each holds the sum (or, with op
-- "mean", the mean) of all of them, bit-identical: one call of the core's
-- all-reduce (luon_allreduce: one threaded pass over logical CPU devices;
-- copies and adds on the first replica's device otherwise).

local replica_ptrs = ffi.new("luon_tensor*[64]")
local function reduce_replicas(grads, op)
  local n = #grads
  if n < 2 then return end
  if n > 64 then core.error(("Trainer: %d replicas, at most 64"):format(n)) end
  for k = 1, n do replica_ptrs[k - 1] = grads[k].t end
  core.check(C.luon_allreduce(n, replica_ptrs, op == "mean" and 1 or 0))
end
trainer.reduce_replicas = reduce_replicas

---------------------------------------------------------------------------
-- Parameters given to a Trainer

local function is_parameter(p)
  return type(p) == "table" and type(p.list_data) == "function" and type(p.list_grad) == "function"
end

local function names_of(dict)
  local ks = dict:keys()
  if type(ks) == "function" then
    local list = {}
    for k in ks do list[#list + 1] = k end
    ks = list
  end
  return ks
end

-- A list of distinct Parameters in optimizer-index order: a ParameterDict
-- (has :keys()) or a plain name -> Parameter table in sorted name order, as
-- MXNet sorts dict keys; a Lua list as given.
local function param_list(params)
  if is_parameter(params) then return {params} end
  if type(params) ~= "table" then
    core.error(("Trainer: the first argument must be a list or table of Parameters " ..
                "(net:collect_params()), got %s"):format(
                  require("luon.gluon.block").is_block(params) and "a Block" or type(params)))
  end
  local list = {}
  local keys = {}
  if type(params.keys) == "function" and not is_parameter(params.keys) then
    keys = names_of(params)
  elseif params[1] ~= nil then
    for k = 1, #params do list[k] = params[k] end
  else
    for k in pairs(params) do
      if type(k) ~= "string" then
        core.error(("Trainer: a table of Parameters must be a list or keyed by names, got key %s")
                   :format(tostring(k)))
      end
      keys[#keys + 1] = k
    end
  end
  if #keys > 0 then
    keys = {unpack(keys)}
    table.sort(keys)
    for k = 1, #keys do list[k] = params[keys[k]] end
  end
  local seen, out = {}, {}
  for k, p in ipairs(list) do
    if not is_parameter(p) then
      core.error(("Trainer: the first argument must hold Parameters, but %s is a %s")
                 :format(keys[k] and ("'" .. keys[k] .. "'") or ("element " .. k), type(p)))
    end
    if not seen[p] then
      seen[p] = true
      out[#out + 1] = p
    end
  end
  return out
end

local function device_text(devs)
  local parts = {}
  for k, d in ipairs(devs) do parts[k] = tostring(d) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

---------------------------------------------------------------------------
-- Trainer

local Trainer = core.class("Trainer")
trainer.Trainer = Trainer

-- Trainer(params, optimizer, optimizer_params, {kvstore = "device",
-- update_on_kvstore = nil}), or Trainer(params, {optimizer =,
-- optimizer_params =, kvstore =, update_on_kvstore =}). optimizer: a name
-- ("sgd", "adam"; any case) or an Optimizer object. optimizer_params, a
-- table of the optimizer's own keywords, is never read as the options.
local trainer_known = {"optimizer", "optimizer_params", "kvstore", "compression_params", "update_on_kvstore"}
local options_known = {"kvstore", "compression_params", "update_on_kvstore"}
local function trainer_args(opt, optimizer_params, opts, ...)
  if select("#", ...) > 0 then
    core.error(("Trainer: at most 4 arguments (params, optimizer, optimizer_params, options), got %d")
               :format(4 + select("#", ...)))
  end
  if type(opt) == "table" and getmetatable(opt) == nil then
    if optimizer_params ~= nil or opts ~= nil then
      core.error("Trainer: with an options table as the second argument, give everything in it " ..
                 "(Trainer(params, {optimizer = 'sgd', optimizer_params = {...}}))")
    end
    local a = core.options(opt, "Trainer", trainer_known)
    return a.optimizer, a.optimizer_params, a
  end
  -- MXNet's fourth positional argument is kvstore
  if type(opts) == "string" or opts == false then opts = {kvstore = opts} end
  return opt, optimizer_params, core.options(opts, "Trainer", options_known)
end

function Trainer:__init(params, ...)
  local opt, optimizer_params, opts = trainer_args(...)
  if opts.compression_params ~= nil then
    core.error("Trainer: compression_params (gradient compression) is not supported; leave it out")
  end
  local plist = param_list(params)
  rawset(self, "_params", plist)
  local devices
  for _, p in ipairs(plist) do
    local devs = p:list_device()
    if devices == nil then
      devices = devs
    elseif device_text(devs) ~= device_text(devices) then
      core.error(("Trainer: all Parameters must be initialized on the same set of devices, but " ..
                  "Parameter '%s' is initialized on %s while previous Parameters are initialized on %s")
                 :format(tostring(p.name), device_text(devs), device_text(devices)))
    end
  end
  rawset(self, "_devices", devices or {})
  local kv = opts.kvstore
  if kv == nil then kv = "device" end
  local dist_kv = {dist = true, dist_sync = true, dist_sync_device = true, dist_device_sync = true}
  if kv ~= false and kv ~= "device" and kv ~= "local" and not dist_kv[kv] then
    core.error(("Trainer: kvstore '%s' is not supported (use 'device', 'local', 'dist' or false)")
               :format(tostring(kv)))
  end
  rawset(self, "_kvstore", kv)
  -- kvstore 'dist': across processes too (luon.dist); step(batch_size)
  -- then takes this process's batch size and the optimizer sees the sum
  rawset(self, "_dist", dist_kv[kv] and require("luon.gluon.trainer_dist") or false)
  -- Gradients are always summed into every replica and each replica updated
  -- with the same sum (MXNet's update_on_kvstore=false); the weights equal
  -- those of update_on_kvstore=true, so that flag is accepted and ignored.
  rawset(self, "_update_on_kvstore", false)

  local param_dict = {}
  for i, p in ipairs(plist) do param_dict[i] = p end
  if optimizer.is_optimizer(opt) then
    if optimizer_params ~= nil and next(optimizer_params) ~= nil then
      core.error("Trainer: optimizer_params must be nil if optimizer is an Optimizer object " ..
                 "instead of a name")
    end
    opt.param_dict = param_dict
  elseif type(opt) == "string" then
    if optimizer_params ~= nil and type(optimizer_params) ~= "table" then
      core.error(("Trainer: optimizer_params must be a table such as {learning_rate = 0.1}, got %s")
                 :format(core.show_value(optimizer_params)))
    end
    local kw = {}
    for k, v in pairs(optimizer_params or {}) do kw[k] = v end
    kw.param_dict = param_dict
    opt = optimizer.create(opt, kw)
  else
    core.error(("Trainer: optimizer must be a name such as 'sgd' or an Optimizer object, got %s")
               :format(type(opt)))
  end
  rawset(self, "optimizer", opt)
  rawset(self, "_optimizer", opt)
  rawset(self, "_scale", opt.rescale_grad)
  local updaters = {}
  for k, d in ipairs(self._devices) do updaters[k] = optimizer.get_updater(opt, tostring(d)) end
  rawset(self, "_updaters", updaters)
  if self._dist then self._dist.init(self) end
end

Trainer._strict = true -- trainer.lerning_rate: an error naming learning_rate

function Trainer._props.learning_rate(self)
  return self._optimizer.learning_rate
end

function Trainer:__newindex(k, v)
  if k == "learning_rate" then
    core.error("Trainer: learning_rate is read-only; use trainer:set_learning_rate(lr)")
  end
  rawset(self, k, v)
end

function Trainer:set_learning_rate(lr)
  self._optimizer:set_learning_rate(lr)
end

-- save_states(path): the optimizer's states, update counts and changing
-- hyper-parameters (not the weights: save_parameters), one copy of the
-- states (the first device's), in one safetensors file written atomically.
-- load_states(path): the same, onto every device; a file made for another
-- optimizer, scheduler or set of parameters is an error and changes nothing.
function Trainer:save_states(path)
  require("luon.gluon.trainer_states").save(self, path)
end

function Trainer:load_states(path)
  require("luon.gluon.trainer_states").load(self, path)
end

function Trainer:__tostring()
  return ("Trainer(%d parameters on %s, %s)")
         :format(#self._params, device_text(self._devices), tostring(self._optimizer))
end

local function check_batch_size(batch_size, fname)
  if type(batch_size) ~= "number" or not (batch_size > 0 and batch_size < math.huge) then
    core.error(("Trainer.%s: batch_size must be a positive number, got %s"):format(fname, tostring(batch_size)))
  end
end

local step_names = {"batch_size", "ignore_stale_grad"}

-- The arguments of step and update: (batch_size, ignore_stale_grad) or
-- (batch_size, {ignore_stale_grad =}).
local function step_args(fname, ...)
  local a = core.args("Trainer." .. fname, step_names, step_names, ...)
  check_batch_size(a.batch_size, fname)
  local ignore = a.ignore_stale_grad
  if ignore ~= nil and type(ignore) ~= "boolean" then
    core.error(("Trainer.%s: ignore_stale_grad must be true or false, got %s"):format(fname, core.show_value(ignore)))
  end
  return a.batch_size, ignore or false
end

-- step(batch_size, ignore_stale_grad): gradients are divided by batch_size
-- (the total over all devices), summed over replicas, and applied. A
-- parameter whose gradient no backward wrote since the last step is an
-- error, as MXNet's; with ignore_stale_grad it is skipped (not updated,
-- its optimizer state untouched).
function Trainer:step(...)
  local batch_size, ignore_stale_grad = step_args("step", ...)
  self:_check_stale(ignore_stale_grad)
  self._optimizer.rescale_grad = self._scale / batch_size
  rawset(self, "_local_batch", batch_size)
  self:allreduce_grads()
  rawset(self, "_local_batch", nil)
  self:_update(ignore_stale_grad)
end

-- Before anything changes: without ignore_stale_grad, every replica of
-- every trained parameter must have a gradient from a backward since the
-- last update (the core's per-array flag, MXNet's _fresh_grad).
function Trainer:_check_stale(ignore_stale_grad)
  if ignore_stale_grad then return end
  for _, p in ipairs(self._params) do
    if p.grad_req ~= "null" then
      local data = p._data or p:list_data() -- (list_data copies; it raises when uninitialized)
      for d = 1, #data do
        local w = data[d]
        if C.luon_tensor_grad_fresh(w.t) == 0 then
          core.error(("Gradient of Parameter `%s` on context %s has not been updated by backward since " ..
                      "last `step`. This could mean a bug in your model that made it only use a subset " ..
                      "of the Parameters (Blocks) for this iteration. If you are intentionally only using " ..
                      "a subset, call step with ignore_stale_grad = true to suppress this warning and skip " ..
                      "updating of Parameters with stale gradient"):format(tostring(p.name), tostring(w.device)))
        end
      end
    end
  end
end

-- The replica rule for state the optimizer does not update (grad_req
-- 'null': BatchNorm's running mean and variance, which each device updates
-- from its own part of the batch): after every update all replicas take
-- their mean, so every replica of every parameter stays identical.
function Trainer:_sync_states()
  if #self._devices >= 2 then
    for _, p in ipairs(self._params) do
      if p.grad_req == "null" then reduce_replicas(p:list_data(), "mean") end
    end
  end
  if self._dist then self._dist.sync_states(self) end
end

-- Sum each parameter's gradients over its replicas, into every replica.
function Trainer:allreduce_grads()
  if self._kvstore == false then return end
  if #self._devices >= 2 then
    for _, p in ipairs(self._params) do
      if p.grad_req ~= "null" then reduce_replicas(p:list_grad()) end
    end
  end
  if self._dist then self._dist.allreduce(self) end
end

-- update(batch_size, ignore_stale_grad): the second half of step, after
-- allreduce_grads().
function Trainer:update(...)
  local batch_size, ignore_stale_grad = step_args("update", ...)
  self:_check_stale(ignore_stale_grad)
  -- dist: batch_size is this process's; every process is assumed to have one as large
  if self._dist then batch_size = batch_size * self._dist.size() end
  self._optimizer.rescale_grad = self._scale / batch_size
  self:_update(ignore_stale_grad)
end

-- Update every trained parameter whose replicas all have fresh gradients
-- (all of them unless ignore_stale_grad: _check_stale ran), and clear the
-- flags. A parameter with a stale replica is skipped whole, so replicas
-- stay identical (MXNet would update its fresh replicas alone).
function Trainer:_update(ignore_stale_grad)
  if rawget(self, "_amp") and amp._before_update(self) then -- luon.amp: gradients overflowed, skip
    for _, p in ipairs(self._params) do
      if p.grad_req ~= "null" then
        for _, w in ipairs(p._data or p:list_data()) do C.luon_tensor_set_grad_fresh(w.t, 0) end
      end
    end
    return
  end
  local ndev = #self._updaters
  local per_dev = {}
  for d = 1, ndev do per_dev[d] = {indices = {}, grads = {}, weights = {}} end
  for i, p in ipairs(self._params) do
    local data = p.grad_req ~= "null" and (p._data or p:list_data())
    local fresh = data and true
    for d = 1, data and #data or 0 do
      if C.luon_tensor_grad_fresh(data[d].t) == 0 then fresh = false end
    end
    if data and (fresh or not ignore_stale_grad) then
      for d = 1, #data do C.luon_tensor_set_grad_fresh(data[d].t, 0) end
      local grads = p:list_grad()
      if #data ~= ndev then
        core.error(("Trainer: Parameter '%s' has %d replicas but the Trainer was made for %d devices %s; " ..
                    "make a new Trainer after initializing on other devices")
                   :format(tostring(p.name), #data, ndev, device_text(self._devices)))
      end
      for d = 1, ndev do
        local u = per_dev[d]
        local n = #u.indices + 1
        u.indices[n], u.grads[n], u.weights[n] = i, grads[d], data[d]
      end
    end
  end
  -- With summed gradients every replica would take the same step: apply the
  -- optimizer once, on the first replica, and copy the weights to the others
  -- (MXNet's kvstore 'device': reduce, update once, broadcast). Without a
  -- kvstore each replica keeps its own gradient and takes its own step.
  local once = ndev > 1 and self._kvstore ~= false
  for d = 1, once and 1 or ndev do
    local u = per_dev[d]
    self._updaters[d](u.indices, u.grads, u.weights)
  end
  if once then
    local w1 = per_dev[1].weights
    for d = 2, ndev do
      local wd = per_dev[d].weights
      for k = 1, #w1 do core.check(C.luon_tensor_copy(wd[k].t, w1[k].t)) end
    end
  end
  self:_sync_states()
end

return trainer
