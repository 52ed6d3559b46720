"""Who may be a victim, and at what cost (contract sections 4.2 to 4.4, 5, 7)."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import EPS, Cluster
from .model import Allocation, Policy, SessionType

MINUTE = 60.0
HOUR = 3600.0


@dataclass(slots=True)
class Gates:
    """Facts about the request that several rules need."""

    sensitive: bool
    session_type: SessionType
    share: float
    fair_share: float
    starving: bool = False
    aggressive: bool = False


def elapsed_s(alloc: Allocation, now: float) -> float:
    start = alloc.started_at if alloc.started_at is not None else now
    return now - start


def start_of(alloc: Allocation, now: float) -> float:
    return alloc.started_at if alloc.started_at is not None else now


def remaining_s(alloc: Allocation, now: float) -> float | None:
    if alloc.walltime_minutes is None:
        return None
    return alloc.walltime_minutes * MINUTE - elapsed_s(alloc, now)


def on_borrowed_node(cluster: Cluster, alloc: Allocation) -> bool:
    for name in alloc.placement:
        home = cluster.nodes[name].vcluster
        if home is not None and home != alloc.vcluster:
            return True
    return False


def protection_code(cluster: Cluster, alloc: Allocation, policy: Policy, now: float,
                    sensitive_request: bool) -> str | None:
    """The first protection of section 4.2 that applies, or None."""
    if alloc.state != "running":
        return "NOT_RUNNING"
    vc = cluster.vcluster_of(alloc.vcluster)
    if alloc.is_sensitive or (vc is not None and vc.type == "sensitive"):
        return "SENSITIVE"
    if alloc.protected_until is not None and alloc.protected_until > now:
        return "PROTECTED"
    if not alloc.preemptible:
        return "NOT_PREEMPTIBLE"
    if vc is not None and vc.type == "service" and not on_borrowed_node(cluster, alloc):
        return "SERVICE_HOME"
    if sensitive_request:
        return None
    left = remaining_s(alloc, now)
    if left is not None and left <= policy.near_completion_minutes * MINUTE + EPS:
        return "NEAR_COMPLETION"
    if alloc.checkpoint == "none" and alloc.preemption_class >= 7:
        return "NO_CHECKPOINT_HIGH_CLASS"
    if elapsed_s(alloc, now) < policy.min_runtime_minutes * MINUTE - EPS:
        return "MIN_RUNTIME"
    if policy.max_preemptions_per_job is not None and alloc.preempted_count >= policy.max_preemptions_per_job:
        return "MAX_PREEMPTIONS"
    return None


def is_reclaim(cluster: Cluster, alloc: Allocation, req_vcluster: str | None) -> bool:
    """Another vCluster's allocation on a node whose home is the request's and that it borrows."""
    if req_vcluster is None or not cluster.use_vclusters or alloc.vcluster == req_vcluster:
        return False
    for name in alloc.placement:
        node = cluster.nodes[name]
        if node.vcluster == req_vcluster and node.borrowed_by is not None and node.borrowed_by == alloc.vcluster:
            return True
    return False


def cost(cluster: Cluster, alloc: Allocation, policy: Policy, now: float) -> float:
    """class_cost: checkpoint term + lost work + walltime term, halved when bursting."""
    if alloc.checkpoint == "auto":
        total = alloc.checkpoint_minutes
    elif alloc.checkpoint == "manual":
        total = policy.checkpoint_timeout_minutes
    else:
        since = start_of(alloc, now)
        if alloc.last_checkpoint_at is not None:
            since = max(since, alloc.last_checkpoint_at)
        first = alloc.placement[min(alloc.placement)] if alloc.placement else {}
        gpus = first.get("gpu", 0.0) or 1.0
        total = (now - since) / HOUR * len(alloc.placement) * gpus
    if alloc.walltime_minutes is not None:
        f = elapsed_s(alloc, now) / (alloc.walltime_minutes * MINUTE)
        if f >= 0.9 - EPS:
            total += 1000.0
        elif f < 0.1 - EPS:
            total += 1.0
        else:
            total += f * 100.0
    tenant = cluster.tenant(alloc.tenant)
    if tenant.burst_allowance is not None and cluster.tenant_share(alloc.tenant) > tenant.fair_share + EPS:
        total /= 2.0
    return total


def kind_code(cluster: Cluster, alloc: Allocation, req: Allocation, policy: Policy,
              gates: Gates, bands: dict[str, str]) -> str | None:
    """The kind's own eligibility rule; None when it allows the victim."""
    kind = policy.kind
    if kind == "class_cost":
        return None if alloc.preemption_class < req.preemption_class else "CLASS_NOT_LOWER"
    if kind == "priority":
        if alloc.priority >= req.priority:
            return "PRIORITY_NOT_LOWER"
        if policy.preemptible_priority is not None and alloc.priority > policy.preemptible_priority:
            return "ABOVE_PREEMPTIBLE_PRIORITY"
        scope = policy.victim_scope
        if scope != "resource_group":
            mine = getattr(req, scope)
            if mine is None or getattr(alloc, scope) != mine:
                return "OUT_OF_SCOPE"
        return None
    if kind == "queue":
        return queue_code(cluster, alloc, gates.session_type, policy, req)
    if kind == "rank":
        tenant = cluster.tenant(alloc.tenant)
        if not cluster.tenant_share(alloc.tenant) > tenant.fair_share + EPS:
            return "NOT_OVER_ALLOCATED"
        if cluster.tenant_share(alloc.tenant, (alloc,)) < tenant.fair_share - EPS:
            return "NOT_OVER_ALLOCATED"
        victim_rank = cluster.session_type(alloc.session_type).rank
        mine = gates.session_type
        if victim_rank < mine.rank or (mine.scope == "lower_or_equal" and victim_rank == mine.rank):
            return None
        return "RANK_NOT_LOWER"
    # fair_share
    band = bands.get(alloc.id, "WITHIN_FAIR_SHARE")
    if band == "AGGRESSIVE_ONLY" and gates.aggressive:
        return None
    return None if band == "" else band


