-- autograd_function_spec: custom functions (autograd.Function:extend),
-- autograd.grad, and second derivatives with create_graph, each checked
-- by finite differences in float64; their errors, and the runtime staying
-- usable after them; a custom function inside a Block on every device.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon
local autograd = luon.autograd
local core = require("luon.core")
local ffi = core.ffi

local EPS = 1e-6
local seed = 100
local function randn(s, dev)
  seed = seed + 1
  np.random.seed(seed)
  local x = np.random.normal(0, 1, s, {dtype = "float64"})
  return dev and x:as_in_context(dev) or x
end
local function rand(s, lo, hi)
  seed = seed + 1
  np.random.seed(seed)
  return np.random.uniform(lo, hi, s, {dtype = "float64"})
end
local function F(t, dev) return np.array(t, {dtype = "float64", device = dev}) end

-- A stable sigmoid as MXNet's documentation writes it.
local Sigmoid = autograd.Function:extend{
  name = "Sigmoid",
  forward = function(self, x)
    local y = 1 / (1 + np.exp(-x))
    self:save_for_backward(y)
    return y
  end,
  backward = function(self, dy)
    local y = self.saved_tensors[1]
    return dy * y * (1 - y)
  end,
}

-- The elements of a float64 array on the CPU as a Lua list.
local function values(x) return H.values(x:as_in_context(npx.cpu()):reshape({x.size})) end

-- d sum(R * f(xs)) / d xs[k] by central differences, element by element.
local function numeric(f, xs, k, R)
  local x = xs[k]
  local p = ffi.cast("double*", core.info_of(x).data)
  local out = {}
  for j = 0, x.size - 1 do
    local v = p[j]
    p[j] = v + EPS
    local lp = (f(unpack(xs)) * R):sum():item()
    p[j] = v - EPS
    local lm = (f(unpack(xs)) * R):sum():item()
    p[j] = v
    out[j + 1] = (lp - lm) / (2 * EPS)
  end
  return out
end

