#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""CleanRL's ppo_atari_envpool.py, restated here on torch 2 and EnvPool (the peers' venv,
benchmarks/peers/setup.sh), for Pong beside shoal's Atari configs at equal wall time.

The algorithm and every setting are CleanRL's defaults: EnvPool's Pong-v5 with its own
preprocessing (no-op starts 30, frame skip 4 with max-pool, 84x84 gray, stack 4, episodic
life, reward clipping; EnvPool's v5 has no sticky actions), 8 envs x 128 steps, GAE
λ 0.95, γ 0.99, 4 epochs of 4 minibatches, clip 0.1 with value clipping, normalised
advantages, entropy 0.01, value 0.5, Adam 2.5e-4 (eps 1e-5) annealed linearly over
10M env steps, gradient-norm clip 0.5; the Nature network (conv 32 8x8/4, 64 4x4/2,
64 3x3/1, dense 512) shared by a policy head (orthogonal, gain 0.01) and a value head
(gain 1), the torso's gain √2, x/255 first. Only the stopping rule is ours: a wall-clock
budget (--seconds) instead of total_timesteps, the learning-rate schedule kept as if
the run went on to 10M steps.

The returns are the game's: summed raw rewards over a whole game (all lives), as CleanRL's
RecordEpisodeStatistics counts them. One line per finished game:
  GAME wall_s=<s> frames=<emulator frames> return=<score>
and at the end
  PEER name=cleanrl_ppo_atari seconds=<s> frames=<n> games=<n> return100=<mean of the
       last 100 games, or all> sps=<env steps/s>

With --csv FILE it also writes the curve as `shoal plot RUN --csv FILE` draws it beside a
shoal run: a row at the start, then one per game, with the columns step (env steps),
time (seconds since the start), frames, return (the game's) and return100 (the mean of
the last 100 games).

The code is shoal's own restatement; nothing is copied from CleanRL.
usage: cleanrl_ppo_atari.py [--seed 1] [--seconds 3600] [--threads 2] [--game Pong-v5]
                            [--csv FILE]
"""

import argparse
import time

import envpool
import numpy as np
import torch
import torch.nn as nn


def layer(m, gain):
    nn.init.orthogonal_(m.weight, gain)
    nn.init.constant_(m.bias, 0.0)
    return m


class Agent(nn.Module):
    def __init__(self, n):
        super().__init__()
        g = np.sqrt(2)
        self.torso = nn.Sequential(
            layer(nn.Conv2d(4, 32, 8, stride=4), g), nn.ReLU(),
            layer(nn.Conv2d(32, 64, 4, stride=2), g), nn.ReLU(),
            layer(nn.Conv2d(64, 64, 3, stride=1), g), nn.ReLU(),
            nn.Flatten(), layer(nn.Linear(3136, 512), g), nn.ReLU())
        self.pi = layer(nn.Linear(512, n), 0.01)
        self.v = layer(nn.Linear(512, 1), 1.0)

    def forward(self, x):
        h = self.torso(x / 255.0)
        return self.pi(h), self.v(h).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--game", default="Pong-v5")
    ap.add_argument("--csv", help="write the curve here, for shoal plot --csv")
    a = ap.parse_args()
    csv = open(a.csv, "w") if a.csv else None
    torch.manual_seed(a.seed)
    np.random.seed(a.seed)
    torch.set_num_threads(a.threads)
    N, T, epochs, mbs = 8, 128, 4, 4
    total_steps, lr0 = 10_000_000, 2.5e-4
    envs = envpool.make(a.game, env_type="gymnasium", num_envs=N, episodic_life=True,
                        reward_clip=True, seed=a.seed)
    nA = envs.action_space.n
    agent = Agent(nA)
    opt = torch.optim.Adam(agent.parameters(), lr=lr0, eps=1e-5)
    obs_b = torch.zeros((T, N, 4, 84, 84), dtype=torch.uint8)
    act_b = torch.zeros((T, N), dtype=torch.long)
    logp_b = torch.zeros((T, N))
    rew_b = torch.zeros((T, N))
    done_b = torch.zeros((T, N))
    val_b = torch.zeros((T, N))
    obs, _ = envs.reset()
    obs = torch.from_numpy(obs)
    done = torch.zeros(N)
    game_ret = np.zeros(N)
    games = []
    steps = 0
    t0 = time.perf_counter()
    if csv:
        csv.write("step,time,frames,return,return100\n0,0,0,nan,nan\n")
    while time.perf_counter() - t0 < a.seconds:
        frac = 1.0 - steps / total_steps
        for g in opt.param_groups:
            g["lr"] = frac * lr0
        for t in range(T):
            obs_b[t] = obs
            done_b[t] = done
            with torch.no_grad():
                logits, v = agent(obs.float())
                dist = torch.distributions.Categorical(logits=logits)
                act = dist.sample()
            act_b[t], logp_b[t], val_b[t] = act, dist.log_prob(act), v
            o, r, term, trunc, info = envs.step(act.numpy())
            steps += N
            # the game's score: raw rewards over all lives, as RecordEpisodeStatistics
            game_ret += info["reward"]
            for i in np.nonzero((term | trunc) & (info["lives"] == 0))[0]:
                games.append(game_ret[i])
                wall = time.perf_counter() - t0
                print("GAME wall_s=%.1f frames=%d return=%g" % (wall, steps * 4, game_ret[i]),
                      flush=True)
                if csv:
                    csv.write("%d,%.3f,%d,%g,%.4f\n" % (steps, wall, steps * 4, game_ret[i],
                                                       np.mean(games[-100:])))
                    csv.flush()
                game_ret[i] = 0
            rew_b[t] = torch.from_numpy(np.asarray(r, dtype=np.float32))
            obs = torch.from_numpy(o)
            done = torch.from_numpy((term | trunc).astype(np.float32))
        with torch.no_grad():
            _, nv = agent(obs.float())
            adv = torch.zeros((T, N))
            last = torch.zeros(N)
            for t in reversed(range(T)):
                nonterm = 1.0 - (done if t == T - 1 else done_b[t + 1])
                nextv = nv if t == T - 1 else val_b[t + 1]
                delta = rew_b[t] + 0.99 * nextv * nonterm - val_b[t]
                last = delta + 0.99 * 0.95 * nonterm * last
                adv[t] = last
            ret = adv + val_b
        bo, ba, bl = obs_b.reshape(-1, 4, 84, 84), act_b.reshape(-1), logp_b.reshape(-1)
        badv, bret, bval = adv.reshape(-1), ret.reshape(-1), val_b.reshape(-1)
        n = T * N
        for _ in range(epochs):
            perm = torch.randperm(n)
            for k in range(mbs):
                idx = perm[k * n // mbs:(k + 1) * n // mbs]
                logits, v = agent(bo[idx].float())
                dist = torch.distributions.Categorical(logits=logits)
                ratio = (dist.log_prob(ba[idx]) - bl[idx]).exp()
                ad = badv[idx]
                ad = (ad - ad.mean()) / (ad.std() + 1e-8)
                pg = torch.max(-ad * ratio, -ad * ratio.clamp(0.9, 1.1)).mean()
                vc = bval[idx] + (v - bval[idx]).clamp(-0.1, 0.1)
                vl = 0.5 * torch.max((v - bret[idx]) ** 2, (vc - bret[idx]) ** 2).mean()
                loss = pg - 0.01 * dist.entropy().mean() + 0.5 * vl
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
    wall = time.perf_counter() - t0
    if csv:
        csv.close()
    last = games[-100:]
    print("PEER name=cleanrl_ppo_atari seconds=%.0f frames=%d games=%d return100=%s sps=%.0f"
          % (wall, steps * 4, len(games), "%.2f" % np.mean(last) if last else "none",
             steps / wall))


if __name__ == "__main__":
    main()
