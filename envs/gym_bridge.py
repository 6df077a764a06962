# SPDX-License-Identifier: Apache-2.0
"""shoal's Gymnasium bridge: B Gymnasium envs stepped for envs/gym.c.

envs/gym.c embeds this file in the library and runs it in the embedded interpreter
(or in the Python process that loaded libshoal.so). The C side owns every buffer: it
hands them over once as memoryviews, and this code writes each step's observations,
rewards and flags into NumPy views of them, so nothing is returned per step but an
error message or None.

Semantics are shoal's vector env (envs/envs.h): a copy whose episode ends is reset in
the same step, its last observation goes to final_obs and the new episode's first to
obs. That is Gymnasium's SAME_STEP autoreset mode, done here directly rather than
through SyncVectorEnv, whose step concatenates and copies infos that shoal never reads.

Every method that steps user code returns None, or a one-line message naming the copy
and the Python error's last line, so the C side reports it without a traceback dump.
"""

import math
import os
import re
import sys

# Headless rendering and no audio device: a learner or an actor has no display, and
# pygame greets stdout on import.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import numpy as np  # noqa: E402


class Refused(TypeError):
    """A space or setting shoal cannot take; its message is the whole story."""


def _last_line(ex):
    import traceback

    if isinstance(ex, Refused):
        return "refused: %s" % ex
    lines = traceback.format_exception_only(type(ex), ex)
    return lines[-1].strip() if lines else type(ex).__name__


_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?")


def _parse_value(text):
    t = text.strip()
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("none", "null", "~"):
        return None
    # numbers as YAML writes them ("nan" and "inf" stay text: an env's own word)
    if _INT.fullmatch(t):
        return int(t)
    if _FLOAT.fullmatch(t):
        return float(t)
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    return t


def parse_kwargs(options):
    """'k=v,k=v' -> dict; values as YAML scalars (numbers, true/false, null, text)."""
    kw = {}
    for part in (options or "").split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ValueError("option '%s' is not key=value" % part)
        k, v = part.split("=", 1)
        kw[k.strip()] = _parse_value(v)
    return kw


def _space_name(space):
    return type(space).__name__


def _refuse(what, space, hint):
    raise Refused(
        "its %s space is %s (%s); shoal takes Box observations (float32, float64 or "
        "uint8) and Discrete or Box actions. %s" % (what, _space_name(space), space, hint)
    )


