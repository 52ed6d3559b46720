"""Prometheus metrics at /metrics, derived from the database at scrape time.

Workers, web processes and agents' consumers are separate processes; counting
from the records (decisions, events) keeps every figure correct across all of
them and across restarts, with a few aggregate queries per scrape.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Avg, Count
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from scheduling.models import Allocation, AllocationEvent, PreemptionDecision
from scheduling.states import State

CHECKPOINT_BUCKETS = [1, 5, 15, 30, 60, 120, 300, 600, 900]


class LatticeCollector(Collector):
    def collect(self) -> Iterator[object]:
        preemptions = CounterMetricFamily("lattice_preemptions", "Victims preempted, by victim vCluster and reason",
                                          labels=["vcluster", "reason"])
        rows: dict[tuple[str, str], int] = {}
        for victims, in PreemptionDecision.objects.filter(outcome="executed").values_list("victims").iterator():
            for v in victims or []:
                key = (v.get("vcluster") or "", v.get("reason", ""))
                rows[key] = rows.get(key, 0) + 1
        for (vc, reason), n in sorted(rows.items()):
            preemptions.add_metric([vc, reason], n)
        yield preemptions

        durations = HistogramMetricFamily("lattice_preemption_checkpoint_duration_seconds",
                                          "Time from checkpoint hint to checkpoint completion")
        values = [a.last_checkpoint_at - a.checkpoint_started_at for a in Allocation.objects.filter(
            last_checkpoint_at__isnull=False, checkpoint_started_at__isnull=False).only(
            "last_checkpoint_at", "checkpoint_started_at").iterator()]
        seconds = [max(0.0, d.total_seconds()) for d in values]
        buckets = [(str(b), sum(1 for s in seconds if s <= b)) for b in CHECKPOINT_BUCKETS]
        buckets.append(("+Inf", len(seconds)))
        durations.add_metric([], buckets, sum_value=sum(seconds))
        yield durations

        requeued = CounterMetricFamily("lattice_preemption_victim_requeue", "Preempted allocations re-entering the queue")
        requeued.add_metric([], AllocationEvent.objects.filter(reason__startswith="requeued after preemption").count())
        yield requeued

        failed = CounterMetricFamily("lattice_preemption_failed_checkpoint", "Checkpoint timeouts or failures")
        failed.add_metric([], AllocationEvent.objects.filter(to_state=State.FAILED, reason__startswith="checkpoint").count())
        yield failed

        latency = GaugeMetricFamily("lattice_decision_latency_ms", "Mean engine latency of the last 1,000 decisions")
        recent = PreemptionDecision.objects.order_by("-id").values_list("id", flat=True)[999:1000]
        floor = recent[0] if recent else 0
        latency.add_metric([], PreemptionDecision.objects.filter(id__gte=floor).aggregate(v=Avg("latency_ms"))["v"] or 0.0)
        yield latency

        queue = GaugeMetricFamily("lattice_pending_queue_length", "Pending allocations", labels=["resource_group"])
        for name, n in Allocation.objects.filter(state=State.PENDING).values_list("resource_group__name").annotate(
                n=Count("id")).order_by("resource_group__name"):
            queue.add_metric([name], n)
        yield queue

        from nodes.models import Node

        agents = GaugeMetricFamily("lattice_connected_agents", "Nodes whose agent is connected (ready or degraded)")
        agents.add_metric([], Node.objects.filter(state__in=["ready", "degraded", "draining"],
                                                  last_heartbeat_at__isnull=False).count())
        yield agents


def metrics_view(request: HttpRequest) -> HttpResponse:
    registry = CollectorRegistry()
    registry.register(LatticeCollector())
    return HttpResponse(generate_latest(registry), content_type="text/plain; version=0.0.4; charset=utf-8")
