/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/convk.c — conv2d (and conv-transpose2d, its adjoint) by nn's own packed
 * implicit GEMM.
 *
 * With K = C_in*kh*kw and x̂ the (implicit) im2col matrix of a sample, (K, P):
 *
 *   forward      y[co][p]  = b[co] + sum_k W[co][k] x̂[k][p]       M = C_out, N = B*P
 *   backward dW  dW[co][k] += sum_(s,p) dy[co][p] x̂[k][p]         M = C_out, N = K
 *   backward dx  dx̂[p][k] = sum_co dy[co][p] W[co][k], col2im'd   M = P,     N = K
 *
 * Each is a GEMM C (M, N) = A (M, L) B (L, N) cut into MR x NR tiles that one
 * micro-kernel computes in registers. Panels of B and A are packed into the order the
 * micro-kernel reads them (B: NR floats per contraction step, A: MR floats), straight
 * from NCHW tensors: the im2col matrix is never written out whole, which im2col + sgemm
 * does and then packs again. A panel's columns may cross output rows and samples, so a
 * 7x7 output does not leave lanes of a 16- or 32-wide panel idle. Tiles come back through
 * a small buffer and are written where they belong (NCHW plus the bias, dW, or added into
 * dx at the input positions they were read from), so no pass over the whole output follows.
 *
 * The micro-kernels: AVX-512 8x32 (16 zmm accumulators), AVX2+FMA 6x16 (12 ymm), and a
 * portable 4x8 in the compiler's vector extension (SSE2 on x86-64, NEON on arm64). They are
 * chosen at run time by CPUID, so one binary runs on either kind of machine.
 *
 * Threads (nn__parallel_for): forward by panels of columns, dx by samples (a sample's
 * scatter stays on one thread), dW by groups of panels of K (each thread owns its dW
 * columns).
 *
 * A conv2d forward whose space-to-depth input has 16 channels or more runs direct instead:
 * the batch laid out once channels-last, the micro-kernel reading MR output pixels' taps
 * where they lie (no panel packing). So does dx (and a conv-transpose's forward) where the
 * s2d kernel has few zero taps: W's columns in tap order, so a tile's rows are added into
 * a channels-last dxs as vectors, not scattered float by float (SHOAL_NN_DIRECT=0 turns
 * both off). A small stride-1 conv without padding (MinAtar's) runs its forward and dW on
 * the row kernels: an output row's pixels as vectors, x, W and dy read where they lie
 * (SHOAL_NN_ROW=0 turns them off).
 *
 * A conv2d whose only reader is a ReLU writes max(y, 0) into the ReLU's buffer
 * (nn__node.fuse_act). 3x3 stride-1 layers, and strided ones whose kernel is 2 or 3 times
 * the stride (4x4/2, 8x8/4), run their forward, dx and dW by Winograd F(m x m, r x r) instead
 * where it pays (nn/cpu/wino.c), on these micro-kernels; their db stays here.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu.h"

/* The packing and NCHW loops are compiled for each ISA too (NN__CLONES), so their copies
 * use the machine's widest vectors (the micro-kernels are per-ISA already). */

#define MR_MAX 8
#define NR_MAX 32
#define PC 256      /* contraction columns per dW chunk: a B^T chunk of 32 KB */
#define G_MAX 8     /* panels of K per dW task */
#define K_MAX 16384 /* beyond these the GEMM path runs the layer */
#define CO_MAX 4096
#define SCRATCH_MAX ((size_t)32 << 20) /* floats: 128 MB */

/* C (MR, NR) = (acc ? C : 0) + sum_l A[l*MR + i] B[l*NR + j]. */
typedef void (*ukern_fn)(int L, const float *A, const float *B, float *C, int acc);

typedef struct isa {
  int mr, nr;
  ukern_fn k;
} isa;

/* ---- micro-kernels ---------------------------------------------------------------- */

/* 4 x 8 in 4-float vectors of the compiler's vector extension (SSE, NEON, or scalar
 * code where there is none): 8 accumulators, which fit any 16-register vector file. */
typedef float nn__v4 __attribute__((vector_size(16)));

static inline nn__v4 v4_load(const float *p) {
  nn__v4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static void ukern_portable(int L, const float *A, const float *B, float *C, int acc) {
  nn__v4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  if (acc) {
    c00 = v4_load(C), c01 = v4_load(C + 4), c10 = v4_load(C + 8), c11 = v4_load(C + 12);
    c20 = v4_load(C + 16), c21 = v4_load(C + 20), c30 = v4_load(C + 24), c31 = v4_load(C + 28);
  }
  for (int l = 0; l < L; l++, A += 4, B += 8) {
    nn__v4 b0 = v4_load(B), b1 = v4_load(B + 4);
    c00 += A[0] * b0, c01 += A[0] * b1;
    c10 += A[1] * b0, c11 += A[1] * b1;
    c20 += A[2] * b0, c21 += A[2] * b1;
    c30 += A[3] * b0, c31 += A[3] * b1;
  }
  memcpy(C, &c00, 16), memcpy(C + 4, &c01, 16), memcpy(C + 8, &c10, 16);
  memcpy(C + 12, &c11, 16), memcpy(C + 16, &c20, 16), memcpy(C + 20, &c21, 16);
  memcpy(C + 24, &c30, 16), memcpy(C + 28, &c31, 16);
}

#ifdef NN__X86
/* Named accumulators, not an array: gcc kept part of a __m256 c[6][2] on the stack
 * inside the loop (a store per FMA pair, half the speed). */
/* row i of the tile += *src times the two B vectors */
#define NN__ROW2(i, src)                        \
  do {                                          \
    __m256 v_ = _mm256_broadcast_ss(src);       \
    c##i##0 = _mm256_fmadd_ps(v_, b0, c##i##0); \
    c##i##1 = _mm256_fmadd_ps(v_, b1, c##i##1); \
  } while (0)
/* the 6x16 tile's accumulators c00..c51 into C (ldc 16) */
#define NN__STORE6X16(C)                                              \
  do {                                                                \
    _mm256_storeu_ps((C) + 0, c00), _mm256_storeu_ps((C) + 8, c01);   \
    _mm256_storeu_ps((C) + 16, c10), _mm256_storeu_ps((C) + 24, c11); \
    _mm256_storeu_ps((C) + 32, c20), _mm256_storeu_ps((C) + 40, c21); \
    _mm256_storeu_ps((C) + 48, c30), _mm256_storeu_ps((C) + 56, c31); \
    _mm256_storeu_ps((C) + 64, c40), _mm256_storeu_ps((C) + 72, c41); \
    _mm256_storeu_ps((C) + 80, c50), _mm256_storeu_ps((C) + 88, c51); \
  } while (0)
__attribute__((target("avx2,fma"))) static void ukern_avx2(int L, const float *A, const float *B,
                                                           float *C, int acc) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  if (acc) {
    c00 = _mm256_loadu_ps(C + 0), c01 = _mm256_loadu_ps(C + 8);
    c10 = _mm256_loadu_ps(C + 16), c11 = _mm256_loadu_ps(C + 24);
    c20 = _mm256_loadu_ps(C + 32), c21 = _mm256_loadu_ps(C + 40);
    c30 = _mm256_loadu_ps(C + 48), c31 = _mm256_loadu_ps(C + 56);
    c40 = _mm256_loadu_ps(C + 64), c41 = _mm256_loadu_ps(C + 72);
    c50 = _mm256_loadu_ps(C + 80), c51 = _mm256_loadu_ps(C + 88);
  } else {
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  }
  for (int l = 0; l < L; l++) {
    __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8);
    NN__ROW2(0, A + 0);
    NN__ROW2(1, A + 1);
    NN__ROW2(2, A + 2);
    NN__ROW2(3, A + 3);
    NN__ROW2(4, A + 4);
    NN__ROW2(5, A + 5);
    A += 6, B += 16;
  }
  NN__STORE6X16(C);
}

__attribute__((target("avx512f"))) static void ukern_avx512(int L, const float *A, const float *B,
                                                            float *C, int acc) {
  __m512 c[8][2];
  for (int i = 0; i < 8; i++)
    for (int h = 0; h < 2; h++)
      c[i][h] = acc ? _mm512_loadu_ps(C + i * 32 + h * 16) : _mm512_setzero_ps();
  for (int l = 0; l < L; l++) {
    __m512 b0 = _mm512_loadu_ps(B), b1 = _mm512_loadu_ps(B + 16);
    for (int i = 0; i < 8; i++) {
      __m512 a = _mm512_set1_ps(A[i]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
    A += 8, B += 32;
  }
  for (int i = 0; i < 8; i++)
    for (int h = 0; h < 2; h++) _mm512_storeu_ps(C + i * 32 + h * 16, c[i][h]);
}
#endif

static const isa g_isa[] = {
    [NN__CONV_PORTABLE] = {4, 8, ukern_portable},
#ifdef NN__X86
    [NN__CONV_AVX2] = {6, 16, ukern_avx2},
    [NN__CONV_AVX512] = {8, 32, ukern_avx512},
#endif
};

/* ---- direct micro-kernels: A read in place from channels-last rows -----------------
 * C (MR, NR) = sum_{t<T} sum_{l<Cs} a[i][toff[t] + l] B[(t*Cs + l)*NR + j]: row i of A is
 * pixel i's Cs channels at tap t of the channels-last input, broadcast from where it lies,
 * so nothing of the input is packed (the direct forward below). */
typedef void (*dkern_fn)(int T, const int *toff, int Cs, const float *const *a, const float *B,
                         float *C);

static void dk_portable(int T, const int *toff, int Cs, const float *const *a, const float *B,
                        float *C) {
  nn__v4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  for (int t = 0; t < T; t++) {
    const float *a0 = a[0] + toff[t], *a1 = a[1] + toff[t], *a2 = a[2] + toff[t],
                *a3 = a[3] + toff[t];
    for (int l = 0; l < Cs; l++, B += 8) {
      nn__v4 b0 = v4_load(B), b1 = v4_load(B + 4);
      c00 += a0[l] * b0, c01 += a0[l] * b1;
      c10 += a1[l] * b0, c11 += a1[l] * b1;
      c20 += a2[l] * b0, c21 += a2[l] * b1;
      c30 += a3[l] * b0, c31 += a3[l] * b1;
    }
  }
  memcpy(C, &c00, 16), memcpy(C + 4, &c01, 16), memcpy(C + 8, &c10, 16);
  memcpy(C + 12, &c11, 16), memcpy(C + 16, &c20, 16), memcpy(C + 20, &c21, 16);
  memcpy(C + 24, &c30, 16), memcpy(C + 28, &c31, 16);
}

#ifdef NN__X86
__attribute__((target("avx2,fma"))) static void dk_avx2(int T, const int *toff, int Cs,
                                                        const float *const *a, const float *B,
                                                        float *C) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  for (int t = 0; t < T; t++) {
    const float *a0 = a[0] + toff[t], *a1 = a[1] + toff[t], *a2 = a[2] + toff[t];
    const float *a3 = a[3] + toff[t], *a4 = a[4] + toff[t], *a5 = a[5] + toff[t];
    for (int l = 0; l < Cs; l++, B += 16) {
      __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8);
      NN__ROW2(0, a0 + l);
      NN__ROW2(1, a1 + l);
      NN__ROW2(2, a2 + l);
      NN__ROW2(3, a3 + l);
      NN__ROW2(4, a4 + l);
      NN__ROW2(5, a5 + l);
    }
  }
  NN__STORE6X16(C);
}

__attribute__((target("avx512f"))) static void dk_avx512(int T, const int *toff, int Cs,
                                                         const float *const *a, const float *B,
                                                         float *C) {
  __m512 c[8][2];
  for (int i = 0; i < 8; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int t = 0; t < T; t++) {
    const float *r[8];
    for (int i = 0; i < 8; i++) r[i] = a[i] + toff[t];
    for (int l = 0; l < Cs; l++, B += 32) {
      __m512 b0 = _mm512_loadu_ps(B), b1 = _mm512_loadu_ps(B + 16);
      for (int i = 0; i < 8; i++) {
        __m512 v = _mm512_set1_ps(r[i][l]);
        c[i][0] = _mm512_fmadd_ps(v, b0, c[i][0]);
        c[i][1] = _mm512_fmadd_ps(v, b1, c[i][1]);
      }
    }
  }
  for (int i = 0; i < 8; i++) {
    _mm512_storeu_ps(C + i * 32, c[i][0]);
    _mm512_storeu_ps(C + i * 32 + 16, c[i][1]);
  }
}
#endif

static const dkern_fn g_dk[] = {
    [NN__CONV_PORTABLE] = dk_portable,
#ifdef NN__X86
    [NN__CONV_AVX2] = dk_avx2,
    [NN__CONV_AVX512] = dk_avx512,
#endif
};

/* ---- dispatch --------------------------------------------------------------------- */

static nn__conv_path g_path;
static pthread_once_t g_path_once = PTHREAD_ONCE_INIT;

static nn__conv_path g_best;
static bool g_forced; /* by SHOAL_NN_CONV_PATH or nn__conv_path_force */

/* The path named e, or -1; one the CPU lacks gives the best it has (CI on a smaller CPU). */
static int path_of(const char *e) {
  for (int p = NN__CONV_GEMM; p <= NN__CONV_AVX512; p++)
    if (!strcmp(e, nn__conv_path_name((nn__conv_path)p)))
      return (nn__conv_path)p <= g_best ? p : (int)g_best;
  return -1;
}

static void path_init(void) {
  nn__conv_path best = NN__CONV_PORTABLE;
#ifdef NN__X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = NN__CONV_AVX2;
  if (__builtin_cpu_supports("avx512f")) best = NN__CONV_AVX512;
#endif
  g_best = g_path = best;
  const char *e = getenv("SHOAL_NN_CONV_PATH");
  int p = e && *e ? path_of(e) : -1;
  if (p >= 0) g_path = (nn__conv_path)p, g_forced = true;
}

nn__conv_path nn__conv_path_get(void) {
  pthread_once(&g_path_once, path_init);
  return g_path;
}

const char *nn__conv_path_force(const char *name) {
  pthread_once(&g_path_once, path_init);
  if (!name) return nn__conv_path_name(g_path);
  int p = path_of(name);
  if (p < 0) return NULL;
  g_path = (nn__conv_path)p, g_forced = true;
  return nn__conv_path_name(g_path);
}

const char *nn__conv_path_name(nn__conv_path p) {
  static const char *names[] = {"gemm", "portable", "avx2", "avx512"};
  return p >= NN__CONV_GEMM && p <= NN__CONV_AVX512 ? names[p] : "?";
}

/* ---- geometry: the input in space-to-depth form ---------------------------------------
 * A stride-s convolution is a stride-1 one over the input rearranged space-to-depth:
 *   xs[(c*s + ri)*s + rj][a][b] = x[c][a*s + ri - pad][b*s + rj - pad]   (0 outside x)
 * so tap (ki, kj) of channel c reads xs channel (c*s + ki%s)*s + kj%s at (oh + ki/s,
 * ow + kj/s). Padding is folded in too, so the packing loops below are plain contiguous
 * copies of output-row runs with no bounds checks, where im2col of an 8x8/4 convolution
 * gathers every 4th float with a bounds test on each. The rearrangement reads x once. */

typedef struct geom {
  int C, H, W, kh, kw, s, pad; /* input and kernel (dilation 1) */
  int Co, Ho, Wo, P, K;        /* output; P = Ho*Wo, K = C*kh*kw */
  int Hs, Ws;                  /* xs is (C*s*s, Hs, Ws) */
  size_t xsF;                  /* floats per sample of xs */
} geom;

/* A conv-transpose2d node is seen as the conv2d it is the adjoint of: that conv's input
 * is the node's output (C_out, H, W) and its output the node's input; the weights
 * (C_in, C_out, kh, kw) are that conv's (its C_out, C_in, kh, kw) as they lie. Output
 * padding only adds rows and columns that the conv never reads. */
static geom geom_of(const nn_model *m, const nn__node *n) {
  const nn__node *x = &m->nodes[n->in[0]];
  geom g = {x->C,   x->H, x->W, n->kh, n->kw,       n->stride,
            n->pad, n->C, n->H, n->W,  n->H * n->W, x->C * n->kh * n->kw};
  if (n->kind == NN__CONVT)
    g = (geom){n->C,   n->H, n->W, n->kh, n->kw,       n->stride,
               n->pad, x->C, x->H, x->W,  x->H * x->W, n->C * n->kh * n->kw};
  g.Hs = g.Ho + (g.kh - 1) / g.s, g.Ws = g.Wo + (g.kw - 1) / g.s;
  g.xsF = (size_t)g.C * g.s * g.s * g.Hs * g.Ws;
  return g;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

#ifdef NN__X86
/* The inner part of a row of x (columns b in [blo, bhi), every rj inside x) split into its
 * s = 4 or s = 2 rows of xs, 8 columns at a time: e_rj[b] = r[b*s + rj - pad]. The
 * compiler's own vectorisation of these loops gathered through vpermd with memory operands
 * and took a fifth of Nature-DQN's first conv. Four (two) loads, in-lane transposes,
 * one lane permute per output vector. */
__attribute__((target("avx2"))) static int s2d_row4(const float *r, float *e0, float *e1, float *e2,
                                                    float *e3, int blo, int bhi, int pad) {
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int b = blo;
  for (; b + 8 <= bhi; b += 8) {
    const float *p = r + 4 * b - pad; /* lanes: columns b, b+1 | b+2, b+3 | ... */
    __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
    __m256 v2 = _mm256_loadu_ps(p + 16), v3 = _mm256_loadu_ps(p + 24);
    __m256 t0 = _mm256_unpacklo_ps(v0, v1), t1 = _mm256_unpackhi_ps(v0, v1);
    __m256 t2 = _mm256_unpacklo_ps(v2, v3), t3 = _mm256_unpackhi_ps(v2, v3);
    /* each: columns b, b+2, b+4, b+6 | b+1, b+3, b+5, b+7 of one rj */
    __m256 q0 = _mm256_shuffle_ps(t0, t2, 0x44), q1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 q2 = _mm256_shuffle_ps(t1, t3, 0x44), q3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    _mm256_storeu_ps(e0 + b, _mm256_permutevar8x32_ps(q0, perm));
    _mm256_storeu_ps(e1 + b, _mm256_permutevar8x32_ps(q1, perm));
    _mm256_storeu_ps(e2 + b, _mm256_permutevar8x32_ps(q2, perm));
    _mm256_storeu_ps(e3 + b, _mm256_permutevar8x32_ps(q3, perm));
  }
  return b;
}

__attribute__((target("avx2"))) static int s2d_row2(const float *r, float *e0, float *e1, int blo,
                                                    int bhi, int pad) {
  int b = blo;
  for (; b + 8 <= bhi; b += 8) {
    const float *p = r + 2 * b - pad;
    __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
    /* columns b, b+1, b+4, b+5 | b+2, b+3, b+6, b+7 */
    __m256 ev = _mm256_shuffle_ps(v0, v1, 0x88), od = _mm256_shuffle_ps(v0, v1, 0xDD);
    _mm256_storeu_ps(e0 + b, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
    _mm256_storeu_ps(e1 + b, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
  }
  return b;
}
#endif

/* One sample x (C, H, W) -> xs, or back: dx (+)= the entries of dxs that lie inside x. */
/* Input row by input row: the s rows of xs that one row of x feeds are written in one
 * pass over it (for strides 2 and 4 a loop the compiler turns into loads and shuffles),
 * not s strided passes. Columns near the padding take the checked loop. */
NN__CLONES static void to_s2d(const geom *g, const float *x, float *xs, bool avx2) {
  int s = g->s, pad = g->pad, W = g->W, Ws = g->Ws;
  size_t plane = (size_t)g->Hs * Ws;
  /* b with every rj inside x: b*s - pad >= 0 and b*s + s-1 - pad < W */
  int blo = clampi((pad + s - 1) / s, 0, Ws);
  int bhi = clampi(W + pad - s < 0 ? 0 : (W + pad - s) / s + 1, blo, Ws);
  /* a outer, ri inner: x's rows are read in order (ih = a*s + ri - pad), which the
   * hardware prefetcher follows; the batch's input usually comes from memory */
  for (int c = 0; c < g->C; c++)
    for (int a = 0; a < g->Hs; a++)
      for (int ri = 0; ri < s; ri++) {
        int ih = a * s + ri - pad;
        float *d = xs + (size_t)(c * s + ri) * s * plane + (size_t)a * Ws;
        if ((unsigned)ih >= (unsigned)g->H) {
          for (int rj = 0; rj < s; rj++) memset(d + rj * plane, 0, (size_t)Ws * sizeof(float));
          continue;
        }
        const float *r = x + ((size_t)c * g->H + ih) * W; /* r[b*s + rj - pad] */
        for (int rj = 0; rj < s; rj++)
          for (int b = 0; b < Ws; b++) {
            if (b == blo) b = bhi;
            if (b >= Ws) break;
            int iw = b * s + rj - pad;
            d[rj * plane + b] = (unsigned)iw < (unsigned)W ? r[iw] : 0.0f;
          }
        if (s == 2) {
          float *e0 = d, *e1 = d + plane;
          int b = blo;
#ifdef NN__X86
          if (avx2) b = s2d_row2(r, e0, e1, blo, bhi, pad);
#endif
          for (; b < bhi; b++) e0[b] = r[2 * b - pad], e1[b] = r[2 * b + 1 - pad];
        } else if (s == 4) {
          float *e0 = d, *e1 = d + plane, *e2 = d + 2 * plane, *e3 = d + 3 * plane;
          int b = blo;
#ifdef NN__X86
          if (avx2) b = s2d_row4(r, e0, e1, e2, e3, blo, bhi, pad);
#endif
          for (; b < bhi; b++)
            e0[b] = r[4 * b - pad], e1[b] = r[4 * b + 1 - pad], e2[b] = r[4 * b + 2 - pad],
            e3[b] = r[4 * b + 3 - pad];
        } else {
          for (int rj = 0; rj < s; rj++)
            for (int b = blo; b < bhi; b++) d[rj * plane + b] = r[b * s + rj - pad];
        }
      }
}

NN__CLONES static void from_s2d(const geom *g, const float *xs, float *x, bool acc) {
  int s = g->s;
  if (!acc) memset(x, 0, (size_t)g->C * g->H * g->W * sizeof(float));
  for (int c = 0; c < g->C; c++)
    for (int ri = 0; ri < s; ri++)
      for (int rj = 0; rj < s; rj++) {
        const float *d = xs + ((size_t)(c * s + ri) * s + rj) * g->Hs * g->Ws;
        int off = rj - g->pad;
        int lo = clampi(off >= 0 ? 0 : (-off + s - 1) / s, 0, g->Ws);
        int hi = clampi(g->W - off <= 0 ? 0 : (g->W - off + s - 1) / s, lo, g->Ws);
        for (int a = 0; a < g->Hs; a++, d += g->Ws) {
          int ih = a * s + ri - g->pad;
          if ((unsigned)ih >= (unsigned)g->H) continue;
          float *r = x + ((size_t)c * g->H + ih) * g->W + off;
          if (s == 1)
            for (int b = lo; b < hi; b++) r[b] += d[b];
          else
            for (int b = lo; b < hi; b++) r[b * s] += d[b];
        }
      }
}

/* koff[k]: where tap k = (c, ki, kj) starts in a sample of xs. */
static void tap_offsets(const geom *g, int *koff) {
  int s = g->s;
  for (int c = 0, k = 0; c < g->C; c++)
    for (int ki = 0; ki < g->kh; ki++)
      for (int kj = 0; kj < g->kw; kj++, k++) {
        int cs = (c * s + ki % s) * s + kj % s;
        koff[k] = (cs * g->Hs + ki / s) * g->Ws + kj / s;
      }
}

/* A run of panel columns along one output row of one sample. */
typedef struct seg {
  int j0, len; /* panel columns [j0, j0+len) */
  size_t xoff; /* the run's first pixel in xs: sample*xsF + oh*Ws + ow */
  size_t yoff; /* and in y: sample*C_out*P + oh*Wo + ow */
} seg;

/* Cuts global columns [n0, n0+cnt) (n = sample*P + p) into runs along output rows. */
static int segments(const geom *g, int n0, int cnt, seg *sg) {
  int ns = 0;
  for (int j = 0; j < cnt;) {
    int n = n0 + j, s = n / g->P, p = n - s * g->P, oh = p / g->Wo, ow = p - oh * g->Wo;
    int len = g->Wo - ow < cnt - j ? g->Wo - ow : cnt - j;
    sg[ns++] = (seg){j, len, s * g->xsF + (size_t)oh * g->Ws + ow,
                     (size_t)s * g->Co * g->P + (size_t)oh * g->Wo + ow};
    j += len;
  }
  return ns;
}

/* 8 floats copied as one vector: a memcpy of 32 bytes is two 16-byte moves under gcc's
 * generic tuning, even in the AVX2 clone (the forward's packing ran at half speed). */
typedef float nn__v8u __attribute__((vector_size(32), aligned(4), may_alias));
static inline void cp8(float *d, const float *s) { *(nn__v8u *)d = *(const nn__v8u *)s; }

/* dst[kk*ks + j*cs] = x̂[k0+kk][column j]. Inlined with constant strides, so the
 * forward's copies (cs = 1) vectorise. */
static inline __attribute__((always_inline)) void pack_cols(const float *xs, const int *koff,
                                                            const seg *sg, int ns, int k0, int nk,
                                                            float *dst, int ks, int cs) {
  for (int kk = 0; kk < nk; kk++) {
    const float *base = xs + koff[k0 + kk];
    float *d = dst + (size_t)kk * ks;
    for (int q = 0; q < ns; q++) {
      const float *src = base + sg[q].xoff;
      float *o = d + (size_t)sg[q].j0 * cs;
      for (int t = 0; t < sg[q].len; t++) o[t * cs] = src[t];
    }
  }
}

/* The forward's panel, dst[kk*nr + j] = x̂[kk][column j], copied in whole 8-float
 * chunks (a run is 7 to 20 floats in the Nature-DQN and DCGAN layers, which the vector
 * loop above leaves mostly to its scalar tail). A chunk may read up to 7 floats past a
 * run, which the next run or row overwrites, or which land in lanes past cnt that
 * nothing reads back; so dst needs 8 floats of slack and xs readable floats up to xend
 * (else the run's copy is exact). */
static inline __attribute__((always_inline)) void pack_rows(const float *xs, const float *xend,
                                                            const int *koff, int kmax,
                                                            const seg *sg, int ns, int K,
                                                            float *dst, int nr) {
  /* Run by run, the taps inside: a run whose every tap's chunks lie before xend (all but
   * the batch's last few; kmax is the largest koff) copies with no test per tap. A run's
   * chunks may not pass the panel's last column: there they would land in the next tap's
   * row, already written. */
  for (int q = 0; q < ns; q++) {
    const float *src = xs + sg[q].xoff;
    float *o = dst + sg[q].j0;
    int len = sg[q].len, l8 = (len + 7) & ~7;
    bool room = sg[q].j0 + l8 <= nr;
    if (room && src + kmax + l8 <= xend) {
      if (len <= 8)
        for (int k = 0; k < K; k++) cp8(o + (size_t)k * nr, src + koff[k]);
      else if (len <= 16)
        for (int k = 0; k < K; k++)
          cp8(o + (size_t)k * nr, src + koff[k]), cp8(o + (size_t)k * nr + 8, src + koff[k] + 8);
      else
        for (int k = 0; k < K; k++)
          for (int t = 0; t < len; t += 8) cp8(o + (size_t)k * nr + t, src + koff[k] + t);
      continue;
    }
    for (int k = 0; k < K; k++) {
      const float *a = src + koff[k];
      float *d = o + (size_t)k * nr;
      if (room && a + l8 <= xend)
        for (int t = 0; t < len; t += 8) cp8(d + t, a + t);
      else
        for (int t = 0; t < len; t++) d[t] = a[t];
    }
  }
}

#ifdef NN__X86
/* dW's panel for 8 taps: dst[j*nr + r] = x̂[k_r][column j], r < 8, koff8 their offsets:
 * 8 columns of 8 taps at a time, loaded as rows and transposed in registers, where the
 * scalar copy (pack_cols with cs = nr) made a strided store per float and took longer
 * than the products (Nature-DQN's first conv: a third of its backward). As pack_rows, a
 * run is read and written in whole 8-column blocks: the writes past it land in the next
 * run's columns (written after) or past the chunk (dst has 8 columns of slack), and a
 * run whose reads would pass xend is copied exactly. */
__attribute__((target("avx2"))) static void pack_t8(const float *xs, const float *xend,
                                                    const int *koff8, const seg *sg, int ns,
                                                    float *dst, int nr) {
  const float *b[8];
  int kmax = 0;
  for (int r = 0; r < 8; r++) {
    b[r] = xs + koff8[r];
    kmax = koff8[r] > kmax ? koff8[r] : kmax;
  }
  for (int q = 0; q < ns; q++) {
    size_t off = sg[q].xoff;
    int len = sg[q].len;
    float *o = dst + (size_t)sg[q].j0 * nr;
    if (xs + kmax + off + ((len + 7) & ~7) > xend) {
      for (int t = 0; t < len; t++)
        for (int r = 0; r < 8; r++) o[(size_t)t * nr + r] = b[r][off + t];
      continue;
    }
    for (int t = 0; t < len; t += 8) nn__tr8x8(b, off + t, o + (size_t)t * nr, nr);
  }
}
#endif

/* ---- scratch ------------------------------------------------------------------------- */

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Scratch layout (floats):
 *   W packed (for forward or dx)   max(C_out+MR_MAX, ...) x K, panels of K rounded to NR_MAX
 *   tap offsets                    K ints
 *   xs of the batch                max_batch * xsF
 *   dy packed for dW               max_batch * P * (C_out + MR_MAX)
 *   per-sample sums of dy for db   max_batch * C_out
 *   per thread: the largest of a forward B panel (K x NR), a dW chunk (B^T (PC+8) x NR and
 *   tiles for G_MAX panels of every block of C_out) and dx's (A panels of a sample's
 *   pixels (P + MR) x C_out, dxs one sample)
 * sized for the widest ISA and the pool's most threads, so the path and thread count
 * can change after build. C_out rounded up to any MR <= MR_MAX is at most C_out+MR_MAX. */
typedef struct layout {
  size_t w, koff, xs, dyp, dbs, thr, tstride, total;
} layout;

static size_t direct_w_floats(const geom *g);
static size_t dxd_w_floats(const geom *g);

static layout layout_of(const geom *g, int max_batch) {
  layout L;
  size_t cp = (size_t)g->Co + MR_MAX, kp = ((size_t)g->K + NR_MAX - 1) / NR_MAX * NR_MAX;
  size_t wa = cp * g->K, wb = kp * g->Co, wd = direct_w_floats(g), wx = dxd_w_floats(g);
  wa = wd > wa ? wd : wa;
  wa = wx > wa ? wx : wa;
  size_t f = (size_t)g->K * NR_MAX;
  size_t w = (size_t)(PC + 8) * NR_MAX + G_MAX * cp * NR_MAX;      /* pack_t8's slack */
  size_t d = up16((size_t)(g->P + MR_MAX) * g->Co) + up16(g->xsF); /* dx_task, dxd_task */
  L.w = 0;
  L.koff = up16(wa > wb ? wa : wb);
  L.xs = L.koff + up16((size_t)g->K);
  L.dyp = L.xs + up16((size_t)max_batch * g->xsF) + 16; /* pack_rows reads past the end */
  L.dbs = L.dyp + up16((size_t)max_batch * g->P * cp);
  L.thr = L.dbs + up16((size_t)max_batch * (g->Co + g->C));         /* conv-transpose: its C_out */
  L.tstride = up16(f > w ? (f > d ? f : d) : (w > d ? w : d)) + 16; /* and writes */
  L.total = L.thr + (size_t)nn__pool_max_threads() * L.tstride;
  return L;
}

size_t nn__convk_scratch(const nn_model *m, const nn__node *n, int max_batch) {
  if (n->kind == NN__CONV && n->dil != 1) return 0; /* dilated: the GEMM path */
  geom g = geom_of(m, n);
  if (g.K > K_MAX || g.Co > CO_MAX) return 0;
  size_t total = layout_of(&g, max_batch).total, wino = nn__wino_scratch(m, n, max_batch);
  total = wino > total ? wino : total; /* Winograd's forward and dx, after dW */
  /* The batch's packed dy and xs grow with batch x image; past this (an ImageNet-sized
   * layer at batch 256) im2col + GEMM's few-MB groups are the better use of memory. */
  return total > SCRATCH_MAX ? 0 : total;
}

bool nn__convk_runs(const nn_model *m, const nn__node *n) {
  nn__conv_path p = nn__conv_path_get();
  if (p == NN__CONV_GEMM || !nn__convk_scratch(m, n, m->max_batch)) return false;
  /* K under one panel (DCGAN's first conv, K = 16): half of each dW and dx tile is
   * padding and the layer is all memory traffic; im2col + GEMM measured 2x faster. A
   * forced path runs every layer it can, so that the tests cover it on small shapes. */
  geom g = geom_of(m, n);
  return g_forced || g.K >= NR_MAX;
}

typedef struct job {
  const isa *I;
  geom g;
  layout L;
  const float *x, *dy, *bias, *Wp;
  float *y, *dw, *dx, *xs, *dyp, *tb;
  float *dbs;        /* (B, C_out): each sample's sum of dy, for db */
  const float *xend; /* xs is readable up to here (pack_rows) */
  const int *koff;
  int kmax; /* the largest of koff */
  size_t xF;
  int B, N, acc;
  int relu;            /* forward: y = max(W x + b, 0) (a fused ReLU, nn__node.fuse_act) */
  int G;               /* panels of K per dW task */
  const float *bias_x; /* conv-transpose forward: added to dx (its output) per channel */
} job;

static void job_init(job *j, nn_model *m, nn__node *n, int B) {
  memset(j, 0, sizeof *j);
  j->I = &g_isa[nn__conv_path_get()];
  j->g = geom_of(m, n);
  j->L = layout_of(&j->g, m->max_batch);
  const nn__node *xn = nn__input(m, n, 0);
  if (n->kind == NN__CONVT) /* the conv's input is this node's output (its gradient) */
    j->x = n->dout, j->xF = (size_t)n->F;
  else
    j->x = xn->out, j->xF = (size_t)xn->F;
  j->B = B, j->N = B * j->g.P;
  float *S = m->scratch;
  j->xs = S + j->L.xs, j->dyp = S + j->L.dyp, j->tb = S + j->L.thr;
  int *koff = (int *)(S + j->L.koff);
  tap_offsets(&j->g, koff);
  j->koff = koff;
  for (int k = 0; k < j->g.K; k++) j->kmax = koff[k] > j->kmax ? koff[k] : j->kmax;
}

static void s2d_task(void *vc, int s, int th) {
  const job *j = vc;
  to_s2d(&j->g, j->x + s * j->xF, j->xs + s * j->g.xsF, j->I->nr >= 16);
}

/* The batch in space-to-depth form; x itself when that is the identity (stride 1, no
 * padding: xs == x, Hs == H, Ws == W). */
static void make_xs(job *j) {
  if (j->g.s == 1 && j->g.pad == 0) {
    j->xs = (float *)j->x;
    j->xend = j->x + j->B * j->xF;
    return;
  }
  j->xend = j->xs + j->B * j->g.xsF + 16;
  nn__parallel_for(j->B, s2d_task, j);
}

/* ---- forward ------------------------------------------------------------------------- */

NN__CLONES static void fwd_task(void *vc, int task, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr, n0 = task * nr, cnt = j->N - n0 < nr ? j->N - n0 : nr;
  float *Bp = j->tb + (size_t)th * j->L.tstride;
  seg sg[NR_MAX];
  int ns = segments(g, n0, cnt, sg);
  if (cnt < nr) memset(Bp, 0, (size_t)g->K * nr * sizeof(float));
  pack_rows(j->xs, j->xend, j->koff, j->kmax, sg, ns, g->K, Bp, nr);
  /* In y a sample's pixels are contiguous across output rows: merge the runs, so the
   * writes below are a vector loop over up to NR columns, not rows of Wo. */
  int nw = 0;
  for (int q = 0; q < ns; q++) {
    if (nw && sg[nw - 1].yoff + sg[nw - 1].len == sg[q].yoff) {
      sg[nw - 1].len += sg[q].len;
      continue;
    }
    sg[nw++] = sg[q];
  }
  float tile[MR_MAX * NR_MAX] __attribute__((aligned(64)));
  for (int co0 = 0; co0 < g->Co; co0 += mr) {
    j->I->k(g->K, j->Wp + (size_t)co0 * g->K, Bp, tile, 0);
    int rows = g->Co - co0 < mr ? g->Co - co0 : mr;
    for (int i = 0; i < rows; i++) {
      int co = co0 + i;
      float bc = j->bias ? j->bias[co] : 0.0f;
      const float *t = tile + i * nr;
      for (int q = 0; q < nw; q++) {
        float *o = j->y + sg[q].yoff + (size_t)co * g->P;
        const float *tt = t + sg[q].j0;
        if (j->acc) /* conv-transpose's dx, a later consumer's share */
          for (int u = 0; u < sg[q].len; u++) o[u] += tt[u];
        else if (j->relu) /* as act_forward's ReLU: x > 0 ? x : 0 */
          for (int u = 0; u < sg[q].len; u++) o[u] = tt[u] + bc > 0 ? tt[u] + bc : 0.0f;
        else
          for (int u = 0; u < sg[q].len; u++) o[u] = tt[u] + bc;
      }
    }
  }
}

/* ---- direct forward ------------------------------------------------------------------
 * The forward above packs, for every panel of NR output pixels, all K taps of them: each
 * input value is copied kh*kw/s^2 times, and on a layer with few output channels (Nature-
 * DQN's first, C_out = 32) the copies cost as much as the products. Here the batch is laid
 * out once in space-to-depth form, channels last (xsn[pixel][cs], Cs = C*s*s channels),
 * and the micro-kernel reads tile rows of MR output pixels in place: tap t of pixel i is
 * Cs contiguous floats at xsn + (pixel_i + toff[t])*Cs, broadcast one by one against W's
 * NR output channels, packed per tap (zero where the s2d kernel extends past kh or kw). */

static int g_direct = -2; /* -1 unset: SHOAL_NN_DIRECT (0 off, else on) */
static pthread_once_t g_direct_once = PTHREAD_ONCE_INIT;
static void direct_init(void) {
  const char *e = getenv("SHOAL_NN_DIRECT");
  g_direct = e && *e ? (*e != '0') : 1;
}

int nn__direct_mode(int mode) {
  pthread_once(&g_direct_once, direct_init);
  int was = g_direct;
  if (mode == 0 || mode == 1) g_direct = mode;
  return was;
}

/* Channels of the s2d form and its taps. Few channels (MinAtar's 4) make each tap's run
 * too short for the kernel's loop, and the packed forward stays. */
static bool direct_runs(const nn__node *n, const geom *g) {
  pthread_once(&g_direct_once, direct_init);
  return g_direct && n->kind == NN__CONV && g->C * g->s * g->s >= 16;
}

typedef struct dgeom {
  int Cs, khs, kws, T, tps; /* s2d channels, taps, tiles per sample */
} dgeom;

static dgeom dgeom_of(const geom *g, int mr) {
  dgeom d = {g->C * g->s * g->s, (g->kh - 1) / g->s + 1, (g->kw - 1) / g->s + 1, 0, 0};
  d.T = d.khs * d.kws;
  d.tps = (g->P + mr - 1) / mr;
  return d;
}

static size_t direct_w_floats(const geom *g) {
  dgeom d = dgeom_of(g, 1);
  return ((size_t)g->Co + NR_MAX) * d.T * d.Cs;
}

/* Wd[((cp*T + t)*Cs + cs)*NR + q] = W[cp*NR + q][c][ki][kj], cs = (c*s + ki%s)*s + kj%s,
 * t = (ki/s)*kws + kj/s; zero past C_out and where ki >= kh or kj >= kw. */
static void pack_w_direct(const float *w, const geom *g, int nr, float *Wd, int *kmap) {
  /* kmap[k]: where tap k = (c, ki, kj) of W's row goes, in floats past its panel's start.
   * Zeros first, then blocks of 8 rows x 8 taps transposed in registers and stored as runs
   * of 8 output channels: W read a column at a time (C*kh*kw floats apart) with a division
   * per entry was 8% of Nature-DQN's step, and all of an actor's batch of one. */
  dgeom d = dgeom_of(g, 1);
  int s = g->s, ncp = (g->Co + nr - 1) / nr, K = g->K;
  for (int c = 0, k = 0; c < g->C; c++)
    for (int ki = 0; ki < g->kh; ki++)
      for (int kj = 0; kj < g->kw; kj++, k++)
        kmap[k] = (((ki / s) * d.kws + kj / s) * d.Cs + (c * s + ki % s) * s + kj % s) * nr;
  size_t panel = (size_t)d.T * d.Cs * nr;
  memset(Wd, 0, (size_t)ncp * panel * sizeof(float));
  int co = 0;
#ifdef NN__X86
  if (nr >= 16) /* the AVX2 and AVX-512 paths: runs of 8 within a panel of 16 or 32 */
    for (; co + 8 <= g->Co; co += 8) {
      float *o = Wd + (size_t)(co / nr) * panel + co % nr;
      const float *row[8];
      for (int i = 0; i < 8; i++) row[i] = w + (size_t)(co + i) * K;
      float tmp[64];
      int k = 0;
      for (; k + 8 <= K; k += 8) {
        nn__tr8x8(row, k, tmp, 8);
        for (int kk = 0; kk < 8; kk++) cp8(o + kmap[k + kk], tmp + kk * 8);
      }
      for (; k < K; k++)
        for (int i = 0; i < 8; i++) o[kmap[k] + i] = row[i][k];
    }
#endif
  for (; co < g->Co; co++) {
    float *o = Wd + (size_t)(co / nr) * panel + co % nr;
    for (int k = 0; k < K; k++) o[kmap[k]] = w[(size_t)co * K + k];
  }
}

/* One sample in space-to-depth form, channels last: s2d into the thread's buffer (x itself
 * at stride 1 without padding), then 8x8 transposes. */
NN__CLONES static void xsn_task(void *vc, int smp, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int Cs = g->C * g->s * g->s, HW = g->Hs * g->Ws;
  const float *src = j->x + smp * j->xF;
  if (g->s != 1 || g->pad) {
    float *t = j->tb + (size_t)th * j->L.tstride;
    to_s2d(g, src, t, j->I->nr >= 16);
    src = t;
  }
  float *d = j->xs + smp * g->xsF;
  int c0 = 0;
#ifdef NN__X86
  if (j->I->nr >= 16)
    for (; c0 + 8 <= Cs; c0 += 8) {
      const float *row[8];
      for (int i = 0; i < 8; i++) row[i] = src + (size_t)(c0 + i) * HW;
      int p = 0;
      for (; p + 8 <= HW; p += 8) nn__tr8x8(row, p, d + (size_t)p * Cs + c0, Cs);
      for (; p < HW; p++)
        for (int i = 0; i < 8; i++) d[(size_t)p * Cs + c0 + i] = row[i][p];
    }
#endif
  for (; c0 < Cs; c0++)
    for (int p = 0; p < HW; p++) d[(size_t)p * Cs + c0] = src[(size_t)c0 * HW + p];
}

#define DT_TILES 4 /* pixel tiles per task */

NN__CLONES static void direct_task(void *vc, int task, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr;
  dgeom d = dgeom_of(g, mr);
  int toff[64]; /* T <= 64: checked by the caller */
  for (int t = 0; t < d.T; t++) toff[t] = ((t / d.kws) * g->Ws + t % d.kws) * d.Cs;
  /* A tile's MR pixels run on across samples (each row has its own pointer), so a 7x7
   * output does not leave 5 of 54 rows idle per sample. */
  int ncp = (g->Co + nr - 1) / nr, N = j->B * g->P, ntiles = (N + mr - 1) / mr;
  float tile[MR_MAX * NR_MAX] __attribute__((aligned(64)));
  for (int ti = task * DT_TILES; ti < ntiles && ti < (task + 1) * DT_TILES; ti++) {
    int n0 = ti * mr, rows = N - n0 < mr ? N - n0 : mr;
    const float *a[MR_MAX];
    size_t ob[MR_MAX]; /* row i's output at y + ob[i] + co*P */
    for (int i = 0; i < mr; i++) {
      int n = n0 + (i < rows ? i : 0), smp = n / g->P, p = n - smp * g->P, oh = p / g->Wo;
      a[i] = j->xs + smp * g->xsF + ((size_t)oh * g->Ws + p - oh * g->Wo) * d.Cs;
      ob[i] = (size_t)smp * g->Co * g->P + p;
    }
    for (int cp = 0; cp < ncp; cp++) {
      g_dk[nn__conv_path_get()](d.T, toff, d.Cs, a, j->Wp + (size_t)cp * d.T * d.Cs * nr, tile);
      for (int q = 0; q < nr && cp * nr + q < g->Co; q++) {
        int co = cp * nr + q;
        float bc = j->bias ? j->bias[co] : 0.0f, *o = j->y + (size_t)co * g->P;
        if (j->relu)
          for (int i = 0; i < rows; i++) {
            float v = tile[i * nr + q] + bc;
            o[ob[i]] = v > 0 ? v : 0.0f;
          }
        else
          for (int i = 0; i < rows; i++) o[ob[i]] = tile[i * nr + q] + bc;
      }
    }
  }
}

static void direct_forward(job *j, nn_model *m, nn__node *n) {
  float *Wd = m->scratch + j->L.w;
  /* tap offsets are the packed path's; the direct one needs this map of W's taps instead */
  pack_w_direct(m->params + n->poff[0], &j->g, j->I->nr, Wd, (int *)(m->scratch + j->L.koff));
  j->Wp = Wd;
  j->xs = m->scratch + j->L.xs; /* channels last even where the s2d form is x itself */
  nn__parallel_for(j->B, xsn_task, j);
  int tiles = (j->B * j->g.P + j->I->mr - 1) / j->I->mr;
  nn__parallel_for((tiles + DT_TILES - 1) / DT_TILES, direct_task, j);
}

/* ---- row kernels ---------------------------------------------------------------------
 * A stride-1 conv without padding whose K is small (MinAtar's 4x3x3 = 36 over 16 output
 * channels): the packed GEMM's 6x16 tiles are a third empty over 16 channels and K = 36 in
 * dW, a forward tile's 36 steps are few for its packing and epilogue, and dy's packing and
 * the tile adds cost as much as the products. Here an output row's 8 pixels are one vector,
 * and the 8 input floats under it, for any tap, are contiguous in x:
 *   forward: a tile of 3 output rows x 4 channels, per tap 3 loads of x and 4 broadcasts
 *            of W as it lies, written to NCHW with the bias (and the fused ReLU);
 *   dW:      a tile of 4 channels x 3 taps summed over every (sample, row, 8 pixels),
 *            dy and x both read where they lie; lanes summed at the end.
 * No packing, no scratch. A row's last part vector is read and written under a mask. Rows,
 * channels and taps past the tile's end repeat its first and are dropped. dW's tasks own
 * their tiles and sum the samples in order: the same result on any thread count. */
#ifdef NN__X86
static int g_row = -2; /* -2 unset: SHOAL_NN_ROW (0 off, 2 every layer it can, else 1) */
static pthread_once_t g_row_once = PTHREAD_ONCE_INIT;
static void row_init(void) {
  const char *e = getenv("SHOAL_NN_ROW");
  g_row = e && *e == '0' ? 0 : e && *e == '2' ? 2 : 1;
}

int nn__row_mode(int mode) {
  pthread_once(&g_row_once, row_init);
  int was = g_row;
  if (mode >= 0 && mode <= 2) g_row = mode;
  return was;
}

/* On the AVX2 and AVX-512 paths (both have AVX2): stride 1, no padding, a conv2d; where it
 * pays, K up to 64 over rows of 8 pixels or more (measured on MinAtar's layer: the packed
 * forward 0.044 ms and dW with db 0.068, these 0.037 and 0.042). */
static bool row_runs(const job *j, const nn__node *n) {
  pthread_once(&g_row_once, row_init);
  const geom *g = &j->g;
  if (!g_row || j->I->mr < 6 || n->kind != NN__CONV || g->s != 1 || g->pad != 0) return false;
  return g_row == 2 || (g->K <= 64 && g->Wo >= 8);
}

/* lanes [0, n) of a mask, n <= 8 */
__attribute__((target("avx2"))) static inline __m256i row_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* One forward tile at column ow of rows oh0.. (nr of 3 real) and channels co0.. (nc of 4),
 * sample base xs and ys; part: the vector's lanes in the row (8 unless the row's tail). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
row_fwd_tile(const job *j, const float *xs, float *ys, const float *w, int oh0, int nr, int co0,
             int nc, int ow, int part) {
  const geom *g = &j->g;
  const float *x0 = xs + (size_t)oh0 * g->W + ow, *x1 = x0 + (nr > 1 ? g->W : 0),
              *x2 = x0 + (nr > 2 ? 2 * g->W : 0);
  const float *w0 = w + (size_t)co0 * g->K, *w1 = w0 + (nc > 1 ? g->K : 0),
              *w2 = w0 + (nc > 2 ? 2 * g->K : 0), *w3 = w0 + (nc > 3 ? 3 * g->K : 0);
  __m256i m = row_mask(part);
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00,
         a12 = a00, a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00;
  for (int t = 0; t < g->K; t++) {
    int o = j->koff[t];
    __m256 v0, v1, v2, c;
    if (part == 8)
      v0 = _mm256_loadu_ps(x0 + o), v1 = _mm256_loadu_ps(x1 + o), v2 = _mm256_loadu_ps(x2 + o);
    else
      v0 = _mm256_maskload_ps(x0 + o, m), v1 = _mm256_maskload_ps(x1 + o, m),
      v2 = _mm256_maskload_ps(x2 + o, m);
    /* one channel: its weight for tap t against the 3 rows */
#define ROW_FWD_CH(w, a0, a1, a2)                                                         \
  c = _mm256_broadcast_ss(w + t), a0 = _mm256_fmadd_ps(v0, c, a0),                       \
  a1 = _mm256_fmadd_ps(v1, c, a1), a2 = _mm256_fmadd_ps(v2, c, a2)
    ROW_FWD_CH(w0, a00, a10, a20);
    ROW_FWD_CH(w1, a01, a11, a21);
    ROW_FWD_CH(w2, a02, a12, a22);
    ROW_FWD_CH(w3, a03, a13, a23);
#undef ROW_FWD_CH
  }
  __m256 acc[3][4] = {{a00, a01, a02, a03}, {a10, a11, a12, a13}, {a20, a21, a22, a23}};
  for (int r = 0; r < nr; r++)
    for (int c = 0; c < nc; c++) {
      __m256 v = acc[r][c];
      if (j->bias) v = _mm256_add_ps(v, _mm256_broadcast_ss(j->bias + co0 + c));
      if (j->relu) v = _mm256_max_ps(v, _mm256_setzero_ps()); /* NaN -> 0, as x > 0 ? x : 0 */
      float *o = ys + (size_t)(co0 + c) * g->P + (size_t)(oh0 + r) * g->Wo + ow;
      if (part == 8)
        _mm256_storeu_ps(o, v);
      else
        _mm256_maskstore_ps(o, m, v);
    }
}

/* The forward of sample s. */
__attribute__((target("avx2,fma"))) static void row_fwd_task(void *vc, int s, int th) {
  (void)th;
  const job *j = vc;
  const geom *g = &j->g;
  const float *xs = j->x + s * j->xF, *w = j->Wp;
  float *ys = j->y + (size_t)s * g->Co * g->P;
  for (int co0 = 0; co0 < g->Co; co0 += 4) {
    int nc = g->Co - co0 < 4 ? g->Co - co0 : 4;
    for (int oh0 = 0; oh0 < g->Ho; oh0 += 3) {
      int nr = g->Ho - oh0 < 3 ? g->Ho - oh0 : 3, ow = 0;
      for (; ow + 8 <= g->Wo; ow += 8) row_fwd_tile(j, xs, ys, w, oh0, nr, co0, nc, ow, 8);
      if (ow < g->Wo) row_fwd_tile(j, xs, ys, w, oh0, nr, co0, nc, ow, g->Wo - ow);
    }
  }
}

__attribute__((target("avx2"))) static inline float row_hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(a, _mm_movehdup_ps(a)));
}

