-- luon.gluon.optimizer: MXNet's optimizers (SGD, Adam, NAG, RMSProp, AdaGrad,
-- AdaDelta, AdamW, Adamax, Nadam, LAMB, Signum, Ftrl) over the fused in-place
-- update ops, the Updater that keeps their states per device, and the
-- learning-rate schedulers (optimizer.lr_scheduler). Not here: gradient
-- aggregation across devices (luon.gluon.trainer), multi-precision copies.
local core = require("luon.core")
local np = require("luon.np")

local op = core.op_ids
local optimizer = {}

local class, parse_args = core.class, core.args

local function set_of(...)
  local s = {}
  for _, list in ipairs({...}) do for _, k in ipairs(list) do s[k] = true end end
  return s
end

---------------------------------------------------------------------------
-- Learning-rate schedulers: sched(num_update) -> lr, num_update counting
-- from 1 at the first update. MXNet's lr_scheduler.py, including its state
-- (FactorScheduler lowers base_lr as updates pass).

local lr_scheduler = {}
optimizer.lr_scheduler = lr_scheduler

local sched_common = {"base_lr", "warmup_steps", "warmup_begin_lr", "warmup_mode"}

local LRScheduler = class("LRScheduler")
lr_scheduler.LRScheduler = LRScheduler

function LRScheduler:__init(a)
  a = a or {}
  self.base_lr = a.base_lr or 0.01
  self.warmup_steps = a.warmup_steps or 0
  self.warmup_final_lr = self.base_lr
  self.warmup_begin_lr = a.warmup_begin_lr or 0
  self.warmup_mode = a.warmup_mode or "linear"
  local name = getmetatable(self).__name
  if self.warmup_steps % 1 ~= 0 or self.warmup_steps < 0 then
    core.error(("%s: warmup_steps must be an integer >= 0, got %s"):format(name, tostring(self.warmup_steps)))
  end
  if self.warmup_begin_lr > self.warmup_final_lr then
    core.error(("%s: base_lr (%g) has to be higher than warmup_begin_lr (%g)")
               :format(name, self.warmup_final_lr, self.warmup_begin_lr))
  end
  if self.warmup_mode ~= "linear" and self.warmup_mode ~= "constant" then
    core.error(("%s: warmup_mode must be 'linear' or 'constant', got %s"):format(name, tostring(self.warmup_mode)))
  end
end

function LRScheduler:get_warmup_lr(num_update)
  if self.warmup_mode == "linear" then
    return self.warmup_begin_lr + (self.warmup_final_lr - self.warmup_begin_lr) * num_update / self.warmup_steps
  end
  return self.warmup_begin_lr
end

function LRScheduler:__call(num_update)
  if num_update < self.warmup_steps then return self:get_warmup_lr(num_update) end
  return self.base_lr
end

-- The argument checks the schedulers share (MXNet's messages).
local function check_factor(name, factor)
  if factor > 1 then core.error(("%s: factor must be no more than 1 to make lr reduce, got %g"):format(name, factor)) end
end
local function check_max_update(name, v)
  if type(v) ~= "number" or v < 1 or v % 1 ~= 0 then core.error(name .. ": max_update must be an integer >= 1") end
end

-- FactorScheduler(step, {factor = 1, stop_factor_lr = 1e-8, base_lr = 0.01, warmup...}):
-- lr = base_lr * factor^floor((num_update - 1) / step), never below stop_factor_lr.
local FactorScheduler = class("FactorScheduler", LRScheduler)
lr_scheduler.FactorScheduler = FactorScheduler
local factor_known = set_of({"step", "factor", "stop_factor_lr"}, sched_common)
function FactorScheduler:__init(...)
  local a = parse_args("FactorScheduler", {"step", "factor", "stop_factor_lr", "base_lr"}, factor_known, ...)
  LRScheduler.__init(self, a)
  local step, factor = a.step, a.factor or 1
  if type(step) ~= "number" or step < 1 then
    core.error(("FactorScheduler: step must be a number >= 1, got %s"):format(tostring(step)))
  end
  check_factor("FactorScheduler", factor)
  self.step, self.factor, self.stop_factor_lr, self.count = step, factor, a.stop_factor_lr or 1e-8, 0
end

function FactorScheduler:__call(num_update)
  if num_update < self.warmup_steps then return self:get_warmup_lr(num_update) end
  while num_update > self.count + self.step do
    self.count = self.count + self.step
    self.base_lr = self.base_lr * self.factor
    if self.base_lr < self.stop_factor_lr then self.base_lr = self.stop_factor_lr end
  end
  return self.base_lr
end

-- MultiFactorScheduler({s1, s2, ...}, {factor = 1, base_lr = 0.01, warmup...}):
-- lr is multiplied by factor once num_update passes each step.
local MultiFactorScheduler = class("MultiFactorScheduler", LRScheduler)
lr_scheduler.MultiFactorScheduler = MultiFactorScheduler
local multi_known = set_of({"step", "factor"}, sched_common)
function MultiFactorScheduler:__init(...)
  local a = parse_args("MultiFactorScheduler", {"step", "factor", "base_lr"}, multi_known, ...)
  LRScheduler.__init(self, a)
  local step, factor = a.step, a.factor or 1
  if type(step) ~= "table" or #step < 1 then
    core.error("MultiFactorScheduler: step must be a non-empty list of increasing integers")
  end
  for i, s in ipairs(step) do
    if s < 1 then core.error(("MultiFactorScheduler: step[%d] = %g; steps must be >= 1"):format(i, s)) end
    if i > 1 and s <= step[i - 1] then
      core.error("MultiFactorScheduler: schedule step must be an increasing integer list")
    end
  end
  check_factor("MultiFactorScheduler", factor)
  self.step, self.factor, self.cur_step_ind, self.count = step, factor, 1, 0
end

function MultiFactorScheduler:__call(num_update)
  if num_update < self.warmup_steps then return self:get_warmup_lr(num_update) end
  while self.cur_step_ind <= #self.step and num_update > self.step[self.cur_step_ind] do
    self.count = self.step[self.cur_step_ind]
    self.cur_step_ind = self.cur_step_ind + 1
    self.base_lr = self.base_lr * self.factor
  end
  return self.base_lr
end

-- PolyScheduler(max_update, {base_lr = 0.01, pwr = 2, final_lr = 0, warmup...})
local PolyScheduler = class("PolyScheduler", LRScheduler)
lr_scheduler.PolyScheduler = PolyScheduler
local poly_known = set_of({"max_update", "pwr", "final_lr"}, sched_common)
function PolyScheduler:__init(...)
  local a = parse_args("PolyScheduler", {"max_update", "base_lr", "pwr", "final_lr"}, poly_known, ...)
  LRScheduler.__init(self, a)
  check_max_update("PolyScheduler", a.max_update)
  self.power, self.base_lr_orig, self.max_update = a.pwr or 2, self.base_lr, a.max_update
  self.final_lr = a.final_lr or 0
  self.max_steps = self.max_update - self.warmup_steps
end

function PolyScheduler:__call(num_update)
  if num_update < self.warmup_steps then return self:get_warmup_lr(num_update) end
  if num_update <= self.max_update then
    self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr)
                   * (1 - (num_update - self.warmup_steps) / self.max_steps) ^ self.power
  end
  return self.base_lr
