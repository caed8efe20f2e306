-- tutorial_spec: the first sections of examples/tutorial.lua (MXNet's GPU tutorial)
-- run verbatim on this machine (a CPU-only one uses cpu(0) where the tutorial
-- says gpu), and the FFI declarations agree with the library.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")

describe("the tutorial, sections 2-6", function()
  it("runs as written", function()
    local luon = require("luon")
    local np, npx = luon.np, luon.npx
    local printed = {}
    local print = function(...)  -- capture what the tutorial prints
      local parts = {}
      for k = 1, select("#", ...) do parts[k] = tostring((select(k, ...))) end
      printed[#printed + 1] = table.concat(parts, "\t")
    end

    -- 2. How many GPUs can the runtime reach? 0 on a machine without CUDA.
    print(npx.num_gpus())
    local free, total = npx.gpu_memory_info(0)   -- only when num_gpus() > 0
    assert.is_true(total >= free)

    -- 3. Data on a device.  Works on a CPU-only machine too.
    local gpu = npx.num_gpus() > 0 and npx.gpu() or npx.cpu()
    local x = np.ones({3, 4}, {device = gpu})
    print(x)            -- values, then "@gpu(0)" (every device but cpu(0) is named)
    print(x.device)     -- gpu(0); npx.gpu() == npx.gpu(0)

    -- 4. Explicit copies between devices.
    local gpu_1 = npx.num_gpus() > 1 and npx.gpu(1) or npx.cpu()
    local x1 = x:copyto(gpu_1)          -- new array on gpu_1
    x:copyto(np.zeros({3, 4}, {device = gpu}))   -- into an existing array (same shape)
    local host = x:asnumpy()            -- synchronous copy to host memory

    -- 6. Ops run where their inputs live; inputs on two devices are an error
    -- (a Lua error naming both devices), never an implicit copy.
    local y = np.random.uniform({size = {3, 4}, device = gpu})
    local z = x + y                     -- on gpu
    assert(z.device == gpu)

    -- what the tutorial promises about these lines
    local ones = "[[1. 1. 1. 1.]\n [1. 1. 1. 1.]\n [1. 1. 1. 1.]]"
    assert.equal(tostring(npx.num_gpus()), printed[1])
    assert.equal(ones .. (gpu == npx.cpu(0) and "" or " @" .. tostring(gpu)), printed[2])
    assert.equal(tostring(gpu), printed[3])
    assert.equal(npx.gpu(), npx.gpu(0))
    H.check(x1, H.map(function() return 1 end, H.iota({3, 4})), {device = gpu_1})
    H.check(host, nil, {shape = {3, 4}, device = npx.cpu(0)})
    H.assert_close(host, H.map(function() return 1 end, H.iota({3, 4})))
    local zt = z:totable()
    for i = 1, 3 do for j = 1, 4 do
      assert.is_true(zt[i][j] >= 1 and zt[i][j] < 2, "x + uniform[0,1) out of [1,2)")
    end end
    assert.same({3, 4}, y.shape)
    assert.equal("float32", y.dtype)
  end)

  it("inputs on two devices are an error naming both", function()
    local np, npx = H.np, H.npx
    local other = npx.num_gpus() > 0 and npx.gpu(0) or npx.cpu(1)
    local a, b = np.ones({3, 4}), np.ones({3, 4}, {device = other})
    H.assert_error(function() return a + b end, {"cpu(0)", tostring(other)})
  end)
end)

describe("the FFI declarations", function()
  local binding = require("luon.ffi")
  local ffi, C = binding.ffi, binding.C
  local cdef = require("luon.cdef")

  it("every declared function resolves in the library", function()
    local count, missing = 0, {}
    for line in cdef:gmatch("[^\n]+") do
      if not line:match("^%s*/?%*") and not line:match("%(%s*%*") then
        local name = line:match("([%a_][%w_]*)%s*%(")
        if name and name:match("^luon_") then
          count = count + 1
          if not pcall(function() return C[name] end) then missing[#missing + 1] = name end
        end
      end
    end
    assert.is_true(count > 20, "found only " .. count .. " prototypes in the cdef")
    assert.same({}, missing)
  end)

  it("struct sizes agree with the C compiler's", function()
    local ok = pcall(function() return C.luon_abi_sizeof end)
    if not ok then return end
    for name in cdef:gmatch("typedef struct (luon_[%w_]+) {") do
      assert.equal(tonumber(C.luon_abi_sizeof(name)), ffi.sizeof(name), name)
    end
  end)
end)
