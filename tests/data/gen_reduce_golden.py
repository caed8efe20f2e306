"""Generates tests/data/reduce_golden.txt, the goldens of the np reductions
and scans built in lua/luon/np.lua (var, std, cumsum, cumprod, nansum,
nanprod, nanmean, average, any, all, count_nonzero, linalg.norm), with MXNet
1.9.1 (python 3.8: /work/venv-mx/bin/python tests/data/gen_reduce_golden.py).
The test suite (tests/lua/reduce_spec.lua) reads the file and never needs
MXNet. Where MXNet 1.9.1 lacks the function (cumprod, nansum, nanmean) the
value is NumPy's, marked so.

The inputs, all float64 of shape (3, 4) over the flat index i:
x[i] = round(4 sin(1.3 i + 0.2), 3); n = x with NaN at i = 1, 6, 7 and 10;
w[j] = 1 + j / 2 (4,) the weights of average.
Each case is two lines: "<label> <shape>" ("-" for a 0-d result), then its
values, row-major, as repr prints them.
"""
import os
import math
import numpy as onp
import mxnet as mx
from mxnet import np

HERE = os.path.dirname(os.path.abspath(__file__))

xs = [round(4 * math.sin(1.3 * i + 0.2), 3) for i in range(12)]
x = np.array(xs, dtype='float64').reshape(3, 4)
ns = list(xs)
for i in (1, 6, 7, 10):
    ns[i] = float('nan')
n = np.array(ns, dtype='float64').reshape(3, 4)
w = np.array([1 + j / 2 for j in range(4)], dtype='float64')
ox, on, ow = x.asnumpy(), n.asnumpy(), w.asnumpy()
inf = float('inf')

cases = [
    ("var", lambda: np.var(x)),
    ("var_axis0_ddof1", lambda: np.var(x, axis=0, ddof=1)),
    ("std_axis1_keepdims", lambda: np.std(x, axis=1, keepdims=True)),
    ("std_axes01_ddof2", lambda: np.std(x, axis=(0, 1), ddof=2)),
    ("cumsum", lambda: np.cumsum(x)),
    ("cumsum_axis0", lambda: np.cumsum(x, axis=0)),
    ("cumprod_axis1 numpy", lambda: onp.cumprod(ox, axis=1)),
    ("nansum_axis1 numpy", lambda: onp.nansum(on, axis=1)),
    ("nanprod_axis0", lambda: np.nanprod(n, axis=0)),
    ("nanmean numpy", lambda: onp.nanmean(on)),
    ("average_axis1_weights", lambda: np.average(x, axis=1, weights=w)),
    ("average", lambda: np.average(x)),
    ("any_axis0", lambda: np.any(x > 2, axis=0)),
    ("all_axis1", lambda: np.all(x > -3.5, axis=1)),
    ("count_nonzero_axis1", lambda: np.count_nonzero(x > 0, axis=1)),
    ("norm", lambda: np.linalg.norm(x)),
    ("norm_ord3_axis1", lambda: np.linalg.norm(x, ord=3, axis=1)),
    ("norm_ord0.5_axis0", lambda: np.linalg.norm(x, ord=0.5, axis=0)),
    ("norm_ord-1_axis1", lambda: np.linalg.norm(x, ord=-1, axis=1)),
    ("norm_ord1_matrix", lambda: np.linalg.norm(x, ord=1)),
    ("norm_ordinf_matrix", lambda: np.linalg.norm(x, ord=inf)),
    ("norm_ord-inf_matrix", lambda: np.linalg.norm(x, ord=-inf)),
    ("norm_ordinf_vector numpy", lambda: onp.linalg.norm(ox[1], ord=inf)),
    ("norm_ord2_matrix", lambda: np.linalg.norm(x, ord=2)),
    ("norm_ord-2_matrix", lambda: np.linalg.norm(x, ord=-2)),
    ("norm_ordnuc_matrix", lambda: np.linalg.norm(x, ord='nuc')),
    ("norm_ord2_axes10_keepdims", lambda: np.linalg.norm(x.reshape(3, 2, 2), ord=2, axis=(2, 0), keepdims=True)),
]

with open(os.path.join(HERE, "reduce_golden.txt"), "w") as f:
    for label, fn in cases:
        r = fn()
        r = r.asnumpy() if hasattr(r, "asnumpy") else onp.asarray(r)
        label = label.split()[0]
        f.write("%s %s\n" % (label, ",".join(str(d) for d in r.shape) or "-"))
        f.write(" ".join(repr(float(v)) for v in r.reshape(-1)) + "\n")
