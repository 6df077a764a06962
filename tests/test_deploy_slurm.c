/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_deploy_slurm.c — deploy/slurm/shoal.sbatch under a real Slurm (Debian's
 * slurm-wlm 22.05 and munge): a private one-node cluster in the test's folder (its own
 * munge key and socket, slurm.conf, state, spool, logs and free ports; SLURM_CONF points
 * at it, so no system cluster is touched), then:
 *   apex_solved / onpolicy_solved: `sbatch` of an Ape-X and a PPO config on a node of
 *     2 CPUs (learner and one actor share it); the job completes, the run is solved and
 *     stored (snapshot, metrics), `shoal eval` plays the stored policy;
 *   actor_restart_and_requeue: in a run bounded by run.max_seconds, the actor process is
 *     killed (SIGKILL) and the script starts it again and training goes on; then
 *     `scontrol requeue` and the run resumes from its snapshot, counters continuing.
 * Needs root (the daemons run as root) and the slurm-wlm and munge binaries; without
 * them it says SKIPPED. Every daemon it starts is stopped in teardown, and by a watcher
 * process if the test itself dies. Labelled slurm: the sanitizer build skips it. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "store/store.h"
#include "proc_util.h"

static const char *daemons[] = {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"};
static wf_proc daemon_proc[3];
static char conf[400], conf_env[420], runs_uri[400], host[256];
static pid_t watcher;
static int watcher_fd = -1;

/* A TCP port free on every interface now (the daemons bind it a moment later). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* Runs a Slurm client against the private cluster; returns its output (caller frees). */
static char *slurm_cmd(int *rc, const char *prog, ...) {
  char *argv[32];
  int n = 0;
  argv[n++] = (char *)prog;
  va_list ap;
  va_start(ap, prog);
  while (n < 31 && (argv[n] = va_arg(ap, char *))) n++;
  va_end(ap);
  argv[n] = NULL;
  return wf_run(argv, 30, rc);
}

/* True when /proc/pid's environment holds SLURM_CONF=conf or its command line holds
 * wf_dir: a process of this cluster (a slurmstepd, a job's script or program). */
static bool of_this_cluster(long pid) {
  const char *files[] = {"environ", "cmdline"}, *want[] = {conf_env, wf_dir};
  for (int k = 0; k < 2; k++) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/%s", pid, files[k]);
    size_t n;
    char *s = wf_slurp(path, &n);
    bool hit = false;
    for (size_t i = 0; i < n && !hit; i += strlen(s + i) + 1) hit = strstr(s + i, want[k]);
    free(s);
    if (hit) return true;
  }
  return false;
}

/* True while a process of the cluster other than its daemons is alive. */
static bool cluster_jobs_left(void) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  bool left = false;
  while (d && (e = readdir(d)) && !left) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 1 || pid == getpid() || pid == watcher) continue;
    bool daemon = false;
    for (int k = 0; k < 3; k++) daemon |= pid == daemon_proc[k].pid;
    left = !daemon && of_this_cluster(pid);
  }
  if (d) closedir(d);
  return left;
}

/* Stops what this test started: the cluster's jobs, the daemons, then any process left
 * of the cluster (slurmstepd outlives slurmd). Bounded; called by teardown and by the
 * watcher when the test dies. Never fails. */
