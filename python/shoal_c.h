/* SPDX-License-Identifier: Apache-2.0 */
/*
 * python/shoal_c.h — libshoal.so: a small, stable C API over shoal's vector envs and
 * trained policies, for foreign-function callers (the Python package python/shoal uses
 * it through ctypes). The library also exports the functions of shoal's public C headers
 * (nn/nn.h, envs/envs.h, store/store.h, common/shoal.h); the rest of shoal is linked in
 * and hidden. Installed as PREFIX/include/shoal/python/shoal_c.h.
 *
 *   shoal_c_vec *v;
 *   if (shoal_c_vec_create(&v, "CartPole-v1", 256, 1, 0, NULL))
 *     fprintf(stderr, "%s\n", shoal_c_last_error());
 *   float obs[256 * 4], rew[256];
 *   uint8_t term[256], trunc[256];
 *   int32_t act[256];
 *   shoal_c_vec_reset(v, 42, obs);
 *   int ended = shoal_c_vec_step_into(v, act, obs, rew, term, trunc, NULL);  // >= 0 or code
 *   shoal_c_vec_destroy(v);
 *
 *   shoal_c_policy *p;
 *   shoal_c_policy_load_store(&p, "file:///data/runs", "cartpole-1", SHOAL_C_LATEST);
 *   shoal_c_policy_act(p, obs, SHOAL_C_FLOAT32, 256, act, NULL);   // greedy, as the actor
 *   shoal_c_policy_destroy(p);
 *
 * Errors: every fallible function returns 0 (or a count) or a negative SHOAL_E... code
 * (common/shoal.h), and stores a message saying what and where for the calling thread:
 * shoal_c_last_error() / shoal_c_last_error_code(). Handles are not thread-safe; use one
 * per thread.
 *
 * Stability: SHOAL_C_ABI is bumped whenever a function or a struct below changes shape;
 * callers check shoal_c_abi_version() before using the structs.
 */
#ifndef SHOAL_PYTHON_SHOAL_C_H
#define SHOAL_PYTHON_SHOAL_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHOAL_C_ABI 3

#if defined(__GNUC__)
#define SHOAL_C_EXPORT __attribute__((visibility("default")))
#else
#define SHOAL_C_EXPORT
#endif

/* Element types of observations and actions (the values of envs/envs.h's env_dtype). */
enum { SHOAL_C_FLOAT32 = 1, SHOAL_C_UINT8 = 2, SHOAL_C_INT32 = 3 };

/* Which snapshot of a run: a version >= 0, or one of these. */
enum { SHOAL_C_LATEST = -1, SHOAL_C_BEST = -2 };

/* A Box or Discrete space. Discrete: dtype INT32, ndim 0, size 1, n actions, low/high
 * NULL. Box: n 0, low/high point at size floats (static, may be +-inf). */
typedef struct shoal_c_space {
  int32_t dtype;
  int32_t ndim;
  int32_t shape[4];
  int32_t size;
  int32_t n;
  const float *low;
  const float *high;
} shoal_c_space;

typedef struct shoal_c_spec {
  const char *id; /* static */
  shoal_c_space obs, act;
  int32_t max_episode_steps;  /* the time limit in force (0: none) */
  int32_t num_envs;           /* B (0 for a spec looked up by id) */
  int32_t render_w, render_h; /* frame size of shoal_c_vec_render; 0 if not renderable */
  double reward_threshold;    /* NaN when none */
} shoal_c_spec;

typedef struct shoal_c_stats {
  uint64_t steps, episodes, dropped;
  double mean_return_100, mean_length_100; /* NaN before the first finished episode */
} shoal_c_stats;

SHOAL_C_EXPORT int shoal_c_abi_version(void);
/* The message / code of the calling thread's last failure ("" / 0 if none). */
SHOAL_C_EXPORT const char *shoal_c_last_error(void);
SHOAL_C_EXPORT int shoal_c_last_error_code(void);

/* Writes up to cap registered env ids (static strings); returns how many exist. */
SHOAL_C_EXPORT int shoal_c_env_list(const char **names, int cap);
/* The spec of a registered id (num_envs 0). SHOAL_ENOENT naming the known ids. */
SHOAL_C_EXPORT int shoal_c_env_spec(const char *id, shoal_c_spec *out);

/* ---- Vector envs ----------------------------------------------------------------- */

typedef struct shoal_c_vec shoal_c_vec;

/* B copies of env id stepped by `threads` threads (<= 1: the caller's). max_episode_steps:
 * 0 the registered limit, > 0 another, < 0 none. options: env_make_opts's "k=v,..." or
 * NULL. Caller owns *out (shoal_c_vec_destroy). */
SHOAL_C_EXPORT int shoal_c_vec_create(shoal_c_vec **out, const char *id, int B, int threads,
                                      int max_episode_steps, const char *options);
SHOAL_C_EXPORT void shoal_c_vec_destroy(shoal_c_vec *v); /* NULL is fine */
SHOAL_C_EXPORT int shoal_c_vec_spec(const shoal_c_vec *v, shoal_c_spec *out);

