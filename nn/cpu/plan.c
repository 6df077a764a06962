/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nn/cpu/plan.c — the kernel paths of a conv2d, a conv-transpose2d and a dense layer chosen
 * by timing them, as FFTW's planner chooses its codelets: the first forward and the first
 * backward of a layer at a batch size run each path that can do the work (nn__convk_can,
 * nn__densek_can), keep the fastest, and later calls run it.
 *
 * Why timing and not rules: which path wins depends on the CPU as much as on the shape.
 * The row kernels make MinAtar's conv faster than the packed ones on AMD's AVX2 cores and
 * slower on Intel's AVX-512 ones; Winograd pays on wide layers at big batches only.
 *
 * Every process on a machine should run the same paths: the paths agree only to rounding,
 * and a run's results (a seed's trajectory, an evaluation that replays a snapshot) must not
 * hang on which process timed a layer first. So plans go in a file keyed by the CPU's
 * model (nn__plan_file), read at the first plan and written under an exclusive lock: a
 * process that finds a layer's plan there uses it, one that does not times the layer with
 * the lock held and adds the plan, and the next process reads it. Where there is no file
 * (SHOAL_NN_PLAN_FILE=none, or no writable cache folder), plans live in the process. The
 * key has the layer's shape, the batch and the ISA the kernels run, not the thread count:
 * a result does not change with the threads (convk.c's and densek.c's tasks sum in a fixed
 * order; each of nn__sgemm's outputs is summed by one thread).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/cpu/cpu.h"

static const char *const g_names[NN__KP_N] = {"rules", "gemm", "packed", "direct", "row",
                                              "wino",  "dxd",  "tiles",  "wtiles"};

const char *nn__kpath_name(int p) { return p >= 0 && p < NN__KP_N ? g_names[p] : "-"; }

static int kpath_of(const char *s) {
  for (int p = 0; p < NN__KP_N; p++)
    if (!strcmp(s, g_names[p])) return p;
  return -1;
}

/* ---- settings: SHOAL_NN_PLAN, SHOAL_NN_PLAN_FILE ------------------------------------ */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_measure = true; /* false: SHOAL_NN_PLAN=rules */
static int g_force;           /* SHOAL_NN_PLAN=<path>: that path where it can run */
static char g_file[PATH_MAX]; /* "" when plans stay in the process */
static bool g_verbose;        /* SHOAL_NN_PLAN_VERBOSE=1: each timing on stderr */

/* The CPU's model name, as a file name: "AMD-EPYC-9R14" */
static void cpu_model(char *out, size_t cap) {
  snprintf(out, cap, "unknown-cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) && strncmp(line, "Processor", 9) &&
        strncmp(line, "CPU part", 8))
      continue;
    const char *v = strchr(line, ':');
    if (!v) continue;
    size_t k = 0;
    bool dash = false;
    for (v++; *v && k + 1 < cap; v++) {
      char c = *v;
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '_';
      if (ok)
        out[k++] = c, dash = false;
      else if (k && !dash)
        out[k++] = '-', dash = true;
    }
    while (k && out[k - 1] == '-') k--;
    out[k] = 0;
    if (!k) snprintf(out, cap, "unknown-cpu");
    break;
  }
  fclose(f);
}

static int mkdirs(char *path) { /* path's folders, as mkdir -p; path is restored */
  for (char *p = path + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      int rc = mkdir(path, 0755);
      *p = '/';
      if (rc && errno != EEXIST) return -1;
    }
  return 0;
}

