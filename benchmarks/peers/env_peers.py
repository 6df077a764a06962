# SPDX-License-Identifier: Apache-2.0
"""Steps/s of shoal's vector env against the vector envs a user would pick instead, all
driven from Python in this one process and run.

Peers (whichever import; benchmarks/peers/setup.sh installs them into a venv):
  gymnasium-sync   gymnasium.make_vec(id, B, vectorization_mode="sync")  (SyncVectorEnv)
  gymnasium-async  gymnasium.make_vec(id, B, vectorization_mode="async") (AsyncVectorEnv: one
                   process per env, so B = 1 and 16 only)
  envpool-sync     envpool.make_gymnasium(id, num_envs=B, batch_size=B, num_threads=T)
  envpool-async    envpool.make_gymnasium(id, num_envs=2B, batch_size=B, num_threads=T),
                   send/recv (each recv returns B steps)
  puffer-serial    pufferlib.vector.make(GymnasiumPufferEnv(gym.make(id)), B, backend=Serial)
  puffer-mp        the same with backend=Multiprocessing, num_workers=2 (two cores, B >= 16)
shoal: shoal.make_vec(id, B, num_threads=T) (python/shoal over libshoal.so).

One core (t1) and two (t2): the process (and the threads and processes it starts) is pinned
with sched_setaffinity to one CPU or to two. At t2 the peers that can use a second core do:
shoal and EnvPool with 2 threads (shoal 1 at B = 1: a thread steps whole copies), Gymnasium's async processes, PufferLib's 2 workers.
Gymnasium's sync env and PufferLib's serial one use one core whatever they are given, so
they appear at t1 only.

Threads that pay: after each t2 group, shoal with two threads and shoal with one thread
(shoal-1thread) on the same two cores are measured again as a pair, alone, a window of
each per round for 3 x --rounds rounds; the figure is the round whose ratio is the median
of the rounds' ratios. So it compares the two settings a user with two cores chooses
between under the same load. (t2 against t1 would compare figures taken minutes apart,
and this shared machine drifts by +-20% in that time; at B = 1 both sides step on one
thread, so that column shows the noise that is left.)

Each figure is the best of --rounds windows of --window seconds; at each (env, B, cores)
every system is made first and their windows alternate round after round, so that load
from elsewhere on the shared machine falls on all alike (PufferLib's Multiprocessing, whose
workers busy-wait, is measured alone after the others are closed). The best window is the
least disturbed one. Actions: uniformly random, drawn by numpy in blocks (one draw per
block, the same for every system).
Autoreset differs: shoal and PufferLib's emulation reset within the step that ends an
episode; Gymnasium 1.x and EnvPool spend the next step on the reset (it counts as a step).

Prints a table, the versions, and
  BENCH name=env.<id>.b<B>[.t2].<peer> value=<shoal> unit=steps/s baseline=<peer> ratio=<shoal/peer>
(the t1 names carry no thread suffix, as benchmarks/python_sps.py's), and
  BENCH name=env_threads.py.<id>.b<B> value=<shoal, 2 threads> unit=steps/s
        baseline=<shoal, 1 thread, same 2 cores, alternating> ratio=<2 threads / 1>
A missing peer gives baseline=none ratio=none and a line saying why.
Run: make bench BENCH=env_peers, or benchmarks/peers/env_peers.sh [--rounds N] [--window S] [--envs ...].
"""

import argparse
import datetime
import os
import platform
import sys
import time

import numpy as np

import shoal

ENVS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"]
BATCHES = [1, 16, 256]
PEERS_T1 = ["gymnasium-sync", "gymnasium-async", "envpool-sync", "envpool-async", "puffer-serial"]
PEERS_T2 = ["gymnasium-async", "envpool-sync", "envpool-async", "puffer-mp"]

missing = {}  # peer family -> why it is missing
mods = {}


def try_import():
    try:
        import gymnasium
        mods["gymnasium"] = gymnasium
    except Exception as e:  # noqa: BLE001 - any failure means the peer is missing
        missing["gymnasium"] = f"import gymnasium failed ({e}); run `make peers`"
    try:
        import envpool
        mods["envpool"] = envpool
    except Exception as e:  # noqa: BLE001
        missing["envpool"] = f"import envpool failed ({e}); run `make peers`"
    try:
        import pufferlib
        import pufferlib.emulation
        import pufferlib.vector
        mods["pufferlib"] = pufferlib
        if "gymnasium" not in mods:
            missing["puffer"] = "PufferLib wraps Gymnasium envs, and gymnasium is missing"
    except Exception as e:  # noqa: BLE001
        missing["puffer"] = f"import pufferlib failed ({e}); run `make peers`"


