-- luon.autograd: recording scopes over the C tape, and the ndarray methods
-- attach_grad, backward, detach and the .grad property. Python's `with`
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

local backward_names = {"head_grads", "retain_graph", "train_mode"}

-- The backward arguments after the heads: positional (head_grads,
-- retain_graph, train_mode) then a table of keywords, as MXNet's.
-- train_mode = false (backward in predict mode) is refused: the tape keeps
-- each op's mode from the forward pass.
local function backward_args(fname, ...)
  local a = core.args(fname, backward_names, backward_names, ...)
  local retain = flag(a.retain_graph, fname, "retain_graph", false)
  if flag(a.train_mode, fname, "train_mode", true) == false then
    core.error(("%s: train_mode = false is not supported: gradients follow the mode each op " ..
                "ran in during the forward pass (autograd.record's train_mode)"):format(fname))
  end
  return a.head_grads, retain
end

-- backward(heads, head_grads, retain_graph), or backward(heads, {head_grads
-- =, retain_graph =}): heads is an array or a list.
function autograd.backward(hs, ...)
  local hgs, retain_graph = backward_args("backward", ...)
  if core.is_array(hs) then hs = {hs} end
  if core.is_array(hgs) then hgs = {hgs} end
  if type(hgs) ~= "nil" and type(hgs) ~= "table" then -- (a NULL cdata equals nil)
    core.error(("backward: head_grads must be an array or a list of arrays, got %s"):format(core.show_value(hgs)))
  end
  if type(hs) ~= "table" or #hs == 0 or #hs > 64 then
    core.error("backward: expected an array or a list of 1 to 64 arrays")
  end
  for k = 1, #hs do
    if not core.is_array(hs[k]) then core.error(("backward: head %d is not an ndarray"):format(k)) end
    heads[k - 1] = hs[k].t
    if hgs and type(hgs[k]) ~= "nil" and not core.is_array(hgs[k]) then
      core.error(("backward: head gradient %d must be an array, got %s"):format(k, core.show_value(hgs[k])))
    end
    if hgs and hgs[k] ~= nil and tostring(hgs[k].device) ~= tostring(hs[k].device) then
      core.error(("backward: head gradient %d is on %s but its head is on %s; copy it there with as_in_context")
                 :format(k, tostring(hgs[k].device), tostring(hs[k].device)))
    end
    head_grads[k - 1] = hgs and hgs[k] and hgs[k].t or nil
  end
  core.check(C.luon_autograd_backward(#hs, heads, hgs and head_grads or nil, retain_graph and 1 or 0))
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
