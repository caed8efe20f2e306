-- onnx_spec: luon.onnx.export_model (lua/luon/onnx.lua, core/onnx.c) on
-- every device: the LeafNetwork, resnet18_v1, an MLP and a network of
-- every mapped op export to models that ONNX's own checker and strict shape
-- inference accept (build/tests/onnx_check, built where Debian's
-- libonnx-dev is), with the ONNX ops, attributes, initializers and names
-- luon's ops mean; from a block, a SymbolBlock or the files of net:export
-- alike; what cannot be exported is refused by name and writes nothing.
-- Where LUON_ORT_PY names a Python with onnxruntime, ONNX Runtime runs the
-- exported models to luon's outputs (scripts/bench latency does the same).
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd, gluon = luon.np, luon.npx, luon.autograd, luon.gluon
local nn = gluon.nn

local LeafNetwork = dofile(H.root .. "examples/leafnet.lua")
local checker = (H.luon_exe():gsub("luon$", "tests/onnx_check"))
local have_checker = H.exists(checker)
local ort_py = os.getenv("LUON_ORT_PY")
local have_ort = ort_py and select(2, H.sh(H.quote(ort_py) .. " -c 'import onnxruntime'")) == 0

local function tmp(ext)
  local p = os.tmpname()
  os.remove(p)
  return p .. ext
end

