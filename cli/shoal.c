/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal: the command line.
 *   shoal run CONFIG [--set key=value ...] [--quiet] [--log-json] [--no-tensorboard]
 *   shoal run --resume RUN [--store URI] [--set key=value ...]
 *   shoal eval RUN [--store URI] [--episodes K] [--best] [--seed S] [--set env.KEY=V]...
 *              [--render [STRIP.png]] [--record K] [--frames N]
 *   shoal init CONFIG --set run.name=RUN [--set ...] [--out RESOLVED.yaml]
 *   shoal status | set | plot | sweep | worker | tboard   (cli/commands.h)
 *
 * `run` resolves the config, records the run in the store, and supervises one learner
 * and N actors (cli/supervise.h): the learner first, the actors once it listens; a
 * crashed actor is restarted with backoff, a crashed learner is restarted and resumes
 * from its latest snapshot; Ctrl-C or SIGTERM stops the actors, then the learner (which
 * writes a final snapshot), as does a stop rule (the learner announces it and waits for
 * its actors' stop). One progress line a second, then a summary.
 *
 * Exit status of `run`: 0 after a finished run or one stopped by a signal; 1 when the
 * run fails (a child that failed for good: RUN_EXIT_FATAL of run/run.h, with its
 * message; a crashed learner out of restarts) or cannot start (a bad config, a resume it
 * cannot apply, a run already at its limits); 2 for bad arguments; 128 + the signal
 * (130 for Ctrl-C, 143 for SIGTERM) when a second signal killed the children.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algos/algos.h"
#include "cli/commands.h"
#include "cli/supervise.h"
#include "cli/tboard.h"
#include "config/config.h"
#include "envs/envs.h"
#include "run/run.h"
#include "nn/nn.h"
#include "store/store.h"

char shoal_bindir[PATH_MAX];

/* Prints "shoal: [what: ]message" and returns the exit status 1. */
static int fail(const char *what, const shoal_error *err) {
  const char *msg = err->msg[0] ? err->msg : shoal_strerror(err->code);
  if (what)
    fprintf(stderr, "shoal: %s: %s\n", what, cli_unprefix(msg, what));
  else
    fprintf(stderr, "shoal: %s\n", msg);
  return 1;
}

/* The folder of this executable: shoal-learner and shoal-actor live beside it. */
static void find_shoal_bindir(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    snprintf(shoal_bindir, sizeof shoal_bindir, ".");
    return;
  }
  self[n] = 0;
  snprintf(shoal_bindir, sizeof shoal_bindir, "%s", dirname(self));
}

/* Reads "key":<number> from a flat JSON line; NAN when absent. */
double json_num(const char *line, const char *key) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = strstr(line, pat);
  if (!p) return NAN;
  p += strlen(pat);
  if (!strncmp(p, "null", 4)) return NAN;
  char *end;
  double v = strtod(p, &end);
  return end == p ? NAN : v;
}

/* Reads "key":"<text>" into out; false when absent. */
bool json_str(const char *line, const char *key, char *out, size_t cap) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char *p = strstr(line, pat);
  if (!p) return false;
  p += strlen(pat);
  size_t i = 0;
  while (p[i] && p[i] != '"' && i + 1 < cap) out[i] = p[i], i++;
  out[i] = 0;
  return true;
}

static void human(char *buf, size_t cap, double v) {
  if (isnan(v))
    snprintf(buf, cap, "-");
  else if (fabs(v) >= 1e6)
    snprintf(buf, cap, "%.2fM", v / 1e6);
  else if (fabs(v) >= 1e4)
    snprintf(buf, cap, "%.1fk", v / 1e3);
  else
    snprintf(buf, cap, "%.0f", v);
}

/* ---- which algorithm: the config's `algo:` key ------------------------------------- */

/* See cli/commands.h: the schemas differ, so `algo:` decides which one loads the file,
 * and which learner and actor programs run. */
bool shoal_yaml_is_onpolicy(const char *text, const char *const *sets, int nsets) {
  return algo_yaml_is_onpolicy(text, sets, nsets);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      char *nb = realloc(buf, cap);
      if (!nb) break;
      buf = nb;
    }
    size_t got = fread(buf + len, 1, 4096, f);
    len += got;
    if (got < 4096) break;
  }
  fclose(f);
  if (buf) buf[len] = 0;
  return buf;
}

bool shoal_file_is_onpolicy(const char *path, const char *const *sets, int nsets) {
  char *text = read_text(path);
  bool r = shoal_yaml_is_onpolicy(text, sets, nsets);
  free(text);
  return r;
}

/* The schema and the choice check of a run's kind. */
static const cfg_key *run_schema(bool onpolicy, int *n) {
  return onpolicy ? onpolicy_schema(n) : apex_schema(n);
}
static int run_check(bool onpolicy, const config *cfg, shoal_error *err) {
  return onpolicy ? onpolicy_check(cfg, err) : apex_check(cfg, err);
}

/* ---- shoal run ------------------------------------------------------------------ */

typedef struct run_ctx {
  sup *s;
  const char *run, *cfg_path, *host;
  int actors, learner_idx, first_actor;
  bool quiet, json, launched;
  const char *learner_prog, *actor_prog; /* shoal-learner / shoal-onpolicy-learner, ... */
  tb_mirror *tb;                         /* the run's metrics as TensorBoard events (file stores) */
  char done_line[2048];
  char last_progress[2048];
  int port;
} run_ctx;

