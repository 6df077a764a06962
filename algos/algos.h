/* SPDX-License-Identifier: Apache-2.0 */
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
#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dqn_net {
  DQN_NET_MLP = 0,     /* flattened observation -> hidden[0] -> hidden[1] -> heads, ReLU */
  DQN_NET_MINATAR = 1, /* MinAtar's: conv 16 3x3 stride 1 -> ReLU -> dense 128 -> heads */
  DQN_NET_NATURE = 2,  /* Atari: algos_image_torso's `nature`, then the heads */
  DQN_NET_IMPALA = 3,  /* Atari: algos_image_torso's `impala`, then the heads */
} dqn_net;

/* ---- networks from a description: the config's `model` section ---- */

enum { ALGOS_MAX_CONV = 8, ALGOS_MAX_STAGES = 8, ALGOS_MAX_DENSE = 8 };

typedef struct algos_conv {
  int channels, kernel, stride, padding; /* a square kernel */
} algos_conv;

/* A torso, layer by layer from the observation, every layer followed by the activation:
 *   input_scale != 1: "scale", a first layer multiplying the observation (1/255 turns
 *           bytes into [0, 1], so frames travel and are stored as bytes);
 *   conv:   "conv1".. "convN" (with "convI_relu" or "_tanh");
 *   stages: IMPALA's residual stages (Espeholt et al. 2018) of these channels:
 *           "stageS.conv" (3x3, padding 1), "stageS.pool" (max 3x3, stride 2, padding 1)
 *           and two blocks "stageS.resB" (x + conv1(relu(conv0(relu x))), 3x3 padding
 *           1), then "out_relu";
 *   dense:  after flattening, "fc1".. "fcN".
 * The presets are such descriptions: `mlp` dense hidden[0], hidden[1] (an empty width
 * ends the list); `minatar` conv 16 3x3/1, dense 128, ReLU; `nature` (Mnih et al. 2015)
 * scale 1/255, conv 32 8x8/4, 64 4x4/2, 64 3x3/1, dense 512, ReLU; `impala` scale 1/255,
 * stages 16, 32, 32, dense 256, ReLU. */
typedef struct algos_model {
  float input_scale;
  int nconv, nstages, ndense;
  algos_conv conv[ALGOS_MAX_CONV];
  int stages[ALGOS_MAX_STAGES];
  int dense[ALGOS_MAX_DENSE];
  bool tanh; /* the activation: tanh, else ReLU */
} algos_model;

/* The named preset ("mlp", "minatar", "nature", "impala") into *out; mlp takes its widths
 * from hidden and its activation from tanh, the others ignore both. Returns 0 or
 * SHOAL_EINVAL for another name. */
int algos_model_preset(const char *name, const int hidden[2], bool tanh, algos_model *out);

/* Whether the description fits observations of (c, h, w): counts within the limits,
 * positive sizes, and every convolution and pool leaving at least 1x1. *features gets
 * the torso's output width (NULL: not wanted). Returns 0 or SHOAL_EINVAL with err
 * naming the layer ("model: conv2 (64 4x4 stride 2) leaves 0x0 of 3x3"); who prefixes
 * the message. */
int algos_model_check(const algos_model *md, int c, int h, int w, const char *who, int *features,
                      shoal_error *err);

/* Whether the torso takes the observation as an image (C, H, W): it has convolutions. */
bool algos_model_is_image(const algos_model *md);

/* Adds md's layers from the current node of m, each named prefix + its name. dense_kind:
 * the dense layers' kind (NULL: nn's dense). Returns the last node, or a negative code
 * with nn_model_error(m) saying why. */
int algos_model_build(nn_model *m, const algos_model *md, const char *prefix,
                      const nn_layer_type *dense_kind);

/* Appends md's layers for observations of (c, h, w) to buf as the JSON entries of a
 * Params.arch "layers" list (conv2d, impala_stages, flatten, dense-kind entries), with a
 * trailing comma after each; dense_kind names the dense layers' kind. Returns the
 * torso's output width, or -1 when buf (cap bytes, *k used) is full. */
