-- The tutorial's LeafNetwork training step (forward, softmax cross-entropy,
-- backward, SGD step) on CPU at the batch sizes given as arguments (default
-- 4 32 128). Prints "luon <batch> <samples/s> <ms/step>" per batch size:
-- the median step over timed steps after warm-up.
local luon = require("luon")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local LeafNetwork = dofile(here .. "leafnet_model.lua")

local batches = {}
for k = 1, #arg do batches[#batches + 1] = tonumber(arg[k]) end
if #batches == 0 then batches = {4, 32, 128} end
np.random.seed(0)
for _, b in ipairs(batches) do
  local net = LeafNetwork()
  net:initialize{init = luon.init.Xavier()}
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.001})
  local x = np.random.uniform(0, 1, {b, 3, 128, 128})
  local y = np.random.randint(0, 2, {b})
  local function step()
    local l = autograd.record(function() return loss_fn(net(x), y) end)
    l:backward()
    trainer:step(b)
    l:wait_to_read()
  end
  local warm, timed = 3, b >= 128 and 5 or b >= 32 and 9 or 25
  for _ = 1, warm do step() end
  local t = {}
  for k = 1, timed do
    local t0 = luon.clock()
    step()
    t[k] = luon.clock() - t0
  end
  table.sort(t)
  local med = t[math.floor((timed + 1) / 2)]
  print(("luon %d %.1f %.1f"):format(b, b / med, med * 1e3))
end
