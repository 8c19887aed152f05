"""What escher concluded, and the exit code each conclusion gives, for `verify` and `why`.

One `Verdict` and one `EXIT_CODES` table serve both answers (re-exported as
`escher.verify.Verdict` and `escher.explain.Verdict`, the same object):

* a plan on a cluster (`escher.verify`, ``escher verify``): `PLAN_VERDICTS`;
* a pending task on a live backend (`escher.why`, ``escher why``): `TASK_VERDICTS`, best first.

A command exits with the code of its verdict (``escher why``: the worst of its tasks'): 0 all
is well, 1 and 2 not (yet), 4 never; ``escher verify`` also exits 4 for a feasible plan that
violates a declared intent. Each command's ``--help`` says what its codes mean.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class Verdict(enum.Enum):
    """What escher concluded about a plan or a pending task.

    About a plan (`escher.verify`):

    * FEASIBLE: a placement of the whole plan exists (the witness was checked independently).
    * INFEASIBLE: none exists (the explanation says why).
    * UNKNOWN: a limit was hit before an answer (the result says what was proven).

    About a pending task (`escher.why`), from best to worst:

    * NOT_PENDING: it runs or is done already.
    * PLACEABLE: some node has its whole request available now; it only waits (its place in
      the queue, the rest of its gang, the scheduler).
    * WAITING: it waits for something a policy will do by itself (a user's quota, a group's
      node, an event another task sets), not for room.
    * BLOCKED: the policies and capacities in `WhyResult.conflict` cannot hold together now.
    * NEVER: no node could ever hold it (its node-defined request exceeds every node).
    """

    FEASIBLE = "feasible"
    INFEASIBLE = "infeasible"
    UNKNOWN = "unknown"
    NOT_PENDING = "not_pending"
    PLACEABLE = "placeable"
    WAITING = "waiting"
    BLOCKED = "blocked"
    NEVER = "never"

    @property
    def exit_code(self) -> int:
        """The exit code of this verdict (see `EXIT_CODES`)."""
        return EXIT_CODES[self]


#: The verdicts about a plan (`escher.verify`).
PLAN_VERDICTS = (Verdict.FEASIBLE, Verdict.INFEASIBLE, Verdict.UNKNOWN)

#: The verdicts about a pending task (`escher.why`), from best to worst.
TASK_VERDICTS = (
    Verdict.NOT_PENDING,
    Verdict.PLACEABLE,
    Verdict.WAITING,
    Verdict.BLOCKED,
    Verdict.NEVER,
)

#: The exit code of each verdict; ``escher why`` exits with the worst among its tasks.
EXIT_CODES: Mapping[Verdict, int] = {
    Verdict.FEASIBLE: 0,
    Verdict.INFEASIBLE: 1,
    Verdict.UNKNOWN: 2,
    Verdict.NOT_PENDING: 0,
    Verdict.PLACEABLE: 0,
    Verdict.WAITING: 1,
    Verdict.BLOCKED: 2,
    Verdict.NEVER: 4,
}

#: ``escher verify``'s exit code for a feasible plan that violates a declared intent.
EXIT_INTENT_VIOLATED = 4

__all__ = [
    "EXIT_CODES",
    "EXIT_INTENT_VIOLATED",
    "PLAN_VERDICTS",
    "TASK_VERDICTS",
    "Verdict",
]