static void on_line(void *ud, int index, const char *name, const char *line) {
  run_ctx *r = ud;
  if (index != r->learner_idx) {
    if (!r->quiet) printf("[%s] %s\n", name, line);
    return;
  }
  char event[32] = "";
  if (!json_str(line, "event", event, sizeof event)) {
    if (!r->quiet) printf("[learner] %s\n", line);
    return;
  }
  if (r->json) {
    printf("%s\n", line);
    fflush(stdout);
  }
  if (!strcmp(event, "listening")) {
    int port = (int)json_num(line, "port");
    char addr[300], listen_set[320];
    snprintf(addr, sizeof addr, "%s:%d", r->host, port);
    shoal_error err = {0};
    if (!r->launched) {
      /* A restarted learner must come back on the same port, where the actors look. */
      snprintf(listen_set, sizeof listen_set, "learner.listen=%s", addr);
      char learner_bin[PATH_MAX + 32];
      snprintf(learner_bin, sizeof learner_bin, "%s/%s", shoal_bindir, r->learner_prog);
      char *largv[] = {learner_bin, "--config", (char *)r->cfg_path, "--run", (char *)r->run,
                       "--resume",  "--set",    listen_set,          NULL};
      if (sup_set_argv(r->s, r->learner_idx, largv, &err)) fprintf(stderr, "shoal: %s\n", err.msg);
      for (int i = 0; i < r->actors; i++) {
        char actor_bin[PATH_MAX + 32], idx[16];
        snprintf(actor_bin, sizeof actor_bin, "%s/%s", shoal_bindir, r->actor_prog);
        snprintf(idx, sizeof idx, "%d", i);
        char *aargv[] = {actor_bin, "--config", (char *)r->cfg_path, "--run", (char *)r->run,
                         "--index", idx,        "--learner",         addr,    NULL};
        if (sup_launch(r->s, r->first_actor + i, aargv, &err))
          fprintf(stderr, "shoal: %s\n", err.msg);
      }
      r->launched = true;
      r->port = port;
      if (!r->quiet && !r->json)
        printf("shoal: run %s: learner on %s (%s), %d actors\n", r->run, addr,
               json_str(line, "device", event, sizeof event) ? event : "cpu", r->actors);
    } else if (!r->quiet && !r->json) {
      printf("shoal: learner restarted on %s\n", addr);
    }
  } else if (!strcmp(event, "progress")) {
    snprintf(r->last_progress, sizeof r->last_progress, "%s", line);
    if (r->quiet || r->json) return;
    char steps[32], sps[32], smp[32], upd[32], ups[32], rep[32], ret[32] = "-", ev[32] = "-";
    human(steps, sizeof steps, json_num(line, "env_steps"));
    human(sps, sizeof sps, json_num(line, "sps"));
    human(smp, sizeof smp, json_num(line, "samples_s"));
    human(upd, sizeof upd, json_num(line, "updates"));
    human(ups, sizeof ups, json_num(line, "ups"));
    /* What the memory holds, in its own unit: Ape-X's replay counts the env steps in it
     * (not the episode-end observations stored beside them), on-policy queues unrolls. */
    double held_steps = json_num(line, "replay_steps");
    char held[64];
    if (held_steps >= 0) {
      human(rep, sizeof rep, held_steps);
      snprintf(held, sizeof held, "replay %s steps", rep);
    } else {
      human(rep, sizeof rep, json_num(line, "replay"));
      snprintf(held, sizeof held, "queue %s unrolls", rep);
    }
    double r100 = json_num(line, "return100"), e = json_num(line, "eval");
    if (!isnan(r100)) snprintf(ret, sizeof ret, "%.1f", r100);
    if (!isnan(e)) snprintf(ev, sizeof ev, "%.1f", e);
    /* On-policy learners add the policy lag of the unrolls they trained on. */
    double lag = json_num(line, "lag_mean");
    char lags[64] = "";
    if (!isnan(lag))
      snprintf(lags, sizeof lags, "  lag %.1f (max %.0f)", lag, json_num(line, "lag_max"));
    char from_store[96] = "";
    if (!isnan(json_num(line, "store_rows"))) {
      char sr[32];
      human(sr, sizeof sr, json_num(line, "store_rows"));
      snprintf(from_store, sizeof from_store, "  store %s rows, %.0f segments (%.0f rejected)", sr,
               json_num(line, "store_segments"), json_num(line, "store_rejected"));
    }
    /* Store trouble is shown where people look; training goes on meanwhile. */
    char store_note[96] = "";
    double serr = json_num(line, "store_errors");
    if (serr > 0)
      snprintf(store_note, sizeof store_note, "  store errors %.0f (%s)", serr,
               strstr(line, "\"store_ok\":true") ? "recovered" : "failing");
    /* Replay log segments waiting for the store or dropped (an outage past its queues). */
    char log_note[96] = "";
    double ldrop = json_num(line, "log_dropped"), lpend = json_num(line, "log_pending_bytes");
    if (ldrop > 0 || lpend > 64e6)
      snprintf(log_note, sizeof log_note, "  log %.0f MB waiting, %.0f segments dropped",
               lpend / 1e6, ldrop > 0 ? ldrop : 0);
    printf(
        "%6.0fs  steps %s (%s/s)  ingest %s/s  updates %s (%s/s)  %s  return100 %s  "
        "eval %s  v%.0f%s%s%s%s\n",
        json_num(line, "t"), steps, sps, smp, upd, ups, held, ret, ev, json_num(line, "version"),
        lags, from_store, store_note, log_note);
    fflush(stdout);
  } else if (!strcmp(event, "hparam")) {
    char key[64] = "?";
    json_str(line, "key", key, sizeof key);
    if (!r->quiet && !r->json)
      printf("shoal: live change: %s %g -> %g at %.0f env steps\n", key, json_num(line, "old"),
             json_num(line, "value"), json_num(line, "env_steps"));
  } else if (!strcmp(event, "store")) {
    if (!r->quiet && !r->json)
      printf(
          "shoal: from the store: %.0f segments, %.0f rows; rejected %.0f segments (%.0f rows)\n",
          json_num(line, "segments"), json_num(line, "rows"), json_num(line, "rejected_segments"),
          json_num(line, "rejected_rows"));
  } else if (!strcmp(event, "stopping")) {
    /* A stop rule: the actors stop first, while the learner still takes what they send;
     * then the learner (cli/supervise.h, learner/runtime.h). */
    char reason[32] = "a stop rule";
    json_str(line, "reason", reason, sizeof reason);
    /* Its stop may play a final evaluation, whose time it says (stop_needs_s): the grace
     * waits for that too rather than kill it and lose its last snapshot. */
    double need = json_num(line, "stop_needs_s");
    shoal_error gerr = {0};
    if (isfinite(need) && need > 0 && sup_extend_grace(r->s, r->learner_idx, need, &gerr))
      fprintf(stderr, "shoal: %s\n", gerr.msg);
    sup_stop(r->s, false, reason);
  } else if (!strcmp(event, "done")) {
    snprintf(r->done_line, sizeof r->done_line, "%s", line);
  }
}

