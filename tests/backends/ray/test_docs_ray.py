"""docs/ray.md, run on the local Ray cluster: its plain blocks and its ``no-run ray`` blocks,
in order, in one namespace (tests/test_docs.py runs only the plain ones, in memory)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

import escher

pytestmark = pytest.mark.ray
PAGE = Path(__file__).resolve().parents[3] / "docs" / "ray.md"
_BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)


def test_ray_page_runs_on_the_cluster(ray_cluster: Any) -> None:
    blocks = [(flags.split(), code) for flags, code in _BLOCK.findall(PAGE.read_text())]
    ray_blocks = [code for flags, code in blocks if "ray" in flags]
    assert ray_blocks, "docs/ray.md has no Ray block"
    namespace: dict[str, object] = {"__name__": "docs_ray"}
    try:
        for index, (flags, code) in enumerate(blocks):
            if "no-run" in flags and "ray" not in flags:
                continue
            exec(compile(code, f"ray.md[block {index + 1}]", "exec"), namespace)
    finally:
        escher.shutdown()
    assert not escher.is_initialized()
