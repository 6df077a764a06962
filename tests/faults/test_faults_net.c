/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Network faults between hosts: the learner and two fault_pushers run as separate
 * hosts in network namespaces joined by a veth pair (10.77.x.1 learner, 10.77.x.2
 * actors), made by the test (needs CAP_NET_ADMIN; SKIPPED with exit 77 without it).
 *
 * Faults, each for a few seconds, with the throughput (batches acknowledged per second,
 * from the pushers' logs) during the fault and the recovery time after it:
 *   cut      ip link set down / up on the actors' side of the veth
 *   delay    50 ms each way
 *   loss     netem 5% packet loss; without netem, the proxy resets 1 connection in 50
 *            chunks (what heavy loss does to a TCP stream: it breaks)
 *   stall    the path passes nothing (netem: 100% loss; proxy: holds every byte)
 *   rate     tbf 2 Mbit/s on the veth
 * netem is used when the kernel has it (sch_netem); otherwise delay, loss and stall
 * come from a fault-injecting TCP proxy of the test's own between the pushers and the
 * veth, in the actors' namespace. A FAULTS line says which ran.
 *
 * Afterwards the learner's saved replay is read back: no batch twice, none partial,
 * every acknowledged batch present (the learner never restarts here, so nothing may
 * be lost).
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
// cmocka after the standard headers
#include <cmocka.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>

#include "tests/proc_util.h"
#include "tests/faults/faults_util.h"

enum { LPORT = 50551, PPORT = 50552, ACTORS = 2, ROWS = 32 };

static char nsL[32], nsA[32], ifL[16], ifA[16], ipL[32], ipA[32];
static bool have_ns, use_netem;

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

/* ---- the fault-injecting proxy (a child in the actors' namespace) ---------------- */

typedef struct proxy_ctl {
  atomic_int delay_ms;  /* added to every chunk, each direction */
  atomic_int rst_per_k; /* chunks in 1000 that reset their connection */
  atomic_int stall;     /* 1: hold every byte */
  atomic_llong chunks, resets, accepts, upstream_fail, open_conns;
} proxy_ctl;
static proxy_ctl *ctl; /* shared memory: the test sets, the proxy reads */

typedef struct chunk {
  struct chunk *next;
  double due;
  size_t len;
  char data[];
} chunk;

typedef struct pipe_dir {
  int from, to;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  chunk *head, *tail;
  size_t queued;
  bool eof, dead;
  struct pipe_dir *peer;
} pipe_dir;

static double mono(void) { return shoal_now_s(); }

static void kill_conn(pipe_dir *d) {
  /* A reset, as a broken path ends a connection: SO_LINGER 0 then close sends RST. */
  struct linger lg = {1, 0};
  setsockopt(d->from, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  setsockopt(d->to, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  shutdown(d->from, SHUT_RDWR);
  shutdown(d->to, SHUT_RDWR);
}

static void *reader(void *arg) {
  pipe_dir *d = arg;
  for (;;) {
    chunk *c = malloc(sizeof *c + 65536);
    ssize_t n = read(d->from, c->data, 65536);
    if (n <= 0) {
      free(c);
      break;
    }
    c->len = (size_t)n;
    c->due = mono() + atomic_load(&ctl->delay_ms) * 1e-3;
    c->next = NULL;
    pthread_mutex_lock(&d->mu);
    while (d->queued > (8u << 20) && !d->dead) pthread_cond_wait(&d->cv, &d->mu);
    if (d->tail)
      d->tail->next = c;
    else
      d->head = c;
    d->tail = c;
    d->queued += c->len;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
  }
  pthread_mutex_lock(&d->mu);
  d->eof = true;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void *writer(void *arg) {
  pipe_dir *d = arg;
  shoal_rng rng;
  shoal_rng_seed(&rng, (uint64_t)(uintptr_t)d ^ (uint64_t)time(NULL));
  for (;;) {
    pthread_mutex_lock(&d->mu);
    while (!d->head && !d->eof) pthread_cond_wait(&d->cv, &d->mu);
    chunk *c = d->head;
    if (!c) {
      pthread_mutex_unlock(&d->mu);
      break;
    }
    d->head = c->next;
    if (!d->head) d->tail = NULL;
    d->queued -= c->len;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    while (atomic_load(&ctl->stall) || mono() < c->due) usleep(500);
    atomic_fetch_add(&ctl->chunks, 1);
    int k = atomic_load(&ctl->rst_per_k);
    if (k > 0 && (int)shoal_rng_below(&rng, 1000) < k) {
      atomic_fetch_add(&ctl->resets, 1);
      free(c);
      kill_conn(d);
      break;
    }
    size_t off = 0;
    while (off < c->len) {
      ssize_t w = send(d->to, c->data + off, c->len - off, MSG_NOSIGNAL);
      if (w <= 0) break;
      off += (size_t)w;
    }
    bool failed = off < c->len;
    free(c);
    if (failed) break;
  }
  kill_conn(d);
  pthread_mutex_lock(&d->mu);
  d->dead = true;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void *conn_main(void *arg) {
  atomic_fetch_add(&ctl->open_conns, 1);
  int *fds = arg;
  pipe_dir up = {.from = fds[0], .to = fds[1]}, down = {.from = fds[1], .to = fds[0]};
  free(fds);
  pipe_dir *ds[2] = {&up, &down};
  pthread_t t[4];
  for (int i = 0; i < 2; i++) {
    pthread_mutex_init(&ds[i]->mu, NULL);
    pthread_cond_init(&ds[i]->cv, NULL);
    pthread_create(&t[2 * i], NULL, reader, ds[i]);
    pthread_create(&t[2 * i + 1], NULL, writer, ds[i]);
  }
  /* A writer that ends wakes its reader by the shutdown in kill_conn. */
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    while (ds[i]->head) {
      chunk *c = ds[i]->head;
      ds[i]->head = c->next;
      free(c);
    }
  }
  close(up.from);
  close(up.to);
  atomic_fetch_sub(&ctl->open_conns, 1);
  return NULL;
}

static int proxy_main(void) {
  signal(SIGPIPE, SIG_IGN); /* a write to a reset peer is an error, not the proxy's death */
  char path[128];
  snprintf(path, sizeof path, "/var/run/netns/%s", nsA);
  int nfd = open(path, O_RDONLY);
  if (nfd < 0 || setns(nfd, CLONE_NEWNET)) return 1;
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PPORT)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 64)) return 1;
  struct sockaddr_in up = {.sin_family = AF_INET, .sin_port = htons(LPORT)};
  inet_pton(AF_INET, ipL, &up.sin_addr);
  for (;;) {
    int c = accept(ls, NULL, NULL);
    if (c < 0) continue;
    atomic_fetch_add(&ctl->accepts, 1);
    int u = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(u, (struct sockaddr *)&up, sizeof up)) {
      atomic_fetch_add(&ctl->upstream_fail, 1);
      close(u);
      close(c);
      continue;
    }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int *fds = malloc(2 * sizeof *fds);
    fds[0] = c, fds[1] = u;
    pthread_t t;
    pthread_create(&t, NULL, conn_main, fds);
    pthread_detach(t);
  }
}

