"""``escher why``: why are tasks pending? Every pending task, some by id or name, or a request.

From another process a command sees what the cluster shows of other sessions' pending tasks
(`Backend.pending_elsewhere`: on Kubernetes the pending pods of the namespace); the in-memory
backend's tasks live only in their own process (use `escher.why` or `escher view` there).
"""

from __future__ import annotations

import json
import sys
import time

import click
from rich.console import Console
from rich.markup import escape

from escher.api import init
from escher.cli.conventions import backend_option, command, emit, fail
from escher.core.errors import EscherError, ValidationError
from escher.core.quantity import parse_quantity
from escher.core.resources import Resources
from escher.explain import EXIT_CODES, Explainer, Verdict, WhyResult
from escher.verify.repair import RepairSet, find_task_repairs

#: Seconds of repair search for all the blocked tasks of one `escher why --repairs`.
REPAIR_TIMEOUT = 20.0

#: Verdicts that --repairs looks for changes for.
_STUCK = (Verdict.BLOCKED, Verdict.NEVER)

_OWN_CODES = {
    EXIT_CODES[Verdict.WAITING]: "a task waits for a policy (a quota, a group's node, an event)",
    EXIT_CODES[Verdict.BLOCKED]: "a task is blocked: a minimal conflict of policies and capacities",
    EXIT_CODES[Verdict.NEVER]: "a task can never be placed (no node is large enough)",
}


def parse_request(text: str) -> dict[str, float]:
    """``CPU=2,memory=4Gi`` or a JSON object -> request.

    Quantities are numbers or Kubernetes quantities (``500m``, ``4Gi``: memory is in bytes),
    read by `escher.core.quantity.parse_quantity`.

    Raises:
        ValidationError: neither form, or a quantity that is not a number or quantity.
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"--request: not valid JSON: {exc.msg}.") from None
        if not isinstance(data, dict):
            raise ValidationError("--request: expected a JSON object of name -> quantity.")
        return {str(k): _quantity(k, v) for k, v in data.items()}
    request: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ValidationError(
                f"--request: {part!r} is not NAME=QUANTITY (e.g. --request CPU=2,memory=4Gi)."
            )
        request[name.strip()] = _quantity(name.strip(), value)
    if not request:
        raise ValidationError("--request: name at least one resource (e.g. --request CPU=2).")
    return request


def _quantity(name: object, value: object) -> float:
    try:
        return parse_quantity(value)
    except EscherError as exc:
        raise ValidationError(f"--request: {name}: {exc}") from None


def _worst(results: list[WhyResult]) -> int:
    return max((r.exit_code for r in results), default=EXIT_CODES[Verdict.NOT_PENDING])


@command(
    "why",
    examples=[
        "escher why                       # every pending task the backend shows",
        "escher why escher-train-3f2a91c0 --backend kubernetes   # one pod",
        "escher why --request CPU=4,memory=2Gi   # could such a task start now?",
        "escher why --format json | jq '.tasks[].verdict'",
        "escher why --request GPU=4 --repairs --adjustable   # what would let it start?",
    ],
    exit_codes=_OWN_CODES,
)
@click.argument("tasks", nargs=-1)
@click.option(
    "--request",
    "request_text",
    metavar="NAME=Q,...",
    help="Explain a task with this request (nothing is launched); or a JSON object.",
)
@click.option(
    "--repairs",
    is_flag=True,
    help="For a blocked task: the cheapest changes that let it start (docs/repairs.md).",
)
@click.option("--adjustable", is_flag=True, help="With --repairs: the tasks' requests may shrink.")
@backend_option
def why(
    tasks: tuple[str, ...],
    request_text: str | None,
    repairs: bool,
    adjustable: bool,
    backend_name: str | None,
    fmt: str,
) -> None:
    """Why are tasks pending? A minimal conflict in your policies' terms, per-node reasons.

    With --repairs, each blocked task also gets the cheapest changes of each kind that let
    it start now (more nodes like an existing type, one node grown; with --adjustable a
    smaller request), each proven by a checked placement.
    """
    if request_text is not None and tasks:
        fail("give task ids or --request, not both.")
    if adjustable and not repairs:
        fail("--adjustable only applies with --repairs.")
    with init(backend_name) as backend:
        explainer = Explainer(backend)
        if request_text is not None:
            results = [explainer.request(Resources(parse_request(request_text)))]
        elif tasks:
            results = [explainer.explain(explainer.find(key)) for key in tasks]
        else:
            results = explainer.pending()
        found = _repairs(results, explainer, adjustable) if repairs else {}
    code = _worst(results)

    def text(console: Console) -> None:
        if not results:
            console.print(f"no pending tasks on the {escape(backend.name)} backend.")
        for i, result in enumerate(results):
            console.print(escape(result.render()), highlight=False)
            if i in found:
                lines = found[i].render().splitlines()
                console.print(escape("\n".join("  " + line for line in lines)), highlight=False)
            console.print()

    data = [r.to_dict() for r in results]
    for i, repair_set in found.items():
        data[i]["repairs"] = [r.to_dict() for r in repair_set.repairs]
        data[i]["repair_notes"] = list(repair_set.notes)
    emit({"tasks": data, "exit_code": code}, fmt, text)
    sys.exit(code)


def _repairs(
    results: list[WhyResult], explainer: Explainer, adjustable: bool
) -> dict[int, RepairSet]:
    """Repairs for each blocked task (index in `results`), sharing `REPAIR_TIMEOUT`; tasks
    alike (same request) share one search."""
    stuck = [i for i, r in enumerate(results) if r.verdict in _STUCK]
    shared: dict[tuple[tuple[str, float], ...], RepairSet] = {}
    out: dict[int, RepairSet] = {}
    deadline = time.monotonic() + REPAIR_TIMEOUT
    for n, i in enumerate(stuck):
        task = results[i].task
        request = dict(task.get("request") or {})
        key = tuple(sorted(request.items()))
        if key not in shared:
            budget = max((deadline - time.monotonic()) / (len(stuck) - n), 1e-3)
            shared[key] = find_task_repairs(
                str(task.get("name") or "task"),
                request,
                explainer.state,
                timeout=budget,
                adjustable=adjustable,
            )
        out[i] = shared[key]
    return out
