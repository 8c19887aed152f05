"""Deadlines and plan-ahead (after TetriSched), and a Z3 check of deadlines before launch.

* `jobs`: `DeadlineJob` and its `Option`s;
* `policies`: `PlanAhead` (wait for a busy preferred resource when that still meets the
  deadline) and the `Greedy` baseline;
* `check`: `check_deadlines`, can a set of jobs all finish in time on this cluster?
"""

from escher.esl.deadline.check import Busy, DeadlineCheck, check_deadlines
from escher.esl.deadline.jobs import DeadlineJob, Option
from escher.esl.deadline.policies import Greedy, JobHandle, PlanAhead

__all__ = [
    "Busy",
    "DeadlineCheck",
    "DeadlineJob",
    "Greedy",
    "JobHandle",
    "Option",
    "PlanAhead",
    "check_deadlines",
]
