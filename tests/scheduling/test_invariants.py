"""Each invariant reports a violating situation built in the database, and nothing for a clean one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from nodes.drain import node_drain, node_undrain
from nodes.models import Node
from scheduling import invariants
from scheduling.models import Allocation, AllocationEvent, Placement

pytestmark = pytest.mark.django_db


@pytest.fixture
def place(node_gpu_a, make_allocation, vcluster_hpc):
    """An allocation in ``state`` with an assigned placement of ``gpu`` GPUs on gpu-a."""

    def make(state: str, gpu: int, node=None, kind: str = "assigned", **fields):
        node = node or node_gpu_a
        alloc = make_allocation(state=state, per_node_gpu=gpu, vcluster=vcluster_hpc, ran_on=[node.name], **fields)
        Placement.objects.create(allocation=alloc, node=node, kind=kind, gpu=0 if kind == "held" else gpu)
        return alloc

    return make


def _at(event: AllocationEvent, moment) -> None:
    AllocationEvent.objects.filter(pk=event.pk).update(created_at=moment)


# -- capacity ---------------------------------------------------------------------------------

def test_a_node_holding_more_than_its_gpus_is_reported(place):
    running = place("running", 6)
    leaving = place("checkpointing", 4)
    found = invariants.nodes_over_capacity()
    assert len(found) == 1
    assert "gpu-a" in found[0] and "gpu 10/8" in found[0]
    assert f"#{running.pk}" in found[0] and f"#{leaving.pk}" in found[0]


def test_live_work_within_capacity_and_stale_rows_of_ended_work_are_clean(place):
    place("running", 4)
    place("terminating", 4)
    place("completed", 8)  # not live: its placement does not count
    place("pending", 8, kind="held")  # a hold reserves the node, it adds no resources
    assert invariants.nodes_over_capacity() == []


# -- double booking ---------------------------------------------------------------------------

def test_work_started_beside_a_victim_still_leaving_is_double_booked(place):
    now = timezone.now()
    victim = place("checkpointing", 8, state_changed_at=now - timedelta(seconds=5))
    starter = place("running", 8, started_at=now)
    found = invariants.double_booked_starts()
    assert len(found) == 1
    assert f"#{starter.pk} started while #{victim.pk} still checkpointing" in found[0]


def test_work_beside_a_victim_that_fits_alongside_it_is_not_double_booked(place):
    now = timezone.now()
    place("terminating", 4, state_changed_at=now - timedelta(seconds=5))
    place("running", 4, started_at=now)
    assert invariants.double_booked_starts() == []


def _timed_out_victim(make_allocation, vcluster_hpc, at):
    victim = make_allocation(state="failed", per_node_gpu=8, vcluster=vcluster_hpc, ran_on=["gpu-a"])
    _at(AllocationEvent.objects.create(allocation=victim, from_state="checkpointing", to_state="failed",
                                       reason="checkpoint timed out: terminated"), at)
    return victim


def _started(make_allocation, vcluster_hpc, at, node="gpu-a"):
    alloc = make_allocation(state="running", per_node_gpu=8, vcluster=vcluster_hpc, ran_on=[node])
    _at(AllocationEvent.objects.create(allocation=alloc, from_state="pending", to_state="running",
                                       reason=f"placed on {node}"), at)
    return alloc


def test_a_start_within_the_grace_of_a_checkpoint_timeout_is_double_booked(node_gpu_a, make_allocation,
                                                                           vcluster_hpc):
    t0 = timezone.now() - timedelta(minutes=5)
    victim = _timed_out_victim(make_allocation, vcluster_hpc, t0)
    starter = _started(make_allocation, vcluster_hpc, t0 + timedelta(seconds=2))
    found = invariants.double_booked_starts()
    assert len(found) == 1
    assert f"#{starter.pk} started on gpu-a" in found[0] and f"victim #{victim.pk}" in found[0]


def test_a_start_after_the_grace_or_elsewhere_is_not_double_booked(node_gpu_a, make_allocation, vcluster_hpc):
    t0 = timezone.now() - timedelta(minutes=5)
    _timed_out_victim(make_allocation, vcluster_hpc, t0)
    _started(make_allocation, vcluster_hpc, t0 + timedelta(seconds=invariants.TERMINATE_GRACE_S + 1))
    _started(make_allocation, vcluster_hpc, t0 + timedelta(seconds=1), node="gpu-b")
    assert invariants.double_booked_starts() == []


# -- deadlines --------------------------------------------------------------------------------

def test_a_victim_past_its_deadline_and_the_grace_is_reported(make_allocation):
    now = timezone.now()
    late = make_allocation(state="checkpointing", deadline_at=now - timedelta(seconds=61))
    stuck = make_allocation(state="terminating", deadline_at=None)
    found = invariants.deadlines_overdue(grace_s=60, now=now)
    assert found == [f"#{late.pk} is still checkpointing 61s past its deadline ({late.deadline_at.isoformat()})",
                     f"#{stuck.pk} is terminating with no deadline"]


def test_a_victim_within_the_grace_is_clean(make_allocation):
    now = timezone.now()
    make_allocation(state="terminating", deadline_at=now - timedelta(seconds=10))
    make_allocation(state="running", deadline_at=now - timedelta(hours=1))  # not leaving: no deadline applies
    assert invariants.deadlines_overdue(grace_s=60, now=now) == []


# -- submissions ------------------------------------------------------------------------------

def test_an_accepted_submission_not_stored_is_reported(make_allocation):
    kept = make_allocation(state="pending")
    gone = make_allocation(state="pending")
    gone_id = gone.pk
    gone.delete()
    assert invariants.submissions_missing([kept.pk, gone_id]) == [f"accepted submission #{gone_id} is missing"]
    assert invariants.submissions_missing([kept.pk]) == []


# -- quotas -----------------------------------------------------------------------------------

def test_live_work_over_a_hard_quota_is_reported(tenant_physics, make_allocation):
    tenant_physics.quota.max_concurrent_allocations = 2
    tenant_physics.quota.max_gpus = 16
    tenant_physics.quota.save()
    for state in ("running", "checkpointing", "terminating"):
        make_allocation(state=state, node_count=1, per_node_gpu=8)
    found = invariants.quotas_exceeded()
    assert found == ["tenant physics uses 3 against max_concurrent_allocations 2",
                     "tenant physics uses 24 against max_gpus 16"]


def test_waiting_and_ended_work_does_not_count_against_a_quota(tenant_physics, make_allocation):
    tenant_physics.quota.max_concurrent_allocations = 1
    tenant_physics.quota.save()
    make_allocation(state="running", per_node_gpu=8)
    for state in ("pending", "suspended", "completed", "failed"):
        make_allocation(state=state, per_node_gpu=8)
    assert invariants.quotas_exceeded() == []


# -- exits ------------------------------------------------------------------------------------

def test_a_failed_allocation_that_exited_zero_is_reported(make_allocation):
    stored = make_allocation(state="failed", exit_code=0)
    AllocationEvent.objects.create(allocation=stored, from_state="checkpointing", to_state="failed",
                                   reason="checkpoint failed: exited while checkpointing (0)")
    lost = make_allocation(state="failed", exit_code=None)
    AllocationEvent.objects.create(allocation=lost, from_state="running", to_state="failed",
                                   reason="not running on gpu-a after reconnect")
    found = invariants.exited_zero_recorded_failed(exits={lost.pk: [(0, "completed")]})
    assert found == [f"#{stored.pk} is failed though it exited 0 (checkpoint failed: exited while checkpointing (0))",
                     f"#{lost.pk} is failed (not running on gpu-a after reconnect) though its agent reported it "
                     "completed with exit 0"]


def test_failures_that_did_not_exit_zero_and_completions_are_clean(make_allocation):
    crashed = make_allocation(state="failed", exit_code=1)
    killed = make_allocation(state="failed", exit_code=None)
    done = make_allocation(state="completed", exit_code=0)
    exits = {crashed.pk: [(1, "failed")], killed.pk: [(-15, "terminated")], done.pk: [(0, "completed")]}
    assert invariants.exited_zero_recorded_failed(exits=exits) == []


# -- drains -----------------------------------------------------------------------------------

def test_a_drained_node_back_to_ready_without_an_undrain_is_reported(node_gpu_a, operator):
    node_drain(node=node_gpu_a, actor=operator, reason="maintenance")
    Node.objects.filter(pk=node_gpu_a.pk).update(state="ready")  # lost without an operator
    found = invariants.undrained_without_audit()
    assert len(found) == 1 and found[0].startswith("node gpu-a is ready, but its last audit entry is the drain")


def test_a_node_still_draining_or_undrained_by_an_operator_is_clean(two_nodes, operator):
    a, b = two_nodes
    node_drain(node=a, actor=operator, reason="maintenance")
    node_drain(node=b, actor=operator, reason="maintenance")
    node_undrain(node=b, actor=operator, reason="done")
    assert invariants.undrained_without_audit() == []


# -- all of them, and the command -------------------------------------------------------------

def test_check_all_names_every_invariant_and_the_command_says_they_hold(make_allocation, capsys):
    kept = make_allocation(state="pending")
    results = invariants.check_all(accepted_ids=[kept.pk])
    assert set(results) == {"nodes_over_capacity", "double_booked_starts", "deadlines_overdue",
                            "submissions_missing", "quotas_exceeded", "exited_zero_recorded_failed",
                            "undrained_without_audit"}
    assert invariants.violated(results) == []
    call_command("check_invariants", "--accepted", str(kept.pk))
    assert capsys.readouterr().out.strip() == "all invariants hold"


def test_the_command_prints_each_violation_and_exits_1_naming_the_invariants(place, make_allocation, capsys):
    place("running", 6)
    place("running", 6)
    late = make_allocation(state="terminating", deadline_at=timezone.now() - timedelta(minutes=5))
    with pytest.raises(CommandError) as raised:
        call_command("check_invariants", "--grace-seconds", "60", "--accepted", "987654")
    assert raised.value.returncode == 1
    assert str(raised.value) == "violated: nodes_over_capacity, deadlines_overdue, submissions_missing"
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("nodes_over_capacity: node gpu-a is over capacity (gpu 12/8)")
    assert out[1].startswith(f"deadlines_overdue: #{late.pk} is still terminating")
    assert out[2] == "submissions_missing: accepted submission #987654 is missing"
    assert len(out) == 3


def test_the_command_refuses_bad_ids():
    with pytest.raises(CommandError) as raised:
        call_command("check_invariants", "--accepted", "1,two")
    assert raised.value.returncode == 2


def test_checking_writes_nothing(make_allocation):
    """Checking only reads: nothing is written."""
    alloc = make_allocation(state="checkpointing", deadline_at=timezone.now() - timedelta(hours=1))
    invariants.check_all()
    assert Allocation.objects.get(pk=alloc.pk).state == "checkpointing"


def test_a_completed_rank_of_work_failed_on_another_node_is_no_violation(make_allocation):
    """Work of two nodes: one process completed with exit 0, the other failed, so the work failed
    (nodes/partial_exits.py); the agent's exit 0 for the first is not the work's."""
    wide = make_allocation(state="failed", exit_code=1, node_count=2, leaving="rank_failed")
    AllocationEvent.objects.create(allocation=wide, from_state="terminating", to_state="failed",
                                   reason="exited on gpu-a: failed (1); exited: terminated (-15)")
    assert invariants.exited_zero_recorded_failed(exits={wide.pk: [(0, "completed"), (1, "failed")]}) == []
