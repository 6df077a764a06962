/* SPDX-License-Identifier: Apache-2.0 */
/* The actor-critic network of IMPALA and PPO, the policy distributions and the two
 * losses with their hand-written gradients w.r.t. the network's outputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algos/ac.h"

#define LOG_2PI 1.8378770664093453

ac_config ac_defaults(void) {
  ac_config c;
  memset(&c, 0, sizeof c);
  c.obs_c = c.obs_h = c.obs_w = 1;
  c.num_actions = 2;
  c.torso = AC_TORSO_MLP;
  c.hidden[0] = 64;
  c.hidden[1] = 64;
  c.tanh = true;
  c.separate = true;
  c.ortho_init = true;
  c.log_std_init = 0;
  c.max_batch = 256;
  c.seed = 1;
  return c;
}

algos_model ac__model(const ac_config *c) {
  if (c->model_set) return c->model;
  static const char *const names[] = {"mlp", "minatar", "nature", "impala"};
  algos_model md;
  algos_model_preset(names[c->torso >= AC_TORSO_MLP && c->torso <= AC_TORSO_IMPALA ? c->torso : 0],
                     c->hidden, c->tanh, &md);
  return md;
}

int ac__check(const ac_config *c, const char *who, shoal_error *err) {
  if (c->obs_c < 1 || c->obs_h < 1 || c->obs_w < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: observation shape %dx%dx%d is not positive", who,
                           c->obs_c, c->obs_h, c->obs_w);
  if ((c->num_actions > 0) == (c->act_dim > 0) || c->num_actions < 0 || c->act_dim < 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: exactly one of num_actions (%d) and act_dim (%d) must be "
                           "positive",
                           who, c->num_actions, c->act_dim);
  if (c->act_dim > AC_MAX_ACT_DIM)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: act_dim %d > %d", who, c->act_dim,
                           AC_MAX_ACT_DIM);
  for (int j = 0; j < c->act_dim; j++)
    if (isnan(c->act_low[j]) || isnan(c->act_high[j]) || c->act_low[j] > c->act_high[j])
      return shoal_error_set(err, SHOAL_EINVAL, "%s: action bounds [%g, %g] of dim %d are bad", who,
                             c->act_low[j], c->act_high[j], j);
  if (c->max_batch < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: max_batch %d < 1", who, c->max_batch);
  if (!c->model_set && (c->torso < AC_TORSO_MLP || c->torso > AC_TORSO_IMPALA))
    return shoal_error_set(err, SHOAL_EINVAL, "%s: unknown torso %d", who, (int)c->torso);
  algos_model md = ac__model(c);
  int rc = algos_model_check(&md, c->obs_c, c->obs_h, c->obs_w, who, NULL, err);
  if (rc) return rc;
  if (!isfinite(c->log_std_init))
    return shoal_error_set(err, SHOAL_EINVAL, "%s: log_std_init is not finite", who);
  if (c->lstm < 0 || c->lstm > 65536)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: lstm size %d outside [0, 65536]", who, c->lstm);
  if (c->lstm > 0 && md.nstages > 0)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: a torso of residual stages (impala) cannot feed an LSTM core "
                           "(ac.lstm %d): the core repeats the torso once per step with shared "
                           "layers, and a residual block's addition has two inputs; use conv rows "
                           "(the nature torso)",
                           who, c->lstm);
  if (c->lstm > 0 && c->separate)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "%s: an LSTM core (ac.lstm %d) needs the shared torso (ac.separate "
                           "false): actor and critic read the one recurrent state",
                           who, c->lstm);
  return 0;
}

/* Loads c->plugins and checks that c->layer can stand where a dense layer goes. */
static int check_layer(const ac_config *c, shoal_error *err) {
  const nn_layer_type *t;
  shoal_error why = {0};
  int rc = nn_layer_dense_kind(c->layer, c->plugins, &t, &why);
  return rc ? shoal_error_set(err, rc, "ac: %s", why.msg) : 0;
}

/* One torso from the input node; names prefixed ("actor_", "critic_" or ""). */
static int torso(const ac_config *c, nn_model *m, const char *prefix) {
  const nn_layer_type *t;
  int rc = nn_layer_dense_kind(c->layer, NULL, &t, NULL);
  if (rc) return rc;
  algos_model md = ac__model(c);
  return algos_model_build(m, &md, prefix, t);
}

