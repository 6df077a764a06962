/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/conv.c — conv2d and conv-transpose2d by im2col/col2im and GEMMs over many
 * samples at once, max-pool and avg-pool.
 *
 * Layout: the im2col matrix of g samples is (K, g*P) with K = C_in*kh*kw and
 * P = Ho*Wo, sample s in columns [s*P, (s+1)*P), so one GEMM does the g samples (a
 * per-sample GEMM with P = 49 columns, as in Nature-DQN's last conv, runs far below
 * the sgemm rate). The product comes out channel-major (C_out, g*P) and is scattered
 * into NCHW. conv2d takes g as large as keeps the matrix in cache; conv-transpose2d
 * does the whole batch.
 */
#include <float.h>
#include <string.h>

#include "nn/cpu/cpu.h"

/* First and one-past-last output column o with 0 <= o*s + off < W. */
static inline void valid_range(int off, int s, int W, int Wo, int *lo, int *hi) {
  int a = -off; /* o*s >= -off */
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  int b = W - off; /* o*s < W - off */
  int h = b <= 0 ? 0 : (b + s - 1) / s;
  *hi = h < Wo ? h : Wo;
  if (*lo > *hi) *lo = *hi;
}

void nn__im2col(const float *x, int C, int H, int W, int kh, int kw, int stride, int pad, int dil,
                int Ho, int Wo, float *col, int ldc) {
  for (int c = 0; c < C; c++) {
    const float *xc = x + (size_t)c * H * W;
    for (int ki = 0; ki < kh; ki++) {
      for (int kj = 0; kj < kw; kj++) {
        float *row = col + (size_t)((c * kh + ki) * kw + kj) * ldc;
        int lo, hi;
        valid_range(kj * dil - pad, stride, W, Wo, &lo, &hi);
        for (int oh = 0; oh < Ho; oh++) {
          float *r = row + (size_t)oh * Wo;
          int ih = oh * stride - pad + ki * dil;
          if (ih < 0 || ih >= H) {
            memset(r, 0, (size_t)Wo * sizeof(float));
            continue;
          }
          const float *xr = xc + (size_t)ih * W + kj * dil - pad;
          for (int ow = 0; ow < lo; ow++) r[ow] = 0;
          if (stride == 1)
            memcpy(r + lo, xr + lo, (size_t)(hi - lo) * sizeof(float));
          else
            for (int ow = lo; ow < hi; ow++) r[ow] = xr[ow * stride];
          for (int ow = hi; ow < Wo; ow++) r[ow] = 0;
        }
      }
    }
  }
}

void nn__col2im(const float *col, int ldc, int C, int H, int W, int kh, int kw, int stride, int pad,
                int dil, int Ho, int Wo, float *x) {
  for (int c = 0; c < C; c++) {
    float *xc = x + (size_t)c * H * W;
    for (int ki = 0; ki < kh; ki++) {
      for (int kj = 0; kj < kw; kj++) {
        const float *row = col + (size_t)((c * kh + ki) * kw + kj) * ldc;
        int lo, hi;
        valid_range(kj * dil - pad, stride, W, Wo, &lo, &hi);
        for (int oh = 0; oh < Ho; oh++) {
          int ih = oh * stride - pad + ki * dil;
          if (ih < 0 || ih >= H) continue;
          const float *r = row + (size_t)oh * Wo;
          float *xr = xc + (size_t)ih * W + kj * dil - pad;
          if (stride == 1)
            for (int ow = lo; ow < hi; ow++) xr[ow] += r[ow];
          else
            for (int ow = lo; ow < hi; ow++) xr[ow * stride] += r[ow];
        }
      }
    }
  }
}

/* NCHW (B, C, P) <-> channel-major (C, B*P). */
static void to_cm(const float *x, int B, int C, int P, float *y) {
  for (int s = 0; s < B; s++)
    for (int c = 0; c < C; c++)
      memcpy(y + ((size_t)c * B + s) * P, x + ((size_t)s * C + c) * P, (size_t)P * sizeof(float));
}

/* ---- conv2d: y = W * x + b; W (C_out, C_in, kh, kw) ------------------------------ */
/* Samples go through in groups whose im2col matrix stays in cache (about 1 MB): one
 * GEMM per group, N = g*P columns. Backward rebuilds the group's matrix rather than
 * keep the whole batch's, which would stream tens of MB through memory twice. */

int nn__conv_group(int K, int P, int max_batch) {
  int g = (int)(NN__COL_BUDGET / ((size_t)K * P));
  if (g < 1) g = 1;
  return g < max_batch ? g : max_batch;
}