/* dW tile task: channels co0.. (4) x taps t0.. (3), over the batch. */
__attribute__((target("avx2,fma"))) static void row_dw_task(void *vc, int task, int th) {
  (void)th;
  const job *j = vc;
  const geom *g = &j->g;
  int tb = (g->K + 2) / 3, co0 = task / tb * 4, t0 = task % tb * 3;
  int nc = g->Co - co0 < 4 ? g->Co - co0 : 4, nt = g->K - t0 < 3 ? g->K - t0 : 3;
  int o0 = j->koff[t0], o1 = j->koff[t0 + (nt > 1)], o2 = j->koff[t0 + (nt > 2 ? 2 : 0)];
  size_t d1 = nc > 1 ? g->P : 0, d2 = nc > 2 ? 2 * (size_t)g->P : 0,
         d3 = nc > 3 ? 3 * (size_t)g->P : 0;
  int tail = g->Wo % 8, full = g->Wo - tail;
  __m256i m = row_mask(tail);
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00,
         a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
#define ROW_DW_STEP(LOAD_X, LOAD_D)                                                          \
  do {                                                                                       \
    __m256 v0 = LOAD_X(xr + o0), v1 = LOAD_X(xr + o1), v2 = LOAD_X(xr + o2), e;              \
    e = LOAD_D(dr), a00 = _mm256_fmadd_ps(e, v0, a00), a01 = _mm256_fmadd_ps(e, v1, a01);    \
    a02 = _mm256_fmadd_ps(e, v2, a02);                                                       \
    e = LOAD_D(dr + d1), a10 = _mm256_fmadd_ps(e, v0, a10), a11 = _mm256_fmadd_ps(e, v1, a11); \
    a12 = _mm256_fmadd_ps(e, v2, a12);                                                       \
    e = LOAD_D(dr + d2), a20 = _mm256_fmadd_ps(e, v0, a20), a21 = _mm256_fmadd_ps(e, v1, a21); \
    a22 = _mm256_fmadd_ps(e, v2, a22);                                                       \
    e = LOAD_D(dr + d3), a30 = _mm256_fmadd_ps(e, v0, a30), a31 = _mm256_fmadd_ps(e, v1, a31); \
    a32 = _mm256_fmadd_ps(e, v2, a32);                                                       \
  } while (0)
#define ROW_LD(p) _mm256_loadu_ps(p)
#define ROW_LDM(p) _mm256_maskload_ps(p, m)
  /* Down each column of vectors, rows inside: the row loop's pointers step by W and Wo
   * (across rows, with the column outside, MinAtar's one vector a row left a loop's
   * overhead per 12 FMAs). */
  for (int s = 0; s < j->B; s++) {
    const float *xs = j->x + s * j->xF, *dys = j->dy + ((size_t)s * g->Co + co0) * g->P;
    for (int ow = 0; ow < full; ow += 8) {
      const float *xr = xs + ow, *dr = dys + ow;
      for (int oh = 0; oh < g->Ho; oh++, xr += g->W, dr += g->Wo) ROW_DW_STEP(ROW_LD, ROW_LD);
    }
    /* masked lanes load 0 in x too: garbage there times a masked 0 could be NaN */
    const float *xr = xs + full, *dr = dys + full;
    for (int oh = 0; tail && oh < g->Ho; oh++, xr += g->W, dr += g->Wo)
      ROW_DW_STEP(ROW_LDM, ROW_LDM);
  }
#undef ROW_LD
#undef ROW_LDM
#undef ROW_DW_STEP
  __m256 acc[4][3] = {{a00, a01, a02}, {a10, a11, a12}, {a20, a21, a22}, {a30, a31, a32}};
  for (int c = 0; c < nc; c++)
    for (int t = 0; t < nt; t++) j->dw[(size_t)(co0 + c) * g->K + t0 + t] += row_hsum(acc[c][t]);
}

