"""Who may be a victim, and at what cost (contract sections 4.2 to 4.4, 5, 7).

Every allocation of the snapshot is judged at once: each rule is one array
operation, applied in the contract's order so the first code that applies wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .cluster import EPS, MIXED, NO_VC, BArr, Cluster, FArr, IArr
from .model import Allocation, Policy, SessionType
from .placement import RequestView

MINUTE = 60.0
HOUR = 3600.0

CODES = [
    "", "NOT_RUNNING", "SENSITIVE", "PROTECTED", "NOT_PREEMPTIBLE", "SERVICE_HOME", "NEAR_COMPLETION",
    "NO_CHECKPOINT_HIGH_CLASS", "MIN_RUNTIME", "MAX_PREEMPTIONS", "CLASS_NOT_LOWER", "PRIORITY_NOT_LOWER",
    "ABOVE_PREEMPTIBLE_PRIORITY", "OUT_OF_SCOPE", "QUEUE_NOT_LOWER", "QUEUE_NOT_PREEMPTABLE",
    "EXEMPT_JOBTYPE", "NO_PREEMPT_RUN_TIME", "NO_PREEMPT_FINISH_TIME", "NO_PREEMPT_INTERVAL", "RANK_NOT_LOWER",
    "NOT_OVER_ALLOCATED", "WITHIN_FAIR_SHARE", "AGGRESSIVE_ONLY", "NOT_ON_USABLE_NODE",
]
CODE = {name: i for i, name in enumerate(CODES)}
# Codes are one byte per slot: every pass over them reads an eighth of what int64 would.
CArr = npt.NDArray[np.int8]
# The codes each kind's own rules may give (what judge counts besides the protections).
KIND_CODES = {
    "class_cost": ("CLASS_NOT_LOWER",),
    "priority": ("PRIORITY_NOT_LOWER", "ABOVE_PREEMPTIBLE_PRIORITY", "OUT_OF_SCOPE"),
    "queue": ("QUEUE_NOT_LOWER", "QUEUE_NOT_PREEMPTABLE", "EXEMPT_JOBTYPE", "NO_PREEMPT_RUN_TIME",
              "NO_PREEMPT_FINISH_TIME", "NO_PREEMPT_INTERVAL"),
    "rank": ("NOT_OVER_ALLOCATED", "RANK_NOT_LOWER"),
    "fair_share": ("WITHIN_FAIR_SHARE", "AGGRESSIVE_ONLY"),
}


@dataclass(slots=True)
class Gates:
    """Facts about the request that several rules need."""

    sensitive: bool
    session_type: SessionType
    share: float
    fair_share: float
    starving: bool = False
    aggressive: bool = False
    backoff: bool = False  # fair_share: the group started work by preemption too recently


@dataclass(slots=True)
class Judged:
    """Per slot: the code (0 = eligible, -1 = empty slot), reclaim flag, cost (class_cost) and
    start time; and how many live slots have each code (what a stored summary counts)."""

    codes: CArr
    eligible: BArr
    reclaim: BArr
    cost: FArr | None
    start: FArr
    counts: IArr


def _assign(codes: CArr, mask: BArr, name: str) -> None:
    """Give ``name`` to every slot that has no code yet and matches ``mask`` (an addition, not a
    masked write: one pass the processor does many slots at a time)."""
    codes += ((codes == 0) & mask).view(np.int8) * np.int8(CODE[name])


SMALL_SNAPSHOT = 2048  # slots up to which masked writes beat _assign's arithmetic


def _first_rule(alive: BArr, rules: list[tuple[BArr, str]]) -> CArr:
    """Per slot: -1 where not alive, else the code of the first rule whose mask holds, else 0.
    On a small snapshot the rules are written last to first (each a masked write, the first
    written last); on a large one each is added where no code is yet (``_assign``)."""
    if len(alive) <= SMALL_SNAPSHOT:
        codes: CArr = np.zeros(len(alive), dtype=np.int8)
        for mask, name in reversed(rules):
            codes[mask] = CODE[name]
        codes[~alive] = -1
        return codes
    codes = np.where(alive, 0, -1).astype(np.int8)
    for mask, name in rules:
        _assign(codes, mask, name)
    return codes


def _times(cluster: Cluster, now: float) -> tuple[FArr, FArr, FArr, BArr]:
    """start (null = now), elapsed, remaining walltime and has-walltime, per slot."""
    def build() -> tuple[FArr, FArr, FArr, BArr]:
        n = cluster.slots
        start = np.where(np.isnan(cluster.a_start[:n]), now, cluster.a_start[:n])
        elapsed = now - start
        wall = cluster.a_wall[:n]
        has_wall = ~np.isnan(wall)
        remaining = np.where(has_wall, wall * MINUTE - elapsed, np.inf)
        return start, elapsed, remaining, has_wall

    result: tuple[FArr, FArr, FArr, BArr] = cluster.cached(("times", now), build)
    return result


def protections(cluster: Cluster, policy: Policy, now: float, sensitive_request: bool) -> CArr:
    """Section 4.2 codes per slot (-1 for empty slots); they do not depend on the request."""
    return _protections(cluster, policy, now, sensitive_request)[0]


def _protections(cluster: Cluster, policy: Policy, now: float, sensitive_request: bool) -> tuple[CArr, IArr]:
    """The protection codes per slot and how many live slots have each. NOT_RUNNING, the first
    rule, is applied apart: victims leave between two decisions of a pass (a state-only change)
    while the other rules, cached until the snapshot itself changes, need not be redone; the
    few slots leaving are patched into a copy, and into the counts."""
    def build() -> tuple[CArr, IArr]:
        n = cluster.slots
        _, elapsed, remaining, _ = _times(cluster, now)
        vc = cluster.a_vc[:n]
        vc_i = np.where(vc >= 0, vc, len(cluster.vc_sensitive) - 1)
        rules = [(cluster.a_sens[:n] | cluster.vc_sensitive[vc_i], "SENSITIVE"),
                 (cluster.a_prot[:n] > now, "PROTECTED"),
                 (~cluster.a_preemptible[:n], "NOT_PREEMPTIBLE"),
                 (cluster.vc_service[vc_i] & ~cluster.a_on_borrowed[:n], "SERVICE_HOME")]
        if not sensitive_request:
            rules += [(remaining <= policy.near_completion_minutes * MINUTE + EPS, "NEAR_COMPLETION"),
                      ((cluster.a_ckpt[:n] == 2) & (cluster.a_class[:n] >= 7), "NO_CHECKPOINT_HIGH_CLASS"),
                      (elapsed < policy.min_runtime_minutes * MINUTE - EPS, "MIN_RUNTIME"),
                      (cluster.a_pcount[:n] >= _max_preemptions(cluster, policy, n), "MAX_PREEMPTIONS")]
        codes = _first_rule(cluster.alive[:n], rules)
        codes.flags.writeable = False
        counts = np.bincount(codes[codes >= 0], minlength=len(CODES)).astype(np.int64)
        return codes, counts

    key = ("protections", now, policy.near_completion_minutes, policy.min_runtime_minutes,
           policy.max_preemptions_per_job, sensitive_request)
    rest, rest_counts = cluster.cached(key, build)

    def leaving() -> tuple[CArr, IArr]:
        n = cluster.slots
        slots = np.flatnonzero(cluster.alive[:n] & ~cluster.a_running[:n])
        if not len(slots):
            return rest, rest_counts
        codes = rest.copy()
        counts = rest_counts - np.bincount(codes[slots], minlength=len(CODES))
        counts[CODE["NOT_RUNNING"]] += len(slots)
        codes[slots] = CODE["NOT_RUNNING"]
        codes.flags.writeable = False
        return codes, counts

    result: tuple[CArr, IArr] = cluster.cached_state(("protections_now", *key), leaving)
    return result


def _max_preemptions(cluster: Cluster, policy: Policy, n: int) -> FArr:
    """Per slot: how many preemptions it may have had and still be taken; its session type's
    ``max_preemptions_per_job`` when set, else the policy's (none: unbounded)."""
    own = cluster.st_maxp[cluster.a_st[:n]]
    default = np.inf if policy.max_preemptions_per_job is None else float(policy.max_preemptions_per_job)
    result: FArr = np.where(own >= 0, own.astype(float), default)
    return result


