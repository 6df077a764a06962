/* SPDX-License-Identifier: Apache-2.0 */
/*
 * benchmarks/ingest.c — the learner's ingest rate: N actor processes (1, 2, 4, 8) stream
 * synthetic batches over gRPC on loopback to one learner that decodes, validates and
 * inserts every batch into a real replay memory (replay/replay.h). Beside it, in the same
 * run, raw loopback TCP bandwidth with plain sockets: the physical limit.
 *
 * Scenarios (samples are transitions: obs, action, reward, terminated, truncated):
 *   cartpole    obs 4 x f32; 2048 samples per batch; uniform replay
 *   atari       obs one new 84x84 u8 frame per sample (each frame travels once), replay
 *               with frame_stack 4 rebuilding 4x84x84 stacks at sample time; 64 per batch
 *   atari_full  obs a full 4x84x84 u8 stack per sample (no reuse: every frame travels 4
 *               times), replay storing the stacks; 16 per batch
 *   atari_wire  rpc's own frame deduplication: a batch of 64 stacks carries its 67 frames
 *               and 64x4 indices; the server rebuilds the 4x84x84 stacks, replay stores
 *               them (for memories that keep full stacks)
 *   pong        atari_wire with real frames: each actor plays gym:ALE/Pong-v5 (random
 *               actions, envs/atari.c's preprocessing) for 8 batches of 64 consecutive
 *               steps first, and deduplicates each batch with rpc_frames_dedup as shoal's
 *               Ape-X actor does, inside the measured loop
 * The transport's own ceiling: cartpole and atari_full with 2 actors again, inserting and
 * then, right after, the learner receiving, decoding and checking every batch but inserting
 * nothing (SHOAL_INGEST_NOINSERT=1 does the same for a narrowed run): what gRPC and the
 * kernel's copies leave on this machine, so that a ratio short of its goal says whether
 * replay or the transport holds it.
 * BENCH lines: ingest.cartpole.n<N> (samples/s; baseline: the samples/s raw TCP could
 * carry at this sample size), ingest.atari.n<N> (samples/s; baseline: atari_full samples/s
 * at the same N, so the ratio is the gain of sending each frame once), ingest.atari_full.n<N>
 * (MB/s; baseline: raw TCP MB/s), ingest.pong.n<N> (samples/s; baseline: atari_wire's
 * synthetic frames at the same N), ingest.<cartpole|atari_full>.noinsert.n2 (samples/s
 * with nothing inserted; baseline: raw TCP's samples/s) and
 * ingest.<cartpole|atari_full>.of_noinsert.n2 (samples/s inserting; baseline: the same
 * without inserting, the two run one after the other).
 *
 * SHOAL_INGEST_LOG=1 runs the learner's replay log beside the inserts as shoal-learner
 * does (learner/replay_log.h: insert and record under one lock, segments compressed and
 * written to a file store in /tmp by their own threads); benchmarks/replay_log compares
 * the two.
 *
 * The program re-executes itself as the actors (--actor). Actors fill batches from a
 * pool of random bytes made once, so the figure is the transport and the learner.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envs/envs.h"
#include "learner/replay_log.h"
#include "replay/replay.h"
#include "rpc/rpc.h"

#define RUN "ingest-bench"
#define MEASURE_S 2.0
#define WARMUP_S 0.5
#define EPISODE 200 /* steps per synthetic episode */

enum { SC_CARTPOLE, SC_ATARI, SC_ATARI_FULL, SC_ATARI_WIRE, SC_PONG, SC_COUNT };
static const char *sc_name[SC_COUNT] = {"cartpole", "atari", "atari_full", "atari_wire", "pong"};
static const int sc_batch[SC_COUNT] = {2048, 64, 16, 64, 64};

/* Per-sample obs bytes and shape. */
/* Per-sample obs bytes as the learner sees them (atari_wire: the rebuilt stack). */
static size_t obs_bytes(int sc) { return sc == SC_CARTPOLE ? 16 : sc == SC_ATARI ? 7056 : 28224; }

