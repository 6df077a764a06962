/* SPDX-License-Identifier: Apache-2.0 */
/* The keys of an Ape-X run's config: one schema shared by `shoal run` (which checks
 * the file and stores the resolved config), the learner and the actors (which read the
 * resolved file). */
#include <stdio.h>
#include <string.h>

#include "nn/nn.h"
#include "run/run.h"

static const cfg_key apex_keys[] = {
    {"algo", CFG_STRING, "apex", 0, -1, "apex (IMPALA and PPO configs say impala or ppo)"},
    /* run */
    {"run.name", CFG_STRING, "", 0, -1, "run id; empty: <config name>-<time>"},
    {"run.seed", CFG_INT, "1", 0, 1e15, "seed of networks, envs and exploration"},
    {"run.max_env_steps", CFG_INT, "0", 0, 1e15,
     "stop once the run has taken this many env steps, counted across resumes (0: no limit)"},
    {"run.max_seconds", CFG_FLOAT, "0", 0, 1e9,
     "stop once the run has trained this long, counted across resumes (0: no limit)"},
    {"run.solve_return", CFG_FLOAT, "0", -1e12, 1e12,
     "stop once the mean greedy evaluation return reaches this (0: never)"},
    {"run.eval_episodes", CFG_INT, "100", 1, 100000, "episodes of each solve check and eval"},
    {"run.eval_every_s", CFG_FLOAT, "5", 0.1, 1e6, "seconds between solve checks"},
    {"run.eval_every_steps", CFG_INT, "0", 0, 1e15,
     "env steps between solve checks (0: every run.eval_every_s)"},
    {"store.uri", CFG_STRING, "file://runs", 0, -1, "where runs live: file://DIR or mongodb://"},
    /* environment and actors */
    {"env.id", CFG_STRING, "CartPole-v1", 0, -1,
     "environment: a built-in (shoal envs), gym:ID (Gymnasium) or plugin:PATH.so[:NAME]"},
    {"env.options", CFG_STRING, "", 0, -1,
     "the env's settings, key=value,... or a YAML mapping (gym: envs: gymnasium.make's keyword "
     "arguments), for the actors' and the evaluations' envs",
     true},
    {"env.num_envs", CFG_INT, "16", 1, 4096, "envs per actor, stepped as one vector env"},
    {"actors", CFG_INT, "2", 1, 1024, "actor processes"},
    {"actor.send_steps", CFG_INT, "32", 1, 100000, "vector steps per pushed batch"},
    {"actor.pull_steps", CFG_INT, "400", 1, 1e9, "vector steps between parameter pulls"},
    {"actor.eps", CFG_FLOAT, "0.4", 0, 1, "Ape-X exploration base ε"},
    {"actor.eps_alpha", CFG_FLOAT, "7", 0, 100, "Ape-X ε_i = ε^(1 + α i/(N−1))"},
    {"actor.queue_batches", CFG_INT, "64", 1, 1e6,
     "batches an actor holds when the learner lags (more: older data, and up to this many "
     "batches an actor taken past run.max_env_steps)"},
    /* learner */
    {"learner.listen", CFG_STRING, "127.0.0.1:0", 0, -1, "gRPC address; port 0 picks one"},
    {"learner.device", CFG_STRING, "auto", 0, -1, "cpu, cuda or auto"},
    {"learner.batch", CFG_INT, "64", 1, 65536, "transitions per update"},
    {"learner.warmup", CFG_INT, "1000", 1, 1e12, "transitions held before training starts"},
    {"learner.replay_ratio", CFG_FLOAT, "8", 0.01, 1e6,
     "most transitions sampled per transition inserted (the rate limiter)"},
    {"learner.ratio_tolerance", CFG_FLOAT, "0", 0, 1e15,
     "samples the insert side may run ahead of replay_ratio before inserts wait "
     "(0: 4 batches of every actor)"},
    {"learner.publish_every", CFG_INT, "10", 1, 1e9, "updates between parameter versions"},
    {"learner.snapshot_every_s", CFG_FLOAT, "30", 0.1, 1e9, "seconds between snapshots"},
    {"learner.log_every_s", CFG_FLOAT, "1", 0.05, 3600, "seconds between progress lines"},
    {"learner.threads", CFG_INT, "1", 1, 256, "nn threads of the trainer"},
    {"learner.token", CFG_STRING, "", 0, -1, "shared token actors must present (empty: none)"},
    {"learner.lease_s", CFG_FLOAT, "15", 1, 3600,
     "the run's lease (one learner per run): renewed every third of this; a learner that "
     "stops renewing loses it after this long (MongoDB; on a file store when it exits)"},
    {"learner.insecure", CFG_BOOL, "false", 0, -1,
     "serve beyond loopback without learner.token (refused unless true)"},
    /* replay */
    {"replay.capacity", CFG_INT, "100000", 64, 2e9, "slots of the replay memory"},
    {"replay.prioritized", CFG_BOOL, "true", 0, -1, "proportional prioritized replay"},
    {"replay.alpha", CFG_FLOAT, "0.6", 0, 10, "PER priority exponent"},
    {"replay.beta0", CFG_FLOAT, "0.4", 0, 1, "PER importance exponent at the start"},
    {"replay.beta_steps", CFG_INT, "20000", 1, 1e15, "updates over which β anneals to 1"},
    {"replay.eps", CFG_FLOAT, "1e-6", 1e-12, 1, "PER priority floor"},
    /* the replay log (learner/replay_log.h, docs/replay-log.md) */
    {"replay.log", CFG_BOOL, "true", 0, -1,
     "keep every accepted batch in the store (resume rebuilds the replay from it)"},
    {"replay.keep_log", CFG_BOOL, "false", 0, -1,
     "keep the whole log (default: segments the replay no longer holds are deleted)"},
    {"replay.log_flush_s", CFG_FLOAT, "1", 0.01, 3600,
     "a log segment is written at most this long after its first batch (the crash loss bound)"},
    {"replay.log_segment_mb", CFG_FLOAT, "4", 0.0625, 12, "raw MiB that fill a log segment"},
    {"replay.memory_limit_mb", CFG_FLOAT, "0", 0, 1e9,
     "MiB of replay columns kept in memory; the rest lives in a mapped spill file and is "
     "read back when sampled (0: all in memory)"},
    /* experience from the store (learner/follow.c, store.h's segments) */
    {"replay.source", CFG_STRING, "actors", 0, -1,
     "actors, store (segments only: no actors are started) or mixed"},
    {"replay.store_run", CFG_STRING, "", 0, -1, "run whose segments to follow (empty: this run)"},
    {"replay.store_ratio", CFG_FLOAT, "0.5", 0.01, 0.99,
     "mixed: the fraction of inserted transitions that comes from the store (at most)"},
    {"replay.store_poll_s", CFG_FLOAT, "0.2", 0.001, 3600, "seconds between polls for segments"},
    {"replay.store_streams", CFG_INT, "16", 1, 4096,
     "replay streams for store sources (more sources share them)"},
    {"replay.store_format", CFG_STRING, "experience", 0, -1,
     "what to follow: experience (segments: imports, other systems) or log (another "
     "Ape-X learner's replay log; docs/replay-log.md)"},
    /* the network (the model section; dqn.net and dqn.hidden* name its presets) */
    RUN_MODEL_KEYS,
    /* the DQN */
    {"dqn.net", CFG_STRING, "mlp", 0, -1,
     "mlp, minatar, or the Atari image nets nature and impala (docs/atari.md)"},
    {"dqn.hidden0", CFG_INT, "64", 0, 65536, "first hidden width (mlp)"},
    {"dqn.hidden1", CFG_INT, "64", 0, 65536, "second hidden width (mlp; 0: none)"},
    {"dqn.dueling", CFG_BOOL, "true", 0, -1, "dueling heads"},
    {"dqn.double", CFG_BOOL, "true", 0, -1, "double Q-learning targets"},
    {"dqn.n_step", CFG_INT, "3", 1, 1000, "n of the n-step return"},
    {"dqn.gamma", CFG_FLOAT, "0.99", 0, 1, "discount"},
    {"dqn.lr", CFG_FLOAT, "1e-3", 1e-9, 10, "Adam learning rate"},
    {"dqn.adam_eps", CFG_FLOAT, "1e-8", 1e-12, 1, "Adam ε"},
    {"dqn.clip_norm", CFG_FLOAT, "10", 0, 1e9, "global gradient-norm clip (0: none)"},
    {"dqn.huber_delta", CFG_FLOAT, "1", 1e-6, 1e6, "Huber threshold"},
    {"dqn.target_period", CFG_INT, "500", 1, 1e9, "updates between target syncs"},
    {"dqn.layer", CFG_STRING, "dense", 0, -1,
     "the kind of every dense layer (hidden and heads): dense, or a custom layer registered "
     "by a plugin, such as noisy_linear (docs/custom-layers.md)"},
    RUN_KEY_NN_PLUGINS,
};

