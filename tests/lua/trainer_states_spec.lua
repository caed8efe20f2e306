-- trainer_states_spec: Trainer:save_states / load_states. The proof: a small
-- MLP trained N steps equals, bit for bit, one saved (parameters + states)
-- at step K, rebuilt fresh, loaded and trained the remaining steps; for
-- SGD with momentum, Adam, a scheduler, a custom optimizer, on every device
-- and on two devices. Then the errors, which change nothing.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, autograd = H.np, luon.autograd
local gluon = luon.gluon
local nn = gluon.nn
local optimizer = require("luon.gluon.optimizer")
local sched = optimizer.lr_scheduler
local utils = require("luon.gluon.utils")

local N, K = 6, 3
local tmp = os.tmpname()
os.remove(tmp)
local PARAMS, STATES = tmp .. ".params.safetensors", tmp .. ".states.safetensors"

-- Batch s (8 samples, 5 features, 3 classes): fixed numbers, no RNG.
local function batch(s)
  local x, y = {}, {}
  for i = 1, 8 do
    local row = {}
    for j = 1, 5 do row[j] = math.sin(s * 1.7 + i * 0.61 + j * 0.37) end
    x[i] = row
    y[i] = (s + i) % 3
  end
  return np.array(x), np.array(y)
end

local function make_net(devs)
  np.random.seed(7)
  local net = nn.HybridSequential()
  net:add(nn.Dense(8, {activation = "relu", in_units = 5}), nn.Dense(3, {in_units = 8}))
  net:initialize{init = luon.init.Xavier(), device = devs}
  return net
end

local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

-- Steps from..to, the batch split over devs (without a kvstore: the whole
-- batch on each).
local function train(net, tr, from, to, devs)
  for s = from, to do
    local x, y = batch(s)
    local xs, ys = utils.split_and_load(x, devs), utils.split_and_load(y, devs)
    if tr._kvstore == false then
      for k, d in ipairs(devs) do xs[k], ys[k] = x:copyto(d), y:copyto(d) end
    end
    for k = 1, #devs do
      autograd.record(function() return loss_fn(net(xs[k]), ys[k]) end):backward()
    end
    tr:step(8)
  end
end

local function weights(net)
  local out = {}
  local ps = net:collect_params()
  for _, name in ipairs(ps:keys()) do
    for d, w in ipairs(ps[name]:list_data()) do out[name .. "@" .. d] = w:totable() end
  end
  return out
end

-- opt() -> optimizer name, params (fresh each call: schedulers keep state)
local function check_resume(devs, opt, kvstore)
  local name, params = opt()
  local net = make_net(devs)
  local tr = gluon.Trainer(net:collect_params(), name, params, {kvstore = kvstore})
  train(net, tr, 1, N, devs)
  local want = weights(net)

  name, params = opt()
  net = make_net(devs)
  tr = gluon.Trainer(net:collect_params(), name, params, {kvstore = kvstore})
  train(net, tr, 1, K, devs)
  net:save_parameters(PARAMS)
  tr:save_states(STATES)
  net, tr = nil, nil

  name, params = opt()
  local net2 = make_net(devs)
  local ps = net2:collect_params()
  for _, n in ipairs(ps:keys()) do -- nothing of the first run survives
    for _, w in ipairs(ps[n]:list_data()) do w:set(0) end
  end
  net2:load_parameters(PARAMS, {device = devs})
  local tr2 = gluon.Trainer(net2:collect_params(), name, params, {kvstore = kvstore})
  tr2:load_states(STATES)
  train(net2, tr2, K + 1, N, devs)
  assert.same(want, weights(net2))
  return tr2
end

local opts = {
  sgd_momentum = function() return "sgd", {learning_rate = 0.1, momentum = 0.9, wd = 1e-3} end,
  adam = function() return "adam", {learning_rate = 0.01} end,
  sgd_factor_scheduler = function()
    return "sgd", {momentum = 0.5, lr_scheduler = sched.FactorScheduler(2, {factor = 0.5, base_lr = 0.2})}
  end,
  adam_multifactor = function()
    return "adam", {learning_rate = 0.02, lr_scheduler = sched.MultiFactorScheduler({2, 4}, {factor = 0.3})}
  end,
  sgd_plain = function() return "sgd", {learning_rate = 0.1} end,
}
local order = {"sgd_momentum", "adam", "sgd_factor_scheduler", "adam_multifactor", "sgd_plain"}

-- A custom optimizer with a nested state ({mom, {sq = acc}}) and a number.
local Nested = optimizer.Optimizer:extend("NestedStateOpt")
function Nested:create_state(_, w)
  return {np.zeros_like(w), {sq = np.zeros_like(w), steps = 0}}
end
function Nested:step(indices, weights, grads, states)
  for k, i in ipairs(indices) do
    local g = grads[k] * self.rescale_grad
    local mom, inner = states[k][1], states[k][2]
    inner.sq:set(inner.sq * 0.9 + g * g * 0.1)
    mom:set(mom * 0.8 + g / (np.sqrt(inner.sq) + 1e-6))
    inner.steps = inner.steps + 1
    weights[k]:set(weights[k] - mom * self:_get_lr(i))
  end
end
optimizer.register(Nested)

