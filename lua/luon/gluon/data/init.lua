-- luon.gluon.data: MXNet's gluon.data: Dataset (0-based items, :len()),
-- ArrayDataset, SimpleDataset, lazy transform/transform_first, samplers and
-- the DataLoader with the default Stack batchify (vision datasets are in
-- data.vision).
--
-- The DataLoader has two paths. When the dataset is an ImageFolderDataset
-- (or FashionMNIST/MNIST), bare or through transform_first of a built-in
-- transform or Compose, decoding, the transforms and batching run in C
-- worker threads (core/data/pipeline.c); the sampler runs here and hands each
-- epoch's order to C. Anything else (Lua transforms, a batchify_fn, other
-- datasets) builds batches here on the caller's thread. With a seed both
-- paths give the same batches for any num_workers.
--
-- Where a GPU is present, batches are made in pinned (page-locked) host
-- memory, so that copying them to a GPU (as_in_context, split_and_load,
-- copyto) is queued and returns at once (pin_memory = false: plain memory;
-- pin_device_id: which pinned pool). Without a GPU nothing changes.
--
-- Items of several fields are Lua lists {data, label}; a transform gets the
-- fields as arguments (fn(data, label)) and returns the new fields.
-- Batchify (Stack): ndarrays are stacked on a new axis 0; numbers become an
-- array, int64 when all are integers and float64 otherwise (as MXNet, where
-- Python ints stack to int64); booleans become bool; lists are batched
-- field by field into a list.
local core = require("luon.core")
local batchify = require("luon.gluon.data.batchify")
local dataset = require("luon.gluon.data.dataset")
local sampler = require("luon.gluon.data.sampler")
local dataloader = require("luon.gluon.data.dataloader")

-- the public names of the file modules (their "_..." fields link them to
-- each other and to the specs)
local data = {batchify = batchify}
for _, m in ipairs({dataset, sampler, dataloader}) do
  for k, v in pairs(m) do
    if k:byte(1) ~= 95 then data[k] = v end
  end
end
local Dataset, Sampler = data.Dataset, data.Sampler


-- MXNet's modules of gluon.data, as aliases of the above.
data.dataset = core.strict_module({Dataset = Dataset, SimpleDataset = data.SimpleDataset,
                                   ArrayDataset = data.ArrayDataset}, "gluon.data.dataset")
data.sampler = core.strict_module({Sampler = Sampler, SequentialSampler = data.SequentialSampler,
                                   RandomSampler = data.RandomSampler, BatchSampler = data.BatchSampler},
                                  "gluon.data.sampler")
data.dataloader = core.strict_module({DataLoader = data.DataLoader, default_batchify_fn = batchify.stack},
                                     "gluon.data.dataloader")

-- gluon.data.vision and SplitSampler (each process's shard for distributed
-- training, luon.dist) load on first use.
return core.strict_module(data, "gluon.data", {
  vision = function() return require("luon.gluon.data.vision") end,
  SplitSampler = function() return require("luon.gluon.data.sampler_dist").SplitSampler end,
})

