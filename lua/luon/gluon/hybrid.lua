-- luon.gluon.hybrid: what a hybridized HybridBlock's call does. The first
-- call for an input signature (the arrays' dtypes, shapes and devices, the
-- other arguments' values, autograd's recording and training modes) runs
-- forward once while the C core captures its ops into a graph
-- (core/graph.c) and returns forward's real results (the signature also
-- counts luon.amp's rule changes); later calls with that
-- signature replay the graph in one C call, with no Lua per op; export
-- writes the latest inference graph to files (core/graph_file.c), which
-- gluon.SymbolBlock.imports (symbol_block.lua) and luon_model_load read.
-- Not here: the Block classes (block.lua), fusion.
local core = require("luon.core")
local param = require("luon.gluon.parameter")
local ffi, C = core.ffi, core.C

local M = {}

-- Graphs kept per block: a new signature past this evicts the oldest.
M.cache_size = 8
-- Bumped when a block gets a new child or parameter (block.lua): every
-- graph traced before is dropped at its next call.
M.epoch = 0
function M.invalidate() M.epoch = M.epoch + 1 end

local concat, unpack, select = table.concat, unpack, select
-- Calls served, counted: an entry's `used` is its latest (export takes the
-- latest inference graph).
local calls = 0

-- Appends the signature of value v to parts and its arrays to arrs.
local function describe(v, arrs, parts, fname)
  if core.is_array(v) then
    for k = 1, #arrs do
      if arrs[k].t == v.t then -- the same array again: one input of the graph
        parts[#parts + 1] = "same" .. k
        return
      end
    end
    arrs[#arrs + 1] = v
    local i = core.info_of(v)
    local p = {"a", i.dtype, i.dev_type, i.dev_id}
    for d = 0, i.ndim - 1 do p[#p + 1] = tonumber(i.shape[d]) end
    parts[#parts + 1] = concat(p, ",")
  elseif core.is_device(v) then
    parts[#parts + 1] = "dev:" .. tostring(v)
  elseif type(v) == "table" and getmetatable(v) == nil then
    local n, keys = #v, {}
    for k in pairs(v) do
      if type(k) == "string" then
        keys[#keys + 1] = k
      elseif type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 then
        core.error(("%s: a hybridized block takes arrays, tables of them and plain values; got a " ..
                    "table with the key %s"):format(fname, core.show_value(k)))
      end
    end
    table.sort(keys)
    parts[#parts + 1] = "{" .. n
    for k = 1, n do describe(v[k], arrs, parts, fname) end
    for _, k in ipairs(keys) do
      parts[#parts + 1] = k .. "="
      describe(v[k], arrs, parts, fname)
    end
    parts[#parts + 1] = "}"
  elseif v == nil or type(v) == "number" or type(v) == "string" or type(v) == "boolean" then
    parts[#parts + 1] = type(v) .. ":" .. tostring(v)
  else
    core.error(("%s: a hybridized block takes arrays, tables of them and plain values; got %s"):format(fname, core.show_value(v)))
  end
end

-- The outputs' shape: arrays become their index in flat, tables are walked,
-- plain values are kept as they were at the trace.
local function template(v, flat)
  if core.is_array(v) then
    flat[#flat + 1] = v
    return #flat
  elseif type(v) == "table" and getmetatable(v) == nil then
    local t = {n = #v, keys = {}}
    for k = 1, #v do t[k] = template(v[k], flat) end
    for k, w in pairs(v) do
      if type(k) == "string" then t.keys[k] = template(w, flat) end
    end
    return t
  end
  return {value = v}
end

local function rebuild(t, outs)
  if type(t) == "number" then return outs[t] end
  if t.n == nil then return t.value end
  local r = {}
  for k = 1, t.n do r[k] = rebuild(t[k], outs) end
  for k, w in pairs(t.keys) do r[k] = rebuild(w, outs) end
  return r
end

local function release_graph(g) C.luon_graph_free(g) end

-- Which of the graph's constants are parameters' arrays, so that a
-- parameter whose array is replaced (load_parameters, cast, reset_device)
-- is rebound before a replay instead of computing with the old one.
local function bind_params(block, g)
  local of = {}
  for _, p in ipairs(block:collect_params():unique()) do
    for dev, r in pairs(p._by_dev or {}) do
      of[tostring(ffi.cast("uintptr_t", r.t))] = {p, dev}
    end
  end
  local binds = {}
  for k = 0, C.luon_graph_num_consts(g) - 1 do
    local pd = of[tostring(ffi.cast("uintptr_t", C.luon_graph_const(g, k)))]
    if pd then binds[#binds + 1] = {k = k, p = pd[1], dev = pd[2]} end
  end
  return binds
end

-- true when every bound parameter could be brought up to date.
local function rebind(e)
  for _, b in ipairs(e.binds) do
    local r = b.p._by_dev and b.p._by_dev[b.dev]
    if not r then return false end
    if r.t ~= C.luon_graph_const(e.g, b.k) and C.luon_graph_set_const(e.g, b.k, r.t) ~= 0 then
      return false
    end
  end
  e.gen = param.generation
  return true
end

-- A replay's outputs as forward returned them.
local function results(e)
  local outs = {}
  for k = 1, e.nout do outs[k] = core.wrap(e.outs[k - 1]) end
  local res = {}
  for k = 1, e.nres do res[k] = rebuild(e.tmpl[k], outs) end
  return unpack(res, 1, e.nres)
end

local function replay(e, arrs)
  calls = calls + 1
  e.used = calls
  local ins = e.ins
  for k = 1, #arrs do ins[k - 1] = arrs[k].t end
  core.check(C.luon_graph_run(e.g, #arrs, ins, e.nout, e.outs))
  core.gc_pressure() -- the outputs are new memory, as an op's are
  return results(e)
end

-- The fast path of a call with one array and nothing else (a network's
-- forward): the last such call's graph, taken again without building the
-- signature's string when autograd's modes, amp's rules and the parameters
-- are as they were and the core says the array fits the graph
-- (luon_graph_matches: its dtype, device and shape).
local function remember_one(block, e)
  e.rec, e.train, e.amp = C.luon_autograd_is_recording(), C.luon_autograd_is_training(), core.amp_epoch
  block._hybrid_fast = e
end

local function same_one(e, x)
  if e.epoch ~= M.epoch or e.gen ~= param.generation or e.amp ~= core.amp_epoch or
     e.rec ~= C.luon_autograd_is_recording() or e.train ~= C.luon_autograd_is_training() then
    return false
  end
  e.ins[0] = x.t
  return C.luon_graph_matches(e.g, 1, e.ins) == 1
end

local function replay_one(e, x)
  calls = calls + 1
  e.used = calls
  e.ins[0] = x.t
  core.check(C.luon_graph_run(e.g, 1, e.ins, e.nout, e.outs))
  core.gc_pressure()
  if e.nres == 1 and e.tmpl[1] == 1 then return core.wrap(e.outs[0]) end
  return results(e)
end

local function finish_trace(block, key, arrs, mode, ok, ...)
  if not ok then
    C.luon_graph_capture_abort()
    error((...), 0)
  end
  local n = select("#", ...)
  local flat, tmpl = {}, {}
  for k = 1, n do tmpl[k] = template((select(k, ...)), flat) end
  local outp = ffi.new("luon_tensor*[?]", #flat + 1)
  for k = 1, #flat do outp[k - 1] = flat[k].t end
  local gp = ffi.new("luon_graph*[1]")
  core.check(C.luon_graph_capture_end(#flat, outp, gp))
  local g = ffi.gc(gp[0], release_graph)
  if block._static_alloc then core.check(C.luon_graph_set_static_alloc(g, 1)) end
  local e = {g = g, nout = #flat, nres = n, tmpl = tmpl,
             ins = ffi.new("luon_tensor*[?]", #arrs + 1), outs = ffi.new("luon_tensor*[?]", #flat + 1),
             binds = bind_params(block, g), gen = param.generation, epoch = M.epoch, mode = mode}
  calls = calls + 1
  e.used = calls
  local cache = block._hybrid_cache
  if not cache then
    cache = {order = {}, by_key = {}}
    block._hybrid_cache = cache
  end
  if #cache.order >= M.cache_size then
    cache.by_key[table.remove(cache.order, 1)] = nil
  end
  cache.order[#cache.order + 1] = key
  cache.by_key[key] = e
  if mode.one then remember_one(block, e) end
  return ...
end

-- block(...) for an active HybridBlock called from outside any capture;
-- run(block, ...) is the plain call (hooks, deferred initialization, forward).
function M.call(block, run, ...)
  local n = select("#", ...)
  local one = n == 1 and core.is_array((...))
  local fast = block._hybrid_fast
  if fast and one and same_one(fast, (...)) then return replay_one(fast, (...)) end
  local fname = block._class.__name
  local arrs = {}
  local parts = {C.luon_autograd_is_recording(), C.luon_autograd_is_training(), core.amp_epoch}
  for k = 1, n do describe((select(k, ...)), arrs, parts, fname) end
  local key = concat(parts, "|")
  local cache = block._hybrid_cache
  local e = cache and cache.by_key[key]
  if e and e.epoch == M.epoch and (e.gen == param.generation or rebind(e)) then
    if one then remember_one(block, e) end
    return replay(e, arrs)
  end
  if e then -- a parameter changed beyond rebinding: trace again
    cache.by_key[key] = nil
    for k, v in ipairs(cache.order) do if v == key then table.remove(cache.order, k) break end end
  end
  -- A first call that still has to make parameters (deferred shapes) runs
  -- eagerly: layers may take other paths once ready (Conv2D's fusion with
  -- the next pooling), and the graph must be what later eager calls run.
  -- An inference call then traces at once (so that net(x); net:export()
  -- works as in MXNet); a training call's next call traces, so that random
  -- draws (dropout) stay those of eager calls.
  for _, p in ipairs(block:collect_params():unique()) do
    if not p._data then
      if parts[1] ~= 0 or parts[2] ~= 0 then return run(block, ...) end
      run(block, ...)
      break
    end
  end
  -- a parameter's own array as an argument would be one slot for both
  -- roles, and a replay would compute with the next input as the
  -- parameter: such a call runs eagerly
  local pt = {}
  for _, p in ipairs(block:collect_params():unique()) do
    for _, r in pairs(p._by_dev or {}) do pt[tostring(ffi.cast("uintptr_t", r.t))] = true end
  end
  for k = 1, #arrs do
    if pt[tostring(ffi.cast("uintptr_t", arrs[k].t))] then return run(block, ...) end
  end
  local ins = ffi.new("luon_tensor*[?]", #arrs + 1)
  for k = 1, #arrs do ins[k - 1] = arrs[k].t end
  core.check(C.luon_graph_capture_begin(#arrs, ins))
  return finish_trace(block, key, arrs, {recording = parts[1] ~= 0, training = parts[2] ~= 0, one = one},
                      pcall(run, block, ...))
end

-- export(block, path, epoch): the graph of the latest inference call
-- (outside autograd.record) as path-symbol.json and path-EPOCH.safetensors,
-- its parameters under their structural names; returns both paths.
-- The two file names of export(path, epoch) (here and SymbolBlock's).
function M.export_paths(fname, path, epoch)
  if type(path) ~= "string" or path == "" then
    core.error(("%s: path must be a file name prefix, got %s"):format(fname, core.show_value(path)))
  end
  epoch = epoch == nil and 0 or epoch
  if type(epoch) ~= "number" or epoch < 0 or epoch % 1 ~= 0 or epoch >= 2^53 then
    core.error(("%s: epoch must be a whole number, 0 or more, got %s"):format(fname, core.show_value(epoch)))
  end
  return path .. "-symbol.json", ("%s-%04d.safetensors"):format(path, epoch)
end

-- The graph of block's latest inference call, with its constants' names
-- and no-gradient marks (C arrays; keep holds the name strings): for
-- export and luon.onnx.export_model. fname names the caller in errors.
-- match (optional): the graphs to choose from (match(g) true), the latest
-- of them; with none, nil and the number of inference graphs there are.
function M.inference_graph(block, fname, match)
  local cache, e, seen = block._hybrid_cache, nil, 0
  for _, c in pairs(cache and cache.by_key or {}) do
    if c.epoch == M.epoch and not c.mode.recording and not c.mode.training then
      seen = seen + 1
      if (not e or c.used > e.used) and (not match or match(c.g)) then e = c end
    end
  end
  if not e and match and seen > 0 then return nil, seen end
  if not e then
    local why = not block._active and "it is not hybridized: call hybridize(), then run it once"
                or "it has not run for inference (outside autograd.record) since hybridize(): run it once"
    core.error(("%s: %s has no inference graph to export; %s (MXNet: 'Please first call " ..
                "block.hybridize() and then run forward with this block at least once before " ..
                "calling export.')"):format(fname, block._class.__name, why))
  end
  if e.gen ~= param.generation and not rebind(e) then
    core.error(("%s: a parameter of the traced graph is gone or has another dtype or shape (reset, " ..
                "cast): run the block once again before exporting"):format(fname))
  end
  local name_of = {}
  for name, p in block:collect_params():items() do name_of[p] = name_of[p] or name end
  local nconst = tonumber(C.luon_graph_num_consts(e.g))
  local names, keep = ffi.new("const char*[?]", nconst + 1), {}
  local nograd = ffi.new("uint8_t[?]", nconst + 1)
  for _, b in ipairs(e.binds) do
    keep[#keep + 1] = name_of[b.p]
    names[b.k] = keep[#keep]
    nograd[b.k] = b.p.grad_req == "null" and 1 or 0 -- running statistics
  end
  return e.g, names, nograd, keep
end

function M.export(block, path, epoch)
  local fname = block._class.__name .. ":export"
  local sym, params = M.export_paths(fname, path, epoch)
  local g, names, nograd, keep = M.inference_graph(block, fname)
  core.check(C.luon_graph_save(g, sym, params, nil, names, nograd))
  local _ = keep -- the names live until the save is done
  return sym, params
end

-- The number of graphs a block holds and the nodes of each (tests).
function M.graphs(block)
  local r = {}
  local cache = block._hybrid_cache
  for _, key in ipairs(cache and cache.order or {}) do
    r[#r + 1] = tonumber(C.luon_graph_num_nodes(cache.by_key[key].g))
  end
  return r
end

-- Each graph's CUDA graph (luon_graph_cuda_state: 1 captured, 0 not yet,
-- -1 replayed op by op), in the order of M.graphs (tests).
function M.cuda_graphs(block)
  local r = {}
  local cache = block._hybrid_cache
  for _, key in ipairs(cache and cache.order or {}) do
    r[#r + 1] = tonumber(C.luon_graph_cuda_state(cache.by_key[key].g))
  end
  return r
end

return M
