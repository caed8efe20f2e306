-- The generated cdef agrees with the compiled library: every struct the
-- header declares has the same size on both sides.
local binding = require("luon.ffi")
local ffi, C = binding.ffi, binding.C

describe("the C ABI seen through the FFI", function()
  it("struct sizes agree between C and the cdef", function()
    local cdef = require("luon.cdef")
    local names = {}
    for name in cdef:gmatch("typedef struct (luon_[%w_]+) {") do names[#names + 1] = name end
    assert.is_true(#names >= 4)
    for _, name in ipairs(names) do
      local csize = tonumber(C.luon_abi_sizeof(name))
      assert.are.equal(csize, ffi.sizeof(name), name)
    end
  end)
  it("every declared function resolves", function()
    local cdef = require("luon.cdef")
    local count = 0
    for name in cdef:gmatch("[%s%*]+(luon_[%w_]+)%s*%(") do
      local ok = pcall(function() return C[name] end)
      assert.is_true(ok, name .. " does not resolve in libluon")
      count = count + 1
    end
    assert.is_true(count > 20)
  end)
end)
