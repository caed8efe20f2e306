"""Generates tests/data/elementwise_golden.lua, the values of np's elementwise
math on small inputs with their edge cases (domain errors, +-0, +-inf, NaN,
halves), with MXNet 1.9.1 (python 3.8: /work/venv-mx/bin/python
tests/data/gen_elementwise_golden.py). tests/lua/elementwise_spec.lua reads
the file on every device and never needs MXNet.

fmod and logical_and/or/xor are not in MXNet 1.9.1's mx.np: their values come
from NumPy (which MXNet 2 follows). Integer inputs of sin..rad2deg are left
out: MXNet computes them in the integer dtype (np.sin(int32) is int32, 0 for
1), luon in float32 (docs/reference.md).
"""
import math
import os
import numpy as onp
import mxnet as mx
from mxnet import np

HERE = os.path.dirname(os.path.abspath(__file__))
INF, NAN = float("inf"), float("nan")

X = [-2.5, -1.0, -0.5, -0.0, 0.0, 0.3, 0.5, 1.0, 1.5, 2.0, 10.0, INF, -INF, NAN]
XI = [-7, -5, -1, 0, 1, 2, 15, 25, 100]
FLOAT_UNARY = ("sin cos tan arcsin arccos arctan sinh cosh arcsinh arccosh arctanh log10 log1p "
               "expm1 cbrt deg2rad rad2deg degrees radians reciprocal floor ceil trunc rint fix round "
               "around isnan isinf isfinite isposinf isneginf logical_not").split()
INT_UNARY = "floor ceil trunc rint fix round reciprocal isnan isinf isfinite logical_not bitwise_not invert".split()
A = [5.0, -5.0, 5.0, -5.0, 0.0, -0.0, 1.0, -1.0, 3.5, INF, NAN, 2.0]
B = [3.0, 3.0, -3.0, -3.0, 2.0, 3.0, 0.0, INF, -1.5, 2.0, 1.0, -0.0]
AI = [5, -5, 5, -5, 0, 7, 6, -1]
BI = [3, 3, -3, -3, 2, 0, 4, -2]
# MXNet 1.9.1's np.deg2rad and np.rad2deg raise (no _npi kernel): their aliases
# values
MX_NAME = {"deg2rad": "radians", "rad2deg": "degrees"}
# MXNet's degrees and radians multiply float64 by a float32 pi/180 (7 digits
# right): their float64 values are NumPy's
F32_CONSTANT = {"deg2rad", "rad2deg", "degrees", "radians"}
FLOAT_BINARY = "arctan2 hypot copysign mod remainder".split()
INT_BINARY = "mod remainder copysign bitwise_and bitwise_or bitwise_xor".split()
NUMPY_BINARY = "fmod logical_and logical_or logical_xor".split()


def num(v):
    if isinstance(v, (bool, onp.bool_)):
        return "true" if v else "false"
    v = float(v)
    if math.isnan(v):
        return "0/0"
    if math.isinf(v):
        return "1/0" if v > 0 else "-1/0"
    if v == 0 and math.copysign(1, v) < 0:
        return "-0.0"
    return repr(v) if v != int(v) or abs(v) >= 1e16 else str(int(v))


def lst(a):
    return "{" + ", ".join(num(v) for v in onp.asarray(a).ravel().tolist()) + "}"


def entry(name, dtype, xs, out, ys=None, decimals=None):
    x = "x = " + lst(xs)
    y = ", y = " + lst(ys) if ys is not None else ""
    d = ", decimals = %d" % decimals if decimals is not None else ""
    return '  {op = "%s", dtype = "%s", %s%s%s, out = "%s", want = %s},' % (
        name, dtype, x, y, d, out.dtype, lst(out))


def main():
    lines = []
    for dt in ("float32", "float64"):
        x = onp.array(X, dtype=dt)
        for name in FLOAT_UNARY:
            if dt == "float64" and name in F32_CONSTANT:
                lines.append(entry(name, dt, x, getattr(onp, name)(x)))
                continue
            f = getattr(np, MX_NAME.get(name, name))
            lines.append(entry(name, dt, x, f(np.array(x, dtype=dt)).asnumpy()))
        for d in (1, 2, -1):
            lines.append(entry("round", dt, x * 1.37, np.round(np.array(x * 1.37, dtype=dt), d).asnumpy(),
                               decimals=d))
        a, b = onp.array(A, dtype=dt), onp.array(B, dtype=dt)
        for name in FLOAT_BINARY:
            r = getattr(np, name)(np.array(a, dtype=dt), np.array(b, dtype=dt)).asnumpy()
            lines.append(entry(name, dt, a, r, ys=b))
        with onp.errstate(all="ignore"):
            for name in NUMPY_BINARY:
                lines.append(entry(name, dt, a, getattr(onp, name)(a, b), ys=b))
    for dt in ("int32", "int64", "uint8"):
        xi = onp.array([v for v in XI if dt != "uint8" or v >= 0], dtype=dt)
        for name in INT_UNARY:
            lines.append(entry(name, dt, xi, getattr(np, name)(np.array(xi, dtype=dt)).asnumpy()))
        for d in (1, 2):
            lines.append(entry("round", dt, xi, np.round(np.array(xi, dtype=dt), d).asnumpy(), decimals=d))
        a = onp.array([v for v in AI if dt != "uint8" or v >= 0], dtype=dt)
        b = onp.array([abs(v) for v in BI][:len(a)] if dt == "uint8" else BI, dtype=dt)
        for name in INT_BINARY:
            lines.append(entry(name, dt, a, getattr(np, name)(np.array(a, dtype=dt), np.array(b, dtype=dt)).asnumpy(),
                               ys=b))
        with onp.errstate(all="ignore"):
            for name in NUMPY_BINARY:
                lines.append(entry(name, dt, a, getattr(onp, name)(a, b), ys=b))
    t, f = onp.array([True, True, False, False]), onp.array([True, False, True, False])
    for name in "bitwise_and bitwise_or bitwise_xor".split():
        lines.append(entry(name, "bool", t, getattr(np, name)(np.array(t), np.array(f)).asnumpy(), ys=f))
    for name in "logical_and logical_or logical_xor".split():
        lines.append(entry(name, "bool", t, getattr(onp, name)(t, f), ys=f))
    for name in "bitwise_not invert logical_not isnan isinf isfinite".split():
        lines.append(entry(name, "bool", f, getattr(np, name)(np.array(f)).asnumpy()))
    with open(os.path.join(HERE, "elementwise_golden.lua"), "w") as fh:
        fh.write("-- generated by tests/data/gen_elementwise_golden.py with MXNet %s: do not edit\n" % mx.__version__)
        fh.write("-- {op, dtype of the inputs, x, y (binary), decimals (round), out = the result's dtype, want}\n")
        fh.write("return {\n" + "\n".join(lines) + "\n}\n")


main()
