-- luon.gluon.data: MXNet's gluon.data: Dataset (0-based items, :len()),
-- ArrayDataset, SimpleDataset, lazy transform/transform_first, samplers and
-- the DataLoader with the default Stack batchify (vision datasets are in
-- data.vision).
--
-- The DataLoader has two paths. When the dataset is an ImageFolderDataset
-- (or FashionMNIST/MNIST), bare or through transform_first of a built-in
-- transform or Compose, decoding, the transforms and batching run in C
-- worker threads (core/pipeline.c); the sampler runs here and hands each
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
local np = require("luon.np")
local object = require("luon.gluon.data.object")
local ffi, C = core.ffi, core.C
local is_array = core.is_array
local new, class = object.new, object.class

local data = {}

local function argerror(fmt, ...) core.error(fmt:format(...)) end

-- Fields of an item as arguments: a plain Lua list is a tuple of fields.
local function is_tuple(item)
  return type(item) == "table" and getmetatable(item) == nil
end

-- The results of a transform as an item: several values make a list.
local function pack(...)
  if select("#", ...) == 1 then return (...) end
  return {...}
end

-- Index i of a dataset of n items as 0..n-1: -n..-1 count from the end,
-- as MXNet's (NumPy's) indexing; anything else is an error.
local function check_index(i, n)
  if type(i) ~= "number" or i % 1 ~= 0 or i < -n or i >= n then
    argerror("dataset index %s is out of range for a dataset of length %d (indices are 0-based: " ..
             "0..%d, or -%d..-1 from the end)", core.show_value(i), n, n - 1, n)
  end
  if i < 0 then return i + n end
  return i
end
data._check_index = check_index -- for the vision datasets

-- Whether x can be a dataset, sampler or batch sampler: an object of this
-- module or a table with the methods.
local function indexable(x)
  return type(x) == "table" or object.class_of(x) ~= nil
end

---------------------------------------------------------------------------
-- Dataset

local Dataset = class(nil, "Dataset")
data.Dataset = Dataset

-- A dataset class defines len() and get(i); the base class only says so.
function Dataset:len() argerror("Dataset: this dataset class defines no len()") end
function Dataset:get() argerror("Dataset: this dataset class defines no get(i)") end

-- A dataset class of one's own: local My = data.Dataset:extend("My");
-- define My:len() and My:get(i) (0-based); make one with My:new{fields...}
-- (keep the items in a field: self[i] is self:get(i)). #ds is ds:len(),
-- ds[i] is ds:get(i), `for data, label in ds do` goes over the items.
function Dataset.extend(base, name)
  if name ~= nil and type(name) ~= "string" then
    argerror("extend: the class name must be a string, got %s", core.show_value(name))
  end
  return class(base, name)
end
function Dataset.new(cls, obj)
  if obj ~= nil and (type(obj) ~= "table" or getmetatable(obj) ~= nil) then
    argerror("new: expected a table of fields, got %s", core.show_value(obj))
  end
  return new(cls, obj or {})
end

-- Item fields one by one (an item that is a list gives its fields).
local function fields(item)
  if is_tuple(item) and #item > 0 then return unpack(item) end
  return item
end

-- for data, label in ds:iter() do ... end: the items in order, each list
-- item as its fields (as MXNet's `for data, label in dataset`).
function Dataset:iter()
  local i, n = -1, self:len()
  return function()
    i = i + 1
    if i < n then return fields(self:get(i)) end
  end
end

-- A dataset of fn(item) (fn(field1, field2, ...) for list items). lazy
-- (default true): applied at each access; false: applied once to all
-- items now (random transforms are then frozen).
function Dataset:transform(fn, lazy)
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn)) then
    argerror("transform: expected a function, got %s", type(fn))
  end
  local t = new(data._LazyTransformDataset, {_base = self, _fn = fn})
  if lazy == false then
    local items = {}
    for i = 0, t:len() - 1 do items[i + 1] = t:get(i) end
    return data.SimpleDataset(items)
  end
  return t
