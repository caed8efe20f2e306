-- ctc_spec: npx.ctc_loss and gluon.loss.CTCLoss against MXNet 1.9.1's
-- losses and gradients in tests/data/ctc_golden.txt (gen_ctc_golden.py:
-- padding with 0 and -1, an empty label, repeated labels, labels as long
-- as the steps allow, lengths, rounding, a sample that cannot fit), on
-- every device, float32 and float64; bad input. The float64 finite
-- differences are gradcheck_spec's.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx, luon = H.np, H.npx, H.luon
local gloss = require("luon.gluon.loss")
local autograd = luon.autograd

-- case -> {loss = {..}, grad = {..}}
local golden = {}
do
  local text = H.read_file(H.root .. "tests/data/ctc_golden.txt")
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  for k = 1, #lines, 2 do
    local name, what = lines[k]:match("^(%S+) (%S+)")
    local vals = {}
    for v in lines[k + 1]:gmatch("%S+") do vals[#vals + 1] = tonumber(v) end
    golden[name] = golden[name] or {}
    golden[name][what] = vals
  end
end

-- x[i] = round(2 sin(0.37 i + 0.1), 3) over the flat index (the generator's)
local function acts(shape)
  local n, v = 1, {}
  for _, d in ipairs(shape) do n = n * d end
  for i = 0, n - 1 do v[i + 1] = math.floor(2 * math.sin(0.37 * i + 0.1) * 1000 + 0.5) / 1000 end
  return v
end

-- The generator's cases: shape, label, options (data_lengths, label_lengths,
-- blank_label) of npx.ctc_loss, or gluon = the CTCLoss options.
local cases = {
  {"first_padded", {5, 3, 4}, {{1, 2, 0}, {3, 3, 0}, {1, 1, 2}}},
  {"last_padded_empty", {4, 3, 5}, {{0, 3, -1}, {-1, -1, -1}, {2, 1, 2}}, blank = "last"},
  {"lengths", {4, 3, 5}, {{1, 2, 3, 4}, {2, 2, 1, 0}, {4, 4, 0, 0}}, dl = {4, 4, 2}, ll = {4, 3, 1}},
  {"label_is_T", {3, 2, 3}, {{1, 2, 1}, {2, 1, 2}}},
  {"float_rounding", {4, 2, 4}, {{1.4, 2.6, 0.3}, {3, 0, 0}}, dl = {3, 4}, ll = {1.5, 1.2}},
  {"cannot_fit", {4, 3, 4}, {{1, 1, 0}, {2, 3, 0}, {3, 3, 3}}, dl = {2, 4, 4}},
  {"gluon_ntc", {2, 5, 4}, {{0, 1, -1}, {2, 2, 1}}, gluon = {}},
  {"gluon_tnc_tn_lengths", {5, 3, 4}, {{0, 2, 1}, {1, 2, -1}, {1, 0, 0}}, dl = {5, 4, 3}, ll = {2, 2, 1},
   gluon = {layout = "TNC", label_layout = "TN", weight = 0.5}},
}

local function is_real_gpu(dev) return tostring(dev):match("^gpu") ~= nil and not H.stand_in_gpus end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local function A(t, dt) return np.array(t, {dtype = dt or "float32", device = dev}) end

    -- the case's loss and d(sum(h * loss))/dx, h[n] = 0.5 + n
    local function run(c, dt, label_dt)
      local x = A(acts(c[2]), dt):reshape(c[2])
      local label = A(c[3], label_dt)
      local dl, ll = c.dl and A(c.dl), c.ll and A(c.ll)
      x:attach_grad()
      local loss = autograd.record(function()
        if c.gluon then return gloss.CTCLoss(c.gluon)(x, label, dl, ll) end
        return npx.ctc_loss(x, label, dl, ll, {use_data_lengths = dl ~= nil, use_label_lengths = ll ~= nil,
                                               blank_label = c.blank})
      end)
      local h = {}
      for n = 1, loss.shape[1] do h[n] = n - 0.5 end
      loss:backward(A(h, dt))
      return loss, x.grad
    end

    for _, dt in ipairs({"float32", "float64"}) do
      it("matches MXNet 1.9.1's losses and gradients, " .. dt, function()
        for _, c in ipairs(cases) do
          local g = golden[c[1]]
          local loss, grad = run(c, dt)
          H.check(loss, g.loss, {dtype = dt, device = dev, tol = 1e-5})
          if g.grad then H.check(grad:reshape({-1}), g.grad, {dtype = dt, tol = 1e-5}) end
        end
      end)
    end

    it("takes integer labels and lengths", function()
      local loss, grad = run(cases[3], "float32", "int64")
      H.check(loss, golden.lengths.loss, {tol = 1e-5})
      H.check(grad:reshape({-1}), golden.lengths.grad, {tol = 1e-5})
    end)

    it("gives a sample that cannot fit its steps loss 0 and no gradient, as MXNet", function()
      local loss, grad = run(cases[6], "float64")
      H.check(loss, golden.cannot_fit.loss, {tol = 1e-6})
      local g = H.values(grad)
      for t = 1, 4 do
        for k = 1, 4 do
          assert.equal(0, g[t][1][k])
          assert.equal(0, g[t][3][k])
        end
      end
    end)

    it("is softmax minus the posterior: the gradient of a step sums to 0", function()
      local _, grad = run(cases[1], "float64")
      assert.is_true(np.max(np.abs(np.sum(grad, 2))):item() < 1e-12)
    end)

    it("handles an empty batch, no label columns and one class", function()
      local l = npx.ctc_loss(A({}):reshape({3, 0, 4}), A({}):reshape({0, 2}))
      H.check(l, nil, {shape = {0}})
      local x = A(acts({3, 2, 4})):reshape({3, 2, 4})
      -- no labels: -sum over the steps of log p(blank)
      local want = np.negative(np.sum(npx.log_softmax(x)[{true, true, 0}], 0))
      H.check(npx.ctc_loss(x, A({}):reshape({2, 0})), H.values(want), {tol = 1e-6})
      H.check(npx.ctc_loss(A(acts({3, 2, 1})):reshape({3, 2, 1}), A({{0, 0}, {0, 0}})), {0, 0}, {tol = 0})
    end)

    it("refuses bad input, naming the value", function()
      local x = A(acts({4, 2, 3})):reshape({4, 2, 3})
      local lab = A({{1, 2}, {2, 0}})
      H.assert_error(function() npx.ctc_loss(x:astype("int32"), lab) end, {"ctc_loss", "int32", "float32"})
      H.assert_error(function() npx.ctc_loss(x:reshape({8, 3}), lab) end, {"ctc_loss", "(8,3)"})
      H.assert_error(function() npx.ctc_loss(x, A({1, 2})) end, {"ctc_loss", "label has shape"})
      H.assert_error(function() npx.ctc_loss(x, A({{1, 2}, {2, 0}, {1, 1}})) end, {"ctc_loss", "(3,2)", "batch_size 2"})
      H.assert_error(function() npx.ctc_loss(x, A({{1, 2, 1, 2, 1}, {2, 0, 0, 0, 0}})) end,
                     {"ctc_loss", "5 columns", "4 steps"})
      H.assert_error(function() npx.ctc_loss(x, lab:astype("bool")) end, {"ctc_loss", "label is bool"})
      H.assert_error(function() npx.ctc_loss(x, lab, A({4, 4, 4}), {use_data_lengths = true}) end,
                     {"ctc_loss", "data_lengths has shape", "(2,)"})
      H.assert_error(function() npx.ctc_loss(x, lab, A({4, 4})) end,
                     {"ctc_loss", "data_lengths is given but use_data_lengths is false"})
      H.assert_error(function() npx.ctc_loss(x, lab, {use_label_lengths = true}) end,
                     {"ctc_loss", "use_label_lengths is true but no label_lengths"})
      H.assert_error(function() npx.ctc_loss(x, lab, {use_data_lengths = 1}) end,
                     {"ctc_loss", "use_data_lengths must be true or false, got 1"})
      H.assert_error(function() npx.ctc_loss(x, lab, {blank_label = "middle"}) end,
                     {"ctc_loss", "blank_label must be 'first' or 'last'", "middle"})
      H.assert_error(function() npx.ctc_loss(x, lab, {blank = "last"}) end, {"ctc_loss", "unknown", "blank_label"})
      H.assert_error(function() npx.ctc_loss(x, "ab") end, {"ctc_loss", "label"})
      -- values: an error on the CPU; a NaN loss on a GPU, which would have to wait to report it
      local bad = {
        {{{1, 3}, {2, 0}}, nil, nil, "label[0, 1] = 3 is not a class", "1..2 (0 pads)"},
        {{{1, 2}, {-1, 0}}, nil, nil, "label[1, 0] = -1 is not a class"},
        {{{1, 2}, {2, 0}}, {4, 5}, nil, "data_lengths[1] = 5 is outside 0..4"},
        {{{1, 2}, {2, 0}}, {-1, 4}, nil, "data_lengths[0] = -1 is outside 0..4"},
        {{{1, 2}, {2, 0}}, {3.5, 4}, nil, "data_lengths[0] = 3.5 is not a whole number"},
        {{{1, 2}, {2, 0}}, nil, {3, 1}, "label_lengths[0] = 3 is outside 0..2"},
        {{{1, 2}, {2, 0}}, nil, {0 / 0, 1}, "label_lengths[0] =", "is outside 0..2"},
        {{{1, 0}, {2, 0}}, nil, {2, 1}, "label[0, 1] = 0 is not a class"},
      }
      for _, b in ipairs(bad) do
        local dl, ll = b[2] and A(b[2]), b[3] and A(b[3])
        local f = function()
          return npx.ctc_loss(x, A(b[1]), dl, ll, {use_data_lengths = dl ~= nil, use_label_lengths = ll ~= nil})
        end
        if is_real_gpu(dev) then
          local l = f()
          assert.is_true(l:isnan():any():item())
        else
          H.assert_error(f, {"ctc_loss", b[4], b[5]})
        end
      end
      local last = function() return npx.ctc_loss(x, A({{0, 2}, {2, -1}}), {blank_label = "last"}) end
      if is_real_gpu(dev) then
        assert.is_true(last():isnan():any():item())
      else
        H.assert_error(last, {"ctc_loss", "label[0, 1] = 2 is not a class", "'last'", "0..1 (-1 pads)"})
      end
      -- the runtime is still usable
      H.check(npx.ctc_loss(x, lab), nil, {shape = {2}})
    end)

    it("CTCLoss refuses bad arguments", function()
      H.assert_error(function() gloss.CTCLoss{layout = "NCT"} end, {"CTCLoss", "layout", "'NTC' or 'TNC'", "NCT"})
      H.assert_error(function() gloss.CTCLoss{label_layout = "TNC"} end, {"CTCLoss", "label_layout", "TNC"})
      H.assert_error(function() gloss.CTCLoss{batch_axis = 1} end, {"CTCLoss", "batch_axis", "label_layout"})
      H.assert_error(function() gloss.CTCLoss{weight = "x"} end, {"CTCLoss", "weight must be a number"})
      H.assert_error(function() gloss.CTCLoss{alphabet = 3} end, {"CTCLoss", "unknown", "alphabet"})
      local L = gloss.CTCLoss()
      local x = A(acts({2, 4, 3})):reshape({2, 4, 3})
      H.assert_error(function() L(x:reshape({8, 3}), A({{0}, {1}})) end, {"CTCLoss", "3 axes", "(8,3)"})
      H.assert_error(function() L(x, A({0, 1})) end, {"CTCLoss", "2 axes"})
      H.assert_error(function() L(x, A({{0}, {1}}), 4) end, {"CTCLoss", "pred_lengths must be an ndarray or nil"})
      assert.equal("CTCLoss(layout=NTC, label_layout=NT, w=None)", tostring(L))
      -- MXNet's Gluon blank is the last class: label 2 of 3 classes is the blank
      if not is_real_gpu(dev) then H.assert_error(function() L(x, A({{0, 2}, {1, -1}})) end, {"label[0, 1] = 2"}) end
    end)
  end)
end
