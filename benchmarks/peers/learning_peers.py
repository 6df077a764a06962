#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Peers for `make bench BENCH=learning`: CartPole-v1 and LunarLander-v3, to a greedy bar.

Runs in the peers venv ($SHOAL_PEERS_VENV, default ~/.cache/shoal-peers; made by
benchmarks/peers/setup.sh) on real Gymnasium and PyTorch 2, one torch thread, and for each
peer and seed reports the env steps and the wall time until a GREEDY policy first averages
at least its env's bar over 100 evaluation episodes, the bar shoal's configs for that env use
(run.solve_return): CartPole-v1 475, LunarLander-v3 200.

Peers (names as LEARNING_PEERS / --peers take them):
  cleanrl_dqn  CleanRL's dqn.py algorithm restated here on Gymnasium + torch 2 with its
               defaults: one env, Q-net 4-120-84-2 ReLU, Adam 2.5e-4, buffer 10k, batch 128,
               gamma 0.99, MSE TD loss, target copied every 500 steps, epsilon 1 -> 0.05 over
               the first half of the budget, learning starts at 10k, a gradient step every 10
               env steps; budget 500k (its total_timesteps).
  cleanrl_ppo  CleanRL's ppo.py algorithm restated (as benchmarks/onpolicy_cleanrl_torch.py
               does on torch 1.13) on Gymnasium's SyncVectorEnv with same-step autoreset:
               4 envs x 128 steps, 4 epochs of 4 minibatches, Adam 2.5e-4 annealed, eps 1e-5,
               gamma 0.99, GAE 0.95, clip 0.2 with value clipping, entropy 0.01, value 0.5,
               max grad norm 0.5, separate 64-64 tanh actor and critic, orthogonal init;
               budget 500k.
  sb3_dqn      Stable-Baselines3's DQN with RL Zoo's hyperparams/dqn.yml CartPole-v1: lr 2.3e-3,
               batch 64, buffer 100k, learning_starts 1000, gamma 0.99, target every 10
               steps, train_freq 256 with 128 gradient steps, exploration 0.16 -> 0.04,
               net [256, 256]; budget n_timesteps 50k.
  sb3_ppo      Stable-Baselines3's PPO with RL Zoo's hyperparams/ppo.yml CartPole-v1: 8 envs x
               32 steps, batch 256, 20 epochs, gamma 0.98, GAE 0.8, entropy 0, lr and clip
               linear from 1e-3 and 0.2; budget n_timesteps 100k.
  sb3_ppo_lunar      LunarLander-v3: SB3's PPO with RL Zoo's hyperparams/ppo.yml LunarLander
               settings: 16 envs x 1024 steps, batch 64, 4 epochs, gamma 0.999, GAE 0.98,
               entropy 0.01; SB3's defaults for the rest (lr 3e-4, clip 0.2, separate 64-64
               tanh actor and critic, orthogonal init); budget n_timesteps 1M. What
               configs/lunarlander-ppo.yaml restates.
  cleanrl_ppo_lunar  LunarLander-v3: cleanrl_ppo above, every default unchanged (4 envs x 128
               steps, gamma 0.99, lr 2.5e-4 annealed to 0 over the budget, truncation ends
               the bootstrap as in ppo.py), the network sized to 8 inputs and 4 actions;
               budget 1M, RL Zoo's for LunarLander and twice ppo.py's default 500k.

The code here is shoal's own restatement of those algorithms; nothing is copied from CleanRL.

Evaluation: every --eval-every env steps (LEARNING_PEER_EVAL_EVERY; by default each peer's
own grid, that of shoal's configs for its env: CartPole 20,000 (shoal's evaluate every 20,000
or 20,480), LunarLander 65,536; a finer grid alone would lower a peer's count) and once more
at the end of the budget, the greedy policy (argmax) plays 100 episodes on a separate set of
envs of the peer's id seeded 100000 + 1000 * seed + i, batched through one forward per step;
the run stops at the first evaluation at or above the bar. Evaluating neither
draws from the training's random streams nor changes its state, so a run's trajectory does
not depend on the grid. "train s" is the wall time with the
evaluations taken out; "eval s" is the time they took, reported beside it. Each run is its
own Python process (--one PEER SEED prints one RESULT line), `--jobs` of them at once.

