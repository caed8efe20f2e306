-- luon.gluon.block: Block and HybridBlock, MXNet Gluon 2.0's containers of
-- parameters and child blocks: classes by Block:extend(name), children
-- registered by assignment, structural parameter names, deferred shape
-- inference at the first call, summary, save/load of parameters.
-- hybridize() turns on graph capture and replay (hybrid.lua) for the
-- HybridBlocks of a tree.
local core = require("luon.core")
local param = require("luon.gluon.parameter")
local hybrid = require("luon.gluon.hybrid")
local C = core.C

local M = {}
local is_parameter = param.is_parameter
local tuple = param.tuple

---------------------------------------------------------------------------
-- Classes: a class is a table of methods whose metatable chains to its
-- parent; calling it constructs an instance (base state, then __init).

-- An instance is a userdata proxy (newproxy), because LuaJIT (Lua 5.1
-- semantics) ignores __len on tables: #net is its number of children,
-- net[i] its i-th child (0-based; negative i counts from the end), net(...)
-- its forward; ipairs(net) and pairs(net) are errors. The proxy's own
-- metatable has __index = its field table t, which holds the internals
-- (_class, _children, ...) and whose shared metatable Fields looks up the
-- rest: plain fields, children, parameters, class members, properties.
-- Writes go through Instance.__newindex: an internal already in t is
-- overwritten there, any other name is registered as today.

-- The metamethods shared by every instance's metatable.
local Instance = {}
-- The metatable of every instance's field table.
local Fields = {}
-- The metatable field that marks a block's metatable and holds its field
-- table (a string: it must survive a second load of this module, as
-- busted's insulation makes).
local block_key = "__luon_block"

local Block = {__name = "Block"}
M.Block = Block

local function fields_of(v)
  if type(v) ~= "userdata" then return nil end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, block_key) or nil
end

local function is_block(v) return fields_of(v) ~= nil end
M.is_block = is_block

-- Whether class (or instance) x is cls or derives from it.
local function derives(x, cls)
  local c = is_block(x) and x._class or x
  while c do
    if c == cls then return true end
    c = rawget(c, "__super")
  end
  return false
end
M.isinstance = derives

local function construct(cls, ...)
  local t = setmetatable({
    _class = cls,
    _children = {}, _child_order = {},   -- name -> Block, names in order
    _params = {}, _param_order = {},     -- local name -> Parameter, in order
    _plain = {},                         -- every other field
    _fhooks = {}, _prehooks = {},
    _active = false,
    _hybrid_fast = false, -- hybrid.lua: the graph of the last one-array call
    _ready = false,    -- every own parameter has data (see finish_deferred)
    _ran = false,      -- it has been called: a graph may hold it (see Instance.__newindex)
  }, Fields)
  local self = newproxy(true)
  local mt = getmetatable(self)
  for k, v in pairs(Instance) do mt[k] = v end
  mt.__index = t
  mt[block_key] = t
  t._proxy = self
  local init = cls.__init
  if init then init(self, ...) end
  return self
end

