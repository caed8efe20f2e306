-- conv_layers_spec: gluon.nn's 1-d and 3-d convolutions, the transposed
-- convolutions and 1-d and 3-d pooling on every device: outputs and reprs
-- against MXNet 1.9.1's (tests/data/conv_golden.txt, made by
-- tests/data/gen_conv_golden.py), the transposed layers' gradients by finite
-- differences in float64, npx's 1-d/3-d spellings, and bad input.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local nn = luon.gluon.nn
local core = require("luon.core")

-- The golden cases: {name, args (a table), repr, input (shape), output (shape), values}
local function goldens()
  local cases, cur = {}, nil
  for l in io.lines(H.root .. "tests/data/conv_golden.txt") do
    local key, rest = l:match("^(%a+) (.*)$")
    if key == "case" then
      cur = {name = rest}
      cases[#cases + 1] = cur
    elseif key == "args" then
      cur.args = assert(loadstring("return " .. rest))()
    elseif key == "repr" then
      cur.repr = rest
    elseif key == "input" or key == "output" then
      local s = {}
      for v in rest:gmatch("%S+") do s[#s + 1] = tonumber(v) end
      cur[key] = s
    else
      local v = {}
      for x in l:gmatch("%S+") do v[#v + 1] = tonumber(x) end
      cur.values = v
    end
  end
  return cases
end

-- float32 array of `shape` from f(i) over the flat index i (0-based), as the generator makes it
local function fill(shape, f, dtype)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local t = {}
  for i = 0, n - 1 do t[i + 1] = f(i) end
  return np.array(t, {dtype = dtype or "float32"}):reshape(shape)
end
local function weight_f(i) return 0.5 * math.sin(0.37 * i + 0.3) end
local function bias_f(i) return 0.1 * math.cos(0.7 * i + 0.2) end
local function input_f(i) return math.sin(1.3 * i) end

local function flat(y) return np.reshape(y, {-1}):totable() end

for _, dev in ipairs(H.devices()) do
  describe("conv layers on " .. tostring(dev), function()
    it("match MXNet 1.9.1's outputs and reprs", function()
      for _, c in ipairs(goldens()) do
        local layer = nn[c.name](c.args)
        layer:initialize{device = dev}
        local x = fill(c.input, input_f):copyto(dev)
        layer(x)
        for name, p in pairs(layer:collect_params()) do
          p:set_data(fill(p.shape, name:match("weight$") and weight_f or bias_f))
        end
        local y = layer(x)
        local label = c.name .. " " .. c.repr
        assert(H.shape_eq(y, c.output), label .. ": shape " .. H.show(y.shape))
        local got = flat(y)
        for k, want in ipairs(c.values) do
          if math.abs(got[k] - want) > 1e-5 * (1 + math.abs(want)) then
            error(("%s: element %d is %.9g, MXNet gives %.9g"):format(label, k - 1, got[k], want), 0)
          end
        end
        assert.equal(c.repr, tostring(layer))
      end
    end)

    -- L = sum(y * R) against central differences, for the input, weight and
    -- bias (float64 on the CPU: perturbed in place)
    local function fd_check(layer, xshape)
      layer:initialize{device = dev}
      np.random.seed(7)
      local x = np.random.normal(0, 1, xshape, {dtype = "float64"}):copyto(dev)
      layer(x)
      local params = {}
      for _, p in pairs(layer:collect_params()) do
        p:set_data(np.random.normal(0, 1, p.shape, {dtype = "float64"}))
        params[#params + 1] = p
      end
      local R = np.random.normal(0, 1, layer(x).shape, {dtype = "float64"}):copyto(dev)
      local function loss() return (layer(x) * R):sum():item() end
      x:attach_grad()
      autograd.record(function() return (layer(x) * R):sum() end):backward()
      local arrays = {{x, x.grad}}
      for _, p in ipairs(params) do arrays[#arrays + 1] = {p:data(dev), p:grad(dev)} end
      for _, pair in ipairs(arrays) do
        local a, g = pair[1], flat(pair[2])
        local ptr = core.ffi.cast("double*", core.info_of(a).data)
        for j = 0, a.size - 1 do
          local v = ptr[j]
          ptr[j] = v + 1e-6
          local lp = loss()
          ptr[j] = v - 1e-6
          local lm = loss()
          ptr[j] = v
          local num = (lp - lm) / 2e-6
          assert(math.abs(num - g[j + 1]) <= 1e-6 * math.max(1, math.abs(num)),
                 ("%s: element %d of an array of shape %s: backward %.10g, finite differences %.10g")
                 :format(tostring(layer), j, H.show(a.shape), g[j + 1], num))
        end
      end
    end

    it("transposed layers' gradients match finite differences (float64, CPU)", function()
      if not tostring(dev):match("^cpu") then return end
      fd_check(nn.Conv1DTranspose(3, 3, {strides = 2, padding = 1, output_padding = 1, dtype = "float64"}), {2, 2, 3})
      fd_check(nn.Conv2DTranspose(4, {2, 3}, {strides = {2, 1}, output_padding = {1, 0}, dilation = {1, 2},
                                              groups = 2, dtype = "float64"}), {1, 2, 2, 3})
      fd_check(nn.Conv3DTranspose(2, 2, {strides = {1, 2, 1}, padding = {0, 1, 0}, output_padding = {0, 1, 0},
                                         dtype = "float64"}), {1, 2, 2, 2, 2})
    end)
  end)
end

describe("npx's 1-d and 3-d spellings", function()
  it("1-d convolution and pooling equal the 2-d ops with H = 1", function()
    np.random.seed(3)
    local x, w = np.random.normal(0, 1, {2, 4, 9}), np.random.normal(0, 1, {6, 2, 3})
    local kw = {stride = 2, pad = 1, dilate = 2, num_group = 2}
    local y = npx.convolution(x, w, kw)
    local y2 = npx.convolution(x:reshape({2, 4, 1, 9}), w:reshape({6, 2, 1, 3}),
                               {stride = {1, 2}, pad = {0, 1}, dilate = {1, 2}, num_group = 2})
    H.check(y, y2:reshape({2, 6, 4}):totable(), {shape = {2, 6, 4}, tol = 0})
    H.check(npx.pooling(x, {kernel = {3}, stride = {2}, pad = {1}, pool_type = "avg"}),
            npx.pooling(x:reshape({2, 4, 1, 9}), {kernel = {1, 3}, stride = {1, 2}, pad = {0, 1}, pool_type = "avg"})
              :reshape({2, 4, 5}):totable(), {tol = 0})
    -- a number for the kernel: the data's (pooling) or the weight's (convolution) rank
    H.assert_shape(npx.pooling(x, {kernel = 2}), {2, 4, 4})
    H.assert_shape(npx.pooling(np.ones({1, 1, 4, 4, 4}), {kernel = 2, pool_type = "avg"}), {1, 1, 2, 2, 2})
  end)

  it("deconvolution's target_shape sets pad and adj as MXNet does", function()
    local x, w = np.ones({1, 2, 7}), np.ones({2, 3, 3})
    H.assert_shape(npx.deconvolution(x, w, {kernel = {3}, stride = {2}, target_shape = {14}}), {1, 3, 14})
    H.assert_shape(npx.deconvolution(x, w, {kernel = {3}, stride = {2}, target_shape = {15}}), {1, 3, 15})
    H.assert_error(function() return npx.deconvolution(x, w, {kernel = {3}, stride = {2}, target_shape = {16}}) end,
                   {"deconvolution: target_shape (16,) is too big"})
    -- 3-d: the same formula on each axis
    H.assert_shape(npx.deconvolution(np.ones({1, 2, 2, 3, 4}), np.ones({2, 1, 2, 2, 2}),
                                     {stride = 2, adj = {1, 0, 1}, num_group = 2}), {1, 2, 5, 6, 9})
  end)

  it("pooling layers take MXNet's positional order", function()
    assert.truthy(nn.AvgPool2D(2, 2, 0, true)._ceil_mode)
    assert.truthy(nn.MaxPool3D(2, 2, 0, true)._ceil_mode)
    assert.truthy(nn.MaxPool1D(2, 2, 0, "NCW", true)._ceil_mode)
    assert.equal("Conv1DTranspose(4 -> 0, kernel_size=(3,), stride=(1,))", tostring(nn.Conv1DTranspose(4, 3)))
    assert.equal("Conv3D(None -> 4, kernel_size=(3, 3, 3), stride=(1, 1, 1))", tostring(nn.Conv3D(4, 3)))
  end)
end)

-- oneDNN's reordered copy of a Conv2D's weights is kept between calls
-- (core/ops/conv_dnnl.c); every way a Gluon program writes the weights is
-- seen at the next call: the output equals a convolution by a fresh copy.
describe("Conv2D weights kept for oneDNN", function()
  it("follow trainer steps, set_data, item assignment, in-place ops and load_parameters", function()
    local net = nn.Conv2D{channels = 32, kernel_size = 3, padding = 1, in_channels = 16}
    net:initialize()
    local trainer = luon.gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})
    local x = np.random.uniform(-1, 1, {1, 16, 10, 10})
    local function check(what)
      for _ = 1, 2 do -- a kept copy made, then read
        local w = net.weight:data()
        local want = npx.convolution(x, w:copy(), net.bias:data():copy(), {kernel = {3, 3}, pad = {1, 1}, num_filter = 32})
        assert(np.all(np.equal(net(x), want)):item(), what .. ": the output is not the fresh weights'")
      end
    end
    for _ = 1, 3 do net(x) end
    check("before any write")
    local y = autograd.record(function() return net(x):sum() end)
    y:backward()
    trainer:step(1)
    check("after trainer:step")
    net.weight:set_data(np.random.uniform(-1, 1, {32, 16, 3, 3}))
    check("after set_data")
    local w = net.weight:data()
    w[{2, 1}] = 0.25
    check("after w[2][1] = 0.25")
    w[{}] = w * -1
    check("after w[:] = -w")
    np.multiply(w, 2, {out = w})
    check("after np.multiply(w, 2, out = w)")
    local path = os.tmpname()
    net.weight:set_data(np.ones({32, 16, 3, 3}))
    net:save_parameters(path)
    net.weight:set_data(np.zeros({32, 16, 3, 3}))
    check("after set_data again")
    net:load_parameters(path)
    os.remove(path)
    check("after load_parameters")
    assert.equal(32 * 16 * 9, net.weight:data():sum():item())
  end)
end)

describe("Conv2D weights kept for oneDNN, in cpu(0)'s memory", function()
  it("count in its memory stats and go back with npx.empty_cache", function()
    local x = np.random.uniform(-1, 1, {1, 64, 12, 12})
    local w = np.random.uniform(-1, 1, {256, 64, 3, 3}) -- 576 KiB, reordered: about as much kept
    local kw = {kernel = {3, 3}, pad = {1, 1}, num_filter = 256}
    local want = npx.convolution(x, w:copy(), nil, kw)
    local function settled() -- arrays dropped anywhere before: gone (finalizers take two cycles)
      collectgarbage("collect")
      collectgarbage("collect")
      return npx.memory_stats(npx.cpu(0)).in_use
    end
    if not pcall(core.ffi.load, "libdnnl.so.2") then return end -- no oneDNN here: nothing kept
    for _ = 1, 3 do npx.convolution(x, w, nil, kw) end -- seen, kept, read
    local with = settled()
    npx.empty_cache(npx.cpu(0))
    local freed = with - settled()
    assert.is_true(freed >= 256 * 64 * 9 * 4, "empty_cache gave back " .. freed .. " bytes in use")
    assert(np.all(np.equal(npx.convolution(x, w, nil, kw), want)):item(), "after empty_cache")
  end)
end)

describe("Conv2D weights kept for oneDNN, sharing memory", function()
  it("follow batch_norm's running statistics and an optimizer's state written in place", function()
    local S = core.slot
    local x = np.random.uniform(-1, 1, {1, 16, 10, 10})
    local kw = {kernel = {3, 3}, pad = {1, 1}, num_filter = 32}
    local function check(w, what)
      for _ = 1, 3 do npx.convolution(x, w, nil, kw) end -- kept
      return function()
        local got, want = npx.convolution(x, w, nil, kw), npx.convolution(x, w:copy(), nil, kw)
        assert(np.all(np.equal(got, want)):item(), what .. ": the output is not the fresh weights'")
      end
    end
    -- the running variance of a batch norm in training, seen as weights
    local rv = np.random.uniform(0.5, 1.5, {4608})
    local after = check(rv:reshape({32, 16, 3, 3}), "running_var")
    local g, b, m = np.ones({4608}), np.zeros({4608}), np.zeros({4608})
    autograd.train_mode(function()
      return npx.batch_norm(np.random.uniform(0, 3, {2, 4608}), g, b, m, rv, {fix_gamma = false})
    end)
    after()
    -- momentum SGD's state, updated in place beside the weight
    local mom = np.random.uniform(-1, 1, {32, 16, 3, 3})
    after = check(mom, "momentum")
    local a = core.attrs()
    a.f[S.OPT_LR], a.f[S.OPT_RESCALE], a.f[S.OPT_CLIP], a.f[S.SGD_MOMENTUM] = 0.1, 1, -1, 0.9
    local w = np.zeros({32, 16, 3, 3})
    core.call(core.op_ids.sgd_mom_update, {w, np.ones({32, 16, 3, 3}), mom}, a, {w})
    after()
  end)
end)

describe("Winograd's 3x3 convolutions (float32, stride 1)", function()
  it("give a finite weight gradient over recycled memory holding NaN", function()
    -- a short last block read one lane of scratch no row wrote: with the
    -- cache's blocks full of NaN, the whole weight gradient came out NaN
    do
      local junk = {}
      for i = 1, 8 do junk[i] = np.full({2 ^ (12 + i)}, 0 / 0) end
    end
    collectgarbage(); collectgarbage(); core.sweep()
    local x = np.random.uniform(-1, 1, {3, 16, 28, 28})
    local w = np.random.uniform(-1, 1, {16, 16, 3, 3})
    w:attach_grad()
    local y = autograd.record(function()
      return npx.convolution(x, w, nil, {kernel = {3, 3}, pad = {1, 1}, num_filter = 16, no_bias = true})
    end)
    y:backward(np.ones(y.shape))
    assert.is_false(w.grad:isnan():any():item())
    -- and equal to the float64 weight gradient within Winograd's rounding
    local x64, w64 = x:astype("float64"), w:astype("float64")
    w64:attach_grad()
    local y64 = autograd.record(function()
      return npx.convolution(x64, w64, nil, {kernel = {3, 3}, pad = {1, 1}, num_filter = 16, no_bias = true})
    end)
    y64:backward(np.ones_like(y64))
    local err = np.abs(w.grad:astype("float64") - w64.grad):max():item()
    assert.is_true(err < 1e-4 * np.abs(w64.grad):max():item(), "weight gradient off by " .. err)
  end)
end)

describe("conv and pooling bad input", function()
  it("names the function, the value and what was expected", function()
    local c1 = nn.Conv1D(2, 3)
    c1:initialize()
    H.assert_error(function() return c1(np.ones({1, 2, 5, 5})) end,
                   {"Conv1D: input must be 3-d (N, C, W), got shape (1, 2, 5, 5)"})
    H.assert_error(function() return npx.convolution(np.ones({1, 2, 5, 5}), np.ones({3, 2, 3}), {kernel = {3}}) end,
                   {"convolution: a 1-d kernel takes 3-d data (N, C, W), got shape (1,2,5,5)"})
    H.assert_error(function() return npx.convolution(np.ones({1, 2, 5}), np.ones({3, 2, 3, 3}), {kernel = {3}}) end,
                   {"convolution: a 1-d kernel takes a 3-d weight"})
    H.assert_error(function() return npx.convolution(np.ones({1, 2, 5}), np.ones({3, 2, 9})) end,
                   {"convolution: kernel 9 with dilation 1 spans 9, more than the input width 5 padded by 0"})
    H.assert_error(function() return npx.convolution(np.ones({1, 2, 2, 2, 2}), np.ones({3, 2, 3, 1, 1})) end,
                   {"conv3d: kernel (3,1,1)", "does not fit the input (2,2,2)"})
    H.assert_error(function() return npx.pooling(np.ones({1, 2, 3}), {kernel = {5}}) end,
                   {"pooling: kernel 5 is larger than the input width 3 padded by 0"})
    H.assert_error(function() return npx.pooling(np.ones({1, 2, 3}), {kernel = {2}, pad = {2}}) end,
                   {"pooling: padding 2 must be smaller than the kernel 2"})
    H.assert_error(function() return npx.pooling(np.ones({1, 2, 3, 3, 3}), {kernel = {4, 1, 1}}) end,
                   {"max_pool3d: kernel (4,1,1) is larger than the input (1,2,3,3,3)"})
    H.assert_error(function() return npx.pooling(np.ones({1, 2, 3, 3}), {kernel = {2, 2, 2}}) end,
                   {"pooling: a 3-d kernel takes 5-d data (N, C, D, H, W), got shape (1,2,3,3)"})
    H.assert_error(function() return npx.pooling(np.ones({1, 2, 3, 3}), {kernel = {2, 2, 2, 2}}) end,
                   {"pooling: the kernel must have 1, 2 or 3 sizes"})
    -- output_padding must be smaller than the stride
    H.assert_error(function() return nn.Conv2DTranspose(2, 3, {strides = 2, output_padding = 2}) end,
                   {"Conv2DTranspose: output_padding (2, 2) must be smaller than strides (2, 2)"})
    H.assert_error(function() return nn.Conv1DTranspose(2, 3, {output_padding = 1}) end,
                   {"Conv1DTranspose: output_padding (1,) must be smaller than strides (1,)"})
    H.assert_error(function() return npx.deconvolution(np.ones({1, 2, 3}), np.ones({2, 2, 3}), {stride = 2, adj = 2}) end,
                   {"deconvolution: adj (2,) must be smaller than stride (2,)"})
    H.assert_error(function() return npx.deconvolution(np.ones({1, 2, 3}), np.ones({2, 2, 3}), {pad = 4}) end,
                   {"deconvolution: the output would be empty"})
    -- groups that do not divide the channels
    local c3 = nn.Conv3D(4, 2, {groups = 2})
    c3:initialize()
    H.assert_error(function() return c3(np.ones({1, 3, 3, 3, 3})) end,
                   {"Conv3D: input channels (3) must be a multiple of groups (2)"})
    H.assert_error(function() return nn.Conv3DTranspose(3, 2, {groups = 2}) end,
                   {"Conv3DTranspose: channels (3) must be a multiple of groups (2)"})
    H.assert_error(function() return npx.deconvolution(np.ones({1, 3, 3}), np.ones({2, 2, 3})) end,
                   {"deconvolution: data has 3 channels but the weight", "takes 2"})
    H.assert_error(function() return npx.convolution(np.ones({1, 3, 5}), np.ones({4, 2, 3}), {num_group = 2}) end,
                   {"convolution: data has 3 channels and the weight 4 filters, but 2 groups"})
    H.assert_error(function() return nn.MaxPool3D{pool_size = {2, 2}} end,
                   {"MaxPool3D: pool_size must be an integer >= 1 or a list of three {d, h, w}, got {2, 2}"})
    H.assert_error(function() return nn.Conv1D(2, 3, {layout = "NWC"}) end, {"Conv1D: layout must be 'NCW'"})
    H.assert_error(function() return npx.pooling(np.ones({1, 1, 2, 2, 2}), {kernel = 2, layout = "NCHW"}) end,
                   {"pooling: layout NCHW is not supported (only 'NCDHW')"})
    -- the runtime is usable after them
    H.assert_shape(c3(np.ones({1, 4, 3, 3, 3})), {1, 4, 2, 2, 2})
  end)
end)
