/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_malicious.c — the learner's server under attack, with an honest actor
 * pushing beside the attacker. The attacker (tests/malicious_client.py, grpcio and raw
 * HTTP/2) sends wrong tokens, huge, negative and overflowing shapes, a terabyte
 * decompressed size, NaN floods over hundreds of streams, oversized messages and
 * metadata, streams opened and never written, messages trickled byte by byte, and idle
 * TCP connections (see its docstring for the full list). The test asserts that
 *  - every hostile request is refused with its status (the script checks each one),
 *  - the honest actor (this program re-executed with --actor) delivers every batch,
 *    exactly once and intact, while the attack runs,
 *  - the server's counters saw the attack (unauthenticated, rejected, idle-cancelled),
 *  - the server process's resident memory (VmRSS, and its peak VmHWM) grows by less
 *    than a stated bound from before the attack to after it.
 * The server runs in this process, so /proc/self/status is the server's memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "rpc/rpc.h"

#define RUN "malice-run"
#define TOKEN "tok-7f3a9c1e"
#define NB 32 /* samples per honest batch */

#if defined(__SANITIZE_ADDRESS__)
#define SHOAL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHOAL_ASAN 1
#endif
#endif

/* Growth of the server's RSS allowed across the attack. The attack sends about 4 MB of
 * requests of up to 8 MiB each; what the server holds after it must be its pools, not
 * the attack's bytes. ASan keeps freed memory in quarantine (256 MiB by default), so its
 * bound is that much looser. */
#ifdef SHOAL_ASAN
#define RSS_BOUND_MB 320
#else
#define RSS_BOUND_MB 48
#endif

typedef struct sink {
  pthread_mutex_t mu;
  uint64_t honest_batches, honest_samples, bad_content, other;
} sink;

/* The honest actor (id 1) sends obs = {seq, i, 0.5, -1}, action = i % 3. */
static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  sink *s = user;
  pthread_mutex_lock(&s->mu);
  if (b->actor_id != 1) {
    s->other++;
  } else {
    const float *obs = b->cols[0].data;
    const int32_t *act = b->cols[1].data;
    for (uint32_t i = 0; i < b->n; i++)
      if (obs[4 * i] != (float)b->seq || obs[4 * i + 1] != (float)i || act[i] != (int32_t)(i % 3))
        s->bad_content++;
    s->honest_batches++;
    s->honest_samples += b->n;
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static const rpc_spec spec = {
    .run_id = RUN,
    .max_items = 64,
    .ncols = 3,
    .cols = {
        {.name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}},
        {.name = "action", .dtype = RPC_I32, .ndim = 0},
        {.name = "frames", .dtype = RPC_U8, .ndim = 3, .shape = {4, 8, 8}, .frame_stack = true}}};

/* ---- the honest actor: this program with --actor PORT FILE --------------------- */

/* Pushes a batch every 15 ms until SIGUSR1 (the attack is over), then closes, writes
 * the number it pushed into FILE, and exits 0 when every batch was delivered. */
static volatile sig_atomic_t stop_pushing;
static void on_usr1(int sig) {
  (void)sig;
  stop_pushing = 1;
}

static int actor_main(int port, const char *report) {
  signal(SIGUSR1, on_usr1);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  rpc_client_config cc = {
      .target = target, .run_id = RUN, .actor_id = 1, .token = TOKEN, .backoff_max_s = 0.5};
  rpc_client *c;
  shoal_error err = {0};
  if (rpc_client_create(&cc, &c, &err)) {
    fprintf(stderr, "actor: %s\n", err.msg);
    return 1;
  }
  static float obs[NB * 4];
  static int32_t act[NB];
  static uint8_t frames[NB * 256];
  int rc = 0;
  int k = 1;
  for (; !stop_pushing && k <= 100000 && !rc; k++) {
    for (int i = 0; i < NB; i++) {
      obs[4 * i] = (float)k;
      obs[4 * i + 1] = (float)i;
      obs[4 * i + 2] = 0.5f;
      obs[4 * i + 3] = -1.0f;
      act[i] = i % 3;
    }
    rpc_batch b = {.n = NB, .ncols = 3, .policy_version = 1};
    b.cols[0] = (rpc_column){
        .name = "obs", .dtype = RPC_F32, .ndim = 1, .shape = {4}, .data = obs, .bytes = sizeof obs};
    b.cols[1] = (rpc_column){.name = "action", .dtype = RPC_I32, .data = act, .bytes = sizeof act};
    b.cols[2] = (rpc_column){.name = "frames",
                             .dtype = RPC_U8,
                             .ndim = 3,
                             .shape = {4, 8, 8},
                             .data = frames,
                             .bytes = sizeof frames};
    rc = rpc_client_push(c, &b, &err);
    usleep(15000); /* spread over the attack (~9 s) */
  }
  if (rc) fprintf(stderr, "actor: push: %s\n", err.msg);
  rpc_client_stats st;
  int crc = rpc_client_close(c, 60.0, &st, &err);
  printf(
      "actor: pushed %llu delivered %llu rejected %llu undelivered %llu streams %llu "
      "reconnects %llu last_status %d\n",
      (unsigned long long)st.pushed, (unsigned long long)st.delivered,
      (unsigned long long)st.rejected, (unsigned long long)st.undelivered,
      (unsigned long long)st.streams, (unsigned long long)st.reconnects, st.last_status);
  FILE *f = fopen(report, "w");
  if (f) {
    fprintf(f, "%llu\n", (unsigned long long)st.pushed);
    fclose(f);
  }
  return !rc && !crc && st.delivered == st.pushed && st.rejected == 0 && st.undelivered == 0 ? 0
                                                                                             : 1;
}

