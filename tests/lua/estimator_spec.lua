-- estimator_spec: gluon.contrib.estimator's fit loop on every device (the
-- handlers' order and priorities, stopping by epochs, batches and early
-- stopping, checkpoints kept best-by-monitor and at most max_checkpoints,
-- resuming the epoch count, gradient clipping, learning-rate schedules,
-- data-parallel equal to one device), CSVLogHandler's file, luon.plot's
-- PNG, and bad input.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local luon, np, npx = H.luon, H.np, H.npx
local gluon = luon.gluon
local nn = gluon.nn
local estimator = gluon.contrib.estimator
local plot = require("luon.plot")

local quiet = {info = function() end, warning = function() end}

-- 12 samples of 4 features in 2 classes (the sign of the first feature).
local function loader(batch_size)
  local x = np.array({{1, 0.5, 0, 0}, {-1, 0, 0.5, 0}, {2, 0, 0, 1}, {-2, 1, 0, 0},
                      {0.5, 0, 1, 0}, {-0.5, 0, 0, 1}, {1.5, 1, 0, 0}, {-1.5, 0, 1, 0},
                      {1, 0, 0, 0}, {-1, 1, 1, 0}, {3, 0, 0, 0}, {-3, 0, 0, 0}})
  local y = np.array({1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}, {dtype = "int32"})
  return gluon.data.DataLoader(gluon.data.ArrayDataset(x, y), {batch_size = batch_size or 4})
end

local function make(devices, opts)
  opts = opts or {}
  local net = nn.Dense(2, {in_units = 4})
  net:initialize({init = luon.init.Xavier(), device = devices})
  local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = opts.lr or 0.1})
  local est = estimator.Estimator{net = net, loss = gluon.loss.SoftmaxCrossEntropyLoss(), trainer = trainer,
                                  devices = devices, train_metrics = opts.train_metrics}
  est.logger = quiet
  return est, net
end

