/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/densek.c — a dense layer's products by nn's own micro-kernels, with the weights
 * read where they lie: AVX-512 8x32 tiles (this part) and AVX2 6x16 tiles (the section
 * "AVX2: 6x16 tiles" below, which also runs every product of the small layers).
 *
 * For W (out, in), x (B, in), y (B, out) and a batch far smaller than the layer:
 *
 *   forward  y^T = W x^T + b    pack x^T (B*in floats), read W's rows in place
 *   dx      (+)= dy W           W's rows are the kernel's B operand as they lie
 *   dW       += dy^T x          x packed in panels, D's rows written along (a plan's
 *                               choice only: the fixed rules leave it to sgemm)
 *
 * dW is read and written whole with a contraction of only B: on AVX-512 the tiles beat
 * sgemm where dW stays in cache between calls (MinAtar's 1024x128 at batch 32, a loop of
 * it alone: 1.13-1.20x on an AMD Zen 4) and lose by 3-6% where a training step has moved
 * it out (the planner's timing, which is what decides).
 *
 * cblas_sgemm packs both operands on every call, and at a batch of 32 through a 1024x128
 * layer packing W is half as much work again as the product (MinAtar's network: a fifth
 * of its training step was OpenBLAS packing, beside 36% in its kernel). Here the only copies are of
 * the small operand and of the last partial column panel.
 *
 * Each product is C (M, N) = sum_l A(i, l) B(l, j) with A(i, l) at A[i*sai + l*sal] (any
 * strides: a matrix or its transpose) and B's rows contiguous (ldb apart), cut into
 * 8 x 32 tiles. A tile is computed in registers into a small buffer and then written
 * where it belongs (transposed for y^T with the bias and a fused ReLU; dx's stored or added),
 * so no pass over the whole output follows. Each family runs on its own path of the conv
 * kernels (SHOAL_NN_CONV_PATH): the 8x32 tiles on avx512, the 6x16 ones on avx2.
 *
 * Where they pay was measured per product (MinAtar's 1024x128 at batch 32: forward 1.9x,
 * dx 1.5x sgemm); small layers (the DQN MLP's 64x64), layers with rows 12 KB apart
 * (Nature-DQN's 3136 features) and wide ones (DCGAN's 6272 outputs) stay on sgemm, which
 * was faster.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu.h"

#ifdef NN__X86

#define NR 32
#define MR 8

/* T (MR, 32) = sum_l a_i[l*sal] B[l*ldb + j] for i < MR (a: MR row pointers); rows of T
 * rs apart, stored or, when acc, added into. */
__attribute__((target("avx512f"))) static void dk_avx512(int L, const float *const *a,
                                                         ptrdiff_t sal, const float *B,
                                                         ptrdiff_t ldb, float *T, ptrdiff_t rs,
                                                         bool acc) {
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
  const float *a4 = a[4], *a5 = a[5], *a6 = a[6], *a7 = a[7];
  __m512 c[8][2];
  for (int i = 0; i < 8; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
  for (ptrdiff_t l = 0, o = 0; l < L; l++, o += sal, B += ldb) {
    __m512 b0 = _mm512_loadu_ps(B), b1 = _mm512_loadu_ps(B + 16);
#define NN__DK_ROW512(i)                                 \
  do {                                                   \
    __m512 s = _mm512_set1_ps(a##i[o]);                  \
    c[i][0] = _mm512_fmadd_ps(s, b0, c[i][0]);           \
    c[i][1] = _mm512_fmadd_ps(s, b1, c[i][1]);           \
  } while (0)
    NN__DK_ROW512(0);
    NN__DK_ROW512(1);
    NN__DK_ROW512(2);
    NN__DK_ROW512(3);
    NN__DK_ROW512(4);
    NN__DK_ROW512(5);
    NN__DK_ROW512(6);
    NN__DK_ROW512(7);
#undef NN__DK_ROW512
  }
  if (acc)
    for (int i = 0; i < 8; i++) {
      c[i][0] = _mm512_add_ps(c[i][0], _mm512_loadu_ps(T + i * rs));
      c[i][1] = _mm512_add_ps(c[i][1], _mm512_loadu_ps(T + i * rs + 16));
    }
  for (int i = 0; i < 8; i++)
    _mm512_storeu_ps(T + i * rs, c[i][0]), _mm512_storeu_ps(T + i * rs + 16, c[i][1]);
}

/* ---- scratch: the calling thread's, grown as needed and kept ----------------------------
 * Freed when the thread exits, through a key's destructor: a learner's evaluation threads
 * come and go, and each one's buffers leaked (LeakSanitizer, once the AVX2 kernels ran on
 * every machine). A thread whose key cannot be set gets NULL, and the caller runs sgemm. */

typedef struct dk_scratch {
  float *buf[2];
  size_t cap[2];
} dk_scratch;

static pthread_key_t g_key;
static bool g_key_ok;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static _Thread_local dk_scratch *g_scr;

static void scratch_free(void *p) {
  dk_scratch *s = p;
  free(s->buf[0]), free(s->buf[1]), free(s);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, scratch_free) == 0; }

static float *scratch(int slot, size_t floats) {
  if (!g_scr) {
    pthread_once(&g_key_once, key_init);
    dk_scratch *s = g_key_ok ? calloc(1, sizeof *s) : NULL;
    if (!s) return NULL;
    if (pthread_setspecific(g_key, s)) {
      free(s);
      return NULL;
    }
    g_scr = s;
  }
  if (g_scr->cap[slot] < floats) {
    float *p = aligned_alloc(64, (floats * sizeof(float) + 63) & ~(size_t)63);
    if (!p) return NULL;
    free(g_scr->buf[slot]);
    g_scr->buf[slot] = p, g_scr->cap[slot] = floats;
  }
  return g_scr->buf[slot];
}

/* ---- the product driver ------------------------------------------------------------- */

/* A product for either kernel family: dk (AVX-512, 8x32) and sk (AVX2, 6x16, below). */
typedef struct dk_job {
  int M, N, L;
  const float *A; /* A(i, l) = A[i*sai + l*sal] */
  ptrdiff_t sai, sal;
  const float *B; /* B(l, j) = B[l*ldb + j] */
  ptrdiff_t ldb;
  const float *tail; /* the last panel when partial: (L, 32), zero-padded */
  bool pack;         /* dk: B's panels first copied out as (L, 32) blocks, one after another
                      * (a dW's x: its rows far apart all fall in one cache set) */
  float *D; /* C(i, j) goes to D[i*rs + j*cs] */
  ptrdiff_t rs, cs;
  bool tr;           /* C goes down D's columns (y^T, dW^T): said, not inferred from cs, as a
                      * layer of one output or one input has cs 1 either way */
  bool acc;          /* D += C, else D = C (dk: rows of D only) */
  bool relu;         /* D = max(C + bias, 0) (dk: columns of D only) */
  const float *bias; /* or NULL: per row i down D's columns (tr); the 6x16 kernels' rows of
                      * D take it per column j */
  int nbj, nbi, gi; /* column panels, row tiles, row tiles per task */
} dk_job;

/* dx's tiles go to rows of D, stored or added; the forward's y^T tiles go down its columns
 * (tr), with the bias and the fused ReLU. */
static void put_tile(const dk_job *J, const float *restrict T, int i0, int mr, int j0, int nb) {
  if (!J->tr) {
    for (int i = 0; i < mr; i++) {
      float *restrict d = J->D + (i0 + i) * J->rs + j0;
      const float *t = T + i * NR;
      if (J->acc)
        for (int j = 0; j < nb; j++) d[j] += t[j];
      else
        memcpy(d, t, (size_t)nb * sizeof(float));
    }
    return;
  }
  for (int j = 0; j < nb; j++) {
    float *restrict d = J->D + (j0 + j) * J->cs + i0 * J->rs;
    for (int i = 0; i < mr; i++) {
      float v = T[i * NR + j] + (J->bias ? J->bias[i0 + i] : 0.0f);
      if (J->relu) v = v > 0 ? v : 0.0f; /* as act_forward's ReLU: x > 0 ? x : 0 */
      d[i * J->rs] = v;
    }
  }
}

/* The tile at rows i0.. (mr of them) and columns j0.. (nb): a whole tile of D's rows
 * goes straight there from the registers, the rest through put_tile. */
static void dk_tile(const dk_job *J, const float *const *a, const float *B, ptrdiff_t ldb, int i0,
                    int mr, int j0, int nb) {
  if (!J->tr && mr == MR && nb == NR) {
    dk_avx512(J->L, a, J->sal, B, ldb, J->D + (ptrdiff_t)i0 * J->rs + j0, J->rs, J->acc);
    return;
  }
  float T[MR * NR];
  dk_avx512(J->L, a, J->sal, B, ldb, T, NR, false);
  put_tile(J, T, i0, mr, j0, nb);
}

/* One column panel and a group of row tiles: the panel's B rows stay in L1 across them. */
static void dk_task(void *ctx, int task, int thread) {
  (void)thread;
  const dk_job *J = ctx;
  int jb = task % J->nbj, g = task / J->nbj;
  int j0 = jb * NR, nb = J->N - j0 < NR ? J->N - j0 : NR;
  const float *B = nb < NR ? J->tail : J->B + j0; /* the last partial panel, padded */
  ptrdiff_t ldb = nb < NR ? NR : J->ldb;
  int ib_end = (g + 1) * J->gi < J->nbi ? (g + 1) * J->gi : J->nbi;
  for (int ib = g * J->gi; ib < ib_end; ib++) {
    int i0 = ib * MR, mr = J->M - i0 < MR ? J->M - i0 : MR;
    const float *a[MR];
    for (int i = 0; i < MR; i++) a[i] = J->A + (ptrdiff_t)(i0 + (i < mr ? i : mr - 1)) * J->sai;
    dk_tile(J, a, B, ldb, i0, mr, j0, nb);
  }
}

/* A packed job (a dW): one row tile across a group of panels, so that D is read and
 * written along its rows. Down a panel's column of tiles instead, each tile's 8 rows lie
 * 4 KB apart (MinAtar's 1024 inputs), in one cache set and with no stream for the
 * prefetcher: that order ran MinAtar's dW at sgemm's speed (117-134 against 112-128 us),
 * this one in 99-106. */
static void dk_row_task(void *ctx, int task, int thread) {
  (void)thread;
  const dk_job *J = ctx;
  int ib = task % J->nbi, g = task / J->nbi;
  int i0 = ib * MR, mr = J->M - i0 < MR ? J->M - i0 : MR;
  const float *a[MR];
  for (int i = 0; i < MR; i++) a[i] = J->A + (ptrdiff_t)(i0 + (i < mr ? i : mr - 1)) * J->sai;
  int jb_end = (g + 1) * J->gi < J->nbj ? (g + 1) * J->gi : J->nbj;
  for (int jb = g * J->gi; jb < jb_end; jb++) {
    int j0 = jb * NR, nb = J->N - j0 < NR ? J->N - j0 : NR;
    const float *B = J->tail + (ptrdiff_t)jb * J->L * NR;
    dk_tile(J, a, B, NR, i0, mr, j0, nb);
  }
}

/* False (nothing done) when the scratch for a partial panel cannot be had. */
static bool dk_run(dk_job *J) {
  J->nbj = (J->N + NR - 1) / NR;
  int nb = J->N - (J->nbj - 1) * NR;
  if (J->pack) {
    float *P = scratch(1, (size_t)J->nbj * J->L * NR);
    if (!P) return false;
    for (int l = 0; l < J->L; l++) {
      const float *b = J->B + l * J->ldb;
      for (int jb = 0; jb < J->nbj; jb++) {
        float *d = P + ((size_t)jb * J->L + l) * NR;
        int w = jb < J->nbj - 1 ? NR : nb;
        memcpy(d, b + jb * NR, (size_t)w * sizeof(float));
        if (w < NR) memset(d + w, 0, (size_t)(NR - w) * sizeof(float));
      }
    }
    J->tail = P;
  } else if (nb < NR) {
    /* The last panel's columns, zero-padded to the kernel's width so that it reads no
     * further; copied once here, read by every task of that panel. */
    float *P = scratch(1, (size_t)J->L * NR);
    if (!P) return false;
    const float *B = J->B + (size_t)(J->nbj - 1) * NR;
    for (int l = 0; l < J->L; l++) {
      memcpy(P + (size_t)l * NR, B + l * J->ldb, (size_t)nb * sizeof(float));
      memset(P + (size_t)l * NR + nb, 0, (size_t)(NR - nb) * sizeof(float));
    }
    J->tail = P;
  }
  J->nbi = (J->M + MR - 1) / MR;
  /* Enough tasks for every thread to have a few, in row groups when panels are few. */
  int T = nn__cpu_threads(), want = 4 * T, ng = 1;
  if (J->pack) { /* the same in panel groups when row tiles are few */
    if (T > 1 && J->nbi < want) ng = (want + J->nbi - 1) / J->nbi;
    if (ng > J->nbj) ng = J->nbj;
    J->gi = (J->nbj + ng - 1) / ng;
    ng = (J->nbj + J->gi - 1) / J->gi;
    nn__parallel_for(J->nbi * ng, dk_row_task, J);
    return true;
  }
  if (T > 1 && J->nbj < want) ng = (want + J->nbj - 1) / J->nbj;
  if (ng > J->nbi) ng = J->nbi;
  J->gi = (J->nbi + ng - 1) / ng;
  ng = (J->nbi + J->gi - 1) / J->gi;
  nn__parallel_for(J->nbj * ng, dk_task, J);
  return true;
}

/* dst (C, ldd) = src (R, C)^T, columns R..ldd of dst zeroed. In 16x16 blocks, src read
 * along its rows: read down a column, rows 4 KB apart (MinAtar's 1024 features) all fall
 * in one cache set, which thrashed (a third of the forward went there). A whole block is
 * four 8x8 transposes in registers (the scalar copy was 5% of MinAtar's step). */
__attribute__((target("avx2"))) static void transpose(const float *restrict src, int R, int C,
                                                      float *restrict dst, int ldd) {
  for (int c0 = 0; c0 < C; c0 += 16) {
    int c1 = c0 + 16 < C ? c0 + 16 : C;
    for (int r0 = 0; r0 < R; r0 += 16) {
      int r1 = r0 + 16 < R ? r0 + 16 : R;
      if (r1 - r0 == 16 && c1 - c0 == 16) { /* four 8x8 blocks in registers */
        for (int rb = r0; rb < r1; rb += 8) {
          const float *row[8];
          for (int i = 0; i < 8; i++) row[i] = src + (size_t)(rb + i) * C;
          for (int cb = c0; cb < c1; cb += 8) nn__tr8x8(row, cb, dst + (size_t)cb * ldd + rb, ldd);
        }
        continue;
      }
      for (int r = r0; r < r1; r++) {
        const float *q = src + (size_t)r * C;
        for (int c = c0; c < c1; c++) dst[(size_t)c * ldd + r] = q[c];
      }
    }
    for (int c = c0; c < c1; c++)
      for (int r = R; r < ldd; r++) dst[(size_t)c * ldd + r] = 0.0f;
  }
}

/* ---- the dense layer's products ------------------------------------------------------ */

/* The kernels pay where the weights are what costs: a layer of 32K weights or more (below,
 * OpenBLAS's packing is cheap and its kernels were 5-8% faster over the DQN MLP's training
 * step), every side of the product of some size; a batch of one is a matrix-vector product
 * (nn__sgemm's sgemv). */
static bool dk_ok(int M, int N, int L, int in, int out) {
  /* Past 1024 outputs the forward's y^T tiles land 32 bytes per row across a wide y, and
   * dx's last partial panel copies out x 32 floats: DCGAN's 100->6272 ran at half
   * sgemm's rate. */
  return nn__conv_path_get() == NN__CONV_AVX512 && (double)in * out >= 32768.0 && out <= 1024 &&
         M >= 8 && N >= 16 && L >= 16;
}

/* ---- AVX2: 6x16 tiles --------------------------------------------------------------
 * For a layer under 32K weights (the DQN MLP's 4x64, 64x64, 64x2) at a batch of hundreds,
 * OpenBLAS's cost is its packing of both operands and, around it, nn's memset of y and a
 * bias/ReLU pass: 4->64 ran at 16 GFLOP/s, 64->64 at 68 (forward, b256, one thread). All
 * three products read row-major operands in the order the kernel wants them:
 *
 *   forward  y  (B, out) = x W^T    A = x's rows, B = W^T (in, out), the one copy (small)
 *   dx       dx (B, in)  = dy W     A = dy's rows, B = W's rows as they lie
 *   dW       dW (out, in) += dy^T x A = dy's columns, B = x's rows as they lie
 *            (or dW^T (in, out) += x^T dy, A = x's columns, B = dy's rows, when that
 *            wastes less of the tiles: the 4-input first layer)
 *
 * Past 32K weights at a batch up to 64, only the forward, as y^T = W x^T with x^T packed
 * (the AVX-512 kernel's form): MinAtar's 1024->128 at b32 0.124 -> 0.103 ms, Nature-DQN's
 * 3136->512 1.47-1.59 -> 1.21-1.24 ms (OpenBLAS packs all of W on every call). Its dx in
 * either form and its dW were slower than sgemm here (dW's B rows, x's, 4 KB apart at 1024
 * features fall in one cache set: 5x slower).
 *
 * A tile is 6 rows of A broadcast against two 8-float vectors of a B row, 12 accumulators;
 * the bias, the fused ReLU, the add into dx or dW and a partial last panel (masked loads and
 * stores) are applied from the registers. */

#define SK_MR 6
#define SK_NR 16

/* One tile: C (mr, nb) of rows i0.., columns j0.., epilogue included. */
__attribute__((target("avx2,fma"))) static void sk_tile(const dk_job *J, int i0, int j0) {
  int mr = J->M - i0 < SK_MR ? J->M - i0 : SK_MR, nb = J->N - j0 < SK_NR ? J->N - j0 : SK_NR;
  const float *a[SK_MR];
  for (int i = 0; i < SK_MR; i++) a[i] = J->A + (ptrdiff_t)(i0 + (i < mr ? i : mr - 1)) * J->sai;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb), lane);
  const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb - 8), lane);
  /* Twelve named accumulators: in an array indexed by the epilogue's row loop, gcc kept
   * them on the stack (a store per FMA; half the speed). */
  const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const float *Bp = J->B + j0;
  const ptrdiff_t sal = J->sal, ldb = J->ldb;
#define SK_ROW(i)                              \
  do {                                         \
    __m256 s = _mm256_broadcast_ss(a##i + o);  \
    c##i##0 = _mm256_fmadd_ps(s, b0, c##i##0); \
    c##i##1 = _mm256_fmadd_ps(s, b1, c##i##1); \
  } while (0)
#define SK_STEP \
  SK_ROW(0);    \
  SK_ROW(1);    \
  SK_ROW(2);    \
  SK_ROW(3);    \
  SK_ROW(4);    \
  SK_ROW(5)
  if (nb == SK_NR) {
    for (ptrdiff_t l = 0, o = 0; l < J->L; l++, o += sal, Bp += ldb) {
      __m256 b0 = _mm256_loadu_ps(Bp), b1 = _mm256_loadu_ps(Bp + 8);
      SK_STEP;
    }
  } else { /* masked: the lanes past N are neither read nor written */
    for (ptrdiff_t l = 0, o = 0; l < J->L; l++, o += sal, Bp += ldb) {
      __m256 b0 = _mm256_maskload_ps(Bp, m0), b1 = _mm256_maskload_ps(Bp + 8, m1);
      SK_STEP;
    }
  }
  const __m256 c[SK_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                              {c30, c31}, {c40, c41}, {c50, c51}};
#undef SK_ROW
#undef SK_STEP
  if (J->tr) { /* transposed tiles (y^T, dW^T), written down D's columns */
    float T[SK_MR][SK_NR];
    for (int i = 0; i < mr; i++)
      _mm256_storeu_ps(T[i], c[i][0]), _mm256_storeu_ps(T[i] + 8, c[i][1]);
    for (int i = 0; i < mr; i++) {
      float bi = J->bias ? J->bias[i0 + i] : 0.0f;
      for (int j = 0; j < nb; j++) {
        float *d = J->D + (i0 + i) * J->rs + (j0 + j) * J->cs, v = T[i][j] + bi;
        if (J->relu) v = v > 0 ? v : 0.0f;
        *d = J->acc ? *d + v : v;
      }
    }
    return;
  }
  __m256 b0 = _mm256_setzero_ps(), b1 = b0;
  if (J->bias)
    b0 = _mm256_maskload_ps(J->bias + j0, m0), b1 = _mm256_maskload_ps(J->bias + j0 + 8, m1);
  for (int i = 0; i < mr; i++) {
    float *d = J->D + (ptrdiff_t)(i0 + i) * J->rs + j0;
    __m256 v0 = _mm256_add_ps(c[i][0], b0), v1 = _mm256_add_ps(c[i][1], b1);
    if (J->relu) /* max(v, 0) is v > 0 ? v : 0, as act_forward's ReLU (NaN gives 0) */
      v0 = _mm256_max_ps(v0, _mm256_setzero_ps()), v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
    if (nb == SK_NR) {
      if (J->acc)
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(d)), v1 = _mm256_add_ps(v1, _mm256_loadu_ps(d + 8));
      _mm256_storeu_ps(d, v0), _mm256_storeu_ps(d + 8, v1);
    } else {
      if (J->acc)
        v0 = _mm256_add_ps(v0, _mm256_maskload_ps(d, m0)),
        v1 = _mm256_add_ps(v1, _mm256_maskload_ps(d + 8, m1));
      _mm256_maskstore_ps(d, m0, v0), _mm256_maskstore_ps(d + 8, m1, v1);
    }
  }
}

