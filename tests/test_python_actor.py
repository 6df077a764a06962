# SPDX-License-Identifier: Apache-2.0
"""A real shoal-learner for configs/cartpole-apex.yaml fed only by two Python actors
(examples/python_actor.py, written from docs/actor-protocol.md): the learner's greedy
evaluation must solve CartPole-v1 (mean return >= 475 over 100 episodes, the config's
bar) within run.max_seconds = 240, and no batch may be refused.

Measured on 2 shared cores (3 runs): solved (greedy eval 490.9, 500, 500) after 42,658,
263,072 and 301,217 env steps, in 3.0, 13.1 and 17.8 s of training; the C actors'
test_apex solve takes about 250,000. Labelled integration and slow: it trains.

test_priorities checks the actor's n-step priorities against hand-worked values."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

SRC = os.environ.get("SHOAL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
LEARNER = os.environ.get("SHOAL_LEARNER")
ACTORS = 2
MAX_SECONDS = 240

sys.path.insert(0, os.path.join(SRC, "examples"))
import python_actor  # noqa: E402


def test_priorities():
    """n = 2, gamma = 0.5, rewards 1, 2, 4, 8 with Q(s_t, a_t) = 0 and max Q = 10 at
    every step; the episode is truncated at its 4th step with max Q(s_final) = 20."""
    p = python_actor.Pending()
    for t, r in enumerate([1.0, 2.0, 4.0, 8.0]):
        p.steps.append({"reward": r, "term": 0, "trunc": int(t == 3), "q_sa": 0.0,
                        "max_q": 10.0, "max_q_final": 20.0 if t == 3 else 0.0})
        if t == 1:
            assert p.ready(2, 0.5) == []  # step 0 waits for step 2 to be acted on
    got = [s["priority"] for s in p.ready(2, 0.5)]
    # R_0 = 1 + 0.5*2, + 0.25*10 (s_2); R_1 = 2 + 0.5*4, + 0.25*10 (s_3);
    # R_2 = 4 + 0.5*8, + 0.25*20 (truncated after 2 steps); R_3 = 8 + 0.5*20.
    assert got == [4.5, 6.5, 13.0, 18.0]
    assert p.steps == []
    # Terminated: no bootstrap.
    p.steps.append({"reward": 3.0, "term": 1, "trunc": 0, "q_sa": 5.0, "max_q": 9.0,
                    "max_q_final": 0.0})
    assert [s["priority"] for s in p.ready(3, 0.9)] == [2.0]


def events(lines):
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


@pytest.mark.skipif(not LEARNER, reason="SHOAL_LEARNER (shoal-learner) not built")
def test_python_actors_train_cartpole(tmp_path):
    run = f"pyactor-{os.getpid()}"
    learner = subprocess.Popen(
        [LEARNER, "--config", os.path.join(SRC, "configs/cartpole-apex.yaml"), "--run", run,
         "--set", f"store.uri=file://{tmp_path}/store", "--set", "learner.listen=127.0.0.1:0",
         "--set", f"actors={ACTORS}", "--set", f"run.max_seconds={MAX_SECONDS}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    actors = []
    # Every process has a bounded time: the learner stops itself at run.max_seconds; this
    # timer kills whatever still runs well after that.
    killer = threading.Timer(MAX_SECONDS + 60, lambda: [p.kill() for p in [learner] + actors])
    killer.start()
    t0 = time.monotonic()
    try:
        first = json.loads(learner.stdout.readline())
        assert first["event"] == "listening", first
        port = first["port"]
        for i in range(ACTORS):
            # The flags repeat the config's values (the actor reads no YAML).
            actors.append(subprocess.Popen(
                [sys.executable, os.path.join(SRC, "examples/python_actor.py"),
                 "--target", f"127.0.0.1:{port}", "--run", run, "--index", str(i),
                 "--actors", str(ACTORS), "--num-envs", "16", "--send-steps", "16",
                 "--pull-steps", "100", "--eps", "0.4", "--eps-alpha", "7",
                 "--n-step", "3", "--gamma", "0.99",
                 "--proto", os.path.join(SRC, "proto/shoal.proto")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        lout = events(learner.stdout)
        lerr = learner.stderr.read()
        learner.wait()
        wall = time.monotonic() - t0
        aouts = [p.communicate() for p in actors]
    finally:
        killer.cancel()
        for p in [learner] + actors:
            if p.poll() is None:
                p.kill()
                p.wait()
    done = [e for e in lout if e["event"] == "done"]
    assert done, lerr
    done = done[-1]
    progress = [e for e in lout if e["event"] == "progress"]
    summary = {"reason": done["reason"], "eval": done["eval"], "env_steps": done["env_steps"],
               "updates": done["updates"], "train_s": done["t"], "wall_s": round(wall, 1)}
    print("python actors:", json.dumps(summary))
    ainfo = []
    for i, (out, err) in enumerate(aouts):
        ev = [e for e in events(out.splitlines()) if e["event"] == "actor_done"]
        assert ev, f"actor {i}: {err[-2000:]}"
        ainfo.append(ev[0])
        print(f"actor {i}:", json.dumps(ev[0]))
    # Solved: the learner's own greedy evaluation (100 episodes) reached the bar.
    assert done["reason"] == "solved", (summary, lerr[-2000:])
    assert done["eval"] >= 475, summary
    # Nothing refused: the learner's count of bad batches and refused calls, and the
    # actors' count of INVALID_ARGUMENT replies.
    assert done["bad_batches"] == 0, done
    assert all(e["rejected"] == 0 for e in progress), progress[-1]
    for e in ainfo:
        assert e["invalid"] == 0, e
        assert e["batches"] > 0 and e["pulls"] > 0, e
        assert e["reason"] == "the learner is stopping", e
