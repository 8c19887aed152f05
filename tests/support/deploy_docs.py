"""The manifests of the deploy section of docs/kubernetes.md, as the page shows them.

Each manifest on the page is a ```yaml block titled with the file it is shipped as, e.g.
```` ```yaml title="deploy/kubernetes/rbac.yaml" ````. Tests apply the blocks of the page
(not the files), so what a reader copies is what was tested; another test checks that the
files hold the same text.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "kubernetes.md"
_BLOCK = re.compile(r'^```yaml title="deploy/kubernetes/([^"]+)"\n(.*?)^```', re.S | re.M)


@cache
def page_blocks() -> dict[str, str]:
    """``{file name: block text}`` of every titled manifest on the page."""
    return {name: text for name, text in _BLOCK.findall(PAGE.read_text())}


def deploy_manifests(*names: str) -> list[dict[str, Any]]:
    """The Kubernetes objects of the page's blocks `names` (in order), parsed."""
    import yaml

    blocks = page_blocks()
    missing = [n for n in names if n not in blocks]
    if missing:
        raise LookupError(f"docs/kubernetes.md has no manifest block {missing}: {sorted(blocks)}")
    docs: list[dict[str, Any]] = []
    for name in names:
        docs += [d for d in yaml.safe_load_all(blocks[name]) if d]
    return docs


def _service_account() -> tuple[str, str]:
    for doc in deploy_manifests("namespace.yaml"):
        if doc["kind"] == "ServiceAccount":
            return doc["metadata"]["namespace"], doc["metadata"]["name"]
    raise LookupError("the namespace.yaml block of docs/kubernetes.md has no ServiceAccount")


#: escher's namespace and ServiceAccount, as the deploy section creates them.
ESCHER_NAMESPACE, ESCHER_ACCOUNT = _service_account()
