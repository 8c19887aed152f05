"""The explain hook: what a policy contributes to a task, in the user's terms.

`escher.why` asks every policy bound to a backend (`Backend.policies()`) what it adds to a
pending task (`ESL.contribution(ref)`): which labels of the task's request it owns, what each
stands for, which of them the policy will create or grow later by itself (so the task waits
for the policy rather than for room), and whether the policy holds the task back for a reason
of its own (a quota, a gang). The default, built from the ESL's ledger (`ledger_contribution`),
is right for most ESLs; an ESL overrides `contribution` to say more (a co-location group's
name, a user's quota).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.resources import Resources
from escher.core.task import TaskRef


@dataclass(frozen=True)
class LabelNote:
    """One label of a task's request, as the policy that owns it describes it.

    Attributes:
        source: The policy call that owns it, in the user's terms
            (e.g. ``CoLocation('colo').group('ps')``).
        meaning: What the label stands for, in a few words ("the node of group 'ps'").
        later: True if the policy itself will create or grow the label later (a group
            waiting for a node, a quota the policy re-plans, an event a task sets), so a task
            waiting for it waits for the policy, not for room.
        need: For a label the policy creates later on a node it chooses by room: what that
            node must have available (e.g. a co-location group's total request).
        kind: A short word for what the policy does with it: "group", "quota", "slot",
            "signal", "gang" or the ESL's own kind.
    """

    source: str
    meaning: str = ""
    later: bool = False
    need: Resources | None = None
    kind: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "source": self.source,
            "meaning": self.meaning,
            "later": self.later,
            "need": self.need.to_dict() if self.need is not None else None,
            "kind": self.kind,
        }


@dataclass(frozen=True)
class Contribution:
    """What one policy adds to one task (`ESL.contribution`).

    Attributes:
        source: The policy, in the user's terms (``QueueingPolicy('drf')``).
        labels: Label -> `LabelNote`, for the labels of the task's request the policy owns.
        waiting: Why the policy holds the task back now, in one line ("" if it does not):
            e.g. "user 'ann' is at its quota".
        wait_kind: A short word for that reason: "quota", "gang", "group", "signal".
    """

    source: str
    labels: Mapping[str, LabelNote] = field(default_factory=dict)
    waiting: str = ""
    wait_kind: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "source": self.source,
            "labels": {label: note.to_dict() for label, note in self.labels.items()},
            "waiting": self.waiting,
            "wait_kind": self.wait_kind,
        }


def ledger_contribution(esl: Any, ref: TaskRef) -> Contribution | None:
    """The default `ESL.contribution`: the labels of `ref`'s request in the ESL's ledger.

    `esl` is an `escher.esl.ESL` (typed loosely so this module imports nothing of the ESLs:
    explainers import it without the policies).

    A label the ESL owns but has set on no node yet (recorded with `ESL.own`) is one it, or
    one of its tasks, creates later. Returns None when the task requests none of its labels.
    """
    entries = esl.ledger_entries(ref.spec.resources)
    if not entries:
        return None
    notes = {
        label: LabelNote(
            source=esl.source,
            meaning=f"a label of {esl.source}",
            later=not entry.capacities,
            need=entry.need if not entry.capacities else None,
            kind=esl.kind,
        )
        for label, entry in entries.items()
    }
    return Contribution(esl.source, notes)
