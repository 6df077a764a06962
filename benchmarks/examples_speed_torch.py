#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch side of benchmarks/examples_speed: the models of examples/classify.c and
examples/dcgan.c, fed the same Fashion-MNIST minibatches, timed in windows on request.

    OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 python3 examples_speed_torch.py --threads n

It prints READY, then answers each line "<row> <window seconds>" (row: classify or dcgan)
with "RATE <steps/s>" for one window of training steps, so the C side alternates its
windows with torch's. Threads as in benchmarks/nn_cpu_torch.py: torch's own pool at n,
OpenBLAS at 1.
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load(split):
    d = os.environ.get("SHOAL_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read()[16:], np.uint8).reshape(-1, 1, 28, 28)
    with gzip.open(f"{d}/{split}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read()[8:], np.uint8)
    return torch.tensor(x, dtype=torch.float32) / 255, torch.tensor(y, dtype=torch.long)


class Batches:
    """Shuffled minibatches, a fresh permutation each epoch, as data_loader gives them."""

    def __init__(self, x, y, B):
        self.x, self.y, self.B, self.i, self.perm = x, y, B, 0, None

    def next(self):
        n = self.x.shape[0] // self.B
        if self.perm is None or self.i == n:
            self.perm, self.i = torch.randperm(self.x.shape[0]), 0
        idx = self.perm[self.i * self.B:(self.i + 1) * self.B]
        self.i += 1
        return self.x[idx], self.y[idx]


def classifier():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(), nn.Dropout(0.3), nn.Linear(256, 10))


def classify_fn(x, y):
    m = classifier()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    data = Batches((x - 0.2860) / 0.3530, y, 64)

    def step():
        xb, yb = data.next()
        loss = F.cross_entropy(m(xb), yb)
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


def dcgan_fn(x, y):
    B = 64
    gen = G()
    dis = nn.Sequential(nn.Conv2d(1, 64, 4, 2, 1), nn.LeakyReLU(0.2),
                        nn.Conv2d(64, 128, 4, 2, 1), nn.BatchNorm2d(128), nn.LeakyReLU(0.2),
                        nn.Flatten(), nn.Linear(128 * 7 * 7, 1))
    og = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    od = torch.optim.Adam(dis.parameters(), lr=2e-4, betas=(0.5, 0.999))
    data = Batches(x * 2 - 1, y, B)
    ones, zeros = torch.ones(B, 1), torch.zeros(B, 1)
    bce = F.binary_cross_entropy_with_logits

    def step():
        real, _ = data.next()
        fake = gen(torch.randn(B, 100))
        od.zero_grad()
        ld = bce(dis(real), ones) + bce(dis(fake.detach()), zeros)
        ld.backward()
        od.step()
        og.zero_grad()
        lg = bce(dis(fake), ones)
        lg.backward()
        og.step()
    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, y = load("train")
    rows, cache = {"classify": classify_fn, "dcgan": dcgan_fn}, {}
    print("READY", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        name, window = parts[0], float(parts[1])
        if name not in cache:
            cache[name] = rows[name](x, y)
            cache[name]()  # warm-up
        fn, n, t0 = cache[name], 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= window and n >= 2:
                break
        print(f"RATE {n / dt:.6g}", flush=True)


if __name__ == "__main__":
    main()
