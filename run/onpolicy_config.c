/* SPDX-License-Identifier: Apache-2.0 */
/* The keys of an IMPALA or PPO run's config, shared by `shoal-train-sync` and, once
 * wired, by `shoal run`, the learner and the actors. */
#include <stdio.h>
#include <string.h>

#include "run/run.h"

/* The value of `algo` in s (after "algo:" or "algo="), unquoted, into out. */
static void algo_value(const char *s, char *out, size_t cap) {
  while (*s == ' ' || *s == '\t') s++;
  char q = (*s == '"' || *s == '\'') ? *s++ : 0;
  size_t n = 0;
  while (*s && *s != '\n' && *s != '\r' && *s != '#' && (q ? *s != q : (*s != ' ' && *s != '\t')) &&
         n + 1 < cap)
    out[n++] = *s++;
  out[n] = 0;
}

/* The last `algo` value of yaml and sets into v; whether there was one. */
static bool algo_of(const char *yaml, const char *const *sets, int nsets, char *v, size_t cap) {
  bool have = false;
  v[0] = 0;
  for (const char *l = yaml; l && *l;) {
    if (!strncmp(l, "algo:", 5)) {
      algo_value(l + 5, v, cap);
      have = true;
    }
    l = strchr(l, '\n');
    if (l) l++;
  }
  for (int i = 0; i < nsets; i++)
    if (!strncmp(sets[i], "algo=", 5)) {
      algo_value(sets[i] + 5, v, cap);
      have = true;
    }
  return have;
}

bool algo_yaml_is_onpolicy(const char *yaml, const char *const *sets, int nsets) {
  char v[32];
  return algo_of(yaml, sets, nsets, v, sizeof v) && strcmp(v, "apex") != 0;
}

bool algo_yaml_known(const char *yaml, const char *const *sets, int nsets, char *name, size_t cap) {
  char v[32];
  bool have = algo_of(yaml, sets, nsets, v, sizeof v);
  if (cap) snprintf(name, cap, "%s", have ? v : "");
  return !have || !strcmp(v, "apex") || !strcmp(v, "impala") || !strcmp(v, "ppo");
}

