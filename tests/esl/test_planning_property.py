"""Property: the plan a planning run records tells what the same code does when it runs.

Hypothesis draws clusters of mixed node sizes and compositions of ESLs (co-location groups
of mixed sizes AND a per-node limit shared by all of them, anti-affinity with a per-node
limit, alone or AND a node affinity or a preference, anti-affinity over zones, `FirstOf`
fallbacks between two limits, gangs). For
each, the app is planned and verified, then run on the in-memory backend over the same
cluster, following the witness of a feasible plan (`escher.esl.follow`):

* FEASIBLE: the run places every task, and no intent the verifier proved is broken;
* INFEASIBLE: the run leaves some task waiting, and ``escher.why`` on it names a conflict
  drawn from the app's own policies.

Groups of mixed sizes on nodes of mixed sizes are where first fit strands a group on a plan
proven feasible; following the witness, the run places them where the proof does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import escher
from escher import esl
from escher.explain import Verdict as WhyVerdict
from escher.verify import Verdict
from tests.support.planning import cluster, hold, plan_and_run


@dataclass(frozen=True)
class Shape:
    """One generated app."""

    cpus: tuple[int, ...]  # CPUs of each node
    kind: str  # "groups", "spread", "affinity" (spread on zone a only), "preferred"
    # (spread AND a preference for the last node), "zones" or "fallback" (FirstOf of two
    # limits, then a plain task)
    count: int  # spread tasks
    sizes: tuple[int, ...]  # members of each group
    limit: str  # "none", "anti-affinity", "load-balance"
    per_node: int
    gang: int  # gang members (0: no gang)

    def app(self) -> Callable[[], None]:
        def main() -> None:
            if self.kind == "groups":
                shared: esl.Policy | None = None
                if self.limit == "anti-affinity":
                    shared = esl.AntiAffinity(per_node=self.per_node, name="aa")
                elif self.limit == "load-balance":
                    shared = esl.LoadBalance(per_node=self.per_node, name="lb")
                colo = esl.CoLocation(name="colo")
                groups = [
                    colo.group(f"g{i}", size, {"CPU": 1}, policy=shared)
                    for i, size in enumerate(self.sizes)
                ]
                for group, size in zip(groups, self.sizes, strict=True):
                    for _ in range(size):
                        group.launch(hold)
            elif self.kind == "fallback":
                # ordered fallbacks: a tight limit, else a loose one (a cancelled attempt
                # must not shift the names of the launches after it)
                soft = esl.FirstOf(
                    esl.AntiAffinity(per_node=1, name="tight"),
                    esl.AntiAffinity(per_node=self.per_node + 1, name="loose"),
                    timeout=0.3,
                )
                for _ in range(self.count):
                    soft.launch(hold, resources={"CPU": 1})
                escher.launch(hold, resources={"CPU": 1}, name="hold")
            elif self.kind == "zones":
                zones = esl.DomainAntiAffinity("zone", per_domain=self.per_node, name="zones")
                for _ in range(self.count):
                    zones.launch(hold, resources={"CPU": 1})
            else:
                policy: esl.Policy = esl.AntiAffinity(per_node=self.per_node, name="aa")
                if self.kind == "affinity":
                    policy = esl.NodeAffinity({"zone": "a"}, name="zone-a") & policy
                elif self.kind == "preferred":
                    last = f"n{len(self.cpus) - 1}"
                    policy = policy & esl.Preferences(esl.PreferNodes(ids=[last]), name="soft")
                for _ in range(self.count):
                    policy.launch(hold, resources={"CPU": 1})
            if self.gang:
                gang = esl.Gang(name="g")
                gang.run([esl.Member(hold, resources={"CPU": 1}) for _ in range(self.gang)])

        return main


shapes = st.builds(
    Shape,
    cpus=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    kind=st.sampled_from(
        ["groups", "groups", "spread", "affinity", "preferred", "zones", "fallback"]
    ),
    count=st.integers(1, 4),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    limit=st.sampled_from(["none", "anti-affinity", "load-balance"]),
    per_node=st.integers(1, 4),
    gang=st.integers(0, 3),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(shapes)
def test_the_plan_tells_what_the_run_does(shape: Shape) -> None:
    state = cluster(len(shape.cpus), shape.cpus, labels=lambda i: {"zone": "ab"[i % 2]})
    outcome = plan_and_run(shape.app(), state, settle=1.0, ask_why=True)
    status = outcome.result.status
    assert status is not Verdict.UNKNOWN, outcome.result.render()
    if status is Verdict.FEASIBLE:
        assert outcome.all_placed, (shape, outcome.placement)
        assert outcome.violations() == [], shape
        return
    assert not outcome.all_placed, (shape, outcome.result.render())
    assert outcome.unplaced, "some task never starts"
    if not outcome.why:  # nothing waits: the backend refused it at once (no node ever fits)
        assert any("unschedulable" in s or "infeasible" in s for s in outcome.unplaced)
        return
    why = outcome.why[0]
    text = why.render()
    waits_for_gang = why.verdict is WhyVerdict.PLACEABLE and "gang" in text
    assert waits_for_gang or why.verdict in (
        WhyVerdict.WAITING,
        WhyVerdict.BLOCKED,
        WhyVerdict.NEVER,
    ), text
    # the conflict names what the app's own policies request (their labels, without the
    # per-run prefix; the CPUs of their tasks) or their sources
    own = {r.partition("-")[2] or r for t in outcome.plan.tasks for r in t.resources}
    own |= {i.source for i in outcome.plan.intents}
    assert waits_for_gang or any(name in text for name in own), text
