# SPDX-License-Identifier: Apache-2.0
"""shoal's Python vector env (python/shoal over libshoal.so) against the C vector env.

Run by ctest (python/CMakeLists.txt) with SHOAL_LIB (the library) and SHOAL_REF
(tests/python_ref.c, which steps env_vec from the part libraries directly). States set
through set_state are stepped against Gymnasium's classic-control equations written out
here (gym_*_step), and spaces against the values of Gymnasium's sources."""

import os
import subprocess

import numpy as np
import pytest

import shoal

REF = os.environ.get("SHOAL_REF")
SANITIZED = os.environ.get("SHOAL_SANITIZED") == "1"


def c_trajectory(tmp_path, env_id, B, seed, actions, options=None):
    """Steps env_vec in C with the same actions; returns the raw records."""
    afile, ofile = tmp_path / "actions.bin", tmp_path / "out.bin"
    afile.write_bytes(np.ascontiguousarray(actions).tobytes())
    cmd = [REF, "traj", env_id, str(B), str(seed), str(len(actions)), str(afile), str(ofile)]
    if options:
        cmd.append(options)
    subprocess.run(cmd, check=True)
    return ofile.read_bytes()


def random_actions(env, T, rng):
    sp = env.single_action_space
    if isinstance(sp, shoal.Discrete):
        return rng.integers(0, sp.n, (T, env.num_envs), dtype=np.int32)
    # Beyond the bounds too: both sides must clip them the same way.
    return rng.uniform(1.5 * sp.low, 1.5 * sp.high, (T, env.num_envs) + sp.shape).astype(np.float32)


@pytest.mark.skipif(not REF, reason="SHOAL_REF (tests/python_ref) not given")
@pytest.mark.parametrize("env_id,B,T,seed,options", [
    ("CartPole-v1", 8, 300, 3, None),
    ("Acrobot-v1", 3, 520, 9, None),
    ("Pendulum-v1", 3, 230, 5, None),
    ("MinAtar/Breakout-v1", 4, 400, 11, None),
    ("MinAtar/SpaceInvaders-v0", 2, 200, 1, "sticky_action_prob=0.3"),
])
def test_trajectories_equal_c(tmp_path, env_id, B, T, seed, options):
    env = shoal.make_vec(env_id, B, options=options)
    acts = random_actions(env, T, np.random.default_rng(seed))
    ref = c_trajectory(tmp_path, env_id, B, seed, acts, options)

    obs, info = env.reset(seed=seed)
    assert info == {}
    recs = [obs.tobytes()]
    ended = 0
    for t in range(T):
        obs, rew, term, trunc, info = env.step(acts[t])
        assert obs.shape == (B,) + env.single_observation_space.shape
        assert obs.dtype == env.single_observation_space.dtype
        assert rew.dtype == np.float32 and term.dtype == np.bool_ and trunc.dtype == np.bool_
        done = term | trunc
        if done.any():
            np.testing.assert_array_equal(info["_final_obs"], done)
            assert info["final_obs"].shape == obs.shape
            ended += int(done.sum())
        else:
            assert "final_obs" not in info
        recs += [obs.tobytes(), rew.tobytes(), term.tobytes(), trunc.tobytes(),
                 env._final_obs.tobytes()]
    # Auto-reset and final observations were exercised, not just running episodes.
    assert ended > 0, f"{env_id}: no episode ended in {T} steps"
    assert b"".join(recs) == ref
    st = env.stats()
    assert st["steps"] == B * T and st["episodes"] == ended
    eps = env.episodes()
    assert len(eps) + st["dropped"] == ended and np.all(eps["length"] > 0)


def test_cartpole_follows_gymnasium_rules():
    """Independent of C: CartPole-v1's start states, rewards and termination rule."""
    env = shoal.make_vec("CartPole-v1", 64)
    obs, _ = env.reset(seed=0)
    assert np.all(np.abs(obs) <= 0.05)
    rng = np.random.default_rng(0)
    theta = 12 * 2 * np.pi / 360
    for _ in range(200):
        obs, rew, term, trunc, info = env.step(rng.integers(0, 2, 64, dtype=np.int32))
        assert np.all(rew == 1.0)
        if term.any():
            f = info["final_obs"][term]
            assert np.all((np.abs(f[:, 0]) > 2.4) | (np.abs(f[:, 2]) > theta))
            assert np.all(np.abs(obs[term]) <= 0.05)  # the new episode's first observation
        live = ~(term | trunc)
        assert np.all(np.abs(obs[live, 0]) <= 2.4) and np.all(np.abs(obs[live, 2]) <= theta)


