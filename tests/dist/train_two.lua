-- train_two.lua: N steps of a small conv net with gluon.Trainer(kvstore =
-- 'dist') on the same global batches, each process training on its own
-- contiguous shard of every batch. Run alone it is rank 0 of 1 and trains on
-- whole batches (the reference); under `mpirun -np 2` the two shards.
-- Every rank writes its parameters to OUT.rank<r>.safetensors (the spec
-- checks the ranks agree to the bit); rank 0 also writes the checkpoint
-- OUT.safetensors through dist.save_parameters.
--   luon tests/dist/train_two.lua --out PATH [--steps 4] [--batch 7]
--        [--devices 1|2] [--bn none|global|train] [--optimizer sgd|adam] [--gpu 1]
-- --gpu 1 trains on gpu(0..devices-1) instead of cpu(...): on real GPUs, or
-- on the stand-in backend (tests/c/fake_cuda.c), whose gradients go
-- through luon.dist's NCCL path.
local luon = require("luon")
local np, npx, gluon, autograd, dist = luon.np, luon.npx, luon.gluon, luon.autograd, luon.dist
local nn = gluon.nn

local opt = {steps = 4, batch = 7, devices = 1, bn = "none", optimizer = "sgd", gpu = 0}
local k = 1
while k <= #arg do
  local key = arg[k]:match("^%-%-(.+)$")
  if not key or arg[k + 1] == nil then error("usage: train_two.lua --out PATH [--steps N] [--batch B] ...") end
  opt[key] = tonumber(arg[k + 1]) or arg[k + 1]
  k = k + 2
end
assert(opt.out, "--out PATH is required")

local rank, size = dist.init()
local devices = {}
for d = 0, opt.devices - 1 do devices[#devices + 1] = opt.gpu == 1 and npx.gpu(d) or npx.cpu(d) end

local net = nn.HybridSequential()
net:add(nn.Conv2D{channels = 4, kernel_size = 3, activation = "relu"},
        nn.MaxPool2D{pool_size = 2, strides = 2})
if opt.bn == "global" then net:add(nn.BatchNorm{use_global_stats = true}) end
if opt.bn == "train" then net:add(nn.BatchNorm()) end
net:add(nn.Flatten(), nn.Dense(8, {activation = "tanh"}), nn.Dense(3))
-- a different seed on every rank: the Trainer must make the weights rank 0's
np.random.seed(7 + 1000 * rank)
net:initialize{init = luon.init.Xavier(), device = devices}
local trainer = gluon.Trainer(net:collect_params(), opt.optimizer,
                              opt.optimizer == "sgd" and {learning_rate = 0.1, momentum = 0.9}
                                                      or {learning_rate = 0.01},
                              {kvstore = "dist"})
local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

for step = 1, opt.steps do
  np.random.seed(100 + step) -- the same global batch on every rank
  local data = np.random.uniform(-1, 1, {opt.batch, 2, 10, 10})
  local label = np.random.randint(0, 3, {opt.batch})
  local lo, hi = math.floor(rank * opt.batch / size), math.floor((rank + 1) * opt.batch / size)
  local x, y = data:slice({lo, hi}), label:slice({lo, hi})
  local xs = gluon.utils.split_and_load(x, devices, {even_split = false})
  local ys = gluon.utils.split_and_load(y, devices, {even_split = false})
  local losses = autograd.record(function()
    local ls = {}
    for i, xi in ipairs(xs) do ls[i] = loss_fn(net(xi), ys[i]) end
    return ls
  end)
  for _, l in ipairs(losses) do l:backward() end
  trainer:step(hi - lo) -- this process's batch; the Trainer sums them
end

net:save_parameters(("%s.rank%d.safetensors"):format(opt.out, rank))
dist.save_parameters(net, opt.out .. ".safetensors")
print(("rank %d of %d: trained %d steps (%s)"):format(rank, size, opt.steps, dist.backend()))
