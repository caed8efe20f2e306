-- luon.dist: training across processes, over Open MPI (core/dist/dist.c loads
-- libmpi.so.40 with dlopen). Launch with
--   mpirun -np 2 build/luon train.lua
-- A script run without mpirun is rank 0 of 1 and every collective is a
-- no-op, so the same script runs both ways.
--
--   dist.init()                 -> rank, size (idempotent; the others call it)
--   dist.rank(), dist.size(), dist.local_rank(), dist.is_root()
--   dist.barrier()
--   dist.allreduce(x, op)       in place, op 'sum' (default), 'mean', 'max', 'min'; returns x
--   dist.broadcast(x, root)     in place from rank root (default 0); returns x
--   dist.device()               gpu(local_rank) when there are GPUs, else cpu(0)
--   dist.sampler(dataset, opts) this process's gluon.data.SplitSampler shard
--   dist.save_parameters(net, path)   rank 0 writes (atomically), then a barrier
--   dist.finalize()             optional: at a normal exit (status 0) luon
--                               finalizes MPI itself
--
-- Every rank must make the same collective calls in the same order with
-- arrays of the same shape, dtype and kind of device. CPU arrays go through
-- MPI; GPU arrays through NCCL (one communicator per process, on the GPU of
-- its first GPU collective, its unique id broadcast over MPI), with no copy
-- to the host; through host memory and MPI only when NCCL cannot serve
-- (ranks sharing one card, LUON_DIST_NCCL=0; dist.backend() says which).
-- LUON_DIST_TIMEOUT (seconds, default 300, 0 = none) bounds every wait, MPI's
-- and NCCL's: a rank that never joins a collective makes the others fail
-- with an error instead of hanging. A rank that exits with an error makes
-- mpirun stop the whole job and name that rank.
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local dist = {}

local r3 = ffi.new("int32_t[3]")
local state = nil -- {rank, size, local_rank} after init

function dist.init()
  if not state then
    core.check(C.luon_dist_init(r3, r3 + 1, r3 + 2))
    state = {rank = r3[0], size = r3[1], local_rank = r3[2]}
  end
  return state.rank, state.size
end

local function st()
  if not state then dist.init() end
  return state
end

