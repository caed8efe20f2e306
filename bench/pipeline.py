# Peer of bench/pipeline.lua: torchvision's ImageFolder (PIL loader) and
# DataLoader(batch_size=32, shuffle=True, num_workers=N) with the same
# transform. Prints "torch-wN <images/s> <CPU ms per image>": 1 warm-up
# epoch, median of 4 timed epochs; CPU time of this process and its reaped
# workers (re-forked each epoch, as the default persistent_workers=False).
import resource, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T

root = sys.argv[1] if len(sys.argv) > 1 else "build/bench-jpegs"
workers = [int(w) for w in sys.argv[2:]] or [2]
tf = T.Compose([T.Resize(224), T.CenterCrop(128), T.RandomHorizontalFlip(), T.ColorJitter(contrast=0.05),
                T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = datasets.ImageFolder(root + "/train", transform=tf)

def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

for nw in workers:
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=nw)
    rates, cpus = [], []
    for epoch in range(5):
        t0, c0, n = time.perf_counter(), cpu(), 0
        for x, y in loader:
            n += x.shape[0]
        t1, c1 = time.perf_counter(), cpu()
        if epoch > 0:
            rates.append(n / (t1 - t0))
            cpus.append((c1 - c0) / n * 1e3)
    rates.sort(); cpus.sort()
    print("torch-w%d %.0f %.3f" % (nw, (rates[1] + rates[2]) / 2, (cpus[1] + cpus[2]) / 2))
