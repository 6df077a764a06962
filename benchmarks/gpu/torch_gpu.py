#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch eager on the same GPU: the steps benchmarks/gpu/nn_gpu.c times, written the
way a PyTorch user writes them (default Adam, clip_grad_norm_, zero_grad(set_to_none)).

TF32 is off in both (shoal computes in plain FP32, cuDNN FMA math); cudnn.benchmark is
on, as shoal times its convolution algorithms at build. Batches stay on the device.
Prints "RESULT <net> <B> <steps/s>" per row (median of --repeats windows).
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True


def rate(step, window, repeats):
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            step()
            n += 1
            if time.perf_counter() - t0 >= window and n >= 3:
                break
        torch.cuda.synchronize()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def mlp():
    return nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 2))


def nature():
    return nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                         nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 6))


def dqn_step_fn(make, shape, A, B):
    """Target forward on s', Q(s), Huber against a (B, A) target, clip 10, Adam."""
    q, target = make().to(dev), make().to(dev)
    target.load_state_dict(q.state_dict())
    target.eval()
    opt = torch.optim.Adam(q.parameters(), lr=1e-4)
    s = torch.randn(B, *shape, device=dev)
    s2 = torch.randn(B, *shape, device=dev)
    y = torch.randn(B, A, device=dev)

    def step():
        with torch.no_grad():
            target(s2)
        loss = F.huber_loss(q(s), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(q.parameters(), 10.0)
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
    """A D step on real and G(z).detach(), then a G step through D."""
    gen, dis = G().to(dev), D().to(dev)
    og = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    od = torch.optim.Adam(dis.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.rand(B, 1, 28, 28, device=dev) * 2 - 1
    z = torch.randn(B, 100, device=dev)
    ones, zeros = torch.ones(B, 1, device=dev), torch.zeros(B, 1, device=dev)
    bce = F.binary_cross_entropy_with_logits

    def step():
        fake = gen(z)
        od.zero_grad(set_to_none=True)
        ld = bce(dis(real), ones) + bce(dis(fake.detach()), zeros)
        ld.backward()
        od.step()
        og.zero_grad(set_to_none=True)
        lg = bce(dis(fake), ones)
        lg.backward()
        og.step()
    return step


CASES = [("mlp", 256), ("mlp", 4096), ("nature", 32), ("nature", 256), ("dcgan", 64),
         ("dcgan", 512)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", default="mlp,nature,dcgan")
    a = ap.parse_args()
    rows = a.rows.split(",")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    for net, B in CASES:
        if net not in rows:
            continue
        if net == "dcgan":
            step = dcgan_fn(B)
        else:
            step = dqn_step_fn(mlp if net == "mlp" else nature,
                               (4,) if net == "mlp" else (4, 84, 84), 2 if net == "mlp" else 6, B)
        r = rate(step, a.window, a.repeats)
        print(f"RESULT {net} {B} {r:.3f}", flush=True)
        del step
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
