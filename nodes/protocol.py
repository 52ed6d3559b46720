"""The agent protocol's frames (docs/agent-protocol.md), parsed strictly.

Every frame from an agent has ``type`` and ``id``; unknown types, unknown or
missing fields and wrong types are a BadFrame (answered with an ``error`` frame
of code BAD_FRAME; nothing changes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar

import orjson

MAX_FRAME_BYTES = 64 * 1024
# Admission keeps a start frame (its command and env as submitted) within half the frame limit.
MAX_START_FRAME_BYTES = MAX_FRAME_BYTES // 2
EXIT_REASONS = ("completed", "failed", "terminated", "killed")


class BadFrame(ValueError):
    def __init__(self, message: str, frame_id: str | None = None) -> None:
        super().__init__(message)
        self.frame_id = frame_id


@dataclass(frozen=True)
class Hello:
    id: str
    agent_version: str
    capacity: dict[str, float]
    labels: dict[str, str]
    running: list[dict[str, Any]]


@dataclass(frozen=True)
class Heartbeat:
    id: str
    seq: int
    running: list[str]
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Started:
    id: str
    allocation: str
    pid: int


@dataclass(frozen=True)
class Exited:
    id: str
    allocation: str
    exit_code: int | None
    reason: str


@dataclass(frozen=True)
class CheckpointProgress:
    id: str
    allocation: str
    percent: float
    eta_s: float | None = None


@dataclass(frozen=True)
class CheckpointDone:
    id: str
    allocation: str
    ok: bool
    location: str = ""
    size_bytes: int = 0
    error: str = ""


@dataclass(frozen=True)
class Defer:
    id: str
    allocation: str
    seconds: int


Frame = Hello | Heartbeat | Started | Exited | CheckpointProgress | CheckpointDone | Defer

# type -> (class, {field: (python types, required)})
_NUM = (int, float)
SCHEMA: dict[str, tuple[type, dict[str, tuple[tuple[type, ...], bool]]]] = {
    "hello": (Hello, {"agent_version": ((str,), True), "capacity": ((dict,), True), "labels": ((dict,), True),
                      "running": ((list,), True)}),
    "heartbeat": (Heartbeat, {"seq": ((int,), True), "running": ((list,), True), "usage": ((dict,), False)}),
    "started": (Started, {"allocation": ((str,), True), "pid": ((int,), True)}),
    "exited": (Exited, {"allocation": ((str,), True), "exit_code": ((int, type(None)), True),
                        "reason": ((str,), True)}),
    "checkpoint_progress": (CheckpointProgress, {"allocation": ((str,), True), "percent": (_NUM, True),
                                                 "eta_s": ((*_NUM, type(None)), False)}),
    "checkpoint_done": (CheckpointDone, {"allocation": ((str,), True), "ok": ((bool,), True),
                                         "location": ((str,), False), "size_bytes": ((int,), False),
                                         "error": ((str,), False)}),
    "defer": (Defer, {"allocation": ((str,), True), "seconds": ((int,), True)}),
}
_ALLOWED = {kind: frozenset(fields) | {"type", "id"} for kind, (_, fields) in SCHEMA.items()}


def parse(text: str | bytes) -> Frame:
    if len(text) > MAX_FRAME_BYTES:
        raise BadFrame(f"frame larger than {MAX_FRAME_BYTES} bytes")
    try:
        raw = orjson.loads(text)  # strict: no NaN, no lone surrogates, integers of at most 64 bits
    except orjson.JSONDecodeError:
        raise BadFrame("not JSON") from None
    if not isinstance(raw, dict):
        raise BadFrame("a frame must be a JSON object")
    frame_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    kind = raw.get("type")
    if kind not in SCHEMA:
        raise BadFrame(f"unknown type {kind!r}", frame_id)
    if frame_id is None or not frame_id:
        raise BadFrame("missing or non-string 'id'", None)
    cls, fields = SCHEMA[kind]
    if not _ALLOWED[kind].issuperset(raw):
        unknown = sorted(set(raw) - _ALLOWED[kind])
        raise BadFrame(f"unknown field(s): {', '.join(unknown)}", frame_id)
    values: dict[str, Any] = {"id": frame_id}
    for name, (types, required) in fields.items():
        if name not in raw:
            if required:
                raise BadFrame(f"missing field {name!r}", frame_id)
            continue
        value = raw[name]
        if isinstance(value, bool) and bool not in types:
            raise BadFrame(f"field {name!r} has the wrong type", frame_id)
        if not isinstance(value, types):
            raise BadFrame(f"field {name!r} has the wrong type", frame_id)
        values[name] = value
    frame = cls(**values)
    _check(frame)
    return frame  # type: ignore[no-any-return]


# Integers the database stores: a value out of range is a bad frame, not a failed write (a
# heartbeat's failed write would fail every other heartbeat of its batch).
_BOUNDS: dict[str, tuple[int, int]] = {"seq": (0, 2**63 - 1), "exit_code": (-(2**31), 2**31 - 1),
                                       "pid": (0, 2**31 - 1), "seconds": (0, 2**31 - 1),
                                       "size_bytes": (0, 2**63 - 1)}


def _check(frame: Frame) -> None:
    for name, (low, high) in _BOUNDS.items():
        value = getattr(frame, name, None)
        if value is not None and not low <= value <= high:
            raise BadFrame(f"{name} must be between {low} and {high}", frame.id)
    if isinstance(frame, Exited) and frame.reason not in EXIT_REASONS:
        raise BadFrame(f"reason must be one of {', '.join(EXIT_REASONS)}", frame.id)
    if isinstance(frame, Heartbeat) and not all(isinstance(x, str) for x in frame.running):
        raise BadFrame("running must list allocation ids", frame.id)
    if isinstance(frame, Hello):
        for entry in frame.running:
            if not (isinstance(entry, dict) and isinstance(entry.get("allocation"), str)
                    and set(entry) <= {"allocation", "phase", "pid"}):
                raise BadFrame("running entries are {allocation, phase, pid}", frame.id)
    if isinstance(frame, CheckpointProgress) and not 0 <= frame.percent <= 100:
        raise BadFrame("percent must be between 0 and 100", frame.id)


# -- frames the server sends -------------------------------------------------------------
# Built only here, from these types, so the two directions of the protocol live in one module.

TERMINATE_GRACE_S = 30  # how long an agent waits after SIGTERM before it kills the process


@dataclass(frozen=True)
class Welcome:
    node: str
    heartbeat_interval_s: int
    type: ClassVar[str] = "welcome"


@dataclass(frozen=True)
class Ack:
    id: str
    type: ClassVar[str] = "ack"


@dataclass(frozen=True)
class Error:
    id: str | None
    code: str
    message: str
    type: ClassVar[str] = "error"


@dataclass(frozen=True)
class Start:
    allocation: str
    command: list[str]
    env: dict[str, str]
    resources: dict[str, float]
    resume_from_checkpoint: bool
    checkpoint_dir: str
    type: ClassVar[str] = "start"


@dataclass(frozen=True)
class Checkpoint:
    allocation: str
    deadline: str  # ISO 8601
    reason: str = "preempted"
    type: ClassVar[str] = "checkpoint"


@dataclass(frozen=True)
class Terminate:
    allocation: str
    grace_s: int = TERMINATE_GRACE_S
    type: ClassVar[str] = "terminate"


@dataclass(frozen=True)
class Kill:
    allocation: str
    type: ClassVar[str] = "kill"


Command = Welcome | Ack | Error | Start | Checkpoint | Terminate | Kill


def encode(command: Command) -> dict[str, Any]:
    """A server frame as the JSON object sent on the socket."""
    return {"type": command.type, **{f.name: getattr(command, f.name) for f in dataclass_fields(command)}}