static void row_forward(job *j, nn_model *m, nn__node *n) {
  j->Wp = m->params + n->poff[0]; /* W (C_out, K) read as it lies */
  nn__parallel_for(j->B, row_fwd_task, j);
}

static void row_dw(job *j) {
  nn__parallel_for((j->g.Co + 3) / 4 * ((j->g.K + 2) / 3), row_dw_task, j);
}
#else /* no row kernels: the packed ones run */
int nn__row_mode(int mode) {
  (void)mode;
  return 0;
}
static bool row_runs(const job *j, const nn__node *n) {
  (void)j, (void)n;
  return false;
}
static void row_forward(job *j, nn_model *m, nn__node *n) { (void)j, (void)m, (void)n; }
static void row_dw(job *j) { (void)j; }
#endif

/* Wp[b*MR*K + k*MR + i] = W[b*MR + i][k]: blocks of MR rows of W (C_out, K), K steps
 * of MR floats each, zero past C_out. */
static void pack_w_rows(const float *w, int Co, int K, int mr, float *Wp) {
  /* written in order, reading mr rows side by side: the transposed order (a store every
   * mr floats) cost 4% of Nature-DQN's step */
  for (int co0 = 0; co0 < Co; co0 += mr) {
    float *d = Wp + (size_t)co0 * K;
    const float *r[MR_MAX];
    int rows = Co - co0 < mr ? Co - co0 : mr;
    for (int i = 0; i < rows; i++) r[i] = w + (size_t)(co0 + i) * K;
    for (int k = 0; k < K; k++, d += mr) {
      int i = 0;
      for (; i < rows; i++) d[i] = r[i][k];
      for (; i < mr; i++) d[i] = 0.0f;
    }
  }
}

