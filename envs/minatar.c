/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MinAtar (Young & Tian 2019, github.com/kenjyoung/MinAtar): Breakout, Freeway, Asterix,
 * Seaquest and Space Invaders on a 10x10 grid, rules as in minatar/environments/<game>.py,
 * with sticky actions (p = 0.1, the previous action repeats; the previous action is not
 * cleared by reset, as in minatar.Environment) and difficulty ramping on (options
 * "sticky_action_prob=P" and "difficulty_ramping=0" change them). Observations
 * are the games' boolean 10x10xC states written channels-first as uint8 (C, 10, 10).
 * -v0 takes all six actions (n, l, u, r, d, f), -v1 the game's minimal action set, as
 * minatar.gym registers them; neither has a time limit (Freeway ends itself at 2500).
 *
 * Where MinAtar's Python has quirks they are kept: a Seaquest enemy sub removed in its
 * move still fires that step, surfacing with six divers leaves the diver count at -1,
 * and Python's list order decides which of two overlapping enemies a bullet removes.
 */
#include <math.h>
#include <string.h>

#include "envs/internal.h"

/* What every game's state starts with: minatar.Environment's settings and its memory of
 * the last action. */
typedef struct minatar_common {
  int last_action; /* sticky actions; survives reset */
  int ramping;     /* difficulty_ramping (default on) */
  double sticky;   /* sticky_action_prob (default 0.1) */
} minatar_common;

static void minatar_init(void *st) {
  minatar_common *c = st;
  c->last_action = 0;
  c->ramping = 1;
  c->sticky = 0.1;
}

static int minatar_configure(void *st, const char *key, double v, shoal_error *err) {
  minatar_common *c = st;
  if (!key) return 0;
  if (strcmp(key, "sticky_action_prob") == 0) {
    if (!(v >= 0 && v <= 1))
      return shoal_error_set(err, SHOAL_EINVAL, "sticky_action_prob = %g: needs 0..1", v);
    c->sticky = v;
    return 0;
  }
  if (strcmp(key, "difficulty_ramping") == 0) {
    if (v != 0 && v != 1)
      return shoal_error_set(err, SHOAL_EINVAL, "difficulty_ramping = %g: needs 0 or 1", v);
    c->ramping = (int)v;
    return 0;
  }
  return shoal_error_set(err, SHOAL_EINVAL,
                         "unknown option '%s' (MinAtar takes sticky_action_prob, "
                         "difficulty_ramping)",
                         key);
}

enum { A_N = 0, A_L = 1, A_U = 2, A_R = 3, A_D = 4, A_F = 5 };

static inline void set_px(uint8_t *obs, int c, int y, int x) { obs[c * 100 + y * 10 + x] = 1; }

/* ---- Breakout ------------------------------------------------------------------------- */

typedef struct breakout_state {
  minatar_common c;
  int ball_x, ball_y, ball_dir, pos, last_x, last_y;
  int strike, terminal, nbricks;
  uint8_t brick[10][10];
} breakout_state;

static void breakout_reset_game(breakout_state *s, shoal_rng *rng) {
  s->ball_y = 3;
  int start = (int)env__rng_below(rng, 2); /* random.choice(2) */
  s->ball_x = start ? 9 : 0;
  s->ball_dir = start ? 3 : 2;
  s->pos = 4;
  memset(s->brick, 0, sizeof s->brick);
  memset(s->brick[1], 1, 30); /* rows 1..3 */
  s->nbricks = 30;
  s->strike = 0;
  s->last_x = s->ball_x;
  s->last_y = s->ball_y;
  s->terminal = 0;
}

static int breakout_act(breakout_state *s, int a) {
  static const int dx[4] = {-1, 1, 1, -1}, dy[4] = {-1, -1, 1, 1};
  static const int flip_x[4] = {1, 0, 3, 2}, flip_y[4] = {3, 2, 1, 0}, paddle[4] = {2, 3, 0, 1};
  int r = 0;
  if (a == A_L) s->pos = s->pos > 0 ? s->pos - 1 : 0;
  if (a == A_R) s->pos = s->pos < 9 ? s->pos + 1 : 9;
  s->last_x = s->ball_x;
  s->last_y = s->ball_y;
  int nx = s->ball_x + dx[s->ball_dir], ny = s->ball_y + dy[s->ball_dir];
  int strike_toggle = 0;
  if (nx < 0 || nx > 9) {
    nx = nx < 0 ? 0 : 9;
    s->ball_dir = flip_x[s->ball_dir];
  }
  if (ny < 0) {
    ny = 0;
    s->ball_dir = flip_y[s->ball_dir];
  } else if (s->brick[ny][nx]) {
    strike_toggle = 1;
    if (!s->strike) {
      r += 1;
      s->strike = 1;
      s->brick[ny][nx] = 0;
      s->nbricks--;
      ny = s->last_y;
      s->ball_dir = flip_y[s->ball_dir];
    }
  } else if (ny == 9) {
    if (s->nbricks == 0) {
      memset(s->brick[1], 1, 30);
      s->nbricks = 30;
    }
    if (s->ball_x == s->pos) {
      s->ball_dir = flip_y[s->ball_dir];
      ny = s->last_y;
    } else if (nx == s->pos) {
      s->ball_dir = paddle[s->ball_dir];
      ny = s->last_y;
    } else {
      s->terminal = 1;
    }
  }
  if (!strike_toggle) s->strike = 0;
  s->ball_x = nx;
  s->ball_y = ny;
  return r;
}

