-- hybridize_spec: hybridized blocks (graph capture and replay, core/graph.c
-- and gluon/hybrid.lua) against eager ones on every device: every layer of
-- gluon.nn and gluon.rnn (the list is read from the modules), in train and
-- predict mode, outputs and gradients, bit for bit on the CPU; tracing once
-- per signature and again for a new one; what a hybridized forward may not
-- do (read values, write in place) and its errors; every layer exported and
-- imported (gluon.SymbolBlock) gives the inference outputs again; Lua state traced once;
-- hybridize(false); training a hybridized network step for step as eager.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local gluon = luon.gluon
local nn, rnn = gluon.nn, gluon.rnn
local hybrid = require("luon.gluon.hybrid")
local block = require("luon.gluon.block")
local core = require("luon.core")

-- A test block whose forward is f(self, ...), with children given by name.
local Custom = nn.HybridBlock:extend("Custom")
function Custom:__init(f, children)
  self._f = f
  for k, v in pairs(children or {}) do self[k] = v end
end
function Custom:forward(...) return self._f(self, ...) end

local function xs(shape, lo, hi) return np.random.uniform(lo or -1, hi or 1, shape) end
local function seq(children)
  local s = nn.HybridSequential()
  for _, c in ipairs(children) do s:add(c) end
  return s
end
local function unrolled(cell, T)
  return Custom(function(self, x) return self.cell:unroll(T, x, {layout = "NTC", merge_outputs = true}) end,
                {cell = cell})
end
local function cell_case(make, width)
  return {make = make, args = function(dev, net)
    return {xs({2, width}):copyto(dev), net:begin_state(2, {device = dev})}
  end}
end

-- One case per HybridBlock class of gluon.nn and gluon.rnn: how to make it
-- and its arguments on dev (net: the made block, for begin_state).
local function x4(shape) return function(dev) return {xs(shape):copyto(dev)} end end
local cases = {
  Dense = {make = function() return nn.Dense(5) end, args = x4({3, 4})},
  Activation = {make = function() return nn.Activation("tanh") end, args = x4({3, 4})},
  ELU = {make = function() return nn.ELU() end, args = x4({3, 4})},
  GELU = {make = function() return nn.GELU() end, args = x4({3, 4})},
  LeakyReLU = {make = function() return nn.LeakyReLU(0.1) end, args = x4({3, 4})},
  PReLU = {make = function() return nn.PReLU() end, args = x4({3, 4})},
  SELU = {make = function() return nn.SELU() end, args = x4({3, 4})},
  SiLU = {make = function() return nn.SiLU() end, args = x4({3, 4})},
  Swish = {make = function() return nn.Swish() end, args = x4({3, 4})},
  Dropout = {make = function() return nn.Dropout(0.5) end, args = x4({3, 4})},
  Flatten = {make = function() return nn.Flatten() end, args = x4({2, 3, 4})},
  Embedding = {make = function() return nn.Embedding(10, 4) end, int_input = true,
               args = function(dev) return {np.array({{1, 2}, {3, 4}, {5, 9}}):copyto(dev)} end},
  BatchNorm = {make = function() return nn.BatchNorm() end, args = x4({2, 3, 4, 4})},
  SyncBatchNorm = {make = function() return nn.SyncBatchNorm() end, args = x4({2, 3, 4, 4})},
  LayerNorm = {make = function() return nn.LayerNorm() end, args = x4({2, 3, 4})},
  GroupNorm = {make = function() return nn.GroupNorm{num_groups = 2} end, args = x4({2, 4, 3, 3})},
  InstanceNorm = {make = function() return nn.InstanceNorm() end, args = x4({2, 3, 5})},
  Conv1D = {make = function() return nn.Conv1D(4, 3) end, args = x4({2, 3, 8})},
  Conv2D = {make = function() return nn.Conv2D(4, 3) end, args = x4({2, 3, 6, 6})},
  Conv3D = {make = function() return nn.Conv3D(2, 3) end, args = x4({1, 2, 4, 4, 4})},
  Conv1DTranspose = {make = function() return nn.Conv1DTranspose(4, 3) end, args = x4({2, 3, 5})},
  Conv2DTranspose = {make = function() return nn.Conv2DTranspose(4, 3) end, args = x4({2, 3, 4, 4})},
  Conv3DTranspose = {make = function() return nn.Conv3DTranspose(2, 3) end, args = x4({1, 2, 3, 3, 3})},
  MaxPool1D = {make = function() return nn.MaxPool1D() end, args = x4({2, 3, 8})},
  MaxPool2D = {make = function() return nn.MaxPool2D() end, args = x4({2, 3, 6, 6})},
  MaxPool3D = {make = function() return nn.MaxPool3D() end, args = x4({1, 2, 4, 4, 4})},
  AvgPool1D = {make = function() return nn.AvgPool1D() end, args = x4({2, 3, 8})},
  AvgPool2D = {make = function() return nn.AvgPool2D() end, args = x4({2, 3, 6, 6})},
  AvgPool3D = {make = function() return nn.AvgPool3D() end, args = x4({1, 2, 4, 4, 4})},
  GlobalMaxPool1D = {make = function() return nn.GlobalMaxPool1D() end, args = x4({2, 3, 8})},
  GlobalMaxPool2D = {make = function() return nn.GlobalMaxPool2D() end, args = x4({2, 3, 6, 6})},
  GlobalMaxPool3D = {make = function() return nn.GlobalMaxPool3D() end, args = x4({1, 2, 4, 4, 4})},
  GlobalAvgPool1D = {make = function() return nn.GlobalAvgPool1D() end, args = x4({2, 3, 8})},
  GlobalAvgPool2D = {make = function() return nn.GlobalAvgPool2D() end, args = x4({2, 3, 6, 6})},
  GlobalAvgPool3D = {make = function() return nn.GlobalAvgPool3D() end, args = x4({1, 2, 4, 4, 4})},
  ReflectionPad2D = {make = function() return nn.ReflectionPad2D(1) end, args = x4({1, 2, 4, 4})},
  Identity = {make = function() return nn.Identity() end, args = x4({3, 4})},
  HybridLambda = {make = function() return nn.HybridLambda(function(x) return np.tanh(x) * 2 end) end,
                  args = x4({3, 4})},
  HybridSequential = {make = function() return seq({nn.Dense(6, {activation = "relu"}), nn.Dense(2)}) end,
                      args = x4({3, 4})},
  HybridConcatenate = {make = function()
    local c = nn.HybridConcatenate{axis = -1}
    c:add(nn.Dense(2))
    c:add(nn.Dense(3))
    return c
  end, args = x4({3, 4})},
  RNN = {make = function() return rnn.RNN(5) end, args = x4({3, 2, 4})},
  LSTM = {make = function() return rnn.LSTM(5, {num_layers = 2}) end, args = x4({3, 2, 4})},
  GRU = {make = function() return rnn.GRU(5, {bidirectional = true}) end, args = x4({3, 2, 4})},
  RNNCell = cell_case(function() return rnn.RNNCell(5) end, 4),
  LSTMCell = cell_case(function() return rnn.LSTMCell(5) end, 4),
  GRUCell = cell_case(function() return rnn.GRUCell(5) end, 4),
  SequentialRNNCell = cell_case(function()
    local s = rnn.SequentialRNNCell()
    s:add(rnn.LSTMCell(5))
    s:add(rnn.GRUCell(3))
    return s
  end, 4),
  DropoutCell = cell_case(function() return rnn.DropoutCell(0.5) end, 4),
  ResidualCell = cell_case(function() return rnn.ResidualCell(rnn.GRUCell(4)) end, 4),
  BidirectionalCell = {make = function()
    return unrolled(rnn.BidirectionalCell(rnn.LSTMCell(3), rnn.LSTMCell(3)), 3)
  end, args = x4({2, 3, 4})},
}
-- Classes with no forward of their own (bases) or that are not layers.
local not_layers = {HybridBlock = true, HybridRecurrentCell = true, RecurrentCell = true}

