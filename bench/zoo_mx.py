"""The MXNet 1.9.1 peer of bench/zoo.lua: gluon.model_zoo's resnet18_v1,
hybridized with static_alloc and static_shape, on the CPU: a training step at
batch 32 and inference at batch 1 on 224x224 images. Prints
"mxnet train 32 <samples/s> <ms>" and "mxnet infer 1 <samples/s> <ms>".
Run with MXNet's venv python (OMP_NUM_THREADS=2)."""
import sys, time
import mxnet as mx
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

train_b = int(sys.argv[1]) if len(sys.argv) > 1 else 32
infer_b = int(sys.argv[2]) if len(sys.argv) > 2 else 1
mx.random.seed(0)
net = vision.resnet18_v1()
net.initialize(mx.init.Xavier())
net.hybridize(static_alloc=True, static_shape=True)

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

loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.001})
x = mx.nd.random.uniform(0, 1, (train_b, 3, 224, 224))
y = mx.nd.random.randint(0, 1000, (train_b,)).astype("float32")
def step():
    with autograd.record():
        l = loss_fn(net(x), y)
    l.backward()
    trainer.step(train_b)
    l.wait_to_read()
med = median(step, 2, 5)
print("mxnet train %d %.2f %.1f" % (train_b, train_b / med, med * 1e3))

x1 = mx.nd.random.uniform(0, 1, (infer_b, 3, 224, 224))
def infer():
    net(x1).wait_to_read()
med = median(infer, 5, 21)
print("mxnet infer %d %.2f %.2f" % (infer_b, infer_b / med, med * 1e3))
