-- train_spec: the proof that it trains, small: on each device a small CNN
-- (conv, pool, batch norm, dense, dropout) learns Fashion-MNIST from 2000
-- training images with SGD and momentum. The loss of the last 20 batches is
-- well below that of the first 20, the accuracy on 500 held-out test images
-- beats chance (0.1) by far, and a second run from the same seed repeats
-- the first epoch's losses bit for bit (each device draws from its own random stream, so
-- devices differ from each other). The full run is
-- scripts/fashion_mnist.lua.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, gluon, autograd = luon.np, luon.gluon, luon.autograd
local nn = gluon.nn

local N_TRAIN, N_TEST, BATCH, EPOCHS = 2000, 500, 50, 3

local vision = gluon.data.vision
local train_ds = vision.FashionMNIST{train = true}:take(N_TRAIN)
local test_ds = vision.FashionMNIST{train = false}:take(N_TEST)

-- uint8 (N,28,28,1) -> float32 (N,1,28,28) in [0, 1], on dev.
local function to_tensor(x, dev)
  return (np.transpose(x:astype("float32"), {0, 3, 1, 2}) / 255):to_device(dev)
end

local function mean(list, from, to)
  local s = 0
  for k = from, to do s = s + list[k] end
  return s / (to - from + 1)
end

-- Trains on dev from seed for `epochs` (default EPOCHS); returns the list of
-- batch losses and the held-out accuracy.
local function train(dev, seed, epochs)
  np.random.seed(seed)
  local net = nn.HybridSequential()
  net:add(nn.Conv2D{channels = 16, kernel_size = 3, padding = 1, activation = "relu"},
          nn.MaxPool2D(2),
          nn.BatchNorm(),
          nn.Conv2D{channels = 16, kernel_size = 3, activation = "relu"},
          nn.MaxPool2D(2),
          nn.Flatten(),
          nn.Dense(64, {activation = "relu"}),
          nn.Dropout(0.2),
          nn.Dense(10))
  net:initialize({init = luon.init.Xavier(), device = dev})
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.05, momentum = 0.9})
  local loader = gluon.data.DataLoader(train_ds, {batch_size = BATCH, shuffle = true, seed = seed})
  local losses = {}
  for _ = 1, epochs or EPOCHS do
    for data, label in loader do
      local x, y = to_tensor(data, dev), label:to_device(dev)
      local l = autograd.record(function() return loss_fn(net(x), y) end)
      l:backward()
      trainer:step(x.shape[1])
      losses[#losses + 1] = l:mean():item()
    end
  end
  local acc = gluon.metric.Accuracy()
  for data, label in gluon.data.DataLoader(test_ds, {batch_size = 250}) do
    acc:update({label:to_device(dev)}, {net(to_tensor(data, dev))})
  end
  local _, a = acc:get()
  return losses, a
end

describe("training a small CNN on Fashion-MNIST", function()
  local results = {}
  for _, dev in ipairs(H.devices()) do
    it("learns on " .. tostring(dev), function()
      local t0 = luon.clock()
      local losses, acc = train(dev, 7)
      local secs = luon.clock() - t0
      local n = #losses
      assert.are.equal(EPOCHS * N_TRAIN / BATCH, n)
      for k = 1, n do
        assert(losses[k] == losses[k] and losses[k] < 10,
               ("batch %d: loss %s is not finite or diverged"):format(k, tostring(losses[k])))
      end
      local first, last = mean(losses, 1, 20), mean(losses, n - 19, n)
      assert(last < 0.6 * first,
             ("the loss did not fall enough: first 20 batches %.4f, last 20 %.4f"):format(first, last))
      assert(acc > 0.5, ("held-out accuracy %.4f is not above 0.5 (chance is 0.1)"):format(acc))
      print(("\n  %s: loss %.4f -> %.4f, held-out accuracy %.4f, %.1f s"):format(
        tostring(dev), first, last, acc, secs))
      results[#results + 1] = {dev = dev, losses = losses, acc = acc}
    end)
  end

  it("is deterministic: the same seed gives the same losses (first epoch again)", function()
    local r = results[1]
    assert(r, "the first device's run failed")
    local losses = train(r.dev, 7, 1)
    local n = N_TRAIN / BATCH
    assert.are.equal(n, #losses)
    for k = 1, n do
      assert(losses[k] == r.losses[k], ("batch %d: loss %.9g, the first run had %.9g"):format(
        k, losses[k], r.losses[k]))
    end
  end)
end)
