-- luon.gluon.rnn.rnn_cell: MXNet 1.9.1's recurrent cells, one step per
-- call (cell(x, states) -> output, new states) and unroll over a sequence:
-- RNNCell, LSTMCell, GRUCell (the fused layers' math, gate for gate),
-- SequentialRNNCell, DropoutCell, ResidualCell, BidirectionalCell.
-- Not here: valid_length in unroll, ZoneoutCell, VariationalDropoutCell.
local core = require("luon.core")
local np = require("luon.np")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local util = require("luon.gluon.nn.util")
local layout_arg = require("luon.gluon.rnn.rnn_layer").layout_arg

local HybridBlock = block.HybridBlock
local Parameter = param.new
local tuple = param.tuple
local opts, positive_int, known_size = util.opts, util.positive_int, util.known_size
local device_of = util.device_of

local M = {}

---------------------------------------------------------------------------
-- The base: state_info, begin_state, unroll.

local RecurrentCell = HybridBlock:extend("HybridRecurrentCell")
M.HybridRecurrentCell = RecurrentCell
M.RecurrentCell = RecurrentCell

function RecurrentCell:state_info() return {} end
function RecurrentCell:reset() end

-- begin_state(batch_size, {func, dtype, device}): the layers' (rnn_layer.lua)
RecurrentCell.begin_state = require("luon.gluon.rnn.rnn_layer").begin_state

-- The steps of a sequence: inputs (an ndarray in layout, or a list of
-- `length` arrays (N, C)) -> list of (N, C) arrays, and whether it was one array.
local function steps_of(name, length, inputs, layout)
  local axis = layout:find("T") - 1
  if core.is_array(inputs) then
    if inputs.ndim ~= 3 then
      core.error(("%s.unroll: inputs must be 3-D (%s), got shape %s"):format(name, layout, tuple(inputs.shape)))
    end
    if inputs.shape[axis + 1] ~= length then
      core.error(("%s.unroll: length is %d but the inputs have %d steps (shape %s, layout %s)")
                 :format(name, length, inputs.shape[axis + 1], tuple(inputs.shape), layout))
    end
    local xs = {}
    for t = 0, length - 1 do xs[t + 1] = axis == 0 and inputs[t] or inputs[{{}, t}] end
    return xs, true
  end
  if type(inputs) ~= "table" or #inputs ~= length then
    core.error(("%s.unroll: inputs must be an ndarray or a list of %d ndarrays, got %s")
               :format(name, length, core.show_value(inputs)))
  end
  return inputs, false
end

-- outputs (a list of (N, C)) merged along layout's T axis when merge.
local function format_outputs(outputs, layout, merge)
  if merge then return np.stack(outputs, layout:find("T") - 1) end
  return outputs
end

local unroll_keys = {"begin_state", "layout", "merge_outputs", "valid_length"}
local function unroll_opts(self, length, kw)
  kw = core.options(kw, "unroll", unroll_keys)
  if kw.valid_length ~= nil then
    core.error(("%s.unroll: valid_length is not supported in luon (leave it out)"):format(self._class.__name))
  end
  core.int_arg(length, "unroll", "length", 0)
  return kw, layout_arg(kw.layout, self._class.__name .. ".unroll", {"NTC", "TNC"})
end

-- unroll(length, inputs, {begin_state, layout='NTC', merge_outputs}) ->
-- outputs, states. merge_outputs nil: merged when inputs is one ndarray.
function RecurrentCell:unroll(length, inputs, kw)
  local layout
  kw, layout = unroll_opts(self, length, kw)
  self:reset()
  local xs, was_array = steps_of(self._class.__name, length, inputs, layout)
  local states = kw.begin_state
  if states == nil and length > 0 then
    states = self:begin_state(xs[1].shape[1], {dtype = xs[1].dtype, device = device_of(xs[1])})
  end
  local outputs = {}
  for t = 1, length do outputs[t], states = self(xs[t], states) end
  local merge = kw.merge_outputs
  if merge == nil then merge = was_array end
  return format_outputs(outputs, layout, merge and length > 0), states
end

-- The states of one call: a list of `n` arrays (a lone array when n is 1).
local function check_states(self, states, n)
  if core.is_array(states) then states = {states} end
  if type(states) ~= "table" or #states ~= n then
    core.error(("%s: expected a list of %d state%s, got %s"):format(self._class.__name, n, n > 1 and "s" or "",
                core.show_value(states)))
  end
  return states
end

---------------------------------------------------------------------------
-- The gated cells: i2h (G*H, I) and h2h (G*H, H) weights, biases (G*H,).


local Gated = RecurrentCell:extend("_GatedCell")

local function cell_args(name, names, ...) return core.args(name, names, names, ...) end

function Gated:_setup(name, o, G)
  for _, k in ipairs({"prefix", "params"}) do
    if o[k] ~= nil then core.error(("%s: no argument '%s' in luon (parameters are named by their place)"):format(name, k)) end
  end
  local H = positive_int(o.hidden_size, name, "hidden_size")
  local I = known_size(o.input_size, name, "input_size")
  self._hidden, self._gates, self._input_size = H, G, I
  local function p(pname, shape, init)
    self[pname] = Parameter(pname, {shape = shape, init = init, allow_deferred_init = true})
  end
  p("i2h_weight", {G * H, I > 0 and I or -1}, o.i2h_weight_initializer)
  p("h2h_weight", {G * H, H}, o.h2h_weight_initializer)
  p("i2h_bias", {G * H}, o.i2h_bias_initializer or "zeros")
  p("h2h_bias", {G * H}, o.h2h_bias_initializer or "zeros")
end

function Gated:infer_shape(x)
  if x.ndim ~= 2 then
    core.error(("%s: the input of one step must be 2-D (batch, input_size), got shape %s")
               :format(self._class.__name, tuple(x.shape)))
  end
  self.i2h_weight.shape = {self._gates * self._hidden, x.shape[2]}
end

function Gated:state_info(batch_size)
  local info = {shape = {batch_size or 0, self._hidden}, __layout__ = "NC"}
  if self._gates == 4 then return {info, info} end
  return {info}
end

-- i2h (N, G*H) and h2h (N, G*H) of one step, after the checks.
function Gated:_projections(x, h)
  local name = self._class.__name
  if x.ndim ~= 2 then
    core.error(("%s: the input of one step must be 2-D (batch, input_size), got shape %s"):format(name, tuple(x.shape)))
  end
  local w = self.i2h_weight.shape
  if x.shape[2] ~= w[2] then
    core.error(("%s: the input has %d features (shape %s) but the cell's input_size is %d")
               :format(name, x.shape[2], tuple(x.shape), w[2]))
  end
  local want = {x.shape[1], self._hidden}
  if not core.is_array(h) or h.ndim ~= 2 or h.shape[1] ~= want[1] or h.shape[2] ~= want[2] then
    core.error(("%s: Invalid recurrent state shape. Expecting %s, got %s"):format(name, tuple(want),
               core.is_array(h) and tuple(h.shape) or core.show_value(h)))
  end
  local dev = device_of(x)
  local i2h = npx.fully_connected(x, self.i2h_weight:data(dev), self.i2h_bias:data(dev), {flatten = false})
  local h2h = npx.fully_connected(h, self.h2h_weight:data(dev), self.h2h_bias:data(dev), {flatten = false})
  return i2h, h2h
end

function Gated:__tostring()
  local w = self.i2h_weight.shape
  return ("%s(%s -> %d)"):format(self._class.__name, w[2] > 0 and tostring(w[2]) or "None", w[1])
end

-- G pieces (N, H) of a (N, G*H) array.
local function gates_of(a, G)
  return np.split(a, G, 1)
end

local act_names = {tanh = true, sigmoid = true, relu = true, softrelu = true}
local function act_fn(name, what, v)
  if not act_names[v] then
    core.error(("%s: %s must be 'tanh', 'sigmoid', 'relu' or 'softrelu', got %s"):format(name, what,
               core.show_value(v)))
  end
  return function(x) return npx.activation(x, v) end
end

-- RNNCell(hidden_size, {activation='tanh', initializers, input_size=0}):
-- h' = act(i2h(x) + h2h(h)).
local RNNCell = Gated:extend("RNNCell")
M.RNNCell = RNNCell
function RNNCell:__init(...)
  local o = cell_args("RNNCell", {"hidden_size", "activation", "i2h_weight_initializer", "h2h_weight_initializer",
                                  "i2h_bias_initializer", "h2h_bias_initializer", "input_size", "prefix", "params"}, ...)
  self:_setup("RNNCell", o, 1)
  self._act_name = o.activation or "tanh"
  self._act = act_fn("RNNCell", "activation", self._act_name)
end
function RNNCell:forward(x, states)
  states = check_states(self, states, 1)
  local i2h, h2h = self:_projections(x, states[1])
  local out = self._act(i2h + h2h)
  return out, {out}
end

-- LSTMCell(hidden_size, {initializers, input_size=0, activation='tanh',
-- recurrent_activation='sigmoid'}): gates i, f, g, o; c' = f c + i g,
-- h' = o act(c').
local LSTMCell = Gated:extend("LSTMCell")
M.LSTMCell = LSTMCell
function LSTMCell:__init(...)
  local names = {"hidden_size", "i2h_weight_initializer", "h2h_weight_initializer", "i2h_bias_initializer",
                 "h2h_bias_initializer", "input_size", "prefix", "params", "activation", "recurrent_activation"}
  local o = cell_args("LSTMCell", names, ...)
  self:_setup("LSTMCell", o, 4)
  self._act = act_fn("LSTMCell", "activation", o.activation or "tanh")
  self._ract = act_fn("LSTMCell", "recurrent_activation", o.recurrent_activation or "sigmoid")
