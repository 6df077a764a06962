/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz.h — what every fuzz target shares. Each target defines
 * LLVMFuzzerTestOneInput (and optionally LLVMFuzzerInitialize); it is linked either
 * with libFuzzer (clang, -fsanitize=fuzzer: SHOAL_FUZZ=ON) or with driver.c, shoal's
 * own replayer of the committed corpus plus deterministic mutations, so the corpora are
 * regression tests in every build.
 *
 * A target checks properties, not only "no crash": FUZZ_CHECK aborts (a finding for
 * libFuzzer and the driver alike) when a decoder accepts something it must refuse or
 * breaks an invariant it promises.
 */
#ifndef SHOAL_TESTS_FUZZ_H
#define SHOAL_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                         \
    }                                                                                  \
  } while (0)

#endif
