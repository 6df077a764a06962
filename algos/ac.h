/* algos/ac.h — private: the actor-critic network shared by IMPALA and PPO. */
#ifndef SHOAL_ALGOS_AC_H
#define SHOAL_ALGOS_AC_H

#include "algos/algos.h"

typedef struct ac__net {
  ac_config cfg;
  nn_model *m;   /* (B, obs) -> (B, P + 1) = [policy | value] */
  int P;         /* policy outputs: A logits, or D means then D log-stds */
  int out_dim;   /* P + 1 */
  size_t obs_n;  /* floats per observation */
  size_t ls_off; /* the log-std layer's weight in the parameter buffer (kept at zero) */
  size_t ls_n;   /* its size; 0 for a discrete policy */
} ac__net;

/* Checks cfg; SHOAL_EINVAL naming the field. */
int ac__check(const ac_config *cfg, const char *who, shoal_error *err);
/* Builds the network for batches up to max_batch into n (zeroed by the caller). */
int ac__create(ac__net *n, const ac_config *cfg, nn_device device, int max_batch, shoal_error *err);
void ac__destroy(ac__net *n);
/* Forward of B rows in chunks of the model's max batch, copying the values (column P)
 * into value (B). For values only: the activations are not kept for a backward. */
int ac__values(ac__net *n, const float *obs, int B, float *value, shoal_error *err);
/* Zeroes the gradient of the log-std layer's weight, so the log-std stays state-
 * independent (call after backward, before the optimizer step). */
void ac__fix_grads(ac__net *n);
/* Samples (or, greedy, takes the mode of) one action per row of out (B, P + 1); writes
 * the actions (int32, or B x D floats) and their log-probabilities (may be NULL). */
void ac__sample(const ac__net *n, const float *out, int B, shoal_rng *rng, bool greedy,
                void *actions, float *logp);
/* Checks B actions (in range, finite); SHOAL_ERANGE / SHOAL_ENAN naming the row. */
int ac__check_actions(const ac__net *n, const void *actions, size_t B, const char *who,
                      shoal_error *err);
int ac__load_params(ac__net *n, const float *params, size_t count, const char *who,
                    shoal_error *err);
nn_optim *ac__optim(ac__net *n, onpolicy_optim kind, float lr, float eps, float alpha, float clip,
                    shoal_error *err);

/* Values of the truncated (and not terminated) steps' final observations into final_v
 * (T, B); fobs (T·B, obs), fidx (T·B) and scratch (T·B) are work space. */
int onpolicy__final_values(ac__net *n, const onpolicy_batch *b, float *fobs, int *fidx,
                           float *scratch, float *final_v, shoal_error *err);
/* Checks b's sizes against the learner's, actions, and finiteness of logp and reward. */
int onpolicy__check_batch(const ac__net *n, const onpolicy_batch *b, int maxT, int maxB,
                          const char *who, shoal_error *err);

#endif
