"""``decide()``: one pending request against one resource group snapshot.

Order of the contract: last resort (fits, borrowing, held nodes, gates), then
eligibility of every running allocation, then reclaim-first selection by the
policy kind. The candidate list (every running allocation) is materialized only
when read, so deciding against 50,000 allocations does not build 50,000 rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .cluster import EPS, BArr, Cluster, FArr, IArr
from .eligibility import CODES, Gates, Judged, cost_key, judge
from .explain import explain
from .model import Allocation, Policy, Scenario, effective_mode, victim_action
from .placement import RequestView
from .select import Selection
from .select_bounds import node_entries
from .select_cost import select_class_cost
from .select_priority import select_priority
from .select_walk import fewest_victims, ordered_greedy, rank_takes

KIND_REASON = {"class_cost": "priority", "priority": "priority", "queue": "priority",
               "rank": "fair_share", "fair_share": "fair_share"}


@dataclass(frozen=True, slots=True)
class Victim:
    id: str
    reason: str
    action: str
    cost: float | None = None
    # The victim's session type's mode, when it overrides the policy's (it decided ``action``).
    mode: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "reason": self.reason, "action": self.action}
        if self.cost is not None:
            d["cost"] = _num(self.cost)
        if self.mode is not None:
            d["mode"] = self.mode
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


class Decision:
    """The engine's answer. ``candidates`` is computed on first read."""

    def __init__(self, outcome: str, code: str, trigger: str | None, nodes: tuple[str, ...],
                 borrowed: tuple[str, ...], victims: tuple[Victim, ...], explanation: str,
                 candidates: Callable[[], tuple[Candidate, ...]],
                 summary: Callable[[int], tuple[tuple[Candidate, ...], dict[str, int]]] | None = None) -> None:
        self.outcome = outcome
        self.code = code
        self.trigger = trigger
        self.nodes = nodes
        self.borrowed = borrowed
        self.victims = victims
        self.explanation = explanation
        self._candidates = candidates
        self._summary = summary

    def summary(self, max_rows: int) -> tuple[tuple[Candidate, ...], dict[str, int]]:
        """Every candidate when there are at most ``max_rows``; else the victims and every candidate
        on the chosen nodes, and how many of the others have each code."""
        if self._summary is None:
            return self.candidates, {}
        return self._summary(max_rows)

    @cached_property
    def candidates(self) -> tuple[Candidate, ...]:
        return self._candidates()

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
    cluster.last_preemption_at = scenario.last_preemption_at
    return decide(cluster, scenario.policy, scenario.pending, scenario.now)


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
        last = cluster.last_preemption_at
        gates.backoff = last is not None and now - last < policy.preemptive_scheduling_backoff_s - EPS
    return gates


def _walk_positions(cluster: Cluster, policy: Policy, gates: Gates, now: float) -> tuple[IArr, IArr]:
    """Each slot's place in the kind's walk order (cached until the snapshot changes)."""
    kind = policy.kind
    n = cluster.slots
    mine = gates.session_type
    if kind == "queue":
        prefs = tuple(sorted((p.queue, p.pref) for p in mine.preempts))
        key: tuple[Any, ...] = ("walk", kind, now, prefs, policy.preempt_for)
    elif kind == "rank":
        key = ("walk", kind, now, mine.criteria)
    else:
        key = ("walk", kind, now)

    def build() -> tuple[IArr, IArr]:
        start = np.where(np.isnan(cluster.a_start[:n]), now, cluster.a_start[:n])
        rank = cluster.id_rank()
        st = cluster.a_st[:n]
        if kind == "queue":
            pref = np.zeros(len(cluster.st_prio))
            for queue, value in prefs:
                if queue in cluster.st_index:
                    pref[cluster.st_index[queue]] = value
            if policy.preempt_for == "least_run_time":
                third = now - start
            elif policy.preempt_for in ("mini_job", "optimal_mini_job"):
                third = -_sizes(cluster, n)  # the largest first: enough room from as few jobs as can be
            else:
                live = cluster.live_entries()
                third = np.full(n, np.inf)
                np.minimum.at(third, cluster.e_alloc[live], cluster.node_load()[cluster.e_node[live]])
            order = np.lexsort((rank, third, cluster.st_prio[st], -pref[st]))
        elif kind == "rank":
            tenant = cluster.a_tenant[:n]
            over = (cluster.tenant_shares() - cluster.t_fair)[tenant]
            crit = -start if mine.criteria == "most_recent_task" else -over
            order = np.lexsort((rank, now - start, crit, cluster.a_rank[:n]))
        else:
            order = np.lexsort((rank, -start))
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        return pos, order.astype(np.int64)

    result: tuple[IArr, IArr] = cluster.cached(key, build)
    return result


