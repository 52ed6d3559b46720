"""Failed work goes back to the queue as a fresh copy when its requeue policy says so, at most
max_requeue times; a victim whose checkpoint timed out fails, and is requeued the same way."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.actions.lifecycle import allocation_deadline, allocation_exited
from scheduling.models import Allocation
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


def _job(make_allocation, vcluster, klass=1, **kw):
    return make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=klass,
                           checkpoint="auto", vcluster=vcluster, **kw)


def _copies(alloc):
    return list(Allocation.objects.filter(requeued_from=alloc))


def test_always_requeues_a_failed_run_up_to_max_requeue(resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    first = _job(make_allocation, vcluster_hpc, requeue_policy="always", max_requeue=1)
    schedule_pass(resource_group.pk)
    allocation_exited(allocation=Allocation.objects.get(pk=first.pk), exit_code=1, reason="failed")
    [second] = _copies(first)
    assert (second.state, second.requeue_count, second.submitted_at) == ("pending", 1, first.submitted_at)
    assert Allocation.objects.get(pk=first.pk).state == "failed"
    assert (Allocation.objects.get(pk=first.pk).run, second.run) == (1, 0)  # a copy has run nowhere yet

    schedule_pass(resource_group.pk)
    assert Allocation.objects.get(pk=second.pk).run == 1  # its own first run
    allocation_exited(allocation=Allocation.objects.get(pk=second.pk), exit_code=1, reason="failed")
    assert Allocation.objects.get(pk=second.pk).state == "failed"
    assert _copies(second) == []  # max_requeue reached


@pytest.mark.parametrize(("policy", "copies"), [("always", 1), ("on_node_failure", 0), ("never", 0)])
def test_a_victim_whose_checkpoint_timed_out_fails_and_is_requeued_if_its_policy_allows(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, policy, copies):
    low = _job(make_allocation, vcluster_hpc, requeue_policy=policy)
    schedule_pass(resource_group.pk)
    _job(make_allocation, vcluster_hpc, klass=7)
    schedule_pass(resource_group.pk)
    low.refresh_from_db()
    assert low.state == "checkpointing"
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))  # never answered
    low.refresh_from_db()
    assert low.state == "terminating" and _copies(low) == []  # no copy while it may still run
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))  # killed after the grace
    assert Allocation.objects.get(pk=low.pk).state == "failed"
    assert [(c.state, c.requeue_count) for c in _copies(low)] == [("pending", 1)] * copies


def test_a_victim_that_exits_while_checkpointing_fails_and_is_requeued_if_always(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    low = _job(make_allocation, vcluster_hpc, requeue_policy="always")
    schedule_pass(resource_group.pk)
    _job(make_allocation, vcluster_hpc, klass=7)
    schedule_pass(resource_group.pk)
    allocation_exited(allocation=Allocation.objects.get(pk=low.pk), exit_code=1, reason="failed")
    assert Allocation.objects.get(pk=low.pk).state == "failed"
    assert [c.state for c in _copies(low)] == ["pending"]


@pytest.mark.parametrize("how", ["timed out", "failed", "exited"])
def test_every_way_a_checkpoint_fails_counts_as_a_failed_checkpoint(
        client, settings, resource_group, vcluster_hpc, node_gpu_a, make_allocation, how):
    from prometheus_client.parser import text_string_to_metric_families

    from scheduling.actions.preemption import allocation_checkpoint_done

    settings.METRICS_PUBLIC = True
    low = _job(make_allocation, vcluster_hpc)
    schedule_pass(resource_group.pk)
    _job(make_allocation, vcluster_hpc, klass=7)
    schedule_pass(resource_group.pk)
    low = Allocation.objects.get(pk=low.pk)
    if how == "timed out":
        allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))
        allocation_exited(allocation=Allocation.objects.get(pk=low.pk), exit_code=-15, reason="terminated")
    elif how == "failed":
        allocation_checkpoint_done(allocation=low, ok=False, error="disk full")
        low = Allocation.objects.get(pk=low.pk)
        allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))  # killed, no exit
    else:
        allocation_exited(allocation=low, exit_code=137, reason="failed")
    assert Allocation.objects.get(pk=low.pk).state == "failed"
    body = client.get("/metrics").content.decode()
    [family] = [f for f in text_string_to_metric_families(body) if f.name == "lattice_preemption_failed_checkpoint"]
    assert [s.value for s in family.samples if s.name.endswith("_total")] == [1]
