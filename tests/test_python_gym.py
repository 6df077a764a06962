# SPDX-License-Identifier: Apache-2.0
"""gym: envs in the Python package: shoal.make_vec("gym:...") inside the interpreter that
imported shoal (here the environments' venv), stepped as Gymnasium's own envs step:
the same seeds and actions give the same observations, rewards and flags as
gymnasium.make's envs stepped by hand with same-step auto-reset. A plain script (the venv
has no pytest): it exits non-zero on the first mismatch."""

import sys

import gymnasium as gym
import numpy as np

import shoal


def main():
    B, T = 4, 300
    v = shoal.make_vec("gym:CartPole-v1", B)
    ref = [gym.make("CartPole-v1") for _ in range(B)]
    obs, _ = v.reset(seed=[10, 11, 12, 13])
    want = np.stack([e.reset(seed=10 + i)[0] for i, e in enumerate(ref)])
    assert np.array_equal(obs, want), (obs, want)
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(T):
        a = rng.integers(0, 2, B)
        o, r, te, tr, _ = v.step(a)
        for i, e in enumerate(ref):
            wo, wr, wte, wtr, _ = e.step(int(a[i]))
            assert r[i] == np.float32(wr) and bool(te[i]) == wte and bool(tr[i]) == wtr, t
            if wte or wtr:
                wo, _ = e.reset()
                ends += 1
            assert np.array_equal(o[i], wo), (t, i, o[i], wo)
    assert ends > 10, ends
    try:
        shoal.make_vec("gym:Blackjack-v1", 2)
    except shoal.ShoalError as ex:
        assert "observation space is Tuple" in str(ex), ex
    else:
        raise AssertionError("Blackjack-v1's Tuple space was taken")
    print("1 passed, 0 failed")


if __name__ == "__main__":
    sys.exit(main())