static void stop_cluster(void) {
  if (daemon_proc[1].pid > 0 && kill(daemon_proc[1].pid, 0) == 0) {
    char *argv[] = {"/usr/bin/scancel", "--user=root", NULL};
    pid_t p = fork();
    if (p == 0) {
      int fd = open("/dev/null", O_WRONLY);
      dup2(fd, 1);
      dup2(fd, 2);
      execv(argv[0], argv);
      _exit(127);
    }
    for (int i = 0; p > 0 && i < 200 && waitpid(p, NULL, WNOHANG) == 0; i++) usleep(50000);
    if (p > 0) kill(p, SIGKILL), waitpid(p, NULL, 0);
    /* The jobs end by themselves while slurmd still runs; 20 s at most. */
    for (int i = 0; i < 200 && cluster_jobs_left(); i++) usleep(100000);
  }
  for (int k = 2; k >= 0; k--) {
    pid_t p = daemon_proc[k].pid;
    if (p <= 0) continue;
    kill(p, SIGTERM);
    int i = 0;
    while (i++ < 100 && waitpid(p, NULL, WNOHANG) == 0 && kill(p, 0) == 0) usleep(50000);
    if (kill(p, 0) == 0) kill(p, SIGKILL), waitpid(p, NULL, 0);
    daemon_proc[k].pid = 0;
  }
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d))) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 1 || pid == getpid() || pid == watcher) continue;
    if (of_this_cluster(pid) && kill((pid_t)pid, SIGKILL) == 0)
      fprintf(stderr, "stop_cluster: killed %ld, left over\n", pid);
  }
  if (d) closedir(d);
}

/* A process that outlives the test only to stop the cluster should the test die
 * (a crash, ctest's timeout): it waits for the pipe to close. */
static void start_watcher(void) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return; /* the programs the test runs must not hold it */
  fflush(stdout);
  watcher = fork();
  if (watcher == 0) {
    close(fds[1]);
    setsid();
    char c = 0;
    while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    if (c != 'x') stop_cluster(); /* 'x': teardown stopped it already */
    _exit(0);
  }
  close(fds[0]);
  watcher_fd = fds[1];
}

static int write_file(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  fclose(f);
  return chmod(path, mode);
}