/* Seeds copy i with seed + i, resets every copy and writes B first observations to obs
 * (NULL: the bound obs buffer, see shoal_c_vec_bind). */
SHOAL_C_EXPORT int shoal_c_vec_reset(shoal_c_vec *v, uint64_t seed, void *obs);

/* Steps all copies with actions (B int32, or B x act.size floats) into caller-owned
 * buffers of B rows: obs, reward, terminated, truncated, and final_obs (may be NULL;
 * see envs.h env_vec_out: copies whose episode ended are reset in the same step, obs
 * gets their new first observation and final_obs the last one of the old episode).
 * Returns how many copies' episodes ended (>= 0), or a code with nothing stepped:
 * SHOAL_ERANGE / SHOAL_ENAN naming the first bad copy, SHOAL_ESTATE before a reset. */
SHOAL_C_EXPORT int shoal_c_vec_step_into(shoal_c_vec *v, const void *actions, void *obs,
                                         float *reward, uint8_t *terminated, uint8_t *truncated,
                                         void *final_obs);

/* Binds caller-owned buffers once, for shoal_c_vec_step (fewest arguments per call:
 * what a foreign-function caller wants). actions, obs, reward, terminated and truncated
 * are required; final_obs and done (B bytes, set to terminated | truncated) may be NULL.
 * The buffers must outlive the binding (until the next bind or destroy). */
SHOAL_C_EXPORT int shoal_c_vec_bind(shoal_c_vec *v, const void *actions, void *obs, float *reward,
                                    uint8_t *terminated, uint8_t *truncated, void *final_obs,
                                    uint8_t *done);
/* One step with the bound buffers; returns as shoal_c_vec_step_into. */
SHOAL_C_EXPORT int shoal_c_vec_step(shoal_c_vec *v);

/* As shoal_c_vec_reset with a seed per copy and reset options (Gymnasium's
 * reset(seed=[...], options={...})): copy i is seeded with seeds[i] where reseed is NULL
 * or reseed[i] != 0, else its RNG goes on (a copy never seeded draws as if seeded with
 * i; the Python package passes a seed from OS entropy for those, as Gymnasium). options: "k=v,..."
 * of the env's reset options (classic control: low, high; Pendulum-v1: x_init, y_init), for this
 * reset only; NULL or "" for none. SHOAL_EINVAL naming a key the env does not take at reset or a
 * bad value, nothing reset then. */
SHOAL_C_EXPORT int shoal_c_vec_reset_each(shoal_c_vec *v, const uint64_t *seeds,
                                          const uint8_t *reseed, const char *options, void *obs);

/* Copy i's physical state (Gymnasium's env.unwrapped.state) as doubles: get writes up
 * to cap values and returns how many the env has (CartPole 4: x, x_dot, theta,
 * theta_dot; MountainCar 2: position, velocity; Acrobot 4: theta1, theta2, dtheta1,
 * dtheta2; Pendulum 2: theta, theta_dot); set takes exactly that many finite values and
 * the copy's next step starts from them. SHOAL_ENOTSUP for envs without one (MinAtar),
 * SHOAL_ERANGE for a bad i, SHOAL_ESHAPE for a wrong count, SHOAL_ESTATE (set) before a
 * reset. */
SHOAL_C_EXPORT int shoal_c_vec_get_state(const shoal_c_vec *v, int i, double *out, int cap);
SHOAL_C_EXPORT int shoal_c_vec_set_state(shoal_c_vec *v, int i, const double *in, int n);

/* Moves up to cap finished episodes (oldest first) into the arrays (any may be NULL)
 * and returns how many. */
SHOAL_C_EXPORT int shoal_c_vec_episodes(shoal_c_vec *v, int32_t *index, int32_t *length,
                                        double *ret, uint8_t *truncated, int cap);
SHOAL_C_EXPORT int shoal_c_vec_stats(const shoal_c_vec *v, shoal_c_stats *out);
/* Draws copy i as (render_h, render_w, 3) RGB into rgb. */
SHOAL_C_EXPORT int shoal_c_vec_render(const shoal_c_vec *v, int i, uint8_t *rgb);

/* ---- Trained policies ------------------------------------------------------------ */

typedef struct shoal_c_policy shoal_c_policy;

/* The algorithm that trained a policy (the run config's `algo:`). */
enum { SHOAL_C_DQN = 0, SHOAL_C_IMPALA = 1, SHOAL_C_PPO = 2 };