end

-- CosineScheduler(max_update, {base_lr = 0.01, final_lr = 0, warmup...})
local CosineScheduler = class("CosineScheduler", LRScheduler)
lr_scheduler.CosineScheduler = CosineScheduler
local cos_known = set_of({"max_update", "final_lr"}, sched_common)
function CosineScheduler:__init(...)
  local a = parse_args("CosineScheduler", {"max_update", "base_lr", "final_lr"}, cos_known, ...)
  LRScheduler.__init(self, a)
  check_max_update("CosineScheduler", a.max_update)
  self.base_lr_orig, self.max_update, self.final_lr = self.base_lr, a.max_update, a.final_lr or 0
  self.max_steps = self.max_update - self.warmup_steps
end

function CosineScheduler:__call(num_update)
  if num_update < self.warmup_steps then return self:get_warmup_lr(num_update) end
  if num_update <= self.max_update then
    self.base_lr = self.final_lr + (self.base_lr_orig - self.final_lr)
                   * (1 + math.cos(math.pi * (num_update - self.warmup_steps) / self.max_steps)) / 2
  end
  return self.base_lr
end

---------------------------------------------------------------------------
-- Optimizer base: learning rate (or scheduler), wd, rescale_grad,
-- clip_gradient, per-index update counts per device (num_update = the
-- largest), lr_mult/wd_mult read live from param_dict[index].

local Optimizer = class("Optimizer")
optimizer.Optimizer = Optimizer

local base_args = {"rescale_grad", "param_idx2name", "wd", "clip_gradient", "learning_rate",
                   "lr_scheduler", "begin_num_update", "multi_precision", "param_dict",
                   "aggregate_num", "use_fused_step", "lazy_update", "sym"}

-- a.key, when given, must be a number; in [lo, hi) when they are given.
local function check_num(name, a, key, lo, hi)
  local v = a[key]
  if v == nil then return end
  if type(v) ~= "number" or v ~= v or (lo and v < lo) or (hi and v >= hi) then
    core.error(("%s: %s must be a number%s, got %s"):format(name, key,
               lo and (hi and (" in [%g, %g)"):format(lo, hi) or (" >= %g"):format(lo)) or "",
               core.show_value(v)))
  end
end

function Optimizer:__init(a)
  local cls = getmetatable(self)
  local name = cls.__name
  if rawget(cls, "_extended") and cls.__init == Optimizer.__init then
    -- a class made by extend without its own __init takes the base keywords only
    a = core.options(a, name, base_args, nil, "the keywords")
  end
  a = a or {}
  for _, key in ipairs({"learning_rate", "wd", "rescale_grad", "begin_num_update"}) do check_num(name, a, key) end
  check_num(name, a, "clip_gradient", 0)
  local sched = a.lr_scheduler
  local callable_table = type(sched) == "table" and type(getmetatable(sched)) == "table"
                         and getmetatable(sched).__call ~= nil
  if sched ~= nil and type(sched) ~= "function" and not callable_table then
    core.error(("%s: lr_scheduler must be a scheduler such as lr_scheduler.FactorScheduler or a " ..
                "function of the update count, got %s"):format(name, core.show_value(sched)))
  end
  if type(sched) == "function" and a.learning_rate ~= nil then
    -- MXNet sets base_lr on the scheduler, which a function lacks (Python
    -- raises AttributeError); the function alone gives the rate
    core.error(("%s: learning_rate and a function lr_scheduler both given; the function gives the " ..
                "learning rate (leave learning_rate out)"):format(name))
  end
  rawset(self, "rescale_grad", a.rescale_grad or 1.0)
  rawset(self, "lr_scheduler", a.lr_scheduler)
  local lr = a.learning_rate
  if self.lr_scheduler == nil and lr == nil then lr = 0.01 end
  if self.lr_scheduler ~= nil and lr ~= nil and type(self.lr_scheduler) == "table" then
    -- MXNet: the optimizer's learning_rate overrides the scheduler's base_lr.
    -- MXNet leaves the warmup target and Poly/Cosine's starting lr at the old
    -- base_lr (the lr jumps after warmup); here they follow it too.
    local s = self.lr_scheduler
    s.base_lr, s.warmup_final_lr = lr, lr
    if s.base_lr_orig ~= nil then s.base_lr_orig = lr end
  end
  if lr ~= nil and type(lr) ~= "number" then
    core.error(("%s: learning_rate must be a number, got %s"):format(name, type(lr)))
  end
  rawset(self, "lr", lr)
  rawset(self, "wd", a.wd or 0)
  rawset(self, "clip_gradient", a.clip_gradient)
  rawset(self, "begin_num_update", a.begin_num_update or 0)
  rawset(self, "num_update", self.begin_num_update)
  rawset(self, "multi_precision", a.multi_precision or false) -- accepted, ignored
  rawset(self, "param_dict", a.param_dict or {})
  rawset(self, "idx2name", a.param_idx2name or {})
  rawset(self, "lr_mult", {})
  rawset(self, "wd_mult", {})
  rawset(self, "_all_index_update_counts", {[0] = {}})
  rawset(self, "_index_update_count", self._all_index_update_counts[0])
