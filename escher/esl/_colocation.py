"""Co-location: the tasks of a group run on one node.

* Known group (`CoLocation.group`): the ESL picks a node whose available resources, minus
  what it already promised to other groups whose members have not started, cover the sum of
  the members' requests, and sets the group's resource there with capacity = group size.
  Members request one unit. If no node fits yet, the members wait and the ESL retries on the
  backend's clock.
* Unknown group (`CoLocation.unknown_group`): the first member launched creates the group's
  resource on the node where it lands; the others request it and follow.

Once every member of a group of known size has finished, the group's resource is deleted, so
the labels alive at any time follow the groups in flight, not every group ever made.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Mapping
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.plan import Colocated
from escher.core.resources import MAX_CAPACITY, Resources
from escher.core.task import TaskRef, TaskSpec
from escher.esl._constraint import Action, Constraint, Recorder
from escher.esl._contribution import Contribution, LabelNote
from escher.esl._esl import ESL, validate_group
from escher.esl._follow import followed_group_node
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import planning_backend
from escher.esl._policy import Policy, watch_done


class Group(Policy):
    """One co-location group of a `CoLocation` ESL. Launch its members with `launch`.

    Attributes:
        name: The group's name.
        label: Its ephemeral resource.
        size: Number of members (None for an unknown group of open size).
        resources: Each member's own request (used when `launch` gets none).
        node: Where a known group was placed (None while pending).
    """

    def __init__(
        self,
        owner: CoLocation,
        name: str,
        size: int | None,
        resources: Resources,
        policy: Policy | None,
        known: bool,
    ) -> None:
        self.owner = owner
        self.backend = owner.backend
        self.name = name
        self.size = size
        self.resources = resources
        self.policy = policy
        self.known = known
        self.label = owner.label(name)
        self.node: str | None = None
        self.refs: list[TaskRef] = []
        self._lock = threading.Lock()
        self._leader_issued = False
        self._member_request: Resources | None = None
        self._need: Resources | None = None
        # in a planning run a known group's node is left to placement ("some node with
        # room"): its first member creates the label where it lands, as an unknown group's
        self.deferred = known and planning_backend(owner.backend) is not None
        self.seq = 0  # creation order in its ESL
        self._finished = 0  # members in a final state
        self.settled = False  # every member started: nothing promised any more

    @property
    def source(self) -> str:
        kind = "group" if self.known else "unknown_group"
        return f"{self.owner.source}.{kind}({self.name!r})"

    @property
    def member_request(self) -> Resources:
        """One member's full request, without the group's own label."""
        if self._member_request is None:
            extra = self.policy.constraint().resources if self.policy else Resources()
            self._member_request = self.resources + extra
        return self._member_request

    @property
    def need(self) -> Resources:
        """What the whole group takes on its node (`size` member requests)."""
        if self._need is None:
            self._need = self.member_request * (self.size or 1)
        return self._need

    def _extra(self) -> Constraint:
        return self.policy.constraint() if self.policy is not None else Constraint()

    def constraint(self) -> Constraint:
        own = Constraint(Resources({self.label: 1}), source=self.source)
        if not self.known or self.deferred:
            with self._lock:
                first, self._leader_issued = not self._leader_issued, True
            if first:
                capacity = MAX_CAPACITY if self.size is None else self.size - 1
                own = Constraint(
                    on_start=(Action(self.label, capacity, None),) if capacity > 0 else (),
                    source=self.source,
                )
        return own & self._extra()

    def recorder(self) -> Recorder | None:
        return self.owner.record

    def default_resources(self) -> Mapping[str, float]:
        """A member's request when `launch` gets none: the group's per-member request."""
        return self.resources

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """Refuse a member beyond the group's size; then the AND-ed policy's hook."""
        if self.size is not None and len(self.refs) >= self.size:
            raise ValidationError(
                f"group {self.name!r} has {self.size} members already; make a new group."
            )
        return self.policy.before_launch(spec) if self.policy is not None else spec

    def after_launch(self, ref: TaskRef) -> None:
        with self._lock:
            self.refs.append(ref)
            first = len(self.refs) == 1
        if self.policy is not None:
            self.policy.after_launch(ref)
            watch_done(self.policy, ref)
        if self.known and not self.deferred and self.node is None and first:
            # the first member arms the retry timer if the group still fits nowhere; later
            # members find the same cluster, so they leave the retries to the timer
            self.owner._mark_waiting(self)
            self.owner._place_pending(self)

    def launch_failed(self, spec: TaskSpec) -> None:
        if self.policy is not None:
            self.policy.launch_failed(spec)

    def task_done(self, ref: TaskRef) -> None:
        """A member ended: once every member of a group of known size did, retire it."""
        with self._lock:
            self._finished += 1
            complete = self.size is not None and self._finished >= self.size
        if complete:
            self.owner._retire(self)

    def pledged(self) -> Resources:
        """What members that have not started yet will take on the group's node."""
        if not self.known or self.size is None or self.settled:
            return Resources()
        started = sum(1 for r in self.refs if r.started())
        if started >= self.size:
            self.settled = True
            return Resources()
        return self.member_request * (self.size - started)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        parts = self.policy.plan_parts(count, resources) if self.policy else PlanParts()
        source = self.source
        per_member = resources + parts.request
        size = self.size or count
        if self.known and not self.deferred:
            where: Any = self.node if self.node is not None else dict(per_member * size)
            own = PlanParts(
                resources=[(self.label, size, where, source)],
                request=Resources({self.label: 1}),
            )
        else:
            cap = MAX_CAPACITY if self.size is None else self.size - 1
            own = PlanParts(request=Resources({self.label: 1}))
            own.leader = (Resources(), {self.label: cap})
        own.intents.append(lambda names: Colocated(names, source=source))
        return own & parts

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        source = self.source
        own = PlanParts(intents=[lambda names: Colocated(names, source=source)])
        mine: list[tuple[Policy, PlanParts]] = [(self, own)]
        return mine + (self.policy.promises(resources) if self.policy is not None else [])


