/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/wino.c — 3x3 stride-1 conv2d by Winograd F(2x2, 3x3): the forward and the
 * input gradient (dW stays on nn/cpu/convk.c's packed implicit GEMM).
 *
 * A 2x2 output tile from a 4x4 input patch d and a 3x3 filter g is
 *   Y = A^T [ (G g G^T) ⊙ (B^T d B) ] A
 * 16 multiplies where the direct sum takes 36. Over channels the ⊙ becomes 16 GEMMs,
 * one per position ξ of the 4x4 transformed tile:
 *   M^T[ξ] (tiles x C_out) = V^T[ξ] (tiles x C_in) U^T[ξ] (C_in x C_out)
 * with V = B^T d B per (tile, input channel) and U = G g G^T per (output, input channel).
 *
 * The input is first laid out channels-last and zero-padded (xh: rows, columns,
 * channels), so both transforms are vector loops over channels with no bounds tests.
 * V^T[ξ] is written row-major (a tile's channels contiguous) and read by micro-kernels
 * that broadcast from rows lda apart; U^T[ξ] is packed once per call into NR-wide panels
 * of output channels. A task is one block of tiles (any samples): it transforms their
 * patches, runs the 16 GEMMs into M^T, and writes each tile's 2x2 outputs (plus bias and
 * a fused ReLU, or added into dx), so V and M^T stay in cache.
 *
 * The input gradient of a stride-1 conv is the conv of dy, padded by 2 - pad, with each
 * filter turned 180 degrees and input and output channels swapped: the same routine.
 *
 * Error: F(2x2, 3x3)'s transforms have entries 0, ±1 and ±1/2, so the result differs from
 * the direct sum by a few float roundings (the parity tests hold it to 1e-4 relative).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nn/cpu/cpu.h"

#define MR_MAX 8
#define NR_MAX 32
#define TT_MAX 32 /* tiles per task */
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

/* ---- when it runs ------------------------------------------------------------------- */

static int g_mode = -1; /* -1: where it pays, 0: never, 1: every layer it can run */
static pthread_once_t g_mode_once = PTHREAD_ONCE_INIT;

static void mode_init(void) {
  const char *e = getenv("SHOAL_NN_WINOGRAD");
  if (e && !strcmp(e, "0")) g_mode = 0;
  if (e && !strcmp(e, "1")) g_mode = 1;
}

int nn__wino_mode(int mode) {
  pthread_once(&g_mode_once, mode_init);
  int was = g_mode;
  if (mode >= -1 && mode <= 1) g_mode = mode;
  return was;
}

static bool wino_can(const nn_model *m, const nn__node *n) {
  return n->kind == NN__CONV && n->kh == 3 && n->kw == 3 && n->stride == 1 && n->dil == 1 &&
         n->pad <= 2 && m->nodes[n->in[0]].H + 2 * n->pad >= 3;
}

bool nn__wino_runs(const nn_model *m, const nn__node *n, int B) {
  pthread_once(&g_mode_once, mode_init);
  if (!g_mode || !wino_can(m, n)) return false;
  if (g_mode == 1) return true;
  /* Measured (benchmarks/nn_layers_speed): with few channels the transforms and the
   * tiles' unused outputs cost more than the 2.25x fewer multiply-adds save; with few
   * tiles (an actor's batch of one) the filters' transform, made on every call, does. */
  int C = m->nodes[n->in[0]].C;
  return C >= 16 && n->C >= 16 && (size_t)B * ((n->H + 1) / 2) * ((n->W + 1) / 2) >= 4 * TT_MAX;
}

/* ---- geometry and scratch ------------------------------------------------------------ */

typedef struct wgeo {
  int C, H, W, pad; /* the conv's input (dx: dy, its C_out channels) and padding */
  int Co, Ho, Wo;   /* its output */
  int TH, TW, T;    /* tiles per sample */
  int Hp, Wp;       /* xh per sample: (Hp, Wp, C), zero outside the input */
  size_t xhF;
} wgeo;

static wgeo wgeo_make(int C, int H, int W, int pad, int Co, int Ho, int Wo) {
  wgeo g = {C, H, W, pad, Co, Ho, Wo, (Ho + 1) / 2, (Wo + 1) / 2, 0, 0, 0, 0};
  g.T = g.TH * g.TW;
  g.Hp = 2 * g.TH + 2, g.Wp = 2 * g.TW + 2;
  g.xhF = (size_t)g.Hp * g.Wp * C;
  return g;
}

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }
static size_t round_nr(int c) { return ((size_t)c + NR_MAX - 1) / NR_MAX * NR_MAX; }

