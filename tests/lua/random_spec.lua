-- random_spec: np.random's distributions and npx.random.bernoulli: shapes,
-- dtypes, ranges, moments and chi-square checks on large samples (each
-- from a fixed seed), reproducibility under np.random.seed, bad input.
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
      it("any integer dtype whose range holds [low, high)", function()
        for _, c in ipairs({{"int8", -128, 128}, {"int16", -32768, 32768}, {"uint16", 0, 65536}, {"uint8", 0, 256}}) do
          local x = np.random.randint(c[2], c[3], {4000}, {dtype = c[1], device = dev})
          H.check(x, nil, {dtype = c[1]})
          local mean, _, lo, hi = stats(x)
          assert.is_true(lo >= c[2] and hi < c[3], ("%s: range [%g, %g]"):format(c[1], lo, hi))
          local mid, w = (c[2] + c[3] - 1) / 2, c[3] - c[2]
          assert.is_true(math.abs(mean - mid) < 0.03 * w, ("%s: mean %g"):format(c[1], mean))
        end
        H.assert_error(function() return np.random.randint(0, 200, {2}, {dtype = "int8", device = dev}) end,
                       {"random_randint", "[0, 200) is out of range for int8"})
        H.assert_error(function() return np.random.randint(0, 2, {2}, {dtype = "bool", device = dev}) end,
                       {"random_randint", "dtype bool is not supported", "int8"})
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

    -- Pearson's chi-square of the counts of values 0..k-1 in t against
    -- probabilities p; with k - 1 <= 9 degrees of freedom, 30 is far out
    -- in the tail (p < 0.001), and the draws come from fixed seeds.
    local function chi2(t, p)
      local count, n = {}, #t
      for j = 1, #p do count[j] = 0 end
      for k = 1, n do count[t[k] + 1] = count[t[k] + 1] + 1 end
      local x = 0
      for j = 1, #p do
        if p[j] > 0 then x = x + (count[j] - n * p[j]) ^ 2 / (n * p[j])
        else assert.equal(0, count[j], "a value of probability 0 was drawn") end
      end
      return x, count
    end

    describe("randn and rand", function()
      it("have the shape asked, float32, and the moments", function()
        np.random.seed(11)
        local x = np.random.randn(200, 100, D)
        H.check(x, nil, {shape = {200, 100}, dtype = "float32", device = dev})
        local mean, var = stats(x)
        assert.is_true(math.abs(mean) < 0.03 and math.abs(var - 1) < 0.05, ("mean %g var %g"):format(mean, var))
        H.check(np.random.randn(D), nil, {shape = {}})
        H.check(np.random.randn(3, {dtype = "float64", device = dev}), nil, {shape = {3}, dtype = "float64"})
        local _, _, lo, hi = stats(np.random.rand(1000, D))
        assert.is_true(lo >= 0 and hi < 1)
      end)
    end)

    describe("permutation", function()
      it("of n is 0..n-1 in a random order, int64", function()
        np.random.seed(3)
        local x = np.random.permutation(50, D)
        H.check(x, nil, {shape = {50}, dtype = "int64", device = dev})
        local t, seen = x:totable(), {}
        for k = 1, 50 do seen[t[k]] = true end
        for v = 0, 49 do assert.is_true(seen[v], "missing " .. v) end
      end)
      it("of an array shuffles a copy of its rows", function()
        local x = np.arange(12, D):reshape({6, 2})
        local y = np.random.permutation(x)
        H.check(x, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}})
        local t = y:totable()
        for k = 1, 6 do assert.equal(t[k][1] + 1, t[k][2]) end
      end)
    end)

    describe("choice", function()
      it("with replacement, uniform: values of 0..n-1 in equal shares", function()
        np.random.seed(21)
        local x = np.random.choice(5, {20000}, D)
        H.check(x, nil, {shape = {20000}, dtype = "int64", device = dev})
        local c2 = chi2(x:totable(), {0.2, 0.2, 0.2, 0.2, 0.2})
        assert.is_true(c2 < 30, "chi-square " .. c2)
        H.check(np.random.choice(5, nil, D), nil, {shape = {}})
        H.check(np.random.choice(5, {2, 3}, D), nil, {shape = {2, 3}})
      end)
      it("with probabilities p", function()
        np.random.seed(22)
        local p = {0.1, 0.2, 0, 0.3, 0.4}
        local c2 = chi2(np.random.choice(5, {20000}, {p = p, device = dev}):totable(), p)
        assert.is_true(c2 < 30, "chi-square " .. c2)
        local pa = np.array({0.5, 0.25, 0.25}, {device = dev})
        c2 = chi2(np.random.choice(3, 20000, true, pa):totable(), {0.5, 0.25, 0.25})
        assert.is_true(c2 < 30, "chi-square " .. c2)
      end)
      it("without replacement gives distinct values, with and without p", function()
        np.random.seed(23)
        for _, p in ipairs({false, {0.05, 0.05, 0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.05, 0.05}}) do
          local x = np.random.choice(10, {2, 5}, false, p or nil, D)
          H.check(x, nil, {shape = {2, 5}, dtype = "int64", device = dev})
          local seen = {}
          for _, row in ipairs(x:totable()) do
            for _, v in ipairs(row) do
              assert.is_nil(seen[v], "drawn twice: " .. v)
              seen[v] = true
            end
          end
        end
        -- the first draw without replacement follows p
        local p = {0.7, 0.2, 0.1}
        local first = {}
        for k = 1, 300 do first[k] = np.random.choice(3, 2, false, p, D):totable()[1] end
        local _, count = chi2(first, p)
        assert.is_true(count[1] > 170 and count[3] < 60, table.concat(count, " "))
      end)
      it("from an array takes its values", function()
        np.random.seed(24)
        local a = np.array({1.5, 2.5, 3.5}, {device = dev})
        local x = np.random.choice(a, 100)
        H.check(x, nil, {shape = {100}, dtype = "float32", device = dev})
        for _, v in ipairs(x:totable()) do assert.is_true(v == 1.5 or v == 2.5 or v == 3.5) end
        local y = np.random.choice(a, 3, false):totable()
        table.sort(y)
        assert.same({1.5, 2.5, 3.5}, y)
      end)
    end)

    describe("gamma, exponential, beta, logistic", function()
      it("gamma has mean k theta and variance k theta^2, for shape above and below 1", function()
        np.random.seed(31)
        for _, c in ipairs({{2.5, 2}, {0.5, 1}, {9, 0.5}}) do
          local k, th = c[1], c[2]
          local x = np.random.gamma(k, th, {40000}, D)
          H.check(x, nil, {dtype = "float32", device = dev})
          local mean, var, lo = stats(x)
          assert.is_true(lo >= 0)
          assert.is_true(math.abs(mean - k * th) < 0.03 * k * th + 0.01, ("shape %g mean %g"):format(k, mean))
          assert.is_true(math.abs(var - k * th * th) < 0.06 * k * th * th, ("shape %g var %g"):format(k, var))
        end
        H.check(np.random.gamma(2, {device = dev}), nil, {shape = {}})
        H.check(np.random.gamma({shape = 1, size = {3}, dtype = "float64", device = dev}), nil, {dtype = "float64"})
      end)
      it("exponential has mean scale and variance scale^2", function()
        np.random.seed(32)
        local x = np.random.exponential(2, {40000}, D)
        H.check(x, nil, {dtype = "float32", device = dev})
        local mean, var, lo = stats(x)
        assert.is_true(lo >= 0 and math.abs(mean - 2) < 0.05 and math.abs(var - 4) < 0.25, ("mean %g var %g"):format(mean, var))
      end)
      it("beta has mean a / (a + b)", function()
        np.random.seed(33)
        local mean, var, lo, hi = stats(np.random.beta(2, 3, {40000}, D))
        assert.is_true(lo >= 0 and hi <= 1 and math.abs(mean - 0.4) < 0.01 and math.abs(var - 0.04) < 0.004,
                       ("mean %g var %g"):format(mean, var))
      end)
      it("logistic has mean loc and variance scale^2 pi^2 / 3", function()
        np.random.seed(34)
        local mean, var = stats(np.random.logistic(1, 0.5, {40000}, D))
        assert.is_true(math.abs(mean - 1) < 0.03 and math.abs(var - 0.25 * math.pi ^ 2 / 3) < 0.05,
                       ("mean %g var %g"):format(mean, var))
      end)
    end)

    describe("multinomial", function()
      it("counts n draws per row, int64, with the probabilities' shares", function()
        np.random.seed(41)
        local p = {0.2, 0.3, 0.5}
        local x = np.random.multinomial(10, p, {4000}, D)
        H.check(x, nil, {shape = {4000, 3}, dtype = "int64", device = dev})
        local t, tot = x:totable(), {0, 0, 0}
        for _, row in ipairs(t) do
          assert.equal(10, row[1] + row[2] + row[3])
          for j = 1, 3 do tot[j] = tot[j] + row[j] end
        end
        for j = 1, 3 do assert.is_true(math.abs(tot[j] / 40000 - p[j]) < 0.01, "share " .. tot[j] / 40000) end
        H.check(np.random.multinomial(7, np.array({0.5, 0.5}, {device = dev})), nil, {shape = {2}})
        H.check(np.random.multinomial(0, {0.5, 0.5}, 2, D), {{0, 0}, {0, 0}})
      end)
    end)

    describe("bernoulli", function()
      it("is 1 with probability prob, or sigmoid(logit)", function()
        np.random.seed(51)
        local x = npx.random.bernoulli(0.3, {size = {20000}, device = dev})
        H.check(x, nil, {shape = {20000}, dtype = "float32", device = dev})
        local mean, _, lo, hi = stats(x)
        assert.is_true(lo == 0 and hi == 1 and math.abs(mean - 0.3) < 0.015, "mean " .. mean)
        mean = stats(npx.random.bernoulli({logit = 0, size = {20000}, device = dev}))
        assert.is_true(math.abs(mean - 0.5) < 0.015, "mean " .. mean)
        local y = npx.random.bernoulli(np.array({0, 1, 0, 1}, {device = dev}), {dtype = "int32"})
        H.check(y, {0, 1, 0, 1}, {dtype = "int32"})
        H.check(npx.random.bernoulli({prob = 0.5, device = dev}), nil, {shape = {}})
      end)
    end)

    describe("the new draws under a seed", function()
      it("are reproducible", function()
        local function draw()
          return {np.random.randn(5, D):totable(), np.random.choice(9, 5, D):totable(),
                  np.random.choice(9, 5, {p = {0.1, 0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1}, device = dev}):totable(),
                  np.random.choice(9, 5, false, nil, D):totable(),
                  np.random.permutation(9, D):totable(), np.random.gamma(0.7, 1, 5, D):totable(),
                  np.random.exponential(1, 5, D):totable(), np.random.multinomial(5, {0.5, 0.5}, 3, D):totable(),
                  npx.random.bernoulli(0.5, {size = 5, device = dev}):totable()}
        end
        np.random.seed(99)
        local a = draw()
        np.random.seed(99)
        assert.same(a, draw())
      end)
    end)

    describe("errors", function()
      it("of the distributions name the function and the value", function()
        H.assert_error(function() return np.random.exponential(-1, 3, D) end, {"random.exponential", "scale -1"})
        H.assert_error(function() return np.random.gamma(-1, 1, 3, D) end, {"random_gamma", "shape -1"})
        H.assert_error(function() return np.random.gamma(2, -1, 3, D) end, {"random_gamma", "scale -1"})
        H.assert_error(function() return np.random.gamma(0 / 0, 1, 3, D) end, {"random.gamma", "NaN"})
        H.assert_error(function() return np.random.gamma(np.ones({2}), 1, 3) end,
                       {"random.gamma", "shape must be a number", "np.random.gamma(shape, 1, size)"})
        H.assert_error(function() return np.random.gamma(2, 1, 3, {dtype = "int32", device = dev}) end,
                       {"random_gamma", "int32"})
        H.assert_error(function() return np.random.beta(0, 1, 3, D) end, {"random.beta", "positive"})
        H.assert_error(function() return np.random.logistic(0, -2, 3, D) end, {"random.logistic", "scale -2"})
        H.assert_error(function() return np.random.choice(5, 2, {p = {0.5, 0.1, 0.1, 0.1, 0.1}, device = dev}) end,
                       {"random.choice", "sum to 0.9"})
        H.assert_error(function() return np.random.choice(5, 2, {p = {0.5, 0.5}, device = dev}) end,
                       {"random.choice", "p has 2 probabilities but a has 5"})
        H.assert_error(function() return np.random.choice(5, 2, {p = {1.5, -0.5, 0, 0, 0}, device = dev}) end,
                       {"random.choice", "p[0] = 1.5"})
        H.assert_error(function() return np.random.choice(3, 5, false, nil, D) end,
                       {"random.choice", "larger sample (5) than the population (3)"})
        H.assert_error(function() return np.random.choice(3, 3, false, {0.5, 0.5, 0}, D) end,
                       {"random.choice", "2 non-zero"})
        H.assert_error(function() return np.random.choice(0, 3, D) end, {"random.choice", "got 0"})
        H.assert_error(function() return np.random.choice(3, 2, {replace = "no", device = dev}) end,
                       {"random.choice", "replace must be true or false"})
        H.assert_error(function() return np.random.choice(3, -2, D) end, {"random.choice", "negative"})
        H.assert_error(function() return np.random.multinomial(5, {0.6, 0.6, 0.1}, nil, D) end,
                       {"random.multinomial", "more than 1"})
        H.assert_error(function() return np.random.multinomial(-1, {0.5, 0.5}, nil, D) end,
                       {"random.multinomial", "n must be an integer >= 0, got -1"})
        H.assert_error(function() return npx.random.bernoulli(1.5, {size = 2, device = dev}) end, {"random.bernoulli", "1.5"})
        H.assert_error(function() return npx.random.bernoulli(np.array({0.5, 2}, {device = dev})) end,
                       {"random.bernoulli", "from 0.5 to 2"})
        H.assert_error(function() return npx.random.bernoulli({prob = 0.5, logit = 1}) end,
                       {"random.bernoulli", "exactly one of prob and logit"})
        H.assert_error(function() return np.random.randn(2, -1) end, {"random.randn", "dimension 2"})
        H.assert_error(function() return np.random.permutation(1.5) end, {"random.permutation"})
        -- the runtime stays usable
        H.check(np.random.gamma(1, 1, 2, D), nil, {shape = {2}})
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
