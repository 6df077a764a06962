/* SPDX-License-Identifier: Apache-2.0 */
/*
 * atari_sps: emulator frames/s of shoal's ALE games (envs/atari.c), preprocessing included
 * (no-op starts, frame skip 4 with the max of the last two frames, 84x84 INTER_AREA
 * grayscale, a stack of 4), stepped as an actor steps them: env_vec_step on the caller's
 * thread with uniformly random actions. A frame is one emulator frame: a step is
 * frame_skip frames (the no-op starts' frames are not counted, as no peer counts them).
 *
 * shoal's actors scale one process per core, so this runs P child processes, each pinned
 * (sched_setaffinity) to its own CPU and stepping B/P copies; a window starts in all of
 * them at once and their rates are summed. The parent only waits.
 *
 *   atari_sps [--id ID] [--options K=V,...] [--B N] [--procs P] [--cpus C0,C1,...]
 *             [--seconds S] [--rounds R] [--serve]
 *
 * Without --serve: R windows of S seconds, a line per window, then one JSON line with the
 * best window (the least disturbed on a shared machine). With --serve (for
 * benchmarks/peers/atari_peers.py, which alternates windows with the peers): prints
 * "ready" once every copy is reset, then for each line "<seconds>" on stdin runs one
 * window and prints "<steps/s> <frames/s>"; EOF ends it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/shoal.h"
#include "envs/envs.h"

enum { MAX_PROCS = 64 };

typedef struct bench_opts {
  const char *id, *options;
  int B, procs, rounds, serve, frame_skip;
  int cpus[MAX_PROCS], ncpus;
  double seconds;
} bench_opts;

typedef struct child {
  pid_t pid;
  FILE *cmd; /* parent -> child: "<seconds>\n" per window */
  FILE *res; /* child -> parent: "ready\n", then "<steps/s>\n" per window */
} child;

/* A child's life: pin, make B copies, then one window per command until EOF. Runs after
 * fork and before anything starts Python, so each child embeds its own interpreter. */
static int child_main(const bench_opts *o, int cpu, int B, FILE *cmd, FILE *res) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set)) {
    fprintf(stderr, "atari_sps: cannot pin to CPU %d: %s\n", cpu, strerror(errno));
    return 1;
  }
  shoal_error err = {0};
  env_vec *v = NULL;
  env_vec_config cfg = {.threads = 1, .options = o->options};
  if (env_vec_create(&v, o->id, B, &cfg, &err)) {
    fprintf(stderr, "atari_sps: %s: %s\n", o->id, err.msg);
    return 1;
  }
  const env_spec *sp = env_vec_spec(v);
  size_t ob = env_space_bytes(&sp->obs) * (size_t)B;
  /* final_obs is filled as an actor asks for it (truncated episodes bootstrap from it) */
  char *obs = malloc(ob), *fin = malloc(ob);
  float *rew = malloc(sizeof(float) * (size_t)B);
  uint8_t *te = malloc((size_t)B), *tr = malloc((size_t)B);
  int32_t *a = malloc(sizeof(int32_t) * (size_t)B);
  int rc = 1;
  if (!obs || !fin || !rew || !te || !tr || !a) goto done;
  shoal_rng rng;
  shoal_rng_seed(&rng, 1000 + (uint64_t)cpu);
  if (env_vec_reset(v, 1000 * (uint64_t)(cpu + 1), obs, &err)) {
    fprintf(stderr, "atari_sps: reset: %s\n", err.msg);
    goto done;
  }
  env_vec_out out = {obs, rew, te, tr, fin};
  fprintf(res, "ready\n");
  fflush(res);
  double secs;
  while (fscanf(cmd, "%lf", &secs) == 1) {
    long steps = 0;
    double t0 = shoal_now_s(), t;
    do {
      /* 8 steps between clock reads: milliseconds, small against a window */
      for (int k = 0; k < 8; k++) {
        for (int i = 0; i < B; i++) a[i] = (int32_t)shoal_rng_below(&rng, (uint64_t)sp->act.n);
        if (env_vec_step(v, a, &out, &err)) {
          fprintf(stderr, "atari_sps: step: %s\n", err.msg);
          goto done;
        }
      }
      steps += 8L * B;
    } while ((t = shoal_now_s() - t0) < secs);
    fprintf(res, "%.1f\n", steps / t);
    fflush(res);
  }
  rc = 0;
done:
  env_vec_destroy(v);
  free(obs), free(fin), free(rew), free(te), free(tr), free(a);
  return rc;
}

/* Forks o->procs children, copies split as evenly as B allows. 0 once all are ready. */
static int start_children(const bench_opts *o, child *ch) {
  for (int p = 0; p < o->procs; p++) {
    int down[2], up[2];
    if (pipe(down) || pipe(up)) return perror("atari_sps: pipe"), -1;
    int B = o->B / o->procs + (p < o->B % o->procs);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return perror("atari_sps: fork"), -1;
    if (pid == 0) {
      close(down[1]), close(up[0]);
      for (int q = 0; q < p; q++) fclose(ch[q].cmd), fclose(ch[q].res);
      FILE *cmd = fdopen(down[0], "r"), *res = fdopen(up[1], "w");
      _exit(child_main(o, o->cpus[p % o->ncpus], B, cmd, res));
    }
    close(down[0]), close(up[1]);
    ch[p] = (child){pid, fdopen(down[1], "w"), fdopen(up[0], "r")};
  }
  char line[64];
  for (int p = 0; p < o->procs; p++)
    if (!fgets(line, sizeof line, ch[p].res) || strncmp(line, "ready", 5) != 0) {
      fprintf(stderr, "atari_sps: process %d failed to start\n", p);
      return -1;
    }
  return 0;
}

