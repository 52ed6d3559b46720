"""A session type's mode overrides its group's policy mode for its victims: how they are asked to
leave, what the decision records and explains, and how they end, on every path."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.actions.lifecycle import allocation_deadline, allocation_exited
from scheduling.actions.overrides import allocation_force_preempt
from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import Allocation, PreemptionDecision, SessionType
from scheduling.passes.run import schedule_pass

pytestmark = pytest.mark.django_db


def _session(resource_group, name, mode):
    return SessionType.objects.create(resource_group=resource_group, name=name, mode=mode)


def _run_low_then_preempt(resource_group, vcluster_hpc, make_allocation, session_type, checkpoint="auto"):
    """A low-class job of the session type runs on the only node; a high-class one preempts it."""
    low = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint=checkpoint,
                          vcluster=vcluster_hpc, session_type=session_type)
    schedule_pass(resource_group.pk)
    high = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=7, checkpoint="auto",
                           vcluster=vcluster_hpc)
    schedule_pass(resource_group.pk)
    return Allocation.objects.get(pk=low.pk), PreemptionDecision.objects.get(preemptor=high, code="PREEMPT")


def test_a_terminate_override_stops_checkpointable_work_for_good(resource_group, vcluster_hpc, node_gpu_a,
                                                                 make_allocation):
    low, decision = _run_low_then_preempt(resource_group, vcluster_hpc, make_allocation,
                                          _session(resource_group, "scratch", "terminate"))
    assert low.state == "terminating"  # not asked to checkpoint, though it could
    assert [(v["id"], v["action"], v["mode"]) for v in decision.victims] == [(str(low.pk), "terminate", "terminate")]
    assert decision.explanation.endswith("By their session types' mode, 1 of them will instead be stopped for good.")

    allocation_exited(allocation=low, exit_code=143, reason="terminated")
    assert Allocation.objects.get(pk=low.pk).state == "preempted"


def test_a_terminate_override_holds_when_the_victim_is_killed_after_the_grace(resource_group, vcluster_hpc,
                                                                              node_gpu_a, make_allocation):
    low, _ = _run_low_then_preempt(resource_group, vcluster_hpc, make_allocation,
                                   _session(resource_group, "scratch", "terminate"))
    allocation_deadline(allocation=low, now=low.deadline_at + timedelta(seconds=1))  # it never reported
    assert Allocation.objects.get(pk=low.pk).state == "preempted"


def test_a_suspend_override_checkpoints_in_a_terminate_group(resource_group, vcluster_hpc, node_gpu_a,
                                                             make_allocation):
    resource_group.policy = {"kind": "class_cost", "mode": "terminate"}
    resource_group.save()
    low, decision = _run_low_then_preempt(resource_group, vcluster_hpc, make_allocation,
                                          _session(resource_group, "training", "suspend"))
    assert low.state == "checkpointing"
    assert decision.victims[0]["action"] == "checkpoint"
    allocation_checkpoint_done(allocation=low, ok=True, location="/ckpt/low")
    low.refresh_from_db()
    assert (low.state, low.resume_from_checkpoint) == ("pending", True)


def test_without_an_override_the_policy_mode_decides(resource_group, vcluster_hpc, node_gpu_a, make_allocation):
    low, decision = _run_low_then_preempt(resource_group, vcluster_hpc, make_allocation,
                                          _session(resource_group, "plain", ""))
    assert low.state == "checkpointing"
    assert "mode" not in decision.victims[0] and "session types' mode" not in decision.explanation


def test_a_forced_preemption_follows_the_override(resource_group, vcluster_hpc, node_gpu_a, make_allocation,
                                                  operator):
    job = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc, session_type=_session(resource_group, "scratch", "requeue"))
    schedule_pass(resource_group.pk)
    allocation_force_preempt(allocation=job, actor=operator, reason="maintenance")
    job.refresh_from_db()
    assert job.state == "terminating"
    allocation_exited(allocation=job, exit_code=143, reason="terminated", now=timezone.now())
    job.refresh_from_db()
    assert (job.state, job.resume_from_checkpoint, job.preempted_count) == ("pending", False, 1)


def test_what_if_shows_the_override(resource_group, vcluster_hpc, node_gpu_a, make_allocation, api_for):
    low = make_allocation(state="pending", node_count=1, per_node_gpu=8, preemption_class=1, checkpoint="auto",
                          vcluster=vcluster_hpc, session_type=_session(resource_group, "scratch", "terminate"))
    schedule_pass(resource_group.pk)
    response = api_for("alice").post("/api/v1/allocations/what-if/", {
        "resource_group": resource_group.name, "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
        "preemption_class": 7}, content_type="application/json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["outcome"] == "preempt"
    assert [(v["id"], v["action"], v.get("mode")) for v in body["victims"]] == [(str(low.pk), "terminate",
                                                                               "terminate")]
