"""The peer of bench/zoo.lua: torchvision's resnet18 on the CPU, a training
step (forward, cross-entropy, backward, SGD) at batch 32 and inference at
batch 1 on 224x224 images. Prints "<tag> train 32 <samples/s> <ms>" and
"<tag> infer 1 <samples/s> <ms>" (medians after warm-up).
Usage: zoo_torch.py [train_batch [infer_batch]] [--channels-last] [--tag T]"""
import sys, time
import torch, torchvision

args = [a for a in sys.argv[1:]]
channels_last = "--channels-last" in args
tag = "torch"
if "--tag" in args:
    tag = args[args.index("--tag") + 1]
    del args[args.index("--tag"):args.index("--tag") + 2]
args = [a for a in args if not a.startswith("--")]
train_b = int(args[0]) if args else 32
infer_b = int(args[1]) if len(args) > 1 else 1
torch.set_num_threads(2)
torch.manual_seed(0)
fmt = torch.channels_last if channels_last else torch.contiguous_format
net = torchvision.models.resnet18().to(memory_format=fmt)

def median(f, warm, timed):
    for _ in range(warm):
        f()
    t = []
    for _ in range(timed):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    t.sort()
    return t[(timed + 1) // 2 - 1]

opt = torch.optim.SGD(net.parameters(), lr=0.001)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.rand(train_b, 3, 224, 224).to(memory_format=fmt)
y = torch.randint(0, 1000, (train_b,))
net.train()
def step():
    opt.zero_grad()
    loss = loss_fn(net(x), y)
    loss.backward()
    opt.step()
med = median(step, 2, 5)
print("%s train %d %.2f %.1f" % (tag, train_b, train_b / med, med * 1e3))

net.eval()
x1 = torch.rand(infer_b, 3, 224, 224).to(memory_format=fmt)
def infer():
    with torch.no_grad():
        net(x1)
med = median(infer, 5, 21)
print("%s infer %d %.2f %.2f" % (tag, infer_b, infer_b / med, med * 1e3))
