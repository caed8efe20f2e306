-- memory_spec: many small ops keep resident memory flat (the GC frees
-- tensors, the caching allocator reuses blocks), and in_use returns to
-- where it started once the arrays are collected.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    it("100k small ops keep resident memory flat", function()
      local a = np.ones({1}, {device = dev})
      local b = np.ones({1}, {device = dev})
      local c
      -- warm-up: caches, JIT traces, and on a GPU the driver's own host
      -- memory, which grows over the first launches (78 MB on an H200
      -- within 30k in a fresh process, flat over the next 270k)
      for _ = 1, 50000 do c = a + b end
      local function window()
        collectgarbage("collect")
        local r0 = H.rss_kb()
        for _ = 1, 100000 do c = a + b end
        collectgarbage("collect")
        local r1 = H.rss_kb()
        return r0 and (r1 - r0) / 1024
      end
      -- two windows of 100k: a leak grows in both; on a GPU, after other
      -- spec files in the same process, the driver's growth may still
      -- reach into the first (24.8 MB seen on an H200), so there only the
      -- second counts
      local first, second = window(), window()
      H.assert_close(c, {2})
      -- under AddressSanitizer freed memory sits in its quarantine, so the
      -- resident size says nothing about our reuse there
      local asan = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true)
      -- nor under the stand-in backend, whose "GPU" blocks are resident host memory
      if first and not asan and not (H.stand_in_gpus and dev.device_type == "gpu") then
        local real_gpu = dev.device_type == "gpu"
        assert.is_true(second < 20, ("resident memory grew by %.1f MB over the second 100k ops"):format(second))
        assert.is_true(real_gpu or first < 20, ("resident memory grew by %.1f MB over 100k ops"):format(first))
      end
    end)

    it("the allocator reuses blocks (cache hits grow)", function()
      -- 1000 floats: past the size CPU tensors keep inline in their header
      local a = np.ones({1000}, {device = dev})
      local c
      for _ = 1, 1000 do c = a + a end
      collectgarbage("collect")
      local s0 = npx.memory_stats(dev)
      for k = 1, 10000 do
        c = a + a
        if k % 200 == 0 then H.collect() end -- blocks of the dead arrays go back to the cache
      end
      local s1 = npx.memory_stats(dev)
      H.assert_close(c:slice({0, 2}), {2, 2})
      assert.is_true(s1.allocs - s0.allocs >= 10000, ("allocs grew by %d"):format(s1.allocs - s0.allocs))
      assert.is_true(s1.cache_hits - s0.cache_hits >= 5000,
                     ("cache hits grew by %d over 10k ops"):format(s1.cache_hits - s0.cache_hits))
    end)

    it("in_use returns to near its start after collection", function()
      H.collect()
      local s0 = npx.memory_stats(dev).in_use
      do
        local keep = {}
        for k = 1, 50 do keep[k] = np.ones({1000}, {device = dev}) * k end
        local s1 = npx.memory_stats(dev).in_use
        assert.is_true(s1 - s0 >= 50 * 4000, ("in_use grew by only %d bytes for 50 arrays of 4000"):format(s1 - s0))
        keep = nil
      end
      H.collect()
      local s2 = npx.memory_stats(dev).in_use
      assert.is_true(s2 - s0 < 64 * 1024, ("in_use is %d bytes above its start"):format(s2 - s0))
    end)

    it("big temporaries are collected without an explicit collectgarbage", function()
      local rss0 = H.rss_kb()
      for _ = 1, 40 do
        local t = np.ones({4 * 1024 * 1024}, {device = dev}) -- 16 MB each, 640 MB in all
        t = t + 1
      end
      local peak = npx.memory_stats(dev).in_use
      assert.is_true(peak < 400 * 1024 * 1024, ("in_use %.0f MB after 40 x 16 MB temporaries"):format(peak / 2 ^ 20))
      if rss0 then
        local grew = (H.rss_kb() - rss0) / 1024
        assert.is_true(grew < 400, ("resident memory grew by %.0f MB"):format(grew))
      end
    end)

    it("peak is the highest in_use since reset_peak_memory_stats", function()
      H.collect()
      npx.reset_peak_memory_stats(dev)
      local s0 = npx.memory_stats(dev)
      assert.equal(s0.in_use, s0.peak)
      do local t = np.ones({256 * 1024}, {device = dev}) t = nil end -- 1 MB
      H.collect()
      local s1 = npx.memory_stats(dev)
      assert.is_true(s1.peak - s0.in_use >= 1024 * 1024, ("peak rose by %d bytes"):format(s1.peak - s0.in_use))
      npx.reset_peak_memory_stats(dev)
      assert.equal(npx.memory_stats(dev).in_use, npx.memory_stats(dev).peak)
      H.assert_error(function() npx.reset_peak_memory_stats("gpu7") end, {"reset_peak_memory_stats"})
    end)

    it("requested counts the bytes asked for, peak_requested its highest since reset", function()
      H.collect()
      npx.reset_peak_memory_stats(dev)
      local s0 = npx.memory_stats(dev)
      assert.equal(s0.requested, s0.peak_requested)
      assert.is_true(s0.requested <= s0.in_use)
      -- 1,000,004 bytes: a size class above it, so in_use rises by more
      local t = np.ones({250001}, {device = dev, dtype = "float32"})
      local s1 = npx.memory_stats(dev)
      assert.equal(s0.requested + 1000004, s1.requested)
      assert.is_true(s1.in_use - s0.in_use > 1000004)
      t = nil -- luacheck: ignore
      H.collect()
      local s2 = npx.memory_stats(dev)
      assert.equal(s0.requested, s2.requested)
      assert.equal(s0.requested + 1000004, s2.peak_requested)
      npx.reset_peak_memory_stats(dev)
      assert.equal(s2.requested, npx.memory_stats(dev).peak_requested)
    end)

    it("empty_cache gives cached blocks back", function()
      do local t = np.ones({1024 * 1024}, {device = dev}) t = nil end
      H.collect()
      npx.empty_cache(dev)
      local s = npx.memory_stats(dev)
      assert.equal(0, s.cached)
    end)
  end)
