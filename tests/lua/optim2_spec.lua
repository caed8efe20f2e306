-- optim2_spec: Adamax, Nadam, LAMB, Signum and FTRL against MXNet 1.9.1
-- (tests/data/optim2_golden.txt, made by tests/data/gen_optim2_golden.py):
-- five steps on two float32 weights, every weight after every step and the
-- states after the last, on every device; float64 against the same steps;
-- the fused update ops on non-contiguous operands; bad hyperparameters.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local core = require("luon.core")
local optimizer = require("luon.gluon.optimizer")

local TOL = 1e-6 -- relative (H.assert_close: |a - e| <= tol (1 + |e|))

-- The golden file: weights[idx] = {shape, values}, grads[step][idx] = values,
-- cases in file order, each {name, opt, kw, lr_mult, wd_mult, after[step][idx], state[idx][k]}.
local function numbers(s)
  local t = {}
  for v in s:gmatch("%S+") do t[#t + 1] = tonumber(v) end
  return t
end
local function load_golden()
  local g = {weights = {}, grads = {}, cases = {}}
  local c
  for line in io.lines(H.root .. "tests/data/optim2_golden.txt") do
    local kind, rest = line:match("^(%S+) (.*)$")
    if kind == "weight" then
      local idx, shape, vals = rest:match("^(%d+) (%S+) (.*)$")
      local dims = {}
      for d in shape:gmatch("%d+") do dims[#dims + 1] = tonumber(d) end
      g.weights[tonumber(idx)] = {dims, numbers(vals)}
    elseif kind == "grad" then
      local step, idx, vals = rest:match("^(%d+) (%d+) (.*)$")
      step = tonumber(step)
      g.grads[step] = g.grads[step] or {}
      g.grads[step][tonumber(idx)] = numbers(vals)
    elseif kind == "case" then
      local name, opt = rest:match("^(%S+) (%S+)$")
      c = {name = name, opt = opt, kw = {}, lr_mult = {}, wd_mult = {}, after = {}, state = {}}
      g.cases[#g.cases + 1] = c
    elseif kind == "opt" then
      local k, v = rest:match("^(%S+) (%S+)$")
      if v == "true" then c.kw[k] = true elseif v == "false" then c.kw[k] = false else c.kw[k] = tonumber(v) end
    elseif kind == "mult" then
      local which, name, v = rest:match("^(%S+) (%S+) (%S+)$")
      c[which .. "_mult"][name] = tonumber(v)
    elseif kind == "after" then
      local step, idx, vals = rest:match("^(%d+) (%d+) (.*)$")
      step = tonumber(step)
      c.after[step] = c.after[step] or {}
      c.after[step][tonumber(idx)] = numbers(vals)
    elseif kind == "state" then
      local idx, k, vals = rest:match("^(%d+) (%d+) (.*)$")
      idx = tonumber(idx)
      c.state[idx] = c.state[idx] or {}
      c.state[idx][tonumber(k)] = numbers(vals)
    end
  end
  return g
end
local golden = load_golden()

local function flat(x) return x:reshape({-1}):astype("float64"):totable() end
local function states_of(s)
  if s == nil then return {} end
  if core.is_array(s) then return {s} end
  return s
end

-- Run case c on device d in dtype dt as the generator did: each step
-- updates index 0, then index 1; check(step, idx, w) after each.
local function run_case(c, d, dt, check)
  local kw = {param_idx2name = {[0] = "a_weight", [1] = "b_weight"}}
  for k, v in pairs(c.kw) do kw[k] = v end
  local opt = optimizer.create(c.opt, kw)
  opt:set_lr_mult(c.lr_mult)
  opt:set_wd_mult(c.wd_mult)
  local ws, st = {}, {}
  for idx = 0, 1 do
    local shape, vals = golden.weights[idx][1], golden.weights[idx][2]
    ws[idx] = np.array(vals, {dtype = dt, device = d}):reshape(shape)
    st[idx] = opt:create_state(idx, ws[idx])
    for _, s in ipairs(states_of(st[idx])) do
      assert.equal(d, s.device)
      assert.equal(dt, s.dtype)
    end
  end
  for step = 1, #golden.grads do
    for idx = 0, 1 do
      local g = np.array(golden.grads[step][idx], {dtype = dt, device = d}):reshape(ws[idx].shape)
      opt:update({idx}, {ws[idx]}, {g}, {st[idx]})
      check(step, idx, ws[idx])
    end
  end
  return ws, st
end

describe("optimizers part 2 against MXNet 1.9.1", function()
  it("the golden file has every case", function()
    local names = {}
    for _, c in ipairs(golden.cases) do names[c.opt] = true end
    for _, n in ipairs({"adamax", "nadam", "lamb", "signum", "ftrl"}) do assert.is_true(names[n], n) end
  end)

  for _, c in ipairs(golden.cases) do
    it(c.name .. ": five steps, every device (float32)", function()
      for _, d in ipairs(H.devices()) do
        local _, st = run_case(c, d, "float32", function(step, idx, w)
          local ok, err = pcall(H.assert_close, flat(w), c.after[step][idx], TOL)
          if not ok then error(("%s on %s, step %d, weight %d: %s"):format(c.name, tostring(d), step, idx, err), 0) end
        end)
        for idx = 0, 1 do
          local s = states_of(st[idx])
          assert.equal(#(c.state[idx] or {}), #s)
          for k = 1, #s do H.assert_close(flat(s[k]), c.state[idx][k], TOL) end
        end
      end
    end)
    it(c.name .. ": float64 follows the same trajectory", function()
      local d = npx.cpu(0)
      run_case(c, d, "float64", function(step, idx, w)
        H.assert_close(flat(w), c.after[step][idx], 1e-5)
      end)
    end)
  end
end)

describe("the fused updates on every device", function()
  local S = core.slot
  -- each op: its inputs' count and its scalars; a transposed weight and states
  local ops = {
    {"adamax_update", 4, {ADAMAX_BETA1 = 0.9, ADAMAX_BETA2 = 0.99}},
    {"nadam_update", 4, {NADAM_BETA1 = 0.9, NADAM_BETA2 = 0.99, NADAM_EPSILON = 1e-8, NADAM_M_RATIO = 0.8},
     {NADAM_T = 2}},
    {"lamb_update", 4, {LAMB_BETA1 = 0.9, LAMB_BETA2 = 0.99, LAMB_EPSILON = 1e-6}, {LAMB_T = 2, LAMB_BIAS_CORRECTION = 1}},
    {"signsgd_update", 2, {}},
    {"signum_update", 3, {SIGNUM_MOMENTUM = 0.9, SIGNUM_WD_LH = 0.01}},
    {"ftrl_update", 4, {FTRL_LAMDA1 = 0.01, FTRL_BETA = 1}},
  }
  local function call(name, inputs, f, i)
    local a = core.attrs()
    a.f[S.OPT_LR], a.f[S.OPT_WD], a.f[S.OPT_RESCALE], a.f[S.OPT_CLIP] = 0.1, 0.01, 0.5, 0.8
    for k, v in pairs(f) do a.f[S[k]] = v end
    for k, v in pairs(i or {}) do
      a.i[S[k]] = v
      a.ni = math.max(a.ni, S[k] + 1)
    end
    core.call(core.op_ids[name], inputs, a)
  end
  -- the inputs of op u on device d: w (5, 7) transposed or not, states >= 0
  local function inputs(u, d, transposed)
    local function data(seed)
      local v = {}
      for j = 1, 35 do v[j] = math.sin(1.7 * j + seed) end
      local x = np.array(v, {device = d}):reshape({7, 5})
      if transposed then return x:transpose() end
      return x:transpose():copy()
    end
    local t = {data(1), data(2)}
    for k = 3, u[2] do t[k] = np.abs(data(k)) + 0.1 end
    if u[1] == "lamb_update" then t[5] = np.array(2.5, {device = d}) end
    return t
  end

  for _, u in ipairs(ops) do
    it(u[1] .. ": strided operands give the dense result, on every device", function()
      local want
      for _, d in ipairs(H.devices()) do
        for _, tr in ipairs({false, true}) do
          local t = inputs(u, d, tr)
          for _ = 1, 2 do call(u[1], t, u[3], u[4]) end
          local got = {flat(t[1])}
          for k = 3, u[2] do got[#got + 1] = flat(t[k]) end
          if want == nil then want = got else H.assert_close(got, want, 1e-6) end
        end
      end
    end)
  end

  it("take no float16, integers, or mismatched states; the runtime stays usable", function()
    local d = npx.cpu(0)
    local w, g = np.ones({3}), np.ones({3})
    H.assert_error(function() call("adamax_update", {w, g, np.zeros({3}), np.zeros({4})}, {}) end,
                   {"adamax_update", "var", "(4,)", "(3,)"})
    H.assert_error(function() call("signum_update", {w, g, np.zeros({3}, {dtype = "float64"})}, {}) end,
                   {"signum_update", "mom", "float64", "float32"})
    H.assert_error(function() call("ftrl_update", {np.ones({3}, {dtype = "int32"}), g, w, w}, {}) end,
                   {"ftrl_update", "int32"})
    H.assert_error(function() call("signsgd_update", {w:astype("float16"), g:astype("float16")}, {}) end,
                   {"signsgd_update", "float16"})
    H.assert_error(function() call("lamb_update", {w, g, np.zeros({3}), np.zeros({3}), np.ones({2})}, {}) end,
                   {"lamb_update", "r1", "(2,)"})
    call("signsgd_update", {w, g}, {})
    H.assert_close(w:totable(), {0.899, 0.899, 0.899}, 1e-6) -- (1 - lr wd) w - lr sign(g)
    assert.equal(d, w.device)
  end)
end)

describe("optimizers part 2: the Python API", function()
  it("MXNet's defaults, positional arguments and registry names", function()
    local a = optimizer.create("Adamax")
    assert.equal("Adamax", getmetatable(a).__name)
    assert.equal(0.002, a.learning_rate)
    assert.equal(0.9, a.beta1)
    assert.equal(0.999, a.beta2)
    local n = optimizer.Nadam()
    assert.equal(0.001, n.learning_rate)
    assert.equal(1e-8, n.epsilon)
    assert.equal(0.004, n.schedule_decay)
    assert.equal(1.0, n.m_schedule)
    local l = optimizer.create("lamb")
    assert.equal(0.001, l.learning_rate)
    assert.equal(1e-6, l.epsilon)
    assert.is_nil(l.lower_bound)
    assert.is_nil(l.upper_bound)
    assert.is_true(l.bias_correction)
    local s = optimizer.Signum()
    assert.equal(0.01, s.learning_rate)
    assert.equal(0.9, s.momentum)
    assert.equal(0, s.wd_lh)
    local f = optimizer.create("FTRL")
    assert.equal("Ftrl", getmetatable(f).__name)
    assert.equal(0.1, f.learning_rate)
    assert.equal(0.01, f.lamda1)
    assert.equal(1, f.beta)
    -- positional order as MXNet's constructors
    assert.equal(0.5, optimizer.Ftrl(0.5).lamda1)
    assert.equal(0.2, optimizer.Ftrl(0.5, 0.2).learning_rate)
    assert.equal(0.7, optimizer.Signum(0.1, 0.7).momentum)
    assert.equal(0.3, optimizer.Nadam(0.1, 0.8, 0.9, 1e-7, 0.3).schedule_decay)
    assert.is_false(optimizer.LAMB{bias_correction = false}.bias_correction)
    -- MXNet drops a falsy bound (0 and None alike)
    assert.is_nil(optimizer.LAMB{lower_bound = 0}.lower_bound)
    assert.is_nil(optimizer.Signum{momentum = 0}:create_state(0, np.ones({2})))
  end)

  it("a Trainer drives them by name, with lr_mult from the Parameter", function()
    local gluon = H.luon.gluon
    for _, name in ipairs({"adamax", "nadam", "lamb", "signum", "ftrl"}) do
      for _, d in ipairs(H.devices()) do
        local net = gluon.nn.Dense(2, {in_units = 3})
        net:initialize{device = d}
        -- the weight stays, the bias moves (FTRL divides by lr: not 0 there)
        local frozen = name ~= "ftrl"
        if frozen then net.weight.lr_mult = 0 end
        local w0 = net.weight:data():copy()
        local b0 = net.bias:data():copy()
        local tr = gluon.Trainer(net:collect_params(), name, {learning_rate = 0.1})
        local x = np.ones({4, 3}, {device = d})
        H.luon.autograd.record(function() return net(x):sum() end):backward()
        tr:step(4)
        if frozen then H.assert_close(net.weight:data():totable(), w0:totable(), 0) end
        assert.is_false(H.close(net.bias:data():totable(), b0:totable(), 1e-4), name .. " did not move the bias")
        for _, s in pairs(tr._updaters[1].states) do
          for _, a in ipairs(states_of(s)) do assert.equal(d, a.device) end
        end
      end
    end
  end)

  it("bad hyperparameters name the optimizer and the option", function()
    H.assert_error(function() optimizer.Adamax{beta1 = 1} end, {"Adamax: beta1 must be a number in [0, 1)", "1"})
    H.assert_error(function() optimizer.Adamax{beta2 = -0.1} end, {"Adamax: beta2"})
    H.assert_error(function() optimizer.Nadam{schedule_decay = -1} end, {"Nadam: schedule_decay must be a number >= 0"})
    H.assert_error(function() optimizer.Nadam{epsilon = 0 / 0} end, {"Nadam: epsilon", "nan"})
    H.assert_error(function() optimizer.Nadam{beta1 = "0.9"} end, {"Nadam: beta1", "'0.9'"})
    H.assert_error(function() optimizer.LAMB{lower_bound = -1} end, {"LAMB: lower_bound must be a number >= 0"})
    H.assert_error(function() optimizer.LAMB{upper_bound = 0 / 0} end, {"LAMB: upper_bound"})
    H.assert_error(function() optimizer.LAMB{bias_correction = 1} end, {"LAMB: bias_correction must be true or false"})
    H.assert_error(function() optimizer.LAMB{epsilon = -1e-6} end, {"LAMB: epsilon"})
    H.assert_error(function() optimizer.Signum{momentum = -0.5} end, {"Signum: momentum must be a number >= 0"})
    H.assert_error(function() optimizer.Signum{wd_lh = 0 / 0} end, {"Signum: wd_lh"})
    H.assert_error(function() optimizer.Signum{momentum = 0, wd_lh = 0.1} end, {"Signum: wd_lh needs momentum > 0"})
    H.assert_error(function() optimizer.Ftrl{lamda1 = -0.01} end, {"Ftrl: lamda1 must be a number >= 0"})
    H.assert_error(function() optimizer.Ftrl{beta = "x"} end, {"Ftrl: beta"})
    H.assert_error(function() optimizer.Ftrl{lamda2 = 1} end, {"Ftrl: unknown argument 'lamda2'"})
    H.assert_error(function() optimizer.create("lamb", {wd = 0 / 0}) end, {"LAMB: wd"})
    H.assert_error(function() optimizer.create("signum", {clip_gradient = -1}) end, {"Signum: clip_gradient"})
    -- and the runtime is usable after them
    local o = optimizer.create("adamax")
    local w = np.ones({2})
    o:update({0}, {w}, {np.ones({2})}, {o:create_state(0, w)})
    H.assert_close(w:totable(), {1 - 0.002, 1 - 0.002}, 1e-6)
  end)
end)
