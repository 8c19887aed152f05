"""`escher verify PLAN --cluster C --format json` as a user runs it: a fresh process each time,
start-up included, on the engine table's families (bench/verify_scaling.py) and other seeds.

Prints, per family and seed: the verdict against the construction, the command's wall time
and its CPU time (user + system of the child), and the target. ``python -c pass`` and
`escher --help` are timed in the same run as the baselines of start-up (the machine is
shared: quote ratios to them).

    python bench/verify_cli.py [--seeds 7,8,9] [--only FAMILIES] [--max-nodes N] [--big]
        [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import verify_scaling as vs

#: Target wall seconds by nodes; zero-slack, tight and colouring instances: 5 s.
TARGETS = {100: 0.5, 1000: 5.0, 10000: 30.0}
TASK_FAMILIES = {
    "t",
    "t-short",
    "p",
    "p2",
    "col",
    "col-k",
    "col-s",
    "col-l",
    "col2",
    "col2-k",
    "col2-l",
}


def _escher() -> list[str]:
    beside = Path(sys.executable).with_name("escher")
    return [str(beside)] if beside.exists() else ["escher"]


def _timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ.copy())
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, wall, cpu


def _target(fam: str, n: int) -> float:
    return 5.0 if fam in TASK_FAMILIES else TARGETS.get(n, 5.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--only", default="")
    ap.add_argument("--max-nodes", type=int, default=10**9)
    ap.add_argument("--big", action="store_true", help="10,000-node rows too")
    ap.add_argument("--timeout", type=float, default=60.0, help="escher verify --timeout")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    bare = [_timed([sys.executable, "-c", "pass"]) for _ in range(3)]
    bare_wall = statistics.median(w for _, w, _ in bare)
    bare_cpu = statistics.median(c for _, _, c in bare)
    print(f"baseline: python -c pass {bare_wall:.2f} s wall, {bare_cpu:.2f} s CPU (median of 3)")
    helps = [_timed([*_escher(), "--help"]) for _ in range(3)]
    help_wall = statistics.median(w for _, w, _ in helps)
    help_cpu = statistics.median(c for _, _, c in helps)
    print(f"baseline: escher --help {help_wall:.2f} s wall, {help_cpu:.2f} s CPU (median of 3)")
    print(
        f"{'family':>8} {'nodes':>6} {'seed':>4} {'expect':>10} {'got':>10} {'wall s':>7} "
        f"{'cpu s':>6} {'target':>6}  method"
    )
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(x) for x in args.seeds.split(",")]:
            for fam, n, make in vs.engine_instances(seed, args.big):
                if (only and fam not in only) or n > args.max_nodes:
                    continue
                plan, cluster, feasible = make()
                pf, cf = Path(tmp, "plan.json"), Path(tmp, "cluster.json")
                pf.write_text(json.dumps(plan.to_dict()))
                cf.write_text(json.dumps(cluster))
                cmd = [*_escher(), "verify", str(pf), "--cluster", str(cf), "--format", "json"]
                out, wall, cpu = _timed([*cmd, "--timeout", str(args.timeout)])
                data: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
                got = data.get("status", f"exit {out.returncode}")
                expect = "feasible" if feasible else "infeasible"
                ok &= got == expect
                method = data.get("stats", {}).get("method", "")
                print(
                    f"{fam:>8} {n:>6} {seed:>4} {expect:>10} {got:>10} {wall:7.2f} "
                    f"{cpu:6.2f} {_target(fam, n):6.1f}  {method}"
                )
                sys.stdout.flush()
    print("all verdicts agree with the construction" if ok else "DISAGREEMENT or UNKNOWN")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
