"""`escher verify PLAN_FILE` (or ``--app APP``): the command line front of
`escher.verify.verify`.

The verdict is printed as soon as it is known; the explanation and the intent proofs follow,
all within `--timeout`. Exit codes are `EXIT_CODES` (documented in the command's help).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from escher.cli.conventions import command, console, fail
from escher.core.cluster import ClusterState
from escher.core.formats import paused_gc
from escher.core.verdict import EXIT_INTENT_VIOLATED
from escher.verify import (
    DEFAULT_TIMEOUT,
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXPLAIN_SHARE,
    Grouping,
    IntentResult,
    IntentStatus,
    Verdict,
    VerificationResult,
    Verifier,
    as_written,
    load_grouped,
)

if TYPE_CHECKING:  # rich: text output only; repairs: --repairs only; manifests: for -f
    from rich.console import Console

    from escher.manifests import KubeCluster, ManifestCheck
    from escher.verify import RepairSet

try:  # the `verify` extra
    import orjson as _orjson
except ImportError:  # pragma: no cover - without the extra
    _orjson = None  # type: ignore[assignment]

_COLOR = {Verdict.FEASIBLE: "green", Verdict.INFEASIBLE: "red", Verdict.UNKNOWN: "yellow"}
_ICOLOR = {
    IntentStatus.PROVEN: "green",
    IntentStatus.VIOLATED: "red",
    IntentStatus.VACUOUS: "yellow",
    IntentStatus.UNKNOWN: "yellow",
}

#: The command's own exit codes (the shared ones, 3 bad input and more, are added).
OWN_EXIT_CODES = {
    EXIT_CODES[Verdict.FEASIBLE]: "feasible (the placement was checked independently); every "
    "intent proven or timed out",
    EXIT_CODES[Verdict.INFEASIBLE]: "infeasible (the explanation says why)",
    EXIT_CODES[Verdict.UNKNOWN]: "unknown (a limit was hit; the output says what was proven)",
    EXIT_INTENT_VIOLATED: "feasible, but a declared intent is violated (a counterexample is "
    "printed)",
}


#: With --repairs and intent proofs to follow: the repair search's share of the time left.
REPAIR_SHARE = 0.7

#: --kubeconfig given without a path: the client's default (KUBECONFIG or ~/.kube/config).
_DEFAULT_KUBECONFIG = "\0default"

#: Share of --timeout (at most 1 s) kept for printing the results and exiting.
OUTPUT_SHARE = 0.03


def _runs_as_command() -> bool:
    """True when this process was started to run escher's CLI: the ``escher`` script or
    ``python -m escher.cli`` (not another program's ``__main__``, such as pytest's)."""
    if Path(sys.argv[0]).name == "escher":
        return True
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and str(spec.name).split(".")[0] == "escher"


def _started() -> float:
    """The `time.monotonic()` at which the whole command started: when this process runs
    the command (``escher verify ...``), the process start, so --timeout also covers
    starting Python and reading the files; else (called from a longer-lived program) now."""
    now = time.monotonic()
    if not _runs_as_command():
        return now
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0 <= age < 60 else now


#: While the command runs, the cycle collector's youngest generation is collected after this
#: many new objects (Python's default is 700): a plan written one entry per task makes a few
#: objects per task in each stage (tens of thousands, nearly all kept until the end), which
#: the default would walk again and again; a long search still gets its cycles collected.
YOUNG_THRESHOLD = 100_000


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Keep what exists now (the plan and the cluster: thousands of objects for a plan written
    one entry per task, alive until the command ends) out of the cycle collector's passes
    while the block runs, and collect the young generation every `YOUNG_THRESHOLD` new
    objects. Enter it while the collector is paused (as the files are read): its first pass
    after resuming would otherwise walk every one of them. At the end, everything joins the
    oldest generation (collected with it, when Python next collects that one)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], YOUNG_THRESHOLD), *threshold[1:])
    try:
        yield
    finally:
        gc.freeze()  # what the command made joins the oldest generation too, without a pass
        gc.set_threshold(*threshold)
        gc.unfreeze()


def json_text(data: dict[str, Any]) -> str:
    """`data` as ``json.dumps(data, indent=2, sort_keys=True)`` would write it, except that
    each task of the witness (``"task": ["node", ...]``) and each statement of an
    explanation takes one line: the same document, with those written by the C encoder
    (thousands of them for a plan written one entry per task). The witness is written in one
    go: the encoder separates items with a NUL, which JSON writes escaped inside strings:
    after a list's ``]`` it ends a task's line, else it separates the nodes of one task."""
    parts = [
        f"  {json.dumps(key)}: "
        + (_witness(data[key]) if key == "witness" and data[key] else _nested(data[key], "  "))
        for key in sorted(data)
    ]
    return "{\n" + ",\n".join(parts) + "\n}" if parts else "{}"


def _witness(witness: dict[str, Any]) -> str:
    """A witness as `json_text` writes it: a line per task."""
    lines = _plain_witness_lines(witness)
    if lines is None:
        one_line = json.dumps(
            witness, sort_keys=True, check_circular=False, separators=("\0", ": ")
        )
        lines = one_line[1:-1].replace("]\0", "],\n    ").replace("\0", ", ")
    return "{\n    " + lines + "\n  }"


def _nested(value: Any, indent: str) -> str:
    """`value` as ``json.dumps(indent=2, sort_keys=True)`` writes it at `indent`, except that
    each statement of an explanation takes one line (thousands, for a plan written one
    entry per task; the C encoder writes each, not the Python one that indents)."""
    statements = value.get("statements") if isinstance(value, dict) else None
    if not statements:
        return json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n" + indent)
    inner = indent + "  "
    parts = []
    for key in sorted(value):
        if key == "statements":
            lines = f",\n{inner}  ".join(json.dumps(s, sort_keys=True) for s in statements)
            parts.append(f'{inner}"statements": [\n{inner}  {lines}\n{inner}]')
        else:
            parts.append(f"{inner}{json.dumps(key)}: {_nested(value[key], inner)}")
    return "{\n" + ",\n".join(parts) + f"\n{indent}}}"


def _plain_witness_lines(witness: dict[str, Any]) -> str | None:
    """The witness's lines as `json_text` writes them, by orjson when no name or node id
    has a character JSON escapes, nor one of ``,:[]`` (then each of those in orjson's
    compact text separates, and can be rewritten); else None."""
    if _orjson is None:
        return None
    try:
        text = _orjson.dumps(witness, option=_orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson's JSONEncodeError
        return None
    tasks, nodes = len(witness), sum(map(len, witness.values()))
    separators = (b"[", tasks), (b"]", tasks), (b":", tasks), (b",", nodes - 1)
    if not text.isascii() or b"\\" in text or any(text.count(c) != n for c, n in separators):
        return None  # orjson writes no escape but with a backslash
    body = text[1:-1].decode()
    return body.replace('"],"', '"],\n    "').replace('","', '", "').replace('":["', '": ["')


def _state(cluster: str | None, backend: str | None) -> tuple[ClusterState, str]:
    """The cluster state and a line saying where it comes from."""
    if cluster is not None:
        state = ClusterState.load(cluster)
        return state, f"cluster file {cluster}"
    from escher.api import init

    with init(backend) as live:
        state = live.get_cluster_state()
        name = live.name
    if backend is None:
        default = " (its default in-memory nodes)" if name == "memory" else ""
        click.echo(
            f"warning: no --cluster or --backend given: checked against the configured "
            f"backend {name!r}{default}. Give --cluster FILE to check against your cluster.",
            err=True,
        )
    return state, f"backend {name!r}"


def _planned(app: str, state: ClusterState) -> tuple[Grouping, tuple[str, ...]]:
    """The plan of a planning run of `app` on `state`, and the run's warnings."""
    from escher.esl import load_app, plan_app  # only --app needs the ESLs

    run = plan_app(load_app(app), state)
    return as_written(run.plan), run.warnings


