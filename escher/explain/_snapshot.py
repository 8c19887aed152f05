"""What `escher view` shows, as plain data: nodes, intents and their verdicts, pending tasks.

Built from the neutral API only (`get_cluster_state`, `tasks`, `policies`, `why`), so the view
works on every backend. Verification (Z3) runs apart from the fast loop (`IntentChecker`), so
the page stays live while a proof takes time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.errors import EscherError
from escher.core.resources import Resources
from escher.core.task import TaskState
from escher.explain._why import Explainer

#: At most this many pending tasks are explained per snapshot (the page says how many more).
MAX_PENDING = 50


def _bars(total: Resources, available: Resources, names: list[str]) -> list[dict[str, Any]]:
    bars = []
    for name in names:
        cap = total.get(name, 0.0)
        free = min(available.get(name, 0.0), cap)
        bars.append({"name": name, "total": cap, "used": max(0.0, cap - free)})
    return bars


def nodes_view(state: ClusterState) -> list[dict[str, Any]]:
    """Each node with used/total bars of its node-defined and ephemeral resources."""
    out = []
    for node in state.nodes.values():
        physical = sorted(n for n in node.total if n not in node.ephemeral)
        ephemeral = sorted(node.ephemeral & set(node.total))
        out.append(
            {
                "id": node.id,
                "alive": node.alive,
                "labels": dict(node.labels),
                "physical": _bars(node.total, node.available, physical),
                "ephemeral": _bars(node.total, node.available, ephemeral),
            }
        )
    return out


def pending_view(backend: Backend, state: ClusterState) -> dict[str, Any]:
    """The pending tasks (at most `MAX_PENDING`) with their `why`."""
    explainer = Explainer(backend, state)
    pending = [ref for ref in explainer.live() if ref.state is TaskState.PENDING]
    rows = []
    for ref in pending[:MAX_PENDING]:
        result = explainer.explain(ref)
        rows.append(
            {
                "id": ref.id,
                "name": ref.name,
                "request": ref.spec.resources.to_dict(),
                "verdict": result.verdict.value,
                "summary": result.summary,
                "breakdown": result.breakdown.summary(),
                "waiting": [w.text for w in result.waiting],
                "conflict": result.conflict.render() if result.conflict is not None else "",
            }
        )
    return {"tasks": rows, "more": max(0, len(pending) - MAX_PENDING)}


class IntentChecker:
    """Verifies each bound policy's intents against the live state, in the background.

    Every `interval` seconds it declares, for each policy with live tasks, a plan of its
    pending tasks (`Policy.declare`, their request without the policy's own labels) and runs
    `escher.verify.verify` on the current state; `results()` returns the latest verdicts.
    """

    def __init__(self, backend: Backend, *, interval: float = 2.0, timeout: float = 5.0) -> None:
        self.backend = backend
        self.interval = interval
        self.timeout = timeout
        self._results: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="escher-view-verify", daemon=True)

    def start(self) -> None:
        """Start checking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop checking (waits for the current round)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.timeout + 5)

    def results(self) -> list[dict[str, Any]]:
        """One entry per policy: its intents and the verifier's verdicts."""
        with self._lock:
            return list(self._results)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                found = self.check()
            except Exception as exc:  # the page shows it; the loop goes on
                found = [{"source": "verification", "error": f"{type(exc).__name__}: {exc}"}]
            with self._lock:
                self._results = found
            self._stop.wait(max(0.1, self.interval - (time.monotonic() - started)))

    def check(self) -> list[dict[str, Any]]:
        """One round: verify every bound policy's pending tasks on the current state."""
        from escher.esl import plan_tasks
        from escher.verify import verify

        state = self.backend.get_cluster_state()
        live = self.backend.tasks()
        found = []
        for policy in self.backend.policies():
            hook = getattr(policy, "contribution", None)
            mine = [(ref, hook(ref)) for ref in live] if callable(hook) else []
            mine = [(ref, c) for ref, c in mine if c is not None]
            pending = [ref for ref, _ in mine if ref.state is TaskState.PENDING]
            entry: dict[str, Any] = {"source": policy.source, "tasks": len(mine)}
            try:
                # the pending tasks as launched, with what the policy promises about them
                # (the recording of a planning run; its resources are already on the cluster)
                plan = plan_tasks(policy, pending)
                result = verify(plan, state, timeout=self.timeout)
                entry["verdict"] = result.status.value
                entry["intents"] = [
                    {"intent": r.intent.describe(), "status": r.status.value}
                    for r in result.intents
                ] or [{"intent": i.describe(), "status": "-"} for i in plan.intents]
                if result.explanation is not None:
                    entry["explanation"] = result.explanation.render()
            except (EscherError, ValueError, TypeError) as exc:
                entry["error"] = str(exc)
            found.append(entry)
        return found


def snapshot(backend: Backend, checker: IntentChecker | None = None) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready data."""
    state = backend.get_cluster_state()
    return {
        "backend": backend.describe(),
        "time": state.time,
        "nodes": nodes_view(state),
        "intents": checker.results() if checker is not None else [],
        "pending": pending_view(backend, state),
    }