def judge(cluster: Cluster, view: RequestView, policy: Policy, req: Allocation, now: float,
          gates: Gates) -> Judged:
    """Every slot's code, in the contract's order: protections, then the kind's rules (reclaimed
    work exempt where the policy says so), then NOT_ON_USABLE_NODE; with the counts per code."""
    n = cluster.slots
    start, elapsed, remaining, has_wall = _times(cluster, now)
    protected, counts = _protections(cluster, policy, now, gates.sensitive)
    reclaim = _reclaim_mask(cluster, view, n)
    kind_codes: CArr = np.zeros(n, dtype=np.int8)
    _kind_codes(cluster, kind_codes, policy, req, now, gates, elapsed, remaining, has_wall)
    if policy.reclaim_rule == "any":
        kind_codes[reclaim] = 0
    # One arithmetic pass instead of masked writes: a live unprotected slot takes its kind code,
    # else NOT_ON_USABLE_NODE off the request's usable nodes, else 0.
    free = protected == 0
    kind_codes *= free
    open_ = free & (kind_codes == 0)
    usable = _on_usable(cluster, view)
    off = open_ & ~usable
    codes: CArr = protected + kind_codes + off.view(np.int8) * np.int8(CODE["NOT_ON_USABLE_NODE"])
    eligible = open_ & usable
    counts = counts.copy()
    for name in KIND_CODES[policy.kind]:
        counts[CODE[name]] = np.count_nonzero(kind_codes == CODE[name])
    counts[CODE["NOT_ON_USABLE_NODE"]] = np.count_nonzero(off)
    counts[0] = np.count_nonzero(eligible)
    cost = class_cost(cluster, policy, now) if policy.kind == "class_cost" else None
    return Judged(codes, eligible, reclaim & eligible, cost, start, counts)


