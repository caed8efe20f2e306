-- gpu_collectives.lua [--gpu N]: luon.dist's calls on GPU arrays, checked on
-- every rank under mpirun -np 2, on real GPUs (scripts/gpu-check) or on the
-- stand-in backend of tests/c/fake_cuda.c (tests/lua/dist_spec.lua). Each
-- rank uses dist.device() (gpu(local_rank)), or gpu(N) with --gpu N. Prints
-- "rank R ok: N checks, C GPU collectives (<dist.backend()>)"; a mismatch is
-- an error (non-zero exit). CPU arrays here have 77 elements, so a log of
-- the GPU collectives shows whether any reached NCCL.
local luon = require("luon")
local np, npx, dist = luon.np, luon.npx, luon.dist

local rank, size = dist.init()
local dev = arg[1] == "--gpu" and npx.gpu(tonumber(arg[2])) or dist.device()
assert(tostring(dev):find("gpu"), "no GPU here: " .. tostring(dev))
local n, ngpu = 0, 0 -- checks, collectives of GPU arrays
local function eq(got, want, what)
  n = n + 1
  local a = got:totable()
  local function same(x, y)
    if type(x) == "table" then
      for i = 1, #y do if not same(x[i], y[i]) then return false end end
      return #x == #y
    end
    return math.abs(x - y) <= 1e-3 * math.max(1, math.abs(y))
  end
  if not same(a, want) then
    error(("rank %d: %s: got %s, want %s"):format(rank, what, tostring(got), tostring(np.array(want))))
  end
end
local function on(values, dt) return np.array(values, {dtype = dt or "float32", device = dev}) end
local function scaled(list, k)
  local t = {}
  for i, v in ipairs(list) do t[i] = v * k end
  return t
end

local S = size * (size + 1) / 2
for _, dt in ipairs({"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"}) do
  local x = on(scaled({1, 2, 3}, rank + 1), dt)
  assert(rawequal(dist.allreduce(x), x), "allreduce returns its argument")
  assert(tostring(x.device) == tostring(dev), "the array stays on its GPU")
  eq(x, {S, 2 * S, 3 * S}, "allreduce sum " .. dt)
  eq(dist.allreduce(on({rank, 10 - rank}, dt), "max"), {size - 1, 10}, "allreduce max " .. dt)
  eq(dist.allreduce(on({rank, 10 - rank}, dt), "min"), {0, 10 - (size - 1)}, "allreduce min " .. dt)
  ngpu = ngpu + 3
end
eq(dist.allreduce(on({rank * 2, 4}), "mean"), {size - 1, 4}, "allreduce mean float32")
eq(dist.allreduce(on({rank * 2, 4}, "float64"), "mean"), {size - 1, 4}, "allreduce mean float64")
ngpu = ngpu + 2
-- a strided view: through a contiguous copy on the GPU, written back to the view only
local v = on({{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}) * (rank + 1)
dist.allreduce(v:slice({nil, nil, 2}))
local r1 = rank + 1
eq(v, {{S, S, S}, {r1, r1, r1}, {S, S, S}, {r1, r1, r1}}, "allreduce of a strided view")
ngpu = ngpu + 1
-- broadcast from each root
for root = 0, size - 1 do
  local b = on({rank, rank * 2, 7})
  assert(rawequal(dist.broadcast(b, root), b), "broadcast returns its argument")
  eq(b, {root, root * 2, 7}, "broadcast from " .. root)
  ngpu = ngpu + 1
end
eq(dist.broadcast(on({{rank}}, "int64")), {{0}}, "broadcast int64")
ngpu = ngpu + 1
-- a GPU array on another GPU of this process: through the communicator's GPU
if npx.num_gpus() >= 2 then
  local other = npx.gpu((dev.device_id + 1) % npx.num_gpus())
  local w = np.array({rank + 1, 1}, {device = other})
  dist.allreduce(w)
  assert(tostring(w.device) == tostring(other), "the array stays on " .. tostring(other))
  eq(w, {S, size}, "allreduce on " .. tostring(other))
  ngpu = ngpu + 1
end
-- allreduce_many: one call per dtype and device; the GPU groups stay on the GPU
local xs = {on({{1, 1, 1}, {1, 1, 1}}) * (rank + 1), on({rank + 1}, "float64"), on({1, 1, 1, 1, 1}) * (rank + 1),
            np.ones({77}) * (rank + 1)}
dist.allreduce_many(xs, "sum", {})
eq(xs[1], {{S, S, S}, {S, S, S}}, "allreduce_many float32 (2,3)")
eq(xs[2], {S}, "allreduce_many float64")
eq(xs[3], {S, S, S, S, S}, "allreduce_many float32 (5)")
eq(xs[4]:slice({0, 2}), {S, S}, "allreduce_many's CPU array")
ngpu = ngpu + 2 -- float32 and float64 on the GPU; the CPU array went through MPI
-- CPU arrays beside GPU ones: MPI
eq(dist.allreduce(np.ones({77}) * (rank + 1)):slice({0, 1}), {S}, "allreduce of a CPU array")
eq(dist.broadcast(np.ones({77}, {dtype = "int32"}) * rank, 1):slice({0, 1}), {size - 1}, "broadcast of a CPU array")
-- errors name the call and leave the ranks usable
local ok, err = pcall(dist.allreduce, on({1, 2}, "int32"), "mean")
assert(not ok and err:find("mean") and err:find("int32"), "mean of int32: " .. tostring(err))
eq(dist.allreduce(on({1})), {size}, "usable after an error")
ngpu = ngpu + 1
dist.barrier()
print(("rank %d ok: %d checks, %d GPU collectives (%s)"):format(rank, n, ngpu, dist.backend()))
dist.finalize()
