-- luon.amp: automatic mixed precision, as MXNet's mxnet.contrib.amp.
--   amp.init{target_dtype = "float16" | "bfloat16"}   (positional too)
--   amp.init_trainer(trainer)
--   local scaled = amp.scale_loss(loss, trainer); autograd.backward(scaled)
-- After init, the ops that gain from 16-bit math (matrix products and
-- convolutions: a GPU's tensor cores) cast their float32 inputs to the target
-- dtype and give a 16-bit result; the ops that take only float32 or float64
-- (softmax, the norms, losses, pooling...) cast 16-bit inputs back to
-- float32; the rest (elementwise, reductions) compute 16-bit inputs in
-- float32 and promote mixed ones as NumPy. The casts are recorded, so the
-- parameters stay float32 (the master weights) and get float32 gradients.
-- float16 needs loss scaling (its range is small): init_trainer gives the
-- Trainer MXNet's dynamic loss scaler (2^16 to start, halved on every step
-- whose gradients overflow, which is skipped, doubled after 2000 good
-- steps); bfloat16 has float32's range and trains without it.
-- Where luon differs: MXNet 1.x patches its symbol lists (and warns when init
-- runs twice); luon reads the op registry, and amp.reset() turns it off
-- (init with another dtype while on is an error naming it).
local core = require("luon.core")
local np = require("luon.np")

local amp = {}
local state = nil -- {dtype = name} while on

