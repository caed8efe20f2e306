-- luon.gluon.data.vision: the MNIST and FashionMNIST datasets from their IDX
-- files (gzip or plain), read by core/data/idx.c. The images are kept as ONE uint8
-- array (N,28,28,1) and item i is {a view of image i (28,28,1), label}, as
-- MXNet's (HWC uint8, label a 0-d int32 array; batches of labels int32).
-- ImageFolderDataset: a folder per class, images decoded on access
-- (core/data/image.c), labels numbers (int64 in batches, as MXNet's Python
-- ints). Both hand their samples to the threaded C loader
-- (core/data/pipeline.c) through :_c_source(). vision.datasets holds the three
-- (MXNet's gluon.data.vision.datasets); vision.transforms (module
-- luon.gluon.data.transforms) loads on first use.
local core = require("luon.core")
local np = require("luon.np")
local data = require("luon.gluon.data")
local object = require("luon.gluon.data.object")
local ffi, C = core.ffi, core.C

local vision = {}

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- "<root>/<name>.gz", else "<root>/<name>"; an error naming both if neither.
local function find(root, name, cls)
  local gz = root .. "/" .. name .. ".gz"
  if exists(gz) then return gz end
  local plain = root .. "/" .. name
  if exists(plain) then return plain end
  core.error(("%s: cannot find %s (or %s): is the dataset installed under root = '%s'?")
             :format(cls, gz, name, root))
end

local function read_idx(path)
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_idx_read(path, 1, 0, out))
  return core.wrap(out[0])
end

local MNISTDataset = data.Dataset:extend("MNIST")

local load_args = {"root", "train", "transform"}
local function load(cls, default_root, ...)
  local opts = core.args(cls, load_args, load_args, ...) -- MXNet's order, then keywords
  if opts.train ~= nil and type(opts.train) ~= "boolean" then
    core.error(("%s: train must be true or false, got %s"):format(cls, core.show_value(opts.train)))
  end
  local root = core.path_arg(opts.root or default_root, cls, "root")
  root = root:gsub("^~", os.getenv("HOME") or "~"):gsub("/$", "")
  local train = opts.train ~= false
  local prefix = train and "train" or "t10k"
  local ipath = find(root, prefix .. "-images-idx3-ubyte", cls)
  local lpath = find(root, prefix .. "-labels-idx1-ubyte", cls)
  local images, labels = read_idx(ipath), read_idx(lpath)
  if images.ndim ~= 3 or images.dtype ~= "uint8" then
    core.error(("%s: %s holds a %s array of shape %s, expected uint8 images (N,rows,cols)")
               :format(cls, ipath, images.dtype, core.shape_text(images.shape)))
  end
  if labels.ndim ~= 1 or labels.dtype ~= "uint8" then
    core.error(("%s: %s holds a %s array of shape %s, expected uint8 labels (N,)")
               :format(cls, lpath, labels.dtype, core.shape_text(labels.shape)))
  end
  local n, h, w = images.shape[1], images.shape[2], images.shape[3]
  if labels.shape[1] ~= n then
    core.error(("%s: %s has %d images but %s has %d labels"):format(cls, ipath, n, lpath, labels.shape[1]))
  end
  local lab = ffi.new("uint8_t[?]", n > 0 and n or 1)
  core.check(C.luon_tensor_to_host(labels.t, lab, core.UINT8, n))
  local label = {}
  for i = 1, n do label[i] = lab[i - 1] end
  labels = labels:astype("int32") -- MXNet's: np.uint8 read, int32 kept
  local transform = opts.transform
  if transform ~= nil and type(transform) ~= "function" and not getmetatable(transform) then
    core.error(("%s: transform must be a function fn(data, label), got %s"):format(cls, type(transform)))
  end
  return MNISTDataset:new{_data = images:reshape({n, h, w, 1}), _label = label, _label_arr = labels,
                          _transform = transform, _root = root, _train = train, _name = cls}
end

function MNISTDataset:len() return #self._label end