static void breakout_obs(const breakout_state *s, uint8_t *obs) {
  memset(obs, 0, 400);
  set_px(obs, 1, s->ball_y, s->ball_x);
  set_px(obs, 0, 9, s->pos);
  set_px(obs, 2, s->last_y, s->last_x);
  memcpy(obs + 300, s->brick, 100);
}

/* ---- Freeway -------------------------------------------------------------------------- */

#define FW_PLAYER_SPEED 3
#define FW_TIME_LIMIT 2500

typedef struct freeway_state {
  minatar_common c;
  int cars[8][4]; /* x, y, timer, signed speed */
  int pos, move_timer, terminate_timer, terminal;
} freeway_state;

static void freeway_randomize(freeway_state *s, shoal_rng *rng, int init) {
  int speeds[8];
  for (int i = 0; i < 8; i++) speeds[i] = 1 + (int)env__rng_below(rng, 5); /* randint(1, 6, 8) */
  for (int i = 0; i < 8; i++)
    if (env__rng_below(rng, 2) == 0) speeds[i] = -speeds[i]; /* choice([-1, 1], 8) */
  for (int i = 0; i < 8; i++) {
    int sp = speeds[i] < 0 ? -speeds[i] : speeds[i];
    if (init) {
      s->cars[i][0] = 0;
      s->cars[i][1] = i + 1;
    }
    s->cars[i][2] = sp;
    s->cars[i][3] = speeds[i];
  }
}

static void freeway_reset_game(freeway_state *s, shoal_rng *rng) {
  freeway_randomize(s, rng, 1);
  s->pos = 9;
  s->move_timer = FW_PLAYER_SPEED;
  s->terminate_timer = FW_TIME_LIMIT;
  s->terminal = 0;
}

static int freeway_act(freeway_state *s, shoal_rng *rng, int a) {
  int r = 0;
  if (a == A_U && s->move_timer == 0) {
    s->move_timer = FW_PLAYER_SPEED;
    s->pos = s->pos > 0 ? s->pos - 1 : 0;
  } else if (a == A_D && s->move_timer == 0) {
    s->move_timer = FW_PLAYER_SPEED;
    s->pos = s->pos < 9 ? s->pos + 1 : 9;
  }
  if (s->pos == 0) { /* reached the top */
    r += 1;
    freeway_randomize(s, rng, 0);
    s->pos = 9;
  }
  for (int i = 0; i < 8; i++) {
    int *car = s->cars[i];
    if (car[0] == 4 && car[1] == s->pos) s->pos = 9;
    if (car[2] == 0) {
      car[2] = car[3] < 0 ? -car[3] : car[3];
      car[0] += car[3] > 0 ? 1 : -1;
      if (car[0] < 0)
        car[0] = 9;
      else if (car[0] > 9)
        car[0] = 0;
      if (car[0] == 4 && car[1] == s->pos) s->pos = 9;
    } else {
      car[2] -= 1;
    }
  }
  s->move_timer -= s->move_timer > 0;
  s->terminate_timer -= 1;
  if (s->terminate_timer < 0) s->terminal = 1;
  return r;
}

static void freeway_obs(const freeway_state *s, uint8_t *obs) {
  memset(obs, 0, 700);
  set_px(obs, 0, s->pos, 4);
  for (int i = 0; i < 8; i++) {
    const int *car = s->cars[i];
    set_px(obs, 1, car[1], car[0]);
    int back = car[3] > 0 ? car[0] - 1 : car[0] + 1;
    if (back < 0)
      back = 9;
    else if (back > 9)
      back = 0;
    int sp = car[3] < 0 ? -car[3] : car[3];
    set_px(obs, 1 + sp, car[1], back); /* speed1..speed5 are channels 2..6 */
  }
}

/* ---- Asterix -------------------------------------------------------------------------- */

#define AX_RAMP_INTERVAL 100
#define AX_INIT_SPAWN_SPEED 10
#define AX_INIT_MOVE_INTERVAL 5

typedef struct asterix_entity {
  int8_t active, x, y, lr, gold;
} asterix_entity;

typedef struct asterix_state {
  minatar_common c;
  int player_x, player_y;
  asterix_entity ent[8]; /* slot i moves along row i + 1 */
  int spawn_speed, spawn_timer, move_speed, move_timer, ramp_timer, ramp_index, terminal;
} asterix_state;

static void asterix_reset_game(asterix_state *s) {
  s->player_x = 5;
  s->player_y = 5;
  memset(s->ent, 0, sizeof s->ent);
  s->spawn_speed = AX_INIT_SPAWN_SPEED;
  s->spawn_timer = s->spawn_speed;
  s->move_speed = AX_INIT_MOVE_INTERVAL;
  s->move_timer = s->move_speed;
  s->ramp_timer = AX_RAMP_INTERVAL;
  s->ramp_index = 0;
  s->terminal = 0;
}

