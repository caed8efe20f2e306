"""Generates tests/data/sort_golden.txt with MXNet 1.9.1 (python 3.8:
/work/venv-mx/bin/python tests/data/gen_sort_golden.py): the results of the
sorting, searching and product functions (np.sort, np.argsort, npx.topk,
np.unique, np.searchsorted, npx.batch_dot, np.dot, np.tensordot, np.outer,
np.inner, np.vdot, np.einsum of one to four operands) on small inputs, and the gradients of the
differentiable ones. tests/lua/sort_golden_spec.lua makes the same calls
in luon (by case name) and compares; the suite never needs MXNet.

Format, one record per line:
  case NAME
  in SHAPE DTYPE v1 v2 ...     (the inputs, in order; SHAPE as 2x3, or -)
  out SHAPE DTYPE v1 v2 ...    (the results, in order; for grad cases the
                                gradients of each input follow the results,
                                for the head gradient 1, 2, 3, ... over each
                                result's flat index)
"""
import os
import mxnet as mx
from mxnet import np, npx
import numpy as onp

npx.set_np()
HERE = os.path.dirname(os.path.abspath(__file__))


def wave(shape, k=0, dtype="float32"):
    n = int(onp.prod(shape)) if shape else 1
    return np.array(onp.sin(1.3 * onp.arange(n) + k).reshape(shape), dtype=dtype)


def ties(shape, k=0, dtype="float32"):
    n = int(onp.prod(shape)) if shape else 1
    return np.array(onp.round(2 * onp.sin(0.9 * onp.arange(n) + k)).reshape(shape), dtype=dtype)


CASES = []


def case(name, inputs, fn, grad=False):
    CASES.append((name, inputs, fn, grad))


# sorting and searching
case("sort_last", [ties((3, 5))], lambda x: [np.sort(x)])
case("sort_axis0", [ties((4, 3), 1)], lambda x: [np.sort(x, axis=0)])
case("sort_flat", [wave((2, 3))], lambda x: [np.sort(x, axis=None)])
case("sort_int", [ties((2, 5), 2, "int32")], lambda x: [np.sort(x)])
case("sort_grad", [wave((2, 4), 3, "float64")], lambda x: [np.sort(x, axis=-1)], grad=True)
case("argsort_last", [ties((3, 5))], lambda x: [np.argsort(x)])
case("argsort_axis0", [ties((4, 3), 1)], lambda x: [np.argsort(x, axis=0)])
case("argsort_flat", [ties((2, 3), 2)], lambda x: [np.argsort(x, axis=None)])
case("topk_default", [ties((3, 5))], lambda x: [npx.topk(x)])
case("topk_indices_k2", [ties((3, 5))], lambda x: [npx.topk(x, k=2)])
case("topk_value_asc", [ties((3, 5))], lambda x: [npx.topk(x, k=3, ret_typ="value", is_ascend=True)])
case("topk_both_axis0", [ties((4, 3), 1)], lambda x: list(npx.topk(x, k=2, axis=0, ret_typ="both")))
case("topk_mask", [ties((3, 5))], lambda x: [npx.topk(x, k=2, ret_typ="mask")])
case("topk_all_int64", [ties((2, 4), 2)], lambda x: [npx.topk(x, k=0, dtype="int64")])
case("topk_flat", [wave((2, 3))], lambda x: [npx.topk(x, k=4, axis=None, ret_typ="value")])
case("topk_int_value", [ties((2, 5), 2, "int32")], lambda x: [npx.topk(x, k=2, ret_typ="value")])
case("topk_grad", [wave((3, 4), 1, "float64")], lambda x: [npx.topk(x, k=2, ret_typ="value")], grad=True)
case("unique_flat", [ties((3, 4))], lambda x: [np.unique(x)])
case("unique_all", [ties((3, 4), 1)],
     lambda x: list(np.unique(x, return_index=True, return_inverse=True, return_counts=True)))
case("unique_axis0", [np.array([[1, 2], [0, 5], [1, 2], [0, 4]], dtype="float32")],
     lambda x: list(np.unique(x, axis=0, return_index=True, return_inverse=True, return_counts=True)))
case("searchsorted_left", [np.array([1, 2, 2, 3, 5], dtype="float32"), ties((2, 3))],
     lambda a, v: [np.searchsorted(a, v)])
case("searchsorted_right", [np.array([1, 2, 2, 3, 5], dtype="float32"), ties((2, 3))],
     lambda a, v: [np.searchsorted(a, v, side="right")])

# products
case("batch_dot", [wave((2, 3, 4)), wave((2, 4, 2), 1)], lambda a, b: [npx.batch_dot(a, b)])
case("batch_dot_ta", [wave((2, 4, 3)), wave((2, 4, 2), 1)], lambda a, b: [npx.batch_dot(a, b, transpose_a=True)])
case("batch_dot_tb", [wave((2, 3, 4)), wave((2, 2, 4), 1)], lambda a, b: [npx.batch_dot(a, b, transpose_b=True)])
case("batch_dot_4d_grad", [wave((2, 2, 3, 4), 0, "float64"), wave((2, 2, 2, 4), 1, "float64")],
     lambda a, b: [npx.batch_dot(a, b, transpose_a=False, transpose_b=True)], grad=True)
