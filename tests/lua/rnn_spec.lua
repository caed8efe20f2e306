-- rnn_spec: gluon.rnn's layers and cells against MXNet 1.9.1's outputs and
-- states (tests/data/rnn_golden.txt, made by gen_rnn_golden.py: parameter
-- names and shapes, fixed weights, inputs and states), MXNet's saved
-- parameters loading, the fused layer against the cells' unroll, gradients
-- through time by finite differences (float64), dropout between layers,
-- and bad input. The rnn op's own gradient check is in gradcheck_spec.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon = H.luon
local np, npx, autograd = luon.np, luon.npx, luon.autograd
local gluon = luon.gluon
local rnn = gluon.rnn
local mxparams = require("luon.mxparams")

local T, N, I, HID = 3, 2, 4, 5

-- The golden file: case name -> {layout, states, params = {{name, shape}},
-- out = {shape, values}, state = {{shape, values}, ...}}
local function numbers(s)
  local t = {}
  for v in s:gmatch("%S+") do t[#t + 1] = tonumber(v) end
  return t
end
local function shape_of(s)
  local t = {}
  for v in s:gmatch("%d+") do t[#t + 1] = tonumber(v) end
  return t
end
local golden = {}
do
  local cur
  for line in H.read_file(H.root .. "tests/data/rnn_golden.txt"):gmatch("[^\n]+") do
    local name, layout, st = line:match("^case (%S+) (%S+) (%d)")
    if name then
      cur = {layout = layout, states = st == "1", params = {}, state = {}}
      golden[name] = cur
    elseif line:match("^param ") then
      local n, s = line:match("^param (%S+) (%S+)")
      cur.params[#cur.params + 1] = {n, shape_of(s)}
    elseif line:match("^out ") then
      local s, v = line:match("^out (%S+) (.*)")
      cur.out = {shape_of(s), numbers(v)}
    else
      local k, s, v = line:match("^state (%d+) (%S+) (.*)")
      cur.state[tonumber(k) + 1] = {shape_of(s), numbers(v)}
    end
  end
end

local function formula(shape, f, dtype)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local v = {}
  for i = 0, n - 1 do v[i + 1] = f(i) end
  return np.array(v, {dtype = dtype or "float32"}):reshape(shape)
end
local function x_for(layout, dtype)
  return formula(layout == "TNC" and {T, N, I} or {N, T, I}, function(i) return math.sin(1.3 * i) end, dtype)
end
local function states_for(infos, dtype)
  local s = {}
  for k, info in ipairs(infos) do
    s[k] = formula(info.shape, function(i) return 0.5 * math.cos(0.7 * i + k - 1) end, dtype)
  end
  return s
end
local function flat(a) return a:reshape(-1):totable() end

-- The net's parameters named and shaped as the golden's (MXNet's names,
-- through load_parameters' mapping), set to its formula weights.
local function set_golden(net, case)
  local params = net:collect_params()
  local want = {}
  for k, p in ipairs(case.params) do
    local name = mxparams.rnn_name(p[1])
    want[name] = true
    local mine = params[name]
    assert(mine, "no parameter " .. name .. " (MXNet's " .. p[1] .. ")")
    H.assert_shape(mine.shape, p[2])
    mine:set_data(formula(p[2], function(i) return 0.4 * math.sin(0.37 * i + k - 1) end))
  end
  for _, n in ipairs(params:keys()) do assert(want[n], "parameter " .. n .. " is not MXNet's") end
end

local function check_golden(case, y, states, tol)
  tol = tol or 2e-5
  H.assert_shape(y, case.out[1])
  H.assert_close(flat(y), case.out[2], tol)
  if case.states then
    assert.equal(#case.state, #states)
    for k, s in ipairs(case.state) do
      H.assert_shape(states[k], s[1])
      H.assert_close(flat(states[k]), s[2], tol)
    end
  end
end

local layers = {
  rnn_relu_2layers = function(l) return rnn.RNN(HID, 2, {layout = l}) end,
  rnn_tanh_bidir = function(l) return rnn.RNN(HID, {activation = "tanh", bidirectional = true, layout = l}) end,
  lstm_2layers = function(l) return rnn.LSTM(HID, 2, {layout = l}) end,
  lstm_bidir_2layers = function(l) return rnn.LSTM(HID, 2, {layout = l, bidirectional = true}) end,
  lstm_no_states = function(l) return rnn.LSTM(HID, {layout = l}) end,
  gru_2layers = function(l) return rnn.GRU(HID, 2, {layout = l}) end,
  gru_bidir_2layers = function(l) return rnn.GRU(HID, 2, {layout = l, bidirectional = true}) end,
}

local cells = {
  rnncell = function() return rnn.RNNCell(HID) end,
  rnncell_relu = function() return rnn.RNNCell(HID, {activation = "relu"}) end,
  lstmcell = function() return rnn.LSTMCell(HID) end,
  grucell = function() return rnn.GRUCell(HID) end,
  sequential_lstm_gru = function()
    local s = rnn.SequentialRNNCell()
    s:add(rnn.LSTMCell(HID))
    s:add(rnn.GRUCell(HID))
    return s
  end,
  residual_gru = function() return rnn.ResidualCell(rnn.GRUCell(I)) end,
  bidirectional_lstm_gru = function() return rnn.BidirectionalCell(rnn.LSTMCell(HID), rnn.GRUCell(HID)) end,
}
local cell_merge = {lstmcell = false}

describe("gluon.rnn against MXNet 1.9.1", function()
  local names = {}
  for n in pairs(layers) do names[#names + 1] = n end
  table.sort(names)
  for _, name in ipairs(names) do
    it("layer " .. name .. ": parameter names and shapes, output and states", function()
      local case = golden[name]
      local net = layers[name](case.layout)
      net:initialize()
      local x = x_for(case.layout)
      net(x)
      set_golden(net, case)
      if case.states then
        local y, states = net(x, states_for(net:state_info(N)))
        check_golden(case, y, states)
      else
        check_golden(case, net(x))
      end
    end)
  end
  local cnames = {}
  for n in pairs(cells) do cnames[#cnames + 1] = n end
  table.sort(cnames)
  for _, name in ipairs(cnames) do
    it("cell " .. name .. ": unroll's outputs and states", function()
      local case = golden[name]
      local cell = cells[name]()
      cell:initialize()
      local x = x_for(case.layout)
      cell:unroll(T, x, {layout = case.layout, merge_outputs = true})
      set_golden(cell, case)
      local merge = cell_merge[name] ~= false
      local y, states = cell:unroll(T, x, {begin_state = states_for(cell:state_info(N)), layout = case.layout,
                                           merge_outputs = merge})
      if not merge then
        assert.equal(T, #y)
        y = np.stack(y, case.layout:find("T") - 1)
      end
      check_golden(case, y, states)
    end)
  end

  it("load_parameters reads MXNet 1.9.1's save_parameters of a bidirectional LSTM (_unfused names)", function()
    local case = golden.lstm_bidir_2layers
    local net = rnn.LSTM(HID, 2, {layout = "NTC", bidirectional = true})
    net:load_parameters(H.root .. "tests/data/mx_lstm_bidir.params")
    local y, states = net(x_for("NTC"), states_for(net:state_info(N)))
    check_golden(case, y, states)
  end)
end)

describe("gluon.rnn layers", function()
  it("have MXNet's parameter names, shapes and repr, input_size deferred or given", function()
    local net = rnn.LSTM(8, 2, {bidirectional = true})
    assert.equal("LSTM(None -> 8, TNC, num_layers=2, bidirectional)", tostring(net))
    net:initialize()
    net(np.ones({3, 2, 6}))
    local keys = net:collect_params():keys()
    assert.same({"l0_i2h_weight", "l0_h2h_weight", "l0_i2h_bias", "l0_h2h_bias",
                 "r0_i2h_weight", "r0_h2h_weight", "r0_i2h_bias", "r0_h2h_bias",
                 "l1_i2h_weight", "l1_h2h_weight", "l1_i2h_bias", "l1_h2h_bias",
                 "r1_i2h_weight", "r1_h2h_weight", "r1_i2h_bias", "r1_h2h_bias"}, keys)
    H.assert_shape(net.l0_i2h_weight.shape, {32, 6})
    H.assert_shape(net.r1_i2h_weight.shape, {32, 16})
    H.assert_shape(net.l1_h2h_bias.shape, {32})
    assert.equal("LSTM(6 -> 8, TNC, num_layers=2, bidirectional)", tostring(net))
    local g = rnn.GRU(4, {input_size = 3, dropout = 0.5, layout = "NTC"})
    H.assert_shape(g.l0_i2h_weight.shape, {12, 3})
    assert.equal("GRU(3 -> 4, NTC, dropout=0.5)", tostring(g))
    assert.equal("RNN(None -> 2, TNC)", tostring(rnn.RNN(2)))
  end)

  it("return the output alone without states, and output, {h[, c]} with them; begin_state", function()
    local net = rnn.LSTM(3, 2, {input_size = 2})
    net:initialize()
    local x = np.random.uniform(-1, 1, {4, 5, 2})
    local y = net(x)
    H.assert_shape(y, {4, 5, 3})
    local s0 = net:begin_state(5)
    assert.equal(2, #s0)
    H.assert_shape(s0[1], {2, 5, 3})
    local y2, s = net(x, s0)
    H.assert_close(y2, y:totable())
    assert.equal(2, #s)
    H.assert_shape(s[2], {2, 5, 3})
    local ones = net:begin_state(5, {func = np.ones})
    H.assert_close(ones[1], np.ones({2, 5, 3}):totable())
    -- MXNet's keyword spelling, begin_state(batch_size=5)
    H.assert_shape(net:begin_state{batch_size = 5}[2], {2, 5, 3})
    H.assert_shape(rnn.LSTMCell(3, {input_size = 2}):begin_state{batch_size = 4, func = np.ones}[1], {4, 3})
    local g = rnn.GRU(3, {input_size = 2})
    g:initialize()
    local _, gs = g(x, g:begin_state(5)[1]) -- a lone state array, as MXNet allows
    assert.equal(1, #gs)
  end)

  it("equal the cells' unroll (fused op = step by step), both layouts and directions", function()
    for _, spec in ipairs({{rnn.LSTM, rnn.LSTMCell}, {rnn.GRU, rnn.GRUCell}, {rnn.RNN, rnn.RNNCell, "tanh"}}) do
      local Layer, Cell, act = spec[1], spec[2], spec[3]
      local net = Layer(4, {input_size = 3, bidirectional = true, layout = "NTC", activation = act})
      net:initialize()
      local lc, rc = Cell(4, {input_size = 3, activation = act}), Cell(4, {input_size = 3, activation = act})
      lc:initialize(); rc:initialize()
      for _, n in ipairs({"i2h_weight", "h2h_weight", "i2h_bias", "h2h_bias"}) do
        local a, b = np.random.uniform(-0.5, 0.5, lc[n].shape), np.random.uniform(-0.5, 0.5, rc[n].shape)
        lc[n]:set_data(a); rc[n]:set_data(b)
        net["l0_" .. n]:set_data(a); net["r0_" .. n]:set_data(b)
      end
      local bi = rnn.BidirectionalCell(lc, rc)
      local x = np.random.uniform(-1, 1, {2, 5, 3})
      local y, states = net(x, net:begin_state(2))
      local yc, sc = bi:unroll(5, x, {layout = "NTC"})
      H.assert_close(y, yc:totable(), 1e-5)
      H.assert_close(states[1][0], sc[1]:totable(), 1e-5) -- h of the forward direction
      H.assert_close(states[1][1], sc[#sc == 4 and 3 or 2]:totable(), 1e-5)
    end
  end)

  it("backpropagate through time: a layer's gradients match finite differences (float64)", function()
    for _, Layer in ipairs({rnn.LSTM, rnn.GRU}) do
      local net = Layer(3, 2, {input_size = 2, bidirectional = true, dtype = "float64"})
      net:initialize()
      local x = np.random.uniform(-1, 1, {4, 2, 2}, {dtype = "float64"})
      local s = net:begin_state(2, {dtype = "float64"})
      local R = np.random.uniform(-1, 1, {4, 2, 6}, {dtype = "float64"})
      local function loss() return (net(x, s) * R):sum() end
      x:attach_grad()
      local L = autograd.record(loss)
      L:backward()
      local w = net.l1_h2h_weight
      local gw, gx = w:grad():totable(), x.grad:totable()
      local eps = 1e-6
      local wd = w:data()
      for _, ij in ipairs({{0, 0}, {4, 2}, {8, 1}}) do
        local i, j = ij[1], ij[2]
        local v = wd[{i, j}]:item()
        wd[{i, j}] = v + eps
        local lp = loss():item()
        wd[{i, j}] = v - eps
        local lm = loss():item()
        wd[{i, j}] = v
        H.assert_close({gw[i + 1][j + 1]}, {(lp - lm) / (2 * eps)}, 1e-6)
      end
      for _, p in ipairs({{0, 0, 1}, {3, 1, 0}}) do
        local v = x[p]:item()
        x[p] = v + eps
        local lp = loss():item()
        x[p] = v - eps
        local lm = loss():item()
        x[p] = v
        H.assert_close({gx[p[1] + 1][p[2] + 1][p[3] + 1]}, {(lp - lm) / (2 * eps)}, 1e-6)
      end
    end
  end)

  it("apply dropout between layers only while training", function()
    local net = rnn.LSTM(4, 2, {input_size = 3, dropout = 0.5})
    net:initialize()
    local x = np.random.uniform(-1, 1, {5, 2, 3})
    local a, b = net(x), net(x)
    H.assert_close(a, b:totable(), 0)
    local y
    autograd.record(function() y = net(x) end)
    H.assert_shape(y, {5, 2, 4})
    assert.is_false(H.close(y, a:totable(), 1e-6))
    -- a layer at a time (p > 0 while training) equals the fused call: a
    -- dropout that keeps everything (p tiny) leaves the same outputs
    for _, mode in ipairs({"lstm", "gru"}) do
      local G = mode == "lstm" and 4 or 3
      local P = 2 * G * 3 * (2 + 3 + 2) + 2 * G * 3 * (6 + 3 + 2)
      local xs, ps = np.random.uniform(-1, 1, {4, 2, 2}), np.random.uniform(-0.5, 0.5, {P})
      local h0 = np.random.uniform(-1, 1, {4, 2, 3})
      local c0 = mode == "lstm" and np.random.uniform(-1, 1, {4, 2, 3}) or nil
      local kw = {mode = mode, state_size = 3, num_layers = 2, bidirectional = true, state_outputs = true}
      local y0, h1, c1 = npx.rnn(xs, ps, h0, c0, kw)
      kw.p = 1e-12
      local y2, h2, c2 = autograd.record(function() return npx.rnn(xs, ps, h0, c0, kw) end)
      H.assert_close(y2, y0:totable(), 1e-6)
      H.assert_close(h2, h1:totable(), 1e-6)
      if c1 then H.assert_close(c2, c1:totable(), 1e-6) end
    end
  end)

  it("train: one SGD step lowers the loss", function()
    local net = rnn.GRU(4, {input_size = 3})
    net:initialize()
    local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.5})
    local x, target = np.random.uniform(-1, 1, {6, 3, 3}), np.random.uniform(-0.5, 0.5, {6, 3, 4})
    local function step()
      local L
      autograd.record(function() L = ((net(x) - target) ^ 2):mean() end)
      L:backward()
      trainer:step(1)
      return L:item()
    end
    local l0 = step()
    assert.is_true(step() < l0)
  end)
end)

describe("gluon.rnn bad input", function()
  it("names the layer, the value and what was expected", function()
    H.assert_error(function() rnn.LSTM(0) end, {"LSTM", "hidden_size", "positive integer"})
    H.assert_error(function() rnn.LSTM(4, {layout = "NCT"}) end, {"LSTM", "Invalid layout", "NCT", "TNC or NTC"})
    H.assert_error(function() rnn.RNN(4, {activation = "sigmoid"}) end, {"RNN", "activation", "relu", "tanh"})
    H.assert_error(function() rnn.LSTM(4, {projection_size = 2}) end, {"LSTM", "projection_size", "not supported"})
    H.assert_error(function() rnn.GRU(4, {dropout = 1.5}) end, {"GRU", "dropout", "[0, 1)"})
    H.assert_error(function() rnn.GRU(4, {bidirectonal = true}) end, {"GRU", "bidirectonal", "bidirectional"})
    H.assert_error(function() rnn.LSTMCell(4, {prefix = "a_"}) end, {"LSTMCell", "prefix"})
    H.assert_error(function() rnn.LSTMCell(4, {recurrent_activation = "gelu"}) end,
                   {"LSTMCell", "recurrent_activation", "gelu"})
    local soft = rnn.RNNCell(2, {activation = "softrelu", input_size = 2})
    soft:initialize()
    H.assert_shape((soft(np.ones({1, 2}), soft:begin_state(1))), {1, 2})
    local net = rnn.LSTM(4, {input_size = 3})
    net:initialize()
    H.assert_error(function() net(np.ones({5, 2, 6})) end, {"LSTM", "6 features", "(5, 2, 6)", "input_size is 3"})
    H.assert_error(function() net(np.ones({5, 2})) end, {"LSTM", "3-D", "(5,2)"})
    H.assert_error(function() net(np.ones({5, 2, 3}), {np.zeros({1, 2, 4})}) end, {"LSTM", "2 states", "got 1"})
    H.assert_error(function() net(np.ones({5, 2, 3}), {np.zeros({1, 3, 4}), np.zeros({1, 3, 4})}) end,
                   {"LSTM", "Invalid recurrent state shape", "(1, 2, 4)", "(1, 3, 4)"})
    H.assert_error(function() net(np.ones({5, 2, 3}, {dtype = "int32"})) end, {"rnn", "int32", "float32 and float64"})
    -- the runtime is usable after each
    H.assert_shape(net(np.ones({5, 2, 3})), {5, 2, 4})
    local cell = rnn.GRUCell(4, {input_size = 3})
    cell:initialize()
    H.assert_error(function() cell(np.ones({2, 5}), cell:begin_state(2)) end, {"GRUCell", "5 features", "input_size is 3"})
    H.assert_error(function() cell(np.ones({2, 3}), {np.zeros({3, 4})}) end, {"GRUCell", "Invalid recurrent state shape", "(2, 4)", "(3, 4)"})
    H.assert_error(function() cell:unroll(4, np.ones({2, 3, 3})) end, {"GRUCell.unroll", "length is 4", "3 steps"})
    H.assert_error(function() cell:unroll(3, np.ones({2, 3, 3}), {layout = "CTN"}) end, {"Invalid layout", "CTN"})
    H.assert_error(function() cell:unroll(3, np.ones({2, 3, 3}), {valid_length = np.ones({2})}) end, {"valid_length"})
    H.assert_error(function() rnn.BidirectionalCell(cell, rnn.GRUCell(4))(np.ones({2, 3}), {}) end,
                   {"Bidirectional cannot be stepped"})
  end)

  it("npx.rnn and the op check modes, states and parameter sizes", function()
    local x, p, h = np.ones({3, 2, 4}), np.ones({10}), np.zeros({1, 2, 5})
    H.assert_error(function() npx.rnn(x, p, h, {mode = "lstn", state_size = 5, num_layers = 1}) end,
                   {"rnn", "mode", "lstn"})
    H.assert_error(function() npx.rnn(x, p, h, {mode = "lstm", state_size = 5, num_layers = 1}) end,
                   {"rnn", "lstm", "state_cell"})
    H.assert_error(function() npx.rnn(x, p, h, {mode = "gru", state_size = 5, num_layers = 1}) end,
                   {"rnn", "params has shape (10,)", "gru", "needs (165,)"})
    H.assert_error(function() npx.rnn(x, np.ones({165}), np.zeros({2, 2, 5}), {mode = "gru", state_size = 5, num_layers = 1}) end,
                   {"rnn", "state has shape (2,2,5)", "expected (1,2,5)"})
    H.assert_error(function() npx.rnn(x, np.ones({165}), h, {mode = "gru", state_size = 0, num_layers = 1}) end,
                   {"rnn", "state_size", ">= 1"})
    H.assert_error(function() npx.rnn(x, np.ones({165}), h, {mode = "gru", state_size = 5, num_layers = 1,
                                                             use_sequence_length = true}) end,
                   {"rnn", "use_sequence_length", "not supported"})
    H.assert_error(function() npx.rnn(np.ones({3, 2, 0}), np.ones({165}), h, {mode = "gru", state_size = 5, num_layers = 1}) end,
                   {"rnn", "input_size >= 1", "(3,2,0)"})
    H.assert_error(function() autograd.record(function()
      return npx.rnn(np.ones({3, 2}), np.ones({165}), h, {mode = "gru", state_size = 5, num_layers = 2, p = 0.5})
    end) end, {"rnn", "x must be (seq_len, batch, input_size)"})
    local y = npx.rnn(x, np.ones({165}), h, {mode = "gru", state_size = 5, num_layers = 1})
    H.assert_shape(y, {3, 2, 5})
  end)
end)
