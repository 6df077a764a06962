/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cuda/kernels.cu — shoal's own CUDA kernels: element-wise ops, activations,
 * softmax, dropout, batch and layer norm, losses and the fused optimizer steps over
 * the flat parameter buffer. One file, so CI's two cores compile it once.
 *
 * Formulas are those of the CPU backend (the files of nn/cpu), which follow PyTorch; reductions
 * that the CPU sums in double (norm statistics, losses, the gradient norm) are summed
 * in double here too.
 */
#include <math.h>
#include <stdint.h>

/* common/shoal.h is C: its _Noreturn is C++'s [[noreturn]]. */
#ifndef _Noreturn
#define _Noreturn [[noreturn]]
#endif
#include "nn/cuda/cuda.h"

namespace {

constexpr int kThreads = 256;

/* Grid for n elements in a grid-stride loop: enough blocks to fill the device, no
 * more than n needs. */
inline unsigned blocks_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b > 4096) b = 4096;
  return b ? (unsigned)b : 1u;
}

#define GRID_LOOP(i, n)                                                   \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
       i += (size_t)blockDim.x * gridDim.x)

__device__ inline void put(float *y, size_t i, float v, bool acc) { y[i] = acc ? y[i] + v : v; }

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
 * the total. */
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads(); /* part may still be read by a previous call */
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int nw = (blockDim.x + 31) >> 5;
  T t = lane < nw ? part[lane] : T(0);
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

__device__ float block_max(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int nw = (blockDim.x + 31) >> 5;
  float t = lane < nw ? part[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
  return t;
}

/* ---- element-wise ---------------------------------------------------------------- */

__global__ void k_bias_rows(float *y, const float *b, size_t total, int N) {
  GRID_LOOP(i, total) y[i] += b[i % (size_t)N];
}

__global__ void k_put(float *y, const float *x, size_t n, bool acc) {
  GRID_LOOP(i, n) put(y, i, x[i], acc);
}

__global__ void k_add2(float *y, const float *a, const float *b, size_t n, bool acc) {
  GRID_LOOP(i, n) put(y, i, a[i] + b[i], acc);
}

/* y[i] (+)= a[i] * b[i], or a[i] * b[i / F] with one b per row of F. */
__global__ void k_mul(float *y, const float *a, const float *b, size_t n, size_t F, bool bcast,
                      bool acc) {
  GRID_LOOP(i, n) put(y, i, a[i] * b[bcast ? i / F : i], acc);
}

/* d[r] (+)= Σ_j x[r, j] y[r, j]: one thread per row (rows are short here: a state). */
__global__ void k_rowdot(float *d, const float *x, const float *y, int B, int F, bool acc) {
  GRID_LOOP(r, (size_t)B) {
    float t = 0;
    for (int j = 0; j < F; j++) t += x[r * (size_t)F + j] * y[r * (size_t)F + j];
    put(d, r, t, acc);
  }
}

__global__ void k_rows(float *dst, int dld, const float *src, int sld, size_t total, int len,
                       bool acc) {
  GRID_LOOP(i, total) {
    size_t r = i / (size_t)len, j = i % (size_t)len;
    put(dst, r * (size_t)dld + j, src[r * (size_t)sld + j], acc);
  }
}

__global__ void k_act_fwd(int act, float a, float *y, const float *x, size_t n) {
  GRID_LOOP(i, n) {
    float v = x[i], r;
    switch (act) {
      case NN_RELU: r = v > 0 ? v : 0.0f; break;
      case NN_LEAKY_RELU: r = v > 0 ? v : a * v; break;
      case NN_ELU: r = v > 0 ? v : a * expm1f(v); break;
      case NN_TANH: r = tanhf(v); break;
      case NN_SCALE: r = a * v; break;
      default: r = 1.0f / (1.0f + expf(-v)); break; /* sigmoid */
    }
    y[i] = r;
  }
}

/* relu' = [x > 0]; leaky: 1 or alpha; elu: 1 or alpha e^x; tanh: 1 - y^2;
 * scale: alpha; sigmoid: y (1 - y). */
__global__ void k_act_bwd(int act, float a, float *dx, const float *dy, const float *x,
                          const float *y, size_t n, bool acc) {
  GRID_LOOP(i, n) {
    float v = x[i], d;
    switch (act) {
      case NN_RELU: d = v > 0 ? 1.0f : 0.0f; break;
      case NN_LEAKY_RELU: d = v > 0 ? 1.0f : a; break;
      case NN_ELU: d = v > 0 ? 1.0f : a * expf(v); break;
      case NN_TANH: d = 1.0f - y[i] * y[i]; break;
      case NN_SCALE: d = a; break;
      default: d = y[i] * (1.0f - y[i]); break;
    }
    put(dx, i, dy[i] * d, acc);
  }
}

/* One block per sample: shifted by the max, the sum of exps in double as the CPU's. */
__global__ void k_softmax_fwd(bool lg, float *y, const float *x, int F) {
  const float *xs = x + (size_t)blockIdx.x * F;
  float *ys = y + (size_t)blockIdx.x * F;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < F; j += blockDim.x) mx = fmaxf(mx, xs[j]);
  mx = block_max(mx);
  double s = 0;
  for (int j = threadIdx.x; j < F; j += blockDim.x) s += exp((double)(xs[j] - mx));
  s = block_sum(s);
  if (lg) {
    float ls = (float)log(s);
    for (int j = threadIdx.x; j < F; j += blockDim.x) ys[j] = xs[j] - mx - ls;
  } else {
    float inv = (float)(1.0 / s);
    for (int j = threadIdx.x; j < F; j += blockDim.x) ys[j] = expf(xs[j] - mx) * inv;
  }
}