def test_spaces():
    env = shoal.make_vec("CartPole-v1", 5)
    o, a = env.single_observation_space, env.single_action_space
    assert isinstance(o, shoal.Box) and o.shape == (4,) and o.dtype == np.float32
    np.testing.assert_allclose(o.high[[0, 2]], [4.8, 2 * 12 * 2 * np.pi / 360], rtol=1e-6)
    assert isinstance(a, shoal.Discrete) and a.n == 2 and a.dtype == np.int64 and a.start == 0
    assert env.observation_space.shape == (5, 4)
    assert isinstance(env.action_space, shoal.MultiDiscrete) and env.action_space.shape == (5,)
    assert env.action_space.contains(env.action_space.sample(np.random.default_rng(0)))
    assert env.max_episode_steps == 500 and env.reward_threshold == 475.0

    m = shoal.make_vec("MinAtar/Breakout-v1", 2)
    mo = m.single_observation_space
    assert mo.shape == (4, 10, 10) and mo.dtype == np.uint8
    assert mo.low.min() == 0 and mo.high.max() == 1
    assert m.single_action_space.n == 3
    assert shoal.make_vec("MinAtar/Breakout-v0", 1).single_action_space.n == 6

    p = shoal.make_vec("Pendulum-v1", 2)
    pa = p.single_action_space
    assert isinstance(pa, shoal.Box) and pa.shape == (1,) and pa.dtype == np.float32
    assert pa.low[0] == -2.0 and pa.high[0] == 2.0
    np.testing.assert_array_equal(p.single_observation_space.high, [1, 1, 8])
    assert p.max_episode_steps == 200
    assert shoal.make_vec("Pendulum-v1", 1, max_episode_steps=7).max_episode_steps == 7
    assert "MinAtar/Seaquest-v1" in shoal.list_envs()


INF = np.inf
# The spaces of gymnasium/envs/classic_control/*.py (Gymnasium 1.x; CartPole's velocities
# np.inf as Gymnasium 1.4.0 reports them, where gym and Gymnasium 0.x had float32 max),
# written as there:
# (observation low, high; action n, or (low, high) of a Box of shape (1,)).
GYM_SPACES = {
    "CartPole-v1": (-np.array([2.4 * 2, INF, 12 * 2 * np.pi / 360 * 2, INF], np.float32),
                    np.array([2.4 * 2, INF, 12 * 2 * np.pi / 360 * 2, INF], np.float32), 2),
    "MountainCar-v0": (np.array([-1.2, -0.07], np.float32), np.array([0.6, 0.07], np.float32), 3),
    "MountainCarContinuous-v0": (np.array([-1.2, -0.07], np.float32),
                                 np.array([0.6, 0.07], np.float32), (-1.0, 1.0)),
    "Acrobot-v1": (-np.array([1.0, 1.0, 1.0, 1.0, 4 * np.pi, 9 * np.pi], np.float32),
                   np.array([1.0, 1.0, 1.0, 1.0, 4 * np.pi, 9 * np.pi], np.float32), 3),
    "Pendulum-v1": (-np.array([1.0, 1.0, 8], np.float32), np.array([1.0, 1.0, 8], np.float32),
                    (-2.0, 2.0)),
}
# RL Zoo's CartPoleNoVel-v1 masks CartPole-v1's observations and keeps its spaces.
GYM_SPACES["CartPoleNoVel-v1"] = GYM_SPACES["CartPole-v1"]


@pytest.mark.parametrize("env_id", list(GYM_SPACES))
def test_spaces_are_gymnasiums(env_id):
    low, high, act = GYM_SPACES[env_id]
    env = shoal.make_vec(env_id, 3)
    o = env.single_observation_space
    assert o.dtype == np.float32 and o.shape == low.shape
    assert o.low.dtype == np.float32 and o.high.dtype == np.float32
    np.testing.assert_array_equal(o.low, low)  # bit for bit, infinities where Gymnasium's
    np.testing.assert_array_equal(o.high, high)
    np.testing.assert_array_equal(o.bounded_below, np.isfinite(low))
    np.testing.assert_array_equal(o.bounded_above, np.isfinite(high))
    assert o.is_bounded("both") == bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
    a = env.single_action_space
    if isinstance(act, int):
        assert isinstance(a, shoal.Discrete) and a.n == act and a.start == 0
        assert a.dtype == np.int64 and a.shape == ()
        assert isinstance(env.action_space, shoal.MultiDiscrete)
        assert env.action_space.dtype == np.int64
        np.testing.assert_array_equal(env.action_space.nvec, [act] * 3)
    else:
        assert isinstance(a, shoal.Box) and a.shape == (1,) and a.dtype == np.float32
        np.testing.assert_array_equal(a.low, np.array([act[0]], np.float32))
        np.testing.assert_array_equal(a.high, np.array([act[1]], np.float32))
    assert env.observation_space.shape == (3,) + low.shape
    np.testing.assert_array_equal(env.observation_space.high[2], high)
    # A sample of the batched action space (int64 for discrete, as Gymnasium's) steps.
    env.reset(seed=0)
    acts = env.action_space.sample(np.random.default_rng(1))
    assert env.action_space.contains(acts)
    env.step(acts)
    assert o.contains(o.sample(np.random.default_rng(0)))
    if env_id.startswith("CartPole"):
        assert not o.is_bounded("both")
        assert repr(o) == f"Box({low}, {high}, (4,), float32)"  # numpy's own printing
        assert repr(a) == "Discrete(2)"
    if env_id == "Pendulum-v1":
        assert repr(a) == "Box(-2.0, 2.0, (1,), float32)"


