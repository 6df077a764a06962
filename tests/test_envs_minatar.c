/* SPDX-License-Identifier: Apache-2.0 */
/* MinAtar rules, checked through observations: Breakout's bounces and brick reward,
 * Freeway's collisions, clock and top-row reward, Seaquest's surfacing rule, Space
 * Invaders' shot, sticky action statistics and invariants over long random play. */
#define _DEFAULT_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envs/envs.h"

static env *make(const char *id) {
  env *e = NULL;
  shoal_error err = {0};
  assert_int_equal(env_make(&e, id, &err), 0);
  return e;
}

static int px(const uint8_t *obs, int c, int y, int x) { return obs[c * 100 + y * 10 + x]; }

/* The single set pixel of channel c, or -1 if there is not exactly one. */
static int only(const uint8_t *obs, int c, int *y, int *x) {
  int n = 0;
  *y = *x = -1;
  for (int k = 0; k < 100; k++)
    if (obs[c * 100 + k]) {
      *y = k / 10;
      *x = k % 10;
      n++;
    }
  return n == 1 ? 0 : -1;
}

static uint32_t fnv1a(const uint8_t *p, size_t n) {
  uint32_t h = 0x811c9dc5u;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x01000193u;
  return h;
}

/* Games played by MinAtar's own Python code with shoal's RNG stream
 * (tests/reference/minatar_ref.py): observations, rewards and game-overs must match at
 * every step, resets included. */
static void test_reference_games(void **unused) {
  const char *src = getenv("SHOAL_SOURCE_DIR");
  char path[1024], line[256];
  snprintf(path, sizeof path, "%s/tests/reference/minatar_ref.txt", src ? src : ".");
  FILE *f = fopen(path, "r");
  if (!f) fprintf(stderr, "cannot open %s\n", path);
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof line, f));
  assert_int_equal(strncmp(line, "shoal-envs-minatar-ref 1", 24), 0);
  int games = 0;
  while (fgets(line, sizeof line, f) && strncmp(line, "end", 3) != 0) {
    char id[64];
    unsigned long long seed;
    int steps;
    assert_int_equal(sscanf(line, "game %63s %llu %d", id, &seed, &steps), 3);
    env *e = make(id);
    const env_spec *sp = env_get_spec(e);
    uint8_t obs[1000];
    env_seed(e, seed);
    env_reset(e, obs);
    int ok = 0, episodes = 0;
    double total = 0;
    for (int t = 0; t < steps; t++) {
      assert_non_null(fgets(line, sizeof line, f));
      int a, rew, term;
      unsigned hash;
      assert_int_equal(sscanf(line, "%d %d %d %x", &a, &rew, &term, &hash), 4);
      int32_t act = a;
      env_result r;
      shoal_error err = {0};
      assert_int_equal(env_step(e, &act, obs, &r, &err), 0);
      int same = r.reward == rew && r.terminated == term &&
                 fnv1a(obs, (size_t)sp->obs.size) == (uint32_t)hash;
      if (!same && ok == t)
        fprintf(stderr, "%s: first difference at step %d: reward %g/%d, terminated %d/%d\n", id, t,
                r.reward, rew, r.terminated, term);
      ok += same;
      total += rew;
      if (r.terminated) {
        env_reset(e, obs);
        episodes++;
      }
    }
    fprintf(stderr, "%-26s %d steps, %d episodes, return %.0f: %d steps identical\n", id, steps,
            episodes, total, ok);
    assert_int_equal(ok, steps);
    env_destroy(e);
    games++;
  }
  fclose(f);
  assert_int_equal(games, 5);
}

static void test_breakout_bounce_and_brick(void **unused) {
  env *e = make("MinAtar/Breakout-v1");
  uint8_t obs[400];
  int y = -1, x = -1, tried = 0;
  /* a start with the ball in the right corner (MinAtar picks one of the two corners) */
  for (uint64_t seed = 0;; seed++) {
    env_seed(e, seed);
    env_reset(e, obs);
    assert_int_equal(only(obs, 1, &y, &x), 0);
    tried++;
    if (x == 9) break;
    assert_true(x == 0 && y == 3);
  }
  assert_true(tried < 20);
  /* 3 rows of bricks, paddle at 4 */
  for (int r = 0; r < 10; r++)
    for (int c = 0; c < 10; c++) assert_int_equal(px(obs, 3, r, c), r >= 1 && r <= 3);
  assert_int_equal(px(obs, 0, 9, 4), 1);
  /* With 'n' only, sticky actions change nothing. The ball goes down-left from (9, 3),
   * meets the paddle (it is above it at x = 4) and bounces back up-left, reflects off the
   * left wall, and breaks the brick at row 3, column 1 on the 11th step. */
  static const int want[11][2] = {{8, 4}, {7, 5}, {6, 6}, {5, 7}, {4, 8}, {3, 8},
                                  {2, 7}, {1, 6}, {0, 5}, {0, 4}, {1, 4}};
  int32_t a = 0;
  env_result r;
  shoal_error err = {0};
  for (int t = 0; t < 11; t++) {
    assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
    assert_int_equal(only(obs, 1, &y, &x), 0);
    assert_int_equal(x, want[t][0]);
    assert_int_equal(y, want[t][1]);
    assert_false(r.terminated);
    assert_true(r.reward == (t == 10 ? 1.0 : 0.0));
  }
  assert_int_equal(px(obs, 3, 3, 1), 0); /* the brick is gone */
  assert_int_equal(px(obs, 2, 4, 0), 1); /* the trail shows where the ball came from */
  /* the ball now falls down-right and misses the paddle: game over */
  int steps = 0;
  do {
    assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
    steps++;
  } while (!r.terminated && steps < 50);
  assert_true(r.terminated);
  env_destroy(e);
}

