-- bench/dist.lua: luon.dist measured on this machine (run by scripts/bench dist).
--   luon bench/dist.lua step [GLOBAL_BATCH]   the tutorial's LeafNetwork step
--       (forward, loss, backward, Trainer{kvstore='dist'} step) with the
--       global batch (default 32) split over the processes; rank 0 prints
--       "dist-step <procs> <threads/proc> <global batch> <samples/s> <ms/step>"
--   luon bench/dist.lua allreduce [N]          dist.allreduce of N float32
--       (default 25M) in place; rank 0 prints "dist-allreduce <procs> <N>
--       <ms> <algbw GB/s> <busbw GB/s>" (busbw = algbw * 2(p-1)/p, as nccl-tests)
-- Medians over timed repetitions after warm-up. Run alone (1 process) or
-- under mpirun -np P. LUON_NUM_THREADS sets the CPU threads per process.
local luon = require("luon")
local np, gluon, autograd, dist = luon.np, luon.gluon, luon.autograd, luon.dist
local nn = gluon.nn

local rank, size = dist.init()
local mode = arg[1] or "step"

local function median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end

if mode == "allreduce" then
  local n = tonumber(arg[2]) or 25 * 1000 * 1000
  local x = np.ones({n})
  local t = {}
  for k = 1, 2 + 7 do
    dist.barrier()
    local t0 = luon.clock()
    dist.allreduce(x)
    if k > 2 then t[#t + 1] = luon.clock() - t0 end
  end
  local s = median(t)
  local bytes = n * 4
  local alg = bytes / s / 1e9
  if rank == 0 then
    print(("dist-allreduce %d %d %.2f %.2f %.2f"):format(size, n, s * 1e3, alg, alg * 2 * (size - 1) / size))
  end
elseif mode == "step" then
  local global = tonumber(arg[2]) or 32
  if global % size ~= 0 then error(("global batch %d does not split over %d processes"):format(global, size)) end
  local b = global / size
  local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
  local LeafNetwork = dofile(here .. "../examples/leafnet.lua")
  np.random.seed(0)
  local net = LeafNetwork()
  net:initialize{init = luon.init.Xavier()}
  local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
  local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.001}, {kvstore = "dist"})
  np.random.seed(1 + rank)
  local x = np.random.uniform(0, 1, {b, 3, 128, 128})
  local y = np.random.randint(0, 2, {b})
  local function step()
    local l = autograd.record(function() return loss_fn(net(x), y) end)
    l:backward()
    trainer:step(b)
    l:wait_to_read()
  end
  for _ = 1, 3 do step() end
  local t = {}
  for k = 1, 9 do
    dist.barrier()
    local t0 = luon.clock()
    step()
    t[k] = luon.clock() - t0
  end
  local s = median(t)
  if rank == 0 then
    print(("dist-step %d %d %d %.1f %.1f"):format(size, luon.npx.num_threads(),
                                                 global, global / s, s * 1e3))
  end
else
  error("usage: bench/dist.lua step [GLOBAL_BATCH] | allreduce [N]")
end
