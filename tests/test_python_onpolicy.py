# SPDX-License-Identifier: Apache-2.0
"""shoal.load_policy on IMPALA and PPO runs against the C code: the actor-critic built
from the run's config as shoal-onpolicy-actor builds it, with the observation normaliser
stored in the snapshot, gives the same actions (greedy and sampled, discrete and
Gaussian) and log-probabilities on the same observations. A run whose network has an
LSTM core acts as the actor acts with it, the policy carrying each env's (h, c).

References: tests/python_ref.c (SHOAL_REF) `opmkrun` writes runs with learner snapshots
(parameters, normaliser, optimizer state) into a file store, and `opact` acts with
algos/agent.c's op_agent_act as the actor does, `opactrec` with op_agent_act_recurrent
over T steps, carrying the state."""

import os
import shutil
import subprocess

import numpy as np
import pytest

import shoal

REF = os.environ.get("SHOAL_REF")
SRC = os.environ.get("SHOAL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))

pytestmark = pytest.mark.skipif(not REF, reason="SHOAL_REF (tests/python_ref) not given")

RUNS = {  # run: (config, env, algo, Box dims)
    "ppo": ("cartpole-ppo.yaml", "CartPole-v1", "ppo", 0),
    "imp": ("cartpole-impala.yaml", "CartPole-v1", "impala", 0),
    "pend": ("pendulum-ppo.yaml", "Pendulum-v1", "ppo", 1),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("store")
    for run, (cfg, *_rest) in RUNS.items():
        subprocess.run([REF, "opmkrun", str(d), run, os.path.join(SRC, "configs", cfg)],
                       check=True)
    return d


def observations(env_id, B, seed):
    rng = np.random.default_rng(seed)
    if env_id == "CartPole-v1":
        return (rng.standard_normal((B, 4)) * [1.0, 1.5, 0.15, 1.5]).astype(np.float32)
    th = rng.uniform(-np.pi, np.pi, B)  # Pendulum: cos, sin, angular velocity
    return np.stack([np.cos(th), np.sin(th), rng.uniform(-8, 8, B)], 1).astype(np.float32)


def c_act(tmp_path, uri, run, which, obs, greedy, seed, D):
    ofile, rfile = tmp_path / "obs.bin", tmp_path / "act.bin"
    ofile.write_bytes(np.ascontiguousarray(obs).tobytes())
    B = obs.shape[0]
    subprocess.run([REF, "opact", uri, run, which, str(ofile), str(B), str(int(greedy)),
                    str(seed), str(rfile)], check=True)
    raw = rfile.read_bytes()
    if D == 0:
        return np.frombuffer(raw[:4 * B], np.int32), None, np.frombuffer(raw[4 * B:], np.float32)
    n = 4 * B * D
    return (np.frombuffer(raw[:n], np.float32).reshape(B, D),
            np.frombuffer(raw[n:2 * n], np.float32).reshape(B, D),
            np.frombuffer(raw[2 * n:], np.float32))


@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize("which", ["latest", "best", "1"])
@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("B", [1, 64, 300])  # 300: two chunks of the C library's 256
def test_actions_and_logp_equal_c(tmp_path, store, run, which, greedy, B):
    cfg, env_id, algo, D = RUNS[run]
    uri = "file://" + str(store)
    obs = observations(env_id, B, seed=B)
    seed = 1234 + B
    ref_a, ref_raw, ref_logp = c_act(tmp_path, uri, run, which, obs, greedy, seed, D)
    kw = {"best": True} if which == "best" else {"version": 1} if which == "1" else {}
    pol = shoal.load_policy(uri, run=run, **kw)
    assert pol.env_id == env_id and pol.algo == algo and pol.act_dim == D
    assert pol.version == {"latest": 2, "best": 1, "1": 1}[which]
    assert pol.normalizes_obs == (run == "pend")
    pol.seed(seed)
    a, raw, logp = pol.sample(obs, greedy=greedy, return_raw=True)
    assert logp.dtype == np.float32 and logp.shape == (B,)
    np.testing.assert_array_equal(a, ref_a)
    np.testing.assert_array_equal(logp, ref_logp)
    assert np.all(np.isfinite(logp))
    if D == 0:
        assert a.dtype == np.int32 and a.shape == (B,)
        np.testing.assert_array_equal(raw, a)
        assert np.all(logp <= 0)
    else:
        assert a.dtype == np.float32 and a.shape == (B, D)
        np.testing.assert_array_equal(raw, ref_raw)
        low, high = pol.action_space.low, pol.action_space.high
        assert np.all(a >= low) and np.all(a <= high)
        np.testing.assert_array_equal(a, np.clip(raw, low, high))
    if greedy:
        np.testing.assert_array_equal(pol(obs), ref_a)  # act() is the greedy choice
    if B > 1:
        # The comparisons mean something: actions vary between observations ...
        assert len(np.unique(ref_a)) > 1
        if not greedy:
            # ... and sampling draws from the policy: another seed gives other actions.
            pol.seed(seed + 1)
            assert not np.array_equal(pol.sample(obs)[0], a)


def test_normaliser_and_snapshots(tmp_path, store):
    uri = "file://" + str(store)
    obs = observations("Pendulum-v1", 64, seed=3)
    latest = shoal.load_policy(uri, run="pend")
    best = shoal.load_policy(str(store), run="pend", best=True)
    assert latest.version == 2 and best.version == 1 and best.score == 3.0
    assert not np.array_equal(latest(obs), best(obs))
    # The reference normalises with the snapshot's statistics (op_obs_to_float), which
    # opmkrun set far from the identity (means 0.5..1.5, scales 2..4).
    ref = c_act(tmp_path, uri, "pend", "latest", obs, True, 0, 1)[0]
    np.testing.assert_array_equal(latest(obs), ref)
    # The snapshot file alone, the run's config beside it (the file store's layout).
    f = store / "pend" / "snapshots" / "2.safetensors"
    from_file = shoal.load_policy(f)
    assert from_file.algo == "ppo" and from_file.version is None
    np.testing.assert_array_equal(from_file(obs), ref)
    # Single observations: no batch axis.
    one = latest(obs[5])
    assert one.shape == (1,) and one.dtype == np.float32
    # (a batch of 1 may round the last bits of a BLAS product differently than 64)
    np.testing.assert_allclose(one, ref[5], rtol=1e-5, atol=1e-6)
    a, lp = latest.sample(obs[5])
    assert a.shape == (1,) and np.ndim(lp) == 0
    d = shoal.load_policy(uri, run="ppo")
    one = d(observations("CartPole-v1", 1, 0)[0])
    assert isinstance(one, np.int32)


def test_bad_inputs(tmp_path, store):
    uri = "file://" + str(store)
    pol = shoal.load_policy(uri, run="imp")
    with pytest.raises(TypeError, match="Q-values"):
        pol.q(observations("CartPole-v1", 2, 0))
    with pytest.raises(ValueError, match="shape"):
        pol.sample(np.zeros((3, 5), np.float32))
    bad = observations("CartPole-v1", 4, 0)
    bad[2, 1] = np.nan
    with pytest.raises(shoal.ShoalValueError, match="observation 2"):
        pol.sample(bad)
    # A snapshot of another network (Pendulum's) does not fit CartPole's config.
    with pytest.raises(shoal.ShoalError):
        shoal.load_policy(store / "pend" / "snapshots" / "1.safetensors",
                          config=store / "ppo" / "config.yaml")
    # A damaged snapshot is refused.
    good = (store / "ppo" / "snapshots" / "2.safetensors").read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(shoal.ShoalError):
        shoal.load_policy(cut, config=store / "ppo" / "config.yaml")
    # An Ape-X DQN policy has no sampling.
    subprocess.run([REF, "mkrun", str(store), "dq", os.path.join(SRC, "configs/cartpole-apex.yaml")],
                   check=True)
    dq = shoal.load_policy(uri, run="dq")
    assert dq.algo == "dqn"
    with pytest.raises(TypeError, match="greedily"):
        dq.sample(observations("CartPole-v1", 2, 0))
    pol.close()
    with pytest.raises(ValueError, match="closed"):
        pol.sample(np.zeros(4, np.float32))


LSTM_RUNS = {  # run: (config, Box dims)
    "ppo-lstm": ("cartpole-novel-ppo-lstm.yaml", 0),      # observations normalised
    "imp-lstm": ("cartpole-novel-impala-lstm.yaml", 0),
}


@pytest.fixture(scope="module")
def lstm_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("lstm")
    for run, (cfg, _) in LSTM_RUNS.items():
        subprocess.run([REF, "opmkrun", str(d), run, os.path.join(SRC, "configs", cfg)],
                       check=True)
    return d


def c_act_recurrent(tmp_path, uri, run, obs, first, greedy, seed, S):
    """python_ref opactrec: T steps of op_agent_act_recurrent, the state carried."""
    T, B = first.shape
    ofile, ffile, rfile = tmp_path / "obs.bin", tmp_path / "first.bin", tmp_path / "out.bin"
    ofile.write_bytes(np.ascontiguousarray(obs, np.float32).tobytes())
    ffile.write_bytes(np.ascontiguousarray(first, np.uint8).tobytes())
    subprocess.run([REF, "opactrec", uri, run, "latest", str(ofile), str(ffile), str(T), str(B),
                    str(int(greedy)), str(seed), str(rfile)], check=True)
    raw = rfile.read_bytes()
    acts, logps, at = [], [], 0
    for _ in range(T):
        acts.append(np.frombuffer(raw[at:at + 4 * B], np.int32))
        logps.append(np.frombuffer(raw[at + 4 * B:at + 8 * B], np.float32))
        at += 8 * B
    state = np.frombuffer(raw[at:], np.float32).reshape(B, S)
    return np.array(acts), np.array(logps), state


@pytest.mark.parametrize("run", list(LSTM_RUNS))
@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("B", [3, 300])  # 300: two chunks of the C library's 256
def test_recurrent_policy_carries_state_as_the_actor(tmp_path, lstm_store, run, greedy, B):
    """A policy with an LSTM core acts over T steps as shoal-onpolicy-actor does: (h, c)
    per env carried from step to step and zeroed where an episode starts."""
    uri = "file://" + str(lstm_store)
    pol = shoal.load_policy(uri, run=run)
    assert pol.recurrent and pol.lstm_size == 64 and pol.state_size == 128
    assert pol.state is None and "LSTM 64" in repr(pol)
    T = 12
    rng = np.random.default_rng(B)
    obs = np.stack([observations("CartPole-v1", B, seed=B + t) for t in range(T)])
    obs[:, :, [1, 3]] = 0  # CartPoleNoVel: the velocities are hidden
    first = rng.random((T, B)) < 0.15
    first[0] = True
    seed = 99 + B
    ref_a, ref_logp, ref_state = c_act_recurrent(tmp_path, uri, run, obs, first, greedy, seed, 128)
    pol.seed(seed)
    for t in range(T):
        a, logp = pol.sample(obs[t], greedy=greedy, episode_start=first[t])
        np.testing.assert_array_equal(a, ref_a[t])
        np.testing.assert_array_equal(logp, ref_logp[t])
    h, c = pol.state
    np.testing.assert_array_equal(np.concatenate([h, c], 1), ref_state)
    assert np.abs(h).max() > 0.01 and np.abs(c).max() > 0.01

    # The state matters: starting over from zeros with no episode start marked where the
    # reference had one gives other log-probabilities after that step.
    pol.reset_state()
    pol.seed(seed)
    no_starts = [pol.sample(obs[t], greedy=greedy)[1] for t in range(T)]
    resets = np.flatnonzero(first[1:].any(axis=1))
    assert resets.size
    assert not np.array_equal(np.array(no_starts), ref_logp)
    # ... while zeros with every start marked at step 0 (the default at the first call) is
    # the same as starting from nothing.
    pol.reset_state()
    pol.seed(seed)
    a0, lp0 = pol.sample(obs[0], greedy=greedy, episode_start=np.zeros(B, bool))
    np.testing.assert_array_equal(lp0, ref_logp[0])


def test_recurrent_policy_state_api(lstm_store):
    pol = shoal.load_policy("file://" + str(lstm_store), run="ppo-lstm")
    obs = observations("CartPole-v1", 4, seed=1)
    a1 = pol(obs)  # greedy; the state of 4 envs is carried now
    assert a1.dtype == np.int32 and a1.shape == (4,)
    h, c = pol.state
    assert h.shape == (4, 64) and c.shape == (4, 64) and h.dtype == np.float32
    with pytest.raises(ValueError, match="carries the state of 4 envs"):
        pol(obs[:2])
    with pytest.raises(ValueError, match="episode_start"):
        pol(obs, episode_start=[True, False])
    # Setting the state back replays the step exactly.
    pol.state = (h, c)
    s_next = pol.sample(obs, greedy=True)[1]
    pol.state = (h, c)
    np.testing.assert_array_equal(pol.sample(obs, greedy=True)[1], s_next)
    # A mask zeroes some envs only: those act as at an episode start.
    pol.state = (h, c)
    pol.reset_state(np.array([True, False, False, True]))
    h2, c2 = pol.state
    assert not h2[[0, 3]].any() and np.array_equal(h2[[1, 2]], h[[1, 2]])
    lp_mask = pol.sample(obs, greedy=True)[1]
    pol.state = (h, c)
    lp_first = pol.sample(obs, greedy=True, episode_start=[1, 0, 0, 1])[1]
    np.testing.assert_array_equal(lp_mask, lp_first)
    with pytest.raises(ValueError, match="must each be"):
        pol.state = (h[:, :3], c)
    pol.state = (np.full((4, 64), np.nan, np.float32), c)
    with pytest.raises(shoal.ShoalValueError, match="state of env 0"):
        pol(obs)
    pol.reset_state()
    one = pol(obs[0])  # one observation: a state of 1 env
    assert np.ndim(one) == 0 and pol.state[0].shape == (1, 64)
    # Feed-forward policies have none and ignore episode_start.
    ff = shoal.load_policy("file://" + str(lstm_store), run="ppo-lstm")
    assert ff.recurrent
    subprocess.run([REF, "opmkrun", str(lstm_store), "ff",
                    os.path.join(SRC, "configs", "cartpole-ppo.yaml")], check=True)
    ff = shoal.load_policy("file://" + str(lstm_store), run="ff")
    assert not ff.recurrent and ff.state_size == 0 and ff.state is None
    np.testing.assert_array_equal(ff(obs, episode_start=[1, 0, 1, 0]), ff(obs))
