# SPDX-License-Identifier: Apache-2.0
"""Policies trained by shoal, loaded from a snapshot, acting on numpy batches in C."""

import ctypes
import os
import weakref

import numpy as np

from . import _lib
from . import spaces as _spaces
from ._lib import check, lib


ALGOS = {0: "dqn", 1: "impala", 2: "ppo"}


class Policy:
    """A policy trained by shoal, acting on numpy batches with the C code shoal's actors run.

    - Ape-X DQN (``policy.algo == "dqn"``): ``policy(obs)`` returns argmax_a Q(obs, a)
      (lowest index on ties), as shoal's actor with ε = 0 and ``shoal eval`` choose;
      ``policy.q(obs)`` returns the Q-values ``(B, num_actions)``.
    - IMPALA and PPO (``"impala"``, ``"ppo"``): the actor-critic of the run, with the
      run's observation normaliser (saved in the snapshot) applied first, as
      shoal-onpolicy-actor does. ``policy(obs)`` returns the policy's mode (argmax of the
      logits, or the Gaussian mean clipped to the Box); ``policy.sample(obs)`` samples
      actions and returns them with their log-probabilities; ``policy.seed(n)`` seeds the
      sampling RNG (shoal's xoshiro256**, the actor's).

    ``obs`` is one observation (the env's observation shape) or a batch
    ``(B, *shape)``, float32 or uint8 (other numeric dtypes are converted to float32).
    Discrete actions are int32 ``(B,)``; Box actions float32 ``(B, D)`` (one observation:
    no batch axis).

    Recurrent policies (an IMPALA/PPO run with an LSTM core, ``ac.lstm``;
    ``policy.recurrent``): the policy carries each env's core state (h, c) from call to
    call, as shoal-onpolicy-actor and ``shoal eval`` do. Pass ``episode_start`` (B bools:
    the observations that begin an episode, e.g. ``terminated | truncated`` of the last
    step of a same-step-autoreset vector env, all True after ``reset``) and their states
    are zeroed before acting. The first call (and the first after ``reset_state()``)
    starts every env from zeros; ``policy.state`` reads or sets ``(h, c)``, each
    ``(B, lstm_size)`` float32. A call with another batch size than the carried state's
    raises ValueError until ``reset_state()``. Feed-forward policies ignore
    ``episode_start``.
    """

    def __init__(self, handle, source):
        self._h = handle
        self._finalizer = weakref.finalize(self, lib.shoal_c_policy_destroy, handle)
        info = _lib.PolicyInfo()
        check(lib.shoal_c_policy_info_get(handle, ctypes.byref(info)))
        self.source = source
        self.env_id = info.env_id.decode()
        self.algo = ALGOS.get(int(info.algo), "dqn")
        self.observation_space = _spaces.from_c(info.obs)
        self.act_dim = int(info.act_dim)
        if self.algo == "dqn":
            self.action_space = _spaces.Discrete(info.num_actions)
            self.net = "minatar" if info.net == 1 else "mlp"
        else:
            self.action_space = _spaces.from_c(info.act)
            self.net = "actor-critic"
        self.num_actions = int(info.num_actions)
        self.normalizes_obs = bool(info.norm_obs)
        self.version = None if info.version < 0 else int(info.version)
        self.env_steps = None if info.env_steps < 0 else int(info.env_steps)
        self.score = None if np.isnan(info.score) else float(info.score)
        self.state_size = int(info.state_size)
        self.recurrent = self.state_size > 0
        self.lstm_size = self.state_size // 2
        self._state = None  # (B, state_size) float32: h then c per env
        self._shape = self.observation_space.shape

    def _batch(self, obs):
        if self._h is None:
            raise ValueError("the policy is closed")
        x = np.asarray(obs)
        single = x.shape == self._shape
        if single:
            x = x[None]
        elif x.ndim != len(self._shape) + 1 or x.shape[1:] != self._shape or x.shape[0] < 1:
            raise ValueError(f"{self.env_id} policy: observations must have shape "
                             f"{self._shape} or (B, *{self._shape}), got {x.shape}")
        if x.dtype == np.uint8:
            dt = 2
        elif x.dtype == np.float32:
            dt = 1
        elif x.dtype.kind in "fiub":
            x, dt = x.astype(np.float32), 1
        else:
            raise TypeError(f"{self.env_id} policy: observations must be numbers, got {x.dtype}")
        return np.ascontiguousarray(x), dt, single

    def _actions(self, B):
        if self.act_dim > 0:
            return np.empty((B, self.act_dim), np.float32)
        return np.empty(B, np.int32)

    def act(self, obs, return_q=False, episode_start=None):
        """Greedy actions ((B,) int32, (B, D) float32 for a Box; no batch axis for one
        observation) and, with ``return_q`` (DQN only), the Q-values as well.
        ``episode_start``: see the class (recurrent policies)."""
        if self.algo != "dqn":
            if return_q:
                raise TypeError(f"{self.env_id} {self.algo} policy: an actor-critic has no "
                                "Q-values")
            return self.sample(obs, greedy=True, episode_start=episode_start)[0]
        x, dt, single = self._batch(obs)
        B = x.shape[0]
        actions = np.empty(B, np.int32)
        q = np.empty((B, self.num_actions), np.float32) if return_q else None
        check(lib.shoal_c_policy_act(self._h, x.ctypes.data, dt, B, actions.ctypes.data,
                                     q.ctypes.data if return_q else None),
              f"{self.env_id} policy")
        if single:
            actions, q = actions[0], (q[0] if return_q else None)
        return (actions, q) if return_q else actions

    __call__ = act

    def sample(self, obs, greedy=False, return_raw=False, episode_start=None):
        """IMPALA/PPO: actions sampled from the policy (``greedy=True``: its mode) and
        their log-probabilities ``(B,)`` float32, as shoal-onpolicy-actor computes them.
        Box actions come clipped to the Box (what the env steps with); the log-probability
        is that of the unclipped sample, which ``return_raw=True`` adds:
        ``(actions, raw, log_probs)``. ``episode_start``: see the class (recurrent
        policies)."""
        if self.algo == "dqn":
            raise TypeError(f"{self.env_id} policy: Ape-X DQN acts greedily: use act() or q()")
        x, dt, single = self._batch(obs)
        B = x.shape[0]
        actions = self._actions(B)
        raw = np.empty((B, self.act_dim), np.float32) if return_raw and self.act_dim else None
        logp = np.empty(B, np.float32)
        raw_p = raw.ctypes.data if raw is not None else None
        if self.recurrent:
            first = self._episode_start(episode_start, B)
            if self._state is None:
                self._state = np.zeros((B, self.state_size), np.float32)
            elif self._state.shape[0] != B:
                raise ValueError(f"{self.env_id} policy: it carries the state of "
                                 f"{self._state.shape[0]} envs, got {B} observations; call "
                                 "reset_state() to start over")
            check(lib.shoal_c_policy_sample_recurrent(
                self._h, x.ctypes.data, dt, B, self._state.ctypes.data,
                first.ctypes.data if first is not None else None, int(bool(greedy)),
                actions.ctypes.data, raw_p, logp.ctypes.data), f"{self.env_id} policy")
        else:
            check(lib.shoal_c_policy_sample(self._h, x.ctypes.data, dt, B, int(bool(greedy)),
                                            actions.ctypes.data, raw_p, logp.ctypes.data),
                  f"{self.env_id} policy")
        if return_raw and raw is None:
            raw = actions.copy()  # discrete: nothing is clipped
        if single:
            actions, logp = actions[0], logp[0]
            raw = raw[0] if return_raw else None
        return (actions, raw, logp) if return_raw else (actions, logp)

    @staticmethod
    def _episode_start(episode_start, B):
        if episode_start is None:
            return None
        f = np.asarray(episode_start)
        if f.shape == ():
            f = np.full(B, bool(f))
        if f.shape != (B,):
            raise ValueError(f"episode_start: shape ({B},) (one per observation), got {f.shape}")
        return np.ascontiguousarray(f != 0, np.uint8)

    @property
    def state(self):
        """Recurrent policies: the carried ``(h, c)``, each ``(B, lstm_size)`` float32
        (copies), or None before the first call / after ``reset_state()``. Feed-forward
        policies: None. Assign ``(h, c)`` to set it (None: ``reset_state()``)."""
        if self._state is None:
            return None
        H = self.lstm_size
        return self._state[:, :H].copy(), self._state[:, H:].copy()

    @state.setter
    def state(self, hc):
        if hc is None:
            self._state = None
            return
        if not self.recurrent:
            raise ValueError(f"{self.env_id} policy: no recurrent state (no LSTM core)")
        h, c = (np.asarray(v, np.float32) for v in hc)
        H = self.lstm_size
        if h.ndim == 1:
            h, c = h[None], c[None]
        if h.shape != c.shape or h.ndim != 2 or h.shape[1] != H:
            raise ValueError(f"{self.env_id} policy: state (h, c) must each be (B, {H}), got "
                             f"{h.shape} and {c.shape}")
        self._state = np.ascontiguousarray(np.concatenate([h, c], axis=1), np.float32)

    def reset_state(self, mask=None):
        """Recurrent policies: forgets the carried state (mask None: the next call starts
        every env from zeros, with any batch size), or zeroes the envs where ``mask``
        (B bools) is True. A no-op for feed-forward policies."""
        if mask is None or self._state is None:
            self._state = None
            return
        m = np.asarray(mask, bool)
        if m.shape != (self._state.shape[0],):
            raise ValueError(f"reset_state: mask of shape ({self._state.shape[0]},), got {m.shape}")
        self._state[m] = 0

    def seed(self, seed):
        """Seeds the sampling RNG (a new policy starts from seed 0)."""
        if self._h is None:
            raise ValueError("the policy is closed")
        check(lib.shoal_c_policy_seed(self._h, int(seed) & (2**64 - 1)))

    def q(self, obs):
        """Q-values, (B, num_actions) float32 (or (num_actions,) for one observation)."""
        return self.act(obs, return_q=True)[1]

    def close(self):
        self._finalizer()
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        acts = f"{self.num_actions} actions" if self.act_dim == 0 else f"{self.act_dim}-d Box"
        net = f"{self.net} + LSTM {self.lstm_size}" if self.recurrent else self.net
        return (f"Policy({self.env_id}, {self.algo}, {net}, {acts}, "
                f"version={self.version}, from {self.source})")