usage: learning_peers.py [--peers "cleanrl_dqn cleanrl_ppo sb3_dqn sb3_ppo"] [--seeds "1 2 3"]
                         [--eval-every N] [--jobs 1] [--budget N]
(the default --peers are the CartPole ones; the LunarLander ones run when named.)
Prints a table, then one machine-readable line per peer for benchmarks/learning.sh:
  PEER name=P runs=N solved=K med_steps=S worst_steps=W med_s=T worst_s=U med_cpu_s=C
       med_eval_s=E budget=B env=ID bar=R

Measured 2026-12-02 00:57-01:10 UTC by `make bench BENCH=learning` (python 3.11.2, torch
2.9.0+cu128 on the CPU, gymnasium 1.4.0, stable-baselines3 2.9.2, numpy 2.4.6) on the shared
2-core development machine beside other jobs (load 6-8), seeds 1-3, two runs at a time, the
20k grid; steps to the bar per seed, median (worst) wall s without the evaluations, median CPU s:
  cleanrl_dqn  3/3  220k 220k 280k   115 (123) s   58 s CPU
  cleanrl_ppo  3/3   20k  40k  20k    10 (12) s     6 s CPU
  sb3_dqn      2/3   40k  50k   -    183 (196) s   99 s CPU   (seed 3: greedy 191 at 50k)
  sb3_ppo      3/3   20k  40k  40k    20 (23) s    18 s CPU
shoal beside them in the same run, and the comparison: docs/benchmarks.md, "Learning";
logs in benchmarks/results/learning-peers/.

LunarLander-v3, measured 2026-12-05 by
  LEARNING_CASES="ppo-lunarlander" LEARNING_SEEDS="1 2 3" LEARNING_CORETYPES=native
  LEARNING_PEERS="sb3_ppo_lunar cleanrl_ppo_lunar" LEARNING_PEER_SEEDS="1 2"
  LEARNING_PEER_JOBS=2 nice -n 10 bash benchmarks/learning.sh          (08:05-08:38 UTC)
and again for SB3 one run at a time (LEARNING_PEERS="sb3_ppo_lunar", LEARNING_PEER_JOBS=1;
08:39-08:59 UTC), same versions, AMD EPYC, 2 cores shared with other engineers' tests
(load 5-7 in the first run, 1-4 in the second); the 65,536-step grid. Steps to the bar per
seed, median (worst) wall s without the evaluations, median CPU s:
  sb3_ppo_lunar      2/2  590k 655k    1123 (1181) s two at a time, 483 (494) s alone; 442-445 s CPU
                    seed 3 (16:07-16:12 UTC, `--peers sb3_ppo_lunar --seeds 3`, nice 5): 459k,
                    303 s, 257 s CPU; over seeds 1-3 the median is 590k
  cleanrl_ppo_lunar  0/2  not in 1M: greedy -74 and 4 at the end;  250 s CPU for the 1M
