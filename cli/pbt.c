/* SPDX-License-Identifier: Apache-2.0 */
/* Population-based training's arithmetic (cli/pbt.h). */
#define _GNU_SOURCE
#include "cli/pbt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_number(const pbt_param *p, double x, char *out, size_t cap) {
  if (p->integer)
    snprintf(out, cap, "%.0f", round(x));
  else
    snprintf(out, cap, "%.6g", x);
}

void pbt_draw(const pbt_param *p, shoal_rng *rng, char *out, size_t cap) {
  if (!p->range) {
    snprintf(out, cap, "%s", p->choices[shoal_rng_below(rng, (uint64_t)p->nchoices)]);
    return;
  }
  double u = shoal_rng_uniform(rng);
  double x =
      p->log ? exp(log(p->min) + u * (log(p->max) - log(p->min))) : p->min + u * (p->max - p->min);
  put_number(p, x, out, cap);
}

void pbt_explore(const pbt_param *p, const char *old, double resample, shoal_rng *rng, char *out,
                 size_t cap, char *how, size_t hcap) {
  /* Both draws are made whatever happens, so the stream of choices does not depend on
   * the values. */
  double u = shoal_rng_uniform(rng);
  bool up = shoal_rng_uniform(rng) < 0.5;
  int at = -1;
  double x = NAN;
  bool bad;
  if (p->range) {
    char *end;
    x = old ? strtod(old, &end) : NAN;
    bad = !old || end == old || *end || !isfinite(x);
  } else {
    for (int i = 0; old && i < p->nchoices; i++)
      if (!strcmp(old, p->choices[i])) at = i;
    bad = at < 0;
  }
  if (bad || u < resample) {
    pbt_draw(p, rng, out, cap);
    snprintf(how, hcap, "resampled");
    return;
  }
  if (!p->range) {
    int to = up ? (at + 1 < p->nchoices ? at + 1 : at) : (at > 0 ? at - 1 : at);
    snprintf(out, cap, "%s", p->choices[to]);
    snprintf(how, hcap, "%s", up ? "next" : "previous");
    return;
  }
  double y = x * (up ? 1.25 : 0.8);
  if (y < p->min) y = p->min;
  if (y > p->max) y = p->max;
  put_number(p, y, out, cap);
  snprintf(how, hcap, "%s", up ? "x1.25" : "x0.8");
}

int pbt_choose_leader(const double *scores, int n, int self, double truncation, bool minimize,
                      shoal_rng *rng) {
  if (n < 2 || self < 0 || self >= n || !isfinite(scores[self])) return -1;
  int order[PBT_MAX_MEMBERS], k = 0;
  for (int i = 0; i < n && k < PBT_MAX_MEMBERS; i++)
    if (isfinite(scores[i])) order[k++] = i;
  /* Ranks need the whole population: early finishers of a round do not exploit against
   * the few that have finished before them. */
  if (k < n) return -1;
  /* best first; an insertion sort keeps the member order among ties */
  for (int i = 1; i < k; i++) {
    int m = order[i], j = i;
    while (j > 0 &&
           (minimize ? scores[order[j - 1]] > scores[m] : scores[order[j - 1]] < scores[m]))
      order[j] = order[j - 1], j--;
    order[j] = m;
  }
  int cut = (int)ceil(truncation * k - 1e-9);
  if (cut < 1) cut = 1;
  if (cut > k / 2) cut = k / 2;
  int rank = 0;
  while (order[rank] != self) rank++;
  if (rank < k - cut) return -1;
  /* a member tied with a leader gains nothing from copying it */
  int leader = order[shoal_rng_below(rng, (uint64_t)cut)];
  return scores[leader] == scores[self] ? -1 : leader;
}

