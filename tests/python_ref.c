/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/python_ref.c — references for tests/test_python_*.py, computed with the part
 * libraries directly (not through libshoal.so), the way the C programs use them:
 *
 *   python_ref traj ENV B SEED T ACTIONS OUT [OPTIONS]
 *       env_vec_create + env_vec_reset(SEED) + T env_vec_step with the actions in the
 *       raw file ACTIONS (T x B actions in the spec's dtype); OUT gets the first
 *       observations, then per step obs, reward, terminated, truncated and the whole
 *       final_obs buffer (zero-filled before the first step), all raw.
 *   python_ref mkrun DIR RUN CONFIG
 *       a run in the file store DIR with CONFIG's text and two snapshots of freshly
 *       initialised networks: version 1 (seed 11, score 10) and 2 (seed 22, score 5).
 *   python_ref act URI RUN latest|best|VERSION OBS B OUT
 *       builds the network as `shoal eval` does (cli/shoal.c cmd_eval), converts B raw
 *       observations from OBS to float as it does and writes dqn_act's greedy actions
 *       (B int32) and Q-values (B x A float) to OUT.
 *   python_ref opmkrun DIR RUN CONFIG
 *       an IMPALA/PPO run (CONFIG has `algo:`) with two learner snapshots (parameters
 *       perturbed from their init, observation statistics, the learner state): version 1
 *       (score 3) and 2 (no score).
 *   python_ref opact URI RUN latest|best|VERSION OBS B GREEDY SEED OUT
 *       builds the actor-critic as shoal-onpolicy-actor and `shoal eval` do, normalises B
 *       raw observations with the snapshot's statistics (op_obs_to_float) and writes
 *       op_agent_act's actions (B int32, or B x D floats clipped to the Box), for a Box
 *       the unclipped samples (B x D), and the log-probabilities (B) to OUT; the RNG is
 *       seeded with SEED.
 *   python_ref opactrec URI RUN latest|best|VERSION OBS FIRST T B GREEDY SEED OUT
 *       as opact for a network with an LSTM core over T steps, as shoal-onpolicy-actor
 *       carries its state: each env's (h, c) starts at zero and passes from step to step
 *       through op_agent_act_recurrent, reset where FIRST (T x B bytes) marks an
 *       episode's start. OBS holds T x B raw observations. OUT gets per step the actions
 *       (B int32, or B x D floats clipped to the Box) and log-probabilities (B), then the
 *       final state (B x 2·lstm floats).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "config/config.h"
#include "envs/envs.h"
#include "nn/nn.h"
#include "store/store.h"
#ifdef PYTHON_REF_ONPOLICY
#include "run/run.h"
#endif

static int die(const char *what, const shoal_error *err) {
  fprintf(stderr, "python_ref: %s: %s\n", what, err ? err->msg : "");
  return 1;
}

static void *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) b[n] = 0, *len = (size_t)n;
  return b;
}

static int traj(int argc, char **argv) {
  if (argc < 6) return die("usage: traj ENV B SEED T ACTIONS OUT [OPTIONS]", NULL);
  const char *id = argv[0];
  int B = atoi(argv[1]), T = atoi(argv[3]);
  uint64_t seed = strtoull(argv[2], NULL, 10);
  shoal_error err = {0};
  env_vec *v;
  env_vec_config cfg = {.options = argc > 6 ? argv[6] : NULL};
  if (env_vec_create(&v, id, B, &cfg, &err)) return die("env", &err);
  const env_spec *sp = env_vec_spec(v);
  size_t ob = env_space_bytes(&sp->obs), ab = env_space_bytes(&sp->act);
  size_t alen;
  uint8_t *acts = read_all(argv[4], &alen);
  if (!acts || alen != (size_t)T * B * ab) return die("actions file has the wrong size", NULL);
  uint8_t *obs = malloc(B * ob), *fin = calloc(B, ob), *term = malloc(B), *trunc = malloc(B);
  float *rew = malloc(B * sizeof(float));
  FILE *out = fopen(argv[5], "wb");
  if (!out) return die("cannot write OUT", NULL);
  env_vec_reset(v, seed, obs, NULL);
  fwrite(obs, ob, B, out);
  env_vec_out o = {obs, rew, term, trunc, fin};
  for (int t = 0; t < T; t++) {
    if (env_vec_step(v, acts + (size_t)t * B * ab, &o, &err)) return die("step", &err);
    fwrite(obs, ob, B, out);
    fwrite(rew, sizeof(float), B, out);
    fwrite(term, 1, B, out);
    fwrite(trunc, 1, B, out);
    fwrite(fin, ob, B, out);
  }
  fclose(out);
  free(acts), free(obs), free(fin), free(term), free(trunc), free(rew);
  env_vec_destroy(v);
  return 0;
}

