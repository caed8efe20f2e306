-- export_spec: net:export and gluon.SymbolBlock.imports (gluon/hybrid.lua,
-- gluon/symbol_block.lua, core/graph_file.c) on every device: the tutorial's
-- LeafNetwork exported at batch 1 runs from Lua and from a C program with no
-- Lua (examples/model_run.c) to the same bits; an imported block trains
-- (gradients equal the original's, a Trainer's steps show in its outputs),
-- loads parameters by structural name, exports again; the errors of export
-- and imports. Every layer's export is checked in hybridize_spec.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd, gluon = luon.np, luon.npx, luon.autograd, luon.gluon
local nn = gluon.nn

local LeafNetwork = dofile(H.root .. "examples/leafnet.lua")

local function tmp_prefix()
  local p = os.tmpname()
  os.remove(p)
  return p
end

local function cleanup(prefix)
  for _, f in ipairs({prefix .. "-symbol.json", prefix .. "-0000.safetensors", prefix .. "-0003.safetensors",
                      prefix .. ".npy", prefix .. "-out.npy", prefix .. ".params"}) do os.remove(f) end
end

local function mlp(dev)
  local net = nn.HybridSequential()
  net:add(nn.Dense(8, {activation = "relu"}), nn.Dense(3))
  net:initialize{device = dev}
  return net
end