static void asterix_spawn(asterix_state *s, shoal_rng *rng) {
  int lr = env__rng_uniform(rng) < 1.0 / 2;
  int gold = env__rng_uniform(rng) < 1.0 / 3;
  int slots[8], n = 0;
  for (int i = 0; i < 8; i++)
    if (!s->ent[i].active) slots[n++] = i;
  if (n == 0) return;
  int slot = slots[env__rng_below(rng, (uint32_t)n)];
  s->ent[slot] =
      (asterix_entity){1, (int8_t)(lr ? 0 : 9), (int8_t)(slot + 1), (int8_t)lr, (int8_t)gold};
}

static int asterix_act(asterix_state *s, shoal_rng *rng, int a) {
  int r = 0;
  if (s->spawn_timer == 0) {
    asterix_spawn(s, rng);
    s->spawn_timer = s->spawn_speed;
  }
  if (a == A_L)
    s->player_x = s->player_x > 0 ? s->player_x - 1 : 0;
  else if (a == A_R)
    s->player_x = s->player_x < 9 ? s->player_x + 1 : 9;
  else if (a == A_U)
    s->player_y = s->player_y > 1 ? s->player_y - 1 : 1;
  else if (a == A_D)
    s->player_y = s->player_y < 8 ? s->player_y + 1 : 8;
  for (int i = 0; i < 8; i++) {
    asterix_entity *e = &s->ent[i];
    if (e->active && e->x == s->player_x && e->y == s->player_y) {
      if (e->gold) {
        e->active = 0;
        r += 1;
      } else {
        s->terminal = 1;
      }
    }
  }
  if (s->move_timer == 0) {
    s->move_timer = s->move_speed;
    for (int i = 0; i < 8; i++) {
      asterix_entity *e = &s->ent[i];
      if (!e->active) continue;
      e->x += e->lr ? 1 : -1;
      if (e->x < 0 || e->x > 9) {
        e->active = 0; /* off screen; it cannot meet the player there */
        continue;
      }
      if (e->x == s->player_x && e->y == s->player_y) {
        if (e->gold) {
          e->active = 0;
          r += 1;
        } else {
          s->terminal = 1;
        }
      }
    }
  }
  s->spawn_timer -= 1;
  s->move_timer -= 1;
  if (s->c.ramping && (s->spawn_speed > 1 || s->move_speed > 1)) {
    if (s->ramp_timer >= 0) {
      s->ramp_timer -= 1;
    } else {
      if (s->move_speed > 1 && s->ramp_index % 2) s->move_speed -= 1;
      if (s->spawn_speed > 1) s->spawn_speed -= 1;
      s->ramp_index += 1;
      s->ramp_timer = AX_RAMP_INTERVAL;
    }
  }
  return r;
}

static void asterix_obs(const asterix_state *s, uint8_t *obs) {
  memset(obs, 0, 400);
  set_px(obs, 0, s->player_y, s->player_x);
  for (int i = 0; i < 8; i++) {
    const asterix_entity *e = &s->ent[i];
    if (!e->active) continue;
    set_px(obs, e->gold ? 3 : 1, e->y, e->x);
    int back = e->lr ? e->x - 1 : e->x + 1;
    if (back >= 0 && back <= 9) set_px(obs, 2, e->y, back);
  }
}

/* ---- Seaquest ------------------------------------------------------------------------- */

#define SQ_RAMP_INTERVAL 100
#define SQ_MAX_OXYGEN 200
#define SQ_INIT_SPAWN_SPEED 20
#define SQ_DIVER_SPAWN_SPEED 30
#define SQ_INIT_MOVE_INTERVAL 5
#define SQ_SHOT_COOL_DOWN 5
#define SQ_ENEMY_SHOT_INTERVAL 10
#define SQ_DIVER_MOVE_INTERVAL 5
/* List capacities. Enemies live at most 10 moves of (move_speed + 1) steps and spawn at
 * most once a step, so fewer than 64 of a kind exist; the caps are never reached. */
#define SQ_CAP 64

/* An entry of MinAtar's Python lists: [x, y, dir, timer, shot timer]. */
typedef struct sq_obj {
  int8_t x, y, dir, t, st;
} sq_obj;

typedef struct sq_list {
  int n;
  sq_obj v[SQ_CAP];
} sq_list;

static inline void sq_push(sq_list *l, sq_obj o) {
  if (l->n < SQ_CAP) l->v[l->n++] = o;
}
static inline void sq_remove(sq_list *l, int i) {
  memmove(&l->v[i], &l->v[i + 1], sizeof(sq_obj) * (size_t)(l->n - i - 1));
  l->n--;
}
/* First entry at (x, y), as Python's `for x in list: if x[0:2] == ...`; -1 if none. */
static inline int sq_find(const sq_list *l, int x, int y) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i].x == x && l->v[i].y == y) return i;
  return -1;
}

typedef struct seaquest_state {
  minatar_common c;
  int oxygen, diver_count, sub_x, sub_y, sub_or, surface, terminal;
  int e_spawn_speed, e_spawn_timer, d_spawn_timer, move_speed, ramp_index, shot_timer;
  sq_list f_bullets, e_bullets, e_fish, e_subs, divers;
} seaquest_state;

