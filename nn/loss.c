/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/loss.c — losses with their gradients, PyTorch's "mean" reduction and optional
 * per-sample weights (importance weights of prioritized replay).
 *
 * Each loss runs in two passes: the first checks the inputs and sums the loss in double
 * (so a large batch loses no precision and an overflow shows as a non-finite loss); the
 * second writes the gradient. On any error nothing is written, neither *loss nor dpred.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/internal.h"

static int check_args(const char *loss, const void *pred, const void *target, int B, int N,
                      shoal_error *err) {
  if (!pred || !target)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: %s: NULL prediction or target", loss);
  if (B <= 0 || N <= 0)
    return shoal_error_set(err, SHOAL_EINVAL, "nn: %s: B=%d and N=%d must be positive", loss, B, N);
  return 0;
}

/* Checks that every value is finite; names the first offender. */
static int check_finite(const char *loss, const char *what, const float *x, size_t n,
                        shoal_error *err) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i]))
      return shoal_error_set(err, SHOAL_ENAN, "nn: %s: %s[%zu] is %g", loss, what, i, (double)x[i]);
  return 0;
}

int nn__loss_check(const char *loss, const float *pred, const void *target, const float *w, int B,
                   int N, bool target_is_float, shoal_error *err) {
  int rc = check_args(loss, pred, target, B, N, err);
  if (rc) return rc;
  size_t n = (size_t)B * (size_t)N;
  if ((rc = check_finite(loss, "prediction", pred, n, err))) return rc;
  if (target_is_float && (rc = check_finite(loss, "target", (const float *)target, n, err)))
    return rc;
  if (w && (rc = check_finite(loss, "weight", w, (size_t)B, err))) return rc;
  return 0;
}

int nn__loss_finish(const char *loss, double sum, float *out, shoal_error *err) {
  float l = (float)sum;
  if (!isfinite(l))
    return shoal_error_set(err, SHOAL_ENAN, "nn: %s: loss is %g (overflow)", loss, sum);
  *out = l;
  return 0;
}

/* l_ij = (p - t)^2;  dl/dp = 2 (p - t) w_i / (B N). */
int nn_mse_loss(float *loss, float *dpred, const float *pred, const float *target, const float *w,
                int B, int N, shoal_error *err) {
  int rc = nn__loss_check("mse_loss", pred, target, w, B, N, true, err);
  if (rc) return rc;
  double sum = 0;
  for (int i = 0; i < B; i++) {
    double s = 0;
    for (int j = 0; j < N; j++) {
      double d = (double)pred[(size_t)i * N + j] - target[(size_t)i * N + j];
      s += d * d;
    }
    sum += (w ? w[i] : 1.0) * s;
  }
  double scale = 1.0 / ((double)B * N);
  if ((rc = nn__loss_finish("mse_loss", sum * scale, loss, err))) return rc;
  if (dpred)
    for (int i = 0; i < B; i++) {
      double c = 2.0 * scale * (w ? w[i] : 1.0);
      for (int j = 0; j < N; j++) {
        size_t k = (size_t)i * N + j;
        dpred[k] = (float)(c * ((double)pred[k] - target[k]));
      }
    }
  return 0;
}

/* PyTorch's HuberLoss: with d = p - t, l = d^2 / 2 when |d| < delta, else
 * delta (|d| - delta / 2); dl/dd = d clamped to [-delta, delta]. */
int nn_huber_loss(float *loss, float *dpred, const float *pred, const float *target, const float *w,
                  int B, int N, float delta, shoal_error *err) {
  int rc = nn__loss_check("huber_loss", pred, target, w, B, N, true, err);
  if (rc) return rc;
  if (!(delta > 0) || !isfinite(delta))
    return shoal_error_set(err, SHOAL_EINVAL, "nn: huber_loss: delta %g must be positive",
                           (double)delta);
  double dl = delta, sum = 0;
  for (int i = 0; i < B; i++) {
    double s = 0;
    for (int j = 0; j < N; j++) {
      double d = (double)pred[(size_t)i * N + j] - target[(size_t)i * N + j];
      double a = fabs(d);
      s += a < dl ? 0.5 * d * d : dl * (a - 0.5 * dl);
    }
    sum += (w ? w[i] : 1.0) * s;
  }
  double scale = 1.0 / ((double)B * N);
  if ((rc = nn__loss_finish("huber_loss", sum * scale, loss, err))) return rc;
  if (dpred)
    for (int i = 0; i < B; i++) {
      double c = scale * (w ? w[i] : 1.0);
      for (int j = 0; j < N; j++) {
        size_t k = (size_t)i * N + j;
        double d = (double)pred[k] - target[k];
        d = d < -dl ? -dl : d > dl ? dl : d;
        dpred[k] = (float)(c * d);
      }
    }
  return 0;
}

