#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Baseline for benchmarks/onpolicy_cartpole.c: CleanRL's ppo.py algorithm on PyTorch 1.13.

Gymnasium is not installable here, so CartPole-v1 is re-stated in NumPy from Gymnasium's
equations (as tests/reference/gym_classic.py does) and vectorised over the envs, with
the 500-step time limit and same-step auto-reset. The agent, the GAE, the update and
every hyperparameter follow CleanRL's ppo.py defaults (4 envs x 128 steps, 4 epochs of
4 minibatches, Adam lr 2.5e-4 annealed, eps 1e-5, gamma 0.99, lambda 0.95, clip 0.2 with
value clipping, entropy 0.01, value 0.5, max grad norm 0.5; separate 64-64 tanh actor
and critic with orthogonal init). One thread, as shoal's figure.

usage: onpolicy_cleanrl_torch.py STEPS SEED   -> prints one line:
  steps=N seconds=S return100=R first475=K   (first475: env steps at which the mean of
  the last 100 training episodes first reached 475, or -1)
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn


class CartPoleVec:
    def __init__(self, n, seed):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.state = self.rng.uniform(-0.05, 0.05, size=(n, 4))
        self.t = np.zeros(n, dtype=np.int64)
        self.ret = np.zeros(n)

    def step(self, action):
        x, x_dot, th, th_dot = self.state.T
        force = np.where(action == 1, 10.0, -10.0)
        c, s = np.cos(th), np.sin(th)
        temp = (force + 0.05 * th_dot**2 * s) / 1.1
        thacc = (9.8 * s - c * temp) / (0.5 * (4.0 / 3.0 - 0.1 * c**2 / 1.1))
        xacc = temp - 0.05 * thacc * c / 1.1
        x = x + 0.02 * x_dot
        x_dot = x_dot + 0.02 * xacc
        th = th + 0.02 * th_dot
        th_dot = th_dot + 0.02 * thacc
        self.state = np.stack([x, x_dot, th, th_dot], axis=1)
        self.t += 1
        self.ret += 1.0
        term = (x < -2.4) | (x > 2.4) | (th < -12 * 2 * math.pi / 360) | (th > 12 * 2 * math.pi / 360)
        trunc = (self.t >= 500) & ~term
        done = term | trunc
        finished = list(self.ret[done])
        if done.any():
            k = int(done.sum())
            self.state[done] = self.rng.uniform(-0.05, 0.05, size=(k, 4))
            self.t[done] = 0
            self.ret[done] = 0
        return self.state.astype(np.float32), np.ones(self.n, np.float32), done, finished


def layer_init(layer, std=np.sqrt(2), bias=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias)
    return layer


class Agent(nn.Module):
    # CartPole's sizes by default; benchmarks/peers/learning_peers.py passes LunarLander's
    def __init__(self, obs_dim=4, n_actions=2):
        super().__init__()
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 1), std=1.0))
        self.actor = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                                   layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                   layer_init(nn.Linear(64, n_actions), std=0.01))

    def value(self, x):
        return self.critic(x)

    def act(self, x, a=None):
        dist = torch.distributions.Categorical(logits=self.actor(x))
        if a is None:
            a = dist.sample()
        return a, dist.log_prob(a), dist.entropy(), self.critic(x)


def gae(rews, vals, dones, next_value, next_done, gamma, lam):
    """CleanRL's GAE(lambda) over (T, N) rollouts: the advantages and the returns."""
    T = rews.shape[0]
    adv = torch.zeros_like(rews)
    last = 0
    for t in reversed(range(T)):
        if t == T - 1:
            nnt, nvals = 1.0 - next_done, next_value
        else:
            nnt, nvals = 1.0 - dones[t + 1], vals[t + 1]
        delta = rews[t] + gamma * nvals * nnt - vals[t]
        adv[t] = last = delta + gamma * lam * nnt * last
    return adv, adv + vals


def ppo_update(agent, opt, b_obs, b_lp, b_a, b_adv, b_ret, b_v, epochs, mbs, clip, ent, vf,
               mgn):
    """CleanRL's update: epochs of shuffled minibatches, the clipped objective with
    normalised advantages, the clipped value loss, entropy, the global grad-norm clip."""
    batch = b_obs.shape[0]
    inds = np.arange(batch)
    for _ in range(epochs):
        np.random.shuffle(inds)
        for s in range(0, batch, mbs):
            mb = inds[s:s + mbs]
            _, nlp, entr, nval = agent.act(b_obs[mb], b_a.long()[mb])
            ratio = (nlp - b_lp[mb]).exp()
            ma = b_adv[mb]
            ma = (ma - ma.mean()) / (ma.std() + 1e-8)
            pg = torch.max(-ma * ratio, -ma * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
            nval = nval.view(-1)
            vu = (nval - b_ret[mb]) ** 2
            vc = b_v[mb] + torch.clamp(nval - b_v[mb], -clip, clip)
            vl = 0.5 * torch.max(vu, (vc - b_ret[mb]) ** 2).mean()
            loss = pg - ent * entr.mean() + vf * vl
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), mgn)
            opt.step()


def main():
    total = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    N, T, MB, EP = 4, 128, 4, 4
    lr0, gamma, lam, clip, ent, vf, mgn = 2.5e-4, 0.99, 0.95, 0.2, 0.01, 0.5, 0.5
    batch = N * T
    mbs = batch // MB
    iters = total // batch
    env = CartPoleVec(N, seed)
    agent = Agent()
    opt = torch.optim.Adam(agent.parameters(), lr=lr0, eps=1e-5)
    obs = torch.zeros((T, N, 4))
    acts = torch.zeros((T, N))
    logps = torch.zeros((T, N))
    rews = torch.zeros((T, N))
    dones = torch.zeros((T, N))
    vals = torch.zeros((T, N))
    next_obs = torch.tensor(env.state, dtype=torch.float32)
    next_done = torch.zeros(N)
    returns_log = []
    first475 = -1
    steps = 0
    t0 = time.time()
    for it in range(1, iters + 1):
        opt.param_groups[0]["lr"] = (1.0 - (it - 1.0) / iters) * lr0
        for t in range(T):
            steps += N
            obs[t] = next_obs
            dones[t] = next_done
            with torch.no_grad():
                a, lp, _, v = agent.act(next_obs)
            vals[t] = v.flatten()
            acts[t] = a
            logps[t] = lp
            o, r, d, fin = env.step(a.numpy())
            rews[t] = torch.from_numpy(r)
            next_obs = torch.from_numpy(o)
            next_done = torch.from_numpy(d.astype(np.float32))
            returns_log.extend(fin)
            if first475 < 0 and len(returns_log) >= 100 and np.mean(returns_log[-100:]) >= 475:
                first475 = steps
        with torch.no_grad():
            adv, rets = gae(rews, vals, dones, agent.value(next_obs).reshape(1, -1), next_done,
                            gamma, lam)
        ppo_update(agent, opt, obs.reshape(-1, 4), logps.reshape(-1), acts.reshape(-1),
                   adv.reshape(-1), rets.reshape(-1), vals.reshape(-1), EP, mbs, clip, ent, vf,
                   mgn)
    sec = time.time() - t0
    r100 = float(np.mean(returns_log[-100:])) if returns_log else float("nan")
    print(f"steps={steps} seconds={sec:.3f} return100={r100:.1f} first475={first475}")


if __name__ == "__main__":
    main()