void nn__convk_forward(nn_model *m, nn__node *n, int B) {
  const int kp = n->kp[NN__PH_FWD]; /* chosen by timing, or 0: the rules below */
  if (kp == NN__KP_WINO || (!kp && nn__wino_runs(m, n, B, false))) {
    nn__wino_forward(m, n, B);
    return;
  }
  job j;
  job_init(&j, m, n, B);
  j.relu = n->fuse_act > 0;
  j.y = j.relu ? m->nodes[n->fuse_act].out : n->out;
  j.bias = n->bias ? m->params + n->poff[1] : NULL;
  if (kp == NN__KP_DIRECT || (!kp && direct_runs(n, &j.g) && dgeom_of(&j.g, 1).T <= 64)) {
    direct_forward(&j, m, n);
    return;
  }
  if (kp == NN__KP_ROW || (!kp && row_runs(&j, n))) {
    row_forward(&j, m, n);
    return;
  }
  float *Wp = m->scratch + j.L.w;
  pack_w_rows(m->params + n->poff[0], j.g.Co, j.g.K, j.I->mr, Wp);
  j.Wp = Wp;
  make_xs(&j);
  nn__parallel_for((j.N + j.I->nr - 1) / j.I->nr, fwd_task, &j);
}

bool nn__convk_can(const nn_model *m, const nn__node *n, int ph, int p) {
  if ((n->kind != NN__CONV && n->kind != NN__CONVT) || ph < NN__PH_FWD || ph > NN__PH_DX)
    return false;
  if (p == NN__KP_GEMM) return true; /* im2col (col2im) + GEMM runs every one */
  if (nn__conv_path_get() == NN__CONV_GEMM || !nn__convk_scratch(m, n, m->max_batch))
    return false;
  geom g = geom_of(m, n);
  dgeom d = dgeom_of(&g, 1);
  if (n->kind == NN__CONVT) { /* its forward is the conv's dx (run_dx), its dx the conv's
                               * forward on the packed panels only (nn__convk_t_backward) */
    if (p == NN__KP_DIRECT || p == NN__KP_ROW) return false;
    ph = nn__conv_phase(n, ph);
  }
  switch (p) {
    case NN__KP_PACKED: return true;
    case NN__KP_DIRECT: return ph == NN__PH_FWD && d.Cs >= 16 && d.T <= 64;
    case NN__KP_ROW: /* the AVX2 and AVX-512 kernels' shapes (row_runs without its rule) */
#ifdef NN__X86
      return ph != NN__PH_DX && g_isa[nn__conv_path_get()].mr >= 6 && g.s == 1 && g.pad == 0;
#else
      return false;
#endif
    case NN__KP_WINO: return nn__wino_can(m, n);
    case NN__KP_DXD: return ph == NN__PH_DX && d.Cs >= 16 && d.T <= 64;
    default: return false;
  }
}

