# SPDX-License-Identifier: Apache-2.0
"""Envs a user might write, registered the standard way (gymnasium.register), for
tests/test_gym.c and tests/test_gym_run.c: one that learns fast, and one for each way
an env can go wrong. The tests copy this file into a temporary folder outside the
repository and name the envs as gym:gym_user_envs:ID."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Corridor(gym.Env):
    """Walk right along a corridor of 6 cells: +1 at the end, -0.01 a step, 50 steps."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None, length=6):
        self.length = int(length)
        self.observation_space = spaces.Box(0.0, 1.0, (self.length,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.render_mode = render_mode
        self.pos = 0

    def _obs(self):
        o = np.zeros(self.length, np.float32)
        o[self.pos] = 1.0
        return o

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = int(self.np_random.integers(0, 2))
        return self._obs(), {}

    def step(self, action):
        self.pos = max(0, min(self.length - 1, self.pos + (1 if int(action) == 1 else -1)))
        done = self.pos == self.length - 1
        return self._obs(), (1.0 if done else -0.01), done, False, {}

    def render(self):
        img = np.zeros((8, 8 * self.length, 3), np.uint8)
        img[:, 8 * self.pos : 8 * self.pos + 8] = 255
        return img


class Faulty(Corridor):
    """A corridor that goes wrong at step `at` of its life: raises, returns a NaN reward,
    or an observation outside its space."""

    def __init__(self, how="raise", at=5):
        super().__init__()
        self.how, self.at, self.t = how, int(at), 0

    def step(self, action):
        o, r, te, tr, info = super().step(action)
        self.t += 1
        if self.t >= self.at:
            if self.how == "raise":
                raise RuntimeError("the simulator lost its licence server")
            if self.how == "nan":
                r = float("nan")
            if self.how == "outside":
                o = o * 0 + 7.0
        return o, r, te, tr, info


class DictObs(Corridor):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Dict({"pos": spaces.Discrete(6)})


class MultiBinaryAct(Corridor):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.MultiBinary(3)


gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=50, reward_threshold=0.9)
gym.register("Faulty-v0", entry_point=Faulty, max_episode_steps=50)
gym.register("DictObs-v0", entry_point=DictObs, max_episode_steps=50)
gym.register("MultiBinaryAct-v0", entry_point=MultiBinaryAct, max_episode_steps=50)
