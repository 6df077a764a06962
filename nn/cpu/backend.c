/* SPDX-License-Identifier: Apache-2.0 */
/* nn/cpu/backend.c — the CPU backend's table: its layer kernels, and its memory
 * operations, all on host memory (the model's params, grads and state are what the
 * kernels use, so the backend has no mirrors to move and no queue to wait on). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu.h"

static int cpu_create(nn_model *m, shoal_error *err);
static void cpu_destroy(nn_model *m);
static int cpu_build(nn_model *m, shoal_error *err);
static int cpu_check_input(nn_model *m, const float *x, size_t n, shoal_error *err);
static float *cpu_alloc(nn_model *m, size_t n, shoal_error *err);
static void cpu_free_buf(nn_model *m, float *p);
static int cpu_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
static int cpu_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err);
static void cpu_zero(nn_model *m, float *p, size_t n);
static int cpu_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                    const float *target, const float *w, int B, int N, float delta,
                    shoal_error *err);
static int cpu_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                          int N, float alpha, float eps, shoal_error *err);

/* Optional members left NULL take their defaults: no context beyond the arena, no
 * mirrors, nothing queued, the optimizer on the host. */
const nn__backend nn__cpu_backend = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .build = cpu_build,
    .check_input = cpu_check_input,
    .alloc = cpu_alloc,
    .free_buf = cpu_free_buf,
    .to_device = cpu_to_device,
    .to_host = cpu_to_host,
    .zero = cpu_zero,
    .loss = cpu_loss,
    .priorities = cpu_priorities,
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
            [NN__CUSTOM] = &nn__cpu_custom,
        },
};

/* Floats of the per-node cache and of the shared scratch the kernels need for batches
 * up to max_batch. */
static size_t cache_floats(const nn_model *m, const nn__node *n, int max_batch) {
  size_t mb = (size_t)max_batch, F = (size_t)n->F, Hd = (size_t)n->hidden;
  switch (n->kind) {
    case NN__DROPOUT: return mb * F;                  /* mask */
    case NN__BATCHNORM: return mb * F + (size_t)n->C; /* xhat, rstd */
    case NN__LAYERNORM: return mb * F + mb;           /* xhat, rstd */
    case NN__LSTM: return mb * 5 * Hd;                /* gates, tanh(c') */
    case NN__GRU: return mb * 4 * Hd;                 /* r, z, n, W_hn h + b_hn */
    case NN__CUSTOM: return mb * n->c_cps + n->c_cfix; /* what the layer asked for */
    default: return 0;
  }
}

static size_t scratch_floats(const nn_model *m, const nn__node *n, int max_batch) {
  size_t mb = (size_t)max_batch, Hd = (size_t)n->hidden;
  const nn__node *x = n->n_in ? &m->nodes[n->in[0]] : NULL;
  switch (n->kind) {
    case NN__CONV: { /* im2col + GEMM: a group's im2col matrix, its channel-major gradient
                    * and dcol; nn's kernels: packed panels (nn/cpu/convk.c) */
      int K = x->C * n->kh * n->kw, P = n->H * n->W;
      size_t N = (size_t)nn__conv_group(K, P, max_batch) * P;
      size_t gemm = (2 * (size_t)K + (size_t)n->C) * N, own = nn__convk_scratch(m, n, max_batch);
      return gemm > own ? gemm : own; /* the path may be switched after build */
    }
    case NN__CONVT: { /* col or dcol, the channel-major input and its gradient; or nn's
                       * kernels' panels */
      size_t N = mb * (size_t)x->H * x->W;
      size_t gemm = (size_t)n->C * n->kh * n->kw * N + 2 * (size_t)x->C * N;
      size_t own = nn__convk_scratch(m, n, max_batch);
      return gemm > own ? gemm : own;
    }
    case NN__LSTM: return mb * 5 * Hd;
    case NN__GRU: return mb * 6 * Hd;
    default: return 0;
  }
}

/* ---- a model's life -------------------------------------------------------------- */

static int cpu_create(nn_model *m, shoal_error *err) {
  nn__cpu_apply_threads();
  return 0;
}

static void cpu_destroy(nn_model *m) {
  for (int i = 0; i < m->n_nodes; i++) free(m->nodes[i].idx), m->nodes[i].idx = NULL;
  free(m->arena), free(m->scratch);
  m->arena = m->scratch = NULL;
  m->arena_n = m->scratch_n = 0;
}

static bool is_view(nn__kind k) { return k == NN__FLATTEN || k == NN__RESHAPE; }

