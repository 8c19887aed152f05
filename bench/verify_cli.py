"""`escher verify PLAN --cluster C --format json` as a user runs it: a fresh process each time,
start-up included, on the engine table's families (bench/verify_scaling.py) and other seeds.

With `--intents`, also family `a` (feasible, with AntiAffinity and CoLocation intents to
prove) written the ways a user would: a hand-written plan file with replicas (`a`), one entry
per task (`a-u`), and the same policies declared through the ESLs in an app's code, planned
by `escher plan APP -o plan.json` and verified from that file (`a-esl`) or in one step with
`escher verify --app APP` (`a-app`, which runs the app's planning too).

Bytecode is cached (in a temporary `PYTHONPYCACHEPREFIX`, warmed up before timing) as an
installed package has it, even where PYTHONDONTWRITEBYTECODE is set: compiling escher's
sources on every run would add ~0.1-0.25 s of CPU that no user pays. `--no-bytecode-cache`
measures that way anyway.

Prints, per family and seed: the verdict against the construction, the command's wall time
and its CPU time (user + system of the child), and the target. ``python -c pass`` and
`escher --help` are timed in the same run as the baselines of start-up (the machine is
shared: quote ratios to them).

    python bench/verify_cli.py [--seeds 7,8,9] [--only FAMILIES] [--max-nodes N] [--big]
        [--timeout S] [--intents] [--no-bytecode-cache]
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


#: The environment of every timed command (`main` sets the bytecode cache).
ENV = os.environ.copy()


def _timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, wall, cpu


def _target(fam: str, n: int) -> float:
    return 5.0 if fam in TASK_FAMILIES else TARGETS.get(n, 5.0)


#: Family a declared through the ESLs: the bulk tasks by shape as jobs of replicas, then per
#: 50 nodes one AntiAffinity of 3 replicas and one CoLocation group of 3 (as `vs.family`).
APP = """import escher
from escher import esl

JOBS = {jobs!r}
GROUPS = {groups}


def work(i=0):
    return i


def main():
    refs = []
    for resources, count in JOBS:
        refs += [escher.launch(work, i, resources=resources) for i in range(count)]
    for g in range(GROUPS):
        anti = esl.AntiAffinity(name=f"anti-{{g}}")
        refs += [anti.launch(work, i, resources={tiny!r}) for i in range(3)]
        group = esl.CoLocation(name=f"grp-{{g}}").group(f"grp-{{g}}", 3, {tiny!r})
        refs += [group.launch(work, i) for i in range(3)]
    return escher.get(refs)
"""


def _app(n: int, seed: int, folder: Path) -> tuple[Path, Any]:
    """Family a at `n` nodes as an app file (ESLs in code) and its cluster document."""
    plan, cluster, _ = vs.family(n, "a", seed)
    jobs = [
        (dict(t.resources), t.count)
        for t in plan.tasks
        if not t.source.startswith(("Anti", "CoLoc"))
    ]
    path = folder / f"app_{n}_{seed}.py"
    path.write_text(APP.format(jobs=jobs, groups=max(1, n // 50), tiny=vs.TINY))
    return path, cluster


def _intent_rows(seed: int, max_nodes: int, tmp: str) -> list[tuple[str, int, list[str]]]:
    """(family, nodes, command) for family a written four ways (see the module's doc)."""
    rows: list[tuple[str, int, list[str]]] = []
    for n in (100, 1000):
        if n > max_nodes:
            continue
        for fam, grouped in (("a", True), ("a-u", False)):
            plan, cluster, _ = vs.family(n, "a", seed, grouped=grouped)
            pf, cf = Path(tmp, f"{fam}-{n}.json"), Path(tmp, f"{fam}-{n}-cluster.json")
            pf.write_text(json.dumps(plan.to_dict()))
            cf.write_text(json.dumps(cluster))
            rows.append((fam, n, ["verify", str(pf), "--cluster", str(cf)]))
        app, cluster = _app(n, seed, Path(tmp))
        cf = Path(tmp, f"app-{n}-cluster.json")
        cf.write_text(json.dumps(cluster))
        planned = Path(tmp, f"a-esl-{n}.json")
        made = subprocess.run(
            [*_escher(), "plan", f"{app}:main", "--cluster", str(cf), "-o", str(planned)],
            capture_output=True,
            text=True,
            check=False,
            env=ENV,
            cwd=tmp,
            timeout=600,
        )
        if made.returncode == 0:
            rows.append(("a-esl", n, ["verify", str(planned), "--cluster", str(cf)]))
        else:
            print(f"a-esl {n}: escher plan failed: {made.stderr.strip()[-300:]}")
        rows.append(("a-app", n, ["verify", "--app", f"{app}:main", "--cluster", str(cf)]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--seeds", default="7,8,9")
    ap.add_argument("--only", default="")
    ap.add_argument("--max-nodes", type=int, default=10**9)
    ap.add_argument("--big", action="store_true", help="10,000-node rows too")
    ap.add_argument("--timeout", type=float, default=60.0, help="escher verify --timeout")
    ap.add_argument("--intents", action="store_true", help="family a written four ways too")
    ap.add_argument(
        "--no-bytecode-cache", action="store_true", help="compile the sources on every run"
    )
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    cache = tempfile.TemporaryDirectory()
    if not args.no_bytecode_cache:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        ENV["PYTHONPYCACHEPREFIX"] = cache.name
        _timed([*_escher(), "--help"])  # warm: escher's modules compiled once
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
        if args.intents:
            ok &= _run_intent_rows(args, tmp)
    print("all verdicts agree with the construction" if ok else "DISAGREEMENT or UNKNOWN")
    return 0 if ok else 1


def _run_intent_rows(args: argparse.Namespace, tmp: str) -> bool:
    """Family a four ways: feasible, every intent proven."""
    ok = True
    for seed in [int(x) for x in args.seeds.split(",")]:
        for fam, n, cmd in _intent_rows(seed, args.max_nodes, tmp):
            full = [*_escher(), *cmd, "--format", "json", "--timeout", str(args.timeout)]
            out, wall, cpu = _timed(full)
            data: dict[str, Any] = json.loads(out.stdout) if out.stdout.strip() else {}
            got = data.get("status", f"exit {out.returncode}")
            intents = [i.get("status") for i in data.get("intents", [])]
            proven = bool(intents) and all(x == "proven" for x in intents)
            ok &= got == "feasible" and proven
            method = data.get("stats", {}).get("method", "")
            print(
                f"{fam:>8} {n:>6} {seed:>4} {'feasible':>10} {got:>10} {wall:7.2f} "
                f"{cpu:6.2f} {_target(fam, n):6.1f}  {method}; "
                f"{intents.count('proven')}/{len(intents)} intents proven"
            )
            sys.stdout.flush()
    return ok


if __name__ == "__main__":
    raise SystemExit(main())
