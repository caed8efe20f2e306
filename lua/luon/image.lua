-- luon.image: MXNet's mx.image reading, decoding, writing and resizing
-- (require("luon").image). Images are (H,W,C) uint8 arrays on cpu(0): RGB
-- with C = 3 (flag = 1, the default) or gray with C = 1 (flag = 0).
-- Decoding is core/data/image.c (JPEG via TurboJPEG, PNG via libpng); resizing
-- is core/data/resample.c.
local core = require("luon.core")
local ffi, C = core.ffi, core.C

local image = {}

local out = ffi.new("luon_tensor*[1]")
local buf = ffi.new("void*[1]")
local len = ffi.new("size_t[1]")
local ENOMEM = 5

-- Options: a positional flag (MXNet's imread(filename, flag)) or a table
-- {flag =, min_w =, min_h =, to_rgb =}. to_rgb = false (BGR) is not offered.
local decode_keys = {"flag", "min_w", "min_h", "to_rgb"}
local function decode_opts(fname, opt, extra)
  if opt == nil then return 1, 0, 0 end
  if type(opt) == "number" then opt = {flag = opt} end
  if type(opt) ~= "table" then
    core.error(("%s: options must be a flag (1 or 0) or a table such as {flag = 0}, got %s")
               :format(fname, tostring(opt)))
  end
  core.check_keys(opt, fname, decode_keys, {extra})
  if opt.to_rgb == false then
    core.error(fname .. ": to_rgb = false (BGR order) is not supported; images are RGB")
  end
  local flag = opt.flag == nil and 1 or opt.flag
  if flag ~= 0 and flag ~= 1 then
    core.error(("%s: flag must be 1 (RGB) or 0 (gray), got %s"):format(fname, tostring(flag)))
  end
  return flag, core.int_arg(opt.min_w or 0, fname, "min_w", 0, 2^31 - 1),
         core.int_arg(opt.min_h or 0, fname, "min_h", 0, 2^31 - 1)
end

-- Run a decoding call fn(out) once more after a full collection when
-- memory ran out (LuaJIT cannot see native bytes), then wrap the result.
local function new_image(fn)
  local st = fn(out)
  if st == ENOMEM then
    collectgarbage("collect"); collectgarbage("collect")
    st = fn(out)
  end
  core.check(st)
  core.gc_pressure()
  return core.wrap(out[0])
end

-- imread(filename, flag | {flag = 1, min_w = 0, min_h = 0}) -> (H,W,C) uint8.
-- min_w/min_h > 0 let a JPEG decode at a reduced DCT scale that still has
-- at least that many pixels (for a following resize); PNGs ignore them.
function image.imread(filename, opt)
  core.path_arg(filename, "imread", "filename")
  local flag, min_w, min_h = decode_opts("imread", opt)
  return new_image(function(o) return C.luon_image_read(filename, flag, min_w, min_h, o) end)
end

-- imdecode(bytes, flag | {flag =, min_w =, min_h =, name =}): decode a Lua
-- string holding a JPEG or PNG file's bytes.
function image.imdecode(bytes, opt)
  if type(bytes) ~= "string" then
    core.error(("imdecode: expected the file's bytes as a string, got %s"):format(type(bytes)))
  end
  local flag, min_w, min_h = decode_opts("imdecode", opt, "name")
  local name = type(opt) == "table" and opt.name and tostring(opt.name) or nil
  return new_image(function(o)
    return C.luon_image_decode(bytes, #bytes, flag, min_w, min_h, name, o)
  end)
end

local function check_image(fname, img)
  if not core.is_array(img) then
    core.error(("%s: expected an (H,W,C) uint8 array, got %s"):format(fname, type(img)))
  end
end

-- imwrite(filename, img, {quality = 95}): JPEG or PNG by the extension
-- (.jpg, .jpeg, .png), written to a temporary file then renamed. img is
-- an (H,W,C) uint8 array with C = 1 or 3 (float arrays are refused: scale
-- to 0..255 and astype("uint8") first). Returns true.
function image.imwrite(filename, img, opt)
  core.path_arg(filename, "imwrite", "filename")
  check_image("imwrite", img)
  if opt ~= nil and type(opt) ~= "table" then
    core.error(("imwrite: options must be a table such as {quality = 90}, got %s"):format(core.show_value(opt)))
  end
  if opt then core.check_keys(opt, "imwrite", {"quality"}) end
  local quality = core.int_arg(opt and opt.quality or 0, "imwrite", "quality", 0, 100) -- 0: the default
  core.check(C.luon_image_write(filename, img.t, quality))
  return true
end

-- imencode(img, ".jpg" | ".png", {quality = 95}) -> the file's bytes as a string.
function image.imencode(img, ext, opt)
  check_image("imencode", img)
  ext = type(ext) == "string" and ext:lower() or ext
  local st
  if ext == ".jpg" or ext == ".jpeg" then
    st = C.luon_image_encode_jpeg(img.t, type(opt) == "table" and opt.quality or 0, buf, len)
  elseif ext == ".png" then
    st = C.luon_image_encode_png(img.t, buf, len)
  else
    core.error(("imencode: format must be '.jpg', '.jpeg' or '.png', got %s"):format(tostring(ext)))
  end
  core.check(st)
  local s = ffi.string(buf[0], len[0])
  C.luon_free(buf[0])
  return s
end

-- imresize(src, w, h, interp | {interp = 1}): (H,W,C) -> (h,w,C), same
-- dtype; interp is OpenCV's (0 nearest, 1 bilinear, 2 bicubic, 3 area).
local has_resize
function image.imresize(src, w, h, opt)
  if has_resize == nil then
    has_resize = pcall(function() return C.luon_image_resize end)
  end
  if not has_resize then
    core.error("imresize: this build has no luon_image_resize (core/data/transform.c)")
  end
  check_image("imresize", src)
  if type(w) ~= "number" or type(h) ~= "number" or w % 1 ~= 0 or h % 1 ~= 0 or w < 1 or h < 1 then
    core.error(("imresize: w and h must be positive integers, got %s and %s")
               :format(tostring(w), tostring(h)))
  end
  local interp = type(opt) == "number" and opt or (type(opt) == "table" and opt.interp) or 1
  return new_image(function(o) return C.luon_image_resize(src.t, w, h, interp, o) end)
end

return core.strict_module(image, "image")
