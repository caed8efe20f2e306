"""Generates tests/data/loss_metric_golden.txt, the goldens of the gluon
losses and metrics added in lua/luon/gluon/loss.lua and metric.lua, with
MXNet 1.9.1 (python 3.8: /work/venv-mx/bin/python
tests/data/gen_loss_metric_golden.py). The suite (tests/lua/gluon_loss_metric_spec.lua)
reads the file and never needs MXNet.

Inputs, float64: p[i] = round(2 sin(1.7 i + 0.3), 3) and q[i] = round(1.5
cos(0.9 i + 0.1), 3) over the flat index i, shaped (3, 4); z = the {0, 1}
labels [1,0,0,1, 0,1,1,0, 1,1,0,0] (3, 4); s = 2 z - 1; t = the counts
[0,1,2,3, 0,4,1,2, 3,0,1,5] (3, 4); w = [[0.5], [1], [2]] (sample_weight).
Each case is two lines: "<label> <shape>" ("-" for a 0-d result, "metric"
for a metric's value), then its values, row-major, as repr prints them.
"""
import os
import math
import numpy as onp
import mxnet as mx
from mxnet import nd
from mxnet.gluon import loss as gl

HERE = os.path.dirname(os.path.abspath(__file__))

def A(v):
    return nd.array(v, dtype='float64')

p = A([round(2 * math.sin(1.7 * i + 0.3), 3) for i in range(12)]).reshape((3, 4))
q = A([round(1.5 * math.cos(0.9 * i + 0.1), 3) for i in range(12)]).reshape((3, 4))
z = A([1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0]).reshape((3, 4))
s = 2 * z - 1
t = A([0, 1, 2, 3, 0, 4, 1, 2, 3, 0, 1, 5]).reshape((3, 4))
w = A([[0.5], [1], [2]])
f32 = lambda x: x.astype('float32')
prob = nd.softmax(q, axis=-1)
pos = nd.abs(p) + 0.5  # positive predictions for PoissonNLLLoss without logits

def poisson_full_masked(x, y):
    x, y = x.asnumpy(), y.asnumpy()
    big = y > 1
    ys = onp.where(big, y, 2.0)
    st = ys * onp.log(ys) - ys + 0.5 * onp.log(2 * ys * onp.pi)
    return nd.array(onp.array([onp.mean(onp.exp(x) - y * x + onp.where(big, st, 0))]), dtype='float64')

cases = [
    ("HuberLoss", lambda: gl.HuberLoss()(p, q)),
    ("HuberLoss_rho0.5_w", lambda: gl.HuberLoss(rho=0.5)(p, q, w)),
    ("HingeLoss", lambda: gl.HingeLoss()(p, s)),
    ("HingeLoss_margin2_weight3", lambda: gl.HingeLoss(margin=2, weight=3)(p, s)),
    ("SquaredHingeLoss", lambda: gl.SquaredHingeLoss()(p, s)),
    ("SquaredHingeLoss_margin0.5_w", lambda: gl.SquaredHingeLoss(margin=0.5)(p, s, w)),
    ("LogisticLoss", lambda: gl.LogisticLoss()(p, s)),
    ("LogisticLoss_binary_w", lambda: gl.LogisticLoss(label_format='binary')(p, z, w)),
    ("KLDivLoss", lambda: gl.KLDivLoss()(nd.log_softmax(p, axis=-1), prob)),
    ("KLDivLoss_nologits_axis0", lambda: gl.KLDivLoss(from_logits=False, axis=0)(p, nd.softmax(q, axis=0))),
    ("KLDivLoss_w", lambda: gl.KLDivLoss(from_logits=False)(p, prob, w)),
    # MXNet's CosineEmbeddingLoss adds a float32 eps array: float32 only
    ("CosineEmbeddingLoss", lambda: gl.CosineEmbeddingLoss()(f32(p), f32(q), f32(A([1, -1, 1])))),
    ("CosineEmbeddingLoss_margin0.2_w",
     lambda: gl.CosineEmbeddingLoss(margin=0.2)(f32(p), f32(q), f32(A([-1, -1, 1])), f32(w))),
    ("TripletLoss", lambda: gl.TripletLoss()(p, q, 0.5 * p + 0.3)),
    ("TripletLoss_margin3_weight2", lambda: gl.TripletLoss(margin=3, weight=2)(p, q, q + 0.4)),
    ("PoissonNLLLoss", lambda: gl.PoissonNLLLoss()(p, t)),
    ("PoissonNLLLoss_probs", lambda: gl.PoissonNLLLoss(from_logits=False)(pos, t)),
    ("PoissonNLLLoss_full_no_zero", lambda: gl.PoissonNLLLoss(compute_full=True)(p, t + 1)),
    ("PoissonNLLLoss_full_zero_target", lambda: gl.PoissonNLLLoss(compute_full=True)(p, t)),
    # MXNet's mask multiplies 0 log 0 = NaN; luon selects (target > 1), as PyTorch
    ("PoissonNLLLoss_full_zero_target_masked", lambda: poisson_full_masked(p, t)),
    ("PoissonNLLLoss_w", lambda: gl.PoissonNLLLoss()(p, t, w)),
    ("SigmoidBCELoss_pos_weight", lambda: gl.SigmoidBCELoss()(p, z, None, A([[0.5, 1, 2, 3]]))),
    ("SigmoidBCELoss_sigmoid_pos_weight", lambda: gl.SigmoidBCELoss(from_sigmoid=True)(nd.sigmoid(p), z, w, A([2]))),
]

