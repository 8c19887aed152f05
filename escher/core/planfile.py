"""The one reader of plan files: bytes or a parsed document in, a checked `PlanDocument` out.

`Plan.load` and `Plan.from_dict` build the model from it; the verifier groups its entries
(`escher.verify.load_grouped`) from the same document, so a plan file is parsed and checked
once, by one function, whoever reads it.

A plan written one entry per task has thousands of entries that differ only in name and
source. A large file is read by msgspec (the verify extra) without building each entry: each
entry's requests stay JSON text, and entries whose fields but name and source are equal share
one shape, checked once against the schema. Any file msgspec does not take (not installed, a
field it does not know, a value of another type, bad JSON) or whose checked shapes have a
problem is read the usual way (orjson or `json`, then the schema on the whole document),
which words every problem in document order.
"""

import functools
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher.core.errors import PlanFormatError
from escher.core.formats import parse_bytes, paused_gc, read_bytes, read_document

__all__ = ["UNBUILT_FROM", "PlanDocument", "plan_document", "read_plan_file"]

#: Files of this many bytes or more are read without building each task entry first; a
#: smaller one is parsed whole, at less than importing msgspec costs.
UNBUILT_FROM = 1 << 18

#: The fields of a task entry in its shape as msgspec reads it, in order: the requests
#: (kept as JSON text), the replicas and the concurrency (values; absent: msgspec's UNSET).
_TEXTS, _VALUES = ("resources", "creates"), ("count", "concurrent")


@dataclass(frozen=True)
class PlanDocument:
    """A plan document checked against the schema, quantity strings as numbers.

    Attributes:
        source: The file name (or what the document came from), for messages.
        names: Each task entry's name, in document order.
        sources: Each task entry's source, ``""`` when it has none.
        shapes: Each task entry's shape: entries of one shape differ only in name and
            source (so one value built from the first serves them all).
        entry: Task entry `i` as a checked dict.
        rest: The document's other fields (version, resources, intents, topologies).
    """

    source: str
    names: list[str]
    sources: list[str]
    shapes: list[Hashable]
    entry: Callable[[int], dict[str, Any]]
    rest: dict[str, Any]


def read_plan_file(path: str | Path) -> PlanDocument:
    """Read and check the plan file at `path`.

    Raises:
        PlanFormatError: unreadable file or bad content, naming the file and the place
            (e.g. ``plan.json: tasks[2].count: ...``).
    """
    source = str(path)
    raw = read_bytes(path, "plan")
    with paused_gc():
        listed = _unbuilt(raw, source) if len(raw) >= UNBUILT_FROM else None
        return listed or plan_document(parse_bytes(raw, path), source=source)


def plan_document(data: Any, *, source: str = "<plan>") -> PlanDocument:
    """Check a parsed plan document (as `json.load` gives it).

    Raises:
        PlanFormatError: the first problem in document order, as ``source: place: what``.
    """
    data, shapes = read_document(data, "plan", source=source)  # "2Gi" -> a number
    assert shapes is not None  # a valid plan has a list of tasks
    entries: list[dict[str, Any]] = data["tasks"]
    return PlanDocument(
        source,
        list(map(operator.itemgetter("name"), entries)),
        [e.get("source", "") for e in entries],
        shapes,
        entries.__getitem__,
        {k: v for k, v in data.items() if k != "tasks"},
    )


class _Unread(Exception):
    """An entry's text is not a value msgspec's reading takes (e.g. a number out of range)."""


@functools.cache
def _decoders() -> tuple[Any, Any, Any, Any, Any] | None:
    """(document decoder, task list decoder, value decoder, errors, UNSET), or None without
    msgspec. Built on first use: msgspec is imported only to read a large plan."""
    try:
        import msgspec
    except ImportError:
        return None
    # (This module evaluates annotations at once, so msgspec sees the local names.)
    absent, unset = msgspec.Raw(b""), msgspec.UNSET

    class Entry(msgspec.Struct, forbid_unknown_fields=True, gc=False):
        name: str
        resources: msgspec.Raw = absent
        creates: msgspec.Raw = absent
        count: int | msgspec.UnsetType = unset
        concurrent: bool | msgspec.UnsetType = unset
        source: str = ""

    return (
        msgspec.json.Decoder(dict[str, msgspec.Raw]),
        msgspec.json.Decoder(list[Entry]),
        msgspec.json.Decoder(),
        (msgspec.DecodeError, msgspec.ValidationError),
        unset,
    )


def _unbuilt(raw: bytes, source: str) -> PlanDocument | None:
    """The document of plan file contents `raw` read by msgspec, one entry of each shape
    built and checked (with the rest of the document) against the schema; None when msgspec
    does not take it or the check finds a problem (the usual reading words it)."""
    decoders = _decoders()
    if decoders is None:
        return None
    document, task_list, value, errors, unset = decoders
    try:
        top = document.decode(raw)
        entries = task_list.decode(top.pop("tasks"))
        rest = {name: value.decode(text) for name, text in top.items()}
    except (KeyError, ValueError, RecursionError, *errors):  # not UTF-8, nested too deeply
        return None
    get = operator.attrgetter
    names: list[str] = list(map(get("name"), entries))
    if not all(names):
        return None
    columns = [map(bytes, map(get(field), entries)) for field in _TEXTS]
    columns += [map(get(field), entries) for field in _VALUES]
    shapes: list[Hashable] = list(zip(*columns, strict=True))
    last = dict(zip(shapes, range(len(shapes)), strict=True))  # one entry of each shape

    def built(i: int) -> dict[str, Any]:
        e = entries[i]
        out: dict[str, Any] = {"name": e.name}
        for field in _TEXTS:
            text = bytes(getattr(e, field))
            try:
                if text:
                    out[field] = value.decode(text)
            except (ValueError, RecursionError, *errors) as exc:
                raise _Unread(f"tasks[{i}].{field}: {exc}") from None
        out.update((f, getattr(e, f)) for f in _VALUES if getattr(e, f) is not unset)
        if e.source:
            out["source"] = e.source
        return out

    try:
        kept = [built(i) for i in last.values()]
        checked, _ = read_document({**rest, "tasks": kept}, "plan", source=source)
    except (_Unread, PlanFormatError):
        return None
    by_shape = dict(zip(last, checked["tasks"], strict=True))
    sources: list[str] = list(map(get("source"), entries))

    def entry(i: int) -> dict[str, Any]:
        out = {**by_shape[shapes[i]], "name": names[i]}
        out.pop("source", None)
        if sources[i]:
            out["source"] = sources[i]
        return out

    rest = {k: v for k, v in checked.items() if k != "tasks"}
    return PlanDocument(source, names, sources, shapes, entry, rest)