class CoLocation(ESL):
    """Co-locate groups of tasks, each group on one node (known or unknown groups).

    Args:
        backend: The backend (default: the current one).
        name: Used in labels and explanations.
        retry_interval: Seconds between placement retries of a known group no node fits yet.

    Example:
        >>> with CoLocation() as colo:                                   # doctest: +SKIP
        ...     ps = colo.group("ps", size=3, resources={"CPU": 1})
        ...     refs = [ps.launch(train, i) for i in range(3)]
    """

    kind = "colo"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        name: str | None = None,
        retry_interval: float = 0.5,
    ) -> None:
        super().__init__(backend, name=name)
        self.retry_interval = retry_interval
        self.groups: dict[str, Group] = {}
        self._open: dict[str, Group] = {}  # placed known groups still holding a promise
        self._pending: dict[str, Group] = {}  # known groups without a node yet
        # the same, by what they need, each in creation order (groups of one need fit or
        # fail alike on one snapshot, so a retry stops a need at its first failure)
        self._pending_by_need: dict[Resources, dict[str, Group]] = {}
        self._waiting: set[str] = set()  # pending groups with launched members
        self._retry_armed = False

    def group(
        self,
        name: str,
        size: int,
        resources: Mapping[str, float] | None = None,
        *,
        policy: Policy | None = None,
    ) -> Group:
        """A known group of `size` members, each requesting `resources`.

        Args:
            name: The group's name (unique in this ESL).
            size: How many members.
            resources: One member's own request.
            policy: Other policies every member also follows (AND); the group's node is
                chosen so that all members fit under them too.

        Returns:
            The `Group`; launch members with ``group.launch(fn, ...)``.
        """
        group = self._new(name, size, resources, policy, known=True)
        if group.deferred:
            return group  # placed by its first member (see Group.deferred)
        with self._lock:
            self._pending[name] = group
            self._pending_by_need.setdefault(group.need, {})[name] = group
        self._place(group)
        return group

    def unknown_group(
        self,
        name: str,
        size: int | None = None,
        *,
        resources: Mapping[str, float] | None = None,
        policy: Policy | None = None,
    ) -> Group:
        """A group placed by its first member: it lands anywhere and creates the resource.

        Args:
            name: The group's name (unique in this ESL).
            size: Number of members if known (the resource then has size - 1 units for the
                followers); None for an open group.
            resources: One member's own request.
            policy: Other policies every member also follows (AND).
        """
        return self._new(name, size, resources, policy, known=False)

    def _new(
        self,
        name: str,
        size: int | None,
        resources: Mapping[str, float] | None,
        policy: Policy | None,
        known: bool,
    ) -> Group:
        self._check_open()
        validate_group(name, size)
        if name in self.groups:
            raise ValidationError(f"{self.source} already has a group {name!r}.")
        if policy is not None and policy.backend is not self.backend:
            raise ValidationError("the group's policy must use the same backend as the ESL.")
        group = Group(self, name, size, Resources.of(resources), policy, known)
        self.own(group.label, need=group.need)
        with self._lock:
            group.seq = len(self.groups)
            self.groups[name] = group
        return group

    def _pledges(self, exclude: Group | None = None) -> dict[str, Resources]:
        pledged: dict[str, Resources] = {}
        for group in list(self._open.values()):
            if group is not exclude and group.node is not None:
                promise = group.pledged()
                if group.settled:
                    self._open.pop(group.name, None)
                elif promise:
                    pledged[group.node] = pledged.get(group.node, Resources()) + promise
        return pledged

    def choose_node(
        self,
        need: Resources,
        state: ClusterState | None = None,
        pledged: Mapping[str, Resources] | None = None,
    ) -> str | None:
        """The first node (by id) whose available minus pledged resources cover `need`."""
        state = self.backend.get_cluster_state() if state is None else state
        pledged = self._pledges() if pledged is None else pledged
        for nid in sorted(state.nodes):
            node = state.nodes[nid]
            free = node.available - pledged.get(nid, Resources())
            if node.alive and need.fits_in(free):
                return nid
        return None

    def _followed(
        self,
        group: Group,
        state: ClusterState | None,
        pledged: Mapping[str, Resources] | None,
    ) -> str | None:
        """The node a verified witness gives `group` (`escher.esl.follow`), if it is alive
        and has room for the group now; else None."""
        node = followed_group_node(group.source)
        if node is None:
            return None
        state = self.backend.get_cluster_state() if state is None else state
        pledged = self._pledges() if pledged is None else pledged
        found = state.nodes.get(node)
        if found is None or not found.alive:
            return None
        free = found.available - pledged.get(node, Resources())
        return node if group.need.fits_in(free) else None

    def _place(
        self,
        group: Group,
        state: ClusterState | None = None,
        pledged: dict[str, Resources] | None = None,
    ) -> bool:
        """Place `group` on a node; with `pledged` (node -> promised resources as of `state`),
        a placed group's whole need is added to it, as `state` does not show its members."""
        with self._lock:
            if self._closed or group.node is not None:
                return group.node is not None
            assert group.size is not None
            need = group.need
            node = self._followed(group, state, pledged) or self.choose_node(need, state, pledged)
            if node is None:
                return False
            if pledged is not None:
                pledged[node] = pledged.get(node, Resources()) + need
            group.node = node
            self._unpend(group)
            self._open[group.name] = group
            self.set_resource(group.label, group.size, node, need=need)
            return True

    def _unpend(self, group: Group) -> None:
        self._pending.pop(group.name, None)
        self._waiting.discard(group.name)
        same = self._pending_by_need.get(group.need)
        if same is not None:
            same.pop(group.name, None)
            if not same:
                del self._pending_by_need[group.need]

    def _mark_waiting(self, group: Group) -> None:
        with self._lock:
            if group.name in self._pending:
                self._waiting.add(group.name)

    def _place_pending(self, only: Group | None = None) -> None:
        """Try to place `only`, or every pending group (oldest first; a need whose oldest
        group fits nowhere is not tried again in this round). Arms the retry timer while
        groups with launched members wait."""
        with self._lock:
            if only is not None or self._pending:
                # one snapshot and the promises as of it; groups placed now add theirs
                state = self.backend.get_cluster_state()
                pledged = self._pledges()
                if only is not None:
                    self._place(only, state, pledged)
                else:
                    heads = [
                        (next(iter(same.values())).seq, need)
                        for need, same in self._pending_by_need.items()
                    ]
                    heapq.heapify(heads)
                    while heads:
                        _, need = heapq.heappop(heads)
                        same = self._pending_by_need.get(need)
                        if not same or not self._place(next(iter(same.values())), state, pledged):
                            continue
                        same = self._pending_by_need.get(need)
                        if same:
                            heapq.heappush(heads, (next(iter(same.values())).seq, need))
            arm = bool(self._waiting) and not self._retry_armed and not self._closed
            self._retry_armed = self._retry_armed or arm
        if arm:
            self.call_later(self.retry_interval, self._retry)

    def _retire(self, group: Group) -> None:
        """Every member of `group` is done: delete its resource (no member can come)."""
        with self._lock:
            if self._closed:
                return
            self._open.pop(group.name, None)
            self._unpend(group)
            group.settled = True
        # a member may have created it out of process: then forget_known looks where it is
        self.forget_known(group.label)

    def _retry(self) -> None:
        with self._lock:
            self._retry_armed = False
        self._place_pending()

    def contribution(self, ref: TaskRef) -> Contribution | None:
        """The groups whose label `ref` requests, in the user's terms (see `ESL.contribution`).

        A known group's label is created later while the group waits for a node with room
        for all its members (`need`); an unknown group's, until its first member starts.
        """
        request = ref.spec.resources
        notes: dict[str, LabelNote] = {}
        for group in list(self.groups.values()):
            if group.label not in request:
                continue
            if group.known:
                where = f" ({group.node})" if group.node is not None else ""
                later, meaning = group.node is None, f"the node of group {group.name!r}{where}"
            else:
                later = not any(member.started() for member in list(group.refs))
                meaning = f"the node where group {group.name!r}'s first member runs"
            need = group.need if later and group.known else None
            notes[group.label] = LabelNote(group.source, meaning, later, need, "group")
        return Contribution(self.source, notes) if notes else None

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """Every group's parts merged (declare groups one by one for per-group tasks)."""
        parts = PlanParts()
        for group in self.groups.values():
            parts = parts & group.plan_parts(count, resources)
        return parts

    def recover(self, state: ClusterState | None = None) -> Any:
        """Replay groups whose node left onto a node that fits the whole group."""
        report = super().recover(state)
        for label, _, target in report.restored:
            for group in self.groups.values():
                if group.label == label:
                    group.node = target
        return report