/* ---- measuring ------------------------------------------------------------------ */

static fault_log *logs[ACTORS];

static uint64_t delivered(void) {
  uint64_t n = 0;
  for (int a = 0; a < ACTORS; a++) n += logs[a]->delivered;
  return n;
}

/* Batches acknowledged per second over s seconds. */
static double rate_over(double s) {
  uint64_t d0 = delivered();
  double t0 = shoal_now_s();
  sleep_s(s);
  return (double)(delivered() - d0) / (shoal_now_s() - t0);
}

/* Seconds until every pusher has a new batch acknowledged (after a fault ends). */
static double recovery(void) {
  uint64_t at[ACTORS];
  for (int a = 0; a < ACTORS; a++) at[a] = logs[a]->delivered;
  double t0 = shoal_now_s();
  for (;;) {
    bool all = true;
    for (int a = 0; a < ACTORS; a++) all &= logs[a]->delivered > at[a];
    if (all) return shoal_now_s() - t0;
    if (shoal_now_s() - t0 > 30) {
      char cmd[4800];
      snprintf(cmd, sizeof cmd, "ip netns exec %s %s status %s:%d --interval 0 --json", nsL,
               wf_shoal, ipL, LPORT);
      fflush(stdout);
      system(cmd);
      printf("proxy: accepts %lld upstream failures %lld open %lld\n",
             (long long)atomic_load(&ctl->accepts), (long long)atomic_load(&ctl->upstream_fail),
             (long long)atomic_load(&ctl->open_conns));
      printf("last gRPC status %lld / %lld\n", (long long)logs[0]->last_status,
             (long long)logs[1]->last_status);
      fail_msg(
          "no recovery within 30 s: delivered %llu/%llu pushed %llu/%llu reconnects "
          "%llu/%llu; proxy chunks %lld resets %lld",
          (unsigned long long)logs[0]->delivered, (unsigned long long)logs[1]->delivered,
          (unsigned long long)logs[0]->pushed, (unsigned long long)logs[1]->pushed,
          (unsigned long long)logs[0]->reconnects, (unsigned long long)logs[1]->reconnects,
          (long long)atomic_load(&ctl->chunks), (long long)atomic_load(&ctl->resets));
    }
    usleep(5000);
  }
}

