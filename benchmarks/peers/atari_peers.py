# SPDX-License-Identifier: Apache-2.0
"""Atari frames/s (one frame = one emulator frame; a step with frame skip 4 is 4 frames) of
shoal's ALE games against the Atari envs a user would pick instead, preprocessing included
everywhere, the same settings for all: Pong-v5, no-op starts up to 30, frame skip 4 with
the max of the last two frames, 84x84 grayscale by INTER_AREA, a stack of 4, sticky actions
(repeat_action_probability 0.25, v5's own; 0 for all if EnvPool refused it), no life-loss
terminals and no reward clipping (EnvPool's defaults), uniformly random actions.

Systems:
  shoal            build/benchmarks/atari_sps --serve: env_vec_step over gym:ALE/Pong-v5 in
                   C, one process per core (each pinned to its own CPU, B/cores copies
                   each), rates summed: how shoal's actors scale
  envpool-sync     envpool.make_gymnasium("Pong-v5", num_envs=B, batch_size=B, num_threads=T)
  envpool-async    the same with num_envs=2B, batch_size=B, send/recv (each recv B steps)
  gymnasium-async  AsyncVectorEnv of B processes, each gym.make("ALE/Pong-v5", frameskip=1)
                   + AtariPreprocessing + FrameStackObservation, run by the environments'
                   venv's python (ale-py and OpenCV are there, not in the peers' venv);
                   B = 16 only: 64 processes would swamp two cores
EnvPool's use_fire_reset (a FIRE after each reset) is turned off: neither shoal nor
AtariPreprocessing presses it. EnvPool and Gymnasium spend a step on each autoreset, shoal
resets within the step that ends an episode (Pong's episodes are ~1000 steps: it does not
show). The no-op starts' frames are counted by nobody.

One core (t1): this process (EnvPool with 1 thread; the Gymnasium subprocess and its
workers) or shoal's one process is pinned to one CPU; two cores (t2): to two CPUs (EnvPool
2 threads). Each figure is the best of --rounds windows of --window seconds; at each (B,
cores) every system is made first and their windows alternate, round after round, so that
load from elsewhere on the shared machine falls on all alike; the best window is the least
disturbed one. Systems not being timed sit blocked (no busy-waiting).

Prints a table, per-core figures, the goal line (shoal's frames/s per core against
EnvPool's), and
  BENCH name=atari.pong.b<B>.t<T>.<peer> value=<shoal> unit=frames/s baseline=<peer>
        ratio=<shoal/peer>
(ratio > 1: shoal is faster). A missing peer gives baseline=none ratio=none and why.
Run: make bench BENCH=atari_peers, or benchmarks/peers/atari_peers.sh [--rounds N]
[--window S] [--batches 16 64].
"""

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time

GAME = "Pong-v5"
FRAME_SKIP = 4
BATCHES = [16, 64]
PEERS = ["envpool-sync", "envpool-async", "gymnasium-async"]

missing = {}  # peer family -> why it is missing
mods = {}

# Gymnasium's side, run by the environments' venv's python: makes the vector env, prints
# "ready", then a window per "<seconds>" line on stdin, answering "<steps/s>".
GYM_SERVER = r"""
import sys, time
import numpy as np
import gymnasium as gym
import ale_py
gym.register_envs(ale_py)
B, sticky = int(sys.argv[1]), float(sys.argv[2])

def make():
    e = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=sticky)
    e = gym.wrappers.AtariPreprocessing(e, noop_max=30, frame_skip=4, screen_size=84,
                                        terminal_on_life_loss=False, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(e, 4)

env = gym.vector.AsyncVectorEnv([make] * B)
env.reset(seed=0)
rng = np.random.default_rng(0)
n = env.single_action_space.n
print("ready", flush=True)
for line in sys.stdin:
    secs = float(line)
    steps, t0 = 0, time.perf_counter()
    while True:
        block = rng.integers(0, n, (8, B))
        for k in range(8):
            env.step(block[k])
        steps += 8 * B
        t = time.perf_counter() - t0
        if t >= secs:
            break
    print(steps / t, flush=True)
env.close()
"""


