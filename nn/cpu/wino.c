/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/wino.c — conv2d and conv-transpose2d by Winograd F(m x m, r x r): the forward, the
 * input gradient and the weight gradient (the bias's stays on nn/cpu/convk.c).
 *
 * An m x m output tile from an n x n input patch d (n = m + r - 1) and an r x r filter g is
 *   Y = A^T [ (G g G^T) ⊙ (B^T d B) ] A
 * n^2 multiplies where the direct sum takes m^2 r^2. Over channels the ⊙ becomes n^2
 * GEMMs, one per position ξ of the transformed tile:
 *   M^T[ξ] (tiles x C_out) = V^T[ξ] (tiles x C_in) U^T[ξ] (C_in x C_out)
 * with V = B^T d B per (tile, input channel) and U = G g G^T per (output, input channel).
 *
 * Which layers: 3x3 (r = 3) stride-1 ones, and strided ones whose kernel is r = 2 or 3
 * times the stride (4x4/2, 8x8/4, 6x6/2): as convk.c does, those are stride-1 r x r
 * convolutions over the input laid out space-to-depth, xs[(c*s + ri)*s + rj][a][b] =
 * x[c][a*s + ri - pad][b*s + rj - pad], with C*s*s channels. The input gradient of that
 * stride-1 conv is the conv of dy, padded by r - 1, with each filter turned 180 degrees
 * and channels swapped; its output is dx in space-to-depth form, written back to NCHW as
 * the tiles come out. A conv-transpose's forward is that input gradient, and its input
 * gradient that forward. The tile size m is chosen per layer and direction, counting
 * multiplies over the tiles that cover the output (a 7x7 output takes four 4x4 tiles,
 * 100 products a channel pair against the direct sum's 196).
 *
 * The input is first laid out channels-last, in space-to-depth form and zero-padded (xh:
 * rows, columns, channels), so both transforms are vector loops over channels with no
 * bounds tests. V^T[ξ] is written row-major (a tile's channels contiguous) and read by
 * micro-kernels that broadcast from rows lda apart; U^T[ξ] is packed once per call into
 * NR-wide panels of output channels. A task is one block of tiles (any samples): it
 * transforms their patches, runs the n^2 GEMMs into M^T, and writes each tile's outputs
 * (plus bias and a fused ReLU, or added into dx), so V and M^T stay in cache.
 *
 * The transforms come from the Toom-Cook construction at the points listed beside each
 * table (scripts/wino_tables.py prints them from exact fractions; B^T's rows scaled to
 * integers, G taking the scale). Error: a few float roundings more than the direct sum, growing
 * with m (the parity tests hold every variant to 1e-4 relative; the largest, F(5,2) and F(4,3),
 * come within 1e-5 of float64 sums over 64 channels).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu.h"

#define MR_MAX 8
#define NR_MAX 32
#define TT_CAP 96           /* tiles per task at most */
#define TT_BUDGET (1 << 19) /* floats of V^T and M^T per task: a few MB, L3 */
#define N_MAX 6             /* transformed tile size n at most */
/* Floats between the 16 matrices of V^T and of M^T beyond their size: at 32 tiles of 64
 * channels they would lie 8 KB apart, and the transforms' 16 streams would all fall in
 * the same L1 sets (measured 2-3x slower). */
#define XI_PAD 16

/* C (MR x NR, rows ldc apart) = sum_l A[i*lda + l] B[l*NR + j]. */
typedef void (*wkern_fn)(int L, const float *A, int lda, const float *B, float *C, int ldc);

typedef float wv4 __attribute__((vector_size(16)));

static inline wv4 wv4_load(const float *p) {
  wv4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static void wk_portable(int L, const float *A, int lda, const float *B, float *C, int ldc) {
  wv4 c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  const float *a0 = A, *a1 = A + lda, *a2 = A + 2 * lda, *a3 = A + 3 * lda;
  for (int l = 0; l < L; l++, B += 8) {
    wv4 b0 = wv4_load(B), b1 = wv4_load(B + 4);
    c00 += a0[l] * b0, c01 += a0[l] * b1;
    c10 += a1[l] * b0, c11 += a1[l] * b1;
    c20 += a2[l] * b0, c21 += a2[l] * b1;
    c30 += a3[l] * b0, c31 += a3[l] * b1;
  }
  memcpy(C, &c00, 16), memcpy(C + 4, &c01, 16);
  memcpy(C + ldc, &c10, 16), memcpy(C + ldc + 4, &c11, 16);
  memcpy(C + 2 * ldc, &c20, 16), memcpy(C + 2 * ldc + 4, &c21, 16);
  memcpy(C + 3 * ldc, &c30, 16), memcpy(C + 3 * ldc + 4, &c31, 16);
}

#ifdef NN__X86
#define WK_ROW(i)                                    \
  do {                                               \
    __m256 a = _mm256_broadcast_ss(A + (i)*lda + l); \
    c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);       \
    c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);       \
  } while (0)
#define WK_PUT(i)                               \
  do {                                          \
    _mm256_storeu_ps(C + (i)*ldc, c##i##0);     \
    _mm256_storeu_ps(C + (i)*ldc + 8, c##i##1); \
  } while (0)
__attribute__((target("avx2,fma"))) static void wk_avx2(int L, const float *A, int lda,
                                                        const float *B, float *C, int ldc) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
  for (int l = 0; l < L; l++, B += 16) {
    __m256 b0 = _mm256_loadu_ps(B), b1 = _mm256_loadu_ps(B + 8);
    WK_ROW(0);
    WK_ROW(1);
    WK_ROW(2);
    WK_ROW(3);
    WK_ROW(4);
    WK_ROW(5);
  }
  WK_PUT(0);
  WK_PUT(1);
  WK_PUT(2);
  WK_PUT(3);
  WK_PUT(4);
  WK_PUT(5);
}

__attribute__((target("avx512f"))) static void wk_avx512(int L, const float *A, int lda,
                                                         const float *B, float *C, int ldc) {
  __m512 c[8][2];
  for (int i = 0; i < 8; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (int l = 0; l < L; l++, B += 32) {
    __m512 b0 = _mm512_loadu_ps(B), b1 = _mm512_loadu_ps(B + 16);
    for (int i = 0; i < 8; i++) {
      __m512 a = _mm512_set1_ps(A[i * lda + l]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  for (int i = 0; i < 8; i++) {
    _mm512_storeu_ps(C + i * ldc, c[i][0]);
    _mm512_storeu_ps(C + i * ldc + 16, c[i][1]);
  }
}
#endif

typedef struct wisa {
  int mr, nr;
  wkern_fn k;
} wisa;

static const wisa g_wisa[] = {
    [NN__CONV_PORTABLE] = {4, 8, wk_portable},
#ifdef NN__X86
    [NN__CONV_AVX2] = {6, 16, wk_avx2},
    [NN__CONV_AVX512] = {8, 32, wk_avx512},
#endif
};

/* ---- the algorithms ------------------------------------------------------------------ */

/* F(2,2), points 0, 1 and infinity */
static const float AT_f22[6] = {1.0f, 1.0f, 0.0f, 0.0f, 1.0f, 1.0f};
static const float G_f22[6] = {1.0f, 0.0f, 1.0f, 1.0f, 0.0f, 1.0f};
static const float BT_f22[9] = {1.0f, -1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, -1.0f, 1.0f};
/* F(3,2), points 0, 1, -1 and infinity */
static const float AT_f32[12] = {1.0f,  1.0f, 1.0f, 0.0f, 0.0f, 1.0f,
                                 -1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
static const float G_f32[8] = {1.0f, 0.0f, 0.5f, 0.5f, 0.5f, -0.5f, 0.0f, 1.0f};
static const float BT_f32[16] = {1.0f, 0.0f,  -1.0f, 0.0f, 0.0f, 1.0f,  1.0f, 0.0f,
                                 0.0f, -1.0f, 1.0f,  0.0f, 0.0f, -1.0f, 0.0f, 1.0f};
/* F(4,2), points 0, 1, -1, 2 and infinity */
static const float AT_f42[20] = {1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 1.0f, -1.0f, 2.0f, 0.0f,
                                 0.0f, 1.0f, 1.0f, 4.0f, 0.0f, 0.0f, 1.0f, -1.0f, 8.0f, 1.0f};
static const float G_f42[10] = {0.5f,          0.0f,         0.5f,         0.5f, 0.166666667f,
                                -0.166666667f, 0.166666667f, 0.333333333f, 0.0f, 1.0f};
static const float BT_f42[25] = {2.0f, -1.0f, -2.0f, 1.0f, 0.0f,  0.0f,  2.0f, 1.0f,  -1.0f,
                                 0.0f, 0.0f,  -2.0f, 3.0f, -1.0f, 0.0f,  0.0f, -1.0f, 0.0f,
                                 1.0f, 0.0f,  0.0f,  2.0f, -1.0f, -2.0f, 1.0f};
/* F(5,2), points 0, 1, -1, 2, -2 and infinity */
static const float AT_f52[30] = {1.0f,  1.0f, 1.0f,  1.0f, 1.0f, 0.0f, 0.0f, 1.0f,  -1.0f, 2.0f,
                                 -2.0f, 0.0f, 0.0f,  1.0f, 1.0f, 4.0f, 4.0f, 0.0f,  0.0f,  1.0f,
                                 -1.0f, 8.0f, -8.0f, 0.0f, 0.0f, 1.0f, 1.0f, 16.0f, 16.0f, 1.0f};
static const float G_f52[12] = {0.25f,         0.0f,           0.166666667f,  0.166666667f,
                                0.166666667f,  -0.166666667f,  0.0416666667f, 0.0833333333f,
                                0.0416666667f, -0.0833333333f, 0.0f,          1.0f};
static const float BT_f52[36] = {4.0f,  0.0f,  -5.0f, 0.0f, 1.0f,  0.0f, 0.0f,  4.0f,  4.0f,
                                 -1.0f, -1.0f, 0.0f,  0.0f, -4.0f, 4.0f, 1.0f,  -1.0f, 0.0f,
                                 0.0f,  -2.0f, -1.0f, 2.0f, 1.0f,  0.0f, 0.0f,  2.0f,  -1.0f,
                                 -2.0f, 1.0f,  0.0f,  0.0f, 4.0f,  0.0f, -5.0f, 0.0f,  1.0f};
/* F(2,3), points 0, 1, -1 and infinity */
static const float AT_f23[8] = {1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 1.0f, -1.0f, 1.0f};
static const float G_f23[12] = {1.0f, 0.0f,  0.0f, 0.5f, 0.5f, 0.5f,
                                0.5f, -0.5f, 0.5f, 0.0f, 0.0f, 1.0f};
static const float BT_f23[16] = {1.0f, 0.0f,  -1.0f, 0.0f, 0.0f, 1.0f,  1.0f, 0.0f,
                                 0.0f, -1.0f, 1.0f,  0.0f, 0.0f, -1.0f, 0.0f, 1.0f};
/* F(3,3), points 0, 1, -1, 2 and infinity */
static const float AT_f33[15] = {1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 1.0f, -1.0f,
                                 2.0f, 0.0f, 0.0f, 1.0f, 1.0f, 4.0f, 1.0f};
static const float G_f33[15] = {
    0.5f,         0.0f,         0.0f,         0.5f,         0.5f, 0.5f, 0.166666667f, -0.166666667f,
    0.166666667f, 0.166666667f, 0.333333333f, 0.666666667f, 0.0f, 0.0f, 1.0f};
static const float BT_f33[25] = {2.0f, -1.0f, -2.0f, 1.0f, 0.0f,  0.0f,  2.0f, 1.0f,  -1.0f,
                                 0.0f, 0.0f,  -2.0f, 3.0f, -1.0f, 0.0f,  0.0f, -1.0f, 0.0f,
                                 1.0f, 0.0f,  0.0f,  2.0f, -1.0f, -2.0f, 1.0f};
/* F(4,3), points 0, 1, -1, 1/2, -1/2 and infinity */
static const float AT_f43[24] = {1.0f,  1.0f, 1.0f,  1.0f, 1.0f,  0.0f,   0.0f,    1.0f,
                                 -1.0f, 0.5f, -0.5f, 0.0f, 0.0f,  1.0f,   1.0f,    0.25f,
                                 0.25f, 0.0f, 0.0f,  1.0f, -1.0f, 0.125f, -0.125f, 1.0f};
static const float G_f43[18] = {
    1.0f,         0.0f,          0.0f,         0.166666667f, 0.166666667f, 0.166666667f,
    0.166666667f, -0.166666667f, 0.166666667f, 1.33333333f,  0.666666667f, 0.333333333f,
    1.33333333f,  -0.666666667f, 0.333333333f, 0.0f,         0.0f,         0.25f};
static const float BT_f43[36] = {1.0f, 0.0f,  -5.0f, 0.0f,  4.0f,  0.0f,  0.0f,  -1.0f, -1.0f,
                                 4.0f, 4.0f,  0.0f,  0.0f,  1.0f,  -1.0f, -4.0f, 4.0f,  0.0f,
                                 0.0f, 1.0f,  2.0f,  -1.0f, -2.0f, 0.0f,  0.0f,  -1.0f, 2.0f,
                                 1.0f, -2.0f, 0.0f,  0.0f,  1.0f,  0.0f,  -5.0f, 0.0f,  4.0f};

typedef float wv8 __attribute__((vector_size(32)));

#define WV8_LD(p)                \
  ({                             \
    wv8 v_;                      \
    memcpy(&v_, (p), sizeof v_); \
    v_;                          \
  })
#define WV8_ST(p, v)             \
  do {                           \
    wv8 v_ = (v);                \
    memcpy((p), &v_, sizeof v_); \
  } while (0)
/* The transforms are generic in their tables and sizes. Each variant's copy inlines them
 * with its own tables and unrolls their loops, so the entries become constants (zeros
 * dropped, ±1 without a multiply). Not in the sanitizer builds: instrumented, the 35
 * unrolled copies (three ISAs each) took clang over 20 minutes to compile; there one
 * shared copy runs the same arithmetic. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NN__WINO_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(undefined_behavior_sanitizer)
#define NN__WINO_PLAIN 1
#endif
#endif
#ifdef NN__WINO_PLAIN
#define AI static __attribute__((noinline))
#define AIV static inline __attribute__((always_inline)) /* lin8, lin1: small */
#define UNROLL
#else
#define AI static inline __attribute__((always_inline))
#define AIV AI
#define UNROLL _Pragma("GCC unroll 8")
#endif
/* lin8 returns a 32-byte vector; it is always inlined, so no call ABI is involved (gcc and
 * clang both know the warning) */
#pragma GCC diagnostic ignored "-Wpsabi"

/* sum_i k[i*ks] e[i*es] over i < n, for k a constant table and n a constant: once the
 * loop is unrolled the zero terms drop out and the ±1 ones need no multiply. lin8 over
 * 8-channel vectors, lin1 over single floats (the channel tails). */
#define LIN(T, name)                                                         \
  AIV T name(const float *k, int ks, const T *e, int es, int n) {            \
    T s = {0};                                                               \
    bool first = true;                                                       \
    UNROLL for (int i = 0; i < n; i++) {                                     \
      float w = k[i * ks];                                                   \
      if (w == 0.0f) continue;                                               \
      T t = w == 1.0f ? e[i * es] : w == -1.0f ? -e[i * es] : w * e[i * es]; \
      s = first ? t : s + t;                                                 \
      first = false;                                                         \
    }                                                                        \
    return s;                                                                \
  }
LIN(wv8, lin8)
LIN(float, lin1)

/* V[(a*n + b)*vs + c] = (B^T d B)[a][b] for each channel c < C, d the n x n patch at p
 * (rows rs floats apart, columns cs), 8 channels at a time and a scalar tail. */
AI void in_tile_g(const float *BT, int n, const float *restrict p, int C, size_t cs, size_t rs,
                  float *restrict V, size_t vs) {
  int c = 0;
  for (; c + 8 <= C; c += 8) {
    wv8 d[N_MAX * N_MAX], t[N_MAX * N_MAX];
    UNROLL for (int i = 0; i < n; i++) UNROLL for (int b = 0; b < n; b++) d[i * n + b] =
        WV8_LD(p + i * rs + (size_t)b * cs + c);
    UNROLL for (int a = 0; a < n; a++) UNROLL for (int b = 0; b < n; b++) t[a * n + b] =
        lin8(BT + a * n, 1, d + b, n, n);
    UNROLL for (int a = 0; a < n; a++) UNROLL for (int b = 0; b < n; b++)
        WV8_ST(V + (size_t)(a * n + b) * vs + c, lin8(BT + b * n, 1, t + a * n, 1, n));
  }
  for (; c < C; c++) {
    float d[N_MAX * N_MAX], t[N_MAX * N_MAX];
    for (int i = 0; i < n; i++)
      for (int b = 0; b < n; b++) d[i * n + b] = p[i * rs + (size_t)b * cs + c];
    UNROLL for (int a = 0; a < n; a++) UNROLL for (int b = 0; b < n; b++) t[a * n + b] =
        lin1(BT + a * n, 1, d + b, n, n);
    UNROLL for (int a = 0; a < n; a++) UNROLL for (int b = 0; b < n; b++)
        V[(size_t)(a * n + b) * vs + c] = lin1(BT + b * n, 1, t + a * n, 1, n);
  }
}

/* o[(a*m + b)*cop + c] = (A^T M A)[a][b] for each channel c < Co, M[ξ] at M + ξ*ms. */
AI void out_tile_g(const float *AT, int m, int n, const float *restrict M, size_t ms, int Co,
                   float *restrict o, int cop) {
  int c = 0;
  for (; c + 8 <= Co; c += 8) {
    wv8 x[N_MAX * N_MAX], s[N_MAX * N_MAX];
    UNROLL for (int i = 0; i < n * n; i++) x[i] = WV8_LD(M + (size_t)i * ms + c);
    UNROLL for (int a = 0; a < m; a++) UNROLL for (int j = 0; j < n; j++) s[a * n + j] =
        lin8(AT + a * n, 1, x + j, n, n);
    UNROLL for (int a = 0; a < m; a++) UNROLL for (int b = 0; b < m; b++)
        WV8_ST(o + (size_t)(a * m + b) * cop + c, lin8(AT + b * n, 1, s + a * n, 1, n));
  }
  for (; c < Co; c++) {
    float x[N_MAX * N_MAX], s[N_MAX * N_MAX];
    for (int i = 0; i < n * n; i++) x[i] = M[(size_t)i * ms + c];
    UNROLL for (int a = 0; a < m; a++) UNROLL for (int j = 0; j < n; j++) s[a * n + j] =
        lin1(AT + a * n, 1, x + j, n, n);
    UNROLL for (int a = 0; a < m; a++) UNROLL for (int b = 0; b < m; b++)
        o[(size_t)(a * m + b) * cop + c] = lin1(AT + b * n, 1, s + a * n, 1, n);
  }
}

/* u[(a*n + b)*xs + l] = (G g G^T)[a][b] for 8 filters side by side, g[(ti*r + tj)*8 + l]. */
AI void ut_g(const float *G, int r, int n, const float *g, float *u, size_t xs) {
  wv8 gv[9], t[N_MAX * 3];
  for (int i = 0; i < r * r; i++) gv[i] = WV8_LD(g + i * 8);
  UNROLL for (int a = 0; a < n; a++) UNROLL for (int j = 0; j < r; j++) t[a * r + j] =
      lin8(G + a * r, 1, gv + j, r, r);
  UNROLL for (int a = 0; a < n; a++) UNROLL for (int b = 0; b < n; b++)
      WV8_ST(u + (size_t)(a * n + b) * xs, lin8(G + b * r, 1, t + a * r, 1, r));
}

/* dW's: Z[(i*n + j)*zs + c] = (A dy A^T)[i][j] for each channel c < Co,
 * dy the m x m tile at p (rows rs floats apart, columns cs): the gradient of M from that
 * of Y = A^T M A. */
AI void zt_g(const float *AT, int m, int n, const float *restrict p, int Co, size_t cs, size_t rs,
             float *restrict Z, size_t zs) {
  for (int c = 0; c + 8 <= Co; c += 8) {
    wv8 x[N_MAX * N_MAX], t[N_MAX * N_MAX];
    UNROLL for (int a = 0; a < m; a++) UNROLL for (int b = 0; b < m; b++) x[a * m + b] =
        WV8_LD(p + a * rs + (size_t)b * cs + c);
    /* t[i][b] = sum_a A^T[a][i] dy[a][b], then Z[i][j] = sum_b t[i][b] A^T[b][j] */
    UNROLL for (int i = 0; i < n; i++) UNROLL for (int b = 0; b < m; b++) t[i * m + b] =
        lin8(AT + i, n, x + b, m, m);
    UNROLL for (int i = 0; i < n; i++) UNROLL for (int j = 0; j < n; j++)
        WV8_ST(Z + (size_t)(i * n + j) * zs + c, lin8(AT + j, n, t + i * m, 1, m));
  }
  for (int c = Co / 8 * 8; c < Co; c++) {
    float x[N_MAX * N_MAX], t[N_MAX * N_MAX];
    for (int a = 0; a < m; a++)
      for (int b = 0; b < m; b++) x[a * m + b] = p[a * rs + (size_t)b * cs + c];
    UNROLL for (int i = 0; i < n; i++) UNROLL for (int b = 0; b < m; b++) t[i * m + b] =
        lin1(AT + i, n, x + b, m, m);
    UNROLL for (int i = 0; i < n; i++) UNROLL for (int j = 0; j < n; j++)
        Z[(size_t)(i * n + j) * zs + c] = lin1(AT + j, n, t + i * m, 1, m);
  }
}

/* dW's: g[(ti*r + tj)*8 + l] = (G^T dU G)[ti][tj] for 8 filters side by side, dU[ξ] at
 * u + ξ*xs: the gradient of g from that of U = G g G^T. */
AI void dut_g(const float *G, int r, int n, const float *u, size_t xs, float *g) {
  wv8 x[N_MAX * N_MAX], t[N_MAX * 3];
  UNROLL for (int i = 0; i < n * n; i++) x[i] = WV8_LD(u + (size_t)i * xs);
  /* t[a][tj] = sum_b dU[a][b] G[b][tj], then g[ti][tj] = sum_a G[a][ti] t[a][tj] */
  UNROLL for (int a = 0; a < n; a++) UNROLL for (int j = 0; j < r; j++) t[a * r + j] =
      lin8(G + j, r, x + a * n, 1, n);
  UNROLL for (int i = 0; i < r; i++) UNROLL for (int j = 0; j < r; j++)
      WV8_ST(g + (i * r + j) * 8, lin8(G + i, r, t + j, r, n));
}

typedef void (*in_fn)(const float *p, int C, size_t cs, size_t rs, float *V, size_t vs);
typedef void (*zt_fn)(const float *p, int Co, size_t cs, size_t rs, float *Z, size_t zs);
typedef void (*dut_fn)(const float *u, size_t xs, float *g);
typedef void (*out_fn)(const float *M, size_t ms, int Co, float *o, int cop);
typedef void (*ut_fn)(const float *g, float *u, size_t xs);

/* Each variant's transforms, compiled with its tables as constants. */
#define WVAR(name, M_, R_)                                                                  \
  NN__CLONES static void in_##name(const float *p, int C, size_t cs, size_t rs, float *V,   \
                                   size_t vs) {                                             \
    in_tile_g(BT_##name, M_ + R_ - 1, p, C, cs, rs, V, vs);                                 \
  }                                                                                         \
  NN__CLONES static void out_##name(const float *M, size_t ms, int Co, float *o, int cop) { \
    out_tile_g(AT_##name, M_, M_ + R_ - 1, M, ms, Co, o, cop);                              \
  }                                                                                         \
  NN__CLONES static void ut_##name(const float *g, float *u, size_t xs) {                   \
    ut_g(G_##name, R_, M_ + R_ - 1, g, u, xs);                                              \
  }                                                                                         \
  NN__CLONES static void zt_##name(const float *p, int Co, size_t cs, size_t rs, float *Z,  \
                                   size_t zs) {                                             \
    zt_g(AT_##name, M_, M_ + R_ - 1, p, Co, cs, rs, Z, zs);                                 \
  }                                                                                         \
  NN__CLONES static void dut_##name(const float *u, size_t xs, float *g) {                  \
    dut_g(G_##name, R_, M_ + R_ - 1, u, xs, g);                                             \
  }
WVAR(f22, 2, 2)
WVAR(f32, 3, 2)
WVAR(f42, 4, 2)
WVAR(f52, 5, 2)
WVAR(f23, 2, 3)
WVAR(f33, 3, 3)
WVAR(f43, 4, 3)

typedef struct wvar {
  int m, r, n;
  in_fn in;
  out_fn out;
  ut_fn ut;
  zt_fn zt;
  dut_fn dut;
} wvar;

#define WV(name, M_, R_) \
  { M_, R_, M_ + R_ - 1, in_##name, out_##name, ut_##name, zt_##name, dut_##name }
static const wvar g_vars[] = {WV(f22, 2, 2), WV(f32, 3, 2), WV(f42, 4, 2), WV(f52, 5, 2),
                              WV(f23, 2, 3), WV(f33, 3, 3), WV(f43, 4, 3)};
#define N_VARS (int)(sizeof g_vars / sizeof g_vars[0])

/* ---- geometry ------------------------------------------------------------------------
 * A conv-transpose2d node is seen as the conv2d it is the adjoint of (as in convk.c): that
 * conv's input is the node's output and its output the node's input; the weights
 * (C_in, C_out, k, k) are that conv's (its C_out, C_in, k, k) as they lie. */

typedef struct cview {
  int C, H, W, Co, Ho, Wo, k, s, pad, r;
} cview;

static bool view_of(const nn_model *m, const nn__node *n, cview *v) {
  const nn__node *x = &m->nodes[n->in[0]];
  if (n->kind == NN__CONV && n->dil == 1)
    *v = (cview){x->C, x->H, x->W, n->C, n->H, n->W, n->kh, n->stride, n->pad, 0};
  else if (n->kind == NN__CONVT)
    *v = (cview){n->C, n->H, n->W, x->C, x->H, x->W, n->kh, n->stride, n->pad, 0};
  else
    return false;
  v->r = (v->k + v->s - 1) / v->s;
  /* square kernels whose s2d form has no zero taps, r of 2 or 3, padding short of k
   * (the input gradient's dy is then padded by r - 1 - pad/s >= 0) */
  return n->kh == n->kw && (v->r == 2 || v->r == 3) && v->r * v->s == v->k && v->pad < v->k &&
         v->s <= 16; /* xh_task's column phases */
}

/* One Winograd convolution: a stride-1 r x r conv of In, the source laid out
 *   In[a][b][(c*ss + ri)*ss + rj] = src[c][a*ss + ri - ps][b*ss + rj - ps]   (0 outside)
 * over a grid of Ho x Wo outputs, output (a, b, (c*ds + ri)*ds + rj) going to
 * dst[c][a*ds + ri - dp][b*ds + rj - dp] where that lies inside dst. */
typedef struct wgeo {
  const wvar *v;
  int Ci, Co;
  int sC, sH, sW, ss, ps; /* source, NCHW */
  int Ho, Wo, TH, TW, T;  /* output grid, tiles */
  int Hp, Wp;             /* xh per sample: (Hp, Wp, Ci) */
  size_t xhF;
  int dC, dH, dW, ds, dp; /* sink, NCHW */
} wgeo;

static void wgeo_tiles(wgeo *g) {
  int m = g->v->m, r = g->v->r;
  g->TH = (g->Ho + m - 1) / m, g->TW = (g->Wo + m - 1) / m, g->T = g->TH * g->TW;
  g->Hp = g->TH * m + r - 1, g->Wp = g->TW * m + r - 1;
  g->xhF = (size_t)g->Hp * g->Wp * g->Ci;
}

/* The conv's forward: x (C, H, W) in s2d form to y (Co, Ho, Wo). */
static wgeo fwd_geo(const cview *c, const wvar *v) {
  wgeo g = {v, c->C * c->s * c->s, c->Co, c->C, c->H, c->W, c->s, c->pad, c->Ho, c->Wo};
  g.dC = c->Co, g.dH = c->Ho, g.dW = c->Wo, g.ds = 1, g.dp = 0;
  wgeo_tiles(&g);
  return g;
}

/* The conv's input gradient: dy (Co, Ho, Wo) padded to dx in s2d form, rows a0.. of it
 * (those that reach into x). */
static wgeo dx_geo(const cview *c, const wvar *v) {
  int a0 = c->pad / c->s, Hs = c->Ho + c->r - 1, Ws = c->Wo + c->r - 1;
  int a1 = (c->H - 1 + c->pad) / c->s + 1, b1 = (c->W - 1 + c->pad) / c->s + 1;
  a1 = a1 < Hs ? a1 : Hs, b1 = b1 < Ws ? b1 : Ws;
  wgeo g = {v, c->Co, c->C * c->s * c->s, c->Co, c->Ho, c->Wo, 1, c->r - 1 - a0, a1 - a0, b1 - a0};
  g.dC = c->C, g.dH = c->H, g.dW = c->W, g.ds = c->s, g.dp = c->pad - a0 * c->s;
  wgeo_tiles(&g);
  return g;
}

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }
static size_t round_nr(int c) { return ((size_t)c + NR_MAX - 1) / NR_MAX * NR_MAX; }

/* Tiles per task at most: V^T and M^T of a task within TT_BUDGET floats. */
static int tt_cap(const wgeo *g) {
  size_t per = (size_t)g->v->n * g->v->n * ((size_t)g->Ci + round_nr(g->Co));
  size_t t = TT_BUDGET / per;
  return t < MR_MAX ? MR_MAX : t > TT_CAP ? TT_CAP : (int)t;
}

/* Scratch floats: xh of the batch, U^T packed, the filter tap map (ints), and per thread
 * V^T and M^T of one task (sized for the widest ISA and the pool's most threads) plus a
 * tile's outputs. */
typedef struct wlayout {
  size_t xh, ub, kmap, thr, tstride, total;
} wlayout;

static wlayout wlayout_of(const wgeo *g, int max_batch) {
  wlayout L;
  int n2 = g->v->n * g->v->n, tt = tt_cap(g);
  size_t cop = round_nr(g->Co), cs = g->Ci > g->Co ? (size_t)g->Ci : (size_t)g->Co;
  L.xh = 0;
  L.ub = up16((size_t)max_batch * g->xhF);
  L.kmap = L.ub + up16((size_t)n2 * cop * g->Ci);
  L.thr = L.kmap + up16(cs * 9);
  L.tstride = (size_t)n2 * (up16((size_t)tt * g->Ci) + XI_PAD) +
              (size_t)n2 * (up16((size_t)tt * cop) + XI_PAD) +
              up16((size_t)g->v->m * g->v->m * cop);
  L.total = L.thr + (size_t)nn__pool_max_threads() * L.tstride;
  return L;
}

/* ---- when it runs ------------------------------------------------------------------- */

static int g_mode = -1; /* -1: where it pays, 0: never, 1: every layer it can, 2..5: tile m */
static pthread_once_t g_mode_once = PTHREAD_ONCE_INIT;

static void mode_init(void) {
  const char *e = getenv("SHOAL_NN_WINOGRAD");
  if (e && *e >= '0' && *e <= '5' && !e[1]) g_mode = *e - '0';
}

int nn__wino_mode(int mode) {
  pthread_once(&g_mode_once, mode_init);
  int was = g_mode;
  if (mode >= -1 && mode <= 5) g_mode = mode;
  return was;
}

/* Winograd chosen for this phase of a conv2d or conv-transpose2d by timing (nn/cpu/plan.c):
 * it runs where it can, whatever the rules below say. */
static bool timed_wino(const nn__node *n, int phase) {
  if (n->kind != NN__CONV && n->kind != NN__CONVT) return false;
  return n->kp[nn__conv_phase(n, phase)] == NN__KP_WINO; /* phase is the conv's */
}

/* Multiplies (and a share for the transforms) of one direction by variant v. */
static double wcost(const wgeo *g) {
  double n = g->v->n;
  return (double)g->T * n * n * ((double)g->Ci * g->Co + 4 * n * (g->Ci + g->Co));
}

/* The variant for one direction of the conv (dx: its input gradient), or NULL to leave it
 * to convk.c. */
static const wvar *pick(const cview *c, bool dx, int B, bool force) {
  pthread_once(&g_mode_once, mode_init);
  if (!g_mode && !force) return NULL;
  int ci = dx ? c->Co : c->C * c->s * c->s, co = dx ? c->C * c->s * c->s : c->Co;
  const wvar *best = NULL, *forced = NULL;
  double bc = 0;
  for (int i = 0; i < N_VARS; i++) {
    const wvar *v = &g_vars[i];
    if (v->r != c->r) continue;
    wgeo g = dx ? dx_geo(c, v) : fwd_geo(c, v);
    double k = wcost(&g);
    if (!best || k < bc) best = v, bc = k;
    if (v->m == g_mode) forced = v;
  }
  if (g_mode >= 2) return forced ? forced : best;
  if (g_mode == 1 || force) return best; /* force: chosen by timing (nn/cpu/plan.c) */
  /* Measured (benchmarks/nn_layers_speed): with few channels the transforms and the
   * tiles' unused outputs cost more than the fewer multiply-adds save; with few tiles (an
   * actor's batch of one) the filters' transform, made on every call, does; and the
   * products run at a lower rate than the direct kernels'. */
  wgeo g = dx ? dx_geo(c, best) : fwd_geo(c, best);
  double direct = (double)c->Ho * c->Wo * c->r * c->r * ci * co;
  if (ci < 16 || co < 16 || (size_t)B * g.T < 128) return NULL;
  return bc <= 0.85 * direct ? best : NULL;
}

bool nn__wino_runs(const nn_model *m, const nn__node *n, int B, bool dx) {
  cview c;
  if (!view_of(m, n, &c)) return false;
  /* a conv-transpose's forward is its conv's input gradient */
  return pick(&c, n->kind == NN__CONVT ? !dx : dx, B, false) != NULL;
}

bool nn__wino_can(const nn_model *m, const nn__node *n) {
  cview c;
  return view_of(m, n, &c) && pick(&c, false, 1, true) && pick(&c, true, 1, true);
}

typedef struct dwlayout dwlayout;
static size_t dw_scratch(const wgeo *g, int max_batch);

size_t nn__wino_scratch(const nn_model *m, const nn__node *n, int max_batch) {
  cview c;
  if (!view_of(m, n, &c)) return 0;
  size_t most = 0;
  for (int i = 0; i < N_VARS; i++) {
    if (g_vars[i].r != c.r) continue;
    wgeo f = fwd_geo(&c, &g_vars[i]), d = dx_geo(&c, &g_vars[i]);
    size_t a = wlayout_of(&f, max_batch).total, b = wlayout_of(&d, max_batch).total;
    size_t w = dw_scratch(&f, max_batch);
    most = a > most ? a : most;
    most = b > most ? b : most;
    most = w > most ? w : most;
  }
  return most;
}

/* ---- the routine --------------------------------------------------------------------- */

typedef struct wjob {
  const wisa *I;
  wgeo g;
  wlayout L;
  const cview *c;
  const float *src, *w, *Ub, *bias;
  float *xh, *dst, *thr;
  const int *kmap; /* kmap[cs*r*r + t]: tap t of s2d channel cs in a row of W, or -1 */
  size_t srcF, dstF;
  int B, NT, Tt, acc, relu;
  bool dx; /* the conv's input gradient: filters turned and channels swapped */
} wjob;

/* One sample of the source -> xh (Hp, Wp, Ci), zero where the padded patch lies outside.
 * A row of the source at a time, its s column phases rj each a strided copy (no division
 * per float: on Nature-DQN's 8x8/4 conv that took longer than the products). */
NN__CLONES static void xh_task(void *vc, int smp, int th) {
  const wjob *j = vc;
  const wgeo *g = &j->g;
  float *xh = j->xh + smp * g->xhF;
  int s = g->ss, Ci = g->Ci, ps = g->ps;
  const float *src = j->src + smp * j->srcF;
  int blo[16], bhi[16]; /* per rj: columns b of xh whose source column lies inside */
  for (int rj = 0; rj < s; rj++) {
    int lo = ps - rj > 0 ? (ps - rj + s - 1) / s : 0;
    int hi = g->sW - 1 + ps - rj < 0 ? 0 : (g->sW - 1 + ps - rj) / s + 1;
    blo[rj] = lo < g->Wp ? lo : g->Wp, bhi[rj] = hi < g->Wp ? hi : g->Wp;
    bhi[rj] = bhi[rj] < blo[rj] ? blo[rj] : bhi[rj];
  }
  /* zero what the copies below leave: rows and columns not wholly inside the source (a
   * memset of all of xh was a sixth of a DCGAN conv's Winograd overhead) */
  size_t rowF = (size_t)g->Wp * Ci;
  int alo = (ps + s - 1) / s, ahi = g->sH + ps - s < 0 ? 0 : (g->sH + ps - s) / s + 1;
  int clo = alo, chi = g->sW + ps - s < 0 ? 0 : (g->sW + ps - s) / s + 1;
  alo = alo < g->Hp ? alo : g->Hp, ahi = ahi < alo ? alo : ahi > g->Hp ? g->Hp : ahi;
  clo = clo < g->Wp ? clo : g->Wp, chi = chi < clo ? clo : chi > g->Wp ? g->Wp : chi;
  memset(xh, 0, (size_t)alo * rowF * sizeof(float));
  memset(xh + (size_t)ahi * rowF, 0, (size_t)(g->Hp - ahi) * rowF * sizeof(float));
  for (int a = alo; a < ahi; a++) {
    memset(xh + (size_t)a * rowF, 0, (size_t)clo * Ci * sizeof(float));
    memset(xh + (size_t)a * rowF + (size_t)chi * Ci, 0, (size_t)(g->Wp - chi) * Ci * sizeof(float));
  }
#ifdef NN__X86
  if (s == 1 && j->I->nr >= 16 && Ci % 8 == 0) { /* 8 channels' rows transposed at a time */
    int n = bhi[0] - blo[0];                     /* columns iw = b - ps for b in [blo, bhi) */
    for (int c0 = 0; c0 < g->sC; c0 += 8)
      for (int ih = 0; ih < g->sH && ih + ps < g->Hp; ih++) {
        const float *row[8];
        for (int i = 0; i < 8; i++) row[i] = src + ((size_t)(c0 + i) * g->sH + ih) * g->sW;
        float *d = xh + ((size_t)(ih + ps) * g->Wp + blo[0]) * Ci + c0;
        size_t off = (size_t)(blo[0] - ps);
        int k = 0;
        for (; k + 8 <= n; k += 8) nn__tr8x8(row, off + k, d + (size_t)k * Ci, (size_t)Ci);
        for (; k < n; k++)
          for (int i = 0; i < 8; i++) d[(size_t)k * Ci + i] = row[i][off + k];
      }
    return;
  }
#endif
  /* Row a of xh at a time, which stays in L1 while its s*sC source rows fill it: by
   * source rows, the channel-minor stores (Ci floats apart) missed L1 each time (Nature-DQN's
   * first layer: a sixth of its training step). Within a source row the s floats of a
   * column b are contiguous in both, a run of s copied as one. */
  int bf0 = blo[0], bf1 = bhi[s - 1] > bf0 ? bhi[s - 1] : bf0; /* every rj inside */
  for (int a = 0; a < g->Hp; a++)
    for (int c = 0; c < g->sC; c++)
      for (int ri = 0; ri < s; ri++) {
        int ih = a * s + ri - ps;
        if (ih < 0 || ih >= g->sH) continue;
        const float *r = src + ((size_t)c * g->sH + ih) * g->sW - ps; /* r[b*s + rj] */
        float *d = xh + (size_t)a * rowF + (c * s + ri) * s;          /* d[b*Ci + rj] */
        for (int rj = 0; rj < s; rj++) { /* the edge columns, rj by rj */
          for (int b = blo[rj]; b < bhi[rj] && b < bf0; b++) d[(size_t)b * Ci + rj] = r[b * s + rj];
          for (int b = bf1 > blo[rj] ? bf1 : blo[rj]; b < bhi[rj]; b++)
            d[(size_t)b * Ci + rj] = r[b * s + rj];
        }
        if (s == 4)
          for (int b = bf0; b < bf1; b++) memcpy(d + (size_t)b * Ci, r + b * 4, 4 * sizeof(float));
        else if (s == 2)
          for (int b = bf0; b < bf1; b++) memcpy(d + (size_t)b * Ci, r + b * 2, 2 * sizeof(float));
        else
          for (int b = bf0; b < bf1; b++)
            for (int rj = 0; rj < s; rj++) d[(size_t)b * Ci + rj] = r[b * s + rj];
      }
}

/* Filters of panel cp (nr output channels) for every input channel, transformed. */
static void u_task(void *vc, int cp, int th) {
  const wjob *j = vc;
  const wgeo *g = &j->g;
  const cview *c = j->c;
  int nr = j->I->nr, r = c->r, rr = r * r, ncop = (g->Co + nr - 1) / nr, K = c->C * c->k * c->k;
  size_t xs = (size_t)ncop * g->Ci * nr; /* between positions ξ */
  float gb[9 * 8];
  for (int ci = 0; ci < g->Ci; ci++)
    for (int j0 = 0; j0 < nr; j0 += 8) {
      for (int l = 0; l < 8; l++) {
        int co = cp * nr + j0 + l;
        for (int t = 0; t < rr; t++) {
          float v = 0.0f;
          if (co < g->Co) {
            /* forward: W[co][tap t of s2d channel ci]; dx: W[ci][tap r*r-1-t of channel co] */
            int o = j->dx ? j->kmap[co * rr + rr - 1 - t] : j->kmap[ci * rr + t];
            v = j->w[(size_t)(j->dx ? ci : co) * K + o];
          }
          gb[t * 8 + l] = v;
        }
      }
      g->v->ut(gb, (float *)j->Ub + ((size_t)cp * g->Ci + ci) * nr + j0, xs);
    }
}

/* max(v, 0) as act_forward's ReLU (v > 0 ? v : 0, so NaN gives 0), without a branch: the
 * sign of a conv output is a coin toss, and the branch's mispredictions took longer than
 * the writes on Nature-DQN's first layer. */
static inline float relu1(float v) {
#ifdef NN__X86
  return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(v), _mm_setzero_ps())); /* NaN: the 0 */
#else
  return v > 0 ? v : 0.0f;
#endif
}

static void tile_task(void *vc, int task, int th) {
  const wjob *j = vc;
  const wgeo *g = &j->g;
  const wvar *v = g->v;
  int mr = j->I->mr, nr = j->I->nr, Ci = g->Ci, Tt = j->Tt, n2 = v->n * v->n, m = v->m;
  int cop = (g->Co + nr - 1) / nr * nr, ncop = cop / nr;
  int t0 = task * Tt, cnt = j->NT - t0 < Tt ? j->NT - t0 : Tt;
  size_t vs = up16((size_t)Tt * Ci) + XI_PAD, ms = up16((size_t)Tt * cop) + XI_PAD;
  float *V = j->thr + (size_t)th * j->L.tstride, *Mt = V + n2 * vs, *o = Mt + n2 * ms;
  size_t rs = (size_t)g->Wp * Ci;
  /* the tiles' transformed patches; a short last task's rows past cnt are zero */
  for (int i = 0; i < cnt; i++) {
    int t = t0 + i, s = t / g->T, q = t - s * g->T, th_ = q / g->TW, tw = q - th_ * g->TW;
    const float *p = j->xh + s * g->xhF + (size_t)(th_ * m) * rs + (size_t)(tw * m) * Ci;
    v->in(p, Ci, (size_t)Ci, rs, V + (size_t)i * Ci, vs);
  }
  int rows = (cnt + mr - 1) / mr * mr;
  for (int xi = 0; xi < n2 && rows > cnt; xi++)
    memset(V + xi * vs + (size_t)cnt * Ci, 0, (size_t)(rows - cnt) * Ci * sizeof(float));
  /* a panel of U^T[ξ] (Ci x NR) stays in L1 across the task's row blocks */
  for (int xi = 0; xi < n2; xi++)
    for (int cp = 0; cp < ncop; cp++) {
      const float *U = j->Ub + ((size_t)xi * ncop + cp) * Ci * nr;
      for (int i0 = 0; i0 < rows; i0 += mr)
        j->I->k(Ci, V + xi * vs + (size_t)i0 * Ci, Ci, U, Mt + xi * ms + (size_t)i0 * cop + cp * nr,
                cop);
    }
  int ds = g->ds, st = ds * ds;
  size_t dHW = (size_t)g->dH * g->dW;
  for (int i = 0; i < cnt; i++) {
    int t = t0 + i, s = t / g->T, q = t - s * g->T, th_ = q / g->TW, tw = q - th_ * g->TW;
    v->out(Mt + (size_t)i * cop, ms, g->Co, o, cop);
    int a0 = th_ * m, b0 = tw * m;
    int na = g->Ho - a0 < m ? g->Ho - a0 : m, nb = g->Wo - b0 < m ? g->Wo - b0 : m;
    float *dst = j->dst + s * j->dstF;
    /* each output position that lies inside dst, then its channels (no test per float) */
    for (int da = 0; da < na; da++)
      for (int ri = 0; ri < ds; ri++) {
        int ih = (a0 + da) * ds + ri - g->dp;
        if ((unsigned)ih >= (unsigned)g->dH) continue;
        for (int db = 0; db < nb; db++)
          for (int rj = 0; rj < ds; rj++) {
            int iw = (b0 + db) * ds + rj - g->dp;
            if ((unsigned)iw >= (unsigned)g->dW) continue;
            float *y = dst + (size_t)ih * g->dW + iw;
            const float *oq = o + (size_t)(da * m + db) * cop + ri * ds + rj; /* oq[c*st] */
            int nc = g->dC;
            if (j->acc)
              for (int c = 0; c < nc; c++) y[c * dHW] += oq[c * st];
            else if (j->relu)
              for (int c = 0; c < nc; c++)
                y[c * dHW] = relu1(oq[c * st] + (j->bias ? j->bias[c] : 0.0f));
            else if (j->bias)
              for (int c = 0; c < nc; c++) y[c * dHW] = oq[c * st] + j->bias[c];
            else
              for (int c = 0; c < nc; c++) y[c * dHW] = oq[c * st];
          }
      }
  }
}

/* km[cs*r*r + t]: where tap t = (ti, tj) of s2d channel cs lies in a row of W (C, k, k). */
static const int *make_kmap(const cview *c, int *km) {
  int s = c->s, r = c->r;
  for (int cs = 0; cs < c->C * s * s; cs++) {
    int ch = cs / (s * s), ri = cs / s % s, rj = cs % s;
    for (int t = 0; t < r * r; t++)
      km[cs * r * r + t] = (ch * c->k + (t / r) * s + ri) * c->k + (t % r) * s + rj;
  }
  return km;
}

/* The conv of j->src through the transformed filters into j->dst: the shared body. */
static void wino_run(wjob *j, nn_model *m, const nn__node *n) {
  float *S = m->scratch;
  const cview *c = j->c;
  j->I = &g_wisa[nn__conv_path_get()];
  j->L = wlayout_of(&j->g, m->max_batch);
  j->xh = S + j->L.xh, j->thr = S + j->L.thr;
  j->w = m->params + n->poff[0];
  j->kmap = make_kmap(c, (int *)(S + j->L.kmap));
  j->Ub = S + j->L.ub;
  int ncop = (j->g.Co + j->I->nr - 1) / j->I->nr;
  nn__parallel_for(ncop, u_task, j);
  j->NT = j->B * j->g.T;
  int T = nn__cpu_threads(), tt = j->NT / (4 * (T < 1 ? 1 : T)), cap = tt_cap(&j->g);
  tt = tt < j->I->mr ? j->I->mr : tt > cap ? cap : tt;
  j->Tt = tt / j->I->mr * j->I->mr;
  nn__parallel_for(j->B, xh_task, j);
  nn__parallel_for((j->NT + j->Tt - 1) / j->Tt, tile_task, j);
}

/* The conv's forward of src (the conv's input) into dst (its output). */
static void run_fwd(nn_model *m, const nn__node *n, const cview *c, int B, const float *src,
                    float *dst, const float *bias, bool relu, bool acc) {
  wjob j = {0};
  j.c = c;
  j.g = fwd_geo(c, pick(c, false, B, timed_wino(n, NN__PH_FWD)));
  j.B = B, j.src = src, j.dst = dst, j.bias = bias, j.relu = relu, j.acc = acc;
  j.srcF = (size_t)c->C * c->H * c->W, j.dstF = (size_t)c->Co * c->Ho * c->Wo;
  wino_run(&j, m, n);
}

/* The conv's input gradient of src (shaped as its output) into dst (as its input). */
static void run_dx(nn_model *m, const nn__node *n, const cview *c, int B, const float *src,
                   float *dst, const float *bias, bool acc) {
  wjob j = {0};
  j.c = c;
  j.g = dx_geo(c, pick(c, true, B, timed_wino(n, NN__PH_DX)));
  j.dx = true;
  j.B = B, j.src = src, j.dst = dst, j.bias = bias, j.acc = acc;
  j.srcF = (size_t)c->Co * c->Ho * c->Wo, j.dstF = (size_t)c->C * c->H * c->W;
  wino_run(&j, m, n);
}

void nn__wino_forward(nn_model *m, nn__node *n, int B) {
  cview c;
  view_of(m, n, &c);
  const nn__node *xn = nn__input(m, n, 0);
  const float *bias = n->bias ? m->params + n->poff[1] : NULL;
  if (n->kind == NN__CONVT) {
    run_dx(m, n, &c, B, xn->out, n->out, bias, false);
    return;
  }
  bool relu = n->fuse_act > 0;
  run_fwd(m, n, &c, B, xn->out, relu ? m->nodes[n->fuse_act].out : n->out, bias, relu, false);
}

void nn__wino_dx(nn_model *m, nn__node *n, int B, float *dx, bool acc) {
  cview c;
  view_of(m, n, &c);
  if (n->kind == NN__CONVT)
    run_fwd(m, n, &c, B, n->dout, dx, NULL, false, acc);
  else
    run_dx(m, n, &c, B, n->dout, dx, NULL, acc);
}

/* ---- the weight gradient ---------------------------------------------------------------
 * Y = A^T [U ⊙ V] A with U = G g G^T gives, summed over tiles,
 *   dU[ξ] = sum_tiles (A dY A^T)[ξ] ⊙ V[ξ],    dg = G^T dU G
 * so over channels dU[ξ] (C_out x C_in) = Z^T[ξ] (C_out x tiles) V[ξ] (tiles x C_in), Z =
 * A dY A^T per (tile, output channel): n^2 GEMMs whose contraction runs over the tiles of
 * the batch, then one small transform per filter. Tiles past the output grid read dY as 0.
 * V is stored in NR-wide panels of input channels (the kernels' B operand, written as the
 * transform makes it), Z^T a row per output channel (the A operand, lda = the tiles). The
 * batch's tiles go in chunks whose V and Z fit DW_BUDGET floats; dU adds up over chunks.
 * Threads: the transforms by blocks of tiles, the GEMMs by (ξ, panel), the filters by
 * output channel, so no two write the same floats. */

#define DW_BUDGET ((size_t)1 << 22) /* floats of V and Z^T per chunk: 16 MB */
#define DW_TT 8                     /* tiles per transform task */

struct dwlayout {
  size_t xh, yh, kmap, vp, zt, du, thr, tstride, total;
  int ntc; /* tiles per chunk */
};

/* dY channels-last, (TH*m, TW*m, C_out) per sample: the grid of fg's tiles. */
static wgeo dy_geo(const wgeo *fg) {
  wgeo y = *fg;
  y.Ci = fg->Co, y.sC = fg->Co, y.sH = fg->Ho, y.sW = fg->Wo, y.ss = 1, y.ps = 0;
  y.Hp = fg->TH * fg->v->m, y.Wp = fg->TW * fg->v->m;
  y.xhF = (size_t)y.Hp * y.Wp * y.Ci;
  return y;
}

static dwlayout dwlayout_of(const wgeo *g, int max_batch) {
  dwlayout L;
  wgeo y = dy_geo(g);
  size_t n2 = (size_t)g->v->n * g->v->n, cip = round_nr(g->Ci), cop = (size_t)g->Co + MR_MAX;
  size_t nt = (size_t)max_batch * g->T, cap = DW_BUDGET / (n2 * (cip + cop));
  cap = cap < 64 ? 64 : cap; /* a GEMM's contraction of at least 64 tiles */
  nt = nt < cap ? nt : cap;
  L.ntc = (int)nt;
  L.xh = 0;
  L.yh = up16((size_t)max_batch * g->xhF);
  L.kmap = L.yh + up16((size_t)max_batch * y.xhF);
  L.vp = L.kmap + up16((size_t)g->Ci * 9);
  L.zt = L.vp + up16(n2 * cip * nt);
  L.du = L.zt + up16(n2 * cop * nt);
  L.thr = L.du + up16(n2 * cop * cip);
  L.tstride = up16(DW_TT * n2 * (size_t)g->Co) + MR_MAX * NR_MAX + 9 * 8;
  L.total = L.thr + (size_t)nn__pool_max_threads() * L.tstride;
  return L;
}

static size_t dw_scratch(const wgeo *g, int max_batch) { return dwlayout_of(g, max_batch).total; }

typedef struct dwjob {
  const wisa *I;
  wgeo g, gy;
  dwlayout L;
  const cview *c;
  float *xh, *yh, *vp, *zt, *du, *thr, *dw;
  const int *kmap;
  int NT, t0, cnt; /* tiles in all, this chunk's first and count */
  int cip, K;
} dwjob;

/* V of each tile of a block into its panels, Z^T of it into its rows. */
static void dwt_task(void *vc, int task, int th) {
  const dwjob *j = vc;
  const wgeo *g = &j->g;
  const wvar *v = g->v;
  int m = v->m, n2 = v->n * v->n, nr = j->I->nr, Ci = g->Ci, Co = g->Co, ntc = j->L.ntc;
  size_t rs = (size_t)g->Wp * Ci, rsy = (size_t)j->gy.Wp * Co;
  size_t vxs = (size_t)j->cip * ntc, zxs = ((size_t)Co + MR_MAX) * ntc;
  float *z = j->thr + (size_t)th * j->L.tstride;
  for (int i = task * DW_TT; i < j->cnt && i < (task + 1) * DW_TT; i++) {
    int t = j->t0 + i, s = t / g->T, q = t - s * g->T, th_ = q / g->TW, tw = q - th_ * g->TW;
    const float *p = j->xh + s * g->xhF + (size_t)(th_ * m) * rs + (size_t)(tw * m) * Ci;
    for (int cp = 0; cp * nr < Ci; cp++) {
      int nc = Ci - cp * nr < nr ? Ci - cp * nr : nr;
      v->in(p + cp * nr, nc, (size_t)Ci, rs, j->vp + (size_t)cp * ntc * nr + (size_t)i * nr, vxs);
    }
    const float *py = j->yh + s * j->gy.xhF + (size_t)(th_ * m) * rsy + (size_t)(tw * m) * Co;
    v->zt(py, Co, (size_t)Co, rsy, z + (size_t)(i % DW_TT) * n2 * Co, (size_t)Co);
  }
  /* Z^T: the block's tiles are consecutive columns of each row */
  int i0 = task * DW_TT, nt = j->cnt - i0 < DW_TT ? j->cnt - i0 : DW_TT;
  size_t zb = (size_t)n2 * Co; /* between the block's tiles in z */
  for (int xi = 0; xi < n2; xi++) {
    float *d = j->zt + xi * zxs + i0;
    int co = 0;
#ifdef NN__X86
    if (nt == 8 && nr >= 16) /* 8 tiles x 8 channels transposed in registers */
      for (; co + 8 <= Co; co += 8) {
        const float *row[8];
        for (int q = 0; q < 8; q++) row[q] = z + q * zb + (size_t)xi * Co;
        nn__tr8x8(row, (size_t)co, d + (size_t)co * ntc, (size_t)ntc);
      }
#endif
    for (; co < Co; co++)
      for (int q = 0; q < nt; q++) d[(size_t)co * ntc + q] = z[q * zb + (size_t)xi * Co + co];
  }
}

/* dU[ξ][:, panel cp] += Z^T[ξ] V[ξ][:, panel cp] over the chunk's tiles. */
static void dwg_task(void *vc, int task, int th) {
  const dwjob *j = vc;
  const wgeo *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr, Co = g->Co, ntc = j->L.ntc, ncip = j->cip / nr;
  int xi = task / ncip, cp = task - xi * ncip;
  size_t vxs = (size_t)j->cip * ntc, zxs = ((size_t)Co + MR_MAX) * ntc;
  const float *B = j->vp + xi * vxs + (size_t)cp * ntc * nr, *A = j->zt + xi * zxs;
  float *tile = j->thr + (size_t)th * j->L.tstride + up16((size_t)DW_TT * g->v->n * g->v->n * Co);
  float *du = j->du + (size_t)xi * (Co + MR_MAX) * j->cip + cp * nr;
  for (int co0 = 0; co0 < Co; co0 += mr) {
    if (!j->t0) { /* the first chunk: straight into dU (its rows past C_out are slack) */
      j->I->k(j->cnt, A + (size_t)co0 * ntc, ntc, B, du + (size_t)co0 * j->cip, j->cip);
      continue;
    }
    j->I->k(j->cnt, A + (size_t)co0 * ntc, ntc, B, tile, nr);
    int rows = Co - co0 < mr ? Co - co0 : mr;
    for (int i = 0; i < rows; i++)
      for (int q = 0; q < nr; q++) du[(size_t)(co0 + i) * j->cip + q] += tile[i * nr + q];
  }
}

/* dW[co] += G^T dU G, each s2d input channel's r x r taps where they lie in W. */
static void dwf_task(void *vc, int co, int th) {
  const dwjob *j = vc;
  const wgeo *g = &j->g;
  int rr = j->c->r * j->c->r, Ci = g->Ci;
  float *gb = j->thr + (size_t)th * j->L.tstride + up16((size_t)DW_TT * g->v->n * g->v->n * g->Co) +
              MR_MAX * NR_MAX;
  float *w = j->dw + (size_t)co * j->K;
  for (int ci0 = 0; ci0 < Ci; ci0 += 8) {
    g->v->dut(j->du + (size_t)co * j->cip + ci0, ((size_t)g->Co + MR_MAX) * j->cip, gb);
    for (int l = 0; l < 8 && ci0 + l < Ci; l++)
      for (int t = 0; t < rr; t++) w[j->kmap[(ci0 + l) * rr + t]] += gb[t * 8 + l];
  }
}

bool nn__wino_dw_runs(const nn_model *m, const nn__node *n, int B) {
  cview c;
  return view_of(m, n, &c) && pick(&c, false, B, false) != NULL;
}

void nn__wino_dw(nn_model *m, nn__node *n, int B) {
  cview c;
  view_of(m, n, &c);
  dwjob j = {0};
  j.c = &c;
  j.I = &g_wisa[nn__conv_path_get()];
  j.g = fwd_geo(&c, pick(&c, false, B, timed_wino(n, NN__PH_DW)));
  j.gy = dy_geo(&j.g);
  j.L = dwlayout_of(&j.g, m->max_batch);
  j.cip = (int)((j.g.Ci + j.I->nr - 1) / j.I->nr * j.I->nr);
  j.K = c.C * c.k * c.k;
  j.dw = m->grads + n->poff[0];
  float *S = m->scratch;
  j.xh = S + j.L.xh, j.yh = S + j.L.yh, j.vp = S + j.L.vp, j.zt = S + j.L.zt, j.du = S + j.L.du;
  j.thr = S + j.L.thr;
  j.kmap = make_kmap(&c, (int *)(S + j.L.kmap));
  /* the conv's input and output gradient: a conv-transpose's output gradient and input */
  const nn__node *xn = nn__input(m, n, 0);
  const float *x = n->kind == NN__CONVT ? n->dout : xn->out;
  const float *dy = n->kind == NN__CONVT ? xn->out : n->dout;
  wjob xj = {0}, yj = {0};
  xj.I = yj.I = j.I;
  xj.g = j.g, xj.src = x, xj.xh = j.xh, xj.srcF = (size_t)c.C * c.H * c.W, xj.B = B;
  yj.g = j.gy, yj.src = dy, yj.xh = j.yh, yj.srcF = (size_t)c.Co * c.Ho * c.Wo, yj.B = B;
  nn__parallel_for(B, xh_task, &xj);
  nn__parallel_for(B, xh_task, &yj);
  int n2 = j.g.v->n * j.g.v->n, ntc = j.L.ntc;
  /* panel columns past C_in, and Z^T rows past C_out, stay zero through the chunks */
  size_t vxs = (size_t)j.cip * ntc, zxs = ((size_t)j.g.Co + MR_MAX) * ntc;
  for (int xi = 0; xi < n2; xi++) {
    int cl = j.g.Ci / j.I->nr * j.I->nr; /* the last panel, if partial */
    if (cl < j.g.Ci) memset(j.vp + xi * vxs + (size_t)cl * ntc, 0, (size_t)ntc * j.I->nr * 4);
    memset(j.zt + xi * zxs + (size_t)j.g.Co * ntc, 0, (size_t)MR_MAX * ntc * sizeof(float));
  }
  j.NT = B * j.g.T;
  for (j.t0 = 0; j.t0 < j.NT; j.t0 += ntc) {
    j.cnt = j.NT - j.t0 < ntc ? j.NT - j.t0 : ntc;
    nn__parallel_for((j.cnt + DW_TT - 1) / DW_TT, dwt_task, &j);
    nn__parallel_for(n2 * (j.cip / j.I->nr), dwg_task, &j);
  }
  nn__parallel_for(j.g.Co, dwf_task, &j);
}
