/* SPDX-License-Identifier: Apache-2.0 */
/* algos/ac.h — private: the actor-critic network shared by IMPALA and PPO. */
#ifndef SHOAL_ALGOS_AC_H
#define SHOAL_ALGOS_AC_H

#include "algos/algos.h"

/* Feed-forward: one model m, (B, obs) -> (B, P + 1) = [policy | value].
 * With an LSTM core (cfg.lstm = Hd > 0): m is one step, (B, [obs | h | c | mask]) ->
 * (B, [policy | value | h' | c']), the state multiplied by the mask (0 at an episode's
 * start) before the cell; and a learner also has seq, the same layers unrolled over U
 * steps with tied weights (nn_shared), whose one input row is an unroll
 * [o_0 .. o_{U-1} | h_0 c_0 | mask_0 .. mask_{U-1}] and whose output row is
 * [policy_0 value_0 .. policy_{U-1} value_{U-1} | s_1 .. s_U] (s_t = (h_t, c_t) after
 * step t−1). seq registers its tensors in m's order, so both have one parameter layout:
 * seq is trained and published, m acts and is copied from seq after each step. */
typedef struct ac__net {
  ac_config cfg;
  nn_model *m;
  int P;         /* policy outputs: A logits, or D means then D log-stds */
  int out_dim;   /* P + 1 */
  int stride;    /* floats per row of m's output: P + 1, plus S with a core */
  size_t obs_n;  /* floats per observation */
  size_t in_n;   /* floats per row of m's input: obs_n, plus S + 1 with a core */
  size_t ls_off; /* the log-std layer's weight in the parameter buffer (kept at zero) */
  size_t ls_n;   /* its size; 0 for a discrete policy */
  /* LSTM core */
  int Hd, S;     /* hidden size and state floats (2 Hd); 0 without a core */
  float *in;     /* (m's max batch, in_n) packed step input */
  nn_model *seq; /* learner: U steps unrolled; NULL without a core or on an actor */
  int U, seq_B;  /* its steps and max batch (unrolls) */
  size_t seq_in_n, seq_out_n;
  float *seq_in;        /* (seq_B, seq_in_n) */
  float *seq_d;         /* (seq_B, seq_out_n) the output gradient, states' part zero */
  float *tm_out;        /* (U·seq_B, P + 1) seq's policy and value rows, time-major */
  const float *seq_out; /* seq's output of the last forward (in seq's buffer) */
  int *rows;            /* (m's max batch) batch rows of a chunk of final observations */
} ac__net;

/* Checks cfg; SHOAL_EINVAL naming the field. */
/* The torso cfg describes: its model, or the preset its torso names. */
algos_model ac__model(const ac_config *cfg);
int ac__check(const ac_config *cfg, const char *who, shoal_error *err);
/* Builds the network for batches up to max_batch into n (zeroed by the caller); with
 * an LSTM core and U > 0 also seq over U steps for up to seq_B unrolls. */
int ac__create(ac__net *n, const ac_config *cfg, nn_device device, int max_batch, int U, int seq_B,
               shoal_error *err);
void ac__destroy(ac__net *n);
/* The model whose parameters are trained and published: seq, else m. */
nn_model *ac__trained(ac__net *n);
/* One step of the core for B rows: packs [obs | state | 1 − first] (first may be NULL:
 * no episode starts), forwards m, points *out at its rows (stride n->stride) and writes
 * the new (h, c) into state (B, S). */
int ac__step(ac__net *n, const float *obs, int B, float *state, const uint8_t *first,
             const float **out, shoal_error *err);
/* seq over U − 1 = T steps plus the bootstrap observation of the batch's unrolls envs
 * (Bm of them; NULL: all B in order): masks from the batch's end flags (mask_0 = 1:
 * core0 is already reset), forward; n->tm_out gets the (T+1)·Bm time-major
 * [policy | value] rows (row t·Bm + k: step t of unroll envs[k]). */
int ac__seq_forward(ac__net *n, const onpolicy_batch *b, const int *envs, int Bm, shoal_error *err);
/* Backward of seq from dtm ((T+1)·B, P + 1) time-major rows. */
int ac__seq_backward(ac__net *n, const float *dtm, int B, shoal_error *err);
/* The state s_{t+1} after step t of unroll j of the last seq forward (S floats). */
const float *ac__seq_state(ac__net *n, int t, int j);
/* With a core: V of the truncated (not terminated) steps' final observations, each from
 * the state after that step in the last seq forward, into final_v (T, B). */
int ac__final_values_core(ac__net *n, const onpolicy_batch *b, float *final_v, shoal_error *err);
/* After an optimizer step on seq: copies its parameters into m. */
int ac__sync(ac__net *n, shoal_error *err);
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