def _where(state: ClusterState, origin: str) -> str:
    alive = sum(1 for n in state.nodes.values() if n.alive)
    return f"checked against {origin}: {len(state.nodes)} nodes ({alive} alive)"


class _Printer:
    """Text output, one part at a time, as the parts become known."""

    def __init__(self) -> None:
        self.console: Console = console()

    def verdict(self, result: VerificationResult, where: str) -> None:
        color = _COLOR[result.status]
        stats = result.stats
        self.console.print(
            f"[bold {color}]{result.status.value.upper()}[/]  "
            f"({stats.get('method', '')}, {stats.get('seconds', {}).get('verdict', 0):.2f} s, "
            f"{stats.get('nodes', 0)} nodes in {stats.get('node_types', 0)} types, "
            f"{stats.get('replicas', 0)} replicas)"
        )
        self.console.print(where, markup=False, highlight=False)
        if result.cause:
            label = "tightest" if result.status is Verdict.UNKNOWN else "cause"
            self.console.print(f"{label}: {result.cause}", markup=False, highlight=False)
        if result.witness is not None:
            self.witness(result.witness)

    def witness(self, witness: Any) -> None:
        from rich.table import Table  # text output only: --format json never loads rich

        table = Table(title="witness placement (checked independently)", show_lines=False)
        table.add_column("task")
        table.add_column("replicas", justify="right")
        table.add_column("nodes")
        for task in sorted(witness)[:30]:
            nodes = witness[task]
            shown = sorted(set(nodes))
            text = ", ".join(shown[:6]) + (f" (+{len(shown) - 6})" if len(shown) > 6 else "")
            table.add_row(task, str(len(nodes)), text)
        if len(witness) > 30:
            table.add_row("...", "", f"{len(witness) - 30} more tasks")
        self.console.print(table)

    def rest(self, result: VerificationResult) -> None:
        if result.explanation is not None:
            self.console.print(result.explanation.render(), markup=False, highlight=False)
        for item in result.proven:
            self.console.print(f"proven: {item}", markup=False, highlight=False)
        if result.decide_by:
            self.console.print(f"to decide it: {result.decide_by}", markup=False, highlight=False)
        for pref in result.preferences:
            self.console.print(f"preference: {pref}", markup=False, highlight=False)
        for w in result.warnings:
            self.console.print(f"[yellow]warning:[/] {w}")

    def repairs(self, found: RepairSet) -> None:
        self.console.print(found.render(), markup=False, highlight=False)

    def intent(self, r: IntentResult) -> None:
        line = f"intent {r.intent.describe()}: [{_ICOLOR[r.status]}]{r.status.value}[/]"
        self.console.print(line + (f" - {r.detail}" if r.detail else ""), highlight=False)


