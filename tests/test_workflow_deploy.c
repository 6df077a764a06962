/* SPDX-License-Identifier: Apache-2.0 */
/* tests/test_workflow_deploy.c — the Kubernetes containers' commands (deploy/k8s/) pick
 * the programs by the config's `algo:` key. deploy/slurm/shoal.sbatch runs under a real
 * Slurm in tests/test_deploy_slurm.c. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>

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
  if (access("/bin/sh", X_OK) != 0) {
    printf("SKIPPED: no /bin/sh\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_k8s_commands_pick_programs),
  };
  return cmocka_run_group_tests_name("workflow_deploy", tests, setup, teardown);
}
