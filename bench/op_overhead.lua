-- Per-op overhead: `a + b` on 1-element and 1000-element float32 arrays,
-- a new result each time, median of 9 samples. Prints "luon <n> <us>".
local luon = require("luon")
local np = luon.np

local function sample(a, b, iters)
  local t0 = luon.clock()
  for _ = 1, iters do local _c = a + b end
  return (luon.clock() - t0) / iters * 1e6
end

for _, n in ipairs({1, 1000}) do
  local a, b = np.ones({n}), np.ones({n})
  sample(a, b, 100000) -- warm-up: JIT traces, allocator cache
  local s = {}
  for k = 1, 9 do s[k] = sample(a, b, 200000) end
  table.sort(s)
  print(("luon %d %.3f"):format(n, s[5]))
end