static void netem(const char *args) {
  if (args)
    assert_int_equal(sh("ip netns exec %s tc qdisc replace dev %s root netem %s", nsA, ifA, args),
                     0);
  else
    sh("ip netns exec %s tc qdisc del dev %s root 2>/dev/null", nsA, ifA);
}

static void test_net(void **state) {
  (void)state;
  if (!have_ns) skip();
  char cfg[600], uri[600];
  snprintf(cfg, sizeof cfg, "%s/net.yaml", wf_dir);
  snprintf(uri, sizeof uri, "file://%s/runs", wf_dir);
  fu_write_config(cfg, uri, ACTORS, 2.0, "");
  fu_init(cfg, "net1");

  /* The learner host. */
  char bin[4200], listen[64];
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  snprintf(listen, sizeof listen, "learner.listen=%s:%d", ipL, LPORT);
  char *largv[] = {"/usr/sbin/ip",
                   "netns",
                   "exec",
                   nsL,
                   bin,
                   "--config",
                   cfg,
                   "--run",
                   "net1",
                   "--set",
                   listen,
                   "--set",
                   "learner.replay_ratio=0.05",
                   /* A private pair of namespaces: no token, said so. */
                   "--set",
                   "learner.insecure=true",
                   NULL};
  if (access(largv[0], X_OK)) largv[0] = "/sbin/ip";
  wf_proc L;
  fu_start(&L, largv);
  free(wf_wait_text(L.out, "\"event\":\"listening\"", 60));

  /* The proxy, when there is no netem, in the actors' namespace. */
  pid_t proxy = 0;
  char target[64];
  if (use_netem) {
    snprintf(target, sizeof target, "%s:%d", ipL, LPORT);
  } else {
    fflush(stdout);
    proxy = fork();
    if (proxy == 0) _exit(proxy_main());
    fu_track(proxy);
    snprintf(target, sizeof target, "127.0.0.1:%d", PPORT);
    sleep_s(0.3);
  }
  /* The actor host: two pushers at 400 batches/s each, more than a slowed path takes. */
  char pbin[4200];
  snprintf(pbin, sizeof pbin, "%s/tests/fault_pusher", getenv("SHOAL_BINARY_DIR"));
  wf_proc P[ACTORS];
  char logp[ACTORS][600];
  for (int a = 0; a < ACTORS; a++) {
    char as[8];
    snprintf(as, sizeof as, "%d", a);
    snprintf(logp[a], sizeof logp[a], "%s/netlog-%d", wf_dir, a);
    char *pargv[] = {largv[0], "netns",  "exec", nsA,       pbin,    "--learner",
                     target,   "--run",  "net1", "--actor", as,      "--gen",
                     "0",      "--rate", "400",  "--log",   logp[a], NULL};
    fu_start(&P[a], pargv);
  }
  sleep_s(0.5);
  for (int a = 0; a < ACTORS; a++) assert_non_null(logs[a] = fu_log_map(logp[a]));
  sleep_s(1.5);
  double base = rate_over(3.0);
  printf("FAULTS net mode=%s baseline=%.0f batches/s (%d rows each)\n",
         use_netem ? "netem" : "proxy", base, ROWS);
  assert_true(base > 100);

  /* Link cut. */
  assert_int_equal(sh("ip netns exec %s ip link set %s down", nsA, ifA), 0);
  double during = rate_over(3.0);
  assert_int_equal(sh("ip netns exec %s ip link set %s up", nsA, ifA), 0);
  double rec = recovery(), after = rate_over(2.0);
  printf("FAULTS net fault=cut_3s during=%.0f/s recovery_s=%.2f after=%.0f/s\n", during, rec,
         after);
  assert_true(during < 0.1 * base);
  assert_true(after > 0.5 * base);

  /* Delay 50 ms each way. */
  if (use_netem)
    netem("delay 50ms");
  else
    atomic_store(&ctl->delay_ms, 50);
  during = rate_over(3.0);
  if (use_netem)
    netem(NULL);
  else
    atomic_store(&ctl->delay_ms, 0);
  rec = recovery(), after = rate_over(2.0);
  printf(
      "FAULTS net fault=delay_50ms during=%.0f/s (%.2f of baseline) recovery_s=%.2f "
      "after=%.0f/s\n",
      during, during / base, rec, after);
  assert_true(during > 0);

  /* Loss. */
  if (use_netem)
    netem("loss 5%");
  else
    atomic_store(&ctl->rst_per_k, 20);
  during = rate_over(3.0);
  if (use_netem)
    netem(NULL);
  else
    atomic_store(&ctl->rst_per_k, 0);
  rec = recovery(), after = rate_over(2.0);
  printf(
      "FAULTS net fault=%s during=%.0f/s (%.2f of baseline) recovery_s=%.2f after=%.0f/s "
      "resets=%lld\n",
      use_netem ? "loss_5pct" : "rst_2pct_of_chunks", during, during / base, rec, after,
      use_netem ? 0LL : (long long)atomic_load(&ctl->resets));
  assert_true(during > 0);

  /* Stall: nothing passes, nothing is closed. */
  if (use_netem)
    netem("loss 100%");
  else
    atomic_store(&ctl->stall, 1);
  during = rate_over(3.0);
  if (use_netem)
    netem(NULL);
  else
    atomic_store(&ctl->stall, 0);
  rec = recovery(), after = rate_over(2.0);
  printf("FAULTS net fault=stall_3s during=%.0f/s recovery_s=%.2f after=%.0f/s\n", during, rec,
         after);
  assert_true(during < 0.1 * base);

  /* Bandwidth: tbf on the veth (2 Mbit/s: about 120 batches/s of 2 KiB). */
  assert_int_equal(sh("ip netns exec %s tc qdisc replace dev %s root tbf rate 2mbit burst 32kbit "
                      "latency 400ms",
                      nsA, ifA),
                   0);
  during = rate_over(3.0);
  sh("ip netns exec %s tc qdisc del dev %s root", nsA, ifA);
  rec = recovery(), after = rate_over(2.0);
  printf(
      "FAULTS net fault=tbf_2mbit during=%.0f/s (%.2f of baseline) recovery_s=%.2f "
      "after=%.0f/s\n",
      during, during / base, rec, after);
  assert_true(during < 0.8 * base);
  assert_true(after > 0.5 * base);

  /* Stop: pushers flush, the learner saves its replay. */
  for (int a = 0; a < ACTORS; a++) kill(P[a].pid, SIGTERM);
  for (int a = 0; a < ACTORS; a++) assert_int_equal(wf_wait(&P[a], 30), 0);
  kill(L.pid, SIGTERM);
  assert_int_equal(wf_wait(&L, 60), 0);
  if (proxy > 0) {
    kill(proxy, SIGKILL);
    waitpid(proxy, NULL, 0);
  }

  /* Nothing twice, nothing partial, nothing acknowledged missing. */
  fu_row *rows;
  size_t n = fu_log_rows(uri, "net1", &rows);
  uint32_t *mask = calloc((size_t)ACTORS * FAULT_LOG_SEQS, sizeof *mask);
  size_t dup = 0, bad = 0, partial = 0, missing = 0, present = 0;
  for (size_t i = 0; i < n; i++) {
    int a = (int)rows[i].obs[0], s = (int)rows[i].obs[2], r = (int)rows[i].obs[3];
    if (a < 0 || a >= ACTORS || rows[i].obs[1] != 0 || s < 1 || s >= FAULT_LOG_SEQS || r < 0 ||
        r >= ROWS) {
      bad++;
      continue;
    }
    uint32_t *m = &mask[(size_t)a * FAULT_LOG_SEQS + (size_t)s];
    dup += (*m >> r) & 1;
    *m |= 1u << r;
  }
  for (int a = 0; a < ACTORS; a++)
    for (uint64_t s = 1; s < FAULT_LOG_SEQS; s++) {
      uint32_t m = mask[(size_t)a * FAULT_LOG_SEQS + s];
      if (m && m != 0xffffffffu) partial++;
      if (m == 0xffffffffu) present++;
      if (s <= logs[a]->delivered && m != 0xffffffffu) missing++;
    }
  uint64_t acked = delivered(), dups_seen = logs[0]->duplicates + logs[1]->duplicates;
  printf(
      "FAULTS net accounting acked=%llu present=%zu missing=%zu dup_rows=%zu partial=%zu "
      "bad_rows=%zu resends_dropped_by_learner=%llu\n",
      (unsigned long long)acked, present, missing, dup, partial, bad,
      (unsigned long long)dups_seen);
  assert_int_equal(missing, 0);
  assert_int_equal(dup, 0);
  assert_int_equal(partial, 0);
  assert_int_equal(bad, 0);
  assert_true(present >= acked);
  free(rows);
  free(mask);
  for (int a = 0; a < ACTORS; a++) munmap(logs[a], sizeof *logs[a]);
}

