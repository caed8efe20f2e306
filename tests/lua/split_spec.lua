-- gluon.utils.split_data / split_and_load against MXNet's rules: one device
-- never splits; several split with divmod sizes; even_split errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local utils = require("luon.gluon.utils")

describe("gluon.utils", function()
  it("split_data uses divmod sizes like numpy.array_split", function()
    local parts = utils.split_data(np.arange(10), 3, 0, false)
    assert.are.same({{0, 1, 2, 3}, {4, 5, 6}, {7, 8, 9}},
                    {parts[1]:totable(), parts[2]:totable(), parts[3]:totable()})
    local small = utils.split_data(np.arange(3), 4, {even_split = false})
    assert.are.same({1, 1, 1, 0}, {small[1].size, small[2].size, small[3].size, small[4].size})
  end)

  it("splits along another batch axis", function()
    local parts = utils.split_data(np.ones({2, 6}), 2, {batch_axis = 1})
    assert.are.same({2, 3}, parts[1].shape)
  end)

  it("an uneven batch with even_split is an error naming the sizes and the option", function()
    local ok, msg = pcall(utils.split_and_load, np.ones({5, 2}), {npx.cpu(0), npx.cpu(1)})
    assert.is_false(ok)
    assert.truthy(msg:find("size 5", 1, true))
    assert.truthy(msg:find("2 devices", 1, true))
    assert.truthy(msg:find("even_split = false", 1, true))
    -- and nothing is half-done: the runtime keeps working
    assert.are.equal(10, np.ones({5, 2}):sum():item())
  end)

  it("split_and_load puts part i on devices[i]", function()
    local parts = utils.split_and_load(np.ones({5, 2}), {npx.cpu(0), npx.cpu(1)}, {even_split = false})
    assert.are.equal(2, #parts)
    assert.are.same({3, 2}, parts[1].shape)
    assert.are.same({2, 2}, parts[2].shape)
    assert.are.equal(npx.cpu(0), parts[1].device)
    assert.are.equal(npx.cpu(1), parts[2].device)
  end)

  it("more than 8 parts (past the dispatcher's 8 outputs)", function()
    local devs = {}
    for k = 0, 15 do devs[#devs + 1] = npx.cpu(k % 2) end
    local parts = utils.split_and_load(np.arange(32):reshape({16, 2}), devs)
    assert.are.equal(16, #parts)
    for k = 1, 16 do assert.are.same({{2 * k - 2, 2 * k - 1}}, parts[k]:totable()) end
    local pieces = np.split(np.arange(12), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
    assert.are.equal(11, #pieces)
    assert.are.same({10, 11}, pieces[11]:totable())
    assert.are.same({0}, pieces[1]:totable())
  end)

  it("clip_global_norm and split_data check their arguments", function()
    H.assert_error(function() utils.clip_global_norm("x", 1) end, {"clip_global_norm", "list of ndarrays", "'x'"})
    H.assert_error(function() utils.clip_global_norm({5}, 1) end, {"arrays[1] is not an ndarray"})
    H.assert_error(function() utils.clip_global_norm({np.ones({2})}, -1) end, {"max_norm must be a positive number"})
    H.assert_error(function() utils.split_data(np.ones({4}), 2, {batch_axis = "x"}) end, {"batch_axis", "'x'"})
  end)

  it("one device never splits and does not copy when already there", function()
    local x = np.ones({5, 2})
    local parts = utils.split_and_load(x, {npx.cpu(0)})
    assert.are.equal(1, #parts)
    assert.is_true(rawequal(x, parts[1]))
  end)

  it("non-array data becomes an array on the first device", function()
    local parts = utils.split_and_load({{1, 2}, {3, 4}}, {npx.cpu(1), npx.cpu(0)})
    assert.are.equal(npx.cpu(1), parts[1].device)
    assert.are.equal("float32", parts[1].dtype)
    assert.are.same({{3, 4}}, parts[2]:totable())
  end)
end)