/* Once a second: new metric rows into the TensorBoard file. A failure is reported once
 * and ends the mirroring; the run goes on. */
static void on_tick(void *ud) {
  run_ctx *r = ud;
  if (!r->tb) return;
  shoal_error err = {0};
  if (tb_mirror_sync(r->tb, NULL, &err)) {
    fprintf(stderr, "shoal: tensorboard events stopped: %s\n", err.msg);
    tb_mirror_destroy(r->tb);
    r->tb = NULL;
  }
}

/* Makes the env as the children will: its id and, where the config takes them, its
 * options, so that a bad one fails here, with the config's name for it; and checks its
 * spaces against the algorithm (Ape-X: discrete actions), as the children would. */
static int probe_env(const config *cfg, bool onpolicy, shoal_error *err) {
  if (onpolicy) {
    op_spec ops; /* IMPALA: discrete actions; both: observations of at most 3 dims */
    return op_spec_from_config(cfg, &ops, err);
  }
  const char *opts = config_has(cfg, "env.options") ? config_string(cfg, "env.options") : NULL;
  env *e;
  int rc = env_make_opts(&e, config_string(cfg, "env.id"), opts, err);
  if (rc) return rc;
  rc = apex_env_check(env_get_spec(e), err);
  env_destroy(e);
  return rc;
}

void cli_run_so_far(store *st, const char *run, double *seconds, double *steps) {
  *seconds = 0, *steps = 0;
  shoal_error err = {0};
  store_metric *rows = NULL;
  size_t n = 0;
  if (!store_metrics_query(st, run, "train_seconds", INT64_MIN, INT64_MAX, &rows, &n, &err)) {
    for (size_t i = 0; i < n; i++) {
      if (rows[i].value > *seconds) *seconds = rows[i].value;
      if ((double)rows[i].step > *steps) *steps = (double)rows[i].step;
    }
    free(rows);
  }
  store_snapshot_meta *metas = NULL;
  if (!store_snapshot_list(st, run, &metas, &n, &err)) {
    for (size_t i = 0; i < n; i++)
      if ((double)metas[i].env_steps > *steps) *steps = (double)metas[i].env_steps;
    free(metas);
  }
}

/* A resume that cannot go as asked is refused before anything is written, saying why
 * and what to do (true: refused, said on stderr): a config the run's snapshots do not
 * fit (run_resume_check), or a run already at a limit (the limits count across
 * resumes, so it would stop at once). */
static bool resume_refused(store *st, const config *cfg, const cfg_key *keys, int nkeys,
                           const char *run) {
  shoal_error err = {0};
  store_run r = {0};
  config *was = config_create(keys, nkeys, &err);
  int rc = was ? store_run_find(st, run, &r, &err) : err.code;
  if (!rc) rc = config_load_string(was, r.config ? r.config : "", run, &err);
  if (!rc) rc = run_resume_check(was, cfg, &err);
  store_run_clear(&r);
  config_destroy(was);
  if (rc) {
    fprintf(stderr, "shoal: resume %s: %s\nshoal: nothing was written: run %s is as it was\n", run,
            err.msg, run);
    return true;
  }
  double seconds, steps;
  cli_run_so_far(st, run, &seconds, &steps);
  const double max_s = config_float(cfg, "run.max_seconds");
  const double max_steps = (double)config_int(cfg, "run.max_env_steps");
  if (max_s > 0 && seconds >= max_s) {
    fprintf(stderr,
            "shoal: resume %s: the run has trained %.1f s, its run.max_seconds is %g: the limit\n"
            "counts across resumes, so there is nothing left to train. To train longer, raise\n"
            "it: shoal run --resume %s --set run.max_seconds=%.0f (or more)\n",
            run, seconds, max_s, run, ceil(seconds + max_s));
    return true;
  }
  if (max_steps > 0 && steps >= max_steps) {
    fprintf(stderr,
            "shoal: resume %s: the run has taken %.0f env steps, its run.max_env_steps is %.0f:\n"
            "the limit counts across resumes, so there is nothing left to train. To train\n"
            "longer, raise it: shoal run --resume %s --set run.max_env_steps=%.0f (or more)\n",
            run, steps, max_steps, run, steps + max_steps);
    return true;
  }
  return false;
}

