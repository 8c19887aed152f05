"""Launch by the proof: run-time choices follow a verified witness while it stays valid.

`follow(plan, result)` makes the witness of a FEASIBLE verdict on `plan` (a planning run's
plan of the same code) the guide of the run: a `CoLocation` group places itself on the node
the witness gives its members (the plan's `Colocated` intent of that group, matched by the
group's source, stable across runs), when that node is alive and has room for the group;
otherwise it picks its node as without a guide (first fit). Without a guide nothing changes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from escher.core.errors import ValidationError
from escher.core.plan import Colocated, Plan

_lock = threading.Lock()
_guides: list[Guide] = []


class Guide:
    """Where a verified witness puts each co-location group, by the group's source.

    Attributes:
        groups: Group source (e.g. ``CoLocation('colo').group('a')``) -> node id.
    """

    def __init__(self, plan: Plan, witness: Mapping[str, Sequence[str]]) -> None:
        self.groups: dict[str, str] = {}
        for intent in plan.intents:
            if not isinstance(intent, Colocated) or intent.topology_key is not None:
                continue
            nodes = [n for t in intent.tasks for n in witness.get(t, ())]
            if nodes and not intent.preferred:
                self.groups.setdefault(intent.source, nodes[0])

    def group_node(self, source: str) -> str | None:
        """The witness's node for the group of this source, or None."""
        return self.groups.get(source)


@contextlib.contextmanager
def follow(plan: Plan, result: Any) -> Iterator[Guide]:
    """Inside the block, run-time placement choices follow the witness of `result`.

    Args:
        plan: The plan that was verified (`escher.esl.plan_app(app, state).plan`).
        result: Its `VerificationResult` (FEASIBLE), or the witness itself (task name ->
            node of each replica).

    Returns:
        A context manager giving the `Guide`.

    Raises:
        ValidationError: `result` has no witness (the plan was not proven feasible).

    Example:
        >>> run = plan_app(app, state)                        # doctest: +SKIP
        >>> result = verify(run.plan, state)                  # doctest: +SKIP
        >>> with escher.init(backend), follow(run.plan, result):  # doctest: +SKIP
        ...     app()
    """
    witness = getattr(result, "witness", result)
    if not isinstance(witness, Mapping):
        raise ValidationError(
            "follow() needs the witness of a FEASIBLE verdict (result.witness); this result "
            "has none: verify the plan first and follow only a feasible one."
        )
    if not isinstance(plan, Plan):
        raise ValidationError(f"follow() takes the verified Plan first, got {type(plan).__name__}.")
    guide = Guide(plan, witness)
    with _lock:
        _guides.append(guide)
    try:
        yield guide
    finally:
        with _lock:
            _guides.remove(guide)


def followed_group_node(source: str) -> str | None:
    """The node the innermost active guide gives the group of `source` (None: no guide)."""
    with _lock:
        guide = _guides[-1] if _guides else None
    return guide.group_node(source) if guide is not None else None
