# SPDX-License-Identifier: Apache-2.0
"""shoal.load_policy against the C code: the same network, built from the run's config as
`shoal eval` and the actor build it, gives the same greedy actions and Q-values.

References: tests/python_ref.c (SHOAL_REF) makes runs with snapshots in a file store and
computes greedy actions the way cli/shoal.c's cmd_eval does; `shoal eval` (SHOAL_CLI)
plays a snapshot end to end."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import shoal

REF = os.environ.get("SHOAL_REF")
CLI = os.environ.get("SHOAL_CLI")
SRC = os.environ.get("SHOAL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
SANITIZED = os.environ.get("SHOAL_SANITIZED") == "1"
BIN = os.environ.get("SHOAL_BINARY_DIR", os.path.join(SRC, "build"))

pytestmark = pytest.mark.skipif(not REF, reason="SHOAL_REF (tests/python_ref) not given")

BREAKOUT_YAML = """\
env:
  id: MinAtar/Breakout-v1
dqn:
  net: minatar
  dueling: false
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("store")
    cfg = d / "breakout.yaml"
    cfg.write_text(BREAKOUT_YAML)
    subprocess.run([REF, "mkrun", str(d), "cp", os.path.join(SRC, "configs/cartpole-apex.yaml")],
                   check=True)
    subprocess.run([REF, "mkrun", str(d), "bo", str(cfg)], check=True)
    # NoisyNet's custom layer from the example plugin (docs/custom-layers.md): the plugin
    # is loaded into libshoal.so, which ctypes loaded privately
    plugin = os.path.join(BIN, "examples", "noisy_linear.so")
    noisy = d / "noisy.yaml"
    with open(os.path.join(SRC, "configs/cartpole-apex-noisy.yaml")) as f:
        noisy.write_text(f.read().replace("plugins: build/examples/noisy_linear.so",
                                          "plugins: " + plugin))
    subprocess.run([REF, "mkrun", str(d), "nz", str(noisy)], check=True)
    return d


def observations(env_id, B, seed):
    rng = np.random.default_rng(seed)
    if env_id == "CartPole-v1":
        return (rng.standard_normal((B, 4)) * [1.0, 1.5, 0.15, 1.5]).astype(np.float32)
    return (rng.random((B, 4, 10, 10)) < 0.1).astype(np.uint8)


def c_act(tmp_path, uri, run, which, obs):
    ofile, rfile = tmp_path / "obs.bin", tmp_path / "act.bin"
    ofile.write_bytes(np.ascontiguousarray(obs).tobytes())
    B = obs.shape[0]
    subprocess.run([REF, "act", uri, run, which, str(ofile), str(B), str(rfile)], check=True)
    raw = rfile.read_bytes()
    a = np.frombuffer(raw[:4 * B], np.int32)
    q = np.frombuffer(raw[4 * B:], np.float32).reshape(B, -1)
    return a, q


@pytest.mark.parametrize("run,env_id,B", [("cp", "CartPole-v1", 64), ("bo", "MinAtar/Breakout-v1", 32),
                                          ("cp", "CartPole-v1", 1), ("nz", "CartPole-v1", 64)])
@pytest.mark.parametrize("which", ["latest", "best", "1"])
def test_greedy_actions_equal_c(tmp_path, store, run, env_id, B, which):
    uri = "file://" + str(store)
    obs = observations(env_id, B, seed=B)
    ref_a, ref_q = c_act(tmp_path, uri, run, which, obs)
    kw = {"best": True} if which == "best" else {"version": 1} if which == "1" else {}
    pol = shoal.load_policy(uri, run=run, **kw)
    assert pol.env_id == env_id and pol.num_actions == ref_q.shape[1]
    assert pol.version == {"latest": 2, "best": 1, "1": 1}[which]
    a, q = pol.act(obs, return_q=True)
    assert a.dtype == np.int32 and a.shape == (B,)
    np.testing.assert_array_equal(a, ref_a)
    np.testing.assert_array_equal(q, ref_q)
    np.testing.assert_array_equal(pol(obs), ref_a)
    if B > 1:
        # The comparison means something: the network does not pick one action for all.
        assert len(np.unique(ref_a)) > 1
    np.testing.assert_array_equal(a, np.argmax(q, axis=1))