def version(name):
    try:
        from importlib.metadata import version as v
        return v(name)
    except Exception:  # noqa: BLE001
        return "-"


def env_python():
    return os.path.join(os.environ.get("SHOAL_ENV_VENV",
                                       os.path.expanduser("~/.cache/shoal-env")), "bin", "python")


def try_import():
    try:
        import numpy  # noqa: F401
        import envpool
        mods["envpool"] = envpool
    except Exception as e:  # noqa: BLE001 - any failure means the peer is missing
        missing["envpool"] = f"import envpool failed ({e}); run `make peers`"
    py = env_python()
    if not os.access(py, os.X_OK):
        missing["gymnasium"] = f"no environments' venv python at {py} (make deps)"
        return
    r = subprocess.run([py, "-c", "import ale_py, cv2, gymnasium; print(gymnasium.__version__, "
                        "ale_py.__version__, cv2.__version__)"], capture_output=True, text=True)
    if r.returncode:
        missing["gymnasium"] = (f"{py} lacks gymnasium, ale-py or OpenCV "
                                f"({r.stderr.strip().splitlines()[-1:]}); run `make deps`")
    else:
        mods["gymnasium"] = r.stdout.split()


def sticky_probability():
    """0.25 (v5's own) if EnvPool accepts it for Pong-v5 (or is missing), else 0."""
    if "envpool" not in mods:
        return 0.25
    try:
        mods["envpool"].make_spec(GAME, repeat_action_probability=0.25)
        return 0.25
    except Exception:  # noqa: BLE001 - refused: the same 0 for everyone
        return 0.0


def family(peer):
    return peer.split("-")[0]


# ---- the systems --------------------------------------------------------------------

class Served:
    """A subprocess that prints "ready" and then answers each "<seconds>" line with a
    window's rate (its first number, steps/s)."""

    def __init__(self, argv, name):
        self.name = name
        # stderr to a file: an unread pipe would fill up and block the child
        self.err = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True, bufsize=1)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            self.p.wait()
            raise RuntimeError(f"{name} did not start: {line.strip()} {self.stderr()}")

    def stderr(self):
        self.err.seek(0)
        return self.err.read().strip()[-400:]

    def window_steps(self, secs):
        self.p.stdin.write(f"{secs}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} died: {self.stderr()}")
        return float(line.split()[0])

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.err.close()


class InProcess:
    """EnvPool, stepped by this process."""

    def __init__(self, B, threads, is_async, sticky):
        import numpy as np
        ep = mods["envpool"]
        kw = dict(batch_size=B, num_threads=threads, seed=0, repeat_action_probability=sticky,
                  use_fire_reset=False)
        self.B, self.rng, self.np = B, np.random.default_rng(0), np
        if is_async:
            self.env = ep.make_gymnasium(GAME, num_envs=2 * B, **kw)
            self.env.async_reset()
            env = self.env

            def step(a):
                info = env.recv()[-1]
                env.send(a, info["env_id"])

            self.step = step
        else:
            self.env = ep.make_gymnasium(GAME, num_envs=B, **kw)
            self.env.reset()
            self.step = self.env.step
        self.n = self.env.action_space.n

    def window_steps(self, secs):
        step, B = self.step, self.B
        steps, t0 = 0, time.perf_counter()
        while True:
            block = self.rng.integers(0, self.n, (8, B), dtype=self.np.int32)
            for k in range(8):
                step(block[k])
            steps += 8 * B
            t = time.perf_counter() - t0
            if t >= secs:
                return steps / t

    def close(self):
        self.env.close()