end
function LSTMCell:forward(x, states)
  states = check_states(self, states, 2)
  local i2h, h2h = self:_projections(x, states[1])
  local c = states[2]
  if not core.is_array(c) or c.ndim ~= 2 or c.shape[1] ~= x.shape[1] or c.shape[2] ~= self._hidden then
    core.error(("LSTMCell: Invalid recurrent state shape. Expecting %s, got %s"):format(
               tuple({x.shape[1], self._hidden}), core.is_array(c) and tuple(c.shape) or core.show_value(c)))
  end
  local g = gates_of(i2h + h2h, 4)
  local i, f, gg, o = self._ract(g[1]), self._ract(g[2]), self._act(g[3]), self._ract(g[4])
  local next_c = f * c + i * gg
  local next_h = o * self._act(next_c)
  return next_h, {next_h, next_c}
end

-- GRUCell(hidden_size, {initializers, input_size=0}): r, z from i2h + h2h,
-- n = tanh(i2h_n + r * h2h_n), h' = (1 - z) n + z h.
local GRUCell = Gated:extend("GRUCell")
M.GRUCell = GRUCell
function GRUCell:__init(...)
  local o = cell_args("GRUCell", {"hidden_size", "i2h_weight_initializer", "h2h_weight_initializer",
                                  "i2h_bias_initializer", "h2h_bias_initializer", "input_size", "prefix", "params"}, ...)
  self:_setup("GRUCell", o, 3)