Beside them, shoal (configs/lunarlander-ppo.yaml, 2 actors x 8 envs and the learner, its
evaluations included), seeds 1-3: 3/3, median 680k env steps (worst 745k) in both runs,
75.7 (84.3) s in the first, 37.9 (41.4) s in the second. BENCH: vs_sb3_ppo_lunar.steps
ratio 0.92 over SB3's seeds 1-2, 0.87 over seeds 1-3 (shoal needs ~15% more env steps than SB3 here); .seconds ratio 14.8 (first run)
and 12.8 (second). shoal uses both cores where SB3 uses one: one more shoal run (seed 3,
load 4) took 74 s of CPU over its learner and actors, against SB3's 442 s: 6x less.
Logs: benchmarks/results/learning-peers/2026-12-05-lunarlander-*.log.
"""
import argparse
import os
import subprocess
import sys
import time

for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

# Per peer: its env, the bar (a greedy mean over 100 episodes: the run.solve_return of
# shoal's configs for that env), its budget in env steps, and the grid it is evaluated on
# (the eval_every_steps of shoal's configs for that env, so neither side gains from a finer
# grid).
SPEC = {
    "cleanrl_dqn": ("CartPole-v1", 475.0, 500_000, 20_000),
    "cleanrl_ppo": ("CartPole-v1", 475.0, 500_000, 20_000),
    "sb3_dqn": ("CartPole-v1", 475.0, 50_000, 20_000),
    "sb3_ppo": ("CartPole-v1", 475.0, 100_000, 20_000),
    "cleanrl_ppo_lunar": ("LunarLander-v3", 200.0, 1_000_000, 65_536),
    "sb3_ppo_lunar": ("LunarLander-v3", 200.0, 1_000_000, 65_536),
}
PEERS = tuple(SPEC)
# the default set: the CartPole peers; the LunarLander ones take 8-20 minutes a run
# on the development machine, so they run when asked for by name
DEFAULT_PEERS = ("cleanrl_dqn", "cleanrl_ppo", "sb3_dqn", "sb3_ppo")


class Evaluator:
    """Greedy evaluation every `every` env steps on 100 envs of its own; tracks its time."""

    def __init__(self, env_id, bar, seed, every, episodes=100):
        import gymnasium as gym
        import numpy as np
        self.np = np
        self.bar = bar
        self.envs = [gym.make(env_id) for _ in range(episodes)]
        self.seeds = [100000 + 1000 * seed + i for i in range(episodes)]
        self.every = every
        self.next = every
        self.seconds = 0.0
        self.cpu = 0.0
        self.last = float("nan")
        self.last_at = -1
        self.solved_at = -1

    def run(self, act):
        np = self.np
        t0, c0 = time.perf_counter(), time.process_time()
        obs = np.stack([e.reset(seed=s)[0] for e, s in zip(self.envs, self.seeds)])
        alive = np.ones(len(self.envs), bool)
        ret = np.zeros(len(self.envs))
        while alive.any():
            idx = np.flatnonzero(alive)
            acts = act(obs[idx].astype(np.float32))
            for j, a in zip(idx, acts):
                o, r, term, trunc, _ = self.envs[j].step(int(a))
                obs[j] = o
                ret[j] += r
                if term or trunc:
                    alive[j] = False
        self.seconds += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        self.last = float(ret.mean())
        return self.last

    def check(self, steps, act):
        """Evaluates when `steps` passed the next point; True once the bar is reached."""
        if steps < self.next:
            return False
        while self.next <= steps:
            self.next += self.every
        return self.at(steps, act)

    def at(self, steps, act):
        """Evaluates now, at `steps`; True when the mean reached the bar."""
        self.last_at = steps
        if self.run(act) >= self.bar:
            self.solved_at = steps
            return True
        return False


def greedy_torch(net):
    import torch

    def act(obs):
        with torch.no_grad():
            return net(torch.from_numpy(obs)).argmax(1).numpy()
    return act


def cleanrl_dqn(seed, budget, ev):
    import random
    import gymnasium as gym
    import numpy as np
    import torch
    import torch.nn as nn
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    lr, buf_n, gamma, target_every, batch = 2.5e-4, 10_000, 0.99, 500, 128
    start_e, end_e, frac, starts, train_every = 1.0, 0.05, 0.5, 10_000, 10

    def qnet():
        return nn.Sequential(nn.Linear(4, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 2))
    q, tq = qnet(), qnet()
    tq.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=lr)
    env = gym.make("CartPole-v1")
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    b_obs = np.zeros((buf_n, 4), np.float32)
    b_next = np.zeros((buf_n, 4), np.float32)
    b_act = np.zeros(buf_n, np.int64)
    b_rew = np.zeros(buf_n, np.float32)
    b_term = np.zeros(buf_n, np.float32)
    pos, full = 0, False
    act = greedy_torch(q)
    duration = frac * budget
    for step in range(budget):
        eps = max(end_e, start_e + (end_e - start_e) * step / duration)
        if random.random() < eps:
            a = env.action_space.sample()
        else:
            with torch.no_grad():
                a = int(q(torch.from_numpy(np.asarray(obs, np.float32))[None]).argmax(1))
        nobs, r, term, trunc, _ = env.step(a)
        # the buffer keeps the real next observation (the final one where an episode ended);
        # only termination stops the bootstrap, as CleanRL's dqn.py
        b_obs[pos], b_next[pos], b_act[pos], b_rew[pos], b_term[pos] = obs, nobs, a, r, term
        pos = (pos + 1) % buf_n
        full = full or pos == 0
        obs = env.reset()[0] if term or trunc else nobs
        if step > starts:
            if step % train_every == 0:
                i = np.random.randint(0, buf_n if full else pos, size=batch)
                with torch.no_grad():
                    tmax = tq(torch.from_numpy(b_next[i])).max(1).values
                    notdone = 1 - torch.from_numpy(b_term[i])
                    y = torch.from_numpy(b_rew[i]) + gamma * tmax * notdone
                old = q(torch.from_numpy(b_obs[i])).gather(1, torch.from_numpy(b_act[i])[:, None])
                loss = nn.functional.mse_loss(old.squeeze(1), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            if step % target_every == 0:
                tq.load_state_dict(q.state_dict())
        if ev.check(step + 1, act):
            return step + 1, act
    return budget, act


def cleanrl_ppo(seed, budget, ev, env_id):
    import random
    import gymnasium as gym
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    N, T, MB, EP = 4, 128, 4, 4
    lr0, gamma, lam, clip, ent, vf, mgn = 2.5e-4, 0.99, 0.95, 0.2, 0.01, 0.5, 0.5
    batch = N * T
    mbs = batch // MB
    iters = budget // batch

    # shoal's restatement of ppo.py on torch 1.13 (benchmarks/onpolicy_cleanrl_torch.py):
    # its network, GAE and update, here on Gymnasium's envs and torch 2.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from onpolicy_cleanrl_torch import Agent, gae, ppo_update
    envs = gym.make_vec(env_id, num_envs=N, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    D = envs.single_observation_space.shape[0]
    agent = Agent(D, int(envs.single_action_space.n))
    opt = torch.optim.Adam(agent.parameters(), lr=lr0, eps=1e-5)
    envs.action_space.seed(seed)
    o, _ = envs.reset(seed=seed)
    obs = torch.zeros((T, N, D))
    acts = torch.zeros((T, N), dtype=torch.long)
    logps = torch.zeros((T, N))
    rews = torch.zeros((T, N))
    dones = torch.zeros((T, N))
    vals = torch.zeros((T, N))
    next_obs = torch.tensor(o, dtype=torch.float32)
    next_done = torch.zeros(N)
    act = greedy_torch(agent.actor)
    steps = 0
    for it in range(1, iters + 1):
        opt.param_groups[0]["lr"] = (1.0 - (it - 1.0) / iters) * lr0
        for t in range(T):
            steps += N
            obs[t] = next_obs
            dones[t] = next_done
            with torch.no_grad():
                a, logps[t], _, v = agent.act(next_obs)
                vals[t] = v.flatten()
            acts[t] = a
            o, r, term, trunc, _ = envs.step(a.numpy())
            rews[t] = torch.as_tensor(r, dtype=torch.float32)
            next_obs = torch.as_tensor(o, dtype=torch.float32)
            next_done = torch.as_tensor(term | trunc, dtype=torch.float32)
            if ev.check(steps, act):
                return steps, act
        with torch.no_grad():
            adv, rets = gae(rews, vals, dones, agent.value(next_obs).reshape(1, -1), next_done,
                            gamma, lam)
        ppo_update(agent, opt, obs.reshape(-1, D), logps.reshape(-1), acts.reshape(-1),
                   adv.reshape(-1), rets.reshape(-1), vals.reshape(-1), EP, mbs, clip, ent, vf,
                   mgn)
    return steps, act


def sb3_run(algo, seed, budget, ev, env_id):
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    def lin(v):
        return lambda progress_remaining: progress_remaining * v
    if algo == "dqn":
        env = make_vec_env(env_id, n_envs=1, seed=seed)
        model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                    learning_starts=1000, gamma=0.99, target_update_interval=10,
                    train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                    exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]),
                    seed=seed, device="cpu", verbose=0)
    elif algo == "ppo_lunar":
        # RL Zoo's LunarLander settings; the rest (lr 3e-4, clip 0.2, 64x64 tanh actor and
        # critic, orthogonal init, advantages normalised) are SB3's defaults, as there
        env = make_vec_env(env_id, n_envs=16, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=1024, batch_size=64, gae_lambda=0.98,
                    gamma=0.999, n_epochs=4, ent_coef=0.01, seed=seed, device="cpu", verbose=0)
    else:
        env = make_vec_env(env_id, n_envs=8, seed=seed)
        model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                    n_epochs=20, ent_coef=0.0, learning_rate=lin(1e-3), clip_range=lin(0.2),
                    seed=seed, device="cpu", verbose=0)

    def act(obs):
        return model.predict(obs, deterministic=True)[0]

    class Cb(BaseCallback):
        def _on_step(self):
            return not ev.check(self.num_timesteps, act)
    cb = Cb()
    model.learn(total_timesteps=budget, callback=cb)
    return (ev.solved_at if ev.solved_at > 0 else model.num_timesteps), act


def one(peer, seed, every, budget=0):
    import torch
    torch.set_num_threads(1)
    env_id, bar, own_budget, own_every = SPEC[peer]
    budget = budget or own_budget
    ev = Evaluator(env_id, bar, seed, every or own_every)
    t0, c0 = time.perf_counter(), time.process_time()
    if peer == "cleanrl_dqn":
        steps, act = cleanrl_dqn(seed, budget, ev)
    elif peer.startswith("cleanrl_ppo"):
        steps, act = cleanrl_ppo(seed, budget, ev, env_id)
    else:
        steps, act = sb3_run(peer[4:], seed, budget, ev, env_id)
    if ev.solved_at < 0 and ev.last_at != steps:
        ev.at(steps, act)  # one more evaluation at the end of the budget
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    solved = int(ev.solved_at > 0)
    print(f"RESULT peer={peer} seed={seed} solved={solved} steps={steps} "
          f"train_s={wall - ev.seconds:.2f} train_cpu_s={cpu - ev.cpu:.2f} "
          f"eval_s={ev.seconds:.2f} greedy={ev.last:.1f} budget={budget}", flush=True)


def versions():
    from importlib.metadata import version
    out = [f"python {sys.version.split()[0]}"]
    for p in ("torch", "gymnasium", "stable-baselines3", "numpy"):
        try:
            out.append(f"{p} {version(p)}")
        except Exception:  # noqa: BLE001 - a missing package is reported, not fatal
            out.append(f"{p} missing")
    return ", ".join(out)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return float("nan")
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peers", default=os.environ.get("LEARNING_PEERS", " ".join(DEFAULT_PEERS)))
    ap.add_argument("--seeds", default=os.environ.get("LEARNING_PEER_SEEDS", "1 2 3"))
    ap.add_argument("--eval-every", type=int,
                    default=int(os.environ.get("LEARNING_PEER_EVAL_EVERY", "0")),
                    help="env steps between evaluations (0: each peer's own grid)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("LEARNING_PEER_JOBS", "1")))
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    ap.add_argument("--budget", type=int, default=int(os.environ.get("LEARNING_PEER_BUDGET", "0")),
                    help="env steps per run (0: each peer's own)")
    ap.add_argument("--one", nargs=2, metavar=("PEER", "SEED"), help="one run (internal)")
    a = ap.parse_args()
    if a.one:
        one(a.one[0], int(a.one[1]), a.eval_every, a.budget)
        return 0
    peers = a.peers.split()
    bad = [p for p in peers if p not in PEERS]
    if bad:
        print(f"learning_peers: unknown peer(s) {' '.join(bad)} (known: {' '.join(PEERS)})",
              file=sys.stderr)
        return 2
    seeds = [int(s) for s in a.seeds.split()]
    grid = f"every {a.eval_every} env steps" if a.eval_every else "on each peer's grid"
    print(f"peers: {versions()}; one torch thread; the greedy mean over 100 episodes "
          f"against each peer's bar, evaluated {grid}", flush=True)
    jobs = [(p, s) for p in peers for s in seeds]
    results = {}
    running = []

    def start(p, s):
        cmd = [sys.executable, os.path.abspath(__file__), "--one", p, str(s),
               "--eval-every", str(a.eval_every), "--budget", str(a.budget)]
        return (p, s, time.time(), subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, text=True))

    def finish(p, s, proc, timed_out=False):
        out, err = proc.communicate()
        line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            why = "timed out" if timed_out else f"exit {proc.returncode}"
            print(f"  {p} seed {s}: no result ({why}): {err.strip()[-400:]}", file=sys.stderr)
            results[(p, s)] = None
            return
        kv = dict(f.split("=", 1) for f in line.split()[1:])
        results[(p, s)] = kv
        print(f"  {p} seed {s}: solved={kv['solved']} steps={kv['steps']} "
              f"train_s={kv['train_s']} cpu_s={kv['train_cpu_s']} eval_s={kv['eval_s']} "
              f"greedy={kv['greedy']}",
              file=sys.stderr, flush=True)

    while jobs or running:
        while jobs and len(running) < max(1, a.jobs):
            running.append(start(*jobs.pop(0)))
        time.sleep(0.2)
        for r in list(running):
            p, s, t0, proc = r
            if proc.poll() is not None:
                running.remove(r)
                finish(p, s, proc)
            elif time.time() - t0 > a.timeout:
                proc.kill()
                running.remove(r)
                finish(p, s, proc, timed_out=True)
    print(f"{'peer':<18} {'env':<15} {'bar':>4} {'every':>6} {'budget':>8} {'solved':>7} "
          f"{'med steps':>10} {'worst steps':>12} {'med s':>7} {'worst s':>8} {'med cpu s':>9} "
          f"{'eval s':>7}")
    lines = []
    for p in peers:
        rs = [results.get((p, s)) for s in seeds]
        ok = [r for r in rs if r and r["solved"] == "1"]
        st = [int(r["steps"]) for r in ok]
        sec = [float(r["train_s"]) for r in ok]
        evs = [float(r["eval_s"]) for r in rs if r]
        mc = median([float(r["train_cpu_s"]) for r in ok])
        ms, ws = median(st), (max(st) if st else float("nan"))
        mt, wt = median(sec), (max(sec) if sec else float("nan"))
        me = median(evs)
        env_id, bar, own_budget, own_every = SPEC[p]
        budget = a.budget or own_budget
        print(f"{p:<18} {env_id:<15} {bar:>4g} {a.eval_every or own_every:>6} {budget:>8} "
              f"{len(ok):>3}/{len(seeds):<3} {ms:>10g} "
              f"{ws:>12g} {mt:>7.1f} {wt:>8.1f} {mc:>9.1f} {me:>7.1f}")
        lines.append(f"PEER name={p} runs={len(seeds)} solved={len(ok)} med_steps={ms:g} "
                     f"worst_steps={ws:g} med_s={mt:.2f} worst_s={wt:.2f} med_cpu_s={mc:.2f} "
                     f"med_eval_s={me:.2f} budget={budget} env={env_id} bar={bar:g}")
    print("(steps and seconds over the seeds that reached the bar; seconds exclude the "
          "evaluations, whose wall time is the eval s column; cpu s: the run's own CPU time)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
