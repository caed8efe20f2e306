"""Generates tests/data/layout_golden.txt with MXNet 1.9.1 (python 3.8:
/work/venv-mx/bin/python tests/data/gen_layout_golden.py): the values of
np.tile, repeat, flip, flipud, fliplr, roll, pad (all its modes), diag, tril, meshgrid,
npx.reshape, npx.one_hot, npx.sequence_mask and gluon.nn.ReflectionPad2D
on small inputs (a negative sequence length corrupts MXNet's heap, so that
case is checked by hand in the spec). tests/lua/layout_spec.lua makes the same calls by case
name and compares; the suite never needs MXNet.

Inputs: x(s) is arange over shape s as float32, xi(s) the same as int32.
Each line: name|shape|dtype|values (row-major, %.9g), "()" for 0-d.
"""
import os
import mxnet as mx
from mxnet import np, npx

npx.set_np()


def x(*s):
    return np.arange(int(_prod(s)), dtype='float32').reshape(s)


def xi(*s):
    return np.arange(int(_prod(s)), dtype='int32').reshape(s)


def _prod(s):
    p = 1
    for v in s:
        p *= v
    return p


def reflect(padding, a):
    """ReflectionPad2D's forward, F.pad(x, mode='reflect', pad_width=...),
    called on a legacy array: under set_np the block refuses its own legacy
    output (MXNet 1.9.1), so its one operator is called directly."""
    if isinstance(padding, int):
        padding = (0, 0, 0, 0, padding, padding, padding, padding)
    return mx.nd.pad(a.as_nd_ndarray(), mode='reflect', pad_width=padding).as_np_ndarray()