describe("export and SymbolBlock.imports", function()
  for _, dev in ipairs(H.devices()) do
    local tol = dev.device_type == "cpu" and 0 or 1e-5
    local function same(a, b, what)
      local ok, err = pcall(function()
        if tol == 0 then H.assert_equal(a, b:totable()) else H.assert_close(a, b:totable(), tol) end
      end)
      if not ok then error(what .. ": " .. tostring(err), 0) end
    end

    describe("on " .. tostring(dev), function()
      it("the LeafNetwork at batch 1 runs imported and from C without Lua, to the same values", function()
        np.random.seed(3)
        local net = LeafNetwork()
        net:initialize{device = dev}
        net:hybridize{static_alloc = true}
        local x = np.random.uniform(0, 1, {1, 3, 128, 128}):copyto(dev)
        local want = net(x)
        local prefix = tmp_prefix()
        local sym, prm = net:export(prefix)
        assert.are.equal(prefix .. "-symbol.json", sym)
        assert.are.equal(prefix .. "-0000.safetensors", prm)
        local text = H.read_file(sym)
        assert.truthy(text:find('"conv1.0.weight"', 1, true), "parameters by structural name")
        assert.truthy(text:find('"format":%s*"luon%-graph"'))
        local sb = gluon.SymbolBlock.imports(sym, "data", prm, dev)
        same(want:totable(), sb(x), "imported")
        same(want:totable(), sb(x), "imported, replayed")
        local names = sb:collect_params():keys()
        assert.are.same(net:collect_params():keys(), names)
        if dev.device_type == "cpu" then
          npx.save(prefix .. ".npy", x:copyto(npx.cpu(0)))
          -- the same thread count: the batch-1 conv+pool splits rows among the threads
          local out = H.sh(("LUON_NUM_THREADS=%d %s %s %s %s %s 2>&1"):format(npx.num_threads(),
                           H.quote((H.luon_exe():gsub("luon$", "examples/model_run"))),
                           H.quote(sym), H.quote(prm), H.quote(prefix .. ".npy"), H.quote(prefix .. "-out.npy")))
          assert.are.equal("", out)
          same(want:totable(), npx.load(prefix .. "-out.npy"), "from C")
        end
        cleanup(prefix)
      end)

      it("trains: gradients equal the original's, and a Trainer's steps show in the outputs", function()
        np.random.seed(5)
        local net = mlp(dev)
        net:hybridize()
        local x = np.random.uniform(-1, 1, {4, 5}):copyto(dev)
        net(x)
        local prefix = tmp_prefix()
        local sym, prm = net:export(prefix)
        local sb = gluon.SymbolBlock.imports(sym, {"data"}, prm, dev)
        local function grads(b)
          autograd.record(function() return (b(x) * b(x)):sum() end):backward()
          local g = {}
          for name, p in b:collect_params():items() do g[name] = p:grad(dev):totable() end
          return g
        end
        local gn, gs = grads(net), grads(sb)
        for name, g in pairs(gn) do
          if tol == 0 then H.assert_equal(gs[name], g) else H.assert_close(gs[name], g, tol) end
        end
        local before = sb(x):totable()
        local trainer = gluon.Trainer(sb:collect_params(), "sgd", {learning_rate = 0.5})
        grads(sb)
        trainer:step(1)
        assert.is_false(H.close(sb(x):totable(), before, 1e-6))
        -- the stepped parameters give the same outputs in the original network
        for name, p in net:collect_params():items() do p:set_data(sb:collect_params()[name]:data(dev)) end
        same(net(x):totable(), sb(x), "after a step")
        cleanup(prefix)
      end)

      it("an inference graph with batch norms fused into convolutions trains as the blocks apart", function()
        np.random.seed(6)
        local net = nn.HybridSequential()
        net:add(nn.Conv2D{channels = 16, kernel_size = 3, activation = "relu"}, nn.MaxPool2D{pool_size = 2},
                nn.BatchNorm(), nn.Conv2D{channels = 16, kernel_size = 3}, nn.BatchNorm(), nn.Activation("relu"),
                nn.Dense(2))
        net:initialize{device = dev}
        local x = np.random.uniform(-1, 1, {4, 3, 14, 14}):copyto(dev)
        net(x) -- deferred shapes
        for name, p in net:collect_params():items() do
          if name:match("running_var$") then p:set_data(np.random.uniform(0.5, 1.5, p.shape):copyto(dev)) end
          if name:match("running_mean$") then p:set_data(np.random.uniform(-0.5, 0.5, p.shape):copyto(dev)) end
        end
        net:hybridize{static_alloc = true}
        local want = net(x)
        local prefix = tmp_prefix()
        local sym, prm = net:export(prefix)
        if dev.device_type == "cpu" then
          local text = H.read_file(sym)
          assert.truthy(text:find('"conv2d_bn"', 1, true), "conv2d_bn in the graph")
          assert.truthy(text:find('"conv2d_maxpool"', 1, true), "conv2d_maxpool in the graph")
        end
        local sb = gluon.SymbolBlock.imports(sym, "data", prm, dev)
        same(want:totable(), sb(x), "imported")
        local function grads(b, train)
          autograd.record(function() return (b(x) * b(x)):sum() end, train):backward()
          local g = {}
          for name, p in b:collect_params():items() do
            if p.grad_req ~= "null" then g[name] = p:grad(dev):totable() end
          end
          return g
        end
        -- the exported graph's batch norms use their running statistics,
        -- as the blocks do in predict mode
        local gn, gs = grads(net, {train_mode = false}), grads(sb)
        for name, g in pairs(gn) do
          if tol == 0 then H.assert_equal(gs[name], g) else H.assert_close(gs[name], g, tol) end
        end
        same(want:totable(), sb(x), "imported, after the recorded calls")
        cleanup(prefix)
      end)

      it("loads parameters by name, exports again, and hybridizes inside a parent", function()
        np.random.seed(6)
        local net = mlp(dev)
        net:hybridize()
        local x = np.random.uniform(-1, 1, {2, 5}):copyto(dev)
        net(x)
        local prefix = tmp_prefix()
        local sym, prm = net:export(prefix)
        local sb = gluon.SymbolBlock.imports(sym, "data", prm, dev)
        for _, p in ipairs(net:collect_params():unique()) do p:set_data(p:data(dev) * 2) end
        net:save_parameters(prefix .. ".params")
        sb:load_parameters(prefix .. ".params", {device = dev})
        same(net(x):totable(), sb(x), "after load_parameters")
        local sym3, prm3 = sb:export(prefix, 3)
        assert.are.equal(prefix .. "-0003.safetensors", prm3)
        local again = gluon.SymbolBlock.imports(sym3, "data", prm3, dev)
        same(net(x):totable(), again(x), "exported again")
        local parent = nn.HybridSequential()
        parent:add(again, nn.Activation("tanh"))
        parent:hybridize()
        local want = np.tanh(net(x)):totable()
        same(want, parent(x), "traced")
        same(want, parent(x), "replayed")
        cleanup(prefix)
      end)

      it("exports the latest inference call's graph, keeps underscored names and running statistics' grad_req", function()
        np.random.seed(8)
        local Net = nn.HybridBlock:extend("UnderscoreNet")
        function Net:__init()
          self.body = nn.Dense(4, {in_units = 3})
          self._head = nn.Dense(2, {in_units = 4})
          self.bn = nn.BatchNorm({in_channels = 2})
        end
        function Net:forward(x) return self.bn(self._head(self.body(x))) end
        local net = Net()
        net:initialize{device = dev}
        net:hybridize()
        local x1, x8 = np.ones({1, 3}):copyto(dev), np.ones({8, 3}):copyto(dev)
        net(x1); net(x8)
        local want = net(x1)
        local other = nn.Dense(5) -- a new block elsewhere leaves this one's graphs alone
        local prefix = tmp_prefix()
        local sym, prm = net:export(prefix, 123456)
        assert.truthy(H.read_file(sym):find('"shape":%s*%[1, 3%]'), "the batch-1 graph")
        local sb = gluon.SymbolBlock.imports(sym, "data", prm, dev)
        same(want:totable(), sb(x1), "imported")
        local ps = sb:collect_params()
        assert.truthy(ps["_head.weight"] and ps["_head.bias"], "the _head parameters")
        assert.are.equal("null", ps["bn.running_mean"].grad_req)
        assert.are.equal("write", ps["bn.gamma"].grad_req)
        local trainer = gluon.Trainer(ps, "sgd", {learning_rate = 0.1})
        autograd.record(function() return sb(x1):sum() end):backward()
        trainer:step(1) -- running statistics take no gradient: no "not updated" error
        -- shared parameters are the ones the graph reads
        local twin = gluon.SymbolBlock.imports(sym, "data", prm, dev)
        twin:share_parameters(sb:collect_params())
        same(sb(x1):totable(), twin(x1), "shared")
        assert.truthy(other)
        os.remove(prefix .. "-123456.safetensors")
        cleanup(prefix)
      end)

      it("names what is wrong", function()
        local net = mlp(dev)
        local x = np.random.uniform(-1, 1, {2, 5}):copyto(dev)
        local prefix = tmp_prefix()
        H.assert_error(function() net:export(prefix) end, {"no inference graph to export", "not hybridized"})
        net:hybridize()
        H.assert_error(function() net:export(prefix) end, {"has not run for inference"})
        autograd.record(function() return net(x) end)
        autograd.record(function() return net(x) end)
        H.assert_error(function() net:export(prefix) end, {"has not run for inference (outside autograd.record)"})
        net(x)
        H.assert_error(function() net:export(prefix, -1) end, {"epoch must be a whole number", "-1"})
        H.assert_error(function() net:export(7) end, {"path must be a file name prefix"})
        local sym, prm = net:export(prefix)
        H.assert_error(function() gluon.SymbolBlock.imports(sym, "x", prm, dev) end,
                       {"input_names {'x'} do not match the graph's inputs {'data'}"})
        H.assert_error(function() gluon.SymbolBlock.imports(sym, {"data", "y"}, prm, dev) end, {"{'data'}"})
        H.assert_error(function() gluon.SymbolBlock.imports(sym, 3, prm, dev) end, {"input_names must be"})
        H.assert_error(function() gluon.SymbolBlock.imports(sym, "data", nil, dev) end, {"no parameter file"})
        H.assert_error(function() gluon.SymbolBlock.imports(prefix .. "-none.json", "data", prm, dev) end,
                       {"-none.json"})
        H.assert_error(function() gluon.SymbolBlock.imports(sym, "data", prm, {dev, dev}) end, {"one device"})
        H.assert_error(function() gluon.SymbolBlock() end, {"SymbolBlock.imports"})
        H.write_file(prefix .. "-bad.json", H.read_file(sym):gsub('"linear"', '"linear_nope"'))
        H.assert_error(function() gluon.SymbolBlock.imports(prefix .. "-bad.json", "data", prm, dev) end,
                       {"no op is named \"linear_nope\"", "-bad.json"})
        os.remove(prefix .. "-bad.json")
        local sb = gluon.SymbolBlock.imports(sym, "data", prm, dev)
        H.assert_error(function() sb(np.zeros({3, 5}):copyto(dev)) end, {"has shape (3,5)", "(2,5)"})
        H.assert_error(function() sb(x, x) end, {"takes 1 inputs {'data'}, got 2"})
        same(net(x):totable(), sb(x), "usable after the errors")
        cleanup(prefix)
      end)
    end)
  end
end)
