"""The agent protocol's frames (docs/agent-protocol.md), parsed strictly.

Every frame from an agent has ``type`` and ``id``; unknown types, unknown or
missing fields and wrong types are a BadFrame (answered with an ``error`` frame
of code BAD_FRAME; nothing changes). So are values the database could not
store: an ``id`` longer than 128 characters, a NUL character in any string
(PostgreSQL keeps none in text or JSON), an allocation id that is not an ASCII
decimal number of the database's 64-bit range.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar

import orjson

from nodes.frame_shapes import INT_MAX, devices_problem, health_problem
from scheduling.flat_maps import capacity_problem, labels_problem
from scheduling.json_keys import unique_keys

MAX_FRAME_BYTES = 64 * 1024
MAX_ID_CHARS = 128  # ProcessedFrame.frame_id
MAX_ALLOCATION_ID = 2**63 - 1
# Admission keeps a start frame (its command and env as submitted) within half the frame limit.
MAX_START_FRAME_BYTES = MAX_FRAME_BYTES // 2
# oom: the kernel killed it past its memory limit (its cgroup's memory.max); user_unknown: the
# Unix user or group it was to run as does not exist on the node; refused: the agent would not
# run it (as root without the tenant's leave); not_started: asked to checkpoint while its start
# still waited for a stopping process to leave its GPUs, it was dropped (it never ran).
NOT_STARTED = "not_started"
EXIT_REASONS = ("completed", "failed", "terminated", "killed", "oom", "user_unknown", "refused", NOT_STARTED)
SIGNALLED = frozenset({"terminated", "killed"})  # exit reasons of a process the control plane had stopped
MAX_RUN = INT_MAX  # a run's number (Start.run; a report's run)
MAX_NOTE_CHARS = 255  # Node.cgroups_note


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
    # The node's GPUs (nodes/devices.py); None from an agent that does not report them.
    devices: list[dict[str, Any]] | None = None
    cgroups: bool | None = None  # whether the agent can limit each allocation (a delegated cgroup v2)
    cgroups_note: str = ""  # without limits: why (nodes/cgroups.py), shown on the node page
    type: ClassVar[str] = "hello"


@dataclass(frozen=True)
class Heartbeat:
    id: str
    seq: int
    running: list[str]
    usage: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] | None = None  # per-GPU health (nodes/devices.py HEALTH_FIELDS)
    type: ClassVar[str] = "heartbeat"


@dataclass(frozen=True)
class Started:
    id: str
    allocation: str
    pid: int
    run: int = 0  # the run it is about (its start's); 0: not given
    type: ClassVar[str] = "started"


@dataclass(frozen=True)
class Exited:
    id: str
    allocation: str
    exit_code: int | None
    reason: str
    run: int = 0  # the run it is about (its start's); 0: not given
    type: ClassVar[str] = "exited"


@dataclass(frozen=True)
class CheckpointProgress:
    id: str
    allocation: str
    percent: float
    eta_s: float | None = None
    run: int = 0  # the run it is about (its start's); 0: not given
    type: ClassVar[str] = "checkpoint_progress"


@dataclass(frozen=True)
class CheckpointDone:
    id: str
    allocation: str
    ok: bool
    location: str = ""
    size_bytes: int = 0
    error: str = ""
    run: int = 0  # the run it is about (its start's); 0: not given
    type: ClassVar[str] = "checkpoint_done"


@dataclass(frozen=True)
class Defer:
    id: str
    allocation: str
    seconds: int
    run: int = 0  # the run it is about (its start's); 0: not given
    type: ClassVar[str] = "defer"


Frame = Hello | Heartbeat | Started | Exited | CheckpointProgress | CheckpointDone | Defer

# type -> (class, {field: (python types, required)})
_NUM = (int, float)
_RUN = ((int,), False)  # optional on every report: which run of the allocation it is about
SCHEMA: dict[str, tuple[type, dict[str, tuple[tuple[type, ...], bool]]]] = {
    "hello": (Hello, {"agent_version": ((str,), True), "capacity": ((dict,), True), "labels": ((dict,), True),
                      "running": ((list,), True), "devices": ((list,), False), "cgroups": ((bool,), False),
                      "cgroups_note": ((str,), False)}),
    "heartbeat": (Heartbeat, {"seq": ((int,), True), "running": ((list,), True), "usage": ((dict,), False),
                              "gpus": ((list,), False)}),
    "started": (Started, {"allocation": ((str,), True), "pid": ((int,), True), "run": _RUN}),
    "exited": (Exited, {"allocation": ((str,), True), "exit_code": ((int, type(None)), True),
                        "reason": ((str,), True), "run": _RUN}),
    "checkpoint_progress": (CheckpointProgress, {"allocation": ((str,), True), "percent": (_NUM, True),
                                                 "eta_s": ((*_NUM, type(None)), False), "run": _RUN}),
    "checkpoint_done": (CheckpointDone, {"allocation": ((str,), True), "ok": ((bool,), True),
                                         "location": ((str,), False), "size_bytes": ((int,), False),
                                         "error": ((str,), False), "run": _RUN}),
    "defer": (Defer, {"allocation": ((str,), True), "seconds": ((int,), True), "run": _RUN}),
}
_ALLOWED = {kind: frozenset(fields) | {"type", "id"} for kind, (_, fields) in SCHEMA.items()}


def parse(text: str | bytes) -> Frame:
    if _size(text) > MAX_FRAME_BYTES:
        raise BadFrame(f"frame larger than {MAX_FRAME_BYTES} bytes", _id_of(text))
    try:
        raw = orjson.loads(text)  # strict: no NaN, no lone surrogates, integers of at most 64 bits
    except orjson.JSONDecodeError:
        raise BadFrame("not JSON") from None
    if not isinstance(raw, dict):
        raise BadFrame("a frame must be a JSON object")
    frame_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in SCHEMA:  # (a list is not even hashable)
        raise BadFrame(f"unknown type {kind!r}", frame_id)
    if frame_id is None or not frame_id:
        raise BadFrame("missing or non-string 'id'", None)
    if kind != "heartbeat":
        _refuse_repeated_keys(text, frame_id)
    if len(frame_id) > MAX_ID_CHARS or "\x00" in frame_id:
        raise BadFrame(f"'id' must be 1 to {MAX_ID_CHARS} characters without NUL", None)
    if _holds_nul(raw, text):
        raise BadFrame("strings must not contain NUL", frame_id)
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


def _refuse_repeated_keys(text: str | bytes, frame_id: str) -> None:
    """A key given twice in one object is refused, not read as its last copy, so what the control
    plane acts on is what anyone reading the frame sees (as the API refuses it in a body). Not for
    heartbeats, the frame sent most: this second reading would add a tenth to a heartbeat's cost.
    A heartbeat with a repeated key is read as its last copy; the next, seconds later, says it again."""
    try:
        json.loads(text, object_pairs_hook=unique_keys)
    except ValueError as exc:
        raise BadFrame(str(exc), frame_id) from None
    except RecursionError:  # (json's decoder recurses once per level of nesting; orjson read it)
        raise BadFrame("nested too deeply", frame_id) from None


def _size(text: str | bytes) -> int:
    """The frame's size in bytes (UTF-8), counting a text frame's characters only when they could
    be over the limit."""
    if isinstance(text, bytes) or len(text) * 4 <= MAX_FRAME_BYTES or len(text) > MAX_FRAME_BYTES:
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _id_of(text: str | bytes) -> str | None:
    """An oversized frame's id, when it has a valid one: the agent learns which frame was refused
    (the server's WebSocket limit, 1 MiB, bounds what this parses)."""
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    frame_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(frame_id, str) and 0 < len(frame_id) <= MAX_ID_CHARS and "\x00" not in frame_id:
        return frame_id
    return None


def is_allocation_id(value: object) -> bool:
    """An allocation's id as the control plane sends it: ASCII digits of a 64-bit integer (not
    merely ``str.isdigit()``, which "²" passes and ``int()`` then refuses), with no leading zero
    (ids start at 1, and "0003" would be read as 3 while naming something else)."""
    return (isinstance(value, str) and 0 < len(value) <= 19 and value.isascii() and value.isdigit()
            and value[0] != "0" and int(value) <= MAX_ALLOCATION_ID)


def _holds_nul(raw: Any, text: str | bytes) -> bool:
    """Whether any key or string in the frame holds NUL (in JSON only ever as the escape ``\\u0000``,
    so most frames are cleared by one scan of their text)."""
    if (b"\\u0000" if isinstance(text, bytes) else "\\u0000") not in text:
        return False
    stack = [raw]
    while stack:  # iterative: orjson accepts nesting deeper than Python's recursion limit
        value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


# Integers the database stores: a value out of range is a bad frame, not a failed write (a
# heartbeat's failed write would fail every other heartbeat of its batch).
_BOUNDS: dict[str, tuple[int, int]] = {"seq": (0, 2**63 - 1), "exit_code": (-(2**31), 2**31 - 1),
                                       "pid": (0, 2**31 - 1), "seconds": (0, 2**31 - 1),
                                       "size_bytes": (0, 2**63 - 1), "run": (0, MAX_RUN)}
# Per frame type, the bounded fields it has (looked up once, not tried on every frame).
_BOUNDED: dict[type, tuple[tuple[str, int, int], ...]] = {
    cls: tuple((name, *_BOUNDS[name]) for name in fields if name in _BOUNDS) for cls, fields in SCHEMA.values()}


def _check(frame: Frame) -> None:
    for name, low, high in _BOUNDED[type(frame)]:
        value = getattr(frame, name)
        if value is not None and not low <= value <= high:
            raise BadFrame(f"{name} must be between {low} and {high}", frame.id)
    if isinstance(frame, Heartbeat):  # the frame sent most, checked first
        if frame.running and not all(is_allocation_id(x) for x in frame.running):
            raise BadFrame("running must list allocation ids", frame.id)
        problem = health_problem(frame.gpus) if frame.gpus is not None else None
        if problem is not None:
            raise BadFrame(problem, frame.id)
        return
    allocation = getattr(frame, "allocation", None)
    if allocation is not None and not is_allocation_id(allocation):
        raise BadFrame("allocation must be an allocation id (decimal digits)", frame.id)
    if isinstance(frame, Exited) and frame.reason not in EXIT_REASONS:
        raise BadFrame(f"reason must be one of {', '.join(EXIT_REASONS)}", frame.id)
    if isinstance(frame, Hello):
        _check_hello(frame)
    if isinstance(frame, CheckpointProgress) and not 0 <= frame.percent <= 100:
        raise BadFrame("percent must be between 0 and 100", frame.id)


def is_run(value: object) -> bool:
    """A run's number as frames carry it: an integer (no boolean, no float) from 0 (not given)."""
    return type(value) is int and 0 <= value <= MAX_RUN


def _check_hello(frame: Hello) -> None:
    for entry in frame.running:
        if not (isinstance(entry, dict) and is_allocation_id(entry.get("allocation"))
                and set(entry) <= {"allocation", "phase", "pid", "run"} and is_run(entry.get("run", 0))):
            raise BadFrame("running entries are {allocation, phase?, pid?, run?}", frame.id)
    for name, problem in (("labels", labels_problem(frame.labels)), ("capacity", capacity_problem(frame.capacity))):
        if problem is not None:  # flat and bounded (scheduling/flat_maps.py), never a deep document
            raise BadFrame(f"{name}: {problem}", frame.id)
    if len(frame.cgroups_note) > MAX_NOTE_CHARS:
        raise BadFrame(f"cgroups_note must be at most {MAX_NOTE_CHARS} characters", frame.id)
    problem = devices_problem(frame.devices) if frame.devices is not None else None
    if problem is not None:
        raise BadFrame(problem, frame.id)


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
    # The GPUs bound to this allocation on the node ({index, uuid}); the agent shows it these only.
    devices: list[dict[str, Any]] = field(default_factory=list)
    # The Unix user and group to run as ("": none mapped: as the agent, only where it may,
    # nodes/runas.py); root only with allow_root.
    user: str = ""
    group: str = ""
    allow_root: bool = False
    # Which run of the allocation this is (1 at its first start, one more at each start after a
    # requeue): the agent names it in its reports, so a late report of an earlier run is told apart.
    run: int = 0
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
# What the agent reports about an allocation (kept until acknowledged, resent after a reconnect).
Report = Started | Exited | CheckpointProgress | CheckpointDone | Defer


def ack_text(frame_id: str) -> str:
    """``encode(Ack(id=frame_id))`` as the socket's text, written directly: one goes with every
    heartbeat."""
    return orjson.dumps({"type": Ack.type, "id": frame_id}).decode()


def new_id() -> str:
    """A frame id: unique, so a resent frame is recognised (docs/agent-protocol.md, idempotency)."""
    return uuid.uuid4().hex


def encode(frame: Frame | Command) -> dict[str, Any]:
    """A frame, either direction, as the JSON object sent on the socket. An agent's optional
    fields left at their defaults are left out (the control plane reads the same defaults, and an
    older one need not know newer fields); the control plane's commands carry every field."""
    out: dict[str, Any] = {"type": frame.type}
    omit_defaults = isinstance(frame, Frame)
    for f in dataclass_fields(frame):
        value = getattr(frame, f.name)
        if omit_defaults and f.default is not MISSING and value == f.default:
            continue
        if omit_defaults and f.default_factory is not MISSING and value == f.default_factory():
            continue
        out[f.name] = value
    return out