int algos_model_describe(const algos_model *md, int c, int h, int w, const char *dense_kind,
                         char *buf, size_t cap, size_t *k);

/* The Atari presets' torsos (algos_model_preset's `nature` or `impala`, built by
 * algos_model_build). */
int algos_image_torso(nn_model *m, bool impala, const char *prefix,
                      const nn_layer_type *dense_kind);

/* The config's name of a network ("mlp", "minatar", "nature", "impala"); "unknown"
 * for another value. Static. */
const char *dqn_net_name(dqn_net net);

typedef struct dqn_config {
  int obs_c, obs_h, obs_w; /* per-sample observation shape (a vector: N, 1, 1) */
  int num_actions;         /* A */
  dqn_net net;
  int hidden[2]; /* MLP widths (0 ends the list early) */
  /* model_set: the torso is model (the config's `model` section), and net and hidden
   * are not read; else it is the preset net names. */
  bool model_set;
  algos_model model;
  bool dueling;  /* heads V (1) and A (A): Q = V + A - mean(A) */
  bool double_q; /* argmax from the online net, value from the target */
  int n_step;    /* n of the n-step return (the replay assembles it) */
  float gamma;
  float lr, adam_eps, clip_norm, huber_delta;
  int target_period; /* updates between target-network syncs */
  int max_batch;     /* the largest learn() or act() batch */
  uint64_t seed;     /* network initialisation */
  /* The kind of every dense layer (hidden and heads): "" or "dense" for nn's own, else a
   * custom layer registered under that name (nn_layer_register) whose type has
   * dense_config, such as NoisyNet's noisy_linear (docs/custom-layers.md). Its noise is
   * drawn by the learner's networks and, after dqn_set_explore, by an actor's. */
  char layer[64];
  /* Layer plugins dqn_create loads first (nn_layer_plugin_load), ':'-separated paths. */
  char plugins[1024];
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
/* The network cfg builds, as the JSON that Params.arch carries (docs/actor-protocol.md,
 * "The architecture"): the input (shape (C, H, W), or (C) for a vector, and obs_u8: u8
 * planes the actor casts to float unscaled), the layers in order with their tensor
 * names, sizes and activations, and the head (dueling: Q = V + A - mean(A)). *out is a
 * new string the caller frees. Returns 0, SHOAL_EINVAL (a bad cfg) or SHOAL_ENOMEM. */
int dqn_describe(const dqn_config *cfg, bool obs_u8, char **out, shoal_error *err);

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

/* An actor's network explores by its custom layers' noise (NoisyNet): their draws on
 * (training mode), from a stream of its own seeded with seed. Does nothing when the
 * dense layers are nn's own. Can't fail. */
void dqn_set_explore(dqn *d, uint64_t seed);

/* The actor side of parameter sync: copies n floats into the network's parameters
 * (n must equal the network's parameter count). */
int dqn_load_params(dqn *d, const float *params, size_t n, shoal_error *err);

/* ==== On-policy actor-critic: V-trace, GAE, IMPALA and PPO ==========================
 *
 * Both algorithms learn from time-major batches of unrolls (onpolicy_batch): T steps of
 * B envs, with the observation after the last step as a (T+1)-th row to bootstrap from,
 * the behaviour policy's log-probabilities, rewards and Gymnasium's two end flags.
 * Terminated steps do not bootstrap (discount 0); truncated ones bootstrap from the
 * value of the episode's final observation (final_obs) and cut the trace there, since
 * the next row already belongs to the new episode (env_vec resets in the same step).
 *
 *   ac_config ac = ac_defaults();  ac.obs_c = 4;  ac.num_actions = 2;
 *   ppo_config pc = ppo_defaults();  pc.T = 128;  pc.B = 4;     // CleanRL's ppo.py
 *   ppo *p = ppo_create(&ac, &pc, NN_CPU, true, &err);
 *   ppo_act(p, obs, 4, &rng, false, actions, env_actions, logp, &err);  // per step
 *   ppo_learn(p, &batch, &stats, &err);                                 // per rollout
 *
 *   impala_config ic = impala_defaults();
 *   impala *l = impala_create(&ac, &ic, NN_CPU, true, &err);
 *   impala_learn(l, &batch, &stats, &err);   // one update from B unrolls of length T
 */

/* V-trace (Espeholt et al. 2018, eq. 1) over T steps of B sequences, time-major,
 * computed backwards: with ρ_t = min(ρ̄, π/μ), c_t = min(c̄, π/μ),
 *   δ_t = ρ_t (r_t + γ_t V'_t − V(x_t)),   v_t − V(x_t) = δ_t + γ_t c_t (v_{t+1} − V(x_{t+1})),
 * and the policy-gradient advantage ρ^pg_t (r_t + γ_t v'_{t+1} − V(x_t)), ρ^pg_t =
 * min(pg_rho_bar, π/μ). γ_t = discount (0 where the episode terminated). V'_t is
 * value[t+1], or final_value[t] where truncated[t] is set (the trace is cut there and
 * v'_{t+1} = final_value[t]). Arrays: log_rho = log π − log μ, discount, reward,
 * truncated (may be NULL), final_value (read where truncated; may be NULL only with
 * truncated NULL) and the outputs vs, pg_adv are (T, B); value is (T+1, B), row T the
 * bootstrap V(x_T). All borrowed for the call. SHOAL_EINVAL for bad sizes or bars,
 * SHOAL_ENAN for a non-finite input (nothing written then is not promised). */
int vtrace(int T, int B, const float *log_rho, const float *discount, const float *reward,
           const float *value, const uint8_t *truncated, const float *final_value, float rho_bar,
           float c_bar, float pg_rho_bar, float *vs, float *pg_adv, shoal_error *err);

/* GAE(λ) (Schulman et al. 2016) over the same layout: δ_t = r_t + γ_t V'_t − V(x_t),
 * A_t = δ_t + γ_t λ (1 − truncated_t) A_{t+1}, returns R_t = A_t + V(x_t). Bootstraps
 * truncated steps from final_value as vtrace() does (CleanRL's ppo.py instead treats a
 * truncation as a termination: pass truncated = NULL and fold it into discount for
 * that). adv and ret are (T, B); ret may be NULL. Errors as vtrace(). */
int gae(int T, int B, const float *discount, const float *reward, const float *value,
        const uint8_t *truncated, const float *final_value, float lambda, float *adv, float *ret,
        shoal_error *err);

enum { AC_MAX_ACT_DIM = 16 };

typedef enum ac_torso {
  AC_TORSO_MLP = 0,     /* flattened observation -> hidden[0] -> hidden[1] */
  AC_TORSO_MINATAR = 1, /* conv 16 3x3 stride 1 -> ReLU -> dense 128 -> ReLU (MinAtar's) */
  AC_TORSO_NATURE = 2,  /* Atari: algos_image_torso's `nature` */
  AC_TORSO_IMPALA = 3,  /* Atari: algos_image_torso's `impala` */
} ac_torso;

/* The actor-critic network, shared by IMPALA and PPO. Its one output row per sample is
 * [policy | value]: discrete policies give A logits; Box policies a Gaussian mean (D)
 * and a state-independent log-std (D), held as the bias of a dense layer whose weight
 * stays zero, so it lives in the model's one parameter buffer and travels with
 * published parameters and checkpoints. */
typedef struct ac_config {
  int obs_c, obs_h, obs_w; /* per-sample observation shape (a vector: N, 1, 1) */
  int num_actions;         /* discrete: A >= 1; 0 for a Box */
  int act_dim;             /* Box: D in [1, AC_MAX_ACT_DIM]; 0 for discrete */
  float act_low[AC_MAX_ACT_DIM], act_high[AC_MAX_ACT_DIM]; /* Box bounds (clip for the env) */
  ac_torso torso;
  int hidden[2]; /* MLP widths (0 ends the list early) */
  bool tanh;     /* tanh activations in the MLP (CleanRL's PPO); else ReLU */
  /* model_set: the torso is model (the config's `model` section), and torso, hidden and
   * tanh are not read; else it is the preset torso names. */
  bool model_set;
  algos_model model;
  bool separate;      /* separate actor and critic torsos (CleanRL's PPO); else shared */
  bool ortho_init;    /* orthogonal weights, gain √2, policy head 0.01, value head 1, zero
                         biases (CleanRL's layer_init); else PyTorch's default init */
  float log_std_init; /* Box: initial log-std */
  int lstm;           /* > 0: an LSTM core of this size between torso and heads (shared
                         torso only; IMPALA and PPO); its (h, c) state is reset at
                         episode starts */
  int max_batch;      /* the largest act() batch (learners size their own batches) */
  uint64_t seed;      /* network initialisation */
  /* The kind of the torso's dense layers: "" or "dense" for nn's own, else a custom layer
   * registered under that name whose type has dense_config (docs/custom-layers.md); the
   * heads stay nn's dense layers. A custom layer keeps its own initialisers under
   * ortho_init. Networks run in evaluation mode on actors and in training mode in the
   * learner, so a layer whose modes differ (a noisy one) makes the two policies differ. */
  char layer[64];
  /* Layer plugins ac__create loads first (nn_layer_plugin_load), ':'-separated paths. */
  char plugins[1024];
} ac_config;

/* MLP 64-64 tanh, separate torsos, orthogonal init, log-std 0, batch up to 256:
 * CleanRL's PPO agent. The caller sets the shapes. */
ac_config ac_defaults(void);

/* One time-major batch of B unrolls of T steps for learn(), all arrays borrowed. */
typedef struct onpolicy_batch {
  int T, B;
  const float *obs;          /* (T+1, B, obs): o_0 .. o_T, row T the bootstrap observation */
  const void *action;        /* (T, B) int32, or (T, B, D) float: the action sampled (unclipped) */
  const float *logp;         /* (T, B) log μ(a_t | o_t) of the behaviour policy */
  const float *reward;       /* (T, B) */
  const uint8_t *terminated; /* (T, B) 0/1 */
  const uint8_t *truncated;  /* (T, B) 0/1, or NULL: no truncations */
  const float *final_obs;    /* (T, B, obs) read where truncated; NULL: truncation is treated
                                as termination (no bootstrap), as CleanRL's ppo.py does */
  const float *core0;        /* with an LSTM core: (B, 2·lstm) the (h, c) that entered the core
                                at o_0 (zero where o_0 began an episode), as the actor held it;
                                NULL: zeros. The learner re-runs the core from it over the unroll
                                (truncated backpropagation through time, T + 1 steps), resetting
                                the state after each terminated or truncated step. */
} onpolicy_batch;

/* ---- IMPALA (Espeholt et al. 2018) ---- */

typedef enum onpolicy_optim { ONPOLICY_ADAM = 0, ONPOLICY_RMSPROP = 1 } onpolicy_optim;

typedef struct impala_config {
  int T, B;             /* unroll length and unrolls per update (the largest learn() batch) */
  float gamma;          /* discount */
  float rho_bar, c_bar; /* V-trace truncation levels (1, 1) */
  float pg_rho_bar;     /* ρ̄ of the policy-gradient advantage (1) */
  float baseline_coef;  /* weight of 0.5 (v_s − V)² (0.5, torchbeast's) */
  float entropy_coef;   /* entropy bonus */
  onpolicy_optim optim;
  float lr, eps, alpha; /* Adam ε / RMSprop ε and smoothing α */
  float clip_norm;      /* global gradient-norm clip (0: none) */
} impala_config;

/* T 20, B 16, γ 0.99, ρ̄ = c̄ = 1, baseline 0.5, entropy 0.01, Adam lr 1e-3 ε 1e-8,
 * clip 40. */
impala_config impala_defaults(void);

typedef struct impala impala;

/* Creates the network (and, when learner is true, the optimizer and the buffers of a
 * learn() over T x B). Caller owns the result; NULL on error (err says which field).
 * IMPALA's policy is discrete (num_actions >= 1). */
impala *impala_create(const ac_config *ac, const impala_config *ic, nn_device device, bool learner,
                      shoal_error *err);
void impala_destroy(impala *l); /* NULL is fine */
/* The network, owned by l: its parameter buffer is what the learner publishes. With
 * an LSTM core a learner's is the core unrolled over T + 1 steps, an actor's the one
 * step it acts with; both hold the same tensors at the same offsets, so the learner's
 * parameters load into the actor (impala_load_params). */
nn_model *impala_model(impala *l);
/* Samples actions for B observations from softmax(logits) (greedy: argmax, lowest
 * index on ties) and writes the behaviour log-probabilities to logp (B; may be NULL).
 * Errors: B outside [1, max_batch], a NaN observation. */
int impala_act(impala *l, const float *obs, int B, shoal_rng *rng, bool greedy, int32_t *actions,
               float *logp, shoal_error *err);

typedef struct onpolicy_stats {
  float loss;          /* total loss of the (last mini)batch */
  float pg_loss;       /* policy-gradient loss (PPO: the clipped surrogate, mean) */
  float value_loss;    /* 0.5 · mean squared error of the baseline (unweighted) */
  float entropy;       /* mean policy entropy */
  float grad_norm;     /* before clipping (last step) */
  float approx_kl;     /* PPO: mean (r − 1) − log r (Schulman's k3) of the last epoch */
  float clip_frac;     /* PPO: share of |r − 1| > ε; IMPALA: share of ρ clipped at ρ̄ */
  float explained_var; /* 1 − Var(R − V) / Var(R) of the value targets */
  float mean_rho;      /* mean importance ratio π/μ over the batch (1 on-policy) */
  int64_t updates;     /* optimizer steps so far */
} onpolicy_stats;

/* One update from b (T <= config T, B <= config B; with an LSTM core T = config T and
 * the core re-run from b->core0): V-trace targets v_s and advantages
 * from the current network's values (stop-gradient), loss = −mean(ρ^pg A log π(a|x)) +
 * baseline_coef · 0.5 · mean((v_s − V(x))²) − entropy_coef · mean(H(π(·|x))), one
 * clipped optimizer step. Errors (the network unchanged): an action out of range, a
 * non-finite input (SHOAL_ENAN), a batch larger than the config's. */
int impala_learn(impala *l, const onpolicy_batch *b, onpolicy_stats *stats, shoal_error *err);
/* Floats of the recurrent state per env, 2·lstm ((h, c)); 0 without an LSTM core.
 * Can't fail. */
int impala_state_size(const impala *l);
/* impala_act for a network with an LSTM core: state (B, impala_state_size) is each
 * env's (h, c), read and replaced by the state after this step; first (B; NULL: none)
 * marks observations that begin an episode, whose state is reset (multiplied by 0)
 * before the step. An unroll's core0 is the state as reset for its first observation:
 * first ? 0 : state. Errors as impala_act; SHOAL_ESTATE on a network without a core
 * (and impala_act is SHOAL_ESTATE on one with). */
int impala_act_recurrent(impala *l, const float *obs, int B, float *state, const uint8_t *first,
                         shoal_rng *rng, bool greedy, int32_t *actions, float *logp,
                         shoal_error *err);
/* Copies n floats into the network's parameters (n must be its parameter count). */
int impala_load_params(impala *l, const float *params, size_t n, shoal_error *err);
void impala_set_lr(impala *l, float lr); /* a schedule's value for the next steps */

/* ---- PPO (Schulman et al. 2017), as CleanRL's ppo.py and ppo_continuous_action.py ---- */

typedef struct ppo_config {
  int T, B;            /* rollout steps per env and envs (the batch is T·B) */
  int minibatches;     /* minibatches per epoch (T·B must divide evenly) */
  int epochs;          /* passes over the batch per learn() */
  float gamma, lambda; /* discount, GAE λ */
  float clip;          /* ε of the clipped ratio */
  bool clip_value;     /* clip V to V_old ± ε in the value loss */
  bool norm_adv;       /* normalise advantages per minibatch */
  float entropy_coef, value_coef;
  float lr, adam_eps; /* Adam */
  float clip_norm;    /* global gradient-norm clip (0: none) */
  float target_kl;    /* > 0: stop the epochs once the last minibatch's approx KL exceeds it */
  uint64_t seed;      /* minibatch shuffling */
} ppo_config;

/* CleanRL's ppo.py: T 128, B 4, 4 minibatches, 4 epochs, γ 0.99, λ 0.95, ε 0.2, value
 * clipping, normalised advantages, entropy 0.01, value 0.5, Adam lr 2.5e-4 ε 1e-5,
 * clip 0.5, no target KL. */
ppo_config ppo_defaults(void);

typedef struct ppo ppo;

/* Creates the network (and, when learner is true, Adam and the buffers of a learn()
 * over T x B). Caller owns the result; NULL on error. */
ppo *ppo_create(const ac_config *ac, const ppo_config *pc, nn_device device, bool learner,
                shoal_error *err);
void ppo_destroy(ppo *p); /* NULL is fine */
/* The network whose parameters are published (with a core, as impala_model). */
nn_model *ppo_model(ppo *p);
const ac_config *ppo_ac_config(const ppo *p);
/* Acts on B observations: samples (greedy: argmax or the Gaussian mean). actions gets
 * what learn() needs (B int32, or B x D floats unclipped); env_actions (may be NULL)
 * the same clipped to the Box for the env (CleanRL's ClipAction; for discrete actions
 * a copy). logp (B; may be NULL) the log-probability of actions; value (B; may be
 * NULL) V(o). Errors: B outside [1, max_batch], a NaN observation. */
int ppo_act(ppo *p, const float *obs, int B, shoal_rng *rng, bool greedy, void *actions,
            void *env_actions, float *logp, float *value, shoal_error *err);
/* One PPO update over b (T, B equal to the config's): values and GAE from the current
 * network, then `epochs` passes of shuffled minibatches of the clipped surrogate
 * −min(r A, clip(r, 1 ± ε) A), the (optionally clipped) value loss 0.5 (V − R)² weighted
 * by value_coef and the entropy bonus, each a clipped Adam step. Errors: bad shapes,
 * an action out of range, a non-finite input or loss (SHOAL_ENAN; parameters may have
 * taken the earlier minibatches' steps). */
int ppo_learn(ppo *p, const onpolicy_batch *b, onpolicy_stats *stats, shoal_error *err);
/* Floats of the recurrent state per env, 2·lstm; 0 without an LSTM core. Can't fail. */
int ppo_state_size(const ppo *p);
/* ppo_act for a network with an LSTM core; state and first as impala_act_recurrent.
 * With a core, ppo_learn takes batches of the config's T x B with core0, re-runs the
 * core over each unroll for the values and for every minibatch, and its minibatches
 * are B / minibatches whole unrolls (B must divide). SHOAL_ESTATE on a network without
 * a core (and ppo_act is SHOAL_ESTATE on one with). */
int ppo_act_recurrent(ppo *p, const float *obs, int B, float *state, const uint8_t *first,
                      shoal_rng *rng, bool greedy, void *actions, void *env_actions, float *logp,
                      float *value, shoal_error *err);
int ppo_load_params(ppo *p, const float *params, size_t n, shoal_error *err);
void ppo_set_lr(ppo *p, float lr);

/* ---- losses over policy outputs, for learn() and its tests ---- */

/* Per-sample policy quantities of a discrete (A logits) or Gaussian (D means, D
 * log-stds) head: log π(a | ·) and the entropy. Can't fail (a is in range). */
float ac_logp_discrete(const float *logits, int A, int32_t a, float *entropy);
float ac_logp_gaussian(const float *mean, const float *log_std, int D, const float *a,
                       float *entropy);

/* The PPO loss of N samples and its gradient w.r.t. the network's outputs. out is
 * (N, P + 1): P policy outputs (A logits, or D means then D log-stds) and the value.
 * Loss = mean(max(−A_i r_i, −A_i clip(r_i, 1 ± clip))) − entropy_coef · mean(H_i) +
 * value_coef · 0.5 · mean(max((V − R)², (V_old + clip(V − V_old, ±clip) − R)²)) (the
 * second term only with clip_value). dout (N, P + 1) is overwritten. Writes the parts
 * into stats (loss, pg_loss, value_loss, entropy, approx_kl, clip_frac). */
typedef struct ppo_loss_in {
  int N, A, D;            /* A > 0 discrete, else D > 0 Gaussian */
  const void *action;     /* (N) int32 or (N, D) float */
  const float *old_logp;  /* (N) */
  const float *adv;       /* (N), already normalised if wanted */
  const float *ret;       /* (N) value targets */
  const float *old_value; /* (N) for value clipping */
  float clip, entropy_coef, value_coef;
  bool clip_value;
} ppo_loss_in;
void ppo_loss(const ppo_loss_in *in, const float *out, float *dout, onpolicy_stats *stats);

/* The IMPALA loss of N samples: out (N, A + 1) = [logits | V]; loss = −mean(pg_adv ·
 * log π(a)) + baseline_coef · 0.5 · mean((vs − V)²) − entropy_coef · mean(H); dout (N,
 * A + 1) overwritten with its gradient (vs, pg_adv held constant). Writes loss,
 * pg_loss, value_loss, entropy into stats. */
void impala_loss(int N, int A, const int32_t *action, const float *vs, const float *pg_adv,
                 float baseline_coef, float entropy_coef, const float *out, float *dout,
                 onpolicy_stats *stats);

/* ---- learner state, for an exact resume ----
 * A parameter snapshot alone restarts the optimizer. The learner state is what else a
 * learner needs to continue exactly: the optimizer's moments and step count, DQN's
 * target network and its update count (which times target syncs), PPO's minibatch
 * shuffling RNG. *_state_save writes it into a new buffer (caller frees *buf with
 * free()); *_state_load checks the magic, version, algorithm, checksum and every tensor
 * first and changes nothing on error (SHOAL_EFORMAT for a damaged or foreign blob,
 * SHOAL_ESHAPE for another network's, SHOAL_ESTATE on an actor's copy). The learner's
 * config (lr, ...) stays its own. */
int dqn_state_save(const dqn *d, uint8_t **buf, size_t *len, shoal_error *err);
int dqn_state_load(dqn *d, const uint8_t *buf, size_t len, shoal_error *err);
int impala_state_save(const impala *l, uint8_t **buf, size_t *len, shoal_error *err);
int impala_state_load(impala *l, const uint8_t *buf, size_t len, shoal_error *err);
int ppo_state_save(const ppo *p, uint8_t **buf, size_t *len, shoal_error *err);
int ppo_state_load(ppo *p, const uint8_t *buf, size_t len, shoal_error *err);

/* A learner's snapshot is the model's safetensors bytes followed by the learner state
 * as a trailer: state, its length (u64), "SHOALOPT" (an on-policy snapshot's
 * normaliser trailer, when it has one, comes after it). One store write carries both,
 * so they are stored atomically together.
 * append: grows *buf (a malloc'd buffer of *len bytes) by the trailer; on error *buf
 * and *len are untouched (SHOAL_ENOMEM).
 * split: model_len gets the length of the part before a trailer, state/state_len the
 * state (borrowed from buf), or NULL and 0 when the snapshot has none (one written
 * before learner states were kept). SHOAL_EFORMAT for a trailer that does not fit. */
int algo_snapshot_append_state(uint8_t **buf, size_t *len, const uint8_t *state, size_t state_len,
                               shoal_error *err);
int algo_snapshot_split(const uint8_t *buf, size_t len, size_t *model_len, const uint8_t **state,
                        size_t *state_len, shoal_error *err);

#ifdef __cplusplus
}
#endif
#endif
