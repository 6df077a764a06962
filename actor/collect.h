/* SPDX-License-Identifier: Apache-2.0 */
/*
 * actor/collect.h — the actor's sample builder: it keeps each env's recent steps
 * until their n-step return is known, computes Ape-X's initial priority for each
 * (Horgan et al. 2018: actors prioritise their own data with their local Q), and lays
 * finished steps out as the columns of one SampleBatch, env by env in time order, so
 * the learner inserts each env's run of steps into its replay stream as one call.
 *
 * Per step t of an env, with Q the actor's network at acting time:
 *   R_t = sum_{k<m} γ^k r_{t+k}, m = n or fewer when the episode ends first;
 *   bootstrap = 0 if the episode terminated at t+m−1, γ^m max_a Q(s_final) if it was
 *   truncated there, else γ^n max_a Q(s_{t+n});
 *   priority = |R_t + bootstrap − Q(s_t, a_t)|.
 * A step leaves the builder once step t+n has been acted on or its episode ended.
 */
#ifndef SHOAL_ACTOR_COLLECT_H
#define SHOAL_ACTOR_COLLECT_H

#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

typedef struct collector collector;

/* obs_floats: floats of one observation. cap_steps: steps an env may hold before a
 * flush (send_steps + n_step is enough). Caller owns the result; NULL on error. */
collector *collector_create(int num_envs, int obs_floats, int n_step, float gamma, int cap_steps,
                            shoal_error *err);
void collector_destroy(collector *c);

/* Records one vector step: obs (B, obs) acted on, actions (B), q_sa (B) = Q(s, a),
 * max_q (B) = max_a Q(s, ·), then the env's outcome reward, terminated, truncated
 * (B each), and for envs whose episode ended, final_max_q[i] = max_a Q(final obs_i)
 * (only read where truncated) and final_obs (B, obs) rows (only read where ended).
 * Copies everything. SHOAL_EFULL when an env holds cap_steps steps (flush first). */
int collector_add(collector *c, const float *obs, const int32_t *actions, const float *q_sa,
                  const float *max_q, const float *reward, const uint8_t *terminated,
                  const uint8_t *truncated, const float *final_obs, const float *final_max_q,
                  shoal_error *err);

/* The columns of one batch, pointing into the collector's buffers (valid until the
 * next collector call). Steps are env-major: env[i] is the env of step i, and an env's
 * steps are consecutive and in time order. final_obs holds one row per step with
 * terminated or truncated set, in step order. */
typedef struct collector_batch {
  int n;            /* steps */
  int k;            /* ended steps (rows of final_obs) */
  const float *obs; /* (n, obs) */
  const int32_t *action;
  const float *reward;
  const uint8_t *terminated;
  const uint8_t *truncated;
  const float *priority;
  const int32_t *env;
  const float *final_obs; /* (k, obs) */
} collector_batch;

/* Takes every step whose priority is known out of the collector into *out. n may be 0.
 * Can't fail. */
void collector_flush(collector *c, collector_batch *out);

/* Steps held (waiting for their n-step window) across all envs. */
int collector_pending(const collector *c);

#endif
