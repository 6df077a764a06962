/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/norm.c — batch norm (1-d and 2-d) and layer norm on the CPU.
 *
 * Batch norm, per channel c over the M = B*H*W values of a batch (Ioffe & Szegedy 2015):
 *   training: xhat = (x - mean) / sqrt(var + eps) with the biased batch variance; the
 *             running variance takes the unbiased one, var * M / (M - 1), PyTorch's way:
 *             running = (1 - momentum) running + momentum batch.
 *   eval:     xhat = (x - running_mean) / sqrt(running_var + eps).
 *   y = gamma xhat + beta.
 *   backward (training): dx = gamma rstd / M (M dy - sum dy - xhat sum(dy xhat));
 *            (eval):     dx = gamma rstd dy.
 * Layer norm, per sample over its F features, the same algebra with M = F and an
 * element-wise affine (weight, bias of F).
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "nn/cpu/cpu.h"

/* Batch norm runs one task per channel on the pool (a channel's statistics, its running
 * averages, its parameter gradients and its values are all its own), and each channel's
 * sums run in 8 double lanes in a fixed order, so the result does not depend on the
 * thread count. The serial version with one double accumulator made a chain of dependent
 * adds per value: 8% of the DCGAN step on one thread, and serial at two. */
typedef struct bn_job {
  nn_model *m;
  nn__node *n;
  const float *x; /* forward: the input */
  float *dx;      /* backward: the input's gradient, or NULL */
  bool acc;       /* dx accumulates (a later consumer's share) */
  int B;
  size_t P, M, stride; /* values per sample and channel, per channel, between samples */
} bn_job;

static bn_job bn_job_of(nn_model *m, nn__node *n, int B) {
  size_t P = (size_t)n->H * n->W;
  return (bn_job){.m = m, .n = n, .B = B, .P = P, .M = (size_t)B * P, .stride = (size_t)n->C * P};
}

/* sum over b < B, p < P of f(row_b[p]), row_b = x + b*stride: 8 lanes, then the lanes */
#define BN_SUM8(out, x, stride, B, P, f)                                               \
  do {                                                                                 \
    double a_[8] = {0};                                                                \
    for (int b_ = 0; b_ < (B); b_++) {                                                 \
      const float *r_ = (x) + (size_t)b_ * (stride);                                   \
      size_t p_ = 0;                                                                   \
      for (; p_ + 8 <= (P); p_ += 8)                                                   \
        for (int l_ = 0; l_ < 8; l_++) a_[l_] += f(r_, p_ + l_);                       \
      for (int l_ = 0; p_ < (P); p_++, l_++) a_[l_] += f(r_, p_);                      \
    }                                                                                  \
    (out) = ((a_[0] + a_[1]) + (a_[2] + a_[3])) + ((a_[4] + a_[5]) + (a_[6] + a_[7])); \
  } while (0)

NN__CLONES static void bn_fwd_task(void *vc, int c, int th) {
  const bn_job *j = vc;
  nn__node *n = j->n;
  nn_model *m = j->m;
  int B = j->B;
  size_t P = j->P, M = j->M, stride = j->stride;
  const float *x = j->x + (size_t)c * P;
  float *xhat = n->cache + (size_t)c * P, *out = n->out + (size_t)c * P;
  float *rstd = n->cache + (size_t)m->max_batch * n->F;
  float mean, rs;
  if (n->fwd_training) {
    double s, ss;
#define BN_X(r, i) (double)(r)[i]
    BN_SUM8(s, x, stride, B, P, BN_X);
    double mu = s / (double)M;
#define BN_D2(r, i) (((double)(r)[i] - mu) * ((double)(r)[i] - mu))
    BN_SUM8(ss, x, stride, B, P, BN_D2);
#undef BN_X
#undef BN_D2
    double var = ss / (double)M;
    mean = (float)mu;
    rs = (float)(1.0 / sqrt(var + n->eps));
    float *rmean = m->state + n->soff[0], *rvar = m->state + n->soff[1], mo = n->momentum;
    rmean[c] = (1.0f - mo) * rmean[c] + mo * mean;
    rvar[c] = (1.0f - mo) * rvar[c] + mo * (float)(var * (double)M / (double)(M - 1));
  } else {
    mean = m->state[n->soff[0] + c];
    rs = 1.0f / sqrtf(m->state[n->soff[1] + c] + n->eps);
  }
  rstd[c] = rs;
  float g = m->params[n->poff[0] + c], bt = m->params[n->poff[1] + c];
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * stride;
    for (size_t p = 0; p < P; p++) {
      float h = (x[o + p] - mean) * rs;
      xhat[o + p] = h;
      out[o + p] = g * h + bt;
    }
  }
}