static int mkrun(int argc, char **argv) {
  if (argc < 3) return die("usage: mkrun DIR RUN CONFIG", NULL);
  shoal_error err = {0};
  size_t ylen;
  char *yaml = read_all(argv[2], &ylen);
  if (!yaml) return die("cannot read CONFIG", NULL);
  int nkeys;
  const cfg_key *keys = apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg || config_load_string(cfg, yaml, argv[2], &err)) return die("config", &err);
  const env_type *t = env_find(config_string(cfg, "env.id"));
  if (!t) return die("unknown env", NULL);
  const env_spec *sp = &t->spec;
  store *st;
  if (store_open(&st, argv[0], &err)) return die("store", &err);
  if (store_run_create(st, argv[1], yaml, STORE_RUN_FINISHED, &err)) return die("run", &err);
  const uint64_t seeds[2] = {11, 22};
  const double scores[2] = {10, 5};
  for (int k = 0; k < 2; k++) {
    dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, sp->act.n);
    dc.seed = seeds[k];
    dqn *q = dqn_create(&dc, NN_CPU, false, &err);
    if (!q) return die("network", &err);
    uint8_t *bytes;
    size_t len;
    if (nn_model_save_buffer(dqn_model(q), &bytes, &len, &err)) return die("save", &err);
    store_snapshot_meta m = {.version = k + 1, .env_steps = 1000 * (k + 1), .score = scores[k]};
    snprintf(m.run, sizeof m.run, "%s", argv[1]);
    if (store_snapshot_put(st, &m, bytes, len, &err)) return die("snapshot", &err);
    free(bytes);
    dqn_destroy(q);
  }
  store_close(st);
  config_destroy(cfg);
  free(yaml);
  return 0;
}

/* cmd_eval's construction, step for step. */
static int act(int argc, char **argv) {
  if (argc < 6) return die("usage: act URI RUN latest|best|V OBS B OUT", NULL);
  const char *uri = argv[0], *run = argv[1], *which = argv[2];
  int B = atoi(argv[4]);
  int64_t version = !strcmp(which, "latest") ? STORE_LATEST
                    : !strcmp(which, "best") ? STORE_BEST
                                             : strtoll(which, NULL, 10);
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return die("store", &err);
  store_run r = {0};
  if (store_run_find(st, run, &r, &err)) return die("run", &err);
  int nkeys;
  const cfg_key *keys = apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg || config_load_string(cfg, r.config ? r.config : "", run, &err))
    return die("config", &err);
  store_run_clear(&r);
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  if (store_snapshot_get(st, run, version, &meta, &bytes, &len, &err)) return die("snap", &err);
  env_vec *ev;
  if (env_vec_create(&ev, config_string(cfg, "env.id"), 1, NULL, &err)) return die("env", &err);
  const env_spec *sp = env_vec_spec(ev);
  dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, sp->act.n);
  dc.max_batch = B;
  dqn *q = dqn_create(&dc, NN_CPU, false, &err);
  if (!q) return die("network", &err);
  size_t ml, sl;
  const uint8_t *sb;
  if (algo_snapshot_split(bytes, len, &ml, &sb, &sl, &err) ||
      nn_model_load_buffer(dqn_model(q), bytes, ml, &err))
    return die("load", &err);
  free(bytes);
  size_t F = (size_t)sp->obs.size, olen;
  bool u8 = sp->obs.dtype == ENV_UINT8;
  void *obs = read_all(argv[3], &olen);
  if (!obs || olen != (size_t)B * env_space_bytes(&sp->obs)) return die("OBS size", NULL);
  float *obs_f = malloc((size_t)B * F * sizeof(float));
  for (size_t i = 0; i < (size_t)B * F; i++)
    obs_f[i] = u8 ? ((uint8_t *)obs)[i] : ((float *)obs)[i];
  int32_t *a = malloc((size_t)B * sizeof(int32_t));
  shoal_rng rng;
  shoal_rng_seed(&rng, 1);
  const float *qv;
  if (dqn_act(q, obs_f, B, 0.0f, &rng, a, &qv, &err)) return die("act", &err);
  FILE *out = fopen(argv[5], "wb");
  if (!out) return die("cannot write OUT", NULL);
  fwrite(a, sizeof(int32_t), B, out);
  fwrite(qv, sizeof(float), (size_t)B * sp->act.n, out);
  fclose(out);
  free(obs), free(obs_f), free(a);
  dqn_destroy(q);
  env_vec_destroy(ev);
  config_destroy(cfg);
  store_close(st);
  return 0;
}

