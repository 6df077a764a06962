/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/layers.c — dense, activations, dropout, flatten/reshape, slice, add, concat
 * and embedding on the CPU. Each forward writes n->out (B, F) from its inputs' outputs;
 * each backward reads n->dout and adds parameter gradients, and writes or adds input
 * gradients through nn__dinput.
 */
#include <math.h>
#include <string.h>

#include "nn/cpu/cpu.h"

/* ---- dense: y (B, out) = x (B, in) W^T + b (b = 0 without a bias); W (out, in) ---- */

/* y (B, F) += b per row (b may be NULL), then max(y, 0) if relu: one pass after the
 * product (a row-by-row copy of the bias before it, for sgemm to add to, was a pass of
 * its own and made sgemm read y). */
NN__CLONES static void bias_relu(float *y, const float *b, bool relu, int B, int F) {
  for (int i = 0; i < B; i++) {
    float *r = y + (size_t)i * F;
    if (b && relu)
      for (int j = 0; j < F; j++) r[j] = r[j] + b[j] > 0 ? r[j] + b[j] : 0.0f;
    else if (b)
      for (int j = 0; j < F; j++) r[j] += b[j];
    else
      for (int j = 0; j < F; j++) r[j] = r[j] > 0 ? r[j] : 0.0f;
  }
}

/* One product of a dense layer (ph: NN__PH_FWD, _DW or _DX) on path p (NN__KP_GEMM:
 * nn__sgemm; NN__KP_TILES, _WTILES: nn's own; 0: densek.c's rules) into o: y with the bias
 * and a fused ReLU, dW added into, dx added into when acc. A path that cannot run it (no
 * scratch) leaves it to nn__sgemm. */
static void dense_product(nn_model *m, nn__node *n, int B, int ph, int p, float *o, bool acc) {
  const float *x = nn__in_out(m, n, 0), *dy = n->dout;
  int in = nn__in_F(m, n, 0), out = n->F;
  const float *w = m->params + n->poff[0];
  if (ph == NN__PH_FWD) {
    const bool relu = n->fuse_act > 0; /* then o is the ReLU's out (nn__node.fuse_act) */
    const float *b = n->bias ? m->params + n->poff[1] : NULL;
    if (p != NN__KP_GEMM && nn__densek_forward(p, x, w, b, o, B, in, out, relu)) return;
    nn__sgemm(false, true, B, out, in, 1.0f, x, in, w, in, 0.0f, o, out);
    if (b || relu) bias_relu(o, b, relu, B, out);
  } else if (ph == NN__PH_DW) {
    if (p != NN__KP_GEMM && nn__densek_dw(p, dy, x, o, B, in, out)) return;
    nn__sgemm(true, false, out, in, B, 1.0f, dy, out, x, in, 1.0f, o, in); /* dW += dy^T x */
  } else {
    if (p != NN__KP_GEMM && nn__densek_dx(p, dy, w, o, acc, B, in, out)) return;
    nn__sgemm(false, false, B, in, out, 1.0f, dy, out, w, in, acc ? 1.0f : 0.0f, o, in);
  }
}

/* The planner's tries (nn/cpu/plan.c): dx stored, the rest as the layer runs them. */
static void dense_try(nn_model *m, nn__node *n, int B, int ph, int p, float *o) {
  dense_product(m, n, B, ph, p, o, false);
}

static int dense_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  if (nn__plan_on()) nn__plan_dense(m, n, B, false, dense_try);
  float *y = n->fuse_act > 0 ? m->nodes[n->fuse_act].out : n->out;
  dense_product(m, n, B, NN__PH_FWD, n->kp[NN__PH_FWD], y, false);
  return 0;
}

NN__CLONES static void dense_backward(nn_model *m, nn__node *n, int B) {
  if (nn__plan_on()) nn__plan_dense(m, n, B, true, dense_try);
  const float *dy = n->dout;
  int out = n->F;
  dense_product(m, n, B, NN__PH_DW, n->kp[NN__PH_DW], m->grads + n->poff[0], true);
  if (n->bias) {
    float *db = m->grads + n->poff[1]; /* db += sum over the batch of dy */
    for (int i = 0; i < B; i++) {
      const float *r = dy + (size_t)i * out;
      for (int j = 0; j < out; j++) db[j] += r[j];
    }
  }
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (dx) dense_product(m, n, B, NN__PH_DX, n->kp[NN__PH_DX], dx, acc);
}

