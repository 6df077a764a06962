/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/test_secrets.c — the learner's token and the store's credentials are never
 * printed or written, and the learner listens on loopback unless told otherwise.
 *
 * `shoal run` trains for a few seconds with a token and a file store while every
 * output is captured (the supervisor's stdout/stderr with the learner's and actors'
 * lines, and --log-json's progress); then every file under the test's folder (the run's
 * store: config, metrics, snapshots, replay; TMPDIR, where the children's config
 * file lives while they run) and every output is searched for the token. The stored
 * config has it redacted, so `shoal run --resume` refuses to start without it and runs
 * with it given again. A MongoDB URI with a password (an unreachable server) goes
 * through `shoal run`, `shoal run --resume --store`, `shoal init` and `shoal-learner`:
 * their errors name the store without the password. `shoal init --out` writes the
 * resolved config without secrets, and a learner given such a file refuses to use the
 * placeholder as its token.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "run/run.h"
#include "config/config.h"
#include "rpc/rpc.h"
#include "store/store.h"
#include "tests/proc_util.h"

#define TOKEN "tok-Zq81-secret-4d2e"
#define MONGO_PW "mongo-Pw-7731x"

/* Fails when secret occurs in any file under dir (recursively); returns files read. */
static int grep_tree(const char *dir, const char *secret) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st)) continue;
    if (S_ISDIR(st.st_mode)) {
      files += grep_tree(p, secret);
    } else if (S_ISREG(st.st_mode)) {
      size_t n;
      char *s = wf_slurp(p, &n);
      if (memmem(s, n, secret, strlen(secret))) fail_msg("the secret is in %s", p);
      free(s);
      files++;
    }
  }
  closedir(d);
  return files;
}

/* Listening TCP sockets on port: how many are bound to 127.0.0.1 and how many to
 * anything else (IPv4 or IPv6), from /proc/net/tcp{,6}. */
static void listeners(int port, int *loopback, int *other) {
  *loopback = *other = 0;
  const char *files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (int f = 0; f < 2; f++) {
    FILE *fp = fopen(files[f], "r");
    if (!fp) continue;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
      char local[128], remote[128], state[8];
      if (sscanf(line, " %*d: %127s %127s %7s", local, remote, state) != 3) continue;
      char *colon = strrchr(local, ':');
      if (!colon || strcmp(state, "0A") || strtol(colon + 1, NULL, 16) != port) continue;
      *colon = 0;
      /* 127.0.0.1, as IPv4 or IPv4-mapped IPv6 (gRPC's sockets are often dual-stack),
       * or ::1 */
      if (!strcmp(local, "0100007F") || !strcmp(local, "0000000000000000FFFF00000100007F") ||
          !strcmp(local, "00000000000000000000000001000000"))
        ++*loopback;
      else
        ++*other;
    }
    fclose(fp);
  }
}

/* The learner's port from its JSON "listening" event (--log-json). */
static int port_of(const char *out) {
  const char *p = strstr(out, "\"event\":\"listening\"");
  assert_non_null(p);
  p = strstr(p, "\"port\":");
  assert_non_null(p);
  return atoi(p + 7);
}

