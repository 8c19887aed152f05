"""`ESL`: a policy bound to a backend, with its ledger of resources, cleanup and recovery.

`ESL` adds to `Policy` the ledger of every ephemeral resource it created, deletes them on
`close()` (also on garbage collection and at interpreter exit), replays lost ones after a
node failure (`recover()`) and runs timers on the backend's clock. `Bound` is a policy handle
of an ESL (a user, a queue, a data set): tasks launched through it request its resources.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.context import current_backend
from escher.core.errors import EscherError, ValidationError
from escher.core.nodespec import NodeSpec, NodeSpecLike
from escher.core.plan import Intent
from escher.core.resources import Resources, validate_count, validate_label
from escher.core.task import TaskRef, TaskSpec
from escher.esl._constraint import Constraint, Recorder
from escher.esl._contribution import Contribution, ledger_contribution
from escher.esl._ledger import (
    EVERY_NODE,
    Ledger,
    LedgerEntry,
    RecoveryReport,
    delete_all,
    delete_everywhere,
)
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import attributed, planning_backend
from escher.esl._policy import Policy, watch_done

log = logging.getLogger("escher.esl")

_instance_ids = itertools.count(1)
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
#: Explicit node ids for `ESL.set_resources`.
NodeIds = list[str] | tuple[str, ...] | set[str] | frozenset[str]


def _delete_at_exit(backend: Backend, ledger: Ledger) -> None:
    for problem in delete_all(backend, ledger):
        log.debug("cleanup: %s", problem)


class ESL(Policy):
    """Base of the scheduling libraries: binding, ledger, cleanup, recovery.

    Args:
        backend: The backend to use (default: `escher.current_backend()` now).
        name: A short name used in labels and explanations (default: the kind + a number).

    Every label an ESL creates starts with a prefix unique to the instance, so two ESLs never
    touch each other's resources. Use it as a context manager or call `close()`; a finaliser
    also deletes the resources when the ESL is garbage-collected or the interpreter exits.
    """

    #: Short kind used in labels.
    kind = "esl"

    def __init__(self, backend: Backend | None = None, *, name: str | None = None) -> None:
        if backend is None:
            backend = current_backend()
        if not isinstance(backend, Backend):
            raise ValidationError(f"backend must be an escher Backend, got {backend!r}.")
        self.backend = backend
        # a planning run numbers its own ESLs, so the same code gives the same labels
        planning = planning_backend(backend)
        number = planning.next_number() if planning is not None else next(_instance_ids)
        self.name = name if name is not None else f"{self.kind}{number}"
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError(f"name must be a non-empty string, got {name!r}.")
        self._prefix = f"x{number}{hashlib.sha1(self.name.encode()).hexdigest()[:3]}"
        self._lock = threading.RLock()
        self._ledger = Ledger()
        self._closed = False
        self._cycle_requested = False
        self._timers: list[Any] = []
        self._finalizer = weakref.finalize(self, _delete_at_exit, self.backend, self._ledger)
        backend.attach_policy(self)

    # --- naming ----------------------------------------------------------------------------
    @property
    def source(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def label(self, part: str) -> str:
        """A label owned by this ESL: ``<prefix>-<kind>-<part>``, valid on every backend."""
        clean = _LABEL_BAD.sub("-", str(part)).strip("-_.") or "r"
        label = f"{self._prefix}-{self.kind}-{clean}"
        if len(label) > 63:
            digest = hashlib.sha1(label.encode()).hexdigest()[:8]
            label = f"{label[:54].rstrip('-_.')}-{digest}"
        return validate_label(label)

    # --- the ledger ------------------------------------------------------------------------
    def set_resource(
        self,
        label: str,
        capacity: float,
        node_spec: NodeSpecLike,
        *,
        num_nodes: int | None = None,
        need: Mapping[str, float] | None = None,
        restorable: bool | None = None,
        why_not: str = "",
    ) -> tuple[str, ...]:
        """`backend.set_resource`, recorded in the ledger (capacity 0 forgets it).

        Args:
            label: One of this ESL's labels (see `label`).
            capacity: New capacity on each selected node.
            node_spec: Where (see `escher.set_resource`).
            num_nodes: At most this many nodes for a selector.
            need: After a node failure the resource may move to a node whose available
                resources cover `need`.
            restorable: False if a lost copy cannot be moved (e.g. data that lived there);
                None keeps what the label had (True for a new one).
            why_not: The reason reported when it is not restorable.
        """
        return self.set_resources(
            {label: capacity},
            node_spec,
            num_nodes=num_nodes,
            need=need,
            restorable=restorable,
            why_not=why_not,
        )

    def set_resources(
        self,
        capacities: Mapping[str, float],
        node_spec: NodeSpecLike | NodeIds,
        *,
        num_nodes: int | None = None,
        need: Mapping[str, float] | None = None,
        restorable: bool | None = None,
        why_not: str = "",
        selector: Mapping[str, str] | None = None,
    ) -> tuple[str, ...]:
        """`backend.set_resources` (several labels, each node written once), recorded in
        the ledger.

        Args:
            capacities: label -> new capacity on each selected node (0 deletes it there).
            node_spec: Where (see `escher.set_resources`), or a list of node ids (one
                call for all of them when they are every alive node, else one per node).
            num_nodes: At most this many nodes for a selector.
            need: As for `set_resource`, for every label.
            restorable: As for `set_resource`, for every label.
            why_not: As for `set_resource`, for every label.
            selector: Node labels that define where these labels live (a topology domain):
                `recover` puts them on alive nodes carrying these labels that lack them.

        Returns:
            The nodes written, in id order.
        """
        self._check_open()
        with attributed(self.backend, self.source):
            if isinstance(node_spec, list | tuple | set | frozenset):
                nodes = self._set_on(capacities, node_spec)
            else:
                nodes = self.backend.set_resources(capacities, node_spec, num_nodes=num_nodes)
        need_vector = Resources.of(need) if need is not None else None
        for label, capacity in capacities.items():
            self._ledger.own(
                label, need=need_vector, restorable=restorable, why_not=why_not, selector=selector
            )
            self._ledger.put(label, nodes, capacity, create=True)
        return nodes

    def _set_on(self, capacities: Mapping[str, float], nodes: Iterable[str]) -> tuple[str, ...]:
        wanted = sorted(set(nodes))
        state = self.backend.get_cluster_state()
        if wanted == sorted(nid for nid, n in state.nodes.items() if n.alive):
            return self.backend.set_resources(capacities, EVERY_NODE)
        written: list[str] = []
        for node in wanted:
            written.extend(self.backend.set_resources(capacities, node))
        return tuple(written)

    def own(
        self,
        label: str,
        *,
        need: Mapping[str, float] | None = None,
        restorable: bool = True,
        why_not: str = "",
    ) -> str:
        """Record `label` as owned although tasks create it (so `close()` deletes it)."""
        self._ledger.own(
            label,
            need=Resources.of(need) if need is not None else None,
            restorable=restorable,
            why_not=why_not,
        )
        return label

    def record(self, label: str, node: str, capacity: float) -> None:
        """A task set `label` to `capacity` on `node` from inside (ignored unless owned)."""
        self._ledger.put(label, (node,), capacity, create=False)

    def recorder(self) -> Recorder | None:
        return self.record

    def ledger(self) -> dict[str, dict[str, float]]:
        """label -> node -> capacity of every resource this ESL set (a copy)."""
        return self._ledger.snapshot()

    def ledger_entries(self, labels: Iterable[str]) -> dict[str, LedgerEntry]:
        """The ledger entries of those of `labels` this ESL owns (copies)."""
        return self._ledger.entries(labels)

    def contribution(self, ref: TaskRef) -> Contribution | None:
        """What this ESL adds to `ref`'s request, for explainers (`escher.why`).

        The explain hook: the labels of the task's request this ESL owns, what each stands
        for, which it creates later, and any reason of its own to hold the task back. The
        default reads the ledger (`escher.esl._contribution.ledger_contribution`); override it
        to speak in the ESL's own terms. None if the task requests none of its labels.
        """
        return ledger_contribution(self, ref)

    def forget(self, label: str) -> None:
        """Delete `label` everywhere and drop it from the ledger."""
        entry = self._ledger.pop(label)
        if entry is not None:
            for problem in delete_everywhere(self.backend, {label: entry}):
                log.debug("deleting %s: %s", label, problem)

    def forget_known(self, label: str) -> None:
        """Delete `label` on the nodes the ledger knows and drop it from the ledger.

        Cheaper than `forget` (no cluster read) when this process set every copy; a label a
        task created out of process (the ledger knows no node) is looked up as `forget` does.
        """
        entry = self._ledger.pop(label)
        if entry is None:
            return
        if not entry.capacities:
            for problem in delete_everywhere(self.backend, {label: entry}):
                log.debug("deleting %s: %s", label, problem)
            return
        for node in sorted(entry.capacities):
            try:
                self.backend.set_resource(label, 0, node)
            except EscherError as exc:  # its node left: the resource went with it
                log.debug("deleting %s on %s: %s", label, node, exc)

    # --- a coalesced cycle (policies that re-plan as a whole) ------------------------------
    def _request_cycle(self) -> None:
        """Run `_cycle` soon (at the clock's current time), once however often it is asked
        before it runs; `_cycle` clears the request."""
        with self._lock:
            if self._cycle_requested or self._closed:
                return
            self._cycle_requested = True
        self.call_later(0.0, self._cycle)

    def _cycle(self) -> None:
        """One cycle. An override starts, holding the lock, with this (clear the request)."""
        with self._lock:
            self._cycle_requested = False

    # --- timers (monitors, timeouts) on the backend's clock --------------------------------
    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run `fn` after `delay` seconds of the backend's clock, unless the ESL is closed.

        A bound method is held weakly, so a pending timer does not keep the ESL alive.
        """
        target: Callable[[], Callable[[], Any] | None]
        if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
            target = weakref.WeakMethod(fn)
        else:
            target = lambda: fn  # noqa: E731
        owner_ref = weakref.ref(self)

        def fire() -> None:
            call, owner = target(), owner_ref()
            if call is not None and owner is not None and not owner.closed:
                call()

        timer = self.backend.clock.call_later(delay, fire)
        with self._lock:
            now = self.backend.clock.now()
            self._timers = [t for t in self._timers if not t.cancelled and t.when >= now]
            self._timers.append(timer)

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ValidationError(f"{self.source} is closed; create a new one.")

    def _on_close(self) -> None:
        """Hook for subclasses: stop what they run (called once, before the cleanup)."""

    def close(self) -> list[str]:
        """Delete every resource this ESL created and stop its timers. Safe to call twice.

        Tasks already running keep running; tasks still waiting for one of its resources
        keep waiting (cancel them first if they should not run).

        Returns:
            Cleanup problems as text (e.g. a node that left); empty when all went well.
        """
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        self._on_close()
        self._finalizer.detach()
        return delete_all(self.backend, self._ledger)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._ledger)} labels"
        return f"<{self.source} on {self.backend.name}: {state}>"

    # --- recovery --------------------------------------------------------------------------
    def recover(self, state: ClusterState | None = None) -> RecoveryReport:
        """Replay the resources this ESL had on nodes that left onto eligible alive nodes.

        The paper's recovery rule: a lost copy moves to an alive node that does not hold the
        label yet and whose available resources cover what the resource needs (e.g. the sum
        of a co-located group's requests). Copies that cannot move (data that lived on the
        lost node) or that find no eligible node are reported in `RecoveryReport.lost`. A
        label that lives on a topology domain (set with a `selector`) is not moved: it is
        put on the domain's alive nodes that joined since.
        """
        self._check_open()
        state = self.backend.get_cluster_state() if state is None else state
        alive = {nid for nid, n in state.nodes.items() if n.alive}
        restored: list[tuple[str, str, str]] = []
        lost: list[tuple[str, str, str]] = []
        taken: dict[str, set[str]] = {}
        for label, node, capacity, entry in self._ledger.take_lost(alive):
            if entry.selector is not None:
                continue  # a domain's label: `_extend_domains` below
            if not entry.restorable:
                lost.append((label, node, entry.why_not or "it cannot move to another node"))
                continue
            holders = set(state.holding(label)) | set(entry.capacities) | taken.get(label, set())
            target = self._recovery_target(entry, state, holders)
            if target is None:
                need = entry.need.to_dict() if entry.need else {}
                lost.append((label, node, f"no alive node without it has {need} available"))
                continue
            self.set_resource(label, capacity, target)
            taken.setdefault(label, set()).add(target)
            restored.append((label, node, target))
        self._extend_domains(state)
        return RecoveryReport(tuple(restored), tuple(lost))

    def _extend_domains(self, state: ClusterState) -> None:
        """Put every domain label on the alive nodes of its domain that lack it."""
        for label, selector, capacity in self._ledger.domain_labels():
            spec = NodeSpec.with_labels(selector)
            for node in spec.select(state):
                if label not in state.nodes[node].total:
                    self.set_resource(label, capacity, node)

    def _recovery_target(
        self, entry: LedgerEntry, state: ClusterState, holders: set[str]
    ) -> str | None:
        need = entry.need or Resources()
        for nid in self._eligible_nodes(state):
            node = state.nodes[nid]
            if nid not in holders and node.alive and need.fits_in(node.available):
                return nid
        return None

    def _eligible_nodes(self, state: ClusterState) -> list[str]:
        """Nodes this ESL may use, in preference order (default: all, by id)."""
        return sorted(state.nodes)


