#!/usr/bin/env bash
# What a new user gets, in a fresh virtual environment with nothing installed by hand:
# 1. the README's first command, exactly as written there;
# 2. the README's test command without Ray or Kubernetes, limited to the tests whose outcome
#    depends on what is installed: every docs snippet (tests/test_docs.py; snippets fenced
#    `python ray` / `python k8s` run in the full suite), every command and help example
#    (tests/cli), the public API and configuration, the evaluation (matplotlib is an extra),
#    the manifest reader (the Kubernetes client is an extra) and the verifier's file commands.
#    The rest of that selection runs unchanged in the full suite (scripts/test-all.sh); running it
#    twice cost CI about ten minutes. FRESH_VENV_ALL=1 runs the whole selection here.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_SENSITIVE=(tests/test_docs.py tests/cli tests/test_api.py tests/test_config.py
    tests/evaluation tests/manifests tests/verify/test_cli_files.py)
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
if [ "${FRESH_VENV_ALL:-0}" = 1 ]; then
    eval "$tests -q -p no:cacheprovider"
else
    eval "$tests -q -p no:cacheprovider ${INSTALL_SENSITIVE[*]}"
fi
status=$?
set -e
echo "README's test command without Ray or Kubernetes (install-sensitive tests): $((SECONDS - start)) s"
if [ "$status" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$status"