/* Batch norm over features (P = 1, BatchNorm1d after a dense layer): a channel's values lie
 * C floats apart, one per sample, so a task per channel read 64 scattered floats through a
 * pool dispatch each (DCGAN's 6272-feature norm: 12 ns a value). Here a task takes a block of
 * channels and goes down the batch a row at a time; each channel's sums still run over the
 * samples in order, so the result does not depend on the thread count. */
#define BN_CB 256 /* channels per task */

NN__CLONES static void bn1_fwd_task(void *vc, int blk, int th) {
  const bn_job *j = vc;
  nn__node *n = j->n;
  nn_model *m = j->m;
  int B = j->B, C = n->C, c0 = blk * BN_CB, nc = C - c0 < BN_CB ? C - c0 : BN_CB;
  const float *x = j->x + c0;
  float *xhat = n->cache + c0, *out = n->out + c0;
  float *rstd = n->cache + (size_t)m->max_batch * n->F + c0;
  const float *gam = m->params + n->poff[0] + c0, *bet = m->params + n->poff[1] + c0;
  float mean[BN_CB], rs[BN_CB];
  if (n->fwd_training) {
    double s[BN_CB] = {0}, ss[BN_CB] = {0}, mu[BN_CB];
    for (int b = 0; b < B; b++)
      for (int c = 0; c < nc; c++) s[c] += (double)x[(size_t)b * C + c];
    for (int c = 0; c < nc; c++) mu[c] = s[c] / (double)B;
    for (int b = 0; b < B; b++)
      for (int c = 0; c < nc; c++) {
        double d = (double)x[(size_t)b * C + c] - mu[c];
        ss[c] += d * d;
      }
    float *rmean = m->state + n->soff[0] + c0, *rvar = m->state + n->soff[1] + c0, mo = n->momentum;
    for (int c = 0; c < nc; c++) {
      double var = ss[c] / (double)B;
      mean[c] = (float)mu[c];
      rs[c] = (float)(1.0 / sqrt(var + n->eps));
      rmean[c] = (1.0f - mo) * rmean[c] + mo * mean[c];
      rvar[c] = (1.0f - mo) * rvar[c] + mo * (float)(var * (double)B / (double)(B - 1));
    }
  } else {
    for (int c = 0; c < nc; c++) {
      mean[c] = m->state[n->soff[0] + c0 + c];
      rs[c] = 1.0f / sqrtf(m->state[n->soff[1] + c0 + c] + n->eps);
    }
  }
  for (int c = 0; c < nc; c++) rstd[c] = rs[c];
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * C;
    for (int c = 0; c < nc; c++) {
      float h = (x[o + c] - mean[c]) * rs[c];
      xhat[o + c] = h;
      out[o + c] = gam[c] * h + bet[c];
    }
  }
}

static int bn_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  size_t P = (size_t)n->H * n->W;
  if (n->fwd_training && (size_t)B * P < 2)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: layer '%s': batch norm in training needs more than 1 value per "
                           "channel (batch %d of %zu)",
                           n->name, B, P);
  bn_job j = bn_job_of(m, n, B);
  j.x = nn__in_out(m, n, 0);
  if (P == 1)
    nn__parallel_for((n->C + BN_CB - 1) / BN_CB, bn1_fwd_task, &j);
  else
    nn__parallel_for(n->C, bn_fwd_task, &j);
  if (n->fwd_training) m->state[n->soff[2]] += 1.0f;
  return 0;
}

NN__CLONES static void bn_bwd_task(void *vc, int c, int th) {
  const bn_job *j = vc;
  nn__node *n = j->n;
  nn_model *m = j->m;
  int B = j->B;
  size_t P = j->P, M = j->M, stride = j->stride;
  const float *xhat = n->cache + (size_t)c * P, *dy = n->dout + (size_t)c * P;
  double sdy, sdyx;
#define BN_X(r, i) (double)(r)[i]
  BN_SUM8(sdy, dy, stride, B, P, BN_X);
#undef BN_X
  {
    /* dy * xhat: the two rows side by side (xhat lies at the same offsets as dy) */
    ptrdiff_t dh = xhat - dy;
#define BN_DH(r, i) ((double)(r)[i] * (double)(r)[(i) + dh])
    BN_SUM8(sdyx, dy, stride, B, P, BN_DH);
#undef BN_DH
  }
  m->grads[n->poff[0] + c] += (float)sdyx;
  m->grads[n->poff[1] + c] += (float)sdy;
  if (!j->dx) return;
  float k = m->params[n->poff[0] + c] * n->cache[(size_t)m->max_batch * n->F + c];
  float a = n->fwd_training ? (float)(sdy / (double)M) : 0.0f;
  float bq = n->fwd_training ? (float)(sdyx / (double)M) : 0.0f;
  float *dx = j->dx + (size_t)c * P;
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * stride;
    NN__PUT_LOOP(j->acc, dx + o, P, p, k * (dy[o + p] - a - xhat[o + p] * bq));
  }
}