/* A sanitizer's build times its paths apart: its timings say nothing of a normal one's. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PLAN_BUILD "-sanitized"
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PLAN_BUILD "-sanitized"
#endif
#endif
#ifndef PLAN_BUILD
#define PLAN_BUILD ""
#endif

static void init(void) {
  const char *e = getenv("SHOAL_NN_PLAN");
  if (e && *e && strcmp(e, "measure")) {
    int p = kpath_of(e);
    if (p == NN__KP_RULES || !strcmp(e, "0"))
      g_measure = false;
    else if (p > 0)
      g_force = p, g_measure = false;
    else
      fprintf(stderr,
              "nn: SHOAL_NN_PLAN=%s is not measure, rules, gemm, packed, direct, row, wino, "
              "dxd, tiles or wtiles; the paths are timed\n",
              e);
  }
  const char *v = getenv("SHOAL_NN_PLAN_VERBOSE");
  g_verbose = v && *v && *v != '0';
  const char *f = getenv("SHOAL_NN_PLAN_FILE");
  if (f && (!*f || !strcmp(f, "none"))) return;
  char cpu[96];
  cpu_model(cpu, sizeof cpu);
  if (f) {
    snprintf(g_file, sizeof g_file, "%s", f);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
      snprintf(g_file, sizeof g_file, "%s/shoal/nn-plans-%s%s.txt", xdg, cpu, PLAN_BUILD);
    else if (home && *home)
      snprintf(g_file, sizeof g_file, "%s/.cache/shoal/nn-plans-%s%s.txt", home, cpu, PLAN_BUILD);
  }
  if (g_file[0] && mkdirs(g_file)) g_file[0] = 0;
}

bool nn__plan_on(void) {
  pthread_once(&g_once, init);
  if (!g_measure && !g_force) return false;
  /* the older switches force paths of their own: their rules apply, untimed. A forced
   * instruction set (SHOAL_NN_CONV_PATH) is not one: its kernels are timed as any. */
  return nn__row_mode(-1) == 1 && nn__direct_mode(-1) == 1 && nn__wino_mode(99) == -1;
}

int nn__plan_mode(int mode) {
  pthread_once(&g_once, init);
  int was = g_measure ? 1 : 0;
  if (mode == 0 || mode == 1) g_measure = mode == 1;
  return was;
}

const char *nn__plan_file(void) {
  pthread_once(&g_once, init);
  return g_file;
}

/* ---- the process's plans ------------------------------------------------------------ */

typedef struct entry {
  char key[128];
  signed char kp[3];
} entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static entry *g_tab;
static size_t g_n, g_cap;

static entry *find(const char *key) {
  for (size_t i = 0; i < g_n; i++)
    if (!strcmp(g_tab[i].key, key)) return &g_tab[i];
  return NULL;
}

static void add(const char *key, const signed char kp[3]) {
  entry *e = find(key);
  if (!e) {
    if (g_n == g_cap) {
      size_t cap = g_cap ? 2 * g_cap : 64;
      entry *t = realloc(g_tab, cap * sizeof *t);
      if (!t) return; /* out of memory: the layer is timed again next time */
      g_tab = t, g_cap = cap;
    }
    e = &g_tab[g_n++];
    snprintf(e->key, sizeof e->key, "%s", key);
  }
  memcpy(e->kp, kp, 3);
}

/* A line: KEY FWD DW DX (path names, "-" for a product not planned by this key). */
static void read_plans(FILE *f) {
  char line[256], key[128], a[16], b[16], c[16];
  rewind(f);
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || sscanf(line, "%127s %15s %15s %15s", key, a, b, c) != 4) continue;
    signed char kp[3] = {(signed char)kpath_of(a), (signed char)kpath_of(b),
                         (signed char)kpath_of(c)};
    add(key, kp);
  }
}

/* ---- timing ------------------------------------------------------------------------- */

/* What a backward changes besides scratch: dW and db (added into), and dx with the
 * input's "written" flag (set, or added into). */
typedef struct saved {
  nn__node *n;
  float *dw, *db, *dx;
  size_t ndw, ndx;
  float *dw0, *db0, *dx0;
  nn__node *x;
  bool written;
} saved;

static void undo_bwd(saved *s) {
  memcpy(s->dw, s->dw0, s->ndw * sizeof(float));
  if (s->db) memcpy(s->db, s->db0, (size_t)s->n->C * sizeof(float));
  if (s->dx0) memcpy(s->dx, s->dx0, s->ndx * sizeof(float));
  if (s->x) s->x->written = s->written;
}

