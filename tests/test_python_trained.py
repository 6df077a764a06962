# SPDX-License-Identifier: Apache-2.0
"""Policies trained by `shoal run` (a short CartPole-v1 Ape-X run, a short PPO run with an
LSTM core on CartPoleNoVel-v1), loaded in Python, play exactly as `shoal eval` plays them.
Labelled slow (about 30 s): they train."""

import os
import re
import subprocess

import numpy as np
import pytest

import shoal
from test_python_policy import python_eval

CLI = os.environ.get("SHOAL_CLI")
SRC = os.environ.get("SHOAL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))


def shoal_eval(uri, run, seed):
    """`shoal eval RUN` over 16 episodes: the match of its line (version, mean, sd, min,
    max)."""
    out = subprocess.run([CLI, "eval", run, "--store", uri, "--episodes", "16", "--seed",
                          str(seed)], check=True, capture_output=True, text=True).stdout
    m = re.search(r"snapshot v(\d+).*return (-?[0-9.]+) ± ([0-9.]+) over 16 episodes "
                  r"\(min (-?[0-9.]+), max (-?[0-9.]+)\)", out)
    assert m, out
    return m


@pytest.mark.skipif(not CLI, reason="SHOAL_CLI (the shoal program) not built")
def test_trained_policy_plays_as_shoal_eval(tmp_path):
    uri = "file://" + str(tmp_path / "runs")
    subprocess.run([CLI, "run", os.path.join(SRC, "configs/cartpole-apex.yaml"), "--quiet",
                    "--set", f"store.uri={uri}", "--set", "run.max_seconds=8",
                    "--set", "run.solve_return=0"], check=True, timeout=120,
                   capture_output=True)
    # The store folder holds the run and the store's own dot entries (.leases).
    (run,) = [n for n in os.listdir(tmp_path / "runs") if not n.startswith(".")]
    m = shoal_eval(uri, run, 3)
    pol = shoal.load_policy(uri, run=run)
    assert pol.version == int(m.group(1))
    ret = python_eval(pol, "CartPole-v1", 16, 3)
    got = (f"{ret.mean():.2f}", f"{ret.std():.2f}", f"{ret.min():.1f}", f"{ret.max():.1f}")
    assert got == m.group(2, 3, 4, 5), out
    # It learned something (a random policy scores ~20), so the check is not trivial.
    assert ret.mean() > 40, out


def recurrent_eval(pol, env_id, episodes, seed):
    """`shoal eval`'s loop (algos/agent.c op_eval) for a recurrent policy through the
    Python API: every copy's (h, c) starts at zero and is reset where an episode starts
    (after reset, and in the copies the last step ended: same-step autoreset)."""
    E = min(episodes, 16)
    env = shoal.make_vec(env_id, E)
    obs, _ = env.reset(seed=seed)
    pol.reset_state()
    start = np.ones(E, bool)
    quota = [episodes // E + (i < episodes % E) for i in range(E)]
    ret, count, returns = np.zeros(E), [0] * E, []
    while len(returns) < episodes:
        obs, rew, term, trunc, _ = env.step(pol(obs, episode_start=start))
        ret += rew
        start = term | trunc
        for i in np.flatnonzero(start):
            if count[i] < quota[i]:
                returns.append(ret[i])
                count[i] += 1
            ret[i] = 0
    return np.array(returns)


@pytest.mark.skipif(not CLI, reason="SHOAL_CLI (the shoal program) not built")
def test_trained_recurrent_policy_plays_as_shoal_eval(tmp_path):
    uri = "file://" + str(tmp_path / "runs")
    subprocess.run([CLI, "run", os.path.join(SRC, "configs/cartpole-novel-ppo-lstm.yaml"),
                    "--quiet", "--set", f"store.uri={uri}", "--set", "run.max_env_steps=20000",
                    "--set", "run.eval_every_steps=10000", "--set", "run.eval_episodes=4"],
                   check=True, timeout=120, capture_output=True)
    (run,) = [n for n in os.listdir(tmp_path / "runs") if not n.startswith(".")]
    m = shoal_eval(uri, run, 5)
    pol = shoal.load_policy(uri, run=run)
    assert pol.recurrent and pol.lstm_size == 64 and pol.normalizes_obs
    assert pol.version == int(m.group(1))
    ret = recurrent_eval(pol, "CartPoleNoVel-v1", 16, 5)  # the config evaluates greedily
    got = (f"{ret.mean():.2f}", f"{ret.std():.2f}", f"{ret.min():.1f}", f"{ret.max():.1f}")
    assert got == m.group(2, 3, 4, 5), out
    # Episodes differ in length, so the state resets were exercised mid-run.
    assert ret.min() < ret.max(), out
