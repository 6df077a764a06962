#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Reference values for tests/test_nn_custom.c, from PyTorch (Debian's python3-torch 1.13):
the custom layers of that test written as torch.nn.Modules.

Run with /usr/bin/python3 from the repository root:
    /usr/bin/python3 tests/reference/nn_custom.py
It writes tests/reference/nn_layers/custom_*.txt in the format of nn_layers.py (one array a
line: name, ndim, dims, values; float64, 17 digits): x, dy, y, dx, param.<tensor> (loaded
into the C model before the forward, the noise buffers too) and grad.<tensor>.

  NoisyLinear  Fortunato et al. 2018's factorised noisy linear layer, as
               examples/noisy_net/noisy_linear.c implements it: tensors weight_mu,
               weight_sigma (out, in), bias_mu, bias_sigma (out), buffers eps_in (in),
               eps_out (out); y = x (mu_w + sigma_w * f(eps_out) f(eps_in)^T)^T + mu_b +
               sigma_b * f(eps_out), f(e) = sign(e) sqrt(|e|); in eval mode the mean
               network (no noise).
  GLU          torch.nn.functional.glu over the feature axis: first half times the
               sigmoid of the second.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import nn_layers  # the fixture format, written by its write()

torch.set_default_dtype(torch.float64)


def write(case, arrays):
    nn_layers.write(case, arrays, by="nn_custom.py")


class NoisyLinear(nn.Module):
    def __init__(self, n_in, n_out, sigma0=0.5):
        super().__init__()
        self.weight_mu = nn.Parameter(torch.empty(n_out, n_in))
        self.weight_sigma = nn.Parameter(torch.full((n_out, n_in), sigma0 / n_in ** 0.5))
        self.bias_mu = nn.Parameter(torch.empty(n_out))
        self.bias_sigma = nn.Parameter(torch.full((n_out,), sigma0 / n_in ** 0.5))
        self.register_buffer("eps_in", torch.zeros(n_in))
        self.register_buffer("eps_out", torch.zeros(n_out))
        bound = 1 / n_in ** 0.5
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)

    @staticmethod
    def f(e):
        return e.sign() * e.abs().sqrt()

    def forward(self, x):
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        fi, fo = self.f(self.eps_in), self.f(self.eps_out)
        w = self.weight_mu + self.weight_sigma * torch.outer(fo, fi)
        b = self.bias_mu + self.bias_sigma * fo
        return F.linear(x, w, b)


def noisy_case(case, train, gen):
    B, n_in, n_out = 3, 5, 4
    m = NoisyLinear(n_in, n_out)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
        m.eps_in.copy_(torch.randn(n_in, generator=gen))
        m.eps_out.copy_(torch.randn(n_out, generator=gen))
    m.train(train)
    sd = {"noisy." + k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(B, n_in, generator=gen).requires_grad_(True)
    y = m(x)
    dy = torch.randn(y.shape, generator=gen)
    y.backward(dy)
    arrays = [("x", x), ("dy", dy), ("y", y), ("dx", x.grad)]
    arrays += [("param." + k, v) for k, v in sd.items()]
    # in eval mode sigma takes no part in the output: torch leaves its grad None, a zero
    arrays += [("grad.noisy." + k, p.grad if p.grad is not None else torch.zeros_like(p))
               for k, p in m.named_parameters()]
    write(case, arrays)


def glu_case(gen):
    B, n = 3, 8
    x = torch.randn(B, n, generator=gen).requires_grad_(True)
    y = F.glu(x, dim=1)
    dy = torch.randn(y.shape, generator=gen)
    y.backward(dy)
    write("custom_glu", [("x", x), ("dy", dy), ("y", y), ("dx", x.grad)])


def main():
    gen = torch.Generator().manual_seed(43)
    noisy_case("custom_noisy_train", True, gen)
    noisy_case("custom_noisy_eval", False, gen)
    glu_case(gen)


if __name__ == "__main__":
    main()
