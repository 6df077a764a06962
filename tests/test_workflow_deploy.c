/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_deploy.c — deploy/slurm/shoal.sbatch end to end on this machine,
 * with stand-ins for Slurm's srun (runs --ntasks copies of a command, SLURM_PROCID set)
 * and scontrol (the allocation is localhost): `shoal init` records the run, the learner
 * step listens on 0.0.0.0:PORT, two actor steps reach it by host name and port, the
 * learner ends the run (run.max_seconds), the script stops the actors, and the store
 * holds the run's snapshot with the actors' env steps; an `algo: ppo` config runs the
 * on-policy programs the same way; the Kubernetes containers' commands pick the programs
 * by the config's `algo:` key too. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>

#include "store/store.h"
#include "proc_util.h"

static int setup(void **state) { return wf_setup("deploy"); }
static int teardown(void **state) { return wf_teardown(); }

static void write_exec(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, 0755), 0);
}

/* Runs deploy/slurm/shoal.sbatch for config (under configs/) as run, with fake srun
 * and scontrol on PATH; returns the output (caller frees it) and the exit status. */
static char *run_sbatch(const char *config, const char *run, const char *sets, int *rc) {
  char fake[400], path[8192], p[500];
  snprintf(fake, sizeof fake, "%s/fake-slurm", wf_dir);
  if (access(fake, F_OK) != 0) {
    assert_int_equal(mkdir(fake, 0755), 0);
    snprintf(p, sizeof p, "%s/scontrol", fake);
    write_exec(p, "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] && echo localhost\n");
    snprintf(p, sizeof p, "%s/srun", fake);
    write_exec(p,
               "#!/bin/bash\n"
               "n=1\n"
               "while [[ $1 == -* ]]; do [[ $1 == --ntasks=* ]] && n=${1#*=}; shift; done\n"
               "pids=()\n"
               "for ((i = 0; i < n; i++)); do SLURM_PROCID=$i \"$@\" & pids+=($!); done\n"
               "trap 'kill -TERM \"${pids[@]}\" 2>/dev/null' TERM INT\n"
               "st=0\n"
               "for p in \"${pids[@]}\"; do\n"
               "  while kill -0 $p 2>/dev/null; do wait $p; r=$?; done\n"
               "  wait $p 2>/dev/null; r=$?; [[ $r != 127 && $r != 0 ]] && st=$r\n"
               "done\n"
               "exit $st\n");
    snprintf(path, sizeof path, "%s:%s", fake, getenv("PATH"));
    setenv("PATH", path, 1);
  }
  char bin[4200], store_uri[400], port[16];
  snprintf(bin, sizeof bin, "%s/bin", getenv("SHOAL_BINARY_DIR"));
  snprintf(store_uri, sizeof store_uri, "file://%s/runs", wf_dir);
  snprintf(port, sizeof port, "%d", 20000 + (getpid() + (int)strlen(run)) % 20000);
  setenv("SLURM_JOB_NODELIST", "localhost", 1);
  setenv("SLURM_JOB_ID", "7", 1);
  setenv("SHOAL_BIN", bin, 1);
  setenv("SHOAL_STORE_URI", store_uri, 1);
  setenv("SHOAL_PORT", port, 1);
  setenv("SHOAL_ACTORS", "2", 1);
  setenv("SHOAL_TOKEN", "test-token-123", 1);
  setenv("SHOAL_SET", sets, 1);
  char resolved[400];
  snprintf(resolved, sizeof resolved, "%s/resolved-%s.yaml", wf_dir, run);
  setenv("SHOAL_RESOLVED", resolved, 1);
  char script[4200], cfg[4200];
  snprintf(script, sizeof script, "%s/deploy/slurm/shoal.sbatch", wf_src);
  snprintf(cfg, sizeof cfg, "%s/configs/%s", wf_src, config);
  char *argv[] = {"/bin/bash", script, cfg, (char *)run, NULL};
  char *out = wf_run(argv, 120, rc);
  printf("%s", out);
  return out;
}

/* The run's latest snapshot holds the actors' env steps (they reached the learner
 * through the token: without it they are refused and nothing arrives). */
static void check_run_finished(const char *run) {
  char store_uri[400];
  snprintf(store_uri, sizeof store_uri, "file://%s/runs", wf_dir);
  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, store_uri, &err), 0);
  store_run r;
  assert_int_equal(store_run_find(st, run, &r, &err), 0);
  assert_int_equal(r.status, STORE_RUN_FINISHED);
  store_run_clear(&r);
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  assert_int_equal(store_snapshot_get(st, run, STORE_LATEST, &meta, &bytes, &len, &err), 0);
  free(bytes);
  assert_true(meta.env_steps > 1000);
  assert_true(meta.updates > 0);
  store_close(st);
}

static void test_slurm_script_runs_learner_and_actors(void **state) {
  int rc;
  char *out = run_sbatch("cartpole-apex.yaml", "slurm1",
                         "run.max_seconds=4 run.solve_return=0 learner.warmup=500", &rc);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "shoal init: run slurm1 recorded"));
  assert_non_null(strstr(out, "shoal: run slurm1: shoal-learner and 2 x shoal-actor"));
  assert_null(strstr(out, "shoal-onpolicy"));
  assert_non_null(strstr(out, "\"event\":\"listening\""));
  assert_non_null(strstr(out, "\"event\":\"done\",\"reason\":\"max_seconds\""));
  assert_non_null(strstr(out, "learner step exited with status 0"));
  free(out);
  check_run_finished("slurm1");
}

