/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fault_pusher: a stand-in actor for the fault tests. Pushes Ape-X-shaped SampleBatches
 * (CartPole columns) whose observations name themselves: row r of batch seq s of
 * pusher p, generation g carries obs = {p, g, s, r}. The learner stores them like any
 * other; the test reads its saved replay back and checks every row it finds is whole,
 * that none is there twice, and which acknowledged batches are missing.
 *
 *   fault_pusher --learner ADDR --run RUN --actor P --gen G --log FILE
 *                [--envs E] [--steps S] [--rate BATCHES_PER_S] [--batches N]
 *
 * FILE is a log shared with the test through mmap, so it survives a kill -9 of this
 * process: the header holds pushed and delivered counts, then one double per seq, the
 * wall time at which this process first saw that batch acknowledged (0: not yet).
 * Deliveries are acknowledged in seq order, so "delivered = d" means seqs 1..d.
 * SIGTERM: flush for up to 5 s, record, exit 0.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rpc/rpc.h"
#include "tests/faults/faults_log.h"

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig, stop = 1; }

static double wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void record_stats(fault_log *lg, const rpc_client_stats *st0) {
  const rpc_client_stats st = *st0;
  double now = wall();
  for (uint64_t s = lg->delivered + 1; s <= st.delivered && s < FAULT_LOG_SEQS; s++)
    lg->ack_t[s] = now;
  lg->delivered = st.delivered;
  lg->reconnects = st.reconnects;
  lg->duplicates = st.duplicates;
  lg->last_status = st.last_status;
}

static void record(rpc_client *c, fault_log *lg) {
  rpc_client_stats st;
  rpc_client_stats_get(c, &st);
  record_stats(lg, &st);
}

int main(int argc, char **argv) {
  const char *target = NULL, *run = NULL, *log_path = NULL;
  int actor = -1, gen = 0, envs = 4, steps = 8, batches = 0;
  double rate = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--learner"))
      target = argv[i + 1];
    else if (!strcmp(argv[i], "--run"))
      run = argv[i + 1];
    else if (!strcmp(argv[i], "--actor"))
      actor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gen"))
      gen = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--log"))
      log_path = argv[i + 1];
    else if (!strcmp(argv[i], "--envs"))
      envs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps"))
      steps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rate"))
      rate = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--batches"))
      batches = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "fault_pusher: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (!target || !run || !log_path || actor < 0 || envs < 1 || steps < 1 || rate <= 0) {
    fprintf(stderr, "usage: fault_pusher --learner ADDR --run RUN --actor P --gen G --log FILE\n");
    return 2;
  }
  int fd = open(log_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || ftruncate(fd, sizeof(fault_log))) {
    perror(log_path);
    return 1;
  }
  fault_log *lg = mmap(NULL, sizeof *lg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (lg == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  lg->pid = getpid();
  lg->t_start = wall();

  struct sigaction sa = {0};
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  shoal_error err = {0};
  rpc_client_config cc = {0};
  cc.target = target;
  cc.run_id = run;
  cc.actor_id = (uint64_t)actor;
  /* Acknowledgements every 64 batches (1.6 s at 40/s): a learner killed at any time
   * holds batches the pushers have not seen acknowledged, which they resend. */
  cc.queue_batches = 128;
  cc.ack_every = 64;
  cc.block_timeout_s = 0.2;
  cc.backoff_max_s = 0.5; /* the tests measure recovery: retry at least twice a second */
  rpc_client *c;
  if (rpc_client_create(&cc, &c, &err)) {
    fprintf(stderr, "fault_pusher: %s\n", err.msg);
    return 1;
  }
  const int n = envs * steps;
  float *obs = malloc((size_t)n * 4 * sizeof(float)), *rew = calloc((size_t)n, 4);
  float *prio = malloc((size_t)n * 4);
  int32_t *act = calloc((size_t)n, 4), *env = malloc((size_t)n * 4);
  uint8_t *zero = calloc((size_t)n, 1);
  if (!obs || !rew || !prio || !act || !env || !zero) return 1;
  rpc_batch b = {0};
  b.n = (uint32_t)n;
  b.ncols = 8;
  b.cols[0] = (rpc_column){.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}};
  b.cols[1] = (rpc_column){.name = "action", .dtype = RPC_I32};
  b.cols[2] = (rpc_column){.name = "reward", .dtype = RPC_F32};
  b.cols[3] = (rpc_column){.name = "terminated", .dtype = RPC_U8};
  b.cols[4] = (rpc_column){.name = "truncated", .dtype = RPC_U8};
  b.cols[5] = (rpc_column){.name = "priority", .dtype = RPC_F32};
  b.cols[6] = (rpc_column){.name = "env", .dtype = RPC_I32};
  b.cols[7] = (rpc_column){.name = "tail", .dtype = RPC_U8};
  const void *data[8] = {obs, act, rew, zero, zero, prio, env, zero};
  const size_t width[8] = {16, 4, 4, 1, 1, 4, 4, 1};
  for (int k = 0; k < 8; k++) b.cols[k].data = data[k], b.cols[k].bytes = (size_t)n * width[k];
  for (int r = 0; r < n; r++) env[r] = r / steps, prio[r] = 1.0f;

  double t0 = wall();
  uint64_t seq = 0;
  while (!stop && (batches == 0 || seq < (uint64_t)batches)) {
    /* The next push is due at seq / rate after the start: a steady rate, catching up
     * after a stall rather than bursting without bound. */
    double due = t0 + (double)seq / rate;
    while (!stop && wall() < due) {
      record(c, lg);
      usleep(2000);
    }
    if (stop) break;
    seq++;
    for (int r = 0; r < n; r++) {
      obs[4 * r] = (float)actor;
      obs[4 * r + 1] = (float)gen;
      obs[4 * r + 2] = (float)seq;
      obs[4 * r + 3] = (float)r;
    }
    lg->pushed = seq; /* before the push: the log must never understate what was sent */
    int rc;
    while ((rc = rpc_client_push(c, &b, &err)) == SHOAL_ETIMEDOUT && !stop) record(c, lg);
    if (rc == SHOAL_ETIMEDOUT) {
      lg->pushed = --seq; /* not queued: stopping */
      break;
    }
    if (rc) {
      fprintf(stderr, "fault_pusher %d: push: %s\n", actor, err.msg);
      return 1;
    }
    record(c, lg);
  }
  rpc_client_flush(c, 5.0, NULL);
  record(c, lg);
  rpc_client_stats st;
  rpc_client_close(c, 1.0, &st, NULL);
  record_stats(lg, &st);
  lg->done = 1;
  printf("fault_pusher %d gen %d: pushed %llu delivered %llu duplicates %llu reconnects %llu\n",
         actor, gen, (unsigned long long)seq, (unsigned long long)st.delivered,
         (unsigned long long)st.duplicates, (unsigned long long)st.reconnects);
  free(obs), free(rew), free(prio), free(act), free(env), free(zero);
  munmap(lg, sizeof *lg);
  close(fd);
  return 0;
}