static void seaquest_reset_game(seaquest_state *s) {
  s->oxygen = SQ_MAX_OXYGEN;
  s->diver_count = 0;
  s->sub_x = 5;
  s->sub_y = 0;
  s->sub_or = 0;
  s->f_bullets.n = s->e_bullets.n = s->e_fish.n = s->e_subs.n = s->divers.n = 0;
  s->e_spawn_speed = SQ_INIT_SPAWN_SPEED;
  s->e_spawn_timer = s->e_spawn_speed;
  s->d_spawn_timer = SQ_DIVER_SPAWN_SPEED;
  s->move_speed = SQ_INIT_MOVE_INTERVAL;
  s->ramp_index = 0;
  s->shot_timer = 0;
  s->surface = 1;
  s->terminal = 0;
}

static void seaquest_spawn_enemy(seaquest_state *s, shoal_rng *rng) {
  int lr = env__rng_uniform(rng) < 1.0 / 2;
  int is_sub = env__rng_uniform(rng) < 1.0 / 3;
  int x = lr ? 0 : 9;
  int y = 1 + (int)env__rng_below(rng, 8); /* randint(low=1, high=9) */
  /* no spawn in a row where an enemy moves the other way */
  for (int i = 0; i < s->e_subs.n; i++)
    if (s->e_subs.v[i].y == y && s->e_subs.v[i].dir != lr) return;
  for (int i = 0; i < s->e_fish.n; i++)
    if (s->e_fish.v[i].y == y && s->e_fish.v[i].dir != lr) return;
  sq_obj o = {(int8_t)x, (int8_t)y, (int8_t)lr, (int8_t)s->move_speed, SQ_ENEMY_SHOT_INTERVAL};
  sq_push(is_sub ? &s->e_subs : &s->e_fish, o);
}

static void seaquest_spawn_diver(seaquest_state *s, shoal_rng *rng) {
  int lr = env__rng_uniform(rng) < 1.0 / 2;
  int y = 1 + (int)env__rng_below(rng, 8);
  sq_obj o = {(int8_t)(lr ? 0 : 9), (int8_t)y, (int8_t)lr, SQ_DIVER_MOVE_INTERVAL, 0};
  sq_push(&s->divers, o);
}

static int seaquest_surface(seaquest_state *s) {
  int r = 0;
  s->surface = 1;
  if (s->diver_count == 6) {
    s->diver_count = 0;
    r = s->oxygen * 10 / SQ_MAX_OXYGEN;
  }
  s->oxygen = SQ_MAX_OXYGEN;
  s->diver_count -= 1; /* as MinAtar: -1 after a full load */
  if (s->c.ramping && (s->e_spawn_speed > 1 || s->move_speed > 2)) {
    if (s->move_speed > 2 && s->ramp_index % 2) s->move_speed -= 1;
    if (s->e_spawn_speed > 1) s->e_spawn_speed -= 1;
    s->ramp_index += 1;
  }
  return r;
}