static int cmd_run(int argc, char **argv) {
  const char *cfg_file = NULL, *resume = NULL, *store_arg = NULL;
  const char *sets[128];
  int nsets = 0;
  bool quiet = false, json = false, tb = true;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--no-tensorboard"))
      tb = false;
    else if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < 128)
      sets[nsets++] = argv[++i];
    else if (!strncmp(argv[i], "--set=", 6) && nsets < 128)
      sets[nsets++] = argv[i] + 6;
    else if (!strcmp(argv[i], "--quiet"))
      quiet = true;
    else if (!strcmp(argv[i], "--log-json"))
      json = true;
    else if (!strcmp(argv[i], "--resume") && i + 1 < argc)
      resume = argv[++i];
    else if (!strcmp(argv[i], "--store") && i + 1 < argc)
      store_arg = argv[++i];
    else if (argv[i][0] != '-' && !cfg_file)
      cfg_file = argv[i];
    else {
      cli_bad_arg("run", argc, argv, i);
      return 2;
    }
  }
  if (!cfg_file && !resume) {
    cli_bad_usage("run");
    return 2;
  }
  shoal_error err = {0};
  int nkeys;
  store *st = NULL;
  char run[64];
  store_run r = {0};
  bool onpolicy;
  if (resume) {
    if (store_open(&st, store_arg ? store_arg : "file://runs", &err)) return fail("store", &err);
    if (store_run_find(st, resume, &r, &err)) return fail("resume", &err);
    onpolicy = shoal_yaml_is_onpolicy(r.config, sets, nsets);
  } else {
    onpolicy = shoal_file_is_onpolicy(cfg_file, sets, nsets);
  }
  {
    /* An algorithm shoal does not have is named before either schema sees the file. */
    char *text = resume ? NULL : read_text(cfg_file), algo[32];
    bool known = algo_yaml_known(resume ? r.config : text, sets, nsets, algo, sizeof algo);
    free(text);
    if (!known) {
      fprintf(stderr, "shoal: config: algo '%s' is not one of apex, impala, ppo (%s)\n", algo,
              resume ? "the stored run" : cfg_file);
      if (resume) store_run_clear(&r);
      return 1;
    }
  }
  const cfg_key *keys = run_schema(onpolicy, &nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg) return fail(NULL, &err);
  if (resume) {
    /* The run's stored config, with any new overrides on top. */
    int rc = config_load_string(cfg, r.config ? r.config : "", resume, &err);
    store_run_clear(&r);
    if (rc) return fail("resume: stored config", &err);
    snprintf(run, sizeof run, "%s", resume);
  } else if (config_load_file(cfg, cfg_file, &err)) {
    return fail(NULL, &err);
  }
  for (int i = 0; i < nsets; i++)
    if (config_set(cfg, sets[i], &err)) return fail(NULL, &err);
  /* A resumed run's stored config holds no secrets (config_dump_redacted): the store's
   * URI comes from --store, the token from --set again. */
  if (store_arg) {
    char set_uri[2048];
    snprintf(set_uri, sizeof set_uri, "store.uri=%s", store_arg);
    if (config_set(cfg, set_uri, &err)) return fail(NULL, &err);
  }
  /* A config stored without its secrets (a resumed run, a sweep's trial) takes them from
   * $SHOAL_TOKEN / $SHOAL_STORE_URI when those are set. */
  if (!resume && config_restore_secrets(cfg, cfg_file, &err)) return fail(NULL, &err);
  if (resume) {
    shoal_error ignored = {0};
    config_restore_secrets(cfg, resume, &ignored); /* what stays redacted is named below */
    if (!strcmp(config_string(cfg, "learner.token"), CONFIG_REDACTED)) {
      fprintf(stderr,
              "shoal: run %s has a learner token, which is not stored with the run: pass it "
              "again with --set learner.token=TOKEN\n",
              resume);
      return 1;
    }
    store_uri_info su;
    if (store_uri_parse(config_string(cfg, "store.uri"), &su, NULL) == 0 && su.password_masked) {
      fprintf(stderr,
              "shoal: run %s's store needs credentials, which are not stored with the run: pass "
              "--store URI\n",
              resume);
      return 1;
    }
  }
  if (config_check(cfg, &err) || run_check(onpolicy, cfg, &err)) return fail(NULL, &err);
  /* Validate what children would only find later: the env and its spaces. */
  if (probe_env(cfg, onpolicy, &err)) return fail("config: env", &err);
  if (resume && resume_refused(st, cfg, keys, nkeys, run)) return 1;

  if (!resume) {
    const char *name = config_string(cfg, "run.name");
    if (name[0]) {
      snprintf(run, sizeof run, "%s", name);
    } else {
      char base[PATH_MAX];
      snprintf(base, sizeof base, "%s", cfg_file);
      char *b = basename(base), *dot = strrchr(b, '.');
      if (dot) *dot = 0;
      time_t t = time(NULL);
      struct tm tm;
      localtime_r(&t, &tm);
      char stamp[32];
      strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
      snprintf(run, sizeof run, "%.40s-%.15s", b, stamp);
    }
    if (!store_name_valid(run)) {
      fprintf(stderr, "shoal: run name '%s' is not valid (1-63 of [A-Za-z0-9._-])\n", run);
      return 1;
    }
    if (store_open(&st, config_string(cfg, "store.uri"), &err)) return fail("store", &err);
  }
  /* The run keeps its config without secrets; the children get the whole config in a
   * file only they and this user can read (mkstemps: 0600), removed at the end. */
  char *yaml = NULL, *stored = NULL;
  if (config_dump(cfg, &yaml, &err) || config_dump_redacted(cfg, &stored, &err)) {
    free(yaml);
    return fail(NULL, &err);
  }
  int crc = resume ? 0 : store_run_create(st, run, stored, STORE_RUN_RUNNING, &err);
  free(stored);
  if (crc) free(yaml);
  if (crc == SHOAL_EEXIST) {
    fprintf(stderr,
            "shoal run: a run named %s exists in %s: continue it with `shoal run --resume %s%s`, "
            "or give this one another name (--set run.name=NAME)\n",
            run, store_uri(st), run,
            strcmp(config_string(cfg, "store.uri"), "file://runs") ? " --store URI" : "");
    store_close(st);
    config_destroy(cfg);
    return 1;
  }
  if (crc) return fail("creating the run", &err);
  if (resume) store_run_set_status(st, run, STORE_RUN_RUNNING, NULL);

  /* The children read the resolved config from a file of their own. */
  const char *tmp = getenv("TMPDIR");
  char cfg_path[PATH_MAX];
  snprintf(cfg_path, sizeof cfg_path, "%s/shoal-%s-XXXXXX.yaml", tmp && tmp[0] ? tmp : "/tmp", run);
  int fd = mkstemps(cfg_path, 5);
  if (fd < 0 || write(fd, yaml, strlen(yaml)) != (ssize_t)strlen(yaml) || close(fd)) {
    fprintf(stderr, "shoal: writing %s: %s\n", cfg_path, strerror(errno));
    return 1;
  }
  free(yaml);

  run_ctx ctx = {0};
  ctx.run = run;
  ctx.cfg_path = cfg_path;
  ctx.actors = (int)config_int(cfg, "actors");
  if (!onpolicy && !strcmp(config_string(cfg, "replay.source"), "store"))
    ctx.actors = 0; /* segments only */
  ctx.quiet = quiet;
  ctx.json = json;
  ctx.learner_prog = onpolicy ? "shoal-onpolicy-learner" : "shoal-learner";
  ctx.actor_prog = onpolicy ? "shoal-onpolicy-actor" : "shoal-actor";
  static char host[256];
  snprintf(host, sizeof host, "%s", config_string(cfg, "learner.listen"));
  char *colon = strrchr(host, ':');
  if (colon) *colon = 0;
  if (!strcmp(host, "0.0.0.0") || !host[0]) snprintf(host, sizeof host, "127.0.0.1");
  ctx.host = host;

  sup *s = sup_create(&err);
  if (!s) return fail("supervisor", &err);
  ctx.s = s;
  char learner_bin[PATH_MAX + 32];
  snprintf(learner_bin, sizeof learner_bin, "%s/%s", shoal_bindir, ctx.learner_prog);
  char *largv[] = {learner_bin, "--config", cfg_path, "--run", run, "--resume", NULL};
  /* A learner that fails for good (its config, its snapshot, another learner holding the
   * run) is not restarted: the run fails with its message. SIGUSR1 when a stop begins:
   * it ends training and takes what the stopping actors still send (learner/runtime.h). */
  sup_child_spec ls = {"learner", largv, true, true, 1, 20, false, RUN_EXIT_FATAL, SIGUSR1};
  ctx.learner_idx = sup_add(s, &ls, &err);
  for (int i = 0; i < ctx.actors; i++) {
    char name[32];
    snprintf(name, sizeof name, "actor-%d", i);
    char actor_bin[PATH_MAX + 32];
    snprintf(actor_bin, sizeof actor_bin, "%s/%s", shoal_bindir, ctx.actor_prog);
    char *aargv[] = {actor_bin, NULL};
    sup_child_spec as = {name, aargv, true, false, 0, 0, true, RUN_EXIT_FATAL};
    int idx = sup_add(s, &as, &err);
    if (idx < 0) return fail("supervisor", &err);
    if (i == 0) ctx.first_actor = idx;
  }
  char tb_dir[PATH_MAX];
  shoal_error tb_err = {0};
  if (tb && store_local_dir(st, run, tb_dir, sizeof tb_dir - 8, &tb_err) == 0) {
    /* File stores get <dir>/<run>/tb/events.out.tfevents.*: `tensorboard --logdir DIR`. */
    snprintf(tb_dir + strlen(tb_dir), 8, "/tb");
    if (tb_mirror_create(&ctx.tb, st, run, tb_dir, &err) ||
        (resume && tb_mirror_skip_existing(ctx.tb, &err))) {
      fprintf(stderr, "shoal: no tensorboard events: %s\n", err.msg);
      tb_mirror_destroy(ctx.tb);
      ctx.tb = NULL;
      err = (shoal_error){0};
    }
  }
  sup_set_callbacks(s, on_line, on_tick, 1.0, &ctx);
  sup_set_grace(s, 30);
  double t0 = shoal_now_s();
  int rc = sup_run(s, &err);
  double wall = shoal_now_s() - t0;
  const bool killed = sup_killed(s);
  const int stop_sig = sup_stop_signal(s);
  sup_child_stats ls_stats;
  sup_child_stats_get(s, ctx.learner_idx, &ls_stats);
  int actor_restarts = 0;
  for (int i = 0; i < ctx.actors; i++) {
    sup_child_stats a;
    sup_child_stats_get(s, ctx.first_actor + i, &a);
    actor_restarts += a.restarts;
  }
  sup_destroy(s);
  unlink(cfg_path);
  on_tick(&ctx); /* the last rows */
  tb_mirror_destroy(ctx.tb);

  if (ctx.done_line[0]) {
    char reason[32] = "?", evs[96] = "";
    json_str(ctx.done_line, "reason", reason, sizeof reason);
    double e = json_num(ctx.done_line, "eval"), b = json_num(ctx.done_line, "best_eval");
    /* IMPALA and PPO may evaluate the sampled policy (run.eval_greedy false): say which. */
    bool greedy = !config_has(cfg, "run.eval_greedy") || config_bool(cfg, "run.eval_greedy");
    if (isfinite(e))
      snprintf(evs, sizeof evs, ", %s eval %.1f (best %.1f)", greedy ? "greedy" : "sampled", e, b);
    /* The command's wall time first (what a person waited: the learner's "t" starts once
     * it is set up and leaves the children's start out, a tenth of a short on-policy run),
     * then the learner's training time, over all of a resumed run's processes. */
    double trained = json_num(ctx.done_line, "t"), stop_s = json_num(ctx.done_line, "stop_s");
    char times[96];
    if (!isfinite(trained))
      snprintf(times, sizeof times, "%.1f s", wall);
    else if (resume)
      snprintf(times, sizeof times, "%.1f s (this resume; %.1f s of training in all)", wall,
               trained);
    else
      snprintf(times, sizeof times, "%.1f s (%.1f s of it training)", wall, trained);
    /* A learner stopped by a signal: a person's, or the supervisor's after a child
     * failed for good (rc: said on the next line). */
    const char *why = !strcmp(reason, "signal")
                          ? (rc ? "stopped after a failure" : "stopped (Ctrl-C or SIGTERM)")
                      : !strcmp(reason, "lease_lost") ? "lost its lease to another learner"
                                                      : reason;
    /* The last learner process's batch accounting (since its start, a resume's restored
     * batches not counted), exact once its server has stopped: every batch it
     * acknowledged went into replay once, or was a resend of one already there. */
    char acct[160] = "";
    double nb = json_num(ctx.done_line, "batches"),
           ni = json_num(ctx.done_line, "batches_inserted");
    if (isfinite(nb) && isfinite(ni))
      snprintf(acct, sizeof acct, "; batches: %.0f taken, %.0f inserted, %.0f resends dropped", nb,
               ni, json_num(ctx.done_line, "resent_dropped"));
    if (!json)
      printf(
          "shoal: run %s %s after %s: %.0f env steps, %.0f updates, policy v%.0f%s; "
          "restarts: learner %d, actors %d; the stop took %.1f s%s\n",
          run, why, times, json_num(ctx.done_line, "env_steps"), json_num(ctx.done_line, "updates"),
          json_num(ctx.done_line, "version"), evs, ls_stats.restarts, actor_restarts,
          isfinite(stop_s) ? stop_s : 0.0, acct);
  }
  if (rc) {
    fprintf(stderr, "shoal: run %s failed: %s\n", run, err.msg);
    store_run_set_status(st, run, STORE_RUN_FAILED, NULL);
  } else if (!ctx.done_line[0]) {
    /* Stopped before the learner could record it (a signal during its start-up, or a
     * second signal that killed it). */
    store_run_set_status(st, run, STORE_RUN_STOPPED, NULL);
  }
  if (!rc && killed)
    fprintf(stderr,
            "shoal: run %s killed by a second %s%s; `shoal run --resume %s` continues from its "
            "last snapshot\n",
            run, stop_sig == SIGTERM ? "SIGTERM" : "SIGINT",
            ctx.done_line[0] ? "" : " before the learner finished its stop (no final snapshot)",
            run);
  store_close(st);
  config_destroy(cfg);
  /* A killed run is no success: 128 + the signal, as shells report a process killed by
   * it (130 for Ctrl-C). */
  if (!rc && killed) return 128 + (stop_sig ? stop_sig : SIGINT);
  return rc ? 1 : 0;
}

