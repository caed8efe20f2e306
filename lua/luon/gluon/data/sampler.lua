-- luon.gluon.data.sampler: Sampler, SequentialSampler, RandomSampler and
-- BatchSampler (SplitSampler, for processes, is in sampler_dist.lua).
local core = require("luon.core")
local object = require("luon.gluon.data.object")
local new, class, argerror, indexable, fields = object.new, object.class, object.argerror, object.indexable, object.fields
local Dataset = require("luon.gluon.data.dataset").Dataset

local S = {}

---------------------------------------------------------------------------
-- Samplers: :len() and :iter() (an iterator over 0-based indices); #s is
-- s:len() and `for i in s do` one pass, as MXNet's len(s) and `for i in s`.

local Sampler = class(nil, "Sampler")
S.Sampler = Sampler

function Sampler:len() argerror("Sampler: this sampler class defines no len()") end
function Sampler:iter() argerror("Sampler: this sampler class defines no iter()") end
function Sampler:get(i)
  argerror("%s: a sampler has no items by index (got [%s]); iterate it with `for i in sampler do`",
           object.name_of(object.class_of(self)), core.show_value(i))
end

-- A sampler class of one's own: local My = S.Sampler:extend("My");
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
function S.SequentialSampler(length, start)
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
function S.RandomSampler(length, seed)
  return new(RandomSampler, {_len = length, _seed = seed})
end
function RandomSampler:len() return self._len end
function RandomSampler:iter()
  if not self._rand then
    self._rand = rng(self._seed or object.fresh_seed())
  end
  local p = {}
  for i = 1, self._len do p[i] = i - 1 end
  object.shuffle(p, self._rand)
  return list_iter(p)
end

local last_batch_modes = {keep = true, discard = true, rollover = true}

-- Groups a sampler's indices into lists of batch_size.
local BatchSampler = class(Sampler, "BatchSampler")
function S.BatchSampler(sampler, batch_size, last_batch)
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

return S