static int start_cluster(void) {
  char dir[512], p[600];
  const char *sub[] = {"munge", "state", "spool", "log"};
  for (int i = 0; i < 4; i++) {
    snprintf(dir, sizeof dir, "%s/%s", wf_dir, sub[i]);
    if (mkdir(dir, 0700) != 0) return -1;
  }
  /* munge: a key of 1024 random bytes, readable by its owner only (munged checks). */
  unsigned char key[1024];
  FILE *r = fopen("/dev/urandom", "rb");
  if (!r || fread(key, 1, sizeof key, r) != sizeof key) return -1;
  fclose(r);
  snprintf(p, sizeof p, "%s/munge/munge.key", wf_dir);
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(key, 1, sizeof key, f) != sizeof key) return -1;
  fclose(f);
  chmod(p, 0400);
  char sock[600], key_arg[640], sock_arg[640], log_arg[640], pid_arg[640], seed_arg[640];
  snprintf(sock, sizeof sock, "%s/munge/munge.socket", wf_dir);
  snprintf(key_arg, sizeof key_arg, "--key-file=%s", p);
  snprintf(sock_arg, sizeof sock_arg, "--socket=%s", sock);
  snprintf(log_arg, sizeof log_arg, "--log-file=%s/log/munged.log", wf_dir);
  snprintf(pid_arg, sizeof pid_arg, "--pid-file=%s/munge/munged.pid", wf_dir);
  snprintf(seed_arg, sizeof seed_arg, "--seed-file=%s/munge/munged.seed", wf_dir);
  /* --force: munged refuses root otherwise; -F: in the foreground, as this test's child. */
  char *margv[] = {(char *)daemons[0], "-F", "--force", key_arg, sock_arg, log_arg, pid_arg,
                   seed_arg,           NULL};
  wf_start(&daemon_proc[0], margv);
  for (int i = 0; i < 200 && access(sock, F_OK) != 0; i++) usleep(50000);
  if (access(sock, F_OK) != 0) {
    fprintf(stderr, "munged did not make its socket %s; see %s\n", sock, daemon_proc[0].out);
    return -1;
  }

  gethostname(host, sizeof host);
  host[strcspn(host, ".")] = 0;
  int ctld_port = free_port(), d_port = free_port();
  if (ctld_port < 0 || d_port < 0 || ctld_port == d_port) return -1;
  char text[4096];
  /* What works on a one-node test cluster in a container: no cgroups (linuxproc, task/none),
   * CR_Core so steps get CPUs of their own, one node of 2 CPUs. KillWait 20: a requeued
   * learner's stop (its last snapshot) must end before SIGKILL, else its lease stays
   * "stopping" and the requeued learner waits for it. */
  snprintf(text, sizeof text,
           "ClusterName=shoaltest\n"
           "SlurmctldHost=%s\n"
           "SlurmctldPort=%d\n"
           "SlurmdPort=%d\n"
           "SlurmUser=root\n"
           "SlurmdUser=root\n"
           "AuthType=auth/munge\n"
           "CredType=cred/munge\n"
           "AuthInfo=socket=%s\n"
           "ProctrackType=proctrack/linuxproc\n"
           "TaskPlugin=task/none\n"
           "JobAcctGatherType=jobacct_gather/none\n"
           "SelectType=select/cons_tres\n"
           "SelectTypeParameters=CR_Core\n"
           "MpiDefault=none\n"
           "ReturnToService=2\n"
           "KillWait=20\n"
           "StateSaveLocation=%s/state\n"
           "SlurmdSpoolDir=%s/spool\n"
           "SlurmctldPidFile=%s/slurmctld.pid\n"
           "SlurmdPidFile=%s/slurmd.pid\n"
           "SlurmctldLogFile=%s/log/slurmctld.log\n"
           "SlurmdLogFile=%s/log/slurmd.log\n"
           "PlugStackConfig=%s/plugstack.conf\n"
           "NodeName=%s CPUs=2 RealMemory=500 State=UNKNOWN\n"
           "PartitionName=shoal Nodes=%s Default=YES MaxTime=INFINITE State=UP\n",
           host, ctld_port, d_port, sock, wf_dir, wf_dir, wf_dir, wf_dir, wf_dir, wf_dir, wf_dir,
           host, host);
  snprintf(conf, sizeof conf, "%s/slurm.conf", wf_dir);
  snprintf(conf_env, sizeof conf_env, "SLURM_CONF=%s", conf);
  snprintf(p, sizeof p, "%s/plugstack.conf", wf_dir);
  if (write_file(conf, text, 0644) || write_file(p, "", 0644)) return -1;
  setenv("SLURM_CONF", conf, 1);
  char *cargv[] = {(char *)daemons[1], "-D", "-i", "-f", conf, NULL};
  wf_start(&daemon_proc[1], cargv);
  char *dargv[] = {(char *)daemons[2], "-D", "-f", conf, NULL};
  wf_start(&daemon_proc[2], dargv);
  start_watcher();
  for (int i = 0; i < 100; i++) {
    int rc;
    char *out = slurm_cmd(&rc, "/usr/bin/sinfo", "-h", "-o", "%t", NULL);
    bool idle = rc == 0 && strncmp(out, "idle", 4) == 0;
    free(out);
    if (idle) return 0;
    usleep(200000);
  }
  fprintf(stderr, "the node did not come up idle in 20 s; see %s/log\n", wf_dir);
  return -1;
}

static int setup(void **state) {
  if (wf_setup("slurm")) return -1;
  snprintf(runs_uri, sizeof runs_uri, "file://%s/runs", wf_dir);
  if (start_cluster() == 0) return 0;
  stop_cluster();
  return -1;
}

static int teardown(void **state) {
  stop_cluster();
  if (watcher > 0) {
    if (write(watcher_fd, "x", 1) != 1) kill(watcher, SIGKILL);
    close(watcher_fd);
    waitpid(watcher, NULL, 0);
  }
  return wf_teardown();
}

/* Submits deploy/slurm/shoal.sbatch for configs/config as run on one node of 2 CPUs
 * (the learner and one actor); returns the job id. The job's output goes to
 * out (wf_dir/job-RUN.out). */