/* One column panel and a group of row tiles: the panel's B rows stay in L1 across them. */
static void sk_task(void *ctx, int task, int thread) {
  (void)thread;
  const dk_job *J = ctx;
  int jb = task % J->nbj, g = task / J->nbj;
  int ib_end = (g + 1) * J->gi < J->nbi ? (g + 1) * J->gi : J->nbi;
  for (int ib = g * J->gi; ib < ib_end; ib++) sk_tile(J, ib * SK_MR, jb * SK_NR);
}

static void sk_run(dk_job *J) {
  J->nbj = (J->N + SK_NR - 1) / SK_NR;
  J->nbi = (J->M + SK_MR - 1) / SK_MR;
  /* On the threads, a task per panel, or more row groups when panels are few; a product
   * under 2^18 multiply-adds stays on the calling thread (at a batch of 16 through the MLP's
   * 64x64 layer, the pool's hand-off cost more than half the product). */
  int T = nn__cpu_threads(), ng = 1;
  if (T == 1 || (double)J->M * J->N * J->L < 262144.0) {
    J->gi = J->nbi; /* one row group */
    for (int t = 0; t < J->nbj; t++) sk_task(J, t, 0);
    return;
  }
  if (J->nbj < 4 * T) ng = (4 * T + J->nbj - 1) / J->nbj;
  if (ng > J->nbi) ng = J->nbi;
  J->gi = (J->nbi + ng - 1) / ng;
  ng = (J->nbi + J->gi - 1) / J->gi;
  nn__parallel_for(J->nbj * ng, sk_task, J);
}

