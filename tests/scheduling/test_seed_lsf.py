"""LSF (queue kind) end to end on PostgreSQL: two tenants submit over REST, the real pass decides,
the victim reports through the action functions, and each tenant reads the explanation.

The rules at work: an exclusive job may not preempt unless PREEMPT_JOBTYPE lists it; a job started
or resumed within NO_PREEMPT_INTERVAL is not preempted; PREEMPT_FOR=OPTIMAL_MINI_JOB preempts the
fewest jobs; MAX_JOB_PREEMPT of the application (session type) wins over the cluster's (policy).
"""

from __future__ import annotations

import pytest

from scheduling.actions.preemption import allocation_checkpoint_done
from scheduling.models import Allocation, PreemptionDecision, Quota, SessionType
from scheduling.passes.run import schedule_pass

from .seed_e2e import client_for, explain, nodes, started_ago, states, submit, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_lsf_queues_end_to_end(resource_group, vcluster_hpc, tenant_physics, tenant_chemistry):
    resource_group.policy = {"kind": "queue", "mode": "suspend", "preempt_for": "optimal_mini_job",
                             "no_preempt_interval_minutes": 30, "max_preemptions_per_job": 1}
    resource_group.save()
    for name, priority, preemptive, limit in (("urgent", 90, True, None), ("mid", 20, False, 3),
                                              ("low", 10, False, None)):
        SessionType.objects.create(resource_group=resource_group, name=name, priority=priority,
                                   preemptive=preemptive, preemptable=not preemptive,
                                   max_preemptions_per_job=limit)
    nodes(resource_group, vcluster_hpc, 3)
    # exclusive jobs are the operator's leave to give (admission refuses them otherwise)
    Quota.objects.filter(tenant=tenant_physics).update(allow_exclusive=True)
    alice, bob = client_for("alice"), client_for("bob")
    group = resource_group.pk

    # chemistry fills the three nodes: two 4-GPU low jobs on gpu-a, one low job on gpu-b, one mid on gpu-c
    a1 = submitted(bob, session_type="low", per_node={"gpu": 4})
    a2 = submitted(bob, session_type="low", per_node={"gpu": 4})
    b1 = submitted(bob, session_type="low", per_node={"gpu": 8})
    schedule_pass(group)
    c1 = submitted(bob, session_type="mid", per_node={"gpu": 8})
    schedule_pass(group)
    assert set(Allocation.objects.values_list("state", flat=True)) == {"running"}
    for ident in (a1, a2, c1):
        started_ago(ident, 120)
    started_ago(b1, 10)  # started 10 minutes ago: within the 30-minute interval
    Allocation.objects.filter(pk=c1).update(preempted_count=1)  # preempted once before: the policy's limit

    # an exclusive urgent job may not preempt: the policy's preempt_jobtypes does not list exclusive
    excl = submitted(alice, session_type="urgent", per_node={"gpu": 8}, exclusive=True)
    schedule_pass(group)
    why = explain(alice, excl)["waiting"]
    assert (why["outcome"], why["code"]) == ("wait", "EXCLUSIVE_NOT_PREEMPTIVE")
    assert "exclusive" in why["explanation"]
    assert alice.post(f"/api/v1/allocations/{excl}/cancel/").status_code == 200

    # a plain urgent job preempts: a1+a2 (two jobs) would do, c1 alone does (the fewest);
    # b1 is inside the interval, and c1's type allows 3 preemptions where the policy allows 1
    urgent = submitted(alice, session_type="urgent", per_node={"gpu": 8})
    schedule_pass(group)
    decision = PreemptionDecision.objects.get(preemptor_id=urgent, code="PREEMPT")
    assert [v["id"] for v in decision.victims] == [str(c1)]
    assert decision.victims[0]["action"] == "checkpoint" and decision.nodes == ["gpu-c"]
    assert {c["id"]: c["code"] for c in decision.candidates} == {
        str(a1): "NOT_NEEDED", str(a2): "NOT_NEEDED", str(b1): "NO_PREEMPT_INTERVAL", str(c1): "SELECTED"}
    assert Allocation.objects.get(pk=c1).state == "checkpointing"

    # the victim's checkpoint report: suspended and requeued to resume; the next pass starts alice's job
    allocation_checkpoint_done(allocation=Allocation.objects.get(pk=c1), ok=True, location="/ckpt/c1")
    schedule_pass(group)
    assert Allocation.objects.get(pk=urgent).state == "running"
    assert list(Allocation.objects.get(pk=urgent).placements.values_list("node__name", flat=True)) == ["gpu-c"]
    victim = Allocation.objects.get(pk=c1)
    assert (victim.state, victim.preempted_count, victim.resume_from_checkpoint) == ("pending", 2, True)
    assert states(c1) == [("", "pending"), ("pending", "running"), ("running", "checkpointing"),
                          ("checkpointing", "suspended"), ("suspended", "pending")]

    # each tenant reads its own side: chemistry sees a preemptor of another tenant, by class only
    bob_view = explain(bob, c1)["preemptions"]
    assert len(bob_view) == 1 and bob_view[0]["preemptor_description"] == "a class-0 allocation of another tenant"
    assert bob_view[0]["victims"][0]["id"] == c1
    # The decision that preempted, as alice reads it (her latest may be a later wait for the victim,
    # when a pass ran between the submission and the test's own).
    record = PreemptionDecision.objects.get(preemptor_id=urgent, code="PREEMPT")
    alice_view = alice.get(f"/api/v1/preemptions/{record.pk}/").json()
    assert (alice_view["code"], alice_view["preemptor"]) == ("PREEMPT", urgent)
    assert alice_view["victims"] == [{"id": None, "tenant": "another tenant", "reason": "priority",
                                      "action": "checkpoint"}]
    assert bob.get(f"/api/v1/allocations/{urgent}/explain/").status_code == 404


def test_lsf_settings_are_validated_by_field(resource_group, vcluster_hpc, tenant_physics, operator):
    nodes(resource_group, vcluster_hpc, 1)  # admission refuses work no node could hold
    op = client_for("op")
    bad = op.put(f"/api/v1/resource-groups/{resource_group.name}/policy/",
                 {"policy": {"kind": "queue", "preempt_for": "mini", "no_preempt_interval_minutes": -5},
                  "reason": "try"}, content_type="application/json")
    assert bad.status_code == 400
    assert set(bad.json()["policy"]) == {"preempt_for", "no_preempt_interval_minutes"}
    st = SessionType.objects.create(resource_group=resource_group, name="q")
    bad = op.patch(f"/api/v1/session-types/{st.pk}/", {"max_preemptions_per_job": -1, "reason": "try"},
                   content_type="application/json")
    assert bad.status_code == 400 and "max_preemptions_per_job" in bad.json()
    ok = op.patch(f"/api/v1/session-types/{st.pk}/", {"max_preemptions_per_job": 2, "reason": "LSF app limit"},
                  content_type="application/json")
    assert ok.status_code == 200 and ok.json()["max_preemptions_per_job"] == 2
    entry = op.get("/api/v1/audit/?target_type=scheduling.sessiontype").json()["results"][0]
    assert {"field": "max_preemptions_per_job", "before": None, "after": 2} in entry["changes"]
    assert submit(client_for("alice"), per_node={"gpu": 1}).status_code == 201  # defaults unchanged
