"""Generates tests/data/layer_golden.txt with MXNet 1.9.1 (python 3.8:
/work/venv-mx/bin/python tests/data/gen_layer_golden.py): the outputs and
gradients of gluon.nn's normalisation, activation, Embedding and utility
layers, for tests/lua/gluon_layers2_spec.lua. The suite never needs MXNet.

Each case: the layer (built in the spec the same way), its input x of the
shape given, x[i] = 2 sin(1.3 i) over the flat index (Embedding: the
indices listed); its parameters, sorted by structural name, the k-th
(0-based) over its flat index i with s = sin(0.37 i + k): gamma
1 + 0.25 s, beta 0.05 s, alpha 0.25 + 0.1 s, others s. Recorded in
training mode, y.backward(c) with c[i] = cos(0.7 i) of y's shape.
Lines: "case NAME", "x SHAPE", "y VALUES", "dx VALUES" and "d PARAM VALUES"
per parameter with a gradient.
"""
import os
import numpy as np
import mxnet as mx
from mxnet import nd, autograd
from mxnet.gluon import nn
from mxnet.gluon.contrib import nn as cnn

HERE = os.path.dirname(os.path.abspath(__file__))


def formula(name, k, shape):
    i = np.arange(int(np.prod(shape)), dtype=np.float64)
    s = np.sin(0.37 * i + k)
    leaf = name.split('.')[-1]
    if leaf == 'gamma':
        v = 1 + 0.25 * s
    elif leaf == 'beta':
        v = 0.05 * s
    elif leaf == 'alpha':
        v = 0.25 + 0.1 * s
    else:
        v = s
    return v.reshape(shape)


def dense_chain():
    net = cnn.HybridConcurrent(axis=1)
    net.add(nn.Dense(3, in_units=4), cnn.Identity())
    return net


CASES = [
    ("layernorm", lambda: nn.LayerNorm(), (2, 3, 4)),
    ("layernorm_axis1", lambda: nn.LayerNorm(axis=1, epsilon=1e-3, center=False), (2, 3, 4)),
    ("groupnorm", lambda: nn.GroupNorm(num_groups=2), (2, 4, 3)),
    ("groupnorm_4d", lambda: nn.GroupNorm(num_groups=3, epsilon=1e-3, scale=False), (2, 3, 2, 2)),
    ("instancenorm", lambda: nn.InstanceNorm(), (2, 3, 4)),
    ("instancenorm_last", lambda: nn.InstanceNorm(axis=-1, scale=True), (2, 3, 4)),
    ("prelu", lambda: nn.PReLU(), (2, 3, 4)),
    ("prelu_channels", lambda: nn.PReLU(in_channels=3), (2, 3, 4)),
    ("elu", lambda: nn.ELU(), (2, 5)),
    ("elu_half", lambda: nn.ELU(alpha=0.5), (2, 5)),
    ("selu", lambda: nn.SELU(), (2, 5)),
    ("gelu", lambda: nn.GELU(), (2, 5)),
    ("swish", lambda: nn.Swish(beta=1.5), (2, 5)),
    ("batchnorm_sync", lambda: cnn.SyncBatchNorm(num_devices=1), (4, 3, 2)),
    ("concurrent", dense_chain, (2, 4)),
    ("embedding", lambda: nn.Embedding(5, 3), [[0, 4, 2], [7, -1, 1.6]]),
]


def fmt(a):
    return ' '.join('%.9g' % v for v in np.asarray(a, dtype=np.float64).ravel())


def main():
    out = []
    for name, make, shape in CASES:
        net = make()
        net.initialize()
        if name == 'embedding':
            x = nd.array(shape, dtype='float32')
            xshape = x.shape
        else:
            xshape = shape
            x = nd.array(2 * np.sin(1.3 * np.arange(int(np.prod(shape)))).reshape(shape), dtype='float32')
        net(x)  # deferred shapes
        params = net._collect_params_with_prefix()
        for k, pname in enumerate(sorted(params)):
            p = params[pname]
            p.set_data(nd.array(formula(pname, k, p.shape), dtype='float32'))
        if name != 'embedding':
            x.attach_grad()
        with autograd.record():
            y = net(x)
        c = nd.array(np.cos(0.7 * np.arange(y.size)).reshape(y.shape), dtype='float32')
        y.backward(c)
        out.append('case ' + name)
        out.append('x ' + ' '.join(str(d) for d in xshape))
        out.append('y ' + fmt(y.asnumpy()))
        if name != 'embedding':
            out.append('dx ' + fmt(x.grad.asnumpy()))
        for pname in sorted(params):
            p = params[pname]
            if p.grad_req != 'null':
                out.append('d %s %s' % (pname, fmt(p.grad().asnumpy())))
    with open(os.path.join(HERE, 'layer_golden.txt'), 'w') as f:
        f.write('\n'.join(out) + '\n')


if __name__ == '__main__':
    main()
