/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envs/gymmath.h — private helpers that make shoal's classic-control envs compute
 * exactly what Gymnasium's NumPy code computes, bit for bit, and an inlineable copy of
 * shoal's RNG for the step loops.
 *
 * Why these exist:
 *  - NumPy's `x**2` on a float64 scalar calls libm pow(x, 2.0), which is not always the
 *    correctly rounded x*x (about 0.1% of inputs differ in the last bit on glibc).
 *    env__sq() returns exactly pow(x, 2.0) but takes the cheap path where that is
 *    provably x*x (see below). The library is built with -fno-builtin-pow so that the
 *    compiler does not turn pow(x, 2.0) into x*x, and with -ffp-contract=off so that
 *    a*b+c is never fused (NumPy rounds every operation).
 *  - Trigonometry is libm's: NumPy 1.24 computes float64 np.sin/np.cos with libm on
 *    x86-64 without AVX-512 (with AVX-512 it uses Intel SVML, which differs from libm in
 *    the last bit; shoal then agrees with Gymnasium to ~1e-15 per step, not bit for bit).
 *  - NumPy's float `%` is Python's floor modulo built on fmod (npy_divmod); env__np_mod()
 *    follows it, sign of zero included.
 */
#ifndef SHOAL_ENVS_GYMMATH_H
#define SHOAL_ENVS_GYMMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/shoal.h"

/* pow(x, 2.0) exactly as glibc computes it, without the cost of pow in ~90% of cases.
 * glibc's pow (since 2.28) evaluates x^y as exp(y*log(x)) in extended precision and
 * rounds once; its error before that rounding is below 0.01 ULP for y = 2 (the exp
 * step's 0.509 ULP bound minus the final 0.5, plus a log term of ~2^-64). So its
 * result equals the correctly rounded x*x unless the exact square lies within 0.01 ULP
 * of a midpoint between two doubles (for |x| in [2^-16, 2^16]; the log term grows with
 * |log x|). The exact square of the 53-bit significand m is
 * the 106-bit integer m*m; the k bits that rounding drops (D) give its distance from the
 * midpoint, |D - 2^(k-1)|. Outside a 0.025 ULP band around the midpoint x*x is returned,
 * inside it (5% of inputs) and for |x| outside [2^-16, 2^16], zero or non-finite, pow
 * itself. tests/test_envs_classic.c checks this against pow on millions of inputs. */
static inline double env__sq(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  uint32_t ex = (uint32_t)(bits >> 52) & 0x7ff;
  if (ex < 1023 - 16 || ex >= 1023 + 16) return pow(x, 2.0);
  uint64_t m = (bits & 0xfffffffffffffull) | (1ull << 52);
  unsigned __int128 sq = (unsigned __int128)m * m; /* 105 or 106 bits */
  int k = (sq >> 105) ? 53 : 52;                   /* bits dropped by rounding */
  uint64_t d = (uint64_t)sq & ((1ull << k) - 1), half = 1ull << (k - 1);
  uint64_t dist = d > half ? d - half : half - d;
  if (dist > half / 20) return x * x;
  return pow(x, 2.0);
}

/* NumPy's float64 `a % b` (npy_divmod's modulus): fmod, moved into b's sign. */
static inline double env__np_mod(double a, double b) {
  double mod = fmod(a, b);
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = copysign(0.0, b);
  }
  return mod;
}

/* Rounds to float32 and back (NumPy's .astype(np.float32) kept in a float64 variable).
 * Through a volatile: GCC 12's SLP vectoriser was seen storing the unrounded doubles
 * when two such round trips sat side by side. */
static inline double env__f32(double x) {
  volatile float f = (float)x;
  return (double)f;
}

/* np.clip / Python min(max(x, lo), hi) for non-NaN x. */
static inline double env__clip(double x, double lo, double hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

/* shoal_rng_next, inlined: the same xoshiro256** stream as common/shoal.c. */
static inline uint64_t env__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t env__rng_next(shoal_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t r = env__rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = env__rotl(s[3], 45);
  return r;
}
/* [0, 1) with 53 bits, as shoal_rng_uniform. */
static inline double env__rng_uniform(shoal_rng *rng) {
  return (double)(env__rng_next(rng) >> 11) * 0x1.0p-53;
}
/* numpy's Generator.uniform(low, high): low + (high - low) * u. */
static inline double env__rng_range(shoal_rng *rng, double low, double high) {
  return low + (high - low) * env__rng_uniform(rng);
}
/* [0, n) without bias for the small n MinAtar uses (Lemire's method, as shoal_rng_below). */
static inline uint32_t env__rng_below(shoal_rng *rng, uint32_t n) {
  uint64_t m = (uint64_t)(uint32_t)(env__rng_next(rng) >> 32) * n;
  uint32_t l = (uint32_t)m;
  if (l < n) {
    uint32_t t = -n % n;
    while (l < t) {
      m = (uint64_t)(uint32_t)(env__rng_next(rng) >> 32) * n;
      l = (uint32_t)m;
    }
  }
  return (uint32_t)(m >> 32);
}

#endif
