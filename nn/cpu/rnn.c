/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/rnn.c — LSTM and GRU cells with PyTorch's equations (torch.nn.LSTMCell,
 * torch.nn.GRUCell). The recurrent state travels in the feature vector: the LSTM cell
 * reads [x | h | c] and writes [h' | c'], the GRU cell reads [x | h] and writes h'.
 *
 * LSTM: (i, f, g, o) = (s, s, tanh, s)(W_ih x + b_ih + W_hh h + b_hh), s the sigmoid,
 *       c' = f c + i g,  h' = o tanh(c').
 * GRU:  r = s(W_ir x + b_ir + W_hr h + b_hr),  z = s(W_iz x + b_iz + W_hz h + b_hz),
 *       n = tanh(W_in x + b_in + r (W_hn h + b_hn)),  h' = (1 - z) n + z h.
 */
#include <math.h>
#include <string.h>

#include "nn/cpu/cpu.h"

static inline float sigm(float v) { return nn__sigmoid(v); }

/* ---- LSTM cell. cache: gate activations (B, 4Hd), then tanh(c') (B, Hd) ----------- */

static int lstm_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *in = nn__in_out(m, n, 0);
  int I = n->num, Hd = n->hidden, G = 4 * Hd, Fin = I + 2 * Hd;
  const float *wih = m->params + n->poff[0], *whh = m->params + n->poff[1];
  const float *bih = m->params + n->poff[2], *bhh = m->params + n->poff[3];
  float *gates = n->cache, *tc = n->cache + (size_t)m->max_batch * G;
  for (int s = 0; s < B; s++)
    for (int j = 0; j < G; j++) gates[(size_t)s * G + j] = bih[j] + bhh[j];
  nn__sgemm(false, true, B, G, I, 1.0f, in, Fin, wih, I, 1.0f, gates, G);
  nn__sgemm(false, true, B, G, Hd, 1.0f, in + I, Fin, whh, Hd, 1.0f, gates, G);
  for (int s = 0; s < B; s++) {
    float *g = gates + (size_t)s * G;
    const float *c = in + (size_t)s * Fin + I + Hd;
    float *h1 = n->out + (size_t)s * 2 * Hd, *c1 = h1 + Hd, *t = tc + (size_t)s * Hd;
    for (int j = 0; j < Hd; j++) {
      float ig = sigm(g[j]), fg = sigm(g[Hd + j]), gg = nn__tanh(g[2 * Hd + j]),
            og = sigm(g[3 * Hd + j]);
      g[j] = ig, g[Hd + j] = fg, g[2 * Hd + j] = gg, g[3 * Hd + j] = og;
      c1[j] = fg * c[j] + ig * gg;
      t[j] = nn__tanh(c1[j]);
      h1[j] = og * t[j];
    }
  }
  return 0;
}

static void lstm_backward(nn_model *m, nn__node *n, int B) {
  const float *in = nn__in_out(m, n, 0);
  int I = n->num, Hd = n->hidden, G = 4 * Hd, Fin = I + 2 * Hd;
  const float *wih = m->params + n->poff[0], *whh = m->params + n->poff[1];
  float *dwih = m->grads + n->poff[0], *dwhh = m->grads + n->poff[1];
  float *dbih = m->grads + n->poff[2], *dbhh = m->grads + n->poff[3];
  const float *gates = n->cache, *tc = n->cache + (size_t)m->max_batch * G;
  float *dg = m->scratch, *dcp = m->scratch + (size_t)B * G; /* (B, 4Hd), (B, Hd) */
  for (int s = 0; s < B; s++) {
    const float *g = gates + (size_t)s * G, *t = tc + (size_t)s * Hd;
    const float *c = in + (size_t)s * Fin + I + Hd;
    const float *dh1 = n->dout + (size_t)s * 2 * Hd, *dc1 = dh1 + Hd;
    float *d = dg + (size_t)s * G;
    for (int j = 0; j < Hd; j++) {
      float ig = g[j], fg = g[Hd + j], gg = g[2 * Hd + j], og = g[3 * Hd + j];
      float dct = dc1[j] + dh1[j] * og * (1.0f - t[j] * t[j]);
      d[j] = dct * gg * ig * (1.0f - ig);
      d[Hd + j] = dct * c[j] * fg * (1.0f - fg);
      d[2 * Hd + j] = dct * ig * (1.0f - gg * gg);
      d[3 * Hd + j] = dh1[j] * t[j] * og * (1.0f - og);
      dcp[(size_t)s * Hd + j] = dct * fg;
    }
    for (int j = 0; j < G; j++) dbih[j] += d[j], dbhh[j] += d[j];
  }
  nn__sgemm(true, false, G, I, B, 1.0f, dg, G, in, Fin, 1.0f, dwih, I);
  nn__sgemm(true, false, G, Hd, B, 1.0f, dg, G, in + I, Fin, 1.0f, dwhh, Hd);
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  float beta = acc ? 1.0f : 0.0f;
  nn__sgemm(false, false, B, I, G, 1.0f, dg, G, wih, I, beta, dx, Fin);
  nn__sgemm(false, false, B, Hd, G, 1.0f, dg, G, whh, Hd, beta, dx + I, Fin);
  for (int s = 0; s < B; s++)
    nn__put(dx + (size_t)s * Fin + I + Hd, dcp + (size_t)s * Hd, (size_t)Hd, acc);
}

