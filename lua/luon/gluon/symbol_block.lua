-- luon.gluon.symbol_block: gluon.SymbolBlock, a block made from an exported
-- graph (HybridBlock:export, core/graph_file.c) without the Lua code that
-- defined it, as MXNet's SymbolBlock.imports. Its parameters are the
-- graph's named constants, registered under their exported (structural)
-- names, so collect_params, load_parameters, a Trainer and autograd work on
-- them; forward runs the graph in one C call. The graph runs for the input
-- dtypes and shapes it was traced with (another shape is an error naming
-- both; export again for it) on the device it was imported to.
local core = require("luon.core")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local hybrid = require("luon.gluon.hybrid")
local ffi, C = core.ffi, core.C

local SymbolBlock = block.HybridBlock:extend("SymbolBlock")

local function release_graph(g) C.luon_graph_free(g) end

local function names_of(v, fname)
  if type(v) == "string" then return {v} end
  local ok = type(v) == "table" and #v > 0
  for k = 1, ok and #v or 0 do ok = ok and type(v[k]) == "string" end
  if not ok then
    core.error(("%s: input_names must be a name or a list of names, got %s"):format(fname, core.show_value(v)))
  end
  return v
end

local function quoted(list)
  local q = {}
  for k, n in ipairs(list) do q[k] = "'" .. n .. "'" end
  return "{" .. table.concat(q, ", ") .. "}"
end

-- SymbolBlock.imports(symbol_file, input_names, param_file, device): the
-- block of an exported graph, on device (default: the current device; a
-- list of one device is taken as MXNet's ctx list). input_names must be
-- the graph's (MXNet's check): "data" for a one-input block.
function SymbolBlock.imports(symbol_file, input_names, param_file, device)
  local fname = "SymbolBlock.imports"
  if type(symbol_file) ~= "string" then
    core.error(("%s: symbol_file must be a file name, got %s"):format(fname, core.show_value(symbol_file)))
  end
  if param_file ~= nil and type(param_file) ~= "string" then
    core.error(("%s: param_file must be a file name or nil, got %s"):format(fname, core.show_value(param_file)))
  end
  local names = names_of(input_names, fname)
  if type(device) == "table" and not core.is_device(device) then
    if #device ~= 1 then
      core.error(("%s: device must be one device (a list of %d given); import once per device"):format(fname, #device))
    end
    device = device[1]
  end
  device = core.resolve_device(device, fname)
  local gp = ffi.new("luon_graph*[1]")
  core.check(C.luon_graph_load(symbol_file, param_file, device.type_id, device.device_id, gp))
  local g = ffi.gc(gp[0], release_graph)
  local have = {}
  for k = 0, C.luon_graph_num_inputs(g) - 1 do have[k + 1] = ffi.string(C.luon_graph_input_name(g, k)) end
  local same = #have == #names
  for k = 1, #names do same = same and have[k] == names[k] end
  if not same then
    core.error(("%s: input_names %s do not match the graph's inputs %s in %s")
               :format(fname, quoted(names), quoted(have), symbol_file))
  end
  return SymbolBlock(g, device, have)
end

function SymbolBlock:__init(g, device, input_names)
  if type(g) ~= "cdata" then
    core.error("SymbolBlock: make one with gluon.SymbolBlock.imports(symbol_file, input_names, param_file, device)")
  end
  self._graph = g
  self._device = device
  self._input_names = input_names
  self._nin = tonumber(C.luon_graph_num_inputs(g))
  self._nout = tonumber(C.luon_graph_num_outputs(g))
  self._ins = ffi.new("luon_tensor*[?]", self._nin + 1)
  self._outs = ffi.new("luon_tensor*[?]", self._nout + 1)
  local binds = {}
  for k = 0, C.luon_graph_num_consts(g) - 1 do
    local name = ffi.string(C.luon_graph_const_name(g, k))
    if not name:match("^_const%d+$") then -- "_const<k>": a constant that is not a parameter
      local t = C.luon_graph_const(g, k)
      local arr = core.wrap(C.luon_tensor_retain(t))
      local p = param.new({name = name, shape = arr.shape, dtype = arr.dtype,
                           grad_req = C.luon_graph_const_nograd(g, k) == 1 and "null" or "write"})
      p:_load_init(arr, {device})
      self[name] = p
      binds[#binds + 1] = {k = k, name = name}
    end
  end
  self._binds = binds
  self._gen, self._epoch = -1, -1
end

-- The parameters' current arrays into the graph (after load_parameters,
-- reset_device or a cast replaced them).
-- The parameter registered under a name now (share_parameters replaces it).
local function rebind(self)
  local fname = "SymbolBlock"
  local params = self:collect_params()
  for _, b in ipairs(self._binds) do
    local p = params[b.name]
    local r = p and p._by_dev and p._by_dev[self._device]
    if not r then
      core.error(("%s: parameter '%s' has no data on %s, where the graph was imported")
                 :format(fname, b.name, tostring(self._device)))
    end
    if r.t ~= C.luon_graph_const(self._graph, b.k) then core.check(C.luon_graph_set_const(self._graph, b.k, r.t)) end
  end
  self._gen, self._epoch = param.generation, hybrid.epoch
end

function SymbolBlock:forward(...)
  local n = select("#", ...)
  if n ~= self._nin then
    core.error(("SymbolBlock: the graph takes %d inputs %s, got %d"):format(self._nin, quoted(self._input_names), n))
  end
  if self._gen ~= param.generation or self._epoch ~= hybrid.epoch then rebind(self) end
  local ins, outs = self._ins, self._outs
  for k = 1, n do
    local x = select(k, ...)
    if not core.is_array(x) then
      core.error(("SymbolBlock: input %d ('%s') must be an array, got %s"):format(k, self._input_names[k], core.show_value(x)))
    end
    ins[k - 1] = x.t
  end
  core.check(C.luon_graph_run(self._graph, n, ins, self._nout, outs))
  local r = {}
  for k = 1, self._nout do r[k] = core.wrap(outs[k - 1]) end
  return unpack(r, 1, self._nout)
end

-- export(path, epoch=0): the imported graph again, with the parameters'
-- current values (no call needed first).
function SymbolBlock:export(path, epoch)
  local sym, params = hybrid.export_paths("SymbolBlock:export", path, epoch)
  core.check(C.luon_graph_save(self:_export_graph(), sym, params, nil, nil, nil))
  return sym, params
end

-- the imported graph with the parameters' current values (export, luon.onnx)
function SymbolBlock:_export_graph()
  if self._gen ~= param.generation or self._epoch ~= hybrid.epoch then rebind(self) end
  return self._graph
end

return SymbolBlock