/* Tiles computed for an (M, N) product: the padding of the last row tile and panel counts. */
static double sk_cells(int M, int N) {
  return (double)((M + SK_MR - 1) / SK_MR * SK_MR) * ((N + SK_NR - 1) / SK_NR * SK_NR);
}

static bool sk_ok(int B, int in, int out) {
  return nn__conv_path_get() == NN__CONV_AVX2 && (double)in * out < 32768.0 && B >= 2;
}

/* Layers from 32K weights: the AVX-512 kernels' shapes, on AVX2. */
static bool sk_big_ok(int B, int in, int out) {
  return nn__conv_path_get() == NN__CONV_AVX2 && (double)in * out >= 32768.0 && B >= 8 &&
         B <= 64 && in <= 4096 && out <= 1024;
}

/* W^T (in, out) into scratch: in*out floats, under 32K. */
static float *sk_wt(const float *w, int in, int out) {
  float *P = scratch(0, (size_t)in * out);
  if (!P) return NULL;
  /* In 8x8 register blocks: the scalar copy's strided stores were a fifth of a b16 act and
   * their speed swung by a third with where the buffer fell against W (4K aliasing). */
  transpose(w, out, in, P, out);
  return P;
}

bool nn__densek_can(int ph, int p, int B, int in, int out) {
  if (B < 1 || in < 1 || out < 1) return false;
  nn__conv_path isa = nn__conv_path_get();
  if (isa == NN__CONV_AVX2) return p == NN__KP_TILES || (p == NN__KP_WTILES && ph == NN__PH_FWD);
  /* AVX-512 has no W^T form */
  if (isa == NN__CONV_AVX512) return p == NN__KP_TILES;
  return false;
}

