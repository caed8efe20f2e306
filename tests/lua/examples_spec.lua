-- examples_spec: the ports of MXNet Gluon programs in examples/ (dcgan.lua,
-- text_cnn.lua, mlp_mixer.lua), estimator.lua and scripts/leaf_train.lua's
-- --csv/--plot run at tiny sizes through their options, in seconds: what
-- they print is parsed, their losses are finite and go down, their files are
-- written.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local root, exists, absolute = H.root, H.exists, H.absolute

-- ok (exit status 0) and what cmd printed
local function run(cmd)
  local out, status = H.sh(cmd)
  return status == 0, out
end

-- Run examples/<name>.lua with options; returns ok and what it printed.
local function example(name, opts)
  local file = root .. "examples/" .. name .. ".lua"
  assert.is_true(exists(file), file)
  return run(("'%s' '%s' %s"):format(absolute(H.luon_exe()), absolute(file), opts))
end

local function numbers(out, pattern)
  local t = {}
  for v in out:gmatch(pattern) do t[#t + 1] = tonumber(v) end
  return t
end

local function finite(v) return v == v and v > -math.huge and v < math.huge end

describe("examples/dcgan.lua", function()
  local dir
  before_each(function() dir = os.tmpname(); os.remove(dir) end)
  after_each(function() run(("rm -rf '%s'"):format(dir)) end)

  -- The discriminator learns first: its loss on the tiny set falls.
  for _, loss in ipairs({"softmax", "sigmoid"}) do
    it("trains both networks (--loss " .. loss .. ") and writes images and parameters", function()
      local ok, out = example("dcgan", ("--batch-size 8 --nz 8 --ngf 4 --ndf 4 --lr 0.001 --limit 16 " ..
                                        "--nepoch 4 --niter 4 --save-image --loss %s --outf '%s'"):format(loss, dir))
      assert.is_true(ok, out)
      local d = numbers(out, "discriminator loss = (%S+),")
      local g = numbers(out, "generator loss = (%S+),")
      assert.equal(8, #d, out)   -- 16 images, batches of 8, 4 epochs
      assert.equal(8, #g, out)
      for k = 1, 8 do assert.is_true(finite(d[k]) and finite(g[k]), out) end
      assert.is_true(d[7] + d[8] < d[1] + d[2], out)
      assert.truthy(out:find("binary training acc at epoch 3: accuracy=", 1, true), out)
      for _, f in ipairs({"generator.params", "discriminator.params", "generator_epoch_3.params",
                          "fake_img_iter_0.png", "real_img_iter_4.png"}) do
        assert.is_true(exists(dir .. "/" .. f), f .. "\n" .. out)
      end
      local img = require("luon").image.imread(dir .. "/fake_img_iter_4.png")
      assert.same({3 * 64, 3 * 64, 3}, img.shape)   -- 8 images on a 3x3 grid
    end)
  end

  it("stops after --max-iters and refuses what it does not port", function()
    local ok, out = example("dcgan", ("--batch-size 4 --nz 4 --ngf 2 --ndf 2 --limit 16 --max-iters 2 " ..
                                      "--check-point false --outf '%s'"):format(dir))
    assert.is_true(ok, out)
    assert.equal(2, #numbers(out, "discriminator loss = (%S+),"), out)
    assert.is_false(exists(dir .. "/generator_epoch_0.params"))
    assert.is_true(exists(dir .. "/generator.params"))
    ok, out = example("dcgan", "--dataset cifar10 --outf " .. dir)
    assert.is_false(ok)
    assert.truthy(out:find("--dataset must be fashion-mnist or fashion-leaf", 1, true), out)
    ok, out = example("dcgan", "--inception_score true --outf " .. dir)
    assert.is_false(ok)
    assert.truthy(out:find("inception score is not ported", 1, true), out)
    ok, out = example("dcgan", "--ngf 0")
    assert.is_false(ok)
    assert.truthy(out:find("--ngf must be a positive integer, got 0", 1, true), out)
  end)
end)

describe("examples/text_cnn.lua", function()
  it("learns which licence a sentence comes from", function()
    local ok, out = example("text_cnn", "--num-embed 16 --num-filter 8 --num-epochs 6 --lr 0.01 --disp-batches 4")
    assert.is_true(ok, out)
    assert.truthy(out:find("Train/Valid split: %d+/%d+"), out)
    local ce = numbers(out, "Train%-cross%-entropy=(%S+)")
    local acc = numbers(out, "Validation%-accuracy=(%S+)")
    assert.equal(6, #ce, out)
    assert.equal(6, #acc, out)
    for k = 1, 6 do assert.is_true(finite(ce[k]), out) end
    assert.is_true(ce[6] < 0.7 * ce[1], out)
    assert.is_true(acc[6] > 0.4, out)    -- four classes: chance is about 0.25
    assert.truthy(out:find("Epoch[0] Batch [4]\tSpeed:", 1, true), out)
  end)

  it("says what is wrong with its options", function()
    local ok, out = example("text_cnn", "--filter-list 3,x")
    assert.is_false(ok)
    assert.truthy(out:find("--filter-list: widths must be integers from 1 to --max-words (40), got x", 1, true), out)
    ok, out = example("text_cnn", "--classes GPL-3,no-such-licence")
    assert.is_false(ok)
    assert.truthy(out:find("cannot read /usr/share/common-licenses/no-such-licence", 1, true), out)
  end)
end)

describe("examples/mlp_mixer.lua", function()
  it("trains on a slice of Fashion-MNIST: the loss falls, the accuracy rises above chance", function()
    local ok, out = example("mlp_mixer", "--epochs 5 --batch-size 32 --limit 256 --test-limit 128 " ..
                                         "--hidden 16 --tokens-mlp 8 --channels-mlp 32 --depth 1")
    assert.is_true(ok, out)
    local loss = numbers(out, "Epoch %d+: loss (%S+),")
    local test_acc = numbers(out, "test acc (%S+),")
    assert.equal(5, #loss, out)
    for k = 1, 5 do assert.is_true(finite(loss[k]), out) end
    assert.is_true(loss[5] < 0.8 * loss[1], out)
    assert.is_true(test_acc[5] > 0.3, out)   -- ten classes: chance is 0.1
  end)

  it("refuses a patch size that does not divide 28", function()
    local ok, out = example("mlp_mixer", "--patch 5")
    assert.is_false(ok)
    assert.truthy(out:find("--patch must divide 28, got 5", 1, true), out)
  end)
end)

-- A tiny fashion-leaf tree (scripts/make_dataset) for the LeafNetwork's
-- programs: 24 training, 16 validation and 8 test images.
describe("the LeafNetwork's programs", function()
  local dir, leaf
  setup(function()
    dir = os.tmpname(); os.remove(dir)
    leaf = dir .. "/leaf"
    local ok, out = run(("'%s' '%sscripts/make_dataset' --out '%s' --size 64 --train 12 --validation 8 " ..
                         "--test 4 --quiet"):format(absolute(H.luon_exe()), absolute(root), leaf))
    assert(ok, out)
  end)
  teardown(function() run(("rm -rf '%s'"):format(dir)) end)

  describe("examples/estimator.lua", function()
    it("trains with checkpoints, early stopping, a CSV log and a chart", function()
      local out_dir = dir .. "/est"
      local ok, out = example("estimator", ("--root '%s' --out '%s' --epochs 3 --batch-size 8 --limit 16 " ..
                                            "--patience 5"):format(leaf, out_dir))
      assert.is_true(ok, out)
      assert.equal(3, #numbers(out, "%[Epoch %d+%] Finished in [%d.]+s, training accuracy: ([%d.]+)"), out)
      assert.truthy(out:find("best checkpoint .-leafnet%-best%.params: validation accuracy=[%d.]+"), out)
      for _, f in ipairs({"leafnet-best.params", "leafnet-epoch2batch6.params", "log.csv", "curves.png"}) do
        assert.is_true(exists(out_dir .. "/" .. f), f .. "\n" .. out)
      end
      local log = require("luon.plot").read_csv(out_dir .. "/log.csv")
      assert.equal(3, #log.rows, out)
      local img = H.luon.image.imread(out_dir .. "/curves.png")
      assert.same({320, 960, 3}, img.shape)
    end)

    it("says what is wrong with its options", function()
      local ok, out = example("estimator", "--epochs 0")
      assert.is_false(ok)
      assert.truthy(out:find("--epochs must be a positive integer, got 0", 1, true), out)
      ok, out = example("estimator", ("--root '%s/none'"):format(dir))
      assert.is_false(ok)
      assert.truthy(out:find("scripts/make_dataset", 1, true), out)
    end)
  end)

  describe("scripts/leaf_train.lua", function()
    it("writes its metrics with --csv and draws them with --plot", function()
      local csv, png = dir .. "/leaf.csv", dir .. "/leaf.png"
      local ok, out = run(("'%s' '%sscripts/leaf_train.lua' --root '%s' --devices cpu:0 --epochs 2 " ..
                           "--batch-size 4 --limit 8 --log-interval 1 --workers 1 --save '%s/leaf.params' " ..
                           "--csv '%s' --plot '%s'"):format(absolute(H.luon_exe()), absolute(root), leaf, dir, csv, png))
      assert.is_true(ok, out)
      local log = require("luon.plot").read_csv(csv)
      assert.same({"epoch", "batch", "kind", "training accuracy", "training loss", "validation accuracy"}, log.columns)
      local kinds = {}
      for _, r in ipairs(log.rows) do kinds[#kinds + 1] = r.kind end
      assert.same({"batch", "batch", "epoch", "batch", "batch", "epoch"}, kinds)
      assert.equal(2, log.rows[6].epoch)
      assert.is_number(log.rows[6]["validation accuracy"])
      local img = H.luon.image.imread(png)
      assert.same({348, 960, 3}, img.shape)   -- loss and accuracy side by side, under a title
      ok, out = run(("'%s' '%sscripts/leaf_train.lua' --plot curves.jpg"):format(absolute(H.luon_exe()), absolute(root)))
      assert.is_false(ok)
      assert.truthy(out:find("--plot expects a .png path", 1, true), out)
    end)
  end)
end)
