/* SPDX-License-Identifier: Apache-2.0 */
/*
 * run/run.h — what a run is, shared by the programs that start, serve and feed one
 * (the learner and actor runtimes, `shoal`, libshoal): the keys of each algorithm's
 * config with their checks, what each algorithm is built from a resolved config, and
 * the wire columns of each algorithm's SampleBatch. algos/ knows none of config or
 * rpc; this part is where the two meet.
 *
 *   int n;
 *   config *cfg = config_create(onpolicy_schema(&n), n, &err);
 *   config_load_program(cfg, path, NULL, 0, &err);
 *   onpolicy_check(cfg, &err);
 *   op_spec s;
 *   op_spec_from_config(cfg, &s, &err);
 *   op_agent a;
 *   op_agent_from_config(cfg, &s, 16, false, NN_CPU, &a, &err);
 *   rpc_spec wire;
 *   op_rpc_spec(&s, "run-1", &wire);
 */
#ifndef SHOAL_RUN_H
#define SHOAL_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algos/agent.h"
#include "algos/algos.h"
#include "config/config.h"
#include "envs/envs.h"
#include "rpc/rpc.h"
#include "store/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The exit status of a learner or actor that would fail the same way however often it
 * is restarted: a config error, a config a resume cannot apply, an env whose spaces the
 * algorithm cannot take, a snapshot that does not fit the network, a run another learner
 * holds. It has printed why on stderr. Supervisors (`shoal run`, Slurm, Kubernetes)
 * should not restart it: `shoal run` stops the run and fails with that message. Other
 * non-zero statuses (1: an error that may pass, such as a store or network outage) are
 * worth a restart. */
enum { RUN_EXIT_FATAL = 3 };

/* Whether a run that stored config was can resume with config now (one schema): the
 * keys its snapshots and replay depend on (algo, env.id, the network's shape, env.norm_obs,
 * and env.options where they change the env's spaces: both envs are made to tell) must
 * keep their values; everything else (learning rates, replay and optimizer settings,
 * limits) a resumed learner rebuilds from. 0 when it can; SHOAL_EINVAL naming the key,
 * both values and why (or env_make_opts's error for options that make no env). */
int run_resume_check(const config *was, const config *now, shoal_error *err);

/* ---- the model section every algorithm's config has (run/model_config.c) ---- */

/* The `model` keys, in both schemas: model.preset, and the parts of it a config may
 * override (docs/models.md). */
/* clang-format off */
#define RUN_MODEL_KEYS                                                                        \
  {"model.preset", CFG_STRING, "", 0, -1,                                                     \
   "the network: mlp, minatar, nature or impala (docs/models.md); empty: the algorithm's "    \
   "own key (ac.torso, dqn.net)"},                                                            \
  {"model.conv", CFG_STRING, "", 0, -1,                                                       \
   "convolution rows [channels, kernel, stride] or [channels, kernel, stride, padding], in "  \
   "order, each then the activation; empty: the preset's", false, true},                      \
  {"model.stages", CFG_STRING, "", 0, -1,                                                     \
   "IMPALA residual stages after the conv rows, by channels ([16, 32, 32]); empty: the "      \
   "preset's", false, true},                                                                  \
  {"model.dense", CFG_STRING, "", 0, -1,                                                      \
   "dense layer widths after the convolutions ([512]); empty: the preset's", false, true},    \
  {"model.activation", CFG_STRING, "", 0, -1,                                                 \
   "relu or tanh after every layer of the torso; empty: the preset's"},                       \
  {"model.input_scale", CFG_FLOAT, "0", 0, 1e6,                                               \
   "a first layer multiplying the observation (0.00392156862745098 = 1/255: bytes to "        \
   "[0, 1]); 0: the preset's (1/255 for nature and impala, else none)"}
/* clang-format on */

/* The torso the config's model section describes: the preset model.preset names (empty:
 * the one preset_key names, "ac.torso" or "dqn.net"; both given and different is an
 * error), with mlp's widths hidden and activation tanh, then the model keys given
 * overriding its parts. 0, or SHOAL_EINVAL naming the key, where it came from and what
 * is wrong. Shapes are checked when the network is made (algos_model_check). */
