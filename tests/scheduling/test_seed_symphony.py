"""Symphony (rank kind) end to end on PostgreSQL: sessions carry their own rank within their
session type's range (set at creation, as Symphony's session creation attributes allow), an
under-allocated tenant's preemptive session takes work of lower rank from an over-allocated one,
the victim exits and is requeued, and each tenant reads why."""

from __future__ import annotations

import pytest

from scheduling.actions.lifecycle import allocation_exited
from scheduling.models import Allocation, PreemptionDecision, SessionType
from scheduling.passes.run import schedule_pass

from .seed_e2e import client_for, explain, nodes, states, submit, submitted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_symphony_ranks_end_to_end(resource_group, vcluster_hpc, tenant_physics, tenant_chemistry):
    resource_group.policy = {"kind": "rank", "mode": "requeue"}
    resource_group.save()
    SessionType.objects.create(resource_group=resource_group, name="svc", rank=5, rank_min=1, rank_max=9,
                               preemptive=True, scope="lower")
    SessionType.objects.create(resource_group=resource_group, name="batch", rank=3, rank_min=1, rank_max=4)
    nodes(resource_group, vcluster_hpc, 2)
    alice, bob = client_for("alice"), client_for("bob")
    group = resource_group.pk

    refused = submit(bob, session_type="batch", per_node={"gpu": 8}, rank=5)
    assert refused.status_code == 400 and "1..4" in refused.json()["rank"][0]
    raised = submitted(bob, session_type="batch", per_node={"gpu": 8}, rank=4)   # its own rank 4
    plain = submitted(bob, session_type="batch", per_node={"gpu": 8})            # the type's rank 3
    schedule_pass(group)
    assert bob.get(f"/api/v1/allocations/{raised}/").json()["rank"] == 4
    assert set(Allocation.objects.filter(pk__in=[raised, plain]).values_list("state", flat=True)) == {"running"}

    # chemistry holds everything (share 1.0, fair share 0.5); physics holds nothing.
    # At rank 3 with scope "lower" nothing is below alice's session: it waits.
    low = submitted(alice, session_type="svc", per_node={"gpu": 8}, rank=3)
    schedule_pass(group)
    waiting = explain(alice, low)["waiting"]
    assert (waiting["outcome"], waiting["code"]) == ("wait", "NO_FEASIBLE_SET")

    # at rank 4 the type's-rank session (3) is below it and the rank-4 one is not
    high = submitted(alice, session_type="svc", per_node={"gpu": 8}, rank=4)
    schedule_pass(group)
    decision = PreemptionDecision.objects.get(preemptor_id=high, code="PREEMPT")
    assert [(v["id"], v["reason"], v["action"]) for v in decision.victims] == [(str(plain), "fair_share", "terminate")]
    assert {c["id"]: c["code"] for c in decision.candidates} == {str(raised): "RANK_NOT_LOWER",
                                                                 str(plain): "SELECTED"}
    assert Allocation.objects.get(pk=plain).state == "terminating"

    allocation_exited(allocation=Allocation.objects.get(pk=plain), exit_code=143, reason="terminated")
    schedule_pass(group)
    victim = Allocation.objects.get(pk=plain)
    assert (victim.state, victim.preempted_count, victim.rank) == ("pending", 1, None)
    assert states(plain) == [("", "pending"), ("pending", "running"), ("running", "terminating"),
                             ("terminating", "pending")]
    assert Allocation.objects.get(pk=high).state == "running"
    assert Allocation.objects.get(pk=low).state == "pending"

    bob_view = explain(bob, plain)["preemptions"]
    assert bob_view[0]["preemptor_description"] == "a class-0 allocation of another tenant"
    assert bob_view[0]["victims"][0]["id"] == plain and bob_view[0]["trigger"] == "fair_share"
    # The decision that preempted, as alice reads it (her latest may be a later wait for the victim,
    # when a pass ran between the submission and the test's own).
    record = PreemptionDecision.objects.get(preemptor_id=high, code="PREEMPT")
    alice_view = alice.get(f"/api/v1/preemptions/{record.pk}/").json()
    assert alice_view["code"] == "PREEMPT" and alice_view["victims"][0]["tenant"] == "another tenant"


def test_rank_range_is_edited_and_validated_by_field(resource_group, vcluster_hpc, tenant_physics, operator):
    nodes(resource_group, vcluster_hpc, 1)  # admission refuses work no node could hold
    op = client_for("op")
    st = SessionType.objects.create(resource_group=resource_group, name="svc", rank=5)
    bad = op.patch(f"/api/v1/session-types/{st.pk}/", {"rank_min": 6, "reason": "try"},
                   content_type="application/json")
    assert bad.status_code == 400 and "rank_min" in bad.json()
    ok = op.patch(f"/api/v1/session-types/{st.pk}/", {"rank_min": 2, "rank_max": 8, "reason": "let users pick"},
                  content_type="application/json")
    assert ok.status_code == 200 and (ok.json()["rank_min"], ok.json()["rank_max"]) == (2, 8)
    alice = client_for("alice")
    assert submit(alice, session_type="svc", per_node={"gpu": 1}, rank=8).status_code == 201
    assert "rank" in submit(alice, session_type="svc", per_node={"gpu": 1}, rank=9).json()
    assert "rank" in submit(alice, per_node={"gpu": 1}, rank=2).json()  # no session type: rank 1 only
