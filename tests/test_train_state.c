/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_train_state.c — the learner state kept with snapshots: for DQN (Adam and
 * the target network), IMPALA (RMSprop) and PPO (Adam and its shuffling RNG), N updates,
 * a snapshot, a fresh learner resumed from it and M more updates give bit for bit the
 * parameters of N + M uninterrupted updates on the same batches, while a resume from the
 * parameters alone does not; damaged, foreign and truncated states are refused and
 * change nothing; snapshots without a state still split. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"

enum { N_FIRST = 5, M_MORE = 4 };

/* One learner behind function pointers, so the resume check is written once. */
typedef struct learner_ops {
  void *(*create)(void);
  void (*destroy)(void *);
  nn_model *(*model)(void *);
  void (*learn)(void *, int k); /* update k on batch k (deterministic in k) */
  int (*save)(const void *, uint8_t **, size_t *, shoal_error *);
  int (*load)(void *, const uint8_t *, size_t, shoal_error *);
  void (*params_only)(void *); /* what a resume without state does besides the params */
} learner_ops;

/* ---- DQN: Adam, target period 3 so syncs fall at different phases ---- */
enum { DQ_B = 8, DQ_OBS = 4, DQ_A = 3 };
static dqn_config dq_config(void) {
  dqn_config c = dqn_defaults();
  c.obs_c = DQ_OBS;
  c.obs_h = c.obs_w = 1;
  c.num_actions = DQ_A;
  c.hidden[0] = 16;
  c.hidden[1] = 16;
  c.max_batch = DQ_B;
  c.target_period = 3;
  c.lr = 1e-2f;
  c.seed = 7;
  return c;
}
static void *dq_create(void) {
  shoal_error err = {0};
  dqn_config c = dq_config();
  dqn *d = dqn_create(&c, NN_CPU, true, &err);
  if (!d) fail_msg("dqn_create: %s", err.msg);
  return d;
}
static void dq_destroy(void *d) { dqn_destroy(d); }
static nn_model *dq_model(void *d) { return dqn_model(d); }
static void dq_learn(void *d, int k) {
  float obs[DQ_B * DQ_OBS], nobs[DQ_B * DQ_OBS], ret[DQ_B], disc[DQ_B], w[DQ_B];
  int32_t act[DQ_B];
  shoal_rng r;
  shoal_rng_seed(&r, 100 + (uint64_t)k);
  for (int i = 0; i < DQ_B * DQ_OBS; i++) {
    obs[i] = (float)shoal_rng_normal(&r);
    nobs[i] = (float)shoal_rng_normal(&r);
  }
  for (int i = 0; i < DQ_B; i++) {
    act[i] = (int32_t)shoal_rng_below(&r, DQ_A);
    ret[i] = (float)shoal_rng_normal(&r);
    disc[i] = i % 4 == 3 ? 0.0f : 0.97f;
    w[i] = 0.5f + (float)shoal_rng_uniform(&r);
  }
  dqn_batch b = {DQ_B, obs, act, ret, disc, nobs, w};
  float prio[DQ_B];
  shoal_error err = {0};
  if (dqn_learn(d, &b, prio, NULL, &err)) fail_msg("dqn_learn %d: %s", k, err.msg);
}
static int dq_save(const void *d, uint8_t **b, size_t *n, shoal_error *e) {
  return dqn_state_save(d, b, n, e);
}
static int dq_load(void *d, const uint8_t *b, size_t n, shoal_error *e) {
  return dqn_state_load(d, b, n, e);
}
static void dq_params_only(void *d) {
  shoal_error err = {0};
  assert_int_equal(dqn_sync_target(d, &err), 0); /* what the learner did before */
}

