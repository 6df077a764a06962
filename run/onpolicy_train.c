/* SPDX-License-Identifier: Apache-2.0 */
/* The synchronous on-policy training loop (see run/onpolicy_train.h). */
#include "run/onpolicy_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "envs/envs.h"

int onpolicy_train_from_config(const config *cfg, onpolicy_train_config *tc, shoal_error *err) {
  int rc = onpolicy_check(cfg, err);
  if (rc) return rc;
  memset(tc, 0, sizeof *tc);
  tc->use_impala = strcmp(config_string(cfg, "algo"), "impala") == 0;
  rc = op_spec_env_strings(cfg, tc->env_id, sizeof tc->env_id, tc->env_options,
                           sizeof tc->env_options, err);
  if (rc) return rc;
  tc->num_envs = (int)config_int(cfg, "env.num_envs");
  int one = 1;
  tc->ac = onpolicy_ac_config(cfg, 1, &one, 1, 0, NULL, NULL);
  tc->ppo = onpolicy_ppo_config(cfg);
  tc->impala = onpolicy_impala_config(cfg);
  tc->anneal_lr = config_bool(cfg, tc->use_impala ? "impala.anneal_lr" : "ppo.anneal_lr");
  tc->norm_obs = config_bool(cfg, "env.norm_obs");
  tc->norm_reward = config_bool(cfg, "env.norm_reward");
  tc->bootstrap_truncation = config_bool(cfg, "env.bootstrap_truncation");
  tc->max_env_steps = config_int(cfg, "run.max_env_steps");
  tc->max_seconds = config_float(cfg, "run.max_seconds");
  double solve = config_float(cfg, "run.solve_return");
  tc->solve_return = solve == 0 ? NAN : solve;
  tc->eval_episodes = (int)config_int(cfg, "run.eval_episodes");
  tc->eval_every_steps = config_int(cfg, "run.eval_every_steps");
  tc->eval_greedy = config_bool(cfg, "run.eval_greedy");
  tc->seed = (uint64_t)config_int(cfg, "run.seed");
  tc->report_return = NAN;
  tc->log_every_s = config_float(cfg, "learner.log_every_s");
  return 0;
}

/* Everything a run holds. */
typedef struct run {
  const onpolicy_train_config *tc;
  env_vec *v, *ev;
  const env_spec *sp;
  int B, T, E;
  size_t obs_n, act_n; /* floats per observation, action elements per step */
  bool u8;
  void *raw, *raw_final;  /* env-dtype observations (B), final ones (B) */
  float *cur, *fin;       /* float observations */
  float *obs, *final_obs; /* (T+1, B, obs), (T, B, obs) */
  void *act;              /* (T, B, act_n) int32 or float */
  void *env_act;
  float *logp, *reward;
  uint8_t *term, *trunc;
  double *disc_ret;
  op_spec s;                /* the run's shape, for the agent and the evaluation */
  op_norm obs_rms, ret_rms; /* Gymnasium's NormalizeObservation and NormalizeReward */
  shoal_rng rng;
  op_agent ag;
  op_eval *eval;
  /* LSTM core: S floats of (h, c) per env; first: the observation begins an episode */
  int S;
  float *state, *core0; /* (B, S), (B, S) */
  uint8_t *first;       /* (B) */
} run;

/* eval_episodes episodes split evenly over min(eval_episodes, 16) copies, from the same
 * env seed each time (algos/agent.h's evaluation loop). */
static int evaluate(run *r, double *mean, double *sd, shoal_error *err) {
  const onpolicy_train_config *tc = r->tc;
  return op_eval_run(r->eval, &r->ag, tc->norm_obs ? &r->obs_rms : NULL, tc->eval_greedy,
                     tc->seed * 7919 + 1000003, mean, sd, NULL, NULL, err);
}

static void run_free(run *r) {
  env_vec_destroy(r->v);
  op_eval_destroy(r->eval);
  op_agent_destroy(&r->ag);
  void *bufs[] = {r->raw,      r->raw_final, r->cur,   r->fin,    r->obs,  r->final_obs,
                  r->act,      r->env_act,   r->logp,  r->reward, r->term, r->trunc,
                  r->disc_ret, r->state,     r->core0, r->first};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
  op_norm_free(&r->obs_rms);
  op_norm_free(&r->ret_rms);
}