int apex_env_check(const env_spec *sp, shoal_error *err) {
  if (sp->act.n > 0) return 0;
  return shoal_error_set(err, SHOAL_EINVAL,
                         "env %s has a Box action space: Ape-X DQN needs discrete actions; use "
                         "algo: ppo (or an env with discrete actions)",
                         sp->id);
}

const cfg_key *apex_schema(int *n) {
  *n = (int)(sizeof apex_keys / sizeof *apex_keys);
  return apex_keys;
}

int run_check_layer(const config *cfg, const char *key, shoal_error *err) {
  shoal_error why = {0};
  if (nn_layer_plugins_load(config_string(cfg, "nn.plugins"), &why))
    return shoal_error_set(err, why.code, "nn.plugins: %s", why.msg);
  const char *kind = config_string(cfg, key);
  const nn_layer_type *t;
  int rc = nn_layer_dense_kind(kind, NULL, &t, &why);
  if (rc == SHOAL_ENOENT) {
    /* an env plugin may register it when the env is made (envs/plugin.c): the actors and
     * the learner check then */
    if (!strncmp(config_string(cfg, "env.id"), "plugin:", 7)) return 0;
    char kinds[512];
    nn_layer_kinds(kinds, sizeof kinds);
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: '%s' is neither dense nor a registered custom layer "
                           "(registered: %s); load its plugin with nn.plugins",
                           key, kind, kinds[0] ? kinds : "none");
  }
  return rc ? shoal_error_set(err, rc, "%s: %s", key, why.msg) : 0;
}

