/* SPDX-License-Identifier: Apache-2.0 */
/* PPO (Schulman et al. 2017) as CleanRL's ppo.py and ppo_continuous_action.py compute
 * it: GAE(λ), shuffled minibatches over several epochs, the clipped surrogate, an
 * optionally clipped value loss, an entropy bonus and one clipped Adam step per
 * minibatch. See algos/algos.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algos/ac.h"
#include "algos/state.h"

struct ppo {
  ac__net net;
  ppo_config pc;
  bool learner;
  nn_optim *opt;
  shoal_rng rng; /* minibatch shuffling */
  int64_t updates;
  /* learner buffers, sized for T x B at create */
  float *value;                            /* (T+1, B) */
  float *final_v;                          /* (T, B) */
  float *fobs;                             /* (T·B, obs) */
  int *fidx;                               /* (T·B) */
  float *scratch;                          /* (T·B) */
  float *discount;                         /* (T, B) */
  float *adv;                              /* (T, B) */
  float *ret;                              /* (T, B) */
  int *perm;                               /* (T·B) */
  float *mb_obs;                           /* (M, obs) */
  float *mb_act;                           /* (M, D) floats or (M) int32 */
  float *mb_logp, *mb_adv, *mb_ret, *mb_v; /* (M) */
  float *dout;                             /* (M, P + 1) */
};

ppo_config ppo_defaults(void) {
  ppo_config c;
  memset(&c, 0, sizeof c);
  c.T = 128;
  c.B = 4;
  c.minibatches = 4;
  c.epochs = 4;
  c.gamma = 0.99f;
  c.lambda = 0.95f;
  c.clip = 0.2f;
  c.clip_value = true;
  c.norm_adv = true;
  c.entropy_coef = 0.01f;
  c.value_coef = 0.5f;
  c.lr = 2.5e-4f;
  c.adam_eps = 1e-5f;
  c.clip_norm = 0.5f;
  c.target_kl = 0;
  c.seed = 1;
  return c;
}

static int check(const ac_config *ac, const ppo_config *c, shoal_error *err) {
  int rc = ac__check(ac, "ppo", err);
  if (rc) return rc;

  if (c->T < 1 || c->B < 1 || c->minibatches < 1 || c->epochs < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "ppo: T, B, minibatches and epochs must be >= 1");
  if ((c->T * c->B) % c->minibatches)
    return shoal_error_set(err, SHOAL_EINVAL, "ppo: T·B = %d does not divide into %d minibatches",
                           c->T * c->B, c->minibatches);
  /* With a core a minibatch is whole unrolls (the core re-runs over each), as CleanRL's
   * ppo_atari_lstm splits by env. */
  if (ac->lstm > 0 && c->B % c->minibatches)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "ppo: with an LSTM core the %d envs must divide into %d minibatches "
                           "of whole unrolls",
                           c->B, c->minibatches);
  if (!(c->gamma >= 0 && c->gamma <= 1) || !(c->lambda >= 0 && c->lambda <= 1))
    return shoal_error_set(err, SHOAL_EINVAL, "ppo: gamma %g or lambda %g outside [0, 1]", c->gamma,
                           c->lambda);
  if (!(c->clip > 0) || !(c->lr > 0) || !(c->adam_eps > 0) || !(c->entropy_coef >= 0) ||
      !(c->value_coef >= 0) || !(c->clip_norm >= 0) || !(c->target_kl >= 0))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "ppo: clip, lr and adam_eps must be > 0, "
                           "coefficients, clip_norm and target_kl >= 0");
  return 0;
}