def _on_usable(cluster: Cluster, view: RequestView) -> BArr:
    """Slots with an entry on a node the request may be placed on (cached per request shape)."""
    def build() -> BArr:
        slots, nodes = cluster.live_slots_nodes()
        result: BArr = np.bincount(slots[view.placeable[nodes]], minlength=cluster.slots) > 0
        result.flags.writeable = False
        return result

    result: BArr = cluster.cached(("on_usable", view.shape_key), build)
    return result


def _reclaim_mask(cluster: Cluster, view: RequestView, n: int) -> BArr:
    """Slots on nodes the request's vCluster lent out (cached per vCluster)."""
    v = view.vc_idx
    if v == NO_VC:
        return np.zeros(n, dtype=bool)

    def build() -> BArr:
        home = cluster.a_borrow_home[:n]
        mask: BArr = (home == v) & (cluster.a_vc[:n] != v)
        for s in np.flatnonzero(home == MIXED).tolist():
            a = cluster.objs[s]
            assert a is not None
            mask[s] = any(cluster.node_vc[cluster.node_index[nm]] == v
                          and cluster.node_bb[cluster.node_index[nm]] == cluster.a_vc[s] for nm in a.placement)
        mask.flags.writeable = False
        return mask

    result: BArr = cluster.cached(("reclaim", v), build)
    return result