function dist.is_initialized() return state ~= nil end
function dist.rank() return st().rank end
function dist.size() return st().size end
function dist.local_rank() return st().local_rank end
function dist.is_root() return st().rank == 0 end
-- "Open MPI v4.1.4" or "single process (not started by mpirun)"; after the
-- first collective of a GPU array also how those travel ("; GPU arrays
-- through NCCL 2.28.9 on gpu(0)").
function dist.backend()
  st()
  return ffi.string(C.luon_dist_backend())
end

function dist.barrier()
  st()
  core.check(C.luon_dist_barrier())
end

local ops = {sum = C.LUON_DIST_SUM, mean = C.LUON_DIST_MEAN, max = C.LUON_DIST_MAX, min = C.LUON_DIST_MIN}

function dist.allreduce(x, op)
  core.array_arg(x, "dist.allreduce", "the first argument")
  local id = ops[op or "sum"]
  if not id then
    core.error(("dist.allreduce: op must be 'sum', 'mean', 'max' or 'min', got %s"):format(tostring(op)))
  end
  st()
  core.check(C.luon_dist_allreduce(x.t, id))
  return x
end

function dist.broadcast(x, root)
  core.array_arg(x, "dist.broadcast", "the first argument")
  root = root or 0
  if type(root) ~= "number" or root % 1 ~= 0 then
    core.error(("dist.broadcast: root must be a rank number, got %s"):format(tostring(root)))
  end
  st()
  core.check(C.luon_dist_broadcast(x.t, root))
  return x
end

-- The device this process should train on: one GPU per process on a node
-- (gpu(local_rank)), or cpu(0) where there are no GPUs.
function dist.device()
  local npx = require("luon.npx")
  local n = npx.num_gpus()
  if n == 0 then return npx.cpu(0) end
  local lr = st().local_rank
  if lr >= n then
    core.error(("dist.device: local rank %d but this node has %d GPUs; start at most %d processes per node")
               :format(lr, n, n))
  end
  return npx.gpu(lr)
end

-- This process's shard of a dataset (or of `length` samples) for
-- DataLoader{sampler = ...}: gluon.data.SplitSampler(length, size, rank,
-- opts); opts.shuffle (default true) reshuffles the shard every epoch.
function dist.sampler(dataset, opts)
  local n = dataset
  if type(dataset) == "table" or type(dataset) == "userdata" then n = dataset:len() end
  local s = st()
  return require("luon.gluon.data.sampler_dist").SplitSampler(n, s.size, s.rank, opts)
end

-- Checkpoints: rank 0 writes (save_parameters writes a temporary file and
-- renames it, so a crash never leaves half a checkpoint), the others wait,
-- so that every rank can read the file once this returns.
function dist.save_parameters(net, path, ...)
  if st().rank == 0 then net:save_parameters(path, ...) end
  dist.barrier()
end

---------------------------------------------------------------------------
-- Many arrays in one collective (gradients): the arrays of one dtype and
-- one device are copied into a flat buffer on that device (cpu(0) for CPU
-- arrays, the GPU itself for GPU arrays, so GPU gradients go to NCCL without
-- leaving the card), reduced in one call, and copied back. Contiguous
-- arrays of 4M elements or more go on their own (the copies would cost more
-- than the call they save). The buffers and views are kept per list of
-- shapes and devices (`cache`, a table the caller owns).

local BIG = 4 * 1024 * 1024
local view_out = ffi.new("luon_tensor*[1]")
local view_strides = ffi.new("int64_t[8]")

local function signature(arrays)
  local parts = {}
  for k, a in ipairs(arrays) do
    local info = core.info_of(a)
    local sh = {}
    for d = 0, info.ndim - 1 do sh[#sh + 1] = tostring(info.shape[d]) end
    parts[k] = info.dtype .. ":" .. info.dev_type .. ":" .. info.dev_id .. ":" .. info.contiguous .. ":" ..
               table.concat(sh, "x")
  end
  return table.concat(parts, ",")
end

local function make_plan(arrays)
  local np, npx = require("luon.np"), require("luon.npx")
  local groups, order, direct = {}, {}, {}
  for k, a in ipairs(arrays) do
    local info = core.info_of(a)
    if info.size >= BIG and info.contiguous == 1 then
      direct[#direct + 1] = k
    else
      local dt = core.dtype_names[info.dtype]
      local gpu = info.dev_type == C.LUON_GPU and info.dev_id or nil
      local key = dt .. (gpu and ("@gpu" .. gpu) or "")
      local g = groups[key]
      if not g then
        g = {dtype = dt, n = 0, members = {}, device = gpu and npx.gpu(gpu) or npx.cpu(0)}
        groups[key] = g
        order[#order + 1] = g
      end
      g.members[#g.members + 1] = {index = k, offset = g.n, size = tonumber(info.size)}
      g.n = g.n + tonumber(info.size)
    end
  end
  for _, g in ipairs(order) do
    g.buf = np.empty({g.n}, {dtype = g.dtype, device = g.device})
    for _, m in ipairs(g.members) do
      local info = core.info_of(arrays[m.index])
      local stride = 1
      for d = info.ndim - 1, 0, -1 do
        view_strides[d] = stride
        stride = stride * info.shape[d]
      end
      core.check(C.luon_tensor_view(g.buf.t, info.ndim, info.shape, view_strides, m.offset, view_out))
      m.view = core.wrap(view_out[0])
    end
  end
  return {groups = order, direct = direct}
end

-- allreduce of a list of arrays, in place, as dist.allreduce on each.
function dist.allreduce_many(arrays, op, cache)
  local id = ops[op or "sum"]
  if not id then core.error(("dist.allreduce_many: unknown op %s"):format(tostring(op))) end
  st()
  if #arrays == 0 then return arrays end
  cache = cache or {}
  local sig = signature(arrays)
  if cache.sig ~= sig then cache.sig, cache.plan = sig, make_plan(arrays) end
  local plan = cache.plan
  for _, k in ipairs(plan.direct) do core.check(C.luon_dist_allreduce(arrays[k].t, id)) end
  for _, g in ipairs(plan.groups) do
    for _, m in ipairs(g.members) do core.check(C.luon_tensor_copy(m.view.t, arrays[m.index].t)) end
    core.check(C.luon_dist_allreduce(g.buf.t, id))
    for _, m in ipairs(g.members) do core.check(C.luon_tensor_copy(arrays[m.index].t, m.view.t)) end
  end
  return arrays
end

function dist.finalize()
  if not state then return end
  core.check(C.luon_dist_finalize())
end

return dist
