#!/usr/bin/env bash
# Run the Ray-marked tests on the oldest Ray version escher supports (the main suite runs the
# newest). A venv with that Ray and escher's dependencies is made once and reused; escher
# itself is this checkout (PYTHONPATH, which Ray's workers inherit).
#   RAY_OLDEST=2.40.0 [RAY_OLDEST_VENV=dir] bash scripts/ci-ray-versions.sh [pytest options]
#   bash scripts/ci-ray-versions.sh --install-only   # only make the venv (test-all.sh does this
#                                                    # in the background, during the main suite)
set -euo pipefail
cd "$(dirname "$0")/.."
install_only=0
if [ "${1:-}" = "--install-only" ]; then install_only=1; shift; fi
version="${RAY_OLDEST:-2.40.0}"
venv="${RAY_OLDEST_VENV:-$HOME/.cache/escher-venvs/ray-$version}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import ray, sys; sys.exit(ray.__version__ != '$version')" 2>/dev/null; then
    python -m venv --clear "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "ray[default]==$version" pytest pytest-timeout hypothesis \
        click rich "z3-solver>=4.12" "pydantic>=2.5" \
        "jsonschema>=4.18" "fastjsonschema>=2.19"
fi
if [ "$install_only" = 1 ]; then exit 0; fi
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "Ray-marked tests on Ray $version ($venv)"
"$venv/bin/python" -m pytest -q -m ray -p no:cacheprovider "$@" \
    tests/backends/ray/test_conformance.py tests/backends/ray/test_ray_backend.py
