-- luon.autograd: recording scopes over the C tape, the ndarray methods
-- attach_grad, backward, detach and the .grad property, autograd.grad
-- (gradients as new arrays; create_graph for higher orders) and
-- autograd.Function (custom functions with a Lua backward). Python's `with`
-- blocks become functions: autograd.record(function() ... end) returns what
-- the function returns.
local core = require("luon.core")
local arr = require("luon.ndarray")
local ffi, C = core.ffi, core.C

local autograd = {}

local function scoped(recording, training, fn, ...)
  if type(fn) ~= "function" then core.error("autograd: expected a function to run") end
  local old_r = recording == nil and C.luon_autograd_is_recording() or C.luon_autograd_set_recording(recording and 1 or 0)
  local old_t = training == nil and C.luon_autograd_is_training() or C.luon_autograd_set_training(training and 1 or 0)
  local function finish(ok, ...)
    C.luon_autograd_set_recording(old_r)
    C.luon_autograd_set_training(old_t)
    if not ok then error((...), 0) end
    return ...
  end
  return finish(pcall(fn, ...))
end

-- A mode flag given as b or as {key = b} (MXNet's keyword): true, false or
-- nil (default). Anything else is an error: a table or a string is truthy
-- and must not quietly mean true.
local function flag(v, fname, key, default)
  if type(v) == "table" then v = core.options(v, fname, {key})[key] end
  if v == nil then return default end
  if type(v) ~= "boolean" then
    core.error(("%s: %s must be true or false, got %s"):format(fname, key, core.show_value(v)))
  end
  return v
end

-- record(fn, train_mode = true): ops in fn are recorded for backward;
-- record(fn, {train_mode = false}) alike. Further arguments go to fn.
function autograd.record(fn, train_mode, ...)
  return scoped(true, flag(train_mode, "autograd.record", "train_mode", true), fn, ...)
end
-- pause(fn, train_mode = false): ops in fn are not recorded.
function autograd.pause(fn, train_mode, ...)
  return scoped(false, flag(train_mode, "autograd.pause", "train_mode", false), fn, ...)
end
function autograd.train_mode(fn, ...) return scoped(nil, true, fn, ...) end
function autograd.predict_mode(fn, ...) return scoped(nil, false, fn, ...) end
function autograd.is_recording() return C.luon_autograd_is_recording() ~= 0 end
function autograd.is_training() return C.luon_autograd_is_training() ~= 0 end
function autograd.set_recording(on)
  on = flag(on, "autograd.set_recording", "is_recording")
  if on == nil then core.error("autograd.set_recording: expected true or false, got nil") end
  return C.luon_autograd_set_recording(on and 1 or 0) ~= 0
end
function autograd.set_training(on)
  on = flag(on, "autograd.set_training", "train_mode")
  if on == nil then core.error("autograd.set_training: expected true or false, got nil") end
  return C.luon_autograd_set_training(on and 1 or 0) ~= 0
end

local grad_reqs = {null = C.LUON_GRAD_NULL, write = C.LUON_GRAD_WRITE, add = C.LUON_GRAD_ADD}
autograd.grad_reqs = grad_reqs

local heads = ffi.new("luon_tensor*[64]")
local head_grads = ffi.new("luon_tensor*[64]")
local vars = ffi.new("luon_tensor*[64]")
local var_grads = ffi.new("luon_tensor*[64]")

---------------------------------------------------------------------------
-- Custom functions (MXNet's autograd.Function). The C tape holds one node
-- per call, with an id; `functions` holds the instance for each id until
-- the C side reports the node freed (luon_autograd_released_functions,
-- read at each call and each backward). C never calls into Lua: a backward
-- pass stops at such a node and this file runs its backward (drive).

local function pack(...) return {n = select("#", ...), ...} end

local functions, next_id = {}, 0
local released = ffi.new("int64_t[64]")
local function collect_released()
  repeat
    local n = C.luon_autograd_released_functions(released, 64)
    for k = 0, n - 1 do functions[tonumber(released[k])] = nil end
  until n < 64
end

local shape_text = core.shape_text

-- The gradients an instance's backward returned, checked against its
-- array inputs (entry.inputs: position, shape, dtype, device): one array
-- per array input, of its shape and device; its dtype is converted. Fills
-- din and returns nil, or returns the error message.
local din = ffi.new("luon_tensor*[8]")
local function take_grads(entry, step, r)
  local name = entry.name
  if r.n < entry.ninputs then
    return ("%s: backward returned %d value%s, expected one gradient per input of forward (%d)")
           :format(name, r.n, r.n == 1 and "" or "s", entry.ninputs)
  end
  for k, inp in ipairs(entry.inputs) do
    local g = r[inp.pos]
    din[k - 1] = nil
    if step.need[k - 1] ~= 0 then
      if not core.is_array(g) then
        return ("%s: backward's gradient %d must be an array (input %d is one), got %s")
               :format(name, inp.pos, inp.pos, core.show_value(g))
      end
      local gs = g.shape
      if #gs ~= #inp.shape then gs = nil else
        for d = 1, #gs do if gs[d] ~= inp.shape[d] then gs = nil break end end
      end
      if not gs then
        return ("%s: backward's gradient %d has shape %s but input %d has shape %s")
               :format(name, inp.pos, shape_text(g.shape), inp.pos, shape_text(inp.shape))
      end
      if tostring(g.device) ~= inp.device then
        return ("%s: backward's gradient %d is on %s but input %d is on %s")
               :format(name, inp.pos, tostring(g.device), inp.pos, inp.device)
      end
      if g.dtype ~= inp.dtype then g = g:astype(inp.dtype) end
      r[inp.pos] = g -- (kept alive until given)
      din[k - 1] = g.t
    end
  end
end

-- Run a started pass b to its end, a custom function's backward at each
-- stop. Returns nil, or the error message (raised by the caller once the
-- pass is closed).
local step = ffi.new("luon_function_step")
local function drive(b, create)
  while true do
    if C.luon_autograd_backward_next(b, step) ~= 0 then return ffi.string(C.luon_last_error()) end
    local id = tonumber(step.id)
    if id == 0 then return nil end
    local entry = functions[id]
    if not entry then return "backward: a custom function's node outlived its Lua object (internal error)" end
    local ograds = {}
    for j = 0, step.nout - 1 do ograds[j + 1] = core.wrap(C.luon_tensor_retain(step.dout[j])) end
    local old_r = C.luon_autograd_set_recording(create and 1 or 0)
    local r = pack(pcall(entry.fn.backward, entry.fn, unpack(ograds, 1, step.nout)))
    C.luon_autograd_set_recording(old_r)
    if not r[1] then return tostring(r[2]), true end
    r = pack(unpack(r, 2, r.n))
    local msg = take_grads(entry, step, r)
    if msg then return msg end
    if C.luon_autograd_backward_give(b, #entry.inputs, din) ~= 0 then return ffi.string(C.luon_last_error()) end
  end
end

local pass = ffi.new("luon_backward*[1]")
-- One backward pass over heads[0..nh) (head_grads or nil), with nv
-- variables in vars (autograd.grad) or none (.grad written).
local function run_pass(nh, hgs, nv, flags, create)
  collect_released()
  pass[0] = nil
  local st = C.luon_autograd_backward_begin(nh, heads, hgs, nv, nv > 0 and vars or nil, flags, pass)
  local b = pass[0]
  local msg, raw
  if st ~= 0 then
    msg = ffi.string(C.luon_last_error())
  elseif b ~= nil then
    local ok, m, r = pcall(drive, b, create) -- (the pass is ended whatever happens)
    if ok then msg, raw = m, r else msg, raw = tostring(m), true end
  end
  if b ~= nil then
    local e = C.luon_autograd_backward_end(b, msg and 1 or 0, nv > 0 and var_grads or nil)
    if not msg and e ~= 0 then msg = ffi.string(C.luon_last_error()) end
  end
  collect_released()
  if raw then error(msg, 0) end
  -- the core names the pass "backward"; autograd.grad's is grad's
  if msg and nv > 0 then msg = msg:gsub("^backward: ", "grad: ") end
  if msg then core.error(msg) end
end

-- The heads (an array or a list) and their gradients into heads and
-- head_grads; returns their count and head_grads or nil.
local function set_heads(fname, hs, hgs)
  if core.is_array(hs) then hs = {hs} end
  if core.is_array(hgs) then hgs = {hgs} end
  if type(hgs) ~= "nil" and type(hgs) ~= "table" then -- (a NULL cdata equals nil)
    core.error(("%s: head_grads must be an array or a list of arrays, got %s"):format(fname, core.show_value(hgs)))
  end
  if type(hs) ~= "table" or #hs == 0 or #hs > 64 then
    core.error(("%s: expected an array or a list of 1 to 64 arrays"):format(fname))
  end
  if hgs and #hgs > #hs then -- (fewer: the missing ones are ones, as nil entries)
    core.error(("%s: %d head gradients for %d heads (MXNet asserts one per head)"):format(fname, #hgs, #hs))
  end
  for k = 1, #hs do
    if not core.is_array(hs[k]) then core.error(("%s: head %d is not an ndarray"):format(fname, k)) end
    heads[k - 1] = hs[k].t
    if hgs and type(hgs[k]) ~= "nil" and not core.is_array(hgs[k]) then
      core.error(("%s: head gradient %d must be an array, got %s"):format(fname, k, core.show_value(hgs[k])))
    end
    if hgs and hgs[k] ~= nil and tostring(hgs[k].device) ~= tostring(hs[k].device) then
      core.error(("%s: head gradient %d is on %s but its head is on %s; copy it there with as_in_context")
                 :format(fname, k, tostring(hgs[k].device), tostring(hs[k].device)))
    end
    head_grads[k - 1] = hgs and hgs[k] and hgs[k].t or nil
  end
  return #hs, hgs and head_grads or nil
end

local backward_names = {"head_grads", "retain_graph", "train_mode"}

-- train_mode = false (backward in predict mode) is refused: the tape keeps
-- each op's mode from the forward pass.
local function check_train_mode(fname, v)
  if flag(v, fname, "train_mode", true) == false then
    core.error(("%s: train_mode = false is not supported: gradients follow the mode each op " ..
                "ran in during the forward pass (autograd.record's train_mode)"):format(fname))
  end
end

-- backward(heads, head_grads, retain_graph), or backward(heads, {head_grads
-- =, retain_graph =}): heads is an array or a list.
function autograd.backward(hs, ...)
  local a = core.args("backward", backward_names, backward_names, ...)
  local retain = flag(a.retain_graph, "backward", "retain_graph", false)
  check_train_mode("backward", a.train_mode)
  local nh, hgs = set_heads("backward", hs, a.head_grads)
  run_pass(nh, hgs, 0, retain and C.LUON_BACKWARD_RETAIN_GRAPH or 0, false)
end

local grad_names = {"head_grads", "retain_graph", "create_graph", "train_mode"}

-- grad(heads, variables, head_grads, retain_graph, create_graph,
-- train_mode), or with a table of keywords after variables: the gradients
-- of the heads with respect to the variables as new arrays (.grad is not
-- written): one array for an array, a list for a list. create_graph
-- records the computation of the gradients, so that they can be
-- differentiated again; retain_graph defaults to create_graph (MXNet's).
function autograd.grad(hs, variables, ...)
  local a = core.args("grad", grad_names, grad_names, ...)
  local create = flag(a.create_graph, "grad", "create_graph", false)
  local retain = flag(a.retain_graph, "grad", "retain_graph", create)
  check_train_mode("grad", a.train_mode)
  local single = core.is_array(variables)
  local vs = single and {variables} or variables
  if type(vs) ~= "table" or #vs == 0 or #vs > 64 then
    core.error(("grad: variables must be an array or a list of 1 to 64 arrays, got %s"):format(core.show_value(variables)))
  end
  for k = 1, #vs do
    if not core.is_array(vs[k]) then
      core.error(("grad: variable %d is not an ndarray, got %s"):format(k, core.show_value(vs[k])))
    end
    vars[k - 1] = vs[k].t
  end
  local nh, hgs = set_heads("grad", hs, a.head_grads)
  local flags = (retain and C.LUON_BACKWARD_RETAIN_GRAPH or 0) + (create and C.LUON_BACKWARD_CREATE_GRAPH or 0)
  for k = 0, #vs - 1 do var_grads[k] = nil end
  run_pass(nh, hgs, #vs, flags, create)
  local out = {}
  for k = 1, #vs do out[k] = core.wrap(var_grads[k - 1]) end
  return single and out[1] or out
end

-- Function:extend{forward = function(self, ...) end, backward = function(self, ...) end}
-- makes a custom differentiable function (MXNet: a subclass of
-- autograd.Function); an instance is called once, as f(x, y): forward
-- runs unrecorded, and its outputs are recorded as one node whose backward
-- is the instance's backward (output gradients in, one gradient per input
-- of forward out; those of non-array inputs are ignored). save_for_backward
-- and saved_tensors keep what backward needs.
local Function = core.class("autograd.Function")
autograd.Function = Function

function Function.__init(self)
  self._used = false
  self.saved_tensors = {}
end

function Function:save_for_backward(...) self.saved_tensors = pack(...) end

function Function:forward()
  core.error(("%s: forward is not defined; make the function with autograd.Function:extend{forward =, backward =}")
             :format(tostring(getmetatable(self))))
end
function Function:backward()
  core.error(("%s: backward is not defined; make the function with autograd.Function:extend{forward =, backward =}")
             :format(tostring(getmetatable(self))))
end

local extend_keys = {name = "string", forward = "function", backward = "function"}
function Function.extend(cls, t)
  if type(cls) ~= "table" or type(t) ~= "table" then
    core.error(("autograd.Function:extend: expected a table {forward = function, backward = function}, got %s")
               :format(core.show_value(type(cls) == "table" and t or cls)))
  end
  for _, k in ipairs({"forward", "backward"}) do
    if type(t[k]) ~= "function" then
      core.error(("autograd.Function:extend: %s must be a function(self, ...), got %s"):format(k, core.show_value(t[k])))
    end
  end
  if t.name ~= nil and type(t.name) ~= "string" then
    core.error(("autograd.Function:extend: name must be a string, got %s"):format(core.show_value(t.name)))
  end
  local sub = core.class(t.name or "autograd.Function", cls)
  for k, v in pairs(t) do
    if k ~= "name" then sub[k] = v end
  end
  return sub
end

local fin = ffi.new("luon_tensor*[8]")
local fout = ffi.new("luon_tensor*[8]")
local recorded = ffi.new("int32_t[1]")
Function.__call = function(self, ...)
  local name = tostring(getmetatable(self))
  if self._used then
    core.error(("%s: each instance is called once (MXNet's rule); make another instance"):format(name))
  end
  self._used = true
  collect_released()
  local was = C.luon_autograd_set_recording(0)
  local r = pack(pcall(self.forward, self, ...))
  C.luon_autograd_set_recording(was)
  if not r[1] then error(r[2], 0) end
  if was == 0 then return unpack(r, 2, r.n) end
  local n, inputs = select("#", ...), {}
  for k = 1, n do
    local v = select(k, ...)
    if core.is_array(v) then
      if #inputs == 8 then core.error(("%s: at most 8 array inputs"):format(name)) end
      inputs[#inputs + 1] = {pos = k, shape = v.shape, dtype = v.dtype, device = tostring(v.device)}
      fin[#inputs - 1] = v.t
    end
  end
  local nout = r.n - 1
  if nout < 1 or nout > 8 then
    core.error(("%s: forward must return 1 to 8 arrays, returned %d values"):format(name, nout))
  end
  local outs = {}
  for k = 1, nout do
    local o = r[k + 1]
    if not core.is_array(o) then
      core.error(("%s: forward's output %d must be an array, got %s"):format(name, k, core.show_value(o)))
    end
    outs[k] = o:detach() -- its own handle: the node's output, never an input
    fout[k - 1] = outs[k].t
  end
  next_id = next_id + 1
  core.check(C.luon_autograd_record_function(#inputs, fin, nout, fout, next_id, recorded))
  if recorded[0] ~= 0 then
    functions[next_id] = {fn = self, name = name, ninputs = n, inputs = inputs}
  end
  return unpack(outs, 1, nout)
end

local methods, props = arr.methods, arr.props

local attach_names = {"grad_req", "stype"}
function methods.attach_grad(x, ...)
  local a = core.args("attach_grad", attach_names, attach_names, ...)
  if a.stype ~= nil and a.stype ~= "default" then
    core.error(("attach_grad: stype %s is not supported (dense gradients only: 'default')"):format(core.show_value(a.stype)))
  end
  local grad_req = a.grad_req
  local req = grad_reqs[grad_req or "write"]
  if not req then
    core.error(("attach_grad: grad_req must be 'write', 'add' or 'null', got %s"):format(tostring(grad_req)))
  end
  core.info_of(x) -- x is an array
  core.check(C.luon_tensor_attach_grad(x.t, req))
end

-- y:backward(head_grad, retain_graph) or y:backward(head_grad,
-- {retain_graph =}) or y:backward{out_grad =, retain_graph =};
-- y:backward(true) keeps the graph.
local backward_method_names = {"out_grad", "retain_graph", "train_mode"}
function methods.backward(y, head_grad, ...)
  if type(head_grad) == "boolean" then return methods.backward(y, nil, head_grad, ...) end
  local a = core.args("backward", backward_method_names, backward_method_names, head_grad, ...)
  local g = a.out_grad
  autograd.backward({y}, {head_grads = g ~= nil and {g} or nil, retain_graph = a.retain_graph,
                          train_mode = a.train_mode})
end

function methods.detach(x)
  core.info_of(x) -- x is an array
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_detach(x.t, out))
  return core.wrap(out[0])
end

local grad_out = ffi.new("luon_tensor*[1]")
function props.grad(x)
  core.check(C.luon_tensor_grad(x.t, grad_out))
  if grad_out[0] == nil then return nil end
  return core.wrap(grad_out[0])
end

function props.grad_req(x)
  local r = C.luon_tensor_grad_req(x.t)
  return r == 2 and "add" or r == 1 and "write" or "null"
end

return core.strict_module(autograd, "autograd")
