/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/driver.c — the fuzz targets' main() where libFuzzer is not linked (gcc
 * builds, normal and sanitizer). It runs every file of the corpus directories given,
 * then `-mutations N` deterministic mutations of each (bit flips, interesting bytes and
 * integers, inserts, deletes, truncations, chunk copies, splices with another seed),
 * from a fixed seed so a failure reproduces. A crash, a sanitizer report or a failed
 * property aborts the process and fails the test; the input is written first to
 * fuzz-crash-<target>.bin in the working directory.
 *
 *   fuzz_sample_batch [-mutations N | -execs TOTAL] [-seed S] DIR_OR_FILE...
 *
 * -execs spreads a total number of mutated runs evenly over the seeds, so a corpus that
 * grows (libFuzzer's merged findings are committed too) keeps the test's time bounded.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/shoal.h"
#include "tests/fuzz/fuzz.h"

/* A target may leave LLVMFuzzerInitialize out. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

typedef struct input {
  uint8_t *data;
  size_t size;
  char *name;
} input;

static input *inputs;
static size_t ninputs, cap_inputs;
static const char *target = "fuzz";

/* The input being run, saved by the abort handler so a failure can be replayed. */
static const uint8_t *cur_data;
static size_t cur_size;

static void on_abort(int sig) {
  char path[256];
  snprintf(path, sizeof path, "fuzz-crash-%s.bin", target);
  FILE *f = fopen(path, "wb");
  if (f) {
    if (cur_size) fwrite(cur_data, 1, cur_size, f);
    fclose(f);
    fprintf(stderr, "fuzz driver: the failing input (%zu bytes) is in %s\n", cur_size, path);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static int add_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz driver: cannot open %s: %s\n", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  size_t k;
  while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) {
      uint8_t *b = realloc(buf, cap *= 2);
      if (!b) {
        free(buf);
        buf = NULL;
      }
      buf = b;
    }
  }
  fclose(f);
  if (!buf) return -1;
  if (ninputs == cap_inputs) {
    cap_inputs = cap_inputs ? 2 * cap_inputs : 64;
    inputs = realloc(inputs, cap_inputs * sizeof *inputs);
    if (!inputs) return -1;
  }
  inputs[ninputs++] = (input){buf, n, strdup(path)};
  return 0;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const input *)a)->name, ((const input *)b)->name);
}

