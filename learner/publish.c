/* SPDX-License-Identifier: Apache-2.0 */
/*
 * learner/publish.c — the published parameters' layout (publish.h).
 */
#include "learner/publish.h"

#include <stdlib.h>

int publish_layout(nn_model *m, int extra, rpc_param_entry **out, int *n, shoal_error *err) {
  int nt = nn_model_tensor_count(m);
  rpc_param_entry *l = calloc((size_t)(nt + extra + 1), sizeof *l);
  if (!l) return shoal_error_set(err, SHOAL_ENOMEM, "publish: out of memory for %d tensors", nt);
  int k = 0;
  for (int i = 0; i < nt; i++) {
    nn_tensor_info ti;
    nn_model_tensor(m, i, &ti);
    if (!ti.trainable) continue;
    l[k] =
        (rpc_param_entry){.name = ti.name, .ndim = ti.ndim, .offset = ti.offset, .numel = ti.numel};
    for (int d = 0; d < ti.ndim; d++) l[k].shape[d] = ti.shape[d];
    k++;
  }
  *out = l;
  *n = k;
  return 0;
}
