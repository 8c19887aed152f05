"""The preamble the benchmark scripts share: import it first.

    import _setup  # noqa: F401 - this checkout first on sys.path

puts this checkout (the repository root) first on `sys.path`, so a script run as
``python bench/<script>.py`` imports `escher` and `tests.support` from the tree it sits in,
not an installed copy. A script that starts a local Ray cluster also applies `RAY_ENV`
before ``import ray``::

    os.environ.update(_setup.RAY_ENV)
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The repository root of this checkout.
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: A local Ray cluster as the benchmarks start it: no token auth, no usage stats, and the
#: driver never connects to some other running cluster. A value already set in the
#: environment wins.
RAY_ENV = {
    key: os.environ.get(key, default)
    for key, default in (
        ("RAY_AUTH_MODE", "disabled"),
        ("RAY_USAGE_STATS_ENABLED", "0"),
        ("RAY_ENABLE_AUTO_CONNECT", "0"),
    )
}


def anti_affinity_pod(
    template: Mapping[str, Any], i: int, groups: int, namespace: str
) -> dict[str, Any]:
    """Pod i of a run from scheduler_perf's `pod-with-pod-anti-affinity.yaml` template: named
    ``aa-<i>``, colour ``g<i % groups>``, its required anti-affinity term matching that
    colour in `namespace` (one group per colour, as the Kubernetes benchmark has one)."""
    pod = copy.deepcopy(dict(template))
    color = f"g{i % groups}"
    pod["metadata"] = {"name": f"aa-{i}", "labels": {"color": color}}
    term = pod["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ][0]
    term["labelSelector"] = {"matchLabels": {"color": color}}
    term["namespaces"] = [namespace]
    return pod