end

-- opt.learning_rate: the scheduler's value at num_update, or the fixed lr.
function Optimizer._props.learning_rate(self)
  if self.lr_scheduler ~= nil then return self.lr_scheduler(self.num_update) end
  return self.lr
end

function Optimizer:__newindex(k, v)
  if k == "learning_rate" then return self:set_learning_rate(v) end
  rawset(self, k, v)
end

function Optimizer:set_learning_rate(lr)
  if self.lr_scheduler ~= nil then
    core.error("set_learning_rate: the optimizer has an lr_scheduler; the learning rate can only be " ..
               "set when there is no scheduler")
  end
  if type(lr) ~= "number" then core.error(("set_learning_rate: expected a number, got %s"):format(type(lr))) end
  rawset(self, "lr", lr)
end

-- lr_mult/wd_mult by index or name (when param_dict has no entry).
local function set_mult(self, field, args)
  local name = getmetatable(self).__name
  if type(args) ~= "table" then
    core.error(("%s.set_%s: expected a table of parameter name -> multiplier, got %s")
               :format(name, field, core.show_value(args)))
  end
  for k, v in pairs(args) do
    if type(v) ~= "number" then
      core.error(("%s.set_%s: the multiplier of '%s' must be a number, got %s")
                 :format(name, field, tostring(k), core.show_value(v)))
    end
    self[field][k] = v
  end
end
function Optimizer:set_lr_mult(args) set_mult(self, "lr_mult", args) end
function Optimizer:set_wd_mult(args) set_mult(self, "wd_mult", args) end

-- Counters per device: key is anything identifying the updater's device.
function Optimizer:_set_current_device(key)
  local c = self._all_index_update_counts[key]
  if not c then
    c = {}
    self._all_index_update_counts[key] = c
  end
  self._index_update_count = c
end

-- _update_count(indices) or _update_count(index), as MXNet 1.x's per-index update calls it.
function Optimizer:_update_count(indices)
  if type(indices) ~= "table" then indices = {indices} end
  local counts = self._index_update_count
  for _, idx in ipairs(indices) do
    local c = (counts[idx] or self.begin_num_update) + 1
    counts[idx] = c
    if c > self.num_update then self.num_update = c end
  end
end

local function mult_of(self, field, index)
  local p = self.param_dict[index]
  if p ~= nil then return p[field] or 1 end
  local m = self[field][index]
  if m ~= nil then return m end
  local name = self.idx2name[index]
  if name ~= nil then return self[field][name] or 1 end
  return 1
end

function Optimizer:_get_lr(index)
  local lr = self.lr_scheduler ~= nil and self.lr_scheduler(self.num_update) or self.lr
  return lr * mult_of(self, "lr_mult", index)
end

function Optimizer:_get_wd(index)
  return self.wd * mult_of(self, "wd_mult", index)
end

