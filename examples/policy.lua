-- policy.lua: the control policy of examples/robot_host.c, a small MLP
-- (16 -> Dense 64 relu -> Dense 64 relu -> Dense 4 tanh) written with
-- luon.gluon.nn. It imitates a PD controller on 4 joints; the observation
-- is, per joint j, obs[4j..4j+3] = (target - position, velocity, target,
-- previous action), and the teacher's action is tanh(2 (target - position)
-- - 0.5 velocity). Not a real robot's policy: a realistic shape and size.
--
--   build/luon examples/policy.lua --train PATH   train briefly, save PATH (safetensors),
--                                                 and export the graph of one tick beside it
--                                                 (PATH without .safetensors: -symbol.json and
--                                                 -0000.safetensors), which a C host runs with
--                                                 luon_model_load/luon_model_run and no Lua
--   luon_rt_dofile(rt, "policy.lua")             a host: defines the global `policy`,
--   policy.load(PATH); policy.act(obs)           then loads parameters and acts each tick
local luon = require("luon")
local np, nn, gluon, autograd = luon.np, luon.gluon.nn, luon.gluon, luon.autograd

local M = {obs_size = 16, act_size = 4}

local net = nn.HybridSequential()
net:add(nn.Dense(64, {activation = "relu", in_units = 16}),
        nn.Dense(64, {activation = "relu", in_units = 64}),
        nn.Dense(4, {activation = "tanh", in_units = 64}))
net:initialize()
M.net = net

-- Loaded, the network is hybridized: a tick replays one graph from C, its
-- buffers planned once (about 1.5x the plain-C forward pass a tick here,
-- 2.7 us against its 1.8; eager, 10 us).
function M.load(path)
  net:load_parameters(path)
  net:hybridize{static_alloc = true}
end

-- One tick: obs, a (16,) float32 array over the host's buffer -> action (4,).
local batch_of_one, action_shape = {1, 16}, {4}
-- The (1, 16) view of the last obs is kept: a C host passes the same array
-- over its buffer each tick (luon_rt_call caches it), so a tick makes one
-- view, the output's, not two.
local last_obs, last_view
function M.act(obs)
  if not rawequal(obs, last_obs) then last_obs, last_view = obs, obs:reshape(batch_of_one) end
  return net(last_view):reshape(action_shape)
end

-- The teacher on a batch (N,16) -> (N,4).
function M.teacher(obs)
  local n = obs.shape[1]
  local j = obs:reshape({n, 4, 4})
  local err = j:slice(true, true, {0, 1}):reshape({n, 4})
  local vel = j:slice(true, true, {1, 2}):reshape({n, 4})
  return np.tanh(err * 2 - vel * 0.5)
end

-- Fit the teacher on random observations with Adam; returns the last loss.
function M.train(steps, batch)
  np.random.seed(7)
  local trainer = gluon.Trainer(net:collect_params(), "adam", {learning_rate = 3e-3})
  local l2 = gluon.loss.L2Loss()
  local loss
  for _ = 1, steps do
    local x = np.random.uniform(-1, 1, {size = {batch, 16}})
    local y = M.teacher(x)
    loss = autograd.record(function() return l2(net(x), y) end)
    loss:backward()
    trainer:step(batch)
  end
  return loss:mean():item()
end

policy = M -- the global a host calls: luon_rt_call(rt, "policy.act", ...)

if arg and arg[1] == "--train" and arg[2] then
  local t0 = luon.clock()
  local final = M.train(tonumber(arg[3]) or 600, 128)
  net:save_parameters(arg[2])
  net:hybridize()
  net(np.zeros(batch_of_one))
  local sym = net:export((arg[2]:gsub("%.safetensors$", "")))
  print(("policy: trained %d steps in %.2f s, final L2 loss %.5f, saved %s, exported %s")
        :format(tonumber(arg[3]) or 600, luon.clock() - t0, final, arg[2], sym))
end

return M