local function assert_near(got, want, tol, what)
  assert.equal(#want, #got, what)
  for j = 1, #want do
    if not (math.abs(got[j] - want[j]) <= tol * math.max(1, math.abs(got[j]), math.abs(want[j]))) then
      error(("%s, element %d: got %.10g, want %.10g"):format(what, j - 1, got[j], want[j]), 0)
    end
  end
end

describe("autograd.Function", function()
  it("a custom sigmoid's gradient equals np's and finite differences", function()
    local x = randn({3, 4})
    x:attach_grad()
    local y = autograd.record(function() return Sigmoid()(x) end)
    local R = randn({3, 4})
    y:backward(R)
    local want = numeric(function(v) return npx.sigmoid(v) end, {x}, 1, R)
    assert_near(values(x.grad), want, 1e-6, "custom sigmoid")
    local x2 = x:copy()
    x2:attach_grad()
    autograd.record(function() return npx.sigmoid(x2) end):backward(R)
    assert_near(values(x.grad), values(x2.grad), 1e-12, "custom vs npx.sigmoid")
    H.assert_close(values(y), values(npx.sigmoid(x)), 1e-12)
  end)

  it("takes several inputs and outputs, and a non-array input", function()
    -- f(x, k, w) = (x * w * k, x + w): backward gets both output gradients
    local MulAdd = autograd.Function:extend{
      forward = function(self, x, k, w)
        self:save_for_backward(x, w)
        self.k = k
        return x * w * k, x + w
      end,
      backward = function(self, da, db)
        local x, w = self.saved_tensors[1], self.saved_tensors[2]
        return da * w * self.k + db, "ignored", da * x * self.k + db
      end,
    }
    local x, w = randn({2, 3}), randn({2, 3})
    x:attach_grad()
    w:attach_grad()
    local Ra, Rb = randn({2, 3}), randn({2, 3})
    local a, b = autograd.record(function() return MulAdd()(x, 1.5, w) end)
    autograd.backward({a, b}, {Ra, Rb})
    local function loss(xv, wv) return xv * wv * 1.5 * Ra + (xv + wv) * Rb end
    local one = F(1)
    assert_near(values(x.grad), numeric(function(xv, wv) return loss(xv, wv) end, {x, w}, 1, one), 1e-6, "dx")
    assert_near(values(w.grad), numeric(function(xv, wv) return loss(xv, wv) end, {x, w}, 2, one), 1e-6, "dw")
  end)

  it("gives zeros to its backward for an output no gradient reached", function()
    local seen
    local Two = autograd.Function:extend{
      forward = function(self, x) return x * 2, x * 3 end,
      backward = function(self, da, db)
        seen = values(db)
        return da * 2 + db * 3
      end,
    }
    local x = F({1, 2})
    x:attach_grad()
    local a = autograd.record(function() return (Two()(x)) end)
    a:backward()
    assert.same({0, 0}, seen)
    assert.same({2, 2}, values(x.grad))
  end)

  it("outside record runs forward only, and each instance is called once", function()
    local f = Sigmoid()
    local y = f(F({0}))
    assert.same({0.5}, values(y))
    H.assert_error(function() f(F({0})) end, {"Sigmoid: each instance is called once"})
  end)

  it("is differentiable again with create_graph when its backward computes from its inputs", function()
    -- (forward is not recorded: what it saves are constants to a second derivative)
    local Sig = autograd.Function:extend{
      forward = function(self, x)
        self:save_for_backward(x)
        return npx.sigmoid(x)
      end,
      backward = function(self, dy)
        local s = npx.sigmoid(self.saved_tensors[1])
        return dy * s * (1 - s)
      end,
    }
    local x = F({0.3, -1.2, 2})
    x:attach_grad()
    local dx = autograd.record(function()
      return autograd.grad(Sig()(x), x, {create_graph = true})
    end)
    -- s' = s (1 - s); s'' = s' (1 - 2 s)
    local d2 = autograd.grad(autograd.record(function() return dx:sum() end), x)
    local s = values(npx.sigmoid(x))
    local want = {}
    for j = 1, 3 do want[j] = s[j] * (1 - s[j]) * (1 - 2 * s[j]) end
    assert_near(values(d2), want, 1e-12, "custom sigmoid''")
  end)

  it("raises clear errors for a wrong backward and stays usable", function()
    local function run(backward, ...)
      local Bad = autograd.Function:extend{name = "Bad", forward = function(self, x) return x * 2 end,
                                           backward = backward}
      local x = F({{1, 2, 3}, {4, 5, 6}})
      x:attach_grad()
      local y = autograd.record(function() return Bad()(x) end)
      y:backward()
    end
    H.assert_error(function() run(function(self, dy) return np.ones({3}, {dtype = "float64"}) end) end,
                   {"Bad: backward's gradient 1 has shape (3,) but input 1 has shape (2,3)"})
    H.assert_error(function() run(function(self, dy) return 7 end) end,
                   {"Bad: backward's gradient 1 must be an array", "got 7"})
    H.assert_error(function() run(function(self, dy) end) end,
                   {"Bad: backward returned 0 values, expected one gradient per input of forward (1)"})
    H.assert_error(function() run(function(self, dy) error("boom") end) end, {"boom"})
    -- a gradient of another dtype is converted
    local x = F({1, 2})
    x:attach_grad()
    local Cast = autograd.Function:extend{forward = function(self, v) return v * 1 end,
                                          backward = function(self, dy) return dy:astype("float32") * 3 end}
    autograd.record(function() return Cast()(x) end):backward()
    assert.same({3, 3}, values(x.grad))
    -- the runtime is usable: an ordinary backward works
    local z = F({1, 2})
    z:attach_grad()
    autograd.record(function() return (z * z):sum() end):backward()
    assert.same({2, 4}, values(z.grad))
  end)

  it("checks what extend and forward are given", function()
    H.assert_error(function() autograd.Function:extend{forward = function() end} end,
                   {"autograd.Function:extend: backward must be a function(self, ...), got nil"})
    H.assert_error(function() autograd.Function:extend(3) end, {"autograd.Function:extend: expected a table"})
    H.assert_error(function() autograd.Function:extend{forward = 1, backward = function() end} end,
                   {"forward must be a function"})
    local NoArray = autograd.Function:extend{name = "NoArray", forward = function(self, x) return 3 end,
                                             backward = function() end}
    local x = F({1})
    x:attach_grad()
    H.assert_error(function() autograd.record(function() return NoArray()(x) end) end,
                   {"NoArray: forward's output 1 must be an array, got 3"})
    H.assert_error(function() autograd.Function()(x) end, {"forward is not defined"})
  end)

  it("frees its Lua object with the node", function()
    collectgarbage()
    collectgarbage()
    local x = F({1, 2})
    x:attach_grad()
    local weak = setmetatable({}, {__mode = "k"})
    autograd.record(function()
      local f = Sigmoid()
      weak[f] = true
      f(x):backward()
    end)
    H.collect()
    autograd.record(function() return Sigmoid()(x) end) -- collects the released ids
    H.collect()
    assert.is_nil(next(weak))
  end)
end)

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    it("a custom function inside a Block trains like the built-in op", function()
      local d = luon.gluon.nn.Dense(3, {in_units = 4, dtype = "float64"})
      d:initialize{device = dev}
      local x = randn({2, 4}, dev)
      local function run(custom)
        local y = autograd.record(function()
          local h = d(x)
          local y = (custom and Sigmoid()(h) or npx.sigmoid(h)):sum()
          y:backward()
          return y
        end)
        assert.equal(dev, d.weight:grad(dev).device)
        return {y:item(), values(d.weight:grad(dev)), values(d.bias:grad(dev))}
      end
      local got, want = run(true), run(false)
      H.assert_close(got[1], want[1], 1e-12)
      assert_near(got[2], want[2], 1e-12, "weight gradient")
      assert_near(got[3], want[3], 1e-12, "bias gradient")
    end)

    it("autograd.grad and second derivatives stay on the device", function()
      local x = F({0.5, 1.5}, dev)
      x:attach_grad()
      local dx = autograd.record(function() return autograd.grad(np.exp(x):sum(), x, {create_graph = true}) end)
      assert.equal(dev, dx.device)
      autograd.record(function() return dx:sum() end):backward()
      H.assert_close(values(x.grad), {math.exp(0.5), math.exp(1.5)}, 1e-12)
    end)
  end)
