/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli/pbt.h — population-based training's arithmetic (Jaderberg et al. 2017), for the
 * population sweeps of cli/sweep.c: which member exploits and whom it copies
 * (truncation selection), how an explored value moves (x0.8 / x1.25 within its bounds,
 * or a fresh draw), and the population's settings as the header lines each trial
 * carries in the store, so that a worker needs nothing but the store.
 */
#ifndef SHOAL_CLI_PBT_H
#define SHOAL_CLI_PBT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shoal.h"

enum { PBT_MAX_PARAMS = 16, PBT_MAX_CHOICES = 32, PBT_MAX_MEMBERS = 99 };

/* One explored key: a range [min, max] (log: in its logarithm; integer: rounded) or a
 * list of choices. */
typedef struct pbt_param {
  char key[128];
  bool range;
  double min, max;
  bool log, integer;
  int nchoices;
  char choices[PBT_MAX_CHOICES][64];
} pbt_param;

typedef struct pbt_spec {
  int population;    /* members, 2..PBT_MAX_MEMBERS */
  int rounds;        /* ready intervals each member trains */
  int64_t ready;     /* env steps of one interval */
  double truncation; /* the bottom fraction copies from the top fraction, (0, 0.5] */
  double resample;   /* the probability an explored value is drawn afresh, [0, 1] */
  uint64_t seed;
  int nparams;
  pbt_param params[PBT_MAX_PARAMS];
} pbt_spec;

/* A value drawn uniformly from p (in the logarithm for a log range; a choice for a
 * list) into out (cap bytes), as the config takes it. */
void pbt_draw(const pbt_param *p, shoal_rng *rng, char *out, size_t cap);

/* Explore: the value that follows old (p's value text in the copied member) into out:
 * with probability resample a fresh draw, else a range's value times 0.8 or 1.25 (even
 * odds) clipped to [min, max] (rounded for an integer range), or a list's neighbour
 * choice (either side, clipped at the ends). how (hcap bytes) says what happened:
 * "x0.8", "x1.25", "resampled", "next", "previous". An old value that does not parse
 * or is not a choice is resampled. */
void pbt_explore(const pbt_param *p, const char *old, double resample, shoal_rng *rng, char *out,
                 size_t cap, char *how, size_t hcap);

/* Exploit, by truncation selection: scores[0..n) are the members' latest scores (NaN:
 * none yet). Once every member has one, when member self is among the bottom
 * ceil(truncation·n) (at most n/2; the larger score is better unless minimize), returns
 * a member drawn uniformly from the top as many, else -1 (self goes on as it is; also
 * while a member has no score yet, or when the drawn leader's score equals self's).
 * Ties keep the member order. */
int pbt_choose_leader(const double *scores, int n, int self, double truncation, bool minimize,
                      shoal_rng *rng);

/* The settings as header lines ("# pbt-spec: ...", one "# pbt-param: ..." a key) into
 * out (cap bytes). Returns the length, or -1 when out is too small. */
int pbt_spec_format(const pbt_spec *s, char *out, size_t cap);

/* Reads them back from a trial's text. SHOAL_EFORMAT naming the line when a line is
 * missing or damaged. */
int pbt_spec_parse(const char *text, pbt_spec *s, shoal_error *err);

#endif
