"""Backend.AI (priority kind) end to end on PostgreSQL: the project's and the user's priority
policies at admission (default, whether it may be changed, the range), then preemption of the
lowest-priority, oldest session in terminate mode, the victim's exit, and what each tenant reads."""

from __future__ import annotations

import pytest

from scheduling.actions.lifecycle import allocation_exited
from scheduling.models import Allocation, Membership, PreemptionDecision, Quota
from scheduling.passes.run import schedule_pass

from .seed_e2e import client_for, explain, nodes, states, submit, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_backendai_priorities_end_to_end(resource_group, vcluster_hpc, tenant_physics, tenant_chemistry):
    resource_group.policy = {"kind": "priority", "preemptible_priority": 5, "preemption_order": "oldest",
                             "mode": "terminate"}
    resource_group.save()
    # chemistry's project policy: everything at priority 3, and its users may not change it
    Quota.objects.filter(tenant=tenant_chemistry).update(default_priority=3, priority_changeable=False)
    # physics' project allows 0..50 with default 10; alice's own policy narrows it to at most 20
    Quota.objects.filter(tenant=tenant_physics).update(min_priority=0, max_priority=50)
    Membership.objects.filter(user__username="alice").update(max_priority=20)
    nodes(resource_group, vcluster_hpc, 1)
    alice, bob = client_for("alice"), client_for("bob")
    group = resource_group.pk

    refused = submit(bob, per_node={"gpu": 4}, priority=50)
    assert refused.status_code == 400 and "may not change the priority" in refused.json()["priority"][0]
    old = submitted(bob, per_node={"gpu": 4})  # no priority: the project's default
    schedule_pass(group)
    new = submitted(bob, per_node={"gpu": 4})
    schedule_pass(group)
    assert list(Allocation.objects.filter(pk__in=[old, new]).values_list("priority", "state")) == [
        (3, "running"), (3, "running")]
    assert bob.get(f"/api/v1/allocations/{old}/").json()["priority"] == 3

    too_high = submit(alice, per_node={"gpu": 4}, priority=30)  # within physics' 0..50, above alice's 20
    assert too_high.status_code == 400 and "0..20" in too_high.json()["priority"][0]
    urgent = submitted(alice, per_node={"gpu": 4}, priority=20)
    schedule_pass(group)

    # both of chemistry's sessions are at priority 3 <= preemptible_priority 5: the oldest goes
    decision = PreemptionDecision.objects.get(preemptor_id=urgent, code="PREEMPT")
    assert [(v["id"], v["action"]) for v in decision.victims] == [(str(old), "terminate")]
    assert {c["id"]: c["code"] for c in decision.candidates} == {str(old): "SELECTED", str(new): "NOT_NEEDED"}
    assert Allocation.objects.get(pk=old).state == "terminating"

    allocation_exited(allocation=Allocation.objects.get(pk=old), exit_code=143, reason="terminated")
    schedule_pass(group)
    assert Allocation.objects.get(pk=old).state == "preempted"  # terminate mode: stopped for good
    assert states(old) == [("", "pending"), ("pending", "running"), ("running", "terminating"),
                           ("terminating", "preempted")]
    assert (Allocation.objects.get(pk=urgent).state, Allocation.objects.get(pk=new).state) == ("running", "running")

    bob_view = explain(bob, old)
    assert bob_view["state"] == "preempted"
    assert bob_view["preemptions"][0]["preemptor_description"] == "a class-0 allocation of another tenant"
    assert bob_view["preemptions"][0]["trigger"] == "priority"
    # The decision that preempted, as alice reads it (her latest may be a later wait for the victim,
    # when a pass ran between the submission and the test's own).
    record = PreemptionDecision.objects.get(preemptor_id=urgent, code="PREEMPT")
    alice_view = alice.get(f"/api/v1/preemptions/{record.pk}/").json()
    assert alice_view["code"] == "PREEMPT" and "1 allocation" in alice_view["explanation"]


def test_priority_policy_is_edited_and_validated_by_field(resource_group, vcluster_hpc, tenant_physics, operator):
    nodes(resource_group, vcluster_hpc, 1)  # admission refuses work no node could hold
    op = client_for("op")
    bad = op.patch("/api/v1/quotas/physics/", {"default_priority": 60, "max_priority": 50, "reason": "try"},
                   content_type="application/json")
    assert bad.status_code == 400 and "default_priority" in bad.json()
    ok = op.patch("/api/v1/quotas/physics/", {"default_priority": 7, "priority_changeable": False,
                                               "reason": "project policy"}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["default_priority"] == 7
    entry = op.get("/api/v1/audit/?target_type=scheduling.quota").json()["results"][0]
    assert {"field": "default_priority", "before": 10, "after": 7} in entry["changes"]
    created = submitted(client_for("alice"), per_node={"gpu": 1})
    assert Allocation.objects.get(pk=created).priority == 7
    assert submit(client_for("alice"), per_node={"gpu": 1}, priority=7).status_code == 201  # the default itself


def test_a_members_priority_policy_is_edited_over_the_api_and_audited(resource_group, vcluster_hpc, tenant_physics,
                                                                       operator):
    nodes(resource_group, vcluster_hpc, 1)
    op = client_for("op")
    member = op.get("/api/v1/memberships/?tenant=physics").json()["results"]
    assert [(m["user"], m["max_priority"]) for m in member] == [("alice", None)]
    url = f"/api/v1/memberships/{member[0]['id']}/"
    bad = op.patch(url, {"min_priority": 30, "max_priority": 20, "reason": "try"}, content_type="application/json")
    assert bad.status_code == 400 and "min_priority" in bad.json()
    assert op.patch(url, {"max_priority": 101, "reason": "try"}, content_type="application/json").status_code == 400
    assert op.patch(url, {"max_priority": 20}, content_type="application/json").status_code == 400  # no reason
    ok = op.patch(url, {"max_priority": 20, "reason": "alice's own cap"}, content_type="application/json")
    assert ok.status_code == 200 and ok.json()["max_priority"] == 20
    entry = op.get("/api/v1/audit/?target_type=scheduling.membership").json()["results"][0]
    assert {"field": "max_priority", "before": None, "after": 20} in entry["changes"]
    assert entry["reason"] == "alice's own cap"
    alice = client_for("alice")
    assert "0..20" in submit(alice, per_node={"gpu": 1}, priority=30).json()["priority"][0]
    assert submit(alice, per_node={"gpu": 1}, priority=20).status_code == 201
    assert alice.get(url).status_code == 403
