-- npy_spec: npx.save / savez / savez_compressed / load in NumPy's .npy and
-- .npz formats: NumPy-written fixtures (tests/data/gen_npy_fixtures.py:
-- big-endian, Fortran order, version 2.0, stored and deflated archives)
-- load with their values; what luon writes NumPy reads (Debian's
-- python3-numpy) and luon reads back, from every device; corrupt files
-- are errors naming the file and the fault, never crashes.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local data = H.root .. "tests/data/"

local function tmp(name) return os.tmpname() .. name end

describe("npx.load of NumPy's files", function()
  it("reads .npy: float32, big-endian Fortran float64, bool, a float16 scalar, empty int64, version 2.0", function()
    H.check(npx.load(data .. "np_f32.npy"), {{0, 0.25, 0.5}, {0.75, 1, 1.25}}, {dtype = "float32"})
    local f = npx.load(data .. "np_f8_be_fortran.npy")
    local want = {}
    for i = 0, 2 do
      want[i + 1] = {}
      for j = 0, 3 do want[i + 1][j + 1] = i * 4 + j - 5.5 end
    end
    H.check(f, want, {dtype = "float64", shape = {3, 4}})
    H.check(npx.load(data .. "np_bool.npy"), {{true, false, true}}, {dtype = "bool"})
    local s = npx.load(data .. "np_f16_scalar.npy")
    assert.equal(0, s.ndim)
    assert.equal(1.5, s:item())
    H.check(npx.load(data .. "np_i64_empty.npy"), nil, {dtype = "int64", shape = {0, 3}})
    H.check(npx.load(data .. "np_v2.npy"), {0, 1, 2, 3}, {dtype = "int32"})
  end)

  it("reads .npz, stored and deflated, as a table by name", function()
    local z = npx.load(data .. "np_stored.npz")
    H.check(z.arr_0, {0, 1, 2}, {dtype = "uint8"})
    H.check(z.w, {{1, 0}, {0, 1}}, {dtype = "float16"})
    local c = npx.load(data .. "np_deflated.npz")
    H.check(c.big, nil, {dtype = "float64", shape = {50, 40}})
    assert.equal(2000, c.big:sum():item())
    H.check(c.small, {-1, 2}, {dtype = "int32"})
  end)
end)

local have_numpy = os.execute("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0
for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    it("round-trips through luon and NumPy", function()
      assert.is_true(have_numpy, "needs Debian's python3-numpy (scripts/setup installs it)")
      local a = np.arange(12, {device = dev}):reshape({3, 4}):astype("float32") / 8
      local b = np.array({{true, false}}, {device = dev})
      local c = np.arange(5, {dtype = "int64", device = dev})
      local p1, p2, p3 = tmp(".npy"), tmp(".npz"), tmp(".npz")
      npx.save(p1, a.T) -- a view: written row-major
      npx.savez(p2, b, c, {w = a, v = c, i8 = (c - 3):astype("int8"), u16 = c:astype("uint16")})
      npx.savez_compressed(p3, {z = np.zeros({64, 64}, {device = dev})})
      local p4 = tmp(".npz")
      npx.savez(p4) -- no arrays: an empty archive, as NumPy writes
      assert.is_nil(next(npx.load(p4)))
      os.remove(p4)
      local check = ([==[
import numpy as np
a = np.load('%s'); assert a.dtype == np.float32 and a.shape == (4, 3), a
assert (a == (np.arange(12).reshape(3, 4) / 8).T).all()
z = np.load('%s'); assert sorted(z.keys()) == ['arr_0', 'arr_1', 'i8', 'u16', 'v', 'w'], list(z.keys())
assert z['i8'].dtype == np.int8 and z['i8'].tolist() == [-3, -2, -1, 0, 1], z['i8']
assert z['u16'].dtype == np.uint16 and z['u16'].tolist() == [0, 1, 2, 3, 4]
assert z['arr_0'].dtype == np.bool_ and z['arr_0'].tolist() == [[True, False]]
assert z['arr_1'].dtype == np.int64 and z['arr_1'].tolist() == [0, 1, 2, 3, 4]
assert z['w'].shape == (3, 4)
c = np.load('%s'); assert c['z'].shape == (64, 64) and not c['z'].any()
print('numpy ok')
]==]):format(p1, p2, p3)
      local pf = io.popen("/usr/bin/python3 -c \"" .. check .. "\" 2>&1")
      local out = pf:read("*a")
      pf:close()
      assert.equal("numpy ok\n", out)
      local back = npx.load(p1, {device = dev})
      assert.equal(dev, back.device)
      H.check(back, a.T:totable(), {dtype = "float32"})
      local z = npx.load(p2, {device = dev})
      H.check(z.arr_1, {0, 1, 2, 3, 4}, {dtype = "int64"})
      H.check(z.w, a:totable())
      H.check(z.i8, {-3, -2, -1, 0, 1}, {dtype = "int8"})
      H.check(z.u16, {0, 1, 2, 3, 4}, {dtype = "uint16"})
      for _, p in ipairs({p1, p2, p3}) do os.remove(p) end
    end)
  end)
