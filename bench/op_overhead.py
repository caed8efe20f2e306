# Peer of bench/op_overhead.lua: torch `a + b` with a new output each time.
import time, torch
torch.set_num_threads(2)
for n in (1, 1000):
    a, b = torch.ones(n), torch.ones(n)
    def sample(iters):
        t0 = time.perf_counter()
        for _ in range(iters):
            c = a + b
        return (time.perf_counter() - t0) / iters * 1e6
    sample(20000)
    s = sorted(sample(20000) for _ in range(9))
    print("torch %d %.3f" % (n, s[4]))