static int save_bwd(saved *s, nn_model *m, nn__node *n, int B) {
  memset(s, 0, sizeof *s);
  s->n = n;
  nn__node *x = &m->nodes[n->in[0]];
  s->ndw = (size_t)n->C * x->C * n->kh * n->kw;
  s->dw = m->grads + n->poff[0];
  s->db = n->bias ? m->grads + n->poff[1] : NULL;
  s->dw0 = malloc(s->ndw * sizeof(float));
  s->db0 = malloc((size_t)n->C * sizeof(float));
  if (!s->dw0 || !s->db0) return -1;
  memcpy(s->dw0, s->dw, s->ndw * sizeof(float));
  if (s->db) memcpy(s->db0, s->db, (size_t)n->C * sizeof(float));
  if (x->need_grad) {
    s->x = x, s->written = x->written;
    s->dx = x->dout, s->ndx = (size_t)B * x->F;
    if (x->written) { /* added into: what was there must come back */
      if (!(s->dx0 = malloc(s->ndx * sizeof(float)))) return -1;
      memcpy(s->dx0, s->dx, s->ndx * sizeof(float));
    }
  }
  return 0;
}

static void free_saved(saved *s) { free(s->dw0), free(s->db0), free(s->dx0); }

/* Times the candidates of n's forward or backward; the fastest in kp. Each candidate runs
 * once to warm its caches and packing, then the candidates take turns, a call each, for a
 * few rounds (more when calls are short: about 0.2 s in all), and each keeps its fastest
 * call: a burst of load from another process falls on one call of each, not on one
 * candidate's every call. */
static void measure(nn_model *m, nn__node *n, int B, bool bwd, nn__plan_run run,
                    signed char kp[3]) {
  signed char cand[16][3];
  int nc = 0;
  kp[0] = kp[1] = kp[2] = -1;
  saved sv = {0};
  if (!bwd) { /* a conv-transpose's forward is a conv's dx: DXD is one of its paths */
    static const int fw[] = {NN__KP_GEMM, NN__KP_PACKED, NN__KP_DIRECT,
                             NN__KP_ROW,  NN__KP_WINO,   NN__KP_DXD};
    for (size_t i = 0; i < sizeof fw / sizeof *fw; i++)
      if (nn__convk_can(m, n, NN__PH_FWD, fw[i]))
        cand[nc][0] = (signed char)fw[i], cand[nc][1] = cand[nc][2] = -1, nc++;
  } else {
    if (save_bwd(&sv, m, n, B)) { /* no memory to undo tries with: the rules, untimed */
      free_saved(&sv);
      kp[1] = kp[2] = NN__KP_RULES;
      return;
    }
    static const int dws[] = {NN__KP_PACKED, NN__KP_ROW, NN__KP_WINO};
    static const int dxs[] = {NN__KP_PACKED, NN__KP_DXD, NN__KP_WINO};
    cand[nc][0] = -1, cand[nc][1] = cand[nc][2] = NN__KP_GEMM, nc++; /* both on GEMM */
    for (size_t i = 0; i < sizeof dws / sizeof *dws; i++) {
      if (!nn__convk_can(m, n, NN__PH_DW, dws[i])) continue;
      for (size_t k = 0; k < (sv.x ? sizeof dxs / sizeof *dxs : 1); k++) /* no dx: one */
        if (!sv.x || nn__convk_can(m, n, NN__PH_DX, dxs[k]))
          cand[nc][0] = -1, cand[nc][1] = (signed char)dws[i], cand[nc][2] = (signed char)dxs[k],
          nc++;
    }
  }
  const int ph = bwd ? 1 : 0, np = bwd ? 2 : 1; /* the entries of kp this call runs by */
  double best[16], warm = 0;
  for (int r = -1; r < 7; r++) { /* r = -1: the warm-up call each */
    for (int c = 0; c < nc; c++) {
      memcpy(n->kp + ph, cand[c] + ph, (size_t)np);
      double t0 = shoal_now_s();
      run(m, n, B);
      double t = shoal_now_s() - t0;
      if (bwd) undo_bwd(&sv);
      if (r < 0)
        warm += t, best[c] = 1e30;
      else
        best[c] = t < best[c] ? t : best[c];
    }
    if (r >= 1 && (r + 1) * warm >= 0.2) break; /* 2 to 7 rounds, about 0.2 s in all */
  }
  int w = 0;
  for (int c = 1; c < nc; c++) w = best[c] < best[w] ? c : w;
  if (nc) memcpy(kp, cand[w], 3);
  if (g_verbose) {
    fprintf(stderr, "nn plan: %s %s B=%d:", n->name, bwd ? "backward" : "forward", B);
    for (int c = 0; c < nc; c++)
      fprintf(stderr, " %s%s%s %.1f us%s", bwd ? nn__kpath_name(cand[c][1]) : "",
              bwd ? "/" : "", bwd ? nn__kpath_name(cand[c][2]) : nn__kpath_name(cand[c][0]),
              best[c] * 1e6, c == w ? " (kept)" : "");
    fprintf(stderr, "\n");
  }
  if (bwd) free_saved(&sv);
}

