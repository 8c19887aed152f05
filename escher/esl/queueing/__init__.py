"""Cluster queueing policies as ESLs, and adapting them at run time.

* `orderings`: FIFO, DRF, naive fair by threads or memory (`Ordering`), `drf_allocation`;
* `planner`: the quota planner (`plan_quotas`, progressive filling over `QueuedTask`s);
* `simulator`: predicting how outstanding work finishes under an ordering (`simulate`);
* `policy`: `QueueingPolicy`, which gates queued tasks per user with admission resources;
* `adaptive`: `AdaptivePolicy`, which switches the ordering to suit the workload.
"""

from escher.esl.queueing.adaptive import AdaptivePolicy, Decision, Observation, censored_mean
from escher.esl.queueing.orderings import (
    DRF,
    FIFO,
    ORDERINGS,
    FairMemory,
    FairThreads,
    Ordering,
    dominant_share,
    drf_allocation,
    ordering_of,
)
from escher.esl.queueing.planner import QueuedTask, plan_quotas
from escher.esl.queueing.policy import QueueingPolicy
from escher.esl.queueing.simulator import Prediction, simulate

__all__ = [
    "DRF",
    "FIFO",
    "ORDERINGS",
    "AdaptivePolicy",
    "Decision",
    "FairMemory",
    "FairThreads",
    "Observation",
    "Ordering",
    "Prediction",
    "QueuedTask",
    "QueueingPolicy",
    "censored_mean",
    "dominant_share",
    "drf_allocation",
    "ordering_of",
    "plan_quotas",
    "simulate",
]