static long submit(const char *config, const char *run, const char *sets, char *out, size_t cap) {
  char bin[4200], port[16], script[4200], cfg[4200], chdir_arg[300], out_arg[800], name[100];
  snprintf(bin, sizeof bin, "%s/bin", getenv("SHOAL_BINARY_DIR"));
  snprintf(port, sizeof port, "%d", free_port());
  setenv("SHOAL_BIN", bin, 1);
  setenv("SHOAL_STORE_URI", runs_uri, 1);
  setenv("SHOAL_PORT", port, 1);
  setenv("SHOAL_ACTORS", "1", 1);
  setenv("SHOAL_TOKEN", "slurm-test-token-7", 1);
  setenv("SHOAL_SET", sets, 1);
  snprintf(script, sizeof script, "%s/deploy/slurm/shoal.sbatch", wf_src);
  snprintf(cfg, sizeof cfg, "%s/configs/%s", wf_src, config);
  snprintf(chdir_arg, sizeof chdir_arg, "--chdir=%s", wf_dir);
  snprintf(out, cap, "%s/job-%s.out", wf_dir, run);
  snprintf(out_arg, sizeof out_arg, "--output=%s", out);
  snprintf(name, sizeof name, "--job-name=%s", run);
  int rc;
  char *o = slurm_cmd(&rc, "/usr/bin/sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2",
                      chdir_arg, out_arg, name, script, cfg, run, NULL);
  if (rc != 0) fail_msg("sbatch for %s: status %d: %s", run, rc, o);
  long id = atol(o);
  free(o);
  assert_true(id > 0);
  return id;
}

/* A field of `scontrol show job -o ID` (e.g. "JobState"); caller frees it. */
static char *job_field(long id, const char *field) {
  char ids[32];
  snprintf(ids, sizeof ids, "%ld", id);
  int rc;
  char *o = slurm_cmd(&rc, "/usr/bin/scontrol", "-o", "show", "job", ids, NULL);
  char key[64];
  snprintf(key, sizeof key, " %s=", field);
  const char *v = strstr(o, key);
  char *r = strndup(v ? v + strlen(key) : "", v ? strcspn(v + strlen(key), " \n") : 0);
  free(o);
  return r;
}

/* Fails with the job's output (less its progress lines) and the end of slurmctld's log:
 * what a failure here needs to be understood. */
static void fail_job(const char *out, const char *what) {
  char *text = wf_slurp(out, NULL), log[600];
  for (char *p; (p = strstr(text, "{\"event\":\"progress\""));) {
    char *eol = strchr(p, '\n');
    memmove(p, eol ? eol + 1 : p + strlen(p), strlen(eol ? eol + 1 : p + strlen(p)) + 1);
  }
  snprintf(log, sizeof log, "%s/log/slurmctld.log", wf_dir);
  size_t n;
  char *ctld = wf_slurp(log, &n);
  fail_msg("%s\n--- %s (progress lines left out):\n%s\n--- the end of %s:\n%s", what, out, text,
           log, ctld + (n > 3000 ? n - 3000 : 0));
}

/* Waits (bounded) for the job to leave PENDING/RUNNING/COMPLETING; returns its
 * final state (caller frees it). */
static char *wait_job(long id, double timeout_s, const char *out) {
  double t0 = shoal_now_s();
  for (;;) {
    char *st = job_field(id, "JobState");
    if (st[0] && strcmp(st, "PENDING") && strcmp(st, "RUNNING") && strcmp(st, "COMPLETING") &&
        strcmp(st, "CONFIGURING") && strcmp(st, "REQUEUED"))
      return st;
    free(st);
    if (shoal_now_s() - t0 > timeout_s) {
      char what[200];
      snprintf(what, sizeof what, "job %ld did not end within %.0f s", id, timeout_s);
      fail_job(out, what);
    }
    usleep(300000);
  }
}

/* Waits (bounded) for text in the job's output; returns the output (caller frees). */
static char *wait_job_text(const char *out, const char *text, double timeout_s) {
  double t0 = shoal_now_s();
  for (;;) {
    char *s = wf_slurp(out, NULL);
    if (strstr(s, text)) return s;
    free(s);
    if (shoal_now_s() - t0 > timeout_s) {
      char what[400];
      snprintf(what, sizeof what, "'%s' did not appear within %.0f s", text, timeout_s);
      fail_job(out, what);
    }
    usleep(50000);
  }
}

