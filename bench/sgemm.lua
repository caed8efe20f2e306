-- SGEMM 1024^3: luon's np.matmul against cblas_sgemm from OpenBLAS called
-- directly through the FFI on the same buffers. Median of 9 runs each.
local luon = require("luon")
local np = luon.np
local ffi = require("ffi")
ffi.cdef [[
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
]]
local n = 1024
local a, b = np.random.uniform(-1, 1, {n, n}), np.random.uniform(-1, 1, {n, n})
local flops = 2 * n * n * n

local function median(f)
  f()
  local s = {}
  for k = 1, 9 do
    local t0 = luon.clock()
    f()
    s[k] = luon.clock() - t0
  end
  table.sort(s)
  return flops / s[5] / 1e9
end

local luon_gf = median(function() local c = np.matmul(a, b); c:wait_to_read() end)
-- after luon loaded OpenBLAS (choosing its kernel), the same library again
local ok, blas = pcall(ffi.load, "libopenblas.so.0")
print(("   luon np.matmul     %.1f GFLOP/s (OpenBLAS kernel: %s)"):format(
  luon_gf, ffi.string(require("luon.ffi").C.luon_blas_info())))
if ok then
  local info = ffi.new("luon_tensor_info")
  local C = require("luon.ffi").C
  C.luon_tensor_info_get(a.t, info); local pa = ffi.cast("float*", info.data)
  C.luon_tensor_info_get(b.t, info); local pb = ffi.cast("float*", info.data)
  local c = np.empty({n, n})
  C.luon_tensor_info_get(c.t, info); local pc = ffi.cast("float*", info.data)
  local direct = median(function() blas.cblas_sgemm(101, 111, 111, n, n, n, 1, pa, n, pb, n, 0, pc, n) end)
  print(("   cblas_sgemm direct %.1f GFLOP/s"):format(direct))
  print(("   luon / direct = %.0f%%"):format(100 * luon_gf / direct))
else
  print("   (direct OpenBLAS peer skipped: libopenblas not loadable)")
end