end

-- transform applied to the first field only (the data, not the label).
function Dataset:transform_first(fn, lazy)
  if type(fn) ~= "function" and not (type(fn) == "table" and getmetatable(fn)) then
    argerror("transform_first: expected a function, got %s", type(fn))
  end
  local t = self:transform(function(x, ...)
    if select("#", ...) == 0 then return fn(x) end
    return fn(x), ...
  end, lazy)
  if lazy ~= false then t._first = fn end -- for the C loader
  return t
end

-- The items for which fn(item) is true.
function Dataset:filter(fn)
  if type(fn) ~= "function" then argerror("filter: expected a function, got %s", core.show_value(fn)) end
  local keep = {}
  for i = 0, self:len() - 1 do
    if fn(self:get(i)) then keep[#keep + 1] = i end
  end
  return data._IndexedDataset(self, keep)
end

-- The first `count` items (all when nil or larger than the dataset).
function Dataset:take(count)
  if count ~= nil then core.int_arg(count, "take", "count", 2, 0) end
  local n = self:len()
  if count == nil or count > n then count = n end
  local idx = {}
  for i = 1, count do idx[i] = i - 1 end
  return data._IndexedDataset(self, idx)
end

-- Shard i of n contiguous shards; the first len % n shards are one longer.
function Dataset:shard(num_shards, index)
  if index < 0 or index >= num_shards then
    argerror("shard: index %d is out of range for %d shards", index, num_shards)
  end
  local n = self:len()
  local size, extra = math.floor(n / num_shards), n % num_shards
  local start = index * size + math.min(index, extra)
  local stop = start + size + (index < extra and 1 or 0)
  local idx = {}
  for i = start, stop - 1 do idx[#idx + 1] = i end
  return data._IndexedDataset(self, idx)
end

-- Lazily transformed dataset.
local LazyTransformDataset = class(Dataset, "_LazyTransformDataset")
data._LazyTransformDataset = LazyTransformDataset
function LazyTransformDataset:len() return self._base:len() end
function LazyTransformDataset:get(i)
  local item = self._base:get(i)
  if is_tuple(item) then return pack(self._fn(unpack(item))) end
  return self._fn(item)
end

-- A dataset of chosen items of another (filter, take, shard).
local IndexedDataset = class(Dataset, "_IndexedDataset")
function data._IndexedDataset(base, idx)
  return new(IndexedDataset, {_base = base, _idx = idx})
end
function IndexedDataset:len() return #self._idx end
function IndexedDataset:get(i)
  local idx = self._idx
  return self._base:get(idx[check_index(i, #idx) + 1])
end

---------------------------------------------------------------------------
-- SimpleDataset and ArrayDataset

local SimpleDataset = class(Dataset, "SimpleDataset")

-- A dataset over a Lua list (item i is list[i + 1]).
function data.SimpleDataset(list)
  if type(list) ~= "table" or getmetatable(list) ~= nil then
    argerror("SimpleDataset: expected a Lua list, got %s", type(list))
  end
  return new(SimpleDataset, {_data = list})
end
function SimpleDataset:len() return #self._data end
function SimpleDataset:get(i)
  local list = self._data
  return list[check_index(i, #list) + 1]
end

local ArrayDataset = class(Dataset, "ArrayDataset")

local function length_of(x)
  if is_array(x) then
    if x.ndim == 0 then return nil end
    return x.shape[1]
  end
  if type(x) == "table" then return #x end
  return nil
end

-- ArrayDataset(a, b, ...): item i is {a[i], b[i], ...} (the row of each
-- array as a view, the element of each Lua list); with one argument the
-- item is a[i] itself, as in MXNet.
function data.ArrayDataset(...)
  local n = select("#", ...)
  if n == 0 then argerror("ArrayDataset: needs at least one array or list") end
  local fields = {...}
  local len
  for k = 1, n do
    local l = length_of(fields[k])
    if not l then
      argerror("ArrayDataset: argument %d must be an ndarray with at least one axis or a Lua list, got %s",
               k, is_array(fields[k]) and "a 0-d array" or type(fields[k]))
    end
    if k == 1 then
      len = l
    elseif l ~= len then
      argerror("ArrayDataset: all arrays must have the same length; argument 1 has length %d " ..
               "while argument %d has %d", len, k, l)
    end
  end
  return new(ArrayDataset, {_data = fields, _n = n, _len = len})
end
function ArrayDataset:len() return self._len end
function ArrayDataset:get(i)
  i = check_index(i, self._len)
  local f = self._data
  if self._n == 1 then
    local x = f[1]
    if is_array(x) then return x:at(i) end
    return x[i + 1]
  end
  local item = {}
  for k = 1, self._n do
    local x = f[k]
    if is_array(x) then item[k] = x:at(i) else item[k] = x[i + 1] end
  end
  return item
end

---------------------------------------------------------------------------
-- Batchify

local batchify = {}
data.batchify = batchify

-- A new array (batch, shape...) holding the stacked samples (ndarrays of
-- one shape): one view and one copy per sample, no op dispatch.
local view_out = ffi.new("luon_tensor*[1]")
local function stack_arrays(samples)
  local first = samples[1]
  local info = core.info_of(first)
  local ndim, dtype, dt, di = info.ndim, info.dtype, info.dev_type, info.dev_id
  if ndim + 1 > 8 then argerror("batchify: samples of %d dimensions cannot be stacked (at most 7)", ndim) end
  local shape = ffi.new("int64_t[8]")
  local row = 1
  shape[0] = #samples
  for d = 0, ndim - 1 do
    shape[d + 1] = info.shape[d]
    row = row * tonumber(info.shape[d])
  end
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_empty(dtype, ndim + 1, shape, dt, di, out))
  local batch = core.wrap(out[0])
  local strides = ffi.new("int64_t[8]")
  local s = 1
  for d = ndim - 1, 0, -1 do
    strides[d] = s
    s = s * math.max(tonumber(shape[d + 1]), 1)
  end
  for k = 1, #samples do
    local x = samples[k]
    if not is_array(x) then
      argerror("batchify: sample %d is a %s but sample 1 is an ndarray", k, type(x))
    end
    local xi = core.info_of(x)
    local same = xi.ndim == ndim
    for d = 0, ndim - 1 do same = same and xi.shape[d] == shape[d + 1] end
    if not same then
      argerror("batchify: sample %d has shape %s but sample 1 has %s (Stack needs one shape; pad first)",
               k, "(" .. table.concat(x.shape, ",") .. ")", "(" .. table.concat(first.shape, ",") .. ")")
    end
    core.check(C.luon_tensor_view(batch.t, ndim, shape + 1, strides, (k - 1) * row, view_out))
    local v = view_out[0]
    local st = C.luon_tensor_copy(v, x.t)
    C.luon_tensor_release(v)
    core.check(st)
  end
  return batch
end

-- Numbers (or booleans) into an int64 / float64 / bool array (integers
-- into dtype when given: the int32 labels of MNIST).
local function stack_numbers(samples, dtype)
  local n = #samples
  local kind = type(samples[1])
  local integral = true
  for k = 1, n do
    local v = samples[k]
    if type(v) ~= kind then
      argerror("batchify: sample %d is a %s but sample 1 is a %s", k, type(v), kind)
    end
    if kind == "number" and v % 1 ~= 0 then integral = false end
  end
  local dt = kind == "boolean" and core.BOOL or (integral and (dtype or core.INT64) or core.FLOAT64)
  local buf = ffi.new(core.ctypes[dt] .. "[?]", n > 0 and n or 1)
  for k = 1, n do
    local v = samples[k]
    if kind == "boolean" then v = v and 1 or 0 end
    buf[k - 1] = v
  end
  local sh = ffi.new("int64_t[1]", n)
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_from_host(buf, dt, 1, sh, 1, 0, out))
  return core.wrap(out[0])
end

-- MXNet's batchify.Stack: see the banner.
function batchify.stack(samples)
  local first = samples[1]
  if is_array(first) then return stack_arrays(samples) end
  local t = type(first)
  if t == "number" or t == "boolean" then return stack_numbers(samples) end
  if is_tuple(first) then
    local nf = #first
    local out = {}
    for f = 1, nf do
      local col = {}
      for k = 1, #samples do
        local s = samples[k]
        if not is_tuple(s) or #s ~= nf then
          argerror("batchify: sample %d does not have the %d fields of sample 1", k, nf)
        end
        col[k] = s[f]
      end
      out[f] = batchify.stack(col)
    end
    return out
  end
  argerror("batchify: cannot stack samples of type %s", t)
end
batchify.Stack = function() return batchify.stack end

---------------------------------------------------------------------------
-- Samplers: :len() and :iter() (an iterator over 0-based indices); #s is
-- s:len() and `for i in s do` one pass, as MXNet's len(s) and `for i in s`.

local Sampler = class(nil, "Sampler")
data.Sampler = Sampler

function Sampler:len() argerror("Sampler: this sampler class defines no len()") end
function Sampler:iter() argerror("Sampler: this sampler class defines no iter()") end
function Sampler:get(i)
  argerror("%s: a sampler has no items by index (got [%s]); iterate it with `for i in sampler do`",
           object.name_of(object.class_of(self)), core.show_value(i))
end

-- A sampler class of one's own: local My = data.Sampler:extend("My");
-- define My:len() and My:iter() (a function returning the next index, nil
-- at the end); make one with My:new{fields...}.
Sampler.extend, Sampler.new = Dataset.extend, Dataset.new

local rng = object.rng

local function list_iter(list)
  local k = 0
  return function()
    k = k + 1
    return list[k]
  end
end

local SequentialSampler = class(Sampler, "SequentialSampler")
function data.SequentialSampler(length, start)
  return new(SequentialSampler, {_len = length, _start = start or 0})
end
function SequentialSampler:len() return self._len end
function SequentialSampler:iter()
  local i, stop = self._start - 1, self._start + self._len - 1
  return function()
    if i < stop then i = i + 1; return i end
  end
end

-- A new permutation every epoch. With `seed` the order depends only on the
-- seed and the epoch; without, the generator is seeded from luon's random
-- stream (np.random.seed makes it reproducible).
local RandomSampler = class(Sampler, "RandomSampler")
function data.RandomSampler(length, seed)
  return new(RandomSampler, {_len = length, _seed = seed})
end
function RandomSampler:len() return self._len end
function RandomSampler:iter()
  if not self._rand then
    local seed = self._seed
    if seed == nil then
      seed = np.random.randint(0, 2 ^ 31, {size = {2}, dtype = "int64"}):totable()
      seed = seed[1] * 2 ^ 31 + seed[2]
    end
    self._rand = rng(seed)
  end
  local n, rand = self._len, self._rand
  local p = {}
  for i = 1, n do p[i] = i - 1 end
  for i = n, 2, -1 do -- Fisher-Yates
    local j = rand(i) + 1
    p[i], p[j] = p[j], p[i]
  end
  return list_iter(p)
end

local last_batch_modes = {keep = true, discard = true, rollover = true}

-- Groups a sampler's indices into lists of batch_size.
local BatchSampler = class(Sampler, "BatchSampler")
function data.BatchSampler(sampler, batch_size, last_batch)
  last_batch = last_batch or "keep"
  if not last_batch_modes[last_batch] then
    argerror("last_batch must be one of 'keep', 'discard', or 'rollover', but got %s", tostring(last_batch))
  end
  if type(batch_size) ~= "number" or batch_size < 1 or batch_size % 1 ~= 0 then
    argerror("batch_size must be a positive integer, got %s", tostring(batch_size))
  end
  if not indexable(sampler) or type(sampler.iter) ~= "function" or type(sampler.len) ~= "function" then
    argerror("BatchSampler: sampler must be a sampler (with :len() and :iter()), got %s", core.show_value(sampler))
  end
  return new(BatchSampler, {_sampler = sampler, _bs = batch_size, _last = last_batch, _prev = {}})
end
function BatchSampler:len()
  local n, bs = self._sampler:len(), self._bs
  if self._last == "keep" then return math.ceil(n / bs) end
  if self._last == "discard" then return math.floor(n / bs) end
  return math.floor((#self._prev + n) / bs)
end
function BatchSampler:iter()
  local bs, it = self._bs, self._sampler:iter()
  local batch = self._prev
  self._prev = {}
  local done = false
  return function()
    if done then return nil end
    for i in it do
      batch[#batch + 1] = i
      if #batch == bs then
        local b = batch
        batch = {}
        return b
      end
    end
    done = true
    if #batch > 0 then
      if self._last == "keep" then return batch end
      if self._last == "rollover" then self._prev = batch end
    end
    return nil
  end
end

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
  if object.class_of(dataset) == LazyTransformDataset then
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
    if info.dev_type ~= 1 or C.luon_tensor_is_pinned(b.t) ~= 0 then return b end
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
data._pin_batch = pin_batch -- for the specs

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
function data.DataLoader(dataset, opts)
  opts = opts or {}
  if not indexable(dataset) or type(dataset.len) ~= "function" then
    argerror("DataLoader: expected a Dataset (with :len() and :get(i)), got %s", core.show_value(dataset))
  end
  if type(opts) ~= "table" then argerror("DataLoader: expected a table of options, got %s", type(opts)) end
  core.check_keys(opts, "DataLoader", 2, loader_keys)
  local n = core.int_arg(dataset:len(), "DataLoader", "the dataset's len()", 2, 0)
  local bsampler = opts.batch_sampler
  if bsampler == nil then
    if opts.batch_size == nil then
      argerror("batch_size must be specified unless batch_sampler is specified")
    end
    local sampler = opts.sampler
    if sampler == nil then
      if opts.shuffle then
        sampler = data.RandomSampler(n, opts.seed)
      else
        sampler = data.SequentialSampler(n)
      end
    elseif opts.shuffle then
      argerror("shuffle must not be specified if sampler is specified")
    end
    bsampler = data.BatchSampler(sampler, opts.batch_size, opts.last_batch or "keep")
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
    return {batchify.stack(samples), stack_numbers(labels, p.src.label_dtype)}
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
  core.check(C.luon_loader_start(h, order, bounds, #batches, epoch), 3)
  local token = {}
  self._token = token
  return function()
    if done then return nil end
    if self._token ~= token then
      core.error("DataLoader: this iteration was abandoned when a newer one of the same loader started", 2)
    end
    local st = C.luon_loader_next(h, data_out, label_out)
    if st ~= 0 then
      done = true
      core.raise(1)
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
local take_id = core.op_ids.take
function ArrayDataset:_gather(indices)
  local idx
  local out = {}
  for k = 1, self._n do
    local x = self._data[k]
    if is_array(x) then
      if not idx then
        idx = np.array(indices, {dtype = "int64", device = x.device})
      elseif idx.device ~= x.device then
        idx = idx:to_device(x.device)
      end
      local a = core.attrs()
      a.i[0], a.i[1], a.ni = 0, 0, 2 -- axis 0, mode clip (indices are in range)
      out[k] = core.call(take_id, {x, idx}, a, 2)
    else
      local col = {}
      for j = 1, #indices do col[j] = x[indices[j] + 1] end
      out[k] = batchify.stack(col)
    end
  end
  if self._n == 1 then return out[1] end
  return out
end

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