const nn__layer_ops nn__cpu_dense = {dense_forward, dense_backward};

/* ---- activations ----------------------------------------------------------------- */

NN__CLONES static int act_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  if (n->fused) return 0; /* its dense or conv2d input wrote it (nn__node.fuse_act) */
  const float *x = nn__in_out(m, n, 0);
  float *y = n->out;
  size_t N = (size_t)B * n->F;
  float a = n->alpha;
  switch (n->act) {
    case NN_RELU:
      for (size_t i = 0; i < N; i++) y[i] = x[i] > 0 ? x[i] : 0.0f;
      break;
    case NN_LEAKY_RELU:
      for (size_t i = 0; i < N; i++) {
        float v = x[i], t = a * v; /* computed on both sides, so the select vectorises */
        y[i] = v > 0 ? v : t;
      }
      break;
    case NN_ELU: /* alpha (e^x - 1) for x <= 0 */
      for (size_t i = 0; i < N; i++) y[i] = x[i] > 0 ? x[i] : a * expm1f(x[i]);
      break;
    case NN_TANH:
      for (size_t i = 0; i < N; i++) y[i] = nn__tanh(x[i]);
      break;
    case NN_SIGMOID:
      for (size_t i = 0; i < N; i++) y[i] = nn__sigmoid(x[i]);
      break;
    case NN_SCALE:
      for (size_t i = 0; i < N; i++) y[i] = a * x[i];
      break;
    case NN_SOFTMAX:
    case NN_LOG_SOFTMAX:
      /* Per sample over its F features, shifted by the max so exp cannot overflow. */
      for (int s = 0; s < B; s++) {
        const float *xs = x + (size_t)s * n->F;
        float *ys = y + (size_t)s * n->F;
        float mx = xs[0];
        for (int j = 1; j < n->F; j++) mx = xs[j] > mx ? xs[j] : mx;
        double sum = 0;
        for (int j = 0; j < n->F; j++) sum += exp((double)(xs[j] - mx));
        if (n->act == NN_SOFTMAX) {
          float inv = (float)(1.0 / sum);
          for (int j = 0; j < n->F; j++) ys[j] = nn__exp_neg(xs[j] - mx) * inv;
        } else {
          float lse = mx + (float)log(sum);
          for (int j = 0; j < n->F; j++) ys[j] = xs[j] - lse;
        }
      }
      break;
  }
  return 0;
}

NN__CLONES static void act_backward(nn_model *m, nn__node *n, int B) {
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  const float *x = nn__in_out(m, n, 0), *y = n->out, *dy = n->dout;
  size_t N = (size_t)B * n->F;
  float a = n->alpha;
  switch (n->act) {
    /* nn__sel reads both sides, so the loads are unconditional and the loop becomes
     * blends instead of a mispredicted branch per element. */
    case NN_RELU: NN__PUT_LOOP(acc, dx, N, i, nn__sel(y[i] > 0, dy[i], 0.0f)); break;
    case NN_LEAKY_RELU: NN__PUT_LOOP(acc, dx, N, i, nn__sel(x[i] > 0, dy[i], a * dy[i])); break;
    case NN_ELU: /* d/dx alpha (e^x - 1) = alpha e^x = y + alpha */
      NN__PUT_LOOP(acc, dx, N, i, nn__sel(x[i] > 0, dy[i], dy[i] * (y[i] + a)));
      break;
    case NN_TANH: NN__PUT_LOOP(acc, dx, N, i, dy[i] * (1.0f - y[i] * y[i])); break;
    case NN_SIGMOID: NN__PUT_LOOP(acc, dx, N, i, dy[i] * y[i] * (1.0f - y[i])); break;
    case NN_SCALE: NN__PUT_LOOP(acc, dx, N, i, a * dy[i]); break;
    case NN_SOFTMAX:
    case NN_LOG_SOFTMAX:
      for (int s = 0; s < B; s++) {
        size_t o = (size_t)s * n->F;
        const float *ys = y + o, *dys = dy + o;
        float *dxs = dx + o;
        double dot = 0;
        if (n->act == NN_SOFTMAX) {
          /* dx_i = y_i (dy_i - sum_j dy_j y_j) */
          for (int j = 0; j < n->F; j++) dot += (double)dys[j] * ys[j];
          float d = (float)dot;
          NN__PUT_LOOP(acc, dxs, n->F, j, ys[j] * (dys[j] - d));
        } else {
          /* dx_i = dy_i - softmax_i sum_j dy_j */
          for (int j = 0; j < n->F; j++) dot += dys[j];
          float d = (float)dot;
          NN__PUT_LOOP(acc, dxs, n->F, j, dys[j] - nn__exp_neg(ys[j]) * d);
        }
      }
      break;
  }
}