-- The clip value the fused kernels take: < 0 means none (None and 0 alike,
-- as MXNet's fused path).
function Optimizer:_clip()
  local c = self.clip_gradient
  if c == nil or c == false or c == 0 then return -1 end
  return c
end

function Optimizer:create_state(_, _) return nil end

-- update(indices, weights, grads, states): count the updates, then step.
-- step(indices, weights, grads, states): one step for each index, in place
-- (MXNet 2.x's split); luon's optimizers write _step_one(index, w, g, state).
-- A class made by Optimizer:extend defines step (lists, as MXNet 2.x) or
-- update(index, weight, grad, state) (one index, as MXNet 1.x: it counts
-- with self:_update_count(index) itself; the Updater calls it per index).
function Optimizer:update(indices, weights, grads, states)
  if type(indices) == "number" then -- MXNet 1.x's update(index, weight, grad, state)
    indices, weights, grads, states = {indices}, {weights}, {grads}, {states}
  end
  if type(indices) ~= "table" or type(weights) ~= "table" or type(grads) ~= "table" then
    core.error(("Optimizer.update: expects (index, weight, grad, state) or lists of them (indices, weights, " ..
                "grads, states), got %s"):format(core.show_value(indices)))
  end
  self:_update_count(indices)
  self:step(indices, weights, grads, states)
end

function Optimizer:step(indices, weights, grads, states)
  for k = 1, #indices do
    self:_step_one(indices[k], weights[k], grads[k], states[k])
  end
end

Optimizer._required = {{"update", "step", "_step_one",
  text = "update(index, weight, grad, state) (as MXNet 1.x) or step(indices, weights, grads, states) (as MXNet 2.x)"}}

-- Whether opt's update is a per-index one (MXNet 1.x's signature, written
-- in a class made by extend).
local function per_index_update(opt)
  local c = getmetatable(opt)
  while c and rawget(c, "update") == nil do c = getmetatable(c) and getmetatable(c).__index end
  return c ~= nil and c ~= Optimizer and rawget(c, "_extended") == true
end

function Optimizer:__tostring()
  return ("%s(learning_rate=%s, wd=%g, rescale_grad=%g, clip_gradient=%s)")
         :format(getmetatable(self).__name, tostring(self.learning_rate), self.wd, self.rescale_grad,
                 tostring(self.clip_gradient))
end

-- The attributes of a fused update op: the slots every update has; the
-- caller adds its own (core/luon_ops.def) and calls the op at once.
local S = core.slot
local function update_attrs(lr, wd, rescale, clip)
  local a = core.attrs()
  a.f[S.OPT_LR], a.f[S.OPT_WD], a.f[S.OPT_RESCALE], a.f[S.OPT_CLIP] = lr, wd, rescale, clip
  return a
end

---------------------------------------------------------------------------
-- SGD: g = clip(rescale_grad * grad) + wd * w;
-- momentum 0: w -= lr * g;  else mom = momentum * mom - lr * g; w += mom.

local SGD = class("SGD", Optimizer)
optimizer.SGD = SGD
local sgd_known = set_of({"momentum"}, base_args)

function SGD:__init(...)
  local a = parse_args("SGD", {"learning_rate", "momentum"}, sgd_known, ...)
  check_num("SGD", a, "momentum", 0)
  Optimizer.__init(self, a)
  rawset(self, "momentum", a.momentum or 0)
end

function SGD:create_state(_, weight)
  if self.momentum ~= 0 then return np.zeros_like(weight) end
  return nil
end

function SGD:_step_one(index, w, g, mom)
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local a = update_attrs(lr, wd, self.rescale_grad, self:_clip())
  if mom ~= nil then
    a.f[S.SGD_MOMENTUM] = self.momentum
    core.call(op.sgd_mom_update, {w, g, mom}, a)
  else
    core.call(op.sgd_update, {w, g}, a)
  end
end

---------------------------------------------------------------------------
-- Adam: t = this index's update count; lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t);
-- g = clip(rescale_grad * grad) + wd * w; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
-- w -= lr_t * m / (sqrt(v) + epsilon).

local Adam = class("Adam", Optimizer)
optimizer.Adam = Adam
local adam_known = set_of({"beta1", "beta2", "epsilon"}, base_args)

function Adam:__init(...)
  local a = parse_args("Adam", {"learning_rate", "beta1", "beta2", "epsilon"}, adam_known, ...)
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.001 end
  check_num("Adam", a, "beta1", 0, 1)
  check_num("Adam", a, "beta2", 0, 1)
  check_num("Adam", a, "epsilon", 0)
  Optimizer.__init(self, a)
  rawset(self, "beta1", a.beta1 or 0.9)
  rawset(self, "beta2", a.beta2 or 0.999)
  rawset(self, "epsilon", a.epsilon or 1e-8)
end

function Adam:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)}
end

function Adam:_step_one(index, w, g, state)
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local t = self._index_update_count[index]
  lr = lr * math.sqrt(1 - self.beta2 ^ t) / (1 - self.beta1 ^ t)
  local a = update_attrs(lr, wd, self.rescale_grad, self:_clip())
  a.f[S.ADAM_BETA1], a.f[S.ADAM_BETA2], a.f[S.ADAM_EPSILON] = self.beta1, self.beta2, self.epsilon
  core.call(op.adam_update, {w, g, state[1], state[2]}, a)
end

---------------------------------------------------------------------------
-- The checks of the optimizers' own keywords (a.key, when given).

local function check_bool(name, a, key)
  local v = a[key]
  if v ~= nil and type(v) ~= "boolean" then
    core.error(("%s: %s must be true or false, got %s"):format(name, key, core.show_value(v)))
  end
end

-- MXNet 2.0's spelling `new` of 1.9.1's `old` (same meaning): read as old;
-- both given is an error.
local function renamed(name, a, old, new)
  if a[new] == nil then return end
  if a[old] ~= nil then
    core.error(("%s: %s and %s both given; %s is MXNet 2.0's name for %s, give one"):format(name, old, new, new, old))
  end
  a[old], a[new] = a[new], nil
end

-- clip_weights as the kernels take it: < 0 means none (None and 0 alike, as
-- MXNet passes it only when truthy).
local function clip_or_none(v)
  if v == nil or v == false or v == 0 then return -1 end
  return v
end

---------------------------------------------------------------------------
-- NAG (Nesterov momentum; MXNet's nag_mom_update): g = clip(rescale_grad *
-- grad) + wd * w; mom0 = momentum * mom; w += -mom0 + (1 + momentum) *
-- (mom0 - lr * g); mom = mom0 - lr * g, its wd * w with the new w (MXNet's
-- kernel). momentum 0 (the default): sgd_update.

local NAG = class("NAG", Optimizer)
optimizer.NAG = NAG
local nag_known = set_of({"momentum"}, base_args)

function NAG:__init(...)
  local a = parse_args("NAG", {"momentum"}, nag_known, ...)
  check_num("NAG", a, "momentum", 0)
  Optimizer.__init(self, a)
  rawset(self, "momentum", a.momentum or 0)
