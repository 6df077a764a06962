#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reference values for tests/test_nn_layers.c, from PyTorch (Debian's python3-torch 1.13).

Run with /usr/bin/python3 from the repository root:
    /usr/bin/python3 tests/reference/nn_layers.py
It writes one text file per case into tests/reference/nn_layers/. Each line is one array:
    <name> <ndim> <dim>... <value>...
Names: x (input), dy (upstream gradient), y (output), dx (input gradient),
param.<tensor> (the value loaded into the C model before forward, state tensors too),
grad.<tensor> (the parameter gradient), state.<tensor> (state after the step).
Tensor names are PyTorch state_dict names, which are the C model's names. Everything is
computed in float64 and written with 17 significant digits, so the C test compares its
float32 results with the exact values.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_layers")
torch.set_default_dtype(torch.float64)


def fmt(name, t):
    t = t.detach().to(torch.float64).contiguous()
    shape = list(t.shape)
    vals = " ".join("%.17g" % v for v in t.reshape(-1).tolist())
    return "%s %d %s %s\n" % (name, len(shape), " ".join(str(d) for d in shape), vals)


def write(case, arrays, by="nn_layers.py"):
    path = os.path.join(OUT, case + ".txt")
    with open(path, "w") as f:
        f.write("# %s: written by tests/reference/%s (torch %s)\n" % (case, by, torch.__version__))
        for name, t in arrays:
            f.write(fmt(name, t))
    print("wrote", path, os.path.getsize(path), "bytes")