static int setup(void **state) {
  (void)state;
  if (wf_setup("faults-net")) return -1;
  int id = getpid() % 200 + 20;
  snprintf(nsL, sizeof nsL, "shoalL%d", getpid());
  snprintf(nsA, sizeof nsA, "shoalA%d", getpid());
  snprintf(ifL, sizeof ifL, "shL%d", getpid() % 100000);
  snprintf(ifA, sizeof ifA, "shA%d", getpid() % 100000);
  snprintf(ipL, sizeof ipL, "10.77.%d.1", id);
  snprintf(ipA, sizeof ipA, "10.77.%d.2", id);
  have_ns = geteuid() == 0 && sh("ip netns add %s 2>/dev/null", nsL) == 0;
  if (have_ns) {
    have_ns = sh("ip netns add %s", nsA) == 0 &&
              sh("ip link add %s type veth peer name %s", ifL, ifA) == 0 &&
              sh("ip link set %s netns %s && ip link set %s netns %s", ifL, nsL, ifA, nsA) == 0 &&
              sh("ip netns exec %s ip addr add %s/24 dev %s", nsL, ipL, ifL) == 0 &&
              sh("ip netns exec %s ip addr add %s/24 dev %s", nsA, ipA, ifA) == 0 &&
              sh("ip netns exec %s ip link set %s up && ip netns exec %s ip link set lo up", nsL,
                 ifL, nsL) == 0 &&
              sh("ip netns exec %s ip link set %s up && ip netns exec %s ip link set lo up", nsA,
                 ifA, nsA) == 0;
  }
  if (!have_ns) {
    printf(
        "SKIPPED: test_faults_net: cannot make network namespaces (needs CAP_NET_ADMIN and "
        "`ip netns`)\n");
    return 0;
  }
  use_netem =
      sh("ip netns exec %s tc qdisc add dev %s root netem delay 1ms 2>/dev/null", nsA, ifA) == 0;
  if (use_netem) sh("ip netns exec %s tc qdisc del dev %s root", nsA, ifA);
  ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(ctl != MAP_FAILED);
  memset(ctl, 0, sizeof *ctl);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (have_ns) {
    sh("ip netns del %s 2>/dev/null", nsA);
    sh("ip netns del %s 2>/dev/null", nsL);
  }
  return wf_teardown();
}

int main(void) {
  const struct CMUnitTest all[] = {cmocka_unit_test_teardown(test_net, fu_kill_all)};
  int rc = cmocka_run_group_tests_name("faults_net", all, setup, teardown);
  return rc == 0 && !have_ns ? 77 : rc;
}
