-- dead_rank.lua MODE [gpu]: rank 1 fails before an allreduce that rank 0
-- enters. MODE exit: rank 1 ends with os.exit(3); error: a Lua error; hang:
-- rank 1 spins (rank 0's LUON_DIST_TIMEOUT ends it). Rank 0 must not hang.
-- With gpu the arrays are on dist.device(), and one collective first sets
-- up NCCL on both ranks, so that rank 0 waits inside NCCL.
local luon = require("luon")
local dist = luon.dist
local rank = dist.init()
local opts = arg[2] == "gpu" and {device = dist.device()} or nil
if opts then dist.allreduce(luon.np.ones({4}, opts)) end
dist.barrier()
local mode = arg[1]
if rank == 1 then
  if mode == "exit" then os.exit(3) end
  if mode == "error" then error("rank 1 failed on purpose") end
  if mode == "hang" then
    local t = os.time()
    while os.time() - t < 120 do end
  end
end
local x = luon.np.ones({1000}, opts)
dist.allreduce(x)
print(("rank %d: allreduce returned %s"):format(rank, tostring(x:sum())))