/* dW += dy^T x: on the 6x16 tiles (AVX2) in the orientation that wastes less of them; on
 * the 8x32 ones (AVX-512) as it lies, x packed in panels and dW walked along its rows */
bool nn__densek_dw(int p, const float *dy, const float *x, float *dw, int B, int in, int out) {
  if (p == NN__KP_RULES ? !sk_ok(B, in, out) : !nn__densek_can(NN__PH_DW, p, B, in, out))
    return false;
  dk_job J = {.M = out, .N = in, .L = B, .A = dy, .sai = 1, .sal = out, .B = x, .ldb = in, .D = dw,
              .rs = in, .cs = 1, .acc = true};
  if (nn__conv_path_get() != NN__CONV_AVX2) {
    J.pack = true;
    return dk_run(&J);
  }
  if (sk_cells(in, out) < sk_cells(out, in)) /* dW^T = x^T dy */
    J = (dk_job){.M = in,
                 .N = out,
                 .L = B,
                 .A = x,
                 .sai = 1,
                 .sal = in,
                 .B = dy,
                 .ldb = out,
                 .D = dw,
                 .rs = 1,
                 .cs = in,
                 .tr = true,
                 .acc = true};
  sk_run(&J);
  return true;
}

/* y = x W^T on the 6x16 tiles with W^T (in, out) packed: the small layers' form */
static bool fwd_wt(const float *x, const float *w, const float *b, float *y, int B, int in, int out,
                   bool relu) {
  float *P = sk_wt(w, in, out);
  if (!P) return false;
  dk_job J = {.M = B,
              .N = out,
              .L = in,
              .A = x,
              .sai = in,
              .sal = 1,
              .B = P,
              .ldb = out,
              .D = y,
              .rs = out,
              .cs = 1,
              .bias = b,
              .relu = relu};
  sk_run(&J);
  return true;
}

