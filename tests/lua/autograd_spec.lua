-- autograd_spec: the recording and training scopes (restored after errors),
-- attach_grad with 'write' and 'add', head gradients, retain_graph,
-- detach, integer inputs, the errors of misuse (backward outside a
-- recording, through an op without a gradient), and gradients staying on
-- their array's device.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon
local autograd = luon.autograd
local core = require("luon.core")

local function F(t, dev) return np.array(t, {dtype = "float64", device = dev}) end

describe("autograd scopes", function()
  it("start off: not recording, not training", function()
    assert.is_false(autograd.is_recording())
    assert.is_false(autograd.is_training())
  end)

  it("record turns recording and training on inside, off after, and returns fn's results", function()
    local a, b = autograd.record(function()
      assert.is_true(autograd.is_recording())
      assert.is_true(autograd.is_training())
      return 1, 2
    end)
    assert.same({1, 2}, {a, b})
    assert.is_false(autograd.is_recording())
    assert.is_false(autograd.is_training())
  end)

  it("record(fn, false) records in predict mode", function()
    autograd.record(function()
      assert.is_true(autograd.is_recording())
      assert.is_false(autograd.is_training())
    end, false)
  end)

  it("take the mode flag as b or as {train_mode = b}, and check it", function()
    local function modes(fn, ...)
      local r, t
      fn(function() r, t = autograd.is_recording(), autograd.is_training() end, ...)
      return {r, t}
    end
    assert.same({true, false}, modes(autograd.record, {train_mode = false}))
    assert.same({true, true}, modes(autograd.record, {train_mode = true}))
    assert.same({true, true}, modes(autograd.record, {}))
    assert.same({false, true}, modes(autograd.pause, {train_mode = true}))
    assert.same({false, true}, modes(autograd.pause, true))
    assert.same({false, false}, modes(autograd.pause, {}))
    H.assert_error(function() autograd.record(function() end, {train = false}) end,
                   {"autograd.record: unknown option 'train'", "train_mode"})
    H.assert_error(function() autograd.record(function() end, "no") end,
                   {"autograd.record: train_mode must be true or false, got 'no'"})
    H.assert_error(function() autograd.pause(function() end, {train_mode = 0}) end,
                   {"autograd.pause: train_mode must be true or false, got 0"})
    H.assert_error(function() autograd.set_training("yes") end, {"must be true or false"})
    assert.is_false(autograd.is_recording())
    assert.is_false(autograd.is_training())
    assert.is_false(autograd.set_training({train_mode = true}))
    assert.is_true(autograd.set_training(false))
  end)

  it("pause stops recording inside record and restores it", function()
    autograd.record(function()
      autograd.pause(function()
        assert.is_false(autograd.is_recording())
        assert.is_false(autograd.is_training())
      end)
      assert.is_true(autograd.is_recording())
      assert.is_true(autograd.is_training())
      autograd.pause(function() assert.is_true(autograd.is_training()) end, true)
    end)
  end)

  it("train_mode and predict_mode change training only", function()
    autograd.train_mode(function()
      assert.is_true(autograd.is_training())
      assert.is_false(autograd.is_recording())
      autograd.predict_mode(function() assert.is_false(autograd.is_training()) end)
      assert.is_true(autograd.is_training())
    end)
    autograd.record(function()
      autograd.predict_mode(function()
        assert.is_true(autograd.is_recording())
        assert.is_false(autograd.is_training())
      end)
    end)
    assert.is_false(autograd.is_training())
  end)

  it("are restored when fn raises, and the error passes through", function()
    local msg = H.assert_error(function()
      autograd.record(function()
        autograd.pause(function() error("inner failure") end)
      end)
    end, {"inner failure"})
    assert.truthy(msg)
    assert.is_false(autograd.is_recording())
    assert.is_false(autograd.is_training())
    pcall(autograd.train_mode, function() error("x") end)
    assert.is_false(autograd.is_training())
    autograd.record(function()
      pcall(autograd.pause, function() error("x") end)
      assert.is_true(autograd.is_recording())
    end)
  end)

  it("want a function", function()
    H.assert_error(function() autograd.record(42) end, {"function"})
  end)
end)

