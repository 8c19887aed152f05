"""Kubernetes matching rules: label selectors, node selector terms, tolerations vs taints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from escher.manifests._workloads import ManifestError


def _values(expr: Mapping[str, Any], where: str) -> list[str]:
    values = expr.get("values") or []
    if not isinstance(values, list):
        raise ManifestError(f"{where}.values: expected a list.")
    return [str(v) for v in values]


def _expression(expr: Any, value: str | None, where: str) -> bool:
    """One match expression against the value of its key (None: the key is absent)."""
    if not isinstance(expr, Mapping):
        raise ManifestError(f"{where}: expected a mapping with key and operator.")
    op = expr.get("operator")
    values = _values(expr, where)
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            raise ManifestError(f"{where}: {op} takes exactly one value.")
        try:
            bound = int(values[0])
        except ValueError:
            raise ManifestError(f"{where}: {op} takes a whole number, got {values[0]!r}.") from None
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    raise ManifestError(
        f"{where}.operator: {op!r} is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt."
    )


def selector_matches(selector: Any, labels: Mapping[str, str], where: str) -> bool:
    """True if a label selector (matchLabels and matchExpressions, ANDed) selects `labels`.

    An empty selector selects everything; None selects nothing (as in pod affinity terms).
    """
    if selector is None:
        return False
    if not isinstance(selector, Mapping):
        raise ManifestError(f"{where}: expected a label selector mapping.")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise ManifestError(f"{where}.matchLabels: expected a mapping.")
    for k, v in match_labels.items():
        if labels.get(str(k)) != str(v):
            return False
    exprs = selector.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise ManifestError(f"{where}.matchExpressions: expected a list.")
    for i, expr in enumerate(exprs):
        key = str(expr.get("key")) if isinstance(expr, Mapping) else ""
        if not _expression(expr, labels.get(key), f"{where}.matchExpressions[{i}]"):
            return False
    return True


def term_matches_node(term: Any, labels: Mapping[str, str], name: str, where: str) -> bool:
    """True if a node selector term (its expressions and fields, ANDed) matches the node.

    A term with no expressions and no fields matches no node (as kube-scheduler).
    """
    if not isinstance(term, Mapping):
        raise ManifestError(f"{where}: expected a node selector term mapping.")
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(exprs, list) or not isinstance(fields, list):
        raise ManifestError(f"{where}: matchExpressions and matchFields must be lists.")
    if not exprs and not fields:
        return False
    for i, expr in enumerate(exprs):
        key = str(expr.get("key")) if isinstance(expr, Mapping) else ""
        if not _expression(expr, labels.get(key), f"{where}.matchExpressions[{i}]"):
            return False
    for i, expr in enumerate(fields):
        field_key = expr.get("key") if isinstance(expr, Mapping) else None
        if field_key != "metadata.name":
            raise ManifestError(
                f"{where}.matchFields[{i}].key: only metadata.name is a node field selector."
            )
        if not _expression(expr, name, f"{where}.matchFields[{i}]"):
            return False
    return True


def node_affinity_matches(
    terms: Sequence[Any], labels: Mapping[str, str], name: str, where: str
) -> bool:
    """True if any term (terms are ORed) matches the node."""
    return any(term_matches_node(t, labels, name, f"{where}[{i}]") for i, t in enumerate(terms))


def tolerates(tolerations: Sequence[Any], taint: Mapping[str, Any]) -> bool:
    """True if some toleration tolerates `taint` (Kubernetes' ToleratesTaint).

    An empty effect matches every effect; an empty key with ``Exists`` matches every taint;
    ``Equal`` (the default operator) needs the same value, ``Exists`` any value.
    """
    key, value, effect = taint.get("key", ""), taint.get("value", "") or "", taint.get("effect")
    for tol in tolerations:
        if not isinstance(tol, Mapping):
            continue
        if tol.get("effect") and tol.get("effect") != effect:
            continue
        op = tol.get("operator") or "Equal"
        tkey = tol.get("key") or ""
        if not tkey:
            if op == "Exists":
                return True
            continue
        if tkey != key:
            continue
        if op == "Exists" or (op == "Equal" and (tol.get("value") or "") == value):
            return True
    return False


def taint_text(taint: Mapping[str, Any]) -> str:
    """A taint as kubectl writes it: ``key=value:Effect``."""
    value = taint.get("value")
    return f"{taint.get('key')}{'=' + str(value) if value else ''}:{taint.get('effect')}"