def _kind_codes(cluster: Cluster, codes: CArr, policy: Policy, req: Allocation, now: float, gates: Gates,
                elapsed: FArr, remaining: FArr, has_wall: BArr) -> None:
    n = len(codes)
    kind = policy.kind
    if kind == "class_cost":
        _assign(codes, cluster.a_class[:n] >= req.preemption_class, "CLASS_NOT_LOWER")
    elif kind == "priority":
        prio = cluster.a_prio[:n]
        _assign(codes, prio >= req.priority, "PRIORITY_NOT_LOWER")
        if policy.preemptible_priority is not None:
            _assign(codes, prio > policy.preemptible_priority, "ABOVE_PREEMPTIBLE_PRIORITY")
        scope = policy.victim_scope
        if scope != "resource_group":
            value: str | None = getattr(req, scope)
            if value is None:
                _assign(codes, np.ones(n, dtype=bool), "OUT_OF_SCOPE")
            else:
                if scope == "user":
                    column, target = cluster.a_user, cluster.user_index.get(value, -99)
                elif scope == "tenant":
                    column, target = cluster.a_tenant, cluster.tenant_index.get(value, -99)
                else:
                    column, target = cluster.a_vc, cluster.vc_index.get(value, -99)
                _assign(codes, column[:n] != target, "OUT_OF_SCOPE")
    elif kind == "queue":
        mine = gates.session_type
        st = cluster.a_st[:n]
        _assign(codes, ~(cluster.st_prio[st] < mine.priority), "QUEUE_NOT_LOWER")
        named = np.zeros(len(cluster.st_prio), dtype=bool)
        for p in mine.preempts:
            if p.queue in cluster.st_index:
                named[cluster.st_index[p.queue]] = True
        if not mine.preemptive:
            allowed = np.zeros(n, dtype=bool)
        elif mine.preempts:
            allowed = named[st]
        else:
            allowed = np.ones(n, dtype=bool)
        _assign(codes, ~(allowed | cluster.st_preemptable[st]), "QUEUE_NOT_PREEMPTABLE")
        allowed_bits = sum({"exclusive": 1, "forced": 2, "backfill": 4}[t] for t in policy.preempt_jobtypes)
        _assign(codes, (cluster.a_jobtypes[:n] & ~allowed_bits) != 0, "EXEMPT_JOBTYPE")
        if policy.no_preempt_run_minutes is not None:
            _assign(codes, has_wall & (elapsed >= policy.no_preempt_run_minutes * MINUTE - EPS),
                    "NO_PREEMPT_RUN_TIME")
        if policy.no_preempt_finish_minutes is not None:
            _assign(codes, has_wall & (remaining <= policy.no_preempt_finish_minutes * MINUTE + EPS),
                    "NO_PREEMPT_FINISH_TIME")
        if policy.no_preempt_interval_minutes is not None:
            # started_at is the latest start or resume: a requeued victim starts afresh.
            _assign(codes, elapsed < policy.no_preempt_interval_minutes * MINUTE - EPS, "NO_PREEMPT_INTERVAL")
    elif kind == "rank":
        _assign(codes, _not_over_allocated(cluster, n), "NOT_OVER_ALLOCATED")
        ranks = cluster.a_rank[:n]
        mine = gates.session_type
        own = req.rank if req.rank is not None else mine.rank
        ok = (ranks < own) | ((ranks == own) if mine.scope == "lower_or_equal" else False)
        _assign(codes, ~ok, "RANK_NOT_LOWER")
    else:
        bands = fair_share_bands(cluster, policy, now)
        own = cluster.tenant_index.get(req.tenant, -99)
        bands = np.where(cluster.a_tenant[:n] == own, CODE["WITHIN_FAIR_SHARE"], bands)
        if gates.aggressive:  # only where the victim's vCluster allows aggressive preemption
            allowed = cluster.vc_aggressive[cluster.a_vc[:n]]
            bands = np.where((bands == CODE["AGGRESSIVE_ONLY"]) & allowed, 0, bands)
        codes[:] = np.where(codes == 0, bands, codes)


def _not_over_allocated(cluster: Cluster, n: int) -> BArr:
    """rank: slots whose tenant is not over its fair share, or would fall below it without them
    (the request does not enter: cached until the snapshot changes)."""
    def build() -> BArr:
        tenant = cluster.a_tenant[:n]
        fair = cluster.t_fair
        over = cluster.tenant_shares() > fair + EPS
        after = _share_after(cluster, tenant, cluster.a_held[:n])
        result: BArr = ~over[tenant] | (after < fair[tenant] - EPS)
        result.flags.writeable = False
        return result

    result: BArr = cluster.cached("not_over_allocated", build)
    return result


def _share_after(cluster: Cluster, tenant: IArr, minus: FArr) -> FArr:
    mask = cluster.total > 0
    if not mask.any():
        return np.zeros(len(tenant))
    left = cluster.t_used[tenant][:, mask] - minus[:, mask]
    result: FArr = np.max(left / cluster.total[mask], axis=1)
    return result