static int seaquest_act(seaquest_state *s, shoal_rng *rng, int a) {
  int r = 0;
  if (s->e_spawn_timer == 0) {
    seaquest_spawn_enemy(s, rng);
    s->e_spawn_timer = s->e_spawn_speed;
  }
  if (s->d_spawn_timer == 0) {
    seaquest_spawn_diver(s, rng);
    s->d_spawn_timer = SQ_DIVER_SPAWN_SPEED;
  }
  if (a == A_F && s->shot_timer == 0) {
    sq_push(&s->f_bullets, (sq_obj){(int8_t)s->sub_x, (int8_t)s->sub_y, (int8_t)s->sub_or, 0, 0});
    s->shot_timer = SQ_SHOT_COOL_DOWN;
  } else if (a == A_L) {
    s->sub_x = s->sub_x > 0 ? s->sub_x - 1 : 0;
    s->sub_or = 0;
  } else if (a == A_R) {
    s->sub_x = s->sub_x < 9 ? s->sub_x + 1 : 9;
    s->sub_or = 1;
  } else if (a == A_U) {
    s->sub_y = s->sub_y > 0 ? s->sub_y - 1 : 0;
  } else if (a == A_D) {
    s->sub_y = s->sub_y < 8 ? s->sub_y + 1 : 8;
  }
  const int px = s->sub_x, py = s->sub_y;

  /* friendly bullets, newest first (reversed()) */
  for (int i = s->f_bullets.n - 1; i >= 0; i--) {
    sq_obj *b = &s->f_bullets.v[i];
    b->x += b->dir ? 1 : -1;
    if (b->x < 0 || b->x > 9) {
      sq_remove(&s->f_bullets, i);
      continue;
    }
    int k = sq_find(&s->e_fish, b->x, b->y);
    if (k >= 0) {
      sq_remove(&s->e_fish, k);
      sq_remove(&s->f_bullets, i);
      r += 1;
      continue;
    }
    k = sq_find(&s->e_subs, b->x, b->y);
    if (k >= 0) {
      sq_remove(&s->e_subs, k);
      sq_remove(&s->f_bullets, i);
      r += 1;
    }
  }

  /* divers */
  for (int i = s->divers.n - 1; i >= 0; i--) {
    sq_obj *d = &s->divers.v[i];
    if (d->x == px && d->y == py && s->diver_count < 6) {
      sq_remove(&s->divers, i);
      s->diver_count += 1;
    } else if (d->t == 0) {
      d->t = SQ_DIVER_MOVE_INTERVAL;
      d->x += d->dir ? 1 : -1;
      if (d->x < 0 || d->x > 9) {
        sq_remove(&s->divers, i);
      } else if (d->x == px && d->y == py && s->diver_count < 6) {
        sq_remove(&s->divers, i);
        s->diver_count += 1;
      }
    } else {
      d->t -= 1;
    }
  }

  /* enemy subs; a sub removed in its move still takes its shot this step */
  for (int i = s->e_subs.n - 1; i >= 0; i--) {
    sq_obj sub = s->e_subs.v[i];
    int removed = 0;
    if (sub.x == px && sub.y == py) s->terminal = 1;
    if (sub.t == 0) {
      sub.t = (int8_t)s->move_speed;
      sub.x += sub.dir ? 1 : -1;
      if (sub.x < 0 || sub.x > 9) {
        removed = 1;
      } else if (sub.x == px && sub.y == py) {
        s->terminal = 1;
      } else {
        int k = sq_find(&s->f_bullets, sub.x, sub.y);
        if (k >= 0) {
          removed = 1;
          sq_remove(&s->f_bullets, k);
          r += 1;
        }
      }
    } else {
      sub.t -= 1;
    }
    if (sub.st == 0) {
      sub.st = SQ_ENEMY_SHOT_INTERVAL;
      sq_push(&s->e_bullets, (sq_obj){sub.x, sub.y, sub.dir, 0, 0});
    } else {
      sub.st -= 1;
    }
    if (removed)
      sq_remove(&s->e_subs, i);
    else
      s->e_subs.v[i] = sub;
  }

  /* enemy bullets */
  for (int i = s->e_bullets.n - 1; i >= 0; i--) {
    sq_obj *b = &s->e_bullets.v[i];
    if (b->x == px && b->y == py) s->terminal = 1;
    b->x += b->dir ? 1 : -1;
    if (b->x < 0 || b->x > 9)
      sq_remove(&s->e_bullets, i);
    else if (b->x == px && b->y == py)
      s->terminal = 1;
  }

  /* enemy fish */
  for (int i = s->e_fish.n - 1; i >= 0; i--) {
    sq_obj *f = &s->e_fish.v[i];
    if (f->x == px && f->y == py) s->terminal = 1;
    if (f->t == 0) {
      f->t = (int8_t)s->move_speed;
      f->x += f->dir ? 1 : -1;
      if (f->x < 0 || f->x > 9) {
        sq_remove(&s->e_fish, i);
      } else if (f->x == px && f->y == py) {
        s->terminal = 1;
      } else {
        int k = sq_find(&s->f_bullets, f->x, f->y);
        if (k >= 0) {
          sq_remove(&s->e_fish, i);
          sq_remove(&s->f_bullets, k);
          r += 1;
        }
      }
    } else {
      f->t -= 1;
    }
  }

  s->e_spawn_timer -= s->e_spawn_timer > 0;
  s->d_spawn_timer -= s->d_spawn_timer > 0;
  s->shot_timer -= s->shot_timer > 0;
  if (s->oxygen <= 0) s->terminal = 1;
  if (s->sub_y > 0) {
    s->oxygen -= 1;
    s->surface = 0;
  } else if (!s->surface) {
    if (s->diver_count == 0)
      s->terminal = 1;
    else
      r += seaquest_surface(s);
  }
  return r;
}

static void seaquest_trail(uint8_t *obs, const sq_obj *o) {
  int back = o->dir ? o->x - 1 : o->x + 1;
  if (back >= 0 && back <= 9) set_px(obs, 3, o->y, back);
}

static void seaquest_obs(const seaquest_state *s, uint8_t *obs) {
  memset(obs, 0, 1000);
  set_px(obs, 0, s->sub_y, s->sub_x);
  set_px(obs, 1, s->sub_y, s->sub_or ? s->sub_x - 1 : s->sub_x + 1);
  int ox = (s->oxygen > 0 ? s->oxygen : 0) * 10 / SQ_MAX_OXYGEN;
  for (int x = 0; x < ox && x < 10; x++) set_px(obs, 7, 9, x);
  for (int x = 9 - s->diver_count; x < 9; x++) /* state[9, 9-diver_count:9] */
    if (x >= 0) set_px(obs, 8, 9, x);
  for (int i = 0; i < s->f_bullets.n; i++) set_px(obs, 2, s->f_bullets.v[i].y, s->f_bullets.v[i].x);
  for (int i = 0; i < s->e_bullets.n; i++) set_px(obs, 4, s->e_bullets.v[i].y, s->e_bullets.v[i].x);
  for (int i = 0; i < s->e_fish.n; i++) {
    set_px(obs, 5, s->e_fish.v[i].y, s->e_fish.v[i].x);
    seaquest_trail(obs, &s->e_fish.v[i]);
  }
  for (int i = 0; i < s->e_subs.n; i++) {
    set_px(obs, 6, s->e_subs.v[i].y, s->e_subs.v[i].x);
    seaquest_trail(obs, &s->e_subs.v[i]);
  }
  for (int i = 0; i < s->divers.n; i++) {
    set_px(obs, 9, s->divers.v[i].y, s->divers.v[i].x);
    seaquest_trail(obs, &s->divers.v[i]);
  }
}

