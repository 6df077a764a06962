/* SPDX-License-Identifier: Apache-2.0 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "common/shoal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const char *shoal_strerror(int rc) {
  switch (rc) {
    case SHOAL_OK: return "success";
    case SHOAL_EINVAL: return "invalid argument";
    case SHOAL_ENOMEM: return "out of memory";
    case SHOAL_EIO: return "input/output error";
    case SHOAL_ENOENT: return "not found";
    case SHOAL_EFORMAT: return "malformed data";
    case SHOAL_ENAN: return "non-finite number";
    case SHOAL_ESHAPE: return "shape mismatch";
    case SHOAL_ENOTSUP: return "not supported";
    case SHOAL_EFULL: return "full";
    case SHOAL_ETIMEDOUT: return "timed out";
    case SHOAL_ECLOSED: return "closed";
    case SHOAL_ERANGE: return "out of range";
    case SHOAL_EEXIST: return "already exists";
    case SHOAL_EPERM: return "permission denied";
    case SHOAL_ESTATE: return "wrong state";
    case SHOAL_ENET: return "network error";
    case SHOAL_ECUDA: return "CUDA error";
    case SHOAL_EINTERNAL: return "internal error";
    case SHOAL_EENV: return "environment failed";
    default: return "unknown error";
  }
}

int shoal_error_vset(shoal_error *err, int code, const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  }
  return code;
}

int shoal_error_set(shoal_error *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  shoal_error_vset(err, code, fmt, ap);
  va_end(ap);
  return code;
}

void shoal__assert_fail(const char *expr, const char *file, int line, const char *func) {
  fprintf(stderr, "shoal: assertion failed: %s (%s:%d, %s)\n", expr, file, line, func);
  fflush(stderr);
  abort();
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void shoal_rng_seed(shoal_rng *rng, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

uint64_t shoal_rng_next(shoal_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t r = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return r;
}

double shoal_rng_uniform(shoal_rng *rng) { return (double)(shoal_rng_next(rng) >> 11) * 0x1.0p-53; }

float shoal_rng_uniformf(shoal_rng *rng) { return (float)(shoal_rng_next(rng) >> 40) * 0x1.0p-24f; }

uint64_t shoal_rng_below(shoal_rng *rng, uint64_t n) {
  SHOAL_ASSERT(n > 0);
  /* Lemire's nearly-divisionless method: reject the few values that would bias. */
  unsigned __int128 m = (unsigned __int128)shoal_rng_next(rng) * n;
  uint64_t lo = (uint64_t)m;
  if (lo < n) {
    uint64_t threshold = -n % n;
    while (lo < threshold) {
      m = (unsigned __int128)shoal_rng_next(rng) * n;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

double shoal_rng_normal(shoal_rng *rng) {
  /* Box-Muller; 1 - u keeps log() away from 0. */
  double u1 = 1.0 - shoal_rng_uniform(rng);
  double u2 = shoal_rng_uniform(rng);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void shoal_rng_jump(shoal_rng *rng) {
  static const uint64_t J[] = {0x180ec6d33cfd0aba, 0xd5a61266f0c9392c, 0xa9582618e03fc9aa,
                               0x39abdc4529b1661c};
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int i = 0; i < 4; i++) {
    for (int b = 0; b < 64; b++) {
      if (J[i] & (UINT64_C(1) << b)) {
        s0 ^= rng->s[0];
        s1 ^= rng->s[1];
        s2 ^= rng->s[2];
        s3 ^= rng->s[3];
      }
      shoal_rng_next(rng);
    }
  }
  rng->s[0] = s0;
  rng->s[1] = s1;
  rng->s[2] = s2;
  rng->s[3] = s3;
}

uint64_t shoal_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double shoal_now_s(void) { return (double)shoal_now_ns() * 1e-9; }

void shoal_thread_name(const char *name) {
  char cut[16]; /* pthread_setname_np refuses a longer one outright */
  snprintf(cut, sizeof cut, "%s", name ? name : "shoal");
  (void)pthread_setname_np(pthread_self(), cut);
}

const char *shoal_fmt_double(double v, char *out, size_t cap) {
  /* 17 significant digits always read back; fewer often do and read as a person wrote. */
  for (int digits = 15; digits <= 17; digits++) {
    snprintf(out, cap, "%.*g", digits, v);
    if (digits == 17 || strtod(out, NULL) == v) break;
  }
  return out;
}
