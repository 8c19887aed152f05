"""Plan an app, verify the plan, then run the same app on the in-memory backend over the
same cluster and read where each planned task really ran.

Apps used here launch `hold`: a body that blocks until the run is read, so every task that
can start holds its resources at once (the plan's tasks are concurrent).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import escher
from escher import esl
from escher.backends.memory import MemoryBackend
from escher.core.cluster import ClusterState, Node
from escher.core.plan import Plan
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec
from escher.esl import plan_app
from escher.verify import IntentStatus, VerificationResult, intent_violation, verify

RELEASE = threading.Event()
WAIT = 20.0


def hold(*_: Any) -> str:
    """A task body that runs until the test has read the placement (bounded)."""
    RELEASE.wait(WAIT)
    return escher.node_id()


def cluster(
    count: int,
    cpus: float | Sequence[float] = 4,
    labels: Callable[[int], Mapping[str, str]] | None = None,
) -> ClusterState:
    """`count` nodes n0.. with `cpus` CPUs (each, or one value per node) and optional
    labels."""
    nodes = {}
    for i in range(count):
        total = Resources({"CPU": cpus[i] if isinstance(cpus, Sequence) else cpus})
        nodes[f"n{i}"] = Node(f"n{i}", total, total, dict(labels(i)) if labels else {})
    return ClusterState(nodes)


@dataclass
class Outcome:
    """A planned app and its real run."""

    plan: Plan
    result: VerificationResult
    placement: dict[str, list[str]]  # planned task name -> node of each placed replica
    planned: list[str]  # every planned task name
    topologies: Mapping[str, Mapping[str, str]]
    state: ClusterState
    why: list[Any]  # `escher.why` of the first task that never started, asked while it waited
    unplaced: list[str]  # the status of each launched task that never started

    @property
    def all_placed(self) -> bool:
        return all(len(self.placement.get(t.name, ())) >= t.count for t in self.plan.tasks)

    def violations(self) -> list[str]:
        """Every proven intent the real placement breaks."""
        problems = []
        for r in self.result.intents:
            if r.status is not IntentStatus.PROVEN or r.intent.preferred:
                continue
            why = intent_violation(r.intent, self.placement, self.state, self.topologies)
            if why:
                problems.append(why)
        return problems


def _recording(backend: MemoryBackend) -> list[TaskRef]:
    """Capture the backend's launches in order (as the planning backend records them)."""
    launched: list[TaskRef] = []
    launch, launch_gang = backend.launch, backend.launch_gang

    def one(spec: TaskSpec) -> TaskRef:
        ref = launch(spec)
        launched.append(ref)
        return ref

    def gang(specs: Sequence[TaskSpec]) -> list[TaskRef]:
        refs = launch_gang(specs)
        launched.extend(refs)
        return refs

    backend.launch = one  # type: ignore[method-assign]
    backend.launch_gang = gang  # type: ignore[method-assign]
    return launched


def plan_and_run(
    app: Callable[[], Any],
    state: ClusterState,
    settle: float = 3.0,
    ask_why: bool = False,
    follow: bool = True,
) -> Outcome:
    """Plan `app` on `state`, verify it, then run it on the memory backend over `state`
    (with `ask_why`, ask `escher.why` about the first task that never started). With
    `follow`, a feasible plan's run follows its witness (`escher.esl.follow`)."""
    run = plan_app(app, state)
    result = verify(run.plan, state, timeout=30)
    nodes = {
        nid: {"resources": node.total.to_dict(), "labels": dict(node.labels)}
        for nid, node in state.nodes.items()
    }
    RELEASE.clear()
    backend = MemoryBackend(nodes=nodes)
    launched = _recording(backend)
    placement: dict[str, list[str]] = {}
    whys: list[Any] = []
    unplaced: list[str] = []
    try:
        # without following, a guide with no witness only names the launches as the
        # planning run does (a FirstOf fallback attempt keeps its task's name)
        witness = result.witness if follow and result.feasible else {}
        with escher.init(backend), esl.follow(run, witness) as guide:
            app()
            wanted = sum(t.count for t in run.plan.tasks)
            deadline = time.monotonic() + (WAIT if result.feasible else settle)
            while time.monotonic() < deadline:
                live = [r for r in launched if not r.done() or r.started()]
                if sum(r.started() and not r.done() for r in live) >= wanted:
                    break
                time.sleep(0.02)
            # launches the plan counts as replicas of one task go under that task's name
            refs = list(launched)  # FirstOf fallbacks may still be launched meanwhile
            named = [guide.launch_name(r) or r.spec.name for r in refs]
            names = [run.replicas.get(n, n) for n in named]
            for name, ref in zip(names, refs, strict=True):
                if ref.started() and not ref.done() and ref.node_id is not None:
                    placement.setdefault(name, []).append(ref.node_id)
            unplaced = [str(r.status) for r in launched if not r.started()]
            waiting = [r for r in launched if not r.started() and not r.done()]
            if ask_why and waiting:
                whys.append(escher.why(waiting[0], backend=backend))
            RELEASE.set()
            for ref in launched:
                if not ref.started():
                    ref.cancel()  # it waits for room that never comes
            for ref in launched:
                if ref.started():
                    ref.wait(WAIT)
    finally:
        RELEASE.set()
    names = [t.name for t in run.plan.tasks]
    return Outcome(run.plan, result, placement, names, run.plan.topologies, state, whys, unplaced)
