/* SPDX-License-Identifier: Apache-2.0 */
/* Every command's usage in one table, and `shoal config keys` (see cli/commands.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "run/run.h"

typedef struct usage_entry {
  const char *cmd;
  const char *synopsis, *what; /* the overview's line */
  const char *text;            /* the whole usage */
} usage_entry;

static const usage_entry usages[] = {
    {"run", "run CONFIG [--set key=value ...]", "train (Ape-X, IMPALA, PPO)",
     "usage: shoal run CONFIG [--set key=value ...] [--quiet] [--log-json] [--no-tensorboard]\n"
     "       shoal run --resume RUN [--store URI] [--set key=value ...]\n"
     "  Starts one learner and the config's actors, restarts what crashes, stops all on\n"
     "  Ctrl-C (the actors, then the learner). The keys a config takes: shoal config keys\n"
     "  [apex|impala|ppo].\n"
     "  --resume continues a run from its latest snapshot. Its limits (run.max_env_steps,\n"
     "  run.max_seconds) count the run's whole training, across resumes: a run at its limit\n"
     "  is refused; raise the limit with --set to train longer. The summary's best is the\n"
     "  run's best (`shoal eval --best`), stored snapshots included. A --set that the run's\n"
     "  snapshots cannot take (algo, env.id, the network's shape) is refused, writing\n"
     "  nothing; learning rates, replay and optimizer settings may change.\n"
     "  Exit status: 0 finished or stopped; 1 failed or refused (an error no restart cures\n"
     "  stops the run: its message says why); 2 bad arguments; 130 (143) when a second\n"
     "  Ctrl-C (SIGTERM) killed the run before its stop finished.\n"},
    {"eval", "eval RUN [--best] [--render]", "play a snapshot",
     "usage: shoal eval RUN [--store URI] [--episodes K] [--best] [--seed S]\n"
     "                  [--set env.KEY=VALUE ...] [--render [STRIP.png] [--record K (1..16; 1)] "
     "[--frames N (even, 2..64; 12)]]\n"
     "  --set plays the snapshot on other env settings than the run's (env.* keys but\n"
     "  env.id), e.g. --set env.options=sticky_action_prob=0,max_episode_steps=1000.\n"
     "  --render stores a PNG strip and an animated PNG of the first K episodes in the\n"
     "  run's media (`shoal media ls RUN`); STRIP.png also gets episode 1's strip.\n"},
    {"init", "init CONFIG --set run.name=RUN", "record a run (deploy/)",
     "usage: shoal init CONFIG --set run.name=RUN [--set key=value ...] [--out RESOLVED.yaml]\n"},
    {"config", "config keys [--markdown] [apex|impala|ppo]", "every config key",
     "usage: shoal config keys [--markdown] [apex|impala|ppo]\n"
     "  Lists every key of the algorithm's config (apex when none is named): type,\n"
     "  default, bounds and what it does.\n"
     "  --markdown writes Markdown tables instead: the named algorithm's, or with none\n"
     "  named the whole reference of all three (docs/config-reference.md).\n"},
    {"dataset", "dataset put|ls|info|rm ...", "datasets in the store",
     "usage: shoal dataset put NAME [FIELD=]FILE... [--chunk-records N] [--source TEXT] "
     "[--store URI]\n"
     "       shoal dataset ls [--store URI]\n"
     "       shoal dataset info NAME [--verify] [--store URI]\n"
     "       shoal dataset rm NAME [--store URI]\n"},
    {"media", "media ls RUN | media get RUN NAME", "a run's recordings",
     "usage: shoal media ls RUN [--store URI]\n"
     "       shoal media get RUN NAME [-o FILE|-] [--store URI]\n"},
    {"status", "status HOST:PORT [--json]", "a running learner",
     "usage: shoal status HOST:PORT [--token T] [--interval S] [--json]\n"
     "  One report: counters and rates over an S-second window (default 1; 0: counters\n"
     "  only). The token: --token, else $SHOAL_TOKEN.\n"},
    {"set", "set HOST:PORT key=value ...", "live tuning",
     "usage: shoal set HOST:PORT key=value ... [--token T] [--run RUN]\n"
     "  live keys: dqn.lr, learner.replay_ratio, dqn.target_period, replay.beta0,\n"
     "  replay.beta_steps, learner.publish_every, learner.snapshot_every_s,\n"
     "  run.eval_every_s, run.max_env_steps, run.max_seconds, run.solve_return\n"
     "  (IMPALA / PPO: impala.lr or ppo.lr, run.eval_every_steps and the learner and run\n"
     "  keys). The token: --token, else $SHOAL_TOKEN.\n"},
    {"plot", "plot RUN... [--metric NAME] [--mean]", "learning curves",
     "usage: shoal plot RUN... [--store URI] [--metric NAME] [--x steps|time]\n"
     "                 [--mean] [--out FILE.png] [--size WxH] [--title TEXT]\n"
     "                 [--sweep NAME] [--csv FILE]...\n"
     "  --sweep NAME adds the runs of a sweep's finished trials (a population's\n"
     "  members); RUN... may then be left out.\n"
     "  --csv FILE adds a curve from outside the store (another system's): a header row\n"
     "  naming the columns, the metric's and `step` or `time` (seconds) among them.\n"},
    {"sweep", "sweep SWEEP.yaml | sweep --report NAME", "hyperparameter search",
     "usage: shoal sweep SWEEP.yaml [--store URI] [--dry-run] [--workers N]\n"
     "       shoal sweep --report NAME [--store URI]\n"},
    {"pbt", "pbt PBT.yaml | pbt --report NAME", "population-based training",
     "usage: shoal pbt PBT.yaml [--store URI] [--dry-run] [--workers N]\n"
     "       shoal pbt --report NAME [--store URI]\n"
     "  A sweep whose file has a pbt: section (population, rounds, ready_steps,\n"
     "  truncation, resample): its members train in rounds as `shoal worker --sweep\n"
     "  NAME` runs them, and the bottom of the population copies the top's snapshot and\n"
     "  explores its values (docs/pbt.md). The same as `shoal sweep`.\n"},
    {"worker", "worker --sweep NAME", "run a sweep's trials",
     "usage: shoal worker --sweep NAME [--store URI] [--name W] [--heartbeat S]\n"
     "                    [--stale S] [--max-trials N] [--store-wait S]\n"
     "  (heartbeat every S s, default 5; trials whose heartbeat is older than\n"
     "  --stale, default 30, are requeued; --stale must exceed --heartbeat)\n"
     "  A store that fails (a server or network away, a disk unwritable) is tried\n"
     "  again for up to --store-wait seconds, default 600, before the worker gives up.\n"
     "  Ctrl-C: the trial's run stops in order; a trial that finished is recorded,\n"
     "  an unfinished one goes back to the queue at once. Again to kill the run.\n"},
    {"tboard", "tboard RUN... [--out DIR]", "TensorBoard event files",
     "usage: shoal tboard RUN... [--store URI] [--out DIR]\n"},
    {"import", "import FILE... --run RUN", "experience into segments",
     "usage: shoal import FILE... --run RUN [--env ID] [--store URI] [--source NAME]\n"
     "                    [--segment-rows N] [--quiet]\n"
     "  FILE: a JSON Lines file (.jsonl, one transition per line) or a folder of .npy\n"
     "  column files (obs, action, reward, terminated, truncated, next_obs, priority).\n"
     "  See docs/experience.md.\n"},
    {"envs", "envs", "list environments",
     "usage: shoal envs\n"
     "  The built-in envs, then every env Gymnasium has registered, as gym:ID (any of\n"
     "  them, and your own module's as gym:MODULE:ID, works as env.id). C plugins are\n"
     "  named plugin:PATH.so[:NAME].\n"},
};