#ifdef PYTHON_REF_ONPOLICY
static config *op_config(const char *yaml, const char *origin, op_spec *s, shoal_error *err) {
  int nkeys;
  const cfg_key *keys = onpolicy_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, err);
  if (!cfg || config_load_string(cfg, yaml, origin, err) || onpolicy_check(cfg, err) ||
      op_spec_from_config(cfg, s, err)) {
    config_destroy(cfg);
    return NULL;
  }
  return cfg;
}

static int opmkrun(int argc, char **argv) {
  if (argc < 3) return die("usage: opmkrun DIR RUN CONFIG", NULL);
  shoal_error err = {0};
  size_t ylen;
  char *yaml = read_all(argv[2], &ylen);
  if (!yaml) return die("cannot read CONFIG", NULL);
  op_spec s;
  config *cfg = op_config(yaml, argv[2], &s, &err);
  if (!cfg) return die("config", &err);
  store *st;
  if (store_open(&st, argv[0], &err)) return die("store", &err);
  if (store_run_create(st, argv[1], yaml, STORE_RUN_FINISHED, &err)) return die("run", &err);
  for (int k = 0; k < 2; k++) {
    op_agent a;
    if (op_agent_from_config(cfg, &s, 16, true, NN_CPU, &a, &err)) return die("agent", &err);
    shoal_rng rng;
    shoal_rng_seed(&rng, 77 + (uint64_t)k);
    /* Weights away from the init (whose policy head is near uniform), so actions differ
     * between observations. */
    size_t n;
    float *p = nn_model_params(op_agent_model(&a), &n);
    for (size_t i = 0; i < n; i++) p[i] += 0.3f * (float)shoal_rng_normal(&rng);
    op_norm z = {0};
    if (op_norm_init(&z, (int)s.obs_n, &err)) return die("norm", &err);
    if (s.norm_obs) {
      float rows[64 * 16];
      for (int r = 0; r < 64; r++)
        for (size_t j = 0; j < s.obs_n && j < 16; j++)
          rows[r * s.obs_n + j] =
              (float)(0.5 * (double)(j + 1) + (double)(j + 2) * shoal_rng_normal(&rng));
      op_norm_update(&z, rows, 64);
    }
    uint8_t *bytes;
    size_t len;
    if (op_snapshot_encode(&a, &s, &z, &bytes, &len, &err)) return die("snapshot", &err);
    store_snapshot_meta m = {
        .version = k + 1, .env_steps = 2000 * (k + 1), .score = k == 0 ? 3.0 : NAN};
    snprintf(m.run, sizeof m.run, "%s", argv[1]);
    if (store_snapshot_put(st, &m, bytes, len, &err)) return die("put", &err);
    free(bytes);
    op_norm_free(&z);
    op_agent_destroy(&a);
  }
  store_close(st);
  config_destroy(cfg);
  free(yaml);
  return 0;
}

