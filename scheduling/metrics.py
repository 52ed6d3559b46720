"""Prometheus metrics at /metrics, derived from the database at scrape time.

Workers, web processes and agents' consumers are separate processes; counting
from the records (decisions, events) keeps every figure correct across all of
them and across restarts. Records are append-only, so each scrape folds the
settled ones past a mark into MetricRollup and counts only the rest: the cost
of a scrape follows the last few minutes of activity, not the whole history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, F, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from nodes.models import Node
from scheduling.metrics_cluster import cluster_metrics
from scheduling.models import (
    Allocation,
    AllocationEvent,
    MetricRollup,
    PreemptionDecision,
    ResourceGroup,
)
from scheduling.models.secrets import HashedToken
from scheduling.passes.fairshare import STATUSES, standings
from scheduling.permissions import is_operator
from scheduling.states import State

CHECKPOINT_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 900]
# The engine's time per decision, in seconds: most take well under a millisecond.
DECISION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0]


# Records older than this are committed (every transaction is far shorter: tasks are stopped at
# 120 s) and get folded into the rollup; younger ones are counted live at each scrape.
SETTLED = timedelta(minutes=5)
Counts = Counter[str]


def _from_decisions(rows: QuerySet[PreemptionDecision]) -> Counts:
    out: Counts = Counter()
    for victims, in rows.filter(outcome="executed").values_list("victims").iterator():
        for v in victims or []:
            out[f"preemptions|{v.get('vcluster') or ''}|{v.get('reason', '')}"] += 1
    return out


def _from_events(rows: QuerySet[AllocationEvent]) -> Counts:
    out: Counts = Counter()
    out["requeued"] += rows.filter(reason__startswith="requeued after preemption").count()
    out["failed_checkpoint"] += rows.filter(to_state=State.FAILED, reason__startswith="checkpoint").count()
    for started, done in rows.filter(to_state=State.SUSPENDED, reason__startswith="checkpoint done").values_list(
            "allocation__checkpoint_started_at", "allocation__last_checkpoint_at").iterator():
        if started is None or done is None:
            continue
        seconds = max(0.0, (done - started).total_seconds())
        out["checkpoint|count"] += 1
        out["checkpoint|sum"] += seconds  # type: ignore[assignment]
        for bucket in CHECKPOINT_BUCKETS:
            if seconds <= bucket:
                out[f"checkpoint|le|{bucket}"] += 1
    return out


def _latencies(rows: QuerySet[PreemptionDecision]) -> Counts:
    """The decision-latency histogram: each record's engine time, measured by the pass that made it
    (in whichever process) and stored with the record, so the web process answering the scrape
    sees the worker's decisions."""
    out: Counts = Counter()
    for ms, in rows.filter(latency_ms__isnull=False).values_list("latency_ms").iterator():
        seconds = max(0.0, ms / 1000)
        out["decision|count"] += 1
        out["decision|sum"] += seconds  # type: ignore[assignment]
        for bucket in DECISION_BUCKETS:
            if seconds <= bucket:
                out[f"decision|le|{bucket}"] += 1
    return out


SOURCES: list[tuple[str, Any, Callable[[Any], Counts]]] = [
    ("mark:decisions", PreemptionDecision, _from_decisions),
    ("mark:latency", PreemptionDecision, _latencies),
    ("mark:events", AllocationEvent, _from_events),
]


def fold(now: datetime | None = None) -> Counts:
    """Fold settled records past each mark into the rollup (one scrape at a time), then add the
    records not folded yet. Safe to run concurrently and any number of times."""
    cutoff = (now or timezone.now()) - SETTLED
    for key, _, _ in SOURCES:
        MetricRollup.objects.get_or_create(key=key)
    with transaction.atomic():
        marks = {m.key: m for m in MetricRollup.objects.select_for_update().filter(key__startswith="mark:")}
        adds: Counts = Counter()
        for key, model, count in SOURCES:
            mark = int(marks[key].value)
            # Up to the first record that is not settled yet, so nothing is ever skipped.
            unsettled = model.objects.filter(id__gt=mark, created_at__gte=cutoff).order_by("id").values_list(
                "id", flat=True).first()
            top = (unsettled - 1) if unsettled is not None else (
                model.objects.filter(id__gt=mark).order_by("-id").values_list("id", flat=True).first() or mark)
            if top > mark:
                adds += count(model.objects.filter(id__gt=mark, id__lte=top))
                MetricRollup.objects.filter(key=key).update(value=top)
                marks[key].value = top
        for name, value in adds.items():
            row, _ = MetricRollup.objects.get_or_create(key=name)
            MetricRollup.objects.filter(pk=row.pk).update(value=F("value") + value)
    totals: Counts = Counter({k: v for k, v in MetricRollup.objects.exclude(key__startswith="mark:")
                              .values_list("key", "value")})  # type: ignore[misc]
    for key, model, count in SOURCES:
        totals += count(model.objects.filter(id__gt=int(marks[key].value)))
    return totals