/* CleanRL's layer_init: orthogonal weights with gain √2 (torso), 0.01 (policy head) or
 * 1 (value head), zero biases. */
static int ortho_init(ac__net *n, shoal_error *err) {
  size_t np;
  float *p = nn_model_params(n->m, &np);
  if (!p) return shoal_error_set(err, SHOAL_ENOMEM, "ac: no parameter buffer");
  shoal_rng rng;
  shoal_rng_seed(&rng, n->cfg.seed ^ 0x6f7274686fULL);
  int count = nn_model_tensor_count(n->m);
  for (int i = 0; i < count; i++) {
    nn_tensor_info ti;
    nn_model_tensor(n->m, i, &ti);
    if (!ti.trainable) continue;
    /* a custom layer's tensors keep the initialisers its type gave them */
    char layer[160];
    const char *dot = strrchr(ti.name, '.');
    snprintf(layer, sizeof layer, "%.*s", dot ? (int)(dot - ti.name) : 0, ti.name);
    bool custom = false;
    nn_node_kind(n->m, nn_model_find_node(n->m, layer), &custom);
    if (custom) continue;
    size_t len = strlen(ti.name);
    bool weight = len > 7 && !strcmp(ti.name + len - 7, ".weight");
    if (!strncmp(ti.name, "log_std.", 8)) continue;
    /* CleanRL's ppo_atari_lstm: the LSTM's weights orthogonal with gain 1, biases 0 */
    bool cell = !strncmp(ti.name, "lstm.", 5);
    if (cell) weight = strstr(ti.name, ".weight_") != NULL;
    if (!weight) {
      nn_init_zeros(p + ti.offset, ti.numel);
      continue;
    }
    float gain = sqrtf(2.0f);
    if (!strcmp(ti.name, "policy.weight") || !strcmp(ti.name, "mean.weight")) gain = 0.01f;
    if (!strcmp(ti.name, "value.weight") || cell) gain = 1.0f;
    int rows = ti.shape[0], cols = (int)(ti.numel / (size_t)ti.shape[0]);
    int rc = nn_init_orthogonal(p + ti.offset, rows, cols, gain, &rng);
    if (rc) return shoal_error_set(err, rc, "ac: orthogonal init of %s failed", ti.name);
  }
  return 0;
}

/* Concatenates k nodes in order as a balanced tree (each value is copied log2 k times,
 * not k times as a chain would). ids is overwritten. */
static int concat_tree(nn_model *m, int *ids, int k, const char *prefix, int *counter) {
  char name[48];
  while (k > 1) {
    int j = 0;
    for (int i = 0; i + 1 < k; i += 2) {
      snprintf(name, sizeof name, "%s%d", prefix, (*counter)++);
      int rc = nn_concat(m, name, ids[i], ids[i + 1]);
      if (rc < 0) return rc;
      ids[j++] = rc;
    }
    if (k % 2) ids[j++] = ids[k - 1];
    k = j;
  }
  return ids[0];
}

/* A layer at step t: made (t = 0, its id recorded in *like) or sharing *like's
 * parameters (t > 0, nn_shared on the current node). */
#define STEP_LAYER(t, like, expr, base) \
  ((t) == 0 ? (*(like) = (expr))        \
            : (snprintf(name, sizeof name, "%s_t%d", base, t), nn_shared(m, name, *(like))))

/* The LSTM network over U steps (U = 1: the acting model m). Tensors are registered by
 * step 0 only, in the same order for every U, so all have one parameter layout. */
