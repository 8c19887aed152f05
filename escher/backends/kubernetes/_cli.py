"""``escher gc``: remove the ephemeral resources (and pods) escher left on a cluster."""

from __future__ import annotations

from typing import Any

import click

from escher.cli.conventions import command, emit


@command(
    "gc",
    examples=[
        "escher gc --dry-run                 # what would be removed",
        "escher gc --context prod --pods     # also delete escher's pods",
        "escher gc --label grp --format json",
    ],
)
@click.option("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG).")
@click.option("--context", default=None, help="kubeconfig context.")
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@click.option("--namespace", default=None, help="Namespace of escher's pods (with --pods).")
@click.option("--domain", default=None, help="Resource domain (default: escher.io).")
@click.option("--label", "labels", multiple=True, help="Only this label (repeatable).")
@click.option("--pods", is_flag=True, help="Also delete pods escher created.")
@click.option("--dry-run", is_flag=True, help="Show what would be removed; change nothing.")
def gc(
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    namespace: str | None,
    domain: str | None,
    labels: tuple[str, ...],
    pods: bool,
    dry_run: bool,
    fmt: str,
) -> None:
    """Remove escher's leftover ephemeral resources from Kubernetes nodes.

    Only resources escher created (marked by a node annotation) are removed; extended
    resources of anyone else, even under escher's domain, are never touched. Run it when no
    escher application is using the cluster: it removes the live ones too.
    """
    from escher._config import resolve
    from escher.backends._registry import create_backend
    from escher.backends.kubernetes._gc import collect_garbage

    given: dict[str, Any] = {
        "kubeconfig": kubeconfig,
        "context": context,
        "in_cluster": in_cluster or None,
        "namespace": namespace,
        "domain": domain,
    }
    config = resolve("kubernetes", {k: v for k, v in given.items() if v is not None})
    backend: Any = create_backend("kubernetes", config.options, config.origins)
    try:
        report = collect_garbage(
            backend.api,
            backend.names,
            namespace=backend.namespace,
            node_selector=",".join(f"{k}={v}" for k, v in backend.node_selector.items()) or None,
            labels=labels or None,
            pods=pods,
            dry_run=dry_run,
        )
    finally:
        backend.close()
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} {resource} from node {node}" for node, resource in report.resources]
    lines += [f"{verb} pod {pod}" for pod in report.pods]
    lines.append(f"{verb} {len(report.resources)} resource(s) and {len(report.pods)} pod(s).")
    data = {
        "dry_run": dry_run,
        "resources": [{"node": node, "resource": res} for node, res in report.resources],
        "pods": list(report.pods),
    }
    emit(data, fmt, lambda console: console.print("\n".join(lines), markup=False))