/* ---- IMPALA (RMSprop) and PPO (Adam, shuffled minibatches): discrete, 3 actions ---- */
enum { AC_T = 8, AC_B = 2, AC_OBS = 3, AC_A = 3 };
static ac_config ac_cfg(void) {
  ac_config ac = ac_defaults();
  ac.obs_c = AC_OBS;
  ac.obs_h = ac.obs_w = 1;
  ac.num_actions = AC_A;
  ac.hidden[0] = 16;
  ac.hidden[1] = 16;
  ac.max_batch = 16;
  ac.seed = 3;
  return ac;
}
static void ac_batch(int k, float *obs, int32_t *act, float *logp, float *rew, uint8_t *term) {
  shoal_rng r;
  shoal_rng_seed(&r, 500 + (uint64_t)k);
  for (int i = 0; i < (AC_T + 1) * AC_B * AC_OBS; i++) obs[i] = (float)shoal_rng_normal(&r);
  for (int i = 0; i < AC_T * AC_B; i++) {
    act[i] = (int32_t)shoal_rng_below(&r, AC_A);
    logp[i] = logf(1.0f / AC_A) + 0.3f * (float)(shoal_rng_uniform(&r) - 0.5);
    rew[i] = (float)shoal_rng_normal(&r);
    term[i] = i % 7 == 5;
  }
}
static void *im_create(void) {
  shoal_error err = {0};
  ac_config ac = ac_cfg();
  impala_config ic = impala_defaults();
  ic.T = AC_T;
  ic.B = AC_B;
  ic.optim = ONPOLICY_RMSPROP;
  ic.lr = 1e-2f;
  impala *l = impala_create(&ac, &ic, NN_CPU, true, &err);
  if (!l) fail_msg("impala_create: %s", err.msg);
  return l;
}
static void im_destroy(void *l) { impala_destroy(l); }
static nn_model *im_model(void *l) { return impala_model(l); }
static void im_learn(void *l, int k) {
  float obs[(AC_T + 1) * AC_B * AC_OBS], logp[AC_T * AC_B], rew[AC_T * AC_B];
  int32_t act[AC_T * AC_B];
  uint8_t term[AC_T * AC_B];
  ac_batch(k, obs, act, logp, rew, term);
  onpolicy_batch b = {AC_T, AC_B, obs, act, logp, rew, term, NULL, NULL};
  shoal_error err = {0};
  if (impala_learn(l, &b, NULL, &err)) fail_msg("impala_learn %d: %s", k, err.msg);
}
static int im_save(const void *l, uint8_t **b, size_t *n, shoal_error *e) {
  return impala_state_save(l, b, n, e);
}
static int im_load(void *l, const uint8_t *b, size_t n, shoal_error *e) {
  return impala_state_load(l, b, n, e);
}
static void *pp_create(void) {
  shoal_error err = {0};
  ac_config ac = ac_cfg();
  ppo_config pc = ppo_defaults();
  pc.T = AC_T;
  pc.B = AC_B;
  pc.minibatches = 4;
  pc.epochs = 2;
  pc.lr = 1e-2f;
  ppo *p = ppo_create(&ac, &pc, NN_CPU, true, &err);
  if (!p) fail_msg("ppo_create: %s", err.msg);
  return p;
}
static void pp_destroy(void *p) { ppo_destroy(p); }
static nn_model *pp_model(void *p) { return ppo_model(p); }
static void pp_learn(void *p, int k) {
  float obs[(AC_T + 1) * AC_B * AC_OBS], logp[AC_T * AC_B], rew[AC_T * AC_B];
  int32_t act[AC_T * AC_B];
  uint8_t term[AC_T * AC_B];
  ac_batch(k, obs, act, logp, rew, term);
  onpolicy_batch b = {AC_T, AC_B, obs, act, logp, rew, term, NULL, NULL};
  shoal_error err = {0};
  if (ppo_learn(p, &b, NULL, &err)) fail_msg("ppo_learn %d: %s", k, err.msg);
}
static int pp_save(const void *p, uint8_t **b, size_t *n, shoal_error *e) {
  return ppo_state_save(p, b, n, e);
}
static int pp_load(void *p, const uint8_t *b, size_t n, shoal_error *e) {
  return ppo_state_load(p, b, n, e);
}
static void nothing(void *x) { (void)x; }