/* The env_steps of the last progress line in the job's output; -1 when none. */
static long long last_env_steps(const char *out) {
  char *s = wf_slurp(out, NULL);
  long long steps = -1;
  for (const char *p = s; (p = strstr(p, "{\"event\":\"progress\"")); p++) {
    const char *e = strstr(p, "\"env_steps\":");
    if (e) steps = atoll(e + strlen("\"env_steps\":"));
  }
  free(s);
  return steps;
}

/* Waits (bounded) for a progress line with env_steps >= at_least; returns them. */
static long long wait_env_steps(const char *out, long long at_least, double timeout_s) {
  double t0 = shoal_now_s();
  long long s;
  while ((s = last_env_steps(out)) < at_least) {
    if (shoal_now_s() - t0 > timeout_s) {
      char what[200];
      snprintf(what, sizeof what, "env steps stayed at %lld (wanted %lld) for %.0f s", s, at_least,
               timeout_s);
      fail_job(out, what);
    }
    usleep(100000);
  }
  return s;
}

static void check_solved(const char *config, const char *run, const char *learner,
                         const char *actor) {
  char out[600];
  double t0 = shoal_now_s();
  /* run.max_seconds bounds a run that does not solve; the job then fails the checks. */
  long id = submit(config, run, "run.max_seconds=100", out, sizeof out);
  char *st = wait_job(id, 150, out);
  char *text = wf_slurp(out, NULL);
  printf("%s: job %ld %s after %.1f s\n", run, id, st, shoal_now_s() - t0);
  if (strcmp(st, "COMPLETED")) {
    char what[200];
    snprintf(what, sizeof what, "job %ld ended %s", id, st);
    fail_job(out, what);
  }
  free(st);
  char want[300];
  snprintf(want, sizeof want, "shoal: run %s: %s and 1 x %s", run, learner, actor);
  assert_non_null(strstr(text, want));
  /* Two CPUs hold the learner's one and the actor's one: no sharing needed. */
  assert_null(strstr(text, "--overlap"));
  assert_non_null(strstr(text, "\"event\":\"listening\""));
  if (!strstr(text, "\"event\":\"done\",\"reason\":\"solved\"")) fail_job(out, "not solved");
  assert_non_null(strstr(text, "learner step exited with status 0"));
  free(text);

  /* Stored: the run finished, its snapshot carries the solving score, the metrics hold
   * the evaluations. */
  shoal_error err = {0};
  store *s;
  assert_int_equal(store_open(&s, runs_uri, &err), 0);
  store_run r;
  assert_int_equal(store_run_find(s, run, &r, &err), 0);
  assert_int_equal(r.status, STORE_RUN_FINISHED);
  store_run_clear(&r);
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  assert_int_equal(store_snapshot_get(s, run, STORE_LATEST, &meta, &bytes, &len, &err), 0);
  free(bytes);
  assert_true(meta.env_steps > 0);
  if (!(meta.score >= 475)) fail_msg("%s: latest snapshot's score %g", run, meta.score);
  store_metric *rows;
  size_t n;
  assert_int_equal(store_metrics_query(s, run, "eval_return", 0, INT64_MAX, &rows, &n, &err), 0);
  double best = -1;
  for (size_t i = 0; i < n; i++) best = rows[i].value > best ? rows[i].value : best;
  free(rows);
  assert_true(best >= 475);
  assert_int_equal(store_metrics_query(s, run, "sps", 0, INT64_MAX, &rows, &n, &err), 0);
  free(rows);
  assert_true(n > 0);
  store_close(s);

  /* `shoal eval` plays the stored snapshot: the one the learner evaluated. */
  char *eargv[] = {wf_shoal, "eval", (char *)run, "--store", runs_uri, "--episodes", "20", NULL};
  int rc;
  char *ev = wf_run(eargv, 60, &rc);
  printf("%s", ev);
  assert_int_equal(rc, 0);
  snprintf(want, sizeof want, "snapshot v%lld,", (long long)meta.version);
  assert_non_null(strstr(ev, want));
  const char *ret = strstr(ev, "): return ");
  assert_non_null(ret);
  /* 20 episodes of other seeds than the learner's 100: the same policy, a looser bar. */
  double mean = atof(ret + strlen("): return "));
  if (mean < 400) fail_msg("%s: shoal eval returned %.1f:\n%s", run, mean, ev);
  free(ev);
}

