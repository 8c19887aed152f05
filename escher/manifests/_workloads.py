"""Workloads read from manifests: Pod, Deployment, ReplicaSet, StatefulSet, Job, PodGroup.

Each workload is the pod template of one object and the number of its pods that run at
the same time; `Workloads` is what `load_manifests` and `workloads_from_objects` return.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.errors import PlanFormatError

#: Kinds whose pods escher checks, and the path of the pod spec inside the object.
POD_SPEC_PATH = {
    "Pod": "spec",
    "Deployment": "spec.template.spec",
    "ReplicaSet": "spec.template.spec",
    "StatefulSet": "spec.template.spec",
    "Job": "spec.template.spec",
}

#: Pod labels that name the scheduler-plugins PodGroup a pod belongs to.
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")


class ManifestError(PlanFormatError):
    """A manifest or cluster listing that cannot be read (names the file and the place)."""


@dataclass(frozen=True)
class Workload:
    """The pods of one object.

    Attributes:
        kind: ``Pod``, ``Deployment``, ``ReplicaSet``, ``StatefulSet`` or ``Job``.
        namespace: The object's namespace (``default`` when not given).
        name: The object's name.
        replicas: Pods of it that run at the same time (a Job: parallelism, at most its
            completions).
        pod_spec: The pod spec (``spec`` of a Pod, ``spec.template.spec`` otherwise).
        labels: The pods' labels.
        spec_path: Where `pod_spec` is in the object (for field paths in explanations).
        origin: The file (and document) it was read from.
        raw: The object as written (for `--emit-placement`).
    """

    kind: str
    namespace: str
    name: str
    replicas: int
    pod_spec: Mapping[str, Any]
    labels: Mapping[str, str]
    spec_path: str
    origin: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> str:
        """``Kind/namespace/name``: the workload's task name in plans and witnesses."""
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def title(self) -> str:
        """``Kind namespace/name``, as explanations name the object."""
        return f"{self.kind} {self.namespace}/{self.name}"

    def field(self, path: str) -> str:
        """The object and a field path under its pod spec, e.g. ``Deployment default/web:
        spec.template.spec.nodeSelector``."""
        return f"{self.title}: {self.spec_path}.{path}" if path else self.title


@dataclass(frozen=True)
class PodGroup:
    """A scheduler-plugins PodGroup: its member pods start together, at least `min_member`."""

    namespace: str
    name: str
    min_member: int
    origin: str = ""


@dataclass(frozen=True)
class Workloads:
    """Everything read from a set of manifests.

    Attributes:
        items: The workloads, in the order read.
        pod_groups: PodGroup objects, by ``namespace/name``.
        namespaces: Namespace objects' labels, by name (for namespaceSelector).
        skipped: Objects of kinds escher does not check (``Kind namespace/name (origin)``).
        warnings: What was read but not modelled exactly.
    """

    items: tuple[Workload, ...] = ()
    pod_groups: Mapping[str, PodGroup] = field(default_factory=dict)
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.items)


def _int(value: Any, default: int, where: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where}: expected a whole number >= 0, got {value!r}.")
    return value


def as_map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{where}: expected a mapping, got {type(value).__name__}.")
    return value


def as_list(value: Any, where: str) -> list[Any]:
    """`value` if it is a list (None: empty).

    Raises:
        ManifestError: another type, naming `where`.
    """
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{where}: expected a list, got {type(value).__name__}.")
    return value


def _replicas(obj: Mapping[str, Any], kind: str, where: str) -> int:
    spec = as_map(obj.get("spec"), f"{where}: spec")
    if kind == "Pod":
        return 1
    if kind == "Job":
        parallelism = _int(spec.get("parallelism"), 1, f"{where}: spec.parallelism")
        completions = spec.get("completions")
        if completions is None:
            return parallelism
        return min(parallelism, _int(completions, 1, f"{where}: spec.completions"))
    return _int(spec.get("replicas"), 1, f"{where}: spec.replicas")


def as_labels(value: Any, where: str) -> dict[str, str]:
    """Labels (or a node selector): a mapping of keys to scalar values, as strings.

    Raises:
        ManifestError: not a mapping, or a value that is a list or a mapping.
    """
    labels = as_map(value, where)
    for k, v in labels.items():
        if isinstance(v, Mapping | list):
            raise ManifestError(f"{where}.{k}: a label value is a string, got {type(v).__name__}.")
    return {str(k): "" if v is None else str(v) for k, v in labels.items()}


def workload_of(obj: Mapping[str, Any], origin: str) -> Workload:
    """The workload of one Pod, Deployment, ReplicaSet, StatefulSet or Job object.

    Raises:
        ManifestError: a field of the wrong type, naming `origin` and the field.
    """
    kind = str(obj.get("kind"))
    meta = as_map(obj.get("metadata"), f"{origin}: metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{origin}: {kind} without metadata.name; give every object a name.")
    namespace = str(meta.get("namespace") or "default")
    where = f"{origin}: {kind} {namespace}/{name}"
    path = POD_SPEC_PATH[kind]
    if kind == "Pod":
        spec = as_map(obj.get("spec"), f"{where}: spec")
        labels = as_labels(meta.get("labels"), f"{where}: metadata.labels")
    else:
        template = as_map(
            as_map(obj.get("spec"), f"{where}: spec").get("template"), f"{where}: spec.template"
        )
        spec = as_map(template.get("spec"), f"{where}: spec.template.spec")
        tmeta = as_map(template.get("metadata"), f"{where}: spec.template.metadata")
        labels = as_labels(tmeta.get("labels"), f"{where}: spec.template.metadata.labels")
    return Workload(
        kind=kind,
        namespace=namespace,
        name=name,
        replicas=_replicas(obj, kind, where),
        pod_spec=spec,
        labels=labels,
        spec_path=path,
        origin=origin,
        raw=obj,
    )


