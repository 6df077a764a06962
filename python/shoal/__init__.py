# SPDX-License-Identifier: Apache-2.0
"""shoal from Python: C-speed vector envs with Gymnasium's API, and the policies shoal
trains. A thin ctypes layer over libshoal.so (python/shoal_c.h); no compiled extension.

    import numpy as np, shoal
    env = shoal.make_vec("CartPole-v1", num_envs=256)
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(1000):
        obs, rew, term, trunc, info = env.step(rng.integers(0, 2, 256, dtype=np.int32))

    policy = shoal.load_policy("file:///data/runs", run="cartpole-1", best=True)
    actions = policy(obs)          # greedy, as shoal's actor acts with ε = 0

    ppo = shoal.load_policy("file:///data/runs", run="pendulum-ppo-1")  # IMPALA/PPO runs too
    ppo.seed(0)
    actions, log_probs = ppo.sample(obs)   # as shoal-onpolicy-actor samples; ppo(obs): the mode

    obs, info = env.reset(seed=[1, 2, None, ...], options={"low": -0.1, "high": 0.1})
    s = env.get_state(3); env.set_state(3, s)        # Gymnasium's env.unwrapped.state
    lstm = shoal.load_policy("file:///data/runs", run="cartpole-novel-ppo-1")  # ac.lstm
    actions = lstm(obs, episode_start=term | trunc)   # carries (h, c) per env
"""

from ._lib import (ShoalError, ShoalIOError, ShoalNotFoundError, ShoalNotSupportedError,
                   ShoalStateError, ShoalValueError)
from .policy import Policy, load_policy
from .spaces import Box, Discrete, MultiDiscrete
from .vector import VectorEnv, list_envs, make_vec

__version__ = "0.1.0"
__all__ = ["VectorEnv", "make_vec", "list_envs", "Policy", "load_policy", "Box", "Discrete",
           "MultiDiscrete", "ShoalError", "ShoalValueError", "ShoalNotFoundError",
           "ShoalIOError", "ShoalStateError", "ShoalNotSupportedError"]