static int add_path(const char *path) {
  struct stat st;
  if (stat(path, &st)) {
    fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return add_file(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    rc = add_file(p);
  }
  closedir(d);
  return rc;
}

static void run_one(const uint8_t *data, size_t size) {
  /* A private copy of exactly size bytes, so ASan sees any read past the end. */
  uint8_t *copy = malloc(size ? size : 1);
  if (size) memcpy(copy, data, size);
  cur_data = copy;
  cur_size = size;
  LLVMFuzzerTestOneInput(copy, size);
  free(copy);
}

static const uint64_t interesting[] = {0,
                                       1,
                                       0x7f,
                                       0x80,
                                       0xff,
                                       0x100,
                                       0x7fff,
                                       0x8000,
                                       0xffff,
                                       0x7fffffff,
                                       0x80000000u,
                                       0xffffffffu,
                                       0x7fffffffffffffffull,
                                       0x8000000000000000ull,
                                       0xffffffffffffffffull};

/* One mutation of src into dst (capacity cap); returns the new size. */
static size_t mutate(shoal_rng *r, const uint8_t *src, size_t n, uint8_t *dst, size_t cap) {
  if (n > cap) n = cap;
  memcpy(dst, src, n);
  int steps = 1 + (int)shoal_rng_below(r, 4);
  for (int s = 0; s < steps; s++) {
    switch (shoal_rng_below(r, 9)) {
      case 0: /* flip a bit */
        if (n) dst[shoal_rng_below(r, n)] ^= (uint8_t)(1u << shoal_rng_below(r, 8));
        break;
      case 1: /* a random byte */
        if (n) dst[shoal_rng_below(r, n)] = (uint8_t)shoal_rng_next(r);
        break;
      case 2: { /* an interesting integer, 1/2/4/8 bytes, little-endian */
        size_t w = (size_t)1 << shoal_rng_below(r, 4);
        if (n < w) break;
        uint64_t v = interesting[shoal_rng_below(r, sizeof interesting / sizeof *interesting)];
        memcpy(dst + shoal_rng_below(r, n - w + 1), &v, w);
        break;
      }
      case 3: /* truncate */
        if (n) n = (size_t)shoal_rng_below(r, n);
        break;
      case 4: { /* delete a run */
        if (!n) break;
        size_t at = (size_t)shoal_rng_below(r, n), k = 1 + (size_t)shoal_rng_below(r, n - at);
        memmove(dst + at, dst + at + k, n - at - k);
        n -= k;
        break;
      }
      case 5: { /* insert random bytes */
        size_t k = 1 + (size_t)shoal_rng_below(r, 8),
               at = n ? (size_t)shoal_rng_below(r, n + 1) : 0;
        if (n + k > cap) break;
        memmove(dst + at + k, dst + at, n - at);
        for (size_t i = 0; i < k; i++) dst[at + i] = (uint8_t)shoal_rng_next(r);
        n += k;
        break;
      }
      case 6: { /* duplicate a chunk at another place */
        if (!n) break;
        size_t from = (size_t)shoal_rng_below(r, n), k = 1 + (size_t)shoal_rng_below(r, n - from);
        if (k > 64) k = 64;
        if (n + k > cap) break;
        size_t at = (size_t)shoal_rng_below(r, n + 1);
        uint8_t tmp[64];
        memcpy(tmp, dst + from, k);
        memmove(dst + at + k, dst + at, n - at);
        memcpy(dst + at, tmp, k);
        n += k;
        break;
      }
      case 7: { /* splice: the tail of another input */
        const input *o = &inputs[shoal_rng_below(r, ninputs)];
        if (!o->size) break;
        size_t at = n ? (size_t)shoal_rng_below(r, n) : 0,
               from = (size_t)shoal_rng_below(r, o->size);
        size_t k = o->size - from;
        if (at + k > cap) k = cap - at;
        memcpy(dst + at, o->data + from, k);
        n = at + k;
        break;
      }
      default: /* a varint-style byte run: 0xff... makes lengths and counts huge */
        if (n) {
          size_t at = (size_t)shoal_rng_below(r, n), k = 1 + (size_t)shoal_rng_below(r, 10);
          for (size_t i = 0; i < k && at + i < n; i++) dst[at + i] = 0xff;
        }
        break;
    }
  }
  return n;
}

int main(int argc, char **argv) {
  const char *slash = strrchr(argv[0], '/');
  target = slash ? slash + 1 : argv[0];
  long mutations = 200, total = 0;
  uint64_t seed = 12;
  LLVMFuzzerInitialize(&argc, &argv);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-mutations") && i + 1 < argc) {
      mutations = strtol(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "-execs") && i + 1 < argc) {
      total = strtol(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "-seed") && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 10);
    } else if (add_path(argv[i])) {
      return 2;
    }
  }
  if (!ninputs) {
    fprintf(stderr, "usage: %s [-mutations N] [-seed S] CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  qsort(inputs, ninputs, sizeof *inputs, cmp_name);
  if (total > 0) mutations = total / (long)ninputs > 1 ? total / (long)ninputs : 1;
  signal(SIGABRT, on_abort);
  signal(SIGSEGV, on_abort);
  size_t cap = 0;
  for (size_t i = 0; i < ninputs; i++)
    if (inputs[i].size > cap) cap = inputs[i].size;
  cap = cap * 2 + 256;
  uint8_t *buf = malloc(cap);
  uint64_t execs = 0;
  double t0 = shoal_now_s();
  for (size_t i = 0; i < ninputs; i++) {
    run_one(inputs[i].data, inputs[i].size);
    execs++;
  }
  for (size_t i = 0; i < ninputs; i++) {
    shoal_rng r;
    shoal_rng_seed(&r, seed * 0x9e3779b97f4a7c15ull + i);
    for (long m = 0; m < mutations; m++) {
      size_t n = mutate(&r, inputs[i].data, inputs[i].size, buf, cap);
      run_one(buf, n);
      execs++;
    }
  }
  printf("%s: %zu corpus inputs, %llu execs (%ld mutations each), 0 failures, %.2f s\n", target,
         ninputs, (unsigned long long)execs, mutations, shoal_now_s() - t0);
  free(buf);
  for (size_t i = 0; i < ninputs; i++) {
    free(inputs[i].data);
    free(inputs[i].name);
  }
  free(inputs);
  return 0;
}
