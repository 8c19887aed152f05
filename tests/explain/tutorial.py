"""Run docs/tutorials/why-pending.md on another backend: its ``setup`` block (memory) is
replaced by the page's ``no-run <backend>`` block; every other block runs as in the docs."""

from __future__ import annotations

import re
from pathlib import Path

import escher

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "why-pending.md"
_BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)


def run_tutorial(backend_flag: str) -> None:
    """Run the page with the setup block of `backend_flag` ("ray", "k8s")."""
    blocks = [(flags.split(), code) for flags, code in _BLOCK.findall(PAGE.read_text())]
    assert any(backend_flag in flags for flags, _ in blocks), f"no {backend_flag} block"
    namespace: dict[str, object] = {"__name__": f"docs_why_{backend_flag}"}
    try:
        for index, (flags, code) in enumerate(blocks):
            if "setup" in flags or ("no-run" in flags and backend_flag not in flags):
                continue
            exec(compile(code, f"why-pending.md[block {index + 1}]", "exec"), namespace)
    finally:
        escher.shutdown()
