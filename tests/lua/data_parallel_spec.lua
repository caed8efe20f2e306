-- The core property of data parallelism: training N steps on two devices
-- with split_and_load gives the same parameters, to float32 tolerance, as
-- training the same N steps on one device with the same global batches.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd
local nn = gluon.nn
local split_and_load = gluon.utils.split_and_load

local function make_net(batch_norm)
  local net = nn.HybridSequential()
  net:add(nn.Conv2D{channels = 4, kernel_size = 3, activation = "relu"},
          nn.MaxPool2D{pool_size = 2, strides = 2})
  if batch_norm then net:add(nn.BatchNorm(batch_norm)) end
  net:add(nn.Flatten(), nn.Dense(8, {activation = "tanh"}), nn.Dense(3))
  return net
end

-- Train `steps` steps on devices with the global batches; return the net.
local function train(devices, opts)
  np.random.seed(7)
  local net = make_net(opts.batch_norm)
  net:initialize{init = luon.init.Xavier(), device = devices}
  net(np.zeros({1, 2, 10, 10}, {device = devices[1]})) -- materialise deferred shapes
  local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1, momentum = 0.9})
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  for step = 1, opts.steps do
    np.random.seed(100 + step)
    local data = np.random.uniform(-1, 1, {opts.batch, 2, 10, 10})
    local label = np.random.randint(0, 3, {opts.batch})
    local xs = split_and_load(data, devices, {even_split = false})
    local ys = split_and_load(label, devices, {even_split = false})
    local losses = autograd.record(function()
      local ls = {}
      for i, x in ipairs(xs) do ls[i] = loss_fn(net(x), ys[i]) end
      return ls
    end)
    for _, l in ipairs(losses) do l:backward() end
    trainer:step(opts.batch)
  end
  return net
end

local function compare(one, two)
  local p1, p2 = one:collect_params(), two:collect_params()
  local names = p1:keys()
  assert.are.same(names, p2:keys())
  for _, name in ipairs(names) do
    local ref = p1[name]:data():totable()
    local replicas = p2[name]:list_data()
    assert.are.equal(2, #replicas)
    for _, r in ipairs(replicas) do
      H.assert_close(r:totable(), ref, 2e-5)
    end
    -- replicas are identical to the bit
    assert.are.same(replicas[1]:totable(), replicas[2]:totable())
  end
end

describe("data parallelism on two devices equals one device", function()
  local two = {npx.cpu(0), npx.cpu(1)}
  it("with an even split", function()
    compare(train({npx.cpu(0)}, {steps = 4, batch = 8}), train(two, {steps = 4, batch = 8}))
  end)
  it("with an uneven split (even_split = false)", function()
    compare(train({npx.cpu(0)}, {steps = 4, batch = 7}), train(two, {steps = 4, batch = 7}))
  end)
  it("with BatchNorm using global statistics", function()
    local bn = {use_global_stats = true}
    compare(train({npx.cpu(0)}, {steps = 3, batch = 6, batch_norm = bn}),
            train(two, {steps = 3, batch = 6, batch_norm = bn}))
  end)
  it("with training-mode BatchNorm the replicas stay identical", function()
    -- each device normalises by its own part of the batch (as MXNet's
    -- BatchNorm does; no synchronised statistics), so the result differs
    -- from one device, but the replica rule keeps every replica identical:
    -- gradients are summed, running statistics averaged after each step
    local net = train(two, {steps = 3, batch = 6, batch_norm = {}})
    for _, p in ipairs(net:collect_params():values()) do
      local r = p:list_data()
      assert.are.same(r[1]:totable(), r[2]:totable())
    end
  end)
end)