def load_policy(path_or_uri, run=None, best=False, version=None, config=None):
    """Loads a policy trained by shoal.

    - ``load_policy("file:///data/runs", run="cartpole-1")``: the latest snapshot of a
      run in a store (any store URI or folder ``shoal run`` takes; ``mongodb://`` too);
      ``best=True`` the one with the best evaluation score, ``version=`` a given one.
    - ``load_policy("runs/cartpole-1/snapshots/12.safetensors")``: a snapshot file; the
      run's config is found beside it (the file store's layout) or given as ``config=``
      (a YAML file path).

    The network is built from the run's resolved config, as the actor builds it: Ape-X
    DQN's Q-network, or for an IMPALA/PPO run (``algo:`` in its config) the actor-critic
    and the observation normaliser stored with the snapshot.
    Errors (no such run or snapshot, a damaged file) raise with the C message.
    """
    h = ctypes.c_void_p()
    target = os.fspath(path_or_uri)
    if run is not None:
        if best and version is not None:
            raise ValueError("load_policy: best=True and version= exclude each other")
        which = -2 if best else (-1 if version is None else int(version))
        if which < -2 or (version is not None and int(version) < 0):
            raise ValueError(f"load_policy: version={version}: needs >= 0")
        check(lib.shoal_c_policy_load_store(ctypes.byref(h), target.encode(), str(run).encode(),
                                            which),
              f"load_policy({target!r}, run={run!r})")
        src = f"{target} run {run} ({'best' if best else version if version is not None else 'latest'})"
    else:
        if best or version is not None:
            raise ValueError("load_policy: best= and version= pick a snapshot of a run: pass run=")
        if lib.shoal_c_is_store_uri(target.encode()) or os.path.isdir(target):
            raise ValueError(f"load_policy({target!r}): a store: pass run= to pick the run")
        cfg = None if config is None else os.fspath(config).encode()
        check(lib.shoal_c_policy_load_file(ctypes.byref(h), target.encode(), cfg),
              f"load_policy({target!r})")
        src = target
    return Policy(h.value, src)
