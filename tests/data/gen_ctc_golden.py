"""Generates tests/data/ctc_golden.txt, MXNet 1.9.1's CTC loss values and
gradients for tests/lua/ctc_spec.lua (which reads the file and never needs
MXNet): /work/venv-mx/bin/python tests/data/gen_ctc_golden.py

Activations (float32, MXNet's CTCLoss takes no float64): x[i] =
round(2 sin(0.37 i + 0.1), 3) over the flat index i of shape (T, N, C)
(the op's layout; the Gluon cases read it as NTC, (N, T, C)). The head
gradient of the loss is h[n] = 0.5 + n. Each case is two blocks:
"<case> loss <N>" then its values, "<case> grad <T> <N> <C>" then
d(sum(h * loss))/dx row-major (left out for a case with a sample that
cannot fit: MXNet's gradient there is uninitialised memory). Labels and
label lengths are rounded (float_rounding); data lengths are whole numbers
(MXNet rounds 3.6 to 4 steps for the loss but zeroes the gradient from
step 3: luon refuses a fraction)."""
import math
import os
import numpy as onp
import mxnet as mx
from mxnet import nd, autograd
from mxnet.gluon import loss as gl

HERE = os.path.dirname(os.path.abspath(__file__))


def acts(shape):
    n = int(onp.prod(shape))
    return nd.array([round(2 * math.sin(0.37 * i + 0.1), 3) for i in range(n)]).reshape(shape)


def op_case(shape, label, dl=None, ll=None, blank='first'):
    def f(x):
        args = [x, nd.array(label)]
        if dl is not None: args.append(nd.array(dl))
        if ll is not None: args.append(nd.array(ll))
        return nd.CTCLoss(*args, use_data_lengths=dl is not None, use_label_lengths=ll is not None,
                          blank_label=blank)
    return shape, f


def gluon_case(shape, label, pl=None, ll=None, **kw):
    def f(x):
        L = gl.CTCLoss(**kw)
        return L(x, nd.array(label), None if pl is None else nd.array(pl), None if ll is None else nd.array(ll))
    return shape, f


# the label arrays, lengths and options are repeated in tests/lua/ctc_spec.lua
cases = [
    ("first_padded", op_case((5, 3, 4), [[1, 2, 0], [3, 3, 0], [1, 1, 2]])),
    ("last_padded_empty", op_case((4, 3, 5), [[0, 3, -1], [-1, -1, -1], [2, 1, 2]], blank='last')),
    ("lengths", op_case((4, 3, 5), [[1, 2, 3, 4], [2, 2, 1, 0], [4, 4, 0, 0]], dl=[4, 4, 2], ll=[4, 3, 1])),
    ("label_is_T", op_case((3, 2, 3), [[1, 2, 1], [2, 1, 2]])),
    ("float_rounding", op_case((4, 2, 4), [[1.4, 2.6, 0.3], [3, 0, 0]], dl=[3, 4], ll=[1.5, 1.2])),
    ("cannot_fit", op_case((4, 3, 4), [[1, 1, 0], [2, 3, 0], [3, 3, 3]], dl=[2, 4, 4])),
    ("gluon_ntc", gluon_case((2, 5, 4), [[0, 1, -1], [2, 2, 1]])),
    ("gluon_tnc_tn_lengths", gluon_case((5, 3, 4), [[0, 2, 1], [1, 2, -1], [1, 0, 0]], pl=[5, 4, 3],
                                         ll=[2, 2, 1], layout='TNC', label_layout='TN', weight=0.5)),
]

lines = []
for name, (shape, f) in cases:
    x = acts(shape)
    x.attach_grad()
    with autograd.record():
        loss = f(x)
    n = loss.shape[0]
    loss.backward(nd.array([0.5 + k for k in range(n)]))
    lines.append("%s loss %d" % (name, n))
    lines.append(" ".join(repr(float(v)) for v in loss.asnumpy()))
    if name != "cannot_fit":
        lines.append("%s grad %s" % (name, " ".join(str(d) for d in shape)))
        lines.append(" ".join(repr(float(v)) for v in x.grad.asnumpy().ravel()))

with open(os.path.join(HERE, "ctc_golden.txt"), "w") as fh:
    fh.write("\n".join(lines) + "\n")
