-- imagefolder_spec: gluon.data.vision.ImageFolderDataset on trees written
-- here: classes from sorted folder names (byte order, empty folders keep a
-- label), accepted extensions in any case, one warning counting the skipped
-- files, items and synsets (0-based, as MXNet's lists), 0-based items
-- decoded to HWC uint8, flag 0, errors; batches of int64 labels; and
-- scripts/make_dataset's fashion-leaf tree.
package.path = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "") .. "?.lua;" .. package.path
local H = require("helpers")
local np, luon = H.np, H.luon
local data = require("luon.gluon.data")
local core = require("luon.core")
local vision = data.vision
local image = luon.image

local function sh(cmd) assert(os.execute(cmd) == 0 or true) end

local function tmpdir()
  local p = os.tmpname()
  os.remove(p)
  sh("mkdir -p '" .. p .. "'")
  return p
end

-- An (h,w,3) uint8 image with a pattern depending on k.
local function pic(h, w, k)
  local rows = {}
  for y = 1, h do
    local r = {}
    for x = 1, w do r[x] = {(x * 9 + k * 40) % 256, (y * 11 + k * 17) % 256, (x + y + k) * 5 % 256} end
    rows[y] = r
  end
  return np.array(rows, {dtype = "uint8"})
end

local function capture_warnings(fn)
  local got, old = {}, core.warn
  core.warn = function(msg) got[#got + 1] = msg end
  local ok, err = pcall(fn)
  core.warn = old
  if not ok then error(err, 0) end
  return got
end

describe("ImageFolderDataset", function()
  local root
  setup(function()
    root = tmpdir()
    for _, d in ipairs({"B", "a", "cat", "empty", "Zeta"}) do sh("mkdir -p '" .. root .. "/" .. d .. "'") end
    image.imwrite(root .. "/B/one.JPG", pic(12, 10, 1))
    image.imwrite(root .. "/B/two.png", pic(7, 9, 2))
    image.imwrite(root .. "/a/x.jpeg", pic(8, 8, 3))
    image.imwrite(root .. "/a/y.Png", pic(5, 6, 4))
    image.imwrite(root .. "/cat/c.jpg", pic(9, 9, 5))
    image.imwrite(root .. "/Zeta/z.jpg", pic(6, 6, 6))
    for _, f in ipairs({"/cat/notes.txt", "/cat/.DS_Store", "/a/.jpg", "/B/img.gif"}) do
      local h = io.open(root .. f, "wb")
      h:write("x")
      h:close()
    end
    local h = io.open(root .. "/readme.md", "wb")
    h:write("not a class")
    h:close()
  end)
  teardown(function() sh("rm -rf '" .. root .. "'") end)

  it("makes classes of sorted folders, items class by class, one warning for skipped files", function()
    local ds
    local w = capture_warnings(function() ds = vision.ImageFolderDataset(root) end)
    assert.are.same({"B", "Zeta", "a", "cat", "empty"}, ds.synsets:totable())
    assert.are.equal(6, ds:len())
    assert.are.equal(6, #ds)
    -- synsets[label] and items[i] as MXNet's (0-based; negative from the end)
    assert.are.equal(5, #ds.synsets)
    assert.are.equal("B", ds.synsets[0])
    assert.are.equal("cat", ds.synsets[ds[5][2]])
    assert.are.equal("empty", ds.synsets[-1])
    H.assert_error(function() return ds.synsets[5] end,
                   {"ImageFolderDataset.synsets: index 5 is out of range for 5 entries", "0..4"})
    H.assert_error(function() return ds.synsets[np.array(1)] end, {"ImageFolderDataset.synsets: index"})
    H.assert_error(function() for _ in ipairs(ds.synsets) do end end, "table expected")
    local seen = {}
    for name in ds.synsets do seen[#seen + 1] = name end
    assert.are.same({"B", "Zeta", "a", "cat", "empty"}, seen)
    assert.are.equal(6, #ds.items)
    assert.are.equal(3, ds.items[5][2])
    assert.are.same(ds.items[5], ds.items[-1])
    local names, labels = {}, {}
    for k, it in ipairs(ds.items:totable()) do
      names[k] = it[1]:sub(#root + 2)
      labels[k] = it[2]
    end
    assert.are.same({"B/one.JPG", "B/two.png", "Zeta/z.jpg", "a/x.jpeg", "a/y.Png", "cat/c.jpg"}, names)
    assert.are.same({0, 0, 1, 2, 2, 3}, labels)
    assert.are.equal(2, #w)
    assert.truthy(w[1]:find("Ignoring " .. root .. "/readme.md, which is not a directory.", 1, true))
    assert.truthy(w[2]:find("ignoring 4 files", 1, true), w[2])
    assert.truthy(w[2]:find(".jpg, .jpeg or .png", 1, true), w[2])
  end)

  it("decodes item i (0-based) to {HWC uint8 RGB, label}, or gray with flag 0", function()
    local ds
    capture_warnings(function() ds = vision.ImageFolderDataset(root) end)
    local item = ds[1]
    assert.are.same({7, 9, 3}, item[1].shape)
    assert.are.equal("uint8", item[1].dtype)
    assert.are.equal(0, item[2])
    assert.are.same(pic(7, 9, 2):totable(), item[1]:totable()) -- PNG is lossless
    local j = ds:get(0)
    assert.are.same({12, 10, 3}, j[1].shape)
    assert.are.equal(3, ds[5][2])
    local gray
    capture_warnings(function() gray = vision.ImageFolderDataset(root, {flag = 0}) end)
    assert.are.same({8, 8, 1}, gray[3][1].shape)
    H.assert_error(function() return ds[6] end, {"index 6 is out of range", "length 6"})
    H.check(ds:get(-6)[1], j[1]:totable()) -- from the end, as MXNet's
    H.assert_error(function() return ds:get(-7) end, "index -7 is out of range")
  end)

  it("names what is wrong", function()
    H.assert_error(function() vision.ImageFolderDataset(root .. "/nope") end,
                   {"ImageFolderDataset", "cannot list", "nope"})
    H.assert_error(function() vision.ImageFolderDataset(root, {transform = function(x) return x end}) end,
                   {"deprecated", "transform_first"})
    H.assert_error(function() vision.ImageFolderDataset(root, {flag = 3}) end, "flag must be 1 (RGB) or 0")
    H.assert_error(function() vision.ImageFolderDataset(42) end, "root must be a non-empty string, got 42")
    H.assert_error(function() vision.ImageFolderDataset(root .. "\0x") end, "root contains a NUL byte")
    local bad = root .. "/cat/c.jpg"
    local keep = io.open(bad, "rb"):read("*a")
    local h = io.open(bad, "wb")
    h:write(keep:sub(1, 200))
    h:close()
    local ds
    capture_warnings(function() ds = vision.ImageFolderDataset(root) end)
    H.assert_error(function() return ds[5] end, {"c.jpg"})
    h = io.open(bad, "wb")
    h:write(keep)
    h:close()
  end)

  it("reads scripts/make_dataset's fashion-leaf tree (shirt vs t-shirt)", function()
    local out = tmpdir() .. "/fashion-leaf"
    local script = (debug.getinfo(1, "S").source:match("^@(.-)tests/lua/[^/]*$") or "") .. "scripts/make_dataset"
    local cmd = ("luajit %s --out '%s' --train 4 --validation 2 --test 3 --size 48 --quiet"):format(script, out)
    local rc = os.execute(cmd)
    assert.is_true(rc == 0 or rc == true)
    for split, n in pairs({train = 8, validation = 4, test = 6}) do
      local ds = vision.ImageFolderDataset(out .. "/" .. split)
      assert.are.same({"shirt", "t-shirt"}, ds.synsets:totable())
      assert.are.equal(n, ds:len())
      local x = ds[0][1]
      assert.are.same({48, 48, 3}, x.shape)
    end
    -- deterministic: a second run with --force writes the same bytes
    local f = io.open(out .. "/train/shirt/" .. vision.ImageFolderDataset(out .. "/train").items[0][1]:match("[^/]+$"), "rb")
    local before = f:read("*a")
    f:close()
    os.execute(cmd .. " --force")
    f = io.open(vision.ImageFolderDataset(out .. "/train").items[0][1], "rb")
    assert.are.equal(before, f:read("*a"))
    f:close()
    sh("rm -rf '" .. out:match("^(.*)/fashion%-leaf$") .. "'")
  end)
end)
