-- gluon_layers_spec: every gluon.nn layer on every device: output shapes and
-- values on small inputs computed by hand or by a naive Lua reference
-- (Dense, Conv2D, pooling, BatchNorm in both modes with the running-stat
-- update, Dropout, Flatten, activations), gradients through Dense, and the
-- npx wrappers the layers use.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local gluon, init = luon.gluon, luon.init
local nn = gluon.nn
local core = require("luon.core")
local S = core.slot

-- A layer whose parameters live on dev, with values set by name.
local function on(dev, layer, values)
  layer:initialize{device = dev}
  for name, v in pairs(values or {}) do
    layer:collect_params()[name]:set_data(np.array(v))
  end
  return layer
end

-- Naive NCHW convolution / pooling over nested Lua tables (the references).
local function conv_ref(x, w, b, s, p, d, groups)
  local N, C, Hh, W = #x, #x[1], #x[1][1], #x[1][1][1]
  local O, Cg, KH, KW = #w, #w[1], #w[1][1], #w[1][1][1]
  local OH = math.floor((Hh + 2 * p[1] - d[1] * (KH - 1) - 1) / s[1]) + 1
  local OW = math.floor((W + 2 * p[2] - d[2] * (KW - 1) - 1) / s[2]) + 1
  local out = {}
  for n = 1, N do
    out[n] = {}
    for o = 1, O do
      out[n][o] = {}
      local g = math.floor((o - 1) / (O / groups))
      for i = 1, OH do
        out[n][o][i] = {}
        for j = 1, OW do
          local acc = b and b[o] or 0
          for c = 1, Cg do
            for ki = 1, KH do
              for kj = 1, KW do
                local r = (i - 1) * s[1] - p[1] + (ki - 1) * d[1]
                local q = (j - 1) * s[2] - p[2] + (kj - 1) * d[2]
                if r >= 0 and r < Hh and q >= 0 and q < W then
                  acc = acc + x[n][g * Cg + c][r + 1][q + 1] * w[o][c][ki][kj]
                end
              end
            end
          end
          out[n][o][i][j] = acc
        end
      end
    end
  end
  return out
end

local function pool_ref(x, k, s, p, kind, include_pad)
  local Hh, W = #x[1][1], #x[1][1][1]
  local OH = math.floor((Hh + 2 * p[1] - k[1]) / s[1]) + 1
  local OW = math.floor((W + 2 * p[2] - k[2]) / s[2]) + 1
  local out = {}
  for n = 1, #x do
    out[n] = {}
    for c = 1, #x[1] do
      out[n][c] = {}
      for i = 1, OH do
        out[n][c][i] = {}
        for j = 1, OW do
          local best, sum, cnt = -math.huge, 0, 0
          for ki = 0, k[1] - 1 do
            for kj = 0, k[2] - 1 do
              local r, q = (i - 1) * s[1] - p[1] + ki, (j - 1) * s[2] - p[2] + kj
              if r >= 0 and r < Hh and q >= 0 and q < W then
                local v = x[n][c][r + 1][q + 1]
                if v > best then best = v end
                sum, cnt = sum + v, cnt + 1
              end
            end
          end
          if kind == "max" then out[n][c][i][j] = best
          else out[n][c][i][j] = sum / (include_pad and k[1] * k[2] or cnt) end
        end
      end
    end
  end
  return out
end

local function iota4(shape) return np.array(H.iota(shape)):reshape(shape) end