def test_seeding():
    a = shoal.make_vec("CartPole-v1", 3)
    b = shoal.make_vec("CartPole-v1", 1)
    oa, _ = a.reset(seed=5)
    ob, _ = b.reset(seed=6)
    np.testing.assert_array_equal(oa[1], ob[0])  # copy i is seeded with seed + i
    # seed=None continues a generator started by the last integer seed.
    x = shoal.make_vec("CartPole-v1", 2, seed=1)
    y = shoal.make_vec("CartPole-v1", 2, seed=1)
    seq_x = [x.reset()[0].copy() for _ in range(3)]
    seq_y = [y.reset()[0].copy() for _ in range(3)]
    np.testing.assert_array_equal(seq_x, seq_y)
    assert not np.array_equal(seq_x[0], seq_x[1])
    with pytest.raises(ValueError):
        x.reset(seed=-1)


def test_seed_per_copy():
    """reset(seed=[...]) as Gymnasium's vector envs: one seed per copy, None leaves a
    copy's RNG going on; an int n still seeds copy i with n + i."""
    def first_obs(seeds_per_reset, B):
        e = shoal.make_vec("CartPole-v1", B)
        return [e.reset(seed=s)[0].copy() for s in seeds_per_reset]

    (many,) = first_obs([[5, 9, 7]], 3)
    for i, s in enumerate([5, 9, 7]):
        np.testing.assert_array_equal(many[i], first_obs([s], 1)[0][0])
    assert not np.array_equal(many[0], many[1])
    # An int seed and the list it stands for agree.
    np.testing.assert_array_equal(first_obs([5], 3)[0], first_obs([[5, 6, 7]], 3)[0])
    # None: copy 0 goes on from seed 10's RNG (its second start state), copy 1 reseeds.
    _, again = first_obs([[10, 11], [None, 3]], 2)
    np.testing.assert_array_equal(again[0], first_obs([10, [None]], 1)[1][0])
    np.testing.assert_array_equal(again[1], first_obs([3], 1)[0][0])
    assert not np.array_equal(again[0], first_obs([10], 1)[0][0])
    # Numpy integers and arrays of seeds are seeds too; the largest seed is 2**64 - 1.
    np.testing.assert_array_equal(first_obs([np.array([5, 9, 7], np.uint64)], 3)[0], many)
    e = shoal.make_vec("CartPole-v1", 2)
    e.reset(seed=[2**64 - 1, np.int64(4)])
    with pytest.raises(ValueError, match="3 seeds for 2 copies"):
        e.reset(seed=[1, 2, 3])
    with pytest.raises(TypeError):
        e.reset(seed=[1, 2.5])
    with pytest.raises(TypeError):
        e.reset(seed="7")
    with pytest.raises(ValueError):
        e.reset(seed=[1, 2**64])


def test_unseeded_copies_draw_fresh_entropy():
    """A None entry for a copy never seeded seeds it from OS entropy (as Gymnasium), so it
    is no twin of a seeded copy nor of the same copy in another env; a copy seeded before
    goes on from its own generator."""
    def starts(seeds_per_reset):
        e = shoal.make_vec("CartPole-v1", 4)
        return [e.reset(seed=s)[0].copy() for s in seeds_per_reset]

    a = starts([[1, None, None, 7], [None] * 4])
    b = starts([[1, None, None, 7], [None] * 4])
    for first, later in (a, b):
        assert len({row.tobytes() for row in first}) == 4
        assert len({row.tobytes() for row in later}) == 4
    # Seeded copies are reproducible, unseeded ones differ from env to env.
    np.testing.assert_array_equal(a[0][0], b[0][0])
    np.testing.assert_array_equal(a[0][3], b[0][3])
    np.testing.assert_array_equal(a[1][0], b[1][0])
    assert not np.array_equal(a[0][1], b[0][1])
    assert not np.array_equal(a[0][2], b[0][2])
    # Copy 0 went on from seed 1's generator: its second start as a lone env's.
    lone = shoal.make_vec("CartPole-v1", 1)
    lone.reset(seed=1)
    np.testing.assert_array_equal(a[1][0], lone.reset(seed=[None])[0][0])


# ---- Physical state (Gymnasium's env.unwrapped.state) -------------------------------------