/* Scratch floats: xh of the batch, U^T packed, and per thread V^T and M^T of one task
 * (sized for the widest ISA and the pool's most threads) plus a tile's outputs. */
typedef struct wlayout {
  size_t xh, ub, thr, tstride, total;
} wlayout;

static wlayout wlayout_of(const wgeo *g, int max_batch) {
  wlayout L;
  size_t cop = round_nr(g->Co);
  L.xh = 0;
  L.ub = up16((size_t)max_batch * g->xhF);
  L.thr = L.ub + up16(16 * cop * g->C);
  L.tstride = 16 * (up16((size_t)TT_MAX * g->C) + XI_PAD) + 16 * (TT_MAX * cop + XI_PAD) + 4 * cop;
  L.total = L.thr + (size_t)nn__pool_max_threads() * L.tstride;
  return L;
}

static wgeo fwd_geo(const nn_model *m, const nn__node *n) {
  const nn__node *x = &m->nodes[n->in[0]];
  return wgeo_make(x->C, x->H, x->W, n->pad, n->C, n->H, n->W);
}

static wgeo dx_geo(const nn_model *m, const nn__node *n) {
  const nn__node *x = &m->nodes[n->in[0]];
  return wgeo_make(n->C, n->H, n->W, 2 - n->pad, x->C, x->H, x->W);
}

size_t nn__wino_scratch(const nn_model *m, const nn__node *n, int max_batch) {
  if (!wino_can(m, n)) return 0;
  wgeo f = fwd_geo(m, n), d = dx_geo(m, n);
  size_t a = wlayout_of(&f, max_batch).total, b = wlayout_of(&d, max_batch).total;
  return a > b ? a : b;
}

/* ---- transforms ------------------------------------------------------------------------ */

/* Ub[((ξ*ncop + cp)*C + ci)*nr + j] = (G g G^T)[ξ] for output channel cp*nr + j (0 past
 * Co) and input channel ci; g is W[co][ci] (forward) or W[ci][co] turned 180 degrees
 * (dx: this conv's input channels are the layer's outputs). */
static void pack_u(const float *w, int Co, int C, bool flip, int nr, float *Ub) {
  /* Every call (the weights may have changed): float arithmetic and no memset, as the
   * transform in double with a zeroed buffer was a fifth of Nature-DQN's step. */
  int ncop = (Co + nr - 1) / nr;
  size_t xs = (size_t)ncop * C * nr; /* between positions ξ */
  for (int co = 0; co < ncop * nr; co++)
    for (int ci = 0; ci < C; ci++) {
      float *u = Ub + ((size_t)(co / nr) * C + ci) * nr + co % nr;
      if (co >= Co) {
        for (int xi = 0; xi < 16; xi++) u[xi * xs] = 0.0f;
        continue;
      }
      /* the layer's W is (layer C_out, layer C_in, 3, 3) */
      const float *k = flip ? w + ((size_t)ci * Co + co) * 9 : w + ((size_t)co * C + ci) * 9;
      float g[9], t[4][3];
      for (int q = 0; q < 9; q++) g[q] = flip ? k[8 - q] : k[q];
      for (int b = 0; b < 3; b++) { /* t = G g */
        t[0][b] = g[b];
        t[1][b] = 0.5f * (g[b] + g[3 + b] + g[6 + b]);
        t[2][b] = 0.5f * (g[b] - g[3 + b] + g[6 + b]);
        t[3][b] = g[6 + b];
      }
      for (int a = 0; a < 4; a++) { /* u = t G^T */
        float *r = u + (size_t)a * 4 * xs;
        r[0] = t[a][0];
        r[xs] = 0.5f * (t[a][0] + t[a][1] + t[a][2]);
        r[2 * xs] = 0.5f * (t[a][0] - t[a][1] + t[a][2]);
        r[3 * xs] = t[a][2];
      }
    }
}

/* One sample x (C, H, W) -> xh (Hp, Wp, C), zero where the padded patch lies outside x. */
static void to_xh(const wgeo *g, const float *x, float *xh) {
  memset(xh, 0, g->xhF * sizeof(float));
  int C = g->C;
  for (int c = 0; c < C; c++)
    for (int ih = 0; ih < g->H && ih + g->pad < g->Hp; ih++) {
      const float *r = x + ((size_t)c * g->H + ih) * g->W;
      float *d = xh + ((size_t)(ih + g->pad) * g->Wp + g->pad) * C + c;
      int n = g->W < g->Wp - g->pad ? g->W : g->Wp - g->pad;
      for (int iw = 0; iw < n; iw++) d[(size_t)iw * C] = r[iw];
    }
}

