/* tests/test_workflow_deploy.c — deploy/slurm/shoal.sbatch end to end on this machine,
 * with stand-ins for Slurm's srun (runs --ntasks copies of a command, SLURM_PROCID set)
 * and scontrol (the allocation is localhost): `shoal init` records the run, the learner
 * step listens on 0.0.0.0:PORT, two actor steps reach it by host name and port, the
 * learner ends the run (run.max_seconds), the script stops the actors, and the store
 * holds the run's snapshot with the actors' env steps. */
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

static void test_slurm_script_runs_learner_and_actors(void **state) {
  char fake[400], path[8192], p[500];
  snprintf(fake, sizeof fake, "%s/fake-slurm", wf_dir);
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
  char bin[4200], store_uri[400], port[16];
  snprintf(bin, sizeof bin, "%s/bin", getenv("SHOAL_BINARY_DIR"));
  snprintf(store_uri, sizeof store_uri, "file://%s/runs", wf_dir);
  snprintf(port, sizeof port, "%d", 20000 + getpid() % 20000);
  setenv("PATH", path, 1);
  setenv("SLURM_JOB_NODELIST", "localhost", 1);
  setenv("SLURM_JOB_ID", "7", 1);
  setenv("SHOAL_BIN", bin, 1);
  setenv("SHOAL_STORE_URI", store_uri, 1);
  setenv("SHOAL_PORT", port, 1);
  setenv("SHOAL_ACTORS", "2", 1);
  setenv("SHOAL_TOKEN", "test-token-123", 1);
  setenv("SHOAL_SET", "run.max_seconds=4 run.solve_return=0 learner.warmup=500", 1);
  char resolved[400];
  snprintf(resolved, sizeof resolved, "%s/resolved.yaml", wf_dir);
  setenv("SHOAL_RESOLVED", resolved, 1);
  char script[4200], cfg[4200];
  snprintf(script, sizeof script, "%s/deploy/slurm/shoal.sbatch", wf_src);
  snprintf(cfg, sizeof cfg, "%s/configs/cartpole-apex.yaml", wf_src);
  char *argv[] = {"/bin/bash", script, cfg, "slurm1", NULL};
  int rc;
  char *out = wf_run(argv, 120, &rc);
  printf("%s", out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "shoal init: run slurm1 recorded"));
  assert_non_null(strstr(out, "\"event\":\"listening\""));
  assert_non_null(strstr(out, "\"event\":\"done\",\"reason\":\"max_seconds\""));
  assert_non_null(strstr(out, "learner step exited with status 0"));
  free(out);

  shoal_error err = {0};
  store *st;
  assert_int_equal(store_open(&st, store_uri, &err), 0);
  store_run r;
  assert_int_equal(store_run_find(st, "slurm1", &r, &err), 0);
  assert_int_equal(r.status, STORE_RUN_FINISHED);
  store_run_clear(&r);
  store_snapshot_meta meta;
  void *bytes;
  size_t len;
  assert_int_equal(store_snapshot_get(st, "slurm1", STORE_LATEST, &meta, &bytes, &len, &err), 0);
  free(bytes);
  /* The actors' steps reached the learner (through the token: without it they are
   * refused and nothing arrives). */
  assert_true(meta.env_steps > 1000);
  assert_true(meta.updates > 0);
  store_close(st);
}

int main(void) {
  if (access("/bin/bash", X_OK) != 0) {
    printf("SKIPPED: no bash\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slurm_script_runs_learner_and_actors),
  };
  return cmocka_run_group_tests_name("workflow_deploy", tests, setup, teardown);
}