/* softmax: dx = y (dy - sum dy y); log-softmax: dx = dy - e^y sum dy. */
__global__ void k_softmax_bwd(bool lg, float *dx, const float *dy, const float *y, int F,
                              bool acc) {
  size_t o = (size_t)blockIdx.x * F;
  double s = 0;
  for (int j = threadIdx.x; j < F; j += blockDim.x)
    s += lg ? (double)dy[o + j] : (double)dy[o + j] * y[o + j];
  float t = (float)block_sum(s);
  for (int j = threadIdx.x; j < F; j += blockDim.x) {
    float v = lg ? dy[o + j] - expf(y[o + j]) * t : y[o + j] * (dy[o + j] - t);
    put(dx, o + j, v, acc);
  }
}

/* splitmix64 of (seed, i): independent uniform bits per element without state. */
__device__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void k_dropout_fwd(float *y, float *mask, const float *x, size_t n, float p, float scale,
                              uint64_t seed) {
  GRID_LOOP(i, n) {
    float u = (float)(mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1)) >> 40) * (1.0f / 16777216.0f);
    float mk = u >= p ? scale : 0.0f;
    mask[i] = mk;
    y[i] = x[i] * mk;
  }
}

__global__ void k_mul_put(float *dx, const float *dy, const float *mask, size_t n, bool acc) {
  GRID_LOOP(i, n) put(dx, i, dy[i] * mask[i], acc);
}

/* ---- batch norm: one block per channel, over the B*P values of the batch ---------- */

__global__ void k_bn_fwd(float *y, float *xhat, float *rstd, const float *x, const float *gamma,
                         const float *beta, float *rmean, float *rvar, int B, int C, int P,
                         float eps, float mo, bool training) {
  int c = blockIdx.x;
  size_t M = (size_t)B * P;
  float mean, rs;
  if (training) {
    double s = 0;
    for (size_t k = threadIdx.x; k < M; k += blockDim.x) {
      size_t b = k / P, p = k % P;
      s += x[(b * C + c) * P + p];
    }
    double mu = block_sum(s) / (double)M;
    double ss = 0;
    for (size_t k = threadIdx.x; k < M; k += blockDim.x) {
      size_t b = k / P, p = k % P;
      double d = x[(b * C + c) * P + p] - mu;
      ss += d * d;
    }
    double var = block_sum(ss) / (double)M;
    mean = (float)mu;
    rs = (float)(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
      rmean[c] = (1.0f - mo) * rmean[c] + mo * mean;
      rvar[c] = (1.0f - mo) * rvar[c] + mo * (float)(var * (double)M / (double)(M - 1));
    }
  } else {
    mean = rmean[c];
    rs = 1.0f / sqrtf(rvar[c] + eps);
  }
  if (threadIdx.x == 0) rstd[c] = rs, rstd[C + c] = mean;
  float g = gamma[c], bt = beta[c];
  for (size_t k = threadIdx.x; k < M; k += blockDim.x) {
    size_t b = k / P, p = k % P, o = (b * C + c) * P + p;
    float h = (x[o] - mean) * rs;
    xhat[o] = h;
    y[o] = g * h + bt;
  }
}

__global__ void k_inc(float *v) { v[0] += 1.0f; }

/* ---- replay priorities -------------------------------------------------------------- */

__global__ void k_priorities(float *prio, const float *pred, const float *target, int B, int N,
                             float alpha, float eps) {
  GRID_LOOP(i, (size_t)B) {
    double s = 0;
    for (int j = 0; j < N; j++) s += fabs((double)pred[i * N + j] - target[i * N + j]);
    prio[i] = (float)pow(s + eps, (double)alpha);
  }
}

/* ---- embedding --------------------------------------------------------------------- */