end

describe("autograd.grad", function()
  it("returns new arrays and leaves .grad alone", function()
    local x, w = F({1, 2, 3}), F({4, 5, 6})
    x:attach_grad()
    w:attach_grad()
    local y = autograd.record(function() return (x * w):sum() end)
    local g = autograd.grad(y, {x, w}, {retain_graph = true})
    assert.same({4, 5, 6}, values(g[1]))
    assert.same({1, 2, 3}, values(g[2]))
    assert.same({0, 0, 0}, values(x.grad))
    -- one variable gives one array; head_grads scale it; positional arguments
    assert.same({8, 10, 12}, values(autograd.grad(y, x, F(2), true)))
    -- the graph was kept by retain_graph, and freed after
    autograd.grad(y, x)
    H.assert_error(function() autograd.grad(y, x) end, {"retain_graph = true"})
  end)

  it("refuses a variable the heads do not depend on (MXNet's check), and takes intermediate ones", function()
    local x, u = F({1, 2}), F({3, 4})
    x:attach_grad()
    u:attach_grad()
    local h, y = autograd.record(function()
      local h = x * 3
      return h, (h * h):sum()
    end)
    H.assert_error(function() autograd.grad(y, {x, u}, {retain_graph = true}) end,
                   {"grad: cannot differentiate with respect to variable 2: it is unreachable from the heads"})
    local g = autograd.grad(y, {h, x})
    assert.same({6, 12}, values(g[1]))
    assert.same({18, 36}, values(g[2]))
  end)

  it("checks its arguments", function()
    local x = F({1, 2})
    x:attach_grad()
    local y = autograd.record(function() return (x * x):sum() end)
    H.assert_error(function() autograd.grad(y, {}) end, {"grad: variables must be an array or a list of 1 to 64 arrays"})
    H.assert_error(function() autograd.grad(y, {x, 3}) end, {"grad: variable 2 is not an ndarray, got 3"})
    H.assert_error(function() autograd.grad(y, F({1})) end, {"grad: variable 1 does not require a gradient"})
    H.assert_error(function() autograd.grad(y, x, {create_graph = "yes"}) end, {"grad: create_graph must be true or false"})
    H.assert_error(function() autograd.grad(y, x, {retain = true}) end, {"grad: unknown argument 'retain'"})
    H.assert_error(function() autograd.grad(y, x, {train_mode = false}) end, {"train_mode = false is not supported"})
    H.assert_error(function() autograd.grad(y, x, {head_grads = F({1, 2})}) end,
                   {"head gradient has shape"})
    assert.same({2, 4}, values(autograd.grad(y, x)))
  end)
end)

