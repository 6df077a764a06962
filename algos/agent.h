/* SPDX-License-Identifier: Apache-2.0 */
/*
 * algos/agent.h — the on-policy agent both programs share, with no config and no
 * transport: the shape of a run (op_spec: env spaces, T, algorithm), IMPALA's or PPO's
 * policy behind one interface, the observation normaliser (Gymnasium's RunningMeanStd,
 * written once here) the learner owns and publishes, the published blob, snapshots,
 * and the evaluation loop. run/run.h builds an op_spec and an op_agent_config from a
 * resolved config (op_spec_from_config, op_agent_config_from) and names the wire
 * columns of an unroll batch.
 *
 *   op_spec s;              // op_spec_from_config(cfg, &s, &err), or by hand
 *   op_agent_config c;      // op_agent_config_from(cfg, &s, &c)
 *   op_agent a;
 *   op_agent_create(&s, &c, 16, false, NN_CPU, &a, &err);
 *   op_agent_act(&a, obs_f, 16, &rng, false, act, env_act, logp, &err);
 *   op_agent_destroy(&a);
 */
#ifndef SHOAL_ALGOS_AGENT_H
#define SHOAL_ALGOS_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algos/algos.h"
#include "envs/envs.h"

/* Room for env.id: a plugin:PATH:NAME id carries a whole path (PATH_MAX is 4096). */
#define OP_ENV_ID_MAX 4160

/* The shape of a run, from its config and its env's spaces. */
typedef struct op_spec {
  bool impala;  /* algo: impala (else ppo) */
  int T;        /* unroll length: impala.unroll or ppo.steps */
  int num_envs; /* env copies per actor (items per batch) */
  int learn_B;  /* unrolls per update: impala.batch, or env.num_envs for PPO */
  char env_id[OP_ENV_ID_MAX];
  char env_options[256];
  int obs_ndim, obs_shape[3];
  bool obs_u8;      /* uint8 observations (MinAtar); else float32 */
  size_t obs_n;     /* elements per observation */
  size_t obs_bytes; /* bytes per observation in the env's dtype */
  int A;            /* discrete actions, or 0 */
  int D;            /* Box action dims, or 0 */
  float low[AC_MAX_ACT_DIM], high[AC_MAX_ACT_DIM];
  bool norm_obs, norm_reward, bootstrap_truncation;
  float gamma;
  int lstm; /* ac.lstm: the LSTM core's size, 0 without one; its state is 2·lstm floats */
} op_spec;

/* Fills s's spaces (obs_*, A or D and the bounds) from an env's; the other fields are
 * the caller's, s->impala and s->env_id read. SHOAL_EINVAL for spaces the actor-critic
 * cannot take (4-d observations, IMPALA with a Box, > AC_MAX_ACT_DIM dims). */
int op_spec_set_env(op_spec *s, const env_spec *sp, shoal_error *err);

/* The policy: IMPALA's or PPO's network behind one interface. */
typedef struct op_agent {
  ppo *p;
  impala *l;
  int max_batch;
  int S;        /* recurrent state floats per env (2·lstm); 0 without a core */
  bool learner; /* has the optimizer: its snapshots carry the learner state */
} op_agent;

/* What the network and its optimizer are built from (op_agent_config_from fills it
 * from a config); the B of impala and ppo is set from the spec's learn_B. */
typedef struct op_agent_config {
  ac_config ac;
  impala_config impala;
  ppo_config ppo;
} op_agent_config;

/* Creates the network (learner: with the optimizer and the learn() buffers of the
 * run's T x learn_B) for act() batches up to max_batch. a is filled on success; on
 * error a is zeroed and the code returned (impala_create's or ppo_create's). */
int op_agent_create(const op_spec *s, const op_agent_config *c, int max_batch, bool learner,
                    nn_device device, op_agent *a, shoal_error *err);
void op_agent_destroy(op_agent *a); /* zeroed; a zeroed agent is fine */
nn_model *op_agent_model(op_agent *a);
/* Samples (greedy: the mode) for B <= max_batch float observations: act gets int32
 * or B x D floats (unclipped), env_act (may be NULL) the same clipped to the Box,
 * logp (may be NULL) their log-probabilities. */
int op_agent_act(op_agent *a, const float *obs, int B, shoal_rng *rng, bool greedy, void *act,
                 void *env_act, float *logp, shoal_error *err);
/* As op_agent_act for an agent with an LSTM core (a->S > 0): state (B, a->S) is each
 * env's (h, c), read and replaced by the state after the step; first (B) marks the
 * observations that begin an episode, whose state is reset first. SHOAL_ESTATE for an
 * agent without a core (and op_agent_act is SHOAL_ESTATE for one with). */
int op_agent_act_recurrent(op_agent *a, const float *obs, int B, float *state, const uint8_t *first,
                           shoal_rng *rng, bool greedy, void *act, void *env_act, float *logp,
                           shoal_error *err);
/* One update from a time-major batch (impala_learn or ppo_learn). */
int op_agent_learn(op_agent *a, const onpolicy_batch *b, onpolicy_stats *st, shoal_error *err);
void op_agent_set_lr(op_agent *a, float lr);

/* ---- observation normaliser (Gymnasium's NormalizeObservation: running mean and
 * variance by Chan et al.'s merge from mean 0, var 1, count 1e-4; (x − μ)/√(σ² + 1e-8)
 * clipped to ±10). The learner owns it, updates it from the raw observations actors
 * send, normalises training batches with it, and publishes it with the parameters, so
 * every actor and the evaluation see one normalisation. */
