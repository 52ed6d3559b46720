"""``decide()``: one pending request against one resource group snapshot.

Order of the contract: last resort (fits, borrowing, held nodes, gates), then
eligibility of every running allocation, then reclaim-first selection by the
policy kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .cluster import EPS, Cluster
from .eligibility import (
    Gates,
    cost,
    elapsed_s,
    fair_share_bands,
    is_reclaim,
    kind_code,
    protection_code,
    queue_time_code,
    start_of,
)
from .explain import explain
from .model import Allocation, Policy, Scenario
from .placement import LENDABLE, RequestView
from .select import Selection, ordered_greedy, select_class_cost, select_priority

KIND_REASON = {"class_cost": "priority", "priority": "priority", "queue": "priority",
               "rank": "fair_share", "fair_share": "fair_share"}


@dataclass(frozen=True, slots=True)
class Victim:
    id: str
    reason: str
    action: str
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "reason": self.reason, "action": self.action}
        if self.cost is not None:
            d["cost"] = _num(self.cost)
        return d


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str
    verdict: str
    code: str
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "verdict": self.verdict, "code": self.code}
        if self.cost is not None:
            d["cost"] = _num(self.cost)
        return d


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: str
    code: str
    trigger: str | None
    nodes: tuple[str, ...]
    borrowed: tuple[str, ...]
    victims: tuple[Victim, ...]
    candidates: tuple[Candidate, ...]
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "code": self.code,
            "trigger": self.trigger,
            "nodes": list(self.nodes),
            "borrowed": list(self.borrowed),
            "victims": [v.to_dict() for v in self.victims],
            "candidates": [c.to_dict() for c in self.candidates],
            "explanation": self.explanation,
        }


def _num(x: float) -> float:
    return round(x, 9) + 0.0


def decide_scenario(scenario: Scenario) -> Decision:
    cluster = Cluster(
        scenario.nodes, scenario.running, scenario.tenants, scenario.vclusters,
        scenario.session_types, use_vclusters=scenario.has_vclusters,
    )
    return decide(cluster, scenario.policy, scenario.pending, scenario.now)


@dataclass(slots=True)
class _Judged:
    codes: dict[str, str | None]
    costs: dict[str, float]
    reclaim: set[str]
    eligible: list[Allocation]


def _gates(cluster: Cluster, policy: Policy, req: Allocation, now: float) -> Gates:
    tenant = cluster.tenant(req.tenant)
    share = cluster.tenant_share(req.tenant)
    gates = Gates(
        sensitive=req.is_sensitive,
        session_type=cluster.session_type(req.session_type),
        share=share,
        fair_share=tenant.fair_share,
    )
    if policy.kind == "fair_share":
        below = share < tenant.fair_share * policy.tolerance - EPS
        since = tenant.below_fair_share_since
        waited = now - since if since is not None else -1.0
        gates.starving = below and since is not None and waited >= policy.starvation_timeout_s - EPS
        gates.aggressive = (gates.starving and policy.enable_aggressive
                            and waited >= policy.aggressive_starvation_timeout_s - EPS)
    return gates


def _judge(cluster: Cluster, view: RequestView, policy: Policy, req: Allocation, now: float,
           gates: Gates) -> _Judged:
    bands = fair_share_bands(cluster, req, policy, now) if policy.kind == "fair_share" else {}
    codes: dict[str, str | None] = {}
    costs: dict[str, float] = {}
    reclaim: set[str] = set()
    eligible: list[Allocation] = []
    for aid in sorted(cluster.allocs):
        a = cluster.allocs[aid]
        code = protection_code(cluster, a, policy, now, gates.sensitive)
        rec = is_reclaim(cluster, a, req.vcluster)
        if code is None and not (rec and policy.reclaim_rule == "any"):
            code = kind_code(cluster, a, req, policy, gates, bands)
            if code is None and policy.kind == "queue":
                code = queue_time_code(a, policy, now)
        if code is None and not any(view.kind.get(n, LENDABLE) != LENDABLE for n in a.placement):
            code = "NOT_ON_USABLE_NODE"
        codes[aid] = code
        if code is None:
            eligible.append(a)
            if rec:
                reclaim.add(aid)
            if policy.kind == "class_cost":
                costs[aid] = cost(cluster, a, policy, now)
    return _Judged(codes, costs, reclaim, eligible)


def _walk_order(cluster: Cluster, view: RequestView, policy: Policy, gates: Gates,
                pool: Sequence[Allocation], now: float) -> list[Allocation]:
    if policy.kind == "queue":
        mine = gates.session_type
        prefs = {p.queue: p.pref for p in mine.preempts}

        def qkey(a: Allocation) -> tuple[Any, ...]:
            st = cluster.session_type(a.session_type)
            if policy.preempt_for == "least_run_time":
                third = elapsed_s(a, now)
            else:
                third = min(cluster.load(n) for n in a.placement if view.kind.get(n, LENDABLE) != LENDABLE)
            return (-prefs.get(st.name, 0), st.priority, third, a.id)

        return sorted(pool, key=qkey)
    if policy.kind == "rank":
        over = {}
        for a in pool:
            if a.tenant not in over:
                over[a.tenant] = cluster.tenant_share(a.tenant) - cluster.tenant(a.tenant).fair_share
        recent = gates.session_type.criteria == "most_recent_task"

        def rkey(a: Allocation) -> tuple[Any, ...]:
            crit = -start_of(a, now) if recent else -over[a.tenant]
            return (cluster.session_type(a.session_type).rank, crit, elapsed_s(a, now), a.id)

        return sorted(pool, key=rkey)
    return sorted(pool, key=lambda a: (-start_of(a, now), a.id))


def _select(cluster: Cluster, view: RequestView, policy: Policy, req: Allocation, now: float,
            gates: Gates, judged: _Judged, pool: Sequence[Allocation]) -> Selection:
    bound = None if gates.sensitive else policy.max_victims
    kind = policy.kind
    if kind == "class_cost":
        value = None if gates.sensitive else req.value
        return select_class_cost(view, pool, judged.costs, bound, value, now)
    if kind == "priority":
        return select_priority(view, pool, bound, now, policy.preemption_order == "newest")
    order = _walk_order(cluster, view, policy, gates, pool, now)
    if kind == "rank":
        def skip(a: Allocation, taken: list[Allocation]) -> bool:
            if a.id in judged.reclaim and policy.reclaim_rule == "any":
                return False
            same = [x for x in taken if x.tenant == a.tenant] + [a]
            return cluster.tenant_share(a.tenant, same) < cluster.tenant(a.tenant).fair_share - EPS

        return ordered_greedy(view, order, bound, skip)
    return ordered_greedy(view, order, bound)


def _wait_gate(view: RequestView, policy: Policy, req: Allocation, gates: Gates) -> str | None:
    if not policy.enabled:
        return "PREEMPTION_DISABLED"
    if policy.paused:
        return "PREEMPTION_PAUSED"
    if not req.preemptive or (policy.kind == "rank" and not gates.session_type.preemptive):
        return "NOT_PREEMPTIVE"
    if policy.kind == "fair_share" and not gates.starving:
        return "NOT_STARVING"
    if policy.kind == "rank" and not gates.share < gates.fair_share - EPS:
        return "NOT_UNDER_ALLOCATED"
    if not view.usable_if_empty():
        return "NO_USABLE_NODES"
    return None


def decide(cluster: Cluster, policy: Policy, req: Allocation, now: float) -> Decision:
    """Decide one request. Pure: reads only its arguments, changes nothing."""
    view = RequestView(cluster, req)
    gates = _gates(cluster, policy, req, now)
    judged = _judge(cluster, view, policy, req, now, gates)

    def finish(outcome: str, code: str, victims: Sequence[Allocation] = (),
               skipped: set[str] | frozenset[str] = frozenset(),
               nodes: Sequence[str] = (), borrowed: Sequence[str] = ()) -> Decision:
        return _build(cluster, policy, req, gates, judged, outcome, code, victims, skipped,
                      nodes, borrowed)

    if view.fits_now():
        placed = view.place(view.base_ok)
        assert placed is not None
        return finish("fits", "FITS", nodes=placed[0], borrowed=placed[1])
    if req.held_nodes and all(view.is_usable(n) for n in req.held_nodes):
        return finish("wait", "AWAITING_VICTIMS", nodes=req.held_nodes)
    gate = _wait_gate(view, policy, req, gates)
    if gate is not None:
        return finish("wait", gate)

    reclaim_pool = [a for a in judged.eligible if a.id in judged.reclaim]
    chosen: Selection | None = None
    if reclaim_pool:
        first = _select(cluster, view, policy, req, now, gates, judged, reclaim_pool)
        if first.victims is not None:
            chosen = first
    if chosen is None:
        chosen = _select(cluster, view, policy, req, now, gates, judged, judged.eligible)
    if chosen.victims is None:
        return finish("wait", chosen.code or "NO_FEASIBLE_SET", skipped=chosen.skipped)
    placed = view.place(view.qualifying_after(chosen.victims))
    assert placed is not None, "a chosen victim set always leaves a placement"
    return finish("preempt", "PREEMPT", chosen.victims, chosen.skipped, placed[0], placed[1])


def _build(cluster: Cluster, policy: Policy, req: Allocation, gates: Gates, judged: _Judged,
           outcome: str, code: str, victims: Sequence[Allocation], skipped: set[str] | frozenset[str],
           nodes: Sequence[str], borrowed: Sequence[str]) -> Decision:
    chosen = {a.id for a in victims}
    is_cost = policy.kind == "class_cost"
    candidates = []
    for aid, ccode in judged.codes.items():
        c = judged.costs.get(aid) if is_cost else None
        if aid in chosen:
            candidates.append(Candidate(aid, "victim", "SELECTED", c))
        elif aid in skipped:
            candidates.append(Candidate(aid, "ineligible", "NOT_OVER_ALLOCATED"))
        elif ccode is None:
            candidates.append(Candidate(aid, "spared", "NOT_NEEDED", c))
        else:
            candidates.append(Candidate(aid, "ineligible", ccode))
    out_victims = []
    for a in sorted(victims, key=lambda x: x.id):
        if a.id in judged.reclaim:
            reason = "reclaim"
        elif gates.sensitive:
            reason = "sensitive"
        else:
            reason = KIND_REASON[policy.kind]
        action = "checkpoint" if policy.mode == "suspend" and a.checkpoint in ("auto", "manual") else "terminate"
        out_victims.append(Victim(a.id, reason, action, judged.costs.get(a.id) if is_cost else None))
    trigger = None
    if out_victims:
        if gates.sensitive:
            trigger = "sensitive"
        elif any(v.reason == "reclaim" for v in out_victims):
            trigger = "reclaim"
        else:
            trigger = KIND_REASON[policy.kind]
    text = explain(req, policy, outcome, code, tuple(sorted(nodes)), tuple(out_victims),
                   tuple(sorted(borrowed)), cluster)
    return Decision(outcome, code, trigger, tuple(sorted(nodes)), tuple(sorted(borrowed)),
                    tuple(out_victims), tuple(candidates), text)
