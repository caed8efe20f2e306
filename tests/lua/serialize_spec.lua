-- serialize_spec: luon.serialize (safetensors) from Lua: round trips of every
-- dtype on every device, load onto another device, atomic writes (a failed
-- save leaves the old file as it was), errors naming the path, and
-- interoperability with numpy/PyTorch through /usr/bin/python3 when present.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local serialize = require("luon.serialize")

local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p '" .. tmpdir .. "'")
local function tmp(name) return tmpdir .. "/" .. name end

local read_file, write_file = H.read_file, H.write_file

local function leftovers()
  local p = io.popen("ls -a '" .. tmpdir .. "'")
  local s = p:read("*a")
  p:close()
  return s:match("%.tmp%.%d+") ~= nil
end

teardown(function() os.execute("rm -rf '" .. tmpdir .. "'") end)

local dtypes = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool"}

describe("serialize", function()
  for _, dev in ipairs(H.devices()) do
    it("round-trips every dtype on " .. tostring(dev), function()
      local names, arrays = {}, {}
      for k, dt in ipairs(dtypes) do
        local x = np.arange(12, {device = dev}):reshape({3, 4})
        if dt == "bool" then x = np.greater(x, 5) else x = x:astype(dt) end
        names[k], arrays[k] = "p." .. dt, x
      end
      names[#names + 1] = "transposed"
      arrays[#arrays + 1] = np.arange(6, {device = dev}):reshape({2, 3}).T
      names[#names + 1] = "scalar"
      arrays[#arrays + 1] = np.array(3.5, {device = dev})
      names[#names + 1] = "empty"
      arrays[#arrays + 1] = np.zeros({0, 3}, {device = dev})
      local path = tmp("rt.safetensors")
      serialize.save(path, names, arrays)
      for _, target in ipairs({npx.cpu(0), dev}) do
        local got = serialize.load(path, target == npx.cpu(0) and nil or {device = target})
        assert.are.equal(#names, #got)
        for k = 1, #names do
          assert.are.equal(names[k], got[k].name)
          H.check(got[k].array, arrays[k]:totable(),
                  {shape = arrays[k].shape, dtype = arrays[k].dtype, device = target})
        end
      end
      assert.is_false(leftovers())
    end)
  end

  it("takes and returns lists of {name =, array =}", function()
    local path = tmp("entries.safetensors")
    serialize.save(path, {{name = "a", array = np.ones({2})}, {name = "b", array = np.zeros({1, 2})}})
    local got = serialize.load(path)
    serialize.save(path, got)
    got = serialize.load(path)
    assert.are.equal("a", got[1].name)
    assert.are.equal("b", got[2].name)
    H.check(got[2].array, {{0, 0}}, {dtype = "float32"})
    local info = serialize.inspect(path)
    assert.are.same({name = "b", dtype = "float32", shape = {1, 2}}, info[2])
  end)

  it("never leaves a half-written file: a failed save keeps the old one", function()
    local path = tmp("keep.safetensors")
    serialize.save(path, {"w"}, {np.ones({4})})
    local before = read_file(path)
    -- duplicate names, a non-array, a missing directory, a directory as target
    H.assert_error(function() serialize.save(path, {"w", "w"}, {np.ones({1}), np.ones({1})}) end,
                   {"save: " .. path, "two tensors are named 'w'"})
    H.assert_error(function() serialize.save(path, {"w"}, {42}) end, {path, "'w' is a number"})
    local missing = tmp("no/such/dir/x.safetensors")
    local msg = H.assert_error(function() serialize.save(missing, {"w"}, {np.ones({1})}) end,
                               {"save: " .. missing, "cannot create the temporary file"})
    assert.is_truthy(msg:find("serialize_spec.lua:", 1, true), "error not at the caller's line: " .. msg)
    os.execute("mkdir -p '" .. tmp("adir") .. "'")
    H.assert_error(function() serialize.save(tmp("adir"), {"w"}, {np.ones({1})}) end,
                   "is a directory, not a regular file")
    assert.are.equal(before, read_file(path))
    assert.is_false(leftovers())
    -- and a save that works replaces it
    serialize.save(path, {"w"}, {np.zeros({2})})
    H.check(serialize.load(path)[1].array, {0, 0})
  end)

  it("keeps the mode of the file it replaces; past ulimit -f it raises and keeps the old file", function()
    local path = tmp("limited.params")
    local save = "local gluon = require('luon').gluon; local net = gluon.nn.Dense(1000, {in_units = 1000});" ..
                 "net:initialize(); local ok, e = pcall(net.save_parameters, net, %s); print(ok, e)"
    local out, status = H.sh(("%s -e %s"):format(H.quote(H.luon_exe()), H.quote(save:format(("%q"):format(path)))))
    assert.are.equal(0, status, out)
    os.execute("chmod 600 " .. H.quote(path))
    local before = read_file(path)
    -- 4 MB of weights under a 1 MB file-size limit: an error, not SIGXFSZ
    out, status = H.sh(("bash -c %s"):format(H.quote(("ulimit -f 1024; %s -e %s"):format(
      H.quote(H.luon_exe()), H.quote(save:format(("%q"):format(path)))))))
    assert.are.equal(0, status, out)
    assert.is_truthy(out:find("false\t.*" .. path:gsub("%p", "%%%0") .. ".*File too large"), out)
    assert.are.equal(before, read_file(path))
    assert.is_false(leftovers())
    out, status = H.sh(("%s -e %s"):format(H.quote(H.luon_exe()), H.quote(save:format(("%q"):format(path)))))
    assert.are.equal(0, status, out)
    local p = io.popen("stat -c %a " .. H.quote(path))
    assert.are.equal("600", p:read("*l"))
    p:close()
  end)

  it("names the path and the problem when loading fails", function()
    H.assert_error(function() serialize.load(tmp("nope.safetensors")) end,
                   {"load: " .. tmp("nope.safetensors"), "cannot open", "No such file"})
    local bad = tmp("bad.safetensors")
    local json = '{"conv1.0.weight":{"dtype":"F32","shape":[8,3,4,4],"data_offsets":[0,1024]}}'
    local len = #json
    local prefix = string.char(len % 256, math.floor(len / 256), 0, 0, 0, 0, 0, 0)
    write_file(bad, prefix .. json .. ("\0"):rep(1024))
    H.assert_error(function() serialize.load(bad, {caller = "load_parameters"}) end,
                   {"load_parameters: " .. bad .. ": tensor 'conv1.0.weight' needs 1536 bytes",
                    "data_offsets span 1024"})
    write_file(bad, "garbage")
    H.assert_error(function() serialize.load(bad) end, {bad, "fewer than the 8"})
    H.assert_error(function() serialize.load(bad, {device = npx.gpu(99)}) end, "gpu(99)")
    H.assert_error(function() serialize.load(nil) end, "non-empty string")
    -- luon still works
    H.check(np.ones({2}) + 1, {2, 2})
  end)
end)

-- numpy/PyTorch read what luon writes, and luon reads what they write.
local python = "/usr/bin/python3"
local function python_ok()
  local f = io.open(python, "rb")
  if not f then return false end
  f:close()
  return os.execute(python .. " -c 'import numpy, torch' >/dev/null 2>&1") == 0
end

describe("serialize interoperability", function()
  local have = python_ok()

  it("numpy and torch read luon's file by hand (struct + json + frombuffer)", function()
    if not have then pending("/usr/bin/python3 with numpy and torch is not installed") return end
    local path = tmp("interop.safetensors")
    local x = np.arange(6):reshape({2, 3}) * 0.5 - 1
    serialize.save(path, {"w.f32", "w.f64", "w.i64", "w.u8", "w.bool", "w.f16", "w.bf16", "w.t"},
                   {x, x:astype("float64"), np.arange(4, {dtype = "int64"}) - 2,
                    np.arange(3):astype("uint8"), np.greater(np.arange(3), 0),
                    x:astype("float16"), x:astype("bfloat16"), x.T})
    local script = tmp("read.py")
    write_file(script, [==[
import json, struct, sys
import numpy as np, torch
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
head = json.loads(raw[8:8 + n])
assert head.pop('__metadata__') == {'format': 'luon'}
data = raw[8 + n:]
np_types = {'F32': np.float32, 'F64': np.float64, 'I64': np.int64, 'U8': np.uint8, 'BOOL': np.bool_,
            'F16': np.float16}
out = {}
for name, e in head.items():
    b, end = e['data_offsets']
    if e['dtype'] == 'BF16':
        t = torch.frombuffer(bytearray(data[b:end]), dtype=torch.bfloat16).reshape(e['shape'])
        v = t.float().numpy()
    else:
        v = np.frombuffer(data[b:end], dtype=np_types[e['dtype']]).reshape(e['shape'])
    out[name] = {'shape': list(v.shape), 'values': v.astype(np.float64).ravel().tolist()}
print(json.dumps(out, sort_keys=True))
]==])
    local p = io.popen(python .. " '" .. script .. "' '" .. path .. "' 2>&1")
    local text = p:read("*a")
    p:close()
    local function field(name)
      local body = text:match('"' .. name:gsub("%.", "%%.") .. '": (%b{})')
      assert.is_truthy(body, "python output lacks " .. name .. ": " .. text)
      local shape, vals = {}, {}
      for v in body:match('"shape": (%b[])'):gmatch("%-?%d+") do shape[#shape + 1] = tonumber(v) end
      for v in body:match('"values": (%b[])'):gmatch("[^%[%],%s]+") do vals[#vals + 1] = tonumber(v) end
      return shape, vals
    end
    local s, v = field("w.f32")
    assert.are.same({2, 3}, s)
    H.assert_close(v, {-1, -0.5, 0, 0.5, 1, 1.5})
    s, v = field("w.t")
    assert.are.same({3, 2}, s)
    H.assert_close(v, {-1, 0.5, -0.5, 1, 0, 1.5})
    H.assert_close(select(2, field("w.f64")), {-1, -0.5, 0, 0.5, 1, 1.5})
    H.assert_close(select(2, field("w.f16")), {-1, -0.5, 0, 0.5, 1, 1.5})
    H.assert_close(select(2, field("w.bf16")), {-1, -0.5, 0, 0.5, 1, 1.5})
    H.assert_equal(select(2, field("w.i64")), {-2, -1, 0, 1})
    H.assert_equal(select(2, field("w.u8")), {0, 1, 2})
    H.assert_equal(select(2, field("w.bool")), {0, 1, 1})
  end)

  it("luon reads a file written by hand from torch tensors", function()
    if not have then pending("/usr/bin/python3 with numpy and torch is not installed") return end
    local path = tmp("from_torch.safetensors")
    local script = tmp("write.py")
    write_file(script, [==[
import json, struct, sys
import torch
ts = {'b': torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4,
      'a': torch.tensor([1, -2, 3], dtype=torch.int32),
      'h': torch.tensor([0.5, 2.0], dtype=torch.bfloat16)}
names = {torch.float32: 'F32', torch.int32: 'I32', torch.bfloat16: 'BF16'}
head, blobs, off = {'__metadata__': {'format': 'pt'}}, [], 0
for k, t in ts.items():
    b = t.contiguous().view(torch.uint8).numpy().tobytes()
    head[k] = {'dtype': names[t.dtype], 'shape': list(t.shape), 'data_offsets': [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(head).encode()
h += b' ' * (-(len(h) + 8) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
]==])
    assert.is_truthy(os.execute(python .. " '" .. script .. "' '" .. path .. "'") == 0)
    local got = serialize.load(path)
    assert.are.equal("b", got[1].name)
    H.check(got[1].array, {{0, 0.25, 0.5}, {0.75, 1, 1.25}}, {dtype = "float32"})
    H.check(got[2].array, {1, -2, 3}, {dtype = "int32"})
    H.check(got[3].array:astype("float32"), {0.5, 2}, {dtype = "float32"})
  end)
end)
