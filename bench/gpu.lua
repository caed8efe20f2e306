-- bench/gpu.lua: GPU timings for scripts/gpu-check, one line each
-- "luon <name> <ms> <TFLOP/s>": a large float32 GEMM (cuBLAS) and a large
-- convolution forward (cuDNN) on gpu(0), median of 20 after 3 warm-ups, and
-- a small convolution repeated (the cached plan against the first call),
-- each timed to completion (wait_to_read). Peer: bench/gpu_torch.py.
local luon = require("luon")
local np, npx = luon.np, luon.npx
local ffi = require("ffi")
-- luon's bindings declare clock_gettime with their own timespec; declare it only if absent
if not pcall(ffi.typeof, "struct luon_timespec") then
  ffi.cdef("struct luon_timespec { long tv_sec; long tv_nsec; }; int clock_gettime(int, struct luon_timespec *);")
end
local ts = ffi.new("struct luon_timespec")
local function now() ffi.C.clock_gettime(1, ts) return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9 end
local dry = os.getenv("BENCH_DRY") == "1" -- checks this script on the CPU, small sizes
local gpu = dry and npx.cpu(0) or npx.gpu(0)

local function time(fn)
  for _ = 1, 3 do fn():wait_to_read() end
  local t = {}
  for i = 1, 20 do
    local t0 = now()
    fn():wait_to_read()
    t[i] = now() - t0
  end
  table.sort(t)
  return t[10]
end

local n = dry and 64 or 4096
local a = np.random.uniform(-1, 1, {n, n}, {device = gpu})
local b = np.random.uniform(-1, 1, {n, n}, {device = gpu})
local s = time(function() return np.matmul(a, b) end)
print(("luon gemm_4096_f32 %.3f %.2f"):format(s * 1e3, 2 * n ^ 3 / s / 1e12))

local x = np.random.uniform(-1, 1, dry and {2, 8, 9, 9} or {64, 128, 56, 56}, {device = gpu})
local w = np.random.uniform(-1, 1, dry and {8, 8, 3, 3} or {128, 128, 3, 3}, {device = gpu})
s = time(function() return npx.convolution(x, w, nil, {kernel = {3, 3}, pad = {1, 1}, num_filter = dry and 8 or 128, no_bias = true}) end)
print(("luon conv_64x128x56x56_k3 %.3f %.2f"):format(s * 1e3, 2 * 64 * 128 * 56 * 56 * 128 * 9 / s / 1e12))

-- A small convolution called again and again: host time per call, where the
-- cached cuDNN plan (cuda/ops/conv.cu) spares the descriptors and the
-- algorithm query; "first" is the call that chose it (a shape not seen yet).
local xs = np.random.uniform(-1, 1, {8, 16, 15, 15}, {device = gpu})
local ws = np.random.uniform(-1, 1, {16, 16, 3, 3}, {device = gpu})
local function small() return npx.convolution(xs, ws, nil, {kernel = {3, 3}, pad = {1, 1}, num_filter = 16, no_bias = true}) end
local t0 = now()
small():wait_to_read()
local first = now() - t0
s = time(small)
print(("luon conv_small_repeat %.3f %.2f (first call %.3f ms)"):format(s * 1e3, 2 * 8 * 16 * 15 * 15 * 16 * 9 / s / 1e12, first * 1e3))