end

-- npx.set_memory_limit: a cap on a device's bytes turns an allocation the
-- machine could not back into an error instead of the OOM killer.
local core = require("luon.core")

local function run(env, code)
  return H.sh(("%s %s -e %s"):format(env, H.quote(H.luon_exe()), H.quote(code)))
end

for _, dev in ipairs(H.devices()) do
  describe("memory limit on " .. tostring(dev), function()
    after_each(function()
      core.set_gc_mode("auto")
      npx.set_memory_limit(dev, nil)
    end)

    it("is nil until set; nil or 0 removes it", function()
      assert.is_nil(npx.memory_limit(dev))
      npx.set_memory_limit(dev, 2 ^ 30)
      assert.are.equal(2 ^ 30, npx.memory_limit(dev))
      npx.set_memory_limit(dev, 0)
      assert.is_nil(npx.memory_limit(dev))
      npx.set_memory_limit(dev, 2 ^ 30)
      npx.set_memory_limit(dev, nil)
      assert.is_nil(npx.memory_limit(dev))
    end)

    it("refuses a request past it, naming the bytes asked, in use and allowed; luon goes on", function()
      H.collect()
      local in_use = npx.memory_stats(dev).in_use
      npx.set_memory_limit(dev, in_use + 8 * 2 ^ 20)
      local x = np.ones({2 ^ 20}, {device = dev}) -- 4 MB: fits
      H.assert_error(function() return x:reshape({1, 2 ^ 20}) + np.ones({4, 1}, {device = dev}) end,
                     {"out of memory on " .. tostring(dev), "asked for 16777216 bytes",
                      "past the limit of " .. math.floor(in_use + 8 * 2 ^ 20) .. " bytes",
                      "set by npx.set_memory_limit"})
      assert.are.equal(2 ^ 20, x:sum():item())
      npx.set_memory_limit(dev, nil)
      H.assert_shape(x:reshape({1, 2 ^ 20}) + np.ones({4, 1}, {device = dev}), {4, 2 ^ 20})
    end)

    it("collects garbage arrays and retries before it raises", function()
      local x = np.ones({2 ^ 18}, {device = dev}) -- 1 MB
      H.collect()
      npx.empty_cache(dev)
      npx.set_memory_limit(dev, npx.memory_stats(dev).in_use + 6 * 2 ^ 20)
      core.set_gc_mode("manual") -- only the retry after "out of memory" collects
      local y
      for _ = 1, 30 do y = x + 1 end -- 30 MB through a 6 MB cap
      core.set_gc_mode("auto")
      assert.are.equal(2 ^ 19, y:sum():item())
      assert.is_true(npx.memory_stats(dev).in_use + npx.memory_stats(dev).cached <= npx.memory_limit(dev))
    end)

    it("checks its arguments", function()
      H.assert_error(function() npx.set_memory_limit(dev, -1) end,
                     "set_memory_limit: bytes must be an integer >= 0, got -1")
      H.assert_error(function() npx.set_memory_limit(dev, "1G") end, "bytes must be an integer")
      H.assert_error(function() npx.set_memory_limit("gpu(99)", 1) end, "set_memory_limit")
      H.assert_error(function() npx.memory_limit(42) end, "memory_limit: device must be a Device")
    end)
  end)
