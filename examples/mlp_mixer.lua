-- mlp_mixer.lua: an MLP-Mixer (Tolstikhin et al. 2021) on Fashion-MNIST,
-- trained by the program of the MXNet 1.x Gluon crash course's "Step 4:
-- Train the neural network" (docs/python_docs/python/tutorials/
-- getting-started/crash-course/4-train.md in apache/mxnet v1.9.1:
-- FashionMNIST, ToTensor + Normalize(0.13, 0.31), batch 256, Xavier,
-- SoftmaxCrossEntropyLoss, sgd lr 0.1, 10 epochs, its acc() and its line per
-- epoch) with its LeNet replaced by a Mixer: MXNet 1.x has no Mixer example,
-- so the network is luon's. It exercises LayerNorm, GELU,
-- Dense(flatten=false), HybridLambda and GlobalAvgPool1D.
--
--   build/luon examples/mlp_mixer.lua [--epochs 10] [--batch-size 256] [--lr 0.1]
--     [--patch 7] [--hidden 64] [--tokens-mlp 32] [--channels-mlp 128] [--depth 2]
--     [--limit N] [--test-limit N] [--seed 0]
--
-- It prints the crash course's line per epoch:
--   Epoch 0: loss 0.812, train acc 0.702, test acc 0.801, in 12.3 sec
local luon = require("luon")
local cli = require("luon.cli")
local np, gluon, autograd = luon.np, luon.gluon, luon.autograd
local nn = gluon.nn

local usage_text =
    "usage: luon examples/mlp_mixer.lua [--epochs 10] [--batch-size 256] [--lr 0.1] [--patch 7]\n" ..
    "       [--hidden 64] [--tokens-mlp 32] [--channels-mlp 128] [--depth 2] [--limit 0]\n" ..
    "       [--test-limit 0] [--seed 0]"

local opt, usage = cli.options(arg, {epochs = 10, batch_size = 256, lr = 0.1, patch = 7, hidden = 64,
                                     tokens_mlp = 32, channels_mlp = 128, depth = 2, limit = 0,
                                     test_limit = 0, seed = 0}, usage_text,
                               {positive = {"epochs", "batch_size", "patch", "hidden", "tokens_mlp",
                                            "channels_mlp", "depth"}})
if 28 % opt.patch ~= 0 then usage(("--patch must divide 28, got %d"):format(opt.patch)) end
np.random.seed(opt.seed)

-- The data, as the crash course.
local vision = gluon.data.vision
local transformer = vision.transforms.Compose{vision.transforms.ToTensor(), vision.transforms.Normalize(0.13, 0.31)}
local mnist_train = vision.FashionMNIST{train = true}
local mnist_valid = vision.FashionMNIST{train = false}
if opt.limit > 0 then mnist_train = mnist_train:take(opt.limit) end
if opt.test_limit > 0 then mnist_valid = mnist_valid:take(opt.test_limit) end
local train_data = gluon.data.DataLoader(mnist_train:transform_first(transformer),
                                         {batch_size = opt.batch_size, shuffle = true})
local valid_data = gluon.data.DataLoader(mnist_valid:transform_first(transformer), {batch_size = opt.batch_size})

-- (N, P, C) <-> (N, C, P)
local function swap(x) return np.swapaxes(x, 1, 2) end

-- One Mixer layer on tokens (N, P, C): an MLP across the P patches, then
-- one across the C channels, each after a LayerNorm and with a skip.
local MixerBlock = nn.HybridBlock:extend("MixerBlock")
function MixerBlock:__init(num_patches, hidden, tokens_mlp, channels_mlp)
  nn.HybridBlock.__init(self)
  self.norm1 = nn.LayerNorm()
  self.token_mlp = nn.HybridSequential()
  self.token_mlp:add(nn.Dense(tokens_mlp, {flatten = false}), nn.GELU(),
                     nn.Dense(num_patches, {flatten = false}))
  self.norm2 = nn.LayerNorm()
  self.channel_mlp = nn.HybridSequential()
  self.channel_mlp:add(nn.Dense(channels_mlp, {flatten = false}), nn.GELU(),
                       nn.Dense(hidden, {flatten = false}))
end
function MixerBlock:forward(x)
  x = x + swap(self.token_mlp(swap(self.norm1(x))))
  return x + self.channel_mlp(self.norm2(x))
end

local num_patches = (28 / opt.patch) ^ 2
local net = nn.HybridSequential()
-- patches: (N,1,28,28) -> (N,C,28/p,28/p) -> (N,P,C)
net:add(nn.Conv2D(opt.hidden, opt.patch, opt.patch),
        nn.HybridLambda(function(x) return swap(x:reshape({x.shape[1], x.shape[2], -1})) end))
for _ = 1, opt.depth do net:add(MixerBlock(num_patches, opt.hidden, opt.tokens_mlp, opt.channels_mlp)) end
-- head: LayerNorm, the mean over patches, a classifier
net:add(nn.LayerNorm(), nn.HybridLambda(swap), nn.GlobalAvgPool1D(), nn.Flatten(), nn.Dense(10))
net:initialize(luon.init.Xavier())

local softmax_cross_entropy = gluon.loss.SoftmaxCrossEntropyLoss()
local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = opt.lr})

local function acc(output, label)
  local m = gluon.metric.Accuracy()
  m:update({label}, {output})
  local _, a = m:get()
  return a
end

for epoch = 0, opt.epochs - 1 do
  local train_loss, train_acc, valid_acc = 0, 0, 0
  local tic = luon.clock()
  local nb, nv = 0, 0
  for data, label in train_data do
    local output, loss = autograd.record(function()
      local o = net(data)
      return o, softmax_cross_entropy(o, label)
    end)
    loss:backward()
    trainer:step(opt.batch_size)
    train_loss = train_loss + loss:mean():item()
    train_acc = train_acc + acc(output, label)
    nb = nb + 1
  end
  for data, label in valid_data do
    valid_acc = valid_acc + acc(net(data), label)
    nv = nv + 1
  end
  print(("Epoch %d: loss %.3f, train acc %.3f, test acc %.3f, in %.1f sec"):format(
    epoch, train_loss / nb, train_acc / nb, valid_acc / nv, luon.clock() - tic))
end