-- Cls = Parent:extend("Name"[, methods]) or Parent:extend{"Name", forward =
-- f, ...} (core.class_spec, as the other gluon classes' extend): a
-- subclass; define Cls:__init(...) and Cls:forward(...), then Cls(...)
-- makes an instance.
function Block.extend(parent, name, methods)
  name, methods = core.class_spec(name, methods, "extend")
  local cls = {__name = name, __super = parent}
  for k, v in pairs(methods) do cls[k] = v end
  return setmetatable(cls, {__index = parent, __call = construct,
                            __tostring = function() return "class " .. name end})
end
setmetatable(Block, {__call = construct, __tostring = function() return "class Block" end})

local HybridBlock = Block:extend("HybridBlock")
M.HybridBlock = HybridBlock

---------------------------------------------------------------------------
-- Fields: Blocks and Parameters assigned to a field are registered in
-- assignment order; other values stay plain fields.

local props = {}

-- The public names (not "_...") a block has: fields, children, parameters,
-- its class chain's and the properties.
local function public_names(self)
  local ts = {self._plain, self._children, self._params, props}
  local c = self._class
  while c do ts[#ts + 1] = c; c = rawget(c, "__super") end
  return core.public_names(unpack(ts))
end

-- net.wieght: an error naming the close names. A name assigned nil
-- (self.act = nil in __init) reads as nil, and so do "_..." names, which
-- luon's own code probes.
local unset = setmetatable({}, {__mode = "k"}) -- block -> {name = true}
local function unknown_field(self, k)
  core.no_field(self._class.__name, k, public_names(self))
end

-- net[i]: the i-th child in registration order, 0-based; negative i counts
-- from the end (Python's list); any other index is an error naming it.
local function child_at(self, i)
  local order = self._child_order
  local n = #order
  if i % 1 ~= 0 or i < -n or i >= n then
    core.error(("%s: index %s is out of range for %d child%s (0-based, as MXNet's net[i]: %s)")
               :format(self._class.__name, core.show_value(i), n, n == 1 and "" or "ren",
                       n == 0 and "it has none" or ("0..%d, or -%d..-1 from the end"):format(n - 1, n)))
  end
  if i < 0 then i = i + n end
  return self._children[order[i + 1]]
end

-- self is the field table here; props get the block itself.
function Fields.__index(self, k)
  local v = self._plain[k]
  if v ~= nil then return v end
  v = self._children[k]
  if v ~= nil then return v end
  v = self._params[k]
  if v ~= nil then return v end
  v = self._class[k]
  if v ~= nil then return v end
  local p = props[k]
  if p then return p(self._proxy) end
  if type(k) == "number" then return child_at(self, k) end
  if type(k) == "string" and k:byte(1) ~= 95 and not (unset[self] and unset[self][k]) then
    unknown_field(self, k)
  end
  return nil
end

local function remove(list, name)
  for i = 1, #list do
    if list[i] == name then table.remove(list, i); return end
  end
end

local function kind(v)
  if is_block(v) then return "Block" end
  if is_parameter(v) then return "Parameter" end
  return type(v)
end

local function register_child(self, name, child)
  if derives(self, HybridBlock) and not derives(child, HybridBlock) then
    core.error(("Children of HybridBlock must also be HybridBlock, but %s has type %s. If you are " ..
                "using Sequential, please try HybridSequential instead.")
               :format(name, child._class.__name))
  end
  if self._children[name] == nil then
    local order = self._child_order
    order[#order + 1] = name
  end
  self._children[name] = child
  -- every graph traced before is dropped once this block has run (a block
  -- being built is in no graph yet); Sequential:add too
  if self._ran then hybrid.invalidate() end
end
M.register_child = register_child

function Instance.__newindex(u, k, v)
  local self = getmetatable(u)[block_key]
  if rawget(self, k) ~= nil then self[k] = v; return end -- an internal
  local old = self._children[k] or self._params[k]
  if old ~= nil and v ~= nil and kind(old) ~= kind(v) then
    core.error(("Changing attribute type for %s from %s to %s is not allowed.")
               :format(tostring(k), kind(old), kind(v)))
  end
  if is_block(v) then
    self._plain[k] = nil
    register_child(u, k, v) -- drops the graphs traced before, as a new parameter does
  elseif is_parameter(v) then
    self._plain[k] = nil
    if self._ran then hybrid.invalidate() end
    self._ready = false
    if self._params[k] == nil then
      local order = self._param_order
      order[#order + 1] = k
    end
    self._params[k] = v
  elseif v == nil and old ~= nil then
    if self._children[k] then remove(self._child_order, k); self._children[k] = nil end
    if self._params[k] then remove(self._param_order, k); self._params[k] = nil end
  else
    self._plain[k] = v
  end
  if v == nil then
    unset[self] = unset[self] or {}
    unset[self][k] = true
  end
end

function Instance.__call(self, ...) return self:__call(...) end
function Instance.__tostring(self) return self:__tostring() end
-- #net: the number of children (MXNet's len(net)).
function Instance.__len(self) return #self._child_order end
-- The public names, for the REPL's completion.
function Instance.__dir(self) return public_names(self) end

-- Block.params: this block's own parameters (local name -> Parameter).
function props.params(self)
  local ps = {}
  for k, n in ipairs(self._param_order) do ps[k] = self._params[n] end
  return param.dict(self._param_order, ps)
end

---------------------------------------------------------------------------
-- Calling: hooks, deferred shape inference at the first call, forward.

local function indent(s, n)
  return (s:gsub("\n", "\n" .. (" "):rep(n)))
end

function Block.__init() end

function Block:forward()
  core.error(("%s: forward is not defined; define function %s:forward(...)")
             :format(self._class.__name, self._class.__name))
end

-- Own parameters whose materialization waits for this call's shapes.
-- Once every own parameter has data the block is `_ready` and later calls
-- skip this (registering a Parameter clears the flag).
local function finish_deferred(self, ...)
  local pending, ready = false, true
  for _, n in ipairs(self._param_order) do
    local p = self._params[n]
    if p._deferred and not p._data then pending = true end
    if not p._data then ready = false end
  end
  if pending then
    self:infer_shape(...)
    for _, n in ipairs(self._param_order) do
      local p = self._params[n]
      if p._deferred and not p._data then p:_finish_deferred_init() end
    end
    ready = true
  end
  self._ready = ready
  self._ran = true
end

-- Set the unknown dims of own parameters from the inputs of the first
-- call. Layers override it; a custom block with unknown shapes must too.
function Block:infer_shape()
  for _, n in ipairs(self._param_order) do
    local s = self._params[n]._shape
    for k = 1, s and #s or 0 do
      if s[k] == -1 then
        core.error(("%s has parameters with unknown shape. You need to either specify the shape in " ..
                    "__init or implement %s:infer_shape(...) to set the unknown dims from the inputs")
                   :format(self._class.__name, self._class.__name))
      end
    end
  end
end

local function run_hooks(self, args, ...)
  for _, h in ipairs(self._fhooks) do h(self, args, ...) end
  return ...
end

function Block:__call(...)
  if #self._prehooks > 0 then
    local args = {...}
    for _, h in ipairs(self._prehooks) do h(self, args) end
  end
  if not self._ready then
    -- initializing parameters is no part of a graph being captured
    local paused = C.luon_graph_capture_pause(1)
    local ok, err = pcall(finish_deferred, self, ...)
    C.luon_graph_capture_pause(paused)
    if not ok then error(err, 0) end
  end
  if #self._fhooks == 0 then return self:forward(...) end
  return run_hooks(self, {...}, self:forward(...))
end

-- A HybridBlock's first input must be an ndarray (as Gluon's check). A
-- hybridized one called from outside a capture traces or replays
-- (hybrid.lua); inside its parent's capture it runs forward, inlined.
function HybridBlock:__call(x, ...)
  if not core.is_array(x) then
    core.error(("%s: a HybridBlock's inputs must be ndarrays, got %s as the first input")
               :format(self._class.__name, type(x)))
  end
  if self._active and C.luon_graph_capturing() == 0 then return hybrid.call(self, Block.__call, x, ...) end
  return Block.__call(self, x, ...)
end

-- export(path, epoch=0): the graph of the latest inference call (after
-- hybridize()) as path-symbol.json and its parameters as
-- path-EPOCH.safetensors, for gluon.SymbolBlock.imports and the C
-- embedding API's luon_model_load; returns the two file names.
function HybridBlock:export(path, epoch) return hybrid.export(self, path, epoch) end
-- its latest inference graph (of those match(g) takes) and its constants'
-- names (luon.onnx.export_model); nil and a count when match takes none
function HybridBlock:_export_graph(fname, match)
  local g, names, _, keep = hybrid.inference_graph(self, fname, match)
  return g, names, keep
end

local function add_hook(list, fn)
  if type(fn) ~= "function" then core.error("register_forward_hook: expected a function") end
  list[#list + 1] = fn
  return {detach = function() remove(list, fn) end}
end
-- hook(block, inputs) before forward; a handle with :detach().
function Block:register_forward_pre_hook(fn) return add_hook(self._prehooks, fn) end
-- hook(block, inputs, output...) after forward; a handle with :detach().
function Block:register_forward_hook(fn) return add_hook(self._fhooks, fn) end

-- fn(block) on every child (depth first), then on self; returns self.
function Block:apply(fn)
  if type(fn) ~= "function" then core.error(("apply: expected a function, got %s"):format(core.show_value(fn))) end
  for _, n in ipairs(self._child_order) do self._children[n]:apply(fn) end
  fn(self)
  return self
end

-- The class name, as Gluon's repr and summary print it.
function Block:class_name() return self._class.__name end

function Block:__tostring()
  local lines = {}
  for _, n in ipairs(self._child_order) do
    lines[#lines + 1] = ("  (%s): %s"):format(n, indent(tostring(self._children[n]), 2))
  end
  return ("%s(\n%s\n)"):format(self._class.__name, table.concat(lines, "\n"))
end

---------------------------------------------------------------------------
-- Parameters of the tree

local function collect(self, prefix, names, ps)
  for _, n in ipairs(self._param_order) do
    names[#names + 1] = prefix .. n
    ps[#ps + 1] = self._params[n]
  end
  for _, n in ipairs(self._child_order) do
    collect(self._children[n], prefix .. n .. ".", names, ps)
  end
end

-- A select string: alternatives separated by '|', each a regex of the
-- subset . * + ? [...] $ \. matched at the start of the name (Python's
-- re.match), e.g. '.*weight', '0.bias|1.bias', 'conv1%..*' (a Lua escape
-- also works). Lazy repeats ('.*?') match as greedy ones: under re.match
-- they select the same names; a leading '^' is re.match's anchor anyway.
-- What Lua's patterns would misread is an error naming it, not a silently
-- empty dict: a repeat of nothing ('*weight') or of a repeat ('a**'), as in
-- Python, and the repeat counts {m,n} and a trailing '\', which Lua lacks.
local function to_lua_pattern(select, alt, at)
  local out, i, n, prev = {"^"}, 1, #alt, nil -- prev: "atom" or "repeat"
  local function bad(what, pos)
    core.error(("collect_params: bad select pattern %q: %s at position %d (a regex, as in MXNet: '.*weight' selects the names that end in weight)")
      :format(select, what, at + pos - 1))
  end
  if alt:sub(1, 1) == "^" then i = 2 end
  while i <= n do
    local c = alt:sub(i, i)
    if c == "{" then bad("repeat counts {m,n} are not supported", i) end
    if (c == "\\" or c == "%") and i == n then bad("a trailing escape", i) end
    if c == "*" or c == "+" or c == "?" then
      if prev ~= "atom" then bad(prev and "multiple repeat" or "nothing to repeat", i) end
      out[#out + 1] = c
      if c ~= "?" and alt:sub(i + 1, i + 1) == "?" then i = i + 1 end -- lazy
      prev = "repeat"
      i = i + 1
    else
      local j = i
      if c == "\\" or c == "%" then
        j = i + 1
        c = "%" .. alt:sub(j, j)
      elseif c == "[" then
        j = alt:find("]", i + 2, true) or n
        c = alt:sub(i, j)
      elseif c == "-" then
        c = "%-"
      end
      out[#out + 1] = c
      prev = "atom"
      i = j + 1
    end
  end
  return table.concat(out)
end

local function selector(select)
  if select == nil then return nil end
  if type(select) ~= "string" then
    core.error(("collect_params: select must be a string pattern, got %s"):format(type(select)))
  end
  local pats, at = {}, 0
  for alt in (select .. "|"):gmatch("(.-)|") do
    pats[#pats + 1] = to_lua_pattern(select, alt, at)
    at = at + #alt + 1
  end
  return function(name)
    for _, p in ipairs(pats) do
      local ok, found = pcall(string.find, name, p)
      if not ok then core.error(("collect_params: bad select pattern %q: %s"):format(select, found)) end
      if found then return true end
    end
    return false
  end
end

-- collect_params(select) or collect_params{select =}: an ordered
-- ParameterDict {structural name = Parameter}: own parameters, then
-- children's, in registration order ('conv1.0.weight', '0.bias').
local select_names = {"select"}
function Block:collect_params(...)
  local select = core.args("collect_params", select_names, select_names, ...).select
  local names, ps = {}, {}
  collect(self, "", names, ps)
  local keep = selector(select)
  if keep then
    local n2, p2 = {}, {}
    for k = 1, #names do
      if keep(names[k]) then n2[#n2 + 1], p2[#p2 + 1] = names[k], ps[k] end
    end
    -- MXNet returns an empty dict; but luon's names are structural (as
    -- MXNet 2.0's), so an MXNet 1.x pattern ('dense0_.*') would select
    -- nothing without a word, and a Trainer would then train nothing
    if #n2 == 0 and #names > 0 then
      core.error(("collect_params: the pattern %s selects none of the %d parameters; luon names them "
                  .. "by their place in the network (%s, ...), as MXNet 2.0 does, not as MXNet 1.x's "
                  .. "'dense0_weight'"):format(core.show_value(select), #names,
                                               table.concat(core.map_show({unpack(names, 1, 3)}), ", ")))
    end
    names, ps = n2, p2
  end
  return param.dict(names, ps)
end

-- initialize(init, device, verbose, force_reinit), positional then one
-- table of the same keywords (initialize(init, {device = d}),
-- initialize{init =, ctx =}; ParameterDict's initialize reads them): the
-- block-level init is every parameter's default, so a layer's own
-- initializer (biases 'zeros', ...) wins.
function Block:initialize(...)
  self:collect_params():initialize(...)
  return self
end

function Block:zero_grad() self:collect_params():zero_grad() end
function Block:reset_device(device) self:collect_params():reset_device(device) end
Block.reset_ctx = Block.reset_device

function Block:cast(dtype)
  for _, p in ipairs(self:collect_params():unique()) do p:cast(dtype) end
  return self
end

-- hybridize(active, {static_alloc =, static_shape =, ...}) or all as
-- keywords: turns graph capture on (or off) for this block's HybridBlocks;
-- their graphs are dropped either way (the next call traces again).
-- static_alloc and static_shape are accepted as MXNet's; MXNet's other
-- keywords (backend, inline_limit, the bulk sizes) are accepted and ignored.
local hybridize_keys = {"active", "static_alloc", "static_shape", "backend", "backend_opts",
                        "partition_if_dynamic", "inline_limit", "forward_bulk_size", "backward_bulk_size"}
function Block:hybridize(active, kw)
  if type(active) == "table" and kw == nil then active, kw = nil, active end
  local o = core.options(kw, "hybridize", hybridize_keys)
  if active == nil then active = o.active end
  if active == nil then active = true end
  if type(active) ~= "boolean" then
    core.error(("hybridize: active must be true or false, got %s"):format(core.show_value(active)))
  end
  for _, k in ipairs({"static_alloc", "static_shape"}) do
    if o[k] ~= nil and type(o[k]) ~= "boolean" then
      core.error(("hybridize: %s must be true or false, got %s"):format(k, core.show_value(o[k])))
    end
  end
  self:apply(function(b)
    b._active = active and derives(b, HybridBlock)
    b._static_alloc = active and o.static_alloc or false
    b._hybrid_cache = nil
    b._hybrid_fast = false
  end)
  return self
end

-- Replace own parameters by those of `shared` (a ParameterDict) with the
-- same structural names; returns self. Every value used must be a
-- Parameter whose shape agrees with the one it replaces where both dims are
-- known; nothing is replaced unless all are.
function Block:share_parameters(shared)
  if type(shared) ~= "table" then
    core.error(("share_parameters: expected a ParameterDict (collect_params()), got %s"):format(core.show_value(shared)))
  end
  local swaps, bad = {}, nil -- {block, name, parameter}, the first problem
  local function walk(b, prefix)
    for _, n in ipairs(b._param_order) do
      local name, p = prefix .. n, shared[prefix .. n]
      if p ~= nil and bad == nil then
        if not param.is_parameter(p) then
          bad = ("share_parameters: '%s' is not a Parameter (got %s); pass another block's collect_params()")
                :format(name, type(p) == "table" and "a table" or core.show_value(p))
          return
        end
        local own, s = b._params[n]._shape, p._shape
        local ok = own == nil or s == nil or #own == #s
        for k = 1, (ok and own and s) and #own or 0 do
          if own[k] ~= -1 and s[k] ~= -1 and own[k] ~= s[k] then ok = false end
        end
        if not ok then
          bad = ("share_parameters: '%s' has shape %s here but %s in the shared parameters")
                :format(name, tuple(b._params[n].shape), tuple(p.shape))
          return
        end
        swaps[#swaps + 1] = {b, n, p}
      end
    end
    for _, n in ipairs(b._child_order) do walk(b._children[n], prefix .. n .. ".") end
  end
  walk(self, "")
  if bad then core.error(bad) end
  for _, t in ipairs(swaps) do
    t[1]._params[t[2]] = t[3]
    t[1]._ready = false
  end
  hybrid.invalidate()
  return self
end

---------------------------------------------------------------------------
-- summary: one forward with hooks, then Gluon's table.

local function shape_str(v)
  if core.is_array(v) then return tuple(v.shape) end
  if type(v) == "table" then
    local parts = {}
    for k = 1, #v do parts[k] = shape_str(v[k]) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  return tostring(v)
end

local function shapes_of(...)
  local parts = {}
  for k = 1, select("#", ...) do parts[k] = shape_str((select(k, ...))) end
  return table.concat(parts, ", ")
end

function Block:summary(...)
  local Sequential, HybridSequential = M.Sequential, M.HybridSequential
  self:apply(function(b)
    if b._active then
      core.error(('"%s" must not be hybridized to print summary.'):format(b._class.__name))
    end
  end)
  local rows = {{"Input", shapes_of(...), 0, 0, 0}}
  local seen = {}
  local hooks = {}
  self:apply(function(b)
    if derives(b, Sequential) or derives(b, HybridSequential) then return end
    hooks[#hooks + 1] = b:register_forward_hook(function(blk, _, ...)
      local n, trainable, shared = 0, 0, 0
      for _, pn in ipairs(blk._param_order) do
        local p = blk._params[pn]
        local size = 1
        for _, d in ipairs(p._shape) do size = size * d end
        n = n + size
        if p._grad_req ~= "null" then trainable = trainable + size end
        if seen[p] then shared = shared + size else seen[p] = true end
      end
      rows[#rows + 1] = {("%s-%d"):format(blk._class.__name, #rows), shapes_of(...), n, trainable, shared}
    end)
  end)
  local ok, err = pcall(self.__call, self, ...)
  for _, h in ipairs(hooks) do h.detach() end
  if not ok then error(err, 0) end
  local out = {}
  local function line(s) out[#out + 1] = s end
  local fmt = "%20s  %42s %15s"
  line(("-"):rep(80))
  line(fmt:format("Layer (type)", "Output Shape", "Param #"))
  line(("="):rep(80))
  local total, trainable, shared = 0, 0, 0
  for _, r in ipairs(rows) do
    line(fmt:format(r[1], r[2], tostring(r[3])))
    total, trainable, shared = total + r[3], trainable + r[4], shared + r[5]
  end
  line(("="):rep(80))
  line("Parameters in forward computation graph, duplicate included")
  line("   Total params: " .. total)
  line("   Trainable params: " .. trainable)
  line("   Non-trainable params: " .. (total - trainable))
  line("Shared params in forward computation graph: " .. shared)
  line("Unique parameters in model: " .. (total - shared))
  line(("-"):rep(80))
  local text = table.concat(out, "\n")
  M.print(text)
  return {total = total, trainable = trainable, non_trainable = total - trainable, shared = shared,
          unique = total - shared, text = text}
end
-- summary prints through M.print (tests capture it).
M.print = function(s) print(s) end

---------------------------------------------------------------------------
-- save_parameters / load_parameters through luon.serialize

-- Save the mean of every parameter's replicas (on cpu(0)) under its
-- structural name; deduplicate keeps a shared parameter once.
local save_names = {"deduplicate"}
function Block:save_parameters(path, ...)
  local deduplicate = core.args("save_parameters", save_names, save_names, ...).deduplicate
  if type(path) ~= "string" then
    core.error(("save_parameters: path must be a string, got %s"):format(type(path)))
  end
  local serialize = require("luon.serialize")
  local names, arrays, seen = {}, {}, {}
  for name, p in self:collect_params():items() do
    if not (deduplicate and seen[p]) then
      seen[p] = true
      names[#names + 1] = name
      arrays[#arrays + 1] = p:_reduce()
    end
  end
  serialize.save(path, names, arrays)
end

local function abbreviate(list)
  local q = {}
  for k, n in ipairs(list) do q[k] = "'" .. n .. "'" end
  if #q > 7 then
    q = {q[1], q[2], q[3], "...", q[#q - 3], q[#q - 2], q[#q - 1], q[#q]}
  end
  return "[" .. table.concat(q, ", ") .. "]"
end

local function quoted(list)
  local q = {}
  for k, n in ipairs(list) do q[k] = "'" .. n .. "'" end
  return table.concat(q, ", ")
end

-- load_parameters(path, {device=, allow_missing=false, ignore_extra=false,
-- cast_dtype=false, dtype_source='current'}), or those positionally in
-- MXNet's order; ctx is device's MXNet 1.x name. Everything is checked before
-- any parameter changes: names missing from the file, names in the file the
-- block lacks, shapes and dtypes, each error naming every offender.
-- device: parameters go there (a Device or a list: one replica each);
-- without it, initialized parameters stay where they are and new ones go
-- to the current device. (MXNet instead asserts that an initialized
-- parameter's devices equal the requested ones.)
local load_names = {"device", "allow_missing", "ignore_extra", "cast_dtype", "dtype_source"}
local load_known = {"device", "allow_missing", "ignore_extra", "cast_dtype", "dtype_source", "ctx"}
function Block:load_parameters(path, ...)
  local kw = core.args("load_parameters", load_names, load_known, ...)
  kw.device = core.device_of(kw, "load_parameters")
  if type(path) ~= "string" then
    core.error(("load_parameters: path must be a string, got %s"):format(type(path)))
  end
  local dtype_source = kw.dtype_source or "current"
  if dtype_source ~= "current" and dtype_source ~= "saved" then
    core.error(("load_parameters: dtype_source must be 'current' or 'saved', got %s"):format(tostring(dtype_source)))
  end
  local devices = kw.device and param.devices_of(kw.device, "load_parameters") or nil
  local serialize = require("luon.serialize")
  local entries = serialize.load(path, {caller = "load_parameters"})
  local loaded, file_names = {}, {}
  for k, e in ipairs(entries) do
    if e.name == nil then
      core.error(("load_parameters: %s holds arrays without names (MXNet's mx.nd.save of a list); "
                  .. "parameters load from named arrays"):format(path))
    end
    local name = require("luon.mxparams").rnn_name((e.name:gsub("^arg:", ""):gsub("^aux:", "")))
    loaded[name] = e.array
    file_names[k] = name
  end
  local params = self:collect_params()
  local names = params:keys()
  -- MXNet 1.x's global names ('resnetv10_conv0_weight'): mapped by order
  loaded, file_names = require("luon.mxparams").map_prefixed(path, loaded, file_names, params)
  local where = ("'file: %s'"):format(path)

  if not kw.allow_missing then
    local missing = {}
    for _, n in ipairs(names) do if loaded[n] == nil then missing[#missing + 1] = n end end
    if #missing > 0 then
      core.error(("Parameter%s %s %s missing in %s, which contains parameters: %s. " ..
                  "Set allow_missing = true to ignore missing parameters.")
                 :format(#missing > 1 and "s" or "", quoted(missing), #missing > 1 and "are" or "is",
                         where, abbreviate(file_names)))
    end
  end
  if not kw.ignore_extra then
    local extra = {}
    for _, n in ipairs(file_names) do if params[n] == nil then extra[#extra + 1] = n end end
    if #extra > 0 then
      core.error(("Parameter%s %s loaded from %s %s not present in the block, which contains parameters %s. " ..
                  "Set ignore_extra = true to ignore.")
                 :format(#extra > 1 and "s" or "", quoted(extra), where, #extra > 1 and "are" or "is",
                         abbreviate(names)))
    end
  end
  local bad, dtype_only = {}, true
  for _, n in ipairs(names) do
    local p, arr = params[n], loaded[n]
    if arr then
      local s, a = p._shape, arr.shape
      local ok = s == nil or #s == #a
      for k = 1, (ok and s) and #s or 0 do
        if s[k] ~= -1 and s[k] ~= a[k] then ok = false end
      end
      if not ok then
        bad[#bad + 1] = ("'%s': shape incompatible expected %s vs saved %s"):format(n, tuple(p.shape), tuple(a))
        dtype_only = false
      elseif arr.dtype ~= p._dtype and not kw.cast_dtype then
        bad[#bad + 1] = ("'%s': dtype incompatible expected %s vs saved %s"):format(n, p._dtype, arr.dtype)
      end
    end
  end
  if #bad > 0 then
    core.error(("Failed loading from %s (nothing was changed): %s.%s")
               :format(where, table.concat(bad, "; "), dtype_only and " Set cast_dtype = true to convert dtypes." or ""))
  end
  local done = {}
  for _, n in ipairs(names) do
    local p, arr = params[n], loaded[n]
    if arr and not done[p] then
      done[p] = true
      if arr.dtype ~= p._dtype then
        if dtype_source == "saved" then p._dtype = arr.dtype else arr = arr:astype(p._dtype) end
      end
      p:_load_init(arr, devices)
    end
  end
  return self
end

---------------------------------------------------------------------------
-- Sequential and HybridSequential: children '0', '1', ... called in order.

local Sequential = Block:extend("Sequential")
local HybridSequential = HybridBlock:extend("HybridSequential")
M.Sequential, M.HybridSequential = Sequential, HybridSequential

-- add(block, ...): register each under the next index; returns self.
local function add(self, ...)
  for k = 1, select("#", ...) do
    local b = select(k, ...)
    if not is_block(b) then
      core.error(("%s:add: argument %d must be a Block, got %s"):format(self._class.__name, k, kind(b)))
    end
    register_child(self, tostring(#self._child_order), b)
  end
  return self
end

-- Children in order; a child with _fuse_next(nxt, after, ...) may run
-- itself and the next child, or the next two, as one op (Conv2D + MaxPool2D
-- [+ BatchNorm]), returning the result and how many children it ran, or nil
-- when it can't.
local function chain(self, order, i, ...)
  local name = order[i]
  if name == nil then return ... end
  local b = self._children[name]
  if b._fuse_next and order[i + 1] then
    local after = order[i + 2]
    local y, n = b:_fuse_next(self._children[order[i + 1]], after and self._children[after], ...)
    if y ~= nil then return chain(self, order, i + n, y) end
  end
  return chain(self, order, i + 1, b(...))
end

local function seq_forward(self, ...)
  return chain(self, self._child_order, 1, ...)
end

local function len(self) return #self._child_order end

for _, cls in ipairs({Sequential, HybridSequential}) do
  cls.add = add
  cls.forward = seq_forward
  cls.len = len
  -- infer_shape: children do their own
  cls.infer_shape = function() end
end

function Sequential:hybridize(active, kw)
  local all_hybrid = #self._child_order > 0
  for _, n in ipairs(self._child_order) do
    if not derives(self._children[n], HybridBlock) then all_hybrid = false end
  end
  if all_hybrid and active ~= false then
    core.warn(("All children of this Sequential layer '%s' are HybridBlocks. Consider using " ..
                "HybridSequential for the best performance."):format(self._class.__name))
  end
  return Block.hybridize(self, active, kw)
end

return M