for _, dev in ipairs(H.devices()) do
  describe("gluon.nn on " .. tostring(dev), function()
    local function arr(v) return np.array(v, {device = dev}) end

    it("Dense: y = x . W^T + b, activation, flatten", function()
      local W, b = {{1, 0, -1}, {2, 1, 0}}, {0.5, -1}
      local d = on(dev, nn.Dense(2, {in_units = 3}), {weight = W, bias = b})
      local y = d(arr({{1, 2, 3}, {4, 5, 6}}))
      H.check(y, {{-1.5, 3}, {-1.5, 12}}, {shape = {2, 2}, device = dev})
      local r = on(dev, nn.Dense{units = 2, activation = "relu", in_units = 3}, {weight = W, bias = b})
      H.check(r(arr({{1, 2, 3}, {4, 5, 6}})), {{0, 3}, {0, 12}})
      -- flatten = true: (2, 1, 3) is taken as (2, 3)
      H.check(d(arr({{{1, 2, 3}}, {{4, 5, 6}}})), {{-1.5, 3}, {-1.5, 12}}, {shape = {2, 2}})
      -- flatten = false: the last axis
      local f = on(dev, nn.Dense(2, {flatten = false, in_units = 3}), {weight = W, bias = b})
      H.check(f(arr({{{1, 2, 3}, {4, 5, 6}}})), {{{-1.5, 3}, {-1.5, 12}}}, {shape = {1, 2, 2}})
      -- no bias; deferred in_units from the input
      local nb = nn.Dense(2, {use_bias = false})
      nb:initialize{init = init.One(), device = dev}
      H.check(nb(arr({{{1, 2}, {3, 4}}})), {{10, 10}})
      assert.same({2, 4}, nb.weight.shape)
      assert.is_nil(nb.bias)
      assert.equal("Dense(4 -> 2, linear)", tostring(nb))
    end)

    it("Dense gradients: dW = sum of rows of x, db = batch size", function()
      local d = on(dev, nn.Dense(2, {in_units = 3}), {weight = {{1, 0, -1}, {2, 1, 0}}, bias = {0, 0}})
      local x = arr({{1, 2, 3}, {4, 5, 6}})
      local y = autograd.record(function() return d(x) end)
      y:backward()
      H.check(d.weight:grad(dev), {{5, 7, 9}, {5, 7, 9}}, {device = dev})
      H.check(d.bias:grad(dev), {2, 2})
    end)

    it("Dense's fused linear op equals matmul, add and relu (values and gradients, float32 and float64)", function()
      for _, dt in ipairs({"float32", "float64"}) do
        for _, case in ipairs({{"relu", true}, {"relu", false}, {nil, true}, {"tanh", true}}) do
          np.random.seed(11)
          local x = np.random.uniform(-1, 1, {5, 2, 3}):astype(dt):copyto(dev)
          local w = np.random.uniform(-1, 1, {4, 6}):astype(dt):copyto(dev)
          local b = np.random.uniform(-1, 1, {4}):astype(dt):copyto(dev)
          local function run(fused)
            local xs, ws, bs = x:copy(), w:copy(), b:copy()
            for _, a in ipairs({xs, ws, bs}) do a:attach_grad() end
            local d = nn.Dense(4, {activation = case[1], use_bias = case[2], dtype = dt})
            d:initialize{device = dev}
            d.weight:set_data(ws)
            if case[2] then d.bias:set_data(bs) end
            local y = autograd.record(function()
              if fused then return d(xs) end
              local z = np.matmul(np.reshape(xs, {5, 6}), np.transpose(ws))
              if case[2] then z = z + bs end
              if case[1] then z = npx.activation(z, {act_type = case[1]}) end
              return z
            end)
            y:backward(np.ones(y.shape, {dtype = dt, device = dev}))
            local wg = fused and d.weight:grad(dev) or ws.grad
            local bg = case[2] and (fused and d.bias:grad(dev) or bs.grad)
            return y, xs.grad, wg, bg
          end
          local y1, g1, w1, b1 = run(true)
          local y2, g2, w2, b2 = run(false)
          H.assert_equal(y1, y2:totable())
          H.assert_equal(g1, g2:totable())
          H.assert_equal(w1, w2:totable())
          if b1 then H.assert_equal(b1, b2:totable()) end
        end
      end
    end)

    it("Conv2D: constant weights by hand", function()
      local c = on(dev, nn.Conv2D{channels = 1, kernel_size = 2, in_channels = 1},
                   {weight = {{{{1, 1}, {1, 1}}}}, bias = {0.5}})
      local y = c(iota4({1, 1, 4, 4}):copyto(dev))
      H.check(y, {{{{10.5, 14.5, 18.5}, {26.5, 30.5, 34.5}, {42.5, 46.5, 50.5}}}},
              {shape = {1, 1, 3, 3}, device = dev})
      local r = on(dev, nn.Conv2D{channels = 1, kernel_size = 2, activation = "relu", in_channels = 1},
                   {weight = {{{{-1, 0}, {0, 0}}}}, bias = {3}})
      H.check(r(iota4({1, 1, 3, 3}):copyto(dev)), {{{{3, 2}, {0, 0}}}})
    end)

    it("Conv2D: strides, padding, dilation, groups against the reference", function()
      np.random.seed(7)
      local x = np.random.uniform(-1, 1, {2, 4, 7, 6})
      local cases = {
        {kernel_size = 3, strides = 2, padding = 1},
        {kernel_size = {2, 3}, strides = {1, 2}, padding = {0, 1}},
        {kernel_size = 2, dilation = 2},
        {kernel_size = 3, groups = 2, padding = 1},
      }
      for _, kw in ipairs(cases) do
        kw.channels = 4
        local c = nn.Conv2D(kw)
        c:initialize{init = init.Uniform(1), device = dev}
        local y = c(x:copyto(dev))
        np.random.uniform(-1, 1, {4}):copyto(c.bias:data(dev))
        y = c(x:copyto(dev))
        local function p2(v, dflt)
          v = v or dflt
          return type(v) == "number" and {v, v} or v
        end
        local ref = conv_ref(x:totable(), c.weight:data(dev):totable(), c.bias:data(dev):totable(),
                             p2(kw.strides, 1), p2(kw.padding, 0), p2(kw.dilation, 1), kw.groups or 1)
        H.check(y, ref, {device = dev, tol = 1e-4})
      end
      assert.equal("Conv2D(2 -> 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=2)",
                   tostring(nn.Conv2D{channels = 4, kernel_size = 3, padding = 1, groups = 2, in_channels = 4}))
    end)

    it("pooling: values, strides, padding, ceil_mode, global", function()
      local x = iota4({1, 1, 4, 4}):copyto(dev)
      H.check(nn.MaxPool2D()(x), {{{{5, 7}, {13, 15}}}}, {device = dev})
      H.check(nn.AvgPool2D()(x), {{{{2.5, 4.5}, {10.5, 12.5}}}})
      H.check(nn.MaxPool2D{pool_size = 3, strides = 1}(x), {{{{10, 11}, {14, 15}}}})
      H.check(nn.GlobalAvgPool2D()(x), {{{{7.5}}}}, {shape = {1, 1, 1, 1}})
      H.check(nn.GlobalMaxPool2D()(x), {{{{15}}}}, {shape = {1, 1, 1, 1}})
      local z = np.zeros({2, 2, 10, 10}, {device = dev})
      H.assert_shape(nn.MaxPool2D(3)(z), {2, 2, 3, 3})
      H.assert_shape(nn.MaxPool2D{pool_size = 3, ceil_mode = true}(z), {2, 2, 4, 4})
      np.random.seed(3)
      local r = np.random.uniform(-1, 1, {2, 3, 7, 7})
      local rt = r:totable()
      local ref = pool_ref(rt, {3, 3}, {2, 2}, {1, 1}, "max")
      H.check(nn.MaxPool2D{pool_size = 3, strides = 2, padding = 1}(r:copyto(dev)), ref)
      ref = pool_ref(rt, {2, 2}, {2, 2}, {1, 1}, "avg", true)
      H.check(nn.AvgPool2D{pool_size = 2, padding = 1}(r:copyto(dev)), ref)
      ref = pool_ref(rt, {2, 2}, {2, 2}, {1, 1}, "avg", false)
      H.check(nn.AvgPool2D{pool_size = 2, padding = 1, count_include_pad = false}(r:copyto(dev)), ref)
      assert.equal("GlobalAvgPool2D(size=(1, 1), stride=(1, 1), padding=(0, 0), ceil_mode=True, " ..
                   "global_pool=True, pool_type=avg, layout=NCHW)", tostring(nn.GlobalAvgPool2D()))
    end)

    it("BatchNorm: running statistics in predict mode, batch statistics and their update in training", function()
      local bn = nn.BatchNorm()
      bn:initialize{device = dev}
      local x = arr({{1, 2}, {2, 4}, {3, 6}, {4, 8}})   -- channel 0: 1..4, channel 1: 2..8
      local s = 1 / math.sqrt(1 + 1e-5)
      H.check(bn(x), {{s, 2 * s}, {2 * s, 4 * s}, {3 * s, 6 * s}, {4 * s, 8 * s}}, {device = dev})
      bn.gamma:set_data(np.array({2, 1}))
      bn.beta:set_data(np.array({1, 0}))
      local y = autograd.record(function() return bn(x) end)
      local m, v = {2.5, 5}, {1.25, 5}                    -- biased variance
      local exp = {}
      for i, row in ipairs({{1, 2}, {2, 4}, {3, 6}, {4, 8}}) do
        exp[i] = {2 * (row[1] - m[1]) / math.sqrt(v[1] + 1e-5) + 1, (row[2] - m[2]) / math.sqrt(v[2] + 1e-5)}
      end
      H.check(y, exp, {tol = 1e-4})
      -- running = 0.9 * running + 0.1 * batch
      H.check(bn.running_mean:data(dev), {0.25, 0.5}, {tol = 1e-5})
      H.check(bn.running_var:data(dev), {1.025, 1.4}, {tol = 1e-5})
      -- predict mode now uses them
      local after = bn(x)
      H.check(after:slice(0), {2 * (1 - 0.25) / math.sqrt(1.025 + 1e-5) + 1, (2 - 0.5) / math.sqrt(1.4 + 1e-5)},
              {tol = 1e-4})
      -- train_mode without recording also updates; use_global_stats never does
      autograd.train_mode(function() return bn(x) end)
      H.check(bn.running_mean:data(dev), {0.475, 0.95}, {tol = 1e-5})
      local g = nn.BatchNorm{use_global_stats = true, in_channels = 2}
      g:initialize{device = dev}
      autograd.record(function() return g(x) end)
      H.check(g.running_mean:data(dev), {0, 0})
      assert.equal("BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=True, " ..
                   "in_channels=2)", tostring(g))
      -- the four parameters, two of them not trainable
      local ps = bn:collect_params()
      assert.same({"gamma", "beta", "running_mean", "running_var"}, ps:keys())
      assert.equal("write", ps.gamma.grad_req)
      assert.equal("null", ps.running_var.grad_req)
    end)

    it("BatchNorm on (N, C, H, W) with scale = false keeps gamma at 1", function()
      local bn = nn.BatchNorm{scale = false, in_channels = 2}
      bn:initialize{device = dev}
      bn.gamma:set_data(np.array({5, 5}))
      local x = iota4({2, 2, 1, 2}):copyto(dev)   -- channel 0: 0 1 4 5, channel 1: 2 3 6 7
      local y = autograd.train_mode(function() return bn(x) end)
      local sd = math.sqrt(4.25 + 1e-5)
      H.check(y, {{{{-2.5 / sd, -1.5 / sd}}, {{-2.5 / sd, -1.5 / sd}}},
                  {{{1.5 / sd, 2.5 / sd}}, {{1.5 / sd, 2.5 / sd}}}}, {tol = 1e-4})
      assert.equal("null", bn.gamma.grad_req)
    end)

    it("Dropout: identity outside training, {0, 1/(1-p)} in training", function()
      local d = nn.Dropout(0.5)
      local x = np.ones({1000}, {device = dev})
      H.check(d(x), H.map(function() return 1 end, H.iota({1000})), {device = dev})
      local y = autograd.record(function() return d(x) end)
      local t, zeros = y:totable(), 0
      for _, v in ipairs(t) do
        assert.is_true(v == 0 or math.abs(v - 2) < 1e-6, "dropout value " .. v)
        if v == 0 then zeros = zeros + 1 end
      end
      assert.is_true(zeros > 400 and zeros < 600, "zeros " .. zeros)
      -- predict mode inside record: identity
      local p = autograd.record(function() return d(x) end, false)
      H.check(p:sum(), 1000)
      H.check(nn.Dropout(0)(x):sum(), 1000)
      assert.equal("Dropout(p = 0.5, axes=())", tostring(d))
    end)

    it("Flatten, Activation, LeakyReLU", function()
      H.assert_shape(nn.Flatten()(np.zeros({3, 4, 5, 6}, {device = dev})), {3, 120})
      H.assert_shape(nn.Flatten()(np.zeros({3, 6}, {device = dev})), {3, 6})
      H.assert_shape(nn.Flatten()(np.zeros({3}, {device = dev})), {3, 1})
      local x = arr({-1, 0, 2})
      H.check(nn.Activation("relu")(x), {0, 0, 2}, {device = dev})
      H.check(nn.Activation("sigmoid")(x), {1 / (1 + math.exp(1)), 0.5, 1 / (1 + math.exp(-2))})
      H.check(nn.Activation("tanh")(x), {math.tanh(-1), 0, math.tanh(2)})
      H.check(nn.Activation("softrelu")(x), {math.log(1 + math.exp(-1)), math.log(2), math.log(1 + math.exp(2))})
      H.check(nn.Activation("softsign")(x), {-0.5, 0, 2 / 3})
      H.check(nn.LeakyReLU(0.1)(arr({-2, 3})), {-0.2, 3})
      assert.equal("LeakyReLU(0.1)", tostring(nn.LeakyReLU(0.1)))
      assert.equal("Activation(softrelu)", tostring(nn.Activation("softrelu")))
    end)

    it("npx: softmax, log_softmax, pick, batch_norm defaults", function()
      local x = arr({{1, 2, 3}, {1, 1, 1}})
      local e = {math.exp(1), math.exp(2), math.exp(3)}
      local s = e[1] + e[2] + e[3]
      H.check(npx.softmax(x), {{e[1] / s, e[2] / s, e[3] / s}, {1 / 3, 1 / 3, 1 / 3}}, {device = dev})
      H.check(npx.log_softmax(x, {axis = 1}):slice(1), {math.log(1 / 3), math.log(1 / 3), math.log(1 / 3)})
      H.check(npx.softmax(x, {axis = 0}):slice(nil, 0), {0.5, 0.5})
      H.check(npx.pick(x, arr({0, 2})), {1, 1})
      H.check(npx.pick(x, arr({2, 0}), {keepdims = true}), {{3}, {1}})
      H.check(npx.pick(x, arr({5, -1}), {mode = "wrap"}), {3, 1})
      -- an index of NaN or +-inf has no position to wrap to: the first (it
      -- read and, for the gradient, wrote before the array); clip: the ends
      local xg = arr({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}})
      xg:attach_grad()
      local yg = autograd.record(function() return npx.pick(xg, arr({1 / 0, -1 / 0, 0 / 0}), {mode = "wrap"}) end)
      H.check(yg, {1, 4, 7})
      yg:backward()
      H.check(xg.grad, {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}})
      H.check(npx.pick(xg, arr({1 / 0, -1 / 0, 0 / 0})), {3, 4, 7})
      -- fix_gamma defaults to true for the op, as MXNet's
      local one = arr({1})
      H.check(npx.batch_norm(arr({{2}}), arr({3}), arr({0}), arr({0}), one, {eps = 0}), {{2}})
    end)

    it("batch_norm's batch statistics keep their precision when the mean is large against the spread", function()
      -- variance 1.25 about 1e8: raw sums of squares (4e16) would lose it to rounding
      local x = np.array({{1e8}, {1e8 + 1}, {1e8 + 2}, {1e8 + 3}}, {dtype = "float64", device = dev})
      local f = function(v) return np.array(v, {dtype = "float64", device = dev}) end
      local y = autograd.record(function()
        return npx.batch_norm(x, f({1}), f({0}), f({0}), f({1}), {eps = 0, fix_gamma = false})
      end)
      local s = math.sqrt(1.25)
      H.check(y, {{-1.5 / s}, {-0.5 / s}, {0.5 / s}, {1.5 / s}}, {tol = 1e-6})
    end)
  end)
