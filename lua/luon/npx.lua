-- luon.npx: MXNet's numpy extensions: devices, the default device, GPU
-- memory information, memory statistics, and the neural-network activations.
local core = require("luon.core")
local np = require("luon.np")
local ffi, C = core.ffi, core.C

local npx = {}
for name, f in pairs(require("luon.serialize").npx) do npx[name] = f end -- save, savez, load
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
          allocs = tonumber(s.allocs), cache_hits = tonumber(s.cache_hits),
          requested = tonumber(s.requested), peak_requested = tonumber(s.peak_requested)}
end

-- Allocator statistics of a device: in_use, cached, peak, allocs, cache_hits
-- (in_use and peak count the size classes held), requested and
-- peak_requested (the bytes asked for: PyTorch's memory_allocated and
-- max_memory_allocated count these).
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
local bn_keys = {"eps", "momentum", "fix_gamma", "use_global_stats", "axis", "output_mean_var", "act_type"}
local fc_keys, dropout_keys = {"num_hidden", "no_bias", "flatten", "act_type"}, {"p", "mode", "axes"}
local activation_keys, leaky_keys = {"act_type"}, {"act_type", "slope"}
local softmax_keys, pick_keys = {"axis", "temperature", "use_length"}, {"axis", "mode", "keepdims"}

local need_array = core.array_arg

local pair = core.pair

local layouts = {"NCW", "NCHW", "NCDHW"}
local function layout_check(layout, fname, n)
  local want = layouts[n or 2]
  if layout ~= nil and layout ~= want then
    core.error(("%s: layout %s is not supported (only '%s')"):format(fname, tostring(layout), want))
  end
end

-- The spatial rank (1, 2 or 3) of a convolution or pooling: the kernel's
-- length when it is a list (MXNet's rule), else that of `arr` (the weight,
-- or the data for pooling; `what` names it) less its first two axes. The
-- data must have it.
local data_layouts = {"(N, C, W)", "(N, C, H, W)", "(N, C, D, H, W)"}
local function spatial_rank(kernel, arr, what, data, fname)
  local n
  if type(kernel) == "table" then
    n = #kernel
    if n < 1 or n > 3 then
      core.error(("%s: the kernel must have 1, 2 or 3 sizes (1-d, 2-d or 3-d), got %s"):format(fname,
                 "{" .. table.concat(core.map_show(kernel), ", ") .. "}"))
    end
  else
    n = arr.ndim - 2
    if n < 1 or n > 3 then
      core.error(("%s: %s must be 3-d, 4-d or 5-d (N, C, then 1, 2 or 3 spatial axes), got shape %s")
                 :format(fname, what, core.shape_text(arr.shape)))
    end
  end
  if data.ndim ~= n + 2 then
    core.error(("%s: a %d-d kernel takes %d-d data %s, got shape %s"):format(fname, n, n + 2, data_layouts[n],
               core.shape_text(data.shape)))
  end
  return n
end

-- Writes list t into the consecutive int slots from `slot`.
local function put(a, slot, t)
  for k = 1, #t do a.i[slot + k - 1] = t[k] end
end

-- A 1-d call runs as the 2-d op on views with H = 1: the same sums in the
-- same order, so exact, and as fast (the 2-d kernels' rows are the 1-d
-- signal). (w) sizes become (1, w), pads (0, w).
local function as_2d(t, h) return {h, t[1]} end
local function view_2d(x) -- (N, C, W) -> (N, C, 1, W)
  local s = x.shape
  return x:reshape({s[1], s[2], 1, s[3]})
end

-- The weight and kernel of a convolution (deconvolution: `io` names the
-- weight's first two axes): ndim n + 2, kernel, when given, its sizes.
local function check_weight(fname, n, weight, kernel, io)
  local ws = weight.shape
  if weight.ndim ~= n + 2 then
    core.error(("%s: a %d-d kernel takes a %d-d weight %s, got shape %s"):format(fname, n, n + 2, io,
               core.shape_text(ws)))
  end
  if kernel ~= nil then
    local k = core.sizes(kernel, n, nil, fname, "kernel")
    for d = 1, n do
      if k[d] ~= ws[d + 2] then
        core.error(("%s: kernel %s does not match weight shape %s"):format(fname, core.shape_text(k),
                   core.shape_text(ws)))
      end
    end
  end
end

-- convolution(data, weight, bias, {kernel=, stride=1, dilate=1, pad=0,
-- num_filter=, num_group=1, no_bias=false, layout, act_type=nil|'relu'}):
-- 1-d (NCW), 2-d (NCHW) or 3-d (NCDHW), as the kernel's length says (or,
-- without a kernel, the weight's rank); act_type 'relu' (luon's) applies a
-- relu in the same pass. bias may be nil (or no_bias = true). kernel and
-- num_filter, when given, must agree with the weight's shape
-- (num_filter, C/num_group, k...).
local conv_keys = {"kernel", "stride", "dilate", "pad", "num_filter", "num_group", "no_bias", "layout",
                   "act_type"}
