# SPDX-License-Identifier: Apache-2.0
"""Loading libshoal.so and turning its errors into Python exceptions.

The library is looked up, in order, at $SHOAL_LIB, beside this package (where
``make python`` installs it), then by the dynamic loader's search (``libshoal.so``).
"""

import ctypes
import os

ABI = 3

# common/shoal.h's codes.
EINVAL, ENOMEM, EIO, ENOENT, EFORMAT, ENAN, ESHAPE, ENOTSUP = -1, -2, -3, -4, -5, -6, -7, -8
EFULL, ETIMEDOUT, ECLOSED, ERANGE, EEXIST, EPERM, ESTATE, ENET = -9, -10, -11, -12, -13, -14, -15, -16
ECUDA, EINTERNAL = -17, -18


class ShoalError(RuntimeError):
    """A failure reported by shoal's C code; ``code`` is the SHOAL_E... code (negative)
    and the message is the C message."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class ShoalValueError(ShoalError, ValueError):
    """Bad input caught by C: an action out of range, a NaN, malformed data, bad options."""


class ShoalNotFoundError(ShoalError, LookupError):
    """An unknown env id, a missing run, snapshot or file."""


class ShoalIOError(ShoalError, OSError):
    """A read or write failed."""


class ShoalNotSupportedError(ShoalError, NotImplementedError):
    """Something the env or policy does not have (e.g. a MinAtar game's physical state)."""


class ShoalStateError(ShoalError):
    """Called in the wrong state (e.g. step before reset)."""


_KINDS = {
    EINVAL: ShoalValueError, EFORMAT: ShoalValueError, ENAN: ShoalValueError,
    ESHAPE: ShoalValueError, ERANGE: ShoalValueError, ENOENT: ShoalNotFoundError,
    ENOTSUP: ShoalNotSupportedError,
    EIO: ShoalIOError, ESTATE: ShoalStateError,
}


class Space(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int32 * 4), ("size", ctypes.c_int32), ("n", ctypes.c_int32),
                ("low", ctypes.POINTER(ctypes.c_float)), ("high", ctypes.POINTER(ctypes.c_float))]


class Spec(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char_p), ("obs", Space), ("act", Space),
                ("max_episode_steps", ctypes.c_int32), ("num_envs", ctypes.c_int32),
                ("render_w", ctypes.c_int32), ("render_h", ctypes.c_int32),
                ("reward_threshold", ctypes.c_double)]


class Stats(ctypes.Structure):
    _fields_ = [("steps", ctypes.c_uint64), ("episodes", ctypes.c_uint64),
                ("dropped", ctypes.c_uint64), ("mean_return_100", ctypes.c_double),
                ("mean_length_100", ctypes.c_double)]


class PolicyInfo(ctypes.Structure):
    _fields_ = [("env_id", ctypes.c_char_p), ("obs", Space), ("num_actions", ctypes.c_int32),
                ("net", ctypes.c_int32), ("version", ctypes.c_int64),
                ("env_steps", ctypes.c_int64), ("updates", ctypes.c_int64),
                ("score", ctypes.c_double), ("algo", ctypes.c_int32),
                ("act_dim", ctypes.c_int32), ("act", Space), ("norm_obs", ctypes.c_int32),
                ("state_size", ctypes.c_int32)]


def _find():
    env = os.environ.get("SHOAL_LIB")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libshoal.so")
    if os.path.exists(here):
        return here
    return "libshoal.so"


def _load():
    path = _find()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"shoal: cannot load the C library {path!r} ({e}); build it with "
            "`make python PREFIX=...` or point $SHOAL_LIB at build/lib/libshoal.so") from e
    vp, i32, i64, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64
    P = ctypes.POINTER
    sigs = {
        "shoal_c_abi_version": (i32, []),
        "shoal_c_last_error": (ctypes.c_char_p, []),
        "shoal_c_last_error_code": (i32, []),
        "shoal_c_env_list": (i32, [P(ctypes.c_char_p), i32]),
        "shoal_c_env_spec": (i32, [ctypes.c_char_p, P(Spec)]),
        "shoal_c_vec_create": (i32, [P(vp), ctypes.c_char_p, i32, i32, i32, ctypes.c_char_p]),
        "shoal_c_vec_destroy": (None, [vp]),
        "shoal_c_vec_spec": (i32, [vp, P(Spec)]),
        "shoal_c_vec_reset": (i32, [vp, u64, vp]),
        "shoal_c_vec_step_into": (i32, [vp, vp, vp, vp, vp, vp, vp]),
        "shoal_c_vec_bind": (i32, [vp, vp, vp, vp, vp, vp, vp, vp]),
        "shoal_c_vec_step": (i32, [vp]),
        "shoal_c_vec_reset_each": (i32, [vp, vp, vp, ctypes.c_char_p, vp]),
        "shoal_c_vec_get_state": (i32, [vp, i32, vp, i32]),
        "shoal_c_vec_set_state": (i32, [vp, i32, vp, i32]),
        "shoal_c_vec_episodes": (i32, [vp, vp, vp, vp, vp, i32]),
        "shoal_c_vec_stats": (i32, [vp, P(Stats)]),
        "shoal_c_vec_render": (i32, [vp, i32, vp]),
        "shoal_c_is_store_uri": (i32, [ctypes.c_char_p]),
        "shoal_c_policy_load_store": (i32, [P(vp), ctypes.c_char_p, ctypes.c_char_p, i64]),
        "shoal_c_policy_load_file": (i32, [P(vp), ctypes.c_char_p, ctypes.c_char_p]),
        "shoal_c_policy_destroy": (None, [vp]),
        "shoal_c_policy_info_get": (i32, [vp, P(PolicyInfo)]),
        "shoal_c_policy_act": (i32, [vp, vp, i32, i32, vp, vp]),
        "shoal_c_policy_sample": (i32, [vp, vp, i32, i32, i32, vp, vp, vp]),
        "shoal_c_policy_sample_recurrent": (i32, [vp, vp, i32, i32, vp, vp, i32, vp, vp, vp]),
        "shoal_c_policy_seed": (i32, [vp, u64]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    got = lib.shoal_c_abi_version()
    if got != ABI:
        raise ImportError(f"shoal: {path} has C ABI {got}, this package needs {ABI}; "
                          "reinstall both from one build")
    return lib


lib = _load()


def error(rc, context=None):
    """The exception for a negative return code, carrying the C message."""
    msg = (lib.shoal_c_last_error() or b"").decode("utf-8", "replace") or f"error {rc}"
    if context:
        msg = f"{context}: {msg}"
    return _KINDS.get(rc, ShoalError)(msg, rc)


def check(rc, context=None):
    if rc < 0:
        raise error(rc, context)
    return rc
