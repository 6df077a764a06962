/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/nn_check.h — the few cmocka macros the GPU tests use, for machines without
 * cmocka (the GPU machine builds nn alone: cmake -DSHOAL_ONLY_NN=ON). With
 * SHOAL_NN_CHECK defined a test file gets these; otherwise it includes cmocka.
 *
 * Same meaning as cmocka's: a failed assert prints file, line and the expression and
 * ends the current test (longjmp) as failed; skip() ends it as skipped; the group
 * runner prints one line per test and returns the number of failures.
 */
#ifndef SHOAL_TESTS_NN_CHECK_H
#define SHOAL_TESTS_NN_CHECK_H

#ifdef SHOAL_NN_CHECK
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*nn_check_fn)(void **state);
struct CMUnitTest {
  const char *name;
  nn_check_fn fn;
};

static jmp_buf nn_check_jmp;
static int nn_check_outcome; /* 0 pass, 1 fail, 2 skip */

static inline void nn_check_fail(const char *file, int line, const char *what) {
  fprintf(stderr, "%s:%d: failure: %s\n", file, line, what);
  nn_check_outcome = 1;
  longjmp(nn_check_jmp, 1);
}

#define cmocka_unit_test(f) \
  { #f, f }
#define skip()                \
  do {                        \
    nn_check_outcome = 2;     \
    longjmp(nn_check_jmp, 1); \
  } while (0)
#define fail_msg(...)                              \
  do {                                             \
    fprintf(stderr, __VA_ARGS__);                  \
    fprintf(stderr, "\n");                         \
    nn_check_fail(__FILE__, __LINE__, "fail_msg"); \
  } while (0)
#define assert_true(c)                               \
  do {                                               \
    if (!(c)) nn_check_fail(__FILE__, __LINE__, #c); \
  } while (0)
#define assert_false(c) assert_true(!(c))
#define assert_non_null(p) assert_true((p) != NULL)
#define assert_null(p) assert_true((p) == NULL)
#define assert_int_equal(a, b)                         \
  do {                                                 \
    intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);   \
    if (a_ != b_) {                                    \
      fprintf(stderr, "%jd != %jd\n", a_, b_);         \
      nn_check_fail(__FILE__, __LINE__, #a " == " #b); \
    }                                                  \
  } while (0)
#define assert_string_equal(a, b) assert_true(strcmp((a), (b)) == 0)

static inline int nn_check_run(const char *group, const struct CMUnitTest *t, size_t n) {
  volatile int failed = 0, skipped = 0; /* live across longjmp */
  printf("[==========] %s: running %zu test(s)\n", group, n);
  for (volatile size_t i = 0; i < n; i++) {
    nn_check_outcome = 0;
    if (!setjmp(nn_check_jmp)) t[i].fn(NULL);
    const char *tag = nn_check_outcome == 0   ? "[       OK ]"
                      : nn_check_outcome == 1 ? "[  FAILED  ]"
                                              : "[  SKIPPED ]";
    printf("%s %s\n", tag, t[i].name);
    fflush(stdout);
    failed += nn_check_outcome == 1;
    skipped += nn_check_outcome == 2;
  }
  printf("[==========] %s: %zu test(s), %d failed, %d skipped\n", group, n, failed, skipped);
  return failed;
}
#define cmocka_run_group_tests(t, setup, teardown) nn_check_run(#t, t, sizeof(t) / sizeof((t)[0]))

#else
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h after the headers it needs */
#include <cmocka.h>
#endif

#endif