/* ---- Space Invaders ------------------------------------------------------------------- */

#define SI_SHOT_COOL_DOWN 5
#define SI_ENEMY_MOVE_INTERVAL 12
#define SI_ENEMY_SHOT_INTERVAL 10

/* The 10x10 maps as one 10-bit row mask each: bit x is column x. */
typedef struct space_invaders_state {
  minatar_common c;
  int pos, alien_dir, enemy_move_interval, alien_move_timer, alien_shot_timer;
  int ramp_index, shot_timer, terminal;
  uint16_t alien[10], f_bullet[10], e_bullet[10];
} space_invaders_state;

/* Bits set in a 10-bit row (SWAR; __builtin_popcount is a libgcc call without -mpopcnt). */
static inline int si_bits(uint32_t v) {
  v = v - ((v >> 1) & 0x5555u);
  v = (v & 0x3333u) + ((v >> 2) & 0x3333u);
  v = (v + (v >> 4)) & 0x0f0fu;
  return (int)((v + (v >> 8)) & 0x1fu);
}

static int si_count(const uint16_t *m) {
  int n = 0;
  for (int y = 0; y < 10; y++) n += si_bits(m[y]);
  return n;
}

static void si_wave(space_invaders_state *s) {
  for (int y = 0; y < 4; y++) s->alien[y] = 0xfc; /* alien_map[0:4, 2:8] = 1 */
}

static void space_invaders_reset_game(space_invaders_state *s) {
  s->pos = 5;
  memset(s->alien, 0, sizeof s->alien);
  memset(s->f_bullet, 0, sizeof s->f_bullet);
  memset(s->e_bullet, 0, sizeof s->e_bullet);
  si_wave(s);
  s->alien_dir = -1;
  s->enemy_move_interval = SI_ENEMY_MOVE_INTERVAL;
  s->alien_move_timer = s->enemy_move_interval;
  s->alien_shot_timer = SI_ENEMY_SHOT_INTERVAL;
  s->ramp_index = 0;
  s->shot_timer = 0;
  s->terminal = 0;
}

static int space_invaders_act(space_invaders_state *s, int a) {
  int r = 0;
  const uint16_t pbit = (uint16_t)(1u << s->pos);
  if (a == A_F && s->shot_timer == 0) {
    s->f_bullet[9] |= pbit;
    s->shot_timer = SI_SHOT_COOL_DOWN;
  } else if (a == A_L) {
    s->pos = s->pos > 0 ? s->pos - 1 : 0;
  } else if (a == A_R) {
    s->pos = s->pos < 9 ? s->pos + 1 : 9;
  }
  const uint16_t cbit = (uint16_t)(1u << s->pos);
  /* np.roll(f, -1, axis=0); f[9, :] = 0 */
  memmove(&s->f_bullet[0], &s->f_bullet[1], 9 * sizeof(uint16_t));
  s->f_bullet[9] = 0;
  /* np.roll(e, 1, axis=0); e[0, :] = 0 */
  memmove(&s->e_bullet[1], &s->e_bullet[0], 9 * sizeof(uint16_t));
  s->e_bullet[0] = 0;
  if (s->e_bullet[9] & cbit) s->terminal = 1;
  if (s->alien[9] & cbit) s->terminal = 1;
  if (s->alien_move_timer == 0) {
    int n = si_count(s->alien);
    s->alien_move_timer = n < s->enemy_move_interval ? n : s->enemy_move_interval;
    uint16_t any = 0;
    for (int y = 0; y < 10; y++) any |= s->alien[y];
    if (((any & 1u) && s->alien_dir < 0) || ((any & 0x200u) && s->alien_dir > 0)) {
      s->alien_dir = -s->alien_dir;
      if (s->alien[9]) s->terminal = 1;
      uint16_t last = s->alien[9]; /* np.roll(alien, 1, axis=0) wraps row 9 to row 0 */
      memmove(&s->alien[1], &s->alien[0], 9 * sizeof(uint16_t));
      s->alien[0] = last;
    } else {
      for (int y = 0; y < 10; y++) { /* np.roll(alien, dir, axis=1) */
        uint16_t m = s->alien[y];
        if (s->alien_dir > 0)
          m = (uint16_t)(((m << 1) | (m >> 9)) & 0x3ff);
        else
          m = (uint16_t)(((m >> 1) | (m << 9)) & 0x3ff);
        s->alien[y] = m;
      }
    }
    if (s->alien[9] & cbit) s->terminal = 1;
  }
  if (s->alien_shot_timer == 0) {
    s->alien_shot_timer = SI_ENEMY_SHOT_INTERVAL;
    /* the nearest column to the player with an alien (ties: the left one), its lowest alien */
    for (int d = 0; d < 10; d++) {
      int cols[2] = {s->pos - d, s->pos + d}, found = 0;
      for (int k = 0; k < (d ? 2 : 1) && !found; k++) {
        int x = cols[k];
        if (x < 0 || x > 9) continue;
        for (int y = 9; y >= 0; y--)
          if (s->alien[y] & (1u << x)) {
            s->e_bullet[y] |= (uint16_t)(1u << x);
            found = 1;
            break;
          }
      }
      if (found) break;
    }
  }
  for (int y = 0; y < 10; y++) {
    uint16_t kill = s->alien[y] & s->f_bullet[y];
    r += si_bits(kill);
    s->alien[y] &= (uint16_t)~kill;
    s->f_bullet[y] &= (uint16_t)~kill;
  }
  s->shot_timer -= s->shot_timer > 0;
  s->alien_move_timer -= 1;
  s->alien_shot_timer -= 1;
  if (si_count(s->alien) == 0) {
    if (s->enemy_move_interval > 6 && s->c.ramping) {
      s->enemy_move_interval -= 1;
      s->ramp_index += 1;
    }
    si_wave(s);
  }
  return r;
}

