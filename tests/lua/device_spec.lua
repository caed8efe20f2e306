-- device_spec: devices as values, the GPU count, the default device and
-- npx.with_device scoping (restored after a normal return and after an error).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx

describe("devices", function()
  it("num_gpus is 0 on a machine without an NVIDIA device", function()
    local n = npx.num_gpus()
    assert.equal("number", type(n))
    assert.is_true(n >= 0)
    local expect = tonumber(os.getenv("LUON_EXPECT_GPUS") or "")
    local f = io.open("/dev/nvidiactl", "rb")
    if f then f:close() end
    if expect then
      assert.equal(expect, n)
    elseif not f and not os.getenv("LUON_VIRTUAL_GPUS") then
      assert.equal(0, n)
    end
  end)
  it("are cached values that compare and print", function()
    assert.equal(npx.cpu(0), npx.cpu())
    assert.equal(npx.gpu(0), npx.gpu())
    assert.is_true(rawequal(npx.cpu(1), npx.cpu(1)))
    assert.is_true(npx.cpu(1) ~= npx.cpu(0))
    assert.is_true(npx.gpu(0) ~= npx.cpu(0))
    assert.equal("cpu(1)", tostring(npx.cpu(1)))
    assert.equal("gpu(2)", tostring(npx.gpu(2)))
    assert.equal("cpu", npx.cpu(1).device_type)
    assert.equal(1, npx.cpu(1).device_id)
    -- usable as table keys
    local t = {[npx.cpu(1)] = "one"}
    assert.equal("one", t[npx.cpu(1)])
  end)
  it("naming a GPU is fine, using a missing one is an error", function()
    local g = npx.gpu(5)
    assert.equal("gpu(5)", tostring(g))
    if npx.num_gpus() <= 5 then
      H.assert_error(function() return np.ones({2}, {device = g}) end, {"gpu(5) does not exist"})
    end
  end)
  it("bad device ids are errors", function()
    H.assert_error(function() return npx.cpu(-1) end, {"cpu(-1)", "an integer from 0 to 2^31-1"})
    H.assert_error(function() return npx.gpu(2^40) end, {"gpu(1099511627776)", "an integer from 0 to 2^31-1"})
    H.assert_error(function() return npx.gpu(1.5) end, {"gpu(1.5)"})
  end)
  it("a device can be given as a string", function()
    H.check(np.ones({1}, {device = "cpu(1)"}), {1}, {device = npx.cpu(1)})
    H.check(np.ones({1}, {device = "cpu"}), {1}, {device = npx.cpu(0)})
    H.check(np.ones({1}, {ctx = npx.cpu(1)}), {1}, {device = npx.cpu(1)})
  end)
  it("memory_stats of every device has its fields", function()
    for _, dev in ipairs(H.devices()) do
      local s = npx.memory_stats(dev)
      for _, k in ipairs({"in_use", "cached", "peak", "allocs", "cache_hits"}) do
        assert.equal("number", type(s[k]), k)
      end
    end
  end)
  it("threads can be set and read", function()
    local n = npx.num_threads()
    assert.is_true(n >= 1)
    npx.set_num_threads(2)
    assert.equal(2, npx.num_threads())
    H.check(np.arange(100000, {dtype = "float64"}):sum(), 4999950000, {tol = 0})
    npx.set_num_threads(n)
    assert.equal(n, npx.num_threads())
  end)
  it("waitall returns", function()
    npx.waitall()
  end)
end)

describe("the default device", function()
  it("is cpu(0) to begin with", function()
    assert.equal(npx.cpu(0), npx.current_device())
    assert.equal(npx.cpu(0), np.ones({2}).device)
  end)

  for _, dev in ipairs(H.devices()) do
    it("with_device(" .. tostring(dev) .. ") scopes creation", function()
      local before = npx.current_device()
      local x, inside = npx.with_device(dev, function()
        return np.ones({2, 2}), npx.current_device()
      end)
      assert.equal(dev, inside)
      H.check(x, {{1, 1}, {1, 1}}, {device = dev})
      assert.equal(before, npx.current_device())
      assert.equal(npx.cpu(0), np.zeros({1}).device)
    end)
  end

  it("with_device puts every creation function on the device", function()
    local d = npx.cpu(1)
    npx.with_device(d, function()
      for name, x in pairs({
        zeros = np.zeros({2}), ones = np.ones({2}), full = np.full({2}, 3), empty = np.empty({2}),
        arange = np.arange(3), linspace = np.linspace(0, 1, 3), eye = np.eye(2),
        array = np.array({1, 2}), uniform = np.random.uniform(0, 1, {2}),
        normal = np.random.normal(0, 1, {2}), randint = np.random.randint(0, 3, {2}),
      }) do
        assert.equal(d, x.device, name)
      end
      -- an explicit device still wins
      assert.equal(npx.cpu(0), np.ones({1}, {device = npx.cpu(0)}).device)
    end)
  end)

  it("is restored after an error inside, and the error comes through", function()
    local ok, err = pcall(npx.with_device, npx.cpu(1), function()
      assert.equal(npx.cpu(1), npx.current_device())
      error("boom inside")
    end)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("boom inside", 1, true))
    assert.equal(npx.cpu(0), npx.current_device())
    assert.equal(npx.cpu(0), np.ones({1}).device)
  end)

  it("nests", function()
    npx.with_device(npx.cpu(1), function()
      npx.with_device(npx.cpu(0), function()
        assert.equal(npx.cpu(0), np.ones({1}).device)
      end)
      assert.equal(npx.cpu(1), np.ones({1}).device)
    end)
    assert.equal(npx.cpu(0), npx.current_device())
  end)

  it("passes arguments and all results through", function()
    local a, b, c = npx.with_device(npx.cpu(1), function(p, q) return p + q, "two", nil end, 1, 2)
    assert.equal(3, a)
    assert.equal("two", b)
    assert.is_nil(c)
  end)

  it("refuses a missing device and a non-function", function()
    H.assert_error(function() npx.with_device(npx.gpu(7), function() end) end, {"with_device", "gpu(7)"})
    H.assert_error(function() npx.with_device(npx.cpu(1), 3) end, {"with_device", "function"})
    assert.equal(npx.cpu(0), npx.current_device())
  end)
end)

describe("ops run where their inputs live", function()
  for _, dev in ipairs(H.devices()) do
    it("on " .. tostring(dev), function()
      local x = np.ones({3}, {device = dev})
      local y = np.arange(3, {device = dev})
      for name, r in pairs({add = x + y, neg = -x, exp = np.exp(y), sum = y:sum(), rs = y:reshape({1, 3}),
                            mm = np.matmul(x, y), cmp = x:less(y), t = y:take({0}),
                            cat = np.concatenate({x, y}), copy = x:copy(), cast = x:astype("int32")}) do
        assert.equal(dev, r.device, name)
      end
    end)
  end
end)
