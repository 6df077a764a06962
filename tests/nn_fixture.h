/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/nn_fixture.h — PyTorch reference fixtures for the nn tests: the text files under
 * tests/reference/nn_layers/ (one array a line: name, ndim, dims, values; written by
 * tests/reference/nn_layers.py and nn_custom.py), loaded and compared. Include after
 * cmocka (or tests/nn_check.h); the file must define SHOAL_SOURCE_DIR_DEFAULT.
 */
#ifndef SHOAL_TESTS_NN_FIXTURE_H
#define SHOAL_TESTS_NN_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fixtures: tests/reference/nn_layers/<case>.txt, one array a line (see the script).
 * Float32 results are compared with PyTorch's float64 values:
 * |ours - torch| <= 2e-5 + 1e-4 |torch|. */

#define FX_ATOL 2e-5
#define FX_RTOL 1e-4

typedef struct fx_arr {
  char name[128];
  int ndim;
  int shape[4];
  size_t n;
  float *v;
  bool used;
} fx_arr;

typedef struct fixture {
  fx_arr a[64];
  int n;
} fixture;

static inline fixture *fx_load(const char *name) {
  const char *dir = getenv("SHOAL_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/reference/nn_layers/%s.txt",
           dir ? dir : SHOAL_SOURCE_DIR_DEFAULT, name);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open fixture %s", path);
  fixture *fx = calloc(1, sizeof *fx);
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    if (line[0] == '#' || line[0] == '\n') continue;
    assert_true(fx->n < 64);
    fx_arr *a = &fx->a[fx->n++];
    char *p = line, *end;
    int k = 0;
    while (*p && *p != ' ' && k < (int)sizeof a->name - 1) a->name[k++] = *p++;
    a->ndim = (int)strtol(p, &end, 10);
    p = end;
    a->n = 1;
    for (int i = 0; i < a->ndim; i++) {
      a->shape[i] = (int)strtol(p, &end, 10);
      p = end;
      a->n *= (size_t)a->shape[i];
    }
    a->v = malloc(a->n * sizeof(float));
    for (size_t i = 0; i < a->n; i++) {
      a->v[i] = (float)strtod(p, &end);
      if (end == p) fail_msg("fixture %s: array %s is short", name, a->name);
      p = end;
    }
  }
  free(line);
  fclose(f);
  return fx;
}

static inline fx_arr *fx_get(fixture *fx, const char *name) {
  for (int i = 0; i < fx->n; i++)
    if (!strcmp(fx->a[i].name, name)) {
      fx->a[i].used = true;
      return &fx->a[i];
    }
  return NULL;
}

static inline void fx_free(fixture *fx) {
  for (int i = 0; i < fx->n; i++) free(fx->a[i].v);
  free(fx);
}

static inline void assert_close(const char *what, const char *arr, const float *got, const fx_arr *want) {
  int bad = 0;
  for (size_t i = 0; i < want->n; i++) {
    double w = want->v[i], d = fabs((double)got[i] - w);
    if (!(d <= FX_ATOL + FX_RTOL * fabs(w)) && bad++ < 5)
      print_error("%s: %s[%zu] = %.8g, PyTorch %.8g\n", what, arr, i, got[i], w);
  }
  if (bad) fail_msg("%s: %d of %zu values of %s differ from PyTorch", what, bad, want->n, arr);
}

#endif
