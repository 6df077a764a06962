/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/gemm.c — matrix products for the CPU layers: OpenBLAS's cblas_sgemm for
 * products big enough that its call overhead (a few hundred ns) pays, on one thread
 * or in blocks over nn's pool; nn's own loops for the small ones (a greedy action at
 * batch 1 is a few thousand multiply-adds) and for builds without OpenBLAS.
 */
#include <string.h>
#include <unistd.h>

#include "nn/cpu/cpu.h"

#ifdef SHOAL_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* Below this many multiply-adds nn's loops beat the BLAS call (measured with the
 * MLP act benchmark: OpenBLAS's fixed cost is ~0.3-1 us per call). */
#define NN__SMALL_GEMM 20000.0

static int g_threads = 1; /* small nets run fastest on one thread */

/* OpenBLAS runs on the calling thread only: with threads, nn__sgemm splits a big
 * product over nn's own pool (nn/cpu/pool.c). Two pools on the same cores fought:
 * OpenBLAS's workers spin for ~2^28 cycles after each call, taking the core from nn's
 * conv and optimizer tasks (Nature-DQN at 2 threads: 30 steps/s with both pools, 37
 * with OpenBLAS's workers asleep). */
static void blas_one_thread(void) {
#ifdef SHOAL_HAVE_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

void nn_set_threads(int n) {
  if (n <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > 0 ? (int)c : 1;
  }
  g_threads = n;
  blas_one_thread();
}

void nn__cpu_apply_threads(void) { blas_one_thread(); }

int nn__cpu_threads(void) { return g_threads; }

/* C (M,N) = alpha op(A) op(B) + beta C, row-major. Loop orders keep the innermost loop
 * running along contiguous memory (vectorisable) except for A·B^T, which is rows of
 * dot products summed in 8 lanes. Compiled per ISA (NN__CLONES: the same operations in
 * the same order in each): the MLP's greedy action at batch 16 +10% on AVX-512. A product
 * with a few terms (K <= 8) past NN__SMALL_GEMM stays on OpenBLAS: routed here it was
 * slower on the MLP's training step. */
NN__CLONES static void gemm_loops(bool ta, bool tb, int M, int N, int K, float alpha,
                                  const float *A, int lda, const float *B, int ldb, float beta,
                                  float *C, int ldc) {
  for (int i = 0; i < M; i++) {
    float *c = C + (size_t)i * ldc;
    if (beta == 0.0f)
      memset(c, 0, (size_t)N * sizeof(float));
    else if (beta != 1.0f)
      for (int j = 0; j < N; j++) c[j] *= beta;
  }
  /* Short rows of B^T (an MLP's first layer: 4 inputs) would leave the 8-lane dot products
   * below to their scalar tail: B is copied transposed (K*N floats) and run as A·B. */
  float bt[4096];
  if (!ta && tb && K < 16 && M > 1 && (size_t)K * N <= 4096) {
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++) bt[(size_t)k * N + j] = B[(size_t)j * ldb + k];
    B = bt, ldb = N, tb = false;
  }
  if (!ta && !tb) {
    for (int i = 0; i < M; i++) {
      float *c = C + (size_t)i * ldc;
      const float *a = A + (size_t)i * lda;
      for (int k = 0; k < K; k++) {
        float s = alpha * a[k];
        const float *b = B + (size_t)k * ldb;
        for (int j = 0; j < N; j++) c[j] += s * b[j];
      }
    }
  } else if (!ta && tb) {
    for (int i = 0; i < M; i++) {
      float *c = C + (size_t)i * ldc;
      const float *a = A + (size_t)i * lda;
      for (int j = 0; j < N; j++) {
        const float *b = B + (size_t)j * ldb;
        float acc[8] = {0};
        int k = 0;
        for (; k + 8 <= K; k += 8)
          for (int l = 0; l < 8; l++) acc[l] += a[k + l] * b[k + l];
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; k < K; k++) s += a[k] * b[k];
        c[j] += alpha * s;
      }
    }
  } else if (ta && !tb) {
    for (int k = 0; k < K; k++) {
      const float *a = A + (size_t)k * lda;
      const float *b = B + (size_t)k * ldb;
      for (int i = 0; i < M; i++) {
        float s = alpha * a[i];
        float *c = C + (size_t)i * ldc;
        for (int j = 0; j < N; j++) c[j] += s * b[j];
      }
    }
  } else {
    for (int i = 0; i < M; i++) {
      float *c = C + (size_t)i * ldc;
      for (int j = 0; j < N; j++) {
        float s = 0;
        for (int k = 0; k < K; k++) s += A[(size_t)k * lda + i] * B[(size_t)j * ldb + k];
        c[j] += alpha * s;
      }
    }
  }
}

