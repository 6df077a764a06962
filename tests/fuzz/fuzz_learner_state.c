/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_learner_state.c — a learner's snapshot as a resume reads it back
 * from the store: algo_snapshot_split (the model's bytes, then the learner-state
 * trailer) and dqn_state_load (the optimizer's moments, the target network and the
 * update count, algos/train_state.c). The first byte picks the path: bit 0 stamps a
 * correct checksum into the state so the fuzzer reaches the checks behind it; bit 1
 * feeds the rest to algo_snapshot_split first and loads the state it finds.
 *
 * Properties: the split's parts lie inside the input and add up to it; a refused state
 * is a shoal error with a message and changes nothing (the learner saves the same
 * bytes as before); an accepted one saves, loads and saves again to the same bytes.
 */
#include <string.h>

#include "algos/algos.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/targets.h"

static dqn *learner;
static uint8_t *base;
static size_t base_len;

/* The state blob's header (algos/train_state.c): the checksum sits at byte 80 of 88. */
enum { HDR = 88, SUM_AT = 80 };

static uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  shoal_error err = {0};
  dqn_config dc = fuzz_dqn_config();
  learner = dqn_create(&dc, NN_CPU, true, &err);
  if (!learner || dqn_state_save(learner, &base, &base_len, &err)) {
    fprintf(stderr, "fuzz_learner_state: %s\n", err.msg);
    abort();
  }
  return 0;
}

static void check_load(const uint8_t *state, size_t len) {
  shoal_error err = {0};
  int rc = dqn_state_load(learner, state, len, &err);
  uint8_t *now = NULL;
  size_t now_len = 0;
  shoal_error e2 = {0};
  FUZZ_CHECK(!dqn_state_save(learner, &now, &now_len, &e2));
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.code == rc && err.msg[0]);
    FUZZ_CHECK(now_len == base_len && !memcmp(now, base, base_len));
    free(now);
    return;
  }
  /* Accepted: a save-load-save cycle is a fixed point. */
  FUZZ_CHECK(!dqn_state_load(learner, now, now_len, &e2));
  uint8_t *again = NULL;
  size_t again_len = 0;
  FUZZ_CHECK(!dqn_state_save(learner, &again, &again_len, &e2));
  FUZZ_CHECK(again_len == now_len && !memcmp(again, now, now_len));
  free(again);
  free(now);
  /* Back to the reference state, so the next refusal can be checked against it. */
  FUZZ_CHECK(!dqn_state_load(learner, base, base_len, &e2));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t len = size - 1;
  uint8_t *buf = malloc(len ? len : 1);
  memcpy(buf, data + 1, len);
  const uint8_t *state = buf;
  size_t state_len = len;
  if (data[0] & 2) {
    size_t model_len = 0;
    shoal_error err = {0};
    int rc = algo_snapshot_split(buf, len, &model_len, &state, &state_len, &err);
    if (rc) {
      FUZZ_CHECK(rc < 0 && err.code == rc && err.msg[0]);
      goto done;
    }
    FUZZ_CHECK(model_len <= len);
    if (!state) {
      FUZZ_CHECK(model_len == len && state_len == 0);
      goto done;
    }
    FUZZ_CHECK(state == buf + model_len && model_len + state_len + 16 == len);
  }
  if ((data[0] & 1) && state_len >= HDR) {
    uint64_t h = fnv1a(state, HDR - 8) ^ fnv1a(state + HDR, state_len - HDR);
    memcpy((uint8_t *)state + SUM_AT, &h, 8);
  }
  check_load(state, state_len);
done:
  free(buf);
  return 0;
}
