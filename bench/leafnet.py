# Peer of bench/leafnet.lua: the same LeafNetwork step in PyTorch, on the CPU
# (2 threads) or, with --device cuda, on the first GPU (eager, as it comes:
# cuDNN's default algorithm choice, NCHW; strict fp32 unless --tf32). --channels-last uses the
# best-known CPU layout (perf_anchors.md). On a GPU each step ends with
# torch.cuda.synchronize() and the line goes on with "peak <MiB> MiB"
# (max_memory_allocated over the steps), as luon's does. --profile adds
# torch.profiler's table over as many steps.
import sys, time, torch, torch.nn as nn
from leafnet_torch import leafnet
torch.set_num_threads(2)
cl = "--channels-last" in sys.argv
tag = sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else "torch"
dev = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
gpu = dev == "cuda"
# strict fp32 unless --tf32 (PyTorch's cuDNN default): luon is strict unless LUON_CUDA_TF32=1
tf32 = "--tf32" in sys.argv
torch.backends.cudnn.allow_tf32 = tf32
torch.backends.cuda.matmul.allow_tf32 = tf32
batches = [int(a) for a in sys.argv[1:] if a.isdigit()] or [4, 32, 128]

torch.manual_seed(0)
for b in batches:
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    net = leafnet().to(dev)
    x = torch.rand(b, 3, 128, 128, device=dev)
    y = torch.randint(0, 2, (b,), device=dev)
    if cl:
        net = net.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.001)
    lossf = nn.CrossEntropyLoss()
    def step():
        opt.zero_grad()
        l = lossf(net(x), y)
        l.backward()
        opt.step()
        if gpu:
            torch.cuda.synchronize()
    timed = 5 if b >= 128 else 9 if b >= 32 else 25
    if gpu:
        timed *= 4
    for _ in range(3):
        step()
    t = []
    for _ in range(timed):
        t0 = time.perf_counter()
        step()
        t.append(time.perf_counter() - t0)
    t.sort()
    med = t[(timed + 1) // 2 - 1]
    line = "%s %d %.1f %.1f" % (tag, b, b / med, med * 1e3)
    if gpu:
        line += " peak %.1f MiB" % (torch.cuda.max_memory_allocated() / 2**20)
    print(line)
    if "--profile" in sys.argv:  # the same steps under torch.profiler, by device time
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(timed):
                step()
        print("profile batch %d over %d steps" % (b, timed))
        print(prof.key_averages().table(sort_by="cuda_time_total" if gpu else "cpu_time_total", row_limit=30))
    del net, x, y, opt