/* Arena buffers start on 64-byte boundaries (16 floats): aligned vector loads. */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Dense or conv2d + ReLU as one pass (nn__node.fuse_act): where the ReLU is the layer's
 * only reader and the layer is not the output, nothing else needs its pre-activation
 * values, so the pass that would write them and the pass that reads them back go (about
 * a tenth of a small MLP's training step). */
static void fuse(nn_model *m) {
  for (int i = 0; i < m->n_nodes; i++) m->nodes[i].fuse_act = 0, m->nodes[i].fused = false;
  for (int i = 1; i < m->n_nodes; i++) {
    nn__node *a = &m->nodes[i];
    if (!a->live || a->kind != NN__ACT || a->act != NN_RELU) continue;
    int k = a->in[0];
    nn__node *d = &m->nodes[k];
    if (k <= 0 || (d->kind != NN__DENSE && d->kind != NN__CONV) || k == m->output) continue;
    int readers = 0;
    for (int j = 1; j < m->n_nodes; j++) {
      const nn__node *r = &m->nodes[j];
      if (!r->live) continue;
      for (int q = 0; q < r->n_in; q++) readers += r->in[q] == k;
    }
    if (readers == 1) d->fuse_act = i, a->fused = true;
  }
}

/* One arena for every live node's out, dout and cache, carved in node order; one
 * scratch, the largest any node needs, shared because layers run one at a time. */
static int cpu_build(nn_model *m, shoal_error *err) {
  int max_batch = m->max_batch;
  size_t total = 0, scratch = 0;
  for (int i = 0; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    size_t f = (size_t)max_batch * (size_t)n->F;
    size_t own = (i == 0 || is_view(n->kind)) ? 0 : f; /* input and views borrow their out */
    n->cache_n = cache_floats(m, n, max_batch);
    n->n_plans = 0, memset(n->kp, 0, sizeof n->kp); /* the paths depend on max_batch */
    total += round16(own) + round16(f) + round16(n->cache_n);
    size_t s = scratch_floats(m, n, max_batch);
    if (s > scratch) scratch = s;
  }
  m->arena = nn__alloc_floats(total);
  m->arena_n = total;
  m->scratch = nn__alloc_floats(scratch);
  m->scratch_n = scratch;
  if (!m->arena || !m->scratch) {
    cpu_destroy(m);
    return shoal_error_set(err, SHOAL_ENOMEM,
                           "nn: build: out of memory for %zu parameters and %zu activation floats",
                           m->n_params, total);
  }
  float *p = m->arena; /* carved exactly as total was summed */
  for (int i = 0; i < m->n_nodes; i++) {
    nn__node *n = &m->nodes[i];
    if (!n->live) continue;
    size_t f = (size_t)max_batch * (size_t)n->F;
#define TAKE(dst, cnt) \
  do {                 \
    dst = p;           \
    p += round16(cnt); \
  } while (0)
    if (!(i == 0 || is_view(n->kind))) TAKE(n->out, f);
    TAKE(n->dout_buf, f);
    if (n->cache_n)
      TAKE(n->cache, n->cache_n);
    else
      n->cache = NULL;
#undef TAKE
    if (n->kind == NN__MAXPOOL) {
      n->idx = malloc(f * sizeof *n->idx);
      if (!n->idx) {
        cpu_destroy(m);
        return shoal_error_set(err, SHOAL_ENOMEM, "nn: build: layer '%s': out of memory", n->name);
      }
    }
  }
  SHOAL_ASSERT(p == m->arena + total);
  fuse(m);
  return 0;
}

/* ---- the caller's arrays ------------------------------------------------------------ */

/* True when no element is NaN or infinite: all exponent bits set marks both. An OR
 * over integer tests vectorises; an early-exit isfinite loop does not. */
static bool all_finite(const float *x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
  }
  return !bad;
}

/* x comes straight from the caller (no nn_model_to_device on the way), so scan it here. */
static int cpu_check_input(nn_model *m, const float *x, size_t n, shoal_error *err) {
  if (all_finite(x, n)) return 0;
  size_t i = 0, F = (size_t)m->nodes[0].F;
  while (isfinite(x[i])) i++;
  return shoal_error_set(err, SHOAL_ENAN,
                         "nn: forward: input x[%zu] (sample %zu, feature %zu) is %s", i, i / F,
                         i % F, isnan(x[i]) ? "NaN" : "infinite");
}

static float *cpu_alloc(nn_model *m, size_t n, shoal_error *err) {
  float *p = nn__alloc_floats(n);
  if (!p) shoal_error_set(err, SHOAL_ENOMEM, "nn: alloc: out of memory for %zu floats", n);
  return p;
}

static void cpu_free_buf(nn_model *m, float *p) {
  free(p);
}

/* memmove: the caller may copy within one of its own buffers. */
static int cpu_to_device(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err) {
  if (!all_finite(src, n)) {
    size_t i = 0;
    while (isfinite(src[i])) i++;
    return shoal_error_set(err, SHOAL_ENAN, "nn: to_device: src[%zu] is %s", i,
                           isnan(src[i]) ? "NaN" : "infinite");
  }
  if (n) memmove(dst, src, n * sizeof(float));
  return 0;
}

static int cpu_to_host(nn_model *m, float *dst, const float *src, size_t n, shoal_error *err) {
  if (n) memmove(dst, src, n * sizeof(float));
  return 0;
}

static void cpu_zero(nn_model *m, float *p, size_t n) {
  memset(p ? p : m->grads, 0, n * sizeof(float));
}

/* ---- losses -------------------------------------------------------------------------- */

static int cpu_loss(nn_model *m, nn_loss_kind kind, float *loss, float *dpred, const float *pred,
                    const float *target, const float *w, int B, int N, float delta,
                    shoal_error *err) {
  float l = 0;
  int rc = 0;
  switch (kind) {
    case NN_LOSS_MSE: rc = nn_mse_loss(&l, dpred, pred, target, w, B, N, err); break;
    case NN_LOSS_HUBER: rc = nn_huber_loss(&l, dpred, pred, target, w, B, N, delta, err); break;
    case NN_LOSS_BCE_LOGITS:
      rc = nn_bce_with_logits_loss(&l, dpred, pred, target, w, B, N, err);
      break;
    case NN_LOSS_CROSS_ENTROPY:
      rc = nn_cross_entropy_soft_loss(&l, dpred, pred, target, w, B, N, err);
      break;
  }
  if (!rc && loss) *loss = l;
  return rc;
}

/* Sums in double, as nn/cuda's kernel does, so both agree to float rounding. */
static int cpu_priorities(nn_model *m, float *prio, const float *pred, const float *target, int B,
                          int N, float alpha, float eps, shoal_error *err) {
  for (int i = 0; i < B; i++) {
    double s = 0;
    for (int j = 0; j < N; j++)
      s += fabs((double)pred[(size_t)i * N + j] - target[(size_t)i * N + j]);
    prio[i] = (float)pow(s + eps, alpha);
  }
  return 0;
}