/* A dense layer's products are independent: each is timed alone, into a buffer of its own
 * (the layer's outputs and gradients are not touched), as measure() times a conv's. */
static void measure_dense(nn_model *m, nn__node *n, int B, bool bwd, nn__dense_run run,
                          signed char kp[3]) {
  int in = nn__in_F(m, n, 0), out = n->F;
  kp[0] = kp[1] = kp[2] = -1;
  static const char *const what[3] = {"forward", "dW", "dx"};
  for (int ph = bwd ? NN__PH_DW : NN__PH_FWD; ph <= (bwd ? NN__PH_DX : NN__PH_FWD); ph++) {
    kp[ph] = NN__KP_GEMM; /* dx too where this call needs none: a later call may */
    signed char cand[3] = {NN__KP_GEMM};
    int nc = 1;
    if (nn__densek_can(ph, NN__KP_TILES, B, in, out)) cand[nc++] = NN__KP_TILES;
    if (nn__densek_can(ph, NN__KP_WTILES, B, in, out)) cand[nc++] = NN__KP_WTILES;
    if (nc == 1) continue;
    size_t len = ph == NN__PH_FWD  ? (size_t)B * out
                 : ph == NN__PH_DW ? (size_t)out * in
                                   : (size_t)B * in;
    float *o = nn__alloc_floats(len);
    if (!o) continue; /* no memory to time in: sgemm */
    double best[3], warm = 0;
    for (int r = -1; r < 7; r++) { /* r = -1: the warm-up call each */
      for (int c = 0; c < nc; c++) {
        double t0 = shoal_now_s();
        run(m, n, B, ph, cand[c], o);
        double t = shoal_now_s() - t0;
        if (r < 0)
          warm += t, best[c] = 1e30;
        else
          best[c] = t < best[c] ? t : best[c];
      }
      if (r >= 1 && (r + 1) * warm >= 0.2) break; /* 2 to 7 rounds, about 0.2 s in all */
    }
    free(o);
    int w = 0;
    for (int c = 1; c < nc; c++) w = best[c] < best[w] ? c : w;
    kp[ph] = cand[w];
    if (g_verbose) {
      fprintf(stderr, "nn plan: %s %s B=%d:", n->name, what[ph], B);
      for (int c = 0; c < nc; c++)
        fprintf(stderr, " %s %.1f us%s", nn__kpath_name(cand[c]), best[c] * 1e6,
                c == w ? " (kept)" : "");
      fprintf(stderr, "\n");
    }
  }
}

/* ---- the plan of a call ------------------------------------------------------------- */