__global__ void k_embed_fwd(nn__cuda_acc *acc, float *y, const float *x, const float *w,
                            size_t total, int dim, int num) {
  GRID_LOOP(i, total) {
    size_t pos = i / (size_t)dim, k = i % (size_t)dim;
    float v = x[pos];
    if (v >= 0 && v < (float)num && v == floorf(v)) {
      y[i] = w[(size_t)v * dim + k];
    } else {
      y[i] = 0.0f;
      if (k == 0) {
        atomicAdd(&acc->bad, 1.0);
        atomicMin((unsigned long long *)&acc->pad[0], (unsigned long long)pos);
      }
    }
  }
}

__global__ void k_embed_bwd(float *dw, const float *x, const float *dy, size_t total, int dim) {
  GRID_LOOP(i, total) {
    size_t pos = i / (size_t)dim, k = i % (size_t)dim;
    atomicAdd(&dw[(size_t)x[pos] * dim + k], dy[i]);
  }
}

/* ---- LSTM and GRU cells (nn/cpu/rnn.c) ---------------------------------------------- */

__device__ inline float sigm(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void k_bias_set(float *y, const float *b1, const float *b2, size_t total, int N) {
  GRID_LOOP(i, total) {
    size_t j = i % (size_t)N;
    y[i] = b2 ? b1[j] + b2[j] : b1[j];
  }
}

/* (i, f, g, o) = (s, s, tanh, s)(pre); c' = f c + i g; h' = o tanh(c'). */
__global__ void k_lstm_fwd(float *gates, float *tc, float *out, const float *in, size_t total,
                           int I, int Hd) {
  GRID_LOOP(k, total) {
    size_t s = k / (size_t)Hd, j = k % (size_t)Hd, G = 4 * (size_t)Hd;
    float *g = gates + s * G;
    float c = in[s * (I + 2 * (size_t)Hd) + I + Hd + j];
    float ig = sigm(g[j]), fg = sigm(g[Hd + j]), gg = tanhf(g[2 * Hd + j]),
          og = sigm(g[3 * Hd + j]);
    g[j] = ig, g[Hd + j] = fg, g[2 * Hd + j] = gg, g[3 * Hd + j] = og;
    float c1 = fg * c + ig * gg, t = tanhf(c1);
    tc[s * Hd + j] = t;
    out[s * 2 * Hd + j] = og * t;
    out[s * 2 * Hd + Hd + j] = c1;
  }
}

__global__ void k_lstm_bwd(float *dg, float *dcp, const float *gates, const float *tc,
                           const float *in, const float *dout, size_t total, int I, int Hd) {
  GRID_LOOP(k, total) {
    size_t s = k / (size_t)Hd, j = k % (size_t)Hd, G = 4 * (size_t)Hd;
    const float *g = gates + s * G;
    float ig = g[j], fg = g[Hd + j], gg = g[2 * Hd + j], og = g[3 * Hd + j];
    float t = tc[s * Hd + j], c = in[s * (I + 2 * (size_t)Hd) + I + Hd + j];
    float dh1 = dout[s * 2 * Hd + j], dc1 = dout[s * 2 * Hd + Hd + j];
    float dct = dc1 + dh1 * og * (1.0f - t * t);
    float *d = dg + s * G;
    d[j] = dct * gg * ig * (1.0f - ig);
    d[Hd + j] = dct * c * fg * (1.0f - fg);
    d[2 * Hd + j] = dct * ig * (1.0f - gg * gg);
    d[3 * Hd + j] = dh1 * t * og * (1.0f - og);
    dcp[s * Hd + j] = dct * fg;
  }
}

/* r = s(a_r + b_r), z = s(a_z + b_z), n = tanh(a_n + r b_n), h' = (1 - z) n + z h. */
__global__ void k_gru_fwd(float *cache, float *out, const float *gi, const float *gh,
                          const float *in, size_t total, int I, int Hd) {
  GRID_LOOP(k, total) {
    size_t s = k / (size_t)Hd, j = k % (size_t)Hd, G = 3 * (size_t)Hd;
    const float *a = gi + s * G, *b = gh + s * G;
    float h = in[s * (I + (size_t)Hd) + I + j];
    float r = sigm(a[j] + b[j]), z = sigm(a[Hd + j] + b[Hd + j]);
    float nn_ = tanhf(a[2 * Hd + j] + r * b[2 * Hd + j]);
    float *c = cache + s * 4 * Hd;
    c[j] = r, c[Hd + j] = z, c[2 * Hd + j] = nn_, c[3 * Hd + j] = b[2 * Hd + j];
    out[s * Hd + j] = (1.0f - z) * nn_ + z * h;
  }
}

__global__ void k_gru_bwd(float *dgi, float *dgh, const float *cache, const float *in,
                          const float *dout, size_t total, int I, int Hd) {
  GRID_LOOP(k, total) {
    size_t s = k / (size_t)Hd, j = k % (size_t)Hd, G = 3 * (size_t)Hd;
    const float *c = cache + s * 4 * Hd;
    float r = c[j], z = c[Hd + j], nn_ = c[2 * Hd + j], hn = c[3 * Hd + j];
    float h = in[s * (I + (size_t)Hd) + I + j], dh1 = dout[s * Hd + j];
    float dan = dh1 * (1.0f - z) * (1.0f - nn_ * nn_);
    float daz = dh1 * (h - nn_) * z * (1.0f - z);
    float dar = dan * hn * r * (1.0f - r);
    float *di = dgi + s * G, *dh = dgh + s * G;
    di[j] = dar, di[Hd + j] = daz, di[2 * Hd + j] = dan;
    dh[j] = dar, dh[Hd + j] = daz, dh[2 * Hd + j] = dan * r;
  }
}

__global__ void k_gru_dh(float *dx, const float *cache, const float *dout, size_t total, int I,
                         int Hd) {
  GRID_LOOP(k, total) {
    size_t s = k / (size_t)Hd, j = k % (size_t)Hd;
    dx[s * (I + (size_t)Hd) + I + j] += dout[s * Hd + j] * cache[s * 4 * Hd + Hd + j];
  }
}

/* training: dx = gamma rstd / M (M dy - sum dy - xhat sum(dy xhat)); eval:
 * dx = gamma rstd dy. dgamma += sum dy xhat, dbeta += sum dy. */
__global__ void k_bn_bwd(float *dx, float *dgamma, float *dbeta, const float *dy, const float *xhat,
                         const float *rstd, const float *gamma, int B, int C, int P, bool training,
                         bool acc) {
  int c = blockIdx.x;
  size_t M = (size_t)B * P;
  double sdy = 0, sdyx = 0;
  for (size_t k = threadIdx.x; k < M; k += blockDim.x) {
    size_t b = k / P, p = k % P, o = (b * C + c) * P + p;
    sdy += dy[o];
    sdyx += (double)dy[o] * xhat[o];
  }
  sdy = block_sum(sdy);
  sdyx = block_sum(sdyx);
  if (threadIdx.x == 0) {
    dgamma[c] += (float)sdyx;
    dbeta[c] += (float)sdy;
  }
  if (!dx) return;
  float k0 = gamma[c] * rstd[c];
  float mdy = (float)(sdy / (double)M), mdyx = (float)(sdyx / (double)M);
  for (size_t k = threadIdx.x; k < M; k += blockDim.x) {
    size_t b = k / P, p = k % P, o = (b * C + c) * P + p;
    float v = training ? k0 * (dy[o] - mdy - xhat[o] * mdyx) : k0 * dy[o];
    put(dx, o, v, acc);
  }
}

/* ---- layer norm: one block per sample over its F features ------------------------ */

__global__ void k_ln_fwd(float *y, float *xhat, float *rstd, const float *x, const float *gamma,
                         const float *beta, int F, float eps) {
  size_t o = (size_t)blockIdx.x * F;
  double s = 0;
  for (int j = threadIdx.x; j < F; j += blockDim.x) s += x[o + j];
  double mu = block_sum(s) / F;
  double ss = 0;
  for (int j = threadIdx.x; j < F; j += blockDim.x) {
    double d = x[o + j] - mu;
    ss += d * d;
  }
  double var = block_sum(ss) / F;
  float rs = (float)(1.0 / sqrt(var + eps)), mean = (float)mu;
  if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
  for (int j = threadIdx.x; j < F; j += blockDim.x) {
    float h = (x[o + j] - mean) * rs;
    xhat[o + j] = h;
    y[o + j] = gamma[j] * h + beta[j];
  }
}

/* dxhat = dy gamma; dx = rstd / F (F dxhat - sum dxhat - xhat sum(dxhat xhat)). */
__global__ void k_ln_bwd_dx(float *dx, const float *dy, const float *xhat, const float *rstd,
                            const float *gamma, int F, bool acc) {
  size_t o = (size_t)blockIdx.x * F;
  double s = 0, sx = 0;
  for (int j = threadIdx.x; j < F; j += blockDim.x) {
    double g = (double)dy[o + j] * gamma[j];
    s += g;
    sx += g * xhat[o + j];
  }
  s = block_sum(s);
  sx = block_sum(sx);
  float rs = rstd[blockIdx.x], ms = (float)(s / F), msx = (float)(sx / F);
  for (int j = threadIdx.x; j < F; j += blockDim.x)
    put(dx, o + j, rs * (dy[o + j] * gamma[j] - ms - xhat[o + j] * msx), acc);
}

/* Per feature j over the batch: coalesced across j. */
__global__ void k_ln_bwd_params(float *dgamma, float *dbeta, const float *dy, const float *xhat,
                                int B, int F) {
  GRID_LOOP(j, (size_t)F) {
    double g = 0, b = 0;
    for (int s = 0; s < B; s++) {
      size_t o = (size_t)s * F + j;
      g += (double)dy[o] * xhat[o];
      b += dy[o];
    }
    dgamma[j] += (float)g;
    dbeta[j] += (float)b;
  }
}

/* ---- losses ------------------------------------------------------------------------- */

__device__ inline bool finite(float v) { return isfinite(v); }

/* l and dl/dpred of one term (nn/loss.c's formulas). */
__device__ inline void loss_term(int kind, float p, float t, float delta, float *l, float *g) {
  if (kind == NN_LOSS_MSE) {
    float d = p - t;
    *l = d * d;
    *g = 2.0f * d;
  } else if (kind == NN_LOSS_HUBER) {
    float d = p - t, a = fabsf(d);
    if (a < delta) {
      *l = 0.5f * d * d;
      *g = d;
    } else {
      *l = delta * (a - 0.5f * delta);
      *g = d > 0 ? delta : -delta;
    }
  } else { /* bce with logits: max(x, 0) - x t + log(1 + e^-|x|) */
    *l = fmaxf(p, 0.0f) - p * t + log1pf(expf(-fabsf(p)));
    *g = 1.0f / (1.0f + expf(-p)) - t;
  }
}

__global__ void k_loss(int kind, nn__cuda_acc *acc, float *dpred, const float *pred,
                       const float *target, const float *w, int N, size_t total, float delta,
                       float scale) {
  double s = 0, bad = 0;
  GRID_LOOP(i, total) {
    float p = pred[i], t = target[i], wi = w ? w[i / (size_t)N] : 1.0f, l, g;
    loss_term(kind, p, t, delta, &l, &g);
    if (!finite(p) || !finite(t) || !finite(wi) || !finite(l)) bad += 1;
    s += (double)wi * l;
    if (dpred) dpred[i] = wi * g * scale;
  }
  s = block_sum(s);
  bad = block_sum(bad);
  if (threadIdx.x == 0) {
    atomicAdd(&acc->sum, s);
    if (bad > 0) atomicAdd(&acc->bad, bad);
  }
}

/* Soft-target cross-entropy, one block per sample (nn_cross_entropy_soft_loss):
 * l = -sum_k p_k (x_k - lse), dl/dx_k = softmax_k sum_c p_c - p_k. */
__global__ void k_cross_entropy(nn__cuda_acc *acc, float *dpred, const float *x, const float *p,
                                const float *w, int N, float scale) {
  size_t o = (size_t)blockIdx.x * N;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < N; k += blockDim.x) mx = fmaxf(mx, x[o + k]);
  mx = block_max(mx);
  double se = 0, sp = 0, spx = 0, bad = 0;
  for (int k = threadIdx.x; k < N; k += blockDim.x) {
    float xk = x[o + k], pk = p[o + k];
    if (!finite(xk) || !finite(pk)) bad += 1;
    se += exp((double)(xk - mx));
    sp += pk;
    spx += (double)pk * xk;
  }
  se = block_sum(se);
  sp = block_sum(sp);
  spx = block_sum(spx);
  bad = block_sum(bad);
  double lse = mx + log(se);
  float wi = w ? w[blockIdx.x] : 1.0f;
  if (threadIdx.x == 0) {
    double l = lse * sp - spx;
    if (!finite(wi) || !isfinite(l)) bad += 1;
    atomicAdd(&acc->sum, (double)wi * l);
    if (bad > 0) atomicAdd(&acc->bad, bad);
  }
  if (!dpred) return;
  float c = wi * scale;
  for (int k = threadIdx.x; k < N; k += blockDim.x)
    dpred[o + k] = (float)(c * (exp((double)x[o + k] - lse) * sp - p[o + k]));
}

