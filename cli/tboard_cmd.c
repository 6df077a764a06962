/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shoal tboard RUN... [--store URI] [--out DIR]
 *
 * Writes each run's stored metrics as a TensorBoard event file: DIR/<run>/ with --out,
 * else the run's own tb/ folder in a file store (where `shoal run` writes them live),
 * else ./tb/<run>/. For runs in MongoDB, or to gather runs from several stores in one
 * place for `tensorboard --logdir DIR`.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/tboard.h"

static bool has_event_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return false;
  struct dirent *e;
  bool found = false;
  while (!found && (e = readdir(d))) found = strstr(e->d_name, "tfevents") != NULL;
  closedir(d);
  return found;
}

int cmd_tboard(int argc, char **argv) {
  const char *uri = NULL, *out = NULL;
  const char *runs[256];
  int nruns = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--store") && i + 1 < argc)
      uri = argv[++i];
    else if (!strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else if (argv[i][0] != '-' && nruns < 256)
      runs[nruns++] = argv[i];
    else {
      cli_bad_arg("tboard", argc, argv, i);
      return 2;
    }
  }
  if (nruns == 0) {
    cli_bad_usage("tboard");
    return 2;
  }
  shoal_error err = {0};
  store *st;
  if (store_open(&st, uri, &err)) {
    fprintf(stderr, "shoal tboard: store: %s\n", cli_unprefix(err.msg, "store"));
    return 1;
  }
  int rc = 0;
  for (int r = 0; r < nruns && !rc; r++) {
    store_run run = {0};
    if (store_run_find(st, runs[r], &run, &err)) {
      fprintf(stderr, "shoal tboard: %s\n", err.msg);
      rc = 1;
      break;
    }
    store_run_clear(&run);
    char dir[PATH_MAX], folder[PATH_MAX - 128];
    shoal_error le = {0};
    if (out) {
      size_t ol = strlen(out); /* "tb/" and "tb" are one folder: no "tb//run" */
      snprintf(dir, sizeof dir, "%.*s/%s", (int)(ol > 1 && out[ol - 1] == '/' ? ol - 1 : ol), out,
               runs[r]);
    } else if (store_local_dir(st, runs[r], folder, sizeof folder, &le) == 0)
      snprintf(dir, sizeof dir, "%s/tb", folder);
    else
      snprintf(dir, sizeof dir, "tb/%s", runs[r]);
    if (!out && has_event_files(dir)) {
      fprintf(stderr,
              "shoal tboard: %s already has event files (written live by shoal run); "
              "--out DIR writes a copy elsewhere\n",
              dir);
      rc = 1;
      break;
    }
    tb_mirror *m;
    size_t n = 0;
    if (tb_mirror_create(&m, st, runs[r], dir, &err) || tb_mirror_sync(m, &n, &err)) {
      fprintf(stderr, "shoal tboard: %s: %s\n", runs[r], err.msg);
      rc = 1;
      break;
    }
    printf("shoal tboard: %s: %zu scalars -> %s\n", runs[r], n, tb_mirror_path(m));
    tb_mirror_destroy(m);
  }
  store_close(st);
  return rc;
}