/* The run's on-policy agent from the store as shoal-onpolicy-actor and `shoal eval` build
 * it: its spec, the snapshot WHICH (latest, best or a version) decoded into it for act()
 * batches up to 256, and the normaliser it carries. Exits through die() on error. */
typedef struct opref {
  store *st;
  config *cfg;
  op_spec s;
  op_agent a;
  op_norm z;
} opref;

static int opref_load(opref *o, const char *uri, const char *run, const char *which, int B) {
  int64_t version = !strcmp(which, "latest") ? STORE_LATEST
                    : !strcmp(which, "best") ? STORE_BEST
                                             : strtoll(which, NULL, 10);
  shoal_error err = {0};
  memset(o, 0, sizeof *o);
  if (store_open(&o->st, uri, &err)) return die("store", &err);
  store_run r = {0};
  if (store_run_find(o->st, run, &r, &err)) return die("run", &err);
  o->cfg = op_config(r.config ? r.config : "", run, &o->s, &err);
  if (!o->cfg) return die("config", &err);
  store_run_clear(&r);
  void *bytes;
  size_t len;
  if (store_snapshot_get(o->st, run, version, NULL, &bytes, &len, &err)) return die("snap", &err);
  if (op_agent_from_config(o->cfg, &o->s, B < 256 ? B : 256, false, NN_CPU, &o->a, &err))
    return die("agent", &err);
  if (o->s.norm_obs && op_norm_init(&o->z, (int)o->s.obs_n, &err)) return die("norm", &err);
  if (op_snapshot_decode(&o->a, &o->s, o->s.norm_obs ? &o->z : NULL, bytes, len, &err))
    return die("decode", &err);
  free(bytes);
  return 0;
}

static void opref_free(opref *o) {
  op_norm_free(&o->z);
  op_agent_destroy(&o->a);
  config_destroy(o->cfg);
  store_close(o->st);
}

/* shoal-onpolicy-actor's and `shoal eval`'s construction and acting, step for step. */
static int opact(int argc, char **argv) {
  if (argc < 8) return die("usage: opact URI RUN latest|best|V OBS B GREEDY SEED OUT", NULL);
  const char *uri = argv[0], *run = argv[1], *which = argv[2];
  int B = atoi(argv[4]);
  bool greedy = atoi(argv[5]) != 0;
  uint64_t seed = strtoull(argv[6], NULL, 10);
  opref o;
  if (opref_load(&o, uri, run, which, B)) return 1;
  const op_spec s = o.s;
  shoal_error err = {0};
  size_t olen;
  void *obs = read_all(argv[3], &olen);
  if (!obs || olen != (size_t)B * s.obs_bytes) return die("OBS size", NULL);
  float *obs_f = malloc((size_t)B * s.obs_n * sizeof(float));
  op_obs_to_float(&s, obs, obs_f, (size_t)B, s.norm_obs ? &o.z : NULL);
  size_t D = s.D > 0 ? (size_t)s.D : 1;
  float *raw = malloc((size_t)B * D * sizeof(float)), *clip = malloc((size_t)B * D * sizeof(float));
  float *logp = malloc((size_t)B * sizeof(float));
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  /* Batches of up to 256, as libshoal runs them (another batch size may round the last
   * bits of a BLAS product differently); one RNG across them. */
  for (int lo = 0; lo < B; lo += 256) {
    int n = B - lo < 256 ? B - lo : 256;
    if (op_agent_act(&o.a, obs_f + (size_t)lo * s.obs_n, n, &rng, greedy, raw + (size_t)lo * D,
                     clip + (size_t)lo * D, logp + lo, &err))
      return die("act", &err);
  }
  FILE *out = fopen(argv[7], "wb");
  if (!out) return die("cannot write OUT", NULL);
  if (s.D > 0) {
    fwrite(clip, sizeof(float), (size_t)B * D, out);
    fwrite(raw, sizeof(float), (size_t)B * D, out);
  } else {
    fwrite(raw, sizeof(int32_t), (size_t)B, out);
  }
  fwrite(logp, sizeof(float), (size_t)B, out);
  fclose(out);
  free(obs), free(obs_f), free(raw), free(clip), free(logp);
  opref_free(&o);
  return 0;
}

