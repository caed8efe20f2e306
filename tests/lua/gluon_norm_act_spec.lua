-- gluon_norm_act_spec: gluon.nn's normalisations (LayerNorm, GroupNorm,
-- InstanceNorm, SyncBatchNorm), activations (PReLU, ELU, SELU, GELU,
-- Swish, SiLU), Embedding and the utility blocks (Identity, Lambda,
-- HybridLambda, Concatenate, contrib.nn's HybridConcurrent) against MXNet
-- 1.9.1's outputs and gradients (tests/data/layer_golden.txt, made by
-- tests/data/gen_layer_golden.py) on every device; reprs, the npx
-- functions under them, and bad input.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local gluon = luon.gluon
local nn = gluon.nn
local cnn = gluon.contrib.nn

---------------------------------------------------------------------------
-- The goldens

local golden = {}
do
  local cur
  for l in io.lines(H.root .. "tests/data/layer_golden.txt") do
    local tag, rest = l:match("^(%S+) ?(.*)$")
    local nums = function(s)
      local t = {}
      for v in s:gmatch("%S+") do t[#t + 1] = tonumber(v) end
      return t
    end
    if tag == "case" then
      cur = {d = {}}
      golden[rest] = cur
    elseif tag == "d" then
      local name, vals = rest:match("^(%S+) (.*)$")
      cur.d[name] = nums(vals)
    else
      cur[tag] = nums(rest)
    end
  end
end

-- the generator's formulas: x[i] = 2 sin(1.3 i); parameter k (sorted by
-- name) s = sin(0.37 i + k): gamma 1 + s/4, beta s/20, alpha 1/4 + s/10, else s
local function input(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local t = {}
  for i = 0, n - 1 do t[i + 1] = 2 * math.sin(1.3 * i) end
  return np.reshape(np.array(t), shape)
end
local function formula(name, k, shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local leaf = name:match("([^.]+)$")
  local t = {}
  for i = 0, n - 1 do
    local s = math.sin(0.37 * i + k)
    t[i + 1] = leaf == "gamma" and 1 + 0.25 * s or leaf == "beta" and 0.05 * s or leaf == "alpha" and 0.25 + 0.1 * s
               or s
  end
  return np.reshape(np.array(t), shape)
end

local function flat(x) return np.reshape(x, {-1}):totable() end

local cases = {
  layernorm = function() return nn.LayerNorm() end,
  layernorm_axis1 = function() return nn.LayerNorm{axis = 1, epsilon = 1e-3, center = false} end,
  groupnorm = function() return nn.GroupNorm{num_groups = 2} end,
  groupnorm_4d = function() return nn.GroupNorm{num_groups = 3, epsilon = 1e-3, scale = false} end,
  instancenorm = function() return nn.InstanceNorm() end,
  instancenorm_last = function() return nn.InstanceNorm{axis = -1, scale = true} end,
  prelu = function() return nn.PReLU() end,
  prelu_channels = function() return nn.PReLU{in_channels = 3} end,
  elu = function() return nn.ELU() end,
  elu_half = function() return nn.ELU{alpha = 0.5} end,
  selu = function() return nn.SELU() end,
  gelu = function() return nn.GELU() end,
  swish = function() return nn.Swish{beta = 1.5} end,
  batchnorm_sync = function() return cnn.SyncBatchNorm{num_devices = 1} end,
  concurrent = function()
    return cnn.HybridConcurrent{axis = 1}:add(nn.Dense(3, {in_units = 4}), cnn.Identity())
  end,
  embedding = function() return nn.Embedding(5, 3) end,
}

local function run_case(name, dev)
  local g = golden[name]
  assert(g, name)
  local net = cases[name]()
  net:initialize{device = dev}
  local x
  if name == "embedding" then
    x = np.array({{0, 4, 2}, {7, -1, 1.6}}, {device = dev})
  else
    x = input(g.x):to_device(dev)
  end
  net(x)
  local params = net:collect_params()
  local names = params:keys()
  table.sort(names)
  for k, n in ipairs(names) do
    local p = params[n]
    p:set_data(formula(n, k - 1, p.shape))
  end
  if name ~= "embedding" then x:attach_grad() end
  local y = autograd.record(function() return net(x) end)
  local c = {}
  for i = 0, y.size - 1 do c[i + 1] = math.cos(0.7 * i) end
  y:backward(np.reshape(np.array(c, {device = dev}), y.shape))
  H.assert_close(flat(y), g.y, 1e-5)
  if g.dx and name ~= "selu" then H.assert_close(flat(x.grad), g.dx, 1e-4) end
  if name == "selu" then -- MXNet 1.9.1's selu gradient below 0 is lambda * (y + alpha), not
    -- d/dx = y + lambda * alpha: luon keeps the derivative (gradcheck_spec checks it)
    local xs, dx = flat(x), flat(x.grad)
    for i = 1, #xs do
      local d = xs[i] > 0 and 1.0507009873554805 or 1.0507009873554805 * 1.6732632423543772 * math.exp(xs[i])
      assert(math.abs(dx[i] - d * math.cos(0.7 * (i - 1))) < 1e-5, "selu's gradient at " .. xs[i])
    end
  end
  local seen = 0
  for _, n in ipairs(names) do
    local p = params[n]
    if p.grad_req ~= "null" then
      assert(g.d[n], "MXNet has no gradient for " .. n)
      H.assert_close(flat(p:grad(dev)), g.d[n], 1e-4)
      seen = seen + 1
    end
  end
  local want = 0
  for _ in pairs(g.d) do want = want + 1 end
  assert.are.equal(want, seen)
end

for _, dev in ipairs(H.devices()) do
  describe("gluon.nn layers against MXNet 1.9.1 on " .. tostring(dev), function()
    local names = {}
    for n in pairs(cases) do names[#names + 1] = n end
    table.sort(names)
    for _, n in ipairs(names) do
      it(n, function() run_case(n, dev) end)
    end
  end)
end

describe("the layers' MXNet reprs and parameters", function()
  it("prints as MXNet 1.9.1", function()
    assert.are.equal("LayerNorm(eps=1e-05, axis=-1, center=True, scale=True, in_channels=0)", tostring(nn.LayerNorm()))
    assert.are.equal("LayerNorm(eps=1e-05, axis=-1, center=True, scale=True, in_channels=3)",
                     tostring(nn.LayerNorm{in_channels = 3}))
    assert.are.equal("GroupNorm(eps=1e-05, num_groups=2, center=True, scale=True)", tostring(nn.GroupNorm(2)))
    assert.are.equal("InstanceNorm(eps=1e-05, axis=1, center=True, scale=False, in_channels=3)",
                     tostring(nn.InstanceNorm{in_channels = 3}))
    assert.are.equal("Embedding(5 -> 3, float32)", tostring(nn.Embedding(5, 3)))
    for _, n in ipairs({"PReLU", "ELU", "SELU", "GELU", "Swish", "Identity"}) do
      assert.are.equal(n .. "(\n\n)", tostring(nn[n]()))
    end
    assert.are.equal("Lambda(tanh)", tostring(nn.Lambda("tanh")))
    assert.are.equal("HybridLambda(relu)", tostring(nn.HybridLambda("relu")))
    assert.are.equal("Lambda(<lambda>)", tostring(nn.Lambda(function(x) return x end)))
    assert.are.equal("SyncBatchNorm(eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=False, ndev=2, " ..
                     "in_channels=3)", tostring(cnn.SyncBatchNorm{in_channels = 3, num_devices = 2}))
    assert.are.equal(("SyncBatchNorm(eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=False, ndev=%d, " ..
                      "in_channels=None)"):format(math.max(1, npx.num_gpus())), tostring(nn.SyncBatchNorm()))
    assert.are.equal("HybridConcurrent(\n  (0): Identity(\n  \n  )\n)",
                     tostring(cnn.HybridConcurrent{axis = 1}:add(cnn.Identity())))
  end)
  it("has MXNet's parameter names, shapes and grad_req", function()
    local ln = nn.LayerNorm{in_channels = 4, center = false}
    H.assert_equal(ln.gamma.shape, {4})
    assert.are.equal("null", ln.beta.grad_req)
    local gn = nn.GroupNorm(3)
    H.assert_equal(gn.gamma.shape, {3})
    assert.are.equal("null", nn.InstanceNorm().gamma.grad_req) -- scale=False by default
    H.assert_equal(nn.PReLU().alpha.shape, {1})
    H.assert_equal(nn.PReLU{in_channels = 5}.alpha.shape, {5})
    H.assert_equal(nn.Embedding(7, 2).weight.shape, {7, 2})
    local sbn = nn.SyncBatchNorm{in_channels = 3}
    H.assert_equal(sbn:collect_params():keys(), {"gamma", "beta", "running_mean", "running_var"})
  end)
end)

describe("the npx functions under the layers", function()
  it("layer_norm returns the mean and std with output_mean_var", function()
    local x = np.array({{1, 2, 3}, {-1, 0, 5}})
    local y, mean, std = npx.layer_norm(x, np.ones({3}), np.zeros({3}), {eps = 0, output_mean_var = true})
    H.assert_shape(mean, {2, 1})
    H.assert_close(mean, {{2}, {4 / 3}})
    H.assert_close(std, {{math.sqrt(2 / 3)}, {math.sqrt(((-1 - 4 / 3) ^ 2 + (4 / 3) ^ 2 + (5 - 4 / 3) ^ 2) / 3)}})
    H.assert_shape(y, {2, 3})
  end)
  it("instance_norm is group_norm with one channel per group", function()
    local x = input({2, 3, 4})
    local g, b = np.array({1, 2, 3}), np.array({0, 1, 0})
    H.assert_close(npx.instance_norm(x, g, b, {eps = 1e-5}),
                   npx.group_norm(x, g, b, {num_groups = 3, eps = 1e-5}):totable(), 1e-6)
  end)
  it("leaky_relu has MXNet's act_types and values", function()
    local x = np.array({-2, -0.5, 0, 0.5, 2})
    H.assert_close(npx.leaky_relu(x, {act_type = "elu"}), {-0.21616618, -0.09836735, 0, 0.5, 2})
    H.assert_close(npx.leaky_relu(x, {act_type = "selu"}), {-1.5201665, -0.6917582, 0, 0.5253505, 2.101402})
    H.assert_close(npx.leaky_relu(x, {act_type = "gelu"}), {-0.0455001, -0.15426877, 0, 0.3457312, 1.9544998})
    H.assert_close(npx.leaky_relu(x, np.array({0.1}), {act_type = "prelu"}), {-0.2, -0.05, 0, 0.5, 2})
  end)
  it("embedding clips out-of-range indices and truncates float ones as MXNet on the CPU", function()
    local w = np.reshape(np.arange(12), {4, 3})
    H.assert_close(npx.embedding(np.array({0, 3, 5, -1, -7}), w, {input_dim = 4, output_dim = 3}),
                   {{0, 1, 2}, {9, 10, 11}, {9, 10, 11}, {0, 1, 2}, {0, 1, 2}})
    H.assert_close(npx.embedding(np.array({0.7, 2.9, 1.5, -0.5}), w), {{0, 1, 2}, {6, 7, 8}, {3, 4, 5}, {0, 1, 2}})
    H.assert_shape(npx.embedding(np.array({{1, 2}}, {dtype = "int64"}), w), {1, 2, 3})
  end)
  it("gives a dense gradient to the embedding's weight", function()
    local w = np.zeros({4, 3})
    w:attach_grad()
    autograd.record(function() return npx.embedding(np.array({1, 1, 5, -2}), w) end):backward()
    H.assert_close(w.grad, {{1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}})
  end)
end)

describe("the utility blocks", function()
  it("Lambda and HybridLambda wrap a function or an np/npx name", function()
    local x = np.array({-1, 0, 2})
    H.assert_close(nn.Lambda("tanh")(x), np.tanh(x):totable())
    H.assert_close(nn.HybridLambda(function(a) return a * 2 end)(x), {-2, 0, 4})
    H.assert_close(nn.Lambda(function(a, b) return a + b end)(x, x), {-2, 0, 4})
    H.assert_close(nn.Lambda("relu")(x), {0, 0, 2})
  end)
  it("Concatenate joins its children's outputs along the axis", function()
    local net = nn.HybridConcatenate{axis = 0}
    net:add(nn.Identity(), nn.HybridLambda("negative"))
    H.assert_close(net(np.array({{1, 2}})), {{1, 2}, {-1, -2}})
    local seq = nn.Concatenate()
    seq:add(nn.Identity(), nn.Identity())
    H.assert_close(seq(np.array({{1, 2}})), {{1, 2, 1, 2}})
  end)
  it("the model zoo uses them", function()
    local vision = gluon.model_zoo.vision
    assert.are.equal(cnn.HybridConcurrent, vision.HybridConcurrent)
    assert.are.equal(nn.Identity, vision.Identity)
  end)
  it("SiLU is x * sigmoid(x)", function()
    local x = np.array({-1, 0, 2})
    H.assert_close(nn.SiLU()(x), (x * npx.sigmoid(x)):totable())
  end)
end)

-- BatchNorm then Activation('relu') in a Sequential runs as one batch_norm
-- op with its relu: the same outputs and gradients as the two blocks apart
-- (a forward hook on the activation keeps them apart), in training and in
-- predict mode, eager and hybridized.
for _, dev in ipairs(H.devices()) do
  describe("BatchNorm + relu fusion on " .. tostring(dev), function()
    local function net(apart, hybrid)
      local s = nn.HybridSequential()
      local act = nn.Activation("relu")
      s:add(nn.Conv2D{channels = 6, kernel_size = 3, padding = 1}, nn.BatchNorm(), act, nn.Dense(3))
      if apart then act:register_forward_hook(function() end) end
      s:initialize{device = dev, init = luon.init.Xavier()}
      if hybrid then s:hybridize() end
      return s
    end
    local function run(s, x, train)
      local ps = s:collect_params()
      for _, p in pairs(ps) do p:zero_grad() end
      x:attach_grad() -- a fresh zero gradient
      local y = autograd.record(function() return s(x) end, train)
      y:backward()
      local g = {}
      for name, p in pairs(ps) do
        if p.grad_req ~= "null" then g[name] = p:grad(dev):asnumpy() end
      end
      return y:asnumpy(), g, x.grad:asnumpy()
    end
    for _, hybrid in ipairs({false, true}) do
      for _, train in ipairs({true, false}) do
        it(("equals the blocks apart (%s, %s)"):format(hybrid and "hybridized" or "eager",
                                                      train and "training" or "predict mode"), function()
          np.random.seed(5)
          local x = np.random.uniform(-2, 2, {4, 3, 5, 5}):copyto(dev)
          local fused, apart = net(false, hybrid), net(true, hybrid)
          fused(x) -- deferred shapes, then the same parameters in both
          apart(x)
          local pf, pa = fused:collect_params(), apart:collect_params()
          for name, p in pairs(pf) do pa[name]:set_data(p:data(dev):copy()) end
          local yf, gf, xf = run(fused, x, train)
          local ya, ga, xa = run(apart, x, train)
          local tol = dev.device_type == "cpu" and 0 or 1e-6
          H.assert_close(yf, ya:totable(), tol)
          H.assert_close(xf, xa:totable(), tol)
          for name, v in pairs(gf) do H.assert_close(v, ga[name]:totable(), tol) end
          assert.is_true((yf:abs():sum():item()) > 0)
          -- and it did run fused: no relu op (only in the blocks apart)
          local function relus(s)
            luon.profiler.reset()
            luon.profiler.set_state("run")
            autograd.record(function() return s(x) end, train):wait_to_read()
            luon.profiler.set_state("stop")
            local n = 0
            for _, r in ipairs(luon.profiler.stats()) do if r.name == "relu" then n = n + r.calls end end
            return n
          end
          if not hybrid then
            assert.are.equal(0, relus(fused))
            assert.are.equal(1, relus(apart))
          end
        end)
      end
    end
    it("follows the layer's options as they are now, and steps aside for a forward of another's", function()
      np.random.seed(6)
      local x = np.random.uniform(-2, 2, {4, 3, 5, 5}):copyto(dev)
      local function pair(make_act)
        local f, a = nn.HybridSequential(), nn.HybridSequential()
        local fb, ab = nn.BatchNorm(), nn.BatchNorm()
        f:add(fb, make_act())
        local act = make_act()
        act:register_forward_hook(function() end)
        a:add(ab, act)
        f:initialize{device = dev}
        a:initialize{device = dev}
        f(x); a(x)
        return f, a, fb, ab
      end
      -- MXNet users freeze a BatchNorm through its options
      local f, a, fb, ab = pair(function() return nn.Activation("relu") end)
      fb._kw.use_global_stats, ab._kw.use_global_stats = true, true
      local yf = autograd.record(function() return f(x) end)
      local ya = autograd.record(function() return a(x) end)
      H.assert_close(yf, ya:totable(), 0)
      H.assert_close(fb.running_mean:data(dev), ab.running_mean:data(dev):totable(), 0)
      -- an Activation subclass with its own forward runs that forward
      local Odd = nn.Activation:extend("Odd")
      function Odd:forward(y) return y * 2 end
      f, a = pair(function() return Odd("relu") end)
      H.assert_close(f(x), a(x):totable(), 0)
      assert.is_true(f(x):min():item() < 0)
    end)
    it("a graph with the fused op is format version 2 (a version-1 reader would drop the relu)", function()
      local function version(fuse)
        local s = nn.HybridSequential()
        local act = nn.Activation("relu")
        s:add(nn.BatchNorm(), act)
        if not fuse then act:register_forward_hook(function() end) end
        s:initialize{device = dev}
        s:hybridize()
        s(np.ones({2, 3}):copyto(dev))
        local prefix = os.tmpname()
        local sym = s:export(prefix)
        local text = io.open(sym):read("*a")
        os.remove(prefix); os.remove(sym); os.remove(prefix .. "-0000.safetensors")
        return tonumber(text:match('"version"%s*:%s*(%d+)'))
      end
      assert.are.equal(2, version(true))
      assert.are.equal(1, version(false))
    end)
    it("npx.batch_norm's act_type is 'relu' or nothing", function()
      local x, one, zero = np.ones({2, 3}):copyto(dev), np.ones({3}):copyto(dev), np.zeros({3}):copyto(dev)
      H.assert_error(function() return npx.batch_norm(x, one, zero, zero, one, {act_type = "tanh"}) end,
                     {"batch_norm", "act_type", "relu", "tanh"})
      local y = npx.batch_norm(x * -1, one, zero, zero, one, {act_type = "relu", fix_gamma = false})
      H.check(y, {{0, 0, 0}, {0, 0, 0}}, {tol = 0})
    end)
  end)
end

describe("SyncBatchNorm", function()
  it("equals BatchNorm on one device", function()
    local x = input({4, 3, 2})
    local a, b = nn.SyncBatchNorm(), nn.BatchNorm()
    a:initialize()
    b:initialize()
    local ya = autograd.record(function() return a(x) end)
    local yb = autograd.record(function() return b(x) end)
    H.assert_close(ya, yb:totable(), 1e-6)
    H.assert_close(a.running_mean:data(), b.running_mean:data():totable(), 1e-6)
  end)
end)

describe("SyncBatchNorm across devices", function()
  -- x (N, 3, 5) -> Dense over the last axis -> SyncBatchNorm on each
  -- replica, against the same layers on cpu(0) with nn.BatchNorm over the
  -- whole batch. The loss sum(y * R) with a random R makes every gradient
  -- depend on the global statistics.
  local function nets(devs)
    local sync = nn.HybridSequential()
    sync:add(nn.Dense(5, {in_units = 5, flatten = false}),
             nn.SyncBatchNorm{in_channels = 3, num_devices = #devs, momentum = 0.8})
    sync:initialize{device = devs}
    local ref = nn.HybridSequential()
    ref:add(nn.Dense(5, {in_units = 5, flatten = false}), nn.BatchNorm{in_channels = 3, momentum = 0.8})
    ref:initialize{device = npx.cpu(0)}
    sync:cast("float64")
    ref:cast("float64")
    np.random.seed(3)
    for _, pair in ipairs({{sync[0].weight, ref[0].weight}, {sync[0].bias, ref[0].bias},
                           {sync[1].gamma, ref[1].gamma}, {sync[1].beta, ref[1].beta}}) do
      local v = np.random.uniform(0.5, 1.5, pair[2].shape)
      pair[1]:set_data(v)
      pair[2]:set_data(v)
    end
    return sync, ref
  end
  local function gather(list)
    local parts = {}
    for k, a in ipairs(list) do parts[k] = a:as_in_context(npx.cpu(0)) end
    return np.concatenate(parts, 0)
  end
  local function grad_sum(p)
    local total
    for _, g in ipairs(p:list_grad()) do
      g = g:as_in_context(npx.cpu(0))
      total = total and total + g or g
    end
    return total
  end

  for _, ndev in ipairs({2, 3}) do
    it(("on %d devices equals BatchNorm over the whole batch: outputs, gradients, running statistics, " ..
        "then predict mode"):format(ndev), function()
      local devs = {}
      for i = 0, ndev - 1 do devs[i + 1] = npx.cpu(i) end
      local sync, ref = nets(devs)
      np.random.seed(11)
      local x = np.random.normal(2, 3, {2 * ndev + 1, 3, 5}, {dtype = "float64"}) -- uneven parts
      local R = np.random.normal(0, 1, {2 * ndev + 1, 3, 5}, {dtype = "float64"})
      local xs = gluon.utils.split_and_load(x, devs, {even_split = false})
      local Rs = gluon.utils.split_and_load(R, devs, {even_split = false})
      for _, xk in ipairs(xs) do xk:attach_grad() end
      local outs, losses = autograd.record(function()
        return gluon.utils.parallel_forward(function(xk, rk)
          local y = sync(xk)
          return y, (y * rk):sum()
        end, xs, Rs)
      end)
      autograd.backward(losses)
      x:attach_grad()
      local y, loss = autograd.record(function()
        local out = ref(x)
        return out, (out * R):sum()
      end)
      autograd.backward({loss})
      H.assert_close(gather(outs), y:totable(), 1e-10)
      local xgrads = {}
      for k, xk in ipairs(xs) do xgrads[k] = xk.grad end
      H.assert_close(gather(xgrads), x.grad:totable(), 1e-10)
      for _, pair in ipairs({{sync[0].weight, ref[0].weight}, {sync[0].bias, ref[0].bias},
                             {sync[1].gamma, ref[1].gamma}, {sync[1].beta, ref[1].beta}}) do
        H.assert_close(grad_sum(pair[1]), pair[2]:grad():totable(), 1e-10)
      end
      for _, dev in ipairs(devs) do
        H.assert_close(sync[1].running_mean:data(dev), ref[1].running_mean:data():totable(), 1e-10)
        H.assert_close(sync[1].running_var:data(dev), ref[1].running_var:data():totable(), 1e-10)
      end
      -- predict mode: the running statistics, each replica alone
      local pred = gluon.utils.parallel_forward(sync, xs)
      H.assert_close(gather(pred), ref(x):totable(), 1e-10)
      for k, xk in ipairs(xs) do H.assert_close(sync(xk), ref(xk:as_in_context(npx.cpu(0))):totable(), 1e-10) end
    end)
  end

  it("keeps fix_gamma (scale = false), center = false and float32", function()
    local devs = {npx.cpu(0), npx.cpu(1)}
    local sync = nn.SyncBatchNorm{scale = false, center = false, in_channels = 2}
    sync:initialize{device = devs}
    local ref = nn.BatchNorm{scale = false, center = false, in_channels = 2}
    ref:initialize()
    local x = np.random.normal(0, 1, {4, 2, 3})
    local xs = gluon.utils.split_and_load(x, devs)
    local outs = autograd.record(function() return gluon.utils.parallel_forward(sync, xs) end)
    assert.are.equal("float32", outs[1].dtype)
    H.assert_close(gather(outs), autograd.record(function() return ref(x) end):totable(), 1e-5)
  end)

  it("gives the gradient of copyto across devices back on the source device", function()
    local x = np.array({1, 2, 3})
    x:attach_grad()
    local y = autograd.record(function() return (x:as_in_context(npx.cpu(1)) * np.array({1, 2, 3}, {device = npx.cpu(1)})):sum() end)
    y:backward()
    assert.are.equal(npx.cpu(0), x.grad.device)
    H.assert_close(x.grad, {1, 2, 3})
  end)

  it("names parallel_forward when the replicas' forwards run one after another", function()
    local s = nn.SyncBatchNorm()
    s:initialize{device = {npx.cpu(0), npx.cpu(1)}}
    local x = input({2, 3})
    s(x) -- inference: the running statistics, nothing to synchronise
    H.assert_error(function() autograd.record(function() return s(x) end) end,
                   {"SyncBatchNorm", "2 devices", "gluon.utils.parallel_forward", "autograd.backward"})
  end)

  it("refuses replicas that do not meet, a wrong num_devices and bad arguments, and stays usable", function()
    local devs = {npx.cpu(0), npx.cpu(1)}
    local s = nn.SyncBatchNorm{num_devices = 2}
    s:initialize{device = devs}
    local xs = gluon.utils.split_and_load(input({4, 3}), devs)
    H.assert_error(function()
      autograd.record(function()
        return gluon.utils.parallel_forward(function(x) if x.device == npx.cpu(0) then return s(x) end return x end, xs)
      end)
    end, {"parallel_forward", "replica 2 finished", "SyncBatchNorm"})
    assert.is_false(autograd.is_recording())
    local three = gluon.utils.split_and_load(input({6, 3}), {npx.cpu(0), npx.cpu(1), npx.cpu(2)})
    H.assert_error(function() autograd.record(function() return gluon.utils.parallel_forward(s, three) end) end,
                   {"SyncBatchNorm", "num_devices is 2", "3 replicas"})
    H.assert_error(function() gluon.utils.parallel_forward(42, xs) end, {"parallel_forward", "Block or a function", "42"})
    H.assert_error(function() gluon.utils.parallel_forward(s) end, {"parallel_forward", "lists"})
    H.assert_error(function() gluon.utils.parallel_forward(s, {}) end, {"parallel_forward", "list 1", "non-empty"})
    H.assert_error(function() gluon.utils.parallel_forward(s, xs, {xs[1]}) end,
                   {"parallel_forward", "list 2 has 1 entries", "list 1 has 2"})
    H.assert_error(function() autograd.record(function()
      return gluon.utils.parallel_forward(function(x) return s(x:reshape(-1)) end, xs) end) end,
                   {"SyncBatchNorm", "channel axis"})
    local outs = autograd.record(function() return gluon.utils.parallel_forward(s, xs) end)
    assert.are.equal(2, #outs)
    assert.is_false(autograd.is_recording())
  end)
end)

describe("bad input", function()
  it("gets errors naming the function, the value and what was expected", function()
    local x = input({2, 3, 4})
    H.assert_error(function() npx.layer_norm(x, np.ones({3}), np.zeros({3})) end,
                   {"layer_norm", "gamma", "(3,)", "(4,)"})
    H.assert_error(function() npx.layer_norm(x, np.ones({4}), np.zeros({4}), {axis = 3}) end,
                   {"layer_norm", "axis 3"})
    H.assert_error(function() npx.layer_norm(x, np.ones({4}), np.zeros({4}), {eps = -1}) end, {"eps", ">= 0"})
    H.assert_error(function() npx.layer_norm(x, np.ones({4}), np.zeros({4}), {eps = 0 / 0}) end, {"eps"})
    H.assert_error(function() npx.layer_norm(np.ones({2, 4}, {dtype = "int32"}), np.ones({4}), np.zeros({4})) end,
                   {"layer_norm", "int32"})
    H.assert_error(function() npx.group_norm(x, np.ones({2}), np.zeros({2}), {num_groups = 2}) end,
                   {"group_norm", "num_groups = 2", "3 channels"})
    H.assert_error(function() npx.group_norm(x, np.ones({1}), np.zeros({1}), {num_groups = 0}) end,
                   {"group_norm", "num_groups"})
    H.assert_error(function() npx.instance_norm(np.ones({2, 3}), np.ones({3}), np.zeros({3})) end,
                   {"instance_norm", "at least 3 axes"})
    H.assert_error(function() npx.leaky_relu(x, {act_type = "rrelu"}) end, {"leaky_relu", "rrelu", "not available"})
    H.assert_error(function() npx.leaky_relu(x, {act_type = "prelu"}) end, {"leaky_relu", "gamma"})
    H.assert_error(function() npx.prelu(x, np.ones({4})) end, {"prelu", "(4,)", "(3,)"})
    H.assert_error(function() npx.embedding(np.array({1}), np.ones({4})) end, {"embedding", "2-D"})
    H.assert_error(function() npx.embedding(np.array({1}), np.ones({4, 2}), {input_dim = 5}) end,
                   {"embedding", "input_dim", "(4,2)"})
    H.assert_error(function() npx.embedding(np.array({1}), np.ones({4, 2}), {sparse_grad = true}) end,
                   {"embedding", "sparse_grad", "dense"})
    H.assert_error(function() nn.Embedding(0, 3) end, {"Embedding", "input_dim", "positive"})
    H.assert_error(function() nn.GroupNorm(0) end, {"GroupNorm", "num_groups"})
    H.assert_error(function() nn.LayerNorm{epsilon = -1} end, {"LayerNorm", "epsilon"})
    H.assert_error(function() nn.LayerNorm{axiss = 1} end, {"LayerNorm", "axiss"})
    H.assert_error(function() nn.ELU{alpha = "x"} end, {"ELU", "alpha"})
    H.assert_error(function() nn.SELU(1) end, {"SELU"})
    H.assert_error(function() nn.Lambda("tanhh") end, {"Lambda", "tanhh", "tanh"})
    H.assert_error(function() nn.Lambda(3) end, {"Lambda", "function"})
    H.assert_error(function() nn.HybridConcatenate()(x) end, {"HybridConcatenate", "no children"})
    local ln = nn.LayerNorm{axis = 5}
    ln:initialize()
    H.assert_error(function() ln(x) end, {"LayerNorm", "axis 5"})
    -- the runtime is usable after the errors
    H.assert_shape(npx.layer_norm(x, np.ones({4}), np.zeros({4})), {2, 3, 4})
  end)
end)
