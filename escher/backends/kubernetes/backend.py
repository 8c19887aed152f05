"""`KubernetesBackend`: ephemeral resources as node extended resources, tasks as pods.

The real kube-scheduler does the matching: escher advertises ``<domain>/<label>`` in a
node's status (``capacity`` and ``allocatable``) and creates pods whose requests (= limits)
name those resources. The backend composes two parts with one job each: a `NodeStore`
(node records and label writes) and a `PodLifecycle` (pods and the task handles they drive).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from escher.backends import WriteCoalescer, checked_options
from escher.backends.base import Backend, Capability, GarbageReport
from escher.backends.kubernetes._gates import GateSupport, detect_gates
from escher.backends.kubernetes._gc import collect_garbage
from escher.backends.kubernetes._kube import KubeApi, connect
from escher.backends.kubernetes._lease import SessionLease, owner_mark
from escher.backends.kubernetes._lifecycle import PodLifecycle, PodOptions
from escher.backends.kubernetes._names import DEFAULT_DOMAIN, Names, validate_domain
from escher.backends.kubernetes._nodes import NodeStore
from escher.backends.kubernetes._pods import own_service_account
from escher.core.clock import Clock, RealClock
from escher.core.cluster import ClusterState
from escher.core.context import current_task
from escher.core.errors import BackendError, ConfigError, UnschedulableError, UnsupportedError
from escher.core.nodespec import NodeSpec
from escher.core.task import Status, StatusCode, TaskRef, TaskSpec, task_error

log = logging.getLogger("escher.kubernetes")

SESSION_RE = re.compile(r"[a-z0-9]{1,40}")
#: A pod's create waits for the label writes queued before its launch (each node write
#: gives up after `api_patience`); past this many seconds it says so in the log, again.
WRITES_NOTE = 60.0


def _check_ranges(namespace: str, conflict_retries: int, seconds: Mapping[str, float]) -> None:
    """The options' ranges (their types were checked by `checked_options`)."""
    if not namespace:
        raise ConfigError("namespace must be a non-empty string.")
    if conflict_retries < 0:
        raise ConfigError("conflict_retries must be an int >= 0.")
    for name, value in seconds.items():
        if not value >= 0:
            raise ConfigError(f"{name} must be a number of seconds >= 0, got {value!r}.")


def _event_time(event: Mapping[str, Any]) -> str:
    """When an event last happened (RFC 3339 strings sort in time order)."""
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def _check_session(session_id: str | None, lease_seconds: int, renew_seconds: float) -> None:
    if session_id is not None and not SESSION_RE.fullmatch(session_id):
        raise ConfigError(
            f"session_id must be 1-40 lower-case letters and digits, got {session_id!r}."
        )
    if lease_seconds < 1:
        raise ConfigError(f"lease_seconds must be an int >= 1, got {lease_seconds!r}.")
    if not 0 < renew_seconds < lease_seconds:
        raise ConfigError(
            f"renew_seconds must be > 0 and below lease_seconds ({lease_seconds}), "
            f"got {renew_seconds!r}."
        )