int pbt_spec_format(const pbt_spec *s, char *out, size_t cap) {
  size_t k = 0;
  int w = snprintf(out, cap,
                   "# pbt-spec: population=%d rounds=%d ready=%lld truncation=%.17g "
                   "resample=%.17g seed=%llu\n",
                   s->population, s->rounds, (long long)s->ready, s->truncation, s->resample,
                   (unsigned long long)s->seed);
  if (w < 0 || (size_t)w >= cap) return -1;
  k = (size_t)w;
  for (int i = 0; i < s->nparams; i++) {
    const pbt_param *p = &s->params[i];
    if (p->range)
      w = snprintf(out + k, cap - k, "# pbt-param: %s range %.17g %.17g %d %d\n", p->key, p->min,
                   p->max, p->log, p->integer);
    else {
      w = snprintf(out + k, cap - k, "# pbt-param: %s list", p->key);
      for (int c = 0; c < p->nchoices && w >= 0 && (size_t)w < cap - k; c++) {
        int w2 = snprintf(out + k + (size_t)w, cap - k - (size_t)w, " %s", p->choices[c]);
        w = w2 < 0 ? -1 : w + w2;
      }
      if (w >= 0 && (size_t)w < cap - k) {
        int w2 = snprintf(out + k + (size_t)w, cap - k - (size_t)w, "\n");
        w = w2 < 0 ? -1 : w + w2;
      }
    }
    if (w < 0 || (size_t)w >= cap - k) return -1;
    k += (size_t)w;
  }
  return (int)k;
}

int pbt_spec_parse(const char *text, pbt_spec *s, shoal_error *err) {
  memset(s, 0, sizeof *s);
  const char *p = text ? strstr(text, "# pbt-spec: ") : NULL;
  unsigned long long seed;
  long long ready;
  if (!p || sscanf(p,
                   "# pbt-spec: population=%d rounds=%d ready=%lld truncation=%lf "
                   "resample=%lf seed=%llu",
                   &s->population, &s->rounds, &ready, &s->truncation, &s->resample, &seed) != 6)
    return shoal_error_set(err, SHOAL_EFORMAT, "pbt: the trial has no readable '# pbt-spec:' line");
  s->ready = ready;
  s->seed = seed;
  if (s->population < 2 || s->population > PBT_MAX_MEMBERS || s->rounds < 1 || s->ready < 1 ||
      !(s->truncation > 0 && s->truncation <= 0.5) || !(s->resample >= 0 && s->resample <= 1))
    return shoal_error_set(err, SHOAL_EFORMAT, "pbt: '# pbt-spec:' holds values out of range");
  for (const char *q = strstr(text, "# pbt-param: "); q; q = strstr(q + 1, "# pbt-param: ")) {
    if (s->nparams == PBT_MAX_PARAMS)
      return shoal_error_set(err, SHOAL_EFORMAT, "pbt: more than %d '# pbt-param:' lines",
                             PBT_MAX_PARAMS);
    pbt_param *pp = &s->params[s->nparams];
    char line[4096], kind[8];
    size_t n = strcspn(q, "\n");
    snprintf(line, sizeof line, "%.*s", (int)n, q);
    int lg = 0, in = 0, used = 0;
    if (sscanf(line, "# pbt-param: %127s %7s %n", pp->key, kind, &used) != 2)
      return shoal_error_set(err, SHOAL_EFORMAT, "pbt: damaged line '%.80s'", line);
    if (!strcmp(kind, "range")) {
      pp->range = true;
      if (sscanf(line + used, "%lf %lf %d %d", &pp->min, &pp->max, &lg, &in) != 4 ||
          !(pp->max >= pp->min) || (lg && !(pp->min > 0)))
        return shoal_error_set(err, SHOAL_EFORMAT, "pbt: damaged range '%.80s'", line);
      pp->log = lg, pp->integer = in;
    } else if (!strcmp(kind, "list")) {
      for (char *tok = strtok(line + used, " "); tok; tok = strtok(NULL, " ")) {
        if (pp->nchoices == PBT_MAX_CHOICES)
          return shoal_error_set(err, SHOAL_EFORMAT, "pbt: more than %d choices for %s",
                                 PBT_MAX_CHOICES, pp->key);
        snprintf(pp->choices[pp->nchoices++], sizeof pp->choices[0], "%s", tok);
      }
      if (!pp->nchoices)
        return shoal_error_set(err, SHOAL_EFORMAT, "pbt: no choices for %s", pp->key);
    } else {
      return shoal_error_set(err, SHOAL_EFORMAT, "pbt: damaged line '%.80s'", line);
    }
    s->nparams++;
  }
  if (!s->nparams) return shoal_error_set(err, SHOAL_EFORMAT, "pbt: no '# pbt-param:' lines");
  return 0;
}
