-- gluon_block_spec: Blocks and Parameters: the tutorial's LeafNetwork
-- (structure, summary totals, forward shape), child registration and
-- structural names, Sequential, deferred initialization and its errors,
-- initializer precedence and values, replicas, ParameterDict, save/load.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local gluon, init = luon.gluon, luon.init
local nn = gluon.nn
local Parameter = gluon.Parameter
local block = require("luon.gluon.block")
local core = require("luon.core")

-- Run fn with summary's printing and warnings captured; returns fn's
-- results, then the printed text and the warnings.
local function captured(fn)
  local printed, warnings = {}, {}
  local p0, w0 = block.print, core.warn
  block.print = function(s) printed[#printed + 1] = s end
  core.warn = function(s) warnings[#warnings + 1] = s end
  local ok, a, b = pcall(fn)
  block.print, core.warn = p0, w0
  if not ok then error(a, 0) end
  return a, b, table.concat(printed, "\n"), warnings
end

-- The tutorial's network (examples/leafnet.lua).
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local LeafNetwork = dofile(here .. "../../examples/leafnet.lua")
local function leaf_network() return LeafNetwork() end

local leaf_names = {}
for _, c in ipairs({"conv1", "conv2", "conv3"}) do
  for _, n in ipairs({"0.weight", "0.bias", "2.gamma", "2.beta", "2.running_mean", "2.running_var"}) do
    leaf_names[#leaf_names + 1] = c .. "." .. n
  end
end
for _, n in ipairs({"dense1.0.weight", "dense1.0.bias", "dense2.0.weight", "dense2.0.bias",
                    "dense3.weight", "dense3.bias"}) do
  leaf_names[#leaf_names + 1] = n
end

describe("the tutorial's LeafNetwork", function()
  it("builds, prints, initializes deferred, summarises and runs forward", function()
    local net = leaf_network()
    local repr = tostring(net)
    assert.truthy(repr:find("LeafNetwork(\n  (conv1): HybridSequential(\n    (0): Conv2D(None -> 32, " ..
                            "kernel_size=(2, 2), stride=(1, 1), Activation(relu))", 1, true), repr)
    assert.truthy(repr:find("(1): MaxPool2D(size=(4, 4), stride=(2, 2), padding=(0, 0), ceil_mode=False, " ..
                            "global_pool=False, pool_type=max, layout=NCHW)", 1, true), repr)
    assert.truthy(repr:find("(flatten): Flatten\n", 1, true), repr)
    assert.truthy(repr:find("(dense3): Dense(None -> 2, linear)\n)", 1, true), repr)
    assert.truthy(repr:find("(1): Dropout(p = 0.2, axes=())", 1, true), repr)
    assert.same(leaf_names, net:collect_params():keys())

    net:initialize()
    -- deferred: weights wait for the first forward, biases of known shape do not
    local params = net:collect_params()
    assert.equal(-1, params["conv1.0.weight"].shape[2])
    H.assert_error(function() return params["conv1.0.weight"]:data() end,
                   {"Parameter 'weight' has not been initialized yet because initialization was deferred"})
    assert.same({32}, params["conv1.0.bias"]:data().shape)

    local stats, _, text = captured(function()
      return net:summary(np.random.uniform({size = {4, 3, 128, 128}}))
    end)
    assert.equal(2206796, stats.total)
    assert.equal(2206348, stats.trainable)
    assert.equal(448, stats.non_trainable)
    assert.equal(0, stats.shared)
    local lines = {}
    for l in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
    assert.equal(("-"):rep(80), lines[1])
    assert.equal(("%20s  %42s %15s"):format("Layer (type)", "Output Shape", "Param #"), lines[2])
    assert.equal(("="):rep(80), lines[3])
    assert.equal(("%20s  %42s %15s"):format("Input", "(4, 3, 128, 128)", "0"), lines[4])
    assert.equal(("%20s  %42s %15s"):format("Activation-1", "(4, 32, 127, 127)", "0"), lines[5])
    assert.equal(("%20s  %42s %15s"):format("Conv2D-2", "(4, 32, 127, 127)", "416"), lines[6])
    assert.equal(("%20s  %42s %15s"):format("MaxPool2D-3", "(4, 32, 62, 62)", "0"), lines[7])
    assert.equal(("%20s  %42s %15s"):format("BatchNorm-4", "(4, 32, 62, 62)", "128"), lines[8])
    assert.equal(("%20s  %42s %15s"):format("Flatten-13", "(4, 21632)", "0"), lines[17])
    assert.equal(("%20s  %42s %15s"):format("Dense-15", "(4, 100)", "2163300"), lines[19])
    assert.equal(("%20s  %42s %15s"):format("LeafNetwork-21", "(4, 2)", "0"), lines[25])
    assert.truthy(text:find("   Total params: 2206796\n   Trainable params: 2206348\n" ..
                            "   Non-trainable params: 448\nShared params in forward computation graph: 0\n" ..
                            "Unique parameters in model: 2206796\n" .. ("-"):rep(80), 1, true), text)

    assert.same({32, 3, 2, 2}, params["conv1.0.weight"].shape)
    assert.same({100, 21632}, params["dense1.0.weight"].shape)
    assert.same({128}, params["conv3.2.running_var"].shape)
    assert.truthy(tostring(net):find("Dense(21632 -> 100, Activation(relu))", 1, true))
    assert.truthy(tostring(net):find("in_channels=64)", 1, true))

    local out = net(np.random.uniform({size = {4, 3, 128, 128}}))
    H.check(out, nil, {shape = {4, 2}, dtype = "float32", device = npx.cpu(0)})
    local out1 = net(np.random.uniform({size = {1, 3, 128, 128}}))
    H.assert_shape(out1, {1, 2})
  end)

  it("summary refuses a hybridized block, as Gluon", function()
    local net = nn.HybridSequential()
    net:add(nn.Dense(3, {in_units = 2}))
    net:initialize()
    net:hybridize()
    H.assert_error(function() return net:summary(np.ones({1, 2})) end, {"must not be hybridized to print summary"})
    net:hybridize(false)
    local stats = captured(function() return net:summary(np.ones({1, 2})) end)
    assert.equal(9, stats.total)
  end)
end)

describe("Block", function()
  it("registers Blocks and Parameters assigned to fields, in assignment order", function()
    local Inner = nn.Block:extend("Inner")
    function Inner:__init(n)
      self.w = gluon.Parameter("w", {shape = {n, 2}})
      self.scale = 3                -- a plain field
    end
    function Inner:forward(x) return x * self.scale end
    local Outer = nn.Block:extend("Outer")
    function Outer:__init()
      self.b = Inner(4)
      self.a = Inner(5)
      self.own = gluon.Parameter("own", {shape = 1})
      self.list = {nn.Dense(2)}     -- not registered: a plain table
      self.d = nn.Dense(3, {in_units = 2})
    end
    function Outer:forward(x) return self.d(self.a(x)) end
    local net = Outer()
    assert.same({"own", "b.w", "a.w", "d.weight", "d.bias"}, net:collect_params():keys())
    assert.equal(3, net.a.scale)
    assert.equal(5, net.a.w.shape[1])
    assert.equal("Outer", net:class_name())
    assert.truthy(block.isinstance(net, nn.Block))
    assert.falsy(block.isinstance(net, nn.HybridBlock))
    -- own params only
    assert.same({"own"}, net.params:keys())
    -- reassigning a registered field keeps its place; another type is an error
    net.b = Inner(6)
    assert.same({"own", "b.w", "a.w", "d.weight", "d.bias"}, net:collect_params():keys())
    assert.equal(6, net:collect_params()["b.w"].shape[1])
    H.assert_error(function() net.a = 7 end, {"Changing attribute type for a from Block to number"})
    -- nil unregisters
    net.b = nil
    assert.same({"own", "a.w", "d.weight", "d.bias"}, net:collect_params():keys())
    -- forward through __call
    net:initialize()
    local y = net(np.ones({1, 2}))
    H.assert_shape(y, {1, 3})
  end)

  it("a HybridBlock's children must be HybridBlocks", function()
    local H1 = nn.HybridBlock:extend("H1")
    function H1:__init() self.child = nn.Sequential() end
    H.assert_error(function() return H1() end,
                   {"Children of HybridBlock must also be HybridBlock", "child", "Sequential",
                    "HybridSequential instead"})
    H.assert_error(function() return nn.HybridSequential():add(nn.Sequential()) end,
                   {"Children of HybridBlock must also be HybridBlock"})
    -- and luon still works
    H.assert_close(np.ones({2}) + 1, {2, 2})
  end)

  it("forward must be defined", function()
    local B = nn.Block:extend("NoForward")
    H.assert_error(function() return B()(np.ones({1})) end, {"NoForward: forward is not defined"})
  end)

  it("a custom block with unknown parameter shapes must infer them", function()
    local B = nn.HybridBlock:extend("Unknown")
    function B:__init() self.w = gluon.Parameter("w", {shape = {-1, 2}, allow_deferred_init = true}) end
    function B:forward(x) return x end
    local b = B()
    b:initialize()
    H.assert_error(function() return b(np.ones({1})) end,
                   {"Unknown has parameters with unknown shape", "infer_shape"})
    function B:infer_shape(x) self.w.shape = {x.shape[1], 2} end
    b(np.ones({3}))
    assert.same({3, 2}, b.w:data().shape)
  end)

  it("hooks see inputs and outputs; apply visits children first", function()
    local net = nn.HybridSequential()
    net:add(nn.Activation("relu"), nn.Activation("tanh"))
    local seen = {}
    local h = net:register_forward_hook(function(b, args, out) seen[#seen + 1] = {b:class_name(), out.shape} end)
    local pre = net:register_forward_pre_hook(function(b, args) seen[#seen + 1] = {"pre", args[1].shape} end)
    net(np.ones({2, 2}))
    assert.same({{"pre", {2, 2}}, {"HybridSequential", {2, 2}}}, seen)
    h.detach(); pre.detach()
    net(np.ones({2, 2}))
    assert.equal(2, #seen)
    local order = {}
    net:apply(function(b) order[#order + 1] = b:class_name() end)
    assert.same({"Activation", "Activation", "HybridSequential"}, order)
  end)
end)

describe("Sequential", function()
  it("names children '0', '1', ... and chains them", function()
    local net = nn.HybridSequential()
    net:add(nn.Conv2D(10, 3), nn.Dense(10, {activation = "relu"}))
    assert.same({"0.weight", "0.bias", "1.weight", "1.bias"}, net:collect_params():keys())
    assert.same({"0.weight", "1.weight"}, net:collect_params(".*weight"):keys())
    assert.same({"0.bias", "1.bias"}, net:collect_params("0.bias|1.bias"):keys())
    assert.same({"1.weight"}, net:collect_params("1\\.w"):keys())
    -- matched at the start, as re.match: nothing here, which is an error
    -- (an MXNet 1.x pattern such as 'dense0_.*' would silently train nothing)
    H.assert_error(function() net:collect_params("weight") end,
                   {"collect_params", "'weight' selects none of the 4 parameters", "'0.weight'", "MXNet 1.x"})
    assert.same({"0.weight", "1.weight"}, net:collect_params(".*?weight"):keys())  -- lazy, as greedy
    -- what Python's re rejects is an error, not a literal '*' that matches nothing
    H.assert_error(function() net:collect_params("*weight") end,
                   {"collect_params", '"*weight"', "nothing to repeat at position 0", ".*weight"})
    H.assert_error(function() net:collect_params("0.bias|+w") end, {"nothing to repeat at position 7"})
    H.assert_error(function() net:collect_params("1.w**") end, {"multiple repeat at position 4"})
    assert.same({"0.weight", "1.weight"}, net:collect_params("^.*weight"):keys()) -- re.match's anchor
    H.assert_error(function() net:collect_params("0.w{2}") end, {"repeat counts", "position 3"})
    H.assert_error(function() net:collect_params("0\\") end, {"trailing escape at position 1"})
    assert.equal(2, net:len())
    assert.equal("Conv2D", net[0]:class_name())
    assert.equal("Dense", net[1]:class_name())
    assert.equal("Dense", net[-1]:class_name())
    assert.equal("Conv2D", net[-2]:class_name())
    H.assert_error(function() return net[2] end, {"HybridSequential: index 2 is out of range for 2 children", "0..1"})
    H.assert_error(function() return net[-3] end, {"index -3 is out of range for 2 children"})
    local s = nn.Sequential()
    s:add(nn.Dense(2, {in_units = 3}))
    s:add(nn.Dense(1))
    s:initialize(init.One())
    local y = s(np.ones({4, 3}))
    H.assert_close(y, {{6}, {6}, {6}, {6}})   -- (1+1+1)*2 summed again: 3 per unit, 2 units
    assert.equal("Sequential(\n  (0): Dense(3 -> 2, linear)\n  (1): Dense(2 -> 1, linear)\n)", tostring(s))
    H.assert_error(function() s:add(3) end, {"Sequential:add: argument 1 must be a Block, got number"})
  end)

  it("#net is the number of children (MXNet's len(net)); ipairs and pairs raise", function()
    local seq = nn.Sequential()
    seq:add(nn.Dense(2), nn.Dense(3))
    assert.equal(2, #seq)
    local hs = nn.HybridSequential()
    assert.equal(0, #hs)
    hs:add(nn.Dense(2), nn.Dense(3), nn.Dense(4))
    assert.equal(3, #hs)
    assert.equal(hs:len(), #hs)
    local Three = gluon.HybridBlock:extend("Three")
    function Three:__init()
      self.a = nn.Dense(2)
      self.b = nn.Dense(3)
      self.scale = 2          -- a plain field is no child
      self.c = nn.Dense(4)
    end
    local t = Three()
    assert.equal(3, #t)
    assert.equal("userdata", type(t))
    assert.is_true(block.is_block(t))
    assert.equal(2, t.scale)
    assert.equal(t.a, t[0])
    assert.equal(t.c, t[-1])
    H.assert_error(function() return t[3] end, {"Three: index 3 is out of range for 3 children"})
    H.assert_error(function() return t[0.5] end, {"index 0.5 is out of range"})
    H.assert_error(function() return Three():forward() end, {"Three: forward is not defined"})
    t.c = nil
    assert.equal(2, #t)
    H.assert_error(function() for _ in ipairs(hs) do end end, {"table expected, got userdata"})
    H.assert_error(function() for _ in pairs(hs) do end end, {"table expected, got userdata"})
    H.assert_error(function() return t.sacle end, {"Three has no field 'sacle'", "'scale'"})
  end)

  it("hybridize on a Sequential of HybridBlocks warns as Gluon", function()
    local s = nn.Sequential()
    s:add(nn.Dense(2))
    local _, _, _, warnings = captured(function() s:hybridize() end)
    assert.equal(1, #warnings)
    assert.truthy(warnings[1]:find("Consider using HybridSequential", 1, true))
  end)
end)

describe("Parameter", function()
  it("has MXNet's fields and shape rules", function()
    local p = gluon.Parameter("weight", {shape = {10, 0}, allow_deferred_init = true})
    assert.equal("weight", p.name)
    assert.same({10, -1}, p.shape)
    assert.equal("float32", p.dtype)
    assert.equal("write", p.grad_req)
    assert.equal(1, p.lr_mult)
    assert.equal(1, p.wd_mult)
    assert.equal("Parameter (shape=(10, -1), dtype=float32)", tostring(p))
    p.shape = {10, 5}
    assert.same({10, 5}, p.shape)
    H.assert_error(function() p.shape = {10, 6} end,
                   {"Expected shape (10, 6) is incompatible with given shape (10, 5) for Parameter 'weight'"})
    H.assert_error(function() p.grad_req = "sometimes" end, {"grad_req must be 'write', 'add' or 'null'"})
    local q = gluon.Parameter("bias", {shape = 3, grad_req = "add", differentiable = false, lr_mult = 2})
    assert.same({3}, q.shape)
    assert.equal("null", q.grad_req)     -- not differentiable: forced 'null'
    assert.equal(2, q.lr_mult)
  end)

  it("errors before initialization say what to do", function()
    local p = gluon.Parameter("weight", {shape = {2, 3}})
    H.assert_error(function() return p:data() end, {"Parameter 'weight' has not been initialized"})
    H.assert_error(function() return p:list_device() end, {"Parameter 'weight' has not been initialized"})
    H.assert_error(function() p:reset_device(npx.cpu(1)) end,
                   {"Cannot reset device for Parameter 'weight' because it has not been initialized."})
    local u = gluon.Parameter("weight", {shape = {-1, 3}})
    H.assert_error(function() u:initialize() end,
                   {"Cannot initialize Parameter 'weight' because it has invalid shape: (-1, 3)."})
    local d = gluon.Parameter("weight", {shape = {-1, 3}, allow_deferred_init = true})
    d:initialize()
    H.assert_error(function() return d:data() end,
                   {"Parameter 'weight' has not been initialized yet because initialization was deferred. " ..
                    "Actual initialization happens during the first forward pass."})
    assert.same({npx.cpu(0)}, d:list_device())
  end)

  it("keeps one identical replica per device", function()
    local p = gluon.Parameter("weight", {shape = {10, 10}})
    p:initialize{init = "xavier", device = {npx.cpu(0), npx.cpu(1)}}
    assert.equal(2, #p:list_data())
    assert.equal(2, #p:list_grad())
    assert.same({npx.cpu(0), npx.cpu(1)}, p:list_device())
    assert.equal(npx.cpu(1), p:data(npx.cpu(1)).device)
    assert.same({10, 10}, p:data(npx.cpu(1)).shape)
    H.assert_close(p:data(npx.cpu(1)), p:data(npx.cpu(0)):totable(), 0)
    H.assert_error(function() return p:data(npx.cpu(2)) end,
                   {"Parameter 'weight' was not initialized on device cpu(2). " ..
                    "It was only initialized on [cpu(0), cpu(1)]."})
    -- gradients are zeros and belong to their replica
    H.assert_close(p:grad(npx.cpu(1)), H.map(function() return 0 end, H.iota({10, 10})))
    assert.equal(npx.cpu(1), p:grad(npx.cpu(1)).device)
    -- reset_device averages the replicas onto the new devices
    p:data(npx.cpu(1)):copyto(p:data(npx.cpu(0)))
    local before = p:data(npx.cpu(0)):totable()
    p:reset_device({npx.cpu(1), npx.cpu(2)})
    assert.same({npx.cpu(1), npx.cpu(2)}, p:list_device())
    H.assert_close(p:data(npx.cpu(2)), before)
    -- set_data overwrites every replica
    p:set_data(np.ones({10, 10}))
    H.assert_close(p:data(npx.cpu(1)):sum(), 100)
    H.assert_close(p:data(npx.cpu(2)):sum(), 100)
    H.assert_error(function() p:set_data(np.ones({3})) end, {"set_data's value has shape (3,)"})
  end)

  it("grad_req 'null' drops gradients, and back allocates zeros", function()
    local p = gluon.Parameter("weight", {shape = {2}})
    p:initialize{device = {npx.cpu(0), npx.cpu(1)}}
    p.grad_req = "null"
    assert.is_nil(p:data(npx.cpu(0)).grad)
    H.assert_error(function() return p:grad(npx.cpu(0)) end,
                   {"Cannot get gradient array for Parameter 'weight' because grad_req='null'"})
    p:setattr("grad_req", "add")
    assert.equal("add", p.grad_req)
    H.assert_close(p:grad(npx.cpu(1)), {0, 0})
    assert.equal("add", p:data(npx.cpu(1)).grad_req)
  end)

  it("accumulates gradients and zero_grad clears them", function()
    local p = gluon.Parameter("w", {shape = {3}, init = init.One()})
    p:initialize()
    local y = autograd.record(function() return p:data() * 2 end)
    y:backward()
    H.assert_close(p:grad(), {2, 2, 2})
    p:zero_grad()
    H.assert_close(p:grad(), {0, 0, 0})
  end)

  it("initialize twice warns and keeps the values; force_reinit re-runs", function()
    local p = gluon.Parameter("weight", {shape = {3}})
    p:initialize{init = init.Constant(2)}
    local _, _, _, warnings = captured(function() p:initialize{init = init.One()} end)
    assert.same({"Parameter 'weight' is already initialized, ignoring. Set force_reinit=True to re-initialize."},
                warnings)
    H.assert_close(p:data(), {2, 2, 2})
    p:initialize{init = init.One(), force_reinit = true}
    H.assert_close(p:data(), {1, 1, 1})
  end)

  it("cast changes data and gradients", function()
    local p = gluon.Parameter("weight", {shape = {2}, init = "ones"})
    p:initialize()
    p:cast("float64")
    assert.equal("float64", p.dtype)
    assert.equal("float64", p:data().dtype)
    assert.equal("float64", p:grad().dtype)
  end)
end)

describe("initializers", function()
  it("follow MXNet's precedence: explicit > the layer's > the block default", function()
    local net = nn.HybridSequential()
    net:add(nn.Dense(3, {in_units = 2}),
            nn.Dense(2, {in_units = 3, weight_initializer = init.Constant(5), bias_initializer = "ones"}),
            nn.BatchNorm{in_channels = 2})
    net:initialize(init.Constant(7))
    local ps = net:collect_params()
    H.assert_close(ps["0.weight"]:data(), {{7, 7}, {7, 7}, {7, 7}})
    H.assert_close(ps["0.bias"]:data(), {0, 0, 0})
    H.assert_close(ps["1.weight"]:data(), {{5, 5, 5}, {5, 5, 5}})
    H.assert_close(ps["1.bias"]:data(), {1, 1})
    H.assert_close(ps["2.gamma"]:data(), {1, 1})
    H.assert_close(ps["2.beta"]:data(), {0, 0})
    H.assert_close(ps["2.running_mean"]:data(), {0, 0})
    H.assert_close(ps["2.running_var"]:data(), {1, 1})
    assert.equal("null", ps["2.running_mean"].grad_req)
    -- an explicit init on the Parameter beats its own
    ps["1.bias"]:initialize{init = init.Constant(3), force_reinit = true}
    H.assert_close(ps["1.bias"]:data(), {3, 3})
    -- the block-level default is Uniform(0.07)
    local d = nn.Dense(50, {in_units = 40})
    d:initialize()
    local w = d.weight:data()
    assert.is_true(w:max():item() <= 0.07 and w:min():item() >= -0.07)
    assert.is_true(w:max():item() > 0.05 and w:min():item() < -0.05)
  end)

  it("draw from np.random, reproducibly after np.random.seed", function()
    local function draw(ini)
      np.random.seed(42)
      local p = gluon.Parameter("weight", {shape = {64, 32}})
      p:initialize{init = ini}
      return p:data()
    end
    H.assert_close(draw(init.Uniform(0.5)), draw(init.Uniform(0.5)):totable(), 0)
    local u = draw(init.Uniform(0.5))
    assert.is_true(u:max():item() <= 0.5 and u:min():item() >= -0.5 and u:max():item() > 0.45)
    local n = draw(init.Normal(2))
    local sd = math.sqrt(((n - n:mean()) ^ 2):mean():item())
    assert.is_true(math.abs(sd - 2) < 0.15, "Normal(2) std " .. sd)
    -- Xavier uniform: scale sqrt(3 / ((32 + 64) / 2)) = 0.25
    local x = draw(init.Xavier())
    assert.is_true(x:max():item() <= 0.25 and x:max():item() > 0.23)
    local xin = draw(init.Xavier{rnd_type = "gaussian", factor_type = "in", magnitude = 2})
    local sdx = math.sqrt(((xin - xin:mean()) ^ 2):mean():item())
    assert.is_true(math.abs(sdx - 0.25) < 0.02, "Xavier gaussian std " .. sdx)
    local m = draw(init.MSRAPrelu())  -- gaussian, magnitude 2/(1+0.25^2), avg fan 48
    local sdm = math.sqrt(((m - m:mean()) ^ 2):mean():item())
    assert.is_true(math.abs(sdm - math.sqrt(2 / 1.0625 / 48)) < 0.02, "MSRAPrelu std " .. sdm)
    H.assert_close(draw("zeros"):sum(), 0)
    H.assert_close(draw("ones"):sum(), 64 * 32)
  end)

  it("name their errors", function()
    local p = gluon.Parameter("bias", {shape = {3}})
    H.assert_error(function() p:initialize{init = init.Xavier()} end,
                   {"Xavier: cannot initialize 'bias' of shape (3)", "at least 2 dimensions"})
    H.assert_error(function() p:initialize{init = "bogus"} end, {"unknown initializer bogus"})
    assert.equal("Uniform(scale=0.07)", tostring(init.Uniform()))
  end)
end)

describe("ParameterDict", function()
  it("is keyed by structural names with ordered methods", function()
    local net = nn.HybridSequential()
    net:add(nn.Dense(3, {in_units = 2}), nn.Dense(1, {in_units = 3}))
    local ps = net:collect_params()
    local names = {}
    for name, p in pairs(ps) do names[#names + 1] = name; assert.equal(p, ps[name]) end
    table.sort(names)
    assert.same({"0.bias", "0.weight", "1.bias", "1.weight"}, names)
    assert.same({"0.weight", "0.bias", "1.weight", "1.bias"}, ps:keys())
    assert.equal(ps["1.weight"], ps:values()[3])
    assert.equal(4, ps:len())
    local it = {}
    for name, p in ps:items() do it[#it + 1] = name .. "=" .. p.name end
    assert.same({"0.weight=weight", "0.bias=bias", "1.weight=weight", "1.bias=bias"}, it)
    ps:initialize{init = init.One(), device = {npx.cpu(0), npx.cpu(1)}}
    assert.same({npx.cpu(0), npx.cpu(1)}, ps["0.bias"]:list_device())
    ps:reset_device(npx.cpu(1))
    assert.same({npx.cpu(1)}, ps["1.weight"]:list_device())
    H.assert_close(net(np.ones({2, 2}, {device = npx.cpu(1)})), {{6}, {6}})
    ps:setattr("grad_req", "null")
    assert.equal("null", ps["0.weight"].grad_req)
    ps:setattr("lr_mult", 0.5)
    assert.equal(0.5, ps["1.bias"].lr_mult)
    ps:zero_grad()
  end)

  it("initialize takes keywords in a trailing table; ctx is device's MXNet 1.x name", function()
    local cpu1 = npx.cpu(1)
    local function net() return nn.Dense(2, {in_units = 3}) end
    local a = net():initialize(init.One(), {device = cpu1})
    assert.same({cpu1}, a.weight:list_device())
    H.check(a.weight:data(), {{1, 1, 1}, {1, 1, 1}}, {device = cpu1})
    local b = net():initialize(init.One(), {ctx = cpu1})
    assert.same({cpu1}, b.weight:list_device())
    local c = net():initialize{init = init.One(), ctx = {npx.cpu(0), cpu1}}
    assert.same({npx.cpu(0), cpu1}, c.weight:list_device())
    c:initialize(init.Zero(), {force_reinit = true, ctx = cpu1})
    H.check(c.weight:data(), {{0, 0, 0}, {0, 0, 0}}, {device = cpu1})
    local p = Parameter("w", {shape = {2}})
    p:initialize(init.One(), {ctx = cpu1})
    assert.same({cpu1}, p:list_device())
    p:reset_device{ctx = npx.cpu(0)}
    assert.same({npx.cpu(0)}, p:list_device())
    H.assert_error(function() net():initialize(init.One(), {devise = cpu1}) end,
                   {"initialize: unknown argument 'devise'", "device", "ctx"})
    H.assert_error(function() net():initialize{device = npx.cpu(0), ctx = cpu1} end,
                   {"initialize: device (cpu(0)) and ctx (cpu(1)) both given"})
    H.assert_error(function() Parameter("w", {shape = {2}}):initialize(nil, {force_reinit = true, verbos = 1}) end,
                   {"initialize: unknown argument 'verbos'"})
    H.assert_error(function() net():initialize(init.One(), cpu1, false, false, 5) end,
                   {"initialize: takes at most 4 positional arguments"})
  end)

  it("Parameter and collect_params check their keywords", function()
    H.assert_error(function() Parameter("w", {shape = {2}, grad_reqq = "add"}) end,
                   {"Parameter: unknown argument 'grad_reqq'", "did you mean 'grad_req'?"})
    H.assert_error(function() Parameter("w", {shape = {2}, stype = "row_sparse"}) end,
                   {"Parameter: stype 'row_sparse' is not supported"})
    local p = Parameter{name = "v", shape = {2}, lr_mult = 0.5}
    assert.equal("v", p.name)
    assert.equal(0.5, p.lr_mult)
    local q = Parameter("u", "add", {3})              -- MXNet's positional order
    assert.equal("add", q.grad_req)
    assert.same({3}, q.shape)
    local net = nn.Dense(2, {in_units = 3})
    assert.same({"weight"}, net:collect_params{select = ".*weight"}:keys())
    H.assert_error(function() net:collect_params{selct = "w"} end, {"collect_params: unknown argument 'selct'"})
  end)

  it("net:initialize with a device list places every replica (tutorial 8.3)", function()
    local net = leaf_network()
    net:initialize()
    captured(function() return net:summary(np.random.uniform({size = {2, 3, 128, 128}})) end)
    local devices = {npx.cpu(0), npx.cpu(1)}
    net:initialize({force_reinit = true, device = devices})
    for name, p in net:collect_params():items() do
      assert.same(devices, p:list_device(), name)
      H.assert_close(p:data(npx.cpu(1)), p:data(npx.cpu(0)):totable(), 0)
    end
    local out = net(np.random.uniform({size = {2, 3, 128, 128}, device = npx.cpu(1)}))
    H.check(out, nil, {shape = {2, 2}, device = npx.cpu(1)})
  end)
end)

describe("save_parameters / load_parameters", function()
  local has_serialize = pcall(require, "luon.serialize")
  local path = os.tmpname()
  after_each(function() os.remove(path) end)

  local function small_net(units)
    local net = nn.HybridSequential()
    net:add(nn.Conv2D{channels = 2, kernel_size = 1}, nn.BatchNorm(), nn.Flatten(), nn.Dense(units or 3))
    return net
  end

  if not has_serialize then
    pending("luon.serialize is not there yet")
    return
  end

  it("round-trips by structural name, without initialize (tutorial 7.1)", function()
    local net = small_net()
    net:initialize(init.Uniform(1))
    net(np.ones({1, 2, 2, 2}))
    net:save_parameters(path)
    local fresh = small_net()
    fresh:load_parameters(path, {device = npx.cpu(1)})
    for name, p in net:collect_params():items() do
      local q = fresh:collect_params()[name]
      assert.same(p.shape, q.shape, name)
      assert.same({npx.cpu(1)}, q:list_device())
      H.assert_close(q:data(), p:data():totable(), 0)
    end
    local x = np.random.uniform({size = {2, 2, 2, 2}})
    H.assert_close(fresh(x:copyto(npx.cpu(1))), net(x):totable())
    -- deferred then loaded: shapes filled from the file
    local deferred = small_net()
    deferred:initialize()
    deferred:load_parameters(path)
    assert.same({2, 2, 1, 1}, deferred:collect_params()["0.weight"]:data().shape)
    -- the tutorial's reset_device after loading
    fresh:collect_params():reset_device(npx.cpu(0))
    H.assert_close(fresh(x), net(x):totable())
  end)

  it("load_parameters takes ctx, positional arguments in MXNet's order, and checks its keywords", function()
    local net = small_net()
    net:initialize()
    net(np.ones({1, 2, 2, 2}))
    net:save_parameters(path, {deduplicate = true})
    local a = small_net()
    a:load_parameters(path, {ctx = npx.cpu(1)})
    assert.same({npx.cpu(1)}, a:collect_params()["0.weight"]:list_device())
    local b = small_net()
    b:load_parameters(path, npx.cpu(1), false, true)  -- ctx, allow_missing, ignore_extra
    assert.same({npx.cpu(1)}, b:collect_params()["0.weight"]:list_device())
    H.assert_error(function() small_net():load_parameters(path, {cast_dtyp = true}) end,
                   {"load_parameters: unknown argument 'cast_dtyp'", "cast_dtype", "ctx",
                    "did you mean 'cast_dtype'?"})
    H.assert_error(function() net:save_parameters(path, {dedup = true}) end,
                   {"save_parameters: unknown argument 'dedup'", "deduplicate"})
  end)

  it("runs the tutorial's section 7.1 and 7.2 as written", function()
    local gpu = npx.num_gpus() > 0 and npx.gpu() or npx.cpu()
    local net = leaf_network()
    net:initialize()
    captured(function() return net:summary(np.random.uniform({size = {4, 3, 128, 128}})) end)
    net:save_parameters(path)
    local x = np.random.uniform({size = {1, 3, 128, 128}})
    local before = net(x):totable()
    net:load_parameters(path, {device = gpu})
    net:collect_params():reset_device(gpu)
    local out = net(x:copyto(gpu))
    H.check(out:asnumpy(), before, {shape = {1, 2}, tol = 1e-4})
    -- a fresh network loads without initialize
    local fresh = leaf_network()
    fresh:load_parameters(path, {device = gpu})
    H.check(fresh(x:copyto(gpu)), before, {tol = 1e-4})
  end)

  it("names every missing, extra or mismatched parameter and changes nothing", function()
    local net = small_net()
    net:initialize()
    net(np.ones({1, 2, 2, 2}))
    net:save_parameters(path)
    local other = small_net(4)  -- dense 4 units: shape mismatch
    other:initialize(init.Zero())
    other(np.ones({1, 2, 2, 2}))
    H.assert_error(function() other:load_parameters(path) end,
                   {"'3.weight': shape incompatible expected (4, 8) vs saved (3, 8)",
                    "'3.bias': shape incompatible expected (4,) vs saved (3,)"})
    local msg = select(2, pcall(other.load_parameters, other, path))
    assert.is_nil(msg:find("cast_dtype", 1, true), "a shape mismatch suggests cast_dtype: " .. msg)
    H.assert_error(function() other:load_parameters(path, 5) end, {"load_parameters: device must be a Device", "5"})
    H.assert_error(function() other:load_parameters(path, {allow_mising = true}) end,
                   {"load_parameters: unknown argument 'allow_mising'", "allow_missing"})
    H.assert_error(function() other:apply(5) end, {"apply: expected a function"})
    H.assert_error(function() other:share_parameters(5) end, {"share_parameters: expected a ParameterDict"})
    -- a value that is not a Parameter, or one of another shape, replaces nothing
    H.assert_error(function() other:share_parameters({["0.weight"] = 5}) end,
                   {"share_parameters: '0.weight' is not a Parameter (got 5)"})
    H.assert_error(function() other:share_parameters(net:collect_params()) end,
                   {"share_parameters: '3.weight' has shape (4, 8) here but (3, 8)"})
    assert.are_not.equal(net:collect_params()["0.weight"], other:collect_params()["0.weight"])
    -- nothing was loaded: the conv weight is still zero
    H.assert_close(other:collect_params()["0.weight"]:data():sum(), 0)
    local bigger = nn.HybridSequential()
    bigger:add(nn.Conv2D{channels = 2, kernel_size = 1}, nn.BatchNorm(), nn.Flatten(), nn.Dense(3), nn.Dense(1))
    H.assert_error(function() bigger:load_parameters(path) end,
                   {"Parameters '4.weight', '4.bias' are missing", "allow_missing = true"})
    -- a file of no parameters is no exception
    local empty = nn.Sequential()
    empty:add(nn.Flatten())
    empty:initialize()
    local empty_path = os.tmpname()
    empty:save_parameters(empty_path)
    H.assert_error(function() other:load_parameters(empty_path) end,
                   {"'0.weight'", "are missing", "contains parameters: []"})
    other:load_parameters(empty_path, {allow_missing = true})
    os.remove(empty_path)
    local fewer = nn.HybridSequential()
    fewer:add(nn.Conv2D{channels = 2, kernel_size = 1})
    H.assert_error(function() fewer:load_parameters(path) end,
                   {"Parameters '1.gamma', '1.beta', '1.running_mean', '1.running_var', '3.weight', '3.bias' loaded from",
                    "are not present in the block", "ignore_extra = true"})
    fewer:load_parameters(path, {ignore_extra = true})
    assert.same({2, 2, 1, 1}, fewer:collect_params()["0.weight"]:data().shape)
    bigger:load_parameters(path, {allow_missing = true})
    assert.same({3, 8}, bigger:collect_params()["3.weight"]:data().shape)
  end)

  it("checks dtypes; cast_dtype converts, dtype_source = 'saved' adopts the file's", function()
    local net = nn.Dense(2, {in_units = 2})
    net:initialize(init.One())
    net:save_parameters(path)
    local d64 = nn.Dense(2, {in_units = 2, dtype = "float64"})
    H.assert_error(function() d64:load_parameters(path) end,
                   {"'weight': dtype incompatible expected float64 vs saved float32", "cast_dtype = true"})
    d64:load_parameters(path, {cast_dtype = true})
    assert.equal("float64", d64.weight:data().dtype)
    H.assert_close(d64.weight:data(), {{1, 1}, {1, 1}})
    local saved = nn.Dense(2, {in_units = 2, dtype = "float64"})
    saved:load_parameters(path, {cast_dtype = true, dtype_source = "saved"})
    assert.equal("float32", saved.weight.dtype)
    assert.equal("float32", saved.bias:data().dtype)
  end)

  it("saves the mean of the replicas", function()
    local p = nn.Dense(1, {in_units = 1, use_bias = false})
    p:initialize{init = init.Zero(), device = {npx.cpu(0), npx.cpu(1)}}
    p.weight:data(npx.cpu(1)):copyto(p.weight:data(npx.cpu(0)))
    np.full({1, 1}, 4):copyto(p.weight:data(npx.cpu(1)))
    p:save_parameters(path)
    local q = nn.Dense(1, {in_units = 1, use_bias = false})
    q:load_parameters(path)
    H.assert_close(q.weight:data(), {{2}})
  end)
end)
