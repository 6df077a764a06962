# SPDX-License-Identifier: Apache-2.0
"""ALE games in shoal against Gymnasium's own preprocessing, step for step.

shoal's "gym:ALE/..." env (envs/atari.c: the emulator through ale-py, the preprocessing
in C) must give the observations, rewards and flags that gymnasium.make(id, frameskip=1)
wrapped in AtariPreprocessing(noop_max=30, frame_skip=4, screen_size=84) and
FrameStackObservation(4) gives, bit for bit, from the same seeds and actions, for two
games, with sticky actions on (v5's 0.25: the emulator's own draws must line up too).
Without life-loss terminals or reward clipping (Gymnasium's wrapper has neither in the
form shoal trains with), then those two on their own: a lost life ends an episode
without resetting the game, and rewards are their signs.

A plain script run by the environments' venv (it has no pytest): it exits non-zero on
the first mismatch."""

import sys

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

import shoal

gym.register_envs(ale_py)
GAME_OPTS = "episodic_life=0,reward_clip=0"


def reference(game):
    e = gym.make(game, frameskip=1)
    e = AtariPreprocessing(e, noop_max=30, frame_skip=4, screen_size=84)
    e = FrameStackObservation(e, 4)
    return e


def exact(game, B, T, seed0):
    v = shoal.make_vec("gym:" + game, B, options=GAME_OPTS)
    ref = [reference(game) for _ in range(B)]
    assert v.single_observation_space.shape == (4, 84, 84), v.single_observation_space
    obs, _ = v.reset(seed=[seed0 + i for i in range(B)])
    want = np.stack([e.reset(seed=seed0 + i)[0] for i, e in enumerate(ref)])
    assert obs.dtype == np.uint8 and np.array_equal(obs, want), (game, "reset")
    n = ref[0].action_space.n
    rng = np.random.default_rng(seed0)
    ends = nonzero = 0
    for t in range(T):
        a = rng.integers(0, n, B)
        o, r, te, tr, _ = v.step(a)
        for i, e in enumerate(ref):
            wo, wr, wte, wtr, _ = e.step(int(a[i]))
            nonzero += wr != 0
            if r[i] != np.float32(wr) or bool(te[i]) != wte or bool(tr[i]) != wtr:
                raise AssertionError("%s step %d copy %d: shoal (%g, %d, %d), Gymnasium (%g, %d, %d)"
                                     % (game, t, i, r[i], te[i], tr[i], wr, wte, wtr))
            if wte or wtr:
                wo, _ = e.reset()
                ends += 1
            if not np.array_equal(o[i], wo):
                d = np.argwhere(o[i] != wo)
                raise AssertionError("%s step %d copy %d: %d pixels differ, first at %s: %d vs %d"
                                     % (game, t, i, len(d), d[0], o[i][tuple(d[0])],
                                        wo[tuple(d[0])]))
    return ends, nonzero


def training_settings():
    """The training settings on their own. Life loss (Breakout): up to the first lost life
    shoal equals Gymnasium's AtariPreprocessing(terminal_on_life_loss=True) step for
    step, the lost life included; then, where Gymnasium would reset the whole game, shoal
    goes on with the same game: the next episode starts from the last screen. Reward
    clipping (SpaceInvaders, whose aliens are worth 5 to 30): the same game, seeds and
    actions give the signs of the unclipped rewards. Evaluation (env_vec_config's) turning
    both off is checked in C (test_gym)."""
    v = shoal.make_vec("gym:ALE/Breakout-v5", 1, options="reward_clip=0")
    e = gym.make("ALE/Breakout-v5", frameskip=1)
    e = FrameStackObservation(AtariPreprocessing(e, terminal_on_life_loss=True), 4)
    o, _ = v.reset(seed=[5])
    wo, _ = e.reset(seed=5)
    assert np.array_equal(o[0], wo)
    rng = np.random.default_rng(3)
    lives = e.unwrapped.ale.lives()
    for t in range(3000):
        a = np.array([1 if t % 20 == 0 else rng.integers(0, 4)])  # FIRE serves the ball
        o, r, te, tr, _ = v.step(a)
        wo, wr, wte, wtr, _ = e.step(int(a[0]))
        assert (r[0], bool(te[0]), bool(tr[0])) == (wr, wte, wtr), t
        if not wte:
            assert np.array_equal(o[0], wo), t
            continue
        assert e.unwrapped.ale.lives() == lives - 1, "a life, not the game"
        life_step = t
        last = o[0].copy()
        o, r, te, tr, _ = v.step(np.array([0]))  # the game goes on from that screen
        assert not te[0] and np.array_equal(o[0, :3], last[1:]), "the stack goes on"
        break
    else:
        raise AssertionError("no life lost in 3000 steps")
    clipped = shoal.make_vec("gym:ALE/SpaceInvaders-v5", 1)
    raw = shoal.make_vec("gym:ALE/SpaceInvaders-v5", 1, options="reward_clip=0")
    clipped.reset(seed=[7])
    raw.reset(seed=[7])
    big = 0
    for t in range(1500):
        a = rng.integers(0, 6, 1)
        _, rc, _, _, _ = clipped.step(a)
        _, rr, _, _, _ = raw.step(a)
        assert rc[0] == np.sign(rr[0]), (t, rc, rr)
        big += rr[0] > 1
    assert big > 0, "no reward above 1 to clip"
    return life_step, big


def main():
    for game, seed in (("ALE/Pong-v5", 10), ("ALE/Breakout-v5", 20)):
        ends, nonzero = exact(game, 2, 1500, seed)
        print("%s: 2 copies x 1500 steps equal, %d episode ends, %d rewards" % (game, ends, nonzero))
        assert nonzero > 0, game
    t, big = training_settings()
    print("life loss: equal to Gymnasium's up to the first lost life at step %d, then the "
          "game goes on; %d rewards above 1 clipped to 1" % (t, big))
    try:
        shoal.make_vec("gym:ALE/Pong-v5", 1, options="frameskip=4")
    except shoal.ShoalError as ex:
        assert "frame_skip" in str(ex), ex
    else:
        raise AssertionError("frameskip=4 was taken")
    print("1 passed, 0 failed")


if __name__ == "__main__":
    sys.exit(main())