case("dot_nd", [wave((2, 3, 4)), wave((5, 4, 2), 1)], lambda a, b: [np.dot(a, b)])
case("dot_nd_1d", [wave((2, 3, 4)), wave((4,), 1)], lambda a, b: [np.dot(a, b)])
case("dot_1d_nd", [wave((3,)), wave((2, 3, 4), 1)], lambda a, b: [np.dot(a, b)])
case("tensordot_int", [wave((2, 3, 4)), wave((3, 4, 5), 1)], lambda a, b: [np.tensordot(a, b, 2)])
case("tensordot_pair", [wave((2, 3, 4)), wave((4, 3, 5), 1)], lambda a, b: [np.tensordot(a, b, ([1, 2], [1, 0]))])
case("tensordot_grad", [wave((2, 3), 0, "float64"), wave((3, 2, 2), 1, "float64")],
     lambda a, b: [np.tensordot(a, b, ([1], [0]))], grad=True)
case("outer", [wave((2, 2)), wave((3,), 1)], lambda a, b: [np.outer(a, b)])
case("inner", [wave((2, 3)), wave((4, 3), 1)], lambda a, b: [np.inner(a, b)])
case("vdot", [wave((2, 3)), wave((3, 2), 1)], lambda a, b: [np.vdot(a, b)])
case("einsum_matmul", [wave((2, 3)), wave((3, 4), 1)], lambda a, b: [np.einsum("ij,jk->ik", a, b)])
case("einsum_implicit", [wave((2, 3)), wave((3, 4), 1)], lambda a, b: [np.einsum("ij,jk", a, b)])
case("einsum_trace", [wave((3, 3))], lambda a: [np.einsum("ii", a)])
case("einsum_diag", [wave((3, 3))], lambda a: [np.einsum("ii->i", a)])
case("einsum_transpose", [wave((2, 3, 4))], lambda a: [np.einsum("ijk->kij", a)])
case("einsum_sum", [wave((2, 3))], lambda a: [np.einsum("ij->", a)])
case("einsum_outer", [wave((2,)), wave((3,), 1)], lambda a, b: [np.einsum("i,j->ij", a, b)])
case("einsum_batch", [wave((2, 2, 3)), wave((2, 3, 4), 1)], lambda a, b: [np.einsum("bij,bjk->bik", a, b)])
case("einsum_ellipsis", [wave((5, 2, 3)), wave((5, 3, 4), 1)], lambda a, b: [np.einsum("...ij,...jk->...ik", a, b)])
case("einsum_bilinear", [wave((2, 3)), wave((3, 3), 1)], lambda a, b: [np.einsum("ij,jj->i", a, b)])
case("einsum_grad", [wave((2, 3, 4), 0, "float64"), wave((4, 3), 1, "float64")],
     lambda a, b: [np.einsum("ijk,kj->ik", a, b)], grad=True)
case("einsum_chain3", [wave((2, 3)), wave((3, 4), 1), wave((4, 5), 2)],
     lambda a, b, c: [np.einsum("ij,jk,kl->il", a, b, c)])
case("einsum_implicit3", [wave((2, 3)), wave((3, 4), 1), wave((2, 4), 2)],
     lambda a, b, c: [np.einsum("ij,jk,ik", a, b, c)])
case("einsum_ellipsis3", [wave((2, 1, 2, 3)), wave((3, 3, 4), 1), wave((4,), 2)],
     lambda a, b, c: [np.einsum("...ij,...jk,k->...i", a, b, c)])
case("einsum_four", [wave((2, 3)), wave((3,), 1), wave((3, 2), 2), wave((2, 2), 3)],
     lambda a, b, c, d: [np.einsum("ij,j,jk,ki->", a, b, c, d)])
case("einsum3_grad", [wave((2, 3), 0, "float64"), wave((3, 3, 2), 1, "float64"), wave((2, 2), 2, "float64")],
     lambda a, b, c: [np.einsum("ij,jjk,ik->ki", a, b, c)], grad=True)


def fmt(x):
    a = x.asnumpy() if hasattr(x, "asnumpy") else onp.asarray(x)
    shape = "x".join(str(d) for d in a.shape) or "-"
    vals = " ".join(repr(float(v)) if a.dtype.kind == "f" else str(int(v)) for v in a.reshape(-1))
    return "%s %s %s" % (shape, a.dtype.name, vals)


def main():
    lines = []
    for name, inputs, fn, grad in CASES:
        lines.append("case " + name)
        for x in inputs:
            lines.append("in " + fmt(x))
        if grad:
            for x in inputs:
                x.attach_grad()
            with mx.autograd.record():
                outs = fn(*inputs)
            heads = [np.array(onp.arange(1, o.size + 1).reshape(o.shape), dtype=o.dtype) for o in outs]
            mx.autograd.backward(outs, heads)
            outs = outs + [x.grad for x in inputs]
        else:
            outs = fn(*inputs)
        for o in outs:
            lines.append("out " + fmt(o))
    with open(os.path.join(HERE, "sort_golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


main()