static int build_core(ac__net *n, nn_model *m, int U) {
  const ac_config *c = &n->cfg;
  int Hd = n->Hd, S = n->S, on = (int)n->obs_n;
  char name[48];
  int *heads = malloc((size_t)U * sizeof *heads), *states = malloc((size_t)U * sizeof *states);
  int *torso_ids = NULL, n_torso = 0, rc = 0;
  int cell = -1, pol = -1, mean = -1, ls = -1, val = -1;
  algos_model md = ac__model(c);
  const bool image = algos_model_is_image(&md);
  if (!heads || !states) {
    rc = SHOAL_ENOMEM;
    goto done;
  }
  if ((rc = nn_input(m, U * on + S + U, 1, 1)) < 0) goto done;
  int state = rc = nn_slice(m, "state0", U * on, S);
  for (int t = 0; t < U && rc >= 0; t++) {
    const char *sfx = t ? "_t" : "";
    char num[16] = "";
    if (t) snprintf(num, sizeof num, "%d", t);
    snprintf(name, sizeof name, "mask%s%s", sfx, num);
    if ((rc = nn_model_select(m, 0)) < 0 || (rc = nn_slice(m, name, U * on + S + t, 1)) < 0) break;
    int mask = rc;
    snprintf(name, sizeof name, "reset%s%s", sfx, num);
    if ((rc = nn_mul(m, name, state, mask)) < 0) break;
    int ms = rc;
    snprintf(name, sizeof name, "obs%s%s", sfx, num);
    if ((rc = nn_model_select(m, 0)) < 0 || (rc = nn_slice(m, name, t * on, on)) < 0) break;
    if (image) { /* a torso of convolutions takes (C, H, W) */
      snprintf(name, sizeof name, "obs_chw%s%s", sfx, num);
      if ((rc = nn_reshape(m, name, c->obs_c, c->obs_h, c->obs_w)) < 0) break;
    }
    if (t == 0) {
      int first = nn_model_current(m) + 1;
      if ((rc = torso(c, m, "")) < 0) break;
      n_torso = rc - first + 1;
      if (n_torso > 0) {
        if (!(torso_ids = malloc((size_t)n_torso * sizeof *torso_ids))) {
          rc = SHOAL_ENOMEM;
          break;
        }
        for (int k = 0; k < n_torso; k++) torso_ids[k] = first + k;
      }
    } else {
      for (int k = 0; k < n_torso && rc >= 0; k++) {
        snprintf(name, sizeof name, "torso%d_t%d", k, t);
        rc = nn_shared(m, name, torso_ids[k]);
      }
      if (rc < 0) break;
    }
    int feat = nn_model_current(m);
    snprintf(name, sizeof name, "core_in%s%s", sfx, num);
    if ((rc = nn_concat(m, name, feat, ms)) < 0) break;
    if ((rc = STEP_LAYER(t, &cell, nn_lstm_cell(m, "lstm", Hd), "lstm")) < 0) break;
    state = states[t] = rc;
    snprintf(name, sizeof name, "h%s%s", sfx, num);
    if ((rc = nn_slice(m, name, 0, Hd)) < 0) break;
    int h = rc;
    if (c->num_actions > 0) {
      if ((rc = STEP_LAYER(t, &pol, nn_dense(m, "policy", c->num_actions), "policy")) < 0) break;
    } else {
      if ((rc = STEP_LAYER(t, &mean, nn_dense(m, "mean", c->act_dim), "mean")) < 0) break;
      int mu = rc;
      /* The log-std: a dense layer whose weight stays zero, so its output is its bias. */
      if ((rc = nn_model_select(m, h)) < 0) break;
      if ((rc = STEP_LAYER(t, &ls, nn_dense(m, "log_std", c->act_dim), "log_std")) < 0) break;
      snprintf(name, sizeof name, "policy_out%s%s", sfx, num);
      if ((rc = nn_concat(m, name, mu, rc)) < 0) break;
    }
    int p = rc;
    if ((rc = nn_model_select(m, h)) < 0) break;
    if ((rc = STEP_LAYER(t, &val, nn_dense(m, "value", 1), "value")) < 0) break;
    snprintf(name, sizeof name, "out%s%s", sfx, num);
    if ((rc = nn_concat(m, name, p, rc)) < 0) break;
    heads[t] = rc;
  }
  if (rc >= 0) {
    int counter = 0;
    int hs = concat_tree(m, heads, U, "heads", &counter);
    int ss = hs >= 0 ? concat_tree(m, states, U, "states", &counter) : hs;
    rc = ss >= 0 ? nn_concat(m, "core_out", hs, ss) : ss;
  }
done:
  free(heads);
  free(states);
  free(torso_ids);
  return rc < 0 ? rc : 0;
}
#undef STEP_LAYER

/* seq and m must hold their tensors at the same offsets, so one parameter vector
 * serves both (published by the learner, loaded by actors). */