/* ---- backward ------------------------------------------------------------------------ */

/* dbs[s][co] = sample s's sum of dy[co] over its pixels. */
NN__CLONES static void db_task(void *vc, int s, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  /* 16 partial sums, so the reduction vectorises without reassociation by the compiler */
  for (int co = 0; co < g->Co; co++) {
    const float *r = j->dy + ((size_t)s * g->Co + co) * g->P;
    float acc[16] = {0};
    int p = 0;
    for (; p + 16 <= g->P; p += 16)
      for (int l = 0; l < 16; l++) acc[l] += r[p + l];
    float t = 0;
    for (int l = 0; l < 16; l++) t += acc[l];
    for (; p < g->P; p++) t += r[p];
    j->dbs[(size_t)s * g->Co + co] = t;
  }
}

/* dyp[b*N*MR + n*MR + i] = dy[sample][b*MR + i][p] (n = sample*P + p): dy as the A
 * operand of dW, blocks of MR channels (dW's rows past C_out are dropped); and
 * db += sum_p dy. */
NN__CLONES static void dyp_task(void *vc, int s, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int mr = j->I->mr;
  for (int co0 = 0; co0 < g->Co; co0 += mr) {
    float *d = j->dyp + (size_t)co0 * j->N + (size_t)s * g->P * mr;
#ifdef NN__X86
    if (mr >= 6 && g->P >= 8) { /* AVX2's 6 rows, AVX-512's 8: 8x8 register transposes */
      /* With 6 rows each 8-float store runs 2 floats into the next pixel's slots, which
       * that pixel's store (later) overwrites; the last 8 pixels go through tmp, so
       * nothing lands past the block (the next sample's, another thread's). Rows past
       * C_out repeat row 0: dw_task computes their dW rows and drops them. The scalar
       * copy's strided stores were an eighth of MinAtar's conv forward and backward. */
      int rows = g->Co - co0 < mr ? g->Co - co0 : mr;
      const float *row[8];
      for (int i = 0; i < 8; i++)
        row[i] = j->dy + ((size_t)s * g->Co + co0 + (i < rows ? i : 0)) * g->P;
      int p = 0;
      for (; p + 8 < g->P; p += 8) nn__tr8x8(row, p, d + (size_t)p * mr, mr);
      float tmp[64] __attribute__((aligned(32)));
      nn__tr8x8(row, g->P - 8, tmp, 8);
      for (int q = p; q < g->P; q++) memcpy(d + (size_t)q * mr, tmp + (q - (g->P - 8)) * 8,
                                           mr * sizeof(float));
      continue;
    }
#endif
    for (int i = 0; i < mr; i++) {
      int co = co0 + i;
      if (co >= g->Co) {
        for (int p = 0; p < g->P; p++) d[p * mr + i] = 0.0f;
        continue;
      }
      const float *r = j->dy + ((size_t)s * g->Co + co) * g->P;
      for (int p = 0; p < g->P; p++) d[p * mr + i] = r[p];
    }
  }
  if (j->dbs) db_task(vc, s, th);
}