int apex_check(const config *cfg, shoal_error *err) {
  static const char *const nets[] = {"mlp", "minatar", "nature", "impala"};
  static const char *const devices[] = {"auto", "cpu", "cuda"};
  int rc = config_check_choice(cfg, "dqn.net", nets, 4, err);
  if (!rc) rc = config_check_choice(cfg, "learner.device", devices, 3, err);
  static const char *const sources[] = {"actors", "store", "mixed"};
  if (!rc) rc = config_check_choice(cfg, "replay.source", sources, 3, err);
  static const char *const apex_algo[] = {"apex"};
  if (!rc) rc = config_check_choice(cfg, "algo", apex_algo, 1, err);
  static const char *const formats[] = {"experience", "log"};
  if (!rc) rc = config_check_choice(cfg, "replay.store_format", formats, 2, err);
  if (!rc) rc = run_check_layer(cfg, "dqn.layer", err);
  if (!rc) {
    algos_model md;
    const int hidden[2] = {(int)config_int(cfg, "dqn.hidden0"),
                           (int)config_int(cfg, "dqn.hidden1")};
    rc = run_model_from_config(cfg, "dqn.net", hidden, false, &md, err);
  }
  return rc;
}

dqn_config apex_dqn_config(const config *cfg, int obs_ndim, const int *obs_shape, int num_actions) {
  dqn_config dc = dqn_defaults();
  dc.obs_c = obs_ndim >= 1 ? obs_shape[0] : 1;
  dc.obs_h = obs_ndim >= 2 ? obs_shape[1] : 1;
  dc.obs_w = obs_ndim >= 3 ? obs_shape[2] : 1;
  dc.num_actions = num_actions;
  /* the preset's name (the model section's, else dqn.net's), for what reports it */
  const char *net = config_string(cfg, "model.preset");
  if (!net[0]) net = config_string(cfg, "dqn.net");
  dc.net = DQN_NET_MLP;
  for (dqn_net n = DQN_NET_MLP; n <= DQN_NET_IMPALA; n++)
    if (!strcmp(net, dqn_net_name(n))) dc.net = n;
  dc.hidden[0] = (int)config_int(cfg, "dqn.hidden0");
  dc.hidden[1] = (int)config_int(cfg, "dqn.hidden1");
  /* apex_check read the model section already: it cannot fail here */
  dc.model_set = run_model_from_config(cfg, "dqn.net", dc.hidden, false, &dc.model, NULL) == 0;
  dc.dueling = config_bool(cfg, "dqn.dueling");
  dc.double_q = config_bool(cfg, "dqn.double");
  dc.n_step = (int)config_int(cfg, "dqn.n_step");
  dc.gamma = (float)config_float(cfg, "dqn.gamma");
  dc.lr = (float)config_float(cfg, "dqn.lr");
  dc.adam_eps = (float)config_float(cfg, "dqn.adam_eps");
  dc.clip_norm = (float)config_float(cfg, "dqn.clip_norm");
  dc.huber_delta = (float)config_float(cfg, "dqn.huber_delta");
  dc.target_period = (int)config_int(cfg, "dqn.target_period");
  dc.seed = (uint64_t)config_int(cfg, "run.seed");
  snprintf(dc.layer, sizeof dc.layer, "%s", config_string(cfg, "dqn.layer"));
  snprintf(dc.plugins, sizeof dc.plugins, "%s", config_string(cfg, "nn.plugins"));
  return dc;
}