-- Second derivatives: with g(xs) = the gradients of sum(Y * f(xs)) (Y fixed),
-- autograd.grad(sum(R * g), xs) through create_graph against finite
-- differences of g computed by a plain (first-order) autograd.grad.
local function second_order(f, xs, tol)
  for _, x in ipairs(xs) do x:attach_grad() end
  local Y = randn(autograd.pause(function() return f(unpack(xs)) end).shape)
  local function first(create, ...)
    local args = {...}
    return autograd.record(function()
      return autograd.grad(f(unpack(args)), args, {head_grads = Y, create_graph = create})
    end)
  end
  local gs = first(true, unpack(xs))
  local Rs = {}
  for k, g in ipairs(gs) do Rs[k] = randn(g.shape) end
  local L = autograd.record(function()
    local s = (gs[1] * Rs[1]):sum()
    for k = 2, #gs do s = s + (gs[k] * Rs[k]):sum() end
    return s
  end)
  local second = autograd.grad(L, xs)
  local function L_of(...)
    local g = first(false, ...)
    local s = (g[1] * Rs[1]):sum()
    for k = 2, #g do s = s + (g[k] * Rs[k]):sum() end
    return s
  end
  for k = 1, #xs do
    assert_near(values(second[k]), numeric(L_of, xs, k, F(1)), tol or 1e-5, "d2/d input " .. k)
  end
end

