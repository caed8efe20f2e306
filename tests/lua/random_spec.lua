-- random_spec: np.random.uniform/normal/randint/shuffle: shapes, dtypes,
-- ranges, rough moments, and reproducibility under np.random.seed.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx

local function stats(x)
  local t = x:reshape({-1}):totable()
  local n, s, s2, lo, hi = #t, 0, 0, math.huge, -math.huge
  for k = 1, n do
    local v = t[k]
    s, s2 = s + v, s2 + v * v
    if v < lo then lo = v end
    if v > hi then hi = v end
  end
  local mean = s / n
  return mean, s2 / n - mean * mean, lo, hi, t
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local D = {device = dev}

    describe("uniform", function()
      it("has the shape, dtype and device asked", function()
        H.check(np.random.uniform(0, 1, {2, 3}, D), nil, {shape = {2, 3}, dtype = "float32", device = dev})
        H.check(np.random.uniform({size = {4}, device = dev}), nil, {shape = {4}, device = dev})
        H.check(np.random.uniform(-1, 1, 5, {dtype = "float64", device = dev}), nil,
                {shape = {5}, dtype = "float64"})
        H.check(np.random.uniform({low = 2, high = 3, device = dev}), nil, {shape = {}})
      end)
      it("stays in [low, high) with the right moments", function()
        local mean, var, lo, hi = stats(np.random.uniform(2, 5, {20000}, D))
        assert.is_true(lo >= 2 and hi < 5, ("range [%g, %g]"):format(lo, hi))
        assert.is_true(math.abs(mean - 3.5) < 0.05, "mean " .. mean)
        assert.is_true(math.abs(var - 0.75) < 0.05, "variance " .. var)
      end)
    end)

    describe("normal", function()
      it("has the right moments", function()
        local x = np.random.normal(1, 2, {20000}, D)
        H.check(x, nil, {shape = {20000}, dtype = "float32", device = dev})
        local mean, var = stats(x)
        assert.is_true(math.abs(mean - 1) < 0.1, "mean " .. mean)
        assert.is_true(math.abs(var - 4) < 0.25, "variance " .. var)
        local y = np.random.normal({loc = -3, scale = 0.5, size = {10000}, device = dev})
        local m2, v2 = stats(y)
        assert.is_true(math.abs(m2 + 3) < 0.05, "mean " .. m2)
        assert.is_true(math.abs(v2 - 0.25) < 0.03, "variance " .. v2)
      end)
    end)

    describe("randint", function()
      it("draws integers in [low, high)", function()
        local x = np.random.randint(3, 7, {5000}, D)
        H.check(x, nil, {shape = {5000}, dtype = "int64", device = dev})
        local _, _, lo, hi, t = stats(x)
        assert.equal(3, lo)
        assert.equal(6, hi)
        for k = 1, #t do assert(t[k] % 1 == 0) end
      end)
      it("randint(high) starts at 0, and takes a dtype", function()
        local _, _, lo, hi = stats(np.random.randint(4, {low = nil, size = {2000}, device = dev}))
        assert.equal(0, lo)
        assert.equal(3, hi)
        H.check(np.random.randint(0, 10, {3}, {dtype = "int32", device = dev}), nil, {dtype = "int32"})
      end)
      it("negative ranges", function()
        local _, _, lo, hi = stats(np.random.randint(-2, 0, {1000}, D))
        assert.equal(-2, lo)
        assert.equal(-1, hi)
      end)
    end)

    describe("shuffle", function()
      it("permutes the rows in place", function()
        local x = np.arange(20, D):reshape({10, 2})
        np.random.shuffle(x)
        local t = x:totable()
        local seen = {}
        local moved = false
        for k = 1, 10 do
          local r = t[k]
          assert.equal(r[1] + 1, r[2])            -- rows stay whole
          assert.equal(0, r[1] % 2)
          assert.is_nil(seen[r[1]])
          seen[r[1]] = true
          if r[1] ~= 2 * (k - 1) then moved = true end
        end
        assert.is_true(moved, "10 rows came back in their order (chance 1/3628800)")
      end)
      it("of a 1-d array keeps the multiset", function()
        local x = np.arange(50, D)
        np.random.shuffle(x)
        H.check(x:sum(), 1225)
        local mean, var = stats(x)
        assert.equal(24.5, mean)
      end)
    end)

    describe("seed", function()
      it("makes draws reproducible", function()
        np.random.seed(42)
        local a = np.random.uniform(0, 1, {100}, D):totable()
        local b = np.random.normal(0, 1, {7}, D):totable()
        local c = np.random.randint(0, 1000, {7}, D):totable()
        local p = np.arange(10, D); np.random.shuffle(p)
        np.random.seed(42)
        assert.same(a, np.random.uniform(0, 1, {100}, D):totable())
        assert.same(b, np.random.normal(0, 1, {7}, D):totable())
        assert.same(c, np.random.randint(0, 1000, {7}, D):totable())
        local q = np.arange(10, D); np.random.shuffle(q)
        assert.same(p:totable(), q:totable())
      end)
      it("different seeds and successive draws differ", function()
        np.random.seed(1)
        local a = np.random.uniform(0, 1, {16}, D):totable()
        local a2 = np.random.uniform(0, 1, {16}, D):totable()
        np.random.seed(2)
        local b = np.random.uniform(0, 1, {16}, D):totable()
        assert.are_not.same(a, b)
        assert.are_not.same(a, a2)
      end)
      it("npx.seed is the same function", function()
        npx.seed(7)
        local a = np.random.uniform(0, 1, {5}, D):totable()
        np.random.seed(7)
        assert.same(a, np.random.uniform(0, 1, {5}, D):totable())
      end)
      it("rejects a non-number", function()
        H.assert_error(function() np.random.seed("x") end, {"seed"})
        H.assert_error(function() np.random.seed(0 / 0) end, {"seed must be an integer, got nan"})
        H.assert_error(function() np.random.seed(1.5) end, {"seed must be an integer, got 1.5"})
      end)
    end)

    describe("errors", function()
      it("integer dtypes for uniform/normal and negative sizes", function()
        H.assert_error(function() return np.random.uniform(0, 1, {2}, {dtype = "int32", device = dev}) end,
                       {"random_uniform", "int32"})
        H.assert_error(function() return np.random.normal(0, 1, {-2}, D) end, {"negative"})
      end)
    end)
  end)
end