def _repairs(
    run: Verifier,
    result: VerificationResult,
    deadline: float,
    adjustable: tuple[str, ...],
    proofs: bool,
) -> RepairSet | None:
    """The repairs of an infeasible verdict within the time left (`REPAIR_SHARE` of it when
    intent proofs follow); None when the plan is not infeasible."""
    unknown = sorted(set(adjustable) - {"*"} - {t.name for t in run.plan.tasks})
    if unknown:
        fail(f"--adjustable: no task named {unknown} in the plan.", EXIT_BAD_INPUT)
    if result.status is not Verdict.INFEASIBLE:
        return None
    from escher.verify import find_repairs  # --repairs only: its search loads when used

    left = deadline - time.monotonic()
    return find_repairs(
        run.plan,
        run.state,
        result,
        timeout=max(left * (REPAIR_SHARE if proofs else 1.0), 1e-3),
        adjustable_requests=True if "*" in adjustable else adjustable,
    )


def _check_common(
    cluster: str | None,
    backend: str | None,
    timeout: float,
    repairs: bool,
    adjustable: tuple[str, ...],
) -> None:
    """Refuse options that do not go together, before any work (exit 3)."""
    if adjustable and not repairs:
        fail("--adjustable only applies with --repairs.", EXIT_BAD_INPUT)
    if cluster is not None and backend is not None:
        fail("give --cluster or --backend, not both.", EXIT_BAD_INPUT)
    if not 0 < timeout < float("inf"):
        fail(f"--timeout must be a positive number of seconds, got {timeout}.", EXIT_BAD_INPUT)