#ifdef SHOAL_HAVE_OPENBLAS
/* cblas_sgemm, with C = 0 done here: OpenBLAS's beta pass (sgemm_beta) over C cost 16% of
 * the DQN MLP's training step (its products are 256x64), where a memset and beta = 1
 * (which OpenBLAS skips) cost almost nothing. */
static void blas_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
  if (beta == 0.0f) {
    if (ldc == N)
      memset(C, 0, (size_t)M * N * sizeof(float));
    else
      for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* One product split into row (by_m) or column blocks of C, each an OpenBLAS call on one
 * pool thread: the same sums per element as one call (a block only narrows M or N). */
typedef struct gemm_split {
  bool ta, tb, by_m;
  int M, N, K, lda, ldb, ldc, step;
  float alpha, beta;
  const float *A, *B;
  float *C;
} gemm_split;

static void gemm_part(void *vc, int task, int thread) {
  const gemm_split *g = vc;
  (void)thread;
  int lo = task * g->step, dim = g->by_m ? g->M : g->N;
  int n = dim - lo < g->step ? dim - lo : g->step;
  if (n <= 0) return;
  const float *A = g->A, *B = g->B;
  float *C = g->C;
  int M = g->M, N = g->N;
  if (g->by_m) { /* rows lo.. of op(A) and of C */
    A += g->ta ? (size_t)lo : (size_t)lo * g->lda;
    C += (size_t)lo * g->ldc;
    M = n;
  } else { /* columns lo.. of op(B) and of C */
    B += g->tb ? (size_t)lo * g->ldb : (size_t)lo;
    C += lo;
    N = n;
  }
  blas_sgemm(g->ta, g->tb, M, N, g->K, g->alpha, A, g->lda, B, g->ldb, g->beta, C, g->ldc);
}

/* Past this many multiply-adds a product is split over the threads (a block of ~2^18
 * still runs near OpenBLAS's full rate on one core). */
#define NN__SPLIT_GEMM 524288.0
#endif

void nn__sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    gemm_loops(ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#ifdef SHOAL_HAVE_OPENBLAS
  /* A single row or column is a matrix-vector product: sgemv streams the matrix once,
   * where sgemm would pack it first (a batch-1 action through a 3136x512 layer). */
  if (M == 1 && (double)N * K > NN__SMALL_GEMM) {
    /* c (1,N) = alpha a op(B): c^T = alpha op(B)^T a^T; a's elements are lda apart when A is
     * stored transposed (K,1). */
    cblas_sgemv(CblasRowMajor, tb ? CblasNoTrans : CblasTrans, tb ? N : K, tb ? K : N, alpha, B,
                ldb, A, ta ? lda : 1, beta, C, 1);
    return;
  }
  if (N == 1 && (double)M * K > NN__SMALL_GEMM) {
    /* c (M,1) = alpha op(A) b, b's elements ldb apart unless B is stored transposed (1,K). */
    cblas_sgemv(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, ta ? K : M, ta ? M : K, alpha, A,
                lda, B, tb ? 1 : ldb, beta, C, ldc);
    return;
  }
  int T = g_threads < nn__pool_max_threads() ? g_threads : nn__pool_max_threads();
  if (T > 1 && (double)M * N * K >= NN__SPLIT_GEMM && (M >= 32 * T || N >= 32 * T)) {
    /* Along the longer side, in blocks that are whole 16-float vectors. */
    gemm_split g = {ta, tb, M >= N, M, N, K, lda, ldb, ldc, 0, alpha, beta, A, B, C};
    int dim = g.by_m ? M : N;
    g.step = ((dim + T - 1) / T + 15) / 16 * 16;
    nn__parallel_for((dim + g.step - 1) / g.step, gemm_part, &g);
    return;
  }
  if ((double)M * N * K > NN__SMALL_GEMM) {
    blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  gemm_loops(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void nn__put(float *y, const float *x, size_t n, bool accumulate) {
  if (accumulate)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
  else
    memcpy(y, x, n * sizeof(float));
}
