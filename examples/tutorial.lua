-- tutorial.lua: MXNet's "Gluon on GPUs" tutorial as a luon program, from
-- counting devices to data-parallel training of the LeafNetwork on two
-- devices. It runs as it is on a machine without a GPU: `gpu` is then
-- cpu(0) and the two training devices are the logical cpu(0) and cpu(1).
--
--   build/luon examples/tutorial.lua [ROOT]
--
-- ROOT (default ./datasets) holds train/<class>/*.jpg and
-- validation/<class>/*.jpg with two classes; `scripts/make_dataset --out
-- ROOT` makes one from Fashion-MNIST. scripts/leaf_train.lua is the same
-- program with options (devices, epochs, batch size, checkpoints).
--
-- Conventions: arguments are positional as in NumPy/MXNet, then one table of
-- keywords (np.ones({3, 4}, {device = gpu})); a call whose one argument has
-- string keys is all keywords (nn.Conv2D{channels = 32, ...}). Tensor axes
-- and device ids are 0-based; Lua lists (shapes, devices, split batches) are
-- 1-based. Python's `with autograd.record():` is autograd.record(function()
-- ... end), which returns what the function returns.
local luon = require("luon")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd
local nn = gluon.nn

local root = arg and arg[1] or "./datasets"
local params_file = os.tmpname()

-- Devices. num_gpus() is 0 without CUDA; gpu_memory_info says (0, 0) then.
print(npx.num_gpus())
local free, total = npx.gpu_memory_info(0)
print(("GPU 0: %d of %d bytes free"):format(free, total))

-- Arrays live on a device; printing names every device but cpu(0).
local gpu = npx.num_gpus() > 0 and npx.gpu() or npx.cpu()
local x = np.ones({3, 4}, {device = gpu})
print(x)
print(x.device)

-- Copies are explicit: to a device (a new array), into an array, to the host.
local gpu_1 = npx.num_gpus() > 1 and npx.gpu(1) or npx.cpu()
local x1 = x:copyto(gpu_1)
x:copyto(np.zeros({3, 4}, {device = gpu}))
local host = x:asnumpy()
print(x1.device, host.device)

-- An op runs where its inputs are; inputs on two devices are an error.
local y = np.random.uniform({size = {3, 4}, device = gpu})
local z = x + y
assert(z.device == gpu)

-- The LeafNetwork (examples/leafnet.lua): three blocks of convolution,
-- max-pooling and BatchNorm, then three dense layers. A class is made with
-- nn.HybridBlock:extend("LeafNetwork"); in its __init, a Block assigned to a
-- field becomes a child, and its forward says what a call computes.
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local LeafNetwork = dofile(here .. "leafnet.lua")

-- Shapes are inferred at the first call; parameters saved on one device
-- load onto another.
local net = LeafNetwork()
net:initialize()
net:summary(np.random.uniform({size = {4, 3, 128, 128}}))
net:save_parameters(params_file)
net:load_parameters(params_file, {device = gpu})
os.remove(params_file)
net:collect_params():reset_device(gpu)

-- Inference on the device; asnumpy() brings the result to the host.
local out = net(np.random.uniform({size = {1, 3, 128, 128}, device = gpu}))
print(out:asnumpy())

-- The data: image folders, the tutorial's transforms, loaders. A Compose of
-- built-in transforms runs in C worker threads (try_nopython).
local transforms = gluon.data.vision.transforms
local jitter_param = 0.05
local mean, std = {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}
local training_transformer = transforms.Compose{
  transforms.Resize{size = 224, keep_ratio = true},
  transforms.CenterCrop(128),
  transforms.RandomFlipLeftRight(),
  transforms.RandomColorJitter{contrast = jitter_param},
  transforms.ToTensor(),
  transforms.Normalize(mean, std),
}
local validation_transformer = transforms.Compose{
  transforms.Resize{size = 224, keep_ratio = true},
  transforms.CenterCrop(128),
  transforms.ToTensor(),
  transforms.Normalize(mean, std),
}
local train_dataset = gluon.data.vision.ImageFolderDataset(root .. "/train")
local val_dataset = gluon.data.vision.ImageFolderDataset(root .. "/validation")
local batch_size = 4
local train_loader = gluon.data.DataLoader(
  train_dataset:transform_first(training_transformer),
  {batch_size = batch_size, shuffle = true, try_nopython = true})
local validation_loader = gluon.data.DataLoader(
  val_dataset:transform_first(validation_transformer),
  {batch_size = batch_size, try_nopython = true})

-- Evaluation over several devices: each batch is split across them.
local function test(val_data, devices)
  local acc = gluon.metric.Accuracy()
  for _, batch in val_data:enumerate() do
    local data, label = batch[1], batch[2]
    local data_list = gluon.utils.split_and_load(data, devices)
    local label_list = gluon.utils.split_and_load(label, devices)
    local outputs = {}
    for i, X in ipairs(data_list) do outputs[i] = net(X) end
    acc:update(label_list, outputs)
  end
  local _, accuracy = acc:get()
  return accuracy
end

-- Data-parallel training: two GPUs when there are two, else cpu(0), cpu(1).
local available_gpus = {}
for i = 0, npx.num_gpus() - 1 do available_gpus[#available_gpus + 1] = npx.gpu(i) end
local devices = #available_gpus >= 2 and {available_gpus[1], available_gpus[2]}
                or {npx.cpu(0), npx.cpu(1)}
print(("Using %d GPUs"):format(#devices))

net:initialize({force_reinit = true, device = devices})    -- one replica per device

local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.001})
local epochs, log_interval = 2, 5
local accuracy = gluon.metric.Accuracy()

for epoch = 1, epochs do
  local train_loss, tic, btic = 0, luon.clock(), luon.clock()
  accuracy:reset()
  for idx, batch in train_loader:enumerate() do        -- idx counts from 1
    local data, label = batch[1], batch[2]
    local data_list = gluon.utils.split_and_load(data, devices)
    local label_list = gluon.utils.split_and_load(label, devices)
    -- forward on every device (they run concurrently), then backward
    local outputs, losses = autograd.record(function()
      local outs, ls = {}, {}
      for i, X in ipairs(data_list) do
        outs[i] = net(X)
        ls[i] = loss_fn(outs[i], label_list[i])
      end
      return outs, ls
    end)
    for _, l in ipairs(losses) do l:backward() end
    trainer:step(batch_size)        -- sums the replicas' gradients, updates each
    for _, l in ipairs(losses) do train_loss = train_loss + l:sum():item() end
    accuracy:update(label_list, outputs)
    if log_interval and idx % log_interval == 0 then
      local _, acc = accuracy:get()
      print(("Epoch[%d] Batch[%d] Speed: %.1f samples/sec batch loss = %.4f | accuracy = %.4f")
            :format(epoch, idx, batch_size / (luon.clock() - btic), train_loss, acc))
      btic = luon.clock()
    end
  end
  local _, acc = accuracy:get()
  local acc_val = test(validation_loader, devices)
  print(("[Epoch %d] training: accuracy=%.4f"):format(epoch, acc))
  print(("[Epoch %d] time cost: %.2f"):format(epoch, luon.clock() - tic))
  print(("[Epoch %d] validation: validation accuracy=%.4f"):format(epoch, acc_val))
end

-- Mistakes are Lua errors, and leave nothing half-done: a batch of 5 does
-- not split evenly over two devices unless asked.
local ok, err = pcall(gluon.utils.split_and_load, np.ones({5, 2}), {npx.cpu(0), npx.cpu(1)})
assert(not ok)
print(err)
local parts = gluon.utils.split_and_load(np.ones({5, 2}), {npx.cpu(0), npx.cpu(1)},
                                         {even_split = false})
assert(#parts == 2 and parts[1].shape[1] == 3)