def family(peer):
    return peer.split("-")[0]


def version(name):
    try:
        from importlib.metadata import version as v
        return v(name)
    except Exception:  # noqa: BLE001
        return "-"


# ---- action blocks ----------------------------------------------------------------

class Actions:
    """Random actions for B copies in blocks of `block` steps: (block, B) int or
    (block, B, *shape) float32."""

    def __init__(self, discrete_n, box_low, box_high, B, dtype):
        self.n, self.low, self.high, self.B, self.dtype = discrete_n, box_low, box_high, B, dtype
        self.rng = np.random.default_rng(0)
        self.block = max(16, 4096 // B)

    def draw(self):
        if self.n:
            return self.rng.integers(0, self.n, (self.block, self.B), dtype=self.dtype)
        lo, hi = self.low, self.high
        return self.rng.uniform(lo, hi, (self.block, self.B) + lo.shape).astype(np.float32)


def space_of(env_id):
    """(n, low, high) of the action space, from shoal's own spec (the same env)."""
    v = shoal.make_vec(env_id, 1)
    sp = v.single_action_space
    v.close()
    if sp.n:
        return sp.n, None, None
    return 0, sp.low, sp.high


# ---- the systems --------------------------------------------------------------------
# Each maker returns (step(actions_row) -> None, close(), steps per call, action dtype).

def make_shoal(env_id, B, threads):
    env = shoal.make_vec(env_id, B, num_threads=min(threads, B))  # at most one thread a copy
    env.reset(seed=0)
    return env.step, env.close, B, np.int32


def make_gym(env_id, B, mode):
    gym = mods["gymnasium"]
    env = gym.make_vec(env_id, num_envs=B, vectorization_mode=mode)
    env.reset(seed=0)
    return env.step, env.close, B, np.int64


def make_envpool(env_id, B, threads, is_async):
    ep = mods["envpool"]
    if not is_async:
        env = ep.make_gymnasium(env_id, num_envs=B, batch_size=B, num_threads=threads, seed=0)
        env.reset()
        return env.step, env.close, B, np.int32
    env = ep.make_gymnasium(env_id, num_envs=2 * B, batch_size=B, num_threads=threads, seed=0)
    env.async_reset()

    def step(a):
        info = env.recv()[-1]
        env.send(a, info["env_id"])

    return step, env.close, B, np.int32


def make_puffer(env_id, B, backend):
    pl = mods["pufferlib"]
    gym = mods["gymnasium"]
    import pufferlib.emulation
    import pufferlib.vector

    def creator(buf=None, seed=0):
        return pufferlib.emulation.GymnasiumPufferEnv(env=gym.make(env_id), buf=buf, seed=seed)

    kw = {}
    if backend == "mp":
        kw = dict(backend=pufferlib.vector.Multiprocessing, num_workers=2)
    else:
        kw = dict(backend=pufferlib.vector.Serial)
    env = pufferlib.vector.make(creator, num_envs=B, **kw)
    env.reset(seed=0)
    del pl
    return env.step, env.close, B, np.int32


def maker(system, env_id, B, threads):
    if system == "shoal":
        return make_shoal(env_id, B, threads)
    if system == "shoal-1thread":
        return make_shoal(env_id, B, 1)
    if system == "gymnasium-sync":
        return make_gym(env_id, B, "sync")
    if system == "gymnasium-async":
        return make_gym(env_id, B, "async")
    if system == "envpool-sync":
        return make_envpool(env_id, B, threads, False)
    if system == "envpool-async":
        return make_envpool(env_id, B, threads, True)
    if system == "puffer-serial":
        return make_puffer(env_id, B, "serial")
    if system == "puffer-mp":
        return make_puffer(env_id, B, "mp")
    raise ValueError(system)


def not_applicable(system, B, threads):
    """Why a system is left out at this B / thread count, or None."""
    if system == "gymnasium-async" and B > 16:
        return "AsyncVectorEnv starts one process per env (256 processes on 2 cores)"
    if system == "puffer-mp" and B < 2:
        return "Multiprocessing needs num_envs divisible by its 2 workers"
    return None


class Runner:
    """One system made and reset, stepping one timed window at a time."""

    def __init__(self, system, env_id, B, threads, space):
        self.step, self.close, self.per_call, dtype = maker(system, env_id, B, threads)
        n, lo, hi = space
        self.acts = Actions(n, lo, hi, B, dtype)
        self.best = 0.0
        self.window_rate(0.02)  # warm-up: first steps, thread starts

    def window_rate(self, window):
        step, acts = self.step, self.acts
        calls = 0
        t0 = time.perf_counter()
        while True:
            block = acts.draw()
            for k in range(acts.block):
                step(block[k])
            calls += acts.block
            now = time.perf_counter()
            if now - t0 >= window:
                break
        rate = calls * self.per_call / (now - t0)
        self.best = max(self.best, rate)
        return rate


# PufferLib's Multiprocessing workers busy-wait while alive, which would slow whatever is
# measured beside them: they are made and measured alone.
ALONE = {"puffer-mp"}


def measure_group(systems, env_id, B, threads, cpus, space, rounds, window):
    """{system: best rate or an exception}. The systems' windows alternate, round after
    round, so that load from elsewhere on the shared machine falls on all alike."""
    os.sched_setaffinity(0, cpus)
    out, runners = {}, {}
    together = [x for x in systems if x not in ALONE]
    try:
        for x in together:
            try:
                runners[x] = Runner(x, env_id, B, threads, space)
            except Exception as e:  # noqa: BLE001 - reported in the table
                out[x] = e
        for _ in range(rounds):
            for x, r in list(runners.items()):
                try:
                    r.window_rate(window)
                except Exception as e:  # noqa: BLE001
                    out[x] = e
                    del runners[x]
                    r.close()
        for x, r in runners.items():
            out[x] = r.best
    finally:
        for r in runners.values():
            r.close()
    for x in systems:
        if x in ALONE:
            try:
                r = Runner(x, env_id, B, threads, space)
                try:
                    for _ in range(rounds):
                        r.window_rate(window)
                    out[x] = r.best
                finally:
                    r.close()
            except Exception as e:  # noqa: BLE001
                out[x] = e
    return out


def measure_pair(env_id, B, threads, cpus, space, rounds, window):
    """shoal with `threads` threads and with one, alone on `cpus`, a window of each per
    round: (two, one, lowest ratio, highest ratio), two and one from the round whose ratio
    two / one is the median of the rounds'.
    Each round's two windows are a few tenths of a second apart, so the drift of a shared
    machine (seconds) falls on both and cancels in their ratio; the median leaves out the
    rounds that a burst hit on one side only."""
    os.sched_setaffinity(0, cpus)
    two = Runner("shoal", env_id, B, threads, space)
    try:
        one = Runner("shoal-1thread", env_id, B, threads, space)
        try:
            got = [(two.window_rate(window), one.window_rate(window)) for _ in range(rounds)]
        finally:
            one.close()
    finally:
        two.close()
    got.sort(key=lambda p: p[0] / p[1])
    two, one = got[len(got) // 2]
    return two, one, got[0][0] / got[0][1], got[-1][0] / got[-1][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="windows per figure")
    ap.add_argument("--window", type=float, default=0.12, help="seconds")
    ap.add_argument("--envs", nargs="*", default=ENVS)
    ap.add_argument("--batches", nargs="*", type=int, default=BATCHES)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try_import()
    cpus_all = sorted(os.sched_getaffinity(0))
    configs = [(1, {cpus_all[0]}, PEERS_T1)]
    if len(cpus_all) >= 2:
        configs.append((2, set(cpus_all[:2]), PEERS_T2))
    else:
        print("env_peers: one CPU available: no two-core figures")

    print(f"env_peers: vector-env steps/s from Python, best of {args.rounds} windows of "
          f"{args.window:.2f} s per figure, the systems' windows alternating, "
          f"{datetime.date.today()} (shared machine: read +-20%)")
    vers = [("python", platform.python_version()), ("numpy", np.__version__),
            ("gymnasium", version("gymnasium")), ("envpool", version("envpool")),
            ("pufferlib", version("pufferlib-core") if version("pufferlib-core") != "-"
             else version("pufferlib"))]
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers) + f", cpu {platform.machine()}")
    load0 = os.getloadavg()[0]
    for fam, why in missing.items():
        print(f"peer missing: {fam}: {why}")
    rows = []  # (env, B, threads, system, value or None, why)
    pairs = {}  # (env, B) -> (shoal 2 threads, 1 thread, lowest, highest round ratio)
    for env_id in args.envs:
        space = space_of(env_id)
        for B in args.batches:
            for threads, cpus, peers in configs:
                why = {x: missing.get(family(x)) or not_applicable(x, B, threads)
                       for x in peers}
                run = ["shoal"] + [x for x in peers if not why[x]]
                got = measure_group(run, env_id, B, threads, cpus, space, args.rounds,
                                    args.window)
                for system in ["shoal"] + peers:
                    val, w = got.get(system), why.get(system)
                    if isinstance(val, Exception):
                        val, w = None, f"failed: {type(val).__name__}: {val}"
                    rows.append((env_id, B, threads, system, val, w))
                    print(f"  {env_id:<16}B={B:<4}t{threads} {system:<16}"
                          + (f"{val:>14,.0f}" if val is not None else f"{'-':>14}  ({w})"),
                          flush=True)
                if threads > 1:  # the threads' own ratio: the pair alone, more rounds
                    two, one, lo, hi = measure_pair(env_id, B, threads, cpus, space,
                                                    3 * args.rounds, args.window)
                    pairs[(env_id, B)] = (two, one, lo, hi)
                    print(f"  {env_id:<16}B={B:<4}t{threads} shoal 2 threads / 1 thread "
                          f"{two:,.0f} / {one:,.0f} = {two / one:.2f} (median round; rounds "
                          f"{lo:.2f}-{hi:.2f})", flush=True)
    os.sched_setaffinity(0, set(cpus_all))
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} CPUs; above that other work shared the cores)")

    # table: one row per (env, B, threads), shoal then each peer with shoal/peer
    print()
    shoal_of = {(e, b, t): v for e, b, t, s, v, _ in rows if s == "shoal"}
    for threads, _, peers in configs:
        print(f"{threads} core{'s' if threads > 1 else ''}: steps/s (shoal / peer)")
        head = f"{'env':<16}{'B':>5}{'shoal':>13}" + "".join(f"{p:>24}" for p in peers)
        print(head)
        for env_id in args.envs:
            for B in args.batches:
                sv = shoal_of.get((env_id, B, threads))
                line = f"{env_id:<16}{B:>5}{sv:>13,.0f}" if sv else f"{env_id:<16}{B:>5}{'-':>13}"
                for p in peers:
                    v = next((r[4] for r in rows if r[:4] == (env_id, B, threads, p)), None)
                    cell = f"{v:,.0f} ({sv / v:.1f}x)" if v and sv else "-"
                    line += f"{cell:>24}"
                print(line)
        print()
    if pairs:
        print("shoal on 2 cores: 2 threads / 1 thread (the pair alone, windows alternating: "
              "the median round, and the lowest-highest round; B=1: one thread both)")
        print(f"{'env':<16}" + "".join(f"{'B=' + str(B):>22}" for B in args.batches))
        for env_id in args.envs:
            cells = []
            for B in args.batches:
                t2, t1, lo, hi = pairs.get((env_id, B), (None, None, None, None))
                cells.append(f"{t2 / t1:.2f}x ({lo:.2f}-{hi:.2f})" if t2 and t1 else "-")
            print(f"{env_id:<16}" + "".join(f"{c:>22}" for c in cells))
        print()
    print("PufferLib Ocean C CartPole: not measured: pufferlib-core (installed) has no Ocean "
          "envs, and the full pufferlib 3.0.0 is an sdist whose build downloads raylib from "
          "GitHub, which this machine cannot reach")
    for (env_id, B), (t2, t1, _, _) in pairs.items():
        if t1 and t2:
            print(f"BENCH name=env_threads.py.{env_id}.b{B} value={t2:.0f} unit=steps/s "
                  f"baseline={t1:.0f} ratio={t2 / t1:.2f}")
    for env_id, B, threads, system, val, why in rows:
        if system == "shoal":
            continue
        sv = shoal_of.get((env_id, B, threads))
        tsfx = "" if threads == 1 else f".t{threads}"
        name = f"env.{env_id}.b{B}{tsfx}.{system}"
        if val and sv:
            print(f"BENCH name={name} value={sv:.0f} unit=steps/s baseline={val:.0f} "
                  f"ratio={sv / val:.2f}")
        else:
            print(f"BENCH name={name} value={sv or 0:.0f} unit=steps/s baseline=none ratio=none")
            print(f"  {name}: no baseline: {why}")
    for B in args.batches:
        sv = shoal_of.get(("CartPole-v1", B, 1))
        if sv:
            print(f"BENCH name=env.CartPole-v1.b{B}.puffer-ocean value={sv:.0f} unit=steps/s "
                  f"baseline=none ratio=none")
    print("  env.CartPole-v1.*.puffer-ocean: no baseline: PufferLib's Ocean envs are not "
          "installable here (above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
