"""Before launch: can a set of deadline jobs all finish in time on this cluster? (Z3.)

The question is a scheduling problem (choose for each job an option, a node and a start time
so that no node is ever over-committed and every job ends by its deadline); it is NP-hard in
general, so the check has a time limit and answers UNKNOWN when it runs out. The encoding:

* one Boolean per (job, option, node) that could ever run it, exactly one true per job;
* a real start time per job, at or after `now`;
* capacity, checked at every job's start (usage only grows when something starts): what the
  job takes, plus every other job on the same node running at that instant, plus the busy
  (already running) work that has not ended, fits the node;
* each job's deadline is tracked under its own name, so an unsat core names the jobs that
  cannot all meet their deadlines together.

Runtimes are the jobs' estimates; the verdict is about the plan, not about mis-estimates.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.resources import EPSILON, Resources, validate_quantity
from escher.core.verdict import Verdict
from escher.esl.deadline.jobs import DeadlineJob

if TYPE_CHECKING:
    import z3

__all__ = ["Busy", "DeadlineCheck", "check_deadlines"]


@dataclass(frozen=True)
class Busy:
    """Work already running: `resources` held on `node` until `until` (clock time)."""

    node: str
    resources: Mapping[str, float]
    until: float


@dataclass(frozen=True)
class DeadlineCheck:
    """The answer.

    Attributes:
        verdict: FEASIBLE (with `schedule`), INFEASIBLE (with `conflict`) or UNKNOWN.
        schedule: Job -> (option index, node, start time): a witness that meets every
            deadline.
        conflict: Names of jobs that cannot all meet their deadlines together (an unsat
            core: dropping one of them may make the rest feasible).
        reason: A readable explanation.
        seconds: Time the check took.
    """

    verdict: Verdict
    schedule: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    conflict: tuple[str, ...] = ()
    reason: str = ""
    seconds: float = 0.0

    @property
    def feasible(self) -> bool:
        """True if proven feasible."""
        return self.verdict is Verdict.FEASIBLE


Choice = tuple[int, str, float, Resources]  # (option index, node, runtime, request)


def check_deadlines(
    jobs: Sequence[DeadlineJob],
    state: ClusterState,
    *,
    now: float = 0.0,
    busy: Sequence[Busy] = (),
    timeout: float = 10.0,
) -> DeadlineCheck:
    """Decide whether every job of `jobs` can finish by its deadline on `state`'s nodes.

    Args:
        jobs: The jobs (their options' runtimes are estimates).
        state: The cluster; a node's capacity is what is available now plus what the `busy`
            work on it releases when it ends.
        now: The current clock time (no job starts earlier).
        busy: Running work and when it is expected to end.
        timeout: Seconds for the solver; UNKNOWN when it runs out.

    Returns:
        A `DeadlineCheck`.

    Raises:
        ValidationError: duplicate job names, a bad timeout, or busy work on an unknown node.
    """
    started = time.perf_counter()
    timeout = validate_quantity(timeout, what="timeout")
    _validate(jobs, state, busy)
    capacity = _capacities(state, busy)
    # Candidates and jobs no candidate can save, found without the solver.
    choices = {job.name: _choices(job, state, capacity, now) for job in jobs}
    hopeless = [job.name for job in jobs if not choices[job.name]]
    if hopeless:
        return DeadlineCheck(
            Verdict.INFEASIBLE,
            conflict=tuple(hopeless),
            reason=f"even alone on an idle node, {', '.join(hopeless)} cannot finish by "
            "the deadline with any option.",
            seconds=time.perf_counter() - started,
        )
    if not jobs:
        return DeadlineCheck(
            Verdict.FEASIBLE, reason="no jobs.", seconds=time.perf_counter() - started
        )
    model = _Model(jobs, choices, now, timeout)
    for job in jobs:
        model.add_capacity(job, busy, capacity)
    return model.answer(started)


def _validate(jobs: Sequence[DeadlineJob], state: ClusterState, busy: Sequence[Busy]) -> None:
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValidationError("job names must be unique for a deadline check.")
    for b in busy:
        if b.node not in state.nodes:
            raise ValidationError(f"busy work on unknown node {b.node!r}.")


def _capacities(state: ClusterState, busy: Sequence[Busy]) -> dict[str, Resources]:
    """Per alive node: what is available now plus what its busy work releases."""
    capacity: dict[str, Resources] = {}
    for nid, node in state.nodes.items():
        if node.alive:
            held = Resources()
            for b in busy:
                if b.node == nid:
                    held = held + Resources.of(b.resources)
            capacity[nid] = node.available + held
    return capacity


def _choices(
    job: DeadlineJob, state: ClusterState, capacity: Mapping[str, Resources], now: float
) -> list[Choice]:
    """The (option, node) pairs that could run `job` by its deadline if it were alone."""
    found = []
    for index, option in enumerate(job.options):
        request = Resources.of(option.resources)
        for nid, cap in capacity.items():
            if option.allows(state.nodes[nid].labels, cap) and (
                now + option.runtime <= job.deadline + EPSILON
            ):
                found.append((index, nid, option.runtime, request))
    return found


class _Model:
    """The Z3 encoding: a pick per (job, choice), a start per job, tracked deadlines.

    Each method imports z3 itself: importing `escher.esl` does not load the solver.
    """

    def __init__(
        self,
        jobs: Sequence[DeadlineJob],
        choices: Mapping[str, list[Choice]],
        now: float,
        timeout: float,
    ) -> None:
        import z3

        self.jobs = jobs
        self.choices = choices
        self.timeout = timeout
        self.solver = z3.Solver()
        self.solver.set("timeout", max(1, int(timeout * 1000)))
        self.start = {j.name: z3.Real(f"start[{j.name}]") for j in jobs}
        self.pick = {
            j.name: [z3.Bool(f"pick[{j.name}][{i}@{n}]") for i, n, _, _ in choices[j.name]]
            for j in jobs
        }
        self.assumptions = []
        for job in jobs:
            name = job.name
            self.solver.add(self.start[name] >= now)
            self.solver.add(z3.PbEq([(b, 1) for b in self.pick[name]], 1))
            duration = z3.Sum(
                [
                    z3.If(b, z3.RealVal(c[2]), z3.RealVal(0))
                    for b, c in zip(self.pick[name], choices[name], strict=True)
                ]
            )
            met = z3.Bool(f"deadline[{name}]")
            self.solver.add(z3.Implies(met, self.start[name] + duration <= job.deadline))
            self.assumptions.append(met)

    def add_capacity(
        self, job: DeadlineJob, busy: Sequence[Busy], capacity: Mapping[str, Resources]
    ) -> None:
        """At `job`'s start, on its node: it, the jobs running there and busy work fit."""
        import z3

        name = job.name
        for b, (_, nid, _, request) in zip(self.pick[name], self.choices[name], strict=True):
            for resource, quantity in request.items():
                terms = [z3.RealVal(quantity), *self._overlaps(name, nid, resource)]
                for w in busy:
                    q = Resources.of(w.resources).get(resource)
                    if w.node == nid and q > 0:
                        terms.append(
                            z3.If(self.start[name] < w.until, z3.RealVal(q), z3.RealVal(0))
                        )
                self.solver.add(z3.Implies(b, z3.Sum(terms) <= capacity[nid].get(resource)))

    def _overlaps(self, name: str, nid: str, resource: str) -> list[z3.ExprRef]:
        """What the other jobs on `nid` hold of `resource` when job `name` starts."""
        import z3

        terms = []
        for other in self.jobs:
            if other.name == name:
                continue
            for ob, (_, onid, olen, oreq) in zip(
                self.pick[other.name], self.choices[other.name], strict=True
            ):
                q = oreq.get(resource)
                if onid != nid or q <= 0:
                    continue
                s_o, s_j = self.start[other.name], self.start[name]
                overlap = z3.And(ob, s_o <= s_j, s_j < s_o + olen)
                terms.append(z3.If(overlap, z3.RealVal(q), z3.RealVal(0)))
        return terms

    def answer(self, started: float) -> DeadlineCheck:
        import z3

        answer = self.solver.check(*self.assumptions)
        seconds = time.perf_counter() - started
        if answer == z3.sat:
            return DeadlineCheck(
                Verdict.FEASIBLE,
                schedule=self._schedule(),
                reason="every job can meet its deadline.",
                seconds=seconds,
            )
        if answer == z3.unsat:
            core = {str(c) for c in self.solver.unsat_core()}
            conflict = tuple(j.name for j in self.jobs if f"deadline[{j.name}]" in core)
            return DeadlineCheck(
                Verdict.INFEASIBLE,
                conflict=conflict,
                reason=f"jobs {', '.join(conflict)} cannot all finish by their deadlines on "
                "these nodes, whatever the options and start times.",
                seconds=seconds,
            )
        return DeadlineCheck(
            Verdict.UNKNOWN,
            reason=f"no answer within {self.timeout:g}s ({self.solver.reason_unknown()}).",
            seconds=seconds,
        )

    def _schedule(self) -> dict[str, tuple[int, str, float]]:
        import z3

        model = self.solver.model()
        schedule = {}
        for job in self.jobs:
            for b, (index, nid, _, _) in zip(
                self.pick[job.name], self.choices[job.name], strict=True
            ):
                if z3.is_true(model.eval(b, model_completion=True)):
                    value = model.eval(self.start[job.name], model_completion=True)
                    schedule[job.name] = (index, nid, _to_float(value))
        return schedule


def _to_float(value: z3.ExprRef) -> float:
    import z3

    if z3.is_rational_value(value):
        return float(value.numerator_as_long()) / float(value.denominator_as_long())
    if z3.is_algebraic_value(value):
        return float(value.approx(9).as_decimal(9).rstrip("?"))
    return float(str(value))
