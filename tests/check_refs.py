# SPDX-License-Identifier: Apache-2.0
"""test_docs_refs: no tracked file refers outside the repository.

A reader has the repository and nothing else, so no file may point at notes that live
beside it (a sibling folder of shared notes, baselines, design or style files), at a
tracker's issue numbers, or at a folder of one development machine. Where a figure or a
lesson came from elsewhere, the repository states it with its source (docs/benchmarks.md
holds the reference figures).

Usage: check_refs.py [ROOT]   (ROOT: the source tree, default the current folder)

Lists every tracked file with `git ls-files` and prints FILE:LINE: TEXT for each line
that matches, then exits 1; exits 0 when none does. Outside a git checkout (a source
tarball) there is nothing to list: it prints SKIPPED and exits 77, which ctest counts as
skipped. tests/fixtures is left out (third-party schema files, quoted as they are).
"""
import os
import re
import subprocess
import sys

# The patterns are written so that this file does not match them itself.
PATTERNS = [
    (re.compile(r"\.\./shared"), "a path outside the repository (a sibling shared folder)"),
    (re.compile(r"(^|[^a-z_/])shared/(notes|baselines|DESIGN|STYLE)"),
     "notes kept outside the repository"),
    (re.compile(r"[Ii]ssue #?[0-9]+"), "an issue number (state what it said instead)"),
    (re.compile(r"/work/(shared|main|wt)"), "a development machine's folder"),
    (re.compile(r"/home/[a-z][a-z0-9_-]*/"), "a user's home folder"),
]
SKIP_PREFIXES = ("tests/fixtures/",)


def self_test():
    # Each pattern must catch what it is for and leave ordinary text alone.
    bad = ["see ../" + "sha" + "red/notes/x.md", "`" + "sha" + "red/baselines`",
           "(Iss" + "ue 25)", "iss" + "ue #7", "/wo" + "rk/shared/baselines/README.md",
           "/ho" + "me/alice/runs"]
    good = ["a shared/ folder in the device checkout", "lib/shared/notes.c",
            "the issue is the baseline", "/usr/share/datasets/fashion-mnist",
            "/work/resolved.yaml"]
    for s in bad:
        assert any(p.search(s) for p, _ in PATTERNS), "not caught: " + s
    for s in good:
        assert not any(p.search(s) for p, _ in PATTERNS), "caught: " + s


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    self_test()
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        print("SKIPPED: %s is not a git checkout (or git is missing): no file list" % root)
        return 77
    files = [f for f in out.decode().split("\0") if f and not f.startswith(SKIP_PREFIXES)]
    found = 0
    for f in files:
        path = os.path.join(root, f)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as fh:
            data = fh.read()
        if b"\0" in data[:8192]:
            continue  # binary
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            for p, why in PATTERNS:
                if p.search(line):
                    print("%s:%d: %s: %s" % (f, n, why, line.strip()[:160]))
                    found += 1
                    break
    if found:
        print("%d line(s) refer outside the repository; state the fact and its source here "
              "instead" % found)
        return 1
    print("checked %d tracked files: no reference outside the repository" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
