-- luon.gluon.rnn.rnn_layer: the fused recurrent layers RNN, LSTM and GRU
-- (MXNet 1.9.1's _RNNLayer): one npx.rnn call per forward over all layers
-- and directions. Parameters as MXNet names them: l0_i2h_weight,
-- l0_h2h_weight, l0_i2h_bias, l0_h2h_bias, r0_... for the reverse
-- direction, per layer; gates stacked in MXNet's order (LSTM i, f, g, o;
-- GRU r, z, n). Not here: projection_size, state clipping, sequence lengths.
local core = require("luon.core")
local np = require("luon.np")
local npx = require("luon.npx")
local block = require("luon.gluon.block")
local param = require("luon.gluon.parameter")
local util = require("luon.gluon.nn.util")

local HybridBlock = block.HybridBlock
local Parameter = param.new
local tuple = param.tuple
local opts, positive_int, known_size, pyrepr = util.opts, util.positive_int, util.known_size, util.pyrepr
local device_of = util.device_of
local shape_text = core.shape_text

local M = {}

local gates = {rnn_relu = 1, rnn_tanh = 1, lstm = 4, gru = 3}

-- MXNet's keywords that luon does not have: an error naming them.
local unsupported = {
  projection_size = "LSTM with a projection (LSTMP)",
  h2r_weight_initializer = "LSTM with a projection (LSTMP)",
  state_clip_min = "LSTM state clipping", state_clip_max = "LSTM state clipping",
  state_clip_nan = "LSTM state clipping",
}

function M.layout_arg(layout, layer, allowed)
  layout = layout == nil and allowed[1] or layout
  for _, l in ipairs(allowed) do
    if layout == l then return layout end
  end
  core.error(("%s: Invalid layout %s; must be one of %s"):format(layer, core.show_value(layout),
                                                                  table.concat(allowed, " or ")))
end

local RNNLayer = HybridBlock:extend("_RNNLayer")
M._RNNLayer = RNNLayer

