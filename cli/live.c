/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal status ADDR [--token T] [--interval S] [--json]
 * shoal set ADDR key=value ... [--token T] [--run RUN]
 *
 * status asks a running learner for its Status twice, --interval seconds apart (default
 * 1; 0: once), and prints its run, policy version, ingest and stream counters, the
 * learner's own counters (env steps, updates, replay, eval return, the hyperparameters
 * in effect) and rates over the interval. set calls SetHyperparams: the learner checks
 * every key against its whitelist and bounds, applies them all between two updates or
 * none, and records each as the metric hparam/<key>.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "rpc/rpc.h"

static int fail(const char *what, const shoal_error *err) {
  fprintf(stderr, "shoal %s: %s\n", what, err->msg[0] ? err->msg : shoal_strerror(err->code));
  return 1;
}

/* A learner's address needs its port: gRPC would take a bare host as host:443, and
 * the learner has no fixed port (learner.listen's default is an ephemeral one, which
 * `shoal run` prints as "learner on HOST:PORT"). Other gRPC targets (unix:, dns:///,
 * ipv4:, ipv6:) are taken as they are. */
static bool addr_has_port(const char *cmd, const char *addr) {
  if (strchr(addr, ':')) return true;
  fprintf(stderr,
          "shoal %s: '%s' names no port: give the learner's HOST:PORT (`shoal run` prints it "
          "as \"learner on HOST:PORT\"; there is no default port)\n",
          cmd, addr);
  return false;
}

static int connect_to(const char *addr, const char *run, const char *token, rpc_client **c,
                      shoal_error *err) {
  rpc_client_config cc = {0};
  cc.target = addr;
  /* Status needs no run; a placeholder id is fine since this client pushes nothing. */
  cc.run_id = run && run[0] ? run : "shoal-cli";
  cc.token = token && token[0] ? token : NULL;
  cc.call_timeout_s = 10;
  return rpc_client_create(&cc, c, err);
}

/* A learner busy training on a loaded machine can miss a connection attempt (gRPC then
 * fails the call at once with UNAVAILABLE): a person's command tries twice more. Both
 * calls are safe to repeat: Status reads, and SetHyperparams sets absolute values. */
enum { CLI_TRIES = 3 };

static int status_tries(rpc_client *c, rpc_status *out, shoal_error *err) {
  int rc = SHOAL_ENET;
  for (int t = 0; t < CLI_TRIES && rc == SHOAL_ENET; t++) {
    if (t) usleep(500000);
    rc = rpc_client_status(c, out, err);
  }
  return rc;
}

static int set_tries(rpc_client *c, const rpc_hyperparam *h, int n, uint32_t *applied,
                     shoal_error *err) {
  int rc = SHOAL_ENET;
  for (int t = 0; t < CLI_TRIES && rc == SHOAL_ENET; t++) {
    if (t) usleep(500000);
    rc = rpc_client_set_hyperparams(c, h, n, applied, err);
  }
  return rc;
}

static double counter(const rpc_status *s, const char *name) {
  for (int i = 0; i < s->ncounters; i++)
    if (!strcmp(s->counters[i].name, name)) return s->counters[i].value;
  return NAN;
}

static void fmt_num(char *buf, size_t cap, double v) {
  if (isnan(v))
    snprintf(buf, cap, "-");
  else if (v == floor(v) && fabs(v) < 1e15)
    snprintf(buf, cap, "%.0f", v);
  else
    snprintf(buf, cap, "%.6g", v);
}

static void print_json(const rpc_status *s, const rpc_status *s0, double dt) {
  printf(
      "{\"run\":\"%s\",\"version\":%lld,\"uptime_s\":%.3f,\"batches\":%llu,\"samples\":%llu,"
      "\"bytes\":%llu,\"rejected\":%llu,\"duplicates\":%llu,\"streams_active\":%llu,"
      "\"streams_total\":%llu,\"params_pulls\":%llu",
      s->run_id, (long long)s->policy_version, s->uptime_s, (unsigned long long)s->server.batches,
      (unsigned long long)s->server.samples, (unsigned long long)s->server.bytes,
      (unsigned long long)s->server.rejected, (unsigned long long)s->server.duplicates,
      (unsigned long long)s->server.streams_active, (unsigned long long)s->server.streams_total,
      (unsigned long long)s->server.params_pulls);
  for (int i = 0; i < s->ncounters; i++) {
    if (isfinite(s->counters[i].value))
      printf(",\"%s\":%.9g", s->counters[i].name, s->counters[i].value);
    else
      printf(",\"%s\":null", s->counters[i].name);
  }
  if (s0 && dt > 0) {
    printf(",\"env_steps_s\":%.3f,\"updates_s\":%.3f,\"samples_s\":%.3f",
           (counter(s, "env_steps") - counter(s0, "env_steps")) / dt,
           (counter(s, "updates") - counter(s0, "updates")) / dt,
           (double)(s->server.samples - s0->server.samples) / dt);
  }
  printf("}\n");
}