def gym_cartpole_step(state, action):
    """gymnasium/envs/classic_control/cartpole.py CartPoleEnv.step, in float64."""
    import math
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    x, x_dot, theta, theta_dot = (float(v) for v in state)
    force = force_mag if action == 1 else -force_mag
    costheta, sintheta = math.cos(theta), math.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (
        length * (4.0 / 3.0 - masspole * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x = x + tau * x_dot
    x_dot = x_dot + tau * xacc
    theta = theta + tau * theta_dot
    theta_dot = theta_dot + tau * thetaacc
    th = 12 * 2 * math.pi / 360
    terminated = bool(x < -2.4 or x > 2.4 or theta < -th or theta > th)
    return np.array([x, x_dot, theta, theta_dot]), 1.0, terminated


def gym_pendulum_step(state, u, g=10.0):
    """gymnasium/envs/classic_control/pendulum.py PendulumEnv.step, in float64."""
    th, thdot = (float(v) for v in state)
    max_speed, max_torque, dt, m, length = 8, 2.0, 0.05, 1.0, 1.0
    u = np.clip(np.float32(u), -max_torque, max_torque)
    norm = ((th + np.pi) % (2 * np.pi)) - np.pi
    costs = norm**2 + 0.1 * thdot**2 + 0.001 * (float(u) ** 2)
    newthdot = thdot + (3 * g / (2 * length) * np.sin(th) + 3.0 / (m * length**2) * float(u)) * dt
    newthdot = np.clip(newthdot, -max_speed, max_speed)
    newth = th + newthdot * dt
    obs = np.array([np.cos(newth), np.sin(newth), newthdot], np.float32)
    return np.array([newth, newthdot]), obs, -costs


def gym_mountaincar_step(state, action):
    """gymnasium/envs/classic_control/mountain_car.py MountainCarEnv.step."""
    import math
    position, velocity = (float(v) for v in state)
    velocity += (action - 1) * 0.001 + math.cos(3 * position) * (-0.0025)
    velocity = float(np.clip(velocity, -0.07, 0.07))
    position += velocity
    position = float(np.clip(position, -1.2, 0.6))
    if position == -1.2 and velocity < 0:
        velocity = 0
    terminated = bool(position >= 0.5 and velocity >= 0)
    return np.array([position, velocity]), -1.0, terminated


def gym_mountaincar_continuous_step(state, action):
    """continuous_mountain_car.py Continuous_MountainCarEnv.step (NumPy 1.x: the float32
    action times a Python float is float64; the new state is stored as float32)."""
    import math
    position, velocity = (float(v) for v in state)
    a = float(np.float32(action))
    force = min(max(a, -1.0), 1.0)
    velocity += force * 0.0015 - 0.0025 * math.cos(3 * position)
    velocity = min(max(velocity, -0.07), 0.07)
    position += velocity
    position = min(max(position, -1.2), 0.6)
    if position == -1.2 and velocity < 0:
        velocity = 0
    terminated = bool(position >= 0.45 and velocity >= 0)
    reward = (100.0 if terminated else 0) - math.pow(a, 2) * 0.1
    return np.array([position, velocity], np.float32).astype(np.float64), reward, terminated


def gym_acrobot_step(state, action):
    """acrobot.py AcrobotEnv.step ("book" dynamics): _dsdt, one rk4 step over dt = 0.2,
    wrap and bound, with libm's sin/cos (math) as shoal computes them."""
    from math import cos, pi, sin
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    I1 = I2 = 1.0
    g = 9.8
    torque = [-1.0, 0.0, 1.0][action]

    def dsdt(y):
        theta1, theta2, dtheta1, dtheta2, a = y
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
        phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2) + phi2)
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin(theta2) - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return np.array([dtheta1, dtheta2, ddtheta1, ddtheta2, 0.0])

    y0 = np.append(np.asarray(state, np.float64), torque)
    dt = 0.2
    dt2 = dt / 2.0
    k1 = dsdt(y0)
    k2 = dsdt(y0 + dt2 * k1)
    k3 = dsdt(y0 + dt2 * k2)
    k4 = dsdt(y0 + dt * k3)
    ns = (y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4))[:4]
    for j in range(2):
        while ns[j] > pi:
            ns[j] = ns[j] - (pi - -pi)
        while ns[j] < -pi:
            ns[j] = ns[j] + (pi - -pi)
    ns[2] = min(max(ns[2], -4 * pi), 4 * pi)
    ns[3] = min(max(ns[3], -9 * pi), 9 * pi)
    terminated = bool(-cos(ns[0]) - cos(ns[1] + ns[0]) > 1.0)
    obs = np.array([cos(ns[0]), sin(ns[0]), cos(ns[1]), sin(ns[1]), ns[2], ns[3]], np.float32)
    return ns, obs, (0.0 if terminated else -1.0), terminated


