-- gluon_metric_spec: Accuracy, TopKAccuracy, Loss and CrossEntropy: counts,
-- get/reset/get_name_value, lists of arrays on several devices, errors.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local metric = require("luon.gluon.metric")

local function is_nan(v) return v ~= v end

for _, dev in ipairs(H.devices()) do
  describe("on " .. tostring(dev), function()
    local function A(t, dt) return np.array(t, {dtype = dt, device = dev}) end

    describe("Accuracy", function()
      it("argmax over axis 1, counted (MXNet's test_acc: 2/3)", function()
        local acc = metric.Accuracy()
        acc:update({A({0, 1, 1})}, {A({{0.3, 0.7}, {0, 1}, {0.4, 0.6}})})
        local name, v = acc:get()
        assert.equal("accuracy", name)
        H.assert_close(v, 2 / 3, 1e-12)
        assert.equal(3, acc.num_inst)
      end)
      it("2-d labels are flattened after the argmax (test_acc_2d_label: 2/6)", function()
        local acc = metric.Accuracy()
        acc:update(A({{0, 1, 1}, {1, 0, 1}}), A({{.3, .7}, {0, 1}, {.4, .6}, {.8, .2}, {.3, .5}, {.6, .4}}))
        local _, v = acc:get()
        H.assert_close(v, 2 / 6, 1e-12)
      end)
      it("class indices, int labels and float labels (truncated)", function()
        local acc = metric.Accuracy()
        acc:update(A({0, 1, 2, 3}, "int64"), A({0, 1, 0, 3}, "int64"))
        acc:update(A({1.0, 2.9}), A({1, 2}, "int32"))
        local _, v = acc:get()
        H.assert_close(v, 5 / 6, 1e-12)
        assert.equal(6, acc.num_inst)
      end)
      it("accumulates over updates until reset; NaN when empty", function()
        local acc = metric.Accuracy()
        local name, v = acc:get()
        assert.equal("accuracy", name)
        assert.is_true(is_nan(v))
        acc:update(A({1}), A({{0, 1}}))
        acc:update(A({0}), A({{0, 1}}))
        local _, v2 = acc:get()
        assert.equal(0.5, v2)
        acc:update(A({1, 1}), A({{0, 1}, {0, 1}}))
        local _, v3 = acc:get()
        assert.equal(0.75, v3)
        assert.same({{"accuracy", 0.75}}, acc:get_name_value())
        assert.equal("EvalMetric: {'accuracy': 0.75}", tostring(acc))
        acc:reset()
        local _, v4 = acc:get()
        assert.is_true(is_nan(v4))
        assert.equal(0, acc.num_inst)
      end)
      it("axis picks the class axis", function()
        local acc = metric.Accuracy{axis = 0}
        acc:update(A({1, 0}), A({{0.1, 0.9}, {0.8, 0.2}}))   -- argmax over rows: [1, 0]
        local _, v = acc:get()
        assert.equal(1, v)
      end)
      it("errors name both lengths or both shapes", function()
        local acc = metric.Accuracy()
        H.assert_error(function() acc:update({A({0}), A({1})}, {A({{1, 0}})}) end, {"2 labels", "1 predictions"})
        H.assert_error(function() acc:update(A({0, 1, 1}), A({{1, 0}, {0, 1}})) end, {"(3,)", "(2,2)"})
        H.assert_error(function() acc:update({A({0})}, {42}) end, {"preds[1] is not an ndarray"})
        -- nothing was counted by the failed calls
        assert.equal(0, acc.num_inst)
      end)
    end)

    describe("TopKAccuracy", function()
      local pred, label
      before_each(function()
        pred = A({{0.1, 0.5, 0.4}, {0.6, 0.3, 0.1}, {0.2, 0.3, 0.5}})
        label = A({2, 2, 0})
      end)
      it("counts labels among the top k scores", function()
        local m = metric.TopKAccuracy{top_k = 2}
        m:update({label}, {pred})
        local name, v = m:get()
        assert.equal("top_k_accuracy_2", name)
        H.assert_close(v, 1 / 3, 1e-12)
        local all = metric.TopKAccuracy(3)
        all:update(label, pred)
        local _, v3 = all:get()
        assert.equal(1, v3)
      end)
      it("never counts a label outside the classes (MXNet's argpartition never matches it)", function()
        local m = metric.TopKAccuracy(3)
        m:update(A({9, -3, 1}), pred)
        local _, v = m:get()
        H.assert_close(v, 1 / 3, 1e-12)
      end)
      it("rejects top_k <= 1", function()
        H.assert_error(function() metric.TopKAccuracy{top_k = 1} end, {"use Accuracy"})
      end)
    end)

    describe("update{labels =, preds =}", function()
      it("every metric takes MXNet's keywords in a table", function()
        local label, pred = A({0, 1, 1}), A({{0.3, 0.7}, {0, 1}, {0.4, 0.6}})
        local makers = {function() return metric.Accuracy() end, function() return metric.TopKAccuracy{top_k = 2} end,
                        function() return metric.CrossEntropy() end, function() return metric.Loss() end}
        for _, make in ipairs(makers) do
          local m, ref = make(), make()
          m:update{labels = {label}, preds = {pred}}
          ref:update({label}, {pred})
          assert.same({ref:get()}, {m:get()})
          m:update{preds = pred, labels = label}
          ref:update(label, pred)
          assert.same({ref:get()}, {m:get()})
          H.assert_error(function() m:update{label = label, preds = pred} end,
                         {".update: unknown argument 'label'", "labels, preds"})
        end
        local l = metric.Loss()
        l:update{preds = A({2, 4})}
        assert.equal(3, select(2, l:get()))
      end)
    end)

    describe("Loss", function()
      it("averages the loss values; labels are ignored", function()
        local m = metric.Loss()
        m:update(nil, {A({1, 2, 3}), A({4})})
        local name, v = m:get()
        assert.equal("loss", name)
        assert.equal(2.5, v)
        m:update(nil, A({{5}}))
        local _, v2 = m:get()
        assert.equal(3, v2)
        assert.equal(5, m.num_inst)
      end)
    end)

    describe("CrossEntropy", function()
      it("is the mean of -log p[label] (MXNet's docstring example)", function()
        local m = metric.CrossEntropy()
        m:update({A({0, 1, 1})}, {A({{0.3, 0.7}, {0, 1}, {0.4, 0.6}})})
        local name, v = m:get()
        assert.equal("cross-entropy", name)
        H.assert_close(v, -(math.log(0.3) + math.log(1) + math.log(0.6)) / 3, 1e-6)
      end)
      it("eps guards log(0)", function()
        local m = metric.CrossEntropy{eps = 1e-4}
        m:update(A({0}), A({{0, 1}}))
        local _, v = m:get()
        H.assert_close(v, -math.log(1e-4), 1e-5)
      end)
      it("from_logits applies softmax first", function()
        local m = metric.CrossEntropy{from_logits = true}
        m:update(A({1}), A({{0, 0}}))
        local _, v = m:get()
        H.assert_close(v, math.log(2), 1e-6)
      end)
      it("ignore_label drops those samples from the count", function()
        local m = metric.CrossEntropy{ignore_label = -1}
        m:update(A({0, -1}), A({{0.5, 0.5}, {0.9, 0.1}}))
        local _, v = m:get()
        H.assert_close(v, math.log(2), 1e-6)
        assert.equal(1, m.num_inst)
      end)
      it("a label outside the classes is an error from get(), until reset()", function()
        local m = metric.CrossEntropy()
        m:update(A({0, 2}), A({{0.5, 0.5}, {0.9, 0.1}}))
        m:update(A({-1}), A({{0.5, 0.5}}))
        for _ = 1, 2 do
          H.assert_error(function() m:get() end,
                         {"CrossEntropy.get", "2 labels", "outside [0, 2)", "reset()"})
        end
        m:reset()
        m:update(A({1}), A({{0.5, 0.5}}))
        local _, v = m:get()
        H.assert_close(v, math.log(2), 1e-6)
        -- predictions of different widths: the message names no one range
        m:reset()
        m:update(A({2}), A({{0.5, 0.5}}))
        m:update(A({0}), A({{0.2, 0.3, 0.5}}))
        H.assert_error(function() m:get() end, {"1 label", "was outside [0, classes)"})
        -- an ignore_label outside the classes is not counted
        local ig = metric.CrossEntropy{ignore_label = 5}
        ig:update(A({0, 5}), A({{0.5, 0.5}, {0.9, 0.1}}))
        H.assert_close(select(2, ig:get()), math.log(2), 1e-6)
      end)
    end)
  end)