static rpc_spec make_spec(int sc) {
  rpc_spec s = {.run_id = RUN, .max_items = (uint32_t)sc_batch[sc], .ncols = 5};
  if (sc == SC_CARTPOLE)
    s.cols[0] = (rpc_column_spec){.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}};
  else if (sc == SC_ATARI)
    s.cols[0] = (rpc_column_spec){.name = "obs", .dtype = RPC_U8, .ndim = 2, .shape = {84, 84}};
  else
    s.cols[0] = (rpc_column_spec){
        .name = "obs", .dtype = RPC_U8, .ndim = 3, .shape = {4, 84, 84}, .frame_stack = true};
  s.cols[1] = (rpc_column_spec){.name = "action", .dtype = RPC_I32};
  s.cols[2] = (rpc_column_spec){.name = "reward", .dtype = RPC_F32};
  s.cols[3] = (rpc_column_spec){.name = "terminated", .dtype = RPC_BOOL};
  s.cols[4] = (rpc_column_spec){.name = "truncated", .dtype = RPC_BOOL};
  return s;
}

/* ---- actor -------------------------------------------------------------------- */

static volatile sig_atomic_t stop_flag;
static void on_term(int sig) { stop_flag = 1; }

static int actor_main(int port, int sc, int actor) {
  signal(SIGTERM, on_term);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  rpc_client_config cfg = {
      .target = target,
      .run_id = RUN,
      .actor_id = (uint64_t)actor,
  };
  rpc_client *c;
  shoal_error err = {0};
  if (rpc_client_create(&cfg, &c, &err)) {
    fprintf(stderr, "actor: %s\n", err.msg);
    return 1;
  }
  int B = sc_batch[sc];
  /* Bytes of obs per batch on the wire: B items, or B + 3 frames for atari_wire. */
  size_t batch_obs = sc == SC_ATARI_WIRE ? (size_t)(B + 3) * 7056 : (size_t)B * obs_bytes(sc);
  /* A pool of 8 batches of random content; batches take windows of it. */
  size_t pool_n = 8 * batch_obs;
  uint8_t *pool = malloc(pool_n);
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)actor);
  if (sc == SC_CARTPOLE) {
    float *f = (float *)pool;
    for (size_t i = 0; i < pool_n / 4; i++) f[i] = shoal_rng_uniformf(&rng) * 2 - 1;
  } else {
    for (size_t i = 0; i < pool_n; i++) pool[i] = (uint8_t)shoal_rng_next(&rng);
  }
  int32_t *act = malloc((size_t)B * 4);
  float *rew = malloc((size_t)B * 4);
  uint8_t *term = malloc((size_t)B), *trunc = calloc((size_t)B, 1);
  for (int i = 0; i < B; i++) act[i] = i % 6, rew[i] = 1.0f;
  rpc_batch b = {.n = (uint32_t)B, .ncols = 5};
  rpc_column_spec cs = make_spec(sc).cols[0];
  b.cols[0] = (rpc_column){.name = "obs", .dtype = cs.dtype, .ndim = cs.ndim, .bytes = batch_obs};
  memcpy(b.cols[0].shape, cs.shape, sizeof cs.shape);
  uint32_t *index = malloc((size_t)B * 4 * sizeof *index);
  uint8_t *stacks = NULL, *frames = NULL;
  if (sc == SC_PONG) {
    /* 8 batches of one Pong game's consecutive stacks, played before the clock starts */
    stacks = malloc(8 * (size_t)B * 28224);
    frames = malloc((size_t)B * 28224);
    env_vec *v = NULL;
    env_vec_config vc = {.options = "repeat_action_probability=0.25"};
    uint8_t *obs = malloc(28224), te, tr;
    float r;
    env_vec_out o = {obs, &r, &te, &tr, NULL};
    if (!stacks || !frames || !obs || env_vec_create(&v, "gym:ALE/Pong-v5", 1, &vc, &err) ||
        env_vec_reset(v, (uint64_t)actor, obs, &err)) {
      fprintf(stderr, "actor %d: Pong: %s\n", actor, err.msg);
      return 1;
    }
    for (int i = 0; i < 8 * B; i++) {
      int32_t a = (int32_t)shoal_rng_below(&rng, 6);
      memcpy(stacks + (size_t)i * 28224, obs, 28224);
      if (env_vec_step(v, &a, &o, &err)) {
        fprintf(stderr, "actor %d: Pong: %s\n", actor, err.msg);
        return 1;
      }
    }
    env_vec_destroy(v);
    free(obs);
    b.cols[0].frame_index = index;
  }
  if (sc == SC_ATARI_WIRE) { /* item i stacks frames i..i+3, as consecutive steps do */
    for (int i = 0; i < B; i++)
      for (int t = 0; t < 4; t++) index[i * 4 + t] = (uint32_t)(i + t);
    b.cols[0].frames = (uint32_t)B + 3;
    b.cols[0].frame_index = index;
  }
  b.cols[1] = (rpc_column){.name = "action", .dtype = RPC_I32, .data = act, .bytes = B * 4};
  b.cols[2] = (rpc_column){.name = "reward", .dtype = RPC_F32, .data = rew, .bytes = B * 4};
  b.cols[3] = (rpc_column){.name = "terminated", .dtype = RPC_BOOL, .data = term, .bytes = B};
  b.cols[4] = (rpc_column){.name = "truncated", .dtype = RPC_BOOL, .data = trunc, .bytes = B};
  uint64_t step = 0;
  int rc = 0;
  for (uint64_t k = 0; !stop_flag; k++) {
    b.cols[0].data = pool + (k % 8) * batch_obs;
    if (sc == SC_PONG) {
      b.cols[0].frames = rpc_frames_dedup(stacks + (k % 8) * (size_t)B * 28224, (size_t)B * 4,
                                          7056, 4, frames, index);
      b.cols[0].data = frames;
      b.cols[0].bytes = (size_t)b.cols[0].frames * 7056;
    }
    for (int i = 0; i < B; i++) term[i] = (step + (uint64_t)i) % EPISODE == EPISODE - 1;
    step += (uint64_t)B;
    if ((rc = rpc_client_push(c, &b, &err))) {
      fprintf(stderr, "actor %d: push: %s\n", actor, err.msg);
      break;
    }
  }
  rpc_client_stats st;
  rpc_client_close(c, 3.0, &st, NULL);
  free(pool);
  free(index);
  free(stacks);
  free(frames);
  free(act);
  free(rew);
  free(term);
  free(trunc);
  return rc ? 1 : 0;
}