def test_acrobot_and_mountaincar_continuous_state_follow_gymnasium():
    env = shoal.make_vec("Acrobot-v1", 2)
    env.reset(seed=0)
    state = np.array([0.4, -1.1, 2.0, -3.5])
    env.set_state(1, state)
    for a in [2, 0, 0, 1, 2, 2, 0]:
        state, o, rew, term = gym_acrobot_step(state, a)
        obs, r, te, _, _ = env.step(np.array([1, a], np.int32))
        np.testing.assert_array_equal(env.get_state(1), state)
        np.testing.assert_array_equal(obs[1], o)
        assert r[1] == rew and te[1] == term
    env.set_state(0, [3.0, 0.1, 0.0, 0.0])  # nearly upright: the tip is above the bar
    _, o, rew, term = gym_acrobot_step([3.0, 0.1, 0.0, 0.0], 1)
    _, r, te, _, info = env.step(np.array([1, 1], np.int32))
    assert term and te[0] and r[0] == 0.0
    np.testing.assert_array_equal(info["final_obs"][0], o)

    mc = shoal.make_vec("MountainCarContinuous-v0", 1)
    mc.reset(seed=0)
    state = np.array([0.3, 0.05])
    mc.set_state(0, state)
    for a in [0.5, 1.7, -0.2, 1.0, 1.0, 1.0]:
        state, rew, term = gym_mountaincar_continuous_step(state, a)
        obs, r, te, _, info = mc.step(np.array([[a]], np.float32))
        assert r[0] == np.float32(rew) and te[0] == term
        if term:
            np.testing.assert_array_equal(info["final_obs"][0], np.float32(state))
            break
        np.testing.assert_array_equal(mc.get_state(0), state)
        np.testing.assert_array_equal(obs[0], np.float32(state))
    assert term  # the goal, with its reward of 100


def test_cartpole_state_set_then_step_follows_gymnasium():
    env = shoal.make_vec("CartPole-v1", 3)
    twin = shoal.make_vec("CartPole-v1", 3)
    obs, _ = env.reset(seed=4)
    twin.reset(seed=4)
    start = [env.get_state(i) for i in range(3)]
    assert all(s.dtype == np.float64 and s.shape == (4,) for s in start)
    np.testing.assert_array_equal(np.float32(start[0]), obs[0])  # the observation is the state
    state = np.array([0.1, -0.5, 0.05, 0.3])
    env.set_state(1, state)
    np.testing.assert_array_equal(env.get_state(1), state)
    for t in range(5):
        acts = np.array([0, t % 2, 1], np.int32)
        state, rew, term = gym_cartpole_step(state, acts[1])
        obs, r, te, tr, _ = env.step(acts)
        tobs, *_ = twin.step(acts)
        np.testing.assert_array_equal(env.get_state(1), state)  # bit for bit
        np.testing.assert_array_equal(obs[1], state.astype(np.float32))
        assert r[1] == rew and te[1] == term
        np.testing.assert_array_equal(obs[[0, 2]], tobs[[0, 2]])  # other copies untouched
    # Past the edge: the step terminates, final_obs is the state, obs the next start.
    edge = np.array([2.395, 1.0, 0.0, 0.0])
    env.set_state(2, edge)
    nxt, _, term = gym_cartpole_step(edge, 1)
    obs, r, te, tr, info = env.step(np.array([1, 1, 1], np.int32))
    assert term and te[2] and info["_final_obs"][2]
    np.testing.assert_array_equal(info["final_obs"][2], nxt.astype(np.float32))
    assert np.all(np.abs(obs[2]) <= 0.05)
    np.testing.assert_array_equal(np.float32(env.get_state(2)), obs[2])


def test_pendulum_and_mountaincar_state_follow_gymnasium():
    env = shoal.make_vec("Pendulum-v1", 2)
    env.reset(seed=0)
    state = np.array([2.5, -3.0])
    env.set_state(0, state)
    for u in [0.7, -2.5, 1.9, 3.0]:
        state, o, rew = gym_pendulum_step(state, u)
        obs, r, *_ = env.step(np.array([[u], [0.0]], np.float32))
        np.testing.assert_array_equal(env.get_state(0), state)
        np.testing.assert_array_equal(obs[0], o)
        assert r[0] == np.float32(rew)
    g = shoal.make_vec("Pendulum-v1", 1, options={"g": 9.81})
    g.reset(seed=0)
    g.set_state(0, [0.3, 0.1])
    g.step(np.array([[0.5]], np.float32))
    np.testing.assert_array_equal(g.get_state(0), gym_pendulum_step([0.3, 0.1], 0.5, g=9.81)[0])

    mc = shoal.make_vec("MountainCar-v0", 2)
    mc.reset(seed=0)
    state = np.array([0.45, 0.05])
    mc.set_state(1, state)
    for a in [2, 2, 1, 2]:
        state, rew, term = gym_mountaincar_step(state, a)
        obs, r, te, _, info = mc.step(np.array([0, a], np.int32))
        if te[1]:
            np.testing.assert_array_equal(info["final_obs"][1], state.astype(np.float32))
            break
        np.testing.assert_array_equal(mc.get_state(1), state)
        assert r[1] == rew
    assert term and te[1]  # the goal was reached from the state set


