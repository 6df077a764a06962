# SPDX-License-Identifier: Apache-2.0
"""Descriptions of observation and action spaces, shaped like Gymnasium's."""

import numpy as np

DTYPES = {1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int32)}


def _short(a):
    """Gymnasium's low_repr / high_repr: the one value when all are equal, else the array."""
    return str(a.flat[0]) if a.size and np.all(a == a.flat[0]) else str(a)


class Box:
    """A bounded array: ``shape``, ``dtype``, ``low`` and ``high`` (arrays of ``shape``),
    as Gymnasium's ``spaces.Box`` reports them (CartPole-v1's velocity bounds are
    infinite, as in Gymnasium 1.x)."""

    def __init__(self, low, high, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.low = np.broadcast_to(np.asarray(low, dtype=self.dtype), self.shape).copy()
        self.high = np.broadcast_to(np.asarray(high, dtype=self.dtype), self.shape).copy()
        if self.dtype.kind == "f":
            self.bounded_below = -np.inf < self.low
            self.bounded_above = np.inf > self.high
        else:
            self.bounded_below = np.ones(self.shape, bool)
            self.bounded_above = np.ones(self.shape, bool)
        self.n = None

    def is_bounded(self, manner="both"):
        below, above = bool(np.all(self.bounded_below)), bool(np.all(self.bounded_above))
        if manner == "both":
            return below and above
        if manner == "below":
            return below
        if manner == "above":
            return above
        raise ValueError(f"manner is not in {{'below', 'above', 'both'}}, got {manner!r}")

    def sample(self, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        if self.dtype.kind == "f":
            # As Gymnasium's Box.sample: uniform where bounded on both sides, a standard
            # normal where unbounded, low + exponential / high - exponential where
            # bounded on one side.
            lo, hi = self.low.astype(np.float64), self.high.astype(np.float64)
            both = self.bounded_below & self.bounded_above
            x = rng.normal(size=self.shape)
            x = np.where(self.bounded_below & ~self.bounded_above,
                         lo + rng.exponential(size=self.shape), x)
            x = np.where(~self.bounded_below & self.bounded_above,
                         hi - rng.exponential(size=self.shape), x)
            x = np.where(both, rng.uniform(np.where(both, lo, 0), np.where(both, hi, 1)), x)
            return x.astype(self.dtype)
        return rng.integers(self.low, self.high, endpoint=True).astype(self.dtype)

    def contains(self, x):
        x = np.asarray(x)
        return (x.shape == self.shape and np.can_cast(x.dtype, self.dtype)
                and bool(np.all(x >= self.low)) and bool(np.all(x <= self.high)))

    def __eq__(self, o):
        return (isinstance(o, Box) and o.shape == self.shape and o.dtype == self.dtype
                and np.array_equal(o.low, self.low) and np.array_equal(o.high, self.high))

    def __repr__(self):
        return f"Box({_short(self.low)}, {_short(self.high)}, {self.shape}, {self.dtype})"


class Discrete:
    """``n`` actions ``start`` .. ``start + n - 1``, as Gymnasium's ``spaces.Discrete``
    (dtype int64, shape ()). The vector envs take any integer array as actions; int32
    goes straight through."""

    def __init__(self, n, start=0):
        self.n = int(n)
        self.start = int(start)
        self.shape = ()
        self.dtype = np.dtype(np.int64)

    def sample(self, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return np.int64(self.start + rng.integers(self.n))

    def contains(self, x):
        x = np.asarray(x)
        return (x.shape == () and x.dtype.kind in "iu"
                and self.start <= int(x) < self.start + self.n)

    def __eq__(self, o):
        return isinstance(o, Discrete) and o.n == self.n and o.start == self.start

    def __repr__(self):
        return f"Discrete({self.n})" if self.start == 0 else f"Discrete({self.n}, start={self.start})"


class MultiDiscrete:
    """A batch of Discrete choices: ``nvec`` (the batched action space of a vector env),
    dtype int64 as Gymnasium's."""

    def __init__(self, nvec):
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.start = np.zeros_like(self.nvec)
        self.shape = self.nvec.shape
        self.dtype = np.dtype(np.int64)

    def sample(self, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        return rng.integers(self.nvec, dtype=np.int64)

    def contains(self, x):
        x = np.asarray(x)
        return (x.shape == self.shape and x.dtype.kind in "iu" and bool(np.all(x >= 0))
                and bool(np.all(x < self.nvec)))

    def __eq__(self, o):
        return isinstance(o, MultiDiscrete) and np.array_equal(o.nvec, self.nvec)

    def __repr__(self):
        return f"MultiDiscrete({self.nvec})"


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