class KubernetesBackend(Backend):
    """Kubernetes: node extended resources for labels, pods placed by kube-scheduler.

    Args:
        kubeconfig: Path of a kubeconfig file (default: ``$KUBECONFIG`` or ~/.kube/config).
        context: Context of the kubeconfig to use (default: its current context).
        in_cluster: Use the pod's service account instead of a kubeconfig.
        namespace: Namespace of the task pods.
        domain: Prefix of escher's extended resources: label ``grp`` becomes
            ``<domain>/grp``. Never under kubernetes.io or k8s.io.
        image: Container image for Python callables: it must have escher (and the code
            the callables need) installed. Container tasks bring their own image.
        node_selector: Node labels that make a node eligible: the cluster state, the
            node specs of `set_resource` and every pod are limited to those nodes.
        service_account: Service account of task pods (to call escher from a task).
            Default: the driver's own account when it runs in a pod (``in_cluster``), else
            the namespace's default account.
        image_pull_secrets: Names of Secrets (in `namespace`) to pull `image` with.
        node_name: The node this process runs on (default: ``$NODE_NAME``, set by the
            downward API in escher's pods); `set_resource(node_spec=None)` uses it.
        conflict_retries: Attempts after a write conflict on a node before ConflictError.
        keep_pods: Keep finished pods (for debugging) instead of deleting them.
        request_timeout: Seconds allowed for each API call.
        node_check_seconds: How often the nodes under running pods are checked for loss
            (one LIST of nodes, only while pods run; 0 turns it off).
        node_lost_after: Seconds a node may stay not Ready before its pods count as lost.
        session_id: Join this existing session instead of starting one (escher's task
            pods join their driver's): mark with it, keep no lease of one's own.
        lease_seconds: A session whose lease was not renewed for this long is dead, and
            `escher gc` removes what it left.
        renew_seconds: How often the session's lease is renewed.
        api_patience: Seconds a call waits (retrying) for an API server that gives no
            answer, e.g. while it restarts, before BackendUnavailableError.
        creates_in_flight: Pod creates sent at once (`launch` returns before its pod is
            created; pods asking for the same labels are created in launch order).
        gang_timeout: Seconds a gang's members (`launch_gang`) may take to be bound
            together before the attempt is rolled back and tried again later.
        write_window: Label writes are coalesced: `set_resource(s)` queues its change and
            returns; queued changes to a node become one patch, written as soon as a launch
            needs them (its pod is created after them), or once no call added to them for
            this many seconds (at most 20 times that after the first); reads show them as
            made. 0 writes each call before it returns. Launches write at once, so the window
            only delays what other processes see; 0.2 s keeps the calls of a burst together
            on a loaded machine (a thread kept off the CPU for longer than the window split
            the batch).
        scheduling_gates: Whether the server has pod scheduling gates: None asks it
            (its OpenAPI document, once); True uses gated gangs anyway (on a server that
            drops the gate, members are bound as they come and still run only once all
            are bound); False never (gangs use ghost pods through `escher.esl.Gang`).
    """

    name = "kubernetes"
    #: ATOMIC_GANG needs pod scheduling gates (Kubernetes 1.27+): see `supports`.
    capabilities = Capability.PYTHON_TASKS | Capability.CONTAINER_TASKS | Capability.ATOMIC_GANG

    @checked_options
    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        namespace: str = "default",
        domain: str = DEFAULT_DOMAIN,
        image: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        service_account: str | None = None,
        node_name: str | None = None,
        conflict_retries: int = 8,
        keep_pods: bool = False,
        request_timeout: float = 30.0,
        image_pull_secrets: Sequence[str] = (),
        node_check_seconds: float = 5.0,
        node_lost_after: float = 30.0,
        session_id: str | None = None,
        lease_seconds: int = 60,
        renew_seconds: float = 10.0,
        api_patience: float = 60.0,
        creates_in_flight: int = 8,
        gang_timeout: float = 30.0,
        scheduling_gates: bool | None = None,
        write_window: float = 0.2,
    ) -> None:
        self._names = Names(validate_domain(domain))
        _check_ranges(
            namespace,
            conflict_retries,
            {
                "node_check_seconds": node_check_seconds,
                "node_lost_after": node_lost_after,
                "renew_seconds": renew_seconds,
                "api_patience": api_patience,
                "gang_timeout": gang_timeout,
                "write_window": write_window,
            },
        )
        if not all(image_pull_secrets):
            raise ConfigError("image_pull_secrets must be a list of Secret names.")
        _check_session(session_id, lease_seconds, renew_seconds)
        if creates_in_flight < 1:
            raise ConfigError(f"creates_in_flight must be an int >= 1, got {creates_in_flight!r}.")
        if session_id is not None:
            self.session_id = session_id
        self.namespace = namespace
        self.image = image
        self.node_selector: dict[str, str] = dict(node_selector or {})
        self._node_name = node_name or os.environ.get("NODE_NAME") or None
        self._api = KubeApi(connect(kubeconfig, context, in_cluster), request_timeout)
        self._clock = RealClock()
        self._closed = False
        self.gang_timeout = float(gang_timeout)
        self._gates: GateSupport | None = (
            None
            if scheduling_gates is None
            else GateSupport(
                scheduling_gates, f"set by the option scheduling_gates={scheduling_gates}"
            )
        )
        self._gates_lock = threading.Lock()
        self._lease = (
            None
            if session_id is not None
            else SessionLease(
                self._api,
                self._names,
                namespace,
                self.session_id,
                lease_seconds=lease_seconds,
                renew_seconds=renew_seconds,
            )
        )
        if self._lease is not None:
            self._lease.patience = api_patience
        self._nodes = NodeStore(
            self._api,
            self._names,
            node_selector=self.node_selector,
            namespace=namespace,
            owner=owner_mark(namespace, self.session_id),
            conflict_retries=conflict_retries,
            patience=api_patience,
        )
        self._writes = WriteCoalescer(
            self._nodes.write_queued,
            window=write_window,
            max_delay=20 * write_window,
            name="escher-k8s-coalesce",
        )
        self._pods = PodLifecycle(
            self._api,
            self._names,
            PodOptions(
                namespace=namespace,
                session=self.session_id,
                image=image,
                node_selector=self.node_selector,
                service_account=service_account or (own_service_account() if in_cluster else None),
                keep_pods=keep_pods,
                image_pull_secrets=tuple(image_pull_secrets),
            ),
            lost_nodes=self._nodes.lost,
            node_check_seconds=node_check_seconds,
            node_lost_after=node_lost_after,
            patience=api_patience,
            create_workers=creates_in_flight,
        )

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def names(self) -> Names:
        """How this backend spells its resources in Kubernetes."""
        return self._names

    @property
    def api(self) -> KubeApi:
        """The JSON API wrapper this backend uses (for tools like `escher gc`)."""
        return self._api

    @property
    def session(self) -> str:
        """The session id (same as `session_id`): pod label and label annotation value."""
        return self.session_id

    @property
    def conflicts(self) -> int:
        """Write conflicts met (and retried) by label writes, for tests and monitoring."""
        return self._nodes.conflicts

    @property
    def node_writes(self) -> int:
        """Node writes sent for label changes (coalesced calls share one), for monitoring."""
        return self._writes.node_writes

    def flush_writes(self) -> None:
        """Wait until every `set_resource(s)` call that returned has been written.

        Raises:
            EscherError: a queued write that carried this thread's calls failed (it
                changed nothing on its node); the error names the labels and the node.
        """
        self._ensure_open()
        self._writes.flush()

    # --- ephemeral resources ----------------------------------------------------------------
    def get_cluster_state(self) -> ClusterState:
        """Every eligible node: allocatable, and allocatable minus requests of bound pods.

        Label changes of calls that returned show as made even while their writes are still
        queued (reading does not write them: the closes of several policies in a row still
        make one write per node); a failed one is raised by the caller's next call.
        """
        self._ensure_open()
        self._writes.raise_owed()
        with self._writes.calling():  # a read often precedes a write (a close's deletes)
            return self._nodes.state(self._clock.now(), self._writes.queued())

    def _targets(self, spec: NodeSpec) -> list[str]:
        return self._nodes.targets(spec, self.current_node_id(), lambda: self._selection(spec))

    def _selection(self, spec: NodeSpec) -> ClusterState:
        """The state a selector is evaluated on. Selecting by node labels or liveness (an
        empty vector) needs neither the pods nor the queued writes: the node list, read at
        most `write_window` ago (the calls of a burst share one LIST). A vector sees the
        queued changes as made."""
        if spec.labels is not None or (spec.having is not None and not spec.having):
            return self._nodes.records_state(self._clock.now(), self._writes.window)
        return self._nodes.state(self._clock.now(), self._writes.queued())

    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> list[str]:
        return self._set_resources({label: capacity}, spec)

    def _set_resources(self, capacities: dict[str, float], spec: NodeSpec) -> list[str]:
        self._ensure_open()
        self._writes.raise_owed()
        with self._writes.calling():  # a slow node read does not split a burst's batch
            targets = self._targets(spec)
            if targets:
                for node in targets:  # bad input raises before anything is queued
                    self._nodes.check_writable(node, capacities)
                self._hold_lease()
                self._writes.submit(targets, capacities)
        return targets

    def _hold_lease(self) -> None:
        """The session's lease exists before anything marked with the session does."""
        if self._lease is not None:
            self._lease.ensure()

    # --- tasks --------------------------------------------------------------------------------
    def _launch(self, spec: TaskSpec) -> TaskRef:
        self._ensure_open()
        ref = TaskRef(spec, canceller=self._pods.cancel)
        if not self._nodes.fits_physically(spec.resources):
            reason = (
                f"no eligible node can ever fit {spec.resources.to_dict()}: node-defined "
                "resources exceed every node's allocatable"
            )
            ref.set_status(Status(StatusCode.INFEASIBLE, reason))
            ref.set_exception(task_error(reason + ". Ask for less or add a larger node.", ref,
                                 UnschedulableError))  # fmt: skip
            return ref
        # The label writes queued so far start now; the pod's create waits for them (not
        # this call), so a burst's first pods are prepared while the nodes are written.
        ticket = self._writes.barrier()
        self._writes.raise_owed()
        self._hold_lease()
        self._pods.submit(ref, ready=lambda: self._await_writes(ticket))
        return ref

    def _await_writes(self, ticket: int) -> None:
        """In a pod's create job: the label writes queued before its launch have ended."""
        waited = 0.0
        while not self._writes.wait(ticket, timeout=WRITES_NOTE):  # never before they end:
            waited += WRITES_NOTE  # a shrink not in force yet could be over-committed
            log.warning("a pod create has waited %.0f s for label writes to end", waited)

    # --- gangs --------------------------------------------------------------------------------
    def gate_support(self) -> GateSupport:
        """Whether the API server holds pods back with scheduling gates (asked once)."""
        with self._gates_lock:
            if self._gates is None:
                self._gates = detect_gates(self._api.get_path)
            return self._gates

    def supports(self, capability: Capability) -> bool:
        """ATOMIC_GANG only where the server has pod scheduling gates (1.27+); elsewhere
        `escher.esl.Gang` places gangs with ghost pods."""
        if capability is Capability.ATOMIC_GANG:
            return capability in self.capabilities and self.gate_support().supported
        return super().supports(capability)

    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        self._ensure_open()
        if not self.supports(Capability.ATOMIC_GANG):  # pragma: no cover - base checks first
            raise UnsupportedError(f"no scheduling gates: {self.gate_support().reason}.")
        if any(spec.fn is None for spec in specs):
            raise UnsupportedError(
                "a gang on Kubernetes runs Python callables (their runner waits until the "
                "whole gang is bound); launch container tasks one by one."
            )
        refs = [TaskRef(spec, canceller=self._pods.cancel) for spec in specs]
        misfit = [s for s in specs if not self._nodes.fits_physically(s.resources)]
        if misfit:
            reason = (
                f"gang member {misfit[0].name!r} can never fit: "
                f"{misfit[0].resources.to_dict()} exceeds every node's allocatable"
            )
            for ref in refs:
                ref.set_status(Status(StatusCode.INFEASIBLE, reason))
                ref.set_exception(task_error(reason + "; no member ran.", ref, UnschedulableError))
            return refs
        self._writes.flush()
        self._hold_lease()
        self._pods.submit_gang(refs, self.gang_timeout)
        return refs

    def current_node_id(self) -> str | None:
        """The node of the calling task: its task context, or this pod's own node."""
        context = current_task()
        if context is not None and context.backend is self:
            return context.node_id
        return self._node_name

    def collect_garbage(
        self,
        *,
        dry_run: bool = False,
        labels: Iterable[str] | None = None,
        everything: bool = False,
    ) -> GarbageReport:
        """Remove what dead sessions left: node resources, pods, expired session leases.

        A session is dead once its lease in this backend's namespace is gone or expired
        (`lease_seconds` without renewal); live sessions, this one included, keep theirs.

        Args:
            dry_run: Report what would be removed; change nothing.
            labels: Only these labels (and no pods or leases are removed).
            everything: Also what live sessions use: only when no escher application
                uses the cluster (the old, unconditional clean-up).
        """
        self._ensure_open()
        self._writes.flush()
        return collect_garbage(
            self._api,
            self._names,
            namespace=self.namespace,
            node_selector=self._nodes.selector_text or None,
            labels=labels,
            everything=everything,
            dry_run=dry_run,
        )

    def describe_task(self, ref: TaskRef) -> dict[str, Any]:
        """Kubernetes' facts about a task of this backend.

        Keys: "namespace"; "pod" (its current attempt's pod, None once the task is final);
        "node" (where that pod is bound, else where the task last ran, else None); and
        "scheduler_message": kube-scheduler's own message of the pod's last
        FailedScheduling event (None if it has none, e.g. once bound), read with one LIST
        of that pod's events.
        """
        facts: dict[str, Any] = {
            "namespace": self.namespace,
            "pod": None,
            "node": ref.node_id,
            "scheduler_message": None,
        }
        current = self._pods.pod_of(ref)
        if current is None:
            return facts
        pod, uid, node = current
        facts.update(pod=pod, node=node or ref.node_id)
        if not node:
            facts["scheduler_message"] = self._scheduler_message(pod, uid)
        return facts

    def _scheduler_message(self, pod: str, uid: str) -> str | None:
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod},reason=FailedScheduling"
        try:
            events = self._api.list_events(self.namespace, selector)
        except Exception as exc:
            log.debug("cannot read the events of pod %s: %s", pod, exc)
            return None
        mine = [e for e in events if not uid or (e.get("involvedObject") or {}).get("uid") == uid]
        if not mine:
            return None
        last = max(mine, key=_event_time)
        return str(last.get("message") or "") or None

    def describe(self) -> dict[str, Any]:
        facts = super().describe()
        facts.update(
            namespace=self.namespace,
            domain=self._names.domain,
            session=self.session_id,
            pod_watch=self._pods.watch_stats(),
        )
        gates = self.gate_support()
        facts["gangs"] = (
            "scheduling gates (launch_gang, escher.esl.Gang mode='native')"
            if gates.supported
            else "ghost pods (escher.esl.Gang, ephemeral mode)"
        ) + f": {gates.reason}"
        if self.node_selector:
            facts["node_selector"] = dict(self.node_selector)
        return facts

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Write the queued label changes, delete pods that have not started (their tasks
        are cancelled) and stop watching.

        Pods already running keep running; their handles fail, since nobody watches them.

        Raises:
            EscherError: a queued write that carried this thread's calls failed (the
                backend is closed all the same).
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._writes.close()  # queued label writes land before the session ends
        finally:
            self._pods.close()
            self._nodes.close()
            if self._lease is not None:
                self._lease.release()
            self._clock.close()
            self._api.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise BackendError("this kubernetes backend is closed; call escher.init() again.")


__all__ = ["KubernetesBackend"]
