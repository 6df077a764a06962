/* SPDX-License-Identifier: Apache-2.0 */
/* tests/examples_util.h — what the examples' tests share: running a program of
 * build/bin and reading numbers from its output. Include after cmocka.h. */
#ifndef SHOAL_TEST_EXAMPLES_UTIL_H
#define SHOAL_TEST_EXAMPLES_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The Debug (sanitizer) build runs nn unoptimised, about 10x slower: shorter runs there. */
#ifndef SHOAL_EXAMPLES_QUICK
#define SHOAL_EXAMPLES_QUICK 0
#endif

static char g_tmp[256], g_bin[512];

/* Runs `<bin>/<prog> args`, returns its stdout (caller frees) and checks exit status 0. */
static char *run(const char *prog, const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/%s' %s 2>&1", g_bin, prog, args);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t cap = 1 << 16, n = 0;
  char *out = malloc(cap);
  n = fread(out, 1, cap - 1, p);
  out[n] = 0;
  int st = pclose(p);
  if (st != 0) fail_msg("%s exited with %d:\n%s", cmd, st, out);
  printf("%s", out);
  return out;
}

/* The number after key in s (the last occurrence), or NAN. */
static double field(const char *s, const char *key) {
  const char *p = NULL;
  for (const char *q = strstr(s, key); q; q = strstr(q + 1, key)) p = q;
  double v;
  return p && sscanf(p + strlen(key), " %lf", &v) == 1 ? v : NAN;
}

#endif
