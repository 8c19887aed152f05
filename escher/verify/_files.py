"""The plan file format (JSON): read, write, and errors that name the file and the place.

The format is documented in docs/file-formats.md; its JSON Schema ships as
`escher/verify/schemas/plan.schema.json` (and `cluster.schema.json` for cluster files).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources as _res
from pathlib import Path
from typing import Any

from escher.core.errors import PlanFormatError, ValidationError
from escher.core.nodespec import NodeSpec
from escher.core.plan import INTENT_KINDS, Intent, PinnedTo, Plan, SpreadAtMost

PLAN_VERSION = 1


def schema(name: str) -> dict[str, Any]:
    """A shipped JSON Schema: ``"plan"`` or ``"cluster"``."""
    if name not in ("plan", "cluster"):
        raise ValidationError(f"no schema {name!r}; use 'plan' or 'cluster'.")
    text = _res.files("escher.verify").joinpath(f"schemas/{name}.schema.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def _spec_to_dict(spec: NodeSpec) -> dict[str, Any]:
    if spec.node_id is not None:
        return {"node": spec.node_id}
    out: dict[str, Any] = {}
    if spec.having is not None:
        out["available"] = spec.having.to_dict()
    elif spec.labels is not None:
        out["labels"] = dict(spec.labels)
    if spec.num_nodes is not None:
        out["num_nodes"] = spec.num_nodes
    return out


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """`plan` in the plan file format."""
    intents = []
    for i in plan.intents:
        entry: dict[str, Any] = {"kind": i.kind, "tasks": list(i.tasks), "source": i.source}
        if isinstance(i, SpreadAtMost):
            entry["per_node"] = i.per_node
        if isinstance(i, PinnedTo):
            entry["nodes"] = list(i.nodes)
        intents.append(entry)
    return {
        "version": PLAN_VERSION,
        "resources": [
            {
                "label": r.label,
                "capacity": r.capacity,
                "node_spec": _spec_to_dict(r.node_spec),
                "source": r.source,
            }
            for r in plan.resources
        ],
        "tasks": [
            {
                "name": t.name,
                "resources": t.resources.to_dict(),
                "count": t.count,
                "creates": {c.label: c.capacity for c in t.creates},
                "concurrent": t.concurrent,
                "source": t.source,
            }
            for t in plan.tasks
        ],
        "intents": intents,
    }


def _obj(value: Any, where: str, allowed: set[str], required: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PlanFormatError(f"{where}: expected an object, got {type(value).__name__}.")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise PlanFormatError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}.")
    missing = sorted(required - set(value))
    if missing:
        raise PlanFormatError(f"{where}: missing field(s) {missing}.")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise PlanFormatError(f"{where}: expected a non-empty string, got {value!r}.")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlanFormatError(f"{where}: expected a list, got {type(value).__name__}.")
    return value


def _spec(value: Any, where: str) -> NodeSpec:
    v = _obj(value, where, {"node", "available", "labels", "num_nodes"}, set())
    chosen = [k for k in ("node", "available", "labels") if k in v]
    if len(chosen) != 1:
        raise PlanFormatError(
            f"{where}: give exactly one of 'node', 'available' or 'labels' (got {chosen})."
        )
    num = v.get("num_nodes")
    try:
        if "node" in v:
            if num is not None:
                raise PlanFormatError(f"{where}: 'num_nodes' does not go with 'node'.")
            return NodeSpec.node(_str(v["node"], f"{where}.node"))
        if "available" in v:
            return NodeSpec.with_available(v["available"], num_nodes=num)
        return NodeSpec.with_labels(v["labels"], num_nodes=num)
    except PlanFormatError:
        raise
    except (ValidationError, TypeError, AttributeError) as exc:
        raise PlanFormatError(f"{where}: {exc}") from None


def plan_from_dict(data: Any, *, source: str = "<plan>") -> Plan:
    """Parse the plan file format.

    Raises:
        PlanFormatError: naming `source`, the place (e.g. ``tasks[2].count``) and the problem.
    """
    top = _obj(data, source, {"version", "resources", "tasks", "intents"}, {"tasks"})
    version = top.get("version", PLAN_VERSION)
    if version != PLAN_VERSION:
        raise PlanFormatError(f"{source}: version: unsupported {version!r}; this escher reads 1.")
    plan = Plan()
    for i, raw in enumerate(_list(top.get("resources", []), f"{source}: resources")):
        where = f"{source}: resources[{i}]"
        r = _obj(
            raw,
            where,
            {"label", "capacity", "node_spec", "source"},
            {"label", "capacity", "node_spec"},
        )
        spec = _spec(r["node_spec"], f"{where}.node_spec")
        try:
            plan.add_resource(r["label"], r["capacity"], spec, source=str(r.get("source", "")))
        except ValidationError as exc:
            raise PlanFormatError(f"{where}: {exc}") from None
    for i, raw in enumerate(_list(top["tasks"], f"{source}: tasks")):
        where = f"{source}: tasks[{i}]"
        t = _obj(
            raw, where, {"name", "resources", "count", "creates", "concurrent", "source"}, {"name"}
        )
        concurrent = t.get("concurrent", True)
        if not isinstance(concurrent, bool):
            raise PlanFormatError(f"{where}.concurrent: expected true or false.")
        for key in ("resources", "creates"):
            if key in t and not isinstance(t[key], Mapping):
                raise PlanFormatError(f"{where}.{key}: expected an object of name: quantity.")
        try:
            plan.add_task(
                _str(t["name"], f"{where}.name"),
                t.get("resources") or {},
                count=t.get("count", 1),
                creates=t.get("creates") or None,
                concurrent=concurrent,
                source=str(t.get("source", "")),
            )
        except ValidationError as exc:
            raise PlanFormatError(f"{where}: {exc}") from None
    for i, raw in enumerate(_list(top.get("intents", []), f"{source}: intents")):
        where = f"{source}: intents[{i}]"
        d = _obj(raw, where, {"kind", "tasks", "source", "per_node", "nodes"}, {"kind", "tasks"})
        kind = d["kind"]
        if kind not in INTENT_KINDS:
            raise PlanFormatError(
                f"{where}.kind: unknown {kind!r}; use one of {sorted(INTENT_KINDS)}."
            )
        tasks = tuple(
            _str(x, f"{where}.tasks[{j}]")
            for j, x in enumerate(_list(d["tasks"], f"{where}.tasks"))
        )
        if not tasks:
            raise PlanFormatError(f"{where}.tasks: name at least one task.")
        extra: dict[str, Any] = {}
        if kind == "spread":
            per = d.get("per_node", 1)
            if isinstance(per, bool) or not isinstance(per, int) or per < 1:
                raise PlanFormatError(f"{where}.per_node: expected an int >= 1, got {per!r}.")
            extra["per_node"] = per
        elif "per_node" in d:
            raise PlanFormatError(f"{where}: 'per_node' only goes with kind 'spread'.")
        if kind == "pinned":
            extra["nodes"] = tuple(
                _str(x, f"{where}.nodes[{j}]")
                for j, x in enumerate(_list(d.get("nodes"), f"{where}.nodes"))
            )
        elif "nodes" in d:
            raise PlanFormatError(f"{where}: 'nodes' only goes with kind 'pinned'.")
        intent: Intent = INTENT_KINDS[kind](tasks=tasks, source=str(d.get("source", "")), **extra)
        try:
            plan.add_intent(intent)
        except ValidationError as exc:
            raise PlanFormatError(f"{where}: {exc}") from None
    return plan


def load_json(path: str | Path, what: str) -> Any:
    """Read a JSON file; errors name the file, line and column."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PlanFormatError(f"{path}: cannot read {what} file: {exc.strerror}.") from None
    except UnicodeDecodeError as exc:
        raise PlanFormatError(f"{path}: byte {exc.start}: not UTF-8 text.") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(f"{path}: line {exc.lineno} column {exc.colno}: {exc.msg}.") from None


def load_plan(path: str | Path) -> Plan:
    """Read a plan file.

    Raises:
        PlanFormatError: unreadable file or bad content, naming the file and place.
    """
    return plan_from_dict(load_json(path, "plan"), source=str(path))
