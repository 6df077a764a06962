/* SPDX-License-Identifier: Apache-2.0 */
/* nn/cpu/cpu.h — what the CPU layer files share: their kernel tables and helpers. */
#ifndef SHOAL_NN_CPU_H
#define SHOAL_NN_CPU_H

#include "nn/internal.h"

/* dst[i] = v (first consumer) or dst[i] += v (later ones), as a loop over i in [0, n).
 * Two loops, not a branch per element, so each vectorises. */
#define NN__PUT_LOOP(acc, dst, n, i, v)                         \
  do {                                                          \
    if (acc) {                                                  \
      for (size_t i = 0; i < (size_t)(n); i++) (dst)[i] += (v); \
    } else {                                                    \
      for (size_t i = 0; i < (size_t)(n); i++) (dst)[i] = (v);  \
    }                                                           \
  } while (0)

static inline float nn__sel(bool c, float a, float b) { return c ? a : b; }

static inline const float *nn__in_out(nn_model *m, nn__node *n, int k) {
  return m->nodes[n->in[k]].out;
}
static inline int nn__in_F(nn_model *m, nn__node *n, int k) { return m->nodes[n->in[k]].F; }

extern const nn__layer_ops nn__cpu_dense, nn__cpu_act, nn__cpu_dropout, nn__cpu_view, nn__cpu_slice,
    nn__cpu_add, nn__cpu_concat, nn__cpu_embedding, nn__cpu_conv, nn__cpu_convt, nn__cpu_maxpool,
    nn__cpu_avgpool, nn__cpu_batchnorm, nn__cpu_layernorm, nn__cpu_lstm, nn__cpu_gru, nn__cpu_mul;

#endif