typedef struct shoal_c_policy_info {
  const char *env_id;  /* owned by the policy */
  shoal_c_space obs;   /* the env's observation space */
  int32_t num_actions; /* A (0 for a Box) */
  int32_t net;         /* DQN: 0 MLP, 1 MinAtar conv (algos.h dqn_net); -1 actor-critic */
  int64_t version, env_steps, updates;
  double score;       /* the snapshot's evaluation score; NaN if none (or loaded from a file) */
  int32_t algo;       /* SHOAL_C_DQN, SHOAL_C_IMPALA or SHOAL_C_PPO */
  int32_t act_dim;    /* D of a Box action space; 0 for discrete */
  shoal_c_space act;  /* the env's action space */
  int32_t norm_obs;   /* 1: observations pass the run's normaliser (in the snapshot) */
  int32_t state_size; /* floats of recurrent state per env: 2 x the LSTM core's size
                         ((h, c)), 0 for a network without one */
} shoal_c_policy_info;

/* 1 when target names a store by a URI with a scheme (file:..., mongodb://...; read as
 * the store reads it), 0 otherwise: a plain path, which may be a store's folder or a
 * file, or something that is no store URI. Can't fail. */
SHOAL_C_EXPORT int shoal_c_is_store_uri(const char *target);

/* Loads snapshot `which` (a version, SHOAL_C_LATEST or SHOAL_C_BEST) of run from the
 * store at uri, and builds the network from the run's resolved config as `shoal eval`
 * and the actor do: Ape-X DQN's Q-network, or for an IMPALA/PPO run (a config with
 * `algo:`) the actor-critic with the snapshot's observation normaliser. A learner's
 * optimizer state in the snapshot is skipped. Caller owns *out (shoal_c_policy_destroy).
 * SHOAL_ENOTSUP for an on-policy run when libshoal was built without learner/. */
SHOAL_C_EXPORT int shoal_c_policy_load_store(shoal_c_policy **out, const char *uri, const char *run,
                                             int64_t which);
/* Loads a safetensors snapshot file; config_path is the run's YAML config (NULL: the
 * file store's layout, <run>/config.yaml beside <run>/snapshots/<v>.safetensors). */
SHOAL_C_EXPORT int shoal_c_policy_load_file(shoal_c_policy **out, const char *snapshot_path,
                                            const char *config_path);
SHOAL_C_EXPORT void shoal_c_policy_destroy(shoal_c_policy *p); /* NULL is fine */
SHOAL_C_EXPORT int shoal_c_policy_info_get(const shoal_c_policy *p, shoal_c_policy_info *out);

/* Greedy actions (argmax Q, lowest index on ties: the actor's ε = 0 choice) of B
 * observations (B x obs.size, dtype SHOAL_C_FLOAT32 or SHOAL_C_UINT8) into actions (B),
 * and, when q is not NULL, the Q-values into q (B x A). Any B >= 1 (large batches run
 * in chunks). SHOAL_ENAN for a NaN or infinite observation (naming the row), nothing
 * written then. */
SHOAL_C_EXPORT int shoal_c_policy_act(shoal_c_policy *p, const void *obs, int obs_dtype, int B,
                                      int32_t *actions, float *q);
/* For an actor-critic (IMPALA/PPO) policy act also takes discrete actions: the mode of
 * the policy; q must be NULL, and a Box policy needs shoal_c_policy_sample. */

/* IMPALA/PPO policies, as shoal-onpolicy-actor acts: observations (B x obs.size,
 * SHOAL_C_FLOAT32 or SHOAL_C_UINT8) are normalised with the run's statistics, then
 * actions are sampled from the policy (greedy != 0: its mode, argmax of the logits or
 * the Gaussian mean) with the policy's RNG (shoal_c_policy_seed). actions: B int32 for
 * discrete, else B x act_dim floats clipped to the Box (what the env steps with); raw
 * (B x act_dim, may be NULL): the Box sample before clipping; logp (B, may be NULL):
 * log pi(a | o) of the (unclipped) action. Any B >= 1. SHOAL_ENAN for a non-finite
 * observation (nothing written), SHOAL_ENOTSUP for a DQN policy. */
SHOAL_C_EXPORT int shoal_c_policy_sample(shoal_c_policy *p, const void *obs, int obs_dtype, int B,
                                         int greedy, void *actions, float *raw, float *logp);
/* As shoal_c_policy_sample for a policy with an LSTM core (info.state_size S > 0), as
 * shoal-onpolicy-actor and `shoal eval` act with it: state (B x S floats, per env h then
 * c) is each env's core state, read and replaced by the state after this step; first
 * (B bytes, NULL: none) marks observations that begin an episode, whose state is zeroed
 * before the step. SHOAL_ENAN for a non-finite observation or state value (nothing
 * written). A policy without a core: SHOAL_ESTATE (and shoal_c_policy_sample / _act
 * are SHOAL_ESTATE for one with). */
SHOAL_C_EXPORT int shoal_c_policy_sample_recurrent(shoal_c_policy *p, const void *obs,
                                                   int obs_dtype, int B, float *state,
                                                   const uint8_t *first, int greedy, void *actions,
                                                   float *raw, float *logp);
/* Reseeds the policy's sampling RNG (xoshiro256** through splitmix64, as shoal_rng).
 * A new policy starts from seed 0. */
SHOAL_C_EXPORT int shoal_c_policy_seed(shoal_c_policy *p, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