static const learner_ops DQN = {dq_create, dq_destroy, dq_model,      dq_learn,
                                dq_save,   dq_load,    dq_params_only};
static const learner_ops IMPALA = {im_create, im_destroy, im_model, im_learn,
                                   im_save,   im_load,    nothing};
static const learner_ops PPO = {pp_create, pp_destroy, pp_model, pp_learn,
                                pp_save,   pp_load,    nothing};

/* A learner's snapshot: the model's safetensors bytes, then the state trailer. */
static void snapshot_of(const learner_ops *o, void *x, uint8_t **buf, size_t *len) {
  shoal_error err = {0};
  uint8_t *st;
  size_t sl;
  assert_int_equal(nn_model_save_buffer(o->model(x), buf, len, &err), 0);
  assert_int_equal(o->save(x, &st, &sl, &err), 0);
  assert_int_equal(algo_snapshot_append_state(buf, len, st, sl, &err), 0);
  free(st);
}

/* A fresh learner from a snapshot; with_state false plays an older learner that reads
 * the parameters only. */
static void *resume_from(const learner_ops *o, const uint8_t *buf, size_t len, bool with_state) {
  shoal_error err = {0};
  void *x = o->create();
  size_t ml, sl;
  const uint8_t *st;
  assert_int_equal(algo_snapshot_split(buf, len, &ml, &st, &sl, &err), 0);
  assert_non_null(st);
  assert_true(ml < len && sl > 0 && ml + sl + 16 == len);
  assert_int_equal(nn_model_load_buffer(o->model(x), buf, ml, &err), 0);
  if (with_state) {
    if (o->load(x, st, sl, &err)) fail_msg("state load: %s", err.msg);
  } else {
    o->params_only(x);
  }
  return x;
}

static const float *params(const learner_ops *o, void *x, size_t *n) {
  return nn_model_params(o->model(x), n);
}

static void check_exact_resume(const learner_ops *o) {
  nn_set_threads(1);
  void *a = o->create();
  for (int k = 0; k < N_FIRST; k++) o->learn(a, k);
  uint8_t *snap;
  size_t snap_len;
  snapshot_of(o, a, &snap, &snap_len);
  for (int k = N_FIRST; k < N_FIRST + M_MORE; k++) o->learn(a, k);

  void *r = resume_from(o, snap, snap_len, true);
  void *cold = resume_from(o, snap, snap_len, false);
  for (int k = N_FIRST; k < N_FIRST + M_MORE; k++) {
    o->learn(r, k);
    o->learn(cold, k);
  }
  size_t na, nr, nc;
  const float *pa = params(o, a, &na), *pr = params(o, r, &nr), *pc = params(o, cold, &nc);
  assert_int_equal(na, nr);
  assert_int_equal(na, nc);
  for (size_t i = 0; i < na; i++)
    if (memcmp(&pa[i], &pr[i], sizeof *pa))
      fail_msg("parameter %zu: %.9g uninterrupted, %.9g resumed", i, pa[i], pr[i]);
  /* The check can fail: restarting the optimizer moves the parameters elsewhere. */
  size_t differ = 0;
  for (size_t i = 0; i < na; i++) differ += pa[i] != pc[i];
  assert_true(differ > na / 10);
  /* And the states agree too: a second snapshot of both is the same bytes. */
  uint8_t *s1, *s2;
  size_t l1, l2;
  snapshot_of(o, a, &s1, &l1);
  snapshot_of(o, r, &s2, &l2);
  assert_int_equal(l1, l2);
  assert_memory_equal(s1, s2, l1);
  free(s1);
  free(s2);
  free(snap);
  o->destroy(a);
  o->destroy(r);
  o->destroy(cold);
}

static void test_dqn_exact_resume(void **state) {
  (void)state;
  check_exact_resume(&DQN);
}
static void test_impala_exact_resume(void **state) {
  (void)state;
  check_exact_resume(&IMPALA);
}
static void test_ppo_exact_resume(void **state) {
  (void)state;
  check_exact_resume(&PPO);
}

