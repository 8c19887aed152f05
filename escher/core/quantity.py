"""Quantities as Kubernetes writes them: ``"4"``, ``"500m"``, ``"16Gi"``, ``"1e3"``.

One parser for every reader of quantities (cluster and plan files, command-line requests,
Kubernetes manifests and API objects), so ``2Gi`` means 2 x 2**30 everywhere.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from escher.core.errors import InvalidCapacityError

_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(text: object) -> float:
    """A quantity (a number, or a string such as ``"500m"`` or ``"16Gi"``) as a float.

    Raises:
        InvalidCapacityError: not a quantity.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    match = _QUANTITY_RE.match(str(text).strip())
    if match is None:
        raise InvalidCapacityError(
            f"{text!r} is not a quantity; write a number or a Kubernetes quantity such as "
            "'500m', '4', '16Gi' or '512Mi'."
        )
    try:
        return float(Decimal(match.group(1)) * _SUFFIXES[match.group(2)])
    except InvalidOperation:
        raise InvalidCapacityError(f"{text!r} is not a quantity.") from None
