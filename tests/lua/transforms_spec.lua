-- transforms_spec: gluon.data.vision.transforms (luon.gluon.data.transforms):
-- hand-computed values on tiny images for every transform, MXNet's size
-- rules, Compose (C pipelines and Lua functions), reproducibility under
-- np.random.seed, fused == reference, errors naming the transform.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np = H.np
local T = require("luon.gluon.data.transforms")

local function u8(t) return np.array(t, {dtype = "uint8"}) end
local function flat(x) return x:reshape({-1}):totable() end

-- a 2x3 RGB image
local IMG23 = {{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}, {{10, 11, 12}, {13, 14, 15}, {16, 17, 18}}}

local function photo(h, w, c)
  local t, seed = {}, 12345
  for y = 1, h do
    local row = {}
    for x = 1, w do
      local px = {}
      for ch = 1, c do
        seed = (seed * 1103515245 + 12345) % 2147483648
        px[ch] = (math.floor(x * 255 / w + y * 128 / h) + ch * 60 + seed % 21) % 256
      end
      row[x] = px
    end
    t[y] = row
  end
  return u8(t)
end

describe("transforms", function()
  describe("Resize", function()
    it("follows MXNet's size rules", function()
      local img = np.zeros({300, 200, 3}, {dtype = "uint8"})
      assert.same({225, 150, 3}, T.Resize(150, {keep_ratio = true})(img).shape)
      assert.same({225, 150, 3}, T.Resize{size = 150, keep_ratio = true}(img).shape)
      assert.same({200, 200, 3}, T.Resize(200)(img).shape)
      assert.same({100, 200, 3}, T.Resize({200, 100})(img).shape)
      assert.same({224, 298, 3}, T.Resize{size = 224, keep_ratio = true}(np.zeros({480, 640, 3}, {dtype = "uint8"})).shape)
      local y = T.Resize(150, true)(img)
      assert.equal("uint8", y.dtype)
    end)
    it("rejects unknown keywords, naming the known ones (all transforms)", function()
      H.assert_error(function() return T.Resize{size = 4, interp = 1} end,
                     {"Resize: unknown argument 'interp' (known: size, keep_ratio, interpolation)"})
      H.assert_error(function() return T.RandomCrop(4, {padding = 1}) end, {"RandomCrop: unknown argument 'padding'"})
      H.assert_error(function() return T.RandomResizedCrop{size = 4, scales = {0.5, 1}} end,
                     {"RandomResizedCrop: unknown argument 'scales'", "did you mean 'scale'?"})
      H.assert_error(function() return T.RandomFlipLeftRight{prob = 0.5} end, {"RandomFlipLeftRight: unknown argument 'prob'"})
      H.assert_error(function() return T.RandomBrightness{brightnes = 0.1} end, {"RandomBrightness: unknown argument 'brightnes'"})
      H.assert_error(function() return T.RandomColorJitter{hues = 0.1} end, {"RandomColorJitter: unknown argument 'hues'"})
      H.assert_error(function() return T.Normalize{mean = 0, sd = 1} end, {"Normalize: unknown argument 'sd'"})
      H.assert_error(function() return T.Cast{dtyp = "float32"} end, {"Cast: unknown argument 'dtyp'"})
    end)
    it("resamples as OpenCV's bilinear (2x2 -> 4x4, 11-bit fixed point)", function()
      local img = u8({{{0}, {100}}, {{200}, {255}}})
      assert.same({0, 25, 75, 100, 50, 72, 117, 139, 150, 167, 200, 216, 200, 214, 241, 255},
                  flat(T.Resize(4)(img)))
      local f = np.array({{{0}, {100}}, {{200}, {255}}}, {dtype = "float32"})
      H.check(T.Resize(4)(f):reshape({-1}), {0, 25, 75, 100, 50, 72.1875, 116.5625, 138.75,
                                             150, 166.5625, 199.6875, 216.25, 200, 213.75, 241.25, 255}, {tol = 1e-4})
      assert.same({0, 0, 100, 100, 0, 0, 100, 100, 200, 200, 255, 255, 200, 200, 255, 255},
                  flat(T.Resize(4, {interpolation = 0})(img)))
    end)
    it("rejects bad sizes naming the transform", function()
      H.assert_error(function() T.Resize(-150) end, "Resize: size should be greater than 0")
      H.assert_error(function() T.Resize({1, 2, 3}) end, "Resize: input size dimension must be 1 or 2")
      H.assert_error(function() T.Resize(10, {interpolation = 9}) end, "interpolation 9")
    end)
  end)

  describe("crops", function()
    local v = {}
    for y = 0, 3 do
      v[y + 1] = {}
      for x = 0, 4 do v[y + 1][x + 1] = {y * 5 + x} end
    end
    local img = u8(v) -- H 4, W 5
    it("CenterCrop takes the centre", function()
      assert.same({6, 7, 8, 11, 12, 13}, flat(T.CenterCrop({3, 2})(img)))
      assert.same({2, 3, 1}, T.CenterCrop({3, 2})(img).shape)
    end)
    it("CenterCrop scales down then resizes images smaller than the crop", function()
      local y = T.CenterCrop({6, 8}, 0)(img) -- crop 3x4 at x 1, nearest to 6x8
      assert.same({8, 6, 1}, y.shape)
      local t = flat(y)
      for yy = 0, 7 do
        for xx = 0, 5 do
          assert.equal(math.floor(yy / 2) * 5 + 1 + math.floor(xx / 2), t[yy * 6 + xx + 1])
        end
      end
    end)
    it("RandomCrop pads with zeros and keeps the size", function()
      local t = T.RandomCrop({3, 2}, {pad = 1})
      assert.same({0, 0, 0, 0, 0, 1}, flat(t:_fixed(0, 0)(img)))
      assert.same({13, 14, 0, 18, 19, 0}, flat(t:_fixed(4, 3)(img)))
      assert.same({2, 3, 1}, t(img).shape)
    end)
    it("RandomResizedCrop crops then resizes, falling back to the centre", function()
      local t = T.RandomResizedCrop(2)
      assert.same({11, 12, 16, 17}, flat(t:_fixed(1, 2, 2, 2)(img)))
      local never = T.RandomResizedCrop(2, {scale = {2, 3}})
      assert.same(flat(T.CenterCrop(2)(img)), flat(never(img)))
      assert.same({5, 7, 3}, T.RandomResizedCrop({7, 5})(photo(20, 30, 3)).shape)
    end)
  end)

  describe("flips", function()
    local img = u8(IMG23)
    it("flip at p=1 and p=0", function()
      assert.same({7, 8, 9, 4, 5, 6, 1, 2, 3, 16, 17, 18, 13, 14, 15, 10, 11, 12},
                  flat(T.RandomFlipLeftRight(1)(img)))
      assert.same(flat(img), flat(T.RandomFlipLeftRight(0)(img)))
      assert.same({10, 11, 12, 13, 14, 15, 16, 17, 18, 1, 2, 3, 4, 5, 6, 7, 8, 9},
                  flat(T.RandomFlipTopBottom(1)(img)))
    end)
    it("flips with probability p, reproducibly under np.random.seed", function()
      local t = T.RandomFlipLeftRight()
      local function run()
        local s = {}
        for i = 1, 400 do s[i] = flat(t(img))[1] == 7 and 1 or 0 end
        return s
      end
      np.random.seed(7)
      local a = run()
      np.random.seed(7)
      local b = run()
      assert.same(a, b)
      local n = 0
      for i = 1, #a do n = n + a[i] end
      assert.is_true(n > 160 and n < 240, "flips " .. n .. " of 400")
      -- same (seed, index) -> same, over indices about half flip
      local same, m = 0, 0
      for i = 0, 199 do
        local x = t:_apply(img, 99, i)
        if flat(x)[1] == flat(t:_apply(img, 99, i))[1] then same = same + 1 end
        if flat(x)[1] == 7 then m = m + 1 end
      end
      assert.equal(200, same)
      assert.is_true(m > 70 and m < 130, "flips " .. m .. " of 200")
    end)
  end)

  describe("colour", function()
    it("brightness, contrast, saturation at fixed alphas (uint8 truncates)", function()
      assert.same({150, 255, 76}, flat(T.RandomBrightness(0.5):_fixed(1.5)(u8({{{100}, {200}, {51}}}))))
      local rb = u8({{{255, 0, 0}, {0, 0, 255}}})
      assert.same({153, 26, 26, 26, 26, 153}, flat(T.RandomContrast(0.5):_fixed(0.5)(rb)))
      assert.same({76, 76, 76, 29, 29, 29}, flat(T.RandomSaturation(0.5):_fixed(0)(rb)))
      assert.same({14, 19, 24}, flat(T.RandomSaturation(0.5):_fixed(0.5)(u8({{{10, 20, 31}}}))))
      assert.same({0, 255, 0, 255, 0, 0}, flat(T.RandomHue(0.5):_fixed(1 / 3)(rb)))
    end)
    it("lighting adds the AlexNet PCA noise", function()
      local g = np.array({{{100, 100, 100}}}, {dtype = "float32"})
      H.check(T.RandomLighting(0.1):_fixed(1, 0, 0)(g):reshape({-1}), {68.52645, 67.788832, 67.633544}, {tol = 1e-3})
    end)
    it("jitter keeps shape and dtype and stays near the image for small amounts", function()
      local img = photo(8, 9, 3)
      local y = T.RandomColorJitter{brightness = 0.1, contrast = 0.1, saturation = 0.1, hue = 0.02}(img)
      assert.same({8, 9, 3}, y.shape)
      assert.equal("uint8", y.dtype)
      local a, b = flat(img), flat(y)
      local maxd = 0
      for i = 1, #a do maxd = math.max(maxd, math.abs(a[i] - b[i])) end
      assert.is_true(maxd < 100, "max change " .. maxd)
    end)
  end)

  describe("ToTensor and Normalize", function()
    it("ToTensor is HWC -> CHW, x / 255 exactly", function()
      local y = T.ToTensor()(u8({{{0, 51, 255}, {102, 153, 204}}}))
      assert.same({3, 1, 2}, y.shape)
      assert.equal("float32", y.dtype)
      local t = flat(y)
      assert.equal(0, t[1])
      assert.equal(1, t[5])
      H.check(y:reshape({-1}), {0, 0.4, 0.2, 0.6, 1, 0.8}, {tol = 1e-7})
      assert.same({2, 3, 4, 5}, T.ToTensor()(np.zeros({2, 4, 5, 3}, {dtype = "uint8"})).shape)
    end)
    it("Normalize per channel and broadcast", function()
      local x = np.array({{{3, 6}}, {{3, 5}}, {{2, 7}}}, {dtype = "float32"})
      H.check(T.Normalize({0, 1, 2}, {3, 2, 1})(x):reshape({-1}), {1, 2, 1, 2, 0, 5}, {tol = 1e-6})
      H.check(T.Normalize(1, 2)(x):reshape({-1}), {1, 2.5, 1, 2, 0.5, 3}, {tol = 1e-6})
      -- on its own, on an image wider than 4 (its width once read as channels)
      local wide = T.ToTensor()(np.full({5, 8, 3}, 51, {dtype = "uint8"}))
      local y = T.Normalize({0.1, 0.2, 0.3}, 0.5)(wide):totable()
      assert.is_true(math.abs(y[1][1][8] - 0.2) < 1e-6 and math.abs(y[3][5][1] + 0.2) < 1e-6)
    end)
    it("errors name the transform and the bad value", function()
      local x = np.zeros({3, 2, 2}, {dtype = "float32"})
      H.assert_error(function() T.Normalize({0.5, 0.5}, 1)(x) end, "Normalize: 2 mean values for a tensor with 3 channels")
      H.assert_error(function() T.Normalize(0, 1)(np.zeros({4, 2, 2})) end, "Normalize: expects 1 or 3 channels")
      H.assert_error(function() T.ToTensor()(np.zeros({2, 3})) end, "ToTensor")
      H.assert_error(function() T.Compose{T.ToTensor(), T.RandomFlipLeftRight()}(u8(IMG23)) end,
                    "RandomFlipLeftRight: expects an (H,W,C) image")
      H.assert_error(function() T.Compose{1} end, "Compose: item 1")
    end)
  end)

  describe("Compose", function()
    local row = u8({{{1}, {2}, {3}}})
    it("applies in order", function()
      assert.same({3, 2}, flat(T.Compose{T.RandomFlipLeftRight(1), T.CenterCrop({2, 1})}(row)))
      assert.same({2, 1}, flat(T.Compose{T.CenterCrop({2, 1}), T.RandomFlipLeftRight(1)}(row)))
    end)
    it("runs Lua functions between built-in transforms and passes extra args", function()
      local seen
      local t = T.Compose{T.RandomFlipLeftRight(1), function(x) seen = flat(x); return x:astype("float32") * 2 end,
                          T.CenterCrop({2, 1})}
      assert.is_nil(t:c_steps())
      local y, label = t(row, 5)
      assert.same({3, 2, 1}, seen)
      assert.same({6, 4}, flat(y))
      assert.equal(5, label)
    end)
    it("the tutorial pipelines give (3,128,128) float32 and the C steps", function()
      local mean, std = {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}
      local train = T.Compose{T.Resize{size = 224, keep_ratio = true}, T.CenterCrop(128), T.RandomFlipLeftRight(),
                              T.RandomColorJitter{contrast = 0.05}, T.ToTensor(), T.Normalize(mean, std)}
      local val = T.Compose{T.Resize{size = 224, keep_ratio = true}, T.CenterCrop(128), T.ToTensor(),
                            T.Normalize(mean, std)}
      local img = photo(75, 100, 3)
      local y = train(img)
      assert.same({3, 128, 128}, y.shape)
      assert.equal("float32", y.dtype)
      local arr, n = train:c_steps()
      assert.equal(6, n)
      assert.is_not_nil(arr)
      assert.same({3, 128, 128}, (train:out_shape({375, 500, 3})))
      -- the validation pipeline is deterministic; the fused path equals the reference
      assert.same(flat(val(img)), flat(val(img)))
      for i = 0, 4 do
        assert.same(flat(train:_apply(img, 3, i, true)), flat(train:_apply(img, 3, i)))
      end
      -- nested Compose of built-ins stays one C pipeline
      local nested = T.Compose{T.Compose{T.Resize(10), T.CenterCrop(8)}, T.ToTensor()}
      assert.is_not_nil(nested:c_steps())
      assert.same({3, 8, 8}, nested(img).shape)
    end)
  end)
end)