const nn__layer_ops nn__cpu_act = {act_forward, act_backward};

/* ---- dropout (inverted): y = x * mask, mask = 1/(1-p) with probability 1-p, else 0 -- */

static int dropout_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *x = nn__in_out(m, n, 0);
  float *y = n->out, *mask = n->cache;
  size_t N = (size_t)B * n->F;
  if (!n->fwd_training || n->p == 0.0f) {
    memcpy(y, x, N * sizeof(float));
    return 0;
  }
  float scale = n->p < 1.0f ? 1.0f / (1.0f - n->p) : 0.0f; /* p = 1 drops everything */
  for (size_t i = 0; i < N; i++) {
    mask[i] = shoal_rng_uniformf(&m->rng) >= n->p ? scale : 0.0f;
    y[i] = x[i] * mask[i];
  }
  return 0;
}

static void dropout_backward(nn_model *m, nn__node *n, int B) {
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  const float *dy = n->dout, *mask = n->cache;
  size_t N = (size_t)B * n->F;
  if (!n->fwd_training || n->p == 0.0f)
    nn__put(dx, dy, N, acc);
  else
    NN__PUT_LOOP(acc, dx, N, i, dy[i] * mask[i]);
}

const nn__layer_ops nn__cpu_dropout = {dropout_forward, dropout_backward};

/* ---- flatten / reshape: views of the input; backward hands the gradient on -------- */

static int view_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  n->out = m->nodes[n->in[0]].out;
  return 0;
}

static void view_backward(nn_model *m, nn__node *n, int B) {
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (dx) nn__put(dx, n->dout, (size_t)B * n->F, acc);
}

const nn__layer_ops nn__cpu_view = {view_forward, view_backward};

/* ---- slice: channels [start, start+count) of each sample ------------------------- */

static int slice_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const nn__node *x = nn__input(m, n, 0);
  size_t hw = (size_t)n->H * n->W, len = (size_t)n->count * hw;
  for (int s = 0; s < B; s++)
    memcpy(n->out + (size_t)s * n->F, x->out + (size_t)s * x->F + (size_t)n->start * hw,
           len * sizeof(float));
  return 0;
}

static void slice_backward(nn_model *m, nn__node *n, int B) {
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  int Fx = nn__in_F(m, n, 0);
  size_t hw = (size_t)n->H * n->W, len = (size_t)n->count * hw;
  if (!acc) memset(dx, 0, (size_t)B * Fx * sizeof(float));
  for (int s = 0; s < B; s++) {
    float *d = dx + (size_t)s * Fx + (size_t)n->start * hw;
    const float *g = n->dout + (size_t)s * n->F;
    for (size_t i = 0; i < len; i++) d[i] += g[i];
  }
}

const nn__layer_ops nn__cpu_slice = {slice_forward, slice_backward};

/* ---- add: y = a + b ---------------------------------------------------------------- */

static int add_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *a = nn__in_out(m, n, 0), *b = nn__in_out(m, n, 1);
  size_t N = (size_t)B * n->F;
  for (size_t i = 0; i < N; i++) n->out[i] = a[i] + b[i];
  return 0;
}

static void add_backward(nn_model *m, nn__node *n, int B) {
  for (int k = 0; k < 2; k++) {
    bool acc;
    float *dx = nn__dinput(m, n, k, &acc);
    if (dx) nn__put(dx, n->dout, (size_t)B * n->F, acc);
  }
}

const nn__layer_ops nn__cpu_add = {add_forward, add_backward};

/* ---- concat along C: y = [a | b] per sample ---------------------------------------- */

static int concat_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *a = nn__in_out(m, n, 0), *b = nn__in_out(m, n, 1);
  size_t fa = (size_t)nn__in_F(m, n, 0), fb = (size_t)nn__in_F(m, n, 1);
  for (int s = 0; s < B; s++) {
    float *y = n->out + (size_t)s * n->F;
    memcpy(y, a + s * fa, fa * sizeof(float));
    memcpy(y + fa, b + s * fb, fb * sizeof(float));
  }
  return 0;
}