def test_snapshots_differ_and_file_load(tmp_path, store):
    uri = "file://" + str(store)
    obs = observations("CartPole-v1", 50, seed=0)
    latest = shoal.load_policy(uri, run="cp")
    best = shoal.load_policy(str(store), run="cp", best=True)  # a plain folder works too
    assert latest.version == 2 and best.version == 1 and best.score == 10.0
    assert not np.array_equal(latest.q(obs), best.q(obs))
    # The snapshot file alone; the run's config is found beside it.
    f = store / "cp" / "snapshots" / "2.safetensors"
    assert f.exists()
    from_file = shoal.load_policy(f)
    np.testing.assert_array_equal(from_file.q(obs), latest.q(obs))
    # ... or given explicitly, from anywhere.
    g = tmp_path / "elsewhere.safetensors"
    shutil.copy(f, g)
    with pytest.raises(shoal.ShoalNotFoundError, match="config"):
        shoal.load_policy(g)
    c = shoal.load_policy(g, config=store / "cp" / "config.yaml")
    np.testing.assert_array_equal(c(obs), latest(obs))
    # A store without run= is refused, however its URI or folder is written.
    for target in (uri, "file:" + str(store), str(store)):
        with pytest.raises(ValueError, match="pass run="):
            shoal.load_policy(target)


def test_batches_single_and_dtypes(store):
    pol = shoal.load_policy("file://" + str(store), run="cp")
    obs = observations("CartPole-v1", 600, seed=1)  # more than one chunk of 256
    a, q = pol.act(obs, return_q=True)
    assert a.shape == (600,) and q.shape == (600, 2)
    # Chunks of 256 run as the C actor would run those batches: bit for bit.
    for lo, hi in [(0, 256), (256, 512), (512, 600)]:
        np.testing.assert_array_equal(pol.q(obs[lo:hi]), q[lo:hi])
    # Other batch sizes may round the last bits differently (BLAS kernels), as in C.
    np.testing.assert_allclose(pol.q(obs[100:137]), q[100:137], rtol=1e-5, atol=1e-6)
    one = pol(obs[3])
    assert isinstance(one, np.int32) and one == a[3]
    np.testing.assert_allclose(pol.q(obs[3]), q[3], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pol(obs.astype(np.float64)), a)  # converted to float32
    bo = shoal.load_policy("file://" + str(store), run="bo")
    ob = observations("MinAtar/Breakout-v1", 8, seed=2)
    np.testing.assert_array_equal(bo.q(ob), bo.q(ob.astype(np.float32)))  # uint8 as the actor