def pod_group_of(obj: Mapping[str, Any], origin: str) -> PodGroup:
    """The PodGroup of a scheduler-plugins ``PodGroup`` object.

    Raises:
        ManifestError: no name, or a bad ``spec.minMember``.
    """
    meta = as_map(obj.get("metadata"), f"{origin}: metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{origin}: PodGroup without metadata.name.")
    namespace = str(meta.get("namespace") or "default")
    spec = as_map(obj.get("spec"), f"{origin}: spec")
    minimum = _int(spec.get("minMember"), 1, f"{origin}: PodGroup {namespace}/{name}: minMember")
    return PodGroup(namespace, name, minimum, origin)


def pod_group_name(workload: Workload) -> str | None:
    """``namespace/name`` of the PodGroup the workload's pods name, else None."""
    for label in POD_GROUP_LABELS:
        if label in workload.labels:
            return f"{workload.namespace}/{workload.labels[label]}"
    return None


def flatten(objects: Iterable[Any], origin: str) -> Iterable[tuple[Mapping[str, Any], str]]:
    """Every object, with ``List`` objects (``kind: List`` or ``*List``) opened up; each with
    the place it came from."""
    for i, obj in enumerate(objects):
        if obj is None:  # an empty YAML document
            continue
        where = f"{origin}[{i}]"
        if not isinstance(obj, Mapping):
            raise ManifestError(
                f"{where}: expected a Kubernetes object (a mapping), got {type(obj).__name__}."
            )
        kind = obj.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and "items" in obj:
            items = obj.get("items") or []
            if not isinstance(items, list):
                raise ManifestError(f"{where}: items of a {kind} must be a list.")
            yield from flatten(items, f"{where}.items")
        else:
            yield obj, where


def workloads_from_objects(
    objects: Iterable[Mapping[str, Any]], source: str = "<objects>"
) -> Workloads:
    """The workloads of Kubernetes objects (as `yaml.safe_load_all` or the API gives them).

    Pods, Deployments, ReplicaSets, StatefulSets and Jobs become workloads; PodGroups and
    Namespaces are kept for gangs and namespace selectors; other kinds are listed in
    `Workloads.skipped`.

    Raises:
        ManifestError: an object escher cannot read, naming `source` and the place.
    """
    items: list[Workload] = []
    groups: dict[str, PodGroup] = {}
    namespaces: dict[str, Mapping[str, str]] = {}
    skipped: list[str] = []
    seen: dict[str, str] = {}
    for obj, where in flatten(objects, source):
        kind = obj.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ManifestError(f"{where}: every object needs a kind (a string), got {kind!r}.")
        if kind in POD_SPEC_PATH:
            w = workload_of(obj, where)
            if w.key in seen:
                raise ManifestError(
                    f"{where}: {w.title} is also defined at {seen[w.key]}; give each object once."
                )
            seen[w.key] = where
            if w.replicas > 0:
                items.append(w)
        elif kind == "PodGroup":
            g = pod_group_of(obj, where)
            groups[f"{g.namespace}/{g.name}"] = g
        elif kind == "Namespace":
            meta = as_map(obj.get("metadata"), f"{where}: metadata")
            namespaces[str(meta.get("name"))] = as_labels(meta.get("labels"), f"{where}: labels")
        else:
            raw_meta = obj.get("metadata")
            meta = raw_meta if isinstance(raw_meta, Mapping) else {}
            ns = meta.get("namespace")
            label = f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))
            skipped.append(f"{kind} {label} ({where})")
    return Workloads(tuple(items), groups, namespaces, tuple(skipped))


def merge(parts: Iterable[Workloads]) -> Workloads:
    """Several `Workloads` as one (the files of one `load_manifests` call).

    Raises:
        ManifestError: an object defined in two places.
    """
    items: list[Workload] = []
    groups: dict[str, PodGroup] = {}
    namespaces: dict[str, Mapping[str, str]] = {}
    skipped: list[str] = []
    warnings: list[str] = []
    seen: dict[str, str] = {}
    for part in parts:
        for w in part.items:
            if w.key in seen:
                raise ManifestError(
                    f"{w.origin}: {w.title} is also defined at {seen[w.key]}; give each "
                    "object once."
                )
            seen[w.key] = w.origin
            items.append(w)
        groups.update(part.pod_groups)
        namespaces.update(part.namespaces)
        skipped.extend(part.skipped)
        warnings.extend(part.warnings)
    return Workloads(tuple(items), groups, namespaces, tuple(skipped), tuple(warnings))
