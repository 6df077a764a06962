/* SPDX-License-Identifier: Apache-2.0 */
/* nn/cpu/cpu.h — what the CPU layer files share: their kernel tables and helpers. */
#ifndef SHOAL_NN_CPU_H
#define SHOAL_NN_CPU_H

#include <stdint.h>
#include <string.h>

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

/* A loop over activations compiled for AVX-512, AVX2 and baseline x86-64, chosen at load
 * time (nn/internal.h's NN__CAN_CLONE), so it runs on the machine's widest vectors. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(NN__CAN_CLONE)
#define NN__CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NN__CLONES
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NN__X86 1 /* the CPU files' x86 kernels (AVX2, AVX-512) are compiled */
/* An 8x8 block transposed in registers: dst[k*ld + i] = row[i][off + k], i, k < 8. For
 * the packing loops whose scalar form made a strided store per float. Needs AVX. */
__attribute__((target("avx2"))) static inline void nn__tr8x8(const float *const *row, size_t off,
                                                             float *dst, size_t ld) {
  __m256 r0 = _mm256_loadu_ps(row[0] + off), r1 = _mm256_loadu_ps(row[1] + off);
  __m256 r2 = _mm256_loadu_ps(row[2] + off), r3 = _mm256_loadu_ps(row[3] + off);
  __m256 r4 = _mm256_loadu_ps(row[4] + off), r5 = _mm256_loadu_ps(row[5] + off);
  __m256 r6 = _mm256_loadu_ps(row[6] + off), r7 = _mm256_loadu_ps(row[7] + off);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(dst + ld, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(dst + 2 * ld, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(dst + 3 * ld, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(dst + 4 * ld, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(dst + 5 * ld, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(dst + 6 * ld, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(dst + 7 * ld, _mm256_permute2f128_ps(s3, s7, 0x31));
}
#endif

/* e^x for x <= 0, in plain arithmetic that the compiler vectorises (libm's expf and tanhf
 * are a call per value: DCGAN G's tanh over 50K values took 1 ms). x = n ln2 + r with
 * |r| <= ln2/2, e^r by its Taylor series to r^7 (truncation < 6e-9), 2^n put into the
 * exponent bits: within 1.2 ulp of e^x; 0 below -87 (where e^x leaves the normal floats);
 * NaN stays NaN. nn__tanh and nn__sigmoid below are within 3 ulp (swept against libm's
 * double tanh and exp). */
static inline float nn__exp_neg(float x0) {
  float x = x0 < -87.0f ? -87.0f : x0;
  float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p =
      1.0f +
      r * (1.0f + r * (0.5f + r * (1.0f / 6 +
                                   r * (1.0f / 24 +
                                        r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  uint32_t b;
  memcpy(&b, &p, 4);
  b += (uint32_t)(int32_t)n << 23;
  memcpy(&p, &b, 4);
  return x0 < -87.0f ? 0.0f : p; /* e^-87 = 1.6e-38; below it, 0 as libm's underflow */
}

/* tanh within a few ulp: the odd Taylor series to x^15 below |x| = 0.5 (truncation < 1e-8
 * relative), else (1 - e)/(1 + e) with e = e^(-2|x|), which does not cancel there. */
static inline float nn__tanh(float x) {
  float a = x < 0 ? -x : x, z = x * x;
  /* the series' coefficients -1/3, 2/15, -17/315, 62/2835, -1382/155925, 21844/6081075,
   * -929569/638512875, rounded to float */
  const float c3 = -3.3333333333e-01f, c5 = 1.3333333333e-01f, c7 = -5.3968253968e-02f,
              c9 = 2.1869488536e-02f, c11 = -8.8632355299e-03f, c13 = 3.5921280366e-03f,
              c15 = -1.4558343871e-03f;
  float s =
      x * (1.0f + z * (c3 + z * (c5 + z * (c7 + z * (c9 + z * (c11 + z * (c13 + z * c15)))))));
  float e = nn__exp_neg(-2.0f * a), t = (1.0f - e) / (1.0f + e);
  t = x < 0 ? -t : t;
  return a < 0.5f ? s : t;
}

/* 1 / (1 + e^-x), from e = e^(-|x|) on both sides so nothing overflows. */
static inline float nn__sigmoid(float x) {
  float e = nn__exp_neg(x < 0 ? x : -x), q = 1.0f / (1.0f + e);
  return x < 0 ? e * q : q;
}

static inline const float *nn__in_out(nn_model *m, nn__node *n, int k) {
  return m->nodes[n->in[k]].out;
}
static inline int nn__in_F(nn_model *m, nn__node *n, int k) { return m->nodes[n->in[k]].F; }

/* Runs fn(ctx, task, thread) for task in [0, n_tasks) on up to nn__cpu_threads()
 * threads (the caller is thread 0; thread < nn__pool_max_threads()), returning when
 * all are done. Tasks may run in any order and on any thread. */
void nn__parallel_for(int n_tasks, void (*fn)(void *ctx, int task, int thread), void *ctx);
int nn__pool_max_threads(void);

/* ---- nn's own conv2d and conv-transpose2d kernels (nn/cpu/convk.c) ----
 * Packed implicit GEMM: im2col panels are packed straight from the NCHW input into the
 * micro-kernel's layout (never a whole im2col matrix), register-blocked micro-kernels per
 * ISA, and the results written into NCHW (forward, with the bias), scattered into dx
 * (backward data) or added into dW, on nn's threads. SHOAL_NN_CONV_PATH=gemm|portable|
 * avx2|avx512 forces a path (a path the CPU lacks falls back to the best it has) for
 * every layer the kernels can run; unset, the best the CPU runs, on the shapes where it
 * beats im2col + GEMM. A conv2d forward whose space-to-depth input has 16 channels or
 * more runs direct instead (the batch laid out channels-last once, the micro-kernels reading
 * the taps in place; SHOAL_NN_DIRECT=0 keeps the packed forward). A small stride-1 conv
 * without padding runs its forward and dW on row kernels, a row of output pixels a vector
 * (SHOAL_NN_ROW=0 turns them off). */
typedef enum nn__conv_path {
  NN__CONV_GEMM = 0, /* im2col + nn__sgemm (nn/cpu/conv.c) */
  NN__CONV_PORTABLE = 1,
  NN__CONV_AVX2 = 2, /* AVX2 + FMA */
  NN__CONV_AVX512 = 3,
} nn__conv_path;

nn__conv_path nn__conv_path_get(void);
const char *nn__conv_path_name(nn__conv_path p);
/* Scratch floats the kernels need for conv2d or conv-transpose2d node n at batches up to
 * max_batch; 0 when the layer is out of their range (dilated, K or C_out huge, or more
 * than 128 MB: it runs on the GEMM path). */
size_t nn__convk_scratch(const nn_model *m, const nn__node *n, int max_batch);
/* Whether node n (either kind) runs on these kernels: the path is not gemm, the layer
 * is in their range, and (unless a path was forced) they beat im2col + GEMM on its shape. */
bool nn__convk_runs(const nn_model *m, const nn__node *n);
/* conv2d forward, y = W x + b, and backward, dW += .., db += .., dx (= or +=) ..;
 * conv-transpose2d's the same, through the conv2d it is the adjoint of. For nodes that
 * nn__convk_runs accepts. Can't fail. */
void nn__convk_forward(nn_model *m, nn__node *n, int B);
void nn__convk_backward(nn_model *m, nn__node *n, int B);
void nn__convk_t_forward(nn_model *m, nn__node *n, int B);
void nn__convk_t_backward(nn_model *m, nn__node *n, int B);

/* ---- Winograd F(m x m, r x r) for conv2d and conv-transpose2d (nn/cpu/wino.c) ----
 * The forward, the input gradient and the weight gradient of a layer that nn's own
 * kernels run, in their per-ISA micro-kernels: 3x3 stride-1 layers and strided ones whose
 * kernel is 2 or 3 times the stride, through the space-to-depth form. SHOAL_NN_WINOGRAD=0
 * turns it off, =1 runs it on every layer it can (tests), =2..5 too with that tile size
 * where there is one; unset, on the shapes where it pays. */
/* Scratch floats for node n at batches up to max_batch; 0 when n is not such a layer. */
size_t nn__wino_scratch(const nn_model *m, const nn__node *n, int max_batch);
/* Whether node n, which nn__convk_runs accepts, runs its forward (dx false) or its input
 * gradient (dx true) here at batch B. */
bool nn__wino_runs(const nn_model *m, const nn__node *n, int B, bool dx);
/* The node's output (a conv2d's into the fused ReLU's buffer, as nn__convk_forward; a
 * conv-transpose's plus its bias), and dx (+)= the input gradient of its dy. For nodes
 * nn__wino_runs accepts in that direction; can't fail. */
void nn__wino_forward(nn_model *m, nn__node *n, int B);
/* Whether node n, which nn__convk_runs accepts, runs its weight gradient here at batch B;
 * nn__wino_dw then adds it into the model's gradients (not the bias's). Can't fail. */
bool nn__wino_dw_runs(const nn_model *m, const nn__node *n, int B);
void nn__wino_dw(nn_model *m, nn__node *n, int B);
void nn__wino_dx(nn_model *m, nn__node *n, int B, float *dx, bool acc);
/* Whether Winograd can run node n at all (a shape it has a variant for), paying or not. */
bool nn__wino_can(const nn_model *m, const nn__node *n);

/* ---- kernel paths chosen by measurement (nn/cpu/plan.c) ----
 * A conv2d, a conv-transpose2d (its forward is a conv's dx, its dx a conv's forward: its
 * plan names each product by the node's own terms) and a dense layer (nn__plan_dense
 * below) have several ways to run each of their three products: the forward, dW and dx.
 * Which is fastest depends on the layer's shape, the batch and the CPU (the row kernels
 * win MinAtar's layer on one x86 kind and lose it on another). The first call at a batch
 * size times each path that can run the layer and keeps the fastest for the process, and
 * in a file keyed by the CPU's model so every process on the machine runs the same ones
 * (nn__plan_file). SHOAL_NN_PLAN=rules keeps the fixed rules (convk.c, densek.c); =gemm,
 * packed, direct, row, wino, dxd, tiles or wtiles forces that path where it can run. A path forced
 * by the older switches (SHOAL_NN_ROW, _DIRECT, _WINOGRAD, or their nn__*_mode calls) turns the
 * timing off: the rules then apply with the forcing. SHOAL_NN_CONV_PATH picks the instruction set
 * whose kernels are timed (gemm: im2col + GEMM only). */
typedef enum nn__kpath {
  NN__KP_RULES = 0,  /* convk.c's rules decide */
  NN__KP_GEMM = 1,   /* im2col + nn__sgemm (nn/cpu/conv.c): forward, or dW and dx together */
  NN__KP_PACKED = 2, /* convk.c's packed panels */
  NN__KP_DIRECT = 3, /* forward: the space-to-depth input read in place */
  NN__KP_ROW = 4,    /* forward and dW: a row of output pixels a vector */
  NN__KP_WINO = 5,   /* Winograd (nn/cpu/wino.c) */
  NN__KP_DXD = 6,    /* dx: W's columns per tap, vector adds into a channels-last dx */
  /* a dense layer's products (nn/cpu/densek.c; NN__KP_GEMM there: nn__sgemm) */
  NN__KP_TILES = 7,  /* nn's tiles: the forward as y^T = W x^T (x^T packed), dW, dx */
  NN__KP_WTILES = 8, /* the forward as y = x W^T with W^T packed (AVX2's small layers) */
  NN__KP_N
} nn__kpath;
enum { NN__PH_FWD = 0, NN__PH_DW = 1, NN__PH_DX = 2 };
/* Phase ph of a conv2d in node n's own terms: a conv-transpose's forward is a conv's dx
 * and its dx a conv's forward (dW is dW); a conv2d's are its own. Its own inverse. */
static inline int nn__conv_phase(const nn__node *n, int ph) {
  if (n->kind != NN__CONVT || ph == NN__PH_DW) return ph;
  return ph == NN__PH_FWD ? NN__PH_DX : NN__PH_FWD;
}
const char *nn__kpath_name(int p);
/* Whether path p can run phase ph of conv2d or conv-transpose2d node n (paying or not). */
bool nn__convk_can(const nn_model *m, const nn__node *n, int ph, int p);
/* Sets n->kp for a conv2d's or conv-transpose2d's forward (bwd false) or backward at
 * batch B: from the node's plans, the file, or by timing run(m, n, B) with each candidate
 * (a backward's effects on the gradients are undone between tries). Then the caller runs
 * the call itself. */
typedef void (*nn__plan_run)(nn_model *m, nn__node *n, int B);
void nn__plan_conv(nn_model *m, nn__node *n, int B, bool bwd, nn__plan_run run);
/* Whether timing chooses the paths (SHOAL_NN_PLAN and the forcing switches). */
bool nn__plan_on(void);
/* The plan file in use ("" when plans live in the process only). */
const char *nn__plan_file(void);

/* ---- nn's own kernels for a dense layer's products (nn/cpu/densek.c) ----
 * W (out, in), x and dx (B, in), y and dy (B, out), row-major. Each runs the product on
 * nn's threads and returns true, or returns false having done nothing: the caller then
 * runs nn__sgemm. p picks the kernels: NN__KP_RULES, the fixed rules (on the avx2 path,
 * all three for layers under 32K weights and the forward of larger ones at a batch of 8
 * to 64; on avx512, the forward and dx of larger layers that are not too wide or deep;
 * nothing at a batch of one); NN__KP_TILES or NN__KP_WTILES, that form wherever
 * nn__densek_can says it runs (a plan's choice, nn/cpu/plan.c). False also when scratch
 * could not be had. */
bool nn__densek_forward(int p, const float *x, const float *w, const float *b, float *y, int B,
                        int in, int out,
                        bool relu); /* y = x W^T (+ b when not NULL), max(y, 0) if relu */
bool nn__densek_dx(int p, const float *dy, const float *w, float *dx, bool acc, int B, int in,
                   int out); /* dx (+)= dy W */
bool nn__densek_dw(int p, const float *dy, const float *x, float *dw, int B, int in,
                   int out); /* dW += dy^T x */
/* Whether form p (NN__KP_TILES, NN__KP_WTILES) can run product ph (NN__PH_FWD, _DW, _DX)
 * of a B x in -> out dense layer on the instruction set in use, paying or not. */
bool nn__densek_can(int ph, int p, int B, int in, int out);
/* Sets a dense node's n->kp for its forward (bwd false) or backward at batch B, as
 * nn__plan_conv does for a conv2d: from the node's plans, the file, or by timing each
 * product's candidates (nn__sgemm and the forms nn__densek_can allows) with run, which
 * must run product ph of n on path p into out (a buffer of the product's size). */
typedef void (*nn__dense_run)(nn_model *m, nn__node *n, int B, int ph, int p, float *out);
void nn__plan_dense(nn_model *m, nn__node *n, int B, bool bwd, nn__dense_run run);

extern const nn__layer_ops nn__cpu_dense, nn__cpu_act, nn__cpu_dropout, nn__cpu_view, nn__cpu_slice,
    nn__cpu_add, nn__cpu_concat, nn__cpu_embedding, nn__cpu_conv, nn__cpu_convt, nn__cpu_maxpool,
    nn__cpu_avgpool, nn__cpu_batchnorm, nn__cpu_layernorm, nn__cpu_lstm, nn__cpu_gru, nn__cpu_mul;

#endif
