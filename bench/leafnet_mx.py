# MXNet 1.9.1 peer of bench/leafnet.lua --hybridize: the tutorial's
# LeafNetwork (examples/leafnet.lua's layers) as a Gluon HybridSequential,
# hybridized with static_alloc and static_shape, one training step (forward,
# softmax cross-entropy, backward, SGD) on the CPU. Run with OMP_NUM_THREADS=2
# (scripts/bench leafnet does). Prints "mxnet-hybrid <batch> <samples/s>
# <ms/step>" per batch size, the median step, each waited for (wait_to_read).
import sys, time
import mxnet as mx
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

def conv_block(f):
    b = nn.HybridSequential()
    b.add(nn.Conv2D(f, 2, activation="relu"), nn.MaxPool2D(4, 2), nn.BatchNorm())
    return b

def dense_block(n):
    b = nn.HybridSequential()
    b.add(nn.Dense(n, activation="relu"), nn.Dropout(0.2))
    return b

def leafnet():
    net = nn.HybridSequential()
    net.add(conv_block(32), conv_block(64), conv_block(128), nn.Flatten(), dense_block(100), dense_block(10),
            nn.Dense(2))
    return net

batches = [int(a) for a in sys.argv[1:] if a.isdigit()] or [4, 32, 128]
mx.random.seed(0)
for b in batches:
    net = leafnet()
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    x = nd.random.uniform(0, 1, (b, 3, 128, 128))
    y = nd.random.randint(0, 2, (b,)).astype("float32")
    lossf = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
    def step():
        with autograd.record():
            l = lossf(net(x), y)
        l.backward()
        trainer.step(b)
        l.wait_to_read()
    timed = 5 if b >= 128 else 9 if b >= 32 else 25
    for _ in range(3):
        step()
    t = []
    for _ in range(timed):
        t0 = time.perf_counter()
        step()
        t.append(time.perf_counter() - t0)
    t.sort()
    med = t[(timed + 1) // 2 - 1]
    print("mxnet-hybrid %d %.1f %.1f" % (b, b / med, med * 1e3))
