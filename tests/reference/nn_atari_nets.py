#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Atari torsos of algos/torso.c (`nature`, Mnih et al. 2015; `impala`, Espeholt et
al. 2018's deep residual net, as CleanRL's ppo_atari builds it) as PyTorch 1.13 modules
(Debian's python3-torch), for tests/test_algos_torso.c.

    /usr/bin/python3 tests/reference/nn_atari_nets.py    # rewrites nn_atari_nets.txt

The weights are a formula both sides compute (so no megabytes of weights are stored):
tensor k of the list below, element j, is float32(s * sin(0.7071 j + 1.618 k)) with
s = 1/sqrt(fan_in) (a bias: 0.1), in Python's libm sin (C's) rather than NumPy's. The
input is B = 2 frames of 4x84x84 bytes (as floats 0..255) from another formula; the loss
is sum(y * r), r[j] = sin(0.3 j). Written per net:

    net NAME B F
    y B*F values                      the torso's output
    param NAME NUMEL SCALE            in the order k of the formula
    grad NAME SUM SUMABS v0 .. v31    dloss/dparam: its sum, sum of |.|, and the
                                      entries at (i * NUMEL) // 32, i = 0..31
"""

import math
import os

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
B = 2


class Res(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv0 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class Stage(nn.Module):
    def __init__(self, cin, ch):
        super().__init__()
        self.conv = nn.Conv2d(cin, ch, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.res0 = Res(ch)
        self.res1 = Res(ch)

    def forward(self, x):
        return self.res1(self.res0(self.pool(self.conv(x))))


class Impala(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage0 = Stage(4, 16)
        self.stage1 = Stage(16, 32)
        self.stage2 = Stage(32, 32)
        self.fc1 = nn.Linear(32 * 11 * 11, 256)

    def forward(self, x):
        x = self.stage2(self.stage1(self.stage0(x / 255.0)))
        return torch.relu(self.fc1(torch.relu(x).flatten(1)))


class Nature(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 32, 8, stride=4)
        self.conv2 = nn.Conv2d(32, 64, 4, stride=2)
        self.conv3 = nn.Conv2d(64, 64, 3, stride=1)
        self.fc1 = nn.Linear(3136, 512)

    def forward(self, x):
        x = x / 255.0
        x = torch.relu(self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x))))))
        return torch.relu(self.fc1(x.flatten(1)))


def fill(model):
    """Sets every parameter by the formula; returns [(name, numel, scale)]."""
    out = []
    for k, (name, p) in enumerate(model.named_parameters()):
        if name.endswith("bias"):
            s = 0.1
        else:
            s = 1.0 / math.sqrt(p[0].numel())
        vals = [s * math.sin(0.7071 * j + 1.618 * k) for j in range(p.numel())]
        with torch.no_grad():
            p.copy_(torch.tensor(vals, dtype=torch.float32).reshape(p.shape))
        out.append((name, p.numel(), s))
    return out


def frames():
    x = torch.empty((B, 4, 84, 84))
    for b in range(B):
        for c in range(4):
            for h in range(84):
                for w in range(84):
                    x[b, c, h, w] = (37 * b + 11 * c + 3 * h + 7 * w + (h * w) % 13) % 256
    return x


def main():
    torch.set_num_threads(1)
    x = frames()
    lines = []
    for name, model in (("nature", Nature()), ("impala", Impala())):
        params = fill(model)
        y = model(x)
        F = y.shape[1]
        r = torch.tensor([math.sin(0.3 * j) for j in range(B * F)]).reshape(B, F)
        (y * r).sum().backward()
        lines.append("net %s %d %d" % (name, B, F))
        lines.append("y %d %s" % (B * F, " ".join("%.9g" % v for v in y.detach().flatten())))
        for pname, n, s in params:
            lines.append("param %s %d %.17g" % (pname, n, s))
        for pname, p in model.named_parameters():
            g = p.grad.flatten().double()
            n = g.numel()
            pick = " ".join("%.9g" % g[(i * n) // 32].item() for i in range(32))
            lines.append("grad %s %.9g %.9g %s" % (pname, g.sum().item(), g.abs().sum().item(),
                                                  pick))
    with open(os.path.join(HERE, "nn_atari_nets.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