def _sizes(cluster: Cluster, n: int) -> FArr:
    """Each slot's dominant share of the group: what it frees if taken."""
    mask = cluster.total > 0
    if not mask.any():
        return np.zeros(n)
    result: FArr = np.max(cluster.a_held[:n][:, mask] / cluster.total[mask], axis=1)
    return result


def _select(cluster: Cluster, view: RequestView, policy: Policy, req: Allocation, now: float,
            gates: Gates, judged: Judged, pool: BArr) -> Selection:
    bound = None if gates.sensitive else policy.max_victims
    kind = policy.kind
    if kind == "class_cost":
        assert judged.cost is not None
        value = None if gates.sensitive else req.value
        return select_class_cost(view, pool, judged.cost, judged.start, bound, value,
                                 cost_key(policy, now))
    if kind == "priority":
        return select_priority(view, pool, judged.start, bound, now, policy.preemption_order == "newest")
    walk = _walk_positions(cluster, policy, gates, now)
    if kind == "rank":
        exempt = judged.reclaim if policy.reclaim_rule == "any" else np.zeros_like(judged.reclaim)
        return ordered_greedy(view, pool, walk, bound, rank_takes(cluster, exempt))
    walked = ordered_greedy(view, pool, walk, bound)
    if policy.preempt_for == "optimal_mini_job":
        return fewest_victims(view, pool, walk, bound, walked)
    return walked


def _wait_gate(view: RequestView, policy: Policy, req: Allocation, gates: Gates) -> str | None:
    if not policy.enabled:
        return "PREEMPTION_DISABLED"
    if policy.paused:
        return "PREEMPTION_PAUSED"
    if not req.preemptive or (policy.kind == "rank" and not gates.session_type.preemptive):
        return "NOT_PREEMPTIVE"
    if policy.kind == "queue" and req.exclusive and "exclusive" not in policy.preempt_jobtypes:
        return "EXCLUSIVE_NOT_PREEMPTIVE"
    if policy.kind == "fair_share" and not gates.starving:
        return "NOT_STARVING"
    if policy.kind == "fair_share" and gates.backoff:
        return "PREEMPTION_BACKOFF"
    if policy.kind == "rank" and not gates.share < gates.fair_share - EPS:
        return "NOT_UNDER_ALLOCATED"
    if not view.usable_if_empty():
        return "NO_USABLE_NODES"
    return None


def decide(cluster: Cluster, policy: Policy, req: Allocation, now: float) -> Decision:
    """Decide one request. Pure: reads only its arguments, changes nothing."""
    view = RequestView(cluster, req)
    gates = _gates(cluster, policy, req, now)

    def judged_now() -> Judged:
        return judge(cluster, view, policy, req, now, gates)

    if view.fits_now():
        # Judging every allocation is only needed for the candidate list: do it when read.
        placed = view.place(view.base_ok)
        assert placed is not None
        return _build(cluster, policy, req, gates, judged_now, "fits", "FITS", (), set(), placed[0], placed[1])
    if req.held_nodes and all(view.is_usable(n) for n in req.held_nodes):
        return _build(cluster, policy, req, gates, judged_now, "wait", "AWAITING_VICTIMS", (), set(),
                      req.held_nodes, ())
    judged = judged_now()

    def finish(outcome: str, code: str, victims: Sequence[int] = (), skipped: set[int] | None = None,
               nodes: Sequence[str] = (), borrowed: Sequence[str] = ()) -> Decision:
        return _build(cluster, policy, req, gates, judged, outcome, code, victims, skipped or set(),
                      nodes, borrowed)

    gate = _wait_gate(view, policy, req, gates)
    if gate is not None:
        return finish("wait", gate)

    chosen: Selection | None = None
    if judged.reclaim.any():
        first = _select(cluster, view, policy, req, now, gates, judged, judged.reclaim)
        if first.victims is not None:
            chosen = first
    if chosen is None:
        chosen = _select(cluster, view, policy, req, now, gates, judged, judged.eligible)
    if chosen.victims is None:
        return finish("wait", chosen.code or "NO_FEASIBLE_SET", skipped=chosen.skipped)
    placed = view.place(view.qualifying_after(chosen.victims))
    assert placed is not None, "a chosen victim set always leaves a placement"
    return finish("preempt", "PREEMPT", chosen.victims, chosen.skipped, placed[0], placed[1])


