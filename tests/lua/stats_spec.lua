-- stats_spec: the np reductions and scans beyond sum/mean/max (np.lua): var,
-- std, cumsum, cumprod, nansum, nanprod, nanmean, average, any, all,
-- count_nonzero, linalg.norm: MXNet's values (tests/data/reduce_golden.txt,
-- from gen_reduce_golden.py), result dtypes, empty arrays, bad input.
-- Their gradients are in gradcheck_spec.lua.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np = H.np

-- reduce_golden.txt: label -> {shape = {...}, values = {...}}
local function goldens()
  local out, label, shape = {}, nil, nil
  for l in H.read_file(H.root .. "tests/data/reduce_golden.txt"):gmatch("[^\n]+") do
    if not label then
      local s
      label, s = l:match("^(%S+) (%S+)$")
      shape = {}
      if s ~= "-" then for d in s:gmatch("%d+") do shape[#shape + 1] = tonumber(d) end end
    else
      local v = {}
      for t in l:gmatch("%S+") do v[#v + 1] = tonumber(t) or (t == "nan" and 0 / 0) end
      out[label] = {shape = shape, values = v}
      label = nil
    end
  end
  return out
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local D = {device = dev}
    local function A(t, dt) return np.array(t, {dtype = dt or "float32", device = dev}) end
    local inf, nan = 1 / 0, 0 / 0

    describe("MXNet's values (reduce_golden.txt)", function()
      -- the generator's inputs: x[i] = round(4 sin(1.3 i + 0.2), 3), n: NaN at 1, 6, 7, 10; w[j] = 1 + j/2
      local xs, ns = {}, {}
      for i = 0, 11 do
        local v = math.floor(4 * math.sin(1.3 * i + 0.2) * 1000 + 0.5) / 1000
        xs[i + 1], ns[i + 1] = v, (i == 1 or i == 6 or i == 7 or i == 10) and nan or v
      end
      local x = np.array(xs, {dtype = "float64", device = dev}):reshape({3, 4})
      local n = np.array(ns, {dtype = "float64", device = dev}):reshape({3, 4})
      local w = np.array({1, 1.5, 2, 2.5}, {dtype = "float64", device = dev})
      local norm = np.linalg.norm
      local calls = {
        var = function() return np.var(x) end,
        var_axis0_ddof1 = function() return np.var(x, 0, {ddof = 1}) end,
        std_axis1_keepdims = function() return np.std(x, 1, {keepdims = true}) end,
        std_axes01_ddof2 = function() return np.std(x, {0, 1}, {ddof = 2}) end,
        cumsum = function() return np.cumsum(x) end,
        cumsum_axis0 = function() return np.cumsum(x, 0) end,
        cumprod_axis1 = function() return np.cumprod(x, 1) end,
        nansum_axis1 = function() return np.nansum(n, 1) end,
        nanprod_axis0 = function() return np.nanprod(n, 0) end,
        nanmean = function() return np.nanmean(n) end,
        average_axis1_weights = function() return np.average(x, 1, w) end,
        average = function() return np.average(x) end,
        any_axis0 = function() return np.any(np.greater(x, 2), 0) end,
        all_axis1 = function() return np.all(np.greater(x, -3.5), 1) end,
        count_nonzero_axis1 = function() return np.count_nonzero(np.greater(x, 0), 1) end,
        norm = function() return norm(x) end,
        norm_ord3_axis1 = function() return norm(x, 3, 1) end,
        ["norm_ord0.5_axis0"] = function() return norm(x, 0.5, 0) end,
        ["norm_ord-1_axis1"] = function() return norm(x, -1, 1) end,
        norm_ord1_matrix = function() return norm(x, 1) end,
        norm_ordinf_matrix = function() return norm(x, inf) end,
        ["norm_ord-inf_matrix"] = function() return norm(x, -inf) end,
        norm_ordinf_vector = function() return norm(x[1], inf) end,
        norm_ord2_matrix = function() return norm(x, 2) end,
        ["norm_ord-2_matrix"] = function() return norm(x, -2) end,
        norm_ordnuc_matrix = function() return norm(x, "nuc") end,
        norm_ord2_axes10_keepdims = function() return norm(x:reshape({3, 2, 2}), 2, {2, 0}, true) end,
      }
      it("every golden has a call and matches it", function()
        local g = goldens()
        local seen = 0
        for label, want in pairs(g) do
          local f = calls[label]
          assert(f, "no call for golden " .. label)
          local r = f():astype("float64")
          H.check(r, #want.shape == 0 and want.values[1] or nil, {shape = want.shape})
          local got = r:reshape({-1}):totable()
          if #want.shape == 0 then got = {r:item()} end
          for k, v in ipairs(want.values) do
            assert(H.close(got[k], v, 1e-12), ("%s: element %d is %.17g, MXNet's %.17g"):format(label, k - 1, got[k], v))
          end
          seen = seen + 1
        end
        local ncalls = 0
        for _ in pairs(calls) do ncalls = ncalls + 1 end
        assert.equal(ncalls, seen)
      end)
    end)

    describe("result dtypes", function()
      it("var and std: float stays, integers and bool give float32, dtype asks for one", function()
        local i = A({{1, 2, 3}, {4, 5, 7}}, "int32")
        H.check(np.var(i), 3.8888888, {dtype = "float32", shape = {}})
        H.check(np.std(i, 1), {0.8164966, 1.2472191}, {dtype = "float32"})
        H.check(np.var(A({true, false}, "bool")), 0.25, {dtype = "float32"})
        H.check(np.var(i:astype("float64"), nil, {ddof = 1}), 4.6666666666666667, {dtype = "float64", tol = 1e-15})
        H.check(np.std(i, {dtype = "float64"}), 1.9720265943665387, {dtype = "float64", tol = 1e-15})
        H.check(i:astype("float32"):var(), 3.8888888, {dtype = "float32"})
        H.check(i:astype("float32"):std(0), {1.5, 1.5, 2}, {dtype = "float32"})
        H.check(np.var(A({1, 2, 3, 4}, "float16")), 1.25, {dtype = "float16"})
      end)
      it("cumsum and cumprod keep the dtype (bool: float32), or take dtype", function()
        local i = A({{1, 2, 3}, {4, 5, 7}}, "int32")
        H.check(np.cumsum(i), {1, 3, 6, 10, 15, 22}, {dtype = "int32", shape = {6}})
        H.check(i:cumsum(1), {{1, 3, 6}, {4, 9, 16}}, {dtype = "int32"})
        H.check(np.cumprod(i, 0), {{1, 2, 3}, {4, 10, 21}}, {dtype = "int32"})
        H.check(np.cumsum(A({true, false, true}, "bool")), {1, 1, 2}, {dtype = "float32"})
        H.check(np.cumsum(i, {dtype = "float64"}), {1, 3, 6, 10, 15, 22}, {dtype = "float64"})
        H.check(np.cumsum(A({1, 2, 3}, "float16")), {1, 3, 6}, {dtype = "float16"})
        -- integer results convert each element first, as NumPy
        H.check(np.cumsum(A({0.5, 0.5, 1.5}), {dtype = "int64"}), {0, 0, 1}, {dtype = "int64"})
        -- uint8 wraps, as MXNet's and NumPy's
        H.check(np.cumsum(A({200, 100}, "uint8")), {200, 44}, {dtype = "uint8"})
        H.check(np.cumsum(A({1, 2, 3}), -1), {1, 3, 6})
        H.check(np.cumsum(np.array(5, D)), {5}, {shape = {1}})
      end)
      it("nansum, nanprod, nanmean", function()
        local x = A({{1, nan, 3}, {nan, nan, nan}})
        H.check(np.nansum(x), 4, {dtype = "float32", shape = {}})
        H.check(np.nansum(x, 1, {keepdims = true}), {{4}, {0}}, {shape = {2, 1}})
        H.check(np.nanprod(x, 1), {3, 1})
        H.check(np.nanmean(x, 1), {2, nan})
        H.check(np.nanmean(x, {dtype = "float64"}), 2, {dtype = "float64"})
        local i = A({{1, 2}, {3, 4}}, "int32")
        H.check(np.nanprod(i), 24, {dtype = "int64"})
        H.check(np.nanmean(i, 0), {2, 3}, {dtype = "float32"})
      end)
      it("any and all are bool, count_nonzero int64; NaN is nonzero", function()
        local x = A({{0, 1, 0}, {0, 0, nan}})
        H.check(np.any(x), true, {dtype = "bool", shape = {}})
        H.assert_equal(np.any(x, 1), {true, true})
        H.assert_equal(np.all(x, 0), {false, false, false})
        H.assert_equal(np.all(A({{1, 2}, {3, 0}}), 1, {keepdims = true}), {{true}, {false}})
        H.check(np.count_nonzero(x), 2, {dtype = "int64", shape = {}})
        H.check(np.count_nonzero(x, {axis = 0, keepdims = true}), {{0, 1, 1}}, {dtype = "int64", shape = {1, 3}})
        H.assert_equal(x:any(0), {false, true, true})
        H.assert_equal(x:all(), false)
        H.check(np.count_nonzero(A({3, 0, 2}, "int32")), 2)
        H.check(np.any(A({false, true}, "bool")), true)
      end)
      it("linalg.norm: floats keep their dtype, integers give float32", function()
        H.check(np.linalg.norm(A({3, 4}, "int32")), 5, {dtype = "float32"})
        H.check(np.linalg.norm(A({3, 4}, "float64")), 5, {dtype = "float64"})
        H.check(np.linalg.norm(A({{3, 4}}), {keepdims = true}), {{5}}, {shape = {1, 1}})
        H.check(np.linalg.norm(A({{1, -2}, {3, 4}}), 1, {0, 1}, true), {{6}}, {shape = {1, 1}})
        H.check(np.linalg.norm(A({3, -4, 1}), "fro"), math.sqrt(26))
        H.check(np.linalg.norm(A({3, 0, 1}), 0), 2)
        H.check(np.linalg.norm(A({3, -4}), -inf), 3)
      end)
      it("average: weights, returned, integers as float32", function()
        local x = A({{1, 2, 3}, {4, 5, 7}})
        local avg, scl = np.average(x, 1, A({1, 2, 3}), true)
        H.check(avg, {2.3333333, 5.8333333})
        H.check(scl, {6, 6}, {shape = {2}})
        avg, scl = np.average(x, {axis = 1, returned = true})
        H.check(avg, {2, 5.3333333})
        H.check(scl, {3, 3})
        H.check(np.average(A({{1, 2, 3}, {4, 5, 7}}, "int32")), 3.6666667, {dtype = "float32"})
        H.check(np.average(x, {weights = {{1, 2, 3}, {1, 1, 1}}}), 3.3333333)
        H.check(np.average(x, 1, A({0, 0, 0})), {nan, nan})
        H.check(np.average(x, 0, A({1, 2}, "float64")), {3, 4, 5.6666667}, {dtype = "float64"})
      end)
      it("amax and amin are max and min", function()
        assert.equal(np.max, np.amax)
        assert.equal(np.min, np.amin)
      end)
    end)

    describe("svd, the op behind linalg.norm's matrix orders", function()
      local core = require("luon.core")
      local function svd(x) return core.call(core.op_ids.svd, {x}, nil, nil, 3) end
      it("x = U diag(S) V^T, S descending, U and V orthonormal", function()
        np.random.seed(3)
        local x = np.random.normal(0, 1, {2, 5, 3}, {dtype = "float64", device = dev})
        local r = svd(x)
        local u, sv, v = r[1], r[2], r[3]
        H.check(u, nil, {shape = {2, 5, 3}, dtype = "float64"})
        H.check(sv, nil, {shape = {2, 3}})
        H.check(v, nil, {shape = {2, 3, 3}})
        local back = np.matmul(np.multiply(u, np.expand_dims(sv, 1)), np.swapaxes(v, 1, 2))
        H.assert_close(back, x:totable(), 1e-12)
        H.assert_close(np.matmul(np.swapaxes(u, 1, 2), u), {np.eye(3):totable(), np.eye(3):totable()}, 1e-12)
        H.assert_close(np.matmul(np.swapaxes(v, 1, 2), v), {np.eye(3):totable(), np.eye(3):totable()}, 1e-12)
        local s = sv:totable()
        for b = 1, 2 do assert.is_true(s[b][1] >= s[b][2] and s[b][2] >= s[b][3] and s[b][3] >= 0) end
        -- a strided float32 view, and a zero matrix
        local t = svd(np.array({{3, 0, 0}, {0, -4, 0}}, {device = dev}):transpose())[2]
        H.check(t, {4, 3}, {dtype = "float32"})
        H.check(svd(np.zeros({3, 2}, D))[2], {0, 0})
      end)
      it("refuses integers, 1-d arrays and wide matrices", function()
        H.assert_error(function() return svd(A({{1, 2}, {3, 4}}, "int32")) end, {"svd", "int32", "float32 and float64"})
        H.assert_error(function() return svd(A({1, 2})) end, {"svd", "at least 2 dimensions", "(2,)"})
        H.assert_error(function() return svd(np.zeros({2, 3}, D)) end, {"svd", "(2,3)", "fewer rows (2) than columns (3)"})
      end)
    end)

    describe("degrees of freedom and empty arrays (NumPy's answers)", function()
      it("ddof >= n divides by 0: inf, or NaN for no spread", function()
        local x = A({{1, 2}, {3, 5}})
        H.check(np.var(x, 0, {ddof = 2}), {inf, inf})
        H.check(np.var(A({{2, 2}}), 1, {ddof = 3}), {nan})
        H.check(np.std(x, 1, {ddof = 2}), {inf, inf})
      end)
      it("of empty arrays", function()
        local z = np.zeros({0, 3}, D)
        H.check(np.var(z), nan, {shape = {}})
        H.check(np.std(z, 0), {nan, nan, nan})
        H.check(np.cumsum(z), {}, {shape = {0}})
        H.check(np.cumprod(z, 1), nil, {shape = {0, 3}})
        H.check(np.any(z), false, {dtype = "bool"})
        H.check(np.all(z), true, {dtype = "bool"})
        H.check(np.count_nonzero(z, 0), {0, 0, 0})
        H.check(np.linalg.norm(z), 0)
        H.check(np.nansum(z, 0), {0, 0, 0})
        H.check(np.nanmean(z, 0), {nan, nan, nan})
      end)
    end)

    describe("bad input names the function and the value", function()
      local x
      before_each(function() x = A({{1, 2, 3}, {4, 5, 6}}) end)
      it("axes out of range or repeated", function()
        for _, name in ipairs({"var", "std", "nansum", "nanprod", "nanmean", "any", "all", "count_nonzero"}) do
          H.assert_error(function() return np[name](x, 2) end, {name, "axis 2", "dimension 2"})
          H.assert_error(function() return np[name](x, {0, -2}) end, {name, "axis 0 appears twice"})
        end
        H.assert_error(function() return np.cumsum(x, 2) end, {"cumsum", "axis 2", "dimension 2"})
        H.assert_error(function() return np.cumprod(x, -3) end, {"cumprod", "-3"})
        H.assert_error(function() return np.cumsum(x, 0.5) end, {"cumsum", "axis", "0.5"})
        H.assert_error(function() return np.cumsum(np.array(1, D), 0) end, {"cumsum", "dimension 0"})
        H.assert_error(function() return np.average(x, 3) end, {"average", "axis 3"})
        H.assert_error(function() return np.linalg.norm(x, nil, 2) end, {"linalg.norm", "axis 2"})
        H.assert_error(function() return np.linalg.norm(x, nil, {1, 1}) end, {"linalg.norm", "twice"})
        H.assert_error(function() return np.linalg.norm(x, nil, {0, 1, 1}) end, {"linalg.norm", "list of two"})
        H.assert_error(function() return np.var(x, "0") end, {"var", "axis", "'0'"})
      end)
      it("options, dtypes and orders", function()
        H.assert_error(function() return np.var(x, {ddof = 0.5}) end, {"var", "ddof", "0.5"})
        H.assert_error(function() return np.std(x, {dof = 1}) end, {"std", "dof", "ddof"})
        H.assert_error(function() return np.var(x, {dtype = "int32"}) end, {"var", "dtype", "'int32'"})
        H.assert_error(function() return np.cumsum(x, {dtype = "bool"}) end, {"cumsum", "bool"})
        H.assert_error(function() return np.cumsum(x, {dtype = "float8"}) end, {"cumsum", "float8"})
        H.assert_error(function() return np.cumsum(x, {axes = 0}) end, {"cumsum", "axes"})
        H.assert_error(function() return np.any(x, {dtype = "bool"}) end, {"any", "dtype"})
        H.assert_error(function() return np.var({1, 2}) end, {"var", "argument 1", "ndarray"})
        H.assert_error(function() return np.linalg.norm(np.zeros({0, 3}, D), 2) end, {"linalg.norm", "empty matrix", "(0,3)"})
        H.assert_error(function() return np.linalg.norm(np.zeros({2, 0}, D), "nuc") end, {"linalg.norm", "'nuc'", "empty"})
        H.assert_error(function() return np.linalg.norm(x, 3) end, {"linalg.norm", "invalid norm order 3", "matrices"})
        H.assert_error(function() return np.linalg.norm(x[0], "bad") end, {"linalg.norm", "'bad'", "vectors"})
        H.assert_error(function() return np.linalg.norm(x[0], nan) end, {"linalg.norm", "nan", "vectors"})
        H.assert_error(function() return np.linalg.norm(x[0], "nuc") end, {"linalg.norm", "'nuc'", "matrices"})
        H.assert_error(function() return np.linalg.norm(np.zeros({2, 2, 2}, D), 1) end,
                       {"linalg.norm", "1-d or 2-d", "(2,2,2)"})
        H.assert_error(function() return np.linalg.norm(np.zeros({0}, D), inf) end, {"linalg.norm", "empty"})
        H.assert_error(function() return np.linalg.norm(x, {ordd = 1}) end, {"linalg.norm", "ordd"})
      end)
      it("average's weights", function()
        H.assert_error(function() return np.average(x, 1, A({1, 2})) end,
                       {"average", "(2,)", "axis 1", "(2,3)", "length 3"})
        H.assert_error(function() return np.average(x, nil, A({1, 2, 3})) end, {"average", "axis must be one integer"})
        H.assert_error(function() return np.average(x, 1, "w") end, {"average", "'w'"})
        H.assert_error(function() return np.average(x, {weight = 1}) end, {"average", "weight"})
      end)
      it("leaves the runtime usable", function()
        pcall(np.var, x, 5)
        pcall(np.cumsum, x, 5)
        H.check(np.var(x, 1), {0.6666667, 0.6666667})
        H.check(np.cumsum(x, 0), {{1, 2, 3}, {5, 7, 9}})
      end)
    end)
  end)
end