end

describe("the collector's pace", function()
  it("counts the blocks an op's results hold, not its kernel's scratch", function()
    local core = require("luon.core")
    local counters = core.C.luon_counters_get()
    -- a 5x5 convolution's im2col columns (64 x 25 x 56 x 56 floats, 20 MB)
    -- are scratch, freed before the op returns; its result holds 0.8 MB
    local x, w = np.ones({1, 64, 56, 56}), np.ones({64, 64, 5, 5})
    local opts = {kernel = {5, 5}, pad = {2, 2}, num_filter = 64, no_bias = true}
    npx.convolution(x, w, nil, opts) -- warm: the allocator's classes
    core.set_gc_mode("manual") -- no collection (which resets the count) in between
    finally(function() core.set_gc_mode("auto") end)
    local before = tonumber(counters.bytes_since_gc)
    local y = npx.convolution(x, w, nil, opts)
    local grew = tonumber(counters.bytes_since_gc) - before
    assert.is_true(grew >= 0 and grew < 4 * 1024 * 1024, "bytes_since_gc grew by " .. grew)
    assert.are.equal(1600, y:max():item())
  end)
end)

describe("conv2d with its fused relu", function()
  it("keeps NaN, as relu does (oneDNN's relu would give 0)", function()
    local x, w, b = np.ones({1, 1, 4, 4}), np.ones({16, 1, 3, 3}), np.full({16}, 0 / 0)
    local y = npx.convolution(x, w, b, {kernel = {3, 3}, pad = {1, 1}, num_filter = 16, act_type = "relu"})
    assert.are.equal(256, np.isnan(y):sum():item())
  end)
end)

describe("LUON_MEMORY_LIMIT", function()
  it("gives every device its first limit (K, M, G suffixes); set_memory_limit overrides it", function()
    local out, status = run("LUON_MEMORY_LIMIT=64M",
      "local npx = require('luon').npx; print(npx.memory_limit(npx.cpu(0)), npx.memory_limit(npx.cpu(1)));" ..
      "npx.set_memory_limit(npx.cpu(0), 0); print(npx.memory_limit(npx.cpu(0)))")
    assert.are.equal(0, status, out)
    assert.are.equal("67108864\t67108864\nnil\n", out)
    out, status = run("LUON_MEMORY_LIMIT=1.5K", "print(require('luon').npx.memory_limit())")
    assert.are.equal("1536\n", out)
  end)

  it("turns an allocation past it into an error", function()
    local out, status = run("LUON_MEMORY_LIMIT=32M",
      "local np = require('luon').np; local ok, e = pcall(np.ones, {2^24}); print(ok, e); print(np.ones({2}):sum():item())")
    assert.are.equal(0, status, out)
    assert.is_truthy(out:find("false\t.*out of memory on cpu%(0%): asked for 67108864 bytes.*LUON_MEMORY_LIMIT"), out)
    assert.is_truthy(out:find("\n2\n", 1, true), out)
  end)

  it("names a value that is not a size", function()
    local out = run("LUON_MEMORY_LIMIT=lots", "print(pcall(require('luon').npx.memory_limit))")
    assert.is_truthy(out:find("LUON_MEMORY_LIMIT='lots' is not a number of bytes", 1, true), out)
  end)
end)
