"""The planning backend: run an application's launching code and record it as a `Plan`.

Nothing runs; see `PlanningBackend` and `escher.esl.plan_app`.
"""

from escher.backends.planning.backend import IntentBuilder, PlanningBackend, StillClock

__all__ = ["IntentBuilder", "PlanningBackend", "StillClock"]
