/* SPDX-License-Identifier: Apache-2.0 */
/* benchmarks/torch_child.h — the PyTorch baseline as a child process that serves one
 * timing window per request, so shoal's and torch's windows can alternate in one run
 * (both see the same machine load). The script reads "<row> <window>\n" on stdin and
 * answers "RATE <calls/s>\n"; it says "READY" once torch is loaded. Used by nn_cpu and
 * examples_speed. */
#ifndef SHOAL_BENCH_TORCH_CHILD_H
#define SHOAL_BENCH_TORCH_CHILD_H

#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct torch_proc {
  pid_t pid;
  FILE *in, *out;
  const char *who; /* the benchmark's name, for messages */
} torch_proc;

static inline void torch_stop(torch_proc *t) {
  if (t->in) fclose(t->in); /* EOF ends the server */
  if (t->out) fclose(t->out);
  if (t->pid > 0) waitpid(t->pid, NULL, 0);
  const char *who = t->who;
  memset(t, 0, sizeof *t);
  t->who = who;
}

/* The python of the peers' venv (benchmarks/peers/setup.sh), which has PyTorch 2:
 * $SHOAL_TORCH2_PYTHON, else $SHOAL_PEERS_VENV/bin/python, else
 * ~/.cache/shoal-peers/bin/python; NULL when that is not an executable. buf holds it. */
static inline const char *torch2_python(char *buf, size_t cap) {
  const char *py = getenv("SHOAL_TORCH2_PYTHON"), *venv = getenv("SHOAL_PEERS_VENV"),
             *home = getenv("HOME");
  if (py && *py)
    snprintf(buf, cap, "%s", py);
  else if (venv && *venv)
    snprintf(buf, cap, "%s/bin/python", venv);
  else
    snprintf(buf, cap, "%s/.cache/shoal-peers/bin/python", home ? home : "");
  return access(buf, X_OK) == 0 ? buf : NULL;
}

/* torch.__version__ under python py into buf ("?" when it cannot be had). */
static inline const char *torch_version(const char *py, char *buf, size_t cap) {
  char cmd[1200];
  snprintf(buf, cap, "?");
  snprintf(cmd, sizeof cmd, "'%s' -c 'import torch; print(torch.__version__)' 2>/dev/null", py);
  FILE *f = popen(cmd, "r");
  if (!f) return buf;
  if (fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = 0;
  if (pclose(f) != 0 || !buf[0]) snprintf(buf, cap, "?");
  return buf;
}

/* Starts python `py` on benchmarks/<script> with "[extra_arg] --threads N", torch at
 * `threads` threads and OpenBLAS at 1 (one pool). False when Python or torch is missing:
 * the baselines are then none. */
static inline bool torch_start_with(torch_proc *t, const char *who, const char *py,
                                    const char *script_name, const char *extra_arg, int threads) {
  memset(t, 0, sizeof *t);
  t->who = who;
  char script[1024], th[16];
  const char *src = getenv("SHOAL_SOURCE_DIR");
  if (src) {
    snprintf(script, sizeof script, "%s/benchmarks/%s", src, script_name);
  } else { /* beside this header (CMake compiles by absolute path) */
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    size_t at = slash ? (size_t)(slash + 1 - script) : 0;
    snprintf(script + at, sizeof script - at, "%s", script_name);
  }
  snprintf(th, sizeof th, "%d", threads);
  int to[2], from[2];
  if (pipe(to)) return false;
  if (pipe(from)) {
    close(to[0]), close(to[1]);
    return false;
  }
  /* Not inherited by a later child (a second torch process holding this one's stdin open
   * would keep it from seeing EOF at torch_stop); dup2 clears the flag on 0 and 1. */
  for (int i = 0; i < 2; i++)
    fcntl(to[i], F_SETFD, FD_CLOEXEC), fcntl(from[i], F_SETFD, FD_CLOEXEC);
  pid_t pid = fork();
  if (pid < 0) {
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    return false;
  }
  if (pid == 0) {
    dup2(to[0], 0);
    dup2(from[1], 1);
    close(to[0]), close(to[1]), close(from[0]), close(from[1]);
    unsetenv("OMP_NUM_THREADS"); /* libgomp's own pool setting slows torch here */
    unsetenv("MKL_NUM_THREADS");
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    /* Spinning OpenMP barriers made torch's 2-thread figures collapse 10-20x whenever the
     * shared machine was busy (71 vs 1494 MLP steps/s in one minute); passive waiting is
     * the kinder baseline for torch. */
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    if (extra_arg)
      execl(py, py, script, extra_arg, "--threads", th, (char *)NULL);
    else
      execl(py, py, script, "--threads", th, (char *)NULL);
    fprintf(stderr, "%s: cannot run %s %s\n", who, py, script);
    _exit(127);
  }
  close(to[0]), close(from[1]);
  t->pid = pid;
  t->in = fdopen(to[1], "w");
  t->out = fdopen(from[0], "r");
  char line[128];
  if (!t->in || !t->out || !fgets(line, sizeof line, t->out) || strncmp(line, "READY", 5)) {
    fprintf(stderr, "%s: the PyTorch side did not start (%s %s); baselines are none\n", who, py,
            script);
    torch_stop(t);
    return false;
  }
  return true;
}

/* torch_start_with $SHOAL_PYTHON (default /usr/bin/python3: Debian's PyTorch 1.13). */
static inline bool torch_start(torch_proc *t, const char *who, const char *script_name,
                               const char *extra_arg, int threads) {
  const char *py = getenv("SHOAL_PYTHON");
  if (!py || !*py) py = "/usr/bin/python3";
  return torch_start_with(t, who, py, script_name, extra_arg, threads);
}

/* One window of `row`, at least window_s long, in the torch process: calls/s, or NAN
 * when it failed (the process is then stopped and later windows are NAN too). */
static inline double torch_window(torch_proc *t, const char *row, double window_s) {
  if (!t->in) return NAN;
  char line[128];
  double v;
  if (fprintf(t->in, "%s %g\n", row, window_s) < 0 || fflush(t->in) ||
      !fgets(line, sizeof line, t->out) || sscanf(line, "RATE %lf", &v) != 1) {
    fprintf(stderr, "%s: the PyTorch side failed on %s; baselines are none from here\n", t->who,
            row);
    torch_stop(t);
    return NAN;
  }
  return v;
}

#endif
