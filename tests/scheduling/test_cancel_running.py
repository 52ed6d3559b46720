"""A cancel of work whose process may still run: it is terminating and keeps its node (no one
starts on its GPUs) until its agent reports the exit or the grace passes and it is killed; then
it is cancelled, never requeued. Before, a cancel freed the node at once while the process was
still being told to stop, and the pass placed other work on GPUs it still used."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodes.actions import allocation_lost
from scheduling.actions import release
from scheduling.actions.admission import allocation_cancel
from scheduling.actions.lifecycle import allocation_deadline, allocation_exited
from scheduling.errors import Conflict
from scheduling.models import Allocation, Placement, PreemptionDecision
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


@pytest.fixture
def commands(monkeypatch):
    """What the control plane tells the agents: (node, command kind, allocation)."""
    sent: list[tuple[str, str, str]] = []
    monkeypatch.setattr(release, "agent_command_on_commit",
                        lambda node, frame: sent.append((node, type(frame).__name__, frame.allocation)))
    return sent


@pytest.fixture
def user(tenant_physics):
    """alice, of physics (the make_allocation fixture's tenant)."""
    return tenant_physics.memberships.get(user__username="alice").user


def _job(make_allocation, vcluster, klass=2, **kw):
    return make_allocation(**{"state": "pending", "node_count": 1, "per_node_gpu": 8, "preemption_class": klass,
                              "checkpoint": "auto", "vcluster": vcluster, **kw})


def _running(resource_group, vcluster, make_allocation, **kw) -> Allocation:
    job = _job(make_allocation, vcluster, **kw)
    schedule_pass(resource_group.pk)
    job.refresh_from_db()
    assert job.state == "running"
    return job


def _fresh(alloc: Allocation) -> Allocation:
    return Allocation.objects.get(pk=alloc.pk)


def test_its_node_stays_its_own_until_the_exit(resource_group, vcluster_hpc, node_gpu_a, make_allocation, user,
                                                commands):
    job = _running(resource_group, vcluster_hpc, make_allocation)
    allocation_cancel(allocation=job, actor=user)
    job = _fresh(job)
    assert (job.state, job.leaving) == ("terminating", "cancel")
    assert commands == [("gpu-a", "Terminate", str(job.pk))]
    assert list(job.placements.values_list("node__name", flat=True)) == ["gpu-a"]

    waiting = _job(make_allocation, vcluster_hpc, klass=0)
    schedule_pass(resource_group.pk)
    assert _fresh(waiting).state == "pending"  # the cancelled process may still use all eight GPUs
    with pytest.raises(Conflict, match="already being cancelled"):
        allocation_cancel(allocation=job, actor=user)

    allocation_exited(allocation=job, exit_code=-15, reason="terminated")
    job = _fresh(job)
    assert (job.state, job.exit_code, job.ended_at is not None) == ("cancelled", -15, True)
    assert job.events.latest("id").reason == "cancelled; exited: terminated (-15)"
    assert not Placement.objects.filter(allocation=job).exists()
    schedule_pass(resource_group.pk)
    assert _fresh(waiting).state == "running"


def test_no_exit_within_the_grace_is_killed_and_cancelled(resource_group, vcluster_hpc, node_gpu_a, make_allocation,
                                                           user, commands):
    job = _running(resource_group, vcluster_hpc, make_allocation)
    allocation_cancel(allocation=job, actor=user)
    job = _fresh(job)
    allocation_deadline(allocation=job, now=job.deadline_at - timedelta(seconds=1))
    assert _fresh(job).state == "terminating"  # not yet
    allocation_deadline(allocation=job, now=job.deadline_at + timedelta(seconds=1))
    job = _fresh(job)
    assert job.state == "cancelled" and job.events.latest("id").reason == "cancelled; killed after grace"
    assert commands[-1] == ("gpu-a", "Kill", str(job.pk))
    assert not Placement.objects.filter(allocation=job).exists()


def test_work_that_completes_meanwhile_is_completed(resource_group, vcluster_hpc, node_gpu_a, make_allocation, user):
    job = _running(resource_group, vcluster_hpc, make_allocation)
    allocation_cancel(allocation=job, actor=user)
    allocation_exited(allocation=job, exit_code=0, reason="completed")
    assert _fresh(job).state == "completed"


def test_its_node_lost_meanwhile_ends_it_cancelled_not_requeued(resource_group, vcluster_hpc, node_gpu_a,
                                                                 make_allocation, user):
    job = _running(resource_group, vcluster_hpc, make_allocation, requeue_policy="on_node_failure")
    allocation_cancel(allocation=job, actor=user)
    allocation_lost(allocation=_fresh(job), reason="node gpu-a down", now=_fresh(job).deadline_at, node=node_gpu_a)
    assert _fresh(job).state == "cancelled"
    assert not Allocation.objects.filter(requeued_from=job).exists()


def test_a_preemption_victim_cancelled_while_it_leaves_ends_cancelled_and_its_preemptor_starts(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, user, commands):
    low = _running(resource_group, vcluster_hpc, make_allocation)
    high = _job(make_allocation, vcluster_hpc, klass=7)
    schedule_pass(resource_group.pk)
    assert _fresh(low).state == "checkpointing"  # a victim, which would be requeued to resume

    allocation_cancel(allocation=low, actor=user)
    assert _fresh(low).state == "terminating" and commands[-1] == ("gpu-a", "Terminate", str(low.pk))
    schedule_pass(resource_group.pk)
    assert _fresh(high).state == "pending"  # still waiting for its victim to be gone
    allocation_exited(allocation=low, exit_code=-15, reason="terminated")
    assert _fresh(low).state == "cancelled" and not Allocation.objects.filter(requeued_from=low).exists()
    schedule_pass(resource_group.pk)
    assert _fresh(high).state == "running"
    assert PreemptionDecision.objects.get(preemptor=high, code="PREEMPT").released_at is not None


def test_a_cancel_of_work_already_terminating_keeps_it_from_the_queue(resource_group, vcluster_hpc, node_gpu_a,
                                                                       make_allocation, user):
    resource_group.policy = {**(resource_group.policy or {}), "mode": "requeue"}
    resource_group.save()
    low = _running(resource_group, vcluster_hpc, make_allocation, checkpoint="none")
    _job(make_allocation, vcluster_hpc, klass=7)
    schedule_pass(resource_group.pk)
    assert (_fresh(low).state, _fresh(low).leaving) == ("terminating", "preempted")  # leaving to be requeued
    deadline = _fresh(low).deadline_at

    allocation_cancel(allocation=low, actor=user)
    low = _fresh(low)
    assert (low.state, low.leaving) == ("terminating", "cancel")
    assert low.deadline_at == deadline  # the grace it had, not a new one: its preemptor waits no longer
    assert low.events.latest("id").actor == user
    allocation_exited(allocation=low, exit_code=-15, reason="terminated")
    assert _fresh(low).state == "cancelled"  # not back in the queue


def test_the_job_page_says_the_cancel_is_under_way_instead_of_offering_it_again(
        resource_group, vcluster_hpc, node_gpu_a, make_allocation, user, client):
    job = _running(resource_group, vcluster_hpc, make_allocation)
    client.force_login(user)
    assert "Cancel this job" in client.get(f"/jobs/{job.pk}/").content.decode()
    assert client.post(f"/jobs/{job.pk}/cancel/", {"confirmed": "1"}).status_code == 302
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert _fresh(job).state == "terminating"
    assert "Cancel asked: its process is being stopped" in page and "Cancel this job" not in page
    again = client.post(f"/jobs/{job.pk}/cancel/", {"confirmed": "1"})
    assert again.status_code == 409 and "already being cancelled" in again.content.decode()
