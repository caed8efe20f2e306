-- luon.gluon.replicas: running the replicas' forwards together (what
-- gluon.utils.parallel_forward exposes). Each replica's forward runs in its
-- own coroutine; a layer that needs all replicas at once (SyncBatchNorm)
-- calls meet, which waits until every replica has reached it. Not public.
local core = require("luon.core")
local C = core.C

local replicas = {}

local running = nil -- the run in progress: {n = replicas}, nil outside one

local function pack(...) return {n = select("#", ...), ...} end

-- The autograd flags are each replica's own: a replica that enters or leaves
-- a record() scope between two meetings must not change the others'.
local function flags() return {C.luon_autograd_is_recording(), C.luon_autograd_is_training()} end
local function set_flags(f)
  C.luon_autograd_set_recording(f[1])
  C.luon_autograd_set_training(f[2])
end

-- The number of replicas of the run in progress (nil outside one).
function replicas.count() return running and running.n end

-- meet(key, x, compute, what): inside a run, wait until every replica has
-- reached the same key; compute({x1, ..., xn}) -> {y1, ..., yn} then runs
-- once and each replica gets its y. `what` names the meeting point in errors.
function replicas.meet(key, x, compute, what)
  if not running then core.error(("%s: not inside gluon.utils.parallel_forward"):format(what)) end
  return coroutine.yield({key = key, x = x, compute = compute, what = what})
end

-- run(fn, args): fn(unpack(args[i])) for the replicas i = 1..#args, each in
-- a coroutine, meeting where they call meet; returns the list of each
-- replica's results (packed: {n = count, ...}).
function replicas.run(fn, args)
  local n = #args
  local outer = flags()
  local cos, state, results, waits = {}, {}, {}, {}
  for i = 1, n do
    cos[i] = coroutine.create(function(...) return pack(fn(...)) end)
    state[i] = outer
  end
  local prev = running
  running = {n = n}
  -- resume replica i with its own flags; a finished one leaves its results,
  -- a waiting one its request
  local function resume(i, ...)
    set_flags(state[i])
    local ok, r = coroutine.resume(cos[i], ...)
    state[i] = flags()
    set_flags(outer)
    if not ok then error(r, 0) end -- the replica's error, already placed at its line
    if coroutine.status(cos[i]) == "dead" then results[i] = r else waits[i] = r end
  end
  local ok, err = pcall(function()
    for i = 1, n do resume(i, unpack(args[i])) end
    while next(waits) do
      local first = waits[1] or waits[next(waits)]
      local xs = {}
      for i = 1, n do
        local w = waits[i]
        if not w then
          core.error(("parallel_forward: replica %d finished while another waits at %s: every replica must " ..
                      "run the same layers"):format(i, first.what))
        elseif w.key ~= first.key then
          core.error(("parallel_forward: replica %d waits at %s while another waits at %s: every replica " ..
                      "must run the same layers in the same order"):format(i, w.what, first.what))
        end
        xs[i] = w.x
      end
      waits = {}
      set_flags(state[1])
      local ys = first.compute(xs)
      set_flags(outer)
      for i = 1, n do resume(i, ys[i]) end
    end
  end)
  running = prev
  set_flags(outer)
  if not ok then error(err, 0) end
  return results
end

return replicas
