-- luon.npx: MXNet's numpy extensions: devices, the default device, GPU
-- memory information, memory statistics, and the neural-network activations.
local core = require("luon.core")
local np = require("luon.np")
local ffi, C = core.ffi, core.C

local npx = {}
npx.Device = core.Device

function npx.cpu(id) return core.device("cpu", id or 0) end
-- gpu(i) names a device; using it when it does not exist is an error
-- that says how many GPUs there are.
function npx.gpu(id) return core.device("gpu", id or 0) end

function npx.num_gpus() return C.luon_gpu_count() end

-- free, total = npx.gpu_memory_info(i): bytes on gpu(i). Where there is
-- no GPU at all it returns 0, 0 and warns once on stderr (not an error, so
-- that GPU-ready scripts such as the tutorial run unchanged on a CPU-only
-- machine; MXNet raises there). An id past the last GPU is an error.
local warned_no_gpu = false
function npx.gpu_memory_info(id)
  id = id or 0
  if C.luon_gpu_count() == 0 then
    if not warned_no_gpu then
      warned_no_gpu = true
      io.stderr:write(("luon: npx.gpu_memory_info(%s): no GPU is available (%s); returning 0, 0\n")
                      :format(tostring(id), ffi.string(C.luon_cuda_status())))
    end
    return 0, 0
  end
  local fr, total = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")
  core.check(C.luon_gpu_memory_info(id, fr, total))
  return tonumber(fr[0]), tonumber(total[0])
end

function npx.current_device() return core.default_device end

-- MXNet's switch to NumPy semantics. luon has no other mode: set_np() is
-- accepted as it is, and asking for another mode is an error.
function npx.set_np(kw)
  kw = core.options(kw, "set_np", {"shape", "array", "dtype"}, nil, nil, "argument")
  if kw.shape == false or kw.array == false then
    core.error("set_np: luon always has NumPy shapes and arrays; shape=false or array=false is not available")
  end
  if kw.dtype == true then
    core.error("set_np: dtype=true (float64 by default) is not available: luon's default dtype is float32; " ..
               "pass dtype='float64' to the creation functions")
  end
end
function npx.reset_np()
  core.error("reset_np: luon has no legacy (non-NumPy) mode: its arrays are always NumPy arrays")
end
function npx.is_np_array() return true end
function npx.is_np_shape() return true end

-- Run fn with dev as the default device, restoring the previous one after
-- (also on error); returns what fn returns.
function npx.with_device(dev, fn, ...)
  dev = core.resolve_device(dev, "with_device")
  if type(fn) ~= "function" then core.error("with_device: the second argument must be a function") end
  local saved = core.default_device
  core.default_device = dev
  local function finish(ok, ...)
    core.default_device = saved
    if not ok then error((...), 0) end
    return ...
  end
  return finish(pcall(fn, ...))
end

local function stats_of(type_id, id)
  local s = ffi.new("luon_memory_stats")
  core.check(C.luon_memory_stats_get(type_id, id, s))
  return {in_use = tonumber(s.in_use), cached = tonumber(s.cached), peak = tonumber(s.peak),
          allocs = tonumber(s.allocs), cache_hits = tonumber(s.cache_hits)}
end

-- Allocator statistics of a device: in_use, cached, peak, allocs, cache_hits.
function npx.memory_stats(dev)
  dev = core.resolve_device(dev, "memory_stats")
  local s = stats_of(dev.type_id, dev.device_id) -- not a tail call: errors name our caller
  return s
end

-- Start the device's peak over from what is in use now (PyTorch's
-- torch.cuda.reset_peak_memory_stats): the peak of one phase of a program.
function npx.reset_peak_memory_stats(dev)
  dev = core.resolve_device(dev, "reset_peak_memory_stats")
  core.check(C.luon_memory_reset_peak(dev.type_id, dev.device_id))
end

function npx.empty_cache(dev)
  dev = core.resolve_device(dev, "empty_cache")
  collectgarbage("collect")
  core.check(C.luon_memory_empty_cache(dev.type_id, dev.device_id))
end

