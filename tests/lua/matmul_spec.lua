-- matmul_spec: np.matmul and np.dot: 2-d, 1-d promotion, batched with
-- broadcasting, non-contiguous operands, dtypes, size-0 and shape errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np = H.np

-- Plain Lua reference: (n,k) x (k,m)
local function ref(a, b)
  local r = {}
  for i = 1, #a do
    r[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for k = 1, #b do s = s + a[i][k] * b[k][j] end
      r[i][j] = s
    end
  end
  return r
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local D = {device = dev}
    local function A(t, dt) return np.array(t, {dtype = dt, device = dev}) end
    local a = {{1, 2, 3}, {4, 5, 6}}         -- (2,3)
    local b = {{7, 8}, {9, 10}, {11, 12}}    -- (3,2)

    it("2-d x 2-d", function()
      H.check(np.matmul(A(a), A(b)), {{58, 64}, {139, 154}}, {shape = {2, 2}, dtype = "float32", device = dev})
      H.check(A(b):matmul(A(a)), {{39, 54, 69}, {49, 68, 87}, {59, 82, 105}}, {shape = {3, 3}})
      H.check(np.dot(A(a), A(b)), {{58, 64}, {139, 154}})
    end)
    it("1-d operands are promoted and the axis removed", function()
      H.check(np.matmul(A({1, 2, 3}), A(b)), {58, 64}, {shape = {2}})
      H.check(np.matmul(A(a), A({1, 0, -1})), {-2, -2}, {shape = {2}})
      H.check(np.matmul(A({1, 2, 3}), A({4, 5, 6})), 32, {shape = {}})
      H.check(np.dot(A({1, 2, 3}), A({4, 5, 6})), 32, {shape = {}})
    end)
    it("batched, with batch broadcasting", function()
      local x = np.arange(12, D):reshape({2, 2, 3}) -- [[0..5],[6..11]]
      local y = A(b)
      local r = np.matmul(x, y)
      H.check(r, {ref({{0, 1, 2}, {3, 4, 5}}, b), ref({{6, 7, 8}, {9, 10, 11}}, b)}, {shape = {2, 2, 2}})
      -- (2,1,2,3) x (3,3,2) -> (2,3,2,2)
      local w = np.stack({A(b), A(b) * 0, A(b) * -1})
      local r2 = np.matmul(x:reshape({2, 1, 2, 3}), w)
      assert.same({2, 3, 2, 2}, r2.shape)
      H.check(r2:at(1):at(2), H.map(function(v) return -v end, ref({{6, 7, 8}, {9, 10, 11}}, b)))
      H.check(r2:at(0):at(1), {{0, 0}, {0, 0}})
      -- 1-d with a batch
      H.check(np.matmul(A({1, 1}), x), {{3, 5, 7}, {15, 17, 19}}, {shape = {2, 3}})
    end)
    it("transposed and strided operands", function()
      local at = A({{1, 4}, {2, 5}, {3, 6}}):transpose() -- = a
      H.check(np.matmul(at, A(b)), {{58, 64}, {139, 154}})
      local bt = A({{7, 9, 11}, {8, 10, 12}}).T         -- = b
      H.check(np.matmul(at, bt), {{58, 64}, {139, 154}})
      local big = np.arange(12, D):reshape({3, 4}):slice(true, {nil, nil, 2}) -- [[0,2],[4,6],[8,10]]
      H.check(np.matmul(A(a), big), {{32, 44}, {68, 98}})
    end)
    it("float64 and integer dtypes", function()
      H.check(np.matmul(A(a, "float64"), A(b, "float64")), {{58, 64}, {139, 154}}, {dtype = "float64", tol = 0})
      local ri = np.matmul(A(a, "int32"), A(b, "int32"))
      H.check(ri, {{58, 64}, {139, 154}}, {tol = 0})
    end)
    it("a larger product matches the Lua reference", function()
      local n, k, m = 37, 53, 29
      local x, y = {}, {}
      for i = 1, n do x[i] = {}; for j = 1, k do x[i][j] = ((i * 7 + j * 3) % 11) - 5 end end
      for i = 1, k do y[i] = {}; for j = 1, m do y[i][j] = ((i * 5 + j * 2) % 13) - 6 end end
      H.check(np.matmul(A(x), A(y)), ref(x, y), {tol = 1e-6})
      H.check(np.matmul(A(x, "float64"), A(y, "float64")), ref(x, y), {tol = 0})
    end)
    -- float32 with few rows or a short inner dimension (a Dense layer at a
    -- small batch: x @ W^T, dy @ W, dy^T @ x) against float64: tails of 16
    -- and 32 columns, inner dimensions past one chunk, transposed views
    it("few rows or a short inner dimension, as float64 gives", function()
      local function case(ma, mb)
        local a64, b64 = ma:astype("float64"), mb:astype("float64")
        H.assert_close(H.values(np.matmul(ma, mb)), H.values(np.matmul(a64, b64)), 1e-4)
      end
      np.random.seed(3)
      for _, m in ipairs({1, 3, 8, 9}) do
        local x = np.random.uniform(-1, 1, {m, 2100}, D):astype("float32")
        local w = np.random.uniform(-1, 1, {70, 2100}, D):astype("float32")
        case(x, w.T)                                             -- rows . columns
        local dy = np.random.uniform(-1, 1, {m, 70}, D):astype("float32")
        case(dy, w)                                              -- dy @ W
        case(dy.T:copy().T, w)                                   -- A with a column stride
        case(dy.T, x)                                            -- (70,m) @ (m,2100)
      end
      case(np.random.uniform(-1, 1, {300, 5}, D):astype("float32"),
           np.random.uniform(-1, 1, {5, 1000}, D):astype("float32"))
      -- small layers at batch 1 to 8 (x @ W^T at any size): column counts
      -- around the 4- and 2-column groups, inner sizes around 16
      for _, m in ipairs({1, 2, 3, 5}) do
        for _, n in ipairs({1, 2, 3, 5, 6, 7, 256}) do
          for _, k in ipairs({16, 17, 31, 512}) do
            case(np.random.uniform(-1, 1, {m, k}, D):astype("float32"),
                 np.random.uniform(-1, 1, {n, k}, D):astype("float32").T)
          end
        end
      end
    end)
    it("size-0 inner dimension gives zeros", function()
      H.check(np.matmul(np.ones({2, 0}, D), np.ones({0, 3}, D)), {{0, 0, 0}, {0, 0, 0}}, {shape = {2, 3}})
      H.check(np.matmul(np.ones({0, 4}, D), np.ones({4, 3}, D)), {}, {shape = {0, 3}})
    end)
    it("dot of N-d with 1-d and 2-d", function()
      local x = np.arange(12, D):reshape({2, 2, 3})
      H.check(np.dot(x, A({1, 0, 1})), {{2, 8}, {14, 20}}, {shape = {2, 2}})
      -- N-d with N-d: dot(a, b)[i,j,k,m] = sum(a[i,j,:] * b[k,:,m])
      local y = np.stack({A(b), A(b)})  -- (2,3,2)
      local r = np.dot(A(a), y)          -- (2,2,2)
      assert.same({2, 2, 2}, r.shape)
      H.check(r:at(1), {{139, 154}, {139, 154}})   -- r[1,k,:] = (a b)[1,:] for each k
      H.check(r:slice(true, 0), {{58, 64}, {139, 154}})
      H.check(np.dot(A(a), np.array(2, D)), {{2, 4, 6}, {8, 10, 12}})
    end)
    it("mismatched inner dimensions name both shapes", function()
      H.assert_error(function() return np.matmul(A(a), A(a)) end, {"matmul", "(2,3)"})
      H.assert_error(function() return np.matmul(np.ones({2, 2, 3}, D), np.ones({3, 3, 2}, D)) end,
                     {"matmul", "(2,2,3)", "(3,3,2)"})
      H.assert_error(function() return np.matmul(np.array(1, D), A(a)) end, {"matmul"})
    end)
  end)
end
