-- options_spec: the tables of named options of np, np.random and npx
-- functions: a misspelt or unsupported key is an error naming the function
-- and the key, at the caller's line (np.sum(x, {axes = 0}) must not sum
-- everything), and every key a function reads still works. Also np.clip of
-- a bool array, which promotes as bool + bound would.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx

-- fn raises an error with every string of parts, reported at this file's line
local function fails(fn, parts)
  local msg = H.assert_error(fn, parts)
  assert.truthy(msg:find("options_spec.lua:", 1, true), "not at the caller's line: " .. msg)
end

local function x23() return np.arange(6):reshape({2, 3}) end -- {{0, 1, 2}, {3, 4, 5}}

describe("np reductions", function()
  it("reject a misspelt option, naming the function and the key", function()
    local x = x23()
    fails(function() local _ = np.sum(x, {axes = 0}) end,
          {"sum: unknown option 'axes' (known: axis, keepdims, dtype); did you mean 'axis'?"})
    local msg = H.assert_error(function() local _ = np.sum(x, {zzz = 0}) end, {"sum: unknown option 'zzz'"})
    assert.is_nil(msg:find("did you mean", 1, true), "a suggestion for a name close to none: " .. msg)
    fails(function() local _ = np.mean(x, {axis = 1, keepdim = true}) end, {"mean", "'keepdim'"})
    fails(function() local _ = np.max(x, 0, {keepdim = true}) end, {"max", "'keepdim'"})
    fails(function() local _ = np.min(x, {out = x}) end, {"min", "'out'"})
    fails(function() local _ = np.prod(x, {initial = 1}) end, {"prod", "'initial'"})
    fails(function() local _ = x:sum({axes = 0}) end, {"sum", "'axes'"})
    fails(function() local _ = np.argmax(x, {axes = 1}) end, {"argmax", "'axes'"})
    fails(function() local _ = np.argmin(x, {dtype = "int32"}) end, {"argmin", "'dtype'"})
    fails(function() local _ = np.sum(x, 0, 5) end, {"sum", "options must be a table", "5"})
    fails(function() local _ = np.sum(x, {0, keepdims = true}) end, {"sum", "list of axes has a key 'keepdims'"})
    fails(function() local _ = np.squeeze(np.ones({1, 3}), {0, axs = 0}) end, {"squeeze", "key 'axs'"})
  end)
  it("take axis, keepdims and dtype", function()
    local x = x23()
    H.check(np.sum(x, {axis = 0}), {3, 5, 7})
    H.check(np.sum(x, 1, {keepdims = true}), {{3}, {12}}, {shape = {2, 1}})
    H.check(np.sum(x, {dtype = "float64"}), 15, {dtype = "float64"})
    H.check(np.mean(x, {axis = 1, keepdims = true}), {{1}, {4}}, {shape = {2, 1}})
    H.check(np.max(x, {axis = 0}), {3, 4, 5})
    H.check(np.min(x, {axis = 1}), {0, 3})
    H.check(np.prod(x, {axis = 1}), {0, 60})
    H.check(x:sum({axis = 1}), {3, 12})
    H.assert_equal(np.argmax(x, {axis = 1}), {2, 2})
    H.assert_equal(np.argmin(x, {axis = 0, keepdims = true}), {{0, 0, 0}})
  end)
end)

