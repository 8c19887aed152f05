"""The decision pipeline for one (sub-)problem, in named stages, all under one deadline.

1. `precheck`: exact cheap proofs (`_bounds`), with the cause in one line.
2. `greedy`: first-fit decreasing with several node orders (a witness counts once checked).
3. `dive`: one descent of the packing search that picks balanced fills (`_dive`); at scale
   it finds packings that the greedy orders and the Z3 counts miss, at the cost of one pass.
4. `arcflow`: the arc-flow model (HiGHS), exact for one dimension; else each dimension
   alone, for a conflict (a share of the time left).
5. `relaxed`: Z3 on counts per (class, node type) with valid per-node cuts: UNSAT is a proof
   with an unsat core; SAT counts are packed into nodes.
6. `search`: exact bin completion over classes (`_search`), with symmetry breaking over
   identical nodes and waste pruning; a short run first, then the rest of its share.
7. `lns`: on tight problems, the neighbourhood search with HiGHS sub-solves (`_lns`).
8. `exact`: Z3 per node, for small problems.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.check import Placement
from escher.verify.engines import _portfolio, _repair
from escher.verify.engines._bounds import precheck
from escher.verify.engines._dive import find
from escher.verify.engines._greedy import STRATEGIES, check, classes, greedy
from escher.verify.engines._search import applicable, search
from escher.verify.model import Item, Mods, Problem, Timeout, build, type_total

if TYPE_CHECKING:
    from escher.verify.engines._graph import Graph

_T = TypeVar("_T")

#: Seconds for the first, short try of the packing search.
QUICK_SEARCH = 1.0

#: Problems with at most this many item copies go to the exact Z3 model right after greedy.
SMALL = 48

#: Share of the time left that the greedy orders may use together. They run before the race
#: in the calling process, so what they take the engines lose: on a tight packing at 1,000
#: nodes the six orders took 8.5 s of a 10 s budget on a loaded machine, all stuck.
GREEDY_SHARE = 0.2

#: Share of the time left the dive may use.
DIVE_SHARE = 0.3

#: Seconds the dive may take in this process before the race: `FIRST_DIVE_FACTOR` x the
#: greedy orders' seconds on this problem (a measure of the problem and of the machine's
#: load now), within `FIRST_DIVE_MIN`..`FIRST_DIVE_MAX`. One descent places an easy plan in
#: about what the greedy orders took (10-40 ms of CPU at 100-1,000 nodes), and then no
#: process is started; a plan it does not place starts the race at most this much later.
FIRST_DIVE_FACTOR = 2.0
FIRST_DIVE_MIN = 0.03
FIRST_DIVE_MAX = 0.1

#: Balance and repair in this process before the race (`_repair_stage`): at most this share
#: of the time left, and at most `REPAIR_MAX` seconds.
REPAIR_SHARE = 0.1
REPAIR_MAX = 0.5

#: Share of the lns lane's time for balance and repair when the parent's budget was short.
LANE_REPAIR_SHARE = 0.3

#: Share of the time left the arc-flow projections (a hunt for a conflict) may use.
PROJECT_SHARE = 0.25

#: Cells (classes x dimensions) past which the packing engines leave a problem alone.
SPACE_LIMIT = 1_000_000

#: Seconds past its deadline that the 0/1 model's thread is waited for (it is interrupted
#: at the deadline; a solver answers an interrupt within milliseconds).
SAT_GRACE = 1.0

#: Share of the time left that the 0/1 model of a separation graph may use.
GRAPH_SHARE = 0.5

#: Copies of a separation graph from which the race starts no Z3 lane when the graph is
#: the bulk of the problem: Z3 decided colourings of 34-125 tasks in the bench (col-s,
#: col2, col2-k) and none of 1,000-2,000 (col-l, col2-l, col-m, col3, col4, col5), where
#: its lane only took a processor from the local search (docs/verify-engines.md).
GRAPH_ONLY_COPIES = 500

#: Niceness of the 0/1 model's lane: the local search answered first on every 1,000-task
#: colouring of the bench but col4 (2,000 tasks on 5 nodes, Glucose first in 1.8 s), so
#: Glucose takes the processor time the local search leaves (a whole core of two on a calm
#: machine) rather than half of the local search's core on a loaded one.
SAT_NICE = 10

#: Share of the time left that DSatur may use, and the CPU seconds of the first try of
#: Tabucol (each next try doubles them): it colours the planted 120-task colourings of the bench in
#: under 0.1 s, belief propagation + Tabucol the 1,000-task ones above the threshold in
#: 0.1-0.7 s of CPU per start; below it (4,000 pairs on 4 nodes: the beliefs find no
#: planted colouring) Tabucol needs 40,000-300,000 steps, 1-6 s, and tries of 0.5 s were
#: cut short again and again (0.5 / 1.0 / 1.5 measured on seeds 1-3,
#: docs/verify-engines.md).
TABU_SHARE = 0.25
TABU_SECONDS = 1.5

#: Share of the time left the neighbourhood search may use when the engines run in turn
#: (after the exact search: minimisation and intent proofs decide many infeasible
#: sub-problems in turn, where it can only spend time).
LNS_SHARE = 0.4

#: Share of the time left that the exact search may use before the Z3 fallbacks run.
SEARCH_SHARE = 0.8


@dataclass
class Decision:
    """The answer for one problem.

    Attributes:
        status: ``feasible``, ``infeasible`` or ``unknown``.
        problem: The problem decided.
        placement: For feasible: copies of each item on nodes (checked by `_greedy.check`).
        core: For infeasible: the statements of a conflict.
        method: What decided it.
        reason: For unknown: why it stopped.
        cause: For infeasible: the cause in one line; for unknown: the tightest bound.
        proven: For unknown: what was established.
        decide_by: For unknown: what would decide it.
        times: Seconds per stage.
    """

    status: str
    problem: Problem
    placement: Placement | None = None
    core: frozenset[str] = frozenset()
    method: str = ""
    reason: str = ""
    cause: str = ""
    proven: list[str] = field(default_factory=list)
    decide_by: str = ""
    times: dict[str, float] = field(default_factory=dict)


class _Run:
    """One decision: the problem, the deadline, and the stage timings."""

    def __init__(self, p: Problem, deadline: float, memory_mb: int | None) -> None:
        self.p = p
        self.deadline = deadline
        self.memory_mb = memory_mb
        self.times: dict[str, float] = {}
        self.proven: list[str] = []
        self.notes: list[str] = []
        self.repair_cut = False  # `_repair_stage` ran out of its budget in this process

    @cached_property
    def packing(self) -> _Packing | None:
        """The part of the problem the packing engines take (built once per decision)."""
        return None if self.too_wide else _packing(self.p)

    @cached_property
    def graph(self) -> Graph | None:
        """The conflict graph of the separations (`_graph.conflict_graph`), or None when
        the graph engine does not take the problem (built once per decision, before the
        lanes fork)."""
        from escher.verify.engines import _graph

        return _graph.conflict_graph(self.p) if _graph.applicable(self.p) else None

    @cached_property
    def too_wide(self) -> bool:
        """The packing engines' table (classes x dimensions) would be too large to build in
        time: 1,000 tasks under 5,000 separated pairs are 5 million cells, and building
        them alone took 10 s past the deadline. The graph engine takes such problems."""
        dims = len(self.p.resources) * len(self.p.groups) + len(self.p.limits)
        return len(classes(self.p)) * dims > SPACE_LIMIT

    def timed(self, name: str, fn: Callable[[], _T]) -> _T:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - t0

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def found(self, placement: Placement | None, method: str) -> Decision | None:
        if placement is not None and not check(self.p, placement):
            return Decision("feasible", self.p, placement, method=method, times=self.times)
        return None

    def infeasible(self, core: frozenset[str], method: str, cause: str) -> Decision:
        return Decision(
            "infeasible", self.p, core=core, method=method, cause=cause, times=self.times
        )


def greedy_until(run: _Run) -> float:
    """The deadline of the greedy stage: `GREEDY_SHARE` of the time left (never past the
    run's deadline), so the engines after it always keep most of the budget."""
    return time.monotonic() + max(0.0, run.left()) * GREEDY_SHARE


def _greedy_stage(run: _Run) -> Decision | None:
    """The greedy orders in turn within `greedy_until`; an order cut short by that deadline
    answers nothing (its partial placement is no witness), and the stage gives up."""
    small = sum(it.mult for it in run.p.items) <= SMALL
    until = greedy_until(run)
    for strategy in ("spread", "plain") if small else STRATEGIES:
        try:
            placement = run.timed(
                "greedy", partial(greedy, run.p, deadline=until, strategy=strategy)
            )
        except Timeout:
            return None
        got = run.found(placement, f"greedy witness ({strategy})")
        if got is not None:
            return got
    return None


def _graph_stage(run: _Run, share: float = GRAPH_SHARE, exact: bool = True) -> Decision | None:
    """Pairwise separations as a graph: DSatur first (milliseconds), then the local search
    (`_local_search`: belief propagation and Tabucol) and, with `exact`, the exact 0/1
    model side by side in a thread (the SAT solver releases the GIL): the first definite
    answer wins and the other is stopped at once. Without `exact` the local search has
    the time alone (the race runs the 0/1 model in a lane of its own, `_sat_lane`)."""
    from escher.verify.engines import _graph

    g = run.graph
    if g is None:
        return None
    until = time.monotonic() + max(0.0, run.left()) * TABU_SHARE
    clique = run.timed("graph", partial(_graph.graph_clique_conflict, run.p, g, until))
    if clique is not None:  # the pre-checks' search had a fraction of a second
        return run.infeasible(clique.core, "clique of separations", clique.cause)
    until = time.monotonic() + min(TABU_SECONDS, max(0.0, run.left()) * TABU_SHARE)
    fixed = run.timed("graph", partial(_graph.colour, run.p, g, until))
    got = _around(run, fixed, "graph colouring (DSatur) + greedy")
    if got is not None:
        return got
    sat_until = time.monotonic() + max(0.0, run.left()) * share
    if not exact:
        return _local_search(run, g, min(sat_until, run.deadline), threading.Event())
    stop_sat, stop_tabu = threading.Event(), threading.Event()
    answer: list[tuple[str, Any]] = []

    def sat() -> None:
        try:
            answer.append(_graph.solve(run.p, g, sat_until, run.memory_mb, stop_sat))
        finally:
            stop_tabu.set()

    t0 = time.perf_counter()
    worker = threading.Thread(target=sat, daemon=True)
    worker.start()
    got = None
    try:
        got = _local_search(run, g, min(sat_until, run.deadline), stop_tabu)
    finally:
        if got is not None:
            stop_sat.set()
        worker.join(timeout=max(0.0, sat_until - time.monotonic()) + SAT_GRACE)
        stop_sat.set()
        run.times["graph_sat"] = run.times.get("graph_sat", 0.0) + time.perf_counter() - t0
    if got is not None:
        return got
    return _sat_answer(run, answer[0] if answer else None)


def _sat_answer(run: _Run, answer: tuple[str, Any] | None) -> Decision | None:
    """The decision from the 0/1 model's answer (`_graph.solve`), or a note why none."""
    status, data = answer or ("unknown", "the SAT solver did not stop in time")
    data = cast(Any, data)
    if status == "unsat":
        return run.infeasible(frozenset(data), "0/1 model (SAT)", _core_cause(run.p, data))
    if status == "sat":
        return run.found(data, "0/1 model (SAT)")
    run.notes.append(f"0/1 model: {data}")
    return None


def _local_search(run: _Run, g: Any, until: float, stop: threading.Event) -> Decision | None:
    """Colourings by local search until `until` or `stop`: per seed, belief propagation
    then Tabucol from its colouring (planted colourings of 1,000 tasks in a fraction of a
    second), then Tabucol from a random start. Each Tabucol try may take twice as much CPU
    time as the one before (`TABU_SECONDS` the first; after the beliefs, at least as much
    as they took): budgets in CPU seconds, so a loaded machine slows the search, and cuts
    no try short."""
    from escher.verify.engines import _graph

    seed = 0
    while time.monotonic() < until and not stop.is_set():
        budget = TABU_SECONDS * 2**seed
        tries: list[tuple[str, Callable[[], Placement | None]]] = [
            (  # below the threshold the beliefs find no planted colouring, only a start
                "graph colouring (beliefs + Tabucol) + greedy",
                partial(_graph.propagated_colour, run.p, g, until, stop, seed, budget),
            ),
            (
                "graph colouring (Tabucol) + greedy",
                partial(_tabu_try, run, g, until, stop, seed, budget),
            ),
        ]
        for method, colour in tries:
            got = _around(run, run.timed("graph", colour), method)
            if got is not None:
                return got
            if stop.is_set() or time.monotonic() >= until:
                return None
        seed += 1
    return None


def _tabu_try(
    run: _Run, g: Any, until: float, stop: threading.Event, seed: int, seconds: float
) -> Placement | None:
    """Tabucol from a random start for at most `seconds` of this thread's CPU time (and not
    past `until`)."""
    from escher.verify.engines import _graph

    return _graph.tabu_colour(run.p, g, until, stop, seed, seconds=seconds)


def _around(run: _Run, fixed: Placement | None, method: str) -> Decision | None:
    """The other items placed around `fixed` by the greedy orders, checked."""
    if fixed is None:
        return None
    for strategy in STRATEGIES:
        placed = run.timed(
            "graph", partial(greedy, run.p, deadline=run.deadline, strategy=strategy, fixed=fixed)
        )
        got = run.found(placed, method)
        if got is not None:
            return got
    return None


def _arcflow_stage(run: _Run) -> Decision | None:
    """The arc-flow model (HiGHS): exact for one dimension, else each dimension alone."""
    from escher.verify.engines import _arcflow  # imported when first needed (SciPy), as are Z3's

    if not _arcflow.available() or not applicable(run.p) or run.too_wide:
        return None
    status, placement = run.timed("arcflow", lambda: _arcflow.solve(run.p, run.deadline))
    if status == "feasible":
        return run.found(placement, "arc-flow model (HiGHS)")
    if status == "infeasible":
        return run.infeasible(
            _all_statements(run.p),
            "arc-flow model (HiGHS)",
            "the tasks do not pack into the nodes (the exact arc-flow model has no solution)",
        )
    until = time.monotonic() + max(0.0, run.left()) * PROJECT_SHARE
    core = run.timed("arcflow", lambda: _arcflow.project(run.p, until))
    if core is not None:
        return run.infeasible(
            core, "arc-flow model of one resource (HiGHS)", _core_cause(run.p, core)
        )
    return None


def _relaxed_stage(run: _Run) -> Decision | None:
    from escher.verify.engines import _smt

    status, data = run.timed("z3_relaxed", lambda: _smt.relaxed(run.p, run.deadline, run.memory_mb))
    if status == "unsat":
        return run.infeasible(frozenset(data), "z3 (per node type)", _core_cause(run.p, data))
    if status != "sat":
        run.notes.append(f"z3 per node type: {data}")
        return None
    run.proven.append("a relaxation (counts per node type, per-node cuts) is satisfiable")
    placement = run.timed(
        "pack", lambda: greedy(run.p, targets=data, deadline=run.deadline, strategy="spread")
    )
    return run.found(placement, "z3 counts + packing")


def _simple(p: Problem, it: Item) -> bool:
    """An item the packing search handles: creates nothing, needs nothing created, in no
    domain rule."""
    return (
        not it.creates
        and not any(it.need(r) for r in p.created)
        and all(t in p.limits for t in it.tags)
    )


def _self_contained(p: Problem) -> list[int]:
    """Items the packing search may place as if simple: each creates every created label it
    needs, at least as much as it needs, on a label no node has and no other item needs (a
    co-location group made one item: its creator and its members). Packing them with the
    simple items keeps room for them; the witness is checked as always."""
    needing: dict[int, int] = {}
    for it in p.items:
        for r in p.created:
            if it.need(r):
                needing[r] = needing.get(r, 0) + 1
    out = []
    for i, it in enumerate(p.items):
        needs = [r for r in p.created if it.need(r)]
        if (
            it.creates
            and needs
            and all(t in p.limits for t in it.tags)
            and all(it.creates.get(r, 0) >= it.need(r) and needing[r] == 1 for r in needs)
            and all(not nt.cap[r] and not nt.held[r] for nt in p.types for r in it.creates)
        ):
            out.append(i)
    return out


def _plain(p: Problem, it: Item) -> Item:
    """`it` without the labels it creates and needs (they are its own)."""
    made = set(it.creates)

    def base(vector: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(0 if r in made else q for r, q in enumerate(vector))

    loads = {g: base(load) for g, load in it.loads.items()}
    return replace(it, single=base(it.single), loads=loads, creates={}, nonzero=())


@dataclass
class _Packing:
    """What the packing engines take of a problem: the simple items, and co-location groups
    made plain (`_self_contained`) when the search cannot take the whole problem."""

    sub: Problem
    packed: list[int]  # the index in the problem of each item of `sub`
    whole: bool  # `sub` is the problem itself
    groups: bool  # groups were made plain: an "infeasible" names no group's statements


def _packing(p: Problem) -> _Packing | None:
    simple = [i for i, it in enumerate(p.items) if _simple(p, it)]
    if not simple or not p.types:
        return None
    if applicable(p):
        return _Packing(p, list(range(len(p.items))), True, False)
    own = set(_self_contained(p))
    packed = sorted(simple + list(own))
    items = [_plain(p, p.items[i]) if i in own else p.items[i] for i in packed]
    sub = replace(p, items=items, rules=[], created=frozenset())
    return _Packing(sub, packed, False, bool(own))


def _dive_stage(run: _Run) -> Decision | None:
    """The packing search's dive alone: one descent, no backtracking, within a share of the
    time left (its candidates cost more with many distinct task shapes)."""
    pk = run.packing
    if pk is None:
        return None
    until = time.monotonic() + max(0.0, run.left()) * DIVE_SHARE
    placement = run.timed("dive", lambda: find(pk.sub, until))
    return _placed(run, pk, placement, "packing search (dive)")


def _first_dive(run: _Run) -> Decision | None:
    """The dive in this process with a small budget (`FIRST_DIVE_FACTOR` x the greedy
    orders' seconds, within `FIRST_DIVE_MIN`..`FIRST_DIVE_MAX`), before any lane starts."""
    pk = run.packing
    if pk is None:
        return None
    greedy_seconds = FIRST_DIVE_FACTOR * run.times.get("greedy", 0.0)
    budget = min(FIRST_DIVE_MAX, max(FIRST_DIVE_MIN, greedy_seconds))
    until = time.monotonic() + min(budget, max(0.0, run.left()) * DIVE_SHARE)
    try:
        placement = run.timed("dive", lambda: find(pk.sub, until))
    except Timeout:  # its own short budget, not the run's deadline: the race goes on
        return None
    return _placed(run, pk, placement, "packing search (dive)")


def _repair_stage(
    run: _Run, most: float = REPAIR_MAX, share: float = REPAIR_SHARE
) -> Decision | None:
    """Balance then repair (`_repair`) within `share` of the time left and at most `most`
    seconds: the few copies first fit leaves are placed by moving others, which the lanes
    take seconds for. Cut short, it sets `run.repair_cut` (the lns lane goes on with it)."""
    pk = run.packing
    if pk is None or not _repair.applies(pk.sub):
        return None
    until = time.monotonic() + min(most, max(0.0, run.left()) * share)
    try:
        placement = run.timed("repair", lambda: _repair.find(pk.sub, until))
    except Timeout:  # its own budget, not the run's deadline: the race goes on
        run.repair_cut = True
        return None
    return _placed(run, pk, placement, "balance and repair")


def _lns_stage(run: _Run, share: float = LNS_SHARE) -> Decision | None:
    """The neighbourhood search with exact sub-solves (`_lns`, HiGHS) within a share of
    the time left: the engine for tight packings of several resources."""
    from escher.verify.engines import _lns

    pk = run.packing
    if pk is None or not _lns.available() or not _lns.tight(pk.sub):
        return None
    until = time.monotonic() + max(0.0, run.left()) * share
    placement = run.timed("lns", lambda: _lns.find(pk.sub, until))
    return _placed(run, pk, placement, "neighbourhood search (HiGHS sub-problems)")


def _quick_search_stage(run: _Run) -> Decision | None:
    """A short first try of the packing search (feasible packings are usually found fast)."""
    return _search_stage(run, min(QUICK_SEARCH, max(0.0, run.left()) * 0.3))


def _search_stage(
    run: _Run, budget: float | None = None, share_of_left: float = SEARCH_SHARE
) -> Decision | None:
    """The exact packing search; with creations or domain rules, it packs the simple items
    exactly and places the others around them."""
    pk = run.packing
    if pk is None:
        return None
    share = max(0.0, run.left()) * share_of_left
    until = time.monotonic() + (share if budget is None else min(budget, share))
    status, placement = run.timed("search", lambda: search(pk.sub, until))
    if status == "infeasible" and pk.groups:  # left to the engines that name the
        return None  # statements a group's conflict comes from
    if status == "infeasible":
        return run.infeasible(
            _all_statements(pk.sub),
            "exact packing search",
            "the tasks do not pack into the nodes (every way was tried)",
        )
    if status != "feasible" and budget is None:
        run.notes.append("the exact packing search did not finish")
    return _placed(run, pk, placement if status == "feasible" else None, "exact packing search")


def _placed(run: _Run, pk: _Packing, placement: Placement | None, method: str) -> Decision | None:
    """The decision for a packing of `pk.sub`: as it is, or with the other items placed
    around it by the greedy orders."""
    if placement is None:
        return None
    if pk.whole:
        return run.found(placement, method)
    fixed: Placement = [[] for _ in run.p.items]
    for j, i in enumerate(pk.packed):
        fixed[i] = placement[j]
    for strategy in STRATEGIES:
        got = greedy(run.p, deadline=run.deadline, strategy=strategy, fixed=fixed)
        found = run.found(got, f"{method} + greedy")
        if found is not None:
            return found
    return None


def _all_statements(p: Problem) -> frozenset[str]:
    core = {s for it in p.items for s in it.stmts | it.allowed_stmts}
    core |= {sid for nt in p.types for sid in nt.capsrc}
    core |= {sid for sid in p.groups.values() if sid}
    core |= {sid for _, sid in p.limits.values() if sid}
    return frozenset(core)


def _exact_stage(run: _Run) -> Decision | None:
    from escher.verify.engines import _smt

    status, data = run.timed("z3_exact", lambda: _smt.exact(run.p, run.deadline, run.memory_mb))
    if status == "unsat":
        return run.infeasible(frozenset(data), "z3 (per node)", _core_cause(run.p, data))
    if status == "sat":
        placement = greedy(run.p, targets=data, deadline=None)
        return run.found(placement, "z3 (per node)")
    run.notes.append(str(data))
    return None


def _core_cause(p: Problem, core: frozenset[str] | set[str]) -> str:
    kinds = {s.split(":", 1)[0] for s in core}
    caps = sorted({s.split(":", 1)[1].split("@", 1)[0] for s in core if s.startswith("cap:")})
    what = f" ({', '.join(caps)})" if caps else ""
    if "intent" in kinds:
        return f"the declared intents and the capacities{what} leave no placement"
    return f"the tasks do not fit the nodes' capacities{what} together"


def _tightest(p: Problem) -> str:
    """The resource most requested against what the nodes have (labels tasks create are
    left out: their capacity comes with the tasks)."""
    best = ""
    ratio = -1.0
    for g in p.groups:
        for r in range(len(p.resources)):
            if r in p.created:
                continue
            demand = sum(it.loads[g][r] * it.mult for it in p.items if g in it.loads)
            have = type_total(p, r) if demand else None
            if have is None:
                continue
            have = have or 1
            if demand / have > ratio:
                ratio = demand / have
                best = (
                    f"{p.resources[r]}: {p.quantity(r, demand)} requested of "
                    f"{p.quantity(r, have)} available ({100 * demand / have:.1f}%)"
                )
    return best


def _unknown(run: _Run, reason: str) -> Decision:
    proven = [
        "no exact pre-check (co-location vs separation, largest free slot, per-resource "
        "totals, Martello-Toth L2 per resource) found a conflict",
        *run.proven,
    ]
    return Decision(
        "unknown",
        run.p,
        method="timeout" if reason == "time limit reached" else "undecided",
        reason=reason,
        cause=_tightest(run.p),
        proven=proven,
        decide_by=(
            "more time (--timeout) for the exact packing search and Z3"
            + (
                "; or fewer distinct task shapes or nodes for the exact Z3 model"
                if run.notes
                else ""
            )
        ),
        times=run.times,
    )


def _unbuilt(plan: Plan, state: ClusterState, seconds: float) -> Decision:
    """UNKNOWN: the deadline passed while the model was being built."""
    nodes = sorted(n for n, node in state.nodes.items() if node.alive)
    p = Problem([], nodes, [], [], [], [], [], {}, {}, {}, frozenset())
    return Decision(
        "unknown",
        p,
        method="timeout",
        reason="time limit reached while building the model",
        proven=["nothing yet: the time ran out before the first check"],
        decide_by="more time (--timeout): building the model of this plan takes longer",
        times={"build": seconds},
    )


#: The order of the engines for small problems (at most `SMALL` copies), in this process:
#: the exact Z3 model decides them in milliseconds, less than starting processes takes.
SMALL_STAGES: list[Callable[[_Run], Decision | None]] = [
    _greedy_stage,
    _graph_stage,
    _exact_stage,
    _relaxed_stage,
    _search_stage,
]


@dataclass(frozen=True)
class Lane:
    """An engine's lane in the race, declared next to the engine.

    Attributes:
        name: The lane's name (in timings and notes).
        run: The engine, given the whole time left.
        applies: Whether the engine can take this problem (so the lanes that can share the
            processors).
        packing: A packing engine: no lane where separations make a graph (on every
            colouring of the bench no packing engine decided anything alone, while the
            graph engine did; docs/verify-engines.md).
    """

    name: str
    run: Callable[[_Run], Decision | None]
    applies: Callable[[_Run], bool]
    packing: bool = False


#: Every lane, in the order their processes start (each added by `_lane` where its engine
#: is defined).
LANES: list[Lane] = []


def _lane(
    name: str, applies: Callable[[_Run], bool], packing: bool = False
) -> Callable[[Callable[[_Run], Decision | None]], Callable[[_Run], Decision | None]]:
    """Declare the decorated function as the lane `name` (`Lane`)."""

    def register(fn: Callable[[_Run], Decision | None]) -> Callable[[_Run], Decision | None]:
        LANES.append(Lane(name, fn, applies, packing))
        return fn

    return register


def _graph_applies(run: _Run) -> bool:
    from escher.verify.engines import _graph

    return _graph.applicable(run.p)


@_lane("graph", _graph_applies)
def _graph_lane(run: _Run) -> Decision | None:
    """The graph engine's clique search, DSatur and local search in a lane of its own: the
    whole time left (the 0/1 model races in `_sat_lane`)."""
    return _graph_stage(run, share=1.0, exact=False)


def _sat_applies(run: _Run) -> bool:
    return run.graph is not None


@_lane("sat", _sat_applies)
def _sat_lane(run: _Run) -> Decision | None:
    """The graph engine's exact 0/1 model (Glucose, or Z3's SAT engine) in a lane of its
    own, at a lower priority (`SAT_NICE`): on the colourings where the local search wins,
    it takes only the processor time nothing else wants."""
    from escher.verify.engines import _graph

    g = run.graph
    if g is None:
        return None
    with contextlib.suppress(OSError):
        os.nice(SAT_NICE)
    t0 = time.perf_counter()
    try:
        answer = _graph.solve(run.p, g, run.deadline, run.memory_mb)
    finally:
        run.times["graph_sat"] = time.perf_counter() - t0
    return _sat_answer(run, answer)


@_lane("search", lambda run: run.packing is not None, packing=True)
def _search_lane(run: _Run) -> Decision | None:
    """The packing search in a lane of its own: the dive, then the exact search to the end."""
    return _dive_stage(run) or _search_stage(run, share_of_left=1.0)


def _lns_applies(run: _Run) -> bool:
    from escher.verify.engines import _lns

    return run.packing is not None and _lns.available() and _lns.tight(run.packing.sub)


@_lane("lns", _lns_applies, packing=True)
def _lns_lane(run: _Run) -> Decision | None:
    """The neighbourhood search in a lane of its own: the whole time left (after balance
    and repair, when its budget in the parent was too short for this problem)."""
    if run.repair_cut:
        got = _repair_stage(run, most=float("inf"), share=LANE_REPAIR_SHARE)
        if got is not None:
            return got
    return _lns_stage(run, share=1.0)


def _arcflow_applies(run: _Run) -> bool:
    from escher.verify.engines import _arcflow

    return _arcflow.available() and applicable(run.p) and not run.too_wide


_lane("arcflow", _arcflow_applies, packing=True)(_arcflow_stage)


def _z3_applies(run: _Run) -> bool:
    """Z3 can decide this problem in a race: not where a separation graph of at least
    `GRAPH_ONLY_COPIES` copies is the bulk of the problem (`graph_bound`)."""
    return not graph_bound(run)


def graph_bound(run: _Run) -> bool:
    """The separation graph is the hard part: it holds at least `GRAPH_ONLY_COPIES`
    copies and at least half of all copies."""
    g = run.graph
    if g is None or len(g.item) < GRAPH_ONLY_COPIES:
        return False
    return 2 * len(g.item) >= sum(it.mult for it in run.p.items)


@_lane("z3", _z3_applies)
def _z3_lane(run: _Run) -> Decision | None:
    """Z3 in a lane of its own: counts per node type, then the model per node."""
    return _relaxed_stage(run) or _exact_stage(run)


def _lanes(run: _Run) -> dict[str, Callable[[_Run], Decision | None]]:
    """The lanes that can decide this problem (`LANES` whose engine applies), each run in
    its own process by `_race`; where separations make a graph, no packing lane."""
    graph = _graph_applies(run)
    return {
        lane.name: lane.run for lane in LANES if not (lane.packing and graph) and lane.applies(run)
    }


def _lane_answer(run: _Run, lane: Callable[[_Run], Decision | None]) -> dict[str, Any]:
    """Run `lane` (in the child) and its answer as plain values to send to the parent."""
    got = None
    try:
        if run.left() > 0:
            got = lane(run)
    except Timeout:
        run.notes.append("time limit reached")
    return {
        "status": "unknown" if got is None else got.status,
        "placement": None if got is None else got.placement,
        "core": frozenset() if got is None else got.core,
        "method": "" if got is None else got.method,
        "cause": "" if got is None else got.cause,
        "notes": run.notes,
        "proven": run.proven,
        "times": run.times,
    }


def _race(run: _Run) -> Decision:
    """The engines side by side, one process each: the first definite answer wins. A
    witness counts once the checker here confirms it; an infeasibility is the engine's
    proof (an unsat core of Z3 or the SAT solver, an infeasible exact MILP, an exhausted
    packing search)."""
    lanes = _lanes(run)

    def accept(name: str, answer: dict[str, Any]) -> bool:
        if answer["status"] == "feasible":
            return not check(run.p, answer["placement"])
        return bool(answer["status"] == "infeasible")

    t0 = time.perf_counter()
    done = _portfolio.race(
        {name: partial(_lane_answer, run, lane) for name, lane in lanes.items()},
        run.deadline,
        accept,
    )
    run.times["portfolio"] = time.perf_counter() - t0
    for name, seconds in done.seconds.items():
        run.times[f"lane:{name}"] = seconds
    if done.winner is not None:
        a = done.answer
        run.times.update({k: v for k, v in a["times"].items() if k not in run.times})
        return Decision(
            a["status"],
            run.p,
            a["placement"],
            core=a["core"],
            method=a["method"],
            cause=a["cause"],
            times=run.times,
        )
    for name, a in done.others.items():
        run.proven.extend(x for x in a["proven"] if x not in run.proven)
        run.notes.extend(f"{name}: {n}" for n in a["notes"] if n != "time limit reached")
        if a["status"] == "feasible":
            run.notes.append(f"{name}: its placement failed the check")
    if run.left() <= 0 or done.silent:
        stopped = ", ".join(sorted(done.silent))
        if stopped:
            run.notes.append(f"still running at the deadline: {stopped}")
        return _unknown(run, "time limit reached")
    return _unknown(run, "; ".join(run.notes) or "no engine decided it")


#: The engines by name, for `decide(engines=...)` ("bounds" is the pre-checks).
ENGINES: dict[str, Callable[[_Run], Decision | None]] = {
    "greedy": _greedy_stage,
    "repair": _repair_stage,
    "graph": _graph_stage,
    "dive": _dive_stage,
    "arcflow": _arcflow_stage,
    "z3-relaxed": _relaxed_stage,
    "search": _search_stage,
    "z3-exact": _exact_stage,
    "lns": _lns_stage,
}


#: The engines in turn, in this order, where they cannot run side by side.
IN_TURN: list[Callable[[_Run], Decision | None]] = [
    _greedy_stage,
    _graph_stage,
    _dive_stage,
    _repair_stage,
    _arcflow_stage,
    _relaxed_stage,
    _quick_search_stage,
    _search_stage,
    _lns_stage,
    _exact_stage,
]


def decide(
    plan: Plan,
    state: ClusterState,
    *,
    deadline: float,
    active: frozenset[str] | None = None,
    mods: Mods | None = None,
    memory_mb: int | None = None,
    fast: bool = True,
    engines: frozenset[str] | None = None,
    side_by_side: bool = True,
) -> Decision:
    """Decide one problem. Never runs past `deadline` by more than one solver call's slack.

    Args:
        fast: False skips the pre-checks, the greedy search and the packing search (to test
            the Z3 encodings alone).
        engines: Only these engines (names of `ENGINES`; the bench runs each alone), the
            pre-checks only when "bounds" is among them.
        side_by_side: After the pre-checks, the greedy search and a short dive
            (`_first_dive`), the engines race in processes of their own (`_race`) where
            this system allows it; False runs them in turn, in this process (minimisation,
            intent proofs and preferences decide many short sub-problems, for which
            starting processes costs more than it wins).
    """
    t0 = time.perf_counter()
    try:
        p = build(plan, state, active=active, mods=mods, deadline=deadline)
    except Timeout:
        return _unbuilt(plan, state, time.perf_counter() - t0)
    run = _Run(p, deadline, memory_mb)
    run.times["build"] = time.perf_counter() - t0
    if fast and (engines is None or "bounds" in engines):
        conflict = run.timed("precheck", lambda: precheck(p, deadline))
        if conflict is not None:
            return run.infeasible(conflict.core, conflict.method, conflict.cause)
    small = sum(it.mult for it in p.items) <= SMALL
    try:
        if side_by_side and engines is None and fast and not small and _portfolio.available():
            # no process for an easy plan
            got = _greedy_stage(run) or _first_dive(run) or _repair_stage(run)
            return got if got is not None else _race(run)
        return _in_turn(run, _stages(small, fast, engines))
    except Timeout:
        return _unknown(run, "time limit reached")


def _stages(
    small: bool, fast: bool, engines: frozenset[str] | None
) -> list[Callable[[_Run], Decision | None]]:
    stages: list[Callable[[_Run], Decision | None]] = SMALL_STAGES if small else IN_TURN
    if not fast:
        stages = [_relaxed_stage, _exact_stage]
    if engines is not None:
        chosen = {ENGINES[e] for e in engines if e in ENGINES}
        stages = [st for st in stages if st in chosen]
    return stages


def _in_turn(run: _Run, stages: list[Callable[[_Run], Decision | None]]) -> Decision:
    for stage in stages:
        if run.left() <= 0:
            raise Timeout
        got = stage(run)
        if got is not None:
            return got
    if run.left() <= 0:
        return _unknown(run, "time limit reached")
    return _unknown(run, "; ".join(run.notes) or "no engine decided it")
