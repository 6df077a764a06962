# SPDX-License-Identifier: Apache-2.0
"""shoal's Python vector env (python/shoal over libshoal.so) against the C vector env.

Run by ctest (python/CMakeLists.txt) with SHOAL_LIB (the library) and SHOAL_REF
(tests/python_ref.c, which steps env_vec from the part libraries directly)."""

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
    assert isinstance(a, shoal.Discrete) and a.n == 2 and a.dtype == np.int32
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
    with pytest.raises(TypeError):
        x.reset(seed=[1, 2])
    with pytest.raises(ValueError):
        x.reset(seed=-1)


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
