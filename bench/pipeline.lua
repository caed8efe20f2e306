-- The data pipeline: images/s through the tutorial's training transform
-- (decode JPEG, Resize 224 keep_ratio, CenterCrop 128, flip, contrast
-- jitter, ToTensor, Normalize; batch 32, shuffled) from an ImageFolder of
-- JPEGs, for each number of workers given. Peer: bench/pipeline.py.
--   build/luon bench/pipeline.lua DIR [WORKERS...]   (default 0 2)
-- Prints "luon-wN <images/s> <CPU ms per image>" per line: 1 warm-up epoch,
-- then the median of 4 timed epochs; CPU time is the process's, all threads.
-- build/luon bench/pipeline.lua --ratio "LUON_LINES" "PEER_LINES": the
-- throughput and CPU ratios of each luon line against the peer's first line.
if arg[1] == "--ratio" then
  local peer = {}
  for name, rate, cpu in (arg[3] or ""):gmatch("(%S+) ([%d.]+) ([%d.]+)") do
    peer[#peer + 1] = {name, tonumber(rate), tonumber(cpu)}
  end
  if #peer == 0 then return end
  local p = peer[1]
  for name, rate, cpu in arg[2]:gmatch("(%S+) ([%d.]+) ([%d.]+)") do
    print(("   %s: %.2fx the images/s of %s, %.2fx less CPU per image (%.2f ms vs %.2f ms)"):format(
      name, tonumber(rate) / p[2], p[1], p[3] / tonumber(cpu), tonumber(cpu), p[3]))
  end
  return
end

local luon = require("luon")
local gluon = luon.gluon
local T = gluon.data.vision.transforms
local ffi = require("ffi")

local dir = arg[1] or "build/bench-jpegs"
local workers = {}
for k = 2, #arg do workers[#workers + 1] = tonumber(arg[k]) end
if #workers == 0 then workers = {0, 2} end

pcall(ffi.cdef, "typedef struct luon_timespec { long tv_sec; long tv_nsec; } luon_timespec;" ..
      "int clock_gettime(int clk_id, luon_timespec *tp);") -- luon's init.lua may have declared them
local ts = ffi.new("luon_timespec")
local function now(clock) -- 1: CLOCK_MONOTONIC, 2: CLOCK_PROCESS_CPUTIME_ID
  ffi.C.clock_gettime(clock, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local tf = T.Compose{
  T.Resize{size = 224, keep_ratio = true}, T.CenterCrop(128), T.RandomFlipLeftRight(),
  T.RandomColorJitter{contrast = 0.05}, T.ToTensor(),
  T.Normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}),
}
local ds = gluon.data.vision.ImageFolderDataset(dir .. "/train"):transform_first(tf)
for _, nw in ipairs(workers) do
  local loader = gluon.data.DataLoader(ds, {batch_size = 32, shuffle = true, num_workers = nw, seed = 1})
  local rates, cpus = {}, {}
  for epoch = 0, 4 do
    local t0, c0, n = now(1), now(2), 0
    for _, batch in loader:enumerate() do n = n + batch[1].shape[1] end
    local t1, c1 = now(1), now(2)
    if epoch > 0 then
      rates[#rates + 1] = n / (t1 - t0)
      cpus[#cpus + 1] = (c1 - c0) / n * 1e3
    end
  end
  table.sort(rates)
  table.sort(cpus)
  print(("luon-w%d %.0f %.3f"):format(nw, (rates[2] + rates[3]) / 2, (cpus[2] + cpus[3]) / 2))
end
