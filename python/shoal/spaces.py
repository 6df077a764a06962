# SPDX-License-Identifier: Apache-2.0
"""Descriptions of observation and action spaces, shaped like Gymnasium's."""

import numpy as np

DTYPES = {1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int32)}


class Box:
    """A bounded array: ``shape``, ``dtype``, ``low`` and ``high`` (arrays of ``shape``)."""

    def __init__(self, low, high, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.low = np.broadcast_to(np.asarray(low, dtype=self.dtype), self.shape).copy()
        self.high = np.broadcast_to(np.asarray(high, dtype=self.dtype), self.shape).copy()
        self.n = None

    def sample(self, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        if self.dtype.kind == "f":
            lo = np.where(np.isfinite(self.low), self.low, -1.0)
            hi = np.where(np.isfinite(self.high), self.high, 1.0)
            return rng.uniform(lo, hi).astype(self.dtype)
        return rng.integers(self.low, self.high, endpoint=True).astype(self.dtype)

    def contains(self, x):
        x = np.asarray(x)
        return (x.shape == self.shape and np.can_cast(x.dtype, self.dtype)
                and bool(np.all(x >= self.low)) and bool(np.all(x <= self.high)))

    def __eq__(self, o):
        return (isinstance(o, Box) and o.shape == self.shape and o.dtype == self.dtype
                and np.array_equal(o.low, self.low) and np.array_equal(o.high, self.high))

    def __repr__(self):
        lo, hi = self.low.min(), self.high.max()
        return f"Box({lo}, {hi}, {self.shape}, {self.dtype})"


class Discrete:
    """``n`` actions 0 .. n-1 (int32, shape ())."""

    def __init__(self, n):
        self.n = int(n)
        self.shape = ()
        self.dtype = np.dtype(np.int32)

    def sample(self, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return np.int32(rng.integers(self.n))

    def contains(self, x):
        x = np.asarray(x)
        return x.shape == () and x.dtype.kind in "iu" and 0 <= int(x) < self.n

    def __eq__(self, o):
        return isinstance(o, Discrete) and o.n == self.n

    def __repr__(self):
        return f"Discrete({self.n})"


class MultiDiscrete:
    """A batch of Discrete choices: ``nvec`` (the batched action space of a vector env)."""

    def __init__(self, nvec):
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.shape = self.nvec.shape
        self.dtype = np.dtype(np.int32)

    def sample(self, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return rng.integers(self.nvec, dtype=np.int32)

    def contains(self, x):
        x = np.asarray(x)
        return (x.shape == self.shape and x.dtype.kind in "iu" and bool(np.all(x >= 0))
                and bool(np.all(x < self.nvec)))

    def __repr__(self):
        return f"MultiDiscrete({self.nvec.tolist()})"


def from_c(s):
    """The space of a C shoal_c_space."""
    if s.n > 0:
        return Discrete(s.n)
    shape = tuple(s.shape[i] for i in range(s.ndim))
    low = np.ctypeslib.as_array(s.low, shape=(s.size,)).reshape(shape) if s.low else -np.inf
    high = np.ctypeslib.as_array(s.high, shape=(s.size,)).reshape(shape) if s.high else np.inf
    return Box(low, high, shape, DTYPES[s.dtype])


def batch(space, n):
    """The space of n stacked samples of space."""
    if isinstance(space, Discrete):
        return MultiDiscrete([space.n] * n)
    return Box(np.broadcast_to(space.low, (n,) + space.shape),
               np.broadcast_to(space.high, (n,) + space.shape), (n,) + space.shape, space.dtype)
