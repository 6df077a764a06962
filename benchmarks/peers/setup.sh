#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The peers' environment: a venv with the libraries a user would pick instead of
# shoal, pinned, for the benchmarks in benchmarks/peers and the interop tests
# (tests/test_peers_*.py). Nothing of shoal or of `make test` needs it; the tests that use it
# skip where it is missing. Idempotent: a venv whose stamp matches the pins is left alone.
#   SHOAL_PEERS_VENV   where the venv goes (default ~/.cache/shoal-peers, outside the repo)
#   PIP_ARGS           extra arguments to pip (e.g. an index URL or --no-cache-dir)
#
# Pins (2026-12-01). torch comes from PyPI, its CUDA 12.8 build with the nvidia-* wheels
# (about 3 GB in the venv; the CPU-only wheel is on download.pytorch.org, not reachable from
# the development machines). pufferlib-core pins torch==2.9.0, so torch is that version.
# pufferlib (the full package with the Ocean C envs) is an sdist whose build downloads raylib
# from GitHub, which these machines cannot reach: it is not installed (docs/benchmarks.md,
# Environments).
set -euo pipefail
venv=${SHOAL_PEERS_VENV:-$HOME/.cache/shoal-peers}
python=${SHOAL_PEERS_PYTHON:-/usr/bin/python3}
pins=(
  numpy==2.4.6
  gymnasium==1.4.0
  envpool==1.2.5
  pufferlib-core==3.0.23
  torch==2.9.0
  stable-baselines3==2.9.2
  tensorboard==2.21.0
  safetensors==0.8.0
  box2d==2.3.10      # LunarLander-v3 for the learning benchmark's LunarLander peers
  pygame==2.6.1      # Gymnasium's box2d package imports it (CarRacing) even for LunarLander
)
stamp="$venv/.shoal-peers-pins"
want=$(printf '%s\n' "${pins[@]}")
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "peers: $venv is up to date"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip ${PIP_ARGS:-}
start=$(date +%s)
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install ${PIP_ARGS:-} "${pins[@]}"
echo "peers: installed in $(( $(date +%s) - start )) s into $venv"
"$venv/bin/python" - <<'PY'
import importlib
for m in ("numpy", "gymnasium", "envpool", "pufferlib", "torch", "stable_baselines3",
          "tensorboard", "safetensors", "Box2D", "pygame"):
    mod = importlib.import_module(m)
    print(f"peers: {m} {getattr(mod, '__version__', '?')}")
PY
printf '%s\n' "$want" >"$stamp"
