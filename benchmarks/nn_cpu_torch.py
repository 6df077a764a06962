#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch side of benchmarks/nn_cpu: the same models, batches and steps as shoal's,
timed the same way (time-bounded windows, median).

    OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 python3 nn_cpu_torch.py --threads n
    OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 python3 nn_cpu_torch.py --serve --threads n

With --serve (how bench nn_cpu runs it, through $SHOAL_PYTHON) it prints READY, then
answers each request line "<row> <window seconds>" with "RATE <calls/s>" for one window,
so that the C side can alternate its windows with torch's.

Threads: torch.set_num_threads(n) for torch's own pool and OpenBLAS held at 1 thread:
two pools of n threads on 2 cores run small nets slower and erratically
(measured with PyTorch 1.13 on 2 cores: docs/benchmarks.md), so torch owns the one pool. OMP_NUM_THREADS is left unset:
set in the environment it made torch's 2-thread figures 2-4x worse here. Passive OpenMP
waiting keeps torch's 2-thread figures from collapsing when the shared machine is busy.
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, window, repeats, min_iters=2):
    """Median rate (calls/s) over `repeats` windows of at least `window` seconds."""
    fn()  # warm-up: allocations, first-call paths
    rates = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= window and n >= min_iters:
                break
        rates.append(n / dt)
    return statistics.median(rates)


def mlp():
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 2))


def minatar():
    return nn.Sequential(nn.Conv2d(4, 16, 3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(16 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 6))


def nature():
    return nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 6))


class Res(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv0 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def impala():
    """algos/torso.c's `impala` (Espeholt et al. 2018), x/255 first, then 6 Q-values."""
    layers = []
    cin = 4
    for ch in (16, 32, 32):
        layers += [nn.Conv2d(cin, ch, 3, padding=1), nn.MaxPool2d(3, 2, padding=1), Res(ch),
                   Res(ch)]
        cin = ch
    class Scale(nn.Module):
        def forward(self, x):
            return x / 255.0
    return nn.Sequential(Scale(), *layers, nn.ReLU(), nn.Flatten(), nn.Linear(32 * 11 * 11, 256),
                         nn.ReLU(), nn.Linear(256, 6))


def dqn_step_fn(make, shape, A, B):
    """One DQN learner step: target forward on s', Q(s, a), Huber, backward, Adam."""
    g = torch.Generator().manual_seed(0)
    q, target = make(), make()
    target.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=1e-4)
    s = torch.randn(B, *shape, generator=g)
    s2 = torch.randn(B, *shape, generator=g)
    a = torch.randint(0, A, (B, 1), generator=g)
    r = torch.randn(B, generator=g)
    done = (torch.rand(B, generator=g) < 0.1).float()

    def step():
        with torch.no_grad():
            y = r + 0.99 * (1 - done) * target(s2).max(1)[0]
        qa = q(s).gather(1, a).squeeze(1)
        loss = F.huber_loss(qa, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


class G(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 7 * 7 * 128)
        self.bn0 = nn.BatchNorm2d(128)
        self.ct1 = nn.ConvTranspose2d(128, 64, 4, 2, 1)
        self.bn1 = nn.BatchNorm2d(64)
        self.ct2 = nn.ConvTranspose2d(64, 1, 4, 2, 1)

    def forward(self, z):
        x = F.relu(self.bn0(self.fc(z).view(-1, 128, 7, 7)))
        x = F.relu(self.bn1(self.ct1(x)))
        return torch.tanh(self.ct2(x))


class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 64, 4, 2, 1)
        self.c2 = nn.Conv2d(64, 128, 4, 2, 1)
        self.bn2 = nn.BatchNorm2d(128)
        self.fc = nn.Linear(128 * 7 * 7, 1)

    def forward(self, x):
        x = F.leaky_relu(self.c1(x), 0.2)
        x = F.leaky_relu(self.bn2(self.c2(x)), 0.2)
        return self.fc(x.flatten(1))


def dcgan_fn(B):
    """One GAN iteration: a D step on real and G(z).detach(), then a G step through D."""
    g = torch.Generator().manual_seed(0)
    gen, dis = G(), D()
    og = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    od = torch.optim.Adam(dis.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.rand(B, 1, 28, 28, generator=g) * 2 - 1
    z = torch.randn(B, 100, generator=g)
    ones, zeros = torch.ones(B, 1), torch.zeros(B, 1)
    bce = F.binary_cross_entropy_with_logits

    def step():
        fake = gen(z)
        od.zero_grad()
        ld = bce(dis(real), ones) + bce(dis(fake.detach()), zeros)
        ld.backward()
        od.step()
        og.zero_grad()
        lg = bce(dis(fake), ones)
        lg.backward()
        og.step()
    return step


def act_fn(B):
    g = torch.Generator().manual_seed(0)
    q = mlp().eval()
    x = torch.randn(B, 4, generator=g)

    def act():
        with torch.no_grad():
            return q(x).argmax(1)
    return act


ROWS = {
    "mlp_train": lambda: dqn_step_fn(mlp, (4,), 2, 256),
    "minatar_train": lambda: dqn_step_fn(minatar, (4, 10, 10), 6, 32),
    "nature_train": lambda: dqn_step_fn(nature, (4, 84, 84), 6, 32),
    "impala_train": lambda: dqn_step_fn(impala, (4, 84, 84), 6, 32),
    "dcgan_train": lambda: dcgan_fn(64),
    "act_b1": lambda: act_fn(1),
    "act_b16": lambda: act_fn(16),
    "act_b256": lambda: act_fn(256),
}


def serve():
    cache = {}
    print("READY", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        name, window = parts[0], float(parts[1])
        if name not in cache:
            cache[name] = ROWS[name]()
            cache[name]()  # warm-up
        fn = cache[name]
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= window and n >= 2:
                break
        print(f"RATE {n / dt:.6g}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--window", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", default="mlp,minatar,nature,impala,dcgan,act")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.serve:
        serve()
        return
    rows = args.rows.split(",")
    w, k = args.window, args.repeats
    out = []
    if "mlp" in rows:
        out.append(("mlp_train", timed(dqn_step_fn(mlp, (4,), 2, 256), w, k)))
    if "minatar" in rows:
        out.append(("minatar_train", timed(dqn_step_fn(minatar, (4, 10, 10), 6, 32), w, k)))
    if "nature" in rows:
        out.append(("nature_train", timed(dqn_step_fn(nature, (4, 84, 84), 6, 32), w, k)))
    if "impala" in rows:
        out.append(("impala_train", timed(dqn_step_fn(impala, (4, 84, 84), 6, 32), w, k)))
    if "dcgan" in rows:
        out.append(("dcgan_train", timed(dcgan_fn(64), w, k)))
    if "act" in rows:
        for B in (1, 16, 256):
            out.append((f"act_b{B}", B * timed(act_fn(B), w, k)))
    for name, v in out:
        print(f"TORCH {name} {v:.6g}", flush=True)
    print(f"TORCH version {torch.__version__} threads {torch.get_num_threads()}", file=sys.stderr)


if __name__ == "__main__":
    main()