def _build(cluster: Cluster, policy: Policy, req: Allocation, gates: Gates, judged_or: Judged | Callable[[], Judged],
           outcome: str, code: str, victims: Sequence[int], skipped: set[int],
           nodes: Sequence[str], borrowed: Sequence[str]) -> Decision:
    is_cost = policy.kind == "class_cost"
    if callable(judged_or):
        assert not victims, "victims are chosen from a judged snapshot"
        snapshot_version = (cluster.version, cluster.state_version)

        def judged_later() -> Judged:
            if (cluster.version, cluster.state_version) != snapshot_version:
                raise RuntimeError("the snapshot changed since this decision; read candidates before updating it")
            return judged_or()

        def candidates_later() -> tuple[Candidate, ...]:
            return _candidates(cluster, judged_later(), is_cost, set(), set())

        def summary_later(max_rows: int) -> tuple[tuple[Candidate, ...], dict[str, int]]:
            return _summary(cluster, judged_later(), is_cost, set(), set(), nodes, max_rows)

        return Decision(outcome, code, None, tuple(sorted(nodes)), tuple(sorted(borrowed)), (),
                        explain(req, policy, outcome, code, tuple(sorted(nodes)), (), tuple(sorted(borrowed)),
                                cluster), candidates_later, summary_later)
    judged = judged_or
    cost = judged.cost
    out_victims = []
    for s in sorted(victims, key=lambda x: str(cluster.a_ids[x])):
        a = cluster.objs[s]
        assert a is not None
        if judged.reclaim[s]:
            reason = "reclaim"
        elif gates.sensitive:
            reason = "sensitive"
        else:
            reason = KIND_REASON[policy.kind]
        mode = effective_mode(policy.mode, cluster.session_type(a.session_type).mode)
        out_victims.append(Victim(a.id, reason, victim_action(mode, a.checkpoint),
                                  float(cost[s]) if is_cost and cost is not None else None,
                                  mode if mode != policy.mode else None))
    trigger = None
    if out_victims:
        if gates.sensitive:
            trigger = "sensitive"
        elif any(v.reason == "reclaim" for v in out_victims):
            trigger = "reclaim"
        else:
            trigger = KIND_REASON[policy.kind]
    chosen = set(victims)
    version = (cluster.version, cluster.state_version)

    def candidates() -> tuple[Candidate, ...]:
        if (cluster.version, cluster.state_version) != version:
            raise RuntimeError("the snapshot changed since this decision; read candidates before updating it")
        return _candidates(cluster, judged, is_cost, chosen, skipped)

    def summary(max_rows: int) -> tuple[tuple[Candidate, ...], dict[str, int]]:
        if (cluster.version, cluster.state_version) != version:
            raise RuntimeError("the snapshot changed since this decision; read candidates before updating it")
        return _summary(cluster, judged, is_cost, chosen, skipped, nodes, max_rows)

    text = explain(req, policy, outcome, code, tuple(sorted(nodes)), tuple(out_victims),
                   tuple(sorted(borrowed)), cluster)
    return Decision(outcome, code, trigger, tuple(sorted(nodes)), tuple(sorted(borrowed)),
                    tuple(out_victims), text, candidates, summary)


def _summary(cluster: Cluster, judged: Judged, is_cost: bool, chosen: set[int], skipped: set[int],
             nodes: Sequence[str], max_rows: int) -> tuple[tuple[Candidate, ...], dict[str, int]]:
    """Every candidate up to ``max_rows``; beyond, the victims and every candidate on the
    decision's nodes, with counts per code for the others (the judged counts less those rows:
    no pass over every slot)."""
    if int(judged.counts.sum()) <= max_rows:
        return _candidates(cluster, judged, is_cost, chosen, skipped), {}
    grouped, starts = node_entries(cluster)
    here = [grouped[starts[i]:starts[i + 1]] for i in sorted(cluster.node_index[n] for n in nodes)]
    near_slots = np.unique(np.concatenate([cluster.e_alloc[e] for e in here] + [np.array(sorted(chosen),
                                                                                         dtype=np.int64)]))
    near_slots = near_slots[judged.codes[near_slots] >= 0]
    rows = _candidates(cluster, judged, is_cost, chosen, skipped, near_slots)
    counts = judged.counts - np.bincount(judged.codes[near_slots].astype(np.int64), minlength=len(CODES))
    named = {("NOT_NEEDED" if k == 0 else CODES[k]): int(counts[k]) for k in np.flatnonzero(counts).tolist()}
    return rows, named


def _candidates(cluster: Cluster, judged: Judged, is_cost: bool, chosen: set[int],
                skipped: set[int], only: IArr | None = None) -> tuple[Candidate, ...]:
    codes, cost = judged.codes, judged.cost
    rows = []
    for s in (np.flatnonzero(codes >= 0) if only is None else only).tolist():
        ident = str(cluster.a_ids[s])
        c = float(cost[s]) if is_cost and cost is not None and codes[s] == 0 else None
        if s in chosen:
            rows.append(Candidate(ident, "victim", "SELECTED", c))
        elif s in skipped:
            rows.append(Candidate(ident, "ineligible", "NOT_OVER_ALLOCATED"))
        elif codes[s] == 0:
            rows.append(Candidate(ident, "spared", "NOT_NEEDED", c))
        else:
            rows.append(Candidate(ident, "ineligible", CODES[int(codes[s])]))
    rows.sort(key=lambda c: c.id)
    return tuple(rows)