# metrics: two updates each; preds (3, 2) class scores, labels (3,)
L1, P1 = A([0, 1, 1]), A([[0.3, 0.7], [0.6, 0.4], [0.2, 0.8]])
L2, P2 = A([1, 0, 0, 1]), A([[0.9, 0.1], [0.4, 0.6], [0.7, 0.3], [0.1, 0.9]])

def metric_value(m, updates):
    for labels, preds in updates:
        m.update(labels, preds)
    v = m.get()[1]
    return v[1] if isinstance(v, list) else v  # a composite's second value

two = [([L1], [P1]), ([L2], [P2])]
reg = [([p[0]], [q[0]]), ([p[1:].reshape((-1,))], [q[1:].reshape((-1,))])]
reg2d = [([p], [q])]
metric_cases = [
    ("MSE", lambda: metric_value(mx.metric.MSE(), reg)),
    ("MSE_2d", lambda: metric_value(mx.metric.MSE(), reg2d)),
    ("MAE", lambda: metric_value(mx.metric.MAE(), reg)),
    ("RMSE", lambda: metric_value(mx.metric.RMSE(), reg)),
    ("F1_macro", lambda: metric_value(mx.metric.F1(), two)),
    ("F1_micro", lambda: metric_value(mx.metric.F1(average='micro'), two)),
    ("MCC_macro", lambda: metric_value(mx.metric.MCC(), two)),
    ("MCC_micro", lambda: metric_value(mx.metric.MCC(average='micro'), two)),
    ("Perplexity_none", lambda: metric_value(mx.metric.Perplexity(None), two)),
    ("Perplexity_ignore0", lambda: metric_value(mx.metric.Perplexity(0), two)),
    ("PearsonCorrelation", lambda: metric_value(mx.metric.PearsonCorrelation(), reg)),
    ("PearsonCorrelation_micro", lambda: metric_value(mx.metric.PearsonCorrelation(average='micro'), reg)),
    ("NegativeLogLikelihood", lambda: metric_value(mx.metric.NegativeLogLikelihood(), two)),
    ("Composite_acc_f1", lambda: metric_value(mx.metric.create(['acc', 'f1']), two)),
]

with open(os.path.join(HERE, 'loss_metric_golden.txt'), 'w') as f:
    for label, fn in cases:
        v = fn().asnumpy()
        shape = ','.join(str(d) for d in v.shape) or '-'
        f.write('%s %s\n%s\n' % (label, shape, ' '.join(repr(float(x)) for x in v.ravel())))
    for label, fn in metric_cases:
        f.write('%s metric\n%s\n' % (label, repr(float(fn()))))