static int same_layout(const nn_model *a, const nn_model *b, shoal_error *err) {
  int na = nn_model_tensor_count(a), nb = nn_model_tensor_count(b);
  if (na != nb)
    return shoal_error_set(err, SHOAL_ESTATE, "ac: the unrolled core has %d tensors, the step %d",
                           nb, na);
  for (int i = 0; i < na; i++) {
    nn_tensor_info x, y;
    nn_model_tensor(a, i, &x);
    nn_model_tensor(b, i, &y);
    if (strcmp(x.name, y.name) || x.offset != y.offset || x.numel != y.numel)
      return shoal_error_set(err, SHOAL_ESTATE, "ac: tensor %d differs: %s@%zu vs %s@%zu", i,
                             x.name, x.offset, y.name, y.offset);
  }
  return 0;
}

static int create_core(ac__net *n, nn_device device, int max_batch, int U, int seq_B,
                       shoal_error *err) {
  const ac_config *c = &n->cfg;
  n->Hd = c->lstm;
  n->S = 2 * c->lstm;
  n->in_n = n->obs_n + (size_t)n->S + 1;
  n->stride = n->out_dim + n->S;
  int rc = build_core(n, n->m, 1);
  if (rc < 0) return shoal_error_set(err, rc, "ac: building the core: %s", nn_model_error(n->m));
  if ((rc = nn_model_build(n->m, max_batch, c->seed, err))) return rc;
  n->in = malloc((size_t)max_batch * n->in_n * sizeof *n->in);
  n->rows = malloc((size_t)max_batch * sizeof *n->rows);
  if (!n->in || !n->rows) return shoal_error_set(err, SHOAL_ENOMEM, "ac: out of memory");
  if (U < 1) return 0;
  n->U = U;
  n->seq_B = seq_B;
  n->seq_in_n = (size_t)U * n->obs_n + (size_t)n->S + (size_t)U;
  n->seq_out_n = (size_t)U * (size_t)(n->out_dim + n->S);
  if (!(n->seq = nn_model_create(device, err))) return err ? err->code : SHOAL_ENOMEM;
  if ((rc = build_core(n, n->seq, U)) < 0)
    return shoal_error_set(err, rc, "ac: unrolling the core over %d steps: %s", U,
                           nn_model_error(n->seq));
  if ((rc = nn_model_build(n->seq, seq_B, c->seed, err))) return rc;
  if ((rc = same_layout(n->m, n->seq, err))) return rc;
  n->seq_in = malloc((size_t)seq_B * n->seq_in_n * sizeof *n->seq_in);
  n->seq_d = calloc((size_t)seq_B * n->seq_out_n, sizeof *n->seq_d);
  n->tm_out = malloc((size_t)U * seq_B * n->out_dim * sizeof *n->tm_out);
  if (!n->seq_in || !n->seq_d || !n->tm_out)
    return shoal_error_set(err, SHOAL_ENOMEM, "ac: out of memory");
  return 0;
}

static int finish_init(ac__net *n, shoal_error *err) {
  const ac_config *c = &n->cfg;
  nn_model *m = n->m;
  int rc;
  if (c->ortho_init && (rc = ortho_init(n, err))) return rc;
  if (c->act_dim > 0) {
    nn_tensor_info w, b;
    nn_model_find_tensor(m, "log_std.weight", &w);
    nn_model_find_tensor(m, "log_std.bias", &b);
    size_t np;
    float *p = nn_model_params(m, &np);
    nn_init_zeros(p + w.offset, w.numel);
    for (size_t j = 0; j < b.numel; j++) p[b.offset + j] = c->log_std_init;
    n->ls_off = w.offset;
    n->ls_n = w.numel;
  }
  if (n->seq && (rc = nn_model_copy(n->seq, m, err))) return rc;
  return 0;
}