def randomize(module, gen):
    """Parameters away from their defaults (batch norm's ones/zeros hide mistakes)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def run(case, modules, x, forward, B, train=True, x_requires_grad=True, gen=None):
    """modules: dict name -> module; forward(x) -> y of shape (B, ...)."""
    sd = {}
    for mname, mod in modules.items():
        mod.train(train)
        for k, v in mod.state_dict().items():
            sd[mname + "." + k] = v.clone()
    x = x.clone()
    if x_requires_grad:
        x.requires_grad_(True)
    y = forward(x)
    dy = torch.randn(y.shape, generator=gen)
    y.backward(dy)
    arrays = [("x", x), ("dy", dy.reshape(B, -1)), ("y", y.reshape(B, -1))]
    if x_requires_grad:
        arrays.append(("dx", x.grad))
    for k, v in sd.items():
        arrays.append(("param." + k, v))
    for mname, mod in modules.items():
        for k, p in mod.named_parameters():
            arrays.append(("grad." + mname + "." + k, p.grad))
        for k, b in mod.named_buffers():
            arrays.append(("state." + mname + "." + k, b))
    write(case, arrays)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)  # module inits (embedding, cells) draw from the global generator
    g = torch.Generator().manual_seed(1234)

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    fc = nn.Linear(5, 4)
    randomize(fc, g)
    run("dense", {"fc": fc}, rnd(3, 5, 1, 1), lambda x: fc(x.reshape(3, -1)), 3, gen=g)

    conv = nn.Conv2d(3, 4, (3, 2), stride=2, padding=1, dilation=2)
    randomize(conv, g)
    run("conv2d", {"conv": conv}, rnd(2, 3, 7, 6), conv, 2, gen=g)

    conv = nn.Conv2d(2, 3, 3, stride=1, padding=1)
    randomize(conv, g)
    run("conv2d_b1", {"conv": conv}, rnd(1, 2, 5, 5), conv, 1, gen=g)

    convt = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
    randomize(convt, g)
    run("convt2d", {"convt": convt}, rnd(2, 3, 4, 5), convt, 2, gen=g)

    convt = nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1)
    randomize(convt, g)
    run("convt2d_b1", {"convt": convt}, rnd(1, 4, 3, 3), convt, 1, gen=g)

    run("maxpool2d", {}, rnd(2, 2, 5, 6), nn.MaxPool2d(3, 2, 1), 2, gen=g)
    run("avgpool2d", {}, rnd(2, 2, 5, 6), nn.AvgPool2d(3, 2, 1), 2, gen=g)

    for mode in ("train", "eval"):
        bn = nn.BatchNorm2d(3, eps=1e-5, momentum=0.1)
        randomize(bn, g)
        with torch.no_grad():
            bn.running_mean.copy_(rnd(3) * 0.3)
            bn.running_var.copy_(rnd(3).abs() + 0.5)
            bn.num_batches_tracked.fill_(5)
        run("bn2d_" + mode, {"bn": bn}, rnd(4, 3, 4, 5) * 2 + 0.5, bn, 4, train=(mode == "train"), gen=g)
        bn = nn.BatchNorm1d(6, eps=1e-3, momentum=0.3)
        randomize(bn, g)
        with torch.no_grad():
            bn.running_mean.copy_(rnd(6) * 0.3)
            bn.running_var.copy_(rnd(6).abs() + 0.5)
        run("bn1d_" + mode, {"bn": bn}, rnd(5, 6, 1, 1), lambda x, bn=bn: bn(x.reshape(5, 6)), 5,
            train=(mode == "train"), gen=g)

    ln = nn.LayerNorm([2, 3, 4], eps=1e-5)
    randomize(ln, g)
    run("layernorm", {"ln": ln}, rnd(3, 2, 3, 4), ln, 3, gen=g)
    ln = nn.LayerNorm(7, eps=1e-4)
    randomize(ln, g)
    run("layernorm1d", {"ln": ln}, rnd(3, 7, 1, 1), lambda x: ln(x.reshape(3, 7)), 3, gen=g)

    emb = nn.Embedding(10, 4)
    idx = torch.tensor([[3, 0, 9], [9, 1, 3], [2, 2, 5], [7, 3, 0]])
    run("embedding", {"emb": emb}, idx.to(torch.float64).reshape(4, 3, 1, 1),
        lambda x: emb(x.reshape(4, 3).long()).reshape(4, -1), 4, x_requires_grad=False, gen=g)

    acts = {
        "relu": F.relu,
        "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
        "elu": lambda x: F.elu(x, 0.7),
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "softmax": lambda x: F.softmax(x.reshape(3, -1), dim=1),
        "log_softmax": lambda x: F.log_softmax(x.reshape(3, -1), dim=1),
    }
    for name, f in acts.items():
        run("act_" + name, {}, rnd(3, 2, 2, 3) * 2, f, 3, gen=g)

    lstm = nn.LSTMCell(5, 4)

    def lstm_fwd(x):
        v = x.reshape(3, -1)
        h, c = lstm(v[:, :5], (v[:, 5:9], v[:, 9:13]))
        return torch.cat([h, c], dim=1)

    run("lstm_cell", {"lstm": lstm}, rnd(3, 13, 1, 1), lstm_fwd, 3, gen=g)

    # The LSTM cell unrolled over 3 steps with tied weights (backpropagation through
    # time): input [x1 x2 x3 | h0 | c0] with x_t of 2 features, hidden 3; output
    # [h2 c2 | h3 c3].
    cell = nn.LSTMCell(2, 3)

    def unrolled(x):
        v = x.reshape(2, -1)
        h, c = v[:, 6:9], v[:, 9:12]
        outs = []
        for t in range(3):
            h, c = cell(v[:, 2 * t:2 * t + 2], (h, c))
            outs.append(torch.cat([h, c], dim=1))
        return torch.cat(outs[1:], dim=1)

    run("lstm_unrolled", {"cell": cell}, rnd(2, 12, 1, 1), unrolled, 2, gen=g)

    gru = nn.GRUCell(5, 4)
    run("gru_cell", {"gru": gru}, rnd(3, 9, 1, 1),
        lambda x: gru(x.reshape(3, -1)[:, :5], x.reshape(3, -1)[:, 5:]), 3, gen=g)

    # A residual block, then flatten and dense: conv, batch norm (training), relu, add
    # (the input used twice), flatten, dense.
    c1 = nn.Conv2d(3, 3, 3, padding=1)
    bn1 = nn.BatchNorm2d(3)
    c2 = nn.Conv2d(3, 3, 3, padding=1)
    fc = nn.Linear(75, 2)
    for mod in (c1, bn1, c2, fc):
        randomize(mod, g)

    def res_fwd(x):
        h = F.relu(bn1(c1(x)))
        h = F.relu(c2(h) + x)
        return fc(h.reshape(2, -1))

    run("resblock", {"c1": c1, "bn1": bn1, "c2": c2, "fc": fc}, rnd(2, 3, 5, 5), res_fwd, 2, gen=g)

    # Slice, concat and reshape: [x[:, 1:4] | conv1x1(x)] -> tanh -> reshape -> dense.
    cv = nn.Conv2d(6, 2, 1)
    fc = nn.Linear(20, 3)
    for mod in (cv, fc):
        randomize(mod, g)

    def cat_fwd(x):
        h = torch.tanh(torch.cat([x[:, 1:4], cv(x)], dim=1))
        return fc(h.reshape(2, 10, 2, 1).reshape(2, -1))

    run("slice_concat", {"cv": cv, "fc": fc}, rnd(2, 6, 2, 2), cat_fwd, 2, gen=g)

    # Element-wise product of two branches of the same shape: fa(x) * tanh(fb(x)).
    fa, fb = nn.Linear(5, 4), nn.Linear(5, 4)
    for mod in (fa, fb):
        randomize(mod, g)
    run("mul", {"fa": fa, "fb": fb}, rnd(3, 5, 1, 1),
        lambda x: fa(x.reshape(3, -1)) * torch.tanh(fb(x.reshape(3, -1))), 3, gen=g)

    # The LSTM cell unrolled over 3 steps whose state is reset by a per-sample mask
    # before each step (an episode start): input [x1 x2 x3 | h0 | c0 | m1 m2 m3] with
    # x_t of 2 features, hidden 3; (h, c) <- (h, c) * m_t, then the cell; output
    # [h1 c1 | h2 c2 | h3 c3]. The masks mix 0 and 1 (and one 0.5, which checks the
    # product itself rather than a select).
    cell = nn.LSTMCell(2, 3)
    x = rnd(2, 15, 1, 1)
    x[:, 12:15, 0, 0] = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.5]])

    def masked(x):
        v = x.reshape(2, -1)
        s = v[:, 6:12]
        outs = []
        for t in range(3):
            s = s * v[:, 12 + t:13 + t]
            h, c = cell(v[:, 2 * t:2 * t + 2], (s[:, :3], s[:, 3:]))
            s = torch.cat([h, c], dim=1)
            outs.append(s)
        return torch.cat(outs, dim=1)

    run("lstm_masked", {"cell": cell}, x, masked, 2, gen=g)
    return 0


if __name__ == "__main__":
    sys.exit(main())
