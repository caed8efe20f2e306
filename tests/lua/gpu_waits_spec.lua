-- gpu_waits_spec: where a training step on npx.gpu(0) makes the host wait
-- for the device. On a real GPU every wait stalls the queue of launches
-- (the issue's "no hidden synchronisation"); the stand-in backend
-- (tests/c/fake_cuda.c, scripts/test's stand-in pass) counts the waits a
-- real one would make: device syncs, event syncs and copies to the host.
-- Forward, loss, backward, the optimizer step and a metric's update must
-- make none; wait_to_read and the metric's get() make theirs.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local ffi = require("ffi")
local luon = H.luon
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd
local nn = gluon.nn

local fake
if H.stand_in_gpus then
  ffi.cdef("void luon_fake_waits(int64_t out[3]);")
  fake = ffi.load(os.getenv("LUON_CUDA_LIB")) -- the library the core loaded: one set of counters
end

local function waits()
  local o = ffi.new("int64_t[3]")
  fake.luon_fake_waits(o)
  return {device_sync = tonumber(o[0]), event_sync = tonumber(o[1]), to_host = tonumber(o[2])}
end

local function net_on(devices)
  local net = nn.HybridSequential()
  net:add(nn.Conv2D{channels = 4, kernel_size = 3, activation = "relu"}, nn.MaxPool2D{pool_size = 2, strides = 2},
          nn.BatchNorm(), nn.Flatten(), nn.Dense(16, {activation = "relu"}), nn.Dropout(0.2), nn.Dense(3))
  net:initialize{init = luon.init.Xavier(), device = devices}
  return net
end

describe("host waits for npx.gpu devices (counted by the stand-in backend)", function()
  local function skip()
    if not fake then pending("needs the stand-in backend (LUON_CUDA_LIB=.../libluon_fake_cuda.so)") return true end
    if npx.num_gpus() < 2 then pending("needs two stand-in GPUs") return true end
    return false
  end

  for _, opt in ipairs({{"sgd", {learning_rate = 0.1, momentum = 0.9, wd = 1e-4, clip_gradient = 1}},
                        {"adam", {learning_rate = 0.01}}}) do
    it("a training step on one GPU with " .. opt[1] .. " and a metric's update wait for nothing", function()
      if skip() then return end
      local dev = npx.gpu(0)
      np.random.seed(3)
      local net = net_on(dev)
      local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
      local trainer = gluon.Trainer(net:collect_params(), opt[1], opt[2])
      local acc, lm = gluon.metric.Accuracy(), gluon.metric.Loss()
      local x = np.random.uniform(-1, 1, {4, 2, 10, 10}, {device = dev})
      local y = np.random.randint(0, 3, {4}, {device = dev})
      local function step()
        local out
        local l = autograd.record(function()
          out = net(x)
          return loss_fn(out, y)
        end)
        l:backward()
        trainer:step(4)
        acc:update(y, out)
        lm:update(nil, l)
        return l
      end
      step():wait_to_read() -- the first call settles deferred shapes
      local w0 = waits()
      local l
      for _ = 1, 3 do l = step() end
      assert.same(w0, waits())
      l:wait_to_read()
      local w1 = waits()
      assert.is_true(w1.device_sync + w1.event_sync > w0.device_sync + w0.event_sync, "wait_to_read waits")
      assert.equal(w0.to_host, w1.to_host)
      local _, a = acc:get()
      assert.is_true(a >= 0 and a <= 1)
      assert.is_true(waits().to_host > w1.to_host, "get() reads the device's sums")
    end)
  end

  -- The tutorial's data-parallel step over devs: split, one loss per device,
  -- backward, trainer:step, a metric's update; returns the losses.
  local function dp_step(t, data, label)
    local xs = gluon.utils.split_and_load(data, t.devs)
    local ys = gluon.utils.split_and_load(label, t.devs)
    local outs, ls = {}, {}
    autograd.record(function()
      for i, x in ipairs(xs) do
        outs[i] = t.net(x)
        ls[i] = t.loss_fn(outs[i], ys[i])
      end
    end)
    for _, l in ipairs(ls) do l:backward() end
    t.trainer:step(data.shape[1])
    t.acc:update(ys, outs)
    return ls
  end
  local function dp_setup(seed)
    local devs = {npx.gpu(0), npx.gpu(1)}
    np.random.seed(seed)
    local net = net_on(devs)
    return {devs = devs, net = net, loss_fn = gluon.loss.SoftmaxCrossEntropyLoss(), acc = gluon.metric.Accuracy(),
            trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1})}
  end

  it("a data-parallel step over two GPUs (split_and_load, one loss per GPU, trainer:step) waits for nothing", function()
    if skip() then return end
    local t = dp_setup(4)
    local data = np.random.uniform(-1, 1, {8, 2, 10, 10})
    local label = np.random.randint(0, 3, {8})
    for _, l in ipairs(dp_step(t, data, label)) do l:wait_to_read() end
    local w0 = waits()
    for _ = 1, 2 do dp_step(t, data, label) end
    assert.same(w0, waits())
  end)

  it("a DataLoader's pinned batches go to the GPUs without a wait", function()
    if skip() then return end
    local t = dp_setup(5)
    local ds = gluon.data.ArrayDataset(np.random.uniform(-1, 1, {24, 2, 10, 10}), np.random.randint(0, 3, {24}))
    local loader = gluon.data.DataLoader(ds, {batch_size = 8})
    local w0, n = nil, 0
    for _, batch in loader:enumerate() do
      local ls = dp_step(t, batch[1], batch[2])
      n = n + 1
      if n == 1 then
        for _, l in ipairs(ls) do l:wait_to_read() end
        w0 = waits()
      end
    end
    assert.equal(3, n)
    assert.same(w0, waits())
  end)
end)
