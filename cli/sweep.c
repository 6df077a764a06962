/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hyperparameter sweeps as jobs in the store (TensorLayer's workflow idea):
 *
 *   shoal sweep SWEEP.yaml [--store URI] [--dry-run] [--workers N]
 *   shoal sweep --report NAME [--store URI]
 *   shoal worker --sweep NAME [--store URI] [--name W] [--heartbeat S] [--stale S]
 *                [--max-trials N]
 *
 * `sweep` expands a grid or random search over config keys of a base config into
 * trials, each stored with store_trial_create as the trial's complete resolved config
 * (so a worker on any machine needs nothing but the store), after checking every trial's
 * config against the schema. Workers, any number on any machine, claim trials atomically
 * (store_trial_claim), heartbeat on a thread while the trial runs as `shoal run` (run
 * name <sweep>-<trial>-<attempt>), and record the result: the learner's final counters
 * and the score. A worker re-queues trials whose heartbeat lapsed (a dead worker's) and
 * waits while other workers' trials may still come back, so the sweep completes. A
 * worker that dies takes its `shoal run` with it (the parent-death signal), so a
 * re-run trial never races an orphan.
 *
 * SWEEP.yaml (keys are the config's dotted keys):
 *   sweep:
 *     name: cartpole-lr            # the sweep id in the store
 *     base: cartpole-apex.yaml     # relative to this file
 *     method: grid                 # grid | random
 *     trials: 8                    # random: how many draws
 *     repeats: 1                   # each point this many times, run.seed + 0, 1, ...
 *     seed: 1                      # random: the draw's seed
 *     metric: best_eval            # best_eval | eval | return100 (from the run's end)
 *     mode: max                    # max | min
 *   set:                           # for every trial
 *     run.max_seconds: 60
 *   params:
 *     dqn.lr: [0.001, 0.0005]               # a list: grid axis or random choice
 *     dqn.target_period: {min: 100, max: 1000, int: true}          # random: uniform
 *     learner.replay_ratio: {min: 1, max: 16, log: true, num: 5}   # grid: num points
 */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "run/run.h"
#include "cli/commands.h"
#include "cli/pbt.h"
#include "config/config.h"
#include "store/store.h"

extern char **environ;

enum { MAX_PARAMS = 32, MAX_VALUES = 256, MAX_SETS = 128, MAX_TRIALS = 10000 };

typedef struct sw_param {
  char key[128];
  bool range;
  int nvalues;
  char *values[MAX_VALUES]; /* a list's scalars (grid points of a range once expanded) */
  double min, max;
  bool log, integer;
  int num; /* grid points of a range; 0: none given */
} sw_param;

typedef struct sw_spec {
  char name[STORE_NAME_MAX];
  char base[PATH_MAX];
  bool random;
  int trials, repeats;
  uint64_t seed;
  char metric[32];
  bool minimize;
  /* A population (a pbt: section): the settings every trial carries. */
  bool pbt;
  pbt_spec ps;
  int nsets;
  char *sets[MAX_SETS];
  int nparams;
  sw_param params[MAX_PARAMS];
} sw_spec;

static void spec_free(sw_spec *s) {
  for (int i = 0; i < s->nsets; i++) free(s->sets[i]);
  for (int p = 0; p < s->nparams; p++)
    for (int v = 0; v < s->params[p].nvalues; v++) free(s->params[p].values[v]);
}

/* ---- reading SWEEP.yaml (config/'s YAML tree) ------------------------------------- */

static int where(shoal_error *err, const char *path, const cfg_node *n, const char *fmt,
                 const char *a) {
  return shoal_error_set(err, SHOAL_EINVAL, "%s:%d: %s%s", path, n ? n->line : 0, fmt, a ? a : "");
}

static int parse_number(const char *path, const cfg_node *n, const char *v, double *out,
                        shoal_error *err) {
  char *end;
  *out = v ? strtod(v, &end) : NAN;
  if (!v || end == v || *end || !isfinite(*out))
    return where(err, path, n, "expected a finite number, got ", v ? v : "a collection");
  return 0;
}

static bool truthy(const char *v) {
  return v && (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"));
}

static int read_param(const char *path, const char *key, const cfg_node *n, sw_param *p,
                      shoal_error *err) {
  memset(p, 0, sizeof *p);
  snprintf(p->key, sizeof p->key, "%s", key);
  if (n->type == CFG_NODE_SCALAR) {
    p->values[p->nvalues++] = strdup(n->scalar);
  } else if (n->type == CFG_NODE_LIST) {
    for (int i = 0; i < n->n; i++) {
      const cfg_node *v = &n->items[i];
      if (!v->scalar) return where(err, path, v, "a list of plain values for ", key);
      if (p->nvalues == MAX_VALUES) return where(err, path, v, "more than 256 values for ", key);
      p->values[p->nvalues++] = strdup(v->scalar);
    }
    if (p->nvalues == 0) return where(err, path, n, "an empty list for ", key);
  } else {
    p->range = true;
    bool has_min = false, has_max = false;
    for (int i = 0; i < n->n; i++) {
      const cfg_node *kn = &n->keys[i], *vn = &n->items[i];
      const char *k = kn->scalar, *v = vn->scalar;
      double x;
      if (!k) return where(err, path, kn, "a plain key in the range of ", key);
      if (!strcmp(k, "min")) {
        if (parse_number(path, vn, v, &p->min, err)) return SHOAL_EINVAL;
        has_min = true;
      } else if (!strcmp(k, "max")) {
        if (parse_number(path, vn, v, &p->max, err)) return SHOAL_EINVAL;
        has_max = true;
      } else if (!strcmp(k, "log")) {
        p->log = truthy(v);
      } else if (!strcmp(k, "int")) {
        p->integer = truthy(v);
      } else if (!strcmp(k, "num")) {
        if (parse_number(path, vn, v, &x, err)) return SHOAL_EINVAL;
        if (x < 2 || x > MAX_VALUES || x != floor(x))
          return where(err, path, vn, "num must be a whole number in [2, 256] for ", key);
        p->num = (int)x;
      } else {
        return where(err, path, kn, "a range takes min, max, log, int and num, not ", k);
      }
    }
    if (!has_min || !has_max) return where(err, path, n, "a range needs min and max: ", key);
    if (!(p->max >= p->min)) return where(err, path, n, "max < min in the range of ", key);
    if (p->log && !(p->min > 0)) return where(err, path, n, "a log range needs min > 0: ", key);
  }
  return 0;
}

static int load_spec(const char *path, sw_spec *s, shoal_error *err) {
  memset(s, 0, sizeof *s);
  s->repeats = 1;
  s->seed = 1;
  snprintf(s->metric, sizeof s->metric, "best_eval");
  cfg_tree *doc;
  int rc = config_tree_load_file(&doc, path, err);
  if (rc) return rc;
  const cfg_node *root = config_tree_root(doc);
  if (!root || root->type != CFG_NODE_MAP) {
    rc = where(err, path, root, "expected a mapping with sweep, set and params", NULL);
    goto done;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *dn = dirname(dir);
  for (int i = 0; i < root->n; i++) {
    const cfg_node *kn = &root->keys[i], *vn = &root->items[i];
    const char *section = kn->scalar;
    if (!section || (strcmp(section, "sweep") && strcmp(section, "pbt") && strcmp(section, "set") &&
                     strcmp(section, "params"))) {
      rc = where(err, path, kn, "sections are sweep (or pbt), set and params, not ",
                 section ? section : "a collection");
      goto done;
    }
    if (!strcmp(section, "pbt")) {
      if (s->pbt || s->name[0]) {
        rc = where(err, path, kn, "one sweep or pbt section, not two", NULL);
        goto done;
      }
      s->pbt = true;
      s->random = true;
      snprintf(s->metric, sizeof s->metric, "return100");
      s->ps = (pbt_spec){.population = 0, .rounds = 0, .truncation = 0.25, .resample = 0.25};
    }
    if (vn->type != CFG_NODE_MAP) {
      rc = where(err, path, vn, "expected a mapping under ", section);
      goto done;
    }
    for (int q = 0; q < vn->n; q++) {
      const cfg_node *k2 = &vn->keys[q], *v2 = &vn->items[q];
      const char *key = k2->scalar, *val = v2->scalar;
      if (!key) {
        rc = where(err, path, k2, "a plain key expected in ", section);
        goto done;
      }
      if (!strcmp(section, "params")) {
        if (s->nparams == MAX_PARAMS) {
          rc = where(err, path, k2, "more than 32 params", NULL);
          goto done;
        }
        if ((rc = read_param(path, key, v2, &s->params[s->nparams++], err))) goto done;
        continue;
      }
      if (!val) {
        rc = where(err, path, v2, "a plain value expected for ", key);
        goto done;
      }
      if (!strcmp(section, "set")) {
        if (s->nsets == MAX_SETS) {
          rc = where(err, path, k2, "more than 128 keys under set", NULL);
          goto done;
        }
        if (asprintf(&s->sets[s->nsets], "%s=%s", key, val) < 0) {
          rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
          goto done;
        }
        s->nsets++;
        continue;
      }
      double x;
      if (s->pbt && (!strcmp(key, "method") || !strcmp(key, "trials") || !strcmp(key, "repeats"))) {
        rc =
            where(err, path, k2, "a population is pbt.population members; pbt does not take ", key);
        goto done;
      }
      if (!strcmp(key, "name")) {
        if (!store_name_valid(val) || strlen(val) > 40) {
          rc = where(err, path, v2, "sweep.name must be 1-40 of [A-Za-z0-9._-], not ", val);
          goto done;
        }
        snprintf(s->name, sizeof s->name, "%s", val);
      } else if (!strcmp(key, "base")) {
        if (val[0] == '/')
          snprintf(s->base, sizeof s->base, "%s", val);
        else
          snprintf(s->base, sizeof s->base, "%s/%s", dn, val);
      } else if (!strcmp(key, "method")) {
        if (strcmp(val, "grid") && strcmp(val, "random")) {
          rc = where(err, path, v2, "sweep.method is grid or random, not ", val);
          goto done;
        }
        s->random = !strcmp(val, "random");
      } else if (!strcmp(key, "trials") || !strcmp(key, "repeats") || !strcmp(key, "seed")) {
        if ((rc = parse_number(path, v2, val, &x, err))) goto done;
        if (x < (strcmp(key, "seed") ? 1 : 0) || x > 1e15 || x != floor(x)) {
          rc = where(err, path, v2, "expected a whole number >= 1 for sweep.", key);
          goto done;
        }
        if (!strcmp(key, "trials")) s->trials = x > MAX_TRIALS ? MAX_TRIALS + 1 : (int)x;
        if (!strcmp(key, "repeats")) s->repeats = x > MAX_TRIALS ? MAX_TRIALS + 1 : (int)x;
        if (!strcmp(key, "seed")) s->seed = (uint64_t)x;
      } else if (!strcmp(key, "metric")) {
        if (strcmp(val, "best_eval") && strcmp(val, "eval") && strcmp(val, "return100")) {
          rc = where(err, path, v2, "sweep.metric is best_eval, eval or return100, not ", val);
          goto done;
        }
        snprintf(s->metric, sizeof s->metric, "%s", val);
      } else if (s->pbt && (!strcmp(key, "population") || !strcmp(key, "rounds") ||
                            !strcmp(key, "ready_steps"))) {
        if ((rc = parse_number(path, v2, val, &x, err))) goto done;
        double hi = !strcmp(key, "population") ? PBT_MAX_MEMBERS
                    : !strcmp(key, "rounds")   ? 1000
                                               : 1e15;
        if (x < (!strcmp(key, "population") ? 2 : 1) || x > hi || x != floor(x)) {
          rc = where(err, path, v2, "out of range (population 2-99, rounds 1-1000): pbt.", key);
          goto done;
        }
        if (!strcmp(key, "population")) s->ps.population = (int)x;
        if (!strcmp(key, "rounds")) s->ps.rounds = (int)x;
        if (!strcmp(key, "ready_steps")) s->ps.ready = (int64_t)x;
      } else if (s->pbt && (!strcmp(key, "truncation") || !strcmp(key, "resample"))) {
        if ((rc = parse_number(path, v2, val, &x, err))) goto done;
        bool trunc = !strcmp(key, "truncation");
        if (trunc ? !(x > 0 && x <= 0.5) : !(x >= 0 && x <= 1)) {
          rc = where(err, path, v2, "truncation is in (0, 0.5], resample in [0, 1]: pbt.", key);
          goto done;
        }
        if (trunc)
          s->ps.truncation = x;
        else
          s->ps.resample = x;
      } else if (!strcmp(key, "mode")) {
        if (strcmp(val, "max") && strcmp(val, "min")) {
          rc = where(err, path, v2, "sweep.mode is max or min, not ", val);
          goto done;
        }
        s->minimize = !strcmp(val, "min");
      } else {
        rc = where(err, path, k2,
                   s->pbt ? "pbt takes name, base, population, rounds, ready_steps, truncation, "
                            "resample, seed, metric and mode, not "
                          : "sweep takes name, base, method, trials, repeats, seed, metric and "
                            "mode, not ",
                   key);
        goto done;
      }
    }
  }
  if (!s->name[0])
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: sweep.name is required", path);
  else if (!s->base[0])
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: sweep.base is required", path);
  else if (s->nparams == 0)
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: params is empty", path);
  else if (s->pbt && (!s->ps.population || !s->ps.rounds || !s->ps.ready))
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: pbt needs population, rounds and ready_steps",
                         path);
  else if (s->pbt && s->nparams > PBT_MAX_PARAMS)
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: pbt explores at most %d params", path,
                         PBT_MAX_PARAMS);
  else if (!s->pbt && s->random && s->trials < 1)
    rc = shoal_error_set(err, SHOAL_EINVAL, "%s: a random sweep needs sweep.trials", path);
  if (!rc && s->pbt) {
    /* the explored keys as the trials carry them */
    s->trials = s->ps.population;
    s->ps.seed = s->seed;
    s->ps.nparams = s->nparams;
    for (int i = 0; !rc && i < s->nparams; i++) {
      const sw_param *q = &s->params[i];
      pbt_param *pp = &s->ps.params[i];
      snprintf(pp->key, sizeof pp->key, "%s", q->key);
      pp->range = q->range, pp->min = q->min, pp->max = q->max, pp->log = q->log;
      pp->integer = q->integer;
      if (q->range && q->num)
        rc = shoal_error_set(err, SHOAL_EINVAL,
                             "%s: param %s: pbt draws and perturbs a range; "
                             "num is for grids",
                             path, q->key);
      for (int v = 0; !rc && v < q->nvalues; v++) {
        if (v == PBT_MAX_CHOICES || strlen(q->values[v]) >= sizeof pp->choices[0] ||
            strchr(q->values[v], ' '))
          rc = shoal_error_set(err, SHOAL_EINVAL,
                               "%s: param %s: pbt takes at most %d choices "
                               "of at most 63 characters without spaces",
                               path, q->key, PBT_MAX_CHOICES);
        else
          snprintf(pp->choices[pp->nchoices++], sizeof pp->choices[0], "%s", q->values[v]);
      }
    }
  }
done:
  config_tree_destroy(doc);
  return rc;
}

/* A range's grid: num points, even in value or (log) in its logarithm. */
static int expand_grid(sw_spec *s, shoal_error *err) {
  for (int p = 0; p < s->nparams; p++) {
    sw_param *q = &s->params[p];
    if (!q->range) continue;
    if (!q->num)
      return shoal_error_set(err, SHOAL_EINVAL,
                             "param %s: a grid needs a list or a range with num (points)", q->key);
    for (int i = 0; i < q->num; i++) {
      double f = (double)i / (q->num - 1), x;
      x = q->log ? exp(log(q->min) + f * (log(q->max) - log(q->min)))
                 : q->min + f * (q->max - q->min);
      char buf[64];
      if (q->integer)
        snprintf(buf, sizeof buf, "%.0f", round(x));
      else
        snprintf(buf, sizeof buf, "%.6g", x);
      q->values[q->nvalues++] = strdup(buf);
    }
    q->range = false;
  }
  return 0;
}

/* ---- creating the trials ------------------------------------------------------- */

/* The trial's text: a header a report reads, then the complete resolved config. */
static int trial_text(const sw_spec *s, const char *uri, char *const *assign, int nassign,
                      int repeat, const char *extra, char **out, shoal_error *err) {
  int nkeys;
  /* An IMPALA / PPO base config (algo: ...) is checked against its own schema. */
  bool onpolicy = shoal_file_is_onpolicy(s->base, (const char *const *)s->sets, s->nsets);
  const cfg_key *keys = onpolicy ? onpolicy_schema(&nkeys) : apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, err);
  if (!cfg) return err->code;
  int rc = config_load_file(cfg, s->base, err);
  for (int i = 0; !rc && i < s->nsets; i++) rc = config_set(cfg, s->sets[i], err);
  for (int i = 0; !rc && i < nassign; i++) rc = config_set(cfg, assign[i], err);
  char seed[64];
  if (!rc && s->repeats > 1) {
    snprintf(seed, sizeof seed, "run.seed=%lld", (long long)config_int(cfg, "run.seed") + repeat);
    rc = config_set(cfg, seed, err);
  }
  if (!rc && uri) {
    char su[2048];
    snprintf(su, sizeof su, "store.uri=%s", uri);
    rc = config_set(cfg, su, err);
  }
  if (!rc) rc = config_check(cfg, err);
  if (!rc && strcmp(s->metric, "return100") && config_float(cfg, "run.solve_return") == 0)
    rc = shoal_error_set(err, SHOAL_EINVAL,
                         "metric %s needs evaluations, which run only with run.solve_return set "
                         "(e.g. 475 for CartPole-v1): set it, or use metric return100",
                         s->metric);
  /* Trials live in the store: no secrets in them. A worker passes its own --store, and
   * the token reaches the trial's programs through $SHOAL_TOKEN. */
  char *yaml = NULL;
  if (!rc) rc = config_dump_redacted(cfg, &yaml, err);
  if (!rc) {
    char params[2048] = "";
    for (int i = 0; i < nassign; i++)
      snprintf(params + strlen(params), sizeof params - strlen(params), "%s%s", i ? " " : "",
               assign[i]);
    if (s->repeats > 1)
      snprintf(params + strlen(params), sizeof params - strlen(params), " %s", seed);
    if (asprintf(out, "# shoal-trial 1\n# params: %s\n# score: %s %s\n%s%s", params, s->metric,
                 s->minimize ? "min" : "max", extra ? extra : "", yaml) < 0)
      rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  }
  free(yaml);
  config_destroy(cfg);
  return rc;
}

static const char *header(const char *text, const char *tag, char *out, size_t cap) {
  out[0] = 0;
  const char *p = text ? strstr(text, tag) : NULL;
  if (!p) return out;
  p += strlen(tag);
  size_t n = strcspn(p, "\n");
  snprintf(out, cap, "%.*s", (int)n, p);
  return out;
}

/* The member and round a population's trial trains ("# pbt: member=M round=R"); false
 * for a plain sweep's trial. */
static bool pbt_trial(const char *text, int *member, int *round) {
  char h[64];
  header(text, "# pbt: ", h, sizeof h);
  return h[0] && sscanf(h, "member=%d round=%d", member, round) == 2;
}

static void member_run(const char *sweep, int member, char *out, size_t cap) {
  snprintf(out, cap, "%.40s-m%02d", sweep, member);
}

static int cmd_report(const char *sweep, const char *uri);

static int run_local_workers(const char *sweep, const char *uri, int n) {
  char self[PATH_MAX + 16];
  snprintf(self, sizeof self, "%s/shoal", shoal_bindir);
  pid_t pids[64];
  int started = 0;
  for (int i = 0; i < n && i < 64; i++) {
    char name[64];
    snprintf(name, sizeof name, "local-%d-%d", (int)getpid(), i);
    char *argv[] = {self,        "worker", "--sweep", (char *)sweep, "--store",
                    (char *)uri, "--name", name,      NULL};
    if (posix_spawn(&pids[started], self, NULL, NULL, argv, environ) == 0) started++;
  }
  int bad = 0;
  for (int i = 0; i < started; i++) {
    int st;
    while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {
    }
    bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  return bad || started < n ? 1 : 0;
}

int cmd_sweep(int argc, char **argv) {
  const char *file = NULL, *uri = NULL, *report = NULL;
  bool dry = false;
  int workers = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--report") && i + 1 < argc)
      report = argv[++i];
    else if (!strcmp(argv[i], "--dry-run"))
      dry = true;
    else if (!strcmp(argv[i], "--workers") && i + 1 < argc)
      workers = atoi(argv[++i]);
    else if (argv[i][0] != '-' && !file)
      file = argv[i];
    else {
      cli_bad_arg("sweep", argc, argv, i);
      return 2;
    }
  }
  if (report) return cmd_report(report, uri);
  if (!file || workers < 0 || workers > 64) {
    cli_bad_usage("sweep");
    return 2;
  }
  shoal_error err = {0};
  sw_spec s;
  if (load_spec(file, &s, &err)) {
    fprintf(stderr, "shoal sweep: %s\n", err.msg);
    spec_free(&s);
    return 1;
  }
  int rc = 1;
  store *st = NULL;
  char **texts = NULL;
  char(*labels)[256] = NULL;
  int ntrials = 0;
  if (!s.random && expand_grid(&s, &err)) {
    fprintf(stderr, "shoal sweep: %s\n", err.msg);
    goto done;
  }
  /* How many points, then trials (points × repeats). */
  long points = 1;
  if (s.random) {
    points = s.trials;
  } else {
    for (int p = 0; p < s.nparams && points <= MAX_TRIALS; p++) points *= s.params[p].nvalues;
  }
  long total = points * s.repeats;
  if (total > MAX_TRIALS) {
    fprintf(stderr, "shoal sweep: %ld trials; at most %d\n", total, MAX_TRIALS);
    goto done;
  }
  texts = calloc((size_t)total, sizeof *texts);
  labels = calloc((size_t)total, sizeof *labels);
  if (!texts || !labels) goto done;
  shoal_rng rng;
  shoal_rng_seed(&rng, s.seed);
  for (long pt = 0; pt < points; pt++) {
    char *assign[MAX_PARAMS];
    char bufs[MAX_PARAMS][256];
    long rest = pt;
    for (int p = 0; p < s.nparams; p++) {
      sw_param *q = &s.params[p];
      const char *val;
      char num[64];
      if (!s.random) {
        val = q->values[rest % q->nvalues];
        rest /= q->nvalues;
      } else if (!q->range) {
        val = q->values[shoal_rng_below(&rng, (uint64_t)q->nvalues)];
      } else {
        double u = shoal_rng_uniform(&rng), x;
        x = q->log ? exp(log(q->min) + u * (log(q->max) - log(q->min)))
                   : q->min + u * (q->max - q->min);
        if (q->integer)
          snprintf(num, sizeof num, "%.0f", round(x));
        else
          snprintf(num, sizeof num, "%.6g", x);
        val = num;
      }
      snprintf(bufs[p], sizeof bufs[p], "%s=%s", q->key, val);
      assign[p] = bufs[p];
    }
    /* a population's member: its number, round 0, and the population's settings */
    char extra[8192] = "";
    if (s.pbt) {
      int w = snprintf(extra, sizeof extra, "# pbt: member=%ld round=0\n", pt);
      if (pbt_spec_format(&s.ps, extra + w, sizeof extra - (size_t)w) < 0) {
        fprintf(stderr, "shoal sweep: the pbt settings are too long\n");
        goto done;
      }
    }
    for (int r = 0; r < s.repeats; r++) {
      if (trial_text(&s, uri, assign, s.nparams, r, s.pbt ? extra : NULL, &texts[ntrials], &err)) {
        fprintf(stderr, "shoal sweep: trial %ld (%s%s): %s\n", pt, bufs[0],
                s.nparams > 1 ? " ..." : "", err.msg);
        goto done;
      }
      header(texts[ntrials], "# params: ", labels[ntrials], sizeof labels[ntrials]);
      ntrials++;
    }
  }
  if (dry) {
    for (int i = 0; i < ntrials; i++)
      printf(s.pbt ? "m%02d-r000  %s\n" : "t%03d  %s\n", i, labels[i]);
    printf("shoal sweep: %s: %d trials (dry run: nothing stored)\n", s.name, ntrials);
    rc = 0;
    goto done;
  }
  if (store_open(&st, uri, &err)) {
    fprintf(stderr, "shoal sweep: store: %s\n", cli_unprefix(err.msg, "store"));
    goto done;
  }
  store_trial *have = NULL;
  size_t nhave = 0;
  if (store_trial_list(st, s.name, &have, &nhave, &err)) {
    fprintf(stderr, "shoal sweep: %s\n", err.msg);
    goto done;
  }
  store_trials_free(have, nhave);
  if (nhave) {
    fprintf(stderr,
            "shoal sweep: sweep %s exists already with %zu trials in %s: pick another "
            "sweep.name (see `shoal sweep --report %s`)\n",
            s.name, nhave, store_uri(st), s.name);
    goto done;
  }
  for (int i = 0; i < ntrials; i++) {
    char id[16];
    /* a population's trials are its members' rounds: m<member>-r<round> */
    snprintf(id, sizeof id, s.pbt ? "m%02d-r000" : "t%03d", i);
    if (store_trial_create(st, s.name, id, texts[i], &err)) {
      fprintf(stderr, "shoal sweep: trial %s: %s\n", id, err.msg);
      goto done;
    }
  }
  if (s.pbt)
    printf("shoal sweep: %s: a population of %d members, %d rounds of %lld env steps (pbt) in %s\n",
           s.name, s.ps.population, s.ps.rounds, (long long)s.ps.ready, store_uri(st));
  else
    printf("shoal sweep: %s: %d trials (%s) in %s\n", s.name, ntrials, s.random ? "random" : "grid",
           store_uri(st));
  char uri_copy[2048];
  snprintf(uri_copy, sizeof uri_copy, "%s", uri ? uri : store_uri(st));
  if (workers > 0) {
    printf("shoal sweep: running %d local workers\n", workers);
    fflush(stdout);
    int wrc = run_local_workers(s.name, uri_copy, workers);
    rc = cmd_report(s.name, uri_copy) || wrc;
  } else {
    printf(
        "start workers (any number, any machine that reaches the store):\n"
        "  shoal worker --sweep %s --store %s\n"
        "then: shoal sweep --report %s --store %s\n",
        s.name, uri_copy, s.name, uri_copy);
    rc = 0;
  }
done:
  for (int i = 0; i < ntrials; i++) free(texts[i]);
  free(texts);
  free(labels);
  store_close(st);
  spec_free(&s);
  return rc;
}

/* ---- the report ---------------------------------------------------------------- */

typedef struct row {
  store_trial *t;
  double score;
  int rank_class; /* 0 scored, 1 done without a score, 2 running, 3 pending, 4 failed */
} row;

static bool sort_min;

static int row_cmp(const void *a, const void *b) {
  const row *x = a, *y = b;
  if (x->rank_class != y->rank_class) return x->rank_class - y->rank_class;
  if (x->rank_class == 0 && x->score != y->score) return (x->score > y->score) ^ sort_min ? -1 : 1;
  return strcmp(x->t->id, y->t->id);
}

/* A population's members (each at its latest finished round) and its lineage: every
 * exploit, with the member copied, the snapshot, both scores and the values explored. */
static void pbt_report(const store_trial *t, size_t n) {
  pbt_spec ps;
  shoal_error err = {0};
  if (pbt_spec_parse(t[0].params, &ps, &err)) {
    printf("pbt: %s\n", err.msg);
    return;
  }
  int last[PBT_MAX_MEMBERS];
  for (int m = 0; m < PBT_MAX_MEMBERS; m++) last[m] = -1;
  for (size_t i = 0; i < n; i++) {
    int m, r;
    if (pbt_trial(t[i].params, &m, &r) && m >= 0 && m < ps.population &&
        t[i].status == STORE_TRIAL_DONE && (last[m] < 0 || r > last[m]))
      last[m] = r;
  }
  printf(
      "\npopulation: %d members, %d rounds of %lld env steps, the bottom %.0f%% copies the "
      "top\n%-6s %-6s %10s %10s  %s\n",
      ps.population, ps.rounds, (long long)ps.ready, ps.truncation * 100, "member", "round",
      "score", "env steps", "params now");
  for (int m = 0; m < ps.population; m++)
    for (size_t i = 0; i < n; i++) {
      int tm, tr;
      if (!pbt_trial(t[i].params, &tm, &tr) || tm != m || tr != last[m]) continue;
      char params[512];
      header(t[i].params, "# params: ", params, sizeof params);
      printf("m%02d    %-6d %10.2f %10.0f  %s\n", m, tr + 1, json_num(t[i].result, "score"),
             json_num(t[i].result, "env_steps"), params);
    }
  printf("\nlineage (exploits):\n%-5s %-6s %-6s %-22s %8s %8s  %s\n", "round", "member", "copied",
         "snapshot", "own", "its", "explored");
  int exploits = 0;
  for (size_t i = 0; i < n; i++) {
    int m, r, leader, lround;
    char h[512], from[STORE_NAME_MAX], explored[1024], snap[160];
    double version, score, own;
    header(t[i].params, "# pbt-copy: ", h, sizeof h);
    if (!pbt_trial(t[i].params, &m, &r) ||
        sscanf(h, "member=%d run=%63s version=%lf score=%lf round=%d own=%lf", &leader, from,
               &version, &score, &lround, &own) != 6)
      continue;
    header(t[i].params, "# pbt-explore: ", explored, sizeof explored);
    snprintf(snap, sizeof snap, "%s@v%.0f", from, version);
    printf("%-5d m%02d    m%02d    %-22s %8.2f %8.2f  %s\n", r, m, leader, snap, own, score,
           explored);
    exploits++;
  }
  if (!exploits) printf("(none yet)\n");
}

static int cmd_report(const char *sweep, const char *uri) {
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) {
    fprintf(stderr, "shoal sweep: store: %s\n", cli_unprefix(err.msg, "store"));
    return 1;
  }
  store_trial *t = NULL;
  size_t n = 0;
  if (store_trial_list(st, sweep, &t, &n, &err)) {
    fprintf(stderr, "shoal sweep: %s\n", err.msg);
    store_close(st);
    return 1;
  }
  if (n == 0) {
    fprintf(stderr, "shoal sweep: no sweep %s in %s\n", sweep, store_uri(st));
    store_close(st);
    return 1;
  }
  row *rows = calloc(n, sizeof *rows);
  int count[5] = {0};
  char metric[64];
  header(t[0].params, "# score: ", metric, sizeof metric);
  sort_min = strstr(metric, " min") != NULL;
  for (size_t i = 0; i < n; i++) {
    rows[i].t = &t[i];
    rows[i].score = t[i].result ? json_num(t[i].result, "score") : NAN;
    switch (t[i].status) {
      case STORE_TRIAL_DONE: rows[i].rank_class = isfinite(rows[i].score) ? 0 : 1; break;
      case STORE_TRIAL_RUNNING: rows[i].rank_class = 2; break;
      case STORE_TRIAL_PENDING: rows[i].rank_class = 3; break;
      default: rows[i].rank_class = 4; break;
    }
    count[rows[i].rank_class]++;
  }
  qsort(rows, n, sizeof *rows, row_cmp);
  printf("sweep %s: %zu trials: %d done, %d running, %d pending, %d failed; score = %s\n", sweep, n,
         count[0] + count[1], count[2], count[3], count[4], metric[0] ? metric : "?");
  printf("%4s  %-6s %-8s %10s %10s %8s %4s  %-22s %s\n", "rank", "trial", "status", "score",
         "env steps", "wall s", "try", "worker", "params");
  for (size_t i = 0; i < n; i++) {
    const store_trial *x = rows[i].t;
    char score[32] = "-", steps[32] = "-", wall[32] = "-", params[512], rank[24] = "";
    if (isfinite(rows[i].score)) snprintf(score, sizeof score, "%.2f", rows[i].score);
    if (x->result) {
      double es = json_num(x->result, "env_steps"), ws = json_num(x->result, "wall_s");
      if (isfinite(es)) snprintf(steps, sizeof steps, "%.0f", es);
      if (isfinite(ws)) snprintf(wall, sizeof wall, "%.1f", ws);
    }
    if (rows[i].rank_class == 0) snprintf(rank, sizeof rank, "%zu", i + 1);
    header(x->params, "# params: ", params, sizeof params);
    printf("%4s  %-6s %-8s %10s %10s %8s %4lld  %-22s %s\n", rank, x->id,
           store_trial_status_name(x->status), score, steps, wall, (long long)x->attempt,
           x->worker[0] ? x->worker : "-", params);
    if (x->status == STORE_TRIAL_FAILED && x->result) {
      char why[256] = "";
      json_str(x->result, "error", why, sizeof why);
      if (why[0]) printf("        %s\n", why);
    }
  }
  int m0, r0;
  if (pbt_trial(t[0].params, &m0, &r0)) pbt_report(t, n);
  free(rows);
  store_trials_free(t, n);
  store_close(st);
  return 0;
}

/* ---- the worker ---------------------------------------------------------------- */

/* Ctrl-C or SIGTERM: the first stops taking trials and tells the trial's `shoal run`
 * (its supervisor only: it stops the actors and then the learner in order, and the
 * learner writes its final snapshot) to stop; the trial's result is then recorded if it
 * finished, else it goes back to the queue. A second signal tells the run again (its
 * supervisor then kills its children at once); a third kills the run's whole group. */
static volatile sig_atomic_t worker_stop; /* signals received */
static volatile pid_t worker_child;
static void on_worker_signal(int sig) {
  (void)sig;
  int n = worker_stop < 3 ? ++worker_stop : 3;
  static const char first[] =
      "shoal worker: stopping: the trial's run stops in order; a finished trial is recorded, "
      "an unfinished one goes back to the queue (again to kill the run)\n";
  if (n == 1 && write(2, first, sizeof first - 1) < 0) {
    /* nothing to do: stderr is gone */
  }
  pid_t child = worker_child;
  if (child > 0) kill(n >= 3 ? -child : child, n >= 3 ? SIGKILL : SIGTERM);
}

/* run_trial's answer when the worker was stopped before the trial finished. */
enum { TRIAL_HANDED_BACK = -2 };

typedef struct beat {
  store *st;
  const char *sweep, *trial, *worker;
  double every_s;
  pid_t child;
  atomic_bool done, lost;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} beat;

/* Heartbeats while the trial runs. When the claim is gone (requeued as stale, taken by
 * another worker), stops the run: someone else has the trial now. */
static void *heartbeat_thread(void *arg) {
  shoal_thread_name("shoal-heartbeat");
  beat *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!atomic_load(&b->done)) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double t = (double)until.tv_sec + until.tv_nsec * 1e-9 + b->every_s;
    until.tv_sec = (time_t)t;
    until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
    pthread_cond_timedwait(&b->cv, &b->mu, &until);
    if (atomic_load(&b->done)) break;
    shoal_error err = {0};
    int rc = store_trial_heartbeat(b->st, b->sweep, b->trial, b->worker, &err);
    if (rc == SHOAL_EPERM || rc == SHOAL_ENOENT) {
      fprintf(stderr, "shoal worker %s: lost trial %s (%s); stopping its run\n", b->worker,
              b->trial, err.msg);
      atomic_store(&b->lost, true);
      kill(-b->child, SIGTERM);
      break;
    } else if (rc) {
      fprintf(stderr, "shoal worker %s: heartbeat: %s\n", b->worker, err.msg);
    }
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

/* ---- a store that is away ------------------------------------------------------------
 * A MongoDB server restarting, a network cut or a full disk fails store calls for a while.
 * A worker waits such a failure out (--store-wait, 600 s by default) rather than stop
 * claiming, leave a finished trial unrecorded, or leave a population member without its
 * next round: the runs it starts train through an outage on their own. */

static double g_store_wait = 600;

static bool store_transient(int rc) {
  return rc == SHOAL_ENET || rc == SHOAL_ETIMEDOUT || rc == SHOAL_EIO || rc == SHOAL_ECLOSED;
}

/* After a store call failed with rc: sleeps and returns true when the call should be
 * tried again. *since: when this run of failures began (0 before the first). */
static bool store_retry(int rc, const shoal_error *err, const char *worker, const char *what,
                        double *since) {
  if (!store_transient(rc) || worker_stop) return false;
  double now = shoal_now_s();
  if (*since == 0) {
    *since = now;
    fprintf(stderr, "shoal worker %s: %s: %s; trying again for up to %.0f s\n", worker, what,
            err->msg, g_store_wait);
  }
  if (now - *since >= g_store_wait) {
    fprintf(stderr, "shoal worker %s: %s: the store was still failing after %.0f s: %s\n", worker,
            what, now - *since, err->msg);
    return false;
  }
  double d = (now - *since) / 4; /* 1 s at first, up to 15 s between tries */
  d = d < 1 ? 1 : d > 15 ? 15 : d;
  usleep((useconds_t)(d * 1e6)); /* a signal cuts it short; worker_stop is checked next */
  return !worker_stop;
}

/* A finished trial's result (JSON) into result: its score by metric (eval, return100, or
 * best_eval otherwise), the figures beside it, NaN written as null. Returns the score;
 * its text in s1 (32 bytes) for the log line. */
static double trial_result(char *result, size_t cap, const char *run, const char *metric,
                           const char *reason, double eval, double best, double r100,
                           double env_steps, double updates, double version, double wall,
                           char *s1) {
  double score = !strcmp(metric, "eval") ? eval : !strcmp(metric, "return100") ? r100 : best;
  char s2[32] = "null", s3[32] = "null", s4[32] = "null";
  snprintf(s1, 32, "null");
  if (isfinite(score)) snprintf(s1, 32, "%.6g", score);
  if (isfinite(eval)) snprintf(s2, sizeof s2, "%.6g", eval);
  if (isfinite(best)) snprintf(s3, sizeof s3, "%.6g", best);
  if (isfinite(r100)) snprintf(s4, sizeof s4, "%.6g", r100);
  snprintf(result, cap,
           "{\"run\":\"%s\",\"score\":%s,\"metric\":\"%s\",\"reason\":\"%s\",\"eval\":%s,"
           "\"best_eval\":%s,\"return100\":%s,\"env_steps\":%.0f,\"updates\":%.0f,"
           "\"version\":%.0f,\"wall_s\":%.2f}",
           run, s1, metric, reason, s2, s3, s4, env_steps, updates, version, wall);
  return score;
}

/* ---- populations (pbt): a member's round, its copy, and the round after ---------- */

/* Exploit: the leader's snapshot (parameters, optimizer state, observation statistics:
 * all the learner resumes from) becomes the member's newest snapshot, under the member's
 * own next version and counters, so the member's run resumes from it and keeps its own
 * replay log, env-step count and schedules. A snapshot is whole or absent in the store,
 * so a leader that is writing its next one is never read torn. */
static int pbt_copy(store *st, const char *run, const char *text, char *why, size_t cap) {
  char h[512], from[STORE_NAME_MAX];
  long long version;
  int leader;
  header(text, "# pbt-copy: ", h, sizeof h);
  if (sscanf(h, "member=%d run=%63s version=%lld", &leader, from, &version) != 3)
    return snprintf(why, cap, "damaged '# pbt-copy:' line '%.200s'", h), -1;
  shoal_error err = {0};
  const double t0 = shoal_now_s();
  store_snapshot_meta lm, *own = NULL;
  void *bytes = NULL;
  size_t len = 0, n = 0;
  int rc = store_snapshot_get(st, from, version, &lm, &bytes, &len, &err);
  if (rc == SHOAL_ENOENT) /* not kept: the leader's newest stands in */
    rc = store_snapshot_get(st, from, STORE_LATEST, &lm, &bytes, &len, &err);
  if (rc)
    return snprintf(why, cap, "reading %s's snapshot v%lld: %.200s", from, version, err.msg), -1;
  if ((rc = store_snapshot_list(st, run, &own, &n, &err)) || n == 0) {
    free(bytes);
    return snprintf(why, cap, "%s has no snapshot to continue from: %.200s", run,
                    rc ? err.msg : "none"),
           -1;
  }
  store_snapshot_meta m = own[n - 1];
  free(own);
  m.version++;
  m.wall_time = 0;
  m.score = NAN;
  rc = store_snapshot_put(st, &m, bytes, len, &err);
  free(bytes);
  if (rc) return snprintf(why, cap, "writing the copy into %s: %.200s", run, err.msg), -1;
  printf("pbt: %s v%lld copied to %s as v%lld: %zu bytes in %.3f s\n", from, (long long)lm.version,
         run, (long long)m.version, len, shoal_now_s() - t0);
  return 0;
}

/* The config text of a member's next round: text's config with the assignments
 * (key=value, space-separated) applied, under new headers. */
static int pbt_round_text(const char *text, const char *assigns, const char *extra, char **out,
                          shoal_error *err) {
  char algo[16] = "", score[64];
  algo_yaml_known(text, NULL, 0, algo, sizeof algo);
  int nkeys;
  bool onpolicy = !strcmp(algo, "impala") || !strcmp(algo, "ppo");
  const cfg_key *keys = onpolicy ? onpolicy_schema(&nkeys) : apex_schema(&nkeys);
  config *cfg = config_create(keys, nkeys, err);
  if (!cfg) return err->code;
  int rc = config_load_string(cfg, text, "trial", err);
  char buf[2048];
  snprintf(buf, sizeof buf, "%s", assigns);
  for (char *tok = strtok(buf, " "); !rc && tok; tok = strtok(NULL, " "))
    rc = config_set(cfg, tok, err);
  if (!rc) rc = config_check(cfg, err);
  char *yaml = NULL;
  if (!rc) rc = config_dump_redacted(cfg, &yaml, err);
  header(text, "# score: ", score, sizeof score);
  if (!rc && asprintf(out, "# shoal-trial 1\n# params: %s\n# score: %s\n%s%s", assigns, score,
                      extra, yaml) < 0)
    rc = shoal_error_set(err, SHOAL_ENOMEM, "out of memory");
  free(yaml);
  config_destroy(cfg);
  return rc;
}

/* After member's round: ranks the population by each member's latest finished round
 * (this one's score for member), and queues the member's next round: as it is, or, in
 * the bottom fraction, as a copy of a top member (exploit) with that member's values
 * explored. Queued before this round is recorded, so a worker that dies between the two
 * leaves the round to be run again (its run is already at its step limit and ends at
 * once) rather than a member with no next round. */
static void pbt_next(store *st, const char *sweep, const store_trial *t, const pbt_spec *ps,
                     int member, int round, double score, const char *worker) {
  if (round + 1 >= ps->rounds) return;
  shoal_error err = {0};
  store_trial *all = NULL;
  size_t n = 0;
  double since = 0;
  int lrc;
  /* With the store away, the member's ranking waits, not its training: once the wait is
   * over, the next round is queued as it is (no exploit). */
  while ((lrc = store_trial_list(st, sweep, &all, &n, &err)) &&
         store_retry(lrc, &err, worker, "pbt: reading the population", &since)) {
  }
  if (lrc) {
    all = NULL, n = 0;
    fprintf(stderr, "shoal worker %s: pbt: member %d goes on without an exploit this round\n",
            worker, member);
  }
  double scores[PBT_MAX_MEMBERS];
  int latest_round[PBT_MAX_MEMBERS];
  const store_trial *latest[PBT_MAX_MEMBERS] = {0};
  for (int m = 0; m < PBT_MAX_MEMBERS; m++) scores[m] = NAN, latest_round[m] = -1;
  for (size_t i = 0; i < n; i++) {
    int m, r;
    if (!pbt_trial(all[i].params, &m, &r) || m < 0 || m >= ps->population ||
        all[i].status != STORE_TRIAL_DONE || !all[i].result || r <= latest_round[m])
      continue;
    latest_round[m] = r, latest[m] = &all[i];
    scores[m] = json_num(all[i].result, "score");
  }
  scores[member] = score;
  char metric[64];
  header(t->params, "# score: ", metric, sizeof metric);
  shoal_rng rng;
  shoal_rng_seed(&rng, ps->seed * 1000003ull + (uint64_t)member * 7919ull + (uint64_t)round);
  int leader = pbt_choose_leader(scores, ps->population, member, ps->truncation,
                                 strstr(metric, " min") != NULL, &rng);
  if (leader >= 0 && !latest[leader]) leader = -1;
  char assigns[2048], extra[8192], explored[2048] = "";
  int w = snprintf(extra, sizeof extra, "# pbt: member=%d round=%d\n", member, round + 1);
  if (leader < 0) {
    header(t->params, "# params: ", assigns, sizeof assigns);
  } else {
    char from[STORE_NAME_MAX], lp[2048];
    member_run(sweep, leader, from, sizeof from);
    header(latest[leader]->params, "# params: ", lp, sizeof lp);
    assigns[0] = 0;
    for (char *tok = strtok(lp, " "); tok; tok = strtok(NULL, " ")) {
      char *eq = strchr(tok, '=');
      if (!eq) continue;
      *eq = 0;
      const char *old = eq + 1;
      char val[64], how[16] = "";
      snprintf(val, sizeof val, "%s", old);
      for (int k = 0; k < ps->nparams; k++)
        if (!strcmp(ps->params[k].key, tok)) {
          pbt_explore(&ps->params[k], old, ps->resample, &rng, val, sizeof val, how, sizeof how);
          snprintf(explored + strlen(explored), sizeof explored - strlen(explored),
                   "%s%s %s->%s (%s)", explored[0] ? "; " : "", tok, old, val, how);
        }
      snprintf(assigns + strlen(assigns), sizeof assigns - strlen(assigns), "%s%s=%s",
               assigns[0] ? " " : "", tok, val);
    }
    w += snprintf(extra + w, sizeof extra - (size_t)w,
                  "# pbt-copy: member=%d run=%s version=%.0f score=%.6g round=%d own=%.6g\n"
                  "# pbt-explore: %s\n",
                  leader, from, json_num(latest[leader]->result, "version"), scores[leader],
                  latest_round[leader], score, explored);
  }
  char *text = NULL;
  if (pbt_spec_format(ps, extra + w, sizeof extra - (size_t)w) < 0 ||
      pbt_round_text(t->params, assigns, extra, &text, &err)) {
    fprintf(stderr, "shoal worker %s: pbt: member %d round %d: %s\n", worker, member, round + 1,
            err.msg[0] ? err.msg : "the settings are too long");
    store_trials_free(all, n);
    return;
  }
  char id[32];
  snprintf(id, sizeof id, "m%02d-r%03d", member, round + 1);
  int rc;
  since = 0;
  while ((rc = store_trial_create(st, sweep, id, text, &err)) && rc != SHOAL_EEXIST &&
         store_retry(rc, &err, worker, "pbt: queueing the next round", &since)) {
  }
  if (rc && rc != SHOAL_EEXIST)
    fprintf(stderr, "shoal worker %s: pbt: queueing %s: %s\n", worker, id, err.msg);
  else if (!rc && leader >= 0)
    printf(
        "shoal worker %s: pbt: member %d (score %.4g) copies member %d (%.4g) for round %d: "
        "%s\n",
        worker, member, score, leader, scores[leader], round + 1, explored);
  fflush(stdout);
  free(text);
  store_trials_free(all, n);
}

/* A member's round whose training is already in its run: the worker that ran it died
 * after the run had reached the round's step limit and before recording the round, so
 * `shoal run --resume` would refuse (nothing left to train). The round is recorded from
 * the run's newest snapshot and stored metrics (return100, eval_return), and the next
 * round is queued as after any round. Returns the status to record. */
static int pbt_round_from_store(store *st, const char *sweep, const store_trial *t,
                                const pbt_spec *ps, int member, int round, const char *run,
                                const char *metric, const store_snapshot_meta *last,
                                const char *worker, char *result, size_t cap) {
  shoal_error err = {0};
  store_metric *rows = NULL;
  size_t n = 0;
  double eval = NAN, best = NAN, ret = NAN;
  int64_t at = -1, eat = -1;
  if (store_metrics_query(st, run, NULL, 0, last->env_steps, &rows, &n, &err) == 0) {
    for (size_t i = 0; i < n; i++) {
      if (!strcmp(rows[i].name, "return100") && rows[i].step >= at)
        at = rows[i].step, ret = rows[i].value;
      if (!strcmp(rows[i].name, "eval_return") && isfinite(rows[i].value)) {
        if (rows[i].step >= eat) eat = rows[i].step, eval = rows[i].value;
        best = isnan(best) || rows[i].value > best ? rows[i].value : best;
      }
    }
    free(rows);
  }
  char s1[32];
  double score = trial_result(result, cap, run, metric, "trained before", eval, best, ret,
                              (double)last->env_steps, (double)last->updates,
                              (double)last->version, 0, s1);
  printf("shoal worker %s: trial %s: run %s already has its %lld env steps (its worker stopped "
         "before recording the round): score %s (%s) from the store\n",
         worker, t->id, run, (long long)last->env_steps, s1, metric);
  fflush(stdout);
  pbt_next(st, sweep, t, ps, member, round, score, worker);
  return STORE_TRIAL_DONE;
}

/* Runs one claimed trial as `shoal run`, heartbeating; fills result (JSON). Returns the
 * trial status to record, -1 when the claim was lost (record nothing), or
 * TRIAL_HANDED_BACK when the worker was stopped before the run finished. */
static int run_trial(store *st, const char *sweep, const store_trial *t, const char *worker,
                     const char *uri, double hb_s, char *result, size_t cap) {
  char run[STORE_NAME_MAX], metric[64] = "best_eval max";
  snprintf(run, sizeof run, "%.40s-%.12s-%lld", sweep, t->id, (long long)t->attempt);
  header(t->params, "# score: ", metric, sizeof metric);
  metric[strcspn(metric, " ")] = 0;
  /* A population member's round continues the member's one run (resumed from its newest
   * snapshot: its own, or the copy an exploit made) up to the round's step limit. */
  int member = -1, round = -1;
  pbt_spec ps;
  bool pbt = pbt_trial(t->params, &member, &round), resume = false;
  char cwhy[512] = "", steps_set[64] = "", assigns[2048] = "";
  if (pbt) {
    shoal_error perr = {0};
    if (pbt_spec_parse(t->params, &ps, &perr)) {
      snprintf(result, cap, "{\"error\":\"%s\"}", perr.msg);
      return STORE_TRIAL_FAILED;
    }
    member_run(sweep, member, run, sizeof run);
    /* Trained before (not copied again over what it trained): see pbt_round_from_store.
     * Counted as `shoal run --resume` counts it (metrics and snapshots): a run killed
     * after its metrics passed the limit but before its final snapshot would otherwise
     * be resumed, and refused with nothing left to train. */
    store_snapshot_meta *metas = NULL;
    size_t nm = 0;
    double secs_done = 0, steps_done = 0;
    cli_run_so_far(st, run, &secs_done, &steps_done);
    if (steps_done >= (double)(round + 1) * (double)ps.ready) {
      store_snapshot_meta last = {0};
      if (store_snapshot_list(st, run, &metas, &nm, &perr) == 0 && nm > 0) last = metas[nm - 1];
      free(metas);
      if ((double)last.env_steps < steps_done) last.env_steps = (int64_t)steps_done;
      return pbt_round_from_store(st, sweep, t, &ps, member, round, run, metric, &last, worker,
                                  result, cap);
    }
    if (strstr(t->params, "# pbt-copy: ") && pbt_copy(st, run, t->params, cwhy, sizeof cwhy)) {
      snprintf(result, cap, "{\"run\":\"%s\",\"error\":\"exploit: %s\"}", run, cwhy);
      return STORE_TRIAL_FAILED;
    }
    /* the member's run exists once its first round began: resumed from its newest
     * snapshot, or started afresh under its name when it has none yet */
    store_run sr;
    resume = store_run_find(st, run, &sr, &perr) == 0;
    if (resume) store_run_clear(&sr);
    snprintf(steps_set, sizeof steps_set, "run.max_env_steps=%lld",
             (long long)(round + 1) * (long long)ps.ready);
    header(t->params, "# params: ", assigns, sizeof assigns);
  }
  const char *tmp = getenv("TMPDIR");
  char cfg_path[PATH_MAX];
  snprintf(cfg_path, sizeof cfg_path, "%s/shoal-trial-%s-XXXXXX.yaml", tmp && tmp[0] ? tmp : "/tmp",
           run);
  int fd = mkstemps(cfg_path, 5);
  size_t len = t->params ? strlen(t->params) : 0;
  if (fd < 0 || write(fd, t->params, len) != (ssize_t)len || close(fd)) {
    snprintf(result, cap, "{\"error\":\"cannot write %s: %s\"}", cfg_path, strerror(errno));
    return STORE_TRIAL_FAILED;
  }
  char self[PATH_MAX + 16], set_run[128], set_uri[2100];
  snprintf(self, sizeof self, "%s/shoal", shoal_bindir);
  snprintf(set_run, sizeof set_run, "run.name=%s", run);
  snprintf(set_uri, sizeof set_uri, "store.uri=%s", uri);
  char *argv[64] = {self, "run", cfg_path, "--set", set_run, "--set", set_uri};
  int na = 7;
  if (resume) { /* the member's run, its stored config, this round's values */
    na = 2;
    argv[na++] = "--resume", argv[na++] = run, argv[na++] = "--store", argv[na++] = (char *)uri;
    for (char *tok = strtok(assigns, " "); tok && na < 56; tok = strtok(NULL, " "))
      argv[na++] = "--set", argv[na++] = tok;
  }
  if (pbt) argv[na++] = "--set", argv[na++] = steps_set;
  argv[na++] = "--quiet", argv[na++] = "--log-json", argv[na] = NULL;
  int pipefd[2];
  if (pipe(pipefd)) {
    unlink(cfg_path);
    snprintf(result, cap, "{\"error\":\"pipe: %s\"}", strerror(errno));
    return STORE_TRIAL_FAILED;
  }
  pid_t parent = getpid();
  double t0 = shoal_now_s();
  if (worker_stop) { /* stopped between the claim and here: no run to start */
    close(pipefd[0]), close(pipefd[1]);
    unlink(cfg_path);
    return TRIAL_HANDED_BACK;
  }
  pid_t pid = fork();
  if (pid == 0) {
    /* The run dies with its worker, so a requeued trial never races an orphan: SIGTERM
     * stops it in order (its learner records the stop). Its stdout (this pipe) breaks
     * at the same moment, so SIGPIPE must not kill it first. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    signal(SIGPIPE, SIG_IGN);
    if (getppid() != parent) _exit(1);
    setpgid(0, 0);
    dup2(pipefd[1], 1);
    close(pipefd[0]), close(pipefd[1]);
    execv(self, argv);
    _exit(127);
  }
  close(pipefd[1]);
  if (pid < 0) {
    close(pipefd[0]);
    unlink(cfg_path);
    snprintf(result, cap, "{\"error\":\"fork: %s\"}", strerror(errno));
    return STORE_TRIAL_FAILED;
  }
  setpgid(pid, pid);
  worker_child = pid;
  if (worker_stop) kill(pid, SIGTERM); /* a signal before worker_child was set */
  printf("shoal worker %s: trial %s (attempt %lld) as run %s\n", worker, t->id,
         (long long)t->attempt, run);
  fflush(stdout);
  beat b = {
      .st = st, .sweep = sweep, .trial = t->id, .worker = worker, .every_s = hb_s, .child = pid};
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.cv, NULL);
  pthread_t thr;
  bool thr_ok = pthread_create(&thr, NULL, heartbeat_thread, &b) == 0;

  /* The run's JSON lines: keep the last progress and the done line. */
  char done_line[4096] = "", progress[4096] = "", line[4096];
  size_t ll = 0;
  char buf[4096];
  for (;;) {
    ssize_t k = read(pipefd[0], buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    for (ssize_t i = 0; i < k; i++) {
      if (buf[i] != '\n') {
        if (ll + 1 < sizeof line) line[ll++] = buf[i];
        continue;
      }
      line[ll] = 0;
      ll = 0;
      char ev[32] = "";
      json_str(line, "event", ev, sizeof ev);
      if (!strcmp(ev, "progress")) snprintf(progress, sizeof progress, "%s", line);
      if (!strcmp(ev, "done")) snprintf(done_line, sizeof done_line, "%s", line);
    }
  }
  close(pipefd[0]);
  int wst = 0;
  while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
  }
  worker_child = 0;
  double wall = shoal_now_s() - t0;
  pthread_mutex_lock(&b.mu);
  atomic_store(&b.done, true);
  pthread_cond_broadcast(&b.cv);
  pthread_mutex_unlock(&b.mu);
  if (thr_ok) pthread_join(thr, NULL);
  unlink(cfg_path);
  if (atomic_load(&b.lost)) return -1;

  bool ok = WIFEXITED(wst) && WEXITSTATUS(wst) == 0 && done_line[0];
  char reason[32] = "";
  json_str(done_line, "reason", reason, sizeof reason);
  /* Stopped by this worker: a run that reached its own end first (solved, a budget)
   * counts; one cut short, or killed on a second Ctrl-C, is not the trial's result. */
  if (worker_stop && (!ok || !strcmp(reason, "signal"))) {
    printf("shoal worker %s: trial %s's run %s was stopped after %.1f s, before it finished\n",
           worker, t->id, run, wall);
    fflush(stdout);
    return TRIAL_HANDED_BACK;
  }
  if (!ok) {
    char why[128];
    if (WIFSIGNALED(wst))
      snprintf(why, sizeof why, "shoal run killed by signal %d", WTERMSIG(wst));
    else
      snprintf(why, sizeof why, "shoal run exited with status %d%s", WEXITSTATUS(wst),
               done_line[0] ? "" : " before the learner finished");
    snprintf(result, cap, "{\"run\":\"%s\",\"error\":\"%s\",\"wall_s\":%.2f}", run, why, wall);
    return STORE_TRIAL_FAILED;
  }
  char s1[32];
  double score = trial_result(result, cap, run, metric, reason, json_num(done_line, "eval"),
                              json_num(done_line, "best_eval"), json_num(progress, "return100"),
                              json_num(done_line, "env_steps"), json_num(done_line, "updates"),
                              json_num(done_line, "version"), wall, s1);
  if (pbt) pbt_next(st, sweep, t, &ps, member, round, score, worker);
  printf("shoal worker %s: trial %s %s: score %s (%s), %.0f env steps, %.1f s\n", worker, t->id,
         reason, s1, metric, json_num(done_line, "env_steps"), wall);
  fflush(stdout);
  return STORE_TRIAL_DONE;
}

int cmd_worker(int argc, char **argv) {
  const char *sweep = NULL, *uri = NULL, *name = NULL;
  double hb = 5, stale = 30;
  long max_trials = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--sweep") && i + 1 < argc)
      sweep = argv[++i];
    else if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--name") && i + 1 < argc)
      name = argv[++i];
    else if (!strcmp(argv[i], "--heartbeat") && i + 1 < argc)
      hb = atof(argv[++i]);
    else if (!strcmp(argv[i], "--stale") && i + 1 < argc)
      stale = atof(argv[++i]);
    else if (!strcmp(argv[i], "--max-trials") && i + 1 < argc)
      max_trials = atol(argv[++i]);
    else if (!strcmp(argv[i], "--store-wait") && i + 1 < argc)
      g_store_wait = atof(argv[++i]);
    else {
      cli_bad_arg("worker", argc, argv, i);
      return 2;
    }
  }
  if (!sweep || !(hb >= 0.05 && hb <= 3600) || !(stale > hb) || max_trials < 0 ||
      !(g_store_wait >= 0 && g_store_wait <= 1e6)) {
    cli_bad_usage("worker");
    return 2;
  }
  char wname[STORE_NAME_MAX];
  if (name) {
    snprintf(wname, sizeof wname, "%s", name);
  } else {
    char host[48] = "host";
    gethostname(host, sizeof host - 1);
    host[strcspn(host, ".")] = 0;
    snprintf(wname, sizeof wname, "%s:%d", host, (int)getpid());
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_worker_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  shoal_error err = {0};
  store *st;
  int orc;
  double open_since = 0;
  while ((orc = store_open(&st, uri, &err)) &&
         store_retry(orc, &err, wname, "opening the store", &open_since)) {
  }
  if (orc) {
    fprintf(stderr, "shoal worker: store: %s\n", cli_unprefix(err.msg, "store"));
    return 1;
  }
  char uri_buf[2048];
  snprintf(uri_buf, sizeof uri_buf, "%s", uri ? uri : store_uri(st));
  long ran = 0;
  int failed = 0, rc = 0;
  bool waiting_said = false;
  double claim_since = 0; /* when the claims began failing (0: they do not) */
  while (!worker_stop && (!max_trials || ran < max_trials)) {
    size_t nreq = 0;
    if (store_trial_requeue_stale(st, sweep, stale, &nreq, &err))
      fprintf(stderr, "shoal worker %s: requeue: %s\n", wname, err.msg);
    else if (nreq)
      printf("shoal worker %s: requeued %zu trial%s whose heartbeat lapsed\n", wname, nreq,
             nreq == 1 ? "" : "s");
    store_trial t = {0};
    int crc = store_trial_claim(st, sweep, wname, &t, &err);
    if (crc && crc != SHOAL_ENOENT && store_retry(crc, &err, wname, "claim", &claim_since))
      continue;
    if (crc != SHOAL_ENOENT) claim_since = 0;
    if (crc == SHOAL_ENOENT) {
      /* Nothing pending. Trials still running elsewhere may come back if their worker
       * died: wait for them; when none is left, the sweep is complete. */
      store_trial *all = NULL;
      size_t n = 0, running = 0;
      int lrc = store_trial_list(st, sweep, &all, &n, &err);
      if (lrc && store_retry(lrc, &err, wname, "listing the trials", &claim_since)) continue;
      if (lrc) {
        fprintf(stderr, "shoal worker %s: %s\n", wname, err.msg);
        rc = 1;
        break;
      }
      claim_since = 0;
      for (size_t i = 0; i < n; i++) running += all[i].status == STORE_TRIAL_RUNNING;
      store_trials_free(all, n);
      if (n == 0) {
        fprintf(stderr, "shoal worker %s: no sweep %s in %s\n", wname, sweep, uri_buf);
        rc = 1;
        break;
      }
      if (running == 0) break;
      if (!waiting_said)
        printf("shoal worker %s: no pending trials; %zu running elsewhere, watching them\n", wname,
               running);
      waiting_said = true;
      fflush(stdout);
      usleep((useconds_t)(hb * 1e6));
      continue;
    } else if (crc) {
      fprintf(stderr, "shoal worker %s: claim: %s\n", wname, err.msg);
      rc = 1;
      break;
    }
    waiting_said = false;
    char result[8192];
    int status = run_trial(st, sweep, &t, wname, uri_buf, hb, result, sizeof result);
    if (status == TRIAL_HANDED_BACK) {
      int c = store_trial_release(st, sweep, t.id, wname, &err);
      if (c == 0)
        printf(
            "shoal worker %s: stopped; trial %s is back in the queue (pending) for the next "
            "worker\n",
            wname, t.id);
      else if (c == SHOAL_EPERM || c == SHOAL_EEXIST)
        printf("shoal worker %s: stopped; trial %s was taken over meanwhile: %s\n", wname, t.id,
               err.msg);
      else
        fprintf(stderr,
                "shoal worker %s: stopped; handing trial %s back: %s; it goes back to the queue "
                "once its heartbeat lapses (%.0f s)\n",
                wname, t.id, err.msg, stale);
    } else if (status >= 0) {
      /* Recorded even when stopping: a trial that finished keeps its score. */
      int c;
      double since = 0;
      while ((c = store_trial_complete(st, sweep, t.id, wname, status, result, &err)) &&
             store_retry(c, &err, wname, "recording the trial", &since)) {
      }
      if (c == SHOAL_EPERM || c == SHOAL_EEXIST)
        printf("shoal worker %s: trial %s was taken over meanwhile: %s\n", wname, t.id, err.msg);
      else if (c)
        fprintf(stderr, "shoal worker %s: recording trial %s: %s\n", wname, t.id, err.msg);
      if (status == STORE_TRIAL_FAILED) {
        failed++;
        printf("shoal worker %s: trial %s failed: %s\n", wname, t.id, result);
      }
      if (worker_stop && !c)
        printf("shoal worker %s: stopped after trial %s finished (recorded)\n", wname, t.id);
    }
    if (status != TRIAL_HANDED_BACK) ran++;
    store_trial_clear(&t);
  }
  printf("shoal worker %s: %ld trial%s run, %d failed\n", wname, ran, ran == 1 ? "" : "s", failed);
  store_close(st);
  return rc;
}
