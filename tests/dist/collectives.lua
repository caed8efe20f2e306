-- collectives.lua: luon.dist's calls checked on every rank (run under
-- mpirun -np 2, or alone as rank 0 of 1). Prints "rank R ok: N checks";
-- any mismatch is an error (non-zero exit, which mpirun reports).
local luon = require("luon")
local np, npx, dist = luon.np, luon.npx, luon.dist

local rank, size = dist.init()
assert(dist.rank() == rank and dist.size() == size, "rank()/size() disagree with init()")
assert(dist.local_rank() >= 0 and dist.local_rank() < size, "local_rank out of range")
local n = 0
local function eq(got, want, what)
  n = n + 1
  local a, b = got:totable(), want
  local function same(x, y)
    if type(x) == "table" then
      for i = 1, #y do if not same(x[i], y[i]) then return false end end
      return #x == #y
    end
    return math.abs(x - y) <= 1e-6 * math.max(1, math.abs(y))
  end
  if not same(a, b) then
    error(("rank %d: %s: got %s, want %s"):format(rank, what, tostring(got), require("luon").np.array(b)))
  end
end

-- sum over ranks of (r + 1) * base: S = size * (size + 1) / 2
local S = size * (size + 1) / 2
for _, dt in ipairs({"float32", "float64", "int32", "int64", "uint8"}) do
  local x = np.array({1, 2, 3}, {dtype = dt}) * (rank + 1)
  local r = dist.allreduce(x)
  assert(rawequal(r, x), "allreduce returns its argument")
  eq(x, {S, 2 * S, 3 * S}, "allreduce sum " .. dt)
  local m = np.array({rank, 10 - rank}, {dtype = dt})
  eq(dist.allreduce(m, "max"), {size - 1, 10}, "allreduce max " .. dt)
  local m2 = np.array({rank, 10 - rank}, {dtype = dt})
  eq(dist.allreduce(m2, "min"), {0, 10 - (size - 1)}, "allreduce min " .. dt)
end
eq(dist.allreduce(np.array({rank * 2.0, 4}), "mean"), {size - 1, 4}, "allreduce mean")
-- a strided view is reduced in place through a staging copy
local v = np.ones({4, 3}) * (rank + 1)
local strided = v:slice({nil, nil, 2})
dist.allreduce(strided)
eq(v, {{S, S, S}, {rank + 1, rank + 1, rank + 1}, {S, S, S}, {rank + 1, rank + 1, rank + 1}},
   "allreduce of a strided view writes only the view")
-- float16 goes through float32
local h = (np.array({1.5, 2}) * (rank + 1)):astype("float16")
dist.allreduce(h)
eq(h:astype("float32"), {1.5 * S, 2 * S}, "allreduce float16")
-- a large buffer (several MPI chunks are not needed; 5M floats is one call)
local big = np.ones({5 * 1024 * 1024}) * (rank + 1)
dist.allreduce(big)
eq(big:slice({0, 3}), {S, S, S}, "allreduce 5M floats")
eq(big:sum():reshape({1}), {S * 5 * 1024 * 1024}, "allreduce 5M floats (all)")
-- broadcast from each root
for root = 0, size - 1 do
  local b = np.array({rank, rank * 2, 7})
  assert(rawequal(dist.broadcast(b, root), b), "broadcast returns its argument")
  eq(b, {root, root * 2, 7}, "broadcast from " .. root)
end
local bi = np.array({{rank}}, {dtype = "int64"})
eq(dist.broadcast(bi), {{0}}, "broadcast int64 default root 0")
-- allreduce_many: one fused call for many arrays of mixed dtypes
local xs = {np.ones({2, 3}) * (rank + 1), np.array({rank + 1}, {dtype = "float64"}),
            np.ones({5}) * (rank + 1), np.array({rank + 1}, {dtype = "int32"})}
local cache = {}
dist.allreduce_many(xs, "sum", cache)
dist.allreduce_many({np.zeros({2, 3}), np.zeros({1}, {dtype = "float64"}), np.zeros({5}),
                     np.zeros({1}, {dtype = "int32"})}, "sum", cache)
eq(xs[1], {{S, S, S}, {S, S, S}}, "allreduce_many float32 (2,3)")
eq(xs[2], {S}, "allreduce_many float64")
eq(xs[3], {S, S, S, S, S}, "allreduce_many float32 (5)")
eq(xs[4], {S}, "allreduce_many int32")
-- errors are Lua errors naming the call and leave the ranks usable
local ok, err = pcall(dist.allreduce, np.array({1, 2}, {dtype = "int32"}), "mean")
assert(not ok and err:find("mean") and err:find("int32"), "mean of int32: " .. tostring(err))
ok, err = pcall(dist.allreduce, np.ones({2}), "prod")
assert(not ok and err:find("'sum', 'mean', 'max' or 'min'"), tostring(err))
ok, err = pcall(dist.broadcast, np.ones({2}), size)
assert(not ok and err:find("root " .. size .. " is not a rank"), tostring(err))
ok, err = pcall(dist.allreduce, {1, 2})
assert(not ok and err:find("must be an ndarray"), tostring(err))
n = n + 4
-- the sampler: parts are disjoint, equal and cover length - length % size
local seen, total = {}, 0
local sampler = dist.sampler(10, {shuffle = false})
assert(sampler:len() == math.floor(10 / size), "sampler length")
for i in sampler:iter() do seen[#seen + 1] = i end
local mine = np.zeros({10})
for _, i in ipairs(seen) do mine = mine + np.eye(10):slice(i) end
dist.allreduce(mine)
for _, c in ipairs(mine:totable()) do assert(c <= 1, "sampler parts overlap") total = total + c end
assert(total == size * math.floor(10 / size), "sampler parts do not cover the dataset")
n = n + 1
dist.barrier()
print(("rank %d ok: %d checks"):format(rank, n))
