/* SPDX-License-Identifier: Apache-2.0 */
/* tests/proc_util.h — helpers the process-level tests share: child processes with
 * their output in a file and a bounded wait, reading files, finding text. Include
 * after cmocka.h. */
#ifndef SHOAL_TEST_PROC_UTIL_H
#define SHOAL_TEST_PROC_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/shoal.h"

static char wf_shoal[4096], wf_src[4096], wf_dir[256];

typedef struct wf_proc {
  pid_t pid;
  char out[512];
} wf_proc;

/* Starts argv in its own process group, stdout and stderr into a file in wf_dir. */
static inline void wf_start(wf_proc *p, char *const argv[]) {
  static int counter;
  snprintf(p->out, sizeof p->out, "%s/out-%d-%d.txt", wf_dir, getpid(), counter++);
  fflush(stdout);
  p->pid = fork();
  assert_true(p->pid >= 0);
  if (p->pid == 0) {
    int fd = open(p->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setpgid(0, 0);
    execv(argv[0], argv);
    _exit(127);
  }
  setpgid(p->pid, p->pid);
}

/* Waits up to timeout_s; on timeout kills the group and fails. Returns the exit status
 * (128 + signal when killed). */
static inline int wf_wait(wf_proc *p, double timeout_s) {
  double t0 = shoal_now_s();
  for (;;) {
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (shoal_now_s() - t0 > timeout_s) {
      kill(-p->pid, SIGKILL);
      waitpid(p->pid, &st, 0);
      fail_msg("%s did not finish within %.0f s", p->out, timeout_s);
    }
    usleep(20000);
  }
}

static inline char *wf_slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    if (len) *len = 0;
    return strdup("");
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  if (len) *len = got;
  return s;
}

/* Waits until text appears in the file; returns a copy of the file then. */
static inline char *wf_wait_text(const char *path, const char *text, double timeout_s) {
  double t0 = shoal_now_s();
  for (;;) {
    char *s = wf_slurp(path, NULL);
    if (strstr(s, text)) return s;
    free(s);
    if (shoal_now_s() - t0 > timeout_s) fail_msg("'%s' did not appear in %s", text, path);
    usleep(50000);
  }
}

/* Runs argv to completion (bounded) and returns its output; *rc its status. */
static inline char *wf_run(char *const argv[], double timeout_s, int *rc) {
  wf_proc p;
  wf_start(&p, argv);
  *rc = wf_wait(&p, timeout_s);
  return wf_slurp(p.out, NULL);
}

/* The pid of a live process whose command line holds w1 and (when not NULL) w2; 0 if
 * none. */
/* True when pid is this test's child, grandchild, ...: tests that run side by side (or
 * another checkout's tests on the same machine) use the same run names, and a test must
 * only ever signal its own processes. */
static inline bool wf_is_descendant(long pid) {
  for (int depth = 0; depth < 64 && pid > 1; depth++) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* the command name may hold spaces and parens */
    long ppid = 0;
    if (!rp || sscanf(rp + 1, " %*c %ld", &ppid) != 1) return false;
    if (ppid == (long)getpid()) return true;
    pid = ppid;
  }
  return false;
}

/* A process whose command line holds w1 (and w2 when given); own_only keeps to this
 * test's descendants. 0 when none. */
static inline pid_t wf_find_pid_in(const char *w1, const char *w2, bool own_only) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  pid_t found = 0;
  while (d && (e = readdir(d)) && !found) {
    char *end;
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0 || pid == getpid() || (own_only && !wf_is_descendant(pid))) continue;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    for (ssize_t i = 0; i < n; i++)
      if (!buf[i]) buf[i] = ' ';
    buf[n] = 0;
    if (strstr(buf, w1) && (!w2 || strstr(buf, w2))) found = (pid_t)pid;
  }
  if (d) closedir(d);
  return found;
}

/* One of this test's own processes (see wf_is_descendant). */
static inline pid_t wf_find_pid(const char *w1, const char *w2) {
  return wf_find_pid_in(w1, w2, true);
}

static inline int wf_setup(const char *name) {
  const char *bin = getenv("SHOAL_BINARY_DIR"), *src = getenv("SHOAL_SOURCE_DIR");
  if (!bin || !src) {
    fprintf(stderr, "SHOAL_BINARY_DIR and SHOAL_SOURCE_DIR must be set (ctest sets them)\n");
    return -1;
  }
  snprintf(wf_shoal, sizeof wf_shoal, "%s/bin/shoal", bin);
  snprintf(wf_src, sizeof wf_src, "%s", src);
  snprintf(wf_dir, sizeof wf_dir, "/tmp/shoal-test-%s-XXXXXX", name);
  return mkdtemp(wf_dir) ? 0 : -1;
}

/* Removes the test's folder; SHOAL_TEST_KEEP=1 keeps it (and says where) for a look. */
static inline int wf_teardown(void) {
  if (getenv("SHOAL_TEST_KEEP")) {
    printf("kept %s\n", wf_dir);
    return 0;
  }
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", wf_dir);
  return system(cmd) == 0 ? 0 : -1;
}

#endif
