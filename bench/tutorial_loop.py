# Peer of `scripts/bench tutorial`: the tutorial's training loop end to end in
# PyTorch on the same ImageFolder tree: torchvision's ImageFolder with the
# tutorial's transforms, DataLoader(num_workers=2), the LeafNetwork, SGD
# (lr 0.01, momentum 0.9), one epoch at batch 32. Prints "torch <samples/s>".
import sys, time, torch, torch.nn as nn
from torchvision import datasets, transforms
torch.set_num_threads(2)
root = sys.argv[1]
tf = transforms.Compose([transforms.Resize(224), transforms.CenterCrop(128), transforms.RandomHorizontalFlip(),
                         transforms.ColorJitter(contrast=0.05), transforms.ToTensor(),
                         transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = datasets.ImageFolder(root + "/train", tf)
loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, drop_last=True)

def conv_block(cin, f):
    return [nn.Conv2d(cin, f, 2), nn.ReLU(), nn.MaxPool2d(4, 2), nn.BatchNorm2d(f)]
net = nn.Sequential(*conv_block(3, 32), *conv_block(32, 64), *conv_block(64, 128), nn.Flatten(),
                    nn.Linear(21632, 100), nn.ReLU(), nn.Dropout(0.2),
                    nn.Linear(100, 10), nn.ReLU(), nn.Dropout(0.2), nn.Linear(10, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
lossf = nn.CrossEntropyLoss()
t0, n = time.perf_counter(), 0
for x, y in loader:
    opt.zero_grad()
    l = lossf(net(x), y)
    l.backward()
    opt.step()
    n += x.shape[0]
print("torch %.1f" % (n / (time.perf_counter() - t0)))
