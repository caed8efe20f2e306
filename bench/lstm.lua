-- One training step of a 2-layer LSTM (hidden 256, input 256, sequence 50,
-- batch 32, layout TNC) on the CPU with 2 threads: forward, an L2 loss,
-- backward through time, SGD update. Prints "luon lstm <ms best> <ms median>"
-- over the timed steps after warm-up, each step timed to completion.
-- The peer is bench/lstm_torch.py (torch.nn.LSTM, the same step).
local luon = require("luon")
local np, npx, gluon, autograd = luon.np, luon.npx, luon.gluon, luon.autograd

local T, N, I, H, L = 50, 32, 256, 256, 2
local steps = tonumber(arg[1]) or 9
npx.set_num_threads(2)
np.random.seed(0)
local net = gluon.rnn.LSTM(H, L, {input_size = I})
net:initialize{init = luon.init.Uniform(1 / math.sqrt(H))}
local trainer = gluon.Trainer(net:collect_params(), "sgd", {learning_rate = 0.01})
local x = np.random.uniform(-1, 1, {T, N, I})
local target = np.random.uniform(-1, 1, {T, N, H})
local loss_fn = gluon.loss.L2Loss()
local function step()
  local l = autograd.record(function() return loss_fn(net(x), target) end)
  l:backward()
  trainer:step(N)
  l:wait_to_read()
end
for _ = 1, 2 do step() end
local t = {}
for i = 1, steps do
  local t0 = luon.clock()
  step()
  t[i] = luon.clock() - t0
end
table.sort(t)
print(("luon lstm %.1f %.1f"):format(t[1] * 1e3, t[math.floor((steps + 1) / 2)] * 1e3))
