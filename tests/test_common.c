/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_common.c — error codes, the error struct, the RNG and thread names. */
#define _GNU_SOURCE /* syscall */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/shoal.h"

static void test_strerror_names_every_code(void **state) {
  for (int rc = SHOAL_OK; rc >= SHOAL_EINTERNAL; rc--)
    assert_string_not_equal(shoal_strerror(rc), "unknown error");
  assert_string_equal(shoal_strerror(12345), "unknown error");
}

static void test_error_set_formats_and_returns_code(void **state) {
  shoal_error err = {0};
  int rc = shoal_error_set(&err, SHOAL_ESHAPE, "layer '%s': %d != %d", "fc1", 3, 4);
  assert_int_equal(rc, SHOAL_ESHAPE);
  assert_int_equal(err.code, SHOAL_ESHAPE);
  assert_string_equal(err.msg, "layer 'fc1': 3 != 4");
  assert_int_equal(shoal_error_set(NULL, SHOAL_EIO, "x"), SHOAL_EIO);
  char big[2000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  shoal_error_set(&err, SHOAL_EIO, "%s", big);
  assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
}

/* A thread's name as Linux keeps it, read back from /proc */
static void *name_and_read(void *arg) {
  shoal_thread_name(arg);
  char path[64], *comm = calloc(1, 32);
  snprintf(path, sizeof path, "/proc/self/task/%ld/comm", (long)syscall(SYS_gettid));
  FILE *f = fopen(path, "r");
  if (f && fgets(comm, 32, f)) comm[strcspn(comm, "\n")] = 0;
  if (f) fclose(f);
  return comm;
}

/* Names up to 15 bytes are kept whole; a longer one is cut, not refused. */
static void test_thread_name(void **state) {
  const char *in[2] = {"shoal-test", "shoal-a-much-longer-name"};
  const char *want[2] = {"shoal-test", "shoal-a-much-lo"};
  for (int i = 0; i < 2; i++) {
    pthread_t th;
    void *comm = NULL;
    assert_int_equal(pthread_create(&th, NULL, name_and_read, (void *)in[i]), 0);
    assert_int_equal(pthread_join(th, &comm), 0);
    assert_string_equal(comm, want[i]);
    free(comm);
  }
}

/* Reference values of xoshiro256** seeded by splitmix64 from 0: the first output of
 * splitmix64(0) is 0xe220a8397b1dcdaf (Vigna's reference implementation). */
/* The shortest decimal that reads back exactly: what a person wrote stays as written. */
static void test_fmt_double_shortest_round_trip(void **state) {
  char b[32];
  assert_string_equal(shoal_fmt_double(3e-4, b, sizeof b), "0.0003");
  assert_string_equal(shoal_fmt_double(0.1, b, sizeof b), "0.1");
  assert_string_equal(shoal_fmt_double(10, b, sizeof b), "10");
  assert_string_equal(shoal_fmt_double(0.1 + 0.2, b, sizeof b), "0.30000000000000004");
  assert_string_equal(shoal_fmt_double(1e300, b, sizeof b), "1e+300");
  shoal_rng r;
  shoal_rng_seed(&r, 7);
  for (int i = 0; i < 10000; i++) {
    uint64_t bits = shoal_rng_next(&r);
    double v;
    memcpy(&v, &bits, sizeof v);
    if (!isfinite(v)) continue;
    assert_true(strtod(shoal_fmt_double(v, b, sizeof b), NULL) == v);
  }
}

static void test_rng_reproducible_and_seed_dependent(void **state) {
  shoal_rng a, b, c;
  shoal_rng_seed(&a, 0);
  assert_int_equal(a.s[0], 0xe220a8397b1dcdafull);
  shoal_rng_seed(&a, 7);
  shoal_rng_seed(&b, 7);
  shoal_rng_seed(&c, 8);
  int differ = 0;
  for (int i = 0; i < 100; i++) {
    uint64_t x = shoal_rng_next(&a), y = shoal_rng_next(&b), z = shoal_rng_next(&c);
    assert_int_equal(x, y);
    differ += x != z;
  }
  assert_true(differ > 95);
}

static void test_rng_distributions(void **state) {
  shoal_rng r;
  shoal_rng_seed(&r, 1);
  enum { N = 200000 };
  double sum = 0, sum2 = 0, usum = 0;
  int counts[7] = {0};
  for (int i = 0; i < N; i++) {
    double u = shoal_rng_uniform(&r);
    assert_true(u >= 0.0 && u < 1.0);
    float f = shoal_rng_uniformf(&r);
    assert_true(f >= 0.0f && f < 1.0f);
    usum += u;
    double z = shoal_rng_normal(&r);
    sum += z;
    sum2 += z * z;
    counts[shoal_rng_below(&r, 7)]++;
  }
  /* Means within about 5 standard errors. */
  assert_true(fabs(usum / N - 0.5) < 5 * sqrt(1.0 / 12 / N));
  assert_true(fabs(sum / N) < 5 / sqrt(N));
  assert_true(fabs(sum2 / N - 1.0) < 5 * sqrt(2.0 / N));
  /* Chi-square with 6 degrees of freedom: 22.46 is the 0.999 quantile. */
  double chi2 = 0, e = N / 7.0;
  for (int k = 0; k < 7; k++) chi2 += (counts[k] - e) * (counts[k] - e) / e;
  assert_true(chi2 < 22.46);
}

static void test_rng_jump_gives_other_stream(void **state) {
  shoal_rng a, b;
  shoal_rng_seed(&a, 3);
  b = a;
  shoal_rng_jump(&b);
  int same = 0;
  for (int i = 0; i < 64; i++) same += shoal_rng_next(&a) == shoal_rng_next(&b);
  assert_int_equal(same, 0);
}

static void test_clock_is_monotonic(void **state) {
  uint64_t t0 = shoal_now_ns(), t1 = shoal_now_ns();
  assert_true(t1 >= t0);
  assert_true(shoal_now_s() > 0);
}

static void test_crc32c_check_value(void **state) {
  /* RFC 3720 B.4: CRC32C("123456789") = 0xE3069283; 32 zero bytes: 0x8A9136AA. */
  assert_int_equal(shoal_crc32c(0, "123456789", 9), 0xE3069283u);
  assert_int_equal(shoal__crc32c_soft(0, "123456789", 9), 0xE3069283u);
  uint8_t z[32] = {0};
  assert_int_equal(shoal_crc32c(0, z, 32), 0x8A9136AAu);
  uint8_t buf[1001];
  for (int i = 0; i < 1001; i++) buf[i] = (uint8_t)(i * 31 + 7);
  /* Incremental equals one shot; both paths agree at odd offsets. */
  uint32_t one = shoal_crc32c(0, buf, 1001);
  uint32_t inc = shoal_crc32c(shoal_crc32c(0, buf, 13), buf + 13, 988);
  assert_int_equal(one, inc);
  assert_int_equal(shoal__crc32c_soft(0, buf + 3, 997), shoal_crc32c(0, buf + 3, 997));
}

static void test_crc32c_three_chains(void **state) {
  /* Long buffers run three chains joined by shift tables (blocks of 256 and 4096 bytes):
   * every length around those blocks' multiples, at every alignment, equals the
   * table path, and a running crc carries through. */
  enum { N = 3 * 4096 * 2 + 3 * 256 * 2 + 64 };
  uint8_t *b = malloc(N + 8);
  assert_non_null(b);
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < N + 8; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b[i] = (uint8_t)(s >> 56);
  }
  const size_t lens[] = {767,   768,   769,   1535,  1536,  1537,  2303,  12287,
                         12288, 12289, 13056, 13057, 24576, 24600, N - 1, N};
  for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
    for (int off = 0; off < 8; off++) {
      uint32_t want = shoal__crc32c_soft(0, b + off, lens[k]);
      assert_int_equal(shoal_crc32c(0, b + off, lens[k]), want);
      uint32_t head = shoal_crc32c(0, b + off, 5);
      assert_int_equal(shoal_crc32c(head, b + off + 5, lens[k] - 5), want);
    }
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_strerror_names_every_code),
      cmocka_unit_test(test_fmt_double_shortest_round_trip),
      cmocka_unit_test(test_error_set_formats_and_returns_code),
      cmocka_unit_test(test_rng_reproducible_and_seed_dependent),
      cmocka_unit_test(test_rng_distributions),
      cmocka_unit_test(test_rng_jump_gives_other_stream),
      cmocka_unit_test(test_clock_is_monotonic),
      cmocka_unit_test(test_thread_name),
      cmocka_unit_test(test_crc32c_check_value),
      cmocka_unit_test(test_crc32c_three_chains),
  };
  return cmocka_run_group_tests_name("common", tests, NULL, NULL);
}
