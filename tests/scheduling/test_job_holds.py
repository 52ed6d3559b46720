"""Holding, releasing and requeueing jobs (Slurm's hold, release and requeue) end to end: through
the REST API, the real pass, the agents' reports and the history, on PostgreSQL."""

from __future__ import annotations

import pytest

from scheduling.models import Allocation, Placement, PreemptionDecision, Quota
from scheduling.passes.run import schedule_pass
from tests.scheduling.batch_helpers import audited, exit_on, job_id, post, sent_fixture, state  # noqa: F401
from tests.scheduling.seed_e2e import client_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


@pytest.fixture
def cluster(resource_group, vcluster_hpc, node_gpu_a, tenant_physics, operator, sent):
    return resource_group


def test_a_tenant_holds_its_pending_job_the_pass_skips_it_until_released(cluster, django_capture_on_commit_callbacks,
                                                                         sent):
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        held = job_id(alice, held=True)
        other = job_id(alice, name="second")
        response = post(alice, f"/api/v1/allocations/{other}/hold/", {"reason": "inputs not ready"})
    assert response.status_code == 200, response.json()
    assert (response.json()["held"], response.json()["held_by"]) == (True, "user")
    schedule_pass(cluster.pk)
    assert (state(held), state(other)) == ("pending", "pending")  # the node is free, yet neither starts
    assert sent.starts(held) == sent.starts(other) == []

    with django_capture_on_commit_callbacks(execute=True):
        response = post(alice, f"/api/v1/allocations/{other}/release/", {"reason": "inputs ready"})
    assert response.status_code == 200 and response.json()["held"] is False
    assert cluster.pk in sent.passes_asked()
    schedule_pass(cluster.pk)
    assert (state(held), state(other)) == ("pending", "running")
    assert audited("hold", other) == [("alice", "inputs not ready")]
    assert audited("release", other) == [("alice", "inputs ready")]
    reasons = list(Allocation.objects.get(pk=other).events.order_by("id").values_list("reason", flat=True))
    assert reasons[1:3] == ["held by user: inputs not ready", "released (user): inputs ready"]


def test_a_held_job_never_preempts(cluster, django_capture_on_commit_callbacks):
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        low = job_id(alice, preemption_class=1, checkpoint="auto")
    schedule_pass(cluster.pk)
    with django_capture_on_commit_callbacks(execute=True):
        high = job_id(alice, preemption_class=7, checkpoint="auto", held=True)
    schedule_pass(cluster.pk)
    assert (state(low), state(high)) == ("running", "pending")
    assert not PreemptionDecision.objects.filter(preemptor_id=high).exists()

    with django_capture_on_commit_callbacks(execute=True):
        assert post(alice, f"/api/v1/allocations/{high}/release/").status_code == 200
    schedule_pass(cluster.pk)  # released, it preempts as it would have
    assert state(low) == "checkpointing"
    assert PreemptionDecision.objects.get(preemptor_id=high).code == "PREEMPT"


def test_holding_a_preemptor_gives_back_the_nodes_being_freed_for_it(cluster, django_capture_on_commit_callbacks):
    alice, op = client_for("alice"), client_for("op")
    with django_capture_on_commit_callbacks(execute=True):
        job_id(alice, preemption_class=1, checkpoint="auto")
    schedule_pass(cluster.pk)
    with django_capture_on_commit_callbacks(execute=True):
        high = job_id(alice, preemption_class=7, checkpoint="auto")
    schedule_pass(cluster.pk)
    assert Placement.objects.filter(allocation_id=high, kind="held").exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert post(op, f"/api/v1/allocations/{high}/hold/", {"reason": "investigating"}).status_code == 200
    assert not Placement.objects.filter(allocation_id=high).exists()


