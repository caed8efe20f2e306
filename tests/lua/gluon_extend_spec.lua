-- gluon_extend_spec: subclasses written in Lua, as MXNet's Python ones:
-- Loss:extend (forward or hybrid_forward), EvalMetric:extend,
-- Initializer:extend, Optimizer:extend (MXNet 1.x's per-index update or
-- 2.x's step), registered by name; a subclass without its required method
-- is an error naming it.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, autograd = H.np, luon.autograd
local gluon = luon.gluon
local nn = gluon.nn
local optimizer = require("luon.gluon.optimizer")
local init = luon.init

-- MyL2: 0.5 (pred - label)^2 averaged over the non-batch axis, as L2Loss.
local MyL2 = gluon.loss.Loss:extend("MyL2")
function MyL2:forward(pred, label)
  return np.mean((pred - label) ^ 2 * 0.5, 1)
end

-- The same as MXNet 1.x writes it, in the table form of extend.
local HybridL2 = gluon.loss.Loss:extend{"HybridL2", hybrid_forward = function(self, F, pred, label)
  local l = F.np.square(pred - label) * 0.5
  if self._weight then l = l * self._weight end
  return F.np.mean(l, 1)
end}

-- MAE by hand: sum |label - pred| / count.
local MyMAE = gluon.metric.EvalMetric:extend("MyMAE")
function MyMAE:__init() gluon.metric.EvalMetric.__init(self, "mymae") end
function MyMAE:update(labels, preds)
  local d = np.abs(labels - preds)
  self.sum_metric = self.sum_metric + d:sum():item()
  self.num_inst = self.num_inst + d.size
end
function MyMAE:reset()
  self.sum_metric, self.num_inst, self.resets = 0, 0, (self.resets or 0) + 1
end
function MyMAE:get() return self.name, self.num_inst == 0 and 0 / 0 or self.sum_metric / self.num_inst end
gluon.metric.register(MyMAE)

-- Fills arr with 0, 1, 2, ... times scale.
local Ramp = init.Initializer:extend("Ramp")
function Ramp:__init(scale) self.scale = scale or 1 end
function Ramp:_init_weight(_, arr)
  (np.arange(arr.size, {dtype = arr.dtype, device = arr.device}):reshape(arr.shape) * self.scale):copyto(arr)
end
init.register(Ramp)

-- SGD with momentum in Lua, MXNet 1.x style (per-index update) and 2.x style (step).
local MomOne = optimizer.Optimizer:extend("MomOne")
function MomOne:__init(kw)
  kw = kw or {}
  local m = kw.momentum or 0.9
  kw.momentum = nil
  optimizer.Optimizer.__init(self, kw)
  self.momentum = m
end
function MomOne:create_state(_, w) return np.zeros_like(w) end
function MomOne:update(index, weight, grad, state)
  self:_update_count(index)
  local g = grad * self.rescale_grad + weight * self:_get_wd(index)
  state:set(state * self.momentum - g * self:_get_lr(index))
  weight:set(weight + state)
end
optimizer.register(MomOne)

local MomTwo = optimizer.Optimizer:extend("MomTwo")
function MomTwo:create_state(_, w) return np.zeros_like(w) end
function MomTwo:step(indices, weights, grads, states)
  for k, i in ipairs(indices) do
    states[k]:set(states[k] * 0.9 - grads[k] * self.rescale_grad * self:_get_lr(i))
    weights[k]:set(weights[k] + states[k])
  end
end
optimizer.register("mom_two", MomTwo)

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local pred = np.array({{1, 2, 3}, {4, 5, 6}}, {device = dev})
    local label = np.array({{1, 0, 3}, {2, 5, 9}}, {device = dev})

    it("Loss:extend with forward and with hybrid_forward(F, ...), differentiated", function()
      local want = gluon.loss.L2Loss()(pred, label):totable()
      H.assert_close(MyL2()(pred, label):totable(), want)
      H.assert_close(HybridL2()(pred, label):totable(), want)
      H.assert_close(HybridL2(2)(pred, label):totable(), {want[1] * 2, want[2] * 2})
      local x = pred:copy()
      x:attach_grad()
      autograd.record(function() return MyL2()(x, label):sum() end):backward()
      H.assert_close(x.grad:totable(), {{0, 2 / 3, 0}, {2 / 3, 0, -1}})
      assert.equal("MyL2(batch_axis=0, w=None)", tostring(MyL2()))
    end)

    it("EvalMetric:extend with update, reset and get, found by metric.create", function()
      local m = gluon.metric.create("mymae")
      assert.equal(1, m.resets)
      m:update(label, pred)
      local name, v = m:get()
      assert.equal("mymae", name)
      H.assert_close(v, 7 / 6)
      m:reset()
      assert.equal(2, m.resets)
      assert.is_true(select(2, m:get()) ~= select(2, m:get()))
      local c = gluon.metric.create({"mymae", "mae"})
      c:update(label, pred)
      local _, vals = c:get()
      H.assert_close(vals, {7 / 6, 7 / 6})
    end)

    it("Initializer:extend with _init_weight, by object and by registered name", function()
      local net = nn.Dense(3, {in_units = 2})
      net:initialize{init = "ramp", device = dev}
      assert.same({{0, 1}, {2, 3}, {4, 5}}, net.weight:data():totable())
      assert.same({0, 0, 0}, net.bias:data():totable()) -- the bias keeps its own 'zeros'
      local p = gluon.Parameter("w", {shape = {2, 2}})
      p:initialize{init = Ramp(0.5), device = dev}
      assert.same({{0, 0.5}, {1, 1.5}}, p:data():totable())
      assert.same({0, 2, 4}, Ramp(2)(np.zeros({3}, {device = dev})):totable())
      assert.is_true(init.is_initializer(Ramp()))
    end)

    for _, name in ipairs({"MomOne", "mom_two"}) do
      it("Optimizer:extend (" .. name .. ") trains as SGD with momentum, by name in a Trainer", function()
        local function run(opt, params)
          local p = gluon.Parameter("w", {shape = {3}})
          p:initialize{init = "zeros", device = dev}
          p:set_data(np.array({1, -2, 3}))
          local tr = gluon.Trainer({p}, opt, params)
          for _ = 1, 3 do
            local w = p:data()
            autograd.record(function() return (w * np.array({0.5, 2, -4}, {device = dev})):sum() end):backward()
            tr:step(2)
          end
          return p:data():totable(), tr
        end
        local want = run("sgd", {learning_rate = 0.1, momentum = 0.9})
        local got, tr = run(name, {learning_rate = 0.1})
        H.assert_close(got, want, 1e-6)
        assert.equal(3, tr.optimizer.num_update)
        assert.is_true(optimizer.is_optimizer(optimizer.create(name:lower())))
      end)
    end
  end)
