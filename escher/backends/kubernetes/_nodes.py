"""The node-resource store: escher's labels as extended resources in node status.

It remembers what it last saw of each eligible node (`NodeRecord`), selects nodes, reads the
cluster state, and writes labels: one JSON patch per node for every label of a call,
guarded by a test of the node's resourceVersion (re-read and retried on a conflict), with
different nodes written concurrently by a bounded pool of threads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from escher.backends.kubernetes._errors import api_error, as_escher, message, unreachable
from escher.backends.kubernetes._kube import ApiException, KubeApi
from escher.backends.kubernetes._names import Names, format_quantity
from escher.backends.kubernetes._node_watch import NodeWatch
from escher.backends.kubernetes._retry import patiently, pause, transient
from escher.backends.kubernetes._state import NodeRecord, Usage, build_state, physical_fits
from escher.core.cluster import ClusterState
from escher.core.errors import (
    BackendError,
    ConflictError,
    EscherError,
    NotInTaskError,
    ReservedResourceError,
    UnknownNodeError,
    did_you_mean,
)
from escher.core.nodespec import NodeSpec
from escher.core.resources import Resources

#: Bound pods that hold resources: not finished.
BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
#: Seconds the first node check waits for the node watch's own first list (instead of
#: listing the nodes a second time).
FIRST_LIST_WAIT = 5.0


def escape(key: str) -> str:
    """A JSON-pointer path segment."""
    return key.replace("~", "~0").replace("/", "~1")


def _put(ops: list[dict[str, Any]], parent: str, exists: bool, values: Mapping[str, str]) -> None:
    """Ops that set `values` under map `parent` (one op for the whole map if it is absent)."""
    if not values:
        return
    if not exists:
        ops.append({"op": "add", "path": parent, "value": dict(values)})
        return
    ops += [
        {"op": "add", "path": f"{parent}/{escape(key)}", "value": value}
        for key, value in values.items()
    ]


def patch_ops(
    rec: NodeRecord, capacities: Mapping[str, float], names: Names, owner: str
) -> list[dict[str, Any]]:
    """The JSON-patch ops that take node `rec` to `capacities` ([] if it is there already).

    A label > 0 gets its quantity in capacity and allocatable and the annotation naming
    `owner`; a label at 0 loses all three. Callers prepend a test of the resourceVersion.

    Raises:
        ReservedResourceError: a label's resource is on the node without escher's
            annotation (someone else's; escher never modifies it).
    """
    annotations: dict[str, str] = {}
    status: dict[str, dict[str, str]] = {"capacity": {}, "allocatable": {}}
    removes: list[str] = []
    sections = (("capacity", rec.capacity), ("allocatable", rec.allocatable))
    for label, capacity in sorted(capacities.items()):
        resource, annotation = names.resource(label), names.annotation(label)
        present = resource in rec.capacity or resource in rec.allocatable
        if present and annotation not in rec.annotations:
            raise ReservedResourceError(
                f"node {rec.name!r} advertises {resource!r}, which escher did not create "
                f"(no {annotation!r} annotation); escher never modifies it. Remove it "
                "or pick another label."
            )
        if capacity > 0:
            value = format_quantity(resource, capacity)
            if rec.annotations.get(annotation) != owner:
                annotations[annotation] = owner
            for part, section in sections:
                if section.get(resource) != value:
                    status[part][resource] = value
            continue
        removes += [
            f"/status/{part}/{escape(resource)}" for part, sec in sections if resource in sec
        ]
        if annotation in rec.annotations:
            removes.append(f"/metadata/annotations/{escape(annotation)}")
    ops: list[dict[str, Any]] = []
    _put(ops, "/metadata/annotations", rec.has_annotations, annotations)
    _put(ops, "/status/capacity", bool(rec.capacity), status["capacity"])
    _put(ops, "/status/allocatable", bool(rec.allocatable), status["allocatable"])
    ops += [{"op": "remove", "path": path} for path in removes]
    return ops


#: Stands for "no hint" in `NodeStore.fits_physically`.
_NOTHING = Resources({})

#: Distinct physical requests whose fitting node is remembered; past this the hints start
#: over (requests computed per task, e.g. memory from data sizes, would grow them forever).
FIT_HINTS_MAX = 1024


class NodeStore:
    """Eligible nodes and escher's extended resources on them.

    Args:
        api: The JSON API wrapper.
        names: How labels are spelled in Kubernetes.
        node_selector: Node labels that make a node eligible.
        namespace: Where escher's pods run (the fallback scope of pod usage without the
            right to list pods in every namespace).
        owner: The session id written into the annotation of every label this store sets.
        conflict_retries: Attempts after a write conflict on a node before ConflictError.
        writers: At most this many nodes are written at once.
        patience: Seconds calls retry while the API server gives no answer.
    """

    def __init__(
        self,
        api: KubeApi,
        names: Names,
        *,
        node_selector: Mapping[str, str],
        namespace: str,
        owner: str,
        conflict_retries: int,
        writers: int = 16,
        patience: float = 60.0,
    ) -> None:
        self._api = api
        self._names = names
        self.node_selector = dict(node_selector)
        self._selector_text = ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
        self._namespace = namespace
        self._owner = owner
        self._conflict_retries = conflict_retries
        self._writers = writers
        self._patience = patience
        self._lock = threading.RLock()
        self._records: dict[str, NodeRecord] = {}
        #: Physical request -> (a node whose allocatable covered it, the request as Resources).
        self._fit_hints: dict[tuple[tuple[str, float], ...], tuple[str, Resources]] = {}
        self._physical_names: dict[str, bool] = {}
        self._node_locks: dict[str, threading.Lock] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._all_namespaces = True
        self._listed_at = -float("inf")  # monotonic time of the last complete LIST
        #: Existence and readiness of the eligible nodes, for the node-loss check.
        self._watch = NodeWatch(api, self._selector_text or None)
        #: Write conflicts met (and retried), for tests and monitoring.
        self.conflicts = 0

    @property
    def selector_text(self) -> str:
        """The node selector as a label-selector string ('' if there is none)."""
        return self._selector_text

    # --- reads ------------------------------------------------------------------------------
    def _remember(self, rec: NodeRecord) -> NodeRecord:
        with self._lock:
            old = self._records.get(rec.name)
            if old is None or rec.newer_than(old):
                self._records[rec.name] = rec
            return self._records[rec.name]

    def fetch(self, node: str) -> NodeRecord | None:
        """GET one node; None if it does not exist or is not eligible."""
        try:
            rec = NodeRecord.parse(
                patiently(lambda: self._api.get_node(node), self._patience, f"reading {node}")
            )
        except ApiException as exc:
            if exc.status == 404:
                with self._lock:
                    self._records.pop(node, None)
                return None
            raise api_error(exc, f"reading node {node!r}") from None
        except Exception as exc:
            raise unreachable(exc) from None
        with self._lock:
            self._records[node] = rec
        return rec if rec.matches(self.node_selector) else None

    def list_records(self) -> list[NodeRecord]:
        """LIST the eligible nodes (and refresh what the store remembers of them)."""
        try:
            items = patiently(
                lambda: self._api.list_nodes(self._selector_text or None),
                self._patience,
                "listing nodes",
            )
        except Exception as exc:
            raise as_escher(exc, "listing nodes") from None
        records = [NodeRecord.parse(item) for item in items]
        with self._lock:
            self._listed_at = time.monotonic()
            names = {rec.name for rec in records}
            for stale in set(self._records) - names:
                del self._records[stale]
        for rec in records:
            self._remember(rec)
        return records

    def record(self, node: str) -> NodeRecord | None:
        """The remembered record of `node` (fetched if unknown); None if not eligible."""
        with self._lock:
            rec = self._records.get(node)
        if rec is not None:
            return rec if rec.matches(self.node_selector) else None
        return self.fetch(node)

    def unknown(self, node: str) -> UnknownNodeError:
        """The error for a node id that names no eligible node (with a suggestion)."""
        with self._lock:
            known = [n for n, rec in self._records.items() if rec.matches(self.node_selector)]
        if not known:
            with contextlib.suppress(EscherError):
                known = [rec.name for rec in self.list_records()]
        eligible = f" matching node_selector {self.node_selector}" if self.node_selector else ""
        return UnknownNodeError(
            f"no node {node!r}{eligible} in the cluster.{did_you_mean(node, known)}"
        )

    def state(
        self, now: float, queued: Mapping[str, Mapping[str, float]] | None = None
    ) -> ClusterState:
        """Every eligible node: allocatable, and allocatable minus requests of bound pods.

        Args:
            now: The state's time.
            queued: node -> label -> capacity of writes not known to be on the server yet
                (taken before this call): the state shows them as written.
        """
        records = self.list_records()
        if queued:
            records = [self.with_labels(rec, queued.get(rec.name)) for rec in records]
        return build_state(records, Usage.of(self._bound_pods()), self._names, now)

    def with_labels(self, rec: NodeRecord, capacities: Mapping[str, float] | None) -> NodeRecord:
        """`rec` as it is once `capacities` are written (0 deletes a label)."""
        if not capacities:
            return rec
        capacity, allocatable = dict(rec.capacity), dict(rec.allocatable)
        for label, value in capacities.items():
            resource = self._names.resource(label)
            for section in (capacity, allocatable):
                if value > 0:
                    section[resource] = format_quantity(resource, value)
                else:
                    section.pop(resource, None)
        return dataclasses.replace(rec, capacity=capacity, allocatable=allocatable)

    def _bound_pods(self) -> list[dict[str, Any]]:
        try:
            return patiently(self._list_bound_pods, self._patience, "listing pods")
        except Exception as exc:
            raise as_escher(exc, "listing pods") from None

    def _list_bound_pods(self) -> list[dict[str, Any]]:
        if self._all_namespaces:
            try:
                return self._api.list_bound_pods()
            except ApiException as exc:
                if exc.status != 403:
                    raise
                self._all_namespaces = False
        pods, _ = self._api.list_pods(self._namespace, field_selector=BOUND_PODS)
        return pods

    @property
    def counts_all_namespaces(self) -> bool:
        """False once listing pods in every namespace was refused (usage = own namespace)."""
        return self._all_namespaces

    def fits_physically(self, request: Mapping[str, float]) -> bool:
        """True if some alive eligible node's allocatable covers the node-defined part.

        The node that fitted a request last is tried first (its current record): a burst of
        launches with one request checks one node each, not every node.
        """
        key = tuple(sorted((k, v) for k, v in request.items() if self._physical(k)))
        if not key:
            return True
        with self._lock:
            name, physical = self._fit_hints.get(key, ("", _NOTHING))
            rec = self._records.get(name)
            if (
                rec is not None
                and rec.alive
                and physical.fits_in(rec.allocatable_vector(self._names))
            ):
                return True
            records = list(self._records.values())
        found = physical_fits(records, request, self._names) if records else None
        if found is None:
            found = physical_fits(self.list_records(), request, self._names)
        if found is None:
            return False
        with self._lock:
            if len(self._fit_hints) >= FIT_HINTS_MAX:
                self._fit_hints.clear()
            self._fit_hints[key] = found
        return True

    def _physical(self, name: str) -> bool:
        """`Names.is_physical_request`, remembered per name (asked once per launch)."""
        known = self._physical_names.get(name)
        if known is None:
            known = self._physical_names[name] = self._names.is_physical_request(name)
        return known

    def lost(self, nodes: Iterable[str]) -> dict[str, NodeRecord | None]:
        """Of `nodes`, those that are gone (None) or not Ready (their record).

        A periodic check: answered from the node watch (started on the first call, which
        waits up to `FIRST_LIST_WAIT` for its first list), which costs nothing while the
        nodes do not change; while the watch is not in step with the server, from one LIST
        served by the API server's cache. What the store remembers
        is left as it is (either may be a moment behind).
        """
        wanted = set(nodes)
        if not wanted:
            return {}
        self._watch.start()
        known = self._watch.records(wanted, first_wait=FIRST_LIST_WAIT)
        if known is None:
            known = self._cached_records(wanted)
        return {node: rec for node, rec in known.items() if rec is None or not rec.ready}

    def _cached_records(self, wanted: set[str]) -> dict[str, NodeRecord | None]:
        """Each of `wanted` -> its record or None, by one LIST from the API server's cache
        (only the wanted nodes are parsed)."""
        try:
            items = patiently(
                lambda: self._api.list_nodes(self._selector_text or None, cached=True),
                self._patience,
                "listing nodes",
            )
        except Exception as exc:
            raise as_escher(exc, "listing nodes") from None
        found: dict[str, NodeRecord | None] = dict.fromkeys(wanted)
        for item in items:
            if item.get("metadata", {}).get("name") in wanted:
                rec = NodeRecord.parse(item)
                found[rec.name] = rec
        return found

    # --- selection ----------------------------------------------------------------------------
    def targets(
        self, spec: NodeSpec, current: str | None, state: Callable[[], ClusterState]
    ) -> list[str]:
        """The nodes a validated node spec selects (`current`: the caller's own node)."""
        if spec.is_local:
            if current is None:
                raise NotInTaskError(
                    "node_spec=None means 'the node this task runs on', but this process is "
                    "not an escher pod (no NODE_NAME). Pass a node id or a resource vector."
                )
            if self.record(current) is None:
                raise self.unknown(current)
            return [current]
        if spec.node_id is not None:
            if self.record(spec.node_id) is None:
                raise self.unknown(spec.node_id)
            return [spec.node_id]
        return spec.select(state())

    # --- writes -------------------------------------------------------------------------------
    def write_many(self, nodes: Sequence[str], capacities: Mapping[str, float]) -> None:
        """Set every label of `capacities` on each of `nodes` (0 deletes), nodes concurrently.

        Each node gets one patch (all labels or none); all nodes are attempted, and the
        first failure (in node order) is raised once every write ended.
        """
        errors = self.write_batch({node: dict(capacities) for node in nodes})
        first = next((errors[node] for node in nodes if node in errors), None)
        if first is not None:
            raise first

    def write_batch(self, batch: Mapping[str, Mapping[str, float]]) -> dict[str, BaseException]:
        """Write each node of `batch` its own labels (one patch per node, nodes concurrently).

        Returns:
            The nodes whose write failed (nothing changed there), with the error.
        """
        if len(batch) <= 1:
            errors: dict[str, BaseException] = {}
            for node, capacities in batch.items():
                try:
                    self.write(node, capacities)
                except Exception as exc:
                    errors[node] = exc
            return errors
        pool = self._executor()
        futures: dict[str, Future[None]] = {
            node: pool.submit(self.write, node, capacities) for node, capacities in batch.items()
        }
        outcomes = {node: f.exception() for node, f in futures.items()}
        return {node: exc for node, exc in outcomes.items() if exc is not None}

    def write_queued(self, batch: Mapping[str, Mapping[str, float]]) -> dict[str, BaseException]:
        """`write_batch` for changes queued by calls that already returned: a node deleted
        before its write lands takes the change with it (as if deleted just after the write),
        so its `UnknownNodeError` is dropped, not owed to a caller that did nothing wrong."""
        errors = self.write_batch(batch)
        return {n: e for n, e in errors.items() if not isinstance(e, UnknownNodeError)}

    def check_writable(self, node: str, capacities: Mapping[str, float]) -> None:
        """Raise before anything is queued if `node` is unknown or a label is not escher's.

        Checked against what the store last saw of the node (the write checks again).
        """
        rec = self.record(node)
        if rec is None:
            raise self.unknown(node)
        patch_ops(rec, capacities, self._names, self._owner)

    def records_state(self, now: float, max_age: float = 0.0) -> ClusterState:
        """The eligible nodes without the pods (selection by labels or liveness needs no
        usage): from a LIST, or from the store's view if its last LIST is at most
        `max_age` seconds old (so a burst of calls shares one LIST)."""
        with self._lock:
            recent = time.monotonic() - self._listed_at <= max_age
            records = [r for r in self._records.values() if r.matches(self.node_selector)]
        if not recent:
            records = self.list_records()
        return build_state(records, Usage(), self._names, now)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self._writers, thread_name_prefix="escher-k8s-write"
                )
            return self._pool

    def _node_lock(self, node: str) -> threading.Lock:
        with self._lock:
            return self._node_locks.setdefault(node, threading.Lock())

    def write(self, node: str, capacities: Mapping[str, float]) -> None:
        """Set (> 0) or delete (0) every label of `capacities` on `node` in one patch.

        Retries on write conflicts (a fresh read, then backoff) and, for up to `patience`
        seconds, when the API server gave no answer (it re-reads the node first, so a patch
        that did land is not sent twice). Raises before changing anything if a label is
        node-defined (`ReservedResourceError`) or the node unknown.
        """
        with self._node_lock(node):
            rec, fresh = self.record(node), False
            conflicts = outages = 0
            deadline = time.monotonic() + self._patience
            while True:
                if rec is None:
                    raise self.unknown(node)
                ops = patch_ops(rec, capacities, self._names, self._owner)
                if not ops:
                    if fresh:
                        return  # the server already holds exactly this
                    rec, fresh = self.fetch(node), True
                    continue
                try:
                    body = self._api.json_patch_node_status(node, [self._test(rec), *ops])
                except Exception as exc:
                    if transient(exc) and time.monotonic() < deadline:
                        pause(outages)  # did it land? read again, then decide
                        outages += 1
                    else:
                        conflicts += 1
                        self._conflicted(exc, node, rec, capacities, conflicts)
                    rec, fresh = self.fetch(node), True
                    continue
                self._remember(NodeRecord.parse(body))
                return

    def _conflicted(
        self,
        exc: Exception,
        node: str,
        rec: NodeRecord,
        capacities: Mapping[str, float],
        conflicts: int,
    ) -> None:
        """A refused patch: return to retry after a conflict, raise on anything else."""
        if not isinstance(exc, ApiException):
            raise unreachable(exc) from None
        self._after_refusal(exc, node, rec, capacities)
        if conflicts > self._conflict_retries:
            labels = ", ".join(sorted(self._names.resource(label) for label in capacities))
            raise ConflictError(
                f"node {node!r} kept changing while escher set {labels}: "
                f"{conflicts} attempts conflicted. Nothing was changed by the failed "
                "attempts; retry the call."
            )
        if conflicts > 1:  # the first retry follows a fresh read: no wait
            self._backoff(conflicts - 1)

    def _after_refusal(
        self, exc: ApiException, node: str, rec: NodeRecord, capacities: Mapping[str, float]
    ) -> None:
        """A refused patch: count a conflict, raise on anything else."""
        if exc.status == 404:
            with self._lock:
                self._records.pop(node, None)
            raise self.unknown(node) from None
        if exc.status not in (409, 422):
            raise api_error(exc, f"patching node {node!r}") from None
        with self._lock:
            self.conflicts += 1
        if exc.status == 422:  # a failed test op, or a patch the server rejects
            fresh = self.fetch(node)
            if fresh is not None and fresh.resource_version == rec.resource_version:
                wanted = ", ".join(f"{k}={v:g}" for k, v in sorted(capacities.items()))
                raise BackendError(
                    f"the API rejected {wanted} on node {node!r}: {message(exc)}"
                ) from None

    @staticmethod
    def _test(rec: NodeRecord) -> dict[str, Any]:
        return {"op": "test", "path": "/metadata/resourceVersion", "value": rec.resource_version}

    @staticmethod
    def _backoff(attempt: int) -> None:
        time.sleep(min(0.5, 0.005 * 2**attempt) * (0.5 + random.random()))

    def close(self) -> None:
        """Stop the node watch and the writer threads (writes in flight finish first)."""
        self._watch.stop()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
