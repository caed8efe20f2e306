-- image_spec: luon.image through Lua: imread/imdecode of the fixtures of
-- tests/data (pixel formulas of tests/data/make_fixtures.lua), imwrite and
-- imencode round trips, errors that name the file and the reason.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, npx = H.np, H.npx
local image = H.luon.image

local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "./"
local data = here .. "../data/"
local this_file = "image_spec.lua:"

-- ORDER make_fixtures.lua
local PW, PH = 7, 5
local function rgb(x, y)
  return {(x * 37 + y * 11) % 256, (x * 5 + y * 53 + 100) % 256, (x * x * 3 + y * 7 + 200) % 256}
end
local function gray(x, y) return (x * 31 + y * 47 + 9) % 256 end
local function jrgb(x, y) return {40 + x * 3, 60 + y * 4, 200 - x * 2 - y} end

-- The nested table (H,W,C) of fn(x, y) -> {c...}.
local function img_table(w, h, fn)
  local t = {}
  for y = 0, h - 1 do
    local row = {}
    for x = 0, w - 1 do row[x + 1] = fn(x, y) end
    t[y + 1] = row
  end
  return t
end

local function read_bytes(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local ok_support = pcall(image.imread, data .. "rgb8.png")
local it_img = ok_support and it or pending

local function fails(fn, parts)
  local msg = H.assert_error(fn, parts)
  assert.is_truthy(msg:find(this_file, 1, true), "error not reported at the caller's line: " .. msg)
  return msg
end

describe("image", function()
  it_img("imread decodes PNGs to (H,W,3) RGB uint8 on cpu(0) by default", function()
    local a = image.imread(data .. "rgb8.png")
    H.check(a, img_table(PW, PH, rgb), {shape = {PH, PW, 3}, dtype = "uint8", device = npx.cpu(0), tol = 0})
    -- 16-bit keeps the high byte; alpha is dropped, not composited
    H.assert_equal(image.imread(data .. "rgb16.png"), img_table(PW, PH, rgb))
    H.assert_equal(image.imread(data .. "rgba8.png", {flag = 1}), img_table(PW, PH, rgb))
  end)

  it_img("flag 0 gives (H,W,1) gray; gray files give equal R, G, B with flag 1", function()
    local g = image.imread(data .. "gray16.png", 0)
    H.check(g, img_table(PW, PH, function(x, y) return {gray(x, y)} end), {shape = {PH, PW, 1}, tol = 0})
    H.assert_equal(image.imread(data .. "ga8.png", {flag = 0}), g:totable())
    H.assert_equal(image.imread(data .. "gray8.png"),
                   img_table(PW, PH, function(x, y) local v = gray(x, y) return {v, v, v} end))
  end)

  it_img("palette PNGs (8 and 4 bits) decode to their colors", function()
    local palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 0}, {0, 0, 0}, {255, 255, 255}}
    local want = img_table(PW, PH, function(x, y) return palette[(x + 2 * y) % 6 + 1] end)
    H.assert_equal(image.imread(data .. "palette8.png"), want)
    H.assert_equal(image.imread(data .. "palette4.png"), want)
  end)

  it_img("JPEGs: baseline, progressive and gray, within a few levels", function()
    local want = img_table(48, 32, jrgb)
    H.check(image.imread(data .. "rgb.jpg"), want, {shape = {32, 48, 3}, tol = 6})
    H.check(image.imread(data .. "progressive.jpg"), want, {tol = 6})
    H.check(image.imread(data .. "gray.jpg", 0), nil, {shape = {32, 48, 1}, dtype = "uint8"})
    H.check(image.imread(data .. "cmyk.jpg"), nil, {shape = {8, 16, 3}})
  end)

  it_img("min_w/min_h decode JPEGs at the smallest of 1/8, 1/4, 1/2 still that large", function()
    H.assert_shape(image.imread(data .. "rgb.jpg", {min_w = 10, min_h = 10}), {16, 24, 3})
    H.assert_shape(image.imread(data .. "rgb.jpg", {min_w = 12}), {8, 12, 3})
    H.assert_shape(image.imread(data .. "rgb.jpg", {min_w = 1000, min_h = 1000}), {32, 48, 3})
    H.assert_shape(image.imread(data .. "rgb8.png", {min_w = 2, min_h = 2}), {PH, PW, 3})
  end)

  it_img("imdecode takes a file's bytes as a string", function()
    local bytes = read_bytes(data .. "rgb8.png")
    H.assert_equal(image.imdecode(bytes), img_table(PW, PH, rgb))
    H.assert_shape(image.imdecode(read_bytes(data .. "rgb.jpg"), {flag = 0, min_w = 12}), {8, 12, 1})
    fails(function() image.imdecode("GIF89a....", {name = "cat.gif"}) end,
          {"imdecode: cat.gif: a GIF image", "only JPEG and PNG"})
    fails(function() image.imdecode(bytes:sub(1, 60)) end, {"imdecode", "corrupt PNG"})
    fails(function() image.imdecode(42) end, {"imdecode", "string"})
  end)

  it_img("bad files fail with the path and the reason, and luon stays usable", function()
    local cases = {
      {"empty.jpg", "empty"}, {"not_image.txt", "only JPEG and PNG"},
      {"truncated.jpg", "Premature end of JPEG file"}, {"12bit.jpg", "precision 12"},
      {"huge.jpg", "60000x60000"}, {"huge_area.png", "40000x40000"},
      {"bad_crc.png", "CRC"}, {"truncated.png", "corrupt PNG"},
      {"no_such_file.jpg", "No such file"},
    }
    for _, c in ipairs(cases) do
      fails(function() image.imread(data .. c[1]) end, {"imread", data .. c[1], c[2]})
    end
    fails(function() image.imread(data .. "rgb8.png", 2) end, "flag must be 1 (RGB) or 0 (gray)")
    fails(function() image.imread(data .. "rgb8.png", {flg = 0}) end, "unknown option 'flg'")
    fails(function() image.imread(data .. "rgb8.png\0junk") end, "imread: filename contains a NUL byte")
    fails(function() image.imread(data .. "rgb8.png", {to_rgb = false}) end, "BGR")
    H.assert_equal(image.imread(data .. "rgb8.png"), img_table(PW, PH, rgb))
  end)

  it_img("imwrite and imencode round trip (PNG exactly, JPEG closely)", function()
    local dir = os.tmpname()
    os.remove(dir)
    local src = np.array(img_table(PW, PH, rgb), {dtype = "uint8"})
    local png = dir .. "_a.PNG"
    assert.is_true(image.imwrite(png, src))
    H.assert_equal(image.imread(png), img_table(PW, PH, rgb))
    os.remove(png)
    local js = np.array(img_table(48, 32, jrgb), {dtype = "uint8"})
    local jpg = dir .. "_b.jpg"
    image.imwrite(jpg, js, {quality = 90})
    H.check(image.imread(jpg), img_table(48, 32, jrgb), {tol = 10})
    os.remove(jpg)
    H.assert_equal(image.imdecode(image.imencode(src, ".png")), img_table(PW, PH, rgb))
    H.check(image.imdecode(image.imencode(js, ".JPG", {quality = 95})), img_table(48, 32, jrgb), {tol = 8})
    -- errors
    fails(function() image.imwrite(dir .. ".png", np.zeros({4, 4, 3})) end, {"imwrite", "float32", "uint8"})
    fails(function() image.imwrite(dir .. ".png", np.zeros({4, 4, 2}, {dtype = "uint8"})) end,
          {"imwrite", "(4,4,2)"})
    fails(function() image.imwrite(dir .. ".bmp", src) end, {".bmp", ".jpg, .jpeg or .png"})
    fails(function() image.imwrite(dir .. "/missing/x.png", src) end, {"missing/x.png"})
    fails(function() image.imwrite(dir .. ".png", src, {quality = "a"}) end, {"quality must be an integer", "'a'"})
    fails(function() image.imwrite(dir .. ".png", src, 50) end, {"imwrite: options must be a table"})
    fails(function() image.imwrite(dir .. ".png", src, {qual = 50}) end, {"unknown option 'qual'"})
    fails(function() image.imread(png, {min_w = -5}) end, {"min_w must be an integer", "-5"})
    fails(function() image.imencode(src, ".gif") end, {"imencode", ".gif"})
  end)

  local has_resize = pcall(function() return H.luon.np and require("luon.core").C.luon_image_resize end)
  local it_resize = (ok_support and has_resize) and it or pending
  it_resize("imresize resizes (H,W,C) to (h,w,C)", function()
    local a = image.imread(data .. "rgb.jpg")
    local r = image.imresize(a, 24, 16)
    H.check(r, nil, {shape = {16, 24, 3}, dtype = "uint8"})
    H.check(image.imresize(a, 48, 32, {interp = 1}), image.imread(data .. "rgb.jpg"):totable(), {tol = 1})
  end)
end)
