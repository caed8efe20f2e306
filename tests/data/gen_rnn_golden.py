"""Generates tests/data/rnn_golden.txt with MXNet 1.9.1 (python 3.8:
/work/venv-mx/bin/python tests/data/gen_rnn_golden.py): gluon.rnn's layers
and cells on fixed inputs and weights. The suite (tests/lua/rnn_spec.lua)
reads the file and never needs MXNet.

Each case: a line "case <name> <layout> <states 0|1>", then "param <name>
<shape>" per parameter (structural names, sorted), "out <shape> <values>"
and "state <k> <shape> <values>" per returned state.
mx_lstm_bidir.params: save_parameters of the case lstm_bidir_2layers (its
formula weights, under MXNet 1.9.1's names _unfused.0.l_cell.i2h_weight...).
Weights: the k-th parameter (0-based, sorted by structural name) holds
0.4*sin(0.37*i + k) over its flat index i. Input x[i] = sin(1.3*i),
state k: 0.5*cos(0.7*i + k), over the flat index (T=3, N=2, I=4, H=5).
"""
import os
import numpy as np
import mxnet as mx
from mxnet.gluon import rnn

HERE = os.path.dirname(os.path.abspath(__file__))
T, N, I, H = 3, 2, 4, 5


def formula(shape, f):
    n = int(np.prod(shape)) if len(shape) else 1
    return mx.nd.array(np.array([f(i) for i in range(n)], dtype=np.float64).reshape(shape), dtype='float32')


def set_weights(net):
    ps = net._collect_params_with_prefix()
    for k, name in enumerate(sorted(ps)):
        p = ps[name]
        p.set_data(formula(p.shape, lambda i: 0.4 * np.sin(0.37 * i + k)))
    return ps


def fmt(a):
    a = a.asnumpy().astype(np.float64)
    return "(%s) %s" % (",".join(str(d) for d in a.shape), " ".join("%.9g" % v for v in a.ravel()))


def states_for(shapes):
    return [formula(s, lambda i, k=k: 0.5 * np.cos(0.7 * i + k)) for k, s in enumerate(shapes)]


def x_for(layout):
    shape = (T, N, I) if layout == "TNC" else (N, T, I)
    return formula(shape, lambda i: np.sin(1.3 * i))


def dump(out, name, layout, net, y, states, with_states):
    out.append("case %s %s %d" % (name, layout, with_states))
    ps = net._collect_params_with_prefix()
    for pname in sorted(ps):
        out.append("param %s (%s)" % (pname, ",".join(str(d) for d in ps[pname].shape)))
    out.append("out " + fmt(y))
    for k, s in enumerate(states or []):
        out.append("state %d %s" % (k, fmt(s)))


def layer_case(out, name, cls, layout, with_states, save=None, **kw):
    net = cls(H, layout=layout, **kw)
    net.initialize()
    x = x_for(layout)
    net(x)  # deferred init
    set_weights(net)
    if with_states:
        st = states_for([s['shape'] for s in net.state_info(N)])
        y, new = net(x, st)
    else:
        y, new = net(x), None
    dump(out, name, layout, net, y, new, with_states)
    if save:
        net.save_parameters(os.path.join(HERE, save))


def cell_case(out, name, make, layout, merge):
    cell = make()
    cell.initialize()
    x = x_for(layout)
    cell.unroll(T, x, layout=layout, merge_outputs=True)
    set_weights(cell)
    st = states_for([s['shape'] for s in cell.state_info(N)])
    y, new = cell.unroll(T, x, begin_state=st, layout=layout, merge_outputs=merge)
    if not merge:
        y = mx.nd.stack(*y, axis=layout.find('T'))
    dump(out, name, layout, cell, y, new, 1)


def main():
    mx.random.seed(0)
    out = []
    layer_case(out, "rnn_relu_2layers", rnn.RNN, "TNC", 1, num_layers=2)
    layer_case(out, "rnn_tanh_bidir", rnn.RNN, "NTC", 1, activation='tanh', bidirectional=True)
    layer_case(out, "lstm_2layers", rnn.LSTM, "TNC", 1, num_layers=2)
    layer_case(out, "lstm_bidir_2layers", rnn.LSTM, "NTC", 1, save="mx_lstm_bidir.params", num_layers=2,
               bidirectional=True)
    layer_case(out, "lstm_no_states", rnn.LSTM, "TNC", 0)
    layer_case(out, "gru_2layers", rnn.GRU, "TNC", 1, num_layers=2)
    layer_case(out, "gru_bidir_2layers", rnn.GRU, "NTC", 1, num_layers=2, bidirectional=True)
    cell_case(out, "rnncell", lambda: rnn.RNNCell(H), "NTC", True)
    cell_case(out, "rnncell_relu", lambda: rnn.RNNCell(H, activation='relu'), "TNC", True)
    cell_case(out, "lstmcell", lambda: rnn.LSTMCell(H), "TNC", False)
    cell_case(out, "grucell", lambda: rnn.GRUCell(H), "NTC", True)

    def seq():
        s = rnn.SequentialRNNCell()
        s.add(rnn.LSTMCell(H))
        s.add(rnn.GRUCell(H))
        return s
    cell_case(out, "sequential_lstm_gru", seq, "NTC", True)

    def resid():
        return rnn.ResidualCell(rnn.GRUCell(I))
    cell_case(out, "residual_gru", resid, "NTC", True)

    def bi():
        return rnn.BidirectionalCell(rnn.LSTMCell(H), rnn.GRUCell(H))
    cell_case(out, "bidirectional_lstm_gru", bi, "NTC", True)
    with open(os.path.join(HERE, "rnn_golden.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
