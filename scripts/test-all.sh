#!/usr/bin/env bash
# Install every extra, provision the local Kubernetes control plane, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[all]'
if [ -x scripts/provision-k8s.sh ]; then bash scripts/provision-k8s.sh; fi
bash scripts/ci-browser.sh   # headless Chromium for the browser tests of escher view
# The same gates as CI: lint, format, types (fail fast, before the long suite).
ruff check escher tests bench
ruff format --check escher tests bench
mypy
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
set +e
python -m pytest -q "$@"
status=$?
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ]; then bash scripts/ci-k8s-rbac.sh; status=$?; fi  # k8s tests with RBAC
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ]; then bash scripts/ci-ray-versions.sh; status=$?; fi  # oldest Ray
set -e
if [ "$status" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$status"
