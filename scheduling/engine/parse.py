"""Turn a decision document (parsed JSON) into engine types, or say exactly why not.

Every error names the field by its path (``running[3].preemption_class``) so the
``simulate`` command, the API and the policy forms can all point at it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .model import (
    CHECKPOINT_KINDS,
    CRITERIA,
    JOB_TYPES,
    KINDS,
    MODES,
    NODE_STATES,
    PREEMPT_FOR,
    PREEMPTION_ORDERS,
    RECLAIM_RULES,
    RUNNING_STATES,
    SCOPES,
    VCLUSTER_TYPES,
    VICTIM_SCOPES,
    Allocation,
    Node,
    Policy,
    Preempts,
    Scenario,
    SessionType,
    Tenant,
    VCluster,
)


class InvalidDocument(ValueError):
    """The document breaks the contract; ``errors`` lists (path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{p}: {m}" for p, m in errors))


class _Errors:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))


_MISSING = object()


def parse_time(value: Any) -> float:
    """ISO-8601 to epoch seconds; no offset means UTC."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO-8601 time string")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("must be an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


class _Reader:
    """Reads one JSON object, recording errors instead of raising."""

    def __init__(self, errors: _Errors, path: str, obj: Any, allowed: set[str]) -> None:
        self.errors = errors
        self.path = path
        self.ok = isinstance(obj, dict)
        self.obj: dict[str, Any] = obj if isinstance(obj, dict) else {}
        if not self.ok:
            errors.add(path or "$", "must be an object")
            return
        for key in sorted(self.obj):
            if key not in allowed:
                errors.add(self._p(key), "unknown field")

    def _p(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.obj

    def raw(self, key: str) -> Any:
        return self.obj.get(key, _MISSING)

    def _get(self, key: str, default: Any, required: bool) -> Any:
        value = self.obj.get(key, _MISSING)
        if value is _MISSING:
            if required and self.ok:
                self.errors.add(self._p(key), "is required")
            return _MISSING
        return value

    def string(self, key: str, default: Any = None, *, required: bool = False,
               nullable: bool = True, choices: tuple[str, ...] | None = None) -> Any:
        value = self._get(key, default, required)
        if value is _MISSING:
            return default
        if value is None:
            if not nullable:
                self.errors.add(self._p(key), "may not be null")
                return default
            return None
        if not isinstance(value, str):
            self.errors.add(self._p(key), "must be a string")
            return default
        if choices is not None and value not in choices:
            self.errors.add(self._p(key), f"must be one of {', '.join(choices)}")
            return default
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, default, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            self.errors.add(self._p(key), "must be true or false")
            return default
        return value

    def integer(self, key: str, default: Any, *, lo: int | None = None, hi: int | None = None,
                nullable: bool = False, required: bool = False) -> Any:
        value = self._get(key, default, required)
        if value is _MISSING:
            return default
        if value is None:
            if not nullable:
                self.errors.add(self._p(key), "may not be null")
                return default
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.errors.add(self._p(key), "must be an integer")
            return default
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.errors.add(self._p(key), _range_message(lo, hi))
            return default
        return value

    def number(self, key: str, default: Any, *, lo: float | None = 0.0, hi: float | None = None,
               strict_lo: bool = False, nullable: bool = False) -> Any:
        value = self._get(key, default, False)
        if value is _MISSING:
            return default
        if value is None:
            if not nullable:
                self.errors.add(self._p(key), "may not be null")
                return default
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.errors.add(self._p(key), "must be a number")
            return default
        if lo is not None and (value <= lo if strict_lo else value < lo):
            self.errors.add(self._p(key), f"must be {'>' if strict_lo else '>='} {_fmt(lo)}")
            return default
        if hi is not None and value > hi:
            self.errors.add(self._p(key), f"must be <= {_fmt(hi)}")
            return default
        return float(value)

    def time(self, key: str, *, required: bool = False) -> float | None:
        value = self._get(key, None, required)
        if value is _MISSING or value is None:
            if value is None and required:
                self.errors.add(self._p(key), "may not be null")
            return None
        try:
            return parse_time(value)
        except ValueError as exc:
            self.errors.add(self._p(key), str(exc))
            return None

    def resources(self, key: str, *, required: bool = False) -> dict[str, float]:
        value = self._get(key, None, required)
        if value is _MISSING:
            return {}
        return read_resources(self.errors, self._p(key), value)

    def labels(self, key: str) -> dict[str, str]:
        value = self._get(key, None, False)
        if value is _MISSING:
            return {}
        path = self._p(key)
        if not isinstance(value, dict):
            self.errors.add(path, "must be an object of strings")
            return {}
        out: dict[str, str] = {}
        for k in sorted(value):
            v = value[k]
            if not isinstance(v, str):
                self.errors.add(f"{path}.{k}", "must be a string")
            else:
                out[k] = v
        return out


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _range_message(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"must be between {lo} and {hi}"
    if lo is not None:
        return f"must be >= {lo}"
    return f"must be <= {hi}"


def read_resources(errors: _Errors, path: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        errors.add(path, "must be an object of resource amounts")
        return {}
    out: dict[str, float] = {}
    for name in sorted(value):
        amount = value[name]
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount):
            errors.add(f"{path}.{name}", "must be a number")
        elif amount < 0:
            errors.add(f"{path}.{name}", "must be >= 0")
        else:
            out[name] = float(amount)
    return out


_POLICY_FIELDS = {f for f in Policy.__dataclass_fields__}


def default_max_victims(kind: str) -> int | None:
    return 3 if kind == "class_cost" else None


def read_policy(errors: _Errors, path: str, obj: Any) -> Policy:
    r = _Reader(errors, path, obj, _POLICY_FIELDS)
    kind = r.string("kind", "class_cost", required=True, nullable=False, choices=KINDS)
    d = Policy(kind=kind)
    max_victims = (
        r.integer("max_victims", None, lo=0, nullable=True)
        if r.has("max_victims")
        else default_max_victims(kind)
    )
    jobtypes_raw = r.raw("preempt_jobtypes")
    jobtypes: tuple[str, ...] = ()
    if jobtypes_raw is not _MISSING:
        if not isinstance(jobtypes_raw, list):
            errors.add(r._p("preempt_jobtypes"), "must be a list")
        else:
            for i, t in enumerate(jobtypes_raw):
                if t not in JOB_TYPES:
                    errors.add(f"{r._p('preempt_jobtypes')}[{i}]", f"must be one of {', '.join(JOB_TYPES)}")
            jobtypes = tuple(t for t in jobtypes_raw if t in JOB_TYPES)
    policy = Policy(
        kind=kind,
        enabled=r.boolean("enabled", d.enabled),
        paused=r.boolean("paused", d.paused),
        mode=r.string("mode", d.mode, nullable=False, choices=MODES),
        max_victims=max_victims,
        near_completion_minutes=r.number("near_completion_minutes", d.near_completion_minutes),
        min_runtime_minutes=r.number("min_runtime_minutes", d.min_runtime_minutes),
        max_preemptions_per_job=r.integer("max_preemptions_per_job", None, lo=0, nullable=True),
        reclaim_rule=r.string("reclaim_rule", d.reclaim_rule, nullable=False, choices=RECLAIM_RULES),
        checkpoint_timeout_minutes=r.number("checkpoint_timeout_minutes", d.checkpoint_timeout_minutes),
        preemptible_priority=r.integer("preemptible_priority", None, lo=0, hi=100, nullable=True),
        victim_scope=r.string("victim_scope", d.victim_scope, nullable=False, choices=VICTIM_SCOPES),
        preemption_order=r.string("preemption_order", d.preemption_order, nullable=False,
                                  choices=PREEMPTION_ORDERS),
        preempt_jobtypes=jobtypes,
        preempt_for=r.string("preempt_for", None, choices=PREEMPT_FOR),
        no_preempt_run_minutes=r.number("no_preempt_run_minutes", None, nullable=True),
        no_preempt_finish_minutes=r.number("no_preempt_finish_minutes", None, nullable=True),
        tolerance=r.number("tolerance", d.tolerance),
        starvation_timeout_s=r.number("starvation_timeout_s", d.starvation_timeout_s),
        aggressive_starvation_timeout_s=r.number("aggressive_starvation_timeout_s",
                                                 d.aggressive_starvation_timeout_s),
        enable_aggressive=r.boolean("enable_aggressive", d.enable_aggressive),
        preemption_threshold=r.number("preemption_threshold", d.preemption_threshold),
        aggressive_threshold=r.number("aggressive_threshold", d.aggressive_threshold),
    )
    if policy.aggressive_threshold > policy.preemption_threshold:
        errors.add(r._p("aggressive_threshold"), "must not be above preemption_threshold")
    return policy


def parse_policy(obj: Any) -> Policy:
    """Validate a policy object alone (the operator's forms and the API use it)."""
    errors = _Errors()
    policy = read_policy(errors, "", obj)
    if errors.items:
        raise InvalidDocument(errors.items)
    return policy


_TENANT_FIELDS = {"name", "fair_share", "burst_allowance", "below_fair_share_since"}
_VCLUSTER_FIELDS = {"name", "type", "allow_lending", "allow_borrowing", "max_borrow_pct"}
_SESSION_FIELDS = {"name", "priority", "preemptive", "preemptable", "preempts", "rank", "scope",
                   "criteria"}
_NODE_FIELDS = {"name", "capacity", "labels", "vcluster", "borrowed_by", "state"}
_ALLOC_FIELDS = {
    "id", "tenant", "user", "vcluster", "session_type", "preemption_class", "priority",
    "checkpoint", "checkpoint_minutes", "last_checkpoint_at", "submitted_at", "started_at",
    "walltime_minutes", "sensitive", "preemptible", "exclusive", "forced", "backfill",
    "protected_until", "preempted_count", "state", "placement", "nodes", "per_node",
    "constraints", "value", "preemptive", "held_nodes",
}
_DOC_FIELDS = {"now", "policy", "tenants", "vclusters", "session_types", "nodes", "running",
               "pending"}


def _read_list(errors: _Errors, path: str, value: Any, required: bool) -> list[Any]:
    if value is _MISSING:
        if required:
            errors.add(path, "is required")
        return []
    if not isinstance(value, list):
        errors.add(path, "must be a list")
        return []
    return value


def _named(errors: _Errors, path: str, items: list[Any], reader: Callable[[str, Any], Any]) -> list[Any]:
    out = []
    seen: set[str] = set()
    for i, raw in enumerate(items):
        item = reader(f"{path}[{i}]", raw)
        if item is None:
            continue
        if item.name in seen:
            errors.add(f"{path}[{i}].name", f"duplicate name {item.name!r}")
            continue
        seen.add(item.name)
        out.append(item)
    return out


def parse_scenario(doc: Any) -> Scenario:
    """Validate and convert a whole decision document."""
    errors = _Errors()
    top = _Reader(errors, "", doc, _DOC_FIELDS)
    if not top.ok:
        raise InvalidDocument(errors.items)
    now = top.time("now", required=True)
    policy = read_policy(errors, "policy", top.raw("policy")) if top.has("policy") else None
    if policy is None:
        errors.add("policy", "is required")

    def tenant(path: str, raw: Any) -> Tenant | None:
        r = _Reader(errors, path, raw, _TENANT_FIELDS)
        name = r.string("name", None, required=True, nullable=False)
        if not r.ok or name is None:
            return None
        return Tenant(
            name=name,
            fair_share=r.number("fair_share", 0.0, nullable=True) or 0.0,
            burst_allowance=r.number("burst_allowance", None, nullable=True),
            below_fair_share_since=r.time("below_fair_share_since"),
        )

    def vcluster(path: str, raw: Any) -> VCluster | None:
        r = _Reader(errors, path, raw, _VCLUSTER_FIELDS)
        name = r.string("name", None, required=True, nullable=False)
        if not r.ok or name is None:
            return None
        return VCluster(
            name=name,
            type=r.string("type", "hpc_batch", nullable=False, choices=VCLUSTER_TYPES),
            allow_lending=r.boolean("allow_lending", True),
            allow_borrowing=r.boolean("allow_borrowing", True),
            max_borrow_pct=r.number("max_borrow_pct", 0.2, hi=1.0),
        )

    raw_preempts: dict[str, tuple[str, list[Any]]] = {}

    def session_type(path: str, raw: Any) -> SessionType | None:
        r = _Reader(errors, path, raw, _SESSION_FIELDS)
        name = r.string("name", None, required=True, nullable=False)
        if not r.ok or name is None:
            return None
        preempts: list[Preempts] = []
        pre = _read_list(errors, f"{path}.preempts", r.raw("preempts"), False)
        for j, entry in enumerate(pre):
            epath = f"{path}.preempts[{j}]"
            if isinstance(entry, str):
                preempts.append(Preempts(queue=entry))
            else:
                er = _Reader(errors, epath, entry, {"queue", "pref"})
                q = er.string("queue", None, required=True, nullable=False)
                pref = er.integer("pref", 0)
                if q is not None:
                    preempts.append(Preempts(queue=q, pref=pref))
        raw_preempts[name] = (path, pre)
        return SessionType(
            name=name,
            priority=r.integer("priority", 0, lo=0),
            preemptive=r.boolean("preemptive", False),
            preemptable=r.boolean("preemptable", False),
            preempts=tuple(preempts),
            rank=r.integer("rank", 1, lo=1, hi=10000),
            scope=r.string("scope", "lower_or_equal", nullable=False, choices=SCOPES),
            criteria=r.string("criteria", "most_over_allocated", nullable=False, choices=CRITERIA),
        )

    def node(path: str, raw: Any) -> Node | None:
        r = _Reader(errors, path, raw, _NODE_FIELDS)
        name = r.string("name", None, required=True, nullable=False)
        if not r.ok or name is None:
            return None
        return Node(
            name=name,
            capacity=r.resources("capacity", required=True),
            labels=r.labels("labels"),
            vcluster=r.string("vcluster", None),
            borrowed_by=r.string("borrowed_by", None),
            state=r.string("state", "ready", nullable=False, choices=NODE_STATES),
        )

    tenants = _named(errors, "tenants", _read_list(errors, "tenants", top.raw("tenants"), False), tenant)
    has_vc = top.has("vclusters")
    vclusters = _named(errors, "vclusters", _read_list(errors, "vclusters", top.raw("vclusters"), False),
                       vcluster)
    has_st = top.has("session_types")
    session_types = _named(errors, "session_types",
                           _read_list(errors, "session_types", top.raw("session_types"), False),
                           session_type)
    nodes = _named(errors, "nodes", _read_list(errors, "nodes", top.raw("nodes"), True), node)

    node_names = {n.name for n in nodes}
    vc_names = {v.name for v in vclusters}
    st_names = {s.name for s in session_types}

    for st in session_types:
        spath, pre = raw_preempts.get(st.name, ("", []))
        for j, p in enumerate(st.preempts):
            if p.queue not in st_names:
                errors.add(f"{spath}.preempts[{j}]", f"unknown session type {p.queue!r}")
    for i, n in enumerate(nodes):
        for key, ref in (("vcluster", n.vcluster), ("borrowed_by", n.borrowed_by)):
            if has_vc and ref is not None and ref not in vc_names:
                errors.add(f"nodes[{i}].{key}", f"unknown vcluster {ref!r}")

    def allocation(path: str, raw: Any, pending: bool) -> Allocation | None:
        r = _Reader(errors, path, raw, _ALLOC_FIELDS)
        if not r.ok:
            return None
        ident = r.string("id", None, required=True, nullable=False)
        vc = r.string("vcluster", None)
        if has_vc and vc is not None and vc not in vc_names:
            errors.add(f"{path}.vcluster", f"unknown vcluster {vc!r}")
        st = r.string("session_type", None)
        if has_st and st is not None and st not in st_names:
            errors.add(f"{path}.session_type", f"unknown session type {st!r}")
        placement: dict[str, dict[str, float]] = {}
        if not pending:
            raw_pl = r.raw("placement")
            if raw_pl is _MISSING:
                errors.add(f"{path}.placement", "is required")
            elif not isinstance(raw_pl, dict):
                errors.add(f"{path}.placement", "must be an object of node name to resources")
            else:
                if not raw_pl:
                    errors.add(f"{path}.placement", "must name at least one node")
                for nname in sorted(raw_pl):
                    if nname not in node_names:
                        errors.add(f"{path}.placement.{nname}", f"unknown node {nname!r}")
                    placement[nname] = read_resources(errors, f"{path}.placement.{nname}", raw_pl[nname])
        labels: dict[str, str] = {}
        same: str | None = None
        if r.has("constraints"):
            cr = _Reader(errors, f"{path}.constraints", r.raw("constraints"), {"labels", "same"})
            labels = cr.labels("labels")
            same = cr.string("same", None)
        held: list[str] = []
        for j, h in enumerate(_read_list(errors, f"{path}.held_nodes", r.raw("held_nodes"), False)):
            if not isinstance(h, str):
                errors.add(f"{path}.held_nodes[{j}]", "must be a node name")
            elif h not in node_names:
                errors.add(f"{path}.held_nodes[{j}]", f"unknown node {h!r}")
            else:
                held.append(h)
        return Allocation(
            id=ident if ident is not None else "",
            tenant=r.string("tenant", None),
            user=r.string("user", None),
            vcluster=vc if has_vc else None,
            session_type=st if has_st else None,
            preemption_class=r.integer("preemption_class", 0, lo=0, hi=10),
            priority=r.integer("priority", 10, lo=0, hi=100),
            checkpoint=r.string("checkpoint", "none", nullable=False, choices=CHECKPOINT_KINDS),
            checkpoint_minutes=r.number("checkpoint_minutes", 5.0),
            last_checkpoint_at=r.time("last_checkpoint_at"),
            submitted_at=r.time("submitted_at"),
            started_at=r.time("started_at"),
            walltime_minutes=r.number("walltime_minutes", None, strict_lo=True, nullable=True),
            sensitive=r.boolean("sensitive", False),
            preemptible=r.boolean("preemptible", True),
            exclusive=r.boolean("exclusive", False),
            forced=r.boolean("forced", False),
            backfill=r.boolean("backfill", False),
            protected_until=r.time("protected_until"),
            preempted_count=r.integer("preempted_count", 0, lo=0),
            state=r.string("state", "running", nullable=False, choices=RUNNING_STATES),
            placement=placement,
            nodes=r.integer("nodes", 1, lo=1),
            per_node=r.resources("per_node"),
            labels=labels,
            same=same,
            value=r.number("value", None, nullable=True),
            preemptive=r.boolean("preemptive", True),
            held_nodes=tuple(sorted(set(held))),
        )

    running: list[Allocation] = []
    seen_ids: set[str] = set()
    for i, raw in enumerate(_read_list(errors, "running", top.raw("running"), True)):
        a = allocation(f"running[{i}]", raw, False)
        if a is None:
            continue
        if a.id in seen_ids:
            errors.add(f"running[{i}].id", f"duplicate id {a.id!r}")
            continue
        seen_ids.add(a.id)
        running.append(a)
    pending: Allocation | None = None
    if not top.has("pending"):
        errors.add("pending", "is required")
    else:
        pending = allocation("pending", top.raw("pending"), True)
        if pending is not None and pending.id in seen_ids:
            errors.add("pending.id", f"duplicate id {pending.id!r}")

    if errors.items or now is None or policy is None or pending is None:
        raise InvalidDocument(errors.items or [("$", "invalid document")])
    return Scenario(
        now=now,
        policy=policy,
        nodes=tuple(nodes),
        running=tuple(running),
        pending=pending,
        tenants=tuple(tenants),
        vclusters=tuple(vclusters),
        session_types=tuple(session_types),
        has_vclusters=has_vc,
        has_session_types=has_st,
    )