end

function NAG:create_state(_, weight)
  if self.momentum ~= 0 then return np.zeros_like(weight) end
  return nil
end

function NAG:_step_one(index, w, g, mom)
  local a = update_attrs(self:_get_lr(index), self:_get_wd(index), self.rescale_grad, self:_clip())
  if mom ~= nil then
    a.f[S.NAG_MOMENTUM] = self.momentum
    core.call(op.nag_mom_update, {w, g, mom}, a)
  else
    core.call(op.sgd_update, {w, g}, a)
  end
end

---------------------------------------------------------------------------
-- RMSProp: g = clip(rescale_grad * grad + wd * w);
-- plain (Tieleman & Hinton): n = (1 - gamma1) g^2 + gamma1 n; w -= lr g / sqrt(n + epsilon);
-- centered (Graves): also g_avg = (1 - gamma1) g + gamma1 g_avg,
--   delta = gamma2 delta - lr g / sqrt(n - g_avg^2 + epsilon); w += delta;
-- then w = clip(w, clip_weights). MXNet 2.0's rho and momentum are read as gamma1 and gamma2.

local RMSProp = class("RMSProp", Optimizer)
optimizer.RMSProp = RMSProp
local rmsprop_known = set_of({"gamma1", "gamma2", "epsilon", "centered", "clip_weights", "rho", "momentum"},
                             base_args)

function RMSProp:__init(...)
  local a = parse_args("RMSProp", {"learning_rate", "gamma1", "gamma2", "epsilon", "centered", "clip_weights"},
                       rmsprop_known, ...)
  renamed("RMSProp", a, "gamma1", "rho")
  renamed("RMSProp", a, "gamma2", "momentum")
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.001 end
  check_num("RMSProp", a, "gamma1", 0, 1)
  check_num("RMSProp", a, "gamma2", 0, 1)
  check_num("RMSProp", a, "epsilon", 0)
  check_bool("RMSProp", a, "centered")
  if a.clip_weights ~= false then check_num("RMSProp", a, "clip_weights", 0) end
  Optimizer.__init(self, a)
  rawset(self, "gamma1", a.gamma1 or 0.9)
  rawset(self, "gamma2", a.gamma2 or 0.9)
  rawset(self, "epsilon", a.epsilon or 1e-8)
  rawset(self, "centered", a.centered or false)
  rawset(self, "clip_weights", a.clip_weights or nil)
end

function RMSProp:create_state(_, weight)
  if self.centered then return {np.zeros_like(weight), np.zeros_like(weight), np.zeros_like(weight)} end
  return {np.zeros_like(weight)}
end

function RMSProp:_step_one(index, w, g, state)
  local a = update_attrs(self:_get_lr(index), self:_get_wd(index), self.rescale_grad, self:_clip())
  if self.centered then
    a.f[S.RMSPROPALEX_GAMMA1], a.f[S.RMSPROPALEX_GAMMA2] = self.gamma1, self.gamma2
    a.f[S.RMSPROPALEX_EPSILON], a.f[S.RMSPROPALEX_CLIP_WEIGHTS] = self.epsilon, clip_or_none(self.clip_weights)
    core.call(op.rmspropalex_update, {w, g, state[1], state[2], state[3]}, a)
  else
    a.f[S.RMSPROP_GAMMA1], a.f[S.RMSPROP_EPSILON] = self.gamma1, self.epsilon
    a.f[S.RMSPROP_CLIP_WEIGHTS] = clip_or_none(self.clip_weights)
    core.call(op.rmsprop_update, {w, g, state[1]}, a)
  end
end

---------------------------------------------------------------------------
-- AdaGrad (MXNet 1.9.1's dense step): g = clip(rescale_grad * grad);
-- history += g^2; w += (g / sqrt(history + eps) + wd * w) * -lr.
-- clip_gradient 0 clips to 0 here, as 1.9.1's Python step (`is not None`).

local AdaGrad = class("AdaGrad", Optimizer)
optimizer.AdaGrad = AdaGrad
local adagrad_known = set_of({"eps", "epsilon"}, base_args)

function AdaGrad:__init(...)
  local a = parse_args("AdaGrad", {"eps"}, adagrad_known, ...)
  if a.epsilon ~= nil then
    -- MXNet 2.0's AdaGrad takes epsilon with another rule (outside the square root)
    core.error("AdaGrad: MXNet 1.9.1's AdaGrad names its epsilon 'eps' (added inside the square root); " ..
               "'epsilon' is MXNet 2.0's, with another rule: give eps")
  end
  check_num("AdaGrad", a, "eps", 0)
  Optimizer.__init(self, a)
  rawset(self, "float_stable_eps", a.eps or 1e-7)
end

function AdaGrad:create_state(_, weight) return np.zeros_like(weight) end

function AdaGrad:_step_one(index, w, g, history)
  local a = update_attrs(self:_get_lr(index), self:_get_wd(index), self.rescale_grad, self.clip_gradient or -1)
  a.f[S.ADAGRAD_EPSILON] = self.float_stable_eps
  core.call(op.adagrad_update, {w, g, history}, a)
end

---------------------------------------------------------------------------
-- AdaDelta (MXNet 1.9.1, no learning rate): g = clip(rescale_grad * grad);
-- acc_g = rho acc_g + (1 - rho) g^2; d = sqrt(acc_delta + epsilon) / sqrt(acc_g + epsilon) * g;
-- acc_delta = rho acc_delta + (1 - rho) d^2; w -= d + wd * w.
-- clip_gradient 0 clips to 0, as 1.9.1's Python step.

local AdaDelta = class("AdaDelta", Optimizer)
optimizer.AdaDelta = AdaDelta
local adadelta_known = set_of({"rho", "epsilon"}, base_args)

function AdaDelta:__init(...)
  local a = parse_args("AdaDelta", {"rho", "epsilon"}, adadelta_known, ...)
  for _, key in ipairs({"learning_rate", "lr_scheduler"}) do
    if a[key] ~= nil then
      -- 1.9.1 accepts and ignores it; 2.0 multiplies the step by it
      core.error(("AdaDelta: MXNet 1.9.1's AdaDelta has no learning rate (its step is its own delta) " ..
                  "and would ignore %s; leave it out"):format(key))
    end
  end
  check_num("AdaDelta", a, "rho", 0, 1)
  check_num("AdaDelta", a, "epsilon", 0)
  Optimizer.__init(self, a)
  rawset(self, "rho", a.rho or 0.9)
  rawset(self, "epsilon", a.epsilon or 1e-5)
end

function AdaDelta:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)}
end