end

describe("metrics over several devices", function()
  it("Accuracy.update with lists split across cpu(0) and cpu(1), as the tutorial", function()
    local devs = {npx.cpu(0), npx.cpu(1)}
    if npx.num_gpus() > 0 then devs[#devs + 1] = npx.gpu(0) end
    local labels, preds = {}, {}
    for k, d in ipairs(devs) do
      labels[k] = np.array({0, 1}, {device = d})
      preds[k] = np.array({{0.9, 0.1}, {k % 2, 1 - k % 2}}, {device = d})
    end
    local acc = metric.Accuracy()
    acc:update(labels, preds)
    -- sample 2 is right where k is even
    local right = 0
    for k = 1, #devs do right = right + 1 + (k % 2 == 0 and 1 or 0) end
    local _, v = acc:get()
    H.assert_close(v, right / (2 * #devs), 1e-12)
  end)
  it("a prediction on another device is compared on the label's device", function()
    local acc = metric.Accuracy()
    acc:update(np.array({1, 0}, {device = npx.cpu(0)}), np.array({{0, 1}, {0, 1}}, {device = npx.cpu(1)}))
    local _, v = acc:get()
    assert.equal(0.5, v)
  end)
  it("create by name and alias", function()
    assert.equal("accuracy", metric.create("acc").name)
    assert.equal("top_k_accuracy_3", metric.create("top_k_acc", {top_k = 3}).name)
    assert.equal("cross-entropy", metric.create("ce").name)
    H.assert_error(function() metric.create("f2") end, {"unknown metric 'f2'", "acc"})
  end)
end)

describe("F1 and MCC labels", function()
  it("refuse a fractional or negative label instead of truncating it", function()
    local metric = H.luon.gluon.metric
    local pred = np.array({{0.1, 0.9}, {0.1, 0.9}, {0.9, 0.1}})
    for _, name in ipairs({"F1", "MCC"}) do
      H.assert_error(function() metric[name]():update(np.array({1.9, 1, 0}), pred) end,
                     {name .. ".update: 1 label is not 0 or 1"})
      H.assert_error(function() metric[name]():update(np.array({1, 1, -0.5}), pred) end, {"not 0 or 1"})
    end
  end)
end)