-- The op, its inputs and attributes (core.attrs()) for convolution's
-- arguments, the spatial rank n (a 1-d call's result is the 2-d op's, to
-- reshape), and whether a relu is to follow (3-d: conv3d fuses none).
local function conv_args(fname, data, weight, bias, kw)
  need_array(data, fname, "data")
  need_array(weight, fname, "weight")
  local n = spatial_rank(kw.kernel, weight, "the weight", data, fname)
  layout_check(kw.layout, fname, n)
  check_weight(fname, n, weight, kw.kernel, "(num_filter, C/num_group, k...)")
  local ws = weight.shape
  if kw.num_filter ~= nil and kw.num_filter ~= ws[1] then
    core.error(("%s: num_filter is %s but the weight has %s filters (shape %s)")
               :format(fname, core.show_value(kw.num_filter), tostring(ws[1]), core.shape_text(ws)))
  end
  local stride = core.sizes(kw.stride, n, 1, fname, "stride")
  local pad = core.sizes(kw.pad, n, 0, fname, "pad")
  local dilate = core.sizes(kw.dilate, n, 1, fname, "dilate")
  local groups = core.int_arg(kw.num_group or 1, fname, "num_group")
  if kw.act_type ~= nil and kw.act_type ~= "relu" then -- luon's extension: a relu fused into the convolution
    core.error(("%s: act_type can only be 'relu' (fused), got %s"):format(fname, tostring(kw.act_type)))
  end
  if bias ~= nil and not kw.no_bias then bias = need_array(bias, fname, "bias") else bias = nil end
  if n == 1 then
    -- the 2-d op's checks would show (N, C, 1, W): the 1-d ones here
    local xs, W = data.shape, data.shape[3]
    if groups >= 1 and (xs[2] ~= ws[2] * groups or ws[1] % groups ~= 0) then
      core.error(("%s: data has %d channels and the weight %d filters, but %d groups of weight shape %s "
                  .. "take %d channels and a multiple of %d filters"):format(fname, xs[2], ws[1], groups,
                  core.shape_text(ws), ws[2] * groups, groups))
    end
    local span = dilate[1] * (ws[3] - 1) + 1
    if span > W + 2 * pad[1] then
      core.error(("%s: kernel %d with dilation %d spans %d, more than the input width %d padded by %d")
                 :format(fname, ws[3], dilate[1], span, W, pad[1]))
    end
    data, weight = view_2d(data), view_2d(weight)
    stride, pad, dilate = as_2d(stride, 1), as_2d(pad, 0), as_2d(dilate, 1)
  end
  local inputs = {data, weight, bias}
  local a = core.attrs()
  if n == 3 then
    put(a, S.CONV3D_STRIDE_D, stride)
    put(a, S.CONV3D_PAD_D, pad)
    put(a, S.CONV3D_DILATE_D, dilate)
    a.i[S.CONV3D_GROUPS], a.ni = groups, S.CONV3D_GROUPS + 1
    return op.conv3d, inputs, a, n, kw.act_type ~= nil
  end
  put(a, S.CONV2D_STRIDE_H, stride)
  put(a, S.CONV2D_PAD_H, pad)
  put(a, S.CONV2D_DILATE_H, dilate)
  a.i[S.CONV2D_GROUPS] = groups
  a.i[S.CONV2D_RELU], a.ni = kw.act_type ~= nil and 1 or 0, S.CONV2D_RELU + 1
  return op.conv2d, inputs, a, n, false
end

-- (N, C, 1, W) -> (N, C, W): a 1-d call's result from the 2-d op
local function drop_h(y)
  local s = y.shape
  return y:reshape({s[1], s[2], s[4]})
end

function npx.convolution(data, weight, bias, kw)
  if type(bias) == "table" and not is_array(bias) then kw, bias = bias, nil end
  local id, inputs, a, n, relu = conv_args("convolution", data, weight, bias,
                                            core.options(kw, "convolution", conv_keys))
  local y = core.call(id, inputs, a)
  if n == 1 then y = drop_h(y) end
  if relu then y = core.call1(op.relu, y) end -- 3-d: the relu after (conv3d has none fused)
  return y
end

-- pooling's options (below), which convolution_maxpool's pool_kw shares
local pool_keys = {"kernel", "pool_type", "global_pool", "stride", "pad", "pooling_convention",
                   "count_include_pad", "layout"}

-- luon's fusion: convolution(data, weight, bias, kw) (with its relu act_type)
-- then max pooling(pool_kw) as one op whose convolution output is never
-- stored; the same values as the two calls. 2-d only; pool_kw as pooling's,
-- max only. bn (optional): batch_norm's inputs and options after the pool,
-- {gamma=, beta=, running_mean=, running_var=, eps=1e-3, fix_gamma=true}
-- (batch_norm's defaults), in predict mode: the running statistics, the
-- same bits as batch_norm, and no gradient (an error while autograd
-- records). Outside autograd.record() no window indices are kept.
local cmp_bn_keys = {"gamma", "beta", "running_mean", "running_var", "eps", "fix_gamma"}

-- bn's four arrays appended to inputs (gamma 1 with fix_gamma, as
-- batch_norm) and its eps, for the fused ops that end in a batch norm
local function bn_inputs(fname, inputs, bn)
  if C.luon_autograd_is_recording() ~= 0 then
    core.error(("%s: the batch norm (bn) runs in predict mode with no gradient; "
                .. "call it outside autograd.record(), or call npx.batch_norm after it"):format(fname))
  end
  local k = #inputs
  for i, name in ipairs({"gamma", "beta", "running_mean", "running_var"}) do
    inputs[k + i] = need_array(bn[name], fname, "bn." .. name)
  end
  if bn.fix_gamma ~= false then
    local g = inputs[k + 1]
    inputs[k + 1] = np.ones(g.shape, {dtype = g.dtype, device = g.device})
  end
  return core.num_arg(bn.eps or 1e-3, fname, "bn.eps")
end

function npx.convolution_maxpool(data, weight, bias, kw, pool_kw, bn)
  kw = core.options(kw, "convolution_maxpool", conv_keys)
  local id, inputs, a, n = conv_args("convolution_maxpool", data, weight, bias, kw)
  if id ~= op.conv2d or n ~= 2 then
    core.error("convolution_maxpool: 2-d only: data (N, C, H, W) and a 2-d kernel")
  end
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
  a.i[S.CMP_CEIL] = conv == "full" and 1 or 0
  local recording = C.luon_autograd_is_recording() ~= 0
  a.i[S.CMP_INFER], a.i[S.CMP_BN], a.ni = recording and 0 or 1, 0, S.CMP_BN + 1
  if bn ~= nil then
    bn = core.options(bn, "convolution_maxpool", cmp_bn_keys, nil, "the batch norm", "batch norm option")
    a.i[S.CMP_BN], a.f[S.CMP_BN_EPS] = 1, bn_inputs("convolution_maxpool", inputs, bn)
  end
  return core.call(op.conv2d_maxpool, inputs, a, nil, 2)[1] -- the indices live on in the tape
end

-- luon's fusion: convolution(data, weight, bias, kw) (2-d, no act_type)
-- then batch_norm in predict mode, bn = {gamma=, beta=, running_mean=,
-- running_var=, eps=1e-3, fix_gamma=true, act_type=nil|'relu'} (its
-- inputs, defaults and fused relu), as one op on the CPU: the same bits as
-- the calls apart, no gradient (an error while autograd records).
local cbn_keys = {"gamma", "beta", "running_mean", "running_var", "eps", "fix_gamma", "act_type"}
function npx.convolution_bn(data, weight, bias, kw, bn)
  kw = core.options(kw, "convolution_bn", conv_keys)
  if kw.act_type ~= nil then
    core.error("convolution_bn: act_type belongs to bn (a relu after the batch norm), not to the convolution")
  end
  local id, inputs, a, n = conv_args("convolution_bn", data, weight, bias, kw)
  if id ~= op.conv2d or n ~= 2 then
    core.error("convolution_bn: 2-d only: data (N, C, H, W) and a 2-d kernel")
  end
  bn = core.options(bn, "convolution_bn", cbn_keys, nil, "the batch norm", "batch norm option")
  if bn.act_type ~= nil and bn.act_type ~= "relu" then
    core.error(("convolution_bn: bn.act_type can only be 'relu', got %s"):format(core.show_value(bn.act_type)))
  end
  a.i[S.CBN_RELU], a.ni = bn.act_type and 1 or 0, S.CBN_RELU + 1
  a.f[S.CBN_EPS] = bn_inputs("convolution_bn", inputs, bn)
  return core.call(op.conv2d_bn, inputs, a)