-- The same for pinned host pool id (0..15; MXNet's cpu_pinned(id)), where
-- the DataLoader makes its batches when a GPU is present: all zeros
-- without a GPU. Emptying it waits for the copies still reading its blocks.
local PINNED = C.LUON_CPU_PINNED
local function pinned_id(id, fname)
  return core.int_arg(id or 0, fname, "the pinned pool id", 0, 2^31 - 1)
end

function npx.pinned_memory_stats(id)
  local s = stats_of(PINNED, pinned_id(id, "pinned_memory_stats"))
  return s
end

function npx.empty_pinned_cache(id)
  id = pinned_id(id, "empty_pinned_cache")
  collectgarbage("collect")
  core.check(C.luon_memory_empty_cache(PINNED, id))
end

-- A cap on the bytes a device's allocator holds (in use plus cached), nil
-- or 0 for none: an allocation past it raises "out of memory" (after a full
-- collection and a retry, as on a full device) where the system might kill
-- the process instead. $LUON_MEMORY_LIMIT (bytes; K, M, G, T suffixes)
-- gives every device its first limit.
function npx.set_memory_limit(dev, bytes)
  dev = core.resolve_device(dev, "set_memory_limit")
  bytes = core.int_arg(bytes or 0, "set_memory_limit", "bytes", 0)
  core.check(C.luon_memory_limit_set(dev.type_id, dev.device_id, bytes))
end

-- The device's limit in bytes, or nil for none.
function npx.memory_limit(dev)
  dev = core.resolve_device(dev, "memory_limit")
  local v = ffi.new("int64_t[1]")
  core.check(C.luon_memory_limit_get(dev.type_id, dev.device_id, v))
  return v[0] ~= 0 and tonumber(v[0]) or nil
end

function npx.waitall()
  for i = 0, C.luon_gpu_count() - 1 do core.check(C.luon_device_sync(C.LUON_GPU, i)) end
end

function npx.set_num_threads(n) C.luon_set_num_threads(core.int_arg(n, "set_num_threads", "n", 1)) end
function npx.num_threads() return C.luon_get_num_threads() end

local function unary(name)
  local id = core.op_ids[name]
  npx[name] = function(x)
    if not core.is_array(x) then core.error(("%s: expected an ndarray, got %s"):format(name, type(x))) end
    return core.call1(id, x)
  end
end
unary("relu")
unary("sigmoid")

---------------------------------------------------------------------------
-- Neural-network ops with MXNet's names and keyword arguments (what the
-- gluon.nn layers call). Positional arrays, then one table of keywords.

local op = core.op_ids
local is_array = core.is_array
local S = core.slot -- the ops' attribute slots by name (core/luon_ops.def)
local DROPOUT_P, LEAKY_SLOPE, SOFTMAX_AXIS = S.DROPOUT_P, S.LEAKY_SLOPE, S.SOFTMAX_AXIS

-- An op's options (core.options) are exactly those the op reads
-- (pooling{pool_typ = 'avg'} must not quietly mean max); the lists of each
-- op are made once (not a table per call on the hot path).
local bn_keys = {"eps", "momentum", "fix_gamma", "use_global_stats", "axis", "output_mean_var"}
local fc_keys, dropout_keys = {"num_hidden", "no_bias", "flatten"}, {"p", "mode", "axes"}
local activation_keys, leaky_keys = {"act_type"}, {"act_type", "slope"}
local softmax_keys, pick_keys = {"axis", "temperature", "use_length"}, {"axis", "mode", "keepdims"}

local need_array = core.array_arg

local pair = core.pair

local function layout_check(layout, fname)
  if layout ~= nil and layout ~= "NCHW" then
    core.error(("%s: layout %s is not supported (only 'NCHW')"):format(fname, tostring(layout)))
  end
end