static void test_apex_solved(void **state) {
  check_solved("cartpole-apex.yaml", "sl-apex", "shoal-learner", "shoal-actor");
}

static void test_onpolicy_solved(void **state) {
  check_solved("cartpole-ppo.yaml", "sl-ppo", "shoal-onpolicy-learner", "shoal-onpolicy-actor");
}

/* The actor process killed (as a crash or the OOM killer would) is started again by the
 * script and training goes on; the job requeued resumes the run from its snapshot. */
static void test_actor_restart_and_requeue(void **state) {
  const char *run = "sl-requeue";
  char out[600];
  /* Never solved (solve_return 1e9): the run ends at max_seconds of training, counted
   * across the requeue. Snapshots every second, so the requeue finds a recent one; short
   * evaluations, so the requeued learner stops quickly. */
  long id = submit("cartpole-apex.yaml", run,
                   "run.max_seconds=24 run.solve_return=1e9 run.eval_episodes=10 "
                   "learner.snapshot_every_s=1",
                   out, sizeof out);
  char *text = wait_job_text(out, "\"event\":\"listening\"", 60);
  free(text);
  wait_env_steps(out, 1, 30);
  pid_t actor = 0;
  for (int i = 0; i < 100 && !actor; i++) {
    actor = wf_find_pid_in("bin/shoal-actor --config", wf_dir, false);
    if (!actor) usleep(100000);
  }
  assert_true(actor > 0);
  assert_int_equal(kill(actor, SIGKILL), 0);
  double t_kill = shoal_now_s();
  text = wait_job_text(out, "shoal.sbatch: actor 0 ended by signal 9; starting it again", 20);
  free(text);
  pid_t again = 0;
  while (!again || again == actor) {
    if (shoal_now_s() - t_kill > 20) fail_msg("no actor process again 20 s after the kill");
    again = wf_find_pid_in("bin/shoal-actor --config", wf_dir, false);
    usleep(100000);
  }
  /* Steps counted once the new actor runs come from it: the killed one sends nothing. */
  usleep(300000);
  long long before = last_env_steps(out);
  long long after = wait_env_steps(out, before + 5000, 30);
  printf("%s: actor %d killed, %d started again; env steps %lld -> %lld\n", run, (int)actor,
         (int)again, before, after);

  /* A snapshot is stored, then the job is requeued. Slurm holds a requeued job back 120 s
   * (its BeginTime); StartTime=now lets it start at once. */
  shoal_error err = {0};
  store *s;
  assert_int_equal(store_open(&s, runs_uri, &err), 0);
  store_snapshot_meta m1 = {0};
  void *bytes;
  size_t len;
  for (int i = 0; i < 100; i++) {
    if (store_snapshot_get(s, run, STORE_LATEST, &m1, &bytes, &len, &err) == 0) {
      free(bytes);
      if (m1.env_steps > 0) break;
    }
    usleep(100000);
  }
  assert_true(m1.env_steps > 0);
  char ids[32];
  snprintf(ids, sizeof ids, "%ld", id);
  int rc;
  char *o = slurm_cmd(&rc, "/usr/bin/scontrol", "requeue", ids, NULL);
  if (rc) fail_msg("scontrol requeue %s: %s", ids, o);
  free(o);
  char *st = NULL;
  for (int i = 0; i < 300; i++) {
    free(st);
    st = job_field(id, "JobState");
    if (!strcmp(st, "PENDING")) break;
    usleep(100000);
  }
  assert_string_equal(st, "PENDING");
  free(st);
  char want[200];
  snprintf(want, sizeof want, "resumed run %s at version ", run);
  /* StartTime=now, and again every 2 s while the job is still pending: slurmctld may set
   * the requeue's hold only once the old job's steps are gone (srun waits up to KillWait
   * for them), after a first update. Seen on a loaded machine: the job sat out the hold
   * and the resume came after the test's minute. */
  text = NULL;
  for (double t0 = shoal_now_s(), next = 0; !text;) {
    if (shoal_now_s() - t0 >= next) {
      char *js = job_field(id, "JobState");
      if (!strcmp(js, "PENDING")) {
        o = slurm_cmd(&rc, "/usr/bin/scontrol", "update", "JobId", ids, "StartTime=now", NULL);
        if (rc) fail_msg("scontrol update StartTime=now: %s", o);
        free(o);
      }
      free(js);
      next += 2.0;
    }
    char *sofar = wf_slurp(out, NULL);
    if (strstr(sofar, want)) {
      text = sofar;
      break;
    }
    free(sofar);
    if (shoal_now_s() - t0 > 90) {
      char what[400];
      snprintf(what, sizeof what, "'%s' did not appear within 90 s", want);
      fail_job(out, what);
    }
    usleep(50000);
  }
  const char *res = strstr(text, want) + strlen(want);
  long long v_resumed = atoll(res);
  const char *comma = strstr(res, ", ");
  assert_non_null(comma);
  long long steps_resumed = atoll(comma + 2);
  free(text);
  printf("%s: requeued after snapshot v%lld (%lld env steps); resumed at v%lld, %lld steps\n", run,
         (long long)m1.version, (long long)m1.env_steps, v_resumed, steps_resumed);
  assert_true(v_resumed >= m1.version);
  assert_true(steps_resumed >= m1.env_steps);
  char *restarts = job_field(id, "Restarts");
  assert_string_equal(restarts, "1");
  free(restarts);

  st = wait_job(id, 90, out);
  text = wf_slurp(out, NULL);
  if (strcmp(st, "COMPLETED")) {
    char what[200];
    snprintf(what, sizeof what, "job %ld ended %s", id, st);
    fail_job(out, what);
  }
  free(st);
  assert_non_null(strstr(text, "\"event\":\"done\",\"reason\":\"max_seconds\""));
  free(text);
  /* Counters continue from the resumed snapshot, not from zero. */
  store_snapshot_meta m2;
  assert_int_equal(store_snapshot_get(s, run, STORE_LATEST, &m2, &bytes, &len, &err), 0);
  free(bytes);
  printf("%s: last snapshot v%lld, %lld env steps, %lld updates\n", run, (long long)m2.version,
         (long long)m2.env_steps, (long long)m2.updates);
  assert_true(m2.version > v_resumed);
  assert_true(m2.env_steps > steps_resumed);
  store_run r;
  assert_int_equal(store_run_find(s, run, &r, &err), 0);
  assert_int_equal(r.status, STORE_RUN_FINISHED);
  store_run_clear(&r);
  store_close(s);
}

int main(void) {
  if (geteuid() != 0) {
    printf("SKIPPED: the private Slurm cluster's daemons run as root; this is uid %d\n",
           (int)geteuid());
    return 77;
  }
  const char *tools[] = {daemons[0],         daemons[1],          daemons[2],
                         "/usr/bin/sbatch",  "/usr/bin/scontrol", "/usr/bin/sinfo",
                         "/usr/bin/scancel", "/usr/bin/squeue",   "/usr/bin/srun"};
  for (size_t i = 0; i < sizeof tools / sizeof *tools; i++)
    if (access(tools[i], X_OK) != 0) {
      printf("SKIPPED: %s not found (Debian's slurm-wlm and munge, scripts/packages.txt)\n",
             tools[i]);
      return 77;
    }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_apex_solved),
      cmocka_unit_test(test_onpolicy_solved),
      cmocka_unit_test(test_actor_restart_and_requeue),
  };
  return cmocka_run_group_tests_name("deploy_slurm", tests, setup, teardown);
}
