"""Generates the dtype goldens under tests/data/ with MXNet 1.9.1 and NumPy
(python 3.8: /work/venv-mx/bin/python tests/data/gen_dtype_golden.py).
The test suite reads these files and never needs MXNet.

dtype_promotion.txt  one line per pair of luon dtypes: "a b result", the
                     dtype of a + b. Two integers (bool included): NumPy's
                     promote_types (MXNet 1.9.1 has no int16/uint16 arithmetic
                     and gives int8 + uint8 = int32 where NumPy gives int16).
                     A float involved: MXNet's result (a float beside an
                     integer wins: int32 + float32 = float32, where NumPy
                     gives float64); for int16 and uint16, which MXNet cannot
                     add, the same rule (the float). The script checks that
                     rule against MXNet for every integer dtype it has.
mx_int8.params       mx.nd.save of int8 arrays (and int16/uint16 where
                     MXNet 1.9.1 can make them): MXNet's type flags 5, 8, 9
"""
import os
import numpy as onp
import mxnet as mx
from mxnet import np as mnp

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool", "int8", "int16", "uint16"]
FLOATS = {"float32", "float64", "float16"}


def mx_add(a, b):
    try:
        return str((mnp.ones((2,), dtype=a) + mnp.ones((2,), dtype=b)).dtype)
    except Exception:
        return None


def promotion():
    lines = []
    for a in DTYPES:
        for b in DTYPES:
            if a not in FLOATS and b not in FLOATS:
                r = str(onp.promote_types(a, b))
            else:
                r = mx_add(a, b)
                rule = a if b not in FLOATS else b if a not in FLOATS else None
                if r is None:
                    assert rule is not None, (a, b)
                    r = rule
                elif rule is not None:
                    assert r == rule, (a, b, r)
            lines.append("%s %s %s\n" % (a, b, r))
    with open(os.path.join(HERE, "dtype_promotion.txt"), "w") as f:
        f.writelines(lines)


def params():
    arrays = {"i8": mx.nd.array([-128, -1, 0, 5, 127], dtype="int8"),
              "i8_2d": mx.nd.array([[1, -2, 3], [-4, 5, -6]], dtype="int8")}
    for name, dt, vals in [("i16", "int16", [-32768, -1, 0, 32767]), ("u16", "uint16", [0, 1, 65535])]:
        try:
            arrays[name] = mx.nd.array(onp.array(vals, dtype=dt), dtype=dt)
        except Exception as e:
            print("no", dt, "array in MXNet:", str(e).splitlines()[-1][:100])
    mx.nd.save(os.path.join(HERE, "mx_int8.params"), arrays)
    back = mx.nd.load(os.path.join(HERE, "mx_int8.params"))
    for k in sorted(back):
        print(k, back[k].dtype, back[k].asnumpy().tolist())


promotion()
params()