/* The run's shape: the algorithm and unroll from tc, the spaces from the env. */
static int run_spec(run *r, const onpolicy_train_config *tc, shoal_error *err) {
  op_spec *s = &r->s;
  memset(s, 0, sizeof *s);
  s->impala = tc->use_impala;
  s->T = tc->use_impala ? tc->impala.T : tc->ppo.T;
  s->num_envs = s->learn_B = tc->num_envs;
  snprintf(s->env_id, sizeof s->env_id, "%s", tc->env_id);
  snprintf(s->env_options, sizeof s->env_options, "%s", tc->env_options);
  s->norm_obs = tc->norm_obs;
  s->norm_reward = tc->norm_reward;
  s->bootstrap_truncation = tc->bootstrap_truncation;
  s->gamma = tc->use_impala ? tc->impala.gamma : tc->ppo.gamma;
  s->lstm = tc->ac.lstm;
  return op_spec_set_env(s, r->sp, err);
}

static int run_init(run *r, const onpolicy_train_config *tc, shoal_error *err) {
  memset(r, 0, sizeof *r);
  r->tc = tc;
  int B = r->B = tc->num_envs;
  if (B < 1) return shoal_error_set(err, SHOAL_EINVAL, "train: num_envs %d < 1", B);
  if (tc->eval_episodes < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "train: eval_episodes %d < 1", tc->eval_episodes);
  env_vec_config vc = {0};
  vc.options = tc->env_options[0] ? tc->env_options : NULL;
  int rc = env_vec_create(&r->v, tc->env_id, B, &vc, err);
  if (rc) return rc;
  r->sp = env_vec_spec(r->v);
  if ((rc = run_spec(r, tc, err))) return rc;
  const op_spec *s = &r->s;
  r->u8 = s->obs_u8;
  r->obs_n = s->obs_n;
  r->act_n = s->A > 0 ? 1 : (size_t)s->D;
  const int E = tc->eval_episodes < 16 ? tc->eval_episodes : 16;
  op_agent_config c = {.ac = tc->ac, .impala = tc->impala, .ppo = tc->ppo};
  c.ac.obs_c = s->obs_shape[0];
  c.ac.obs_h = s->obs_shape[1];
  c.ac.obs_w = s->obs_shape[2];
  c.ac.num_actions = s->A;
  c.ac.act_dim = s->D;
  for (int j = 0; j < s->D; j++) c.ac.act_low[j] = s->low[j], c.ac.act_high[j] = s->high[j];
  c.ac.seed = tc->seed;
  c.ppo.seed = tc->seed;
  int max_batch = tc->ac.max_batch > B ? tc->ac.max_batch : B;
  if ((rc = op_agent_create(s, &c, max_batch > E ? max_batch : E, true, NN_CPU, &r->ag, err)))
    return rc;
  r->T = s->T;
  if (!(r->eval = op_eval_create(s, tc->eval_episodes, err))) return err ? err->code : -1;
  r->S = r->ag.S;
  if (r->S) {
    size_t S = (size_t)r->S;
    r->state = calloc((size_t)B * S, sizeof(float));
    r->core0 = calloc((size_t)B * S, sizeof(float));
    r->first = malloc((size_t)B);
    if (!r->state || !r->core0 || !r->first)
      return shoal_error_set(err, SHOAL_ENOMEM, "train: out of memory");
  }
  size_t T = (size_t)r->T, ob = s->obs_bytes, ab = env_space_bytes(&r->sp->act);
  r->raw = malloc((size_t)B * ob);
  r->raw_final = malloc((size_t)B * ob);
  r->cur = malloc((size_t)B * r->obs_n * sizeof(float));
  r->fin = malloc((size_t)B * r->obs_n * sizeof(float));
  r->obs = malloc((T + 1) * B * r->obs_n * sizeof(float));
  r->final_obs = calloc(T * B * r->obs_n, sizeof(float));
  r->act = malloc(T * B * ab);
  r->env_act = malloc((size_t)B * ab);
  r->logp = malloc(T * B * sizeof(float));
  r->reward = malloc(T * B * sizeof(float));
  r->term = malloc(T * B);
  r->trunc = malloc(T * B);
  r->disc_ret = calloc((size_t)B, sizeof(double));
  if ((rc = op_norm_init(&r->obs_rms, (int)r->obs_n, err)) ||
      (rc = op_norm_init(&r->ret_rms, 1, err)))
    return rc;
  if (!r->raw || !r->raw_final || !r->cur || !r->fin || !r->obs || !r->final_obs || !r->act ||
      !r->env_act || !r->logp || !r->reward || !r->term || !r->trunc || !r->disc_ret)
    return shoal_error_set(err, SHOAL_ENOMEM, "train: out of memory");
  shoal_rng_seed(&r->rng, tc->seed * 2 + 1);
  return 0;
}