ppo *ppo_create(const ac_config *ac, const ppo_config *pc, nn_device device, bool learner,
                shoal_error *err) {
  if (check(ac, pc, err)) return NULL;
  ppo *p = calloc(1, sizeof *p);
  if (!p) {
    shoal_error_set(err, SHOAL_ENOMEM, "ppo: out of memory");
    return NULL;
  }
  p->pc = *pc;
  p->learner = learner;
  shoal_rng_seed(&p->rng, pc->seed);
  size_t TB = (size_t)pc->T * pc->B, M = TB / (size_t)pc->minibatches;
  size_t obs_n = (size_t)ac->obs_c * ac->obs_h * ac->obs_w;
  int max_batch = ac->max_batch;
  bool core = ac->lstm > 0;
  if (learner && !core && (size_t)max_batch < M) max_batch = (int)M;
  if (ac__create(&p->net, ac, device, max_batch, learner && core ? pc->T + 1 : 0, pc->B, err))
    goto fail;
  /* with a core, a minibatch's forward also yields the bootstrap row of its unrolls */
  size_t dout_rows = core ? M + (size_t)(pc->B / pc->minibatches) : M;
  if (learner) {
    size_t od = (size_t)p->net.out_dim, D = ac->act_dim > 0 ? (size_t)ac->act_dim : 1;
    p->value = malloc((TB + pc->B) * sizeof *p->value);
    p->final_v = malloc(TB * sizeof *p->final_v);
    p->fobs = malloc(TB * obs_n * sizeof *p->fobs);
    p->fidx = malloc(TB * sizeof *p->fidx);
    p->scratch = malloc(TB * sizeof *p->scratch);
    p->discount = malloc(TB * sizeof *p->discount);
    p->adv = malloc(TB * sizeof *p->adv);
    p->ret = malloc(TB * sizeof *p->ret);
    p->perm = malloc(TB * sizeof *p->perm);
    p->mb_obs = malloc(M * obs_n * sizeof *p->mb_obs);
    p->mb_act = malloc(M * D * sizeof *p->mb_act);
    p->mb_logp = malloc(M * sizeof *p->mb_logp);
    p->mb_adv = malloc(M * sizeof *p->mb_adv);
    p->mb_ret = malloc(M * sizeof *p->mb_ret);
    p->mb_v = malloc(M * sizeof *p->mb_v);
    p->dout = malloc(dout_rows * od * sizeof *p->dout);
    if (!p->value || !p->final_v || !p->fobs || !p->fidx || !p->scratch || !p->discount ||
        !p->adv || !p->ret || !p->perm || !p->mb_obs || !p->mb_act || !p->mb_logp || !p->mb_adv ||
        !p->mb_ret || !p->mb_v || !p->dout) {
      shoal_error_set(err, SHOAL_ENOMEM, "ppo: out of memory");
      goto fail;
    }
    if (!(p->opt = ac__optim(&p->net, ONPOLICY_ADAM, pc->lr, pc->adam_eps, 0, pc->clip_norm, err)))
      goto fail;
  }
  return p;
fail:
  ppo_destroy(p);
  return NULL;
}

void ppo_destroy(ppo *p) {
  if (!p) return;
  nn_optim_destroy(p->opt);
  ac__destroy(&p->net);
  free(p->value);
  free(p->final_v);
  free(p->fobs);
  free(p->fidx);
  free(p->scratch);
  free(p->discount);
  free(p->adv);
  free(p->ret);
  free(p->perm);
  free(p->mb_obs);
  free(p->mb_act);
  free(p->mb_logp);
  free(p->mb_adv);
  free(p->mb_ret);
  free(p->mb_v);
  free(p->dout);
  free(p);
}

nn_model *ppo_model(ppo *p) { return ac__trained(&p->net); }

int ppo_state_size(const ppo *p) { return p->net.S; }

/* actions clipped to the Box for the env (CleanRL's ClipAction), or copied */
static void env_actions_of(const ppo *p, const void *actions, void *env_actions, int B) {
  const ac_config *c = &p->net.cfg;
  if (c->num_actions > 0) {
    memcpy(env_actions, actions, (size_t)B * sizeof(int32_t));
    return;
  }
  const float *a = actions;
  float *e = env_actions;
  for (int i = 0; i < B; i++)
    for (int j = 0; j < c->act_dim; j++) {
      float x = a[(size_t)i * c->act_dim + j];
      e[(size_t)i * c->act_dim + j] = fminf(fmaxf(x, c->act_low[j]), c->act_high[j]);
    }
}

int ppo_act_recurrent(ppo *p, const float *obs, int B, float *state, const uint8_t *first,
                      shoal_rng *rng, bool greedy, void *actions, void *env_actions, float *logp,
                      float *value, shoal_error *err) {
  if (!p->net.S)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "ppo: the network has no LSTM core: act with ppo_act");
  if (B < 1 || B > nn_model_max_batch(p->net.m))
    return shoal_error_set(err, SHOAL_EINVAL, "ppo: act batch %d outside [1, %d]", B,
                           nn_model_max_batch(p->net.m));
  const float *out;
  int rc = ac__step(&p->net, obs, B, state, first, &out, err);
  if (rc) return rc;
  ac__sample(&p->net, out, B, rng, greedy, actions, logp);
  if (value)
    for (int i = 0; i < B; i++) value[i] = out[(size_t)i * p->net.stride + p->net.P];
  if (env_actions) env_actions_of(p, actions, env_actions, B);
  return 0;
}
const ac_config *ppo_ac_config(const ppo *p) { return &p->net.cfg; }