static void test_freeway(void **unused) {
  env *e = make("MinAtar/Freeway-v1");
  uint8_t obs[700], prev[700];
  shoal_error err = {0};
  env_result r;
  /* the clock: with 'n' the chicken never moves and the game ends after 2500 frames */
  env_seed(e, 1);
  env_reset(e, obs);
  int32_t a = 0;
  int steps = 0;
  do {
    assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
    steps++;
    assert_int_equal(px(obs, 0, 9, 4), 1);
  } while (!r.terminated);
  assert_int_equal(steps, 2501);

  /* going up: collisions send the chicken to the bottom, the top row scores */
  env_seed(e, 2);
  env_reset(e, obs);
  int scored = 0, hits = 0;
  for (int t = 0; t < 2400; t++) {
    memcpy(prev, obs, sizeof obs);
    int py, pxx;
    assert_int_equal(only(prev, 0, &py, &pxx), 0);
    a = 1; /* up */
    assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
    int ny, nx;
    assert_int_equal(only(obs, 0, &ny, &nx), 0);
    assert_int_equal(nx, 4);
    for (int k = 0; k < 100; k++) assert_false(obs[k] && obs[100 + k]); /* never on a car */
    if (r.reward == 1.0) {
      assert_int_equal(py, 1); /* scored from the row below the top */
      assert_int_equal(ny, 9);
      scored++;
    } else if (ny > py) {
      /* knocked back: in the row the chicken was in or had just moved to, a car is at
       * column 4 or just passed it (its trail is there) */
      assert_int_equal(ny, 9);
      int near = 0;
      for (int row = py - 1; row <= py; row++)
        for (int c = 1; c <= 6; c++) near |= row >= 1 && px(obs, c, row, 4);
      assert_true(near);
      hits++;
    } else {
      assert_true(ny == py || ny == py - 1);
    }
  }
  assert_true(scored > 0 && hits > 0);
  env_destroy(e);
}

/* With p = 0.1 the previous action is repeated. Breakout's paddle shows which action ran. */
static void test_sticky_actions(void **unused) {
  env *e = make("MinAtar/Breakout-v1");
  uint8_t obs[400];
  env_seed(e, 3);
  env_reset(e, obs);
  shoal_rng rng;
  shoal_rng_seed(&rng, 4);
  int last = 0; /* the executed action, 0 before the first step (MinAtar's default) */
  long asked_other = 0, repeated = 0;
  for (int t = 0; t < 60000; t++) {
    int y = 0, x0 = 0, x1 = 0;
    assert_int_equal(only(obs, 0, &y, &x0), 0);
    int32_t a = shoal_rng_below(&rng, 2) ? 2 : 1; /* v1: 1 = left, 2 = right */
    env_result r;
    shoal_error err = {0};
    assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
    assert_int_equal(only(obs, 0, &y, &x1), 0);
    int ran = x1 > x0 ? 2 : x1 < x0 ? 1 : 0;
    if (ran && x0 > 0 && x0 < 9 && last != 0) {
      if (a != last) {
        asked_other++;
        repeated += ran == last;
      } else {
        assert_int_equal(ran, a);
      }
    }
    last = ran ? ran : (x0 == 0 || x0 == 9) ? 0 : last;
    if (r.terminated) env_reset(e, obs); /* the previous action survives the reset */
  }
  double p = (double)repeated / (double)asked_other;
  fprintf(stderr, "sticky: %ld of %ld changed actions repeated the previous (%.4f)\n", repeated,
          asked_other, p);
  assert_true(asked_other > 10000);
  assert_true(p > 0.085 && p < 0.115);
  env_destroy(e);
}

