-- model_zoo_spec: gluon.model_zoo.vision against MXNet 1.9.1's model zoo
-- (goldens from tests/data/gen_zoo_golden.py): every model's parameter
-- names in order and their shapes, outputs of formula-weighted models,
-- pretrained files found through root / LUON_MODEL_ZOO and never
-- downloaded, and the errors of bad arguments.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local Z = require("zoo_helpers")
local np = H.np
local gluon = H.luon.gluon
local vision = gluon.model_zoo.vision

local tmpdir = os.tmpname()
os.remove(tmpdir)
os.execute("mkdir -p '" .. tmpdir .. "'")
teardown(function() os.execute("rm -rf '" .. tmpdir .. "'") end)

local function copy(src, dst)
  local f = assert(io.open(src, "rb"))
  local s = f:read("*a")
  f:close()
  f = assert(io.open(dst, "wb"))
  f:write(s)
  f:close()
end

local function shape_text(s) return "(" .. table.concat(s, ", ") .. ")" end

-- Names in order and every known dim; with `exact`, every dim.
local function check_structure(net, golden, exact)
  local params = net:collect_params()
  local names = params:keys()
  local want = {}
  for k, e in ipairs(golden.params) do want[k] = e[1] end
  for k = 1, math.max(#names, #want) do
    if names[k] ~= want[k] then
      error(("%s: parameter %d is %s, MXNet's is %s"):format(golden.name, k - 1, tostring(names[k]),
            tostring(want[k])), 2)
    end
  end
  for _, e in ipairs(golden.params) do
    local s = params[e[1]].shape
    local ok = #s == #e[2]
    for d = 1, ok and #s or 0 do
      if s[d] ~= e[2][d] and (exact or s[d] ~= -1) then ok = false end
    end
    if not ok then
      error(("%s: %s has shape %s, MXNet's is %s"):format(golden.name, e[1], shape_text(s), shape_text(e[2])), 2)
    end
  end
end

-- Models run once here (small); the others are checked before any forward.
local run = {["resnet18_v1"] = true, ["resnet18_v2"] = true, ["resnet50_v1"] = true, ["resnet50_v2"] = true,
             ["mobilenet0.25"] = true, ["mobilenetv2_0.25"] = true, ["mobilenet1.0"] = true,
             ["vgg11_bn"] = true, ["alexnet"] = true, ["squeezenet1.1"] = true}

describe("model_zoo.vision", function()
  local structures = Z.structures()

  it("has every model of MXNet's get_model", function()
    assert.are.equal(34, #structures)
    local names = {}
    for _, m in ipairs(structures) do names[#names + 1] = m.name end
    table.sort(names)
    assert.are.same(names, vision.model_names())
  end)

  for _, golden in ipairs(structures) do
    it(("%s has MXNet's parameter names and shapes"):format(golden.name), function()
      local net = vision.get_model(golden.name, {classes = 10})
      check_structure(net, golden, false)
      if run[golden.name] then
        net:initialize()
        local y = net(np.zeros({1, 3, golden.side, golden.side}))
        assert.are.same({1, 10}, y.shape)
        check_structure(net, golden, true)
      end
    end)
  end

  it("reaches the models as MXNet does", function()
    assert.are.equal(vision, require("luon").gluon.model_zoo.vision)
    local names = vision.resnet18_v1():collect_params():keys()
    assert.are.equal("features.0.weight", names[1])
    assert.are.same({1000, 512}, vision.resnet18_v1().output.weight.shape)
    assert.are.same({1000, 512}, vision.get_resnet(1, 18).output.weight.shape)
    assert.are.same({10, 2048}, vision.get_resnet(2, 50, {classes = 10}).output.weight.shape)
    assert.are.equal(#vision.mobilenet1_0():collect_params():keys(),
                     #vision.get_model("MobileNet1.0"):collect_params():keys())
    assert.are.same({16, -1, 3, 3}, vision.get_mobilenet(0.5).features[0].weight.shape)
    assert.are.same({8, -1, 3, 3}, vision.get_mobilenet_v2(0.25).features[0].weight.shape)
    -- thumbnail: a 3x3 stem without pooling
    local t = vision.resnet18_v1{thumbnail = true, classes = 10}
    assert.are.same({64, -1, 3, 3}, t.features[0].weight.shape)
    t:initialize()
    assert.are.same({2, 10}, t(np.zeros({2, 3, 8, 8})).shape)
    -- batch_norm: vgg11 with it is vgg11_bn
    assert.are.same(vision.vgg11_bn():collect_params():keys(),
                    vision.vgg11{batch_norm = true}:collect_params():keys())
  end)

  local outputs = Z.outputs()
  for _, name in ipairs({"resnet18_v1", "resnet18_v2", "mobilenet1.0", "mobilenetv2_0.25", "vgg11",
                         "alexnet", "squeezenet1.1", "resnet50_v1", "mobilenet0.25", "densenet121",
                         "inceptionv3"}) do
    it(("%s with formula weights gives MXNet's outputs"):format(name), function()
      local golden = assert(outputs[name], name)
      local net = vision.get_model(name, {classes = 10})
      net:initialize()
      net(np.zeros({1, 3, golden.side, golden.side}))
      Z.set_formula(net)
      Z.assert_rows(net(Z.input(golden.side)), golden.rows, 1e-4, name)
    end)
  end

  it("loads pretrained weights from root or LUON_MODEL_ZOO, MXNet's .params as written", function()
    local golden = outputs["mobilenet0.25"]
    local dir = tmpdir .. "/zoo"
    os.execute("mkdir -p '" .. dir .. "'")
    copy(Z.data .. "mx_mobilenet0_25.params", dir .. "/mobilenet0.25.params")
    local net = vision.mobilenet0_25{pretrained = true, classes = 10, root = dir}
    Z.assert_rows(net(Z.input(golden.side)), golden.rows, 1e-4, "mobilenet0.25 (root)")
    -- MXNet's cache name, <name>-<hash>.params, is found too
    local dir2 = tmpdir .. "/cache"
    os.execute("mkdir -p '" .. dir2 .. "'")
    copy(Z.data .. "mx_mobilenet0_25.params", dir2 .. "/mobilenet0.25-9f83e440.params")
    net = vision.get_model("mobilenet0.25", {pretrained = true, classes = 10, root = dir2, ctx = H.luon.cpu()})
    Z.assert_rows(net(Z.input(golden.side)), golden.rows, 1e-4, "mobilenet0.25 (cache name)")
    -- the file's shapes must fit: 1000 classes do not load 10
    H.assert_error(function() vision.mobilenet0_25{pretrained = true, root = dir} end,
                   {"output.weight", "(1000, -1)", "(10, 256)"})
  end)

  it("reads LUON_MODEL_ZOO when no root is given", function()
    local ffi = require("ffi")
    pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);")
    local old = os.getenv("LUON_MODEL_ZOO")
    local dir = tmpdir .. "/env"
    os.execute("mkdir -p '" .. dir .. "'")
    copy(Z.data .. "mx_mobilenet0_25.params", dir .. "/mobilenet0.25.params")
    ffi.C.setenv("LUON_MODEL_ZOO", dir, 1)
    local ok, err = pcall(function()
      local golden = outputs["mobilenet0.25"]
      local net = vision.get_model("mobilenet0.25", {pretrained = true, classes = 10})
      Z.assert_rows(net(Z.input(golden.side)), golden.rows, 1e-4, "mobilenet0.25 (LUON_MODEL_ZOO)")
      H.assert_error(function() vision.resnet18_v2{pretrained = true} end,
                     {"looked in LUON_MODEL_ZOO", dir .. "/resnet18_v2.params"})
    end)
    if old then ffi.C.setenv("LUON_MODEL_ZOO", old, 1) else ffi.C.unsetenv("LUON_MODEL_ZOO") end
    assert(ok, err)
  end)

  it("names the paths it looked at when a pretrained file is missing", function()
    local msg = H.assert_error(function() vision.resnet18_v1{pretrained = true, root = tmpdir .. "/none"} end,
                               {"resnet18_v1", tmpdir .. "/none/resnet18_v1.params",
                                tmpdir .. "/none/resnet18_v1.safetensors", "LUON_MODEL_ZOO", "downloads nothing"})
    assert.is_truthy(msg:find("resnet18_v1-a0666292.params", 1, true))
    H.assert_error(function() vision.vgg16_bn{pretrained = true, root = tmpdir} end, {"vgg16_bn.params"})
    H.assert_error(function() vision.get_mobilenet_v2(0.5, {pretrained = true, root = tmpdir}) end,
                   {"mobilenetv2_0.5.params"})
  end)

  it("rejects bad arguments with messages naming them", function()
    H.assert_error(function() vision.get_model("resnet19_v1") end, {"get_model", "'resnet19_v1'", "resnet18_v1"})
    H.assert_error(function() vision.get_model(18) end, {"get_model: name must be a string"})
    H.assert_error(function() vision.resnet18_v1{clases = 10} end, {"unknown argument 'clases'", "classes"})
    H.assert_error(function() vision.resnet18_v1{classes = 0} end, {"classes must be an integer >= 1"})
    H.assert_error(function() vision.get_resnet(3, 18) end, {"get_resnet: version must be 1 or 2, got 3"})
    H.assert_error(function() vision.get_resnet(1, 20) end, {"num_layers must be 18, 34, 50, 101 or 152, got 20"})
    H.assert_error(function() vision.get_vgg(12) end, {"get_vgg: num_layers must be 11, 13, 16 or 19"})
    H.assert_error(function() vision.get_mobilenet(0) end, {"multiplier must be a number > 0, got 0"})
    H.assert_error(function() vision.get_squeezenet("1.2") end, {"version must be '1.0' or '1.1'"})
    H.assert_error(function() vision.mobilenet1_0(10) end, {"one table of keywords"})
    H.assert_error(function() vision.vgg11_bn{batch_norm = false} end, {"batch_norm is set by the name"})
    H.assert_error(function() vision.no_such_model() end, {"gluon.model_zoo.vision"})
  end)
  it("gives a result or a clean error for every wrong value of every entry point", function()
    local ffi = require("ffi")
    local bad = {{"nil", nil}, {"true", true}, {"string", "abc"}, {"empty table", {}}, {"list", {1, 2}},
                 {"keyword table", {zzz = 1}}, {"function", print}, {"NaN", 0 / 0}, {"inf", math.huge},
                 {"-1", -1}, {"0.5", 0.5}, {"2^62", 2 ^ 62}, {"int64 cdata", ffi.new("int64_t", 5)},
                 {"array", np.ones({2})}}
    local targets = {}
    for _, n in ipairs({"get_model", "get_resnet", "get_vgg", "get_mobilenet", "get_mobilenet_v2",
                        "get_squeezenet", "get_densenet", "pretrained_file", "alexnet", "mobilenet0_25", "vgg11_bn",
                        "HybridConcurrent", "Identity", "RELU6", "BasicBlockV1", "BottleneckV2",
                        "LinearBottleneck", "ResNetV1", "ResNetV2", "VGG", "MobileNet", "MobileNetV2",
                        "AlexNet", "SqueezeNet", "DenseNet", "Inception3"}) do
      targets[#targets + 1] = {n, vision[n]}
    end
    local internal = {}
    for _, t in ipairs(targets) do
      for pos = 1, 2 do
        for _, b in ipairs(bad) do
          local args = {}
          args[pos] = b[2]
          if pos == 2 and (t[1] == "get_resnet") then args[1] = 1 end
          local ok, err = pcall(t[2], unpack(args, 1, 2))
          if not ok and (type(err) ~= "string" or err:find("attempt to", 1, true) or err:find("bad argument", 1, true)) then
            internal[#internal + 1] = ("%s(arg %d = %s): %s"):format(t[1], pos, b[1], tostring(err))
          end
        end
      end
    end
    assert(#internal == 0, table.concat(internal, "\n"))
  end)
end)
