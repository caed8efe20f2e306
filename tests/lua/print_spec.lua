-- print_spec: arrays print as NumPy 1.23's str() does (golden strings made
-- with numpy, as literals): a common number of decimals, trailing zeros
-- dropped then padded right, scientific mode, nan/inf, bool, int, 0-d,
-- empty, wrapping at 75 columns, summaries; and np.set_printoptions.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np = H.np

local nan, inf = 0 / 0, math.huge

-- {numpy's text, function(D) giving the array}; D = {device = dev}
local cases = {
  {"[0.5773 0.679  0.1444]", function(D) return np.array({0.5773, 0.679, 0.1444}, D) end},
  {"[[ 1. -2.]\n [ 3.  4.]]", function(D) return np.array({{1, -2}, {3, 4}}, D) end},
  {"[1.5e-05 1.0e+00]", function(D) return np.array({1.5e-5, 1}, D) end},
  {"[1.e-05 1.e+00]", function(D) return np.array({1e-5, 1}, D) end},
  {"[1.e+100 1.e+000]", function(D) return np.array({1e100, 1}, {dtype = "float64", device = D.device}) end},
  {"[ nan -inf  1.5]", function(D) return np.array({nan, -inf, 1.5}, D) end},
  {"[nan inf]", function(D) return np.array({nan, inf}, D) end},
  {"[nan nan]", function(D) return np.array({nan, nan}, D) end},
  {"[ True False  True]", function(D) return np.array({true, false, true}, D) end},
  {"[[ True False]\n [False False]]", function(D) return np.array({{true, false}, {false, false}}, D) end},
  {"[  1 -20 300]", function(D) return np.array({1, -20, 300}, {dtype = "int32", device = D.device}) end},
  {"[  0   7 255]", function(D) return np.array({0, 7, 255}, {dtype = "uint8", device = D.device}) end},
  {"[4611686018427387904                  -5]",
   function(D) return np.array({2 ^ 62, -5}, {dtype = "int64", device = D.device}) end},
  {"[0.1 0.2 0.3]", function(D) return np.array({0.1, 0.2, 0.3}, D) end},
  {"[1.e+08 1.e+00]", function(D) return np.array({1e8, 1}, D) end},
  {"[1.2345679e+05 1.0000000e-03]", function(D) return np.array({123456.789, 0.001}, D) end},
  {"[1.e-10 1.e+00]", function(D) return np.array({1e-10, 1}, D) end},
  {"[-1.50e-07  2.25e+09]", function(D) return np.array({-1.5e-7, 2.25e9}, D) end},
  {"[-0.  0.]", function(D) return np.array({-0.0, 0}, D) end},
  {"[0.33333333 0.66666667]", function(D) return np.array({1 / 3, 2 / 3}, {dtype = "float64", device = D.device}) end},
  {"[0.12345679 1.        ]", function(D) return np.array({0.123456789, 1}, {dtype = "float64", device = D.device}) end},
  {"[0.3333 0.6665]", function(D) return np.array({1 / 3, 2 / 3}, {dtype = "float16", device = D.device}) end},
  {"[6.55e+04 5.00e-01]", function(D) return np.array({65504, 0.5}, {dtype = "float16", device = D.device}) end},
  {"[[[ 0.  1.  2.  3.]\n  [ 4.  5.  6.  7.]\n  [ 8.  9. 10. 11.]]\n\n [[12. 13. 14. 15.]\n  [16. 17. 18. 19.]\n  [20. 21. 22. 23.]]]",
   function(D) return np.arange(24, D):reshape({2, 3, 4}) end},
  -- wrapping at 75 columns
  {"[ 0.         1.1        2.2        3.3000002  4.4        5.5\n  6.6000004  7.7000003  8.8        9.900001  11.        12.1\n 13.200001  14.3       15.400001  16.5       17.6       18.7\n 19.800001  20.9       22.        23.1       24.2       25.300001\n 26.400002  27.5       28.6       29.7       30.800001  31.900002 ]",
   function(D) return np.arange(30, D) * np.array(1.1, D) end},
  {"[[ 0.          0.33333334  0.6666667   1.          1.3333334   1.6666666\n   2.          2.3333333   2.6666667   3.          3.3333333   3.6666667\n   4.          4.3333335   4.6666665   5.          5.3333335   5.6666665\n   6.          6.3333335 ]\n [ 6.6666665   7.          7.3333335   7.6666665   8.          8.333333\n   8.666667    9.          9.333333    9.666667   10.         10.333333\n  10.666667   11.         11.333333   11.666667   12.         12.333333\n  12.666667   13.        ]]",
   function(D) return np.arange(40, D):reshape({2, 20}) / np.array(3, D) end},
  {"[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47\n 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71\n 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95\n 96 97 98 99]",
   function(D) return np.arange(100, {dtype = "int64", device = D.device}) end},
  -- summaries past 1000 elements, the format chosen from the shown values
  {"[[0.000e+00 1.000e+00 2.000e+00 ... 9.970e+02 9.980e+02 9.990e+02]\n [1.000e+03 1.001e+03 1.002e+03 ... 1.997e+03 1.998e+03 1.999e+03]]",
   function(D) return np.arange(2000, D):reshape({2, 1000}) end},
  {"[[[   0    1    2 ...  397  398  399]\n  [ 400  401  402 ...  797  798  799]\n  [ 800  801  802 ... 1197 1198 1199]]\n\n [[1200 1201 1202 ... 1597 1598 1599]\n  [1600 1601 1602 ... 1997 1998 1999]\n  [2000 2001 2002 ... 2397 2398 2399]]]",
   function(D) return np.arange(2400, {dtype = "int32", device = D.device}):reshape({2, 3, 400}) end},
  -- 0-d arrays print as NumPy's scalars; empty ones as []
  {"1.5", function(D) return np.array(1.5, D) end},
  {"1.0", function(D) return np.array(1, D) end},
  {"-2.5", function(D) return np.array(-2.5, D) end},
  {"1e-05", function(D) return np.array(1e-5, D) end},
  {"1.5e+20", function(D) return np.array(1.5e20, D) end},
  {"0.33333334", function(D) return np.array(1 / 3, D) end},
  {"0.1", function(D) return np.array(0.1, {dtype = "float64", device = D.device}) end},
  {"nan", function(D) return np.array(nan, D) end},
  {"True", function(D) return np.array(true, D) end},
  {"7", function(D) return np.array(7, {dtype = "int64", device = D.device}) end},
  {"[]", function(D) return np.zeros({0, 3}, D) end},
  {"[]", function(D) return np.zeros({0}, {dtype = "int32", device = D.device}) end},
}

for _, dev in ipairs(H.devices()) do
  describe("printing on " .. tostring(dev), function()
    local D = {device = dev}
    local suffix = dev == H.npx.cpu(0) and "" or " @" .. tostring(dev)
    it("matches NumPy's str()", function()
      for _, c in ipairs(cases) do
        local x = c[2](D)
        local want = c[1]
        if x.ndim > 0 then want = want .. suffix end
        assert.equal(want, tostring(x))
      end
    end)
  end)
end

describe("np.set_printoptions", function()
  local saved
  before_each(function() saved = np.get_printoptions() end)
  after_each(function() np.set_printoptions(saved) end)

  it("has NumPy's defaults", function()
    assert.same({precision = 8, threshold = 1000, edgeitems = 3, suppress = false, linewidth = 75},
                np.get_printoptions())
  end)
  it("precision, suppress, threshold, edgeitems and linewidth are honoured", function()
    np.set_printoptions({precision = 3})
    assert.equal("[0.577 0.679 0.144 0.333]", tostring(np.array({0.5773, 0.679, 0.1444, 1 / 3})))
    np.set_printoptions({precision = 8, suppress = true})
    assert.equal("[0. 1.]", tostring(np.array({1e-10, 1})))
    np.set_printoptions({suppress = false, threshold = 5, edgeitems = 2})
    assert.equal("[0 1 ... 8 9]", tostring(np.arange(10, {dtype = "int32"})))
    assert.equal("[0 1 2 3 4]", tostring(np.arange(5, {dtype = "int32"})))
    np.set_printoptions({threshold = 1000, linewidth = 10})
    assert.equal("[0 1 2 3\n 4 5 6 7\n 8 9]", tostring(np.arange(10, {dtype = "int32"})))
  end)
  it("changes only the options given", function()
    np.set_printoptions({precision = 2})
    local o = np.get_printoptions()
    assert.equal(2, o.precision)
    assert.equal(1000, o.threshold)
  end)
  it("rejects unknown options and bad values, naming them", function()
    H.assert_error(function() np.set_printoptions({precison = 3}) end, {"set_printoptions", "precison", "precision"})
    H.assert_error(function() np.set_printoptions({precision = -1}) end, {"set_printoptions", "precision", "-1"})
    H.assert_error(function() np.set_printoptions({suppress = 1}) end, {"set_printoptions", "suppress", "true or false"})
    assert.same(saved, np.get_printoptions())
  end)
end)