/* The recurrent actor over T steps: one op_agent_act_recurrent per step, batches of up
 * to 256 as libshoal runs them, the state carried between steps. */
static int opactrec(int argc, char **argv) {
  if (argc < 10)
    return die("usage: opactrec URI RUN latest|best|V OBS FIRST T B GREEDY SEED OUT", NULL);
  const char *uri = argv[0], *run = argv[1], *which = argv[2];
  int T = atoi(argv[5]), B = atoi(argv[6]);
  bool greedy = atoi(argv[7]) != 0;
  uint64_t seed = strtoull(argv[8], NULL, 10);
  opref o;
  if (opref_load(&o, uri, run, which, B)) return 1;
  if (o.a.S <= 0) return die("the run's network has no LSTM core", NULL);
  const op_spec s = o.s;
  shoal_error err = {0};
  size_t olen, flen;
  uint8_t *obs = read_all(argv[3], &olen), *first = read_all(argv[4], &flen);
  if (!obs || olen != (size_t)T * B * s.obs_bytes) return die("OBS size", NULL);
  if (!first || flen != (size_t)T * B) return die("FIRST size", NULL);
  size_t D = s.D > 0 ? (size_t)s.D : 1, S = (size_t)o.a.S;
  float *obs_f = malloc((size_t)B * s.obs_n * sizeof(float));
  float *state = calloc((size_t)B * S, sizeof(float));
  float *raw = malloc((size_t)B * D * sizeof(float)), *clip = malloc((size_t)B * D * sizeof(float));
  float *logp = malloc((size_t)B * sizeof(float));
  FILE *out = fopen(argv[9], "wb");
  if (!out || !obs_f || !state || !raw || !clip || !logp) return die("OUT / memory", NULL);
  shoal_rng rng;
  shoal_rng_seed(&rng, seed);
  for (int t = 0; t < T; t++) {
    op_obs_to_float(&s, obs + (size_t)t * B * s.obs_bytes, obs_f, (size_t)B,
                    s.norm_obs ? &o.z : NULL);
    for (int lo = 0; lo < B; lo += 256) {
      int n = B - lo < 256 ? B - lo : 256;
      if (op_agent_act_recurrent(&o.a, obs_f + (size_t)lo * s.obs_n, n, state + (size_t)lo * S,
                                 first + (size_t)t * B + lo, &rng, greedy, raw + (size_t)lo * D,
                                 clip + (size_t)lo * D, logp + lo, &err))
        return die("act", &err);
    }
    if (s.D > 0)
      fwrite(clip, sizeof(float), (size_t)B * D, out);
    else
      fwrite(raw, sizeof(int32_t), (size_t)B, out);
    fwrite(logp, sizeof(float), (size_t)B, out);
  }
  fwrite(state, sizeof(float), (size_t)B * S, out);
  fclose(out);
  free(obs), free(first), free(obs_f), free(state), free(raw), free(clip), free(logp);
  opref_free(&o);
  return 0;
}
#endif

int main(int argc, char **argv) {
#ifdef PYTHON_REF_ONPOLICY
  if (argc >= 2 && !strcmp(argv[1], "opactrec")) return opactrec(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "opmkrun")) return opmkrun(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "opact")) return opact(argc - 2, argv + 2);
#endif
  if (argc >= 2 && !strcmp(argv[1], "traj")) return traj(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "mkrun")) return mkrun(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "act")) return act(argc - 2, argv + 2);
  fprintf(stderr, "usage: python_ref traj|mkrun|act ...\n");
  return 2;
}