static void concat_backward(nn_model *m, nn__node *n, int B) {
  size_t off = 0;
  for (int k = 0; k < 2; k++) {
    size_t f = (size_t)nn__in_F(m, n, k);
    bool acc;
    float *dx = nn__dinput(m, n, k, &acc);
    if (dx)
      for (int s = 0; s < B; s++) nn__put(dx + s * f, n->dout + (size_t)s * n->F + off, f, acc);
    off += f;
  }
}

const nn__layer_ops nn__cpu_concat = {concat_forward, concat_backward};

/* ---- mul: y = a ⊙ b, b of a's shape or one value per sample --------------------------
 * da = dy ⊙ b; db = dy ⊙ a, or Σ_i dy_i a_i per sample when b is broadcast. */

static int mul_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *a = nn__in_out(m, n, 0), *b = nn__in_out(m, n, 1);
  size_t F = (size_t)n->F;
  if (nn__in_F(m, n, 1) == 1 && F > 1) {
    for (int s = 0; s < B; s++) {
      float v = b[s];
      const float *x = a + s * F;
      float *y = n->out + s * F;
      for (size_t i = 0; i < F; i++) y[i] = x[i] * v;
    }
  } else {
    for (size_t i = 0; i < (size_t)B * F; i++) n->out[i] = a[i] * b[i];
  }
  return 0;
}

static void mul_backward(nn_model *m, nn__node *n, int B) {
  const float *a = nn__in_out(m, n, 0), *b = nn__in_out(m, n, 1), *dy = n->dout;
  size_t F = (size_t)n->F;
  bool bcast = nn__in_F(m, n, 1) == 1 && F > 1, acc;
  float *da = nn__dinput(m, n, 0, &acc);
  if (da) {
    if (bcast) {
      for (int s = 0; s < B; s++) {
        float v = b[s];
        float *d = da + s * F;
        const float *g = dy + s * F;
        NN__PUT_LOOP(acc, d, F, i, g[i] * v);
      }
    } else {
      NN__PUT_LOOP(acc, da, (size_t)B * F, i, dy[i] * b[i]);
    }
  }
  float *db = nn__dinput(m, n, 1, &acc);
  if (db) {
    if (bcast) {
      for (int s = 0; s < B; s++) {
        double t = 0;
        for (size_t i = 0; i < F; i++) t += (double)dy[s * F + i] * a[s * F + i];
        db[s] = acc ? db[s] + (float)t : (float)t;
      }
    } else {
      NN__PUT_LOOP(acc, db, (size_t)B * F, i, dy[i] * a[i]);
    }
  }
}

const nn__layer_ops nn__cpu_mul = {mul_forward, mul_backward};

/* ---- embedding: y[s, j*dim .. ] = W[x[s, j]]; W (num, dim) ----------------------- */

static int embedding_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *x = nn__in_out(m, n, 0);
  int Fx = nn__in_F(m, n, 0), dim = n->dim;
  const float *w = m->params + n->poff[0];
  for (int s = 0; s < B; s++) {
    for (int j = 0; j < Fx; j++) {
      float v = x[(size_t)s * Fx + j];
      if (!(v >= 0 && v < (float)n->num && v == floorf(v)))
        return shoal_error_set(err, SHOAL_ERANGE,
                               "nn: layer '%s': index %g (sample %d, position %d) is not an "
                               "integer in [0, %d)",
                               n->name, (double)v, s, j, n->num);
      memcpy(n->out + ((size_t)s * Fx + j) * dim, w + (size_t)v * dim, (size_t)dim * sizeof(float));
    }
  }
  return 0;
}

static void embedding_backward(nn_model *m, nn__node *n, int B) {
  const float *x = nn__in_out(m, n, 0);
  int Fx = nn__in_F(m, n, 0), dim = n->dim;
  float *dw = m->grads + n->poff[0];
  for (size_t i = 0; i < (size_t)B * Fx; i++) {
    float *d = dw + (size_t)x[i] * dim;
    const float *g = n->dout + i * dim;
    for (int k = 0; k < dim; k++) d[k] += g[k];
  }
  /* Indices have no gradient; a caller asking for dx gets zeros there. */
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (dx && !acc) memset(dx, 0, (size_t)B * Fx * sizeof(float));
}

const nn__layer_ops nn__cpu_embedding = {embedding_forward, embedding_backward};
