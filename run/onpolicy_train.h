/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run/onpolicy_train.h — a synchronous, single-process training loop for PPO and
 * IMPALA: one env_vec of B copies, T steps of act() per rollout, one learn() per
 * rollout (PPO: its epochs of minibatches; IMPALA: one V-trace update over the B
 * unrolls), periodic evaluation of the policy on separate envs. It is the exact
 * comparison with CleanRL's ppo.py / ppo_continuous_action.py, and the reference the
 * distributed learner's results are held to.
 *
 *   onpolicy_train_config tc;
 *   onpolicy_train_from_config(cfg, &tc, &err);          // an -ppo.yaml / -impala.yaml
 *   onpolicy_train_result res;
 *   onpolicy_train_sync(&tc, &res, &err);
 */
#ifndef SHOAL_RUN_ONPOLICY_TRAIN_H
#define SHOAL_RUN_ONPOLICY_TRAIN_H

#include <stdio.h>

#include "run/run.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct onpolicy_train_config {
  bool use_impala; /* IMPALA (V-trace) instead of PPO */
  char env_id[OP_ENV_ID_MAX];
  char env_options[256];
  int num_envs;              /* B */
  ac_config ac;              /* network options; shapes and bounds come from the env */
  ppo_config ppo;            /* its B is num_envs */
  impala_config impala;      /* its B is num_envs (one unroll per env per update) */
  bool anneal_lr;            /* lr falls linearly to 0 over max_env_steps (CleanRL) */
  bool norm_obs;             /* Gymnasium's NormalizeObservation, then clip ±10 */
  bool norm_reward;          /* Gymnasium's NormalizeReward(γ), then clip ±10 */
  bool bootstrap_truncation; /* bootstrap truncated episodes (false: CleanRL's ppo.py) */
  int64_t max_env_steps;
  double max_seconds;  /* 0: no limit */
  double solve_return; /* stop once the evaluation mean reaches it; NAN: never */
  int eval_episodes;
  int64_t eval_every_steps;
  bool eval_greedy;     /* argmax / Gaussian mean; else sampled */
  double report_return; /* result.report_steps: when the training return100 first
                           reached this (NAN: not tracked) */
  uint64_t seed;
  FILE *log; /* a progress line per log_every_s seconds; NULL: quiet */
  double log_every_s;
} onpolicy_train_config;

typedef struct onpolicy_train_result {
  int64_t env_steps, updates;
  double seconds;               /* wall time of the whole run, evaluations included */
  double train_return100;       /* mean return of the last 100 training episodes (raw rewards) */
  double eval_return, eval_std; /* the last evaluation; NAN if none ran */
  int eval_count;
  bool solved;
  int64_t solved_env_steps;
  double solved_seconds;
  int64_t report_steps; /* env steps when return100 first reached report_return; -1 */
  onpolicy_stats last;  /* the last learn()'s statistics */
} onpolicy_train_result;

/* Fills tc from a resolved on-policy config (onpolicy_schema; checked with
 * onpolicy_check first). run.solve_return 0 means never. */
int onpolicy_train_from_config(const config *cfg, onpolicy_train_config *tc, shoal_error *err);

/* Trains until max_env_steps, max_seconds or the solve threshold, then evaluates once
 * more (unless the last evaluation was at the end). Allocates everything up front;
 * the loop allocates nothing. Errors: an unknown env, a bad config (SHOAL_EINVAL
 * naming it), a learn() failure (its code and message). res is filled even on error
 * with what was done. */
int onpolicy_train_sync(const onpolicy_train_config *tc, onpolicy_train_result *res,
                        shoal_error *err);

#ifdef __cplusplus
}
#endif
#endif
