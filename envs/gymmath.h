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
 * of a midpoint between two doubles. The exact square is p + e with p = x*x rounded and
 * e its rounding error (Dekker's product, exact without FMA); a midpoint is where
 * |e| = ulp(p)/2. Outside a 0.05 ULP band around it (5x margin) p is returned, inside
 * it (and for zero, subnormal, huge, non-finite or power-of-two p) pow itself. */
static inline double env__sq(double x) {
  double p = x * x;
  uint64_t bits;
  memcpy(&bits, &p, sizeof bits);
  uint32_t ex = (uint32_t)(bits >> 52) & 0x7ff;
  if (ex < 64 || ex > 2000 || (bits & 0xfffffffffffffull) == 0) return pow(x, 2.0);
  /* Veltkamp split of x into 26-bit halves; every product below is exact. */
  const double split = 134217729.0; /* 2^27 + 1 */
  double c = split * x;
  double hi = c - (c - x);
  double lo = x - hi;
  double e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo;
  /* half an ulp of p: 2^(ex - 1023 - 53) */
  uint64_t hbits = (uint64_t)(ex - 53) << 52;
  double half;
  memcpy(&half, &hbits, sizeof half);
  double dist = half - fabs(e); /* distance of the exact square from the midpoint */
  if (dist > 0.1 * half) return p;
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
