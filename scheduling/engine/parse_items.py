"""The decision document's items, each read from its JSON object by its own reader (tenants,
vClusters, session types, nodes, allocations), every error recorded with its path; the
document's sections and the checks across them are ``parse.parse_scenario``'s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import (
    CHECKPOINT_KINDS,
    CRITERIA,
    MODES,
    NODE_STATES,
    RUNNING_STATES,
    SCOPES,
    VCLUSTER_TYPES,
    Allocation,
    Node,
    Preempts,
    SessionType,
    Tenant,
    VCluster,
)
from .reader import _MISSING, _Errors, _Reader, read_resources

# Any duration but a deferral: a century, so that now plus it is still a date (a larger one
# stopped every pass of the group with an overflow).
MAX_DURATION_MINUTES = 100 * 365 * 24 * 60

_TENANT_FIELDS = {"name", "fair_share", "burst_allowance", "below_fair_share_since"}
_VCLUSTER_FIELDS = {"name", "type", "allow_lending", "allow_borrowing", "max_borrow_pct",
                    "allow_aggressive_preemption"}
_SESSION_FIELDS = {"name", "priority", "preemptive", "preemptable", "preempts", "rank", "scope",
                   "criteria", "mode", "max_preemptions_per_job"}
_NODE_FIELDS = {"name", "capacity", "labels", "vcluster", "borrowed_by", "state"}
_ALLOC_FIELDS = {
    "id", "tenant", "user", "vcluster", "session_type", "preemption_class", "priority",
    "checkpoint", "checkpoint_minutes", "last_checkpoint_at", "submitted_at", "started_at",
    "walltime_minutes", "sensitive", "preemptible", "exclusive", "forced", "backfill",
    "protected_until", "preempted_count", "state", "placement", "nodes", "per_node",
    "constraints", "value", "preemptive", "held_nodes", "rank",
}


def read_list(errors: _Errors, path: str, value: Any, required: bool) -> list[Any]:
    if value is _MISSING:
        if required:
            errors.add(path, "is required")
        return []
    if not isinstance(value, list):
        errors.add(path, "must be a list")
        return []
    return value


def _opened(errors: _Errors, path: str, raw: Any, fields: set[str]) -> tuple[_Reader, str | None]:
    """An item's reader and its name (None: not an object, or no name: nothing more is read)."""
    r = _Reader(errors, path, raw, fields)
    name = r.string("name", None, required=True, nullable=False)
    return r, name if r.ok else None


def read_tenant(errors: _Errors, path: str, raw: Any) -> Tenant | None:
    r, name = _opened(errors, path, raw, _TENANT_FIELDS)
    if name is None:
        return None
    return Tenant(
        name=name,
        fair_share=r.number("fair_share", 0.0, nullable=True) or 0.0,
        burst_allowance=r.number("burst_allowance", None, nullable=True),
        below_fair_share_since=r.time("below_fair_share_since"),
    )


def read_vcluster(errors: _Errors, path: str, raw: Any) -> VCluster | None:
    r, name = _opened(errors, path, raw, _VCLUSTER_FIELDS)
    if name is None:
        return None
    return VCluster(
        name=name,
        type=r.string("type", "hpc_batch", nullable=False, choices=VCLUSTER_TYPES),
        allow_lending=r.boolean("allow_lending", True),
        allow_borrowing=r.boolean("allow_borrowing", True),
        max_borrow_pct=r.number("max_borrow_pct", 0.2, hi=1.0),
        allow_aggressive_preemption=r.boolean("allow_aggressive_preemption", True),
    )


def read_session_type(errors: _Errors, path: str, raw: Any) -> SessionType | None:
    r, name = _opened(errors, path, raw, _SESSION_FIELDS)
    if name is None:
        return None
    preempts: list[Preempts] = []
    for j, entry in enumerate(read_list(errors, f"{path}.preempts", r.raw("preempts"), False)):
        if isinstance(entry, str):
            preempts.append(Preempts(queue=entry))
        else:
            er = _Reader(errors, f"{path}.preempts[{j}]", entry, {"queue", "pref"})
            q = er.string("queue", None, required=True, nullable=False)
            pref = er.integer("pref", 0)
            if q is not None:
                preempts.append(Preempts(queue=q, pref=pref))
    return SessionType(
        name=name,
        priority=r.integer("priority", 0, lo=0),
        preemptive=r.boolean("preemptive", False),
        preemptable=r.boolean("preemptable", False),
        preempts=tuple(preempts),
        rank=r.integer("rank", 1, lo=1, hi=10000),
        scope=r.string("scope", "lower_or_equal", nullable=False, choices=SCOPES),
        criteria=r.string("criteria", "most_over_allocated", nullable=False, choices=CRITERIA),
        mode=r.string("mode", None, choices=MODES),
        max_preemptions_per_job=r.integer("max_preemptions_per_job", None, lo=0, nullable=True),
    )


