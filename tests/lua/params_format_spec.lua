-- params_format_spec: MXNet's binary .params format (luon.mxparams) read by
-- serialize.load and Block:load_parameters: files MXNet 1.9.1 wrote
-- (tests/data/gen_zoo_golden.py): dtypes and shapes, a list without
-- names, MXNet 1.x prefixed names and export's arg:/aux: mapped onto
-- structural names by order, their errors, and corrupt files (every
-- truncation, byte flips, absurd counts) raising Lua errors, never crashing.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local Z = require("zoo_helpers")
local np = H.np
local nn = H.luon.gluon.nn
local serialize = require("luon.serialize")

local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p '" .. tmpdir .. "'")
teardown(function() os.execute("rm -rf '" .. tmpdir .. "'") end)

local function read_file(path) return assert(H.read_file(path), path) end
local write_file = H.write_file

-- The small network of gen_zoo_golden.py's small_net.
local function small_net()
  local net = nn.HybridSequential()
  net:add(nn.Conv2D(4, 3, {in_channels = 3}), nn.BatchNorm{in_channels = 4}, nn.Activation("relu"),
          nn.Dense(5, {in_units = 4 * 6 * 6}))
  return net
end

local function by_name(entries)
  local t = {}
  for _, e in ipairs(entries) do t[e.name] = e.array end
  return t
end