static char self_path[4096] = "/proc/self/exe";
static pid_t actor_pid; /* killed after a failed test, so no orphan keeps pushing */

static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') v = strtol(line + n + 1, NULL, 10);
  fclose(f);
  return v;
}

static int wait_exit(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_attack_beside_honest_actor(void **state) {
  (void)state;
  const char *py = getenv("SHOAL_PYTHON");
  if (!py || !py[0]) py = SHOAL_PYTHON;
  if (access(py, X_OK)) {
    printf("SKIPPED: no python at %s\n", py);
    exit(77);
  }
  const char *src = getenv("SHOAL_SOURCE_DIR");
  char script[4096];
  snprintf(script, sizeof script, "%s/tests/malicious_client.py", src ? src : ".");

  sink s = {.mu = PTHREAD_MUTEX_INITIALIZER};
  rpc_server_config sc = {.listen = "127.0.0.1:0",
                          .token = TOKEN,
                          .on_batch = on_batch,
                          .user = &s,
                          .threads = 2,
                          .max_calls = 64,
                          .max_streams_per_conn = 8,
                          .idle_call_s = 1.5,
                          .handshake_timeout_s = 2.0,
                          .idle_conn_s = 30};
  rpc_server *srv;
  shoal_error err = {0};
  assert_int_equal(rpc_server_create(&sc, &spec, &srv, &err), 0);
  int port = rpc_server_port(srv);

  char ps[16], report[] = "/tmp/shoal-malicious-XXXXXX";
  snprintf(ps, sizeof ps, "%d", port);
  int rfd = mkstemp(report);
  assert_true(rfd >= 0);
  close(rfd);
  fflush(stdout);
  pid_t actor = fork();
  if (actor == 0) {
    execl(self_path, "test_malicious", "--actor", ps, report, (char *)NULL);
    _exit(127);
  }
  assert_true(actor > 0);
  actor_pid = actor;
  /* The actor is streaming before the attack starts. */
  for (double t0 = shoal_now_s(); shoal_now_s() - t0 < 20;) {
    pthread_mutex_lock(&s.mu);
    uint64_t got = s.honest_batches;
    pthread_mutex_unlock(&s.mu);
    if (got >= 20) break;
    usleep(10000);
  }
  long rss0 = status_kb("VmRSS"), hwm0 = status_kb("VmHWM");
  assert_true(rss0 > 0);

  char cmd[8192];
  snprintf(cmd, sizeof cmd, "timeout 120 %s %s --port %d --token %s --run %s 2>&1", py, script,
           port, TOKEN, RUN);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[1024];
  int cases = 0, all_ok = 0;
  while (fgets(line, sizeof line, p)) {
    fputs(line, stdout);
    if (!strncmp(line, "CASE ", 5)) cases++;
    if (!strncmp(line, "ALL OK", 6)) all_ok = 1;
  }
  int prc = pclose(p);
  assert_int_equal(prc, 0);
  assert_true(all_ok);

  kill(actor, SIGUSR1);
  int arc = wait_exit(actor);
  actor_pid = 0;
  unsigned long long pushed = 0;
  FILE *rf = fopen(report, "r");
  if (rf) {
    if (fscanf(rf, "%llu", &pushed) != 1) pushed = 0;
    fclose(rf);
  }
  unlink(report);
  long rss1 = status_kb("VmRSS"), hwm1 = status_kb("VmHWM");
  rpc_server_stats st;
  rpc_server_stats_get(srv, &st);
  printf(
      "malicious: %d cases survived; honest actor %llu/%llu batches; server rejected %llu "
      "wrong_run %llu unauthenticated %llu idle_cancelled %llu over_limit %llu aborted %llu; "
      "RSS %ld -> %ld kB (+%ld), peak %ld -> %ld kB (+%ld), bound %d MB\n",
      cases, (unsigned long long)s.honest_batches, pushed, (unsigned long long)st.rejected,
      (unsigned long long)st.wrong_run, (unsigned long long)st.unauthenticated,
      (unsigned long long)st.idle_cancelled, (unsigned long long)st.over_limit,
      (unsigned long long)st.streams_aborted, rss0, rss1, rss1 - rss0, hwm0, hwm1, hwm1 - hwm0,
      RSS_BOUND_MB);
  assert_int_equal(arc, 0);
  assert_true(pushed >= 100); /* it pushed all through the attack */
  assert_int_equal(s.honest_batches, pushed);
  assert_int_equal(s.honest_samples, (uint64_t)pushed * NB);
  assert_int_equal(s.bad_content, 0);
  /* Only the two valid batches of the "nan after valid" stream came from the attacker. */
  assert_true(s.other <= 2);
  assert_true(st.unauthenticated >= 6);
  assert_true(st.rejected >= 400 + 16);
  assert_true(st.wrong_run >= 1);
  assert_true(st.idle_cancelled >= 20 + 16); /* trickled streams and idle ones */
  assert_true(st.over_limit >= 1);           /* 80 idle streams > max_calls 64 */
  assert_true(rss1 - rss0 < RSS_BOUND_MB * 1024L);
  assert_true(hwm1 - hwm0 < RSS_BOUND_MB * 1024L);
  rpc_server_destroy(srv, 2.0);
}

int main(int argc, char **argv) {
  if (argc >= 4 && !strcmp(argv[1], "--actor")) return actor_main(atoi(argv[2]), argv[3]);
  if (argv[0] && strchr(argv[0], '/')) snprintf(self_path, sizeof self_path, "%s", argv[0]);
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attack_beside_honest_actor),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (actor_pid > 0) {
    kill(actor_pid, SIGKILL);
    wait_exit(actor_pid);
  }
  return rc;
}
