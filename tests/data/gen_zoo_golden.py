"""Generates the model-zoo goldens under tests/data/ with MXNet 1.9.1
(python 3.8: /work/venv-mx/bin/python tests/data/gen_zoo_golden.py).
The test suite reads these files and never needs MXNet.

zoo_params.txt     every model's structural parameter names and shapes, as
                   MXNet's _collect_params_with_prefix gives them after one
                   forward on an input of the size noted per model
zoo_outputs.txt    outputs (2 x 10) of a few models with formula weights
mx_mobilenet0_25.params   save_parameters of mobilenet0.25 (classes=10)
                          with the formula weights (structural names)
mx_prefixed.params        a small net's collect_params().save (MXNet 1.x
                          global names: hybridsequential0_conv0_weight, ...)
mx_export.params          the same net's arrays as export writes them
                          (arg:/aux: prefixes)
mx_dtypes.params          mx.nd.save of arrays of several dtypes and shapes
mx_list.params            mx.nd.save of a list (no names)

The formula weights: parameters sorted by structural name, the k-th
(0-based) gets, over its flat index i, with s = sin(0.37*i + k):
weights of 2 or more dimensions 1.7/sqrt(fan_in)*s (fan_in: the size
over the first dimension), gamma and running_var 1 + 0.25*s, the others
(biases, beta, running_mean) 0.05*s. The input is
x[i] = sin(1.3*i) over the flat index of a (2, 3, S, S) array.
"""
import os
import numpy as np
import mxnet as mx
from mxnet.gluon.model_zoo import vision
from mxnet.gluon import nn

HERE = os.path.dirname(os.path.abspath(__file__))

# model name -> input side for the structure dump (small where the net allows)
STRUCT = [
    ("resnet18_v1", 32), ("resnet34_v1", 32), ("resnet50_v1", 32), ("resnet101_v1", 32), ("resnet152_v1", 32),
    ("resnet18_v2", 32), ("resnet34_v2", 32), ("resnet50_v2", 32), ("resnet101_v2", 32), ("resnet152_v2", 32),
    ("vgg11", 32), ("vgg13", 32), ("vgg16", 32), ("vgg19", 32),
    ("vgg11_bn", 32), ("vgg13_bn", 32), ("vgg16_bn", 32), ("vgg19_bn", 32),
    ("mobilenet1.0", 32), ("mobilenet0.75", 32), ("mobilenet0.5", 32), ("mobilenet0.25", 32),
    ("mobilenetv2_1.0", 32), ("mobilenetv2_0.75", 32), ("mobilenetv2_0.5", 32), ("mobilenetv2_0.25", 32),
    ("alexnet", 64), ("squeezenet1.0", 224), ("squeezenet1.1", 224),
    ("densenet121", 224), ("densenet161", 224), ("densenet169", 224), ("densenet201", 224),
    ("inceptionv3", 299),
]

OUTPUTS = [("resnet18_v1", 64), ("resnet18_v2", 64), ("mobilenet1.0", 64), ("vgg11", 32),
           ("mobilenetv2_0.25", 64), ("squeezenet1.1", 224), ("densenet121", 224), ("alexnet", 64),
           ("inceptionv3", 299), ("resnet50_v1", 64), ("mobilenet0.25", 64)]


def formula(name, k, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    s = np.sin(0.37 * np.arange(n, dtype=np.float64) + k)
    if name.endswith("gamma") or name.endswith("running_var"):
        v = 1 + 0.25 * s
    elif name.endswith("weight") and len(shape) >= 2:
        v = 1.7 / np.sqrt(n // shape[0]) * s
    else:
        v = 0.05 * s
    return v.astype(np.float32).reshape(shape)


def input_of(side):
    n = 2 * 3 * side * side
    return mx.nd.array(np.sin(1.3 * np.arange(n, dtype=np.float64)).astype(np.float32).reshape(2, 3, side, side))


def set_formula(net):
    params = net._collect_params_with_prefix()
    for k, name in enumerate(sorted(params)):
        p = params[name]
        p.set_data(mx.nd.array(formula(name, k, p.shape)))


def structure(f):
    for name, side in STRUCT:
        net = vision.get_model(name, classes=10)
        net.initialize()
        net(mx.nd.zeros((1, 3, side, side)))
        params = net._collect_params_with_prefix()
        f.write("model %s %d %d\n" % (name, side, len(params)))
        for k, v in params.items():
            f.write("%s %s\n" % (k, ",".join(str(d) for d in v.shape)))


def outputs(f):
    for name, side in OUTPUTS:
        net = vision.get_model(name, classes=10)
        net.initialize()
        net(mx.nd.zeros((1, 3, side, side)))
        set_formula(net)
        y = net(input_of(side)).asnumpy()
        f.write("model %s %d\n" % (name, side))
        for row in y:
            f.write(" ".join("%.9g" % v for v in row) + "\n")


def small_net():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, in_channels=3), nn.BatchNorm(in_channels=4), nn.Activation("relu"),
                nn.Dense(5, in_units=4 * 6 * 6))
    net.initialize()
    set_formula(net)
    return net


def main():
    import sys
    if "--outputs-only" not in sys.argv:
        with open(os.path.join(HERE, "zoo_params.txt"), "w") as f:
            structure(f)
    with open(os.path.join(HERE, "zoo_outputs.txt"), "w") as f:
        outputs(f)
    net = vision.get_model("mobilenet0.25", classes=10)
    net.initialize()
    net(mx.nd.zeros((1, 3, 64, 64)))
    set_formula(net)
    net.save_parameters(os.path.join(HERE, "mx_mobilenet0_25.params"))
    net = small_net()
    net.collect_params().save(os.path.join(HERE, "mx_prefixed.params"))
    args = {}
    for name, p in net.collect_params().items():
        tag = "aux" if name.endswith("running_mean") or name.endswith("running_var") else "arg"
        args["%s:%s" % (tag, name)] = p.data()
    mx.nd.save(os.path.join(HERE, "mx_export.params"), args)
    with open(os.path.join(HERE, "mx_small_output.txt"), "w") as f:
        y = net(input_of(8)).asnumpy()
        f.write(" ".join("%.9g" % v for v in y.reshape(-1)) + "\n")
    arrays = {
        "f32": mx.nd.array(np.arange(6, dtype=np.float32).reshape(2, 3) / 4, dtype="float32"),
        "f64": mx.nd.array(np.arange(4, dtype=np.float64) / 3, dtype="float64"),
        "f16": mx.nd.array(np.array([0.5, -2, 65504, 1e-3]), dtype="float16"),
        "i32": mx.nd.array([1, -2, 3], dtype="int32"),
        "i64": mx.nd.array([[2 ** 40, -5]], dtype="int64"),
        "u8": mx.nd.array([0, 7, 255], dtype="uint8"),
        "one": mx.nd.array([3.5]),
    }
    mx.nd.save(os.path.join(HERE, "mx_dtypes.params"), arrays)
    mx.nd.save(os.path.join(HERE, "mx_list.params"), [mx.nd.array([1, 2]), mx.nd.array([[3]])])


if __name__ == "__main__":
    main()