/* Reads the env's observations into cur, updating and applying the normaliser. */
static void observe(run *r) {
  op_obs_to_float(&r->s, r->raw, r->cur, (size_t)r->B, NULL);
  if (r->tc->norm_obs) {
    op_norm_update(&r->obs_rms, r->cur, (size_t)r->B);
    op_norm_apply(&r->obs_rms, r->cur, (size_t)r->B);
  }
}

int onpolicy_train_sync(const onpolicy_train_config *tc, onpolicy_train_result *res,
                        shoal_error *err) {
  memset(res, 0, sizeof *res);
  res->eval_return = res->eval_std = NAN;
  res->train_return100 = NAN;
  res->report_steps = -1;
  run r;
  double t0 = shoal_now_s(), last_log = t0;
  int rc = run_init(&r, tc, err);
  if (rc) goto done;
  int B = r.B, T = r.T;
  size_t TB = (size_t)T * B, on = r.obs_n;
  size_t ab = env_space_bytes(&r.sp->act);
  float lr0 = tc->use_impala ? tc->impala.lr : tc->ppo.lr;
  int64_t iters = tc->max_env_steps / (int64_t)TB, it = 0, next_eval = tc->eval_every_steps;
  if (iters < 1) iters = 1;
  if ((rc = env_vec_reset(r.v, tc->seed, r.raw, err))) goto done;
  observe(&r);
  if (r.S) memset(r.first, 1, (size_t)B);
  float gamma = tc->use_impala ? tc->impala.gamma : tc->ppo.gamma;
  env_vec_out out = {r.raw, NULL, NULL, NULL, r.raw_final};
  while (res->env_steps < tc->max_env_steps) {
    if (tc->max_seconds > 0 && shoal_now_s() - t0 > tc->max_seconds) break;
    if (tc->anneal_lr) {
      float lr = lr0 * (1.0f - (float)it / (float)iters);
      if (lr < lr0 * 1e-3f) lr = lr0 * 1e-3f;
      op_agent_set_lr(&r.ag, lr);
    }
    if (r.S) /* the state each unroll starts from, as reset for its first observation */
      for (int i = 0; i < B; i++) {
        float *c0 = r.core0 + (size_t)i * r.S;
        if (r.first[i])
          memset(c0, 0, (size_t)r.S * sizeof *c0);
        else
          memcpy(c0, r.state + (size_t)i * r.S, (size_t)r.S * sizeof *c0);
      }
    for (int t = 0; t < T; t++) {
      size_t row = (size_t)t * B;
      memcpy(r.obs + row * on, r.cur, (size_t)B * on * sizeof(float));
      void *act = (char *)r.act + row * ab;
      rc = r.S ? op_agent_act_recurrent(&r.ag, r.cur, B, r.state, r.first, &r.rng, false, act,
                                        r.env_act, r.logp + row, err)
               : op_agent_act(&r.ag, r.cur, B, &r.rng, false, act, r.env_act, r.logp + row, err);
      if (rc) goto done;
      out.reward = r.reward + row;
      out.terminated = r.term + row;
      out.truncated = r.trunc + row;
      if ((rc = env_vec_step(r.v, r.env_act, &out, err))) goto done;
      observe(&r);
      if (r.S)
        for (int i = 0; i < B; i++) r.first[i] = r.term[row + i] | r.trunc[row + i];
      for (int i = 0; i < B; i++) {
        float *rw = &r.reward[row + i];
        if (tc->norm_reward) {
          /* Gymnasium 1.x NormalizeReward: scale by the std of the discounted return. */
          r.disc_ret[i] = r.disc_ret[i] * gamma * (1 - r.term[row + i]) + *rw;
        }
        if (!r.term[row + i] && !r.trunc[row + i]) continue;
        float *f = r.final_obs + (row + i) * on;
        op_obs_to_float(&r.s, (const uint8_t *)r.raw_final + i * r.s.obs_bytes, f, 1,
                        tc->norm_obs ? &r.obs_rms : NULL);
      }
      if (tc->norm_reward) {
        op_norm_update_f64(&r.ret_rms, r.disc_ret, (size_t)B);
        double s = sqrt(r.ret_rms.var[0] + 1e-8);
        for (int i = 0; i < B; i++) {
          double x = r.reward[row + i] / s;
          r.reward[row + i] = (float)fmin(fmax(x, -10.0), 10.0);
        }
        for (int i = 0; i < B; i++)
          if (r.term[row + i] || r.trunc[row + i]) r.disc_ret[i] = 0;
      }
    }
    memcpy(r.obs + TB * on, r.cur, (size_t)B * on * sizeof(float));
    onpolicy_batch b = {T,      B,       r.obs,
                        r.act,  r.logp,  r.reward,
                        r.term, r.trunc, tc->bootstrap_truncation ? r.final_obs : NULL,
                        r.core0};
    rc = op_agent_learn(&r.ag, &b, &res->last, err);
    if (rc) goto done;
    it++;
    res->env_steps += (int64_t)TB;
    res->updates = res->last.updates;
    env_vec_stats vs;
    env_vec_get_stats(r.v, &vs);
    res->train_return100 = vs.mean_return_100;
    if (res->report_steps < 0 && vs.episodes >= 100 && vs.mean_return_100 >= tc->report_return)
      res->report_steps = res->env_steps;
    double now = shoal_now_s();
    if (tc->log && now - last_log >= tc->log_every_s) {
      last_log = now;
      fprintf(tc->log,
              "%8.1fs  steps %lld  return100 %.1f  eval %.1f  loss %.4f  pg %.4f  v %.4f  "
              "ent %.3f  kl %.4f  clip %.3f  ev %.2f\n",
              now - t0, (long long)res->env_steps, vs.mean_return_100, res->eval_return,
              res->last.loss, res->last.pg_loss, res->last.value_loss, res->last.entropy,
              res->last.approx_kl, res->last.clip_frac, res->last.explained_var);
      fflush(tc->log);
    }
    bool last =
        res->env_steps >= tc->max_env_steps || (tc->max_seconds > 0 && now - t0 > tc->max_seconds);
    /* Check for a solve when the training return says it may be there, or on schedule. */
    bool due = res->env_steps >= next_eval ||
               (!isnan(tc->solve_return) && vs.mean_return_100 >= tc->solve_return) || last;
    if (due) {
      while (next_eval <= res->env_steps) next_eval += tc->eval_every_steps;
      if ((rc = evaluate(&r, &res->eval_return, &res->eval_std, err))) goto done;
      res->eval_count++;
      if (tc->log)
        fprintf(tc->log, "%8.1fs  steps %lld  eval %.2f ± %.2f over %d episodes\n",
                shoal_now_s() - t0, (long long)res->env_steps, res->eval_return, res->eval_std,
                tc->eval_episodes);
      if (!isnan(tc->solve_return) && res->eval_return >= tc->solve_return) {
        res->solved = true;
        res->solved_env_steps = res->env_steps;
        res->solved_seconds = shoal_now_s() - t0;
        break;
      }
    }
  }
done:
  res->seconds = shoal_now_s() - t0;
  run_free(&r);
  return rc;
}