-- The arrays of a nested result, in order.
local function flatten(v, into)
  into = into or {}
  if core.is_array(v) then
    into[#into + 1] = v
  elseif type(v) == "table" then
    for _, w in ipairs(v) do flatten(w, into) end
  end
  return into
end

local function pack(...) return {n = select("#", ...), ...} end

-- One call of net on args: the results' values and, when recording, the
-- gradients of every parameter and every float input for the sum of all
-- results. The parameters are put back as they were first (running stats).
local function run(net, args, mode, saved, int_input)
  for p, v in pairs(saved) do p:set_data(v) end
  np.random.seed(7)
  local res
  if mode == "infer" then
    res = pack(net(unpack(args)))
  else
    local arrays = int_input and {} or flatten(args)
    for _, a in ipairs(arrays) do a:attach_grad() end
    autograd.record(function()
      res = pack(net(unpack(args)))
      local loss
      for _, y in ipairs(flatten(res)) do
        loss = loss and loss + (y * y):sum() or (y * y):sum()
      end
      loss:backward()
    end, mode == "train")
    local grads = {}
    for _, a in ipairs(arrays) do grads[#grads + 1] = a.grad:totable() end
    for _, p in ipairs(net:collect_params():unique()) do
      if p.grad_req ~= "null" then grads[#grads + 1] = p:grad(args[1].device):totable() end
    end
    res.grads = grads
  end
  local out = {}
  for _, y in ipairs(flatten(res)) do out[#out + 1] = y:totable() end
  return {out = out, grads = res.grads}
end

local function same(a, b, tol, what)
  assert.are.equal(#a, #b, what .. ": count")
  for k = 1, #a do
    if tol == 0 then H.assert_equal(a[k], b[k]) else H.assert_close(a[k], b[k], tol) end
  end
end

describe("hybridize", function()
  it("has a case for every HybridBlock of gluon.nn and gluon.rnn", function()
    local missing = {}
    for _, mod in ipairs({nn, rnn}) do
      for name, v in pairs(mod) do
        if type(v) == "table" and block.isinstance(v, nn.HybridBlock) and not cases[name] and not not_layers[name] then
          missing[#missing + 1] = name
        end
      end
    end
    table.sort(missing)
    assert.are.same({}, missing)
  end)

  for _, dev in ipairs(H.devices()) do
    local tol = dev.device_type == "cpu" and 0 or 1e-5
    describe("on " .. tostring(dev), function()
      local names = {}
      for name in pairs(cases) do names[#names + 1] = name end
      table.sort(names)
      for _, name in ipairs(names) do
        it(name .. ": hybridized equals eager (outputs and gradients, train and predict)", function()
          local c = cases[name]
          local net = c.make()
          net:initialize{device = dev}
          local args = c.args(dev, net)
          net(unpack(args)) -- deferred shapes
          local saved = {}
          for _, p in ipairs(net:collect_params():unique()) do saved[p] = p:data(dev):copy() end
          local modes = {"train", "predict", "infer"}
          local eager = {}
          for _, m in ipairs(modes) do eager[m] = run(net, args, m, saved, c.int_input) end
          net:hybridize()
          for _, m in ipairs(modes) do
            for pass = 1, 2 do -- the trace, then the replay
              local r = run(net, args, m, saved, c.int_input)
              same(r.out, eager[m].out, tol, name .. " " .. m .. " pass " .. pass .. " outputs")
              if m ~= "infer" then same(r.grads, eager[m].grads, tol, name .. " " .. m .. " gradients") end
            end
          end
          assert.are.equal(#modes, #hybrid.graphs(net))
          -- exported and imported without the Lua code: the inference outputs again
          local prefix = os.tmpname()
          local sym, prm = net:export(prefix)
          local flat = flatten(args)
          local names = {}
          for k = 1, #flat do names[k] = #flat == 1 and "data" or "data" .. (k - 1) end
          local sb = gluon.SymbolBlock.imports(sym, names, prm, dev)
          local got = {}
          for _, y in ipairs(flatten(pack(sb(unpack(flat))))) do got[#got + 1] = y:totable() end
          same(got, eager.infer.out, tol, name .. " exported")
          for _, f in ipairs({prefix, sym, prm}) do os.remove(f) end
        end)
      end

      it("elementwise chains run as one pass in a replay, equal to eager bit for bit", function()
        local profiler = luon.profiler
        local function calls_of(name)
          for _, r in ipairs(profiler.stats()) do
            if r.name == name then return r.calls end
          end
          return 0
        end
        -- a constant's node (0.5, 1) between the links; clip's and round's attributes;
        -- a link reading the one before twice; an intermediate that is an output
        local net = Custom(function(_, x, y)
          local t = (x + y) * 0.5 - 1
          local u = npx.relu(t * t):clip(-2, 3)
          local v = np.round(x * 10, 1) / 10
          local w = np.tanh(x)
          return u, v, w, w + 1
        end)
        local big = 300000 -- past one thread's share: the blocks go to the pool
        for _, shape in ipairs({{5, 7}, {1}, {}, {0, 3}, {big}}) do
          local x, y = xs(shape, -3, 3):copyto(dev), xs(shape, -3, 3):copyto(dev)
          local want = {}
          net:hybridize(false)
          for _, a in ipairs({net(x, y)}) do want[#want + 1] = a:totable() end
          for _, opts in ipairs({{}, {static_alloc = true}}) do
            net:hybridize(opts)
            for pass = 1, 3 do
              local got = {}
              for _, a in ipairs({net(x, y)}) do got[#got + 1] = a:totable() end
              same(got, want, tol, ("shape %s pass %d"):format(table.concat(shape, "x"), pass))
            end
          end
          if dev.device_type == "cpu" and #shape > 0 then
            profiler.reset()
            profiler.set_state("run")
            net(x, y)
            profiler.set_state("stop")
            -- add, multiply, subtract, multiply, relu, clip: one call of the last;
            -- tanh stays apart (its result is an output)
            assert.are.same({0, 0, 0, 1, 1, 1},
                            {calls_of("add") - 1, calls_of("subtract"), calls_of("relu"), calls_of("clip"),
                             calls_of("tanh"), calls_of("divide")})
            profiler.reset()
          end
        end
        -- operands a chain does not take run op by op, to the same values: a broadcast
        -- that is not one value, a transposed view, integers, float64, float16
        local cases = {
          {xs({4, 3}), xs({3})}, {xs({3, 4}):transpose(), xs({4, 3})},
          {np.arange(12):reshape(3, 4):astype("int32"), np.ones({3, 4}, {dtype = "int32"})},
          {xs({3, 4}):astype("float64"), xs({3, 4}):astype("float64")},
          {xs({3, 4}):astype("float16"), xs({3, 4}):astype("float16")},
        }
        local plain = Custom(function(_, x, y) return np.abs((x + y) * 2 - y) end)
        for k, c in ipairs(cases) do
          local x, y = c[1]:copyto(dev), c[2]:copyto(dev)
          plain:hybridize(false)
          local want = plain(x, y):totable()
          plain:hybridize{static_alloc = true}
          for pass = 1, 2 do same({plain(x, y):totable()}, {want}, tol, "case " .. k .. " pass " .. pass) end
        end
        -- luon_interrupt during (or before) a chain fails the call, as an op's does,
        -- never a result left unwritten or a planned buffer's last values
        if dev.device_type == "cpu" then
          local chain = Custom(function(_, x) return np.exp(np.tanh(x + x)) end)
          chain:hybridize{static_alloc = true}
          chain(np.ones({1000}):copyto(dev))
          local minus = (-np.ones({1000})):copyto(dev)
          core.C.luon_interrupt()
          local ok, err = pcall(chain, minus)
          core.C.luon_interrupt_clear()
          assert.is_false(ok)
          assert.matches("interrupted", tostring(err))
          H.assert_close(chain((-np.ones({3})):copyto(dev)), {0.380, 0.380, 0.380}, 1e-3)
        end
        -- longer than one chain holds (16 links): two chains
        local long = Custom(function(_, x)
          for _ = 1, 20 do x = x * 1.5 - 0.25 end
          return x
        end)
        local x = xs({64}):copyto(dev)
        local want = long(x):totable()
        long:hybridize()
        for _ = 1, 2 do same({long(x):totable()}, {want}, tol, "long chain") end
        -- recording: the links run apart, for the tape; the gradients are eager's
        net:hybridize()
        local a, b = xs({6}):copyto(dev), xs({6}):copyto(dev)
        local grads = {}
        for pass = 1, 2 do
          net:hybridize(pass == 2)
          a:attach_grad()
          autograd.record(function() return (net(a, b)):sum() end):backward()
          grads[pass] = a.grad:totable()
        end
        same({grads[2]}, {grads[1]}, tol, "gradients")
        -- exported (nodes in their chain order) and imported: the same values
        net(a, b)
        local prefix = os.tmpname()
        local sym, prm = net:export(prefix)
        local sb = gluon.SymbolBlock.imports(sym, {"data0", "data1"}, prm, dev)
        local got, exp = {}, {}
        for _, v in ipairs({sb(a, b)}) do got[#got + 1] = v:totable() end
        net:hybridize(false)
        for _, v in ipairs({net(a, b)}) do exp[#exp + 1] = v:totable() end
        same(got, exp, tol, "exported")
        for _, f in ipairs({prefix, sym, prm}) do os.remove(f) end
      end)

      it("a call with a parameter's own array as input runs eagerly, and later calls are right", function()
        local d = nn.Dense(4, {in_units = 4})
        d:initialize{device = dev}
        local x = xs({4, 4}):copyto(dev)
        local want_w, want_x = d(d.weight:data(dev)):totable(), d(x):totable()
        d:hybridize()
        H.assert_close(d(d.weight:data(dev)), want_w, tol)
        H.assert_close(d(x), want_x, tol)
        H.assert_close(d(x), want_x, tol)
      end)

      it("a layer added to a traced HybridSequential is in the next call", function()
        local net = seq({nn.Dense(4)})
        net:initialize{device = dev}
        net:hybridize()
        local x = xs({1, 3}):copyto(dev)
        H.assert_shape(net(x), {1, 4})
        local d2 = nn.Dense(2)
        d2:initialize{device = dev}
        net:add(d2)
        H.assert_shape(net(x), {1, 2})
      end)

      it("traces once per signature and again for a new shape, dtype or device", function()
        local calls = 0
        local net = Custom(function(self, x)
          calls = calls + 1
          return self.d(x) * 2
        end, {d = nn.Dense(3, {in_units = 4})})
        net:initialize{device = dev}
        net:hybridize()
        local x = xs({2, 4}):copyto(dev)
        local y1 = net(x)
        local y2 = net(x)
        assert.are.equal(1, calls)
        H.assert_equal(y2, y1:totable())
        local x5 = xs({5, 4}):copyto(dev)
        local y5 = net(x5)
        assert.are.equal(2, calls)
        H.assert_shape(y5, {5, 3})
        net:hybridize(false)
        H.assert_close(y5, net(x5):totable(), tol)
        net:hybridize()
        assert.are.same({}, hybrid.graphs(net)) -- hybridize drops the graphs
        net(x)
        net(x:astype("float64"):astype("float32"))
        assert.are.equal(4, calls) -- a new graph after hybridize(), then the same signature
        -- another device (cpu(1) from cpu(0)) is another signature
        if dev.device_type == "cpu" then
          local other = dev.device_id == 0 and npx.cpu(1) or npx.cpu(0)
          net:reset_device(other)
          local yo = net(x:copyto(other))
          assert.are.equal(5, calls)
          assert.are.equal(other, yo.device)
        end
      end)

      it("a first call that makes deferred parameters runs eagerly; an inference call then traces", function()
        local calls = 0
        local net = Custom(function(self, x)
          calls = calls + 1
          return self.d(x)
        end, {d = nn.Dense(3)})
        net:initialize{device = dev}
        net:hybridize()
        local x = xs({2, 4}):copyto(dev)
        local y1 = net(x) -- eager (makes the weights), then the trace
        assert.are.equal(2, calls)
        assert.are.equal(1, #hybrid.graphs(net))
        local y2 = net(x)
        assert.are.equal(2, calls)
        H.assert_equal(y2, y1:totable())
        -- a training call with deferred parameters only runs eagerly (its
        -- random draws are eager's); the next one traces
        local calls_t = 0
        local tnet = Custom(function(self, x)
          calls_t = calls_t + 1
          return self.d(x)
        end, {d = nn.Dense(3)})
        tnet:initialize{device = dev}
        tnet:hybridize()
        autograd.record(function() return tnet(x) end)
        assert.are.same({}, hybrid.graphs(tnet))
        autograd.record(function() return tnet(x) end)
        autograd.record(function() return tnet(x) end)
        assert.are.equal(2, calls_t)
        assert.are.equal(1, #hybrid.graphs(tnet))
      end)

      it("training a hybridized LeafNetwork gives eager's weights and predictions", function()
        local LeafNetwork = dofile(H.root .. "examples/leafnet.lua")
        local function train(hybridize)
          np.random.seed(5)
          local net = LeafNetwork()
          net:initialize{device = dev}
          if hybridize then net:hybridize{static_alloc = true} end
          local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.01, momentum = 0.9})
          local L = gluon.loss.SoftmaxCrossEntropyLoss()
          local x = np.random.uniform(0, 1, {2, 3, 40, 40}):copyto(dev)
          local y = np.array({0, 1}):copyto(dev)
          for _ = 1, 3 do
            autograd.record(function() L(net(x), y):backward() end)
            tr:step(2)
          end
          local w = {net(x):totable()}
          for _, q in ipairs(net:collect_params():unique()) do w[#w + 1] = q:data(dev):totable() end
          return w
        end
        same(train(true), train(false), tol, "LeafNetwork")
      end)

      it("a forward that reads a value is refused, naming what it did, and the runtime stays usable", function()
        local net = Custom(function(self, x)
          if x:sum():item() > 0 then return x * 2 end
          return x
        end)
        net:hybridize()
        local x = np.ones({2, 2}):copyto(dev)
        H.assert_error(function() return net(x) end,
                       {"forward read a value of an array during hybridize", "MXNet refuses this too",
                        "hybridize(false)"})
        assert.are.equal(0, tonumber(core.C.luon_graph_capturing()))
        H.assert_equal(x + 1, {{2, 2}, {2, 2}})
        net:hybridize(false)
        H.assert_equal(net(x), {{2, 2}, {2, 2}})
        -- caught inside forward: the capture still fails
        local quiet = Custom(function(_, x2)
          pcall(function() return x2:sum():item() end)
          return x2 + 1
        end)
        quiet:hybridize()
        H.assert_error(function() return quiet(x) end, {"forward read a value of an array during hybridize"})
      end)

      it("an autograd.Function is refused while recording (its backward cannot replay); predict mode replays it", function()
        local Cube = autograd.Function:extend{
          forward = function(self, x) self:save_for_backward(x) return x * x * x end,
          backward = function(self, dy) local x = self.saved_tensors[1] return dy * 3 * x * x end}
        local b = Custom(function(_, x) return Cube()(x) + 1 end)
        b:hybridize()
        local x = np.array({1, 2}):copyto(dev)
        x:attach_grad()
        H.assert_error(function() autograd.record(function() return b(x) end) end,
                       {"autograd.Function", "hybridize(false)"})
        H.assert_close(b(x), {2, 9}, 0)
        H.assert_close(b(np.array({3, 1}):copyto(dev)), {28, 2}, 0)
      end)

      it("a forward that writes into an array is refused", function()
        local inplace = Custom(function(_, x)
          local y = x * 1
          y[0] = 5
          return y
        end)
        inplace:hybridize()
        H.assert_error(function() return inplace(np.ones({2, 2}):copyto(dev)) end,
                       {"forward copied into an existing array", "item assignment", "hybridize(false)"})
        local into = Custom(function(_, x)
          local z = np.zeros({2, 2}, {device = dev})
          x:copyto(z)
          return z
        end)
        into:hybridize()
        H.assert_error(function() return into(np.ones({2, 2}):copyto(dev)) end,
                       {"forward copied into an existing array", "x:copyto(array)"})
        -- a copy to a device is an op (copyto): traced, and replayed with the new input
        local moved = Custom(function(_, x) return x:asnumpy() + 1 end)
        moved:hybridize()
        assert.equal(8, moved(np.ones({2, 2}):copyto(dev)):sum():item())
        assert.equal(12, moved((np.ones({2, 2}) * 2):copyto(dev)):sum():item())
        -- out= and in-place ops, through the C entry
        local add = core.C.luon_op_find("add")
        local outeq = Custom(function(_, x)
          local y = np.zeros({2, 2}, {device = dev})
          core.call(add, {x, x}, nil, {y})
          return y
        end)
        outeq:hybridize()
        H.assert_error(function() return outeq(np.ones({2, 2}):copyto(dev)) end, {"add with out=", "hybridize(false)"})
        local sgd = Custom(function(_, x)
          local w = x * 1
          local g = x * 1
          core.call(core.C.luon_op_find("sgd_update"), {w, g})
          return w
        end)
        sgd:hybridize()
        H.assert_error(function() return sgd(np.ones({2, 2}):copyto(dev)) end, {"in place", "hybridize(false)"})
      end)

      it("Lua state in forward is traced once, as MXNet", function()
        local net = Custom(function(self, x)
          self.count = self.count + 1
          return x + self.count
        end)
        net.count = 0
        net:hybridize()
        local x = np.zeros({2}):copyto(dev)
        H.assert_equal(net(x), {1, 1})
        H.assert_equal(net(x), {1, 1}) -- the graph holds the constant of the trace
        assert.are.equal(1, net.count)
        net:hybridize(false)
        H.assert_equal(net(x), {2, 2})
      end)

      it("nested and multi-output blocks: tables of arrays in and out, the same array twice", function()
        local net = Custom(function(self, a, list, scale)
          local h = self.d(a + list[1]) * scale
          return h, {h + list[2], a}
        end, {d = nn.Dense(3, {in_units = 2})})
        net:initialize{device = dev}
        local a, b, c = xs({2, 2}):copyto(dev), xs({2, 2}):copyto(dev), xs({2, 3}):copyto(dev)
        local e1, e2 = net(a, {b, c}, 3)
        net:hybridize()
        for _ = 1, 2 do
          local h1, h2 = net(a, {b, c}, 3)
          H.assert_close(h1, e1:totable(), tol)
          H.assert_close(h2[1], e2[1]:totable(), tol)
          H.assert_equal(h2[2], a:totable())
        end
        local f1 = net(a, {b, c}, 4) -- another number is another signature
        H.assert_close(f1, (e1 * (4 / 3)):totable(), 1e-5)
        assert.are.equal(2, #hybrid.graphs(net))
        local keyed = Custom(function(_, x, kw)
          return {sum = x + kw.bias, scaled = x * kw.scale, list = {x * 0}}
        end)
        keyed:hybridize()
        for _ = 1, 2 do
          local r = keyed(a, {bias = b, scale = 2})
          H.assert_close(r.sum, (a + b):totable(), 0)
          H.assert_close(r.scaled, (a * 2):totable(), 0)
          H.assert_close(r.list[1], (a * 0):totable(), 0)
        end
        keyed(a, {bias = b, scale = 3})
        assert.are.equal(2, #hybrid.graphs(keyed))
        local todev = Custom(function(_, x, d) return x:astype("float64") end)
        todev:hybridize()
        todev(a, dev)
        todev(a, dev)
        assert.are.equal(1, #hybrid.graphs(todev))
        H.assert_error(function() return keyed(a, {[true] = b}) end, {"Custom", "tables of them", "key true"})
        local twice = Custom(function(_, p, q) return p * q end)
        twice:hybridize()
        H.assert_close(twice(a, a), (a * a):totable(), 0)
        H.assert_close(twice(a, b), (a * b):totable(), 0)
      end)

      it("parameters changed by load_parameters or cast are seen by the graph", function()
        local net = nn.Dense(2, {in_units = 3})
        net:initialize{device = dev}
        net:hybridize()
        local x = xs({1, 3}):copyto(dev)
        net(x)
        local path = os.tmpname()
        local other = nn.Dense(2, {in_units = 3})
        other:initialize{device = dev}
        other:save_parameters(path)
        net:load_parameters(path, {device = dev})
        os.remove(path)
        H.assert_close(net(x), other(x):totable(), tol)
        net.weight:set_data(np.ones({2, 3}))
        H.assert_close(net(x), {(x:sum() + net.bias:data(dev)):totable()}, 1e-6)
      end)

      it("static_alloc on a GPU: the replay becomes one CUDA graph, fed and read through its own arrays", function()
        local gpu = dev.device_type == "gpu"
        local net = nn.HybridSequential()
        net:add(nn.Dense(16, {activation = "relu"}), nn.Dense(8, {activation = "tanh"}), nn.Dense(2))
        net:initialize{device = dev}
        local x1, x2 = xs({3, 5}):copyto(dev), xs({3, 5}):copyto(dev)
        local want1, want2 = net(x1):totable(), net(x2):totable()
        net:hybridize{static_alloc = true}
        net(x1) -- traced
        net(x1) -- planned
        local y1 = net(x1) -- captured and launched (GPU)
        local function captured() return hybrid.cuda_graphs(net)[1] == 1 end
        assert.are.equal(gpu, captured())
        local y2 = net(x2) -- new values through the staging input; y1 is not written again
        same({y1:totable(), y2:totable()}, {want1, want2}, tol, "launches")
        -- the same layers by hand, on the parameters' arrays of now
        local function by_hand(x)
          local h = x
          for k = 0, 2 do
            local d = net[k]
            h = np.dot(h, d.weight:data(dev).T) + d.bias:data(dev)
            if k == 0 then h = npx.relu(h) elseif k == 1 then h = np.tanh(h) end
          end
          return h:totable()
        end
        same({net(x2):totable()}, {by_hand(x2)}, 1e-5, "by hand")
        -- a training step (op by op, recorded) updates the weights in place: the graph reads them
        local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.5})
        autograd.record(function() (net(x1) ^ 2):sum():backward() end)
        trainer:step(1)
        local after = by_hand(x2)
        assert.is_false(H.close(after, want2, 1e-4), "the step changed nothing")
        for _ = 1, 3 do same({net(x2):totable()}, {after}, 1e-5, "after the step") end
        assert.are.equal(gpu, captured())
        -- set_data writes in place; initialize(force_reinit) gives every parameter a new
        -- array (other memory): the graph is captured again on them
        for k = 1, 4 do
          if k % 2 == 1 then
            net[0].weight:set_data(np.ones({16, 5}) * k)
          else
            net:initialize{device = dev, force_reinit = true}
          end
          same({net(x2):totable()}, {by_hand(x2)}, 1e-5, "new values " .. k)
          same({net(x1):totable()}, {by_hand(x1)}, 1e-5, "new values " .. k)
        end
        assert.are.equal(gpu, captured())
        -- random draws stay op by op (a launch would draw the same numbers again)
        local noisy = Custom(function(_, x) return x + np.random.uniform(0, 1, {3, 5}, {device = dev}) end)
        noisy:hybridize{static_alloc = true}
        local seen = {}
        for k = 1, 4 do seen[k] = noisy(x1):totable() end
        assert.are_not.equal(1, hybrid.cuda_graphs(noisy)[1])
        assert.is_false(H.close(seen[3], seen[4], 0), "two calls drew the same numbers")
        -- a round trip through the host cannot be captured: refused once, replayed op by op
        local trip = Custom(function(_, x) return (x:copyto(npx.cpu()) * 2):copyto(dev) + x end)
        trip:hybridize{static_alloc = true}
        for _ = 1, 4 do same({trip(x2):totable()}, {(x2 * 3):totable()}, tol, "round trip") end
        assert.are_not.equal(1, hybrid.cuda_graphs(trip)[1])
      end)

      it("static_alloc: a replay that does not record allocates only its outputs", function()
        local C = core.C
        local st = core.ffi.new("luon_memory_stats")
        local function allocs()
          core.check(C.luon_memory_stats_get(dev.type_id, dev.device_id, st))
          return tonumber(st.allocs)
        end
        -- intermediates read twice (an elementwise chain would keep them in one pass)
        local function chain(_, x)
          local h = np.tanh(x) * 2
          local v = h:reshape({-1}) + 1
          local w = v * v
          return np.maximum(w - h:reshape({-1}), 0) + w:mean() + v:mean(), h:sum()
        end
        local counts = {}
        for _, static in ipairs({false, true}) do
          local net = Custom(chain)
          net:hybridize{static_alloc = static}
          local x = xs({64, 64}):copyto(dev)
          local e1, e2 = chain(nil, x)
          for _ = 1, 3 do
            local y1, y2 = net(x)
            H.assert_close(y1, e1:totable(), tol)
            H.assert_close(y2, e2:totable(), tol)
          end
          local before = allocs()
          net(x)
          counts[#counts + 1] = allocs() - before
          -- recording, it leaves the planned buffers alone (the tape keeps what it saw)
          local xg = x:copy()
          xg:attach_grad()
          autograd.record(function() net(xg)[1]:sum():backward() end)
          local xe = x:copy()
          xe:attach_grad()
          autograd.record(function() chain(nil, xe)[1]:sum():backward() end)
          H.assert_close(xg.grad, xe.grad:totable(), tol)
          H.assert_close(net(x), e1:totable(), tol)
        end
        -- at most the two outputs (a 0-d result may come from the small-block path, uncounted)
        assert.is_true(counts[2] <= 2, "static_alloc replay allocated " .. counts[2])
        assert.is_true(counts[1] >= counts[2] + 3, "plain replay allocated " .. counts[1] .. ", static " .. counts[2])
        -- Dense layers (x @ W^T reads the weight where it lies: no scratch)
        local mlp = nn.HybridSequential()
        mlp:add(nn.Dense(16, {activation = "relu"}), nn.Dense(8, {activation = "tanh"}), nn.Dense(2))
        mlp:initialize{device = dev}
        mlp:hybridize{static_alloc = true}
        local x = xs({3, 5}):copyto(dev)
        for _ = 1, 3 do mlp(x) end
        local before = allocs()
        mlp(x)
        -- at most the output (small enough for the uncounted small-block path)
        assert.is_true(allocs() - before <= 1, "Dense replay allocated " .. (allocs() - before))
      end)

      it("training a hybridized network gives eager's weights", function()
        local function train(hybridize)
          np.random.seed(3)
          local net = seq({nn.Dense(8, {activation = "relu"}), nn.Dropout(0.3), nn.Dense(2)})
          net:initialize{device = dev}
          if hybridize then net:hybridize{static_alloc = true, static_shape = true} end
          local tr = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.1, momentum = 0.9})
          local loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
          local x = np.random.uniform(-1, 1, {4, 5}):copyto(dev)
          local y = np.array({0, 1, 1, 0}):copyto(dev)
          for _ = 1, 4 do
            autograd.record(function() loss_fn(net(x), y):backward() end)
            tr:step(4)
          end
          local w = {}
          for _, p in ipairs(net:collect_params():unique()) do w[#w + 1] = p:data(dev):totable() end
          return w
        end
        same(train(true), train(false), tol, "weights")
      end)
    end)
  end

  it("a replay's outputs count toward luon's collections, as an op's do (memory reused, not grown)", function()
    -- only replays here: before, nothing collected their 4 MB outputs until
    -- some other op ran, and each call took fresh memory
    local net = nn.HybridSequential()
    net:add(nn.Activation("relu"))
    net:hybridize()
    local x = np.ones({1, 1024, 1024})
    for _ = 1, 3 do net(x):wait_to_read() end
    local s0 = npx.memory_stats()
    for _ = 1, 200 do net(x):wait_to_read() end
    local s1 = npx.memory_stats()
    local fresh = (s1.allocs - s0.allocs) - (s1.cache_hits - s0.cache_hits)
    assert.is_true(fresh < 100, ("%d of 200 replays took fresh memory"):format(fresh))
  end)

  it("bad input: hybridize's options, unknown keys, a graph run with another signature", function()
    local net = nn.Dense(2)
    H.assert_error(function() net:hybridize{static_aloc = true} end, {"hybridize", "static_aloc", "static_alloc"})
    H.assert_error(function() net:hybridize(1) end, {"hybridize", "active", "true or false"})
    H.assert_error(function() net:hybridize{static_alloc = "yes"} end, {"hybridize", "static_alloc"})
    net:hybridize(true, {static_alloc = true, inline_limit = 2})
    net:initialize()
    H.assert_error(function() return net(np.ones({2, 3}), function() end) end, {"hybridized block takes arrays"})
    -- the C guard: a graph given inputs of another signature refuses
    local C = core.C
    local x = np.ones({2, 3})
    local ins = core.ffi.new("luon_tensor*[1]", x.t)
    core.check(C.luon_graph_capture_begin(1, ins))
    local y = x * 2
    local gp = core.ffi.new("luon_graph*[1]")
    local outs = core.ffi.new("luon_tensor*[1]", y.t)
    core.check(C.luon_graph_capture_end(1, outs, gp))
    local g = core.ffi.gc(gp[0], C.luon_graph_free)
    local z = np.ones({3, 3})
    ins[0] = z.t
    assert.are_not.equal(0, C.luon_graph_run(g, 1, ins, 1, outs))
    assert.truthy(core.ffi.string(C.luon_last_error()):find("captured for (2,3)", 1, true))
    local zd = np.ones({2, 3}, {dtype = "float64"})
    ins[0] = zd.t
    assert.are_not.equal(0, C.luon_graph_run(g, 1, ins, 1, outs))
    assert.truthy(core.ffi.string(C.luon_last_error()):find("float64", 1, true))
    ins[0] = x.t
    assert.are.equal(0, C.luon_graph_run(g, 1, ins, 1, outs))
    H.assert_equal(core.wrap(outs[0]), {{2, 2, 2}, {2, 2, 2}})
    assert.are_not.equal(0, C.luon_graph_capture_end(1, outs, gp)) -- not capturing
    core.check(C.luon_graph_capture_begin(1, ins))
    assert.are_not.equal(0, C.luon_graph_capture_begin(1, ins)) -- already capturing
    C.luon_graph_capture_abort()
    assert.are.equal(0, C.luon_graph_capturing())
  end)
end)