-- onnx_check --dump's report: ops (in order), nodes (lines), inits by name
local function check(path)
  local out, status = H.sh(("%s --dump %s"):format(H.quote(checker), H.quote(path)))
  assert(status == 0, "onnx_check refused " .. path .. ": " .. out)
  local r = {ops = {}, nodes = {}, inits = {}, inputs = {}, outputs = {}}
  for line in out:gmatch("[^\n]+") do
    local kind, rest = line:match("^(%S+) (.*)$")
    if kind == "ok" then
      for op in rest:gmatch("%S+") do r.ops[#r.ops + 1] = op end
    elseif kind == "node" then
      r.nodes[#r.nodes + 1] = rest
    elseif kind == "init" then
      local name, dt, dims, sum = rest:match("^(%S+) (%d+) %((.-)%) (%S+)$")
      r.inits[name] = {dtype = tonumber(dt), dims = dims, sum = tonumber(sum)}
    elseif kind == "input" then
      r.inputs[#r.inputs + 1] = rest
    elseif kind == "output" then
      r.outputs[#r.outputs + 1] = rest
    end
  end
  return r
end

-- the node line of op_type k-th (1-based) in the report
local function node_of(r, op, k)
  k = k or 1
  for _, line in ipairs(r.nodes) do
    if line:match("^(%S+)") == op then
      k = k - 1
      if k == 0 then return line end
    end
  end
  error("no " .. op .. " node in the model")
end

-- ONNX Runtime's outputs of model on x (host arrays), as tables
local function ort_run(model, x)
  local xin, yout = tmp(".npy"), tmp(".npy")
  npx.save(xin, x:copyto(npx.cpu(0)))
  local script = ("import numpy as np, onnxruntime as ort\n" ..
                  "s = ort.InferenceSession(%q, providers=['CPUExecutionProvider'])\n" ..
                  "np.save(%q, s.run(None, {s.get_inputs()[0].name: np.load(%q)})[0])\n"):format(model, yout, xin)
  local out, status = H.sh(H.quote(ort_py) .. " -c " .. H.quote(script))
  assert(status == 0, out)
  local y = npx.load(yout)
  os.remove(xin)
  os.remove(yout)
  return y:totable()
end

-- block hybridized, run on x and exported: its output, the model's path
-- and onnx_check's report
local function export_run(b, x)
  b:hybridize()
  local want = b(x)
  local path = tmp(".onnx")
  luon.onnx.export_model(b, nil, nil, nil, path)
  return want, path, check(path)
end

-- every op core/onnx.c maps, in one network
local OpsNet = nn.HybridBlock:extend("OpsNet")
function OpsNet:__init()
  self.c1 = nn.Conv2D{channels = 8, kernel_size = 3, strides = 2, padding = 1, use_bias = false}
  self.c2 = nn.Conv2D{channels = 8, kernel_size = 3, padding = 2, dilation = 2, groups = 2, activation = "relu"}
  self.bn = nn.BatchNorm()
  self.ap = nn.AvgPool2D{pool_size = 3, strides = 2, padding = 1, count_include_pad = false}
  self.mp = nn.MaxPool2D{pool_size = 3, strides = 2, ceil_mode = true}
  self.gp = nn.GlobalMaxPool2D()
  self.ga = nn.GlobalAvgPool2D()
  self.d = nn.Dense(6)
  self.lrelu = nn.LeakyReLU(0.1)
  self.elu = nn.ELU(0.7)
end
function OpsNet:forward(x)
  local b = self.bn(self.c2(self.c1(x)))
  local g = np.concatenate({self.gp(self.ap(b)), self.ga(self.mp(b))}, 1):reshape(x.shape[1], -1)
  local h = self.d(g)
  local t = npx.sigmoid(h) * 2 + np.tanh(h) - self.lrelu(h) / 3
  local u = self.elu(t):transpose({1, 0}):transpose({1, 0})
  local s = npx.softmax(u, {axis = -1}) + npx.log_softmax(u) + np.exp(u * 0.1) +
            npx.activation(u, {act_type = "softrelu"})
  return np.maximum(s, h), s:astype("float64")
end

describe("onnx.export_model", function()
  if not have_checker then
    pending("build/tests/onnx_check is not built (Debian's libonnx-dev missing)")
    return
  end
  for _, dev in ipairs(H.devices()) do
    describe("on " .. tostring(dev), function()
      it("the LeafNetwork: Conv, Relu, MaxPool and BatchNormalization per block, Gemm with transB, its " ..
         "parameters by structural name", function()
        np.random.seed(2)
        local net = LeafNetwork()
        net:initialize{device = dev}
        net:hybridize{static_alloc = true}
        local x = np.random.uniform(0, 1, {1, 3, 128, 128}):copyto(dev)
        local want = net(x)
        local path = tmp(".onnx")
        assert.are.equal(path, luon.onnx.export_model(net, nil, {{1, 3, 128, 128}}, "float32", path))
        local r = check(path)
        assert.are.same({"Conv", "Relu", "MaxPool", "BatchNormalization", "Conv", "Relu", "MaxPool",
                         "BatchNormalization", "Conv", "Relu", "MaxPool", "BatchNormalization", "Reshape", "Gemm",
                         "Relu", "Gemm", "Relu", "Gemm", "Identity"}, r.ops)
        assert.truthy(node_of(r, "Conv"):find("data conv1.0.weight conv1.0.bias -> ", 1, true))
        assert.truthy(node_of(r, "Conv"):find("strides=1,1 pads=0,0,0,0 dilations=1,1 group=1", 1, true))
        assert.truthy(node_of(r, "MaxPool"):find("kernel_shape=4,4 strides=2,2 pads=0,0,0,0 ceil_mode=0", 1, true))
        assert.truthy(node_of(r, "Gemm", 3):find("dense3%.weight dense3%.bias %-> %S+ transB=1$"))
        assert.truthy(node_of(r, "BatchNormalization", 3):find("conv3%.2%.running_var %-> %S+ epsilon=1e%-05$"))
        for name, p in net:collect_params():items() do
          local init = r.inits[name]
          assert.truthy(init, name)
          assert.are.equal(table.concat(p.shape, ","), init.dims)
          assert.is_true(math.abs(init.sum - p:data(dev):sum():item()) <= 1e-3 * (1 + math.abs(init.sum)), name)
        end
        assert.are.same({"data"}, r.inputs)
        assert.are.same({"output"}, r.outputs)
        if have_ort then H.assert_close(ort_run(path, x), want:totable(), 1e-5) end
        os.remove(path)
      end)

      it("every mapped op, with its attributes; two outputs, one cast", function()
        np.random.seed(1)
        local net = OpsNet()
        net:initialize{device = dev}
        local x = np.random.uniform(-1, 1, {2, 3, 17, 19}):copyto(dev)
        for _ = 1, 2 do autograd.record(function() return net(x) end) end -- the batch norm's statistics move
        net:hybridize()
        local want = net(x)
        local path = tmp(".onnx")
        luon.onnx.export_model(net, nil, {onnx_file_path = path})
        local r = check(path)
        -- in the replay's order: an elementwise chain's nodes run together (sigmoid, *2, + tanh, ...)
        assert.are.same({"Conv", "Conv", "Relu", "BatchNormalization", "AveragePool", "GlobalMaxPool", "MaxPool",
                         "GlobalAveragePool", "Concat", "Reshape", "Gemm", "Sigmoid", "Mul", "Tanh", "Add",
                         "LeakyRelu", "Div", "Sub", "Elu", "Transpose", "Transpose", "Softmax", "LogSoftmax", "Add",
                         "Softplus", "Mul", "Exp", "Add", "Add", "Max", "Cast", "Identity", "Identity"}, r.ops)
        assert.truthy(node_of(r, "Conv", 1):find("data c1%.weight %-> %S+ strides=2,2 pads=1,1,1,1 dilations=1,1 group=1$"))
        assert.truthy(node_of(r, "Conv", 2):find("strides=1,1 pads=2,2,2,2 dilations=2,2 group=2", 1, true))
        assert.truthy(node_of(r, "AveragePool"):find("pads=1,1,1,1 ceil_mode=0 count_include_pad=0", 1, true))
        assert.truthy(node_of(r, "MaxPool"):find("kernel_shape=3,3 strides=2,2 pads=0,0,0,0 ceil_mode=1", 1, true))
        assert.truthy(node_of(r, "LeakyRelu"):find("alpha=0.1", 1, true))
        assert.truthy(node_of(r, "Elu"):find("alpha=0.7", 1, true))
        assert.truthy(node_of(r, "Softmax"):find("axis=-1", 1, true))
        assert.truthy(node_of(r, "Concat"):find("axis=1", 1, true))
        assert.truthy(node_of(r, "Transpose"):find("perm=1,0", 1, true))
        assert.truthy(node_of(r, "Cast"):find("to=11", 1, true))
        assert.are.same({"output0", "output1"}, r.outputs)
        assert.are.equal(8, r.inits["bn.gamma"].sum) -- the running statistics as they are now
        assert.is_true(math.abs(r.inits["bn.running_var"].sum - net.bn.running_var:data(dev):sum():item()) < 1e-4)
        if have_ort then H.assert_close(ort_run(path, x), want:totable(), 1e-5) end
        os.remove(path)
      end)

      it("resnet18_v1: conv2d_bn as Conv and BatchNormalization, residual Add, global pooling", function()
        np.random.seed(4)
        local net = gluon.model_zoo.vision.resnet18_v1()
        net:initialize{device = dev}
        net:hybridize()
        local x = np.random.uniform(0, 1, {1, 3, 32, 32}):copyto(dev)
        local want = net(x)
        local path = tmp(".onnx")
        luon.onnx.export_model(net, nil, nil, nil, path)
        local r = check(path)
        local count = {}
        for _, op in ipairs(r.ops) do count[op] = (count[op] or 0) + 1 end
        assert.are.same({Conv = 20, BatchNormalization = 20, Relu = 17, Add = 8, MaxPool = 1, GlobalAveragePool = 1,
                         Reshape = 1, Gemm = 1, Identity = 1}, count)
        if have_ort then H.assert_close(ort_run(path, x), want:totable(), 1e-4) end
        os.remove(path)
      end)

      it("of a block traced for several input shapes, the graph in_shapes names", function()
        np.random.seed(8)
        local net = nn.HybridSequential()
        net:add(nn.Dense(3))
        net:initialize{device = dev}
        net:hybridize()
        local x2, x5 = np.ones({2, 4}):copyto(dev), np.ones({5, 4}):copyto(dev)
        net(x2)
        net(x5)
        local a, b, c = tmp(".onnx"), tmp(".onnx"), tmp(".onnx")
        luon.onnx.export_model(net, nil, {{2, 4}}, nil, a)
        luon.onnx.export_model(net, nil, {{5, 4}}, nil, b)
        luon.onnx.export_model(net, nil, nil, nil, c) -- the latest
        assert.truthy(H.read_file(a) ~= H.read_file(b))
        assert.are.equal(H.read_file(b), H.read_file(c))
        if have_ort then H.assert_close(ort_run(a, x2), net(x2):totable(), 1e-6) end
        for _, f in ipairs({a, b, c}) do os.remove(f) end
      end)

      it("from the files of net:export and from a SymbolBlock, the same model", function()
        np.random.seed(6)
        local net = nn.HybridSequential()
        net:add(nn.Dense(8, {activation = "relu"}), nn.Dense(3, {activation = "tanh"}))
        net:initialize{device = dev}
        net:hybridize()
        local x = np.random.uniform(-1, 1, {4, 5}):copyto(dev)
        net(x)
        local prefix = tmp("")
        local sym, prm = net:export(prefix)
        local a, b, c = tmp(".onnx"), tmp(".onnx"), tmp(".onnx")
        luon.onnx.export_model(net, nil, {{4, 5}}, {"float32"}, a)
        luon.onnx.export_model(sym, prm, nil, nil, b)
        luon.onnx.export_model(gluon.SymbolBlock.imports(sym, "data", prm, dev), nil, nil, nil, c)
        assert.are.same({"Gemm", "Relu", "Gemm", "Tanh", "Identity"}, check(a).ops)
        assert.are.equal(H.read_file(a), H.read_file(b))
        assert.are.equal(H.read_file(a), H.read_file(c))
        for _, f in ipairs({a, b, c, sym, prm}) do os.remove(f) end
      end)
    end)
  end

  it("names: a parameter named as the input or an output keeps its name, the others step aside", function()
    local B = nn.HybridBlock:extend("Named")
    function B:__init()
      self.data = gluon.Parameter("data", {shape = {2, 3}, init = luon.init.Constant(2)})
      self.output = gluon.Parameter("output", {shape = {2, 3}, init = luon.init.Constant(3)})
      self._v2 = gluon.Parameter("_v2", {shape = {2, 3}, init = luon.init.Constant(5)})
    end
    function B:forward(v) return v * self.data:data() + self.output:data() - self._v2:data() end
    local b = B()
    b:initialize()
    local x = np.random.uniform(-1, 1, {2, 3})
    local want, path, r = export_run(b, x)
    assert.are.same({"data_1"}, r.inputs)
    assert.are.same({"output_1"}, r.outputs)
    assert.are.equal(12, r.inits.data.sum)
    assert.are.equal(18, r.inits.output.sum)
    assert.are.equal(30, r.inits._v2.sum)
    if have_ort then H.assert_close(ort_run(path, x), want:totable(), 1e-6) end
    os.remove(path)
  end)

  it("negative, abs, square, sqrt, log, minimum, power, clip (ReLU6), transposes by negative axes", function()
    local B = nn.HybridBlock:extend("More")
    function B:__init() self.d = nn.Dense(6) end
    function B:forward(v)
      local h = self.d(v)
      local a = np.sqrt(np.abs(h) + 1) - np.log(np.square(h) + 1) + np.minimum(-h, h) + np.power(np.abs(h), h * 0.5)
      return np.clip(a, 0, 6):transpose({-1, 0}) + np.clip(a, -0.25, nil):transpose({1, -2})
    end
    local b = B()
    b:initialize()
    local x = np.random.uniform(-2, 2, {3, 5})
    local want, path, r = export_run(b, x)
    for _, op in ipairs({"Abs", "Sqrt", "Log", "Neg", "Min", "Pow", "Clip"}) do node_of(r, op) end
    assert.truthy(node_of(r, "Transpose", 1):find("perm=1,0$"))
    assert.truthy(node_of(r, "Clip", 2):find("^Clip %S+ %S+ %- %->"), "no upper bound: an empty input")
    if have_ort then H.assert_close(ort_run(path, x), want:totable(), 1e-5) end
    os.remove(path)
  end)

  it("a small sequence model: Embedding, LayerNorm, GELU, SELU, reductions, expand_dims and squeeze", function()
    local B = nn.HybridBlock:extend("Seq")
    function B:__init()
      self.emb = nn.Embedding(11, 8)
      self.ln = nn.LayerNorm()
      self.d = nn.Dense(5, {flatten = false})
    end
    function B:forward(tokens)
      local h = self.ln(self.emb(tokens))                            -- (N, T, 8)
      local g = npx.leaky_relu(self.d(h), {act_type = "gelu"})        -- (N, T, 5)
      local m = g:mean(1) + g:sum(1) * 0.1 + g:max(1) - g:min(1)     -- (N, 5)
      local e = np.expand_dims(m, 1):squeeze(1)
      return npx.leaky_relu(e, {act_type = "selu"})
    end
    local b = B()
    b:initialize()
    -- float indices as MXNet feeds them, with some out of range: clipped as luon's take clips
    local tokens = np.array({{0, 3, 10, 12}, {-2, 5, 5, 1}})
    local want, path, r = export_run(b, tokens)
    for _, op in ipairs({"Cast", "Clip", "Gather", "ReduceMean", "Erf", "ReduceSum", "ReduceMax", "ReduceMin",
                         "Unsqueeze", "Squeeze", "Selu"}) do node_of(r, op) end
    if have_ort then H.assert_close(ort_run(path, tokens), want:totable(), 1e-5) end
    os.remove(path)
  end)

  describe("refuses, naming why, and writes nothing", function()
    local function net_of(forward)
      local B = nn.HybridBlock:extend("B")
      function B:__init() self.d = nn.Dense(3) end
      B.forward = forward
      local b = B()
      b:initialize()
      return b
    end
    local x = np.ones({2, 4})

    it("an op with no ONNX mapping, leaving the file there before", function()
      local b = net_of(function(self, v) return np.sort(self.d(v), -1) end)
      b:hybridize()
      b(x)
      local path = tmp(".onnx")
      H.write_file(path, "old")
      H.assert_error(function() luon.onnx.export_model(b, nil, nil, nil, path) end,
                     {"onnx export: node 2 (sort)", "no ONNX mapping", "conv2d_maxpool"})
      assert.are.equal("old", H.read_file(path))
      os.remove(path)
    end)

    it("integer division, and elementwise inputs of two dtypes", function()
      local path = tmp(".onnx")
      local b = net_of(function(self, v) return (v:astype("int32") / v:astype("int32")) end)
      b:hybridize()
      b(x)
      H.assert_error(function() luon.onnx.export_model(b, nil, nil, nil, path) end,
                     {"(divide)", "integer inputs", "astype"})
      local c = net_of(function(self, v) return v + v:astype("float64") end)
      c:hybridize()
      c(x)
      H.assert_error(function() luon.onnx.export_model(c, nil, nil, nil, path) end,
                     {"(add)", "float32 and float64", "one dtype"})
      local u = net_of(function(self, v) return v:astype("uint8") * v:astype("uint8") end)
      u:hybridize()
      u(x)
      H.assert_error(function() luon.onnx.export_model(u, nil, nil, nil, path) end,
                     {"(multiply)", "uint8 inputs", "opset 13"})
      assert.is_false(H.exists(path))
    end)

    it("ceil_mode where ONNX's last window differs from luon's", function()
      local b = net_of(function(self, v)
        return npx.pooling(v:reshape(1, 1, 2, 4), {kernel = {2, 2}, stride = {2, 2}, pad = {1, 1},
                                                   pool_type = "max", pooling_convention = "full"})
      end)
      b:hybridize()
      b(x)
      H.assert_error(function() luon.onnx.export_model(b, nil, nil, nil, tmp(".onnx")) end,
                     {"(max_pool2d)", "ceil_mode with padding"})
    end)

    it("a block never hybridized or never run, and a bad sym or params", function()
      local b = net_of(function(self, v) return self.d(v) end)
      H.assert_error(function() luon.onnx.export_model(b) end, {"onnx.export_model", "not hybridized"})
      b:hybridize()
      H.assert_error(function() luon.onnx.export_model(b) end, {"has not run for inference"})
      H.assert_error(function() luon.onnx.export_model(42) end, {"sym must be a hybridized block", "42"})
      b(x)
      H.assert_error(function() luon.onnx.export_model(b, "w.safetensors") end, {"params must be nil"})
      H.assert_error(function() luon.onnx.export_model("/nonexistent/x-symbol.json") end, {"/nonexistent/x-symbol.json"})
    end)

    it("in_shapes or in_types other than the traced graph's, dynamic shapes, a bad file name", function()
      local b = net_of(function(self, v) return self.d(v) end)
      b:hybridize()
      b(x)
      H.assert_error(function() luon.onnx.export_model(b, nil, {{1, 4}}) end,
                     {"none of the block's 1 inference graphs", "in_shapes[1] is (1, 4)", "traced for (2, 4)"})
      H.assert_error(function() luon.onnx.export_model(b, nil, {{2, 4}, {2, 4}}) end, {"2 shapes", "1 inputs"})
      H.assert_error(function() luon.onnx.export_model(b, nil, nil, "float64") end,
                     {"in_types[1] is float64", "is float32"})
      H.assert_error(function() luon.onnx.export_model(b, nil, {dynamic = true}) end, {"dynamic shapes"})
      H.assert_error(function() luon.onnx.export_model(b, nil, {onnx_file = "a.onnx"}) end, {"onnx_file"})
      H.assert_error(function() luon.onnx.export_model(b, nil, nil, nil, "/nonexistent-dir/m.onnx") end,
                     {"/nonexistent-dir/m.onnx"})
      H.assert_error(function() luon.onnx.export_model(b, nil, nil, nil, 7) end, {"onnx_file_path must be a file name"})
      H.assert_error(function() luon.onnx.export_model(b, nil, {in_types = "float32"}, nil, "m.onnx") end,
                     {"either as a table of keywords or positionally"})
    end)
  end)
end)