end

-- Conv2D (relu or none) then MaxPool2D in a Sequential runs as one op on the
-- CPU (npx.convolution_maxpool): the same outputs and gradients as the two
-- blocks run apart (a forward hook on the pool keeps them apart).
-- Twice: as this CPU chooses, and with LUON_CONV_ALGO=channels-last, which
-- takes the channels-last forward where the shape allows even without
-- AVX-512 (where it is chosen by default).
local ffi = require("ffi")
-- fn's results, with npx[name] wrapped so that each call goes to seen(...)
-- first (a fused op counted); npx[name] restored even when fn fails
local function spying(name, seen, fn)
  local real = npx[name]
  npx[name] = function(...) seen(...); return real(...) end
  local r = {pcall(fn)}
  npx[name] = real
  assert(r[1], r[2])
  return unpack(r, 2, table.maxn(r))
end
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);")
for _, dev in ipairs(H.devices()) do
 for _, algo in ipairs({false, "channels-last"}) do
  describe(("Conv2D + MaxPool2D fusion on %s%s"):format(tostring(dev), algo and " (LUON_CONV_ALGO=" .. algo .. ")" or ""),
           function()
    setup(function() if algo then ffi.C.setenv("LUON_CONV_ALGO", algo, 1) end end)
    teardown(function() if algo then ffi.C.unsetenv("LUON_CONV_ALGO") end end)
    local function net(act, pool, k, pad, groups, channels, more)
      local s = nn.HybridSequential()
      local o = {channels = channels or groups and 8 or 5, kernel_size = k, padding = pad, activation = act,
                 groups = groups}
      for key, v in pairs(more or {}) do o[key] = v end
      s:add(nn.Conv2D(o), pool, nn.Dense(3))
      s:initialize{device = dev, init = init.Xavier()}
      return s
    end
    local function run(s, x)
      local ps = s:collect_params()
      for _, p in pairs(ps) do p:zero_grad() end
      local y = autograd.record(function() return s(x) end)
      y:backward()
      local g = {}
      for name, p in pairs(ps) do g[name] = p:grad(dev):asnumpy() end
      return y:asnumpy(), g, x.grad and x.grad:asnumpy()
    end
    -- in channels 2: the dense backward; 8 and 16: the sparse one (16 with a
    -- 2x2 kernel: its float32 register kernel; 32 in 2 groups too; 70 out
    -- channels: more than one word of its bits; with conv padding, stride or
    -- dilation and a padded pool: taps outside the input)
    for _, case in ipairs({{"relu", nn.MaxPool2D{pool_size = 3, strides = 2}, 2, 3, 1},
                           {nil, nn.MaxPool2D{pool_size = 2, padding = 1, ceil_mode = true}, 2, 3, 1},
                           {"relu", nn.MaxPool2D{pool_size = 3, strides = 2}, 8, 3, 1},
                           {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 16, 2, 0},
                           {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 32, 2, 0, 2},
                           {"relu", nn.MaxPool2D{pool_size = 3, strides = 2, padding = 1}, 16, 2, 1, nil, 70},
                           {"relu", nn.MaxPool2D{pool_size = 3, strides = 2, padding = 1}, 16, 2, 0, nil, 24},
                           {nil, nn.MaxPool2D{pool_size = 2, strides = 1, padding = 1}, 32, 2, 1, 2, 132,
                            {strides = 2, dilation = 2}},
                           {"relu", nn.MaxPool2D{pool_size = 2, strides = 3}, 48, 2, 1, nil, 20,
                            {strides = {1, 2}}},
                           -- few taps, 32 to 64 out channels (the channels-last or direct forward)
                           {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 3, 2, 0, nil, 32},
                           {nil, nn.MaxPool2D{pool_size = 2, strides = 1}, 4, 3, 0, nil, 48,
                            {strides = 2}},
                           {"relu", nn.MaxPool2D{pool_size = {3, 2}, strides = {1, 2}}, 1, 2, 0, nil, 64,
                            {dilation = {2, 1}}},
                           -- up to 256 taps, 64 or 128 out channels: the channels-last forward
                           -- in blocks of 64 channels, rows not a multiple of its 4 positions
                           {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 32, 2, 0, nil, 128},
                           {nil, nn.MaxPool2D{pool_size = 2, strides = 1}, 20, 3, 0, nil, 64},
                           -- no dx wanted, at most 4 channels: the weight gradient from the
                           -- winners alone (the LeafNetwork's first layer; taps in the
                           -- padding, row dilation, 4 x 4 taps, 4 rows, a padded pool)
                           {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 3, 2, 0, nil, 32, nil, true},
                           {"relu", nn.MaxPool2D{pool_size = 3, strides = 2, padding = 1}, 1, 3, 1, nil, 20,
                            {strides = 2, dilation = {2, 1}}, true},
                           {nil, nn.MaxPool2D{pool_size = 2, strides = 1}, 4, {2, 4}, 0, nil, 16, nil, true},
                           {"relu", nn.MaxPool2D{pool_size = {3, 2}}, 2, {4, 1}, {1, 0}, nil, 7,
                            {strides = {1, 3}}, true}}) do
      it(("matches the unfused blocks (activation %s, %s, %d in channels, %d out%s)"):format(tostring(case[1]),
          tostring(case[2]), case[3], case[7] or case[6] and 8 or 5, case[9] and ", no dx" or ""), function()
        np.random.seed(7)
        local s = net(case[1], case[2], case[4], case[5], case[6], case[7], case[8])
        local x = np.random.uniform(-1, 1, {4, case[3], 9, 8}, {device = dev})
        if not case[9] then x:attach_grad() end
        s(x) -- the first call infers the deferred shapes, unfused
        local calls = 0
        local y1, g1, dx1 = spying("convolution_maxpool", function() calls = calls + 1 end,
                                   function() return run(s, x) end)
        assert.equal(dev.device_type == "cpu" and 1 or 0, calls)
        local h = case[2]:register_forward_hook(function() end)
        local y2, g2, dx2 = run(s, x)
        h.detach()
        H.assert_close(y1, H.values(y2), 1e-5)
        if not case[9] then H.assert_close(dx1, H.values(dx2), 1e-5) end
        for name in pairs(g2) do H.assert_close(g1[name], H.values(g2[name]), 1e-4) end
      end)
    end
    -- batch 1 or 3 with 4 threads, not recording: the fused forward (on the
    -- channels-last path parts of the output channels where its 64-channel
    -- blocks, or else 32-channel ones, divide evenly: 64 and 128 channels at
    -- batch 3, 256 at both, else bands of pooled rows; im2col and a threaded
    -- GEMM instead of the direct kernel for one sample elsewhere)
    it("fewer samples than threads, predict mode: fused, the same outputs", function()
      local threads = npx.num_threads()
      npx.set_num_threads(4)
      local ok, err = pcall(function()
        for _, case in ipairs({{"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 3, 2, 0, nil, 32},
                               {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 32, 2, 0, nil, 128},
                               {"relu", nn.MaxPool2D{pool_size = 4, strides = 2}, 16, 2, 0, nil, 256},
                               {nil, nn.MaxPool2D{pool_size = 4, strides = 2}, 8, 2, 0, nil, 64},
                               {nil, nn.MaxPool2D{pool_size = 2, strides = 1}, 4, 3, 0, nil, 48, {strides = 2}},
                               {"relu", nn.MaxPool2D{pool_size = 3, strides = 2}, 2, 3, 1}}) do
          for _, n in ipairs({1, 3}) do
            np.random.seed(5)
            local s = net(case[1], case[2], case[4], case[5], case[6], case[7], case[8])
            local x = np.random.uniform(-1, 1, {n, case[3], 17, 15}, {device = dev})
            s(x) -- deferred shapes
            local calls = 0
            local y1 = spying("convolution_maxpool", function() calls = calls + 1 end,
                              function() return s(x):asnumpy() end)
            assert.equal(dev.device_type == "cpu" and 1 or 0, calls)
            local h = case[2]:register_forward_hook(function() end)
            local y2 = s(x)
            h.detach()
            H.assert_close(y1, H.values(y2), 1e-5)
          end
        end
      end)
      npx.set_num_threads(threads)
      assert(ok, err)
    end)
    -- a BatchNorm after the pool joins the op in predict mode (its running
    -- statistics applied to the pooled values: the same bits as the layer
    -- run apart, eager and hybridized); not while recording or training
    it("Conv2D + MaxPool2D + BatchNorm in predict mode: one op, the same bits as apart", function()
      local threads = npx.num_threads()
      npx.set_num_threads(4)
      local ok, err = pcall(function()
        -- the channels-last forward (whole samples, parts of the channels,
        -- bands of rows) and the general path; scale = false (gamma fixed
        -- at 1); float64
        for _, case in ipairs({{"relu", {pool_size = 4, strides = 2}, 3, 2, 32, {}},
                               {"relu", {pool_size = 4, strides = 2}, 32, 2, 128, {epsilon = 1e-3}},
                               {nil, {pool_size = 4, strides = 2}, 8, 2, 64, {scale = false}},
                               {"relu", {pool_size = 3, strides = 2}, 2, 3, 5, {center = false}},
                               {"relu", {pool_size = 4, strides = 2}, 3, 2, 32, {}, "float64"}}) do
          for _, n in ipairs({1, 3, 5}) do
            np.random.seed(11)
            local dt = case[7] or "float32"
            local s = nn.HybridSequential()
            case[6].dtype = dt
            local bn = nn.BatchNorm(case[6])
            s:add(nn.Conv2D{channels = case[5], kernel_size = case[4], activation = case[1], dtype = dt},
                  nn.MaxPool2D(case[2]), bn)
            s:initialize{device = dev, init = init.Xavier()}
            local x = np.random.uniform(-1, 1, {n, case[3], 17, 15}, {device = dev, dtype = dt})
            s(x) -- deferred shapes
            local O = case[5]
            for name, lo in pairs({gamma = 0.5, beta = -1, running_mean = -0.5, running_var = 0.1}) do
              bn[name]:set_data(np.random.uniform(lo, lo + 1, {O}, {dtype = dt}))
            end
            local calls = {}
            local y1 = spying("convolution_maxpool", function(...) calls[#calls + 1] = select(6, ...) ~= nil end,
                              function() return s(x):asnumpy() end)
            assert.same(dev.device_type == "cpu" and {true} or {}, calls)
            local h = bn:register_forward_hook(function() end) -- the batch norm apart
            local y2 = s(x)
            h.detach()
            H.assert_equal(y1, H.values(y2))
            s:hybridize{static_alloc = true}
            H.assert_equal(y1, H.values(s(x)))
            H.assert_equal(y1, H.values(s(x)))
            s:hybridize(false)
          end
        end
      end)
      npx.set_num_threads(threads)
      assert(ok, err)
    end)
    it("a BatchNorm after the pool stays apart while recording or training", function()
      local s = nn.HybridSequential()
      s:add(nn.Conv2D{channels = 16, kernel_size = 2, activation = "relu"}, nn.MaxPool2D{pool_size = 2},
            nn.BatchNorm())
      s:initialize{device = dev}
      local x = np.random.uniform(-1, 1, {4, 3, 9, 9}, {device = dev})
      s(x)
      local with_bn = {}
      spying("convolution_maxpool", function(...) with_bn[#with_bn + 1] = select(6, ...) ~= nil end, function()
        autograd.record(function() return s(x) end)                      -- training
        autograd.record(function() return s(x) end, {train_mode = false}) -- recording
        autograd.train_mode(function() return s(x) end)                  -- training, not recording
      end)
      assert.same(dev.device_type == "cpu" and {false, false, false} or {}, with_bn)
    end)
  end)
 end
end

-- Conv2D (no activation) + BatchNorm [+ Activation('relu')] in predict mode
-- runs as one op on the CPU (npx.convolution_bn): the same bits as the
-- blocks apart, eager and hybridized, on every convolution path.
for _, dev in ipairs(H.devices()) do
  describe(("Conv2D + BatchNorm fusion on %s"):format(tostring(dev)), function()
    it("one op in predict mode, the same bits as apart", function()
      -- oneDNN (float32, parts of the channels at batch 1, of the samples at
      -- 4), groups and float64 (luon's kernels), Winograd (3x3 at batch 4
      -- with it on), oneDNN off
      for _, case in ipairs({{1, {}, true}, {4, {}, false}, {1, {groups = 2}, true}, {4, {}, true, "float64"},
                             {4, {padding = 1}, true, nil, "1"}, {1, {strides = 2}, false, nil, nil, "0"},
                             {3, {}, true, nil, nil, nil, {scale = false, center = false}}}) do
        local n, more, relu, dt = case[1], case[2], case[3], case[4] or "float32"
        local env = {LUON_CONV_WINOGRAD = case[5], LUON_CONV_DNNL = case[6]}
        for k, v in pairs(env) do ffi.C.setenv(k, v, 1) end
        local ok, err = pcall(function()
          np.random.seed(3)
          local s = nn.HybridSequential()
          local o = {channels = 32, kernel_size = 3, use_bias = false, dtype = dt}
          for k, v in pairs(more) do o[k] = v end
          local bno = case[7] or {}
          bno.dtype = dt
          local bn = nn.BatchNorm(bno)
          s:add(nn.Conv2D(o), bn)
          if relu then s:add(nn.Activation("relu")) end
          s:add(nn.Dense(3, {dtype = dt}))
          s:initialize{device = dev, init = init.Xavier()}
          local x = np.random.uniform(-1, 1, {n, 8, 11, 10}, {device = dev, dtype = dt})
          s(x)
          for name, lo in pairs({gamma = 0.5, beta = -1, running_mean = -0.5, running_var = 0.1}) do
            bn[name]:set_data(np.random.uniform(lo, lo + 1, {32}, {dtype = dt}))
          end
          local calls = 0
          local y1 = spying("convolution_bn", function() calls = calls + 1 end, function() return s(x):asnumpy() end)
          assert.equal(dev.device_type == "cpu" and 1 or 0, calls)
          local h = bn:register_forward_hook(function() end)
          local y2 = s(x)
          h.detach()
          H.assert_equal(y1, H.values(y2))
          s:hybridize{static_alloc = true}
          H.assert_equal(y1, H.values(s(x)))
          H.assert_equal(y1, H.values(s(x)))
        end)
        for k in pairs(env) do ffi.C.unsetenv(k) end
        assert(ok, err)
      end
    end)
    it("stays apart while recording or training", function()
      local s = nn.HybridSequential()
      s:add(nn.Conv2D{channels = 16, kernel_size = 3}, nn.BatchNorm(), nn.Activation("relu"))
      s:initialize{device = dev}
      local x = np.random.uniform(-1, 1, {2, 3, 9, 9}, {device = dev})
      s(x)
      local calls = 0
      spying("convolution_bn", function() calls = calls + 1 end, function()
        autograd.record(function() return s(x) end)
        autograd.record(function() return s(x) end, {train_mode = false})
        autograd.train_mode(function() return s(x) end)
      end)
      assert.equal(0, calls)
    end)
  end)
end

describe("npx.convolution_bn errors", function()
  it("name the argument and what was expected", function()
    local x, w, v = np.ones({1, 2, 5, 5}), np.ones({3, 2, 2, 2}), np.ones({3})
    local bn = {gamma = v, beta = v, running_mean = v, running_var = v}
    H.assert_error(function() return npx.convolution_bn(x, w, nil, {act_type = "relu"}, bn) end,
                   {"convolution_bn: act_type belongs to bn"})
    H.assert_error(function() return npx.convolution_bn(x, w, nil, {}, {gamma = v, beta = v, running_mean = v,
                                                                         running_var = np.ones({2})}) end,
                   {"conv2d_bn: running_var has shape (2,); expected (3,)"})
    H.assert_error(function() return npx.convolution_bn(x, w, nil, {}, {gamma = v, act_type = "tanh"}) end,
                   {"convolution_bn: bn.act_type can only be 'relu', got 'tanh'"})
    x:attach_grad()
    H.assert_error(function() return autograd.record(function() return npx.convolution_bn(x, w, nil, {}, bn) end) end,
                   {"convolution_bn: the batch norm (bn) runs in predict mode with no gradient"})
    local y = npx.convolution_bn(x, w, nil, {}, bn)
    local want = npx.batch_norm(npx.convolution(x, w, nil, {}), v, v, v, v, {fix_gamma = true})
    H.assert_equal(y, H.values(want))
  end)
end)

describe("conv2d_maxpool on ties", function()
  it("routes the gradient to each window's first maximum, as conv2d then max_pool2d", function()
    -- small integers: many equal maxima in every window, positive and zero;
    -- 2 channels take the dense backward, 16 the sparse one; 16, 32 and 128
    -- output channels the channels-last forward
    for _, case in ipairs({{2, {kernel = 4, stride = 2}}, {2, {kernel = 3, stride = 1, pad = 1}},
                           {16, {kernel = 4, stride = 2}}, {2, {kernel = 4, stride = 2}, 16},
                           {3, {kernel = 3, stride = 1}, 32}, {32, {kernel = 4, stride = 2}, 128}}) do
    local C, pool, O = case[1], case[2], case[3] or 3
    local x = np.random.randint(0, 3, {2, C, 20, 37}):astype("float32")
    local w = np.ones({O, C, 2, 2})
    local bias = {}
    for o = 1, O do bias[o] = ({0, -4 * C / 2, 1})[(o - 1) % 3 + 1] end
    local b = np.array(bias, {dtype = "float32"})
    do
      local res = {}
      for _, fused in ipairs({false, true}) do
        x:attach_grad(); w:attach_grad(); b:attach_grad()
        local y = autograd.record(function()
          local z = fused and npx.convolution_maxpool(x, w, b, {act_type = "relu"}, pool)
                    or npx.pooling(npx.convolution(x, w, b, {act_type = "relu"}), pool)
          return z
        end)
        y:backward(np.arange(y.size):reshape(y.shape):astype("float32"))
        res[#res + 1] = {H.values(y), H.values(x.grad), H.values(w.grad), H.values(b.grad)}
      end
      -- y and dx exactly routed; dw and db are float32 sums in another order
      for k = 1, 4 do H.assert_close(res[2][k], res[1][k], k <= 2 and 1e-6 or 1e-5) end
    end
    end
  end)
end)

describe("conv2d_maxpool on NaN", function()
  -- NaN skipped in each window, a window of NaN alone giving NaN (which the
  -- relu keeps), as the relu and max_pool2d apart, in predict mode (the
  -- channels-last path without indices for 32 and 64 out channels, the
  -- general one for 5) and while recording, with the same gradients
  it("gives conv2d, relu, max_pool2d's values and gradients", function()
    -- (the last cases: a NaN bias, which makes every window of its channel
    -- all NaN apart: NaN, the gradient at each window's first position)
    for _, case in ipairs({{3, 32, "relu", 1}, {3, 32, nil, 2}, {8, 64, "relu", 1}, {2, 5, "relu", 2},
                           {16, 64, "relu", 2}, {3, 16, nil, 2, true}, {2, 5, nil, 1, true}}) do
      local C, O, act, n, nan_bias = unpack(case)
      np.random.seed(3)
      local x = np.random.uniform(-1, 1, {n, C, 21, 19})
      for _, r in ipairs({1, 3}) do -- every conv output of the first window
        for _, c in ipairs({1, 3}) do x[{0, 0, r, c}] = 0 / 0 end
      end
      x[{n - 1, C - 1, 9, 12}] = 0 / 0 -- inside other windows
      local w = np.random.uniform(-1, 1, {O, C, 2, 2})
      local b = np.random.uniform(-0.5, 0.5, {O})
      if nan_bias then b[{0}] = 0 / 0 end
      local pool = {kernel = 4, stride = 2}
      local function both(recording)
        local res = {}
        for _, fused in ipairs({false, true}) do
          local function f()
            return fused and npx.convolution_maxpool(x, w, b, {act_type = act}, pool)
                   or npx.pooling(npx.convolution(x, w, b, {act_type = act}), pool)
          end
          if recording then
            x:attach_grad(); w:attach_grad()
            local y = autograd.record(f)
            y:backward(np.ones(y.shape))
            res[#res + 1] = {H.values(y), H.values(x.grad), H.values(w.grad)}
          else
            res[#res + 1] = {H.values(f())}
          end
        end
        return res
      end
      -- the convolutions sum in other orders: NaN where NaN, else close
      local pred = both(false)
      H.assert_close(pred[2][1], pred[1][1], 1e-5)
      assert.is_true(pred[2][1][1][1][1][1] ~= pred[2][1][1][1][1][1]) -- NaN
      -- recording: y and dx (dw apart multiplies the NaN inputs by zeros:
      -- NaN; the fused op's sums run over the windows' winners alone)
      local rec = both(true)
      for k = 1, 2 do H.assert_close(rec[2][k], rec[1][k], 1e-5) end
    end
  end)
end)

-- Max pooling skips NaN, as MXNet's does: a window gives its largest number
-- (a window of NaN alone: NaN, where MXNet gives the lowest float) and its
-- gradient goes to the first position holding it in row-major order (a
-- window of NaN alone: its first position). x and dy are flat tables over
-- (D, H, W); k, s, p per axis; returns y and dx, flat.
local function max_pool_nan_ref(x, dims, k, s, p, dy)
  local o, y, dx = {}, {}, {}
  for a = 1, 3 do o[a] = math.floor((dims[a] + 2 * p[a] - k[a]) / s[a]) + 1 end
  for i = 1, #x do dx[i] = 0 end
  local at = 0
  for e = 0, o[1] - 1 do
    for i = 0, o[2] - 1 do
      for j = 0, o[3] - 1 do
        at = at + 1
        local best, arg
        for kd = 0, k[1] - 1 do
          for ki = 0, k[2] - 1 do
            for kj = 0, k[3] - 1 do
              local d, r, q = e * s[1] - p[1] + kd, i * s[2] - p[2] + ki, j * s[3] - p[3] + kj
              if d >= 0 and d < dims[1] and r >= 0 and r < dims[2] and q >= 0 and q < dims[3] then
                local n = (d * dims[2] + r) * dims[3] + q + 1
                local v = x[n]
                if not arg or v > best or (best ~= best and v == v) then best, arg = v, n end
              end
            end
          end
        end
        y[at] = best
        dx[arg] = dx[arg] + dy[at]
      end
    end
  end
  return y, dx
end

for _, dev in ipairs(H.devices()) do
  describe("max pooling on NaN on " .. tostring(dev), function()
    it("skips NaN as MXNet does, in predict mode and recording, with the gradient at the first maximum", function()
      local nan = 0 / 0
      -- {dims (D,H,W), kernel, stride, pad, dtype}: padded windows (the
      -- separable search over a padded row), stride 2 with 4 columns and no
      -- padding (the AVX-512 backward), float64, 3-d
      for _, case in ipairs({{{1, 9, 11}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, "float32"},
                             {{1, 10, 13}, {1, 4, 4}, {1, 2, 2}, {0, 0, 0}, "float32"},
                             {{1, 7, 8}, {1, 2, 3}, {1, 1, 2}, {0, 1, 1}, "float64"},
                             {{4, 5, 6}, {2, 3, 2}, {2, 1, 2}, {1, 1, 0}, "float32"}}) do
        local dims, k, s, p, dt = unpack(case)
        local n = dims[1] * dims[2] * dims[3]
        np.random.seed(13)
        local x = np.random.uniform(-1, 1, {n}):totable()
        -- NaN at every window's first real position of the top-left window,
        -- its whole real part (a window of NaN alone), and here and there
        for _, at in ipairs({1, 2, dims[3] + 1, dims[3] + 2, 7, 2 * dims[3] + 5, n - 3, n}) do x[at] = nan end
        local shape = dims[1] == 1 and {1, 1, dims[2], dims[3]} or {1, 1, dims[1], dims[2], dims[3]}
        local kern = dims[1] == 1 and {k[2], k[3]} or k
        local opts = {kernel = kern, stride = dims[1] == 1 and {s[2], s[3]} or s,
                      pad = dims[1] == 1 and {p[2], p[3]} or p, pool_type = "max"}
        local xa = np.array(x, {dtype = dt, device = dev}):reshape(shape)
        local y0 = npx.pooling(xa, opts)
        local dy = np.arange(1, y0.size + 1):astype(dt):reshape(y0.shape):copyto(dev)
        local want_y, want_dx = max_pool_nan_ref(x, dims, k, s, p, dy:reshape({-1}):totable())
        H.assert_close(y0:reshape({-1}), want_y, 0)
        xa:attach_grad()
        local y = autograd.record(function() return npx.pooling(xa, opts) end)
        y:backward(dy)
        H.assert_close(y:reshape({-1}), want_y, 0)
        H.assert_close(xa.grad:reshape({-1}), want_dx, 0)
      end
    end)
  end)
end

describe("conv2d_maxpool errors", function()
  it("name the op and the bad value", function()
    local x, w = np.ones({2, 1, 20, 20}), np.ones({1, 1, 2, 2})
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 16}) end,
                   {"conv2d_maxpool: pool windows of at most 254 taps, got (16,16)"})
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2, pool_type = "avg"}) end,
                   {"convolution_maxpool: the pool must be max pooling"})
    H.assert_error(function() return npx.convolution_maxpool(x, np.ones({1, 2, 2, 2}), nil, {}, {kernel = 2}) end,
                   {"conv2d_maxpool: input has 1 channels but weight expects 2"})
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 30}) end,
                   {"conv2d_maxpool: kernel (30,30) is larger than the input"})
    local v = np.ones({1})
    local bn = {gamma = v, beta = v, running_mean = v, running_var = np.ones({2})}
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2}, bn) end,
                   {"conv2d_maxpool: running_var has shape (2,); expected (1,)"})
    bn.running_var = v
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2}, {gamma = v}) end,
                   {"convolution_maxpool: bn.beta must be an ndarray, got nil"})
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2}, {gama = v}) end,
                   {"convolution_maxpool: unknown batch norm option 'gama'"})
    bn.eps = -1
    H.assert_error(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2}, bn) end,
                   {"conv2d_maxpool: eps = -1 must be >= 0"})
    bn.eps = nil
    x:attach_grad()
    H.assert_error(function()
      return autograd.record(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2}, bn) end)
    end, {"convolution_maxpool: the batch norm (bn) runs in predict mode with no gradient"})
    -- the op itself, INFER 1 while recording
    local function infer_attrs() -- core.attrs() is a shared struct: filled anew for each call
      local a = core.attrs()
      a.i[S.CONV2D_STRIDE_H], a.i[S.CONV2D_STRIDE_W], a.i[S.CONV2D_DILATE_H], a.i[S.CONV2D_DILATE_W] = 1, 1, 1, 1
      a.i[S.CONV2D_GROUPS], a.i[S.CMP_KERNEL_H], a.i[S.CMP_KERNEL_W] = 1, 2, 2
      a.i[S.CMP_STRIDE_H], a.i[S.CMP_STRIDE_W], a.i[S.CMP_INFER], a.ni = 2, 2, 1, S.CMP_BN + 1
      return a
    end
    -- INFER 1 while recording keeps the indices: the gradient flows (an
    -- inference graph replayed under autograd.record)
    local y = autograd.record(function() return core.call(core.op_ids.conv2d_maxpool, {x, w}, infer_attrs(), nil, 2)[1] end)
    y:backward()
    local g1 = x.grad:asnumpy()
    autograd.record(function() return npx.convolution_maxpool(x, w, nil, {}, {kernel = 2}) end):backward()
    H.assert_equal(g1, H.values(x.grad))
    assert.equal(2 * 81 * 4, x.grad:sum():item()) -- each window's winner takes its 4 taps' weights
    -- and outside: no indices
    local outs = core.call(core.op_ids.conv2d_maxpool, {x, w}, infer_attrs(), nil, 2)
    assert.same({0}, outs[2].shape)
    H.assert_equal(outs[1], H.values(npx.convolution_maxpool(x, w, nil, {}, {kernel = 2})))
  end)
