"""Pre-flight for Kubernetes manifests: will these workloads fit on this cluster, and why not.

Reads Pods, Deployments, ReplicaSets, StatefulSets, Jobs and scheduler-plugins PodGroups
(YAML or JSON, folders, multi-document files, ``List`` objects) and the nodes and pods of a
cluster (what ``kubectl get nodes,pods -A -o json`` writes), turns them into an escher plan
with kube-scheduler's filter semantics, and verifies it. No Kubernetes client is needed.

```python
from escher.manifests import check_manifests, load_cluster, load_manifests
result = check_manifests(load_manifests(["app/"]), load_cluster("cluster.json"))
print(result.render())
```

See docs/kubernetes-preflight.md.
"""

from escher.manifests._check import ManifestCheck, check_manifests
from escher.manifests._cluster import (
    KubeCluster,
    KubeNode,
    RunningPod,
    cluster_from_objects,
    load_cluster,
)
from escher.manifests._context import Approximation
from escher.manifests._emit import APPLY_ORDER, apply_order, emit_placement
from escher.manifests._exact import Violation, check_placement
from escher.manifests._files import load_manifests
from escher.manifests._filters import Exclusion, NodeFilter
from escher.manifests._live import read_cluster
from escher.manifests._repairs import NodeReturned, manifest_repairs
from escher.manifests._translate import Translation, translate
from escher.manifests._workloads import (
    ManifestError,
    PodGroup,
    Workload,
    Workloads,
    workloads_from_objects,
)

__all__ = [
    "APPLY_ORDER",
    "Approximation",
    "Exclusion",
    "KubeCluster",
    "KubeNode",
    "ManifestCheck",
    "ManifestError",
    "NodeFilter",
    "NodeReturned",
    "PodGroup",
    "RunningPod",
    "Translation",
    "Violation",
    "Workload",
    "Workloads",
    "apply_order",
    "check_manifests",
    "check_placement",
    "cluster_from_objects",
    "emit_placement",
    "load_cluster",
    "load_manifests",
    "manifest_repairs",
    "read_cluster",
    "translate",
    "workloads_from_objects",
]
