"""Normalise a (Plan, ClusterState) pair into an integer placement problem, in named stages.

Every constraint is tracked by the id of the user's statement it comes from (`Statement`): a
task (``task:<name>``), an intent (``intent:<i>``), the capacity of a resource on a node type
(``cap:<resource>@<type>``) or the capacity set by a planned `set_resource` (``res:<i>``). A
sub-problem keeps only some statements: dropped tasks and intents disappear, dropped
capacities become unbounded.

Stages of `build`:
1. `scales`: per resource, the power of ten that makes every quantity an integer; the tolerance
   of `escher.core.resources.EPSILON` is added to capacities, so "fits" is `Resources.fits_in`.
2. `apply_planned`: node capacities after the planned `set_resource` calls.
3. `node_types`: interchangeable nodes (same capacities, statements, pins, domains).
4. `units`: identical tasks grouped (same request, creations, concurrency, intents), so one
   entry per task costs what replicas cost; scenario splits for intent proofs.
5. `items`: co-located units merged (one item per component), simultaneous groups (all
   concurrent tasks; each gang), limits (separation, spread) and allowed nodes.

Semantics (see docs/verify.md):
* Plan tasks use what nodes have *available* now; planned resources are applied in order
  first (a resource-vector node spec matches on availability at that point).
* `concurrent` tasks hold their resources together; each `Gang` intent is also a group whose
  members hold their resources together; any other replica only has to fit alone on its node.
* A replica that `creates` label L sets L's capacity on its node to the creation capacity
  (minus what running tasks hold of L there); with several creators the largest counts.
"""

from __future__ import annotations

import math
import time

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.model._context import Ctx
from escher.verify.model._facts import plan_facts
from escher.verify.model._groups import Groups, groups
from escher.verify.model._items import items
from escher.verify.model._nodetypes import node_types, pin_sets
from escher.verify.model._planned import node_part
from escher.verify.model._problem import Item, Mods, NodeType, Problem, Timeout
from escher.verify.model._statement import intent_statement
from escher.verify.model._topology import domains_of
from escher.verify.model._units import units


def _statements(ctx: Ctx) -> None:
    for i, intent in enumerate(ctx.plan.intents):
        st = intent_statement(i, intent)
        ctx.statements[st.id] = st


def _problem(
    ctx: Ctx, types: list[NodeType], node_type: list[int], g: Groups, its: list[Item]
) -> Problem:
    """The problem from what the stages built."""
    ridx = {r: i for i, r in enumerate(ctx.rnames)}
    creates = (c.label for c in ctx.facts.creations)
    created = frozenset(ridx[label] for label in creates if label in ridx)
    caps = [types[t].cap for t in node_type]
    held = [types[t].held for t in node_type]
    p = Problem(ctx.rnames, ctx.part.ids, caps, held, node_type, types, its, {}, {}, {}, created)
    p.groups, p.limits, p.rules = g.groups, g.limits, g.rules
    p.statements, p.warnings, p.domains = ctx.statements, ctx.warnings, ctx.domains
    p.units, p.scales = ctx.members, ctx.scale
    return p


def build(
    plan: Plan,
    state: ClusterState,
    *,
    active: frozenset[str] | None = None,
    mods: Mods | None = None,
    deadline: float = math.inf,
) -> Problem:
    """Build the problem of `plan` on `state`, keeping only `active` statements (None = all).

    Raises:
        ValidationError: the plan is not well-formed for verification.
        Timeout: `deadline` (a `time.monotonic()` value) passed between two stages.
    """

    def on_time() -> None:
        if time.monotonic() >= deadline:
            raise Timeout

    mods = mods or Mods()
    facts = plan_facts(plan)  # once per build: the stages share it through the context
    rnames = list(facts.rnames)
    on_time()
    part, scale = node_part(plan, state, tuple(rnames), facts)
    on_time()
    ctx = Ctx(plan, state, active, mods, rnames, part, scale, facts)
    scenario_keys = [k for k, *_ in mods.domain_apart] + [k for k, _ in mods.domain_merge]
    scenario_keys += [k for k, *_ in mods.excess]
    ctx.domains = domains_of(plan, part.nodes, ctx.intents, ctx.on, scenario_keys)
    pins, only = pin_sets(ctx)
    types, node_type = node_types(ctx, pins, only)
    on_time()
    _statements(ctx)
    unit_map, task_units, ctx.members = units(ctx)
    g = groups(ctx, pins)
    on_time()
    its = items(ctx, unit_map, task_units, g, pins, only)
    return _problem(ctx, types, node_type, g, its)


def all_statement_ids(plan: Plan, state: ClusterState) -> frozenset[str]:
    """Every statement id of the full problem."""
    return frozenset(build(plan, state).statements) | frozenset(plan_facts(plan).tasks)
