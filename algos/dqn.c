/* SPDX-License-Identifier: Apache-2.0 */
/* Ape-X DQN: the network, act() and learn(). See algos/algos.h for the maths. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/algos.h"
#include "algos/state.h"

struct dqn {
  dqn_config cfg;
  bool learner;
  bool custom;      /* the dense layers are cfg.layer's custom kind */
  nn_model *online; /* (B, obs) -> (B, A) or, dueling, (B, 1 + A) = [V | A] */
  nn_model *target; /* learner only */
  nn_optim *opt;    /* learner only */
  int out_dim;      /* A or 1 + A */
  int64_t updates;
  /* Buffers sized for max_batch at create, so act() and learn() allocate nothing. */
  float *q;        /* (B, A) Q-values of the last dqn_q / act */
  float *q_next;   /* (B, A) online Q(s', ·) */
  int32_t *a_next; /* (B) argmax_a Q_online(s', a) */
  float *y;        /* (B) targets */
  float *pred;     /* (B) Q(s, a) */
  float *dpred;    /* (B) d loss / d Q(s, a) */
  float *dout;     /* (B, out_dim) d loss / d network output */
  /* On a CUDA model, forward and backward take device memory: batches go up through
   * these buffers (allocated in the model's memory) and outputs come back to h_out.
   * The loss is small (B values), so it is computed on the host either way. */
  bool on_gpu;
  size_t obs_floats;
  float *d_obs, *d_nobs, *d_dout; /* device: (B, obs), (B, obs), (B, out_dim) */
  float *h_out;                   /* host: (B, out_dim) */
};

dqn_config dqn_defaults(void) {
  dqn_config c = {0};
  c.obs_c = 1;
  c.obs_h = 1;
  c.obs_w = 1;
  c.num_actions = 2;
  c.net = DQN_NET_MLP;
  c.hidden[0] = 64;
  c.hidden[1] = 64;
  c.dueling = true;
  c.double_q = true;
  c.n_step = 3;
  c.gamma = 0.99f;
  c.lr = 1e-3f;
  c.adam_eps = 1e-8f; /* torch's default; Ape-X's Atari setting used RMSProp instead */
  c.clip_norm = 10.0f;
  c.huber_delta = 1.0f;
  c.target_period = 500;
  c.max_batch = 256;
  c.seed = 1;
  return c;
}

/* The custom layer the config puts where dense layers go, after loading its plugins;
 * NULL for nn's own dense layers. */
static int resolve_layer(const dqn_config *c, const nn_layer_type **lt, shoal_error *err) {
  shoal_error why = {0};
  int rc = nn_layer_dense_kind(c->layer, c->plugins, lt, &why);
  return rc ? shoal_error_set(err, rc, "dqn: %s", why.msg) : 0;
}

/* A dense layer of width out: nn's own, or the config's custom kind in its place. */
static int dense(nn_model *m, const nn_layer_type *lt, const char *name, int out,
                 shoal_error *err) {
  int rc = nn_dense_as(m, name, out, lt);
  if (rc < 0) shoal_error_set(err, rc, "dqn: %s", nn_model_error(m));
  return rc;
}

/* The torso c describes: its model, or the preset its net names. */
static algos_model dqn__model(const dqn_config *c) {
  if (c->model_set) return c->model;
  algos_model md;
  algos_model_preset(dqn_net_name(c->net), c->hidden, false, &md);
  return md;
}

static int build_net(const dqn_config *c, const nn_layer_type *lt, nn_model *m, int out_dim,
                     shoal_error *err) {
  int rc = nn_input(m, c->obs_c, c->obs_h, c->obs_w);
  if (rc < 0) return rc;
  algos_model md = dqn__model(c);
  if ((rc = algos_model_build(m, &md, "", lt)) < 0) {
    shoal_error_set(err, rc, "dqn: %s", nn_model_error(m));
    return rc;
  }
  if (c->dueling) {
    int trunk = nn_model_current(m);
    int v = dense(m, lt, "value", 1, err);
    if (v < 0) return v;
    if ((rc = nn_model_select(m, trunk)) < 0) return rc;
    int a = dense(m, lt, "advantage", c->num_actions, err);
    if (a < 0) return a;
    if ((rc = nn_concat(m, "heads", v, a)) < 0) return rc;
  } else {
    if ((rc = dense(m, lt, "q", out_dim, err)) < 0) return rc;
  }
  return nn_model_build(m, c->max_batch, c->seed, err);
}

const char *dqn_net_name(dqn_net net) {
  static const char *const names[] = {"mlp", "minatar", "nature", "impala"};
  return net >= DQN_NET_MLP && net <= DQN_NET_IMPALA ? names[net] : "unknown";
}

