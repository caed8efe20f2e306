-- scripts/fashion_mnist.lua: a small CNN trained on Fashion-MNIST (Debian's
-- dataset-fashion-mnist, /usr/share/datasets/fashion-mnist) with SGD and
-- momentum; prints samples/s, train loss and accuracy, test accuracy and time
-- per epoch. The proof that luon trains: >= 88% test accuracy after 2 epochs.
--
--   build/luon scripts/fashion_mnist.lua [--epochs 2] [--batch-size 64] [--lr 0.05]
--              [--momentum 0.9] [--wd 0] [--devices cpu:0[,cpu:1|gpu:0...]]
--              [--limit N] [--log-interval N] [--seed 42]
--
-- --devices: a comma list of cpu:I / gpu:I (data-parallel over them; the
-- batch is split with gluon.utils.split_and_load). --limit N trains on the
-- first N training images only (for a quick look).
local luon = require("luon")
local cli = require("luon.cli")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd
local nn = gluon.nn

local usage_text =
    "usage: luon scripts/fashion_mnist.lua [--epochs 2] [--batch-size 64] [--lr 0.05] [--momentum 0.9]\n" ..
    "       [--wd 0] [--devices cpu:0] [--limit N] [--log-interval N] [--seed 42]"

local opt, usage = cli.options(arg, {epochs = 2, batch_size = 64, lr = 0.05, momentum = 0.9, wd = 0,
                                     devices = "cpu:0", limit = 0, log_interval = 200, seed = 42}, usage_text,
                               {positive = {"epochs", "batch_size"}})

local devices = {}
for spec in opt.devices:gmatch("[^,]+") do
  local kind, id = spec:match("^(%a+):?(%d*)$")
  id = tonumber(id) or 0
  if kind == "cpu" then
    devices[#devices + 1] = npx.cpu(id)
  elseif kind == "gpu" then
    if id >= npx.num_gpus() then usage(("--devices: %s, but there are %d GPUs"):format(spec, npx.num_gpus())) end
    devices[#devices + 1] = npx.gpu(id)
  else
    usage("--devices: expected cpu:I or gpu:I, got " .. spec)
  end
end
if #devices == 0 then usage("--devices: none given") end
if opt.batch_size % #devices ~= 0 then
  usage(("--batch-size %d is not a multiple of the %d devices"):format(opt.batch_size, #devices))
end

np.random.seed(opt.seed)

-- Data: uint8 (N,28,28,1) images, labels 0..9. A batch is made float32
-- (N,1,28,28) in [0,1] by luon ops (ToTensor on a whole batch).
local vision = gluon.data.vision
local train_ds = vision.FashionMNIST{train = true}
local test_ds = vision.FashionMNIST{train = false}
if opt.limit > 0 then train_ds = train_ds:take(opt.limit) end
local train_loader = gluon.data.DataLoader(train_ds, {batch_size = opt.batch_size, shuffle = true,
                                                      last_batch = "discard"})
local test_loader = gluon.data.DataLoader(test_ds, {batch_size = 500})

local function to_tensor(x)   -- uint8 (N,28,28,1) -> float32 (N,1,28,28) / 255
  return np.transpose(x:astype("float32"), {0, 3, 1, 2}) / 255
end

-- The network.
local net = nn.HybridSequential()
net:add(nn.Conv2D{channels = 32, kernel_size = 3, padding = 1, activation = "relu"},
        nn.MaxPool2D(2),
        nn.BatchNorm(),
        nn.Conv2D{channels = 64, kernel_size = 3, activation = "relu"},
        nn.MaxPool2D(2),
        nn.BatchNorm(),
        nn.Flatten(),
        nn.Dense(128, {activation = "relu"}),
        nn.Dropout(0.3),
        nn.Dense(10))
net:initialize({init = luon.init.Xavier(), device = devices})

local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
local trainer = gluon.Trainer(net:collect_params(), "sgd",
                              {learning_rate = opt.lr, momentum = opt.momentum, wd = opt.wd})
local split = gluon.utils.split_and_load

local function evaluate(loader)
  local acc = gluon.metric.Accuracy()
  for data, label in loader do
    local xs = split(to_tensor(data), devices)
    local ys = split(label, devices)
    local outs = {}
    for k, x in ipairs(xs) do outs[k] = net(x) end
    acc:update(ys, outs)
  end
  local _, a = acc:get()
  return a
end

print(("luon fashion_mnist: %d training images, %d test images, devices %s"):format(
  train_ds:len(), test_ds:len(), opt.devices))
print(("epochs %d, batch size %d, sgd lr %g momentum %g wd %g"):format(
  opt.epochs, opt.batch_size, opt.lr, opt.momentum, opt.wd))

local metric = gluon.metric.Accuracy()
local t_start = luon.clock()
local last_acc
for epoch = 1, opt.epochs do
  metric:reset()
  local tic, btic = luon.clock(), luon.clock()
  local loss_sum, seen, nb = 0, 0, 0
  for i, batch in train_loader:enumerate() do
    local data, label = batch[1], batch[2]
    local n = data.shape[1]
    local xs = split(to_tensor(data), devices)
    local ys = split(label, devices)
    local outs, losses = autograd.record(function()
      local o, l = {}, {}
      for k, x in ipairs(xs) do
        o[k] = net(x)
        l[k] = loss_fn(o[k], ys[k])
      end
      return o, l
    end)
    for _, l in ipairs(losses) do l:backward() end
    trainer:step(n)
    for _, l in ipairs(losses) do loss_sum = loss_sum + l:sum():item() end
    metric:update(ys, outs)
    seen, nb = seen + n, nb + 1
    if opt.log_interval > 0 and i % opt.log_interval == 0 then
      local _, acc = metric:get()
      print(("  epoch %d batch %d: %.1f samples/s, loss %.4f, accuracy %.4f"):format(
        epoch, i, opt.log_interval * opt.batch_size / (luon.clock() - btic), loss_sum / seen, acc))
      btic = luon.clock()
    end
  end
  local train_time = luon.clock() - tic
  local _, train_acc = metric:get()
  local test_acc = evaluate(test_loader)
  last_acc = test_acc
  print(("[epoch %d] %.1f samples/s, train loss %.4f, train accuracy %.4f, test accuracy %.4f, " ..
         "time %.1f s (train %.1f s)"):format(epoch, seen / train_time, loss_sum / seen, train_acc, test_acc,
                                              luon.clock() - tic, train_time))
end
print(("total time %.1f s, final test accuracy %.4f"):format(luon.clock() - t_start, last_acc))
