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
#include <string.h>

#include "nn/cpu/cpu.h"

static int bn_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *x = nn__in_out(m, n, 0);
  int C = n->C;
  size_t P = (size_t)n->H * n->W, M = (size_t)B * P;
  const float *gamma = m->params + n->poff[0], *beta = m->params + n->poff[1];
  float *rmean = m->state + n->soff[0], *rvar = m->state + n->soff[1];
  float *nbt = m->state + n->soff[2];
  float *xhat = n->cache, *rstd = n->cache + (size_t)m->max_batch * n->F;
  if (n->fwd_training && M < 2)
    return shoal_error_set(err, SHOAL_EINVAL,
                           "nn: layer '%s': batch norm in training needs more than 1 value per "
                           "channel (batch %d of %zu)",
                           n->name, B, P);
  for (int c = 0; c < C; c++) {
    float mean, rs;
    if (n->fwd_training) {
      double s = 0, ss = 0;
      for (int b = 0; b < B; b++) {
        const float *xc = x + ((size_t)b * C + c) * P;
        for (size_t p = 0; p < P; p++) s += xc[p];
      }
      double mu = s / (double)M;
      for (int b = 0; b < B; b++) {
        const float *xc = x + ((size_t)b * C + c) * P;
        for (size_t p = 0; p < P; p++) {
          double d = xc[p] - mu;
          ss += d * d;
        }
      }
      double var = ss / (double)M;
      mean = (float)mu;
      rs = (float)(1.0 / sqrt(var + n->eps));
      float mo = n->momentum;
      rmean[c] = (1.0f - mo) * rmean[c] + mo * mean;
      rvar[c] = (1.0f - mo) * rvar[c] + mo * (float)(var * (double)M / (double)(M - 1));
    } else {
      mean = rmean[c];
      rs = 1.0f / sqrtf(rvar[c] + n->eps);
    }
    rstd[c] = rs;
    float g = gamma[c], bt = beta[c];
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (size_t p = 0; p < P; p++) {
        float h = (x[o + p] - mean) * rs;
        xhat[o + p] = h;
        n->out[o + p] = g * h + bt;
      }
    }
  }
  if (n->fwd_training) nbt[0] += 1.0f;
  return 0;
}

static void bn_backward(nn_model *m, nn__node *n, int B) {
  int C = n->C;
  size_t P = (size_t)n->H * n->W, M = (size_t)B * P;
  const float *gamma = m->params + n->poff[0];
  float *dgamma = m->grads + n->poff[0], *dbeta = m->grads + n->poff[1];
  const float *xhat = n->cache, *rstd = n->cache + (size_t)m->max_batch * n->F, *dy = n->dout;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  for (int c = 0; c < C; c++) {
    double sdy = 0, sdyx = 0;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (size_t p = 0; p < P; p++) {
        sdy += dy[o + p];
        sdyx += (double)dy[o + p] * xhat[o + p];
      }
    }
    dgamma[c] += (float)sdyx;
    dbeta[c] += (float)sdy;
    if (!dx) continue;
    float k = gamma[c] * rstd[c];
    if (n->fwd_training) {
      float a = (float)(sdy / (double)M), bq = (float)(sdyx / (double)M);
      for (int b = 0; b < B; b++) {
        size_t o = ((size_t)b * C + c) * P;
        NN__PUT_LOOP(acc, dx + o, P, p, k * (dy[o + p] - a - xhat[o + p] * bq));
      }
    } else {
      for (int b = 0; b < B; b++) {
        size_t o = ((size_t)b * C + c) * P;
        NN__PUT_LOOP(acc, dx + o, P, p, k * dy[o + p]);
      }
    }
  }
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
