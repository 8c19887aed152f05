"""The JSON file formats (plans, clusters): schemas, reading, errors that name file and place.

The schemas (JSON Schema draft-07) ship in `escher/core/schemas/` (``plan.schema.json``,
``cluster.schema.json``) and every document is validated against them before it is turned
into values: with `fastjsonschema` (the schema compiled to Python; 15-25x faster than an
interpreting validator on 1,000-node files), and, when that finds a problem, with
`jsonschema` for the clearest message about the first place in document order;
the rules a schema cannot say (unique names, available <= total, ...) are checked by the
classes that read the documents (`Plan.from_dict`, `ClusterState.from_dict`). Every problem
raises `PlanFormatError` with the source (a file name), the place (``tasks[2].count``) and
what to do.

Quantities are numbers in the schemas; `read_document` also takes them written as
Kubernetes quantities (``"2Gi"``, ``"500m"``, read by `escher.core.quantity.parse_quantity`)
wherever a schema wants a number, so memory (in bytes) can be written as people write it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import marshal
import math
import operator
from collections.abc import Hashable, Iterable, Iterator
from importlib import resources as _resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fastjsonschema

try:  # the `verify` extra: reads large plan files faster
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the installed extras
    _orjson = None  # type: ignore[assignment]

from escher.core.errors import EscherError, PlanFormatError, ValidationError
from escher.core.quantity import parse_quantity

if TYPE_CHECKING:
    import jsonschema

__all__ = [
    "load_json",
    "parse_bytes",
    "parse_json",
    "paused_gc",
    "place",
    "read_bytes",
    "read_document",
    "schema",
    "validate_document",
]

_KINDS = ("plan", "cluster")

# Fields of an intent object that only some kinds take.
_INTENT_FIELDS = {
    "nodes": ("pinned",),
    "per_node": ("spread",),
    "max_skew": ("spread_evenly",),
    "topology_key": ("colocated", "separated", "spread", "spread_evenly"),
}


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The shipped JSON Schema of a file kind: ``"plan"`` or ``"cluster"``.

    Raises:
        ValidationError: another kind.
    """
    if kind not in _KINDS:
        raise ValidationError(f"no schema {kind!r}; use 'plan' or 'cluster'.")
    text = _resources.files("escher.core").joinpath(f"schemas/{kind}.schema.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    import jsonschema  # only for a document with a problem: 60 ms off every start

    cls = jsonschema.validators.validator_for(schema(kind))
    validator: jsonschema.protocols.Validator = cls(schema(kind))
    return validator


def place(path: Iterable[str | int]) -> str:
    """A JSON path as the place in an error message: ``tasks[2].count``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _json(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_TYPE_NAMES = {
    "boolean": "true or false",
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "object": "an object",
    "array": "a list",
    "null": "null",
}


def _type_message(error: Any) -> str:
    expected = error.validator_value
    names = [expected] if isinstance(expected, str) else list(expected)
    wanted = " or ".join(_TYPE_NAMES.get(n, n) for n in names)
    return f"expected {wanted}, got {_json(error.instance)}."


def _extra_message(error: Any) -> str:
    allowed = sorted(error.schema.get("properties", {}))
    unknown = sorted(k for k in error.instance if k not in allowed)
    return f"unknown field(s) {unknown}; allowed: {allowed}."


def _not_message(error: Any) -> str:
    inst = error.instance
    if isinstance(inst, dict) and "kind" in inst:
        kind = inst["kind"]
        bad = sorted(f for f, kinds in _INTENT_FIELDS.items() if f in inst and kind not in kinds)
        if bad:
            return f"field(s) {bad} do not go with kind {kind!r}."
    return f"{_json(inst)} is not allowed here."


def _one_of_message(error: Any) -> str:
    inst = error.instance
    got = sorted(inst) if isinstance(inst, dict) else _json(inst)
    return (
        "give exactly one of 'node', 'available' or 'labels' ('num_nodes' only goes with "
        f"'available' or 'labels'); got {got}."
    )


def _message(error: Any) -> str:
    kind = error.validator
    value = error.validator_value
    inst = error.instance
    simple = {
        "required": lambda: f"missing field {error.message.split(' is a required')[0]}.",
        "minimum": lambda: f"must be >= {value}, got {_json(inst)}.",
        "maximum": lambda: f"must be at most {value}, got {_json(inst)}.",
        "enum": lambda: f"unknown {_json(inst)}; use one of {sorted(map(str, value))}.",
        "const": lambda: f"unsupported {_json(inst)}; this escher reads {_json(value)}.",
        "minLength": lambda: f"expected a non-empty string, got {_json(inst)}.",
        "maxLength": lambda: f"at most {value} characters, got {len(inst)}.",
        "minItems": lambda: f"needs at least {value} entry, got none.",
        "minProperties": lambda: f"needs at least {value} entry, got none.",
        "pattern": lambda: (
            f"{_json(inst)} is not a valid ephemeral label: use 1-63 letters, digits, '-', '_' "
            "or '.', starting and ending with a letter or digit."
        ),
    }
    if kind in simple:
        return simple[kind]()
    special = {
        "type": _type_message,
        "additionalProperties": _extra_message,
        "not": _not_message,
        "oneOf": _one_of_message,
    }
    if kind in special:
        return special[kind](error)
    return f"{error.message}."


def _key(error: Any) -> tuple[Any, ...]:
    # Document order, then the most specific error at a place.
    path = tuple((0, p) if isinstance(p, int) else (1, str(p)) for p in error.absolute_path)
    return (path, -len(error.absolute_schema_path))


@functools.cache
def _compiled(kind: str) -> Any:
    return fastjsonschema.compile(schema(kind))


# Per file kind: the list of entries, and the entry fields whose value does not change
# whether an entry is valid beyond its type and being empty (names, ids, sources): entries
# differing only there share one validation.
_ENTRIES = {"plan": ("tasks", ("name", "source")), "cluster": ("nodes", ("id",))}
# Those of the fields above an entry may leave out (an entry without one is valid exactly
# when it is with a non-empty string there).
_OPTIONAL = frozenset({"source"})


# Version 2 of the marshal format writes no back-references (nor the table that finds them):
# the fastest of marshal's formats for thousands of small entries.
_MARSHAL_VERSION = 2


def _entry_shape(entry: Any, free: tuple[str, ...]) -> Hashable | None:
    """What decides whether an entry is valid: its fields with their values, a non-empty
    string in a free-text field counting as any other. As JSON text written by orjson (where
    installed: twice as fast as marshal), which tells ``1``, ``1.0`` and ``true`` apart;
    where that text has a ``null`` (orjson writes NaN and infinities so) or orjson cannot
    write a value, as one `marshal` string, or `repr` for values marshal cannot write
    either (e.g. a NumPy number). None for an entry that is not an object (it is validated
    on its own)."""
    if type(entry) is not dict:
        return None
    rest = entry.copy()
    for name in free:
        value = rest.get(name)
        if type(value) is str and value:
            rest[name] = "-"
    if _orjson is not None:
        try:
            text: bytes = _orjson.dumps(rest)
        except TypeError:  # orjson's JSONEncodeError: a value JSON cannot hold
            pass
        else:
            if b"null" not in text:
                return text
    try:
        return b"m" + marshal.dumps(rest, _MARSHAL_VERSION)
    except ValueError:  # not a value of a JSON document (e.g. a NumPy number)
        return repr(rest)


def _plain_shapes(entries: list[Any], free: tuple[str, ...]) -> list[Hashable | None] | None:
    """The shapes of `entries` in one go when each is an object with a non-empty string in
    each of its `free` fields (or none in an optional one) and no value orjson would write
    as ``null``: its JSON text with ``"-"`` there, which tells entries apart as
    `_entry_shape` does. None otherwise (or without orjson)."""
    if _orjson is None or set(map(type, entries)) != {dict}:
        return None
    for name in free:
        try:
            if name in _OPTIONAL:
                values = [entry.get(name, "-") for entry in entries]
            else:
                values = list(map(operator.itemgetter(name), entries))
        except KeyError:
            return None
        if set(map(type, values)) != {str} or not all(values):
            return None
    dumps, fill = _orjson.dumps, dict.fromkeys(free, "-")
    try:
        shapes: list[Hashable | None] = [dumps({**entry, **fill}) for entry in entries]
    except TypeError:  # orjson's JSONEncodeError: a value JSON cannot hold
        return None
    if b"null" in b"".join(shapes):  # type: ignore[arg-type]
        return None
    return shapes


def _by_shape(data: Any, kind: str) -> tuple[Any, list[Hashable | None] | None]:
    """A document with one entry per shape (`_entry_shape`) in its list of tasks or nodes
    (it is valid exactly when `data` is, so a plan written one entry per task is validated
    at the cost of its distinct shapes), and the shape of each entry. Any other document is
    returned as it is, with None."""
    where, free = _ENTRIES[kind]
    if not isinstance(data, dict) or not isinstance(data.get(where), list):
        return data, None
    entries = data[where]
    shapes = _plain_shapes(entries, free)
    if shapes is None:
        shapes = [_entry_shape(entry, free) for entry in entries]
    # One entry of each shape (the last: which one does not matter, nor their order; a
    # document with an entry that is not an object is invalid whichever such entry stays).
    kept = list(dict(zip(shapes, entries, strict=True)).values())
    if len(kept) == len(entries):
        return data, shapes
    return {**data, where: kept}, shapes


def validate_document(data: Any, kind: str, *, source: str) -> list[Hashable] | None:
    """Check `data` against the schema of `kind` (``"plan"`` or ``"cluster"``).

    Task (node) entries that differ only in their names and sources (ids) are checked once
    (the schema says the same of each); a document with a problem is checked whole, so the
    error names the first bad place in document order.

    Returns:
        The shape of each task (node) entry of a valid document: entries of one shape differ
        only in their names and sources (ids), so one value built from the first serves them
        all. None when the document has no such list.

    Raises:
        PlanFormatError: the first problem in document order, as ``source: place: what``.
    """
    try:
        reduced, shapes = _by_shape(data, kind) if kind in _ENTRIES else (data, None)
        _compiled(kind)(reduced)
        return shapes
    except fastjsonschema.JsonSchemaException as exc:
        fast_message = str(exc).replace("data", "", 1).lstrip(".")
    except (RecursionError, TypeError, ValueError, OverflowError) as exc:
        fast_message = f"cannot be read ({type(exc).__name__})"
    try:
        message = _first_error(data, kind, source, fast_message)
    except RecursionError:  # a valid document is a few levels deep
        message = f"{source}: nested too deeply to be a plan or cluster."
    raise PlanFormatError(message)


def read_document(data: Any, kind: str, *, source: str) -> tuple[Any, list[Hashable] | None]:
    """`validate_document`, also taking quantities written as strings (``"2Gi"``, ``"500m"``)
    wherever the schema wants a number.

    Returns:
        The document to read (`data` itself when it has no such string; else a copy with
        each one replaced by its number) and the shapes `validate_document` returns.

    Raises:
        PlanFormatError: as `validate_document` (a string that is not a quantity is reported
            at its place).
    """
    try:
        return data, validate_document(data, kind, source=source)
    except PlanFormatError:
        try:
            replaced = _quantity_strings(data, kind)
        except RecursionError:  # nested too deeply: the error above says so
            replaced = {}
        if not replaced:
            raise
    fixed = _replaced(data, replaced)
    return fixed, validate_document(fixed, kind, source=source)


def _quantity_strings(data: Any, kind: str) -> dict[tuple[Any, ...], float]:
    """Place -> number for every quantity string where the schema wants a number (other
    strings stay: the schema's error names their place)."""
    found: dict[tuple[Any, ...], float] = {}
    pending = list(_validator(kind).iter_errors(data))
    while pending:
        error = pending.pop()
        pending.extend(error.context or ())
        if error.validator != "type" or not isinstance(error.instance, str):
            continue
        expected = error.validator_value
        if "number" not in (expected if isinstance(expected, list) else [expected]):
            continue
        with contextlib.suppress(EscherError):
            found[tuple(error.absolute_path)] = parse_quantity(error.instance)
    return found


def _replaced(data: Any, replaced: dict[tuple[Any, ...], float]) -> Any:
    """A copy of `data` (only the containers on the way to a replaced place are copied)."""
    if not replaced:
        return data
    heads: dict[Any, dict[tuple[Any, ...], float]] = {}
    for path, value in replaced.items():
        if not path:
            return value
        heads.setdefault(path[0], {})[path[1:]] = value
    copy: Any = list(data) if isinstance(data, list) else dict(data)
    for key, rest in heads.items():
        copy[key] = _replaced(data[key], rest)
    return copy


def _first_error(data: Any, kind: str, source: str, fast_message: str) -> str:
    """The message about the first problem in document order."""
    errors = list(_validator(kind).iter_errors(data))
    if not errors:
        return f"{source}: {fast_message}."
    error = min(errors, key=_key)
    where = place(error.absolute_path)
    prefix = f"{source}: {where}" if where else source
    if error.validator == "propertyNames":  # the message is about the key itself
        return f"{prefix}: invalid name {_json(error.instance)}."
    return f"{prefix}: {_message(error)}"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number escher accepts (use a finite number)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text} is too large (at most 9007199254740992)")
    return value


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cycle collector while a document is read and turned into values: a
    plan of thousands of entries makes thousands of objects and no cycles, and each
    collection pass would walk them all again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse_json(text: str, *, source: str) -> Any:
    """Parse JSON text; errors name `source`, line and column. NaN and Infinity are refused.

    Raises:
        PlanFormatError: not JSON, nested too deeply, or a number escher cannot use.
    """
    try:
        with paused_gc():
            return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(
            f"{source}: line {exc.lineno} column {exc.colno}: {exc.msg}."
        ) from None
    except RecursionError:
        raise PlanFormatError(f"{source}: nested too deeply to be a plan or cluster.") from None
    except ValueError as exc:
        raise PlanFormatError(f"{source}: {exc}.") from None


# Byte -> "0" for a digit, " " for anything else: a run of 19 digits is an integer orjson
# may read as a float (beyond 64 bits) where `json` reads an int.
_DIGIT_RUNS = bytes(b"0"[0] if chr(b).isdigit() and b < 128 else b" "[0] for b in range(256))
_LONG_RUN = b"0" * 19


def _fast_parse(raw: bytes) -> Any:
    """`raw` parsed by orjson (the `verify` extra; several times faster than `json` on plans
    of thousands of entries), or None when orjson is not installed or its answer could
    differ from `parse_json`'s: every document orjson refuses (bad JSON, NaN, a number too
    large, a lone surrogate, too deep) and every one with an integer of 19 digits or more is
    left to `json`, whose answers and messages are the reference."""
    if _orjson is None or _LONG_RUN in raw.translate(_DIGIT_RUNS):
        return None
    try:
        with paused_gc():
            return _orjson.loads(raw)
    except _orjson.JSONDecodeError:
        return None


def load_json(path: str | Path, what: str) -> Any:
    """Read a JSON file of kind `what` (for messages: ``"plan"``, ``"cluster"``).

    Raises:
        PlanFormatError: unreadable, not UTF-8, or not JSON, naming the file and the place.
    """
    return parse_bytes(read_bytes(path, what), path)


def read_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of a file of kind `what` (for messages: ``"plan"``, ``"cluster"``).

    Raises:
        PlanFormatError: unreadable, naming the file.
    """
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise PlanFormatError(f"{path}: cannot read {what} file: {exc.strerror}.") from None


def parse_bytes(raw: bytes, path: str | Path) -> Any:
    """The contents `raw` of file `path` parsed, as `load_json` does.

    Raises:
        PlanFormatError: not UTF-8, or not JSON, naming the file and the place.
    """
    data = _fast_parse(raw)
    if data is not None:
        return data
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanFormatError(f"{path}: byte {exc.start}: not UTF-8 text.") from None
    if "\r" in text:  # as a file read as text: lines end at "\r\n", "\r" or "\n"
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return parse_json(text, source=str(path))


def save_json(data: Any, path: str | Path, what: str) -> Path:
    """Write `data` as the JSON file `path` of kind `what`: two-space indents, keys in the
    order `data` has them, a final newline (the same data gives the same bytes).

    Raises:
        ValidationError: the file cannot be written, naming it and why.
    """
    target = Path(path)
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"{path}: cannot write {what} file: {exc.strerror}.") from None
    return target