static void test_run_never_shows_the_token(void **state) {
  char cfg[4200], store_set[700], uri[400];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(uri, sizeof uri, "file://%s/store", wf_dir);
  snprintf(store_set, sizeof store_set, "store.uri=%s", uri);
  /* The children's config file goes to TMPDIR: the test's folder, searched below. */
  setenv("TMPDIR", wf_dir, 1);
  char *argv[] = {wf_shoal,
                  "run",
                  cfg,
                  "--log-json",
                  "--no-tensorboard",
                  "--set",
                  store_set,
                  "--set",
                  "run.name=sec1",
                  "--set",
                  "run.solve_return=0",
                  "--set",
                  "run.max_env_steps=0",
                  "--set",
                  "run.max_seconds=6",
                  "--set",
                  "learner.warmup=500",
                  "--set",
                  "learner.snapshot_every_s=1",
                  "--set",
                  "learner.token=" TOKEN,
                  "--set",
                  "actors=2",
                  NULL};
  wf_proc run;
  wf_start(&run, argv);
  char *out = wf_wait_text(run.out, "\"event\":\"listening\"", 60);
  /* Loopback only: the default learner.listen is 127.0.0.1:0. */
  int port = port_of(out), lo, other;
  free(out);
  listeners(port, &lo, &other);
  assert_int_equal(lo, 1);
  assert_int_equal(other, 0);
  assert_int_equal(wf_wait(&run, 120), 0);
  out = wf_slurp(run.out, NULL);
  printf("%s", out);
  /* The actors presented the token: the learner took their transitions. */
  const char *p = strstr(out, "\"event\":\"done\"");
  assert_non_null(p);
  p = strstr(p, "\"env_steps\":");
  assert_non_null(p);
  assert_true(strtod(p + 12, NULL) > 1000);
  assert_null(strstr(out, TOKEN));
  free(out);

  /* The run's stored config has the token redacted; nothing in the store has it. */
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, uri, &err), 0);
  store_run r = {0};
  assert_int_equal(store_run_find(st, "sec1", &r, &err), 0);
  assert_non_null(strstr(r.config, CONFIG_REDACTED));
  assert_null(strstr(r.config, TOKEN));
  store_run_clear(&r);
  store_close(st);
  int files = grep_tree(wf_dir, TOKEN);
  printf("secrets: %d files searched after the run\n", files);
  assert_true(files >= 4);

  /* Resuming needs the token again, and says so. */
  char *resume_bare[] = {wf_shoal, "run",   "--resume",          "sec1", "--store",
                         uri,      "--set", "run.max_seconds=3", NULL};
  int rc;
  out = wf_run(resume_bare, 60, &rc);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "--set learner.token="));
  free(out);
  char *resume[] = {wf_shoal,
                    "run",
                    "--resume",
                    "sec1",
                    "--store",
                    uri,
                    "--no-tensorboard",
                    "--set",
                    "run.max_seconds=8", /* past the 6 s the run trained: the limit is the run's */
                    "--set",
                    "learner.token=" TOKEN,
                    NULL};
  out = wf_run(resume, 120, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_null(strstr(out, TOKEN));
  free(out);
  grep_tree(wf_dir, TOKEN);
  unsetenv("TMPDIR");
}