/* An `algo: ppo` config runs the on-policy programs, as `shoal run` does. */
static void test_slurm_script_runs_onpolicy_programs(void **state) {
  int rc;
  char *out =
      run_sbatch("cartpole-ppo.yaml", "slurm-ppo", "run.max_seconds=4 run.solve_return=0", &rc);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "shoal init: run slurm-ppo recorded"));
  assert_non_null(
      strstr(out, "shoal: run slurm-ppo: shoal-onpolicy-learner and 2 x shoal-onpolicy-actor"));
  assert_non_null(strstr(out, "\"event\":\"listening\""));
  assert_non_null(strstr(out, "\"event\":\"done\",\"reason\":\"max_seconds\""));
  assert_non_null(strstr(out, "learner step exited with status 0"));
  free(out);
  check_run_finished("slurm-ppo");
}

/* The shell command of the container named name in a manifest: the folded `>-` block
 * after its `- -c` line, joined with spaces as YAML folds it. Caller frees it. */
static char *manifest_command(const char *file, const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/deploy/k8s/%s", wf_src, file);
  char *text = wf_slurp(path, NULL);
  assert_non_null(text);
  char key[96];
  snprintf(key, sizeof key, "- name: %s\n", name);
  const char *c = strstr(text, key);
  assert_non_null(c);
  c = strstr(c, "- >-\n");
  assert_non_null(c);
  c = strchr(c, '\n') + 1;
  size_t indent = strspn(c, " ");
  char *cmd = calloc(1, strlen(c) + 1);
  size_t used = 0;
  while (*c && strspn(c, " ") == indent && c[indent] != '\n') {
    const char *eol = strchr(c, '\n');
    size_t n = eol ? (size_t)(eol - c) - indent : strlen(c + indent);
    if (used) cmd[used++] = ' ';
    memcpy(cmd + used, c + indent, n);
    used += n;
    c = eol ? eol + 1 : c + strlen(c);
  }
  free(text);
  assert_true(cmd[0]);
  return cmd;
}

/* Replaces every `from` in *s with `to` (a new string). */
static void replace_all(char **s, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to), n = 0;
  for (const char *p = *s; (p = strstr(p, from)); p += fl) n++;
  char *r = calloc(1, strlen(*s) + n * (tl + 1) + 1), *w = r;
  for (const char *p = *s, *q; (q = strstr(p, from)) || *p; p = q + fl) {
    if (!q) {
      strcpy(w, p);
      break;
    }
    memcpy(w, p, (size_t)(q - p));
    w += q - p;
    memcpy(w, to, tl);
    w += tl;
    *w = 0;
  }
  free(*s);
  *s = r;
}

/* The Kubernetes containers' commands pick the programs from the config's `algo:` key:
 * each is run by sh with stand-in programs on PATH that print their arguments. */
static void test_k8s_commands_pick_programs(void **state) {
  char fake[400], p[500], path[8192];
  snprintf(fake, sizeof fake, "%s/fake-k8s", wf_dir);
  assert_int_equal(mkdir(fake, 0755), 0);
  const char *progs[] = {"shoal-learner", "shoal-actor", "shoal-onpolicy-learner",
                         "shoal-onpolicy-actor"};
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", fake, progs[i]);
    char body[200];
    snprintf(body, sizeof body, "#!/bin/sh\necho \"ran %s $*\"\n", progs[i]);
    write_exec(p, body);
  }
  snprintf(path, sizeof path, "%s:%s", fake, getenv("PATH"));
  setenv("PATH", path, 1);
  setenv("SHOAL_RUN", "k8s-run", 1);
  setenv("SHOAL_TOKEN", "tok", 1);
  setenv("HOSTNAME", "shoal-actor-3", 1);
  const char *cfgs[] = {"cartpole-apex.yaml", "cartpole-impala.yaml", "cartpole-ppo.yaml"};
  for (int k = 0; k < 3; k++) {
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/configs/%s", wf_src, cfgs[k]);
    bool onpolicy = k > 0;
    for (int role = 0; role < 2; role++) {
      char *cmd =
          manifest_command(role ? "actors.yaml" : "learner.yaml", role ? "actor" : "learner");
      replace_all(&cmd, role ? "/etc/shoal/config.yaml" : "/work/resolved.yaml", cfg);
      char *argv[] = {"/bin/sh", "-c", cmd, NULL};
      int rc;
      char *out = wf_run(argv, 20, &rc);
      assert_int_equal(rc, 0);
      char want[4400];
      snprintf(want, sizeof want, "ran %s --config %s --run k8s-run",
               progs[(onpolicy ? 2 : 0) + role], cfg);
      if (!strstr(out, want))
        fail_msg("%s: '%s' printed '%s', wanted '%s'", cfgs[k], cmd, out, want);
      if (role)
        assert_non_null(strstr(out, "--index 3 --learner shoal-learner:50051"));
      else
        assert_non_null(strstr(out, "--resume"));
      free(out);
      free(cmd);
    }
  }
}

int main(void) {
  if (access("/bin/bash", X_OK) != 0) {
    printf("SKIPPED: no bash\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slurm_script_runs_learner_and_actors),
      cmocka_unit_test(test_slurm_script_runs_onpolicy_programs),
      cmocka_unit_test(test_k8s_commands_pick_programs),
  };
  return cmocka_run_group_tests_name("workflow_deploy", tests, setup, teardown);
}
