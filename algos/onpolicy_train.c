/* The synchronous on-policy training loop (see algos/onpolicy_train.h). */
#include "algos/onpolicy_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "envs/envs.h"

/* Gymnasium's RunningMeanStd: batch moments merged by Chan et al.'s formula, starting
 * from mean 0, var 1, count 1e-4. */
typedef struct rms {
  int n;
  double *mean, *var, count;
} rms;

static int rms_init(rms *r, int n) {
  r->n = n;
  r->mean = calloc((size_t)n, sizeof *r->mean);
  r->var = malloc((size_t)n * sizeof *r->var);
  if (!r->mean || !r->var) return SHOAL_ENOMEM;
  for (int j = 0; j < n; j++) r->var[j] = 1;
  r->count = 1e-4;
  return 0;
}

static void rms_free(rms *r) {
  free(r->mean);
  free(r->var);
}

/* x: (B, n) floats, or a column of B doubles when xd is given. */
static void rms_update(rms *r, const float *x, const double *xd, int B) {
  for (int j = 0; j < r->n; j++) {
    double m = 0, v = 0;
    for (int i = 0; i < B; i++) m += xd ? xd[i] : x[(size_t)i * r->n + j];
    m /= B;
    for (int i = 0; i < B; i++) {
      double d = (xd ? xd[i] : x[(size_t)i * r->n + j]) - m;
      v += d * d;
    }
    v /= B;
    double delta = m - r->mean[j], tot = r->count + B;
    r->mean[j] += delta * B / tot;
    double m2 = r->var[j] * r->count + v * B + delta * delta * r->count * B / tot;
    r->var[j] = m2 / tot;
  }
  r->count += B;
}

static void rms_normalise(const rms *r, float *x, int B) {
  for (int i = 0; i < B; i++)
    for (int j = 0; j < r->n; j++) {
      float *v = x + (size_t)i * r->n + j;
      double z = (*v - r->mean[j]) / sqrt(r->var[j] + 1e-8);
      *v = (float)fmin(fmax(z, -10.0), 10.0);
    }
}