int ppo_act(ppo *p, const float *obs, int B, shoal_rng *rng, bool greedy, void *actions,
            void *env_actions, float *logp, float *value, shoal_error *err) {
  if (p->net.S)
    return shoal_error_set(err, SHOAL_ESTATE,
                           "ppo: the network has an LSTM core: act with ppo_act_recurrent");
  if (B < 1 || B > nn_model_max_batch(p->net.m))
    return shoal_error_set(err, SHOAL_EINVAL, "ppo: act batch %d outside [1, %d]", B,
                           nn_model_max_batch(p->net.m));
  const float *out;
  int rc = nn_model_forward(p->net.m, obs, B, &out, err);
  if (rc) return rc;
  ac__sample(&p->net, out, B, rng, greedy, actions, logp);
  if (value)
    for (int i = 0; i < B; i++) value[i] = out[(size_t)i * p->net.out_dim + p->net.P];
  if (env_actions) env_actions_of(p, actions, env_actions, B);
  return 0;
}

int ppo_learn(ppo *p, const onpolicy_batch *b, onpolicy_stats *stats, shoal_error *err) {
  if (!p->learner) return shoal_error_set(err, SHOAL_ESTATE, "ppo: learn() on an actor-side ppo");
  int rc = onpolicy__check_batch(&p->net, b, p->pc.T, p->pc.B, "ppo", err);
  if (rc) return rc;
  int T = b->T, B = b->B, TB = T * B;
  if (TB % p->pc.minibatches)
    return shoal_error_set(err, SHOAL_EINVAL, "ppo: T·B = %d does not divide into %d minibatches",
                           TB, p->pc.minibatches);
  int M = TB / p->pc.minibatches;
  size_t obs_n = p->net.obs_n;
  int D = p->net.cfg.act_dim, A = p->net.cfg.num_actions;
  bool core = p->net.S > 0;
  if (core && B != p->pc.B)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "ppo: with an LSTM core the batch has the config's %d envs, not %d",
                           p->pc.B, B);
  /* Values and advantages from the network before this update (the rollout's values
   * when learning synchronously, as CleanRL stores them); with a core, from the core
   * re-run over each unroll from its core0. */
  if (core) {
    if ((rc = ac__seq_forward(&p->net, b, NULL, 0, err))) return rc;
    for (int i = 0; i < TB + B; i++)
      p->value[i] = p->net.tm_out[(size_t)i * p->net.out_dim + p->net.P];
    if ((rc = ac__final_values_core(&p->net, b, p->final_v, err))) return rc;
  } else {
    if ((rc = onpolicy__final_values(&p->net, b, p->fobs, p->fidx, p->scratch, p->final_v, err)))
      return rc;
    if ((rc = ac__values(&p->net, b->obs, TB + B, p->value, err))) return rc;
  }
  for (int i = 0; i < TB; i++) {
    bool end = b->terminated[i] || (!b->final_obs && b->truncated && b->truncated[i]);
    p->discount[i] = end ? 0.0f : p->pc.gamma;
  }
  rc = gae(T, B, p->discount, b->reward, p->value, b->final_obs ? b->truncated : NULL, p->final_v,
           p->pc.lambda, p->adv, p->ret, err);
  if (rc) return rc;
  /* Shuffled minibatches of steps; with a core, of whole unrolls (envs), row t·Bm + k
   * of a minibatch being step t of its k-th unroll, as the core's re-run yields them. */
  int N = core ? B : TB, Bm = B / p->pc.minibatches, per = core ? Bm : M;
  for (int i = 0; i < N; i++) p->perm[i] = i;
  onpolicy_stats st = {0};
  double kl_sum = 0;
  int kl_n = 0;
  for (int epoch = 0; epoch < p->pc.epochs; epoch++) {
    for (int i = N - 1; i > 0; i--) { /* Fisher-Yates */
      int j = (int)shoal_rng_below(&p->rng, (uint64_t)i + 1), t = p->perm[i];
      p->perm[i] = p->perm[j];
      p->perm[j] = t;
    }
    kl_sum = 0;
    kl_n = 0;
    for (int s = 0; s < N; s += per) {
      double mean = 0, var = 0;
      for (int k = 0; k < M; k++) {
        int i = core ? (k / Bm) * B + p->perm[s + k % Bm] : p->perm[s + k];
        if (!core)
          memcpy(p->mb_obs + (size_t)k * obs_n, b->obs + (size_t)i * obs_n, obs_n * sizeof(float));
        if (A > 0)
          ((int32_t *)p->mb_act)[k] = ((const int32_t *)b->action)[i];
        else
          memcpy(p->mb_act + (size_t)k * D, (const float *)b->action + (size_t)i * D,
                 (size_t)D * sizeof(float));
        p->mb_logp[k] = b->logp[i];
        p->mb_adv[k] = p->adv[i];
        p->mb_ret[k] = p->ret[i];
        p->mb_v[k] = p->value[i];
        mean += p->adv[i];
      }
      if (p->pc.norm_adv && M > 1) {
        /* (A − mean) / (std + 1e-8), torch's unbiased std as CleanRL uses it */
        mean /= M;
        for (int k = 0; k < M; k++) var += (p->mb_adv[k] - mean) * (p->mb_adv[k] - mean);
        double sd = sqrt(var / (M - 1));
        for (int k = 0; k < M; k++) p->mb_adv[k] = (float)((p->mb_adv[k] - mean) / (sd + 1e-8));
      }
      const float *out;
      if (core) {
        if ((rc = ac__seq_forward(&p->net, b, p->perm + s, Bm, err))) return rc;
        out = p->net.tm_out;
      } else if ((rc = nn_model_forward(p->net.m, p->mb_obs, M, &out, err))) {
        return rc;
      }
      ppo_loss_in in = {
          M,         A,       D,          p->mb_act,          p->mb_logp,       p->mb_adv,
          p->mb_ret, p->mb_v, p->pc.clip, p->pc.entropy_coef, p->pc.value_coef, p->pc.clip_value};
      ppo_loss(&in, out, p->dout, &st);
      if (!isfinite(st.loss))
        return shoal_error_set(err, SHOAL_ENAN, "ppo: the loss is not finite (epoch %d)", epoch);
      nn_model_zero_grad(ac__trained(&p->net));
      if (core) {
        /* the bootstrap row takes no gradient */
        memset(p->dout + (size_t)M * p->net.out_dim, 0,
               (size_t)Bm * p->net.out_dim * sizeof *p->dout);
        rc = ac__seq_backward(&p->net, p->dout, Bm, err);
      } else {
        rc = nn_model_backward(p->net.m, p->dout, NULL, err);
      }
      if (rc) return rc;
      ac__fix_grads(&p->net);
      if ((rc = nn_optim_step(p->opt, err))) return rc;
      if ((rc = ac__sync(&p->net, err))) return rc;
      p->updates++;
      kl_sum += st.approx_kl;
      kl_n++;
    }
    /* CleanRL's early stop: the last minibatch's approximate KL. */
    if (p->pc.target_kl > 0 && st.approx_kl > p->pc.target_kl) break;
  }
  if (stats) {
    double my = 0, md = 0, vy = 0, vd = 0;
    for (int i = 0; i < TB; i++) {
      my += p->ret[i];
      md += p->ret[i] - p->value[i];
    }
    my /= TB;
    md /= TB;
    for (int i = 0; i < TB; i++) {
      double y = p->ret[i] - my, d = p->ret[i] - p->value[i] - md;
      vy += y * y;
      vd += d * d;
    }
    st.explained_var = vy > 0 ? (float)(1.0 - vd / vy) : NAN;
    st.approx_kl = kl_n ? (float)(kl_sum / kl_n) : 0;
    st.grad_norm = nn_optim_last_grad_norm(p->opt);
    st.mean_rho = 1.0f;
    st.updates = p->updates;
    *stats = st;
  }
  return 0;
}

int ppo_load_params(ppo *p, const float *params, size_t n, shoal_error *err) {
  return ac__load_params(&p->net, params, n, "ppo", err);
}

void ppo_set_lr(ppo *p, float lr) {
  if (p->opt) nn_optim_set_lr(p->opt, lr);
}

int ppo_state_save(const ppo *p, uint8_t **buf, size_t *len, shoal_error *err) {
  return algo__state_save(ALGO__STATE_PPO, p->opt, NULL, p->updates, &p->rng, buf, len, err);
}

int ppo_state_load(ppo *p, const uint8_t *buf, size_t len, shoal_error *err) {
  if (!p->opt) return shoal_error_set(err, SHOAL_ESTATE, "ppo: learner state on an actor");
  return algo__state_load(ALGO__STATE_PPO, p->opt, NULL, &p->updates, &p->rng, buf, len, err);
}