static void im2col_group(const nn__node *xn, const nn__node *n, int s0, int gb, float *col) {
  int P = n->H * n->W, N = gb * P;
  for (int s = 0; s < gb; s++)
    nn__im2col(xn->out + (size_t)(s0 + s) * xn->F, xn->C, xn->H, xn->W, n->kh, n->kw, n->stride,
               n->pad, n->dil, n->H, n->W, col + (size_t)s * P, N);
}

/* The path: n->kp as timing chose it (nn/cpu/plan.c), or 0 and nn__convk_runs' rule. */
static bool on_convk(const nn_model *m, const nn__node *n, int ph) {
  return n->kp[ph] != NN__KP_GEMM && (n->kp[ph] || nn__convk_runs(m, n));
}

static void conv_forward_run(nn_model *m, nn__node *n, int B) {
  if (on_convk(m, n, NN__PH_FWD)) { /* nn's own kernels (nn/cpu/convk.c) */
    nn__convk_forward(m, n, B);
    return;
  }
  const nn__node *xn = nn__input(m, n, 0);
  int P = n->H * n->W, K = xn->C * n->kh * n->kw, Co = n->C;
  int g = nn__conv_group(K, P, m->max_batch);
  const float *w = m->params + n->poff[0];
  const float *b = n->bias ? m->params + n->poff[1] : NULL;
  float *col = m->scratch, *tmp = m->scratch + (size_t)K * g * P;
  const bool relu = n->fuse_act > 0; /* y is the ReLU's out (nn__node.fuse_act) */
  for (int s0 = 0; s0 < B; s0 += g) {
    int gb = B - s0 < g ? B - s0 : g, N = gb * P;
    im2col_group(xn, n, s0, gb, col);
    float *out = (relu ? m->nodes[n->fuse_act].out : n->out) + (size_t)s0 * n->F;
    float *y = gb == 1 ? out : tmp; /* one sample: (C_out, P) is already NCHW */
    nn__sgemm(false, false, Co, N, K, 1.0f, w, K, col, N, 0.0f, y, N);
    for (int s = 0; s < gb; s++) {
      for (int c = 0; c < Co; c++) {
        float *o = out + ((size_t)s * Co + c) * P;
        const float *t = y + ((size_t)c * gb + s) * P;
        float bc = b ? b[c] : 0.0f;
        if (relu) /* as act_forward's ReLU */
          for (int p = 0; p < P; p++) o[p] = t[p] + bc > 0 ? t[p] + bc : 0.0f;
        else
          for (int p = 0; p < P; p++) o[p] = t[p] + bc;
      }
    }
  }
}

static int conv_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  if (nn__plan_on()) nn__plan_conv(m, n, B, false, conv_forward_run);
  conv_forward_run(m, n, B);
  return 0;
}

/* dW and dx run on one side: both im2col + GEMM, or both nn's kernels (each its own). */
static void conv_backward_run(nn_model *m, nn__node *n, int B) {
  if (on_convk(m, n, NN__PH_DW)) { /* nn's own kernels (nn/cpu/convk.c) */
    nn__convk_backward(m, n, B);
    return;
  }
  const nn__node *xn = nn__input(m, n, 0);
  int P = n->H * n->W, K = xn->C * n->kh * n->kw, Co = n->C;
  int g = nn__conv_group(K, P, m->max_batch);
  const float *w = m->params + n->poff[0];
  float *dw = m->grads + n->poff[0], *db = n->bias ? m->grads + n->poff[1] : NULL;
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  float *col = m->scratch, *gcm = col + (size_t)K * g * P, *dcol = gcm + (size_t)Co * g * P;
  for (int s0 = 0; s0 < B; s0 += g) {
    int gb = B - s0 < g ? B - s0 : g, N = gb * P;
    im2col_group(xn, n, s0, gb, col);
    const float *dy = n->dout + (size_t)s0 * n->F, *gr = dy;
    if (gb > 1) {
      to_cm(dy, gb, Co, P, gcm);
      gr = gcm;
    }
    for (int c = 0; db && c < Co; c++) {
      const float *r = gr + (size_t)c * N;
      float t = 0;
      for (int i = 0; i < N; i++) t += r[i];
      db[c] += t;
    }
    nn__sgemm(false, true, Co, K, N, 1.0f, gr, N, col, N, 1.0f, dw, K); /* dW += g col^T */
    if (!dx) continue;
    nn__sgemm(true, false, K, N, Co, 1.0f, w, K, gr, N, 0.0f, dcol, N); /* dcol = W^T g */
    float *d = dx + (size_t)s0 * xn->F;
    if (!acc) memset(d, 0, (size_t)gb * xn->F * sizeof(float));
    for (int s = 0; s < gb; s++)
      nn__col2im(dcol + (size_t)s * P, N, xn->C, xn->H, xn->W, n->kh, n->kw, n->stride, n->pad,
                 n->dil, n->H, n->W, d + (size_t)s * xn->F);
  }
}

