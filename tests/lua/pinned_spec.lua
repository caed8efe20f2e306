-- pinned_spec: the DataLoader's pin_memory and pin_device_id. Without a
-- GPU, pin_memory = true gives exactly the batches of false (C loader,
-- gather, stack and Lua paths) and nothing is pinned; the options' errors.
-- With a GPU (scripts/gpu-check runs this file too): batches and labels in
-- pinned memory by default, their copies to gpu(0) (as_in_context,
-- split_and_load, copyto) equal to the CPU batches, and the pinned pool
-- reusing its blocks over epochs.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon
local data = require("luon.gluon.data")
local utils = require("luon.gluon.utils")
local vision = data.vision
local T = vision.transforms
local core = require("luon.core")

local function pinned(x) return core.C.luon_tensor_is_pinned(x.t) ~= 0 end

local function pic(h, w, k)
  local rows = {}
  for y = 1, h do
    local r = {}
    for x = 1, w do r[x] = {(x * 13 + k * 29) % 256, (y * 7 + k * 5) % 256, (x * y + k) % 256} end
    rows[y] = r
  end
  return np.array(rows, {dtype = "uint8"})
end

-- Every batch of two epochs as {data values, label values, shape, dtype}.
local function epochs(loader, check)
  local out = {}
  for _ = 1, 2 do
    for _, b in loader:enumerate() do
      if check then check(b) end
      out[#out + 1] = {b[1]:totable(), b[2]:totable(), b[1].shape, b[1].dtype, b[2].dtype}
    end
  end
  return out
end

describe("DataLoader pin_memory", function()
  local root, folder, arrays, list
  setup(function()
    root = os.tmpname()
    os.remove(root)
    for c, name in ipairs({"a", "b"}) do
      os.execute("mkdir -p '" .. root .. "/" .. name .. "'")
      for k = 1, 5 do
        luon.image.imwrite(("%s/%s/%d.png"):format(root, name, k), pic(9 + k, 12 - k, k + 10 * c))
      end
    end
    folder = vision.ImageFolderDataset(root)
    local x = np.random.uniform(-1, 1, {11, 3, 4})
    local y = np.arange(0, 11, 1, {dtype = "int64"})
    arrays = data.ArrayDataset(x, y)
    list = {}
    for i = 0, 10 do list[i + 1] = {x:at(i), i % 3} end
    list = data.SimpleDataset(list)
  end)
  teardown(function() os.execute("rm -rf '" .. root .. "'") end)

  -- name, dataset, options: the C loader, the Lua path of the same
  -- pipeline, one take per field, Stack over samples
  local function cases()
    local tf = T.Compose{T.Resize({8, 6}), T.RandomFlipLeftRight(), T.ToTensor()}
    return {
      {"C loader", folder:transform_first(tf), {num_workers = 2}},
      {"Lua path", folder:transform_first(tf), {num_workers = 0, try_nopython = false}},
      {"gather", arrays, {}},
      {"stack", list, {}},
    }
  end

  it("without a GPU gives the same batches as pin_memory = false, in plain memory", function()
    local ngpu = npx.num_gpus()
    for _, c in ipairs(cases()) do
      local name, ds, o = c[1], c[2], c[3]
      local function loader(pin)
        return data.DataLoader(ds, {batch_size = 4, shuffle = true, seed = 5, num_workers = o.num_workers,
                                    try_nopython = o.try_nopython, pin_memory = pin})
      end
      local off = epochs(loader(false), function(b)
        assert.is_false(pinned(b[1]) or pinned(b[2]), name .. ": pin_memory = false pinned a batch")
      end)
      assert.are.equal(6, #off, name)
      for _, pin in ipairs({true, nil}) do -- nil: the default
        local on = epochs(loader(pin), function(b)
          if ngpu == 0 then assert.is_false(pinned(b[1]) or pinned(b[2]), name .. ": pinned without a GPU") end
        end)
        assert.are.same(off, on, name)
      end
    end
    if ngpu == 0 then
      assert.are.same({in_use = 0, cached = 0, peak = 0, allocs = 0, cache_hits = 0, requested = 0, peak_requested = 0},
                      npx.pinned_memory_stats(0))
    end
  end)

  it("copies a Lua path's batch into the pinned pool field by field", function()
    local x = np.arange(0, 24, 1):reshape({2, 3, 4})
    local g = npx.num_gpus() > 0 and np.ones({2}, {device = npx.gpu(0)}) or nil
    local b = require("luon.gluon.data.dataloader")._pin_batch({x:slice({0, 2}, {1, 3}), {np.array({7, 8}, {dtype = "int64"}), 5}, g}, 0)
    assert.are.same(x:slice({0, 2}, {1, 3}):totable(), b[1]:totable())
    assert.are.same({2, 2, 4}, b[1].shape)
    assert.are.equal("int64", b[2][1].dtype)
    assert.are.same({7, 8}, b[2][1]:totable())
    assert.are.equal(5, b[2][2])
    assert.is_true(rawequal(g, b[3])) -- arrays on a GPU stay as they are
    assert.are.equal(npx.num_gpus() > 0, pinned(b[1]) and pinned(b[2][1]))
    if npx.num_gpus() > 0 then assert.is_true(rawequal(b[1], require("luon.gluon.data.dataloader")._pin_batch(b, 0)[1])) end -- not copied again
  end)

  it("checks its options", function()
    H.assert_error(function() data.DataLoader(arrays, {batch_size = 2, pin_memory = "yes"}) end,
                   "pin_memory must be true or false, got yes")
    H.assert_error(function() data.DataLoader(arrays, {batch_size = 2, pin_device_id = -1}) end,
                   "pin_device_id must be an integer >= 0, got -1")
    if npx.num_gpus() > 0 then
      H.assert_error(function() data.DataLoader(arrays, {batch_size = 2, pin_device_id = npx.num_gpus()}) end,
                     "does not name a GPU")
    else -- ignored, as pin_memory is, where there is no GPU
      assert.are.equal(6, data.DataLoader(arrays, {batch_size = 2, pin_device_id = 3}):len())
    end
    H.assert_error(function() npx.pinned_memory_stats(16) end, "pinned pool 16 does not exist")
    -- ids checked as every device id is, before C sees them
    for _, bad in ipairs({-1, 1.5, "0", 2 ^ 40, true}) do
      H.assert_error(function() npx.pinned_memory_stats(bad) end,
                     "pinned_memory_stats: the pinned pool id must be an integer from 0 to 2147483647, got")
      H.assert_error(function() npx.empty_pinned_cache(bad) end,
                     "empty_pinned_cache: the pinned pool id must be an integer from 0 to 2147483647, got")
    end
  end)

  it("copies pinned batches to gpu(0), equal to the CPU ones, reusing the pool's blocks", function()
    if npx.num_gpus() == 0 then return end -- a GPU case: scripts/gpu-check
    local gpu = npx.gpu(0)
    for _, c in ipairs(cases()) do
      local name, ds, o = c[1], c[2], c[3]
      local function loader(pin)
        return data.DataLoader(ds, {batch_size = 4, shuffle = true, seed = 9, num_workers = o.num_workers,
                                    try_nopython = o.try_nopython, pin_memory = pin, prefetch = 2})
      end
      local ref = epochs(loader(false))
      H.collect()
      local s0 = npx.pinned_memory_stats(0)
      local got, k = {}, 0
      local l = loader(true)
      for _ = 1, 3 do
        for _, b in l:enumerate() do
          assert.is_true(pinned(b[1]) and pinned(b[2]), name .. ": batch not pinned")
          local x = b[1]:as_in_context(gpu)
          local y = utils.split_and_load(b[2], {gpu})[1]
          local x2 = b[1]:copyto(gpu)
          k = k + 1
          if k <= #ref then
            got[k] = {x:totable(), y:totable(), x.shape, x.dtype, y.dtype}
            assert.are.same(got[k][1], x2:totable(), name .. ": copyto")
          end
        end
        H.collect()
      end
      assert.are.same(ref, got, name)
      local s1 = npx.pinned_memory_stats(0)
      local allocs, hits = s1.allocs - s0.allocs, s1.cache_hits - s0.cache_hits
      -- 3 epochs of 3 batches, data and labels: 18 blocks; a handful fresh
      -- (in flight, held, pending copies), the rest reused once the copies
      -- that read them completed
      assert.is_true(allocs >= 18, ("%s: %d pinned allocations"):format(name, allocs))
      assert.is_true(hits >= allocs / 2, ("%s: %d of %d pinned allocations reused"):format(name, hits, allocs))
    end
    npx.waitall()
    npx.empty_pinned_cache(0)
    assert.are.equal(0, npx.pinned_memory_stats(0).cached)
  end)
end)