/* ---- optimizer ---------------------------------------------------------------------- */

__global__ void k_sumsq(nn__cuda_acc *acc, const float *g, size_t n) {
  double s = 0;
  GRID_LOOP(i, n) s += (double)g[i] * g[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(&acc->sum, s);
}

/* The step's scalars, decided on the device from the gradient norm: torch's
 * clip_grad_norm_ coefficient max_norm / (norm + 1e-6) clamped to 1, and the skip of
 * a non-finite norm (nothing changes then). */
__global__ void k_decide(nn__cuda_acc *acc, float clip) {
  double norm = sqrt(acc->sum);
  acc->norm = norm;
  bool ok = isfinite(norm);
  acc->skipped = ok ? 0.0 : 1.0;
  float coef = 1.0f;
  if (ok && clip > 0) {
    float cf = clip / ((float)norm + 1e-6f);
    if (cf < 1.0f) coef = cf;
  }
  acc->coef = coef;
}

struct step_args {
  int kind;
  float lr, wd, mu, damp, b1, b2, eps, alpha;
  bool nesterov, centered, first;
  float step_size, bc2_sqrt, shrink;
};

/* torch.optim 1.13's formulas, element for element as nn/optim.c; the clipped
 * gradient is written back, as clip_grad_norm_ scales it in place. */
__global__ void k_update(step_args a, const nn__cuda_acc *acc, float *p, float *g, float *buf,
                         float *m, float *v, size_t n) {
  if (acc->skipped != 0) return;
  float coef = (float)acc->coef;
  GRID_LOOP(i, n) {
    float gi = g[i];
    if (coef < 1.0f) g[i] = gi = gi * coef;
    if (a.kind == NN_SGD) {
      float d = gi + a.wd * p[i];
      if (buf) {
        float b = a.first ? d : a.mu * buf[i] + a.damp * d;
        buf[i] = b;
        d = a.nesterov ? d + a.mu * b : b;
      }
      p[i] -= a.lr * d;
    } else if (a.kind == NN_ADAM || a.kind == NN_ADAMW) {
      float pi = p[i] * a.shrink;
      float gg = gi + a.wd * pi;
      float mi = a.b1 * m[i] + (1.0f - a.b1) * gg;
      float vi = a.b2 * v[i] + (1.0f - a.b2) * gg * gg;
      m[i] = mi;
      v[i] = vi;
      float denom = sqrtf(vi) / a.bc2_sqrt + a.eps;
      p[i] = pi - a.step_size * (mi / denom);
    } else { /* rmsprop: v is square_avg, m grad_avg (centered) */
      float gg = gi + a.wd * p[i];
      float s = a.alpha * v[i] + (1.0f - a.alpha) * gg * gg;
      v[i] = s;
      float var = s;
      if (m) {
        float gm = a.alpha * m[i] + (1.0f - a.alpha) * gg;
        m[i] = gm;
        var = fmaxf(s - gm * gm, 0.0f);
      }
      float avg = sqrtf(var) + a.eps;
      if (buf) {
        float b = a.mu * buf[i] + gg / avg;
        buf[i] = b;
        p[i] -= a.lr * b;
      } else {
        p[i] -= a.lr * (gg / avg);
      }
    }
  }
}

}  // namespace

