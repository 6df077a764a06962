/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/fuzz/fuzz_op_snapshot.c — an on-policy run's snapshot as the learner resumes
 * from it and an evaluation loads it (algos/agent.c: op_snapshot_resume,
 * op_snapshot_decode): the model's safetensors, the learner state's trailer (PPO's
 * optimizer and RNG, IMPALA's optimizer: impala_state_load), the observation
 * normaliser's trailer. The agents are a PPO and an IMPALA learner on CartPole's spaces
 * (MLP 8) with norm_obs, as the seeds in corpus/op_snapshot (make_seeds.c). The first
 * byte's bit 0 picks resume (else decode), bit 1 the IMPALA agent (else PPO).
 *
 * Properties: a refusal is a shoal error with a message, and a refused decode changes
 * neither the model nor the normaliser; an accepted snapshot leaves finite statistics
 * (var >= 0, count > 0) and finite parameters, and encoding the agent, resuming from
 * that and encoding again gives the same bytes.
 */
#include <math.h>
#include <string.h>

#include "algos/agent.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/targets.h"

/* [0] PPO, [1] IMPALA. */
static op_spec specs[2];
static op_agent agents[2];
static op_norm norms[2];
static uint8_t *bases[2]; /* the reference snapshots, to go back to after an accepted input */
static size_t base_lens[2];

/* The spec and agent of the seeds (tests/fuzz/targets.h). */
static void setup(bool impala, op_spec *s, op_agent *a, op_norm *z) {
  shoal_error err = {0};
  op_agent_config c;
  fuzz_op_config(impala, s, &c);
  if (op_agent_create(s, &c, 4, true, NN_CPU, a, &err) || op_norm_init(z, 4, &err)) {
    fprintf(stderr, "op_snapshot: %s\n", err.msg);
    abort();
  }
  const float x[8] = {0.1f, -0.2f, 0.03f, 0.4f, -0.1f, 0.2f, 0.0f, -0.4f};
  op_norm_update(z, x, 2);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  shoal_error err = {0};
  for (int k = 0; k < 2; k++) {
    setup(k == 1, &specs[k], &agents[k], &norms[k]);
    if (op_snapshot_encode(&agents[k], &specs[k], &norms[k], &bases[k], &base_lens[k], &err))
      abort();
  }
  return 0;
}

static uint8_t *params_copy(op_agent *agent, size_t *n) {
  const float *p = nn_model_params(op_agent_model(agent), n);
  uint8_t *c = malloc(*n * sizeof *p);
  memcpy(c, p, *n * sizeof *p);
  return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  bool resume = data[0] & 1;
  const int k = (data[0] >> 1) & 1;
  op_spec *spec = &specs[k];
  op_agent *agent = &agents[k];
  op_norm *norm = &norms[k];
  size_t len = size - 1;
  uint8_t *buf = malloc(len ? len : 1);
  memcpy(buf, data + 1, len);
  size_t np;
  uint8_t *p0 = params_copy(agent, &np);
  double m0[4], v0[4], c0 = norm->count;
  memcpy(m0, norm->mean, sizeof m0), memcpy(v0, norm->var, sizeof v0);
  shoal_error err = {0};
  bool restored = false;
  int rc = resume ? op_snapshot_resume(agent, spec, norm, buf, len, &restored, &err)
                  : op_snapshot_decode(agent, spec, norm, buf, len, &err);
  if (rc) {
    FUZZ_CHECK(rc < 0 && err.code == rc && err.msg[0]);
    if (!resume) {
      size_t n;
      const float *p = nn_model_params(op_agent_model(agent), &n);
      FUZZ_CHECK(n == np && !memcmp(p, p0, np * sizeof *p));
      FUZZ_CHECK(!memcmp(m0, norm->mean, sizeof m0) && !memcmp(v0, norm->var, sizeof v0) &&
                 c0 == norm->count);
    }
    goto done;
  }
  for (int j = 0; j < 4; j++)
    FUZZ_CHECK(isfinite(norm->mean[j]) && isfinite(norm->var[j]) && norm->var[j] >= 0);
  FUZZ_CHECK(isfinite(norm->count) && norm->count > 0);
  size_t n;
  const float *p = nn_model_params(op_agent_model(agent), &n);
  for (size_t i = 0; i < n; i++) FUZZ_CHECK(isfinite(p[i]));
  uint8_t *e1 = NULL, *e2 = NULL;
  size_t l1 = 0, l2 = 0;
  FUZZ_CHECK(!op_snapshot_encode(agent, spec, norm, &e1, &l1, &err));
  FUZZ_CHECK(!op_snapshot_resume(agent, spec, norm, e1, l1, &restored, &err) && restored);
  FUZZ_CHECK(!op_snapshot_encode(agent, spec, norm, &e2, &l2, &err));
  FUZZ_CHECK(l1 == l2 && !memcmp(e1, e2, l1));
  free(e1);
  free(e2);
  /* Back to the reference agent, so the next refusal is checked against it. */
  FUZZ_CHECK(!op_snapshot_resume(agent, spec, norm, bases[k], base_lens[k], &restored, &err));
done:
  free(p0);
  free(buf);
  return 0;
}
