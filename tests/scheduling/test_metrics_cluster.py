"""/metrics: GPUs by state, tenants' GPU-hours as a counter, the decision-latency histogram,
each checked against figures worked out by hand in the test."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from nodes.models import Node
from scheduling.metrics import fold
from scheduling.metrics_cluster import tenant_gpu_seconds
from scheduling.models import AllocationEvent, MetricRollup, PreemptionDecision, VCluster
from scheduling.passes.run import schedule_pass
from tests.scheduling.test_accounting import history

pytestmark = pytest.mark.django_db


def _scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _gpus(scrape, group):
    return {state: scrape[("lattice_gpus", (("resource_group", group), ("state", state)))]
            for state in ("in_use", "borrowed", "held", "free")}


def test_gpus_by_state_partition_the_up_nodes(client, resource_group, vcluster_hpc, make_allocation):
    ai = VCluster.objects.create(resource_group=resource_group, name="ai", type="hpc_batch")

    def node(name, **fields):
        return Node.objects.create(name=name, resource_group=resource_group, vcluster=vcluster_hpc, gpu=8, cpu=64,
                                   memory=512, **{"state": "ready", **fields})

    busy, lent, victim_node, _idle = node("n-busy"), node("n-lent", borrowed_by=ai), node("n-victim"), node("n-idle")
    node("n-down", state="down")  # no capacity: left out
    running = make_allocation(state="running", node_count=1, per_node_gpu=6)
    running.placements.create(node=busy, gpu=6)
    borrower = make_allocation(state="running", node_count=1, per_node_gpu=3, vcluster=ai)
    borrower.placements.create(node=lent, gpu=3)
    # A victim still leaving 2 GPUs of a node held for a preemptor that needs 8: 6 are free now
    # and reserved for it.
    leaving = make_allocation(state="checkpointing", node_count=1, per_node_gpu=2)
    leaving.placements.create(node=victim_node, gpu=2)
    preemptor = make_allocation(state="pending", node_count=1, per_node_gpu=8)
    preemptor.placements.create(node=victim_node, kind="held")

    got = _gpus(_scrape(client), resource_group.name)
    # By hand: 4 up nodes x 8 = 32 GPUs. In use 6 + 2, borrowed 3, held 8 - 2 = 6, free 32 - 17 = 15.
    assert got == {"in_use": 8, "borrowed": 3, "held": 6, "free": 15}


def test_tenant_gpu_hours_fold_the_settled_history_and_count_running_work(client, make_allocation, tenant_physics,
                                                                          tenant_chemistry):
    now = timezone.now()
    done = make_allocation(node_count=2, per_node_gpu=4)
    history(done, [("pending", now - timedelta(hours=5)), ("running", now - timedelta(hours=4)),
                   ("completed", now - timedelta(hours=2, minutes=30))])  # 1.5 h x 8 GPUs = 12 GPU-hours
    open_since = now - timedelta(minutes=30)
    running = make_allocation(node_count=1, per_node_gpu=2)
    history(running, [("pending", now - timedelta(hours=1)), ("running", open_since)])  # 2 GPUs, still running

    before = timezone.now()
    got = _scrape(client)[("lattice_tenant_gpu_hours_total", (("tenant", "physics"),))]
    after = timezone.now()
    low = 12 + 2 * (before - open_since).total_seconds() / 3600
    high = 12 + 2 * (after - open_since).total_seconds() / 3600
    assert low <= got <= high
    assert _scrape(client)[("lattice_tenant_gpu_hours_total", (("tenant", "chemistry"),))] == 0
    # The settled part is now in the rollup: the first completed job's 12 h and the running one's
    # first minutes, up to five minutes ago; later scrapes read only what came after the mark.
    mark = MetricRollup.objects.get(key="gpuh:until").value
    assert before.timestamp() - 301 <= mark <= after.timestamp() - 299
    folded = MetricRollup.objects.get(key=f"gpuh:t:{tenant_physics.pk}").value
    assert folded == pytest.approx(12 * 3600 + 2 * (mark - open_since.timestamp()), abs=1e-3)

    # A later scrape counts on from the mark: more, by the running work's time since.
    later = _scrape(client)[("lattice_tenant_gpu_hours_total", (("tenant", "physics"),))]
    assert later >= got


def test_tenant_gpu_hours_never_go_down_when_history_is_written_late(make_allocation, tenant_physics):
    now = timezone.now()
    running = history(make_allocation(node_count=1, per_node_gpu=4),
                      [("pending", now - timedelta(hours=2)), ("running", now - timedelta(hours=1))])
    first = tenant_gpu_seconds(now)[tenant_physics.pk]
    assert first == pytest.approx(4 * 3600, abs=1e-6)
    # The job's end, committed late with a time half an hour before what was already counted.
    end = AllocationEvent.objects.create(allocation=running, from_state="running", to_state="completed")
    AllocationEvent.objects.filter(pk=end.pk).update(created_at=now - timedelta(minutes=30))
    running.state, running.state_changed_at = "completed", now - timedelta(minutes=30)
    running.save(update_fields=["state", "state_changed_at"])
    assert tenant_gpu_seconds(now + timedelta(minutes=1))[tenant_physics.pk] == first


def test_decision_latency_histogram_counts_the_recorded_decisions(client, resource_group, node_gpu_a,
                                                                  make_allocation):
    for _ in range(3):
        make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=5)
    schedule_pass(resource_group.pk)  # one starts, two wait: each decision recorded with its latency
    # Records written by another process (the worker) are read the same way: from the table.
    PreemptionDecision.objects.filter(pk=PreemptionDecision.objects.order_by("id").first().pk).update(latency_ms=0.3)
    PreemptionDecision.objects.filter(pk=PreemptionDecision.objects.order_by("id").last().pk).update(latency_ms=40)
    latencies = [ms / 1000 for ms in PreemptionDecision.objects.values_list("latency_ms", flat=True)]
    assert len(latencies) >= 2
    got = _scrape(client)
    assert got[("lattice_decision_seconds_count", ())] == len(latencies)
    assert got[("lattice_decision_seconds_sum", ())] == pytest.approx(sum(latencies))
    for le in ("0.0005", "0.05", "+Inf"):
        bound = float(le)
        assert got[("lattice_decision_seconds_bucket", (("le", le),))] == sum(1 for s in latencies if s <= bound)
    assert got[("lattice_decision_seconds_bucket", (("le", "0.025"),))] < len(latencies)  # the 40 ms one

    # Folded into the rollup once settled, and still counted once.
    fold(now=timezone.now() + timedelta(hours=1))
    again = _scrape(client)
    assert again[("lattice_decision_seconds_count", ())] == len(latencies)
    assert again[("lattice_decision_seconds_sum", ())] == pytest.approx(sum(latencies))
