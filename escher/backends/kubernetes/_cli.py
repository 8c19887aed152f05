"""``escher gc``: remove the ephemeral resources (and pods) escher left on a cluster."""

from __future__ import annotations

from typing import Any

import click

from escher.core.errors import EscherError


@click.command("gc")
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
    try:
        config = resolve("kubernetes", {k: v for k, v in given.items() if v is not None})
        backend: Any = create_backend("kubernetes", config.options)
        try:
            report = collect_garbage(
                backend.api,
                backend.names,
                namespace=backend.namespace,
                node_selector=",".join(f"{k}={v}" for k, v in backend.node_selector.items())
                or None,
                labels=labels or None,
                pods=pods,
                dry_run=dry_run,
            )
        finally:
            backend.close()
    except EscherError as exc:
        raise click.ClickException(str(exc)) from None
    verb = "would remove" if dry_run else "removed"
    for node, resource in report.resources:
        click.echo(f"{verb} {resource} from node {node}")
    for pod in report.pods:
        click.echo(f"{verb} pod {pod}")
    click.echo(f"{verb} {len(report.resources)} resource(s) and {len(report.pods)} pod(s).")