describe("MXNet .params", function()
  it("reads every dtype and shape mx.nd.save wrote", function()
    local a = by_name(serialize.load(Z.data .. "mx_dtypes.params"))
    H.check(a.f32, {{0, 0.25, 0.5}, {0.75, 1, 1.25}}, {dtype = "float32", shape = {2, 3}})
    H.check(a.f64, {0, 1 / 3, 2 / 3, 1}, {dtype = "float64", tol = 1e-15})
    H.check(a.f16, {0.5, -2, 65504, 0.0010004}, {dtype = "float16", tol = 1e-4})
    H.check(a.i32, {1, -2, 3}, {dtype = "int32"})
    H.check(a.i64, {{2 ^ 40, -5}}, {dtype = "int64"})
    H.check(a.u8, {0, 7, 255}, {dtype = "uint8"})
    H.check(a.one, {3.5}, {shape = {1}})
    local n = 0
    for _ in pairs(a) do n = n + 1 end
    assert.are.equal(7, n)
  end)

  it("loads onto a device", function()
    for _, dev in ipairs(H.devices()) do
      local a = by_name(serialize.load(Z.data .. "mx_dtypes.params", {device = dev}))
      assert.are.equal(dev, a.f32.device)
      H.check(a.i32, {1, -2, 3})
    end
  end)

  it("reads a list without names, which load_parameters refuses", function()
    local e = serialize.load(Z.data .. "mx_list.params")
    assert.are.equal(2, #e)
    assert.is_nil(e[1].name)
    H.check(e[1].array, {1, 2})
    H.check(e[2].array, {{3}})
    H.assert_error(function() small_net():load_parameters(Z.data .. "mx_list.params") end,
                   {"load_parameters", "mx_list.params", "without names"})
  end)

  it("maps MXNet 1.x prefixed names (collect_params().save, export) onto structural names", function()
    local want = Z.numbers("mx_small_output.txt")
    for _, file in ipairs({"mx_prefixed.params", "mx_export.params"}) do
      local net = small_net()
      net:load_parameters(Z.data .. file)
      local y = net(Z.input(8))
      assert.are.same({2, 5}, y.shape)
      local got = y:reshape(-1):totable()
      for k = 1, #want do
        assert(math.abs(got[k] - want[k]) <= 1e-5 * (1 + math.abs(want[k])),
               ("%s: output %d is %s, MXNet gives %s"):format(file, k, got[k], want[k]))
      end
    end
  end)

  it("names the unmatched names when the order is not unambiguous", function()
    -- one layer fewer: the counts differ
    local net = nn.HybridSequential()
    net:add(nn.Conv2D(4, 3, {in_channels = 3}), nn.BatchNorm{in_channels = 4})
    H.assert_error(function() net:load_parameters(Z.data .. "mx_prefixed.params") end,
                   {"MXNet 1.x", "hybridsequential0_conv0_weight", "Unmatched in the file",
                    "'hybridsequential0_dense0_weight'", "'hybridsequential0_dense0_bias'"})
    -- same count, a shape that differs
    net = nn.HybridSequential()
    net:add(nn.Conv2D(4, 5, {in_channels = 3}), nn.BatchNorm{in_channels = 4}, nn.Dense(5, {in_units = 144}))
    H.assert_error(function() net:load_parameters(Z.data .. "mx_prefixed.params") end,
                   {"Unmatched in the file: ['hybridsequential0_conv0_weight']",
                    "unmatched in the block: ['0.weight']"})
    -- same shapes, names that end differently (a Dense where a BatchNorm was)
    net = nn.HybridSequential()
    net:add(nn.Conv2D(4, 3, {in_channels = 3}))
    H.assert_error(function() net:load_parameters(Z.data .. "mx_prefixed.params") end, {"unmatched in the block: []"})
    -- nothing changed on failure
    local ok = small_net()
    ok:initialize()
    local before = ok[0].weight:data():totable()
    assert.is_false(pcall(function() ok:load_parameters(Z.data .. "mx_dtypes.params") end))
    assert.are.same(before, ok[0].weight:data():totable())
  end)

  it("raises an error, never crashes, on every truncation of a file", function()
    for _, name in ipairs({"mx_list.params", "mx_dtypes.params", "mx_prefixed.params"}) do
      local s = read_file(Z.data .. name)
      local path = tmpdir .. "/cut.params"
      for n = 0, #s - 1 do
        write_file(path, s:sub(1, n))
        local ok, err = pcall(serialize.load, path)
        assert(not ok, ("%s cut to %d bytes loaded"):format(name, n))
        assert(tostring(err):find(path, 1, true), ("%s cut to %d: %s"):format(name, n, tostring(err)))
      end
      -- and a byte too many
      write_file(path, s .. "\0")
      H.assert_error(function() serialize.load(path) end, {"1 bytes follow the names"})
    end
  end)

  it("refuses a FIFO without waiting for a writer", function()
    local path = tmpdir .. "/fifo.params"
    local rc = os.execute("mkfifo '" .. path .. "' 2>/dev/null")
    if rc ~= 0 and rc ~= true then return end -- no mkfifo here
    H.assert_error(function() serialize.load(path) end, {path, "not a regular file"})
    H.assert_error(function() H.luon.gluon.nn.Dense(2):load_parameters(path) end, {path})
  end)

  it("raises an error or loads, never crashes, when bytes are changed", function()
    local s = read_file(Z.data .. "mx_dtypes.params")
    local path = tmpdir .. "/flip.params"
    local errors = 0
    for i = 9, #s do -- (changing the first 8 bytes makes it no .params file)
      for _, v in ipairs({0x00, 0xFF, 0x80, 0x07}) do
        local b = s:byte(i)
        if b ~= v then
          write_file(path, s:sub(1, i - 1) .. string.char(v) .. s:sub(i + 1))
          local ok, res = pcall(serialize.load, path)
          if ok then
            assert.are.equal("table", type(res))
          else
            errors = errors + 1
            assert(tostring(res):find(path, 1, true), tostring(res))
          end
        end
      end
    end
    assert(errors > 100, "only " .. errors .. " changes were errors")
  end)

  it("refuses absurd counts, lengths, shapes and dtypes without allocating them", function()
    local ffi = require("ffi")
    local function u64(v) local b = ffi.new("uint64_t[1]", v); return ffi.string(b, 8) end
    local function u32(v) local b = ffi.new("uint32_t[1]", v); return ffi.string(b, 4) end
    local function i64(v) local b = ffi.new("int64_t[1]", v); return ffi.string(b, 8) end
    local head = u64(0x112) .. u64(0)
    local path = tmpdir .. "/bad.params"
    local function arr(ndim, dims, flag, data)
      local s = u32(0xF993FAC9) .. u32(0) .. u32(ndim)
      for _, d in ipairs(dims) do s = s .. i64(d) end
      return s .. u32(1) .. u32(0) .. u32(flag) .. data
    end
    local cases = {
      {head .. u64(2 ^ 62), "the number of arrays"},
      {head .. u64(1) .. arr(1, {2 ^ 40}, 0, ""), "needs"},
      {head .. u64(1) .. arr(1, {-3}, 0, ""), "dimension 0 of size -3"},
      {head .. u64(1) .. arr(9, {}, 0, ""), "has 9 dimensions"},
      {head .. u64(1) .. arr(1, {1}, 99, "xxxx"), "dtype flag 99"},
      {head .. u64(1) .. arr(1, {1}, 10, "xxxx"), "uint32, a dtype luon does not have"},
      {head .. u64(1) .. arr(1, {1}, 0, "xxxx") .. u64(2), "the number of names"},
      {head .. u64(1) .. arr(1, {1}, 0, "xxxx") .. u64(1) .. u64(2 ^ 50), "the length of name 0"},
      {head .. u64(2) .. arr(1, {1}, 0, "xxxx") .. arr(1, {1}, 0, "xxxx") .. u64(2) .. u64(1) .. "a" .. u64(1) .. "a",
       "two arrays are named \"a\""},
      {head .. u64(1) .. u32(0xF993FAC9) .. u32(1), "row_sparse storage"},
      {head .. u64(1) .. u32(0x12345678), "no MXNet NDArray magic"},
      {u64(0x113) .. u64(0), "header length 275"},
    }
    for _, c in ipairs(cases) do
      write_file(path, c[1])
      H.assert_error(function() serialize.load(path) end, {path, c[2]})
    end
    -- a "none" array (MXNet's NDArray()) is skipped
    write_file(path, head .. u64(2) .. u32(0xF993FAC9) .. u32(0) .. u32(0) .. arr(1, {1}, 0, "\0\0\128\63")
                     .. u64(2) .. u64(1) .. "n" .. u64(1) .. "a")
    local e = serialize.load(path)
    assert.are.equal(1, #e)
    assert.are.equal("a", e[1].name)
    H.check(e[1].array, {1})
  end)
end)
