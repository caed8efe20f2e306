-- half_spec: float16 and bfloat16 arrays through matmul, fully_connected and
-- convolution, forward and backward, on every device: the result is of the
-- 16-bit type, computed with float32 accumulation, so it matches float32
-- on the same (rounded) inputs within float16's 1e-2 / bfloat16's 5e-2
-- (relative, H.assert_close); mixed dtypes follow the promotion rule; ops
-- that do not take the 16-bit types say so.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local autograd = H.luon.autograd

local kinds = {{dt = "float16", tol = 1e-2}, {dt = "bfloat16", tol = 5e-2}}

-- Random normal values of shape on dev, already rounded to dt: the 16-bit
-- array and the float32 array of the same values.
local function pair(shape, dt, dev, seed)
  np.random.seed(seed)
  local h = np.random.normal(0, 1, shape):astype(dt):as_in_context(dev)
  return h, h:astype("float32")
end

-- fn(...) recorded on inputs (gradients attached) and its backward with the
-- head gradient dy (made by dy_of(out), in out's dtype): the output and the
-- inputs' gradients.
local function forward_backward(fn, dy_of, ...)
  local xs = {...}
  for _, x in ipairs(xs) do x:attach_grad() end
  local y = autograd.record(function() return fn(unpack(xs)) end)
  y:backward(dy_of(y))
  local grads = {}
  for k, x in ipairs(xs) do grads[k] = x.grad end
  return y, grads
end

-- The 16-bit run of fn on the hs and the float32 run on the fs agree.
local function agree(kind, fn, hs, fs, seed)
  local dy16
  local function dy_of(y)
    if not dy16 then dy16 = pair(y.shape, kind.dt, y.device, seed) end
    return dy16:astype(y.dtype)
  end
  local y16, g16 = forward_backward(fn, dy_of, unpack(hs))
  local y32, g32 = forward_backward(fn, dy_of, unpack(fs))
  H.check(y16, y32:totable(), {dtype = kind.dt, shape = y32.shape, device = hs[1].device, tol = kind.tol})
  for k = 1, #hs do
    H.check(g16[k], g32[k]:totable(), {dtype = kind.dt, shape = hs[k].shape, tol = kind.tol})
  end
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    for _, kind in ipairs(kinds) do
      local dt = kind.dt
      describe(dt, function()
        it("matmul: 2-d, batched with broadcasting, transposed", function()
          local a16, a32 = pair({5, 7}, dt, dev, 1)
          local b16, b32 = pair({7, 3}, dt, dev, 2)
          H.check(np.matmul(a16, b16), np.matmul(a32, b32):totable(), {dtype = dt, shape = {5, 3}, tol = kind.tol})
          local c16, c32 = pair({2, 1, 3, 4}, dt, dev, 3)
          local d16, d32 = pair({3, 4, 5}, dt, dev, 4)
          H.check(np.matmul(c16, d16), np.matmul(c32, d32):totable(), {dtype = dt, shape = {2, 3, 3, 5}, tol = kind.tol})
          H.check(np.matmul(b16.T, a16.T), np.matmul(b32.T, a32.T):totable(), {dtype = dt, tol = kind.tol})
        end)

        it("matmul accumulates in float32 (4096 ones sum exactly)", function()
          -- 16-bit accumulation stops at 2048 (float16) or 256 (bfloat16)
          local ones = np.ones({1, 4096}, {dtype = dt, device = dev})
          H.check(np.matmul(ones, ones.T), {{4096}}, {dtype = dt, tol = 0})
        end)

        it("matmul backward gives gradients of the 16-bit type", function()
          local a16, a32 = pair({4, 6}, dt, dev, 5)
          local b16, b32 = pair({3, 6, 2}, dt, dev, 6)
          agree(kind, np.matmul, {a16, b16}, {a32, b32}, 7)
        end)

        it("fully_connected with bias and relu, forward and backward", function()
          local x16, x32 = pair({4, 2, 3}, dt, dev, 8)
          local w16, w32 = pair({5, 6}, dt, dev, 9)
          local b16, b32 = pair({5}, dt, dev, 10)
          local function fc(x, w, b) return npx.relu(npx.fully_connected(x, w, b, {num_hidden = 5})) end
          agree(kind, fc, {x16, w16, b16}, {x32, w32, b32}, 11)
        end)

        it("convolution with bias and fused relu, forward and backward", function()
          local x16, x32 = pair({2, 3, 7, 6}, dt, dev, 12)
          local w16, w32 = pair({4, 3, 3, 3}, dt, dev, 13)
          local b16, b32 = pair({4}, dt, dev, 14)
          local function conv(x, w, b)
            return npx.convolution(x, w, b, {kernel = {3, 3}, num_filter = 4, pad = {1, 1}, act_type = "relu"})
          end
          agree(kind, conv, {x16, w16, b16}, {x32, w32, b32}, 15)
        end)

        it("convolution strided, dilated and grouped, no bias, forward and backward", function()
          local x16, x32 = pair({2, 4, 9, 8}, dt, dev, 16)
          local w16, w32 = pair({6, 2, 3, 2}, dt, dev, 17)
          local function conv(x, w)
            return npx.convolution(x, w, {kernel = {3, 2}, num_filter = 6, stride = {2, 1}, dilate = {1, 2},
                                          num_group = 2, no_bias = true})
          end
          agree(kind, conv, {x16, w16}, {x32, w32}, 18)
        end)

        it("convolution accumulates in float32 (4608 ones sum exactly)", function()
          local x = np.ones({1, 512, 3, 3}, {dtype = dt, device = dev})
          local w = np.ones({1, 512, 3, 3}, {dtype = dt, device = dev})
          H.check(npx.convolution(x, w, {kernel = {3, 3}, num_filter = 1, no_bias = true}), {{{{4608}}}},
                  {dtype = dt, tol = 0})
        end)

        it("a Dense layer of this dtype: initialised, forward and backward", function()
          local layer = H.luon.gluon.nn.Dense(5, {in_units = 6, activation = "relu", dtype = dt})
          layer:initialize{init = H.luon.init.Uniform(1), device = dev}
          local w, b = layer.weight:data(dev), layer.bias:data(dev)
          H.check(w, nil, {dtype = dt, shape = {5, 6}, device = dev})
          local x16, x32 = pair({4, 6}, dt, dev, 21)
          local y = autograd.record(function() return layer(x16) end)
          y:backward(np.ones(y.shape, {dtype = dt, device = dev}))
          local w32, b32 = w:astype("float32"), b:astype("float32")
          local function fc(x, ww, bb) return npx.relu(npx.fully_connected(x, ww, bb, {num_hidden = 5})) end
          local _, g32 = forward_backward(fc, function(o) return np.ones(o.shape, {device = dev}) end, x32, w32, b32)
          H.check(y, fc(x32, w32, b32):totable(), {dtype = dt, tol = kind.tol})
          H.check(layer.weight:grad(dev), g32[2]:totable(), {dtype = dt, tol = kind.tol})
          H.check(layer.bias:grad(dev), g32[3]:totable(), {dtype = dt, tol = kind.tol})
        end)

        it("elementwise and reductions of a layer keep the 16-bit type", function()
          local x16, x32 = pair({3, 4}, dt, dev, 19)
          H.check(x16 + x16, (x32 + x32):totable(), {dtype = dt, tol = kind.tol})
          H.check(x16 * x16, (x32 * x32):totable(), {dtype = dt, tol = kind.tol})
          H.check(npx.relu(x16), npx.relu(x32):totable(), {dtype = dt, tol = 0})
          H.check(x16:sum(0), x32:sum(0):totable(), {dtype = dt, tol = kind.tol})
          H.check(x16:mean(), x32:mean():item(), {dtype = dt, tol = kind.tol})
          H.check(x16:greater(0), x32:greater(0):totable(), {dtype = "bool"})
        end)
      end)
    end

    describe("mixed dtypes follow the promotion rule", function()
      local h = np.array({{1, 2}, {3, 4}}, {dtype = "float16", device = dev})
      local f = np.array({{1, 0}, {0, 1}}, {dtype = "float32", device = dev})
      it("with float32, float64, bfloat16: the wider float; with integers: float16", function()
        H.check(np.matmul(h, f), {{1, 2}, {3, 4}}, {dtype = "float32"})
        H.check(h + f, {{2, 2}, {3, 5}}, {dtype = "float32"})
        H.check(h + f:astype("float64"), {{2, 2}, {3, 5}}, {dtype = "float64"})
        H.check(h + f:astype("bfloat16"), {{2, 2}, {3, 5}}, {dtype = "float32"})
        H.check(h + f:astype("int32"), {{2, 2}, {3, 5}}, {dtype = "float16"})
        H.check(h * 2, {{2, 4}, {6, 8}}, {dtype = "float16"})
      end)
      it("convolution of float16 data with float32 weights gives float32", function()
        local x = np.ones({1, 2, 3, 3}, {dtype = "float16", device = dev})
        local w = np.ones({1, 2, 2, 2}, {dtype = "float32", device = dev})
        H.check(npx.convolution(x, w, {kernel = {2, 2}, num_filter = 1, no_bias = true}),
                {{{{8, 8}, {8, 8}}}}, {dtype = "float32"})
      end)
    end)

    it("ops that do not take the 16-bit types name the dtype", function()
      local h = np.ones({2, 3}, {dtype = "float16", device = dev})
      H.assert_error(function() return npx.softmax(h) end, {"softmax", "float16", "astype"})
      H.assert_error(function() return npx.log_softmax(h:astype("bfloat16")) end,
                     {"log_softmax", "bfloat16", "astype"})
      H.assert_error(function()
        return npx.pooling(h:reshape({1, 1, 2, 3}), {kernel = {2, 2}, pool_type = "max"})
      end, {"float16", "astype"})
      -- and the runtime stays usable
      H.check(npx.softmax(h:astype("float32")), {{1 / 3, 1 / 3, 1 / 3}, {1 / 3, 1 / 3, 1 / 3}})
    end)
  end)
end
