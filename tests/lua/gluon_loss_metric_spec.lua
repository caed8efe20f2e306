-- gluon_loss_metric_spec: the losses (HuberLoss, HingeLoss, SquaredHingeLoss,
-- LogisticLoss, KLDivLoss, CosineEmbeddingLoss, TripletLoss, PoissonNLLLoss,
-- SigmoidBCELoss's pos_weight) and metrics (MSE, MAE, RMSE, F1, MCC,
-- Perplexity, NegativeLogLikelihood, PearsonCorrelation, BinaryAccuracy (by
-- hand: MXNet 2's), CustomMetric, CompositeEvalMetric, create) against
-- MXNet 1.9.1's values in tests/data/loss_metric_golden.txt
-- (gen_loss_metric_golden.py), on every device; bad input. The losses'
-- gradients are checked in gradcheck_spec.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local gloss = require("luon.gluon.loss")
local metric = require("luon.gluon.metric")

-- label -> {shape = {..} or "metric", values = {..}}
local golden = {}
do
  local text = H.read_file(H.root .. "tests/data/loss_metric_golden.txt")
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  for k = 1, #lines, 2 do
    local label, shape = lines[k]:match("^(%S+) (%S+)$")
    local vals = {}
    for v in lines[k + 1]:gmatch("%S+") do vals[#vals + 1] = v == "nan" and 0 / 0 or tonumber(v) end
    local s = shape
    if shape ~= "metric" then
      s = {}
      if shape ~= "-" then for d in shape:gmatch("%d+") do s[#s + 1] = tonumber(d) end end
    end
    golden[label] = {shape = s, values = vals}
  end
end

local P = {}
local Q = {}
for i = 0, 11 do
  local function r3(x) return math.floor(x * 1000 + 0.5) / 1000 end
  P[i + 1] = r3(2 * math.sin(1.7 * i + 0.3))
  Q[i + 1] = r3(1.5 * math.cos(0.9 * i + 0.1))
end
local Z = {1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0}
local T = {0, 1, 2, 3, 0, 4, 1, 2, 3, 0, 1, 5}

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local function A(t, dt) return np.array(t, {dtype = dt or "float64", device = dev}) end
    local p, q, z, s, t, w
    before_each(function()
      p, q = A(P):reshape({3, 4}), A(Q):reshape({3, 4})
      z, t = A(Z):reshape({3, 4}), A(T):reshape({3, 4})
      s = z * 2 - 1
      w = A({{0.5}, {1}, {2}})
    end)
    local function check(label, out, tol)
      local g = golden[label]
      assert(g, "no golden " .. label)
      local vals = g.values
      if #g.shape == 1 and g.shape[1] == 1 and out.ndim == 0 then vals = vals[1] end -- MXNet's (1,) means
      if out.ndim > 1 then out = out:reshape({-1}) end
      H.check(out, vals, {tol = tol or 1e-10, device = dev})
    end

    describe("losses match MXNet 1.9.1", function()
      it("HuberLoss", function()
        check("HuberLoss", gloss.HuberLoss()(p, q))
        check("HuberLoss_rho0.5_w", gloss.HuberLoss{rho = 0.5}(p, q, w))
        check("HuberLoss_rho0.5_w", gloss.HuberLoss(0.5)(p, q, w))
        assert.equal("HuberLoss(batch_axis=0, w=None)", tostring(gloss.HuberLoss()))
      end)
      it("HingeLoss and SquaredHingeLoss", function()
        check("HingeLoss", gloss.HingeLoss()(p, s))
        check("HingeLoss_margin2_weight3", gloss.HingeLoss{margin = 2, weight = 3}(p, s))
        check("SquaredHingeLoss", gloss.SquaredHingeLoss()(p, s))
        check("SquaredHingeLoss_margin0.5_w", gloss.SquaredHingeLoss{margin = 0.5}(p, s, w))
      end)
      it("LogisticLoss, signed and binary labels", function()
        check("LogisticLoss", gloss.LogisticLoss()(p, s))
        check("LogisticLoss_binary_w", gloss.LogisticLoss{label_format = "binary"}(p, z, w))
      end)
      it("KLDivLoss sums over the non-batch axes", function()
        check("KLDivLoss", gloss.KLDivLoss()(npx.log_softmax(p, {axis = -1}), npx.softmax(q, {axis = -1})))
        check("KLDivLoss_nologits_axis0",
              gloss.KLDivLoss{from_logits = false, axis = 0}(p, npx.softmax(q, {axis = 0})))
        check("KLDivLoss_w", gloss.KLDivLoss{from_logits = false}(p, npx.softmax(q, {axis = -1}), w))
      end)
      it("CosineEmbeddingLoss returns (N, 1)", function()
        local f32 = function(x) return x:astype("float32") end
        local l = gloss.CosineEmbeddingLoss()(f32(p), f32(q), A({1, -1, 1}, "float32"))
        H.assert_shape(l, {3, 1})
        check("CosineEmbeddingLoss", l, 1e-6)
        check("CosineEmbeddingLoss_margin0.2_w",
              gloss.CosineEmbeddingLoss{margin = 0.2}(f32(p), f32(q), A({-1, -1, 1}, "float32"), f32(w)), 1e-6)
        -- float64 gives the same values
        check("CosineEmbeddingLoss", gloss.CosineEmbeddingLoss()(p, q, A({1, -1, 1})), 1e-6)
      end)
      it("TripletLoss", function()
        check("TripletLoss", gloss.TripletLoss()(p, q, p * 0.5 + 0.3))
        check("TripletLoss_margin3_weight2", gloss.TripletLoss{margin = 3, weight = 2}(p, q, q + 0.4))
      end)
      it("PoissonNLLLoss is one mean over everything (0-d)", function()
        local l = gloss.PoissonNLLLoss()(p, t)
        H.assert_shape(l, {})
        check("PoissonNLLLoss", l)
        check("PoissonNLLLoss_probs", gloss.PoissonNLLLoss{from_logits = false}(np.abs(p) + 0.5, t))
        check("PoissonNLLLoss_full_no_zero", gloss.PoissonNLLLoss{compute_full = true}(p, t + 1))
        check("PoissonNLLLoss_w", gloss.PoissonNLLLoss()(p, t, w))
      end)
      it("PoissonNLLLoss compute_full with zero targets is finite (MXNet: NaN)", function()
        assert.is_true(golden.PoissonNLLLoss_full_zero_target.values[1] ~= golden.PoissonNLLLoss_full_zero_target.values[1])
        check("PoissonNLLLoss_full_zero_target_masked", gloss.PoissonNLLLoss{compute_full = true}(p, t))
      end)
      it("SigmoidBinaryCrossEntropyLoss's pos_weight", function()
        check("SigmoidBCELoss_pos_weight", gloss.SigmoidBCELoss()(p, z, nil, A({{0.5, 1, 2, 3}})))
        check("SigmoidBCELoss_sigmoid_pos_weight",
              gloss.SigmoidBCELoss{from_sigmoid = true}(npx.sigmoid(p), z, w, A({2})))
      end)
    end)

    describe("losses reject bad input", function()
      it("options", function()
        H.assert_error(function() gloss.HuberLoss{rho = 0} end, {"HuberLoss", "rho must be > 0", "0"})
        H.assert_error(function() gloss.HuberLoss{rho = 0 / 0} end, {"HuberLoss", "rho must be a number"})
        H.assert_error(function() gloss.HingeLoss{margin = "1"} end, {"HingeLoss", "margin must be a number", "'1'"})
        H.assert_error(function() gloss.LogisticLoss{label_format = "sign"} end,
                       {"LogisticLoss", "label_format must be 'signed' or 'binary'", "'sign'"})
        H.assert_error(function() gloss.KLDivLoss{from_logits = 0} end, {"KLDivLoss", "from_logits must be true or false"})
        H.assert_error(function() gloss.PoissonNLLLoss{compute_full = "yes"} end, {"PoissonNLLLoss", "compute_full"})
        H.assert_error(function() gloss.TripletLoss{margins = 1} end, {"TripletLoss", "unknown argument 'margins'"})
        H.assert_error(function() gloss.CosineEmbeddingLoss{weight = "2"} end, {"CosineEmbeddingLoss", "weight must be a number"})
      end)
      it("shapes and types", function()
        H.assert_error(function() gloss.HuberLoss()(p, A({1, 2})) end, {"HuberLoss", "(2,)", "(3,4)"})
        H.assert_error(function() gloss.HingeLoss()(p, {1}) end, {"HingeLoss", "label must be an ndarray"})
        H.assert_error(function() gloss.LogisticLoss()(p, s, 2) end, {"LogisticLoss", "sample_weight must be an ndarray"})
        H.assert_error(function() gloss.KLDivLoss()(p, A({1, 2, 3})) end, {"KLDivLoss", "(3,)", "(3,4)"})
        H.assert_error(function() gloss.CosineEmbeddingLoss()(p, q, A({1, -1})) end,
                       {"CosineEmbeddingLoss", "(2,)", "(3,4)", "expected 3 labels"})
        H.assert_error(function() gloss.TripletLoss()(p, q, A({1})) end, {"TripletLoss", "(1,)", "(3,4)"})
        H.assert_error(function() gloss.PoissonNLLLoss()(p, t:reshape({12, 1}):take(A({0, 1}, "int64"), 0)) end,
                       {"PoissonNLLLoss", "(2,1)", "(3,4)"})
        H.assert_error(function() gloss.HuberLoss{batch_axis = 2}(p, q) end, {"HuberLoss", "batch_axis 2"})
        -- the runtime is still usable
        check("HuberLoss", gloss.HuberLoss()(p, q))
      end)
    end)

    describe("metrics match MXNet 1.9.1", function()
      local L1, P1, L2, P2
      before_each(function()
        L1, P1 = A({0, 1, 1}), A({{0.3, 0.7}, {0.6, 0.4}, {0.2, 0.8}})
        L2, P2 = A({1, 0, 0, 1}), A({{0.9, 0.1}, {0.4, 0.6}, {0.7, 0.3}, {0.1, 0.9}})
      end)
      local function value(m, updates)
        for _, u in ipairs(updates) do m:update(u[1], u[2]) end
        local _, v = m:get()
        return v
      end
      local function close(label, v, tol)
        H.assert_close(v, golden[label].values[1], tol or 1e-12)
      end
      local function two() return {{{L1}, {P1}}, {{L2}, {P2}}} end
      local function reg() return {{{p[0]}, {q[0]}}, {{p[{{1, 3}}]:reshape({-1})}, {q[{{1, 3}}]:reshape({-1})}}} end
      it("MSE, MAE, RMSE", function()
        close("MSE", value(metric.MSE(), reg()))
        close("MSE_2d", value(metric.MSE(), {{p, q}}))
        close("MAE", value(metric.MAE(), reg()))
        close("RMSE", value(metric.RMSE(), reg()))
        -- (n,) against (n, 1) is the same pair
        close("MSE_2d", value(metric.MSE(), {{p:reshape({-1}), q:reshape({12, 1})}}))
        local m = metric.create("rmse")
        assert.equal("rmse", m.name)
        assert.equal(m, metric.create(m))
      end)
      it("F1 and MCC, macro and micro", function()
        close("F1_macro", value(metric.F1(), two()))
        close("F1_micro", value(metric.F1{average = "micro"}, two()))
        close("MCC_macro", value(metric.MCC(), two()))
        close("MCC_micro", value(metric.MCC{average = "micro"}, two()))
        local f = metric.create("f1")
        assert.equal("f1", (f:get()))
        assert.is_true(select(2, f:get()) ~= select(2, f:get()))
      end)
      it("Perplexity, with and without ignore_label", function()
        close("Perplexity_none", value(metric.Perplexity(), two()))
        close("Perplexity_ignore0", value(metric.Perplexity(0), two()))
        close("Perplexity_ignore0", value(metric.create("perplexity", {ignore_label = 0}), two()))
        assert.equal("perplexity", metric.Perplexity().name)
      end)
      it("NegativeLogLikelihood", function()
        close("NegativeLogLikelihood", value(metric.NegativeLogLikelihood(), two()))
        close("NegativeLogLikelihood", value(metric.create("nll_loss"), two()))
        assert.equal("nll-loss", metric.NegativeLogLikelihood().name)
        H.assert_error(function() metric.NegativeLogLikelihood():update(A({0, 2}), A({{0.5, 0.5}, {0.5, 0.5}})) end,
                       {"NegativeLogLikelihood.update", "1 label is outside [0, 2)"})
        H.assert_error(function() metric.NegativeLogLikelihood():update(A({0}), A({0.5, 0.5})) end,
                       {"NegativeLogLikelihood.update", "(1,)", "(2,)"})
        H.assert_error(function() metric.NegativeLogLikelihood{eps = "x"} end, {"NegativeLogLikelihood", "eps"})
      end)
      it("PearsonCorrelation, macro and micro", function()
        close("PearsonCorrelation", value(metric.PearsonCorrelation(), reg()))
        close("PearsonCorrelation_micro", value(metric.PearsonCorrelation{average = "micro"}, reg()))
        assert.equal("pearsonr", metric.create("pearsonr").name)
      end)
      it("CompositeEvalMetric and create(list)", function()
        local c = metric.create({"acc", "f1"})
        local names, values = c:get()
        assert.same({"accuracy", "f1"}, names)
        assert.is_true(values[1] ~= values[1])
        for _, u in ipairs(two()) do c:update(u[1], u[2]) end
        names, values = c:get()
        close("Composite_acc_f1", values[2])
        H.assert_close(values[1], 3 / 7, 1e-12)
        assert.equal("f1", c:get_metric(1).name)
        assert.equal(2, #c:get_name_value())
        assert.equal(("EvalMetric: {'accuracy': %s, 'f1': %s}"):format(tostring(values[1]), tostring(values[2])),
                     tostring(c))
        c:reset()
        local _, v = c:get_metric(0):get()
        assert.is_true(v ~= v)
        local c2 = metric.CompositeEvalMetric()
        c2:add(metric.MSE())
        c2:add("mae")
        assert.same({"mse", "mae"}, (c2:get()))
      end)
      it("BinaryAccuracy (MXNet 2's; by hand): pred > threshold", function()
        local m = metric.BinaryAccuracy()
        m:update(A({0, 1, 1, 0}), A({0.2, 0.7, 0.5, 0.9}))   -- 0 1 0 1: 2 right
        H.assert_close(select(2, m:get()), 0.5, 1e-12)
        local m2 = metric.create("binary_accuracy", {threshold = 0.4})
        m2:update(A({{0, 1}, {1, 0}}), A({{0.2, 0.7}, {0.5, 0.9}}))   -- 0 1 1 1: 3 right
        H.assert_close(select(2, m2:get()), 0.75, 1e-12)
        assert.equal("binary_accuracy", m.name)
        H.assert_error(function() metric.BinaryAccuracy{threshold = 0 / 0} end, {"BinaryAccuracy", "threshold"})
        H.assert_error(function() m:update(A({0, 1}), A({0.5})) end, {"BinaryAccuracy.update", "(2,)", "(1,)"})
        assert.equal("torch", metric.create("torch").name)
        assert.equal("caffe", metric.Caffe().name)
      end)
      it("create(function) is a CustomMetric", function()
        local m = metric.create(function(label, pred) return np.sum(np.equal(label, pred)):item(), label.size end)
        m:update({A({1, 2, 3})}, {A({1, 0, 3})})
        local name, v = m:get()
        assert.equal("custom", name)
        H.assert_close(v, 2 / 3, 1e-12)
      end)
    end)

    describe("metrics reject bad input", function()
      it("options", function()
        H.assert_error(function() metric.F1{average = "binary"} end, {"F1", "'macro' or 'micro'", "'binary'"})
        H.assert_error(function() metric.MCC{average = 1} end, {"MCC", "average"})
        H.assert_error(function() metric.Perplexity(0.5) end, {"Perplexity", "ignore_label", "0.5"})
        H.assert_error(function() metric.create("nope") end, {"unknown metric 'nope'", "mse"})
        H.assert_error(function() metric.create(3) end, {"metric.create", "number"})
        H.assert_error(function() metric.CustomMetric("x") end, {"CustomMetric", "feval"})
        H.assert_error(function() metric.CompositeEvalMetric():get_metric(0) end, {"CompositeEvalMetric", "index 0"})
      end)
      it("shapes and labels", function()
        H.assert_error(function() metric.MSE():update(A({1, 2, 3}), A({1, 2})) end, {"MSE.update", "(3,)", "(2,)"})
        H.assert_error(function() metric.MAE():update({A({1})}, {A({1}), A({2})}) end, {"MAE.update", "1 labels but 2"})
        H.assert_error(function() metric.F1():update(A({0, 2}), A({{1, 0}, {0, 1}})) end,
                       {"F1.update", "1 label is not 0 or 1", "binary"})
        H.assert_error(function() metric.MCC():update(A({0, 1}), A({0.5, 0.5})) end, {"MCC.update", "(2,)", "(N, classes)"})
        H.assert_error(function() metric.PearsonCorrelation():update(A({1, 2}), A({{1, 2}})) end,
                       {"PearsonCorrelation.update", "(2,)", "(1,2)"})
        H.assert_error(function() metric.Perplexity():update(A({0, 1}), A({{0.5, 0.5}})) end,
                       {"Perplexity.update", "shape mismatch"})
        local m = metric.Perplexity()
        m:update(A({0, 3}), A({{0.5, 0.5}, {0.5, 0.5}}))
        H.assert_error(function() m:get() end, {"Perplexity.get", "1 label", "[0, 2)"})
        -- still usable
        local ok = metric.MSE()
        ok:update(A({1, 2}), A({1, 4}))
        H.assert_close(select(2, ok:get()), 2, 1e-12)
      end)
    end)
  end)
end