/* ---- shoal init ----------------------------------------------------------------- */

/* Records a run in the store for programs started by something else than `shoal run`
 * (Kubernetes, Slurm: deploy/): resolves and checks the config as run does, creates the
 * run (an existing run is left as it is, so a restarted job resumes it) and writes the
 * resolved config to --out for the learner and actors. */
static int cmd_init(int argc, char **argv) {
  const char *cfg_file = NULL, *out = NULL, *sets[128];
  int nsets = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc && nsets < 128)
      sets[nsets++] = argv[++i];
    else if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (argv[i][0] != '-' && !cfg_file)
      cfg_file = argv[i];
    else {
      cli_bad_arg("init", argc, argv, i);
      return 2;
    }
  }
  if (!cfg_file) {
    cli_bad_usage("init");
    return 2;
  }
  shoal_error err = {0};
  int nkeys;
  bool onpolicy = shoal_file_is_onpolicy(cfg_file, sets, nsets);
  const cfg_key *keys = run_schema(onpolicy, &nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg || config_load_file(cfg, cfg_file, &err)) return fail(NULL, &err);
  for (int i = 0; i < nsets; i++)
    if (config_set(cfg, sets[i], &err)) return fail(NULL, &err);
  if (config_check(cfg, &err) || run_check(onpolicy, cfg, &err)) return fail(NULL, &err);
  const char *run = config_string(cfg, "run.name");
  if (!store_name_valid(run)) {
    fprintf(stderr, "shoal init: run.name '%s' is not valid (1-63 of [A-Za-z0-9._-])\n", run);
    return 1;
  }
  if (probe_env(cfg, onpolicy, &err)) return fail("config: env", &err);
  char *stored = NULL;
  if (config_dump_redacted(cfg, &stored, &err)) return fail(NULL, &err);
  store *st;
  if (store_open(&st, config_string(cfg, "store.uri"), &err)) return fail("store", &err);
  int rc = store_run_create(st, run, stored, STORE_RUN_CREATED, &err);
  if (rc == SHOAL_EEXIST) {
    /* The stored config is the truth: init on a run that exists gives it back, and
     * refuses values that would make the stored config lie. */
    store_run r = {0};
    config *was = config_create(keys, nkeys, &err);
    char diff[1024] = "";
    int n = 0;
    if (was && store_run_find(st, run, &r, &err) == 0 &&
        config_load_string(was, r.config ? r.config : "", run, &err) == 0) {
      static const char *const where[] = {"store.uri", "learner.token"};
      n = config_diff(was, cfg, where, 2, diff, sizeof diff);
    }
    store_run_clear(&r);
    config_destroy(was);
    if (n) {
      fprintf(stderr,
              "shoal init: run %s exists in %s with another config (%s): a run's config is "
              "what it trained with; start a new run (another run.name), or change a live "
              "value with `shoal set`\n",
              run, store_uri(st), diff);
      return 1;
    }
    printf("shoal init: run %s exists in %s with this config; its programs resume it\n", run,
           store_uri(st));
  } else if (rc)
    return fail("creating the run", &err);
  else
    printf("shoal init: run %s recorded in %s\n", run, store_uri(st));
  /* --out feeds the programs' --config (deploy/): secrets reach them through --set. */
  if (out) {
    FILE *f = fopen(out, "w");
    if (!f || fputs(stored, f) < 0 || fclose(f)) {
      fprintf(stderr, "shoal init: writing %s: %s\n", out, strerror(errno));
      return 1;
    }
  }
  free(stored);
  store_close(st);
  config_destroy(cfg);
  return 0;
}