@command(
    "verify",
    examples=[
        "escher verify plan.json --cluster cluster.json",
        "escher state --format json > cluster.json   # a cluster file of the live backend",
        "escher verify plan.json --cluster cluster.json --format json",
        "escher verify plan.json --backend ray --timeout 10 --no-intents",
        "escher verify --app app.py:main --cluster cluster.json",
        "escher verify plan.json --cluster cluster.json --repairs --adjustable '*'",
        "escher verify -f manifests.yaml --cluster nodes-and-pods.json   # Kubernetes manifests",
        "escher verify -f manifests.yaml --kubeconfig --emit-placement pinned/",
    ],
    exit_codes=OWN_EXIT_CODES,
)
@click.argument("plan_file", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--app",
    "app",
    default=None,
    metavar="APP",
    help="Plan this app (path/to/file.py:function or package.module:function) and verify "
    "its plan, instead of a plan file.",
)
@click.option(
    "-f",
    "--filename",
    "filenames",
    type=click.Path(),
    multiple=True,
    help="Kubernetes manifests to check instead of a plan: a YAML/JSON file or a folder "
    "(repeatable), as for kubectl apply -f.",
)
@click.option(
    "--cluster",
    "cluster",
    type=click.Path(dir_okay=False),
    default=None,
    help="A cluster file (JSON, see docs/file-formats.md); with -f, what "
    "`kubectl get nodes,pods -A -o json` (or -o yaml) writes.",
)
@click.option(
    "--kubeconfig",
    "kubeconfig",
    is_flag=False,
    flag_value=_DEFAULT_KUBECONFIG,
    default=None,
    metavar="[PATH]",
    help="With -f: read nodes and pods from this cluster (read only; no PATH: the default "
    "kubeconfig).",
)
@click.option("--context", "context", default=None, metavar="NAME", help="With --kubeconfig.")
@click.option(
    "--emit-placement",
    "emit_dir",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="With -f and a feasible verdict: write the manifests pinned to the proven "
    "placement (node affinity) into DIR, with the order to apply them.",
)
@click.option(
    "--backend",
    "backend",
    default=None,
    metavar="NAME",
    help="Take the cluster state from this backend (default: the configured one).",
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    help="Seconds for the whole run (verdict, explanation, repairs, intent proofs).",
)
@click.option("--no-intents", is_flag=True, help="Skip the intent proofs.")
@click.option(
    "--repairs",
    is_flag=True,
    help="When infeasible: the cheapest changes of each kind that make it fit (docs/repairs.md).",
)
@click.option(
    "--adjustable",
    "adjustable",
    multiple=True,
    metavar="TASK",
    help="With --repairs: this task's request may shrink (repeat it; '*' for every task).",
)
def verify(
    plan_file: str | None,
    app: str | None,
    filenames: tuple[str, ...],
    cluster: str | None,
    kubeconfig: str | None,
    context: str | None,
    emit_dir: str | None,
    backend: str | None,
    fmt: str,
    timeout: float,
    no_intents: bool,
    repairs: bool,
    adjustable: tuple[str, ...],
) -> None:
    """Prove a plan feasible on a cluster before launch, or explain why not.

    The verdict comes first (with a checked placement, or the cause in one line and the
    smallest set of your own statements that conflict); then each declared intent is
    reported proven, violated (with a counterexample) or timed out. With --repairs, an
    infeasible plan also gets the cheapest changes of each kind that make it fit (fewer
    replicas, a relaxed or dropped intent, more nodes, a grown node, a smaller request of a
    task given with --adjustable), each proven by a checked placement. With -f, checks
    Kubernetes manifests against a cluster's nodes and pods (docs/kubernetes-preflight.md).
    --timeout bounds the whole run.
    """
    start = _started()
    _check_common(cluster, backend, timeout, repairs, adjustable)
    if filenames or (plan_file is None and app is None):
        _check_manifest_options(plan_file, app, filenames, cluster, kubeconfig, backend)
        deadline = start + timeout - min(OUTPUT_SHARE * timeout, 1.0)
        given = _Manifests(filenames, cluster, kubeconfig, context)
        _verify_manifests(given, emit_dir, fmt, deadline, repairs, adjustable)
    if kubeconfig is not None or context is not None or emit_dir is not None:
        fail("--kubeconfig, --context and --emit-placement go with -f MANIFESTS.", EXIT_BAD_INPUT)
    with contextlib.ExitStack() as frozen:
        with paused_gc():
            plan, state, origin, notes = _load(plan_file, app, cluster, backend)
            frozen.enter_context(_frozen_heap())
        # The search below may make cycles: the collector runs, on new objects.
        deadline = start + timeout - min(OUTPUT_SHARE * timeout, 1.0)
        run = Verifier._grouped(plan, state, deadline, None)
        verdict = run.verdict()
        printer = None if fmt == "json" else _Printer()
        where = _where(state, origin)
        if printer is not None:
            for note in notes:
                printer.console.print(f"[yellow]warning:[/] {note}", highlight=False)
            printer.verdict(verdict, where)
        proofs = not no_intents and any(not i.preferred for i in plan.plan.intents)
        # The verdict and its cause are already printed: shrinking is polish, kept short.
        result = run.explain(EXPLAIN_SHARE if proofs else 1.0, capped=True)
        if printer is not None:
            printer.rest(result)
        found = _repairs(run, result, deadline, adjustable, proofs) if repairs else None
        if found is not None and printer is not None:
            printer.repairs(found)
        if not no_intents:
            for r in run.intents():
                if printer is not None:
                    printer.intent(r)
        result = run.result()
        if found is not None:
            from escher.verify import with_repairs

            result = with_repairs(result, found)
        if printer is None:
            data: dict[str, Any] = result.to_dict()
            data["cluster"] = where
            data["warnings"] = [*notes, *data["warnings"]]
            click.echo(json_text(data))
    sys.exit(result.exit_code)