/* ---- learner ------------------------------------------------------------------ */

typedef struct learner {
  replay *r;
  int sc;
  size_t ob;
  rlog *log; /* SHOAL_INGEST_LOG=1 */
  pthread_mutex_t log_mu;
  store *st;
  store_writer *wr;
} learner;

/* Set before a server starts: batches are decoded and checked by rpc, then dropped. */
static int g_noinsert;

/* Inserts a validated batch into replay: the actor's stream of consecutive steps. An
 * ended step's final observation is synthetic here (its own obs), as the actors send
 * no next observations. */
static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  learner *L = user;
  if (g_noinsert) return 0;
  static _Thread_local uint8_t *final;
  static _Thread_local size_t final_cap;
  const uint8_t *obs = b->cols[0].data, *term = b->cols[3].data;
  size_t fb = L->sc == SC_ATARI ? 7056 : L->ob, k = 0;
  size_t need = (b->n / EPISODE + 2) * fb;
  if (final_cap < need) {
    free(final);
    final = malloc(need);
    final_cap = need;
  }
  for (uint32_t i = 0; i < b->n; i++)
    if (term[i]) memcpy(final + fb * k++, obs + L->ob * i, fb);
  replay_steps s = {.n = b->n,
                    .cols = {b->cols[0].data, b->cols[1].data},
                    .reward = b->cols[2].data,
                    .terminated = b->cols[3].data,
                    .truncated = b->cols[4].data,
                    .final_obs = k ? final : NULL};
  if (!L->log) return replay_insert(L->r, (int)(b->actor_id % 8), &s, err);
  pthread_mutex_lock(&L->log_mu);
  int rc = replay_insert(L->r, (int)(b->actor_id % 8), &s, err);
  if (!rc) {
    rlog_batch rec = {.actor = (uint32_t)b->actor_id,
                      .incarnation = b->incarnation,
                      .seq = b->seq,
                      .rows = b->n,
                      .steps = b->n,
                      .items = b->n + k};
    for (int c = 0; c < 5; c++) rec.cols[c] = b->cols[c].data;
    if (b->cols[0].frames) { /* as shoal-learner logs frames that came deduplicated */
      rec.frames[0] = b->cols[0].frames;
      rec.frame_depth[0] = (uint32_t)rpc_column_frames_of(&b->cols[0]);
      rec.frame_data[0] = b->cols[0].frame_data;
      rec.frame_index[0] = b->cols[0].frame_index;
    }
    rc = rlog_append_batch(L->log, &rec, err);
  }
  pthread_mutex_unlock(&L->log_mu);
  return rc;
}