const nn__layer_ops nn__cpu_lstm = {lstm_forward, lstm_backward};

/* ---- GRU cell. cache: r, z, n, W_hn h + b_hn, each (B, Hd), per sample [r|z|n|hn] ---- */

static int gru_forward(nn_model *m, nn__node *n, int B, shoal_error *err) {
  const float *in = nn__in_out(m, n, 0);
  int I = n->num, Hd = n->hidden, G = 3 * Hd, Fin = I + Hd;
  const float *wih = m->params + n->poff[0], *whh = m->params + n->poff[1];
  const float *bih = m->params + n->poff[2], *bhh = m->params + n->poff[3];
  float *gi = m->scratch, *gh = m->scratch + (size_t)B * G;
  for (int s = 0; s < B; s++) {
    memcpy(gi + (size_t)s * G, bih, (size_t)G * sizeof(float));
    memcpy(gh + (size_t)s * G, bhh, (size_t)G * sizeof(float));
  }
  nn__sgemm(false, true, B, G, I, 1.0f, in, Fin, wih, I, 1.0f, gi, G);
  nn__sgemm(false, true, B, G, Hd, 1.0f, in + I, Fin, whh, Hd, 1.0f, gh, G);
  for (int s = 0; s < B; s++) {
    const float *a = gi + (size_t)s * G, *b = gh + (size_t)s * G;
    const float *h = in + (size_t)s * Fin + I;
    float *c = n->cache + (size_t)s * 4 * Hd, *h1 = n->out + (size_t)s * Hd;
    for (int j = 0; j < Hd; j++) {
      float r = sigm(a[j] + b[j]), z = sigm(a[Hd + j] + b[Hd + j]);
      float nn_ = nn__tanh(a[2 * Hd + j] + r * b[2 * Hd + j]);
      c[j] = r, c[Hd + j] = z, c[2 * Hd + j] = nn_, c[3 * Hd + j] = b[2 * Hd + j];
      h1[j] = (1.0f - z) * nn_ + z * h[j];
    }
  }
  return 0;
}

static void gru_backward(nn_model *m, nn__node *n, int B) {
  const float *in = nn__in_out(m, n, 0);
  int I = n->num, Hd = n->hidden, G = 3 * Hd, Fin = I + Hd;
  const float *wih = m->params + n->poff[0], *whh = m->params + n->poff[1];
  float *dwih = m->grads + n->poff[0], *dwhh = m->grads + n->poff[1];
  float *dbih = m->grads + n->poff[2], *dbhh = m->grads + n->poff[3];
  float *dgi = m->scratch, *dgh = m->scratch + (size_t)B * G;
  for (int s = 0; s < B; s++) {
    const float *c = n->cache + (size_t)s * 4 * Hd, *dh1 = n->dout + (size_t)s * Hd;
    const float *h = in + (size_t)s * Fin + I;
    float *di = dgi + (size_t)s * G, *dh = dgh + (size_t)s * G;
    for (int j = 0; j < Hd; j++) {
      float r = c[j], z = c[Hd + j], nn_ = c[2 * Hd + j], hn = c[3 * Hd + j];
      float dan = dh1[j] * (1.0f - z) * (1.0f - nn_ * nn_);
      float daz = dh1[j] * (h[j] - nn_) * z * (1.0f - z);
      float dar = dan * hn * r * (1.0f - r);
      di[j] = dar, di[Hd + j] = daz, di[2 * Hd + j] = dan;
      dh[j] = dar, dh[Hd + j] = daz, dh[2 * Hd + j] = dan * r;
    }
    for (int j = 0; j < G; j++) dbih[j] += di[j], dbhh[j] += dh[j];
  }
  nn__sgemm(true, false, G, I, B, 1.0f, dgi, G, in, Fin, 1.0f, dwih, I);
  nn__sgemm(true, false, G, Hd, B, 1.0f, dgh, G, in + I, Fin, 1.0f, dwhh, Hd);
  bool acc;
  float *dx = nn__dinput(m, n, 0, &acc);
  if (!dx) return;
  float beta = acc ? 1.0f : 0.0f;
  nn__sgemm(false, false, B, I, G, 1.0f, dgi, G, wih, I, beta, dx, Fin);
  nn__sgemm(false, false, B, Hd, G, 1.0f, dgh, G, whh, Hd, beta, dx + I, Fin);
  /* h reaches h' directly too: dh += dh' z */
  for (int s = 0; s < B; s++) {
    const float *z = n->cache + (size_t)s * 4 * Hd + Hd, *dh1 = n->dout + (size_t)s * Hd;
    float *d = dx + (size_t)s * Fin + I;
    for (int j = 0; j < Hd; j++) d[j] += dh1[j] * z[j];
  }
}

const nn__layer_ops nn__cpu_gru = {gru_forward, gru_backward};
