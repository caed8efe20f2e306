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
      for _ = 1, 10000 do c = a + b end          -- warm-up: caches, JIT traces
      collectgarbage("collect")
      local rss0 = H.rss_kb()
      for _ = 1, 100000 do c = a + b end
      collectgarbage("collect")
      local rss1 = H.rss_kb()
      H.assert_close(c, {2})
      -- under AddressSanitizer freed memory sits in its quarantine, so the
      -- resident size says nothing about our reuse there
      local asan = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true)
      -- nor under the stand-in backend, whose "GPU" blocks are resident host memory
      if rss0 and not asan and not (H.stand_in_gpus and dev.device_type == "gpu") then
        local grew = (rss1 - rss0) / 1024
        assert.is_true(grew < 20, ("resident memory grew by %.1f MB over 100k ops"):format(grew))
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

    it("empty_cache gives cached blocks back", function()
      do local t = np.ones({1024 * 1024}, {device = dev}) t = nil end
      H.collect()
      npx.empty_cache(dev)
      local s = npx.memory_stats(dev)
      assert.equal(0, s.cached)
    end)
  end)
end
