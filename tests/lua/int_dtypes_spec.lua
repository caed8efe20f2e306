-- int_dtypes_spec: int8, int16 and uint16 beside the other dtypes: the
-- promotion matrix against tests/data/dtype_promotion.txt (NumPy for two
-- integers, MXNet's "the float wins" otherwise; gen_dtype_golden.py),
-- wrapping arithmetic, conversions, reductions, range errors for numbers
-- that do not fit, printing, safetensors and MXNet's int8 .params.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local serialize = require("luon.serialize")

local data = H.root .. "tests/data/"
local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p '" .. tmpdir .. "'")
teardown(function() os.execute("rm -rf '" .. tmpdir .. "'") end)

local golden = {}
for line in io.lines(data .. "dtype_promotion.txt") do
  local a, b, r = line:match("^(%S+) (%S+) (%S+)$")
  golden[#golden + 1] = {a, b, r}
end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local D = {device = dev}

    it("promotes every pair of dtypes as the golden matrix says", function()
      assert.is_true(#golden == 100, "golden pairs: " .. #golden)
      local wrong = {}
      for _, g in ipairs(golden) do
        local x = np.ones({2}, {dtype = g[1], device = dev})
        local y = np.ones({2}, {dtype = g[2], device = dev})
        local r = (x + y).dtype
        if r ~= g[3] then wrong[#wrong + 1] = ("%s + %s = %s, expected %s"):format(g[1], g[2], r, g[3]) end
        if g[1] ~= "bool" or g[2] ~= "bool" then -- bool - bool is an error, as in NumPy
          local m = np.multiply(x, y).dtype
          if m ~= g[3] then wrong[#wrong + 1] = ("%s * %s = %s, expected %s"):format(g[1], g[2], m, g[3]) end
        end
      end
      assert.are.same({}, wrong)
    end)

    it("np.int8, np.int16, np.uint16 name the dtypes", function()
      assert.equal("int8", np.int8)
      assert.equal("int16", np.int16)
      assert.equal("uint16", np.uint16)
      H.check(np.zeros({2}, {dtype = np.int8, device = dev}), {0, 0}, {dtype = "int8"})
    end)

    it("arithmetic wraps as NumPy's does", function()
      local a = np.array({127, -128, -1, 100}, {dtype = "int8", device = dev})
      H.check(a + 1, {-128, -127, 0, 101}, {dtype = "int8"})
      H.check(a * a, {1, 0, 1, 16}, {dtype = "int8"})
      H.check(-a, {-127, -128, 1, -100})
      H.check(np.abs(a), {127, -128, 1, 100})
      local s = np.array({32767, -32768, 200}, {dtype = "int16", device = dev})
      H.check(s + s, {-2, 0, 400}, {dtype = "int16"})
      H.check(s * s, {1, 0, -25536}, {dtype = "int16"})
      local u = np.array({65535, 0, 300}, {dtype = "uint16", device = dev})
      H.check(u + 1, {0, 1, 301}, {dtype = "uint16"})
      H.check(u * u, {1, 0, 24464}, {dtype = "uint16"})
      H.check(u - 1, {65534, 65535, 299}, {dtype = "uint16"})
      H.check(np.power(a, 2), {1, 0, 1, 16}, {dtype = "int8"})
      H.check(a / 2, {63.5, -64, -0.5, 50}, {dtype = "float32"})
      H.check(np.exp(np.zeros({2}, {dtype = "int8", device = dev})), {1, 1}, {dtype = "float32"})
      H.check(a + 0.5, {127.5, -127.5, -0.5, 100.5}, {dtype = "float32"})
      H.check(np.sign(a), {1, -1, -1, 1}, {dtype = "int8"})
    end)

    it("mixes integer dtypes as NumPy: int8 + uint8 is int16", function()
      local a = np.array({-100, 100}, {dtype = "int8", device = dev})
      local b = np.array({200, 255}, {dtype = "uint8", device = dev})
      H.check(a + b, {100, 355}, {dtype = "int16"})
      local s = np.array({-30000, 30000}, {dtype = "int16", device = dev})
      local u = np.array({65535, 65535}, {dtype = "uint16", device = dev})
      H.check(s + u, {35535, 95535}, {dtype = "int32"})
      H.check(np.greater(a, b), {false, false}, {dtype = "bool"})
      H.check(np.maximum(s, a), {-100, 30000}, {dtype = "int16"})
    end)

    it("converts with astype as C casts (wrapping) and from floats by saturating through int64", function()
      local x = np.array({300, -129, 65536 + 7, -1}, {dtype = "int64", device = dev})
      H.check(x:astype("int8"), {44, 127, 7, -1}, {dtype = "int8"})
      H.check(x:astype("int16"), {300, -129, 7, -1}, {dtype = "int16"})
      H.check(x:astype("uint16"), {300, 65407, 7, 65535}, {dtype = "uint16"})
      local f = np.array({1.9, -1.9, 0 / 0, 100.5}, {dtype = "float32", device = dev})
      H.check(f:astype("int8"), {1, -1, 0, 100})
      H.check(np.array({-5, 7}, {dtype = "int8", device = dev}):astype("float64"), {-5, 7}, {dtype = "float64"})
      H.check(np.array({-5, 0}, {dtype = "int16", device = dev}):astype("bool"), {true, false}, {dtype = "bool"})
      H.check(np.array({1, 2}, {dtype = "uint16", device = dev}):astype("float16"), {1, 2}, {dtype = "float16"})
    end)

    it("reduces: sum in int64, max and min in the dtype, argmax, mean in float32", function()
      local a = np.array({{-128, 5}, {127, 3}}, {dtype = "int8", device = dev})
      H.check(np.sum(a), 7, {dtype = "int64"})
      H.check(np.max(a, 0), {127, 5}, {dtype = "int8"})
      H.check(np.min(a), -128, {dtype = "int8"})
      H.check(np.argmax(a, 1), {1, 0}, {dtype = "int64"})
      H.check(np.mean(a), 1.75, {dtype = "float32"})
      local u = np.array({65535, 1}, {dtype = "uint16", device = dev})
      H.check(np.sum(u), 65536, {dtype = "int64"})
      H.check(np.max(u), 65535, {dtype = "uint16"})
    end)

    it("clip, where, take and indexing", function()
      local a = np.array({-128, -3, 0, 9, 127}, {dtype = "int8", device = dev})
      H.check(np.clip(a, -5, 300), {-5, -3, 0, 9, 127}, {dtype = "int8"})
      H.check(np.where(np.greater(a, 0), a, np.zeros({5}, {dtype = "int8", device = dev})), {0, 0, 0, 9, 127},
              {dtype = "int8"})
      local idx = np.array({4, 0}, {dtype = "int16", device = dev})
      H.check(np.take(a, idx), {127, -128}, {dtype = "int8"})
      H.check(a[idx], {127, -128})
      H.check(np.arange(3, {dtype = "uint16", device = dev}), {0, 1, 2}, {dtype = "uint16"})
      H.check(np.full({2}, -7, {dtype = "int16", device = dev}), {-7, -7})
    end)

    it("a number that does not fit the array's dtype is an error naming the range", function()
      local a = np.array({1, 2}, {dtype = "int8", device = dev})
      H.assert_error(function() return a + 200 end, {"add", "200 does not fit int8 (-128 to 127)", "astype"})
      H.assert_error(function() return a - (-129) end, {"subtract", "-129 does not fit int8"})
      local s = np.array({1}, {dtype = "int16", device = dev})
      H.assert_error(function() return s * 40000 end, {"multiply", "40000 does not fit int16 (-32768 to 32767)"})
      local u = np.array({1}, {dtype = "uint16", device = dev})
      H.assert_error(function() return u + (-1) end, {"add", "-1 does not fit uint16 (0 to 65535)"})
      H.assert_error(function() return u + 65536 end, {"65536 does not fit uint16"})
      H.check(a + 127, {-128, -127}) -- in range: wraps as the array arithmetic does
      H.check(u + 65535, {0})
    end)

    it("prints as NumPy does", function()
      assert.equal("[-128    0  127]", tostring(np.array({-128, 0, 127}, {dtype = "int8", device = dev})):gsub(" @.*", ""))
      assert.equal("65535", tostring(np.array(65535, {dtype = "uint16", device = dev})):gsub(" @.*", ""))
    end)
  end)
end

describe("files", function()
  it("safetensors saves and loads I8, I16 and U16", function()
    local path = tmpdir .. "/ints.safetensors"
    local a = np.array({-128, 0, 127}, {dtype = "int8"})
    local b = np.array({{-32768, 32767}}, {dtype = "int16"})
    local c = np.array({0, 65535}, {dtype = "uint16"})
    serialize.save(path, {"a", "b", "c"}, {a, b, c})
    local text = H.read_file(path)
    assert.truthy(text:find('"I8"', 1, true) and text:find('"I16"', 1, true) and text:find('"U16"', 1, true))
    local got = {}
    for _, e in ipairs(serialize.load(path)) do got[e.name] = e.array end
    H.check(got.a, {-128, 0, 127}, {dtype = "int8"})
    H.check(got.b, {{-32768, 32767}}, {dtype = "int16"})
    H.check(got.c, {0, 65535}, {dtype = "uint16"})
  end)

  it("reads MXNet's int8 arrays from a .params file (tests/data/gen_dtype_golden.py)", function()
    local got = {}
    for _, e in ipairs(serialize.load(data .. "mx_int8.params")) do got[e.name] = e.array end
    H.check(got.i8, {-128, -1, 0, 5, 127}, {dtype = "int8"})
    H.check(got.i8_2d, {{1, -2, 3}, {-4, 5, -6}}, {dtype = "int8", shape = {2, 3}})
  end)

  it("an unknown dtype lists the new ones", function()
    H.assert_error(function() return np.zeros({2}, {dtype = "int9"}) end, {"unknown dtype int9", "int8", "uint16"})
  end)
end)

-- npx is loaded for its side effects on np (the activations used above)
assert(npx)