def read_node(errors: _Errors, path: str, raw: Any) -> Node | None:
    r, name = _opened(errors, path, raw, _NODE_FIELDS)
    if name is None:
        return None
    return Node(
        name=name,
        capacity=r.resources("capacity", required=True),
        labels=r.labels("labels"),
        vcluster=r.string("vcluster", None),
        borrowed_by=r.string("borrowed_by", None),
        state=r.string("state", "ready", nullable=False, choices=NODE_STATES),
    )


@dataclass
class Known:
    """The names an allocation may refer to; ``vclusters`` and ``session_types`` are checked only
    when the document has the section."""

    nodes: set[str] = field(default_factory=set)
    vclusters: set[str] | None = None
    session_types: set[str] | None = None


def read_allocation(errors: _Errors, path: str, raw: Any, pending: bool, known: Known) -> Allocation | None:
    r = _Reader(errors, path, raw, _ALLOC_FIELDS)
    if not r.ok:
        return None
    ident = r.string("id", None, required=True, nullable=False)
    vc = _reference(errors, r, "vcluster", known.vclusters, "vcluster")
    st = _reference(errors, r, "session_type", known.session_types, "session type")
    placement = {} if pending else _placement(errors, path, r.raw("placement"), known.nodes)
    labels: dict[str, str] = {}
    same: str | None = None
    if r.has("constraints"):
        cr = _Reader(errors, f"{path}.constraints", r.raw("constraints"), {"labels", "same"})
        labels = cr.labels("labels")
        same = cr.string("same", None)
    held = _held_nodes(errors, f"{path}.held_nodes", r.raw("held_nodes"), known.nodes)
    return Allocation(
        id=ident if ident is not None else "",
        tenant=r.string("tenant", None),
        user=r.string("user", None),
        vcluster=vc,
        session_type=st,
        preemption_class=r.integer("preemption_class", 0, lo=0, hi=10),
        priority=r.integer("priority", 10, lo=0, hi=100),
        checkpoint=r.string("checkpoint", "none", nullable=False, choices=CHECKPOINT_KINDS),
        checkpoint_minutes=r.number("checkpoint_minutes", 5.0, hi=MAX_DURATION_MINUTES),
        last_checkpoint_at=r.time("last_checkpoint_at"),
        submitted_at=r.time("submitted_at"),
        started_at=r.time("started_at"),
        walltime_minutes=r.number("walltime_minutes", None, strict_lo=True, nullable=True, hi=MAX_DURATION_MINUTES),
        sensitive=r.boolean("sensitive", False),
        preemptible=r.boolean("preemptible", True),
        exclusive=r.boolean("exclusive", False),
        forced=r.boolean("forced", False),
        backfill=r.boolean("backfill", False),
        protected_until=r.time("protected_until"),
        preempted_count=r.integer("preempted_count", 0, lo=0),
        state=r.string("state", "running", nullable=False, choices=RUNNING_STATES),
        rank=r.integer("rank", None, lo=1, hi=10000, nullable=True),
        placement=placement,
        nodes=r.integer("nodes", 1, lo=1),
        per_node=r.resources("per_node"),
        labels=labels,
        same=same,
        value=r.number("value", None, nullable=True),
        preemptive=r.boolean("preemptive", True),
        held_nodes=held,
    )


def _reference(errors: _Errors, r: _Reader, key: str, names: set[str] | None, noun: str) -> str | None:
    """The name an allocation's ``key`` gives, checked against the document's section (None
    without the section: the engine then ignores it)."""
    value = r.string(key, None)
    if names is not None and value is not None and value not in names:
        errors.add(f"{r.path}.{key}", f"unknown {noun} {value!r}")
    return value if names is not None else None


def _placement(errors: _Errors, path: str, raw: Any, nodes: set[str]) -> dict[str, dict[str, float]]:
    """A running allocation's resources per node, every node known."""
    path = f"{path}.placement"
    if raw is _MISSING:
        errors.add(path, "is required")
        return {}
    if not isinstance(raw, dict):
        errors.add(path, "must be an object of node name to resources")
        return {}
    if not raw:
        errors.add(path, "must name at least one node")
    placement: dict[str, dict[str, float]] = {}
    for name in sorted(raw):
        if name not in nodes:
            errors.add(f"{path}.{name}", f"unknown node {name!r}")
        placement[name] = read_resources(errors, f"{path}.{name}", raw[name])
    return placement


def _held_nodes(errors: _Errors, path: str, raw: Any, nodes: set[str]) -> tuple[str, ...]:
    held: set[str] = set()
    for j, name in enumerate(read_list(errors, path, raw, False)):
        if not isinstance(name, str):
            errors.add(f"{path}[{j}]", "must be a node name")
        elif name not in nodes:
            errors.add(f"{path}[{j}]", f"unknown node {name!r}")
        else:
            held.add(name)
    return tuple(sorted(held))
