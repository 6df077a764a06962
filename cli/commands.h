/*
 * cli/commands.h — the `shoal` subcommands beyond run and eval, one file each:
 *   live.c    shoal status ADDR, shoal set ADDR key=value ...  (a running learner)
 *   plot.c    shoal plot RUN ...                               (learning curves, gnuplot)
 *   sweep.c   shoal sweep SWEEP.yaml, shoal sweep --report, shoal worker --sweep NAME
 *   tboard.c  shoal tboard RUN ...                             (TensorBoard event files)
 *   import.c  shoal import FILE... --run RUN                   (experience into segments)
 * Each takes the arguments after its name and returns the process exit status
 * (0 ok, 1 failed, 2 usage).
 */
#ifndef SHOAL_CLI_COMMANDS_H
#define SHOAL_CLI_COMMANDS_H

int cmd_status(int argc, char **argv);
int cmd_set(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_tboard(int argc, char **argv);
int cmd_import(int argc, char **argv); /* import.c: shoal import FILE... --run RUN */

/* Flat JSON lines (the learner's events): "key":<number> (NAN when absent or null) and
 * "key":"<text>" into out (false when absent). Defined in shoal.c. */
#include <stdbool.h>
#include <stddef.h>
double json_num(const char *line, const char *key);
bool json_str(const char *line, const char *key, char *out, size_t cap);

/* The kind of run a config describes: an IMPALA / PPO config names `algo:` at its top
 * level (or a --set gives algo=...); an Ape-X config has no algo key. The on-policy
 * schema (onpolicy_schema) or the Ape-X one (apex_schema) loads it; shoal run starts
 * shoal-onpolicy-learner/-actor or shoal-learner/-actor. text may be NULL. Defined in
 * shoal.c; can't fail (an unreadable file is Ape-X, whose loader then names the error). */
bool shoal_yaml_is_onpolicy(const char *text, const char *const *sets, int nsets);
bool shoal_file_is_onpolicy(const char *path, const char *const *sets, int nsets);

/* The folder of the running shoal executable (shoal-learner and shoal-actor live
 * beside it), set by main. */
extern char shoal_bindir[];

#endif
