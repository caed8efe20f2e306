-- amp_spec: luon.amp (MXNet's mx.contrib.amp) on every device: after init
-- the matrix products and convolutions run in the target dtype on float32
-- inputs, the float32-only ops get float32, parameters stay float32 with
-- float32 gradients, a bfloat16 step matches float32 within bfloat16's
-- rounding, float16's dynamic loss scaler skips a step whose gradients
-- overflow and halves the scale, and bad arguments are errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local luon = H.luon
local amp, gluon, autograd = luon.amp, luon.gluon, luon.autograd
local nn = gluon.nn

-- A small convolutional net, its parameters initialised from the seed.
local function small_net(dev, seed)
  np.random.seed(seed)
  local net = nn.HybridSequential()
  net:add(nn.Conv2D(4, 3, {padding = 1}), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(2),
          nn.Flatten(), nn.Dense(8, {activation = "relu"}), nn.Dense(3))
  net:initialize(luon.init.Xavier(), {device = dev})
  return net
end

-- One SGD step of net on (x, y); amp scales the loss when the trainer has a scaler.
local function step(net, x, y, scaled)
  local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})
  if scaled then amp.init_trainer(tr) end
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  local l = autograd.record(function()
    local l = loss_fn(net(x), y)
    return scaled and amp.scale_loss(l, tr) or l
  end)
  l:backward()
  tr:step(x.shape[1])
  return tr
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    after_each(function() amp.reset() end)

    it("casts the target ops' float32 inputs and the float32-only ops' 16-bit ones", function()
      amp.init{target_dtype = "bfloat16"}
      local a = np.ones({4, 8}, {device = dev})
      local b = np.ones({8, 3}, {device = dev})
      assert.equal("bfloat16", np.matmul(a, b).dtype)
      assert.equal("float64", np.matmul(a:astype("float64"), b:astype("float64")).dtype) -- float64 stays
      local net = small_net(dev, 1)
      local x = np.random.uniform(0, 1, {2, 3, 8, 8}, {device = dev})
      local y = net(x)
      assert.equal("float32", y.dtype) -- the last Dense's bias add promotes to float32
      assert.equal("float32", npx.softmax(np.matmul(a, b)).dtype)
      amp.reset()
      assert.equal("float32", np.matmul(a, b).dtype)
      assert.is_false((amp.is_enabled()))
    end)

    it("bfloat16: parameters and gradients stay float32; the step matches float32", function()
      local x = np.random.uniform(0, 1, {4, 3, 8, 8}, {device = dev})
      local y = np.array({0, 1, 2, 1}, {device = dev})
      local ref = small_net(dev, 7)
      step(ref, x, y, false)
      amp.init("bfloat16")
      local net = small_net(dev, 7)
      step(net, x, y, true)
      local pr, pn = ref:collect_params(), net:collect_params()
      for name, p in pairs(pn) do
        assert.equal("float32", p:data().dtype)
        if p.grad_req ~= "null" then assert.equal("float32", p:grad().dtype) end
        H.assert_close(p:data():totable(), pr[name]:data():totable(), 5e-2)
      end
    end)

    it("float16: the loss scaler starts at 2^16, skips an overflowing step and halves", function()
      amp.init("float16")
      local net = small_net(dev, 3)
      local x = np.random.uniform(0, 1, {2, 3, 8, 8}, {device = dev})
      local y = np.array({0, 2}, {device = dev})
      local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})
      amp.init_trainer(tr)
      assert.equal(2 ^ 16, amp.loss_scale(tr))
      local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
      local function weights()
        local w = {}
        for name, p in pairs(net:collect_params()) do
          if p.grad_req ~= "null" then w[name] = p:data():copy() end
        end
        return w
      end
      local function moved(before)
        local m = 0
        for name, w in pairs(before) do m = m + (net:collect_params()[name]:data() - w):abs():sum():item() end
        return m
      end
      net(x) -- deferred shapes
      -- gradients of a huge input overflow float16: nothing changes, the scale halves
      local before = weights()
      local l = autograd.record(function() return amp.scale_loss(loss_fn(net(x * 1e6), y), tr) end)
      l:backward()
      tr:step(2)
      assert.equal(2 ^ 15, amp.loss_scale(tr))
      assert.equal(0, moved(before))
      -- ordinary steps: skipped (and halving) until the scaled gradients fit, then applied
      local s = amp.loss_scale(tr)
      for _ = 1, 12 do
        l = autograd.record(function() return amp.scale_loss(loss_fn(net(x), y), tr) end)
        l:backward()
        tr:step(2)
        if amp.loss_scale(tr) == s then break end
        assert.equal(s / 2, amp.loss_scale(tr))
        assert.equal(0, moved(before))
        s = amp.loss_scale(tr)
      end
      assert.equal(s, amp.loss_scale(tr))
      assert.is_true(moved(before) > 0)
    end)

    it("unscale divides the gradients once, so clipping sees their true size", function()
      amp.init("float16")
      local net = nn.Dense(2, {in_units = 3})
      net:initialize(luon.init.One(), {device = dev})
      local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0})
      amp.init_trainer(tr)
      local x = np.ones({1, 3}, {device = dev})
      local l = autograd.record(function() return amp.scale_loss(net(x):sum() * 1e-3, tr) end)
      l:backward()
      amp.unscale(tr)
      H.assert_close(net.weight:grad():totable(), {{1e-3, 1e-3, 1e-3}, {1e-3, 1e-3, 1e-3}}, 1e-2)
      amp.unscale(tr) -- once only
      H.assert_close(net.weight:grad():totable(), {{1e-3, 1e-3, 1e-3}, {1e-3, 1e-3, 1e-3}}, 1e-2)
      tr:step(1)
    end)
  end)
end

describe("amp bad input", function()
  after_each(function() amp.reset() end)
  it("names what it expected", function()
    H.assert_error(function() amp.init("float32") end, "target_dtype must be 'float16' or 'bfloat16'")
    H.assert_error(function() amp.init{fp32_ops = {"softmx"}} end, "unknown op 'softmx'; did you mean 'softmax'")
    H.assert_error(function() amp.init{target_precision_ops = {"conv2d_maxpool"}} end, "does not take 16-bit inputs")
    H.assert_error(function() amp.init{conditional_fp32_ops = {}} end, "conditional_fp32_ops is not supported")
    H.assert_error(function() amp.init_trainer({}) end, "call amp.init() first")
    amp.init("bfloat16")
    H.assert_error(function() amp.init("float16") end, "already on with target_dtype 'bfloat16'")
    H.assert_error(function() amp.init_trainer(42) end, "expected a gluon.Trainer")
    H.assert_error(function() amp.scale_loss(np.ones({1}), {}) end, "amp.init_trainer(trainer) first")
    assert.equal(3, (np.ones({3}) + 2):sum():item() / 3) -- still usable
  end)
end)
