"""Required and preferred pod affinity and anti-affinity terms of a workload (kube-scheduler's
InterPodAffinity), against the other workloads' pods and the running pods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from escher.core.plan import Colocated, Intent, Separated
from escher.manifests._context import PREFERRED, REQUIRED, Approximation, Context
from escher.manifests._workloads import ManifestError, Workload, as_list, as_map


class _Found(NamedTuple):
    """What a pod (anti-)affinity term selects."""

    key: str
    plan_key: str | None
    targets: list[Workload]
    values: set[str]


class PodTerms(Context):
    """Pod (anti-)affinity terms: running pods' domains as node filters, anti-affinity as
    `Separated` (stated once every workload is read), affinity as `Colocated` where the pods
    it needs are known to be in one domain."""

    def pod_affinity(self, w: Workload, affinity: Mapping[str, Any], where: str) -> None:
        for kind in ("podAntiAffinity", "podAffinity"):
            section = as_map(affinity.get(kind), f"{where}.affinity.{kind}")
            for i, term in enumerate(as_list(section.get(REQUIRED), f"{kind}.{REQUIRED}")):
                path = f"affinity.{kind}.{REQUIRED}[{i}]"
                self.pod_term(w, kind, as_map(term, w.field(path)), path, 0.0)
            for i, pref in enumerate(as_list(section.get(PREFERRED), f"{kind}.{PREFERRED}")):
                path = f"affinity.{kind}.{PREFERRED}[{i}]"
                pref = as_map(pref, w.field(path))
                term = as_map(pref.get("podAffinityTerm"), w.field(f"{path}.podAffinityTerm"))
                weight = float(pref.get("weight") or 1)
                self.pod_term(w, kind, term, f"{path}.podAffinityTerm", weight)

    def pod_term(
        self, w: Workload, kind: str, term: Mapping[str, Any], path: str, weight: float
    ) -> None:
        field_path = w.field(path)
        key = term.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise ManifestError(f"{w.origin}: {field_path}.topologyKey: give a node label key.")
        namespaces = self.namespaces_of(term, w.namespace, field_path)
        selector = term.get("labelSelector")
        targets = self.matching_workloads(selector, namespaces, field_path)
        running = self.matching_pods(selector, namespaces, field_path)
        values = {v for p in running if (v := self.labels.get(p.node, {}).get(key)) is not None}
        found = _Found(key, self.key_for(key), targets, values)
        if kind == "podAntiAffinity":
            self.anti_term(w, path, found, weight)
        else:
            self.affinity_term(w, path, found, weight)

    def anti_term(self, w: Workload, path: str, found: _Found, weight: float) -> None:
        """A pod anti-affinity term: running pods' domains are left out; the pairs of
        workloads it keeps apart are stated once all workloads are read (`finish`)."""
        key, plan_key, targets, values = found
        field_path = w.field(path)
        if values:
            bad = self.domain_nodes(key, values)
            self.restrict(
                w,
                "podAntiAffinity",
                path,
                set(self.names) - bad,
                f"anti-affinity ({key}) with running pods",
                weight=weight,
            )
        for other in targets:
            if weight:
                if other.key == w.key:
                    self.out.plan.add_intent(Separated((w.key,), field_path, weight, plan_key))
                continue
            pair = (min(w.key, other.key), max(w.key, other.key))
            self.anti.setdefault(plan_key, {}).setdefault(pair, []).append(field_path)

    def affinity_term(self, w: Workload, path: str, found: _Found, weight: float) -> None:
        """A pod affinity term, stated exactly where the pods it needs are known to be in
        one domain (or are running), else as 'on a node with the key' with a warning."""
        key, plan_key, targets, values = found
        field_path = w.field(path)
        others = [t for t in targets if t.key != w.key]
        own = len(others) < len(targets)
        if weight:
            if own and not others and not values:
                self.out.plan.add_intent(Colocated((w.key,), field_path, weight, plan_key))
            return
        labelled = {n for n in self.names if key in self.labels[n]}
        if values and not others:
            self.restrict(
                w,
                "podAffinity",
                path,
                self.domain_nodes(key, values),
                f"affinity ({key}) with running pods",
            )
        elif not values and not targets:
            self.restrict(w, "podAffinity", path, set(), "affinity to pods that match nothing")
        elif not values and not own and len(others) == 1 and self.one_domain(others[0], key):
            # its pods go where the other workload's pods are, all in one domain
            self.restrict(w, "podAffinityLabel", path, labelled, f"nodes labelled {key}")
            pair = (w.key, others[0].key)
            self.later.append(Colocated(pair, field_path, 0.0, plan_key))  # once both exist
        elif not values and own and not others:
            self.restrict(w, "podAffinityLabel", path, labelled, f"nodes labelled {key}")
            self.out.plan.add_intent(Colocated((w.key,), field_path, 0.0, plan_key))
        else:
            self.restrict(w, "podAffinityLabel", path, labelled, f"nodes labelled {key}")
            self.approximate(
                f"{field_path}: affinity to the pods of "
                f"{', '.join(t.title for t in others) or 'running pods'} is checked only as "
                f"'on a node with label {key}' (which domains those pods take is not modelled).",
                f"pod affinity ({field_path}) to the pods of other workloads",
            )

    def one_domain(self, w: Workload, key: str) -> bool:
        """True if every placement puts all of `w`'s pods in one domain of `key`: a single
        pod, or a required affinity on `key` to its own pods only, none of them running."""
        if w.replicas == 1:
            return True
        section = (w.pod_spec.get("affinity") or {}).get("podAffinity") or {}
        for term in section.get(REQUIRED) or []:
            if not isinstance(term, Mapping) or term.get("topologyKey") != key:
                continue
            where = w.field("affinity.podAffinity")
            namespaces = self.namespaces_of(term, w.namespace, where)
            selector = term.get("labelSelector")
            targets = self.matching_workloads(selector, namespaces, where)
            if [t.key for t in targets] == [w.key] and not self.matching_pods(
                selector, namespaces, where
            ):
                return True
        return False

    def anti_pairs(self) -> None:
        """The anti-affinity between workloads, once all are read: a pair whose workloads
        each keep their own pods apart is `Separated`; other pairs are left out (warning)."""
        for label, pairs in self.anti.items():
            key = label
            bare = [n for n in self.names if label is not None and label not in self.labels[n]]
            if label is not None and bare:
                # kube-scheduler lets a node without the label take any number of pods; the
                # nearest escher statement: each such node is a domain of its own
                key = f"{label} (a node without it is a domain of its own)"
                self.out.plan.add_topology(
                    key,
                    {
                        n: (self.labels[n][label] or "(empty)")
                        if label in self.labels[n]
                        else f"{n} (no {label})"
                        for n in self.names
                    },
                )
                self.warn(
                    f"{len(bare)} node(s) without label {label} ({', '.join(bare[:3])}) take at "
                    f"most one pod each of the workloads kept apart on {label}; kube-scheduler "
                    "lets them take more (a FEASIBLE verdict holds; an INFEASIBLE one may be "
                    "too strict)."
                )
            selfish = {a for (a, b) in pairs if a == b}
            stated: list[Intent] = []
            for (a, b), sources in sorted(pairs.items()):
                src = "; ".join(dict.fromkeys(sources))
                if a == b:
                    stated.append(Separated((a,), src, 0.0, key))
                elif a in selfish and b in selfish:
                    stated.append(Separated((a, b), src, 0.0, key))
                else:
                    self.approximate(
                        f"{src}: not checked: anti-affinity between {a} and {b}, whose pods may "
                        "share a domain among themselves, has no exact escher statement.",
                        f"pod anti-affinity between {a} and {b} ({src})",
                    )
            for intent in stated:
                self.out.plan.add_intent(intent)
            if label is not None and bare and stated:
                self.out.approximations.append(
                    Approximation(
                        f"nodes without label {label} take at most one pod each of the "
                        f"workloads kept apart on {label} (kube-scheduler: any number)",
                        "stricter",
                        tuple(stated),
                        tuple(bare),
                    )
                )