def test_an_operators_hold_is_released_only_by_an_operator_and_needs_a_reason(
        cluster, django_capture_on_commit_callbacks):
    alice, op = client_for("alice"), client_for("op")
    with django_capture_on_commit_callbacks(execute=True):
        pk = job_id(alice)
        no_reason = post(op, f"/api/v1/allocations/{pk}/hold/")
        assert no_reason.status_code == 400 and "reason" in no_reason.json()
        assert post(op, f"/api/v1/allocations/{pk}/hold/", {"reason": "bad input data"}).status_code == 200
        refused = post(alice, f"/api/v1/allocations/{pk}/release/")
    assert refused.status_code == 400 and refused.json()["field"] == "held"
    assert Allocation.objects.get(pk=pk).held_by == "operator"
    schedule_pass(cluster.pk)
    assert state(pk) == "pending"
    with django_capture_on_commit_callbacks(execute=True):
        assert post(op, f"/api/v1/allocations/{pk}/release/", {"reason": "fixed"}).status_code == 200
    schedule_pass(cluster.pk)
    assert state(pk) == "running"
    assert audited("hold", pk) == [("op", "bad input data")] and audited("release", pk) == [("op", "fixed")]


def test_only_pending_work_is_held_and_another_tenants_job_is_a_404(cluster, tenant_chemistry,
                                                                      django_capture_on_commit_callbacks):
    alice = client_for("alice")
    with django_capture_on_commit_callbacks(execute=True):
        pk = job_id(alice)
    schedule_pass(cluster.pk)
    assert post(alice, f"/api/v1/allocations/{pk}/hold/").status_code == 409
    assert post(client_for("bob"), f"/api/v1/allocations/{pk}/hold/").status_code == 404


@pytest.mark.parametrize("mode", ["suspend", "terminate"])
def test_an_operator_requeues_running_work_it_keeps_its_nodes_until_gone_then_queues_again(
        cluster, django_capture_on_commit_callbacks, sent, mode):
    cluster.policy = {"kind": "class_cost", "mode": mode}
    cluster.save()
    alice, op = client_for("alice"), client_for("op")
    with django_capture_on_commit_callbacks(execute=True):
        pk = job_id(alice, checkpoint="auto")
    schedule_pass(cluster.pk)
    submitted = Allocation.objects.get(pk=pk).submitted_at
    assert post(alice, f"/api/v1/allocations/{pk}/requeue/", {"reason": "x"}).status_code == 403
    with django_capture_on_commit_callbacks(execute=True):
        response = post(op, f"/api/v1/allocations/{pk}/requeue/", {"reason": "node maintenance"})
    assert response.status_code == 200, response.json()
    assert state(pk) == "terminating"
    assert ("gpu-a", {"type": "terminate", "allocation": str(pk), "grace_s": 30}) in sent.frames
    with django_capture_on_commit_callbacks(execute=True):
        waiting = job_id(alice, name="next")
    schedule_pass(cluster.pk)
    assert state(waiting) == "pending"  # the requeued job still holds the node until its exit
    assert list(Placement.objects.filter(allocation_id=pk).values_list("node__name", flat=True)) == ["gpu-a"]

    with django_capture_on_commit_callbacks(execute=True):
        exit_on(pk, code=-15, reason="terminated")
    alloc = Allocation.objects.get(pk=pk)
    assert (alloc.state, alloc.submitted_at, alloc.preempted_count) == ("pending", submitted, 1)
    schedule_pass(cluster.pk)  # its submission time puts it first again
    assert (state(pk), state(waiting)) == ("running", "pending")
    assert audited("requeue", pk) == [("op", "node maintenance")]
    assert list(alloc.events.order_by("id").values_list("to_state", flat=True)) == [
        "pending", "running", "terminating", "terminating", "pending", "running"]


def test_a_submission_without_a_group_goes_to_the_tenants_default_set_by_an_operator(
        cluster, django_capture_on_commit_callbacks):
    alice, op = client_for("alice"), client_for("op")
    body = {"vcluster": "hpc", "per_node": {"gpu": 8}, "command": ["train"]}
    refused = post(alice, "/api/v1/allocations/", body)
    assert refused.status_code == 400 and "resource_group" in refused.json()
    patched = op.patch("/api/v1/quotas/physics/", {"default_resource_group": "rg-main", "reason": "one group"},
                       content_type="application/json")
    assert patched.status_code == 200, patched.json()
    assert audited("edit", Quota.objects.get(tenant__name="physics").pk) == [("op", "one group")]
    with django_capture_on_commit_callbacks(execute=True):
        made = post(alice, "/api/v1/allocations/", body)
    assert made.status_code == 201 and made.json()["resource_group"] == "rg-main"
