"""A class_cost group's queue ordered by the Lattice score (scheduling/engine/score.py).

Everything the terms need is read once per pass: the snapshot already holds the nodes (labels,
states, capacity) and the tenants' shares; one query brings the vClusters' weights, one the
tenants' budgets, and the GPU-hours used this month come from the history at most once a minute
(passes/budget.py). Each request's score and terms are kept for the record of its wait.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from scheduling.engine import score as es
from scheduling.models import Quota, VCluster
from scheduling.models.cluster import DEFAULT_WEIGHTS
from scheduling.passes.budget import used_by_tenant
from scheduling.passes.fairshare import Standing, standing_by_tenant
from scheduling.passes.snapshot import Snapshot

# Pending requests scored per pass (in class order); past these the tail keeps the class order.
SCORED_WINDOW = 4000
# A waiting request's decision is recorded again when its score moved by more than this since
# the last record (besides whenever its reason changes), so what a tenant reads stays current.
SCORE_DRIFT = 0.05
# Requests outside any vCluster are weighed as HPC batch.
FALLBACK_WEIGHTS = DEFAULT_WEIGHTS["hpc_batch"]


class QueueScorer:
    """Scores a pass's pending rows and orders them, highest score first (then class, priority,
    submission, id); ``scores`` keeps each row's score for its wait record."""

    def __init__(self, snap: Snapshot, now: datetime, standing: dict[int, Standing] | None = None) -> None:
        self.snap = snap
        self.now = now
        self.standing = standing
        self.scores: dict[int, es.Score] = {}

    def order(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.scores = score_rows(self.snap, rows, self.now, self.standing)
        return sorted(rows, key=self.key)

    def key(self, r: dict[str, Any]) -> tuple:
        """The order of a scored row: smaller first (``order`` sorts by it, the queue view shows it)."""
        return (-round(self.scores[r["id"]].total, 9), -r["preemption_class"], -r["priority"], r["submitted_at"],
                r["id"])

    def record_of(self, alloc_id: int) -> dict[str, Any] | None:
        scored = self.scores.get(alloc_id)
        return scored.to_dict() if scored is not None else None


def score_rows(snap: Snapshot, rows: list[dict[str, Any]], now: datetime,
               standing: dict[int, Standing] | None = None) -> dict[int, es.Score]:
    """Each pending row's score (rows: ``values()`` of the queue with ``tenant_id``). The
    fair-share term reads the tenants' tracked shares (``standing``: the pass's
    ``fairshare.track``, else the stored rows), the same figure the group's shares show."""
    if not rows:
        return {}
    group = snap.group
    weights = {v.name: v.effective_weights() for v in VCluster.objects.filter(resource_group=group)}
    budgets = dict(Quota.objects.filter(tenant_id__in={r["tenant_id"] for r in rows})
                   .values_list("tenant_id", "gpu_hours_budget"))
    used = used_by_tenant(budgets, now)
    nodes = _Nodes(snap)
    backlog = es.f_backlog(sum(r["node_count"] * r["per_node_gpu"] for r in rows), nodes.gpus)
    timeout = snap.policy.checkpoint_timeout_minutes
    standing = standing if standing is not None else standing_by_tenant(group, now)
    out = {}
    for r in rows:
        constraints = r["constraints"] or {}
        terms = {
            "f1": es.f_priority(r["preemption_class"]),
            "f2": es.f_wait((now - r["submitted_at"]).total_seconds()),
            "f3": _fair_share_term(snap, standing.get(r["tenant_id"]), r["tenant__name"]),
            "f4": es.f_topology(r["node_count"], nodes.groups(constraints.get("same"))),
            "f6": backlog,
            "f8": es.f_checkpoint(r["checkpoint"], r["checkpoint_minutes"], timeout),
            "f9": es.f_conformance(r["node_count"], nodes.matching(constraints.get("labels"))),
        }
        budget = budgets.get(r["tenant_id"])
        share = es.budget_used(used.get(r["tenant_id"], 0.0), budget)
        out[r["id"]] = es.combine(weights.get(r["vcluster__name"], FALLBACK_WEIGHTS), terms, share)
    return out


def _fair_share_term(snap: Snapshot, tracked: Standing | None, tenant: str) -> float:
    """f3 from the tenant's tracked share; a tenant with no row (no fair share and no use, or a
    group no pass has tracked yet) from its quota and the snapshot."""
    if tracked is not None:
        return es.f_fair_share(tracked.fair_share, tracked.share)
    return es.f_fair_share(snap.cluster.tenant(tenant).fair_share, snap.cluster.tenant_share(tenant))


class _Nodes:
    """The group's usable nodes as the topology and conformance terms read them, each answer
    computed once per pass."""

    def __init__(self, snap: Snapshot) -> None:
        cluster = snap.cluster
        self.usable = [n for n in cluster.nodes.values() if n.state == "ready"]
        gpu = cluster.res_index.get("gpu")
        self.gpus = float(cluster.total[gpu]) if gpu is not None and len(cluster.total) else 0.0
        self._groups: dict[str, list[int] | None] = {}
        self._matching: dict[tuple[tuple[str, str], ...], int] = {}

    def groups(self, label: Any) -> list[int] | None:
        if not isinstance(label, str) or not label:
            return None
        if label not in self._groups:
            sizes = Counter(n.labels[label] for n in self.usable if label in n.labels)
            self._groups[label] = list(sizes.values()) or None
        return self._groups[label]

    def matching(self, labels: Any) -> int | None:
        if not isinstance(labels, dict) or not labels:
            return None
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        if key not in self._matching:
            self._matching[key] = sum(all(n.labels.get(k) == v for k, v in key) for n in self.usable)
        return self._matching[key]


def drifted(previous: float | None, current: dict[str, Any] | None) -> bool:
    """Whether a wait's record should be written again for its score alone."""
    if current is None:
        return False
    return previous is None or abs(float(current["score"]) - previous) > SCORE_DRIFT
