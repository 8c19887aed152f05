"""Stage 1 of the pipeline: a (Plan, ClusterState) pair as an integer placement problem.

Statements (what the user said), quantity scales, planned capacities, node types, groups,
units and items; `build` runs these stages under one deadline and returns a `Problem`.
"""

from escher.verify.model._facts import PlanFacts, plan_facts
from escher.verify.model._model import build
from escher.verify.model._problem import Item, Mods, Problem, Rule, Timeout, type_total
from escher.verify.model._statement import Statement, named_statement, task_words
from escher.verify.model._topology import EACH_NODE, domains_for, topology_key

__all__ = [
    "EACH_NODE",
    "Item",
    "Mods",
    "PlanFacts",
    "Problem",
    "Rule",
    "Statement",
    "Timeout",
    "build",
    "domains_for",
    "named_statement",
    "plan_facts",
    "task_words",
    "topology_key",
    "type_total",
]
