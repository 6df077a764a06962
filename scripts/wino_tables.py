#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Winograd F(m, r) transform tables for nn/cpu/wino.c, in exact fractions.

Y = A^T [(G g) * (B^T d)] computes m outputs of an r-tap correlation from n = m + r - 1
inputs. It is the transpose of Toom-Cook linear convolution at the points listed (and
infinity): with E_k the n x k matrix evaluating a polynomial of k coefficients at the
points (the infinity row picks the leading coefficient) and V = E_n,
    A^T = E_m^T,   G = E_r,   B^T = (V^{-1})^T.
Each row of B^T is then scaled to the smallest integers and the matching row of G takes
the inverse scale, so the input transform multiplies by small integers only.

    scripts/wino_tables.py          print the C tables
    scripts/wino_tables.py --check  also each variant's float32 error against float64
"""
import sys
from fractions import Fraction as Fr
from math import gcd, lcm

# (m, r, finite points) as nn/cpu/wino.c uses them
VARIANTS = [
    (2, 2, [0, 1]),
    (3, 2, [0, 1, -1]),
    (4, 2, [0, 1, -1, 2]),
    (5, 2, [0, 1, -1, 2, -2]),
    (2, 3, [0, 1, -1]),
    (3, 3, [0, 1, -1, 2]),
    (4, 3, [0, 1, -1, Fr(1, 2), Fr(-1, 2)]),
]


def evaluation(points, k):
    """n x k: a polynomial of k coefficients at each point, then its leading one."""
    rows = [[Fr(a) ** j for j in range(k)] for a in points]
    return rows + [[Fr(int(j == k - 1)) for j in range(k)]]


def inverse(M):
    n = len(M)
    A = [list(row) + [Fr(int(i == j)) for j in range(n)] for i, row in enumerate(M)]
    for c in range(n):
        p = next(r for r in range(c, n) if A[r][c] != 0)
        A[c], A[p] = A[p], A[c]
        A[c] = [x / A[c][c] for x in A[c]]
        for r in range(n):
            if r != c and A[r][c] != 0:
                f = A[r][c]
                A[r] = [a - f * b for a, b in zip(A[r], A[c])]
    return [row[n:] for row in A]


def transforms(m, r, points):
    n = m + r - 1
    assert len(points) == n - 1
    Vinv = inverse(evaluation(points, n))
    BT = [[Vinv[j][i] for j in range(n)] for i in range(n)]
    G = evaluation(points, r)
    Em = evaluation(points, m)
    AT = [[Em[j][i] for j in range(n)] for i in range(m)]
    for i in range(n):
        den, num = 1, 0
        for x in BT[i]:
            den, num = lcm(den, x.denominator), gcd(num, x.numerator)
        s = Fr(num, den)
        BT[i] = [x / s for x in BT[i]]
        G[i] = [x * s for x in G[i]]
    return AT, G, BT


def literal(x):
    f = float(x)
    if x.denominator & (x.denominator - 1) == 0:  # a power of two: exact in float
        return repr(f) + "f"
    return "%.9gf" % f


def check(m, r, points, trials=50, C=64):
    """Largest error of the float32 algorithm over C channels, relative to the largest
    output, against float64 direct sums."""
    import numpy as np

    AT, G, BT = transforms(m, r, points)
    f32 = lambda M: np.array([[float(x) for x in row] for row in M], dtype=np.float32)
    at, g, bt = f32(AT), f32(G), f32(BT)
    n = m + r - 1
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(trials):
        d = rng.standard_normal((C, n, n)).astype(np.float32)
        k = rng.standard_normal((C, r, r)).astype(np.float32)
        ref = np.array([[(d[:, i:i + r, j:j + r].astype(np.float64) * k).sum()
                         for j in range(m)] for i in range(m)])
        U = np.einsum("ab,cbd,ed->cae", g, k, g).astype(np.float32)
        V = np.einsum("ab,cbd,ed->cae", bt, d, bt).astype(np.float32)
        y = at @ (U * V).sum(0, dtype=np.float32) @ at.T
        worst = max(worst, float(np.abs(y - ref).max() / np.abs(ref).max()))
    return worst


def main():
    for m, r, points in VARIANTS:
        AT, G, BT = transforms(m, r, points)
        name = "f%d%d" % (m, r)
        pts = ", ".join(str(p) for p in points)
        note = ""
        if "--check" in sys.argv:
            note = ": float32 within %.1e of the largest output" % check(m, r, points)
        print("/* F(%d,%d), points %s and infinity%s */" % (m, r, pts, note))
        for t, M in (("AT", AT), ("G", G), ("BT", BT)):
            vals = ", ".join(literal(x) for row in M for x in row)
            print("static const float %s_%s[%d] = {%s};" % (t, name, len(M) * len(M[0]), vals))


if __name__ == "__main__":
    main()