-- convolution(data, weight, bias, {kernel=, stride=1, dilate=1, pad=0,
-- num_filter=, num_group=1, no_bias=false, layout='NCHW', act_type=nil|'relu'}):
-- 2-d, NCHW; act_type 'relu' (luon's) applies a relu in the same pass.
-- bias may be nil (or no_bias = true). kernel and num_filter, when given,
-- must agree with the weight's shape (num_filter, C/num_group, kh, kw).
local conv_keys = {"kernel", "stride", "dilate", "pad", "num_filter", "num_group", "no_bias", "layout",
                   "act_type"}
-- conv2d's inputs and attributes (core.attrs()) for convolution's arguments.
local function conv_args(data, weight, bias, kw)
  need_array(data, "convolution", "data")
  need_array(weight, "convolution", "weight")
  layout_check(kw.layout, "convolution")
  local ws = weight.shape
  if kw.num_filter ~= nil and kw.num_filter ~= ws[1] then
    core.error(("convolution: num_filter is %s but the weight has %s filters (shape %s)")
               :format(core.show_value(kw.num_filter), tostring(ws[1]), core.shape_text(ws)))
  end
  if kw.kernel ~= nil then
    local kh, kw_ = pair(kw.kernel, nil, "convolution", "kernel")
    if #ws ~= 4 or ws[3] ~= kh or ws[4] ~= kw_ then
      core.error(("convolution: kernel (%d, %d) does not match weight shape (%s)")
                 :format(kh, kw_, table.concat(ws, ", ")))
    end
  end
  local sh, sw = pair(kw.stride, 1, "convolution", "stride")
  local ph, pw = pair(kw.pad, 0, "convolution", "pad")
  local dh, dw = pair(kw.dilate, 1, "convolution", "dilate")
  local inputs = {data, weight}
  if bias ~= nil and not kw.no_bias then inputs[3] = need_array(bias, "convolution", "bias") end
  local a = core.attrs()
  a.i[S.CONV2D_STRIDE_H], a.i[S.CONV2D_STRIDE_W], a.i[S.CONV2D_PAD_H], a.i[S.CONV2D_PAD_W] = sh, sw, ph, pw
  a.i[S.CONV2D_DILATE_H], a.i[S.CONV2D_DILATE_W] = dh, dw
  a.i[S.CONV2D_GROUPS] = core.int_arg(kw.num_group or 1, "convolution", "num_group")
  a.i[S.CONV2D_RELU], a.ni = 0, S.CONV2D_RELU + 1
  if kw.act_type ~= nil then -- luon's extension: a relu fused into the convolution
    if kw.act_type ~= "relu" then
      core.error(("convolution: act_type can only be 'relu' (fused), got %s"):format(tostring(kw.act_type)))
    end
    a.i[S.CONV2D_RELU] = 1
  end
  return inputs, a
end

function npx.convolution(data, weight, bias, kw)
  if type(bias) == "table" and not is_array(bias) then kw, bias = bias, nil end
  local inputs, a = conv_args(data, weight, bias, core.options(kw, "convolution", conv_keys))
  return core.call(op.conv2d, inputs, a)
end

-- pooling's options (below), which convolution_maxpool's pool_kw shares
local pool_keys = {"kernel", "pool_type", "global_pool", "stride", "pad", "pooling_convention",
                   "count_include_pad", "layout"}

-- luon's fusion: convolution(data, weight, bias, kw) (with its relu act_type)
-- then max pooling(pool_kw) as one op whose convolution output is never
-- stored; the same values as the two calls. pool_kw as pooling's, max only.
function npx.convolution_maxpool(data, weight, bias, kw, pool_kw)
  local inputs, a = conv_args(data, weight, bias, core.options(kw, "convolution_maxpool", conv_keys))
  pool_kw = core.options(pool_kw, "convolution_maxpool", pool_keys, nil, "the pooling options", "pooling option")
  layout_check(pool_kw.layout, "convolution_maxpool")
  if (pool_kw.pool_type or "max") ~= "max" or pool_kw.global_pool then
    core.error("convolution_maxpool: the pool must be max pooling over windows (not global)")
  end
  local kh, kww = pair(pool_kw.kernel, nil, "convolution_maxpool", "kernel")
  local sh, sw = pair(pool_kw.stride, {kh, kww}, "convolution_maxpool", "stride")
  local ph, pw = pair(pool_kw.pad, 0, "convolution_maxpool", "pad")
  local conv = pool_kw.pooling_convention or "valid"
  if conv ~= "valid" and conv ~= "full" then
    core.error(("convolution_maxpool: pooling_convention must be 'valid' or 'full', got %s"):format(tostring(conv)))
  end
  a.i[S.CMP_KERNEL_H], a.i[S.CMP_KERNEL_W], a.i[S.CMP_STRIDE_H], a.i[S.CMP_STRIDE_W] = kh, kww, sh, sw
  a.i[S.CMP_PAD_H], a.i[S.CMP_PAD_W] = ph, pw
  a.i[S.CMP_CEIL], a.ni = conv == "full" and 1 or 0, S.CMP_CEIL + 1
  return core.call(op.conv2d_maxpool, inputs, a, nil, 2)[1] -- the indices live on in the tape
end

-- pooling(data, {kernel=, pool_type='max'|'avg', global_pool=false,
-- stride=kernel, pad=0, pooling_convention='valid'|'full',
-- count_include_pad=true, layout='NCHW'}): 2-d, NCHW.
function npx.pooling(data, kw)
  kw = core.options(kw, "pooling", pool_keys)
  need_array(data, "pooling", "data")
  layout_check(kw.layout, "pooling")
  local ptype = kw.pool_type or "max"
  local id = ptype == "max" and op.max_pool2d or ptype == "avg" and op.avg_pool2d
  if not id then
    core.error(("pooling: pool_type must be 'max' or 'avg', got %s"):format(tostring(ptype)))
  end
  local conv = kw.pooling_convention or "valid"
  if conv ~= "valid" and conv ~= "full" then
    core.error(("pooling: pooling_convention must be 'valid' or 'full', got %s"):format(tostring(conv)))
  end
  local global = kw.global_pool and 1 or 0
  local kh, kww = pair(kw.kernel, global == 1 and 1 or nil, "pooling", "kernel")
  local sh, sw = pair(kw.stride, {kh, kww}, "pooling", "stride")
  local ph, pw = pair(kw.pad, 0, "pooling", "pad")
  local a = core.attrs()
  a.i[S.POOL_KERNEL_H], a.i[S.POOL_KERNEL_W], a.i[S.POOL_STRIDE_H], a.i[S.POOL_STRIDE_W] = kh, kww, sh, sw
  a.i[S.POOL_PAD_H], a.i[S.POOL_PAD_W], a.i[S.POOL_CEIL] = ph, pw, conv == "full" and 1 or 0
  a.i[S.POOL_GLOBAL], a.i[S.POOL_COUNT_PAD] = global, kw.count_include_pad == false and 0 or 1
  a.ni = S.POOL_COUNT_PAD + 1
  return core.call(id, {data}, a)
end

-- batch_norm(x, gamma, beta, running_mean, running_var, {eps=1e-3,
-- momentum=0.9, fix_gamma=true, use_global_stats=false, axis=1}).
-- Training mode (autograd.is_training()) normalises with the batch
-- statistics and updates the running statistics in place, in the forward
-- pass, with the biased variance; otherwise it uses the running statistics.
-- fix_gamma: gamma is taken as 1 (MXNet's default for this op).
function npx.batch_norm(x, gamma, beta, running_mean, running_var, kw)
  kw = core.options(kw, "batch_norm", bn_keys)
  need_array(x, "batch_norm", "x")
  need_array(gamma, "batch_norm", "gamma")
  need_array(beta, "batch_norm", "beta")
  need_array(running_mean, "batch_norm", "running_mean")
  need_array(running_var, "batch_norm", "running_var")
  if kw.fix_gamma ~= false then
    gamma = np.ones(gamma.shape, {dtype = gamma.dtype, device = gamma.device})
  end
  local a = core.attrs()
  a.i[S.BN_AXIS] = core.int_arg(kw.axis or 1, "batch_norm", "axis")
  a.i[S.BN_TRAINING], a.i[S.BN_GLOBAL_STATS] = C.luon_autograd_is_training(), kw.use_global_stats and 1 or 0
  a.ni = S.BN_GLOBAL_STATS + 1
  a.f[S.BN_EPS] = core.num_arg(kw.eps or 1e-3, "batch_norm", "eps")
  a.f[S.BN_MOMENTUM] = core.num_arg(kw.momentum or 0.9, "batch_norm", "momentum")
  local outs = core.call(op.batch_norm, {x, gamma, beta, running_mean, running_var}, a, nil, 3)
  if kw.output_mean_var then return outs[1], outs[2], outs[3] end
  return outs[1]
end

-- fully_connected(x, weight, bias, {num_hidden=, no_bias=false,
-- flatten=true}): y = x . weight^T + bias, weight (num_hidden, in_units).
-- flatten: x (N, ...) is taken as (N, prod(...)); else the last axis.
function npx.fully_connected(x, weight, bias, kw)
  if type(bias) == "table" and not is_array(bias) then kw, bias = bias, nil end
  kw = core.options(kw, "fully_connected", fc_keys)
  need_array(x, "fully_connected", "x")
  need_array(weight, "fully_connected", "weight")
  if weight.ndim ~= 2 then
    core.error(("fully_connected: weight must be 2-D (num_hidden, in_units), got shape %s")
               :format(core.shape_text(weight.shape)))
  end
  if kw.num_hidden ~= nil and kw.num_hidden ~= weight.shape[1] then
    core.error(("fully_connected: num_hidden is %s but the weight has %d rows (shape %s)")
               :format(core.show_value(kw.num_hidden), weight.shape[1], core.shape_text(weight.shape)))
  end
  if kw.flatten ~= false and x.ndim ~= 2 then
    local n = x.ndim == 0 and 1 or x.shape[1]
    x = np.reshape(x, {n, -1})
  end
  local y = np.matmul(x, np.transpose(weight))
  if bias ~= nil and not kw.no_bias then y = y + need_array(bias, "fully_connected", "bias") end
  return y
end

-- batch_flatten(x): (N, ...) -> (N, prod(...)); (N,) -> (N, 1).
function npx.batch_flatten(x)
  need_array(x, "batch_flatten", "x")
  if x.ndim == 0 then core.error("batch_flatten: x must have at least one dimension, got a 0-d array") end
  return np.reshape(x, {x.shape[1], -1})
end

-- dropout(x, {p=0.5, mode='training'|'always', axes={}}): keeps each element
-- with probability 1-p, scaled by 1/(1-p); 'training' acts only while
-- autograd.is_training(), otherwise returns x itself.
function npx.dropout(x, kw)
  kw = core.options(kw, "dropout", dropout_keys)
  need_array(x, "dropout", "x")
  local p = kw.p == nil and 0.5 or kw.p
  local mode = kw.mode or "training"
  if mode ~= "training" and mode ~= "always" then
    core.error(("dropout: mode must be 'training' or 'always', got %s"):format(tostring(mode)))
  end
  if kw.axes ~= nil and #kw.axes > 0 then
    core.error("dropout: a mask shared along axes is not supported (axes must be empty)")
  end
  if mode == "training" and C.luon_autograd_is_training() == 0 then return x end
  local a = core.attrs()
  a.f[DROPOUT_P] = core.num_arg(p, "dropout", "p")
  return core.call(op.dropout, {x}, a, nil, 2)[1]
end

-- activation(x, {act_type='relu'|'sigmoid'|'tanh'|'softrelu'|'softsign'})
local act_ops = {relu = op.relu, sigmoid = op.sigmoid, tanh = op.tanh, softrelu = op.softrelu}
function npx.activation(x, kw)
  local act = type(kw) == "string" and kw or core.options(kw, "activation", activation_keys).act_type or "relu"
  need_array(x, "activation", "x")
  local id = act_ops[act]
  if id then return core.call1(id, x) end
  if act == "softsign" then return x / (np.abs(x) + 1) end
  core.error(("activation: act_type must be 'relu', 'sigmoid', 'tanh', 'softrelu' or 'softsign', got %s")
             :format(tostring(act)))
end

-- leaky_relu(x, {act_type='leaky', slope=0.25})
function npx.leaky_relu(x, kw)
  kw = core.options(kw, "leaky_relu", leaky_keys)
  need_array(x, "leaky_relu", "x")
  if kw.act_type ~= nil and kw.act_type ~= "leaky" then
    core.error(("leaky_relu: only act_type 'leaky' is supported, got %s"):format(tostring(kw.act_type)))
  end
  local a = core.attrs()
  a.f[LEAKY_SLOPE] = kw.slope == nil and 0.25 or core.num_arg(kw.slope, "leaky_relu", "slope")
  return core.call(op.leaky_relu, {x}, a)
end

local function softmax_like(name)
  local id = op[name]
  npx[name] = function(x, kw)
    if type(kw) == "number" then kw = {axis = kw} end
    if type(kw) == "table" and kw.use_length then -- MXNet's mask by lengths: an error, not unmasked values
      core.error(("%s: use_length = true (with length) is not supported"):format(name))
    end
    kw = core.options(kw, name, softmax_keys)
    need_array(x, name, "x")
    if kw.temperature ~= nil and kw.temperature ~= 1 then x = x / kw.temperature end
    local a = core.attrs()
    a.i[SOFTMAX_AXIS], a.ni = core.int_arg(kw.axis or -1, name, "axis"), SOFTMAX_AXIS + 1
    return core.call(id, {x}, a)
  end
end
-- softmax(x, {axis=-1, temperature=1, use_length=false}), log_softmax(x, the same)
softmax_like("softmax")
softmax_like("log_softmax")

-- pick(x, index, {axis=-1, mode='clip'|'wrap', keepdims=false})
function npx.pick(x, index, kw)
  kw = core.options(kw, "pick", pick_keys)
  need_array(x, "pick", "x")
  if not is_array(index) then index = np.array(index, {device = x.device}) end
  local mode = kw.mode or "clip"
  if mode ~= "clip" and mode ~= "wrap" then
    core.error(("pick: mode must be 'clip' or 'wrap', got %s"):format(tostring(mode)))
  end
  local a = core.attrs()
  a.i[S.PICK_AXIS] = core.int_arg(kw.axis or -1, "pick", "axis")
  a.i[S.PICK_KEEPDIMS], a.i[S.PICK_MODE] = kw.keepdims and 1 or 0, mode == "wrap" and 1 or 0
  a.ni = S.PICK_MODE + 1
  return core.call(op.pick, {x, index}, a)
end

npx.seed = np.random.seed

npx.random = {}
-- bernoulli(prob, logit, size, {dtype, device}): 1 with probability prob
-- (or sigmoid(logit)), else 0, float32 unless dtype says otherwise; prob
-- and logit are numbers or arrays (size left out: the array's shape). A
-- draw is u < prob, u uniform on [0, 1) in float64.
function npx.random.bernoulli(...)
  local fname = "random.bernoulli"
  local kw = core.args(fname, {"prob", "logit", "size"}, {"prob", "logit", "size", "dtype", "device", "ctx"}, ...)
  local p, logit = kw.prob, kw.logit
  if (p == nil) == (logit == nil) then
    core.error(("%s: give exactly one of prob and logit, got %s"):format(fname,
               p == nil and "neither" or "both"))
  end
  local given = p == nil and logit or p
  local what = p == nil and "logit" or "prob"
  if type(given) == "number" then
    if given ~= given then core.error(("%s: %s is NaN"):format(fname, what)) end
    if p ~= nil and not (p >= 0 and p <= 1) then
      core.error(("%s: prob %s is not a probability in [0, 1]"):format(fname, p))
    end
    if logit ~= nil then p = 1 / (1 + math.exp(-logit)) end
  elseif is_array(given) then
    local v = given:astype("float64")
    local lo, hi = np.min(v):item(), np.max(v):item()
    if lo ~= lo or hi ~= hi then core.error(("%s: %s holds NaN"):format(fname, what)) end
    if p ~= nil and not (lo >= 0 and hi <= 1) then
      core.error(("%s: prob holds values from %s to %s, expected probabilities in [0, 1]"):format(fname, lo, hi))
    end
    if logit ~= nil then p = npx.sigmoid(logit:astype("float64")) end
  else
    core.error(("%s: %s must be a number or an ndarray, got %s"):format(fname, what, core.show_value(given)))
  end
  local dev = core.device_of(kw, fname) or (is_array(given) and given.device) or nil
  local size = kw.size or (is_array(given) and given.shape) or {}
  local u = np.random.uniform(0, 1, size, {dtype = "float64", device = dev})
  return np.less(u, p):astype(kw.dtype or "float32")
end
core.strict_module(npx.random, "npx.random")

return core.strict_module(npx, "npx")