/* The replay log of SHOAL_INGEST_LOG=1 into a file store under dir. */
static int open_log(learner *L, const rpc_spec *spec, const char *dir) {
  shoal_error err = {0};
  char uri[300];
  snprintf(uri, sizeof uri, "file://%s", dir);
  rlog_config c = {.run = RUN, .ncols = 5};
  for (int i = 0; i < 5; i++) {
    snprintf(c.cols[i].name, sizeof c.cols[i].name, "%s", spec->cols[i].name);
    c.cols[i].dtype = spec->cols[i].dtype == RPC_F32   ? REPLAY_F32
                      : spec->cols[i].dtype == RPC_I32 ? REPLAY_I32
                                                       : REPLAY_U8;
    c.cols[i].ndim = (uint32_t)spec->cols[i].ndim;
    for (int d = 0; d < spec->cols[i].ndim; d++) c.cols[i].shape[d] = spec->cols[i].shape[d];
  }
  if (store_open(&L->st, uri, &err) || store_run_create(L->st, RUN, NULL, 1, &err) ||
      store_writer_create(&L->wr, L->st, NULL, &err)) {
    fprintf(stderr, "replay log store: %s\n", err.msg);
    return 1;
  }
  c.st = L->st;
  c.wr = L->wr;
  pthread_mutex_init(&L->log_mu, NULL);
  if (rlog_open(&L->log, &c, &err)) {
    fprintf(stderr, "replay log: %s\n", err.msg);
    return 1;
  }
  return 0;
}

static void close_log(learner *L) {
  if (!L->log) return;
  rlog_stats ls;
  store_writer_stats ws;
  rlog_close(L->log, 60, &ls);
  store_writer_close(L->wr, 120, &ws);
  printf(
      "replay log: %llu batches, %llu segments written (%.1f MB raw, %.1f MB stored), %llu "
      "dropped\n",
      (unsigned long long)ls.records, (unsigned long long)ws.replay_written,
      (double)ls.bytes_raw / 1e6, (double)ls.bytes_stored / 1e6,
      (unsigned long long)(ls.segments_dropped + ws.replay_dropped));
  store_close(L->st);
  pthread_mutex_destroy(&L->log_mu);
  L->log = NULL;
}

static int make_replay(int sc, replay **out) {
  replay_config c = {
      .kind = REPLAY_UNIFORM, .streams = 8, .ncols = 2, .obs_column = "obs", .writer_slack = -1};
  if (sc == SC_CARTPOLE) {
    c.capacity = 1 << 20;
    c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_F32, .ndim = 1, .shape = {4}};
  } else if (sc == SC_ATARI) {
    c.capacity = 1 << 15;
    c.frame_stack = 4;
    c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 2, .shape = {84, 84}};
  } else {
    c.capacity = 1 << 13;
    c.cols[0] = (replay_column){.name = "obs", .dtype = REPLAY_U8, .ndim = 3, .shape = {4, 84, 84}};
  }
  c.cols[1] = (replay_column){.name = "action", .dtype = REPLAY_I32};
  shoal_error err = {0};
  int rc = replay_create(&c, out, &err);
  if (rc) fprintf(stderr, "replay: %s\n", err.msg);
  return rc;
}

typedef struct result {
  double samples_s, mb_s;
  uint64_t refused, rejected;
} result;

static pid_t spawn(const char *self, int port, int sc, int actor) {
  char p[16], s[16], a[16];
  snprintf(p, sizeof p, "%d", port);
  snprintf(s, sizeof s, "%d", sc);
  snprintf(a, sizeof a, "%d", actor);
  pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "--actor", p, s, a, (char *)NULL);
    _exit(127);
  }
  return pid;
}

