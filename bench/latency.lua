-- Batch-1 inference latency (issue: hybridize and batch-1 speed): the crash
-- course's MLP 512-256-128-2, one Dense(256) on a (1, 512) input, and the
-- tutorial's LeafNetwork on one 3x128x128 image, in predict mode, eager and
-- hybridized. Prints "luon <workload> <median us>" per line, the median of
-- 9 samples of many calls, each call waiting for its output. --device gpu
-- runs on gpu(0), where a hybridized line also says whether the replay ran
-- as a CUDA graph (LUON_CUDA_GRAPHS=0 for the same without). --onnx DIR
-- also writes each hybridized network as DIR/<workload>.onnx
-- (luon.onnx.export_model) with its input and output (.x.npy, .y.npy), for
-- bench/latency_peers.py --luon-onnx DIR to run in ONNX Runtime.
--   build/luon bench/latency.lua [--device gpu] [--onnx DIR] [mlp] [dense256] [leafnet]
local luon = require("luon")
local np, npx, nn = luon.np, luon.npx, luon.gluon.nn
local hybrid_mod = require("luon.gluon.hybrid")
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local LeafNetwork = dofile(here .. "../examples/leafnet.lua")

local function mlp()
  local net = nn.HybridSequential()
  net:add(nn.Dense(256, {activation = "relu"}), nn.Dense(128, {activation = "relu"}), nn.Dense(2))
  return net, {1, 512}
end
local function dense256() return nn.Dense(256), {1, 512} end
local function leafnet() return LeafNetwork(), {1, 3, 128, 128} end
local workloads = {mlp = mlp, dense256 = dense256, leafnet = leafnet}
local order = {"mlp", "dense256", "leafnet"}

local function median_us(f, iters)
  local s = {}
  for k = 1, 9 do
    local t0 = luon.clock()
    for _ = 1, iters do f() end
    s[k] = (luon.clock() - t0) / iters * 1e6
  end
  table.sort(s)
  return s[5]
end

local names, dev, onnx_dir = {}, npx.cpu(), nil
local k = 1
while k <= #arg do
  if arg[k] == "--device" then
    dev = ({cpu = npx.cpu(), gpu = npx.gpu(0)})[arg[k + 1]] or error("latency.lua: --device takes cpu or gpu")
    k = k + 2
  elseif arg[k] == "--onnx" then
    onnx_dir, k = arg[k + 1] or error("latency.lua: --onnx takes a folder"), k + 2
  else
    names[#names + 1], k = arg[k], k + 1
  end
end
if #names == 0 then names = order end
for _, name in ipairs(names) do
  local make = workloads[name] or error(("latency.lua: unknown workload %s (known: mlp, dense256, leafnet)"):format(name))
  for _, hybrid in ipairs({false, true}) do
    np.random.seed(0)
    local net, shape = make()
    net:initialize{device = dev}
    if hybrid then net:hybridize{static_alloc = true, static_shape = true} end
    local x = np.random.uniform(0, 1, shape):copyto(dev)
    local function call() net(x):wait_to_read() end
    for _ = 1, 20 do call() end -- warm-up: deferred shapes, JIT traces, allocator caches
    local probe = median_us(call, 1)
    local iters = math.max(1, math.floor(20000 / math.max(probe, 1)))
    local us = median_us(call, iters)
    local cg = dev.device_type == "gpu" and hybrid and
               (hybrid_mod.cuda_graphs(net)[1] == 1 and " (a CUDA graph)" or " (op by op)") or ""
    print(("luon%s %s %.1f%s"):format(hybrid and "-hybrid" or "", name, us, cg))
    if hybrid and onnx_dir then
      local base = onnx_dir .. "/" .. name
      luon.onnx.export_model(net, nil, nil, nil, base .. ".onnx")
      np.save(base .. ".x.npy", x:copyto(npx.cpu()))
      np.save(base .. ".y.npy", net(x):copyto(npx.cpu()))
    end
  end
end
