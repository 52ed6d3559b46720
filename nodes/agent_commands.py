"""The control plane's frames as the agent reads them (docs/agent-protocol.md, "Control plane to
agent"), checked before it acts on one: a frame that is not JSON, not an object, or whose fields the
agent uses have the wrong type or an unusable value is ``Ignored`` (the agent logs it and reads the
next frame) rather than ending the agent. Fields the agent does not use, and frame types it does not
know (a newer control plane's), pass unchecked.

Imports nothing of Django: it runs on compute nodes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from nodes.protocol import MAX_RUN, is_allocation_id, is_run

MIN_HEARTBEAT_S, MAX_HEARTBEAT_S = 1, 3600
MAX_GRACE_S = 24 * 3600
DEFAULT_GRACE_S = 30  # a terminate without grace_s (the protocol's default)


class Ignored(ValueError):
    """A frame the agent will not act on; the message says why."""


def command(text: str | bytes) -> dict[str, Any]:
    """The frame ``text`` holds, checked for what the agent does with its type."""
    try:
        frame = json.loads(text)
    except (ValueError, RecursionError):
        raise Ignored("not JSON") from None
    if not isinstance(frame, dict):
        raise Ignored("not a JSON object")
    check = CHECKS.get(frame.get("type"))  # type: ignore[arg-type]
    if check is not None:
        check(frame)
    return frame


def _number(frame: dict[str, Any], name: str, low: float, high: float) -> None:
    value = frame.get(name)
    if value is None:
        return  # the agent's default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not low <= value <= high:
        raise Ignored(f"{name} must be a number from {low} to {high}")


def _of_type(frame: dict[str, Any], name: str, kind: type, what: str) -> None:
    if name in frame and not isinstance(frame[name], kind):
        raise Ignored(f"{name} must be {what}")


def _reply(frame: dict[str, Any]) -> None:
    if frame.get("id") is not None and not isinstance(frame["id"], str):
        raise Ignored("id must be a string")


def _welcome(frame: dict[str, Any]) -> None:
    _number(frame, "heartbeat_interval_s", MIN_HEARTBEAT_S, MAX_HEARTBEAT_S)


def _allocation(frame: dict[str, Any]) -> None:
    if not is_allocation_id(frame.get("allocation")):
        raise Ignored("allocation must be an allocation id (decimal digits)")


def _terminate(frame: dict[str, Any]) -> None:
    _allocation(frame)
    _number(frame, "grace_s", 0, MAX_GRACE_S)


def grace_s(frame: dict[str, Any]) -> float:
    """A checked ``terminate``'s grace: its own, or the protocol's default when it gives none."""
    value = frame.get("grace_s")
    return DEFAULT_GRACE_S if value is None else float(value)


def _strings(value: Any) -> bool:
    """Strings, each one a process can be given (no NUL: exec and getpwnam refuse it)."""
    return all(isinstance(v, str) and "\x00" not in v for v in value)


def _start(frame: dict[str, Any]) -> None:
    _allocation(frame)
    if not isinstance(frame.get("command", []), list) or not _strings(frame.get("command", [])):
        raise Ignored("command must be a list of strings (argv)")
    env = frame.get("env") or {}
    if not isinstance(env, dict) or not _strings(env) or not _strings(env.values()):
        raise Ignored("env must be an object of strings")
    resources = frame.get("resources") or {}
    if not isinstance(resources, dict):
        raise Ignored("resources must be an object")
    for name in ("cpu", "memory"):
        _number(resources, name, 0, math.inf)
    for name in ("user", "group", "checkpoint_dir"):
        if name in frame and not _strings([frame[name]]):
            raise Ignored(f"{name} must be a string")
    for name in ("allow_root", "resume_from_checkpoint"):
        _of_type(frame, name, bool, "true or false")
    run = frame.get("run", 0)
    if not is_run(run):  # named in its reports
        raise Ignored(f"run must be an integer from 0 to {MAX_RUN}")
    devices = frame.get("devices", [])
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise Ignored("devices must be a list of objects")
    where = PurePosixPath(frame.get("checkpoint_dir", "checkpoints"))
    if where.is_absolute() or ".." in where.parts or not where.parts:
        # Not the work directory itself either ("" or "."): it holds the agent's own state, and
        # an allocation's directory is handed to the job's user.
        raise Ignored("checkpoint_dir must be a path within the agent's work directory")


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "ack": _reply, "error": _reply, "welcome": _welcome, "start": _start,
    "checkpoint": _allocation, "terminate": _terminate, "kill": _allocation,
}