end

-- deconvolution(data, weight, bias, {kernel=, stride=1, dilate=1, pad=0,
-- adj=0, target_shape=, num_filter=, num_group=1, no_bias=false, layout}):
-- the transposed convolution, 1-d, 2-d or 3-d as convolution's; weight
-- (C, num_filter/num_group, k...). Output size per axis
-- (in - 1)*stride - 2*pad + dilate*(k - 1) + 1 + adj, adj < stride; a
-- target_shape (the output's spatial sizes) sets pad and adj as MXNet does.
-- It is the input gradient of the convolution it transposes (the registry's
-- conv2d_grad_input or conv3d_grad_input, differentiable), plus the bias.
local deconv_keys = {"kernel", "stride", "dilate", "pad", "adj", "target_shape", "num_filter", "num_group",
                     "no_bias", "layout"}
function npx.deconvolution(data, weight, bias, kw)
  local fname = "deconvolution"
  if type(bias) == "table" and not is_array(bias) then kw, bias = bias, nil end
  kw = core.options(kw, fname, deconv_keys)
  need_array(data, fname, "data")
  need_array(weight, fname, "weight")
  local n = spatial_rank(kw.kernel, weight, "the weight", data, fname)
  layout_check(kw.layout, fname, n)
  check_weight(fname, n, weight, kw.kernel, "(C, num_filter/num_group, k...)")
  local xs, ws = data.shape, weight.shape
  local stride = core.sizes(kw.stride, n, 1, fname, "stride")
  local pad = core.sizes(kw.pad, n, 0, fname, "pad")
  local dilate = core.sizes(kw.dilate, n, 1, fname, "dilate")
  local adj = core.sizes(kw.adj, n, 0, fname, "adj")
  local groups = core.int_arg(kw.num_group or 1, fname, "num_group", 1)
  local cout = ws[2] * groups
  if xs[2] ~= ws[1] then
    core.error(("%s: data has %d channels but the weight (C, num_filter/num_group, k...) takes %d (data %s, "
                .. "weight %s)"):format(fname, xs[2], ws[1], core.shape_text(xs), core.shape_text(ws)))
  end
  if ws[1] % groups ~= 0 then
    core.error(("%s: num_group (%d) must divide the %d input channels"):format(fname, groups, ws[1]))
  end
  if kw.num_filter ~= nil and kw.num_filter ~= cout then
    core.error(("%s: num_filter is %s but the weight %s with num_group %d gives %d")
               :format(fname, core.show_value(kw.num_filter), core.shape_text(ws), groups, cout))
  end
  local full = {} -- (in - 1)*stride + dilate*(k - 1) + 1, before pad and adj
  for d = 1, n do full[d] = (xs[d + 2] - 1) * stride[d] + dilate[d] * (ws[d + 2] - 1) + 1 end
  local target = kw.target_shape
  if target ~= nil and not (type(target) == "table" and #target == 0) then
    target = core.sizes(target, n, nil, fname, "target_shape")
    for d = 1, n do -- MXNet's rule: pad and adj from the target
      if full[d] < target[d] then
        core.error(("%s: target_shape %s is too big: axis %d reaches at most %d"):format(fname,
                   core.shape_text(target), d, full[d]))
      end
      local t = full[d] - target[d]
      adj[d], pad[d] = t % 2, math.floor((t + 1) / 2)
    end
  end
  local out = {xs[1], cout}
  for d = 1, n do
    if adj[d] >= stride[d] then
      core.error(("%s: adj %s must be smaller than stride %s"):format(fname, core.shape_text(adj), core.shape_text(stride)))
    end
    out[d + 2] = full[d] - 2 * pad[d] + adj[d]
    if out[d + 2] < 1 then
      core.error(("%s: the output would be empty: axis %d of data %s gives (%d - 1)*%d - 2*%d + %d*(%d - 1) + 1 + %d = %d")
                 :format(fname, d, core.shape_text(xs), xs[d + 2], stride[d], pad[d], dilate[d], ws[d + 2], adj[d],
                         out[d + 2]))
    end
  end
  if bias ~= nil and not kw.no_bias then
    bias = need_array(bias, fname, "bias")
    if bias.ndim ~= 1 or bias.shape[1] ~= cout then
      core.error(("%s: bias must have shape (%d,) for %d output channels, got %s"):format(fname, cout, cout,
                 core.shape_text(bias.shape)))
    end
    local bs = {1, cout}
    for d = 1, n do bs[d + 2] = 1 end
    bias = bias:reshape(bs)
  else
    bias = nil
  end
  local id, osize = op.conv2d_grad_input, out
  if n == 1 then
    data, weight = view_2d(data), view_2d(weight)
    stride, pad, dilate = as_2d(stride, 1), as_2d(pad, 0), as_2d(dilate, 1)
    osize = {out[1], out[2], 1, out[3]}
  end
  local a = core.attrs()
  if n == 3 then
    id = op.conv3d_grad_input
    put(a, S.CONV3D_STRIDE_D, stride)
    put(a, S.CONV3D_PAD_D, pad)
    put(a, S.CONV3D_DILATE_D, dilate)
    a.i[S.CONV3D_GROUPS] = groups
    put(a, S.CONV3D_GRAD_INPUT_D, {out[3], out[4], out[5]})
    a.ni = S.CONV3D_GRAD_INPUT_W + 1
  else
    put(a, S.CONV2D_STRIDE_H, stride)
    put(a, S.CONV2D_PAD_H, pad)
    put(a, S.CONV2D_DILATE_H, dilate)
    a.i[S.CONV2D_GROUPS], a.i[S.CONV2D_RELU] = groups, 0
    a.i[S.CONV2D_GRAD_INPUT_H], a.i[S.CONV2D_GRAD_INPUT_W] = osize[3], osize[4]
    a.ni = S.CONV2D_GRAD_INPUT_W + 1
  end
  local y = core.call(id, {data, weight}, a)
  if n == 1 then y = drop_h(y) end
  if bias then y = y + bias end
  return y
end

-- pooling(data, {kernel=, pool_type='max'|'avg', global_pool=false,
-- stride=kernel, pad=0, pooling_convention='valid'|'full',
-- count_include_pad=true, layout}): 1-d, 2-d or 3-d as the kernel's length
-- says (or, without a list, the data's rank).
function npx.pooling(data, kw)
  local fname = "pooling"
  kw = core.options(kw, fname, pool_keys)
  need_array(data, fname, "data")
  local n = spatial_rank(kw.kernel, data, "data", data, fname)
  layout_check(kw.layout, fname, n)
  local ptype = kw.pool_type or "max"
  if ptype ~= "max" and ptype ~= "avg" then
    core.error(("pooling: pool_type must be 'max' or 'avg', got %s"):format(tostring(ptype)))
  end
  local conv = kw.pooling_convention or "valid"
  if conv ~= "valid" and conv ~= "full" then
    core.error(("pooling: pooling_convention must be 'valid' or 'full', got %s"):format(tostring(conv)))
  end
  local global = kw.global_pool and 1 or 0
  local kernel = core.sizes(kw.kernel, n, global == 1 and 1 or nil, fname, "kernel")
  local stride = core.sizes(kw.stride, n, kernel, fname, "stride")
  local pad = core.sizes(kw.pad, n, 0, fname, "pad")
  if n == 1 then
    -- the 2-d op's checks would show (N, C, 1, W): the 1-d ones here
    local s, W = data.shape, data.shape[3]
    if global == 1 then
      if W < 1 then core.error(("pooling: global pooling of an empty input %s"):format(core.shape_text(s))) end
    else
      if pad[1] >= kernel[1] then
        core.error(("pooling: padding %d must be smaller than the kernel %d"):format(pad[1], kernel[1]))
      end
      if kernel[1] > W + 2 * pad[1] then
        core.error(("pooling: kernel %d is larger than the input width %d padded by %d"):format(kernel[1], W, pad[1]))
      end
    end
    data = view_2d(data)
    kernel, stride, pad = as_2d(kernel, 1), as_2d(stride, 1), as_2d(pad, 0)
  end
  local a = core.attrs()
  local id
  if n == 3 then
    id = ptype == "max" and op.max_pool3d or op.avg_pool3d
    put(a, S.POOL3D_KERNEL_D, kernel)
    put(a, S.POOL3D_STRIDE_D, stride)
    put(a, S.POOL3D_PAD_D, pad)
    a.i[S.POOL3D_CEIL], a.i[S.POOL3D_GLOBAL] = conv == "full" and 1 or 0, global
    a.i[S.POOL3D_COUNT_PAD] = kw.count_include_pad == false and 0 or 1
    a.ni = S.POOL3D_COUNT_PAD + 1
  else
    id = ptype == "max" and op.max_pool2d or op.avg_pool2d
    put(a, S.POOL_KERNEL_H, kernel)
    put(a, S.POOL_STRIDE_H, stride)
    put(a, S.POOL_PAD_H, pad)
    a.i[S.POOL_CEIL], a.i[S.POOL_GLOBAL] = conv == "full" and 1 or 0, global
    a.i[S.POOL_COUNT_PAD] = kw.count_include_pad == false and 0 or 1
    a.ni = S.POOL_COUNT_PAD + 1
  end
  local y = core.call(id, {data}, a)
  if n == 1 then y = drop_h(y) end
  return y
end

-- batch_norm(x, gamma, beta, running_mean, running_var, {eps=1e-3,
-- momentum=0.9, fix_gamma=true, use_global_stats=false, axis=1}).
-- Training mode (autograd.is_training()) normalises with the batch
-- statistics and updates the running statistics in place, in the forward
-- pass, with the biased variance; otherwise it uses the running statistics.
-- fix_gamma: gamma is taken as 1 (MXNet's default for this op).
-- act_type 'relu' (luon's, as convolution's): y = max(y, 0) in the same
-- pass (BatchNorm followed by Activation('relu') in a Sequential uses it).
function npx.batch_norm(x, gamma, beta, running_mean, running_var, kw)
  kw = core.options(kw, "batch_norm", bn_keys)
  if kw.act_type ~= nil and kw.act_type ~= "relu" then
    core.error(("batch_norm: act_type can only be 'relu' (fused), got %s"):format(tostring(kw.act_type)))
  end
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
  a.i[S.BN_RELU] = kw.act_type and 1 or 0
  a.ni = S.BN_RELU + 1
  a.f[S.BN_EPS] = core.num_arg(kw.eps or 1e-3, "batch_norm", "eps")
  a.f[S.BN_MOMENTUM] = core.num_arg(kw.momentum or 0.9, "batch_norm", "momentum")
  local outs = core.call(op.batch_norm, {x, gamma, beta, running_mean, running_var}, a, nil, 3)
  if kw.output_mean_var then return outs[1], outs[2], outs[3] end
  return outs[1]
end

-- fully_connected(x, weight, bias, {num_hidden=, no_bias=false,
-- flatten=true, act_type=nil|'relu'}): y = x . weight^T + bias, weight
-- (num_hidden, in_units). flatten: x (N, ...) is taken as (N, prod(...));
-- else the last axis. act_type 'relu' (luon's, as convolution's) applies a
-- relu in the same pass. Float32 and float64 (x, weight and bias of one
-- dtype, x 2-D once flattened, amp not casting matmul) run as one linear op;
-- the rest as matmul, add and relu, which give the same values.
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
  local relu = kw.act_type ~= nil
  if relu and kw.act_type ~= "relu" then
    core.error(("fully_connected: act_type can only be 'relu' (fused), got %s"):format(core.show_value(kw.act_type)))
  end
  if kw.flatten ~= false and x.ndim ~= 2 then
    local n = x.ndim == 0 and 1 or x.shape[1]
    x = np.reshape(x, {n, -1})
  end
  if bias ~= nil and not kw.no_bias then need_array(bias, "fully_connected", "bias") else bias = nil end
  -- (the arrays' properties, each read on its own: one info struct shared by
  -- several reads in a JIT-compiled trace gave another call's stale ndim)
  local dt = x.dtype
  local fused = (dt == "float32" or dt == "float64") and weight.dtype == dt and x.ndim == 2 and
                not core.amp_casts(op.matmul)
  if fused then
    local xs, ws = x.shape, weight.shape
    fused = xs[2] == ws[2]
    if fused and bias then
      local bs = bias.shape
      fused = bias.dtype == dt and #bs == 1 and bs[1] == ws[1]
    end
  end
  if fused then
    local a = core.attrs()
    a.i[S.LINEAR_RELU], a.ni = relu and 1 or 0, S.LINEAR_RELU + 1
    return core.call(op.linear, bias and {x, weight, bias} or {x, weight}, a)
  end
  local y = np.matmul(x, np.transpose(weight))
  if bias then y = y + bias end
  if relu then y = npx.relu(y) end
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

-- leaky_relu(x, [gamma,] {act_type='leaky'|'elu'|'selu'|'gelu'|'prelu', slope=0.25}):
-- MXNet's LeakyReLU op. elu: slope * (exp(x) - 1) below 0; selu and gelu
-- (erf form) take no slope; prelu: the learned slopes gamma, one (shape
-- (1,)) or one per channel of axis 1 (shape (C,)). rrelu (random slopes)
-- is not available.
local leaky_ops = {elu = op.elu, selu = op.selu, gelu = op.gelu}
function npx.leaky_relu(x, gamma, kw)
  if type(gamma) == "table" and not is_array(gamma) then kw, gamma = gamma, nil end
  kw = core.options(kw, "leaky_relu", leaky_keys)
  need_array(x, "leaky_relu", "x")
  local act = kw.act_type or "leaky"
  if act == "prelu" then
    if gamma == nil then core.error("leaky_relu: act_type 'prelu' needs the slopes gamma (an ndarray)") end
    return npx.prelu(x, gamma)
  end
  if gamma ~= nil then
    core.error(("leaky_relu: gamma is only read by act_type 'prelu', got act_type %s"):format(core.show_value(act)))
  end
  local a = core.attrs()
  a.f[LEAKY_SLOPE] = kw.slope == nil and 0.25 or core.num_arg(kw.slope, "leaky_relu", "slope")
  if act == "leaky" then return core.call(op.leaky_relu, {x}, a) end
  local id = leaky_ops[act]
  if not id then
    core.error(("leaky_relu: act_type must be 'leaky', 'elu', 'selu', 'gelu' or 'prelu', got %s%s")
               :format(core.show_value(act), act == "rrelu" and " (rrelu, random slopes, is not available)" or ""))
  end
  return core.call(id, {x}, a)
end

-- prelu(x, gamma): x > 0 ? x : gamma * x, gamma (1,) or (C,) along axis 1
-- of x (MXNet's rule); differentiable in x and gamma.
function npx.prelu(x, gamma)
  need_array(x, "prelu", "x")
  need_array(gamma, "prelu", "gamma")
  local gs, n = gamma.shape, gamma.size
  if #gs ~= 1 or (n ~= 1 and (x.ndim < 2 or x.shape[2] ~= n)) then
    core.error(("prelu: gamma has shape %s but x %s needs (1,) or (%s,), one slope per channel of axis 1")
               :format(core.shape_text(gs), core.shape_text(x.shape), x.ndim >= 2 and tostring(x.shape[2]) or "1"))
  end
  if n > 1 then
    local bs = {1, n}
    for _ = 3, x.ndim do bs[#bs + 1] = 1 end
    gamma = np.reshape(gamma, bs)
  end
  return np.where(np.greater(x, 0), x, gamma * x)
end

-- layer_norm(data, gamma, beta, {axis=-1, eps=1e-5, output_mean_var=false}):
-- normalised over axis, then * gamma + beta (both (data.shape[axis],)).
-- output_mean_var: also the mean and the std (sqrt(var + eps)), data's
-- shape with the axis set to 1.
local ln_keys, gn_keys, in_keys = {"axis", "eps", "output_mean_var"}, {"num_groups", "eps", "output_mean_var"},
                                  {"eps"}
local function mean_std(outs, want)
  if want then return outs[1], outs[2], 1 / outs[3] end
  return outs[1]
end
function npx.layer_norm(data, gamma, beta, kw)
  kw = core.options(kw, "layer_norm", ln_keys)
  need_array(data, "layer_norm", "data")
  need_array(gamma, "layer_norm", "gamma")
  need_array(beta, "layer_norm", "beta")
  local a = core.attrs()
  a.i[S.LN_AXIS], a.ni = core.int_arg(kw.axis or -1, "layer_norm", "axis"), S.LN_AXIS + 1
  a.f[S.LN_EPS] = core.num_arg(kw.eps == nil and 1e-5 or kw.eps, "layer_norm", "eps")
  return mean_std(core.call(op.layer_norm, {data, gamma, beta}, a, nil, 3), kw.output_mean_var)
end

-- group_norm(data, gamma, beta, {num_groups=1, eps=1e-5, output_mean_var=false}):
-- MXNet 1.x's GroupNorm: data (N, C, ...) normalised over each group of
-- C/num_groups channels (and the other axes), gamma and beta (num_groups,).
-- output_mean_var: also the mean and std, (N, num_groups).
function npx.group_norm(data, gamma, beta, kw)
  kw = core.options(kw, "group_norm", gn_keys)
  need_array(data, "group_norm", "data")
  need_array(gamma, "group_norm", "gamma")
  need_array(beta, "group_norm", "beta")
  local a = core.attrs()
  a.i[S.GN_GROUPS], a.ni = core.int_arg(kw.num_groups or 1, "group_norm", "num_groups", 1), S.GN_GROUPS + 1
  a.f[S.GN_EPS] = core.num_arg(kw.eps == nil and 1e-5 or kw.eps, "group_norm", "eps")
  return mean_std(core.call(op.group_norm, {data, gamma, beta}, a, nil, 3), kw.output_mean_var)
end

-- instance_norm(data, gamma, beta, {eps=1e-3}): MXNet's InstanceNorm, data
-- (N, C, spatial...) with at least 3 axes, each (sample, channel) normalised
-- over its spatial axes; gamma, beta (C,). group_norm with C groups.
function npx.instance_norm(data, gamma, beta, kw)
  kw = core.options(kw, "instance_norm", in_keys)
  need_array(data, "instance_norm", "data")
  need_array(gamma, "instance_norm", "gamma")
  need_array(beta, "instance_norm", "beta")
  if data.ndim < 3 then
    core.error(("instance_norm: data has shape %s; expected (N, C, spatial...) with at least 3 axes")
               :format(core.shape_text(data.shape)))
  end
  local a = core.attrs()
  a.i[S.GN_GROUPS], a.ni = data.shape[2], S.GN_GROUPS + 1
  a.f[S.GN_EPS] = core.num_arg(kw.eps == nil and 1e-3 or kw.eps, "instance_norm", "eps")
  if gamma.ndim ~= 1 or gamma.shape[1] ~= data.shape[2] then
    core.error(("instance_norm: gamma has shape %s but data %s has %d channels; expected (%d,)")
               :format(core.shape_text(gamma.shape), core.shape_text(data.shape), data.shape[2], data.shape[2]))
  end
  return core.call(op.group_norm, {data, gamma, beta}, a, nil, 3)[1]
end

-- embedding(data, weight, {input_dim, output_dim, dtype, sparse_grad=false}):
-- the rows of weight (input_dim, output_dim) at the indices data (any
-- integer or float dtype; floats truncate), out of range clipped to
-- [0, input_dim - 1] as MXNet on the CPU; shape data.shape + (output_dim,).
-- The weight's gradient is dense.
local emb_keys = {"input_dim", "output_dim", "dtype", "sparse_grad"}
function npx.embedding(data, weight, kw)
  kw = core.options(kw, "embedding", emb_keys)
  if not is_array(data) then data = np.array(data, {device = is_array(weight) and weight.device or nil}) end
  need_array(weight, "embedding", "weight")
  if weight.ndim ~= 2 then
    core.error(("embedding: weight must be 2-D (input_dim, output_dim), got shape %s")
               :format(core.shape_text(weight.shape)))
  end
  for k, name in ipairs({"input_dim", "output_dim"}) do
    if kw[name] ~= nil and core.int_arg(kw[name], "embedding", name, 1) ~= weight.shape[k] then
      core.error(("embedding: %s is %s but the weight has shape %s"):format(name, core.show_value(kw[name]),
                 core.shape_text(weight.shape)))
    end
  end
  if kw.dtype ~= nil and kw.dtype ~= weight.dtype then
    core.error(("embedding: dtype is %s but the weight is %s"):format(core.show_value(kw.dtype), weight.dtype))
  end
  if kw.sparse_grad then
    core.error("embedding: sparse_grad = true (a row_sparse gradient) is not available; luon's gradient is dense")
  end
  if data.dtype == "bool" then
    core.error("embedding: data is bool; expected integer or float indices")
  end
  return np.take(weight, data, 0, {mode = "clip"})
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

-- topk(data, {axis=-1, k=1, ret_typ='indices', is_ascend=false, dtype='float32'})
-- as MXNet: axis false is None (the flattened array); k < 1 keeps all;
-- 'indices' in dtype (float32 by default, as MXNet), 'value', 'both'
-- (values, indices: two results), 'mask' (data's dtype and shape, 1 at the
-- k kept). Ties keep their order. The values carry the gradient.
local topk_keys = {"axis", "k", "ret_typ", "is_ascend", "dtype"}
local topk_returns = {value = true, indices = true, mask = true, both = true}
local topk_dtypes = {float16 = true, float32 = true, float64 = true, int32 = true, int64 = true, uint8 = true}

function npx.topk(data, kw)
  kw = core.options(kw, "topk", topk_keys)
  need_array(data, "topk", "data")
  local rt, dt = kw.ret_typ or "indices", kw.dtype or "float32"
  if not topk_returns[rt] then
    core.error(("topk: ret_typ must be 'value', 'indices', 'mask' or 'both', got %s"):format(core.show_value(rt)))
  end
  if not topk_dtypes[dt] then
    core.error(("topk: dtype must be one of float16, float32, float64, int32, int64, uint8, got %s")
               :format(core.show_value(dt)))
  end
  local k = core.int_arg(kw.k or 1, "topk", "k")
  local axis, x = kw.axis, data
  if axis == nil then axis = -1 end
  if axis == false then x, axis = np.reshape(data, {-1}), 0 end
  local a = core.attrs()
  a.i[S.SORT_AXIS] = core.int_arg(axis, "topk", "axis")
  a.i[S.SORT_DESCENDING] = kw.is_ascend and 0 or 1
  a.i[S.SORT_K], a.ni = k < 1 and 0 or k, S.SORT_K + 1
  local r = core.call(op.sort, {x}, a, nil, 2)
  local values, idx = r[1], r[2]
  if rt == "value" then return values end
  if rt == "indices" then return idx:astype(dt) end
  if rt == "both" then return values, idx:astype(dt) end
  -- mask: ones put at the kept positions of x (sort_grad), seen as data
  local ones = np.ones_like(values)
  a = core.attrs() -- (ones_like used the shared attrs)
  a.i[S.SORT_AXIS], a.i[S.SORT_K] = axis, k < 1 and 0 or k
  core.set_ints(a, x.shape, S.SORT_K + 1, "topk")
  local mask = core.call(op.sort_grad, {ones, idx}, a)
  return np.reshape(mask, data.shape)
end

-- batch_dot(a, b, {transpose_a, transpose_b}): matmul of N-d stacks (np_linalg.lua)
npx.batch_dot = require("luon.np_linalg").batch_dot

-- reshape(a, newshape, {reverse=false, order='C'}): np.reshape with
-- MXNet's codes in newshape: -1 inferred (one at most), -2 copy an input
-- dimension, -3 drop an input dimension of size 1, -4 copy the rest of the
-- input dimensions, -5 the product of two input dimensions, -6 split an
-- input dimension in the two values after it (one may be -1); reverse:
-- the codes read from the right. A view where strides allow, as
-- np.reshape (MXNet copies).
-- (src and target reversed for reverse = true; `shown` says the call.)
local function reshape_codes(src, target, shown)
  local function fail(why)
    core.error(("reshape: cannot reshape %s: %s"):format(shown, why))
  end
  local out, unknown, known, si, i = {}, nil, 1, 1, 1
  while i <= #target do
    local t = target[i]
    if t == -1 then
      unknown = #out + 1
      out[unknown] = -1
      si = si + 1
    elseif t == -2 then
      if si > #src then fail("-2 copies an input dimension but none is left") end
      known = known * src[si]
      out[#out + 1] = src[si]
      si = si + 1
    elseif t == -3 then
      if si > #src or src[si] ~= 1 then
        fail(("-3 skips an input dimension of size 1, but %s"):format(si > #src and "none is left"
             or ("dimension " .. (si - 1) .. " has size " .. src[si])))
      end
      si = si + 1
    elseif t == -4 then
      while si <= #src do
        known = known * src[si]
        out[#out + 1] = src[si]
        si = si + 1
      end
    elseif t == -5 then
      if si + 1 > #src then fail("-5 multiplies two input dimensions but fewer are left") end
      known = known * src[si] * src[si + 1]
      out[#out + 1] = src[si] * src[si + 1]
      si = si + 2
    elseif t == -6 then
      if i + 2 > #target then fail("-6 must be followed by the two sizes it splits into") end
      if si > #src then fail("-6 splits an input dimension but none is left") end
      local d0, d1, d2 = src[si], target[i + 1], target[i + 2]
      si, i = si + 1, i + 2
      if d1 < -1 or d2 < -1 then fail("the sizes after -6 must be >= 0 or -1") end
      if d1 == -1 and d2 == -1 then fail("the two sizes after -6 cannot both be -1") end
      if d1 == -1 then d1 = d2 ~= 0 and math.floor(d0 / d2) or -1 end
      if d2 == -1 then d2 = d1 ~= 0 and math.floor(d0 / d1) or -1 end
      if d1 < 0 or d2 < 0 or d1 * d2 ~= d0 then
        fail(("-6 cannot split dimension %d of size %d into (%d, %d)"):format(si - 2, d0, target[i - 1], target[i]))
      end
      known = known * d0
      out[#out + 1], out[#out + 2] = d1, d2
    elseif t >= 0 then
      known = known * t
      out[#out + 1] = t
      si = si + 1
    else
      fail(("code %d is not one of -1 to -6"):format(t))
    end
    i = i + 1
  end
  local size = 1
  for k = 1, #src do size = size * src[k] end
  if unknown then
    if known == 0 or size % known ~= 0 then fail("the sizes do not divide the array's size " .. size) end
    out[unknown] = size / known
  end
  local total = 1
  for k = 1, #out do total = total * out[k] end
  if total ~= size then fail(("the result would have %d elements, not %d"):format(total, size)) end
  return out
end

local reshape_keys = {"reverse", "order"}
function npx.reshape(a, newshape, kw)
  kw = core.options(kw, "reshape", reshape_keys)
  need_array(a, "reshape", "a")
  if type(newshape) == "number" then newshape = {newshape} end
  if type(newshape) ~= "table" then
    core.error(("reshape: newshape must be an integer or a list of them, got %s"):format(core.show_value(newshape)))
  end
  if kw.order ~= nil and kw.order ~= "C" then
    core.error(("reshape: order must be 'C', got %s"):format(core.show_value(kw.order)))
  end
  local target, minus1 = {}, 0
  for k = 1, #newshape do
    target[k] = core.int_arg(newshape[k], "reshape", "each of newshape", -6)
    if target[k] == -1 then minus1 = minus1 + 1 end
  end
  if minus1 > 1 then
    core.error(("reshape: only one dimension can be -1 (inferred), got %s"):format(
      "(" .. table.concat(target, ",") .. ")"))
  end
  local src = a.shape
  local shown = ("array of shape %s into (%s)%s"):format(core.shape_text(src), table.concat(target, ","),
                                                      kw.reverse and " with reverse = true" or "")
  if kw.reverse then
    local rs, rt = {}, {}
    for k = 1, #src do rs[k] = src[#src + 1 - k] end
    for k = 1, #target do rt[k] = target[#target + 1 - k] end
    local r = reshape_codes(rs, rt, shown)
    local out = {}
    for k = 1, #r do out[k] = r[#r + 1 - k] end
    return np.reshape(a, out)
  end
  return np.reshape(a, reshape_codes(src, target, shown))
end

-- one_hot(indices, depth, {on_value=1, off_value=0, dtype='float32'}):
-- indices' shape + (depth,), on_value at each index (truncated toward
-- zero), off_value elsewhere and for indices outside [0, depth) or NaN
local one_hot_keys = {"depth", "on_value", "off_value", "dtype"}
local HALF, BF16 = core.dtype_ids.float16, core.dtype_ids.bfloat16
function npx.one_hot(indices, depth, kw)
  if type(depth) == "table" then kw, depth = depth, nil end
  kw = core.options(kw, "one_hot", one_hot_keys)
  if not is_array(indices) then indices = np.array(indices, {dtype = "int64"}) end
  depth = depth or kw.depth
  if depth == nil then core.error("one_hot: depth is required") end
  local dt = core.info_of(indices).dtype
  if dt == HALF or dt == BF16 then indices = indices:astype("float32") end
  local a = core.attrs()
  a.i[S.ONE_HOT_DEPTH], a.ni = core.int_arg(depth, "one_hot", "depth", 0), S.ONE_HOT_DEPTH + 1
  a.f[S.ONE_HOT_ON] = core.num_arg(kw.on_value == nil and 1 or kw.on_value, "one_hot", "on_value")
  a.f[S.ONE_HOT_OFF] = core.num_arg(kw.off_value == nil and 0 or kw.off_value, "one_hot", "off_value")
  a.dtype = core.dtype_id(kw.dtype, "one_hot") or core.FLOAT32
  return core.call(op.one_hot, {indices}, a)
end

-- sequence_mask(data, sequence_length, {use_sequence_length=false,
-- value=0, axis=0}): data (T, B, ...) (axis 0) or (B, T, ...) (axis 1)
-- with the steps t >= sequence_length[b] (truncated toward zero) set to
-- value; without use_sequence_length, a copy of data (MXNet's default)
local seqmask_keys = {"use_sequence_length", "value", "axis"}
function npx.sequence_mask(data, sequence_length, kw)
  if type(sequence_length) == "table" and not is_array(sequence_length) then kw, sequence_length = sequence_length, nil end
  kw = core.options(kw, "sequence_mask", seqmask_keys)
  need_array(data, "sequence_mask", "data")
  if not kw.use_sequence_length then
    if sequence_length ~= nil then
      core.error("sequence_mask: sequence_length is given but use_sequence_length is false (MXNet's default); "
                 .. "pass {use_sequence_length = true}")
    end
    return data:copy()
  end
  need_array(sequence_length, "sequence_mask", "sequence_length")
  local dt = core.info_of(data).dtype
  if (dt == HALF or dt == BF16) and core.is_float(core.info_of(sequence_length).dtype) then
    -- float lengths would make the 16-bit data's result float32 (dtype promotion)
    sequence_length = sequence_length:astype("int64")
  end
  local a = core.attrs() -- after astype, which fills the shared attrs too
  a.i[S.SEQMASK_AXIS], a.ni = core.int_arg(kw.axis or 0, "sequence_mask", "axis"), S.SEQMASK_AXIS + 1
  a.f[S.SEQMASK_VALUE] = core.num_arg(kw.value or 0, "sequence_mask", "value")
  return core.call(op.sequence_mask, {data, sequence_length}, a)
end

-- ctc_loss(data, label, data_lengths, label_lengths, {use_data_lengths=false,
-- use_label_lengths=false, blank_label='first'}): MXNet's CTCLoss, one loss
-- per sample (N,) for activations data (T, N, C) (softmax applied inside)
-- and labels (N, L) (values and label lengths rounded; data lengths whole
-- numbers). blank_label 'first': class 0 is the
-- blank, labels 1..C-1 padded with 0; 'last': class C-1, labels 0..C-2
-- padded with -1. Without use_label_lengths a label ends at its first
-- padding value; without use_data_lengths every sample has T steps.
local ctc_names = {"data", "label", "data_lengths", "label_lengths", "use_data_lengths", "use_label_lengths",
                   "blank_label"}
local ctc_known = {}
for _, k in ipairs(ctc_names) do ctc_known[k] = true end
function npx.ctc_loss(...)
  local name = "ctc_loss"
  local a = core.args(name, ctc_names, ctc_known, ...)
  need_array(a.data, name, "data")
  need_array(a.label, name, "label")
  local inputs = {a.data, a.label}
  for _, w in ipairs({"data", "label"}) do
    local flag, arr = "use_" .. w .. "_lengths", a[w .. "_lengths"]
    local on = a[flag]
    if on ~= nil and type(on) ~= "boolean" then
      core.error(("%s: %s must be true or false, got %s"):format(name, flag, core.show_value(on)))
    end
    if on then
      if arr == nil then core.error(("%s: %s is true but no %s_lengths is given"):format(name, flag, w)) end
      need_array(arr, name, w .. "_lengths")
      inputs[#inputs + 1] = arr
    elseif arr ~= nil then
      core.error(("%s: %s_lengths is given but %s is false (MXNet's default); pass {%s = true}")
                 :format(name, w, flag, flag))
    end
  end
  local blank = a.blank_label == nil and "first" or a.blank_label
  if blank ~= "first" and blank ~= "last" then
    core.error(("%s: blank_label must be 'first' or 'last', got %s"):format(name, core.show_value(blank)))
  end
  local at = core.attrs()
  at.i[S.CTC_USE_DATA_LENGTHS] = a.use_data_lengths and 1 or 0
  at.i[S.CTC_USE_LABEL_LENGTHS] = a.use_label_lengths and 1 or 0
  at.i[S.CTC_BLANK_LAST], at.ni = blank == "last" and 1 or 0, S.CTC_BLANK_LAST + 1
  return core.call(op.ctc_loss, inputs, at, nil, 2)[1]
end

-- rnn(data, parameters, state, state_cell, {mode=, state_size=, num_layers=,
-- bidirectional=false, state_outputs=false, p=0}): MXNet's fused RNN
-- (rnn_relu, rnn_tanh, lstm, gru) over data (T, N, I) with MXNet's flat
-- parameters (for each layer and direction i2h and h2h weights, then the
-- biases) and the states (L*D, N, H); state_cell is the LSTM's (leave it out
-- otherwise). Returns out, or out, hy[, cy] with state_outputs (MXNet: a list).
-- p: dropout on each layer's output but the last, while training (the op
-- then runs a layer at a time). Sequence lengths, projections and state
-- clipping are not supported (an error).
local rnn_keys = {"mode", "state_size", "num_layers", "bidirectional", "state_outputs", "p",
                  "use_sequence_length", "projection_size", "lstm_state_clip_min", "lstm_state_clip_max",
                  "lstm_state_clip_nan", "sequence_length"}
local rnn_modes = {rnn_relu = 0, rnn_tanh = 1, lstm = 2, gru = 3}
local rnn_gates = {rnn_relu = 1, rnn_tanh = 1, lstm = 4, gru = 3}

-- The op on one stack of layers; outs: y, hy, cy.
local function rnn_call(x, params, h0, c0, mode, L, bidir, H)
  local a = core.attrs()
  a.i[S.RNN_MODE], a.i[S.RNN_LAYERS], a.i[S.RNN_BIDIR], a.i[S.RNN_HIDDEN] = rnn_modes[mode], L, bidir and 1 or 0, H
  a.ni = S.RNN_HIDDEN + 1
  return core.call(op.rnn, c0 and {x, params, h0, c0} or {x, params, h0}, a, nil, 4)
end

function npx.rnn(data, parameters, state, state_cell, kw)
  if kw == nil and type(state_cell) == "table" and not is_array(state_cell) then kw, state_cell = state_cell, nil end
  kw = core.options(kw, "rnn", rnn_keys)
  need_array(data, "rnn", "data")
  need_array(parameters, "rnn", "parameters")
  need_array(state, "rnn", "state")
  local mode = kw.mode
  if rnn_modes[mode] == nil then
    core.error(("rnn: mode must be 'rnn_relu', 'rnn_tanh', 'lstm' or 'gru', got %s"):format(core.show_value(mode)))
  end
  if (mode == "lstm") ~= (state_cell ~= nil) then
    core.error(mode == "lstm" and "rnn: mode 'lstm' needs state_cell" or
               ("rnn: state_cell is only for mode 'lstm', got mode '%s'"):format(mode))
  end
  if state_cell ~= nil then need_array(state_cell, "rnn", "state_cell") end
  for _, k in ipairs({"use_sequence_length", "sequence_length", "projection_size", "lstm_state_clip_min",
                      "lstm_state_clip_max"}) do
    if kw[k] ~= nil and kw[k] ~= false then
      core.error(("rnn: %s is not supported in luon (leave it out)"):format(k))
    end
  end
  if kw.lstm_state_clip_nan then core.error("rnn: lstm_state_clip_nan is not supported in luon (leave it out)") end
  local H = core.int_arg(kw.state_size, "rnn", "state_size", 1)
  local L = core.int_arg(kw.num_layers, "rnn", "num_layers", 1)
  local bidir = kw.bidirectional == true
  local p = core.num_arg(kw.p or 0, "rnn", "p")
  if not (p >= 0 and p < 1) then core.error(("rnn: p must be in [0, 1), got %s"):format(tostring(p))) end
  local outs
  if p == 0 or L == 1 or C.luon_autograd_is_training() == 0 then
    outs = rnn_call(data, parameters, state, state_cell, mode, L, bidir, H)
  else -- a layer at a time, dropout between: each layer's weights, then its biases
    local D, G, I = bidir and 2 or 1, rnn_gates[mode], data.shape[3] or 0
    local wtotal = 0
    for l = 0, L - 1 do wtotal = wtotal + D * G * H * ((l == 0 and I or D * H) + H) end
    if data.ndim ~= 3 or parameters.ndim ~= 1 or parameters.shape[1] ~= wtotal + 2 * L * D * G * H then
      rnn_call(data, parameters, state, state_cell, mode, L, bidir, H) -- the op's shape error
    end
    local x, hs, cs, wo = data, {}, {}, 0
    for l = 0, L - 1 do
      local wn, bo = D * G * H * ((l == 0 and I or D * H) + H), wtotal + l * D * 2 * G * H
      local pl = np.concatenate({parameters[{{wo, wo + wn}}], parameters[{{bo, bo + D * 2 * G * H}}]})
      wo = wo + wn
      local o = rnn_call(x, pl, state[{{l * D, (l + 1) * D}}], state_cell and state_cell[{{l * D, (l + 1) * D}}],
                         mode, 1, bidir, H)
      hs[l + 1], cs[l + 1] = o[2], o[3]
      x = l < L - 1 and npx.dropout(o[1], {p = p}) or o[1]
    end
    outs = {x, np.concatenate(hs, 0), state_cell and np.concatenate(cs, 0)}
  end
  if not kw.state_outputs then return outs[1] end
  if mode == "lstm" then return outs[1], outs[2], outs[3] end
  return outs[1], outs[2]
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
