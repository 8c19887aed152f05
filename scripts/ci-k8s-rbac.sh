#!/usr/bin/env bash
# The Kubernetes backend's main tests again, with the control plane running Node,RBAC
# authorization and escher (driver and task pods) as the ServiceAccount of the deploy section
# of docs/kubernetes.md. The whole k8s suite already ran with AlwaysAllow in the main pytest
# run; this adds the tests that exercise every RBAC rule escher is granted (and the refused
# ones), not every test twice.
set -euo pipefail
cd "$(dirname "$0")/.."
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 ESCHER_K8S_AUTH=rbac
set +e
python -m pytest -q -m k8s -p no:cacheprovider \
    tests/backends/kubernetes/test_backend.py \
    tests/backends/kubernetes/test_deploy.py \
    tests/backends/kubernetes/test_esl_on_k8s.py "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then echo "ci-k8s-rbac: pytest collected no tests" >&2; exit 1; fi
exit "$status"
