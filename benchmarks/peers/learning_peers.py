# SPDX-License-Identifier: Apache-2.0
"""Stable-Baselines3 learning CartPole-v1 on real Gymnasium and torch 2 (issue 24 item 4):
env steps and wall time until the greedy policy's mean return over 100 episodes reaches
475, the bar benchmarks/learning.sh holds shoal's CartPole runs to.

Algorithms, with RL Zoo's CartPole-v1 hyperparameters (rl-baselines3-zoo hyperparams/):
  sb3-dqn  DQN: lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, gamma 0.99,
           target_update_interval 10, train_freq 256, gradient_steps 128,
           exploration_fraction 0.16, exploration_final_eps 0.04, net [256, 256]
           over RL Zoo's budget of 50k steps
  sb3-ppo  PPO: 8 envs, n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, n_epochs 20,
           ent_coef 0, learning_rate and clip_range linear from 1e-3 and 0.2 over RL Zoo's
           budget of 100k steps
A run stops at the bar or at the end of the budget (one more evaluation there).
torch at 1 thread (torch.set_num_threads(1)). Every --eval-every env steps the greedy
policy (deterministic=True) plays 100 episodes of CartPole-v1 on other seeds, all at
once in a SyncVectorEnv; the time spent evaluating is not counted in the wall time.

CleanRL's dqn.py / ppo.py are single-file scripts, not a package: they are not run here
(see benchmarks/learning.sh for the CleanRL figure restated on torch 1.13).

Prints one line per run and
  BENCH name=learning.peers.<algo>-cartpole.solved value=<fraction> unit=fraction ...
  BENCH name=learning.peers.<algo>-cartpole.median_steps value=<steps> unit=env_steps ...
  BENCH name=learning.peers.<algo>-cartpole.median_wall value=<s> unit=s ...
(baseline=none: these are the peers' figures, for learning.sh's shoal rows).
Run: make bench BENCH=learning_peers, or benchmarks/peers/learning_peers.sh [--seeds 1 2 3].
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np


def greedy_mean(model, episodes=100, seed=10_000):
    """Mean undiscounted return of the greedy policy over `episodes` episodes."""
    import gymnasium as gym
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    obs, _ = env.reset(seed=seed)
    ret = np.zeros(episodes)
    done = np.zeros(episodes, bool)
    while not done.all():
        act, _ = model.predict(obs, deterministic=True)
        obs, r, term, trunc, _ = env.step(act)
        ret += r * ~done
        done |= term | trunc  # each copy's first episode only
    env.close()
    return float(ret.mean())


def make(algo, seed):
    """The model with RL Zoo's settings, and RL Zoo's budget (its schedules span it)."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    if algo == "sb3-dqn":
        env = make_vec_env("CartPole-v1", n_envs=1, seed=seed)
        return sb3.DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64,
                       buffer_size=100_000, learning_starts=1000, gamma=0.99,
                       target_update_interval=10, train_freq=256, gradient_steps=128,
                       exploration_fraction=0.16, exploration_final_eps=0.04,
                       policy_kwargs=dict(net_arch=[256, 256]), seed=seed, device="cpu",
                       verbose=0), 50_000
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)

    def lin(v):
        return lambda progress: progress * v  # progress_remaining: 1 -> 0 over the budget

    return sb3.PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                   n_epochs=20, ent_coef=0.0, learning_rate=lin(1e-3), clip_range=lin(0.2),
                   seed=seed, device="cpu", verbose=0), 100_000


def run(algo, seed, eval_every, bar=475.0):
    """(steps to the bar or None, training seconds to it, best mean, budget)."""
    from stable_baselines3.common.callbacks import BaseCallback
    model, budget = make(algo, seed)
    state = {"next": eval_every, "eval_s": 0.0, "best": -1.0, "solved": None}
    t_start = time.perf_counter()

    class Eval(BaseCallback):
        def _on_step(self):
            n = self.model.num_timesteps
            if n < state["next"]:
                return True
            state["next"] += eval_every
            t0 = time.perf_counter()
            m = greedy_mean(self.model)
            state["eval_s"] += time.perf_counter() - t0
            state["best"] = max(state["best"], m)
            wall = time.perf_counter() - t_start - state["eval_s"]
            print(f"    {algo} seed {seed}: {n} steps, {wall:.1f} s, greedy mean {m:.1f}",
                  flush=True)
            if m >= bar:
                state["solved"] = (n, wall)
                return False  # stop training
            return True

    model.learn(total_timesteps=budget, callback=Eval(), progress_bar=False)
    if state["solved"] is None:  # one evaluation at the end of the budget
        m = greedy_mean(model)
        state["best"] = max(state["best"], m)
        if m >= bar:
            state["solved"] = (model.num_timesteps,
                               time.perf_counter() - t_start - state["eval_s"])
    st, w = state["solved"] or (None, time.perf_counter() - t_start - state["eval_s"])
    return st, w, state["best"], budget


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    ap.add_argument("--algos", nargs="*", default=["sb3-dqn", "sb3-ppo"])
    ap.add_argument("--eval-every", type=int, default=2_500)
    args = ap.parse_args()
    try:
        import gymnasium
        import stable_baselines3
        import torch
    except Exception as e:  # noqa: BLE001
        print(f"learning_peers: peers missing ({e}); run `make peers`")
        for algo in args.algos:
            print(f"BENCH name=learning.peers.{algo}-cartpole.solved value=none unit=fraction "
                  f"baseline=none ratio=none")
        return 0
    torch.set_num_threads(1)
    print(f"learning_peers: stable-baselines3 {stable_baselines3.__version__}, torch "
          f"{torch.__version__}, gymnasium {gymnasium.__version__}; CartPole-v1 to a greedy "
          f"mean >= 475 over 100 episodes, evaluated every {args.eval_every} steps; "
          f"load average {os.getloadavg()[0]:.1f}")
    lines = []
    for algo in args.algos:
        res = [run(algo, s, args.eval_every) for s in args.seeds]
        solved = [(st, w) for st, w, _, _ in res if st is not None]
        frac = len(solved) / len(res)
        for s, (st, w, b, budget) in zip(args.seeds, res):
            print(f"  {algo} seed {s}: " + (f"solved at {st} steps, {w:.1f} s" if st else
                                            f"not solved in RL Zoo's {budget} steps "
                                            f"(best {b:.1f})"))
        lines.append(f"BENCH name=learning.peers.{algo}-cartpole.solved value={frac:.2f} "
                     f"unit=fraction baseline=none ratio=none")
        if solved:
            ms = statistics.median(st for st, _ in solved)
            mw = statistics.median(w for _, w in solved)
            lines.append(f"BENCH name=learning.peers.{algo}-cartpole.median_steps value={ms:.0f} "
                         f"unit=env_steps baseline=none ratio=none")
            lines.append(f"BENCH name=learning.peers.{algo}-cartpole.median_wall value={mw:.1f} "
                         f"unit=s baseline=none ratio=none")
            print(f"  {algo}: {len(solved)}/{len(res)} solved, median {ms:.0f} steps, "
                  f"{mw:.1f} s")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