def make_system(system, B, cores, cpus, sticky):
    if system == "shoal":
        opts = f"repeat_action_probability={sticky},episodic_life=0,reward_clip=0"
        return Served([os.environ.get("SHOAL_ATARI_SPS", "build/benchmarks/atari_sps"),
                       "--serve", "--id", "gym:ALE/" + GAME, "--options", opts, "--B", str(B),
                       "--procs", str(cores), "--cpus", ",".join(map(str, sorted(cpus)))],
                      "shoal atari_sps")
    if system == "envpool-sync":
        return InProcess(B, cores, False, sticky)
    if system == "envpool-async":
        return InProcess(B, cores, True, sticky)
    if system == "gymnasium-async":
        return Served([env_python(), "-c", GYM_SERVER, str(B), str(sticky)], "gymnasium")
    raise ValueError(system)


def not_applicable(system, B):
    if system == "gymnasium-async" and B > 16:
        return (f"AsyncVectorEnv starts one process per env: {B} processes would swamp "
                f"two cores (measured at B = 16 only)")
    return None


def measure_group(systems, B, cores, cpus, sticky, rounds, window):
    """{system: best frames/s or an exception}; windows alternate between the systems."""
    os.sched_setaffinity(0, cpus)  # what this process starts inherits it
    out, made = {}, {}
    try:
        for x in systems:
            try:
                made[x] = make_system(x, B, cores, cpus, sticky)
                made[x].window_steps(min(0.3, window))  # warm-up: first steps, thread starts
            except Exception as e:  # noqa: BLE001 - reported in the table
                out[x] = e
                made.pop(x, None)
        best = {x: 0.0 for x in made}
        for _ in range(rounds):
            for x, s in list(made.items()):
                try:
                    best[x] = max(best[x], s.window_steps(window) * FRAME_SKIP)
                except Exception as e:  # noqa: BLE001
                    out[x] = e
                    del made[x]
                    s.close()
        for x in made:
            out[x] = best[x]
    finally:
        for s in made.values():
            s.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="windows per figure")
    ap.add_argument("--window", type=float, default=1.5, help="seconds")
    ap.add_argument("--batches", nargs="*", type=int, default=BATCHES)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    started = time.perf_counter()
    try_import()
    sticky = sticky_probability()
    cpus_all = sorted(os.sched_getaffinity(0))
    configs = [(1, {cpus_all[0]})]
    if len(cpus_all) >= 2:
        configs.append((2, set(cpus_all[:2])))
    else:
        print("atari_peers: one CPU available: no two-core figures")

    print(f"atari_peers: {GAME} emulator frames/s (steps x {FRAME_SKIP}), preprocessing "
          f"included, best of {args.rounds} windows of {args.window:.2f} s per figure, the "
          f"systems' windows alternating, {datetime.date.today()} (shared machine: read +-20%)")
    how = ("EnvPool accepts it" if sticky else "EnvPool refused 0.25, so 0 for all")
    print(f"settings, the same for all: noop_max 30, frame skip 4 (max of the last two), "
          f"84x84 gray INTER_AREA, stack 4, repeat_action_probability {sticky} ({how}), "
          f"episodic_life off and reward_clip off (EnvPool's v5 defaults), no FIRE at reset "
          f"(EnvPool use_fire_reset=False)")
    gv = mods.get("gymnasium", ["-", "-", "-"])
    vers = [("python", platform.python_version()), ("envpool", version("envpool")),
            ("env venv gymnasium", gv[0]), ("ale-py", gv[1]), ("opencv", gv[2])]
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers) + f", cpu {platform.machine()}")
    load0 = os.getloadavg()[0]
    for fam, why in missing.items():
        print(f"peer missing: {fam}: {why}")

    rows = {}  # (B, cores, system) -> (frames/s or None, why)
    for B in args.batches:
        for cores, cpus in configs:
            why = {x: missing.get(family(x)) or not_applicable(x, B) for x in PEERS}
            run = ["shoal"] + [x for x in PEERS if not why[x]]
            got = measure_group(run, B, cores, cpus, sticky, args.rounds, args.window)
            for system in ["shoal"] + PEERS:
                val, w = got.get(system), why.get(system)
                if isinstance(val, Exception):
                    val, w = None, f"failed: {type(val).__name__}: {val}"
                rows[(B, cores, system)] = (val, w)
                print(f"  B={B:<4}t{cores} {system:<16}"
                      + (f"{val:>12,.0f} frames/s" if val is not None else f"{'-':>12}  ({w})"),
                      flush=True)
    os.sched_setaffinity(0, set(cpus_all))
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} CPUs; above that other work shared the cores); "
          f"{time.perf_counter() - started:.0f} s in all")

    if any(rows[(B, c, "shoal")][0] is None for B in args.batches for c, _ in configs):
        print("atari_peers: shoal's atari_sps failed: "
              + "; ".join(str(w) for (B, c, s), (v, w) in rows.items() if s == "shoal" and w))
        return 1

    print()
    print("frames/s (shoal / peer)")
    print(f"{'B':>4}{'cores':>6}{'shoal':>12}" + "".join(f"{p:>26}" for p in PEERS))
    for B in args.batches:
        for cores, _ in configs:
            sv = rows[(B, cores, "shoal")][0]
            line = f"{B:>4}{cores:>6}{sv:>12,.0f}"
            for p in PEERS:
                v = rows[(B, cores, p)][0]
                line += f"{(f'{v:,.0f} ({sv / v:.2f}x)' if v else '-'):>26}"
            print(line)
    print()
    print("per core: frames/s / cores")
    print(f"{'B':>4}{'cores':>6}{'shoal':>12}" + "".join(f"{p:>18}" for p in PEERS))
    for B in args.batches:
        for cores, _ in configs:
            line = f"{B:>4}{cores:>6}{rows[(B, cores, 'shoal')][0] / cores:>12,.0f}"
            for p in PEERS:
                v = rows[(B, cores, p)][0]
                line += f"{(f'{v / cores:,.0f}' if v else '-'):>18}"
            print(line)
    # the goal: shoal's best frames/s per core against EnvPool's best (either mode)
    per_core = lambda s: max(((rows[(B, c, s)][0] or 0) / c, B, c)  # noqa: E731
                             for B in args.batches for c, _ in configs)
    sp = per_core("shoal")
    ep = max(per_core("envpool-sync"), per_core("envpool-async"))
    print()
    if ep[0]:
        print(f"goal: shoal {sp[0]:,.0f} frames/s per core (B={sp[1]}, {sp[2]} core(s)) vs "
              f"EnvPool {ep[0]:,.0f} (B={ep[1]}, {ep[2]} core(s)): ratio {sp[0] / ep[0]:.2f} "
              f"(goal >= 1)")
        print(f"BENCH name=atari.pong.per-core.envpool value={sp[0]:.0f} unit=frames/s/core "
              f"baseline={ep[0]:.0f} ratio={sp[0] / ep[0]:.2f}")
    else:
        print(f"goal: shoal {sp[0]:,.0f} frames/s per core vs EnvPool: not measured "
              f"({missing.get('envpool', 'failed')})")
        print(f"BENCH name=atari.pong.per-core.envpool value={sp[0]:.0f} unit=frames/s/core "
              f"baseline=none ratio=none")
    for B in args.batches:
        for cores, _ in configs:
            sv = rows[(B, cores, "shoal")][0]
            for p in PEERS:
                v, why = rows[(B, cores, p)]
                name = f"atari.pong.b{B}.t{cores}.{p}"
                if v:
                    print(f"BENCH name={name} value={sv:.0f} unit=frames/s baseline={v:.0f} "
                          f"ratio={sv / v:.2f}")
                else:
                    print(f"BENCH name={name} value={sv:.0f} unit=frames/s baseline=none "
                          f"ratio=none")
                    print(f"  {name}: no baseline: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
