#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages listed in scripts/packages.txt that are not installed yet,
# then the environments' venv of scripts/pyenv.sh (pinned PyPI packages for gym: envs).
# Idempotent: does nothing (and needs no network) when all are present; runs
# `apt-get update` only when something is missing; uses sudo when not root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t pkgs < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages.txt" | grep -v '^$')
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#pkgs[@]} Debian packages present"
  exec "$here/pyenv.sh"
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "deps: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Google Cloud's `kubectl` package (on some machine images) owns /usr/bin/kubectl, which
# Debian's kubernetes-client also ships: apt-get would refuse the whole install. Divert
# Google's binary to kubectl.google-cloud first, so both stay installed.
if printf '%s\n' "${missing[@]}" | grep -qx kubernetes-client; then
  owner=$(dpkg-query -S /usr/bin/kubectl 2>/dev/null | grep -v '^diversion' | cut -d: -f1 || true)
  if [ -n "$owner" ] && [ "$owner" != kubernetes-client ] &&
    ! dpkg-divert --list /usr/bin/kubectl | grep -q kubernetes-client; then
    echo "deps: /usr/bin/kubectl belongs to $owner; diverting it to /usr/bin/kubectl.google-cloud"
    "${sudo[@]}" dpkg-divert --package kubernetes-client --rename \
      --divert /usr/bin/kubectl.google-cloud /usr/bin/kubectl
  fi
fi
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
"$here/pyenv.sh"