/* dW[:, panels p0..p0+G) += sum over every column (sample, p) of dy[co][p] x̂[k][p]:
 * chunks of PC columns; per chunk, each of the task's G panels of K gets its B^T packed
 * and multiplied by every block of C_out. G panels a task, not one, so the chunk of
 * packed dy (C_out x PC) is read from cache G times for each time it comes from memory
 * (DCGAN's second conv: 3.4 MB of packed dy, read once per task). */
NN__CLONES static void dw_task(void *vc, int task, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr, cb = (g->Co + mr - 1) / mr;
  int np = (g->K + nr - 1) / nr, p0 = task * j->G, p1 = p0 + j->G < np ? p0 + j->G : np;
  size_t tsz = (size_t)cb * mr * nr; /* one panel's tiles */
  float *Bt = j->tb + (size_t)th * j->L.tstride, *tiles = Bt + (size_t)(PC + 8) * NR_MAX;
  memset(tiles, 0, (size_t)(p1 - p0) * tsz * sizeof(float));
  seg sg[PC];
  for (int n0 = 0; n0 < j->N; n0 += PC) {
    int cnt = j->N - n0 < PC ? j->N - n0 : PC;
    int ns = segments(g, n0, cnt, sg);
    for (int pi = p0; pi < p1; pi++) {
      int k0 = pi * nr, nk = g->K - k0 < nr ? g->K - k0 : nr;
      if (nk < nr) memset(Bt, 0, (size_t)cnt * nr * sizeof(float));
      int kk = 0;
#ifdef NN__X86
      if (nr >= 16) /* the AVX2 and AVX-512 paths */
        for (; kk + 8 <= nk; kk += 8)
          pack_t8(j->xs, j->xend, j->koff + k0 + kk, sg, ns, Bt + kk, nr);
#endif
      pack_cols(j->xs, j->koff, sg, ns, k0 + kk, nk - kk, Bt + kk, 1, nr);
      float *tp = tiles + (size_t)(pi - p0) * tsz;
      for (int b = 0; b < cb; b++)
        j->I->k(cnt, j->dyp + (size_t)b * mr * j->N + (size_t)n0 * mr, Bt, tp + (size_t)b * mr * nr,
                1);
    }
  }
  for (int pi = p0; pi < p1; pi++) {
    int k0 = pi * nr, nk = g->K - k0 < nr ? g->K - k0 : nr;
    const float *tp = tiles + (size_t)(pi - p0) * tsz;
    for (int b = 0; b < cb; b++)
      for (int i = 0; i < mr && b * mr + i < g->Co; i++) {
        float *d = j->dw + (size_t)(b * mr + i) * g->K + k0;
        const float *t = tp + ((size_t)b * mr + i) * nr;
        for (int q = 0; q < nk; q++) d[q] += t[q];
      }
  }
}

