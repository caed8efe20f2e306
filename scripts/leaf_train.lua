-- leaf_train.lua: the MXNet GPU tutorial (examples/tutorial.lua) as a program:
-- the LeafNetwork trained data-parallel on several devices from an
-- ImageFolder tree, with the tutorial's transforms and log lines, a
-- progress bar on a terminal, validation accuracy per epoch, test accuracy
-- at the end, and the parameters saved, reloaded and checked; --csv and
-- --plot write the metrics per epoch (and per log interval) and their chart.
--   build/luon scripts/leaf_train.lua --help
local luon = require("luon")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd
local nn = gluon.nn

---------------------------------------------------------------------------
-- Options

local defaults = {
  root = "data/fashion-leaf", devices = "auto", epochs = 2, ["batch-size"] = 32,
  lr = 0.01, momentum = 0.9, ["log-interval"] = 20, save = "leaf_models.params",
  workers = 2, seed = 42, limit = 0, model = "leafnet", csv = "", plot = "",
}
local help = [[
usage: luon scripts/leaf_train.lua [options]
  --root DIR          ImageFolder tree with train/, validation/ and test/ (default data/fashion-leaf)
  --devices LIST      auto | cpu:0,cpu:1 | gpu:0,gpu:1 (default auto: two GPUs when there
                      are two, one GPU when there is one, two logical CPU devices otherwise)
  --epochs N          (default 2)
  --batch-size N      global batch, split across the devices (default 32)
  --lr X              SGD learning rate (default 0.01; the tutorial's 0.001 learns slowly)
  --momentum X        SGD momentum (default 0.9; the tutorial uses none)
  --log-interval N    log every N batches, 0 for never (default 20)
  --save PATH         where the parameters go (default leaf_models.params)
  --workers N         data-loader threads (default 2)
  --seed N            shuffling, augmentation and initialisation (default 42)
  --limit N           use N images of each split, chosen at random by --seed (0: all)
  --model NAME        leafnet (the tutorial's, default) or a gluon.model_zoo.vision name
                      (resnet18_v1, mobilenet1.0, ...), with as many classes as the data has
  --csv PATH          write the training and validation metrics to a CSV file, a row per epoch
                      and per log interval (luon.plot's format)
  --plot PATH.png     draw the loss and accuracy curves into a PNG after each epoch (luon.plot;
                      needs Debian's libcairo2)]]

local function parse(argv)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then print(help) os.exit(0) end
    local key, val = a:match("^%-%-([%w-]+)=(.*)$")
    if not key then
      key = a:match("^%-%-([%w-]+)$")
      val = argv[i + 1]
      i = i + 1
    end
    if not key or defaults[key] == nil then
      io.stderr:write(("leaf_train: unknown option %s\n%s\n"):format(a, help))
      os.exit(2)
    end
    if val == nil then
      io.stderr:write(("leaf_train: %s needs a value\n"):format(a))
      os.exit(2)
    end
    if type(defaults[key]) == "number" then
      val = tonumber(val) or error(("leaf_train: %s expects a number, got %s"):format(a, val), 0)
    end
    o[key] = val
    i = i + 1
  end
  return o
end

local opt = parse(arg or {})
if opt.plot ~= "" and not opt.plot:lower():match("%.png$") then
  error(("leaf_train: --plot expects a .png path, got %s"):format(opt.plot), 0)
end

local function pick_devices(spec)
  if spec == "auto" then
    local n = npx.num_gpus()
    if n >= 2 then return {npx.gpu(0), npx.gpu(1)} end
    if n == 1 then return {npx.gpu(0)} end
    return {npx.cpu(0), npx.cpu(1)}
  end
  local list = {}
  for item in spec:gmatch("[^,]+") do
    local kind, id = item:match("^%s*(%a+):(%d+)%s*$")
    if not kind or (kind ~= "cpu" and kind ~= "gpu") then
      error(("leaf_train: bad device %q (expected cpu:N or gpu:N)"):format(item), 0)
    end
    list[#list + 1] = kind == "cpu" and npx.cpu(tonumber(id)) or npx.gpu(tonumber(id))
  end
  return list
end

local devices = pick_devices(opt.devices)
local batch_size = opt["batch-size"]
np.random.seed(opt.seed)

---------------------------------------------------------------------------
-- The LeafNetwork (examples/leafnet.lua, the tutorial's)

local LeafNetwork = dofile((debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./")
                           .. "../examples/leafnet.lua")

---------------------------------------------------------------------------
-- Data (section 8.1)

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

local function dataset(split)
  local path = opt.root .. "/" .. split
  local ok, ds = pcall(gluon.data.vision.ImageFolderDataset, path)
  if not ok then
    error(("leaf_train: cannot read the %s images under %s (%s); make the default dataset " ..
           "with `scripts/make_dataset` or pass --root"):format(split, path, tostring(ds)), 0)
  end
  local nclasses = #ds.synsets
  -- a random subset, not the first items: an ImageFolder lists its classes in turn
  if opt.limit > 0 and ds:len() > opt.limit then
    ds = ds:sample(gluon.data.RandomSampler(ds:len(), opt.seed)):take(opt.limit)
  end
  return ds, nclasses
end

local function loader(ds, transformer, shuffle)
  return gluon.data.DataLoader(ds:transform_first(transformer),
    {batch_size = batch_size, shuffle = shuffle, try_nopython = opt.limit == 0 or nil, num_workers = opt.workers,
     seed = opt.seed, last_batch = shuffle and "discard" or "keep"})
end

local train_ds, nclasses = dataset("train")
local val_ds, test_ds = dataset("validation"), dataset("test")
local train_loader = loader(train_ds, training_transformer, true)
local validation_loader = loader(val_ds, validation_transformer, false)
local test_loader = loader(test_ds, validation_transformer, false)

---------------------------------------------------------------------------
-- The metrics' log and chart (--csv, --plot)

local plot = luon.plot
local csv_path = opt.csv ~= "" and opt.csv or (opt.plot ~= "" and os.tmpname() or nil)
local csv_log = csv_path and plot.CSVLog(csv_path, {"training accuracy", "training loss", "validation accuracy"})

---------------------------------------------------------------------------
-- Evaluation (section 8.2)

local split_and_load = gluon.utils.split_and_load

local function test(net, data, devs)
  local acc = gluon.metric.Accuracy()
  for _, batch in data:enumerate() do
    local parts = #devs
    local even = batch[1].shape[1] % parts == 0
    local data_list = split_and_load(batch[1], devs, {even_split = even})
    local label_list = split_and_load(batch[2], devs, {even_split = even})
    local outputs = {}
    for i, X in ipairs(data_list) do outputs[i] = net(X) end
    acc:update(label_list, outputs)
  end
  local _, accuracy = acc:get()
  return accuracy
end

---------------------------------------------------------------------------
-- Training (section 8.3)

print(("Using %d device%s: %s"):format(#devices, #devices == 1 and "" or "s",
      table.concat((function() local t = {} for i, d in ipairs(devices) do t[i] = tostring(d) end return t end)(), ", ")))
print(("train %d, validation %d, test %d images; batch %d; %d epochs; lr %g, momentum %g")
      :format(train_ds:len(), val_ds:len(), test_ds:len(), batch_size, opt.epochs, opt.lr, opt.momentum))

-- the tutorial's network, or a model zoo architecture for the data's classes
local function make_net()
  if opt.model == "leafnet" then return LeafNetwork() end
  return gluon.model_zoo.vision.get_model(opt.model, {classes = nclasses})
end

local net = make_net()
print(("model %s: %d parameter arrays"):format(opt.model, net:collect_params():len()))
net:initialize({init = luon.init.Xavier(), force_reinit = true, device = devices})

local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = opt.lr, momentum = opt.momentum})
local accuracy = gluon.metric.Accuracy()
local log_interval = opt["log-interval"]
local nbatches = train_loader:len()
local acc_val = 0
local batches_done = 0

for epoch = 1, opt.epochs do
  local train_loss, tic, btic = 0, luon.clock(), luon.clock()
  local seen = 0
  accuracy:reset()
  local bar = luon.progress.Bar{total = nbatches, label = ("[Epoch %d]"):format(epoch)}
  for idx, batch in train_loader:enumerate() do
    local data, label = batch[1], batch[2]
    local data_list = split_and_load(data, devices)
    local label_list = split_and_load(label, devices)
    local outputs, losses = autograd.record(function()
      local outs, ls = {}, {}
      for i, X in ipairs(data_list) do
        outs[i] = net(X)
        ls[i] = loss_fn(outs[i], label_list[i])
      end
      return outs, ls
    end)
    for _, l in ipairs(losses) do l:backward() end
    trainer:step(batch_size)
    local batch_loss = 0
    for _, l in ipairs(losses) do batch_loss = batch_loss + l:sum():item() end
    train_loss = train_loss + batch_loss
    seen = seen + batch_size
    batches_done = batches_done + 1
    accuracy:update(label_list, outputs)
    if log_interval > 0 and idx % log_interval == 0 then
      local _, acc = accuracy:get()
      bar:clear()
      if csv_log then csv_log:write(epoch - 1 + idx / nbatches, batches_done, "batch", {acc, train_loss / seen}) end
      print(("Epoch[%d] Batch[%d] Speed: %.1f samples/sec batch loss = %.4f | accuracy = %.4f")
            :format(epoch, idx, batch_size * log_interval / (luon.clock() - btic), batch_loss, acc))
      btic = luon.clock()
    end
    local _, acc = accuracy:get()
    bar:update(idx, ("loss %.4f  acc %.4f"):format(train_loss / seen, acc))
  end
  bar:clear()
  local _, acc = accuracy:get()
  local cost = luon.clock() - tic
  acc_val = test(net, validation_loader, devices)
  print(("[Epoch %d] training: accuracy=%.4f loss=%.4f"):format(epoch, acc, train_loss / math.max(seen, 1)))
  print(("[Epoch %d] time cost: %.2f (%.1f samples/sec)"):format(epoch, cost, seen / cost))
  print(("[Epoch %d] validation: validation accuracy=%.4f"):format(epoch, acc_val))
  if csv_log then
    csv_log:write(epoch, batches_done, "epoch", {acc, train_loss / math.max(seen, 1), acc_val})
    if opt.plot ~= "" then plot.curves(csv_path, opt.plot, {title = "leaf_train: " .. opt.model}) end
  end
end
if opt.plot ~= "" then print(("curves: %s"):format(opt.plot)) end
if csv_path and opt.csv == "" then os.remove(csv_path) end

local acc_test = test(net, test_loader, devices)
print(("test accuracy=%.4f"):format(acc_test))

---------------------------------------------------------------------------
-- Save, reload onto one device, and check the reloaded network agrees

net:save_parameters(opt.save)
local reloaded = make_net()
reloaded:load_parameters(opt.save, {device = devices[1]})
local acc_reloaded = test(reloaded, test_loader, {devices[1]})
print(("saved %s; reloaded on %s: test accuracy=%.4f"):format(opt.save, tostring(devices[1]), acc_reloaded))
if math.abs(acc_reloaded - acc_test) > 1e-6 then
  error(("leaf_train: the reloaded parameters give test accuracy %.4f, the trained ones %.4f")
        :format(acc_reloaded, acc_test), 0)
end
