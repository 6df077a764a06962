#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference trajectories for shoal's classic-control envs (tests/test_envs_classic.c).

Gymnasium cannot be installed here, so this re-states the step functions of Gymnasium 1.x
(gymnasium/envs/classic_control/{cartpole,acrobot,pendulum,mountain_car,
continuous_mountain_car}.py) in NumPy float64 with the same types, operand order and
functions as Gymnasium's code: np.float64 scalars unpacked from float64 state arrays,
`x**2` on them (NumPy calls libm pow), np.square, np.cos/np.sin (libm on machines
without AVX-512), math.cos, np.clip, NumPy's `%`, float32 actions and float32 state
storage where Gymnasium stores float32. Run with Debian's python3 (NumPy 1.24, the
version the baseline Gymnasium figures used) and NumPy's AVX-512 loops switched off, so
that np.sin/np.cos are libm's as on an AVX2 machine (with AVX-512, NumPy 1.24 uses Intel
SVML for float64 sin/cos, which differs from libm in the last bit):

    NPY_DISABLE_CPU_FEATURES="AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL" \
      /usr/bin/python3 tests/reference/gym_classic.py > tests/reference/classic_ref.txt

Format: a header line, then per env "env ID EPISODES", per episode "ep N s0 s1 ..."
(start state) and N lines "a reward terminated s0 s1 ... | o0 o1 ..." (action, then the
state and float32 observation after the step). Floats are written with float.hex so
the C test reads them back bit for bit.
"""
import math
import sys

import numpy as np
from numpy import cos, pi, sin

H = float.hex


class CartPole:
    id = "CartPole-v1"
    nact = 2

    def __init__(self):
        self.gravity = 9.8
        self.masscart = 1.0
        self.masspole = 0.1
        self.total_mass = self.masspole + self.masscart
        self.length = 0.5
        self.polemass_length = self.masspole * self.length
        self.force_mag = 10.0
        self.tau = 0.02
        self.theta_threshold_radians = 12 * 2 * math.pi / 360
        self.x_threshold = 2.4

    def reset(self, rng):
        self.state = rng.uniform(low=-0.05, high=0.05, size=(4,))

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(costheta) / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = np.array((x, x_dot, theta, theta_dot), dtype=np.float64)
        terminated = bool(
            x < -self.x_threshold
            or x > self.x_threshold
            or theta < -self.theta_threshold_radians
            or theta > self.theta_threshold_radians
        )
        return np.array(self.state, dtype=np.float32), 1.0, terminated


class MountainCar:
    id = "MountainCar-v0"
    nact = 3

    def reset(self, rng):
        self.state = np.array([rng.uniform(low=-0.6, high=-0.4), 0])

    def step(self, action):
        position, velocity = self.state
        velocity += (action - 1) * 0.001 + math.cos(3 * position) * (-0.0025)
        velocity = np.clip(velocity, -0.07, 0.07)
        position += velocity
        position = np.clip(position, -1.2, 0.6)
        if position == -1.2 and velocity < 0:
            velocity = 0
        terminated = bool(position >= 0.5 and velocity >= 0)
        self.state = (position, velocity)
        return np.array(self.state, dtype=np.float32), -1.0, terminated


class MountainCarContinuous:
    id = "MountainCarContinuous-v0"
    nact = 0
    lo, hi = -1.3, 1.3  # also outside [-1, 1], to exercise clipping

    def reset(self, rng):
        self.state = np.array([rng.uniform(low=-0.6, high=-0.4), 0])

    def step(self, action):
        position = self.state[0]
        velocity = self.state[1]
        force = min(max(action[0], -1.0), 1.0)
        velocity += force * 0.0015 - 0.0025 * math.cos(3 * position)
        if velocity > 0.07:
            velocity = 0.07
        if velocity < -0.07:
            velocity = -0.07
        position += velocity
        if position > 0.6:
            position = 0.6
        if position < -1.2:
            position = -1.2
        if position == -1.2 and velocity < 0:
            velocity = 0
        terminated = bool(position >= 0.45 and velocity >= 0)
        reward = 0
        if terminated:
            reward = 100.0
        reward -= math.pow(action[0], 2) * 0.1
        self.state = np.array([position, velocity], dtype=np.float32)
        return self.state, reward, terminated


class Acrobot:
    id = "Acrobot-v1"
    nact = 3
    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_LENGTH_2 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * pi
    MAX_VEL_2 = 9 * pi
    AVAIL_TORQUE = [-1.0, 0.0, +1]

    def reset(self, rng):
        self.state = rng.uniform(low=-0.1, high=0.1, size=(4,)).astype(np.float32)

    def step(self, a):
        s = self.state
        torque = self.AVAIL_TORQUE[a]
        s_augmented = np.append(s, torque)
        ns = rk4(self._dsdt, s_augmented, [0, self.dt])
        ns[0] = wrap(ns[0], -pi, pi)
        ns[1] = wrap(ns[1], -pi, pi)
        ns[2] = bound(ns[2], -self.MAX_VEL_1, self.MAX_VEL_1)
        ns[3] = bound(ns[3], -self.MAX_VEL_2, self.MAX_VEL_2)
        self.state = ns
        terminated = bool(-cos(ns[0]) - cos(ns[1] + ns[0]) > 1.0)
        reward = -1.0 if not terminated else 0.0
        s = self.state
        ob = np.array([cos(s[0]), sin(s[0]), cos(s[1]), sin(s[1]), s[2], s[3]], dtype=np.float32)
        return ob, reward, terminated

    def _dsdt(self, s_augmented):
        m1 = self.LINK_MASS_1
        m2 = self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1 = self.LINK_COM_POS_1
        lc2 = self.LINK_COM_POS_2
        I1 = self.LINK_MOI
        I2 = self.LINK_MOI
        g = 9.8
        a = s_augmented[-1]
        s = s_augmented[:-1]
        theta1 = s[0]
        theta2 = s[1]
        dtheta1 = s[2]
        dtheta2 = s[3]
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
        phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2)
            + phi2
        )
        ddtheta2 = (
            a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin(theta2) - phi2
        ) / (m2 * lc2**2 + I2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return dtheta1, dtheta2, ddtheta1, ddtheta2, 0.0


def wrap(x, m, M):
    diff = M - m
    while x > M:
        x = x - diff
    while x < m:
        x = x + diff
    return x


def bound(x, m, M):
    return min(max(x, m), M)


def rk4(derivs, y0, t):
    yout = np.zeros((len(t), len(y0)), np.float64)
    yout[0] = y0
    for i in np.arange(len(t) - 1):
        this = t[i]
        dt = t[i + 1] - this
        dt2 = dt / 2.0
        y0 = yout[i]
        k1 = np.asarray(derivs(y0))
        k2 = np.asarray(derivs(y0 + dt2 * k1))
        k3 = np.asarray(derivs(y0 + dt2 * k2))
        k4 = np.asarray(derivs(y0 + dt * k3))
        yout[i + 1] = y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return yout[-1][:4]


def angle_normalize(x):
    return ((x + np.pi) % (2 * np.pi)) - np.pi


class Pendulum:
    id = "Pendulum-v1"
    nact = 0
    lo, hi = -2.5, 2.5  # also outside [-2, 2], to exercise clipping

    def reset(self, rng):
        high = np.array([np.pi, 1.0])
        self.state = rng.uniform(low=-high, high=high)

    def step(self, u):
        th, thdot = self.state
        g, m, l, dt = 10.0, 1.0, 1.0, 0.05
        u = np.clip(u, -2.0, 2.0)[0]
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        newthdot = thdot + (3 * g / (2 * l) * np.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = np.clip(newthdot, -8, 8)
        newth = th + newthdot * dt
        self.state = np.array([newth, newthdot])
        theta, thetadot = self.state
        ob = np.array([np.cos(theta), np.sin(theta), thetadot], dtype=np.float32)
        return ob, -costs, False


def main():
    x = np.linspace(-3, 3, 1001)
    if any(np.sin(v) != math.sin(v) or np.cos(v) != math.cos(v) for v in x):
        sys.exit("np.sin/np.cos differ from libm here: set NPY_DISABLE_CPU_FEATURES (see top)")
    out = sys.stdout
    out.write("shoal-envs-classic-ref 1 numpy %s\n" % np.__version__)
    rng = np.random.default_rng(20261129)
    plan = [(CartPole(), 3, 500), (MountainCar(), 2, 200), (MountainCarContinuous(), 2, 400),
            (Acrobot(), 2, 300), (Pendulum(), 2, 200)]
    for env, episodes, steps in plan:
        out.write("env %s %d\n" % (env.id, episodes))
        for _ in range(episodes):
            env.reset(rng)
            start = [float(v) for v in np.asarray(env.state, dtype=np.float64)]
            lines = []
            # A biased random policy keeps some episodes long (CartPole, MountainCar).
            for t in range(steps):
                if env.nact:
                    if env.id == "MountainCar-v0":
                        v = float(env.state[1])
                        a = 2 if v >= 0 else 0
                        if rng.random() < 0.2:
                            a = int(rng.integers(env.nact))
                    elif env.id == "CartPole-v1":
                        th, thd = float(env.state[2]), float(env.state[3])
                        a = 1 if th + 0.5 * thd > 0 else 0
                        if rng.random() < 0.25:
                            a = int(rng.integers(env.nact))
                    else:
                        a = int(rng.integers(env.nact))
                    act = a
                    astr = str(a)
                else:
                    v = np.float32(rng.uniform(env.lo, env.hi))
                    if env.id == "MountainCarContinuous-v0" and rng.random() < 0.7:
                        v = np.float32(1.0 if float(env.state[1]) >= 0 else -1.0)
                    act = np.array([v], dtype=np.float32)
                    astr = H(float(v))
                ob, r, term = env.step(act)
                st = [float(x) for x in np.asarray(env.state, dtype=np.float64)]
                lines.append("%s %s %d %s | %s\n" % (astr, H(float(r)), int(term),
                             " ".join(H(x) for x in st), " ".join(H(float(o)) for o in ob)))
                if term:
                    break
            out.write("ep %d %s\n" % (len(lines), " ".join(H(x) for x in start)))
            out.writelines(lines)
    out.write("end\n")


if __name__ == "__main__":
    main()