static void key_of(const nn_model *m, const nn__node *n, int B, bool bwd, char *key, size_t cap) {
  const nn__node *x = &m->nodes[n->in[0]];
  if (n->kind == NN__DENSE) {
    snprintf(key, cap, "dense:%d>%d:B%d:%s:%s", x->F, n->F, B,
             nn__conv_path_name(nn__conv_path_get()), bwd ? "bwd" : "fwd");
    return;
  }
  if (n->kind == NN__CONVT) { /* the output's size too: output padding adds to it */
    snprintf(key, cap, "convt:%dx%dx%d>%dx%dx%d:k%dx%d:s%d:p%d:B%d:%s:%s", x->C, x->H, x->W, n->C,
             n->H, n->W, n->kh, n->kw, n->stride, n->pad, B,
             nn__conv_path_name(nn__conv_path_get()), bwd ? "bwd" : "fwd");
    return;
  }
  snprintf(key, cap, "conv2d:%dx%dx%d>%d:k%dx%d:s%d:p%d:d%d:B%d:%s:%s", x->C, x->H, x->W, n->C,
           n->kh, n->kw, n->stride, n->pad, n->dil, B, nn__conv_path_name(nn__conv_path_get()),
           bwd ? "bwd" : "fwd");
}

/* n's plan at batch B, a new one (nothing chosen: -1) when it has none */
static signed char *node_plan(nn__node *n, int B) {
  for (int i = 0; i < n->n_plans; i++)
    if (n->plans[i].B == B) return n->plans[i].kp;
  int cap = (int)(sizeof n->plans / sizeof n->plans[0]);
  int i = n->n_plans < cap ? n->n_plans++ : B % cap; /* many batch sizes: one is replaced */
  n->plans[i].B = B;
  memset(n->plans[i].kp, -1, 3);
  return n->plans[i].kp;
}

static void apply(nn__node *n, const signed char *kp, bool bwd) {
  if (!bwd) {
    n->kp[NN__PH_FWD] = kp[0] > 0 ? kp[0] : 0;
  } else {
    n->kp[NN__PH_DW] = kp[1] > 0 ? kp[1] : 0;
    n->kp[NN__PH_DX] = kp[2] > 0 ? kp[2] : 0;
  }
}

/* A path named in a file that cannot run this layer (the file edited, or from an older
 * shoal) is timed again rather than trusted. */
static bool dense_usable(const nn_model *m, const nn__node *n, int B, int ph, int p) {
  return p == NN__KP_RULES || p == NN__KP_GEMM ||
         nn__densek_can(ph, p, B, m->nodes[n->in[0]].F, n->F);
}

static bool usable(const nn_model *m, const nn__node *n, int B, const signed char *kp, bool bwd) {
  if (n->kind == NN__DENSE)
    return bwd ? kp[1] >= 0 && kp[2] >= 0 && dense_usable(m, n, B, NN__PH_DW, kp[1]) &&
                     dense_usable(m, n, B, NN__PH_DX, kp[2])
               : kp[0] >= 0 && dense_usable(m, n, B, NN__PH_FWD, kp[0]);
  if (!bwd) return kp[0] == 0 || nn__convk_can(m, n, NN__PH_FWD, kp[0]);
  if (kp[1] < 0) return false;
  if (kp[1] == NN__KP_GEMM) return kp[2] == NN__KP_GEMM || kp[2] < 0;
  return kp[1] == 0 || (nn__convk_can(m, n, NN__PH_DW, kp[1]) &&
                        (kp[2] <= 0 || nn__convk_can(m, n, NN__PH_DX, kp[2])));
}

/* The plan of n's forward or backward at batch B: a conv2d's or conv-transpose2d's
 * (conv_run) or a dense layer's (dense_run), the other NULL. */