describe("np shape functions", function()
  it("reject a misspelt option", function()
    local x = x23()
    fails(function() local _ = np.take(x, np.array({0}), nil, {axs = 1}) end,
          {"take: unknown option 'axs'", "axis, mode"})
    fails(function() local _ = np.concatenate({x, x}, {axes = 1}) end, {"concatenate", "'axes'", "axis"})
    fails(function() local _ = np.stack({x, x}, {axes = 1}) end, {"stack", "'axes'"})
    fails(function() local _ = np.split(x, 2, {axes = 1}) end, {"split", "'axes'"})
    fails(function() local _ = np.squeeze(np.ones({1, 3}), {axes = 0}) end, {"squeeze", "'axes'"})
  end)
  it("take their options", function()
    local x = x23()
    H.check(np.take(x, np.array({0}), nil, {axis = 1}), {{0}, {3}})
    H.check(np.take(x, {7}, {mode = "wrap"}), {1})
    H.check(np.take(x, {2}, nil, {axis = 1, mode = "clip"}), {{2}, {5}})
    H.assert_shape(np.concatenate({x, x}, {axis = 1}), {2, 6})
    H.assert_shape(np.stack({x, x}, {axis = 1}), {2, 2, 3})
    local parts = np.split(x, 3, {axis = 1})
    assert.equal(3, #parts)
    H.check(parts[2], {{1}, {4}})
    H.assert_shape(np.squeeze(np.ones({1, 3, 1}), {axis = 0}), {3, 1})
  end)
end)

describe("np creation from an array and identity", function()
  it("reject a misspelt option", function()
    local x = x23()
    fails(function() local _ = np.zeros_like(x, {dtyp = "int32"}) end, {"zeros_like: unknown option 'dtyp'",
                                                                     "dtype, device, ctx"})
    fails(function() local _ = np.ones_like(x, {devcie = npx.cpu(1)}) end, {"ones_like", "'devcie'"})
    fails(function() local _ = np.empty_like(x, {order = "C"}) end, {"empty_like", "'order'"})
    fails(function() local _ = np.full_like(x, 2, {dtyp = "int32"}) end, {"full_like", "'dtyp'"})
    fails(function() local _ = np.identity(2, {k = 1}) end, {"identity", "'k'"})
  end)
  it("take dtype, device and ctx", function()
    local x = x23()
    local dev = npx.cpu(1)
    H.check(np.zeros_like(x, {dtype = "int32", device = dev}), {{0, 0, 0}, {0, 0, 0}},
            {dtype = "int32", device = dev})
    H.check(np.ones_like(x, {ctx = dev}), {{1, 1, 1}, {1, 1, 1}}, {dtype = "float32", device = dev})
    H.check(np.empty_like(x, {dtype = "float64", ctx = dev}), nil, {shape = {2, 3}, dtype = "float64", device = dev})
    H.check(np.full_like(x, 7, {dtype = "int64", ctx = dev}), {{7, 7, 7}, {7, 7, 7}}, {dtype = "int64", device = dev})
    H.check(np.empty({2}, {ctx = dev}), nil, {device = dev})
    H.check(np.identity(2, {dtype = "int32", ctx = dev}), {{1, 0}, {0, 1}}, {dtype = "int32", device = dev})
  end)
end)

describe("np.random", function()
  it("rejects a misspelt option", function()
    fails(function() local _ = np.random.uniform(0, 1, {2}, {dtyp = "float64"}) end, {"random.uniform", "'dtyp'"})
    fails(function() local _ = np.random.normal{loc = 0, sigma = 2, size = {2}} end, {"random.normal", "'sigma'"})
    fails(function() local _ = np.random.randint(0, 5, {2}, {shape = {2}}) end, {"random.randint", "'shape'"})
  end)
  it("takes its options", function()
    local u = np.random.uniform{low = 2, high = 3, size = {50}, dtype = "float64", device = npx.cpu(1)}
    H.check(u, nil, {shape = {50}, dtype = "float64", device = npx.cpu(1)})
    assert.truthy(np.min(u):item() >= 2 and np.max(u):item() <= 3)
    H.check(np.random.normal{loc = 1, scale = 0, size = {3}}, {1, 1, 1})
    local r = np.random.randint{low = 4, high = 5, size = {3}, ctx = npx.cpu(0), dtype = "int32"}
    H.check(r, {4, 4, 4}, {dtype = "int32"})
  end)
end)

describe("np.clip of a bool array", function()
  for _, dev in ipairs(H.devices()) do
    it("promotes as bool + bound would, on " .. tostring(dev), function()
      local b = np.array({true, false, true}, {device = dev})
      H.check(np.clip(b, 0, 0.5), {0.5, 0, 0.5}, {dtype = "float32", device = dev})
      H.check(np.clip(b, nil, 0.5), {0.5, 0, 0.5}, {dtype = "float32"})
      H.check(np.clip(b, 2, 3), {2, 2, 2}, {dtype = "int64"})
      H.check(np.clip(b, 0, 1), {1, 0, 1}, {dtype = "int64"})
    end)
  end
end)

describe("npx.convolution", function()
  local data, w, bias = np.ones({1, 1, 4, 4}), np.ones({2, 1, 3, 3}), np.ones({2})
  it("rejects a misspelt option and a num_filter that disagrees with the weight", function()
    fails(function() local _ = npx.convolution(data, w, bias, {num_filters = 2}) end,
          {"convolution: unknown option 'num_filters'", "num_filter"})
    fails(function() local _ = npx.convolution(data, w, nil, {kernel = {3, 3}, num_filter = 5, no_bias = true}) end,
          {"convolution", "num_filter is 5", "2 filters", "(2,1,3,3)"})
  end)
  it("takes its options", function()
    local y = npx.convolution(data, w, bias, {kernel = {3, 3}, stride = 1, dilate = 1, pad = 0, num_filter = 2,
                                              num_group = 1, no_bias = false, layout = "NCHW", act_type = "relu"})
    H.check(y, {{{{10, 10}, {10, 10}}, {{10, 10}, {10, 10}}}})
    H.check(npx.convolution(data, w, bias, {no_bias = true, pad = 1, stride = 2}), nil, {shape = {1, 2, 2, 2}})
    H.check(npx.convolution(data, w, {num_filter = 2}), nil, {shape = {1, 2, 2, 2}})
  end)
end)

describe("npx.convolution_maxpool", function()
  local data, w = np.ones({1, 1, 4, 4}), np.ones({1, 1, 3, 3})
  it("rejects a misspelt option in either table", function()
    fails(function() local _ = npx.convolution_maxpool(data, w, nil, {stides = 1}, {kernel = 2}) end,
          {"convolution_maxpool: unknown option 'stides'"})
    fails(function() local _ = npx.convolution_maxpool(data, w, nil, {}, {kernel = 2, strides = 2}) end,
          {"convolution_maxpool: unknown pooling option 'strides'", "stride"})
    fails(function() local _ = npx.convolution_maxpool(data, w, nil, {}, {kernel = 2, layout = "NHWC"}) end,
          {"convolution_maxpool", "layout", "NHWC"})
  end)
  it("takes the options of convolution and pooling", function()
    local y = npx.convolution_maxpool(data, w, nil, {kernel = {3, 3}, num_filter = 1, no_bias = true},
                                      {kernel = 2, stride = 2, pad = 0, pool_type = "max", global_pool = false,
                                       pooling_convention = "valid", count_include_pad = true, layout = "NCHW"})
    H.check(y, {{{{9}}}})
  end)
end)

describe("npx.pooling", function()
  local x = np.arange(16):reshape({1, 1, 4, 4})
  it("rejects a misspelt option", function()
    fails(function() local _ = npx.pooling(x, {kernel = {2, 2}, pool_typ = "avg"}) end,
          {"pooling: unknown option 'pool_typ'", "pool_type"})
  end)
  it("takes its options", function()
    H.check(npx.pooling(x, {kernel = {2, 2}, pool_type = "avg"}), {{{{2.5, 4.5}, {10.5, 12.5}}}})
    H.check(npx.pooling(x, {kernel = 2, stride = 2, pad = 1, pool_type = "avg", pooling_convention = "valid",
                            count_include_pad = false, layout = "NCHW"}),
            {{{{0, 1.5, 3}, {6, 7.5, 9}, {12, 13.5, 15}}}})
    H.check(npx.pooling(x, {pool_type = "max", global_pool = true}), {{{{15}}}})
  end)
end)

describe("npx.batch_norm", function()
  local x = np.ones({2, 3})
  local gamma, beta, mean, var = np.full({3}, 2), np.zeros({3}), np.zeros({3}), np.ones({3})
  it("rejects a misspelt option", function()
    fails(function() local _ = npx.batch_norm(x, gamma, beta, mean, var, {epsilon = 1e-5}) end,
          {"batch_norm: unknown option 'epsilon'", "eps"})
  end)
  it("takes its options", function()
    local y, m, v = npx.batch_norm(x, gamma, beta, mean, var, {eps = 1e-5, momentum = 0.9, fix_gamma = false,
                                   use_global_stats = true, axis = 1, output_mean_var = true})
    H.check(y, {{2, 2, 2}, {2, 2, 2}}, {tol = 1e-4})
    assert.truthy(m ~= nil and v ~= nil)
    H.check(npx.batch_norm(x, gamma, beta, mean, var, {eps = 0}), {{1, 1, 1}, {1, 1, 1}})
  end)
end)

describe("npx.fully_connected", function()
  local x, w, b = np.ones({2, 3}), np.ones({4, 3}), np.ones({4})
  it("rejects a misspelt option", function()
    fails(function() local _ = npx.fully_connected(x, w, b, {num_hiden = 4}) end,
          {"fully_connected: unknown option 'num_hiden'", "num_hidden"})
  end)
  it("takes its options", function()
    H.check(npx.fully_connected(x, w, b, {num_hidden = 4, no_bias = false, flatten = true}),
            {{4, 4, 4, 4}, {4, 4, 4, 4}})
    H.check(npx.fully_connected(x, w, b, {no_bias = true, flatten = false}), {{3, 3, 3, 3}, {3, 3, 3, 3}})
    H.check(npx.fully_connected(x, w, {num_hidden = 4}), {{3, 3, 3, 3}, {3, 3, 3, 3}})
  end)
end)

describe("npx activations", function()
  local x = np.array({-1, 0, 2})
  it("reject a misspelt option", function()
    fails(function() local _ = npx.dropout(x, {rate = 0.5}) end, {"dropout: unknown option 'rate'", "p, mode, axes"})
    fails(function() local _ = npx.activation(x, {act = "sigmoid"}) end,
          {"activation: unknown option 'act'", "act_type"})
    fails(function() local _ = npx.leaky_relu(x, {alpha = 0.1}) end, {"leaky_relu: unknown option 'alpha'", "slope"})
  end)
  it("take their options", function()
    H.check(npx.dropout(x, {p = 0.5, mode = "training", axes = {}}), {-1, 0, 2})
    H.check(npx.dropout(x, {p = 0, mode = "always"}), {-1, 0, 2})
    H.check(npx.activation(x, {act_type = "sigmoid"}), {1 / (1 + math.exp(1)), 0.5, 1 / (1 + math.exp(-2))})
    H.check(npx.activation(x, "relu"), {0, 0, 2})
    H.check(npx.leaky_relu(x, {act_type = "leaky", slope = 0.1}), {-0.1, 0, 2})
  end)
end)

describe("npx.softmax and log_softmax", function()
  local x = np.ones({2, 3})
  it("reject a misspelt option and use_length", function()
    for _, name in ipairs({"softmax", "log_softmax"}) do
      fails(function() local _ = npx[name](x, {length = np.array({1, 2}), use_length = true}) end,
            {name .. ": use_length", "not supported"})
      fails(function() local _ = npx[name](x, {length = np.array({1, 2})}) end, {name .. ": unknown option 'length'"})
      fails(function() local _ = npx[name](x, {axes = 0}) end, {name .. ": unknown option 'axes'", "axis"})
    end
  end)
  it("take axis, temperature and use_length = false", function()
    H.check(npx.softmax(x, {axis = 1, temperature = 2, use_length = false}),
            {{1 / 3, 1 / 3, 1 / 3}, {1 / 3, 1 / 3, 1 / 3}})
    H.check(npx.softmax(x, {axis = 0}), {{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}})
    H.check(npx.log_softmax(x, {axis = 0, temperature = 1}), {{math.log(0.5), math.log(0.5), math.log(0.5)},
                                                             {math.log(0.5), math.log(0.5), math.log(0.5)}})
    H.check(npx.softmax(x, 0), {{0.5, 0.5, 0.5}, {0.5, 0.5, 0.5}})
  end)
end)

describe("npx.pick", function()
  local x = x23()
  it("rejects a misspelt option", function()
    fails(function() local _ = npx.pick(x, {2, 0}, {keepdim = true}) end,
          {"pick: unknown option 'keepdim'", "keepdims"})
  end)
  it("takes its options", function()
    H.check(npx.pick(x, {2, 0}, {axis = 1, mode = "wrap", keepdims = true}), {{2}, {3}}, {shape = {2, 1}})
    H.check(npx.pick(x, {5, 0}, {axis = -1, mode = "clip"}), {2, 3})
  end)
end)