class Bound(Policy):
    """A policy handle of an ESL: tasks launched through it request `resources`.

    Args:
        owner: The ESL whose labels these are (its ledger records what tasks set).
        resources: What each task requests.
        source: How the handle is named in explanations.
        intents: Builders of the intents `declare` adds.
        also: Another policy every task also follows (AND), e.g. a parent's share.
    """

    def __init__(
        self,
        owner: ESL,
        resources: Mapping[str, float],
        source: str,
        intents: Iterable[Callable[[tuple[str, ...]], Intent]] = (),
        also: Policy | None = None,
    ) -> None:
        self.owner = owner
        self.backend = owner.backend
        self.resources = Resources.of(resources)
        self._source = source
        self._intents = list(intents)
        self.also = also

    @property
    def source(self) -> str:
        return self._source

    def constraint(self) -> Constraint:
        own = Constraint(self.resources, source=self._source)
        return own & self.also.constraint() if self.also is not None else own

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        return self.also.before_launch(spec) if self.also is not None else spec

    def after_launch(self, ref: TaskRef) -> None:
        if self.also is not None:
            self.also.after_launch(ref)
            watch_done(self.also, ref)

    def launch_failed(self, spec: TaskSpec) -> None:
        if self.also is not None:
            self.also.launch_failed(spec)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        owned: list[tuple[str, float, NodeSpecLike, str]] = [
            (label, cap, node, self.owner.source)
            for label, caps in self.owner.ledger().items()
            if label in self.resources
            for node, cap in caps.items()
        ]
        parts = PlanParts(owned, self.resources, intents=list(self._intents))
        return parts & self.also.plan_parts(count, resources) if self.also else parts

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        own: list[tuple[Policy, PlanParts]] = [(self, PlanParts(intents=list(self._intents)))]
        return own + (self.also.promises(resources) if self.also is not None else [])


def node_ids(backend: Backend, nodes: Iterable[str] | NodeSpecLike | None) -> list[str]:
    """Resolve a node selection (ids, a NodeSpec/vector, or None = every alive node)."""
    state = backend.get_cluster_state()
    if nodes is None:
        return sorted(nid for nid, n in state.nodes.items() if n.alive)
    if isinstance(nodes, NodeSpec | Mapping | str):
        return NodeSpec.parse(nodes).select(state)
    chosen = list(nodes)
    for nid in chosen:
        state.node(nid)  # UnknownNodeError for a bad id
    return chosen


def validate_group(name: object, size: object) -> None:
    """Check a group's name (a non-empty string) and size (None for open, or an int >= 1).

    Raises:
        ValidationError: either is bad.
    """
    if not isinstance(name, str) or not name:
        raise ValidationError(f"group name must be a non-empty string, got {name!r}.")
    if size is not None:
        validate_count(size, what="group size")