def _box_bounds(space):
    low = np.asarray(space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(space.high, dtype=np.float64).reshape(-1)
    return [float(x) for x in low], [float(x) for x in high]


def _close_all(owner):
    """Closes owner.envs, each on its own: one that raises does not keep others open."""
    for e in owner.envs:
        try:
            e.close()
        except Exception:
            pass
    owner.envs = []


def _make_envs(owner, env_id, B, kw):
    """B gymnasium.make(env_id, **kw), or none: those made are closed if one fails."""
    import gymnasium

    owner.envs = []
    try:
        for _ in range(B):
            owner.envs.append(gymnasium.make(env_id, **kw))
    except BaseException:
        owner.close()
        raise
    return owner.envs


class Vec:
    """B copies of one Gymnasium env, stepped into C-owned buffers."""

    def __init__(self, env_id, B, options):
        import gymnasium

        kw = parse_kwargs(options)
        self.env_id = env_id
        self.B = B
        self.envs = _make_envs(self, env_id, B, kw)
        e = self.envs[0]
        spaces = gymnasium.spaces
        obs, act = e.observation_space, e.action_space
        if not isinstance(obs, spaces.Box):
            _refuse(
                "observation",
                obs,
                "Flatten it first, e.g. gymnasium.wrappers.FlattenObservation in the env's "
                "registered entry point.",
            )
        if obs.dtype not in (np.float32, np.float64, np.uint8):
            _refuse(
                "observation",
                obs,
                "Its dtype %s is none of float32, float64, uint8: cast it with "
                "gymnasium.wrappers.DtypeObservation." % obs.dtype,
            )
        self.obs_uint8 = obs.dtype == np.uint8
        if isinstance(act, spaces.Discrete):
            if int(act.start) != 0:
                _refuse(
                    "action",
                    act,
                    "A Discrete space must start at 0: re-map it with an ActionWrapper.",
                )
            self.act_n = int(act.n)
            self.act_shape = ()
            self.act_dtype = None
        elif isinstance(act, spaces.Box):
            self.act_n = 0
            self.act_shape = tuple(int(s) for s in act.shape)
            self.act_dtype = None if act.dtype == np.float32 else act.dtype
        else:
            _refuse(
                "action",
                act,
                "MultiDiscrete, MultiBinary and Dict actions need a wrapper that turns them "
                "into one Discrete or Box space.",
            )
        self.obs_shape = tuple(int(s) for s in obs.shape)
        if len(self.obs_shape) > 4 or len(self.act_shape) > 4:
            raise Refused("spaces of more than 4 dimensions are not supported")
        spec = e.spec
        self.max_episode_steps = int(spec.max_episode_steps or 0) if spec else 0
        thr = spec.reward_threshold if spec else None
        self.reward_threshold = float(thr) if thr is not None else math.nan
        self.render_mode = getattr(e, "render_mode", None)
        self.render_hw = (0, 0)
        if self.render_mode == "rgb_array":
            # The frame size, from a throwaway copy: the B copies' generators stay as
            # they were made, so seeding them later means what it says.
            probe = gymnasium.make(env_id, **kw)
            try:
                probe.reset(seed=0)
                f = probe.render()
                if f is not None and np.ndim(f) == 3 and np.shape(f)[2] == 3:
                    self.render_hw = (int(np.shape(f)[0]), int(np.shape(f)[1]))
            finally:
                probe.close()

    def spec(self):
        """The spaces as plain values for the C side's env_spec."""
        e = self.envs[0]
        olow, ohigh = _box_bounds(e.observation_space)
        if self.act_n:
            alow, ahigh = [], []
        else:
            alow, ahigh = _box_bounds(e.action_space)
        return (
            self.obs_shape,
            1 if self.obs_uint8 else 0,
            olow,
            ohigh,
            self.act_n,
            self.act_shape,
            alow,
            ahigh,
            self.max_episode_steps,
            self.reward_threshold,
            self.render_hw,
        )

    def bind(self, obs, act, rew, term, trunc, fin):
        """Views of the C side's buffers (memoryviews over its memory)."""
        B = self.B
        odt = np.uint8 if self.obs_uint8 else np.float32
        self.obs = np.frombuffer(obs, dtype=odt).reshape((B,) + self.obs_shape)
        self.fin = np.frombuffer(fin, dtype=odt).reshape((B,) + self.obs_shape)
        if self.act_n:
            self.act = np.frombuffer(act, dtype=np.int32)
        else:
            self.act = np.frombuffer(act, dtype=np.float32).reshape((B,) + self.act_shape)
        self.rew = np.frombuffer(rew, dtype=np.float64)
        self.term = np.frombuffer(term, dtype=np.uint8)
        self.trunc = np.frombuffer(trunc, dtype=np.uint8)

    def reset(self, seeds):
        """Resets every copy: seeds[i] an int, or None to go on from its generator (a
        copy never seeded draws fresh entropy, as Gymnasium does)."""
        obs = self.obs
        for i, e in enumerate(self.envs):
            try:
                o, _ = e.reset(seed=seeds[i])
                obs[i] = o
            except Exception as ex:
                return "copy %d: reset: %s" % (i, _last_line(ex))
        return None

    def step(self, autoreset, want_final):
        envs, obs, fin = self.envs, self.obs, self.fin
        rew, term, trunc = self.rew, self.term, self.trunc
        acts = self.act.tolist() if self.act_n else self.act
        conv = self.act_dtype
        i = 0
        try:
            for i in range(self.B):
                a = acts[i]
                if conv is not None:
                    a = a.astype(conv)
                o, r, te, tr, _ = envs[i].step(a)
                rew[i] = r
                term[i] = te
                trunc[i] = tr
                if autoreset and (te or tr):
                    if want_final:
                        fin[i] = o
                    o, _ = envs[i].reset()
                obs[i] = o
        except Exception as ex:
            return "copy %d: step: %s" % (i, _last_line(ex))
        return None

    def render(self, i):
        """Copy i's frame as (h, w, 3) uint8 bytes, or an error message (str)."""
        try:
            frame = self.envs[i].render()
        except Exception as ex:
            return "render: %s" % _last_line(ex)
        if frame is None:
            return "render: the env returned no frame (render_mode %r)" % self.render_mode
        a = np.ascontiguousarray(frame, dtype=np.uint8)
        if a.ndim != 3 or a.shape[2] != 3:
            return "render: a frame of shape %s, not (h, w, 3)" % (a.shape,)
        return (a.shape[0], a.shape[1], a.tobytes())

    def get_state(self, i):
        """Copy i's env.unwrapped.state as floats (classic control has one), or None."""
        st = getattr(self.envs[i].unwrapped, "state", None)
        if st is None:
            return None
        return [float(x) for x in np.asarray(st, dtype=np.float64).reshape(-1)]

    def close(self):
        _close_all(self)


class Atari:
    """B ALE games for envs/atari.c: the emulator objects and what the C side's frame loop
    calls on them. The preprocessing (frame skip, max-pool, resize, stack, no-op starts,
    life loss, reward clipping) is the C side's; this class only makes the envs, resets
    them (Gymnasium's seeding and no-op draw) and hands over the ALE's bound methods."""

    def __init__(self, env_id, B, options, noop_max):
        import gymnasium

        try:
            import ale_py
        except ImportError as ex:
            raise Refused(
                "ALE games need ale-py (%s): run `make deps`, which installs it in the "
                "environments' venv with its ROMs" % ex
            ) from None
        gymnasium.register_envs(ale_py)
        kw = parse_kwargs(options)
        if "frameskip" in kw:
            raise Refused(
                "frameskip=%r: shoal skips frames itself, with the max of the last two "
                "(frame_skip, default 4); the emulator steps one frame a call"
                % (kw["frameskip"],)
            )
        # one frame a call, as AtariPreprocessing requires; grayscale so a reset does not
        # build an RGB frame shoal never reads (the emulator's state is the same)
        kw["frameskip"] = 1
        kw.setdefault("obs_type", "grayscale")
        self.envs = _make_envs(self, env_id, B, kw)
        u = self.envs[0].unwrapped
        if not hasattr(u, "ale"):
            raise Refused("%s is not an ALE game (no env.unwrapped.ale)" % env_id)
        if noop_max > 0 and u.get_action_meanings()[0] != "NOOP":
            raise Refused(
                "noop_max=%d needs NOOP as action 0, and %s's action 0 is %s: set noop_max=0"
                % (noop_max, env_id, u.get_action_meanings()[0])
            )
        self.noop_max = noop_max
        spec = self.envs[0].spec
        self.max_episode_steps = int(spec.max_episode_steps or 0) if spec else 0
        thr = spec.reward_threshold if spec else None
        self.reward_threshold = float(thr) if thr is not None else math.nan

    def parts(self, i):
        """Copy i's emulator as (act, lives, game_over, game_truncated,
        getScreenGrayscale, getScreenRGB, actions, (h, w))."""
        u = self.envs[i].unwrapped
        ale = u.ale
        h, w = ale.getScreenDims()
        return (
            ale.act,
            ale.lives,
            ale.game_over,
            ale.game_truncated,
            ale.getScreenGrayscale,
            ale.getScreenRGB,
            tuple(u._action_set),
            (int(h), int(w)),
        )

    def screen(self, buf, shape):
        """A NumPy view of C memory the emulator draws into."""
        return np.frombuffer(buf, dtype=np.uint8).reshape(shape)

    def reset(self, i, seed, draw):
        """Copy i's env.reset(seed=seed) and, if draw, the no-op count AtariPreprocessing
        draws from its generator; the C side plays the no-ops."""
        e = self.envs[i]
        e.reset(seed=seed)
        if draw and self.noop_max > 0:
            return int(e.unwrapped.np_random.integers(1, self.noop_max + 1))
        return 0

    def close(self):
        _close_all(self)


def registered():
    """Every id Gymnasium has registered (after importing its plugins), sorted; the ALE
    games too when ale-py is installed (they register on import)."""
    import gymnasium

    try:
        import ale_py

        gymnasium.register_envs(ale_py)
    except ImportError:
        pass

    return sorted(gymnasium.envs.registry.keys())


def where():
    import gymnasium

    return "Python %s, gymnasium %s, %s" % (
        sys.version.split()[0],
        gymnasium.__version__,
        sys.prefix,
    )
