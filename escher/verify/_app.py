"""`verify_app`: plan an application's own launching code and verify that plan in one step."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from escher.core.cluster import ClusterState
from escher.verify._result import VerificationResult
from escher.verify._verify import verify


def verify_app(
    app: Callable[[], Any],
    state: ClusterState | str | Path,
    **options: Any,
) -> VerificationResult:
    """Run `app()` as a planning run on `state` (nothing runs) and verify what it would do.

    The plan comes from the launching code itself (`escher.esl.plan_app`): every task the
    app launches before it first reads a result, the resources its ESLs set, and the
    intents they promise. Where the plan stops early, the result's warnings say so.

    Args:
        app: The app's entry point, called with no arguments.
        state: The cluster: a `ClusterState` or a cluster file.
        **options: As for `verify` (``timeout``, ``check_intents``, ``refuse``, ...).

    Returns:
        The `VerificationResult` of the recorded plan.

    Raises:
        escher.esl.AppError: the app raised while it was planned.
        ValidationError: a bad argument.
        VerificationError: ``refuse=True`` and the plan is not proven feasible.
    """
    from escher.esl import plan_app  # only an app needs the ESLs

    if isinstance(state, str | Path):
        state = ClusterState.load(state)
    run = plan_app(app, state)
    result = verify(run.plan, state, **options)
    if not run.warnings:
        return result
    return dataclasses.replace(result, warnings=(*run.warnings, *result.warnings))
