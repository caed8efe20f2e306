-- make_fixtures.lua: writes the tiny image fixtures of tests/data, and the
-- seeds of the safetensors and IDX fuzz targets (tests/fuzz; run with
-- luajit from anywhere: `luajit tests/data/make_fixtures.lua`). PNGs are
-- written by hand (stored deflate blocks, so no zlib is involved and the
-- bytes are the same everywhere); JPEGs come from libturbojpeg through the
-- FFI. The pixel formulas below are repeated in tests/c/test_image.c and
-- tests/lua/image_spec.lua, which check decoded pixels against them.
local ffi = require("ffi")
local bit = require("bit")
local band, bxor, rshift, lshift = bit.band, bit.bxor, bit.rshift, bit.lshift

local dir = (arg and arg[0] or ""):match("^(.*[/\\])") or "./"

local function write(name, bytes)
  local f = assert(io.open(dir .. name, "wb"))
  f:write(bytes)
  f:close()
end

-- ---- pixel formulas (PNG fixtures are 7x5, JPEG fixtures 48x32) ----------

local PW, PH = 7, 5
local function rgb(x, y)
  return (x * 37 + y * 11) % 256, (x * 5 + y * 53 + 100) % 256, (x * x * 3 + y * 7 + 200) % 256
end
local function gray(x, y) return (x * 31 + y * 47 + 9) % 256 end
local function alpha(x, y) return (x * 29 + y * 17) % 256 end
local palette = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 0}, {0, 0, 0}, {255, 255, 255}}
local palette_alpha = {255, 128, 0, 255, 255, 64}
local function pal_index(x, y) return (x + 2 * y) % 6 end

-- Smooth content that survives JPEG to within a few levels.
local JW, JH = 48, 32
local function jrgb(x, y) return 40 + x * 3, 60 + y * 4, 200 - x * 2 - y end
local function jgray(x, y) return 30 + x * 2 + y * 3 end

-- ---- PNG writing ------------------------------------------------------------

local crc_table = {}
for n = 0, 255 do
  local c = n
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then c = bxor(0xEDB88320, rshift(c, 1)) else c = rshift(c, 1) end
  end
  crc_table[n] = c
end
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = bxor(crc_table[band(bxor(c, s:byte(i)), 0xFF)], rshift(c, 8)) end
  return bxor(c, 0xFFFFFFFF)
end

local function be32(v)
  return string.char(band(rshift(v, 24), 255), band(rshift(v, 16), 255), band(rshift(v, 8), 255),
                     band(v, 255))
end

