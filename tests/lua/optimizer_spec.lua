-- optimizer_spec: NAG, RMSProp (plain and centered), AdaGrad, AdaDelta and
-- AdamW against MXNet 1.9.1's trajectories (tests/data/optim_golden.lua,
-- gen_optim_golden.py) on every device, through the optimizer and through
-- gluon.Trainer; their states, lr_mult/wd_mult, 16-bit weights, the fused
-- update ops on strided arrays, bad input.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, autograd = H.np, H.luon.autograd
local core = require("luon.core")
local optimizer = require("luon.gluon.optimizer")
local Trainer = require("luon.gluon.trainer").Trainer
local Parameter = require("luon.gluon.parameter").Parameter

local golden = dofile(H.root .. "tests/data/optim_golden.lua")

-- A copy of opts without rescale_grad (the Trainer sets it from step's batch size).
local function without_rescale(opts)
  local t = {}
  for k, v in pairs(opts) do if k ~= "rescale_grad" then t[k] = v end end
  return t
end

local function label(c)
  local keys = {}
  for k, v in pairs(c.opts) do keys[#keys + 1] = k .. "=" .. tostring(v) end
  table.sort(keys)
  return c.name .. " {" .. table.concat(keys, ", ") .. "}"
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    describe("five steps against MXNet 1.9.1 (float32)", function()
      for _, c in ipairs(golden.cases) do
        it(label(c), function()
          local opt = optimizer.create(c.name, c.opts)
          local w = np.array(golden.w0, {dtype = "float32", device = dev})
          local state = opt:create_state(0, w)
          for s, g in ipairs(golden.grads) do
            opt:update({0}, {w}, {np.array(g, {dtype = "float32", device = dev})}, {state})
            H.check(w, c.steps[s], {tol = 1e-6, device = dev})
          end
        end)
      end

      it("the same through gluon.Trainer (rescale_grad from step's batch size)", function()
        for _, c in ipairs(golden.cases) do
          local p = Parameter("w", {shape = {6}})
          p:initialize{init = "zeros", device = dev}
          p:set_data(np.array(golden.w0))
          local tr = Trainer({p}, c.name, without_rescale(c.opts))
          for s, g in ipairs(golden.grads) do
            local gc = np.array(g, {device = dev})
            autograd.record(function() return (p:data() * gc):sum() end):backward()
            tr:step(1 / (c.opts.rescale_grad or 1))
            H.check(p:data(), c.steps[s], {tol = 1e-6})
          end
        end
      end)
    end)

    it("float64 weights follow the same trajectories", function()
      for _, c in ipairs(golden.cases) do
        local opt = optimizer.create(c.name, c.opts)
        local w = np.array(golden.w0, {dtype = "float64", device = dev})
        local state = opt:create_state(0, w)
        for s, g in ipairs(golden.grads) do
          opt:update({0}, {w}, {np.array(g, {dtype = "float64", device = dev})}, {state})
          H.check(w, c.steps[s], {tol = 1e-5, dtype = "float64"})
        end
      end
    end)

    it("create_state: arrays of the weight's shape, dtype and device", function()
      local w = np.ones({2, 3}, {device = dev})
      local function check_all(states, n)
        assert.equal(n, #states)
        for _, s in ipairs(states) do H.check(s, {{0, 0, 0}, {0, 0, 0}}, {device = dev, dtype = "float32"}) end
      end
      assert.is_nil(optimizer.NAG():create_state(0, w))              -- momentum 0: sgd_update
      check_all({optimizer.NAG{momentum = 0.9}:create_state(0, w)}, 1)
      check_all(optimizer.RMSProp():create_state(0, w), 1)
      check_all(optimizer.RMSProp{centered = true}:create_state(0, w), 3)
      check_all({optimizer.AdaGrad():create_state(0, w)}, 1)
      check_all(optimizer.AdaDelta():create_state(0, w), 2)
      check_all(optimizer.AdamW():create_state(0, w), 2)
    end)

    it("lr_mult and wd_mult scale each index's rate and decay", function()
      -- an index with lr_mult 2, wd_mult 0.5 moves as the optimizer with
      -- learning_rate * 2 and wd * 0.5 (AdaDelta: no learning rate)
      for _, name in ipairs({"nag", "rmsprop", "adagrad", "adadelta", "adamw"}) do
        local base = {wd = 0.2, momentum = name == "nag" and 0.9 or nil}
        local a = optimizer.create(name, base)
        a:set_lr_mult({w = 2})
        a:set_wd_mult({w = 0.5})
        a.idx2name = {[0] = "w"}
        local scaled = {wd = 0.1, momentum = base.momentum}
        if name ~= "adadelta" then scaled.learning_rate = 2 * a.lr end
        local b = optimizer.create(name, scaled)
        local wa = np.array(golden.w0, {device = dev})
        local wb = np.array(golden.w0, {device = dev})
        local sa, sb = a:create_state(0, wa), b:create_state(0, wb)
        for _, g in ipairs(golden.grads) do
          local ga = np.array(g, {device = dev})
          a:update({0}, {wa}, {ga}, {sa})
          b:update({0}, {wb}, {ga}, {sb})
        end
        H.assert_close(wa, wb:totable(), 1e-6)
      end
    end)

    it("16-bit weights are refused as by sgd and adam (the update ops take float32 and float64)", function()
      for _, name in ipairs({"nag", "rmsprop", "adagrad", "adadelta", "adamw"}) do
        local opt = optimizer.create(name, {momentum = name == "nag" and 0.9 or nil})
        local w = np.ones({3}, {dtype = "float16", device = dev})
        local st = opt:create_state(0, w)
        H.assert_error(function() opt:update({0}, {w}, {np.ones({3}, {dtype = "float16", device = dev})}, {st}) end,
                       {"_update: does not take float16 (input 1); convert with astype('float32') first"})
      end
      -- the runtime is still usable
      local opt = optimizer.AdamW()
      local w = np.ones({3}, {device = dev})
      opt:update({0}, {w}, {np.ones({3}, {device = dev})}, {opt:create_state(0, w)})
      H.assert_close(w, {0.999, 0.999, 0.999}, 1e-6)
    end)

    it("the update ops take strided arrays (a transposed weight) as dense ones", function()
      local S = core.slot
      local function run(name, nstates, slots, transposed)
        -- transposed: the same values, column-major (a transposed copy's transpose)
        local function layout(x) return transposed and x:transpose():copy():transpose() or x end
        local w = layout(np.array({{0.5, -1, 2}, {-3, 0.25, 1.5}}, {device = dev}))
        local ins = {w, np.array({{1.6, 2.2, -0.4}, {-2.5, -0.9, 2}}, {device = dev})}
        for k = 1, nstates do ins[#ins + 1] = layout(np.full({2, 3}, 0.01 * k, {device = dev})) end
        local a = core.attrs()
        a.f[S.OPT_LR], a.f[S.OPT_WD], a.f[S.OPT_RESCALE], a.f[S.OPT_CLIP] = 0.1, 0.05, 0.5, 0.9
        for k, v in pairs(slots) do a.f[S[k]] = v end
        core.call(core.op_ids[name], ins, a)
        local out = {}
        for k = 1, #ins do if k ~= 2 then out[#out + 1] = ins[k]:totable() end end
        return out
      end
      for _, u in ipairs({{"nag_mom_update", 1, {NAG_MOMENTUM = 0.9}},
                          {"rmsprop_update", 1, {RMSPROP_GAMMA1 = 0.9, RMSPROP_EPSILON = 1e-8,
                                                 RMSPROP_CLIP_WEIGHTS = 1.8}},
                          {"rmspropalex_update", 3, {RMSPROPALEX_GAMMA1 = 0.9, RMSPROPALEX_GAMMA2 = 0.8,
                                                     RMSPROPALEX_EPSILON = 1e-8, RMSPROPALEX_CLIP_WEIGHTS = -1}},
                          {"adagrad_update", 1, {ADAGRAD_EPSILON = 1e-7}},
                          {"adadelta_update", 2, {ADADELTA_RHO = 0.9, ADADELTA_EPSILON = 1e-5}},
                          {"adamw_update", 2, {ADAMW_BETA1 = 0.9, ADAMW_BETA2 = 0.999, ADAMW_EPSILON = 1e-6,
                                               ADAMW_ETA = 0.3}}}) do
        local dense, strided = run(u[1], u[2], u[3], false), run(u[1], u[2], u[3], true)
        H.assert_close(strided, dense, 0)
        assert.is_false(H.close(dense[1], {{0.5, -1, 2}, {-3, 0.25, 1.5}}, 1e-3), u[1] .. " moved the weight")
      end
    end)

    it("adamw_update skips the step when rescale_grad is 0, NaN or infinite (MXNet's op)", function()
      local S = core.slot
      for _, rs in ipairs({0, 0 / 0, math.huge}) do
        local w, g = np.array({1, 2}, {device = dev}), np.array({1, 1}, {device = dev})
        local m, v = np.zeros({2}, {device = dev}), np.zeros({2}, {device = dev})
        local a = core.attrs()
        a.f[S.OPT_LR], a.f[S.OPT_RESCALE], a.f[S.OPT_CLIP], a.f[S.ADAMW_ETA] = 1, rs, -1, 0.1
        a.f[S.ADAMW_BETA1], a.f[S.ADAMW_BETA2], a.f[S.ADAMW_EPSILON] = 0.9, 0.999, 1e-6
        core.call(core.op_ids.adamw_update, {w, g, m, v}, a)
        H.assert_equal(w, {1, 2})
        H.assert_equal(m, {0, 0})
      end
    end)
  end)
end

describe("the optimizers' keywords", function()
  it("MXNet 1.9.1's defaults and registry names", function()
    local n = optimizer.create("NAG")
    assert.equal(0, n.momentum)
    assert.equal(0.01, n.learning_rate)
    local r = optimizer.create("rmsprop")
    assert.same({0.001, 0.9, 0.9, 1e-8, false}, {r.learning_rate, r.gamma1, r.gamma2, r.epsilon, r.centered})
    assert.is_nil(r.clip_weights)
    local g = optimizer.create("AdaGrad")
    assert.same({0.01, 1e-7}, {g.learning_rate, g.float_stable_eps})
    local d = optimizer.create("adadelta")
    assert.same({0.9, 1e-5}, {d.rho, d.epsilon})
    local w = optimizer.create("adamw")
    assert.same({0.001, 0.9, 0.999, 1e-6, true}, {w.learning_rate, w.beta1, w.beta2, w.epsilon, w.correct_bias})
    assert.equal(optimizer.RMSProp, getmetatable(optimizer.create("RMSProp")))
  end)

  it("positional arguments in MXNet's order", function()
    assert.equal(0.9, optimizer.NAG(0.9).momentum)
    local r = optimizer.RMSProp(0.01, 0.8, 0.7, 1e-6, true, 2)
    assert.same({0.01, 0.8, 0.7, 1e-6, true, 2},
                {r.learning_rate, r.gamma1, r.gamma2, r.epsilon, r.centered, r.clip_weights})
    assert.equal(1e-3, optimizer.AdaGrad(1e-3).float_stable_eps)
    local d = optimizer.AdaDelta(0.8, 1e-4)
    assert.same({0.8, 1e-4}, {d.rho, d.epsilon})
    local w = optimizer.AdamW(0.01, 0.8, 0.9, 1e-5, false, {wd = 0.1})
    assert.same({0.01, 0.8, 0.9, 1e-5, false, 0.1},
                {w.learning_rate, w.beta1, w.beta2, w.epsilon, w.correct_bias, w.wd})
  end)

  it("RMSProp takes MXNet 2.0's rho and momentum for gamma1 and gamma2", function()
    local r = optimizer.RMSProp{rho = 0.8, momentum = 0.7}
    assert.same({0.8, 0.7}, {r.gamma1, r.gamma2})
    H.assert_error(function() optimizer.RMSProp{rho = 0.8, gamma1 = 0.8} end,
                   {"RMSProp: gamma1 and rho both given", "give one"})
  end)

  it("a function of the update count is a learning-rate scheduler for each of them", function()
    for _, name in ipairs({"nag", "rmsprop", "adagrad", "adamw"}) do
      local opt = optimizer.create(name, {lr_scheduler = function(n) return 0.5 ^ n end})
      assert.equal(1, opt.learning_rate)
      local w = np.array({1})
      local st = opt:create_state(0, w)
      opt:update({0}, {w}, {np.array({1})}, {st})
      assert.equal(0.5, opt.learning_rate)
    end
    local p = Parameter("w", {shape = {1}})
    p:initialize{init = "zeros"}
    local tr = Trainer({p}, "rmsprop", {lr_scheduler = function(n) return n < 1 and 0.1 or 0.01 end})
    assert.equal(0.1, tr.learning_rate)
    autograd.record(function() return p:data():sum() end):backward()
    tr:step(1)
    assert.equal(0.01, tr.learning_rate)
    H.assert_close(p:data(), {-0.01 / math.sqrt(0.1 + 1e-8)}, 1e-6) -- n = 0.1 g^2 after one step
  end)

  it("bad input: errors naming the optimizer and the option", function()
    local cases = {
      {"nag", {momentum = -0.1}, "NAG: momentum must be a number >= 0, got -0.1"},
      {"nag", {momentum = 0 / 0}, "NAG: momentum must be a number >= 0, got nan"},
      {"nag", {momentum = "x"}, "NAG: momentum must be a number >= 0, got 'x'"},
      {"rmsprop", {gamma1 = 1}, "RMSProp: gamma1 must be a number in [0, 1), got 1"},
      {"rmsprop", {gamma2 = -0.5}, "RMSProp: gamma2 must be a number in [0, 1), got -0.5"},
      {"rmsprop", {epsilon = -1}, "RMSProp: epsilon must be a number >= 0, got -1"},
      {"rmsprop", {epsilon = 0 / 0}, "RMSProp: epsilon must be a number >= 0, got nan"},
      {"rmsprop", {centered = 1}, "RMSProp: centered must be true or false, got 1"},
      {"rmsprop", {clip_weights = -2}, "RMSProp: clip_weights must be a number >= 0, got -2"},
      {"rmsprop", {clip_weights = "1"}, "RMSProp: clip_weights must be a number >= 0, got '1'"},
      {"rmsprop", {gamma = 0.9}, "RMSProp: unknown argument 'gamma'"},
      {"adagrad", {eps = -1e-7}, "AdaGrad: eps must be a number >= 0, got -1e-07"},
      {"adagrad", {epsilon = 1e-6}, "AdaGrad: MXNet 1.9.1's AdaGrad names its epsilon 'eps'"},
      {"adadelta", {rho = 1.5}, "AdaDelta: rho must be a number in [0, 1), got 1.5"},
      {"adadelta", {epsilon = 0 / 0}, "AdaDelta: epsilon must be a number >= 0, got nan"},
      {"adadelta", {learning_rate = 1}, "AdaDelta: MXNet 1.9.1's AdaDelta has no learning rate"},
      {"adadelta", {lr_scheduler = function() return 1 end}, "would ignore lr_scheduler"},
      {"adamw", {beta1 = -0.1}, "AdamW: beta1 must be a number in [0, 1), got -0.1"},
      {"adamw", {beta2 = 0 / 0}, "AdamW: beta2 must be a number in [0, 1), got nan"},
      {"adamw", {epsilon = -1}, "AdamW: epsilon must be a number >= 0, got -1"},
      {"adamw", {correct_bias = "no"}, "AdamW: correct_bias must be true or false, got 'no'"},
      {"adamw", {wd = 0 / 0}, "AdamW: wd must be a number, got nan"},
      {"adamw", {clip_gradient = -1}, "AdamW: clip_gradient must be a number >= 0, got -1"},
      {"adamw", {learning_rate = "0.1"}, "AdamW: learning_rate must be a number, got '0.1'"},
    }
    for _, c in ipairs(cases) do
      H.assert_error(function() optimizer.create(c[1], c[2]) end, {c[3]})
    end
    H.assert_error(function() optimizer.NAG(0.9, 0.1) end, {"NAG: takes at most 1 positional arguments"})
    -- the op checks what reaches it: shapes, dtypes
    local opt = optimizer.RMSProp{centered = true}
    local w = np.ones({3})
    local st = opt:create_state(0, w)
    H.assert_error(function() opt:update({0}, {w}, {np.ones({2})}, {st}) end,
                   {"rmspropalex_update: grad has shape (2,) but weight has shape (3,)"})
    H.assert_error(function() opt:update({0}, {w}, {np.ones({3}, {dtype = "float64"})}, {st}) end,
                   {"rmspropalex_update: grad is float64 but weight is float32"})
    H.assert_error(function() opt:update({0}, {w}, {np.ones({3}, {dtype = "int32"})}, {st}) end,
                   {"rmspropalex_update: grad is int32; only float32 and float64 are supported"})
    -- still usable after the errors
    opt:update({0}, {w}, {np.ones({3})}, {st})
    assert.is_true(w:totable()[1] < 1)
  end)
end)

describe("Optimizer:update with one index", function()
  it("takes MXNet 1.x's update(index, weight, grad, state)", function()
    local opt = H.luon.optimizer.create("sgd", {learning_rate = 0.5})
    local w = np.ones({2})
    opt:update(0, w, np.ones({2}), opt:create_state(0, w))
    H.assert_equal(w, {0.5, 0.5})
    H.assert_error(function() opt:update("a", w, np.ones({2}), nil) end, {"Optimizer.update: expects"})
  end)
end)