def test_state_of_every_kind():
    """Acrobot and MountainCarContinuous: a state copied from one copy to another makes
    them step alike; MinAtar has no float state; bad uses raise."""
    for env_id, n in [("Acrobot-v1", 4), ("MountainCarContinuous-v0", 2), ("CartPoleNoVel-v1", 4)]:
        env = shoal.make_vec(env_id, 2)
        env.reset(seed=[1, 2])
        assert env.get_state(0).shape == (n,)
        assert not np.array_equal(env.get_state(0), env.get_state(1))
        env.set_attr("state", [env.get_state(0)] * 2)
        (s0, s1) = env.get_attr("state")
        np.testing.assert_array_equal(s0, s1)
        for _ in range(7):
            obs, r, *_ = env.step(np.zeros((2,) + env.single_action_space.shape,
                                           env._act_dtype))
            np.testing.assert_array_equal(obs[0], obs[1])
            assert r[0] == r[1]
    ac = shoal.make_vec("Acrobot-v1", 1)
    ac.reset(seed=0)
    ac.set_state(0, [np.pi, 0.0, 0.0, 0.0])  # link 1 straight up: the tip is above the bar
    _, _, te, _, _ = ac.step(np.array([1], np.int32))
    assert te[0]

    m = shoal.make_vec("MinAtar/Breakout-v1", 2)
    m.reset(seed=0)
    with pytest.raises(shoal.ShoalNotSupportedError, match="no float state"):
        m.get_state(0)
    with pytest.raises(NotImplementedError):
        m.set_state(0, [1.0])
    cp = shoal.make_vec("CartPole-v1", 2)
    with pytest.raises(shoal.ShoalStateError):
        cp.set_state(0, [0, 0, 0, 0])  # before reset
    cp.reset(seed=0)
    before = cp.get_state(0)
    with pytest.raises(shoal.ShoalValueError, match="takes 4 values, got 3"):
        cp.set_state(0, [0, 0, 0])
    with pytest.raises(shoal.ShoalValueError, match="not finite"):
        cp.set_state(0, [0, np.nan, 0, 0])
    np.testing.assert_array_equal(cp.get_state(0), before)  # refused: unchanged
    with pytest.raises(IndexError):
        cp.get_state(2)
    with pytest.raises(IndexError):
        cp.set_state(-1, before)


# ---- Reset options (Gymnasium's reset(options=...)) ---------------------------------------

@pytest.mark.parametrize("env_id,options,check", [
    ("CartPole-v1", {"low": -0.2, "high": 0.2},
     lambda s: np.all(np.abs(s) <= 0.2) and np.abs(s).max() > 0.1),
    ("CartPoleNoVel-v1", {"low": 0.1, "high": 0.3}, lambda s: np.all((s >= 0.1) & (s <= 0.3))),
    ("MountainCar-v0", {"low": -0.3, "high": -0.25},
     lambda s: np.all((s[:, 0] >= -0.3) & (s[:, 0] <= -0.25) & (s[:, 1] == 0))),
    ("MountainCarContinuous-v0", {"low": 0.1, "high": 0.2},
     lambda s: np.all((s[:, 0] >= 0.1) & (s[:, 0] <= 0.2))),
    ("Acrobot-v1", {"low": -0.01, "high": 0.01},
     lambda s: np.all(np.abs(s) <= 0.01) and np.abs(s).max() > 0.005),
    ("Pendulum-v1", {"x_init": 0.5, "y_init": 0.25},
     lambda s: np.all(np.abs(s[:, 0]) <= 0.5) and np.all(np.abs(s[:, 1]) <= 0.25)
     and np.abs(s[:, 0]).max() > 0.3),
])
def test_reset_options(env_id, options, check):
    B = 64
    env = shoal.make_vec(env_id, B)
    obs, _ = env.reset(seed=3, options=options)
    states = np.array(env.get_attr("state"))
    assert check(states), states
    # The same start states as an env made with those settings, from the same draws.
    made = shoal.make_vec(env_id, B, options=options)
    np.testing.assert_array_equal(obs, made.reset(seed=3)[0])
    np.testing.assert_array_equal(states, np.array(made.get_attr("state")))
    # For that reset only: the next one (and every auto-reset) uses the defaults again.
    obs, _ = env.reset(seed=3)
    np.testing.assert_array_equal(obs, shoal.make_vec(env_id, B).reset(seed=3)[0])
    # The "k=v" string form is the same.
    o2, _ = env.reset(seed=3, options=",".join(f"{k}={v}" for k, v in options.items()))
    np.testing.assert_array_equal(o2, made.reset(seed=3)[0])


def test_reset_options_then_autoreset_uses_defaults():
    env = shoal.make_vec("CartPole-v1", 32)
    obs, _ = env.reset(seed=1, options={"low": 0.04, "high": 0.049})  # tilted: falls soon
    assert np.all(obs >= 0.04)
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(200):
        obs, _, te, tr, _ = env.step(rng.integers(0, 2, 32))
        done = te | tr
        ended += int(done.sum())
        assert np.all(np.abs(obs[done]) <= 0.05)  # Gymnasium's default bounds
    assert ended > 0 and np.any(obs < 0)


