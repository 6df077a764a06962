# SPDX-License-Identifier: Apache-2.0
"""A policy trained by `shoal run` (a short CartPole-v1 run), loaded in Python, plays
exactly as `shoal eval` plays it. Labelled slow (about 15 s): it trains."""

import os
import re
import subprocess

import pytest

import shoal
from test_python_policy import python_eval

CLI = os.environ.get("SHOAL_CLI")
SRC = os.environ.get("SHOAL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))


@pytest.mark.skipif(not CLI, reason="SHOAL_CLI (the shoal program) not built")
def test_trained_policy_plays_as_shoal_eval(tmp_path):
    uri = "file://" + str(tmp_path / "runs")
    subprocess.run([CLI, "run", os.path.join(SRC, "configs/cartpole-apex.yaml"), "--quiet",
                    "--set", f"store.uri={uri}", "--set", "run.max_seconds=8",
                    "--set", "run.solve_return=0"], check=True, timeout=120,
                   capture_output=True)
    # The store folder holds the run and the store's own dot entries (.leases).
    (run,) = [n for n in os.listdir(tmp_path / "runs") if not n.startswith(".")]
    out = subprocess.run([CLI, "eval", run, "--store", uri, "--episodes", "16", "--seed", "3"],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"snapshot v(\d+).*return (-?[0-9.]+) ± ([0-9.]+) over 16 episodes "
                  r"\(min (-?[0-9.]+), max (-?[0-9.]+)\)", out)
    assert m, out
    pol = shoal.load_policy(uri, run=run)
    assert pol.version == int(m.group(1))
    ret = python_eval(pol, "CartPole-v1", 16, 3)
    got = (f"{ret.mean():.2f}", f"{ret.std():.2f}", f"{ret.min():.1f}", f"{ret.max():.1f}")
    assert got == m.group(2, 3, 4, 5), out
    # It learned something (a random policy scores ~20), so the check is not trivial.
    assert ret.mean() > 40, out
