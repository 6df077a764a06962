# SPDX-License-Identifier: Apache-2.0
"""Steps/s of shoal's vector envs through the Python API (python/shoal over libshoal.so).

For CartPole-v1 and MinAtar/Breakout-v1 at B = 1, 16, 256: env.step(actions) in a Python
loop, with uniformly random actions drawn by numpy (int32, drawn in blocks of max(16, 4096/B) steps:
one rng.integers call per block, so drawing does not dominate at small B). The baseline
is Gymnasium 1.4.0's CartPole-v1 env.step in Python on this machine
(88,200 steps/s, measured once: docs/benchmarks.md, reference figures; benchmarks/peers/
env_peers.py measures Gymnasium, EnvPool and PufferLib beside shoal in one run);
MinAtar has none. A B=256 figure with the env stepped by 2 threads (num_threads=2) is
reported too (`.t2`).

Prints a table and `BENCH name=py.<id>.b<B> value=... unit=steps/s baseline=... ratio=...`.
Run: make bench BENCH=python_sps (or SHOAL_LIB=build/lib/libshoal.so PYTHONPATH=python
/usr/bin/python3 benchmarks/python_sps.py [--seconds S]).
"""

import argparse
import time

import numpy as np

import shoal

GYM_CARTPOLE = 88200.0  # Gymnasium 1.4.0, CartPole-v1 env.step only, best of 21 runs


def measure(env_id, B, seconds, threads=1, window=0.25):
    """Best wall-clock rate over windows of `window` seconds (the machine is shared: the
    best window is the least disturbed one, as the Gymnasium figure is a best of 21)."""
    env = shoal.make_vec(env_id, B, num_threads=threads)
    env.reset(seed=0)
    n = env.single_action_space.n
    rng = np.random.default_rng(0)
    block = max(16, 4096 // B)
    best = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        steps = 0
        t0 = time.perf_counter()
        while True:
            acts = rng.integers(0, n, (block, B), dtype=np.int32)
            for k in range(block):
                env.step(acts[k])
            steps += block
            now = time.perf_counter()
            if now - t0 >= window:
                break
        best = max(best, steps * B / (now - t0))
    env.close()
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0, help="per figure")
    args = ap.parse_args()
    rows = []
    for env_id, short, base in [("CartPole-v1", "CartPole-v1", GYM_CARTPOLE),
                                ("MinAtar/Breakout-v1", "Breakout-v1", None)]:
        for B in (1, 16, 256):
            rows.append((f"py.{short}.b{B}", env_id, B, 1, measure(env_id, B, args.seconds), base))
        rows.append((f"py.{short}.b256.t2", env_id, 256, 2,
                     measure(env_id, 256, args.seconds, threads=2), base))
    print(f"{'figure':<26}{'env':<22}{'B':>5}{'thr':>4}{'steps/s':>14}{'Gymnasium':>12}{'ratio':>9}")
    for name, env_id, B, t, v, base in rows:
        print(f"{name:<26}{env_id:<22}{B:>5}{t:>4}{v:>14,.0f}"
              f"{(f'{base:,.0f}' if base else '-'):>12}{(f'{v / base:.1f}' if base else '-'):>9}")
    for name, env_id, B, t, v, base in rows:
        b = f"{base:.0f}" if base else "none"
        r = f"{v / base:.1f}" if base else "none"
        print(f"BENCH name={name} value={v:.0f} unit=steps/s baseline={b} ratio={r}")


if __name__ == "__main__":
    main()
