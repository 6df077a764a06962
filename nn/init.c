/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/init.c — initialisers with torch.nn.init's formulas, drawing from shoal_rng so a
 * seed fixes every weight.
 */
#include <math.h>
#include <stdlib.h>

#include "nn/nn.h"

void nn_init_zeros(float *w, size_t n) {
  for (size_t i = 0; i < n; i++) w[i] = 0.0f;
}

void nn_init_uniform(float *w, size_t n, float lo, float hi, shoal_rng *rng) {
  double a = lo, span = (double)hi - lo;
  for (size_t i = 0; i < n; i++) {
    float v = (float)(a + span * shoal_rng_uniform(rng));
    /* rounding to float can land on hi; keep the interval half-open as documented */
    w[i] = v < hi || !(span > 0) ? v : lo;
  }
}

static void init_normal(float *w, size_t n, double std, shoal_rng *rng) {
  for (size_t i = 0; i < n; i++) w[i] = (float)(std * shoal_rng_normal(rng));
}

/* Glorot & Bengio (2010): U(-a, a) with a = gain sqrt(6 / (fan_in + fan_out)). */
void nn_init_xavier_uniform(float *w, size_t n, int fan_in, int fan_out, float gain,
                            shoal_rng *rng) {
  SHOAL_ASSERT(fan_in > 0 && fan_out > 0);
  float a = (float)(gain * sqrt(6.0 / ((double)fan_in + fan_out)));
  nn_init_uniform(w, n, -a, a, rng);
}

/* N(0, std^2) with std = gain sqrt(2 / (fan_in + fan_out)). */
void nn_init_xavier_normal(float *w, size_t n, int fan_in, int fan_out, float gain,
                           shoal_rng *rng) {
  SHOAL_ASSERT(fan_in > 0 && fan_out > 0);
  init_normal(w, n, gain * sqrt(2.0 / ((double)fan_in + fan_out)), rng);
}

/* He et al. (2015) for ReLU (gain sqrt 2), fan_in mode: bound = gain sqrt(3 / fan_in). */
void nn_init_kaiming_uniform(float *w, size_t n, int fan_in, shoal_rng *rng) {
  SHOAL_ASSERT(fan_in > 0);
  float a = (float)sqrt(6.0 / fan_in);
  nn_init_uniform(w, n, -a, a, rng);
}

/* std = gain / sqrt(fan_in). */
void nn_init_kaiming_normal(float *w, size_t n, int fan_in, shoal_rng *rng) {
  SHOAL_ASSERT(fan_in > 0);
  init_normal(w, n, sqrt(2.0 / fan_in), rng);
}

/* Saxe et al. (2013) as torch.nn.init.orthogonal_: the Q factor of a QR decomposition
 * of a normal (max x min) matrix, with the signs of R's diagonal made positive, and
 * transposed when rows < cols. Q comes from modified Gram-Schmidt run twice in double
 * ("twice is enough", Giraud et al. 2005), whose R has a positive diagonal by
 * construction, so it is the same Q as torch's sign-corrected Householder QR. */
int nn_init_orthogonal(float *w, int rows, int cols, float gain, shoal_rng *rng) {
  if (rows <= 0 || cols <= 0) return SHOAL_EINVAL;
  int m = rows > cols ? rows : cols, k = rows > cols ? cols : rows;
  /* q: k columns of length m, stored column by column */
  double *q = malloc((size_t)m * k * sizeof *q);
  if (!q) return SHOAL_ENOMEM;
  /* Draw as torch fills its (rows, cols) normal matrix, row-major; torch then
   * transposes when rows < cols, so columns of the (m, k) matrix are rows of ours. */
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++) {
      double v = shoal_rng_normal(rng);
      if (rows >= cols)
        q[(size_t)j * m + i] = v; /* column j, entry i */
      else
        q[(size_t)i * m + j] = v; /* column i of the transposed matrix, entry j */
    }
  for (int j = 0; j < k; j++) {
    double *v = q + (size_t)j * m;
    for (int pass = 0; pass < 2; pass++)
      for (int i = 0; i < j; i++) {
        const double *u = q + (size_t)i * m;
        double dot = 0;
        for (int r = 0; r < m; r++) dot += u[r] * v[r];
        for (int r = 0; r < m; r++) v[r] -= dot * u[r];
      }
    double norm = 0;
    for (int r = 0; r < m; r++) norm += v[r] * v[r];
    norm = sqrt(norm);
    if (!(norm > 1e-300)) { /* a rank-deficient draw: probability zero, but do not divide */
      free(q);
      return SHOAL_EINTERNAL;
    }
    for (int r = 0; r < m; r++) v[r] /= norm;
  }
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < cols; j++)
      w[(size_t)i * cols + j] =
          (float)(gain * (rows >= cols ? q[(size_t)j * m + i] : q[(size_t)i * m + j]));
  free(q);
  return 0;
}