def test_bad_reset_options():
    env = shoal.make_vec("CartPole-v1", 2)
    first, _ = env.reset(seed=0)
    first = first.copy()
    with pytest.raises(shoal.ShoalValueError, match="low .* must not exceed high"):
        env.reset(seed=5, options={"low": 0.3})  # high stays 0.05
    with pytest.raises(shoal.ShoalValueError, match="no reset option"):
        env.reset(seed=5, options={"sutton_barto_reward": 1})
    with pytest.raises(shoal.ShoalValueError, match="no reset option"):
        shoal.make_vec("Pendulum-v1", 1).reset(options={"g": 5.0})
    with pytest.raises(shoal.ShoalValueError, match="takes no reset options"):
        shoal.make_vec("MinAtar/Breakout-v1", 1).reset(options={"sticky_action_prob": 0})
    with pytest.raises(shoal.ShoalValueError, match="not a number"):
        env.reset(options="low=abc")
    with pytest.raises(TypeError):
        env.reset(options=[("low", 0.1)])
    np.testing.assert_array_equal(env._obs, first)  # refused resets changed nothing
    # Make-time settings are the defaults a reset's options replace.
    wide = shoal.make_vec("CartPole-v1", 8, options={"low": -0.5, "high": 0.5})
    o, _ = wide.reset(seed=2, options={"low": 0.45})
    assert np.all((o >= 0.45) & (o <= 0.5))
    assert np.abs(wide.reset(seed=2)[0]).max() > 0.05


def test_zero_copy_views_and_copy_option():
    env = shoal.make_vec("CartPole-v1", 4)
    obs0, _ = env.reset(seed=0)
    kept = obs0.copy()
    obs1, rew, _, _, _ = env.step(np.ones(4, np.int32))
    assert obs1 is obs0  # the same buffer, overwritten in place
    assert not np.array_equal(obs0, kept)
    assert obs1.ctypes.data == env._obs.ctypes.data

    cenv = shoal.make_vec("CartPole-v1", 4, copy=True)
    c0, _ = cenv.reset(seed=0)
    np.testing.assert_array_equal(c0, kept)
    c1, r1, _, _, _ = cenv.step(np.ones(4, np.int32))
    np.testing.assert_array_equal(c0, kept)  # untouched by the step
    np.testing.assert_array_equal(c1, obs1)
    assert c1 is not cenv._obs and r1 is not cenv._rew


def test_bad_actions_raise_and_step_nothing():
    env = shoal.make_vec("CartPole-v1", 4)
    twin = shoal.make_vec("CartPole-v1", 4)
    env.reset(seed=2)
    twin.reset(seed=2)
    bad = [
        (np.zeros(5, np.int32), ValueError, "shape"),
        (np.zeros((4, 1), np.int32), ValueError, "shape"),
        (np.int32(1), ValueError, "shape"),
        (np.zeros(4, np.float32), TypeError, "integers"),
        (np.zeros(4, np.bool_), TypeError, "integers"),
        (np.array([0, 1, 2, 0], np.int32), ValueError, "copy 2"),
        (np.array([0, -1, 0, 0], np.int32), ValueError, "copy 1"),
        (np.array([0, 0, 0, 2**33], np.int64), ValueError, "copy 3"),
        (np.array([0, 0, 0, -(2**32)], np.int64), ValueError, "copy 3"),
        ("abcd", ValueError, "shape"),
    ]
    for a, kind, words in bad:
        with pytest.raises(kind, match=words):
            env.step(a)
    # Nothing was stepped by the refused calls: env still follows its twin.
    good = np.array([1, 0, 1, 1], np.int32)
    for _ in range(3):
        r = env.step(good)
        t = twin.step(good)
        for x, y in zip(r[:4], t[:4]):
            np.testing.assert_array_equal(x, y)
    # Python ints and lists of the right shape are fine.
    env.step([1, 0, 0, 1])
    one = shoal.make_vec("CartPole-v1", 1)
    one.reset(seed=0)
    one.step(1)


def test_bad_box_actions():
    env = shoal.make_vec("Pendulum-v1", 2)
    env.reset(seed=0)
    for a, words in [
        (np.array([[np.nan], [0]], np.float32), "copy 0.*NaN"),
        (np.array([[0], [np.inf]], np.float32), "copy 1"),
        (np.array([[0], [-np.inf]], np.float64), "copy 1"),
        (np.array([[0], [1e300]], np.float64), "copy 1"),
    ]:
        with pytest.raises(ValueError, match=words):
            env.step(a)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(TypeError):
        env.step(np.array([["a"], ["b"]]))
    o, r, *_ = env.step(np.array([[1], [2]], np.float64))  # converted
    assert np.isfinite(o).all() and r.dtype == np.float32


def test_c_errors_become_exceptions():
    with pytest.raises(shoal.ShoalNotFoundError, match="unknown env 'Nope'.*CartPole-v1"):
        shoal.make_vec("Nope", 2)
    with pytest.raises(ValueError):
        shoal.make_vec("CartPole-v1", 0)
    with pytest.raises(shoal.ShoalValueError, match="unknown option 'foo'"):
        shoal.make_vec("CartPole-v1", 2, options="foo=1")
    with pytest.raises(shoal.ShoalValueError, match="sutton_barto_reward"):
        shoal.make_vec("CartPole-v1", 2, options={"sutton_barto_reward": 5})
    with pytest.raises(shoal.ShoalValueError, match="threads"):
        shoal.make_vec("CartPole-v1", 2, num_threads=3)
    env = shoal.make_vec("CartPole-v1", 2)
    with pytest.raises(shoal.ShoalStateError, match="before reset"):
        env.step(np.zeros(2, np.int32))
    with pytest.raises(shoal.ShoalStateError, match="reset"):
        env.render(0)
    env.reset(seed=0)
    img = env.render(1)
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 and img.any()
    env.close()
    env.close()
    with pytest.raises(ValueError, match="closed"):
        env.step(np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="closed"):
        env.reset(seed=0)


