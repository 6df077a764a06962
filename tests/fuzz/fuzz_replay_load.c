/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_replay_load.c — replay_load, which reads a replay memory file written
 * by replay_save back on a learner's resume (replay/save.c). The first byte: bit 0
 * picks the memory (uniform, or prioritized with a 2-frame stack), bit 1 stamps correct
 * CRC32Cs (the header's and the file's) into the rest, so the fuzzer reaches the checks
 * behind them. The memory is 8 slots, 2 streams, obs f32 [2] and action i64, as the
 * seeds in corpus/replay_load (written by make_seeds.c with the same spec).
 *
 * Properties: a refusal is a shoal error with a message and leaves the memory empty;
 * an accepted file leaves at most capacity items, samples (or says SHOAL_ESTATE when
 * nothing is sampleable) with indices in the ring, discounts in [0, 1] and finite
 * weights, and saving it, loading that into a fresh memory and saving again gives the
 * same bytes.
 */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "replay/replay.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/targets.h"

static char dir[] = "/tmp/fuzz_replay_load.XXXXXX";

static replay *make(int prioritized) {
  replay_config c = fuzz_replay_config(prioritized);
  replay *r = NULL;
  shoal_error err = {0};
  if (replay_create(&c, &r, &err)) {
    fprintf(stderr, "fuzz_replay_load: %s\n", err.msg);
    abort();
  }
  return r;
}

/* The saved files' folder goes with the process, so runs leave nothing in /tmp. */
static void cleanup(void) {
  char p[128];
  snprintf(p, sizeof p, "%s/a.rpl", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/b.rpl", dir);
  unlink(p);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (!mkdtemp(dir)) abort();
  atexit(cleanup);
  return 0;
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  FUZZ_CHECK(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
  FUZZ_CHECK(fread(b, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

static void check_sample(replay *r) {
  enum { B = 4 };
  float obs[B * 2 * 2], next[B * 2 * 2], rew[B], disc[B], w[B];
  int64_t act[B], idx[B];
  int32_t steps[B];
  uint64_t gen[B];
  replay_batch b = {.cols = {obs, act},
                    .next_obs = next,
                    .reward = rew,
                    .discount = disc,
                    .steps = steps,
                    .weight = w,
                    .index = idx,
                    .generation = gen};
  replay_sample_args a = {.batch = B, .n_step = 3, .gamma = 0.9, .beta = 0.4};
  shoal_rng rng;
  shoal_rng_seed(&rng, 5);
  shoal_error err = {0};
  int rc = replay_sample(r, &rng, &a, &b, &err);
  if (rc) {
    FUZZ_CHECK(rc == SHOAL_ESTATE && err.msg[0]);
    return;
  }
  for (int i = 0; i < B; i++) {
    FUZZ_CHECK(idx[i] >= 0 && idx[i] < 8);
    FUZZ_CHECK(disc[i] >= 0 && disc[i] <= 1);
    FUZZ_CHECK(steps[i] >= 1 && steps[i] <= 3);
    FUZZ_CHECK(isfinite(w[i]) && w[i] >= 0);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int prioritized = data[0] & 1;
  size_t len = size - 1;
  uint8_t *buf = malloc(len ? len : 1);
  memcpy(buf, data + 1, len);
  if (data[0] & 2) {
    /* The header's CRC follows the spec: 36 bytes, 72 per column, then 52. */
    if (len >= 36) {
      uint32_t ncols;
      memcpy(&ncols, buf + 32, 4);
      size_t at = 88 + 72 * (size_t)ncols;
      if (ncols <= 16 && at + 4 <= len) {
        uint32_t c = shoal_crc32c(0, buf, at);
        memcpy(buf + at, &c, 4);
      }
    }
    if (len >= 4) {
      uint32_t c = shoal_crc32c(0, buf, len - 4);
      memcpy(buf + len - 4, &c, 4);
    }
  }
  int fd = memfd_create("replay", MFD_CLOEXEC);
  FUZZ_CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  replay *r = make(prioritized);
  shoal_error err = {0};
  int rc = replay_load(r, path, &err);
  replay_stats st;
  replay_get_stats(r, &st);
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.code == rc && err.msg[0]);
    FUZZ_CHECK(st.held == 0);
    goto done;
  }
  FUZZ_CHECK(st.held >= 0 && st.held <= 8);
  check_sample(r);
  /* Save, load into a fresh memory, save again: the same bytes. */
  char p1[128], p2[128];
  snprintf(p1, sizeof p1, "%s/a.rpl", dir);
  snprintf(p2, sizeof p2, "%s/b.rpl", dir);
  FUZZ_CHECK(!replay_save(r, p1, &err));
  replay *r2 = make(prioritized);
  int rc2 = replay_load(r2, p1, &err);
  if (rc2) fprintf(stderr, "reload: %s\n", err.msg);
  FUZZ_CHECK(rc2 == 0);
  FUZZ_CHECK(!replay_save(r2, p2, &err));
  size_t n1, n2;
  uint8_t *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
  FUZZ_CHECK(n1 == n2 && !memcmp(b1, b2, n1));
  free(b1);
  free(b2);
  replay_destroy(r2);
done:
  replay_destroy(r);
  close(fd);
  free(buf);
  return 0;
}