static void plan_node(nn_model *m, nn__node *n, int B, bool bwd, nn__plan_run conv_run,
                      nn__dense_run dense_run) {
  pthread_once(&g_once, init);
  signed char *np = node_plan(n, B);
  int ph = bwd ? 1 : 0;
  if (np[ph] >= 0) {
    apply(n, np, bwd);
    return;
  }
  if (g_force) { /* the forced path where it can run; the rules elsewhere */
    signed char kp[3] = {0, 0, 0};
    int f = g_force;
    if (dense_run)
      for (int q = bwd ? NN__PH_DW : NN__PH_FWD; q <= (bwd ? NN__PH_DX : NN__PH_FWD); q++)
        kp[q] = f == NN__KP_GEMM || nn__densek_can(q, f, B, nn__in_F(m, n, 0), n->F)
                    ? (signed char)f
                    : 0;
    else if (!bwd)
      kp[0] = nn__convk_can(m, n, NN__PH_FWD, f) ? (signed char)f : 0;
    else if (f == NN__KP_GEMM)
      kp[1] = kp[2] = NN__KP_GEMM;
    else
      kp[1] = nn__convk_can(m, n, NN__PH_DW, f) ? (signed char)f : 0,
      kp[2] = nn__convk_can(m, n, NN__PH_DX, f) ? (signed char)f : 0;
    memcpy(np + ph, kp + ph, bwd ? 2 : 1);
    apply(n, np, bwd);
    return;
  }
  char key[128];
  key_of(m, n, B, bwd, key, sizeof key);
  signed char kp[3];
  pthread_mutex_lock(&g_mu);
  entry *e = find(key);
  bool ok = e && usable(m, n, B, e->kp, bwd);
  int fd = -1;
  FILE *f = NULL;
  if (!ok && g_file[0] && (fd = open(g_file, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) >= 0) {
    /* another process may have timed it: read the file under the lock we write under */
    if (flock(fd, LOCK_EX) == 0 && (f = fdopen(fd, "r+"))) {
      read_plans(f);
      e = find(key);
      ok = e && usable(m, n, B, e->kp, bwd);
    }
  }
  if (ok) {
    memcpy(kp, e->kp, 3);
  } else {
    if (dense_run)
      measure_dense(m, n, B, bwd, dense_run, kp);
    else
      measure(m, n, B, bwd, conv_run, kp);
    add(key, kp);
    if (f && fseek(f, 0, SEEK_END) == 0) {
      if (ftell(f) == 0)
        fprintf(f,
                "# shoal nn: the fastest kernel path of each conv2d, conv-transpose2d and dense "
                "shape,\n# batch and ISA on this CPU (nn/cpu/plan.c). Delete the file to time "
                "them again.\n");
      fprintf(f, "%s %s %s %s\n", key, bwd ? "-" : nn__kpath_name(kp[0]),
              bwd ? nn__kpath_name(kp[1]) : "-", bwd ? nn__kpath_name(kp[2]) : "-");
      fflush(f);
    }
  }
  if (f)
    fclose(f); /* and the lock */
  else if (fd >= 0)
    close(fd);
  pthread_mutex_unlock(&g_mu);
  if (bwd)
    np[1] = kp[1] < 0 ? 0 : kp[1], np[2] = kp[2] < 0 ? 0 : kp[2];
  else
    np[0] = kp[0] < 0 ? 0 : kp[0];
  apply(n, np, bwd);
}

void nn__plan_conv(nn_model *m, nn__node *n, int B, bool bwd, nn__plan_run run) {
  plan_node(m, n, B, bwd, run, NULL);
}

void nn__plan_dense(nn_model *m, nn__node *n, int B, bool bwd, nn__dense_run run) {
  plan_node(m, n, B, bwd, NULL, run);
}

/* ---- what ran ------------------------------------------------------------------------ */

size_t nn_model_kernels(const nn_model *m, char *buf, size_t cap) {
  size_t k = 0;
  if (buf && cap) buf[0] = 0;
  if (!m) return 0;
  for (int i = 0; i < m->n_nodes; i++) {
    const nn__node *n = &m->nodes[i];
    for (int j = 0; j < n->n_plans; j++) {
      const signed char *kp = n->plans[j].kp;
      char line[200];
      int w = snprintf(line, sizeof line, "%s: batch %d: forward %s, dW %s, dx %s\n", n->name,
                       n->plans[j].B, kp[0] >= 0 ? nn__kpath_name(kp[0]) : "-",
                       kp[1] >= 0 ? nn__kpath_name(kp[1]) : "-",
                       kp[2] >= 0 ? nn__kpath_name(kp[2]) : "-");
      if (buf && k + (size_t)w < cap) memcpy(buf + k, line, (size_t)w + 1);
      k += (size_t)w;
    }
  }
  return k;
}