/* ---- shoal eval ----------------------------------------------------------------- */

/* What plays: an IMPALA / PPO agent (with the observation statistics of its snapshot) or
 * an Ape-X DQN, greedy. */
typedef struct eval_policy {
  bool onpolicy, greedy;
  op_spec s;
  op_agent a;
  op_norm z;
  dqn *q;
  shoal_rng rng;
} eval_policy;

static int dqn_greedy(void *ctx, const float *obs, int B, const uint8_t *first, void *env_act,
                      shoal_error *err) {
  eval_policy *p = ctx;
  (void)first;
  return dqn_act(p->q, obs, B, 0.0f, &p->rng, env_act, NULL, err);
}

/* The run's spec and policy from its config and a snapshot's bytes. */
static int policy_load(eval_policy *p, const config *cfg, int copies, const void *bytes, size_t len,
                       shoal_error *err) {
  int rc;
  if (p->onpolicy) {
    p->greedy = config_bool(cfg, "run.eval_greedy");
    if ((rc = op_spec_from_config(cfg, &p->s, err)) ||
        (rc = op_agent_from_config(cfg, &p->s, copies, false, NN_CPU, &p->a, err)) ||
        (p->s.norm_obs && (rc = op_norm_init(&p->z, (int)p->s.obs_n, err))))
      return rc;
    return op_snapshot_decode(&p->a, &p->s, p->s.norm_obs ? &p->z : NULL, bytes, len, err);
  }
  env *e;
  if ((rc = op_spec_env_strings(cfg, p->s.env_id, sizeof p->s.env_id, p->s.env_options,
                                sizeof p->s.env_options, err)) ||
      (rc = env_make_opts(&e, p->s.env_id, p->s.env_options, err)))
    return rc;
  const env_spec *sp = env_get_spec(e);
  rc = op_spec_set_env(&p->s, sp, err);
  dqn_config dc = apex_dqn_config(cfg, sp->obs.ndim, sp->obs.shape, sp->act.n);
  env_destroy(e);
  if (rc) return rc;
  dc.max_batch = copies;
  if (!(p->q = dqn_create(&dc, NN_CPU, false, err))) return err->code;
  /* The learner's snapshot ends in its optimizer state, which playing does not need. */
  size_t ml, sl;
  const uint8_t *sb;
  if ((rc = algo_snapshot_split(bytes, len, &ml, &sb, &sl, err))) return rc;
  return nn_model_load_buffer(dqn_model(p->q), bytes, ml, err);
}