def test_options_and_threads_match_single_thread():
    a = shoal.make_vec("MinAtar/Breakout-v1", 8, num_threads=2,
                       options={"sticky_action_prob": 0.0})
    b = shoal.make_vec("MinAtar/Breakout-v1", 8, options="sticky_action_prob=0")
    oa, _ = a.reset(seed=4)
    ob, _ = b.reset(seed=4)
    np.testing.assert_array_equal(oa, ob)
    rng = np.random.default_rng(1)
    for _ in range(200):
        act = rng.integers(0, 3, 8, dtype=np.int32)
        ra, rb = a.step(act), b.step(act)
        for x, y in zip(ra[:4], rb[:4]):
            np.testing.assert_array_equal(x, y)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cycle(env_id, B, threads):
    env = shoal.make_vec(env_id, B, num_threads=threads)
    env.reset(seed=1)
    act = np.zeros((B,) + env.single_action_space.shape, env.single_action_space.dtype)
    for _ in range(3):
        env.step(act)
    env.episodes()
    env.close()


def test_create_destroy_cycles_do_not_leak():
    specs = [("CartPole-v1", 64, 1), ("MinAtar/Breakout-v1", 16, 1), ("Pendulum-v1", 8, 2)]
    for s in specs:
        for _ in range(100):
            cycle(*s)
    before = rss_bytes()
    n = 0
    for s in specs:
        for _ in range(1500 if s[2] == 1 else 300):
            cycle(*s)
            n += 1
    # Objects dropped without close() are freed by their finalizers too.
    for _ in range(500):
        e = shoal.make_vec("CartPole-v1", 32)
        e.reset(seed=0)
        del e
    grown = rss_bytes() - before
    if SANITIZED:
        pytest.skip("RSS is not meaningful under AddressSanitizer (quarantine); cycles ran")
    # A leak of one CartPole-64 env per cycle would be > 10 MB here.
    assert grown < 2 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over {n + 500} cycles"


@pytest.mark.skipif(SANITIZED, reason="the installed library is the normal build's concern")
def test_install_into_venv(tmp_path):
    """`make python PREFIX=<venv>` (python/install.sh) gives an importable package there."""
    src = os.environ.get("SHOAL_SOURCE_DIR")
    lib = os.environ.get("SHOAL_LIB")
    if not src or not lib:
        pytest.skip("SHOAL_SOURCE_DIR / SHOAL_LIB not given")
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True)
    build = os.path.dirname(os.path.dirname(os.path.abspath(lib)))
    subprocess.run([os.path.join(src, "python", "install.sh"), build, str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("SHOAL_LIB", "PYTHONPATH")}
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import shoal, numpy as np; e = shoal.make_vec('CartPole-v1', 3); e.reset(seed=1);"
         "o = e.step(np.zeros(3, np.int32))[0]; print(shoal.__file__, o.shape)"],
        check=True, capture_output=True, text=True, env=env).stdout
    assert str(venv) in out and "(3, 4)" in out


@pytest.mark.skipif(SANITIZED, reason="the installed library is the normal build's concern")
def test_install_into_prefix_names_its_interpreter(tmp_path):
    """Into a prefix, install.sh checks the import with one interpreter: its hint names that
    interpreter, and the command it prints works as given."""
    src = os.environ.get("SHOAL_SOURCE_DIR")
    lib = os.environ.get("SHOAL_LIB")
    if not src or not lib:
        pytest.skip("SHOAL_SOURCE_DIR / SHOAL_LIB not given")
    build = os.path.dirname(os.path.dirname(os.path.abspath(lib)))
    env = {k: v for k, v in os.environ.items() if k not in ("SHOAL_LIB", "PYTHONPATH")}
    env["SHOAL_PYTHON"] = "/usr/bin/python3"
    out = subprocess.run([os.path.join(src, "python", "install.sh"), build, str(tmp_path / "p")],
                         check=True, capture_output=True, text=True, env=env).stdout
    hint = next(l for l in out.splitlines() if l.startswith("use it with: "))
    words = hint[len("use it with: "):].split()
    assert words[0].startswith("PYTHONPATH=") and words[1] == "/usr/bin/python3", hint
    run_env = dict(env, PYTHONPATH=words[0].split("=", 1)[1])
    got = subprocess.run([words[1], "-c", "import shoal; print(shoal.__file__)"], check=True,
                         capture_output=True, text=True, env=run_env).stdout
    assert str(tmp_path / "p") in got
