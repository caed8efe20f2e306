-- data_spec: luon.gluon.data: datasets (0-based items, negative from the
-- end), transform and transform_first, filter/take/shard, samplers and the
-- DataLoader (batch counts for keep/discard/rollover, seeded shuffling,
-- Stack batchify, the gather fast path against the generic one), #, [i] and
-- `for` on datasets, samplers and loaders, MXNet's module aliases, and the
-- FashionMNIST/MNIST readers (int32 labels, as MXNet's).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local data = require("luon.gluon.data")

local function collect(loader)
  local out = {}
  for i, b in loader:enumerate() do
    assert.are.equal(#out + 1, i)
    out[i] = b
  end
  return out
end

-- The labels of every batch, flattened into one Lua list.
local function labels_of(batches)
  local all = {}
  for _, b in ipairs(batches) do
    for _, v in ipairs(b[2]:totable()) do all[#all + 1] = v end
  end
  return all
end

describe("datasets", function()
  it("SimpleDataset indexes a Lua list from 0, with :len()", function()
    local ds = data.SimpleDataset({"a", "b", "c"})
    assert.are.equal(3, ds:len())
    assert.are.equal("a", ds[0])
    assert.are.equal("c", ds:get(2))
    H.assert_error(function() return ds[3] end, {"index 3 is out of range", "length 3", "0-based"})
    -- negative indices count from the end, as MXNet's (Python's list)
    assert.are.equal("c", ds:get(-1))
    assert.are.equal("a", ds[-3])
    H.assert_error(function() return ds:get(-4) end, {"index -4 is out of range", "-3..-1"})
    H.assert_error(function() return ds:get(1.5) end, {"index 1.5 is out of range"})
    H.assert_error(function() data.SimpleDataset(np.ones({2})) end, "expected a Lua list")
  end)

  for _, dev in ipairs(H.devices()) do
    it("ArrayDataset gives rows of arrays and elements of lists on " .. tostring(dev), function()
      local x = np.arange(12, {device = dev}):reshape({4, 3})
      local ds = data.ArrayDataset(x, {10, 11, 12, 13})
      assert.are.equal(4, ds:len())
      local item = ds[2]
      H.check(item[1], {6, 7, 8}, {shape = {3}, device = dev})
      assert.are.equal(12, item[2])
      -- one argument: the item is the row itself
      local single = data.ArrayDataset(x)
      H.check(single[1], {3, 4, 5})
      assert.are.equal("b", data.ArrayDataset({"a", "b"})[1])
    end)
  end

  it("ArrayDataset checks lengths and argument types", function()
    H.assert_error(function() data.ArrayDataset(np.ones({3, 2}), {1, 2}) end,
                   {"same length", "argument 1 has length 3", "argument 2 has 2"})
    H.assert_error(function() data.ArrayDataset(np.array(1)) end, "0-d array")
    H.assert_error(function() data.ArrayDataset(5) end, "got number")
    H.assert_error(function() data.ArrayDataset() end, "at least one")
  end)

  it("transform passes the fields and packs several results into an item", function()
    local ds = data.ArrayDataset({1, 2, 3}, {10, 20, 30})
    local t = ds:transform(function(x, y) return x * 2, y + 1 end)
    assert.are.equal(3, t:len())
    assert.are.same({4, 21}, t[1])
    local single = data.SimpleDataset({1, 2}):transform(function(x) return -x end)
    assert.are.equal(-2, single[1])
  end)

  it("transform is lazy by default and eager with lazy = false", function()
    local calls = 0
    local ds = data.SimpleDataset({1, 2, 3})
    local lazy = ds:transform(function(x) calls = calls + 1; return x + 100 end)
    assert.are.equal(0, calls)
    assert.are.equal(102, lazy[1])
    assert.are.equal(102, lazy[1])
    assert.are.equal(2, calls)
    calls = 0
    local eager = ds:transform(function(x) calls = calls + 1; return x + 100 end, false)
    assert.are.equal(3, calls)
    assert.are.equal(103, eager[2])
    assert.are.equal(3, calls)
    H.assert_error(function() ds:transform(42) end, "expected a function")
  end)

  it("transform_first changes the data and leaves the label", function()
    local ds = data.ArrayDataset(np.ones({2, 3}), {7, 8})
    local t = ds:transform_first(function(x) return x * 5 end)
    local item = t[1]
    H.check(item[1], {5, 5, 5})
    assert.are.equal(8, item[2])
    assert.are.equal(2, #item)
    local plain = data.SimpleDataset({1, 2}):transform_first(function(x) return x * 10 end)
    assert.are.equal(20, plain[1])
  end)

  it("filter, take and shard", function()
    local list = {}
    for i = 1, 9 do list[i] = i - 1 end
    local ds = data.SimpleDataset(list)
    local even = ds:filter(function(x) return x % 2 == 0 end)
    assert.are.equal(5, even:len())
    assert.are.equal(8, even[4])
    assert.are.equal(3, ds:take(3):len())
    assert.are.equal(9, ds:take(100):len())
    -- sample: the sampler's indices in its order (a random subset with take)
    local picked = ds:sample(data.RandomSampler(9, 1)):take(4)
    local seen = {}
    for i = 0, 3 do seen[#seen + 1] = picked[i] end
    local r = data.RandomSampler(9, 1):iter()
    for k = 1, 4 do assert.are.equal(r(), seen[k]) end
    assert.are.equal(9, ds:sample(data.SequentialSampler(9)):len())
    assert.has_error(function() ds:sample(data.SequentialSampler(10)):len() end)
    assert.has_error(function() ds:sample(3) end)
    assert.are.equal(9, ds:take():len())
    local sizes, firsts = {}, {}
    for i = 0, 3 do
      local s = ds:shard(4, i)
      sizes[#sizes + 1], firsts[#firsts + 1] = s:len(), s[0]
    end
    assert.are.same({3, 2, 2, 2}, sizes)
    assert.are.same({0, 3, 5, 7}, firsts)
    H.assert_error(function() ds:shard(4, 4) end, "out of range")
  end)

  it("a dataset class of one's own through Dataset:extend()", function()
    local Squares = data.Dataset:extend()
    function Squares:len() return self.n end
    function Squares:get(i) return {i * i, i} end
    local ds = Squares:new{n = 5}
    assert.are.equal(5, ds:len())
    assert.are.same({16, 4}, ds[4])
    local b = collect(data.DataLoader(ds, {batch_size = 5}))
    H.check(b[1][1], {0, 1, 4, 9, 16}, {dtype = "int64"})
    H.assert_error(function() data.Dataset:new{}:len() end, "defines no len()")
  end)

  it("a get(i) that returns nil, or a bad len(), is an error, not a shorter batch", function()
    local Holey = data.Dataset:extend()
    function Holey:len() return self.n end
    function Holey:get(i) if i ~= 3 then return {i, i} end end
    H.assert_error(function() collect(data.DataLoader(Holey:new{n = 6}, {batch_size = 2})) end,
                   {"get(3) returned nil"})
    H.assert_error(function() data.DataLoader(Holey:new{n = -3}, {batch_size = 2}) end,
                   {"len() must be an integer >= 0, got -3"})
    H.assert_error(function() data.DataLoader(Holey:new{n = 2.5}, {batch_size = 2}) end, {"got 2.5"})
  end)

  it("samplers, batchify_fn, take and filter of the wrong kind are errors naming them", function()
    local ds = data.ArrayDataset(np.ones({4, 2}), {0, 1, 0, 1})
    H.assert_error(function() data.DataLoader(ds, {batch_size = 2, sampler = "x"}) end,
                   {"sampler must be a sampler", "'x'"})
    H.assert_error(function() data.DataLoader(ds, {batch_sampler = "x"}) end, {"batch_sampler must be"})
    H.assert_error(function() data.DataLoader(ds, {batch_size = 2, batchify_fn = 5}) end,
                   {"batchify_fn must be a function"})
    H.assert_error(function() ds:take("x") end, {"take: count must be an integer"})
    H.assert_error(function() ds:filter(5) end, {"filter: expected a function"})
  end)
end)

describe("DataLoader", function()
  local function range_ds(n)
    local xs, ys = {}, {}
    for i = 1, n do xs[i] = i - 1; ys[i] = i - 1 end
    return data.ArrayDataset(np.arange(n * 2):reshape({n, 2}), ys)
  end

  it("keeps, discards or rolls over the last short batch", function()
    local ds = range_ds(10)
    local keep = data.DataLoader(ds, {batch_size = 3})
    assert.are.equal(4, keep:len())
    local b = collect(keep)
    assert.are.equal(4, #b)
    H.assert_shape(b[4][1], {1, 2})
    assert.are.same({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, labels_of(b))

    local discard = data.DataLoader(ds, {batch_size = 3, last_batch = "discard"})
    assert.are.equal(3, discard:len())
    assert.are.same({0, 1, 2, 3, 4, 5, 6, 7, 8}, labels_of(collect(discard)))

    local roll = data.DataLoader(ds, {batch_size = 3, last_batch = "rollover"})
    assert.are.equal(3, roll:len())
    assert.are.same({0, 1, 2, 3, 4, 5, 6, 7, 8}, labels_of(collect(roll)))
    -- the leftover index 9 starts the next epoch: 1 + 10 = 11 -> 3 batches, 2 left
    assert.are.equal(3, roll:len())
    assert.are.same({9, 0, 1, 2, 3, 4, 5, 6, 7}, labels_of(collect(roll)))
    assert.are.equal(4, roll:len()) -- 2 + 10 = 12
    assert.are.same({8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, labels_of(collect(roll)))
  end)

  it("stacks data and labels (int64 for integer labels, float64 otherwise)", function()
    local ds = range_ds(5)
    local b = collect(data.DataLoader(ds, {batch_size = 5}))[1]
    H.check(b[1], {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}}, {shape = {5, 2}, dtype = "float32"})
    H.check(b[2], {0, 1, 2, 3, 4}, {dtype = "int64"})
    local f = collect(data.DataLoader(data.ArrayDataset({0.5, 1.5}, {true, false}), {batch_size = 2}))[1]
    H.check(f[1], {0.5, 1.5}, {dtype = "float64"})
    H.check(f[2], {true, false}, {dtype = "bool"})
    local s = data.batchify.stack({np.ones({2, 2}), np.zeros({2, 2})})
    H.check(s, {{{1, 1}, {1, 1}}, {{0, 0}, {0, 0}}}, {shape = {2, 2, 2}})
    H.assert_error(function() data.batchify.stack({np.ones({2}), np.ones({3})}) end,
                   {"sample 2 has shape (3,) but sample 1 has (2,)"})
    H.assert_error(function() data.batchify.stack({1, "x"}) end, "sample 2 is a string")
  end)

  for _, dev in ipairs(H.devices()) do
    it("the gather fast path equals the per-item path on " .. tostring(dev), function()
      local x = np.random.uniform(0, 1, {7, 3, 2}, {device = dev})
      local ds = data.ArrayDataset(x, {3, 1, 4, 1, 5, 9, 2})
      local fast = collect(data.DataLoader(ds, {batch_size = 3, shuffle = true, seed = 5}))
      local slow = collect(data.DataLoader(ds, {batch_size = 3, shuffle = true, seed = 5,
                                               batchify_fn = data.batchify.stack}))
      assert.are.equal(#slow, #fast)
      for k = 1, #fast do
        H.check(fast[k][1], slow[k][1]:totable(), {shape = slow[k][1].shape, device = dev, dtype = "float32"})
        H.check(fast[k][2], slow[k][2]:totable(), {dtype = "int64"})
      end
    end)
  end

  it("shuffles a fresh permutation every epoch, reproducibly with a seed", function()
    local ds = range_ds(50)
    local a = data.DataLoader(ds, {batch_size = 8, shuffle = true, seed = 42})
    local b = data.DataLoader(ds, {batch_size = 8, shuffle = true, seed = 42})
    local e1, e2 = labels_of(collect(a)), labels_of(collect(a))
    assert.are.same(e1, labels_of(collect(b)))
    assert.are.not_same(e1, e2)
    local sorted = {}
    for k, v in ipairs(e1) do sorted[k] = v end
    table.sort(sorted)
    for k = 1, 50 do assert.are.equal(k - 1, sorted[k]) end
    local other = labels_of(collect(data.DataLoader(ds, {batch_size = 8, shuffle = true, seed = 43})))
    assert.are.not_same(e1, other)
    -- without a seed the order follows np.random.seed
    np.random.seed(7)
    local u = labels_of(collect(data.DataLoader(ds, {batch_size = 50, shuffle = true})))
    np.random.seed(7)
    assert.are.same(u, labels_of(collect(data.DataLoader(ds, {batch_size = 50, shuffle = true}))))
  end)

  it("takes a sampler, a batch_sampler or a batchify_fn", function()
    local ds = range_ds(6)
    local sampler = data.SequentialSampler(3, 2)
    assert.are.same({2, 3, 4}, labels_of(collect(data.DataLoader(ds, {batch_size = 2, sampler = sampler}))))
    local bs = data.BatchSampler(data.SequentialSampler(6), 4, "discard")
    local got = collect(data.DataLoader(ds, {batch_sampler = bs}))
    assert.are.equal(1, #got)
    local seen = {}
    local custom = data.DataLoader(ds, {batch_size = 4, batchify_fn = function(samples)
      seen[#seen + 1] = #samples
      return #samples
    end})
    local n = 0
    for batch in custom:iter() do n = n + batch end
    assert.are.equal(6, n)
    assert.are.same({4, 2}, seen)
  end)

  it("checks its options as MXNet does", function()
    local ds = range_ds(4)
    H.assert_error(function() data.DataLoader(ds, {}) end, "batch_size must be specified")
    H.assert_error(function() data.DataLoader(ds, {batch_size = 2, shuffle = true,
                                                   sampler = data.SequentialSampler(4)}) end,
                   "shuffle must not be specified if sampler is specified")
    H.assert_error(function() data.DataLoader(ds, {batch_size = 2, last_batch = "drop"}) end,
                   "last_batch must be one of 'keep', 'discard', or 'rollover', but got drop")
    H.assert_error(function() data.DataLoader(ds, {batch_size = 0}) end, "positive integer")
    H.assert_error(function() data.DataLoader(ds, {batch_size = 2,
                                                   batch_sampler = data.BatchSampler(data.SequentialSampler(4), 2)}) end,
                   "must not be specified if batch_sampler is specified")
    H.assert_error(function() data.DataLoader(42, {batch_size = 2}) end, "expected a Dataset")
  end)
end)

describe("#, [i] and for on datasets, samplers and loaders", function()
  -- LuaJIT ignores __len on tables: these objects are userdata proxies

  it("#ds, ds[i] and `for x, y in ds`, as MXNet's len(ds), ds[i] and for", function()
    local ds = data.ArrayDataset({1, 2, 3}, {10, 20, 30})
    assert.are.equal(3, #ds)
    assert.are.same({2, 20}, ds[1])
    local xs, ys = {}, {}
    for x, y in ds do xs[#xs + 1], ys[#ys + 1] = x, y end
    assert.are.same({1, 2, 3}, xs)
    assert.are.same({10, 20, 30}, ys)
    xs = {}
    for x in ds:iter() do xs[#xs + 1] = x end
    assert.are.same({1, 2, 3}, xs)
    assert.are.equal(2, #ds:take(2))
    assert.are.equal(3, #ds:transform(function(x, y) return y, x end))
    assert.are.equal(1, #ds:filter(function(item) return item[1] == 2 end))
    assert.are.equal(2, #data.SimpleDataset({"a", "b"}))
    -- not tables: ipairs and pairs are errors, not empty loops
    H.assert_error(function() for _ in ipairs(ds) do end end, "table expected")
    H.assert_error(function() for _ in pairs(ds) do end end, "table expected")
    assert.is_truthy(tostring(ds):find("ArrayDataset(3)", 1, true))
  end)

  it("a dataset class of one's own gets #, [i], for and its fields", function()
    local Squares = data.Dataset:extend("Squares")
    function Squares:len() return self.n end
    function Squares:get(i) return {i * i, i} end
    local ds = Squares:new{n = 4}
    assert.are.equal(4, #ds)
    assert.are.same({9, 3}, ds[3])
    local sq = {}
    for x, i in ds do sq[i + 1] = x end
    assert.are.same({0, 1, 4, 9}, sq)
    ds.n = 2 -- fields write through
    assert.are.equal(2, #ds)
    assert.are.equal(2, ds.n)
    assert.is_truthy(tostring(ds):find("Squares(2)", 1, true))
    H.assert_error(function() data.Dataset:extend(5) end, "class name must be a string")
    H.assert_error(function() Squares:new(5) end, "expected a table of fields")
  end)

  it("#sampler and `for i in sampler`", function()
    local function list(s)
      local out = {}
      for i in s do out[#out + 1] = i end
      return out
    end
    local s = data.SequentialSampler(4)
    assert.are.equal(4, #s)
    assert.are.same({0, 1, 2, 3}, list(s))
    local bs = data.BatchSampler(s, 3, "keep")
    assert.are.equal(2, #bs)
    assert.are.same({{0, 1, 2}, {3}}, list(bs))
    local r = list(data.RandomSampler(5, 1))
    table.sort(r)
    assert.are.same({0, 1, 2, 3, 4}, r)
    H.assert_error(function() return s[0] end, {"SequentialSampler", "no items by index", "for i in sampler"})
    local Evens = data.Sampler:extend("Evens")
    function Evens:len() return self.n end
    function Evens:iter()
      local i = -2
      return function()
        i = i + 2
        if i < 2 * self.n then return i end
      end
    end
    local e = Evens:new{n = 3}
    assert.are.equal(3, #e)
    assert.are.same({0, 2, 4}, list(e))
    assert.are.same({{0, 2}, {4}}, list(data.BatchSampler(e, 2)))
  end)

  it("#loader and `for data, label in loader`: each loop an epoch, as MXNet's", function()
    local function make()
      local ys = {}
      for i = 1, 10 do ys[i] = i - 1 end
      return data.DataLoader(data.ArrayDataset(np.arange(20):reshape({10, 2}), ys),
                             {batch_size = 4, shuffle = true, seed = 3})
    end
    local loader, ref = make(), make()
    assert.are.equal(3, #loader)
    local epochs = {}
    for e = 1, 4 do epochs[e] = labels_of(collect(ref)) end
    local got = {}
    for x, y in loader do
      assert.are.equal(2, x.shape[2])
      assert.are.equal("int64", y.dtype)
      for _, v in ipairs(y:totable()) do got[#got + 1] = v end
    end
    assert.are.same(epochs[1], got)
    -- break, then a new loop: a new epoch from its start
    local first
    for _, y in loader do
      first = y:totable()
      break
    end
    assert.are.same({epochs[2][1], epochs[2][2], epochs[2][3], epochs[2][4]}, first)
    got = {}
    for _, y in loader:iter() do
      for _, v in ipairs(y:totable()) do got[#got + 1] = v end
    end
    assert.are.same(epochs[3], got)
    -- nested loops over one loader: an error naming the fix; the loader still works after
    H.assert_error(function()
      for _ in loader do
        for _ in loader do end
      end
    end, {"DataLoader", "abandoned", "obj:iter()"})
    local n = 0
    for _ in loader do n = n + 1 end
    assert.are.equal(3, n)
    local inner = 0
    for _ in loader do
      for _ in loader:iter() do inner = inner + 1 end
    end
    assert.are.equal(9, inner)
    H.assert_error(function() for _ in ipairs(loader) do end end, "table expected")
    H.assert_error(function() return loader[0] end, {"no batches by index", "for data, label in loader do"})
    -- one field: the batch is one array
    local single = data.DataLoader(data.ArrayDataset(np.arange(6)), {batch_size = 4})
    local sizes = {}
    for x in single do sizes[#sizes + 1] = x.shape[1] end
    assert.are.same({4, 2}, sizes)
  end)

  for _, dev in ipairs(H.devices()) do
    it("a batch's indices are checked and read as get(i) reads them on " .. tostring(dev), function()
      local x = np.arange(8, {device = dev}):reshape({4, 2})
      local ds = data.ArrayDataset(x, {10, 11, 12, 13})
      local function first_batch(idx, opts)
        opts = opts or {}
        opts.batch_sampler = {len = function() return 1 end,
                              iter = function() local done = false
                                return function() if not done then done = true; return idx end end
                              end}
        return collect(data.DataLoader(ds, opts))[1]
      end
      for _, opts in ipairs({{}, {batchify_fn = data.batchify.stack}}) do -- gather and per-item paths
        H.assert_error(function() first_batch({1, 100, -5}, opts) end,
                       {"index 100 is out of range for a dataset of length 4"})
        H.assert_error(function() first_batch({-5}, opts) end, {"index -5 is out of range"})
        H.assert_error(function() first_batch({0.5}, opts) end, {"index 0.5 is out of range"})
        local b = first_batch({-1, 0, -4}, opts)
        H.check(b[1], {{6, 7}, {0, 1}, {0, 1}}, {device = dev})
        H.check(b[2], {13, 10, 10}, {dtype = "int64"})
      end
    end)
  end

  it("MXNet's module paths reach the same classes", function()
    assert.are.equal(data.ArrayDataset, data.dataset.ArrayDataset)
    assert.are.equal(data.SimpleDataset, data.dataset.SimpleDataset)
    assert.are.equal(data.Dataset, data.dataset.Dataset)
    assert.are.equal(data.BatchSampler, data.sampler.BatchSampler)
    assert.are.equal(data.RandomSampler, data.sampler.RandomSampler)
    assert.are.equal(data.SequentialSampler, data.sampler.SequentialSampler)
    assert.are.equal(data.Sampler, data.sampler.Sampler)
    assert.are.equal(data.DataLoader, data.dataloader.DataLoader)
    assert.are.equal(data.batchify.stack, data.dataloader.default_batchify_fn)
    assert.are.equal(data.vision.FashionMNIST, data.vision.datasets.FashionMNIST)
    assert.are.equal(data.vision.MNIST, data.vision.datasets.MNIST)
    assert.are.equal(data.vision.ImageFolderDataset, data.vision.datasets.ImageFolderDataset)
    assert.are.equal("function", type(data.SplitSampler))
  end)
end)

describe("vision datasets", function()
  local root = "/usr/share/datasets/fashion-mnist"
  local have = io.open(root .. "/train-labels-idx1-ubyte.gz", "rb")
  if have then have:close() end

  it("FashionMNIST: sizes, first labels, item shape and pixel range", function()
    if not have then pending("Debian's dataset-fashion-mnist is not installed") return end
    local luon = H.luon
    local t0 = luon.clock()
    local train = data.vision.FashionMNIST{train = true}
    local secs = luon.clock() - t0
    assert.is_true(secs < 3, ("loading took %.2f s"):format(secs))
    assert.are.equal(60000, train:len())
    local x, y = train[0][1], train[0][2]
    H.assert_shape(x, {28, 28, 1})
    assert.are.equal("uint8", x.dtype)
    H.check(y, 9, {shape = {}, dtype = "int32"}) -- ankle boot; a 0-d int32 array, as MXNet's
    assert.are.equal(0, train[1][2]:item()) -- t-shirt
    assert.are.equal(train[59999][2]:item(), train[-1][2]:item())
    H.assert_shape(train._data, {60000, 28, 28, 1})
    local all = train._data
    assert.are.equal(0, all:min():item())
    assert.are.equal(255, all:max():item())
    local counts = {}
    for i = 1, 60000 do counts[train._label[i]] = (counts[train._label[i]] or 0) + 1 end
    for c = 0, 9 do assert.are.equal(6000, counts[c]) end
    local test = data.vision.FashionMNIST{root = root, train = false}
    assert.are.equal(10000, test:len())
    assert.are.equal(9, test[0][2]:item())
    assert.are.equal(2, test[1][2]:item())
  end)

  it("FashionMNIST batches through the DataLoader and transforms", function()
    if not have then pending("Debian's dataset-fashion-mnist is not installed") return end
    local test = data.vision.FashionMNIST{train = false}
    local loader = data.DataLoader(test, {batch_size = 1000, last_batch = "discard"})
    assert.are.equal(10, loader:len())
    local n = 0
    for i, b in loader:enumerate() do
      H.check(b[1], nil, {shape = {1000, 28, 28, 1}, dtype = "uint8"})
      H.check(b[2], nil, {shape = {1000}, dtype = "int32"})
      if i == 1 then
        H.check(b[1]:at(0), test[0][1]:totable())
        assert.are.equal(test[999][2]:item(), b[2]:at(999):item())
      end
      n = n + 1
    end
    assert.are.equal(10, n)
    local scaled = test:transform_first(function(x) return x:astype("float32") / 255 end)
    local v = scaled[0][1]
    assert.are.equal("float32", v.dtype)
    assert.is_true(v:max():item() <= 1)
    local with_fn = data.vision.FashionMNIST{train = false, transform = function(x, y) return x:astype("float32"), y * 2 end}
    H.check(with_fn[0][2], 18, {dtype = "int32"})
    assert.are.equal("float32", with_fn[0][1].dtype)
    -- the labels stay int32 through the per-item path (a Lua transform)
    local x, y = data.DataLoader(with_fn, {batch_size = 3}):iter()()
    H.check(x, nil, {shape = {3, 28, 28, 1}, dtype = "float32"})
    H.check(y, {18, 4, 2}, {dtype = "int32"})
  end)

  it("errors name the root and the file", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir -p '" .. dir .. "'")
    H.assert_error(function() data.vision.MNIST{root = dir} end,
                   {"MNIST: cannot find " .. dir .. "/train-images-idx3-ubyte.gz", "root"})
    local f = io.open(dir .. "/train-images-idx3-ubyte", "wb")
    f:write("\0\0\8\3\0\0\0\1\0\0\0\2\0\0\0\2abc") -- one byte short
    f:close()
    f = io.open(dir .. "/train-labels-idx1-ubyte", "wb")
    f:write("\0\0\8\1\0\0\0\1\5")
    f:close()
    H.assert_error(function() data.vision.MNIST{root = dir} end,
                   {dir .. "/train-images-idx3-ubyte", "ends after 3 of the 4"})
    f = io.open(dir .. "/train-images-idx3-ubyte", "wb")
    f:write("\0\0\8\3\0\0\0\2\0\0\0\2\0\0\0\1abcd")
    f:close()
    H.assert_error(function() data.vision.MNIST{root = dir} end, {"2 images", "1 labels"})
    f = io.open(dir .. "/train-images-idx3-ubyte", "wb")
    f:write("\0\0\8\3\0\0\0\1\0\0\0\2\0\0\0\2abcd")
    f:close()
    local ds = data.vision.MNIST{root = dir}
    assert.are.equal(1, ds:len())
    H.check(ds[0][1], {{{97}, {98}}, {{99}, {100}}}, {dtype = "uint8"})
    H.check(ds[0][2], 5, {shape = {}, dtype = "int32"})
    H.check(data.DataLoader(ds, {batch_size = 1}):iter()(), {{{{97}, {98}}, {{99}, {100}}}})
    local _, y = data.DataLoader(ds, {batch_size = 1}):iter()()
    H.check(y, {5}, {dtype = "int32"})
    os.execute("rm -rf '" .. dir .. "'")
  end)
end)
