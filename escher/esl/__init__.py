"""ESCHER Scheduling Libraries: scheduling policies built from ephemeral resources.

Each ESL turns an intent (co-locate these, spread those, run these as a gang) into
ephemeral resources and resource requests through the backend-neutral API, so the same
policy runs on the in-memory backend, Ray and Kubernetes. ESLs clean up what they create
(`close()`, context manager, finaliser), promise their intent to the verifier as they act
(plan the launching code with `plan_app`; see docs/planning.md) and compose: ``a & b``
(both hold) and ``a | b`` (fallback).

Example (the paper's co-location + load balancing)::

    with esl.LoadBalance(tasks=8) as lb, esl.CoLocation() as colo:
        pairs = [colo.group(f"pair-{p}", 2, {"CPU": 1}, policy=lb) for p in range(4)]
        refs = [pair.launch(work) for pair in pairs for _ in range(2)]
"""

from escher.esl._colocation import CoLocation, Group
from escher.esl._constraint import Action, Constraint
from escher.esl._contribution import Contribution, LabelNote
from escher.esl._domains import DomainAntiAffinity, DomainColocation, DomainGroup, DomainSpread
from escher.esl._esl import ESL, Bound
from escher.esl._fair import FairShare, Priority, WeightedFairQueue
from escher.esl._follow import Guide, follow
from escher.esl._gang import Gang, GangRun, Member
from escher.esl._ledger import RecoveryReport
from escher.esl._locality import DataLocality
from escher.esl._node_affinity import NodeAffinity
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import AppError, PlanRun, load_app, plan_app, plan_tasks
from escher.esl._policy import AllOf, FirstOf, Policy, Requests, SoftConstraints
from escher.esl._prefer import (
    PreferApart,
    Preferences,
    PreferNodes,
    PreferSpread,
    PreferTogether,
)
from escher.esl._signal import Barrier, Event, Signals, TaskQueue
from escher.esl._soft import SoftTaskRef
from escher.esl._spread import AntiAffinity, BinPacking, LoadBalance
from escher.esl._topology import Topology
from escher.esl.deadline import (
    Busy,
    DeadlineCheck,
    DeadlineJob,
    Greedy,
    JobHandle,
    PlanAhead,
    check_deadlines,
)
from escher.esl.deadline import Option as DeadlineOption
from escher.esl.queueing import (
    DRF,
    FIFO,
    ORDERINGS,
    AdaptivePolicy,
    Decision,
    FairMemory,
    FairThreads,
    Observation,
    Ordering,
    Prediction,
    QueuedTask,
    QueueingPolicy,
    dominant_share,
    drf_allocation,
    plan_quotas,
    simulate,
)

__all__ = [
    "DRF",
    "ESL",
    "FIFO",
    "ORDERINGS",
    "Action",
    "AdaptivePolicy",
    "AllOf",
    "AntiAffinity",
    "AppError",
    "Barrier",
    "BinPacking",
    "Bound",
    "Busy",
    "CoLocation",
    "Constraint",
    "Contribution",
    "DataLocality",
    "DeadlineCheck",
    "DeadlineJob",
    "DeadlineOption",
    "Decision",
    "DomainAntiAffinity",
    "DomainColocation",
    "DomainGroup",
    "DomainSpread",
    "Event",
    "FairMemory",
    "FairShare",
    "FairThreads",
    "FirstOf",
    "Gang",
    "GangRun",
    "Greedy",
    "Group",
    "Guide",
    "JobHandle",
    "LabelNote",
    "LoadBalance",
    "Member",
    "NodeAffinity",
    "Observation",
    "Ordering",
    "PlanAhead",
    "PlanParts",
    "PlanRun",
    "Policy",
    "Prediction",
    "PreferApart",
    "PreferNodes",
    "PreferSpread",
    "PreferTogether",
    "Preferences",
    "Priority",
    "QueuedTask",
    "QueueingPolicy",
    "RecoveryReport",
    "Requests",
    "Signals",
    "SoftConstraints",
    "SoftTaskRef",
    "TaskQueue",
    "Topology",
    "WeightedFairQueue",
    "check_deadlines",
    "dominant_share",
    "drf_allocation",
    "follow",
    "load_app",
    "plan_app",
    "plan_quotas",
    "plan_tasks",
    "simulate",
]
