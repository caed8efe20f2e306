# bench/gpu_torch.py: the PyTorch peer of bench/gpu.lua on the same card,
# same shapes, TF32 off (luon's default), one line each
# "torch <name> <ms> <TFLOP/s>".
import time, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda:0")

def bench(fn):
    for _ in range(3): fn(); torch.cuda.synchronize()
    t = []
    for _ in range(20):
        t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); t.append(time.perf_counter() - t0)
    return sorted(t)[10]

n = 4096
a = torch.rand(n, n, device=dev) * 2 - 1
b = torch.rand(n, n, device=dev) * 2 - 1
s = bench(lambda: a @ b)
print("torch gemm_4096_f32 %.3f %.2f" % (s * 1e3, 2 * n ** 3 / s / 1e12))
x = torch.rand(64, 128, 56, 56, device=dev)
w = torch.rand(128, 128, 3, 3, device=dev)
s = bench(lambda: torch.nn.functional.conv2d(x, w, padding=1))
print("torch conv_64x128x56x56_k3 %.3f %.2f" % (s * 1e3, 2 * 64 * 128 * 56 * 56 * 128 * 9 / s / 1e12))