/* db (C) += the per-sample sums dbs (B, C), in sample order: the same on any thread count. */
static void add_sample_sums(float *db, const float *dbs, int B, int C) {
  for (int s = 0; s < B; s++)
    for (int c = 0; c < C; c++) db[c] += dbs[(size_t)s * C + c];
}

/* dW over the K panels: up to G_MAX panels a task, and at least two tasks a thread for
 * balance. */
static void run_dw(job *j, int K) {
  int np = (K + j->I->nr - 1) / j->I->nr, T = nn__cpu_threads();
  j->G = np / (2 * (T < 1 ? 1 : T));
  j->G = j->G < 1 ? 1 : j->G > G_MAX ? G_MAX : j->G;
  nn__parallel_for((np + j->G - 1) / j->G, dw_task, j);
}

/* dx of one sample: tiles of MR pixels x NR taps of dx̂ = dy^T W, each entry added into
 * dxs where its x̂ entry was read (col2im, without bounds tests), then dxs folded back. */
NN__CLONES static void dx_task(void *vc, int s, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr;
  float *Ap = j->tb + (size_t)th * j->L.tstride, *dxs = Ap + (size_t)g->Co * MR_MAX;
  const float *dy = j->dy + (size_t)s * g->Co * g->P;
  memset(dxs, 0, g->xsF * sizeof(float));
  float tile[MR_MAX * NR_MAX] __attribute__((aligned(64)));
  int pix[MR_MAX];
  for (int p0 = 0; p0 < g->P; p0 += mr) {
    int rows = g->P - p0 < mr ? g->P - p0 : mr;
    for (int co = 0; co < g->Co; co++) {
      const float *src = dy + (size_t)co * g->P + p0;
      float *d = Ap + (size_t)co * mr;
      for (int i = 0; i < mr; i++) d[i] = i < rows ? src[i] : 0.0f;
    }
    for (int i = 0; i < rows; i++) {
      int p = p0 + i, oh = p / g->Wo;
      pix[i] = oh * g->Ws + p - oh * g->Wo;
    }
    for (int k0 = 0; k0 < g->K; k0 += nr) {
      int nk = g->K - k0 < nr ? g->K - k0 : nr;
      j->I->k(g->Co, Ap, j->Wp + (size_t)k0 * g->Co, tile, 0);
      const int *ko = j->koff + k0;
      for (int i = 0; i < rows; i++) {
        float *base = dxs + pix[i];
        const float *t = tile + i * nr;
        for (int q = 0; q < nk; q++) base[ko[q]] += t[q];
      }
    }
  }
  float *d = j->dx + s * j->xF;
  from_s2d(g, dxs, d, j->acc);
  for (int c = 0; j->bias_x && c < g->C; c++) {
    float b = j->bias_x[c], *r = d + (size_t)c * g->H * g->W;
    for (int q = 0; q < g->H * g->W; q++) r[q] += b;
  }
}

/* Wp[k0*C_out + co*NR + q] = W[co][k0 + q]: panels of NR columns of W, C_out steps
 * each, zero past K. */
static void pack_w_cols(const float *w, int Co, int K, int nr, float *Wp) {
  for (int k0 = 0; k0 < K; k0 += nr) {
    float *d = Wp + (size_t)k0 * Co;
    int nk = K - k0 < nr ? K - k0 : nr;
    for (int co = 0; co < Co; co++) {
      memcpy(d + (size_t)co * nr, w + (size_t)co * K + k0, (size_t)nk * sizeof(float));
      for (int q = nk; q < nr; q++) d[(size_t)co * nr + q] = 0.0f;
    }
  }
}

/* ---- direct dx ------------------------------------------------------------------------
 * dx_task above adds each tile entry into dxs one float at a time, through the tap map
 * (col2im): on DCGAN's second conv that scatter took 40% as long as the products. Here W's
 * columns are reordered per tap of the space-to-depth kernel, so a panel of NR columns is
 * NR consecutive channels of one tap: in a channels-last dxs those land side by side, and a
 * tile row goes in as one vector add. Runs where the s2d kernel has few zero taps. */

/* The direct dx when the s2d kernel's taps (zero where it extends past kh or kw) add at
 * most a quarter to K, as direct_runs otherwise. */
static bool dxd_runs(const geom *g) {
  pthread_once(&g_direct_once, direct_init);
  dgeom d = dgeom_of(g, 1);
  return g_direct && d.Cs >= 16 && d.T <= 64 && (size_t)d.T * d.Cs * 4 <= (size_t)g->K * 5;
}

static size_t dxd_w_floats(const geom *g) {
  dgeom d = dgeom_of(g, 1);
  return (size_t)d.T * (d.Cs + NR_MAX) * g->Co;
}

/* Wx[((t*ncp + cp)*C_out + co)*NR + q] = W[co][c][ki][kj] for s2d channel cs = cp*NR + q
 * = (c*s + ki%s)*s + kj%s and tap t = (ki/s)*kws + kj/s; zero past Cs and for the taps
 * past kh or kw. W is read in order, a row of K at a time. */
