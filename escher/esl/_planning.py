"""The planning run: an application's launching code, run on a `PlanningBackend`, as a `Plan`.

Policies report what they promise as they act: `Policy.launch_spec` calls `record_launch`
after the backend took the task, which tells the planning backend the task's source, the
resources it creates on its node (its constraint's start actions) and, for every policy the
task is under, the intents that policy promises (`Policy.promises`), keyed by the policy so
that every task launched under one policy shares one intent.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import linecache
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from escher.backends.base import Backend
from escher.backends.planning import PlanningBackend
from escher.core.cluster import ClusterState
from escher.core.context import active_backend, swap_active_backend
from escher.core.errors import EscherError, PlanningReadError, ValidationError, did_you_mean
from escher.core.plan import Plan
from escher.core.resources import Resources
from escher.core.task import TaskRef
from escher.esl._constraint import TaskBody
from escher.esl._plan_parts import PlanParts


class Promising(Protocol):
    """What `record_launch` reads of a policy (`escher.esl.Policy` has it)."""

    backend: Backend

    @property
    def source(self) -> str: ...

    def promises(self, resources: Resources) -> Sequence[tuple[Any, PlanParts]]: ...


def planning_backend(backend: Backend) -> PlanningBackend | None:
    """`backend` if it records a plan (a planning run), else None."""
    return backend if isinstance(backend, PlanningBackend) else None


@contextlib.contextmanager
def attributed(backend: Backend, source: str) -> Iterator[None]:
    """In a planning run, attribute what is recorded inside to `source`; else nothing."""
    planning = planning_backend(backend)
    if planning is None:
        yield
        return
    with planning.attributed(source):
        yield


def plan_warning(backend: Backend, text: str) -> None:
    """In a planning run, note something the plan leaves out (shown with the plan)."""
    planning = planning_backend(backend)
    if planning is not None:
        planning.warn(text)


def record_launch(policy: Promising, ref: TaskRef) -> None:
    """Tell a planning backend what `policy` promises about the task `ref` (no-op when the
    backend runs tasks)."""
    planning = planning_backend(policy.backend)
    if planning is not None:
        _report(planning, policy, ref)


def _report(planning: PlanningBackend, policy: Promising, ref: TaskRef) -> None:
    body = ref.spec.fn
    creates = {}
    if isinstance(body, TaskBody):
        creates = {a.label: a.capacity for a in body.on_start if a.node_spec is None}
    waits = getattr(policy, "waits_for", ())
    queued = bool(getattr(policy, "queues", False) or waits)
    request = None
    if waits:  # labels other tasks set when they end: this task starts after them
        request = Resources({k: v for k, v in ref.spec.resources.items() if k not in waits})
        planning.warn(
            f"{policy.source}: its tasks start after the tasks that set {', '.join(waits)} "
            "end; the plan checks that each fits when its turn comes, not the order."
        )
    planning.annotate(
        ref,
        source=f"{policy.source}.launch",
        creates=creates,
        resources=request,
        concurrent=False if queued else None,
    )
    for owner, parts in policy.promises(ref.spec.resources):
        for index, build in enumerate(parts.intents):
            planning.promise((owner, index), build, ref)
        for key, domains in parts.topologies.items():
            planning.add_topology(key, domains)


def mark_queued(backend: Backend, ref: TaskRef, source: str, request: Resources) -> None:
    """In a planning run, record that `ref`'s task waits in a queue of `source` whose cycles
    admit it at run time: it is planned with its own `request` (without the admission
    labels the cycles set) and only has to fit when it starts; else nothing."""
    planning = planning_backend(backend)
    if planning is not None:
        planning.annotate(ref, source=source, resources=request, concurrent=False)
        planning.warn(
            f"{source.partition('.user(')[0]}: admission is decided by its cycles at run time "
            "(never while planning); its tasks are planned with their own requests, each "
            "fitting when admitted."
        )


def plan_tasks(policy: Promising, refs: Sequence[TaskRef]) -> Plan:
    """The plan of tasks already launched under `policy`, recorded as a planning run records
    launches: each task's request as launched and the intents the policy promises about it
    (the resources the policy set are already on the cluster, so none are planned). What
    ``escher view`` verifies for a policy's pending tasks.
    """
    planning = PlanningBackend()
    for ref in refs:
        _report(planning, policy, planning.record(ref.spec))
    return planning.plan()


@dataclass(frozen=True)
class PlanRun:
    """What a planning run recorded.

    Attributes:
        plan: The plan: every task the app launched, the resources it set, the intents its
            policies promised.
        stopped_at: Where the app read a task's result (``file:line``), which ended the
            plan there; "" if the app ran to its end.
        warnings: What the user should know about the plan (e.g. where it stopped).
        replicas: Each launch, by its name in launch order (``web``, ``web-2``, ...: the
            first free of the task's name and its numbered forms), -> the planned task it
            is a replica of (alike launches of one name are one task with a count).
    """

    plan: Plan
    stopped_at: str = ""
    warnings: tuple[str, ...] = field(default=())
    replicas: Mapping[str, str] = field(default_factory=dict)


class AppError(EscherError):
    """The application raised while it was being planned (the message names the error and
    the line)."""


def plan_app(
    app: Callable[[], Any],
    state: ClusterState | str | Path | None = None,
) -> PlanRun:
    """Run `app()` on a planning backend over `state` and return what it would do.

    The app runs unchanged with escher initialised on the planning backend: its ESLs,
    `set_resource(s)` calls, launches and gangs are recorded; nothing runs. A planning run
    cannot read task results: the app's first `escher.get` (or `wait`, `result`) ends the
    plan there with a warning naming the line (plan an app that branches on results in
    phases: one planned function per phase).

    Args:
        app: A function called with no arguments (e.g. the app's ``main``).
        state: The cluster: a `ClusterState` or a cluster file (default: an empty cluster).

    Returns:
        A `PlanRun`: the plan, and where it stopped.

    Raises:
        AppError: the app raised (naming its error and line).
        ValidationError: `app` is not callable, or the app replaced escher's backend.
    """
    if not callable(app):
        raise ValidationError(f"plan_app takes a function called with no arguments, got {app!r}.")
    backend = PlanningBackend(state)
    stopped_at = ""
    with _active(backend):
        try:
            app()
        except PlanningReadError as exc:
            stopped_at = _where(exc)
        except Exception as exc:
            raise AppError(f"the app raised {type(exc).__name__}{_at(exc)}: {exc}") from exc
        finally:
            replaced = active_backend() is not backend
    if replaced:
        raise ValidationError(
            "the app called escher.init() itself, so it ran on another backend; a planned "
            "app uses the backend escher is initialised with (escher.current_backend())."
        )
    warnings = list(backend.warnings)
    if stopped_at:
        warnings.append(
            f"the plan stops at {stopped_at}: the app reads a task's result there and nothing "
            "runs while planning; what it launches after that is not in the plan."
        )
    return PlanRun(backend.plan(), stopped_at, tuple(warnings), backend.replica_names())


@contextlib.contextmanager
def _active(backend: Backend) -> Iterator[None]:
    """Make `backend` the active backend inside the block, then restore the one before (as
    `escher.use_backend`; a backend the app made active itself is closed at the end)."""
    previous = swap_active_backend(backend)
    try:
        yield
    finally:
        current = swap_active_backend(previous)
        if current is not None and current is not backend and current is not previous:
            current.close()


def _user_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    frames = traceback.extract_tb(exc.__traceback__)
    package = str(Path(__file__).resolve().parents[1])
    return [f for f in frames if not str(Path(f.filename).resolve()).startswith(package)]


def _where(exc: BaseException) -> str:
    """``file:line (code)`` of the last frame of the app (not of escher) in `exc`'s trace."""
    frames = _user_frames(exc)
    if not frames:
        return "<unknown line>"
    frame = frames[-1]
    code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    where = f"{frame.filename}:{frame.lineno}"
    return f"{where} ({code})" if code else where


def _at(exc: BaseException) -> str:
    return f" at {_where(exc)}" if _user_frames(exc) else ""


def load_app(target: str) -> Callable[[], Any]:
    """The function named by `target`: ``path/to/file.py:function`` or
    ``package.module:function`` (what ``escher plan`` and ``escher verify --app`` take).

    A file's own folder is searched first for what it imports, as when Python runs it.

    Raises:
        ValidationError: a malformed target, a missing file, module or function, or an
            error while importing it (naming which, and what to do).
        AppError: the module raised something else while it was imported.
    """
    if not isinstance(target, str) or target.count(":") != 1:
        raise ValidationError(
            f"APP must look like path/to/file.py:function or package.module:function, got "
            f"{target!r}."
        )
    where, name = target.split(":")
    if not where or not name.isidentifier():
        raise ValidationError(
            f"APP must look like path/to/file.py:function or package.module:function, got "
            f"{target!r}."
        )
    module = _import_file(where) if where.endswith(".py") or "/" in where else _import(where)
    if not hasattr(module, name):
        found = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
        raise ValidationError(
            f"{where} has no function {name!r}.{did_you_mean(name, found)} APP names a "
            "function called with no arguments."
        )
    app = getattr(module, name)
    if not callable(app):
        raise ValidationError(f"{where}:{name} is a {type(app).__name__}, not a function.")
    return app  # type: ignore[no-any-return]


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise ValidationError(
            f"cannot import module {name!r}: {exc}. Give an importable module, or a file as "
            "path/to/file.py:function."
        ) from None
    except (ImportError, SyntaxError) as exc:
        raise ValidationError(f"cannot import module {name!r}: {exc}.") from None
    except Exception as exc:
        raise AppError(f"importing {name!r} raised {type(exc).__name__}{_at(exc)}: {exc}") from exc


def _import_file(path: str) -> ModuleType:
    file = Path(path)
    if not file.is_file():
        raise ValidationError(f"no file {path!r}; APP is path/to/file.py:function.")
    folder = str(file.resolve().parent)
    module_name = f"escher_app_{file.stem}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValidationError(f"cannot load {path!r} as Python; APP is path/to/file.py:function.")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, folder)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (ImportError, SyntaxError) as exc:
        sys.modules.pop(module_name, None)
        raise ValidationError(f"cannot import {path!r}: {type(exc).__name__}: {exc}.") from None
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise AppError(f"importing {path!r} raised {type(exc).__name__}{_at(exc)}: {exc}") from exc
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module
