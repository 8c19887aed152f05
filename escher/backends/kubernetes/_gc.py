"""Garbage collection: remove what dead sessions left on a cluster, and nothing else.

A node resource is escher's only if its node carries the annotation
``ephemeral.<domain>/<label>`` that escher adds when it writes the resource; its value names
the session (``<namespace>/<session>``). Pods are escher's if they carry
``app.kubernetes.io/managed-by=escher``, and name their session by a label. A session is
dead once its lease (see `_lease`) is gone or expired; live sessions are never touched
unless `everything` is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from escher.backends.base import GarbageReport
from escher.backends.kubernetes._errors import api_error, as_escher
from escher.backends.kubernetes._kube import ApiException, KubeApi
from escher.backends.kubernetes._lease import LEASE_PREFIX, lease_alive, lease_name, parse_owner
from escher.backends.kubernetes._names import MANAGED_BY_KEY, MANAGED_BY_VALUE, Names
from escher.backends.kubernetes._state import NodeRecord
from escher.core.errors import ConflictError, EscherError

SELECTOR = f"{MANAGED_BY_KEY}={MANAGED_BY_VALUE}"


@dataclass
class Sessions:
    """Which sessions are alive, by their leases (read once, looked up again on a miss)."""

    api: KubeApi
    namespace: str
    known: dict[tuple[str, str], bool] = field(default_factory=dict)
    expired: list[str] = field(default_factory=list)  # leases of dead sessions, by name

    def load(self) -> None:
        """LIST the leases of the namespace (call after listing what they protect)."""
        for lease in self.api.list_leases(self.namespace, SELECTOR):
            name = str(lease["metadata"]["name"])
            alive = lease_alive(lease)
            self.known[(self.namespace, name[len(LEASE_PREFIX) :])] = alive
            if not alive:
                self.expired.append(name)

    def alive(self, namespace: str, session: str) -> bool:
        """True if the session's lease is alive, or cannot be read (then nothing is removed)."""
        key = (namespace, session)
        if key not in self.known:
            try:
                self.known[key] = lease_alive(self.api.get_lease(namespace, lease_name(session)))
            except ApiException as exc:
                self.known[key] = exc.status != 404  # 403 and others: not provably dead
        return self.known[key]


@dataclass
class _Collector:
    api: KubeApi
    names: Names
    sessions: Sessions
    labels: set[str] | None
    everything: bool
    dry_run: bool
    retries: int
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def _split(self, rec: NodeRecord) -> tuple[list[str], list[str]]:
        """(labels to remove, descriptions of labels kept) on one node."""
        remove: list[str] = []
        kept: list[str] = []
        for key, mark in sorted(rec.annotations.items()):
            label = self.names.label_of_annotation(key)
            if label is None or (self.labels is not None and label not in self.labels):
                continue
            namespace, session = parse_owner(mark, self.sessions.namespace)
            if self.everything or not self.sessions.alive(namespace, session):
                remove.append(label)
            else:
                kept.append(f"label {label} on node {rec.name} (session {session} is alive)")
        return remove, kept

    def node(self, rec: NodeRecord) -> None:
        for _attempt in range(self.retries + 1):
            remove, kept = self._split(rec)
            if not remove or self.dry_run:
                break
            body: dict[str, Any] = {
                "metadata": {
                    "resourceVersion": rec.resource_version,
                    "annotations": {self.names.annotation(label): None for label in remove},
                },
                "status": {
                    part: {self.names.resource(label): None for label in remove}
                    for part in ("capacity", "allocatable")
                },
            }
            try:
                self.api.merge_patch_node_status(rec.name, body)
            except ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise api_error(exc, f"collecting garbage on node {rec.name!r}") from None
                rec = NodeRecord.parse(self.api.get_node(rec.name))
                continue
            break
        else:
            raise ConflictError(f"node {rec.name!r} kept changing; run escher gc again.")
        self.removed += [f"label {label} on node {rec.name}" for label in remove]
        self.kept += kept

    def pods(self, pods: Iterable[dict[str, Any]]) -> None:
        namespace = self.sessions.namespace
        for pod in pods:
            meta = pod["metadata"]
            session = (meta.get("labels") or {}).get(self.names.session_label, "")
            name = f"pod {namespace}/{meta['name']}"
            if not self.everything and self.sessions.alive(namespace, session):
                self.kept.append(f"{name} (session {session} is alive)")
                continue
            if not self.dry_run:
                self.api.delete_pod(namespace, meta["name"], meta.get("uid"))
            self.removed.append(name)

    def leases(self) -> None:
        for name in self.sessions.expired:
            if not self.dry_run:
                self.api.delete_lease(self.sessions.namespace, name)
            self.removed.append(f"lease {self.sessions.namespace}/{name} (expired)")


def collect_garbage(
    api: KubeApi,
    names: Names,
    *,
    namespace: str,
    node_selector: str | None = None,
    labels: Iterable[str] | None = None,
    everything: bool = False,
    dry_run: bool = False,
    retries: int = 8,
) -> GarbageReport:
    """Remove the node resources and pods of dead sessions (and their expired leases).

    Args:
        api: The API wrapper.
        names: The domain whose resources to collect.
        namespace: Where escher's pods and session leases are.
        node_selector: Only nodes matching this label selector.
        labels: Only these labels (default: all of escher's).
        everything: Also what live sessions use (only when no escher application runs).
        dry_run: Report, change nothing.
        retries: Attempts per node after a write conflict.

    Raises:
        ConflictError: a node kept changing.
        BackendError: the API refused.
    """
    collector = _Collector(
        api,
        names,
        Sessions(api, namespace),
        set(labels) if labels is not None else None,
        everything,
        dry_run,
        retries,
    )
    try:
        # What the leases protect is read first: a session creates its lease before it
        # writes, so anything seen here belongs to a lease the LIST below sees.
        nodes = [NodeRecord.parse(item) for item in api.list_nodes(node_selector)]
        pods, _ = api.list_pods(namespace, SELECTOR)
        collector.sessions.load()
        for rec in nodes:
            collector.node(rec)
        collector.pods(pods)
        if labels is None:
            collector.leases()
    except EscherError:
        raise
    except Exception as exc:
        raise as_escher(exc, "collecting garbage") from None
    return GarbageReport(tuple(collector.removed), tuple(collector.kept), dry_run)