/* V^T[ξ][i][*] = (B^T d B)[ξ] over channels, d the 4x4 patch at the tile's corner p (in
 * xh), in 8-channel vectors of the compiler's vector extension (gcc left the plain loop
 * scalar), a scalar tail for the rest. */
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
/* B^T d B for one lane type T: d from rows r0..r3 at columns b*C + c, out to V[ξ*vs + c] */
#define IN_TILE(T, LD, ST)                                                         \
  do {                                                                             \
    T t0[4], t1[4], t2[4], t3[4];                                                  \
    for (int b = 0; b < 4; b++) {                                                  \
      T d0 = LD(r0 + b * C + c), d1 = LD(r1 + b * C + c), d2 = LD(r2 + b * C + c), \
        d3 = LD(r3 + b * C + c);                                                   \
      t0[b] = d0 - d2, t1[b] = d1 + d2, t2[b] = d2 - d1, t3[b] = d1 - d3;          \
    }                                                                              \
    const T *tr[4] = {t0, t1, t2, t3};                                             \
    for (int a = 0; a < 4; a++) {                                                  \
      const T *t = tr[a];                                                          \
      float *v = V + (size_t)a * 4 * vs + c;                                       \
      ST(v, t[0] - t[2]);                                                          \
      ST(v + vs, t[1] + t[2]);                                                     \
      ST(v + 2 * vs, t[2] - t[1]);                                                 \
      ST(v + 3 * vs, t[1] - t[3]);                                                 \
    }                                                                              \
  } while (0)
#define F_LD(p) (*(p))
#define F_ST(p, v) (*(p) = (v))

NN__CLONES static void in_tile(const float *restrict p, int C, int Wp, float *restrict V,
                               size_t vs) {
  size_t rs = (size_t)Wp * C;
  const float *r0 = p, *r1 = p + rs, *r2 = p + 2 * rs, *r3 = p + 3 * rs;
  int c = 0;
  for (; c + 8 <= C; c += 8) IN_TILE(wv8, WV8_LD, WV8_ST);
  for (; c < C; c++) IN_TILE(float, F_LD, F_ST);
}

/* The 2x2 outputs of one tile over channels: o[q*cop + co], q = row*2 + column. */
NN__CLONES static void out_tile(const float *restrict M, size_t ms, int Co, float *restrict o,
                                int cop) {
  for (int c = 0; c < Co; c++) {
    float s[2][4];
    for (int b = 0; b < 4; b++) {
      float m0 = M[(size_t)b * ms + c], m1 = M[(size_t)(4 + b) * ms + c];
      float m2 = M[(size_t)(8 + b) * ms + c], m3 = M[(size_t)(12 + b) * ms + c];
      s[0][b] = m0 + m1 + m2, s[1][b] = m1 - m2 - m3;
    }
    for (int a = 0; a < 2; a++) {
      o[(a * 2) * cop + c] = s[a][0] + s[a][1] + s[a][2];
      o[(a * 2 + 1) * cop + c] = s[a][1] - s[a][2] - s[a][3];
    }
  }
}

/* ---- the routine --------------------------------------------------------------------- */

typedef struct wjob {
  const wisa *I;
  wgeo g;
  wlayout L;
  const float *x, *Ub, *bias;
  float *xh, *y, *thr; /* thr: the first thread's V^T, M^T and tile outputs */
  size_t xF, yF;       /* floats per sample of x and y (the nodes' F) */
  int B, NT, Tt, acc, relu;
} wjob;

static void xh_task(void *vc, int s, int th) {
  const wjob *j = vc;
  to_xh(&j->g, j->x + s * j->xF, j->xh + s * j->g.xhF);
}

