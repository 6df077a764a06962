/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common/shoal.h — what every part of shoal shares: error codes, an error
 * struct for detail, an assert that is never compiled out, a seedable RNG and a
 * monotonic clock. Depends on libc alone, so nn, envs and replay stay
 * buildable by themselves (the GPU machine builds nn with nothing else).
 *
 *   shoal_error err = {0};
 *   int rc = nn_model_load(m, "ckpt.safetensors", &err);
 *   if (rc) fprintf(stderr, "load: %s\n", err.msg[0] ? err.msg : shoal_strerror(rc));
 *
 *   shoal_rng rng;
 *   shoal_rng_seed(&rng, 42);
 *   double u = shoal_rng_uniform(&rng);   // [0, 1)
 */
#ifndef SHOAL_COMMON_H
#define SHOAL_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes. Functions return 0 or one of these (negative). Values only grow. */
enum {
  SHOAL_OK = 0,
  SHOAL_EINVAL = -1,     /* a bad argument: wrong shape, out-of-range value, NULL */
  SHOAL_ENOMEM = -2,     /* an allocation failed */
  SHOAL_EIO = -3,        /* a read or write failed (disk full, read-only, closed) */
  SHOAL_ENOENT = -4,     /* a file, run, key or name that does not exist */
  SHOAL_EFORMAT = -5,    /* malformed data: bad magic, version, checksum, truncated */
  SHOAL_ENAN = -6,       /* a NaN or infinity where finite numbers are required */
  SHOAL_ESHAPE = -7,     /* tensor shapes or sizes that do not match */
  SHOAL_ENOTSUP = -8,    /* valid but not supported here (no CUDA device, no backend) */
  SHOAL_EFULL = -9,      /* a bounded queue or memory is full and the policy is to refuse */
  SHOAL_ETIMEDOUT = -10, /* a deadline passed */
  SHOAL_ECLOSED = -11,   /* the object was shut down or the peer went away */
  SHOAL_ERANGE = -12,    /* a value outside its allowed range (an action, an index) */
  SHOAL_EEXIST = -13,    /* already exists (an exclusive create lost a race) */
  SHOAL_EPERM = -14,     /* refused: bad token, wrong run, no permission */
  SHOAL_ESTATE = -15,    /* called in the wrong state (not reserved, not started) */
  SHOAL_ENET = -16,      /* a network or RPC failure */
  SHOAL_ECUDA = -17,     /* a CUDA, cuDNN or cuBLAS call failed */
  SHOAL_EINTERNAL = -18, /* a bug in shoal: an invariant did not hold */
  SHOAL_EENV = -19,      /* an environment failed: it raised, or returned a NaN reward or an
                            observation outside its declared space */
};

/* Returns a static, human-readable name for rc ("invalid argument", ...). Can't fail. */
const char *shoal_strerror(int rc);

/* Optional detail for a failed call, as libmongoc's bson_error_t. Callers may pass
 * NULL wherever a shoal_error* is taken. */
typedef struct shoal_error {
  int code;      /* the SHOAL_E... code of the failure */
  char msg[512]; /* what failed and where: "nn: layer 'fc1': input has 3 columns, expected 4" */
} shoal_error;

/* Sets err->code and formats err->msg (truncated to fit). err may be NULL, then it
 * does nothing. Returns code, so `return shoal_error_set(err, SHOAL_EINVAL, ...)` works. */
int shoal_error_set(shoal_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int shoal_error_vset(shoal_error *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Invariants. Never compiled out: a broken invariant is a bug that must stop the
 * process with file and line, never continue on corrupt state. */
#define SHOAL_ASSERT(cond)                                                \
  do {                                                                    \
    if (!(cond)) shoal__assert_fail(#cond, __FILE__, __LINE__, __func__); \
  } while (0)
_Noreturn void shoal__assert_fail(const char *expr, const char *file, int line, const char *func);

/* A small, fast, seedable RNG (xoshiro256** by Blackman and Vigna; seeded through
 * splitmix64 so any 64-bit seed, 0 included, gives a good state). Not thread-safe:
 * one per thread or per object. */
typedef struct shoal_rng {
  uint64_t s[4];
} shoal_rng;

void shoal_rng_seed(shoal_rng *rng, uint64_t seed);   /* can't fail */
uint64_t shoal_rng_next(shoal_rng *rng);              /* 64 random bits */
double shoal_rng_uniform(shoal_rng *rng);             /* [0, 1), 53 bits */
float shoal_rng_uniformf(shoal_rng *rng);             /* [0, 1), 24 bits */
uint64_t shoal_rng_below(shoal_rng *rng, uint64_t n); /* [0, n), unbiased; n > 0 */
double shoal_rng_normal(shoal_rng *rng);              /* N(0, 1), Box-Muller */
/* Advances by 2^128 steps: gives independent streams to threads or actors. */
void shoal_rng_jump(shoal_rng *rng);

/* Names the calling thread (what top -H, ps -L, perf and gdb show), cut to the 15 bytes
 * Linux keeps. Each of shoal's threads names itself "shoal-<role>" when it starts, so a
 * profile says which thread the time went to. Can't fail: a name the system refuses
 * leaves the old one. */
void shoal_thread_name(const char *name);

/* Monotonic time in nanoseconds and seconds, for rates and deadlines. */
uint64_t shoal_now_ns(void);
double shoal_now_s(void);

/* Writes v into out (cap bytes; 32 hold any double) as the shortest of "%.15g", "%.16g"
 * and "%.17g" that reads back (strtod) as exactly v: 3e-4 as "0.0003", not
 * "0.00029999999999999997". Returns out. Can't fail. */
const char *shoal_fmt_double(double v, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
