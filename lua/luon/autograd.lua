-- luon.autograd: recording scopes over the C tape, and the ndarray methods
-- attach_grad, backward, detach and the .grad property. Python's `with`
-- blocks become functions: autograd.record(function() ... end) returns what
-- the function returns.
local core = require("luon.core")
local arr = require("luon.ndarray")
local ffi, C = core.ffi, core.C

local autograd = {}

local function scoped(recording, training, fn, ...)
  if type(fn) ~= "function" then error("autograd: expected a function to run", 3) end
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

-- record(fn, train_mode = true): ops in fn are recorded for backward.
function autograd.record(fn, train_mode, ...)
  if train_mode == nil then train_mode = true end
  return scoped(true, train_mode, fn, ...)
end
-- pause(fn, train_mode = false): ops in fn are not recorded.
function autograd.pause(fn, train_mode, ...)
  return scoped(false, train_mode or false, fn, ...)
end
function autograd.train_mode(fn, ...) return scoped(nil, true, fn, ...) end
function autograd.predict_mode(fn, ...) return scoped(nil, false, fn, ...) end
function autograd.is_recording() return C.luon_autograd_is_recording() ~= 0 end
function autograd.is_training() return C.luon_autograd_is_training() ~= 0 end
function autograd.set_recording(on) return C.luon_autograd_set_recording(on and 1 or 0) ~= 0 end
function autograd.set_training(on) return C.luon_autograd_set_training(on and 1 or 0) ~= 0 end

local grad_reqs = {null = 0, write = 1, add = 2}
autograd.grad_reqs = grad_reqs

local heads = ffi.new("luon_tensor*[64]")
local head_grads = ffi.new("luon_tensor*[64]")

-- backward(heads, head_grads, retain_graph): heads is an array or a list.
function autograd.backward(hs, hgs, retain_graph)
  if core.is_array(hs) then hs = {hs} end
  if hgs ~= nil and core.is_array(hgs) then hgs = {hgs} end
  if hgs ~= nil and type(hgs) ~= "table" then
    core.error(("backward: head_grads must be an array or a list of arrays, got %s"):format(core.show_value(hgs)))
  end
  if type(hs) ~= "table" or #hs == 0 or #hs > 64 then
    error("backward: expected an array or a list of 1 to 64 arrays", 2)
  end
  for k = 1, #hs do
    if not core.is_array(hs[k]) then error(("backward: head %d is not an ndarray"):format(k), 2) end
    heads[k - 1] = hs[k].t
    if hgs and hgs[k] ~= nil and not core.is_array(hgs[k]) then
      core.error(("backward: head gradient %d must be an array, got %s"):format(k, core.show_value(hgs[k])))
    end
    if hgs and hgs[k] ~= nil and tostring(hgs[k].device) ~= tostring(hs[k].device) then
      core.error(("backward: head gradient %d is on %s but its head is on %s; copy it there with as_in_context")
                 :format(k, tostring(hgs[k].device), tostring(hs[k].device)))
    end
    head_grads[k - 1] = hgs and hgs[k] and hgs[k].t or nil
  end
  core.check(C.luon_autograd_backward(#hs, heads, hgs and head_grads or nil, retain_graph and 1 or 0), 2)
end

local methods, props = arr.methods, arr.props

function methods.attach_grad(x, grad_req)
  local req = grad_reqs[grad_req or "write"]
  if not req then
    error(("attach_grad: grad_req must be 'write', 'add' or 'null', got %s"):format(tostring(grad_req)), 2)
  end
  core.check(C.luon_tensor_attach_grad(x.t, req), 2)
end

function methods.backward(y, head_grad, retain_graph)
  if type(head_grad) == "boolean" then head_grad, retain_graph = nil, head_grad end
  autograd.backward({y}, head_grad and {head_grad} or nil, retain_graph)
end

function methods.detach(x)
  local out = ffi.new("luon_tensor*[1]")
  core.check(C.luon_tensor_detach(x.t, out), 2)
  return core.wrap(out[0])
end

local grad_out = ffi.new("luon_tensor*[1]")
function props.grad(x)
  core.check(C.luon_tensor_grad(x.t, grad_out), 2)
  if grad_out[0] == nil then return nil end
  return core.wrap(grad_out[0])
end

function props.grad_req(x)
  local r = C.luon_tensor_grad_req(x.t)
  return r == 2 and "add" or r == 1 and "write" or "null"
end

return core.strict_module(autograd, "autograd")
