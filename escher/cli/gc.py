"""``escher gc``: remove what dead escher sessions left on a shared cluster.

One command for every backend: it builds the configured backend and calls its
`Backend.collect_garbage`. Options that only some backends understand (``--label``,
``--all-sessions``) are passed when the backend's `collect_garbage` takes them, and refused
otherwise; the Kubernetes connection options pick the Kubernetes backend by themselves.
"""

from __future__ import annotations

import inspect
from typing import Any

import click

from escher.backends.base import Backend, GarbageReport
from escher.cli.conventions import backend_option, command, emit, fail

#: Command-line options that configure the Kubernetes backend (option -> constructor keyword).
KUBERNETES_OPTIONS = ("kubeconfig", "context", "in_cluster", "namespace", "domain")


def _backend(backend_name: str | None, connection: dict[str, Any]) -> Backend:
    from escher.backends import canonical_name, create_backend
    from escher.config import resolve

    given = {k: v for k, v in connection.items() if v not in (None, False)}
    name = backend_name or ("kubernetes" if given else None)
    if given and canonical_name(name or "") != "kubernetes":
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(given))
        fail(f"{flags} configure the kubernetes backend; drop them or use --backend kubernetes.")
    config = resolve(name, given)
    return create_backend(config.backend, config.options, config.origins)


def _extras(backend: Backend, wanted: dict[str, Any]) -> dict[str, Any]:
    """The backend-specific keywords of `collect_garbage` that were asked for."""
    asked = {k: v for k, v in wanted.items() if v}
    accepted = inspect.signature(backend.collect_garbage).parameters
    refused = [k for k in asked if k not in accepted]
    if refused:
        flags = ", ".join("--" + {"everything": "all-sessions"}.get(k, k) for k in refused)
        fail(f"the {backend.name} backend's garbage collection does not take {flags}.")
    return asked


def _text(report: GarbageReport, backend: Backend) -> str:
    verb = "would remove" if report.dry_run else "removed"
    lines = [f"{verb} {item}" for item in report.removed]
    lines += [f"kept {item}" for item in report.kept]
    lines.append(
        f"{backend.name}: {verb} {len(report.removed)} item(s) of dead sessions; "
        f"kept {len(report.kept)} of live ones."
    )
    return "\n".join(lines)


@command(
    "gc",
    examples=[
        "escher gc --dry-run                        # what would be removed",
        "escher gc --backend kubernetes --context prod",
        "escher gc --kubeconfig ~/.kube/config --label grp --format json",
        "escher gc --backend kubernetes --all-sessions   # also live sessions' (cluster idle)",
    ],
)
@backend_option
@click.option("--dry-run", is_flag=True, help="Show what would be removed; change nothing.")
@click.option("--label", "labels", multiple=True, help="Only this label (repeatable).")
@click.option(
    "--all-sessions",
    "everything",
    is_flag=True,
    help="Also remove what live sessions use: only when no escher application runs.",
)
@click.option("--kubeconfig", default=None, help="Kubernetes: kubeconfig file.")
@click.option("--context", default=None, help="Kubernetes: kubeconfig context.")
@click.option("--in-cluster", is_flag=True, help="Kubernetes: use the pod's service account.")
@click.option("--namespace", default=None, help="Kubernetes: namespace of pods and leases.")
@click.option("--domain", default=None, help="Kubernetes: resource domain (default escher.io).")
@click.option(
    "--pods", is_flag=True, hidden=True, help="Kept for old scripts: pods are always collected."
)
def gc(
    backend_name: str | None,
    dry_run: bool,
    labels: tuple[str, ...],
    everything: bool,
    pods: bool,
    fmt: str,
    **connection: Any,
) -> None:
    """Remove what dead sessions left on a shared cluster (labels, pods, leases).

    Every escher session marks what it creates with its session id and keeps a lease alive
    while it runs; this removes exactly what sessions whose lease expired left, never what a
    live session uses (unless --all-sessions). Resources and pods escher did not create are
    never touched.
    """
    backend = _backend(backend_name, connection)
    try:
        extras = _extras(backend, {"labels": labels or None, "everything": everything})
        report = backend.collect_garbage(dry_run=dry_run, **extras)
    finally:
        backend.close()
    data = {
        "backend": backend.name,
        "dry_run": report.dry_run,
        "removed": list(report.removed),
        "kept": list(report.kept),
    }
    text = _text(report, backend)
    emit(data, fmt, lambda console: console.print(text, markup=False, highlight=False))
