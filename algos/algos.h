/*
 * algos/algos.h — the algorithms, each written once and shared by the actor and the
 * learner programs: the network, act() for actors (on the CPU, a local copy of the
 * policy) and learn() for the learner.
 *
 * Ape-X DQN (Horgan et al. 2018, "Distributed Prioritized Experience Replay"):
 * double Q-learning (van Hasselt et al. 2016), optional dueling heads (Wang et al.
 * 2016), n-step returns, priorities |δ| computed by actors for their own data and
 * updated by the learner, per-actor ε_i = ε^(1 + α·i/(N−1)), a target network synced
 * every `target_period` updates, Huber loss weighted by importance weights, global
 * gradient-norm clipping.
 *
 *   dqn_config dc = dqn_defaults();
 *   dc.obs_c = 4; dc.num_actions = 2;
 *   dqn *learner = dqn_create(&dc, NN_CPU, true, &err);
 *   dqn_learn(learner, &batch, priorities, &stats, &err);   // one update
 *   dqn *actor = dqn_create(&dc, NN_CPU, false, &err);
 *   dqn_load_params(actor, params, n, &err);                // from the learner
 *   dqn_act(actor, obs, B, eps, &rng, actions, &q, &err);
 */
#ifndef SHOAL_ALGOS_H
#define SHOAL_ALGOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"
#include "config/config.h"
#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dqn_net {
  DQN_NET_MLP = 0,     /* flattened observation -> hidden[0] -> hidden[1] -> heads, ReLU */
  DQN_NET_MINATAR = 1, /* MinAtar's: conv 16 3x3 stride 1 -> ReLU -> dense 128 -> heads */
} dqn_net;

typedef struct dqn_config {
  int obs_c, obs_h, obs_w; /* per-sample observation shape (a vector: N, 1, 1) */
  int num_actions;         /* A */
  dqn_net net;
  int hidden[2]; /* MLP widths (0 ends the list early) */
  bool dueling;  /* heads V (1) and A (A): Q = V + A - mean(A) */
  bool double_q; /* argmax from the online net, value from the target */
  int n_step;    /* n of the n-step return (the replay assembles it) */
  float gamma;
  float lr, adam_eps, clip_norm, huber_delta;
  int target_period; /* updates between target-network syncs */
  int max_batch;     /* the largest learn() or act() batch */
  uint64_t seed;     /* network initialisation */
} dqn_config;

/* Defaults that solve CartPole-v1 (MLP 64-64, dueling, double, n=3, γ=0.99,
 * Adam lr 1e-3, clip 10, Huber δ=1, target period 500, batch up to 256). */
dqn_config dqn_defaults(void);

typedef struct dqn dqn;

/* Creates the network (and, when learner is true, the target network and the Adam
 * optimizer). Caller owns the result; NULL on error (err names the problem). */
dqn *dqn_create(const dqn_config *cfg, nn_device device, bool learner, shoal_error *err);
void dqn_destroy(dqn *d);

/* The online network, owned by d: its parameter buffer is what the learner publishes. */
nn_model *dqn_model(dqn *d);
const dqn_config *dqn_get_config(const dqn *d);

/* Q-values of B observations into the model's buffer: *q is (B, A), valid until the
 * next call on d. */
int dqn_q(dqn *d, const float *obs, int B, const float **q, shoal_error *err);
/* ε-greedy actions for B observations: with probability eps a uniform action, else
 * argmax_a Q (lowest index on ties). *q, when q is not NULL, gets the Q-values as
 * dqn_q does (actors use them for initial priorities). */
int dqn_act(dqn *d, const float *obs, int B, float eps, shoal_rng *rng, int32_t *actions,
            const float **q, shoal_error *err);

/* Ape-X's per-actor exploration: ε_i = ε^(1 + α·i/(N−1)); ε for N = 1. */
float dqn_actor_epsilon(int i, int n, float eps, float alpha);

/* One n-step transition batch for learn(), all arrays borrowed for the call. */
typedef struct dqn_batch {
  int B;
  const float *obs;      /* (B, obs) s_t */
  const int32_t *action; /* (B) a_t */
  const float *ret;      /* (B) R = sum_{k<n} γ^k r_{t+k}, cut at the episode's end */
  const float *discount; /* (B) γ^k for the bootstrap, 0 when the episode terminated */
  const float *next_obs; /* (B, obs) s_{t+k} (the final observation when truncated) */
  const float *weight;   /* (B) importance weights, or NULL for 1 */
} dqn_batch;

typedef struct dqn_stats {
  float loss;      /* weighted Huber loss of the batch */
  float grad_norm; /* before clipping */
  float q_mean;    /* mean Q(s_t, a_t) */
  int64_t updates; /* learn() calls that applied a step so far */
} dqn_stats;

/* One update: targets y = R + discount · Q_target(s', argmax_a Q_online(s', a)) (double
 * Q) or max_a Q_target(s', a), Huber loss on Q(s, a) − y weighted by the importance
 * weights, Adam step with clipping, target sync every target_period updates. Writes
 * |δ| = |y − Q(s, a)| to priorities (B), the new priorities for the replay. Errors:
 * an action out of range, a NaN (the step is skipped, the model unchanged). */
int dqn_learn(dqn *d, const dqn_batch *b, float *priorities, dqn_stats *stats, shoal_error *err);

/* Copies the online network into the target network (the learner does it every
 * target_period updates; call it after loading parameters, e.g. on resume). */
int dqn_sync_target(dqn *d, shoal_error *err);

/* Live tuning on a learner-side dqn (between learn() calls, on the trainer's thread).
 * dqn_set_lr: Adam's learning rate from the next update on (lr > 0 and finite).
 * dqn_set_target_period: updates between target syncs (>= 1), counted from update 0 as
 * before. Return 0, SHOAL_EINVAL for a bad value, SHOAL_ESTATE on an actor-side dqn;
 * d is unchanged on error. */
int dqn_set_lr(dqn *d, float lr, shoal_error *err);
int dqn_set_target_period(dqn *d, int period, shoal_error *err);
/* The learning rate in use (the config's, or the last dqn_set_lr). Can't fail. */
float dqn_lr(const dqn *d);

/* The actor side of parameter sync: copies n floats into the network's parameters
 * (n must equal the network's parameter count). */
int dqn_load_params(dqn *d, const float *params, size_t n, shoal_error *err);

/* The keys of an Ape-X run's config (configs/<name>-apex.yaml): one schema shared by
 * `shoal run`, the learner and the actors. Static; can't fail. */
const cfg_key *apex_schema(int *n);

/* Checks what the schema's types and bounds cannot: the choice keys (dqn.net: mlp or
 * minatar; learner.device: cpu, cuda or auto). SHOAL_EINVAL naming the key and value. */
int apex_check(const config *cfg, shoal_error *err);

/* The DQN of a run: dqn.* keys of an Ape-X config (see apex_schema), for observations of
 * per-sample shape (ndim 1..3: C[, H[, W]]) and num_actions actions; max_batch is left
 * at its default for the caller to set. Can't fail (the schema bounds every value). */
dqn_config apex_dqn_config(const config *cfg, int obs_ndim, const int *obs_shape, int num_actions);

#ifdef __cplusplus
}
#endif
#endif
