# SPDX-License-Identifier: Apache-2.0
"""shoal's C vector envs with Gymnasium's vector-env API shape."""

import ctypes
import secrets
import weakref

import numpy as np

from . import _lib
from . import spaces as _spaces
from ._lib import check, lib


def _options(options):
    if options is None:
        return None
    if isinstance(options, dict):
        options = ",".join(f"{k}={float(v)!r}" for k, v in options.items())
    if not isinstance(options, str):
        raise TypeError(f"options: a dict or a 'key=value,...' string, got {type(options).__name__}")
    return options.encode()


def list_envs():
    """The registered env ids."""
    n = lib.shoal_c_env_list(None, 0)
    names = (ctypes.c_char_p * n)()
    lib.shoal_c_env_list(names, n)
    return [s.decode() for s in names]


class VectorEnv:
    """``num_envs`` copies of a registered env, stepped together in C.

    The Gymnasium vector-env API::

        env = shoal.make_vec("CartPole-v1", num_envs=256)
        obs, info = env.reset(seed=42)               # copy i is seeded with 42 + i
        obs, reward, terminated, truncated, info = env.step(actions)

    Copies whose episode ends are reset within the same step (Gymnasium's
    ``autoreset_mode=SAME_STEP``): ``obs`` holds their new first observation and, when any
    ended, ``info["final_obs"]`` holds the last observation of the finished episode in the
    rows where ``info["_final_obs"]`` is True (other rows are stale).

    Zero copy: the arrays returned by ``reset`` and ``step`` (and those in ``info``) are
    the buffers the C code writes into; the next ``step`` or ``reset`` overwrites them in
    place. Keep a value with ``.copy()``, or make the env with ``copy=True`` to get fresh
    arrays every step (slower).

    Actions: discrete envs take an integer array of shape ``(num_envs,)``; box envs a
    float array of shape ``(num_envs, *action_shape)``. ``int32`` / ``float32`` arrays go
    straight through; other integer or float dtypes are checked and converted. Wrong
    shapes and dtypes raise ``ValueError`` / ``TypeError``; out-of-range, NaN or infinite
    values raise ``ValueError`` naming the copy, and no copy is stepped.
    """

    def __init__(self, env_id, num_envs=1, *, num_threads=1, max_episode_steps=None,
                 options=None, copy=False, seed=None):
        if not isinstance(env_id, str):
            raise TypeError(f"env_id: a string, got {type(env_id).__name__}")
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs: a positive integer, got {num_envs!r}")
        h = ctypes.c_void_p()
        limit = 0 if max_episode_steps is None else (-1 if max_episode_steps <= 0
                                                     else int(max_episode_steps))
        check(lib.shoal_c_vec_create(ctypes.byref(h), env_id.encode(), int(num_envs),
                                     int(num_threads), limit, _options(options)),
              f"make {env_id!r}")
        self._h = h.value
        self._finalizer = weakref.finalize(self, lib.shoal_c_vec_destroy, self._h)
        spec = _lib.Spec()
        check(lib.shoal_c_vec_spec(self._h, ctypes.byref(spec)))
        self.spec = spec
        self.env_id = spec.id.decode()
        self.num_envs = B = int(num_envs)
        self.max_episode_steps = spec.max_episode_steps
        self.reward_threshold = spec.reward_threshold
        self.single_observation_space = _spaces.from_c(spec.obs)
        self.single_action_space = _spaces.from_c(spec.act)
        self.observation_space = _spaces.batch(self.single_observation_space, B)
        self.action_space = _spaces.batch(self.single_action_space, B)
        self.copy = bool(copy)
        self.metadata = {"autoreset_mode": "same_step",
                         "render_modes": ["rgb_array"] if spec.render_w > 0 else []}

        osp, asp = self.single_observation_space, self.single_action_space
        self._discrete = isinstance(asp, _spaces.Discrete)
        self._act_shape = (B,) + asp.shape
        # The C buffer: int32 for discrete actions (the space says int64, as Gymnasium's).
        self._act_dtype = np.dtype(np.int32) if self._discrete else asp.dtype
        self._act = np.zeros(self._act_shape, self._act_dtype)
        self._obs = np.zeros((B,) + osp.shape, osp.dtype)
        self._final_obs = np.zeros((B,) + osp.shape, osp.dtype)
        self._rew = np.zeros(B, np.float32)
        self._term = np.zeros(B, np.bool_)
        self._trunc = np.zeros(B, np.bool_)
        self._done = np.zeros(B, np.bool_)
        check(lib.shoal_c_vec_bind(self._h, self._act.ctypes.data, self._obs.ctypes.data,
                                   self._rew.ctypes.data, self._term.ctypes.data,
                                   self._trunc.ctypes.data, self._final_obs.ctypes.data,
                                   self._done.ctypes.data))
        self._step_c = lib.shoal_c_vec_step
        self._reset_c = lib.shoal_c_vec_reset
        self._seeder = np.random.default_rng(seed)
        # Copies seeded at least once; a None entry reseeds the others from OS entropy, as
        # Gymnasium does, so no unseeded copy repeats another's (C's default: seed i).
        self._seeded = np.zeros(B, np.bool_)
        self._was_reset = False

    # ---- Gymnasium API --------------------------------------------------------------

    def reset(self, *, seed=None, options=None):
        """Resets every copy; returns ``(obs, info)``. As Gymnasium's vector envs:

        - ``seed=n`` (an int): copy i is seeded with ``n + i``;
        - ``seed=[s0, s1, ...]`` (one per copy): copy i with ``s_i``; a ``None`` entry
          leaves that copy's RNG going on from where it is, or, for a copy never seeded
          before, seeds it from fresh OS entropy (as Gymnasium's unseeded envs);
        - ``seed=None``: a seed drawn from a generator that the last integer seed (or the
          constructor's ``seed``) started, so a sequence of resets is reproducible;
        - ``options``: a dict (or "k=v,...") of the env's reset options, for this reset
          only, as Gymnasium's ``reset(options=...)``: ``{"low": .., "high": ..}`` bound
          the start state of CartPole, MountainCar(Continuous) and Acrobot (Gymnasium's
          defaults ±0.05, [-0.6, -0.4], ±0.1), ``{"x_init": .., "y_init": ..}``
          Pendulum's (π, 1). Later (auto-)resets use the env's own settings again
          (``make_vec(options=...)``, else the defaults). Other keys raise ValueError."""
        h = self._handle()
        B = self.num_envs
        reseed = np.ones(B, np.uint8)
        if seed is None:
            seeds = np.uint64(self._seeder.integers(0, 2**63)) + np.arange(B, dtype=np.uint64)
        elif isinstance(seed, (list, tuple, np.ndarray)):
            if len(seed) != B:
                raise ValueError(f"reset(seed=[...]): {len(seed)} seeds for {B} copies")
            seeds = np.zeros(B, np.uint64)
            for i, s in enumerate(seed):
                if s is None:
                    if self._seeded[i]:
                        reseed[i] = 0
                    else:
                        seeds[i] = secrets.randbits(64)
                    continue
                if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
                    raise TypeError(f"reset(seed=[...]): seed {i} is {s!r}, not an int or None")
                if not 0 <= int(s) < 2**64:
                    raise ValueError(f"reset(seed=[...]): seed {i} = {s}: needs 0 <= seed < 2**64")
                seeds[i] = int(s)
        else:
            if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
                raise TypeError(f"reset(seed={seed!r}): an int, a list of one per copy, or None")
            seed = int(seed)
            if seed < 0 or seed >= 2**64:
                raise ValueError(f"reset(seed={seed}): needs 0 <= seed < 2**64")
            self._seeder = np.random.default_rng(seed)
            seeds = np.uint64(seed) + np.arange(B, dtype=np.uint64)  # wraps as C's seed + i
        seeds = np.ascontiguousarray(seeds, np.uint64)
        check(lib.shoal_c_vec_reset_each(h, seeds.ctypes.data, reseed.ctypes.data,
                                         _options(options), None), "reset")
        self._seeded[:] = True
        self._was_reset = True
        return (self._obs.copy() if self.copy else self._obs), {}

    def step(self, actions):
        """Steps every copy; returns ``(obs, reward, terminated, truncated, info)``."""
        a = actions
        if type(a) is np.ndarray and a.dtype == self._act_dtype and a.shape == self._act_shape:
            np.copyto(self._act, a)
        else:
            self._convert_actions(a)
        n = self._step_c(self._h)
        if n < 0:
            raise self._step_error(n)
        if self.copy:
            info = {"final_obs": self._final_obs.copy(), "_final_obs": self._done.copy()} if n else {}
            return (self._obs.copy(), self._rew.copy(), self._term.copy(), self._trunc.copy(),
                    info)
        info = {"final_obs": self._final_obs, "_final_obs": self._done} if n else {}
        return self._obs, self._rew, self._term, self._trunc, info

    def close(self):
        """Frees the C env; later calls raise. Safe to call twice."""
        self._finalizer()
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._h is None else f"{self.num_envs} envs"
        return f"VectorEnv({self.env_id}, {state})"

    # ---- beyond Gymnasium -------------------------------------------------------------

    def episodes(self):
        """Episodes finished since the last call (oldest first), as a structured array of
        (index: the copy, length, ret: undiscounted return, truncated)."""
        h = self._handle()
        cap = 4 * self.num_envs + 64
        out = np.zeros(cap, [("index", np.int32), ("length", np.int32), ("ret", np.float64),
                             ("truncated", np.bool_)])
        idx, ln = np.zeros(cap, np.int32), np.zeros(cap, np.int32)
        ret, tr = np.zeros(cap, np.float64), np.zeros(cap, np.bool_)
        n = check(lib.shoal_c_vec_episodes(h, idx.ctypes.data, ln.ctypes.data, ret.ctypes.data,
                                           tr.ctypes.data, cap))
        out["index"], out["length"], out["ret"], out["truncated"] = idx, ln, ret, tr
        return out[:n]

    def stats(self):
        """Steps, episodes and the mean return / length of the last 100 episodes."""
        st = _lib.Stats()
        check(lib.shoal_c_vec_stats(self._handle(), ctypes.byref(st)))
        return {"steps": st.steps, "episodes": st.episodes, "dropped": st.dropped,
                "mean_return_100": st.mean_return_100, "mean_length_100": st.mean_length_100}

    def get_state(self, index):
        """Copy ``index``'s physical state, as Gymnasium's ``env.unwrapped.state``: a
        float64 array (CartPole: x, x_dot, theta, theta_dot; MountainCar(Continuous):
        position, velocity; Acrobot: theta1, theta2, dtheta1, dtheta2; Pendulum: theta,
        theta_dot). MinAtar games have none: ShoalNotSupportedError."""
        h = self._handle()
        i = self._index(index, "get_state")
        buf = np.zeros(16, np.float64)
        n = check(lib.shoal_c_vec_get_state(h, i, buf.ctypes.data, 16), "get_state")
        return buf[:n].copy()

    def set_state(self, index, state):
        """Sets copy ``index``'s physical state (as ``get_state`` orders it), as
        Gymnasium's ``env.unwrapped.state = state``: the copy's next step starts from
        it; the observation last returned is not rewritten, and the episode's step count
        (the time limit) goes on. Wrong sizes and non-finite values raise ValueError."""
        h = self._handle()
        i = self._index(index, "set_state")
        x = np.ascontiguousarray(np.asarray(state, dtype=np.float64).reshape(-1))
        check(lib.shoal_c_vec_set_state(h, i, x.ctypes.data, x.size), "set_state")

    def get_attr(self, name):
        """Gymnasium's ``VectorEnv.get_attr`` for ``"state"``: every copy's state."""
        if name != "state":
            raise AttributeError(f"{self.env_id}: get_attr({name!r}): only 'state'")
        return tuple(self.get_state(i) for i in range(self.num_envs))

    def set_attr(self, name, values):
        """Gymnasium's ``VectorEnv.set_attr`` for ``"state"``: one state per copy (a list
        or a (num_envs, n) array), or one state for all."""
        if name != "state":
            raise AttributeError(f"{self.env_id}: set_attr({name!r}): only 'state'")
        if isinstance(values, (list, tuple)) or (np.ndim(values) == 2):
            if len(values) != self.num_envs:
                raise ValueError(f"set_attr('state'): {len(values)} states for "
                                 f"{self.num_envs} copies")
            for i, v in enumerate(values):
                self.set_state(i, v)
        else:
            for i in range(self.num_envs):
                self.set_state(i, values)

    def render(self, index=0):
        """Copy ``index`` drawn as an RGB uint8 array (height, width, 3)."""
        h = self._handle()
        if not isinstance(index, (int, np.integer)) or not 0 <= index < self.num_envs:
            raise ValueError(f"render({index!r}): index in [0, {self.num_envs})")
        if self.spec.render_w <= 0:
            raise ValueError(f"{self.env_id}: not renderable")
        w, hgt = self.spec.render_w, self.spec.render_h
        rgb = np.zeros((hgt, w, 3), np.uint8)
        check(lib.shoal_c_vec_render(h, int(index), rgb.ctypes.data), "render")
        return rgb

    # ---- internals --------------------------------------------------------------------

    def _handle(self):
        if self._h is None:
            raise ValueError(f"{self.env_id}: the env is closed")
        return self._h

    def _index(self, index, what):
        if (not isinstance(index, (int, np.integer)) or isinstance(index, bool)
                or not 0 <= index < self.num_envs):
            raise IndexError(f"{self.env_id}: {what}({index!r}): index in [0, {self.num_envs})")
        return int(index)

    def _step_error(self, rc):
        if self._h is None:
            return ValueError(f"{self.env_id}: the env is closed")
        if rc == _lib.ESTATE and not self._was_reset:
            return _lib.ShoalStateError(f"{self.env_id}: step() before reset()", rc)
        return _lib.error(rc, "step")

    def _convert_actions(self, a):
        """The slow path: checks and converts actions that are not already an array of
        the action dtype and shape, into the bound action buffer."""
        self._handle()
        if not isinstance(a, np.ndarray):
            if self._discrete and isinstance(a, (int, np.integer)) and self.num_envs == 1:
                a = np.asarray([a])
            else:
                a = np.asarray(a)
        what = (f"{self.env_id}: actions must have shape {self._act_shape} "
                f"(num_envs{', *action_shape' if not self._discrete else ''})")
        if a.shape != self._act_shape:
            raise ValueError(f"{what}, got {a.shape}")
        if self._discrete:
            if a.dtype.kind not in "iu":
                raise TypeError(f"{self.env_id}: discrete actions must be integers, got dtype "
                                f"{a.dtype}")
            n = self.single_action_space.n
            bad = np.flatnonzero((a < 0) | (a >= n))
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"{self.env_id}: action {a[i]} of copy {i} is out of range "
                                 f"[0, {n})")
            np.copyto(self._act, a, casting="unsafe")
        else:
            if a.dtype.kind not in "fiu":
                raise TypeError(f"{self.env_id}: box actions must be numbers, got dtype {a.dtype}")
            with np.errstate(over="ignore", invalid="ignore"):
                np.copyto(self._act, a, casting="unsafe")
            bad = np.flatnonzero(~np.isfinite(self._act.reshape(self.num_envs, -1)).all(axis=1))
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"{self.env_id}: action of copy {i} is not finite "
                                 f"({a[i].tolist()}; NaN, infinite or beyond float32)")


def make_vec(env_id, num_envs=1, **kwargs):
    """A :class:`VectorEnv` of ``num_envs`` copies of ``env_id``. Keyword arguments:
    ``num_threads``, ``max_episode_steps`` (None: the registered limit; <= 0: none),
    ``options`` (a dict or "k=v,..." of env settings, e.g. ``{"sticky_action_prob": 0}``),
    ``copy``, ``seed``."""
    return VectorEnv(env_id, num_envs, **kwargs)