def test_bad_inputs_and_c_errors(tmp_path, store):
    uri = "file://" + str(store)
    pol = shoal.load_policy(uri, run="cp")
    with pytest.raises(ValueError, match="shape"):
        pol(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="shape"):
        pol(np.zeros((0, 4), np.float32))
    with pytest.raises(TypeError):
        pol(np.array([["a"] * 4]))
    bad = np.zeros((4, 4), np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(shoal.ShoalValueError, match="observation 2"):
        pol(bad)
    with pytest.raises(shoal.ShoalNotFoundError, match="nosuchrun"):
        shoal.load_policy(uri, run="nosuchrun")
    with pytest.raises(shoal.ShoalNotFoundError):
        shoal.load_policy(uri, run="cp", version=7)
    with pytest.raises(ValueError, match="run="):
        shoal.load_policy(uri)
    with pytest.raises(shoal.ShoalNotFoundError, match="nope.safetensors"):
        shoal.load_policy(tmp_path / "nope.safetensors", config=store / "cp" / "config.yaml")
    # A damaged snapshot is refused with the checkpoint reader's message.
    good = (store / "cp" / "snapshots" / "2.safetensors").read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(shoal.ShoalValueError, match="cut.safetensors"):
        shoal.load_policy(cut, config=store / "cp" / "config.yaml")
    # A snapshot of another network (Breakout's) does not fit CartPole's config.
    with pytest.raises(shoal.ShoalError):
        shoal.load_policy(store / "bo" / "snapshots" / "1.safetensors",
                          config=store / "cp" / "config.yaml")
    pol.close()
    with pytest.raises(ValueError, match="closed"):
        pol(np.zeros(4, np.float32))


def python_eval(pol, env_id, episodes, seed):
    """The evaluation loop `shoal eval` runs (algos/agent.c's op_eval), through the Python
    API: the episodes split over min(episodes, 16) env copies seeded from `seed`, each copy
    playing its quota one episode after another (the env resets itself)."""
    E = min(episodes, 16)
    env = shoal.make_vec(env_id, E)
    obs, _ = env.reset(seed=seed)
    quota = [episodes // E + (i < episodes % E) for i in range(E)]
    ret, count, returns = np.zeros(E), [0] * E, []
    for _ in range(27000 * -(-episodes // E)):
        if len(returns) == episodes:
            break
        obs, rew, term, trunc, _ = env.step(pol(obs))
        ret += rew
        for i in np.flatnonzero(term | trunc):
            if count[i] < quota[i]:
                returns.append(ret[i])
                count[i] += 1
            ret[i] = 0
    return np.array(returns)


@pytest.mark.skipif(not CLI, reason="SHOAL_CLI (the shoal program) not built")
@pytest.mark.parametrize("run,env_id,best", [("cp", "CartPole-v1", False), ("bo", "MinAtar/Breakout-v1", True)])
def test_matches_shoal_eval(store, run, env_id, best):
    args = [CLI, "eval", run, "--store", "file://" + str(store), "--episodes", "20", "--seed", "7"]
    out = subprocess.run(args + (["--best"] if best else []), check=True, capture_output=True,
                         text=True).stdout
    m = re.search(r"return (-?[0-9.]+) ± ([0-9.]+) over 20 episodes \(min (-?[0-9.]+), max (-?[0-9.]+)\)", out)
    assert m, out
    pol = shoal.load_policy("file://" + str(store), run=run, best=best)
    ret = python_eval(pol, env_id, 20, 7)
    assert f"{ret.mean():.2f}" == m.group(1) and f"{ret.std():.2f}" == m.group(2), out
    assert f"{ret.min():.1f}" == m.group(3) and f"{ret.max():.1f}" == m.group(4), out


def rss_bytes():
    # Freed heap glibc still holds (fragmented arenas, more of them when threads run on a
    # loaded machine) is returned first, so what is left is memory still in use.
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_load_destroy_cycles_do_not_leak(store):
    uri = "file://" + str(store)
    obs = observations("MinAtar/Breakout-v1", 16, seed=0)
    f = store / "cp" / "snapshots" / "1.safetensors"

    def cycles(n):
        for _ in range(n):
            p = shoal.load_policy(uri, run="bo", best=True)
            p.q(obs)
            p.close()
            shoal.load_policy(f)(np.zeros((3, 4), np.float32))  # dropped: freed by its finalizer

    # The first rounds settle what the allocator and the libraries keep for good (arenas,
    # caches, thread-pool stacks); a leak grows with every round after that. Each load
    # holds a MinAtar Q-network (~0.5 MiB of parameters): one leaked per cycle would grow
    # the second round by tens of MiB, far past the bound.
    for _ in range(30):
        shoal.load_policy(uri, run="bo").close()
        shoal.load_policy(f)(np.zeros(4, np.float32))
    cycles(300)
    before = rss_bytes()
    cycles(300)
    grown = rss_bytes() - before
    if SANITIZED:
        pytest.skip("RSS is not meaningful under AddressSanitizer (quarantine); cycles ran")
    assert grown < 3 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB over 600 loads after 600"