/* Five bits to five 0/1 bytes, for writing the bit rows out as observation planes. */
#define SP5(v) \
  { (v) & 1, ((v) >> 1) & 1, ((v) >> 2) & 1, ((v) >> 3) & 1, ((v) >> 4) & 1 }
#define SP5x4(v) SP5(v), SP5((v) + 1), SP5((v) + 2), SP5((v) + 3)
static const uint8_t spread5[32][5] = {SP5x4(0),  SP5x4(4),  SP5x4(8),  SP5x4(12),
                                       SP5x4(16), SP5x4(20), SP5x4(24), SP5x4(28)};

static void si_plane(uint8_t *obs, int c, const uint16_t *m) {
  uint8_t *o = obs + c * 100;
  for (int y = 0; y < 10; y++) {
    memcpy(o + y * 10, spread5[m[y] & 31], 5);
    memcpy(o + y * 10 + 5, spread5[(m[y] >> 5) & 31], 5);
  }
}

static void space_invaders_obs(const space_invaders_state *s, uint8_t *obs) {
  memset(obs, 0, 600);
  set_px(obs, 0, 9, s->pos);
  si_plane(obs, 1, s->alien);
  si_plane(obs, s->alien_dir < 0 ? 2 : 3, s->alien);
  si_plane(obs, 4, s->f_bullet);
  si_plane(obs, 5, s->e_bullet);
}

/* ---- The env kinds ---------------------------------------------------------------------- */

/* Uniform wrappers so one macro builds every kind. */
static inline void breakout_reset_(breakout_state *s, shoal_rng *rng) {
  breakout_reset_game(s, rng);
}
static inline void freeway_reset_(freeway_state *s, shoal_rng *rng) { freeway_reset_game(s, rng); }
static inline void asterix_reset_(asterix_state *s, shoal_rng *rng) {
  (void)rng;
  asterix_reset_game(s);
}
static inline void seaquest_reset_(seaquest_state *s, shoal_rng *rng) {
  (void)rng;
  seaquest_reset_game(s);
}
static inline void space_invaders_reset_(space_invaders_state *s, shoal_rng *rng) {
  (void)rng;
  space_invaders_reset_game(s);
}
static inline int breakout_act_(breakout_state *s, shoal_rng *rng, int a) {
  (void)rng;
  return breakout_act(s, a);
}
static inline int freeway_act_(freeway_state *s, shoal_rng *rng, int a) {
  return freeway_act(s, rng, a);
}
static inline int asterix_act_(asterix_state *s, shoal_rng *rng, int a) {
  return asterix_act(s, rng, a);
}
static inline int seaquest_act_(seaquest_state *s, shoal_rng *rng, int a) {
  return seaquest_act(s, rng, a);
}
static inline int space_invaders_act_(space_invaders_state *s, shoal_rng *rng, int a) {
  (void)rng;
  return space_invaders_act(s, a);
}

static const float ones_f[1000] = {[0 ... 999] = 1.0f};
static const float zeros_f[1000];

/* Cubehelix (Green 2011) with matplotlib's defaults, sampled as seaborn's
 * color_palette("cubehelix", C) samples it; black for empty cells, and where several
 * channels are set the last one shows, as MinAtar's display does. */
