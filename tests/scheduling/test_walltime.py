"""Walltime, enforced: running work that has run its ``walltime_minutes`` is stopped through the
terminate path (its nodes kept until it is gone), then fails with the reason; requeued only under
``requeue_policy: always``. Before, nothing stopped it, and past its walltime the engine kept it
protected as near completion for ever: a walltime of one minute made work unpreemptable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.actions.lifecycle import allocation_deadline, allocation_exited, sweep
from scheduling.models import Allocation, Placement, PreemptionDecision
from scheduling.passes.run import schedule_pass
from tests.scheduling.test_cancel_running import commands  # noqa: F401  (what the agents are told)

pytestmark = pytest.mark.django_db


def _running(resource_group, vcluster, make_allocation, **kw) -> Allocation:
    job = make_allocation(**{"state": "pending", "node_count": 1, "per_node_gpu": 8, "preemption_class": 2,
                             "vcluster": vcluster, **kw})
    schedule_pass(resource_group.pk)
    job.refresh_from_db()
    assert job.state == "running" and job.started_at is not None
    return job


def _fresh(alloc: Allocation) -> Allocation:
    return Allocation.objects.get(pk=alloc.pk)


def test_work_past_its_walltime_is_stopped_keeps_its_node_until_gone_and_fails(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, commands):  # noqa: F811
    job = _running(resource_group, vcluster_hpc, make_allocation, walltime_minutes=60,
                   requeue_policy="on_node_failure")
    assert sweep(now=job.started_at + timedelta(minutes=59, seconds=59))["walltime"] == 0
    assert _fresh(job).state == "running" and commands == []

    at = job.started_at + timedelta(minutes=60)
    assert sweep(now=at)["walltime"] == 1
    job = _fresh(job)
    assert (job.state, job.fail_reason) == ("terminating", "walltime exceeded (60 min)")
    assert job.deadline_at == at + timedelta(seconds=35)
    assert commands == [("gpu-a", "Terminate", str(job.pk))]
    assert list(job.placements.values_list("node__name", flat=True)) == ["gpu-a"]
    assert sweep(now=at)["walltime"] == 0  # once

    allocation_exited(allocation=job, exit_code=-15, reason="terminated")
    job = _fresh(job)
    assert job.state == "failed"
    assert job.events.latest("id").reason == "walltime exceeded (60 min); exited: terminated (-15)"
    assert not Placement.objects.filter(allocation=job).exists()
    assert not Allocation.objects.filter(requeued_from=job).exists()  # a timeout is no node failure


def test_no_exit_within_the_grace_is_killed(resource_group, vcluster_hpc, node_gpu_a, make_allocation,
                                            commands):  # noqa: F811
    job = _running(resource_group, vcluster_hpc, make_allocation, walltime_minutes=5)
    sweep(now=job.started_at + timedelta(minutes=6))
    job = _fresh(job)
    allocation_deadline(allocation=job, now=job.deadline_at + timedelta(seconds=1))
    job = _fresh(job)
    assert job.state == "failed" and job.events.latest("id").reason == "walltime exceeded (5 min); killed after grace"
    assert commands[-1] == ("gpu-a", "Kill", str(job.pk))


def test_requeue_policy_always_runs_it_again(resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    job = _running(resource_group, vcluster_hpc, make_allocation, walltime_minutes=5, requeue_policy="always")
    sweep(now=job.started_at + timedelta(minutes=5))
    allocation_exited(allocation=job, exit_code=-15, reason="terminated")
    assert _fresh(job).state == "failed"
    assert Allocation.objects.get(requeued_from=job).state == "pending"


def test_work_without_a_walltime_or_not_running_is_left_alone(resource_group, vcluster_hpc, node_gpu_a,
                                                               make_allocation):
    job = _running(resource_group, vcluster_hpc, make_allocation)
    waiting = make_allocation(state="pending", node_count=1, per_node_gpu=8, vcluster=vcluster_hpc,
                              walltime_minutes=1)
    assert sweep(now=job.started_at + timedelta(days=400))["walltime"] == 0
    assert (_fresh(job).state, _fresh(waiting).state) == ("running", "pending")


def test_work_stopped_at_its_walltime_no_longer_shields_itself_from_preemption(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    low = _running(resource_group, vcluster_hpc, make_allocation, walltime_minutes=1, checkpoint="none")
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)  # a minute left: near completion, so the preemptor waits for it
    assert _fresh(high).state == "pending" and not PreemptionDecision.objects.filter(code="PREEMPT").exists()
    sweep(now=low.started_at + timedelta(minutes=1))
    allocation_exited(allocation=low, exit_code=-15, reason="terminated")
    schedule_pass(resource_group.pk)
    assert _fresh(high).state == "running"