int onpolicy_train_from_config(const config *cfg, onpolicy_train_config *tc, shoal_error *err) {
  int rc = onpolicy_check(cfg, err);
  if (rc) return rc;
  memset(tc, 0, sizeof *tc);
  tc->use_impala = strcmp(config_string(cfg, "algo"), "impala") == 0;
  snprintf(tc->env_id, sizeof tc->env_id, "%s", config_string(cfg, "env.id"));
  snprintf(tc->env_options, sizeof tc->env_options, "%s", config_string(cfg, "env.options"));
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

/* The algorithm behind one interface. */
typedef struct agent {
  ppo *p;
  impala *l;
} agent;

/* state (B, S) and first (B) are the recurrent state and episode starts of a network
 * with an LSTM core (S > 0); ignored without one. */
static int agent_act(agent *a, const float *obs, int B, float *state, const uint8_t *first,
                     shoal_rng *rng, bool greedy, void *act, void *env_act, float *logp,
                     shoal_error *err) {
  if (a->p)
    return ppo_state_size(a->p) > 0
               ? ppo_act_recurrent(a->p, obs, B, state, first, rng, greedy, act, env_act, logp,
                                   NULL, err)
               : ppo_act(a->p, obs, B, rng, greedy, act, env_act, logp, NULL, err);
  int rc = impala_state_size(a->l) > 0
               ? impala_act_recurrent(a->l, obs, B, state, first, rng, greedy, act, logp, err)
               : impala_act(a->l, obs, B, rng, greedy, act, logp, err);
  if (!rc && env_act) memcpy(env_act, act, (size_t)B * sizeof(int32_t));
  return rc;
}

/* Everything a run holds. */
typedef struct run {
  const onpolicy_train_config *tc;
  env_vec *v, *ev;
  const env_spec *sp;
  int B, T, E;
  size_t obs_n, act_n; /* floats per observation, action elements per step */
  bool u8;
  void *raw, *raw_final, *eraw; /* env-dtype observations (B), final ones (B), eval (E) */
  float *cur, *fin, *ecur;      /* float observations */
  float *obs, *final_obs;       /* (T+1, B, obs), (T, B, obs) */
  void *act;                    /* (T, B, act_n) int32 or float */
  void *env_act, *eact, *eenv_act;
  float *logp, *reward, *erew, *elogp;
  uint8_t *term, *trunc, *eterm, *etrunc;
  float *step_rew;
  double *disc_ret, *eret;
  int *edone;
  double *ereturns;
  rms obs_rms, ret_rms;
  shoal_rng rng, erng;
  agent ag;
  /* LSTM core: S floats of (h, c) per env; first: the observation begins an episode */
  int S;
  float *state, *core0, *estate; /* (B, S), (B, S), (E, S) */
  uint8_t *first, *efirst;       /* (B), (E) */
} run;

static void to_float(const run *r, const void *src, float *dst, int B) {
  size_t n = (size_t)B * r->obs_n;
  if (r->u8)
    for (size_t i = 0; i < n; i++) dst[i] = ((const uint8_t *)src)[i];
  else
    memcpy(dst, src, n * sizeof *dst);
}

/* eval_episodes episodes split evenly over E copies (a copy stops counting at its
 * quota, so short episodes are not over-represented). */
static int evaluate(run *r, double *mean, double *sd, shoal_error *err) {
  const onpolicy_train_config *tc = r->tc;
  int E = r->E, total = tc->eval_episodes;
  env_vec_reset(r->ev, tc->seed * 7919 + 1000003, r->eraw);
  int got = 0;
  for (int i = 0; i < E; i++) {
    r->edone[i] = 0;
    r->eret[i] = 0;
  }
  env_vec_out out = {r->eraw, r->erew, r->eterm, r->etrunc, NULL};
  if (r->S) memset(r->efirst, 1, (size_t)E);
  while (got < total) {
    to_float(r, r->eraw, r->ecur, E);
    if (tc->norm_obs) rms_normalise(&r->obs_rms, r->ecur, E);
    int rc = agent_act(&r->ag, r->ecur, E, r->estate, r->efirst, &r->erng, tc->eval_greedy, r->eact,
                       r->eenv_act, r->elogp, err);
    if (!rc) rc = env_vec_step(r->ev, r->eenv_act, &out, err);
    if (rc) return rc;
    for (int i = 0; i < E; i++) {
      if (r->S) r->efirst[i] = r->eterm[i] | r->etrunc[i];
      r->eret[i] += r->erew[i];
      if (!r->eterm[i] && !r->etrunc[i]) continue;
      int quota = total / E + (i < total % E);
      if (r->edone[i] < quota) {
        r->ereturns[got++] = r->eret[i];
        r->edone[i]++;
      }
      r->eret[i] = 0;
    }
  }
  double m = 0, v = 0;
  for (int i = 0; i < total; i++) m += r->ereturns[i];
  m /= total;
  for (int i = 0; i < total; i++) v += (r->ereturns[i] - m) * (r->ereturns[i] - m);
  *mean = m;
  *sd = sqrt(v / total);
  return 0;
}

static void run_free(run *r) {
  env_vec_destroy(r->v);
  env_vec_destroy(r->ev);
  ppo_destroy(r->ag.p);
  impala_destroy(r->ag.l);
  void *bufs[] = {r->raw,   r->raw_final, r->eraw,     r->cur,     r->fin,   r->ecur,
                  r->obs,   r->final_obs, r->act,      r->env_act, r->eact,  r->eenv_act,
                  r->logp,  r->reward,    r->erew,     r->elogp,   r->term,  r->trunc,
                  r->eterm, r->etrunc,    r->disc_ret, r->eret,    r->edone, r->ereturns,
                  r->state, r->core0,     r->estate,   r->first,   r->efirst};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
  rms_free(&r->obs_rms);
  rms_free(&r->ret_rms);
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
  r->E = tc->eval_episodes < 16 ? tc->eval_episodes : 16;
  if ((rc = env_vec_create(&r->ev, tc->env_id, r->E, &vc, err))) return rc;
  r->sp = env_vec_spec(r->v);
  const env_space *os = &r->sp->obs, *as = &r->sp->act;
  if (os->dtype != ENV_FLOAT32 && os->dtype != ENV_UINT8)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "train: %s observations are neither float32 nor "
                           "uint8",
                           tc->env_id);
  r->u8 = os->dtype == ENV_UINT8;
  r->obs_n = (size_t)os->size;
  ac_config ac = tc->ac;
  int shape[3] = {1, 1, 1};
  for (int d = 0; d < os->ndim && d < 3; d++) shape[d] = os->shape[d];
  if (os->ndim > 3) return shoal_error_set(err, SHOAL_EINVAL, "train: %d-d observations", os->ndim);
  ac.obs_c = shape[0];
  ac.obs_h = shape[1];
  ac.obs_w = shape[2];
  if (as->n > 0) {
    ac.num_actions = as->n;
    ac.act_dim = 0;
    r->act_n = 1;
  } else {
    if (as->size > AC_MAX_ACT_DIM)
      return shoal_error_set(err, SHOAL_EINVAL, "train: %d action dims > %d", as->size,
                             AC_MAX_ACT_DIM);
    ac.num_actions = 0;
    ac.act_dim = as->size;
    for (int j = 0; j < as->size; j++) {
      ac.act_low[j] = as->low ? as->low[j] : -INFINITY;
      ac.act_high[j] = as->high ? as->high[j] : INFINITY;
    }
    r->act_n = (size_t)as->size;
  }
  if (ac.max_batch < B) ac.max_batch = B;
  if (ac.max_batch < r->E) ac.max_batch = r->E;
  ac.seed = tc->seed;
  if (tc->use_impala) {
    impala_config ic = tc->impala;
    ic.B = B;
    r->T = ic.T;
    if (!(r->ag.l = impala_create(&ac, &ic, NN_CPU, true, err))) return err ? err->code : -1;
  } else {
    ppo_config pc = tc->ppo;
    pc.B = B;
    pc.seed = tc->seed;
    r->T = pc.T;
    if (!(r->ag.p = ppo_create(&ac, &pc, NN_CPU, true, err))) return err ? err->code : -1;
  }
  r->S = r->ag.l ? impala_state_size(r->ag.l) : ppo_state_size(r->ag.p);
  if (r->S) {
    size_t S = (size_t)r->S;
    r->state = calloc((size_t)B * S, sizeof(float));
    r->core0 = calloc((size_t)B * S, sizeof(float));
    r->estate = calloc((size_t)r->E * S, sizeof(float));
    r->first = malloc((size_t)B);
    r->efirst = malloc((size_t)r->E);
    if (!r->state || !r->core0 || !r->estate || !r->first || !r->efirst)
      return shoal_error_set(err, SHOAL_ENOMEM, "train: out of memory");
  }
  size_t T = (size_t)r->T, ob = env_space_bytes(os), ab = env_space_bytes(as);
  r->raw = malloc((size_t)B * ob);
  r->raw_final = malloc((size_t)B * ob);
  r->eraw = malloc((size_t)r->E * ob);
  r->cur = malloc((size_t)B * r->obs_n * sizeof(float));
  r->fin = malloc((size_t)B * r->obs_n * sizeof(float));
  r->ecur = malloc((size_t)r->E * r->obs_n * sizeof(float));
  r->obs = malloc((T + 1) * B * r->obs_n * sizeof(float));
  r->final_obs = calloc(T * B * r->obs_n, sizeof(float));
  r->act = malloc(T * B * ab);
  r->env_act = malloc((size_t)B * ab);
  r->eact = malloc((size_t)r->E * ab);
  r->eenv_act = malloc((size_t)r->E * ab);
  r->logp = malloc(T * B * sizeof(float));
  r->reward = malloc(T * B * sizeof(float));
  r->erew = malloc((size_t)r->E * sizeof(float));
  r->elogp = malloc((size_t)r->E * sizeof(float));
  r->term = malloc(T * B);
  r->trunc = malloc(T * B);
  r->eterm = malloc((size_t)r->E);
  r->etrunc = malloc((size_t)r->E);
  r->disc_ret = calloc((size_t)B, sizeof(double));
  r->eret = calloc((size_t)r->E, sizeof(double));
  r->edone = calloc((size_t)r->E, sizeof(int));
  r->ereturns = calloc((size_t)tc->eval_episodes, sizeof(double));
  int rms_rc = rms_init(&r->obs_rms, (int)r->obs_n);
  if (!rms_rc) rms_rc = rms_init(&r->ret_rms, 1);
  if (rms_rc || !r->raw || !r->raw_final || !r->eraw || !r->cur || !r->fin || !r->ecur || !r->obs ||
      !r->final_obs || !r->act || !r->env_act || !r->eact || !r->eenv_act || !r->logp ||
      !r->reward || !r->erew || !r->elogp || !r->term || !r->trunc || !r->eterm || !r->etrunc ||
      !r->disc_ret || !r->eret || !r->edone || !r->ereturns)
    return shoal_error_set(err, SHOAL_ENOMEM, "train: out of memory");
  shoal_rng_seed(&r->rng, tc->seed * 2 + 1);
  shoal_rng_seed(&r->erng, tc->seed * 2 + 2);
  return 0;
}

