#!/usr/bin/env bash
# Install every extra, provision the local Kubernetes control plane, run the whole test suite.
# Without arguments the suite runs in two parts, each test exactly once. First every test but
# the Ray ones, in parallel (pytest-xdist, ESCHER_TEST_WORKERS processes, default 4): the
# Kubernetes tests of one module share one worker and its control plane (modules spread over
# the workers), their chaos tests a group of their own (tests/conftest.py groups them);
# the cluster tests mostly wait, so this keeps 2 cores busy. Then the Ray tests (-m ray) alone
# in one plain pytest process, as before (in xdist workers the Ray chaos tests failed: Ray's
# node start registers a signal handler; run beside the rest, test_node_removal failed).
# ESCHER_TEST_WORKERS=0, or any pytest arguments: one process, as plain `python -m pytest`.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[all]'
if [ -x scripts/provision-k8s.sh ]; then bash scripts/provision-k8s.sh; fi
bash scripts/ci-browser.sh   # headless Chromium for the browser tests of escher view
# The venv with the oldest supported Ray (for the last step) installs meanwhile.
oldest_ray=""
if [ "$#" -eq 0 ]; then
    oldest_log="$(mktemp)"
    bash scripts/ci-ray-versions.sh --install-only >"$oldest_log" 2>&1 &
    oldest_ray=$!
fi
# The same gates as CI: lint, format, types (fail fast, before the long suite).
ruff check escher tests bench
ruff format --check escher tests bench
mypy
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
workers="${ESCHER_TEST_WORKERS:-4}"
set +e
if [ "$workers" != 0 ] && [ "$#" -eq 0 ]; then
    python -m pytest -q -n "$workers" --dist loadgroup -m "not ray"
    status=$?
    # The Kubernetes tests with RBAC (scripts/ci-k8s-rbac.sh) beside the Ray tests: their own
    # control plane on loopback, no Ray; both mostly wait on their clusters.
    rbac_log="$(mktemp)"
    bash scripts/ci-k8s-rbac.sh >"$rbac_log" 2>&1 &
    rbac=$!
    python -m pytest -q -p no:xdist -m ray  # alone, in one process, as before
    ray_status=$?
    wait "$rbac"
    rbac_status=$?
    echo "Kubernetes tests with RBAC (scripts/ci-k8s-rbac.sh):"
    cat "$rbac_log"
    rm -f "$rbac_log"
    if [ "$status" -eq 0 ]; then status=$ray_status; fi
    if [ "$status" -eq 0 ]; then status=$rbac_status; fi
else
    python -m pytest -q "$@"
    status=$?
fi
if [ -n "$oldest_ray" ]; then
    wait "$oldest_ray"
    installed=$?
    cat "$oldest_log"
    rm -f "$oldest_log"
    if [ "$installed" -ne 0 ]; then echo "ci-ray-versions: installing the oldest Ray failed" >&2; fi
    if [ "$status" -eq 0 ]; then status=$installed; fi
fi
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ] && [ "$workers" = 0 ]; then
    bash scripts/ci-k8s-rbac.sh; status=$?  # k8s tests with RBAC (beside Ray above otherwise)
fi
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ]; then bash scripts/ci-ray-versions.sh; status=$?; fi  # oldest Ray
set -e
if [ "$status" -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi
exit "$status"
