-- luon.gluon.data.sampler_dist: gluon.data.SplitSampler, each process's own
-- shard of a dataset for distributed training (luon.dist), as MXNet's
-- SplitSampler: part k of n is the contiguous run of length // n indices
-- starting at k * (length // n). Every part has the same length (the last
-- length % n samples are left out), so every process runs the same number of
-- batches and the collectives stay matched.
--
--   SplitSampler(length, num_parts, part_index, {shuffle = true, seed = nil})
--
-- shuffle (default true, as MXNet): a new order of the part every epoch;
-- false: the part in order. seed: the order depends only on the seed and
-- the epoch; without one, the generator is seeded from luon's random stream
-- (np.random.seed makes it reproducible). A sampler, like the others of
-- gluon.data: :len() and :iter() over 0-based indices (#s, `for i in s`);
-- pass it to DataLoader{sampler = ...}. luon.dist.sampler(dataset) makes
-- the one of this process.
local core = require("luon.core")
local data = require("luon.gluon.data")
local object = require("luon.gluon.data.object")

local M = {}

local rng = object.rng

local function int_arg(v, what, min) return core.int_arg(v, "SplitSampler", what, min) end

local SplitSampler = object.class(data.Sampler, "SplitSampler")

function M.SplitSampler(length, num_parts, part_index, opts)
  opts = opts or {}
  length = int_arg(length, "length", 0)
  num_parts = int_arg(num_parts or 1, "num_parts", 1)
  part_index = int_arg(part_index or 0, "part_index", 0)
  if part_index >= num_parts then
    core.error(("SplitSampler: part_index %d is not below num_parts %d"):format(part_index, num_parts))
  end
  local part_len = math.floor(length / num_parts)
  return object.new(SplitSampler, {_start = part_len * part_index, _len = part_len,
                                   _shuffle = opts.shuffle ~= false, _seed = opts.seed,
                                   num_parts = num_parts, part_index = part_index})
end

function SplitSampler:len() return self._len end

function SplitSampler:__tostring()
  return ("SplitSampler(part %d of %d: indices %d to %d%s)"):format(
    self.part_index, self.num_parts, self._start, self._start + self._len - 1,
    self._shuffle and ", shuffled" or "")
end

function SplitSampler:iter()
  local p = {}
  for i = 1, self._len do p[i] = self._start + i - 1 end
  if self._shuffle then
    if not self._rand then
      local seed = self._seed or object.fresh_seed()
      -- distinct streams per part, so equal seeds do not give equal orders
      self._rand = rng((seed % 2 ^ 40) * 1009 + self.part_index)
    end
    object.shuffle(p, self._rand)
  end
  local k = 0
  return function()
    k = k + 1
    return p[k]
  end
end

return M