/* y^T = W x^T with x^T packed and W's rows read in place: the 6x16 tiles (AVX2) or the
 * 8x32 ones (AVX-512) */
static bool fwd_xt(const float *x, const float *w, const float *b, float *y, int B, int in, int out,
                   bool relu) {
  const bool avx2 = nn__conv_path_get() == NN__CONV_AVX2;
  /* x^T (in, B); on AVX-512 B rounded up to the panel width: the 8x32 tiles read no
   * further */
  const int ld = avx2 ? B : (B + NR - 1) / NR * NR;
  float *P = scratch(0, (size_t)in * ld);
  if (!P) return false;
  transpose(x, B, in, P, ld);
  dk_job J = {.M = out,
              .N = B,
              .L = in,
              .A = w,
              .sai = in,
              .sal = 1,
              .B = P,
              .ldb = ld,
              .D = y,
              .rs = 1,
              .cs = out,
              .tr = true,
              .bias = b,
              .relu = relu};
  if (!avx2) return dk_run(&J);
  sk_run(&J);
  return true;
}

bool nn__densek_forward(int p, const float *x, const float *w, const float *b, float *y, int B,
                        int in, int out, bool relu) {
  if (p != NN__KP_RULES) {
    if (!nn__densek_can(NN__PH_FWD, p, B, in, out)) return false;
    return p == NN__KP_WTILES ? fwd_wt(x, w, b, y, B, in, out, relu)
                              : fwd_xt(x, w, b, y, B, in, out, relu);
  }
  /* Under 8 outputs most of each tile would be padding: sgemm runs those. */
  if (sk_ok(B, in, out) && out >= 8) return fwd_wt(x, w, b, y, B, in, out, relu);
  if (sk_big_ok(B, in, out) && B <= out) /* y^T = W x^T, as the AVX-512 kernel */
    return fwd_xt(x, w, b, y, B, in, out, relu);
  /* y^T (out, B) = W x^T, W's rows read in place and x^T packed (in, B rounded up to the
   * panel width): for a batch up to the layer's width, where the pack is the small copy.
   * Past 2048 features a tile's eight W rows stream from memory without the prefetch
   * that OpenBLAS's contiguous pack gets (Nature-DQN's 3136: sgemm was faster). */
  if (B < 2 || B > out || in > 2048 || !dk_ok(out, B, in, in, out)) return false;
  return fwd_xt(x, w, b, y, B, in, out, relu);
}

