#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/test_config_reference.sh SHOAL REFERENCE — docs/config-reference.md is what
# `shoal config keys --markdown` writes from the schemas today: a key added, removed or
# changed in run/*_config.c without regenerating the file fails here, with the diff.
set -euo pipefail
shoal=${1:?usage: test_config_reference.sh SHOAL REFERENCE}
ref=${2:?usage: test_config_reference.sh SHOAL REFERENCE}
[ -s "$ref" ] || { echo "FAIL: $ref is missing or empty" >&2; exit 1; }
now=$(mktemp)
trap 'rm -f "$now"' EXIT
"$shoal" config keys --markdown >"$now"
if ! diff -u "$ref" "$now"; then
  echo "FAIL: $ref is stale; regenerate it: build/bin/shoal config keys --markdown >docs/config-reference.md" >&2
  exit 1
fi
# Each algorithm has its section and table (a generator printing nothing would still
# match an emptied file; the file is checked in with all three).
for algo in apex impala ppo; do
  grep -q "^## .*: \`algo: $algo\`\$" "$ref" || { echo "FAIL: no section for $algo in $ref" >&2; exit 1; }
done
echo "ok: $ref matches shoal config keys --markdown ($(grep -c '^| `' "$ref") keys over 3 algorithms)"
