"""Resource names, quantities and the immutable `Resources` vector."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeAlias

from escher.core.errors import (
    InvalidCapacityError,
    InvalidResourceNameError,
    ReservedResourceError,
    ValidationError,
    closest,
    short_repr,
)

#: Largest capacity escher accepts. Policies that want "unbounded" use this value.
MAX_CAPACITY = float(2**53)  # every integer up to it is exact in a float

#: Quantities are compared with this tolerance so 0.1 + 0.2 fits into 0.3.
EPSILON = 1e-9

#: Resources a node defines itself; `set_resource` never touches them.
PREDEFINED_RESOURCES = frozenset(
    {"CPU", "GPU", "memory", "object_store_memory", "cpu", "gpu", "pods", "ephemeral-storage"}
)

# An ephemeral label: what Kubernetes accepts as the name part of an extended resource
# (<= 63 chars, alphanumeric at both ends, '-', '_', '.' inside), so one label works everywhere.
# Matched with fullmatch: `$` would also accept a trailing newline ('grp\n').
_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
# A resource name in a request or a node's total: labels, plus 'domain/name' and 'a:b' forms.
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_./:-]{0,251}[A-Za-z0-9])?")

ResourceLike: TypeAlias = "Resources | Mapping[str, float] | None"

#: Spellings of one node-defined resource in Ray, Kubernetes and escher: a request naming one
#: of them on a cluster whose nodes use another is told the name the nodes use.
RESOURCE_SPELLINGS: tuple[frozenset[str], ...] = (
    frozenset({"CPU", "cpu", "cpus", "CPUs", "vcpu", "cores"}),
    frozenset({"GPU", "gpu", "gpus", "GPUs", "nvidia.com/gpu", "amd.com/gpu"}),
    frozenset({"memory", "mem", "ram", "Memory", "MEMORY", "RAM"}),
    frozenset({"ephemeral-storage", "disk", "storage"}),
)


def suggest_resource(name: str, known: Iterable[str]) -> str | None:
    """The resource of `known` a request for `name` (which no node has) most likely meant.

    Another spelling of the same node-defined resource comes first (``cpu`` -> ``CPU``,
    ``nvidia.com/gpu`` or ``gpu`` -> ``GPU`` on Ray, ``CPU`` -> ``cpu`` on Kubernetes,
    ``mem`` -> ``memory``), then the same name in another case, then the closest name by edit
    distance (`escher.core.errors.closest`). None when `name` is known or nothing is close,
    and for a spelling of a node-defined resource no node has (``gpu`` never suggests
    ``CPU``).

    Example:
        >>> suggest_resource("cpu", ["CPU", "memory"])
        'CPU'
    """
    names = sorted(set(known))
    if name in names:
        return None
    lowered = name.lower()
    for spellings in RESOURCE_SPELLINGS:
        if name in spellings or lowered in {s.lower() for s in spellings}:
            same = [k for k in names if k in spellings]
            return same[0] if same else None  # never another resource (gpu is not CPU)
    same_case = [k for k in names if k.lower() == lowered]
    if same_case:
        return same_case[0]
    return closest(name, names)


def resource_suggestions(request: Iterable[str], known: Iterable[str]) -> list[tuple[str, str]]:
    """(name, what it likely meant) for each requested name no node has that has a close
    match in `known` (see `suggest_resource`)."""
    names = set(known)
    found = []
    for name in request:
        match = None if name in names else suggest_resource(name, names)
        if match is not None:
            found.append((name, match))
    return found


def unknown_resource_hint(request: Iterable[str], known: Iterable[str]) -> str:
    """A sentence naming each requested resource no node has and what it likely meant, e.g.
    ``" No node has 'cpu'. Did you mean 'CPU'?"``; "" when every name is known or nothing
    is close. The one place requests for unknown names get suggestions (API and CLI)."""
    return "".join(
        f" No node has {name!r}. Did you mean {match!r}?"
        for name, match in resource_suggestions(request, known)
    )


def fits(request: Mapping[str, float], available: Mapping[str, float]) -> bool:
    """True if `available` covers every quantity of `request` (within `EPSILON`).

    The one rule for "does this request fit"; `Resources.fits_in` is the same test.
    """
    return all(available.get(name, 0.0) + EPSILON >= q for name, q in request.items())


def give_back(used: dict[str, float], request: Mapping[str, float]) -> None:
    """Subtract `request` from the quantities in `used`, in place; what reaches zero
    (within `EPSILON`) is dropped. The one rule for releasing what a task held."""
    for name, quantity in request.items():
        left = used.get(name, 0.0) - quantity
        if left > EPSILON:
            used[name] = left
        else:
            used.pop(name, None)


def validate_name(name: object) -> str:
    """Return `name` if it can name a resource in a request or on a node.

    Raises:
        InvalidResourceNameError: `name` is not a string of 1-253 allowed characters.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidResourceNameError(
            f"{short_repr(name)} is not a valid resource name: use 1-253 letters, digits, "
            "'-', '_', '.', '/', ':', starting and ending with a letter or digit."
        )
    return name


