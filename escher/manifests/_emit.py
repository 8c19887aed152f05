"""`emit_placement`: a proven placement written as node-affinity pins into copies of the
manifests, so kube-scheduler (greedy) lands the pods where escher proved they fit."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from escher.manifests._workloads import ManifestError, Workload, Workloads

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


#: Label that tells apart the per-node parts of one workload (their selectors stay disjoint).
PART_LABEL = "escher.io/placement-part"


def split(w: Workload, nodes: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """The workload as objects that each run its pods of one witness node, pinned there.

    A Pod, or a workload whose pods all go to one node, stays one object. Otherwise each node
    gets a part named ``<name>-<i>`` with that node's pods (``replicas``, or a Job's
    ``parallelism`` and ``completions``, the first part keeping the completions that do not
    run at once), its pods labelled `PART_LABEL` (added to the selector, so parts never
    adopt each other's pods); every other field is kept.
    """
    counts = Counter(nodes)
    if w.kind == "Pod" or len(counts) == 1:
        return [(w.name, pin(w.raw, w.kind, list(counts)))]
    spec = w.raw.get("spec") or {}
    extra = 0
    if w.kind == "Job" and spec.get("completions") is not None:
        extra = max(0, int(spec["completions"]) - w.replicas)
    parts = []
    for i, (node, count) in enumerate(sorted(counts.items())):
        obj = pin(w.raw, w.kind, [node])
        obj["metadata"] = {**(obj.get("metadata") or {}), "name": f"{w.name}-{i}"}
        part = obj["spec"]
        template = part.setdefault("template", {})
        tmeta = template.setdefault("metadata", {})
        tmeta["labels"] = {**(tmeta.get("labels") or {}), PART_LABEL: str(i)}
        if w.kind == "Job":
            part["parallelism"] = count
            if spec.get("completions") is not None:
                part["completions"] = count + (extra if i == 0 else 0)
        else:
            part["replicas"] = count
            selector = part.get("selector")
            if isinstance(selector, dict):
                selector["matchLabels"] = {
                    **(selector.get("matchLabels") or {}),
                    PART_LABEL: str(i),
                }
        parts.append((f"{w.name}-{i}", obj))
    return parts


def apply_order(witness: Mapping[str, Sequence[str]]) -> list[str]:
    """The workloads of `witness` in the order to apply them: the most constrained (the
    fewest distinct nodes per pod) first, then by name."""
    placed = [(k, nodes) for k, nodes in witness.items() if nodes]
    placed.sort(key=lambda kn: (len(set(kn[1])) / len(kn[1]), kn[0]))
    return [k for k, _ in placed]


def emit_placement(
    workloads: Workloads, witness: Mapping[str, Sequence[str]], directory: str | Path
) -> list[Path]:
    """Write the workloads of `witness` pinned to the nodes the witness gives their pods.

    Each workload becomes one object per witness node (`split`), pinned to that node, so
    kube-scheduler binds every pod where escher proved it fits. Files are
    ``NNN-<kind>-<namespace>-<name>.yaml`` in `directory` (created if needed), the most
    constrained workloads first, plus `APPLY_ORDER` listing them; apply them in that order
    (``kubectl apply -f`` on each).

    Returns:
        The manifest files written, in apply order.

    Raises:
        ManifestError: the folder cannot be written, or the witness names no workload.
    """
    out_dir = Path(directory)
    by_key = {w.key: w for w in workloads.items}
    placed = [(k, witness[k]) for k in apply_order(witness) if k in by_key]
    if not placed:
        raise ManifestError("the placement names none of the workloads; nothing to write.")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        written: list[Path] = []
        for key, nodes in placed:
            w = by_key[key]
            for name, obj in split(w, nodes):
                path = out_dir / f"{len(written):03d}-{w.kind.lower()}-{w.namespace}-{name}.yaml"
                path.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
                written.append(path)
        (out_dir / APPLY_ORDER).write_text(
            "".join(f"{p.name}\n" for p in written), encoding="utf-8"
        )
    except OSError as exc:
        raise ManifestError(f"{out_dir}: cannot write the placement there ({exc}).") from None
    return written