static void test_seaquest_surface_rule(void **unused) {
  env *e = make("MinAtar/Seaquest-v1");
  uint8_t obs[1000];
  shoal_error err = {0};
  env_result r;
  /* waiting at the surface is safe and costs no oxygen */
  env_seed(e, 1);
  env_reset(e, obs);
  int32_t n = 0, down = 4, up = 2;
  for (int t = 0; t < 3000; t++) {
    assert_int_equal(env_step(e, &n, obs, &r, &err), 0);
    assert_false(r.terminated);
  }
  for (int x = 0; x < 10; x++) assert_int_equal(px(obs, 7, 9, x), 1); /* full oxygen bar */
  int y = -1, x = -1;
  assert_int_equal(only(obs, 0, &y, &x), 0);
  assert_int_equal(y, 0);
  /* diving once and coming up with no diver ends the game */
  int checked = 0;
  for (uint64_t seed = 10; seed < 40; seed++) {
    env_seed(e, seed);
    env_reset(e, obs);
    env_step(e, &down, obs, &r, &err);
    if (only(obs, 0, &y, &x) || y != 1 || r.terminated) continue; /* sticky: did not dive */
    env_step(e, &up, obs, &r, &err);
    if (only(obs, 0, &y, &x) || y != 0) continue;
    assert_true(r.terminated);
    checked++;
  }
  assert_true(checked > 10);
  env_destroy(e);
}

static void test_space_invaders_shot(void **unused) {
  env *e = make("MinAtar/SpaceInvaders-v1");
  uint8_t obs[600];
  shoal_error err = {0};
  env_result r;
  int checked = 0;
  for (uint64_t seed = 0; seed < 20; seed++) {
    env_seed(e, seed);
    env_reset(e, obs);
    /* the wave: rows 0..3, columns 2..7, moving left; the cannon at column 5 */
    for (int yy = 0; yy < 10; yy++)
      for (int xx = 0; xx < 10; xx++) {
        assert_int_equal(px(obs, 1, yy, xx), yy < 4 && xx >= 2 && xx < 8);
        assert_int_equal(px(obs, 2, yy, xx), yy < 4 && xx >= 2 && xx < 8);
      }
    int32_t fire = 3, noop = 0;
    env_step(e, &fire, obs, &r, &err);
    if (!px(obs, 4, 8, 5)) continue; /* sticky: the shot did not happen */
    double total = r.reward;
    for (int t = 2; t <= 6; t++) {
      env_step(e, &noop, obs, &r, &err);
      total += r.reward;
      if (t < 6) assert_int_equal(px(obs, 4, 8 - (t - 1), 5), 1);
    }
    assert_true(total == 1.0); /* the bullet met the lowest alien of column 5 */
    assert_int_equal(px(obs, 1, 3, 5), 0);
    assert_int_equal(px(obs, 4, 3, 5), 0);
    checked++;
  }
  assert_true(checked > 10);
  env_destroy(e);
}

/* Random play: binary observations, one player, finite non-negative integer rewards, and
 * episodes that end; the same seed replays the same game. */
static void test_random_play(void **unused) {
  static const char *ids[] = {"MinAtar/Breakout-v0", "MinAtar/Freeway-v0", "MinAtar/Asterix-v0",
                              "MinAtar/Seaquest-v0", "MinAtar/SpaceInvaders-v0"};
  for (int k = 0; k < 5; k++) {
    env *e = make(ids[k]), *e2 = make(ids[k]);
    const env_spec *sp = env_get_spec(e);
    int size = sp->obs.size;
    uint8_t *obs = malloc((size_t)size), *obs2 = malloc((size_t)size);
    env_seed(e, 42);
    env_seed(e2, 42);
    env_reset(e, obs);
    env_reset(e2, obs2);
    shoal_rng rng;
    shoal_rng_seed(&rng, 7);
    int episodes = 0;
    double total = 0;
    for (int t = 0; t < 30000; t++) {
      int32_t a = (int32_t)shoal_rng_below(&rng, 6);
      env_result r, r2;
      shoal_error err = {0};
      assert_int_equal(env_step(e, &a, obs, &r, &err), 0);
      assert_int_equal(env_step(e2, &a, obs2, &r2, &err), 0);
      assert_memory_equal(obs, obs2, (size_t)size);
      assert_true(r.reward >= 0 && r.reward == floor(r.reward) && r.reward == r2.reward);
      total += r.reward;
      for (int i = 0; i < size; i++) assert_true(obs[i] <= 1);
      int y = 0, x = 0;
      if (k != 0) assert_int_equal(only(obs, 0, &y, &x), 0);
      if (r.terminated) {
        env_reset(e, obs);
        env_reset(e2, obs2);
        episodes++;
      }
    }
    fprintf(stderr, "%-26s 30000 random steps: %d episodes, return %.0f\n", ids[k], episodes,
            total);
    assert_true(episodes > 0);
    /* invalid actions */
    int32_t bad = 6;
    env_result r;
    shoal_error err = {0};
    assert_int_equal(env_step(e, &bad, obs, &r, &err), SHOAL_ERANGE);
    free(obs);
    free(obs2);
    env_destroy(e);
    env_destroy(e2);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_games),
      cmocka_unit_test(test_breakout_bounce_and_brick),
      cmocka_unit_test(test_freeway),
      cmocka_unit_test(test_sticky_actions),
      cmocka_unit_test(test_seaquest_surface_rule),
      cmocka_unit_test(test_space_invaders_shot),
      cmocka_unit_test(test_random_play),
  };
  return cmocka_run_group_tests_name("envs_minatar", tests, NULL, NULL);
}
