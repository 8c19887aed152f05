"""Wire formats between the driver and the in-pod runner.

* The task: ``fn, args, kwargs`` pickled (cloudpickle when installed, else pickle, which
  needs a module-level function), zlib-compressed, base64 text in the env var
  ``ESCHER_TASK``.
* The outcome: one line in the container's termination message, ``escher:ok:<b64>`` (the
  pickled return value) or ``escher:err:<b64>`` (the pickled exception) or
  ``escher:errtext:<text>`` (an exception that could not be pickled). Kubernetes keeps at
  most `TERMINATION_MESSAGE_LIMIT` bytes of it.
"""

from __future__ import annotations

import base64
import contextlib
import pickle
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from escher.core.errors import TaskFailedError, ValidationError

#: Bytes of a container's termination message that the kubelet keeps (Kubernetes' limit).
TERMINATION_MESSAGE_LIMIT = 4096
#: Largest encoded task (function + arguments) escher puts in a pod's environment.
TASK_PAYLOAD_LIMIT = 512 * 1024

TASK_ENV = "ESCHER_TASK"
OK, ERR, ERRTEXT = "escher:ok:", "escher:err:", "escher:errtext:"


class ResultTooLargeError(TaskFailedError):
    """A task's pickled result does not fit in the Kubernetes termination message."""


def _pickler() -> tuple[str, Callable[[Any], bytes]]:
    try:
        import cloudpickle  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return "pk", lambda obj: pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return "cp", lambda obj: cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _pack(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data)).decode("ascii")


def _unpack(text: str) -> Any:
    return pickle.loads(zlib.decompress(base64.b64decode(text)))


def encode_task(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The ``ESCHER_TASK`` value for calling ``fn(*args, **kwargs)`` in a pod.

    Raises:
        ValidationError: the call cannot be pickled, or is larger than `TASK_PAYLOAD_LIMIT`.
    """
    kind, dumps = _pickler()
    try:
        data = dumps((fn, tuple(args), dict(kwargs)))
    except Exception as exc:
        raise ValidationError(
            f"cannot send {getattr(fn, '__name__', fn)!r} to a pod: pickling failed ({exc}). "
            "Use a module-level function and picklable arguments."
        ) from None
    text = f"{kind}:{_pack(data)}"
    if len(text) > TASK_PAYLOAD_LIMIT:
        raise ValidationError(
            f"the task's function and arguments take {len(text)} bytes encoded; a pod "
            f"carries at most {TASK_PAYLOAD_LIMIT}. Pass a reference (a path, a URL) instead "
            "of the data."
        )
    return text


def decode_task(text: str) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    """Inverse of `encode_task` (the runner side)."""
    _, _, body = text.partition(":")
    fn, args, kwargs = _unpack(body)
    return fn, tuple(args), dict(kwargs)


def encode_value(value: Any, task_name: str) -> str:
    """The termination message for a return value; an error message if it is too large."""
    _, dumps = _pickler()
    try:
        message = OK + _pack(dumps(value))
    except Exception as exc:
        return encode_error(
            TaskFailedError(f"task {task_name!r} returned an unpicklable value: {exc}")
        )
    if len(message) > TERMINATION_MESSAGE_LIMIT:
        return encode_error(
            ResultTooLargeError(
                f"task {task_name!r} returned {len(message)} bytes encoded, more than the "
                f"{TERMINATION_MESSAGE_LIMIT} bytes a Kubernetes termination message holds. "
                "Return a smaller value, or write large results to shared storage and return "
                "a reference.",
                task_name=task_name,
            )
        )
    return message


def encode_error(error: BaseException, remote_traceback: str = "") -> str:
    """The termination message for an exception (pickled if it fits, else as text)."""
    _, dumps = _pickler()
    if remote_traceback:
        tail = remote_traceback[-1500:]
        with contextlib.suppress(Exception):
            error.add_note(f"[escher] traceback in the pod:\n{tail}")
    try:
        message = ERR + _pack(dumps(error))
        pickle.loads(zlib.decompress(base64.b64decode(message[len(ERR) :])))
        if len(message) <= TERMINATION_MESSAGE_LIMIT:
            return message
    except Exception:
        pass
    text = f"{type(error).__name__}: {error}"
    return (ERRTEXT + text)[:TERMINATION_MESSAGE_LIMIT]


def decode_outcome(message: str | None, task_name: str) -> tuple[bool, Any]:
    """(True, value) or (False, exception) from a termination message written by the runner.

    Raises:
        ValueError: the message is not one of the runner's.
    """
    text = (message or "").strip()
    if text.startswith(OK):
        return True, _unpack(text[len(OK) :])
    if text.startswith(ERR):
        error = _unpack(text[len(ERR) :])
        if isinstance(error, BaseException):
            return False, error
    if text.startswith(ERRTEXT):
        return False, TaskFailedError(
            f"task {task_name!r} raised {text[len(ERRTEXT) :]}", task_name=task_name
        )
    raise ValueError("not an escher runner message")
