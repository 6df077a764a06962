/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/commands.h — the `shoal` subcommands beyond run and eval, one file each:
 *   live.c    shoal status ADDR, shoal set ADDR key=value ...  (a running learner)
 *   dataset.c shoal dataset put|ls|info|rm ...                 (datasets in the store)
 *   media.c   shoal media ls|get RUN ...                       (a run's recordings)
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
int cmd_dataset(int argc, char **argv);
int cmd_media(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_tboard(int argc, char **argv);
int cmd_import(int argc, char **argv); /* import.c: shoal import FILE... --run RUN */
int cmd_config(int argc, char **argv); /* usage.c: shoal config keys [ALGO] */

/* ---- usage (cli/usage.c): every command's usage in one table ---- */
#include <stdbool.h>
#include <stdio.h>
/* The list of commands, one line each, into f. */
void cli_overview(FILE *f);
/* cmd's whole usage on stdout; false for a command shoal does not have. */
bool cli_help(const char *cmd);
/* cmd's whole usage on stderr; returns 2 (the exit status of a usage error). */
int cli_bad_usage(const char *cmd);
/* Whether argv (a command's arguments) asks for help: --help or -h. */
bool cli_wants_help(int argc, char **argv);
/* Says on stderr why argument argv[i] of `shoal cmd` was not taken: an option that
 * takes a value given none ("--set needs a value: --set KEY=VALUE"), else an unknown
 * argument. Returns 2 (the exit status of a usage error). */
int cli_bad_arg(const char *cmd, int argc, char **argv, int i);
/* Parses s, option opt's value, as a whole number in [lo, hi] into *out; else says on
 * stderr what opt needs ("shoal eval: --episodes 'abc': a whole number from 1 to
 * 100000") and returns false. */
bool cli_int_arg(const char *cmd, const char *opt, const char *s, long lo, long hi, int *out);
/* msg without a leading "prefix: ", so that a caller that names the prefix itself
 * ("shoal plot: store: ...") does not print it twice; msg itself otherwise. */
const char *cli_unprefix(const char *msg, const char *prefix);

/* Flat JSON lines (the learner's events): "key":<number> (NAN when absent or null) and
 * "key":"<text>" into out (false when absent). Defined in shoal.c. */
#include <stdbool.h>
#include <stddef.h>
double json_num(const char *line, const char *key);
bool json_str(const char *line, const char *key, char *out, size_t cap);

/* What a stored run has behind it: its training seconds (the last "train_seconds"
 * metric: the learner counts them across resumes) and its env steps, the most its
 * metrics or snapshots show. Zeros when it has none. `shoal run --resume` refuses a run
 * already at a limit by these; a PBT worker checks a member's round by the same.
 * Defined in shoal.c; can't fail. */
struct store;
void cli_run_so_far(struct store *st, const char *run, double *seconds, double *steps);

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

/* ---- the recorder of `shoal eval --render` (cli/media.c) ---- */
#include <stdint.h>

#include "store/store.h"

/* One episode's recording: a strip of at most strip_max (even) evenly spaced frames
 * and an animated PNG of the episode, played at 50 steps a second: every step of the
 * first 1000, then every 2nd step for the next 1000 frames, every 4th after that, and
 * so on (a frame is shown for the steps it stands for). Frames are (h, w, 3). */
typedef struct eval_rec eval_rec;
int eval_rec_create(eval_rec **out, int w, int h, int strip_max, shoal_error *err);
void eval_rec_destroy(eval_rec *r); /* NULL is fine */
/* 1 when the frame of step t (0-based) is wanted: render it and pass it to add. */
int eval_rec_wants(const eval_rec *r, int t);
int eval_rec_add(eval_rec *r, int t, const uint8_t *rgb, shoal_error *err);
/* Frames in the strip now, and their spacing in steps. */
int eval_rec_strip_frames(const eval_rec *r, int *every);
/* Stores the strip ("v<version>-s<seed>-ep<episode>-strip.png", image/png) and the
 * animation ("...-ep<episode>.apng", image/apng) in the media of base->run, with
 * base's metadata (version, episode, return, length, env); writes the
 * strip to strip_path too when not NULL. An item stored already (the same snapshot
 * and seed) is kept and reported. */
int eval_rec_store(eval_rec *r, store *st, const store_media_meta *base, uint64_t seed,
                   const char *strip_path, shoal_error *err);

#endif
