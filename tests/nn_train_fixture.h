/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/nn_train_fixture.h — reads the text fixtures that tests/reference/nn_train.py
 * writes under tests/reference/nn_train/ (and nn_torch_models.py under
 * tests/reference/nn_torch_models/): one array per line, "name count v0 v1 ...". Shared by
 * test_nn_train.c, test_nn_checkpoint.c and test_nn_torch_models.c; header-only so each
 * test stays one source file.
 */
#ifndef SHOAL_TESTS_NN_TRAIN_FIXTURE_H
#define SHOAL_TESTS_NN_TRAIN_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx_entry {
  char name[64];
  int n;
  double *v;
} fx_entry;

typedef struct fx_file {
  fx_entry *e;
  int count;
} fx_file;

/* The path of a file under tests/reference/<dir>/ (SHOAL_SOURCE_DIR set by ctest, else
 * the current directory's parent layout of a source checkout). */
static inline void fx_path_in(char *out, size_t cap, const char *dir, const char *file) {
  const char *src = getenv("SHOAL_SOURCE_DIR");
  snprintf(out, cap, "%s/tests/reference/%s/%s", src ? src : ".", dir, file);
}

/* The same under tests/reference/nn_train/. */
static inline void fx_path(char *out, size_t cap, const char *file) {
  fx_path_in(out, cap, "nn_train", file);
}

/* Loads a fixture file of tests/reference/<dir>/; returns 0 or -1 (message on stderr). */
static inline int fx_load_in(fx_file *fx, const char *dir, const char *file) {
  char path[1024];
  fx_path_in(path, sizeof path, dir, file);
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "fixture %s: cannot open (run from the build dir via ctest)\n", path);
    return -1;
  }
  memset(fx, 0, sizeof *fx);
  int cap = 0;
  char name[64];
  int n;
  while (fscanf(f, "%63s %d", name, &n) == 2) {
    if (n < 0 || n > 1 << 24) break;
    if (fx->count == cap) {
      cap = cap ? 2 * cap : 64;
      fx->e = realloc(fx->e, (size_t)cap * sizeof *fx->e);
      if (!fx->e) abort();
    }
    fx_entry *e = &fx->e[fx->count++];
    memcpy(e->name, name, sizeof e->name);
    e->n = n;
    e->v = malloc((size_t)(n ? n : 1) * sizeof *e->v);
    if (!e->v) abort();
    for (int i = 0; i < n; i++)
      if (fscanf(f, "%lf", &e->v[i]) != 1) {
        fprintf(stderr, "fixture %s: %s is short\n", path, name);
        fclose(f);
        return -1;
      }
  }
  fclose(f);
  return fx->count > 0 ? 0 : -1;
}

/* Loads a fixture file of tests/reference/nn_train/. */
static inline int fx_load(fx_file *fx, const char *file) {
  return fx_load_in(fx, "nn_train", file);
}

static inline void fx_free(fx_file *fx) {
  for (int i = 0; i < fx->count; i++) free(fx->e[i].v);
  free(fx->e);
  memset(fx, 0, sizeof *fx);
}

/* The array called name, with *n its length; NULL when absent. */
static inline const double *fx_get(const fx_file *fx, const char *name, int *n) {
  for (int i = 0; i < fx->count; i++)
    if (!strcmp(fx->e[i].name, name)) {
      if (n) *n = fx->e[i].n;
      return fx->e[i].v;
    }
  return NULL;
}

/* Copies an array into floats (caller frees); NULL when absent. */
static inline float *fx_floats(const fx_file *fx, const char *name, int *n) {
  int k = 0;
  const double *v = fx_get(fx, name, &k);
  if (!v) return NULL;
  float *out = malloc((size_t)(k ? k : 1) * sizeof *out);
  if (!out) abort();
  for (int i = 0; i < k; i++) out[i] = (float)v[i];
  if (n) *n = k;
  return out;
}

#endif
