-- luon.gluon.data.vision: the MNIST and FashionMNIST datasets from their IDX
-- files (gzip or plain), read by core/io.c. The images are kept as ONE uint8
-- array (N,28,28,1) and item i is {a view of image i (28,28,1), label}, as
-- MXNet's (HWC uint8, label a number). vision.transforms (module
-- luon.gluon.data.transforms) loads on first use.
local core = require("luon.core")
local np = require("luon.np")
local data = require("luon.gluon.data")
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

local MNISTDataset = data.Dataset:extend()

local function load(cls, default_root, opts)
  opts = opts or {}
  if type(opts) ~= "table" then core.error(("%s: expected a table of options, got %s"):format(cls, type(opts))) end
  local root = opts.root or default_root
  root = root:gsub("^~", os.getenv("HOME") or "~"):gsub("/$", "")
  local train = opts.train ~= false
  local prefix = train and "train" or "t10k"
  local ipath = find(root, prefix .. "-images-idx3-ubyte", cls)
  local lpath = find(root, prefix .. "-labels-idx1-ubyte", cls)
  local images, labels = read_idx(ipath), read_idx(lpath)
  if images.ndim ~= 3 or images.dtype ~= "uint8" then
    core.error(("%s: %s holds a %s array of shape (%s), expected uint8 images (N,rows,cols)")
               :format(cls, ipath, images.dtype, table.concat(images.shape, ",")))
  end
  if labels.ndim ~= 1 or labels.dtype ~= "uint8" then
    core.error(("%s: %s holds a %s array of shape (%s), expected uint8 labels (N,)")
               :format(cls, lpath, labels.dtype, table.concat(labels.shape, ",")))
  end
  local n, h, w = images.shape[1], images.shape[2], images.shape[3]
  if labels.shape[1] ~= n then
    core.error(("%s: %s has %d images but %s has %d labels"):format(cls, ipath, n, lpath, labels.shape[1]))
  end
  local lab = ffi.new("uint8_t[?]", n > 0 and n or 1)
  core.check(C.luon_tensor_to_host(labels.t, lab, core.UINT8, n))
  local label = {}
  for i = 1, n do label[i] = lab[i - 1] end
  local transform = opts.transform
  if transform ~= nil and type(transform) ~= "function" and not getmetatable(transform) then
    core.error(("%s: transform must be a function fn(data, label), got %s"):format(cls, type(transform)))
  end
  return MNISTDataset:new{_data = images:reshape({n, h, w, 1}), _label = label, _transform = transform,
                          _root = root, _train = train}
end

function MNISTDataset:len() return #self._label end

function MNISTDataset:get(i)
  local n = #self._label
  if type(i) ~= "number" or i % 1 ~= 0 or i < 0 or i >= n then
    core.error(("dataset index %s is out of range for a dataset of length %d (indices are 0-based)")
               :format(tostring(i), n))
  end
  local x, y = self._data:at(i), self._label[i + 1]
  if self._transform then
    local a, b = self._transform(x, y)
    return {a, b}
  end
  return {x, y}
end

-- Default-batchify fast path of the DataLoader: one take for the images.
function MNISTDataset:_gather(indices)
  if self._transform then return nil end
  local idx = np.array(indices, {dtype = "int64"})
  local labels = {}
  for k = 1, #indices do labels[k] = self._label[indices[k] + 1] end
  return {np.take(self._data, idx, 0), data.batchify.stack(labels)}
end

-- MNIST{root = '~/.mxnet/datasets/mnist', train = true, transform = fn(data, label)}
function vision.MNIST(opts) return load("MNIST", "~/.mxnet/datasets/mnist", opts) end

-- FashionMNIST{root = '/usr/share/datasets/fashion-mnist' (Debian's
-- dataset-fashion-mnist), train = true, transform = fn(data, label)}
function vision.FashionMNIST(opts)
  return load("FashionMNIST", "/usr/share/datasets/fashion-mnist", opts)
end

return setmetatable(vision, {__index = function(t, k)
  if k == "transforms" then
    local m = require("luon.gluon.data.transforms")
    rawset(t, k, m)
    return m
  end
  return nil
end})