/* log sum_c exp(x_c), shifted by the maximum so that no exp overflows. */
static double logsumexp(const float *x, int C) {
  double mx = x[0];
  for (int c = 1; c < C; c++)
    if (x[c] > mx) mx = x[c];
  double s = 0;
  for (int c = 0; c < C; c++) s += exp((double)x[c] - mx);
  return mx + log(s);
}

/* l_i = logsumexp(x_i) - x_i,y_i;  dl/dx_ic = w_i / B (softmax(x_i)_c - [c = y_i]). */
int nn_cross_entropy_loss(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                          const float *w, int B, int C, shoal_error *err) {
  int rc = nn__loss_check("cross_entropy_loss", logits, labels, w, B, C, false, err);
  if (rc) return rc;
  for (int i = 0; i < B; i++)
    if (labels[i] < 0 || labels[i] >= C)
      return shoal_error_set(err, SHOAL_ERANGE,
                             "nn: cross_entropy_loss: label[%d] = %d is outside [0, %d)", i,
                             (int)labels[i], C);
  double sum = 0;
  for (int i = 0; i < B; i++) {
    const float *x = logits + (size_t)i * C;
    sum += (w ? w[i] : 1.0) * (logsumexp(x, C) - x[labels[i]]);
  }
  if ((rc = nn__loss_finish("cross_entropy_loss", sum / B, loss, err))) return rc;
  if (dlogits)
    for (int i = 0; i < B; i++) {
      const float *x = logits + (size_t)i * C;
      float *dx = dlogits + (size_t)i * C;
      double lse = logsumexp(x, C), c = (w ? w[i] : 1.0) / B;
      for (int k = 0; k < C; k++) dx[k] = (float)(c * exp((double)x[k] - lse));
      dx[labels[i]] = (float)((double)dx[labels[i]] - c);
    }
  return 0;
}

/* l_i = -sum_c p_ic log_softmax(x_i)_c;  dl/dx_ik = w_i / B (softmax_k sum_c p_ic - p_ik),
 * which is softmax - p when the row of p sums to 1 (PyTorch's gradient either way). */
int nn_cross_entropy_soft_loss(float *loss, float *dlogits, const float *logits, const float *probs,
                               const float *w, int B, int C, shoal_error *err) {
  int rc = nn__loss_check("cross_entropy_soft_loss", logits, probs, w, B, C, true, err);
  if (rc) return rc;
  double sum = 0;
  for (int i = 0; i < B; i++) {
    const float *x = logits + (size_t)i * C, *p = probs + (size_t)i * C;
    double lse = logsumexp(x, C), s = 0;
    for (int k = 0; k < C; k++) s -= (double)p[k] * ((double)x[k] - lse);
    sum += (w ? w[i] : 1.0) * s;
  }
  if ((rc = nn__loss_finish("cross_entropy_soft_loss", sum / B, loss, err))) return rc;
  if (dlogits)
    for (int i = 0; i < B; i++) {
      const float *x = logits + (size_t)i * C, *p = probs + (size_t)i * C;
      float *dx = dlogits + (size_t)i * C;
      double lse = logsumexp(x, C), c = (w ? w[i] : 1.0) / B, psum = 0;
      for (int k = 0; k < C; k++) psum += p[k];
      for (int k = 0; k < C; k++)
        dx[k] = (float)(c * (exp((double)x[k] - lse) * psum - (double)p[k]));
    }
  return 0;
}

/* l = max(x, 0) - x t + log(1 + exp(-|x|)), the stable form of
 * -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x)));  dl/dx = sigmoid(x) - t. */
int nn_bce_with_logits_loss(float *loss, float *dlogits, const float *logits, const float *targets,
                            const float *w, int B, int N, shoal_error *err) {
  int rc = nn__loss_check("bce_with_logits_loss", logits, targets, w, B, N, true, err);
  if (rc) return rc;
  double sum = 0;
  for (int i = 0; i < B; i++) {
    double s = 0;
    for (int j = 0; j < N; j++) {
      size_t k = (size_t)i * N + j;
      double x = logits[k], t = targets[k];
      s += (x > 0 ? x : 0) - x * t + log1p(exp(-fabs(x)));
    }
    sum += (w ? w[i] : 1.0) * s;
  }
  double scale = 1.0 / ((double)B * N);
  if ((rc = nn__loss_finish("bce_with_logits_loss", sum * scale, loss, err))) return rc;
  if (dlogits)
    for (int i = 0; i < B; i++) {
      double c = scale * (w ? w[i] : 1.0);
      for (int j = 0; j < N; j++) {
        size_t k = (size_t)i * N + j;
        double x = logits[k];
        /* sigmoid without overflow for either sign of x */
        double s = x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
        dlogits[k] = (float)(c * (s - targets[k]));
      }
    }
  return 0;
}