static void policy_free(eval_policy *p) {
  op_agent_destroy(&p->a);
  op_norm_free(&p->z);
  dqn_destroy(p->q);
}

/* --render: the first episode of each of the first nrec env copies, recorded. */
typedef struct recorder {
  eval_rec *rec[16];
  int nrec;
  uint8_t *frame;
} recorder;

static int record_step(void *ctx, int64_t t, env_vec *ev, const int *episodes_done,
                       shoal_error *err) {
  recorder *r = ctx;
  for (int k = 0; k < r->nrec; k++) {
    if (episodes_done[k] || !eval_rec_wants(r->rec[k], (int)t)) continue;
    int rc = env_vec_render(ev, k, r->frame, err);
    if (!rc) rc = eval_rec_add(r->rec[k], (int)t, r->frame, err);
    if (rc) return rc;
  }
  return 0;
}

typedef struct eval_args {
  const char *run, *render;
  bool best, record;
  int episodes, frames_max, nrec;
  uint64_t seed;
} eval_args;

/* Plays the run's snapshot on the evaluation loop of algos/agent.h (Ape-X greedy; IMPALA
 * and PPO as run.eval_greedy says) and, with --render, stores the recordings. */
static int eval_run(store *st, const config *cfg, bool onpolicy, eval_args *a) {
  shoal_error err = {0};
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  if (store_snapshot_get(st, a->run, a->best ? STORE_BEST : STORE_LATEST, &meta, &bytes, &len,
                         &err))
    return fail("eval: snapshot", &err);
  if (a->best)
    printf("eval %s: the best snapshot, v%lld (scored %.2f at %lld env steps)\n", a->run,
           (long long)meta.version, meta.score, (long long)meta.env_steps);
  eval_policy p = {.onpolicy = onpolicy};
  recorder r = {.nrec = 0};
  op_eval *ev = NULL;
  int copies = a->episodes < 16 ? a->episodes : 16, rc = 1;
  double mean, sd, lo, hi;
  if (policy_load(&p, cfg, copies, bytes, len, &err)) {
    fail("eval: policy", &err);
    goto done;
  }
  if (!(ev = op_eval_create(&p.s, a->episodes, &err))) {
    fail("eval: env", &err);
    goto done;
  }
  const env_spec *sp = env_vec_spec(op_eval_env(ev));
  int max_steps = sp->max_episode_steps > 0 ? sp->max_episode_steps : 27000;
  if (a->record) {
    if (sp->render_w <= 0 || sp->render_h <= 0) {
      fprintf(stderr, "shoal eval: --render: %s cannot be rendered\n", sp->id);
      goto done;
    }
    r.nrec = a->nrec < op_eval_copies(ev) ? a->nrec : op_eval_copies(ev);
    if (!(r.frame = malloc((size_t)sp->render_w * (size_t)sp->render_h * 3))) {
      fprintf(stderr, "shoal eval: --render: out of memory\n");
      goto done;
    }
    for (int k = 0; k < r.nrec; k++)
      if (eval_rec_create(&r.rec[k], sp->render_w, sp->render_h, a->frames_max, &err)) {
        fail("eval: render", &err);
        goto done;
      }
    op_eval_watch(ev, record_step, &r);
  }
  shoal_rng_seed(&p.rng, a->seed);
  int erc = onpolicy
                ? op_eval_run(ev, &p.a, p.s.norm_obs ? &p.z : NULL, p.greedy, a->seed, &mean, &sd,
                              &lo, &hi, &err)
                : op_eval_run_policy(ev, dqn_greedy, &p, NULL, a->seed, &mean, &sd, &lo, &hi, &err);
  if (erc) {
    fail("eval", &err);
    goto done;
  }
  printf(
      "eval %s (%s, snapshot v%lld, %lld env steps): return %.2f ± %.2f over %d episodes "
      "(min %.1f, max %.1f)\n",
      a->run, sp->id, (long long)meta.version, (long long)meta.env_steps, mean, sd, a->episodes, lo,
      hi);
  rc = 0;
  for (int k = 0; k < r.nrec && !rc; k++) {
    double ret = 0;
    int64_t eplen = max_steps;
    op_eval_first_episode(ev, k, &ret, &eplen);
    int every, nframes = eval_rec_strip_frames(r.rec[k], &every);
    store_media_meta base;
    store_media_meta_init(&base);
    snprintf(base.run, sizeof base.run, "%s", a->run);
    snprintf(base.env, sizeof base.env, "%s", sp->id);
    base.version = meta.version, base.episode = k + 1, base.ret = ret, base.length = eplen;
    if (eval_rec_store(r.rec[k], st, &base, a->seed, k == 0 ? a->render : NULL, &err))
      rc = fail("eval: render", &err);
    else if (k == 0 && a->render)
      printf("eval %s: %d frames of episode 1 (return %.1f), one every %d steps: %s\n", a->run,
             nframes, ret, every, a->render);
  }
done:
  for (int k = 0; k < r.nrec; k++) eval_rec_destroy(r.rec[k]);
  free(r.frame);
  free(bytes);
  op_eval_destroy(ev);
  policy_free(&p);
  return rc;
}