-- o: the options read by the subclass; mode: npx.rnn's.
function RNNLayer:_setup(name, o, mode)
  for k, what in pairs(unsupported) do
    if o[k] ~= nil and o[k] ~= false then
      core.error(("%s: %s is not supported in luon (%s); leave it out"):format(name, k, what))
    end
  end
  local H = positive_int(o.hidden_size, name, "hidden_size")
  local L = positive_int(o.num_layers == nil and 1 or o.num_layers, name, "num_layers")
  local layout = M.layout_arg(o.layout, name, {"TNC", "NTC"})
  local dropout = o.dropout == nil and 0 or o.dropout
  if type(dropout) ~= "number" or not (dropout >= 0 and dropout < 1) then
    core.error(("%s: dropout must be a number in [0, 1), got %s"):format(name, core.show_value(dropout)))
  end
  if o.bidirectional ~= nil and type(o.bidirectional) ~= "boolean" then
    core.error(("%s: bidirectional must be true or false, got %s"):format(name, core.show_value(o.bidirectional)))
  end
  local D = o.bidirectional and 2 or 1
  local I = known_size(o.input_size, name, "input_size")
  self._name, self._mode, self._hidden, self._layers, self._dir = name, mode, H, L, D
  self._layout, self._dropout, self._input_size, self._gates = layout, dropout, I, gates[mode]
  self._dtype = o.dtype or "float32"
  local G = gates[mode]
  local order = {}
  local ni = I > 0 and I or -1
  for l = 0, L - 1 do
    for d = 1, D do
      local j = ({"l", "r"})[d] .. l
      local function p(suffix, shape, init)
        local pname = j .. "_" .. suffix
        self[pname] = Parameter(pname, {shape = shape, dtype = self._dtype, init = init,
                                        allow_deferred_init = true})
        order[#order + 1] = pname
      end
      p("i2h_weight", {G * H, ni}, o.i2h_weight_initializer)
      p("h2h_weight", {G * H, H}, o.h2h_weight_initializer)
      p("i2h_bias", {G * H}, o.i2h_bias_initializer or "zeros")
      p("h2h_bias", {G * H}, o.h2h_bias_initializer or "zeros")
    end
    ni = H * D
  end
  -- npx.rnn's flat order: the weights of each layer and direction, then the biases
  local flat = {}
  for _, t in ipairs({"weight", "bias"}) do
    for l = 0, L - 1 do
      for d = 1, D do
        for _, g in ipairs({"i2h", "h2h"}) do flat[#flat + 1] = ("%s%d_%s_%s"):format(({"l", "r"})[d], l, g, t) end
      end
    end
  end
  self._flat = flat
  self._kw = {mode = mode, state_size = H, num_layers = L, bidirectional = D == 2, p = dropout,
              state_outputs = true}
end

function RNNLayer:infer_shape(x)
  local s = x.shape
  if #s ~= 3 then
    core.error(("%s: the input must be 3-D (%s), got shape %s"):format(self._name, self._layout, shape_text(s)))
  end
  for d = 1, self._dir do
    self[({"l", "r"})[d] .. "0_i2h_weight"].shape = {self._gates * self._hidden, s[3]}
  end
end

-- state_info(batch_size): the states' shapes, (num_layers * directions, N, H).
function RNNLayer:state_info(batch_size)
  local info = {shape = {self._layers * self._dir, batch_size or 0, self._hidden}, __layout__ = "LNC",
                dtype = self._dtype}
  if self._mode == "lstm" then return {info, info} end
  return {info}
end

-- begin_state(batch_size, {func = np.zeros, dtype, device}) or all as
-- keywords (MXNet's begin_state(batch_size=, func=)): a list of the initial
-- states (an LSTM's: h, c), each func(shape, {dtype, device}). The layers'
-- and the cells' (rnn_cell.lua) one begin_state.
local state_names, state_keys = {"batch_size", "func"}, {"batch_size", "func", "dtype", "device", "ctx"}
function M.begin_state(self, ...)
  local o = core.args("begin_state", state_names, state_keys, ...)
  local batch_size = core.int_arg(o.batch_size or 0, "begin_state", "batch_size", 0)
  local func = o.func or np.zeros
  local states = {}
  for k, info in ipairs(self:state_info(batch_size)) do
    states[k] = func(info.shape, {dtype = o.dtype or info.dtype, device = o.device or o.ctx})
  end
  return states
end
RNNLayer.begin_state = M.begin_state

-- The states given to forward: a list of arrays of the expected shapes (an
-- array alone for RNN and GRU, as MXNet allows).
local function check_states(self, states, N, x)
  if core.is_array(states) then states = {states} end
  if type(states) ~= "table" then
    core.error(("%s: states must be a list of ndarrays, got %s"):format(self._name, core.show_value(states)))
  end
  local info = self:state_info(N)
  if #states ~= #info then
    core.error(("%s: expected %d state%s (%s), got %d"):format(self._name, #info, #info > 1 and "s" or "",
                self._mode == "lstm" and "h and c" or "h", #states))
  end
  for k, s in ipairs(states) do
    if not core.is_array(s) then
      core.error(("%s: state %d must be an ndarray, got %s"):format(self._name, k, core.show_value(s)))
    end
    local want = info[k].shape
    local ok = s.ndim == 3
    for i = 1, 3 do ok = ok and s.shape[i] == want[i] end
    if not ok then
      core.error(("%s: Invalid recurrent state shape. Expecting %s, got %s (state %d, for an input of shape %s)")
                 :format(self._name, tuple(want), tuple(s.shape), k, tuple(x.shape)))
    end
  end
  return states
end

-- layer(x) -> output; layer(x, states) -> output, new states (a list: h, or
-- h and c for LSTM), as MXNet's (output, [states]).
function RNNLayer:forward(x, states)
  local name = self._name
  if x.ndim ~= 3 then
    core.error(("%s: the input must be 3-D (%s), got shape %s"):format(name, self._layout, shape_text(x.shape)))
  end
  local w = self.l0_i2h_weight.shape
  local I = x.shape[3]
  if w[2] > 0 and I ~= w[2] then
    core.error(("%s: the input has %d features (shape %s, layout %s) but the layer's input_size is %d")
               :format(name, I, tuple(x.shape), self._layout, w[2]))
  end
  if self._layout == "NTC" then x = np.swapaxes(x, 0, 1) end
  local N = x.shape[2]
  local skip = states == nil
  if skip then
    states = self:begin_state(N, {dtype = x.dtype, device = device_of(x)})
  else
    states = check_states(self, states, N, x)
  end
  local dev, parts = device_of(x), {}
  for k, n in ipairs(self._flat) do parts[k] = self[n]:data(dev):reshape(-1) end
  local y, h, c = npx.rnn(x, np.concatenate(parts, 0), states[1], states[2], self._kw)
  if self._layout == "NTC" then y = np.swapaxes(y, 0, 1) end
  if skip then return y end
  return y, c and {h, c} or {h}
end

function RNNLayer:__tostring()
  local w = self.l0_i2h_weight.shape
  local s = ("%s(%s -> %d, %s"):format(self._class.__name, w[2] > 0 and tostring(w[2]) or "None",
                                        self._hidden, self._layout)
  if self._layers ~= 1 then s = s .. ", num_layers=" .. self._layers end
  if self._dropout ~= 0 then s = s .. ", dropout=" .. pyrepr(self._dropout) end
  if self._dir == 2 then s = s .. ", bidirectional" end
  return s .. ")"
end

local common = {"layout", "dropout", "bidirectional", "input_size", "i2h_weight_initializer",
                "h2h_weight_initializer", "i2h_bias_initializer", "h2h_bias_initializer"}
local function names(first, rest, last)
  local t = {}
  for _, n in ipairs(first) do t[#t + 1] = n end
  for _, n in ipairs(rest) do t[#t + 1] = n end
  for _, n in ipairs(last) do t[#t + 1] = n end
  return t
end

-- RNN(hidden_size, num_layers=1, {activation='relu'|'tanh', layout='TNC',
-- dropout=0, bidirectional=false, i2h_weight_initializer,
-- h2h_weight_initializer, i2h_bias_initializer='zeros',
-- h2h_bias_initializer='zeros', input_size=0, dtype='float32'})
local rnn_names = {"hidden_size", "num_layers", "activation", "layout", "dropout", "bidirectional",
                   "i2h_weight_initializer", "h2h_weight_initializer", "i2h_bias_initializer",
                   "h2h_bias_initializer", "input_size", "dtype"}
local RNN = RNNLayer:extend("RNN")
M.RNN = RNN
function RNN:__init(...)
  local o = opts("RNN", rnn_names, ...)
  local act = o.activation == nil and "relu" or o.activation
  if act ~= "relu" and act ~= "tanh" then
    core.error(("RNN: activation must be 'relu' or 'tanh', got %s"):format(core.show_value(act)))
  end
  self:_setup("RNN", o, "rnn_" .. act)
end

-- LSTM(hidden_size, num_layers=1, {layout, dropout, bidirectional,
-- input_size, the four initializers, dtype}) (MXNet's order)
local lstm_names = names({"hidden_size", "num_layers"}, common,
                         {"projection_size", "h2r_weight_initializer", "state_clip_min", "state_clip_max",
                          "state_clip_nan", "dtype"})
local LSTM = RNNLayer:extend("LSTM")
M.LSTM = LSTM
function LSTM:__init(...) self:_setup("LSTM", opts("LSTM", lstm_names, ...), "lstm") end

-- GRU(hidden_size, num_layers=1, {layout, dropout, bidirectional,
-- input_size, the four initializers, dtype})
local gru_names = names({"hidden_size", "num_layers"}, common, {"dtype"})
local GRU = RNNLayer:extend("GRU")
M.GRU = GRU
function GRU:__init(...) self:_setup("GRU", opts("GRU", gru_names, ...), "gru") end

return M
