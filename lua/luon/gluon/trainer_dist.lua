-- luon.gluon.trainer_dist: gluon.Trainer's side of kvstore = 'dist' (trainer.lua
-- calls these; the collectives are luon.dist's). Parameters start as rank
-- 0's: those initialized now are broadcast now, the others (deferred
-- initialization) when they are materialised (every process runs the same
-- first forward).
local core = require("luon.core")
local dist = require("luon.dist")
local C = core.C

local M = {}

-- the number of processes (the global batch is each one's times this)
M.size = dist.size

local managed = setmetatable({}, {__mode = "k"})
local hooked = false

local function copy_to_replicas(list)
  for k = 2, #list do core.check(C.luon_tensor_copy(list[k].t, list[1].t)) end
end

function M.init(tr)
  dist.init()
  if not hooked then
    hooked = true
    require("luon.gluon.parameter").on_materialize = function(p, value)
      if managed[p] then dist.broadcast(value, 0) end
    end
  end
  for _, p in ipairs(tr._params) do
    managed[p] = true
    if p._data then
      local data = p:list_data()
      dist.broadcast(data[1], 0)
      copy_to_replicas(data)
    end
  end
  rawset(tr, "_dist_cache", {grads = {}, states = {}})
end

-- After the replicas of this process are summed: the sum across processes
-- (replica 1's gradient, then copied to the others), and the global batch
-- size for step (the sum of every process's). GPU gradients are summed on
-- their GPU by NCCL; the batch size, a host number the optimizer reads,
-- stays on the CPU and goes through MPI (no wait for the GPU).
function M.allreduce(tr)
  if dist.size() == 1 then return end
  local np = require("luon.np")
  local arrays, lists = {}, {}
  for _, p in ipairs(tr._params) do
    if p.grad_req ~= "null" then
      local g = p:list_grad()
      arrays[#arrays + 1] = g[1]
      lists[#lists + 1] = g
    end
  end
  local cache = tr._dist_cache
  local batch = tr._local_batch and np.array({tr._local_batch})
  if batch then arrays[#arrays + 1] = batch end
  dist.allreduce_many(arrays, "sum", cache.grads)
  for _, g in ipairs(lists) do copy_to_replicas(g) end
  if batch then
    tr._optimizer.rescale_grad = tr._scale / batch:item()
  end
end

-- After the update: parameters the optimizer does not touch (grad_req
-- 'null', e.g. BatchNorm's running statistics) take the mean over processes.
function M.sync_states(tr)
  if dist.size() == 1 then return end
  local arrays, lists = {}, {}
  for _, p in ipairs(tr._params) do
    if p.grad_req == "null" and p._data then
      local d = p:list_data()
      arrays[#arrays + 1] = d[1]
      lists[#lists + 1] = d
    end
  end
  if #arrays == 0 then return end
  dist.allreduce_many(arrays, "mean", tr._dist_cache.states)
  for _, d in ipairs(lists) do copy_to_replicas(d) end
end

return M
