/* SPDX-License-Identifier: Apache-2.0 */
/* Generalised advantage estimation (Schulman et al. 2016, eq. 16), computed backwards. */
#include <math.h>

#include "algos/algos.h"

int onpolicy__check_returns_input(const char *who, int T, int B, const float *discount,
                                  const float *reward, const float *value, const uint8_t *truncated,
                                  const float *final_value, shoal_error *err);

int gae(int T, int B, const float *discount, const float *reward, const float *value,
        const uint8_t *truncated, const float *final_value, float lambda, float *adv, float *ret,
        shoal_error *err) {
  int rc = onpolicy__check_returns_input("gae", T, B, discount, reward, value, truncated,
                                         final_value, err);
  if (rc) return rc;
  if (!adv) return shoal_error_set(err, SHOAL_EINVAL, "gae: adv is required");
  if (!(lambda >= 0 && lambda <= 1))
    return shoal_error_set(err, SHOAL_EINVAL, "gae: lambda %g outside [0, 1]", lambda);
  for (int b = 0; b < B; b++) {
    double next = 0; /* A_{t+1} */
    for (int t = T - 1; t >= 0; t--) {
      size_t i = (size_t)t * B + b;
      bool cut = truncated && truncated[i];
      double boot = cut ? final_value[i] : value[i + (size_t)B];
      double g = discount[i];
      double delta = reward[i] + g * boot - value[i];
      next = delta + g * lambda * (cut ? 0.0 : next);
      adv[i] = (float)next;
      if (ret) ret[i] = (float)(next + value[i]);
    }
  }
  return 0;
}