NN__CLONES static void bn1_bwd_task(void *vc, int blk, int th) {
  const bn_job *j = vc;
  nn__node *n = j->n;
  nn_model *m = j->m;
  int B = j->B, C = n->C, c0 = blk * BN_CB, nc = C - c0 < BN_CB ? C - c0 : BN_CB;
  const float *xhat = n->cache + c0, *dy = n->dout + c0;
  double sdy[BN_CB] = {0}, sdyx[BN_CB] = {0};
  for (int b = 0; b < B; b++)
    for (int c = 0; c < nc; c++) {
      size_t o = (size_t)b * C + c;
      sdy[c] += (double)dy[o];
      sdyx[c] += (double)dy[o] * (double)xhat[o];
    }
  float *dg = m->grads + n->poff[0] + c0, *dbt = m->grads + n->poff[1] + c0;
  for (int c = 0; c < nc; c++) dg[c] += (float)sdyx[c], dbt[c] += (float)sdy[c];
  if (!j->dx) return;
  float k[BN_CB], a[BN_CB], bq[BN_CB];
  const float *gam = m->params + n->poff[0] + c0;
  const float *rstd = n->cache + (size_t)m->max_batch * n->F + c0;
  for (int c = 0; c < nc; c++) {
    k[c] = gam[c] * rstd[c];
    a[c] = n->fwd_training ? (float)(sdy[c] / (double)B) : 0.0f;
    bq[c] = n->fwd_training ? (float)(sdyx[c] / (double)B) : 0.0f;
  }
  float *dx = j->dx + c0;
  for (int b = 0; b < B; b++) {
    size_t o = (size_t)b * C;
    NN__PUT_LOOP(j->acc, dx + o, (size_t)nc, c, k[c] * (dy[o + c] - a[c] - xhat[o + c] * bq[c]));
  }
}

static void bn_backward(nn_model *m, nn__node *n, int B) {
  bn_job j = bn_job_of(m, n, B);
  j.dx = nn__dinput(m, n, 0, &j.acc);
  if (j.P == 1)
    nn__parallel_for((n->C + BN_CB - 1) / BN_CB, bn1_bwd_task, &j);
  else
    nn__parallel_for(n->C, bn_bwd_task, &j);
}

const nn__layer_ops nn__cpu_batchnorm = {bn_forward, bn_backward};

static int ln_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *x = nn__in_out(m, n, 0);
  size_t F = (size_t)n->F;
  const float *w = m->params + n->poff[0], *bias = m->params + n->poff[1];
  float *xhat = n->cache, *rstd = n->cache + (size_t)m->max_batch * F;
  for (int s = 0; s < B; s++) {
    const float *xs = x + s * F;
    double sum = 0, ss = 0;
    for (size_t i = 0; i < F; i++) sum += xs[i];
    double mu = sum / (double)F;
    for (size_t i = 0; i < F; i++) ss += ((double)xs[i] - mu) * ((double)xs[i] - mu);
    float rs = (float)(1.0 / sqrt(ss / (double)F + n->eps)), mean = (float)mu;
    rstd[s] = rs;
    float *h = xhat + s * F, *y = n->out + s * F;
    for (size_t i = 0; i < F; i++) {
      h[i] = (xs[i] - mean) * rs;
      y[i] = h[i] * w[i] + bias[i];
    }
  }
  return 0;
}

static void ln_backward(nn_model *m, nn__node *n, int B) {
  size_t F = (size_t)n->F;
  const float *w = m->params + n->poff[0];
  float *dw = m->grads + n->poff[0], *db = m->grads + n->poff[1];
  const float *xhat = n->cache, *rstd = n->cache + (size_t)m->max_batch * F;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  for (int s = 0; s < B; s++) {
    const float *g = n->dout + s * F, *h = xhat + s * F;
    double sd = 0, sdh = 0;
    for (size_t i = 0; i < F; i++) {
      dw[i] += g[i] * h[i];
      db[i] += g[i];
      float d = g[i] * w[i];
      sd += d;
      sdh += (double)d * h[i];
    }
    if (!dx) continue;
    float a = (float)(sd / (double)F), bq = (float)(sdh / (double)F), rs = rstd[s];
    NN__PUT_LOOP(acc, dx + s * F, F, i, rs * (g[i] * w[i] - a - h[i] * bq));
  }
}

const nn__layer_ops nn__cpu_layernorm = {ln_forward, ln_backward};