int ac__create(ac__net *n, const ac_config *c, nn_device device, int max_batch, int U, int seq_B,
               shoal_error *err) {
  n->cfg = *c;
  int crc = check_layer(c, err);
  if (crc) return crc;
  n->P = c->num_actions > 0 ? c->num_actions : 2 * c->act_dim;
  n->out_dim = n->stride = n->P + 1;
  n->obs_n = n->in_n = (size_t)c->obs_c * c->obs_h * c->obs_w;
  if (!(n->m = nn_model_create(device, err))) return err ? err->code : SHOAL_ENOMEM;
  nn_model *m = n->m;
  if (c->lstm > 0) {
    int rc = create_core(n, device, max_batch, U, seq_B, err);
    return rc ? rc : finish_init(n, err);
  }
  int rc = nn_input(m, c->obs_c, c->obs_h, c->obs_w);
  int pol = -1, val = -1;
  if (rc >= 0) rc = torso(c, m, c->separate ? "actor_" : "");
  int trunk = rc;
  if (rc >= 0) {
    if (c->num_actions > 0) {
      pol = nn_dense(m, "policy", c->num_actions);
    } else {
      int mean = nn_dense(m, "mean", c->act_dim);
      /* The log-std: a dense layer from the input whose weight stays zero, so its
       * output is its bias for every observation. */
      int ls = mean >= 0 ? nn_model_select(m, 0) : mean;
      if (ls >= 0) ls = nn_dense(m, "log_std", c->act_dim);
      pol = ls >= 0 ? nn_concat(m, "policy_out", mean, ls) : ls;
    }
    rc = pol;
  }
  if (rc >= 0) rc = nn_model_select(m, c->separate ? 0 : trunk);
  if (rc >= 0 && c->separate) rc = torso(c, m, "critic_");
  if (rc >= 0) rc = val = nn_dense(m, "value", 1);
  if (rc >= 0) rc = nn_concat(m, "out", pol, val);
  if (rc < 0) return shoal_error_set(err, rc, "ac: building the network: %s", nn_model_error(m));
  if ((rc = nn_model_build(m, max_batch, c->seed, err))) return rc;
  return finish_init(n, err);
}

void ac__destroy(ac__net *n) {
  nn_model_destroy(n->m);
  nn_model_destroy(n->seq);
  free(n->in);
  free(n->rows);
  free(n->seq_in);
  free(n->seq_d);
  free(n->tm_out);
  n->m = n->seq = NULL;
  n->in = n->seq_in = n->seq_d = n->tm_out = NULL;
  n->rows = NULL;
}

nn_model *ac__trained(ac__net *n) { return n->seq ? n->seq : n->m; }

int ac__step(ac__net *n, const float *obs, int B, float *state, const uint8_t *first,
             const float **out, shoal_error *err) {
  size_t on = n->obs_n, S = (size_t)n->S;
  for (int i = 0; i < B; i++) {
    float *row = n->in + (size_t)i * n->in_n;
    memcpy(row, obs + (size_t)i * on, on * sizeof *row);
    memcpy(row + on, state + (size_t)i * S, S * sizeof *row);
    row[on + S] = first && first[i] ? 0.0f : 1.0f;
  }
  int rc = nn_model_forward(n->m, n->in, B, out, err);
  if (rc) return rc;
  for (int i = 0; i < B; i++)
    memcpy(state + (size_t)i * S, *out + (size_t)i * n->stride + n->out_dim, S * sizeof *state);
  return 0;
}

int ac__seq_forward(ac__net *n, const onpolicy_batch *b, const int *envs, int Bm,
                    shoal_error *err) {
  int T = b->T, B = b->B, U = n->U, od = n->out_dim;
  if (!envs) Bm = B;
  if (T + 1 != U || Bm > n->seq_B)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "ac: the LSTM core is unrolled over T = %d steps of up to %d unrolls; "
                           "the batch has T %d x B %d",
                           U - 1, n->seq_B, T, Bm);
  size_t on = n->obs_n, S = (size_t)n->S;
  for (int k = 0; k < Bm; k++) {
    int j = envs ? envs[k] : k;
    float *row = n->seq_in + (size_t)k * n->seq_in_n;
    for (int t = 0; t <= T; t++)
      memcpy(row + (size_t)t * on, b->obs + ((size_t)t * B + j) * on, on * sizeof *row);
    float *s0 = row + (size_t)U * on, *mask = s0 + S;
    if (b->core0)
      memcpy(s0, b->core0 + (size_t)j * S, S * sizeof *s0);
    else
      memset(s0, 0, S * sizeof *s0);
    /* o_{t+1} begins an episode when step t ended one (env_vec resets in that step) */
    mask[0] = 1.0f;
    for (int t = 0; t < T; t++) {
      size_t i = (size_t)t * B + j;
      bool end = b->terminated[i] || (b->truncated && b->truncated[i]);
      mask[t + 1] = end ? 0.0f : 1.0f;
    }
  }
  const float *out;
  int rc = nn_model_forward(n->seq, n->seq_in, Bm, &out, err);
  if (rc) return rc;
  n->seq_out = out;
  for (int k = 0; k < Bm; k++)
    for (int t = 0; t <= T; t++)
      memcpy(n->tm_out + ((size_t)t * Bm + k) * od, out + (size_t)k * n->seq_out_n + (size_t)t * od,
             (size_t)od * sizeof *n->tm_out);
  return 0;
}

