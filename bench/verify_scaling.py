"""Pre-flight verification at scale: escher.verify vs a straightforward aggregated Z3 encoding.

Four instance families on heterogeneous clusters (CPU-only, large-memory, 8-GPU and FPGA
nodes, some already partly loaded) packed to about 95%:

  (a) feasible by construction
  (b) one GPU task more than the total GPU capacity
  (c) co-locate a-b, co-locate b-c, separate a-c
  (d) fragmentation: 3-GPU tasks on 8-GPU nodes, enough GPUs in total, no node with 3 free

Columns: escher's total seconds and its model-building part ("model s": grouping nodes into
types and tasks into classes), the baseline's Z3 model build and solve, and baseline/escher.

Sizes: 100 nodes x ~900 tasks, 1,000 x ~9,000, 10,000 x ~90,000 (`--quick`: the first only).
The baseline (integer counts per (task class, node), 0/1 variables per node only for the
constrained tasks a/b/c, one Z3 call, no pre-checks) runs in the same process with a time
limit; its model build is capped too. Prints a table with times, ratios and whether each
verdict agrees with the construction.

    python bench/verify_scaling.py [--quick] [--baseline-timeout S] [--seed N]
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections import defaultdict
from typing import Any

import z3

from escher.core.cluster import ClusterState
from escher.core.plan import Colocated, Plan, Separated
from escher.verify import Verdict, verify

NODE_TYPES: dict[str, dict[str, float]] = {
    "cpu": {"CPU": 32, "memory": 128},
    "large": {"CPU": 96, "memory": 768},
    "gpu8": {"CPU": 48, "GPU": 8, "memory": 384},
    "fpga": {"CPU": 16, "FPGA": 2, "memory": 64},
}
MIX = [("cpu", 0.5), ("large", 0.15), ("gpu8", 0.25), ("fpga", 0.10)]
# Discrete partial loads (what running tasks already hold) for ~20% of the nodes.
LOADS: dict[str, list[dict[str, float]]] = {
    "cpu": [{"CPU": 8, "memory": 32}],
    "large": [{"CPU": 32, "memory": 256}],
    "gpu8": [{"CPU": 8, "GPU": 2, "memory": 64}],
    "fpga": [{"CPU": 4, "FPGA": 1, "memory": 16}],
}
SHAPES: dict[str, dict[str, float]] = {
    "small": {"CPU": 2, "memory": 8},
    "medium": {"CPU": 4, "memory": 16},
    "bigmem": {"CPU": 8, "memory": 128},
    "gpu1": {"CPU": 4, "GPU": 1, "memory": 32},
    "gpu3": {"CPU": 4, "GPU": 3, "memory": 32},
    "fpga1": {"CPU": 4, "FPGA": 1, "memory": 16},
}
FILLERS = {
    "cpu": ["small", "medium"],
    "large": ["bigmem", "medium", "small"],
    "gpu8": ["small", "medium"],
    "fpga": ["small"],
}


def _fits(req: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(k, 0) >= v for k, v in req.items())


def _take(req: dict[str, float], free: dict[str, float]) -> None:
    for k, v in req.items():
        free[k] -= v


def make(n_nodes: int, family: str, seed: int) -> tuple[Plan, ClusterState, bool]:
    """One instance and the verdict its construction implies (True = feasible)."""
    rng = random.Random(seed)
    nodes = []
    tasks: list[str] = []
    for i in range(n_nodes):
        kind = rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
        total = dict(NODE_TYPES[kind])
        avail = dict(total)
        if rng.random() < 0.2:
            for k, v in rng.choice(LOADS[kind]).items():
                avail[k] -= v
        nodes.append(
            {"id": f"{kind}-{i:05d}", "total": total, "available": avail, "labels": {"type": kind}}
        )
        free = dict(avail)
        if kind == "gpu8":
            if family == "d":
                while free["GPU"] >= 3:
                    _take(SHAPES["gpu3"], free)
                    tasks.append("gpu3")
                if free["GPU"] >= 2:
                    _take(SHAPES["gpu1"], free)
                    tasks.append("gpu1")
            else:
                while free["GPU"] >= 1:
                    _take(SHAPES["gpu1"], free)
                    tasks.append("gpu1")
        if kind == "fpga":
            while free["FPGA"] >= 1:
                _take(SHAPES["fpga1"], free)
                tasks.append("fpga1")
        # Fill the rest to about 95% of the node's CPU.
        while free["CPU"] > 0.05 * total["CPU"]:
            options = [s for s in FILLERS[kind] if _fits(SHAPES[s], free)]
            if not options:
                break
            shape = rng.choice(options)
            _take(SHAPES[shape], free)
            tasks.append(shape)
    state = ClusterState.from_dict({"nodes": nodes})
    feasible = True
    if family == "b":
        tasks.append("gpu1")  # every GPU is taken by construction: one too many
        feasible = False
    if family == "d":
        tasks.append("gpu3")  # every GPU node has < 3 GPUs free now
        feasible = False
    # Group into jobs (PlannedTasks with a count), as ESLs and users write them.
    rng.shuffle(tasks)
    counts: dict[str, int] = defaultdict(int)
    for s in tasks:
        counts[s] += 1
    plan = Plan()
    job = 0
    for shape, n in sorted(counts.items()):
        while n:
            k = min(n, rng.randint(1, 12))
            plan.add_task(f"{shape}-{job}", SHAPES[shape], count=k, source=f"job {job}")
            job += 1
            n -= k
    if family == "c":
        # Nothing else on the cluster has room for them: take them from existing jobs' slack.
        for name in ("a", "b", "c"):
            plan.add_task(name, {"CPU": 0.1, "memory": 0.1}, source=f"service {name}")
        plan.add_intent(Colocated(("a", "b"), source="CoLocation(a, b)"))
        plan.add_intent(Colocated(("b", "c"), source="CoLocation(b, c)"))
        plan.add_intent(Separated(("a", "c"), source="AntiAffinity(a, c)"))
        feasible = False
    return plan, state, feasible


def baseline(plan: Plan, state: ClusterState, timeout: float) -> tuple[str, float, float]:
    """The straightforward aggregated encoding. Returns (verdict, build s, solve s)."""
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    ctx = z3.Context()
    s = z3.Solver(ctx=ctx)
    nodes = sorted(n for n, node in state.nodes.items() if node.alive)
    constrained = {n for i in plan.intents for n in i.tasks}
    classes: dict[Any, int] = defaultdict(int)
    for t in plan.tasks:
        if t.name not in constrained:
            classes[t.resources] += t.count
    loads: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for ci, (req, count) in enumerate(classes.items()):
        xs = []
        for j in range(len(nodes)):
            v = z3.Int(f"x{ci}_{j}", ctx)
            s.add(v >= 0)
            xs.append(v)
            for r, q in req.items():
                loads[(j, r)].append(q * v)
            if time.monotonic() > deadline:
                return ("unknown (build timeout)", time.perf_counter() - t0, 0.0)
        s.add(z3.Sum(xs) == count)
    onehot: dict[str, list[Any]] = {}
    for name in sorted(constrained):
        t = plan.task(name)
        bs = [z3.Bool(f"b_{name}_{j}", ctx) for j in range(len(nodes))]
        s.add(z3.PbEq([(b, 1) for b in bs], 1))
        onehot[name] = bs
        for j in range(len(nodes)):
            for r, q in t.resources.items():
                loads[(j, r)].append(z3.If(bs[j], z3.RealVal(q, ctx), z3.RealVal(0, ctx)))
    for intent in plan.intents:
        a = intent.tasks
        for j in range(len(nodes)):
            if isinstance(intent, Colocated):
                for x, y in itertools.pairwise(a):
                    s.add(onehot[x][j] == onehot[y][j])
            elif isinstance(intent, Separated):
                s.add(z3.PbLe([(onehot[x][j], 1) for x in a], 1))
    names = _resources(plan)
    for j, nid in enumerate(nodes):
        avail = state.nodes[nid].available
        for r in names:
            terms = loads.get((j, r))
            if terms:
                s.add(z3.Sum(terms) <= avail.get(r, 0.0))
        if time.monotonic() > deadline:
            return ("unknown (build timeout)", time.perf_counter() - t0, 0.0)
    build = time.perf_counter() - t0
    s.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
    t1 = time.perf_counter()
    res = s.check()
    solve = time.perf_counter() - t1
    verdict = (
        "feasible" if res == z3.sat else "infeasible" if res == z3.unsat else "unknown (timeout)"
    )
    return verdict, build, solve


def _resources(plan: Plan) -> list[str]:
    return sorted({r for t in plan.tasks for r in t.resources})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only 100 nodes x ~900 tasks")
    ap.add_argument("--baseline-timeout", type=float, default=30.0)
    ap.add_argument("--timeout", type=float, default=120.0, help="escher.verify's limit")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    sizes = [100] if args.quick else [100, 1000, 10000]
    print(
        f"{'size':>13} {'fam':>3} {'expect':>10} {'escher':>10} {'s':>7} {'model s':>7} "
        f"{'method':>24} "
        f"{'baseline':>24} {'build s':>8} {'solve s':>8} {'ratio':>7} agree"
    )
    all_agree = True
    for n in sizes:
        for family in "abcd":
            plan, state, feasible = make(n, family, args.seed)
            replicas = sum(t.count for t in plan.tasks)
            t0 = time.perf_counter()
            result = verify(plan, state, timeout=args.timeout, check_intents=False)
            ours = time.perf_counter() - t0
            expect = "feasible" if feasible else "infeasible"
            agree = result.status.value == expect
            if result.status is Verdict.INFEASIBLE:
                assert result.explanation is not None
            all_agree &= agree
            if n <= 1000:
                bv, bb, bs = baseline(plan, state, args.baseline_timeout)
                btot = bb + bs
                done = bv in ("feasible", "infeasible")
                ratio = f"{btot / ours:.1f}x" if done else f">{btot / ours:.0f}x"
                bagree = "" if not done else ("" if bv == expect else " (baseline disagrees!)")
            else:
                bv, bb, bs, ratio, bagree = "not run", 0.0, 0.0, "-", ""
            print(
                f"{n:>5}x{replicas:<7} {family:>3} {expect:>10} {result.status.value:>10} "
                f"{ours:7.2f} {result.stats['seconds'].get('build', 0.0):7.2f} "
                f"{result.stats['method'][:24]:>24} {bv[:24]:>24} {bb:8.2f} "
                f"{bs:8.2f} {ratio:>7} {'yes' if agree else 'NO'}{bagree}"
            )
            sys.stdout.flush()
            if family in "bcd" and result.explanation is not None and n == sizes[0]:
                print(
                    "      explanation: "
                    + "; ".join(s.text[:70] for s in result.explanation.statements[:6])
                    + (" ..." if len(result.explanation.statements) > 6 else "")
                    + f" [{len(result.explanation.statements)} statements, "
                    f"minimal={result.explanation.minimal}]"
                )
    print("all verdicts agree with the construction" if all_agree else "DISAGREEMENT")
    return 0 if all_agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
