# Peer of bench/lstm.lua: torch.nn.LSTM (2 layers, hidden 256, input 256,
# sequence 50, batch 32) one training step: forward, MSE loss, backward, SGD.
# Prints "torch lstm <ms best> <ms median>".
import sys, time, torch
torch.set_num_threads(2)
torch.manual_seed(0)
T, N, I, H, L = 50, 32, 256, 256, 2
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 9
net = torch.nn.LSTM(I, H, L)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.rand(T, N, I) * 2 - 1
target = torch.rand(T, N, H) * 2 - 1


def step():
    opt.zero_grad()
    y, _ = net(x)
    loss = ((y - target) ** 2).mean() / 2
    loss.backward()
    opt.step()


for _ in range(2):
    step()
ts = []
for _ in range(steps):
    t0 = time.perf_counter()
    step()
    ts.append(time.perf_counter() - t0)
ts.sort()
print("torch lstm %.1f %.1f" % (ts[0] * 1e3, ts[(steps - 1) // 2] * 1e3))
