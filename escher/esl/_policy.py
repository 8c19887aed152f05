"""`Policy`: what constrains where tasks run, its launch hooks, and how policies compose.

A policy turns a scheduling intent into a `Constraint` per task and promises the intent for
the verifier: in a planning run (`escher.esl.plan_app`) each launch reports the policy's
`promises`, so the plan comes from the launching code itself. Launching goes through
documented hooks, in the style of dask's scheduler plugins, so a policy adds behaviour
without re-declaring `launch`:

* `before_launch(spec) -> spec`: the spec is built (request = the task's own + the
  constraint's); return it, or a changed copy (e.g. steered to a node);
* `after_launch(ref)`: the backend accepted the task;
* `task_done(ref)`: the task reached a final state (registered only if overridden);
* `launch_failed(spec)`: the backend refused the spec `before_launch` returned (undo what
  `before_launch` reserved).

Composition: `AllOf` (``a & b``, every policy holds: merged requests, every hook runs) and
`FirstOf` (``a | b``, ordered fallbacks: the paper's soft constraints).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from escher.backends.base import Backend
from escher.backends.planning import PlanningBackend
from escher.core.context import current_backend
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpec
from escher.core.plan import Plan
from escher.core.resources import Resources, validate_quantity
from escher.core.task import TaskRef, TaskSpec
from escher.esl._constraint import Constraint, Recorder, build_spec, split_options
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import planning_backend, record_launch
from escher.esl._soft import SoftTaskRef


class Policy:
    """Something that constrains where tasks run. ESLs, groups and compositions are policies.

    `a & b` places tasks so that both hold (merged requests); `a | b` tries `a` first and
    falls back to `b` when a task has not started within the fallback timeout.
    """

    backend: Backend
    #: In an `AllOf`, run this policy's `before_launch` after the others' (it steers by the
    #: final request, e.g. `Preferences`).
    launch_last = False
    #: Its tasks wait their turn (a queue): a plan records them as not concurrent (each
    #: only has to fit when it starts).
    queues = False
    #: Labels its tasks request that other tasks set when they end (an event): a plan
    #: records its tasks without them, as not concurrent, with a warning.
    waits_for: tuple[str, ...] = ()

    #: How the policy is named in verifier explanations.
    @property
    def source(self) -> str:
        return type(self).__name__

    def constraint(self) -> Constraint:
        """The constraint for the next task launched under this policy."""
        return Constraint(source=self.source)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """What the policy adds to a plan for `count` tasks requesting `resources`."""
        return PlanParts()

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        """What this policy promises about one task requesting `resources`, per policy that
        makes the promise (a composition lists its members' promises).

        A planning run keys each intent by the policy that made it, so every task launched
        under one policy (directly or through any composition) shares one intent.
        """
        return [(self, self.plan_parts(1, resources))]

    def recorder(self) -> Recorder | None:
        """Where tasks report the labels they set from inside (an ESL's ledger), if any."""
        return None

    def default_resources(self) -> Mapping[str, float] | None:
        """The request `launch` uses when given none (default: none)."""
        return None

    # --- hooks (no-ops here; override what the policy needs) --------------------------------
    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """Hook: the task's spec is built; return it or a changed copy to launch instead.

        Raise an `EscherError` to refuse the launch (nothing is launched then).
        """
        return spec

    def after_launch(self, ref: TaskRef) -> None:
        """Hook: the backend accepted the task (it may have started or even finished)."""

    def task_done(self, ref: TaskRef) -> None:
        """Hook: the task reached a final state (called once; registered only if overridden)."""

    def launch_failed(self, spec: TaskSpec) -> None:
        """Hook: the backend refused `spec` (what `before_launch` returned) with an error."""

    # --- launching ----------------------------------------------------------------------------
    def launch(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> TaskRef:
        """Launch `fn(*args, **kwargs)` under this policy.

        Args:
            fn: The task body.
            *args: Its positional arguments.
            resources: The task's own request (CPU, GPU, ...; default: the policy's
                `default_resources`); the policy adds its part.
            name: Task name.
            **kwargs: Keyword arguments of `fn`, plus the task options ``max_retries``,
                ``retry_exceptions`` and ``duration`` (simulated seconds).

        Returns:
            The task's `TaskRef`.
        """
        options = split_options(kwargs)
        if resources is None:
            resources = self.default_resources()
        spec = build_spec(
            fn, args, kwargs, self.constraint(), resources, name, self.recorder(), **options
        )
        return self.launch_spec(spec)

    def launch_spec(self, spec: TaskSpec) -> TaskRef:
        """Launch a built spec through this policy's hooks (`before_launch`, the backend,
        `after_launch`, then `task_done` when it ends)."""
        spec = self.before_launch(spec)
        try:
            ref = self.backend.launch(spec)
        except BaseException:
            self.launch_failed(spec)
            raise
        record_launch(self, ref)
        self.after_launch(ref)
        watch_done(self, ref)
        return ref

    # --- the verifier ---------------------------------------------------------------------
    def declare(
        self,
        plan: Plan | None = None,
        name: str = "tasks",
        *,
        count: int = 1,
        resources: Mapping[str, float] | None = None,
    ) -> Plan:
        """Declare `count` tasks named `name` under this policy in `plan` (a new one if None).

        Adds the policy's resources, the tasks with their merged requests, and the intents,
        each with a `source` in the policy's terms. Returns the plan, ready for
        ``escher.verify.verify(plan, state)``.
        """
        plan = Plan() if plan is None else plan
        base = Resources.of(resources)
        parts = self.plan_parts(count, base)
        _add_resources(plan, parts)
        recorded = _record_tasks(parts, name, count, base, f"{self.source}.launch", self)
        for key, domains in recorded.topologies.items():
            plan.add_topology(key, domains)
        for task in recorded.tasks:
            plan.add_task(
                task.name,
                task.resources,
                count=task.count,
                creates={c.label: c.capacity for c in task.creates} or None,
                concurrent=task.concurrent,
                source=task.source,
                fallbacks=task.fallbacks,
            )
        for intent in recorded.intents:
            plan.add_intent(intent)
        return plan

    def __and__(self, other: Policy) -> Policy:
        return AllOf(self, other)

    def __or__(self, other: Policy) -> Policy:
        return FirstOf(self, other)


def watch_done(policy: Policy, ref: TaskRef) -> None:
    """Call `policy.task_done(ref)` when `ref` ends, if the policy overrides the hook."""
    if type(policy).task_done is not Policy.task_done:
        ref.add_done_callback(policy.task_done)


def _add_resources(plan: Plan, parts: PlanParts) -> None:
    seen = {(r.label, r.capacity, r.node_spec) for r in plan.resources}
    for label, capacity, node_spec, source in parts.resources:
        key = (label, capacity, NodeSpec.parse(node_spec))
        if key not in seen:
            seen.add(key)
            plan.add_resource(label, capacity, node_spec, source=source)


def _record_tasks(
    parts: PlanParts, name: str, count: int, base: Resources, source: str, owner: Policy
) -> Plan:
    """Record the declared tasks as a planning run records launches (`PlanningBackend`:
    one launch per replica, alike launches one task with a count, the intents promised
    under `owner`): a distinct first task for groups led by it, or one task per part of a
    split. The plan of those tasks and intents (the policy's resources are not in it)."""
    planning = PlanningBackend()
    launches: list[tuple[str, Resources, int, dict[str, float]]] = []
    if parts.split:
        if parts.leader is not None:
            raise ValidationError("a group led by its first task cannot also be split.")
        for suffix, part_count, extra in parts.split:
            launches.append(
                (f"{name}@{suffix}", base + parts.request + extra, part_count, parts.creates)
            )
    elif parts.leader is None:
        launches.append((name, base + parts.request, count, parts.creates))
    else:
        request, creates = parts.leader
        launches.append((f"{name}-first", base + request, 1, creates))
        if count > 1:
            launches.append((name, base + parts.request, count - 1, parts.creates))
    for task, request, replicas, creates in launches:
        for _ in range(replicas):
            ref = planning.record(TaskSpec(_declared_task, resources=request, name=task))
            planning.annotate(ref, source=source, creates=creates)
            for index, build in enumerate(parts.intents):
                planning.promise((owner, index), build, ref)
    for key, domains in parts.topologies.items():
        planning.add_topology(key, domains)
    return planning.plan()


def _declared_task() -> None:
    """The body of a declared task: declared tasks are recorded, never run."""


class Requests(Policy):
    """A plain resource request as a policy (an alternative of a soft constraint)."""

    def __init__(self, resources: Mapping[str, float], backend: Backend | None = None) -> None:
        self.resources = Resources.of(resources)
        if backend is None:
            backend = current_backend()
        self.backend = backend

    @property
    def source(self) -> str:
        return f"Requests({self.resources.to_dict()})"

    def constraint(self) -> Constraint:
        return Constraint(self.resources, source=self.source)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return PlanParts(request=self.resources)


def _backend_of(items: tuple[Any, ...], backend: Backend | None) -> Backend:
    for item in items:
        if isinstance(item, Policy):
            found = item.backend
            if backend is not None and found is not backend:
                raise ValidationError(
                    "composed policies must use the same backend; create them on one backend."
                )
            backend = found
    if backend is None:
        backend = current_backend()
    return backend


class AllOf(Policy):
    """AND: every policy holds. A task's request is the sum of the policies' requests.

    Every policy's hooks run: `before_launch` in order (each sees the previous one's spec;
    policies with `launch_last` after the others), then `after_launch` and `task_done` for
    each.

    Example: ``lb & colo.group("pair-1", size=2)`` places a pair on one node while the
    load balancer caps tasks per node. ``a & b`` builds the same thing.
    """

    policies: tuple[Policy, ...]

    def __init__(self, *policies: Policy) -> None:
        if not policies or not all(isinstance(p, Policy) for p in policies):
            raise ValidationError("AllOf takes one or more policies (ESLs, groups, ...).")
        flat: list[Policy] = []
        for policy in policies:
            flat.extend(policy.policies if isinstance(policy, AllOf) else [policy])
        self.policies = tuple(flat)
        self.backend = _backend_of(self.policies, None)

    @property
    def source(self) -> str:
        return " & ".join(p.source for p in self.policies)

    @property
    def queues(self) -> bool:  # type: ignore[override]
        return any(p.queues for p in self.policies)

    @property
    def waits_for(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(label for p in self.policies for label in p.waits_for)

    def constraint(self) -> Constraint:
        return functools.reduce(Constraint.__and__, (p.constraint() for p in self.policies))

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return functools.reduce(
            PlanParts.__and__, (p.plan_parts(count, resources) for p in self.policies)
        )

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        return [found for p in self.policies for found in p.promises(resources)]

    def recorder(self) -> Recorder | None:
        recorders = [r for p in self.policies if (r := p.recorder()) is not None]
        if not recorders:
            return None

        def record(label: str, node: str, capacity: float) -> None:
            for recorder in recorders:
                recorder(label, node, capacity)

        return record

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        for policy in sorted(self.policies, key=lambda p: p.launch_last):
            spec = policy.before_launch(spec)
        return spec

    def after_launch(self, ref: TaskRef) -> None:
        for policy in self.policies:
            policy.after_launch(ref)
        for policy in self.policies:
            watch_done(policy, ref)

    def launch_failed(self, spec: TaskSpec) -> None:
        for policy in self.policies:
            policy.launch_failed(spec)


class FirstOf(Policy):
    """OR as ordered fallbacks (the paper's soft constraints).

    Args:
        *alternatives: Policies, or plain resource requests (mappings), in order of
            preference.
        timeout: Seconds (of the backend's clock) an attempt may wait before the task is
            cancelled and resubmitted with the next alternative. The last one waits forever.
        backend: Needed only when every alternative is a plain request (default: the
            current backend).

    Example: ``FirstOf(fair & spread, fair, timeout=2)`` tries fair share with anti-affinity
    and falls back to fair share alone. ``a | b`` builds the same with the default timeout.
    """

    default_timeout = 1.0
    alternatives: tuple[Policy, ...]
    timeout: float

    def __init__(
        self,
        *alternatives: Policy | Mapping[str, float],
        timeout: float | None = None,
        backend: Backend | None = None,
    ) -> None:
        if not alternatives:
            raise ValidationError("FirstOf needs at least one alternative.")
        for alt in alternatives:
            if not isinstance(alt, Policy | Mapping):
                raise ValidationError(
                    f"an alternative must be a policy or a resource mapping, got {alt!r}."
                )
        self.backend = _backend_of(alternatives, backend)
        flat: list[Policy] = []
        for alt in alternatives:
            policy = alt if isinstance(alt, Policy) else Requests(alt, self.backend)
            if isinstance(policy, FirstOf) and policy.timeout == (timeout or policy.timeout):
                flat.extend(policy.alternatives)
            else:
                flat.append(policy)
        self.alternatives = tuple(flat)
        self.timeout = validate_quantity(
            self.default_timeout if timeout is None else timeout, what="timeout"
        )
        #: Which alternative `declare` puts in a plan (the preferred one by default).
        self.declared = 0

    @property
    def source(self) -> str:
        return " | ".join(f"({p.source})" for p in self.alternatives)

    def constraint(self) -> Constraint:
        return self.alternatives[0].constraint()

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return self.alternatives[self.declared].plan_parts(count, resources)

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        return self.alternatives[self.declared].promises(resources)

    def launch(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> TaskRef:
        """Launch with the first alternative, falling back after `timeout` (see class doc).

        Each attempt goes through its alternative's hooks.

        Returns:
            A `SoftTaskRef`: a `TaskRef` that follows whichever attempt runs.
        """
        options = split_options(kwargs)

        built: dict[int, TaskSpec] = {}  # specs a planning run built ahead

        def make(index: int) -> TaskSpec:
            spec = built.pop(index, None)
            if spec is not None:
                return spec
            alt = self.alternatives[index]
            return build_spec(
                fn, args, kwargs, alt.constraint(), resources, name, alt.recorder(), **options
            )

        def submit(index: int, spec: TaskSpec) -> TaskRef:
            return self.alternatives[index].launch_spec(spec)

        def launch() -> SoftTaskRef:
            return SoftTaskRef(
                make,
                submit,
                alternatives=len(self.alternatives),
                timeout=self.timeout,
                clock=self.backend.clock,
            )

        planning = planning_backend(self.backend)
        if planning is None or len(self.alternatives) == 1:
            return launch()
        # A planning run records the task whole: its fallback requests, and as
        # requirements only what every alternative promises (the rest: preferences).
        specs = [make(i) for i in range(len(self.alternatives))]
        built.update(enumerate(specs))
        keys = [
            {
                (owner, i)
                for owner, parts in alt.promises(spec.resources)
                for i in range(len(parts.intents))
            }
            for alt, spec in zip(self.alternatives, specs, strict=True)
        ]
        common = set.intersection(*keys)
        with planning.alternatives([spec.resources for spec in specs[1:]], common):
            return launch()


#: The paper's soft constraints are ordered fallbacks.
SoftConstraints = FirstOf
