-- The model zoo's resnet18_v1 on the CPU: a training step (forward, softmax
-- cross-entropy, backward, SGD) at batch 32 and inference at batch 1, both
-- on 224x224 images, 1000 classes. Prints "luon train 32 <samples/s> <ms>"
-- and "luon infer 1 <samples/s> <ms>": the median over timed runs after
-- warm-up, each timed to completion (wait_to_read). Arguments: [train_batch
-- [infer_batch]].
local luon = require("luon")
local np, gluon, autograd = luon.np, luon.gluon, luon.autograd
local vision = gluon.model_zoo.vision

local train_b, infer_b = tonumber(arg[1]) or 32, tonumber(arg[2]) or 1
np.random.seed(0)
local net = vision.resnet18_v1()
net:initialize(luon.init.Xavier())
net:hybridize{static_alloc = true, static_shape = true} -- as bench/zoo_mx.py hybridizes MXNet's

local function median(f, warm, timed)
  for _ = 1, warm do f() end
  local t = {}
  for i = 1, timed do
    local t0 = luon.clock()
    f()
    t[i] = luon.clock() - t0
  end
  table.sort(t)
  return t[math.floor((timed + 1) / 2)]
end

local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.001})
local x = np.random.uniform(0, 1, {train_b, 3, 224, 224})
local y = np.random.randint(0, 1000, {train_b})
local med = median(function()
  local l = autograd.record(function() return loss_fn(net(x), y) end)
  l:backward()
  trainer:step(train_b)
  l:wait_to_read()
end, 2, 5)
print(("luon train %d %.2f %.1f"):format(train_b, train_b / med, med * 1e3))

local x1 = np.random.uniform(0, 1, {infer_b, 3, 224, 224})
med = median(function() net(x1):wait_to_read() end, 5, 21)
print(("luon infer %d %.2f %.2f"):format(infer_b, infer_b / med, med * 1e3))
