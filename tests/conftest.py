"""Rules for the whole suite.

Test modules of a backend whose extra is not installed are not collected (their tests would
only be skipped, but some import the extra at module level): so the fast suite runs after
``pip install -e '.[test]'`` alone. The header of the run says what was left out.
urllib3's per-attempt "Retrying" warnings are silenced.
Under pytest-xdist (``-n N --dist loadgroup``, as scripts/test-all.sh runs the tests other than
the Ray ones) the tests of each real cluster run in one worker, in their usual order, sharing
its one cluster.
"""

from __future__ import annotations

import importlib.util
import logging

import pytest

#: Shared fixtures: one Ray cluster, and `k8s_cluster` (one control plane for the backend's
#: and the chaos tests).
pytest_plugins = ["tests.support.ray_cluster", "tests.support.k8s_fixture"]

_EXTRAS = {
    "kubernetes": ("backends/kubernetes/*.py", "escher-sched[k8s]"),
    "ray": ("backends/ray/*.py", "escher-sched[ray]"),
}

_missing = {name: v for name, v in _EXTRAS.items() if importlib.util.find_spec(name) is None}

collect_ignore_glob = [pattern for pattern, _ in _missing.values()]

# urllib3 logs each immediate re-connect while an API server restarts; a failing test's report
# would be those lines. escher logs its own retries (logger "escher.kubernetes").
logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def pytest_report_header() -> list[str]:
    """Say which backends' tests are not collected, and what to install for them."""
    return [
        f"{name} is not installed: tests/{pattern} not collected (pip install '{extra}')"
        for name, (pattern, extra) in _missing.items()
    ]


#: Marker (or session fixture ``<name>_cluster``) -> the xdist group its tests run in.
_CLUSTER_GROUPS = ("ray", "k8s")


def _cluster_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that needs a real cluster, else None.

    The Kubernetes tests form a group per test module (a worker starts one control plane the
    first time it runs one, and its later modules share it, as in a serial run), and their chaos
    tests (tests/chaos) a group of their own. The Ray tests stay one group: two Ray clusters
    side by side made the Ray chaos tests fail.
    """
    fixtures = getattr(item, "fixturenames", ())
    for name in _CLUSTER_GROUPS:
        if item.get_closest_marker(name) or f"{name}_cluster" in fixtures:
            if name == "ray":
                return name
            if item.get_closest_marker("chaos"):
                return "k8s-chaos"
            return f"k8s:{item.path.name}"  # a module's tests share a plane; modules spread
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, each group of cluster tests runs in one worker, on one cluster.

    The Ray tests (marked ``ray`` or using ``ray_cluster``) form one group and the Kubernetes
    tests one per module (their chaos tests one more, see `_cluster_group`), so ``--dist
    loadgroup`` gives each group to a single worker, in collection order (the node-failure
    tests still run after the others), while the rest spreads out.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _cluster_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