function MNISTDataset:get(i)
  i = object.check_index(i, #self._label)
  local x, y = self._data:at(i), self._label_arr:at(i)
  if self._transform then
    local a, b = self._transform(x, y)
    return {a, b}
  end
  return {x, y}
end

-- Default-batchify fast path of the DataLoader: a batch is two takes
-- (indices in range: the loader checked them as get does).
function MNISTDataset:_gather(indices)
  if self._transform then return nil end
  local idx = np.array(indices, {dtype = "int64"})
  return {np.take(self._data, idx, 0), np.take(self._label_arr, idx, 0)}
end

-- For the C loader: the images as one (N,H,W,C) uint8 array and the labels.
function MNISTDataset:_c_source()
  if self._transform then return nil end
  return {images = self._data, labels = self._label, label_dtype = core.INT32}
end

function MNISTDataset:__tostring()
  return ("%s(root='%s', %s, %d images)"):format(self._name, self._root, self._train and "train" or "test",
                                                 #self._label)
end

---------------------------------------------------------------------------
-- ImageFolderDataset

-- The entries of a directory: a sorted list of {name =, kind = 'd'|'f'|'o'}.
local list_dir = core.list_dir

local image_ext = {[".jpg"] = true, [".jpeg"] = true, [".png"] = true}

local ImageFolderDataset = data.Dataset:extend("ImageFolderDataset")

-- ImageFolderDataset(root, {flag = 1}) (or (root, flag)): every folder of
-- root, sorted by name (byte order: 'B' < 'a'), is a class whose label is
-- its position from 0; .synsets names them. Files ending .jpg, .jpeg or
-- .png (any case) are the items, class by class in name order, as .items
-- ({path, label} each); other files are skipped with one warning that
-- counts them. .synsets and .items are 0-based as MXNet's lists:
-- ds.synsets[label] is the name of label, ds.items[i] item i's {path,
-- label}, # their length, :totable() a Lua list (ipairs on them is an
-- error: they are not Lua lists). Item i (0-based) is {(H,W,C) uint8
-- image, label}; flag 1: RGB, 0: gray (H,W,1).
function vision.ImageFolderDataset(root, opts)
  local cls = "ImageFolderDataset"
  core.path_arg(root, cls, "root")
  if type(opts) == "number" then opts = {flag = opts} end
  opts = opts or {}
  if type(opts) ~= "table" then core.error(("%s: expected a table of options, got %s"):format(cls, type(opts))) end
  core.check_keys(opts, cls, {"flag", "transform"})
  if opts.transform ~= nil then
    core.error(cls .. ": Directly apply transform to dataset is deprecated. Please use " ..
               "dataset:transform() or dataset:transform_first() instead")
  end
  local flag = opts.flag == nil and 1 or opts.flag
  if flag ~= 0 and flag ~= 1 then
    core.error(("%s: flag must be 1 (RGB) or 0 (gray), got %s"):format(cls, tostring(flag)))
  end
  root = root:gsub("^~", os.getenv("HOME") or "~")
  if #root > 1 then root = root:gsub("/+$", "") end
  local synsets, items, paths, labels = {}, {}, {}, {}
  local ignored, first_ignored, not_dirs = 0, nil, {}
  for _, e in ipairs(list_dir(root, cls)) do
    local path = root .. "/" .. e.name
    if e.kind ~= "d" then
      not_dirs[#not_dirs + 1] = path
    else
      local label = #synsets
      synsets[label + 1] = e.name
      for _, f in ipairs(list_dir(path, cls)) do
        local fpath = path .. "/" .. f.name
        local ext = (f.name:match("^.+(%.[^.]*)$") or ""):lower()
        if f.kind == "f" and image_ext[ext] then
          items[#items + 1] = {fpath, label}
          paths[#paths + 1] = fpath
          labels[#labels + 1] = label
        else
          ignored = ignored + 1
          first_ignored = first_ignored or fpath
        end
      end
    end
  end
  for _, p in ipairs(not_dirs) do core.warn(("Ignoring %s, which is not a directory."):format(p)) end
  if ignored > 0 then
    core.warn(("%s: ignoring %d file%s that %s not .jpg, .jpeg or .png images (first: %s)")
                :format(cls, ignored, ignored == 1 and "" or "s", ignored == 1 and "is" or "are", first_ignored))
  end
  return ImageFolderDataset:new{_root = root, _flag = flag, synsets = object.list0(synsets, cls .. ".synsets"),
                                items = object.list0(items, cls .. ".items"), _paths = paths, _labels = labels}
end

function ImageFolderDataset:len() return #self._paths end

local imgout = ffi.new("luon_tensor*[1]")

function ImageFolderDataset:get(i)
  i = object.check_index(i, #self._paths)
  local path = self._paths[i + 1]
  core.check(C.luon_image_read(path, self._flag, 0, 0, imgout))
  core.gc_pressure()
  return {core.wrap(imgout[0]), self._labels[i + 1]}
end

-- Item i's image through C steps exactly as the C loader's workers make it
-- (seeded by (seed, i)); errors name the file.
function ImageFolderDataset:_load(i, arr, n, seed)
  local st = C.luon_loader_load_image(self._paths[i + 1], self._flag, arr, n, seed, i, imgout)
  if st ~= 0 then core.raise() end
  core.gc_pressure()
  return core.wrap(imgout[0])
end

function ImageFolderDataset:_c_source()
  return {paths = self._paths, labels = self._labels, flag = self._flag}
end

function ImageFolderDataset:__tostring()
  return ("ImageFolderDataset(root='%s', %d classes, %d images)"):format(self._root, #self.synsets, #self.items)
end

-- MNIST{root = '~/.mxnet/datasets/mnist', train = true, transform = fn(data, label)}
function vision.MNIST(...) return load("MNIST", "~/.mxnet/datasets/mnist", ...) end

-- FashionMNIST(root, train, transform), positional as MXNet or keywords:
-- root = '/usr/share/datasets/fashion-mnist' (Debian's
-- dataset-fashion-mnist), train = true, transform = fn(data, label)
function vision.FashionMNIST(...)
  return load("FashionMNIST", "/usr/share/datasets/fashion-mnist", ...)
end

-- MXNet's module gluon.data.vision.datasets.
vision.datasets = core.strict_module({MNIST = vision.MNIST, FashionMNIST = vision.FashionMNIST,
                                     ImageFolderDataset = vision.ImageFolderDataset},
                                    "gluon.data.vision.datasets")

return core.strict_module(vision, "gluon.data.vision",
                          {transforms = function() return require("luon.gluon.data.transforms") end})