/* One window in every child at once; the summed steps/s, or < 0 if a child died. */
static double window(child *ch, int procs, double secs) {
  for (int p = 0; p < procs; p++) fprintf(ch[p].cmd, "%g\n", secs), fflush(ch[p].cmd);
  double sum = 0;
  for (int p = 0; p < procs; p++) {
    double r;
    if (fscanf(ch[p].res, "%lf", &r) != 1) return -1;
    sum += r;
  }
  return sum;
}

static void stop_children(child *ch, int procs) {
  for (int p = 0; p < procs; p++) {
    if (ch[p].cmd) fclose(ch[p].cmd); /* EOF: the child destroys its envs and exits */
    if (ch[p].res) fclose(ch[p].res);
    if (ch[p].pid > 0) waitpid(ch[p].pid, NULL, 0);
  }
}

/* frame_skip from the options (envs/atari.c's default 4), to turn steps into frames */
static int frame_skip_of(const char *options) {
  const char *k = options ? strstr(options, "frame_skip=") : NULL;
  return k ? atoi(k + strlen("frame_skip=")) : 4;
}

static int parse_cpus(const char *s, bench_opts *o) {
  o->ncpus = 0;
  for (const char *p = s; *p && o->ncpus < MAX_PROCS;) {
    char *end;
    long c = strtol(p, &end, 10);
    if (end == p || c < 0 || c >= CPU_SETSIZE) return -1;
    o->cpus[o->ncpus++] = (int)c;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return o->ncpus ? 0 : -1;
}

int main(int argc, char **argv) {
  bench_opts o = {
      .id = "gym:ALE/Pong-v5", .options = "", .B = 16, .procs = 1, .rounds = 5, .seconds = 1.0};
  /* default CPUs: the first ones this process may run on */
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) == 0)
    for (int c = 0; c < CPU_SETSIZE && o.ncpus < MAX_PROCS; c++)
      if (CPU_ISSET(c, &mine)) o.cpus[o.ncpus++] = c;
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(k, "--serve")) {
      o.serve = 1;
      continue;
    }
    if (!v) goto usage;
    i++;
    if (!strcmp(k, "--id"))
      o.id = v;
    else if (!strcmp(k, "--options"))
      o.options = v;
    else if (!strcmp(k, "--B"))
      o.B = atoi(v);
    else if (!strcmp(k, "--procs"))
      o.procs = atoi(v);
    else if (!strcmp(k, "--seconds"))
      o.seconds = atof(v);
    else if (!strcmp(k, "--rounds"))
      o.rounds = atoi(v);
    else if (!strcmp(k, "--cpus")) {
      if (parse_cpus(v, &o)) goto usage;
    } else
      goto usage;
  }
  if (o.B < 1 || o.procs < 1 || o.procs > MAX_PROCS || o.procs > o.B || o.rounds < 1 ||
      !(o.seconds > 0) || o.ncpus < 1)
    goto usage;
  o.frame_skip = frame_skip_of(o.options);
  signal(SIGPIPE, SIG_IGN); /* a dead child shows as a failed read, not a killed parent */

  child ch[MAX_PROCS] = {0};
  int rc = 1;
  if (start_children(&o, ch)) goto done;
  if (o.serve) {
    printf("ready\n");
    fflush(stdout);
    double secs;
    while (scanf("%lf", &secs) == 1) {
      double r = window(ch, o.procs, secs);
      if (r < 0) goto done;
      printf("%.1f %.1f\n", r, r * o.frame_skip);
      fflush(stdout);
    }
  } else {
    double best = 0;
    for (int k = 0; k < o.rounds; k++) {
      double r = window(ch, o.procs, o.seconds);
      if (r < 0) goto done;
      if (r > best) best = r;
      printf("window %d: %.0f steps/s, %.0f frames/s\n", k, r, r * o.frame_skip);
    }
    printf(
        "{\"id\": \"%s\", \"options\": \"%s\", \"B\": %d, \"procs\": %d, "
        "\"steps_per_s\": %.1f, \"frames_per_s\": %.1f, \"frames_per_s_per_core\": %.1f}\n",
        o.id, o.options, o.B, o.procs, best, best * o.frame_skip, best * o.frame_skip / o.procs);
  }
  rc = 0;
done:
  stop_children(ch, o.procs);
  return rc;
usage:
  fprintf(stderr,
          "usage: atari_sps [--id ID] [--options K=V,...] [--B N] [--procs P] [--cpus C0,C1,...]\n"
          "                 [--seconds S] [--rounds R] [--serve]\n");
  return 2;
}