static const cfg_key onpolicy_keys[] = {
    {"algo", CFG_STRING, "ppo", 0, -1, "impala or ppo"},
    /* run */
    {"run.name", CFG_STRING, "", 0, -1, "run id; empty: <config name>-<time>"},
    {"run.seed", CFG_INT, "1", 0, 1e15, "seed of networks, envs and sampling"},
    {"run.max_env_steps", CFG_INT, "500000", 0, 1e15,
     "stop once the run has taken this many env steps, counted across resumes (0: no limit)"},
    {"run.max_seconds", CFG_FLOAT, "0", 0, 1e9,
     "stop once the run has trained this long, counted across resumes (0: no limit)"},
    {"run.solve_return", CFG_FLOAT, "0", -1e12, 1e12,
     "stop once the mean evaluation return reaches this (0: never)"},
    {"run.eval_episodes", CFG_INT, "100", 1, 100000, "episodes of each solve check and eval"},
    {"run.eval_every_steps", CFG_INT, "20000", 1, 1e15, "env steps between solve checks"},
    {"run.eval_greedy", CFG_BOOL, "true", 0, -1,
     "evaluate the mode of the policy (argmax / Gaussian mean); false: sample it"},
    {"store.uri", CFG_STRING, "file://runs", 0, -1, "where runs live: file://DIR or mongodb://"},
    /* environment and actors */
    {"env.id", CFG_STRING, "CartPole-v1", 0, -1,
     "environment: a built-in (shoal envs), gym:ID (Gymnasium) or plugin:PATH.so[:NAME]"},
    {"env.options", CFG_STRING, "", 0, -1,
     "the env's settings, key=value,... or a YAML mapping (gym: envs: gymnasium.make's keyword "
     "arguments)",
     true},
    {"env.num_envs", CFG_INT, "4", 1, 4096, "envs per actor (PPO: B of the rollout)"},
    {"env.norm_obs", CFG_BOOL, "false", 0, -1,
     "normalise observations by running mean and variance, clipped to ±10 (Gymnasium's "
     "NormalizeObservation)"},
    {"env.norm_reward", CFG_BOOL, "false", 0, -1,
     "scale rewards by the running std of the discounted return, clipped to ±10 "
     "(Gymnasium's NormalizeReward)"},
    {"env.bootstrap_truncation", CFG_BOOL, "true", 0, -1,
     "bootstrap truncated episodes from V(final observation); false: CleanRL's ppo.py"},
    {"actors", CFG_INT, "2", 1, 1024, "actor processes (distributed runs)"},
    {"actor.pull_steps", CFG_INT, "1", 1, 1e9, "unrolls between parameter pulls"},
    {"actor.queue_batches", CFG_INT, "1", 1, 1e6,
     "unroll batches an actor holds when the learner lags (more: more policy lag)"},
    {"actor.max_lag", CFG_INT, "-1", -1, 1e6,
     "start an unroll only when the learner has trained all but this many updates' worth of "
     "the unrolls pushed before it (-1: no bound; 0: synchronous, as CleanRL's loop; 1: the "
     "next unroll overlaps the learner's update)"},
    /* learner */
    {"learner.listen", CFG_STRING, "127.0.0.1:0", 0, -1, "gRPC address; port 0 picks one"},
    {"learner.device", CFG_STRING, "auto", 0, -1, "cpu, cuda or auto"},
    {"learner.threads", CFG_INT, "1", 1, 256, "nn threads of the trainer"},
    {"learner.publish_every", CFG_INT, "1", 1, 1e9, "updates between parameter versions"},
    {"learner.snapshot_every_s", CFG_FLOAT, "30", 0.1, 1e9, "seconds between snapshots"},
    {"learner.log_every_s", CFG_FLOAT, "1", 0.05, 3600, "seconds between progress lines"},
    {"learner.token", CFG_STRING, "", 0, -1, "shared token actors must present (empty: none)"},
    {"learner.lease_s", CFG_FLOAT, "15", 1, 3600,
     "the run's lease (one learner per run): renewed every third of this; a learner that "
     "stops renewing loses it after this long (MongoDB; on a file store when it exits)"},
    {"learner.insecure", CFG_BOOL, "false", 0, -1,
     "serve beyond loopback without learner.token (refused unless true)"},
    {"replay.capacity", CFG_INT, "0", 0, 1e9,
     "unrolls the trajectory FIFO holds (distributed runs; 0: one update's batch or one "
     "actor's, the larger)"},
    {"replay.max_staleness", CFG_INT, "-1", -1, 1e12,
     "drop unrolls older than this many policy versions (-1: no bound)"},
    /* network (the model section; ac.torso, ac.hidden* and ac.tanh name its presets) */
    RUN_MODEL_KEYS,
    {"ac.torso", CFG_STRING, "mlp", 0, -1,
     "mlp, minatar, or the Atari image nets nature and impala (docs/atari.md)"},
    {"ac.hidden0", CFG_INT, "64", 0, 65536, "first hidden width (mlp)"},
    {"ac.hidden1", CFG_INT, "64", 0, 65536, "second hidden width (mlp; 0: none)"},
    {"ac.tanh", CFG_BOOL, "true", 0, -1, "tanh activations in the MLP (else ReLU)"},
    {"ac.separate", CFG_BOOL, "true", 0, -1, "separate actor and critic torsos"},
    {"ac.ortho_init", CFG_BOOL, "true", 0, -1, "CleanRL's orthogonal init"},
    {"ac.log_std_init", CFG_FLOAT, "0", -20, 5, "initial log-std of a Gaussian policy"},
    {"ac.lstm", CFG_INT, "0", 0, 65536,
     "LSTM core size between torso and heads (0: none; needs ac.separate false)"},
    {"ac.layer", CFG_STRING, "dense", 0, -1,
     "the kind of the torso's dense layers: dense, or a custom layer registered by a plugin "
     "(docs/custom-layers.md); the heads stay dense"},
    RUN_KEY_NN_PLUGINS,
    /* IMPALA */
    {"impala.unroll", CFG_INT, "20", 1, 100000, "T: steps per unroll"},
    {"impala.batch", CFG_INT, "16", 1, 65536, "B: unrolls per update"},
    {"impala.gamma", CFG_FLOAT, "0.99", 0, 1, "discount"},
    {"impala.rho_bar", CFG_FLOAT, "1", 1e-6, 1e6, "V-trace ρ̄"},
    {"impala.c_bar", CFG_FLOAT, "1", 1e-6, 1e6, "V-trace c̄"},
    {"impala.pg_rho_bar", CFG_FLOAT, "1", 1e-6, 1e6, "ρ̄ of the policy-gradient advantage"},
    {"impala.baseline_coef", CFG_FLOAT, "0.5", 0, 1e6, "weight of the baseline loss"},
    {"impala.entropy_coef", CFG_FLOAT, "0.01", 0, 1e6, "entropy bonus"},
    {"impala.optim", CFG_STRING, "adam", 0, -1, "adam or rmsprop"},
    {"impala.lr", CFG_FLOAT, "1e-3", 1e-9, 10, "learning rate"},
    {"impala.eps", CFG_FLOAT, "1e-8", 1e-12, 1, "Adam / RMSprop ε"},
    {"impala.alpha", CFG_FLOAT, "0.99", 0, 1, "RMSprop smoothing"},
    {"impala.clip_norm", CFG_FLOAT, "40", 0, 1e9, "global gradient-norm clip (0: none)"},
    {"impala.anneal_lr", CFG_BOOL, "false", 0, -1, "anneal lr linearly to 0 over max_env_steps"},
    /* PPO */
    {"ppo.steps", CFG_INT, "128", 1, 1000000, "T: rollout steps per env"},
    {"ppo.minibatches", CFG_INT, "4", 1, 1000000, "minibatches per epoch"},
    {"ppo.epochs", CFG_INT, "4", 1, 10000, "epochs per rollout"},
    {"ppo.gamma", CFG_FLOAT, "0.99", 0, 1, "discount"},
    {"ppo.lambda", CFG_FLOAT, "0.95", 0, 1, "GAE λ"},
    {"ppo.clip", CFG_FLOAT, "0.2", 1e-6, 10, "ε of the clipped ratio"},
    {"ppo.clip_value", CFG_BOOL, "true", 0, -1, "clip the value loss"},
    {"ppo.norm_adv", CFG_BOOL, "true", 0, -1, "normalise advantages per minibatch"},
    {"ppo.entropy_coef", CFG_FLOAT, "0.01", 0, 1e6, "entropy bonus"},
    {"ppo.value_coef", CFG_FLOAT, "0.5", 0, 1e6, "weight of the value loss"},
    {"ppo.lr", CFG_FLOAT, "2.5e-4", 1e-9, 10, "Adam learning rate"},
    {"ppo.adam_eps", CFG_FLOAT, "1e-5", 1e-12, 1, "Adam ε"},
    {"ppo.clip_norm", CFG_FLOAT, "0.5", 0, 1e9, "global gradient-norm clip (0: none)"},
    {"ppo.target_kl", CFG_FLOAT, "0", 0, 1e6, "stop the epochs above this KL (0: never)"},
    {"ppo.anneal_lr", CFG_BOOL, "true", 0, -1, "anneal lr linearly to 0 over max_env_steps"},
};