end

describe("npy bad input", function()
  local function bytes(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
  end
  local function load_bytes(s, ext)
    local p = tmp(ext or ".npy")
    local f = assert(io.open(p, "wb"))
    f:write(s)
    f:close()
    local ok, err = pcall(npx.load, p)
    os.remove(p)
    return ok, tostring(err)
  end

  it("raises, never crashes, on every truncation of a .npy and of a .npz", function()
    for _, name in ipairs({"np_f32.npy", "np_stored.npz"}) do
      local s = bytes(data .. name)
      for n = 0, #s - 1 do
        local ok, err = load_bytes(s:sub(1, n), name:match("%.%w+$"))
        assert.is_false(ok, name .. " cut at " .. n)
        assert.truthy(err:find("npx.load: ", 1, true), err)
      end
    end
  end)

  it("refuses a stored .npz member whose bytes do not match its CRC-32", function()
    local s = bytes(data .. "np_stored.npz")
    local at = s:find("\x93NUMPY", 1, true)
    local hl = s:byte(at + 8) + 256 * s:byte(at + 9)
    local k = at + 10 + hl + 1 -- the second byte of the first member's values
    local bad = s:sub(1, k - 1) .. string.char((s:byte(k) + 1) % 256) .. s:sub(k + 1)
    local ok, err = load_bytes(bad, ".npz")
    assert.is_false(ok)
    assert.truthy(err:find("is corrupt", 1, true), err)
    assert.truthy(load_bytes(s, ".npz")) -- the file itself loads
  end)

  it("names the fault of a hostile header", function()
    local function npy(dict, body)
      local h = dict .. (" "):rep(63 - ((10 + #dict) % 64)) .. "\n"
      return "\x93NUMPY\1\0" .. string.char(#h % 256, math.floor(#h / 256)) .. h .. (body or "")
    end
    local cases = {
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", ("\0"):rep(4)), "need 8 bytes of data but 4"},
      {npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"), "structured dtypes are not supported"},
      {npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }"), "dtype '<c8' is not one luon reads"},
      {npy("{'descr': '<f4', 'shape': (1,), }"), "lacks 'fortran_order'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"), "unexpected key 'x'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"), "shape holds a non-integer"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"), "too large"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }"), "more than 8 dimensions"},
      {npy("{'descr': '|b1', 'fortran_order': False, 'shape': (1,), }", "\7"), "bool element holds 7"},
      {"\x93NUMPY\9\0\0\0", "version 9.0"},
      {"just text", "not a .npy, .npz or MXNet .params file"},
    }
    for _, c in ipairs(cases) do
      local ok, err = load_bytes(c[1])
      assert.is_false(ok)
      assert.truthy(err:find(c[2], 1, true), err)
    end
    assert.equal(3, (np.ones({3}) + 0):sum():item()) -- still usable
  end)

  it("refuses what NumPy cannot hold and wrong arguments, leaving the old file", function()
    local p = tmp(".npy")
    npx.save(p, np.ones({2}))
    H.assert_error(function() npx.save(p, np.ones({2}):astype("bfloat16")) end, "bfloat16 has no NumPy dtype")
    H.check(npx.load(p), {1, 1}) -- the old file is there, whole
    H.assert_error(function() npx.save(p, {np.ones({2})}) end, "npx.savez")
    H.assert_error(function() npx.save(p, 3) end, "expected an ndarray, got 3")
    H.assert_error(function() npx.savez(p, np.ones({1}), {arr_0 = np.ones({1})}) end, "keyword arr_0")
    H.assert_error(function() npx.savez(p, {[1.5] = np.ones({1})}) end, "names arrays by string keys")
    H.assert_error(function() npx.savez(p, {np.ones({1}), np.ones({2})}) end, "pass unnamed arrays as arguments")
    H.assert_error(function() npx.load(p, {devise = npx.cpu()}) end, "unknown option 'devise'")
    H.assert_error(function() npx.save("/", np.ones({1})) end, "npx.save: /")
    os.remove(p)
  end)
end)