local function chunk(kind, data, bad_crc)
  local crc = crc32(kind .. data)
  if bad_crc then crc = bxor(crc, 1) end
  return be32(#data) .. kind .. data .. be32(crc)
end

-- zlib stream of stored (uncompressed) deflate blocks.
local function zlib_stored(s)
  local out, pos = {"\120\1"}, 1
  repeat
    local piece = s:sub(pos, pos + 65534)
    pos = pos + #piece
    local final = pos > #s and 1 or 0
    local n = #piece
    out[#out + 1] = string.char(final, band(n, 255), rshift(n, 8), band(bit.bnot(n), 255),
                                band(rshift(bit.bnot(n), 8), 255)) .. piece
  until pos > #s
  local a, b = 1, 0
  for i = 1, #s do
    a = (a + s:byte(i)) % 65521
    b = (b + a) % 65521
  end
  out[#out + 1] = be32(b * 65536 + a)
  return table.concat(out)
end

-- PNG of w x h; row(y) returns the row's bytes (without the filter byte).
local function png(w, h, depth, ctype, row, extra, opts)
  opts = opts or {}
  local raw = {}
  for y = 0, h - 1 do raw[#raw + 1] = "\0" .. row(y) end
  local ihdr = be32(opts.ihdr_w or w) .. be32(opts.ihdr_h or h) .. string.char(depth, ctype, 0, 0, 0)
  return "\137PNG\r\n\26\n" .. chunk("IHDR", ihdr) .. (extra or "") ..
         chunk("IDAT", zlib_stored(table.concat(raw)), opts.bad_crc) .. chunk("IEND", "")
end

local function row_of(w, fn)
  return function(y)
    local t = {}
    for x = 0, w - 1 do t[#t + 1] = fn(x, y) end
    return table.concat(t)
  end
end
local ch = string.char
local function c16(v) return ch(v, v) end -- v * 257, big-endian

write("gray8.png", png(PW, PH, 8, 0, row_of(PW, function(x, y) return ch(gray(x, y)) end)))
write("gray16.png", png(PW, PH, 16, 0, row_of(PW, function(x, y) return c16(gray(x, y)) end)))
write("rgb8.png", png(PW, PH, 8, 2, row_of(PW, function(x, y) return ch(rgb(x, y)) end)))
write("rgb16.png", png(PW, PH, 16, 2, row_of(PW, function(x, y)
  local r, g, b = rgb(x, y)
  return c16(r) .. c16(g) .. c16(b)
end)))
write("rgba8.png", png(PW, PH, 8, 6, row_of(PW, function(x, y)
  local r, g, b = rgb(x, y)
  return ch(r, g, b, alpha(x, y))
end)))
write("ga8.png", png(PW, PH, 8, 4, row_of(PW, function(x, y) return ch(gray(x, y), alpha(x, y)) end)))
local plte, trns = {}, {}
for i, c in ipairs(palette) do plte[i], trns[i] = ch(c[1], c[2], c[3]), ch(palette_alpha[i]) end
local pal_chunks = chunk("PLTE", table.concat(plte)) .. chunk("tRNS", table.concat(trns))
write("palette8.png", png(PW, PH, 8, 3, row_of(PW, function(x, y) return ch(pal_index(x, y)) end),
                          pal_chunks))
write("palette4.png", png(PW, PH, 4, 3, function(y)
  local t = {}
  for x = 0, PW - 1, 2 do
    local hi, lo = pal_index(x, y), x + 1 < PW and pal_index(x + 1, y) or 0
    t[#t + 1] = ch(hi * 16 + lo)
  end
  return table.concat(t)
end, pal_chunks))
local rgb_row = row_of(PW, function(x, y) return ch(rgb(x, y)) end)
write("bad_crc.png", png(PW, PH, 8, 2, rgb_row, nil, {bad_crc = true}))
local good = png(PW, PH, 8, 2, rgb_row)
write("truncated.png", good:sub(1, math.floor(#good * 0.6)))
-- Headers claiming huge images over a tiny IDAT: rejected before allocating.
write("huge_side.png", png(PW, PH, 8, 2, rgb_row, nil, {ihdr_w = 70000, ihdr_h = 5}))
write("huge_area.png", png(PW, PH, 8, 2, rgb_row, nil, {ihdr_w = 40000, ihdr_h = 40000}))

-- ---- JPEGs --------------------------------------------------------------------

ffi.cdef [[
void *tjInitCompress(void);
int tjCompress2(void *h, const unsigned char *src, int w, int pitch, int height, int pf,
                unsigned char **jpeg, unsigned long *size, int samp, int quality, int flags);
void tjFree(unsigned char *buf);
int tjDestroy(void *h);
char *tjGetErrorStr2(void *h);
]]
local tj = ffi.load("turbojpeg")
local TJPF_RGB, TJPF_GRAY, TJPF_CMYK = 0, 6, 11
local TJSAMP_444, TJSAMP_GRAY = 0, 3
local TJFLAG_PROGRESSIVE = 16384

local function jpeg(w, h, c, pf, fn, samp, quality, flags)
  local px = ffi.new("unsigned char[?]", w * h * c)
  for y = 0, h - 1 do
    for x = 0, w - 1 do
      local v = {fn(x, y)}
      for k = 1, c do px[(y * w + x) * c + k - 1] = v[k] end
    end
  end
  local handle = tj.tjInitCompress()
  local buf = ffi.new("unsigned char*[1]")
  local size = ffi.new("unsigned long[1]")
  if tj.tjCompress2(handle, px, w, 0, h, pf, buf, size, samp, quality, flags) ~= 0 then
    error(ffi.string(tj.tjGetErrorStr2(handle)))
  end
  local s = ffi.string(buf[0], size[0])
  tj.tjFree(buf[0])
  tj.tjDestroy(handle)
  return s
end

local rgb_jpg = jpeg(JW, JH, 3, TJPF_RGB, jrgb, TJSAMP_444, 95, 0)
local gray_jpg = jpeg(JW, JH, 1, TJPF_GRAY, jgray, TJSAMP_GRAY, 95, 0)
write("rgb.jpg", rgb_jpg)
write("gray.jpg", gray_jpg)
write("progressive.jpg", jpeg(JW, JH, 3, TJPF_RGB, jrgb, TJSAMP_444, 95, TJFLAG_PROGRESSIVE))
-- Adobe CMYK (stored inverted, as Photoshop writes it; TurboJPEG makes YCCK):
-- 16x8, a constant (C, M, Y, K) = (200, 100, 50, 180) on the left half and
-- (20, 240, 160, 250) on the right.
write("cmyk.jpg", jpeg(16, 8, 4, TJPF_CMYK, function(x)
  if x < 8 then return 200, 100, 50, 180 end
  return 20, 240, 160, 250
end, TJSAMP_444, 95, 0))
write("truncated.jpg", rgb_jpg:sub(1, math.floor(#rgb_jpg * 0.6)))

-- The start-of-frame segment of a baseline JPEG: position of its marker.
local function sof(s)
  local pos = s:find("\255\192", 1, true)
  assert(pos, "no SOF0 marker")
  return pos
end
-- 12-bit: the gray JPEG with SOF1 and precision 12 (libjpeg-turbo's 8-bit
-- decoder must refuse it).
local p = sof(gray_jpg)
write("12bit.jpg", gray_jpg:sub(1, p) .. "\193" .. gray_jpg:sub(p + 2, p + 3) .. "\12" ..
                   gray_jpg:sub(p + 5))
-- SOF claiming 60000x60000 (3 channels: 10.8 GB decoded).
p = sof(rgb_jpg)
write("huge.jpg", rgb_jpg:sub(1, p + 4) .. "\234\96\234\96" .. rgb_jpg:sub(p + 9))
write("not_image.txt", "This is a text file, not an image.\n")
write("empty.jpg", "")

-- ---- fuzz seeds: tests/fuzz/fuzz_safetensors.c and fuzz_idx.c -----------

-- little- and big-endian unsigned integers of n bytes
local function le(v, n)
  local t = {}
  for i = 1, n do t[i] = string.char(v % 256); v = math.floor(v / 256) end
  return table.concat(t)
end
local function be32(v) return le(v, 4):reverse() end

-- Two tensors and metadata: F32 [2,2] (1, 2, 3, 4) and an I64 scalar (7).
local header = '{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],' ..
               '"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[],"data_offsets":[16,24]}}'
header = header .. (" "):rep((8 - #header % 8) % 8)
write("seed.safetensors", le(#header, 8) .. header .. "\0\0\128\63\0\0\0\64\0\0\64\64\0\0\128\64" ..
                          le(7, 8))
-- uint8 2x3x4 (0..23) and float32 [3] (1, 2, 3)
local u8 = {}
for i = 0, 23 do u8[#u8 + 1] = string.char(i) end
write("u8.idx", "\0\0\8\3" .. be32(2) .. be32(3) .. be32(4) .. table.concat(u8))
write("f32.idx", "\0\0\13\1" .. be32(3) .. "\63\128\0\0\64\0\0\0\64\64\0\0")