int run_model_from_config(const config *cfg, const char *preset_key, const int hidden[2], bool tanh,
                          algos_model *md, shoal_error *err);

/* ==== Ape-X ========================================================================= */

/* The keys of an Ape-X run's config (configs/<name>-apex.yaml): one schema shared by
 * `shoal run`, the learner and the actors. Static; can't fail. */
const cfg_key *apex_schema(int *n);

/* Checks what the schema's types and bounds cannot: the choice keys (dqn.net: mlp or
 * minatar; learner.device: cpu, cuda or auto). SHOAL_EINVAL naming the key and value. */
int apex_check(const config *cfg, shoal_error *err);
/* Loads the config's nn.plugins and checks that key (dqn.layer, ac.layer) names dense or
 * a registered custom layer with dense_config (docs/custom-layers.md), so a run is refused
 * before any process starts. An env plugin may register it later (env.id plugin:...):
 * then an unknown kind passes here and the learner and actors report it. */
int run_check_layer(const config *cfg, const char *key, shoal_error *err);
/* The schema entry both algorithms share: custom layers' plugins (nn/nn.h,
 * docs/custom-layers.md). */
#define RUN_KEY_NN_PLUGINS                                                                 \
  {                                                                                        \
    "nn.plugins", CFG_STRING, "", 0, -1,                                                   \
        "layer plugins to load, ':'-separated paths of shared libraries (relative to the " \
        "working directory)"                                                               \
  }

/* Whether Ape-X can play env spaces sp: discrete actions only. SHOAL_EINVAL naming the
 * env and what to use instead. */
int apex_env_check(const env_spec *sp, shoal_error *err);

/* The DQN of a run: dqn.* keys of an Ape-X config (see apex_schema), for observations of
 * per-sample shape (ndim 1..3: C[, H[, W]]) and num_actions actions; max_batch is left
 * at its default for the caller to set. Can't fail (the schema bounds every value). */
dqn_config apex_dqn_config(const config *cfg, int obs_ndim, const int *obs_shape, int num_actions);

/* The columns of an Ape-X SampleBatch, in the spec's order. Rows are grouped by env:
 * that env's steps in time order, then one "tail" row per step that ended an episode,
 * holding its final observation (other columns of a tail row are ignored). */
enum {
  APEX_OBS,
  APEX_ACTION,
  APEX_REWARD,
  APEX_TERM,
  APEX_TRUNC,
  APEX_PRIO,
  APEX_ENV,
  APEX_TAIL,
  APEX_NCOLS
};

/* The learner's rpc spec of an Ape-X run on env spaces sp, at most max_items rows a
 * batch; run_id and sp are borrowed. Can't fail. */
void apex_rpc_spec(const env_spec *sp, const char *run_id, uint32_t max_items, rpc_spec *out);

/* ==== IMPALA and PPO ================================================================ */

/* ---- configs of on-policy runs (configs/<name>-impala.yaml, -ppo.yaml) ---- */

/* The keys of an IMPALA or PPO run (algo: impala or ppo; the env, run and actor keys
 * as the Ape-X schema names them, plus ac.*, impala.*, ppo.*, train.*). Static. */
const cfg_key *onpolicy_schema(int *n);

/* Which schema a run's config text takes: the value of its top-level `algo:` key (or the
 * last `--set algo=...` of sets, which wins). Returns true for impala and ppo (the
 * on-policy schema), false for apex or no key (the Ape-X schema). Any other value also
 * gives true, so that the on-policy schema's check names the bad value. Can't fail. */
bool algo_yaml_is_onpolicy(const char *yaml, const char *const *sets, int nsets);

/* The `algo` value the same way into name (cap bytes; "" when there is none). Returns
 * true when it is one shoal has (apex, impala, ppo) or there is none. Can't fail. */