static int run_case(const char *self, int sc, int nactors, result *out) {
  learner L = {.sc = sc, .ob = obs_bytes(sc)};
  if (make_replay(sc, &L.r)) return 1;
  rpc_spec spec = make_spec(sc);
  char logdir[64] = "/tmp/shoal-ingest-log-XXXXXX";
  const char *lg = getenv("SHOAL_INGEST_LOG");
  if (lg && !strcmp(lg, "1") && (!mkdtemp(logdir) || open_log(&L, &spec, logdir))) return 1;
  const char *th = getenv("SHOAL_INGEST_THREADS");
  /* One polling thread: on 2 cores shared with the actors a second one only contends. */
  rpc_server_config cfg = {.threads = th ? atoi(th) : 1, .on_batch = on_batch, .user = &L};
  rpc_server *srv;
  shoal_error err = {0};
  if (rpc_server_create(&cfg, &spec, &srv, &err)) {
    fprintf(stderr, "server: %s\n", err.msg);
    replay_destroy(L.r);
    return 1;
  }
  pid_t pids[8];
  for (int a = 0; a < nactors; a++) pids[a] = spawn(self, rpc_server_port(srv), sc, a);
  rpc_server_stats s0, s1;
  /* Warm up until every actor has delivered, then measure. */
  double t_end = shoal_now_s() + 10;
  do {
    usleep(20000);
    rpc_server_stats_get(srv, &s0);
  } while (s0.actors < (uint64_t)nactors && shoal_now_s() < t_end);
  usleep((useconds_t)(WARMUP_S * 1e6));
  rpc_server_stats_get(srv, &s0);
  double t0 = shoal_now_s();
  usleep((useconds_t)(MEASURE_S * 1e6));
  rpc_server_stats_get(srv, &s1);
  double dt = shoal_now_s() - t0;
  for (int a = 0; a < nactors; a++) kill(pids[a], SIGTERM);
  for (int a = 0; a < nactors; a++) waitpid(pids[a], NULL, 0);
  out->samples_s = (double)(s1.samples - s0.samples) / dt;
  out->mb_s = (double)(s1.bytes - s0.bytes) / dt / 1e6;
  out->refused = s1.refused;
  out->rejected = s1.rejected;
  rpc_server_destroy(srv, 1.0);
  if (L.log) {
    close_log(&L);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", logdir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", logdir);
  }
  replay_destroy(L.r);
  return 0;
}

/* Raw loopback TCP: a child writes 1 MiB chunks for `secs`, the parent reads. MB/s. */
static double raw_tcp(double secs) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al))
    return 0;
  enum { CHUNK = 1 << 20 };
  pid_t pid = fork();
  if (pid == 0) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) _exit(1);
    char *buf = calloc(1, CHUNK);
    double end = shoal_now_s() + secs;
    while (shoal_now_s() < end)
      if (write(s, buf, CHUNK) < 0) break;
    close(s);
    _exit(0);
  }
  int s = accept(ls, NULL, NULL);
  char *buf = malloc(CHUNK);
  uint64_t total = 0;
  double t0 = 0, t1 = 0;
  for (;;) {
    ssize_t n = read(s, buf, CHUNK);
    if (n <= 0) break;
    if (!total) t0 = shoal_now_s();
    total += (uint64_t)n;
    t1 = shoal_now_s();
  }
  close(s);
  close(ls);
  free(buf);
  waitpid(pid, NULL, 0);
  return t1 > t0 ? (double)total / (t1 - t0) / 1e6 : 0;
}