static int check_config(const dqn_config *c, shoal_error *err) {
  if (c->obs_c < 1 || c->obs_h < 1 || c->obs_w < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: observation shape %dx%dx%d is not positive",
                           c->obs_c, c->obs_h, c->obs_w);
  if (c->num_actions < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: num_actions %d < 1", c->num_actions);
  if (!c->model_set && (c->net < DQN_NET_MLP || c->net > DQN_NET_IMPALA))
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: unknown network %d", (int)c->net);
  algos_model md = dqn__model(c);
  int rc = algos_model_check(&md, c->obs_c, c->obs_h, c->obs_w, "dqn", NULL, err);
  if (rc) return rc;
  if (c->max_batch < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: max_batch %d < 1", c->max_batch);
  if (!(c->gamma >= 0 && c->gamma <= 1))
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: gamma %g outside [0, 1]", c->gamma);
  if (c->target_period < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: target_period %d < 1", c->target_period);
  if (!(c->lr > 0) || !(c->huber_delta > 0))
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: lr and huber_delta must be positive");
  return 0;
}

dqn *dqn_create(const dqn_config *cfg, nn_device device, bool learner, shoal_error *err) {
  if (check_config(cfg, err)) return NULL;
  dqn *d = calloc(1, sizeof *d);
  if (!d) {
    shoal_error_set(err, SHOAL_ENOMEM, "dqn: out of memory");
    return NULL;
  }
  d->cfg = *cfg;
  d->learner = learner;
  d->out_dim = cfg->num_actions + (cfg->dueling ? 1 : 0);
  size_t B = (size_t)cfg->max_batch, A = (size_t)cfg->num_actions;
  d->q = malloc(B * A * sizeof *d->q);
  d->q_next = malloc(B * A * sizeof *d->q_next);
  d->a_next = malloc(B * sizeof *d->a_next);
  d->y = malloc(B * sizeof *d->y);
  d->pred = malloc(B * sizeof *d->pred);
  d->dpred = malloc(B * sizeof *d->dpred);
  d->dout = malloc(B * (size_t)d->out_dim * sizeof *d->dout);
  if (!d->q || !d->q_next || !d->a_next || !d->y || !d->pred || !d->dpred || !d->dout) {
    shoal_error_set(err, SHOAL_ENOMEM, "dqn: out of memory");
    goto fail;
  }
  const nn_layer_type *lt;
  if (resolve_layer(cfg, &lt, err)) goto fail;
  d->custom = lt != NULL;
  if (!(d->online = nn_model_create(device, err))) goto fail;
  if (build_net(cfg, lt, d->online, d->out_dim, err)) goto fail;
  if (learner) {
    if (!(d->target = nn_model_create(device, err))) goto fail;
    if (build_net(cfg, lt, d->target, d->out_dim, err)) goto fail;
    /* its own noise (NoisyNet's independent target noise); its weights are copied */
    nn_model_set_seed(d->target, cfg->seed + 1);
    if (nn_model_copy(d->target, d->online, err)) goto fail;
    nn_optim_config oc = nn_optim_defaults(NN_ADAM);
    oc.lr = cfg->lr;
    oc.eps = cfg->adam_eps;
    oc.clip_norm = cfg->clip_norm;
    if (!(d->opt = nn_optim_create(d->online, &oc, err))) goto fail;
  }
  d->on_gpu = nn_model_device(d->online) != NN_CPU;
  d->obs_floats = (size_t)cfg->obs_c * cfg->obs_h * cfg->obs_w;
  if (d->on_gpu) {
    size_t Bo = B * d->obs_floats, Bd = B * (size_t)d->out_dim;
    if (!(d->d_obs = nn_model_alloc(d->online, Bo, err)) ||
        !(d->d_nobs = nn_model_alloc(d->online, Bo, err)) ||
        !(d->d_dout = nn_model_alloc(d->online, Bd, err)))
      goto fail;
    if (!(d->h_out = malloc(Bd * sizeof *d->h_out))) {
      shoal_error_set(err, SHOAL_ENOMEM, "dqn: out of memory");
      goto fail;
    }
  }
  /* Training mode draws a custom layer's noise (the nets here have no dropout or batch
   * norm, so for nn's own layers it changes nothing): the learner's online and target
   * nets draw, an actor's only after dqn_set_explore, evaluation never. */
  nn_model_set_training(d->online, learner);
  if (d->target) nn_model_set_training(d->target, d->custom);
  return d;
fail:
  dqn_destroy(d);
  return NULL;
}

void dqn_destroy(dqn *d) {
  if (!d) return;
  if (d->online) {
    nn_model_free(d->online, d->d_obs);
    nn_model_free(d->online, d->d_nobs);
    nn_model_free(d->online, d->d_dout);
  }
  free(d->h_out);
  nn_optim_destroy(d->opt);
  nn_model_destroy(d->target);
  nn_model_destroy(d->online);
  free(d->q);
  free(d->q_next);
  free(d->a_next);
  free(d->y);
  free(d->pred);
  free(d->dpred);
  free(d->dout);
  free(d);
}

nn_model *dqn_model(dqn *d) { return d->online; }

void dqn_set_explore(dqn *d, uint64_t seed) {
  if (!d || !d->custom) return;
  nn_model_set_training(d->online, true);
  nn_model_set_seed(d->online, seed);
}
const dqn_config *dqn_get_config(const dqn *d) { return &d->cfg; }

/* Appends to buf[*k..cap) and moves *k; false once it did not fit. */
static bool put(char *buf, size_t cap, size_t *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool put(char *buf, size_t cap, size_t *k, const char *fmt, ...) {
  if (*k >= cap) return false;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *k, cap - *k, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= cap - *k) return false;
  *k += (size_t)w;
  return true;
}

/* Mirrors build_net(): what is written here is what it builds, layer for layer. */
int dqn_describe(const dqn_config *c, bool obs_u8, char **out, shoal_error *err) {
  if (!c || !out || c->obs_c < 1 || c->obs_h < 1 || c->obs_w < 1 || c->num_actions < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn_describe: bad arguments");
  /* At most 8 conv rows, 8 dense layers, stages and a head of a few hundred bytes
   * each: 8 KiB is ample. */
  size_t cap = 8192, k = 0;
  char *b = malloc(cap);
  if (!b) return shoal_error_set(err, SHOAL_ENOMEM, "dqn_describe: out of memory");
  bool ok = put(b, cap, &k, "{\"format\":1,\"algo\":\"apex\",\"input\":{\"shape\":[%d", c->obs_c);
  if (c->obs_h > 1 || c->obs_w > 1) ok = ok && put(b, cap, &k, ",%d,%d", c->obs_h, c->obs_w);
  /* a first layer that scales (bytes by 1/255) is the input's scale */
  algos_model md = dqn__model(c);
  char scale[32] = "1";
  if (md.input_scale == 1.0f / 255.0f)
    snprintf(scale, sizeof scale, "0.00392156862745098");
  else if (md.input_scale != 1.0f)
    snprintf(scale, sizeof scale, "%.9g", (double)md.input_scale);
  ok = ok && put(b, cap, &k, "],\"dtype\":\"%s\",\"scale\":%s},\"layers\":[", obs_u8 ? "u8" : "f32",
                 scale);
  /* a custom layer where the dense layers go is named by its kind */
  const char *dk = c->layer[0] && strcmp(c->layer, "dense") ? c->layer : "dense";
  bool custom = strcmp(dk, "dense") != 0; /* the head says so only then: format 1 as before */
  const char *hl = custom ? "\"layer\":\"" : "", *hk = custom ? dk : "", *hr = custom ? "\"," : "";
  int in = ok ? algos_model_describe(&md, c->obs_c, c->obs_h, c->obs_w, dk, b, cap, &k) : -1;
  ok = in > 0;
  if (ok) k--; /* the last entry's comma */
  if (c->dueling)
    ok = ok && put(b, cap, &k,
                   "],\"head\":{\"kind\":\"dueling\",%s%s%s\"in\":%d,"
                   "\"actions\":%d,\"value\":\"value\",\"advantage\":\"advantage\","
                   "\"q\":\"V + A - mean(A)\"}}",
                   hl, hk, hr, in, c->num_actions);
  else
    ok = ok && put(b, cap, &k,
                   "],\"head\":{\"kind\":\"q\",%s%s%s\"in\":%d,\"actions\":%d,"
                   "\"q\":\"q\"}}",
                   hl, hk, hr, in, c->num_actions);
  if (!ok) {
    free(b);
    return shoal_error_set(err, SHOAL_ENOMEM, "dqn_describe: description over %zu bytes", cap);
  }
  *out = b;
  return 0;
}

/* Network output -> Q. Dueling: Q_k = V + A_k − mean_j A_j (Wang et al. 2016, eq. 9). */
static void heads_to_q(const dqn *d, const float *out, int B, float *q) {
  int A = d->cfg.num_actions;
  for (int i = 0; i < B; i++) {
    const float *o = out + (size_t)i * d->out_dim;
    float *qi = q + (size_t)i * A;
    if (!d->cfg.dueling) {
      memcpy(qi, o, (size_t)A * sizeof *qi);
      continue;
    }
    float mean = 0;
    for (int k = 0; k < A; k++) mean += o[1 + k];
    mean /= (float)A;
    for (int k = 0; k < A; k++) qi[k] = o[0] + o[1 + k] - mean;
  }
}

static int argmax(const float *x, int n) {
  int best = 0;
  for (int k = 1; k < n; k++)
    if (x[k] > x[best]) best = k;
  return best;
}

/* Forward of B host observations through m (the online or target network), using
 * device buffer dbuf on a GPU; *out gets the network output in host memory. */
static int forward(dqn *d, nn_model *m, const float *obs, float *dbuf, int B, const float **out,
                   shoal_error *err) {
  if (B < 1 || B > d->cfg.max_batch)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: batch %d outside [1, %d]", B, d->cfg.max_batch);
  if (!d->on_gpu) return nn_model_forward(m, obs, B, out, err);
  size_t n = (size_t)B * d->obs_floats;
  const float *y;
  int rc = nn_model_to_device(m, dbuf, obs, n, err);
  if (!rc) rc = nn_model_forward(m, dbuf, B, &y, err);
  if (!rc) rc = nn_model_to_host(m, d->h_out, y, (size_t)B * d->out_dim, err);
  if (!rc) *out = d->h_out;
  return rc;
}

static int q_of(dqn *d, nn_model *m, const float *obs, float *dbuf, int B, float *q,
                shoal_error *err) {
  const float *out;
  int rc = forward(d, m, obs, dbuf, B, &out, err);
  if (rc) return rc;
  heads_to_q(d, out, B, q);
  return 0;
}

int dqn_q(dqn *d, const float *obs, int B, const float **q, shoal_error *err) {
  int rc = q_of(d, d->online, obs, d->d_obs, B, d->q, err);
  if (!rc) *q = d->q;
  return rc;
}

int dqn_act(dqn *d, const float *obs, int B, float eps, shoal_rng *rng, int32_t *actions,
            const float **q, shoal_error *err) {
  int rc = q_of(d, d->online, obs, d->d_obs, B, d->q, err);
  if (rc) return rc;
  int A = d->cfg.num_actions;
  for (int i = 0; i < B; i++) {
    if (eps > 0 && shoal_rng_uniformf(rng) < eps)
      actions[i] = (int32_t)shoal_rng_below(rng, (uint64_t)A);
    else
      actions[i] = argmax(d->q + (size_t)i * A, A);
  }
  if (q) *q = d->q;
  return 0;
}

float dqn_actor_epsilon(int i, int n, float eps, float alpha) {
  if (n <= 1) return eps;
  return powf(eps, 1.0f + alpha * (float)i / (float)(n - 1));
}

int dqn_learn(dqn *d, const dqn_batch *b, float *priorities, dqn_stats *stats, shoal_error *err) {
  if (!d->learner) return shoal_error_set(err, SHOAL_ESTATE, "dqn: learn() on an actor-side dqn");
  int B = b->B, A = d->cfg.num_actions;
  if (B < 1 || B > d->cfg.max_batch)
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: batch %d outside [1, %d]", B, d->cfg.max_batch);
  for (int i = 0; i < B; i++) {
    if (b->action[i] < 0 || b->action[i] >= A)
      return shoal_error_set(err, SHOAL_ERANGE, "dqn: batch item %d has action %d, not in [0, %d)",
                             i, (int)b->action[i], A);
    if (!isfinite(b->ret[i]) || !isfinite(b->discount[i]) || (b->weight && !isfinite(b->weight[i])))
      return shoal_error_set(err, SHOAL_ENAN,
                             "dqn: batch item %d has a non-finite return, "
                             "discount or weight",
                             i);
  }
  int rc;
  /* Targets. Double Q: the online net picks a*, the target net values it. */
  if (d->cfg.double_q) {
    if ((rc = q_of(d, d->online, b->next_obs, d->d_nobs, B, d->q_next, err))) return rc;
    for (int i = 0; i < B; i++) d->a_next[i] = argmax(d->q_next + (size_t)i * A, A);
  }
  if ((rc = q_of(d, d->target, b->next_obs, d->d_nobs, B, d->q_next, err))) return rc;
  for (int i = 0; i < B; i++) {
    const float *qn = d->q_next + (size_t)i * A;
    float boot = d->cfg.double_q ? qn[d->a_next[i]] : qn[argmax(qn, A)];
    d->y[i] = b->ret[i] + b->discount[i] * boot;
  }
  /* Prediction: the forward whose activations backward uses comes last. */
  const float *out;
  if ((rc = forward(d, d->online, b->obs, d->d_obs, B, &out, err))) return rc;
  heads_to_q(d, out, B, d->q);
  double qsum = 0;
  for (int i = 0; i < B; i++) {
    d->pred[i] = d->q[(size_t)i * A + b->action[i]];
    qsum += d->pred[i];
  }
  float loss;
  rc = nn_huber_loss(&loss, d->dpred, d->pred, d->y, b->weight, B, 1, d->cfg.huber_delta, err);
  if (rc) return rc;
  /* d loss / d output: only Q(s, a) carries gradient. Dueling: dV = dQ_a and
   * dA_k = [k = a] dQ_a − dQ_a / A, from Q_k = V + A_k − mean(A). */
  memset(d->dout, 0, (size_t)B * d->out_dim * sizeof *d->dout);
  for (int i = 0; i < B; i++) {
    float *g = d->dout + (size_t)i * d->out_dim;
    float dq = d->dpred[i];
    if (d->cfg.dueling) {
      g[0] = dq;
      for (int k = 0; k < A; k++) g[1 + k] = -dq / (float)A;
      g[1 + b->action[i]] += dq;
    } else {
      g[b->action[i]] = dq;
    }
  }
  nn_model_zero_grad(d->online);
  const float *dy = d->dout;
  if (d->on_gpu) {
    if ((rc = nn_model_to_device(d->online, d->d_dout, d->dout, (size_t)B * d->out_dim, err)))
      return rc;
    dy = d->d_dout;
  }
  if ((rc = nn_model_backward(d->online, dy, NULL, err))) return rc;
  if ((rc = nn_optim_step(d->opt, err))) return rc;
  d->updates++;
  if (d->updates % d->cfg.target_period == 0 && (rc = nn_model_copy(d->target, d->online, err)))
    return rc;
  if (priorities)
    for (int i = 0; i < B; i++) priorities[i] = fabsf(d->y[i] - d->pred[i]);
  if (stats) {
    stats->loss = loss;
    stats->grad_norm = nn_optim_last_grad_norm(d->opt);
    stats->q_mean = (float)(qsum / B);
    stats->updates = d->updates;
  }
  return 0;
}

int dqn_sync_target(dqn *d, shoal_error *err) {
  if (!d->target) return shoal_error_set(err, SHOAL_ESTATE, "dqn: no target network on an actor");
  return nn_model_copy(d->target, d->online, err);
}

int dqn_load_params(dqn *d, const float *params, size_t n, shoal_error *err) {
  size_t have;
  float *p = nn_model_params(d->online, &have);
  if (!p)
    return shoal_error_set(err, SHOAL_ECUDA, "dqn: the network's parameters are not readable");
  if (n != have)
    return shoal_error_set(err, SHOAL_ESHAPE, "dqn: %zu parameters received, the network has %zu",
                           n, have);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(params[i]))
      return shoal_error_set(err, SHOAL_ENAN, "dqn: parameter %zu is not finite", i);
  memcpy(p, params, n * sizeof *p);
  return nn_model_params_changed(d->online, err); /* uploads them on a GPU */
}

int dqn_set_lr(dqn *d, float lr, shoal_error *err) {
  if (!d->opt) return shoal_error_set(err, SHOAL_ESTATE, "dqn: set_lr on an actor-side dqn");
  if (!(lr > 0) || !isfinite(lr))
    return shoal_error_set(err, SHOAL_EINVAL, "dqn: learning rate %g is not positive", lr);
  nn_optim_set_lr(d->opt, lr);
  d->cfg.lr = lr;
  return 0;
}

int dqn_set_target_period(dqn *d, int period, shoal_error *err) {
  if (!d->target) return shoal_error_set(err, SHOAL_ESTATE, "dqn: target period on an actor");
  if (period < 1) return shoal_error_set(err, SHOAL_EINVAL, "dqn: target_period %d < 1", period);
  d->cfg.target_period = period;
  return 0;
}

float dqn_lr(const dqn *d) { return d->opt ? nn_optim_lr(d->opt) : d->cfg.lr; }

int dqn_state_save(const dqn *d, uint8_t **buf, size_t *len, shoal_error *err) {
  return algo__state_save(ALGO__STATE_DQN, d->opt, d->target, d->updates, NULL, buf, len, err);
}

int dqn_state_load(dqn *d, const uint8_t *buf, size_t len, shoal_error *err) {
  if (!d->opt) return shoal_error_set(err, SHOAL_ESTATE, "dqn: learner state on an actor");
  return algo__state_load(ALGO__STATE_DQN, d->opt, d->target, &d->updates, NULL, buf, len, err);
}
