# The tutorial's LeafNetwork in PyTorch, the one definition of it for the
# peers (bench/leafnet.py's training step, bench/latency_peers.py's batch-1
# inference): examples/leafnet.lua's layers, NCHW.
import torch.nn as nn

def conv_block(cin, f):
    return [nn.Conv2d(cin, f, 2), nn.ReLU(), nn.MaxPool2d(4, 2), nn.BatchNorm2d(f)]

def leafnet():
    return nn.Sequential(*conv_block(3, 32), *conv_block(32, 64), *conv_block(64, 128), nn.Flatten(),
                         nn.Linear(21632, 100), nn.ReLU(), nn.Dropout(0.2),
                         nn.Linear(100, 10), nn.ReLU(), nn.Dropout(0.2), nn.Linear(10, 2))