def queue_code(cluster: Cluster, alloc: Allocation, mine: SessionType, policy: Policy,
               req: Allocation) -> str | None:
    theirs = cluster.session_type(alloc.session_type)
    if not theirs.priority < mine.priority:
        return "QUEUE_NOT_LOWER"
    named = any(p.queue == theirs.name for p in mine.preempts)
    if not ((mine.preemptive and (not mine.preempts or named)) or theirs.preemptable):
        return "QUEUE_NOT_PREEMPTABLE"
    types = alloc.job_types
    if types and not all(t in policy.preempt_jobtypes for t in types):
        return "EXEMPT_JOBTYPE"
    return None


def queue_time_code(alloc: Allocation, policy: Policy, now: float) -> str | None:
    if alloc.walltime_minutes is None:
        return None
    if policy.no_preempt_run_minutes is not None and elapsed_s(alloc, now) >= policy.no_preempt_run_minutes * MINUTE - EPS:
        return "NO_PREEMPT_RUN_TIME"
    left = remaining_s(alloc, now)
    if policy.no_preempt_finish_minutes is not None and left is not None and left <= policy.no_preempt_finish_minutes * MINUTE + EPS:
        return "NO_PREEMPT_FINISH_TIME"
    return None


def fair_share_bands(cluster: Cluster, req: Allocation, policy: Policy, now: float) -> dict[str, str]:
    """Classify every allocation of other tenants: "" (preemptible), AGGRESSIVE_ONLY, WITHIN_FAIR_SHARE."""
    by_tenant: dict[str | None, list[Allocation]] = {}
    for a in cluster.allocs.values():
        by_tenant.setdefault(a.tenant, []).append(a)
    bands: dict[str, str] = {}
    for tname, allocs in by_tenant.items():
        if tname == req.tenant:
            for a in allocs:
                bands[a.id] = "WITHIN_FAIR_SHARE"
            continue
        fs = cluster.tenant(tname).fair_share
        never = fs * policy.aggressive_threshold
        aggressive = fs * policy.preemption_threshold
        total = 0.0
        for a in sorted(allocs, key=lambda x: (start_of(x, now), x.id)):
            total += cluster.alloc_share(a)
            if total <= never + EPS:
                bands[a.id] = "WITHIN_FAIR_SHARE"
            elif total <= aggressive + EPS:
                bands[a.id] = "AGGRESSIVE_ONLY"
            else:
                bands[a.id] = ""
    return bands
