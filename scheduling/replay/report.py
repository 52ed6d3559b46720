"""A replay's figures as the JSON report (schema in docs/replay.md): one section per policy and,
with more than one, the differences of each against the first. Nothing here depends on the wall
clock, so the same trace, cluster, policies and seed give the same report, byte for byte."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from scheduling.engine import model as em

from .stats import Recorder
from .trace import Job

SCHEMA = "lattice.replay/1"
TAU = 10.0  # bounded slowdown's floor on run time, seconds
COMPARED = ("gpu_utilisation", "node_utilisation", "wait_p50_s", "wait_p95_s", "wait_p99_s",
            "bounded_slowdown_mean", "preemptions", "victims", "gpu_hours_lost", "checkpoint_gpu_hours",
            "starving_hours", "never_started", "makespan_s")


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits) + 0.0


def _waits(values: list[float]) -> dict[str, Any]:
    return {"count": len(values), "p50_s": _r(pct(values, 0.5), 1), "p95_s": _r(pct(values, 0.95), 1),
            "p99_s": _r(pct(values, 0.99), 1), "mean_s": _r(sum(values) / len(values), 1) if values else None}


def policy_report(name: str, policy: em.Policy, jobs: list[Job], rec: Recorder) -> dict[str, Any]:
    span = max(rec.now - rec.start, 1e-9)
    waits: list[float] = []
    by: dict[str, dict[Any, list[float]]] = {"class": defaultdict(list), "priority": defaultdict(list),
                                             "tenant": defaultdict(list)}
    slowdowns: list[float] = []
    for j in jobs:
        start = rec.first_start.get(j.id)
        if start is None:
            continue
        w = start - j.submit
        waits.append(w)
        by["class"][j.preemption_class].append(w)
        by["priority"][j.priority].append(w)
        by["tenant"][j.tenant].append(w)
        end = rec.finish.get(j.id)
        if end is not None:
            slowdowns.append(max(1.0, (end - j.submit) / max(j.run, TAU)))
    summary = {
        "jobs": len(jobs), "started": len(waits), "never_started": len(jobs) - len(waits),
        "finished": len(rec.finish), "makespan_s": _r(span, 1),
        "gpu_utilisation": _r(rec.gpu_area / (rec.total_gpus * span)) if rec.total_gpus else None,
        "node_utilisation": _r(rec.node_area / (rec.node_count * span)) if rec.node_count else None,
        "mean_queue_depth": _r(rec.queue_area / span, 2),
        "wait_p50_s": _r(pct(waits, 0.5), 1), "wait_p95_s": _r(pct(waits, 0.95), 1),
        "wait_p99_s": _r(pct(waits, 0.99), 1),
        "bounded_slowdown_mean": _r(sum(slowdowns) / len(slowdowns), 3) if slowdowns else None,
        "bounded_slowdown_p95": _r(pct(slowdowns, 0.95), 3),
        "preemptions": rec.decisions, "victims": sum(rec.preemptions.values()),
        "gpu_hours_lost": _r(rec.lost_gpu_s / 3600, 3), "checkpoint_gpu_hours": _r(rec.checkpoint_gpu_s / 3600, 3),
        "walltime_kills": rec.walltime_kills, "stopped_for_good": rec.dropped,
        "starving_hours": _r(sum(u.starving_s for u in rec.tenants.values()) / 3600, 3),
    }
    return {
        "name": name, "policy": _policy_doc(policy), "summary": summary,
        "wait": {"overall": _waits(waits),
                 **{f"by_{k}": {str(g): _waits(v) for g, v in sorted(groups.items())} for k, groups in by.items()}},
        "preemption": {"victims_by_reason": dict(sorted(rec.preemptions.items())),
                       "victims_per_preemption": {str(k): v for k, v in sorted(rec.victims_per.items())}},
        "tenants": _tenants(rec, span),
        "series": _series(rec),
    }


def _policy_doc(policy: em.Policy) -> dict[str, Any]:
    return {f: (list(v) if isinstance(v, tuple) else v) for f in policy.__dataclass_fields__
            if (v := getattr(policy, f)) is not None}


def _tenants(rec: Recorder, span: float) -> dict[str, Any]:
    out = {}
    for name, use in sorted(rec.tenants.items()):
        out[name] = {"fair_share": _r(use.fair_share), "gpu_hours": _r(use.gpu_seconds / 3600, 3),
                     "mean_share": _r(use.gpu_seconds / (rec.total_gpus * span)) if rec.total_gpus else None,
                     "below_fair_share_hours": _r(use.below_s / 3600, 3),
                     "starving_hours": _r(use.starving_s / 3600, 3)}
    return out


def _series(rec: Recorder, top: int = 6) -> dict[str, Any]:
    """Per bin of virtual time: mean GPU and node use, mean queue depth, preemptions, and the mean
    share of the tenants that used most."""
    n = max(len(rec.gpu_bins), len(rec.queue_bins), len(rec.preempt_bins), 1)
    width = rec.bins.width

    def mean(sums: list[float], scale: float) -> list[float | None]:
        return [_r((sums[i] if i < len(sums) else 0.0) / (width * scale)) for i in range(n)]

    heavy = sorted(rec.tenants.items(), key=lambda kv: (-kv[1].gpu_seconds, kv[0]))[:top]
    return {"bin_s": width, "start": rec.start, "gpu_utilisation": mean(rec.gpu_bins, rec.total_gpus or 1),
            "node_utilisation": mean(rec.node_bins, rec.node_count or 1), "queue_depth": mean(rec.queue_bins, 1),
            "preemptions": [int(rec.preempt_bins[i]) if i < len(rec.preempt_bins) else 0 for i in range(n)],
            "tenant_share": {name: {"fair_share": _r(u.fair_share), "share": mean(u.bins, rec.total_gpus or 1)}
                             for name, u in heavy}}


def comparison(policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each policy after the first against the first: the value of each figure and the difference."""
    base = policies[0]
    out = []
    for other in policies[1:]:
        rows = {}
        for key in COMPARED:
            a, b = base["summary"].get(key), other["summary"].get(key)
            rows[key] = {"baseline": a, "other": b,
                         "difference": _r(b - a) if isinstance(a, int | float) and isinstance(b, int | float) else None}
        out.append({"baseline": base["name"], "other": other["name"], "figures": rows})
    return out


def report(trace: dict[str, Any], cluster: dict[str, Any], settings: dict[str, Any],
           policies: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": SCHEMA, "trace": trace, "cluster": cluster, "settings": settings, "policies": policies,
            "comparison": comparison(policies) if len(policies) > 1 else []}
