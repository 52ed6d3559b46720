"""Fair-share starvation (the YTsaurus model) end to end on PostgreSQL.

Two tenants fill a fair_share group through the REST API; a third, with no usage, submits. The
pass marks it below its fair share; once the starvation timeout has passed, the next pass starts
its work by preempting the newest-started work of a tenant above its fair share, never a job
within its tenant's share; a second request of the same tenant waits for the preemptive backoff.
The victim leaves as its agent would report it (the preemption actions), the preemptor starts,
and the tenant recovers. Every step through the real pass, the real actions and the API.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db.models import F

from nodes.models import Node
from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import (
    Allocation,
    Membership,
    PreemptionDecision,
    Quota,
    ResourceGroup,
    Tenant,
    TenantShare,
    VCluster,
)
from scheduling.passes.run import schedule_pass

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# A starvation timeout no run of the steps before it can outlast on a loaded machine; the test
# moves biology's mark back past it rather than waiting for it.
STARVATION_S = 30
POLICY = {"kind": "fair_share", "tolerance": 0.8, "starvation_timeout_s": STARVATION_S,
          "aggressive_starvation_timeout_s": 60,
          # within its tenant's fair share (running total <= fair share): never taken
          "preemption_threshold": 1.0, "aggressive_threshold": 1.0, "preemptive_scheduling_backoff_s": 30}
JOB = {"resource_group": "fs-main", "vcluster": "hpc", "nodes": 1, "per_node": {"gpu": 8, "cpu": 8, "memory": 64},
       "preemption_class": 3, "checkpoint": "auto", "command": ["train"]}


@pytest.fixture
def fs_group(db):
    group = ResourceGroup.objects.create(name="fs-main", policy=POLICY)
    hpc = VCluster.objects.create(resource_group=group, name="hpc")
    for c in "abcd":  # 32 GPUs: one 8-GPU job is a share of 0.25
        Node.objects.create(name=f"fs-{c}", resource_group=group, vcluster=hpc, gpu=8, cpu=64, memory=512,
                            state="ready")
    users = {}
    for tenant, user in (("physics", "alice"), ("chemistry", "bob"), ("biology", "carol")):
        t = Tenant.objects.create(name=tenant)
        Quota.objects.create(tenant=t, max_nodes=8, max_gpus=64, max_concurrent_allocations=10, fair_share=0.25)
        users[tenant] = get_user_model().objects.create_user(user, password=f"pw-{user}-123")
        Membership.objects.create(user=users[tenant], tenant=t)
    operator = get_user_model().objects.create_user("op", password="pw-op-123", is_staff=True)
    return group, users, operator


def _submit(client, user) -> int:
    """Submit through the API, then run the pass the submission asks for (the worker's task)."""
    client.force_login(user)
    response = client.post("/api/v1/allocations/", JOB, content_type="application/json")
    assert response.status_code == 201, response.content
    schedule_pass(ResourceGroup.objects.get(name="fs-main").pk)
    return int(response.json()["id"])


def _state(pk: int) -> str:
    return Allocation.objects.get(pk=pk).state


def _explain(client, user, pk: int) -> dict:
    client.force_login(user)
    response = client.get(f"/api/v1/allocations/{pk}/explain/")
    assert response.status_code == 200
    return response.json()


def _shares(client, operator) -> dict[str, dict]:
    client.force_login(operator)
    response = client.get("/api/v1/resource-groups/fs-main/shares/")
    assert response.status_code == 200, response.content
    return {row["tenant"]: row for row in response.json()["shares"]}


def test_a_starving_tenant_preempts_newest_work_above_fair_share(client, fs_group):
    group, users, operator = fs_group
    # physics and chemistry fill the group, one start after another
    phys1 = _submit(client, users["physics"])
    chem1 = _submit(client, users["chemistry"])
    chem2 = _submit(client, users["chemistry"])
    phys2 = _submit(client, users["physics"])
    assert {_state(pk) for pk in (phys1, chem1, chem2, phys2)} == {"running"}
    started = {pk: Allocation.objects.get(pk=pk).started_at for pk in (phys1, chem1, chem2, phys2)}
    assert started[phys1] < started[chem1] < started[chem2] < started[phys2]

    bio1 = _submit(client, users["biology"])
    bio2 = _submit(client, users["biology"])
    # biology holds nothing: below 0.25 x 0.8 from its first pass on, but not starving yet
    shares = _shares(client, operator)
    assert shares["biology"]["share"] == 0 and shares["biology"]["status"] == "below_fair_share"
    assert shares["biology"]["below_since"] is not None
    assert shares["physics"]["share"] == pytest.approx(0.5) and shares["physics"]["status"] == "normal"
    assert PreemptionDecision.objects.filter(preemptor_id=bio1).latest("id").code == "NOT_STARVING"
    waiting = _explain(client, users["biology"], bio1)["waiting"]
    assert "not been below its fair share long enough" in waiting["explanation"]

    # The starvation timeout passes: biology has been below its share for longer than that.
    TenantShare.objects.filter(resource_group=group, tenant__name="biology").update(
        below_since=F("below_since") - timedelta(seconds=STARVATION_S + 1))
    result = schedule_pass(group.pk)
    assert result.preempted == 1
    decision = PreemptionDecision.objects.get(preemptor_id=bio1, result="preempt")
    assert (decision.code, decision.trigger, decision.outcome) == ("PREEMPT", "fair_share", "executed")
    # newest start first among work above its tenant's share; within-share work is never taken
    assert [(v["id"], v["reason"], v["action"]) for v in decision.victims] == [
        (str(phys2), "fair_share", "checkpoint")]
    assert decision.nodes == list(Allocation.objects.get(pk=phys2).placements.values_list("node__name", flat=True))
    codes = {c["id"]: (c["verdict"], c["code"]) for c in decision.candidates}
    assert codes[str(phys1)] == ("ineligible", "WITHIN_FAIR_SHARE")
    assert codes[str(chem1)] == ("ineligible", "WITHIN_FAIR_SHARE")
    assert codes[str(chem2)][0] == "spared"
    assert codes[str(phys2)][0] == "victim"
    assert [_state(pk) for pk in (phys1, chem1, chem2, phys2)] == ["running", "running", "running", "checkpointing"]
    # one start by preemption per backoff window: the tenant's second request waits
    assert PreemptionDecision.objects.filter(preemptor_id=bio2).latest("id").code == "PREEMPTION_BACKOFF"
    assert _shares(client, operator)["biology"]["status"] == "starving"

    # the victim's agent reports its checkpoint; the next pass starts the preemptor on the freed node
    allocation_checkpoint_done(allocation=Allocation.objects.get(pk=phys2), ok=True, location="/ckpt", size_bytes=1)
    assert list(Allocation.objects.get(pk=phys2).events.order_by("id").values_list("to_state", flat=True)) == [
        "pending", "running", "checkpointing", "suspended", "pending"]
    schedule_pass(group.pk)
    bio = Allocation.objects.get(pk=bio1)
    assert bio.state == "running"
    assert list(bio.placements.values_list("node__name", flat=True)) == decision.nodes  # the victim's node
    assert Allocation.objects.get(pk=phys2).placements.count() == 0

    # what each tenant reads: the victim's tenant sees why, the preemptor's tenant is not named
    victim_view = _explain(client, users["physics"], phys2)
    assert victim_view["preemptions"][0]["id"] == decision.pk
    assert "biology" not in str(victim_view["preemptions"])
    assert "another tenant" in victim_view["preemptions"][0]["explanation"]
    chem_view = _explain(client, users["chemistry"], chem2)
    assert chem_view["preemptions"] == []
    assert _explain(client, users["biology"], bio1)["latest_decision"]["id"] == decision.pk

    # biology holds its share now (0.25 >= 0.2): no longer below, so its second request does not preempt
    schedule_pass(group.pk)
    row = TenantShare.objects.get(tenant__name="biology", resource_group=group)
    assert row.share == pytest.approx(0.25) and row.below_since is None
    assert PreemptionDecision.objects.filter(preemptor_id=bio2).latest("id").code == "NOT_STARVING"
    assert _state(bio2) == "pending"
