#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference games for shoal's MinAtar envs (tests/test_envs_minatar.c), played by
MinAtar's own Python game code (github.com/kenjyoung/MinAtar, minatar/environments/).

MinAtar draws from numpy's RandomState; here the games get an object with the same
methods (rand, randint, choice) that draws from shoal's RNG instead (xoshiro256** seeded
by splitmix64, as common/shoal.c; uniform = top 53 bits / 2^53; integers below n by
Lemire's method on the top 32 bits, as envs/gymmath.h). With the same stream, the C games
must produce the same observations, rewards and game-overs step for step. Sticky actions
(p = 0.1) are applied as minatar.Environment.act applies them.

    /usr/bin/python3 tests/reference/minatar_ref.py DIR > tests/reference/minatar_ref.txt

DIR holds MinAtar's game modules (breakout.py, freeway.py, ...; e.g. the
minatar/environments folder of an installed MinAtar). Format: "game ID SEED STEPS", then
per step "action reward terminated hash" with hash the FNV-1a 32-bit hash of the
observation as uint8 channels-first (C, 10, 10).
"""
import importlib.util
import os
import sys

import numpy as np

M64 = (1 << 64) - 1


class ShoalRng:
    def __init__(self, seed):
        x = seed & M64
        self.s = []
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M64
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ (z >> 31))

    @staticmethod
    def _rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def next(self):
        s = self.s
        r = (self._rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return r

    def uniform(self):
        return (self.next() >> 11) * 2.0**-53

    def below(self, n):
        m = (self.next() >> 32) * n
        lo = m & 0xFFFFFFFF
        if lo < n:
            t = ((1 << 32) - n) % n
            while lo < t:
                m = (self.next() >> 32) * n
                lo = m & 0xFFFFFFFF
        return m >> 32

    # numpy.random.RandomState's methods as MinAtar calls them
    def rand(self):
        return self.uniform()

    def randint(self, low, high=None, size=None):
        if high is None:
            low, high = 0, low
        if size is None:
            return low + self.below(high - low)
        return np.array([low + self.below(high - low) for _ in range(size)])

    def choice(self, a, size=None):
        pick = (lambda: self.below(a)) if isinstance(a, int) else (lambda: a[self.below(len(a))])
        if size is None:
            return pick()
        return np.array([pick() for _ in range(size)])


def fnv1a(data):
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def load(folder, game):
    spec = importlib.util.spec_from_file_location(game, os.path.join(folder, game + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def seaquest_policy(env, policy):
    """Rescue divers, shoot what shares the sub's row, surface when full or short of air:
    reaches the rules random play never sees (six divers, the surfacing reward, ramping)."""
    if policy.random() < 0.15:
        return int(policy.integers(6))
    if env.sub_y > 0 and (env.oxygen < 45 or env.diver_count >= 6):
        return 2  # up
    row = [e for e in env.e_subs + env.e_fish if e[1] == env.sub_y]
    if row and env.sub_y > 0:
        e = min(row, key=lambda z: abs(z[0] - env.sub_x))
        if (e[0] > env.sub_x) != bool(env.sub_or):
            return 3 if e[0] > env.sub_x else 1  # turn towards it
        return 5  # fire
    if env.divers and env.diver_count < 6:
        d = min(env.divers, key=lambda z: abs(z[0] - env.sub_x) + abs(z[1] - env.sub_y))
        if d[1] != env.sub_y:
            return 4 if d[1] > env.sub_y else 2
        return 3 if d[0] > env.sub_x else 1
    return 4 if env.sub_y < 3 else int(policy.integers(6))


def invaders_policy(env, policy):
    """Fire from under the aliens and step aside from bullets above the cannon."""
    if policy.random() < 0.2:
        return int(policy.integers(6))
    if env.e_bullet_map[7:9, env.pos].any():
        return 1 if env.pos > 0 else 3
    if env.shot_timer == 0 and env.alien_map[:, env.pos].any():
        return 5
    cols = np.flatnonzero(env.alien_map.any(axis=0))
    if len(cols):
        c = cols[np.argmin(np.abs(cols - env.pos))]
        return 3 if c > env.pos else 1 if c < env.pos else 0
    return 0


def main():
    folder = sys.argv[1]
    out = sys.stdout
    out.write("shoal-envs-minatar-ref 1\n")
    plan = [("breakout", "MinAtar/Breakout-v0"), ("freeway", "MinAtar/Freeway-v0"),
            ("asterix", "MinAtar/Asterix-v0"), ("seaquest", "MinAtar/Seaquest-v0"),
            ("space_invaders", "MinAtar/SpaceInvaders-v0")]
    policy = np.random.default_rng(7)
    stats = []
    for k, (game, gid) in enumerate(plan):
        seed, steps = 1000 + k, 4000 if game in ("seaquest", "space_invaders") else 2500
        env = load(folder, game).Env()
        rng = ShoalRng(seed)
        env.random = rng
        env.reset()
        last_action = 0  # minatar.Environment: not cleared by reset
        out.write("game %s %d %d\n" % (gid, seed, steps))
        for _ in range(steps):
            # a policy that lives longer than uniform play: mostly repeat, sometimes change
            if game == "seaquest":
                a = seaquest_policy(env, policy)
            elif game == "space_invaders":
                a = invaders_policy(env, policy)
            else:
                a = int(policy.integers(6))
                if game == "freeway" and policy.random() < 0.6:
                    a = 2
            act = a
            if rng.rand() < 0.1:
                act = last_action
            last_action = act
            r, term = env.act(act)
            obs = np.ascontiguousarray(np.transpose(env.state(), (2, 0, 1))).astype(np.uint8)
            out.write("%d %d %d %08x\n" % (a, int(r), int(term), fnv1a(obs.tobytes())))
            if term:
                stats.append((game, getattr(env, "ramp_index", 0)))
                env.reset()
    out.write("end\n")
    for game in ("asterix", "seaquest", "space_invaders"):
        ramps = [r for g, r in stats if g == game]
        sys.stderr.write("%s: %d episodes, highest difficulty ramp %d\n"
                         % (game, len(ramps), max(ramps) if ramps else -1))


if __name__ == "__main__":
    main()