describe("attach_grad and backward", function()
  it("x.grad is nil before attach_grad, zeros after", function()
    local x = F({1, 2, 3})
    assert.is_nil(x.grad)
    assert.equal("null", x.grad_req)
    x:attach_grad()
    H.check(x.grad, {0, 0, 0}, {dtype = "float64", shape = {3}})
    assert.equal("write", x.grad_req)
  end)

  it("computes the gradient of a chain", function()
    local x = F({1, 2, 3})
    x:attach_grad()
    autograd.record(function()
      local y = (x * x + x * 3):sum() -- dy/dx = 2x + 3
      y:backward()
    end)
    H.check(x.grad, {5, 7, 9})
  end)

  it("'write' overwrites the gradient on each backward", function()
    local x = F({1, 2})
    x:attach_grad("write")
    for _ = 1, 3 do
      autograd.record(function() (x * 2):sum():backward() end)
    end
    H.check(x.grad, {2, 2})
  end)

  it("'write' takes a fresh gradient's memory, and copies while a view of x.grad is held", function()
    for k = 1, 3 do -- out of line, held by nothing else: the memory changes hands
      local big = np.ones({300, 300})
      big:attach_grad()
      autograd.record(function() return (big * k):sum() end):backward()
      assert.equal(90000 * k, big.grad:sum():item())
    end
    local x = np.ones({50, 60})
    x:attach_grad()
    local v = x.grad:reshape({3000})
    for k = 1, 2 do
      autograd.record(function() return (x * x * k):sum() end):backward()
      assert.equal(6000 * k, v:sum():item()) -- the held view sees each result
      assert.equal(6000 * k, x.grad:sum():item())
    end
  end)

  it("'write' adds up the paths of one backward", function()
    local x = F({1, 2})
    x:attach_grad()
    autograd.record(function() (x + x + x):backward() end)
    H.check(x.grad, {3, 3})
  end)

  it("'add' accumulates across backwards", function()
    local x = F({1, 2})
    x:attach_grad("add")
    assert.equal("add", x.grad_req)
    for _ = 1, 3 do
      autograd.record(function() (x * 2):sum():backward() end)
    end
    H.check(x.grad, {6, 6})
  end)

  it("rejects an unknown grad_req and integer arrays", function()
    H.assert_error(function() F({1}):attach_grad("sometimes") end, {"grad_req", "sometimes"})
    H.assert_error(function() np.array({1, 2}, {dtype = "int64"}):attach_grad() end, {"attach_grad", "int64"})
  end)

  it("refuses in-place writes into arrays of the graph while recording, as MXNet", function()
    local x = F({1, 2, 3})
    x:attach_grad()
    local msg = {"copyto: assigning to an array that is already in a computational graph", "backward first"}
    H.assert_error(function()
      autograd.record(function()
        local a = x * 2
        np.array({9, 9, 9}):copyto(a)
        return (a * x):sum()
      end)
    end, msg)
    H.assert_error(function()
      autograd.record(function()
        local a = x * x
        np.array({5, 5, 5}):copyto(x)
        return a
      end)
    end, msg)
    H.assert_error(function()
      autograd.record(function()
        local a = x * 1
        np.random.shuffle(a)
        return a
      end)
    end, msg)
    assert.is_false(autograd.is_recording())
    -- outside record, and into arrays outside the graph, writes are fine
    np.array({4, 5, 6}):copyto(x)
    local y = autograd.record(function()
      local t = np.zeros({3})
      np.array({1, 1, 1}):copyto(t)
      return (x * t):sum()
    end)
    y:backward()
    H.check(x.grad, {1, 1, 1})
  end)

  it("rejects a head gradient that is not an array", function()
    local x = F({1, 2})
    x:attach_grad()
    local y = autograd.record(function() return x * 2 end)
    H.assert_error(function() y:backward(5, true) end, {"backward: head gradient 1 must be an array, got 5"})
    H.assert_error(function() autograd.backward({y}, "x", true) end, {"head_grads must be an array", "'x'"})
    H.assert_error(function() y:backward(np.ones({2}, {device = npx.cpu(7)}), true) end,
                   {"backward: head gradient 1 is on cpu(7) but its head is on"})
    y:backward()
    H.check(x.grad, {2, 2})
  end)

  it("uses the head gradient", function()
    local x = F({1, 2, 3})
    x:attach_grad()
    autograd.record(function()
      local y = x * x
      y:backward(F({1, 0, -2}))
    end)
    H.check(x.grad, {2, 0, -12})
  end)

  it("checks the head gradient's shape", function()
    local x = F({1, 2, 3})
    x:attach_grad()
    H.assert_error(function()
      autograd.record(function() (x * 2):backward(F({1, 2})) end)
    end, {"head gradient", "(2,)", "(3,)"})
  end)

  it("backward of several heads", function()
    local x = F({1, 2})
    x:attach_grad()
    autograd.record(function()
      autograd.backward({x * 2, x * x}, {F({1, 1}), F({1, 10})})
    end)
    H.check(x.grad, {4, 42})
  end)

  it("frees the graph unless retain_graph", function()
    local x = F({1, 2})
    x:attach_grad()
    local y = autograd.record(function() return (x * x):sum() end)
    y:backward()
    H.check(x.grad, {2, 4})
    H.assert_error(function() y:backward() end, {"retain_graph"})
    local z = autograd.record(function() return (x * x * x):sum() end)
    z:backward(true) -- retain_graph
    H.check(x.grad, {3, 12})
    z:backward(nil, true)
    H.check(x.grad, {3, 12})
    z:backward()
    H.check(x.grad, {3, 12})
    H.assert_error(function() z:backward() end, {"retain_graph"})
  end)

  it("backward takes its keywords in a trailing table", function()
    local x = F({1, 2})
    x:attach_grad()
    local z = autograd.record(function() return x * x * x end)
    z:backward{retain_graph = true}
    H.check(x.grad, {3, 12})
    z:backward(F({1, -1}), {retain_graph = true})
    H.check(x.grad, {3, -12})
    z:backward{out_grad = F({2, 0}), retain_graph = true}
    H.check(x.grad, {6, 0})
    autograd.backward(z, {head_grads = F({0, 1}), retain_graph = true})
    H.check(x.grad, {0, 12})
    autograd.backward({z}, {F({1, 1})}, {retain_graph = true})
    H.check(x.grad, {3, 12})
    autograd.backward({z}, {head_grads = {F({-1, 0})}})
    H.check(x.grad, {-3, 0})
    H.assert_error(function() z:backward() end, {"retain_graph"})   -- the last one freed it
    local y = autograd.record(function() return x * 2 end)
    H.assert_error(function() y:backward{retain_grahp = true} end,
                   {"backward: unknown argument 'retain_grahp'", "retain_graph"})
    H.assert_error(function() autograd.backward(y, {retain_graph = "yes"}) end,
                   {"retain_graph must be true or false, got 'yes'"})
    H.assert_error(function() y:backward(F({1, 1}), true, {retain_graph = true}) end,
                   {"multiple values for argument 'retain_graph'"})
    H.assert_error(function() y:backward{train_mode = false} end, {"train_mode = false is not supported"})
    y:backward{train_mode = true}
    H.check(x.grad, {2, 2})
  end)

  it("attach_grad takes grad_req positionally or as a keyword", function()
    local x = F({1, 2})
    x:attach_grad{grad_req = "add"}
    assert.equal("add", x.grad_req)
    H.assert_error(function() x:attach_grad{grad = "add"} end, {"attach_grad: unknown argument 'grad'"})
    H.assert_error(function() x:attach_grad("write", "row_sparse") end, {"stype 'row_sparse' is not supported"})
  end)

  it("backward of an array not computed under record is an error that says so", function()
    local x = F({1, 2})
    x:attach_grad()
    local y = x * 2 -- not recorded
    H.assert_error(function() y:backward() end, {"backward", "autograd.record", "attach_grad"})
    local z = F({1})
    H.assert_error(function() autograd.record(function() (z * 2):backward() end) end, {"not part of a recorded graph"})
  end)

  it("backward through an op without a gradient names the op", function()
    local x = F({{1, 2}, {3, 4}})
    x:attach_grad()
    H.assert_error(function()
      autograd.record(function()
        local p = core.call(core.op_ids.random_permute, {x}) -- float, no backward rule
        local loss = (p * x):sum()
        loss:backward()
      end)
    end, {"random_permute", "no gradient"})
    -- the error left nothing behind: the next backward works
    autograd.record(function() (x * 3):sum():backward() end)
    H.check(x.grad, {{3, 3}, {3, 3}})
  end)

  it("piecewise-constant ops give zero gradients, integer inputs none", function()
    local x = F({-1.5, 2})
    x:attach_grad()
    autograd.record(function() (np.sign(x) + np.equal(x, 2):astype("float64") * x):sum():backward() end)
    H.check(x.grad, {0, 1})
    local k = np.array({2, 3}, {dtype = "int64"})
    autograd.record(function() (x * k):sum():backward() end)
    H.check(x.grad, {2, 3})
  end)

  it("detach cuts the graph", function()
    local x = F({1, 2, 3})
    x:attach_grad()
    autograd.record(function()
      local y = x * 2
      local z = y:detach() * x -- d/dx = y = 2x, nothing through y
      z:sum():backward()
    end)
    H.check(x.grad, {2, 4, 6})
  end)

  it("pause inside record leaves ops off the tape", function()
    local x = F({1, 2})
    x:attach_grad()
    autograd.record(function()
      local c = autograd.pause(function() return x * 10 end)
      local loss = (c * x):sum() -- c is a constant
      loss:backward()
    end)
    H.check(x.grad, {10, 20})
  end)

  it("attach_grad on a recorded result makes it a leaf", function()
    local x = F({1, 2})
    x:attach_grad()
    autograd.record(function()
      local y = x * 3
      y:attach_grad()
      local loss = (y * y):sum()
      loss:backward()
      H.check(y.grad, {6, 12})
    end)
    H.check(x.grad, {0, 0})
  end)

  it("a gradient through broadcasting has the input's shape", function()
    local x, b = F({{1, 2, 3}, {4, 5, 6}}), F({1, 1, 1})
    x:attach_grad()
    b:attach_grad()
    autograd.record(function() (x * b):sum():backward() end)
    H.check(b.grad, {5, 7, 9}, {shape = {3}})
    H.check(x.grad, {{1, 1, 1}, {1, 1, 1}})
  end)

  it("float32 inputs get float32 gradients from float64 results", function()
    local x = np.array({1, 2}, {dtype = "float32"})
    local w = F({3, 4})
    x:attach_grad()
    autograd.record(function() (x * w):sum():backward() end)
    H.check(x.grad, {3, 4}, {dtype = "float32"})
  end)
end)

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    it("gradients stay on the array's device", function()
      local x, w = F({{1, 2}, {3, 4}}, dev), F({1, -1}, dev)
      x:attach_grad()
      assert.equal(dev, x.grad.device)
      autograd.record(function() np.matmul(x * w, F({1, 1}, dev)):sum():backward() end)
      H.check(x.grad, {{1, -1}, {1, -1}}, {device = dev})
      x:attach_grad("add")
      autograd.record(function() (x * x):mean():backward() end)
      H.check(x.grad, {{0.5, 1}, {1.5, 2}}, {device = dev})
    end)
  end)
end

describe("head gradients", function()
  it("more head gradients than heads is an error, as MXNet asserts", function()
    local x = np.ones({2})
    x:attach_grad()
    H.assert_error(function()
      autograd.record(function()
        local y = x * x
        return autograd.grad({y, y * 2}, {x}, {head_grads = {x, x, x}})
      end)
    end, {"grad: 3 head gradients for 2 heads"})
  end)
end)
