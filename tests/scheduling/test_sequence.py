"""The preemption sequence, step by step through the actions, and every timeout path."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.actions.lifecycle import allocation_deadline, allocation_exited, sweep
from scheduling.actions.preemption import (
    allocation_checkpoint_done,
    allocation_checkpoint_progress,
    allocation_defer,
)
from scheduling.models import Allocation, Placement, PreemptionDecision
from scheduling.passes.run import schedule_pass
from scheduling.passes.snapshot import load_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_node(resource_group, vcluster_hpc, node_gpu_a):
    """A single 8-GPU node: any second whole-node job must preempt."""
    return node_gpu_a


def _job(make_allocation, klass, **kw):
    fields = {"state": "pending", "node_count": 1, "per_node_gpu": 8, "preemption_class": klass,
              "checkpoint": "auto", "vcluster_id": None, **kw}
    return make_allocation(**fields)


def _state(alloc):
    alloc.refresh_from_db()
    return alloc.state


def test_full_sequence_low_checkpoints_high_runs_low_resumes(resource_group, vcluster_hpc, one_node,
                                                             make_allocation):
    low = _job(make_allocation, 2, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _state(low) == "running"
    submitted = low.submitted_at

    high = _job(make_allocation, 7, vcluster=vcluster_hpc)
    result = schedule_pass(resource_group.pk)
    assert result.preempted == 1
    decision = PreemptionDecision.objects.get(preemptor=high)
    assert (decision.result, decision.code, decision.outcome) == ("preempt", "PREEMPT", "executed")
    assert [v["id"] for v in decision.victims] == [str(low.pk)]
    assert {c["id"]: c["code"] for c in decision.candidates} == {str(low.pk): "SELECTED"}
    assert _state(low) == "checkpointing" and _state(high) == "pending"
    assert list(high.placements.values_list("kind", "node__name")) == [("held", "gpu-a")]

    # while the victim checkpoints, the high request waits for it and nothing new is chosen
    schedule_pass(resource_group.pk)
    assert _state(high) == "pending"
    assert PreemptionDecision.objects.filter(preemptor=high).latest("id").code == "AWAITING_VICTIMS"

    allocation_checkpoint_done(allocation=low, ok=True, location="/ckpt/low", size_bytes=10)
    low.refresh_from_db()
    assert low.state == "pending"
    assert (low.preempted_count, low.resume_from_checkpoint, low.submitted_at) == (1, True, submitted)
    assert list(low.events.order_by("id").values_list("to_state", flat=True)) == [
        "running", "checkpointing", "suspended", "pending"]

    schedule_pass(resource_group.pk)
    assert _state(high) == "running" and _state(low) == "pending"
    assert list(high.placements.values_list("kind", flat=True)) == ["assigned"]
    assert PreemptionDecision.objects.get(pk=decision.pk).released_at is not None

    allocation_exited(allocation=high, exit_code=0, reason="completed")
    assert _state(high) == "completed"
    schedule_pass(resource_group.pk)
    low.refresh_from_db()
    assert low.state == "running" and low.resume_from_checkpoint


def test_duplicate_and_late_reports_change_nothing(resource_group, vcluster_hpc, one_node, make_allocation):
    low = _job(make_allocation, 2, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    allocation_exited(allocation=low, exit_code=0, reason="completed")
    events = low.events.count()
    allocation_exited(allocation=low, exit_code=0, reason="completed")
    allocation_checkpoint_done(allocation=low, ok=True)
    assert _state(low) == "completed" and low.events.count() == events


def _preempted_pair(resource_group, vcluster_hpc, make_allocation, checkpoint="auto"):
    low = _job(make_allocation, 2, vcluster=vcluster_hpc, checkpoint=checkpoint)
    schedule_pass(resource_group.pk)
    high = _job(make_allocation, 7, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    low.refresh_from_db()
    return low, high


def test_responsive_checkpoint_gets_its_timeout_extended_once(resource_group, vcluster_hpc, one_node,
                                                             make_allocation):
    low, _ = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    first_deadline = low.deadline_at
    timeout = first_deadline - low.checkpoint_started_at
    allocation_checkpoint_progress(allocation=low)
    allocation_deadline(allocation=low, now=first_deadline + timedelta(seconds=1))
    low.refresh_from_db()
    assert low.state == "checkpointing" and low.deadline_extended
    assert low.deadline_at == first_deadline + timeout * 0.5
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))
    assert _state(low) == "terminating"  # stopped: its nodes stay its own until it is gone
    assert Placement.objects.filter(allocation=low).exists()
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))
    assert _state(low) == "failed"
    assert not Placement.objects.filter(allocation=low).exists()


def test_unresponsive_checkpoint_is_terminated_and_fails(resource_group, vcluster_hpc, one_node, make_allocation):
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    allocation_deadline(allocation=low, now=low.deadline_at - timedelta(seconds=1))
    assert _state(low) == "checkpointing"  # not yet
    timed_out = low.deadline_at + timedelta(seconds=1)
    allocation_deadline(allocation=low, now=timed_out)
    low.refresh_from_db()
    assert low.state == "terminating" and low.events.latest("id").reason == "checkpoint timed out: stopping"
    assert low.deadline_at == timed_out + timedelta(seconds=35)  # SIGTERM, the agent's 30 s grace, a margin
    assert list(low.placements.values_list("node__name", flat=True)) == ["gpu-a"]
    schedule_pass(resource_group.pk)
    assert _state(high) == "pending"  # the victim still runs until it exits or is killed

    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))  # no exit in the grace
    low.refresh_from_db()
    assert low.state == "failed" and low.events.latest("id").reason == "checkpoint timed out; killed after grace"
    schedule_pass(resource_group.pk)
    assert _state(high) == "running"


def test_a_timed_out_victim_that_exits_in_the_grace_fails_with_its_exit(resource_group, vcluster_hpc, one_node,
                                                                        make_allocation):
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))
    allocation_exited(allocation=low, exit_code=-15, reason="terminated")
    low.refresh_from_db()
    assert (low.state, low.exit_code) == ("failed", -15)
    assert low.events.latest("id").reason == "checkpoint timed out; exited: terminated (-15)"
    assert not low.placements.exists()
    schedule_pass(resource_group.pk)
    assert _state(high) == "running"


def test_a_failed_checkpoint_is_killed_and_keeps_its_nodes_until_it_exits(resource_group, vcluster_hpc, one_node,
                                                                         make_allocation):
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    allocation_checkpoint_done(allocation=low, ok=False, error="disk full")
    low.refresh_from_db()
    assert low.state == "terminating" and low.events.latest("id").reason == "checkpoint failed: disk full: stopping"
    assert low.placements.exists()
    schedule_pass(resource_group.pk)
    assert _state(high) == "pending"
    allocation_exited(allocation=low, exit_code=-9, reason="killed")
    low.refresh_from_db()
    assert low.state == "failed" and low.events.latest("id").reason == "checkpoint failed: disk full; exited: killed (-9)"
    schedule_pass(resource_group.pk)
    assert _state(high) == "running"


def test_deferral_is_granted_up_to_five_minutes_in_total(resource_group, vcluster_hpc, one_node, make_allocation):
    low, _ = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    start = low.deadline_at
    assert allocation_defer(allocation=low, seconds=200) == 200
    assert allocation_defer(allocation=low, seconds=200) == 100
    assert allocation_defer(allocation=low, seconds=50) == 0
    low.refresh_from_db()
    assert low.deadline_at == start + timedelta(seconds=300) and low.deferred_seconds == 300


def test_terminate_victim_is_requeued_from_scratch_when_it_exits(resource_group, vcluster_hpc, one_node,
                                                                 make_allocation):
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation, checkpoint="none")
    assert low.state == "terminating"
    decision = PreemptionDecision.objects.get(preemptor=high, code="PREEMPT")
    assert decision.released_at is None
    allocation_exited(allocation=low, exit_code=143, reason="terminated")
    low.refresh_from_db()
    assert (low.state, low.preempted_count, low.resume_from_checkpoint) == ("pending", 1, False)
    decision.refresh_from_db()
    assert decision.released_at is not None  # its only victim has left


def test_terminate_mode_ends_victims_as_preempted(resource_group, vcluster_hpc, one_node, make_allocation):
    resource_group.policy = {"kind": "class_cost", "mode": "terminate"}
    resource_group.save()
    low, _ = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    assert low.state == "terminating"
    allocation_exited(allocation=low, exit_code=143, reason="terminated")
    assert _state(low) == "preempted"


def test_lost_worker_between_steps_is_recovered_by_the_sweep(resource_group, vcluster_hpc, one_node,
                                                             make_allocation):
    """The deadline task never ran (worker killed): the sweep derives it from the rows, twice safely."""
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    later = low.deadline_at + timedelta(seconds=5)
    assert sweep(now=later)["deadlines"] == 1
    state_after_first = (_state(low), list(low.events.values_list("to_state", flat=True)))
    assert sweep(now=later)["deadlines"] == 0
    assert (_state(low), list(low.events.values_list("to_state", flat=True))) == state_after_first
    assert sweep(now=later + timedelta(seconds=40))["deadlines"] == 1  # its grace too: killed
    schedule_pass(resource_group.pk)
    assert _state(high) == "running"


def test_shadow_group_records_but_never_preempts(resource_group, vcluster_hpc, one_node, make_allocation):
    resource_group.shadow = True
    resource_group.save()
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    assert low.state == "running" and _state(high) == "pending"
    assert PreemptionDecision.objects.get(preemptor=high).outcome == "shadow"


def test_paused_group_never_preempts(resource_group, vcluster_hpc, one_node, make_allocation):
    resource_group.paused = True
    resource_group.save()
    low, high = _preempted_pair(resource_group, vcluster_hpc, make_allocation)
    assert low.state == "running"
    assert PreemptionDecision.objects.get(preemptor=high).code == "PREEMPTION_PAUSED"


def test_waiting_decisions_are_stored_when_their_reason_changes(resource_group, vcluster_hpc, one_node,
                                                                make_allocation):
    _job(make_allocation, 9, vcluster=vcluster_hpc, checkpoint="none")
    schedule_pass(resource_group.pk)
    waiting = _job(make_allocation, 9, vcluster=vcluster_hpc)
    for _ in range(3):
        schedule_pass(resource_group.pk)
    assert PreemptionDecision.objects.filter(preemptor=waiting).count() == 1


def test_snapshot_loads_in_a_fixed_number_of_queries(resource_group, vcluster_hpc, make_allocation,
                                                     django_assert_num_queries):
    from nodes.models import Node

    nodes = [Node.objects.create(name=f"n{i}", resource_group=resource_group, vcluster=vcluster_hpc, gpu=8,
                                 state="ready") for i in range(20)]
    for node in nodes:
        alloc = _job(make_allocation, 1, vcluster=vcluster_hpc, state="running", started_at=timezone.now())
        Placement.objects.create(allocation=alloc, node=node, gpu=8)
    with django_assert_num_queries(6):
        snap = load_snapshot(resource_group)
    assert len(snap.cluster.allocs) == 20
    assert Allocation.objects.count() == 20


def test_a_victim_ending_before_the_write_costs_only_its_own_preemption(resource_group, vcluster_hpc, two_nodes,
                                                                        make_allocation, monkeypatch):
    """Preemptions are written in batches; one that lost a race must not take the others down."""
    from scheduling.passes import run as scheduler

    lows = [_job(make_allocation, 1, vcluster=vcluster_hpc) for _ in range(2)]
    schedule_pass(resource_group.pk)
    assert {_state(low) for low in lows} == {"running"}
    highs = [_job(make_allocation, 7, vcluster=vcluster_hpc) for _ in range(2)]
    real, decided = scheduler.decide, []

    def decide_while_a_report_arrives(*args, **kwargs):
        decision = real(*args, **kwargs)
        decided.append(decision)
        if len(decided) == 2:  # the first decision's victim exits before the batch is written
            gone = Allocation.objects.get(pk=int(decided[0].victims[0].id))
            allocation_exited(allocation=gone, exit_code=0, reason="completed")
        return decision

    monkeypatch.setattr(scheduler, "decide", decide_while_a_report_arrives)
    result = schedule_pass(resource_group.pk)
    assert [d.outcome for d in decided] == ["preempt", "preempt"]
    assert result.preempted == 1
    gone, kept = int(decided[0].victims[0].id), int(decided[1].victims[0].id)
    assert Allocation.objects.get(pk=gone).state == "completed"
    assert Allocation.objects.get(pk=kept).state == "checkpointing"
    executed = PreemptionDecision.objects.filter(result="preempt", outcome="executed")
    assert list(executed.values_list("preemptor_id", flat=True)) == [highs[1].pk]


def test_one_deadline_task_handles_every_victim_of_a_batch(resource_group, vcluster_hpc, two_nodes,
                                                           make_allocation):
    from scheduling.tasks import preemption_deadlines

    victims = [_job(make_allocation, 1, vcluster=vcluster_hpc) for _ in range(2)]
    schedule_pass(resource_group.pk)
    high = _job(make_allocation, 7, vcluster=vcluster_hpc, node_count=2)
    assert schedule_pass(resource_group.pk).preempted == 1
    assert [_state(v) for v in victims] == ["checkpointing", "checkpointing"]
    # Unresponsive past their deadline (the task runs when it is due; here the deadline is moved).
    Allocation.objects.filter(pk__in=[v.pk for v in victims]).update(
        deadline_at=timezone.now() - timedelta(seconds=1))

    preemption_deadlines([v.pk for v in victims])
    assert [_state(v) for v in victims] == ["terminating", "terminating"]
    preemption_deadlines([v.pk for v in victims])  # again: nothing more happens (their grace runs)
    assert [_state(v) for v in victims] == ["terminating", "terminating"]
    Allocation.objects.filter(pk__in=[v.pk for v in victims]).update(
        deadline_at=timezone.now() - timedelta(seconds=1))
    preemption_deadlines([v.pk for v in victims])
    assert [_state(v) for v in victims] == ["failed", "failed"]
    assert _state(high) == "pending"


def test_a_late_exit_of_an_earlier_run_does_not_end_the_current_one(resource_group, vcluster_hpc, one_node,
                                                                    make_allocation):
    """A checkpointed victim is stopped by its agent (terminate) while it is requeued and, free
    capacity permitting, started again at once; the first run's exit can arrive after that."""
    low = _job(make_allocation, 2, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    high = _job(make_allocation, 7, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    allocation_checkpoint_done(allocation=low, ok=True, location="/ckpt/low", size_bytes=10)
    schedule_pass(resource_group.pk)
    allocation_exited(allocation=high, exit_code=0, reason="completed")
    schedule_pass(resource_group.pk)
    assert _state(low) == "running"  # its second run

    allocation_exited(allocation=low, exit_code=-15, reason="terminated")  # the first run's, late
    low.refresh_from_db()
    assert low.state == "running" and low.placements.filter(kind="assigned").exists()
    assert low.events.latest("id").reason == "late exit of an earlier run ignored: terminated (-15)"

    again = _job(make_allocation, 8, vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    assert _state(low) == "checkpointing" and _state(again) == "pending"
    allocation_exited(allocation=low, exit_code=-9, reason="killed")  # still the first run's
    assert _state(low) == "checkpointing"

    allocation_checkpoint_done(allocation=low, ok=True, location="/ckpt/low2", size_bytes=10)
    schedule_pass(resource_group.pk)
    allocation_exited(allocation=again, exit_code=0, reason="completed")
    schedule_pass(resource_group.pk)
    assert _state(low) == "running"
    allocation_exited(allocation=low, exit_code=0, reason="completed")  # its own exit still ends it
    assert _state(low) == "completed"


def test_a_checkpoints_duration_is_written_to_its_own_event_only(make_allocation):
    """Each checkpoint's "done" event says how long that checkpoint took; a later checkpoint of the
    same allocation leaves the earlier events as they were."""
    from scheduling.models import AllocationEvent

    t0 = timezone.now() - timedelta(hours=1)
    alloc = make_allocation(state="checkpointing", checkpoint="auto", checkpoint_started_at=t0)
    allocation_checkpoint_done(allocation=alloc, ok=True, now=t0 + timedelta(seconds=12))
    t1 = t0 + timedelta(minutes=30)
    Allocation.objects.filter(pk=alloc.pk).update(state="checkpointing", checkpoint_started_at=t1)
    allocation_checkpoint_done(allocation=Allocation.objects.get(pk=alloc.pk), ok=True,
                               now=t1 + timedelta(seconds=40))
    reasons = list(AllocationEvent.objects.filter(allocation=alloc, to_state="suspended").order_by("id")
                   .values_list("reason", flat=True))
    assert reasons == ["checkpoint done in 12.0s", "checkpoint done in 40.0s"]


@pytest.mark.parametrize("leaving", ["checkpointing", "terminating"])
def test_a_victim_that_finishes_on_its_own_before_it_is_stopped_is_completed(make_allocation, two_nodes, leaving):
    """Its exit 0 may arrive late (after a reconnect): the work is done, so it is neither failed
    (even after a timed-out checkpoint) nor run again, and its nodes are free."""
    n1, _ = two_nodes
    alloc = make_allocation(state=leaving, checkpoint="auto", requeue_policy="always",
                            fail_reason="checkpoint timed out" if leaving == "terminating" else "")
    Placement.objects.create(allocation=alloc, node=n1, gpu=8)
    allocation_exited(allocation=alloc, exit_code=0, reason="completed")
    alloc.refresh_from_db()
    assert alloc.state == "completed" and alloc.exit_code == 0
    assert not Placement.objects.filter(allocation=alloc).exists()
    assert not Allocation.objects.filter(requeued_from=alloc).exists()
