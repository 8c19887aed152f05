"""`bench/verify_scaling.py` as a module, for tests that use its instance generators."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "verify_scaling.py"


@functools.cache
def bench() -> ModuleType:
    """The bench module, loaded once."""
    spec = importlib.util.spec_from_file_location("verify_scaling_for_tests", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
