"""Turn a decision document (parsed JSON) into engine types, or say exactly why not.

Every error names the field by its path (``running[3].preemption_class``) so the
``simulate`` command, the API and the policy forms can all point at it.
"""

from __future__ import annotations

from collections.abc import Callable
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
from .reader import _MISSING, InvalidDocument, _Errors, _Reader, parse_time, read_resources

__all__ = ["InvalidDocument", "parse_policy", "parse_scenario", "parse_time"]

_POLICY_FIELDS = {f for f in Policy.__dataclass_fields__}


MAX_DEFERRAL_MINUTES = 1440  # a day: deferred seconds are kept as a 32-bit count
# Any other duration of a policy: a century, so that now plus it is still a date (a larger one
# stopped every pass of the group with an overflow).
MAX_DURATION_MINUTES = 100 * 365 * 24 * 60
MAX_DURATION_S = MAX_DURATION_MINUTES * 60


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
        near_completion_minutes=r.number("near_completion_minutes", d.near_completion_minutes, hi=MAX_DURATION_MINUTES),
        min_runtime_minutes=r.number("min_runtime_minutes", d.min_runtime_minutes, hi=MAX_DURATION_MINUTES),
        max_preemptions_per_job=r.integer("max_preemptions_per_job", None, lo=0, nullable=True),
        reclaim_rule=r.string("reclaim_rule", d.reclaim_rule, nullable=False, choices=RECLAIM_RULES),
        checkpoint_timeout_minutes=r.number("checkpoint_timeout_minutes", d.checkpoint_timeout_minutes,
                                                            hi=MAX_DURATION_MINUTES),
        max_deferral_minutes=r.number("max_deferral_minutes", d.max_deferral_minutes, hi=MAX_DEFERRAL_MINUTES),
        borrowed_risk=r.number("borrowed_risk", d.borrowed_risk, hi=1.0),
        preemptible_priority=r.integer("preemptible_priority", None, lo=0, hi=100, nullable=True),
        victim_scope=r.string("victim_scope", d.victim_scope, nullable=False, choices=VICTIM_SCOPES),
        preemption_order=r.string("preemption_order", d.preemption_order, nullable=False,
                                  choices=PREEMPTION_ORDERS),
        preempt_jobtypes=jobtypes,
        preempt_for=r.string("preempt_for", None, choices=PREEMPT_FOR),
        no_preempt_run_minutes=r.number("no_preempt_run_minutes", None, nullable=True, hi=MAX_DURATION_MINUTES),
        no_preempt_finish_minutes=r.number("no_preempt_finish_minutes", None, nullable=True, hi=MAX_DURATION_MINUTES),
        no_preempt_interval_minutes=r.number("no_preempt_interval_minutes", None, nullable=True,
                                             hi=MAX_DURATION_MINUTES),
        tolerance=r.number("tolerance", d.tolerance),
        starvation_timeout_s=r.number("starvation_timeout_s", d.starvation_timeout_s, hi=MAX_DURATION_S),
        aggressive_starvation_timeout_s=r.number("aggressive_starvation_timeout_s",
                                                 d.aggressive_starvation_timeout_s, hi=MAX_DURATION_S),
        enable_aggressive=r.boolean("enable_aggressive", d.enable_aggressive),
        preemption_threshold=r.number("preemption_threshold", d.preemption_threshold),
        aggressive_threshold=r.number("aggressive_threshold", d.aggressive_threshold),
        preemptive_scheduling_backoff_s=r.number("preemptive_scheduling_backoff_s",
                                                 d.preemptive_scheduling_backoff_s, hi=MAX_DURATION_S),
        non_preemptible_usage_threshold=r.number("non_preemptible_usage_threshold",
                                                 d.non_preemptible_usage_threshold, hi=1.0),
    )
    if policy.aggressive_threshold > policy.preemption_threshold:
        errors.add(r._p("aggressive_threshold"), "must not be above preemption_threshold")
    if policy.aggressive_starvation_timeout_s < policy.starvation_timeout_s:
        errors.add(r._p("aggressive_starvation_timeout_s"), "must not be below starvation_timeout_s")
    return policy


def parse_policy(obj: Any) -> Policy:
    """Validate a policy object alone (the operator's forms and the API use it)."""
    errors = _Errors()
    policy = read_policy(errors, "", obj)
    if errors.items:
        raise InvalidDocument(errors.items)
    return policy


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
_DOC_FIELDS = {"now", "policy", "tenants", "vclusters", "session_types", "nodes", "running",
               "pending", "last_preemption_at"}


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
            allow_aggressive_preemption=r.boolean("allow_aggressive_preemption", True),
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
            mode=r.string("mode", None, choices=MODES),
            max_preemptions_per_job=r.integer("max_preemptions_per_job", None, lo=0, nullable=True),
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
            checkpoint_minutes=r.number("checkpoint_minutes", 5.0, hi=MAX_DURATION_MINUTES),
            last_checkpoint_at=r.time("last_checkpoint_at"),
            submitted_at=r.time("submitted_at"),
            started_at=r.time("started_at"),
            walltime_minutes=r.number("walltime_minutes", None, strict_lo=True, nullable=True,
                                      hi=MAX_DURATION_MINUTES),
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

    last_preemption_at = top.time("last_preemption_at")
    if errors.items or now is None or policy is None or pending is None:
        raise InvalidDocument(errors.items or [("$", "invalid document")])
    return Scenario(
        now=now,
        policy=policy,
        last_preemption_at=last_preemption_at,
        nodes=tuple(nodes),
        running=tuple(running),
        pending=pending,
        tenants=tuple(tenants),
        vclusters=tuple(vclusters),
        session_types=tuple(session_types),
        has_vclusters=has_vc,
        has_session_types=has_st,
    )