-- A handler that appends "<tag>:<hook>" to log at every hook.
local function recorder(log, tag, priority)
  local h = {priority = priority}
  for _, hook in ipairs(estimator.event_handler.hooks) do
    h[hook] = function() log[#log + 1] = (tag and tag .. ":" or "") .. hook end
  end
  return h
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  return d
end

local function rm(path) H.sh("rm -rf " .. H.quote(path)) end

local function files(dir)
  local out = {}
  for _, e in ipairs(require("luon.core").list_dir(dir, "files")) do out[#out + 1] = e.name end
  return out
end

local function weight(net) return net:collect_params():values()[1]:data():totable() end

for _, dev in ipairs(H.devices()) do
  describe("Estimator on " .. tostring(dev), function()
    it("calls the hooks in order, by priority, and stops after the epochs", function()
      local est = make({dev})
      local log = {}
      est:fit(loader(), {epochs = 2, event_handlers = {recorder(log, "b", 5), recorder(log, "a", -5)}})
      local want = {"a:train_begin", "b:train_begin"}
      for _ = 1, 2 do
        want[#want + 1] = "a:epoch_begin"; want[#want + 1] = "b:epoch_begin"
        for _ = 1, 3 do
          for _, hk in ipairs({"batch_begin", "batch_end"}) do
            want[#want + 1] = "a:" .. hk; want[#want + 1] = "b:" .. hk
          end
        end
        want[#want + 1] = "a:epoch_end"; want[#want + 1] = "b:epoch_end"
      end
      want[#want + 1] = "a:train_end"; want[#want + 1] = "b:train_end"
      assert.same(want, log)
      -- the default metrics: accuracy for a softmax cross-entropy, and the loss
      assert.equal("training accuracy", est.train_metrics[1].name)
      assert.equal("validation softmaxcrossentropyloss", est.val_metrics[2].name)
      local _, loss = est.train_metrics[2]:get()
      assert.is_true(loss > 0 and loss < 5)
    end)

    it("trains by batches, across epochs", function()
      local est = make({dev})
      local log = {}
      est:fit(loader(), {batches = 5, event_handlers = recorder(log)})
      local n, e = 0, 0
      for _, v in ipairs(log) do
        if v == "batch_end" then n = n + 1 elseif v == "epoch_end" then e = e + 1 end
      end
      assert.equal(5, n)
      assert.equal(2, e)
    end)

    it("learns, validates, and evaluates", function()
      local est = make({dev}, {lr = 0.5})
      est:fit(loader(), {val_data = loader(), epochs = 15})
      local _, acc = est.val_metrics[1]:get()
      assert.is_true(acc >= 0.9, tostring(acc))
      est.val_metrics[1]:reset()
      est:evaluate(loader())
      local _, again = est.val_metrics[1]:get()
      assert.equal(acc, again)
    end)

    it("stops early when the monitor does not improve", function()
      local est = make({dev}, {lr = 0})
      local log = {}
      local stop = estimator.EarlyStoppingHandler(est.train_metrics[2], {patience = 2, mode = "min"})
      est:fit(loader(), {epochs = 10, event_handlers = {stop, recorder(log)}})
      local e = 0
      for _, v in ipairs(log) do if v == "epoch_end" then e = e + 1 end end
      assert.equal(3, e)   -- epoch 0 sets the best; 1 and 2 do not improve
      assert.equal(2, stop.stopped_epoch)
      -- a baseline never reached stops after patience epochs
      est = make({dev}, {lr = 0})
      log = {}
      stop = estimator.EarlyStoppingHandler{monitor = est.train_metrics[1], baseline = 2, patience = 1}
      est:fit(loader(), {epochs = 10, event_handlers = {stop, recorder(log)}})
      e = 0
      for _, v in ipairs(log) do if v == "epoch_end" then e = e + 1 end end
      assert.equal(1, e)
    end)

    it("keeps max_checkpoints checkpoints and the best by the monitor", function()
      local dir = tmpdir()
      -- a metric whose value per epoch is scripted: best (max) at epoch 1
      local Scripted = require("luon.core").class("Scripted", gluon.metric.EvalMetric)
      function Scripted:update() end
      function Scripted:get() return self.name, self.value or 0 / 0 end
      local scripted = Scripted("scripted")
      local est = make({dev}, {train_metrics = {gluon.metric.Accuracy(), scripted}})
      local values, epoch = {0.5, 0.9, 0.7, 0.8}, 0
      local setter = {priority = -5000, epoch_end = function() epoch = epoch + 1; scripted.value = values[epoch] end}
      local ck = estimator.CheckpointHandler(dir, {model_prefix = "m", monitor = scripted, save_best = true, mode = "max",
                                                  max_checkpoints = 2})
      local saved = {}
      local keeper = {priority = 10, epoch_end = function()
        saved[epoch] = H.read_file(dir .. ("/m-epoch%dbatch%d.params"):format(epoch - 1, 3 * epoch))
      end}
      est:fit(loader(), {epochs = 4, event_handlers = {setter, ck, keeper}})
      -- each checkpoint is the parameters and the trainer's states
      assert.same({"m-best.params", "m-best.states", "m-epoch2batch9.params", "m-epoch2batch9.states",
                   "m-epoch3batch12.params", "m-epoch3batch12.states"}, files(dir))
      assert.equal(saved[2], H.read_file(dir .. "/m-best.params"))
      assert.not_equal(saved[4], saved[2])
      assert.equal(0.9, ck.best)
      rm(dir)
    end)

    it("resumes from the last checkpoint and continues the epoch count", function()
      local dir = tmpdir()
      local est, net = make({dev})
      est:fit(loader(), {epochs = 2, event_handlers = estimator.CheckpointHandler(dir)})
      local trained = weight(net)
      local est2, net2 = make({dev})
      local log, at_start = {}, nil
      local probe = {priority = 100, train_begin = function() at_start = weight(net2) end}
      est2:fit(loader(), {epochs = 5, event_handlers = {estimator.CheckpointHandler(dir, {resume_from_checkpoint = true}),
                                                        probe, recorder(log)}})
      H.assert_close(at_start, trained, 0)
      local e = 0
      for _, v in ipairs(log) do if v == "epoch_end" then e = e + 1 end end
      assert.equal(3, e)
      assert.same({"model-epoch0batch3.params", "model-epoch0batch3.states", "model-epoch1batch6.params",
                   "model-epoch1batch6.states", "model-epoch2batch9.params", "model-epoch2batch9.states",
                   "model-epoch3batch12.params", "model-epoch3batch12.states", "model-epoch4batch15.params",
                   "model-epoch4batch15.states"}, files(dir))
      -- all epochs done: an error that says so
      local est3 = make({dev})
      H.assert_error(function()
        est3:fit(loader(), {epochs = 5, event_handlers = estimator.CheckpointHandler(dir, {resume_from_checkpoint = true})})
      end, {"maximum number of epochs (5)"})
      rm(dir)
    end)

    it("clips the gradients by their global norm", function()
      local est, net = make({dev}, {lr = 1})
      local before = weight(net)
      est:fit(loader(), {batches = 1, event_handlers = estimator.GradientUpdateHandler{clip_global_norm = 1e-3}})
      local after = weight(net)
      local s = 0
      for i = 1, #before do for j = 1, #before[i] do s = s + (after[i][j] - before[i][j]) ^ 2 end end
      assert.is_true(math.sqrt(s) <= 1e-3 * 1.001, tostring(math.sqrt(s)))
      assert.is_true(math.sqrt(s) > 0)
    end)

    it("schedules the learning rate by epoch", function()
      local est = make({dev})
      local seen = {}
      local probe = {epoch_begin = function(_, e) seen[#seen + 1] = e.trainer.learning_rate end}
      est:fit(loader(), {epochs = 3, event_handlers = {
        estimator.LRSchedulerHandler(function(epoch) return 0.1 * 0.5 ^ epoch end), probe}})
      H.assert_close(seen, {0.1, 0.05, 0.025}, 1e-12)
    end)

    it("writes a CSV log and draws it", function()
      local dir = tmpdir()
      require("luon.core").make_dirs(dir, "test")
      local est = make({dev})
      local csv, png = dir .. "/log.csv", dir .. "/curves.png"
      est:fit(loader(), {val_data = loader(), epochs = 2,
                         event_handlers = estimator.CSVLogHandler(csv, {batch_period = 2, plot = png})})
      local log = plot.read_csv(csv)
      assert.same({"epoch", "batch", "kind", "training accuracy", "training softmaxcrossentropyloss",
                   "validation accuracy", "validation softmaxcrossentropyloss"}, log.columns)
      local kinds = {}
      for _, r in ipairs(log.rows) do kinds[#kinds + 1] = r.kind .. ":" .. r.batch .. ":" .. r.epoch end
      assert.same({"batch:2:0.666667", "epoch:3:1", "batch:4:1.33333", "batch:6:2", "epoch:6:2"}, kinds)
      assert.is_nil(log.rows[1]["validation accuracy"])
      local _, vacc = est.val_metrics[1]:get()
      H.assert_close(log.rows[5]["validation accuracy"], vacc, 1e-5)
      local img = luon.image.imread(png)
      assert.same({320, 960, 3}, img.shape)
      rm(dir)
    end)

    it("refuses bad input and stays usable", function()
      local est = make({dev})
      local tr = loader()
      H.assert_error(function() est:fit(tr, {epochs = 1, event_handlers = {{epoch_ends = function() end}}}) end,
                     {"epoch_ends", "did you mean 'epoch_end'"})
      H.assert_error(function() est:fit(tr, {epochs = 1, event_handlers = {{on_end = function() end}}}) end,
                     {"on_end", "no event"})
      H.assert_error(function() est:fit(tr, {epochs = 1, event_handlers = {{priority = 1}}}) end,
                     {"none of the event methods"})
      H.assert_error(function() est:fit(tr, {epochs = 1, event_handlers = {42}}) end, {"event_handlers[1]"})
      H.assert_error(function() est:fit(tr, {epochs = 1, batches = 2}) end, {"exactly one of epochs"})
      H.assert_error(function() est:fit(tr) end, {"exactly one of epochs"})
      H.assert_error(function() est:fit(np.ones({4, 4}), {epochs = 1}) end, {"train_data must be a gluon.data.DataLoader"})
      H.assert_error(function() est:fit(tr, {epochs = 0}) end, {"epochs must be an integer >= 1"})
      H.assert_error(function() est:fit(tr, {epoch = 1}) end, {"unknown argument 'epoch'", "epochs"})
      H.assert_error(function() estimator.Estimator{net = 1, loss = gluon.loss.L2Loss()} end, {"net must be a gluon Block"})
      H.assert_error(function() estimator.Estimator{net = nn.Dense(1), loss = function() end} end,
                     {"loss must be a gluon.loss.Loss"})
      H.assert_error(function() estimator.Estimator{net = nn.Dense(1), loss = gluon.loss.L2Loss(), devices = "cpu"} end,
                     {"devices (MXNet's context) must be a device"})
      H.assert_error(function() estimator.Estimator{net = nn.Dense(1), loss = gluon.loss.L2Loss(), trainer = {}} end,
                     {"trainer must be a gluon.Trainer"})
      H.assert_error(function() estimator.LoggingHandler{log_interval = 0} end, {"log_interval must be 'epoch'"})
      H.assert_error(function() estimator.EarlyStoppingHandler() end, {"monitor must be one of the metrics"})
      H.assert_error(function() estimator.EarlyStoppingHandler(est.train_metrics[1], {mode = "maximum"}) end,
                     {"mode must be 'auto', 'min' or 'max'", "'maximum'"})
      H.assert_error(function() estimator.CheckpointHandler("/tmp", {save_best = true}) end, {"monitor must be"})
      H.assert_error(function() estimator.GradientUpdateHandler{clip_global_norm = -1} end, {"clip_global_norm must be"})
      H.assert_error(function() estimator.CSVLogHandler(nil) end, {"CSVLogHandler: path must be a non-empty string"})
      -- a metric outside the estimator's, beside the default handlers
      local other = gluon.metric.Accuracy()
      H.assert_error(function() est:fit(tr, {epochs = 1, event_handlers = estimator.EarlyStoppingHandler(other)}) end,
                     {"outside the known training and validation metrics"})
      -- a path that cannot be written: an error, the previous file left
      local file = os.tmpname()
      H.write_file(file, "previous")
      H.assert_error(function()
        est:fit(tr, {epochs = 1, event_handlers = estimator.CSVLogHandler(file .. "/log.csv")})
      end, {"CSVLog: cannot write", "log.csv"})
      assert.equal("previous", H.read_file(file))
      -- and the estimator still trains
      local log = {}
      est:fit(tr, {epochs = 1, event_handlers = recorder(log)})
      assert.equal("train_end", log[#log])
      os.remove(file)
    end)
  end)
end

describe("Estimator on several devices", function()
  it("splits each batch and gives what one device gives", function()
    local devs = {npx.cpu(0), npx.cpu(1)}
    local est1, net1 = make({npx.cpu(0)})
    local file = os.tmpname()
    net1:save_parameters(file)
    local est2, net2 = make(devs)
    net2:load_parameters(file, {device = devs})
    os.remove(file)
    est1:fit(loader(), {epochs = 2})
    est2:fit(loader(), {epochs = 2})
    H.assert_close(weight(net2), weight(net1), 1e-5)
    local _, a1 = est1.train_metrics[2]:get()
    local _, a2 = est2.train_metrics[2]:get()
    H.assert_close(a2, a1, 1e-5)
  end)
end)

describe("luon.plot", function()
  it("draws a table log, with a title, into a PNG of the panels' size", function()
    local dir = tmpdir()
    require("luon.core").make_dirs(dir, "test")
    local log = {columns = {"epoch", "batch", "kind", "training loss", "validation loss", "training mae"},
                 rows = {{epoch = 1, batch = 5, kind = "epoch", ["training loss"] = 1.0, ["validation loss"] = 1.2,
                          ["training mae"] = 0.5},
                         {epoch = 2, batch = 10, kind = "epoch", ["training loss"] = 0.6, ["validation loss"] = 0.9,
                          ["training mae"] = 0.3}}}
    local png = dir .. "/c.png"
    assert.equal(png, plot.curves(log, png, {title = "run", width = 300, height = 200, columns = 1}))
    local img = luon.image.imread(png)
    assert.same({428, 300, 3}, img.shape)   -- two panels of 200 and a title of 28
    -- the picture is not blank: some pixels are dark (text, frame, lines)
    assert.is_true(img:astype("float32"):min():item() < 100)
    -- a file in the way of the temporary one: an error, the previous PNG left
    local before = H.read_file(png)
    H.sh("mkdir " .. H.quote(png .. ".part"))
    H.assert_error(function() plot.curves(log, png) end, {"plot.curves: cannot write"})
    assert.equal(before, H.read_file(png))
    H.assert_error(function() plot.curves(log, dir .. "/c.jpg") end, {"must end in .png"})
    H.assert_error(function() plot.curves(42, png) end, {"log must be a CSV path or a table"})
    H.assert_error(function() plot.curves(log, png, {colour = 1}) end, {"unknown option 'colour'"})
    H.assert_error(function() plot.curves(dir .. "/none.csv", png) end, {"plot.read_csv: cannot read"})
    H.assert_error(function() plot.curves({columns = {"epoch", "batch", "kind"}, rows = {}}, png) end,
                   {"no metric columns"})
    rm(dir)
  end)

  it("names the Debian package when cairo cannot be loaded", function()
    local ffi = require("ffi")
    local real = ffi.load
    local fresh = assert(loadfile(H.root .. "lua/luon/plot.lua"))()   -- a copy that has not loaded cairo yet
    local log = {columns = {"epoch", "batch", "kind", "training loss"},
                 rows = {{epoch = 1, batch = 1, kind = "epoch", ["training loss"] = 1}}}
    ffi.load = function(name, ...)
      if tostring(name):find("cairo", 1, true) then error("cannot open shared object file") end
      return real(name, ...)
    end
    local ok, err = pcall(fresh.curves, log, "/nonexistent/curves.png")   -- never written
    ffi.load = real
    assert.is_false(ok)
    assert.truthy(tostring(err):find("install the Debian package libcairo2", 1, true), err)
  end)
end)

describe("estimator details", function()
  it("auto mode maximises MCC and Pearson's r; a scheduler object counts from 1; CSVLog refuses extra values", function()
    assert.are.equal("max", estimator.EarlyStoppingHandler(gluon.metric.MCC()).mode)
    assert.are.equal("max", estimator.EarlyStoppingHandler(gluon.metric.PearsonCorrelation()).mode)
    assert.are.equal("min", estimator.EarlyStoppingHandler(gluon.metric.Loss()).mode)
    local seen = {}
    local sched = setmetatable({}, {__call = function(_, n) seen[#seen + 1] = n; return 0.1 end})
    local h = estimator.LRSchedulerHandler(sched, {period = "batch"})
    local est = {training = true, trainer = {set_learning_rate = function() end}}
    h:train_begin(est)
    h:batch_begin(est)
    h:batch_begin(est)
    assert.are.same({1, 2}, seen)
    local fn_seen = {}
    local hf = estimator.LRSchedulerHandler(function(n) fn_seen[#fn_seen + 1] = n; return 0.1 end)
    hf:train_begin(est)
    hf:epoch_begin(est)
    assert.are.same({0}, fn_seen)
    local path = os.tmpname()
    local log = plot.CSVLog(path, {"a", "b"})
    H.assert_error(function() log:write(1, 2, "epoch", {1, 2, 3}) end, {"at most 2", "got 3 values"})
    os.remove(path)
  end)
end)