describe("Trainer.save_states / load_states", function()
  teardown(function() os.remove(PARAMS); os.remove(STATES) end)

  for _, dev in ipairs(H.devices()) do
    describe("on " .. tostring(dev), function()
      for _, key in ipairs(order) do
        it("resumes bit-identically: " .. key, function()
          check_resume({dev}, opts[key])
        end)
      end
      it("resumes a custom optimizer with nested states and numbers in them", function()
        local tr = check_resume({dev}, function() return "nestedstateopt", {learning_rate = 0.05} end)
        local s = tr._updaters[1].states[1]
        assert.equal(N, s[2].steps)
        assert.equal(tostring(dev), tostring(s[1].device))
      end)
    end)
  end

  local devs = H.devices()
  -- two logical CPU devices, which every machine has (H.devices() may be one GPU)
  it("two devices: one copy saved, loaded onto both (kvstore 'device' and none)", function()
    local two = {H.npx.cpu(0), H.npx.cpu(1)}
    check_resume(two, opts.adam)
    check_resume(two, opts.sgd_factor_scheduler)
    -- without a kvstore each replica steps on its own gradient: the whole
    -- batch on each keeps them equal, as the one saved copy of states assumes
    local tr = check_resume(two, opts.sgd_momentum, false)
    for d = 1, 2 do
      local s = tr._updaters[d].states[1]
      assert.equal(tostring(two[d]), tostring(s.device))
    end
  end)

  it("saves the counters, the learning rate and luon.amp's scaler", function()
    local net = make_net({devs[1]})
    local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})
    train(net, tr, 1, 2, {devs[1]})
    tr:set_learning_rate(0.025)
    rawset(tr, "_amp", {scale = 1024, dynamic = true, good = 7, interval = 2000, unscaled = false})
    tr:save_states(STATES)
    local tr2 = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})
    rawset(tr2, "_amp", {scale = 65536, dynamic = true, good = 0, interval = 2000, unscaled = false})
    tr2:load_states(STATES)
    assert.equal(0.025, tr2.learning_rate)
    assert.equal(2, tr2.optimizer.num_update)
    assert.equal(1024, tr2._amp.scale)
    assert.equal(7, tr2._amp.good)
    local tr3 = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})
    H.assert_error(function() tr3:load_states(STATES) end, {"Trainer.load_states", "amp.init_trainer"})
  end)

  describe("errors, which leave the trainer as it was", function()
    local dev = devs[1]
    local function trained(name, params, units)
      local net = nn.HybridSequential()
      net:add(nn.Dense(units or 8, {activation = "relu", in_units = 5}), nn.Dense(3, {in_units = units or 8}))
      np.random.seed(7)
      net:initialize{init = luon.init.Xavier(), device = dev}
      local tr = gluon.Trainer(net:collect_params(), name, params)
      train(net, tr, 1, 2, {dev})
      return net, tr
    end

    it("names the other optimizer, scheduler, parameter count and shape", function()
      local _, tr = trained("adam", {learning_rate = 0.01})
      tr:save_states(STATES)
      local net2, sgd = trained("sgd", {learning_rate = 0.1, momentum = 0.9})
      local before = sgd._updaters[1].states[1]:totable()
      H.assert_error(function() sgd:load_states(STATES) end, {"Trainer.load_states", "Adam", "SGD"})
      assert.same(before, sgd._updaters[1].states[1]:totable())
      assert.equal(0.1, sgd.learning_rate)
      -- and it still trains
      train(net2, sgd, 3, 3, {dev})

      local _, wide = trained("adam", {learning_rate = 0.01}, 6)
      H.assert_error(function() wide:load_states(STATES) end, {"parameter 1", "(8,)", "(6,)"})
      assert.equal(2, wide.optimizer.num_update)

      local p = gluon.Parameter("w", {shape = {3}})
      p:initialize{device = dev}
      local few = gluon.Trainer({p}, "adam")
      H.assert_error(function() few:load_states(STATES) end, {"saved for 4 parameters", "has 1"})

      local _, scheduled = trained("adam", {lr_scheduler = sched.FactorScheduler(2)})
      H.assert_error(function() scheduled:load_states(STATES) end, {"lr_scheduler none", "FactorScheduler"})
    end)

    it("refuses files that hold no states and bad paths", function()
      local net, tr = trained("sgd", {learning_rate = 0.1, momentum = 0.9})
      net:save_parameters(PARAMS)
      H.assert_error(function() tr:load_states(PARAMS) end, {"Trainer.load_states", "no trainer states"})
      H.assert_error(function() tr:load_states(tmp .. ".missing") end, {"Trainer.load_states", ".missing"})
      H.assert_error(function() tr:save_states(42) end, {"Trainer.save_states"})
      H.assert_error(function() tr:load_states(nil) end, {"Trainer.load_states"})
    end)

    it("a state it cannot write is an error naming the parameter; the old file stays loadable", function()
      local net, tr = trained("sgd", {learning_rate = 0.1, momentum = 0.9})
      tr:save_states(STATES)
      local Bad = optimizer.Optimizer:extend("BadStateOpt")
      function Bad.create_state() return {f = print} end
      function Bad.step() end
      local bad = gluon.Trainer(net:collect_params(), Bad())
      train(net, bad, 1, 1, {dev})
      H.assert_error(function() bad:save_states(STATES) end, {"Trainer.save_states", "Parameter", "function"})
      local _, tr2 = trained("sgd", {learning_rate = 0.1, momentum = 0.9})
      tr2:load_states(STATES)
      assert.same(tr._updaters[1].states[1]:totable(), tr2._updaters[1].states[1]:totable())
    end)
  end)
end)
