#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reference values for shoal's losses and optimizers (tests/test_nn_train.c) and
safetensors interoperability fixtures (tests/test_nn_checkpoint.c), from PyTorch 1.13.

    /usr/bin/python3 tests/reference/nn_train.py            # rewrites tests/reference/nn_train/
    /usr/bin/python3 tests/reference/nn_train.py check FILE # reads a shoal checkpoint

Fixture format (text, so a diff shows what changed): one array per line,
    name count v0 v1 ...
floats written with 9 significant digits (exact round trip for float32).
"""
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "nn_train")


class Fixture:
    def __init__(self, path):
        self.path = path
        self.lines = []

    def put(self, name, values):
        a = np.asarray(values.detach() if torch.is_tensor(values) else values,
                       dtype=np.float64).ravel()
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: non-finite reference")
        self.lines.append(name + " " + str(a.size) + " " +
                          " ".join("%.9g" % v for v in a))

    def write(self):
        with open(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\n")


def losses(fx):
    g = torch.Generator().manual_seed(1)
    B, N, C = 6, 5, 4
    pred = torch.randn(B, N, generator=g) * 2
    target = torch.randn(B, N, generator=g) * 2
    w = torch.rand(B, generator=g) + 0.25
    fx.put("reg.pred", pred)
    fx.put("reg.target", target)
    fx.put("reg.w", w)
    F = torch.nn.functional
    for wname, ww in (("", None), (".w", w)):
        def reduce(l):  # (B, N) elementwise -> shoal's weighted mean
            if ww is not None:
                l = l * ww[:, None]
            return l.sum() / (B * N)
        for name, fn in (("mse", lambda p: F.mse_loss(p, target, reduction="none")),
                         ("huber1", lambda p: F.huber_loss(p, target, reduction="none", delta=1.0)),
                         ("huber05", lambda p: F.huber_loss(p, target, reduction="none", delta=0.5))):
            p = pred.clone().requires_grad_()
            loss = reduce(fn(p))
            if ww is None:  # shoal's unweighted loss is PyTorch's "mean" exactly
                ref = {"mse": F.mse_loss(pred, target),
                       "huber1": F.huber_loss(pred, target, delta=1.0),
                       "huber05": F.huber_loss(pred, target, delta=0.5)}[name]
                assert torch.allclose(ref, loss.detach())
            loss.backward()
            fx.put(name + wname + ".loss", [loss.item()])
            fx.put(name + wname + ".grad", p.grad)

    # binary cross-entropy with logits, with large logits to exercise stability
    logits = torch.randn(B, N, generator=g) * 3
    logits[0, 0], logits[1, 1], logits[2, 2] = 40.0, -40.0, 90.0
    tgt = torch.rand(B, N, generator=g)
    tgt[0, 1] = 0.0
    tgt[1, 2] = 1.0
    fx.put("bce.logits", logits)
    fx.put("bce.target", tgt)
    for wname, ww in (("", None), (".w", w)):
        p = logits.clone().requires_grad_()
        l = F.binary_cross_entropy_with_logits(p, tgt, reduction="none")
        if ww is not None:
            l = l * ww[:, None]
        loss = l.sum() / (B * N)
        loss.backward()
        fx.put("bce" + wname + ".loss", [loss.item()])
        fx.put("bce" + wname + ".grad", p.grad)

    # cross-entropy with class indices and with soft targets
    x = torch.randn(B, C, generator=g) * 2
    x[3] += 50.0  # a row far from 0: log-sum-exp must shift
    labels = torch.randint(0, C, (B,), generator=g)
    probs = torch.softmax(torch.randn(B, C, generator=g), dim=1)
    fx.put("ce.logits", x)
    fx.put("ce.labels", labels.double())
    fx.put("ce.probs", probs)
    for wname, ww in (("", None), (".w", w)):
        for name, tg in (("ce", labels), ("ces", probs)):
            p = x.clone().requires_grad_()
            l = F.cross_entropy(p, tg, reduction="none")
            if ww is not None:
                l = l * ww
            loss = l.sum() / B
            loss.backward()
            fx.put(name + wname + ".loss", [loss.item()])
            fx.put(name + wname + ".grad", p.grad)


def f32(x):
    """Hyperparameters as shoal holds them (float32), so both sides start from the same
    numbers; torch then does its scalar arithmetic in double, as shoal does."""
    return float(np.float32(x))


OPTIMS = [
    # name, constructor, clip norm (0: none)
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=f32(0.1)), 0.0),
    ("sgd_mom", lambda ps: torch.optim.SGD(ps, lr=f32(0.05), momentum=f32(0.9),
                                           weight_decay=f32(0.01)), 0.0),
    ("sgd_damp", lambda ps: torch.optim.SGD(ps, lr=f32(0.05), momentum=f32(0.8),
                                            dampening=f32(0.3)), 0.0),
    ("sgd_nesterov", lambda ps: torch.optim.SGD(ps, lr=f32(0.05), momentum=f32(0.9),
                                                nesterov=True, weight_decay=f32(0.001)), 0.0),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=f32(0.01), betas=(f32(0.9), f32(0.999)),
                                         eps=f32(1e-8)), 0.0),
    ("adam_wd", lambda ps: torch.optim.Adam(ps, lr=f32(0.01), betas=(f32(0.8), f32(0.99)),
                                            eps=f32(1e-6), weight_decay=f32(0.05)), 0.0),
    ("adam_clip", lambda ps: torch.optim.Adam(ps, lr=f32(0.01), betas=(f32(0.9), f32(0.999)),
                                              eps=f32(1e-8)), 1.5),
    ("adamw", lambda ps: torch.optim.AdamW(ps, lr=f32(0.01), betas=(f32(0.9), f32(0.999)),
                                           eps=f32(1e-8), weight_decay=f32(0.1)), 0.0),
    ("rmsprop", lambda ps: torch.optim.RMSprop(ps, lr=f32(0.01), alpha=f32(0.99),
                                               eps=f32(1e-8)), 0.0),
    ("rmsprop_full", lambda ps: torch.optim.RMSprop(ps, lr=f32(0.005), alpha=f32(0.9),
                                                    eps=f32(1e-6), weight_decay=f32(0.01),
                                                    momentum=f32(0.5), centered=True), 0.0),
    ("sgd_clip", lambda ps: torch.optim.SGD(ps, lr=f32(0.1), momentum=f32(0.9)), 0.5),
]
STEPS = 10


def optimizers(fx):
    g = torch.Generator().manual_seed(2)
    # two tensors, as a model's flat buffer holds several; shoal sees them concatenated
    shapes = [(5, 4), (7,)]
    p0 = [torch.randn(*s, generator=g) for s in shapes]
    grads = [[torch.randn(*s, generator=g) * (1 + t) for s in shapes] for t in range(STEPS)]
    fx.put("opt.p0", torch.cat([p.ravel() for p in p0]))
    for t in range(STEPS):
        fx.put(f"opt.g{t}", torch.cat([x.ravel() for x in grads[t]]))
    for name, make, clip in OPTIMS:
        ps = [p.clone().requires_grad_() for p in p0]
        opt = make(ps)
        for t in range(STEPS):
            for p, gr in zip(ps, grads[t]):
                p.grad = gr.clone()
            if clip > 0:
                norm = torch.nn.utils.clip_grad_norm_(ps, clip)
                fx.put(f"{name}.norm{t}", [norm.item()])
            opt.step()
            fx.put(f"{name}.p{t}", torch.cat([p.detach().ravel() for p in ps]))


# ---- safetensors, by its specification (Debian has no safetensors package) ----------

def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        a = np.frombuffer(data[b:e], dtype="<f4").reshape(info["shape"])
        out[name] = a
    return out, meta


def st_write(path, tensors, metadata=None, order=None):
    """Writes tensors (name -> float32 array); data in `order` (default: reversed names,
    unlike shoal's own layout, so the reader cannot rely on order)."""
    names = order or sorted(tensors, reverse=True)
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in names:
        a = np.asarray(tensors[name])
        # (np.ascontiguousarray would turn a scalar into shape (1,))
        a = np.array(a, dtype="<i8" if a.dtype == np.int64 else "<f4", order="C")
        header[name] = {"dtype": "I64" if a.dtype == np.int64 else "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Net(torch.nn.Module):
    """The model of test_nn_checkpoint.c: dense 6 -> 8, batch norm 1-d, relu, dense 3."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.bn1 = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.relu(self.bn1(self.fc1(x))))


def checkpoint_fixture(fx):
    torch.manual_seed(3)
    net = Net()
    net.train()
    for _ in range(3):  # move the running statistics away from 0 and 1
        net(torch.randn(16, 6) * 2 + 1)
    net.eval()
    x = torch.randn(4, 6)
    y = net(x)
    sd = {k: v.float().numpy() for k, v in net.state_dict().items()
          if k != "bn1.num_batches_tracked"}
    # shoal keeps num_batches_tracked as an F32 scalar (shape [], as torch's int64 one)
    sd["bn1.num_batches_tracked"] = np.array(3.0, dtype=np.float32)
    st_write(os.path.join(OUT, "torch_net.safetensors"), sd,
             metadata={"format": "pt", "producer": "tests/reference/nn_train.py"})
    fx.put("ck.x", x)
    fx.put("ck.y", y)
    for k in sorted(sd):
        fx.put("ck." + k, sd[k])
    # the same weights as PyTorch itself would write them: num_batches_tracked as I64
    sd64 = dict(sd)
    sd64["bn1.num_batches_tracked"] = np.array(3, dtype=np.int64)
    st_write(os.path.join(OUT, "torch_net_i64.safetensors"), sd64, metadata={"format": "pt"})


class ConvNet(torch.nn.Module):
    """test_nn_checkpoint.c's conv model: 4-D weights, batch norm 2-d and a transposed
    convolution, whose weight torch lays out as (in, out, kh, kw)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, 1, 1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.convt = torch.nn.ConvTranspose2d(4, 2, 4, 2, 1)
        self.fc = torch.nn.Linear(2 * 12 * 12, 3)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.convt(x).flatten(1))


def conv_fixture(fx):
    torch.manual_seed(4)
    net = ConvNet()
    net.train()
    for _ in range(2):
        net(torch.randn(8, 1, 6, 6) + 0.5)
    net.eval()
    x = torch.randn(2, 1, 6, 6)
    y = net(x)
    sd = {k: v.float().numpy() for k, v in net.state_dict().items()}
    st_write(os.path.join(OUT, "torch_convnet.safetensors"), sd, metadata={"format": "pt"})
    fx.put("cv.x", x)
    fx.put("cv.y", y)


def check(path, expected=None):
    """Reads a shoal-written file; prints the names and shapes, and, when a fixture
    written by test_nn_checkpoint.c is given, compares every value exactly."""
    tensors, meta = st_read(path)
    for k, v in tensors.items():
        print(k, list(v.shape))
    if expected:
        ref = {}
        with open(expected) as f:
            for line in f:
                parts = line.split()
                ref[parts[0]] = np.array([float(s) for s in parts[2:]], dtype=np.float32)
        assert set(ref) == set(tensors), (sorted(ref), sorted(tensors))
        for k in ref:
            assert np.array_equal(ref[k], tensors[k].ravel()), k
        # and torch loads the weights into the same architecture
        net = Net()
        sd = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
        sd["bn1.num_batches_tracked"] = sd["bn1.num_batches_tracked"].long()
        net.load_state_dict(sd)
    print("ok", meta)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
        return
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    fx = Fixture(os.path.join(OUT, "losses.txt"))
    losses(fx)
    fx.write()
    fx = Fixture(os.path.join(OUT, "optim.txt"))
    optimizers(fx)
    fx.write()
    fx = Fixture(os.path.join(OUT, "checkpoint.txt"))
    checkpoint_fixture(fx)
    conv_fixture(fx)
    fx.write()


if __name__ == "__main__":
    main()