int ac__seq_backward(ac__net *n, const float *dtm, int B, shoal_error *err) {
  int U = n->U, od = n->out_dim;
  for (int j = 0; j < B; j++)
    for (int t = 0; t < U; t++)
      memcpy(n->seq_d + (size_t)j * n->seq_out_n + (size_t)t * od, dtm + ((size_t)t * B + j) * od,
             (size_t)od * sizeof *n->seq_d);
  return nn_model_backward(n->seq, n->seq_d, NULL, err);
}

const float *ac__seq_state(ac__net *n, int t, int j) {
  /* seq's output stays in its buffer until its next forward (backward leaves it) */
  return n->seq_out + (size_t)j * n->seq_out_n + (size_t)n->U * n->out_dim + (size_t)t * n->S;
}

int ac__final_values_core(ac__net *n, const onpolicy_batch *b, float *final_v, shoal_error *err) {
  if (!b->truncated || !b->final_obs) return 0;
  int TB = b->T * b->B, cap = nn_model_max_batch(n->m), k = 0;
  size_t on = n->obs_n, S = (size_t)n->S;
  for (int i = 0; i <= TB; i++) {
    if (i < TB && b->truncated[i] && !b->terminated[i]) {
      float *row = n->in + (size_t)k * n->in_n;
      memcpy(row, b->final_obs + (size_t)i * on, on * sizeof *row);
      memcpy(row + on, ac__seq_state(n, i / b->B, i % b->B), S * sizeof *row);
      row[on + S] = 1.0f;
      n->rows[k++] = i;
    }
    if (k && (k == cap || i == TB)) {
      const float *out;
      int rc = nn_model_forward(n->m, n->in, k, &out, err);
      if (rc) return rc;
      for (int r = 0; r < k; r++) final_v[n->rows[r]] = out[(size_t)r * n->stride + n->P];
      k = 0;
    }
  }
  return 0;
}

int ac__sync(ac__net *n, shoal_error *err) { return n->seq ? nn_model_copy(n->m, n->seq, err) : 0; }

int ac__values(ac__net *n, const float *obs, int B, float *value, shoal_error *err) {
  int chunk = nn_model_max_batch(n->m);
  for (int i = 0; i < B; i += chunk) {
    int k = B - i < chunk ? B - i : chunk;
    const float *out;
    int rc = nn_model_forward(n->m, obs + (size_t)i * n->obs_n, k, &out, err);
    if (rc) return rc;
    for (int j = 0; j < k; j++) value[i + j] = out[(size_t)j * n->stride + n->P];
  }
  return 0;
}

void ac__fix_grads(ac__net *n) {
  if (!n->ls_n) return;
  size_t ng;
  float *g = nn_model_grads(ac__trained(n), &ng);
  memset(g + n->ls_off, 0, n->ls_n * sizeof *g);
}

/* log-softmax pieces of one row: the max and log Σ exp(z − max). */
static double lse(const float *z, int A) {
  float mx = z[0];
  for (int k = 1; k < A; k++)
    if (z[k] > mx) mx = z[k];
  double s = 0;
  for (int k = 0; k < A; k++) s += exp((double)z[k] - mx);
  return mx + log(s);
}

float ac_logp_discrete(const float *z, int A, int32_t a, float *entropy) {
  double l = lse(z, A);
  if (entropy) {
    double h = 0;
    for (int k = 0; k < A; k++) {
      double lp = z[k] - l;
      h -= exp(lp) * lp;
    }
    *entropy = (float)h;
  }
  return (float)(z[a] - l);
}

float ac_logp_gaussian(const float *mean, const float *log_std, int D, const float *a,
                       float *entropy) {
  double lp = 0, h = 0;
  for (int j = 0; j < D; j++) {
    double d = ((double)a[j] - mean[j]) * exp(-(double)log_std[j]);
    lp += -0.5 * d * d - log_std[j] - 0.5 * LOG_2PI;
    h += 0.5 + 0.5 * LOG_2PI + log_std[j];
  }
  if (entropy) *entropy = (float)h;
  return (float)lp;
}

