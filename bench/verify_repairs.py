"""Repairs for the infeasible families of bench/verify_scaling.py, against plain verification.

For each instance (families b: one GPU task too many, c: co-locate x-y, y-z and separate x-z,
d: fragmentation; "-u": the plan written one entry per task), in one run: the seconds of
`verify(plan, state)` (the baseline: the verdict, the explanation, the intent proofs), then
the seconds of `find_repairs(plan, state, result)` within its default time budget, their
ratio, the process CPU seconds of the repair search, and the repairs found (cheapest first)
with what was proven.

    python bench/verify_repairs.py [--sizes 100,1000] [--only b,c,d,b-u,d-u] [--seed N]
        [--timeout S]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify_scaling import family

from escher.core.cluster import ClusterState
from escher.verify import Verdict, apply_repair, check_placement, find_repairs, verify
from escher.verify.repair import DEFAULT_REPAIR_TIMEOUT


def run(name: str, n_nodes: int, seed: int, timeout: float) -> dict[str, object]:
    fam, _, written = name.partition("-")
    plan, doc, _ = family(n_nodes, fam, seed, grouped=not written)
    state = ClusterState.from_dict(doc)
    t0 = time.perf_counter()
    result = verify(plan, state)
    plain = time.perf_counter() - t0
    assert result.status is Verdict.INFEASIBLE, result.render()
    c0, t1 = time.process_time(), time.perf_counter()
    found = find_repairs(plan, state, result, timeout=timeout)
    seconds, cpu = time.perf_counter() - t1, time.process_time() - c0
    for repair in found.repairs:  # each repair again through the independent checker
        fixed_plan, fixed_state = apply_repair(plan, state, repair)
        assert check_placement(fixed_plan, fixed_state, repair.witness) == [], repair.render()
    return {
        "name": name,
        "nodes": n_nodes,
        "verify": plain,
        "repairs": seconds,
        "cpu": cpu,
        "found": found,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--only", default="b,c,d,b-u,d-u")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=DEFAULT_REPAIR_TIMEOUT)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.only.split(",")
    print(f"repairs within {args.timeout:g} s (find_repairs' default: {DEFAULT_REPAIR_TIMEOUT:g})")
    head = f"{'family':<7}{'nodes':>6}{'verify s':>10}{'repairs s':>11}{'ratio':>8}{'cpu s':>8}"
    print(head + "  repairs (cheapest first; * = proven cheapest of its kind)")
    rows = []
    for n_nodes in sizes:
        for name in names:
            row = run(name, n_nodes, args.seed, args.timeout)
            rows.append(row)
            found = row["found"]
            shown = "; ".join(
                f"{r.kind} {r.cost:g}{'*' if r.cheapest else ''}"
                for r in found.repairs  # type: ignore[attr-defined]
            )
            ratio = row["repairs"] / max(row["verify"], 1e-9)  # type: ignore[operator]
            print(
                f"{name:<7}{n_nodes:>6}{row['verify']:>10.3f}{row['repairs']:>11.3f}"
                f"{ratio:>8.1f}{row['cpu']:>8.2f}  {shown or 'none'}",
                flush=True,
            )
    print()
    for row in rows:
        print(f"{row['name']} at {row['nodes']} nodes:")
        print("  " + row["found"].render().replace("\n", "\n  "))  # type: ignore[attr-defined]
    slowest = max(float(r["repairs"]) for r in rows)  # type: ignore[arg-type]
    print(f"\nslowest repair search: {slowest:.2f} s (budget {args.timeout:g} s)")


if __name__ == "__main__":
    main()
