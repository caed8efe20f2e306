-- bench/interrupt.lua N: one N x N float32 matmul, timed (best of 2), with
-- the GEMM cut into interruptible tiles (default) or, under
-- LUON_GEMM_TILE_FLOPS=0, in one block per thread as before tiles existed.
-- Wall time and CPU time (os.clock, all threads: less disturbed by other
-- load on a shared VM, and what repacking for tiles would add to).
local luon = require("luon")
local np = luon.np
local n = tonumber(arg[1]) or 4096
local a, b = np.random.uniform(-1, 1, {n, n}), np.random.uniform(-1, 1, {n, n})
local best, cpu = math.huge, math.huge
for _ = 1, 2 do
  local t0, c0 = luon.clock(), os.clock()
  local c = np.matmul(a, b)
  c:wait_to_read()
  best, cpu = math.min(best, luon.clock() - t0), math.min(cpu, os.clock() - c0)
end
print(("   %-8s %d^2 matmul: %.2f s wall, %.2f s CPU (%.1f GFLOP/s per CPU-second)"):format(
  os.getenv("LUON_GEMM_TILE_FLOPS") == "0" and "untiled" or "tiled", n, best, cpu, 2 * n ^ 3 / cpu / 1e9))
