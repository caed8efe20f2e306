-- The tutorial's LeafNetwork training step (forward, softmax cross-entropy,
-- backward, SGD step) at the batch sizes given as arguments (default 4 32
-- 128), on the CPU or, with --device gpu, on gpu(0). Prints "luon <batch>
-- <samples/s> <ms/step>" per batch size: the median step over timed steps
-- after warm-up, each step timed to completion (wait_to_read). On a GPU the
-- line goes on with "peak <MiB> MiB (classes <MiB> MiB)": the most device
-- memory asked for during the steps (npx.memory_stats' peak_requested, what
-- PyTorch's max_memory_allocated counts in the peer), then the most held in
-- luon's size classes. --profile sync|launch then prints luon.profiler's
-- per-op table over as many steps (sync: each op waited for, so a GPU op's
-- time is its kernels'; launch: the host's time only). --hybridize runs it
-- hybridized (static_alloc), as bench/leafnet_mx.py runs MXNet's.
local luon = require("luon")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local LeafNetwork = dofile(here .. "../examples/leafnet.lua")

local batches, dev, on_gpu, profile, hybridize = {}, npx.cpu(0), false, nil, false
local k = 1
while k <= #arg do
  if arg[k] == "--profile" then -- after the timing: luon.profiler's table (sync: each op waited for)
    profile = arg[k + 1]
    if profile ~= "sync" and profile ~= "launch" then error("leafnet: --profile takes sync or launch, got " .. tostring(profile)) end
    k = k + 2
  elseif arg[k] == "--hybridize" then -- hybridize{static_alloc = true}; the lines say luon-hybrid
    hybridize = true
    k = k + 1
  elseif arg[k] == "--device" then
    on_gpu = arg[k + 1] == "gpu"
    if not on_gpu and arg[k + 1] ~= "cpu" then error("leafnet: --device takes cpu or gpu, got " .. tostring(arg[k + 1])) end
    dev = on_gpu and npx.gpu(0) or npx.cpu(0)
    k = k + 2
  else
    batches[#batches + 1] = tonumber(arg[k]) or error("leafnet: not a batch size: " .. arg[k])
    k = k + 1
  end
end
if #batches == 0 then batches = {4, 32, 128} end
np.random.seed(0)
for _, b in ipairs(batches) do
  collectgarbage("collect")
  if on_gpu then npx.reset_peak_memory_stats(dev) end
  local net = LeafNetwork()
  net:initialize{init = luon.init.Xavier(), device = dev}
  if hybridize then net:hybridize{static_alloc = true} end
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.001})
  local x = np.random.uniform(0, 1, {b, 3, 128, 128}, {device = dev})
  local y = np.random.randint(0, 2, {b}, {device = dev})
  local function step()
    local l = autograd.record(function() return loss_fn(net(x), y) end)
    l:backward()
    trainer:step(b)
    l:wait_to_read()
  end
  local warm, timed = 3, b >= 128 and 5 or b >= 32 and 9 or 25
  if on_gpu then timed = timed * 4 end
  for _ = 1, warm do step() end
  local t = {}
  for i = 1, timed do
    local t0 = luon.clock()
    step()
    t[i] = luon.clock() - t0
  end
  table.sort(t)
  local med = t[math.floor((timed + 1) / 2)]
  local line = ("%s %d %.1f %.1f"):format(hybridize and "luon-hybrid" or "luon", b, b / med, med * 1e3)
  if on_gpu then
    local m = npx.memory_stats(dev)
    line = line .. (" peak %.1f MiB (classes %.1f MiB)"):format(m.peak_requested / 2 ^ 20, m.peak / 2 ^ 20)
  end
  print(line)
  if profile then
    luon.profiler.set_config{sync = profile == "sync"}
    luon.profiler.reset()
    luon.profiler.set_state("run")
    local t0 = luon.clock()
    for _ = 1, timed do step() end
    local wall = (luon.clock() - t0) / timed
    luon.profiler.set_state("stop")
    print(("profile (%s) batch %d: %.3f ms/step, ops' share below per step x %d steps"):format(profile, b, wall * 1e3, timed))
    print(luon.profiler.dumps{reset = true})
  end
  net, trainer, x, y = nil, nil, nil, nil
end
