"""Turn a decision document (parsed JSON) into engine types, or say exactly why not.

Every error names the field by its path (``running[3].preemption_class``) so the
``simulate`` command, the API and the policy forms can all point at it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .model import (
    JOB_TYPES,
    KINDS,
    MODES,
    PREEMPT_FOR,
    PREEMPTION_ORDERS,
    RECLAIM_RULES,
    VICTIM_SCOPES,
    Allocation,
    Node,
    Policy,
    Scenario,
    SessionType,
)
from .parse_items import (
    MAX_DURATION_MINUTES,
    Known,
    read_allocation,
    read_list,
    read_node,
    read_session_type,
    read_tenant,
    read_vcluster,
)
from .reader import _MISSING, InvalidDocument, _Errors, _Reader, parse_time

__all__ = ["MAX_DURATION_MINUTES", "InvalidDocument", "parse_policy", "parse_scenario", "parse_time"]

_POLICY_FIELDS = {f for f in Policy.__dataclass_fields__}
MAX_DEFERRAL_MINUTES = 1440  # a day: deferred seconds are kept as a 32-bit count
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


_DOC_FIELDS = {"now", "policy", "tenants", "vclusters", "session_types", "nodes", "running",
               "pending", "last_preemption_at"}


def _named(errors: _Errors, path: str, items: list[Any], reader: Callable[[str, Any], Any],
           key: str = "name") -> list[Any]:
    """The items ``reader`` makes of ``items``, each ``key`` once (a repeat is an error)."""
    out = []
    seen: set[str] = set()
    for i, raw in enumerate(items):
        item = reader(f"{path}[{i}]", raw)
        if item is None:
            continue
        value = getattr(item, key)
        if value in seen:
            errors.add(f"{path}[{i}].{key}", f"duplicate {key} {value!r}")
            continue
        seen.add(value)
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

    def section(name: str, reader: Callable[[_Errors, str, Any], Any], required: bool = False) -> list[Any]:
        return _named(errors, name, read_list(errors, name, top.raw(name), required),
                      lambda path, raw: reader(errors, path, raw))

    tenants = section("tenants", read_tenant)
    vclusters = section("vclusters", read_vcluster)
    st_paths: dict[str, str] = {}  # a session type's path in the document (the last of its name)

    def session_type(errors: _Errors, path: str, raw: Any) -> SessionType | None:
        st = read_session_type(errors, path, raw)
        if st is not None:
            st_paths[st.name] = path
        return st

    session_types = section("session_types", session_type)
    nodes = section("nodes", read_node, required=True)
    known = Known({n.name for n in nodes}, {v.name for v in vclusters} if top.has("vclusters") else None,
                  {s.name for s in session_types} if top.has("session_types") else None)
    _check_references(errors, session_types, st_paths, nodes, known)
    running = _named(errors, "running", read_list(errors, "running", top.raw("running"), True),
                     lambda path, raw: read_allocation(errors, path, raw, False, known), key="id")
    pending: Allocation | None = None
    if not top.has("pending"):
        errors.add("pending", "is required")
    else:
        pending = read_allocation(errors, "pending", top.raw("pending"), True, known)
        if pending is not None and any(a.id == pending.id for a in running):
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
        has_vclusters=known.vclusters is not None,
        has_session_types=known.session_types is not None,
    )


def _check_references(errors: _Errors, session_types: list[SessionType], st_paths: dict[str, str],
                      nodes: list[Node], known: Known) -> None:
    """Names the sections give one another: a session type's ``preempts``, a node's vClusters."""
    for st in session_types:
        for j, p in enumerate(st.preempts):
            if known.session_types is not None and p.queue not in known.session_types:
                errors.add(f"{st_paths[st.name]}.preempts[{j}]", f"unknown session type {p.queue!r}")
    for i, n in enumerate(nodes):
        for key, ref in (("vcluster", n.vcluster), ("borrowed_by", n.borrowed_by)):
            if known.vclusters is not None and ref is not None and ref not in known.vclusters:
                errors.add(f"nodes[{i}].{key}", f"unknown vcluster {ref!r}")