static int cmd_eval(int argc, char **argv) {
  const char *uri = "file://runs";
  eval_args a = {.episodes = 100, .frames_max = 12, .nrec = 1, .seed = 12345};
  const char *sets[16];
  int nsets = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      /* The env the policy is played on, not how it was trained: a snapshot trained with
       * sticky actions evaluated without them, or under another episode limit. */
      const char *kv = argv[++i];
      if (strncmp(kv, "env.", 4) != 0 || !strncmp(kv, "env.id=", 7) || !strchr(kv, '=')) {
        fprintf(stderr,
                "shoal eval: --set '%s': only env.* keys other than env.id change an "
                "evaluation (KEY=VALUE, e.g. env.options=max_episode_steps=1000)\n",
                kv);
        return 2;
      }
      if (nsets == 16) {
        fprintf(stderr, "shoal eval: more than 16 --set\n");
        return 2;
      }
      sets[nsets++] = kv;
    } else if (!strcmp(argv[i], "--episodes") && i + 1 < argc) {
      if (!cli_int_arg("eval", "--episodes", argv[++i], 1, 100000, &a.episodes)) return 2;
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      const char *s = argv[++i];
      char *end;
      errno = 0;
      a.seed = strtoull(s, &end, 10);
      if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "shoal eval: --seed '%s': needs a whole number from 0 to 2^64-1\n", s);
        return 2;
      }
    } else if (!strcmp(argv[i], "--best"))
      a.best = true;
    else if (!strcmp(argv[i], "--render")) {
      /* Recordings go to the run's media; a following NAME.png also gets the strip. */
      a.record = true;
      size_t n = i + 1 < argc ? strlen(argv[i + 1]) : 0;
      if (n > 4 && argv[i + 1][0] != '-' && !strcmp(argv[i + 1] + n - 4, ".png"))
        a.render = argv[++i];
    } else if (!strcmp(argv[i], "--record") && i + 1 < argc) {
      if (!cli_int_arg("eval", "--record", argv[++i], 1, 16, &a.nrec)) return 2;
    } else if (!strcmp(argv[i], "--frames") && i + 1 < argc) {
      if (!cli_int_arg("eval", "--frames", argv[++i], 2, 64, &a.frames_max)) return 2;
      if (a.frames_max % 2) {
        fprintf(stderr, "shoal eval: --frames %d: needs an even number (2 to 64)\n", a.frames_max);
        return 2;
      }
    } else if (argv[i][0] != '-' && !a.run)
      a.run = argv[i];
    else {
      cli_bad_arg("eval", argc, argv, i);
      return 2;
    }
  }
  if (!a.run) {
    fprintf(stderr, "shoal eval: which run? give its name\n");
    return cli_bad_usage("eval");
  }
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) return fail("store", &err);
  store_run r = {0};
  if (store_run_find(st, a.run, &r, &err)) return fail("eval", &err);
  int nkeys;
  bool onpolicy = shoal_yaml_is_onpolicy(r.config, NULL, 0);
  const cfg_key *keys = run_schema(onpolicy, &nkeys);
  config *cfg = config_create(keys, nkeys, &err);
  if (!cfg || config_load_string(cfg, r.config ? r.config : "", a.run, &err))
    return fail("eval: the run's config", &err);
  store_run_clear(&r);
  for (int i = 0; i < nsets; i++) {
    if (config_set(cfg, sets[i], &err)) {
      config_destroy(cfg);
      store_close(st);
      return fail("eval: --set", &err);
    }
    printf("eval %s: %s (the run trained with its own)\n", a.run, sets[i]);
  }
  /* A Gymnasium env draws frames only when made with render_mode=rgb_array. */
  const char *eid = config_string(cfg, "env.id"), *eopts = config_string(cfg, "env.options");
  if (a.record && !strncmp(eid, "gym:", 4) && !strstr(eopts, "render_mode")) {
    char kv[1200];
    snprintf(kv, sizeof kv, "env.options=%s%srender_mode=rgb_array", eopts, eopts[0] ? "," : "");
    if (config_set(cfg, kv, &err)) {
      config_destroy(cfg);
      store_close(st);
      return fail("eval: --render", &err);
    }
  }
  int rc = eval_run(st, cfg, onpolicy, &a);
  config_destroy(cfg);
  store_close(st);
  return rc;
}

/* The built-in (and plugin) kinds, then what Gymnasium has registered, as gym: ids. */
static int cmd_envs(int argc, char **argv) {
  (void)argv;
  if (argc) return cli_bad_usage("envs");
  const char *names[256];
  int n = env_list(names, 256);
  for (int i = 0; i < n && i < 256; i++) printf("%s\n", names[i]);
  char **ids = NULL;
  int ng = 0;
  shoal_error err = {0};
  if (env_gym_registered(&ids, &ng, &err)) {
    fprintf(stderr, "shoal envs: no Gymnasium envs listed: %s\n", err.msg);
    return 0;
  }
  for (int i = 0; i < ng; i++) {
    printf("gym:%s\n", ids[i]);
    free(ids[i]);
  }
  free(ids);
  return 0;
}

int main(int argc, char **argv) {
  find_shoal_bindir();
  if (argc < 2) {
    cli_overview(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    if (argc > 2 && cli_help(argv[2])) return 0;
    cli_overview(stdout);
    return 0;
  }
  /* shoal CMD --help: the command's usage on stdout, whatever else is given. */
  if (cli_wants_help(argc - 2, argv + 2) && cli_help(cmd)) return 0;
  static const struct {
    const char *name;
    int (*fn)(int, char **);
  } cmds[] = {{"run", cmd_run},       {"eval", cmd_eval},     {"init", cmd_init},
              {"status", cmd_status}, {"set", cmd_set},       {"plot", cmd_plot},
              {"sweep", cmd_sweep},   {"pbt", cmd_sweep},     {"worker", cmd_worker},
              {"tboard", cmd_tboard}, {"import", cmd_import}, {"dataset", cmd_dataset},
              {"media", cmd_media},   {"config", cmd_config}, {"envs", cmd_envs}};
  for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++)
    if (!strcmp(cmd, cmds[i].name)) return cmds[i].fn(argc - 2, argv + 2);
  fprintf(stderr, "shoal: no command '%s'\n", cmd);
  cli_overview(stderr);
  return 2;
}
