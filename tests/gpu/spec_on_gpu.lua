-- tests/gpu/spec_on_gpu.lua: run a busted spec written for logical CPU devices
-- with npx.cpu(i) remapped to npx.gpu(i), under its own small runner of
-- busted's API (describe/it/pending; before_each and after_each run around
-- each it; luassert for assert).
-- For the two-device equivalence test on two virtual GPUs:
--   LUON_VIRTUAL_GPUS=2 luajit tests/gpu/spec_on_gpu.lua tests/lua/data_parallel_spec.lua
-- Prints "ok"/"FAIL" per test and "N passed, N failed"; exits 1 on a failure.
-- SPEC_DRY=1 keeps the CPU devices (checks this runner without a GPU).
local spec = assert(arg[1], "usage: tests/gpu/spec_on_gpu.lua SPEC")
package.path = (spec:match("^(.*[/\\])") or "./") .. "?.lua;" .. package.path
local luon = require("luon")
local npx = luon.npx
if os.getenv("SPEC_DRY") ~= "1" then
  if npx.num_gpus() < 2 then
    io.stderr:write("spec_on_gpu: needs 2 GPUs (set LUON_VIRTUAL_GPUS=2), found " .. npx.num_gpus() .. "\n")
    os.exit(2)
  end
  npx.cpu = function(i) return npx.gpu(i or 0) end
end
local tests, before, after, prefix = {}, {}, {}, {}
local env = setmetatable({
  describe = function(name, fn)
    prefix[#prefix + 1] = name
    fn()
    prefix[#prefix] = nil
  end,
  it = function(name, fn) tests[#tests + 1] = {table.concat(prefix, " ") .. " " .. name, fn} end,
  pending = function() end,
  before_each = function(fn) before[#before + 1] = fn end,
  after_each = function(fn) after[#after + 1] = fn end,
  setup = function(fn) fn() end, teardown = function() end,
  assert = require("luassert"),
}, {__index = _G})
local chunk = assert(loadfile(spec))
setfenv(chunk, env)
chunk()
local passed, failed = 0, 0
for _, t in ipairs(tests) do
  local ok, err = pcall(function()
    for _, f in ipairs(before) do f() end
    t[2]()
    for _, f in ipairs(after) do f() end
  end)
  if ok then passed = passed + 1 else failed = failed + 1 end
  print((ok and "ok   " or "FAIL ") .. t[1] .. (ok and "" or (": " .. tostring(err))))
end
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