void ac__sample(const ac__net *n, const float *out, int B, shoal_rng *rng, bool greedy,
                void *actions, float *logp) {
  const ac_config *c = &n->cfg;
  for (int i = 0; i < B; i++) {
    const float *o = out + (size_t)i * n->stride;
    if (c->num_actions > 0) {
      int A = c->num_actions, a = 0;
      if (greedy) {
        for (int k = 1; k < A; k++)
          if (o[k] > o[a]) a = k;
      } else {
        /* Inverse CDF of the softmax; the last action takes any rounding remainder. */
        double l = lse(o, A), u = shoal_rng_uniform(rng), cum = 0;
        for (a = 0; a < A - 1; a++) {
          cum += exp((double)o[a] - l);
          if (u < cum) break;
        }
      }
      ((int32_t *)actions)[i] = a;
      if (logp) logp[i] = ac_logp_discrete(o, A, a, NULL);
    } else {
      int D = c->act_dim;
      float *a = (float *)actions + (size_t)i * D;
      for (int j = 0; j < D; j++)
        a[j] = greedy ? o[j] : o[j] + expf(o[D + j]) * (float)shoal_rng_normal(rng);
      if (logp) logp[i] = ac_logp_gaussian(o, o + D, D, a, NULL);
    }
  }
}

int ac__check_actions(const ac__net *n, const void *actions, size_t B, const char *who,
                      shoal_error *err) {
  if (n->cfg.num_actions > 0) {
    const int32_t *a = actions;
    for (size_t i = 0; i < B; i++)
      if (a[i] < 0 || a[i] >= n->cfg.num_actions)
        return shoal_error_set(err, SHOAL_ERANGE, "%s: action %d at row %zu not in [0, %d)", who,
                               (int)a[i], i, n->cfg.num_actions);
  } else {
    const float *a = actions;
    for (size_t i = 0; i < B * (size_t)n->cfg.act_dim; i++)
      if (!isfinite(a[i]))
        return shoal_error_set(err, SHOAL_ENAN, "%s: non-finite action at row %zu", who,
                               i / (size_t)n->cfg.act_dim);
  }
  return 0;
}

int ac__load_params(ac__net *n, const float *params, size_t count, const char *who,
                    shoal_error *err) {
  size_t have;
  float *p = nn_model_params(n->m, &have);
  if (count != have)
    return shoal_error_set(err, SHOAL_ESHAPE, "%s: %zu parameters received, the network has %zu",
                           who, count, have);
  for (size_t i = 0; i < count; i++)
    if (!isfinite(params[i]))
      return shoal_error_set(err, SHOAL_ENAN, "%s: parameter %zu is not finite", who, i);
  memcpy(p, params, count * sizeof *p);
  return n->seq ? nn_model_copy(n->seq, n->m, err) : 0;
}

nn_optim *ac__optim(ac__net *n, onpolicy_optim kind, float lr, float eps, float alpha, float clip,
                    shoal_error *err) {
  nn_optim_config oc = nn_optim_defaults(kind == ONPOLICY_RMSPROP ? NN_RMSPROP : NN_ADAM);
  oc.lr = lr;
  oc.eps = eps;
  if (kind == ONPOLICY_RMSPROP) oc.alpha = alpha;
  oc.clip_norm = clip;
  return nn_optim_create(ac__trained(n), &oc, err);
}

/* ---- losses ---- */

