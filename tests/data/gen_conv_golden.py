"""Generates tests/data/conv_golden.txt with MXNet 1.9.1 (python 3.8:
/work/venv-mx/bin/python tests/data/gen_conv_golden.py): the outputs and
reprs of gluon.nn's 1-d, 3-d and transposed convolutions and 1-d and 3-d
pooling layers on small fixed inputs. tests/lua/conv_layers_spec.lua reads
it and never needs MXNet.

Each case:
  case <class name>
  args <the layer's keyword arguments, as a Lua table literal>
  repr <MXNet's repr of the layer after its forward>
  input <the input's shape>
  output <the output's shape>
  <the output's values, row-major, %.9g>
Weights and inputs (float32) by formula over the flat index i:
weight 0.5*sin(0.37*i + 0.3), bias 0.1*cos(0.7*i + 0.2), input sin(1.3*i).
"""
import os
import numpy as onp
import mxnet as mx
from mxnet import np, npx
from mxnet.gluon import nn

npx.set_np()
HERE = os.path.dirname(os.path.abspath(__file__))

CASES = [
    ("Conv1D", dict(channels=3, kernel_size=3, in_channels=2), (2, 2, 7)),
    ("Conv1D", dict(channels=4, kernel_size=3, strides=2, padding=1, dilation=2, groups=2, use_bias=False,
                    in_channels=2), (1, 2, 9)),
    ("Conv1D", dict(channels=2, kernel_size=2, activation="relu"), (1, 3, 5)),
    ("Conv3D", dict(channels=2, kernel_size=(2, 3, 2), in_channels=2), (1, 2, 3, 4, 3)),
    ("Conv3D", dict(channels=4, kernel_size=2, strides=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2,
                    activation="relu"), (1, 2, 4, 5, 4)),
    ("Conv2DTranspose", dict(channels=3, kernel_size=3, in_channels=2), (1, 2, 3, 4)),
    ("Conv2DTranspose", dict(channels=4, kernel_size=(3, 2), strides=(2, 3), padding=(1, 0), output_padding=(1, 2),
                             dilation=(1, 2), groups=2, in_channels=2), (1, 2, 3, 3)),
    ("Conv1DTranspose", dict(channels=2, kernel_size=3, strides=2, padding=1, output_padding=1, in_channels=3),
     (2, 3, 4)),
    ("Conv1DTranspose", dict(channels=4, kernel_size=2, dilation=2, groups=2, use_bias=False, activation="relu"),
     (1, 2, 5)),
    ("Conv3DTranspose", dict(channels=2, kernel_size=2, strides=2, output_padding=1, in_channels=2),
     (1, 2, 2, 3, 2)),
    ("Conv3DTranspose", dict(channels=2, kernel_size=(2, 1, 3), strides=(1, 2, 1), padding=(1, 0, 1), groups=2),
     (1, 2, 3, 2, 3)),
    ("MaxPool1D", dict(), (1, 2, 7)),
    ("MaxPool1D", dict(pool_size=3, strides=2, padding=1, ceil_mode=True), (1, 2, 8)),
    ("AvgPool1D", dict(pool_size=3, strides=2, padding=1, ceil_mode=True, count_include_pad=False), (1, 2, 8)),
    ("AvgPool1D", dict(pool_size=3, strides=1, padding=1), (2, 1, 5)),
    ("MaxPool3D", dict(), (1, 2, 4, 5, 4)),
    ("MaxPool3D", dict(pool_size=(3, 2, 2), strides=(2, 1, 2), padding=(1, 0, 1), ceil_mode=True), (1, 2, 5, 4, 4)),
    ("AvgPool3D", dict(pool_size=(2, 2, 3), strides=1, padding=(1, 1, 0)), (1, 2, 3, 3, 4)),
    ("AvgPool3D", dict(pool_size=3, strides=2, padding=1, ceil_mode=True, count_include_pad=False), (1, 2, 5, 5, 4)),
    ("GlobalMaxPool1D", dict(), (2, 3, 5)),
    ("GlobalAvgPool1D", dict(), (2, 3, 5)),
    ("GlobalMaxPool3D", dict(), (1, 3, 2, 3, 2)),
    ("GlobalAvgPool3D", dict(), (1, 3, 2, 3, 2)),
]


def fill(shape, f):
    n = int(onp.prod(shape))
    return onp.array([f(i) for i in range(n)], dtype=onp.float64).astype(onp.float32).reshape(shape)


def lua(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, tuple):
        return "{" + ", ".join(lua(x) for x in v) + "}"
    return repr(v)


def main():
    out = []
    for name, kw, shape in CASES:
        layer = getattr(nn, name)(**kw)
        layer.initialize()
        x = np.array(fill(shape, lambda i: onp.sin(1.3 * i)))
        layer(x)  # deferred shapes
        for pname, p in sorted(layer.collect_params().items()):
            if pname.endswith("weight"):
                p.set_data(np.array(fill(p.shape, lambda i: 0.5 * onp.sin(0.37 * i + 0.3))))
            elif pname.endswith("bias"):
                p.set_data(np.array(fill(p.shape, lambda i: 0.1 * onp.cos(0.7 * i + 0.2))))
        y = layer(x).asnumpy()
        out.append("case " + name)
        out.append("args {" + ", ".join("%s = %s" % (k, lua(v)) for k, v in kw.items()) + "}")
        out.append("repr " + repr(layer))
        out.append("input " + " ".join(str(s) for s in shape))
        out.append("output " + " ".join(str(s) for s in y.shape))
        out.append(" ".join("%.9g" % v for v in y.reshape(-1)))
    with open(os.path.join(HERE, "conv_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