int main(int argc, char **argv) {
  /* Messages of hundreds of KiB are allocated and freed per batch (the actor's encoded
   * batch, gRPC's receive buffers). With glibc's defaults many of them are mmap'd and
   * returned, and the kernel zeroes fresh pages for every message (15% of the run in
   * clear_page). Raising the thresholds keeps them in the heap: a learner or actor
   * program should do the same. SHOAL_INGEST_PLAIN_MALLOC=1 measures the defaults. */
  if (!getenv("SHOAL_INGEST_PLAIN_MALLOC")) {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }
  if (argc == 5 && !strcmp(argv[1], "--actor"))
    return actor_main(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
  signal(SIGPIPE, SIG_IGN);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 1;
  self[n] = 0;
  double tcp = 0;
  for (int i = 0; i < 3; i++) {
    double t = raw_tcp(0.5);
    if (t > tcp) tcp = t;
  }
  printf("raw loopback TCP (plain sockets, 1 MiB writes, best of 3): %.0f MB/s\n\n", tcp);
  static const int ns[4] = {1, 2, 4, 8};
  result res[SC_COUNT][4];
  printf("| scenario | actors | samples/s | MB/s (wire) | of raw TCP | refused |\n");
  printf("|---|---|---|---|---|---|\n");
  /* SHOAL_INGEST_ONLY=<scenario> and SHOAL_INGEST_N=<actors> narrow the run (profiling). */
  const char *only = getenv("SHOAL_INGEST_ONLY"), *only_n = getenv("SHOAL_INGEST_N");
  const char *noins = getenv("SHOAL_INGEST_NOINSERT");
  g_noinsert = noins && !strcmp(noins, "1");
  memset(res, 0, sizeof res);
  for (int sc = 0; sc < SC_COUNT; sc++)
    for (int k = 0; k < 4; k++) {
      if ((only && strcmp(only, sc_name[sc])) || (only_n && atoi(only_n) != ns[k])) continue;
      if (run_case(self, sc, ns[k], &res[sc][k])) return 1;
      printf("| %s | %d | %.0f | %.0f | %.2f | %llu |\n", sc_name[sc], ns[k], res[sc][k].samples_s,
             res[sc][k].mb_s, res[sc][k].mb_s / tcp, (unsigned long long)res[sc][k].refused);
      fflush(stdout);
    }
  printf("\n");
  if (only || only_n) return 0;
  /* The transport's ceiling: the same learner inserting nothing (2 actors: ns[1]), run
   * right after the same case inserting, so that their ratio is not the machine's drift
   * over the minutes since the table's row. */
  static const int ceil_sc[2] = {SC_CARTPOLE, SC_ATARI_FULL};
  result ins_res[2], noins_res[2];
  printf(
      "| scenario, inserting nothing | actors | samples/s | MB/s (wire) | of raw TCP | "
      "inserting / not |\n|---|---|---|---|---|---|\n");
  for (int i = 0; i < 2; i++) {
    int sc = ceil_sc[i];
    g_noinsert = 0;
    if (run_case(self, sc, ns[1], &ins_res[i])) return 1;
    g_noinsert = 1;
    if (run_case(self, sc, ns[1], &noins_res[i])) return 1;
    printf("| %s | %d | %.0f | %.0f | %.2f | %.2f |\n", sc_name[sc], ns[1], noins_res[i].samples_s,
           noins_res[i].mb_s, noins_res[i].mb_s / tcp,
           ins_res[i].samples_s / noins_res[i].samples_s);
    fflush(stdout);
  }
  g_noinsert = 0;
  printf("\n");
  /* Wire bytes per CartPole sample: obs 16 + action 4 + reward 4 + two flags. */
  double cp_bytes = 26;
  for (int i = 0; i < 2; i++) {
    int sc = ceil_sc[i];
    /* raw TCP's samples/s at this scenario's wire bytes per sample (from the run itself) */
    double lim = tcp * noins_res[i].samples_s / noins_res[i].mb_s;
    printf(
        "BENCH name=ingest.%s.noinsert.n%d value=%.0f unit=samples/s baseline=%.0f "
        "ratio=%.3f\n",
        sc_name[sc], ns[1], noins_res[i].samples_s, lim, noins_res[i].samples_s / lim);
    printf(
        "BENCH name=ingest.%s.of_noinsert.n%d value=%.0f unit=samples/s baseline=%.0f "
        "ratio=%.3f\n",
        sc_name[sc], ns[1], ins_res[i].samples_s, noins_res[i].samples_s,
        ins_res[i].samples_s / noins_res[i].samples_s);
  }
  for (int k = 0; k < 4; k++) {
    double lim = tcp * 1e6 / cp_bytes;
    printf("BENCH name=ingest.cartpole.n%d value=%.0f unit=samples/s baseline=%.0f ratio=%.3f\n",
           ns[k], res[SC_CARTPOLE][k].samples_s, lim, res[SC_CARTPOLE][k].samples_s / lim);
  }
  for (int k = 0; k < 4; k++)
    printf("BENCH name=ingest.atari.n%d value=%.0f unit=samples/s baseline=%.0f ratio=%.3f\n",
           ns[k], res[SC_ATARI][k].samples_s, res[SC_ATARI_FULL][k].samples_s,
           res[SC_ATARI][k].samples_s / res[SC_ATARI_FULL][k].samples_s);
  for (int k = 0; k < 4; k++)
    printf("BENCH name=ingest.atari_wire.n%d value=%.0f unit=samples/s baseline=%.0f ratio=%.3f\n",
           ns[k], res[SC_ATARI_WIRE][k].samples_s, res[SC_ATARI_FULL][k].samples_s,
           res[SC_ATARI_WIRE][k].samples_s / res[SC_ATARI_FULL][k].samples_s);
  for (int k = 0; k < 4; k++)
    printf("BENCH name=ingest.pong.n%d value=%.0f unit=samples/s baseline=%.0f ratio=%.3f\n",
           ns[k], res[SC_PONG][k].samples_s, res[SC_ATARI_WIRE][k].samples_s,
           res[SC_PONG][k].samples_s / res[SC_ATARI_WIRE][k].samples_s);
  for (int k = 0; k < 4; k++)
    printf("BENCH name=ingest.atari_full.n%d value=%.0f unit=MB/s baseline=%.0f ratio=%.3f\n",
           ns[k], res[SC_ATARI_FULL][k].mb_s, tcp, res[SC_ATARI_FULL][k].mb_s / tcp);
  return 0;
}
