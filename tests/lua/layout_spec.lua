-- layout_spec: np.tile, repeat (repeat_interleave), flip, flipud, fliplr,
-- roll, pad, diag, tril, triu, meshgrid, npx.reshape, one_hot,
-- sequence_mask and gluon.nn.ReflectionPad2D against MXNet 1.9.1's values
-- (tests/data/layout_golden.txt, from tests/data/gen_layout_golden.py by
-- case name), what MXNet lacks or gets wrong (NumPy's values), and their
-- errors on bad input, after which the runtime works on. Gradients are in
-- gradcheck_spec (pad, diag, tril, triu, sequence_mask, and the
-- compositions under the ops they are made of).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon
local nn = luon.gluon.nn

-- the golden file: name -> {shape, dtype, values}
local golden = {}
for line in io.lines(H.root .. "tests/data/layout_golden.txt") do
  local name, shape, dtype, vals = line:match("^(.-)|(.-)|(.-)|(.*)$")
  local s, v = {}, {}
  for d in shape:gmatch("%d+") do s[#s + 1] = tonumber(d) end
  for n in vals:gmatch("%S+") do v[#v + 1] = tonumber(n) end
  golden[name] = {s, dtype, v}
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local D = {device = dev}
    local function numel(s) local n = 1 for k = 1, #s do n = n * s[k] end return n end
    local function x(...) return np.arange(numel({...}), D):reshape({...}) end
    local function xi(...) return np.arange(numel({...}), {dtype = "int32", device = dev}):reshape({...}) end
    local function A(t, dt) return np.array(t, {dtype = dt, device = dev}) end
    local function reflect(p, a) return nn.ReflectionPad2D(p)(a) end

    local cases = {
      ["tile 2"] = function() return np.tile(x(2, 3), 2) end,
      ["tile (2,1,2)"] = function() return np.tile(x(2, 3), {2, 1, 2}) end,
      ["tile int32 (1,3) of (2,1)"] = function() return np.tile(xi(2, 1), {1, 3}) end,
      ["tile 0-d 3"] = function() return np.tile(A(7), 3) end,
      ["repeat 2"] = function() return np["repeat"](x(2, 3), 2) end,
      ["repeat 2 axis 0"] = function() return np.repeat_interleave(x(2, 3), 2, 0) end,
      ["repeat 3 axis -1 int32"] = function() return xi(2, 2):repeat_interleave(3, {axis = -1}) end,
      ["flip"] = function() return np.flip(x(2, 3, 2)) end,
      ["flip 1"] = function() return x(2, 3, 2):flip(1) end,
      ["flip (0,2)"] = function() return np.flip(x(2, 3, 2), {0, 2}) end,
      ["flipud"] = function() return np.flipud(x(3, 2)) end,
      ["fliplr"] = function() return np.fliplr(x(3, 2)) end,
      ["roll 1"] = function() return np.roll(x(2, 3), 1) end,
      ["roll -7"] = function() return np.roll(x(2, 3), -7) end,
      ["roll 1 axis 1"] = function() return np.roll(x(2, 3), 1, 1) end,
      ["roll (1,2) axes (0,1)"] = function() return np.roll(x(2, 3), {1, 2}, {0, 1}) end,
      ["roll 1 axes (0,1)"] = function() return np.roll(x(2, 3), 1, {axis = {0, 1}}) end,
      ["pad constant"] = function() return np.pad(x(2, 3), {{1, 2}, {0, 1}}) end,
      ["pad edge"] = function() return np.pad(x(2, 3), {{1, 1}, {2, 2}}, "edge") end,
      ["pad reflect"] = function() return np.pad(x(2, 3), {{1, 1}, {2, 2}}, {mode = "reflect"}) end,
      ["pad reflect wide"] = function() return np.pad(x(1, 3), {{0, 0}, {5, 6}}, "reflect") end,
      ["pad symmetric wide"] = function() return np.pad(x(1, 3), {{0, 0}, {5, 6}}, "symmetric") end,
      ["pad reflect 3-d"] = function() return np.pad(x(2, 3, 4), {{1, 1}, {0, 1}, {2, 0}}, "reflect") end,
      ["pad reflect size 1"] = function() return np.pad(x(1, 1), {{2, 1}, {1, 2}}, "reflect") end,
      ["pad constant int32"] = function() return np.pad(xi(2, 3), 1) end,
      ["pad maximum"] = function() return np.pad(A({{1, 5, 2}, {7, 0, 3}}), {{1, 2}, {2, 1}}, "maximum") end,
      ["pad minimum 3-d"] = function()
        return np.pad(A({{{4, 1, 9}, {2, 8, 3}}, {{6, 0, 5}, {7, 2, 1}}}), {{1, 0}, {0, 2}, {1, 1}}, {mode = "minimum"})
      end,
      ["pad maximum int32"] = function() return np.pad(A({{3, 1}, {0, 2}}, "int32"), 1, "maximum") end,
      ["diag 1-d"] = function() return np.diag(A({1, 2, 3})) end,
      ["diag 1-d k 1"] = function() return np.diag(A({1, 2}), 1) end,
      ["diag 1-d k -2"] = function() return A({1, 2}):diag(-2) end,
      ["diag 2-d"] = function() return np.diag(x(3, 4)) end,
      ["diag 2-d k 1"] = function() return np.diag(x(3, 4), 1) end,
      ["diag 2-d k -1"] = function() return np.diag(x(3, 4), -1) end,
      ["diag 2-d k 5"] = function() return np.diag(x(3, 4), 5) end,
      ["tril"] = function() return np.tril(x(3, 4)) end,
      ["tril k 1"] = function() return np.tril(x(3, 4), 1) end,
      ["tril k -1 3-d"] = function() return np.tril(x(2, 3, 4), -1) end,
      ["tril 1-d"] = function() return np.tril(A({1, 2, 3})) end,
      ["meshgrid xy 1"] = function() return (np.meshgrid(A({1, 2, 3}), A({4, 5}))) end,
      ["meshgrid xy 2"] = function() return select(2, np.meshgrid(A({1, 2, 3}), A({4, 5}))) end,
      ["meshgrid ij 2"] = function() return select(2, np.meshgrid(A({1, 2, 3}), A({4, 5}), {indexing = "ij"})) end,
      ["meshgrid 3 inputs 3"] = function() return select(3, np.meshgrid(A({1, 2}), A({4, 5, 6}), A({7}))) end,
      ["reshape (-2,-2,2,-1)"] = function() return npx.reshape(x(2, 3, 8), {-2, -2, 2, -1}) end,
      ["reshape (-6,2,-1,-4)"] = function() return npx.reshape(x(8, 3, 3), {-6, 2, -1, -4}) end,
      ["reshape (-5,-4)"] = function() return npx.reshape(x(2, 3, 2, 2), {-5, -4}) end,
      ["reshape (-2,-3,-3,-2)"] = function() return npx.reshape(x(2, 1, 1, 3), {-2, -3, -3, -2}) end,
      ["reshape (-4,-5) reverse"] = function() return npx.reshape(x(2, 3, 2, 2), {-4, -5}, {reverse = true}) end,
      ["reshape (-4,-1,2,-6) reverse"] = function()
        return npx.reshape(x(2, 3, 8), {-4, -1, 2, -6}, {reverse = true})
      end,
      ["reshape (-1,2) reverse"] = function() return npx.reshape(x(2, 3, 4), {-1, 2}, {reverse = true}) end,
      ["reshape (-2,-1) reverse"] = function() return npx.reshape(x(2, 3, 4), {-2, -1}, {reverse = true}) end,
      ["reshape (-1,-5) reverse"] = function() return npx.reshape(x(2, 3, 4), {-1, -5}, {reverse = true}) end,
      ["reshape (1,-4) reverse"] = function() return npx.reshape(x(2, 3, 4), {1, -4}, {reverse = true}) end,
      ["reshape (-6,-1,3,-2)"] = function() return npx.reshape(x(6, 4), {-6, -1, 3, -2}) end,
      ["one_hot"] = function() return npx.one_hot(A({0, 2, 1, -1, 3, 5}, "int64"), 4) end,
      ["one_hot float indices"] = function() return npx.one_hot(A({0, 1.7, 2.2, -0.5}), 4) end,
      ["one_hot on off int32"] = function()
        return npx.one_hot(A({{0, 2}, {1, 1}}, "int64"), 3, {on_value = 2.7, off_value = -1, dtype = "int32"})
      end,
      ["sequence_mask axis 0"] = function()
        return npx.sequence_mask(x(4, 2, 3), A({1, 3}), {use_sequence_length = true, value = -7})
      end,
      ["sequence_mask axis 1"] = function()
        return npx.sequence_mask(x(2, 4, 3), A({1.5, 2.9}), {use_sequence_length = true, axis = 1})
      end,
      ["ReflectionPad2D 2"] = function() return reflect(2, x(2, 1, 3, 4)) end,
      ["ReflectionPad2D 8-tuple"] = function() return reflect({0, 0, 0, 0, 1, 2, 0, 1}, x(1, 2, 3, 4)) end,
    }

    it("give MXNet's values (tests/data/layout_golden.txt), for every golden case", function()
      local missing = {}
      for name in pairs(golden) do
        if not cases[name] then missing[#missing + 1] = name end
      end
      assert(#missing == 0, "no case for golden " .. table.concat(missing, ", "))
      for name, f in pairs(cases) do
        local g = assert(golden[name], "no golden for " .. name)
        local r = f()
        assert(H.shape_eq(r, g[1]), ("%s: shape %s, MXNet %s"):format(name, H.show(r.shape), H.show(g[1])))
        assert(r.dtype == g[2], ("%s: dtype %s, MXNet %s"):format(name, r.dtype, g[2]))
        assert(r.device == dev, name .. ": on " .. tostring(r.device))
        local v = r:astype("float64"):reshape({-1}):totable()
        for k = 1, #g[3] do
          if v[k] ~= g[3][k] then
            error(("%s: element %d is %.9g, MXNet %.9g"):format(name, k - 1, v[k], g[3][k]), 0)
          end
        end
      end
    end)

    describe("where MXNet 1.9.1 lacks or breaks a form, NumPy's values", function()
      it("repeat with one count per element, and 0 repeats keep the other axes", function()
        H.assert_equal(np["repeat"](x(2, 3), {1, 0, 2}, 1), {{0, 2, 2}, {3, 5, 5}})
        H.assert_equal(np["repeat"](x(2, 3), {2, 1}, 0), {{0, 1, 2}, {0, 1, 2}, {3, 4, 5}})
        H.assert_equal(np["repeat"](x(3), {0, 0, 0}), {})
        H.check(np["repeat"](x(2, 3), 0, 0), nil, {shape = {0, 3}}) -- MXNet: (0,)
      end)
      it("pad: constant_values is used (MXNet 1.9.1 pads with 0), and NumPy's pad_width forms", function()
        H.assert_equal(np.pad(x(1, 2), {{0, 0}, {1, 1}}, {constant_values = 5}), {{5, 0, 1, 5}})
        H.check(np.pad(x(2, 3), 1), nil, {shape = {4, 5}})
        H.check(np.pad(x(2, 3), {1, 2}), nil, {shape = {5, 6}})
        H.check(np.pad(x(2, 3), {{1, 2}}), nil, {shape = {5, 6}})
        H.check(np.pad(x(2, 3), {2}), nil, {shape = {6, 7}})
        H.assert_equal(np.pad(A({1, 2, 3}), {{2, 3}}, "edge"), {1, 1, 1, 2, 3, 3, 3, 3})
        H.check(np.pad(np.zeros({0, 3}, D), 1), {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}}, {shape = {2, 5}})
        H.check(np.pad(A(3), {}), 3, {shape = {}})
      end)
      it("triu, which MXNet 1.9.1's np lacks, and tril of bool", function()
        H.assert_equal(np.triu(x(3, 3)), {{0, 1, 2}, {0, 4, 5}, {0, 0, 8}})
        H.assert_equal(np.triu(x(3, 3), 1), {{0, 1, 2}, {0, 0, 5}, {0, 0, 0}})
        H.assert_equal(np.triu(A({1, 2}), -1), {{1, 2}, {1, 2}})
        H.assert_equal(np.tril(A({{true, true}, {true, true}}, "bool")), {{true, false}, {true, true}})
      end)
      it("flip with negative axes, meshgrid sparse, a negative sequence length", function()
        H.assert_equal(np.flip(x(2, 3), -1), {{2, 1, 0}, {5, 4, 3}})
        local a, b = np.meshgrid(A({1, 2, 3}), A({4, 5}), {sparse = true})
        H.check(a, {{1, 2, 3}}, {shape = {1, 3}})
        H.check(b, {{4}, {5}}, {shape = {2, 1}})
        H.assert_equal(npx.sequence_mask(x(3, 2), A({-1, 9}), {use_sequence_length = true}),
                       {{0, 1}, {0, 3}, {0, 5}})
      end)
    end)

    it("keep dtypes and devices; flip is a view; the others new arrays", function()
      local h = x(2, 3):astype("float16")
      H.check(np.pad(h, 1, "reflect"), nil, {dtype = "float16", device = dev, shape = {4, 5}})
      H.check(np.diag(h), {0, 4}, {dtype = "float16"})
      H.check(np.tril(h), {{0, 0, 0}, {3, 4, 0}}, {dtype = "float16"})
      H.check(npx.sequence_mask(h, A({1, 2}), {use_sequence_length = true, axis = 1}),
              {{0, 0, 0}, {3, 4, 0}}, {dtype = "float16"})
      H.check(npx.one_hot(A({1, 0}, "float16"), 2, {dtype = "float16"}), {{0, 1}, {1, 0}}, {dtype = "float16"})
      H.check(npx.one_hot(A({1}, "int64"), 2, {dtype = "uint8"}), {{0, 1}}, {dtype = "uint8"})
      local m = x(2, 3)
      np.flip(m, 1):set(9)
      H.assert_equal(m, {{9, 9, 9}, {9, 9, 9}})
      local r, t = np.roll(m, 0), np.tile(m, 1)
      r:set(1)
      t:set(2)
      H.assert_equal(m, {{9, 9, 9}, {9, 9, 9}})
      local g1, g2 = np.meshgrid(A({1, 2}), A({3}))
      g1:set(0)
      H.assert_equal(g2, {{3, 3}})
    end)

    describe("bad input: an error naming the function and the value, and the runtime works on", function()
      local bad = {
        {function() return np.tile(x(2), -1) end, {"tile", "reps", "-1"}},
        {function() return np.tile(x(2), 1.5) end, {"tile", "1.5"}},
        {function() return np.tile(x(2), "2") end, {"tile", "reps"}},
        {function() return np["repeat"](x(2), -1) end, {"repeat", "repeats", ">= 0", "-1"}},
        {function() return np["repeat"](x(2), {1, -2}) end, {"repeat", "-2"}},
        {function() return np["repeat"](x(2), {1, 2, 3}) end, {"repeat", "3 repeats", "length 2"}},
        {function() return np["repeat"](x(2, 2), 2, 2) end, {"repeat", "axis 2", "dimension 2"}},
        {function() return np["repeat"](A(1), 2, 0) end, {"repeat", "axis 0", "dimension 0"}},
        {function() return np.flip(x(2, 3), 2) end, {"flip", "axis 2", "out of bounds"}},
        {function() return np.flip(x(2, 3), {0, 0}) end, {"flip", "repeated axis"}},
        {function() return np.fliplr(x(3)) end, {"fliplr", "2-d"}},
        {function() return np.flipud(A(1)) end, {"flipud", "1-d"}},
        {function() return np.roll(x(2, 3), 1.5) end, {"roll", "shift", "1.5"}},
        {function() return np.roll(x(2, 3), {1, 2}) end, {"roll", "shift", "axis is nil"}},
        {function() return np.roll(x(2, 3), {1, 2}, 1) end, {"roll", "same length"}},
        {function() return np.roll(x(2, 3), 1, 2) end, {"roll", "axis 2", "out of bounds"}},
        {function() return np.roll(x(2, 3), {1, 1}, {1, 1}) end, {"roll", "repeated axis"}},
        {function() return np.pad(x(2, 3), {{1, 1}, {1, -1}}) end, {"pad", "width", "-1"}},
        {function() return np.pad(x(2, 3), {{1, 1}, {1, 1}, {1, 1}}) end, {"pad", "pad_width", "2 axes"}},
        {function() return np.pad(x(2, 3), {1, 2, 3}) end, {"pad", "pad_width", "{1, 2, 3}"}},
        {function() return np.pad(x(2, 3), 1, "wrap") end, {"pad", "mode 'wrap'", "constant", "minimum"}},
        {function() return np.pad(np.zeros({2, 0}, D), {{0, 0}, {1, 0}}, "maximum") end,
         {"pad", "mode 'maximum'", "axis 1 of length 0"}},
        {function() return np.pad(x(2, 3), 1, "minimum", {constant_values = 1}) end, {"pad", "constant_values"}},
        {function() return np.pad(x(2, 3), 1, "edge", {constant_values = 1}) end, {"pad", "constant_values"}},
        {function() return np.pad(x(2, 3), 1, "reflect", {reflect_type = "odd"}) end, {"pad", "reflect_type", "odd"}},
        {function() return np.pad(x(2, 3), 1, {constant_values = "a"}) end, {"pad", "constant_values", "'a'"}},
        {function() return np.pad(x(2, 3), 1, {mdoe = "edge"}) end, {"pad", "mdoe", "did you mean 'mode'"}},
        {function() return np.pad(x(2, 3), 1, "constant", {mode = "edge"}) end, {"pad", "mode given twice"}},
        {function() return np.pad(np.zeros({0, 2}, D), 1, "reflect") end, {"pad", "empty axis 0", "reflect"}},
        {function() return np.diag(x(2, 2, 2)) end, {"diag", "1-d or 2-d", "(2,2,2)"}},
        {function() return np.diag(x(2), 0.5) end, {"diag", "k", "0.5"}},
        {function() return np.tril(A(1)) end, {"tril", "0-d"}},
        {function() return np.triu(x(2, 2), "1") end, {"triu", "k", "'1'"}},
        {function() return np.meshgrid(x(2), {indexing = "xx"}) end, {"meshgrid", "indexing", "'xx'"}},
        {function() return np.meshgrid(x(2), 3) end, {"meshgrid", "argument 2", "ndarray"}},
        {function() return npx.reshape(x(2, 3, 4), {-7}) end, {"reshape", ">= -6", "-7"}},
        {function() return npx.reshape(x(2, 3, 4), {-1, -1}) end, {"reshape", "only one", "-1"}},
        {function() return npx.reshape(x(2, 3, 4), {-3, -1}) end, {"reshape", "-3", "size 2"}},
        {function() return npx.reshape(x(2, 3, 4), {-2, -2, -2, -2}) end, {"reshape", "-2", "none is left"}},
        {function() return npx.reshape(x(2, 3, 4), {-2, -2, -5}) end, {"reshape", "-5"}},
        {function() return npx.reshape(x(6, 4), {-6, 2}) end, {"reshape", "-6", "followed"}},
        {function() return npx.reshape(x(6, 4), {-6, -1, -1, -2}) end, {"reshape", "only one"}},
        {function() return npx.reshape(x(6, 4), {-6, 4, 2, -2}) end, {"reshape", "split", "(4, 2)"}},
        {function() return npx.reshape(x(6, 4), {-6, -1, 0, -2}) end, {"reshape", "split"}},
        {function() return npx.reshape(x(2, 3, 4), {0, -1}) end, {"reshape", "(0,-1)", "divide"}},
        {function() return npx.reshape(x(2, 3, 4), {25}) end, {"reshape", "25", "24"}},
        {function() return npx.reshape(x(2, 3, 4), {1, -4}) end, {"reshape", "12", "24"}},
        {function() return npx.reshape(x(6, 4), {-2, -6, 2, 2}, {reverse = true}) end, {"reshape", "reverse = true"}},
        {function() return npx.reshape(x(6), {6}, {order = "F"}) end, {"reshape", "order", "'F'"}},
        {function() return npx.one_hot(A({1}, "int64"), -1) end, {"one_hot", "depth", "-1"}},
        {function() return npx.one_hot(A({1}, "int64")) end, {"one_hot", "depth is required"}},
        {function() return npx.one_hot(A({1}, "int64"), 2.5) end, {"one_hot", "depth", "2.5"}},
        {function() return npx.one_hot(A({1}, "int64"), 2, {on_value = "x"}) end, {"one_hot", "on_value"}},
        {function() return npx.one_hot(A({1}, "int64"), 2, {dtype = "float8"}) end, {"one_hot", "float8"}},
        {function() return npx.sequence_mask(x(3, 2), A({1, 2})) end, {"sequence_mask", "use_sequence_length"}},
        {function() return npx.sequence_mask(x(3, 2), nil, {use_sequence_length = true}) end,
         {"sequence_mask", "sequence_length", "ndarray"}},
        {function() return npx.sequence_mask(x(3, 2), A({1, 2, 3}), {use_sequence_length = true}) end,
         {"sequence_mask", "(3,)", "batch size 2"}},
        {function() return npx.sequence_mask(x(3, 2), A({1, 2}), {use_sequence_length = true, axis = 2}) end,
         {"sequence_mask", "axis", "0 or 1", "2"}},
        {function() return npx.sequence_mask(x(3), A({1}), {use_sequence_length = true}) end,
         {"sequence_mask", "2 dimensions", "(3,)"}},
        {function() return npx.sequence_mask(x(3, 2), A({1, 2}), {use_sequence_length = true, value = "z"}) end,
         {"sequence_mask", "value", "'z'"}},
        {function() return nn.ReflectionPad2D(-1) end, {"ReflectionPad2D", "padding", "-1"}},
        {function() return nn.ReflectionPad2D({1, 2}) end, {"ReflectionPad2D", "8 integers", "a list of 2"}},
        {function() return nn.ReflectionPad2D({1, 0, 0, 0, 1, 1, 1, 1}) end, {"ReflectionPad2D", "first two axes"}},
        {function() return nn.ReflectionPad2D(3)(x(1, 1, 3, 5)) end, {"ReflectionPad2D", "smaller than its size 3"}},
        {function() return nn.ReflectionPad2D(1)(x(3, 5)) end, {"ReflectionPad2D", "4-d", "(3,5)"}},
      }
      it("for each of " .. #bad .. " calls", function()
        for k, b in ipairs(bad) do
          local ok, err = pcall(H.assert_error, b[1], b[2])
          if not ok then error(("bad call %d: %s"):format(k, tostring(err)), 0) end
        end
        H.assert_equal(np.pad(xi(1, 2), 1, "edge"), {{0, 0, 1, 1}, {0, 0, 1, 1}, {0, 0, 1, 1}})
      end)
    end)
  end)
end