typedef struct op_norm {
  int n;
  double *mean, *var; /* (n) */
  double count;
} op_norm;
int op_norm_init(op_norm *z, int n, shoal_error *err);
void op_norm_free(op_norm *z);
/* Merges the moments of rows x (rows, n) into z. Can't fail. */
void op_norm_update(op_norm *z, const float *x, size_t rows);
/* As op_norm_update for rows of doubles (a column of discounted returns). */
void op_norm_update_f64(op_norm *z, const double *x, size_t rows);
/* Normalises rows x (rows, n) in place. Can't fail. */
void op_norm_apply(const op_norm *z, float *x, size_t rows);

/* Raw observations (rows, obs) in the env's dtype to floats, then normalised with z
 * when z is not NULL. Can't fail. */
void op_obs_to_float(const op_spec *s, const void *raw, float *dst, size_t rows, const op_norm *z);

/* ---- published parameters and snapshots ----
 * Published blob (f32): the model's parameters, then, when norm_obs, mean (obs_n),
 * var (obs_n) and count (1). A snapshot is the model's safetensors (nn_model_save_buffer,
 * what PyTorch reads), then, from a learner's agent, the learner state (optimizer,
 * update count, PPO's RNG; algo_snapshot_append_state's trailer), then when norm_obs a
 * trailer: mean and var as doubles (obs_n each), count (double), obs_n (u64) and the
 * magic "SHOALNRM". */
size_t op_params_floats(op_agent *a, const op_spec *s);
/* Writes the blob into out (op_params_floats floats). Can't fail. */
void op_params_pack(op_agent *a, const op_spec *s, const op_norm *z, float *out);
/* Loads a blob of n floats (the actor's side); SHOAL_ESHAPE when n does not fit. z
 * (when norm_obs) gets the statistics. */
int op_params_unpack(op_agent *a, const op_spec *s, const float *blob, size_t n, op_norm *z,
                     shoal_error *err);
int op_snapshot_encode(op_agent *a, const op_spec *s, const op_norm *z, uint8_t **buf, size_t *len,
                       shoal_error *err);
/* Loads a snapshot into a's model and (when it has a trailer and z is not NULL) z.
 * SHOAL_EFORMAT for a damaged trailer; nn_model_load_buffer's errors otherwise. On
 * error neither the model nor z changes. */
int op_snapshot_decode(op_agent *a, const op_spec *s, op_norm *z, const uint8_t *buf, size_t len,
                       shoal_error *err);
/* As op_snapshot_decode, and for a learner's agent also restores the learner state
 * when the snapshot has one: *restored says whether it did (false for a snapshot
 * written without it, whose optimizer then starts afresh). A damaged state is an
 * error (the model and z may have been loaded by then). SHOAL_ESTATE on an actor's
 * agent. */
int op_snapshot_resume(op_agent *a, const op_spec *s, op_norm *z, const uint8_t *buf, size_t len,
                       bool *restored, shoal_error *err);

/* ---- evaluation ---- */
typedef struct op_eval op_eval;
/* E env copies play `episodes` episodes in all (split evenly: a copy stops counting
 * at its quota). Caller owns the result; NULL on error. */
op_eval *op_eval_create(const op_spec *s, int episodes, shoal_error *err);
void op_eval_destroy(op_eval *e);
/* Mean and standard deviation of the undiscounted return over the episodes, acting
 * greedily (or sampling) with a, observations normalised by z (may be NULL). With an
 * LSTM core the state is carried per env copy and reset at each episode's start
 * (every copy starts from zeros). min/max may be NULL. Episodes of envs without a time limit are
 * cut at 27,000 steps. */
int op_eval_run(op_eval *e, op_agent *a, const op_norm *z, bool greedy, uint64_t seed, double *mean,
                double *sd, double *min, double *max, shoal_error *err);
/* As op_eval_run with any policy: act(ctx, obs, B, first, env_act, err) writes B env
 * actions (int32, or B x D floats within the Box) for B float observations (normalised
 * by z when given); first (B) marks the observations that begin an episode. Every copy
 * starts from env seed `seed`. */
/* A watcher of the evaluation (a recorder): called before every step t (0 first) with
 * the env copies and, per copy, the episodes it has finished (whose count the loop
 * keeps). A non-zero return stops the evaluation with it. */
typedef int (*op_eval_watch_fn)(void *ctx, int64_t t, env_vec *ev, const int *episodes_done,
                                shoal_error *err);
/* Sets e's watcher (NULL: none) for the runs that follow. */
void op_eval_watch(op_eval *e, op_eval_watch_fn fn, void *ctx);
/* The env copies the episodes are split over, and their env (borrowed). */
int op_eval_copies(const op_eval *e);
env_vec *op_eval_env(op_eval *e);
/* After a run: copy's first episode's return and length (steps); false when that copy
 * finished none. */
bool op_eval_first_episode(const op_eval *e, int copy, double *ret, int64_t *len);

typedef int (*op_eval_act_fn)(void *ctx, const float *obs, int B, const uint8_t *first,
                              void *env_act, shoal_error *err);
int op_eval_run_policy(op_eval *e, op_eval_act_fn act, void *ctx, const op_norm *z, uint64_t seed,
                       double *mean, double *sd, double *min, double *max, shoal_error *err);

#endif
