/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gymnasium 1.x classic control, computed as Gymnasium's NumPy code computes it.
 *
 * Every expression keeps Gymnasium's operand order (IEEE addition and multiplication are
 * not associative), squares written `x**2` in Gymnasium go through env__sq (== libm
 * pow(x, 2.0), which is what NumPy calls) while `np.square(x)` is x*x, trigonometry is
 * libm's (NumPy 1.x uses libm for float64 sin/cos without AVX-512), and this file is
 * compiled with -ffp-contract=off. Types follow NumPy 1.x promotion: a float32 action
 * times a Python float is computed in float64. Sources: gymnasium/envs/classic_control/
 * {cartpole,mountain_car,continuous_mountain_car,acrobot,pendulum}.py.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "envs/internal.h"

#define PI 3.141592653589793 /* np.pi */

/* Options shared by several kinds: Gymnasium's reset(options={"low": .., "high": ..}),
 * applied to every reset. key NULL is the final check of env__apply_options. */
static int bounds_option(double *low, double *high, const char *key, double v, shoal_error *err,
                         int *handled) {
  *handled = 1;
  if (!key) {
    if (*low > *high)
      return shoal_error_set(err, SHOAL_EINVAL, "low (%g) must not exceed high (%g)", *low, *high);
    return 0;
  }
  if (strcmp(key, "low") == 0) {
    *low = v;
    return 0;
  }
  if (strcmp(key, "high") == 0) {
    *high = v;
    return 0;
  }
  *handled = 0;
  return 0;
}

static int flag_option(int *flag, const char *key, double v, shoal_error *err) {
  if (v != 0 && v != 1) return shoal_error_set(err, SHOAL_EINVAL, "%s = %g: needs 0 or 1", key, v);
  *flag = (int)v;
  return 0;
}

/* ---- CartPole-v1 -------------------------------------------------------------------- */

/* Barto, Sutton & Anderson (1983); Gymnasium's constants. */
#define CP_GRAVITY 9.8
#define CP_MASSCART 1.0
#define CP_MASSPOLE 0.1
#define CP_TOTAL_MASS (CP_MASSPOLE + CP_MASSCART)
#define CP_LENGTH 0.5 /* half the pole's length */
#define CP_POLEMASS_LENGTH (CP_MASSPOLE * CP_LENGTH)
#define CP_FORCE_MAG 10.0
#define CP_TAU 0.02 /* seconds between state updates (Euler) */
#define CP_THETA_THRESHOLD (12 * 2 * PI / 360)
#define CP_X_THRESHOLD 2.4

typedef struct cartpole_state {
  double x, x_dot, theta, theta_dot;
  double low, high; /* reset bounds (options) */
  int sutton_barto; /* sutton_barto_reward: 0 per step and -1 on failure */
} cartpole_state;

/* Gymnasium's Box(-high, high): the velocities are unbounded (np.inf in Gymnasium 1.x's
 * cartpole.py, checked against Gymnasium 1.4.0; gym and Gymnasium 0.x had float32 max). */
static const float cp_high[4] = {(float)(CP_X_THRESHOLD * 2), INFINITY,
                                 (float)(CP_THETA_THRESHOLD * 2), INFINITY};
static const float cp_low[4] = {-(float)(CP_X_THRESHOLD * 2), -INFINITY,
                                -(float)(CP_THETA_THRESHOLD * 2), -INFINITY};

static inline void cartpole_obs(const cartpole_state *s, float *obs) {
  obs[0] = (float)s->x;
  obs[1] = (float)s->x_dot;
  obs[2] = (float)s->theta;
  obs[3] = (float)s->theta_dot;
}

/* self.np_random.uniform(low=-0.05, high=0.05, size=(4,)) */
static inline void cartpole_reset_(cartpole_state *s, shoal_rng *rng, float *obs) {
  s->x = env__rng_range(rng, s->low, s->high);
  s->x_dot = env__rng_range(rng, s->low, s->high);
  s->theta = env__rng_range(rng, s->low, s->high);
  s->theta_dot = env__rng_range(rng, s->low, s->high);
  cartpole_obs(s, obs);
}

