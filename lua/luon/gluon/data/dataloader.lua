-- luon.gluon.data.dataloader: the DataLoader (its two paths, C worker
-- threads or Lua on the caller's thread, and pinned batches: see
-- gluon/data/init.lua).
local core = require("luon.core")
local np = require("luon.np")
local object = require("luon.gluon.data.object")
local ffi, C = core.ffi, core.C
local is_array = core.is_array
local new, class, argerror, is_tuple, check_index, indexable, fields = object.new, object.class, object.argerror, object.is_tuple, object.check_index, object.indexable, object.fields
local batchify = require("luon.gluon.data.batchify")
local samplers = require("luon.gluon.data.sampler")
local dataset_mod = require("luon.gluon.data.dataset")

local Lo = {}

---------------------------------------------------------------------------
-- DataLoader

local DataLoader = class(nil, "DataLoader")

local loader_keys = {batch_size = true, shuffle = true, sampler = true, last_batch = true,
                     batch_sampler = true, batchify_fn = true, num_workers = true, pin_memory = true,
                     pin_device_id = true, prefetch = true, thread_pool = true, timeout = true,
                     try_nopython = true, seed = true, on_error = true}

-- What the C loader needs when the dataset can go there: {src = the base
-- dataset's _c_source(), base =, fn = the transform_first transform or nil,
-- arr, n = its C steps}; nil otherwise.
local function c_plan(dataset)
  local base, fn = dataset, nil
  if object.class_of(dataset) == dataset_mod._LazyTransformDataset then
    if dataset._first == nil then return nil end
    base, fn = dataset._base, dataset._first
  end
  if not indexable(base) or type(base._c_source) ~= "function" then return nil end
  local src = base:_c_source()
  if not src then return nil end
  local arr, n = nil, 0
  if fn ~= nil then
    if type(fn) ~= "table" or type(fn.c_steps) ~= "function" then return nil end
    arr, n = fn:c_steps()
    if not arr then return nil end
  elseif not src.paths then
    return nil -- bare in-memory arrays: the gather path below is one take
  end
  return {src = src, base = base, fn = fn, arr = arr, n = n}
end

local seed_out = ffi.new("uint64_t[1]")
local loader_out = ffi.new("luon_loader*[1]")

-- A batch's host arrays (in nested lists too) as copies in pinned pool
-- pin; arrays already pinned or on a GPU and other values as they are.
local pin_out = ffi.new("luon_tensor*[1]")
local function pin_batch(b, pin)
  if is_array(b) then
    local info = core.info_of(b)
    if info.dev_type ~= C.LUON_CPU or C.luon_tensor_is_pinned(b.t) ~= 0 then return b end
    core.check(C.luon_tensor_empty_pinned(info.dtype, info.ndim, info.shape, pin, pin_out))
    local p = core.wrap(pin_out[0])
    core.check(C.luon_tensor_copy(p.t, b.t))
    return p
  end
  if is_tuple(b) then
    local out = {}
    for k = 1, #b do out[k] = pin_batch(b[k], pin) end
    return out
  end
  return b
end
Lo._pin_batch = pin_batch -- for the specs

