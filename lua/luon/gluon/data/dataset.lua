-- luon.gluon.data.dataset: Dataset (0-based items, :len(), :get(i)), lazy
-- transform/transform_first, filter/take/shard, SimpleDataset and
-- ArrayDataset (which gathers a whole batch with one take per field).
local core = require("luon.core")
local np = require("luon.np")
local object = require("luon.gluon.data.object")
local C = core.C
local is_array = core.is_array
local new, class, argerror, is_tuple, pack, check_index, fields = object.new, object.class, object.argerror, object.is_tuple, object.pack, object.check_index, object.fields
local batchify = require("luon.gluon.data.batchify")

local D = {}

---------------------------------------------------------------------------
-- Dataset

local Dataset = class(nil, "Dataset")
D.Dataset = Dataset

-- A dataset class defines len() and get(i); the base class only says so.
function Dataset:len() argerror("Dataset: this dataset class defines no len()") end
function Dataset:get() argerror("Dataset: this dataset class defines no get(i)") end

-- A dataset class of one's own: local My = D.Dataset:extend("My");
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
  local t = new(D._LazyTransformDataset, {_base = self, _fn = fn})
  if lazy == false then
    local items = {}
    for i = 0, t:len() - 1 do items[i + 1] = t:get(i) end
    return D.SimpleDataset(items)
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

-- A dataset of chosen items of another (filter, take, shard).
local Indexed = class(Dataset, "_IndexedDataset")
local function IndexedDataset(base, idx)
  return new(Indexed, {_base = base, _idx = idx})
end
function Indexed:len() return #self._idx end
function Indexed:get(i)
  local idx = self._idx
  return self._base:get(idx[check_index(i, #idx) + 1])
end

-- The items for which fn(item) is true.
function Dataset:filter(fn)
  if type(fn) ~= "function" then argerror("filter: expected a function, got %s", core.show_value(fn)) end
  local keep = {}
  for i = 0, self:len() - 1 do
    if fn(self:get(i)) then keep[#keep + 1] = i end
  end
  return IndexedDataset(self, keep)
end

-- The first `count` items (all when nil or larger than the dataset).
function Dataset:take(count)
  if count ~= nil then core.int_arg(count, "take", "count", 0) end
  local n = self:len()
  if count == nil or count > n then count = n end
  local idx = {}
  for i = 1, count do idx[i] = i - 1 end
  return IndexedDataset(self, idx)
end

-- The items at the indices a sampler gives, in its order (MXNet 1.9's
-- Dataset.sample): ds:sample(RandomSampler(#ds, seed)):take(n) is a random
-- subset of n items.
function Dataset:sample(sampler)
  local t = type(sampler)
  local ok, iter = pcall(function() return (t == "table" or t == "userdata") and sampler.iter end)
  if not ok or type(iter) ~= "function" then
    argerror("sample: expected a sampler (e.g. gluon.data.RandomSampler(n)), got %s", core.show_value(sampler))
  end
  local n, idx = self:len(), {}
  for i in sampler:iter() do
    if type(i) ~= "number" or i % 1 ~= 0 or i < 0 or i >= n then
      argerror("sample: the sampler gave %s, not an index of this dataset of %d items", core.show_value(i), n)
    end
    idx[#idx + 1] = i
  end
  return IndexedDataset(self, idx)
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
  return IndexedDataset(self, idx)
end

-- Lazily transformed dataset.
local LazyTransformDataset = class(Dataset, "_LazyTransformDataset")
D._LazyTransformDataset = LazyTransformDataset
function LazyTransformDataset:len() return self._base:len() end
function LazyTransformDataset:get(i)
  local item = self._base:get(i)
  if is_tuple(item) then return pack(self._fn(unpack(item))) end
  return self._fn(item)
end

---------------------------------------------------------------------------
-- SimpleDataset and ArrayDataset

local SimpleDataset = class(Dataset, "SimpleDataset")

-- A dataset over a Lua list (item i is list[i + 1]).
function D.SimpleDataset(list)
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
function D.ArrayDataset(...)
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
      a.i[core.slot.TAKE_AXIS], a.i[core.slot.TAKE_MODE] = 0, 0 -- axis 0, mode clip (indices are in range)
      a.ni = core.slot.TAKE_MODE + 1
      out[k] = core.call(take_id, {x, idx}, a)
    else
      local col = {}
      for j = 1, #indices do col[j] = x[indices[j] + 1] end
      out[k] = batchify.stack(col)
    end
  end
  if self._n == 1 then return out[1] end
  return out
end

return D
