-- gluon_trainer_spec: SGD (plain, momentum, wd, clip_gradient) and Adam for
-- two steps against hand-computed numbers, lr_mult/wd_mult, learning-rate
-- schedulers, and gluon.Trainer: parameter order, replicas summed and kept
-- identical, grad_req 'null', errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, autograd = H.np, H.npx, H.luon.autograd
local optimizer = require("luon.gluon.optimizer")
local Trainer = require("luon.gluon.trainer").Trainer
local trainer_mod = require("luon.gluon.trainer")
local Parameter = require("luon.gluon.parameter").Parameter
local sched = optimizer.lr_scheduler

-- A Parameter with `values` on every device of `devices`.
local function param(name, values, devices, grad_req)
  local p = Parameter(name, {shape = {#values}, grad_req = grad_req})
  p:initialize{init = "zeros", device = devices}
  p:set_data(np.array(values))
  return p
end

-- Give w (an array with a gradient buffer) the gradient `values` through a
-- backward of sum(w * values), so the Trainer sees a fresh gradient.
local function backward_grad(w, values)
  local c = np.array(values, {device = w.device, dtype = w.dtype})
  autograd.record(function() return (w * c):sum() end):backward()
end

-- Write the gradient of replica k of Parameter p by a backward.
local function set_grad(p, k, values)
  backward_grad(p:list_data()[k], values)
end

-- A stand-in with only the interface the Trainer may use.
local function fake_param(name, values, devices)
  local data = {}
  for k, d in ipairs(devices) do
    data[k] = np.array(values, {device = d})
    data[k]:attach_grad()
  end
  local p = {name = name, grad_req = "write", lr_mult = 1, wd_mult = 1}
  function p.list_data() return data end
  function p.list_grad()
    local g = {}
    for k = 1, #data do g[k] = data[k].grad end
    return g
  end
  function p.list_device() return devices end
  return p
end

-- w0 = [1, -2, 3], constant gradient g = [0.5, 2, -4]. By hand, for the
-- cases below (SGD: g' = clip(rescale * g, clip) + wd * w):
--   SGD lr .1, wd .1, step(2) (rescale .5), clip .75: g'1 = [.25,.75,-.75] + .1 w0 = [.35,.55,-.45]
--     w1 = w0 - .1 g'1 = [.965, -2.055, 3.045]; g'2 = [.3465,.5445,-.4455]; w2 = [.93035, -2.10945, 3.08955]
--   SGD lr .1, momentum .9: mom1 = -.1 g, w1 = [.95, -2.2, 3.4]; mom2 = .9 mom1 - .1 g = -.19 g,
--     w2 = [.855, -2.58, 4.16]
--   same with wd .1, clip .75, step(2): w1 = [.965, -2.055, 3.045]; mom2 = .9 (-.1 g'1) - .1 g'2 =
--     [-.06615, -.10395, .08505]; w2 = [.89885, -2.15895, 3.13005]
--   Adam lr .01 (t = 1: lr_t = .01 sqrt(.001)/.1, m/sqrt(v) = sign(g) sqrt(10)): each step moves
--     every weight by .01 against its gradient's sign: w1 = [.99, -2.01, 3.01], w2 = [.98, -2.02, 3.02]
--   Adam lr .01, wd .1, clip .75, step(2): g' = clip(rescale * g + wd * w, clip) (MXNet's
--     adam_update adds wd before clipping); values from MXNet 1.9.1
local W0, G = {1, -2, 3}, {0.5, 2, -4}

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local function run(opt, opt_params, steps, batch, grad_req)
      local p = param("w", W0, {dev}, grad_req)
      local tr = Trainer({p}, opt, opt_params)
      local out = {}
      for s = 1, steps do
        set_grad(p, 1, G)
        tr:step(batch or 1)
        out[s] = p:data():totable()
      end
      return out, tr, p
    end

    describe("SGD", function()
      it("plain, with wd and clip_gradient, step(2) rescales by 1/2", function()
        local w = run("sgd", {learning_rate = 0.1, wd = 0.1, clip_gradient = 0.75}, 2, 2)
        H.assert_close(w[1], {0.965, -2.055, 3.045})
        H.assert_close(w[2], {0.93035, -2.10945, 3.08955})
      end)
      it("with momentum", function()
        local w = run("sgd", {learning_rate = 0.1, momentum = 0.9}, 2)
        H.assert_close(w[1], {0.95, -2.2, 3.4})
        H.assert_close(w[2], {0.855, -2.58, 4.16})
      end)
      it("with momentum, wd and clip_gradient", function()
        local w, tr = run("SGD", {learning_rate = 0.1, momentum = 0.9, wd = 0.1, clip_gradient = 0.75}, 2, 2)
        H.assert_close(w[1], {0.965, -2.055, 3.045})
        H.assert_close(w[2], {0.89885, -2.15895, 3.13005})
        H.assert_close(tr._updaters[1].states[1], {-0.06615, -0.10395, 0.08505})
      end)
      it("clip_gradient 0 means no clipping, as MXNet's fused step", function()
        local w = run("sgd", {learning_rate = 0.1, clip_gradient = 0}, 1)
        H.assert_close(w[1], {0.95, -2.2, 3.4})
      end)
      it("learning_rate defaults to 0.01 (MXNet 1.9.1's SGD; 2.0's is 0.1)", function()
        assert.equal(0.01, optimizer.SGD().learning_rate)
        local p = Parameter("w", {shape = {2}})
        p:initialize()
        assert.equal(0.01, Trainer({p}, "sgd").learning_rate)
        assert.equal(0.5, optimizer.SGD(0.5).learning_rate)
        assert.equal(0.9, optimizer.SGD(0.5, 0.9).momentum)
      end)
      it("float64 weights", function()
        local p = Parameter("w", {shape = {3}, dtype = "float64"})
        p:initialize{init = "zeros", device = dev}
        p:set_data(np.array(W0, {dtype = "float64"}))
        local tr = Trainer({p}, "sgd", {learning_rate = 0.1, momentum = 0.9})
        for _ = 1, 2 do set_grad(p, 1, G); tr:step(1) end
        H.check(p:data(), {0.855, -2.58, 4.16}, {dtype = "float64", tol = 1e-12})
      end)
    end)

    describe("Adam", function()
      it("two steps: bias correction folded into the learning rate", function()
        local w = run("adam", {learning_rate = 0.01}, 2)
        H.assert_close(w[1], {0.99, -2.01, 3.01}, 1e-6)
        H.assert_close(w[2], {0.98, -2.02, 3.02}, 1e-6)
      end)
      it("two steps with wd (coupled L2), clip_gradient and rescale", function()
        local w, tr = run("adam", {learning_rate = 0.01, wd = 0.1, clip_gradient = 0.75}, 2, 2)
        -- MXNet 1.9.1 (gluon.Trainer, float64): clip after adding wd * w
        H.assert_close(w[1], {0.9899999424, -2.010000062, 3.010000062}, 1e-6)
        H.assert_close(w[2], {0.9800006386, -2.020000126, 3.020000126}, 1e-6)
        local m, v = tr._updaters[1].states[1][1], tr._updaters[1].states[1][2]
        H.assert_close(m, {0.0664000147, 0.1425000322, -0.1425000322}, 1e-5)
        H.assert_close(v, {0.0002441753559, 0.001124423031, 0.001124423031}, 1e-5)
      end)
      it("defaults", function()
        local a = optimizer.Adam()
        assert.equal(0.001, a.learning_rate)
        assert.same({0.9, 0.999, 1e-8}, {a.beta1, a.beta2, a.epsilon})
      end)
    end)

    describe("per-parameter multipliers", function()
      it("lr_mult and wd_mult are read from the Parameter at each step", function()
        local p = param("w", {1, 1}, {dev})
        local tr = Trainer({p}, "sgd", {learning_rate = 1, wd = 0.5})
        set_grad(p, 1, {1, 1})
        p.lr_mult = 0.5
        tr:step(1)                       -- w -= .5 (1 + .5)
        H.assert_close(p:data(), {0.25, 0.25})
        p.wd_mult = 0
        set_grad(p, 1, {1, 1})
        tr:step(1)                       -- w -= .5 (1 + 0)
        H.assert_close(p:data(), {-0.25, -0.25})
      end)
      it("grad_req 'null' parameters are skipped", function()
        local p = param("w", {1, 2}, {dev})
        local c = param("c", {5, 6}, {dev}, "null")
        local tr = Trainer({p, c}, "sgd", {learning_rate = 1})
        set_grad(p, 1, {1, 1})
        tr:step(1)
        H.assert_close(p:data(), {0, 1})
        H.assert_close(c:data(), {5, 6})
      end)
    end)

    describe("training a parameter through autograd", function()
      it("loss -> backward -> step moves the weights by lr * mean gradient", function()
        local p = param("w", {1, 2}, {dev})
        local tr = Trainer({p}, "sgd", {learning_rate = 0.5})
        local x = np.array({{1, 1}, {3, 3}}, {device = dev})
        local l = autograd.record(function()
          return np.sum(x * p:data(), 1)     -- per-sample loss x_i . w
        end)
        l:backward()
        H.assert_close(p:grad(), {4, 4})
        tr:step(2)                          -- mean gradient [2, 2]
        H.assert_close(p:data(), {0, 1})
      end)
    end)

    -- Golden values from MXNet 1.9.1 (mx.optimizer with rescale_grad .5, the
    -- same through gluon.Trainer step(2)): w0 and two gradients, lr .1,
    -- clip_gradient .3, wd .1, so that clipping before or after adding wd * w
    -- differ. lazy_update and multi_precision (float32/64 weights) change nothing.
    describe("against MXNet 1.9.1 with rescale_grad, clip_gradient and wd", function()
      local w0 = {0.5, -1.0, 2.0, -3.0, 0.25, 1.5}
      local g1 = {0.2, -0.9, 4.0, 0.1, -2.0, 0.7}
      local g2 = {-0.4, 0.3, 1.0, -5.0, 0.05, 0.6}
      local sgd = {{0.485, -0.96, 1.95, -2.975, 0.2775, 1.455},
                   {0.50015, -0.9654, 1.9005, -2.91525, 0.272225, 1.41045}}
      local mom = {sgd[1], {0.48665, -0.9294, 1.8555, -2.89275, 0.296975, 1.36995}}
      local adam = {{0.399999549, -0.899999443, 1.89999944, -2.89999946, 0.350000557, 1.39999944},
                    {0.408484022, -0.848896566, 1.79999886, -2.79993757, 0.401103434, 1.29999886}}
      local cases = {
        {"sgd", {}, sgd},
        {"sgd", {momentum = 0.9}, mom},
        {"sgd", {momentum = 0.9, lazy_update = false, multi_precision = true}, mom},
        {"adam", {}, adam},
        {"adam", {lazy_update = false, multi_precision = true}, adam},
      }
      for _, c in ipairs(cases) do
        for _, dt in ipairs({"float32", "float64"}) do
          local extra = {}
          for k in pairs(c[2]) do extra[#extra + 1] = k end
          table.sort(extra)
          it(("%s %s %s"):format(c[1], table.concat(extra, " "), dt), function()
            local p = Parameter("w", {shape = {6}, dtype = dt})
            p:initialize{init = "zeros", device = dev}
            p:set_data(np.array(w0, {dtype = dt}))
            local kw = {learning_rate = 0.1, clip_gradient = 0.3, wd = 0.1}
            for k, v in pairs(c[2]) do kw[k] = v end
            local tr = Trainer({p}, c[1], kw)
            for s, g in ipairs({g1, g2}) do
              set_grad(p, 1, g)
              tr:step(2)
              H.check(p:data(), c[3][s], {dtype = dt, tol = 1e-6})
            end
          end)
        end
      end
    end)

    describe("stale gradients", function()
      it("step without a backward since the last step is MXNet's error, naming the parameter", function()
        local p, q = param("w", {1, 2}, {dev}), param("unused", {3, 4}, {dev})
        local tr = Trainer({p, q}, "sgd", {learning_rate = 1, momentum = 0.5})
        set_grad(p, 1, {1, 1})
        H.assert_error(function() tr:step(1) end,
                       {"Gradient of Parameter `unused` on context " .. tostring(dev) ..
                        " has not been updated by backward since last `step`", "ignore_stale_grad = true"})
        -- nothing changed: p was not updated either
        H.assert_close(p:data(), {1, 2})
        tr:step(1, true)                              -- only p moves
        H.assert_close(p:data(), {0, 1})
        H.assert_close(q:data(), {3, 4})
        assert.is_nil(tr._updaters[1].states[2])      -- q's momentum never made
        -- p's gradient is stale now too
        H.assert_error(function() tr:step(1) end, {"Parameter `w`"})
        tr:step(1, {ignore_stale_grad = true})        -- nothing to update: nothing moves
        H.assert_close(p:data(), {0, 1})
        H.assert_close(tr._updaters[1].states[1], {-1, -1})
        set_grad(p, 1, {1, 1})
        set_grad(q, 1, {2, 2})
        tr:step(1)                                    -- both fresh: both updated
        H.assert_close(p:data(), {-1.5, -0.5})        -- mom = .5 (-1) - 1
        H.assert_close(q:data(), {1, 2})
      end)
      it("a backward through the parameter makes it fresh; update() checks the same", function()
        local p = param("w", {1, 2}, {dev})
        local tr = Trainer({p}, "sgd", {learning_rate = 1})
        H.assert_error(function() tr:update(1) end, {"Parameter `w`", "has not been updated by backward"})
        set_grad(p, 1, {1, 1})
        tr:update(1)
        H.assert_close(p:data(), {0, 1})
        H.assert_error(function() tr:update(1, false) end, {"Parameter `w`"})
        tr:update(1, {ignore_stale_grad = true})
        H.assert_close(p:data(), {0, 1})
        H.assert_error(function() tr:step(1, "yes") end, {"ignore_stale_grad must be true or false, got 'yes'"})
        H.assert_error(function() tr:step(1, {ignore_stale = true}) end,
                       {"unknown argument 'ignore_stale'", "ignore_stale_grad"})
      end)
    end)
  end)
end

describe("learning-rate schedulers", function()
  it("FactorScheduler lowers lr by factor after every `step` updates", function()
    local s = sched.FactorScheduler{step = 2, factor = 0.5, base_lr = 1}
    local got = {}
    for n = 1, 7 do got[n] = s(n) end
    assert.same({1, 1, 0.5, 0.5, 0.25, 0.25, 0.125}, got)
    local floor = sched.FactorScheduler{step = 1, factor = 0.1, stop_factor_lr = 0.005, base_lr = 1}
    assert.equal(1, floor(1))
    H.assert_close(floor(3), 0.01, 1e-12)
    assert.equal(0.005, floor(4))
    assert.equal(0.005, floor(10))
  end)
  it("FactorScheduler with linear warmup", function()
    local s = sched.FactorScheduler{step = 10, base_lr = 1, warmup_steps = 4, warmup_begin_lr = 0.2}
    assert.equal(0.2, s(0))
    H.assert_close(s(2), 0.6, 1e-12)
    assert.equal(1, s(4))
  end)
  it("MultiFactorScheduler lowers lr after each listed step", function()
    local s = sched.MultiFactorScheduler{step = {2, 4}, factor = 0.1, base_lr = 1}
    local got = {}
    for n = 1, 6 do got[n] = s(n) end
    H.assert_close(got, {1, 1, 0.1, 0.1, 0.01, 0.01}, 1e-12)
    H.assert_close(s(100), 0.01, 1e-12)
  end)
  it("PolyScheduler and CosineScheduler", function()
    local p = sched.PolyScheduler{max_update = 10, base_lr = 1, pwr = 2}
    H.assert_close(p(5), 0.25, 1e-12)
    H.assert_close(p(10), 0, 1e-12)
    local c = sched.CosineScheduler{max_update = 10, base_lr = 1, final_lr = 0}
    H.assert_close(c(5), 0.5, 1e-12)
    H.assert_close(c(0), 1, 1e-12)
  end)
  it("rejects bad arguments", function()
    H.assert_error(function() sched.FactorScheduler{step = 0} end, {"step must be a number >= 1"})
    H.assert_error(function() sched.FactorScheduler{step = 1, factor = 2} end, {"must be no more than 1"})
    H.assert_error(function() sched.MultiFactorScheduler{step = {3, 2}} end, {"increasing"})
  end)
  it("drives the optimizer through num_update; learning_rate overrides base_lr", function()
    local dev = npx.cpu(0)
    local p = param("w", {0}, {dev})
    local s = sched.FactorScheduler{step = 1, factor = 0.5, base_lr = 7}
    local tr = Trainer({p}, "sgd", {learning_rate = 1, lr_scheduler = s})
    local lrs = {}
    for k = 1, 3 do
      set_grad(p, 1, {1})
      tr:step(1)
      lrs[k] = tr.learning_rate
    end
    assert.same({1, 0.5, 0.25}, lrs)
    H.assert_close(p:data(), {-1.75})
    assert.equal(3, tr.optimizer.num_update)
    H.assert_error(function() tr:set_learning_rate(0.1) end, {"lr_scheduler"})
  end)
end)

describe("Trainer", function()
  local cpu0, cpu1 = npx.cpu(0), npx.cpu(1)
  local devs = {cpu0, cpu1}

  it("sums the gradients of two replicas and leaves them identical (MXNet's test_trainer)", function()
    local p = param("x", {0, 0, 0, 0}, devs)
    local tr = Trainer({p}, "sgd", {learning_rate = 1, momentum = 0.5})
    for k = 1, 2 do set_grad(p, k, {1, 1, 1, 1}) end
    tr:step(1)                                     -- summed grad 2: x = -2
    for k = 1, 2 do
      H.check(p:list_data()[k], {-2, -2, -2, -2}, {device = devs[k]})
      H.assert_close(p:list_grad()[k], {2, 2, 2, 2})
    end
    p.lr_mult = 0.5
    for k = 1, 2 do set_grad(p, k, {1, 1, 1, 1}) end
    tr:step(1)                                     -- mom = .5 (-2) - .5 * 2 = -2: x = -4
    for k = 1, 2 do H.assert_close(p:list_data()[k], {-4, -4, -4, -4}) end
  end)

  it("different gradients per replica: allreduce_grads then update", function()
    local p = param("x", {0, 0}, devs)
    local tr = Trainer({p}, "sgd", {learning_rate = 1})
    set_grad(p, 1, {0, 3})
    set_grad(p, 2, {1, 5})
    tr:allreduce_grads()
    H.assert_close(p:list_grad()[1], {1, 8})
    H.assert_close(p:list_grad()[2], {1, 8})
    tr:update(1)
    H.assert_equal(p:list_data()[1], {-1, -8})
    H.assert_equal(p:list_data()[2], {-1, -8})
  end)

  it("Adam on two replicas gives bit-identical weights (one update, copied)", function()
    local p = param("x", W0, devs)
    local tr = Trainer({p}, "adam", {learning_rate = 0.01, wd = 0.1})
    for _ = 1, 3 do
      set_grad(p, 1, {0.25, 1, -3})
      set_grad(p, 2, {0.25, 1, -1})
      tr:step(2)                       -- summed grad = 2 g, rescale 1/2: g
    end
    H.assert_equal(p:list_data()[2], p:list_data()[1]:totable())
    -- the optimizer ran once, on the first replica; the others got its weights
    assert.is_nil(tr._updaters[2].states[1])
    -- same as one device with the whole batch
    local q = param("x", W0, {cpu0})
    local tq = Trainer({q}, "adam", {learning_rate = 0.01, wd = 0.1})
    for _ = 1, 3 do set_grad(q, 1, G); tq:step(2) end
    H.assert_close(p:list_data()[1], q:data():totable(), 1e-6)
  end)

  it("a network trained data-parallel on two devices equals one device on the global batch", function()
    local gluon = H.luon.gluon
    local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    np.random.seed(7)
    local X = np.random.uniform({size = {6, 4}})
    local Y = np.array({0, 1, 2, 0, 1, 2})
    local function train(devices)
      local net = gluon.nn.HybridSequential()
      net:add(gluon.nn.Dense(5, {activation = "relu", in_units = 4}), gluon.nn.Dense(3, {in_units = 5}))
      np.random.seed(11)
      net:initialize({device = devices})
      local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.5, momentum = 0.9})
      for _ = 1, 3 do
        local xs = gluon.utils.split_and_load(X, devices)
        local ys = gluon.utils.split_and_load(Y, devices)
        local ls = autograd.record(function()
          local out = {}
          for i, x in ipairs(xs) do out[i] = loss_fn(net(x), ys[i]) end
          return out
        end)
        for _, l in ipairs(ls) do l:backward() end
        tr:step(6)
      end
      return net:collect_params()
    end
    local two, one = train(devs), train({cpu0})
    assert.equal(4, #one:keys())
    for _, name in ipairs(one:keys()) do
      local a, b = two[name]:list_data(), one[name]:data()
      H.assert_equal(a[2], a[1]:totable())
      H.assert_close(a[1], b:totable(), 1e-5)
    end
  end)

  it("reduce_replicas sums a list of arrays into each of them", function()
    local a, b = np.array({1, 2}, {device = cpu0}), np.array({10, 20}, {device = cpu1})
    trainer_mod.reduce_replicas({a, b})
    H.check(a, {11, 22}, {device = cpu0})
    H.check(b, {11, 22}, {device = cpu1})
  end)

  it("takes a ParameterDict or a name table in sorted key order, a list as given", function()
    local p10, p2, pa = param("w", {1}, {cpu0}), param("w", {2}, {cpu0}), param("b", {3}, {cpu0})
    local named = {["10.weight"] = p10, ["2.weight"] = p2, ["1.bias"] = pa}
    local tr = Trainer(named, "sgd")
    assert.equal(pa, tr._params[1])
    assert.equal(p10, tr._params[2])
    assert.equal(p2, tr._params[3])
    local d = require("luon.gluon.parameter").dict({"b.w", "a.w"}, {p2, p10})
    tr = Trainer(d, "sgd")
    assert.equal(p10, tr._params[1])
    tr = Trainer({p2, pa, p2}, "sgd")             -- shared parameters count once
    assert.equal(2, #tr._params)
    assert.equal(p2, tr._params[1])
  end)

  it("uses only the Parameter interface (a stand-in works)", function()
    local p = fake_param("w", {1, 2}, devs)
    local tr = Trainer({p}, "sgd", {learning_rate = 0.5})
    backward_grad(p.list_data()[1], {1, 1})
    backward_grad(p.list_data()[2], {1, 3})
    tr:step(1)
    H.assert_close(p.list_data()[1], {0, 0})
    H.assert_close(p.list_data()[2], {0, 0})
  end)

  it("learning_rate is a property; set_learning_rate changes it", function()
    local p = param("w", {1}, {cpu0})
    local tr = Trainer({p}, "sgd", {learning_rate = 0.001})
    assert.equal(0.001, tr.learning_rate)
    tr:set_learning_rate(0.5)
    assert.equal(0.5, tr.learning_rate)
    assert.equal(0.5, tr.optimizer.learning_rate)
    H.assert_error(function() tr.learning_rate = 1 end, {"set_learning_rate"})
  end)

  it("accepts an Optimizer object", function()
    local p = param("w", {1}, {cpu0})
    local opt = optimizer.SGD{learning_rate = 0.25}
    local tr = Trainer({p}, opt)
    assert.equal(opt, tr.optimizer)
    set_grad(p, 1, {1})
    tr:step(1)
    H.assert_close(p:data(), {0.75})
    H.assert_error(function() Trainer({p}, opt, {learning_rate = 1}) end, {"optimizer_params must be nil"})
  end)

  it("optimizer names in any case; keywords in a trailing table or one options table", function()
    for _, name in ipairs({"adam", "Adam", "ADAM"}) do
      local tr = Trainer({param("w", {1}, {cpu0})}, name, {learning_rate = 0.25})
      assert.equal("Adam", getmetatable(tr.optimizer).__name)
      assert.equal(0.25, tr.learning_rate)
    end
    assert.equal("SGD", getmetatable(Trainer({param("w", {1}, {cpu0})}, "SGD").optimizer).__name)
    local p = param("w", {1}, {cpu0})
    local tr = Trainer({p}, {optimizer = "sgd", optimizer_params = {learning_rate = 0.5}, kvstore = "device"})
    assert.equal(0.5, tr.learning_rate)
    set_grad(p, 1, {1})
    tr:step(1)
    H.assert_close(p:data(), {0.5})
    tr = Trainer({p}, "sgd", {learning_rate = 0.5}, "local")         -- MXNet's positional kvstore
    assert.equal("local", tr._kvstore)
    H.assert_error(function() Trainer({p}, {optimizer = "sgd", optimzer_params = {}}) end,
                   {"Trainer: unknown option 'optimzer_params'", "did you mean 'optimizer_params'?"})
    H.assert_error(function() Trainer({p}, "sgd", nil, {kvstor = "device"}) end,
                   {"Trainer: unknown option 'kvstor'", "kvstore, compression_params, update_on_kvstore"})
    H.assert_error(function() Trainer({p}, {optimizer = "sgd"}, {learning_rate = 1}) end, {"give everything in it"})
    H.assert_error(function() Trainer({p}, "sgd", nil, {compression_params = {type = "2bit"}}) end,
                   {"compression_params", "not supported"})
  end)

  it("a plain function of the update count is a learning-rate scheduler", function()
    local p = param("w", {0}, {cpu0})
    local tr = Trainer({p}, "sgd", {lr_scheduler = function(n)
      return 0.1 * 0.5 ^ n
    end})
    assert.equal(0.1, tr.learning_rate)                   -- num_update 0
    for _ = 1, 3 do set_grad(p, 1, {1}); tr:step(1) end   -- lr .05, .025, .0125
    H.assert_close(p:data(), {-0.0875})
    assert.equal(0.0125, tr.learning_rate)
    H.assert_error(function() tr:set_learning_rate(1) end, {"lr_scheduler"})
    local opt = optimizer.Adam{lr_scheduler = function(n) return n < 2 and 1 or 0 end}
    assert.equal(1, opt.learning_rate)
    H.assert_error(function() optimizer.SGD{learning_rate = 0.1, lr_scheduler = function() return 1 end} end,
                   {"SGD: learning_rate and a function lr_scheduler both given"})
    H.assert_error(function() optimizer.SGD{lr_scheduler = {}} end,
                   {"lr_scheduler must be a scheduler", "or a function of the update count"})
  end)

  it("errors: unknown optimizer, unknown argument, devices, arguments", function()
    local p = param("w", {1}, {cpu0})
    H.assert_error(function() Trainer({p}, "sgdd") end, {"Cannot find optimizer 'sgdd'", "adam", "sgd"})
    H.assert_error(function() Trainer({p}, "sgd", {learning_rat = 1}) end, {"unknown argument 'learning_rat'"})
    local q = param("q", {1}, devs)
    H.assert_error(function() Trainer({p, q}, "sgd") end, {"same set of devices", "'q'", "[cpu(0), cpu(1)]"})
    H.assert_error(function() Trainer(42, "sgd") end, {"list or table of Parameters"})
    H.assert_error(function() Trainer({p, 3}, "sgd") end, {"element 2"})
    H.assert_error(function() Trainer({p}, "sgd"):step(0) end, {"batch_size"})
    H.assert_error(function() Trainer({p}, "sgd"):step(0 / 0) end, {"batch_size must be a positive number, got nan"})
    H.assert_error(function() Trainer({p}, "sgd", {wd = "x"}) end, {"SGD: wd must be a number, got 'x'"})
    H.assert_error(function() Trainer({p}, "sgd", {momentum = -1}) end, {"SGD: momentum must be a number >= 0"})
    H.assert_error(function() Trainer({p}, "adam", {beta1 = 2}) end, {"Adam: beta1 must be a number in [0, 1)"})
    H.assert_error(function() Trainer({p}, "sgd", {lr_scheduler = "x"}) end, {"lr_scheduler must be a scheduler"})
    H.assert_error(function() Trainer({p}, "sgd", "x") end, {"optimizer_params must be a table"})
    H.assert_error(function() p.lr_mult = "x" end, {"Parameter 'w': lr_mult must be a number, got 'x'"})
    H.assert_error(function() Trainer({p}, "sgd")._optimizer:set_wd_mult({w = "x"}) end,
                   {"SGD.set_wd_mult: the multiplier of 'w' must be a number"})
    H.assert_error(function() Trainer({p}, "sgd", nil, {kvstore = "dist_async"}) end, {"dist_async", "'dist'"})
  end)
end)