describe("second derivatives (create_graph)", function()
  local unary = {
    exp = {np.exp}, log = {np.log, 0.5, 2}, sin = {np.sin}, cos = {np.cos}, tanh = {np.tanh},
    sigmoid = {npx.sigmoid}, relu = {npx.relu}, square = {np.square}, sqrt = {np.sqrt, 0.5, 2},
    negative = {function(x) return np.negative(x) * x end}, abs = {function(x) return np.abs(x) * x end}, log2 = {np.log2, 0.5, 2}, reciprocal = {np.reciprocal, 0.5, 2},
    tan = {np.tan, -1, 1}, arctan = {np.arctan}, sinh = {np.sinh}, cosh = {np.cosh},
    expm1 = {np.expm1}, log1p = {np.log1p, -0.5, 2}, arcsin = {np.arcsin, -0.8, 0.8},
    cbrt = {np.cbrt, 0.5, 2}, softrelu = {function(x) return npx.activation(x, {act_type = "softrelu"}) end},
    leaky_relu = {function(x) return npx.leaky_relu(x, {slope = 0.2}) end},
  }
  local names = {}
  for name in pairs(unary) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local f, lo, hi = unary[name][1], unary[name][2], unary[name][3]
    it(name, function()
      local x = lo and rand({2, 3}, lo, hi) or randn({2, 3})
      second_order(f, {x})
    end)
  end

  local binary = {add = np.add, subtract = np.subtract, multiply = np.multiply, divide = np.divide,
                  maximum = np.maximum}
  for _, name in ipairs({"add", "subtract", "multiply", "divide", "maximum"}) do
    it(name .. " (broadcast)", function()
      second_order(function(x, y) return binary[name](x, y) * x end, {randn({2, 3}), rand({3}, 0.5, 2)})
    end)
  end
  it("power", function()
    second_order(np.power, {rand({2, 3}, 0.5, 2), randn({2, 3})})
  end)
  it("matmul and fully_connected (Dense)", function()
    second_order(function(x, w) return np.tanh(np.matmul(x, w)) end, {randn({2, 3}), randn({3, 4})})
    second_order(function(x, w, b) return np.square(npx.fully_connected(x, w, b, {num_hidden = 2})) end,
                 {randn({3, 4}), randn({2, 4}), randn({2})})
  end)
  it("conv2d (stride, pad, bias; with and without a fused relu)", function()
    local function conv(relu)
      return function(x, w, b)
        local y = npx.convolution(x, w, b, {kernel = {2, 2}, stride = {2, 1}, pad = {1, 0}, num_filter = 2})
        return relu and npx.relu(y) * y or np.square(y)
      end
    end
    second_order(conv(false), {randn({2, 3, 5, 4}), randn({2, 3, 2, 2}), randn({2})}, 1e-5)
    second_order(conv(true), {randn({1, 2, 4, 4}), randn({2, 2, 2, 2}), randn({2})}, 1e-5)
  end)
  it("slicing with steps of 1 (its gradient is a recorded pad) and constant pad", function()
    second_order(function(x) return np.sin(x[{{1, 3}, {0, 2}}]) * x[{{0, 2}, {1, 3}}] end, {randn({3, 4})})
    second_order(function(x) return np.square(np.pad(x, {{1, 0}, {0, 2}})) * 0.5 end, {randn({2, 3})})
    local x = randn({4})
    x:attach_grad()
    -- (refused by the create_graph pass itself: its gradient could not be recorded)
    H.assert_error(function()
      autograd.record(function() return autograd.grad(np.square(x[{{0, 4, 2}}]):sum(), x, {create_graph = true}) end)
    end, {"'slice' with a step (2 on axis 0) is not twice differentiable"})
    local g = autograd.grad(autograd.record(function() return np.square(x[{{2, 3}}]):sum() end), x)
    assert_near(values(g), {0, 0, 2 * values(x)[3], 0}, 1e-12, "after the error")
  end)
  it("third derivatives", function()
    local x = F({0.5, -1})
    x:attach_grad()
    local d1 = autograd.record(function() return autograd.grad(np.sin(x):sum(), x, {create_graph = true}) end)
    local d2 = autograd.record(function() return autograd.grad(d1:sum(), x, {create_graph = true}) end)
    local d3 = autograd.grad(autograd.record(function() return d2:sum() end), x)
    H.assert_close(values(d3), {-math.cos(0.5), -math.cos(-1)}, 1e-12)
  end)

  it("an op whose gradient is not differentiable raises an error naming it", function()
    local x = randn({2, 5})
    x:attach_grad()
    local dx = autograd.record(function()
      return autograd.grad((npx.softmax(x) * randn({2, 5})):sum(), x, {create_graph = true})
    end)
    H.assert_error(function() autograd.grad(autograd.record(function() return dx:sum() end), x) end,
                   {"'softmax' is not twice differentiable", "'softmax_grad'"})
    local img = randn({1, 1, 4, 4})
    img:attach_grad()
    local di = autograd.record(function()
      local y = npx.pooling(img, {kernel = {2, 2}, pool_type = "max"})
      return autograd.grad((y * y):sum(), img, {create_graph = true})
    end)
    H.assert_error(function() autograd.grad(autograd.record(function() return di:sum() end), img) end,
                   {"'max_pool2d' is not twice differentiable", "max_pool2d_grad"})
    -- usable afterwards
    local z = F({1, 2})
    z:attach_grad()
    assert.same({2, 4}, values(autograd.grad(autograd.record(function() return np.square(z):sum() end), z)))
  end)
end)