function AdaDelta:_step_one(index, w, g, state)
  local a = update_attrs(0, self:_get_wd(index), self.rescale_grad, self.clip_gradient or -1)
  a.f[S.ADADELTA_RHO], a.f[S.ADADELTA_EPSILON] = self.rho, self.epsilon
  core.call(op.adadelta_update, {w, g, state[1], state[2]}, a)
end

---------------------------------------------------------------------------
-- AdamW (decoupled weight decay; MXNet 1.9.1 has only the adamw_update op,
-- this is MXNet 2.0's AdamW over it): t = this index's update count;
-- eta = lr * sqrt(1 - beta2^t) / (1 - beta1^t) (lr when correct_bias is false);
-- g = clip(rescale_grad * grad); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
-- w -= eta * (m / (sqrt(v) + epsilon) + wd * w).

local AdamW = class("AdamW", Optimizer)
optimizer.AdamW = AdamW
local adamw_known = set_of({"beta1", "beta2", "epsilon", "correct_bias"}, base_args)

function AdamW:__init(...)
  local a = parse_args("AdamW", {"learning_rate", "beta1", "beta2", "epsilon", "correct_bias"}, adamw_known, ...)
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.001 end
  check_num("AdamW", a, "beta1", 0, 1)
  check_num("AdamW", a, "beta2", 0, 1)
  check_num("AdamW", a, "epsilon", 0)
  check_bool("AdamW", a, "correct_bias")
  Optimizer.__init(self, a)
  rawset(self, "beta1", a.beta1 or 0.9)
  rawset(self, "beta2", a.beta2 or 0.999)
  rawset(self, "epsilon", a.epsilon or 1e-6)
  rawset(self, "correct_bias", a.correct_bias ~= false)
end

function AdamW:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)}
end

function AdamW:_step_one(index, w, g, state)
  local eta = self:_get_lr(index)
  if self.correct_bias then
    local t = self._index_update_count[index]
    eta = eta * math.sqrt(1 - self.beta2 ^ t) / (1 - self.beta1 ^ t)
  end
  local a = update_attrs(1, self:_get_wd(index), self.rescale_grad, self:_clip())
  a.f[S.ADAMW_BETA1], a.f[S.ADAMW_BETA2], a.f[S.ADAMW_EPSILON], a.f[S.ADAMW_ETA] =
    self.beta1, self.beta2, self.epsilon, eta
  core.call(op.adamw_update, {w, g, state[1], state[2]}, a)
end

---------------------------------------------------------------------------
-- Adamax, Nadam, LAMB, Signum, FTRL: MXNet 1.9.1's classes, defaults and
-- update rules (core/ops/optim.c states each); t is the index's update count.

-- Adamax: g = clip(rescale_grad * grad + wd * w); m = b1 m + (1-b1) g;
-- u = max(b2 u, |g|); w -= lr / (1 - b1^t) * m / u.
local Adamax = class("Adamax", Optimizer)
optimizer.Adamax = Adamax
local adamax_known = set_of({"beta1", "beta2"}, base_args)

function Adamax:__init(...)
  local a = parse_args("Adamax", {"learning_rate", "beta1", "beta2"}, adamax_known, ...)
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.002 end
  check_num("Adamax", a, "beta1", 0, 1)
  check_num("Adamax", a, "beta2", 0, 1)
  Optimizer.__init(self, a)
  rawset(self, "beta1", a.beta1 or 0.9)
  rawset(self, "beta2", a.beta2 or 0.999)
end

function Adamax:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)}
end

function Adamax:_step_one(index, w, g, state)
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local t = self._index_update_count[index]
  local a = update_attrs(lr / (1 - self.beta1 ^ t), wd, self.rescale_grad, self:_clip())
  a.f[S.ADAMAX_BETA1], a.f[S.ADAMAX_BETA2] = self.beta1, self.beta2
  core.call(op.adamax_update, {w, g, state[1], state[2]}, a)
end

-- Nadam: Adam's moments of g = clip(rescale_grad * grad + wd * w) with
-- Nesterov momentum on the schedule mu_t = beta1 (1 - 0.5 * 0.96^(t * schedule_decay));
-- m_schedule, the product of the mu_t so far, is the optimizer's (one for
-- all indices, as MXNet's).
local Nadam = class("Nadam", Optimizer)
optimizer.Nadam = Nadam
local nadam_known = set_of({"beta1", "beta2", "epsilon", "schedule_decay"}, base_args)