/* ---- launchers ------------------------------------------------------------------------ */

extern "C" {

cudaError_t nn__k_bias_rows(cudaStream_t s, float *y, const float *b, int B, int N) {
  size_t t = (size_t)B * N;
  k_bias_rows<<<blocks_for(t), kThreads, 0, s>>>(y, b, t, N);
  return cudaGetLastError();
}

cudaError_t nn__k_put(cudaStream_t s, float *y, const float *x, size_t n, bool acc) {
  if (!acc) return cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
  k_put<<<blocks_for(n), kThreads, 0, s>>>(y, x, n, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_add2(cudaStream_t s, float *y, const float *a, const float *b, size_t n,
                       bool acc) {
  k_add2<<<blocks_for(n), kThreads, 0, s>>>(y, a, b, n, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_mul(cudaStream_t s, float *y, const float *a, const float *b, size_t n,
                      size_t F, bool bcast, bool acc) {
  k_mul<<<blocks_for(n), kThreads, 0, s>>>(y, a, b, n, F, bcast, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_rowdot(cudaStream_t s, float *d, const float *x, const float *y, int B, int F,
                         bool acc) {
  k_rowdot<<<blocks_for((size_t)B), kThreads, 0, s>>>(d, x, y, B, F, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_rows(cudaStream_t s, float *dst, int dld, const float *src, int sld, int B,
                       int len, bool acc) {
  if (!acc)
    return cudaMemcpy2DAsync(dst, (size_t)dld * sizeof(float), src, (size_t)sld * sizeof(float),
                             (size_t)len * sizeof(float), (size_t)B, cudaMemcpyDeviceToDevice, s);
  size_t t = (size_t)B * len;
  k_rows<<<blocks_for(t), kThreads, 0, s>>>(dst, dld, src, sld, t, len, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_act_fwd(cudaStream_t s, int act, float alpha, float *y, const float *x,
                          size_t n) {
  k_act_fwd<<<blocks_for(n), kThreads, 0, s>>>(act, alpha, y, x, n);
  return cudaGetLastError();
}

cudaError_t nn__k_act_bwd(cudaStream_t s, int act, float alpha, float *dx, const float *dy,
                          const float *x, const float *y, size_t n, bool acc) {
  k_act_bwd<<<blocks_for(n), kThreads, 0, s>>>(act, alpha, dx, dy, x, y, n, acc);
  return cudaGetLastError();
}

static int row_threads(int F) { return F >= 512 ? 512 : (F >= 128 ? 128 : 32); }

cudaError_t nn__k_softmax_fwd(cudaStream_t s, bool log, float *y, const float *x, int B, int F) {
  k_softmax_fwd<<<B, row_threads(F), 0, s>>>(log, y, x, F);
  return cudaGetLastError();
}

cudaError_t nn__k_softmax_bwd(cudaStream_t s, bool log, float *dx, const float *dy, const float *y,
                              int B, int F, bool acc) {
  k_softmax_bwd<<<B, row_threads(F), 0, s>>>(log, dx, dy, y, F, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_dropout_fwd(cudaStream_t s, float *y, float *mask, const float *x, size_t n,
                              float p, float scale, uint64_t seed) {
  k_dropout_fwd<<<blocks_for(n), kThreads, 0, s>>>(y, mask, x, n, p, scale, seed);
  return cudaGetLastError();
}

cudaError_t nn__k_mul_put(cudaStream_t s, float *dx, const float *dy, const float *mask, size_t n,
                          bool acc) {
  k_mul_put<<<blocks_for(n), kThreads, 0, s>>>(dx, dy, mask, n, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_bn_fwd(cudaStream_t s, float *y, float *xhat, float *rstd, const float *x,
                         const float *gamma, const float *beta, float *rmean, float *rvar,
                         float *nbt, int B, int C, int P, float eps, float momentum,
                         bool training) {
  k_bn_fwd<<<C, 512, 0, s>>>(y, xhat, rstd, x, gamma, beta, rmean, rvar, B, C, P, eps, momentum,
                             training);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !training) return e;
  k_inc<<<1, 1, 0, s>>>(nbt);
  return cudaGetLastError();
}

cudaError_t nn__k_bn_bwd(cudaStream_t s, float *dx, float *dgamma, float *dbeta, const float *dy,
                         const float *xhat, const float *rstd, const float *gamma, int B, int C,
                         int P, bool training, bool acc) {
  k_bn_bwd<<<C, 512, 0, s>>>(dx, dgamma, dbeta, dy, xhat, rstd, gamma, B, C, P, training, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_ln_fwd(cudaStream_t s, float *y, float *xhat, float *rstd, const float *x,
                         const float *gamma, const float *beta, int B, int F, float eps) {
  k_ln_fwd<<<B, row_threads(F), 0, s>>>(y, xhat, rstd, x, gamma, beta, F, eps);
  return cudaGetLastError();
}

cudaError_t nn__k_ln_bwd(cudaStream_t s, float *dx, float *dgamma, float *dbeta, const float *dy,
                         const float *xhat, const float *rstd, const float *gamma, int B, int F,
                         bool acc) {
  k_ln_bwd_params<<<blocks_for((size_t)F), kThreads, 0, s>>>(dgamma, dbeta, dy, xhat, B, F);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !dx) return e;
  k_ln_bwd_dx<<<B, row_threads(F), 0, s>>>(dx, dy, xhat, rstd, gamma, F, acc);
  return cudaGetLastError();
}

cudaError_t nn__k_bias_set(cudaStream_t s, float *y, const float *b1, const float *b2, int B,
                           int N) {
  size_t t = (size_t)B * N;
  k_bias_set<<<blocks_for(t), kThreads, 0, s>>>(y, b1, b2, t, N);
  return cudaGetLastError();
}

cudaError_t nn__k_lstm_fwd(cudaStream_t s, float *gates, float *tc, float *out, const float *in,
                           int B, int I, int Hd) {
  size_t t = (size_t)B * Hd;
  k_lstm_fwd<<<blocks_for(t), kThreads, 0, s>>>(gates, tc, out, in, t, I, Hd);
  return cudaGetLastError();
}

cudaError_t nn__k_lstm_bwd(cudaStream_t s, float *dg, float *dcp, const float *gates,
                           const float *tc, const float *in, const float *dout, int B, int I,
                           int Hd) {
  size_t t = (size_t)B * Hd;
  k_lstm_bwd<<<blocks_for(t), kThreads, 0, s>>>(dg, dcp, gates, tc, in, dout, t, I, Hd);
  return cudaGetLastError();
}

cudaError_t nn__k_gru_fwd(cudaStream_t s, float *cache, float *out, const float *gi,
                          const float *gh, const float *in, int B, int I, int Hd) {
  size_t t = (size_t)B * Hd;
  k_gru_fwd<<<blocks_for(t), kThreads, 0, s>>>(cache, out, gi, gh, in, t, I, Hd);
  return cudaGetLastError();
}

cudaError_t nn__k_gru_bwd(cudaStream_t s, float *dgi, float *dgh, const float *cache,
                          const float *in, const float *dout, int B, int I, int Hd) {
  size_t t = (size_t)B * Hd;
  k_gru_bwd<<<blocks_for(t), kThreads, 0, s>>>(dgi, dgh, cache, in, dout, t, I, Hd);
  return cudaGetLastError();
}

cudaError_t nn__k_gru_dh(cudaStream_t s, float *dx, const float *cache, const float *dout, int B,
                         int I, int Hd) {
  size_t t = (size_t)B * Hd;
  k_gru_dh<<<blocks_for(t), kThreads, 0, s>>>(dx, cache, dout, t, I, Hd);
  return cudaGetLastError();
}

cudaError_t nn__k_embed_fwd(cudaStream_t s, nn__cuda_acc *acc, float *y, const float *x,
                            const float *w, int B, int Fx, int dim, int num) {
  size_t t = (size_t)B * Fx * dim;
  k_embed_fwd<<<blocks_for(t), kThreads, 0, s>>>(acc, y, x, w, t, dim, num);
  return cudaGetLastError();
}

cudaError_t nn__k_embed_bwd(cudaStream_t s, float *dw, const float *x, const float *dy, int B,
                            int Fx, int dim) {
  size_t t = (size_t)B * Fx * dim;
  k_embed_bwd<<<blocks_for(t), kThreads, 0, s>>>(dw, x, dy, t, dim);
  return cudaGetLastError();
}

cudaError_t nn__k_priorities(cudaStream_t s, float *prio, const float *pred, const float *target,
                             int B, int N, float alpha, float eps) {
  k_priorities<<<blocks_for((size_t)B), kThreads, 0, s>>>(prio, pred, target, B, N, alpha, eps);
  return cudaGetLastError();
}

cudaError_t nn__k_inc(cudaStream_t s, float *v) {
  k_inc<<<1, 1, 0, s>>>(v);
  return cudaGetLastError();
}

cudaError_t nn__k_loss(cudaStream_t s, int kind, nn__cuda_acc *acc, float *dpred, const float *pred,
                       const float *target, const float *w, int B, int N, float delta,
                       float scale) {
  if (kind == NN_LOSS_CROSS_ENTROPY) {
    k_cross_entropy<<<B, row_threads(N), 0, s>>>(acc, dpred, pred, target, w, N, scale);
    return cudaGetLastError();
  }
  size_t t = (size_t)B * N;
  k_loss<<<blocks_for(t), kThreads, 0, s>>>(kind, acc, dpred, pred, target, w, N, t, delta, scale);
  return cudaGetLastError();
}

cudaError_t nn__k_sumsq(cudaStream_t s, nn__cuda_acc *acc, const float *g, size_t n) {
  k_sumsq<<<blocks_for(n), kThreads, 0, s>>>(acc, g, n);
  return cudaGetLastError();
}

cudaError_t nn__k_optim(cudaStream_t s, const nn_optim_config *c, long step, nn__cuda_acc *acc,
                        float *p, float *g, float *buf, float *exp_avg, float *exp_avg_sq,
                        size_t n) {
  k_decide<<<1, 1, 0, s>>>(acc, c->clip_norm);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  step_args a;
  a.kind = (int)c->kind;
  a.lr = c->lr;
  a.mu = c->momentum;
  a.damp = 1.0f - c->dampening;
  a.b1 = c->beta1;
  a.b2 = c->beta2;
  a.eps = c->eps;
  a.alpha = c->alpha;
  a.nesterov = c->nesterov;
  a.centered = c->centered;
  a.first = step == 0;
  /* Scalars in double as torch's Python computes them (nn/optim.c). */
  double t = (double)(step + 1);
  double bc1 = 1.0 - pow((double)c->beta1, t), bc2 = 1.0 - pow((double)c->beta2, t);
  a.step_size = (float)((double)c->lr / bc1);
  a.bc2_sqrt = (float)sqrt(bc2);
  bool decoupled = c->kind == NN_ADAMW;
  a.wd = decoupled ? 0.0f : c->weight_decay;
  a.shrink = decoupled ? (float)(1.0 - (double)c->lr * c->weight_decay) : 1.0f;
  float *m = c->kind == NN_SGD ? nullptr : exp_avg; /* rmsprop: grad_avg when centered */
  k_update<<<blocks_for(n), kThreads, 0, s>>>(a, acc, p, g, buf, m, exp_avg_sq, n);
  return cudaGetLastError();
}

}  // extern "C"