/* Damage, another algorithm's state, an actor's copy and a bad trailer are refused,
 * and the learner they were loaded into is unchanged. */
static void test_bad_states_refused(void **state) {
  (void)state;
  shoal_error err = {0};
  dqn *d = dq_create();
  for (int k = 0; k < 2; k++) dq_learn(d, k);
  uint8_t *st, *before, *after;
  size_t sl, bl, al;
  assert_int_equal(dqn_state_save(d, &st, &sl, &err), 0);
  dqn *e = dq_create();
  dq_learn(e, 9);
  assert_int_equal(dqn_state_save(e, &before, &bl, &err), 0);

  uint8_t *bad = malloc(sl);
  memcpy(bad, st, sl);
  bad[sl / 2] ^= 0x10;
  assert_int_equal(dqn_state_load(e, bad, sl, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "checksum"));
  assert_int_equal(dqn_state_load(e, st, sl - 1, &err), SHOAL_EFORMAT);
  assert_int_equal(dqn_state_load(e, st, 10, &err), SHOAL_EFORMAT);
  memcpy(bad, st, sl);
  bad[0] = 'X';
  assert_int_equal(dqn_state_load(e, bad, sl, &err), SHOAL_EFORMAT);
  free(bad);
  assert_int_equal(dqn_state_save(e, &after, &al, &err), 0);
  assert_int_equal(bl, al);
  assert_memory_equal(before, after, bl);
  free(after);

  /* Another algorithm's state. */
  impala *l = im_create();
  assert_int_equal(impala_state_load(l, st, sl, &err), SHOAL_EFORMAT);
  assert_non_null(strstr(err.msg, "written by dqn"));
  /* Another network's state (wider layers): the optimizer refuses it, nothing changes. */
  dqn_config c = dq_config();
  c.hidden[0] = 32;
  dqn *wide = dqn_create(&c, NN_CPU, true, &err);
  assert_non_null(wide);
  assert_int_not_equal(dqn_state_load(wide, st, sl, &err), 0);
  /* An actor's copy has no optimizer. */
  dqn *actor = dqn_create(&c, NN_CPU, false, &err);
  assert_int_equal(dqn_state_save(actor, &after, &al, &err), SHOAL_ESTATE);
  assert_int_equal(dqn_state_load(actor, st, sl, &err), SHOAL_ESTATE);

  /* Trailers: none, well formed, and one whose length does not fit. */
  uint8_t model[40];
  memset(model, 7, sizeof model);
  size_t ml, tl;
  const uint8_t *ts;
  assert_int_equal(algo_snapshot_split(model, sizeof model, &ml, &ts, &tl, &err), 0);
  assert_int_equal(ml, sizeof model);
  assert_null(ts);
  uint8_t *snap = malloc(sizeof model);
  memcpy(snap, model, sizeof model);
  size_t len = sizeof model;
  assert_int_equal(algo_snapshot_append_state(&snap, &len, st, sl, &err), 0);
  assert_int_equal(algo_snapshot_split(snap, len, &ml, &ts, &tl, &err), 0);
  assert_int_equal(ml, sizeof model);
  assert_int_equal(tl, sl);
  assert_memory_equal(ts, st, sl);
  assert_memory_equal(snap, model, sizeof model);
  uint64_t huge = len;
  memcpy(snap + len - 16, &huge, 8);
  assert_int_equal(algo_snapshot_split(snap, len, &ml, &ts, &tl, &err), SHOAL_EFORMAT);
  free(snap);

  free(st);
  free(before);
  dqn_destroy(d);
  dqn_destroy(e);
  dqn_destroy(wide);
  dqn_destroy(actor);
  impala_destroy(l);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dqn_exact_resume),
      cmocka_unit_test(test_impala_exact_resume),
      cmocka_unit_test(test_ppo_exact_resume),
      cmocka_unit_test(test_bad_states_refused),
  };
  return cmocka_run_group_tests_name("train_state", tests, NULL, NULL);
}
