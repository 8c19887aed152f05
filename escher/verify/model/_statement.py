"""Statements: what the user said (a task, an intent, a capacity), as the verifier tracks it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from escher.core.plan import Intent, PlannedTask
from escher.core.resources import Resources


@dataclass(frozen=True)
class Statement:
    """One thing the user said: a task, an intent, a capacity, a planned resource.

    Attributes:
        id: Stable key (e.g. ``task:ps``, ``intent:2``, ``cap:GPU@gpu8``, ``res:0``).
        kind: ``task``, ``intent``, ``capacity`` or ``resource``.
        text: A readable description in the user's terms.
        source: What made it (the ESL call, the node type, ...).
    """

    id: str
    kind: str
    text: str
    source: str = ""

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready description."""
        return {"id": self.id, "kind": self.kind, "text": self.text, "source": self.source}


def fmt(value: int | None, scale: int = 1) -> str:
    """An integer amount (in units of 1/`scale`) as a short decimal."""
    if value is None:
        return "unbounded"
    q = value / scale
    return f"{q:g}" if abs(q) < 1e6 else f"{q:.6g}"


def intent_statement(index: int, intent: Intent) -> Statement:
    """The statement for the plan's `index`-th intent."""
    src = intent.source or "declared in the plan"
    return Statement(f"intent:{index}", "intent", f"{intent.describe()} ({src})", src)


@functools.lru_cache(maxsize=1 << 12)
def _request_text(request: Resources) -> str:
    """A request as the user wrote it (whole numbers without ".0")."""
    return str({k: (int(v) if float(v).is_integer() else v) for k, v in request.items()})


def task_statement(task: PlannedTask) -> Statement:
    """The statement for a planned task."""
    return named_statement(task.name, task.source, task_words(task))


def task_words(task: PlannedTask) -> str:
    """What a task's statement says after its name: replicas, request, creations (the same
    for tasks alike but for name and source)."""
    req = _request_text(task.resources)
    conc = "" if task.concurrent else ", not concurrent"
    text = f" x{task.count} requesting {req}{conc}"
    if task.creates:
        made = ", ".join(f"{c.label}={c.capacity:g}" for c in task.creates)
        text += f", creating {made} on its node"
    return text


def named_statement(name: str, source: str, words: str) -> Statement:
    """The statement for task `name` from `source`, with `task_words` `words`."""
    text = f"task {name!r}{words}"
    if source and source != f"task {name!r}":
        text += f" (from {source})"
    return Statement(f"task:{name}", "task", text, source)


class Statements(dict[str, Statement]):
    """Statement id -> statement; a task's statement is written when first looked up (a
    plan written one entry per task has thousands of them, an explanation names a few)."""

    def __init__(self, task: Callable[[str], Statement | None]) -> None:
        super().__init__()
        self.task = task

    def __missing__(self, key: str) -> Statement:
        st = self.task(key)
        if st is None:
            raise KeyError(key)
        self[key] = st
        return st