function Nadam:__init(...)
  local a = parse_args("Nadam", {"learning_rate", "beta1", "beta2", "epsilon", "schedule_decay"}, nadam_known, ...)
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.001 end
  check_num("Nadam", a, "beta1", 0, 1)
  check_num("Nadam", a, "beta2", 0, 1)
  check_num("Nadam", a, "epsilon", 0)
  check_num("Nadam", a, "schedule_decay", 0)
  Optimizer.__init(self, a)
  rawset(self, "beta1", a.beta1 or 0.9)
  rawset(self, "beta2", a.beta2 or 0.999)
  rawset(self, "epsilon", a.epsilon or 1e-8)
  rawset(self, "schedule_decay", a.schedule_decay or 0.004)
  rawset(self, "m_schedule", 1.0)
end

function Nadam:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)}
end

-- MXNet's step: w -= lr ((1 - mu_t) g / (1 - m_schedule) + mu_t+1 m / (1 -
-- m_schedule mu_t+1)) / (sqrt(v / (1 - b2^t)) + eps); the op takes lr times
-- g's factor and the ratio of m's factor to it.
function Nadam:_step_one(index, w, g, state)
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local t = self._index_update_count[index]
  local b1, sd = self.beta1, self.schedule_decay
  local mu_t = b1 * (1 - 0.5 * 0.96 ^ (t * sd))
  local mu_t1 = b1 * (1 - 0.5 * 0.96 ^ ((t + 1) * sd))
  self.m_schedule = self.m_schedule * mu_t
  local g_coef = (1 - mu_t) / (1 - self.m_schedule)
  local m_coef = mu_t1 / (1 - self.m_schedule * mu_t1)
  local a = update_attrs(lr * g_coef, wd, self.rescale_grad, self:_clip())
  a.i[S.NADAM_T], a.ni = t, S.NADAM_T + 1
  a.f[S.NADAM_BETA1], a.f[S.NADAM_BETA2], a.f[S.NADAM_EPSILON] = b1, self.beta2, self.epsilon
  a.f[S.NADAM_M_RATIO] = m_coef / g_coef
  core.call(op.nadam_update, {w, g, state[1], state[2]}, a)
end

-- LAMB: Adam's moments of g = clip(rescale_grad * grad) (bias-corrected
-- when bias_correction), d = m / (sqrt(v) + epsilon) + wd * w, then
-- w -= lr * r1 / ||d|| * d with r1 = ||w|| clamped to [lower_bound,
-- upper_bound] (ratio 1 when either norm is 0), per tensor.
local LAMB = class("LAMB", Optimizer)
optimizer.LAMB = LAMB
local lamb_known = set_of({"beta1", "beta2", "epsilon", "lower_bound", "upper_bound", "bias_correction"}, base_args)

function LAMB:__init(...)
  local a = parse_args("LAMB", {"learning_rate", "beta1", "beta2", "epsilon", "lower_bound", "upper_bound",
                                "bias_correction"}, lamb_known, ...)
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.001 end
  check_num("LAMB", a, "beta1", 0, 1)
  check_num("LAMB", a, "beta2", 0, 1)
  check_num("LAMB", a, "epsilon", 0)
  -- MXNet's None (and 0, which it drops as falsy): no bound
  if a.lower_bound == false then a.lower_bound = nil end
  if a.upper_bound == false then a.upper_bound = nil end
  check_num("LAMB", a, "lower_bound", 0)
  check_num("LAMB", a, "upper_bound", 0)
  check_bool("LAMB", a, "bias_correction")
  Optimizer.__init(self, a)
  rawset(self, "beta1", a.beta1 or 0.9)
  rawset(self, "beta2", a.beta2 or 0.999)
  rawset(self, "epsilon", a.epsilon or 1e-6)
  rawset(self, "lower_bound", a.lower_bound ~= 0 and a.lower_bound or nil)
  rawset(self, "upper_bound", a.upper_bound ~= 0 and a.upper_bound or nil)
  rawset(self, "bias_correction", a.bias_correction ~= false)
end

function LAMB:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)}
end