static const usage_entry *find(const char *cmd) {
  for (size_t i = 0; i < sizeof usages / sizeof *usages; i++)
    if (!strcmp(usages[i].cmd, cmd)) return &usages[i];
  return NULL;
}

void cli_overview(FILE *f) {
  fprintf(f, "usage: shoal <command> ...   (shoal <command> --help for one)\n");
  for (size_t i = 0; i < sizeof usages / sizeof *usages; i++)
    fprintf(f, "  %-40s %s\n", usages[i].synopsis, usages[i].what);
}

bool cli_help(const char *cmd) {
  const usage_entry *u = find(cmd);
  if (!u) return false;
  fputs(u->text, stdout);
  return true;
}

int cli_bad_usage(const char *cmd) {
  const usage_entry *u = find(cmd);
  fputs(u ? u->text : "usage: shoal <command> ...\n", stderr);
  return 2;
}

bool cli_wants_help(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
  return false;
}

int cli_bad_arg(const char *cmd, int argc, char **argv, int i) {
  /* The options whose value is the next argument, with what the value is. */
  static const char *const takes[][2] = {{"--set", "KEY=VALUE"},
                                         {"--store", "URI"},
                                         {"--resume", "RUN"},
                                         {"--episodes", "K"},
                                         {"--seed", "S"},
                                         {"--record", "K"},
                                         {"--frames", "N"},
                                         {"--token", "TOKEN"},
                                         {"--interval", "SECONDS"},
                                         {"--run", "RUN"},
                                         {"--sweep", "NAME"},
                                         {"--out", "FILE"},
                                         {"--env", "ID"},
                                         {"--name", "NAME"},
                                         {"--metric", "NAME"},
                                         {"--report", "SWEEP"},
                                         {"--heartbeat", "SECONDS"},
                                         {"--stale", "SECONDS"},
                                         {"--max-trials", "N"},
                                         {"--store-wait", "SECONDS"},
                                         {"--workers", "N"},
                                         {"--source", "SOURCE"},
                                         {"--title", "TITLE"},
                                         {"--x", "AXIS"},
                                         {"--size", "WxH"},
                                         {"--chunk-records", "N"},
                                         {"--segment-rows", "N"},
                                         {"-o", "FILE"}};
  if (i == argc - 1)
    for (size_t k = 0; k < sizeof takes / sizeof *takes; k++)
      if (!strcmp(argv[i], takes[k][0])) {
        fprintf(stderr, "shoal %s: %s needs a value: %s %s\n", cmd, argv[i], argv[i], takes[k][1]);
        return 2;
      }
  fprintf(stderr, "shoal %s: unknown argument '%s' (shoal %s --help lists them)\n", cmd, argv[i],
          cmd);
  return 2;
}

