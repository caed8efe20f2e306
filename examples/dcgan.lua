-- dcgan.lua: a port of example/gluon/dc_gan/dcgan.py in apache/mxnet 1.x
-- (v1.9.1): the DCGAN of Radford et al., a generator of Conv2DTranspose +
-- BatchNorm + ReLU layers and a discriminator of Conv2D + BatchNorm +
-- LeakyReLU layers, trained against each other with two Adam trainers.
--
--   build/luon examples/dcgan.lua [--dataset fashion-mnist] [--batch-size 64]
--     [--nz 100] [--ngf 64] [--ndf 64] [--nepoch 25] [--niter 10] [--lr 0.0002]
--     [--beta1 0.5] [--cuda] [--netG FILE] [--netD FILE] [--outf ./results]
--     [--check-point true] [--loss softmax|sigmoid] [--save-image]
--     [--max-iters N] [--limit N] [--seed N]
--
-- It prints one line per iteration, as the original's logging.info:
--   discriminator loss = 1.386, generator loss = 0.693, binary training acc = 0.5 at iter 0 epoch 0
-- and per epoch the binary accuracy and the time; parameters are saved to
-- --outf as the original's (generator_epoch_N.params, ..., generator.params).
--
-- Where this port differs from dcgan.py:
-- - Data: the original's cifar10 and mnist need downloads. --dataset
--   fashion-mnist (the default) is Debian's dataset-fashion-mnist through
--   vision.FashionMNIST, the original's mnist branch with Fashion-MNIST's
--   files; fashion-leaf reads the tutorial's image folders (data/fashion-leaf,
--   made by scripts/make_dataset; --data-root to move it). The transformer
--   is the original's: resize to 64x64, to (3,64,64), /128 - 1, gray tiled
--   to three channels.
-- - --loss: softmax (the default) is the original's: the discriminator ends in
--   two channels and SoftmaxCrossEntropyLoss. sigmoid is MXNet's DCGAN
--   tutorial's variant: one channel and SigmoidBinaryCrossEntropyLoss.
-- - Images: the original draws grids of fake and real images with matplotlib
--   every niter iterations, always. Here --save-image asks for them and they
--   are written as PNG grids by luon.image (no title, RGB as generated; the
--   original's buff[:, :, ::-1] swaps to BGR for matplotlib, which shows the
--   channels swapped, a bug not copied).
-- - The inception score (which downloads an Inception model) is not
--   computed; --inception_score true is an error.
-- - --max-iters and --limit (luon's) stop after N iterations and train on the
--   first N images, for quick runs; --seed seeds luon's generator.
local luon = require("luon")
local np, npx, gluon, autograd, image = luon.np, luon.npx, luon.gluon, luon.autograd, luon.image
local nn = gluon.nn

local function usage(msg)
  io.stderr:write((msg and (msg .. "\n") or "") ..
    "usage: luon examples/dcgan.lua [--dataset fashion-mnist|fashion-leaf] [--data-root DIR]\n" ..
    "       [--batch-size 64] [--nz 100] [--ngf 64] [--ndf 64] [--nepoch 25] [--niter 10]\n" ..
    "       [--lr 0.0002] [--beta1 0.5] [--cuda] [--netG FILE] [--netD FILE] [--outf ./results]\n" ..
    "       [--check-point true] [--loss softmax|sigmoid] [--save-image] [--max-iters 0]\n" ..
    "       [--limit 0] [--seed 0]\n")
  os.exit(msg and 2 or 0)
end

-- The original's options (argparse), with its defaults and flags.
local opt = {dataset = "fashion-mnist", data_root = "", batch_size = 64, nz = 100, ngf = 64, ndf = 64,
             nepoch = 25, niter = 10, lr = 0.0002, beta1 = 0.5, cuda = false, netG = "", netD = "",
             outf = "./results", check_point = "true", inception_score = "false", loss = "softmax",
             save_image = false, max_iters = 0, limit = 0, seed = 0}
do
  local a = arg or {}
  local i = 1
  while i <= #a do
    local k = a[i]
    if k == "-h" or k == "--help" then usage() end
    local name, val = k:match("^%-%-([%w%-_]+)=(.*)$")
    name = name or k:match("^%-%-([%w%-_]+)$")
    if not name then usage("unexpected argument: " .. k) end
    local key = name:gsub("%-", "_")
    if opt[key] == nil then usage("unknown option --" .. name) end
    if type(opt[key]) == "boolean" then
      if val ~= nil then usage("--" .. name .. " takes no value") end
      opt[key] = true
    else
      if val == nil then
        i = i + 1
        val = a[i]
        if val == nil then usage("--" .. name .. " needs a value") end
      end
      if type(opt[key]) == "number" then
        local v = tonumber(val)
        if not v then usage(("--%s expects a number, got %s"):format(name, val)) end
        opt[key] = v
      else
        opt[key] = val
      end
    end
    i = i + 1
  end
end
for _, k in ipairs({"batch_size", "nz", "ngf", "ndf", "niter"}) do
  if opt[k] < 1 or opt[k] % 1 ~= 0 then usage(("--%s must be a positive integer, got %s"):format(k, opt[k])) end
end
if opt.loss ~= "softmax" and opt.loss ~= "sigmoid" then usage("--loss must be softmax or sigmoid, got " .. opt.loss) end
if opt.inception_score ~= "false" then usage("--inception_score: the inception score is not ported (it downloads a model)") end
print(("Namespace(batch_size=%d, beta1=%g, check_point=%s, cuda=%s, dataset='%s', loss='%s', lr=%g, ndf=%d, " ..
       "nepoch=%d, netD='%s', netG='%s', ngf=%d, niter=%d, nz=%d, outf='%s')"):format(
  opt.batch_size, opt.beta1, opt.check_point, tostring(opt.cuda), opt.dataset, opt.loss, opt.lr, opt.ndf,
  opt.nepoch, opt.netD, opt.netG, opt.ngf, opt.niter, opt.nz, opt.outf))
np.random.seed(opt.seed)

local nz, ngf, ndf, niter = opt.nz, opt.ngf, opt.ndf, opt.niter
local nc = 3
local ctx = opt.cuda and npx.gpu(0) or npx.cpu()
local batch_size = opt.batch_size
local check_point = opt.check_point ~= "false" and opt.check_point ~= "False"
local outf = opt.outf
os.execute(("mkdir -p '%s'"):format(outf:gsub("'", "'\\''")))

-- Reposition the generated images into one picture: image i at row i // m,
-- column i % m of buf (H,W,C).
local function fill_buf(buf, i, img, shape)
  local m = math.floor(buf.shape[2] / shape[1])
  local sx = (i % m) * shape[1]
  local sy = math.floor(i / m) * shape[2]
  buf[{{sy, sy + shape[2]}, {sx, sx + shape[1]}}] = img
end

-- Scale X (N,C,H,W) to 0..255 over its range and write a square grid as PNG.
local function visual(X, name)
  assert(#X.shape == 4)
  X = np.transpose(X, {0, 2, 3, 1})
  local lo, hi = X:min():item(), X:max():item()
  X = np.clip((X - lo) * (255.0 / math.max(hi - lo, 1e-12)), 0, 255):astype("uint8")
  local n = math.ceil(math.sqrt(X.shape[1]))
  local buff = np.zeros({n * X.shape[2], n * X.shape[3], X.shape[4]}, {dtype = "uint8"})
  for i = 0, X.shape[1] - 1 do fill_buf(buff, i, X[i], {X.shape[2], X.shape[3]}) end
  image.imwrite(name, buff)
end

-- Resize to 64x64, to (3,64,64) float32 in [-1, 1), gray tiled to RGB.
local function transformer(data, label)
  data = image.imresize(data, 64, 64)
  data = np.transpose(data, {2, 0, 1})
  data = data:astype("float32") / 128 - 1
  if data.shape[1] == 1 then data = np.broadcast_to(data, {3, 64, 64}) end
  return data, label
end

local function get_dataset(dataset)
  local vision = gluon.data.vision
  local train, val
  if dataset == "fashion-mnist" then
    local root = opt.data_root ~= "" and opt.data_root or nil
    train = vision.FashionMNIST{root = root, train = true, transform = transformer}
    val = vision.FashionMNIST{root = root, train = false, transform = transformer}
  elseif dataset == "fashion-leaf" then
    local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
    local root = opt.data_root ~= "" and opt.data_root or here .. "../data/fashion-leaf"
    train = vision.ImageFolderDataset(root .. "/train"):transform(transformer)
    val = vision.ImageFolderDataset(root .. "/validation"):transform(transformer)
  else
    usage("--dataset must be fashion-mnist or fashion-leaf (cifar10 and mnist need downloads), got " .. dataset)
  end
  if opt.limit > 0 then train = train:take(opt.limit) end
  local train_data = gluon.data.DataLoader(train, {batch_size = batch_size, shuffle = true, last_batch = "discard"})
  local val_data = gluon.data.DataLoader(val, {batch_size = batch_size, shuffle = false})
  return train_data, val_data
end

local function get_netG()
  local netG = nn.Sequential()
  -- input is Z, going into a convolution
  netG:add(nn.Conv2DTranspose(ngf * 8, 4, 1, 0, {use_bias = false}))
  netG:add(nn.BatchNorm())
  netG:add(nn.Activation("relu"))
  -- state size. (ngf*8) x 4 x 4
  netG:add(nn.Conv2DTranspose(ngf * 4, 4, 2, 1, {use_bias = false}))
  netG:add(nn.BatchNorm())
  netG:add(nn.Activation("relu"))
  -- state size. (ngf*4) x 8 x 8
  netG:add(nn.Conv2DTranspose(ngf * 2, 4, 2, 1, {use_bias = false}))
  netG:add(nn.BatchNorm())
  netG:add(nn.Activation("relu"))
  -- state size. (ngf*2) x 16 x 16
  netG:add(nn.Conv2DTranspose(ngf, 4, 2, 1, {use_bias = false}))
  netG:add(nn.BatchNorm())
  netG:add(nn.Activation("relu"))
  -- state size. (ngf) x 32 x 32
  netG:add(nn.Conv2DTranspose(nc, 4, 2, 1, {use_bias = false}))
  netG:add(nn.Activation("tanh"))
  -- state size. (nc) x 64 x 64
  return netG
end

local n_out = opt.loss == "softmax" and 2 or 1

local function get_netD()
  local netD = nn.Sequential()
  -- input is (nc) x 64 x 64
  netD:add(nn.Conv2D(ndf, 4, 2, 1, {use_bias = false}))
  netD:add(nn.LeakyReLU(0.2))
  -- state size. (ndf) x 32 x 32
  netD:add(nn.Conv2D(ndf * 2, 4, 2, 1, {use_bias = false}))
  netD:add(nn.BatchNorm())
  netD:add(nn.LeakyReLU(0.2))
  -- state size. (ndf*2) x 16 x 16
  netD:add(nn.Conv2D(ndf * 4, 4, 2, 1, {use_bias = false}))
  netD:add(nn.BatchNorm())
  netD:add(nn.LeakyReLU(0.2))
  -- state size. (ndf*4) x 8 x 8
  netD:add(nn.Conv2D(ndf * 8, 4, 2, 1, {use_bias = false}))
  netD:add(nn.BatchNorm())
  netD:add(nn.LeakyReLU(0.2))
  -- state size. (ndf*8) x 4 x 4
  netD:add(nn.Conv2D(n_out, 4, 1, 0, {use_bias = false}))
  -- state size. 2 x 1 x 1 (1 x 1 x 1 with --loss sigmoid)
  return netD
end

local function get_configurations(netG, netD)
  local loss = opt.loss == "softmax" and gluon.loss.SoftmaxCrossEntropyLoss()
                                      or gluon.loss.SigmoidBinaryCrossEntropyLoss()
  netG:initialize(luon.init.Normal(0.02), {device = ctx})
  netD:initialize(luon.init.Normal(0.02), {device = ctx})
  if opt.netG ~= "" then netG:load_parameters(opt.netG, {device = ctx}) end
  if opt.netD ~= "" then netD:load_parameters(opt.netD, {device = ctx}) end
  local trainerG = gluon.Trainer(netG:collect_params(), "adam", {learning_rate = opt.lr, beta1 = opt.beta1})
  local trainerD = gluon.Trainer(netD:collect_params(), "adam", {learning_rate = opt.lr, beta1 = opt.beta1})
  return loss, trainerG, trainerD
end

-- The discriminator's output (B, n_out, 1, 1) as the loss wants it: (B, 2)
-- logits, or (B,) with --loss sigmoid. For the accuracy a sigmoid logit o
-- becomes the pair (0, o), whose argmax is 1 when o > 0.
local function flat(output)
  if n_out == 2 then return output:reshape({-1, 2}) end
  return output:reshape({-1})
end
local function pairs_of(output)
  if n_out == 2 then return output end
  local o = output:reshape({-1, 1})
  return np.concatenate({np.zeros_like(o), o}, 1)
end

local function main()
  local train_data = get_dataset(opt.dataset)
  local netG = get_netG()
  local netD = get_netD()
  local loss, trainerG, trainerD = get_configurations(netG, netD)

  local real_label = np.ones({batch_size}, {device = ctx})
  local fake_label = np.zeros({batch_size}, {device = ctx})

  local metric = gluon.metric.Accuracy()
  print("Training... ")
  local iter = 0
  for epoch = 0, opt.nepoch - 1 do
    local tic = luon.clock()
    for data in train_data do
      ----------------------------------------------------------------
      -- (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
      ----------------------------------------------------------------
      -- train with real_t
      data = data:as_in_context(ctx)
      local noise = np.random.normal(0, 1, {size = {batch_size, nz, 1, 1}, device = ctx})

      local output, errD_real = autograd.record(function()
        local o = flat(netD(data))
        return o, loss(o, real_label)
      end)
      metric:update({real_label}, {pairs_of(output)})

      local fake, errD
      output, fake, errD = autograd.record(function()
        local f = netG(noise)
        local o = flat(netD(f:detach()))
        local errD_fake = loss(o, fake_label)
        return o, f, errD_real + errD_fake
      end)
      errD:backward()
      metric:update({fake_label}, {pairs_of(output)})
      trainerD:step(batch_size)

      ----------------------------------------------------------------
      -- (2) Update G network: maximize log(D(G(z)))
      ----------------------------------------------------------------
      local errG = autograd.record(function()
        return loss(flat(netD(fake)), real_label)
      end)
      errG:backward()
      trainerG:step(batch_size)

      local _, acc = metric:get()
      print(("discriminator loss = %f, generator loss = %f, binary training acc = %f at iter %d epoch %d")
            :format(errD:mean():item(), errG:mean():item(), acc, iter, epoch))
      if opt.save_image and iter % niter == 0 then
        visual(fake, ("%s/fake_img_iter_%d.png"):format(outf, iter))
        visual(data, ("%s/real_img_iter_%d.png"):format(outf, iter))
      end
      iter = iter + 1
      if opt.max_iters > 0 and iter >= opt.max_iters then break end
    end

    local name, acc = metric:get()
    metric:reset()
    print(("\nbinary training acc at epoch %d: %s=%f"):format(epoch, name, acc))
    print(("time: %f"):format(luon.clock() - tic))
    if check_point then
      netG:save_parameters(("%s/generator_epoch_%d.params"):format(outf, epoch))
      netD:save_parameters(("%s/discriminator_epoch_%d.params"):format(outf, epoch))
    end
    if opt.max_iters > 0 and iter >= opt.max_iters then break end
  end
  netG:save_parameters(outf .. "/generator.params")
  netD:save_parameters(outf .. "/discriminator.params")
end

main()