static void minatar_draw(const uint8_t *obs, int C, uint8_t *rgb) {
  uint8_t pal[11][3] = {{0, 0, 0}};
  for (int k = 0; k < C; k++) {
    double l = (k + 1.0) / (C + 1.0), phi = 2 * 3.141592653589793 * (0.5 / 3 + -1.5 * l);
    double amp = l * (1 - l) / 2, cp = cos(phi), sp = sin(phi);
    double col[3] = {l + amp * (-0.14861 * cp + 1.78277 * sp),
                     l + amp * (-0.29227 * cp - 0.90649 * sp), l + amp * (1.97294 * cp)};
    for (int j = 0; j < 3; j++) {
      double v = col[j] < 0 ? 0 : col[j] > 1 ? 1 : col[j];
      pal[k + 1][j] = (uint8_t)(v * 255 + 0.5);
    }
  }
  const int cell = 16;
  env__canvas c = {rgb, 160, 160};
  for (int y = 0; y < 10; y++)
    for (int x = 0; x < 10; x++) {
      int top = 0;
      for (int k = 0; k < C; k++)
        if (obs[k * 100 + y * 10 + x]) top = k + 1;
      env__rect(&c, x * cell, y * cell, (x + 1) * cell, (y + 1) * cell, pal[top]);
    }
  static const uint8_t grid[3] = {40, 40, 40};
  for (int k = 1; k < 10; k++) {
    env__rect(&c, k * cell, 0, k * cell + 1, 160, grid);
    env__rect(&c, 0, k * cell, 160, k * cell + 1, grid);
  }
}

#define MINATAR_KIND(game, C, name, ver, actset, nact)                                          \
  static inline void game##_##ver##_reset_(game##_state *s, shoal_rng *rng, uint8_t *obs) {     \
    game##_reset_(s, rng);                                                                      \
    game##_obs(s, obs);                                                                         \
  }                                                                                             \
  static inline void game##_##ver##_step_(game##_state *s, shoal_rng *rng, const int32_t *a,    \
                                          uint8_t *obs, double *reward, int *term) {            \
    static const int set[6] = actset;                                                           \
    int act = set[*a];                                                                          \
    if (env__rng_uniform(rng) < s->c.sticky) act = s->c.last_action;                            \
    s->c.last_action = act;                                                                     \
    *reward = (double)game##_act_(s, rng, act);                                                 \
    *term = s->terminal;                                                                        \
    game##_obs(s, obs);                                                                         \
  }                                                                                             \
  static void game##_##ver##_reset(void *s, shoal_rng *rng, void *obs) {                        \
    game##_##ver##_reset_(s, rng, obs);                                                         \
  }                                                                                             \
  static void game##_##ver##_step(void *s, shoal_rng *rng, const void *a, void *obs, double *r, \
                                  int *t) {                                                     \
    game##_##ver##_step_(s, rng, a, obs, r, t);                                                 \
  }                                                                                             \
  ENV__DEFINE_VEC_STEP(game##_##ver##_vec_step, game##_state, game##_##ver##_step_,             \
                       game##_##ver##_reset_, uint8_t, (C)*100, int32_t, 1)                     \
  static void game##_##ver##_render(const void *st, uint8_t *rgb) {                             \
    uint8_t obs[(C)*100];                                                                       \
    game##_obs(st, obs);                                                                        \
    minatar_draw(obs, C, rgb);                                                                  \
  }                                                                                             \
  static const env_type game##_##ver##_type = {                                                 \
      .spec = {.id = "MinAtar/" name "-" #ver,                                                  \
               .obs = {ENV_UINT8, 3, {C, 10, 10}, (C)*100, 0, zeros_f, ones_f},                 \
               .act = {ENV_INT32, 0, {0}, 1, nact, NULL, NULL},                                 \
               .max_episode_steps = 0,                                                          \
               .reward_threshold = NAN,                                                         \
               .render_w = 160,                                                                 \
               .render_h = 160},                                                                \
      .state_size = sizeof(game##_state),                                                       \
      .reset = game##_##ver##_reset,                                                            \
      .step = game##_##ver##_step,                                                              \
      .render = game##_##ver##_render,                                                          \
      .init = minatar_init,                                                                     \
      .configure = minatar_configure,                                                           \
      .vec_step = game##_##ver##_vec_step,                                                      \
  };

#define ALL6 \
  { 0, 1, 2, 3, 4, 5 }
#define SET(...) \
  { __VA_ARGS__ }
MINATAR_KIND(breakout, 4, "Breakout", v0, ALL6, 6)
MINATAR_KIND(breakout, 4, "Breakout", v1, SET(A_N, A_L, A_R), 3)
MINATAR_KIND(freeway, 7, "Freeway", v0, ALL6, 6)
MINATAR_KIND(freeway, 7, "Freeway", v1, SET(A_N, A_U, A_D), 3)
MINATAR_KIND(asterix, 4, "Asterix", v0, ALL6, 6)
MINATAR_KIND(asterix, 4, "Asterix", v1, SET(A_N, A_L, A_U, A_R, A_D), 5)
MINATAR_KIND(seaquest, 10, "Seaquest", v0, ALL6, 6)
MINATAR_KIND(seaquest, 10, "Seaquest", v1, ALL6, 6)
MINATAR_KIND(space_invaders, 6, "SpaceInvaders", v0, ALL6, 6)
MINATAR_KIND(space_invaders, 6, "SpaceInvaders", v1, SET(A_N, A_L, A_R, A_F), 4)

const env_type *const env__minatar_types[] = {
    &breakout_v1_type,       &freeway_v1_type,        &asterix_v1_type, &seaquest_v1_type,
    &space_invaders_v1_type, &breakout_v0_type,       &freeway_v0_type, &asterix_v0_type,
    &seaquest_v0_type,       &space_invaders_v0_type,
};
const int env__minatar_ntypes = 10;