int cmd_status(int argc, char **argv) {
  const char *addr = NULL, *token = getenv("SHOAL_TOKEN");
  double interval = 1.0;
  bool json = false;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--token") && i + 1 < argc)
      token = argv[++i];
    else if (!strcmp(argv[i], "--interval") && i + 1 < argc)
      interval = atof(argv[++i]);
    else if (!strcmp(argv[i], "--json"))
      json = true;
    else if (argv[i][0] != '-' && !addr)
      addr = argv[i];
    else {
      cli_bad_arg("status", argc, argv, i);
      return 2;
    }
  }
  if (!addr || !(interval >= 0 && interval <= 3600)) {
    cli_bad_usage("status");
    return 2;
  }
  if (!addr_has_port("status", addr)) return 2;
  shoal_error err = {0};
  rpc_client *c;
  if (connect_to(addr, NULL, token, &c, &err)) return fail("status", &err);
  rpc_status s0, s;
  int rc = status_tries(c, &s0, &err);
  double dt = 0;
  if (!rc && interval > 0) {
    double t0 = shoal_now_s();
    usleep((useconds_t)(interval * 1e6));
    rc = status_tries(c, &s, &err);
    dt = shoal_now_s() - t0;
  } else {
    s = s0;
  }
  rpc_client_close(c, 0.5, NULL, NULL);
  if (rc) return fail("status", &err);
  if (json) {
    print_json(&s, interval > 0 ? &s0 : NULL, dt);
    return 0;
  }
  printf("learner %s: run %s, policy v%lld, up %.1f s\n", addr, s.run_id,
         (long long)s.policy_version, s.uptime_s);
  printf("  ingest   %llu batches, %llu samples, %.1f MB; rejected %llu, duplicates %llu\n",
         (unsigned long long)s.server.batches, (unsigned long long)s.server.samples,
         (double)s.server.bytes / 1e6, (unsigned long long)s.server.rejected,
         (unsigned long long)s.server.duplicates);
  printf("  streams  %llu active, %llu opened, %llu aborted; %llu parameter pulls\n",
         (unsigned long long)s.server.streams_active, (unsigned long long)s.server.streams_total,
         (unsigned long long)s.server.streams_aborted, (unsigned long long)s.server.params_pulls);
  if (dt > 0)
    printf("  rates    %.0f env steps/s, %.1f updates/s, %.0f samples/s ingested (over %.1f s)\n",
           (counter(&s, "env_steps") - counter(&s0, "env_steps")) / dt,
           (counter(&s, "updates") - counter(&s0, "updates")) / dt,
           (double)(s.server.samples - s0.server.samples) / dt, dt);
  char v[64];
  int shown = 0;
  for (int i = 0; i < s.ncounters; i++) {
    if (!strncmp(s.counters[i].name, "hparam/", 7)) continue;
    fmt_num(v, sizeof v, s.counters[i].value);
    printf("%s%s %s", shown++ ? ", " : "  learner  ", s.counters[i].name, v);
  }
  if (shown) printf("\n");
  shown = 0;
  for (int i = 0; i < s.ncounters; i++) {
    if (strncmp(s.counters[i].name, "hparam/", 7)) continue;
    fmt_num(v, sizeof v, s.counters[i].value);
    printf("%s%s=%s", shown++ ? ", " : "  live     ", s.counters[i].name + 7, v);
  }
  if (shown) printf("\n");
  return 0;
}

int cmd_set(int argc, char **argv) {
  const char *addr = NULL, *token = getenv("SHOAL_TOKEN"), *run = NULL;
  rpc_hyperparam h[64];
  char *owned[64];
  int n = 0;
  int rc = 2;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--token") && i + 1 < argc) {
      token = argv[++i];
    } else if (!strcmp(argv[i], "--run") && i + 1 < argc) {
      run = argv[++i];
    } else if (argv[i][0] != '-' && !addr) {
      addr = argv[i];
    } else if (argv[i][0] != '-' && strchr(argv[i], '=') && n < 64) {
      char *kv = strdup(argv[i]), *eq = strchr(kv, '=');
      *eq = 0;
      owned[n] = kv;
      h[n] = (rpc_hyperparam){.key = kv};
      char *end;
      double x = strtod(eq + 1, &end);
      if (end != eq + 1 && !*end) {
        h[n].number = x;
      } else {
        h[n].is_text = true; /* the learner says which keys take text (none today) */
        h[n].text = eq + 1;
      }
      n++;
    } else if (argv[i][0] != '-' && !strchr(argv[i], '=')) {
      fprintf(stderr, "shoal set: '%s' is not KEY=VALUE (e.g. dqn.lr=0.0003)\n", argv[i]);
      goto done;
    } else {
      cli_bad_arg("set", argc, argv, i);
      goto done;
    }
  }
  if (!addr || n == 0) {
    cli_bad_usage("set");
    goto done;
  }
  if (!addr_has_port("set", addr)) goto done;
  shoal_error err = {0};
  rpc_client *c;
  rpc_status st;
  char run_id[128];
  if (!run) {
    /* The learner refuses changes for another run: ask which one it trains. */
    if (connect_to(addr, NULL, token, &c, &err)) {
      rc = fail("set", &err);
      goto done;
    }
    int src = status_tries(c, &st, &err);
    rpc_client_close(c, 0.5, NULL, NULL);
    if (src) {
      rc = fail("set", &err);
      goto done;
    }
    snprintf(run_id, sizeof run_id, "%s", st.run_id);
    run = run_id;
  }
  if (connect_to(addr, run, token, &c, &err)) {
    rc = fail("set", &err);
    goto done;
  }
  uint32_t applied = 0;
  int src = set_tries(c, h, n, &applied, &err);
  rpc_client_close(c, 0.5, NULL, NULL);
  if (src) {
    rc = fail("set", &err);
    goto done;
  }
  for (int i = 0; i < n; i++) {
    char v[64];
    fmt_num(v, sizeof v, h[i].number);
    printf("shoal set: run %s: %s = %s\n", run, h[i].key, h[i].is_text ? h[i].text : v);
  }
  rc = 0;
done:
  for (int i = 0; i < n; i++) free(owned[i]);
  return rc;
}