void ppo_loss(const ppo_loss_in *in, const float *out, float *dout, onpolicy_stats *stats) {
  int N = in->N, A = in->A, D = in->D;
  int P = A > 0 ? A : 2 * D, od = P + 1;
  double pg_sum = 0, v_sum = 0, h_sum = 0, kl_sum = 0, clipped = 0;
  double inv = 1.0 / N;
  for (int i = 0; i < N; i++) {
    const float *o = out + (size_t)i * od;
    float *g = dout + (size_t)i * od;
    float h;
    float lp = A > 0 ? ac_logp_discrete(o, A, ((const int32_t *)in->action)[i], &h)
                     : ac_logp_gaussian(o, o + D, D, (const float *)in->action + (size_t)i * D, &h);
    double log_r = (double)lp - in->old_logp[i], r = exp(log_r);
    double adv = in->adv[i];
    double rc = fmin(fmax(r, 1.0 - in->clip), 1.0 + in->clip);
    double un = -adv * r, cl = -adv * rc;
    /* max(un, cl): the gradient flows through r only when the unclipped term is the
     * larger (when they tie, r is inside the clip range and both slopes agree). */
    double dlogp = (un >= cl ? -adv * r : 0.0) * inv;
    pg_sum += un >= cl ? un : cl;
    kl_sum += (r - 1.0) - log_r;
    if (fabs(r - 1.0) > in->clip) clipped++;
    h_sum += h;
    double dh = -(double)in->entropy_coef * inv; /* d loss / d H_i */
    if (A > 0) {
      double l = lse(o, A);
      int32_t a = ((const int32_t *)in->action)[i];
      for (int k = 0; k < A; k++) {
        double lpk = o[k] - l, p = exp(lpk);
        /* d log π(a) / d z_k = [k = a] − p_k; d H / d z_k = −p_k (log p_k + H). */
        g[k] = (float)(dlogp * ((k == a) - p) + dh * (-p * (lpk + h)));
      }
    } else {
      const float *a = (const float *)in->action + (size_t)i * D;
      for (int j = 0; j < D; j++) {
        double is2 = exp(-2.0 * o[D + j]), d = (double)a[j] - o[j];
        /* d log π / d μ = (a − μ) / σ², d log π / d log σ = (a − μ)² / σ² − 1, d H / d log σ = 1 */
        g[j] = (float)(dlogp * d * is2);
        g[D + j] = (float)(dlogp * (d * d * is2 - 1.0) + dh);
      }
    }
    double v = o[P], R = in->ret[i], dv;
    double eu = v - R;
    if (in->clip_value) {
      double vo = in->old_value[i];
      double vc = vo + fmin(fmax(v - vo, -(double)in->clip), (double)in->clip);
      double ec = vc - R;
      if (eu * eu >= ec * ec) {
        v_sum += 0.5 * eu * eu;
        dv = eu;
      } else {
        v_sum += 0.5 * ec * ec;
        dv = fabs(v - vo) < in->clip ? ec : 0.0;
      }
    } else {
      v_sum += 0.5 * eu * eu;
      dv = eu;
    }
    g[P] = (float)(in->value_coef * dv * inv);
  }
  if (stats) {
    stats->pg_loss = (float)(pg_sum * inv);
    stats->value_loss = (float)(v_sum * inv);
    stats->entropy = (float)(h_sum * inv);
    stats->loss = (float)((pg_sum - in->entropy_coef * h_sum + in->value_coef * v_sum) * inv);
    stats->approx_kl = (float)(kl_sum * inv);
    stats->clip_frac = (float)(clipped * inv);
  }
}

void impala_loss(int N, int A, const int32_t *action, const float *vs, const float *pg_adv,
                 float baseline_coef, float entropy_coef, const float *out, float *dout,
                 onpolicy_stats *stats) {
  int od = A + 1;
  double inv = 1.0 / N, pg_sum = 0, v_sum = 0, h_sum = 0;
  for (int i = 0; i < N; i++) {
    const float *o = out + (size_t)i * od;
    float *g = dout + (size_t)i * od;
    float h;
    float lp = ac_logp_discrete(o, A, action[i], &h);
    pg_sum += -(double)pg_adv[i] * lp;
    h_sum += h;
    double l = lse(o, A), dlogp = -(double)pg_adv[i] * inv, dh = -(double)entropy_coef * inv;
    for (int k = 0; k < A; k++) {
      double lpk = o[k] - l, p = exp(lpk);
      g[k] = (float)(dlogp * ((k == action[i]) - p) + dh * (-p * (lpk + h)));
    }
    double e = (double)o[A] - vs[i];
    v_sum += 0.5 * e * e;
    g[A] = (float)(baseline_coef * e * inv);
  }
  if (stats) {
    stats->pg_loss = (float)(pg_sum * inv);
    stats->value_loss = (float)(v_sum * inv);
    stats->entropy = (float)(h_sum * inv);
    stats->loss = (float)((pg_sum + baseline_coef * v_sum - entropy_coef * h_sum) * inv);
  }
}