static void tile_task(void *vc, int task, int th) {
  const wjob *j = vc;
  const wgeo *g = &j->g;
  int mr = j->I->mr, nr = j->I->nr, C = g->C, Tt = j->Tt;
  int cop = (g->Co + nr - 1) / nr * nr, ncop = cop / nr;
  int t0 = task * Tt, cnt = j->NT - t0 < Tt ? j->NT - t0 : Tt;
  float *V = j->thr + (size_t)th * j->L.tstride;
  size_t vs = (size_t)Tt * C + XI_PAD, ms = (size_t)Tt * cop + XI_PAD;
  float *Mt = V + 16 * (up16((size_t)TT_MAX * C) + XI_PAD), *o = Mt + 16 * ms;
  /* the tiles' transformed patches; a short last task's rows past cnt are zero */
  for (int i = 0; i < cnt; i++) {
    int t = t0 + i, s = t / g->T, r = t - s * g->T, th_ = r / g->TW, tw = r - th_ * g->TW;
    const float *p = j->xh + s * g->xhF + ((size_t)(2 * th_) * g->Wp + 2 * tw) * C;
    in_tile(p, C, g->Wp, V + (size_t)i * C, vs);
  }
  int rows = (cnt + mr - 1) / mr * mr;
  for (int xi = 0; xi < 16 && rows > cnt; xi++)
    memset(V + xi * vs + (size_t)cnt * C, 0, (size_t)(rows - cnt) * C * sizeof(float));
  for (int xi = 0; xi < 16; xi++)
    for (int i0 = 0; i0 < rows; i0 += mr)
      for (int cp = 0; cp < ncop; cp++)
        j->I->k(C, V + xi * vs + (size_t)i0 * C, C, j->Ub + ((size_t)xi * ncop + cp) * C * nr,
                Mt + xi * ms + (size_t)i0 * cop + cp * nr, cop);
  size_t P = (size_t)g->Ho * g->Wo;
  for (int i = 0; i < cnt; i++) {
    int t = t0 + i, s = t / g->T, r = t - s * g->T, th_ = r / g->TW, tw = r - th_ * g->TW;
    out_tile(Mt + (size_t)i * cop, ms, g->Co, o, cop);
    int oh = 2 * th_, ow = 2 * tw;
    float *y = j->y + s * j->yF + (size_t)oh * g->Wo + ow;
    for (int q = 0; q < 4; q++) {
      int dh = q >> 1, dw = q & 1;
      if (oh + dh >= g->Ho || ow + dw >= g->Wo) continue;
      float *yq = y + (size_t)dh * g->Wo + dw;
      const float *oq = o + (size_t)q * cop;
      if (j->acc)
        for (int co = 0; co < g->Co; co++) yq[co * P] += oq[co];
      else if (j->relu)
        for (int co = 0; co < g->Co; co++) {
          float v = oq[co] + (j->bias ? j->bias[co] : 0.0f);
          yq[co * P] = v > 0 ? v : 0.0f;
        }
      else
        for (int co = 0; co < g->Co; co++) yq[co * P] = oq[co] + (j->bias ? j->bias[co] : 0.0f);
    }
  }
}

/* y (or dx) from x through the transformed filters: the shared body of both entry points. */
static void wino_run(wjob *j, nn_model *m, const float *w, bool flip) {
  float *S = m->scratch;
  j->I = &g_wisa[nn__conv_path_get()];
  j->L = wlayout_of(&j->g, m->max_batch);
  j->xh = S + j->L.xh, j->thr = S + j->L.thr;
  float *Ub = S + j->L.ub;
  pack_u(w, j->g.Co, j->g.C, flip, j->I->nr, Ub);
  j->Ub = Ub;
  j->NT = j->B * j->g.T;
  j->Tt = TT_MAX / j->I->mr * j->I->mr;
  nn__parallel_for(j->B, xh_task, j);
  nn__parallel_for((j->NT + j->Tt - 1) / j->Tt, tile_task, j);
}

void nn__wino_forward(nn_model *m, nn__node *n, int B) {
  const nn__node *xn = nn__input(m, n, 0);
  wjob j = {0};
  j.g = fwd_geo(m, n);
  j.B = B;
  j.x = xn->out, j.xF = (size_t)xn->F, j.yF = (size_t)n->F;
  j.relu = n->fuse_act > 0;
  j.y = j.relu ? m->nodes[n->fuse_act].out : n->out;
  j.bias = n->bias ? m->params + n->poff[1] : NULL;
  wino_run(&j, m, m->params + n->poff[0], false);
}

void nn__wino_dx(nn_model *m, nn__node *n, int B, float *dx, bool acc) {
  const nn__node *xn = nn__input(m, n, 0);
  wjob j = {0};
  j.g = dx_geo(m, n);
  j.B = B;
  j.x = n->dout, j.xF = (size_t)n->F, j.yF = (size_t)xn->F;
  j.y = dx, j.acc = acc;
  wino_run(&j, m, m->params + n->poff[0], true);
}