static void conv_backward(nn_model *m, nn__node *n, int B) {
  if (nn__plan_on()) nn__plan_conv(m, n, B, true, conv_backward_run);
  conv_backward_run(m, n, B);
}

const nn__layer_ops nn__cpu_conv = {conv_forward, conv_backward};

/* ---- conv-transpose2d: the adjoint of conv2d; W (C_in, C_out, kh, kw) ------------- */
/* Forward: col (C_out*kh*kw, B*P_in) = W^T x_cm, then col2im into y. Backward:
 * dcol = im2col(dy), dW += x_cm dcol^T, dx_cm = W dcol. */

/* The paths as for conv2d (on_convk), in the node's own terms: its forward is the conv's
 * dx, its dx the conv's forward. */
static void convt_forward_run(nn_model *m, nn__node *n, int B) {
  if (on_convk(m, n, NN__PH_FWD)) {
    nn__convk_t_forward(m, n, B);
    return;
  }
  const nn__node *xn = nn__input(m, n, 0);
  int Pin = xn->H * xn->W, N = B * Pin, Ci = xn->C, Kc = n->C * n->kh * n->kw;
  const float *w = m->params + n->poff[0];
  const float *b = n->bias ? m->params + n->poff[1] : NULL;
  const float *xg = xn->out;
  float *col = m->scratch;
  if (B > 1) {
    float *t = m->scratch + (size_t)Kc * N;
    to_cm(xn->out, B, Ci, Pin, t);
    xg = t;
  }
  nn__sgemm(true, false, Kc, N, Ci, 1.0f, w, Kc, xg, N, 0.0f, col, N);
  memset(n->out, 0, (size_t)B * n->F * sizeof(float));
  int P = n->H * n->W;
  for (int s = 0; s < B; s++) {
    float *y = n->out + (size_t)s * n->F;
    nn__col2im(col + (size_t)s * Pin, N, n->C, n->H, n->W, n->kh, n->kw, n->stride, n->pad, 1,
               xn->H, xn->W, y);
    for (int c = 0; b && c < n->C; c++)
      for (int p = 0; p < P; p++) y[(size_t)c * P + p] += b[c];
  }
}

static int convt_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  if (nn__plan_on()) nn__plan_conv(m, n, B, false, convt_forward_run);
  convt_forward_run(m, n, B);
  return 0;
}

/* dW and dx on one side, as conv2d's. */
static void convt_backward_run(nn_model *m, nn__node *n, int B) {
  if (on_convk(m, n, NN__PH_DW)) {
    nn__convk_t_backward(m, n, B);
    return;
  }
  const nn__node *xn = nn__input(m, n, 0);
  int Pin = xn->H * xn->W, N = B * Pin, Ci = xn->C, Kc = n->C * n->kh * n->kw;
  int P = n->H * n->W;
  const float *w = m->params + n->poff[0];
  float *dw = m->grads + n->poff[0], *db = n->bias ? m->grads + n->poff[1] : NULL;
  float *dcol = m->scratch;
  for (int s = 0; s < B; s++) {
    const float *g = n->dout + (size_t)s * n->F;
    nn__im2col(g, n->C, n->H, n->W, n->kh, n->kw, n->stride, n->pad, 1, xn->H, xn->W,
               dcol + (size_t)s * Pin, N);
    for (int c = 0; db && c < n->C; c++) {
      float t = 0;
      for (int p = 0; p < P; p++) t += g[(size_t)c * P + p];
      db[c] += t;
    }
  }
  const float *xg = xn->out;
  if (B > 1) {
    float *t = m->scratch + (size_t)Kc * N;
    to_cm(xn->out, B, Ci, Pin, t);
    xg = t;
  }
  nn__sgemm(false, true, Ci, Kc, N, 1.0f, xg, N, dcol, N, 1.0f, dw, Kc);
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  if (B == 1) {
    nn__sgemm(false, false, Ci, N, Kc, 1.0f, w, Kc, dcol, N, acc ? 1.0f : 0.0f, dx, N);
    return;
  }
  float *dxg = m->scratch + (size_t)Kc * N + (size_t)Ci * N;
  nn__sgemm(false, false, Ci, N, Kc, 1.0f, w, Kc, dcol, N, 0.0f, dxg, N);
  for (int s = 0; s < B; s++)
    for (int c = 0; c < Ci; c++)
      nn__put(dx + ((size_t)s * Ci + c) * Pin, dxg + ((size_t)c * B + s) * Pin, (size_t)Pin, acc);
}

