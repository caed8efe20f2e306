# Peers of bench/latency.lua: the same batch-1 workloads in PyTorch (eager,
# no_grad, 2 threads) and in ONNX Runtime (2 intra-op threads, exported from
# the PyTorch modules with torch.onnx), each skipped when absent. Prints
# "<peer> <workload> <median us>" lines, the median of 9 samples. With
# --luon-onnx DIR, ONNX Runtime also runs the models luon exported there
# (bench/latency.lua --onnx DIR): "ort-luon <workload> <us> <max |diff|>",
# the difference from luon's own output on the same input.
#   python bench/latency_peers.py [--luon-onnx DIR] [mlp] [dense256] [leafnet]
import os, sys, tempfile, time
import torch, torch.nn as nn
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from leafnet_torch import leafnet

torch.set_num_threads(2)
try:
    import onnxruntime as ort
except ImportError:
    ort = None
    print("(ONNX Runtime skipped: this Python cannot import onnxruntime)", file=sys.stderr)

def mlp():
    return nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 2)), (1, 512)

workloads = {"mlp": mlp, "dense256": lambda: (nn.Linear(512, 256), (1, 512)),
             "leafnet": lambda: (leafnet(), (1, 3, 128, 128))}

def median_us(f):
    for _ in range(20):
        f()
    t0 = time.perf_counter()
    f()
    probe = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, int(0.02 / probe))
    s = []
    for _ in range(9):
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        s.append((time.perf_counter() - t0) / iters * 1e6)
    s.sort()
    return s[4]

args = sys.argv[1:]
luon_dir = None
if args[:1] == ["--luon-onnx"]:
    luon_dir, args = args[1], args[2:]

def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 2, 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

torch.manual_seed(0)
for name in args or ["mlp", "dense256", "leafnet"]:
    net, shape = workloads[name]()
    net.eval()
    x = torch.rand(*shape)
    with torch.no_grad():
        print("torch %s %.1f" % (name, median_us(lambda: net(x))), flush=True)
    if ort is None:
        continue
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name + ".onnx")
        torch.onnx.export(net, x, path, input_names=["x"], output_names=["y"], dynamo=False)
        sess = session(path)
        feed = {"x": x.numpy()}
        print("ort %s %.1f" % (name, median_us(lambda: sess.run(None, feed))), flush=True)
    base = luon_dir and os.path.join(luon_dir, name)
    if base and os.path.exists(base + ".onnx"):
        import numpy as np
        sess = session(base + ".onnx")
        feed = {sess.get_inputs()[0].name: np.load(base + ".x.npy")}
        diff = float(np.abs(sess.run(None, feed)[0] - np.load(base + ".y.npy")).max())
        print("ort-luon %s %.1f %.2g" % (name, median_us(lambda: sess.run(None, feed)), diff), flush=True)