bool cli_int_arg(const char *cmd, const char *opt, const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "shoal %s: %s '%s': needs a whole number from %ld to %ld\n", cmd, opt, s, lo,
            hi);
    return false;
  }
  *out = (int)v;
  return true;
}

const char *cli_unprefix(const char *msg, const char *prefix) {
  size_t n = strlen(prefix);
  return !strncmp(msg, prefix, n) && !strncmp(msg + n, ": ", 2) ? msg + n + 2 : msg;
}

static const char *type_name(cfg_type t) {
  switch (t) {
    case CFG_INT: return "int";
    case CFG_FLOAT: return "float";
    case CFG_BOOL: return "bool";
    default: return "string";
  }
}

/* The schema of algo's configs, NULL for an unknown algo. The on-policy schema holds
 * both IMPALA's and PPO's keys: *other is the prefix of the keys the other one uses. */
static const cfg_key *algo_keys(const char *algo, int *n, const char **other) {
  *other = NULL;
  if (!strcmp(algo, "apex")) return apex_schema(n);
  if (strcmp(algo, "impala") && strcmp(algo, "ppo")) return NULL;
  *other = !strcmp(algo, "impala") ? "ppo." : "impala.";
  return onpolicy_schema(n);
}

/* The default as a user writes it: algo's own name for `algo`, "" for an empty text. */
static const char *key_default(const cfg_key *k, const char *algo) {
  if (!strcmp(k->name, "algo")) return algo;
  return k->def ? (k->def[0] ? k->def : "\"\"") : "(required)";
}

/* A table cell. '|' would end the cell, so it is escaped everywhere; outside a code span
 * (code false) '<', '>' and '*' would be read as HTML or emphasis ("<config name>"), so
 * they are escaped too. Line breaks become spaces. */