end

describe("extend: bad input", function()
  it("a subclass missing its required method is an error naming the method", function()
    local NoFwd = gluon.loss.Loss:extend("NoFwd")
    H.assert_error(function() NoFwd() end, {"NoFwd", "subclass of Loss", "forward(", "hybrid_forward("})
    local NoUpd = gluon.metric.EvalMetric:extend("NoUpd")
    H.assert_error(function() NoUpd("x") end, {"NoUpd", "subclass of EvalMetric", "update(labels, preds)"})
    local NoInit = init.Initializer:extend("NoInit")
    H.assert_error(function() NoInit() end, {"NoInit", "subclass of Initializer", "_init_weight(name, arr)"})
    local NoStep = optimizer.Optimizer:extend("NoStep")
    function NoStep.create_state() return nil end
    H.assert_error(function() NoStep() end, {"NoStep", "subclass of Optimizer", "update(index, weight, grad, state)",
                                             "step(indices, weights, grads, states)"})
    -- a subclass of a subclass inherits what its parent defined
    local Sub = MyL2:extend("SubL2")
    H.assert_close(Sub()(np.array({{1}}), np.array({{3}})):totable(), {2})
  end)

  it("extend needs a name; register needs a subclass of the right base", function()
    H.assert_error(function() gluon.loss.Loss:extend(42) end, {"Loss:extend", "name", "42"})
    H.assert_error(function() gluon.loss.Loss:extend{forward = print} end, {"Loss:extend", "name"})
    H.assert_error(function() gluon.loss.Loss:extend("X", 3) end, {"Loss:extend", "methods"})
    H.assert_error(function() nn.HybridBlock:extend(nil) end, {"extend", "name"})
    H.assert_error(function() optimizer.register(MyL2) end, {"optimizer.register", "subclass of Optimizer"})
    H.assert_error(function() optimizer.register("x", {}) end, {"optimizer.register", "subclass of Optimizer"})
    H.assert_error(function() init.register("") end, {"init.register", "subclass of Initializer"})
    H.assert_error(function() init.register("", Ramp) end, {"init.register", "non-empty string"})
    H.assert_error(function() gluon.metric.register(Ramp) end, {"metric.register", "subclass of EvalMetric"})
  end)

  it("unknown names and keywords are errors naming what is known", function()
    H.assert_error(function() optimizer.create("nosuchopt") end, {"nosuchopt", "momone", "mom_two"})
    H.assert_error(function() gluon.metric.create("nosuchmetric") end, {"nosuchmetric", "mymae"})
    H.assert_error(function() nn.Dense(2, {in_units = 2}):initialize{init = "nosuchinit"} end, {"nosuchinit", "'ramp'"})
    -- a class without its own __init takes the base keywords only
    H.assert_error(function() MomTwo{learning_rate = 0.1, momentum = 0.9} end, {"MomTwo", "momentum"})
    H.assert_error(function() gluon.Trainer({}, "mom_two", {lerning_rate = 1}) end, {"MomTwo", "lerning_rate"})
  end)

  it("F holds np and npx only: MXNet 1.x's legacy F.mean is an error naming F.np.mean", function()
    local Legacy = gluon.loss.Loss:extend("Legacy")
    function Legacy.hybrid_forward(_, F, p, l) return F.mean(p - l) end
    H.assert_error(function() Legacy()(np.ones({2, 2}), np.ones({2, 2})) end, {"F.mean", "F.np.mean"})
  end)
end)