static inline void cartpole_step_(cartpole_state *s, shoal_rng *rng, const int32_t *a, float *obs,
                                  double *reward, int *term) {
  (void)rng;
  double x = s->x, x_dot = s->x_dot, theta = s->theta, theta_dot = s->theta_dot;
  double force = *a == 1 ? CP_FORCE_MAG : -CP_FORCE_MAG;
  double costheta = cos(theta);
  double sintheta = sin(theta);
  /* https://coneural.org/florian/papers/05_cart_pole.pdf; np.square is x*x */
  double temp = (force + CP_POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / CP_TOTAL_MASS;
  double thetaacc = (CP_GRAVITY * sintheta - costheta * temp) /
                    (CP_LENGTH * (4.0 / 3.0 - CP_MASSPOLE * (costheta * costheta) / CP_TOTAL_MASS));
  double xacc = temp - CP_POLEMASS_LENGTH * thetaacc * costheta / CP_TOTAL_MASS;
  /* kinematics_integrator = "euler" */
  x = x + CP_TAU * x_dot;
  x_dot = x_dot + CP_TAU * xacc;
  theta = theta + CP_TAU * theta_dot;
  theta_dot = theta_dot + CP_TAU * thetaacc;
  s->x = x;
  s->x_dot = x_dot;
  s->theta = theta;
  s->theta_dot = theta_dot;
  *term = x < -CP_X_THRESHOLD || x > CP_X_THRESHOLD || theta < -CP_THETA_THRESHOLD ||
          theta > CP_THETA_THRESHOLD;
  /* +1 every step, the terminating one included (Sutton & Barto: 0, and -1 on failure) */
  *reward = s->sutton_barto ? (*term ? -1.0 : 0.0) : 1.0;
  cartpole_obs(s, obs);
}

static void cartpole_reset(void *st, shoal_rng *rng, void *obs) { cartpole_reset_(st, rng, obs); }
static void cartpole_step(void *st, shoal_rng *rng, const void *a, void *obs, double *r, int *t) {
  cartpole_step_(st, rng, a, obs, r, t);
}
ENV__DEFINE_VEC_STEP(cartpole_vec_step, cartpole_state, cartpole_step_, cartpole_reset_, float, 4,
                     int32_t, 1)

static void cartpole_init(void *st) {
  cartpole_state *s = st;
  s->low = -0.05;
  s->high = 0.05;
  s->sutton_barto = 0;
}
static int cartpole_configure(void *st, const char *key, double v, shoal_error *err) {
  cartpole_state *s = st;
  int handled, rc = bounds_option(&s->low, &s->high, key, v, err, &handled);
  if (handled) return rc;
  if (strcmp(key, "sutton_barto_reward") == 0) return flag_option(&s->sutton_barto, key, v, err);
  return shoal_error_set(err, SHOAL_EINVAL,
                         "unknown option '%s' (takes sutton_barto_reward, low, high)", key);
}

static int cartpole_get(const void *st, double *out, int cap) {
  const cartpole_state *s = st;
  double v[4] = {s->x, s->x_dot, s->theta, s->theta_dot};
  for (int i = 0; i < 4 && i < cap; i++) out[i] = v[i];
  return 4;
}
static int cartpole_set(void *st, const double *in, int n) {
  if (n != 4) return SHOAL_ESHAPE;
  cartpole_state *s = st;
  s->x = in[0];
  s->x_dot = in[1];
  s->theta = in[2];
  s->theta_dot = in[3];
  return 0;
}

/* Gymnasium's picture (600x400, y up, flipped at the end), drawn with y down. */
static void cartpole_render(const void *st, uint8_t *rgb) {
  const cartpole_state *s = st;
  env__canvas c = {rgb, 600, 400};
  static const uint8_t black[3] = {0, 0, 0}, pole[3] = {202, 152, 101}, axle[3] = {129, 132, 203};
  env__fill(&c, 255, 255, 255);
  double scale = 600 / (CP_X_THRESHOLD * 2);
  double polelen = scale * (2 * CP_LENGTH), polewidth = 10.0;
  double cartx = s->x * scale + 300.0, carty = 100.0, axleoff = 30.0 / 4.0;
  env__line(&c, 0, 400 - carty, 600, 400 - carty, 1.0, black);
  double cart[8] = {cartx - 25, 400 - (carty - 15), cartx - 25, 400 - (carty + 15),
                    cartx + 25, 400 - (carty + 15), cartx + 25, 400 - (carty - 15)};
  env__poly(&c, cart, 4, black);
  double ay = carty + axleoff, st_ = sin(s->theta), ct = cos(s->theta);
  double b = -polewidth / 2, t = polelen - polewidth / 2;
  env__line(&c, cartx + b * st_, 400 - (ay + b * ct), cartx + t * st_, 400 - (ay + t * ct),
            polewidth, pole);
  env__circle(&c, cartx, 400 - ay, polewidth / 2, axle);
}

const env_type env__cartpole = {
    .spec = {.id = "CartPole-v1",
             .obs = {ENV_FLOAT32, 1, {4}, 4, 0, cp_low, cp_high},
             .act = {ENV_INT32, 0, {0}, 1, 2, NULL, NULL},
             .max_episode_steps = 500,
             .reward_threshold = 475.0,
             .render_w = 600,
             .render_h = 400},
    .state_size = sizeof(cartpole_state),
    .reset = cartpole_reset,
    .step = cartpole_step,
    .render = cartpole_render,
    .get_state = cartpole_get,
    .set_state = cartpole_set,
    .vec_step = cartpole_vec_step,
    .init = cartpole_init,
    .configure = cartpole_configure,
    .reset_options = "low,high",
};

/* ---- CartPoleNoVel-v1: CartPole with the velocities hidden ---------------------------
 * RL Baselines3 Zoo's CartPoleNoVel-v1 (its MaskVelocityWrapper over CartPole-v1): the
 * same dynamics, rewards and time limit, and observations (x, 0, theta, 0) with the
 * cart and pole velocities zeroed. A partially observed task: a policy must infer the
 * velocities from past observations (a recurrent core), or it balances far worse. */

static inline void cartpole_novel_obs(float *obs) { obs[1] = obs[3] = 0.0f; }
static inline void cartpole_novel_reset_(cartpole_state *s, shoal_rng *rng, float *obs) {
  cartpole_reset_(s, rng, obs);
  cartpole_novel_obs(obs);
}
static inline void cartpole_novel_step_(cartpole_state *s, shoal_rng *rng, const int32_t *a,
                                        float *obs, double *reward, int *term) {
  cartpole_step_(s, rng, a, obs, reward, term);
  cartpole_novel_obs(obs);
}
static void cartpole_novel_reset(void *st, shoal_rng *rng, void *obs) {
  cartpole_novel_reset_(st, rng, obs);
}
static void cartpole_novel_step(void *st, shoal_rng *rng, const void *a, void *obs, double *r,
                                int *t) {
  cartpole_novel_step_(st, rng, a, obs, r, t);
}
ENV__DEFINE_VEC_STEP(cartpole_novel_vec_step, cartpole_state, cartpole_novel_step_,
                     cartpole_novel_reset_, float, 4, int32_t, 1)

const env_type env__cartpole_novel = {
    .spec = {.id = "CartPoleNoVel-v1",
             .obs = {ENV_FLOAT32, 1, {4}, 4, 0, cp_low, cp_high},
             .act = {ENV_INT32, 0, {0}, 1, 2, NULL, NULL},
             .max_episode_steps = 500,
             .reward_threshold = 475.0,
             .render_w = 600,
             .render_h = 400},
    .state_size = sizeof(cartpole_state),
    .reset = cartpole_novel_reset,
    .step = cartpole_novel_step,
    .render = cartpole_render,
    .get_state = cartpole_get,
    .set_state = cartpole_set,
    .vec_step = cartpole_novel_vec_step,
    .init = cartpole_init,
    .configure = cartpole_configure,
    .reset_options = "low,high",
};

/* ---- MountainCar-v0 and MountainCarContinuous-v0 ------------------------------------ */

#define MC_MIN_POSITION -1.2
#define MC_MAX_POSITION 0.6
#define MC_MAX_SPEED 0.07
#define MC_GOAL_POSITION 0.5
#define MC_FORCE 0.001
#define MC_GRAVITY 0.0025
#define MCC_GOAL_POSITION 0.45 /* 0.45 in the continuous version */
#define MCC_POWER 0.0015

typedef struct mountaincar_state {
  double position, velocity; /* float64; the continuous version rounds to float32 per step */
  double low, high;          /* reset bounds (options) */
  double goal_velocity;
} mountaincar_state;

static const float mc_low[2] = {(float)MC_MIN_POSITION, -(float)MC_MAX_SPEED};
static const float mc_high[2] = {(float)MC_MAX_POSITION, (float)MC_MAX_SPEED};
static const float mcc_act_low[1] = {-1.0f}, mcc_act_high[1] = {1.0f};

/* np.array([self.np_random.uniform(low=-0.6, high=-0.4), 0]) */
static inline void mountaincar_reset_(mountaincar_state *s, shoal_rng *rng, float *obs) {
  s->position = env__rng_range(rng, s->low, s->high);
  s->velocity = 0.0;
  obs[0] = (float)s->position;
  obs[1] = 0.0f;
}

static inline void mountaincar_step_(mountaincar_state *s, shoal_rng *rng, const int32_t *a,
                                     float *obs, double *reward, int *term) {
  (void)rng;
  double position = s->position, velocity = s->velocity;
  /* velocity += (action - 1) * force + math.cos(3 * position) * (-gravity) */
  velocity = velocity + ((double)(*a - 1) * MC_FORCE + cos(3 * position) * (-MC_GRAVITY));
  velocity = env__clip(velocity, -MC_MAX_SPEED, MC_MAX_SPEED);
  position = position + velocity;
  position = env__clip(position, MC_MIN_POSITION, MC_MAX_POSITION);
  if (position == MC_MIN_POSITION && velocity < 0) velocity = 0.0;
  *term = position >= MC_GOAL_POSITION && velocity >= s->goal_velocity;
  *reward = -1.0;
  s->position = position;
  s->velocity = velocity;
  obs[0] = (float)position;
  obs[1] = (float)velocity;
}

static inline void mountaincar_cont_step_(mountaincar_state *s, shoal_rng *rng, const float *a,
                                          float *obs, double *reward, int *term) {
  (void)rng;
  double position = s->position, velocity = s->velocity;
  double act = (double)a[0];
  double force = act < -1.0 ? -1.0 : act; /* min(max(action[0], min_action), max_action) */
  force = force > 1.0 ? 1.0 : force;
  velocity = velocity + (force * MCC_POWER - 0.0025 * cos(3 * position));
  if (velocity > MC_MAX_SPEED) velocity = MC_MAX_SPEED;
  if (velocity < -MC_MAX_SPEED) velocity = -MC_MAX_SPEED;
  position = position + velocity;
  if (position > MC_MAX_POSITION) position = MC_MAX_POSITION;
  if (position < MC_MIN_POSITION) position = MC_MIN_POSITION;
  if (position == MC_MIN_POSITION && velocity < 0) velocity = 0.0;
  *term = position >= MCC_GOAL_POSITION && velocity >= s->goal_velocity;
  /* reward = 100 on reaching the goal, minus 0.1 * the *unclipped* action squared */
  double r = *term ? 100.0 : 0.0;
  *reward = r - env__sq(act) * 0.1;
  /* self.state = np.array([position, velocity], dtype=np.float32) */
  s->position = env__f32(position);
  s->velocity = env__f32(velocity);
  obs[0] = (float)s->position;
  obs[1] = (float)s->velocity;
}

static void mountaincar_reset(void *st, shoal_rng *rng, void *obs) {
  mountaincar_reset_(st, rng, obs);
}
static void mountaincar_step(void *st, shoal_rng *rng, const void *a, void *obs, double *r,
                             int *t) {
  mountaincar_step_(st, rng, a, obs, r, t);
}
static void mountaincar_cont_step(void *st, shoal_rng *rng, const void *a, void *obs, double *r,
                                  int *t) {
  mountaincar_cont_step_(st, rng, a, obs, r, t);
}
ENV__DEFINE_VEC_STEP(mountaincar_vec_step, mountaincar_state, mountaincar_step_, mountaincar_reset_,
                     float, 2, int32_t, 1)
ENV__DEFINE_VEC_STEP(mountaincar_cont_vec_step, mountaincar_state, mountaincar_cont_step_,
                     mountaincar_reset_, float, 2, float, 1)

static void mountaincar_init(void *st) {
  mountaincar_state *s = st;
  s->low = -0.6;
  s->high = -0.4;
  s->goal_velocity = 0.0;
}
static int mountaincar_configure(void *st, const char *key, double v, shoal_error *err) {
  mountaincar_state *s = st;
  int handled, rc = bounds_option(&s->low, &s->high, key, v, err, &handled);
  if (handled) return rc;
  if (strcmp(key, "goal_velocity") == 0) {
    s->goal_velocity = v;
    return 0;
  }
  return shoal_error_set(err, SHOAL_EINVAL, "unknown option '%s' (takes goal_velocity, low, high)",
                         key);
}

static int mountaincar_get(const void *st, double *out, int cap) {
  const mountaincar_state *s = st;
  if (cap > 0) out[0] = s->position;
  if (cap > 1) out[1] = s->velocity;
  return 2;
}
static int mountaincar_set(void *st, const double *in, int n) {
  if (n != 2) return SHOAL_ESHAPE;
  mountaincar_state *s = st;
  s->position = in[0];
  s->velocity = in[1];
  return 0;
}

static void mountaincar_draw(const mountaincar_state *s, double goal, uint8_t *rgb) {
  env__canvas c = {rgb, 600, 400};
  static const uint8_t black[3] = {0, 0, 0}, wheel[3] = {128, 128, 128}, flag[3] = {204, 204, 0};
  env__fill(&c, 255, 255, 255);
  double scale = 600 / (MC_MAX_POSITION - MC_MIN_POSITION);
#define MC_HEIGHT(x) (sin(3 * (x)) * 0.45 + 0.55)
  double px = 0, py = 0;
  for (int i = 0; i < 100; i++) { /* np.linspace(min_position, max_position, 100) */
    double xs = MC_MIN_POSITION + (MC_MAX_POSITION - MC_MIN_POSITION) * i / 99.0;
    double x = (xs - MC_MIN_POSITION) * scale, y = 400 - MC_HEIGHT(xs) * scale;
    if (i > 0) env__line(&c, px, py, x, y, 2.0, black);
    px = x;
    py = y;
  }
  double pos = s->position, ang = cos(3 * pos), ca = cos(ang), sa = sin(ang);
  double cx = (pos - MC_MIN_POSITION) * scale, cy = 10 + MC_HEIGHT(pos) * scale;
  double corners[4][2] = {{-20, 0}, {-20, 20}, {20, 20}, {20, 0}}, poly[8];
  for (int k = 0; k < 4; k++) {
    double x = corners[k][0], y = corners[k][1];
    poly[2 * k] = cx + x * ca - y * sa;
    poly[2 * k + 1] = 400 - (cy + x * sa + y * ca);
  }
  env__poly(&c, poly, 4, black);
  for (int k = -1; k <= 1; k += 2) {
    double x = k * 10.0;
    env__circle(&c, cx + x * ca, 400 - (cy + x * sa), 20 / 2.5, wheel);
  }
  double flagx = (goal - MC_MIN_POSITION) * scale, flagy1 = MC_HEIGHT(goal) * scale;
  double flagy2 = flagy1 + 50;
  env__line(&c, flagx, 400 - flagy1, flagx, 400 - flagy2, 1.5, black);
  double tri[6] = {flagx, 400 - flagy2, flagx, 400 - (flagy2 - 10), flagx + 25, 400 - (flagy2 - 5)};
  env__poly(&c, tri, 3, flag);
#undef MC_HEIGHT
}
static void mountaincar_render(const void *st, uint8_t *rgb) {
  mountaincar_draw(st, MC_GOAL_POSITION, rgb);
}
static void mountaincar_cont_render(const void *st, uint8_t *rgb) {
  mountaincar_draw(st, MCC_GOAL_POSITION, rgb);
}

const env_type env__mountaincar = {
    .spec = {.id = "MountainCar-v0",
             .obs = {ENV_FLOAT32, 1, {2}, 2, 0, mc_low, mc_high},
             .act = {ENV_INT32, 0, {0}, 1, 3, NULL, NULL},
             .max_episode_steps = 200,
             .reward_threshold = -110.0,
             .render_w = 600,
             .render_h = 400},
    .state_size = sizeof(mountaincar_state),
    .reset = mountaincar_reset,
    .step = mountaincar_step,
    .render = mountaincar_render,
    .get_state = mountaincar_get,
    .set_state = mountaincar_set,
    .vec_step = mountaincar_vec_step,
    .init = mountaincar_init,
    .configure = mountaincar_configure,
    .reset_options = "low,high",
};

const env_type env__mountaincar_cont = {
    .spec = {.id = "MountainCarContinuous-v0",
             .obs = {ENV_FLOAT32, 1, {2}, 2, 0, mc_low, mc_high},
             .act = {ENV_FLOAT32, 1, {1}, 1, 0, mcc_act_low, mcc_act_high},
             .max_episode_steps = 999,
             .reward_threshold = 90.0,
             .render_w = 600,
             .render_h = 400},
    .state_size = sizeof(mountaincar_state),
    .reset = mountaincar_reset,
    .step = mountaincar_cont_step,
    .render = mountaincar_cont_render,
    .get_state = mountaincar_get,
    .set_state = mountaincar_set,
    .vec_step = mountaincar_cont_vec_step,
    .init = mountaincar_init,
    .configure = mountaincar_configure,
    .reset_options = "low,high",
};

/* ---- Acrobot-v1 ----------------------------------------------------------------------- */

/* Sutton (1996) and Sutton & Barto's book; book_or_nips = "book" (Gymnasium's default). */
#define AC_DT 0.2
#define AC_L1 1.0  /* LINK_LENGTH_1 */
#define AC_M1 1.0  /* LINK_MASS_1 */
#define AC_M2 1.0  /* LINK_MASS_2 */
#define AC_LC1 0.5 /* LINK_COM_POS_1 */
#define AC_LC2 0.5 /* LINK_COM_POS_2 */
#define AC_I1 1.0  /* LINK_MOI */
#define AC_I2 1.0
#define AC_G 9.8
#define AC_MAX_VEL_1 (4 * PI)
#define AC_MAX_VEL_2 (9 * PI)

typedef struct acrobot_state {
  double s[4];      /* theta1, theta2, dtheta1, dtheta2 */
  double c2, s2;    /* cos and sin of theta2, kept from the observation for the next step */
  double low, high; /* reset bounds (options) */
  int nips;         /* book_or_nips == "nips": the paper's dynamics */
} acrobot_state;

static const float ac_high[6] = {1, 1, 1, 1, (float)AC_MAX_VEL_1, (float)AC_MAX_VEL_2};
static const float ac_low[6] = {-1, -1, -1, -1, -(float)AC_MAX_VEL_1, -(float)AC_MAX_VEL_2};

static inline void acrobot_obs(acrobot_state *st, float *obs) {
  const double *s = st->s;
  st->c2 = cos(s[1]);
  st->s2 = sin(s[1]);
  obs[0] = (float)cos(s[0]);
  obs[1] = (float)sin(s[0]);
  obs[2] = (float)st->c2;
  obs[3] = (float)st->s2;
  obs[4] = (float)s[2];
  obs[5] = (float)s[3];
}

/* uniform(-0.1, 0.1, size=(4,)).astype(np.float32) */
static inline void acrobot_reset_(acrobot_state *st, shoal_rng *rng, float *obs) {
  for (int i = 0; i < 4; i++) st->s[i] = env__f32(env__rng_range(rng, st->low, st->high));
  acrobot_obs(st, obs);
}

/* AcrobotEnv._dsdt: y = (theta1, theta2, dtheta1, dtheta2), a = torque. The derivative
 * of the torque component is 0, so rk4 leaves it unchanged. */
static inline void acrobot_dsdt_cs(const double *y, double a, double c2, double s2, int nips,
                                   double *dy) {
  double theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
  double d1 = AC_M1 * (AC_LC1 * AC_LC1) +
              AC_M2 * (AC_L1 * AC_L1 + AC_LC2 * AC_LC2 + 2 * AC_L1 * AC_LC2 * c2) + AC_I1 + AC_I2;
  double d2 = AC_M2 * (AC_LC2 * AC_LC2 + AC_L1 * AC_LC2 * c2) + AC_I2;
  double phi2 = AC_M2 * AC_LC2 * AC_G * cos(theta1 + theta2 - PI / 2.0);
  double phi1 = -AC_M2 * AC_L1 * AC_LC2 * env__sq(dtheta2) * s2 -
                2 * AC_M2 * AC_L1 * AC_LC2 * dtheta2 * dtheta1 * s2 +
                (AC_M1 * AC_LC1 + AC_M2 * AC_L1) * AC_G * cos(theta1 - PI / 2) + phi2;
  double ddtheta2;
  if (nips) /* as in the NeurIPS paper */
    ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (AC_M2 * (AC_LC2 * AC_LC2) + AC_I2 - env__sq(d2) / d1);
  else /* the book's (and the Java implementation's), Gymnasium's default */
    ddtheta2 = (a + d2 / d1 * phi1 - AC_M2 * AC_L1 * AC_LC2 * env__sq(dtheta1) * s2 - phi2) /
               (AC_M2 * (AC_LC2 * AC_LC2) + AC_I2 - env__sq(d2) / d1);
  double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
  dy[0] = dtheta1;
  dy[1] = dtheta2;
  dy[2] = ddtheta1;
  dy[3] = ddtheta2;
}
static inline void acrobot_dsdt(const double *y, double a, int nips, double *dy) {
  acrobot_dsdt_cs(y, a, cos(y[1]), sin(y[1]), nips, dy);
}

static inline void acrobot_step_(acrobot_state *st, shoal_rng *rng, const int32_t *act, float *obs,
                                 double *reward, int *term) {
  (void)rng;
  static const double torques[3] = {-1.0, 0.0, 1.0}; /* AVAIL_TORQUE */
  double a = torques[*act];
  const double *y0 = st->s;
  /* rk4(self._dsdt, s_augmented, [0, self.dt]): one step of classic RK4 */
  const double dt = AC_DT, dt2 = dt / 2.0;
  double k1[4], k2[4], k3[4], k4[4], y[4], ns[4];
  acrobot_dsdt_cs(y0, a, st->c2, st->s2, st->nips, k1);
  for (int j = 0; j < 4; j++) y[j] = y0[j] + dt2 * k1[j];
  acrobot_dsdt(y, a, st->nips, k2);
  for (int j = 0; j < 4; j++) y[j] = y0[j] + dt2 * k2[j];
  acrobot_dsdt(y, a, st->nips, k3);
  for (int j = 0; j < 4; j++) y[j] = y0[j] + dt * k3[j];
  acrobot_dsdt(y, a, st->nips, k4);
  for (int j = 0; j < 4; j++) ns[j] = y0[j] + dt / 6.0 * (k1[j] + 2 * k2[j] + 2 * k3[j] + k4[j]);
  /* wrap(ns[0], -pi, pi), wrap(ns[1], -pi, pi) */
  for (int j = 0; j < 2; j++) {
    double x = ns[j];
    while (x > PI) x = x - (PI - -PI);
    while (x < -PI) x = x + (PI - -PI);
    ns[j] = x;
  }
  /* bound(x, m, M) = min(max(x, m), M) */
  ns[2] = env__clip(ns[2], -AC_MAX_VEL_1, AC_MAX_VEL_1);
  ns[3] = env__clip(ns[3], -AC_MAX_VEL_2, AC_MAX_VEL_2);
  for (int j = 0; j < 4; j++) st->s[j] = ns[j];
  double c0 = cos(ns[0]);
  *term = -c0 - cos(ns[1] + ns[0]) > 1.0;
  *reward = *term ? 0.0 : -1.0;
  st->c2 = cos(ns[1]);
  st->s2 = sin(ns[1]);
  obs[0] = (float)c0;
  obs[1] = (float)sin(ns[0]);
  obs[2] = (float)st->c2;
  obs[3] = (float)st->s2;
  obs[4] = (float)ns[2];
  obs[5] = (float)ns[3];
}

static void acrobot_reset(void *st, shoal_rng *rng, void *obs) { acrobot_reset_(st, rng, obs); }
static void acrobot_step(void *st, shoal_rng *rng, const void *a, void *obs, double *r, int *t) {
  acrobot_step_(st, rng, a, obs, r, t);
}
ENV__DEFINE_VEC_STEP(acrobot_vec_step, acrobot_state, acrobot_step_, acrobot_reset_, float, 6,
                     int32_t, 1)

static void acrobot_init(void *st) {
  acrobot_state *s = st;
  s->low = -0.1;
  s->high = 0.1;
  s->nips = 0;
}
static int acrobot_configure(void *st, const char *key, double v, shoal_error *err) {
  acrobot_state *s = st;
  int handled, rc = bounds_option(&s->low, &s->high, key, v, err, &handled);
  if (handled) return rc;
  if (strcmp(key, "nips") == 0) return flag_option(&s->nips, key, v, err);
  return shoal_error_set(err, SHOAL_EINVAL, "unknown option '%s' (takes nips, low, high)", key);
}

static int acrobot_get(const void *st, double *out, int cap) {
  const acrobot_state *s = st;
  for (int i = 0; i < 4 && i < cap; i++) out[i] = s->s[i];
  return 4;
}
static int acrobot_set(void *st, const double *in, int n) {
  if (n != 4) return SHOAL_ESHAPE;
  acrobot_state *s = st;
  for (int i = 0; i < 4; i++) s->s[i] = in[i];
  s->c2 = cos(in[1]);
  s->s2 = sin(in[1]);
  return 0;
}

static void acrobot_render(const void *st, uint8_t *rgb) {
  const double *s = ((const acrobot_state *)st)->s;
  env__canvas c = {rgb, 500, 500};
  static const uint8_t black[3] = {0, 0, 0}, link[3] = {0, 204, 204}, joint[3] = {204, 204, 0};
  env__fill(&c, 255, 255, 255);
  double bound = AC_L1 + 1.0 + 0.2, scale = 500 / (bound * 2), off = 250;
  /* Gymnasium swaps the axes ([:, ::-1]) and flips y: link 1 hangs down at theta1 = 0. */
  double x0 = off, y0 = 500 - off;
  double x1 = off + sin(s[0]) * scale, y1 = 500 - (off - cos(s[0]) * scale);
  double x2 = x1 + sin(s[0] + s[1]) * scale, y2 = y1 + cos(s[0] + s[1]) * scale;
  env__line(&c, -2.2 * scale + off, 500 - (scale + off), 2.2 * scale + off, 500 - (scale + off),
            1.0, black);
  env__line(&c, x0, y0, x1, y1, 0.2 * scale, link);
  env__line(&c, x1, y1, x2, y2, 0.2 * scale, link);
  env__circle(&c, x0, y0, 0.1 * scale, joint);
  env__circle(&c, x1, y1, 0.1 * scale, joint);
}

const env_type env__acrobot = {
    .spec = {.id = "Acrobot-v1",
             .obs = {ENV_FLOAT32, 1, {6}, 6, 0, ac_low, ac_high},
             .act = {ENV_INT32, 0, {0}, 1, 3, NULL, NULL},
             .max_episode_steps = 500,
             .reward_threshold = -100.0,
             .render_w = 500,
             .render_h = 500},
    .state_size = sizeof(acrobot_state),
    .reset = acrobot_reset,
    .step = acrobot_step,
    .render = acrobot_render,
    .get_state = acrobot_get,
    .set_state = acrobot_set,
    .vec_step = acrobot_vec_step,
    .init = acrobot_init,
    .configure = acrobot_configure,
    .reset_options = "low,high",
};

/* ---- Pendulum-v1 ---------------------------------------------------------------------- */

#define PD_MAX_SPEED 8
#define PD_MAX_TORQUE 2.0
#define PD_DT 0.05
#define PD_G 10.0 /* Gymnasium's default g */
#define PD_M 1.0
#define PD_L 1.0

typedef struct pendulum_state {
  double th, thdot;
  double sin_th;         /* sin(th), kept from the last observation: the next step needs it */
  double last_u;         /* for rendering */
  double g;              /* gravity (option; Gymnasium's default 10.0) */
  double x_init, y_init; /* reset bounds: theta in [-x, x], thetadot in [-y, y] */
} pendulum_state;

static const float pd_high[3] = {1.0f, 1.0f, (float)PD_MAX_SPEED};
static const float pd_low[3] = {-1.0f, -1.0f, -(float)PD_MAX_SPEED};
static const float pd_act_low[1] = {-(float)PD_MAX_TORQUE}, pd_act_high[1] = {(float)PD_MAX_TORQUE};

/* ((x + np.pi) % (2 * np.pi)) - np.pi */
static inline double angle_normalize(double x) { return env__np_mod(x + PI, 2 * PI) - PI; }

/* high = [pi, 1]; uniform(low=-high, high=high) */
static inline void pendulum_reset_(pendulum_state *s, shoal_rng *rng, float *obs) {
  s->th = env__rng_range(rng, -s->x_init, s->x_init);
  s->thdot = env__rng_range(rng, -s->y_init, s->y_init);
  s->last_u = 0.0;
  s->sin_th = sin(s->th);
  obs[0] = (float)cos(s->th);
  obs[1] = (float)s->sin_th;
  obs[2] = (float)s->thdot;
}

static inline void pendulum_step_(pendulum_state *s, shoal_rng *rng, const float *action,
                                  float *obs, double *reward, int *term) {
  (void)rng;
  double th = s->th, thdot = s->thdot;
  /* np.clip(u, -2.0, 2.0)[0] stays float32; later products with Python floats are float64 */
  float u32 = action[0] < -(float)PD_MAX_TORQUE ? -(float)PD_MAX_TORQUE : action[0];
  u32 = u32 > (float)PD_MAX_TORQUE ? (float)PD_MAX_TORQUE : u32;
  double u = (double)u32;
  s->last_u = u;
  double costs = env__sq(angle_normalize(th)) + 0.1 * env__sq(thdot) + 0.001 * env__sq(u);
  double newthdot =
      thdot + (3 * s->g / (2 * PD_L) * s->sin_th + 3.0 / (PD_M * (PD_L * PD_L)) * u) * PD_DT;
  newthdot = env__clip(newthdot, -PD_MAX_SPEED, PD_MAX_SPEED);
  double newth = th + newthdot * PD_DT;
  s->th = newth;
  s->thdot = newthdot;
  s->sin_th = sin(newth);
  *reward = -costs;
  *term = 0; /* Pendulum never terminates; the 200-step limit truncates */
  obs[0] = (float)cos(newth);
  obs[1] = (float)s->sin_th;
  obs[2] = (float)newthdot;
}

static void pendulum_reset(void *st, shoal_rng *rng, void *obs) { pendulum_reset_(st, rng, obs); }
static void pendulum_step(void *st, shoal_rng *rng, const void *a, void *obs, double *r, int *t) {
  pendulum_step_(st, rng, a, obs, r, t);
}
ENV__DEFINE_VEC_STEP(pendulum_vec_step, pendulum_state, pendulum_step_, pendulum_reset_, float, 3,
                     float, 1)

static void pendulum_init(void *st) {
  pendulum_state *s = st;
  s->g = PD_G;
  s->x_init = PI;  /* DEFAULT_X */
  s->y_init = 1.0; /* DEFAULT_Y */
}
static int pendulum_configure(void *st, const char *key, double v, shoal_error *err) {
  pendulum_state *s = st;
  if (!key) return 0;
  if (strcmp(key, "g") == 0) {
    s->g = v;
    return 0;
  }
  if (strcmp(key, "x_init") == 0) {
    s->x_init = v;
    return 0;
  }
  if (strcmp(key, "y_init") == 0) {
    s->y_init = v;
    return 0;
  }
  return shoal_error_set(err, SHOAL_EINVAL, "unknown option '%s' (takes g, x_init, y_init)", key);
}

static int pendulum_get(const void *st, double *out, int cap) {
  const pendulum_state *s = st;
  if (cap > 0) out[0] = s->th;
  if (cap > 1) out[1] = s->thdot;
  return 2;
}
static int pendulum_set(void *st, const double *in, int n) {
  if (n != 2) return SHOAL_ESHAPE;
  pendulum_state *s = st;
  s->th = in[0];
  s->thdot = in[1];
  s->sin_th = sin(in[0]);
  return 0;
}

static void pendulum_render(const void *st, uint8_t *rgb) {
  const pendulum_state *s = st;
  env__canvas c = {rgb, 500, 500};
  static const uint8_t rod[3] = {204, 77, 77}, black[3] = {0, 0, 0}, arrow[3] = {60, 60, 60};
  env__fill(&c, 255, 255, 255);
  double scale = 500 / (2.2 * 2), off = 250, len = 1 * scale, width = 0.2 * scale;
  /* The rod points up at theta = 0 (y flipped): end = off + len * (-sin th, cos th). */
  double ex = off - len * sin(s->th), ey = 500 - (off + len * cos(s->th));
  env__line(&c, off, 500 - off, ex, ey, width, rod);
  env__circle(&c, off, 500 - off, width / 2, rod);
  env__circle(&c, ex, ey, width / 2, rod);
  /* Gymnasium shows the last torque as a curved arrow scaled by |u|; a short arc here. */
  if (s->last_u != 0.0) {
    double r = scale * fabs(s->last_u) / 4, sgn = s->last_u > 0 ? 1 : -1;
    double px = off + r, py = 500 - off;
    for (int k = 1; k <= 12; k++) {
      double a = sgn * k * (PI / 12);
      double x = off + r * cos(a), y = 500 - (off + r * sin(a));
      env__line(&c, px, py, x, y, 3.0, arrow);
      px = x;
      py = y;
    }
  }
  env__circle(&c, off, 500 - off, 0.05 * scale, black);
}

const env_type env__pendulum = {
    .spec = {.id = "Pendulum-v1",
             .obs = {ENV_FLOAT32, 1, {3}, 3, 0, pd_low, pd_high},
             .act = {ENV_FLOAT32, 1, {1}, 1, 0, pd_act_low, pd_act_high},
             .max_episode_steps = 200,
             .reward_threshold = NAN,
             .render_w = 500,
             .render_h = 500},
    .state_size = sizeof(pendulum_state),
    .reset = pendulum_reset,
    .step = pendulum_step,
    .render = pendulum_render,
    .get_state = pendulum_get,
    .set_state = pendulum_set,
    .vec_step = pendulum_vec_step,
    .init = pendulum_init,
    .configure = pendulum_configure,
    .reset_options = "x_init,y_init",
};
