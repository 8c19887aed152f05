#!/usr/bin/env bash
# What a new user gets, in a fresh virtual environment with nothing installed by hand:
# 1. the README's first command, exactly as written there;
# 2. the README's test command without Ray or Kubernetes, which runs every docs snippet
#    (tests/test_docs.py; snippets fenced `python ray` / `python k8s` run in the full suite).
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
first="$(awk '/^```bash/ {inside=1; next} inside {print; exit}' README.md | sed 's/[[:space:]]*#.*$//')"
echo "+ $first"
start=$SECONDS
eval "$first"
echo "README's first command: $((SECONDS - start)) s"
tests="$(awk '/^```bash/ {n++} n==2 && !/^```/ {print; exit}' README.md | sed 's/[[:space:]]*#.*$//')"
echo "+ $tests"
start=$SECONDS
set +e
eval "$tests -q -p no:cacheprovider"
status=$?
set -e
echo "README's test command without Ray or Kubernetes: $((SECONDS - start)) s"
if [ "$status" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$status"