end
function GRUCell:forward(x, states)
  states = check_states(self, states, 1)
  local h = states[1]
  local i2h, h2h = self:_projections(x, h)
  local a, b = gates_of(i2h, 3), gates_of(h2h, 3)
  local r, z = npx.sigmoid(a[1] + b[1]), npx.sigmoid(a[2] + b[2])
  local n = np.tanh(a[3] + r * b[3])
  local next_h = (1 - z) * n + z * h
  return next_h, {next_h}
end

---------------------------------------------------------------------------
-- Containers and modifiers.

-- SequentialRNNCell(): cells stacked with add(cell); its states are its
-- cells' states in order.
local SequentialRNNCell = RecurrentCell:extend("SequentialRNNCell")
M.SequentialRNNCell = SequentialRNNCell
function SequentialRNNCell:__init(...)
  local o = cell_args("SequentialRNNCell", {"prefix", "params"}, ...)
  if o.prefix ~= nil or o.params ~= nil then
    core.error("SequentialRNNCell: no argument 'prefix' or 'params' in luon (parameters are named by their place)")
  end
end
function SequentialRNNCell:add(cell)
  if not block.isinstance(cell, RecurrentCell) then
    core.error(("SequentialRNNCell.add: expected a recurrent cell, got %s"):format(core.show_value(cell)))
  end
  self[tostring(#self)] = cell
  return self
end
function SequentialRNNCell:state_info(batch_size)
  local info = {}
  for k = 0, #self - 1 do
    for _, s in ipairs(self[k]:state_info(batch_size)) do info[#info + 1] = s end
  end
  return info
end
function SequentialRNNCell:forward(x, states)
  states = check_states(self, states, #self:state_info(0))
  local at, next_states = 1, {}
  for k = 0, #self - 1 do
    local cell = self[k]
    local n = #cell:state_info(0)
    local mine = {unpack(states, at, at + n - 1)}
    at = at + n
    local new
    x, new = cell(x, mine)
    for _, s in ipairs(new) do next_states[#next_states + 1] = s end
  end
  return x, next_states
end
function SequentialRNNCell:__tostring()
  local parts = {}
  for k = 0, #self - 1 do parts[#parts + 1] = ("  (%d): %s"):format(k, tostring(self[k])) end
  return "SequentialRNNCell(\n" .. table.concat(parts, "\n") .. "\n)"
end

-- DropoutCell(rate, {axes = {}}): dropout on the input while training; no states.
local DropoutCell = RecurrentCell:extend("DropoutCell")
M.DropoutCell = DropoutCell
function DropoutCell:__init(...)
  local o = cell_args("DropoutCell", {"rate", "axes", "prefix", "params"}, ...)
  if type(o.rate) ~= "number" or not (o.rate >= 0 and o.rate <= 1) then
    core.error(("DropoutCell: rate must be a number in [0, 1], got %s"):format(core.show_value(o.rate)))
  end
  if o.axes ~= nil and #o.axes > 0 then
    core.error("DropoutCell: a mask shared along axes is not supported (axes must be empty)")
  end
  self._rate = o.rate
end
function DropoutCell:forward(x, states)
  if self._rate > 0 then x = npx.dropout(x, {p = self._rate}) end
  return x, states or {}
end
function DropoutCell:__tostring() return ("DropoutCell(rate=%s, axes=())"):format(util.pyrepr(self._rate)) end

-- ResidualCell(base_cell): the base cell's output plus its input.
local ResidualCell = RecurrentCell:extend("ResidualCell")
M.ResidualCell = ResidualCell
function ResidualCell:__init(base_cell)
  if not block.isinstance(base_cell, RecurrentCell) then
    core.error(("ResidualCell: base_cell must be a recurrent cell, got %s"):format(core.show_value(base_cell)))
  end
  self.base_cell = base_cell
end
function ResidualCell:state_info(batch_size) return self.base_cell:state_info(batch_size) end
function ResidualCell:forward(x, states)
  local out, new = self.base_cell(x, states)
  return out + x, new
end
function ResidualCell:__tostring() return ("ResidualCell(%s)"):format(tostring(self.base_cell)) end

-- BidirectionalCell(l_cell, r_cell): only unroll (a step has no reverse);
-- outputs are l's and r's concatenated on the feature axis, states l's then r's.
local BidirectionalCell = RecurrentCell:extend("BidirectionalCell")
M.BidirectionalCell = BidirectionalCell
function BidirectionalCell:__init(l_cell, r_cell, output_prefix)
  for k, c in ipairs({l_cell, r_cell}) do
    if not block.isinstance(c, RecurrentCell) then
      core.error(("BidirectionalCell: %s must be a recurrent cell, got %s"):format(k == 1 and "l_cell" or "r_cell",
                 core.show_value(c)))
    end
  end
  self.l_cell, self.r_cell = l_cell, r_cell
end
function BidirectionalCell:state_info(batch_size)
  local info = {}
  for _, s in ipairs(self.l_cell:state_info(batch_size)) do info[#info + 1] = s end
  for _, s in ipairs(self.r_cell:state_info(batch_size)) do info[#info + 1] = s end
  return info
end
function BidirectionalCell:forward()
  core.error("BidirectionalCell: Bidirectional cannot be stepped. Please use unroll")
end
function BidirectionalCell:__call(x, states) return self:forward(x, states) end
function BidirectionalCell:unroll(length, inputs, kw)
  local layout
  kw, layout = unroll_opts(self, length, kw)
  local xs, was_array = steps_of("BidirectionalCell", length, inputs, layout)
  local states = kw.begin_state
  if states == nil and length > 0 then
    states = self:begin_state(xs[1].shape[1], {dtype = xs[1].dtype, device = device_of(xs[1])})
  end
  states = check_states(self, states, #self:state_info(0))
  local nl = #self.l_cell:state_info(0)
  local rev = {}
  for t = 1, length do rev[t] = xs[length + 1 - t] end
  local lo, ls = self.l_cell:unroll(length, xs, {begin_state = {unpack(states, 1, nl)}, layout = layout,
                                                 merge_outputs = false})
  local ro, rs = self.r_cell:unroll(length, rev, {begin_state = {unpack(states, nl + 1, #states)}, layout = layout,
                                                  merge_outputs = false})
  local outputs = {}
  for t = 1, length do outputs[t] = np.concatenate({lo[t], ro[length + 1 - t]}, 1) end
  local new = {}
  for _, s in ipairs(ls) do new[#new + 1] = s end
  for _, s in ipairs(rs) do new[#new + 1] = s end
  local merge = kw.merge_outputs
  if merge == nil then merge = was_array end
  return format_outputs(outputs, layout, merge and length > 0), new
end
function BidirectionalCell:__tostring()
  return ("BidirectionalCell(\n  (l_cell): %s\n  (r_cell): %s\n)"):format(tostring(self.l_cell), tostring(self.r_cell))
end

return M
