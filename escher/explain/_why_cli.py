"""``escher why``: why are tasks pending? Every pending task, some by id or name, or a request.

From another process a command sees what the cluster shows of other sessions' pending tasks
(`Backend.pending_elsewhere`: on Kubernetes the pending pods of the namespace); the in-memory
backend's tasks live only in their own process (use `escher.why` or `escher view` there).
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.markup import escape

import escher
from escher.cli.conventions import backend_option, command, emit, fail
from escher.core.errors import EscherError, ValidationError
from escher.core.quantity import parse_quantity
from escher.explain._result import EXIT_CODES, Verdict, WhyResult
from escher.explain._why import Explainer

_OWN_CODES = {
    1: "a task waits for a policy (a quota, a group's node, an event)",
    2: "a task is blocked: a minimal conflict of policies and capacities",
    4: "a task can never be placed (no node is large enough)",
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
@backend_option
def why(
    tasks: tuple[str, ...], request_text: str | None, backend_name: str | None, fmt: str
) -> None:
    """Why are tasks pending? A minimal conflict in your policies' terms, per-node reasons."""
    if request_text is not None and tasks:
        fail("give task ids or --request, not both.")
    with escher.init(backend_name) as backend:
        explainer = Explainer(backend)
        if request_text is not None:
            results = [explainer.request(escher.Resources(parse_request(request_text)))]
        elif tasks:
            results = [explainer.explain(explainer.find(key)) for key in tasks]
        else:
            results = explainer.pending()
    code = _worst(results)

    def text(console: Console) -> None:
        if not results:
            console.print(f"no pending tasks on the {escape(backend.name)} backend.")
        for result in results:
            console.print(escape(result.render()), highlight=False)
            console.print()

    emit({"tasks": [r.to_dict() for r in results], "exit_code": code}, fmt, text)
    sys.exit(code)
