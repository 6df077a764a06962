/* nn/cpu/backend.c — the CPU backend's layer table and buffer sizes. */
#include "nn/cpu/cpu.h"

const nn__backend nn__cpu_backend = {
    .name = "cpu",
    .ops =
        {
            [NN__DENSE] = &nn__cpu_dense,
            [NN__CONV] = &nn__cpu_conv,
            [NN__CONVT] = &nn__cpu_convt,
            [NN__MAXPOOL] = &nn__cpu_maxpool,
            [NN__AVGPOOL] = &nn__cpu_avgpool,
            [NN__BATCHNORM] = &nn__cpu_batchnorm,
            [NN__LAYERNORM] = &nn__cpu_layernorm,
            [NN__DROPOUT] = &nn__cpu_dropout,
            [NN__FLATTEN] = &nn__cpu_view,
            [NN__RESHAPE] = &nn__cpu_view,
            [NN__EMBEDDING] = &nn__cpu_embedding,
            [NN__ACT] = &nn__cpu_act,
            [NN__LSTM] = &nn__cpu_lstm,
            [NN__GRU] = &nn__cpu_gru,
            [NN__SLICE] = &nn__cpu_slice,
            [NN__ADD] = &nn__cpu_add,
            [NN__CONCAT] = &nn__cpu_concat,
            [NN__MUL] = &nn__cpu_mul,
        },
};

size_t nn__cpu_cache_floats(const nn_model *m, const nn__node *n, int max_batch) {
  size_t mb = (size_t)max_batch, F = (size_t)n->F, Hd = (size_t)n->hidden;
  switch (n->kind) {
    case NN__DROPOUT: return mb * F;                  /* mask */
    case NN__BATCHNORM: return mb * F + (size_t)n->C; /* xhat, rstd */
    case NN__LAYERNORM: return mb * F + mb;           /* xhat, rstd */
    case NN__LSTM: return mb * 5 * Hd;                /* gates, tanh(c') */
    case NN__GRU: return mb * 4 * Hd;                 /* r, z, n, W_hn h + b_hn */
    default: return 0;
  }
}

size_t nn__cpu_scratch_floats(const nn_model *m, const nn__node *n, int max_batch) {
  size_t mb = (size_t)max_batch, Hd = (size_t)n->hidden;
  const nn__node *x = n->n_in ? &m->nodes[n->in[0]] : NULL;
  switch (n->kind) {
    case NN__CONV: { /* a group's im2col matrix, its channel-major gradient and dcol */
      int K = x->C * n->kh * n->kw, P = n->H * n->W;
      size_t N = (size_t)nn__conv_group(K, P, max_batch) * P;
      return (2 * (size_t)K + (size_t)n->C) * N;
    }
    case NN__CONVT: { /* col or dcol, the channel-major input and its gradient */
      size_t N = mb * (size_t)x->H * x->W;
      return (size_t)n->C * n->kh * n->kw * N + 2 * (size_t)x->C * N;
    }
    case NN__LSTM: return mb * 5 * Hd;
    case NN__GRU: return mb * 6 * Hd;
    default: return 0;
  }
}