class LatticeCollector(Collector):
    def collect(self) -> Iterator[object]:
        totals = fold()
        preemptions = CounterMetricFamily("lattice_preemptions", "Victims preempted, by victim vCluster and reason",
                                          labels=["vcluster", "reason"])
        for key in sorted(k for k in totals if k.startswith("preemptions|")):
            _, vc, reason = key.split("|", 2)
            preemptions.add_metric([vc, reason], totals[key])
        yield preemptions

        durations = HistogramMetricFamily("lattice_preemption_checkpoint_duration_seconds",
                                          "Time from checkpoint hint to checkpoint completion")
        buckets = [(str(b), totals[f"checkpoint|le|{b}"]) for b in CHECKPOINT_BUCKETS]
        buckets.append(("+Inf", totals["checkpoint|count"]))
        durations.add_metric([], buckets, sum_value=totals["checkpoint|sum"])
        yield durations

        requeued = CounterMetricFamily("lattice_preemption_victim_requeue", "Preempted allocations re-entering the queue")
        requeued.add_metric([], totals["requeued"])
        yield requeued

        failed = CounterMetricFamily("lattice_preemption_failed_checkpoint", "Checkpoint timeouts or failures")
        failed.add_metric([], totals["failed_checkpoint"])
        yield failed

        decisions = HistogramMetricFamily("lattice_decision_seconds", "Engine time per decision the passes recorded")
        buckets = [(str(b), totals[f"decision|le|{b}"]) for b in DECISION_BUCKETS]
        buckets.append(("+Inf", totals["decision|count"]))
        decisions.add_metric([], buckets, sum_value=totals["decision|sum"])
        yield decisions

        latency = GaugeMetricFamily("lattice_decision_latency_ms", "Mean engine latency of the last 1,000 decisions")
        recent = PreemptionDecision.objects.order_by("-id").values_list("id", flat=True)[999:1000]
        floor = recent[0] if recent else 0
        latency.add_metric([], PreemptionDecision.objects.filter(id__gte=floor).aggregate(v=Avg("latency_ms"))["v"] or 0.0)
        yield latency

        queue = GaugeMetricFamily("lattice_pending_queue_length", "Pending allocations", labels=["resource_group"])
        pending = dict(Allocation.objects.filter(state=State.PENDING).values_list("resource_group_id").annotate(
            n=Count("id")).values_list("resource_group_id", "n"))
        for pk, name in ResourceGroup.objects.order_by("name").values_list("pk", "name"):  # an empty queue is 0
            queue.add_metric([name], pending.get(pk, 0))
        yield queue

        yield from _tenant_shares()
        yield from cluster_metrics()

        agents = GaugeMetricFamily("lattice_connected_agents", "Nodes whose agent is connected (ready or degraded)")
        agents.add_metric([], Node.objects.filter(state__in=["ready", "degraded", "draining"],
                                                  last_heartbeat_at__isnull=False).count())
        yield agents


def _tenant_shares() -> Iterator[object]:
    """Each tenant's tracked share in each fair_share group and whether it starves (0: no,
    1: starving, 2: aggressively starving), as the group's policy judges now."""
    share = GaugeMetricFamily("lattice_tenant_share", "Tenant's dominant usage share of the resource group",
                              labels=["resource_group", "tenant"])
    starving = GaugeMetricFamily("lattice_tenant_starving", "1 starving, 2 aggressively starving, 0 neither",
                                 labels=["resource_group", "tenant"])
    now = timezone.now()
    for group in ResourceGroup.objects.filter(tenant_shares__isnull=False).distinct().order_by("name"):
        for row in standings(group, now):
            share.add_metric([group.name, row.tenant], row.share)
            starving.add_metric([group.name, row.tenant], STATUSES.index(row.status) - 1 if row.starving else 0)
    yield share
    yield starving


def scrape_allowed(request: HttpRequest) -> bool | None:
    """True to serve; False for a missing or wrong bearer token (401); None when metrics are
    closed to this request altogether (403)."""
    if is_operator(getattr(request, "user", None)):
        return True
    wanted = settings.METRICS_TOKEN_SHA256
    if not wanted:
        return True if settings.METRICS_PUBLIC else None
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return False
    return HashedToken.matches(wanted, token)


def metrics_view(request: HttpRequest) -> HttpResponse:
    allowed = scrape_allowed(request)
    if allowed is False:
        response = HttpResponse("Metrics need 'Authorization: Bearer <token>'.\n", status=401,
                                content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if allowed is None:
        return HttpResponse("Metrics are closed: set METRICS_TOKEN_SHA256 for the scraper "
                            "(manage.py metrics_token).\n", status=403, content_type="text/plain; charset=utf-8")
    registry = CollectorRegistry()
    registry.register(LatticeCollector())
    return HttpResponse(generate_latest(registry), content_type="text/plain; version=0.0.4; charset=utf-8")