/* Reads the env's observations into cur, updating and applying the normaliser. */
static void observe(run *r) {
  to_float(r, r->raw, r->cur, r->B);
  if (r->tc->norm_obs) {
    rms_update(&r->obs_rms, r->cur, NULL, r->B);
    rms_normalise(&r->obs_rms, r->cur, r->B);
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
  env_vec_reset(r.v, tc->seed, r.raw);
  observe(&r);
  if (r.S) memset(r.first, 1, (size_t)B);
  float gamma = tc->use_impala ? tc->impala.gamma : tc->ppo.gamma;
  env_vec_out out = {r.raw, NULL, NULL, NULL, r.raw_final};
  while (res->env_steps < tc->max_env_steps) {
    if (tc->max_seconds > 0 && shoal_now_s() - t0 > tc->max_seconds) break;
    if (tc->anneal_lr) {
      float lr = lr0 * (1.0f - (float)it / (float)iters);
      if (lr < lr0 * 1e-3f) lr = lr0 * 1e-3f;
      if (r.ag.p)
        ppo_set_lr(r.ag.p, lr);
      else
        impala_set_lr(r.ag.l, lr);
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
      rc = agent_act(&r.ag, r.cur, B, r.state, r.first, &r.rng, false, (char *)r.act + row * ab,
                     r.env_act, r.logp + row, err);
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
        if (r.u8)
          for (size_t j = 0; j < on; j++) f[j] = ((const uint8_t *)r.raw_final)[i * on + j];
        else
          memcpy(f, (const float *)r.raw_final + i * on, on * sizeof *f);
        if (tc->norm_obs) rms_normalise(&r.obs_rms, f, 1);
      }
      if (tc->norm_reward) {
        rms_update(&r.ret_rms, NULL, r.disc_ret, B);
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
    rc =
        r.ag.p ? ppo_learn(r.ag.p, &b, &res->last, err) : impala_learn(r.ag.l, &b, &res->last, err);
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