def _load(
    plan_file: str | None, app: str | None, cluster: str | None, backend: str | None
) -> tuple[Grouping, ClusterState, str, tuple[str, ...]]:
    """The plan (read from its file, or planned from the app), the cluster state, where the
    state came from, and the planning run's warnings."""
    if plan_file is not None and app is not None:
        fail("give a PLAN_FILE or --app APP, not both.", EXIT_BAD_INPUT)
    if app is not None:
        state, origin = _state(cluster, backend)
        plan, notes = _planned(app, state)
        return plan, state, origin, notes
    assert plan_file is not None
    plan = load_grouped(plan_file)
    state, origin = _state(cluster, backend)
    return plan, state, origin, ()


def _check_manifest_options(
    plan_file: str | None,
    app: str | None,
    filenames: tuple[str, ...],
    cluster: str | None,
    kubeconfig: str | None,
    backend: str | None,
) -> None:
    """Exit with a clear message unless the options name manifests and one cluster."""
    if not filenames:
        fail("give a PLAN_FILE, --app APP, or Kubernetes manifests with -f PATH.", EXIT_BAD_INPUT)
    for name in filenames:
        if not Path(name).exists():
            fail(f"-f {name!r}: no such file or folder; give manifest files or folders.")
    if plan_file is not None or app is not None:
        fail("give a PLAN_FILE, --app APP or -f manifests, not both.", EXIT_BAD_INPUT)
    if backend is not None:
        fail("-f checks against --cluster FILE or --kubeconfig, not --backend.", EXIT_BAD_INPUT)
    if (cluster is None) == (kubeconfig is None):
        fail(
            "with -f, give the cluster: --cluster FILE (`kubectl get nodes,pods -A -o json "
            "> FILE`) or --kubeconfig [PATH] to read it live; one of them.",
            EXIT_BAD_INPUT,
        )


