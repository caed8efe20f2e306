-- estimator.lua: the tutorial's LeafNetwork (examples/leafnet.lua) trained
-- by gluon.contrib.estimator's fit loop instead of a hand-written one, on
-- the default dataset (data/fashion-leaf, made by scripts/make_dataset):
-- checkpoints in --out (the newest three and the best by validation
-- accuracy), early stopping when the validation accuracy stops improving,
-- a CSV log and its chart (curves.png), then the best checkpoint reloaded
-- and evaluated.
--
--   build/luon examples/estimator.lua [--root data/fashion-leaf] [--out estimator-out]
--     [--epochs 10] [--batch-size 32] [--lr 0.01] [--patience 2] [--limit N]
--     [--log-interval 0]
local luon = require("luon")
local cli = require("luon.cli")
local np, npx, gluon = luon.np, luon.npx, luon.gluon
local estimator = gluon.contrib.estimator

local usage_text =
    "usage: luon examples/estimator.lua [--root data/fashion-leaf] [--out estimator-out] [--epochs 10]\n" ..
    "       [--batch-size 32] [--lr 0.01] [--patience 2] [--limit 0] [--log-interval 0]"

local opt, usage = cli.options(arg, {root = "data/fashion-leaf", out = "estimator-out", epochs = 10,
                                     batch_size = 32, lr = 0.01, patience = 2, limit = 0, log_interval = 0},
                               usage_text, {positive = {"epochs", "batch_size"}})
np.random.seed(42)

-- The data: the tutorial's transforms and ImageFolder trees.
local transforms = gluon.data.vision.transforms
local mean, std = {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}
local train_tf = transforms.Compose{
  transforms.Resize{size = 224, keep_ratio = true}, transforms.CenterCrop(128),
  transforms.RandomFlipLeftRight(), transforms.RandomColorJitter{contrast = 0.05},
  transforms.ToTensor(), transforms.Normalize(mean, std),
}
local val_tf = transforms.Compose{
  transforms.Resize{size = 224, keep_ratio = true}, transforms.CenterCrop(128),
  transforms.ToTensor(), transforms.Normalize(mean, std),
}
local function loader(split, tf, shuffle)
  local path = opt.root .. "/" .. split
  local ok, ds = pcall(gluon.data.vision.ImageFolderDataset, path)
  if not ok then
    usage(("cannot read the %s images under %s (%s); make the default dataset with " ..
           "`scripts/make_dataset` or pass --root"):format(split, path, tostring(ds)))
  end
  -- a random subset, not the first items: an ImageFolder lists its classes in turn
  if opt.limit > 0 and ds:len() > opt.limit then
    ds = ds:sample(gluon.data.RandomSampler(ds:len(), 42)):take(opt.limit)
  end
  return gluon.data.DataLoader(ds:transform_first(tf), {batch_size = opt.batch_size, shuffle = shuffle,
                                                        last_batch = shuffle and "discard" or "keep", seed = 42})
end
local train_data = loader("train", train_tf, true)
local val_data = loader("validation", val_tf, false)

-- Two GPUs when there are two, one when there is one, else cpu(0) and cpu(1).
local devices = {npx.cpu(0), npx.cpu(1)}
if npx.num_gpus() == 1 then devices = {npx.gpu(0)} end
if npx.num_gpus() >= 2 then devices = {npx.gpu(0), npx.gpu(1)} end

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local LeafNetwork = dofile(here .. "leafnet.lua")
local net = LeafNetwork()
net:initialize({init = luon.init.Xavier(), device = devices})
local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = opt.lr, momentum = 0.9})

-- The Estimator: accuracy and the loss are its default metrics for a
-- softmax cross-entropy, as "training accuracy", "validation accuracy", ...
local est = estimator.Estimator{net = net, loss = gluon.loss.SoftmaxCrossEntropyLoss(), trainer = trainer,
                                devices = devices}
local val_acc = est.val_metrics[1]
local handlers = {
  estimator.CheckpointHandler(opt.out, {model_prefix = "leafnet", monitor = val_acc, mode = "max",
                                        save_best = true, max_checkpoints = 3}),
  estimator.EarlyStoppingHandler(val_acc, {patience = opt.patience, mode = "max"}),
  estimator.CSVLogHandler(opt.out .. "/log.csv", {plot = opt.out .. "/curves.png"}),
  estimator.LoggingHandler{log_interval = opt.log_interval > 0 and opt.log_interval or "epoch",
                           metrics = est.train_metrics},
}
est:fit(train_data, {val_data = val_data, epochs = opt.epochs, event_handlers = handlers})

-- The best checkpoint, reloaded into a fresh network on one device.
local best = LeafNetwork()
best:load_parameters(opt.out .. "/leafnet-best.params", {device = devices[1]})
local check = estimator.Estimator{net = best, loss = gluon.loss.SoftmaxCrossEntropyLoss(), devices = {devices[1]},
                                  trainer = gluon.Trainer(best:collect_params(), "sgd", {learning_rate = 0})}
check.logger = {info = function() end, warning = function() end}
check:evaluate(val_data)
local _, acc = check.val_metrics[1]:get()
print(("best checkpoint %s/leafnet-best.params: validation accuracy=%.4f"):format(opt.out, acc))
print(("log %s/log.csv, curves %s/curves.png"):format(opt.out, opt.out))
