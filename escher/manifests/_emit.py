"""`emit_placement`: a proven placement written as node-affinity pins into copies of the
manifests, so kube-scheduler (greedy) lands the pods where escher proved they fit."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from escher.manifests._workloads import ManifestError, Workloads

#: The file, in the output folder, that lists the patched manifests in the order to apply.
APPLY_ORDER = "apply-order.txt"

PIN_KEY = "metadata.name"


def _pod_spec(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    if kind == "Pod":
        spec: dict[str, Any] = obj.setdefault("spec", {})
        return spec
    template = obj.setdefault("spec", {}).setdefault("template", {})
    pod_spec: dict[str, Any] = template.setdefault("spec", {})
    return pod_spec


def pin(obj: Mapping[str, Any], kind: str, nodes: Sequence[str]) -> dict[str, Any]:
    """A copy of `obj` whose pods may only use `nodes` (a ``matchFields`` requirement on the
    node name ANDed into every required node selector term; the other fields are kept).

    The API server takes one value per ``matchFields`` requirement, so each term becomes one
    term per node (terms are ORed).
    """
    out = copy.deepcopy(dict(obj))
    spec = _pod_spec(out, kind)
    node_aff = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    pinned = []
    for term in terms:
        for node in sorted(set(nodes)):
            field = {"key": PIN_KEY, "operator": "In", "values": [node]}
            pinned.append({**term, "matchFields": [*(term.get("matchFields") or []), field]})
    required["nodeSelectorTerms"] = pinned
    return out


def emit_placement(
    workloads: Workloads, witness: Mapping[str, Sequence[str]], directory: str | Path
) -> list[Path]:
    """Write each workload of `witness` as a copy pinned to the nodes the witness gives it.

    Files are ``NN-<kind>-<namespace>-<name>.yaml`` in `directory` (created if needed),
    most constrained first (fewest nodes per pod), plus `APPLY_ORDER` listing them; apply
    them in that order (``kubectl apply -f`` on each).

    Returns:
        The manifest files written, in apply order.

    Raises:
        ManifestError: the folder cannot be written, or the witness names no workload.
    """
    out_dir = Path(directory)
    by_key = {w.key: w for w in workloads.items}
    placed = [(k, nodes) for k, nodes in witness.items() if k in by_key and nodes]
    if not placed:
        raise ManifestError("the placement names none of the workloads; nothing to write.")
    placed.sort(key=lambda kn: (len(set(kn[1])) / len(kn[1]), kn[0]))
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for i, (key, nodes) in enumerate(placed):
            w = by_key[key]
            obj = pin(w.raw, w.kind, nodes)
            name = f"{i:02d}-{w.kind.lower()}-{w.namespace}-{w.name}.yaml"
            path = out_dir / name
            path.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
            written.append(path)
        (out_dir / APPLY_ORDER).write_text(
            "".join(f"{p.name}\n" for p in written), encoding="utf-8"
        )
    except OSError as exc:
        raise ManifestError(f"{out_dir}: cannot write the placement there ({exc}).") from None
    return written
