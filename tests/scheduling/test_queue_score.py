"""The Lattice score orders a class_cost queue in the running system: two tenants submit through
the REST API, one past its GPU-hours budget; a real pass on PostgreSQL places the other first,
and the waiting tenant reads its score and terms (API, CLI's JSON, job page)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Allocation, AllocationEvent, PreemptionDecision, Quota, TenantShare
from scheduling.passes.budget import budget_period
from scheduling.passes.run import schedule_pass

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

JOB = {"resource_group": "rg-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8},
       "preemption_class": 3, "checkpoint": "auto", "command": ["sleep", "60"]}


def _pass_time():
    """A moment at least a day into its month, so the history below falls in the same budget
    period whatever day the test runs."""
    now = timezone.now()
    return max(now, budget_period(now)[0] + timedelta(days=1))


def _used_gpu_hours(make_allocation, moment, tenant, hours):
    """A finished run of ``tenant`` this month: 8 GPUs for hours / 8."""
    run = make_allocation(tenant=tenant, per_node_gpu=8, state="completed",
                          submitted_at=moment - timedelta(hours=3), ended_at=moment - timedelta(hours=1))
    for from_state, to_state, when in (("pending", "running", moment - timedelta(hours=1 + hours / 8)),
                                       ("running", "completed", moment - timedelta(hours=1))):
        event = AllocationEvent.objects.create(allocation=run, from_state=from_state, to_state=to_state)
        AllocationEvent.objects.filter(pk=event.pk).update(created_at=when)


def _submit(client):
    response = client.post("/api/v1/allocations/", JOB, content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


@pytest.fixture
def budgets(tenant_physics, tenant_chemistry, make_allocation):
    """physics has used 12 of its 10 GPU-hours this month (120 %); chemistry none of its 100."""
    moment = _pass_time()
    Quota.objects.filter(tenant=tenant_physics).update(gpu_hours_budget=10)
    Quota.objects.filter(tenant=tenant_chemistry).update(gpu_hours_budget=100)
    _used_gpu_hours(make_allocation, moment, tenant_physics, 12)
    return moment


def test_the_under_budget_tenant_is_placed_first(api_for, node_gpu_a, resource_group, budgets):
    over = _submit(api_for("alice"))  # first in, same class: the class order would place it
    under = _submit(api_for("bob"))
    schedule_pass(resource_group.pk, now=budgets)
    assert Allocation.objects.get(pk=under).state == "running"
    assert Allocation.objects.get(pk=over).state == "pending"
    record = PreemptionDecision.objects.filter(preemptor_id=over).latest("id")
    assert record.result == "wait"
    assert record.queue_score["penalty"] == pytest.approx(0.05)
    assert record.queue_score["budget_used"] == pytest.approx(1.2, abs=1e-3)
    # w1..w9 of HPC batch; the terms the pass knew: class 3, no wait, no share used yet, 8 of 8 GPUs asked.
    terms = record.queue_score["terms"]
    assert (terms["f1"], terms["f3"], terms["f8"], terms["f5"], terms["f7"]) == (0.3, 1.0, 0.666667, 0.5, 0.5)
    assert terms["f6"] == 1.0


def test_without_the_budgets_submission_order_decides(api_for, node_gpu_a, resource_group, budgets):
    Quota.objects.update(gpu_hours_budget=None)
    first = _submit(api_for("alice"))
    second = _submit(api_for("bob"))
    schedule_pass(resource_group.pk, now=budgets)
    assert Allocation.objects.get(pk=first).state == "running"
    assert Allocation.objects.get(pk=second).state == "pending"


def test_the_waiting_tenant_reads_its_score_terms(api_for, node_gpu_a, resource_group, budgets):
    over = _submit(api_for("alice"))
    _submit(api_for("bob"))
    schedule_pass(resource_group.pk, now=budgets)
    alice = api_for("alice")
    body = alice.get(f"/api/v1/allocations/{over}/explain/").json()
    score = body["queue_score"]
    assert score == body["waiting"]["queue_score"]
    assert score["penalty"] == pytest.approx(0.05)
    names = {t["name"]: t for t in score["terms"]}
    assert set(names) == {"priority class", "wait time", "fair-share deficit", "topology fitness",
                          "data readiness", "backlog pressure", "energy cost", "checkpoint efficiency",
                          "conformance fitness"}
    assert names["priority class"]["weight"] == 0.25 and names["priority class"]["value"] == 0.3
    assert "budget penalty 0.05 (120% of this month's GPU-hours budget used)" in score["summary"]
    page = alice.get(f"/jobs/{over}/").content.decode()
    assert "Its place in the queue" in page and "fair-share deficit" in page
    assert "budget penalty 0.05" in page
    # Another tenant never reads it: the job is not theirs.
    assert api_for("bob").get(f"/api/v1/allocations/{over}/explain/").status_code == 404


def test_a_wait_is_recorded_again_when_its_score_drifts(api_for, node_gpu_a, resource_group, tenant_physics,
                                                        tenant_chemistry):
    _submit(api_for("bob"))
    waiting = _submit(api_for("alice"))
    moment = timezone.now()
    schedule_pass(resource_group.pk, now=moment)
    schedule_pass(resource_group.pk, now=moment + timedelta(minutes=1))  # same reason, score barely moved
    assert PreemptionDecision.objects.filter(preemptor_id=waiting).count() == 1
    schedule_pass(resource_group.pk, now=moment + timedelta(hours=2))  # wait term 0 -> 2/3, x 0.2
    records = list(PreemptionDecision.objects.filter(preemptor_id=waiting).order_by("id"))
    assert len(records) == 2 and records[0].code == records[1].code
    assert records[1].queue_score["terms"]["f2"] > 0.6


def test_the_fair_share_term_is_the_tracked_share(api_for, two_nodes, resource_group, tenant_physics,
                                                  tenant_chemistry, operator):
    """f3 on a wait's record is the share the group's tracking stores (TenantShare), the figure the
    shares endpoint shows; a class_cost group keeps shares but never starves."""
    alice = api_for("alice")
    small = dict(JOB, per_node={"gpu": 2})
    assert alice.post("/api/v1/allocations/", small, content_type="application/json").status_code == 201
    schedule_pass(resource_group.pk)
    wide = alice.post("/api/v1/allocations/", dict(JOB, nodes=2), content_type="application/json").json()["id"]
    schedule_pass(resource_group.pk)  # 2 of 16 GPUs run: the two whole nodes cannot be had
    row = TenantShare.objects.get(tenant=tenant_physics, resource_group=resource_group)
    assert row.share == pytest.approx(2 / 16) and row.fair_share == 0.5 and row.below_since is None
    record = PreemptionDecision.objects.filter(preemptor_id=wide).latest("id")
    assert record.result == "wait"
    assert record.queue_score["terms"]["f3"] == pytest.approx((0.5 - 2 / 16) / 0.5, abs=1e-6)  # 0.75
    shown = {r["tenant"]: r for r in api_for("op").get(
        f"/api/v1/resource-groups/{resource_group.name}/shares/").json()["shares"]}
    assert shown["physics"]["share"] == pytest.approx(0.125) and shown["physics"]["status"] == "normal"