CASES = [
    ('tile 2', lambda: np.tile(x(2, 3), 2)),
    ('tile (2,1,2)', lambda: np.tile(x(2, 3), (2, 1, 2))),
    ('tile int32 (1,3) of (2,1)', lambda: np.tile(xi(2, 1), (1, 3))),
    ('tile 0-d 3', lambda: np.tile(np.array(7.0), 3)),
    ('repeat 2', lambda: np.repeat(x(2, 3), 2)),
    ('repeat 2 axis 0', lambda: np.repeat(x(2, 3), 2, axis=0)),
    ('repeat 3 axis -1 int32', lambda: np.repeat(xi(2, 2), 3, axis=-1)),
    ('flip', lambda: np.flip(x(2, 3, 2))),
    ('flip 1', lambda: np.flip(x(2, 3, 2), 1)),
    ('flip (0,2)', lambda: np.flip(x(2, 3, 2), (0, 2))),
    ('flipud', lambda: np.flipud(x(3, 2))),
    ('fliplr', lambda: np.fliplr(x(3, 2))),
    ('roll 1', lambda: np.roll(x(2, 3), 1)),
    ('roll -7', lambda: np.roll(x(2, 3), -7)),
    ('roll 1 axis 1', lambda: np.roll(x(2, 3), 1, axis=1)),
    ('roll (1,2) axes (0,1)', lambda: np.roll(x(2, 3), (1, 2), axis=(0, 1))),
    ('roll 1 axes (0,1)', lambda: np.roll(x(2, 3), 1, axis=(0, 1))),
    ('pad constant', lambda: np.pad(x(2, 3), ((1, 2), (0, 1)))),
    ('pad edge', lambda: np.pad(x(2, 3), ((1, 1), (2, 2)), mode='edge')),
    ('pad reflect', lambda: np.pad(x(2, 3), ((1, 1), (2, 2)), mode='reflect')),
    ('pad reflect wide', lambda: np.pad(x(1, 3), ((0, 0), (5, 6)), mode='reflect')),
    ('pad symmetric wide', lambda: np.pad(x(1, 3), ((0, 0), (5, 6)), mode='symmetric')),
    ('pad reflect 3-d', lambda: np.pad(x(2, 3, 4), ((1, 1), (0, 1), (2, 0)), mode='reflect')),
    ('pad reflect size 1', lambda: np.pad(x(1, 1), ((2, 1), (1, 2)), mode='reflect')),
    ('pad constant int32', lambda: np.pad(xi(2, 3), ((1, 1), (1, 1)))),
    ('pad maximum', lambda: np.pad(np.array([[1., 5., 2.], [7., 0., 3.]]), ((1, 2), (2, 1)), mode='maximum')),
    ('pad minimum 3-d', lambda: np.pad(np.array([[[4., 1., 9.], [2., 8., 3.]], [[6., 0., 5.], [7., 2., 1.]]]),
                                       ((1, 0), (0, 2), (1, 1)), mode='minimum')),
    ('pad maximum int32', lambda: np.pad(np.array([[3, 1], [0, 2]], dtype='int32'), ((1, 1), (1, 1)), mode='maximum')),
    ('diag 1-d', lambda: np.diag(np.array([1., 2., 3.]))),
    ('diag 1-d k 1', lambda: np.diag(np.array([1., 2.]), 1)),
    ('diag 1-d k -2', lambda: np.diag(np.array([1., 2.]), -2)),
    ('diag 2-d', lambda: np.diag(x(3, 4))),
    ('diag 2-d k 1', lambda: np.diag(x(3, 4), 1)),
    ('diag 2-d k -1', lambda: np.diag(x(3, 4), -1)),
    ('diag 2-d k 5', lambda: np.diag(x(3, 4), 5)),
    ('tril', lambda: np.tril(x(3, 4))),
    ('tril k 1', lambda: np.tril(x(3, 4), 1)),
    ('tril k -1 3-d', lambda: np.tril(x(2, 3, 4), -1)),
    ('tril 1-d', lambda: np.tril(np.array([1., 2., 3.]))),
    ('meshgrid xy 1', lambda: np.meshgrid(np.array([1., 2., 3.]), np.array([4., 5.]))[0]),
    ('meshgrid xy 2', lambda: np.meshgrid(np.array([1., 2., 3.]), np.array([4., 5.]))[1]),
    ('meshgrid ij 2', lambda: np.meshgrid(np.array([1., 2., 3.]), np.array([4., 5.]), indexing='ij')[1]),
    ('meshgrid 3 inputs 3', lambda: np.meshgrid(np.array([1., 2.]), np.array([4., 5., 6.]), np.array([7.]))[2]),
    ('reshape (-2,-2,2,-1)', lambda: npx.reshape(x(2, 3, 8), (-2, -2, 2, -1))),
    ('reshape (-6,2,-1,-4)', lambda: npx.reshape(x(8, 3, 3), (-6, 2, -1, -4))),
    ('reshape (-5,-4)', lambda: npx.reshape(x(2, 3, 2, 2), (-5, -4))),
    ('reshape (-2,-3,-3,-2)', lambda: npx.reshape(x(2, 1, 1, 3), (-2, -3, -3, -2))),
    ('reshape (-4,-5) reverse', lambda: npx.reshape(x(2, 3, 2, 2), (-4, -5), reverse=True)),
    ('reshape (-4,-1,2,-6) reverse', lambda: npx.reshape(x(2, 3, 8), (-4, -1, 2, -6), reverse=True)),
    ('reshape (-1,2) reverse', lambda: npx.reshape(x(2, 3, 4), (-1, 2), reverse=True)),
    ('reshape (-2,-1) reverse', lambda: npx.reshape(x(2, 3, 4), (-2, -1), reverse=True)),
    ('reshape (-1,-5) reverse', lambda: npx.reshape(x(2, 3, 4), (-1, -5), reverse=True)),
    ('reshape (1,-4) reverse', lambda: npx.reshape(x(2, 3, 4), (1, -4), reverse=True)),
    ('reshape (-6,-1,3,-2)', lambda: npx.reshape(x(6, 4), (-6, -1, 3, -2))),
    ('one_hot', lambda: npx.one_hot(np.array([0, 2, 1, -1, 3, 5]), 4)),
    ('one_hot float indices', lambda: npx.one_hot(np.array([0., 1.7, 2.2, -0.5]), 4)),
    ('one_hot on off int32', lambda: npx.one_hot(np.array([[0, 2], [1, 1]]), 3, on_value=2.7, off_value=-1,
                                                 dtype='int32')),
    ('sequence_mask axis 0', lambda: npx.sequence_mask(x(4, 2, 3), np.array([1., 3.]), use_sequence_length=True,
                                                       value=-7)),
    ('sequence_mask axis 1', lambda: npx.sequence_mask(x(2, 4, 3), np.array([1.5, 2.9]), use_sequence_length=True,
                                                       axis=1)),
    ('ReflectionPad2D 2', lambda: reflect(2, x(2, 1, 3, 4))),
    ('ReflectionPad2D 8-tuple', lambda: reflect((0, 0, 0, 0, 1, 2, 0, 1), x(1, 2, 3, 4))),
]


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'layout_golden.txt')
    with open(out, 'w') as f:
        for name, fn in CASES:
            r = fn()
            vals = ' '.join('%.9g' % v for v in r.asnumpy().reshape(-1).tolist())
            shape = '(' + ','.join(str(d) for d in r.shape) + ')'
            f.write('%s|%s|%s|%s\n' % (name, shape, r.dtype, vals))
    print('wrote', out, len(CASES), 'cases')


if __name__ == '__main__':
    main()