def validate_label(label: object) -> str:
    """Return `label` if it can name an ephemeral resource on every backend.

    Raises:
        InvalidResourceNameError: not 1-63 characters of letters, digits, '-', '_', '.',
            starting and ending with a letter or digit.
        ReservedResourceError: the label is a resource nodes define themselves (CPU, GPU, ...).
    """
    if not isinstance(label, str) or not _LABEL_RE.fullmatch(label):
        raise InvalidResourceNameError(
            f"{short_repr(label)} is not a valid ephemeral resource label: use 1-63 letters, "
            "digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. 'grp-7')."
        )
    if label in PREDEFINED_RESOURCES or label.startswith("node:"):
        raise ReservedResourceError(
            f"{label!r} is defined by the nodes themselves; set_resource only manages "
            "ephemeral labels. Pick another label."
        )
    return label


def validate_count(value: object, *, what: str, low: int = 1) -> int:
    """Return `value` if it is an int (not a bool) of at least `low`: a count of things.

    Raises:
        ValidationError: otherwise, naming `what`.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValidationError(f"{what} must be an int >= {low}, got {value!r}.")
    return value


def validate_quantity(value: object, *, what: str = "quantity") -> float:
    """Return `value` as a float if it is a finite, non-negative, at most MAX_CAPACITY number.

    Raises:
        InvalidCapacityError: otherwise, with the reason.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidCapacityError(f"{what} must be a number, got {short_repr(value)}.")
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        raise InvalidCapacityError(
            f"{what} must be at most {MAX_CAPACITY:g}, got a number too large for a float; "
            "for 'unbounded' use escher.MAX_CAPACITY."
        ) from None
    if math.isnan(number) or math.isinf(number):
        raise InvalidCapacityError(
            f"{what} must be finite, got {number}; for 'unbounded' use escher.MAX_CAPACITY."
        )
    if number < 0:
        raise InvalidCapacityError(f"{what} must be >= 0, got {number}; 0 deletes a resource.")
    if number > MAX_CAPACITY:
        raise InvalidCapacityError(f"{what} must be at most {MAX_CAPACITY:g}, got {number:g}.")
    return number


class Resources(Mapping[str, float]):
    """An immutable mapping of resource name to non-negative quantity.

    Zero entries are dropped, so `Resources({"CPU": 0})` equals `Resources()`.

    Example:
        >>> Resources({"CPU": 2, "grp": 1}) + {"CPU": 1}
        Resources({'CPU': 3.0, 'grp': 1.0})
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, values: ResourceLike = None, /, **kwargs: float) -> None:
        data: dict[str, float] = {}
        if values is None:
            items: list[tuple[Any, Any]] = []
        elif isinstance(values, dict | Mapping):
            items = list(values.items())
        else:
            raise ValidationError(
                f"resources must be a mapping of resource name -> quantity (e.g. {{'CPU': 1}}), "
                f"got {type(values).__name__} {short_repr(values)}."
            )
        items.extend(kwargs.items())
        for name, quantity in items:
            validate_name(name)
            number = validate_quantity(quantity, what=f"quantity of {name!r}")
            if number > EPSILON:
                data[name] = number
        self._data = data
        self._hash: int | None = None

    @classmethod
    def of(cls, value: ResourceLike) -> Resources:
        """Coerce a mapping (or None) into `Resources`, reusing an existing instance."""
        return value if isinstance(value, Resources) else cls(value)

    @classmethod
    def _trusted(cls, data: dict[str, float]) -> Resources:
        new = cls.__new__(cls)
        new._data = data
        new._hash = None
        return new

    def __getitem__(self, name: str) -> float:
        return self._data[name]

    def get(self, name: str, default: Any = 0.0) -> Any:
        return self._data.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self == Resources.of(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Resources({self._data!r})"

    def __add__(self, other: ResourceLike) -> Resources:
        data = dict(self._data)
        for name, quantity in Resources.of(other)._data.items():
            data[name] = data.get(name, 0.0) + quantity
        return Resources._trusted(data)

    def __sub__(self, other: ResourceLike) -> Resources:
        """Subtract, clamping at zero (a vector never holds negative quantities)."""
        data = dict(self._data)
        for name, quantity in Resources.of(other)._data.items():
            left = data.get(name, 0.0) - quantity
            if left > EPSILON:
                data[name] = left
            else:
                data.pop(name, None)
        return Resources._trusted(data)

    def __mul__(self, factor: float) -> Resources:
        return Resources({name: q * factor for name, q in self._data.items()})

    __rmul__ = __mul__

    def fits_in(self, available: Mapping[str, float]) -> bool:
        """True if every quantity here is covered by `available` (see `fits`)."""
        return fits(self._data, available)

    def shortfall(self, available: Mapping[str, float]) -> Resources:
        """What `available` lacks to cover this vector (empty if it fits)."""
        return Resources._trusted(
            {
                name: q - available.get(name, 0.0)
                for name, q in self._data.items()
                if available.get(name, 0.0) + EPSILON < q
            }
        )

    def to_dict(self) -> dict[str, float]:
        """A plain dict copy, integral quantities as ints (for JSON and display)."""
        return {name: int(q) if q.is_integer() else q for name, q in self._data.items()}