end)

describe("layer argument errors", function()
  it("name the argument and what was expected", function()
    H.assert_error(function() return nn.Dense() end, {"Dense: units must be a positive integer, got nil"})
    H.assert_error(function() return nn.Dense(3, {activaton = "relu"}) end, {"Dense: unknown argument 'activaton'"})
    H.assert_error(function() return nn.Conv2D{channels = 4} end, {"Conv2D: kernel_size is required"})
    H.assert_error(function() return nn.Conv2D{channels = 4, kernel_size = {1, 2, 3}} end,
                   {"kernel_size must be an integer >= 1 or a list of two {h, w}, got {1, 2, 3}"})
    H.assert_error(function() return nn.Conv2D{channels = 4, kernel_size = 0} end, {"kernel_size", "got 0"})
    H.assert_error(function() return nn.Conv2D{channels = 4, kernel_size = 3, strides = 1.5} end,
                   {"strides must be an integer >= 1", "got 1.5"})
    H.assert_error(function() return nn.Conv2D{channels = 4, kernel_size = 3, padding = -1} end,
                   {"padding must be an integer >= 0"})
    H.assert_error(function() return nn.MaxPool2D({"a"}) end, {"MaxPool2D: pool_size", "{'a'}"})
    H.assert_error(function() return nn.Conv2D{channels = 4, kernel_size = 3, in_channels = "x"} end,
                   {"Conv2D: in_channels must be an integer >= 0", "'x'"})
    H.assert_error(function() return nn.Dense(4, {in_units = -2}) end, {"Dense: in_units", "-2"})
    H.assert_error(function() return nn.BatchNorm{axis = "x"} end, {"BatchNorm: axis must be an integer"})
    H.assert_error(function() return nn.Dropout(0 / 0) end, {"Dropout: rate must be a number in [0, 1]"})
    H.assert_error(function() return luon.init.Xavier{magnitude = -3} end,
                   {"Xavier: magnitude must be a finite number >= 0, got -3"})
    H.assert_error(function() return luon.init.Uniform("x") end, {"Uniform: scale", "'x'"})
    -- keywords are checked as every other function's (core.args)
    H.assert_error(function() return luon.init.Uniform{scal = 0.1} end,
                   {"Uniform: unknown argument 'scal' (known: scale); did you mean 'scale'?"})
    H.assert_error(function() return luon.init.Xavier{magnitud = 2} end, {"Xavier: unknown argument 'magnitud'"})
    H.assert_error(function() return luon.init.MSRAPrelu("in", {slop = 0.1}) end, {"MSRAPrelu: unknown argument 'slop'"})
    assert.are.equal(0.2, luon.init.Normal{sigma = 0.2}.sigma)
    assert.are.equal(2, luon.init.Xavier("gaussian", {magnitude = 2}).magnitude)
    H.assert_error(function() return luon.init.Initializer()(np.zeros({2})) end,
                   {"Initializer(): the base class fills no array"})
    H.assert_error(function() return nn.Conv2D{channels = 4, kernel_size = 2, layout = "NHWC"} end,
                   {"layout must be 'NCHW'"})
    H.assert_error(function() return nn.Activation("swish") end, {"Activation: activation must be", "swish"})
    H.assert_error(function() return nn.Dropout(1.5) end, {"Dropout: rate must be a number in [0, 1], got 1.5"})
    H.assert_error(function() return nn.MaxPool2D{pool_size = 2, count_include_pad = false} end,
                   {"only average pooling"})
    H.assert_error(function() local y = nn.Dense(2)({1, 2}); return y end,
                   {"Dense: a HybridBlock's inputs must be ndarrays, got table"})
    -- a shape error inside forward comes from the op and names the values
    local d = nn.Dense(2, {in_units = 3})
    d:initialize()
    local msg = H.assert_error(function() local y = d(np.ones({2, 4})); return y end, {"matmul"})
    assert.truthy(msg:find("gluon_layers_spec.lua:", 1, true), msg)
    H.assert_close(d(np.ones({1, 3})):sum(), d(np.ones({1, 3})):sum():item())
  end)
end)