-- Ops whose float32 inputs go to the target dtype (those present in this
-- build's registry); MXNet's target_precision_ops (FP16_FUNCS) by default.
local default_target = {"matmul", "conv2d", "conv2d_maxpool", "conv3d", "deconv2d", "deconv3d",
                        "batch_dot", "rnn"}

local function unknown_op(list, name)
  local names = {}
  for n in pairs(core.op_info) do names[#names + 1] = n end
  core.error(("amp.init: %s: unknown op %s%s"):format(list, core.show_value(name), core.did_you_mean(name, names)))
end

local function rules_for(target, target_ops, fp32_ops)
  local F32 = core.FLOAT32
  local halves = {[core.dtype_ids.float16] = true, [core.dtype_ids.bfloat16] = true}
  local rules = {}
  local to_target = {from = {[F32] = true}, to = core.dtype_ids[target]}
  local to_f32 = {from = halves, to = F32}
  local info = core.op_info
  -- every op that refuses 16-bit inputs (no LU_HALF) gets them in float32;
  -- views, in-place updates, creation and copy move bytes of any dtype
  for name, i in pairs(info) do
    if i.kind == "new" and not i.half and i.nin ~= 0 and name ~= "copy" then rules[i.id] = to_f32 end
  end
  for _, name in ipairs(fp32_ops or {}) do
    if not info[name] then unknown_op("fp32_ops", name) end
    rules[info[name].id] = to_f32
  end
  for _, name in ipairs(target_ops or default_target) do
    local i = info[name]
    if i and (i.half or target_ops) then
      if not i.half then
        core.error(("amp.init: op '%s' does not take 16-bit inputs, so it cannot be a target precision op"):format(name))
      end
      rules[i.id] = to_target
    elseif not i and target_ops then
      unknown_op("target_precision_ops", name)
    end
  end
  return rules
end

-- amp.init([target_dtype], {target_dtype='float16', target_precision_ops,
-- fp32_ops}): op names are the registry's (core.op_info).
function amp.init(...)
  local names = {"target_dtype", "target_precision_ops", "conditional_fp32_ops", "fp32_ops", "layout_optimization"}
  local o = core.args("amp.init", names, names, ...)
  if o.conditional_fp32_ops ~= nil then
    core.error("amp.init: conditional_fp32_ops is not supported (list such ops in fp32_ops)")
  end
  if o.layout_optimization then core.error("amp.init: layout_optimization is not supported (luon is NCHW)") end
  local target = o.target_dtype or "float16"
  if target ~= "float16" and target ~= "bfloat16" then
    core.error(("amp.init: target_dtype must be 'float16' or 'bfloat16', got %s"):format(core.show_value(target)))
  end
  local rules = rules_for(target, o.target_precision_ops, o.fp32_ops)
  if state then
    if state.dtype == target then return end -- as MXNet: a second init changes nothing
    core.error(("amp.init: AMP is already on with target_dtype '%s'; call amp.reset() first"):format(state.dtype))
  end
  core.set_amp_rules(rules)
  state = {dtype = target}
end

-- Whether AMP is on, and its target dtype.
function amp.is_enabled() return state ~= nil, state and state.dtype end

-- Turn AMP off (luon's; MXNet has no way back). Trainers keep their scalers.
function amp.reset()
  core.set_amp_rules(nil)
  state = nil
end

-- The dynamic loss scaler of MXNet's amp (LossScaler): float16 only.
local function scaler(trainer)
  local s = rawget(trainer, "_amp")
  if not s then core.error("amp: call amp.init_trainer(trainer) first") end
  return s
end

function amp.init_trainer(trainer)
  if not state then core.error("amp.init_trainer: call amp.init() first") end
  if type(trainer) ~= "table" or not trainer._optimizer then
    core.error(("amp.init_trainer: expected a gluon.Trainer, got %s"):format(core.show_value(trainer)))
  end
  local dynamic = state.dtype == "float16"
  rawset(trainer, "_amp", {scale = dynamic and 2 ^ 16 or 1, dynamic = dynamic, good = 0, interval = 2000,
                           unscaled = false})
end

-- The loss (an array or a list of arrays) times the current scale.
function amp.scale_loss(loss, trainer)
  local s = scaler(trainer)
  s.unscaled = false
  if core.is_array(loss) then return loss * s.scale end
  if type(loss) ~= "table" then core.error(("amp.scale_loss: expected an ndarray or a list of them, got %s"):format(core.show_value(loss))) end
  local r = {}
  for k, l in ipairs(loss) do r[k] = l * s.scale end
  return r
end

-- The current loss scale (MXNet: trainer._amp_loss_scaler.loss_scale).
function amp.loss_scale(trainer) return scaler(trainer).scale end

-- Divide the gradients by the loss scale now, in place (for clipping them
-- before step, as MXNet's amp.unscale); step then does not divide again.
function amp.unscale(trainer)
  local s = scaler(trainer)
  if s.unscaled then return end
  for _, p in ipairs(trainer._params) do
    if p.grad_req ~= "null" then
      for _, g in ipairs(p:list_grad()) do g:set(g / s.scale) end
    end
  end
  s.unscaled = true
end

-- Called by Trainer before an update: folds 1/scale into rescale_grad and
-- says whether to skip this step (a gradient is not finite: the scale is
-- halved). Gradients are checked after their replicas were summed.
function amp._before_update(trainer)
  local s = rawget(trainer, "_amp")
  if not s then return false end
  if not s.unscaled then trainer._optimizer.rescale_grad = trainer._optimizer.rescale_grad / s.scale end
  s.unscaled = false
  if not s.dynamic then return false end
  -- One host read per device, not per parameter: count the finite
  -- gradient elements on each device and compare with the element count.
  local finite, want, devices = {}, {}, {}
  for _, p in ipairs(trainer._params) do
    if p.grad_req ~= "null" then
      for _, g in ipairs(p:list_grad()) do
        local d = tostring(g.device)
        local c = np.sum(np.isfinite(g))
        if finite[d] then finite[d] = finite[d] + c else finite[d], want[d] = c, 0; devices[#devices + 1] = d end
        want[d] = want[d] + g.size
      end
    end
  end
  local overflow = false
  for _, d in ipairs(devices) do
    if finite[d]:item() ~= want[d] then overflow = true break end
  end
  if overflow then
    s.scale, s.good = math.max(s.scale / 2, 1), 0
    return true
  end
  s.good = s.good + 1
  if s.good >= s.interval then s.scale, s.good = s.scale * 2, 0 end
  return false
end

return core.strict_module(amp, "amp")