def fair_share_bands(cluster: Cluster, policy: Policy, now: float) -> IArr:
    """Per slot: 0 (preemptible), AGGRESSIVE_ONLY or WITHIN_FAIR_SHARE, by each tenant's
    running total of its allocations' own shares, oldest start first (ties by id)."""
    def build() -> IArr:
        n = cluster.slots
        mask = cluster.total > 0
        share = (np.max(cluster.a_held[:n][:, mask] / cluster.total[mask], axis=1)
                 if mask.any() else np.zeros(n))
        share = np.where(cluster.alive[:n], share, 0.0)
        start = np.where(np.isnan(cluster.a_start[:n]), now, cluster.a_start[:n])
        tenant = cluster.a_tenant[:n]
        order = np.lexsort((cluster.id_rank(), start, tenant))
        cum = np.cumsum(share[order])
        t_sorted = tenant[order]
        first = np.r_[True, t_sorted[1:] != t_sorted[:-1]]
        base = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
        before = np.r_[0.0, cum][base]
        running = np.empty(n)
        running[order] = cum - before
        fair = cluster.t_fair[tenant]
        bands = np.zeros(n, dtype=np.int64)
        aggressive_cap = fair * policy.preemption_threshold + EPS
        never_cap = fair * policy.aggressive_threshold + EPS
        bands[running <= aggressive_cap] = CODE["AGGRESSIVE_ONLY"]
        bands[running <= never_cap] = CODE["WITHIN_FAIR_SHARE"]
        # A tenant using less than the threshold keeps all its work (YTsaurus's
        # non_preemptible_resource_usage_threshold).
        small = cluster.tenant_shares()[tenant] < policy.non_preemptible_usage_threshold - EPS
        bands[small] = CODE["WITHIN_FAIR_SHARE"]
        return bands

    key = ("fair_share_bands", now, policy.preemption_threshold, policy.aggressive_threshold,
           policy.non_preemptible_usage_threshold)
    result: IArr = cluster.cached(key, build)
    return result


def cost_key(policy: Policy, now: float) -> tuple[float, ...]:
    """What class_cost's costs depend on besides the snapshot (the key of what is cached on them)."""
    return (now, policy.checkpoint_timeout_minutes, policy.borrowed_risk)


def class_cost(cluster: Cluster, policy: Policy, now: float) -> FArr:
    """checkpoint term + lost work + walltime term, halved when the tenant bursts above its share.
    On a borrowed node the checkpoint term (or the work lost) is discounted by the policy's
    ``borrowed_risk``: such work was placed knowing its nodes may be reclaimed."""
    def build() -> FArr:
        n = cluster.slots
        start, elapsed, _, has_wall = _times(cluster, now)
        wall = cluster.a_wall[:n]
        ckpt = cluster.a_ckpt[:n]
        last = cluster.a_last_ckpt[:n]
        since = np.where(np.isnan(last), start, np.maximum(start, np.where(np.isnan(last), start, last)))
        lost = (now - since) / HOUR * cluster.a_nnodes[:n] * cluster.a_first_gpu[:n]
        total = np.where(ckpt == 0, cluster.a_ckpt_min[:n],
                         np.where(ckpt == 1, policy.checkpoint_timeout_minutes, lost))
        if policy.borrowed_risk > 0:
            total = np.where(cluster.a_on_borrowed[:n], total * (1.0 - policy.borrowed_risk), total)
        with np.errstate(divide="ignore", invalid="ignore"):
            f = np.where(has_wall, elapsed / (np.where(has_wall, wall, 1.0) * MINUTE), 0.0)
        term = np.where(f >= 0.9 - EPS, 1000.0, np.where(f < 0.1 - EPS, 1.0, f * 100.0))
        total = total + np.where(has_wall, term, 0.0)
        tenant = cluster.a_tenant[:n]
        shares = cluster.tenant_shares()
        halve = cluster.t_burst[tenant] & (shares[tenant] > cluster.t_fair[tenant] + EPS)
        result: FArr = np.where(halve, total / 2.0, total)
        return result

    result: FArr = cluster.cached(("cost", *cost_key(policy, now)), build)
    return result
