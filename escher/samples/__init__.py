"""Sample files shipped with escher: a plan, a cluster and a workload to try the commands on.

``plan.json`` is the plan of `escher demo` (four pairs of co-located tasks, spread two tasks
to a node), ``cluster.json`` the demo's cluster (four nodes of 4 CPUs and 16Gi of memory) and
``workload.json`` a small what-if workload, ``app.py`` the demo as an app (`escher plan`),
``manifests.yaml`` a Kubernetes Deployment and ``nodes-and-pods.json`` a cluster as
``kubectl get nodes,pods -A -o json`` writes it (`escher verify -f`).
Memory is in bytes, written with Kubernetes suffixes (``"2Gi"``). `escher demo` prints the
commands that use them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: The sample files, by name.
SAMPLES = (
    "plan.json",
    "cluster.json",
    "workload.json",
    "app.py",
    "manifests.yaml",
    "nodes-and-pods.json",
)


def sample_path(name: str) -> Path:
    """The path of sample file `name` (one of `SAMPLES`).

    Raises:
        ValidationError: not a sample's name (with a suggestion).
    """
    from escher.core.errors import ValidationError, did_you_mean

    if name not in SAMPLES:
        raise ValidationError(
            f"no sample named {name!r}; the samples are {', '.join(SAMPLES)}."
            + did_you_mean(name, SAMPLES)
        )
    return Path(str(resources.files(__name__).joinpath(name)))


__all__ = ["SAMPLES", "sample_path"]