-- DataLoader(dataset, {batch_size=, shuffle=, sampler=, last_batch=
-- 'keep'|'discard'|'rollover', batch_sampler=, batchify_fn=, num_workers=,
-- pin_memory=, prefetch=, try_nopython=, seed=, on_error='raise'|'skip'})
-- as MXNet's. num_workers threads decode and transform when the dataset
-- can go to C (see the banner; try_nopython = false keeps it here); 0 makes
-- the batches on the caller's thread. seed fixes the shuffling and the
-- random augmentations (else both follow np.random.seed). on_error = 'skip'
-- leaves images that fail to decode out of their batch and counts them
-- (loader:skipped()); the default stops with an error naming the file.
-- Batches are arrays on cpu(0). pin_memory (default true, MXNet's is false)
-- makes them in pinned memory where a GPU is present, so that their copies
-- to GPUs are asynchronous; false or no GPU: plain memory, the same values.
-- pin_device_id (default 0): the GPU whose pinned pool they come from
-- (npx.pinned_memory_stats(id)). The C loader writes batches
-- there directly; the Lua path copies each finished batch there.
function Lo.DataLoader(dataset, opts)
  opts = opts or {}
  if not indexable(dataset) or type(dataset.len) ~= "function" then
    argerror("DataLoader: expected a Dataset (with :len() and :get(i)), got %s", core.show_value(dataset))
  end
  if type(opts) ~= "table" then argerror("DataLoader: expected a table of options, got %s", type(opts)) end
  core.check_keys(opts, "DataLoader", loader_keys)
  local n = core.int_arg(dataset:len(), "DataLoader", "the dataset's len()", 0)
  local bsampler = opts.batch_sampler
  if bsampler == nil then
    if opts.batch_size == nil then
      argerror("batch_size must be specified unless batch_sampler is specified")
    end
    local sampler = opts.sampler
    if sampler == nil then
      if opts.shuffle then
        sampler = samplers.RandomSampler(n, opts.seed)
      else
        sampler = samplers.SequentialSampler(n)
      end
    elseif opts.shuffle then
      argerror("shuffle must not be specified if sampler is specified")
    end
    bsampler = samplers.BatchSampler(sampler, opts.batch_size, opts.last_batch or "keep")
  elseif opts.batch_size ~= nil or opts.shuffle or opts.sampler ~= nil or opts.last_batch ~= nil then
    argerror("batch_size, shuffle, sampler and last_batch must not be specified if batch_sampler is specified.")
  end
  if bsampler ~= nil and (not indexable(bsampler) or type(bsampler.iter) ~= "function") then
    argerror("DataLoader: batch_sampler must be a batch sampler (with :iter()), got %s", core.show_value(bsampler))
  end
  if opts.batchify_fn ~= nil and type(opts.batchify_fn) ~= "function" then
    argerror("DataLoader: batchify_fn must be a function, got %s", core.show_value(opts.batchify_fn))
  end
  local nw = opts.num_workers or 0
  if type(nw) ~= "number" or nw % 1 ~= 0 or nw < 0 then
    argerror("DataLoader: num_workers must be an integer >= 0, got %s", tostring(nw))
  end
  local prefetch = opts.prefetch or 0
  if type(prefetch) ~= "number" or prefetch % 1 ~= 0 or prefetch < 0 then
    argerror("DataLoader: prefetch must be an integer >= 0, got %s", tostring(prefetch))
  end
  if opts.timeout ~= nil and not (type(opts.timeout) == "number" and opts.timeout > 0) then
    argerror("DataLoader: timeout must be a positive number of seconds, got %s", tostring(opts.timeout))
  end
  local on_error = opts.on_error or "raise"
  if on_error ~= "raise" and on_error ~= "skip" then
    argerror("DataLoader: on_error must be 'raise' or 'skip', got %s", tostring(on_error))
  end
  if opts.pin_memory ~= nil and type(opts.pin_memory) ~= "boolean" then
    argerror("DataLoader: pin_memory must be true or false, got %s", tostring(opts.pin_memory))
  end
  local pin_id = opts.pin_device_id or 0
  if type(pin_id) ~= "number" or pin_id % 1 ~= 0 or pin_id < 0 then
    argerror("DataLoader: pin_device_id must be an integer >= 0, got %s", tostring(pin_id))
  end
  local pin = nil -- the pinned pool of the batches, nil: plain memory
  local ngpu = opts.pin_memory ~= false and C.luon_gpu_count() or 0 -- (false: no backend loaded for it)
  if ngpu > 0 then
    if pin_id >= ngpu then
      argerror("DataLoader: pin_device_id %d does not name a GPU (%d GPU%s)", pin_id, ngpu, ngpu == 1 and "" or "s")
    end
    pin = pin_id
  end
  local seed = opts.seed
  if seed ~= nil and (type(seed) ~= "number" or seed % 1 ~= 0 or seed < 0) then
    argerror("DataLoader: seed must be an integer >= 0, got %s", tostring(seed))
  end
  if seed == nil then
    core.check(C.luon_transform_next_seed(seed_out))
    seed = seed_out[0]
  end
  local self = new(DataLoader, {_dataset = dataset, _batch_sampler = bsampler, _batchify = opts.batchify_fn,
                                _seed = seed, _epoch = 0, _skip = on_error == "skip", _skipped = 0,
                                _num_workers = nw, _pin = pin})
  local plan = not opts.batchify_fn and c_plan(dataset)
  if plan and opts.try_nopython ~= false then
    local src = plan.src
    local n = #src.labels
    local labels = ffi.new("int64_t[?]", math.max(n, 1))
    for i = 1, n do labels[i - 1] = src.labels[i] end
    local paths
    if src.paths then
      paths = ffi.new("const char*[?]", math.max(n, 1))
      for i = 1, n do paths[i - 1] = src.paths[i] end
    end
    core.check(C.luon_loader_new(n, paths, src.images and src.images.t or nil, labels, src.flag or 1,
                                 plan.arr, plan.n, nw, prefetch, self._skip and 1 or 0, seed, loader_out))
    self._c = ffi.gc(loader_out[0], C.luon_loader_free)
    self._c_len = n
    if pin then core.check(C.luon_loader_set_pin_memory(self._c, pin)) end
    if src.label_dtype then core.check(C.luon_loader_set_label_dtype(self._c, src.label_dtype)) end
    self._images = src.images -- kept alive with the loader (C holds a reference too)
  elseif plan then
    self._plan = plan -- the Lua path, sample by sample as the C loader makes them
  elseif opts.try_nopython == true and nw > 0
         and not (not opts.batchify_fn and type(dataset._c_source) == "function" and dataset:_c_source()) then
    -- (a bare in-memory dataset such as FashionMNIST needs no C loader:
    -- its batches are one take, made without Lua per sample)
    argerror("MXNet backend loader compatibility: [dataset - fail][batchify_fn - %s][batch sampler - pass] " ..
             "(the C loader takes an ImageFolderDataset or FashionMNIST, bare or with transform_first of " ..
             "built-in transforms, and the default batchify)", opts.batchify_fn and "fail" or "pass")
  end
  return self
end

-- Number of batches in an epoch.
function DataLoader:len() return self._batch_sampler:len() end

-- Images left out so far because they failed to load (on_error = 'skip').
function DataLoader:skipped()
  if self._c then return tonumber(C.luon_loader_skipped(self._c, nil, 0)) end
  return self._skipped
end

local function warn_skips(self, before, first)
  local now = self:skipped()
  if now > before then
    core.warn(("DataLoader: skipped %d image%s that failed to load this epoch (first: %s)")
              :format(now - before, now - before == 1 and "" or "s", first or "?"))
  end
end

-- A batch sampler's list of indices into a dataset of n items, each as
-- get(i) takes it: -n..-1 count from the end (a new list then), others out
-- of 0..n-1 are the error get(i) gives.
local function batch_indices(indices, n)
  local out = indices
  for k = 1, #indices do
    local i = indices[k]
    if type(i) ~= "number" or i < 0 or i >= n or i % 1 ~= 0 then
      i = check_index(i, n)
      if out == indices then
        out = {}
        for j = 1, #indices do out[j] = indices[j] end
      end
      out[k] = i
    end
  end
  return out
end

-- One batch from a list of 0-based indices. Datasets that can gather a
-- batch themselves (an ArrayDataset of arrays, the vision datasets) do it
-- with one take per field when the default batchify is in use.
function DataLoader:_batch(indices, eseed)
  local ds = self._dataset
  local p = self._plan
  if p or (not self._batchify and ds._gather) then indices = batch_indices(indices, ds:len()) end
  if p then
    local samples, labels = {}, {}
    for k = 1, #indices do
      local i = indices[k]
      local ok, x = true, nil
      if p.src.paths then
        if self._skip then ok, x = pcall(p.base._load, p.base, i, p.arr, p.n, eseed)
        else x = p.base:_load(i, p.arr, p.n, eseed) end
      else
        x = p.fn:_apply(p.base:get(i)[1], eseed, i)
      end
      if ok then
        samples[#samples + 1] = x
        labels[#samples] = p.src.labels[i + 1]
      else
        self._skipped = self._skipped + 1
        self._first_skip = self._first_skip or tostring(x)
      end
    end
    if #samples == 0 then return false end
    return {batchify.stack(samples), batchify.stack_numbers(labels, p.src.label_dtype)}
  end
  if not self._batchify and ds._gather then
    local b = ds:_gather(indices)
    if b ~= nil then return b end
  end
  local samples = {}
  for k = 1, #indices do
    local i = indices[k]
    if self._skip then
      local ok, item = pcall(ds.get, ds, i)
      if ok then
        samples[#samples + 1] = item
      else
        self._skipped = self._skipped + 1
        self._first_skip = self._first_skip or tostring(item)
      end
    else
      local item = ds:get(i)
      if item == nil then -- it would leave a hole that shifts the batch's rows
        argerror("DataLoader: the dataset's get(%d) returned nil; every index below len() must give an item", i)
      end
      samples[#samples + 1] = item
    end
  end
  if #samples == 0 then return false end
  return (self._batchify or batchify.stack)(samples)
end

local data_out, label_out = ffi.new("luon_tensor*[1]"), ffi.new("luon_tensor*[1]")
local msg_buf = ffi.new("char[1024]")

-- The C loader's epoch: the batch sampler's whole epoch goes to C at once.
function DataLoader:_c_batches()
  local batches, total, n = {}, 0, self._c_len
  for b in self._batch_sampler:iter() do
    batches[#batches + 1] = batch_indices(b, n)
    total = total + #b
  end
  local order = ffi.new("int64_t[?]", math.max(total, 1))
  local bounds = ffi.new("int64_t[?]", #batches + 1)
  local pos = 0
  for k, b in ipairs(batches) do
    for j = 1, #b do order[pos + j - 1] = b[j] end
    pos = pos + #b
    bounds[k] = pos
  end
  local epoch = self._epoch
  self._epoch = epoch + 1
  local h = self._c
  local before, done = self:skipped(), false -- before the workers start
  core.check(C.luon_loader_start(h, order, bounds, #batches, epoch))
  local token = {}
  self._token = token
  return function()
    if done then return nil end
    if self._token ~= token then
      core.error("DataLoader: this iteration was abandoned when a newer one of the same loader started")
    end
    local st = C.luon_loader_next(h, data_out, label_out)
    if st ~= 0 then
      done = true
      core.raise()
    end
    if data_out[0] == nil then
      done = true
      if self:skipped() > before then
        C.luon_loader_skipped(h, msg_buf, 1024)
        warn_skips(self, before, ffi.string(msg_buf))
      end
      return nil
    end
    local x, y = core.wrap(data_out[0]), core.wrap(label_out[0])
    core.gc_pressure()
    return {x, y}
  end
end

-- An epoch's iterator over the batches as the batchify function made them
-- (the default: a list {data, label, ...}, or one array for a dataset of
-- one field).
function DataLoader:_batches()
  if self._c then return self:_c_batches() end
  local it = self._batch_sampler:iter()
  local eseed = C.luon_loader_epoch_seed(self._seed, self._epoch)
  self._epoch = self._epoch + 1
  local before = self._skipped
  self._first_skip = nil
  return function()
    while true do
      local idx = it()
      if idx == nil then
        if self._skipped > before then warn_skips(self, before, self._first_skip) end
        return nil
      end
      local b = self:_batch(idx, eseed)
      if b then -- (false: every sample of the batch was skipped)
        if self._pin then b = pin_batch(b, self._pin) end
        return b
      end
    end
  end
end

-- for data, label in loader:iter() do ... end: an epoch, each batch as its
-- fields (a list batch unpacked), as MXNet's `for data, label in loader`;
-- `for data, label in loader do` is the same (each loop a new epoch).
function DataLoader:iter()
  local it = self:_batches()
  return function() return fields(it()) end
end

-- for i, batch in loader:enumerate() do ... end (i from 1): an epoch, each
-- batch whole (batch[1] the data, batch[2] the label), as MXNet's
-- `for i, batch in enumerate(loader)`.
function DataLoader:enumerate()
  local it = self:_batches()
  local i = 0
  return function()
    local b = it()
    if b == nil then return nil end
    i = i + 1
    return i, b
  end
end

function DataLoader:get(i)
  argerror("DataLoader: a loader has no batches by index (got [%s]); iterate it: " ..
           "for data, label in loader do ... end", core.show_value(i))
end

function DataLoader:__tostring()
  return ("DataLoader(%d batches of %s)"):format(self:len(), object.name_of(object.class_of(self._dataset)))
end

-- The fast batch path of ArrayDataset: one take per array field, Lua list
-- fields through batchify.

return Lo