const cfg_key *onpolicy_schema(int *n) {
  *n = (int)(sizeof onpolicy_keys / sizeof *onpolicy_keys);
  return onpolicy_keys;
}

int64_t onpolicy_learn_batch(const config *cfg) {
  return config_int(cfg,
                    strcmp(config_string(cfg, "algo"), "impala") ? "env.num_envs" : "impala.batch");
}

int onpolicy_check(const config *cfg, shoal_error *err) {
  static const char *const algos[] = {"impala", "ppo"};
  static const char *const torsos[] = {"mlp", "minatar", "nature", "impala"};
  static const char *const optims[] = {"adam", "rmsprop"};
  static const char *const devices[] = {"auto", "cpu", "cuda"};
  int rc = config_check_choice(cfg, "algo", algos, 2, err);
  if (!rc) rc = config_check_choice(cfg, "ac.torso", torsos, 4, err);
  if (!rc) rc = config_check_choice(cfg, "impala.optim", optims, 2, err);
  if (!rc) rc = config_check_choice(cfg, "learner.device", devices, 3, err);
  if (!rc) rc = run_check_layer(cfg, "ac.layer", err);
  if (!rc) {
    algos_model md;
    const int hidden[2] = {(int)config_int(cfg, "ac.hidden0"), (int)config_int(cfg, "ac.hidden1")};
    rc = run_model_from_config(cfg, "ac.torso", hidden, config_bool(cfg, "ac.tanh"), &md, err);
  }
  if (!rc && config_int(cfg, "actor.max_lag") >= 0 &&
      config_int(cfg, "replay.max_staleness") >= 0 &&
      config_int(cfg, "replay.max_staleness") < config_int(cfg, "actor.max_lag"))
    /* Waiting actors count on every unroll making its share of an update. */
    rc = shoal_error_set(err, SHOAL_EINVAL,
                         "config: replay.max_staleness = %lld (from %s) below actor.max_lag = "
                         "%lld: unrolls the actors are allowed to be behind would be dropped",
                         (long long)config_int(cfg, "replay.max_staleness"),
                         config_origin(cfg, "replay.max_staleness"),
                         (long long)config_int(cfg, "actor.max_lag"));
  if (!rc && !strcmp(config_string(cfg, "algo"), "ppo")) {
    int64_t TB = config_int(cfg, "ppo.steps") * config_int(cfg, "env.num_envs");
    int64_t mb = config_int(cfg, "ppo.minibatches");
    if (TB % mb)
      rc = shoal_error_set(err, SHOAL_EINVAL,
                           "config: ppo.steps x env.num_envs = %lld does not divide into "
                           "ppo.minibatches = %lld (from %s)",
                           (long long)TB, (long long)mb, config_origin(cfg, "ppo.minibatches"));
  }
  return rc;
}