static void test_mongo_password_never_shown(void **state) {
  char cfg[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  /* Nothing listens on port 9 (discard): the store cannot be reached. */
  const char *uri = "mongodb://shoaluser:" MONGO_PW
                    "@127.0.0.1:9/shoaldb?serverSelectionTimeoutMS=300"
                    "&connectTimeoutMS=300";
  char set_uri[512], bin[4200], cfg_out[4200];
  snprintf(set_uri, sizeof set_uri, "store.uri=%s", uri);
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  snprintf(cfg_out, sizeof cfg_out, "%s/resolved.yaml", wf_dir);
  char *run_argv[] = {wf_shoal, "run", cfg, "--set", set_uri, "--set", "run.name=sec2", NULL};
  char *resume_argv[] = {wf_shoal, "run", "--resume", "sec2", "--store", (char *)uri, NULL};
  char *init_argv[] = {wf_shoal,        "init",  cfg,
                       "--set",         set_uri, "--set",
                       "run.name=sec2", "--set", "learner.token=" TOKEN,
                       "--out",         cfg_out, NULL};
  /* The learner opens the store lazily and trains through an outage (tests/faults): it
   * runs its 3 s and stops, printing its store errors, never the password. */
  char *learner_argv[] = {bin,     "--config",          cfg, "--run", "sec2", "--set", set_uri,
                          "--set", "run.max_seconds=3", NULL};
  char *const *all[] = {run_argv, resume_argv, init_argv, learner_argv};
  for (int i = 0; i < 4; i++) {
    int rc;
    char *out = wf_run(all[i], 60, &rc);
    printf("%s: exit %d: %s", all[i][1], rc, out);
    if (i < 3) assert_int_not_equal(rc, 0); /* the store is unreachable */
    assert_null(strstr(out, MONGO_PW));
    assert_null(strstr(out, TOKEN));
    free(out);
  }
  grep_tree(wf_dir, MONGO_PW);
}

static void test_init_out_is_redacted(void **state) {
  char cfg[4200], store_set[700], cfg_out[4200], bin[4200];
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  snprintf(store_set, sizeof store_set, "store.uri=file://%s/store3", wf_dir);
  snprintf(cfg_out, sizeof cfg_out, "%s/resolved3.yaml", wf_dir);
  snprintf(bin, sizeof bin, "%s/bin/shoal-learner", getenv("SHOAL_BINARY_DIR"));
  char *init_argv[] = {wf_shoal,        "init",    cfg,
                       "--set",         store_set, "--set",
                       "run.name=sec3", "--set",   "learner.token=" TOKEN,
                       "--out",         cfg_out,   NULL};
  int rc;
  char *out = wf_run(init_argv, 60, &rc);
  assert_int_equal(rc, 0);
  assert_null(strstr(out, TOKEN));
  free(out);
  char *text = wf_slurp(cfg_out, NULL);
  assert_non_null(strstr(text, CONFIG_REDACTED));
  free(text);
  grep_tree(wf_dir, TOKEN);
  /* A learner handed the redacted file must not take the placeholder as its token. */
  char *learner_argv[] = {bin, "--config", cfg_out, "--run", "sec3", NULL};
  out = wf_run(learner_argv, 60, &rc);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "redacted"));
  free(out);
  /* With the token in its environment it runs (for 2 s, without actors). */
  setenv("SHOAL_TOKEN", TOKEN, 1);
  char *learner_env_argv[] = {bin,     "--config",          cfg_out, "--run", "sec3",
                              "--set", "run.max_seconds=2", NULL};
  out = wf_run(learner_env_argv, 60, &rc);
  unsetenv("SHOAL_TOKEN");
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "\"event\":\"listening\""));
  assert_null(strstr(out, TOKEN));
  free(out);
  grep_tree(wf_dir, TOKEN);
}

static int handled;
static int on_batch(void *user, const rpc_batch *b, shoal_error *err) {
  handled++;
  return 0;
}

static void test_loopback_by_default(void **state) {
  /* The schema's default and the server's default are both loopback. */
  int n;
  const cfg_key *keys = apex_schema(&n);
  config *c = config_create(keys, n, NULL);
  assert_non_null(c);
  assert_int_equal(strncmp(config_string(c, "learner.listen"), "127.0.0.1:", 10), 0);
  config_destroy(c);
  rpc_spec spec = {.run_id = "lo",
                   .max_items = 4,
                   .ncols = 1,
                   .cols = {{.name = "x", .dtype = RPC_F32, .ndim = 0}}};
  rpc_server_config sc = {.on_batch = on_batch};
  rpc_server *srv;
  shoal_error err = {0};
  assert_int_equal(rpc_server_create(&sc, &spec, &srv, &err), 0);
  int lo, other;
  listeners(rpc_server_port(srv), &lo, &other);
  assert_int_equal(lo, 1);
  assert_int_equal(other, 0);
  rpc_server_destroy(srv, 1.0);
  /* Told otherwise, it listens there. */
  sc.listen = "0.0.0.0:0";
  assert_int_equal(rpc_server_create(&sc, &spec, &srv, &err), 0);
  listeners(rpc_server_port(srv), &lo, &other);
  assert_int_equal(lo, 0);
  assert_int_equal(other, 1);
  rpc_server_destroy(srv, 1.0);
}

static int setup(void **state) { return wf_setup("secrets"); }
static int teardown(void **state) { return wf_teardown(); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loopback_by_default),
      cmocka_unit_test(test_init_out_is_redacted),
      cmocka_unit_test(test_mongo_password_never_shown),
      cmocka_unit_test(test_run_never_shows_the_token),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
