"""Generates tests/data/optim2_golden.txt with MXNet 1.9.1 (python 3.8:
/work/venv-mx/bin/python tests/data/gen_optim2_golden.py): five steps of
Adamax, Nadam, LAMB, Signum and FTRL, each with its defaults and with other
options (rescale_grad, clip_gradient, wd, lr_mult and wd_mult by name), on
two small float32 weights with fixed gradients. Each step updates index 0
then index 1, as an Updater does. tests/lua/optim2_spec.lua runs the same
steps in luon and compares; the suite never needs MXNet.

Format, one record per line (values float32, printed exactly):
  weight IDX SHAPE v1 v2 ...       the starting weights
  grad STEP IDX v1 v2 ...          the gradient of weight IDX at STEP (1..5)
  case NAME OPTIMIZER              then the case's lines:
  opt KEY VALUE                    a constructor keyword (number, true, false)
  mult lr|wd NAME VALUE            set_lr_mult / set_wd_mult({NAME = VALUE})
  after STEP IDX v1 v2 ...         weight IDX after STEP
  state IDX K v1 v2 ...            state K (1-based) of weight IDX after the last step
"""
import os
import mxnet as mx
import numpy as onp

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 5
SHAPES = [(3, 4), (5,)]
NAMES = {0: "a_weight", 1: "b_weight"}


def wave(n, k, scale):
    return (scale * onp.sin(1.3 * onp.arange(n) + k)).astype("float32")


WEIGHTS = [wave(int(onp.prod(s)), 0.4 + i, 1.5).reshape(s) for i, s in enumerate(SHAPES)]
GRADS = [[wave(int(onp.prod(s)), 2.1 * step + 0.7 * i + 0.3, 0.8).reshape(s) for i, s in enumerate(SHAPES)]
         for step in range(STEPS)]

CASES = [
    ("adamax_default", "adamax", {}, None),
    ("adamax_opts", "adamax", dict(learning_rate=0.01, beta1=0.8, beta2=0.99, wd=0.01,
                                   rescale_grad=0.5, clip_gradient=0.3), ({"b_weight": 0.5}, {"a_weight": 2.0})),
    ("nadam_default", "nadam", {}, None),
    ("nadam_opts", "nadam", dict(learning_rate=0.01, beta1=0.85, beta2=0.99, epsilon=1e-6,
                                 schedule_decay=0.01, wd=0.02, rescale_grad=2.0, clip_gradient=0.5),
     ({"b_weight": 0.5}, {"a_weight": 2.0})),
    ("lamb_default", "lamb", {}, None),
    ("lamb_opts", "lamb", dict(learning_rate=0.01, wd=0.01, rescale_grad=0.5, clip_gradient=0.3,
                               lower_bound=0.5, upper_bound=2.0), ({"b_weight": 0.5}, {"a_weight": 2.0})),
    ("lamb_nobias", "lamb", dict(learning_rate=0.02, beta1=0.8, beta2=0.9, epsilon=1e-4,
                                 bias_correction=False, wd=0.05, lower_bound=3.0), None),
    ("signum_default", "signum", {}, None),
    ("signum_opts", "signum", dict(learning_rate=0.05, momentum=0.8, wd_lh=0.05, wd=0.01,
                                   rescale_grad=2.0, clip_gradient=0.5), ({"b_weight": 0.5}, {"a_weight": 2.0})),
    ("signsgd", "signum", dict(learning_rate=0.05, momentum=0.0, wd=0.01, rescale_grad=0.5,
                               clip_gradient=0.1), None),
    ("ftrl_default", "ftrl", {}, None),
    ("ftrl_opts", "ftrl", dict(learning_rate=0.2, lamda1=0.05, beta=0.5, wd=0.01, rescale_grad=0.5,
                               clip_gradient=0.4), ({"b_weight": 0.5}, {"a_weight": 2.0})),
]


def vals(a):
    return " ".join(repr(float(v)) for v in onp.asarray(a, dtype="float32").ravel())


def states_of(s):
    if s is None:
        return []
    if isinstance(s, (tuple, list)):
        return list(s)
    return [s]


def main():
    lines = []
    for i, w in enumerate(WEIGHTS):
        lines.append("weight %d %s %s" % (i, "x".join(str(d) for d in w.shape), vals(w)))
    for step in range(STEPS):
        for i in range(len(SHAPES)):
            lines.append("grad %d %d %s" % (step + 1, i, vals(GRADS[step][i])))
    for name, opt_name, kw, mults in CASES:
        lines.append("case %s %s" % (name, opt_name))
        for k, v in kw.items():
            lines.append("opt %s %s" % (k, ("true" if v else "false") if isinstance(v, bool) else repr(v)))
        opt = mx.optimizer.create(opt_name, param_idx2name=dict(NAMES), **kw)
        if mults:
            opt.set_lr_mult(mults[0])
            opt.set_wd_mult(mults[1])
            for k, v in mults[0].items():
                lines.append("mult lr %s %r" % (k, v))
            for k, v in mults[1].items():
                lines.append("mult wd %s %r" % (k, v))
        ws = [mx.nd.array(w, dtype="float32") for w in WEIGHTS]
        st = [opt.create_state(i, w) for i, w in enumerate(ws)]
        for step in range(STEPS):
            for i in range(len(ws)):
                opt.update(i, ws[i], mx.nd.array(GRADS[step][i], dtype="float32"), st[i])
                lines.append("after %d %d %s" % (step + 1, i, vals(ws[i].asnumpy())))
        for i in range(len(ws)):
            for k, s in enumerate(states_of(st[i])):
                lines.append("state %d %d %s" % (i, k + 1, vals(s.asnumpy())))
    with open(os.path.join(HERE, "optim2_golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
