/* SPDX-License-Identifier: Apache-2.0 */
#include "actor/collect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One held step of one env. */
typedef struct held {
  float reward, q_sa, max_q, final_max_q;
  int32_t action;
  uint8_t terminated, truncated;
} held;

struct collector {
  int B, F, n, cap;
  float gamma;
  held *steps;     /* (B, cap) ring per env */
  float *obs;      /* (B, cap, F) */
  float *final;    /* (B, cap, F): final obs of ended steps */
  int *head, *len; /* per env: first held step, count */
  /* The batch being built: sized for B * cap steps. */
  float *b_obs, *b_reward, *b_priority, *b_final;
  int32_t *b_action, *b_env;
  uint8_t *b_term, *b_trunc;
};

collector *collector_create(int num_envs, int obs_floats, int n_step, float gamma, int cap_steps,
                            shoal_error *err) {
  if (num_envs < 1 || obs_floats < 1 || n_step < 1 || cap_steps <= n_step ||
      !(gamma >= 0 && gamma <= 1)) {
    shoal_error_set(err, SHOAL_EINVAL,
                    "collector: bad sizes (envs %d, obs %d, n %d, cap %d, gamma %g)", num_envs,
                    obs_floats, n_step, cap_steps, gamma);
    return NULL;
  }
  collector *c = calloc(1, sizeof *c);
  if (!c) goto nomem;
  c->B = num_envs;
  c->F = obs_floats;
  c->n = n_step;
  c->cap = cap_steps;
  c->gamma = gamma;
  size_t S = (size_t)num_envs * cap_steps, F = (size_t)obs_floats;
  c->steps = calloc(S, sizeof *c->steps);
  c->obs = malloc(S * F * sizeof *c->obs);
  c->final = malloc(S * F * sizeof *c->final);
  c->head = calloc((size_t)num_envs, sizeof *c->head);
  c->len = calloc((size_t)num_envs, sizeof *c->len);
  c->b_obs = malloc(S * F * sizeof *c->b_obs);
  c->b_final = malloc(S * F * sizeof *c->b_final);
  c->b_reward = malloc(S * sizeof *c->b_reward);
  c->b_priority = malloc(S * sizeof *c->b_priority);
  c->b_action = malloc(S * sizeof *c->b_action);
  c->b_env = malloc(S * sizeof *c->b_env);
  c->b_term = malloc(S);
  c->b_trunc = malloc(S);
  if (!c->steps || !c->obs || !c->final || !c->head || !c->len || !c->b_obs || !c->b_final ||
      !c->b_reward || !c->b_priority || !c->b_action || !c->b_env || !c->b_term || !c->b_trunc)
    goto nomem;
  return c;
nomem:
  collector_destroy(c);
  shoal_error_set(err, SHOAL_ENOMEM, "collector: out of memory");
  return NULL;
}

void collector_destroy(collector *c) {
  if (!c) return;
  free(c->steps);
  free(c->obs);
  free(c->final);
  free(c->head);
  free(c->len);
  free(c->b_obs);
  free(c->b_final);
  free(c->b_reward);
  free(c->b_priority);
  free(c->b_action);
  free(c->b_env);
  free(c->b_term);
  free(c->b_trunc);
  free(c);
}

static size_t slot(const collector *c, int e, int j) {
  return (size_t)e * c->cap + (size_t)((c->head[e] + j) % c->cap);
}

int collector_add(collector *c, const float *obs, const int32_t *actions, const float *q_sa,
                  const float *max_q, const float *reward, const uint8_t *terminated,
                  const uint8_t *truncated, const float *final_obs, const float *final_max_q,
                  shoal_error *err) {
  for (int e = 0; e < c->B; e++)
    if (c->len[e] == c->cap)
      return shoal_error_set(err, SHOAL_EFULL, "collector: env %d holds %d steps; flush first", e,
                             c->cap);
  size_t F = (size_t)c->F;
  for (int e = 0; e < c->B; e++) {
    size_t s = slot(c, e, c->len[e]);
    held *h = &c->steps[s];
    h->action = actions[e];
    h->q_sa = q_sa[e];
    h->max_q = max_q[e];
    h->reward = reward[e];
    h->terminated = terminated[e] != 0;
    h->truncated = truncated[e] != 0 && !h->terminated;
    h->final_max_q = 0;
    memcpy(c->obs + s * F, obs + (size_t)e * F, F * sizeof *obs);
    if (h->terminated || h->truncated) {
      memcpy(c->final + s * F, final_obs + (size_t)e * F, F * sizeof *obs);
      if (h->truncated) h->final_max_q = final_max_q[e];
    }
    c->len[e]++;
  }
  return 0;
}

/* The priority of held step j of env e if its window is complete; else -1. */
static float priority_of(const collector *c, int e, int j) {
  double ret = 0, g = 1;
  for (int k = 0; k < c->n; k++) {
    if (j + k >= c->len[e]) return -1; /* the window reaches past what is held */
    const held *h = &c->steps[slot(c, e, j + k)];
    ret += g * h->reward;
    g *= c->gamma;
    if (h->terminated) return fabsf((float)ret - c->steps[slot(c, e, j)].q_sa);
    if (h->truncated)
      return fabsf((float)(ret + g * h->final_max_q) - c->steps[slot(c, e, j)].q_sa);
  }
  /* A full window: bootstrap from the step n later, once it has been acted on. */
  if (j + c->n >= c->len[e]) return -1;
  double boot = g * c->steps[slot(c, e, j + c->n)].max_q;
  return fabsf((float)(ret + boot) - c->steps[slot(c, e, j)].q_sa);
}

void collector_flush(collector *c, collector_batch *out) {
  size_t F = (size_t)c->F;
  int n = 0, k = 0;
  for (int e = 0; e < c->B; e++) {
    int done = 0;
    while (done < c->len[e]) {
      float p = priority_of(c, e, done);
      if (p < 0) break;
      size_t s = slot(c, e, done);
      const held *h = &c->steps[s];
      memcpy(c->b_obs + (size_t)n * F, c->obs + s * F, F * sizeof *c->obs);
      c->b_action[n] = h->action;
      c->b_reward[n] = h->reward;
      c->b_term[n] = h->terminated;
      c->b_trunc[n] = h->truncated;
      c->b_priority[n] = p;
      c->b_env[n] = e;
      if (h->terminated || h->truncated)
        memcpy(c->b_final + (size_t)k++ * F, c->final + s * F, F * sizeof *c->final);
      n++;
      done++;
    }
    c->head[e] = (c->head[e] + done) % c->cap;
    c->len[e] -= done;
  }
  out->n = n;
  out->k = k;
  out->obs = c->b_obs;
  out->action = c->b_action;
  out->reward = c->b_reward;
  out->terminated = c->b_term;
  out->truncated = c->b_trunc;
  out->priority = c->b_priority;
  out->env = c->b_env;
  out->final_obs = c->b_final;
}

int collector_pending(const collector *c) {
  int p = 0;
  for (int e = 0; e < c->B; e++) p += c->len[e];
  return p;
}