@dataclasses.dataclass(frozen=True)
class _Manifests:
    """What `escher verify -f` checks: the manifests, and the cluster file or live cluster."""

    filenames: tuple[str, ...]
    cluster: str | None
    kubeconfig: str | None
    context: str | None


def _verify_manifests(
    given: _Manifests,
    emit_dir: str | None,
    fmt: str,
    deadline: float,
    repairs: bool,
    adjustable: tuple[str, ...],
) -> NoReturn:
    """`escher verify -f`: the manifests against the cluster's nodes and pods."""
    from escher.manifests import (  # the layer above verify: loaded only for -f
        check_manifests,
        emit_placement,
        load_manifests,
        manifest_repairs,
    )

    workloads = load_manifests(given.filenames)
    kube, origin = _read_kube(given)
    unknown = sorted(set(adjustable) - {"*"} - {w.key for w in workloads.items})
    if unknown:
        fail(f"--adjustable: no workload named {unknown} in the manifests.", EXIT_BAD_INPUT)
    left = deadline - time.monotonic()
    if left <= 0:
        fail("--timeout passed while reading the manifests and the cluster.", 2)
    result = check_manifests(workloads, kube, timeout=left * (0.5 if repairs else 1.0))
    found = None
    if repairs and result.status is Verdict.INFEASIBLE:
        allowed = True if "*" in adjustable else adjustable
        left = max(deadline - time.monotonic(), 1e-3)
        found = manifest_repairs(workloads, kube, result, timeout=left, adjustable=allowed)
        from escher.verify import with_repairs

        result = with_repairs(result, found)
    written = []
    if emit_dir is not None and result.witness is not None:
        written = emit_placement(workloads, result.witness, emit_dir)
    pods = len(kube.pods)
    where = f"checked against {origin}: {len(kube.nodes)} nodes, {pods} running pods"
    if fmt == "json":
        data: dict[str, Any] = result.to_dict()
        data["cluster"] = where
        data["emitted"] = [str(p) for p in written]
        click.echo(json_text(data))
    else:
        _print_manifest_check(result, where, found, emit_dir, written)
    sys.exit(result.exit_code)


def _read_kube(given: _Manifests) -> tuple[KubeCluster, str]:
    """The cluster `escher verify -f` checks against, and where it came from."""
    from escher.manifests import load_cluster, read_cluster

    if given.cluster is not None:
        return load_cluster(given.cluster), f"cluster listing {given.cluster}"
    path = None if given.kubeconfig == _DEFAULT_KUBECONFIG else given.kubeconfig
    shown = f"{path or 'default kubeconfig'}{', ' + given.context if given.context else ''}"
    return read_cluster(path, given.context), f"live cluster ({shown})"


def _print_manifest_check(
    result: ManifestCheck,
    where: str,
    found: RepairSet | None,
    emit_dir: str | None,
    written: list[Path],
) -> None:
    """The text output of `escher verify -f`."""
    printer = _Printer()
    printer.verdict(result, where)
    printer.rest(result)
    if found is not None:
        printer.repairs(found)
    for line in result.breakdown:
        printer.console.print(line, markup=False, highlight=False)
    for item in result.skipped:
        printer.console.print(f"[yellow]warning:[/] not checked (kind not supported): {item}")
    for item in result.approximations:
        printer.console.print(f"approximation: {item}", markup=False, highlight=False)
    if not result.exact and result.status is not Verdict.UNKNOWN:
        printer.console.print("note: not proven under kube-scheduler's exact rules")
    if emit_dir is not None:
        if written:
            printer.console.print(
                f"placement written: {len(written)} pinned manifest(s) in {emit_dir} "
                "(apply in the order of apply-order.txt)",
                markup=False,
                highlight=False,
            )
        else:
            printer.console.print("no placement written: the verdict is not feasible.")