static void convt_backward(nn_model *m, nn__node *n, int B) {
  if (nn__plan_on()) nn__plan_conv(m, n, B, true, convt_backward_run);
  convt_backward_run(m, n, B);
}

const nn__layer_ops nn__cpu_convt = {convt_forward, convt_backward};

/* ---- pools (PyTorch's floor mode; padding is -inf for max, counted for avg) ------- */

static int maxpool_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const nn__node *xn = nn__input(m, n, 0);
  int k = n->kh, st = n->stride, pd = n->pad, H = xn->H, W = xn->W;
  for (int sc = 0; sc < B * n->C; sc++) {
    const float *x = xn->out + (size_t)sc * H * W;
    float *y = n->out + (size_t)sc * n->H * n->W;
    int32_t *ix = n->idx + (size_t)sc * n->H * n->W;
    for (int oh = 0; oh < n->H; oh++) {
      int h0 = oh * st - pd, h1 = h0 + k;
      h0 = h0 < 0 ? 0 : h0, h1 = h1 > H ? H : h1;
      for (int ow = 0; ow < n->W; ow++) {
        int w0 = ow * st - pd, w1 = w0 + k;
        w0 = w0 < 0 ? 0 : w0, w1 = w1 > W ? W : w1;
        float best = -FLT_MAX;
        int bi = h0 * W + w0;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++)
            if (x[ih * W + iw] > best) best = x[ih * W + iw], bi = ih * W + iw;
        y[oh * n->W + ow] = best;
        ix[oh * n->W + ow] = bi;
      }
    }
  }
  return 0;
}

static void maxpool_backward(nn_model *m, nn__node *n, int B) {
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  const nn__node *xn = nn__input(m, n, 0);
  if (!acc) memset(dx, 0, (size_t)B * xn->F * sizeof(float));
  size_t P = (size_t)n->H * n->W, Pi = (size_t)xn->H * xn->W;
  for (size_t sc = 0; sc < (size_t)B * n->C; sc++) {
    float *d = dx + sc * Pi;
    const float *g = n->dout + sc * P;
    const int32_t *ix = n->idx + sc * P;
    for (size_t p = 0; p < P; p++) d[ix[p]] += g[p];
  }
}

const nn__layer_ops nn__cpu_maxpool = {maxpool_forward, maxpool_backward};

/* Floor mode keeps every window inside the padded input, so with count_include_pad
 * (PyTorch's default) the divisor is always k*k. */
static int avgpool_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const nn__node *xn = nn__input(m, n, 0);
  int k = n->kh, st = n->stride, pd = n->pad, H = xn->H, W = xn->W;
  float inv = 1.0f / (float)(k * k);
  for (int sc = 0; sc < B * n->C; sc++) {
    const float *x = xn->out + (size_t)sc * H * W;
    float *y = n->out + (size_t)sc * n->H * n->W;
    for (int oh = 0; oh < n->H; oh++) {
      int h0 = oh * st - pd, h1 = h0 + k;
      h0 = h0 < 0 ? 0 : h0, h1 = h1 > H ? H : h1;
      for (int ow = 0; ow < n->W; ow++) {
        int w0 = ow * st - pd, w1 = w0 + k;
        w0 = w0 < 0 ? 0 : w0, w1 = w1 > W ? W : w1;
        float s = 0;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) s += x[ih * W + iw];
        y[oh * n->W + ow] = s * inv;
      }
    }
  }
  return 0;
}

static void avgpool_backward(nn_model *m, nn__node *n, int B) {
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  const nn__node *xn = nn__input(m, n, 0);
  int k = n->kh, st = n->stride, pd = n->pad, H = xn->H, W = xn->W;
  float inv = 1.0f / (float)(k * k);
  if (!acc) memset(dx, 0, (size_t)B * xn->F * sizeof(float));
  for (int sc = 0; sc < B * n->C; sc++) {
    float *d = dx + (size_t)sc * H * W;
    const float *g = n->dout + (size_t)sc * n->H * n->W;
    for (int oh = 0; oh < n->H; oh++) {
      int h0 = oh * st - pd, h1 = h0 + k;
      h0 = h0 < 0 ? 0 : h0, h1 = h1 > H ? H : h1;
      for (int ow = 0; ow < n->W; ow++) {
        int w0 = ow * st - pd, w1 = w0 + k;
        w0 = w0 < 0 ? 0 : w0, w1 = w1 > W ? W : w1;
        float v = g[oh * n->W + ow] * inv;
        for (int ih = h0; ih < h1; ih++)
          for (int iw = w0; iw < w1; iw++) d[ih * W + iw] += v;
      }
    }
  }
}

const nn__layer_ops nn__cpu_avgpool = {avgpool_forward, avgpool_backward};