ac_config onpolicy_ac_config(const config *cfg, int obs_ndim, const int *obs_shape, int num_actions,
                             int act_dim, const float *low, const float *high) {
  ac_config c = ac_defaults();
  c.obs_c = obs_ndim >= 1 ? obs_shape[0] : 1;
  c.obs_h = obs_ndim >= 2 ? obs_shape[1] : 1;
  c.obs_w = obs_ndim >= 3 ? obs_shape[2] : 1;
  c.num_actions = num_actions;
  c.act_dim = act_dim;
  for (int j = 0; j < act_dim && j < AC_MAX_ACT_DIM; j++) {
    c.act_low[j] = low ? low[j] : -1e30f;
    c.act_high[j] = high ? high[j] : 1e30f;
  }
  /* the preset's name (the model section's, else ac.torso's), for what reports it */
  const char *torso = config_string(cfg, "model.preset");
  if (!torso[0]) torso = config_string(cfg, "ac.torso");
  c.torso = !strcmp(torso, "minatar")  ? AC_TORSO_MINATAR
            : !strcmp(torso, "nature") ? AC_TORSO_NATURE
            : !strcmp(torso, "impala") ? AC_TORSO_IMPALA
                                       : AC_TORSO_MLP;
  c.hidden[0] = (int)config_int(cfg, "ac.hidden0");
  c.hidden[1] = (int)config_int(cfg, "ac.hidden1");
  c.tanh = config_bool(cfg, "ac.tanh");
  /* onpolicy_check read the model section already: it cannot fail here */
  c.model_set = run_model_from_config(cfg, "ac.torso", c.hidden, c.tanh, &c.model, NULL) == 0;
  c.separate = config_bool(cfg, "ac.separate");
  c.ortho_init = config_bool(cfg, "ac.ortho_init");
  c.log_std_init = (float)config_float(cfg, "ac.log_std_init");
  c.lstm = (int)config_int(cfg, "ac.lstm");
  c.seed = (uint64_t)config_int(cfg, "run.seed");
  snprintf(c.layer, sizeof c.layer, "%s", config_string(cfg, "ac.layer"));
  snprintf(c.plugins, sizeof c.plugins, "%s", config_string(cfg, "nn.plugins"));
  return c;
}

impala_config onpolicy_impala_config(const config *cfg) {
  impala_config c = impala_defaults();
  c.T = (int)config_int(cfg, "impala.unroll");
  c.B = (int)config_int(cfg, "impala.batch");
  c.gamma = (float)config_float(cfg, "impala.gamma");
  c.rho_bar = (float)config_float(cfg, "impala.rho_bar");
  c.c_bar = (float)config_float(cfg, "impala.c_bar");
  c.pg_rho_bar = (float)config_float(cfg, "impala.pg_rho_bar");
  c.baseline_coef = (float)config_float(cfg, "impala.baseline_coef");
  c.entropy_coef = (float)config_float(cfg, "impala.entropy_coef");
  c.optim =
      strcmp(config_string(cfg, "impala.optim"), "rmsprop") == 0 ? ONPOLICY_RMSPROP : ONPOLICY_ADAM;
  c.lr = (float)config_float(cfg, "impala.lr");
  c.eps = (float)config_float(cfg, "impala.eps");
  c.alpha = (float)config_float(cfg, "impala.alpha");
  c.clip_norm = (float)config_float(cfg, "impala.clip_norm");
  return c;
}

ppo_config onpolicy_ppo_config(const config *cfg) {
  ppo_config c = ppo_defaults();
  c.T = (int)config_int(cfg, "ppo.steps");
  c.B = (int)config_int(cfg, "env.num_envs");
  c.minibatches = (int)config_int(cfg, "ppo.minibatches");
  c.epochs = (int)config_int(cfg, "ppo.epochs");
  c.gamma = (float)config_float(cfg, "ppo.gamma");
  c.lambda = (float)config_float(cfg, "ppo.lambda");
  c.clip = (float)config_float(cfg, "ppo.clip");
  c.clip_value = config_bool(cfg, "ppo.clip_value");
  c.norm_adv = config_bool(cfg, "ppo.norm_adv");
  c.entropy_coef = (float)config_float(cfg, "ppo.entropy_coef");
  c.value_coef = (float)config_float(cfg, "ppo.value_coef");
  c.lr = (float)config_float(cfg, "ppo.lr");
  c.adam_eps = (float)config_float(cfg, "ppo.adam_eps");
  c.clip_norm = (float)config_float(cfg, "ppo.clip_norm");
  c.target_kl = (float)config_float(cfg, "ppo.target_kl");
  c.seed = (uint64_t)config_int(cfg, "run.seed");
  return c;
}