bool nn__densek_dx(int p, const float *dy, const float *w, float *dx, bool acc, int B, int in,
                   int out) {
  dk_job J = {.M = B,
              .N = in,
              .L = out,
              .A = dy,
              .sai = out,
              .sal = 1,
              .B = w,
              .ldb = in,
              .D = dx,
              .rs = in,
              .cs = 1,
              .acc = acc};
  if (p != NN__KP_RULES) {
    if (!nn__densek_can(NN__PH_DX, p, B, in, out)) return false;
    if (nn__conv_path_get() == NN__CONV_AVX2) {
      sk_run(&J);
      return true;
    }
    return dk_run(&J);
  }
  if (sk_ok(B, in, out)) {
    sk_run(&J);
    return true;
  }
  /* A panel is 128 bytes of each of W's rows: rows far apart stream without prefetch, as
   * in the forward. */
  if (B < 2 || in > 2048 || !dk_ok(B, in, out, in, out)) return false;
  return dk_run(&J);
}

#else /* no AVX-512 kernel to run: nn__sgemm does every product */

bool nn__densek_can(int ph, int p, int B, int in, int out) {
  (void)ph, (void)p, (void)B, (void)in, (void)out;
  return false;
}

bool nn__densek_forward(int p, const float *x, const float *w, const float *b, float *y, int B,
                        int in, int out, bool relu) {
  (void)p, (void)x, (void)w, (void)b, (void)y, (void)B, (void)in, (void)out, (void)relu;
  return false;
}

bool nn__densek_dx(int p, const float *dy, const float *w, float *dx, bool acc, int B, int in,
                   int out) {
  (void)p, (void)dy, (void)w, (void)dx, (void)acc, (void)B, (void)in, (void)out;
  return false;
}

bool nn__densek_dw(int p, const float *dy, const float *x, float *dw, int B, int in, int out) {
  (void)p, (void)dy, (void)x, (void)dw, (void)B, (void)in, (void)out;
  return false;
}

#endif
