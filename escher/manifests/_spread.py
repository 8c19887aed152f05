"""Topology spread constraints of a workload (kube-scheduler's PodTopologySpread): the
domains it counts, running pods included, as `SpreadEvenly` or `SpreadAtMost`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escher.core.plan import PinnedTo, SpreadAtMost, SpreadEvenly
from escher.manifests._context import HARD_EFFECTS, HOSTNAME, Context
from escher.manifests._match import tolerates
from escher.manifests._workloads import ManifestError, Workload, as_list, as_map


@dataclass(frozen=True)
class _Spread:
    """One topology spread constraint of a workload, as read."""

    w: Workload
    index: int
    path: str
    key: str
    skew: int
    weight: float
    min_domains: Any
    mapping: dict[str, str]

    @property
    def field(self) -> str:
        return self.w.field(self.path)


class Spreads(Context):
    """Topology spread constraints, `DoNotSchedule` as requirements and `ScheduleAnyway` as
    preferences."""

    def spread_domains(
        self, w: Workload, constraint: Mapping[str, Any], spec: Mapping[str, Any], keys: set[str]
    ) -> dict[str, str]:
        """Node -> domain, over the nodes kube-scheduler counts for this constraint."""
        key = str(constraint.get("topologyKey"))
        affinity_policy = constraint.get("nodeAffinityPolicy") or "Honor"
        taints_policy = constraint.get("nodeTaintsPolicy") or "Ignore"
        allowed = set(self.names)
        if affinity_policy == "Honor":
            for f in self.out.filters.get(w.key, []):
                if f.exclusion is not None and f.exclusion.cause in (
                    "nodeSelector",
                    "nodeAffinity",
                ):
                    allowed &= set(f.nodes)
        if taints_policy == "Honor":
            tolerations = spec.get("tolerations") or []
            allowed = {
                n
                for n in allowed
                if all(
                    tolerates(tolerations, t)
                    for t in self.cluster.nodes[n].taints
                    if t.get("effect") in HARD_EFFECTS
                )
            }
        return {
            n: self.labels[n][key]
            for n in sorted(allowed)
            if all(k in self.labels[n] for k in keys)
        }

    def spread(self, w: Workload, spec: Mapping[str, Any], where: str) -> None:
        constraints = as_list(
            spec.get("topologySpreadConstraints"), f"{where}.topologySpreadConstraints"
        )
        keys = {
            str(c.get("topologyKey"))
            for c in constraints
            if isinstance(c, Mapping)
            and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        }
        for i, c in enumerate(constraints):
            path = f"topologySpreadConstraints[{i}]"
            field_path = w.field(path)
            c = as_map(c, field_path)
            key = c.get("topologyKey")
            skew = c.get("maxSkew")
            if not isinstance(key, str) or not key:
                raise ManifestError(f"{w.origin}: {field_path}.topologyKey: give a node label key.")
            if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
                raise ManifestError(f"{w.origin}: {field_path}.maxSkew: give a whole number >= 1.")
            hard = (c.get("whenUnsatisfiable") or "DoNotSchedule") == "DoNotSchedule"
            selector = dict(as_map(c.get("labelSelector"), f"{field_path}.labelSelector"))
            label_keys = [
                str(k) for k in as_list(c.get("matchLabelKeys"), f"{field_path}.matchLabelKeys")
            ]
            extra = [
                {"key": k, "operator": "In", "values": [w.labels[k]]}
                for k in label_keys
                if k in w.labels
            ]
            if extra:
                selector["matchExpressions"] = [*(selector.get("matchExpressions") or []), *extra]
            sel = selector if c.get("labelSelector") is not None or extra else None
            counted = self.matching_workloads(sel, {w.namespace}, field_path)
            mapping = self.spread_domains(w, c, spec, keys if hard else {key})
            running = [
                p for p in self.matching_pods(sel, {w.namespace}, field_path) if p.node in mapping
            ]
            if hard:
                labelled = {n for n in self.names if all(k in self.labels[n] for k in keys)}
                self.restrict(w, "topologyLabel", path, labelled, f"nodes labelled {key}")
            others = [o for o in counted if o.key != w.key]
            if others:
                if not hard:
                    continue  # a preference: never decides feasibility, not reported
                self.approximate(
                    f"{field_path}: not checked: the spread also counts the pods of "
                    f"{', '.join(o.title for o in others)}; escher checks spreads that count "
                    "the workload's own pods and running pods.",
                    f"topology spread ({field_path}) counting other workloads' pods",
                )
                continue
            if not counted:
                continue  # its selector counts none of the new pods: nothing to check
            weight = 0.0 if hard else 1.0
            rule = _Spread(w, i, path, key, skew, weight, c.get("minDomains"), mapping)
            self.spread_rule(rule, Counter(mapping[p.node] for p in running))

    def phantoms(self, rule: _Spread, running: Mapping[str, int], within: int) -> list[str]:
        """Tasks standing for the running pods a spread counts: per domain holding fewer than
        `within` of them, that many replicas pinned to the domain's nodes (they request
        nothing: their requests are already taken from the nodes)."""
        names = []
        for j, (domain, count) in enumerate(sorted(running.items())):
            if count >= within:
                continue
            name = f"running pods/{rule.w.key}/{rule.index}/{j}"
            src = f"{count} running pod(s) in {rule.key}={domain} counted by {rule.field}"
            self.out.plan.add_task(name, {}, count=count, concurrent=True, source=src)
            nodes = tuple(n for n, d in sorted(rule.mapping.items()) if d == domain)
            self.out.plan.add_intent(PinnedTo((name,), src, 0.0, nodes))
            names.append(name)
        return names

    def spread_rule(self, rule: _Spread, running: Mapping[str, int]) -> None:
        """kube-scheduler admits a pod into domain d when count(d) + 1 - min <= maxSkew, min
        over the eligible domains (0 when fewer than minDomains). From running counts r and
        new pods x, the placements it reaches are those where every domain that gets new pods
        ends at most maxSkew above the final minimum (fill the emptiest first)."""
        w, skew = rule.w, rule.skew
        values = set(rule.mapping.values())
        empty = len(values - set(running))
        at_most = isinstance(rule.min_domains, int) and rule.min_domains > len(values)
        per_node = rule.key == HOSTNAME and self.key_for(rule.key) is None
        if at_most or w.replicas < empty:
            # the minimum stays 0: new pods only where fewer than maxSkew pods run, up to it
            full = {d for d, r in running.items() if r >= skew}
            if full and not rule.weight:
                self.restrict(
                    w,
                    "topologySpread",
                    rule.path,
                    {n for n, d in rule.mapping.items() if d not in full}
                    | (set(self.names) - set(rule.mapping)),
                    f"spread over {rule.key}: {len(full)} domain(s) already hold maxSkew "
                    "matching running pods",
                )
            names = (w.key, *self.phantoms(rule, running, skew))
            topo = None if per_node else self.topology_name(rule.key, rule.mapping, w, rule.index)
            self.out.plan.add_intent(SpreadAtMost(names, rule.field, rule.weight, skew, topo))
            return
        counts = [running.get(v, 0) for v in values] or [0]
        if max(counts) - min(counts) > skew:
            if rule.weight:
                return  # a preference: never decides feasibility, not reported
            self.approximate(
                f"{rule.field}: not checked: the running pods it counts are already spread "
                f"unevenly ({min(counts)} to {max(counts)} per domain, maxSkew {skew}); "
                "escher checks a spread from running counts within maxSkew of each other.",
                f"topology spread ({rule.field}) over unevenly spread running pods",
            )
            return
        names = (w.key, *self.phantoms(rule, running, 1 << 62))
        name = self.topology_name(rule.key, rule.mapping, w, rule.index)
        self.out.plan.add_intent(SpreadEvenly(names, rule.field, rule.weight, name, skew))