bool algo_yaml_known(const char *yaml, const char *const *sets, int nsets, char *name, size_t cap);
/* Checks the choice keys (algo, ac.torso, impala.optim, learner.device). */
int onpolicy_check(const config *cfg, shoal_error *err);
/* The unrolls one update of the run's learner takes: impala.batch, or PPO's
 * env.num_envs (one actor's rollout). */
int64_t onpolicy_learn_batch(const config *cfg);
/* The parts of a resolved config, for observations of shape obs_shape (ndim 1..3) and
 * either num_actions discrete actions or a Box of act_dim with bounds low/high. */
ac_config onpolicy_ac_config(const config *cfg, int obs_ndim, const int *obs_shape, int num_actions,
                             int act_dim, const float *low, const float *high);
impala_config onpolicy_impala_config(const config *cfg);
ppo_config onpolicy_ppo_config(const config *cfg);

/* An unroll batch from an actor has one item per env copy (n = env.num_envs) and the
 * columns, per item:
 *   obs          (T+1, obs...)  env dtype, raw (unnormalised); row T is the bootstrap
 *   action       (T) i32, or (T, D) f32 for a Box (the sampled, unclipped action)
 *   reward       (T) f32, scaled by the actor when env.norm_reward is on
 *   terminated   (T) u8 0/1
 *   truncated    (T) u8 0/1
 *   final_obs    (T, obs...) env dtype: the episode's last observation where the step
 *                ended it (zeros elsewhere; sent LZ4-compressed)
 *   logp         (T) f32: log μ(a_t | o_t) of the behaviour policy
 *   ep_return    (T) f32: the raw return of the episode that ended at the step (0 else)
 *   core0        (2·lstm) f32, only when the run's network has an LSTM core (ac.lstm):
 *                the (h, c) that entered the core at obs row 0, as the actor held it,
 *                zero where row 0 begins an episode (onpolicy_batch.core0)
 * and the batch's policy_version: the one parameter version that acted for all T steps. */
enum { OP_OBS, OP_ACTION, OP_REWARD, OP_TERM, OP_TRUNC, OP_FINAL, OP_LOGP, OP_EPRET, OP_NCOLS };
/* The optional column after the OP_NCOLS fixed ones (runs with an LSTM core). */
enum { OP_CORE0 = OP_NCOLS };

/* Columns of the run's unroll batches: OP_NCOLS, plus core0 with an LSTM core. */
int op_spec_ncols(const op_spec *s);

/* The learner's rpc spec for the run (columns above; core0 only with an LSTM core);
 * run_id borrowed. */
void op_rpc_spec(const op_spec *s, const char *run_id, rpc_spec *out);

/* Reads s from a resolved, checked config (onpolicy_schema + onpolicy_check), making
 * one env to learn its spaces. SHOAL_ENOENT for an unknown env, SHOAL_EINVAL for
 * spaces the actor-critic cannot take (4-d observations, > AC_MAX_ACT_DIM dims). */
int op_spec_from_config(const config *cfg, op_spec *s, shoal_error *err);

/* Copies the config's env.id and env.options into id and options (id_cap, options_cap
 * bytes). SHOAL_EINVAL, naming the key, when one does not fit: cutting it short would
 * name another env (a plugin's path, its env's name) or drop options. */
int op_spec_env_strings(const config *cfg, char *id, size_t id_cap, char *options,
                        size_t options_cap, shoal_error *err);

/* The network and optimizer settings of a resolved config for spec s. Can't fail. */
void op_agent_config_from(const config *cfg, const op_spec *s, op_agent_config *c);

/* op_agent_create with op_agent_config_from's settings; a is filled on success. */
int op_agent_from_config(const config *cfg, const op_spec *s, int max_batch, bool learner,
                         nn_device device, op_agent *a, shoal_error *err);

/* ==== experience segments in the store ============================================ */

/* The limits a segment must meet for env spec (obs dtype and shape, discrete action
 * count or box bounds; the bounds are borrowed from spec). SHOAL_ENOTSUP for an env
 * whose spaces segments cannot hold. */
int run_segment_limits(const env_spec *spec, store_segment_limits *out, shoal_error *err);

#ifdef __cplusplus
}
#endif
#endif
