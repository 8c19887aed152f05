"""A plan file's task list read without building each entry (msgspec, the verify extra).

A plan written one entry per task has thousands of entries that differ only in name and
source. Here each entry's requests are kept as their JSON text, unparsed, and its other
fields as plain values: entries whose keys are equal are alike, and an entry is built (as
the dict parsing the file gives) only when asked for. A file this reader does not take
(msgspec not installed, a field it does not know, a value of another type, bad JSON) gives
None: the caller reads it the usual way, which words every problem.
"""

import functools
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

#: The fields of a task entry in its key, in order: the requests (kept as JSON text), the
#: replicas and the concurrency (values; absent: msgspec's UNSET).
TEXTS, VALUES = ("resources", "creates"), ("count", "concurrent")


@dataclass(frozen=True)
class TaskList:
    """A plan document whose task entries are not built.

    Attributes:
        names: Each entry's name, in file order.
        keys: Each entry's fields but name and source: equal keys, alike entries.
        entry: Entry `i` as a dict, as parsing the file gives it (raises `Unread` when this
            reader does not take its text).
        sources: Entry name -> its source (``""`` when it has none), built when called.
        rest: The document's other fields, parsed.
    """

    names: list[str]
    keys: list[Hashable]
    entry: Callable[[int], dict[str, Any]]
    sources: Callable[[], dict[str, str]]
    rest: dict[str, Any]


class Unread(Exception):
    """An entry's text is not a value this reader takes (e.g. a number out of range)."""


@functools.cache
def _decoders() -> tuple[Any, Any, Any, Any, Any] | None:
    """(document decoder, task list decoder, value decoder, errors, UNSET), or None without
    msgspec. Built on first use: msgspec is imported only to read a plan."""
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


def read_tasks(raw: bytes) -> TaskList | None:
    """The task list of plan file contents `raw` (None: read it the usual way)."""
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
    names = list(map(get("name"), entries))
    columns = [map(bytes, map(get(field), entries)) for field in TEXTS]
    columns += [map(get(field), entries) for field in VALUES]

    def entry(i: int) -> dict[str, Any]:
        e = entries[i]
        out: dict[str, Any] = {"name": e.name}
        for field in TEXTS:
            text = bytes(getattr(e, field))
            try:
                if text:
                    out[field] = value.decode(text)
            except (ValueError, RecursionError, *errors) as exc:
                raise Unread(f"tasks[{i}].{field}: {exc}") from None
        out.update((f, getattr(e, f)) for f in VALUES if getattr(e, f) is not unset)
        if e.source:
            out["source"] = e.source
        return out

    def sources() -> dict[str, str]:
        return dict(zip(names, map(get("source"), entries), strict=True))

    return TaskList(names, list(zip(*columns, strict=True)), entry, sources, rest)
