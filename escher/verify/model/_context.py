"""What the stages of `build` share while building one problem."""

from __future__ import annotations

from dataclasses import dataclass, field

from escher.core.cluster import ClusterState
from escher.core.plan import Intent, Plan
from escher.verify.model._facts import PlanFacts
from escher.verify.model._planned import NodePart
from escher.verify.model._problem import Mods
from escher.verify.model._statement import Statement, Statements
from escher.verify.model._topology import Domains


@dataclass
class Ctx:
    """What the stages share while building one problem."""

    plan: Plan
    state: ClusterState
    active: frozenset[str] | None
    mods: Mods
    rnames: list[str]
    part: NodePart
    scale: list[int]
    facts: PlanFacts
    intents: list[tuple[int, Intent]] = field(default_factory=list)
    statements: dict[str, Statement] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    domains: dict[str, Domains] = field(default_factory=dict)
    members: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The active requirements (and preferences treated as requirements), and the
        statements and warnings of the planned resources."""
        mods = self.mods
        self.intents = [
            (i, x)
            for i, x in enumerate(self.plan.intents)
            if not mods.drop_intents and (not x.preferred or i in mods.require)
        ]
        self.statements = Statements(self.facts.statement)
        self.statements.update(self.part.statements)
        self.warnings = list(self.part.warnings)

    def on(self, sid: str) -> bool:
        """True if statement `sid` is kept in this problem."""
        return self.active is None or sid in self.active
