/* SPDX-License-Identifier: Apache-2.0 */
/* V-trace targets and advantages (Espeholt et al. 2018, eq. 1 and section 4.2). */
#include <math.h>

#include "algos/algos.h"

/* Shared checks of vtrace() and gae(): sizes and finiteness of every input. */
int onpolicy__check_returns_input(const char *who, int T, int B, const float *discount,
                                  const float *reward, const float *value, const uint8_t *truncated,
                                  const float *final_value, shoal_error *err) {
  if (T < 1 || B < 1)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: T %d and B %d must be >= 1", who, T, B);
  if (!discount || !reward || !value)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: discount, reward and value are required", who);
  if (truncated && !final_value)
    return shoal_error_set(err, SHOAL_EINVAL, "%s: truncated given without final_value", who);
  size_t n = (size_t)T * (size_t)B;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(discount[i]) || !isfinite(reward[i]) || !isfinite(value[i]))
      return shoal_error_set(err, SHOAL_ENAN,
                             "%s: non-finite discount, reward or value at t=%zu, b=%zu", who,
                             i / (size_t)B, i % (size_t)B);
    if (truncated && truncated[i] && !isfinite(final_value[i]))
      return shoal_error_set(err, SHOAL_ENAN, "%s: non-finite final_value at t=%zu, b=%zu", who,
                             i / (size_t)B, i % (size_t)B);
  }
  for (int b = 0; b < B; b++)
    if (!isfinite(value[n + (size_t)b]))
      return shoal_error_set(err, SHOAL_ENAN, "%s: non-finite bootstrap value at b=%d", who, b);
  return 0;
}

int vtrace(int T, int B, const float *log_rho, const float *discount, const float *reward,
           const float *value, const uint8_t *truncated, const float *final_value, float rho_bar,
           float c_bar, float pg_rho_bar, float *vs, float *pg_adv, shoal_error *err) {
  int rc = onpolicy__check_returns_input("vtrace", T, B, discount, reward, value, truncated,
                                         final_value, err);
  if (rc) return rc;
  if (!log_rho || !vs || !pg_adv)
    return shoal_error_set(err, SHOAL_EINVAL, "vtrace: log_rho, vs and pg_adv are required");
  if (!(rho_bar > 0) || !(c_bar > 0) || !(pg_rho_bar > 0))
    return shoal_error_set(err, SHOAL_EINVAL,
                           "vtrace: rho_bar %g, c_bar %g and pg_rho_bar %g must be positive",
                           rho_bar, c_bar, pg_rho_bar);
  for (size_t i = 0; i < (size_t)T * (size_t)B; i++)
    if (isnan(log_rho[i]))
      return shoal_error_set(err, SHOAL_ENAN, "vtrace: NaN log_rho at t=%zu, b=%zu", i / (size_t)B,
                             i % (size_t)B);
  for (int b = 0; b < B; b++) {
    /* acc = v_{t+1} − V(x_{t+1}), 0 past the end of the unroll (v_T = V(x_T)). */
    double acc = 0;
    for (int t = T - 1; t >= 0; t--) {
      size_t i = (size_t)t * B + b;
      double ratio = exp((double)log_rho[i]); /* +inf for huge log_rho: min() caps it */
      double rho = fmin(ratio, (double)rho_bar), c = fmin(ratio, (double)c_bar);
      double pg_rho = fmin(ratio, (double)pg_rho_bar);
      bool cut = truncated && truncated[i];
      double boot = cut ? final_value[i] : value[i + (size_t)B]; /* V'_t */
      double v_next = boot + (cut ? 0.0 : acc);                  /* v'_{t+1} */
      double g = discount[i];
      double delta = rho * (reward[i] + g * boot - value[i]);
      acc = delta + g * c * (cut ? 0.0 : acc);
      vs[i] = (float)(value[i] + acc);
      pg_adv[i] = (float)(pg_rho * (reward[i] + g * v_next - value[i]));
    }
  }
  return 0;
}
