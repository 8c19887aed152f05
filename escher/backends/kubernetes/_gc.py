"""Garbage collection: remove what escher left on a cluster, and nothing else.

A resource is escher's only if its node carries the annotation
``ephemeral.<domain>/<label>`` that `set_resource` adds when it creates the resource; pods
are escher's only if they carry ``app.kubernetes.io/managed-by=escher``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from escher.backends.kubernetes._kube import ApiException, KubeApi
from escher.backends.kubernetes._names import MANAGED_BY_KEY, MANAGED_BY_VALUE, Names
from escher.backends.kubernetes._state import NodeRecord
from escher.core.errors import BackendError, ConflictError


@dataclass
class GcReport:
    """What `collect_garbage` removed (or would remove, in a dry run)."""

    resources: list[tuple[str, str]] = field(default_factory=list)  # (node, resource)
    pods: list[str] = field(default_factory=list)
    dry_run: bool = False


def collect_garbage(
    api: KubeApi,
    names: Names,
    *,
    namespace: str | None = None,
    node_selector: str | None = None,
    labels: Iterable[str] | None = None,
    pods: bool = False,
    dry_run: bool = False,
    retries: int = 8,
) -> GcReport:
    """Delete escher's ephemeral resources from every node (and, with `pods`, its pods).

    Args:
        api: The API wrapper.
        names: The domain whose resources to collect.
        namespace: Where to look for escher's pods (with `pods`).
        node_selector: Only nodes matching this label selector.
        labels: Only these labels (default: all of escher's).
        pods: Also delete pods labelled managed-by=escher in `namespace`.
        dry_run: Report, change nothing.
        retries: Attempts per node after a write conflict.

    Raises:
        ConflictError: a node kept changing.
        BackendError: the API refused.
    """
    report = GcReport(dry_run=dry_run)
    wanted = set(labels) if labels is not None else None
    for item in api.list_nodes(node_selector):
        rec = NodeRecord.parse(item)
        for _attempt in range(retries + 1):
            mine = sorted(
                label
                for key in rec.annotations
                if (label := names.label_of_annotation(key)) is not None
                and (wanted is None or label in wanted)
            )
            if not mine:
                break
            if dry_run:
                report.resources += [(rec.name, names.resource(label)) for label in mine]
                break
            body: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": rec.resource_version,
                    "annotations": {names.annotation(label): None for label in mine},
                },
                "status": {
                    part: {names.resource(label): None for label in mine}
                    for part in ("capacity", "allocatable")
                },
            }
            try:
                api.merge_patch_node_status(rec.name, body)
            except ApiException as exc:
                if exc.status == 404:
                    break
                if exc.status != 409:
                    raise BackendError(f"gc of node {rec.name!r} failed ({exc.status}).") from None
                rec = NodeRecord.parse(api.get_node(rec.name))
                continue
            report.resources += [(rec.name, names.resource(label)) for label in mine]
            break
        else:
            raise ConflictError(f"node {rec.name!r} kept changing; run escher gc again.")
    if pods and namespace:
        found, _ = api.list_pods(namespace, f"{MANAGED_BY_KEY}={MANAGED_BY_VALUE}")
        for pod in found:
            name = pod["metadata"]["name"]
            if not dry_run:
                api.delete_pod(namespace, name)
            report.pods.append(f"{namespace}/{name}")
    return report