static void md_cell(const char *s, bool code) {
  for (; *s; s++) {
    if (*s == '|')
      fputs("\\|", stdout);
    else if (!code && *s == '<')
      fputs("&lt;", stdout);
    else if (!code && *s == '>')
      fputs("&gt;", stdout);
    else if (!code && *s == '*')
      fputs("\\*", stdout);
    else
      putchar(*s == '\n' ? ' ' : *s);
  }
}

static void md_algo(const char *algo, const cfg_key *keys, int n, const char *other) {
  static const char *const title[][2] = {
      {"apex", "Ape-X (DQN)"}, {"impala", "IMPALA"}, {"ppo", "PPO (APPO)"}};
  const char *name = algo;
  for (size_t i = 0; i < sizeof title / sizeof *title; i++)
    if (!strcmp(algo, title[i][0])) name = title[i][1];
  printf("## %s: `algo: %s`\n\n", name, algo);
  printf(
      "The keys of `%s` configs (`configs/*-%s.yaml`); `shoal config keys %s` lists them too.\n\n",
      algo, algo, algo);
  printf("| Key | Type | Default | Bounds | Meaning |\n|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    const cfg_key *k = &keys[i];
    if (other && !strncmp(k->name, other, strlen(other))) continue;
    printf("| `%s` | %s | ", k->name, k->map ? "string or mapping" : type_name(k->type));
    const char *def = key_default(k, algo);
    if (k->def || !strcmp(k->name, "algo")) {
      printf("`");
      md_cell(def, true);
      printf("`");
    } else {
      md_cell(def, false);
    }
    printf(" | ");
    if ((k->type == CFG_INT || k->type == CFG_FLOAT) && k->min <= k->max)
      printf("[%g, %g]", k->min, k->max);
    printf(" | ");
    md_cell(k->help ? k->help : "", false);
    printf(" |\n");
  }
}

int cmd_config(int argc, char **argv) {
  bool markdown = false;
  const char *algo = NULL;
  if (argc < 1 || strcmp(argv[0], "keys")) return cli_bad_usage("config");
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--markdown"))
      markdown = true;
    else if (argv[i][0] == '-')
      return cli_bad_arg("config", argc, argv, i);
    else if (!algo)
      algo = argv[i];
    else
      return cli_bad_usage("config");
  }
  int n;
  const char *other;
  const cfg_key *keys = algo_keys(algo ? algo : "apex", &n, &other);
  if (!keys) {
    fprintf(stderr, "shoal config keys: algo '%s' is not one of apex, impala, ppo\n", algo);
    return 2;
  }
  if (markdown) {
    if (algo) {
      md_algo(algo, keys, n, other);
      return 0;
    }
    /* The whole reference: what docs/config-reference.md holds (test_config_reference
     * regenerates it and fails when the checked-in copy differs). */
    printf(
        "# Config reference\n\n"
        "<!-- Generated by `shoal config keys --markdown` from the schemas that `shoal run`\n"
        "     checks configs against; regenerate it rather than editing it. -->\n\n"
        "A config is a YAML file of nested mappings: the key `replay.capacity` is written\n"
        "`capacity:` under `replay:`. `shoal run CONFIG --set key=value` overrides one key.\n"
        "A key without a default is required. Numbers outside their bounds are refused,\n"
        "as are keys that the config's `algo` does not have.\n\n");
    static const char *const algos[] = {"apex", "impala", "ppo"};
    for (size_t a = 0; a < sizeof algos / sizeof *algos; a++) {
      if (a) printf("\n");
      keys = algo_keys(algos[a], &n, &other);
      md_algo(algos[a], keys, n, other);
    }
    return 0;
  }
  if (!algo) algo = "apex";
  printf("# the keys of %s configs (configs/*-%s.yaml): key, type, default, [bounds], meaning\n",
         algo, algo);
  for (int i = 0; i < n; i++) {
    const cfg_key *k = &keys[i];
    if (other && !strncmp(k->name, other, strlen(other))) continue;
    char bounds[64] = "";
    if (k->type == CFG_INT || k->type == CFG_FLOAT)
      snprintf(bounds, sizeof bounds, "[%g, %g]", k->min, k->max);
    printf("%-26s %-6s %-14s %-18s %s\n", k->name, type_name(k->type), key_default(k, algo), bounds,
           k->help ? k->help : "");
  }
  return 0;
}