static void pack_w_dxd(const float *w, const geom *g, int nr, float *Wx, int *kmap) {
  dgeom d = dgeom_of(g, 1);
  int s = g->s, ncp = (d.Cs + nr - 1) / nr;
  for (int c = 0, k = 0; c < g->C; c++)
    for (int ki = 0; ki < g->kh; ki++)
      for (int kj = 0; kj < g->kw; kj++, k++) {
        int t = (ki / s) * d.kws + kj / s, cs = (c * s + ki % s) * s + kj % s;
        kmap[k] = ((t * ncp + cs / nr) * g->Co) * nr + cs % nr;
      }
  if ((size_t)d.T * ncp * nr != (size_t)g->K)
    memset(Wx, 0, (size_t)d.T * ncp * g->Co * nr * sizeof(float));
  for (int co = 0; co < g->Co; co++) {
    const float *r = w + (size_t)co * g->K;
    float *o = Wx + (size_t)co * nr;
    for (int k = 0; k < g->K; k++) o[kmap[k]] = r[k];
  }
}

/* dx of one sample: dy^T packed in tiles of MR pixels, then per tap and panel of NR s2d
 * channels, every tile's product added as rows of NR into dxs (channels last), which is
 * then gathered back into NCHW. */
NN__CLONES static void dxd_task(void *vc, int s, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr, Co = g->Co;
  dgeom d = dgeom_of(g, mr);
  int ncp = (d.Cs + nr - 1) / nr;
  float *Ap = j->tb + (size_t)th * j->L.tstride;
  float *dcl = Ap + up16((size_t)d.tps * mr * Co);
  const float *dy = j->dy + (size_t)s * Co * g->P;
  memset(dcl, 0, g->xsF * sizeof(float));
  for (int ti = 0; ti < d.tps; ti++) {
    int p0 = ti * mr, rows = g->P - p0 < mr ? g->P - p0 : mr;
    float *a = Ap + (size_t)ti * mr * Co;
    for (int co = 0; co < Co; co++) {
      const float *src = dy + (size_t)co * g->P + p0;
      for (int i = 0; i < mr; i++) a[co * mr + i] = i < rows ? src[i] : 0.0f;
    }
  }
  float tile[MR_MAX * NR_MAX] __attribute__((aligned(64)));
  for (int t = 0; t < d.T; t++) {
    int toff = ((t / d.kws) * g->Ws + t % d.kws) * d.Cs;
    for (int cp = 0; cp < ncp; cp++) {
      const float *Bp = j->Wp + ((size_t)t * ncp + cp) * Co * nr;
      int nk = d.Cs - cp * nr < nr ? d.Cs - cp * nr : nr;
      for (int ti = 0; ti < d.tps; ti++) {
        int p0 = ti * mr, rows = g->P - p0 < mr ? g->P - p0 : mr;
        j->I->k(Co, Ap + (size_t)ti * mr * Co, Bp, tile, 0);
        for (int i = 0; i < rows; i++) {
          int p = p0 + i, oh = p / g->Wo;
          float *o = dcl + ((size_t)oh * g->Ws + p - oh * g->Wo) * d.Cs + toff + cp * nr;
          const float *tr = tile + i * nr;
          for (int q = 0; q < nk; q++) o[q] += tr[q];
        }
      }
    }
  }
  /* back to NCHW: dx[c][ih][iw] (+)= dcl[(a*Ws + b)*Cs + (c*s + ri)*s + rj]. Rows and
   * columns of x past the last a tap reaches (a >= Hs or b >= Ws: 10x10/5 over 23 rows
   * with padding 3 leaves the last row unread) have no gradient, and no place in dcl. */
  float *dx = j->dx + s * j->xF;
  int st = g->s;
  for (int c = 0; c < g->C; c++) {
    float bc = j->bias_x ? j->bias_x[c] : 0.0f;
    for (int ih = 0; ih < g->H; ih++) {
      int a = (ih + g->pad) / st, ri = (ih + g->pad) % st;
      float *o = dx + ((size_t)c * g->H + ih) * g->W;
      const float *src = a < g->Hs ? dcl + (size_t)a * g->Ws * d.Cs + (c * st + ri) * st : NULL;
      for (int iw = 0; iw < g->W; iw++) {
        int b = (iw + g->pad) / st, rj = (iw + g->pad) % st;
        float v = (src && b < g->Ws ? src[(size_t)b * d.Cs + rj] : 0.0f) + bc;
        o[iw] = j->acc ? o[iw] + v : v;
      }
    }
  }
}

/* dx (or a conv-transpose's output) by dxd_task or dx_task. */
static void run_dx(job *j, nn_model *m, nn__node *n) {
  float *Wp = m->scratch + j->L.w;
  const int kp = n->kp[nn__conv_phase(n, NN__PH_DX)];
  if (kp == NN__KP_DXD || (!kp && dxd_runs(&j->g))) {
    pack_w_dxd(m->params + n->poff[0], &j->g, j->I->nr, Wp, (int *)(m->scratch + j->L.koff));
    j->Wp = Wp;
    nn__parallel_for(j->B, dxd_task, j);
    return;
  }
  pack_w_cols(m->params + n->poff[0], j->g.Co, j->g.K, j->I->nr, Wp);
  j->Wp = Wp;
  nn__parallel_for(j->B, dx_task, j);
}

void nn__convk_backward(nn_model *m, nn__node *n, int B) {
  job j;
  job_init(&j, m, n, B);
  const geom *g = &j.g;
  j.dy = n->dout;
  j.dw = m->grads + n->poff[0];
  j.dbs = n->bias ? m->scratch + j.L.dbs : NULL;
  const int kw = n->kp[NN__PH_DW], kx = n->kp[NN__PH_DX]; /* by timing, or 0: the rules */
  bool wino = kw == NN__KP_WINO || (!kw && nn__wino_dw_runs(m, n, B));
  bool row = !wino && (kw == NN__KP_ROW || (!kw && row_runs(&j, n)));
  if (wino || row) { /* db first: Winograd's dW reuses the scratch */
    if (n->bias) {
      nn__parallel_for(B, db_task, &j);
      add_sample_sums(m->grads + n->poff[1], j.dbs, B, g->Co);
    }
    if (wino)
      nn__wino_dw(m, n, B);
    else
      row_dw(&j);
  } else {
    make_xs(&j);
    nn__parallel_for(B, dyp_task, &j);
    if (n->bias) add_sample_sums(m->grads + n->poff[1], j.dbs, B, g->Co);
    run_dw(&j, g->K);
  }
  bool acc;
  j.dx = nn__dinput(m, n, 0, &acc);
  if (!j.dx) return;
  if (kx == NN__KP_WINO || (!kx && nn__wino_runs(m, n, B, true))) { /* dW is done: the scratch
                                                                     * is free again */
    nn__wino_dx(m, n, B, j.dx, acc);
    return;
  }
  j.acc = acc;
  if (wino) /* its dW used the scratch where the tap offsets lie */
    tap_offsets(g, (int *)(m->scratch + j.L.koff));
  run_dx(&j, m, n);
}

/* ---- conv-transpose2d: y = conv^T x + b, through the conv it is the adjoint of --------
 *   forward   y  = that conv's dx from "dy" = x, plus the bias
 *   backward  dW += that conv's dW from input dy and "dy" = x;  dx (+)= that conv's
 *             forward of dy;  db += sum of dy over samples and pixels */

static void sum_task(void *vc, int s, int th) {
  const job *j = vc;
  const geom *g = &j->g;
  size_t HW = (size_t)g->H * g->W;
  for (int c = 0; c < g->C; c++) {
    const float *r = j->x + s * j->xF + c * HW;
    float acc[16] = {0}, t = 0;
    size_t p = 0;
    for (; p + 16 <= HW; p += 16)
      for (int l = 0; l < 16; l++) acc[l] += r[p + l];
    for (int l = 0; l < 16; l++) t += acc[l];
    for (; p < HW; p++) t += r[p];
    j->dbs[(size_t)s * g->C + c] = t;
  }
}

void nn__convk_t_forward(nn_model *m, nn__node *n, int B) {
  const int kp = n->kp[NN__PH_FWD]; /* by timing, or 0: the rules */
  if (kp == NN__KP_WINO || (!kp && nn__wino_runs(m, n, B, false))) {
    nn__wino_forward(m, n, B);
    return;
  }
  job j;
  job_init(&j, m, n, B);
  j.dy = nn__input(m, n, 0)->out;
  j.dx = n->out, j.xF = (size_t)n->F, j.acc = 0;
  j.bias_x = n->bias ? m->params + n->poff[1] : NULL;
  run_dx(&j, m, n);
}

void nn__convk_t_backward(nn_model *m, nn__node *n, int B) {
  job j;
  job_init(&j, m, n, B);
  const geom *g = &j.g;
  j.dy = nn__input(m, n, 0)->out;
  j.dw = m->grads + n->poff[0];
  if (n->bias) {
    j.dbs = m->scratch + j.L.dbs;
    nn__parallel_for(B, sum_task, &j);
    add_sample_sums(m->grads + n->poff[1], j.dbs, B, g->C);
    j.dbs = NULL;
  }
  const int kw = n->kp[NN__PH_DW], kx = n->kp[NN__PH_DX]; /* by timing, or 0: the rules */
  const bool wino = kw == NN__KP_WINO || (!kw && nn__wino_dw_runs(m, n, B));
  if (wino) {
    nn__wino_dw(m, n, B);
  } else {
    make_xs(&j);
    nn__parallel_for(B, dyp_task, &j);
    run_dw(&j, g->K);
  }
  bool acc;
  j.y = nn__dinput(m, n, 0, &acc);
  if (!j.y) return;
  if (kx == NN__KP_WINO || (!kx && nn__wino_runs(m, n, B, true))) { /* after dW */
    nn__wino_dx(m, n, B, j.y, acc);
    return;
  }
  j.acc = acc;
  if (wino) { /* a plan's pair the rules never run: Winograd's dW took the scratch where
               * the tap offsets and xs lie */
    tap_offsets(g, (int *)(m->scratch + j.L.koff));
    make_xs(&j);
  }
  float *Wp = m->scratch + j.L.w;
  pack_w_rows(m->params + n->poff[0], g->Co, g->K, j.I->mr, Wp);
  j.Wp = Wp;
  nn__parallel_for((j.N + j.I->nr - 1) / j.I->nr, fwd_task, &j);
}
