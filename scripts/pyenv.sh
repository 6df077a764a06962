#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The environments' venv: Python packages that "gym:" envs run on (Gymnasium, its Box2D
# and rendering extras, NumPy), and the build backend of pyproject.toml, pinned. `make
# deps` runs this after the Debian packages; the embedded Python of envs/gym.c starts from
# this venv unless SHOAL_ENV_PYTHON names another interpreter. Idempotent: a venv whose
# stamp matches the pins is left alone.
#   SHOAL_ENV_VENV   where the venv goes (default ~/.cache/shoal-env, outside the repo;
#                    the build's default, CMake's SHOAL_ENV_VENV, must name the same)
#   PIP_ARGS         extra arguments to pip (an index URL, --no-cache-dir)
# Its interpreter is Debian's /usr/bin/python3 (3.11), the libpython shoal links.
set -euo pipefail
venv=${SHOAL_ENV_VENV:-$HOME/.cache/shoal-env}
python=/usr/bin/python3
pins=(
  numpy==1.26.4      # NumPy 1 promotion rules (NEP 50 makes 0.001 * float32 a float32 in
                     # NumPy 2, which moves Pendulum-v1's reward off the built-in's, written to
                     # NumPy 1 Gymnasium), so gym:Pendulum-v1 and Pendulum-v1 agree bit for bit
  gymnasium==1.4.0
  box2d==2.3.10      # Gymnasium's Box2D envs (LunarLander, BipedalWalker, CarRacing)
  pygame==2.6.1      # Gymnasium's rgb_array rendering of classic control and Box2D
  ale-py==0.12.1     # the Arcade Learning Environment and its ROMs ("gym:ALE/Pong-v5")
  opencv-python-headless==4.10.0.84  # Gymnasium's AtariPreprocessing, the reference that
                     # tests/test_atari_exact.py holds shoal's Atari preprocessing to (4.x:
                     # the last line built for NumPy 1)
  # pyproject.toml's build backend and what it needs: test_pip_install builds the Python
  # package's wheel with this venv's pip (--no-build-isolation), without the network
  scikit-build-core==1.1.2
  packaging==26.4
  pathspec==1.1.1
)
stamp="$venv/.shoal-env-pins"
want=$(printf '%s\n' "${pins[@]}")
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "deps: the environments' venv $venv is up to date"
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
start=$(date +%s)
# shellcheck disable=SC2086
"$venv/bin/python" -m pip install -q --disable-pip-version-check ${PIP_ARGS:-} "${pins[@]}"
"$venv/bin/python" -c 'import gymnasium, numpy, Box2D, pygame, ale_py, cv2, scikit_build_core' >/dev/null
printf '%s\n' "$want" >"$stamp"
echo "deps: the environments' venv $venv: ${pins[*]} ($(( $(date +%s) - start )) s)"