function LAMB:_step_one(index, w, g, state)
  local dt = w.dtype -- (r1, the weight's norm, would be float32 and the message about it)
  if dt ~= "float32" and dt ~= "float64" then
    core.error(("LAMB: weight %d is %s; LAMB updates float32 and float64 weights"):format(index, dt))
  end
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local t = self._index_update_count[index]
  local r1 = np.linalg.norm(w) -- before update_attrs: ops share core.attrs()
  if self.lower_bound or self.upper_bound then r1 = np.clip(r1, self.lower_bound, self.upper_bound) end
  local a = update_attrs(lr, wd, self.rescale_grad, self:_clip())
  a.i[S.LAMB_T], a.i[S.LAMB_BIAS_CORRECTION] = t, self.bias_correction and 1 or 0
  a.ni = math.max(S.LAMB_T, S.LAMB_BIAS_CORRECTION) + 1
  a.f[S.LAMB_BETA1], a.f[S.LAMB_BETA2], a.f[S.LAMB_EPSILON] = self.beta1, self.beta2, self.epsilon
  core.call(op.lamb_update, {w, g, state[1], state[2], r1}, a)
end

-- Signum: mom = momentum mom - (1 - momentum) (wd w + clip(rescale_grad * grad));
-- w = (1 - lr wd_lh) w + lr sign(mom). momentum 0 (signSGD, no state):
-- w = (1 - lr wd) w - lr sign(grad).
local Signum = class("Signum", Optimizer)
optimizer.Signum = Signum
local signum_known = set_of({"momentum", "wd_lh"}, base_args)

function Signum:__init(...)
  local a = parse_args("Signum", {"learning_rate", "momentum", "wd_lh"}, signum_known, ...)
  check_num("Signum", a, "momentum", 0)
  check_num("Signum", a, "wd_lh", 0)
  if a.momentum == 0 and (a.wd_lh or 0) ~= 0 then
    -- MXNet's signsgd_update takes no wd_lh ("Cannot find argument 'wd_lh'")
    core.error("Signum: wd_lh needs momentum > 0 (with momentum 0 the update is signSGD, which has no wd_lh)")
  end
  Optimizer.__init(self, a)
  rawset(self, "momentum", a.momentum or 0.9)
  rawset(self, "wd_lh", a.wd_lh or 0)
end

function Signum:create_state(_, weight)
  if self.momentum ~= 0 then return np.zeros_like(weight) end
  return nil
end

function Signum:_step_one(index, w, g, mom)
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local a = update_attrs(lr, wd, self.rescale_grad, self:_clip())
  if mom ~= nil then
    a.f[S.SIGNUM_MOMENTUM], a.f[S.SIGNUM_WD_LH] = self.momentum, self.wd_lh
    core.call(op.signum_update, {w, g, mom}, a)
  else
    core.call(op.signsgd_update, {w, g}, a)
  end
end

-- FTRL: g = clip(rescale_grad * grad); z += g - (sqrt(n + g^2) - sqrt(n)) w / lr;
-- n += g^2; w = (sign(z) lamda1 - z) / ((beta + sqrt(n)) / lr + wd) where
-- |z| > lamda1, else 0. MXNet's class name Ftrl; its first positional
-- argument is lamda1.
local Ftrl = class("Ftrl", Optimizer)
optimizer.Ftrl = Ftrl
local ftrl_known = set_of({"lamda1", "beta"}, base_args)

function Ftrl:__init(...)
  local a = parse_args("Ftrl", {"lamda1", "learning_rate", "beta"}, ftrl_known, ...)
  if a.learning_rate == nil and a.lr_scheduler == nil then a.learning_rate = 0.1 end
  check_num("Ftrl", a, "lamda1", 0)
  check_num("Ftrl", a, "beta", 0)
  Optimizer.__init(self, a)
  rawset(self, "lamda1", a.lamda1 or 0.01)
  rawset(self, "beta", a.beta or 1)
end

function Ftrl:create_state(_, weight)
  return {np.zeros_like(weight), np.zeros_like(weight)} -- z, n
end

function Ftrl:_step_one(index, w, g, state)
  local lr, wd = self:_get_lr(index), self:_get_wd(index)
  local a = update_attrs(lr, wd, self.rescale_grad, self:_clip())
  a.f[S.FTRL_LAMDA1], a.f[S.FTRL_BETA] = self.lamda1, self.beta
  core.call(op.ftrl_update, {w, g, state[1], state[2]}, a)
end

---------------------------------------------------------------------------
-- Registry: create("sgd", {...}) by name, case-insensitive.

local registry = {sgd = SGD, adam = Adam, nag = NAG, rmsprop = RMSProp, adagrad = AdaGrad, adadelta = AdaDelta,
                  adamw = AdamW, adamax = Adamax, nadam = Nadam, lamb = LAMB, signum = Signum, ftrl = Ftrl}
optimizer.registry = registry

-- register(cls) under its class name, as MXNet's decorator, register(cls,
-- name) or register(name, cls) (core.register); cls derives from Optimizer.
function optimizer.register(a, b)
  return core.register(registry, Optimizer, "optimizer.register", a, b)
end

local function known_names()
  local names = {}
  for k in pairs(registry) do names[#names + 1] = k end
  table.sort(names)
  return table.concat(names, ", ")
end

function optimizer.create(name, params)
  if type(name) ~= "string" then
    core.error(("optimizer.create: expected an optimizer name, got %s"):format(type(name)))
  end
  local cls = registry[name:lower()]
  if not cls then
    core.error(("Cannot find optimizer '%s' (known: %s)"):format(name, known_names()))
  end
  return cls(params or {})
end

function optimizer.is_optimizer(x)
  return type(x) == "table" and rawget(x, "__name") == nil and core.derives(x, Optimizer)
end

---------------------------------------------------------------------------
-- Updater: the states of one device's replicas; updater(indices, grads,
-- weights) creates missing states on the weights' device, then steps.

local Updater = class("Updater")
optimizer.Updater = Updater

function Updater:__init(opt, key)
  self.optimizer = opt
  self.states = {}
  self.stateless = {} -- indices whose optimizer keeps no state (plain SGD)
  self.key = key
end

function Updater:__call(indices, grads, weights)
  if type(indices) ~= "table" then indices, grads, weights = {indices}, {grads}, {weights} end
  if #indices == 0 then return end
  local opt = self.optimizer
  opt:_set_current_device(self.key or tostring(weights[1].device))
  local states = {}
  for k, idx in ipairs(indices) do
    local s = self.states[idx]
    if s == nil and not self.stateless[idx] then
      s = opt:create_state(idx, weights[k])
      if s == nil then self.stateless[idx] = true else self.states[idx] = s end
    end
    states[k] = s
  end
  if per_index_update(opt) then
    for k = 1, #indices do opt:update(indices[k], weights[k], grads[k], states[k]) end
  else
    opt:update(indices, weights, grads, states)
  end
end

function optimizer.get_updater(opt, key) return Updater(opt, key) end

core.strict_module(lr_scheduler, "lr_scheduler")
return core.strict_module(optimizer, "optimizer")
